//! A pod as the driver seam reports it: its phase, readiness, address and, when it does not
//! run, why, in the words `kubectl describe` would use.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Event, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use runway_driver::{ExitRecord, Phase, Replica};
use runway_render::{DEFAULT_CONTAINER, REVISION_ANNOTATION, REVISION_LABEL, SERVICE_LABEL};

/// What the EndpointSlices say of one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) address: SocketAddr,
    pub(crate) ready: bool,
}

/// The endpoints of the slices, by the name of the pod each points at.
pub(crate) fn endpoints<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
) -> HashMap<String, Endpoint> {
    let mut found = HashMap::new();
    for slice in slices {
        let Some(port) = slice
            .ports
            .as_ref()
            .and_then(|ports| ports.first())
            .and_then(|port| port.port)
            .and_then(|port| u16::try_from(port).ok())
        else {
            continue;
        };
        for endpoint in &slice.endpoints {
            let Some(pod) = endpoint
                .target_ref
                .as_ref()
                .filter(|target| target.kind.as_deref() == Some("Pod"))
                .and_then(|target| target.name.clone())
            else {
                continue;
            };
            let Some(ip) = endpoint
                .addresses
                .first()
                .and_then(|a| a.parse::<IpAddr>().ok())
            else {
                continue;
            };
            let conditions = endpoint.conditions.as_ref();
            let terminating = conditions.and_then(|c| c.terminating).unwrap_or(false);
            // An unset `ready` means ready, as the API documents it.
            let ready = conditions.and_then(|c| c.ready).unwrap_or(true) && !terminating;
            found.insert(
                pod,
                Endpoint {
                    address: SocketAddr::new(ip, port),
                    ready,
                },
            );
        }
    }
    found
}

/// The name of the pod's service container: the one its annotation names, else the first.
pub(crate) fn main_container(pod: &Pod) -> Option<String> {
    if let Some(name) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DEFAULT_CONTAINER))
    {
        return Some(name.clone());
    }
    Some(pod.spec.as_ref()?.containers.first()?.name.clone())
}

/// The revision a pod belongs to: its full name, from the annotation (its label holds the
/// name of the revision's objects, which is shorter when the revision's name is long).
pub(crate) fn revision(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION_ANNOTATION))
        .or_else(|| pod.metadata.labels.as_ref()?.get(REVISION_LABEL))
        .map(String::as_str)
}

/// The replica id of a pod of `revision`: `{revision}-{the first 6 hex digits of its uid}`,
/// the seam's shape, stable for the pod's life and unique among the revision's pods.
pub(crate) fn replica_id(revision: &str, pod: &Pod) -> Option<String> {
    let uid = pod.metadata.uid.as_deref()?;
    let hex: String = uid
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(6)
        .collect::<String>()
        .to_ascii_lowercase();
    (hex.len() == 6).then(|| format!("{revision}-{hex}"))
}

/// The pod as a replica, or `None` for a pod that is not a revision's.
pub(crate) fn replica(
    pod: &Pod,
    endpoint: Option<Endpoint>,
    warnings: &HashMap<String, String>,
) -> Option<Replica> {
    let labels = pod.metadata.labels.as_ref()?;
    let revision = revision(pod)?.to_owned();
    let id = replica_id(&revision, pod)?;
    let name = pod.metadata.name.clone().unwrap_or_default();
    let status = pod.status.as_ref();
    let main = main_container(pod);
    let container = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| Some(&c.name) == main.as_ref()));
    let diagnosis = diagnose(pod, container);
    let restarts = container.map_or(0, |c| u32::try_from(c.restart_count).unwrap_or(0));
    let address = endpoint
        .map(|e| e.address)
        .or_else(|| pod_address(pod, status.and_then(|s| s.pod_ip.as_deref())));
    // A worker has no port, so no Service and no endpoint: its pod's readiness is its own.
    let serves = pod_address(pod, Some("0.0.0.0")).is_some();
    let ready = diagnosis.phase == Phase::Running
        && if serves {
            endpoint.is_some_and(|e| e.ready)
        } else {
            pod_ready(pod)
        };
    let warning = diagnosis
        .warning
        .or_else(|| (!ready).then(|| warnings.get(&name).cloned()).flatten());
    Some(Replica {
        id,
        service: labels.get(SERVICE_LABEL).cloned(),
        revision: Some(revision),
        managed: labels
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str)
            == Some("runway"),
        phase: diagnosis.phase,
        ready,
        address,
        restarts,
        consecutive_failures: if matches!(diagnosis.phase, Phase::CrashLoop | Phase::BackingOff) {
            restarts.max(1)
        } else {
            0
        },
        started_at_ms: container
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.running.as_ref())
            .and_then(|r| r.started_at.as_ref())
            .or(status.and_then(|s| s.start_time.as_ref()))
            .map(millis),
        next_start_at_ms: None,
        message: diagnosis.message,
        warning,
        last_exit: container
            .and_then(|c| c.last_state.as_ref())
            .and_then(|s| s.terminated.as_ref())
            .map(exit_record),
    })
}

