//! The rollout state machine: one call per observation, from the progress so far to the
//! weights to set and what happened.

use serde::{Deserialize, Serialize};

use crate::analysis::Verdict;
use crate::strategy::{AsKind, Kind};

/// The traffic split between the stable revision and the new one, in percent; always sums to
/// 100.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Weights {
    pub stable: u32,
    pub new: u32,
}

impl Weights {
    /// `new` percent to the new revision (at most 100), the rest to the stable one.
    pub fn new(new: u32) -> Self {
        let new = new.min(100);
        Self {
            stable: 100 - new,
            new,
        }
    }
}

/// Where a rollout is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// The new revision is not yet fully ready; it has no traffic.
    WaitingReady,
    /// At `step_index` of the strategy's steps (for blue/green: staged at 0 %, ready).
    Stepping,
    /// Blue/green: all traffic moved to the new revision at `at_ms`; the deployment succeeded
    /// and the old revision stays warm until [`Step::old_stop_at_ms`]. Terminal.
    Switched { at_ms: u64 },
    /// Done: the new revision has all the traffic and the old may be stopped. Terminal.
    Completed,
    /// Traffic is back on the stable revision; the deployment failed. Terminal.
    RolledBack { reason: String },
}

/// The rollout's state between calls: store it, and give it back to the next [`next`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub phase: Phase,
    /// Index of the current step in the strategy's steps, while [`Phase::Stepping`].
    pub step_index: usize,
    /// When the current step began: its analysis window starts here. Set again on resume.
    pub step_started_ms: u64,
    /// The new revision's weight now.
    pub new_weight: u32,
    /// An operator paused the rollout.
    pub paused: bool,
    /// An operator promoted the rollout; it goes to 100 % as soon as the new revision is
    /// ready.
    pub promoted: bool,
}

impl Progress {
    /// A rollout starting at `now_ms`, the new revision with no traffic.
    pub fn new(now_ms: u64) -> Self {
        Self {
            phase: Phase::WaitingReady,
            step_index: 0,
            step_started_ms: now_ms,
            new_weight: 0,
            paused: false,
            promoted: false,
        }
    }

    /// Completed, switched (blue/green) or rolled back: nothing more will change.
    pub fn is_finished(&self) -> bool {
        matches!(
            self.phase,
            Phase::Completed | Phase::Switched { .. } | Phase::RolledBack { .. }
        )
    }
}

/// An operator's command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// Hold everything where it is (except a rollback on a failed analysis).
    Pause,
    /// Carry on; the current step's window starts again.
    Resume,
    /// Roll back to the stable revision now.
    Abort,
    /// Go to 100 % now (once the new revision is ready); for blue/green, switch now.
    Promote,
}

/// What the controller observed for this call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepInput {
    /// The time now, in milliseconds (the state machine never reads a clock).
    pub now_ms: u64,
    /// The new revision has all its desired instances ready.
    pub new_ready: bool,
    /// The analysis of the current step's window so far (from `step_started_ms` to now), if
    /// the controller made one. Only a canary needs one; a `Fail` rolls back any strategy.
    pub verdict: Option<Verdict>,
    pub command: Option<Command>,
}

/// What to do now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Keep the weights as they are; `reason` says what is awaited.
    Hold { reason: String },
    /// Move to the next step's weights.
    Advance,
    /// The new revision has all the traffic; the old one may be stopped. The deployment
    /// succeeded.
    Complete,
    /// All traffic back on the stable revision; the deployment failed, for `reason`.
    RollBack { reason: String },
    /// Blue/green: all traffic to the new revision at once. The deployment succeeded; the old
    /// revision stays warm, for an instant rollback, until [`Step::old_stop_at_ms`], and is
    /// stopped then by whoever keeps the desired state.
    Switch,
    /// The new revision is not fully ready; the weights stay as they are.
    WaitReady,
    /// A dry run: show `plan`, change nothing. The deployment ends here.
    DryRun { plan: Vec<PlannedStep> },
}

