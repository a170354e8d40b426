//! The canary analysis: one window of the new revision against the same window of the stable
//! one.

use serde::{Deserialize, Serialize};

use crate::error::StrategyError;
use crate::window::Window;

/// The limits a canary's window is held to. Every field has a default, so `{}` is a
/// complete setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AnalysisSettings {
    /// The highest 5xx ratio allowed, 0 to 1. Default 0.01 (1 %). Not applied when the stable
    /// revision is over it too: see the crate's analysis rules.
    pub max_error_ratio: f64,
    /// How far, in absolute terms, the canary's 5xx ratio may exceed the stable revision's.
    /// Default 0.005 (half a percentage point).
    pub max_error_ratio_over_stable: f64,
    /// The highest p99 latency allowed, in seconds. Default 1.024, upstream's apdex
    /// "satisfied" threshold. Not applied when the stable revision is over it too.
    pub latency_slo_seconds: f64,
    /// How many times the stable revision's p99 the canary's may be. Default 1.5. Applied
    /// only to windows of at least 100 requests on each side.
    pub max_p99_over_stable_ratio: f64,
    /// The least p99 increase over the stable revision that fails a window, in seconds,
    /// whatever the ratio: fast services' p99s of a few milliseconds differ by more than
    /// half from one window to the next (a new process's cold caches, the histogram's
    /// doubling buckets), and such a difference is noise, not a regression. Default 0.025.
    pub min_p99_increase_seconds: f64,
    /// Readiness probe failures allowed in the canary's window. Default 0.
    pub max_readiness_failures: u32,
    /// Instance restarts allowed in the canary's window. Default 0.
    pub max_restarts: u32,
    /// Fewer canary requests than this in a window make it inconclusive, which holds the step
    /// rather than passing it. Also the least a stable window needs to be compared with.
    /// Default 50.
    pub min_requests: u64,
    /// How many windows (each the strategy's pause) a step may stay inconclusive before the
    /// rollout is rolled back. Default 3.
    pub max_inconclusive_windows: u32,
}

impl Default for AnalysisSettings {
    fn default() -> Self {
        Self {
            max_error_ratio: 0.01,
            max_error_ratio_over_stable: 0.005,
            latency_slo_seconds: 1.024,
            max_p99_over_stable_ratio: 1.5,
            min_p99_increase_seconds: 0.025,
            max_readiness_failures: 0,
            max_restarts: 0,
            min_requests: 50,
            max_inconclusive_windows: 3,
        }
    }
}

impl AnalysisSettings {
    /// Ratios within 0..=1, the SLO above 0, the p99 ratio at least 1, at least one window.
    pub fn check(&self) -> Result<(), StrategyError> {
        let ratio = |field, value: f64| {
            if value.is_finite() && (0.0..=1.0).contains(&value) {
                Ok(())
            } else {
                Err(StrategyError::Invalid {
                    field,
                    value: value.to_string(),
                    expected: "a ratio from 0 to 1 (0.01 is 1 %)",
                })
            }
        };
        ratio("analysis.max_error_ratio", self.max_error_ratio)?;
        ratio(
            "analysis.max_error_ratio_over_stable",
            self.max_error_ratio_over_stable,
        )?;
        if !(self.latency_slo_seconds.is_finite() && self.latency_slo_seconds > 0.0) {
            return Err(StrategyError::Invalid {
                field: "analysis.latency_slo_seconds",
                value: self.latency_slo_seconds.to_string(),
                expected: "a number of seconds above 0, e.g. 1.024",
            });
        }
        if !(self.max_p99_over_stable_ratio.is_finite() && self.max_p99_over_stable_ratio >= 1.0) {
            return Err(StrategyError::Invalid {
                field: "analysis.max_p99_over_stable_ratio",
                value: self.max_p99_over_stable_ratio.to_string(),
                expected: "a factor of at least 1, e.g. 1.5",
            });
        }
        if !(self.min_p99_increase_seconds.is_finite() && self.min_p99_increase_seconds >= 0.0) {
            return Err(StrategyError::Invalid {
                field: "analysis.min_p99_increase_seconds",
                value: self.min_p99_increase_seconds.to_string(),
                expected: "a number of seconds from 0, e.g. 0.025",
            });
        }
        if self.max_inconclusive_windows == 0 {
            return Err(StrategyError::Invalid {
                field: "analysis.max_inconclusive_windows",
                value: "0".to_owned(),
                expected: "at least 1",
            });
        }
        Ok(())
    }
}

