//! A stand-in Kubernetes API server for tests: real HTTPS on a loopback port, the wire
//! protocol a kube-rs client speaks, and a small simulated cluster behind it (a deployment
//! controller, an EndpointSlice controller, a garbage collector, a namespace controller and a
//! kubelet whose pods answer HTTP on loopback addresses).
//!
//! No Kubernetes API server can run where Runway's tests run, so the Kubernetes driver is
//! tested against this: faithful where a driver's correctness depends on it (status codes and
//! `Status` bodies, resource versions, watch semantics and 410 Expired, server-side apply with
//! field ownership and conflicts, defaulting, the validation a driver can trip over, garbage
//! collection, pod and Deployment status as the kubelet and the controller write them), and
//! small everywhere else.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use kube_standin::{Behavior, StandIn};
//! let api = StandIn::start().await?;
//! let kubeconfig = api.kubeconfig(); // for kube::Config::from_custom_kubeconfig
//! api.behave("r2", Behavior::CrashLoop { exit_code: 1, message: "boom".into(), logs: vec![] });
//! // ... drive the client ...
//! api.validate_received().map_err(std::io::Error::other)?;
//! api.stop().await;
//! # Ok(()) }
//! ```
//!
//! # What it serves
//!
//! - Core `v1` namespaces, pods (with `log`), services, secrets, configmaps and events;
//!   `apps/v1` deployments (with `scale`); `discovery.k8s.io/v1` endpointslices;
//!   `networking.k8s.io/v1` networkpolicies (stored, defaulted and validated, not enforced:
//!   no traffic is filtered); discovery
//!   (`/api`, `/apis`, `/api/v1`, `/apis/{group}/{version}`), `/version`, `/healthz`.
//! - Verbs get, list, watch, create, update, patch (JSON merge, strategic merge, server-side
//!   apply), delete and deletecollection, with `dryRun=All`; namespaced and all-namespaces
//!   list and watch; label selectors (`=`, `==`, `!=`, existence, `in`, `notin`) and the
//!   field selectors the real server indexes (others are refused with 400, as there).
//! - Bearer-token authentication: anything else is 401 with a `Status`.
//! - Resource versions from one counter (decimal strings); a write that changes nothing takes
//!   none. Every write sets `metadata.uid` and `creationTimestamp` on create, and
//!   `metadata.generation` (1, then bumped on a change of `spec`) on objects with a `spec`.
//!   Watches replay history from the given version (`""`/`"0"`: ADDED events for the current
//!   state first), send bookmarks (every 5 s and when the watch times out), honour
//!   `timeoutSeconds` (default 30 min) and `sendInitialEvents`; a version older than the
//!   compaction point ([`StandIn::compact`]) gets an `ERROR` event with a 410 `Expired`
//!   `Status`, and the stream ends.
//! - Server-side apply: `metadata.managedFields` in `FieldsV1` notation (`f:`, `k:` and `.`),
//!   conflicts (409, listing each field and its manager) unless `force`, fields left out by
//!   their only applier removed, updates (create, replace, merge patches) taking ownership of
//!   what they change as operation `Update`.
//! - Defaults the real server writes (a Deployment's strategy, replicas, revision history and
//!   progress deadline; a pod spec's restart policy, DNS policy, scheduler, grace period,
//!   security context; a container's termination message path and policy, image pull policy,
//!   port protocol; a Service's cluster IP, type, target ports, IP families; a Secret's type
//!   and `stringData`; a Namespace's finalizer, phase and `kubernetes.io/metadata.name` label)
//!   and the validation a driver can trip over (names, label keys and values, a Deployment's
//!   selector that must match its template and cannot change, containers' names, images and
//!   ports, a pod's immutable spec, a Service's ports and immutable cluster IP, objects in a
//!   missing or terminating namespace): 422 `Invalid`, 404 or 403 as the real server answers.
//! - Deletion: pods gracefully (`deletionTimestamp`, terminating for
//!   `terminationGracePeriodSeconds` capped at 300 ms, then gone), finalizers honoured,
//!   `propagationPolicy` Background (the default), Foreground and Orphan, garbage collection
//!   through `metadata.ownerReferences` by uid (an object goes when all its owners are gone),
//!   namespaces emptied then removed.
//!
//! # The simulated cluster
//!
//! - **Deployments**: `spec.replicas` pods from `spec.template` per Deployment, named
//!   `{deployment}-{pod-template-hash}-{5 characters}`, labelled `pod-template-hash`, owned by
//!   the Deployment itself (controller: true). A template change rolls the pods (RollingUpdate
//!   within `maxSurge` and `maxUnavailable`, or Recreate). Scaling down deletes pods in the
//!   ReplicaSet controller's order: unscheduled, then pending, then not ready, then lower
//!   `controller.kubernetes.io/pod-deletion-cost`, then ready for less time, then more
//!   restarts, then newer. Status: `observedGeneration`, `replicas`, `updatedReplicas`,
//!   `readyReplicas`, `availableReplicas`, `unavailableReplicas`, and conditions `Available`
//!   and `Progressing` (with `ProgressDeadlineExceeded` after `progressDeadlineSeconds`).
//! - **Kubelet**: every scheduled pod gets its own loopback address (127.77.x.y; Linux routes
//!   127/8 to `lo`) as `podIP`. While its first container runs, a real TCP listener on
//!   `podIP:containerPort` (the first container's first port) answers every HTTP/1.1 request
//!   with 200 and the body `{runway.dev/revision label}\n`, and logs a line per request. Its
//!   status is as the kubelet writes it (phase, conditions, `containerStatuses` with state,
//!   last state, restart count, ids), per the [`Behavior`] chosen for its revision with
//!   [`StandIn::behave`] (default: ready after 200 ms). Events (`Scheduled`, `Pulled`,
//!   `Created`, `Started`, `Killing`, `Unhealthy`, `BackOff`, `Failed`, `FailedScheduling`)
//!   are core v1 Events about the pod.
//! - **EndpointSlices**: one per Service with a selector, named `{service}-{5 characters}`,
//!   with the real controller's labels and owner, its ports resolved against the pods'
//!   container ports, and an endpoint per matching pod with an address (`ready`, `serving`,
//!   `terminating`, `targetRef`, `nodeName`), kept current as pods change.
//! - **Pod logs**: `container`, `follow`, `tailLines`, `timestamps`, `sinceSeconds`,
//!   `sinceTime`, `previous`, `limitBytes`; a followed log ends when the container stops or
//!   the pod goes.
//!
//! # For a driver's author
//!
//! - Pods take their [`Behavior`] from the label [`REVISION_LABEL`] (`runway.dev/revision`),
//!   whose value is also what they answer over HTTP. Scale-down reads
//!   [`DELETION_COST_ANNOTATION`], but only among pods equally ready: an unready pod goes
//!   before a ready one whatever their costs, as in Kubernetes.
//! - Timings: a pod is bound and started at once, ready 200 ms after its container starts by
//!   default; a crashing container runs ~100 ms and restarts ~900 ms later (its
//!   `CrashLoopBackOff` message says 10s, 20s, 40s, ... up to 5m0s, as the kubelet's does);
//!   a deleted pod terminates within 300 ms; the controllers also resync every second.
//! - Pods listen on 127.77.x.y (random per pod, unique in the process) at their first
//!   container's first `containerPort`; nothing listens while a container is not running.
//! - Apply without `force` conflicts with fields another manager set, including a `scale`
//!   by a field manager of the same name (that is an `Update`, another owner). Requests from
//!   kube-rs carry no `User-Agent`, so a write without `fieldManager` is recorded under the
//!   manager "" (as a real server does).
//! - [`StandIn::end_watches`] also ends followed logs, as a restart of the API server would.
//! - Every object a client writes is kept for [`StandIn::validate_received`]; a partial apply
//!   configuration (one that leaves out required fields another manager set) is checked as
//!   the object it produced.
//!
//! # What it leaves out, compared with a real kube-apiserver
//!
//! - Authentication other than the one bearer token; RBAC (every authenticated request is
//!   allowed); admission webhooks and most admission plugins (no ServiceAccount token
//!   volumes, default tolerations, LimitRanges, ResourceQuotas, Pod Security).
//! - Every other resource and API group: ReplicaSets (pods are owned by their Deployment
//!   directly, and `pod-template-hash` is this server's own hash), Nodes (one implicit node,
//!   `standin-node`), ServiceAccounts, the legacy Endpoints object, CRDs, `events.k8s.io`.
//! - Status subresource writes by clients (405); the `exec`, `attach`, `portforward`, `proxy`,
//!   `eviction`, `binding` and `ephemeralcontainers` subresources; protobuf, CBOR, YAML and
//!   Table responses (JSON only); JSON patch (`application/json-patch+json`, 415); HTTP/2.
//! - Strategic merge patch is a JSON merge patch that also merges the keyed lists (by the same
//!   merge keys as apply) and honours `$patch: delete` in their items; other directives
//!   (`$retainKeys`, `$setElementOrder`, `$deleteFromPrimitiveList`) are ignored.
//! - Server-side apply: which lists are keyed is a fixed table of the fields a driver writes
//!   (containers, env, ports, volumes, volume mounts, owner references, conditions, ...);
//!   every other list is atomic, sets (`finalizers`) included. The `scale` subresource's
//!   writes are an update of `spec.replicas` by the field manager (no apply conflicts).
//!   Status is never tracked in managed fields; controller and kubelet writes are not either,
//!   except the pods the deployment controller creates (`kube-controller-manager`).
//! - Lists come in one page (`limit` is accepted, no `continue` is returned; a `continue`
//!   sent is 400); a list is served from the current state (a `resourceVersion` other than
//!   "" and "0" means "not older than", which the current state satisfies; only
//!   `resourceVersionMatch=Exact` from before the compaction point is 410).
//! - Unknown fields are kept as sent (a real server drops them with a warning, or refuses
//!   them with `fieldValidation=Strict`); [`StandIn::validate_received`] reports them.
//!   No `Warning` headers.
//! - Scheduling (a pod is bound at once unless its [`Behavior`] is `Unschedulable`), probes
//!   (readiness follows the [`Behavior`]), resources, volumes, init containers (not run),
//!   images (never pulled), the deployment controller's `ScalingReplicaSet` events,
//!   `minReadySeconds`, `paused`, and revision history.
//! - Validation beyond the above: the structural schema is checked after the fact by
//!   [`StandIn::validate_received`], not at write time.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

