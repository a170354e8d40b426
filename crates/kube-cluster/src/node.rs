//! The node: what a kubelet does for the control plane, as a client of the real API server.
//!
//! It registers a Node (Ready, with capacity, addresses and a kubelet port) and renews its
//! Lease; for every pod the scheduler binds to it, a task gives the pod an address of the
//! cluster's range, writes its status (`pods/status`) and events per the [`Behavior`] of its
//! revision, serves HTTP on the first container's first port while that container runs, and
//! carries out graceful deletion (the final delete with grace 0 and the pod's uid). The
//! ReplicaSet, Deployment and EndpointSlice controllers do the rest, for real.
//!
//! Its kubelet port serves `/containerLogs/...` over HTTPS, so `pods/log` works through the API
//! server as on a cluster: `follow`, `previous`, `tailLines`, `timestamps` and `limitBytes`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node as NodeObject, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::{Behavior, Error, REVISION_LABEL};

/// The first wait after a failed pull; it doubles up to [`MAX_PULL_BACK_OFF`].
const PULL_BACK_OFF: Duration = Duration::from_millis(500);
/// The longest wait between two pulls of an image (a kubelet's is 5 minutes).
const MAX_PULL_BACK_OFF: Duration = Duration::from_secs(4);
/// How long a crashing container runs before it exits.
const RUN_BEFORE_CRASH: Duration = Duration::from_millis(100);
/// How long a crashed container waits in CrashLoopBackOff before its restart.
const RESTART_AFTER: Duration = Duration::from_millis(900);
/// The longest a deleted pod takes to terminate, whatever its grace period.
const MAX_TERMINATION: Duration = Duration::from_millis(300);
/// How often a failing readiness probe's event repeats, and the Lease is renewed.
const PERIOD: Duration = Duration::from_secs(10);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now() -> Time {
    Time(Timestamp::now())
}

/// One run of a container: its log lines (RFC 3339 time, text) and whether it still runs.
#[derive(Debug, Default)]
struct Attempt {
    lines: Vec<(String, String)>,
    running: bool,
}

/// The node, shared by its tasks.
pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) ip: Ipv4Addr,
    client: Client,
    behaviours: Mutex<Vec<(String, String, Behavior)>>,
    /// Free pod addresses.
    free: Mutex<Vec<Ipv4Addr>>,
    /// Container runs by (namespace, pod, container).
    logs: Mutex<HashMap<(String, String, String), Vec<Attempt>>>,
    logged: watch::Sender<u64>,
    /// Each running pod's latest object, by uid.
    pods: Mutex<HashMap<String, watch::Sender<Pod>>>,
    /// The roots (PEM) registries' certificates are trusted by, besides none.
    registry_roots: Mutex<Vec<Vec<u8>>>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("name", &self.name)
            .field("ip", &self.ip)
            .finish_non_exhaustive()
    }
}

/// A pod address, back in the pool when dropped.
struct Address {
    node: Arc<Node>,
    ip: Ipv4Addr,
}

impl Drop for Address {
    fn drop(&mut self) {
        lock(&self.node.free).push(self.ip);
    }
}

impl Node {
    /// Registers the node and starts its tasks on the current runtime.
    pub(crate) async fn start(
        client: Client,
        name: &str,
        ip: Ipv4Addr,
        pod_ips: Vec<Ipv4Addr>,
        tls: Arc<rustls::ServerConfig>,
    ) -> Result<Arc<Node>, Error> {
        let (logged, _) = watch::channel(0);
        let mut free = pod_ips;
        free.reverse();
        let node = Arc::new(Node {
            name: name.to_owned(),
            ip,
            client,
            behaviours: Mutex::new(Vec::new()),
            free: Mutex::new(free),
            logs: Mutex::new(HashMap::new()),
            logged,
            pods: Mutex::new(HashMap::new()),
            registry_roots: Mutex::new(Vec::new()),
        });
        let kubelet = TcpListener::bind((ip, 0))
            .await
            .map_err(|e| Error::Setup(format!("the kubelet port on {ip}: {e}")))?;
        let port = kubelet
            .local_addr()
            .map_err(|e| Error::Setup(format!("the kubelet port: {e}")))?
            .port();
        node.register(port).await?;
        tokio::spawn(Arc::clone(&node).serve_kubelet(kubelet, tls));
        tokio::spawn(Arc::clone(&node).renew_lease());
        tokio::spawn(Arc::clone(&node).watch_pods());
        Ok(node)
    }

