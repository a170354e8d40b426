//! The controller: the loop, one service's pass, and its actions.
//!
//! [`Controller::run`] runs a round on the interval, on [`Controller::wake`], on every tick of
//! the driver's `changes` and on the ingress's scale-up signal. A round reads the store's
//! desired states and the driver's replicas once, then reconciles each service and
//! environment in a task of its own (at most `reconcile_concurrency` at once; one under way is
//! left alone until done, so a slow driver call holds up no other service). A service woken by
//! its own timer (a drain grace, a step), or found under way by a round, gets a look of its own:
//! its desired state and replicas read for it alone, not a round over every service.
//!
//! One service's pass ([`Controller::reconcile`]) takes its own state's cell
//! ([`crate::state::Cell`]), plans with the pure planner, publishes its route to the
//! propagator and waits until it is in force, then asks the driver for each revision's starts
//! and stops in one call (`scale` with the replicas to retire, or `retire` alone), and moves
//! its deployment along. A replica's stop is told in its deployment's events once the driver
//! lists it no more. After each round, a revision no longer of use is `remove`d from the
//! driver, and so is one the driver keeps (a cluster's Deployment at zero, `Driver::revisions`)
//! that nothing uses, left by a control plane that stopped before it removed it. The routes of
//! `ingress.cells` are set with [`Controller::fixed_routes`] (env `cells`, never adopted as a
//! service).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use runway_driver::{Driver, DriverError, Kept, Phase, Replica, Scale, now_ms};
use runway_ingress::{RouteConfig, RouteTableConfig, ScaleUp};
use runway_reconciler::{
    Action, Desired as PlanDesired, DesiredRevision as PlanRevision, InstanceState, Observed,
    ObservedInstance, Policy, RevisionStatus, RouteWeight, plan,
};
use runway_secrets::Sealer;
use runway_store::{Deployment, Desired, Store, StoreError};
use tokio::sync::{Notify, broadcast, watch};
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::config::ControllerConfig;
use crate::dataplane::DataPlane;
use crate::error::{ControlError, Result};
use crate::key::Key;
use crate::leader::Leadership;
use crate::observe::{failure_reason, instance_state, kind, managed_key, revision_of};
use crate::propagate::{Entry, Propagator};
use crate::revision::RevisionInfo;
use crate::rollout::Outcome;
use crate::state::{Cell, ServiceState, StartFailure, State};
use crate::status::ServiceStatus;
use crate::table::entry_for;
use crate::workload::{may_start, start_inputs, workload};

/// Makes the store's desired state true on a runtime and in the ingress, and moves
/// deployments along. See the crate documentation.
pub struct Controller<D: Driver> {
    pub(crate) config: ControllerConfig,
    pub(crate) store: Arc<dyn Store>,
    /// What runs the revisions' replicas.
    pub(crate) driver: Arc<D>,
    /// The ingress, in this process or its own.
    pub(crate) dataplane: Arc<dyn DataPlane>,
    sealer: Arc<Sealer>,
    wake: Arc<Notify>,
    pub(crate) state: Mutex<State>,
    /// One round's reading of everything at a time.
    pass: tokio::sync::Mutex<()>,
    /// The route table's owner: services publish their routes to it.
    propagator: Propagator,
    /// What the API shows of each service: its passes publish it there.
    pub(crate) status: crate::status::Publisher,
    /// Every service may run plain processes (`runtime.allow_processes`); otherwise those an
    /// admin allowed.
    allow_processes: bool,
    /// The platform registry's `host:port` that revisions' mirrored images are pulled from
    /// (see [`Controller::pull_mirrors_from`]).
    registry_host: Option<String>,
    /// Deployment events, written in order by their own task (`events.rs`).
    pub(crate) events: Arc<crate::events::Events>,
    /// Whether this replica leads, when it is one of several (see [`Controller::leadership`]).
    leadership: Option<watch::Receiver<Leadership>>,
    /// The last minutes of each routed revision's counters (`traffic.rs`).
    traffic: Mutex<crate::traffic::Samples>,
    /// Custom domains, their certificates and ACME challenges, in every table.
    edge: Arc<crate::edge::Edge>,
    /// When this controller was made (Unix milliseconds): an instance started before is one
    /// it adopts, whose state is no news to any deployment.
    started_at_ms: u64,
    /// Issues each replica's identity token as it starts (see [`Controller::issue_identities`]).
    identity: Option<Arc<crate::identity::Issuer>>,
}

/// How long [`Controller::run`] keeps writing the deployment events still waiting once it is
/// told to stop.
const EVENTS_AT_SHUTDOWN: Duration = Duration::from_secs(5);

/// What a round read for all services.
#[derive(Debug)]
struct Round {
    desired: Vec<Desired>,
    /// The revisions the driver runs replicas of.
    running: HashSet<String>,
    /// The revisions the driver keeps anything of (replicas, or a cluster's objects).
    kept: Vec<Kept>,
}

/// One service in one environment to reconcile, with what its round read for it.
#[derive(Debug)]
struct Work {
    key: Key,
    wanted: Option<Desired>,
    instances: Vec<Replica>,
}

/// A service waiting for a task: with what a round read for it, or to read its own (a look
/// at it alone: woken by its own timer, or by a round that found it under way).
#[derive(Debug)]
enum Queued {
    Read(Work),
    Look(Key),
}

impl Queued {
    fn key(&self) -> &Key {
        match self {
            Self::Read(work) => &work.key,
            Self::Look(key) => key,
        }
    }
}

/// What one pass over a service in an environment left: see [`Controller::reconcile`].
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Reconciled {
    /// Its route in the table the data plane has (`None`: it has none).
    pub route: Option<RouteConfig>,
    /// How each of its revisions is doing, as the pass planned.
    pub status: Vec<RevisionStatus>,
    /// When to look at it again for time's sake (a drain grace, a start timeout, a step).
    pub requeue_after_ms: Option<u64>,
    /// Its deployment in progress, as the pass moved it.
    pub deployment: Option<i64>,
    /// What went wrong on the way; the pass went on past each where it could.
    pub errors: Vec<ControlError>,
}

/// What one pass asks the driver for one revision.
#[derive(Debug, Default)]
struct Batch {
    /// New replicas to start.
    starts: u32,
    /// Replicas to stop and start again (failed ones).
    replace: Vec<String>,
    /// Replicas to stop.
    stop: Vec<String>,
}

/// What the loop keeps of one service in one environment between its reconciliations.
#[derive(Debug, Default)]
struct Looked {
    /// When to look again for time's sake, as its last reconciliation asked.
    wake_at: Option<Instant>,
    /// Its deployment in progress, as its last reconciliation saw it.
    active: Option<i64>,
}

/// The errors last printed, so a lasting one is printed once: a round's, and each service's.
#[derive(Debug, Default)]
struct Printed {
    round: BTreeSet<String>,
    services: HashMap<Key, BTreeSet<String>>,
}

impl Printed {
    fn round(&mut self, errors: &[ControlError]) {
        for error in new_errors(&mut self.round, errors) {
            tracing::error!(error, "reconcile round");
        }
    }

    fn service(&mut self, key: &Key, errors: &[ControlError]) {
        if errors.is_empty() {
            self.services.remove(key);
            return;
        }
        for error in new_errors(self.services.entry(key.clone()).or_default(), errors) {
            tracing::error!(service = %key.0, env = %key.1, error, "reconcile");
        }
    }
}

/// The errors (each its whole chain) not in `printed`, which becomes them.
fn new_errors(printed: &mut BTreeSet<String>, errors: &[ControlError]) -> Vec<String> {
    let messages: BTreeSet<String> = errors.iter().map(|e| runway_log::chain(e)).collect();
    let new = messages.difference(printed).cloned().collect();
    *printed = messages;
    new
}