mod admission;
mod api;
mod controllers;
mod fields;
mod http;
mod kubelet;
mod logs;
mod resources;
mod selector;
mod store;
mod tls;
mod util;
mod validate;
mod watch;

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch as signal;
use tokio::task::JoinSet;

use crate::store::{Key, Store};

/// The label whose value chooses a pod's [`Behavior`] and is the body its listener answers.
pub const REVISION_LABEL: &str = "runway.dev/revision";

/// The annotation the scale-down order reads first among ready pods.
pub const DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// The name of the one node pods are bound to.
pub const NODE_NAME: &str = "standin-node";

/// How the simulated kubelet runs the pods of a revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Behavior {
    /// Running, and ready `after` the container starts (the readiness probe passes).
    Ready {
        /// From the container's start to readiness.
        after: Duration,
    },
    /// Running, never ready: the readiness probe fails with 503 (an `Unhealthy` event).
    NotReady,
    /// The container exits with `exit_code` about 100 ms after each start, printing `logs`
    /// and leaving `message` as its termination message; restarted about every second
    /// (`CrashLoopBackOff` in between, with the kubelet's growing back-off in its message).
    CrashLoop {
        /// The container's exit code (0 is reason `Completed`, anything else `Error`).
        exit_code: i32,
        /// `lastState.terminated.message`.
        message: String,
        /// What each attempt prints.
        logs: Vec<String>,
    },
    /// As `CrashLoop`, killed for its memory: exit code 137, reason `OOMKilled`.
    OomKilled,
    /// The image cannot be pulled: Pending, `ImagePullBackOff`.
    ImagePullBackOff,
    /// No node fits: Pending, `PodScheduled` False with reason `Unschedulable` and this
    /// message, and a `FailedScheduling` event. Applies to pods not yet bound to the node.
    Unschedulable {
        /// The scheduler's message, e.g. "0/1 nodes are available: 1 Insufficient cpu."
        message: String,
    },
}

