//! Runway's Kubernetes driver: revision workloads on a cluster.
//!
//! Each revision is a Deployment, a NetworkPolicy and (for a service) a Service, named after
//! the revision, in its environment's namespace (`runway-{env}` by default), built by the same
//! code as `runway render -t kubernetes` ([`runway_render::revision_objects`]) and written by
//! server-side apply under the field manager `runway`. Runway's autoscaler sets the replica
//! count (there is no HorizontalPodAutoscaler in this mode); zero replicas is a revision
//! scaled to zero, whose requests the ingress holds. The Service and the NetworkPolicy belong
//! to their Deployment, so deleting a revision's Deployment garbage-collects the rest. The
//! NetworkPolicy ([`NetworkOptions`]: Runway's ingress pods, the cluster's private ranges) is
//! written before a new Deployment, so no pod runs unrestricted.
//!
//! A service with a private name also has its internal Service, `<dns_name>-internal`,
//! selecting every revision's pods: each revision applies it under a field manager of its own
//! (`runway-{revision}`) with itself among its owners (`ownerReferences` merge by uid), so the
//! garbage collector drops a revision's reference when its Deployment goes and the Service
//! with the last one.
//!
//! The driver keeps a reflector (a list, then a watch, re-listed on `410 Gone`) of the pods,
//! EndpointSlices, Deployments and events of each environment's namespace, and reads every
//! replica from them: no request at all to list replicas, and a change in any of them is a
//! [`Driver::changes`] tick. A replica is a pod: its id is `{revision}-{6 hex of its uid}`,
//! its readiness and address come from the EndpointSlices, its phase and failure from the
//! pod's status (CrashLoopBackOff with the last termination's exit code, signal, OOM kill and
//! message; ImagePullBackOff; unschedulable), and the latest warning event of a pod that is
//! not ready says why (a failing probe).
//!
//! Secrets are Kubernetes Secrets named as the renderer names them (`<dns_name>-<variable>`);
//! each version a revision pins is a key of its own (`v3`), written under a field manager of
//! the revision's (`runway-{revision}`) so no revision's apply drops another's key, and the
//! Deployment references the key: a new version reaches pods only through a new revision, and
//! no value is ever inlined into a Deployment. The apply is not forced: two services' names can
//! collide (`a-b`'s `C` and `a`'s `B_C` are both `a-b-c`), and the second is refused rather than
//! writing into (or, through its Deployment, reading from) the first's Secret.
//!
//! Stopping chosen replicas (those the control plane drained) uses the pod deletion cost: the
//! pods to go are marked `controller.kubernetes.io/pod-deletion-cost: -1000` and the count
//! lowered, so the ReplicaSet removes those and no other; a replica replaced by a new one is
//! deleted, and its ReplicaSet starts the new one.
//!
//! # Files
//!
//! - `lib.rs`: `KubeDriver`. A revision's objects are built by `runway-render`'s
//!   `revision_objects` (the objects `runway render -t kubernetes` writes, made one revision's:
//!   named after it, selected by `runway.dev/revision` too, the count Runway's autoscaler sets, no
//!   HPA) and written by server-side apply under field manager `runway` with
//!   `fieldValidation=Strict`: an unknown field is refused, not dropped. They are named after the
//!   revision when Kubernetes takes the name (63 characters, a letter first), else `r…-<hash>`
//!   with the full name in the `runway.dev/revision` annotation; the Service is headless (the
//!   ingress reads EndpointSlices), and the revision has a PodDisruptionBudget;
//!   `runtime.kubernetes.image_pull_secrets` become its pods' `imagePullSecrets`. A revision made
//!   already is never applied again, only its count set (the scale subresource) and a missing
//!   Service or NetworkPolicy made: its pods stay as they were made, so a Runway upgrade that
//!   renders pods otherwise rolls no live revision. Pods the API server refuses (Pod Security, a
//!   quota, a LimitRange, a webhook) fail the deploy with its message, read from the Deployment's
//!   `ReplicaFailure` condition. Rendered pods meet the `restricted` Pod Security Standard and
//!   mount no API token.
//! - The platform registry ([`KubeDriver::with_registry`]): a pod whose image is there pulls it
//!   with its service's pull secret, `<dns name>.registry` (a `kubernetes.io/dockerconfigjson`
//!   holding the service's pull-only login), applied before each revision's Deployment (the same
//!   for every revision) and left in place when revisions go: it lets only the service's own
//!   images be pulled.
//! - Secrets: when a revision goes, its field manager applies each of its Secrets with no data, so
//!   server-side apply drops the keys no other revision pinned, and a Secret left empty is deleted
//!   (with its resourceVersion as precondition). The driver never reads a Secret.
//! - Stopping chosen replicas lowers the count through the scale subresource, read then written
//!   with its resourceVersion (a conflict is read again). When a staying pod is not yet running
//!   and ready (which the ReplicaSet removes first whatever its cost), the staying ones get a cost
//!   above the default, the chosen ones are deleted, and then the count drops, so a replacement
//!   made meanwhile is the one removed.
//! - `diagnose.rs`: a pod as a `Replica`: id `{revision}-{6 hex of its uid}`, readiness and
//!   address from EndpointSlices, a worker's (no port, no Service) from its pod's `Ready`
//!   condition, the service's container found by `kubectl.kubernetes.io/default-container`.
//!   Failed and evicted pods are no live replicas. CrashLoopBackOff with the last termination's
//!   code, signal, OOM kill and message; image pull and container-config failures as back-off;
//!   unschedulable, and the latest warning event, as the warning.
//! - `logs.rs`: tail and follow through the pod log API, the service's container named (a
//!   rollout's new pods followed from their start, a container's next run after a restart
//!   followed on).
//!
//! At rest the driver makes no API request: its reflectors feed `replicas`. Runway's rights on a
//! cluster are namespaced: the chart's Role per environment namespace grants exactly what this
//! crate requests (`crates/runway-cli/tests/chart.rs` fails on a right used and not granted, or
//! granted and not used).

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

