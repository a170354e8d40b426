//! The deployment controller: a deployment in progress moves to `Progressing`, then to
//! `Succeeded` once the ingress has the desired weights with the target revision ready, or
//! to `Failed` (with the previous desired state restored) when it is not within
//! `deploy_timeout_ms`, or at once when its revision can never start or an instance of it
//! ended before it was ever ready (as Cloud Run fails a revision whose container exits before
//! it listens): a crash on start is known at its first exit, not at the timeout.

use runway_driver::{Driver, LogQuery, Phase, now_ms};
use runway_reconciler::{Condition, RevisionStatus, RouteWeight};
use runway_store::{Deployment, DeploymentState, Desired, DesiredRevision};

use crate::ACTOR;
use crate::controller::{Controller, traffic_message};
use crate::error::Result;
use crate::key::{Key, key_of};
use crate::observe::{final_reason, revision_of};
use crate::rollout::Outcome;
use crate::state::StartFailure;

/// How many lines of a failed instance's output a failure's reason carries.
const REASON_LOG_LINES: usize = 10;

impl<D: Driver> Controller<D> {
    /// The deployment of this service/env that is `Pending` or `Progressing` (moved to
    /// `Progressing`), and the latest deployment whatever its state: the cleanup after a
    /// deployment (drains and stops) is told in the latest one's events.
    pub(crate) async fn deployments(
        &self,
        key: &Key,
    ) -> Result<(Option<Deployment>, Option<Deployment>, Vec<Deployment>)> {
        let (service, env) = key.clone();
        let listed = self
            .db(
                format!("list deployments of {service}/{env}"),
                move |store| store.deployment_list(&service, Some(&env), 10),
            )
            .await?;
        // A dry run changed nothing: the deployment before it still owns what runs.
        let latest = listed.iter().find(|d| !is_dry_run(d)).cloned();
        let Some(active) = listed.iter().find(|d| !d.state.is_terminal()).cloned() else {
            return Ok((None, latest, listed));
        };
        if active.state != DeploymentState::Pending {
            return Ok((Some(active), latest, listed));
        }
        let id = active.id;
        let moved = self
            .db(format!("start deployment {id}"), move |store| {
                store.deployment_transition(ACTOR, id, DeploymentState::Progressing, None)
            })
            .await?;
        Ok((Some(moved.clone()), Some(moved), listed))
    }

