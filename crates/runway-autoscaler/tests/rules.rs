//! One table or test per rule of the contract, with Knative's own figures.

#![allow(clippy::unwrap_used, reason = "tests")]

use runway_autoscaler::{
    Decision, History, PanicChange, Reason, Sample, Settings, SettingsError, State, decide,
    decide_demand,
};

/// A history sampled every second from `from_ms` to `to_ms` (inclusive), `load(t)` each time.
fn sampled(from_ms: u64, to_ms: u64, load: impl Fn(u64) -> f64) -> History {
    let mut history = History::new(60_000);
    let mut t = from_ms;
    while t <= to_ms {
        history.push(Sample::new(t, load(t))).unwrap();
        t += 1_000;
    }
    history
}

/// A minute of steady `load`, decided at its end (t = 100 s).
fn steady(load: f64) -> History {
    sampled(40_000, 100_000, |_| load)
}

fn run(settings: &Settings, history: &History, ready: u32, current: u32) -> Decision {
    decide(
        settings,
        history,
        &State::default(),
        ready,
        current,
        100_000,
    )
}

#[test]
fn target_is_concurrency_times_utilisation() {
    let cases = [
        // (container_concurrency, utilisation, target)
        (0, 0.7, 70.0),
        (100, 0.7, 70.0),
        (10, 0.7, 7.0),
        (1, 0.7, 0.7),
        (0, 0.5, 50.0),
        (80, 1.0, 80.0),
    ];
    for (container_concurrency, utilisation, target) in cases {
        let settings = Settings {
            container_concurrency,
            utilisation,
            ..Settings::default()
        };
        assert!(
            (settings.target() - target).abs() < 1e-9,
            "{container_concurrency} × {utilisation}"
        );
    }
}

#[test]
fn desired_is_ceil_of_stable_average_over_target() {
    let settings = Settings::default();
    let cases = [
        // (steady load, ready, current, desired): no panic, within the rate bounds.
        (70.0, 1, 1, 1),
        (35.0, 1, 1, 1),
        (71.0, 2, 2, 2),
        (140.0, 2, 2, 2),
        (350.0, 5, 5, 5),
        (351.0, 5, 5, 6),
        (210.0, 3, 3, 3),
        (699.9, 8, 8, 10),
        (700.0, 10, 10, 10),
        (7_000.0, 100, 100, 100),
    ];
    for (load, ready, current, desired) in cases {
        let decision = run(&settings, &steady(load), ready, current);
        assert_eq!(decision.desired, desired, "load {load}, ready {ready}");
        assert!(!decision.event.panicking, "load {load}, ready {ready}");
        assert_eq!(decision.event.stable_desired, desired);
    }
}

#[test]
fn rates_bound_each_step() {
    let cases = [
        // (up rate, down rate, steady load, ready, desired, reason)
        // Knative: at most floor(ready / 2) down per step.
        (
            1_000.0,
            2.0,
            70.0,
            10,
            5,
            Some(Reason::ScaleDownRate { limit: 5 }),
        ),
        (
            1_000.0,
            2.0,
            0.0,
            9,
            4,
            Some(Reason::ScaleDownRate { limit: 4 }),
        ),
        (1_000.0, 2.0, 70.0, 3, 1, None),
        (
            1_000.0,
            4.0,
            70.0,
            10,
            2,
            Some(Reason::ScaleDownRate { limit: 2 }),
        ),
        // Up at most ceil(rate × ready); ready 0 counts as 1.
        (
            2.0,
            2.0,
            700.0,
            2,
            4,
            Some(Reason::ScaleUpRate { limit: 4 }),
        ),
        (
            1.5,
            2.0,
            700.0,
            3,
            5,
            Some(Reason::ScaleUpRate { limit: 5 }),
        ),
        (
            2.0,
            2.0,
            700.0,
            0,
            2,
            Some(Reason::ScaleUpRate { limit: 2 }),
        ),
    ];
    for (up, down, load, ready, desired, reason) in cases {
        let settings = Settings {
            max_scale_up_rate: up,
            max_scale_down_rate: down,
            ..Settings::default()
        };
        let decision = run(&settings, &steady(load), ready, ready);
        assert_eq!(decision.desired, desired, "up {up} down {down} load {load}");
        if let Some(reason) = reason {
            assert!(
                decision.event.reasons.contains(&reason),
                "{:?}",
                decision.event.reasons
            );
        }
    }
}