impl<D: Driver> fmt::Debug for Controller<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("config", &self.config)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl<D: Driver> Controller<D> {
    /// A controller over `driver` and the data plane. Nothing happens until
    /// [`Controller::run`] or [`Controller::reconcile_all`].
    pub fn new(
        config: ControllerConfig,
        store: Arc<dyn Store>,
        driver: Arc<D>,
        dataplane: Arc<dyn DataPlane>,
        sealer: Sealer,
    ) -> Self {
        let wake = Arc::new(Notify::new());
        let edge = Arc::new(crate::edge::Edge::new(Arc::clone(&wake)));
        let events = Arc::new(crate::events::Events::new(Arc::clone(&store)));
        Self {
            propagator: Propagator::new(
                Arc::clone(&dataplane),
                Arc::clone(&edge),
                config.domain.clone(),
            ),
            config,
            store,
            driver,
            dataplane,
            sealer: Arc::new(sealer),
            edge,
            wake,
            state: Mutex::new(State::default()),
            status: crate::status::Publisher::default(),
            pass: tokio::sync::Mutex::new(()),
            allow_processes: false,
            registry_host: None,
            identity: None,
            events,
            leadership: None,
            traffic: Mutex::default(),
            started_at_ms: now_ms(),
        }
    }

    pub(crate) fn traffic_samples(&self) -> MutexGuard<'_, crate::traffic::Samples> {
        self.traffic.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Acts only while `leadership` says this replica leads and its deadline has not passed
    /// (one of several replicas on one store; see [`crate::leader`]): rounds wait, and no
    /// start, stop, table or drain goes out, otherwise. Its store should be fenced by the
    /// same election.
    #[must_use]
    pub fn leadership(mut self, leadership: watch::Receiver<Leadership>) -> Self {
        self.leadership = Some(leadership);
        self
    }

    /// Whether this controller may change anything now (see [`Controller::leadership`]).
    pub fn may_act(&self) -> bool {
        self.leadership
            .as_ref()
            .is_none_or(|leadership| leadership.borrow().may_act())
    }

    fn not_leading() -> ControlError {
        ControlError::Task("this replica does not lead now; nothing was changed".to_owned())
    }

    /// The platform's environments: the ingress answers a name under each one's
    /// `{env}.{domain}` over TLS (a 404 where nothing is served yet), not with a TLS alert.
    #[must_use]
    pub fn environments(mut self, environments: Vec<String>) -> Self {
        self.propagator.environments = environments;
        self
    }

    /// Routes put in every table beside the services' (a cell router's: `ingress.cells`).
    #[must_use]
    pub fn fixed_routes(mut self, routes: Vec<RouteConfig>) -> Self {
        self.propagator.fixed = routes;
        self
    }

    /// Lets every service run plain processes (the operator's `runtime.allow_processes`);
    /// otherwise only those an admin allowed start, as the API allows them to be deployed.
    #[must_use]
    pub fn allow_processes(mut self, allow: bool) -> Self {
        self.allow_processes = allow;
        self
    }

    /// Runs a revision whose image was mirrored at deploy from the platform registry at
    /// `host` (`host:port`); without it, from where the image was pinned.
    #[must_use]
    pub fn pull_mirrors_from(mut self, host: Option<String>) -> Self {
        self.registry_host = host;
        self
    }

    /// Gives every replica it starts an identity token from `issuer`
    /// ([`runway_driver::Workload::identity`]); [`Controller::renew_identities`] renews them.
    #[must_use]
    pub fn issue_identities(mut self, issuer: Option<Arc<crate::identity::Issuer>>) -> Self {
        self.identity = issuer;
        self
    }

    /// Renews the identity token of every revision with replicas that are not stopped, for
    /// the audience its manifest names; returns how many revisions' tokens were renewed (none
    /// while another replica leads). A failure for one revision is logged and the others go
    /// on.
    pub async fn renew_identities(&self) -> Result<usize> {
        let Some(issuer) = self.identity.as_ref().filter(|_| self.may_act()) else {
            return Ok(0);
        };
        let replicas = self
            .driver
            .replicas()
            .await
            .map_err(|source| ControlError::Driver {
                what: "listing replicas to renew their identity tokens".to_owned(),
                source,
            })?;
        let mut revisions: Vec<&str> = replicas
            .iter()
            .filter(|r| r.managed && !r.phase.is_final())
            .filter_map(|r| r.revision.as_deref())
            .collect();
        revisions.sort_unstable();
        revisions.dedup();
        let mut renewed = 0;
        for name in revisions {
            let Ok(Some(info)) = self.revision(name).await else {
                continue;
            };
            let record = &info.record;
            let audience = info
                .config
                .as_ref()
                .ok()
                .and_then(|c| c.identity_audience.as_deref());
            let result = match issuer
                .issue(&record.service, &record.env, &record.name, audience)
                .await
            {
                Ok(token) => self
                    .driver
                    .identity(&record.service, &record.env, &record.name, &token)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => renewed += 1,
                Err(error) => tracing::warn!(
                    revision = %record.name, %error, "cannot renew a revision's identity token"
                ),
            }
        }
        Ok(renewed)
    }

    /// What runs the revisions' replicas: for their logs and images, say.
    pub fn driver(&self) -> &Arc<D> {
        &self.driver
    }

    /// The settings it runs with.
    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    /// The custom domains, certificates and ACME challenges every table carries: what
    /// [`crate::edge::sync_domains`] and the ACME issuer keep up to date.
    pub fn edge(&self) -> Arc<crate::edge::Edge> {
        Arc::clone(&self.edge)
    }

    /// Reconciles now rather than at the next interval (after a deploy, say).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Reconciles every `reconcile_interval` (sooner when a drain grace or a start timeout
    /// falls due), at once on [`Controller::wake`], when the driver reports a change (a
    /// replica ready, failed or gone), or when the autoscaler changes a count; runs the autoscaler every `autoscale_interval_ms`
    /// and at once when the ingress holds requests for a revision (a cold start); until
    /// `shutdown` completes. Instances keep running after it returns; the deployment events
    /// still waiting are written first, for at most 5 seconds.
    pub async fn run(self: Arc<Self>, shutdown: impl Future<Output = ()>) {
        // The event writer's task, stopped when this returns (the set is dropped).
        let mut writer = tokio::task::JoinSet::new();
        let events = Arc::clone(&self.events);
        writer.spawn(async move { events.run().await });
        Arc::clone(&self).reconcile_until(shutdown).await;
        writer.abort_all();
        match tokio::time::timeout(EVENTS_AT_SHUTDOWN, self.events.write()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(
                error = runway_log::chain(&error),
                "deployment events still waiting at shutdown were not written"
            ),
            Err(_) => tracing::warn!(
                seconds = EVENTS_AT_SHUTDOWN.as_secs(),
                "deployment events still waiting at shutdown were not written in time"
            ),
        }
    }