/// The measure an analysis failed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// The share of 5xx responses, as a ratio.
    ErrorRatio,
    /// The 99th percentile of latency, in seconds.
    LatencyP99,
    /// Readiness probe failures, a count.
    ReadinessFailures,
    /// Instance restarts, a count.
    Restarts,
}

/// The least requests in each window for the canary's p99 to be compared with the stable
/// revision's: of fewer, the 99th percentile is the slowest single request.
pub const P99_SAMPLES: u64 = 100;

/// The outcome of one window's analysis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Verdict {
    /// Every measure within its limit.
    Pass,
    /// Not enough to judge (too few requests, no latency histogram); the step holds.
    Inconclusive { reason: String },
    /// A measure over its limit. Values are in the measure's unit (a ratio, seconds, a
    /// count); `stable_value` is `None` when the stable revision had too little traffic to
    /// measure. `message` is for the user.
    Fail {
        measure: Measure,
        canary_value: f64,
        stable_value: Option<f64>,
        limit: f64,
        message: String,
    },
}

impl Verdict {
    pub fn is_fail(&self) -> bool {
        matches!(self, Self::Fail { .. })
    }

    /// This verdict over a window not yet whole (its step's pause not over): a latency
    /// failure waits for the whole window, since the p99 of its first moments is a handful of
    /// requests', one of which waited on a busy machine; every other failure stands at once.
    pub fn mid_window(self) -> Self {
        match self {
            Self::Fail {
                measure: Measure::LatencyP99,
                message,
                ..
            } => Self::Inconclusive {
                reason: format!("so far {message}; latency is judged over the whole window"),
            },
            other => other,
        }
    }
}

/// How one measure of a canary's window stands against its limit, as [`analyse`] judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// Within its limit (for the requests, enough of them to judge).
    Within,
    /// Over its limit: the window fails on it (the first such measure, in the analysis's
    /// order, is the verdict's).
    Over,
    /// Too few requests to the new revision to judge this measure.
    TooFew,
    /// No figure to judge: no latency histogram for the new revision.
    Unmeasured,
}

/// One measure of a canary's window against its limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub standing: Standing,
    /// The new revision's value, in the measure's unit (a count, a ratio, seconds); `None`
    /// when there is none (no latency histogram).
    pub canary_value: Option<f64>,
    /// The stable revision's, when it is compared with (it served at least `min_requests`).
    pub stable_value: Option<f64>,
    /// The limit in force: the lowest of those that apply to the window as it is (the
    /// absolute one, the one relative to the stable revision); for the requests, the least
    /// needed. `None` when none applies (the stable revision over the SLO with too few
    /// requests to compare p99s) or the measure is not judged (too few requests).
    pub limit: Option<f64>,
    /// The verdict this measure gives on its own: a failure over its limit, the reason it is
    /// inconclusive, or none.
    verdict: Option<Verdict>,
}

impl Check {
    fn within(canary_value: Option<f64>, stable_value: Option<f64>, limit: Option<f64>) -> Self {
        Self {
            standing: Standing::Within,
            canary_value,
            stable_value,
            limit,
            verdict: None,
        }
    }

    /// Over its limit, failing the window with `failed` (whose figures it shows).
    fn over(limit_in_force: f64, failed: Verdict) -> Self {
        let (canary_value, stable_value) = match &failed {
            Verdict::Fail {
                canary_value,
                stable_value,
                ..
            } => (Some(*canary_value), *stable_value),
            _ => (None, None),
        };
        Self {
            standing: Standing::Over,
            canary_value,
            stable_value,
            limit: Some(limit_in_force),
            verdict: Some(failed),
        }
    }

    fn not_judged(standing: Standing, canary_value: Option<f64>, reason: Option<String>) -> Self {
        Self {
            standing,
            canary_value,
            stable_value: None,
            limit: None,
            verdict: reason.map(|reason| Verdict::Inconclusive { reason }),
        }
    }

    /// What the verdict says of this measure: why it failed or is inconclusive.
    pub fn reason(&self) -> Option<&str> {
        match &self.verdict {
            Some(Verdict::Fail { message, .. }) => Some(message),
            Some(Verdict::Inconclusive { reason }) => Some(reason),
            _ => None,
        }
    }
}

