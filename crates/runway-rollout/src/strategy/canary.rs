//! `runway_canary`: traffic steps, each held for a pause and passed only by an analysis.
//!
//! How it goes: the crate's documentation, "The strategies".

use serde::{Deserialize, Serialize};

use super::{DEFAULT_PAUSE_MS, Kind, check_ladder, default_pause_ms, pause_ms_of};
use crate::analysis::AnalysisSettings;
use crate::error::StrategyError;

/// The default traffic steps of a canary.
pub const DEFAULT_CANARY_STEPS: [u32; 4] = [10, 25, 50, 100];

/// Traffic steps, each held for `pause_ms` and passed only by an analysis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Canary {
    /// Strictly increasing, within 1..=100, ending at 100. Default `[10, 25, 50, 100]`.
    #[serde(default = "default_canary_steps")]
    pub steps: Vec<u32>,
    /// How long each step is held: the length of one analysis window. Default one minute.
    #[serde(default = "default_pause_ms")]
    pub pause_ms: u64,
    #[serde(default)]
    pub analysis: AnalysisSettings,
}

fn default_canary_steps() -> Vec<u32> {
    DEFAULT_CANARY_STEPS.to_vec()
}

impl Default for Canary {
    /// The default steps, pause and analysis.
    fn default() -> Self {
        Self {
            steps: default_canary_steps(),
            pause_ms: DEFAULT_PAUSE_MS,
            analysis: AnalysisSettings::default(),
        }
    }
}

impl Canary {
    /// The manifest's `rollout.steps`, `rollout.pause_seconds` and `rollout.analysis`.
    pub(super) fn of(config: &runway_manifest::ServiceConfig) -> Self {
        let rollout = &config.rollout;
        let a = &rollout.analysis;
        Self {
            steps: rollout.steps.iter().map(|&p| u32::from(p)).collect(),
            pause_ms: pause_ms_of(config),
            analysis: AnalysisSettings {
                max_error_ratio: a.max_error_percent / 100.0,
                max_error_ratio_over_stable: a.max_error_percent_over_stable / 100.0,
                latency_slo_seconds: f64::from(a.latency_slo_ms) / 1000.0,
                max_p99_over_stable_ratio: a.max_p99_over_stable_ratio,
                max_readiness_failures: a.max_readiness_failures,
                max_restarts: a.max_restarts,
                min_requests: a.min_requests,
                max_inconclusive_windows: a.max_inconclusive_windows,
                min_p99_increase_seconds: f64::from(a.min_p99_increase_ms) / 1000.0,
            },
        }
    }
}

impl Kind for Canary {
    fn name(&self) -> &'static str {
        "runway_canary"
    }

    /// The steps as a ladder, a pause of at least 1 ms (each step's pause is its analysis
    /// window), and the analysis settings in range.
    fn check(&self) -> Result<(), StrategyError> {
        check_ladder("steps", &self.steps)?;
        if self.pause_ms == 0 {
            return Err(StrategyError::Invalid {
                field: "pause_ms",
                value: "0".to_owned(),
                expected: "at least 1 ms: each step's pause is its analysis window",
            });
        }
        self.analysis.check()
    }

    fn steps(&self) -> &[u32] {
        &self.steps
    }

    fn pause_ms(&self) -> u64 {
        self.pause_ms
    }

    fn in_steps(&self) -> bool {
        true
    }

    /// Each step's window, its pause, is judged with these settings.
    fn analysis(&self) -> Option<(&AnalysisSettings, u64)> {
        Some((&self.analysis, self.pause_ms))
    }
}
