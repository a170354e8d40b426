//! Progressive delivery: drives a deployment whose revision's strategy rolls out in steps, or
//! is a dry run, through [`runway_rollout::next`], once per pass, before the planner runs. It
//! asks the strategy (`runway_rollout::Kind`: `in_steps`, `is_dry_run`, `analysis`,
//! `stages_at_full_capacity`, `keeps_old_ms`) and names none.
//!
//! The rollout owns the traffic weights of the stable revision (the deployment's
//! `from_revision`) and the new one: it writes them into the desired state, with the
//! instance counts the autoscaler keeps, and the planner moves traffic only to ready
//! instances as always. Its progress is stored on the deployment (so a restart carries on
//! where it was, paused included); an operator's command (`runway rollout pause|resume|
//! abort|promote`) is stored there by the API and consumed here. A canary's analysis compares
//! the two revisions over the current step's window from the ingress's counters, read at the
//! step's start (stored with the progress, so a restart carries the window on) and now.
//!
//! A blue/green deployment ends at its switch; its old revision stays in the desired state
//! with no traffic until its warm time is over, when [`Controller::retire_warm`] takes it out
//! (unless a rollback or another deploy rewrote the desired state first).
//!
//! A strategy not in steps (`legacy`, `expedited`) is the planner's rolling deploy, untouched.
//! A rollback, and a first deploy (nothing to compare with or fall back to), are rolled so
//! too.

use runway_driver::{Driver, now_ms};
use runway_reconciler::Condition;
use runway_rollout::{
    Action, AnalysisSettings, Check, Command, Phase, Progress, Standing, Step, StepInput, Strategy,
    Verdict, Window, analyse, checks, next,
};
use runway_store::{
    Deployment, DeploymentKind, Desired, DesiredRevision, RolloutCommand, StoreError,
};
use serde::{Deserialize, Serialize};

use crate::ACTOR;
use crate::autoscale::live_instances;
use crate::controller::Controller;
use crate::error::{ControlError, Result};
use crate::key::{Key, key_of};
use crate::revision::RevisionInfo;
use crate::status::Counters;

/// What a deployment's rollout stores between passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RolloutRecord {
    /// The strategy's name, as the manifest writes it.
    pub(crate) strategy: String,
    pub(crate) progress: Progress,
    /// A canary step's counters at its start, so that a restart judges the step over its
    /// whole window (the ingress, which keeps counting, outlives the server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) baseline: Option<StoredBaseline>,
}

/// The start of a canary step's window, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredBaseline {
    /// The step it is for: its index and start.
    step: (usize, u64),
    canary: Window,
    stable: Window,
}

impl RolloutRecord {
    /// The record stored on `deployment`: none before its first step (or when unreadable).
    pub(crate) fn of(deployment: &Deployment) -> Option<Self> {
        deployment
            .rollout
            .as_deref()
            .and_then(|text| serde_json::from_str(text).ok())
    }
}

/// What a canary step's window started from, in memory.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StepBaseline {
    /// The step it is for: its index and start.
    step: (usize, u64),
    canary: Window,
    stable: Window,
    /// What the step's window showed when its analysis last passed, for the event of the
    /// step that follows.
    passed: Option<String>,
}

/// What the rollout says about its deployment after this pass.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// Not a progressive rollout: the planner's rolling deploy decides.
    Rolling,
    /// Under way. The deploy timeout applies only while the new revision is not yet ready.
    Stepping {
        waiting_ready: bool,
        wake_at_ms: Option<u64>,
    },
    /// All traffic is on the new revision: succeeded once the routes say so.
    Completed,
    /// Traffic went back to the stable revision, for this reason.
    RolledBack(String),
    /// A dry run: nothing was started; this is the plan.
    DryRun(String),
}

/// A rollout's status, for `runway status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RolloutSummary {
    pub deployment: i64,
    /// The manifest's strategy.
    pub strategy: String,
    /// `waiting_ready`, `stepping`, `staged` (blue/green before its switch), `switched`,
    /// `completed` or `rolled_back`.
    pub phase: String,
    /// The new revision's share of the traffic, percent.
    pub new_weight: u32,
    /// The step it is at (1-based) and how many the strategy has, for steps.
    pub step: Option<(usize, usize)>,
    pub paused: bool,
    /// What it waits for, or what it did last.
    pub message: String,
    /// A canary step's analysis so far, while a step is analysed.
    pub analysis: Option<AnalysisSummary>,
}

