//! Starts a cluster and keeps it until interrupted: for trying the driver, or kubectl, by hand.
//!
//! `cargo run -p kube-cluster --example serve`, then `KUBECONFIG=<printed path> kubectl ...`.

#![allow(clippy::print_stderr, reason = "an example")]

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), kube_cluster::Error> {
    let cluster = kube_cluster::Cluster::start().await?;
    eprintln!(
        "cluster up in {:?}\nexport KUBECONFIG={}\nexport PATH={}:$PATH",
        cluster.started_in(),
        cluster.admin_kubeconfig().display(),
        cluster.bin().display()
    );
    let _ = tokio::signal::ctrl_c().await;
    cluster.stop();
    Ok(())
}
