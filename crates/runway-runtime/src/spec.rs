//! What an instance is asked to be: the artifact, its environment, probes, stop and restart
//! rules and log limits. A supervisor receives it whole and keeps the instance to it.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::network::InstanceNetwork;
use crate::process::StopSignal;
use crate::sandbox::Sandbox;

/// One instance of a revision of a service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceSpec {
    /// Unique on the machine; also the container's id. Letters, digits, `-`, `_` and `.`.
    pub id: String,
    pub service: String,
    pub revision: String,
    pub artifact: Artifact,
    /// The instance's whole environment, `PORT` and `K_REVISION` included: nothing of the
    /// supervisor's own is added (a process without `PATH` here gets [`DEFAULT_PATH`]; an image
    /// has its own variables under these), unless [`InstanceSpec::inherit_env`].
    pub env: BTreeMap<String, String>,
    /// Secrets injected as environment variables. Never written to disk nor shown.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_env: BTreeMap<String, String>,
    /// The port the instance listens on, which probes check. `Some(0)` asks the runtime for
    /// one: [`InstanceSpec::container_port`] on a network of its own, else a free one.
    pub port: Option<u16>,
    /// The port the app expects (the manifest's `container_port`): what it gets in `PORT` when
    /// it has a network of its own, where no other instance can hold it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_port: Option<u16>,
    pub probes: Probes,
    #[serde(with = "signal_name")]
    pub stop_signal: StopSignal,
    #[serde(with = "millis")]
    pub stop_grace_period: Duration,
    pub restart: RestartPolicy,
    pub limits: Limits,
    pub logs: LogLimits,
    /// Started by the control plane, so that it can tell its instances, through
    /// [`InstanceStatus::managed`](crate::InstanceStatus::managed), from a developer's own on
    /// the same machine, even after their revision is gone from its store.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub managed: bool,
    /// A plain process starts with the environment of whoever started its supervisor under
    /// [`InstanceSpec::env`]: for `runway run` on a developer's own machine, never for the
    /// control plane's instances.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inherit_env: bool,
    /// Run a plain process isolated ([`crate::sandbox`]); images are isolated anyway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Sandbox>,
    /// A network of its own ([`crate::network`]), given by the runtime to a container when
    /// its configuration has an address pool; `None` shares the host's network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<InstanceNetwork>,
    /// What it may reach outside the platform, when it has a network of its own behind the
    /// platform's firewall ([`crate::firewall`]).
    #[serde(default)]
    pub egress: runway_manifest::EgressConfig,
    /// Its identity token: written by the runtime to a file the instance reads
    /// (`$RUNWAY_IDENTITY_TOKEN_FILE`), renewed there ([`crate::local::LocalRuntime::renew_identity`]);
    /// never in the spec the supervisor keeps.
    #[serde(skip)]
    pub identity_token: Option<String>,
}

/// The variable that marked the control plane's instances in their environment before
/// [`InstanceSpec::managed`]; still read from the specs of instances started then.
pub const LEGACY_MANAGED_ENV: &str = "RUNWAY_MANAGED";

/// `PATH` for a process whose spec sets none and does not inherit one: an image's default.
pub const DEFAULT_PATH: &str = runway_oci::DEFAULT_PATH;

impl InstanceSpec {
    /// Whether the control plane started it.
    pub fn is_managed(&self) -> bool {
        self.managed
            || self
                .env
                .get(LEGACY_MANAGED_ENV)
                .is_some_and(|value| value == "1")
    }

    /// Where the instance is reached on its port: its own network's address, or the host's
    /// loopback when it shares the host's network.
    pub fn address(&self) -> Option<SocketAddr> {
        let ip = self
            .network
            .as_ref()
            .map_or(Ipv4Addr::LOCALHOST, |network| network.address);
        self.port.map(|port| SocketAddr::new(IpAddr::V4(ip), port))
    }

    /// The `PATH` the instance's program is looked up on: its own, or the supervisor's when
    /// it inherits that, or [`DEFAULT_PATH`].
    pub fn search_path(&self) -> String {
        match self.env.get("PATH") {
            Some(path) => path.clone(),
            None if self.inherit_env => std::env::var("PATH").unwrap_or_default(),
            None => DEFAULT_PATH.to_owned(),
        }
    }
}

/// What runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Artifact {
    /// A plain process.
    Command {
        program: PathBuf,
        args: Vec<String>,
        working_dir: Option<PathBuf>,
    },
    /// An OCI image, pulled and made into a [`Artifact::Container`] bundle by the runtime before
    /// a supervisor sees it. Settings follow Kubernetes: `command` replaces the image's
    /// entrypoint, `args` its default arguments.
    Image {
        reference: String,
        command: Option<Vec<String>>,
        args: Option<Vec<String>>,
        working_dir: Option<PathBuf>,
    },
    /// An OCI bundle run by an OCI runtime such as runc.
    Container {
        /// The directory holding `config.json`.
        bundle: PathBuf,
        /// The OCI runtime's binary (`runc`, `crun`).
        oci_runtime: PathBuf,
        /// The image the bundle was made from, pinned by digest.
        image: String,
        /// The cgroup the OCI runtime puts the container in, as written in `config.json`.
        cgroup_path: Option<String>,
    },
}

