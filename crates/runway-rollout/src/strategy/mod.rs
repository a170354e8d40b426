//! The strategies: one module each, a type that answers [`Kind`]; and [`Strategy`], the enum
//! that names them all, with their settings, and hands each question to its strategy.
//!
//! What the state machine ([`crate::next`]), the executor and the API need of a strategy is a
//! method of [`Kind`], with the answer most strategies give as its default; a strategy's
//! module says where it differs. Nothing outside this module matches on a strategy.

use std::ops::Deref;

use serde::{Deserialize, Serialize};

use crate::analysis::AnalysisSettings;
use crate::error::StrategyError;
use crate::rollout::{self, PlannedStep, Progress, Step, StepInput};

mod blue_green;
mod canary;
mod dry_run;
mod expedited;
mod legacy;
mod regional_rollout;

pub use blue_green::{BlueGreen, DEFAULT_KEEP_OLD_MS};
pub use canary::{Canary, DEFAULT_CANARY_STEPS};
pub use regional_rollout::{DEFAULT_PERCENTAGES, RegionalRollout};

/// The default pause between steps of a regional rollout or a canary: one minute.
pub const DEFAULT_PAUSE_MS: u64 = 60_000;

/// What is asked of a strategy. Implemented by each strategy's type, in its own module; a
/// [`Strategy`] dereferences to its strategy's, so `strategy.in_steps()` asks it.
///
/// Only [`Kind::name`] has no default. The defaults are those of a strategy that moves all
/// traffic at once when the new revision is ready (`legacy`): one step to 100 %, no pause, no
/// analysis, nothing an operator can steer. A strategy in steps gives its [`Kind::steps`] and
/// [`Kind::pause_ms`] and says [`Kind::in_steps`]; [`Kind::step`] then walks them.
pub trait Kind {
    /// The value as written in a manifest (`legacy`, `runway_canary`, …).
    fn name(&self) -> &'static str;

    /// Whether the strategy is usable as written (for example: percentages strictly
    /// increasing, within 1..=100 and ending at 100). The first problem found is returned,
    /// naming the field and what is expected.
    fn check(&self) -> Result<(), StrategyError> {
        Ok(())
    }

    /// The new revision's weight at each step, as written: [`Kind::ladder`] makes it safe.
    fn steps(&self) -> &[u32] {
        &[100]
    }

    /// How long each step is held (0 for the one-step strategies).
    fn pause_ms(&self) -> u64 {
        0
    }

    /// The new revision's weight at each step, made safe whatever the strategy holds:
    /// [`Kind::steps`] clamped to 1..=100, only strictly increasing ones kept, ending at 100.
    fn ladder(&self) -> Vec<u32> {
        safe_ladder(self.steps())
    }

    /// Computes a plan and changes nothing.
    fn is_dry_run(&self) -> bool {
        false
    }

    /// Moves traffic in steps an operator can steer (pause, resume, abort, promote), rather
    /// than all at once when the new revision is ready. A first deploy, with nothing serving
    /// to step from, is rolled out in one whatever the strategy.
    fn in_steps(&self) -> bool {
        false
    }

    /// Each step is passed only by an analysis of the new revision beside the stable one:
    /// its settings, and the window it judges (the step's pause).
    fn analysis(&self) -> Option<(&AnalysisSettings, u64)> {
        None
    }

    /// The new revision starts at the stable one's full capacity, and is staged (reachable at
    /// its tag URL, with no traffic) until the switch.
    fn stages_at_full_capacity(&self) -> bool {
        false
    }

    /// How long the old revision stays warm after the switch, for an instant rollback; `None`
    /// when it is stopped once the new one has all the traffic.
    fn keeps_old_ms(&self) -> Option<u64> {
        None
    }

    /// The steps the strategy would take, as a dry run shows them. By default: no traffic
    /// until the new revision is ready, then each step of [`Kind::ladder`] after the pause
    /// (and a passing analysis, with one).
    fn plan(&self) -> Vec<PlannedStep> {
        rollout::ladder_plan(self)
    }

    /// The strategy's move, once [`crate::next`] has applied the rules every strategy keeps
    /// (a finished rollout stays finished, an abort or a failed analysis rolls back, an
    /// operator's pause holds). By default: the ladder walk, each step once the new revision
    /// is ready and the pause is over (and the analysis passed, with one; an inconclusive one
    /// holds, for `max_inconclusive_windows` pauses at most), to 100 % on a promote.
    fn step(&self, progress: Progress, input: &StepInput) -> Step {
        rollout::walk(self, progress, input)
    }
}

