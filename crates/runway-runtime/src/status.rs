//! What an instance is doing, as its supervisor reports it.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// An instance's state. Pushed by the supervisor on every change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceStatus {
    pub id: String,
    /// The service it runs, from its spec. `None` only from a supervisor older than this
    /// field whose `spec.json` cannot be read.
    #[serde(default)]
    pub service: Option<String>,
    /// The revision it runs, from its spec (`None` as for `service`).
    #[serde(default)]
    pub revision: Option<String>,
    /// Started by the control plane ([`InstanceSpec::managed`](crate::InstanceSpec::managed)).
    /// A developer's `runway run` instance is not, and the control plane leaves it alone.
    #[serde(default)]
    pub managed: bool,
    pub phase: Phase,
    /// Passing its readiness probe (or, without one, its startup probe): may take traffic.
    pub ready: bool,
    /// The process (for a container, its init process) while one runs.
    pub pid: Option<u32>,
    /// The port it listens on.
    pub port: Option<u16>,
    /// Where it is reached: its own network's address and its port. `None` from a supervisor
    /// older than this field, whose instance shares the host's network (see
    /// [`InstanceStatus::reached_at`]).
    #[serde(default)]
    pub address: Option<SocketAddr>,
    /// Times it was started again after ending.
    pub restarts: u32,
    /// Times in a row it ended (failing or not) without running the restart policy's
    /// `reset_after`.
    pub consecutive_failures: u32,
    /// When the current process started, in milliseconds since the Unix epoch.
    pub started_at_ms: Option<u64>,
    /// When the next start is due, while backing off.
    pub next_start_at_ms: Option<u64>,
    /// Why the instance is in this phase, for people.
    pub message: String,
    /// What its owner should know while it starts and nothing has failed yet: it listens on
    /// another port than its `PORT`, so its startup probe will fail. Cleared once started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// How the last process ended.
    pub last_exit: Option<ExitRecord>,
    /// Output that was read from the instance and not written to its log files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_output: Option<crate::logs::Dropped>,
    /// The pid of the supervisor itself.
    pub supervisor_pid: u32,
}

impl InstanceStatus {
    /// Where the instance takes traffic: its address, or (from an older supervisor) the
    /// host's loopback at its port.
    pub fn reached_at(&self) -> Option<SocketAddr> {
        self.address.or_else(|| {
            self.port
                .map(|port| SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
        })
    }
}

// The lifecycle and how a process ended are the driver seam's, shared with every driver.
pub use runway_driver::{ExitRecord, Phase};

pub use runway_driver::now_ms;

pub(crate) fn to_ms(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis()
        .try_into()
        .unwrap_or(u64::MAX)
}
