//! The decision against simulated demand, decision after decision: the bounds always hold, a
//! steady load converges, noise does not flap, panic never scales down, zero comes only after
//! a quiet stable window, and the same inputs give the same decision.

#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use runway_autoscaler::{Decision, History, Sample, Settings, State, decide, decide_demand};

/// A revision under simulation: the caller's side of the loop. Instances started by one
/// decision are ready by the next, unless the scenario says how many are ready.
#[derive(Debug)]
struct Loop {
    settings: Settings,
    history: History,
    state: State,
    ready: u32,
    desired: u32,
    now_ms: u64,
}

impl Loop {
    fn new(settings: Settings, current: u32) -> Self {
        Self {
            history: History::for_settings(&settings),
            settings,
            state: State::default(),
            ready: current,
            desired: current,
            now_ms: 0,
        }
    }

    /// Lets `step_ms` pass, samples `load`, decides; `ready` overrides the ready count.
    fn step(&mut self, step_ms: u64, load: f64, ready: Option<u32>) -> Decision {
        self.now_ms += step_ms;
        self.history.push(Sample::new(self.now_ms, load)).unwrap();
        if let Some(ready) = ready {
            self.ready = ready;
        }
        let decision = decide(
            &self.settings,
            &self.history,
            &self.state,
            self.ready,
            self.desired,
            self.now_ms,
        );
        self.state = decision.state.clone();
        self.desired = decision.desired;
        self.ready = decision.desired;
        decision
    }
}

fn settings() -> impl Strategy<Value = Settings> {
    (
        0u32..4,
        prop::option::of(1u32..40),
        prop_oneof![Just(0u32), 1u32..200],
        prop_oneof![Just(0.7), 0.1f64..=1.0],
        prop_oneof![Just(1.0), Just(0.0), 0.0f64..3.0],
    )
        .prop_map(|(min, max, concurrency, utilisation, margin)| Settings {
            min_instances: min,
            max_instances: max.map(|max| max.max(min)),
            container_concurrency: concurrency,
            utilisation,
            scale_down_margin: margin,
            ..Settings::default()
        })
}