/// One call's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The weights the routes should have now.
    pub weights: Weights,
    pub action: Action,
    /// The state to store and pass to the next call.
    pub progress: Progress,
    /// When time alone would change the answer (a pause ending, an automatic switch, the
    /// old revision's warm time ending, the inconclusive bound); call again then at the
    /// latest. `None` when only a new observation or command can.
    pub wake_at_ms: Option<u64>,
    /// Blue/green after the switch: when the old revision may be stopped.
    pub old_stop_at_ms: Option<u64>,
}

/// One step of a plan, as a dry run shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedStep {
    pub weights: Weights,
    /// What moves the rollout to this step, for a person.
    pub when: String,
}

/// The steps `strategy` would take, changing nothing. A dry run's plan is that of the
/// default strategy (`legacy`), which is what the deploy would do without `dryrun`.
pub fn plan(strategy: &(impl AsKind + ?Sized)) -> Vec<PlannedStep> {
    strategy.as_kind().plan()
}

/// A ladder's plan: no traffic until the new revision is ready, then each step of
/// `strategy`'s ladder after its pause (and a passing analysis, with one). [`Kind::plan`]'s
/// default.
pub(crate) fn ladder_plan(strategy: &(impl Kind + ?Sized)) -> Vec<PlannedStep> {
    let step = |new: u32, when: String| PlannedStep {
        weights: Weights::new(new),
        when,
    };
    let gate = if strategy.analysis().is_some() {
        " and a passing analysis"
    } else {
        ""
    };
    let pause = ms_text(strategy.pause_ms());
    let mut steps = vec![step(
        0,
        "start the new revision; no traffic until it is fully ready".to_owned(),
    )];
    let mut previous: Option<u32> = None;
    for weight in strategy.ladder() {
        let when = match previous {
            None => "once ready".to_owned(),
            Some(p) => format!("after {pause} at {p} %{gate}"),
        };
        let when = if weight == 100 {
            format!("{when}: all traffic, then stop the old revision")
        } else {
            when
        };
        steps.push(step(weight, when));
        previous = Some(weight);
    }
    steps
}

