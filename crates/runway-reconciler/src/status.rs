//! Where a revision stands, and why.

use crate::model::{Condition, InstanceState, ObservedInstance, Policy, RevisionStatus};
use crate::revision::Revision;

pub(crate) fn revision_status(
    revision: &Revision<'_>,
    policy: &Policy,
    now_ms: u64,
) -> RevisionStatus {
    RevisionStatus {
        revision: revision.name.to_owned(),
        desired_instances: revision.desired_instances,
        ready: revision.ready(),
        starting: revision
            .count(|state| matches!(state, InstanceState::Starting | InstanceState::NotReady)),
        failed: revision
            .count(|state| state.is_dead() || matches!(state, InstanceState::CrashLoop { .. })),
        condition: condition(revision, policy, now_ms),
    }
}

/// When a not-ready instance's start timeout falls due.
pub(crate) fn start_deadline(instance: &ObservedInstance, policy: &Policy) -> u64 {
    instance.since_ms.saturating_add(policy.start_timeout_ms)
}

fn condition(revision: &Revision<'_>, policy: &Policy, now_ms: u64) -> Condition {
    let desired = revision.desired_instances;
    if desired == 0 {
        return if revision.instances.is_empty() {
            Condition::Ready
        } else {
            Condition::Progressing
        };
    }
    if revision.ready() >= desired {
        return Condition::Ready;
    }
    let failure = revision
        .instances
        .iter()
        .find_map(|instance| failure(instance));
    let late = revision
        .not_ready()
        .filter(|instance| now_ms >= start_deadline(instance, policy))
        .count();
    if late > 0 {
        let mut reason = format!(
            "{late} instance(s) not ready within {} ms ({} of {desired} ready)",
            policy.start_timeout_ms,
            revision.ready()
        );
        if let Some(failure) = failure {
            reason = format!("{reason}: {failure}");
        }
        return Condition::TimedOut { reason };
    }
    match failure {
        Some(reason) => Condition::Failing { reason },
        None => Condition::Progressing,
    }
}

/// The instance's own account of why it is not running, passed through.
fn failure(instance: &ObservedInstance) -> Option<String> {
    let id = &instance.id;
    match &instance.state {
        InstanceState::Failed { reason } => Some(format!("instance {id} failed: {reason}")),
        InstanceState::CrashLoop { reason } => {
            Some(format!("instance {id} is crash-looping: {reason}"))
        }
        InstanceState::Exited => Some(format!("instance {id} exited")),
        _ => None,
    }
}
