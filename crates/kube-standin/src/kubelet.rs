//! The simulated kubelet (and scheduler): one task per pod that binds it to the node, gives
//! it a loopback address, runs its containers per the revision's [`Behavior`], writes its
//! status and events as the kubelet does, serves HTTP on the first container's first port
//! while that container runs, and carries out graceful deletion.

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use crate::resources::{EVENTS, PODS};
use crate::store::{self, Key, name_of, namespace_of, uid_of};
use crate::{Behavior, NODE_NAME, REVISION_LABEL, Shared, World, util};

/// How long a crashing container runs before it exits.
const RUN_BEFORE_CRASH: Duration = Duration::from_millis(100);
/// How long a crashed container waits in CrashLoopBackOff before its restart.
const RESTART_AFTER: Duration = Duration::from_millis(900);
/// The longest a deleted pod takes to terminate, whatever its grace period.
const MAX_TERMINATION: Duration = Duration::from_millis(300);
/// How often a failing readiness probe's event repeats.
const PROBE_PERIOD: Duration = Duration::from_secs(10);

/// Loopback addresses in use by any server in this process.
static ADDRESSES: Mutex<Option<HashSet<Ipv4Addr>>> = Mutex::new(None);

/// A pod's loopback address, given back when dropped (also when its task is aborted).
#[derive(Debug)]
struct Address(Ipv4Addr);

impl Drop for Address {
    fn drop(&mut self) {
        let mut used = ADDRESSES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(used) = used.as_mut() {
            used.remove(&self.0);
        }
    }
}

/// A free address in 127.77.0.0/16 on which `port` can be bound.
fn allocate_ip(port: Option<u16>) -> Option<Address> {
    for _ in 0..1000 {
        let r = util::random();
        let ip = Ipv4Addr::new(
            127,
            77,
            u8::try_from((r >> 8) % 256).unwrap_or(0),
            u8::try_from(r % 254 + 1).unwrap_or(1),
        );
        let mut used = ADDRESSES.lock().unwrap_or_else(|e| e.into_inner());
        let used = used.get_or_insert_with(HashSet::new);
        if used.contains(&ip) {
            continue;
        }
        if let Some(p) = port
            && std::net::TcpListener::bind((ip, p)).is_err()
        {
            continue;
        }
        used.insert(ip);
        return Some(Address(ip));
    }
    None
}

pub(crate) fn pod_ready(pod: &Value) -> bool {
    condition(pod, "Ready").is_some_and(|c| c.get("status") == Some(&json!("True")))
}

pub(crate) fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

/// The first container's first port.
fn first_port(pod: &Value) -> Option<u16> {
    pod.pointer("/spec/containers/0/ports/0/containerPort")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
}

/// Records an event about `pod` as the kubelet (or the scheduler) does: a repeat of the same
/// reason and message counts up the existing one.
pub(crate) fn event(
    w: &mut World,
    pod: &Value,
    kind: &str,
    reason: &str,
    message: &str,
    container: Option<&str>,
    component: &str,
) {
    let ns = namespace_of(pod).to_owned();
    let uid = uid_of(pod).to_owned();
    let now = util::now();
    let existing = w
        .store
        .list(EVENTS, Some(&ns))
        .find(|e| {
            e.pointer("/involvedObject/uid").and_then(Value::as_str) == Some(uid.as_str())
                && e.get("reason").and_then(Value::as_str) == Some(reason)
                && e.get("message").and_then(Value::as_str) == Some(message)
        })
        .cloned();
    if let Some(mut e) = existing {
        let count = e.get("count").and_then(Value::as_i64).unwrap_or(1);
        e["count"] = json!(count + 1);
        e["lastTimestamp"] = json!(now);
        w.store.update(EVENTS, e);
        return;
    }
    let mut involved = json!({
        "kind": "Pod",
        "namespace": ns,
        "name": name_of(pod),
        "uid": uid,
        "apiVersion": "v1",
        "resourceVersion": store::rv_of(pod).to_string(),
    });
    if let Some(c) = container {
        involved["fieldPath"] = json!(format!("spec.containers{{{c}}}"));
    }
    let host = if component == "kubelet" {
        NODE_NAME
    } else {
        ""
    };
    let mut source = json!({"component": component});
    if !host.is_empty() {
        source["host"] = json!(host);
    }
    let e = json!({
        "metadata": {
            "name": format!("{}.{:016x}", name_of(pod), util::random()),
            "namespace": ns,
        },
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "source": source,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "type": kind,
        "eventTime": null,
        "reportingComponent": component,
        "reportingInstance": host,
    });
    w.store.create(EVENTS, e);
}

