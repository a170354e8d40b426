//! Runway's rollout strategies and the canary analysis: how traffic moves from the stable
//! revision to a new one, and when it moves back.
//!
//! Pure: no I/O, no clock (time comes in as [`StepInput::now_ms`]), no state between calls
//! (it is in [`Progress`], which the caller stores). The control plane calls [`next`] on each
//! observation, or at [`Step::wake_at_ms`], and turns [`Step::weights`] into the reconciler's
//! desired weights (stable revision `weights.stable`, new revision `weights.new`); the
//! reconciler still moves traffic only to ready instances.
//!
//! ```
//! use runway_rollout::{Action, Canary, Progress, StepInput, Strategy, Verdict, next};
//!
//! let canary = Strategy::Canary(Canary {
//!     steps: vec![10, 50, 100],
//!     pause_ms: 60_000,
//!     analysis: Default::default(),
//! });
//! assert_eq!(canary.check(), Ok(()));
//! let input = |now_ms, verdict| StepInput { now_ms, new_ready: true, verdict, command: None };
//!
//! let step = next(&canary, &Progress::new(0), &input(1_000, None));
//! assert_eq!((step.weights.stable, step.weights.new), (90, 10));
//! // Held for the pause, then advanced on a passing window.
//! let step = next(&canary, &step.progress, &input(61_000, Some(Verdict::Pass)));
//! assert_eq!((step.action, step.weights.new), (Action::Advance, 50));
//! ```
//!
//! # The strategies
//!
//! The manifest's `deployment.strategy` values keep upstream's names; Runway's own are
//! prefixed `runway_` so that no value upstream adds later can collide with them (see
//! [`Strategy`]).
//!
//! - **`legacy`** (the default): the rolling deploy. No traffic to the new revision until it
//!   is fully ready, then 100 % at once; this is what the reconciler already does with
//!   weights 0 → 100.
//! - **`expedited`**: straight to 100 % once ready. On one machine it is the same as
//!   `legacy`: upstream's difference (skipping the region-by-region walk) has no regions to
//!   skip here.
//! - **`regional_rollout`**: the percentages in order (`[5, 25, 75, 100]` by default), each
//!   held for `pause_ms`. Runway runs one region (this machine's), so the walk is done once;
//!   with several regions the controller runs one [`Progress`] per region, in the manifest's
//!   order of `regions`, starting the next when the previous completes. No analysis gates it,
//!   but a `Fail` verdict, if the controller gives one, still rolls it back.
//! - **`dryrun`**: [`plan`] lists the steps the deploy would take (those of `legacy`, the
//!   default) and [`next`] answers [`Action::DryRun`] with that plan and 0 % new: nothing is
//!   started, routed or stopped, and the deployment ends there.
//! - **`runway_canary`**: the `steps` in order, each held for `pause_ms` (one analysis
//!   window) and left only when the window's verdict is [`Verdict::Pass`] and the new
//!   revision is ready. Reaching 100 % completes it; the step at 100 % is not analysed, as
//!   the stable revision then has no traffic to compare with.
//! - **`runway_blue_green`**: the new revision runs at full capacity, reachable at its tag
//!   URL, with 0 % of the traffic. Once it is ready, the switch moves 100 % at once
//!   ([`Action::Switch`]): on a promote, or `auto_switch_after_ms` after it became ready.
//!   The switch ends the rollout and the deployment succeeds; the old revision stays warm for
//!   `keep_old_ms` after it ([`Step::old_stop_at_ms`]), so a rollback to it is instant, and is
//!   stopped then. The deployment does not wait for that: a new deploy may start at once.
//!
//! # The rules of [`next`]
//!
//! 1. **Ready first.** The new revision's weight rises only in a call where it is fully
//!    ready (`new_ready`); until the first such call it has 0 %. Not ready later holds the
//!    weights where they are ([`Action::WaitReady`]); the reconciler's start timeout bounds
//!    that wait, and the controller fails the deployment on it.
//! 2. **Failure rolls back at once.** A [`Verdict::Fail`] in any phase before the end, with any
//!    strategy, or an [`Command::Abort`], gives 0 % new and [`Action::RollBack`] with the
//!    reason (the failed measure and its numbers), even while paused: a pause stops progress,
//!    not protection. The controller judges latency over a canary step's whole window only
//!    ([`Verdict::mid_window`]): errors, restarts and readiness fail at once.
//! 3. **Inconclusive holds, within a bound.** A canary step whose window is inconclusive (or
//!    has no verdict) after its pause is held; once `max_inconclusive_windows` pauses have
//!    passed since the step began it is rolled back, saying why. Promoting code nobody could
//!    judge would defeat the canary, and holding for ever leaves a deployment with two
//!    revisions and no end; a service with too little traffic for the analysis lowers
//!    `min_requests`, or an operator promotes.
//! 4. **Operator commands.** Pause holds everything (the weights, the pauses, blue/green's
//!    automatic switch and its end) except rule 2; Resume starts the current step's window
//!    again (for blue/green before the switch, the automatic switch's delay); Promote clears
//!    a pause and goes to 100 % as soon as the new revision is ready (blue/green: switches
//!    now, and the old revision still stays warm); Abort is rule 2.
//! 5. **Finished is final.** [`Phase::Completed`] and [`Phase::RolledBack`] give the same step
//!    on every later call, whatever the inputs: after completion there is nothing to abort
//!    (going back is a new deployment of the previous revision).
//!
//! Steps that [`Kind::check`] would refuse are made safe rather than trusted: values are
//! clamped to 1..=100, only strictly increasing ones kept, and 100 added at the end.
//!
//! # The analysis
//!
//! [`analyse`] compares the canary's [`Window`] with the stable revision's over the same
//! time, both from the ingress's own metrics and the runtime's counts ([`Window::delta`] of
//! two readings). In order, the first limit exceeded fails the window:
//!
//! 1. readiness failures above `max_readiness_failures` (default 0);
//! 2. restarts above `max_restarts` (default 0);
//! 3. fewer than `min_requests` canary requests (default 50): [`Verdict::Inconclusive`];
//! 4. the 5xx ratio above `max_error_ratio` (default 1 %), or above the stable revision's
//!    ratio plus `max_error_ratio_over_stable` (default 0.5 points);
//! 5. the p99 latency (as Prometheus's `histogram_quantile`) above `latency_slo_seconds`
//!    (default 1.024 s, upstream's apdex "satisfied" threshold), or above
//!    `max_p99_over_stable_ratio` (default 1.5) times the stable revision's p99 and by at
//!    least `min_p99_increase_seconds` (default 25 ms: a few milliseconds' difference between
//!    two fast revisions is noise); no latency histogram is inconclusive. The comparison
//!    with the stable revision needs [`P99_SAMPLES`] (100) requests in each window: the p99
//!    of fewer is the slowest single request, and one that waited on a busy machine is not
//!    a regression. Fewer are held to the SLO alone.
//!
//! The absolute limits (1 % and the SLO) are not applied when the stable revision is over
//! them too: then the canary is judged only against the stable revision, so that a fix
//! deployed during an incident is not blocked by the incident. The stable revision is
//! compared with only when it served at least `min_requests` in the window. Upstream's apdex
//! target (0.999) is not used as such: a p99 within the threshold is the measure a window of
//! a few hundred requests can support.
//!
//! # Files
//!
//! `strategy/`: the strategies, one module each (`canary.rs`, …), and in `mod.rs` what is asked
//! of one ([`Kind`]) and the enum that names them ([`Strategy`]); adding one is
//! `docs/dev/adding-a-strategy.md`. `window.rs`: a step's counters and latency histogram (p99
//! as Prometheus computes it). `analysis.rs`: the canary verdict against the stable revision
//! (`checks`, which the status's `rollout.analysis` shows too). `rollout.rs`: the state machine
//! (the rules every strategy keeps, the ladder walk most take, pause/resume/abort/promote,
//! rollback on a failed analysis). `error.rs`: the crate's error. The
//! caller is `runway-control`'s `rollout.rs`.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

mod analysis;
mod error;
mod rollout;
mod strategy;
mod window;

pub use analysis::{
    AnalysisSettings, Check, Checks, Measure, P99_SAMPLES, Standing, Verdict, analyse, checks,
};
pub use error::StrategyError;
pub use rollout::{
    Action, Command, Phase, PlannedStep, Progress, Step, StepInput, Weights, clock, next, plan,
};
pub use strategy::{
    AsKind, BlueGreen, Canary, DEFAULT_CANARY_STEPS, DEFAULT_KEEP_OLD_MS, DEFAULT_PAUSE_MS,
    DEFAULT_PERCENTAGES, Kind, RegionalRollout, Strategy,
};
pub use window::Window;
