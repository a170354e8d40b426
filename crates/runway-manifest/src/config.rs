//! A service's settings with every default applied: what the renderers, the runtime and the
//! control plane read, so that no consumer applies defaults of its own.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::types::{
    Analysis, BackendProtocol, DEFAULT_APDEX_TARGET, DEFAULT_APDEX_THRESHOLD_SECONDS,
    DEFAULT_AVAILABILITY_TARGET, DEFAULT_CANARY_STEPS, DEFAULT_CONCURRENCY, DEFAULT_CONTAINER_PORT,
    DEFAULT_CPU, DEFAULT_KEEP_OLD_SECONDS, DEFAULT_LATENCY_SLO_MS, DEFAULT_MAX_ERROR_PERCENT,
    DEFAULT_MAX_ERROR_PERCENT_OVER_STABLE, DEFAULT_MAX_INCONCLUSIVE_WINDOWS, DEFAULT_MAX_INSTANCES,
    DEFAULT_MAX_P99_OVER_STABLE_RATIO, DEFAULT_MEMORY, DEFAULT_MIN_P99_INCREASE_MS,
    DEFAULT_MIN_REQUESTS, DEFAULT_REGION, DEFAULT_REQUEST_TIMEOUT_SECONDS,
    DEFAULT_ROLLOUT_PAUSE_SECONDS, DEFAULT_ROLLOUT_PERCENTAGES, DEFAULT_SERVICE_GRACE_SECONDS,
    DEFAULT_WORKER_GRACE_SECONDS, Manifest, Percent, Probe, ReadinessProbe, Rollout, Slo,
    StopSignal, Strategy, Workload, WorkloadKind, apdex_thresholds,
};

/// Default seconds between probe checks.
pub(crate) const DEFAULT_PROBE_PERIOD_SECONDS: u32 = 10;
/// Default seconds one probe check may take.
pub(crate) const DEFAULT_PROBE_TIMEOUT_SECONDS: u32 = 1;
/// Default consecutive failures before a probe fails.
pub(crate) const DEFAULT_PROBE_FAILURE_THRESHOLD: u32 = 3;
/// The startup check when the manifest has none: a TCP connection to the port every second, for
/// up to four minutes (Cloud Run's bound).
const DEFAULT_STARTUP_PROBE: ProbeConfig = ProbeConfig {
    action: ProbeAction::Tcp,
    initial_delay_seconds: 0,
    timeout_seconds: 1,
    period_seconds: 1,
    failure_threshold: 240,
    success_threshold: 1,
};

