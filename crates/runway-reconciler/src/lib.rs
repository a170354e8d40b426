//! The reconciler's planner for one service in one environment: desired and observed state to
//! the actions that converge them, with zero-downtime rolling deploys.
//!
//! [`plan`] is a pure, synchronous function: no I/O, no clock (time comes in as
//! [`Observed::now_ms`]), no state between calls. An executor applies the [`Plan`]'s actions
//! through idempotent `*_ensure` calls and plans again on the next observation or after
//! [`Plan::requeue_after_ms`]. Startup, recovery and normal operation take this same path.
//!
//! # Words
//!
//! - An instance is *live* when starting, ready, not ready or crash-looping (its supervisor
//!   restarts it); *dead* when failed or exited; draining instances are neither.
//! - A revision is *retired* when it is not desired, or desired with 0 instances and weight 0.
//! - A revision is *routed* when the observed routes give it weight, or the planned routes will.
//!
//! # The contract
//!
//! 1. **Instance counts.** Each desired revision gets `instances` live instances: dead ones are
//!    replaced ([`Action::Replace`]), missing ones started ([`Action::Start`]), at most
//!    [`Policy::max_surge`] starting at once. Extras are removed, not-ready ones first (crash
//!    looping, then starting, then not ready), then the newest. A starting or crash-looping
//!    instance never had traffic and is stopped at once; a ready or not-ready one is drained.
//!    Dead instances beyond the count are stopped.
//! 2. **Routes follow readiness.** The desired weights are scaled to sum to 100. A revision
//!    *may take* its desired weight when it has a ready instance and either already has at
//!    least that weight in the observed routes, or has all its desired instances (at least
//!    one) ready: traffic only moves to a revision once it is fully ready. Then:
//!    - if every weighted desired revision may take its weight, the routes become the desired
//!      weights (so a 90/10 canary starts only once both revisions are ready);
//!    - otherwise the observed routes are kept, less any revision without a ready instance,
//!      scaled back to 100: the previously routed revisions keep their traffic, even when
//!      the desired state gives them weight 0;
//!    - if no routed revision has a ready instance (first deploy, recovery after a restart
//!      with empty routes, the serving revision lost every instance), the desired revisions
//!      with a ready instance take all traffic in proportion to their desired weights;
//!    - if none has, the routes are kept as they are: the ingress holds requests.
//!
//!    Routes never point at a revision with no ready instance, unless no routed or desired
//!    revision has one.
//!    When no desired revision has weight (decommission) the routes become empty.
//!    [`Action::SetRoutes`] is emitted only when the planned routes differ from the observed.
//! 3. **Serving capacity.** An instance of a routed revision is drained or stopped as an extra
//!    only while the revision keeps a ready instance; a starting or crash-looping extra, which
//!    carries no traffic, may always go.
//! 4. **Retiring.** Instances of a retired revision are left alone while it is routed; once
//!    the observed routes no longer include it they are drained, and each is stopped when
//!    `drain_grace_ms` has passed since it began draining (`since_ms` of its `Draining`
//!    state). Draining instances of any revision are stopped the same way.
//! 5. **Failures.** Failed, crash-looping and exited instances are reported in
//!    [`RevisionStatus`] with the instance's own reason ([`Condition::Failing`]); a revision
//!    with an instance not ready for `start_timeout_ms` (measured from `since_ms` of its current
//!    state) is [`Condition::TimedOut`], with the count and the latest failure's reason. Such a
//!    revision never gains traffic (rule 2), and the revision serving now is never stopped
//!    because of it (rule 4). A crash-looping instance is left to its supervisor, which
//!    restarts it; failed and exited instances are replaced, so a revision that cannot start
//!    at all stays `Failing`.
//! 6. **Level-triggered.** The plan depends only on its inputs; planning again on the same
//!    state gives the same plan, and every action is safe to repeat.
//!    [`Plan::requeue_after_ms`] is the time until the next drain grace ends or start timeout
//!    falls due, when only time would change the plan.
//!
//! 7. **Scale to zero.** A desired revision with weight but 0 instances (the autoscaler's
//!    doing, when its `min_instances` is 0) is *scaled to zero*: its instances are drained and
//!    stopped even though it is routed, and it stays routed with no ready instance, so the
//!    ingress holds its requests (and signals a scale-up) until it has an instance again. This
//!    is the one case where rule 3 gives way and routes point at a revision with no ready
//!    instance.
//!
//! # Files
//!
//! `plan.rs` is the planner; `model.rs` its inputs and outputs; `revision.rs` gathers one
//! revision's desired count and observed instances; `instances.rs` decides which instances to
//! start, replace, drain and stop; `routes.rs` the weights (the traffic-shifting rule);
//! `status.rs` where a revision stands, and why. `runway-control` is the executor.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

mod instances;
mod model;
mod plan;
mod revision;
mod routes;
mod status;

pub use model::{
    Action, Condition, Desired, DesiredRevision, InstanceState, Observed, ObservedInstance, Plan,
    Policy, RevisionStatus, RouteWeight,
};
pub use plan::plan;