    /// Trusts registries whose certificates `pem`'s roots sign, from the next pull.
    pub(crate) fn trust_registry(&self, pem: &[u8]) {
        lock(&self.registry_roots).push(pem.to_vec());
    }

    pub(crate) fn behave(&self, namespace: &str, revision: &str, behavior: Behavior) {
        lock(&self.behaviours).push((namespace.to_owned(), revision.to_owned(), behavior));
    }

    fn behavior_for(&self, pod: &Pod) -> Behavior {
        let namespace = pod.namespace().unwrap_or_default();
        let Some(revision) = pod.labels().get(REVISION_LABEL) else {
            return Behavior::default();
        };
        lock(&self.behaviours)
            .iter()
            .rev()
            .find(|(ns, r, _)| r == revision && (ns.is_empty() || *ns == namespace))
            .map(|(_, _, b)| b.clone())
            .unwrap_or_default()
    }

    async fn register(&self, port: u16) -> Result<(), Error> {
        let nodes: Api<NodeObject> = Api::all(self.client.clone());
        let object: NodeObject = serde_json::from_value(json!({
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
        }))
        .map_err(|e| Error::Setup(format!("the Node: {e}")))?;
        nodes
            .create(&PostParams::default(), &object)
            .await
            .map_err(|e| Error::Setup(format!("creating the Node: {e}")))?;
        // Room for every test sharing the cluster: pods request what their manifests ask.
        let resources =
            json!({"cpu": "10k", "memory": "40Ti", "pods": "10k", "ephemeral-storage": "100Ti"});
        let heartbeat = now();
        let condition = |kind: &str, status: &str, reason: &str| {
            json!({"type": kind, "status": status, "reason": reason, "message": reason,
                   "lastHeartbeatTime": heartbeat, "lastTransitionTime": heartbeat})
        };
        let status = json!({"status": {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [
                {"type": "InternalIP", "address": self.ip.to_string()},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "conditions": [
                condition("Ready", "True", "KubeletReady"),
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID"),
            ],
            "nodeInfo": {
                "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                "osImage": "kube-cluster", "containerRuntimeVersion": "kube-cluster://1",
                "kubeletVersion": "v1.36.3", "kubeProxyVersion": "", "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }});
        nodes
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| Error::Setup(format!("the Node's status: {e}")))?;
        // The API server taints a new Node not-ready; the node lifecycle controller, which
        // this cluster does not run, lifts it once the Node is Ready.
        nodes
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": null}})),
            )
            .await
            .map_err(|e| Error::Setup(format!("the Node's taints: {e}")))?;
        Ok(())
    }

    async fn renew_lease(self: Arc<Self>) {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), "kube-node-lease");
        loop {
            let lease = json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name},
                "spec": {
                    "holderIdentity": self.name,
                    "leaseDurationSeconds": 40,
                    "renewTime": MicroTime(Timestamp::now()),
                },
            });
            let _ = leases
                .patch(
                    &self.name,
                    &PatchParams::apply("kube-cluster-node").force(),
                    &Patch::Apply(&lease),
                )
                .await;
            tokio::time::sleep(PERIOD).await;
        }
    }

    async fn watch_pods(self: Arc<Self>) {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let config = watcher::Config::default().fields(&format!("spec.nodeName={}", self.name));
        let mut events = std::pin::pin!(watcher(pods, config));
        while let Some(event) = events.next().await {
            let pod = match event {
                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => pod,
                Ok(watcher::Event::Delete(pod)) => {
                    lock(&self.pods).remove(&pod.uid().unwrap_or_default());
                    continue;
                }
                Ok(_) => continue,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let uid = pod.uid().unwrap_or_default();
            let mut running = lock(&self.pods);
            if let Some(sender) = running.get(&uid) {
                sender.send_replace(pod);
            } else {
                let (sender, receiver) = watch::channel(pod);
                running.insert(uid, sender);
                tokio::spawn(Arc::clone(&self).run_pod(receiver));
            }
        }
    }

    fn address(self: &Arc<Self>) -> Option<Address> {
        let ip = lock(&self.free).pop()?;
        Some(Address {
            node: Arc::clone(self),
            ip,
        })
    }

    /// Runs one pod until it is deleted.
    async fn run_pod(self: Arc<Self>, mut pod: watch::Receiver<Pod>) {
        let first = pod.borrow().clone();
        let namespace = first.namespace().unwrap_or_default();
        let name = first.name_any();
        let uid = first.uid().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let behavior = self.behavior_for(&first);
        let Some(address) = self.address() else {
            self.event(
                &first,
                "Warning",
                "FailedCreatePodSandBox",
                "no pod address left",
                None,
            )
            .await;
            return;
        };
        let mut run = Run {
            node: Arc::clone(&self),
            api: api.clone(),
            pod: first,
            ip: address.ip,
            started: now(),
            restarts: 0,
            last: None,
        };
        tokio::select! {
            () = async {
                run.pull().await;
                run.behave(behavior).await;
            } => {}
            () = deleted(&mut pod) => {}
        }
        // Graceful deletion: the containers stop (their listeners with them), then the final
        // delete, as the kubelet does once they have.
        let grace = pod
            .borrow()
            .metadata
            .deletion_grace_period_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(MAX_TERMINATION, |s| {
                Duration::from_secs(s).min(MAX_TERMINATION)
            });
        run.stop_logs();
        drop(run);
        drop(address);
        if pod.has_changed().is_err() {
            return; // already gone
        }
        tokio::time::sleep(grace).await;
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let _ = api.delete(&name, &params).await;
    }

    /// Records an event about `pod` as the kubelet does; a repeat counts up the last one.
    async fn event(
        &self,
        pod: &Pod,
        kind: &str,
        reason: &str,
        message: &str,
        container: Option<&str>,
    ) {
        let namespace = pod.namespace().unwrap_or_default();
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let name = format!("{}.{}", pod.name_any(), reason.to_ascii_lowercase());
        let stamp = now();
        if let Ok(mut existing) = events.get(&name).await
            && existing.message.as_deref() == Some(message)
        {
            existing.count = Some(existing.count.unwrap_or(1) + 1);
            existing.last_timestamp = Some(stamp);
            let _ = events
                .replace(&name, &PostParams::default(), &existing)
                .await;
            return;
        }
        let _ = events.delete(&name, &DeleteParams::default()).await;
        let mut involved = json!({
            "kind": "Pod", "namespace": namespace, "name": pod.name_any(),
            "uid": pod.uid(), "apiVersion": "v1",
        });
        if let Some(container) = container {
            involved["fieldPath"] = json!(format!("spec.containers{{{container}}}"));
        }
        let event = json!({
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": kind,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": "kubelet", "host": self.name},
            "reportingComponent": "kubelet",
            "reportingInstance": self.name,
        });
        if let Ok(event) = serde_json::from_value::<Event>(event) {
            let _ = events.create(&PostParams::default(), &event).await;
        }
    }

    fn log(&self, key: &(String, String, String), line: String) {
        let stamp = Timestamp::now().to_string();
        let mut logs = lock(&self.logs);
        if let Some(attempt) = logs.get_mut(key).and_then(|runs| runs.last_mut()) {
            attempt.lines.push((stamp, line));
        }
        drop(logs);
        self.logged.send_modify(|n| *n += 1);
    }

    fn container_started(&self, key: &(String, String, String)) {
        let mut logs = lock(&self.logs);
        logs.entry(key.clone()).or_default().push(Attempt {
            lines: Vec::new(),
            running: true,
        });
        drop(logs);
        self.logged.send_modify(|n| *n += 1);
    }

    fn container_stopped(&self, key: &(String, String, String)) {
        let mut logs = lock(&self.logs);
        if let Some(attempt) = logs.get_mut(key).and_then(|runs| runs.last_mut()) {
            attempt.running = false;
        }
        drop(logs);
        self.logged.send_modify(|n| *n += 1);
    }
}