mod diagnose;
mod logs;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use base64::Engine as _;
use futures_util::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use runway_driver::{
    Driver, DriverError, Kept, LogLine, LogQuery, Replica, Scale, Workload, revision_of,
};
use runway_render::{REVISION_LABEL, RenderError, Revision, object_name};

pub use runway_render::{NetworkOptions, Peer};
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use logs::normalize_time;

/// The field manager of everything the driver applies, but Secrets' versions.
pub const FIELD_MANAGER: &str = "runway";
/// The label every object and pod the driver makes carries.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "runway");
/// The annotation the ReplicaSet controller reads to choose which pods go first.
const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// The deletion cost of a pod the control plane retired: below any other's.
const RETIRED_COST: &str = "-1000";
/// The deletion cost of a pod kept while a retired one of a higher rank is deleted: above a
/// replacement's (see [`KubeDriver::remove_outranked`]).
const KEPT_COST: &str = "1000";
/// How long [`Driver::scale`] waits for the pods it asked for to appear, so the control plane
/// sees them in the same pass.
const SCALE_SETTLE: Duration = Duration::from_secs(3);
/// How often that wait looks, at most.
const SETTLE_LOOK: Duration = Duration::from_millis(50);

/// Pins an image reference to its digest (the control plane's registry client).
pub type Resolver = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>> + Send + Sync,
>;

/// A service's pull-only `(user, password)` in the platform registry, by its name and id.
pub type Login = Arc<dyn Fn(&str, i64) -> (String, String) + Send + Sync>;

/// The platform registry that images mirrored at deploy are pulled from: its host, and each
/// service's pull-only login there.
#[derive(Clone)]
pub struct RegistryPull {
    /// `host:port`, as the mirrored images' references begin.
    pub host: String,
    /// A service's `(user, password)`: pulls its own repositories only.
    pub login: Login,
}

impl fmt::Debug for RegistryPull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryPull")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

/// The name of the pull secret of a service's pods (`<dns name>.registry`): a name with a
/// `.`, which no Secret of a service's variables has (`<dns name>-<variable>`).
pub fn pull_secret_name(service: &str) -> String {
    format!("{}.registry", runway_manifest::dns_name(service))
}

/// Where the driver runs workloads.
#[derive(Debug, Clone)]
pub struct KubeOptions {
    /// The namespace of an environment: `{env}` stands for its name.
    pub namespace_pattern: String,
    /// The environments whose namespaces it watches and runs workloads in.
    pub environments: Vec<String>,
    /// Secrets in each namespace the kubelet pulls images with (`imagePullSecrets`).
    pub image_pull_secrets: Vec<String>,
}

impl Default for KubeOptions {
    fn default() -> Self {
        Self {
            namespace_pattern: "runway-{env}".to_owned(),
            environments: Vec::new(),
            image_pull_secrets: Vec::new(),
        }
    }
}

impl KubeOptions {
    /// The namespace of `env`.
    pub fn namespace(&self, env: &str) -> String {
        self.namespace_pattern.replace("{env}", env)
    }
}

/// What the driver sees of one environment's namespace.
struct Namespace {
    env: String,
    name: String,
    pods: Store<Pod>,
    slices: Store<EndpointSlice>,
    deployments: Store<Deployment>,
    events: Store<Event>,
}

/// Runs revision workloads on a Kubernetes cluster. Clones share their state.
#[derive(Clone)]
pub struct KubeDriver {
    inner: Arc<Inner>,
    network: Arc<NetworkOptions>,
    registry: Option<Arc<RegistryPull>>,
}

struct Inner {
    client: Client,
    options: KubeOptions,
    /// Each environment and its namespace, where callers' pods are.
    environments: Vec<(String, String)>,
    namespaces: Vec<Namespace>,
    changes: watch::Sender<u64>,
    resolver: Option<Resolver>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Why each namespace's watch failed last, printed once until it recovers.
    failing: Arc<Mutex<HashMap<String, String>>>,
    /// Whether the API server has `lifecycle.stopSignal` (1.33 and later), asked once.
    stop_signal_field: tokio::sync::OnceCell<bool>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in self
            .tasks
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            task.abort();
        }
    }
}