    /// [`Controller::run`]'s loop.
    async fn reconcile_until(self: Arc<Self>, shutdown: impl Future<Output = ()>) {
        let mut scale_up = Some(self.dataplane.subscribe_scale_up());
        let mut changes = self.driver.changes();
        let mut shutdown = std::pin::pin!(shutdown);
        let autoscaling = self.config.autoscale_interval_ms > 0;
        let mut tick = tokio::time::interval(Duration::from_millis(
            self.config.autoscale_interval_ms.max(1),
        ));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let limit = self.config.reconcile_concurrency.max(1);
        // Each service and environment is reconciled in a task of its own, up to `limit` at
        // once; one under way is not started again until it is done (its next round reads it
        // afresh). Tasks, not futures polled here: one may hold the table's lock while this
        // loop waits for it in a round.
        let mut in_flight = tokio::task::JoinSet::new();
        // The services under way, by their task.
        let mut tasks: HashMap<tokio::task::Id, Key> = HashMap::new();
        let mut queued: VecDeque<Queued> = VecDeque::new();
        // Services a round found under way: what woke the round (a replica ready, a count
        // changed) may have come after their task read its state, so they get a look of their
        // own as soon as it is done, not at the next interval.
        let mut again: HashSet<Key> = HashSet::new();
        let mut services: HashMap<Key, Looked> = HashMap::new();
        let mut printed = Printed::default();
        let mut leadership = self.leadership.clone();
        let mut led = false;
        loop {
            // A replica that does not lead changes nothing: it keeps what it sees for the API
            // (each service's instances, the weights the data plane serves) until it leads.
            // Then it starts as a new controller would, from what the data plane serves.
            if let Some(watched) = leadership.as_mut() {
                if !watched.borrow_and_update().may_act() {
                    led = false;
                    self.observe_as_follower().await;
                    tokio::select! {
                        () = &mut shutdown => return,
                        changed = watched.changed() => {
                            if changed.is_err() {
                                return;
                            }
                        }
                        () = tokio::time::sleep(self.config.reconcile_interval()) => {}
                    }
                    continue;
                }
                if !led {
                    *self.lock() = State::default();
                    self.propagator.reset();
                    self.status.replace(crate::status::Board::new());
                    led = true;
                }
            }
            let round_at = Instant::now() + self.config.reconcile_interval();
            {
                let _round = self.pass.lock().await;
                let mut errors = Vec::new();
                if let Some((round, work)) = self.round(&mut errors).await {
                    let keys: HashSet<&Key> = work.iter().map(|w| &w.key).collect();
                    services
                        .retain(|key, _| keys.contains(key) || tasks.values().any(|k| k == key));
                    let mut fresh: HashMap<Key, Work> = HashMap::new();
                    let mut order = Vec::new();
                    for work in work {
                        // Looked at now: its own time-driven wake is set again when it is done.
                        services.entry(work.key.clone()).or_default().wake_at = None;
                        if tasks.values().any(|key| *key == work.key) {
                            again.insert(work.key);
                        } else {
                            order.push(work.key.clone());
                            fresh.insert(work.key.clone(), work);
                        }
                    }
                    // First come, first served: services still waiting from an earlier round
                    // keep their place (with this round's reads), the rest queue behind them.
                    // Rebuilt in the round's order each time, a queue longer than the tasks
                    // allowed at once starved its tail while rounds came often.
                    let waiting = std::mem::take(&mut queued);
                    for key in waiting.iter().map(Queued::key).chain(&order) {
                        if let Some(work) = fresh.remove(key) {
                            queued.push_back(Queued::Read(work));
                        }
                    }
                    let active: HashSet<i64> = services
                        .values()
                        .filter_map(|looked| looked.active)
                        .collect();
                    self.finish_round(&round, &active, &mut errors).await;
                }
                printed.round(&errors);
            }
            loop {
                while in_flight.len() < limit
                    && let Some(next) = queued.pop_front()
                {
                    let key = next.key().clone();
                    let controller = Arc::clone(&self);
                    let task = in_flight.spawn(async move {
                        match next {
                            Queued::Read(work) => controller.reconcile_key(work).await,
                            Queued::Look(key) => match controller.look(&key).await {
                                Ok(work) => controller.reconcile_key(work).await,
                                Err(error) => (
                                    key,
                                    Reconciled {
                                        errors: vec![error],
                                        ..Reconciled::default()
                                    },
                                ),
                            },
                        }
                    });
                    tasks.insert(task.id(), key);
                }
                let wake_at = services
                    .values()
                    .filter_map(|looked| looked.wake_at)
                    .fold(round_at, Instant::min);
                tokio::select! {
                    () = &mut shutdown => return,
                    () = self.wake.notified() => break,
                    Ok(()) = changes.changed() => break,
                    () = tokio::time::sleep_until(wake_at) => {
                        let now = Instant::now();
                        if now >= round_at {
                            break;
                        }
                        // A service's own time (a drain grace, a step) is a look at it alone.
                        for (key, looked) in &mut services {
                            if looked.wake_at.is_none_or(|at| at > now) {
                                continue;
                            }
                            looked.wake_at = None;
                            if tasks.values().any(|k| k == key) {
                                again.insert(key.clone());
                            } else if !queued.iter().any(|q| q.key() == key) {
                                queued.push_back(Queued::Look(key.clone()));
                            }
                        }
                    }
                    Some(done) = in_flight.join_next_with_id() => {
                        let (id, done) = match done {
                            Ok((id, (_, outcome))) => (id, Ok(outcome)),
                            Err(error) => (error.id(), Err(error)),
                        };
                        let Some(key) = tasks.remove(&id) else {
                            continue;
                        };
                        let outcome = done.unwrap_or_else(|error| Reconciled {
                            errors: vec![ControlError::Task(format!(
                                "reconciling {} in {}: {error}",
                                key.0, key.1
                            ))],
                            ..Reconciled::default()
                        });
                        printed.service(&key, &outcome.errors);
                        let woken = again.remove(&key);
                        let looked = services.entry(key.clone()).or_default();
                        looked.wake_at = outcome
                            .requeue_after_ms
                            .map(|ms| Instant::now() + Duration::from_millis(ms.max(10)));
                        looked.active = outcome.deployment;
                        if woken && !queued.iter().any(|q| *q.key() == key) {
                            queued.push_back(Queued::Look(key));
                        }
                    }
                    open = next_signal(&mut scale_up) => {
                        if !open {
                            scale_up = None;
                        }
                        if autoscaling {
                            self.autoscale_and_report().await;
                        }
                        break;
                    }
                    _ = tick.tick(), if autoscaling => {
                        if self.autoscale_and_report().await {
                            break;
                        }
                    }
                }
            }
        }
    }

    /// What a replica that does not lead keeps for the API: each service's instances as the
    /// driver lists them, and the weights the data plane serves. Nothing is written, started,
    /// stopped or routed.
    async fn observe_as_follower(&self) {
        let Ok(desired) = self
            .db("list desired states", |store| store.desired_list())
            .await
        else {
            return;
        };
        let Ok(replicas) = self.driver.replicas().await else {
            return;
        };
        let mut errors = Vec::new();
        let mut by_key = self.group(replicas, &mut errors).await;
        let serving = self.dataplane.serving();
        let routes: BTreeMap<Key, &RouteConfig> = serving
            .iter()
            .flat_map(|table| &table.routes)
            .map(|route| ((route.service.clone(), route.env.clone()), route))
            .collect();
        let mut keys: BTreeSet<Key> = desired
            .iter()
            .map(|d| (d.service.clone(), d.env.clone()))
            .collect();
        keys.extend(by_key.keys().cloned());
        let mut state = self.lock();
        state.services = keys
            .into_iter()
            .map(|key| {
                let service = ServiceState {
                    routes: routes
                        .get(&key)
                        .and_then(|route| weights_of(route))
                        .unwrap_or_default(),
                    instances: by_key.remove(&key).unwrap_or_default(),
                    ..ServiceState::default()
                };
                (key, Arc::new(Cell::new(service)))
            })
            .collect();
        let board = state
            .services
            .iter()
            .map(|(key, cell)| (key.clone(), ServiceStatus::of(&cell.lock())))
            .collect();
        drop(state);
        self.status.replace(board);
    }

    /// One autoscaler round, its errors printed; true when a count changed.
    async fn autoscale_and_report(&self) -> bool {
        if !self.may_act() {
            return false;
        }
        self.sample_traffic();
        let (changed, errors) = self.autoscale().await;
        for error in errors {
            tracing::error!(error = runway_log::chain(&error), "autoscaler");
        }
        changed
    }

