//! The planner's inputs and outputs: plain values, serialisable so the control plane can store
//! and show them.

use serde::{Deserialize, Serialize};

/// What the service in this environment should run and serve.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Desired {
    /// Revision names are unique; a repeated name's later entries are ignored.
    pub revisions: Vec<DesiredRevision>,
}

/// One revision the service should run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredRevision {
    pub name: String,
    /// How many live instances to keep (the autoscaler changes only this).
    pub instances: u32,
    /// Share of the traffic. Weights sum to 100 over the revisions that should serve (they are
    /// scaled to 100 if not); all zero means the service should serve nothing. Weight 0 with
    /// 0 instances retires the revision.
    pub weight: u32,
}

/// What the runtime and the ingress report now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    pub instances: Vec<ObservedInstance>,
    /// The weights the ingress has, as last applied.
    pub routes: Vec<RouteWeight>,
    /// The time of the observation, in milliseconds (the planner never reads a clock).
    pub now_ms: u64,
}

/// One instance as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedInstance {
    pub id: String,
    pub revision: String,
    pub state: InstanceState,
    /// When the instance entered `state`, in the same clock as [`Observed::now_ms`].
    pub since_ms: u64,
}

/// An instance's state, as its supervisor reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum InstanceState {
    /// Started, readiness not yet passed. Never had traffic.
    Starting,
    /// Passing readiness: the ingress may send it requests.
    Ready,
    /// Was ready, now failing readiness; it may still have requests in flight.
    NotReady,
    /// Told to drain: no new requests, in-flight ones finish. `since_ms` is when draining began.
    Draining,
    /// Could not be started or run (the supervisor gave up, or died); not restarted by its
    /// supervisor.
    Failed { reason: String },
    /// Failing repeatedly; its supervisor keeps restarting it with backoff.
    CrashLoop { reason: String },
    /// The process exited and will not be restarted by its supervisor.
    Exited,
}

impl InstanceState {
    /// Counts towards a revision's instances: running, or being restarted by its supervisor.
    pub fn is_live(&self) -> bool {
        matches!(
            self,
            Self::Starting | Self::Ready | Self::NotReady | Self::CrashLoop { .. }
        )
    }

    /// Gone for good: the planner replaces or removes it.
    pub fn is_dead(&self) -> bool {
        matches!(self, Self::Failed { .. } | Self::Exited)
    }

    pub fn is_ready(&self) -> bool {
        matches!(self, Self::Ready)
    }

    /// May have requests in flight, so it is drained before it is stopped.
    pub(crate) fn may_have_traffic(&self) -> bool {
        matches!(self, Self::Ready | Self::NotReady)
    }
}

/// One revision's share of the traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteWeight {
    pub revision: String,
    pub weight: u32,
}

impl RouteWeight {
    pub fn new(revision: impl Into<String>, weight: u32) -> Self {
        Self {
            revision: revision.into(),
            weight,
        }
    }
}

/// The bounds the planner keeps. Every wait has a bound, and this is where it is named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// How long an instance may be starting (or not ready, or crash-looping) before its
    /// revision is [`Condition::TimedOut`]. Default 5 minutes.
    pub start_timeout_ms: u64,
    /// How long a draining instance keeps running to finish in-flight requests before it is
    /// stopped. Default 30 seconds (Kubernetes' termination grace period).
    pub drain_grace_ms: u64,
    /// The most instances of one revision starting at once; `None` starts all that are
    /// missing at once (the default).
    pub max_surge: Option<u32>,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            start_timeout_ms: 300_000,
            drain_grace_ms: 30_000,
            max_surge: None,
        }
    }
}

/// What to do, and what is true now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// In the order to apply: routes first, then starts, drains and stops.
    pub actions: Vec<Action>,
    /// One entry per desired revision (in desired order), then per other revision that still
    /// has instances or traffic (by name).
    pub status: Vec<RevisionStatus>,
    /// When to plan again because time alone will change the plan (a drain grace ending, a
    /// start timeout falling due); `None` when only a new observation can.
    pub requeue_after_ms: Option<u64>,
}

/// One step for the executor. Each is meant for an idempotent `*_ensure` call, so applying a
/// plan twice is harmless.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Set the ingress's weights for this service, whole (sorted by revision; empty means
    /// serve nothing). Only emitted when they differ from the observed routes. Which
    /// instances of a revision receive traffic is the executor's to fill in: the revision's
    /// ready instances that are not draining.
    SetRoutes { weights: Vec<RouteWeight> },
    /// Start a new instance of the revision.
    Start { revision: String },
    /// Remove a failed or exited instance and start a new one of the same revision in its
    /// place.
    Replace { instance: String, revision: String },
    /// Stop sending the instance new requests; it keeps running to finish those in flight.
    Drain { instance: String },
    /// Stop the instance and remove it: after its drain grace, or at once when it never had
    /// traffic (starting, crash-looping, failed, exited).
    Stop { instance: String },
}

/// Where one revision stands, for the deployment controller above.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionStatus {
    pub revision: String,
    pub desired_instances: u32,
    /// Ready instances (not draining).
    pub ready: u32,
    /// Starting or not-ready instances.
    pub starting: u32,
    /// Failed, crash-looping or exited instances.
    pub failed: u32,
    pub condition: Condition,
}

/// A revision's condition. A controller fails a deploy on `TimedOut`, and may on `Failing`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Condition {
    /// Instances are being started, or (for a retired revision) drained and stopped.
    Progressing,
    /// As many ready instances as desired (for a retired revision: none left).
    Ready,
    /// An instance failed, crash-loops or exited; the reason is the instance's own.
    Failing { reason: String },
    /// An instance has not been ready within `start_timeout_ms`.
    TimedOut { reason: String },
}
