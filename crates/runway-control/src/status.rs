//! What the API shows of each service in each environment: the weights the ingress has, and
//! how each revision is doing. A service's passes publish it on a `watch` as they change it,
//! and the API reads the latest snapshot there without the controller's lock; a replica that
//! does not lead publishes what it observes the same way, so it answers the same questions.

use std::collections::BTreeMap;

use runway_reconciler::{Condition, RevisionStatus, RouteWeight};
use tokio::sync::watch;

use crate::state::{Key, ServiceState};

/// One service in one environment, as the API shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ServiceStatus {
    /// The weights last applied to the ingress.
    pub(crate) routes: Vec<RouteWeight>,
    /// How each revision is doing, as last planned.
    pub(crate) revisions: Vec<RevisionStatus>,
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
        Self {
            routes: service.routes.clone(),
            revisions,
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
}