impl Default for Behavior {
    fn default() -> Self {
        Behavior::Ready {
            after: Duration::from_millis(200),
        }
    }
}

/// One request the server received, as recorded in [`StandIn::requests`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    /// The HTTP method.
    pub method: String,
    /// get, list, watch, create, update, patch, delete or deletecollection ("" for
    /// discovery and paths that name no resource).
    pub verb: String,
    /// The API group ("" for core).
    pub group: String,
    /// The API version ("" when the path names no resource).
    pub version: String,
    /// The resource's plural name ("" when the path names none).
    pub resource: String,
    /// `log`, `scale`, `status`, ...
    pub subresource: Option<String>,
    /// The namespace in the path (None for cluster-scoped resources and all-namespaces
    /// lists and watches).
    pub namespace: Option<String>,
    /// The object's name in the path (None for a collection).
    pub name: Option<String>,
    /// The `fieldManager` query parameter.
    pub field_manager: Option<String>,
    /// The `Content-Type` header.
    pub content_type: Option<String>,
    /// The path.
    pub path: String,
    /// The raw query string.
    pub query: String,
    /// The response's status code.
    pub code: u16,
}

impl Request {
    /// The decoded value of query parameter `key`.
    pub fn query_param(&self, key: &str) -> Option<String> {
        http::parse_query(&self.query)
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
}

/// An object written by a client, kept for [`StandIn::validate_received`].
#[derive(Debug, Clone)]
pub(crate) struct Received {
    /// What to validate: the body as sent, or a merge patch's result.
    pub(crate) object: Value,
    /// For an apply: the object it produced, validated instead when the body alone lacks a
    /// required field (an apply configuration may leave out what another manager owns).
    pub(crate) result: Option<Value>,
}

/// Everything the server knows, behind one lock (never held across an await).
#[derive(Debug)]
pub(crate) struct World {
    pub(crate) store: Store,
    pub(crate) rules: Vec<(String, Behavior)>,
    pub(crate) requests: Vec<Request>,
    pub(crate) received: Vec<Received>,
    pub(crate) logs: logs::Logs,
    /// Pods (by uid) with a kubelet task.
    pub(crate) kubelet: HashSet<String>,
}

impl World {
    /// The behaviour for a pod: the rule for its revision label, else the default.
    pub(crate) fn behavior_for(&self, pod: &Value) -> Behavior {
        let revision = pod
            .pointer("/metadata/labels")
            .and_then(|l| l.get(REVISION_LABEL))
            .and_then(Value::as_str);
        revision
            .and_then(|r| self.rules.iter().rev().find(|(k, _)| k == r))
            .map(|(_, b)| b.clone())
            .unwrap_or_default()
    }
}

/// What the server's tasks share.
pub(crate) struct Shared {
    world: Mutex<World>,
    /// Bumped after every change to the objects or the rules.
    pub(crate) changed: signal::Sender<u64>,
    /// Bumped after every log line.
    pub(crate) logged: signal::Sender<u64>,
    /// Bumped by [`StandIn::end_watches`].
    pub(crate) watch_epoch: signal::Sender<u64>,
    pub(crate) shutdown: signal::Sender<bool>,
    tasks: Mutex<JoinSet<()>>,
    pub(crate) token: String,
    url: String,
    ca_pem: String,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Runs `f` on the world; wakes the controllers, the kubelet and the watches when it
    /// wrote anything.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut World) -> R) -> R {
        let (out, wrote, logged) = {
            let mut w = lock(&self.world);
            let rv = w.store.rv();
            let lines = w.logs.written();
            let out = f(&mut w);
            (out, w.store.rv() != rv, w.logs.written() != lines)
        };
        if wrote {
            self.changed.send_modify(|n| *n += 1);
        }
        if logged {
            self.logged.send_modify(|n| *n += 1);
        }
        out
    }