pub(crate) fn ms_text(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// The rollout's next move. Pure and level-triggered: the same inputs give the same step, and
/// a finished rollout keeps giving its end. The rules are in the crate's documentation.
pub fn next(strategy: &(impl AsKind + ?Sized), progress: &Progress, input: &StepInput) -> Step {
    let strategy = strategy.as_kind();
    let mut p = progress.clone();
    let now = input.now_ms;

    match &p.phase {
        Phase::Completed => return complete(p),
        Phase::RolledBack { reason } => {
            let reason = reason.clone();
            return roll_back(p, reason);
        }
        &Phase::Switched { at_ms } => {
            return switched(p, at_ms, strategy.keeps_old_ms().unwrap_or(0));
        }
        _ => {}
    }
    if strategy.is_dry_run() {
        return Step {
            weights: Weights::new(0),
            action: Action::DryRun {
                plan: strategy.plan(),
            },
            progress: p,
            wake_at_ms: None,
            old_stop_at_ms: None,
        };
    }
    if input.command == Some(Command::Abort) {
        return roll_back(p, "aborted by an operator".to_owned());
    }
    if let Some(Verdict::Fail { message, .. }) = &input.verdict {
        return roll_back(p, format!("analysis failed: {message}"));
    }
    match input.command {
        Some(Command::Pause) => p.paused = true,
        Some(Command::Resume) if p.paused => {
            p.paused = false;
            p.step_started_ms = now;
        }
        Some(Command::Promote) => {
            p.paused = false;
            p.promoted = true;
        }
        _ => {}
    }
    if p.paused {
        return hold(p, "paused by an operator".to_owned(), None);
    }
    strategy.step(p, input)
}

/// Blue/green's end: all traffic on the new revision since `at_ms`, the old one warm for
/// `keep_old` ms more.
pub(crate) fn switched(mut p: Progress, at_ms: u64, keep_old: u64) -> Step {
    p.phase = Phase::Switched { at_ms };
    p.new_weight = 100;
    p.paused = false;
    Step {
        weights: Weights::new(100),
        action: Action::Switch,
        progress: p,
        wake_at_ms: None,
        old_stop_at_ms: Some(at_ms.saturating_add(keep_old)),
    }
}

/// A time as `HH:MM:SS UTC`, for messages read while it is still ahead.
pub fn clock(ms: u64) -> String {
    let s = (ms / 1000) % 86_400;
    format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
}

/// The ladder walk, [`Kind::step`]'s default: see there.
pub(crate) fn walk(strategy: &(impl Kind + ?Sized), p: Progress, input: &StepInput) -> Step {
    let now = input.now_ms;
    let ladder = strategy.ladder();
    if p.phase == Phase::WaitingReady {
        if !input.new_ready {
            return wait_ready(p);
        }
        if p.promoted {
            return complete(p);
        }
        return enter(strategy, p, 0, &ladder, now);
    }
    if p.promoted {
        if !input.new_ready {
            return wait_ready(p);
        }
        return complete(p);
    }
    let pause = strategy.pause_ms();
    let pause_end = p.step_started_ms.saturating_add(pause);
    if now < pause_end {
        let reason = format!("at {} % until {}", p.new_weight, clock(pause_end));
        return hold(p, reason, Some(pause_end));
    }
    if let Some((analysis, _)) = strategy.analysis() {
        match &input.verdict {
            Some(Verdict::Pass) => {}
            other => {
                let why = match other {
                    Some(Verdict::Inconclusive { reason }) => reason.clone(),
                    _ => "no analysis yet".to_owned(),
                };
                let windows = analysis.max_inconclusive_windows.max(1);
                let give_up_at = p
                    .step_started_ms
                    .saturating_add(pause.saturating_mul(u64::from(windows)));
                if now >= give_up_at {
                    return roll_back(
                        p,
                        format!(
                            "analysis inconclusive for {windows} windows of {}: {why}",
                            ms_text(pause)
                        ),
                    );
                }
                let reason = format!("at {} %, analysis inconclusive: {why}", p.new_weight);
                return hold(p, reason, Some(give_up_at));
            }
        }
    }
    if !input.new_ready {
        return wait_ready(p);
    }
    let index = p.step_index.saturating_add(1);
    enter(strategy, p, index, &ladder, now)
}

/// Moves to `index` of the ladder (100 % past its end).
fn enter(
    strategy: &(impl Kind + ?Sized),
    mut p: Progress,
    index: usize,
    ladder: &[u32],
    now: u64,
) -> Step {
    let weight = ladder.get(index).copied().unwrap_or(100);
    if weight >= 100 {
        return complete(p);
    }
    p.phase = Phase::Stepping;
    p.step_index = index;
    p.step_started_ms = now;
    p.new_weight = weight;
    Step {
        weights: Weights::new(weight),
        action: Action::Advance,
        progress: p,
        wake_at_ms: Some(now.saturating_add(strategy.pause_ms())),
        old_stop_at_ms: None,
    }
}

pub(crate) fn hold(p: Progress, reason: String, wake_at_ms: Option<u64>) -> Step {
    Step {
        weights: Weights::new(p.new_weight),
        action: Action::Hold { reason },
        progress: p,
        wake_at_ms,
        old_stop_at_ms: None,
    }
}

pub(crate) fn wait_ready(p: Progress) -> Step {
    Step {
        weights: Weights::new(p.new_weight),
        action: Action::WaitReady,
        progress: p,
        wake_at_ms: None,
        old_stop_at_ms: None,
    }
}

pub(crate) fn complete(mut p: Progress) -> Step {
    p.phase = Phase::Completed;
    p.new_weight = 100;
    p.paused = false;
    Step {
        weights: Weights::new(100),
        action: Action::Complete,
        progress: p,
        wake_at_ms: None,
        old_stop_at_ms: None,
    }
}

fn roll_back(mut p: Progress, reason: String) -> Step {
    p.phase = Phase::RolledBack {
        reason: reason.clone(),
    };
    p.new_weight = 0;
    p.paused = false;
    Step {
        weights: Weights::new(0),
        action: Action::RollBack { reason },
        progress: p,
        wake_at_ms: None,
        old_stop_at_ms: None,
    }
}