/// Startup, readiness and liveness probes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probes {
    pub startup: Option<Probe>,
    pub readiness: Option<Probe>,
    pub liveness: Option<Probe>,
}

/// One probe with its timing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    pub check: Check,
    #[serde(with = "millis")]
    pub initial_delay: Duration,
    #[serde(with = "millis")]
    pub period: Duration,
    #[serde(with = "millis")]
    pub timeout: Duration,
    pub failure_threshold: u32,
    pub success_threshold: u32,
}

/// What one probe check does, on the instance's port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Check {
    /// `GET http://127.0.0.1:PORT/PATH`; 2xx and 3xx pass.
    Http { path: String },
    /// A TCP connection to `127.0.0.1:PORT`.
    Tcp,
    /// `grpc.health.v1.Health/Check` on `127.0.0.1:PORT`; SERVING passes.
    Grpc { service: String },
}

/// When an instance that ended is started again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartPolicy {
    pub mode: RestartMode,
    /// The wait before the second restart in a row (the first is at once); doubled after each
    /// failure in a row.
    #[serde(with = "millis")]
    pub initial_backoff: Duration,
    #[serde(with = "millis")]
    pub max_backoff: Duration,
    /// An instance that ran this long without failing starts its backoff again from the first
    /// wait.
    #[serde(with = "millis")]
    pub reset_after: Duration,
    /// Failures in a row after which the instance is reported as crash-looping.
    pub crash_loop_after: u32,
}

impl Default for RestartPolicy {
    /// Kubernetes's: the first restart at once, then 10 s doubling up to 5 minutes, reset
    /// after 10 minutes of running.
    fn default() -> Self {
        Self {
            mode: RestartMode::Always,
            initial_backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(300),
            reset_after: Duration::from_secs(600),
            crash_loop_after: 3,
        }
    }
}

impl RestartPolicy {
    /// The wait before restart number `failures` (1 for the first failure in a row): none for
    /// the first, so one crash leaves the service short of an instance only as long as its
    /// start takes.
    pub fn backoff(&self, failures: u32) -> Duration {
        if failures <= 1 {
            return Duration::ZERO;
        }
        let doublings = failures.saturating_sub(2).min(31);
        self.initial_backoff
            .saturating_mul(1 << doublings)
            .min(self.max_backoff)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestartMode {
    /// Whatever the exit: services.
    Always,
    /// Only after a failure (a non-zero exit, a signal, a failed probe).
    OnFailure,
    /// Never: the instance ends when its process does.
    Never,
}

/// Resource limits. Enforced by the OCI runtime's cgroups for containers; for commands, see the
/// crate documentation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub memory_bytes: Option<u64>,
    pub cpu_millis: Option<u64>,
}

/// How much output is kept per instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLimits {
    /// A log file is rotated when it would grow past this.
    pub max_file_bytes: u64,
    /// Rotated files kept besides the current one.
    pub max_files: u32,
    /// Output read per second, on average over [`LogLimits::burst_bytes`]: what an instance
    /// prints past it is read and dropped, and counted, so that a flood costs its supervisor
    /// (on the host, outside the instance's CPU limit) little.
    #[serde(default = "default_bytes_per_second")]
    pub bytes_per_second: u64,
    /// Output an instance may print at once above [`LogLimits::bytes_per_second`].
    #[serde(default = "default_burst_bytes")]
    pub burst_bytes: u64,
}

fn default_bytes_per_second() -> u64 {
    LogLimits::default().bytes_per_second
}

fn default_burst_bytes() -> u64 {
    LogLimits::default().burst_bytes
}

impl Default for LogLimits {
    fn default() -> Self {
        Self {
            max_file_bytes: 10 * 1024 * 1024,
            max_files: 3,
            bytes_per_second: 1024 * 1024,
            burst_bytes: 8 * 1024 * 1024,
        }
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(value.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

mod signal_name {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    use crate::process::StopSignal;

    pub(super) fn serialize<S: Serializer>(value: &StopSignal, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<StopSignal, D::Error> {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_restart_is_at_once_then_backoff_doubles_up_to_the_maximum() {
        let policy = RestartPolicy {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            ..RestartPolicy::default()
        };
        let waits: Vec<u64> = (1..=7).map(|n| policy.backoff(n).as_secs()).collect();
        assert_eq!(waits, [0, 1, 2, 4, 8, 10, 10]);
        assert_eq!(policy.backoff(u32::MAX), Duration::from_secs(10));
    }
}
