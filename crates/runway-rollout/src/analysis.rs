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

/// Compares the canary's window with the stable revision's over the same time, by the rules
/// in the crate's documentation, in this order: readiness failures, restarts, enough
/// requests, error ratio, p99 latency. The first measure over its limit fails the window.
pub fn analyse(settings: &AnalysisSettings, canary: &Window, stable: &Window) -> Verdict {
    let stable_measured = stable.requests >= settings.min_requests.max(1);

    if canary.readiness_failures > settings.max_readiness_failures {
        return count_fail(
            Measure::ReadinessFailures,
            "readiness failures",
            canary.readiness_failures,
            stable.readiness_failures,
            settings.max_readiness_failures,
        );
    }
    if canary.restarts > settings.max_restarts {
        return count_fail(
            Measure::Restarts,
            "restarts",
            canary.restarts,
            stable.restarts,
            settings.max_restarts,
        );
    }
    if canary.requests < settings.min_requests || canary.requests == 0 {
        return Verdict::Inconclusive {
            reason: format!(
                "{} requests to the new revision, fewer than the {} needed to judge it",
                canary.requests, settings.min_requests
            ),
        };
    }

    let canary_ratio = canary.error_ratio();
    let stable_ratio = stable_measured.then(|| stable.error_ratio());
    let stable_text = match stable_ratio {
        Some(ratio) => percent(ratio),
        None => "too few requests".to_owned(),
    };
    let absolute_applies = stable_ratio.is_none_or(|s| s <= settings.max_error_ratio);
    if absolute_applies && canary_ratio > settings.max_error_ratio {
        return Verdict::Fail {
            measure: Measure::ErrorRatio,
            canary_value: canary_ratio,
            stable_value: stable_ratio,
            limit: settings.max_error_ratio,
            message: format!(
                "error ratio {} ({} of {}) over the limit {} (stable: {stable_text})",
                percent(canary_ratio),
                canary.errors_5xx,
                canary.requests,
                percent(settings.max_error_ratio),
            ),
        };
    }
    if let Some(stable_ratio) = stable_ratio {
        let limit = stable_ratio + settings.max_error_ratio_over_stable;
        if canary_ratio > limit {
            return Verdict::Fail {
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
            };
        }
    }

    let Some(canary_p99) = canary.p99_seconds() else {
        return Verdict::Inconclusive {
            reason: "no latency histogram for the new revision".to_owned(),
        };
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
    if stable_p99.is_none_or(|s| s <= slo) && canary_p99 > slo {
        return Verdict::Fail {
            measure: Measure::LatencyP99,
            canary_value: canary_p99,
            stable_value: stable_p99,
            limit: slo,
            message: format!(
                "p99 latency {} over the SLO {} (stable: {stable_text})",
                seconds(canary_p99),
                seconds(slo),
            ),
        };
    }
    // A p99 of fewer than a hundred requests is the slowest one of them: one request that
    // waited on a busy machine would fail a window. The SLO above still applies.
    let comparable = canary.requests >= P99_SAMPLES && stable.requests >= P99_SAMPLES;
    if let Some(stable_p99) = stable_p99.filter(|_| comparable) {
        let limit = (stable_p99 * settings.max_p99_over_stable_ratio)
            .max(stable_p99 + settings.min_p99_increase_seconds);
        if canary_p99 > limit {
            return Verdict::Fail {
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
            };
        }
    }
    Verdict::Pass
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
