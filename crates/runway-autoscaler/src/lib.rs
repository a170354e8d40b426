//! The autoscaling decision for one revision, as Knative's autoscaler (KPA) makes it:
//! concurrency-based, with a stable and a panic window, bounded by the revision's minimum and
//! maximum, down to zero when allowed.
//!
//! [`decide`] is a pure, synchronous function: no I/O, no clock (time comes in as `now_ms`),
//! no state but the [`State`] it is given and returns. The caller samples the ingress's
//! gauges for the revision (in-flight + held + queued requests) into a [`History`] about once
//! a second, decides every second or two, sets the revision's instance count to
//! [`Decision::desired`], stores [`Decision::state`] for the next decision, and records
//! [`Decision::event`]. With 1 s samples and the 6 s panic window, a burst reaches a decision
//! within a second or two.
//!
//! # The contract
//!
//! Figures in parentheses are the defaults ([`Settings::default`]), which are Knative's but
//! for rule 4's margin.
//!
//! 1. **Target.** Each instance is meant to carry `target = concurrency × utilisation`
//!    requests at once, where `concurrency` is the manifest's
//!    `max_instance_request_concurrency` ([`Settings::container_concurrency`]; 100 when 0,
//!    meaning unlimited) and `utilisation` is 0.7: a target of 70 by default.
//! 2. **Averages over time.** The stable average covers the last `stable_window_ms` (60 s),
//!    the panic average the last `panic_window_ms` (6 s). A sample stands for the time since
//!    the sample before it, and the latest one for the time until now, so averages weigh
//!    time, not samples: uneven sampling does not bias them. A window the samples do not
//!    fully cover (just after a start) is averaged over the part they cover.
//! 3. **Desired.** `desired = ceil(stable average / target)`, bounded per decision to
//!    `[floor(ready / max_scale_down_rate), ceil(max_scale_up_rate × ready)]` (rates 2 and
//!    1000), where `ready` counts as 1 when it is 0. A ceiling forgives float rounding just
//!    above an integer (10⁻⁹ relative).
//! 4. **No flapping.** A scale-down goes only as far as
//!    `ceil((stable average + scale_down_margin × stddev) / target)` (margin 1.0), with the
//!    time-weighted standard deviation of the stable window: noise around a boundary does not
//!    make the count go back and forth. Under steady demand the deviation is 0 and this is
//!    rule 3 exactly; the margin never adds instances. This rule is Runway's, not Knative's
//!    (which has none by default); a margin of 0 gives Knative's behaviour.
//! 5. **Panic.** Panic mode begins when `ceil(panic average / target) ≥ panic_threshold ×
//!    ready` (2.0), and lasts until a whole stable window has passed since the last decision
//!    where that held. While panicking, desired is the larger of the stable and the panic
//!    figure (each rate-bounded), and never less than the most asked for during this panic
//!    or the count before the decision: **never a scale-down while panicking.**
//! 6. **Cold start.** With no ready instance and any demand (a sample or an average above
//!    0), desired is at least 1 at once, whatever the windows say. The ingress holds requests
//!    while a revision has no ready instance, and those held requests are demand.
//! 7. **Scale to zero.** Only when `min_instances` is 0, not panicking, with no demand at all,
//!    and a whole stable window plus `scale_to_zero_grace_ms` (30 s) have passed since the
//!    last demand ([`State::last_nonzero_ms`], or the first decision for a revision that never
//!    had any). Until then a count that would be 0 is 1, with the time remaining in the event.
//!    A revision already at zero stays there while there is no demand.
//! 8. **Bounds.** Last, the count is cut to `max_instances` (`None` is
//!    [`PLATFORM_MAX_INSTANCES`], 1000) and raised to `min_instances`; the bounds win over
//!    every other rule, panic included.
//! 9. **Events.** Every decision carries a [`DecisionEvent`]: its inputs (settings, counts,
//!    state before, the history's figures as a [`Demand`]), the intermediate figures and the
//!    [`Reason`]s the count is what it is, and a one-line [`DecisionEvent::summary`].
//!    [`decide_demand`] on an event's inputs gives the same decision.
//! 10. **Deterministic.** The same inputs give the same decision; nothing else is read.
//!
//! # References
//!
//! Knative Serving, `pkg/autoscaler/scaling/autoscaler.go` (`Scale`: the stable and panic
//! figures, the rate bounds, panic mode and `maxPanicPods`), `pkg/reconciler/autoscaling/kpa/
//! scaler.go` (min and max scale, scale to zero after the grace period), and the defaults in
//! `config/core/configmaps/autoscaler.yaml` (`container-concurrency-target-default` 100,
//! `container-concurrency-target-percentage` 70, `stable-window` 60s,
//! `panic-window-percentage` 10, `panic-threshold-percentage` 200, `max-scale-up-rate` 1000,
//! `max-scale-down-rate` 2, `scale-to-zero-grace-period` 30s).
//!
//! # Files
//!
//! `history.rs`: a revision's concurrency samples, averaged per unit of time over the stable and
//! panic windows. `decide.rs`: the next instance count, with panic mode, rates, bounds, cold start
//! and scale to zero, and an event holding every input, so a decision can be replayed.
//! `settings.rs`: its checked settings. The caller is `runway-control`'s `autoscale.rs`.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

mod decide;
mod history;
mod settings;

pub use decide::{Decision, DecisionEvent, PanicChange, Reason, State, decide, decide_demand};
pub use history::{DEFAULT_CAPACITY, Demand, History, Sample, SampleError};
pub use settings::{
    DEFAULT_CONCURRENCY, MAX_CONCURRENCY, MIN_TARGET, PLATFORM_MAX_INSTANCES, Settings,
    SettingsError,
};
