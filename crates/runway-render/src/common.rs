//! Pieces more than one target builds the same way: the image, labels, annotations, the
//! environment, resources, probes and the stop hook.

use runway_manifest::{Artifact, ProbeAction, ProbeConfig, ServiceConfig, StopSignal};
use serde_json::{Map, Value, json};

use crate::{ReleaseLabels, RenderError, RenderOptions, Target};

/// The label that selects a service's pods, with [`INSTANCE_LABEL`].
pub(crate) const NAME_LABEL: &str = "app.kubernetes.io/name";
/// The label that selects a service's pods, with [`NAME_LABEL`].
pub(crate) const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// The label that carries the image's tag, when it has one.
const VERSION_LABEL: &str = "app.kubernetes.io/version";

/// The image to run: `--image`, else the manifest's `spec.image`; `None` when neither names
/// one, or when the manifest runs a plain process (whose command is a host path, not an image).
pub(crate) fn image<'a>(config: &'a ServiceConfig, options: &'a RenderOptions) -> Option<&'a str> {
    match (&options.image, &config.artifact) {
        (Some(image), _) => Some(image),
        (None, Artifact::Image { reference, .. }) => reference.as_deref(),
        (None, Artifact::Process { .. }) => None,
    }
}

/// The image to run, for a target that runs nothing without one.
pub(crate) fn required_image(
    config: &ServiceConfig,
    options: &RenderOptions,
    target: Target,
) -> Result<String, RenderError> {
    match (image(config, options), &config.artifact) {
        (Some(image), _) => Ok(image.to_owned()),
        (None, Artifact::Process { .. }) => Err(RenderError::ProcessArtifact {
            service: config.name.clone(),
            target,
        }),
        (None, Artifact::Image { .. }) => Err(RenderError::NoImage {
            service: config.name.clone(),
            target,
        }),
    }
}

/// The entrypoint and arguments that replace the image's, when the manifest names them. A
/// plain process's command is a host path and is not carried into an image.
pub(crate) fn command_and_args(config: &ServiceConfig) -> (Option<&[String]>, Option<&[String]>) {
    match &config.artifact {
        Artifact::Image { command, args, .. } => (
            command.as_deref().filter(|c| !c.is_empty()),
            args.as_deref().filter(|a| !a.is_empty()),
        ),
        Artifact::Process { .. } => (None, None),
    }
}

/// The start of a container: its image, and the command and arguments that replace the
/// image's own, where the manifest sets them.
pub(crate) fn container_base(
    config: &ServiceConfig,
    image: &str,
) -> serde_json::Map<String, serde_json::Value> {
    let mut c = serde_json::Map::new();
    c.insert("image".into(), serde_json::json!(image));
    let (command, args) = command_and_args(config);
    if let Some(command) = command {
        c.insert("command".into(), serde_json::json!(command));
    }
    if let Some(args) = args {
        c.insert("args".into(), serde_json::json!(args));
    }
    c
}

/// An image reference split into its parts: `registry:5000/team/app:1.2@sha256:…`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ImageParts<'a> {
    /// Everything before the tag and digest.
    pub(crate) repository: &'a str,
    /// The tag, after the last `:` of the last path segment.
    pub(crate) tag: Option<&'a str>,
    /// The digest, after `@`.
    pub(crate) digest: Option<&'a str>,
}

/// Splits an image reference; joining the parts back gives the reference.
pub(crate) fn split_image(reference: &str) -> ImageParts<'_> {
    let (name, digest) = match reference.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (reference, None),
    };
    let last_segment = name.rfind('/').map_or(0, |i| i + 1);
    match name[last_segment..].rfind(':') {
        Some(i) => ImageParts {
            repository: &name[..last_segment + i],
            tag: Some(&name[last_segment + i + 1..]),
            digest,
        },
        None => ImageParts {
            repository: name,
            tag: None,
            digest,
        },
    }
}