    /// Reconciles every service in every environment once: each desired state, and each
    /// service/env that still has instances or routes without one (decommissioned), up to
    /// `reconcile_concurrency` at once. Returns what went wrong; one service's failure does
    /// not stop the others.
    pub async fn reconcile_all(&self) -> Vec<ControlError> {
        let _round = self.pass.lock().await;
        let mut errors = Vec::new();
        let Some((round, work)) = self.round(&mut errors).await else {
            return errors;
        };
        let outcomes: Vec<(Key, Reconciled)> = futures_util::stream::iter(work)
            .map(|work| self.reconcile_key(work))
            .buffer_unordered(self.config.reconcile_concurrency.max(1))
            .collect()
            .await;
        let mut active = HashSet::new();
        for (_, outcome) in outcomes {
            active.extend(outcome.deployment);
            errors.extend(outcome.errors);
        }
        self.finish_round(&round, &active, &mut errors).await;
        // No writer task runs beside this: the round's events are written now.
        if let Err(error) = self.events.write().await {
            errors.push(error);
        }
        errors
    }

    /// What a round reads, once for every service: the desired states, the registered
    /// services, the driver's replicas (each given to its service and environment); and the
    /// work, one per service and environment. `None` when the store or the driver cannot be
    /// read (the error is in `errors`).
    async fn round(&self, errors: &mut Vec<ControlError>) -> Option<(Round, Vec<Work>)> {
        self.carry_on_from_serving_table();
        let desired = match self
            .db("list desired states", |store| store.desired_list())
            .await
        {
            Ok(desired) => desired,
            Err(error) => {
                errors.push(error);
                return None;
            }
        };
        match self.db("list services", |store| store.service_list()).await {
            Ok(services) => {
                self.lock().known = services
                    .into_iter()
                    .flat_map(|s| {
                        let name = s.name;
                        s.environments.into_iter().map(move |e| (name.clone(), e))
                    })
                    .collect();
            }
            Err(error) => errors.push(error),
        }
        self.read_revisions(&desired, errors).await;
        let (running, mut by_key) = match self.replicas(errors).await {
            Ok(replicas) => replicas,
            Err(error) => {
                errors.push(error);
                return None;
            }
        };
        let mut keys: BTreeSet<Key> = desired
            .iter()
            .map(|d| (d.service.clone(), d.env.clone()))
            .collect();
        keys.extend(by_key.keys().cloned());
        {
            let state = self.lock();
            keys.extend(state.services.keys().cloned());
            keys.extend(state.adopted.keys().cloned());
        }
        let wanted: HashMap<(&str, &str), &Desired> = desired
            .iter()
            .map(|d| ((d.service.as_str(), d.env.as_str()), d))
            .collect();
        let work = keys
            .into_iter()
            .map(|key| Work {
                wanted: wanted
                    .get(&(key.0.as_str(), key.1.as_str()))
                    .map(|d| (*d).clone()),
                instances: by_key.remove(&key).unwrap_or_default(),
                key,
            })
            .collect();
        let kept = match self.driver.revisions().await {
            Ok(kept) => kept,
            Err(error) => {
                errors.push(ControlError::driver("list the revisions it keeps", error));
                Vec::new()
            }
        };
        Some((
            Round {
                desired,
                running,
                kept,
            },
            work,
        ))
    }

    /// What a round would read for one service in one environment, read for it alone: its
    /// desired state and its replicas.
    async fn look(&self, key: &Key) -> Result<Work> {
        let (service, env) = key.clone();
        let wanted = self
            .db(
                format!("read the desired state of {service}/{env}"),
                move |store| store.desired_get(&service, &env),
            )
            .await?;
        let mut errors = Vec::new();
        self.read_revisions(wanted.as_slice(), &mut errors).await;
        let (_, mut by_key) = self.replicas(&mut errors).await?;
        let instances = by_key.remove(key).unwrap_or_default();
        match errors.into_iter().next() {
            Some(error) => Err(error),
            None => Ok(Work {
                key: key.clone(),
                wanted,
                instances,
            }),
        }
    }

    /// Reconciles one service in one environment, with what its round read.
    async fn reconcile_key(&self, work: Work) -> (Key, Reconciled) {
        let span = tracing::info_span!("reconcile", service = %work.key.0, env = %work.key.1);
        let mut deployment = None;
        let (requeue_after_ms, errors) = match self
            .reconcile_service(
                &work.key,
                work.wanted.as_ref(),
                work.instances,
                &mut deployment,
            )
            .instrument(span)
            .await
        {
            Ok(done) => done,
            Err(error) => (None, vec![error]),
        };
        // Its route and status are on the propagator and the board, for whoever asks: the
        // loop does not.
        let outcome = Reconciled {
            route: None,
            status: Vec::new(),
            requeue_after_ms,
            deployment,
            errors,
        };
        (work.key, outcome)
    }

    /// One pass over a service in an environment, given its desired state (`None`: it has
    /// none, so what runs of it drains and stops) and its replicas as the driver lists them;
    /// its revisions are read from the store once and kept. The pass plans, sets its route,
    /// asks the driver for its starts and stops, and moves its deployment along, as a round
    /// does for each service; it returns its route, its status and when to look again. A
    /// round runs it with what it read; this is for a caller that has its own reading.
    pub async fn reconcile(
        &self,
        service: &str,
        env: &str,
        desired: Option<&Desired>,
        replicas: Vec<Replica>,
    ) -> Reconciled {
        let work = Work {
            key: (service.to_owned(), env.to_owned()),
            wanted: desired.cloned(),
            instances: replicas,
        };
        let (key, mut outcome) = self.reconcile_key(work).await;
        // No writer task runs beside this: the pass's events are written now.
        if let Err(error) = self.events.write().await {
            outcome.errors.push(error);
        }
        outcome.route = self.propagator.route_in_force(&key);
        outcome.status = self
            .status
            .get(&key)
            .map(|status| status.revisions)
            .unwrap_or_default();
        outcome
    }

    /// What a round does once its services are under way: the table (with no service at all,
    /// it still goes out once, with its environments), the revisions no longer of use
    /// removed from the driver (what it keeps of them, a cluster's objects, goes with them;
    /// done before the next round, which may want one again), and what was kept for
    /// deployments no longer in progress (`active` are).
    async fn finish_round(
        &self,
        round: &Round,
        active: &HashSet<i64>,
        errors: &mut Vec<ControlError>,
    ) {
        if let Err(error) = self.publish_round().await {
            errors.push(error);
        }
        let (dropped, live) = self.forget_gone(&round.desired, &round.running);
        // Those this controller forgot now, and those the driver keeps that nothing uses (left
        // by an earlier control plane, which stopped before it removed them).
        let mut gone: BTreeSet<(String, String, String)> = dropped
            .iter()
            .map(|info| {
                let (service, env) = info.key();
                (service, env, info.record.name.clone())
            })
            .collect();
        gone.extend(
            round
                .kept
                .iter()
                .filter(|kept| !live.contains(&kept.revision))
                .map(|kept| {
                    (
                        kept.service.clone(),
                        kept.env.clone(),
                        kept.revision.clone(),
                    )
                }),
        );
        for (service, env, name) in gone {
            if !self.may_act() {
                break;
            }
            if let Err(error) = self.driver.remove(&service, &env, &name).await {
                errors.push(ControlError::driver(format!("remove {name}"), error));
            }
        }
        self.forget_finished(active);
    }

    /// The desired states' revisions, read into the cache.
    async fn read_revisions(&self, desired: &[Desired], errors: &mut Vec<ControlError>) {
        for revision in desired.iter().flat_map(|d| &d.revisions) {
            if let Err(error) = self.revision(&revision.revision).await {
                errors.push(error);
            }
        }
    }