impl fmt::Debug for KubeDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeDriver")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl KubeDriver {
    /// A driver over `client` that starts watching each environment's namespace at once.
    /// `resolver` pins image tags to digests; without one, only images named by digest run.
    pub fn new(client: Client, options: KubeOptions, resolver: Option<Resolver>) -> Self {
        let changes = watch::channel(0).0;
        let failing: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        let mut tasks = Vec::new();
        let mut namespaces = Vec::new();
        for env in &options.environments {
            let name = options.namespace(env);
            let (pods, pods_task) = reflect::<Pod>(&client, &name, &changes, &failing);
            let (slices, slices_task) =
                reflect::<EndpointSlice>(&client, &name, &changes, &failing);
            let (deployments, deployments_task) =
                reflect::<Deployment>(&client, &name, &changes, &failing);
            let (events, events_task) = reflect::<Event>(&client, &name, &changes, &failing);
            tasks.extend([pods_task, slices_task, deployments_task, events_task]);
            namespaces.push(Namespace {
                env: env.clone(),
                name,
                pods,
                slices,
                deployments,
                events,
            });
        }
        let environments = options
            .environments
            .iter()
            .map(|env| (env.clone(), options.namespace(env)))
            .collect();
        Self {
            network: Arc::new(NetworkOptions {
                vpc_ranges: Vec::new(),
                ingress: Some(Peer::runway_ingress()),
            }),
            registry: None,
            inner: Arc::new(Inner {
                client,
                options,
                environments,
                namespaces,
                changes,
                resolver,
                tasks: Mutex::new(tasks),
                failing,
                stop_signal_field: tokio::sync::OnceCell::new(),
            }),
        }
    }

    /// Whether the cluster's API has `lifecycle.stopSignal` (Kubernetes 1.33 and later), from
    /// its version, asked once it answers; while it does not, the API is taken as older (the
    /// field left out, the preStop hook alone) and asked again at the next revision.
    async fn stop_signal_field(&self) -> bool {
        let known = self
            .inner
            .stop_signal_field
            .get_or_try_init(|| async {
                let info = self.inner.client.apiserver_version().await?;
                let digits: String = info
                    .minor
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                Ok::<_, kube::Error>(
                    info.major == "1" && digits.parse::<u32>().is_ok_and(|minor| minor >= 33),
                )
            })
            .await;
        match known {
            Ok(known) => *known,
            Err(error) => {
                tracing::warn!(%error, "cannot read the API server's version");
                false
            }
        }
    }

    /// The cluster's network as the NetworkPolicies name it: the private ranges a service with
    /// `spec.vpc_access.enabled` reaches (none by default: such a service is refused), and
    /// the pods of Runway's ingress, admitted to every service's pods (by default
    /// [`Peer::runway_ingress`], the chart's ingress pods in any namespace).
    #[must_use]
    pub fn with_network(mut self, network: NetworkOptions) -> Self {
        self.network = Arc::new(network);
        self
    }

    /// Pods whose image is in the platform registry `registry` pull it with their service's
    /// pull secret, which the driver applies in the namespace (see [`pull_secret_name`]).
    #[must_use]
    pub fn with_registry(mut self, registry: RegistryPull) -> Self {
        self.registry = Some(Arc::new(registry));
        self
    }

    /// Waits until every namespace's objects were listed once (a restart adopts what runs
    /// only then), at most `limit`.
    pub async fn ready(&self, limit: Duration) -> Result<(), DriverError> {
        let all = async {
            for namespace in &self.inner.namespaces {
                let _ = namespace.pods.wait_until_ready().await;
                let _ = namespace.slices.wait_until_ready().await;
                let _ = namespace.deployments.wait_until_ready().await;
                let _ = namespace.events.wait_until_ready().await;
            }
        };
        tokio::time::timeout(limit, all).await.map_err(|_| {
            let failing = lock(&self.inner.failing);
            let why: Vec<String> = failing.values().cloned().collect();
            DriverError::Failed(format!(
                "the cluster's objects could not be listed within {limit:?}{}",
                if why.is_empty() {
                    String::new()
                } else {
                    format!(": {}", why.join("; "))
                }
            ))
        })
    }

    fn namespace(&self, env: &str) -> Result<&Namespace, DriverError> {
        self.inner
            .namespaces
            .iter()
            .find(|n| n.env == env)
            .ok_or_else(|| {
                DriverError::Refused(format!(
                    "environment {env} has no namespace on this cluster: the driver runs \
                     workloads in {}",
                    self.inner
                        .options
                        .environments
                        .iter()
                        .map(|e| self.inner.options.namespace(e))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
    }

    /// The pods of a revision that are not being deleted nor finished (a Failed or evicted
    /// pod is no replica: its ReplicaSet has made another), with their replica ids.
    fn live_pods(namespace: &Namespace, revision: &str) -> Vec<(String, Arc<Pod>)> {
        let label = object_name(revision);
        namespace
            .pods
            .state()
            .into_iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .filter(|pod| {
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                !matches!(phase, Some("Failed" | "Succeeded"))
            })
            .filter(|pod| pod.labels().get(REVISION_LABEL) == Some(&label))
            .filter_map(|pod| Some((diagnose::replica_id(revision, &pod)?, pod)))
            .collect()
    }

    /// Every replica of one namespace.
    fn replicas_in(namespace: &Namespace) -> Vec<Replica> {
        let endpoints = diagnose::endpoints(namespace.slices.state().iter().map(AsRef::as_ref));
        let warnings = diagnose::warnings(namespace.events.state().iter().map(AsRef::as_ref));
        namespace
            .pods
            .state()
            .iter()
            .filter_map(|pod| {
                let endpoint = pod
                    .metadata
                    .name
                    .as_ref()
                    .and_then(|name| endpoints.get(name).copied());
                diagnose::replica(pod, endpoint, &warnings)
            })
            .collect()
    }

    /// Writes each secret value the workload pins under its version's key, under the
    /// revision's own field manager; returns each variable's key.
    async fn apply_secrets(
        &self,
        namespace: &str,
        workload: &Workload,
    ) -> Result<BTreeMap<String, String>, DriverError> {
        let api: Api<Secret> = Api::namespaced(self.inner.client.clone(), namespace);
        // Not forced: a key or label another manager set with another value is a conflict,
        // never taken over. Two services' Secret names can collide (`a-b` with `C`, `a` with
        // `B_C`: both `a-b-c`), and one must never write into, nor read from, the other's.
        let params = strict(PatchParams::apply(&format!(
            "{FIELD_MANAGER}-{}",
            object_name(&workload.revision)
        )));
        let mut keys = BTreeMap::new();
        for (variable, value) in &workload.secrets {
            let version = workload.secret_versions.get(variable).copied().unwrap_or(0);
            let key = format!("v{version}");
            let name = runway_render::secret_name(&workload.config, variable);
            let secret = json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {
                        MANAGED_BY.0: MANAGED_BY.1,
                        runway_render::SERVICE_LABEL: workload.service,
                    },
                },
                "type": "Opaque",
                "data": {&key: ByteString(value.as_bytes().to_vec())},
            });
            match api.patch(&name, &params, &Patch::Apply(&secret)).await {
                Ok(_) => {}
                Err(e) if is_conflict(&e) => {
                    return Err(DriverError::Refused(format!(
                        "its secret {variable} is kept in the Secret {namespace}/{name}, which \
                         holds another service's secrets or was changed by hand (the cluster \
                         says: {e}); rename the secret"
                    )));
                }
                Err(e) => return Err(api_error(&format!("apply Secret {namespace}/{name}"), e)),
            }
            keys.insert(variable.clone(), key);
        }
        Ok(keys)
    }

    /// For an image in the platform registry, applies the service's pull secret (a
    /// `kubernetes.io/dockerconfigjson` with its pull-only login there) and returns its name.
    async fn apply_pull_secret(
        &self,
        namespace: &str,
        workload: &Workload,
        image: &str,
    ) -> Result<Option<String>, DriverError> {
        let Some(registry) = &self.registry else {
            return Ok(None);
        };
        if !image.starts_with(&format!("{}/", registry.host)) {
            return Ok(None);
        }
        let (username, password) = (registry.login)(&workload.service, workload.service_id);
        let auth =
            base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
        let config = json!({"auths": {&registry.host: {
            "username": username, "password": password, "auth": auth,
        }}});
        let name = pull_secret_name(&workload.service);
        let secret = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {
                    MANAGED_BY.0: MANAGED_BY.1,
                    runway_render::SERVICE_LABEL: workload.service,
                },
            },
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": ByteString(config.to_string().into_bytes())},
        });
        let api: Api<Secret> = Api::namespaced(self.inner.client.clone(), namespace);
        let params = strict(PatchParams::apply(FIELD_MANAGER));
        match api.patch(&name, &params, &Patch::Apply(&secret)).await {
            Ok(_) => Ok(Some(name)),
            Err(e) if is_conflict(&e) => Err(DriverError::Refused(format!(
                "its pull secret {namespace}/{name} was changed by hand (the cluster says: {e}); \
                 delete it, and the next start makes it again"
            ))),
            Err(e) => Err(api_error(&format!("apply Secret {namespace}/{name}"), e)),
        }
    }

    /// Gives up the secret versions the revision (object name `revision`) applied: an apply of
    /// the Secret with no data under the revision's field manager removes the keys no other
    /// revision applied too (server-side apply drops a field its last manager leaves out). A
    /// Secret left with no key goes.
    async fn release_secret(
        &self,
        namespace: &str,
        secret: &str,
        revision: &str,
    ) -> Result<(), DriverError> {
        let api: Api<Secret> = Api::namespaced(self.inner.client.clone(), namespace);
        let empty = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret, "namespace": namespace},
        });
        let params = strict(PatchParams::apply(&format!("{FIELD_MANAGER}-{revision}")));
        let left = match api.patch(secret, &params, &Patch::Apply(&empty)).await {
            Ok(left) => left,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => {
                return Err(api_error(
                    &format!("release Secret {namespace}/{secret}"),
                    e,
                ));
            }
        };
        if left.data.as_ref().is_some_and(|data| !data.is_empty()) {
            return Ok(());
        }
        // Only the Secret as just seen: a version another revision wrote meanwhile keeps it.
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                resource_version: left.metadata.resource_version,
                uid: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(secret, &params).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
            Err(e) => Err(api_error(&format!("delete Secret {namespace}/{secret}"), e)),
        }
    }

    /// Marks the pods to go first when their ReplicaSet scales down (see [`marked`]).
    async fn mark_for_deletion(&self, namespace: &str, pods: &[&Pod]) -> Result<(), DriverError> {
        let unmarked: Vec<&Pod> = pods.iter().copied().filter(|pod| !marked(pod)).collect();
        self.set_deletion_cost(namespace, &unmarked, RETIRED_COST)
            .await
    }

    /// Removes the `going` pods when lowering the count would not (see [`outranked`]): the
    /// staying pods that rank below them are given a deletion cost above the default, then
    /// the going ones deleted. A replacement the ReplicaSet makes before the count drops has
    /// the default cost, so it is the one the lower count removes.
    async fn remove_outranked(
        &self,
        namespace: &str,
        live: &[(String, Arc<Pod>)],
        going: &[String],
    ) -> Result<(), DriverError> {
        let staying: Vec<&Pod> = live
            .iter()
            .filter(|(id, pod)| !going.contains(id) && !marked(pod))
            .filter(|(_, pod)| !diagnose::running_and_ready(pod) && !kept(pod))
            .map(|(_, pod)| pod.as_ref())
            .collect();
        self.set_deletion_cost(namespace, &staying, KEPT_COST)
            .await?;
        let going: Vec<&Pod> = live
            .iter()
            .filter(|(id, _)| going.contains(id))
            .map(|(_, pod)| pod.as_ref())
            .collect();
        self.delete_pods(namespace, &going).await
    }

    async fn set_deletion_cost(
        &self,
        namespace: &str,
        pods: &[&Pod],
        cost: &str,
    ) -> Result<(), DriverError> {
        let api: Api<Pod> = Api::namespaced(self.inner.client.clone(), namespace);
        let patch = json!({"metadata": {"annotations": {DELETION_COST: cost}}});
        for pod in pods {
            let name = pod.name_any();
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(api_error(&format!("mark pod {namespace}/{name}"), e)),
            }
        }
        Ok(())
    }

    async fn delete_pods(&self, namespace: &str, pods: &[&Pod]) -> Result<(), DriverError> {
        let api: Api<Pod> = Api::namespaced(self.inner.client.clone(), namespace);
        for pod in pods {
            let name = pod.name_any();
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(api_error(&format!("delete pod {namespace}/{name}"), e)),
            }
        }
        Ok(())
    }

    /// Makes the revision's objects, or sets the count of those made already.
    ///
    /// A new revision: its NetworkPolicy (without its owner, so no pod starts unrestricted),
    /// its Deployment at `replicas`, the policy again with the Deployment as owner, its
    /// Service (for a service) and the service's internal Service (the Deployment one of its
    /// owners). A revision made already keeps its pods as they were made, whatever this build
    /// of Runway would render (an upgrade rolls no live revision): only its count is set, and
    /// an object of its that is missing (a first attempt that failed half-way) is made.
    async fn apply_revision(
        &self,
        namespace: &Namespace,
        workload: &Workload,
        image: &str,
        replicas: u32,
        secret_keys: &BTreeMap<String, String>,
        image_pull_secrets: &[String],
    ) -> Result<(), DriverError> {
        let ns = namespace.name.as_str();
        let revision = Revision {
            name: &workload.revision,
            image,
            namespace: ns,
            replicas,
            secret_keys,
            network: &self.network,
            environments: &self.inner.environments,
            image_pull_secrets,
            stop_signal_field: self.stop_signal_field().await,
        };
        let objects = runway_render::revision_objects(&workload.config, &revision)
            .map_err(|e| refused_render(&workload.service, &e))?;
        let name = &object_name(&workload.revision);
        let internal_manager = format!("{FIELD_MANAGER}-{name}");
        let existing = namespace
            .deployments
            .state()
            .iter()
            .find(|d| d.name_any() == *name)
            .cloned();
        let uid = match existing {
            Some(deployment) => {
                let count = deployment.spec.as_ref().and_then(|s| s.replicas);
                if count != Some(i32::try_from(replicas).unwrap_or(i32::MAX)) {
                    self.scale_to(ns, name, replicas).await?;
                }
                deployment.metadata.uid.clone().unwrap_or_default()
            }
            None => {
                // The service's identity (shared by its revisions, kept with the namespace):
                // there before any of its pods, which name it.
                self.apply::<ServiceAccount>(ns, &objects.service_account, None, FIELD_MANAGER)
                    .await?;
                self.apply::<NetworkPolicy>(ns, &objects.network_policy, None, FIELD_MANAGER)
                    .await?;
                let applied: Deployment = self
                    .apply(ns, &objects.deployment, None, FIELD_MANAGER)
                    .await?;
                let uid = applied.metadata.uid.unwrap_or_default();
                self.apply::<NetworkPolicy>(
                    ns,
                    &objects.network_policy,
                    Some((name, &uid)),
                    FIELD_MANAGER,
                )
                .await?;
                if let Some(service) = &objects.service {
                    self.apply::<Service>(ns, service, Some((name, &uid)), FIELD_MANAGER)
                        .await?;
                }
                if let Some(internal) = &objects.internal_service {
                    // The revision's own manager: its owner reference stays beside the others'.
                    self.apply::<Service>(ns, internal, Some((name, &uid)), &internal_manager)
                        .await?;
                }
                self.apply::<PodDisruptionBudget>(
                    ns,
                    &objects.disruption_budget,
                    Some((name, &uid)),
                    FIELD_MANAGER,
                )
                .await?;
                return Ok(());
            }
        };
        // Made already: what is missing of its objects, or lacks it as an owner.
        let owner = (name.as_str(), uid.as_str());
        self.ensure::<NetworkPolicy>(ns, &objects.network_policy, owner, FIELD_MANAGER)
            .await?;
        if let Some(service) = &objects.service {
            self.ensure::<Service>(ns, service, owner, FIELD_MANAGER)
                .await?;
        }
        if let Some(internal) = &objects.internal_service {
            self.ensure::<Service>(ns, internal, owner, &internal_manager)
                .await?;
        }
        self.ensure::<PodDisruptionBudget>(ns, &objects.disruption_budget, owner, FIELD_MANAGER)
            .await
    }

    /// Applies `object` (owned by the Deployment `owner`) unless it exists with that owner
    /// among its owners.
    async fn ensure<K>(
        &self,
        ns: &str,
        object: &serde_json::Value,
        owner: (&str, &str),
        manager: &str,
    ) -> Result<(), DriverError>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + fmt::Debug
            + serde::de::DeserializeOwned,
    {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        if !self.owned_by::<K>(ns, name, owner.1).await? {
            self.apply::<K>(ns, object, Some(owner), manager).await?;
        }
        Ok(())
    }

    /// Server-side applies `object` (owned by the Deployment `owner`, when given) under
    /// `manager`, forced: these objects are Runway's alone.
    async fn apply<K>(
        &self,
        ns: &str,
        object: &serde_json::Value,
        owner: Option<(&str, &str)>,
        manager: &str,
    ) -> Result<K, DriverError>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + fmt::Debug
            + serde::de::DeserializeOwned,
    {
        let mut object = object.clone();
        if let Some((revision, uid)) = owner {
            object["metadata"]["ownerReferences"] = owned_by(revision, uid);
        }
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let api: Api<K> = Api::namespaced(self.inner.client.clone(), ns);
        api.patch(
            &name,
            &strict(PatchParams::apply(manager).force()),
            &Patch::Apply(&object),
        )
        .await
        .map_err(|e| api_error(&format!("apply {} {ns}/{name}", K::kind(&())), e))
    }

    /// Whether the object exists with the Deployment `uid` among its owners.
    async fn owned_by<K>(&self, ns: &str, name: &str, uid: &str) -> Result<bool, DriverError>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + fmt::Debug
            + serde::de::DeserializeOwned,
    {
        let api: Api<K> = Api::namespaced(self.inner.client.clone(), ns);
        match api.get_opt(name).await {
            Ok(found) => Ok(found.is_some_and(|object| {
                object
                    .meta()
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|owner| owner.uid == uid)
            })),
            Err(e) => Err(api_error(&format!("read {} {ns}/{name}", K::kind(&())), e)),
        }
    }

    /// Sets the Deployment's replica count through its scale subresource.
    async fn scale_to(&self, ns: &str, name: &str, replicas: u32) -> Result<(), DriverError> {
        let api: Api<Deployment> = Api::namespaced(self.inner.client.clone(), ns);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let patch = json!({"spec": {"replicas": replicas}});
        api.patch_scale(name, &params, &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|e| api_error(&format!("scale {ns}/{name}"), e))
    }

    /// Lowers the Deployment's replica count to `staying` through its scale subresource,
    /// unless it is lower already (read, not cached: a count this driver just wrote may not
    /// have come back through the watch yet). A conflict with another writer is read and
    /// tried again.
    async fn scale_down_to(
        &self,
        namespace: &str,
        name: &str,
        staying: usize,
    ) -> Result<(), DriverError> {
        let staying = i32::try_from(staying).unwrap_or(i32::MAX);
        let api: Api<Deployment> = Api::namespaced(self.inner.client.clone(), namespace);
        for _ in 0..5 {
            let scale = match api.get_scale(name).await {
                Ok(scale) => scale,
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) => {
                    return Err(api_error(
                        &format!("read the scale of {namespace}/{name}"),
                        e,
                    ));
                }
            };
            let now = scale.spec.and_then(|s| s.replicas).unwrap_or(0);
            if now <= staying {
                return Ok(());
            }
            let patch = json!({
                "metadata": {"resourceVersion": scale.metadata.resource_version},
                "spec": {"replicas": staying},
            });
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            };
            match api.patch_scale(name, &params, &Patch::Merge(&patch)).await {
                Ok(_) => return Ok(()),
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(api_error(&format!("scale {namespace}/{name}"), e)),
            }
        }
        Err(DriverError::Failed(format!(
            "scale {namespace}/{name}: its count kept changing under another writer"
        )))
    }

    /// Why the revision's pods cannot be created, as the API server refused them (Pod
    /// Security, a ResourceQuota, a LimitRange, a webhook): the `ReplicaFailure` condition the
    /// ReplicaSet controller sets and the Deployment controller copies.
    fn replica_failure(namespace: &Namespace, revision: &str) -> Option<String> {
        let deployments = namespace.deployments.state();
        let name = object_name(revision);
        let deployment = deployments.iter().find(|d| d.name_any() == name)?;
        let condition = deployment
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")?;
        Some(
            condition
                .message
                .clone()
                .or_else(|| condition.reason.clone())
                .unwrap_or_else(|| "its ReplicaSet cannot create them".to_owned()),
        )
    }

    /// Waits until the revision has `replicas` pods not being deleted in the cache, its pods
    /// are refused, or [`SCALE_SETTLE`] passes.
    async fn settle(&self, namespace: &Namespace, revision: &str, replicas: usize) {
        let mut changes = self.inner.changes.subscribe();
        let wait = async {
            while Self::live_pods(namespace, revision).len() != replicas
                && Self::replica_failure(namespace, revision).is_none()
            {
                if changes.changed().await.is_err() {
                    return;
                }
                // Every watch event in the namespace is a change: look again at most every
                // 50 ms, not once per event of every other service.
                tokio::time::sleep(SETTLE_LOOK).await;
            }
        };
        let _ = tokio::time::timeout(SCALE_SETTLE, wait).await;
    }

    /// The pods a query names: one, or every one of its service in its environment.
    fn queried(&self, query: &LogQuery) -> Result<(String, Vec<logs::Source>), DriverError> {
        let namespace = self.namespace(&query.env)?;
        let pods: Vec<logs::Source> = namespace
            .pods
            .state()
            .iter()
            .filter(|pod| pod.labels().get(runway_render::SERVICE_LABEL) == Some(&query.service))
            .filter_map(|pod| {
                let revision = diagnose::revision(pod)?;
                Some(logs::Source {
                    id: diagnose::replica_id(revision, pod)?,
                    pod: pod.name_any(),
                    container: diagnose::main_container(pod)?,
                })
            })
            .filter(|source| {
                query
                    .replica
                    .as_ref()
                    .is_none_or(|wanted| *wanted == source.id)
            })
            .collect();
        if let Some(id) = &query.replica
            && pods.is_empty()
        {
            return Err(DriverError::NotFound(id.clone()));
        }
        Ok((namespace.name.clone(), pods))
    }
}

