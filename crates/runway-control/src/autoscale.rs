//! The autoscaler's executor: samples each serving revision's demand from the ingress (its
//! requests in flight, queued and held), decides with [`runway_autoscaler::decide`], and sets
//! the revision's instance count in the desired state, which the planner then makes true.
//!
//! A revision is autoscaled while it is desired with traffic weight (workers never are: they
//! get no requests to count); one staged at weight 0
//! (blue/green before its switch, the old revision kept warm after it) keeps the count its
//! rollout gave it. Histories and decision state live in memory: after a restart the windows
//! fill again, and a revision is not scaled to zero before a whole stable window and the grace
//! have passed since this controller first decided for it.

use std::collections::BTreeSet;

use runway_autoscaler::{DecisionEvent, History, Sample, Settings, State as ScalerState, decide};
use runway_driver::{Driver, now_ms};
use runway_store::StoreError;
use serde::Serialize;

use crate::ACTOR;
use crate::controller::Controller;
use crate::error::{ControlError, Result};
use crate::key::Key;
use crate::observe::revision_of;
use crate::revision::RevisionInfo;
use crate::state::ServiceState;

/// One revision's autoscaler: its demand history and its decision state.
#[derive(Debug)]
pub(crate) struct Scaler {
    history: History,
    state: ScalerState,
    /// The last decision, for `runway status`.
    last: Option<DecisionEvent>,
    /// The last decision that changed the count.
    last_change: Option<DecisionEvent>,
}

/// What the API shows of a revision's autoscaler (on the status board).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScalerStatus {
    last: Option<DecisionEvent>,
    last_change: Option<DecisionEvent>,
    panicking: bool,
}

impl Scaler {
    pub(crate) fn status(&self) -> ScalerStatus {
        ScalerStatus {
            last: self.last.clone(),
            last_change: self.last_change.clone(),
            panicking: self.state.panicking(),
        }
    }
}

/// A revision's scaling as `runway status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScalingSummary {
    pub revision: String,
    /// Requests in flight, queued and held at the ingress now.
    pub concurrency: u64,
    /// The autoscaler's last decision, in one line, and when it was made (Unix ms).
    pub last_decision: Option<String>,
    pub last_decision_at_ms: Option<u64>,
    /// The last decision that changed the instance count.
    pub last_change: Option<String>,
    pub last_change_at_ms: Option<u64>,
    /// That decision whole: every input it was made from, so it can be replayed
    /// (`runway_autoscaler::decide_demand`), and the reasons for its count.
    pub last_change_event: Option<DecisionEvent>,
    /// Panic mode (a burst at least twice the ready capacity): no scale-down until it ends.
    pub panicking: bool,
}

impl<D: Driver> Controller<D> {
    /// One round of the autoscaler over every revision desired with traffic. Returns whether
    /// some count changed (the caller reconciles at once), and what went wrong.
    pub(crate) async fn autoscale(&self) -> (bool, Vec<ControlError>) {
        let mut errors = Vec::new();
        let desired = match self
            .db("list desired states", |store| store.desired_list())
            .await
        {
            Ok(desired) => desired,
            Err(error) => return (false, vec![error]),
        };
        let now = now_ms();
        let mut scaled = BTreeSet::new();
        // The services decided for, whose status (their autoscalers') is published again.
        let mut touched: BTreeSet<Key> = BTreeSet::new();
        let mut changed = false;
        for wanted in &desired {
            let key: Key = (wanted.service.clone(), wanted.env.clone());
            // Revisions with traffic now: a deploy's new revision is sized by its deploy
            // until the planner routes to it.
            let routed: BTreeSet<String> = self
                .lock()
                .cell(&key)
                .map(|cell| {
                    cell.lock()
                        .routes
                        .iter()
                        .map(|r| r.revision.clone())
                        .collect()
                })
                .unwrap_or_default();
            // During a split (a canary), neither side goes to zero: the analysis needs both.
            let split = wanted.revisions.iter().filter(|r| r.weight > 0).count() > 1;
            let mut generation = wanted.generation;
            for revision in wanted
                .revisions
                .iter()
                .filter(|r| r.weight > 0 && routed.contains(&r.revision))
            {
                scaled.insert(revision.revision.clone());
                touched.insert(key.clone());
                let info = match self.revision(&revision.revision).await {
                    Ok(Some(info)) if !info.is_worker() => info,
                    Ok(_) => continue,
                    Err(error) => {
                        errors.push(error);
                        continue;
                    }
                };
                let Some(count) = self.decide(&key, &info, revision.instances, split, now) else {
                    continue;
                };
                match self
                    .set_instances(&key, &revision.revision, count, generation)
                    .await
                {
                    Ok(Some(written)) => {
                        generation = written;
                        changed = true;
                    }
                    Ok(None) => {}
                    Err(error) => errors.push(error),
                }
            }
        }
        // Those whose autoscalers are gone too.
        for (key, cell) in &self.lock().services {
            let mut service = cell.lock();
            let before = service.scalers.len();
            service.scalers.retain(|name, _| scaled.contains(name));
            if service.scalers.len() != before || touched.contains(key) {
                self.publish_status(key, &service);
            }
        }
        (changed, errors)
    }