    /// Decides whether the deployment succeeded or failed by now. A progressive rollout
    /// (`outcome`) ends it when it rolls back or finishes a dry run; while it steps, the deploy
    /// timeout applies only until its new revision is ready.
    #[tracing::instrument(level = "info", name = "deployment", skip_all,
        fields(id = deployment.id, revision = %deployment.to_revision))]
    pub(crate) async fn progress(
        &self,
        key: &Key,
        deployment: &Deployment,
        wanted: &Desired,
        outcome: &Outcome,
    ) -> Result<()> {
        match outcome {
            Outcome::RolledBack(reason) => {
                return self
                    .finish(
                        deployment,
                        DeploymentState::RolledBack,
                        Some(reason.clone()),
                    )
                    .await;
            }
            Outcome::DryRun(plan) => {
                let reason = format!("dry run: nothing was started or routed; the plan:\n{plan}");
                return self
                    .finish(deployment, DeploymentState::Succeeded, Some(reason))
                    .await;
            }
            Outcome::Stepping {
                waiting_ready: false,
                ..
            } => return Ok(()),
            Outcome::Stepping { .. } | Outcome::Rolling | Outcome::Completed => {}
        }
        let stepping = matches!(outcome, Outcome::Stepping { .. });
        let completed = *outcome == Outcome::Completed;
        let target = &deployment.to_revision;
        let (status, routes, start_error, crashed) = {
            let cell = self.cell(key);
            let service = cell.lock();
            // An instance of the new revision that ended before it was ever ready: one backing
            // off or failed, or one started again at once (a first restart has no backoff)
            // whose last run ended.
            let crashed = service.instances.iter().find(|i| {
                revision_of(&i.id) == Some(target.as_str())
                    && service.tracked.get(&i.id).is_some_and(|t| {
                        !t.was_ready
                            && (matches!(t.kind, "crash_loop" | "failed") || i.last_exit.is_some())
                    })
            });
            (
                service
                    .status
                    .iter()
                    .find(|r| &r.revision == target)
                    .cloned(),
                service.routes.clone(),
                service.start_errors.get(target).cloned(),
                crashed.map(|i| match (&i.last_exit, i.phase) {
                    // Started again: how its last run ended is the reason, not that it starts.
                    (Some(exit), Phase::Starting | Phase::Running) => exit.reason.clone(),
                    _ => final_reason(i),
                }),
            )
        };
        let ready = status
            .as_ref()
            .is_some_and(|s| s.condition == Condition::Ready);
        // A completed rollout succeeds once the routes are its own: the planner routes only to
        // ready instances, and the autoscaler may be adding more under the full load then.
        let routed = routes == desired_routes(wanted);
        if routed && (completed || (ready && !stepping)) {
            return self
                .finish(deployment, DeploymentState::Succeeded, None)
                .await;
        }
        if completed {
            return Ok(());
        }
        let elapsed_ms = self.elapsed_ms(deployment);
        let permanent = start_error.as_ref().is_some_and(|e| e.permanent);
        if !permanent && crashed.is_none() && elapsed_ms < self.config.deploy_timeout_ms {
            return Ok(());
        }
        let reason = self
            .failure(
                key,
                target,
                status.as_ref(),
                start_error,
                crashed,
                elapsed_ms,
            )
            .await;
        self.restore_previous(deployment, wanted).await?;
        self.finish(deployment, DeploymentState::Failed, Some(reason))
            .await
    }

    /// Time since the deployment was created, or since this controller first saw it when
    /// later (a controller that was down does not fail a deployment it never worked on).
    fn elapsed_ms(&self, deployment: &Deployment) -> u64 {
        let now = now_ms();
        let created = u64::try_from(deployment.created_at.unix_millis()).unwrap_or(0);
        let seen = *self
            .cell(&key_of(deployment))
            .lock()
            .deployments_seen
            .entry(deployment.id)
            .or_insert(now);
        now.saturating_sub(created.max(seen))
    }

    async fn finish(
        &self,
        deployment: &Deployment,
        to: DeploymentState,
        reason: Option<String>,
    ) -> Result<()> {
        let id = deployment.id;
        // The outcome in the server's own log, as an event with fields (the deployment's span
        // names it too), beside the store's record of it.
        let first_line = reason.as_deref().and_then(|r| r.lines().next());
        match to {
            DeploymentState::Succeeded => tracing::info!(
                service = %deployment.service,
                env = %deployment.env,
                deployment = id,
                revision = %deployment.to_revision,
                outcome = %to,
                "deployment succeeded"
            ),
            _ => tracing::warn!(
                service = %deployment.service,
                env = %deployment.env,
                deployment = id,
                revision = %deployment.to_revision,
                outcome = %to,
                reason = first_line.unwrap_or_default(),
                "deployment ended without succeeding"
            ),
        }
        let cell = self.lock().cell(&key_of(deployment));
        if let Some(cell) = cell {
            let mut service = cell.lock();
            service.deployments_seen.remove(&id);
            service.baselines.remove(&id);
            service.rollout_messages.remove(&id);
            service.unready_since.remove(&id);
            self.publish_status(&key_of(deployment), &service);
        }
        // The events before its end are written first: its story keeps its order.
        self.events.write().await?;
        self.db(format!("mark deployment {id} {to}"), move |store| {
            store.deployment_transition(ACTOR, id, to, reason.as_deref())
        })
        .await
        .map(drop)
    }

    /// Why the target revision did not make it: its condition (the probe, exit code or
    /// signal of the failing instance), and the last lines that instance wrote.
    async fn failure(
        &self,
        key: &Key,
        target: &str,
        status: Option<&RevisionStatus>,
        start_error: Option<StartFailure>,
        crashed: Option<String>,
        elapsed_ms: u64,
    ) -> String {
        let seconds = elapsed_ms / 1000;
        let mut reason = match (start_error, crashed, status) {
            (Some(error), _, _) => format!("{target} cannot start: {}", error.reason),
            (None, Some(crashed), _) => {
                format!("{target} ended before it was ready ({seconds} s in): {crashed}")
            }
            (
                None,
                None,
                Some(RevisionStatus {
                    condition: Condition::Failing { reason } | Condition::TimedOut { reason },
                    ..
                }),
            ) => format!("{target} not ready after {seconds} s: {reason}"),
            (None, None, status) => {
                let (ready, desired) = status.map_or((0, 0), |s| (s.ready, s.desired_instances));
                format!(
                    "{target} not ready after {seconds} s: {ready} of {desired} instance(s) ready"
                )
            }
        };
        if let Some((id, lines)) = self.failing_output(key, target).await {
            reason.push_str(&format!("\nlast output of {id}:\n{}", lines.join("\n")));
        }
        reason
    }

    /// The last lines written by the target's first instance that is not ready, and what its
    /// last process left (a container's termination message).
    async fn failing_output(&self, key: &Key, target: &str) -> Option<(String, Vec<String>)> {
        let candidate = {
            let cell = self.lock().cell(key)?;
            let service = cell.lock();
            let instances = &service.instances;
            let mut not_ready: Vec<_> = instances
                .iter()
                .filter(|s| revision_of(&s.id) == Some(target) && !s.ready)
                .collect();
            not_ready.sort_by_key(|s| s.last_exit.is_none());
            not_ready.first().map(|s| (*s).clone())
        }?;
        let query = LogQuery {
            service: key.0.clone(),
            env: key.1.clone(),
            replica: Some(candidate.id.clone()),
            tail: REASON_LOG_LINES,
            previous: false,
        };
        let mut lines: Vec<String> = match self.driver.logs(&query).await {
            Ok(lines) => lines.into_iter().map(|l| l.text).collect(),
            Err(_) => Vec::new(),
        };
        // What its last process left besides (a container's termination message), unless
        // the output has it already (a local instance's last lines).
        let left = candidate.last_exit.as_ref().map(|exit| &exit.last_output);
        for line in left.into_iter().flatten() {
            if !lines.contains(line) {
                lines.push(line.clone());
            }
        }
        if lines.is_empty() {
            lines.push(final_reason(&candidate));
        }
        Some((candidate.id, lines))
    }

    /// Sets the desired state back to the previous revision at weight 100 with its instance
    /// count, so it keeps serving and the target's instances are stopped. Without a previous
    /// revision, the target is kept at no instances and no traffic.
    async fn restore_previous(&self, deployment: &Deployment, wanted: &Desired) -> Result<()> {
        let target = deployment.to_revision.clone();
        let previous = match &deployment.from_revision {
            Some(from) if *from != target => {
                let instances = match wanted
                    .revisions
                    .iter()
                    .find(|r| &r.revision == from)
                    .map(|r| r.instances)
                    .filter(|&n| n > 0)
                {
                    Some(instances) => instances,
                    None => self
                        .revision(from)
                        .await?
                        .map_or(1, |info| info.default_instances()),
                };
                vec![DesiredRevision {
                    revision: from.clone(),
                    instances,
                    weight: 100,
                }]
            }
            _ => vec![DesiredRevision {
                revision: target,
                instances: 0,
                weight: 0,
            }],
        };
        let weights: Vec<RouteWeight> = previous
            .iter()
            .filter(|r| r.weight > 0)
            .map(|r| RouteWeight::new(r.revision.clone(), r.weight))
            .collect();
        let (service, env) = (deployment.service.clone(), deployment.env.clone());
        let id = deployment.id;
        let message = if weights.is_empty() {
            // A first deploy (or one after deploys that never served): nothing to go back to.
            format!(
                "nothing served before this deployment: {} stopped, no traffic",
                deployment.to_revision
            )
        } else {
            format!("desired state restored, {}", traffic_message(&weights))
        };
        self.db(
            format!("restore the desired state of {service}/{env}"),
            move |store| {
                store.desired_set(ACTOR, &service, &env, &previous, None)?;
                store.deployment_add_event(ACTOR, id, &message)
            },
        )
        .await
        .map(drop)
    }
}