/// A canary step's analysis so far: the two revisions' figures over the step's window, the
/// limits in force, and how each measure stands, from the checks the analysis decides on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnalysisSummary {
    /// The new revision, judged, and the stable one it is compared with.
    pub revision: String,
    pub stable_revision: String,
    /// When the step's window began (Unix milliseconds), and how long it lasts (the
    /// strategy's pause): a step held past it is judged over all the time since.
    pub window_started_ms: u64,
    pub window_ms: u64,
    pub canary: WindowFigures,
    pub stable: WindowFigures,
    /// The manifest's settings, its defaults applied.
    pub settings: AnalysisSettings,
    /// The least requests in each window for the p99s to be compared.
    pub p99_samples: u64,
    pub readiness_failures: CheckSummary,
    pub restarts: CheckSummary,
    pub requests: CheckSummary,
    pub error_ratio: CheckSummary,
    pub latency_p99: CheckSummary,
    /// The window's verdict now, as the controller takes it: `pass`, `inconclusive` or
    /// `fail` (a latency failure is inconclusive until the window is whole).
    pub verdict: &'static str,
    /// Why it fails or is inconclusive.
    pub reason: Option<String>,
}

/// One revision's figures over a step's window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowFigures {
    pub requests: u64,
    pub errors_5xx: u64,
    pub error_ratio: f64,
    pub p99_seconds: Option<f64>,
    pub restarts: u32,
    pub readiness_failures: u32,
}

impl WindowFigures {
    fn of(window: &Window) -> Self {
        Self {
            requests: window.requests,
            errors_5xx: window.errors_5xx,
            error_ratio: window.error_ratio(),
            p99_seconds: window.p99_seconds(),
            restarts: window.restarts,
            readiness_failures: window.readiness_failures,
        }
    }
}

/// One measure against its limit (see [`runway_rollout::Check`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckSummary {
    /// `within`, `over`, `too_few` (too few requests to judge it) or `unmeasured`.
    pub standing: &'static str,
    pub value: Option<f64>,
    pub stable_value: Option<f64>,
    /// The limit in force: the lowest that applies (the least, for the requests).
    pub limit: Option<f64>,
    pub reason: Option<String>,
}

impl CheckSummary {
    fn of(check: &Check) -> Self {
        Self {
            standing: match check.standing {
                Standing::Within => "within",
                Standing::Over => "over",
                Standing::TooFew => "too_few",
                Standing::Unmeasured => "unmeasured",
            },
            value: check.canary_value,
            stable_value: check.stable_value,
            limit: check.limit,
            reason: check.reason().map(str::to_owned),
        }
    }
}

/// A canary step's analysis at `now_ms` over the windows `canary` and `stable` (the
/// counters since the step's start), by [`runway_rollout::checks`]: the checks
/// [`runway_rollout::analyse`] decides on, and its verdict as [`Controller::roll`] takes it.
pub(crate) fn analysis_summary(
    settings: &AnalysisSettings,
    pause_ms: u64,
    progress: &Progress,
    now_ms: u64,
    (revision, canary): (&str, &Window),
    (stable_revision, stable): (&str, &Window),
) -> AnalysisSummary {
    let checks = checks(settings, canary, stable);
    let whole = now_ms >= progress.step_started_ms.saturating_add(pause_ms);
    let verdict = checks.verdict();
    let verdict = if whole { verdict } else { verdict.mid_window() };
    let (verdict, reason) = match verdict {
        Verdict::Pass => ("pass", None),
        Verdict::Inconclusive { reason } => ("inconclusive", Some(reason)),
        Verdict::Fail { message, .. } => ("fail", Some(message)),
    };
    AnalysisSummary {
        revision: revision.to_owned(),
        stable_revision: stable_revision.to_owned(),
        window_started_ms: progress.step_started_ms,
        window_ms: pause_ms,
        canary: WindowFigures::of(canary),
        stable: WindowFigures::of(stable),
        settings: settings.clone(),
        p99_samples: runway_rollout::P99_SAMPLES,
        readiness_failures: CheckSummary::of(&checks.readiness_failures),
        restarts: CheckSummary::of(&checks.restarts),
        requests: CheckSummary::of(&checks.requests),
        error_ratio: CheckSummary::of(&checks.error_ratio),
        latency_p99: CheckSummary::of(&checks.latency_p99),
        verdict,
        reason,
    }
}

/// The manifest's strategy, with its settings, for a revision (the default one when its
/// manifest does not read).
pub(crate) fn strategy_of(info: &RevisionInfo) -> Strategy {
    info.config
        .as_ref()
        .map_or_else(|_| Strategy::default(), Strategy::of)
}