/// A reflector of `K` in `namespace` (objects labelled as Runway's, for pods and
/// Deployments), each change a tick of `changes`; its task re-lists after errors with
/// backoff, and remembers why it failed.
fn reflect<K>(
    client: &Client,
    namespace: &str,
    changes: &watch::Sender<u64>,
    failing: &Arc<Mutex<HashMap<String, String>>>,
) -> (Store<K>, JoinHandle<()>)
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let kind = K::kind(&());
    let config = match kind.as_ref() {
        "Pod" | "Deployment" => {
            watcher::Config::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1))
        }
        _ => watcher::Config::default(),
    };
    let (store, writer) = reflector::store();
    let (changes, failing) = (changes.clone(), Arc::clone(failing));
    let what = format!("{kind} in {namespace}");
    let task = tokio::spawn(async move {
        let stream = watcher(api, config).default_backoff().reflect(writer);
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => {
                    if lock(&failing).remove(&what).is_some() {
                        tracing::info!(%what, "watching again");
                    }
                    changes.send_modify(|n| *n = n.wrapping_add(1));
                }
                Err(error) => {
                    let message = format!("watching {what}: {error}");
                    let previous = lock(&failing).insert(what.clone(), message.clone());
                    if previous.as_ref() != Some(&message) {
                        tracing::warn!(%what, %error, "watch failed");
                    }
                }
            }
        }
    });
    (store, task)
}

