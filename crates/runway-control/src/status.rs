//! What the API shows of each service in each environment: the weights the ingress has, how
//! each revision is doing, what its rollout waits for and how far its analysis got, and its
//! autoscalers' last decisions. A service's passes (and the autoscaler, for its decisions)
//! publish it on a `watch` as they change it, and the API reads the latest snapshot there
//! without locking the controller's memory; a replica that does not lead publishes what it
//! observes the same way, so it answers the same questions.

use std::collections::BTreeMap;

use runway_reconciler::{Condition, RevisionStatus, RouteWeight};
use tokio::sync::watch;

use crate::autoscale::ScalerStatus;
use crate::key::Key;
use crate::observe::revision_of;
use crate::rollout::StepBaseline;
use crate::state::ServiceState;

/// One service in one environment, as the API shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ServiceStatus {
    /// The weights last applied to the ingress.
    pub(crate) routes: Vec<RouteWeight>,
    /// How each revision is doing, as last planned.
    pub(crate) revisions: Vec<RevisionStatus>,
    /// What each progressive deployment waits for or did last, by id.
    pub(crate) rollout_messages: BTreeMap<i64, String>,
    /// Where each progressive deployment's current step's window started, by id.
    pub(crate) baselines: BTreeMap<i64, StepBaseline>,
    /// The counters of each revision with instances or readiness failures, by name.
    pub(crate) counters: BTreeMap<String, Counters>,
    /// Each autoscaled revision's last decisions, by name.
    pub(crate) scalers: BTreeMap<String, ScalerStatus>,
}

/// A revision's counters besides the ingress's: its instances' restarts as the runtime counts
/// them, and the times one went from ready to not ready as this controller saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub(crate) restarts: u32,
    pub(crate) readiness_failures: u32,
}

impl Counters {
    /// The revision's counters in the service's state.
    pub(crate) fn of(service: &ServiceState, revision: &str) -> Self {
        Self {
            restarts: service
                .instances
                .iter()
                .filter(|status| revision_of(&status.id) == Some(revision))
                .map(|status| status.restarts)
                .sum(),
            readiness_failures: service
                .readiness_failures
                .get(revision)
                .copied()
                .unwrap_or(0),
        }
    }
}

impl ServiceStatus {
    /// The service's status from what its passes keep: a revision that cannot start for good
    /// (a process no longer allowed, a secret that cannot be opened) is failing, with that
    /// reason, rather than forever progressing.
    pub(crate) fn of(service: &ServiceState) -> Self {
        let mut revisions = service.status.clone();
        for status in &mut revisions {
            if let Some(failure) = service.start_errors.get(&status.revision)
                && failure.permanent
                && status.ready == 0
            {
                status.condition = Condition::Failing {
                    reason: failure.reason.clone(),
                };
            }
        }
        // Each revision's counters, in one look at its instances.
        let mut counters: BTreeMap<String, Counters> = BTreeMap::new();
        for status in &service.instances {
            if let Some(name) = revision_of(&status.id) {
                let counted = counters.entry(name.to_owned()).or_default();
                counted.restarts = counted.restarts.saturating_add(status.restarts);
            }
        }
        for (name, failures) in &service.readiness_failures {
            counters.entry(name.clone()).or_default().readiness_failures = *failures;
        }
        Self {
            routes: service.routes.clone(),
            revisions,
            rollout_messages: service
                .rollout_messages
                .iter()
                .map(|(id, message)| (*id, message.clone()))
                .collect(),
            baselines: service
                .baselines
                .iter()
                .map(|(id, baseline)| (*id, baseline.clone()))
                .collect(),
            counters,
            scalers: service
                .scalers
                .iter()
                .map(|(name, scaler)| (name.clone(), scaler.status()))
                .collect(),
        }
    }
}

/// Every service's status, by service and environment.
pub(crate) type Board = BTreeMap<Key, ServiceStatus>;

/// The board's one writer: each change is sent only when it changes something.
#[derive(Debug)]
pub(crate) struct Publisher {
    board: watch::Sender<Board>,
}

impl Default for Publisher {
    fn default() -> Self {
        Self {
            board: watch::Sender::new(Board::new()),
        }
    }
}

impl Publisher {
    /// Sets `key`'s status (`None`: it has none any more).
    pub(crate) fn publish(&self, key: &Key, status: Option<ServiceStatus>) {
        self.board.send_if_modified(|board| match status {
            Some(status) if board.get(key) != Some(&status) => {
                board.insert(key.clone(), status);
                true
            }
            Some(_) => false,
            None => board.remove(key).is_some(),
        });
    }

    /// Replaces every status at once (a replica that does not lead, after a look at all).
    pub(crate) fn replace(&self, board: Board) {
        self.board.send_if_modified(|held| {
            let changed = *held != board;
            *held = board;
            changed
        });
    }

    /// The status of `key` now.
    pub(crate) fn get(&self, key: &Key) -> Option<ServiceStatus> {
        self.board.borrow().get(key).cloned()
    }

    /// What `read` makes of the board now (held for its call only: keep it short).
    pub(crate) fn read<T>(&self, read: impl FnOnce(&Board) -> T) -> T {
        read(&self.board.borrow())
    }
}