#[derive(Debug, Clone)]
enum State {
    Waiting {
        reason: String,
        message: String,
        since: Instant,
    },
    Running {
        id: String,
        started: SystemTime,
        since: Instant,
    },
    Terminated(Value),
}

#[derive(Debug)]
struct Container {
    name: String,
    image: String,
    /// Instances started so far; `restartCount` is one less.
    attempts: u32,
    ready: bool,
    state: State,
    /// `lastState.terminated`.
    last: Option<Value>,
}

impl Container {
    fn running_id(&self) -> Option<&str> {
        match &self.state {
            State::Running { id, .. } => Some(id),
            _ => None,
        }
    }

    fn restarts(&self) -> u32 {
        self.attempts.saturating_sub(1)
    }
}

/// What the task does outside the lock.
enum Action {
    Listen {
        ip: Ipv4Addr,
        port: u16,
        revision: String,
        container_id: String,
    },
    StopListening,
}

enum Next {
    /// Wake at this instant, or on any change.
    At(Option<Instant>),
    /// The pod's task is over (`gone`: the pod is gone too).
    Done { gone: bool },
}

/// A condition's status, reason, message and when it last changed.
#[derive(Debug, Clone, PartialEq)]
struct Cond {
    kind: &'static str,
    ok: bool,
    reason: String,
    message: String,
    since: String,
}

struct Pod {
    key: Key,
    uid: String,
    ip: Option<Address>,
    scheduled: bool,
    start_time: Option<String>,
    containers: Vec<Container>,
    conditions: Vec<Cond>,
    /// Events sent once (by reason).
    emitted: HashSet<&'static str>,
    terminating: Option<Instant>,
    next_probe_event: Option<Instant>,
    actions: Vec<Action>,
}

impl Pod {
    fn new(key: Key, uid: String) -> Self {
        Self {
            key,
            uid,
            ip: None,
            scheduled: false,
            start_time: None,
            containers: Vec::new(),
            conditions: Vec::new(),
            emitted: HashSet::new(),
            terminating: None,
            next_probe_event: None,
            actions: Vec::new(),
        }
    }

    fn once(&mut self, what: &'static str) -> bool {
        self.emitted.insert(what)
    }

    fn set_condition(&mut self, kind: &'static str, ok: bool, reason: &str, message: &str) {
        let now = util::now();
        match self.conditions.iter_mut().find(|c| c.kind == kind) {
            Some(c) => {
                if c.ok != ok {
                    c.since = now;
                }
                c.ok = ok;
                c.reason = reason.to_owned();
                c.message = message.to_owned();
            }
            None => self.conditions.push(Cond {
                kind,
                ok,
                reason: reason.to_owned(),
                message: message.to_owned(),
                since: now,
            }),
        }
    }

    /// Advances the pod by what its behaviour and the time say; writes its status.
    fn step(&mut self, w: &mut World, now: Instant) -> Next {
        let Some(pod) = w.store.get(&self.key).cloned() else {
            return Next::Done { gone: true };
        };
        if uid_of(&pod) != self.uid {
            return Next::Done { gone: true };
        }
        if self.containers.is_empty() {
            self.containers = pod
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| Container {
                    name: c
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    image: c
                        .get("image")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    attempts: 0,
                    ready: false,
                    state: State::Waiting {
                        reason: "ContainerCreating".into(),
                        message: String::new(),
                        since: now,
                    },
                    last: None,
                })
                .collect();
        }
        let mut wake: Option<Instant> = None;
        let mut earliest = |t: Instant| {
            wake = Some(wake.map_or(t, |w: Instant| w.min(t)));
        };