    /// Samples the revision's demand and decides; `Some(count)` when it differs from
    /// `current`. With `split`, at least one instance.
    fn decide(
        &self,
        key: &Key,
        info: &RevisionInfo,
        current: u32,
        split: bool,
        now: u64,
    ) -> Option<u32> {
        let name = &info.record.name;
        let mut settings = self.scaling_settings(info);
        if split {
            settings.min_instances = settings.min_instances.max(1);
        }
        let concurrency = self
            .dataplane
            .revision_stats(&key.0, &key.1, name)
            .map_or(0, |stats| stats.concurrency());
        let cell = self.cell(key);
        let mut service = cell.lock();
        let ready = ready_instances(&service, name);
        let scaler = service
            .scalers
            .entry(name.clone())
            .or_insert_with(|| Scaler {
                history: History::for_settings(&settings),
                state: ScalerState::default(),
                last: None,
                last_change: None,
            });
        // Counts are small: the f64 is exact.
        #[allow(clippy::cast_precision_loss, reason = "a request count")]
        let sample = Sample::new(now, concurrency as f64);
        // Only a clock going backwards is refused; that sample is dropped.
        let _ = scaler.history.push(sample);
        let decision = decide(
            &settings,
            &scaler.history,
            &scaler.state,
            ready,
            current,
            now,
        );
        scaler.state = decision.state;
        scaler.last = Some(decision.event);
        (decision.desired != current).then_some(decision.desired)
    }

    /// The controller's autoscaler settings with the revision's bounds and concurrency.
    fn scaling_settings(&self, info: &RevisionInfo) -> Settings {
        let mut settings = self.config.autoscaler.clone();
        if let Ok(config) = &info.config {
            settings.min_instances = config.min_instances;
            settings.max_instances = Some(config.max_instances.max(config.min_instances));
            settings.container_concurrency = config.concurrency;
        }
        settings
    }

    /// Writes the new count unless the desired state changed since it was read (a deploy, a
    /// rollout step): the next round decides again on the new one. The new generation when
    /// written; the decision is then the revision's last change.
    async fn set_instances(
        &self,
        key: &Key,
        revision: &str,
        count: u32,
        generation: u64,
    ) -> Result<Option<u64>> {
        let (service, env, name) = (key.0.clone(), key.1.clone(), revision.to_owned());
        let written = self
            .db(format!("scale {revision}"), move |store| {
                store.desired_set_instances(ACTOR, &service, &env, &name, count, Some(generation))
            })
            .await;
        match written {
            Ok(desired) => {
                let cell = self.cell(key);
                let mut service = cell.lock();
                let scaler = service.scalers.get_mut(revision);
                if let Some(scaler) = scaler {
                    scaler.last_change.clone_from(&scaler.last);
                    if let Some(event) = &scaler.last {
                        tracing::info!(
                            service = %key.0,
                            env = %key.1,
                            revision = %revision,
                            "{}",
                            event.summary()
                        );
                    }
                }
                Ok(Some(desired.generation))
            }
            Err(ControlError::Store {
                source: StoreError::Conflict(_),
                ..
            }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Each autoscaled revision of the service: its demand now and the autoscaler's last
    /// decisions.
    pub fn scaling(&self, service: &str, env: &str) -> Vec<ScalingSummary> {
        let Some(status) = self.status.get(&(service.to_owned(), env.to_owned())) else {
            return Vec::new();
        };
        let mut summaries: Vec<ScalingSummary> = status
            .scalers
            .iter()
            .map(|(name, scaler)| ScalingSummary {
                revision: name.clone(),
                concurrency: self
                    .dataplane
                    .revision_stats(service, env, name)
                    .map_or(0, |stats| stats.concurrency()),
                last_decision: scaler.last.as_ref().map(DecisionEvent::summary),
                last_decision_at_ms: scaler.last.as_ref().map(|e| e.at_ms),
                last_change: scaler.last_change.as_ref().map(DecisionEvent::summary),
                last_change_at_ms: scaler.last_change.as_ref().map(|e| e.at_ms),
                last_change_event: scaler.last_change.clone(),
                panicking: scaler.panicking,
            })
            .collect();
        summaries.sort_by(|a, b| a.revision.cmp(&b.revision));
        summaries
    }
}

/// Ready instances of the revision that are not draining, as last observed.
pub(crate) fn ready_instances(service: &ServiceState, revision: &str) -> u32 {
    count_instances(service, revision, |status| status.ready)
}

/// How many instances of `revision` run or start, draining ones left out: 0 once it has
/// scaled to zero.
pub(crate) fn live_instances(service: &ServiceState, revision: &str) -> u32 {
    count_instances(service, revision, |status| !status.phase.is_final())
}

fn count_instances(
    service: &ServiceState,
    revision: &str,
    counted: impl Fn(&runway_driver::Replica) -> bool,
) -> u32 {
    let count = service
        .instances
        .iter()
        .filter(|status| revision_of(&status.id) == Some(revision) && counted(status))
        .filter(|status| {
            service
                .tracked
                .get(&status.id)
                .is_none_or(|tracked| tracked.draining_since_ms.is_none())
        })
        .count();
    u32::try_from(count).unwrap_or(u32::MAX)
}
