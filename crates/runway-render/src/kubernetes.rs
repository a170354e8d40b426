//! Plain Kubernetes objects: a Deployment, a Service for services (and an internal one,
//! `<dns_name>-internal`, for a service with a private name), a HorizontalPodAutoscaler when
//! the service scales, a PodDisruptionBudget, a NetworkPolicy ([`crate::network`]), and a
//! Secret, without its value, for each of the service's secrets; one file each under
//! `<dns_name>/`.

use std::collections::BTreeMap;

use runway_manifest::{ServiceConfig, WorkloadKind};
use serde_json::{Map, Value, json};

use crate::network::{self, NetworkOptions, Scope};
use crate::{ReleaseLabels, RenderError, RenderOptions, RenderedFile, Target, common, yaml};

/// The CPU utilisation the autoscaler keeps pods at, in percent.
pub(crate) const TARGET_CPU_UTILIZATION: u32 = 70;
/// The port a Service listens on.
pub(crate) const SERVICE_PORT: u16 = 80;

/// Renders the objects, one file each.
pub(crate) fn render(
    config: &ServiceConfig,
    options: &RenderOptions,
) -> Result<Vec<RenderedFile>, RenderError> {
    let image = common::required_image(config, options, Target::Kubernetes)?;
    let rules = network::rules(config, &options.network, Scope::Namespace)?;
    let namespace = options.namespace.as_deref();
    let meta = |name: &str, annotations: Map<String, Value>| {
        metadata(
            config,
            &options.release,
            name,
            namespace,
            Some(&image),
            annotations,
        )
    };
    let name = &config.dns_name;
    let shape = Shape::Service;
    let mut objects = vec![
        (
            "deployment".to_owned(),
            deployment(
                config,
                &image,
                meta(name, common::annotations(config)),
                &shape,
            ),
        ),
        (
            "serviceaccount".to_owned(),
            service_account(meta(name, Map::new())),
        ),
    ];
    if config.kind == WorkloadKind::Service {
        objects.push((
            "service".into(),
            service(config, meta(name, Map::new()), &shape),
        ));
    }
    if has_internal_service(config) {
        let internal = network::internal_name(name);
        objects.push((
            "service-internal".into(),
            service(config, meta(&internal, Map::new()), &Shape::Internal),
        ));
    }
    if let Some(range) = autoscaling(config) {
        objects.push(("hpa".into(), hpa(config, range, meta(name, Map::new()))));
    }
    objects.push((
        "pdb".into(),
        pdb(meta(name, Map::new()), common::selector_labels(config)),
    ));
    objects.push((
        "networkpolicy".into(),
        network_policy(meta(name, Map::new()), &rules, shape.selector(config)),
    ));
    let mut files: Vec<RenderedFile> = objects
        .into_iter()
        .map(|(file, object)| RenderedFile {
            path: format!("{name}/{file}.yaml"),
            contents: yaml::document(&object),
        })
        .collect();
    for variable in common::sorted_secrets(config) {
        let metadata = meta(&common::secret_name(config, variable), Map::new());
        files.push(RenderedFile {
            path: format!("{name}/secret-{}.yaml", common::secret_suffix(variable)),
            contents: secret(variable, metadata, namespace),
        });
    }
    Ok(files)
}

/// The pod annotation naming its main container, as kubectl reads it.
pub const DEFAULT_CONTAINER: &str = "kubectl.kubernetes.io/default-container";

/// The label naming the revision a Kubernetes driver's objects and pods belong to.
pub const REVISION_LABEL: &str = "runway.dev/revision";
/// The label naming the service a Kubernetes driver's objects and pods belong to.
pub const SERVICE_LABEL: &str = "runway.dev/service";