/// A service's settings with every default applied, for one environment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServiceConfig {
    /// `metadata.name` as written.
    pub name: String,
    /// The name as a DNS label (`_` written as `-`), for host names and object names.
    pub dns_name: String,
    /// The environment these settings are for, if one was chosen.
    pub environment: Option<String>,
    /// The merged manifest these settings come from.
    pub manifest: Manifest,
    /// Service or worker.
    pub kind: WorkloadKind,
    /// What runs.
    pub artifact: Artifact,
    /// Port the instance listens on; none for workers.
    pub port: Option<u16>,
    /// Regions, in the manifest's order.
    pub regions: Vec<String>,
    /// Seconds a request may take.
    pub request_timeout_seconds: u32,
    /// CPU limit as written (`1000m`).
    pub cpu: String,
    /// CPU limit in thousandths of a CPU.
    pub cpu_millis: u64,
    /// Memory limit as written (`512Mi`).
    pub memory: String,
    /// Memory limit in bytes.
    pub memory_bytes: u64,
    /// More CPU while starting.
    pub startup_cpu_boost: bool,
    /// Fewest instances.
    pub min_instances: u32,
    /// Most instances.
    pub max_instances: u32,
    /// Requests one instance serves at once.
    pub concurrency: u32,
    /// Checked from start until it first passes.
    pub startup_probe: ProbeConfig,
    /// Checked for life; failing restarts the instance.
    pub liveness_probe: Option<ProbeConfig>,
    /// Checked for life; failing takes the instance out of traffic.
    pub readiness_probe: Option<ProbeConfig>,
    /// Protocol to the instances.
    pub backend_protocol: BackendProtocol,
    /// Whether the service is reachable from outside the platform.
    pub external: bool,
    /// Whether the service is reachable by other services on the platform, at its private
    /// name: `internal_load_balancer.enabled`, or `spec.workload.callers` given.
    pub internal: bool,
    /// The services that may call it at its private name (`service` or `service/env`); empty
    /// admits every service of the platform.
    pub callers: Vec<String>,
    /// What its instances may reach outside the platform, before the operator's bounds.
    pub egress: EgressConfig,
    /// The audience of its instances' identity token (`spec.workload.identity.audience`);
    /// `None` for the issuer's own URL.
    pub identity_audience: Option<String>,
    /// The ingress's rate limits and client address lists, before the operator's ceiling.
    pub traffic: TrafficConfig,
    /// Rollout strategy.
    pub strategy: Strategy,
    /// Traffic steps of a regional rollout, each held for `rollout.pause_seconds`.
    pub rollout_percentages: Vec<u8>,
    /// Progressive delivery: the canary's steps and analysis, the pause of `runway_canary` and
    /// `regional_rollout`, and blue/green's switch and warm time. Resolved whatever the
    /// strategy; each strategy reads the fields it names.
    pub rollout: RolloutConfig,
    /// Environment variables: `spec.workload.env` overlaid with `.runway/env-<env>.yml`.
    pub env: BTreeMap<String, String>,
    /// Names of secrets injected as environment variables.
    pub secrets: Vec<String>,
    /// Signal that asks the process to stop.
    pub stop_signal: StopSignal,
    /// Seconds between the stop signal and SIGKILL.
    pub stop_grace_period_seconds: u32,
    /// Path of the metrics endpoint.
    pub metrics_path: String,
    /// `host:port` addresses to scrape.
    pub scrape_targets: Vec<String>,
    /// The objectives the rendered recording rules, alerts and dashboard hold the service to.
    pub slo: SloConfig,
    /// CPU allocated only while serving a request.
    pub request_based_billing: bool,
}

/// What runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Artifact {
    /// A container image.
    Image {
        /// The reference, when the manifest names one; otherwise it comes at deploy time.
        reference: Option<String>,
        /// Replaces the image's entrypoint.
        command: Option<Vec<String>>,
        /// Replaces the image's default arguments.
        args: Option<Vec<String>>,
    },
    /// A plain process.
    Process {
        /// Program and arguments.
        command: Vec<String>,
        /// Working directory, relative to the directory holding `.runway/`.
        working_dir: Option<String>,
    },
}

/// A probe with every default applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeConfig {
    /// What one check does.
    pub action: ProbeAction,
    /// Seconds before the first check.
    pub initial_delay_seconds: u32,
    /// Seconds one check may take.
    pub timeout_seconds: u32,
    /// Seconds between checks.
    pub period_seconds: u32,
    /// Consecutive failures before the probe fails.
    pub failure_threshold: u32,
    /// Consecutive successes before the probe passes.
    pub success_threshold: u32,
}

/// `spec.workload.rollout` with every default applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RolloutConfig {
    /// `runway_canary`: the new revision's share of the traffic at each step, in percent,
    /// strictly increasing and ending at 100.
    pub steps: Vec<Percent>,
    /// `runway_canary` and `regional_rollout`: seconds each step is held, at least 1. For a
    /// canary, also the length of each analysis window.
    pub pause_seconds: u32,
    /// `runway_canary`: the limits each step's window is held to.
    pub analysis: AnalysisConfig,
    /// `runway_blue_green`: seconds after the new revision is ready that all traffic switches
    /// to it; `None` waits for `runway rollout promote`.
    pub auto_switch_after_seconds: Option<u32>,
    /// `runway_blue_green`: seconds the old revision stays warm after the switch.
    pub keep_old_seconds: u32,
}

impl Default for RolloutConfig {
    /// The settings of a manifest that gives none.
    fn default() -> Self {
        Self {
            steps: DEFAULT_CANARY_STEPS.to_vec(),
            pause_seconds: DEFAULT_ROLLOUT_PAUSE_SECONDS,
            analysis: AnalysisConfig::default(),
            auto_switch_after_seconds: None,
            keep_old_seconds: DEFAULT_KEEP_OLD_SECONDS,
        }
    }
}

