//! The ingress process a server starts or adopts (`<data>/ingress/`), and the keeper that
//! starts it again when it stops answering.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use runway_ingress::control::{ControlClient, Listen, RemoteIngress, RemoteOptions};
use runway_ingress::daemon::{IngressCommand, Launch, Outcome};
use tokio::sync::watch;

use crate::config::ServerConfig;
use crate::driver::Drivers;

/// The ingress process a start found or made.
#[derive(Debug, Clone)]
pub struct IngressProcess {
    pub pid: u32,
    pub outcome: Outcome,
    /// Where it listens.
    pub bound: Listen,
    state_dir: PathBuf,
    shutdown_grace: Duration,
}

impl IngressProcess {
    /// Stops the ingress process (it lets in-flight requests finish first) and waits for it
    /// to end, at most its grace and a margin: for `runway quickstart`, whose data plane goes
    /// with it, once its control plane has stopped (so nothing watching it reports it lost).
    /// `runway server` never does, so the data plane outlives it.
    pub async fn stop(&self) -> anyhow::Result<()> {
        let client = ControlClient::new(&self.state_dir);
        // The one answering now: the keeper may have started another since this one started.
        let pid = client.hello().await.map_or(self.pid, |hello| hello.pid);
        client
            .stop()
            .await
            .with_context(|| format!("cannot stop the ingress (pid {pid})"))?;
        let bound = self.shutdown_grace + INGRESS_STOP_MARGIN;
        let deadline = tokio::time::Instant::now() + bound;
        while runway_runtime::process::alive(pid) {
            if tokio::time::Instant::now() >= deadline {
                // Its whole group (the supervisor and its worker): nothing is left behind.
                let group = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(
                    i32::try_from(pid).unwrap_or(i32::MAX),
                )));
                let killed = group.and_then(|group| {
                    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL)
                });
                bail!(
                    "the ingress (pid {pid}) did not stop within {bound:?}; {}",
                    match killed {
                        Ok(()) => "killed it".to_owned(),
                        Err(error) => format!("cannot kill it: {error}"),
                    }
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

/// Past the ingress's shutdown grace, the time its process gets to exit.
const INGRESS_STOP_MARGIN: Duration = Duration::from_secs(5);

/// The address instances reach the platform at (the private listener, the resolver), as the
/// chosen driver says: none in the host's network or on a cluster.
pub(crate) fn platform_address(
    config: &ServerConfig,
    drivers: &Drivers,
) -> Option<std::net::Ipv4Addr> {
    drivers
        .find(config.runtime.kind.as_str())?
        .platform_address(&config.runtime)
}

/// The ingress of this data directory (`<data>/ingress/`), running as configured: adopted
/// when one runs there already with the same addresses and build, else started (replacing
/// the one there, if any).
pub(crate) async fn ingress_ensure(
    config: &ServerConfig,
    drivers: &Drivers,
    data_dir: &Path,
    ca_dir: &Path,
) -> anyhow::Result<(RemoteIngress, IngressProcess, Launch)> {
    let state_dir = data_dir.join("ingress");
    let shutdown_grace = Duration::from_millis(config.ingress.shutdown_grace_ms);
    let launch = Launch {
        command: ingress_command()?,
        state_dir: state_dir.clone(),
        listen: Listen {
            dns_upstreams: config
                .runtime
                .egress
                .dns_upstreams()
                .map_err(|message| anyhow::anyhow!(message))?,
            ..config.ingress.listen(platform_address(config, drivers))
        },
        ca_dir: ca_dir.to_owned(),
        shutdown_grace,
        start_timeout: Duration::from_millis(config.ingress.start_timeout_ms.max(1)),
    };
    let (remote, outcome) =
        runway_ingress::daemon::ensure(&launch, config.ingress.remote_options())
            .await
            .context("cannot start the ingress")?;
    let process = IngressProcess {
        pid: remote.hello().pid,
        outcome,
        bound: remote.hello().bound.clone(),
        state_dir,
        shutdown_grace,
    };
    Ok((remote, process, launch))
}

/// How often the server checks that the ingress answers on its control socket.
const INGRESS_CHECK: Duration = Duration::from_secs(1);
/// Checks in a row that may fail before the server starts the ingress again.
const INGRESS_CHECKS_FAILED: u32 = 3;

/// Starts the ingress again, on its saved table, when it stops answering (killed, or its
/// supervisor's worker dying again and again before it serves), or replaces it when its
/// supervisor is gone (killed: the worker serves on alone, and a crash of it would be the
/// end): the same path as a server's start. A crash of the worker alone is not seen here: the
/// supervisor starts another at once. Its handle in the controller reaches the new one
/// through the same socket path. Returns when the server stops.
pub(crate) async fn keep_ingress(
    launch: Launch,
    options: RemoteOptions,
    mut stopped: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut client = ControlClient::new(&launch.state_dir);
    client.timeout = options.timeout;
    let mut failed = 0;
    let mut ticks = tokio::time::interval(INGRESS_CHECK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stopped.wait_for(|stop| *stop) => return Ok(()),
        }
        let alone = match client.hello().await {
            Ok(hello) if hello.worker.is_some() => {
                failed = 0;
                continue;
            }
            Ok(hello) => Some(hello.pid),
            Err(_) => None,
        };
        if alone.is_none() {
            failed += 1;
            if failed < INGRESS_CHECKS_FAILED {
                continue;
            }
        }
        failed = 0;
        match (
            runway_ingress::daemon::ensure(&launch, options.clone()).await,
            alone,
        ) {
            (Ok((remote, _)), Some(old)) => tracing::warn!(
                worker = old,
                pid = remote.hello().pid,
                "the ingress's supervisor is gone; its worker was replaced by a supervised ingress"
            ),
            (Ok((remote, _)), None) => tracing::warn!(
                pid = remote.hello().pid,
                "the ingress stopped answering; started it again on its saved table"
            ),
            (Err(error), Some(old)) => tracing::error!(
                worker = old,
                error = runway_log::chain(&error),
                "the ingress's supervisor is gone and its worker cannot be replaced"
            ),
            (Err(error), None) => tracing::error!(
                error = runway_log::chain(&error),
                "the ingress stopped answering and cannot be started again"
            ),
        }
    }
}

/// The small ingress binary installed beside this one when it is of this build; else this
/// binary's own `ingress`.
fn ingress_command() -> anyhow::Result<IngressCommand> {
    let (program, args) =
        crate::beside::beside_or_own("runway-ingress", "ingress", Some(runway_ingress::version()))?;
    Ok(IngressCommand { program, args })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drivers;

    /// `ingress.cloudflare_ranges_file` is read at load, a bad line named; the ingress this
    /// server starts gets it, and instances' private listener and resolver on the platform
    /// address, unless instances run in the host's network.
    #[test]
    fn the_ingress_gets_the_platform_address_and_the_cloudflare_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let ranges = dir.path().join("cloudflare.txt");
        let path = dir.path().join("server.yml");
        std::fs::write(&ranges, "# Cloudflare\n173.245.48.0/20\n2400:cb00::/32\n").unwrap();
        let text = format!("ingress:\n  cloudflare_ranges_file: {}\n", ranges.display());
        std::fs::write(&path, &text).unwrap();
        let config = ServerConfig::load(Some(&path)).unwrap();
        let listen = config.ingress.listen(platform_address(&config, &drivers()));
        assert_eq!(listen.cloudflare_ranges.as_deref(), Some(ranges.as_path()));
        assert_eq!(listen.private, Some("10.213.0.1:80".parse().unwrap()));
        assert_eq!(listen.dns, Some("10.213.0.1:53".parse().unwrap()));

        let host = format!("{text}runtime:\n  instance_network: host\n");
        std::fs::write(&path, host).unwrap();
        let config = ServerConfig::load(Some(&path)).unwrap();
        let listen = config.ingress.listen(platform_address(&config, &drivers()));
        assert_eq!((listen.private, listen.dns), (None, None));

        std::fs::write(&ranges, "173.245.48.0/20\n173.245.48.1/20\n").unwrap();
        std::fs::write(&path, &text).unwrap();
        let error = format!("{:#}", ServerConfig::load(Some(&path)).unwrap_err());
        assert!(error.contains("ingress.cloudflare_ranges_file"), "{error}");
        assert!(error.contains("cloudflare.txt:2: "), "{error}");
        std::fs::remove_file(&ranges).unwrap();
        let error = format!("{:#}", ServerConfig::load(Some(&path)).unwrap_err());
        assert!(
            error.contains("cannot read the Cloudflare ranges file"),
            "{error}"
        );
    }

