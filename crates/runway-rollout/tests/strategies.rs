//! Each strategy's steps, table-driven: a sequence of observations and what each gives.

#![allow(clippy::unwrap_used, reason = "tests")]

use runway_rollout::{
    Action, AnalysisSettings, BlueGreen, Canary, Command, Phase, Progress, RegionalRollout, Step,
    StepInput, Strategy, Verdict, Weights, next, plan,
};
use serde::Deserialize;
use serde::de::value::{Error as ValueError, MapDeserializer};

/// One call: time, whether the new revision is ready, the verdict, the command; then the new
/// revision's expected weight and action.
type Row = (
    u64,
    bool,
    Option<Verdict>,
    Option<Command>,
    u32,
    &'static str,
);

fn kind(action: &Action) -> &'static str {
    match action {
        Action::Hold { .. } => "hold",
        Action::Advance => "advance",
        Action::Complete => "complete",
        Action::RollBack { .. } => "rollback",
        Action::Switch => "switch",
        Action::WaitReady => "wait",
        Action::DryRun { .. } => "dryrun",
    }
}

fn run(name: &str, strategy: &Strategy, rows: &[Row]) -> Vec<Step> {
    let mut progress = Progress::new(0);
    let mut steps = Vec::new();
    for (i, (now_ms, new_ready, verdict, command, new, action)) in rows.iter().enumerate() {
        let input = StepInput {
            now_ms: *now_ms,
            new_ready: *new_ready,
            verdict: verdict.clone(),
            command: *command,
        };
        let step = next(strategy, &progress, &input);
        assert_eq!(
            (step.weights.new, kind(&step.action)),
            (*new, *action),
            "{name}, row {i} (t={now_ms}): {step:?}"
        );
        assert_eq!(step.weights.stable + step.weights.new, 100);
        progress = step.progress.clone();
        steps.push(step);
    }
    steps
}

fn pass() -> Option<Verdict> {
    Some(Verdict::Pass)
}

fn inconclusive() -> Option<Verdict> {
    Some(Verdict::Inconclusive {
        reason: "12 requests to the new revision, fewer than the 50 needed to judge it".into(),
    })
}

fn fail() -> Option<Verdict> {
    Some(Verdict::Fail {
        measure: runway_rollout::Measure::ErrorRatio,
        canary_value: 0.052,
        stable_value: Some(0.0),
        limit: 0.01,
        message: "error ratio 5.2 % (26 of 500) over the limit 1.0 % (stable: 0.0 %)".into(),
    })
}

fn canary(steps: &[u32], pause_ms: u64) -> Strategy {
    Strategy::Canary(Canary {
        steps: steps.to_vec(),
        pause_ms,
        analysis: AnalysisSettings::default(),
    })
}

const P: Option<Command> = Some(Command::Pause);
const R: Option<Command> = Some(Command::Resume);
const A: Option<Command> = Some(Command::Abort);
const PR: Option<Command> = Some(Command::Promote);

#[test]
fn one_step_strategies_go_to_100_once_ready() {
    for strategy in [Strategy::Legacy, Strategy::Expedited] {
        run(
            strategy.name(),
            &strategy,
            &[
                (0, false, None, None, 0, "wait"),
                (500, false, None, None, 0, "wait"),
                (1000, true, None, None, 100, "complete"),
                (2000, false, fail(), A, 100, "complete"),
            ],
        );
    }
}

#[test]
fn regional_rollout_walks_the_percentages() {
    let strategy = Strategy::regional_rollout();
    let steps = run(
        "regional",
        &strategy,
        &[
            (0, false, None, None, 0, "wait"),
            (1_000, true, None, None, 5, "advance"),
            (30_000, true, None, None, 5, "hold"),
            (61_000, true, None, None, 25, "advance"),
            (100_000, true, None, None, 25, "hold"),
            (121_000, false, None, None, 25, "wait"),
            (122_000, true, None, None, 75, "advance"),
            (182_000, true, None, None, 100, "complete"),
        ],
    );
    assert_eq!(steps[1].wake_at_ms, Some(61_000));
    // No analysis gates it, but a failure still rolls it back.
    run(
        "regional fails",
        &strategy,
        &[
            (0, true, None, None, 5, "advance"),
            (10_000, true, fail(), None, 0, "rollback"),
        ],
    );
}