#[test]
fn panic_when_panic_window_demand_is_twice_ready() {
    // Knative's figures exactly: no noise margin.
    let settings = Settings {
        scale_down_margin: 0.0,
        ..Settings::default()
    };
    // 54 s idle, then the last 6 s at `burst`; 2 ready instances.
    let burst_history = |burst: f64| {
        sampled(
            40_000,
            100_000,
            move |t| if t > 94_000 { burst } else { 0.0 },
        )
    };
    let cases = [
        // (burst, panicking, desired)
        // 4 instances' worth ≥ 2 × 2 ready: panic, and the panic figure wins.
        (280.0, true, 4),
        (700.0, true, 10),
        // 3 instances' worth < 2 × 2: no panic; the stable average (a tenth) decides.
        (210.0, false, 1),
        (140.0, false, 1),
    ];
    for (burst, panicking, desired) in cases {
        let decision = run(&settings, &burst_history(burst), 2, 2);
        assert_eq!(decision.event.panicking, panicking, "burst {burst}");
        assert_eq!(decision.desired, desired, "burst {burst}");
        if panicking {
            assert_eq!(decision.event.panic, PanicChange::Entered);
            assert_eq!(decision.state.panicking_since_ms, Some(100_000));
            assert_eq!(decision.state.last_panic_ms, Some(100_000));
            assert_eq!(decision.state.max_panic_desired, desired);
        }
    }
}

#[test]
fn panic_never_scales_down_and_lasts_a_stable_window() {
    let settings = Settings::default();
    let state = State {
        panicking_since_ms: Some(90_000),
        last_panic_ms: Some(95_000),
        max_panic_desired: 8,
        last_nonzero_ms: Some(100_000),
        first_decision_ms: Some(0),
    };
    // Demand has fallen to one instance's worth; still within 60 s of the last trigger.
    let quiet = steady(70.0);
    for now in [100_000, 130_000, 155_000] {
        let decision = decide(&settings, &quiet, &state, 8, 8, now);
        assert_eq!(decision.desired, 8, "at {now}");
        assert_eq!(decision.event.panic, PanicChange::Continued);
        assert!(
            decision
                .event
                .reasons
                .contains(&Reason::PanicHold { desired: 8 })
        );
    }
    // The count before the decision holds too, even above the panic's maximum.
    let decision = decide(&settings, &quiet, &state, 8, 12, 100_000);
    assert_eq!(decision.desired, 12);
    assert_eq!(decision.state.max_panic_desired, 12);
    // Just past a stable window after the last trigger: panic ends, scale-down resumes.
    let decision = decide(&settings, &quiet, &state, 8, 8, 155_001);
    assert_eq!(decision.event.panic, PanicChange::Left);
    assert_eq!(decision.state.panicking_since_ms, None);
    assert_eq!(decision.state.max_panic_desired, 0);
    assert_eq!(decision.state.last_panic_ms, Some(95_000));
    assert_eq!(decision.desired, 4);
    // A new trigger extends the panic.
    let burst = sampled(94_000, 100_000, |_| 1_400.0);
    let decision = decide(&settings, &burst, &state, 8, 8, 100_000);
    assert_eq!(decision.event.panic, PanicChange::Continued);
    assert_eq!(decision.state.last_panic_ms, Some(100_000));
    assert_eq!(decision.state.panicking_since_ms, Some(90_000));
    assert_eq!(decision.desired, 20);
}

#[test]
fn entering_panic_keeps_the_current_count() {
    // Ten asked for, two ready so far; a burst of 4 instances' worth must not cut the ten.
    let burst = sampled(94_000, 100_000, |_| 280.0);
    let decision = run(&Settings::default(), &burst, 2, 10);
    assert!(decision.event.panicking);
    assert_eq!(decision.desired, 10);
}

#[test]
fn cold_start_asks_for_one_at_once() {
    let settings = Settings::default();
    let cases = [
        // (samples, desired): no ready instance, nothing asked for yet.
        (vec![(100_000, 1.0)], 1),
        (vec![(99_000, 0.0), (100_000, 1.0)], 1),
        (vec![(99_000, 0.0), (100_000, 0.5)], 1),
        // A burst held by the ingress: ten instances' worth, and a panic.
        (vec![(100_000, 700.0)], 10),
    ];
    for (samples, desired) in cases {
        let mut history = History::new(60_000);
        for (at, c) in &samples {
            history.push(Sample::new(*at, *c)).unwrap();
        }
        let decision = run(&settings, &history, 0, 0);
        assert_eq!(decision.desired, desired, "{samples:?}");
    }
    let mut history = History::new(60_000);
    history.push(Sample::new(100_000, 1.0)).unwrap();
    let decision = run(&settings, &history, 0, 0);
    assert!(decision.event.reasons.contains(&Reason::ColdStart));
}