fn command(command: RolloutCommand) -> Command {
    match command {
        RolloutCommand::Pause => Command::Pause,
        RolloutCommand::Resume => Command::Resume,
        RolloutCommand::Abort => Command::Abort,
        RolloutCommand::Promote => Command::Promote,
    }
}

impl<D: Driver> Controller<D> {
    /// One step of the deployment's rollout: reads its progress, decides, writes the desired
    /// state and the progress, and says how the deployment stands. Returns the desired state
    /// the planner should use this pass (the one it wrote, when it wrote one).
    #[tracing::instrument(level = "info", name = "rollout", skip_all,
        fields(deployment = deployment.id, revision = %deployment.to_revision))]
    pub(crate) async fn roll(
        &self,
        key: &Key,
        deployment: &Deployment,
        wanted: &Desired,
    ) -> Result<(Outcome, Option<Desired>)> {
        let target = &deployment.to_revision;
        if deployment.kind == DeploymentKind::Rollback {
            return Ok((Outcome::Rolling, None));
        }
        let Some(info) = self.revision(target).await? else {
            return Ok((Outcome::Rolling, None));
        };
        let strategy = strategy_of(&info);
        // The revision serving before; a first deploy has none to step from (but a dry run
        // still changes nothing).
        let from = deployment.from_revision.clone().filter(|f| f != target);
        let rolling = !strategy.is_dry_run() && (!strategy.in_steps() || from.is_none());
        if rolling {
            return Ok((Outcome::Rolling, None));
        }
        let now = now_ms();
        // Every deploy puts its revision in the desired state: one without it was read before
        // the deploy, while the deployment was read after. Stepping on it would settle a dry
        // run with the revision still in the store's desired state; the next pass reads both
        // again.
        if !wanted.revisions.iter().any(|r| &r.revision == target) {
            return Ok((
                Outcome::Stepping {
                    waiting_ready: false,
                    wake_at_ms: Some(now),
                },
                None,
            ));
        }
        let stored = RolloutRecord::of(deployment);
        let progress = stored
            .as_ref()
            .map_or_else(|| Progress::new(now), |record| record.progress.clone());
        let new_ready = self.fully_ready(key, target);
        let verdict = match (strategy.analysis(), &from) {
            (Some((analysis, pause_ms)), Some(from)) if progress.phase == Phase::Stepping => {
                let whole = now >= progress.step_started_ms.saturating_add(pause_ms);
                let stored = stored.as_ref().and_then(|r| r.baseline.as_ref());
                self.verdict(
                    key,
                    deployment.id,
                    &progress,
                    stored,
                    from,
                    target,
                    analysis,
                )
                .map(|verdict| if whole { verdict } else { verdict.mid_window() })
            }
            _ => None,
        };
        let verdict = self
            .unready_too_long(deployment, &progress, new_ready, now)
            .or(verdict);
        let input = StepInput {
            now_ms: now,
            new_ready,
            verdict,
            command: deployment.command.map(command),
        };
        let step = next(&strategy, &progress, &input);
        let tag_url = self.tag_url(&key.0, &key.1, &info.tag());
        self.note_step(deployment, &strategy, &progress, &step, &tag_url)
            .await?;

        let revisions_now =
            self.rollout_revisions(key, &strategy, &step, wanted, from.as_deref(), target);
        let written = if same_revisions(&revisions_now, &wanted.revisions) {
            None
        } else {
            self.write_desired(wanted, revisions_now.clone()).await?
        };
        let record = RolloutRecord {
            strategy: strategy.name().to_owned(),
            progress: step.progress.clone(),
            baseline: self
                .cell(key)
                .lock()
                .baselines
                .get(&deployment.id)
                .map(|b| StoredBaseline {
                    step: b.step,
                    canary: b.canary.clone(),
                    stable: b.stable.clone(),
                }),
        };
        if stored.as_ref() != Some(&record) || deployment.command.is_some() {
            self.save_rollout(deployment, &record).await?;
        }
        // A finished rollout ends its deployment only once its desired state is written.
        let settled = written.is_some() || same_revisions(&revisions_now, &wanted.revisions);
        let outcome = match step.action {
            Action::Complete | Action::Switch if settled => Outcome::Completed,
            Action::RollBack { reason } if settled => Outcome::RolledBack(reason),
            Action::DryRun { plan } if settled => Outcome::DryRun(plan_text(&plan)),
            _ => Outcome::Stepping {
                // A paused rollout waits for its operator, not against the deploy timeout.
                waiting_ready: step.progress.phase == Phase::WaitingReady && !step.progress.paused,
                wake_at_ms: if settled {
                    step.wake_at_ms.or(step.old_stop_at_ms)
                } else {
                    Some(now)
                },
            },
        };
        Ok((outcome, written))
    }

    /// After a blue/green switch (the service's latest deployment, succeeded): the old
    /// revision, still in the desired state with no traffic, is taken out of it once its warm
    /// time is over. Returns the desired state written then, or when to look again. A rollback
    /// or a newer deploy has rewritten the desired state before: nothing to do.
    pub(crate) async fn retire_warm(
        &self,
        latest: &Deployment,
        wanted: &Desired,
    ) -> Result<(Option<Desired>, Option<u64>)> {
        let nothing = Ok((None, None));
        let Some(from) = latest.from_revision.as_deref() else {
            return nothing;
        };
        let switched_at =
            RolloutRecord::of(latest).and_then(|record| match record.progress.phase {
                Phase::Switched { at_ms } => Some(at_ms),
                _ => None,
            });
        let warm = wanted
            .revisions
            .iter()
            .any(|r| r.revision == from && r.weight == 0);
        let (Some(at_ms), true, runway_store::DeploymentState::Succeeded) =
            (switched_at, warm, latest.state)
        else {
            return nothing;
        };
        let keep_old_ms = match self.revision(&latest.to_revision).await? {
            Some(info) => match strategy_of(&info).keeps_old_ms() {
                Some(keep_old_ms) => keep_old_ms,
                None => return nothing,
            },
            None => return nothing,
        };
        let stop_at = at_ms.saturating_add(keep_old_ms);
        if now_ms() < stop_at {
            return Ok((None, Some(stop_at)));
        }
        let kept = wanted
            .revisions
            .iter()
            .filter(|r| r.revision != from)
            .cloned()
            .collect();
        let written = self.write_desired(wanted, kept).await?;
        if written.is_some() {
            let message = format!(
                "{from} was kept warm for {} s after the switch: it is stopped now",
                keep_old_ms / 1000
            );
            self.event(Some(latest), &message);
        }
        Ok((written, None))
    }

    /// A failed verdict once the new revision has had traffic and been short of ready
    /// instances for longer than the deploy timeout: a rollout without an analysis (regional)
    /// would otherwise wait for it for ever, part of the traffic on the stable revision.
    fn unready_too_long(
        &self,
        deployment: &Deployment,
        progress: &Progress,
        new_ready: bool,
        now: u64,
    ) -> Option<Verdict> {
        let cell = self.cell(&key_of(deployment));
        let mut service = cell.lock();
        let under_way = matches!(progress.phase, Phase::Stepping | Phase::Switched { .. });
        if new_ready || !under_way {
            service.unready_since.remove(&deployment.id);
            return None;
        }
        let since = *service.unready_since.entry(deployment.id).or_insert(now);
        let waited = now.saturating_sub(since);
        (waited > self.config.deploy_timeout_ms).then(|| Verdict::Fail {
            measure: runway_rollout::Measure::ReadinessFailures,
            canary_value: 0.0,
            stable_value: None,
            limit: 0.0,
            message: format!(
                "{} not fully ready for {} s at {} %",
                deployment.to_revision,
                waited / 1000,
                progress.new_weight
            ),
        })
    }

    /// The target revision has all its desired instances ready, by the last plan.
    fn fully_ready(&self, key: &Key, revision: &str) -> bool {
        self.cell(key)
            .lock()
            .status
            .iter()
            .find(|r| r.revision == revision)
            .is_some_and(|s| {
                s.condition == Condition::Ready && s.ready >= s.desired_instances.max(1)
            })
    }

    /// The canary's verdict over the current step's window; `None` at its start, when the
    /// counters are read for the first time. After a restart the window starts where the
    /// stored baseline says, when it is the step's.
    #[allow(
        clippy::too_many_arguments,
        reason = "the step's parts, each read once"
    )]
    fn verdict(
        &self,
        key: &Key,
        deployment: i64,
        progress: &Progress,
        stored: Option<&StoredBaseline>,
        stable: &str,
        canary: &str,
        settings: &AnalysisSettings,
    ) -> Option<Verdict> {
        let cell = self.cell(key);
        let mut service = cell.lock();
        let canary_now = self.window(key, canary, Counters::of(&service, canary));
        let stable_now = self.window(key, stable, Counters::of(&service, stable));
        let step = (progress.step_index, progress.step_started_ms);
        let baselines = &mut service.baselines;
        if !baselines.contains_key(&deployment)
            && let Some(stored) = stored.filter(|b| b.step == step)
        {
            baselines.insert(
                deployment,
                StepBaseline {
                    step,
                    canary: stored.canary.clone(),
                    stable: stored.stable.clone(),
                    passed: None,
                },
            );
        }
        match baselines.get_mut(&deployment) {
            Some(baseline) if baseline.step == step => {
                let canary = Window::delta(&canary_now, &baseline.canary);
                let stable = Window::delta(&stable_now, &baseline.stable);
                let verdict = analyse(settings, &canary, &stable);
                // This pass's verdict only: the step advances on it, or not at all.
                baseline.passed = (verdict == Verdict::Pass).then(|| {
                    format!(
                        "new revision {}; stable {}",
                        canary.summary(),
                        stable.summary()
                    )
                });
                Some(verdict)
            }
            _ => {
                baselines.insert(
                    deployment,
                    StepBaseline {
                        step,
                        canary: canary_now,
                        stable: stable_now,
                        passed: None,
                    },
                );
                None
            }
        }
    }

    /// The current step's analysis so far, for `runway status`: over the window the next pass
    /// will judge (from the step's baseline in memory, else the stored one; a step whose
    /// counters are not read yet starts now), without touching it.
    #[allow(
        clippy::too_many_arguments,
        reason = "the step's parts, each read once"
    )]
    fn analysis_so_far(
        &self,
        key: &Key,
        deployment: i64,
        progress: &Progress,
        stored: Option<&StoredBaseline>,
        (stable, canary): (&str, &str),
        settings: &AnalysisSettings,
        pause_ms: u64,
    ) -> AnalysisSummary {
        let now = now_ms();
        let status = self.status.get(key).unwrap_or_default();
        let counters = |revision: &str| status.counters.get(revision).copied().unwrap_or_default();
        let canary_now = self.window(key, canary, counters(canary));
        let stable_now = self.window(key, stable, counters(stable));
        let step = (progress.step_index, progress.step_started_ms);
        let baseline = status.baselines.get(&deployment);
        let (canary_then, stable_then) = match baseline {
            Some(baseline) if baseline.step == step => {
                (baseline.canary.clone(), baseline.stable.clone())
            }
            _ => match stored.filter(|b| b.step == step) {
                Some(stored) => (stored.canary.clone(), stored.stable.clone()),
                None => (canary_now.clone(), stable_now.clone()),
            },
        };
        analysis_summary(
            settings,
            pause_ms,
            progress,
            now,
            (canary, &Window::delta(&canary_now, &canary_then)),
            (stable, &Window::delta(&stable_now, &stable_then)),
        )
    }

    /// A revision's counters now: the ingress's requests and latency, and `counters` (the
    /// runtime's restarts and the readiness failures this controller saw).
    fn window(&self, key: &Key, revision: &str, counters: Counters) -> Window {
        let stats = self
            .dataplane
            .revision_stats(&key.0, &key.1, revision)
            .unwrap_or_default();
        Window {
            requests: stats.requests,
            errors_5xx: stats.errors_5xx,
            latency_buckets: stats.latency_buckets,
            readiness_failures: counters.readiness_failures,
            restarts: counters.restarts,
        }
    }

    /// The desired revisions for this step: the stable and new revisions with the step's
    /// weights and the instance counts the autoscaler keeps; blue/green's new revision at
    /// least at the stable one's capacity; once finished, the winner alone.
    fn rollout_revisions(
        &self,
        key: &Key,
        strategy: &Strategy,
        step: &Step,
        wanted: &Desired,
        from: Option<&str>,
        target: &str,
    ) -> Vec<DesiredRevision> {
        let count = |name: &str| {
            wanted
                .revisions
                .iter()
                .find(|r| r.revision == name)
                .map(|r| r.instances)
        };
        // The API's deploy names only the new revision: the stable one keeps the instances it
        // runs (none when it has scaled to zero: it is not started only to be stopped); the
        // autoscaler's count once it has one.
        let stable_instances = from.map_or(1, |from| {
            count(from).unwrap_or_else(|| live_instances(&self.cell(key).lock(), from))
        });
        // The new revision carries its share of the stable revision's capacity at least
        // (all of it for blue/green, and at 100 %), so a step does not overload it while the
        // autoscaler catches up; and one instance, to be judged.
        let share = if strategy.stages_at_full_capacity() {
            100
        } else {
            step.weights.new
        };
        let new_instances = count(target)
            .unwrap_or(1)
            .max(1)
            .max((stable_instances * share).div_ceil(100));
        let revision = |name: &str, instances, weight| DesiredRevision {
            revision: name.to_owned(),
            instances,
            weight,
        };
        let back = || match from {
            Some(from) => vec![revision(from, stable_instances.max(1), 100)],
            None => vec![revision(target, 0, 0)],
        };
        match (&step.progress.phase, from) {
            // The API left the desired state as it was, the new revision in it with nothing:
            // that goes too, unless it is all there is (a first deploy).
            _ if matches!(step.action, Action::DryRun { .. }) => {
                let others: Vec<DesiredRevision> = wanted
                    .revisions
                    .iter()
                    .filter(|r| r.revision != target)
                    .cloned()
                    .collect();
                if others.is_empty() {
                    wanted.revisions.clone()
                } else {
                    others
                }
            }
            (Phase::Completed, _) => vec![revision(target, new_instances, 100)],
            (Phase::RolledBack { .. }, _) => back(),
            (_, Some(from)) => vec![
                revision(from, stable_instances, step.weights.stable),
                revision(target, new_instances, step.weights.new),
            ],
            (_, None) => vec![revision(target, new_instances, step.weights.new)],
        }
    }

    /// Writes the desired state unless it changed since it was read (the autoscaler, a new
    /// deploy): then the next pass steps again from the new one.
    async fn write_desired(
        &self,
        wanted: &Desired,
        revisions: Vec<DesiredRevision>,
    ) -> Result<Option<Desired>> {
        let (service, env, generation) = (
            wanted.service.clone(),
            wanted.env.clone(),
            wanted.generation,
        );
        let written = self
            .db(
                format!("set the rollout's weights for {service}/{env}"),
                move |store| store.desired_set(ACTOR, &service, &env, &revisions, Some(generation)),
            )
            .await;
        match written {
            Ok(desired) => Ok(Some(desired)),
            Err(ControlError::Store {
                source: StoreError::Conflict(_),
                ..
            }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    async fn save_rollout(&self, deployment: &Deployment, record: &RolloutRecord) -> Result<()> {
        let text = serde_json::to_string(record)
            .map_err(|e| ControlError::Task(format!("encode a rollout: {e}")))?;
        let (id, consumed) = (deployment.id, deployment.command);
        self.db(
            format!("save the rollout of deployment {id}"),
            move |store| store.deployment_save_rollout(ACTOR, id, &text, consumed),
        )
        .await
        .map(drop)
    }

    /// Records the step's events, and its status line for `runway status`. `before` is the
    /// progress the step was taken from; `tag_url` reaches the new revision alone.
    async fn note_step(
        &self,
        deployment: &Deployment,
        strategy: &Strategy,
        before: &Progress,
        step: &Step,
        tag_url: &str,
    ) -> Result<()> {
        let target = &deployment.to_revision;
        let from = deployment
            .from_revision
            .as_deref()
            .unwrap_or("the stable revision");
        let mut events = Vec::new();
        if let Some(asked) = deployment.command {
            events.push(format!("rollout: {} carried out", asked.as_str()));
        }
        // The window the step just left passed its analysis (not skipped by a promote): with
        // what figures.
        let judged = !step.progress.promoted;
        let passed = (judged && matches!(step.action, Action::Advance | Action::Complete))
            .then(|| {
                self.cell(&key_of(deployment))
                    .lock()
                    .baselines
                    .get(&deployment.id)
                    .and_then(|b| b.passed.clone())
            })
            .flatten()
            .map(|figures| format!(" (analysis passed: {figures})"))
            .unwrap_or_default();
        let message = match &step.action {
            Action::Advance => {
                let total = strategy.ladder().len();
                let message = format!(
                    "{}: step {} of {total}, {target} {} %, {from} {} %{passed}",
                    strategy.name(),
                    step.progress.step_index + 1,
                    step.weights.new,
                    step.weights.stable
                );
                events.push(message.clone());
                message
            }
            Action::Switch => {
                let key = (deployment.service.clone(), deployment.env.clone());
                let running = live_instances(&self.cell(&key).lock(), from);
                let message = match (strategy.keeps_old_ms(), step.old_stop_at_ms) {
                    // Scaled to zero: kept, but nothing is warm; say so.
                    (Some(keep_old_ms), Some(until)) if running == 0 => {
                        format!(
                            "switched: {target} 100 %, {from} kept for {} s (until {}) with no \
                             instance (it had scaled to zero): a rollback to it starts it cold",
                            keep_old_ms / 1000,
                            runway_rollout::clock(until)
                        )
                    }
                    (Some(keep_old_ms), Some(until)) => format!(
                        "switched: {target} 100 %, {from} kept warm for {} s (until {}) for an \
                         instant rollback",
                        keep_old_ms / 1000,
                        runway_rollout::clock(until)
                    ),
                    _ => format!("switched: {target} 100 %, {from} kept warm"),
                };
                events.push(message.clone());
                message
            }
            Action::Complete => {
                let message = format!("rollout complete: {target} 100 %{passed}");
                events.push(message.clone());
                message
            }
            Action::RollBack { reason } => {
                let message = format!("rolled back to {from}: {reason}");
                events.push(message.clone());
                message
            }
            // The plan is in the deployment's reason, and so in its last event.
            Action::DryRun { .. } => "dry run: nothing is started or routed".to_owned(),
            Action::Hold { reason } => reason.clone(),
            Action::WaitReady => format!("waiting for {target} to be ready"),
        };
        // Blue/green, staged: where to try the new revision before the switch.
        let staged = strategy.stages_at_full_capacity() && step.progress.phase == Phase::Stepping;
        let message = if staged {
            let message = format!("{target} {message}; try it at {tag_url}");
            if before.phase == Phase::WaitingReady {
                events.push(message.clone());
            }
            message
        } else {
            message
        };
        let first_wait = deployment.rollout.is_none() && step.action == Action::WaitReady;
        if first_wait {
            events.push(format!("{}: {message}", strategy.name()));
        }
        self.cell(&key_of(deployment))
            .lock()
            .rollout_messages
            .insert(deployment.id, message);
        for event in events {
            self.event(Some(deployment), &event);
        }
        Ok(())
    }

    /// The rollout of the service's deployment in progress, if it is a progressive one.
    pub async fn rollout(&self, service: &str, env: &str) -> Result<Option<RolloutSummary>> {
        let (owned_service, owned_env) = (service.to_owned(), env.to_owned());
        let listed = self
            .db(
                format!("list deployments of {service}/{env}"),
                move |store| store.deployment_list(&owned_service, Some(&owned_env), 10),
            )
            .await?;
        let Some(deployment) = listed.into_iter().find(|d| !d.state.is_terminal()) else {
            return Ok(None);
        };
        let Some(record) = RolloutRecord::of(&deployment) else {
            return Ok(None);
        };
        let strategy = match self.revision(&deployment.to_revision).await? {
            Some(info) => strategy_of(&info),
            None => return Ok(None),
        };
        let progress = &record.progress;
        let total = strategy.ladder().len();
        let (phase, step) = match &progress.phase {
            Phase::WaitingReady => ("waiting_ready", None),
            Phase::Stepping if total > 0 => ("stepping", Some((progress.step_index + 1, total))),
            Phase::Stepping => ("staged", None),
            Phase::Switched { .. } => ("switched", None),
            Phase::Completed => ("completed", None),
            Phase::RolledBack { .. } => ("rolled_back", None),
        };
        let message = self
            .status
            .get(&(service.to_owned(), env.to_owned()))
            .and_then(|status| status.rollout_messages.get(&deployment.id).cloned())
            .unwrap_or_default();
        let target = &deployment.to_revision;
        let from = deployment.from_revision.as_deref().filter(|f| f != target);
        let analysis = match (strategy.analysis(), from) {
            (Some((analysis, pause_ms)), Some(from)) if progress.phase == Phase::Stepping => {
                Some(self.analysis_so_far(
                    &(service.to_owned(), env.to_owned()),
                    deployment.id,
                    progress,
                    record.baseline.as_ref(),
                    (from, target),
                    analysis,
                    pause_ms,
                ))
            }
            _ => None,
        };
        Ok(Some(RolloutSummary {
            deployment: deployment.id,
            strategy: record.strategy,
            phase: phase.to_owned(),
            new_weight: progress.new_weight,
            step,
            paused: progress.paused,
            message,
            analysis,
        }))
    }
}

/// The desired revisions equal, order aside.
fn same_revisions(a: &[DesiredRevision], b: &[DesiredRevision]) -> bool {
    let sorted = |list: &[DesiredRevision]| {
        let mut list: Vec<(String, u32, u32)> = list
            .iter()
            .map(|r| (r.revision.clone(), r.instances, r.weight))
            .collect();
        list.sort();
        list
    };
    sorted(a) == sorted(b)
}

/// A dry run's plan, one line per step.
fn plan_text(steps: &[runway_rollout::PlannedStep]) -> String {
    steps
        .iter()
        .map(|step| format!("  {:>3} % new: {}", step.weights.new, step.when))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// `requests` requests, `errors` of them 5xx, each taking `latency` seconds.
    fn window(requests: u64, errors: u64, latency: f64) -> Window {
        Window {
            requests,
            errors_5xx: errors,
            latency_buckets: (0..16)
                .map(|k| 0.001 * f64::powi(2.0, k))
                .map(|b| (b, if latency <= b { requests } else { 0 }))
                .collect(),
            readiness_failures: 0,
            restarts: 0,
        }
    }

    fn stepping(started_ms: u64) -> Progress {
        Progress {
            phase: Phase::Stepping,
            new_weight: 20,
            ..Progress::new(started_ms)
        }
    }

    /// The status's analysis: the figures over the window, the manifest's settings, each
    /// check as the analysis makes it, and the verdict the controller takes (a latency failure
    /// waits for the whole window).
    #[test]
    fn the_analysis_summary_is_the_analysis_as_the_controller_takes_it() {
        let settings = AnalysisSettings {
            min_requests: 100,
            max_error_ratio: 0.025,
            ..AnalysisSettings::default()
        };
        let stable = window(400, 0, 0.004);

        // Too few: held, and said so; 5xx not judged, its figure shown.
        let few = window(60, 6, 0.004);
        let a = analysis_summary(
            &settings,
            60_000,
            &stepping(1_000),
            31_000,
            ("web-00002", &few),
            ("web-00001", &stable),
        );
        assert_eq!(
            (a.revision.as_str(), a.stable_revision.as_str()),
            ("web-00002", "web-00001")
        );
        assert_eq!((a.window_started_ms, a.window_ms), (1_000, 60_000));
        assert_eq!(a.settings, settings);
        assert_eq!(a.p99_samples, 100);
        assert_eq!((a.canary.requests, a.canary.errors_5xx), (60, 6));
        assert_eq!(a.canary.error_ratio, 0.1);
        assert_eq!(a.stable.requests, 400);
        assert_eq!(a.requests.standing, "too_few");
        assert_eq!(
            (a.requests.value, a.requests.limit),
            (Some(60.0), Some(100.0))
        );
        assert_eq!(a.error_ratio.standing, "too_few");
        assert_eq!(a.error_ratio.value, Some(0.1));
        assert_eq!(a.restarts.standing, "within");
        assert_eq!(a.verdict, "inconclusive");
        assert_eq!(
            a.reason.as_deref(),
            Some("60 requests to the new revision, fewer than the 100 needed to judge it")
        );

        // Enough and slow: mid-window the p99 is over but the verdict waits; at the window's
        // end it fails, as `analyse` says.
        let slow = window(200, 0, 0.5);
        let mid = analysis_summary(
            &settings,
            60_000,
            &stepping(1_000),
            31_000,
            ("web-00002", &slow),
            ("web-00001", &stable),
        );
        assert_eq!(mid.requests.standing, "within");
        assert_eq!(mid.error_ratio.standing, "within");
        assert_eq!(mid.latency_p99.standing, "over");
        assert_eq!(mid.verdict, "inconclusive");
        let end = analysis_summary(
            &settings,
            60_000,
            &stepping(1_000),
            61_000,
            ("web-00002", &slow),
            ("web-00001", &stable),
        );
        assert_eq!(end.verdict, "fail");
        let Verdict::Fail { message, .. } = analyse(&settings, &slow, &stable) else {
            panic!("not a failure");
        };
        assert_eq!(end.reason, Some(message.clone()));
        assert_eq!(end.latency_p99.reason, Some(message));

        // Within every limit: a pass.
        let good = window(200, 1, 0.004);
        let a = analysis_summary(
            &settings,
            60_000,
            &stepping(1_000),
            61_000,
            ("web-00002", &good),
            ("web-00001", &stable),
        );
        assert_eq!(a.verdict, "pass");
        assert_eq!(a.reason, None);
        assert_eq!(a.error_ratio.standing, "within");
        // The limit in force: the stable's 0 % plus half a point, under the absolute 2.5 %.
        assert_eq!(a.error_ratio.limit, Some(0.005));
    }
}
