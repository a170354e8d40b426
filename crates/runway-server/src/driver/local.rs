//! `runtime.kind: local` (the default): instances on this machine, each under its own
//! supervisor, as processes or runc containers (`runway_runtime::LocalDriver`).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use runway_runtime::network::AddressPool;
use runway_runtime::{
    LocalConfig, LocalDriver, LocalDriverOptions, LocalRuntime, SupervisorCommand,
};

use super::settings::RuntimeConfig;
use super::{BoxFuture, DriverKind, ServerDriver, Start};
use crate::registry::PlatformRegistry;

/// The code snapshots' directory in a server's data directory.
pub const SOURCES_DIR: &str = "sources";

/// This machine's driver.
#[derive(Debug, Clone, Copy)]
pub struct Local;

impl DriverKind for Local {
    fn name(&self) -> &'static str {
        "local"
    }

    fn build<'a>(&'a self, start: &'a Start<'a>) -> BoxFuture<'a, anyhow::Result<ServerDriver>> {
        Box::pin(async move {
            let config = start.runtime;
            let runtime = Arc::new(
                runtime_with(
                    start.data_dir.join("runtime"),
                    &config.insecure_registries,
                    &config.allowed_registries,
                    &config.oci_runtime,
                    config
                        .address_pool()
                        .map_err(|e| anyhow::anyhow!("runtime.instance_network: {e}"))?,
                    start.registry,
                )?
                .with_seccomp(config.seccomp_policy()),
            );
            // Private first, then the way through opened.
            runtime
                .create_state_dirs()
                .context("cannot prepare the runtime's state directory")?;
            Ok(ServerDriver::new(LocalDriver::new(
                runtime,
                LocalDriverOptions {
                    sandbox: config.sandbox_policy(),
                    snapshots: Some(start.sources.root().to_owned()),
                },
            )))
        })
    }

    /// The one platform instances run here.
    fn mirrored_platforms(&self) -> runway_oci::Platforms {
        runway_oci::Platforms::Selected
    }

    /// The first of `runtime.instance_network`'s range; none in the host's network.
    fn platform_address(&self, runtime: &RuntimeConfig) -> Option<Ipv4Addr> {
        let pool = runtime.address_pool().ok().flatten()?;
        Some(pool.platform_address())
    }
}

/// A local runtime keeping its state under `root` (the control plane's is its data
/// directory's `runtime/`), pulling from `insecure_registries` over plain HTTP and running
/// containers with `oci_runtime` (`runway server`'s `runtime` section); and from the platform
/// `registry`, with the platform's pull credential, when images are mirrored into it.
fn runtime_with(
    root: PathBuf,
    insecure_registries: &[String],
    allowed_registries: &[String],
    oci_runtime: &Path,
    instance_network: Option<AddressPool>,
    registry: Option<&PlatformRegistry>,
) -> anyhow::Result<LocalRuntime> {
    if let Some(pool) = &instance_network {
        AddressPool::check_tools().map_err(|missing| {
            anyhow::anyhow!(
                "{missing}: runtime.instance_network gives every instance a network of its own, \
                 which needs them (install iproute2, or set instance_network: host)"
            )
        })?;
        if let Some(firewall) = pool.firewall() {
            runway_runtime::firewall::Firewall::check_tools().map_err(|missing| {
                anyhow::anyhow!(
                    "{missing}: instances on their own networks reach the world through the \
                     platform's firewall, which needs it (install nftables, or set \
                     runtime.instance_network: host)"
                )
            })?;
            firewall.install().map_err(|why| {
                anyhow::anyhow!("cannot set up the instances' firewall (runtime.egress): {why}")
            })?;
        }
    }
    let mut config = LocalConfig::new(root, supervisor_command()?);
    config.pull.insecure_registries = insecure_registries.to_vec();
    config.pull.allowed_registries = Some(allowed_registries.to_vec());
    if let Some(registry) = registry {
        config.pull = registry.pull_options(config.pull);
    }
    // The server's data directory: the store, the master key, the CA's key; and in it, the
    // code snapshots processes run from.
    let data_dir = config.root.parent().map(Path::to_path_buf);
    config.code_snapshots = data_dir.as_ref().map(|dir| dir.join(SOURCES_DIR));
    config.private_dirs = data_dir.into_iter().collect();
    config.oci_runtime = oci_runtime.to_path_buf();
    config.instance_network = instance_network;
    Ok(LocalRuntime::new(config))
}

/// The supervisor instances run under: `runway-supervisor` beside this binary, else this
/// binary's own `supervise`.
pub fn supervisor_command() -> anyhow::Result<SupervisorCommand> {
    let (program, args) = crate::beside::beside_or_own("runway-supervisor", "supervise", None)?;
    Ok(SupervisorCommand { program, args })
}