#[test]
fn scale_to_zero_after_a_stable_window_and_the_grace() {
    let settings = Settings::default();
    // Traffic until 10 s, nothing after.
    let history = |now: u64| sampled(0, now, |t| if t <= 10_000 { 5.0 } else { 0.0 });
    let state = State {
        first_decision_ms: Some(0),
        last_nonzero_ms: Some(10_000),
        ..State::default()
    };
    let cases = [
        // (now, desired, reason)
        (30_000, 1, None),
        (
            70_000,
            1,
            Some(Reason::ScaleToZeroWait {
                remaining_ms: 30_000,
            }),
        ),
        (
            99_000,
            1,
            Some(Reason::ScaleToZeroWait {
                remaining_ms: 1_000,
            }),
        ),
        (100_000, 0, Some(Reason::ScaleToZero)),
        (200_000, 0, Some(Reason::ScaleToZero)),
    ];
    for (now, desired, reason) in cases {
        let decision = decide(&settings, &history(now), &state, 1, 1, now);
        assert_eq!(decision.desired, desired, "at {now}");
        if let Some(reason) = reason {
            assert!(
                decision.event.reasons.contains(&reason),
                "at {now}: {:?}",
                decision.event.reasons
            );
        }
    }
    // Never with a minimum.
    let min = Settings {
        min_instances: 1,
        ..Settings::default()
    };
    assert_eq!(
        decide(&min, &history(500_000), &state, 1, 1, 500_000).desired,
        1
    );
    // A revision that never had traffic counts from its first decision.
    let fresh = State {
        first_decision_ms: Some(50_000),
        ..State::default()
    };
    assert_eq!(
        decide(&settings, &history(139_000), &fresh, 1, 1, 139_000).desired,
        1
    );
    assert_eq!(
        decide(&settings, &history(140_000), &fresh, 1, 1, 140_000).desired,
        0
    );
    // Already at zero without demand: stays, even with a state that knows nothing.
    assert_eq!(
        decide(
            &settings,
            &History::new(60_000),
            &State::default(),
            0,
            0,
            5_000
        )
        .desired,
        0
    );
}

#[test]
fn bounds_win() {
    let cases = [
        // (min, max, steady load, ready, current, desired, reason)
        (
            0,
            Some(3),
            700.0,
            10,
            10,
            3,
            Reason::MaxInstances { max: 3 },
        ),
        (2, None, 0.0, 2, 2, 2, Reason::MinInstances { min: 2 }),
        (5, Some(5), 70.0, 1, 1, 5, Reason::MinInstances { min: 5 }),
        (
            0,
            None,
            1_000_000.0,
            1_000,
            1_000,
            1_000,
            Reason::MaxInstances { max: 1_000 },
        ),
    ];
    for (min, max, load, ready, current, desired, reason) in cases {
        let settings = Settings {
            min_instances: min,
            max_instances: max,
            ..Settings::default()
        };
        let decision = run(&settings, &steady(load), ready, current);
        assert_eq!(
            decision.desired, desired,
            "min {min} max {max:?} load {load}"
        );
        assert!(
            decision.event.reasons.contains(&reason),
            "{:?}",
            decision.event.reasons
        );
    }
    // Bounds beat panic: a lowered maximum cuts even while panicking.
    let settings = Settings {
        max_instances: Some(4),
        ..Settings::default()
    };
    let burst = sampled(94_000, 100_000, |_| 7_000.0);
    let decision = run(&settings, &burst, 4, 8);
    assert!(decision.event.panicking);
    assert_eq!(decision.desired, 4);
}

#[test]
fn noise_margin_slows_scale_down_only() {
    // Alternating 3.3 and 2.7 instances' worth each second: 3.0 on average, deviation 0.3.
    let noisy = sampled(40_000, 100_000, |t| {
        if (t / 1_000) % 2 == 0 { 231.0 } else { 189.0 }
    });
    let with = Settings::default();
    let without = Settings {
        scale_down_margin: 0.0,
        ..Settings::default()
    };
    // At 4, the margin keeps 4; without it, Knative's 3.
    let kept = run(&with, &noisy, 4, 4);
    assert_eq!(kept.desired, 4);
    assert!(
        kept.event
            .reasons
            .contains(&Reason::NoiseMargin { kept: 4 })
    );
    assert_eq!(run(&without, &noisy, 4, 4).desired, 3);
    // It never adds: from 2 both go up to 3.
    assert_eq!(run(&with, &noisy, 2, 2).desired, 3);
    assert_eq!(run(&without, &noisy, 2, 2).desired, 3);
    // Steady demand has no deviation: Knative's figure.
    assert_eq!(run(&with, &steady(210.0), 4, 4).desired, 3);
}