/// `spec.workload.rollout.analysis` with every default applied: the limits a `runway_canary`
/// step's window of the new revision is held to, against the stable revision's same window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnalysisConfig {
    /// Highest share of 5xx responses, in percent, 0 to 100.
    pub max_error_percent: f64,
    /// Percentage points the new revision's 5xx share may exceed the stable revision's, 0 to
    /// 100.
    pub max_error_percent_over_stable: f64,
    /// Highest p99 latency, in milliseconds, at least 1.
    pub latency_slo_ms: u32,
    /// How many times the stable revision's p99 latency the new revision's may be, at least 1.
    pub max_p99_over_stable_ratio: f64,
    /// The least p99 increase over the stable revision that fails a window, in milliseconds.
    pub min_p99_increase_ms: u32,
    /// Fewest new-revision requests in a window for it to be judged; fewer is inconclusive.
    pub min_requests: u64,
    /// Readiness probe failures allowed in a window.
    pub max_readiness_failures: u32,
    /// Instance restarts allowed in a window.
    pub max_restarts: u32,
    /// Windows a step may stay inconclusive before the rollout is rolled back, at least 1.
    pub max_inconclusive_windows: u32,
}

impl Default for AnalysisConfig {
    /// The limits of a manifest that gives none.
    fn default() -> Self {
        Self {
            max_error_percent: DEFAULT_MAX_ERROR_PERCENT,
            max_error_percent_over_stable: DEFAULT_MAX_ERROR_PERCENT_OVER_STABLE,
            latency_slo_ms: DEFAULT_LATENCY_SLO_MS,
            max_p99_over_stable_ratio: DEFAULT_MAX_P99_OVER_STABLE_RATIO,
            min_p99_increase_ms: DEFAULT_MIN_P99_INCREASE_MS,
            min_requests: DEFAULT_MIN_REQUESTS,
            max_readiness_failures: 0,
            max_restarts: 0,
            max_inconclusive_windows: DEFAULT_MAX_INCONCLUSIVE_WINDOWS,
        }
    }
}

/// `spec.workload.slo` with every default applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SloConfig {
    /// Share of requests to answer without a 5xx, strictly between 0 and 1.
    pub availability_target: f64,
    /// Apdex score to hold, strictly between 0 and 1.
    pub apdex_target: f64,
    /// Seconds within which a response satisfies: one of [`crate::apdex_thresholds`].
    pub apdex_threshold_seconds: f64,
    /// The alerts' runbook, when the manifest names one; otherwise whoever renders the alerts
    /// builds it from a base URL and the service's name.
    pub runbook_url: Option<String>,
}

impl Default for SloConfig {
    /// The objectives of a manifest that gives none: upstream's.
    fn default() -> Self {
        Self {
            availability_target: DEFAULT_AVAILABILITY_TARGET,
            apdex_target: DEFAULT_APDEX_TARGET,
            apdex_threshold_seconds: DEFAULT_APDEX_THRESHOLD_SECONDS,
            runbook_url: None,
        }
    }
}

/// What one check does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProbeAction {
    /// HTTP GET of a path on the port; 2xx and 3xx pass.
    Http {
        /// The path, starting with `/`.
        path: String,
    },
    /// gRPC health check of a service on the port.
    Grpc {
        /// The service name given to `grpc.health.v1.Health/Check`.
        service: String,
    },
    /// A TCP connection to the port.
    Tcp,
}

