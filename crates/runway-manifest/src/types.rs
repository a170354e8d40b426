//! The typed manifest. Every field upstream's `runway/v1` schema knows is here with the same
//! name and shape, so an upstream file deserialises unchanged; Runway's own additions live under
//! one key, `spec.workload`, so that nothing we add can collide with a later upstream field.
//!
//! Doc comments on these types become the descriptions in the published JSON Schema.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::quantity::Quantity;

/// Port a service listens on when the manifest does not say.
pub const DEFAULT_CONTAINER_PORT: u16 = 8080;
/// Request timeout in seconds when the manifest does not say (Cloud Run's default).
pub const DEFAULT_REQUEST_TIMEOUT_SECONDS: u32 = 300;
/// Longest request timeout Cloud Run accepts, and so the longest we accept.
pub const MAX_REQUEST_TIMEOUT_SECONDS: u32 = 3600;
/// CPU limit when the manifest does not say.
pub const DEFAULT_CPU: &str = "1000m";
/// Memory limit when the manifest does not say.
pub const DEFAULT_MEMORY: &str = "512Mi";
/// Upper bound on instances when the manifest does not say (Cloud Run's default).
pub const DEFAULT_MAX_INSTANCES: u32 = 100;
/// Concurrent requests per instance when the manifest does not say (Cloud Run's default).
pub const DEFAULT_CONCURRENCY: u32 = 80;
/// Traffic steps of a regional rollout when the manifest does not say.
pub const DEFAULT_ROLLOUT_PERCENTAGES: [u8; 4] = [5, 25, 75, 100];
/// Traffic steps of a `runway_canary` rollout when the manifest does not say.
pub const DEFAULT_CANARY_STEPS: [u8; 4] = [10, 25, 50, 100];
/// Seconds each canary step, and each regional rollout percentage, is held when the manifest
/// does not say.
pub const DEFAULT_ROLLOUT_PAUSE_SECONDS: u32 = 60;
/// Seconds a `runway_blue_green` rollout keeps the old revision warm after the switch when the
/// manifest does not say.
pub const DEFAULT_KEEP_OLD_SECONDS: u32 = 600;
/// Highest share of 5xx responses, in percent, a canary window may have by default.
pub const DEFAULT_MAX_ERROR_PERCENT: f64 = 1.0;
/// Percentage points by which a canary's 5xx share may exceed the stable revision's by default.
pub const DEFAULT_MAX_ERROR_PERCENT_OVER_STABLE: f64 = 0.5;
/// Highest p99 latency of a canary window, in milliseconds, by default: upstream's apdex
/// "satisfied" threshold.
pub const DEFAULT_LATENCY_SLO_MS: u32 = 1024;
/// How many times the stable revision's p99 latency a canary's may be by default.
pub const DEFAULT_MAX_P99_OVER_STABLE_RATIO: f64 = 1.5;
/// The least p99 increase over the stable revision, in milliseconds, that fails a canary
/// window by default: below it a difference between two fast revisions is noise.
pub const DEFAULT_MIN_P99_INCREASE_MS: u32 = 25;
/// Fewest canary requests in a window for it to be judged, by default.
pub const DEFAULT_MIN_REQUESTS: u64 = 50;
/// Inconclusive windows a canary step may have before the rollout is rolled back, by default.
pub const DEFAULT_MAX_INCONCLUSIVE_WINDOWS: u32 = 3;
/// Grace between the stop signal and SIGKILL for services, in seconds.
pub const DEFAULT_SERVICE_GRACE_SECONDS: u32 = 30;
/// Grace between the stop signal and SIGKILL for workers, in seconds: a worker finishes its
/// current job first, as a CI runner does.
pub const DEFAULT_WORKER_GRACE_SECONDS: u32 = 3600;
/// Regions when the manifest names none.
pub const DEFAULT_REGION: &str = "us-east1";
/// Share of requests to answer without a 5xx when the manifest does not say: upstream's
/// default SLO. The error budget is 1 minus it.
pub const DEFAULT_AVAILABILITY_TARGET: f64 = 0.999;
/// Apdex score to hold when the manifest does not say: upstream's default SLO.
pub const DEFAULT_APDEX_TARGET: f64 = 0.999;
/// Seconds within which a response satisfies when the manifest does not say: upstream's apdex
/// "satisfied" threshold, a bound of the ingress's latency histogram.
pub const DEFAULT_APDEX_THRESHOLD_SECONDS: f64 = 1.024;
/// How many times the satisfied threshold a response may take and still tolerate (counted
/// half in the apdex score).
pub const APDEX_TOLERATING_FACTOR: u32 = 4;
/// The first upper bound of the ingress's latency histogram
/// (`runway_ingress_request_duration_seconds`), in seconds. Kept equal to `LATENCY_START` in
/// `runway-ingress`'s `metrics.rs`.
pub const LATENCY_BUCKET_START_SECONDS: f64 = 0.000_25;
/// How many upper bounds that histogram has, each double the one before (`LATENCY_BUCKETS` in
/// `runway-ingress`'s `metrics.rs`), besides `+Inf`.
pub const LATENCY_BUCKETS: u32 = 20;