    /// The driver's replicas by service and environment ([`Self::group`]), and the names of
    /// the revisions they are of; the stops of those gone from the list are told.
    async fn replicas(
        &self,
        errors: &mut Vec<ControlError>,
    ) -> Result<(HashSet<String>, BTreeMap<Key, Vec<Replica>>)> {
        let statuses = self
            .driver
            .replicas()
            .await
            .map_err(|error| ControlError::driver("list replicas", error))?;
        self.note_stopped(&statuses);
        let running = statuses
            .iter()
            .filter_map(|replica| revision_of(&replica.id).map(str::to_owned))
            .collect();
        Ok((running, self.group(statuses, errors).await))
    }

    /// Instances by service and environment. An instance goes with its revision's service and
    /// environment; one the platform started ([`Replica::managed`]) whose revision the
    /// store no longer has (its service was decommissioned, maybe while no controller ran)
    /// goes with the service and environment its runtime reports, where nothing is desired, so
    /// it is drained and stopped. Any other instance (a developer's `runway run`) is left out,
    /// and so left alone.
    async fn group(
        &self,
        statuses: Vec<Replica>,
        errors: &mut Vec<ControlError>,
    ) -> BTreeMap<Key, Vec<Replica>> {
        let ids: BTreeSet<&str> = statuses.iter().map(|s| s.id.as_str()).collect();
        for cell in self.lock().services.values() {
            cell.lock()
                .tracked
                .retain(|id, _| ids.contains(id.as_str()));
        }
        let mut by_key: BTreeMap<Key, Vec<Replica>> = BTreeMap::new();
        for status in statuses {
            let Some(name) = revision_of(&status.id) else {
                continue;
            };
            // Its runtime says it runs another revision than its id names: not ours.
            if status.revision.as_deref().is_some_and(|r| r != name) {
                continue;
            }
            match self.revision(name).await {
                Ok(Some(info)) => by_key.entry(info.key()).or_default().push(status),
                Ok(None) => {
                    if let Some(key) = managed_key(&status, name) {
                        by_key.entry(key).or_default().push(status);
                    }
                }
                Err(error) => errors.push(error),
            }
        }
        by_key
    }

    /// Plans one service in one environment and applies the plan; then moves its deployment
    /// (its id in `active`). Returns when to plan again for time's sake, and the actions'
    /// errors.
    async fn reconcile_service(
        &self,
        key: &Key,
        wanted: Option<&Desired>,
        instances: Vec<Replica>,
        active: &mut Option<i64>,
    ) -> Result<(Option<u64>, Vec<ControlError>)> {
        let now = now_ms();
        let cell = self.cell(key);
        let (deployment, latest, recent) = match wanted {
            Some(_) => self.deployments(key).await?,
            None => (None, None, Vec::new()),
        };
        *active = deployment.as_ref().map(|d| d.id);
        // A progressive rollout sets the weights before the planner moves traffic.
        let (outcome, rolled) = match (deployment.as_ref(), wanted) {
            (Some(deployment), Some(wanted)) => self.roll(key, deployment, wanted).await?,
            _ => (Outcome::Rolling, None),
        };
        // With no deployment in progress, a blue/green's old revision leaves when its warm
        // time is over.
        let mut errors = Vec::new();
        let (retired, warm_until) = match (deployment.as_ref(), latest.as_ref(), wanted) {
            (None, Some(latest), Some(wanted)) => self
                .retire_warm(latest, wanted)
                .await
                .unwrap_or_else(|error| {
                    errors.push(error);
                    (None, None)
                }),
            _ => (None, None),
        };
        let wanted = rolled.as_ref().or(retired.as_ref()).or(wanted);
        let (observed, changes) = self.observe(&cell, &instances, now);
        let policy = self.policy_for(wanted, &instances);
        let serving = self.lock().adopted.remove(key);
        let routes = {
            let mut service = cell.lock();
            if !service.planned {
                service.routes = serving
                    .as_ref()
                    .and_then(weights_of)
                    .unwrap_or_else(|| seed_routes(deployment.as_ref(), wanted));
            }
            service.planned = true;
            service.instances = instances;
            service.routes.clone()
        };
        let desired = plan_desired(wanted);
        let observed = Observed {
            instances: observed,
            routes,
            now_ms: now,
        };
        let mut plan = plan(&desired, &observed, &policy);
        {
            let mut service = cell.lock();
            service.status = plan.status.clone();
            self.publish_status(key, &service);
        }
        // A process whose service may no longer run one stops now, not at its next restart.
        for instance in self.barred_processes(key, &observed.instances).await {
            let planned = plan.actions.iter().any(|a| {
                matches!(a, Action::Stop { instance: i } | Action::Drain { instance: i } if *i == instance)
            });
            if !planned {
                plan.actions.push(Action::Stop { instance });
            }
        }
        // Readiness changed since the last pass: the table follows at once.
        if let Err(error) = self.apply_route(key).await {
            errors.push(error);
        }
        // Each event in the story of the deployment its revision belongs to.
        let story =
            |revision: &str| crate::deploy::story_of(revision, deployment.as_ref(), &recent);
        for (revision, change) in changes {
            self.event(story(&revision), &change);
        }
        // Starts and stops go to the driver together, one call per revision, once the routes
        // and drains before them are done.
        let mut batches: BTreeMap<String, Batch> = BTreeMap::new();
        for action in plan.actions {
            let told = match &action {
                Action::Start { revision } | Action::Replace { revision, .. } => story(revision),
                Action::Drain { instance } | Action::Stop { instance } => {
                    revision_of(instance).and_then(story)
                }
                Action::SetRoutes { .. } => deployment.as_ref().or(latest.as_ref()),
            };
            let result = match action {
                Action::SetRoutes { weights } => self.set_routes(key, weights).await,
                Action::Drain { instance } => self
                    .drain(key, &instance, &policy)
                    .await
                    .map(|()| format!("instance {instance} draining")),
                Action::Start { revision } => {
                    batches.entry(revision).or_default().starts += 1;
                    continue;
                }
                Action::Replace { instance, revision } => {
                    batches.entry(revision).or_default().replace.push(instance);
                    continue;
                }
                Action::Stop { instance } => {
                    // One its driver is stopping already is left to it.
                    if self.is_stopping(key, &instance) {
                        continue;
                    }
                    if let Some(revision) = revision_of(&instance) {
                        batches
                            .entry(revision.to_owned())
                            .or_default()
                            .stop
                            .push(instance);
                    }
                    continue;
                }
            };
            self.told(result, told, deployment.as_ref(), &mut errors);
        }
        for (revision, batch) in batches {
            let told = story(&revision);
            for result in self.scale(key, &revision, batch, told).await {
                self.told(result, told, deployment.as_ref(), &mut errors);
            }
        }
        if let (Some(deployment), Some(wanted)) = (deployment, wanted) {
            self.progress(key, &deployment, wanted, &outcome).await?;
        }
        let requeue = match outcome {
            // A step under way is looked at every second: its analysis, its pause's end.
            Outcome::Stepping { wake_at_ms, .. } => min_some(
                plan.requeue_after_ms,
                Some(wake_at_ms.map_or(1_000, |at| at.saturating_sub(now).min(1_000))),
            ),
            _ => min_some(
                plan.requeue_after_ms,
                warm_until.map(|at| at.saturating_sub(now)),
            ),
        };
        Ok((requeue, errors))
    }

    /// The live instances of plain-process revisions of the service when it may no longer
    /// run processes (its admin's leave taken back, and no operator's for every service).
    async fn barred_processes(&self, key: &Key, instances: &[ObservedInstance]) -> Vec<String> {
        if self.allow_processes {
            return Vec::new();
        }
        let mut processes = Vec::new();
        for instance in instances {
            if !(instance.state.is_live() || instance.state == InstanceState::Draining) {
                continue;
            }
            if let Ok(Some(info)) = self.revision(&instance.revision).await
                && info.is_process()
            {
                processes.push(instance.id.clone());
            }
        }
        if processes.is_empty() {
            return processes;
        }
        let name = key.0.clone();
        match self
            .db(format!("read service {name}"), move |store| {
                store.service_get(&name)
            })
            .await
        {
            Ok(service) if !service.allow_processes => processes,
            // Allowed, or gone (its instances are the planner's to retire), or unreadable
            // (the next pass looks again).
            _ => Vec::new(),
        }
    }