    /// `ingress.tracing` reaches the ingress this server starts; a bad endpoint, ratio or
    /// ceiling is refused at load, naming its key.
    #[test]
    fn tracing_and_the_traffic_ceiling_are_checked_and_passed_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.yml");
        let load = |text: &str| {
            std::fs::write(&path, text).unwrap();
            ServerConfig::load(Some(&path)).map_err(|e| format!("{e:#}"))
        };
        let config = load(
            "ingress:\n  tracing:\n    otlp_endpoint: http://127.0.0.1:4318\n    \
             sample_ratio: 0.25\n  traffic:\n    per_client: {requests_per_second: 5, burst: 10}\n",
        )
        .unwrap();
        let listen = config.ingress.listen(None);
        let traces = listen.traces.unwrap();
        assert_eq!(
            (traces.endpoint.as_str(), traces.sample_ratio),
            ("http://127.0.0.1:4318", 0.25)
        );
        for (text, says) in [
            (
                "ingress:\n  tracing:\n    otlp_endpoint: 127.0.0.1:4318\n",
                "ingress.tracing.otlp_endpoint",
            ),
            (
                "ingress:\n  tracing:\n    otlp_endpoint: http://c:4318\n    sample_ratio: 2\n",
                "ingress.tracing.sample_ratio",
            ),
            (
                "ingress:\n  traffic:\n    per_client: {requests_per_second: 0, burst: 1}\n",
                "ingress.traffic.per_client: requests_per_second",
            ),
        ] {
            let error = load(text).unwrap_err();
            assert!(error.contains(says), "{says}: {error}");
        }
    }
}