impl ServiceConfig {
    /// Applies the defaults to a manifest that has passed validation, with the environment's
    /// variables. Values validation would have refused fall back to their defaults.
    pub fn from_manifest(
        manifest: &Manifest,
        environment: Option<&str>,
        env_file: &BTreeMap<String, String>,
    ) -> Self {
        let spec = &manifest.spec;
        let workload = spec.workload.clone().unwrap_or_default();
        let traffic = traffic(&workload);
        let kind = workload.kind.unwrap_or_default();
        let limits = spec
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .unwrap_or_default();
        let cpu = limits
            .cpu
            .map_or_else(|| DEFAULT_CPU.to_owned(), |q| q.as_str().to_owned());
        let memory = limits
            .memory
            .map_or_else(|| DEFAULT_MEMORY.to_owned(), |q| q.as_str().to_owned());
        let scalability = spec.scalability.clone().unwrap_or_default();
        let lb = spec.load_balancing.clone().unwrap_or_default();
        let external = lb.external_load_balancer.clone().unwrap_or_default();
        let internal = lb.internal_load_balancer.clone().unwrap_or_default();
        let deployment = spec.deployment.clone().unwrap_or_default();
        let observability = spec.observability.clone().unwrap_or_default();
        let is_worker = kind == WorkloadKind::Worker;

        let artifact = match workload.process {
            Some(process) => Artifact::Process {
                command: process.command,
                working_dir: process.working_dir,
            },
            None => Artifact::Image {
                reference: spec.image.clone(),
                command: spec.command.clone(),
                args: spec.args.clone(),
            },
        };
        let mut env = workload.env.unwrap_or_default();
        env.extend(env_file.iter().map(|(k, v)| (k.clone(), v.clone())));

        Self {
            name: manifest.metadata.name.clone(),
            dns_name: dns_name(&manifest.metadata.name),
            environment: environment.map(str::to_owned),
            manifest: manifest.clone(),
            kind,
            artifact,
            port: (!is_worker).then(|| {
                spec.container_port
                    .and_then(|p| u16::try_from(p).ok())
                    .unwrap_or(DEFAULT_CONTAINER_PORT)
            }),
            regions: spec
                .regions
                .clone()
                .unwrap_or_else(|| vec![DEFAULT_REGION.to_owned()]),
            request_timeout_seconds: spec
                .request_timeout
                .unwrap_or(DEFAULT_REQUEST_TIMEOUT_SECONDS),
            cpu_millis: crate::quantity::Quantity::new(&cpu)
                .cpu_millis()
                .unwrap_or(1000),
            cpu,
            memory_bytes: crate::quantity::Quantity::new(&memory)
                .bytes()
                .unwrap_or(512 << 20),
            memory,
            startup_cpu_boost: spec
                .resources
                .as_ref()
                .and_then(|r| r.startup_cpu_boost)
                .unwrap_or(false),
            min_instances: scalability.min_instances.unwrap_or(0),
            max_instances: scalability.max_instances.unwrap_or(DEFAULT_MAX_INSTANCES),
            concurrency: scalability
                .max_instance_request_concurrency
                .unwrap_or(DEFAULT_CONCURRENCY),
            startup_probe: spec
                .startup_probe
                .as_ref()
                .map_or(DEFAULT_STARTUP_PROBE, probe),
            liveness_probe: spec.liveness_probe.as_ref().map(probe),
            readiness_probe: spec.readiness_probe.as_ref().map(readiness),
            // The protocol of the entry point that exists: upstream's own example turns the
            // external one off and speaks gRPC on the internal one.
            backend_protocol: if external.enabled == Some(false) {
                internal.backend_protocol.or(external.backend_protocol)
            } else {
                external.backend_protocol.or(internal.backend_protocol)
            }
            .unwrap_or(BackendProtocol::Rest),
            external: !is_worker && external.enabled.unwrap_or(true),
            internal: !is_worker
                && (internal.enabled.unwrap_or(false) || workload.callers.is_some()),
            callers: workload.callers.clone().unwrap_or_default(),
            identity_audience: workload.identity.as_ref().and_then(|i| i.audience.clone()),
            egress: EgressConfig {
                internet: workload
                    .egress
                    .as_ref()
                    .and_then(|e| e.internet)
                    .unwrap_or(true),
                vpc: spec
                    .vpc_access
                    .as_ref()
                    .is_some_and(|v| v.enabled == Some(true)),
                allow: rules(workload.egress.as_ref().and_then(|e| e.allow.as_ref())),
                deny: rules(workload.egress.as_ref().and_then(|e| e.deny.as_ref())),
            },
            traffic,
            strategy: deployment.strategy.unwrap_or_default(),
            rollout_percentages: deployment
                .rollout_traffic_percentages
                .or(deployment.traffic_rollout_percentages)
                .unwrap_or_else(|| DEFAULT_ROLLOUT_PERCENTAGES.to_vec()),
            rollout: workload.rollout.as_ref().map(rollout).unwrap_or_default(),
            env,
            secrets: workload.secrets.unwrap_or_default(),
            stop_signal: workload.stop_signal.unwrap_or(if is_worker {
                StopSignal::Quit
            } else {
                StopSignal::Term
            }),
            stop_grace_period_seconds: workload.stop_grace_period_seconds.unwrap_or(if is_worker {
                DEFAULT_WORKER_GRACE_SECONDS
            } else {
                DEFAULT_SERVICE_GRACE_SECONDS
            }),
            metrics_path: observability
                .metrics_path
                .unwrap_or_else(|| "/metrics".to_owned()),
            scrape_targets: observability.scrape_targets.unwrap_or_default(),
            slo: workload.slo.as_ref().map(slo).unwrap_or_default(),
            request_based_billing: spec.request_based_billing.unwrap_or(true),
        }
    }