/// Every measure of a canary's window against its limit: what [`analyse`] decides from, so
/// that what is shown of a window cannot disagree with its verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Checks {
    pub readiness_failures: Check,
    pub restarts: Check,
    /// The new revision's requests against `min_requests`.
    pub requests: Check,
    pub error_ratio: Check,
    pub latency_p99: Check,
}

impl Checks {
    /// The window's verdict: the first measure, in the analysis's order, over its limit or
    /// not judged gives it; none, a pass.
    pub fn verdict(&self) -> Verdict {
        [
            &self.readiness_failures,
            &self.restarts,
            &self.requests,
            &self.error_ratio,
            &self.latency_p99,
        ]
        .into_iter()
        .find_map(|check| check.verdict.clone())
        .unwrap_or(Verdict::Pass)
    }
}

/// Compares the canary's window with the stable revision's over the same time, by the rules
/// in the crate's documentation, in this order: readiness failures, restarts, enough
/// requests, error ratio, p99 latency. The first measure over its limit fails the window.
pub fn analyse(settings: &AnalysisSettings, canary: &Window, stable: &Window) -> Verdict {
    checks(settings, canary, stable).verdict()
}

/// Each measure of the canary's window against its limit, by the rules [`analyse`] applies
/// (it is [`Checks::verdict`] of this). Fewer requests than `min_requests` leave the error
/// ratio and the latency not judged ([`Standing::TooFew`]).
pub fn checks(settings: &AnalysisSettings, canary: &Window, stable: &Window) -> Checks {
    let stable_measured = stable.requests >= settings.min_requests.max(1);
    let count = |measure, what, canary: u32, stable: u32, limit: u32| {
        if canary > limit {
            Check::over(
                f64::from(limit),
                count_fail(measure, what, canary, stable, limit),
            )
        } else {
            Check::within(
                Some(f64::from(canary)),
                Some(f64::from(stable)),
                Some(f64::from(limit)),
            )
        }
    };
    let readiness_failures = count(
        Measure::ReadinessFailures,
        "readiness failures",
        canary.readiness_failures,
        stable.readiness_failures,
        settings.max_readiness_failures,
    );
    let restarts = count(
        Measure::Restarts,
        "restarts",
        canary.restarts,
        stable.restarts,
        settings.max_restarts,
    );
    let requests_value = Some(canary.requests as f64);
    let min_requests = Some(settings.min_requests as f64);
    if canary.requests < settings.min_requests || canary.requests == 0 {
        let reason = format!(
            "{} requests to the new revision, fewer than the {} needed to judge it",
            canary.requests, settings.min_requests
        );
        let mut requests = Check::not_judged(Standing::TooFew, requests_value, Some(reason));
        requests.limit = min_requests;
        return Checks {
            readiness_failures,
            restarts,
            requests,
            error_ratio: Check::not_judged(Standing::TooFew, Some(canary.error_ratio()), None),
            latency_p99: Check::not_judged(Standing::TooFew, canary.p99_seconds(), None),
        };
    }
    Checks {
        readiness_failures,
        restarts,
        requests: Check::within(requests_value, Some(stable.requests as f64), min_requests),
        error_ratio: error_check(settings, canary, stable, stable_measured),
        latency_p99: latency_check(settings, canary, stable, stable_measured),
    }
}

/// The 5xx ratio against the absolute limit (unless the stable revision is over it too) and
/// the stable revision's plus the margin (when it is measured); the absolute one first.
fn error_check(
    settings: &AnalysisSettings,
    canary: &Window,
    stable: &Window,
    stable_measured: bool,
) -> Check {
    let canary_ratio = canary.error_ratio();
    let stable_ratio = stable_measured.then(|| stable.error_ratio());
    let stable_text = match stable_ratio {
        Some(ratio) => percent(ratio),
        None => "too few requests".to_owned(),
    };
    let absolute_applies = stable_ratio.is_none_or(|s| s <= settings.max_error_ratio);
    let absolute = absolute_applies.then_some(settings.max_error_ratio);
    let relative = stable_ratio.map(|s| s + settings.max_error_ratio_over_stable);
    let in_force = lowest(absolute, relative);
    if let Some(limit) = absolute.filter(|&limit| canary_ratio > limit) {
        return Check::over(
            in_force.unwrap_or(limit),
            Verdict::Fail {
                measure: Measure::ErrorRatio,
                canary_value: canary_ratio,
                stable_value: stable_ratio,
                limit,
                message: format!(
                    "error ratio {} ({} of {}) over the limit {} (stable: {stable_text})",
                    percent(canary_ratio),
                    canary.errors_5xx,
                    canary.requests,
                    percent(limit),
                ),
            },
        );
    }
    if let (Some(stable_ratio), Some(limit)) = (stable_ratio, relative)
        && canary_ratio > limit
    {
        return Check::over(
            in_force.unwrap_or(limit),
            Verdict::Fail {
                measure: Measure::ErrorRatio,
                canary_value: canary_ratio,
                stable_value: Some(stable_ratio),
                limit,
                message: format!(
                    "error ratio {} ({} of {}) over the limit {} (stable: {stable_text}, plus {} points allowed)",
                    percent(canary_ratio),
                    canary.errors_5xx,
                    canary.requests,
                    percent(limit),
                    points(settings.max_error_ratio_over_stable),
                ),
            },
        );
    }
    Check::within(Some(canary_ratio), stable_ratio, in_force)
}