/// An apply the API server checks strictly: a field it does not know is refused, never
/// dropped unseen.
fn strict(params: PatchParams) -> PatchParams {
    PatchParams {
        field_validation: Some(kube::api::ValidationDirective::Strict),
        ..params
    }
}

/// The Secrets a Deployment's pods read.
fn secrets_of(deployment: &Deployment) -> std::collections::BTreeSet<String> {
    deployment
        .spec
        .iter()
        .filter_map(|spec| spec.template.spec.as_ref())
        .flat_map(|pod| pod.containers.iter())
        .flat_map(|container| container.env.iter().flatten())
        .filter_map(|env| env.value_from.as_ref()?.secret_key_ref.as_ref())
        .map(|key| key.name.clone())
        .collect()
}

/// `ownerReferences` naming the revision's Deployment.
fn owned_by(revision: &str, uid: &str) -> serde_json::Value {
    json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": revision, "uid": uid}])
}

/// Why a revision's objects cannot be made, as the driver's refusal.
fn refused_render(service: &str, error: &RenderError) -> DriverError {
    DriverError::Refused(match error {
        RenderError::VpcWithoutRanges { .. } => format!(
            "{service} asks for the private network (spec.vpc_access.enabled: true), and this \
             platform gives services on Kubernetes no private range"
        ),
        other => other.to_string(),
    })
}

