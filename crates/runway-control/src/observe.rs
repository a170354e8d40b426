//! From what the driver reports to what the planner reads: instance ids, states and the
//! reasons of failures. A replica's phase and readiness, with what the controller remembers of
//! it (ready once, draining), make the planner's [`InstanceState`]; a replica the platform
//! started whose revision the store no longer has still finds its service and environment, so
//! it is stopped.

use runway_driver::{Phase, Replica};
use runway_reconciler::InstanceState;

// Replica ids are the driver seam's: `{revision}-{suffix}`.
pub(crate) use runway_driver::revision_of;

/// The service and environment of an instance the platform started (the driver reports it
/// [`managed`](Replica::managed)) of revision `name`, from the service its driver
/// reports and the revision name's shape `{service}-{env}-{5 digits}`: what is needed to stop
/// it when the store no longer knows its revision. `None` for any other instance.
pub(crate) fn managed_key(status: &Replica, name: &str) -> Option<(String, String)> {
    if !status.managed || status.revision.as_deref() != Some(name) {
        return None;
    }
    let service = status.service.as_deref()?;
    let env = runway_driver::env_of(service, name)?;
    Some((service.to_owned(), env.to_owned()))
}

/// What the controller remembers of one instance between reconciliations.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tracked {
    /// The kind of the state last seen (see [`kind`]).
    pub(crate) kind: &'static str,
    /// When that state was first seen.
    pub(crate) since_ms: u64,
    /// It has been ready once: not ready now means "not ready", not "starting".
    pub(crate) was_ready: bool,
    /// When the controller told the ingress to drain it.
    pub(crate) draining_since_ms: Option<u64>,
    /// The warning last written as an event (see [`Replica::warning`]).
    pub(crate) warned: Option<String>,
}

/// The planner's state of an instance, from its status and what the controller remembers.
pub(crate) fn instance_state(status: &Replica, tracked: &Tracked) -> InstanceState {
    if tracked.draining_since_ms.is_some() {
        return InstanceState::Draining;
    }
    match status.phase {
        Phase::Starting => InstanceState::Starting,
        Phase::Running if status.ready => InstanceState::Ready,
        Phase::Running if tracked.was_ready => InstanceState::NotReady,
        Phase::Running => InstanceState::Starting,
        Phase::BackingOff | Phase::CrashLoop => InstanceState::CrashLoop {
            reason: failure_reason(status),
        },
        // Asked to stop already: the planner stops it again (idempotent) and removes it.
        Phase::Stopping => InstanceState::Draining,
        Phase::Stopped | Phase::Exited => InstanceState::Exited,
        Phase::Failed => InstanceState::Failed {
            reason: failure_reason(status),
        },
    }
}

/// A short name of a state, to tell when it changes.
pub(crate) fn kind(state: &InstanceState) -> &'static str {
    match state {
        InstanceState::Starting => "starting",
        InstanceState::Ready => "ready",
        InstanceState::NotReady => "not_ready",
        InstanceState::Draining => "draining",
        InstanceState::Failed { .. } => "failed",
        InstanceState::CrashLoop { .. } => "crash_loop",
        InstanceState::Exited => "exited",
    }
}

/// Why an instance is not running, in its supervisor's words: the status message, then how
/// the last process ended (exit code or signal, OOM kill, the probe that killed it).
pub(crate) fn failure_reason(status: &Replica) -> String {
    let mut reason = status.message.trim().to_owned();
    if let Some(exit) = &status.last_exit {
        let how = match &exit.signal {
            Some(signal) => format!("killed by signal {signal} (code {})", exit.code),
            None => format!("exit code {}", exit.code),
        };
        let mut last = format!("last exit: {how}");
        if exit.oom_killed {
            last.push_str(", out of memory");
        }
        let generic = exit.reason.contains(&format!("code {}", exit.code));
        if !exit.reason.is_empty() && !generic && !reason.contains(&exit.reason) {
            last.push_str(&format!(", {}", exit.reason));
        }
        if reason.is_empty() {
            reason = last;
        } else {
            reason = format!("{reason} ({last})");
        }
    }
    if reason.is_empty() {
        reason = format!("phase {}", status.phase.as_str());
    }
    reason
}

/// [`failure_reason`] for a failure that is final (a deploy's): without the supervisor's
/// "; starting again now" or "in 10s", which will not happen once the deploy has failed.
pub(crate) fn final_reason(status: &Replica) -> String {
    without_restart(&failure_reason(status))
}

fn without_restart(reason: &str) -> String {
    const SAID: &str = "; starting again ";
    let Some(at) = reason.find(SAID) else {
        return reason.to_owned();
    };
    let rest = &reason[at + SAID.len()..];
    let when = if let Some(after) = rest.strip_prefix("in ") {
        3 + after.find([' ', ')']).unwrap_or(after.len())
    } else if rest.starts_with("now") {
        3
    } else {
        0
    };
    format!("{}{}", &reason[..at], &rest[when..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_final_reason_does_not_say_it_starts_again() {
        assert_eq!(
            without_restart("crash loop: exit code 1; starting again in 10s (last exit: x)"),
            "crash loop: exit code 1 (last exit: x)"
        );
        assert_eq!(
            without_restart("exit code 1; starting again now"),
            "exit code 1"
        );
        assert_eq!(without_restart("exit code 1"), "exit code 1");
    }

    fn status(service: &str, revision: &str, managed: bool) -> Replica {
        Replica {
            id: format!("{revision}-3f9a1c"),
            service: Some(service.to_owned()),
            revision: Some(revision.to_owned()),
            managed,
            phase: Phase::Running,
            ready: true,
            address: None,
            restarts: 0,
            consecutive_failures: 0,
            started_at_ms: None,
            next_start_at_ms: None,
            message: String::new(),
            warning: None,
            last_exit: None,
        }
    }

    #[test]
    fn managed_instances_name_their_service_and_environment() {
        let key = |service: &str, env: &str| Some((service.to_owned(), env.to_owned()));
        let name = "hello-dev-00002";
        assert_eq!(
            managed_key(&status("hello", name, true), name),
            key("hello", "dev")
        );
        let dashed = "my-app-eu-west-00012";
        assert_eq!(
            managed_key(&status("my-app", dashed, true), dashed),
            key("my-app", "eu-west")
        );
        // Not the platform's, or not of that shape: nobody's to stop.
        assert_eq!(managed_key(&status("hello", name, false), name), None);
        assert_eq!(
            managed_key(&status("hello", name, true), "hello-dev-00003"),
            None
        );
        assert_eq!(managed_key(&status("other", name, true), name), None);
        let local = "hello-local";
        assert_eq!(managed_key(&status("hello", local, true), local), None);
        let mut unknown = status("hello", name, true);
        unknown.service = None;
        assert_eq!(managed_key(&unknown, name), None);
    }
}
