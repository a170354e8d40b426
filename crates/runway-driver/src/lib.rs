//! The seam between Runway's control plane and what runs its services.
//!
//! The control plane asks a [`Driver`] for **revision workloads**: "revision R of service S in
//! environment E, from this [`Workload`], with N replicas" ([`Driver::scale`]). The driver
//! reports each replica's phase, readiness, address, restarts and why it failed
//! ([`Replica`]), wakes the control plane when any of that changes ([`Driver::changes`]),
//! serves the replicas' output ([`Driver::logs`], [`Driver::follow`]) and pins an image
//! reference to its digest ([`Driver::resolve_image`]).
//!
//! Nothing here names a port on this machine, a pid, a host path or a container runtime: the
//! local driver (`runway_runtime::driver`) runs a workload's replicas as supervised processes
//! or containers on this machine; a Kubernetes driver as a Deployment per revision. What a
//! revision runs is its manifest's settings ([`ServiceConfig`]) with what was pinned at deploy
//! (an image digest, a code snapshot), so every driver builds its own objects from the same
//! settings, and a Kubernetes driver links neither runc nor an image store nor a supervisor.
//!
//! # The trait
//!
//! `Driver` asks for a revision workload ("revision R of S in E, from these settings, with N
//! replicas"), and offers `scale` (with the replicas to retire first), `retire`, `remove`,
//! `revisions` (what the driver keeps besides replicas, for a new control plane to collect),
//! `replicas`, `changes`, `logs`, `follow` and `resolve_image`. Its neutral types: `Workload`,
//! whose settings are the manifest's `ServiceConfig` with the pinned image or code snapshot and
//! the secrets' values, and `Replica`, with its phase, readiness, `SocketAddr`, restarts and
//! `ExitRecord`. This crate does no I/O of its own.
//!
//! `runway-runtime`'s `driver.rs` (`LocalDriver`) implements it over the supervisors, and
//! `runway-kube` (`KubeDriver`) on a cluster. `runway-control` drives nothing else, and
//! `runway server`'s logs and image pins go through it too.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;

use runway_manifest::ServiceConfig;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

/// What a revision runs: its settings and what was pinned at deploy.
#[derive(Clone)]
pub struct Workload {
    pub service: String,
    /// The service's identity, never given to another service: what a driver isolates by.
    pub service_id: i64,
    pub env: String,
    pub revision: String,
    /// The revision's settings: its manifest for its environment, with its variables.
    pub config: ServiceConfig,
    /// The image, pinned by digest at deploy; `None` for a plain process.
    pub image: Option<String>,
    /// A plain process's code snapshot (`sha256:…`).
    pub source: Option<String>,
    /// The values of the secrets the revision pins, by variable name: given to its replicas
    /// as environment variables, never written where a tenant or a log could read them.
    pub secrets: BTreeMap<String, String>,
    /// The version of each secret the revision pins, by variable name: where a driver that
    /// keeps secrets apart from the workload (a cluster's Secrets) files each value.
    pub secret_versions: BTreeMap<String, u32>,
    /// The replicas' identity token (a JWT of Runway's issuer naming the service, environment
    /// and revision), issued as they start: given to each as a file, renewed by
    /// [`Driver::identity`]. `None` when the control plane issues none, or for a driver whose
    /// platform gives its own (a cluster's projected service account tokens).
    pub identity: Option<String>,
}

impl fmt::Debug for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workload")
            .field("service", &self.service)
            .field("env", &self.env)
            .field("revision", &self.revision)
            .field("image", &self.image)
            .field("source", &self.source)
            .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
            .field("secret_versions", &self.secret_versions)
            .field("identity", &self.identity.as_ref().map(|_| "<token>"))
            .finish_non_exhaustive()
    }
}

/// A revision a driver keeps something of: replicas, or objects that outlive them (a
/// cluster's Deployment at zero replicas).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Kept {
    pub service: String,
    pub env: String,
    pub revision: String,
}

/// How many replicas of a revision to run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scale {
    pub replicas: u32,
    /// Replicas to stop first when there are more than `replicas` (those the control plane
    /// drained), by id; replicas named here are stopped whatever the count.
    pub retire: Vec<String>,
}

/// The lifecycle of a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Being started (an image pulled, a pod scheduled), or running and not yet past its
    /// startup probe.
    Starting,
    /// Started and past its startup probe; see [`Replica::ready`] for traffic.
    Running,
    /// Ended and waiting to be started again.
    BackingOff,
    /// Ended several times in a row; still restarted, with backoff.
    CrashLoop,
    /// Asked to stop; its stop signal was sent.
    Stopping,
    /// Stopped on request.
    Stopped,
    /// Ended on its own with success and, by its restart policy, not started again.
    Exited,
    /// Ended with a failure and, by its restart policy, not started again.
    Failed,
}

