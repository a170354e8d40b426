//! The planner: desired and observed state to a [`Plan`].

use std::collections::BTreeSet;

use crate::instances::{drain_deadline, instance_actions};
use crate::model::{Action, Desired, Observed, Plan, Policy};
use crate::revision::{Revision, gather};
use crate::routes::{Weights, from_route_weights, scale_to_100, target_routes, to_route_weights};
use crate::status::{revision_status, start_deadline};

/// Plans one service in one environment. Pure: the same inputs give the same plan. See the
/// crate documentation for the rules it keeps.
pub fn plan(desired: &Desired, observed: &Observed, policy: &Policy) -> Plan {
    let now_ms = observed.now_ms;
    let observed_routes = from_route_weights(&observed.routes);
    let revisions = gather(desired, observed, &observed_routes);
    let target = target_routes(
        &desired_weights(desired),
        &observed_routes,
        revisions.as_slice(),
    );

    let mut actions = Vec::new();
    if target != observed_routes {
        actions.push(Action::SetRoutes {
            weights: to_route_weights(&target),
        });
    }
    for revision in &revisions {
        let routed =
            observed_routes.contains_key(revision.name) || target.contains_key(revision.name);
        actions.extend(instance_actions(revision, routed, policy, now_ms));
    }
    actions.sort_by_key(application_order);

    Plan {
        status: revisions
            .iter()
            .map(|revision| revision_status(revision, policy, now_ms))
            .collect(),
        requeue_after_ms: requeue_after_ms(&revisions, &actions, policy, now_ms),
        actions,
    }
}

/// The desired weights, first entry of each name, scaled to 100.
fn desired_weights(desired: &Desired) -> Weights {
    let mut seen = BTreeSet::new();
    let weights: Vec<(&str, u32)> = desired
        .revisions
        .iter()
        .filter(|revision| seen.insert(revision.name.as_str()))
        .map(|revision| (revision.name.as_str(), revision.weight))
        .collect();
    scale_to_100(&weights)
}

/// Routes first, so traffic moves as soon as it can; then starts, drains and stops.
fn application_order(action: &Action) -> u8 {
    match action {
        Action::SetRoutes { .. } => 0,
        Action::Start { .. } | Action::Replace { .. } => 1,
        Action::Drain { .. } => 2,
        Action::Stop { .. } => 3,
    }
}

/// The soonest time-driven change: a drain grace ending (one this plan begins too), or a
/// start timeout falling due for a revision still short of ready instances.
fn requeue_after_ms(
    revisions: &[Revision<'_>],
    actions: &[Action],
    policy: &Policy,
    now_ms: u64,
) -> Option<u64> {
    let begun = actions
        .iter()
        .any(|action| matches!(action, Action::Drain { .. }))
        .then_some(now_ms + policy.drain_grace_ms);
    let drains = revisions
        .iter()
        .flat_map(Revision::draining)
        .map(|instance| drain_deadline(instance, policy))
        .chain(begun);
    let starts = revisions
        .iter()
        .filter(|revision| revision.ready() < revision.desired_instances)
        .flat_map(Revision::not_ready)
        .map(|instance| start_deadline(instance, policy));
    drains
        .chain(starts)
        .filter(|&deadline| deadline > now_ms)
        .map(|deadline| deadline - now_ms)
        .min()
}
