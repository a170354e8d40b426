//! A Helm chart under `<dns_name>/`. With its default `values.yaml`, `helm template` gives the
//! same objects as the Kubernetes target; the templates only place values, so that what a
//! deployer changes is in `values.yaml`.

use std::fmt;
use std::str::FromStr;

use runway_manifest::{Artifact, ServiceConfig, WorkloadKind};
use serde_json::{Map, Value, json};

use crate::common;
use crate::kubernetes::{self, SERVICE_PORT, TARGET_CPU_UTILIZATION};
use crate::network::{self, Scope};
use crate::{RenderError, RenderOptions, RenderedFile, yaml};

/// Renders the chart.
pub(crate) fn render(
    config: &ServiceConfig,
    options: &RenderOptions,
) -> Result<Vec<RenderedFile>, RenderError> {
    let image = common::image(config, options);
    let rules = network::rules(config, &options.network, Scope::Namespace)?;
    let mut chart = json!({
        "apiVersion": "v2",
        "name": config.dns_name,
        "description": format!("{}, rendered by Runway from its manifest", config.name),
        "type": "application",
        "version": options.chart.version.to_string(),
    });
    if let Some(version) = common::version(image) {
        chart["appVersion"] = json!(version);
    }
    let mut annotations = Map::new();
    annotations.insert(
        common::STAGE_LABEL.into(),
        json!(common::stage(config, &options.release)),
    );
    if let Some(gitlab) = &options.release.gitlab_release {
        annotations.insert(common::GITLAB_RELEASE_LABEL.into(), json!(gitlab));
    }
    chart["annotations"] = Value::Object(annotations);
    let mut values_yaml = format!(
        "# Default values for the {chart} chart, rendered by Runway. Objects are named after the\n\
         # release: `helm install {chart}` names them {chart}, `helm install blue` blue-{chart}\n\
         # (fullnameOverride names them instead).\n",
        chart = config.dns_name
    );
    if image.is_none() {
        values_yaml.push_str(match config.artifact {
            Artifact::Image { .. } => "# The manifest names no image (spec.image).\n",
            Artifact::Process { .. } => {
                "# The manifest runs a plain process (spec.workload.process), which a cluster \
                 cannot run.\n"
            }
        });
        values_yaml.push_str(
            "# Set image.repository (and image.tag or image.digest) here or with\n\
             # `--set image.repository=...`: until then `helm install` refuses the chart.\n",
        );
    }
    if !config.secrets.is_empty() {
        values_yaml.push_str(
            "# secrets are read from one Secret each, named <objects' name>-<variable in lower case>,\n\
             # which the chart creates empty (createSecrets: false when they are made elsewhere).\n",
        );
    }
    values_yaml.push_str(
        "# networkPolicy holds the pods' NetworkPolicy as Runway rendered it from the manifest\n\
         # (egress: DNS, other Runway pods, then what spec.workload.egress and vpc_access allow;\n\
         # ingress, when set: who may reach the pods); enabled: false leaves them unrestricted.\n",
    );
    values_yaml.push_str(&yaml::document(&values(config, options, image, &rules)));

    let file = |name: &str, contents: String| RenderedFile {
        path: format!("{}/{name}", config.dns_name),
        contents,
    };
    let template = |text: &str| text.replace("@chart@", &config.dns_name);
    Ok(vec![
        file("Chart.yaml", yaml::document(&chart)),
        file("values.yaml", values_yaml),
        file("templates/_helpers.tpl", template(HELPERS)),
        file("templates/deployment.yaml", template(DEPLOYMENT)),
        file("templates/serviceaccount.yaml", template(SERVICE_ACCOUNT)),
        file("templates/service.yaml", template(SERVICE)),
        file(
            "templates/service-internal.yaml",
            template(INTERNAL_SERVICE),
        ),
        file("templates/hpa.yaml", template(HPA)),
        file("templates/pdb.yaml", template(PDB)),
        file("templates/networkpolicy.yaml", template(NETWORK_POLICY)),
        file("templates/secrets.yaml", template(SECRETS)),
    ])
}

/// A chart's version: SemVer 2, as Helm requires of Chart.yaml's `version`. `0.1.0` unless
/// given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChartVersion(semver::Version);