#[test]
fn canary_advances_after_the_pause_and_a_pass() {
    let strategy = canary(&[10, 50, 100], 10_000);
    run(
        "canary",
        &strategy,
        &[
            (0, false, None, None, 0, "wait"),
            (1_000, true, None, None, 10, "advance"),
            (5_000, true, pass(), None, 10, "hold"),
            (11_000, true, None, None, 10, "hold"),
            (11_500, true, pass(), None, 50, "advance"),
            (21_500, true, inconclusive(), None, 50, "hold"),
            (25_000, false, pass(), None, 50, "wait"),
            (26_000, true, pass(), None, 100, "complete"),
            (27_000, true, fail(), A, 100, "complete"),
        ],
    );
}

#[test]
fn canary_fail_rolls_back_at_once_and_stays_rolled_back() {
    let strategy = canary(&[10, 50, 100], 10_000);
    let steps = run(
        "canary fail",
        &strategy,
        &[
            (0, true, None, None, 10, "advance"),
            (3_000, true, fail(), None, 0, "rollback"),
            (20_000, true, pass(), PR, 0, "rollback"),
        ],
    );
    let Action::RollBack { reason } = &steps[1].action else {
        panic!()
    };
    assert_eq!(
        reason,
        "analysis failed: error ratio 5.2 % (26 of 500) over the limit 1.0 % (stable: 0.0 %)"
    );
    // While paused too.
    run(
        "canary fail paused",
        &strategy,
        &[
            (0, true, None, None, 10, "advance"),
            (1_000, true, None, P, 10, "hold"),
            (2_000, true, fail(), None, 0, "rollback"),
        ],
    );
}

#[test]
fn canary_inconclusive_is_bounded() {
    // Three windows of 10 s: held until 30 s after the step began, then rolled back.
    let strategy = canary(&[10, 100], 10_000);
    let steps = run(
        "inconclusive",
        &strategy,
        &[
            (0, true, None, None, 10, "advance"),
            (10_000, true, inconclusive(), None, 10, "hold"),
            (20_000, true, None, None, 10, "hold"),
            (29_999, true, inconclusive(), None, 10, "hold"),
            (30_000, true, inconclusive(), None, 0, "rollback"),
        ],
    );
    assert_eq!(steps[1].wake_at_ms, Some(30_000));
    let Action::RollBack { reason } = &steps[4].action else {
        panic!()
    };
    assert!(
        reason.starts_with("analysis inconclusive for 3 windows of 10 s: 12 requests"),
        "{reason}"
    );
}

#[test]
fn canary_pause_resume_promote_abort() {
    let strategy = canary(&[10, 50, 100], 10_000);
    run(
        "pause and resume",
        &strategy,
        &[
            (0, true, None, None, 10, "advance"),
            (5_000, true, None, P, 10, "hold"),
            (20_000, true, pass(), None, 10, "hold"),
            (90_000, true, inconclusive(), None, 10, "hold"),
            // Resuming starts the step's window again.
            (100_000, true, pass(), R, 10, "hold"),
            (109_999, true, pass(), None, 10, "hold"),
            (110_000, true, pass(), None, 50, "advance"),
        ],
    );
    run(
        "promote",
        &strategy,
        &[
            (0, true, None, None, 10, "advance"),
            (1_000, true, None, P, 10, "hold"),
            (2_000, true, None, PR, 100, "complete"),
        ],
    );
    run(
        "promote before ready",
        &strategy,
        &[
            (0, false, None, PR, 0, "wait"),
            (1_000, false, None, None, 0, "wait"),
            (2_000, true, None, None, 100, "complete"),
        ],
    );
    run(
        "abort",
        &strategy,
        &[
            (0, true, None, None, 10, "advance"),
            (10_000, true, pass(), None, 50, "advance"),
            (11_000, true, None, A, 0, "rollback"),
        ],
    );
    run(
        "abort before ready",
        &strategy,
        &[
            (0, false, None, None, 0, "wait"),
            (1_000, false, None, A, 0, "rollback"),
        ],
    );
}