        if pod.pointer("/metadata/deletionTimestamp").is_some() {
            let grace = pod
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_u64)
                .map_or(MAX_TERMINATION, Duration::from_secs)
                .min(MAX_TERMINATION);
            if self.terminating.is_none() {
                self.terminating = Some(now + grace);
                let running: Vec<String> = self
                    .containers
                    .iter()
                    .filter(|c| c.running_id().is_some())
                    .map(|c| c.name.clone())
                    .collect();
                for name in running {
                    event(
                        w,
                        &pod,
                        "Normal",
                        "Killing",
                        &format!("Stopping container {name}"),
                        Some(&name),
                        "kubelet",
                    );
                }
            }
            let deadline = self.terminating.unwrap_or(now);
            if now < deadline {
                self.write_status(w, &pod, false);
                return Next::At(Some(deadline));
            }
            for i in 0..self.containers.len() {
                self.stop_container(w, i, 0, "Completed", "");
            }
            self.actions.push(Action::StopListening);
            let finalizers = pod
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|f| !f.is_empty());
            if !finalizers {
                w.store.remove(&self.key);
                return Next::Done { gone: true };
            }
            self.write_status(w, &pod, true);
            return Next::Done { gone: false };
        }

        let behavior = w.behavior_for(&pod);
        if !self.scheduled {
            if let Behavior::Unschedulable { message } = &behavior {
                self.set_condition("PodScheduled", false, "Unschedulable", message);
                if self.once("FailedScheduling") {
                    event(
                        w,
                        &pod,
                        "Warning",
                        "FailedScheduling",
                        message,
                        None,
                        "default-scheduler",
                    );
                }
                self.write_status(w, &pod, false);
                return Next::At(None);
            }
            self.schedule(w, &pod);
        }
        let pod = w.store.get(&self.key).cloned().unwrap_or(pod);

        for i in 0..self.containers.len() {
            let listen = i == 0;
            match &behavior {
                Behavior::Ready { .. } | Behavior::NotReady | Behavior::Unschedulable { .. } => {
                    let after = match &behavior {
                        Behavior::Ready { after } => Some(*after),
                        Behavior::NotReady => None,
                        _ => Some(Behavior::default_ready_after()),
                    };
                    if self.containers[i].running_id().is_none() {
                        self.start_container(w, &pod, i, listen, &[]);
                    }
                    let since = match &self.containers[i].state {
                        State::Running { since, .. } => *since,
                        _ => now,
                    };
                    match after {
                        Some(after) => {
                            let ready = now >= since + after;
                            self.containers[i].ready = ready;
                            if !ready {
                                earliest(since + after);
                            }
                        }
                        None => {
                            self.containers[i].ready = false;
                            let due = *self.next_probe_event.get_or_insert(now);
                            if now >= due {
                                let name = self.containers[i].name.clone();
                                event(
                                    w,
                                    &pod,
                                    "Warning",
                                    "Unhealthy",
                                    "Readiness probe failed: HTTP probe failed with statuscode: 503",
                                    Some(&name),
                                    "kubelet",
                                );
                                self.next_probe_event = Some(now + PROBE_PERIOD);
                            }
                            if let Some(t) = self.next_probe_event {
                                earliest(t);
                            }
                        }
                    }
                }
                Behavior::CrashLoop { .. } | Behavior::OomKilled => {
                    let (code, reason, message, logs) = match &behavior {
                        Behavior::CrashLoop {
                            exit_code,
                            message,
                            logs,
                        } => (
                            *exit_code,
                            if *exit_code == 0 {
                                "Completed"
                            } else {
                                "Error"
                            },
                            message.clone(),
                            logs.clone(),
                        ),
                        _ => (137, "OOMKilled", String::new(), Vec::new()),
                    };
                    self.containers[i].ready = false;
                    match self.containers[i].state.clone() {
                        State::Running { since, .. } if now >= since + RUN_BEFORE_CRASH => {
                            self.stop_container(w, i, code, reason, &message);
                            let c = &self.containers[i];
                            let pod_name = name_of(&pod);
                            let ns = namespace_of(&pod);
                            let waiting = format!(
                                "back-off {} restarting failed container={} pod={pod_name}_{ns}({})",
                                backoff(c.restarts()),
                                c.name,
                                self.uid
                            );
                            let name = c.name.clone();
                            self.containers[i].state = State::Waiting {
                                reason: "CrashLoopBackOff".into(),
                                message: waiting,
                                since: now,
                            };
                            event(
                                w,
                                &pod,
                                "Warning",
                                "BackOff",
                                &format!(
                                    "Back-off restarting failed container {name} in pod {pod_name}_{ns}({})",
                                    self.uid
                                ),
                                Some(&name),
                                "kubelet",
                            );
                            earliest(now + RESTART_AFTER);
                        }
                        State::Running { since, .. } => earliest(since + RUN_BEFORE_CRASH),
                        State::Waiting { reason, since, .. }
                            if reason == "CrashLoopBackOff" && now < since + RESTART_AFTER =>
                        {
                            earliest(since + RESTART_AFTER);
                        }
                        _ => {
                            self.start_container(w, &pod, i, false, &logs);
                            earliest(now + RUN_BEFORE_CRASH);
                        }
                    }
                }
                Behavior::ImagePullBackOff => {
                    if self.containers[i].running_id().is_some() {
                        self.stop_container(w, i, 137, "Error", "");
                    }
                    let image = self.containers[i].image.clone();
                    let name = self.containers[i].name.clone();
                    let message = format!("Back-off pulling image {image:?}");
                    self.containers[i].ready = false;
                    let changed = !matches!(&self.containers[i].state,
                        State::Waiting { reason, .. } if reason == "ImagePullBackOff");
                    if changed {
                        self.containers[i].state = State::Waiting {
                            reason: "ImagePullBackOff".into(),
                            message: message.clone(),
                            since: now,
                        };
                        event(
                            w,
                            &pod,
                            "Normal",
                            "Pulling",
                            &format!("Pulling image {image:?}"),
                            Some(&name),
                            "kubelet",
                        );
                        event(
                            w,
                            &pod,
                            "Warning",
                            "Failed",
                            &format!(
                                "Failed to pull image {image:?}: rpc error: code = NotFound desc = failed to pull and unpack image {image:?}: not found"
                            ),
                            Some(&name),
                            "kubelet",
                        );
                        event(
                            w,
                            &pod,
                            "Normal",
                            "BackOff",
                            &message,
                            Some(&name),
                            "kubelet",
                        );
                    }
                }
            }
        }
        self.write_status(w, &pod, false);
        Next::At(wake)
    }

    /// Binds the pod to the node and gives it an address.
    fn schedule(&mut self, w: &mut World, pod: &Value) {
        self.scheduled = true;
        self.ip = allocate_ip(first_port(pod));
        self.start_time = Some(util::now());
        self.set_condition("PodScheduled", true, "", "");
        let mut bound = pod.clone();
        bound["spec"]["nodeName"] = json!(NODE_NAME);
        w.store.update(PODS, bound);
        let ns = namespace_of(pod);
        event(
            w,
            pod,
            "Normal",
            "Scheduled",
            &format!("Successfully assigned {ns}/{} to {NODE_NAME}", name_of(pod)),
            None,
            "default-scheduler",
        );
    }

    fn start_container(
        &mut self,
        w: &mut World,
        pod: &Value,
        i: usize,
        listen: bool,
        lines: &[String],
    ) {
        let now = Instant::now();
        let c = &mut self.containers[i];
        c.attempts += 1;
        let id = format!(
            "containerd://{}",
            util::hex64(&format!("{}/{}/{}", self.uid, c.name, c.attempts))
        );
        w.logs.open(&self.uid, &id);
        let port = first_port(pod);
        let revision = pod
            .pointer("/metadata/labels")
            .and_then(|l| l.get(REVISION_LABEL))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if listen && let (Some(Address(ip)), Some(port)) = (&self.ip, port) {
            let ip = *ip;
            w.logs.write(&id, &format!("listening on {ip}:{port}"));
            self.actions.push(Action::Listen {
                ip,
                port,
                revision,
                container_id: id.clone(),
            });
        } else if lines.is_empty() {
            w.logs.write(&id, &format!("started container {}", c.name));
        }
        for l in lines {
            w.logs.write(&id, l);
        }
        c.state = State::Running {
            id,
            started: SystemTime::now(),
            since: now,
        };
        let name = c.name.clone();
        let image = c.image.clone();
        let first = c.attempts == 1;
        if first {
            event(
                w,
                pod,
                "Normal",
                "Pulled",
                &format!("Container image {image:?} already present on machine"),
                Some(&name),
                "kubelet",
            );
        }
        event(
            w,
            pod,
            "Normal",
            "Created",
            &format!("Created container: {name}"),
            Some(&name),
            "kubelet",
        );
        event(
            w,
            pod,
            "Normal",
            "Started",
            &format!("Started container {name}"),
            Some(&name),
            "kubelet",
        );
    }

    /// The container's running instance exits.
    fn stop_container(&mut self, w: &mut World, i: usize, code: i32, reason: &str, message: &str) {
        let c = &mut self.containers[i];
        let State::Running { id, started, .. } = &c.state else {
            return;
        };
        w.logs.end(id);
        let mut terminated = json!({
            "exitCode": code,
            "reason": reason,
            "startedAt": util::rfc3339(*started),
            "finishedAt": util::now(),
            "containerID": id,
        });
        if !message.is_empty() {
            terminated["message"] = json!(message);
        }
        c.last = Some(terminated.clone());
        c.state = State::Terminated(terminated);
        c.ready = false;
        if i == 0 {
            self.actions.push(Action::StopListening);
        }
    }

    fn write_status(&mut self, w: &mut World, pod: &Value, finished: bool) {
        let qos = pod
            .pointer("/status/qosClass")
            .cloned()
            .unwrap_or_else(|| json!("BestEffort"));
        let mut status = json!({"phase": "Pending", "qosClass": qos});
        if self.scheduled {
            let all_ready = !self.containers.is_empty() && self.containers.iter().all(|c| c.ready);
            let unready: Vec<&str> = self
                .containers
                .iter()
                .filter(|c| !c.ready)
                .map(|c| c.name.as_str())
                .collect();
            let why = format!("containers with unready status: [{}]", unready.join(" "));
            let (reason, message) = if all_ready {
                ("", "")
            } else {
                ("ContainersNotReady", why.as_str())
            };
            self.set_condition("PodReadyToStartContainers", !finished, "", "");
            self.set_condition("Initialized", true, "", "");
            self.set_condition("Ready", all_ready, reason, message);
            self.set_condition("ContainersReady", all_ready, reason, message);
            let started = self.containers.iter().any(|c| c.attempts > 0);
            let phase = if finished {
                "Succeeded"
            } else if started {
                "Running"
            } else {
                "Pending"
            };
            status["phase"] = json!(phase);
            status["hostIP"] = json!("127.0.0.1");
            status["hostIPs"] = json!([{"ip": "127.0.0.1"}]);
            if let Some(Address(ip)) = &self.ip {
                status["podIP"] = json!(ip.to_string());
                status["podIPs"] = json!([{"ip": ip.to_string()}]);
            }
            if let Some(t) = &self.start_time {
                status["startTime"] = json!(t);
            }
            status["containerStatuses"] =
                Value::Array(self.containers.iter().map(container_status).collect());
        }
        let order = [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        ];
        let conditions: Vec<Value> = order
            .iter()
            .filter_map(|k| self.conditions.iter().find(|c| c.kind == *k))
            .map(|c| {
                let mut v = json!({
                    "type": c.kind,
                    "status": if c.ok { "True" } else { "False" },
                    "lastProbeTime": null,
                    "lastTransitionTime": c.since,
                });
                if !c.reason.is_empty() {
                    v["reason"] = json!(c.reason);
                }
                if !c.message.is_empty() {
                    v["message"] = json!(c.message);
                }
                v
            })
            .collect();
        status["conditions"] = Value::Array(conditions);
        let current = w
            .store
            .get(&self.key)
            .cloned()
            .unwrap_or_else(|| pod.clone());
        if current.get("status") != Some(&status) {
            let mut new = current;
            new["status"] = status;
            w.store.update(PODS, new);
        }
    }
}

