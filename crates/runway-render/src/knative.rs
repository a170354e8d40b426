//! A Knative `serving.knative.dev/v1` Service as Cloud Run takes it (`gcloud run services
//! replace`), in `<dns_name>/service.yaml`.

use runway_manifest::{ServiceConfig, WorkloadKind};
use serde_json::{Map, Value, json};

use crate::common;
use crate::{RenderError, RenderOptions, RenderedFile, Target, yaml};

/// Renders the Service.
pub(crate) fn render(
    config: &ServiceConfig,
    options: &RenderOptions,
) -> Result<Vec<RenderedFile>, RenderError> {
    let port = match (config.kind, config.port) {
        (WorkloadKind::Service, Some(port)) => port,
        _ => {
            return Err(RenderError::WorkerUnsupported {
                service: config.name.clone(),
                target: Target::Knative,
            });
        }
    };
    let image = common::required_image(config, options, Target::Knative)?;

    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(config.dns_name));
    if let Some(namespace) = &options.namespace {
        metadata.insert("namespace".into(), json!(namespace));
    }
    metadata.insert("labels".into(), Value::Object(labels(config)));
    let ingress = if config.external { "all" } else { "internal" };
    metadata.insert(
        "annotations".into(),
        json!({"run.googleapis.com/ingress": ingress}),
    );

    let service = json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "template": {
                "metadata": {"annotations": template_annotations(config)},
                "spec": {
                    "containerConcurrency": config.concurrency,
                    "timeoutSeconds": config.request_timeout_seconds,
                    "containers": [container(config, &image, port)],
                },
            },
        },
    });
    Ok(vec![RenderedFile {
        path: format!("{}/service.yaml", config.dns_name),
        contents: yaml::document(&service),
    }])
}

/// Cloud Run's labels are Google Cloud labels: keys and values of lower-case letters, digits,
/// `_` and `-`, so Kubernetes' `app.kubernetes.io/…` keys are not accepted.
fn labels(config: &ServiceConfig) -> Map<String, Value> {
    let mut labels = Map::new();
    labels.insert("app".into(), json!(gcp_label_value(&config.dns_name)));
    labels.insert("managed-by".into(), json!("runway"));
    if let Some(env) = &config.environment {
        labels.insert("environment".into(), json!(gcp_label_value(env)));
    }
    labels
}

fn gcp_label_value(s: &str) -> String {
    s.to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect()
}

fn template_annotations(config: &ServiceConfig) -> Map<String, Value> {
    let spec = &config.manifest.spec;
    let mut a = Map::new();
    let mut set = |key: &str, value: String| {
        a.insert(key.into(), Value::String(value));
    };
    set(
        "autoscaling.knative.dev/minScale",
        config.min_instances.to_string(),
    );
    set(
        "autoscaling.knative.dev/maxScale",
        config.max_instances.to_string(),
    );
    set(
        "run.googleapis.com/startup-cpu-boost",
        config.startup_cpu_boost.to_string(),
    );
    set(
        "run.googleapis.com/cpu-throttling",
        config.request_based_billing.to_string(),
    );
    let generation = match spec.execution_environment.as_deref() {
        Some("EXECUTION_ENVIRONMENT_GEN1") => Some("gen1"),
        Some("EXECUTION_ENVIRONMENT_GEN2") => Some("gen2"),
        _ => None,
    };
    if let Some(generation) = generation {
        set(
            "run.googleapis.com/execution-environment",
            generation.to_owned(),
        );
    }
    if let Some(vpc) = spec.vpc_access.as_ref().filter(|v| v.enabled == Some(true)) {
        let all = vpc
            .egress
            .as_deref()
            .is_some_and(|e| e.to_lowercase().replace('_', "-") == "all-traffic");
        let egress = if all {
            "all-traffic"
        } else {
            "private-ranges-only"
        };
        set("run.googleapis.com/vpc-access-egress", egress.to_owned());
    }
    a
}

fn container(config: &ServiceConfig, image: &str, port: u16) -> Value {
    let mut c = common::container_base(config, image);
    let port_name = if config.backend_protocol.is_http2() {
        "h2c"
    } else {
        "http1"
    };
    c.insert(
        "ports".into(),
        json!([{"name": port_name, "containerPort": port}]),
    );
    // No PORT: Cloud Run sets it and refuses a revision that sets it too.
    let env = common::env(
        config,
        None,
        |name| json!({"name": common::secret_name(config, name), "key": "latest"}),
    );
    if !env.is_empty() {
        c.insert("env".into(), Value::Array(env));
    }
    c.insert("resources".into(), common::resources(config, false));
    c.extend(common::probes(config, &json!(port)));
    Value::Object(c)
}