impl Phase {
    /// Nothing is left to do for it.
    pub fn is_final(self) -> bool {
        matches!(self, Phase::Stopped | Phase::Exited | Phase::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Running => "running",
            Phase::BackingOff => "backing_off",
            Phase::CrashLoop => "crash_loop",
            Phase::Stopping => "stopping",
            Phase::Stopped => "stopped",
            Phase::Exited => "exited",
            Phase::Failed => "failed",
        }
    }
}

/// How a replica's process ended, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// The exit code, or 128 + the signal number.
    pub code: i32,
    /// The signal that ended it, by name.
    pub signal: Option<String>,
    /// Killed for going over its memory limit.
    pub oom_killed: bool,
    /// The platform ended it: a failed probe, or a stop that outlasted its grace period.
    pub cause: Option<String>,
    /// One line for people: "exited with code 1", "liveness probe failed: ...".
    pub reason: String,
    /// The last lines the process wrote, stdout and stderr interleaved (a Kubernetes
    /// container's termination message).
    pub last_output: Vec<String>,
    pub at_ms: u64,
}

/// One replica of a revision, as its driver sees it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replica {
    /// Unique among the driver's replicas: `{revision}-{suffix}`.
    pub id: String,
    /// Its service and revision, as its driver recorded them (`None` only for one started by
    /// an older build that did not record them).
    pub service: Option<String>,
    pub revision: Option<String>,
    /// Started by the control plane (not a developer's `runway run` on the same machine).
    pub managed: bool,
    pub phase: Phase,
    /// Passing its readiness probe: may take traffic.
    pub ready: bool,
    /// Where it takes traffic, once it has an address.
    pub address: Option<SocketAddr>,
    /// Times it was started again after ending.
    pub restarts: u32,
    /// Times in a row it ended without running long enough to count as started.
    pub consecutive_failures: u32,
    /// When its current process started (Unix milliseconds).
    pub started_at_ms: Option<u64>,
    /// When it is started again, while backing off (Unix milliseconds).
    pub next_start_at_ms: Option<u64>,
    /// Why it is in this phase, for people.
    pub message: String,
    /// What its owner should know while it starts and nothing has failed yet: it listens on
    /// another port than its `PORT`, its image is slow to pull, it cannot be scheduled.
    pub warning: Option<String>,
    /// How its last process ended.
    pub last_exit: Option<ExitRecord>,
}

/// The stream a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One line a replica wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    pub replica: String,
    /// RFC 3339, UTC (sorts as text).
    pub time: String,
    pub stream: Stream,
    pub text: String,
}

/// Whose output: a service in an environment, or one of its replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogQuery {
    pub service: String,
    pub env: String,
    pub replica: Option<String>,
    /// How many of the last lines to start with, across the replicas (as the API's `lines`).
    pub tail: usize,
    /// The output of replicas that ended (removed, or a container's run before its restart:
    /// `kubectl logs --previous`), kept for a while, instead of the running ones'.
    pub previous: bool,
}

/// What a driver could not do.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The workload cannot run here, and will not by trying again (its settings, its image
    /// name, a plain process where none may run): a deployment of it fails at once.
    #[error("{0}")]
    Refused(String),
    /// No such replica.
    #[error("no replica {0:?}")]
    NotFound(String),
    /// The image reference could not be resolved.
    #[error("image {reference}: {message}")]
    Image { reference: String, message: String },
    /// Anything else: the machine, the cluster's API, a timeout. Tried again later.
    #[error("{0}")]
    Failed(String),
}

