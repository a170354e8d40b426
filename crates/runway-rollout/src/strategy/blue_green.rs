//! `runway_blue_green`: the new revision staged at full capacity with no traffic, then all the
//! traffic at once, the old revision kept warm for a while after.
//!
//! How it goes: the crate's documentation, "The strategies".

use serde::{Deserialize, Serialize};

use super::Kind;
use crate::rollout::{
    Phase, PlannedStep, Progress, Step, StepInput, Weights, clock, complete, hold, ms_text,
    switched, wait_ready,
};

/// How long blue/green keeps the old revision warm after the switch by default: ten minutes.
pub const DEFAULT_KEEP_OLD_MS: u64 = 600_000;

/// The new revision at full capacity with no traffic, then all the traffic at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlueGreen {
    /// Switch this long after the new revision is ready; `None` waits for a promote.
    #[serde(default)]
    pub auto_switch_after_ms: Option<u64>,
    /// How long the old revision stays warm after the switch, for an instant rollback.
    /// Default ten minutes.
    #[serde(default = "default_keep_old_ms")]
    pub keep_old_ms: u64,
}

fn default_keep_old_ms() -> u64 {
    DEFAULT_KEEP_OLD_MS
}

impl Default for BlueGreen {
    /// A switch on promote, and the old revision kept warm for the default time.
    fn default() -> Self {
        Self {
            auto_switch_after_ms: None,
            keep_old_ms: DEFAULT_KEEP_OLD_MS,
        }
    }
}

impl BlueGreen {
    /// The manifest's `rollout.auto_switch_after_seconds` and `rollout.keep_old_seconds`.
    pub(super) fn of(config: &runway_manifest::ServiceConfig) -> Self {
        let rollout = &config.rollout;
        Self {
            auto_switch_after_ms: rollout
                .auto_switch_after_seconds
                .map(|s| u64::from(s) * 1000),
            keep_old_ms: u64::from(rollout.keep_old_seconds) * 1000,
        }
    }
}

impl Kind for BlueGreen {
    fn name(&self) -> &'static str {
        "runway_blue_green"
    }

    fn in_steps(&self) -> bool {
        true
    }

    fn stages_at_full_capacity(&self) -> bool {
        true
    }

    fn keeps_old_ms(&self) -> Option<u64> {
        Some(self.keep_old_ms)
    }

    fn plan(&self) -> Vec<PlannedStep> {
        let switch = match self.auto_switch_after_ms {
            Some(ms) => format!(
                "{} after it is ready: switch all traffic at once",
                ms_text(ms)
            ),
            None => "on promote: switch all traffic at once".to_owned(),
        };
        let stage = "start the new revision at full capacity, reachable at its tag URL \
                     with no traffic";
        let keep = ms_text(self.keep_old_ms);
        vec![
            PlannedStep {
                weights: Weights::new(0),
                when: stage.to_owned(),
            },
            PlannedStep {
                weights: Weights::new(100),
                when: format!("{switch}; keep the old revision warm for {keep}, then stop it"),
            },
        ]
    }

    /// Staged at 0 % once ready, then the switch: on a promote or once the automatic delay
    /// has passed, and only while the new revision is ready.
    fn step(&self, mut p: Progress, input: &StepInput) -> Step {
        let now = input.now_ms;
        if p.phase == Phase::WaitingReady {
            if !input.new_ready {
                return wait_ready(p);
            }
            p.phase = Phase::Stepping;
            p.step_index = 0;
            p.step_started_ms = now;
        }
        match p.phase {
            Phase::Stepping => {
                let switch_at = self
                    .auto_switch_after_ms
                    .map(|ms| p.step_started_ms.saturating_add(ms));
                let due = p.promoted || switch_at.is_some_and(|at| now >= at);
                if !due {
                    let reason = match switch_at {
                        Some(at) => format!("staged with no traffic; switching at {}", clock(at)),
                        None => {
                            "staged with no traffic; waiting for a promote to switch".to_owned()
                        }
                    };
                    return hold(p, reason, switch_at);
                }
                if !input.new_ready {
                    return wait_ready(p);
                }
                switched(p, now, self.keep_old_ms)
            }
            // Finished and waiting phases were handled before.
            _ => complete(p),
        }
    }
}