/// Whether the pod is scheduled, running and ready: the ReplicaSet's highest rank.
pub(crate) fn running_and_ready(pod: &Pod) -> bool {
    let scheduled = pod
        .spec
        .as_ref()
        .is_some_and(|spec| spec.node_name.is_some());
    let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    scheduled && running && pod_ready(pod)
}

/// Whether the pod's `Ready` condition is true.
fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// The pod's IP and its first container's first port: where it takes traffic before an
/// EndpointSlice names it (and while it drains, after).
fn pod_address(pod: &Pod, ip: Option<&str>) -> Option<SocketAddr> {
    let ip: IpAddr = ip?.parse().ok()?;
    let port = pod
        .spec
        .as_ref()?
        .containers
        .first()?
        .ports
        .as_ref()?
        .first()?
        .container_port;
    Some(SocketAddr::new(ip, u16::try_from(port).ok()?))
}

struct Diagnosis {
    phase: Phase,
    message: String,
    warning: Option<String>,
}

/// The pod's phase for the seam, and why, from its status as the kubelet and scheduler wrote
/// it.
fn diagnose(pod: &Pod, container: Option<&ContainerStatus>) -> Diagnosis {
    let said = |phase, message: String| Diagnosis {
        phase,
        message,
        warning: None,
    };
    if pod.metadata.deletion_timestamp.is_some() {
        return said(
            Phase::Stopping,
            "stopping: its pod is being deleted".to_owned(),
        );
    }
    let status = pod.status.as_ref();
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => return said(Phase::Exited, "its pod completed".to_owned()),
        Some("Failed") => {
            let why = status
                .and_then(|s| s.message.clone().or_else(|| s.reason.clone()))
                .unwrap_or_else(|| "its pod failed".to_owned());
            return said(Phase::Failed, why);
        }
        _ => {}
    }
    let unscheduled = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| {
            conditions
                .iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        });
    if let Some(condition) = unscheduled {
        let why = condition
            .message
            .clone()
            .or_else(|| condition.reason.clone())
            .unwrap_or_default();
        return Diagnosis {
            phase: Phase::Starting,
            message: "waiting to be scheduled".to_owned(),
            warning: Some(format!("its pod cannot be scheduled: {why}")),
        };
    }
    let state = container.and_then(|c| c.state.as_ref());
    if let Some(waiting) = state.and_then(|s| s.waiting.as_ref()) {
        let reason = waiting.reason.as_deref().unwrap_or_default();
        let detail = waiting
            .message
            .as_deref()
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        return match reason {
            "CrashLoopBackOff" => said(
                Phase::CrashLoop,
                format!("crash loop (CrashLoopBackOff){detail}"),
            ),
            "ImagePullBackOff" | "ErrImagePull" | "InvalidImageName" | "ErrImageNeverPull" => said(
                Phase::BackingOff,
                format!("its image cannot be pulled ({reason}){detail}"),
            ),
            "CreateContainerConfigError" | "CreateContainerError" | "RunContainerError" => said(
                Phase::BackingOff,
                format!("its container cannot be created ({reason}){detail}"),
            ),
            _ => said(Phase::Starting, format!("starting ({reason}){detail}")),
        };
    }
    if state.and_then(|s| s.running.as_ref()).is_some() {
        return said(Phase::Running, "running".to_owned());
    }
    if let Some(terminated) = state.and_then(|s| s.terminated.as_ref()) {
        return said(Phase::BackingOff, exit_record(terminated).reason);
    }
    said(Phase::Starting, "starting".to_owned())
}

