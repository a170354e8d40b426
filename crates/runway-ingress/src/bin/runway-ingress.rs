//! `runway-ingress`: the ingress on its own process, with its route table from a file
//! (reloaded on SIGHUP), or fed by a control plane over its control socket (`--state-dir`).
//! See `runway_ingress::daemon`.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    runway_ingress::daemon::main(runway_ingress::daemon::Args::parse())
}
