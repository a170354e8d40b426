//! The decision: demand, state and instance counts to the desired instance count.

use serde::{Deserialize, Serialize};

use crate::{Demand, History, Settings};

/// What a decision remembers for the next: panic mode and when traffic was last seen.
/// Serialisable so it can be stored; `State::default()` is a revision never decided for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct State {
    /// When the current panic began; `None` when not panicking.
    pub panicking_since_ms: Option<u64>,
    /// The last decision whose panic-window demand crossed the threshold.
    pub last_panic_ms: Option<u64>,
    /// The most instances asked for during the current panic (0 when not panicking).
    pub max_panic_desired: u32,
    /// The last time demand above 0 was seen.
    pub last_nonzero_ms: Option<u64>,
    /// The first decision for this revision: the quiet period of a revision that never had
    /// traffic counts from here.
    pub first_decision_ms: Option<u64>,
}

impl State {
    pub fn panicking(&self) -> bool {
        self.panicking_since_ms.is_some()
    }
}

/// One decision: the count to ask for, the state to carry, and the event saying why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub desired: u32,
    pub state: State,
    pub event: DecisionEvent,
}

/// How panic mode changed in a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PanicChange {
    /// Not panicking, before or after.
    Calm,
    /// The panic-window demand crossed the threshold: panic mode began.
    Entered,
    /// Still panicking (the threshold crossed again, or within a stable window of the last
    /// time it was).
    Continued,
    /// A whole stable window since the last trigger: panic mode ended.
    Left,
}

/// Why the desired count is not simply `ceil(stable average / target)`, in the order the
/// rules applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum Reason {
    /// Cut to `ceil(max_scale_up_rate × ready)`.
    ScaleUpRate { limit: u32 },
    /// Raised to `floor(ready / max_scale_down_rate)`.
    ScaleDownRate { limit: u32 },
    /// A scale-down kept `kept` instances because the stable window's demand varies
    /// ([`Settings::scale_down_margin`]).
    NoiseMargin { kept: u32 },
    /// Panicking: the panic window's demand asked for more than the stable window's.
    PanicDemand { desired: u32 },
    /// Panicking: never below the most asked for during this panic, or the current count.
    PanicHold { desired: u32 },
    /// No ready instance and demand: at least one, at once (cold start). The ingress holds
    /// the requests meanwhile.
    ColdStart,
    /// No demand, but not yet a stable window and the grace without traffic: kept at one.
    ScaleToZeroWait { remaining_ms: u64 },
    /// A stable window and the grace without traffic: to zero.
    ScaleToZero,
    /// Raised to `min_instances`.
    MinInstances { min: u32 },
    /// Cut to `max_instances` (or the platform's cap).
    MaxInstances { max: u32 },
}

/// Everything a decision read and why it came out as it did. With [`decide_demand`], its
/// inputs give the same decision again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionEvent {
    pub at_ms: u64,
    pub settings: Settings,
    pub ready_instances: u32,
    /// The count asked for before this decision.
    pub current_desired: u32,
    pub state_before: State,
    pub demand: Demand,
    /// Target concurrency per instance.
    pub target: f64,
    /// `ceil(stable average / target)`, before any bound.
    pub stable_desired: u32,
    /// `ceil(panic average / target)`, before any bound.
    pub panic_desired: u32,
    /// At most this many, by the scale-up rate.
    pub scale_up_limit: u32,
    /// At least this many, by the scale-down rate.
    pub scale_down_limit: u32,
    pub panic: PanicChange,
    pub panicking: bool,
    pub reasons: Vec<Reason>,
    pub desired: u32,
}

