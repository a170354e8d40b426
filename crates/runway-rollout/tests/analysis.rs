//! The canary analysis and the windows it reads, table-driven.

#![allow(clippy::unwrap_used, reason = "tests")]

use runway_rollout::{AnalysisSettings, Measure, Verdict, Window, analyse};

/// The ingress's buckets: 0.25 ms doubling, 20 of them.
fn bounds() -> Vec<f64> {
    (0..20).map(|k| 0.000_25 * f64::powi(2.0, k)).collect()
}

/// `requests` requests, `errors` of them 5xx, every one taking `latency` seconds.
fn window(requests: u64, errors: u64, latency: f64) -> Window {
    Window {
        requests,
        errors_5xx: errors,
        latency_buckets: bounds()
            .into_iter()
            .map(|b| (b, if latency <= b { requests } else { 0 }))
            .collect(),
        readiness_failures: 0,
        restarts: 0,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn histogram_quantiles_match_hand_computed_values() {
    let w = Window {
        requests: 100,
        latency_buckets: vec![(0.1, 50), (0.2, 90), (0.5, 100)],
        ..Window::default()
    };
    // (quantile, expected): rank q·100 interpolated in its bucket.
    let cases = [
        (0.5, 0.1),                      // rank 50: the whole first bucket
        (0.25, 0.05),                    // rank 25: halfway through [0, 0.1]
        (0.75, 0.1 + 0.1 * 25.0 / 40.0), // rank 75: 25 of 40 into (0.1, 0.2]
        (0.9, 0.2),                      // rank 90: the end of (0.1, 0.2]
        (0.99, 0.2 + 0.3 * 9.0 / 10.0),  // rank 99: 9 of 10 into (0.2, 0.5]
        (1.0, 0.5),                      // the top of the last bucket
    ];
    for (q, expected) in cases {
        let got = w.quantile_seconds(q).unwrap();
        assert!(close(got, expected), "q={q}: {got} != {expected}");
    }
    assert!(close(w.p99_seconds().unwrap(), 0.47));

    // Order does not matter; an explicit +Inf bucket is the total.
    let shuffled = Window {
        requests: 100,
        latency_buckets: vec![(0.5, 100), (f64::INFINITY, 100), (0.1, 50), (0.2, 90)],
        ..Window::default()
    };
    assert!(close(shuffled.p99_seconds().unwrap(), 0.47));

    // A rank in the +Inf bucket gives the highest finite bound, as Prometheus does.
    let slow_tail = Window {
        requests: 100,
        latency_buckets: vec![(0.1, 10), (1.0, 50), (f64::INFINITY, 100)],
        ..Window::default()
    };
    assert!(close(slow_tail.p99_seconds().unwrap(), 1.0));
    // Requests beyond the finite buckets, no +Inf bucket given: the same.
    let implicit = Window {
        latency_buckets: vec![(0.1, 10), (1.0, 50)],
        ..slow_tail
    };
    assert!(close(implicit.p99_seconds().unwrap(), 1.0));

    // Nothing to compute from.
    assert_eq!(Window::default().p99_seconds(), None);
    assert_eq!(
        Window {
            requests: 10,
            ..Window::default()
        }
        .p99_seconds(),
        None
    );
    assert_eq!(w.quantile_seconds(1.5), None);

    // The ingress's buckets, everything at 1.5 s: in (1.024, 2.048].
    let p99 = window(100, 0, 1.5).p99_seconds().unwrap();
    assert!(close(p99, 1.024 + 1.024 * 0.99), "{p99}");
}

#[test]
fn delta_of_counters_is_the_window_and_resets_count_from_zero() {
    let earlier = Window {
        requests: 100,
        errors_5xx: 2,
        latency_buckets: vec![(0.1, 80), (1.0, 100)],
        readiness_failures: 1,
        restarts: 3,
    };
    let later = Window {
        requests: 250,
        errors_5xx: 5,
        latency_buckets: vec![(0.1, 200), (1.0, 250), (2.0, 250)],
        readiness_failures: 1,
        restarts: 1,
    };
    assert_eq!(
        Window::delta(&later, &earlier),
        Window {
            requests: 150,
            errors_5xx: 3,
            latency_buckets: vec![(0.1, 120), (1.0, 150), (2.0, 250)],
            readiness_failures: 0,
            // The restart counter went down: reset, so its later value is the increase.
            restarts: 1,
        }
    );
    // The ingress restarted: its counters start again.
    let reset = Window {
        requests: 40,
        errors_5xx: 1,
        latency_buckets: vec![(0.1, 30), (1.0, 40)],
        readiness_failures: 2,
        restarts: 3,
    };
    let delta = Window::delta(&reset, &earlier);
    assert_eq!(delta.requests, 40);
    assert_eq!(delta.errors_5xx, 1);
    assert_eq!(delta.latency_buckets, reset.latency_buckets);
    assert_eq!(delta.readiness_failures, 1);
    assert_eq!(delta.restarts, 0);
}

#[test]
fn error_ratio() {
    assert!(close(window(500, 26, 0.01).error_ratio(), 0.052));
    assert!(close(Window::default().error_ratio(), 0.0));
}

/// What a case expects of the verdict.
#[derive(Debug)]
enum Expect {
    Pass,
    Inconclusive(&'static str),
    Fail(Measure, &'static str),
}

/// Mid-window, a latency failure waits for the whole window; any other failure stands.
#[test]
fn mid_window_latency_waits_for_the_whole_window() {
    let settings = AnalysisSettings::default();
    let slow = analyse(&settings, &window(500, 0, 0.2), &window(500, 0, 0.05));
    assert!(slow.is_fail());
    match slow.mid_window() {
        Verdict::Inconclusive { reason } => {
            assert!(reason.starts_with("so far p99 latency 255 ms"), "{reason}");
            assert!(
                reason.ends_with("latency is judged over the whole window"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    let failing = analyse(&settings, &window(500, 26, 0.05), &window(500, 0, 0.05));
    assert_eq!(failing.clone().mid_window(), failing);
    assert_eq!(Verdict::Pass.mid_window(), Verdict::Pass);
}

#[test]
fn verdicts() {
    let fast = 0.05;
    let with = |mut w: Window, readiness: u32, restarts: u32| {
        w.readiness_failures = readiness;
        w.restarts = restarts;
        w
    };
    let cases: Vec<(&str, Window, Window, Expect)> = vec![
        (
            "equal windows pass",
            window(500, 1, fast),
            window(500, 1, fast),
            Expect::Pass,
        ),
        (
            "5 % of 500s fails, saying so",
            window(500, 26, fast),
            window(500, 0, fast),
            Expect::Fail(
                Measure::ErrorRatio,
                "error ratio 5.2 % (26 of 500) over the limit 1.0 % (stable: 0.0 %)",
            ),
        ),
        (
            "under 1 % but more than half a point over stable fails",
            window(1000, 8, fast),
            window(1000, 2, fast),
            Expect::Fail(
                Measure::ErrorRatio,
                "error ratio 0.8 % (8 of 1000) over the limit 0.7 % (stable: 0.2 %, plus 0.5 points allowed)",
            ),
        ),
        (
            "over 1 % while stable is too: judged against stable only, and passes",
            window(1000, 32, fast),
            window(1000, 30, fast),
            Expect::Pass,
        ),
        (
            "stable with too few requests: the absolute limit alone",
            window(500, 26, fast),
            window(10, 0, fast),
            Expect::Fail(
                Measure::ErrorRatio,
                "error ratio 5.2 % (26 of 500) over the limit 1.0 % (stable: too few requests)",
            ),
        ),
        (
            "a slow p99 fails against the SLO",
            window(500, 0, 1.5),
            window(500, 0, fast),
            Expect::Fail(
                Measure::LatencyP99,
                "p99 latency 2038 ms over the SLO 1024 ms (stable: 64 ms)",
            ),
        ),
        (
            "within the SLO but over 1.5 × stable fails",
            window(500, 0, 0.2),
            window(500, 0, fast),
            Expect::Fail(
                Measure::LatencyP99,
                "p99 latency 255 ms of 500 requests over the limit 96 ms (1.5× stable's 64 ms of 500, and at least 25 ms more)",
            ),
        ),
        (
            "over 1.5 × a fast stable but by less than 25 ms passes: that is noise",
            window(500, 0, 0.003),
            window(500, 0, 0.0015),
            Expect::Pass,
        ),
        (
            "over 1.5 × a fast stable and by more than 25 ms fails",
            window(500, 0, 0.05),
            window(500, 0, 0.0015),
            Expect::Fail(
                Measure::LatencyP99,
                "p99 latency 64 ms of 500 requests over the limit 27 ms (1.5× stable's 2.0 ms of 500, and at least 25 ms more)",
            ),
        ),
        (
            "fewer than 100 requests on either side: the p99 is one request, held to the SLO alone",
            window(60, 0, 0.2),
            window(500, 0, fast),
            Expect::Pass,
        ),
        (
            "a stable window of fewer than 100 requests is not compared with either",
            window(500, 0, 0.2),
            window(80, 0, fast),
            Expect::Pass,
        ),
        (
            "slower than the SLO while stable is too: judged against stable only",
            window(500, 0, 1.5),
            window(500, 0, 1.5),
            Expect::Pass,
        ),
        (
            "too few requests is inconclusive",
            window(49, 0, fast),
            window(500, 0, fast),
            Expect::Inconclusive("49 requests to the new revision, fewer than the 50 needed"),
        ),
        (
            "too few requests but a restart still fails",
            with(window(3, 0, fast), 0, 1),
            window(500, 0, fast),
            Expect::Fail(Measure::Restarts, "restarts 1 over the limit 0 (stable: 0)"),
        ),
        (
            "a readiness failure fails",
            with(window(500, 0, fast), 2, 0),
            with(window(500, 0, fast), 1, 0),
            Expect::Fail(
                Measure::ReadinessFailures,
                "readiness failures 2 over the limit 0 (stable: 1)",
            ),
        ),
        (
            "no latency histogram is inconclusive",
            Window {
                requests: 500,
                ..Window::default()
            },
            window(500, 0, fast),
            Expect::Inconclusive("no latency histogram"),
        ),
    ];
    let settings = AnalysisSettings::default();
    for (name, canary, stable, expect) in cases {
        let verdict = analyse(&settings, &canary, &stable);
        match (&expect, &verdict) {
            (Expect::Pass, Verdict::Pass) => {}
            (Expect::Inconclusive(text), Verdict::Inconclusive { reason }) => {
                assert!(reason.contains(text), "{name}: {reason}");
            }
            (
                Expect::Fail(measure, text),
                Verdict::Fail {
                    measure: got,
                    message,
                    ..
                },
            ) => {
                assert_eq!(got, measure, "{name}");
                assert_eq!(message, text, "{name}");
            }
            _ => panic!("{name}: expected {expect:?}, got {verdict:?}"),
        }
    }
}

#[test]
fn a_fail_carries_its_numbers() {
    let verdict = analyse(
        &AnalysisSettings::default(),
        &window(500, 26, 0.01),
        &window(500, 0, 0.01),
    );
    let Verdict::Fail {
        canary_value,
        stable_value,
        limit,
        ..
    } = verdict
    else {
        panic!("{verdict:?}")
    };
    assert!(close(canary_value, 0.052));
    assert_eq!(stable_value, Some(0.0));
    assert!(close(limit, 0.01));
}

#[test]
fn settings_are_checked() {
    assert_eq!(AnalysisSettings::default().check(), Ok(()));
    let bad = AnalysisSettings {
        max_error_ratio: 5.0,
        ..AnalysisSettings::default()
    };
    assert_eq!(
        bad.check().unwrap_err().to_string(),
        "`analysis.max_error_ratio` is 5: expected a ratio from 0 to 1 (0.01 is 1 %)"
    );
    let bad = AnalysisSettings {
        max_p99_over_stable_ratio: 0.5,
        ..AnalysisSettings::default()
    };
    assert!(
        bad.check()
            .unwrap_err()
            .to_string()
            .starts_with("`analysis.max_p99_over_stable_ratio` is 0.5")
    );
}

#[test]
fn a_window_sums_itself_up_for_a_person() {
    assert_eq!(
        window(1000, 2, 0.003).summary(),
        "1000 requests, 0.2 % 5xx, p99 4.0 ms"
    );
    assert_eq!(
        Window::default().summary(),
        "0 requests, 0.0 % 5xx, p99 unknown"
    );
}