    /// The image reference, if the manifest names one.
    pub fn image(&self) -> Option<&str> {
        match &self.artifact {
            Artifact::Image { reference, .. } => reference.as_deref(),
            Artifact::Process { .. } => None,
        }
    }
}

/// What a service's instances may reach outside the platform, as its manifest asks; the
/// operator's `runtime.egress` bounds it when an instance starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct EgressConfig {
    /// The internet (what is not private) beyond `allow`.
    pub internet: bool,
    /// `spec.vpc_access.enabled`: the private ranges the operator gives such services.
    pub vpc: bool,
    pub allow: Vec<crate::egress::Rule>,
    pub deny: Vec<crate::egress::Rule>,
}

impl Default for EgressConfig {
    fn default() -> Self {
        Self {
            internet: true,
            vpc: false,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }
}

/// The ingress's controls a service asks for (`spec.workload.rate_limit` and
/// `client_addresses`), defaults applied; the operator's `ingress.traffic` bounds them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TrafficConfig {
    /// All clients together.
    pub rate_limit: Option<TokenBucket>,
    /// Each client.
    pub per_client: Option<TokenBucket>,
    /// Networks whose clients alone may call; empty, every client.
    pub allow: Vec<String>,
    /// Networks whose clients may not.
    pub deny: Vec<String>,
}

/// A token bucket: requests per second on average, and at once.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TokenBucket {
    pub requests_per_second: f64,
    pub burst: u32,
}

impl TokenBucket {
    /// `burst` by default one second's worth, at least 1.
    pub fn new(requests_per_second: f64, burst: Option<u32>) -> Self {
        Self {
            requests_per_second,
            burst: burst.unwrap_or_else(|| requests_per_second.ceil().clamp(1.0, 1e7) as u32),
        }
    }
}

fn traffic(workload: &Workload) -> TrafficConfig {
    let limit = workload.rate_limit.as_ref();
    let addresses = workload.client_addresses.as_ref();
    TrafficConfig {
        rate_limit: limit.and_then(|l| Some(TokenBucket::new(l.requests_per_second?, l.burst))),
        per_client: limit
            .and_then(|l| l.per_client.as_ref())
            .map(|c| TokenBucket::new(c.requests_per_second, c.burst)),
        allow: addresses.and_then(|a| a.allow.clone()).unwrap_or_default(),
        deny: addresses.and_then(|a| a.deny.clone()).unwrap_or_default(),
    }
}

/// Rules as written, those validation would have refused left out.
fn rules(written: Option<&Vec<String>>) -> Vec<crate::egress::Rule> {
    written
        .into_iter()
        .flatten()
        .filter_map(|rule| rule.parse().ok())
        .collect()
}

/// The name as a DNS label: upstream admits `_` in names, host names do not.
pub fn dns_name(name: &str) -> String {
    name.replace('_', "-")
}

/// A secret variable's part of its Kubernetes Secret's name (`{service}-{suffix}`):
/// `STRIPE_KEY` is `stripe-key`. Two of a service's secrets with one suffix (`TOKEN` and
/// `TOKEN_`) are refused by validation. The Helm chart's `secretName` helper does the same.
pub fn secret_suffix(variable: &str) -> String {
    variable
        .to_ascii_lowercase()
        .replace('_', "-")
        .trim_end_matches('-')
        .to_owned()
}

fn action(path: Option<&String>, grpc_service: Option<&String>) -> ProbeAction {
    match (path, grpc_service) {
        (Some(path), _) => ProbeAction::Http { path: path.clone() },
        (None, Some(service)) => ProbeAction::Grpc {
            service: service.clone(),
        },
        (None, None) => ProbeAction::Tcp,
    }
}