    /// The planner's instances, with the state changes worth an event (and the revision each
    /// is about).
    fn observe(
        &self,
        cell: &Cell,
        instances: &[Replica],
        now: u64,
    ) -> (Vec<ObservedInstance>, Vec<(String, String)>) {
        let mut service = cell.lock();
        let mut observed = Vec::with_capacity(instances.len());
        let mut changes = Vec::new();
        let mut lost = Vec::new();
        for status in instances {
            let Some(revision) = revision_of(&status.id) else {
                continue;
            };
            // An instance a controller before this one started, seen for the first time: what
            // it is now was told then (or happened while no controller ran), so it is taken as
            // it is, and no deployment, ended or not, hears of it again.
            let adopted = !service.tracked.contains_key(&status.id)
                && status
                    .started_at_ms
                    .is_some_and(|at| at < self.started_at_ms);
            let tracked = service.tracked.entry(status.id.clone()).or_default();
            if adopted {
                tracked.warned.clone_from(&status.warning);
            }
            let current = instance_state(status, tracked);
            let current_kind = kind(&current);
            if tracked.kind != current_kind {
                if !adopted && let Some(change) = change_message(&status.id, current_kind, status) {
                    changes.push((revision.to_owned(), change));
                }
                let lost_readiness = tracked.kind == "ready"
                    && matches!(
                        current_kind,
                        "not_ready" | "failed" | "crash_loop" | "exited"
                    );
                if lost_readiness {
                    lost.push(revision.to_owned());
                }
                tracked.kind = current_kind;
                tracked.since_ms = now;
            }
            if let Some(warning) = &status.warning
                && tracked.warned.as_ref() != Some(warning)
            {
                changes.push((
                    revision.to_owned(),
                    format!("instance {} cannot be reached yet: {warning}", status.id),
                ));
                tracked.warned = Some(warning.clone());
            }
            tracked.was_ready |= current.is_ready();
            observed.push(ObservedInstance {
                id: status.id.clone(),
                revision: revision.to_owned(),
                state: current,
                since_ms: tracked.draining_since_ms.unwrap_or(tracked.since_ms),
            });
        }
        for revision in lost {
            *service.readiness_failures.entry(revision).or_default() += 1;
        }
        (observed, changes)
    }

    /// The planner's bounds for this service: the drain grace shortened to the manifests'
    /// stop grace, and none for workers, which have no requests to finish (their stop signal
    /// and stop grace are how they finish their work).
    fn policy_for(&self, wanted: Option<&Desired>, instances: &[Replica]) -> Policy {
        let state = self.lock();
        let names = wanted
            .into_iter()
            .flat_map(|d| d.revisions.iter().map(|r| r.revision.as_str()))
            .chain(instances.iter().filter_map(|s| revision_of(&s.id)));
        let grace = names
            .filter_map(|name| state.revisions.get(name))
            .map(|info| {
                if info.is_worker() {
                    0
                } else {
                    self.config.drain_grace_for(info.stop_grace_seconds())
                }
            })
            .min()
            .unwrap_or(self.config.drain_grace_ms);
        Policy {
            drain_grace_ms: grace,
            ..self.config.policy.clone()
        }
    }

    /// Tells what an action did as an event of the deployment it is about (`told`), or its
    /// failure as one of the deployment in progress.
    fn told(
        &self,
        result: Result<String>,
        told: Option<&Deployment>,
        current: Option<&Deployment>,
        errors: &mut Vec<ControlError>,
    ) {
        match result {
            Ok(message) => self.event(told, &message),
            Err(error) => {
                self.event(current, &runway_log::chain(&error));
                errors.push(error);
            }
        }
    }

    /// The replica's driver is stopping it (its stop signal sent, its grace running: up to an
    /// hour for a worker finishing its jobs), so asking again is needless.
    fn is_stopping(&self, key: &Key, id: &str) -> bool {
        self.lock().cell(key).is_some_and(|cell| {
            cell.lock()
                .instances
                .iter()
                .any(|replica| replica.id == id && replica.phase == Phase::Stopping)
        })
    }

    /// Starts and stops a revision's replicas as the plan says, in one call to the driver;
    /// returns what happened, one result per change. The stops leave the table first.
    #[tracing::instrument(level = "info", name = "revision", skip(self, key, batch, told))]
    async fn scale(
        &self,
        key: &Key,
        revision: &str,
        batch: Batch,
        told: Option<&Deployment>,
    ) -> Vec<Result<String>> {
        if !self.may_act() {
            return vec![Err(Self::not_leading())];
        }
        let retire: Vec<String> = batch.replace.iter().chain(&batch.stop).cloned().collect();
        let starting = batch.starts + u32::try_from(batch.replace.len()).unwrap_or(u32::MAX);
        let cell = self.cell(key);
        let (known, kept) = {
            let service = cell.lock();
            let mine: Vec<&Replica> = service
                .instances
                .iter()
                .filter(|replica| revision_of(&replica.id) == Some(revision))
                .collect();
            let kept = mine
                .iter()
                .filter(|r| !r.phase.is_final() && r.phase != Phase::Stopping)
                .filter(|r| !retire.contains(&r.id))
                .count();
            let known: HashSet<String> = mine.iter().map(|r| r.id.clone()).collect();
            (known, u32::try_from(kept).unwrap_or(u32::MAX))
        };
        let mut results = Vec::new();
        let newly_retiring = mark_retiring(&cell, &retire, told);
        if !retire.is_empty()
            && let Err(error) = self.apply_route(key).await
        {
            results.push(Err(error));
        }
        let started = match starting {
            0 => None,
            _ => Some(self.start(key, revision, kept + starting, &retire).await),
        };
        let mut new_ids: Vec<String> = Vec::new();
        let started_ok = matches!(started, Some(Ok(_)));
        match started {
            Some(Ok(replicas)) => {
                let fresh = replicas.into_iter().filter(|r| !known.contains(&r.id));
                let fresh: Vec<Replica> = fresh.collect();
                new_ids = fresh.iter().map(|r| r.id.clone()).collect();
                cell.lock().instances.extend(fresh);
            }
            Some(Err(error)) => results.push(Err(error)),
            None => {}
        }
        // Without a start (or when it failed), the stops go alone.
        if !retire.is_empty() && !started_ok {
            let (service, env) = key;
            if let Err(error) = self.driver.retire(service, env, revision, &retire).await {
                results.push(Err(ControlError::driver(
                    format!("stop replicas of {revision}"),
                    error,
                )));
            }
        }
        let mut new_ids = new_ids.into_iter();
        for old in &batch.replace {
            results.push(Ok(match new_ids.next() {
                Some(new) => format!("instance {old} replaced by {new}"),
                None => format!("instance {old} stopping"),
            }));
        }
        results.extend(new_ids.map(|id| Ok(format!("instance {id} started"))));
        for id in batch.stop.iter().filter(|id| newly_retiring.contains(id)) {
            results.push(Ok(format!("instance {id} stopping")));
        }
        results
    }