/// What runs revision workloads. Every call is idempotent, and a new driver finds what an
/// earlier one started (the control plane restarts without restarting any replica).
pub trait Driver: Send + Sync + 'static {
    /// Runs `scale.replicas` replicas of the workload's revision: starts new ones to reach
    /// it, and stops the surplus, those in `scale.retire` first. Returns once the change is
    /// under way (a start asked for, a stop signal sent), not when replicas are ready or gone:
    /// [`Driver::replicas`] and [`Driver::changes`] tell that.
    fn scale(
        &self,
        workload: &Workload,
        scale: &Scale,
    ) -> impl Future<Output = Result<Vec<Replica>, DriverError>> + Send;

    /// Stops these replicas of a revision with their stop signal and grace period, and runs
    /// that many fewer of it: the replicas the control plane drained, or failed ones, when
    /// nothing starts in their place. Returns once their stop is under way. Replicas already
    /// stopping or gone are no error.
    fn retire(
        &self,
        service: &str,
        env: &str,
        revision: &str,
        replicas: &[String],
    ) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// Stops every replica of a revision and forgets it (its objects and output): a retired
    /// revision, or a decommissioned service's.
    fn remove(
        &self,
        service: &str,
        env: &str,
        revision: &str,
    ) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// Every revision this driver keeps anything of besides replicas, found afresh (not only
    /// those this process asked for): how a new control plane finds what an earlier one left
    /// behind (a cluster's Deployment at zero replicas), to `remove` what is no longer of use.
    /// A driver that keeps nothing but replicas returns none: those are seen as replicas.
    fn revisions(&self) -> impl Future<Output = Result<Vec<Kept>, DriverError>> + Send;

    /// Every replica this driver runs or ran and has not forgotten.
    fn replicas(&self) -> impl Future<Output = Result<Vec<Replica>, DriverError>> + Send;

    /// Changes whenever a replica's state may have changed: the control plane's cue to look.
    fn changes(&self) -> watch::Receiver<u64>;

    /// The last `query.tail` lines of the matching replicas' output together, oldest first.
    fn logs(
        &self,
        query: &LogQuery,
    ) -> impl Future<Output = Result<Vec<LogLine>, DriverError>> + Send;

    /// The last lines, then each new line as it is written, of every matching replica,
    /// including those that start later (a rollout), until the receiver is dropped.
    fn follow(
        &self,
        query: &LogQuery,
    ) -> impl Future<Output = Result<mpsc::Receiver<LogLine>, DriverError>> + Send;

    /// Whether the platform under this driver gives replicas an identity of its own (a
    /// cluster's projected service account tokens), so the control plane issues none.
    fn own_identity(&self) -> bool {
        false
    }

    /// Renews the identity token of every replica of a revision (see [`Workload::identity`])
    /// before the one they hold expires. A driver whose platform renews its own does nothing.
    fn identity(
        &self,
        _service: &str,
        _env: &str,
        _revision: &str,
        _token: &str,
    ) -> impl Future<Output = Result<(), DriverError>> + Send {
        std::future::ready(Ok(()))
    }

    /// The image reference pinned to its digest (`registry/name@sha256:…`).
    fn resolve_image(
        &self,
        reference: &str,
    ) -> impl Future<Output = Result<String, DriverError>> + Send;
}

/// The revision a replica belongs to: its id minus the last `-` segment (`{revision}-{6 hex}`).
/// `None` for an id not of that shape.
pub fn revision_of(id: &str) -> Option<&str> {
    let (revision, suffix) = id.rsplit_once('-')?;
    let hex = suffix.len() == 6
        && suffix
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (hex && !revision.is_empty()).then_some(revision)
}

/// The environment of a revision of `service` named `{service}-{env}-{5 digits}`, as the
/// control plane names revisions; `None` for a name not of that shape.
pub fn env_of<'a>(service: &str, revision: &'a str) -> Option<&'a str> {
    let (env, number) = revision
        .strip_prefix(service)?
        .strip_prefix('-')?
        .rsplit_once('-')?;
    let number_shaped = number.len() == 5 && number.bytes().all(|b| b.is_ascii_digit());
    (number_shaped && !env.is_empty()).then_some(env)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A new replica id for `revision`: `{revision}-{6 lower-case hex}`, random.
pub fn new_replica_id(revision: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    hasher.write_u64(now);
    format!("{revision}-{:06x}", hasher.finish() & 0x00ff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_ids_name_their_revision() {
        assert_eq!(
            revision_of("hello-dev-00002-3f9a1c"),
            Some("hello-dev-00002")
        );
        assert_eq!(revision_of("hello-dev-00002"), None);
        assert_eq!(revision_of("hello"), None);
        let id = new_replica_id("hello-dev-00002");
        assert_eq!(revision_of(&id), Some("hello-dev-00002"), "{id}");
        assert_ne!(new_replica_id("a"), new_replica_id("a"));
        assert_eq!(env_of("hello", "hello-dev-00002"), Some("dev"));
        assert_eq!(env_of("hello", "hello-dev-2"), None);
        assert_eq!(env_of("hello", "world-dev-00002"), None);
    }

    #[test]
    fn a_workload_never_prints_a_secret_value() {
        let manifest: runway_manifest::Manifest = serde_json::from_value(serde_json::json!({
            "apiVersion": "runway/v1",
            "kind": "RunwayService",
            "metadata": {"name": "hello"},
            "spec": {"image": "registry.example/hello:1", "container_port": 8080}
        }))
        .unwrap();
        let workload = Workload {
            service: "hello".into(),
            service_id: 1,
            env: "dev".into(),
            revision: "hello-dev-00001".into(),
            config: ServiceConfig::from_manifest(&manifest, Some("dev"), &BTreeMap::new()),
            image: None,
            source: None,
            secrets: BTreeMap::from([("API_KEY".to_owned(), "hunter2".to_owned())]),
            secret_versions: BTreeMap::from([("API_KEY".to_owned(), 3)]),
            identity: Some("eyJhbGciOiJFUzI1NiJ9.secret-claims.signature".to_owned()),
        };
        let printed = format!("{workload:?}");
        assert!(
            printed.contains("API_KEY")
                && !printed.contains("hunter2")
                && !printed.contains("secret-claims"),
            "{printed}"
        );
    }
}