#[test]
fn event_records_inputs_and_replays() {
    let settings = Settings::default();
    let history = sampled(40_000, 100_000, |t| if t > 94_000 { 700.0 } else { 70.0 });
    let state = State {
        first_decision_ms: Some(1),
        ..State::default()
    };
    let decision = decide(&settings, &history, &state, 3, 3, 100_000);
    let event = &decision.event;
    assert_eq!(event.at_ms, 100_000);
    assert_eq!(event.ready_instances, 3);
    assert_eq!(event.current_desired, 3);
    assert_eq!(event.state_before, state);
    assert_eq!(event.settings, settings);
    assert_eq!(event.desired, decision.desired);
    let replay = decide_demand(
        &event.settings,
        &event.demand,
        &event.state_before,
        event.ready_instances,
        event.current_desired,
        event.at_ms,
    );
    assert_eq!(replay, decision);
    assert_eq!(
        event.summary(),
        "3 → 10: stable 133.0, panic 700.0 / target 70 (100 × 0.7), ready 3; panic began; noise margin keeps 3; panic demand 10"
    );
}

#[test]
fn summary_names_the_reasons() {
    let settings = Settings::default();
    let history = sampled(0, 70_000, |t| if t <= 10_000 { 5.0 } else { 0.0 });
    let state = State {
        first_decision_ms: Some(0),
        last_nonzero_ms: Some(10_000),
        ..State::default()
    };
    let decision = decide(&settings, &history, &state, 1, 1, 70_000);
    assert_eq!(
        decision.event.summary(),
        "1 → 1: stable 0.0, panic 0.0 / target 70 (100 × 0.7), ready 1; to zero in 30.0 s"
    );
}

#[test]
fn settings_defaults_are_knatives_and_check() {
    let settings = Settings::default();
    settings.check().unwrap();
    assert_eq!(settings.target(), 70.0);
    assert_eq!(settings.max(), 1_000);
    assert_eq!(from_map(vec![]).unwrap(), settings);
    assert_eq!(
        from_map(vec![("min_instances", 2)]).unwrap(),
        Settings {
            min_instances: 2,
            ..Settings::default()
        }
    );
    let unknown = from_map(vec![("min_instance", 2)]).unwrap_err().to_string();
    assert!(unknown.contains("min_instance"), "{unknown}");
}

/// Settings from a map of integer fields, through serde's own deserializers.
fn from_map(fields: Vec<(&'static str, u32)>) -> Result<Settings, serde::de::value::Error> {
    use serde::Deserialize as _;
    let map =
        serde::de::value::MapDeserializer::<_, serde::de::value::Error>::new(fields.into_iter());
    Settings::deserialize(map)
}

#[test]
fn settings_check_names_the_field() {
    let cases: Vec<(Settings, &str)> = vec![
        (
            Settings {
                min_instances: 1_001,
                ..Settings::default()
            },
            "min_instances",
        ),
        (
            Settings {
                max_instances: Some(0),
                ..Settings::default()
            },
            "max_instances",
        ),
        (
            Settings {
                max_instances: Some(1_001),
                ..Settings::default()
            },
            "max_instances",
        ),
        (
            Settings {
                container_concurrency: 1_001,
                ..Settings::default()
            },
            "container_concurrency",
        ),
        (
            Settings {
                utilisation: 0.0,
                ..Settings::default()
            },
            "utilisation",
        ),
        (
            Settings {
                utilisation: 1.5,
                ..Settings::default()
            },
            "utilisation",
        ),
        (
            Settings {
                utilisation: f64::NAN,
                ..Settings::default()
            },
            "utilisation",
        ),
        (
            Settings {
                stable_window_ms: 1_000,
                ..Settings::default()
            },
            "stable_window_ms",
        ),
        (
            Settings {
                panic_window_ms: 0,
                ..Settings::default()
            },
            "panic_window_ms",
        ),
        (
            Settings {
                panic_window_ms: 61_000,
                ..Settings::default()
            },
            "panic_window_ms",
        ),
        (
            Settings {
                panic_threshold: 1.0,
                ..Settings::default()
            },
            "panic_threshold",
        ),
        (
            Settings {
                max_scale_up_rate: 1.0,
                ..Settings::default()
            },
            "max_scale_up_rate",
        ),
        (
            Settings {
                max_scale_down_rate: f64::INFINITY,
                ..Settings::default()
            },
            "max_scale_down_rate",
        ),
        (
            Settings {
                scale_to_zero_grace_ms: 3_600_001,
                ..Settings::default()
            },
            "scale_to_zero_grace_ms",
        ),
        (
            Settings {
                scale_down_margin: -1.0,
                ..Settings::default()
            },
            "scale_down_margin",
        ),
    ];
    for (settings, name) in cases {
        match settings.check() {
            Err(error @ SettingsError::Field { field, .. }) => {
                assert_eq!(field, name);
                let message = error.to_string();
                assert!(
                    message.contains(name) && message.contains("expected"),
                    "{message}"
                );
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    let settings = Settings {
        min_instances: 3,
        max_instances: Some(2),
        ..Settings::default()
    };
    assert_eq!(
        settings.check(),
        Err(SettingsError::MinAboveMax { min: 3, max: 2 })
    );
}