    /// Asks the driver for `replicas` replicas of the revision, `retire` stopped first;
    /// returns the revision's replicas. A failure is remembered for the revision's status.
    #[tracing::instrument(level = "info", name = "revision", skip(self, key, retire))]
    async fn start(
        &self,
        key: &Key,
        revision: &str,
        replicas: u32,
        retire: &[String],
    ) -> Result<Vec<Replica>> {
        let workload = self.workload(key, revision).await?;
        let scale = Scale {
            replicas,
            retire: retire.to_vec(),
        };
        match self.driver.scale(&workload, &scale).await {
            Ok(replicas) => {
                self.remember_start_error(key, revision, false, None);
                Ok(replicas)
            }
            Err(error) => {
                let permanent = matches!(error, DriverError::Refused(_));
                let reason = error.to_string();
                self.remember_start_error(key, revision, permanent, Some(reason.clone()));
                Err(ControlError::Start {
                    revision: revision.to_owned(),
                    reason,
                })
            }
        }
    }

    /// The revision's workload, its secrets opened; the error (remembered as the revision's
    /// lasting failure) says why it can never start.
    async fn workload(&self, key: &Key, revision: &str) -> Result<runway_driver::Workload> {
        let failed = |reason: String| ControlError::Start {
            revision: revision.to_owned(),
            reason,
        };
        let info = self
            .revision(revision)
            .await?
            .ok_or_else(|| failed("the store has no such revision".to_owned()))?;
        let inputs = {
            let (store, sealer, info) = (
                Arc::clone(&self.store),
                Arc::clone(&self.sealer),
                Arc::clone(&info),
            );
            tokio::task::spawn_blocking(move || start_inputs(store.as_ref(), &sealer, &info.record))
                .await
                .map_err(|e| ControlError::Task(e.to_string()))?
        };
        let mut workload = inputs
            .and_then(|(secrets, service)| {
                may_start(&info, &service, self.allow_processes)?;
                workload(&info, &service, secrets, self.registry_host.as_deref())
            })
            .map_err(|reason| {
                self.remember_start_error(key, revision, true, Some(reason.clone()));
                failed(reason)
            })?;
        if let Some(issuer) = self
            .identity
            .as_ref()
            .filter(|_| !self.driver.own_identity())
        {
            // A failure here may pass (the store back): not remembered as lasting.
            let token = issuer
                .issue(
                    &workload.service,
                    &workload.env,
                    &workload.revision,
                    workload.config.identity_audience.as_deref(),
                )
                .await
                .map_err(failed)?;
            workload.identity = Some(token);
        }
        Ok(workload)
    }