impl DecisionEvent {
    /// One line for a log or an event list, such as
    /// `3 → 5: stable 212.4, panic 340.1 / target 70 (100 × 0.7), ready 3; panicking`.
    pub fn summary(&self) -> String {
        let mut line = format!(
            "{} → {}: stable {:.1}, panic {:.1} / target {} ({} × {}), ready {}",
            self.current_desired,
            self.desired,
            self.demand.stable_average,
            self.demand.panic_average,
            trim(self.target),
            self.settings.concurrency(),
            self.settings.utilisation,
            self.ready_instances,
        );
        match self.panic {
            PanicChange::Calm => {}
            PanicChange::Entered => line.push_str("; panic began"),
            PanicChange::Continued => line.push_str("; panicking"),
            PanicChange::Left => line.push_str("; panic over"),
        }
        for reason in &self.reasons {
            line.push_str("; ");
            line.push_str(&match reason {
                Reason::ScaleUpRate { limit } => format!("scale-up rate ≤ {limit}"),
                Reason::ScaleDownRate { limit } => format!("scale-down rate ≥ {limit}"),
                Reason::NoiseMargin { kept } => format!("noise margin keeps {kept}"),
                Reason::PanicDemand { desired } => format!("panic demand {desired}"),
                Reason::PanicHold { desired } => format!("no scale-down in panic ({desired})"),
                Reason::ColdStart => "cold start".to_owned(),
                Reason::ScaleToZeroWait { remaining_ms } => {
                    format!("to zero in {:.1} s", *remaining_ms as f64 / 1000.0)
                }
                Reason::ScaleToZero => "to zero".to_owned(),
                Reason::MinInstances { min } => format!("min {min}"),
                Reason::MaxInstances { max } => format!("max {max}"),
            });
        }
        line
    }
}

