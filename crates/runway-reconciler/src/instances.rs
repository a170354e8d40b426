//! Which instances to start, replace, drain and stop for one revision.

use std::cmp::Reverse;

use crate::model::{Action, InstanceState, ObservedInstance, Policy};
use crate::revision::Revision;

/// The instance actions for one revision. `routed` says whether the revision has traffic in
/// the observed routes or will have in the target routes.
pub(crate) fn instance_actions(
    revision: &Revision<'_>,
    routed: bool,
    policy: &Policy,
    now_ms: u64,
) -> Vec<Action> {
    let mut actions = stop_drained(revision, policy, now_ms);
    actions.extend(fill(revision, policy));
    actions.extend(remove_extras(revision, routed));
    actions
}

/// When a draining instance's grace ends.
pub(crate) fn drain_deadline(instance: &ObservedInstance, policy: &Policy) -> u64 {
    instance.since_ms.saturating_add(policy.drain_grace_ms)
}

/// Stop draining instances whose grace has ended (rule 4).
fn stop_drained(revision: &Revision<'_>, policy: &Policy, now_ms: u64) -> Vec<Action> {
    revision
        .draining()
        .filter(|instance| now_ms >= drain_deadline(instance, policy))
        .map(stop)
        .collect()
}

/// Bring the live instances up to the desired count: replace dead instances first, then start
/// new ones, never more starting at once than `max_surge`. Dead instances not needed are
/// stopped (rule 1).
fn fill(revision: &Revision<'_>, policy: &Policy) -> Vec<Action> {
    let live = revision.live().count();
    let missing = usize::try_from(revision.desired_instances)
        .unwrap_or(usize::MAX)
        .saturating_sub(live);
    let mut room = start_room(revision, policy);
    let mut actions = Vec::new();
    let dead: Vec<&ObservedInstance> = revision.dead().collect();
    for (index, instance) in dead.iter().enumerate() {
        if index >= missing {
            actions.push(stop(instance));
        } else if room > 0 {
            room -= 1;
            actions.push(Action::Replace {
                instance: instance.id.clone(),
                revision: revision.name.to_owned(),
            });
        }
    }
    let to_start = missing.saturating_sub(dead.len()).min(room);
    actions.extend((0..to_start).map(|_| Action::Start {
        revision: revision.name.to_owned(),
    }));
    actions
}

/// How many more instances of the revision may start now.
fn start_room(revision: &Revision<'_>, policy: &Policy) -> usize {
    match policy.max_surge {
        None => usize::MAX,
        Some(surge) => {
            let starting = revision.count(|state| *state == InstanceState::Starting);
            usize::try_from(surge.saturating_sub(starting)).unwrap_or(usize::MAX)
        }
    }
}

/// Remove live instances beyond the desired count, not-ready ones first, then the newest
/// (rule 1). A routed revision keeps all its instances when retired (rule 4), and keeps a
/// ready instance whenever it has one (rule 3), unless it is scaled to zero (rule 7); an
/// instance that may have requests in flight is drained, one that never had traffic is
/// stopped at once.
fn remove_extras(revision: &Revision<'_>, routed: bool) -> Vec<Action> {
    let mut live: Vec<&ObservedInstance> = revision.live().collect();
    let keep = usize::try_from(revision.desired_instances).unwrap_or(usize::MAX);
    let retired_but_routed = routed && keep == 0 && !revision.scaled_to_zero;
    if live.len() <= keep || retired_but_routed {
        return Vec::new();
    }
    live.sort_by_key(|instance| removal_order(instance));
    let (victims, kept) = live.split_at(live.len() - keep);
    let kept_ready = kept.iter().any(|instance| instance.state.is_ready());
    let may_drain = !routed || kept_ready || revision.scaled_to_zero;
    victims
        .iter()
        .filter(|victim| may_drain || !victim.state.may_have_traffic())
        .map(|victim| drain_or_stop(victim))
        .collect()
}

/// Sort key: the first are removed first.
fn removal_order(instance: &ObservedInstance) -> (u8, Reverse<u64>, Reverse<&str>) {
    let rank = match instance.state {
        InstanceState::CrashLoop { .. } => 0,
        InstanceState::Starting => 1,
        InstanceState::NotReady => 2,
        _ => 3,
    };
    (
        rank,
        Reverse(instance.since_ms),
        Reverse(instance.id.as_str()),
    )
}

fn drain_or_stop(instance: &ObservedInstance) -> Action {
    if instance.state.may_have_traffic() {
        Action::Drain {
            instance: instance.id.clone(),
        }
    } else {
        stop(instance)
    }
}

fn stop(instance: &ObservedInstance) -> Action {
    Action::Stop {
        instance: instance.id.clone(),
    }
}