/// One revision of a service as Runway's Kubernetes driver runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision<'a> {
    /// The revision's name (`hello-dev-00002`): its Deployment's and Service's.
    pub name: &'a str,
    /// The image, pinned by digest.
    pub image: &'a str,
    pub namespace: &'a str,
    /// How many pods: set by Runway's autoscaler, so no HorizontalPodAutoscaler.
    pub replicas: u32,
    /// The key of each secret variable's value in its Secret ([`crate::secret_name`]): the
    /// version the revision pins, so a new version reaches pods only through a new revision.
    pub secret_keys: &'a BTreeMap<String, String>,
    /// The cluster's network: the private ranges and Runway's ingress pods.
    pub network: &'a NetworkOptions,
    /// Every environment the driver runs and its namespace, where callers' pods are.
    pub environments: &'a [(String, String)],
    /// Secrets (of type `kubernetes.io/dockerconfigjson`) the kubelet pulls the image with.
    pub image_pull_secrets: &'a [String],
    /// The cluster's API has `lifecycle.stopSignal` (Kubernetes 1.33 and later): a stop signal
    /// other than SIGTERM is asked of the runtime there too (see `common::lifecycle`).
    pub stop_signal_field: bool,
}

/// Whether the pods ask the runtime for their stop signal: only a revision's, for a cluster
/// whose API has the field.
fn stop_signal_field(shape: &Shape<'_>) -> bool {
    matches!(shape, Shape::Revision(revision) if revision.stop_signal_field)
}

/// The annotation holding a revision's full name on its Deployment and pods, whatever its
/// objects are named ([`object_name`]).
pub const REVISION_ANNOTATION: &str = "runway.dev/revision";

/// The name of a revision's objects and the value of its [`REVISION_LABEL`]: the revision's
/// own name when Kubernetes takes it as a Service's name and a label's value (at most 63
/// characters, a letter first), else `r`, as much of it as fits and a hash of all of it, so
/// two revisions never share one.
pub fn object_name(revision: &str) -> String {
    if revision.len() <= 63 && revision.starts_with(|c: char| c.is_ascii_lowercase()) {
        return revision.to_owned();
    }
    // FNV-1a: stable across builds and machines, which a name must be.
    let hash = revision.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let cut: String = revision.chars().take(53).collect();
    format!("r{}-{:08x}", cut.trim_end_matches('-'), hash as u32)
}

/// What the driver applies for one revision.
#[derive(Debug, Clone, PartialEq)]
pub struct RevisionObjects {
    /// The revision's Deployment.
    pub deployment: Value,
    /// Its Service (for a service, not a worker), named after the revision.
    pub service: Option<Value>,
    /// The service's internal Service (`<dns_name>-internal`), for a service with a private
    /// name: every revision's pods, so every revision applies it as one of its owners.
    pub internal_service: Option<Value>,
    /// The NetworkPolicy of the revision's pods, named after it.
    pub network_policy: Value,
    /// Its PodDisruptionBudget: one pod of the revision down at a time in a drain.
    pub disruption_budget: Value,
    /// The service's ServiceAccount (`<dns_name>`), whose projected token is its pods'
    /// identity: every revision applies the same object.
    pub service_account: Value,
}