/// The upper bounds of the ingress's latency histogram, in seconds: 0.00025, doubling, 20 of
/// them (up to 131.072). Each is exactly `0.00025 × 2ⁱ` as a float, so it prints (and is
/// exported in the `le` label) as its shortest decimal, `1.024`.
pub fn latency_bucket_bounds() -> impl Iterator<Item = f64> {
    (0..LATENCY_BUCKETS).map(|i| LATENCY_BUCKET_START_SECONDS * f64::from(1_u32 << i))
}

/// The apdex thresholds the ingress's histogram can measure: the bounds whose tolerating bound,
/// [`APDEX_TOLERATING_FACTOR`] times it, is a bound too (0.00025 to 32.768 seconds).
pub fn apdex_thresholds() -> impl Iterator<Item = f64> {
    let last = latency_bucket_bounds()
        .last()
        .unwrap_or(LATENCY_BUCKET_START_SECONDS);
    latency_bucket_bounds().filter(move |b| b * f64::from(APDEX_TOLERATING_FACTOR) <= last)
}

/// A Runway service manifest, `.runway/runway.yml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(title = "Runway service manifest", extend("x-runway-file" = ".runway/runway.yml"))]
pub struct Manifest {
    /// Version of the manifest format. Default `runway/v1`; `runway/v1+dev` admits fields still
    /// in development.
    #[serde(default)]
    pub api_version: ApiVersion,
    /// The kind of document; always `RunwayService`.
    pub kind: Kind,
    /// Who the service is and who owns it.
    pub metadata: Metadata,
    /// How the service is built, run, scaled, rolled out and observed.
    pub spec: Spec,
}

/// Version of the manifest format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ApiVersion {
    /// The stable format.
    #[default]
    #[serde(rename = "runway/v1")]
    V1,
    /// The stable format plus fields still in development.
    #[serde(rename = "runway/v1+dev")]
    V1Dev,
    /// The format's name before v1; read as `runway/v1`.
    #[serde(rename = "runway/v1.0.0-beta")]
    V1Beta,
}

/// The kind of document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Kind {
    /// A service run by Runway.
    RunwayService,
}

/// Who the service is and who owns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    /// The service's name: a DNS label (lower-case letters, digits and `-`, at most 63
    /// characters). Upstream names with `_` are accepted and written with `-` in host names.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// Email handle of the person or group that owns the service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_email_handle: Option<String>,
    /// Department that owns the service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub department: Option<String>,
    /// Department group that owns the service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub department_group: Option<String>,
    /// Product category the service belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product_category: Option<String>,
}