/// How a new revision takes over from the stable one: the manifest's strategy, with its
/// settings. Each variant's behaviour is its own module's, asked through [`Kind`] (this type
/// dereferences to it).
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
    RegionalRollout(RegionalRollout),
    /// Compute the plan, change nothing.
    #[serde(rename = "dryrun")]
    DryRun,
    /// Traffic steps, each held for `pause_ms` and passed only by an analysis.
    #[serde(rename = "runway_canary")]
    Canary(Canary),
    /// The new revision at full capacity with no traffic, then all the traffic at once.
    #[serde(rename = "runway_blue_green")]
    BlueGreen(BlueGreen),
}

/// What [`crate::next`] and [`crate::plan`] take: a [`Strategy`], or any one strategy's type.
pub trait AsKind {
    /// The strategy asked.
    fn as_kind(&self) -> &dyn Kind;
}

impl<K: Kind> AsKind for K {
    fn as_kind(&self) -> &dyn Kind {
        self
    }
}

impl AsKind for dyn Kind + '_ {
    fn as_kind(&self) -> &dyn Kind {
        self
    }
}

impl AsKind for Strategy {
    fn as_kind(&self) -> &dyn Kind {
        &**self
    }
}

impl Deref for Strategy {
    type Target = dyn Kind;

    /// The strategy's own answers: the one place its variant is matched.
    fn deref(&self) -> &(dyn Kind + 'static) {
        match self {
            Self::Legacy => &legacy::Legacy,
            Self::Expedited => &expedited::Expedited,
            Self::RegionalRollout(strategy) => strategy,
            Self::DryRun => &dry_run::DryRun,
            Self::Canary(strategy) => strategy,
            Self::BlueGreen(strategy) => strategy,
        }
    }
}

impl Default for Strategy {
    /// `legacy`, upstream's default.
    fn default() -> Self {
        Self::Legacy
    }
}

fn default_pause_ms() -> u64 {
    DEFAULT_PAUSE_MS
}

/// The manifest's pause between steps (`rollout.pause_seconds`, at least 1 s), in ms.
fn pause_ms_of(config: &runway_manifest::ServiceConfig) -> u64 {
    u64::from(config.rollout.pause_seconds.max(1)) * 1000
}

impl Strategy {
    /// The regional rollout with upstream's default percentages and Runway's default pause.
    pub fn regional_rollout() -> Self {
        Self::RegionalRollout(RegionalRollout::default())
    }

    /// A canary with the default steps, pause and analysis.
    pub fn canary() -> Self {
        Self::Canary(Canary::default())
    }

    /// Every strategy, with its default settings, in the manifest's order.
    pub fn all() -> Vec<Self> {
        vec![
            Self::Legacy,
            Self::RegionalRollout(RegionalRollout::default()),
            Self::Expedited,
            Self::DryRun,
            Self::Canary(Canary::default()),
            Self::BlueGreen(BlueGreen::default()),
        ]
    }

    /// The strategy a service's settings name, with their parameters (the manifest's
    /// `deployment.strategy` and `workload.rollout`).
    pub fn of(config: &runway_manifest::ServiceConfig) -> Self {
        use runway_manifest::Strategy as Manifest;
        match config.strategy {
            Manifest::Legacy => Self::Legacy,
            Manifest::Expedited => Self::Expedited,
            Manifest::Dryrun => Self::DryRun,
            Manifest::RegionalRollout => Self::RegionalRollout(RegionalRollout::of(config)),
            Manifest::RunwayCanary => Self::Canary(Canary::of(config)),
            Manifest::RunwayBlueGreen => Self::BlueGreen(BlueGreen::of(config)),
        }
    }
}

/// `raw` clamped to 1..=100, only strictly increasing values kept, ending at 100.
fn safe_ladder(raw: &[u32]) -> Vec<u32> {
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

    /// `all` lists every value of the manifest's `deployment.strategy`, in its order.
    #[test]
    fn every_strategy_the_manifest_names_is_listed() {
        let schema = runway_manifest::manifest_schema();
        let values: Vec<&str> = schema["$defs"]["Strategy"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(serde_json::Value::as_str)
            .collect();
        let names: Vec<&str> = Strategy::all().iter().map(|s| s.name()).collect();
        assert_eq!(names, values);
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