#[test]
fn blue_green_stages_switches_and_keeps_the_old_warm() {
    let auto = Strategy::BlueGreen(BlueGreen {
        auto_switch_after_ms: Some(5_000),
        keep_old_ms: 20_000,
    });
    let steps = run(
        "blue/green auto",
        &auto,
        &[
            (0, false, None, None, 0, "wait"),
            (1_000, true, None, None, 0, "hold"),
            (5_999, true, None, None, 0, "hold"),
            (6_000, true, None, None, 100, "switch"),
            // The switch is the end: asked again, later, it says the same.
            (10_000, true, pass(), None, 100, "switch"),
            (26_000, true, None, None, 100, "switch"),
        ],
    );
    assert_eq!(steps[1].wake_at_ms, Some(6_000));
    for after in &steps[3..] {
        assert_eq!(after.old_stop_at_ms, Some(26_000));
        assert_eq!(after.progress.phase, Phase::Switched { at_ms: 6_000 });
    }

    let manual = Strategy::BlueGreen(BlueGreen {
        auto_switch_after_ms: None,
        keep_old_ms: 20_000,
    });
    run(
        "blue/green manual, instant rollback",
        &manual,
        &[
            (0, true, None, None, 0, "hold"),
            (1_000_000, true, None, None, 0, "hold"),
            (1_000_001, true, None, PR, 100, "switch"),
            // Over: a rollback is a new deployment, to the warm old revision.
            (1_005_000, true, None, A, 100, "switch"),
        ],
    );
    run(
        "blue/green aborted before the switch",
        &manual,
        &[
            (0, true, None, P, 0, "hold"),
            (1_000, true, None, A, 0, "rollback"),
        ],
    );
    run(
        "blue/green never switches to a revision that is not ready",
        &auto,
        &[
            (0, true, None, None, 0, "hold"),
            (6_000, false, None, None, 0, "wait"),
            (7_000, true, None, None, 100, "switch"),
        ],
    );
}

#[test]
fn dry_run_changes_nothing_and_shows_the_plan() {
    let steps = run(
        "dryrun",
        &Strategy::DryRun,
        &[
            (0, true, None, None, 0, "dryrun"),
            (1_000, true, pass(), PR, 0, "dryrun"),
        ],
    );
    let Action::DryRun { plan: shown } = &steps[0].action else {
        panic!()
    };
    assert_eq!(shown, &plan(&Strategy::Legacy));
    assert_eq!(steps[0].progress, Progress::new(0));
}

#[test]
fn plans_list_the_steps() {
    let weights = |s: &Strategy| plan(s).iter().map(|p| p.weights).collect::<Vec<_>>();
    assert_eq!(
        weights(&Strategy::regional_rollout()),
        [0, 5, 25, 75, 100].map(Weights::new)
    );
    assert_eq!(weights(&Strategy::Legacy), [0, 100].map(Weights::new));
    let canary_plan = plan(&canary(&[10, 100], 30_000));
    assert_eq!(
        canary_plan.last().unwrap().when,
        "after 30 s at 10 % and a passing analysis: all traffic, then stop the old revision"
    );
    let bg = plan(&Strategy::BlueGreen(BlueGreen {
        auto_switch_after_ms: None,
        keep_old_ms: 600_000,
    }));
    assert_eq!(
        bg[1].when,
        "on promote: switch all traffic at once; keep the old revision warm for 600 s, then stop it"
    );
}