/// A revision's Deployment, its Service (for a service, not a worker), its NetworkPolicy and
/// the service's internal Service: the objects [`crate::render`] renders for the service, made
/// by the same code, and then one revision's: named after it, its pods selected by
/// [`REVISION_LABEL`] too, its replica count set, its secrets referenced at the keys of their
/// versions, callers found in their environments' namespaces. Secrets are the caller's to
/// write (with their values, which Runway never renders). Refused as `runway render` refuses:
/// `vpc_access` without private ranges, an `allow` rule no pod reaches.
pub fn revision_objects(
    config: &ServiceConfig,
    revision: &Revision<'_>,
) -> Result<RevisionObjects, RenderError> {
    let rules = network::rules(
        config,
        revision.network,
        Scope::Environments(revision.environments),
    )?;
    let shape = Shape::Revision(revision);
    let meta = |name: &str, image: Option<&str>, annotations: Map<String, Value>| {
        let mut meta = metadata(
            config,
            &ReleaseLabels::default(),
            name,
            Some(revision.namespace),
            image,
            annotations,
        );
        if let Some(labels) = meta["labels"].as_object_mut() {
            labels.extend(shape.labels(config));
        }
        meta
    };
    let name = object_name(revision.name);
    let own = |annotations| meta(&name, Some(revision.image), annotations);
    let mut annotations = common::annotations(config);
    annotations.insert(REVISION_ANNOTATION.into(), json!(revision.name));
    let deployment = deployment(config, revision.image, own(annotations), &shape);
    let revision_service =
        (config.kind == WorkloadKind::Service).then(|| service(config, own(Map::new()), &shape));
    let internal_service = has_internal_service(config).then(|| {
        // No revision's label or image: every revision applies the same object.
        let mut meta = metadata(
            config,
            &ReleaseLabels::default(),
            &network::internal_name(&config.dns_name),
            Some(revision.namespace),
            None,
            Map::new(),
        );
        if let Some(labels) = meta["labels"].as_object_mut() {
            labels.insert(SERVICE_LABEL.into(), json!(config.name));
        }
        service(config, meta, &Shape::Internal)
    });
    let network_policy = network_policy(own(Map::new()), &rules, shape.selector(config));
    let disruption_budget = pdb(own(Map::new()), shape.selector(config));
    // No revision's label or image: every revision applies the same object.
    let mut account_meta = metadata(
        config,
        &ReleaseLabels::default(),
        &config.dns_name,
        Some(revision.namespace),
        None,
        Map::new(),
    );
    if let Some(labels) = account_meta["labels"].as_object_mut() {
        labels.insert(SERVICE_LABEL.into(), json!(config.name));
    }
    let service_account = service_account(account_meta);
    Ok(RevisionObjects {
        service_account,
        deployment,
        service: revision_service,
        internal_service,
        network_policy,
        disruption_budget,
    })
}

/// Whether the service has an internal Service: it serves on a port and has a private name.
fn has_internal_service(config: &ServiceConfig) -> bool {
    config.kind == WorkloadKind::Service && config.internal && config.port.is_some()
}

fn network_policy(metadata: Value, rules: &network::Rules, pods: Map<String, Value>) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": rules.spec(pods),
    })
}

/// What the objects are for: the service as a user renders it, one revision of it, or the
/// service's internal Service, which selects every revision's pods.
enum Shape<'a> {
    Service,
    Revision(&'a Revision<'a>),
    Internal,
}

impl Shape<'_> {
    /// The labels a revision adds to its objects', its pods' and its selectors'.
    fn labels(&self, config: &ServiceConfig) -> Map<String, Value> {
        let mut labels = Map::new();
        if let Shape::Revision(revision) = self {
            labels.insert(SERVICE_LABEL.into(), json!(config.name));
            labels.insert(REVISION_LABEL.into(), json!(object_name(revision.name)));
        }
        labels
    }

    fn selector(&self, config: &ServiceConfig) -> Map<String, Value> {
        let mut selector = common::selector_labels(config);
        selector.extend(self.labels(config));
        selector
    }

    /// The key a secret's value is read from in its Secret.
    fn secret_key<'k>(&'k self, variable: &'k str) -> &'k str {
        match self {
            Shape::Revision(revision) => revision
                .secret_keys
                .get(variable)
                .map_or(variable, String::as_str),
            Shape::Service | Shape::Internal => variable,
        }
    }
}

/// The fewest and most replicas when the service scales, which needs a range above one.
pub(crate) fn autoscaling(config: &ServiceConfig) -> Option<(u32, u32)> {
    let min = config.min_instances.max(1);
    (config.max_instances > min).then_some((min, config.max_instances))
}

/// The port's name: Kubernetes and Istio read `h2c` as HTTP/2 in clear text.
pub(crate) fn port_name(config: &ServiceConfig) -> &'static str {
    if config.backend_protocol.is_http2() {
        "h2c"
    } else {
        "http"
    }
}