/// `ceil(load / target)` within the bounds: where a steady load must settle.
fn expected(settings: &Settings, load: f64) -> u32 {
    let want = (load / settings.target()).ceil() as u32;
    want.min(settings.max()).max(settings.min_instances)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Never below min or above max; never a scale-down while panicking; deterministic, and
    /// replayable from the event. Demand, ready counts and sampling are arbitrary.
    #[test]
    fn bounds_panic_and_determinism_hold(
        settings in settings(),
        current in 0u32..50,
        steps in prop::collection::vec(
            (100u64..5_000, prop_oneof![Just(0.0), 0.0f64..5_000.0], prop::option::of(0u32..60)),
            1..150,
        ),
    ) {
        settings.check().unwrap();
        let mut run = Loop::new(settings.clone(), current);
        for (step_ms, load, ready) in steps {
            let before = run.desired;
            let state_before = run.state.clone();
            let decision = run.step(step_ms, load, ready);
            prop_assert!(decision.desired >= settings.min_instances, "{}", decision.event.summary());
            prop_assert!(decision.desired <= settings.max(), "{}", decision.event.summary());
            if decision.state.panicking() {
                prop_assert!(
                    decision.desired >= before.min(settings.max()),
                    "scaled down while panicking: {}", decision.event.summary()
                );
            }
            let again = decide(
                &settings, &run.history, &state_before, decision.event.ready_instances, before, run.now_ms,
            );
            prop_assert_eq!(&again, &decision);
            let e = &decision.event;
            let replay = decide_demand(
                &e.settings, &e.demand, &e.state_before, e.ready_instances, e.current_desired, e.at_ms,
            );
            prop_assert_eq!(&replay, &decision);
        }
    }

    /// A steady load settles on `ceil(load / target)` within the bounds in at most 100 s of
    /// 1 s decisions (a panic's stable window, or a stable window and the grace to zero), from
    /// any starting count, and stays there.
    #[test]
    fn steady_load_converges(
        settings in settings(),
        current in 0u32..60,
        instances_worth in prop_oneof![Just(0.0), 0.0f64..60.0],
    ) {
        let load = instances_worth * settings.target();
        let want = expected(&settings, load);
        let mut run = Loop::new(settings.clone(), current);
        for second in 1..=200 {
            let decision = run.step(1_000, load, None);
            if second >= 100 {
                prop_assert_eq!(decision.desired, want, "at {} s: {}", second, decision.event.summary());
            }
        }
    }

    /// Load of k instances' worth ± 10 % each second: once settled, the count stays within the
    /// noise band and changes at most once (no going back and forth).
    #[test]
    fn noise_does_not_flap(
        k in 1u32..=12,
        concurrency in prop_oneof![Just(0u32), 1u32..200],
        current in 0u32..20,
        jitter in prop::collection::vec(-0.1f64..=0.1, 400),
    ) {
        let settings = Settings { container_concurrency: concurrency, ..Settings::default() };
        let target = settings.target();
        let low = (f64::from(k) * 0.9).ceil() as u32;
        let high = (f64::from(k) * 1.1).ceil() as u32;
        let mut run = Loop::new(settings, current);
        let mut changes = 0;
        let mut previous = None;
        for (second, j) in jitter.iter().enumerate() {
            let decision = run.step(1_000, f64::from(k) * target * (1.0 + j), None);
            if second >= 130 {
                prop_assert!(
                    (low..=high).contains(&decision.desired),
                    "at {} s, outside {}..={}: {}", second, low, high, decision.event.summary()
                );
                if previous.is_some_and(|p| p != decision.desired) {
                    changes += 1;
                }
                previous = Some(decision.desired);
            }
        }
        prop_assert!(changes <= 1, "{} changes", changes);
    }

    /// Zero only when `min_instances` is 0, and only after a whole stable window and the grace
    /// without any demand; with uneven sampling and bursts.
    #[test]
    fn zero_only_after_a_quiet_stable_window(
        settings in settings(),
        current in 0u32..10,
        steps in prop::collection::vec(
            (100u64..3_000, prop_oneof![3 => Just(0.0), 1 => 0.0f64..500.0], 1usize..60),
            1..40,
        ),
    ) {
        let mut run = Loop::new(settings.clone(), current);
        let mut last_load_ms: Option<u64> = None;
        let mut first_ms = None;
        let quiet_needed = settings.stable_window_ms + settings.scale_to_zero_grace_ms;
        for (step_ms, load, repeat) in steps {
            for _ in 0..repeat {
                let before = run.desired;
                let decision = run.step(step_ms, load, None);
                let first_ms = *first_ms.get_or_insert(run.now_ms);
                if load > 0.0 {
                    last_load_ms = Some(run.now_ms);
                    prop_assert!(decision.desired >= 1, "{}", decision.event.summary());
                }
                if decision.desired == 0 && before > 0 {
                    prop_assert_eq!(settings.min_instances, 0);
                    // Counted from the first decision when there never was any demand.
                    let quiet_since = last_load_ms.unwrap_or(first_ms);
                    prop_assert!(
                        run.now_ms >= quiet_since + quiet_needed,
                        "to zero at {} ms, demand at {} ms: {}",
                        run.now_ms, quiet_since, decision.event.summary()
                    );
                }
            }
        }
    }

    /// Bursts of several times the ready capacity, with instances slow to become ready: panic
    /// happens, and while it lasts no decision asks for fewer instances than the one before.
    #[test]
    fn panic_never_scales_down(
        concurrency in prop_oneof![Just(0u32), 1u32..200],
        phases in prop::collection::vec((0.0f64..40.0, 1usize..30), 2..12),
        lag in 0u32..3,
    ) {
        let settings = Settings { container_concurrency: concurrency, ..Settings::default() };
        let target = settings.target();
        let mut run = Loop::new(settings.clone(), 1);
        let mut panicked = false;
        // Open with a burst of ten instances' worth on one ready instance.
        for (instances_worth, seconds) in std::iter::once((10.0, 5)).chain(phases) {
            for _ in 0..seconds {
                let before = run.desired;
                // Only part of what was asked for is ready yet.
                let ready = run.desired.saturating_sub(lag);
                let decision = run.step(1_000, instances_worth * target, Some(ready));
                if decision.state.panicking() {
                    panicked = true;
                    prop_assert!(
                        decision.desired >= before,
                        "{} → {} while panicking: {}", before, decision.desired, decision.event.summary()
                    );
                }
            }
        }
        prop_assert!(panicked, "the opening burst panics");
    }
}