    /// Tells the deployments whose replicas were being stopped which of them are gone.
    fn note_stopped(&self, listed: &[Replica]) {
        let ids: HashSet<&str> = listed.iter().map(|r| r.id.as_str()).collect();
        let gone: Vec<(String, Option<i64>)> = self
            .lock()
            .services
            .values()
            .flat_map(|cell| {
                cell.lock()
                    .retiring
                    .extract_if(|id, _| !ids.contains(id.as_str()))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (id, told) in gone {
            if let Some(deployment) = told {
                self.events
                    .add(deployment, format!("instance {id} stopped"));
            }
        }
    }

    /// Remembers the weights and sets the whole table; on refusal the old weights stay.
    async fn set_routes(&self, key: &Key, weights: Vec<RouteWeight>) -> Result<String> {
        let message = traffic_message(&weights);
        let cell = self.cell(key);
        let previous = std::mem::replace(&mut cell.lock().routes, weights);
        let applied = self.apply_route(key).await;
        let mut service = cell.lock();
        if applied.is_err() {
            service.routes = previous;
        }
        self.publish_status(key, &service);
        drop(service);
        applied.map(|()| message)
    }

    /// Once, before the first pass: when the data plane outlived the previous controller, the
    /// table it serves is where this one starts (each service's weights, and its whole route
    /// until the pass reaches it), so the first tables set keep every service routed.
    fn carry_on_from_serving_table(&self) {
        let mut state = self.lock();
        if state.serving_read {
            return;
        }
        state.serving_read = true;
        let Some(table) = self.dataplane.serving() else {
            return;
        };
        // The operator's fixed routes (cell routers, this configuration's or an earlier one's)
        // are not services: each table has them anew.
        let fixed = |route: &RouteConfig| {
            route.cells.is_some()
                || self
                    .propagator
                    .fixed
                    .iter()
                    .any(|f| f.service == route.service && f.env == route.env)
        };
        let adopted: Vec<RouteConfig> = table
            .routes
            .iter()
            .filter(|route| !fixed(route))
            .cloned()
            .collect();
        for route in &adopted {
            state
                .adopted
                .insert((route.service.clone(), route.env.clone()), route.clone());
        }
        self.propagator.adopt(table, &adopted);
    }

    /// Publishes what the API shows of the service, from its state as the caller holds it.
    pub(crate) fn publish_status(&self, key: &Key, service: &ServiceState) {
        self.status.publish(key, Some(ServiceStatus::of(service)));
    }

    /// Publishes the service's entry in the table, when it changed, and waits until the
    /// data plane has it: a service at rest costs a look at its own entry, not a table.
    pub(crate) async fn apply_route(&self, key: &Key) -> Result<()> {
        let entry = entry_for(&self.lock(), key);
        if !self.propagator.holds(key, entry.as_ref()) && !self.may_act() {
            return Err(Self::not_leading());
        }
        self.propagator
            .publish(key.clone(), entry)
            .await
            .map_err(ControlError::Ingress)
    }

    /// A round's part of the table: the entries of every service (those whose reconciler has
    /// not run yet, those registered with none, those gone), and the edge's part, published
    /// together; services served from before this controller and not reached yet are kept as
    /// they were.
    async fn publish_round(&self) -> Result<()> {
        if !self.may_act() {
            return Err(Self::not_leading());
        }
        let changes: Vec<(Key, Option<Entry>)> = {
            let state = self.lock();
            let keys: BTreeSet<Key> = state
                .known
                .iter()
                .chain(state.services.keys())
                .cloned()
                .chain(self.propagator.keys())
                .collect();
            let planned = |key: &Key| state.services.get(key).is_some_and(|c| c.lock().planned);
            keys.into_iter()
                .filter(|key| planned(key) || !state.adopted.contains_key(key))
                .map(|key| {
                    let entry = entry_for(&state, &key);
                    (key, entry)
                })
                .filter(|(key, entry)| !self.propagator.holds(key, entry.as_ref()))
                .collect()
        };
        self.propagator
            .publish_all(changes, true)
            .await
            .map_err(ControlError::Ingress)
    }

    fn remember_start_error(
        &self,
        key: &Key,
        revision: &str,
        permanent: bool,
        reason: Option<String>,
    ) {
        let Some(cell) = self.lock().cell(key) else {
            return;
        };
        let mut service = cell.lock();
        match reason {
            Some(reason) => service
                .start_errors
                .insert(revision.to_owned(), StartFailure { permanent, reason }),
            None => service.start_errors.remove(revision),
        };
        self.publish_status(key, &service);
    }

    /// Marks the instance draining, updates the table, and lets the ingress drain it in the
    /// background; the planner stops it when its grace has passed.
    async fn drain(&self, key: &Key, id: &str, policy: &Policy) -> Result<()> {
        let address = {
            let cell = self.cell(key);
            let mut service = cell.lock();
            let now = now_ms();
            let tracked = service.tracked.entry(id.to_owned()).or_default();
            tracked.draining_since_ms.get_or_insert(now);
            service
                .instances
                .iter()
                .find(|i| i.id == id)
                .and_then(|replica| replica.address)
        };
        self.apply_route(key).await?;
        if let Some(address) = address
            && self.may_act()
        {
            let grace = Duration::from_millis(policy.drain_grace_ms);
            tokio::spawn(self.dataplane.drain(address, grace));
        }
        Ok(())
    }

    /// A revision by name, read from the store once and kept; `None` when the store does not
    /// know it (and never did, as far as this controller saw).
    pub(crate) async fn revision(&self, name: &str) -> Result<Option<Arc<RevisionInfo>>> {
        if let Some(info) = self.lock().revisions.get(name) {
            return Ok(Some(Arc::clone(info)));
        }
        let owned = name.to_owned();
        let found = self
            .db(format!("read revision {name}"), move |store| {
                store.revision_get(&owned)
            })
            .await;
        match found {
            Ok(record) => {
                let info = Arc::new(RevisionInfo::new(record));
                self.lock()
                    .revisions
                    .insert(name.to_owned(), Arc::clone(&info));
                Ok(Some(info))
            }
            Err(ControlError::Store {
                source: StoreError::NotFound { .. },
                ..
            }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Forgets services with no desired state, instances or routes left, and the revisions no
    /// longer of use; returns those revisions, and the names of those still of use.
    fn forget_gone(
        &self,
        desired: &[Desired],
        running: &HashSet<String>,
    ) -> (Vec<Arc<RevisionInfo>>, HashSet<String>) {
        let wanted: HashSet<(&str, &str)> = desired
            .iter()
            .map(|d| (d.service.as_str(), d.env.as_str()))
            .collect();
        let mut state = self.lock();
        let gone: Vec<Key> = state
            .services
            .iter()
            .filter(|(key, cell)| {
                let service = cell.lock();
                service.instances.is_empty()
                    && service.routes.is_empty()
                    && !wanted.contains(&(key.0.as_str(), key.1.as_str()))
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in gone {
            state.services.remove(&key);
            self.status.publish(&key, None);
        }
        // Revisions still of use: desired, with replicas (as the round listed them: a service
        // may not have been reached yet), routed, or served from before this controller. The
        // others are read again from the store if they ever are (a rollback).
        let mut live: HashSet<String> = desired
            .iter()
            .flat_map(|d| d.revisions.iter().map(|r| r.revision.clone()))
            .chain(running.iter().cloned())
            .collect();
        for route in state.adopted.values() {
            live.extend(route.revisions.iter().map(|r| r.name.clone()));
        }
        for cell in state.services.values() {
            let service = cell.lock();
            live.extend(service.routes.iter().map(|r| r.revision.clone()));
            live.extend(
                service
                    .instances
                    .iter()
                    .filter_map(|i| revision_of(&i.id).map(str::to_owned)),
            );
        }
        let dropped = state
            .revisions
            .extract_if(|name, _| !live.contains(name))
            .map(|(_, info)| info)
            .collect();
        for cell in state.services.values() {
            cell.lock()
                .readiness_failures
                .retain(|name, _| live.contains(name));
        }
        (dropped, live)
    }

    /// Forgets what it kept for progressive deployments no longer in progress (ended by a
    /// rollback that superseded them, say, rather than by this controller).
    fn forget_finished(&self, active: &HashSet<i64>) {
        for cell in self.lock().services.values() {
            let mut service = cell.lock();
            service.baselines.retain(|id, _| active.contains(id));
            service.rollout_messages.retain(|id, _| active.contains(id));
            service.unready_since.retain(|id, _| active.contains(id));
            service.deployments_seen.retain(|id, _| active.contains(id));
        }
    }

    /// Runs a store call on the blocking pool.
    pub(crate) async fn db<T: Send + 'static>(
        &self,
        what: impl Into<String>,
        call: impl FnOnce(&dyn Store) -> runway_store::Result<T> + Send + 'static,
    ) -> Result<T> {
        let store = Arc::clone(&self.store);
        let what = what.into();
        match tokio::task::spawn_blocking(move || call(store.as_ref())).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(ControlError::store(what, error)),
            Err(error) => Err(ControlError::Task(error.to_string())),
        }
    }

    /// Adds an event to the deployment in progress, if there is one: after those still
    /// waiting, so the story keeps its order (`events.rs` writes them).
    pub(crate) fn event(&self, deployment: Option<&Deployment>, message: &str) {
        if let Some(deployment) = deployment {
            self.events.add(deployment.id, message.to_owned());
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The service's own state, made when it has none. The controller's lock is let go
    /// before the cell is returned (see [`Cell`] for the order).
    pub(crate) fn cell(&self, key: &Key) -> Arc<Cell> {
        self.lock().service(key)
    }

    /// The table last given to the ingress (empty before the first).
    pub fn route_table(&self) -> RouteTableConfig {
        self.propagator.applied().unwrap_or_default()
    }
}

/// Marks the replicas as being stopped: draining in the table, and their stop told to
/// `told`'s deployment once they are gone. Returns those not marked before.
fn mark_retiring(cell: &Cell, ids: &[String], told: Option<&Deployment>) -> Vec<String> {
    let mut service = cell.lock();
    ids.iter()
        .filter(|id| {
            service
                .retiring
                .insert((*id).clone(), told.map(|d| d.id))
                .is_none()
        })
        .cloned()
        .collect()
}

/// The planner's desired state from the store's.
fn plan_desired(wanted: Option<&Desired>) -> PlanDesired {
    PlanDesired {
        revisions: wanted
            .map(|d| {
                d.revisions
                    .iter()
                    .map(|r| PlanRevision {
                        name: r.revision.clone(),
                        instances: r.instances,
                        weight: r.weight,
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// "traffic: hello-dev-00001 10%, hello-dev-00002 90%".
pub(crate) fn traffic_message(weights: &[RouteWeight]) -> String {
    if weights.is_empty() {
        return "traffic: none".to_owned();
    }
    let parts: Vec<String> = weights
        .iter()
        .map(|w| format!("{} {}%", w.revision, w.weight))
        .collect();
    format!("traffic: {}", parts.join(", "))
}

/// The event for an instance entering a state, when that is news.
fn change_message(id: &str, kind: &str, status: &Replica) -> Option<String> {
    match kind {
        "ready" => Some(format!("instance {id} is ready")),
        "failed" | "crash_loop" => {
            Some(format!("instance {id} failed: {}", failure_reason(status)))
        }
        "exited" => Some(format!("instance {id} exited: {}", failure_reason(status))),
        _ => None,
    }
}

fn min_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Waits for the next scale-up signal; false once the ingress is gone.
async fn next_signal(receiver: &mut Option<broadcast::Receiver<ScaleUp>>) -> bool {
    match receiver {
        Some(receiver) => !matches!(
            receiver.recv().await,
            Err(broadcast::error::RecvError::Closed)
        ),
        None => std::future::pending().await,
    }
}

/// The routes a controller assumes for a service it has not planned before (its first pass
/// after a start). The ingress's routes live only in memory; the desired state names only the
/// revision being deployed, so a deployment caught in progress by a restart would otherwise
/// leave its previous revision unrouted (and then retired, drained and stopped) before the
/// new one is ready. Its previous revision keeps the traffic until the planner moves it.
/// Without a deployment in progress, revisions scaled to zero keep their routes, so the
/// ingress holds their requests (and signals a scale-up) rather than answering 404.
/// A served route's weights, when they add up to a whole.
fn weights_of(route: &RouteConfig) -> Option<Vec<RouteWeight>> {
    let weights: Vec<RouteWeight> = route
        .revisions
        .iter()
        .filter(|revision| revision.weight > 0)
        .map(|revision| RouteWeight {
            revision: revision.name.clone(),
            weight: revision.weight,
        })
        .collect();
    (weights.iter().map(|w| w.weight).sum::<u32>() == 100).then_some(weights)
}

fn seed_routes(active: Option<&Deployment>, wanted: Option<&Desired>) -> Vec<RouteWeight> {
    if let Some(revision) = active.and_then(|deployment| deployment.from_revision.clone()) {
        return vec![RouteWeight {
            revision,
            weight: 100,
        }];
    }
    let Some(wanted) = wanted else {
        return Vec::new();
    };
    let scaled_to_zero = Desired {
        revisions: wanted
            .revisions
            .iter()
            .filter(|r| r.instances == 0 && r.weight > 0)
            .cloned()
            .collect(),
        ..wanted.clone()
    };
    crate::deploy::desired_routes(&scaled_to_zero)
}