/// A number as short as it reads: `70`, `0.7`, `12.5`.
fn trim(value: f64) -> String {
    let text = format!("{value:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Relative slack for `ceil`, so 210.000_000_000_1 / 70 asks for 3 instances, not 4.
const CEIL_SLACK: f64 = 1e-9;

/// `ceil(value)` as a count, forgiving rounding just above an integer; 0 for 0, negative or
/// NaN, `u32::MAX` for huge values.
fn count(value: f64) -> u32 {
    if value.is_nan() || value <= 0.0 {
        return 0;
    }
    let value = value - value * CEIL_SLACK;
    // `as` saturates: huge values give u32::MAX.
    value.ceil() as u32
}

/// Decides the desired instance count at `now_ms` from the history's samples. See the crate's
/// documentation for the rules. Pure: the same inputs give the same decision.
pub fn decide(
    settings: &Settings,
    history: &History,
    state: &State,
    ready_instances: u32,
    current_desired: u32,
    now_ms: u64,
) -> Decision {
    let demand = history.demand(settings, now_ms);
    decide_demand(
        settings,
        &demand,
        state,
        ready_instances,
        current_desired,
        now_ms,
    )
}

/// [`decide`] from the figures a history gives ([`History::demand`]), as a
/// [`DecisionEvent`] records them: replays a decision from its event.
pub fn decide_demand(
    settings: &Settings,
    demand: &Demand,
    state: &State,
    ready_instances: u32,
    current_desired: u32,
    now_ms: u64,
) -> Decision {
    let mut next = state.clone();
    let mut reasons = Vec::new();
    next.first_decision_ms.get_or_insert(now_ms);
    if let Some(seen) = demand.last_nonzero_ms {
        next.last_nonzero_ms = Some(next.last_nonzero_ms.map_or(seen, |last| last.max(seen)));
    }

    let target = settings.target();
    // Knative counts no ready instance as one, so rates and the panic ratio are defined.
    let ready = f64::from(ready_instances.max(1));
    let scale_up_limit = count(settings.max_scale_up_rate * ready).max(1);
    let scale_down_limit = (ready / settings.max_scale_down_rate).floor().max(0.0) as u32;
    let rates = |desired: u32, reasons: &mut Vec<Reason>| {
        if desired > scale_up_limit {
            reasons.push(Reason::ScaleUpRate {
                limit: scale_up_limit,
            });
            scale_up_limit
        } else if desired < scale_down_limit {
            reasons.push(Reason::ScaleDownRate {
                limit: scale_down_limit,
            });
            scale_down_limit
        } else {
            desired
        }
    };

    let stable_desired = count(demand.stable_average / target);
    let panic_desired = count(demand.panic_average / target);

    // Panic mode: enter or extend when the panic window asks for threshold × ready; leave a
    // whole stable window after the last time it did.
    let over_threshold = f64::from(panic_desired) / ready >= settings.panic_threshold;
    let was_panicking = state.panicking();
    if over_threshold {
        if next.panicking_since_ms.is_none() {
            next.panicking_since_ms = Some(now_ms);
            next.max_panic_desired = 0;
        }
        next.last_panic_ms = Some(now_ms);
    } else if was_panicking {
        let last = state
            .last_panic_ms
            .or(state.panicking_since_ms)
            .unwrap_or(now_ms);
        if now_ms > last.saturating_add(settings.stable_window_ms) {
            next.panicking_since_ms = None;
            next.max_panic_desired = 0;
        }
    }
    let panicking = next.panicking();
    let panic = match (was_panicking, panicking) {
        (false, false) => PanicChange::Calm,
        (false, true) => PanicChange::Entered,
        (true, true) => PanicChange::Continued,
        (true, false) => PanicChange::Left,
    };

    let mut desired = rates(stable_desired, &mut reasons);
    // Hysteresis: a scale-down goes only as far as the average plus a margin of its noise.
    if desired < current_desired && settings.scale_down_margin > 0.0 {
        let noisy = demand.stable_average + settings.scale_down_margin * demand.stable_stddev;
        let kept = count(noisy / target)
            .min(current_desired)
            .min(scale_up_limit);
        if kept > desired {
            reasons.push(Reason::NoiseMargin { kept });
            desired = kept;
        }
    }
    if panicking {
        let panic_bounded = rates(panic_desired, &mut Vec::new());
        if panic_bounded > desired {
            reasons.push(Reason::PanicDemand {
                desired: panic_bounded,
            });
            desired = panic_bounded;
        }
        let hold = next.max_panic_desired.max(current_desired);
        if hold > desired {
            reasons.push(Reason::PanicHold { desired: hold });
            desired = hold;
        }
        next.max_panic_desired = desired;
    }

    // Cold start, and zero.
    if demand.any() && ready_instances == 0 {
        reasons.push(Reason::ColdStart);
        desired = desired.max(1);
    }
    if desired == 0 {
        if demand.any() {
            // Not reached by the rules above (any demand asks for one); kept as the floor.
            desired = 1;
        } else if settings.min_instances == 0 && current_desired > 0 {
            let quiet_since = next
                .last_nonzero_ms
                .or(next.first_decision_ms)
                .unwrap_or(now_ms);
            let zero_at = quiet_since
                .saturating_add(settings.stable_window_ms)
                .saturating_add(settings.scale_to_zero_grace_ms);
            if now_ms >= zero_at && !panicking {
                reasons.push(Reason::ScaleToZero);
            } else {
                reasons.push(Reason::ScaleToZeroWait {
                    remaining_ms: zero_at.saturating_sub(now_ms),
                });
                desired = 1;
            }
        }
    }

    // The bounds come last and win over everything, panic included.
    let max = settings.max();
    if desired > max {
        reasons.push(Reason::MaxInstances { max });
        desired = max;
    }
    if desired < settings.min_instances {
        reasons.push(Reason::MinInstances {
            min: settings.min_instances,
        });
        desired = settings.min_instances;
    }

    let event = DecisionEvent {
        at_ms: now_ms,
        settings: settings.clone(),
        ready_instances,
        current_desired,
        state_before: state.clone(),
        demand: demand.clone(),
        target,
        stable_desired,
        panic_desired,
        scale_up_limit,
        scale_down_limit,
        panic,
        panicking,
        reasons,
        desired,
    };
    Decision {
        desired,
        state: next,
        event,
    }
}