fn metadata(
    config: &ServiceConfig,
    release: &ReleaseLabels,
    name: &str,
    namespace: Option<&str>,
    image: Option<&str>,
    annotations: Map<String, Value>,
) -> Value {
    let mut meta = Map::new();
    meta.insert("name".into(), json!(name));
    if let Some(namespace) = namespace {
        meta.insert("namespace".into(), json!(namespace));
    }
    meta.insert(
        "labels".into(),
        Value::Object(common::labels(config, release, image)),
    );
    if !annotations.is_empty() {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
    Value::Object(meta)
}

/// The Secret holding `variable`, without a value: Runway never renders one. Applying it
/// creates the Secret empty and leaves a value already set on the cluster alone, which the
/// comment above it says how to set.
fn secret(variable: &str, metadata: Value, namespace: Option<&str>) -> String {
    let name = metadata["name"].as_str().unwrap_or_default();
    let namespace = namespace.map(|n| format!(" -n {n}")).unwrap_or_default();
    let comment = format!(
        "# {variable}'s value, which Runway never renders. Applying this file creates the Secret\n\
         # empty and leaves a value already set alone; set it on the cluster, where the pods do\n\
         # not start without it:\n\
         #   kubectl{namespace} patch secret {name} --type merge -p '{{\"stringData\":{{\"{variable}\":\"...\"}}}}'\n"
    );
    let secret =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "Opaque"});
    comment + &yaml::document(&secret)
}

fn deployment(config: &ServiceConfig, image: &str, metadata: Value, shape: &Shape<'_>) -> Value {
    let mut spec = Map::new();
    match shape {
        Shape::Revision(revision) => {
            spec.insert("replicas".into(), json!(revision.replicas));
        }
        Shape::Service if autoscaling(config).is_none() => {
            spec.insert("replicas".into(), json!(config.min_instances.max(1)));
        }
        Shape::Service | Shape::Internal => {}
    }
    spec.insert(
        "selector".into(),
        json!({"matchLabels": shape.selector(config)}),
    );
    spec.insert(
        "strategy".into(),
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}}),
    );
    // The pods carry their Deployment's labels (a revision's included).
    let pod_labels = metadata["labels"].clone();
    // The service's container, for `kubectl logs` and Runway's driver when a mesh adds its own
    // beside it; a revision's pods also carry its full name.
    let mut pod_annotations = Map::new();
    pod_annotations.insert(DEFAULT_CONTAINER.into(), json!(config.dns_name));
    let mut pod = Map::new();
    // A service never calls the Kubernetes API: no API token in its pods. Its identity is its
    // own ServiceAccount's token for its audience, projected where the local runtime puts
    // Runway's (see `identity_volume`).
    pod.insert("serviceAccountName".into(), json!(config.dns_name));
    pod.insert("automountServiceAccountToken".into(), json!(false));
    if stop_signal_field(shape) && config.stop_signal != runway_manifest::StopSignal::Term {
        pod.insert("os".into(), common::pod_os());
    }
    pod.insert("securityContext".into(), common::pod_security_context());
    pod.insert(
        "terminationGracePeriodSeconds".into(),
        json!(config.stop_grace_period_seconds),
    );
    pod.insert(
        "containers".into(),
        json!([container(config, image, shape)]),
    );
    pod.insert("volumes".into(), json!([identity_volume(config)]));
    if let Shape::Revision(revision) = shape {
        pod_annotations.insert(REVISION_ANNOTATION.into(), json!(revision.name));
        if !revision.image_pull_secrets.is_empty() {
            let secrets: Vec<Value> = revision
                .image_pull_secrets
                .iter()
                .map(|name| json!({"name": name}))
                .collect();
            pod.insert("imagePullSecrets".into(), Value::Array(secrets));
        }
    }
    spec.insert(
        "template".into(),
        json!({"metadata": {"labels": pod_labels, "annotations": pod_annotations}, "spec": pod}),
    );
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata, "spec": spec})
}