/// How the service is built, run, scaled, rolled out and observed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Container image reference (`registry/repository:tag` or `…@sha256:…`). Deprecated
    /// upstream, where the image is a deploy-time input; here `runway deploy --image` overrides
    /// it. A tag is resolved to a digest once, at deploy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Replaces the container image's entrypoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub command: Option<Vec<String>>,
    /// Replaces the container image's default arguments (its `cmd`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Port the service listens on; given to instances as `PORT`. Default 8080.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub container_port: Option<u32>,
    /// Regions to run in, each once. Default `[us-east1]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub regions: Option<Vec<String>>,
    /// Seconds a request may take before it is answered with 504. Default 300, at most 3600.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub request_timeout: Option<u32>,
    /// CPU and memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    /// How many instances run and how much each takes on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scalability: Option<Scalability>,
    /// Checked from start until it first succeeds; no other probe runs before.
    /// Without it, a TCP connection to the port is the startup check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup_probe: Option<Probe>,
    /// Checked for the instance's life; failing it restarts the instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<Probe>,
    /// Checked for the instance's life; failing it takes the instance out of traffic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<ReadinessProbe>,
    /// How traffic reaches the service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_balancing: Option<LoadBalancing>,
    /// How a new version is rolled out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployment: Option<Deployment>,
    /// Metrics the platform collects from the service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observability: Option<Observability>,
    /// Network policies in front of the service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_policies: Option<NetworkPolicies>,
    /// Access to a private network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vpc_access: Option<VpcAccess>,
    /// Cloud Run execution environment, e.g. `EXECUTION_ENVIRONMENT_GEN2`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_environment: Option<String>,
    /// CPU is allocated only while a request is served (true, the default), or always (false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_based_billing: Option<bool>,
    /// Runway's own settings for running the service on its runtime: the artifact, its
    /// environment, secrets, stop behaviour, workload kind, progressive delivery and objectives.
    /// Not part of upstream's schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<Workload>,
}

/// CPU and memory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// Upper bounds per instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceLimits>,
    /// More CPU while an instance starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup_cpu_boost: Option<bool>,
}

/// Upper bounds per instance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceLimits {
    /// CPU as a quantity: `1000m` (the default), `2`, `0.5`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    /// Memory as a quantity: `512Mi` (the default), `2Gi`, `8G`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
}

/// How many instances run and how much each takes on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scalability {
    /// Fewest instances; 0 lets the service scale to zero. Default 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1000))]
    pub min_instances: Option<u32>,
    /// Most instances. Default 100.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_instances: Option<u32>,
    /// Requests one instance serves at once; past it requests queue. Default 80.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_instance_request_concurrency: Option<u32>,
}

/// A startup or liveness check. With `path` it is an HTTP GET to the port (2xx and 3xx pass);
/// with `grpc_service`, a gRPC health check of that service; with neither, a TCP connection to
/// the port.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    /// HTTP path to GET, starting with `/`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Service name for a gRPC health check (`grpc.health.v1.Health/Check`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc_service: Option<String>,
    /// Seconds to wait after start before the first check. Default 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 240))]
    pub initial_delay_seconds: Option<u32>,
    /// Seconds one check may take. Default 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 240))]
    pub timeout_seconds: Option<u32>,
    /// Seconds between checks. Default 10.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 240))]
    pub period_seconds: Option<u32>,
    /// Consecutive failures before the check is failed. Default 3.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub failure_threshold: Option<u32>,
}

/// The readiness check: HTTP GET of `path` when given, else a TCP connection to the port.
/// It has no initial delay; the startup probe covers that.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadinessProbe {
    /// HTTP path to GET, starting with `/`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Seconds between checks. Default 10.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 240))]
    pub period_seconds: Option<u32>,
    /// Seconds one check may take. Default 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 240))]
    pub timeout_seconds: Option<u32>,
    /// Consecutive failures before the instance leaves traffic. Default 3, at most 3.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3))]
    pub failure_threshold: Option<u32>,
    /// Consecutive successes before the instance gets traffic. Default 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub success_threshold: Option<u32>,
}

/// How traffic reaches the service.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadBalancing {
    /// The public entry point.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_load_balancer: Option<LoadBalancer>,
    /// The entry point for other services on the platform.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub internal_load_balancer: Option<LoadBalancer>,
}

/// One entry point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadBalancer {
    /// Whether this entry point exists. Default true for the external one, false for the
    /// internal one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Protocol between the load balancer and the instances.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_protocol: Option<BackendProtocol>,
}

/// Protocol between the load balancer and the instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum BackendProtocol {
    /// HTTP/1.1.
    #[serde(rename = "rest")]
    Rest,
    /// HTTP/1.1, as upstream's deployments write it.
    #[serde(rename = "HTTP")]
    Http,
    /// gRPC: HTTP/2 in clear text (h2c) to the instance.
    #[serde(rename = "grpc")]
    Grpc,
    /// HTTP/1.1 to the instance, as Cloud Run speaks it behind its TLS.
    #[serde(rename = "HTTPS")]
    Https,
    /// HTTP/2 in clear text (h2c) to the instance.
    #[serde(rename = "HTTP2")]
    Http2,
}

