//! Plain Kubernetes objects: a Deployment, a Service for services, a HorizontalPodAutoscaler when
//! the service scales, a PodDisruptionBudget, and a Secret, without its value, for each of the
//! service's secrets; one file each under `<dns_name>/`.

use runway_manifest::{ServiceConfig, WorkloadKind};
use serde_json::{Map, Value, json};

use crate::common;
use crate::{RenderError, RenderOptions, RenderedFile, Target, yaml};

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
    let namespace = options.namespace.as_deref();
    let meta = |name: &str, annotations: Map<String, Value>| {
        metadata(config, name, namespace, Some(&image), annotations)
    };
    let name = &config.dns_name;
    let mut objects = vec![(
        "deployment".to_owned(),
        deployment(config, &image, meta(name, common::annotations(config))),
    )];
    if config.kind == WorkloadKind::Service {
        objects.push(("service".into(), service(config, meta(name, Map::new()))));
    }
    if let Some(range) = autoscaling(config) {
        objects.push(("hpa".into(), hpa(config, range, meta(name, Map::new()))));
    }
    objects.push(("pdb".into(), pdb(config, meta(name, Map::new()))));
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
        Value::Object(common::labels(config, image)),
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

fn deployment(config: &ServiceConfig, image: &str, metadata: Value) -> Value {
    let mut spec = Map::new();
    if autoscaling(config).is_none() {
        spec.insert("replicas".into(), json!(config.min_instances.max(1)));
    }
    spec.insert(
        "selector".into(),
        json!({"matchLabels": common::selector_labels(config)}),
    );
    spec.insert(
        "strategy".into(),
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}}),
    );
    spec.insert(
        "template".into(),
        json!({
            "metadata": {"labels": common::labels(config, Some(image))},
            "spec": {
                "terminationGracePeriodSeconds": config.stop_grace_period_seconds,
                "containers": [container(config, image)],
            },
        }),
    );
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata, "spec": spec})
}

fn container(config: &ServiceConfig, image: &str) -> Value {
    let mut c = Map::new();
    c.insert("name".into(), json!(config.dns_name));
    c.extend(common::container_base(config, image));
    if let Some(port) = config.port {
        c.insert(
            "ports".into(),
            json!([{"name": port_name(config), "containerPort": port}]),
        );
    }
    let env = common::env(
        config,
        config.port,
        |key| json!({"name": common::secret_name(config, key), "key": key}),
    );
    if !env.is_empty() {
        c.insert("env".into(), Value::Array(env));
    }
    c.insert("resources".into(), common::resources(config, true));
    c.extend(common::probes(config, &json!(port_name(config))));
    if let Some(lifecycle) = common::lifecycle(config) {
        c.insert("lifecycle".into(), lifecycle);
    }
    Value::Object(c)
}

fn service(config: &ServiceConfig, metadata: Value) -> Value {
    let mut port = Map::new();
    port.insert("name".into(), json!(port_name(config)));
    port.insert("port".into(), json!(SERVICE_PORT));
    port.insert("targetPort".into(), json!(port_name(config)));
    port.insert("protocol".into(), json!("TCP"));
    if config.backend_protocol.is_http2() {
        port.insert("appProtocol".into(), json!("kubernetes.io/h2c"));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": "ClusterIP",
            "selector": common::selector_labels(config),
            "ports": [port],
        },
    })
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

fn pdb(config: &ServiceConfig, metadata: Value) -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata,
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": common::selector_labels(config)},
        },
    })
}