impl Behavior {
    fn default_ready_after() -> Duration {
        match Behavior::default() {
            Behavior::Ready { after } => after,
            _ => Duration::ZERO,
        }
    }
}

fn container_status(c: &Container) -> Value {
    let state = match &c.state {
        State::Waiting {
            reason, message, ..
        } => {
            let mut w = json!({"reason": reason});
            if !message.is_empty() {
                w["message"] = json!(message);
            }
            json!({"waiting": w})
        }
        State::Running { started, .. } => {
            json!({"running": {"startedAt": util::rfc3339(*started)}})
        }
        State::Terminated(t) => json!({"terminated": t}),
    };
    let repo = match c.image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => c.image.as_str(),
    };
    let repo = repo.split('@').next().unwrap_or(repo);
    let mut v = json!({
        "name": c.name,
        "image": c.image,
        "imageID": if c.attempts > 0 { format!("{repo}@sha256:{}", util::hex64(&c.image)) } else { String::new() },
        "ready": c.ready,
        "started": c.running_id().is_some(),
        "restartCount": c.restarts(),
        "state": state,
        "lastState": c.last.as_ref().map_or_else(|| json!({}), |t| json!({"terminated": t})),
    });
    let id = match &c.state {
        State::Running { id, .. } => Some(id.clone()),
        State::Terminated(t) => t
            .get("containerID")
            .and_then(Value::as_str)
            .map(str::to_owned),
        State::Waiting { .. } => None,
    };
    if let Some(id) = id {
        v["containerID"] = json!(id);
    }
    v
}