/// The version being deployed: the image's tag; none for an image named only by its digest, or
/// for no image at all.
pub(crate) fn version(image: Option<&str>) -> Option<&str> {
    image
        .and_then(|i| split_image(i).tag)
        .filter(|t| !t.is_empty())
}

/// The stage label and chart annotation: the one given, else the environment, `default`
/// without one.
pub(crate) fn stage<'a>(config: &'a ServiceConfig, release: &'a ReleaseLabels) -> &'a str {
    release
        .stage
        .as_deref()
        .or(config.environment.as_deref())
        .unwrap_or("default")
}

/// `s` as a Kubernetes label value: at most 63 of `[A-Za-z0-9._-]`, alphanumeric at both ends.
pub(crate) fn label_value(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    cleaned
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

/// Labels on every Kubernetes object and pod: the selector's, the version when the image has a
/// tag, and the descriptive ones.
pub(crate) fn labels(
    config: &ServiceConfig,
    release: &ReleaseLabels,
    image: Option<&str>,
) -> Map<String, Value> {
    let mut labels = selector_labels(config);
    if let Some(version) = version(image) {
        labels.insert(VERSION_LABEL.into(), json!(label_value(version)));
    }
    labels.extend(descriptive_labels(config, release));
    labels
}

/// The labels that neither select pods nor follow the image: the Helm chart's `labels` value.
pub(crate) fn descriptive_labels(
    config: &ServiceConfig,
    release: &ReleaseLabels,
) -> Map<String, Value> {
    let mut labels = Map::new();
    labels.insert("app.kubernetes.io/managed-by".into(), json!("runway"));
    if let Some(env) = &config.environment {
        labels.insert("runway.dev/environment".into(), json!(label_value(env)));
    }
    labels.insert(
        STAGE_LABEL.into(),
        json!(label_value(stage(config, release))),
    );
    if let Some(gitlab) = &release.gitlab_release {
        labels.insert(GITLAB_RELEASE_LABEL.into(), json!(label_value(gitlab)));
    }
    labels
}

/// The label and chart annotation of the deployment stage.
pub(crate) const STAGE_LABEL: &str = "runway.dev/stage";
/// The label and chart annotation of the GitLab release a release is compatible with.
pub(crate) const GITLAB_RELEASE_LABEL: &str = "runway.dev/gitlab-release";

/// The labels that select the pods: they never change over the service's life. A Helm chart
/// makes them from its name and the release's.
pub(crate) fn selector_labels(config: &ServiceConfig) -> Map<String, Value> {
    let mut labels = Map::new();
    labels.insert(NAME_LABEL.into(), json!(config.dns_name));
    labels.insert(INSTANCE_LABEL.into(), json!(config.dns_name));
    labels
}

/// Who owns the service, from the manifest's metadata, and why a stop hook is there.
pub(crate) fn annotations(config: &ServiceConfig) -> Map<String, Value> {
    let meta = &config.manifest.metadata;
    let mut annotations = Map::new();
    for (key, value) in [
        ("runway.dev/owner", &meta.owner_email_handle),
        ("runway.dev/department", &meta.department),
        ("runway.dev/department-group", &meta.department_group),
        ("runway.dev/product-category", &meta.product_category),
    ] {
        if let Some(value) = value {
            annotations.insert(key.into(), json!(value));
        }
    }
    if config.stop_signal != StopSignal::Term {
        annotations.insert(
            "runway.dev/stop-signal".into(),
            json!(format!(
                "{signal}: a preStop hook sends it to PID 1 with /bin/sh (and, on Kubernetes \
                 1.33 and later, lifecycle.stopSignal asks the runtime for it); an image \
                 without a shell should say STOPSIGNAL {signal}",
                signal = config.stop_signal
            )),
        );
    }
    annotations
}

/// The pod's `securityContext` under the `restricted` Pod Security Standard: not as root,
/// the runtime's default seccomp profile.
pub(crate) fn pod_security_context() -> Value {
    json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
}

/// The container's `securityContext` under the `restricted` Pod Security Standard: no
/// privilege escalation, no capability.
pub(crate) fn container_security_context() -> Value {
    json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}})
}