    /// Spawns a task that [`StandIn::stop`] ends (none once stopping).
    pub(crate) fn spawn(
        &self,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> Option<tokio::task::AbortHandle> {
        if self.is_shut_down() {
            return None;
        }
        let mut tasks = lock(&self.tasks);
        while tasks.try_join_next().is_some() {}
        Some(tasks.spawn(task))
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}

/// A running stand-in API server. Cheap to clone; [`StandIn::stop`] ends it.
#[derive(Clone)]
pub struct StandIn {
    shared: Arc<Shared>,
}

impl fmt::Debug for StandIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StandIn")
            .field("url", &self.shared.url)
            .finish_non_exhaustive()
    }
}

impl StandIn {
    /// Starts the server on 127.0.0.1 (a free port) with a certificate from its own CA, and
    /// the simulated cluster, with the namespaces `default`, `kube-system`, `kube-public` and
    /// `kube-node-lease`.
    ///
    /// # Errors
    /// When the port cannot be bound or the certificates cannot be made.
    pub async fn start() -> std::io::Result<StandIn> {
        let tls = tls::Tls::new().map_err(std::io::Error::other)?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let token = format!("standin-{:016x}{:016x}", util::random(), util::random());
        let mut store = Store::new();
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let mut obj = serde_json::json!({"metadata": {"name": ns}, "spec": {}});
            admission::default(resources::NAMESPACES, &mut obj);
            store.create(resources::NAMESPACES, obj);
        }
        let world = World {
            store,
            rules: Vec::new(),
            requests: Vec::new(),
            received: Vec::new(),
            logs: logs::Logs::default(),
            kubelet: HashSet::new(),
        };
        let shared = Arc::new(Shared {
            world: Mutex::new(world),
            changed: signal::Sender::new(0),
            logged: signal::Sender::new(0),
            watch_epoch: signal::Sender::new(0),
            shutdown: signal::Sender::new(false),
            tasks: Mutex::new(JoinSet::new()),
            token,
            url: format!("https://{addr}"),
            ca_pem: tls.ca_pem.clone(),
        });
        shared.spawn(http::serve(Arc::clone(&shared), listener, tls.acceptor()));
        shared.spawn(controllers::run(Arc::clone(&shared)));
        Ok(StandIn { shared })
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.shared.url.clone()
    }

    /// The CA certificate (PEM) the server's certificate is issued by.
    pub fn ca_pem(&self) -> String {
        self.shared.ca_pem.clone()
    }

    /// The bearer token every request must carry.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// A kubeconfig (YAML) for this server: one cluster with `certificate-authority-data`,
    /// one user with the token, one context (namespace `default`) made current.
    pub fn kubeconfig(&self) -> String {
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(self.shared.ca_pem.as_bytes());
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\nusers:\n- name: standin\n  user:\n    token: {token}\ncontexts:\n- name: standin\n  context:\n    cluster: standin\n    user: standin\n    namespace: default\ncurrent-context: standin\npreferences: {{}}\n",
            url = self.shared.url,
            token = self.shared.token,
        )
    }

    /// A kube-rs client of this server, configured from [`StandIn::kubeconfig`] as a user's
    /// would be.
    pub async fn client(&self) -> Result<kube::Client, String> {
        let kubeconfig =
            kube::config::Kubeconfig::from_yaml(&self.kubeconfig()).map_err(|e| e.to_string())?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|e| e.to_string())?;
        kube::Client::try_from(config).map_err(|e| e.to_string())
    }

    /// Makes a namespace through the API, as an installation would before Runway runs in it.
    pub async fn create_namespace(&self, name: &str) -> Result<(), String> {
        use k8s_openapi::api::core::v1::Namespace;
        let namespaces: kube::Api<Namespace> = kube::Api::all(self.client().await?);
        let namespace = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces
            .create(&Default::default(), &namespace)
            .await
            .map(drop)
            .map_err(|e| format!("create namespace {name}: {e}"))
    }

    /// Runs the pods labelled `runway.dev/revision: {revision}` (existing and future ones)
    /// with `behavior`.
    pub fn behave(&self, revision: &str, behavior: Behavior) {
        self.shared.with(|w| {
            w.rules.retain(|(r, _)| r != revision);
            w.rules.push((revision.to_owned(), behavior));
        });
        self.shared.changed.send_modify(|n| *n += 1);
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.with(|w| w.requests.clone())
    }

    /// One object, by resource (plural, singular, kind or short name, optionally qualified:
    /// `deployments`, `Deployment`, `deployments.apps`, `apps/v1/Deployment`), namespace (""
    /// for cluster-scoped resources) and name.
    pub fn object(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        let res = resources::lookup(resource)?;
        self.shared
            .with(|w| w.store.get(&Key::new(res, namespace, name)).cloned())
    }

    /// Every object of a resource (named as for [`StandIn::object`]), in every namespace.
    pub fn objects(&self, resource: &str) -> Vec<Value> {
        let Some(res) = resources::lookup(resource) else {
            return Vec::new();
        };
        self.shared
            .with(|w| w.store.list(res, None).cloned().collect())
    }

    /// Ends every open watch and followed log (their streams end cleanly, as when an API
    /// server restarts); clients watch again from their last resource version.
    pub fn end_watches(&self) {
        self.shared.watch_epoch.send_modify(|n| *n += 1);
    }

    /// Forgets the history: a watch from any resource version handed out so far now gets
    /// an `ERROR` event with a 410 `Expired` `Status`, after which a client lists again.
    /// Open watches go on; call [`StandIn::end_watches`] too to make their clients
    /// watch again (and so re-list).
    pub fn compact(&self) {
        self.shared.with(|w| w.store.compact());
    }

    /// Checks every object written by a client at once with `kubernetes-validate --strict
    /// --kubernetes-version 1.33.0`: creates and updates as sent, merge patches as the
    /// object they produced, applies as sent (or, when the configuration only lacks fields
    /// another manager set, as the object they produced).
    ///
    /// # Errors
    /// The tool's complaints. When the tool is missing: an error under `CI=true`, else Ok
    /// after printing why nothing was checked.
    pub fn validate_received(&self) -> Result<(), String> {
        let received = self.shared.with(|w| w.received.clone());
        validate::run(&received)
    }

    /// Stops the listener, every connection and watch, the controllers, the kubelet and
    /// every pod's listener.
    pub async fn stop(self) {
        self.shared.shutdown.send_replace(true);
        let drain = async {
            loop {
                let mut tasks = std::mem::take(&mut *lock(&self.shared.tasks));
                if tasks.is_empty() {
                    break;
                }
                tasks.abort_all();
                while tasks.join_next().await.is_some() {}
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
    }
}