/// The kubelet's back-off as its message prints it: 10s, 20s, 40s, ... up to 5m0s.
fn backoff(restarts: u32) -> String {
    let secs = 10u64.saturating_mul(1u64 << restarts.min(10)).min(300);
    if secs < 60 {
        format!("{secs}s")
    } else {
        format!("{}m{}s", secs / 60, secs % 60)
    }
}

/// Runs one pod until it is gone.
pub(crate) async fn run(shared: Arc<Shared>, key: Key, uid: String) {
    let mut pod = Pod::new(key, uid);
    let mut changed = shared.changed.subscribe();
    let mut shutdown = shared.shutdown.subscribe();
    let mut listener: Option<AbortHandle> = None;
    let gone = loop {
        let next = shared.with(|w| pod.step(w, Instant::now()));
        for action in std::mem::take(&mut pod.actions) {
            match action {
                Action::StopListening => {
                    if let Some(l) = listener.take() {
                        l.abort();
                    }
                }
                Action::Listen {
                    ip,
                    port,
                    revision,
                    container_id,
                } => {
                    if let Some(l) = listener.take() {
                        l.abort();
                    }
                    match bind(ip, port) {
                        Ok(l) => {
                            listener =
                                shared.spawn(serve(Arc::clone(&shared), l, revision, container_id));
                        }
                        Err(e) => shared.with(|w| {
                            w.logs
                                .write(&container_id, &format!("listen tcp {ip}:{port}: {e}"));
                        }),
                    }
                }
            }
        }
        match next {
            Next::Done { gone } => break gone,
            Next::At(at) => {
                let far = Instant::now() + Duration::from_secs(3600);
                tokio::select! {
                    _ = changed.changed() => {}
                    _ = tokio::time::sleep_until(at.unwrap_or(far)) => {}
                    _ = shutdown.changed() => break false,
                }
            }
        }
    };
    if let Some(l) = listener.take() {
        l.abort();
    }
    if gone {
        shared.with(|w| {
            w.logs.remove_pod(&pod.uid);
            w.kubelet.remove(&pod.uid);
        });
    }
}