impl ChartVersion {
    /// The tag `helm push` gives the chart in an OCI registry: the version, `_` in place of
    /// `+`, which a tag cannot hold (`1.4.0+build.7` is tagged `1.4.0_build.7`).
    pub fn oci_tag(&self) -> String {
        self.0.to_string().replace('+', "_")
    }
}

impl Default for ChartVersion {
    fn default() -> Self {
        Self(semver::Version::new(0, 1, 0))
    }
}

impl FromStr for ChartVersion {
    type Err = RenderError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        semver::Version::parse(s)
            .map(Self)
            .map_err(|e| RenderError::InvalidChartVersion {
                given: s.to_owned(),
                reason: e.to_string(),
            })
    }
}

impl fmt::Display for ChartVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

fn values(
    config: &ServiceConfig,
    options: &RenderOptions,
    image: Option<&str>,
    rules: &network::Rules,
) -> Value {
    let parts = image.map(common::split_image);
    let replicas = config.min_instances.max(1);
    let (min, max) = kubernetes::autoscaling(config).unwrap_or((replicas, replicas));

    let mut v = Map::new();
    v.insert("fullnameOverride".into(), json!(""));
    v.insert(
        "image".into(),
        json!({
            "repository": parts.map_or("", |p| p.repository),
            "tag": parts.and_then(|p| p.tag).unwrap_or(""),
            "digest": parts.and_then(|p| p.digest).unwrap_or(""),
        }),
    );
    v.insert("replicaCount".into(), json!(replicas));
    v.insert(
        "autoscaling".into(),
        json!({
            "enabled": kubernetes::autoscaling(config).is_some(),
            "minReplicas": min,
            "maxReplicas": max,
            "targetCPUUtilizationPercentage": TARGET_CPU_UTILIZATION,
        }),
    );
    v.insert("resources".into(), common::resources(config, true));
    v.insert("env".into(), json!(config.env));
    v.insert("secrets".into(), json!(common::sorted_secrets(config)));
    v.insert("createSecrets".into(), json!(true));
    if let Some(port) = config.port {
        v.insert("containerPort".into(), json!(port));
        v.insert("portName".into(), json!(kubernetes::port_name(config)));
    }
    let mut service = Map::new();
    service.insert(
        "enabled".into(),
        json!(config.kind == WorkloadKind::Service && config.port.is_some()),
    );
    service.insert("port".into(), json!(SERVICE_PORT));
    if config.backend_protocol.is_http2() {
        service.insert("appProtocol".into(), json!("kubernetes.io/h2c"));
    }
    v.insert("service".into(), Value::Object(service));
    v.insert(
        "internalService".into(),
        json!({"enabled": config.kind == WorkloadKind::Service && config.internal && config.port.is_some()}),
    );
    let mut policy = Map::new();
    policy.insert("enabled".into(), json!(true));
    policy.insert("policyTypes".into(), json!(rules.policy_types()));
    if let Some(ingress) = &rules.ingress {
        policy.insert("ingress".into(), json!(ingress));
    }
    policy.insert("egress".into(), json!(rules.egress));
    v.insert("networkPolicy".into(), Value::Object(policy));
    v.insert(
        "probes".into(),
        Value::Object(common::probes(
            config,
            &json!(kubernetes::port_name(config)),
        )),
    );
    // The selector's labels come from the chart and the release, the version from image.tag.
    v.insert(
        "labels".into(),
        Value::Object(common::descriptive_labels(config, &options.release)),
    );
    v.insert(
        "annotations".into(),
        Value::Object(common::annotations(config)),
    );
    v.insert(
        "namespace".into(),
        json!(options.namespace.as_deref().unwrap_or("")),
    );
    let (command, args) = common::command_and_args(config);
    v.insert("command".into(), json!(command.unwrap_or_default()));
    v.insert("args".into(), json!(args.unwrap_or_default()));
    v.insert(
        "terminationGracePeriodSeconds".into(),
        json!(config.stop_grace_period_seconds),
    );
    // The `restricted` Pod Security Standard, and no API token: a values file may loosen them.
    v.insert("automountServiceAccountToken".into(), json!(false));
    // The pods' identity: their ServiceAccount's token, projected for this audience (empty:
    // the API server's own).
    v.insert(
        "identity".into(),
        json!({"audience": config.identity_audience.as_deref().unwrap_or("")}),
    );
    v.insert("podSecurityContext".into(), common::pod_security_context());
    v.insert(
        "securityContext".into(),
        common::container_security_context(),
    );
    if let Some(lifecycle) = common::lifecycle(config, false) {
        v.insert("lifecycle".into(), lifecycle);
    }
    Value::Object(v)
}

