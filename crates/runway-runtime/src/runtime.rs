//! The runtime interface: what the control plane asks of whatever runs instances. The local
//! driver ([`crate::local::LocalRuntime`]) runs them on this machine; a Kubernetes driver can
//! implement the same calls with pods.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;

use crate::logs::LogLine;
use crate::spec::InstanceSpec;
use crate::status::InstanceStatus;

/// Runs instances. Every call is idempotent: `instance_ensure` of a running instance returns its
/// status, `instance_stop` of a stopped one too, and a new driver finds instances an earlier
/// one started.
pub trait Runtime {
    /// Starts the instance unless it already runs. A spec with port `Some(0)` is given a free
    /// port, set in `PORT` and checked by its probes.
    fn instance_ensure(
        &self,
        spec: InstanceSpec,
    ) -> impl Future<Output = Result<InstanceStatus, RuntimeError>> + Send;

    /// Stops the instance with its stop signal and grace period, and waits until it has.
    fn instance_stop(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<InstanceStatus, RuntimeError>> + Send;

    /// Stops the instance if it runs and forgets it, output included.
    fn instance_remove(&self, id: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    /// Every instance this runtime knows, running or not.
    fn instances(&self) -> impl Future<Output = Result<Vec<InstanceStatus>, RuntimeError>> + Send;

    /// The instance's status, updated as it changes.
    fn watch(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<watch::Receiver<InstanceStatus>, RuntimeError>> + Send;

    /// The last `lines` lines of the instance's output.
    fn logs(
        &self,
        id: &str,
        lines: usize,
    ) -> impl Future<Output = Result<Vec<LogLine>, RuntimeError>> + Send;
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("no instance {0:?}")]
    NotFound(String),
    #[error(
        "invalid instance id {0:?}: expected 1 to 128 letters, digits, '-', '_' or '.', not starting with '.'"
    )]
    InvalidId(String),
    #[error("instance {id}: {message}")]
    Supervisor { id: String, message: String },
    #[error("instance {id}: {message}")]
    Artifact { id: String, message: String },
    #[error("image {reference}: {message}")]
    Image { reference: String, message: String },
    #[error("instance {id}: {what} did not finish within {after:?}")]
    Timeout {
        id: String,
        what: &'static str,
        after: Duration,
    },
    #[error("cannot use {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl RuntimeError {
    pub(crate) fn io(path: &Path, source: io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            source,
        }
    }
}
