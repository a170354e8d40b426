//! What the controller keeps in memory between reconciliations: the revision cache and the
//! registered services, shared by all; and each service's own [`ServiceState`] (its routes,
//! status, instances and their histories, retiring replicas, autoscalers, readiness failures,
//! rollout baselines and messages) in its own [`Cell`]. None of it is needed to recover:
//! after a restart the routes start from the table the data plane serves (when it outlived the
//! last controller), else from the desired state, and the table is rebuilt from the ready
//! instances.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use runway_driver::Replica;
use runway_ingress::RouteConfig;
use runway_reconciler::{RevisionStatus, RouteWeight};

use crate::autoscale::Scaler;
use crate::key::Key;
use crate::observe::Tracked;
use crate::revision::RevisionInfo;
use crate::rollout::StepBaseline;

#[derive(Debug, Default)]
pub(crate) struct State {
    /// Revisions seen, by name (immutable, so kept until their service is gone).
    pub(crate) revisions: HashMap<String, Arc<RevisionInfo>>,
    /// Each service's own state, behind its own lock (see [`Cell`]).
    pub(crate) services: BTreeMap<Key, Arc<Cell>>,
    /// Every registered service in each of its environments, as the last pass read them: one
    /// with no revision serving is routed still, so its host answers a 503 saying so.
    pub(crate) known: BTreeSet<Key>,
    /// Whether the data plane's serving table was read (once, before the first pass).
    pub(crate) serving_read: bool,
    /// The routes the data plane served when this controller started, of the services the
    /// passes have not reached yet: kept in the table as they were until then.
    pub(crate) adopted: BTreeMap<Key, RouteConfig>,
}

impl State {
    /// The service's cell, made empty (not yet planned) when it has none.
    pub(crate) fn service(&mut self, key: &Key) -> Arc<Cell> {
        Arc::clone(self.services.entry(key.clone()).or_default())
    }

    /// The service's cell, when it has one.
    pub(crate) fn cell(&self, key: &Key) -> Option<Arc<Cell>> {
        self.services.get(key).map(Arc::clone)
    }
}

/// One service's state behind its own lock. Its reconciler holds the cell for its whole pass
/// and locks it for each step (never across an await); the autoscaler, the rounds and the
/// API lock it for a look. The lock order is the controller's [`State`] first, then a cell:
/// code holding a cell never takes the controller's lock, and no two cells are held at once.
#[derive(Debug, Default)]
pub(crate) struct Cell(Mutex<ServiceState>);

impl Cell {
    pub(crate) fn new(service: ServiceState) -> Self {
        Self(Mutex::new(service))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, ServiceState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One service in one environment: everything its passes keep.
#[derive(Debug, Default)]
pub(crate) struct ServiceState {
    /// A pass planned it: its routes are its own (seeded then from what was served).
    pub(crate) planned: bool,
    /// The weights last applied to the ingress.
    pub(crate) routes: Vec<RouteWeight>,
    /// The last plan's status per revision.
    pub(crate) status: Vec<RevisionStatus>,
    /// Its instances as last observed (and changed by the actions since).
    pub(crate) instances: Vec<Replica>,
    /// The last failed start of each revision since its last successful one.
    pub(crate) start_errors: BTreeMap<String, StartFailure>,
    /// Its instances' histories, by instance id.
    pub(crate) tracked: HashMap<String, Tracked>,
    /// Replicas the driver was asked to stop and still lists, by id, with the deployment told
    /// when each is gone.
    pub(crate) retiring: HashMap<String, Option<i64>>,
    /// The autoscaler of each revision desired with traffic, by revision name.
    pub(crate) scalers: HashMap<String, Scaler>,
    /// Times an instance of each revision went from ready to not ready or failed, by name:
    /// the canary analysis's readiness failures.
    pub(crate) readiness_failures: HashMap<String, u32>,
    /// When this controller first saw each deployment in progress (by id): its timeout runs
    /// from then or from its creation, whichever is later.
    pub(crate) deployments_seen: HashMap<i64, u64>,
    /// The counters each progressive deployment's current step started from, by id.
    pub(crate) baselines: HashMap<i64, StepBaseline>,
    /// What each progressive deployment waits for or did last, by id.
    pub(crate) rollout_messages: HashMap<i64, String>,
    /// Since when each progressive deployment's new revision, having had traffic, has been
    /// short of ready instances, by id.
    pub(crate) unready_since: HashMap<i64, u64>,
}

/// Why an instance of a revision could not be started.
#[derive(Debug, Clone)]
pub(crate) struct StartFailure {
    /// It never will: its manifest, spec or a secret cannot be used, and a revision is
    /// immutable. A deployment of it fails at once.
    pub(crate) permanent: bool,
    pub(crate) reason: String,
}