/// The container's `lifecycle` when the stop signal is not the SIGTERM Kubernetes sends: a
/// preStop hook that sends the signal itself (it needs `/bin/sh`: on an image without one it
/// fails, and the runtime sends the image's STOPSIGNAL, or SIGTERM), and, where the cluster's
/// API has the field (`stop_signal_field`, 1.33 and later), `stopSignal`, which the runtime
/// sends where the cluster honours it (ContainerStopSignals; an API server without the feature
/// drops the field). An older API server refuses the unknown field under strict validation, so
/// output for any cluster (`runway render`, the chart) goes without it. The pod must then name
/// its OS ([`pod_os`]), which the API server checks the signal against.
pub(crate) fn lifecycle(config: &ServiceConfig, stop_signal_field: bool) -> Option<Value> {
    (config.stop_signal != StopSignal::Term).then(|| {
        let script = format!(
            "kill -s {} 1; while kill -0 1 2>/dev/null; do sleep 1; done",
            config.stop_signal.short_name()
        );
        let mut lifecycle = json!({"preStop": {"exec": {"command": ["/bin/sh", "-c", script]}}});
        if stop_signal_field {
            lifecycle["stopSignal"] = json!(config.stop_signal.to_string());
        }
        lifecycle
    })
}

/// The pod's `os`: Linux, which `lifecycle.stopSignal` needs named.
pub(crate) fn pod_os() -> Value {
    json!({"name": "linux"})
}

/// The Secret holding one of the service's secrets, the same on every target: a Kubernetes
/// Secret (whose key is the variable's name) and a Secret Manager secret for Cloud Run (whose
/// key is the version, `latest`). `<dns_name>-<variable>`, the variable in lower case with `-`
/// for `_` and no trailing `-`: `web-app-stripe-key` for `STRIPE_KEY`. One per variable, as the
/// control plane keeps them (each versioned on its own, under the service and its name) and as
/// Secret Manager holds them (one value per secret).
pub(crate) fn secret_name(config: &ServiceConfig, variable: &str) -> String {
    format!("{}-{}", config.dns_name, secret_suffix(variable))
}

pub(crate) use runway_manifest::secret_suffix;

/// The service's secrets, in name order: the order of their references and of their Secrets.
pub(crate) fn sorted_secrets(config: &ServiceConfig) -> Vec<&str> {
    let mut secrets: Vec<&str> = config.secrets.iter().map(String::as_str).collect();
    secrets.sort_unstable();
    secrets
}

/// The container's environment: `PORT` first when given (so values can use `$(PORT)`), then
/// the variables by name, then the secrets by name, each referenced by `secret_ref`.
pub(crate) fn env(
    config: &ServiceConfig,
    port: Option<u16>,
    secret_ref: impl Fn(&str) -> Value,
) -> Vec<Value> {
    let port = port.map(|p| json!({"name": "PORT", "value": p.to_string()}));
    let vars = config
        .env
        .iter()
        .map(|(name, value)| json!({"name": name, "value": value}));
    let secrets = sorted_secrets(config)
        .into_iter()
        .map(|name| json!({"name": name, "valueFrom": {"secretKeyRef": secret_ref(name)}}));
    port.into_iter().chain(vars).chain(secrets).collect()
}

/// `resources` with limits and, for Kubernetes, requests equal to them.
pub(crate) fn resources(config: &ServiceConfig, with_requests: bool) -> Value {
    let amounts = json!({"cpu": config.cpu, "memory": config.memory});
    let mut resources = Map::new();
    resources.insert("limits".into(), amounts.clone());
    if with_requests {
        resources.insert("requests".into(), amounts);
    }
    Value::Object(resources)
}