/// Resolves when the pod is marked for deletion or gone.
async fn deleted(pod: &mut watch::Receiver<Pod>) {
    loop {
        if pod
            .borrow_and_update()
            .metadata
            .deletion_timestamp
            .is_some()
        {
            return;
        }
        if pod.changed().await.is_err() {
            return;
        }
    }
}

/// A pod's containers as they run.
struct Run {
    node: Arc<Node>,
    api: Api<Pod>,
    pod: Pod,
    ip: Ipv4Addr,
    started: Time,
    restarts: i32,
    /// The last termination, for `lastState`.
    last: Option<Value>,
}

impl Run {
    fn containers(&self) -> Vec<(String, String)> {
        self.pod
            .spec
            .as_ref()
            .map(|spec| {
                spec.containers
                    .iter()
                    .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn key(&self, container: &str) -> (String, String, String) {
        (
            self.pod.namespace().unwrap_or_default(),
            self.pod.name_any(),
            container.to_owned(),
        )
    }

    fn first_container(&self) -> String {
        self.containers()
            .first()
            .map(|(name, _)| name.clone())
            .unwrap_or_default()
    }

    /// Writes the pod's status: every container in `state`, ready or not.
    async fn status(&self, phase: &str, state: Value, ready: bool) {
        let statuses: Vec<Value> = self
            .containers()
            .into_iter()
            .map(|(name, image)| {
                let mut status = json!({
                    "name": name,
                    "image": image,
                    "imageID": format!("{image}@sha256:{}", "0".repeat(64)),
                    "containerID": format!("containerd://{}-{}", self.pod.uid().unwrap_or_default(), self.restarts),
                    "ready": ready,
                    "started": state.get("running").is_some(),
                    "restartCount": self.restarts,
                    "state": state,
                    "lastState": {},
                });
                if let Some(last) = &self.last {
                    status["lastState"] = json!({"terminated": last});
                }
                status
            })
            .collect();
        let at = now();
        let condition = |kind: &str, ok: bool| {
            let mut c = json!({"type": kind, "status": if ok { "True" } else { "False" }, "lastTransitionTime": at});
            if !ok && matches!(kind, "Ready" | "ContainersReady") {
                c["reason"] = json!("ContainersNotReady");
            }
            c
        };
        let status = json!({"status": {
            "phase": phase,
            "hostIP": self.node.ip.to_string(),
            "hostIPs": [{"ip": self.node.ip.to_string()}],
            "podIP": self.ip.to_string(),
            "podIPs": [{"ip": self.ip.to_string()}],
            "startTime": self.started,
            "conditions": [
                condition("PodReadyToStartContainers", true),
                condition("Initialized", true),
                condition("Ready", ready),
                condition("ContainersReady", ready),
                condition("PodScheduled", true),
            ],
            "containerStatuses": statuses,
        }});
        let _ = self
            .api
            .patch_status(
                &self.pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&status),
            )
            .await;
    }

    async fn behave(&mut self, behavior: Behavior) {
        match behavior {
            Behavior::Ready { after } => self.serve(Some(after)).await,
            Behavior::NotReady => self.serve(None).await,
            Behavior::CrashLoop {
                exit_code,
                message,
                logs,
            } => self.crash(exit_code, "Error", &message, &logs).await,
            Behavior::OomKilled => self.crash(137, "OOMKilled", "", &[]).await,
            Behavior::ImagePullBackOff => self.pull_fails().await,
        }
    }

    /// Runs the containers, answering HTTP; ready `after` a while, or never.
    async fn serve(&mut self, ready_after: Option<Duration>) {
        let started = now();
        for (container, _) in self.containers() {
            self.node.container_started(&self.key(&container));
        }
        let listener = self.listen().await;
        self.status("Running", json!({"running": {"startedAt": started}}), false)
            .await;
        let _listener = listener;
        match ready_after {
            Some(after) => {
                tokio::time::sleep(after).await;
                self.status("Running", json!({"running": {"startedAt": started}}), true)
                    .await;
                std::future::pending::<()>().await;
            }
            None => loop {
                self.node
                    .event(
                        &self.pod,
                        "Warning",
                        "Unhealthy",
                        "Readiness probe failed: HTTP probe failed with statuscode: 503",
                        Some(&self.first_container()),
                    )
                    .await;
                tokio::time::sleep(PERIOD).await;
            },
        }
    }

    /// Serves HTTP on the first container's first port: every request answered with the pod's
    /// revision label, and logged. Stops when dropped.
    async fn listen(&self) -> Option<Listener> {
        let spec = self.pod.spec.as_ref()?;
        let port = spec
            .containers
            .first()?
            .ports
            .as_ref()?
            .first()
            .and_then(|p| u16::try_from(p.container_port).ok())?;
        let listener = TcpListener::bind((self.ip, port)).await.ok()?;
        let body = format!(
            "{}\n",
            self.pod
                .labels()
                .get(REVISION_LABEL)
                .cloned()
                .unwrap_or_default()
        );
        let node = Arc::clone(&self.node);
        let key = self.key(&self.first_container());
        let handle = tokio::spawn(async move {
            // The connections end with the listener, as they do with a container.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let body = body.clone();
                let node = Arc::clone(&node);
                let key = key.clone();
                while connections.try_join_next().is_some() {}
                connections.spawn(async move {
                    let service = service_fn(move |request: hyper::Request<Incoming>| {
                        node.log(
                            &key,
                            format!("{} {}", request.method(), request.uri().path()),
                        );
                        let body = body.clone();
                        async move {
                            Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(body))))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Some(Listener(handle))
    }

    /// Starts the containers, which exit after a moment; restarted after a back-off, for ever.
    async fn crash(&mut self, exit_code: i32, reason: &str, message: &str, logs: &[String]) {
        loop {
            let started = now();
            for (container, _) in self.containers() {
                let key = self.key(&container);
                self.node.container_started(&key);
                for line in logs {
                    self.node.log(&key, line.clone());
                }
            }
            self.status("Running", json!({"running": {"startedAt": started}}), false)
                .await;
            tokio::time::sleep(RUN_BEFORE_CRASH).await;
            for (container, _) in self.containers() {
                self.node.container_stopped(&self.key(&container));
            }
            let mut terminated = json!({
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": started,
                "finishedAt": now(),
                "containerID": format!("containerd://{}-{}", self.pod.uid().unwrap_or_default(), self.restarts),
            });
            if !message.is_empty() {
                terminated["message"] = json!(message);
            }
            self.last = Some(terminated);
            let back_off = format!(
                "back-off {} restarting failed container={} pod={}_{}({})",
                back_off(self.restarts),
                self.first_container(),
                self.pod.name_any(),
                self.pod.namespace().unwrap_or_default(),
                self.pod.uid().unwrap_or_default()
            );
            self.waiting(
                "Running",
                ("CrashLoopBackOff", &back_off),
                ("BackOff", "Back-off restarting failed container"),
            )
            .await;
            tokio::time::sleep(RESTART_AFTER).await;
            self.restarts += 1;
        }
    }

    /// The containers waiting (`state.waiting` with its reason and message), and the warning
    /// event the kubelet writes about it.
    async fn waiting(&self, phase: &str, (reason, message): (&str, &str), event: (&str, &str)) {
        self.status(
            phase,
            json!({"waiting": {"reason": reason, "message": message}}),
            false,
        )
        .await;
        let container = self.first_container();
        self.node
            .event(&self.pod, "Warning", event.0, event.1, Some(&container))
            .await;
    }

    /// Pulls the containers' images the pod's pull secrets have credentials for
    /// ([`crate::pull`]), again after a back-off until each is pulled, saying why meanwhile.
    async fn pull(&mut self) {
        let mut back_off = PULL_BACK_OFF;
        loop {
            let logins = crate::pull::logins(&self.node.client, &self.pod).await;
            let roots = lock(&self.node.registry_roots).clone();
            let mut failed = None;
            for (_, image) in self.containers() {
                let login = crate::pull::parse(&image).and_then(|(host, _, _)| logins.get(host));
                if let Some(login) = login
                    && let Err(why) = crate::pull::pull(&image, login, &roots).await
                {
                    failed = Some((image, why));
                    break;
                }
            }
            let Some((image, why)) = failed else {
                return;
            };
            self.waiting(
                "Pending",
                (
                    "ImagePullBackOff",
                    &format!("Back-off pulling image \"{image}\""),
                ),
                (
                    "Failed",
                    &format!("Failed to pull image \"{image}\": {why}"),
                ),
            )
            .await;
            tokio::time::sleep(back_off).await;
            back_off = (back_off * 2).min(MAX_PULL_BACK_OFF);
        }
    }

    async fn pull_fails(&mut self) {
        let image = self
            .containers()
            .first()
            .map(|(_, image)| image.clone())
            .unwrap_or_default();
        self.waiting(
            "Pending",
            (
                "ImagePullBackOff",
                &format!("Back-off pulling image \"{image}\""),
            ),
            (
                "Failed",
                &format!("Failed to pull image \"{image}\": not found"),
            ),
        )
        .await;
        std::future::pending::<()>().await;
    }

    fn stop_logs(&self) {
        for (container, _) in self.containers() {
            self.node.container_stopped(&self.key(&container));
        }
    }
}

/// A pod's HTTP listener task, aborted (with its connections) when dropped.
struct Listener(tokio::task::JoinHandle<()>);

impl Drop for Listener {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The kubelet's back-off before restart `n` (0-based): 10 s doubling up to 5 min.
fn back_off(n: i32) -> String {
    let seconds = 10u64.saturating_mul(1 << n.clamp(0, 5)).min(300);
    if seconds >= 60 {
        format!("{}m{}s", seconds / 60, seconds % 60)
    } else {
        format!("{seconds}s")
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn text(status: u16, body: String) -> hyper::Response<Body> {
    let mut response = hyper::Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    response
}

impl Node {
    /// The kubelet's HTTPS port: container logs.
    async fn serve_kubelet(self: Arc<Self>, listener: TcpListener, tls: Arc<rustls::ServerConfig>) {
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let node = Arc::clone(&self);
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let service = service_fn(move |request: hyper::Request<Incoming>| {
                    let node = Arc::clone(&node);
                    async move { Ok::<_, Infallible>(node.container_logs(&request)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    fn container_logs(
        self: &Arc<Self>,
        request: &hyper::Request<Incoming>,
    ) -> hyper::Response<Body> {
        let path: Vec<&str> = request.uri().path().split('/').skip(1).collect();
        let ["containerLogs", namespace, pod, container] = path.as_slice() else {
            return text(404, format!("no such path: {}", request.uri().path()));
        };
        let query: HashMap<String, String> = request
            .uri()
            .query()
            .unwrap_or_default()
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let flag = |name: &str| query.get(name).is_some_and(|v| v == "true" || v == "1");
        let key = (
            (*namespace).to_owned(),
            (*pod).to_owned(),
            (*container).to_owned(),
        );
        let (previous, follow, timestamps) = (flag("previous"), flag("follow"), flag("timestamps"));
        let tail = query.get("tailLines").and_then(|v| v.parse::<usize>().ok());
        let limit = query
            .get("limitBytes")
            .and_then(|v| v.parse::<usize>().ok());
        let logs = lock(&self.logs);
        let Some(runs) = logs.get(&key) else {
            return text(
                404,
                format!("container \"{container}\" in pod \"{pod}\" is waiting to start"),
            );
        };
        let index = if previous {
            match runs.len().checked_sub(2) {
                Some(index) => index,
                None => {
                    return text(
                        400,
                        format!(
                            "previous terminated container \"{container}\" in pod \"{pod}\" not found"
                        ),
                    );
                }
            }
        } else {
            runs.len().saturating_sub(1)
        };
        let lines = &runs
            .get(index)
            .map(|a| a.lines.as_slice())
            .unwrap_or_default();
        let skip = tail.map_or(0, |tail| lines.len().saturating_sub(tail));
        let format = move |(stamp, line): &(String, String)| {
            if timestamps {
                format!("{stamp} {line}\n")
            } else {
                format!("{line}\n")
            }
        };
        let mut body: String = lines[skip..].iter().map(format).collect();
        if let Some(limit) = limit {
            body.truncate(limit);
        }
        let running = runs.get(index).is_some_and(|a| a.running);
        // Counted under the same lock as the body: a line written meanwhile is streamed next.
        let sent = lines.len();
        drop(logs);
        if !follow || previous || !running {
            return text(200, body);
        }
        // Follow: what there is, then each new line of this run until it stops.
        let node = Arc::clone(self);
        let changes = self.logged.subscribe();
        let stream = futures_util::stream::unfold(
            (node, changes, sent, Some(body)),
            move |(node, mut changes, mut sent, first)| {
                let key = key.clone();
                async move {
                    if let Some(first) = first {
                        return Some((
                            Ok(Frame::data(Bytes::from(first))),
                            (node, changes, sent, None),
                        ));
                    }
                    loop {
                        let (new, running) = {
                            let logs = lock(&node.logs);
                            let run = logs.get(&key).and_then(|runs| runs.get(index));
                            let new: String = run
                                .map(|a| a.lines.iter().skip(sent).map(format).collect())
                                .unwrap_or_default();
                            let count = run.map_or(sent, |a| a.lines.len());
                            sent = count;
                            (new, run.is_some_and(|a| a.running))
                        };
                        if !new.is_empty() {
                            return Some((
                                Ok(Frame::data(Bytes::from(new))),
                                (node, changes, sent, None),
                            ));
                        }
                        if !running || changes.changed().await.is_err() {
                            return None;
                        }
                    }
                }
            },
        );
        let mut response = hyper::Response::new(BodyExt::boxed(StreamBody::new(stream)));
        *response.status_mut() = hyper::StatusCode::OK;
        response
    }
}