fn probe(p: &Probe) -> ProbeConfig {
    ProbeConfig {
        action: action(p.path.as_ref(), p.grpc_service.as_ref()),
        initial_delay_seconds: p.initial_delay_seconds.unwrap_or(0),
        timeout_seconds: p.timeout_seconds.unwrap_or(DEFAULT_PROBE_TIMEOUT_SECONDS),
        period_seconds: p.period_seconds.unwrap_or(DEFAULT_PROBE_PERIOD_SECONDS),
        failure_threshold: p
            .failure_threshold
            .unwrap_or(DEFAULT_PROBE_FAILURE_THRESHOLD),
        success_threshold: 1,
    }
}

fn rollout(r: &Rollout) -> RolloutConfig {
    let defaults = RolloutConfig::default();
    RolloutConfig {
        steps: r.steps.clone().unwrap_or(defaults.steps),
        pause_seconds: r
            .pause_seconds
            .filter(|&s| s >= 1)
            .unwrap_or(defaults.pause_seconds),
        analysis: r.analysis.as_ref().map(analysis).unwrap_or_default(),
        auto_switch_after_seconds: r.auto_switch_after_seconds,
        keep_old_seconds: r.keep_old_seconds.unwrap_or(defaults.keep_old_seconds),
    }
}

fn analysis(a: &Analysis) -> AnalysisConfig {
    let defaults = AnalysisConfig::default();
    let percent = |value: Option<f64>, default: f64| {
        value
            .filter(|v| v.is_finite() && (0.0..=100.0).contains(v))
            .unwrap_or(default)
    };
    AnalysisConfig {
        max_error_percent: percent(a.max_error_percent, defaults.max_error_percent),
        max_error_percent_over_stable: percent(
            a.max_error_percent_over_stable,
            defaults.max_error_percent_over_stable,
        ),
        latency_slo_ms: a
            .latency_slo_ms
            .filter(|&ms| ms >= 1)
            .unwrap_or(defaults.latency_slo_ms),
        max_p99_over_stable_ratio: a
            .max_p99_over_stable_ratio
            .filter(|r| r.is_finite() && *r >= 1.0)
            .unwrap_or(defaults.max_p99_over_stable_ratio),
        min_p99_increase_ms: a
            .min_p99_increase_ms
            .unwrap_or(defaults.min_p99_increase_ms),
        min_requests: a.min_requests.unwrap_or(defaults.min_requests),
        max_readiness_failures: a
            .max_readiness_failures
            .unwrap_or(defaults.max_readiness_failures),
        max_restarts: a.max_restarts.unwrap_or(defaults.max_restarts),
        max_inconclusive_windows: a
            .max_inconclusive_windows
            .filter(|&w| w >= 1)
            .unwrap_or(defaults.max_inconclusive_windows),
    }
}

fn slo(s: &Slo) -> SloConfig {
    let defaults = SloConfig::default();
    let target = |value: Option<f64>, default: f64| {
        value
            .filter(|v| v.is_finite() && *v > 0.0 && *v < 1.0)
            .unwrap_or(default)
    };
    SloConfig {
        availability_target: target(s.availability_target, defaults.availability_target),
        apdex_target: target(s.apdex_target, defaults.apdex_target),
        apdex_threshold_seconds: s
            .apdex_threshold_seconds
            .filter(|t| apdex_thresholds().any(|b| b == *t))
            .unwrap_or(defaults.apdex_threshold_seconds),
        runbook_url: s.runbook_url.clone(),
    }
}

fn readiness(p: &ReadinessProbe) -> ProbeConfig {
    ProbeConfig {
        action: action(p.path.as_ref(), None),
        initial_delay_seconds: 0,
        timeout_seconds: p.timeout_seconds.unwrap_or(DEFAULT_PROBE_TIMEOUT_SECONDS),
        period_seconds: p.period_seconds.unwrap_or(DEFAULT_PROBE_PERIOD_SECONDS),
        failure_threshold: p
            .failure_threshold
            .unwrap_or(DEFAULT_PROBE_FAILURE_THRESHOLD),
        success_threshold: p.success_threshold.unwrap_or(1),
    }
}