impl BackendProtocol {
    /// Whether instances speak HTTP/2 (h2c) rather than HTTP/1.1.
    pub fn is_http2(self) -> bool {
        matches!(self, Self::Grpc | Self::Http2)
    }
}

/// How a new version is rolled out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Deployment {
    /// The rollout strategy. Default `legacy`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    /// Traffic percentages a regional rollout walks through, strictly increasing and ending at
    /// 100, each held for `spec.workload.rollout.pause_seconds`. Default `[5, 25, 75, 100]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(inner(range(min = 1, max = 100)))]
    pub rollout_traffic_percentages: Option<Vec<Percent>>,
    /// The same list under the spelling upstream's documentation uses; give one or the other.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(inner(range(min = 1, max = 100)))]
    pub traffic_rollout_percentages: Option<Vec<Percent>>,
}

/// A percentage, 1 to 100.
pub type Percent = u8;

/// The rollout strategy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// A rolling deploy: new instances become ready, then take all the traffic.
    #[default]
    Legacy,
    /// Region by region, walking the rollout percentages in each region; every percentage is
    /// held for `spec.workload.rollout.pause_seconds` (default 60).
    RegionalRollout,
    /// Straight to 100 % once ready.
    Expedited,
    /// Compute and print the plan; change nothing.
    Dryrun,
    /// Runway's canary: the new revision takes the traffic in steps
    /// (`spec.workload.rollout.steps`, default 10, 25, 50 and 100 %), each held for
    /// `rollout.pause_seconds`. A step is passed only when an automatic analysis finds the new
    /// revision's window no worse than the stable revision's over the same time
    /// (`rollout.analysis`); a failed analysis rolls all traffic back to the stable revision.
    /// Not part of upstream's schema.
    RunwayCanary,
    /// Runway's blue/green: the new revision starts at full capacity with no traffic, reachable
    /// at its tag URL for checking; then all traffic moves to it at once, on
    /// `runway rollout promote` or `spec.workload.rollout.auto_switch_after_seconds` after it is
    /// ready. The old revision stays warm for `rollout.keep_old_seconds` (default 600), so a
    /// rollback is instant. Not part of upstream's schema.
    RunwayBlueGreen,
}