/// How a container's process ended, as its last termination says.
fn exit_record(terminated: &ContainerStateTerminated) -> ExitRecord {
    let oom_killed = terminated.reason.as_deref() == Some("OOMKilled");
    let signal = terminated
        .signal
        .filter(|&s| s > 0)
        .or_else(|| (terminated.exit_code > 128).then(|| terminated.exit_code - 128))
        .map(signal_name);
    let reason = if oom_killed {
        format!(
            "killed for going over its memory limit (OOMKilled, code {})",
            terminated.exit_code
        )
    } else {
        match &signal {
            Some(signal) => format!("killed by {signal} (code {})", terminated.exit_code),
            None => format!("exited with code {}", terminated.exit_code),
        }
    };
    ExitRecord {
        code: terminated.exit_code,
        signal,
        oom_killed,
        cause: None,
        reason,
        last_output: terminated
            .message
            .as_deref()
            .map(|m| m.lines().map(str::to_owned).collect())
            .unwrap_or_default(),
        at_ms: terminated.finished_at.as_ref().map_or(0, millis),
    }
}

fn signal_name(number: i32) -> String {
    match number {
        1 => "SIGHUP".to_owned(),
        2 => "SIGINT".to_owned(),
        6 => "SIGABRT".to_owned(),
        9 => "SIGKILL".to_owned(),
        11 => "SIGSEGV".to_owned(),
        15 => "SIGTERM".to_owned(),
        other => format!("signal {other}"),
    }
}

fn millis(time: &Time) -> u64 {
    u64::try_from(time.0.as_millisecond()).unwrap_or(0)
}