/// The p99 latency against the SLO (unless the stable revision is over it too) and the
/// stable revision's times the ratio, by at least the least increase (when both windows
/// have [`P99_SAMPLES`] requests); the SLO first.
fn latency_check(
    settings: &AnalysisSettings,
    canary: &Window,
    stable: &Window,
    stable_measured: bool,
) -> Check {
    let Some(canary_p99) = canary.p99_seconds() else {
        return Check::not_judged(
            Standing::Unmeasured,
            None,
            Some("no latency histogram for the new revision".to_owned()),
        );
    };
    let stable_p99 = if stable_measured {
        stable.p99_seconds()
    } else {
        None
    };
    let stable_text = match stable_p99 {
        Some(p99) => seconds(p99),
        None => "not measured".to_owned(),
    };
    let slo = settings.latency_slo_seconds;
    let absolute = stable_p99.is_none_or(|s| s <= slo).then_some(slo);
    // A p99 of fewer than a hundred requests is the slowest one of them: one request that
    // waited on a busy machine would fail a window. The SLO above still applies.
    let comparable = canary.requests >= P99_SAMPLES && stable.requests >= P99_SAMPLES;
    let relative = stable_p99.filter(|_| comparable).map(|stable_p99| {
        (stable_p99 * settings.max_p99_over_stable_ratio)
            .max(stable_p99 + settings.min_p99_increase_seconds)
    });
    let in_force = lowest(absolute, relative);
    if let Some(limit) = absolute.filter(|&limit| canary_p99 > limit) {
        return Check::over(
            in_force.unwrap_or(limit),
            Verdict::Fail {
                measure: Measure::LatencyP99,
                canary_value: canary_p99,
                stable_value: stable_p99,
                limit,
                message: format!(
                    "p99 latency {} over the SLO {} (stable: {stable_text})",
                    seconds(canary_p99),
                    seconds(limit),
                ),
            },
        );
    }
    if let (Some(stable_p99), Some(limit)) = (stable_p99, relative)
        && canary_p99 > limit
    {
        return Check::over(
            in_force.unwrap_or(limit),
            Verdict::Fail {
                measure: Measure::LatencyP99,
                canary_value: canary_p99,
                stable_value: Some(stable_p99),
                limit,
                message: format!(
                    "p99 latency {} of {} requests over the limit {} ({}× stable's {stable_text} of {}, and at least {} more)",
                    seconds(canary_p99),
                    canary.requests,
                    seconds(limit),
                    settings.max_p99_over_stable_ratio,
                    stable.requests,
                    seconds(settings.min_p99_increase_seconds),
                ),
            },
        );
    }
    Check::within(Some(canary_p99), stable_p99, in_force)
}