impl Strategy {
    /// Every strategy as a manifest names it, in the order the type declares them. Read from
    /// the manifest's schema ([`crate::manifest_schema`]), so a new strategy is listed
    /// wherever this is (the CLI's `--strategy`, the test of the CI component's options)
    /// with no list to keep.
    pub fn names() -> Vec<String> {
        crate::schema::manifest_schema()
            .pointer("/$defs/Strategy/enum")
            .and_then(serde_json::Value::as_array)
            .map(|names| {
                names
                    .iter()
                    .filter_map(|name| name.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Metrics the platform collects from the service.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Observability {
    /// `host:port` addresses, inside the instance, to scrape for Prometheus metrics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scrape_targets: Option<Vec<String>>,
    /// Path of the metrics endpoint. Default `/metrics`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_path: Option<String>,
}

/// Network policies in front of the service.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkPolicies {
    /// Whether traffic must come through Cloudflare.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloudflare: Option<bool>,
}

/// Access to a private network.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VpcAccess {
    /// Whether the service reaches the private network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Which egress goes through the private network, e.g. `ALL_TRAFFIC` or
    /// `PRIVATE_RANGES_ONLY`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress: Option<String>,
}

/// Runway's own settings for running the service.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// `service` serves HTTP on its port (the default); `worker` has no port and is stopped
    /// gracefully, as a CI runner is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<WorkloadKind>,
    /// Run a plain process instead of a container image: for development, and for hosts where
    /// containers are not wanted. Without it the service runs from a container image: `spec.image`
    /// or `runway deploy --image`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<Process>,
    /// Build the image from the repository's files, without Docker: `runway deploy` packs them
    /// as one layer on `base` (whose runtime runs them), sets the command and `PORT`, pushes
    /// the image to the platform registry and deploys it. A `Dockerfile` is not built.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build: Option<Build>,
    /// Environment variables for every environment; `.runway/env-<env>.yml` adds to and
    /// overrides them per environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Names of the secrets to inject as environment variables. Values are set with
    /// `runway secrets set`, never written here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Vec<String>>,
    /// Signal that asks the process to stop. Default `SIGTERM` for services, `SIGQUIT` for
    /// workers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<StopSignal>,
    /// Seconds between the stop signal and SIGKILL. Default 30 for services, 3600 for workers.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 86400))]
    pub stop_grace_period_seconds: Option<u32>,
    /// Progressive delivery: the steps, pauses and checks of the `runway_canary` and
    /// `runway_blue_green` strategies, and the pause of `regional_rollout`. Settings no strategy
    /// of this manifest uses are allowed, for a per-environment file that changes the strategy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
    /// The service's objectives, measured at the ingress: what `runway render -t observability`
    /// turns into Prometheus recording rules, multi-window multi-burn-rate alerts and a Grafana
    /// dashboard. Without it, upstream's defaults: 99.9 % availability, apdex 0.999 with
    /// responses satisfied within 1.024 s. Not part of upstream's schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo: Option<Slo>,
    /// What the service's instances may reach outside the platform, within what the operator
    /// allows (`runtime.egress`). Without it: the internet, and none of the private ranges
    /// unless `spec.vpc_access.enabled`. Enforced on packets, so no DNS answer widens it. Not
    /// part of upstream's schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
    /// Which services may call this one at its private name, `<service>.<env>.internal`: a
    /// service's name (any of its environments) or `service/env`. Giving it turns the private
    /// name on, as `load_balancing.internal_load_balancer.enabled: true` does; without it, that
    /// name takes any service of the platform. Each request carries its caller, stamped by the
    /// platform, in `Runway-Caller: service/env`. Not part of upstream's schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callers: Option<Vec<String>>,
    /// The request header that picks a revision by its tag, as the revision's tag host does:
    /// with `tag_header: Runway-Tag`, a request to the service's own name carrying
    /// `Runway-Tag: r7` reaches revision 7 (or a traffic tag's revision), to try a canary or
    /// an old revision where a client cannot change the host. A tag no revision has gets a
    /// 404, never another revision. Stripped before the instance. Without it, a request
    /// carrying `Runway-Tag` is refused (400): no client can count on a header the service did
    /// not ask for. Like the service's other routing settings, it is the serving revision's
    /// (the one with the most traffic). Not part of upstream's schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag_header: Option<String>,
    /// The identity token every instance gets from the platform, a JWT signed by Runway's
    /// OpenID Connect issuer naming the service, the environment and the revision, in the file
    /// `$RUNWAY_IDENTITY_TOKEN_FILE`, renewed before it expires: for OpenBao's or Vault's JWT
    /// auth, or a cloud's workload identity federation, with no static credential. Not part of
    /// upstream's schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
    /// Requests the ingress lets through per second, the service's clients together and each
    /// on its own (an address; an IPv6 client's /64), as token buckets: past them a client
    /// gets 429 with `Retry-After`. Within the operator's ceiling (`ingress.traffic` in the
    /// server's configuration), which also applies to a service without one. Refused requests
    /// are counted (`runway_ingress_client_errors_total`), never against a revision by a
    /// canary's analysis. Not part of upstream's schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// Which client addresses may call the service's public names: with `allow`, only those;
    /// never those in `deny`. Others get 403. A Cloudflare service's client is the one Cloudflare
    /// names. The private name has `callers` instead. Not part of upstream's schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_addresses: Option<ClientAddresses>,
}

/// The service's rate limits (`spec.workload.rate_limit`). Not part of upstream's schema.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Requests per second from all clients together, on average.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("exclusiveMinimum" = 0, "maximum" = 10_000_000))]
    pub requests_per_second: Option<f64>,
    /// Requests let through at once past the average. Default: one second's worth.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000_000))]
    pub burst: Option<u32>,
    /// Each client's own limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_client: Option<ClientRateLimit>,
}

/// One client's rate limit (`spec.workload.rate_limit.per_client`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientRateLimit {
    /// Requests per second from one client, on average.
    #[schemars(extend("exclusiveMinimum" = 0, "maximum" = 10_000_000))]
    pub requests_per_second: f64,
    /// Requests one client may make at once past the average. Default: one second's worth.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000_000))]
    pub burst: Option<u32>,
}

/// Client address lists (`spec.workload.client_addresses`): IPv4 or IPv6 networks
/// (`203.0.113.0/24`, `2001:db8::/32`) or single addresses. Not part of upstream's schema.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientAddresses {
    /// Only clients in these networks may call; absent, every client may.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub allow: Option<Vec<String>>,
    /// Clients in these networks may not call, even when `allow` names them.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub deny: Option<Vec<String>>,
}