const HELPERS: &str = r#"{{/* The chart's name, which is the service's: the container's name and the name label. */}}
{{- define "@chart@.name" -}}
{{ .Chart.Name }}
{{- end }}

{{/*
Every object's name: the release's, then the chart's unless the release's name holds it
(`helm install @chart@` gives @chart@, `helm install blue` blue-@chart@), so that two releases
in one namespace do not collide; fullnameOverride replaces it. At most 63 characters.
*/}}
{{- define "@chart@.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
The Secret holding one secret, called with (list $ "STRIPE_KEY"): the objects' name, then the
variable in lower case with `-` for `_` (blue-@chart@-stripe-key), as the Kubernetes target and
Cloud Run name it.
*/}}
{{- define "@chart@.secretName" -}}
{{- $variable := index . 1 | lower | replace "_" "-" | trimAll "-" }}
{{- printf "%s-%s" (include "@chart@.fullname" (index . 0)) $variable }}
{{- end }}

{{/* The labels that select the pods: the chart's name and the release's. */}}
{{- define "@chart@.selectorLabels" -}}
app.kubernetes.io/name: {{ include "@chart@.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end }}

{{/* Labels on every object and pod: the selector's, the version when image.tag is set, then
those in values. */}}
{{- define "@chart@.labels" -}}
{{ include "@chart@.selectorLabels" . }}
{{- with .Values.image.tag }}
app.kubernetes.io/version: {{ . | toString | trunc 63 | trimAll "-_." | quote }}
{{- end }}
{{- with .Values.labels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* An object's name, namespace and labels. */}}
{{- define "@chart@.metadata" -}}
name: {{ include "@chart@.fullname" . | quote }}
{{- with .Values.namespace }}
namespace: {{ . | quote }}
{{- end }}
labels:
  {{- include "@chart@.labels" . | nindent 2 }}
{{- end }}

{{/* The image reference, from image.repository, image.tag and image.digest. */}}
{{- define "@chart@.image" -}}
{{ required "set image.repository in values.yaml or with --set image.repository=..." .Values.image.repository }}
{{- with .Values.image.tag }}:{{ . }}{{ end }}
{{- with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}
"#;

const DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  {{- include "@chart@.metadata" . | nindent 2 }}
  {{- with .Values.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- if not .Values.autoscaling.enabled }}
  replicas: {{ .Values.replicaCount }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "@chart@.selectorLabels" . | nindent 6 }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 25%
      maxUnavailable: 0
  template:
    metadata:
      labels:
        {{- include "@chart@.labels" . | nindent 8 }}
      annotations:
        kubectl.kubernetes.io/default-container: {{ include "@chart@.name" . | quote }}
    spec:
      serviceAccountName: {{ include "@chart@.fullname" . | quote }}
      automountServiceAccountToken: {{ .Values.automountServiceAccountToken }}
      {{- with .Values.podSecurityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
      containers:
        - name: {{ include "@chart@.name" . | quote }}
          image: {{ include "@chart@.image" . | quote }}
          {{- with .Values.command }}
          command:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with .Values.args }}
          args:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with .Values.containerPort }}
          ports:
            - name: {{ $.Values.portName | quote }}
              containerPort: {{ . }}
          {{- end }}
          env:
            {{- with .Values.containerPort }}
            - name: PORT
              value: {{ . | quote }}
            {{- end }}
            {{- range $name, $value := .Values.env }}
            - name: {{ $name | quote }}
              value: {{ $value | quote }}
            {{- end }}
            {{- range .Values.secrets }}
            - name: {{ . | quote }}
              valueFrom:
                secretKeyRef:
                  name: {{ include "@chart@.secretName" (list $ .) | quote }}
                  key: {{ . | quote }}
            {{- end }}
            - name: RUNWAY_IDENTITY_TOKEN_FILE
              value: "/run/runway/identity/token"
          volumeMounts:
            - name: runway-identity
              mountPath: /run/runway/identity
              readOnly: true
          resources:
            {{- toYaml .Values.resources | nindent 12 }}
          {{- with .Values.securityContext }}
          securityContext:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with .Values.probes }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
          {{- with .Values.lifecycle }}
          lifecycle:
            {{- toYaml . | nindent 12 }}
          {{- end }}
      volumes:
        - name: runway-identity
          projected:
            sources:
              - serviceAccountToken:
                  {{- with .Values.identity.audience }}
                  audience: {{ . | quote }}
                  {{- end }}
                  expirationSeconds: 600
                  path: token
"#;

const SERVICE_ACCOUNT: &str = r#"apiVersion: v1
kind: ServiceAccount
metadata:
  {{- include "@chart@.metadata" . | nindent 2 }}
automountServiceAccountToken: false
"#;

const SERVICE: &str = r#"{{- if .Values.service.enabled }}
apiVersion: v1
kind: Service
metadata:
  {{- include "@chart@.metadata" . | nindent 2 }}
spec:
  type: ClusterIP
  selector:
    {{- include "@chart@.selectorLabels" . | nindent 4 }}
  ports:
    - name: {{ .Values.portName | quote }}
      port: {{ .Values.service.port }}
      targetPort: {{ .Values.portName | quote }}
      protocol: TCP
      {{- with .Values.service.appProtocol }}
      appProtocol: {{ . | quote }}
      {{- end }}
{{- end }}
"#;

const INTERNAL_SERVICE: &str = r#"{{- if and .Values.service.enabled .Values.internalService.enabled }}
apiVersion: v1
kind: Service
metadata:
  name: {{ printf "%s-internal" (include "@chart@.fullname" . | trunc 54 | trimSuffix "-") | quote }}
  {{- with .Values.namespace }}
  namespace: {{ . | quote }}
  {{- end }}
  labels:
    {{- include "@chart@.labels" . | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "@chart@.selectorLabels" . | nindent 4 }}
  ports:
    - name: {{ .Values.portName | quote }}
      port: {{ .Values.service.port }}
      targetPort: {{ .Values.portName | quote }}
      protocol: TCP
      {{- with .Values.service.appProtocol }}
      appProtocol: {{ . | quote }}
      {{- end }}
{{- end }}
"#;

const NETWORK_POLICY: &str = r#"{{- if .Values.networkPolicy.enabled }}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  {{- include "@chart@.metadata" . | nindent 2 }}
spec:
  podSelector:
    matchLabels:
      {{- include "@chart@.selectorLabels" . | nindent 6 }}
  policyTypes:
    {{- toYaml .Values.networkPolicy.policyTypes | nindent 4 }}
  {{- with .Values.networkPolicy.ingress }}
  ingress:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  egress:
    {{- toYaml .Values.networkPolicy.egress | nindent 4 }}
{{- end }}
"#;

const HPA: &str = r#"{{- if .Values.autoscaling.enabled }}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  {{- include "@chart@.metadata" . | nindent 2 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ include "@chart@.fullname" . | quote }}
  minReplicas: {{ .Values.autoscaling.minReplicas }}
  maxReplicas: {{ .Values.autoscaling.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ .Values.autoscaling.targetCPUUtilizationPercentage }}
{{- end }}
"#;

const PDB: &str = r#"apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  {{- include "@chart@.metadata" . | nindent 2 }}
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      {{- include "@chart@.selectorLabels" . | nindent 6 }}
"#;

const SECRETS: &str = r#"{{- if .Values.createSecrets }}
{{- range .Values.secrets }}
---
# {{ . }}'s value, which the chart never holds. Installing creates the Secret empty, and
# `helm upgrade` leaves a value already set alone (`helm uninstall` deletes it); set it on the
# cluster, where the pods do not start without it:
#   kubectl -n {{ $.Values.namespace | default $.Release.Namespace }} patch secret {{ include "@chart@.secretName" (list $ .) }} --type merge -p '{"stringData":{"{{ . }}":"..."}}'
apiVersion: v1
kind: Secret
metadata:
  name: {{ include "@chart@.secretName" (list $ .) | quote }}
  {{- with $.Values.namespace }}
  namespace: {{ . | quote }}
  {{- end }}
  labels:
    {{- include "@chart@.labels" $ | nindent 4 }}
type: Opaque
{{- end }}
{{- end }}
"#;
