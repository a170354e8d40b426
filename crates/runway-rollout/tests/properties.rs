//! Properties of the rollout state machine over random strategies and observations.

#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use runway_rollout::{
    Action, AnalysisSettings, BlueGreen, Canary, Command, Measure, Progress, RegionalRollout, Step,
    StepInput, Verdict, Window, analyse, next,
};

/// Any strategy, with steps that `check()` may refuse (the machine must stay safe anyway).
fn strategy() -> impl Strategy<Value = runway_rollout::Strategy> {
    use runway_rollout::Strategy as S;
    let steps = proptest::collection::vec(0u32..=150, 0..6);
    let pause = 0u64..=10_000;
    prop_oneof![
        Just(S::Legacy),
        Just(S::Expedited),
        Just(S::DryRun),
        (steps.clone(), pause.clone()).prop_map(|(percentages, pause_ms)| S::RegionalRollout(
            RegionalRollout {
                percentages,
                pause_ms
            }
        )),
        (steps, pause, 0u32..=4).prop_map(|(steps, pause_ms, windows)| S::Canary(Canary {
            steps,
            pause_ms,
            analysis: AnalysisSettings {
                max_inconclusive_windows: windows,
                ..AnalysisSettings::default()
            },
        })),
        (proptest::option::of(0u64..=10_000), 0u64..=10_000).prop_map(|(auto, keep)| {
            S::BlueGreen(BlueGreen {
                auto_switch_after_ms: auto,
                keep_old_ms: keep,
            })
        }),
    ]
}

fn verdict() -> impl Strategy<Value = Option<Verdict>> {
    prop_oneof![
        4 => Just(None),
        6 => Just(Some(Verdict::Pass)),
        2 => Just(Some(Verdict::Inconclusive { reason: "too few".into() })),
        1 => Just(Some(Verdict::Fail {
            measure: Measure::Restarts,
            canary_value: 1.0,
            stable_value: Some(0.0),
            limit: 0.0,
            message: "restarts 1 over the limit 0 (stable: 0)".into(),
        })),
    ]
}

fn command() -> impl Strategy<Value = Option<Command>> {
    prop_oneof![
        12 => Just(None),
        1 => Just(Some(Command::Pause)),
        1 => Just(Some(Command::Resume)),
        1 => Just(Some(Command::Abort)),
        1 => Just(Some(Command::Promote)),
    ]
}

/// Time since the previous call, readiness, verdict, command.
fn inputs() -> impl Strategy<Value = Vec<(u64, bool, Option<Verdict>, Option<Command>)>> {
    proptest::collection::vec((0u64..5_000, any::<bool>(), verdict(), command()), 1..60)
}