fn container(config: &ServiceConfig, image: &str, shape: &Shape<'_>) -> Value {
    let mut c = Map::new();
    c.insert("name".into(), json!(config.dns_name));
    c.extend(common::container_base(config, image));
    if let Some(port) = config.port {
        c.insert(
            "ports".into(),
            json!([{"name": port_name(config), "containerPort": port}]),
        );
    }
    let mut env = common::env(
        config,
        config.port,
        |key| json!({"name": common::secret_name(config, key), "key": shape.secret_key(key)}),
    );
    env.push(json!({"name": IDENTITY_ENV, "value": format!("{IDENTITY_MOUNT}/token")}));
    c.insert("env".into(), Value::Array(env));
    c.insert(
        "volumeMounts".into(),
        json!([{"name": IDENTITY_VOLUME, "mountPath": IDENTITY_MOUNT, "readOnly": true}]),
    );
    c.insert("resources".into(), common::resources(config, true));
    c.insert(
        "securityContext".into(),
        common::container_security_context(),
    );
    c.extend(common::probes(config, &json!(port_name(config))));
    if let Some(lifecycle) = common::lifecycle(config, stop_signal_field(shape)) {
        c.insert("lifecycle".into(), lifecycle);
    }
    Value::Object(c)
}

/// Where a pod's identity token is, as on the local runtime: the volume, where it is
/// mounted, the variable naming the file, and how long a token lives (Kubernetes' least; the
/// kubelet renews it at 80 % of that).
const IDENTITY_VOLUME: &str = "runway-identity";
const IDENTITY_MOUNT: &str = "/run/runway/identity";
const IDENTITY_ENV: &str = "RUNWAY_IDENTITY_TOKEN_FILE";
const IDENTITY_SECONDS: u32 = 600;

/// The pods' identity token: their ServiceAccount's, projected for the manifest's audience
/// (`spec.workload.identity.audience`; without one, the API server's own).
fn identity_volume(config: &ServiceConfig) -> Value {
    let mut token = Map::new();
    if let Some(audience) = &config.identity_audience {
        token.insert("audience".into(), json!(audience));
    }
    token.insert("expirationSeconds".into(), json!(IDENTITY_SECONDS));
    token.insert("path".into(), json!("token"));
    json!({
        "name": IDENTITY_VOLUME,
        "projected": {"sources": [{"serviceAccountToken": token}]},
    })
}

/// The service's ServiceAccount: its pods' identity (`system:serviceaccount:<namespace>:
/// <dns_name>`), with no token of its own mounted anywhere and no rights on the cluster.
fn service_account(metadata: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata,
        "automountServiceAccountToken": false,
    })
}

fn service(config: &ServiceConfig, metadata: Value, shape: &Shape<'_>) -> Value {
    let mut port = Map::new();
    port.insert("name".into(), json!(port_name(config)));
    port.insert("port".into(), json!(SERVICE_PORT));
    port.insert("targetPort".into(), json!(port_name(config)));
    port.insert("protocol".into(), json!("TCP"));
    if config.backend_protocol.is_http2() {
        port.insert("appProtocol".into(), json!("kubernetes.io/h2c"));
    }
    let mut spec = Map::new();
    spec.insert("type".into(), json!("ClusterIP"));
    if matches!(shape, Shape::Revision(_)) {
        // Runway's ingress reads a revision's EndpointSlices: no cluster IP is held for it.
        spec.insert("clusterIP".into(), json!("None"));
    }
    spec.insert("selector".into(), json!(shape.selector(config)));
    spec.insert("ports".into(), json!([port]));
    json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec})
}

fn hpa(config: &ServiceConfig, (min, max): (u32, u32), metadata: Value) -> Value {
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata,
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": config.dns_name},
            "minReplicas": min,
            "maxReplicas": max,
            "metrics": [{
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": TARGET_CPU_UTILIZATION},
                },
            }],
        },
    })
}

fn pdb(metadata: Value, pods: Map<String, Value>) -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata,
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": pods},
        },
    })
}