/// The instances' identity token (`spec.workload.identity`). Not part of upstream's schema.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    /// Who the token is for, its `aud` claim: the relying party's own name for itself, e.g.
    /// OpenBao's `bound_audiences`. Default: the issuer's URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
}

/// What a service's instances may reach outside the platform. Each entry of `allow` and `deny`
/// is an IPv4 range, optionally with a port or a port range: `203.0.113.0/24`,
/// `10.20.0.5/32:5432`, `198.51.100.0/24:8000-8099`. `deny` is checked first. Not part of
/// upstream's schema.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Egress {
    /// Whether instances reach the internet (addresses outside the private ranges) beyond the
    /// `allow` list. Default true; false locks the service down to `allow`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub internet: Option<bool>,
    /// Ranges (and ports) on the internet instances may reach even when `internet` is false.
    /// Private ranges are not written here: `spec.vpc_access.enabled` gives all of those the
    /// operator gives services (`runtime.egress.private_ranges`), and `deny` narrows them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// Ranges (and ports) instances never reach, whatever else allows them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deny: Option<Vec<String>>,
}

/// A service's objectives, measured at the ingress (`runway_ingress_requests_total` and
/// `runway_ingress_request_duration_seconds`). Not part of upstream's schema.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// Share of requests to answer without a 5xx, strictly between 0 and 1. Default 0.999. The
    /// error budget is 1 minus it; the alerts page when it burns 14.4 times as fast as it
    /// allows over an hour (and the last 5 minutes) or 6 times over 6 hours (and 30 minutes),
    /// and open a ticket when it burns as fast as it allows over 3 days (and 6 hours).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("exclusiveMinimum" = 0, "exclusiveMaximum" = 1))]
    pub availability_target: Option<f64>,
    /// Apdex score to hold, strictly between 0 and 1. Default 0.999. A response within
    /// `apdex_threshold_seconds` satisfies, one within 4 times it tolerates and counts half,
    /// a slower one counts nothing; 1 minus the target is the apdex's budget, alerted on as the
    /// error budget is.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("exclusiveMinimum" = 0, "exclusiveMaximum" = 1))]
    pub apdex_target: Option<f64>,
    /// Seconds within which a response satisfies. Default 1.024. One of the bounds of the
    /// ingress's latency histogram whose 4 times is a bound too: 0.00025, 0.0005, 0.001,
    /// 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    /// 8.192, 16.384 or 32.768.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("exclusiveMinimum" = 0))]
    pub apdex_threshold_seconds: Option<f64>,
    /// The alerts' runbook, an `http://` or `https://` URL. Default: the runbook base URL given
    /// to `runway render --runbook-base` followed by `/` and the service's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runbook_url: Option<String>,
}

/// Progressive delivery: how a new revision takes the traffic under `spec.deployment.strategy`.
/// Each field applies to the strategies it names and is ignored by the others.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rollout {
    /// `runway_canary`: the new revision's share of the traffic at each step, in percent,
    /// strictly increasing and ending at 100. Default `[10, 25, 50, 100]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(inner(range(min = 1, max = 100)))]
    pub steps: Option<Vec<Percent>>,
    /// `runway_canary` and `regional_rollout`: seconds each step (each percentage of a regional
    /// rollout) is held before the next. For a canary it is also the window each analysis
    /// looks at. Default 60.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub pause_seconds: Option<u32>,
    /// `runway_canary`: the checks that pass or fail each step, comparing the new revision with
    /// the stable one over the same window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub analysis: Option<Analysis>,
    /// `runway_blue_green`: switch all traffic this many seconds after the new revision is
    /// ready. Without it, the switch waits for `runway rollout promote`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_switch_after_seconds: Option<u32>,
    /// `runway_blue_green`: seconds the old revision stays warm after the switch, during which
    /// a rollback is instant. Default 600.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_old_seconds: Option<u32>,
}

