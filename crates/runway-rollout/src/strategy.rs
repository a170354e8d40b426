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

    /// The strategy a service's settings name, with their parameters (the manifest's
    /// `deployment.strategy` and `workload.rollout`).
    pub fn of(config: &runway_manifest::ServiceConfig) -> Self {
        use runway_manifest::Strategy as Manifest;
        let rollout = &config.rollout;
        let pause_ms = u64::from(rollout.pause_seconds.max(1)) * 1000;
        match config.strategy {
            Manifest::Legacy => Self::Legacy,
            Manifest::Expedited => Self::Expedited,
            Manifest::Dryrun => Self::DryRun,
            Manifest::RegionalRollout => Self::RegionalRollout {
                percentages: config
                    .rollout_percentages
                    .iter()
                    .map(|&p| u32::from(p))
                    .collect(),
                pause_ms,
            },
            Manifest::RunwayCanary => {
                let a = &rollout.analysis;
                Self::Canary {
                    steps: rollout.steps.iter().map(|&p| u32::from(p)).collect(),
                    pause_ms,
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
            Manifest::RunwayBlueGreen => Self::BlueGreen {
                auto_switch_after_ms: rollout
                    .auto_switch_after_seconds
                    .map(|s| u64::from(s) * 1000),
                keep_old_ms: u64::from(rollout.keep_old_seconds) * 1000,
            },
        }
    }

    /// Computes a plan and changes nothing.
    pub fn is_dry_run(&self) -> bool {
        matches!(self, Self::DryRun)
    }

    /// Moves traffic in steps an operator can steer (pause, resume, abort, promote), rather
    /// than all at once when the new revision is ready. A first deploy, with nothing serving
    /// to step from, is rolled out in one whatever the strategy.
    pub fn in_steps(&self) -> bool {
        matches!(
            self,
            Self::RegionalRollout { .. } | Self::Canary { .. } | Self::BlueGreen { .. }
        )
    }

    /// Each step is passed only by an analysis of the new revision beside the stable one:
    /// its settings, and the window it judges (the step's pause).
    pub fn analysis(&self) -> Option<(&AnalysisSettings, u64)> {
        match self {
            Self::Canary {
                analysis, pause_ms, ..
            } => Some((analysis, *pause_ms)),
            _ => None,
        }
    }

    /// The new revision starts at the stable one's full capacity, and is staged (reachable at
    /// its tag URL, with no traffic) until the switch.
    pub fn stages_at_full_capacity(&self) -> bool {
        matches!(self, Self::BlueGreen { .. })
    }

    /// How long the old revision stays warm after the switch, for an instant rollback; `None`
    /// when it is stopped once the new one has all the traffic.
    pub fn keeps_old_ms(&self) -> Option<u64> {
        match self {
            Self::BlueGreen { keep_old_ms, .. } => Some(*keep_old_ms),
            _ => None,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The strategy a manifest names (`deployment.strategy`), with `rollout`'s settings.
    fn of(strategy: &str, rollout: serde_json::Value) -> Strategy {
        let manifest = serde_json::json!({
            "apiVersion": "runway/v1",
            "kind": "RunwayService",
            "metadata": {"name": "s", "owner_email_handle": "t", "department": "d"},
            "spec": {
                "container_port": 8080,
                "regions": ["local"],
                "deployment": {"strategy": strategy},
                "workload": {"rollout": rollout},
            },
        });
        let manifest: runway_manifest::Manifest = serde_json::from_value(manifest).unwrap();
        Strategy::of(&runway_manifest::ServiceConfig::from_manifest(
            &manifest,
            None,
            &Default::default(),
        ))
    }

    #[test]
    fn what_the_executor_and_the_api_ask_of_each_strategy() {
        use serde_json::json;
        let legacy = of("legacy", json!({}));
        assert_eq!(legacy, Strategy::Legacy);
        let dry_run = of("dryrun", json!({}));
        let regional = of("regional_rollout", json!({}));
        let canary = of(
            "runway_canary",
            json!({"steps": [20, 100], "pause_seconds": 30}),
        );
        let blue_green = of("runway_blue_green", json!({"keep_old_seconds": 90}));
        // (dry run, in steps, analysis window, full capacity, old kept)
        let answers = |s: &Strategy| {
            (
                s.is_dry_run(),
                s.in_steps(),
                s.analysis().map(|(_, window)| window),
                s.stages_at_full_capacity(),
                s.keeps_old_ms(),
            )
        };
        assert_eq!(answers(&legacy), (false, false, None, false, None));
        assert_eq!(answers(&dry_run), (true, false, None, false, None));
        assert_eq!(answers(&regional), (false, true, None, false, None));
        assert_eq!(answers(&canary), (false, true, Some(30_000), false, None));
        assert_eq!(canary.ladder(), vec![20, 100]);
        assert_eq!(
            answers(&blue_green),
            (false, true, None, true, Some(90_000))
        );
        for (strategy, name) in [
            (&legacy, "legacy"),
            (&dry_run, "dryrun"),
            (&regional, "regional_rollout"),
            (&canary, "runway_canary"),
            (&blue_green, "runway_blue_green"),
        ] {
            assert_eq!(strategy.name(), name);
        }
    }
}
