//! The stand-in API server as a process, for trying a script written for a real cluster (such
//! as `scripts/e2e-kubernetes`) without one: `cargo run -p kube-standin --example serve --
//! KUBECONFIG_PATH` writes a kubeconfig there, prints `ready`, and serves until its standard
//! input closes.

#![allow(clippy::print_stdout, reason = "an example prints what it serves")]

use std::io::Read;

fn main() -> std::io::Result<()> {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: serve KUBECONFIG_PATH");
        std::process::exit(2);
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let standin = rt.block_on(kube_standin::StandIn::start())?;
    std::fs::write(&path, standin.kubeconfig())?;
    println!("ready: {} (kubeconfig in {path})", standin.url());
    // Until whoever started it closes our standard input (or goes).
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    if let Err(invalid) = standin.validate_received() {
        eprintln!("objects that fail the official schemas:\n{invalid}");
    }
    rt.block_on(standin.stop());
    Ok(())
}