/// The container's probes, keyed by field name; none for a service without a port.
///
/// `port` is how HTTP and TCP checks name the port (its name, or its number where names are
/// not accepted); gRPC checks always take the number.
pub(crate) fn probes(config: &ServiceConfig, port: &Value) -> Map<String, Value> {
    let mut probes = Map::new();
    let Some(number) = config.port else {
        return probes;
    };
    let mut add = |key: &str, p: &ProbeConfig, readiness: bool| {
        probes.insert(key.into(), probe(p, port, number, readiness));
    };
    add("startupProbe", &config.startup_probe, false);
    if let Some(p) = &config.liveness_probe {
        add("livenessProbe", p, false);
    }
    if let Some(p) = &config.readiness_probe {
        add("readinessProbe", p, true);
    }
    probes
}

/// One probe. Kubernetes requires a success threshold of 1 for startup and liveness probes, so
/// only readiness probes carry one.
fn probe(p: &ProbeConfig, port: &Value, number: u16, readiness: bool) -> Value {
    let mut out = Map::new();
    match &p.action {
        ProbeAction::Http { path } => {
            out.insert("httpGet".into(), json!({"path": path, "port": port}));
        }
        ProbeAction::Grpc { service } => {
            let mut grpc = Map::new();
            grpc.insert("port".into(), json!(number));
            if !service.is_empty() {
                grpc.insert("service".into(), json!(service));
            }
            out.insert("grpc".into(), Value::Object(grpc));
        }
        ProbeAction::Tcp => {
            out.insert("tcpSocket".into(), json!({"port": port}));
        }
    }
    out.insert("initialDelaySeconds".into(), json!(p.initial_delay_seconds));
    out.insert("periodSeconds".into(), json!(p.period_seconds));
    out.insert("timeoutSeconds".into(), json!(p.timeout_seconds));
    out.insert("failureThreshold".into(), json!(p.failure_threshold));
    if readiness {
        out.insert("successThreshold".into(), json!(p.success_threshold));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references_split_and_join_back() {
        for (reference, repository, tag, digest) in [
            ("app", "app", None, None),
            ("app:1.2", "app", Some("1.2"), None),
            (
                "registry:5000/team/app",
                "registry:5000/team/app",
                None,
                None,
            ),
            (
                "registry:5000/team/app:v1",
                "registry:5000/team/app",
                Some("v1"),
                None,
            ),
            ("r.io/app@sha256:ab", "r.io/app", None, Some("sha256:ab")),
            (
                "r.io/app:1@sha256:ab",
                "r.io/app",
                Some("1"),
                Some("sha256:ab"),
            ),
        ] {
            let parts = split_image(reference);
            assert_eq!(
                parts,
                ImageParts {
                    repository,
                    tag,
                    digest
                },
                "{reference}"
            );
            let joined = format!(
                "{repository}{}{}",
                tag.map(|t| format!(":{t}")).unwrap_or_default(),
                digest.map(|d| format!("@{d}")).unwrap_or_default()
            );
            assert_eq!(joined, reference);
        }
        assert_eq!(version(Some("r.io/app@sha256:ab")), None);
        assert_eq!(version(Some("r.io/app")), None);
        assert_eq!(version(None), None);
        assert_eq!(version(Some("r.io/app:2024-05-01")), Some("2024-05-01"));
    }

    #[test]
    fn secret_names_are_dns_labels_after_the_service() {
        assert_eq!(secret_suffix("STRIPE_KEY"), "stripe-key");
        assert_eq!(secret_suffix("A__B2"), "a--b2");
        assert_eq!(secret_suffix("TOKEN_"), "token");
    }

    #[test]
    fn label_values_are_trimmed_to_what_kubernetes_accepts() {
        assert_eq!(label_value("_v1.2_"), "v1.2");
        assert_eq!(label_value("a b/c"), "a-b-c");
        assert_eq!(label_value(&"x".repeat(70)).len(), 63);
    }
}