/// The latest warning event of each pod, by pod name: a failing probe (`Unhealthy`), a
/// scheduling failure, a failed pull, as `reason: message`.
pub(crate) fn warnings<'a>(events: impl IntoIterator<Item = &'a Event>) -> HashMap<String, String> {
    let mut latest: HashMap<String, (String, String)> = HashMap::new();
    for event in events {
        if event.type_.as_deref() != Some("Warning")
            || event.involved_object.kind.as_deref() != Some("Pod")
        {
            continue;
        }
        let Some(pod) = event.involved_object.name.clone() else {
            continue;
        };
        let at = event
            .last_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .or_else(|| event.event_time.as_ref().map(|t| t.0.to_string()))
            .unwrap_or_default();
        let text = format!(
            "{}: {}",
            event.reason.as_deref().unwrap_or("Warning"),
            event.message.as_deref().unwrap_or_default().trim()
        );
        match latest.get(&pod) {
            Some((seen, _)) if *seen > at => {}
            _ => {
                latest.insert(pod, (at, text));
            }
        }
    }
    latest
        .into_iter()
        .map(|(pod, (_, text))| (pod, text))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "hello-dev-00002-7d9f8-abcde",
                "uid": "3f9a1c2e-0000-4000-8000-000000000000",
                "labels": {
                    "runway.dev/revision": "hello-dev-00002",
                    "runway.dev/service": "hello",
                    "app.kubernetes.io/managed-by": "runway",
                },
            },
            "spec": {"containers": [{"name": "hello", "ports": [{"containerPort": 8080}]}]},
            "status": status,
        }))
        .unwrap()
    }

    fn slice(ready: bool) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": "hello-dev-00002-x1"},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": [{
                "addresses": ["10.0.0.7"],
                "conditions": {"ready": ready, "serving": ready, "terminating": false},
                "targetRef": {"kind": "Pod", "name": "hello-dev-00002-7d9f8-abcde"},
            }],
        }))
        .unwrap()
    }

    fn replica_of(pod: &Pod, slices: &[EndpointSlice]) -> Replica {
        let endpoints = endpoints(slices);
        let endpoint = endpoints.get("hello-dev-00002-7d9f8-abcde").copied();
        replica(pod, endpoint, &HashMap::new()).unwrap()
    }

    #[test]
    fn a_running_pod_is_ready_at_its_endpoint_address() {
        let running = pod(json!({
            "phase": "Running",
            "podIP": "10.0.0.7",
            "containerStatuses": [{
                "name": "hello", "image": "x", "imageID": "", "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": "2026-11-24T05:00:00Z"}},
            }],
        }));
        let replica = replica_of(&running, &[slice(true)]);
        assert_eq!(replica.id, "hello-dev-00002-3f9a1c");
        assert_eq!(replica.revision.as_deref(), Some("hello-dev-00002"));
        assert_eq!(replica.service.as_deref(), Some("hello"));
        assert!(replica.managed && replica.ready);
        assert_eq!(replica.phase, Phase::Running);
        assert_eq!(replica.address, Some("10.0.0.7:8080".parse().unwrap()));
        // Not ready by its EndpointSlice: running, not ready.
        let replica = replica_of(&running, &[slice(false)]);
        assert!(!replica.ready);
    }

    #[test]
    fn a_crash_loop_says_how_the_container_ended_and_what_it_said() {
        let crashing = pod(json!({
            "phase": "Running",
            "containerStatuses": [{
                "name": "hello", "image": "x", "imageID": "", "ready": false, "restartCount": 4,
                "state": {"waiting": {"reason": "CrashLoopBackOff",
                    "message": "back-off 40s restarting failed container=hello"}},
                "lastState": {"terminated": {"exitCode": 3, "reason": "Error",
                    "message": "cannot reach the database\n",
                    "finishedAt": "2026-11-24T05:00:03Z"}},
            }],
        }));
        let replica = replica_of(&crashing, &[]);
        assert_eq!(replica.phase, Phase::CrashLoop);
        assert_eq!(replica.restarts, 4);
        assert!(
            replica.message.contains("CrashLoopBackOff"),
            "{}",
            replica.message
        );
        let exit = replica.last_exit.unwrap();
        assert_eq!((exit.code, exit.oom_killed), (3, false));
        assert_eq!(exit.last_output, ["cannot reach the database"]);
        assert_eq!(exit.reason, "exited with code 3");

        let oom = pod(json!({
            "phase": "Running",
            "containerStatuses": [{
                "name": "hello", "image": "x", "imageID": "", "ready": false, "restartCount": 1,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
            }],
        }));
        let exit = replica_of(&oom, &[]).last_exit.unwrap();
        assert!(
            exit.oom_killed && exit.reason.contains("OOMKilled"),
            "{exit:?}"
        );
        assert_eq!(exit.signal.as_deref(), Some("SIGKILL"));
    }

    #[test]
    fn pull_failures_and_scheduling_are_told_as_such() {
        let pulling = pod(json!({
            "phase": "Pending",
            "containerStatuses": [{
                "name": "hello", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ImagePullBackOff",
                    "message": "Back-off pulling image \"registry.example/hello:1\""}},
            }],
        }));
        let replica = replica_of(&pulling, &[]);
        assert_eq!(replica.phase, Phase::BackingOff);
        assert!(
            replica.message.contains("image cannot be pulled"),
            "{}",
            replica.message
        );
        assert!(
            replica.message.contains("registry.example/hello:1"),
            "{}",
            replica.message
        );

        let unschedulable = pod(json!({
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient memory."}],
        }));
        let replica = replica_of(&unschedulable, &[]);
        assert_eq!(replica.phase, Phase::Starting);
        assert!(
            replica
                .warning
                .as_deref()
                .is_some_and(|w| w.contains("Insufficient memory")),
            "{replica:?}"
        );

        let mut deleting = pod(json!({"phase": "Running"}));
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(replica_of(&deleting, &[]).phase, Phase::Stopping);
    }

    #[test]
    fn the_latest_warning_of_a_pod_is_its_why() {
        let event = |reason: &str, at: &str, message: &str| -> Event {
            serde_json::from_value(json!({
                "metadata": {"name": format!("e-{reason}-{at}")},
                "involvedObject": {"kind": "Pod", "name": "p"},
                "type": "Warning",
                "reason": reason,
                "message": message,
                "lastTimestamp": at,
            }))
            .unwrap()
        };
        let events = [
            event(
                "Unhealthy",
                "2026-11-24T05:00:02Z",
                "Readiness probe failed: 503",
            ),
            event("Pulled", "2026-11-24T05:00:01Z", "older"),
        ];
        assert_eq!(
            warnings(&events).get("p").map(String::as_str),
            Some("Unhealthy: Readiness probe failed: 503")
        );
    }
}