#[test]
fn check_names_the_field_and_what_is_expected() {
    let regional = |p: &[u32]| {
        Strategy::RegionalRollout(RegionalRollout {
            percentages: p.to_vec(),
            pause_ms: 1,
        })
    };
    let cases: Vec<(Strategy, Result<(), &str>)> = vec![
        (Strategy::regional_rollout(), Ok(())),
        (Strategy::canary(), Ok(())),
        (Strategy::Legacy, Ok(())),
        (regional(&[100]), Ok(())),
        (
            regional(&[]),
            Err("`percentages` is empty: expected at least one percentage, the last being 100"),
        ),
        (
            regional(&[0, 100]),
            Err("`percentages[0]` is 0: expected a percentage from 1 to 100"),
        ),
        (
            regional(&[5, 150]),
            Err("`percentages[1]` is 150: expected a percentage from 1 to 100"),
        ),
        (
            regional(&[5, 25, 25, 100]),
            Err("`percentages[2]` is 25, not above 25: expected strictly increasing percentages"),
        ),
        (
            regional(&[5, 25, 75]),
            Err("`percentages` ends at 75: expected the last percentage to be 100"),
        ),
        (
            canary(&[50, 10, 100], 1_000),
            Err("`steps[1]` is 10, not above 50: expected strictly increasing percentages"),
        ),
        (
            canary(&[10, 100], 0),
            Err(
                "`pause_ms` is 0: expected at least 1 ms: each step's pause is its analysis window",
            ),
        ),
    ];
    for (strategy, expected) in cases {
        let got = strategy.check().map_err(|e| e.to_string());
        assert_eq!(got, expected.map_err(str::to_owned), "{strategy:?}");
    }
}

/// Reads a strategy from string keys and values, as a manifest's flat map would give it.
fn from_map(entries: &[(&'static str, &'static str)]) -> Result<Strategy, ValueError> {
    Strategy::deserialize(MapDeserializer::<_, ValueError>::new(
        entries.iter().copied(),
    ))
}

#[test]
fn names_do_not_collide_with_upstreams() {
    assert_eq!(
        from_map(&[("strategy", "legacy")]).unwrap(),
        Strategy::Legacy
    );
    assert_eq!(
        from_map(&[("strategy", "dryrun")]).unwrap(),
        Strategy::DryRun
    );
    assert_eq!(
        from_map(&[("strategy", "regional_rollout")]).unwrap(),
        Strategy::regional_rollout()
    );
    assert_eq!(
        from_map(&[("strategy", "runway_canary")]).unwrap(),
        Strategy::canary()
    );
    assert_eq!(
        from_map(&[("strategy", "runway_blue_green")]).unwrap(),
        Strategy::BlueGreen(BlueGreen {
            auto_switch_after_ms: None,
            keep_old_ms: runway_rollout::DEFAULT_KEEP_OLD_MS,
        })
    );
    // Unprefixed names are not ours to take.
    assert!(from_map(&[("strategy", "canary")]).is_err());
    assert!(from_map(&[("strategy", "blue_green")]).is_err());
    for strategy in [
        Strategy::Legacy,
        Strategy::Expedited,
        Strategy::regional_rollout(),
        Strategy::DryRun,
        Strategy::canary(),
        Strategy::BlueGreen(BlueGreen {
            auto_switch_after_ms: None,
            keep_old_ms: 0,
        }),
    ] {
        let name = strategy.name();
        let upstream = ["legacy", "expedited", "regional_rollout", "dryrun"].contains(&name);
        assert!(upstream || name.starts_with("runway_"), "{name}");
    }
}

#[test]
fn times_in_messages_are_clock_times() {
    assert_eq!(runway_rollout::clock(3_723_000), "01:02:03 UTC");
    assert_eq!(runway_rollout::clock(86_400_000 + 59_999), "00:00:59 UTC");
}