/// Whether lowering the count would make the ReplicaSet remove a staying pod before the
/// `going` ones: it removes pods that are not yet scheduled, running and ready first, whatever
/// their deletion cost, which orders only pods of one rank. Then the going pods are deleted
/// before the count drops ([`KubeDriver::remove_outranked`]) instead of marked.
fn outranked(live: &[(String, Arc<Pod>)], going: &[String]) -> bool {
    live.iter()
        .filter(|(id, pod)| !going.contains(id) && !marked(pod))
        .any(|(_, pod)| !diagnose::running_and_ready(pod))
}

/// Whether the pod was given [`KEPT_COST`].
fn kept(pod: &Pod) -> bool {
    pod.annotations()
        .get(DELETION_COST)
        .is_some_and(|cost| cost == KEPT_COST)
}

/// Whether the pod was marked to go first by [`KubeDriver::mark_for_deletion`].
fn marked(pod: &Pod) -> bool {
    pod.annotations()
        .get(DELETION_COST)
        .is_some_and(|cost| cost == RETIRED_COST)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// A refusal of the cluster's (a 4xx other than a conflict: the object is invalid, or the
/// driver may not write it) will not pass by trying again; anything else may.
fn api_error(what: &str, error: kube::Error) -> DriverError {
    match &error {
        kube::Error::Api(status)
            if (400..500).contains(&status.code) && status.code != 409 && status.code != 429 =>
        {
            DriverError::Refused(format!("{what}: the cluster refused: {}", status.message))
        }
        _ => DriverError::Failed(format!("{what}: {error}")),
    }
}

impl Driver for KubeDriver {
    fn own_identity(&self) -> bool {
        // Each service's ServiceAccount token, projected into its pods.
        true
    }

    async fn scale(&self, workload: &Workload, scale: &Scale) -> Result<Vec<Replica>, DriverError> {
        let Some(image) = workload.image.as_deref() else {
            return Err(DriverError::Refused(format!(
                "{} runs a plain process, which a cluster runs only as an image of it: set \
                 registry.process_base in the server's configuration (an image its code is \
                 built onto), or deploy an image",
                workload.service
            )));
        };
        let namespace = self.namespace(&workload.env)?;
        let ns = namespace.name.as_str();
        let revision = workload.revision.as_str();
        let live = Self::live_pods(namespace, revision);
        let going: Vec<_> = live
            .iter()
            .filter(|(id, _)| scale.retire.contains(id))
            .collect();
        let wanted = scale.replicas as usize;
        // The ReplicaSet removes `fewer` pods when the count drops: the retired ones, marked
        // to go first; the rest of them are deleted and replaced.
        let fewer = live.len().saturating_sub(wanted).min(going.len());
        let (marked, deleted) = going.split_at(fewer);
        let deleted: Vec<&Pod> = deleted.iter().map(|(_, pod)| pod.as_ref()).collect();
        if outranked(&live, &scale.retire) {
            let ids: Vec<String> = marked.iter().map(|(id, _)| id.clone()).collect();
            self.remove_outranked(ns, &live, &ids).await?;
        } else {
            let marked: Vec<&Pod> = marked.iter().map(|(_, pod)| pod.as_ref()).collect();
            self.mark_for_deletion(ns, &marked).await?;
        }
        let secret_keys = self.apply_secrets(ns, workload).await?;
        let mut pull_secrets = self.inner.options.image_pull_secrets.clone();
        pull_secrets.extend(self.apply_pull_secret(ns, workload, image).await?);
        self.apply_revision(
            namespace,
            workload,
            image,
            scale.replicas,
            &secret_keys,
            &pull_secrets,
        )
        .await?;
        self.delete_pods(ns, &deleted).await?;
        self.settle(namespace, revision, wanted).await;
        if Self::live_pods(namespace, revision).len() < wanted
            && let Some(why) = Self::replica_failure(namespace, revision)
        {
            return Err(DriverError::Refused(format!(
                "the cluster refuses {revision}'s pods: {why}"
            )));
        }
        Ok(Self::replicas_in(namespace)
            .into_iter()
            .filter(|replica| revision_of(&replica.id) == Some(revision))
            .collect())
    }

    async fn retire(
        &self,
        _service: &str,
        env: &str,
        revision: &str,
        replicas: &[String],
    ) -> Result<(), DriverError> {
        let namespace = self.namespace(env)?;
        let live = Self::live_pods(namespace, revision);
        let going: Vec<&Pod> = live
            .iter()
            .filter(|(id, _)| replicas.contains(id))
            .map(|(_, pod)| pod.as_ref())
            .collect();
        if going.is_empty() {
            return Ok(());
        }
        if outranked(&live, replicas) {
            self.remove_outranked(&namespace.name, &live, replicas)
                .await?;
        } else {
            self.mark_for_deletion(&namespace.name, &going).await?;
        }
        // What stays: the live pods not marked to go, by this call or an earlier one whose
        // pods the ReplicaSet has not removed yet. An absolute count, so asking twice before
        // the first is done removes no other pod.
        let staying = live
            .iter()
            .filter(|(id, pod)| !replicas.contains(id) && !marked(pod))
            .count();
        self.scale_down_to(&namespace.name, &object_name(revision), staying)
            .await
    }

    async fn remove(&self, _service: &str, env: &str, revision: &str) -> Result<(), DriverError> {
        let namespace = self.namespace(env)?;
        let name = object_name(revision);
        let Some(deployment) = namespace
            .deployments
            .state()
            .into_iter()
            .find(|d| d.name_any() == name)
        else {
            return Ok(());
        };
        // First the secret versions it pinned, so a failure is tried again with it.
        for secret in secrets_of(&deployment) {
            self.release_secret(&namespace.name, &secret, &name).await?;
        }
        let api: Api<Deployment> = Api::namespaced(self.inner.client.clone(), &namespace.name);
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(api_error(
                &format!("delete Deployment {}/{name}", namespace.name),
                e,
            )),
        }
    }

    async fn revisions(&self) -> Result<Vec<Kept>, DriverError> {
        // Every revision's Deployment, whatever its count.
        Ok(self
            .inner
            .namespaces
            .iter()
            .flat_map(|namespace| {
                namespace.deployments.state().into_iter().filter_map(|d| {
                    Some(Kept {
                        service: d.labels().get(runway_render::SERVICE_LABEL)?.clone(),
                        env: namespace.env.clone(),
                        revision: d
                            .annotations()
                            .get(runway_render::REVISION_ANNOTATION)
                            .or_else(|| d.labels().get(REVISION_LABEL))?
                            .clone(),
                    })
                })
            })
            .collect())
    }

    async fn replicas(&self) -> Result<Vec<Replica>, DriverError> {
        Ok(self
            .inner
            .namespaces
            .iter()
            .flat_map(Self::replicas_in)
            .collect())
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    async fn logs(&self, query: &LogQuery) -> Result<Vec<LogLine>, DriverError> {
        let (namespace, pods) = self.queried(query)?;
        let api: Api<Pod> = Api::namespaced(self.inner.client.clone(), &namespace);
        logs::tail(&api, &pods, query.tail, query.previous).await
    }

    async fn follow(&self, query: &LogQuery) -> Result<mpsc::Receiver<LogLine>, DriverError> {
        let (namespace, pods) = self.queried(query)?;
        let api: Api<Pod> = Api::namespaced(self.inner.client.clone(), &namespace);
        let first = logs::tail(&api, &pods, query.tail, false).await?;
        let (sender, receiver) = mpsc::channel(256);
        let driver = self.clone();
        let query = query.clone();
        tokio::spawn(async move {
            for line in first {
                if sender.send(line).await.is_err() {
                    return;
                }
            }
            let mut followed = logs::Followed::new(api, sender);
            for source in &pods {
                followed.follow(source, false);
            }
            let mut changes = driver.changes();
            while !followed.closed() {
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { return },
                    () = followed.wait_closed() => return,
                }
                if query.replica.is_some() {
                    continue;
                }
                if let Ok((_, now)) = driver.queried(&query) {
                    for source in &now {
                        followed.follow(source, true);
                    }
                }
            }
        });
        Ok(receiver)
    }

    async fn resolve_image(&self, reference: &str) -> Result<String, DriverError> {
        if reference.contains("@sha256:") {
            return Ok(reference.to_owned());
        }
        let Some(resolver) = &self.inner.resolver else {
            return Err(DriverError::Image {
                reference: reference.to_owned(),
                message: "this control plane cannot reach registries: name the image by its \
                          digest (name@sha256:...)"
                    .to_owned(),
            });
        };
        resolver(reference.to_owned())
            .await
            .map_err(|message| DriverError::Image {
                reference: reference.to_owned(),
                message,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_environment_has_its_namespace() {
        let options = KubeOptions {
            namespace_pattern: "apps-{env}".to_owned(),
            environments: vec!["dev".to_owned()],
            ..KubeOptions::default()
        };
        assert_eq!(options.namespace("dev"), "apps-dev");
        assert_eq!(KubeOptions::default().namespace("prod"), "runway-prod");
    }
}
