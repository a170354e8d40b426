//! `regional_rollout`: the percentages in order, each held for a pause.
//!
//! How it goes: the crate's documentation, "The strategies".

use serde::{Deserialize, Serialize};

use super::{DEFAULT_PAUSE_MS, Kind, check_ladder, default_pause_ms, pause_ms_of};
use crate::error::StrategyError;

/// Upstream's default rollout percentages.
pub const DEFAULT_PERCENTAGES: [u32; 4] = [5, 25, 75, 100];

/// The percentages in order, each held for `pause_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionalRollout {
    /// Strictly increasing, within 1..=100, ending at 100. Default `[5, 25, 75, 100]`.
    #[serde(default = "default_percentages")]
    pub percentages: Vec<u32>,
    /// How long each percentage is held before the next. Default one minute. (Upstream
    /// names no pause; this is Runway's.)
    #[serde(default = "default_pause_ms")]
    pub pause_ms: u64,
}

fn default_percentages() -> Vec<u32> {
    DEFAULT_PERCENTAGES.to_vec()
}

impl Default for RegionalRollout {
    /// Upstream's default percentages and Runway's default pause.
    fn default() -> Self {
        Self {
            percentages: default_percentages(),
            pause_ms: DEFAULT_PAUSE_MS,
        }
    }
}

impl RegionalRollout {
    /// The manifest's `deployment.rollout_traffic_percentages` and `rollout.pause_seconds`.
    pub(super) fn of(config: &runway_manifest::ServiceConfig) -> Self {
        Self {
            percentages: config
                .rollout_percentages
                .iter()
                .map(|&p| u32::from(p))
                .collect(),
            pause_ms: pause_ms_of(config),
        }
    }
}

impl Kind for RegionalRollout {
    fn name(&self) -> &'static str {
        "regional_rollout"
    }

    fn check(&self) -> Result<(), StrategyError> {
        check_ladder("percentages", &self.percentages)
    }

    fn steps(&self) -> &[u32] {
        &self.percentages
    }

    fn pause_ms(&self) -> u64 {
        self.pause_ms
    }

    fn in_steps(&self) -> bool {
        true
    }
}