fn bind(ip: Ipv4Addr, port: u16) -> std::io::Result<tokio::net::TcpListener> {
    let l = std::net::TcpListener::bind((ip, port))?;
    l.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(l)
}

/// The container's server: 200 and the revision to every request, a log line for each.
async fn serve(
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    revision: String,
    container_id: String,
) {
    let mut conns = JoinSet::new();
    loop {
        let Ok((tcp, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        while conns.try_join_next().is_some() {}
        let shared = Arc::clone(&shared);
        let revision = revision.clone();
        let id = container_id.clone();
        conns.spawn(async move {
            let service = service_fn(move |req: hyper::Request<Incoming>| {
                let line = format!(
                    "{peer} \"{} {} {:?}\" 200",
                    req.method(),
                    req.uri(),
                    req.version()
                );
                shared.with(|w| w.logs.write(&id, &line));
                let body = Bytes::from(format!("{revision}\n"));
                async move {
                    let mut resp = hyper::Response::new(Full::new(body));
                    resp.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
                    );
                    Ok::<_, Infallible>(resp)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_as_the_kubelet_prints_it() {
        assert_eq!(backoff(0), "10s");
        assert_eq!(backoff(2), "40s");
        assert_eq!(backoff(3), "1m20s");
        assert_eq!(backoff(9), "5m0s");
    }
}