/// Whether a deployment is a finished (or stepped) dry run, by its stored rollout.
/// Whose story an event about an instance of `revision` belongs to: the newest of `recent`
/// (newest first) that moved traffic to or from it, a dry run only while it is `active`;
/// never a later deployment that had no part in that revision. `None` when none of them did.
pub(crate) fn story_of<'a>(
    revision: &str,
    active: Option<&Deployment>,
    recent: &'a [Deployment],
) -> Option<&'a Deployment> {
    recent.iter().find(|d| {
        let involved = d.to_revision == revision || d.from_revision.as_deref() == Some(revision);
        involved && (!is_dry_run(d) || active.is_some_and(|a| a.id == d.id))
    })
}

fn is_dry_run(deployment: &Deployment) -> bool {
    crate::rollout::RolloutRecord::of(deployment).is_some_and(|record| {
        runway_rollout::Strategy::all()
            .iter()
            .any(|strategy| strategy.is_dry_run() && strategy.name() == record.strategy)
    })
}

/// The desired weights as the planner routes them: positive ones, scaled to sum to 100
/// (largest remainder, ties to the first name), sorted by revision.
pub(crate) fn desired_routes(wanted: &Desired) -> Vec<RouteWeight> {
    let mut weights: Vec<(String, u64)> = Vec::new();
    for revision in wanted.revisions.iter().filter(|r| r.weight > 0) {
        if !weights.iter().any(|(name, _)| name == &revision.revision) {
            weights.push((revision.revision.clone(), u64::from(revision.weight)));
        }
    }
    weights.sort();
    let total: u64 = weights.iter().map(|(_, w)| w).sum();
    if total == 0 {
        return Vec::new();
    }
    let mut shares: Vec<(String, u64, u64)> = weights
        .into_iter()
        .map(|(name, w)| (name, w * 100 / total, w * 100 % total))
        .collect();
    let assigned: u64 = shares.iter().map(|s| s.1).sum();
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| shares[b].2.cmp(&shares[a].2).then(a.cmp(&b)));
    for &index in order
        .iter()
        .take(usize::try_from(100 - assigned).unwrap_or(0))
    {
        shares[index].1 += 1;
    }
    shares
        .into_iter()
        .filter(|s| s.1 > 0)
        .map(|(name, share, _)| RouteWeight::new(name, u32::try_from(share).unwrap_or(100)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desired(pairs: &[(&str, u32)]) -> Desired {
        Desired {
            service: "hello".to_owned(),
            env: "dev".to_owned(),
            revisions: pairs
                .iter()
                .map(|&(revision, weight)| DesiredRevision {
                    revision: revision.to_owned(),
                    instances: 1,
                    weight,
                })
                .collect(),
            generation: 1,
        }
    }

    fn deployment(id: i64, from: Option<&str>, to: &str, state: DeploymentState) -> Deployment {
        Deployment {
            id,
            service: "hello".to_owned(),
            env: "dev".to_owned(),
            kind: runway_store::DeploymentKind::Deploy,
            from_revision: from.map(str::to_owned),
            to_revision: to.to_owned(),
            state,
            reason: None,
            created_by: "alice".to_owned(),
            created_at: runway_store::Timestamp::now(),
            updated_at: runway_store::Timestamp::now(),
            rollout: None,
            command: None,
        }
    }

    #[test]
    fn an_event_goes_to_the_deployment_whose_revision_it_is_about() {
        use DeploymentState::{Progressing, Succeeded};
        // Newest first: 3 moves r2 → r3 now; 2 moved r1 → r2; 1 brought r1.
        let recent = [
            deployment(3, Some("r2"), "r3", Progressing),
            deployment(2, Some("r1"), "r2", Succeeded),
            deployment(1, None, "r1", Succeeded),
        ];
        let active = Some(&recent[0]);
        let story = |revision| story_of(revision, active, &recent).map(|d| d.id);
        assert_eq!(story("r3"), Some(3));
        assert_eq!(story("r2"), Some(3), "the stable revision of the rollout");
        // r1's last instances draining belong to the deployment that replaced it, not to 3.
        assert_eq!(story("r1"), Some(2));
        assert_eq!(story("r0"), None);
    }

    #[test]
    fn desired_routes_are_scaled_to_100_and_sorted() {
        assert_eq!(
            desired_routes(&desired(&[("b", 10), ("a", 90)])),
            [RouteWeight::new("a", 90), RouteWeight::new("b", 10)]
        );
        assert_eq!(
            desired_routes(&desired(&[("a", 1), ("b", 1), ("c", 1)])),
            [
                RouteWeight::new("a", 34),
                RouteWeight::new("b", 33),
                RouteWeight::new("c", 33)
            ]
        );
        assert_eq!(
            desired_routes(&desired(&[("a", 0), ("b", 3)])),
            [RouteWeight::new("b", 100)]
        );
        assert!(desired_routes(&desired(&[("a", 0)])).is_empty());
    }
}