/// The lower of two limits, either of which may not apply.
fn lowest(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn count_fail(measure: Measure, what: &str, canary: u32, stable: u32, limit: u32) -> Verdict {
    Verdict::Fail {
        measure,
        canary_value: f64::from(canary),
        stable_value: Some(f64::from(stable)),
        limit: f64::from(limit),
        message: format!("{what} {canary} over the limit {limit} (stable: {stable})"),
    }
}

/// A ratio as a percentage with one decimal: `5.2 %`.
pub(crate) fn percent(ratio: f64) -> String {
    format!("{:.1} %", ratio * 100.0)
}

/// A difference of ratios in percentage points: `0.5`.
fn points(ratio: f64) -> String {
    format!("{:.1}", ratio * 100.0)
}

/// Seconds as milliseconds a person reads: `1024 ms`, `2.5 ms`.
pub(crate) fn seconds(value: f64) -> String {
    let ms = value * 1000.0;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// `requests` requests, `errors` of them 5xx, each taking `latency` seconds (buckets of
    /// 1 ms doubling).
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

    /// Each measure's standing, its limit in force and the verdict agree with one another,
    /// and the verdict is `analyse`'s.
    #[test]
    fn checks_say_how_each_measure_stands_and_give_the_verdict() {
        let settings = AnalysisSettings::default();
        let stable = window(1000, 2, 0.010);

        // Too few requests: the requests hold the step; 5xx and p99 are not judged.
        let few = window(10, 5, 0.010);
        let c = checks(&settings, &few, &stable);
        assert_eq!(c.requests.standing, Standing::TooFew);
        assert_eq!(c.requests.limit, Some(50.0));
        assert_eq!(c.requests.canary_value, Some(10.0));
        assert_eq!(c.error_ratio.standing, Standing::TooFew);
        assert_eq!(c.error_ratio.limit, None);
        assert_eq!(c.error_ratio.canary_value, Some(0.5));
        assert_eq!(c.latency_p99.standing, Standing::TooFew);
        assert_eq!(c.restarts.standing, Standing::Within);
        assert_eq!(c.verdict(), analyse(&settings, &few, &stable));
        assert!(matches!(c.verdict(), Verdict::Inconclusive { .. }));
        assert_eq!(
            c.requests.reason(),
            Some("10 requests to the new revision, fewer than the 50 needed to judge it")
        );

        // Enough, within: the 5xx limit in force is the stable's 0.2 % plus 0.5 points, under
        // the absolute 1 %; the p99's the stable's 1.5 times, by 25 ms at least.
        let good = window(500, 1, 0.010);
        let c = checks(&settings, &good, &stable);
        assert_eq!(c.requests.standing, Standing::Within);
        assert_eq!(c.error_ratio.standing, Standing::Within);
        assert!((c.error_ratio.limit.unwrap() - 0.007).abs() < 1e-12);
        assert_eq!(c.error_ratio.stable_value, Some(0.002));
        assert_eq!(c.latency_p99.standing, Standing::Within);
        let stable_p99 = stable.p99_seconds().unwrap();
        assert_eq!(c.latency_p99.stable_value, Some(stable_p99));
        assert_eq!(c.latency_p99.limit, Some(stable_p99 + 0.025));
        assert_eq!(c.verdict(), Verdict::Pass);
        assert_eq!(analyse(&settings, &good, &stable), Verdict::Pass);

        // Over: 3 % 5xx is over both limits; the verdict names the absolute one, as it did,
        // and the check shows the lower (in force).
        let bad = window(500, 15, 0.010);
        let c = checks(&settings, &bad, &stable);
        assert_eq!(c.error_ratio.standing, Standing::Over);
        assert!((c.error_ratio.limit.unwrap() - 0.007).abs() < 1e-12);
        let verdict = c.verdict();
        assert_eq!(verdict, analyse(&settings, &bad, &stable));
        let Verdict::Fail { measure, limit, .. } = &verdict else {
            panic!("{verdict:?}");
        };
        assert_eq!((*measure, *limit), (Measure::ErrorRatio, 0.01));
        assert_eq!(
            c.error_ratio.reason(),
            Some("error ratio 3.0 % (15 of 500) over the limit 1.0 % (stable: 0.2 %)")
        );

        // A restart is over whatever the requests; it comes first.
        let restarted = Window {
            restarts: 1,
            ..few.clone()
        };
        let c = checks(&settings, &restarted, &stable);
        assert_eq!(c.restarts.standing, Standing::Over);
        assert_eq!(c.requests.standing, Standing::TooFew);
        assert!(matches!(
            c.verdict(),
            Verdict::Fail {
                measure: Measure::Restarts,
                ..
            }
        ));

        // No histogram: the p99 is not measured, and the window inconclusive.
        let blind = Window {
            latency_buckets: Vec::new(),
            ..good
        };
        let c = checks(&settings, &blind, &stable);
        assert_eq!(c.latency_p99.standing, Standing::Unmeasured);
        assert_eq!(c.verdict(), analyse(&settings, &blind, &stable));
        assert!(matches!(c.verdict(), Verdict::Inconclusive { .. }));
    }
}
