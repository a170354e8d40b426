//! The strategies, their parameters and their checks.

use serde::{Deserialize, Serialize};

use crate::analysis::AnalysisSettings;
use crate::error::StrategyError;

/// Upstream's default rollout percentages.
pub const DEFAULT_PERCENTAGES: [u32; 4] = [5, 25, 75, 100];
/// The default traffic steps of a canary.
pub const DEFAULT_CANARY_STEPS: [u32; 4] = [10, 25, 50, 100];
/// The default pause between steps of a regional rollout or a canary: one minute.
pub const DEFAULT_PAUSE_MS: u64 = 60_000;
/// How long blue/green keeps the old revision warm after the switch by default: ten minutes.
pub const DEFAULT_KEEP_OLD_MS: u64 = 600_000;

/// How a new revision takes over from the stable one.
///
/// Serialised with a `strategy` tag. Upstream's four values keep upstream's names (`legacy`,
/// `expedited`, `regional_rollout`, `dryrun`); Runway's own are `runway_canary` and
/// `runway_blue_green`. The prefix is deliberate: upstream's `deployment.strategy` is a closed
/// enum that may grow, and a plain `canary` or `blue_green` there one day could mean something
/// else. With the prefix, no value upstream adds can collide with ours, and a manifest that
/// names one of ours is plainly Runway's (so it belongs under `spec.workload`, where Runway's
/// extensions live).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "strategy", deny_unknown_fields)]
pub enum Strategy {
    /// The rolling deploy: the new revision takes all the traffic once it is fully ready.
    #[serde(rename = "legacy")]
    Legacy,
    /// Straight to 100 % once ready.
    #[serde(rename = "expedited")]
    Expedited,
    /// The percentages in order, each held for `pause_ms`.
    #[serde(rename = "regional_rollout")]
    RegionalRollout {
        /// Strictly increasing, within 1..=100, ending at 100. Default `[5, 25, 75, 100]`.
        #[serde(default = "default_percentages")]
        percentages: Vec<u32>,
        /// How long each percentage is held before the next. Default one minute. (Upstream
        /// names no pause; this is Runway's.)
        #[serde(default = "default_pause_ms")]
        pause_ms: u64,
    },
    /// Compute the plan, change nothing.
    #[serde(rename = "dryrun")]
    DryRun,
    /// Traffic steps, each held for `pause_ms` and passed only by an analysis.
    #[serde(rename = "runway_canary")]
    Canary {
        /// Strictly increasing, within 1..=100, ending at 100. Default `[10, 25, 50, 100]`.
        #[serde(default = "default_canary_steps")]
        steps: Vec<u32>,
        /// How long each step is held: the length of one analysis window. Default one minute.
        #[serde(default = "default_pause_ms")]
        pause_ms: u64,
        #[serde(default)]
        analysis: AnalysisSettings,
    },
    /// The new revision at full capacity with no traffic, then all the traffic at once.
    #[serde(rename = "runway_blue_green")]
    BlueGreen {
        /// Switch this long after the new revision is ready; `None` waits for a promote.
        #[serde(default)]
        auto_switch_after_ms: Option<u64>,
        /// How long the old revision stays warm after the switch, for an instant rollback.
        /// Default ten minutes.
        #[serde(default = "default_keep_old_ms")]
        keep_old_ms: u64,
    },
}

impl Default for Strategy {
    /// `legacy`, upstream's default.
    fn default() -> Self {
        Self::Legacy
    }
}

fn default_percentages() -> Vec<u32> {
    DEFAULT_PERCENTAGES.to_vec()
}

fn default_canary_steps() -> Vec<u32> {
    DEFAULT_CANARY_STEPS.to_vec()
}

fn default_pause_ms() -> u64 {
    DEFAULT_PAUSE_MS
}

fn default_keep_old_ms() -> u64 {
    DEFAULT_KEEP_OLD_MS
}

impl Strategy {
    /// The regional rollout with upstream's default percentages and Runway's default pause.
    pub fn regional_rollout() -> Self {
        Self::RegionalRollout {
            percentages: default_percentages(),
            pause_ms: DEFAULT_PAUSE_MS,
        }
    }

    /// A canary with the default steps, pause and analysis.
    pub fn canary() -> Self {
        Self::Canary {
            steps: default_canary_steps(),
            pause_ms: DEFAULT_PAUSE_MS,
            analysis: AnalysisSettings::default(),
        }
    }

    /// The value as written in a manifest (`legacy`, `runway_canary`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Legacy => "legacy",
            Self::Expedited => "expedited",
            Self::RegionalRollout { .. } => "regional_rollout",
            Self::DryRun => "dryrun",
            Self::Canary { .. } => "runway_canary",
            Self::BlueGreen { .. } => "runway_blue_green",
        }
    }

    /// Whether the strategy is usable as written: percentages and steps strictly increasing,
    /// within 1..=100 and ending at 100; a canary's pause at least 1 ms; analysis settings in
    /// range. The first problem found is returned, naming the field and what is expected.
    pub fn check(&self) -> Result<(), StrategyError> {
        match self {
            Self::Legacy | Self::Expedited | Self::DryRun | Self::BlueGreen { .. } => Ok(()),
            Self::RegionalRollout { percentages, .. } => check_ladder("percentages", percentages),
            Self::Canary {
                steps,
                pause_ms,
                analysis,
            } => {
                check_ladder("steps", steps)?;
                if *pause_ms == 0 {
                    return Err(StrategyError::Invalid {
                        field: "pause_ms",
                        value: "0".to_owned(),
                        expected: "at least 1 ms: each step's pause is its analysis window",
                    });
                }
                analysis.check()
            }
        }
    }

    /// The new revision's weight at each step, made safe whatever the strategy holds:
    /// values clamped to 1..=100, only strictly increasing ones kept, ending at 100. Blue/green
    /// and the one-step strategies give `[100]`; a dry run gives nothing.
    pub fn ladder(&self) -> Vec<u32> {
        let raw: &[u32] = match self {
            Self::DryRun => return Vec::new(),
            Self::Legacy | Self::Expedited | Self::BlueGreen { .. } => &[100],
            Self::RegionalRollout { percentages, .. } => percentages,
            Self::Canary { steps, .. } => steps,
        };
        let mut ladder: Vec<u32> = Vec::with_capacity(raw.len() + 1);
        for &value in raw {
            let value = value.clamp(1, 100);
            if ladder.last().is_none_or(|&last| value > last) {
                ladder.push(value);
            }
            if value == 100 {
                break;
            }
        }
        if ladder.last() != Some(&100) {
            ladder.push(100);
        }
        ladder
    }

    /// How long each step of the ladder is held (0 for the one-step strategies).
    pub fn pause_ms(&self) -> u64 {
        match self {
            Self::RegionalRollout { pause_ms, .. } | Self::Canary { pause_ms, .. } => *pause_ms,
            _ => 0,
        }
    }
}

fn check_ladder(field: &'static str, values: &[u32]) -> Result<(), StrategyError> {
    let Some(&last) = values.last() else {
        return Err(StrategyError::Empty { field });
    };
    for (index, &value) in values.iter().enumerate() {
        if !(1..=100).contains(&value) {
            return Err(StrategyError::OutOfRange {
                field,
                index,
                value,
            });
        }
        if let Some(&previous) = index.checked_sub(1).and_then(|i| values.get(i))
            && value <= previous
        {
            return Err(StrategyError::NotIncreasing {
                field,
                index,
                value,
                previous,
            });
        }
    }
    if last != 100 {
        return Err(StrategyError::NotEndingAt100 { field, last });
    }
    Ok(())
}