fn kind_is_rollback(step: &Step) -> bool {
    matches!(step.action, Action::RollBack { .. })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Weights sum to 100; the new revision has no traffic before a call where it is ready,
    /// and its weight rises only in such a call; a Fail or an Abort gives 0 % at once.
    #[test]
    fn safety(strategy in strategy(), inputs in inputs()) {
        let mut progress = Progress::new(0);
        let mut now = 0u64;
        let mut ever_ready = false;
        for (dt, new_ready, verdict, command) in inputs {
            now += dt;
            ever_ready |= new_ready;
            let failing = verdict.as_ref().is_some_and(Verdict::is_fail)
                || command == Some(Command::Abort);
            let input = StepInput { now_ms: now, new_ready, verdict, command };
            let step = next(&strategy, &progress, &input);
            prop_assert_eq!(step.weights.stable + step.weights.new, 100);
            prop_assert_eq!(step.weights.new, step.progress.new_weight);
            if !ever_ready {
                prop_assert_eq!(step.weights.new, 0, "traffic before ready: {:?}", step);
            }
            if step.weights.new > progress.new_weight {
                prop_assert!(new_ready, "weight rose while not ready: {:?}", step);
            }
            if failing && !progress.is_finished() {
                prop_assert_eq!(step.weights.new, 0, "{:?}", step);
                if !matches!(strategy, runway_rollout::Strategy::DryRun) {
                    prop_assert!(kind_is_rollback(&step), "{:?}", step);
                }
            }
            if progress.is_finished() {
                prop_assert_eq!(&step.progress, &progress, "a finished rollout changed");
            }
            // Level-triggered: the same call again gives the same answer.
            prop_assert_eq!(&next(&strategy, &progress, &input), &step);
            progress = step.progress;
        }
    }

    /// With the new revision ready and every window passing, every strategy but a dry run
    /// reaches 100 % within a bounded number of calls (one a second). A manual blue/green
    /// is promoted on the first call: without it, it waits for one by design.
    #[test]
    fn always_pass_reaches_100(strategy in strategy()) {
        use runway_rollout::Strategy as S;
        let (rungs, per_rung_ms) = match &strategy {
            S::DryRun => return Ok(()),
            S::Legacy | S::Expedited => (1u64, 0u64),
            S::RegionalRollout(RegionalRollout { percentages: s, pause_ms })
            | S::Canary(Canary { steps: s, pause_ms, .. }) => (s.len() as u64 + 1, *pause_ms),
            S::BlueGreen(BlueGreen { auto_switch_after_ms, keep_old_ms }) => {
                (2, auto_switch_after_ms.unwrap_or(0) + keep_old_ms)
            }
        };
        let bound = rungs * (per_rung_ms / 1_000 + 2) + 2;
        let manual = matches!(strategy, S::BlueGreen(BlueGreen { auto_switch_after_ms: None, .. }));
        let mut progress = Progress::new(0);
        let mut calls = 0;
        while !progress.is_finished() {
            prop_assert!(calls <= bound, "not done after {} calls: {:?}", calls, progress);
            let input = StepInput {
                now_ms: calls * 1_000,
                new_ready: true,
                verdict: Some(Verdict::Pass),
                command: (manual && calls == 0).then_some(Command::Promote),
            };
            let step = next(&strategy, &progress, &input);
            prop_assert!(!kind_is_rollback(&step), "{:?}", step);
            progress = step.progress;
            calls += 1;
        }
        prop_assert_eq!(progress.new_weight, 100);
    }

    /// An Abort at any point before the end gives 0 % new at once, and it stays there.
    #[test]
    fn abort_at_any_point(strategy in strategy(), inputs in inputs(), at in 0usize..60) {
        let mut progress = Progress::new(0);
        let mut now = 0u64;
        for (i, (dt, new_ready, verdict, command)) in inputs.into_iter().enumerate() {
            now += dt;
            let command = if i == at { Some(Command::Abort) } else { command };
            let was_finished = progress.is_finished();
            let input = StepInput { now_ms: now, new_ready, verdict, command };
            let step = next(&strategy, &progress, &input);
            if i >= at && !was_finished {
                prop_assert_eq!(step.weights.new, 0, "{:?}", step);
            }
            progress = step.progress;
        }
    }

    /// The analysis never panics, a window never fails against itself on latency or errors
    /// when within the absolute limits, and a p99 lies within the buckets' range.
    #[test]
    fn analysis_is_total(
        requests in 0u64..2_000,
        errors in 0u64..2_000,
        counts in proptest::collection::vec(0u64..2_000, 0..8),
    ) {
        let mut cumulative = 0;
        let buckets: Vec<(f64, u64)> = counts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                cumulative += c;
                (0.01 * f64::powi(2.0, i as i32), cumulative)
            })
            .collect();
        let w = Window {
            requests,
            errors_5xx: errors.min(requests),
            latency_buckets: buckets.clone(),
            ..Window::default()
        };
        if let Some(p99) = w.p99_seconds() {
            let top = buckets.last().map_or(0.0, |b| b.0);
            prop_assert!((0.0..=top).contains(&p99), "{} outside 0..={}", p99, top);
        }
        let verdict = analyse(&AnalysisSettings::default(), &w, &w);
        if let Verdict::Fail { measure, .. } = verdict {
            prop_assert!(matches!(measure, Measure::ErrorRatio | Measure::LatencyP99));
            prop_assert!(w.error_ratio() > 0.01 || w.p99_seconds().unwrap_or(0.0) > 1.024);
        }
    }
}