/// The checks of a `runway_canary` step. Each step's window of the new revision is compared
/// with the stable revision's over the same time; any limit exceeded fails the step and rolls
/// the rollout back. The step at 100 % is not analysed: the stable revision has no traffic left
/// to compare with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Analysis {
    /// Highest share of 5xx responses allowed, in percent (0 to 100). Default 1.0. Not
    /// applied when the stable revision is over it too.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 100.0))]
    pub max_error_percent: Option<f64>,
    /// How many percentage points the new revision's 5xx share may exceed the stable
    /// revision's (0 to 100). Default 0.5.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 100.0))]
    pub max_error_percent_over_stable: Option<f64>,
    /// Highest p99 latency allowed, in milliseconds. Default 1024, upstream's apdex
    /// "satisfied" threshold. Not applied when the stable revision is over it too.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub latency_slo_ms: Option<u32>,
    /// How many times the stable revision's p99 latency the new revision's may be. Default
    /// 1.5, at least 1. Compared only when both served at least 100 requests in the window:
    /// the p99 of fewer is the slowest single request.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1.0))]
    pub max_p99_over_stable_ratio: Option<f64>,
    /// The least p99 increase over the stable revision, in milliseconds, that fails a window
    /// whatever the ratio: p99s of a few milliseconds vary by more than half from one window
    /// to the next, and such a difference is noise. Default 25.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_p99_increase_ms: Option<u32>,
    /// Fewest requests the new revision must serve in a window for it to be judged; a window
    /// with fewer is inconclusive and holds the step. Default 50.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_requests: Option<u64>,
    /// Readiness probe failures of the new revision allowed in a window. Default 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_readiness_failures: Option<u32>,
    /// Instance restarts of the new revision allowed in a window. Default 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<u32>,
    /// Windows a step may stay inconclusive (too few requests to judge) before the rollout is
    /// rolled back. Default 3, at least 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_inconclusive_windows: Option<u32>,
}

/// A plain process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Process {
    /// The program and its arguments. `$PORT` and other `$NAME`s are not expanded by Runway; run
    /// a shell (`[sh, -c, "…"]`) for that.
    #[schemars(length(min = 1))]
    pub command: Vec<String>,
    /// Working directory, relative to the directory holding `.runway/`. Default: that directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
}

/// An image built from the repository's files on a base image (`spec.workload.build`), as ko
/// and jib build them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Build {
    /// The base image, pinned by its digest (`docker.io/library/python:3.12-slim@sha256:…`):
    /// it holds the runtime (Python, Node, a JVM…) the files run on, and its layers are
    /// uploaded once.
    #[schemars(length(min = 1))]
    pub base: String,
    /// The program and its arguments, run in `workdir` (the image's entrypoint; its default
    /// arguments are cleared). `$PORT` is not expanded: run a shell (`[sh, -c, "…"]`) for that.
    #[schemars(length(min = 1))]
    pub command: Vec<String>,
    /// The files and directories to pack, relative to the directory holding `.runway/`.
    /// Default: all of it. `.gitignore` and `.runwayignore` leave files out either way, and
    /// `.git/` and `.runway/` are never packed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub include: Option<Vec<String>>,
    /// Where the files go in the image, an absolute path. Default `/app`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
}

/// What the workload does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadKind {
    /// Serves HTTP on its port.
    #[default]
    Service,
    /// No port; works in the background and is stopped gracefully.
    Worker,
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Service => "service",
            Self::Worker => "worker",
        })
    }
}

/// Signal that asks the process to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StopSignal {
    /// Terminate.
    #[serde(rename = "SIGTERM")]
    Term,
    /// Quit: a graceful stop for CI runners.
    #[serde(rename = "SIGQUIT")]
    Quit,
    /// Interrupt.
    #[serde(rename = "SIGINT")]
    Int,
    /// Hang up.
    #[serde(rename = "SIGHUP")]
    Hup,
    /// User-defined signal 1.
    #[serde(rename = "SIGUSR1")]
    Usr1,
    /// User-defined signal 2.
    #[serde(rename = "SIGUSR2")]
    Usr2,
}

impl StopSignal {
    /// The signal's name, as `kill -s` takes it (`QUIT`).
    pub fn short_name(self) -> &'static str {
        match self {
            Self::Term => "TERM",
            Self::Quit => "QUIT",
            Self::Int => "INT",
            Self::Hup => "HUP",
            Self::Usr1 => "USR1",
            Self::Usr2 => "USR2",
        }
    }
}

impl fmt::Display for StopSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SIG{}", self.short_name())
    }
}
