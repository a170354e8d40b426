//! A service's monitoring, from its manifest, over the ingress's own metrics (the
//! `runway_ingress_*` series `runway-ingress`'s `metrics.rs` exports with labels `service`,
//! `env` and `revision`): Prometheus recording rules and multi-window, multi-burn-rate alerts
//! (the Google SRE workbook's, as GitLab's metrics catalogue generates them), and a Grafana
//! dashboard.
//!
//! Recorded series are named `level:metric:operation` as Prometheus's naming practice has it:
//! the labels kept (`service_env`), what is measured (`runway_requests`, `runway_errors`,
//! `runway_error_ratio`, `runway_apdex`) and how, with the window last (`rate5m`,
//! `ratio_rate1h`). Each is recorded for 5m, 30m, 1h, 2h, 6h, 1d and 3d, the windows the alerts
//! and the dashboard read.
//!
//! Pure: it returns text and values, and writes nothing.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use runway_manifest::{APDEX_TOLERATING_FACTOR, ServiceConfig, WorkloadKind};
use serde_json::{Map, Value, json};

use crate::{RenderError, RenderedFile, Target, yaml};

/// The windows every recorded series is kept over.
pub const WINDOWS: [&str; 7] = ["5m", "30m", "1h", "2h", "6h", "1d", "3d"];

/// Requests per second, by service and environment.
pub const REQUESTS_RATE: &str = "service_env:runway_requests:rate";
/// Requests answered with a 5xx per second.
pub const ERRORS_RATE: &str = "service_env:runway_errors:rate";
/// The share of requests answered with a 5xx: [`ERRORS_RATE`] over [`REQUESTS_RATE`].
pub const ERROR_RATIO: &str = "service_env:runway_error_ratio:ratio_rate";
/// The apdex score: responses within the threshold, plus half of those within
/// [`APDEX_TOLERATING_FACTOR`] times it, over all responses.
pub const APDEX_RATIO: &str = "service_env:runway_apdex:ratio_rate";

/// How long an alert's condition holds before it fires.
const ALERT_FOR: &str = "2m";

/// One rate of spending a budget that alerts, over a long window confirmed by a short one.
struct Burn {
    /// How many times as fast as the objective allows.
    factor: f64,
    long: &'static str,
    short: &'static str,
    long_words: &'static str,
    short_words: &'static str,
    severity: &'static str,
    /// What the long window at this rate spends of a 30-day budget.
    spent: &'static str,
}

/// The SRE workbook's multi-window, multi-burn-rate alerts for a 30-day objective.
const BURNS: [Burn; 3] = [
    Burn {
        factor: 14.4,
        long: "1h",
        short: "5m",
        long_words: "the last hour",
        short_words: "the last 5 minutes",
        severity: "page",
        spent: "an hour spends 2 %",
    },
    Burn {
        factor: 6.0,
        long: "6h",
        short: "30m",
        long_words: "the last 6 hours",
        short_words: "the last 30 minutes",
        severity: "page",
        spent: "6 hours spend 5 %",
    },
    Burn {
        factor: 1.0,
        long: "3d",
        short: "6h",
        long_words: "the last 3 days",
        short_words: "the last 6 hours",
        severity: "ticket",
        spent: "3 days spend 10 %",
    },
];

/// What a service is held to in one environment (or in every environment no other entry for
/// the service names), with every default applied: what the rules, alerts and dashboard are
/// made from.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceSlo {
    /// The service's name, as the ingress labels its series (`metadata.name`).
    pub service: String,
    /// The environment; `None` for every environment that no other entry for the service in
    /// the same [`rules`] call names.
    pub env: Option<String>,
    /// Share of requests to answer without a 5xx, strictly between 0 and 1.
    pub availability_target: f64,
    /// Apdex score to hold, strictly between 0 and 1.
    pub apdex_target: f64,
    /// Seconds within which a response satisfies: one of [`runway_manifest::apdex_thresholds`].
    pub apdex_threshold_seconds: f64,
    /// The alerts' runbook, if known.
    pub runbook_url: Option<String>,
    /// Most instances (`scalability.max_instances`).
    pub max_instances: u32,
    /// Requests one instance serves at once (`scalability.max_instance_request_concurrency`).
    pub concurrency: u32,
}

impl ServiceSlo {
    /// The objectives of `config` (in its environment, or in every environment when it has
    /// none). The runbook is the manifest's `spec.workload.slo.runbook_url`, else
    /// `{runbook_base}/{service}` when a base is given. A worker serves no requests through
    /// the ingress, so it has nothing to measure.
    pub fn new(config: &ServiceConfig, runbook_base: Option<&str>) -> Result<Self, RenderError> {
        if config.kind == WorkloadKind::Worker {
            return Err(RenderError::WorkerUnsupported {
                service: config.name.clone(),
                target: Target::Observability,
            });
        }
        let slo = &config.slo;
        let runbook_url = slo.runbook_url.clone().or_else(|| {
            runbook_base.map(|base| format!("{}/{}", base.trim_end_matches('/'), config.name))
        });
        Ok(Self {
            service: config.name.clone(),
            env: config.environment.clone(),
            availability_target: slo.availability_target,
            apdex_target: slo.apdex_target,
            apdex_threshold_seconds: slo.apdex_threshold_seconds,
            runbook_url,
            max_instances: config.max_instances,
            concurrency: config.concurrency,
        })
    }

    /// Most requests the service serves at once, what the dashboard's saturation is a share
    /// of.
    pub fn capacity(&self) -> u64 {
        u64::from(self.max_instances) * u64::from(self.concurrency)
    }

    /// The `le` label of the satisfied bucket, as the ingress prints it (`1.024`).
    pub fn satisfied_le(&self) -> String {
        self.apdex_threshold_seconds.to_string()
    }

    /// The `le` label of the tolerating bucket, [`APDEX_TOLERATING_FACTOR`] times the
    /// threshold (`4.096`).
    pub fn tolerating_le(&self) -> String {
        (self.apdex_threshold_seconds * f64::from(APDEX_TOLERATING_FACTOR)).to_string()
    }
}

/// The files `runway render -t observability` writes: per service, in the order of its first
/// entry, `<service>.rules.yml` with the rules of all its entries and
/// `<service>.dashboard.json` from its entry for every environment (else its first).
pub fn files(slos: &[ServiceSlo]) -> Result<Vec<RenderedFile>, RenderError> {
    let mut services: Vec<&str> = Vec::new();
    for slo in slos {
        if !services.contains(&slo.service.as_str()) {
            services.push(&slo.service);
        }
    }
    let mut out = Vec::new();
    for service in services {
        let own: Vec<ServiceSlo> = slos
            .iter()
            .filter(|s| s.service == service)
            .cloned()
            .collect();
        let Some(shown) = own.iter().find(|s| s.env.is_none()).or(own.first()) else {
            continue;
        };
        let name = runway_manifest::dns_name(service);
        let mut dashboard_json =
            serde_json::to_string_pretty(&dashboard(shown)).unwrap_or_default();
        dashboard_json.push('\n');
        out.push(RenderedFile {
            path: format!("{name}.rules.yml"),
            contents: rules(&own)?,
        });
        out.push(RenderedFile {
            path: format!("{name}.dashboard.json"),
            contents: dashboard_json,
        });
    }
    Ok(out)
}

/// One Prometheus rule file (`rule_files:`) for any number of services and environments: a
/// group per entry, named `runway:<service>:<env>` (`runway:<service>` for every other
/// environment), holding the recorded series over every window and then the alerts. An entry
/// without an environment leaves out the environments other entries for the service name, so
/// no series is recorded twice. The same service and environment twice is refused.
pub fn rules(slos: &[ServiceSlo]) -> Result<String, RenderError> {
    let mut seen = BTreeSet::new();
    for slo in slos {
        if !seen.insert((&slo.service, &slo.env)) {
            return Err(RenderError::DuplicateSlo {
                service: slo.service.clone(),
                env: slo.env.clone(),
            });
        }
    }
    let groups: Vec<Value> = slos
        .iter()
        .map(|slo| {
            let named: Vec<&str> = slos
                .iter()
                .filter(|other| other.service == slo.service)
                .filter_map(|other| other.env.as_deref())
                .collect();
            group(slo, &selector(slo, &named))
        })
        .collect();
    let mut text = String::from(
        "# Recording rules and alerts rendered by Runway from the services' manifests\n\
         # (spec.workload.slo), over the ingress's runway_ingress_* series; do not edit by hand.\n\
         # Recorded: service_env:runway_requests:rate<w>, service_env:runway_errors:rate<w>,\n\
         # service_env:runway_error_ratio:ratio_rate<w> and service_env:runway_apdex:ratio_rate<w>\n\
         # for <w> in 5m, 30m, 1h, 2h, 6h, 1d, 3d. Alerts: Runway{Error,Apdex}BudgetBurn{1h,6h,3d}.\n",
    );
    text.push_str(&yaml::document(&json!({ "groups": groups })));
    Ok(text)
}

/// The label matchers of an entry's series: its service, and its environment, or every
/// environment but those `named`.
fn selector(slo: &ServiceSlo, named: &[&str]) -> String {
    let service = format!("service={}", quote(&slo.service));
    match &slo.env {
        Some(env) => format!("{service},env={}", quote(env)),
        None if named.is_empty() => service,
        None => {
            let alternatives: Vec<String> = named.iter().map(|env| regex_escape(env)).collect();
            format!("{service},env!~{}", quote(&alternatives.join("|")))
        }
    }
}

fn group(slo: &ServiceSlo, sel: &str) -> Value {
    let name = match &slo.env {
        Some(env) => format!("runway:{}:{env}", slo.service),
        None => format!("runway:{}", slo.service),
    };
    // The series carry these labels already; saying them makes each group's rules distinct
    // from another's of the same name, to a reader and to promtool's duplicate check.
    let mut scope = Map::new();
    scope.insert("service".into(), json!(slo.service));
    if let Some(env) = &slo.env {
        scope.insert("env".into(), json!(env));
    }
    let record =
        |name: &str, expr: String| json!({ "record": name, "expr": expr, "labels": scope });
    let mut rules = Vec::new();
    for window in WINDOWS {
        let by = "sum by (service, env)";
        let requests = format!("{REQUESTS_RATE}{window}");
        let errors = format!("{ERRORS_RATE}{window}");
        rules.push(record(
            &requests,
            format!("{by} (rate(runway_ingress_requests_total{{{sel}}}[{window}]))"),
        ));
        // The 5xx series exists from a revision's start, but a sum over none would record
        // nothing rather than 0: the requests' rate times 0 stands in.
        rules.push(record(
            &errors,
            format!(
                "{by} (rate(runway_ingress_requests_total{{{sel},class=\"5xx\"}}[{window}])) \
                 or 0 * {requests}{{{sel}}}"
            ),
        ));
        rules.push(record(
            &format!("{ERROR_RATIO}{window}"),
            format!("{errors}{{{sel}}} / {requests}{{{sel}}}"),
        ));
        let bucket = |le: String| {
            format!(
                "{by} (rate(runway_ingress_request_duration_seconds_bucket{{{sel},le=\"{le}\"}}[{window}]))"
            )
        };
        rules.push(record(
            &format!("{APDEX_RATIO}{window}"),
            format!(
                "({} + {}) / 2 / {by} (rate(runway_ingress_request_duration_seconds_count{{{sel}}}[{window}]))",
                bucket(slo.satisfied_le()),
                bucket(slo.tolerating_le()),
            ),
        ));
    }
    for burn in &BURNS {
        rules.push(error_alert(slo, sel, &scope, burn));
    }
    for burn in &BURNS {
        rules.push(apdex_alert(slo, sel, &scope, burn));
    }
    json!({ "name": name, "rules": rules })
}

fn error_alert(slo: &ServiceSlo, sel: &str, scope: &Map<String, Value>, burn: &Burn) -> Value {
    let budget = format!("(1 - {})", slo.availability_target);
    let limit = format!("({} * {budget})", burn.factor);
    let expr = format!(
        "{ERROR_RATIO}{long}{{{sel}}} > {limit} and {ERROR_RATIO}{short}{{{sel}}} > {limit}",
        long = burn.long,
        short = burn.short,
    );
    let allowed = 1.0 - slo.availability_target;
    let description = format!(
        "{{{{ $value | humanizePercentage }}}} of the requests of {} were answered with a 5xx, \
         and more than {} % of those of {}; an availability target of {} % allows {} %. At this \
         rate {} of a 30-day error budget.",
        burn.long_words,
        percent(burn.factor * allowed),
        burn.short_words,
        percent(slo.availability_target),
        percent(allowed),
        burn.spent,
    );
    alert(
        slo,
        &format!("RunwayErrorBudgetBurn{}", burn.long),
        expr,
        alert_labels(scope, burn, "errors"),
        &format!(
            "{{{{ $labels.service }}}} in {{{{ $labels.env }}}} is spending its error budget {}",
            pace(burn)
        ),
        description,
    )
}

fn apdex_alert(slo: &ServiceSlo, sel: &str, scope: &Map<String, Value>, burn: &Burn) -> Value {
    let floor = format!("(1 - {} * (1 - {}))", burn.factor, slo.apdex_target);
    let expr = format!(
        "{APDEX_RATIO}{long}{{{sel}}} < {floor} and {APDEX_RATIO}{short}{{{sel}}} < {floor}",
        long = burn.long,
        short = burn.short,
    );
    let description = format!(
        "The apdex of {} is {{{{ printf \"%.4f\" $value }}}}, and under {} for {} too \
         (responses within {} s satisfy, within {} s count half); a target of {} allows {} \
         below 1. At this rate {} of a 30-day apdex budget.",
        burn.long_words,
        decimal(1.0 - burn.factor * (1.0 - slo.apdex_target)),
        burn.short_words,
        slo.satisfied_le(),
        slo.tolerating_le(),
        slo.apdex_target,
        decimal(1.0 - slo.apdex_target),
        burn.spent,
    );
    alert(
        slo,
        &format!("RunwayApdexBudgetBurn{}", burn.long),
        expr,
        alert_labels(scope, burn, "apdex"),
        &format!(
            "{{{{ $labels.service }}}} in {{{{ $labels.env }}}} is spending its apdex budget {}",
            pace(burn)
        ),
        description,
    )
}

/// An alert's labels: the entry's service (and environment), `severity` (`page` or `ticket`)
/// and `slo` (`errors` or `apdex`).
fn alert_labels(scope: &Map<String, Value>, burn: &Burn, kind: &str) -> Map<String, Value> {
    let mut labels = scope.clone();
    labels.insert("severity".into(), json!(burn.severity));
    labels.insert("slo".into(), json!(kind));
    labels
}

fn alert(
    slo: &ServiceSlo,
    name: &str,
    expr: String,
    labels: Map<String, Value>,
    summary: &str,
    description: String,
) -> Value {
    let mut annotations = Map::new();
    annotations.insert("summary".into(), json!(summary));
    annotations.insert("description".into(), json!(description));
    if let Some(url) = &slo.runbook_url {
        annotations.insert("runbook_url".into(), json!(template_literal(url)));
    }
    annotations.insert(
        "grafana_dashboard_uid".into(),
        json!(dashboard_uid(&slo.service)),
    );
    json!({
        "alert": name,
        "expr": expr,
        "for": ALERT_FOR,
        "labels": labels,
        "annotations": annotations,
    })
}

/// How fast a burn spends the budget, in words.
fn pace(burn: &Burn) -> String {
    if burn.factor == 1.0 {
        "as fast as its SLO allows".to_owned()
    } else {
        format!("{} times as fast as its SLO allows", burn.factor)
    }
}

/// A share as a percentage for people: `0.0144` is `1.44`.
fn percent(share: f64) -> String {
    decimal(share * 100.0)
}

/// A number with at most six decimals, without trailing zeros: `0.98560000000001` is `0.9856`.
fn decimal(x: f64) -> String {
    let text = format!("{x:.6}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A PromQL string literal.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            ch if ch.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(ch));
            }
            ch => out.push(ch),
        }
    }
    out.push('"');
    out
}

/// `s` matched literally in an RE2 regular expression.
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        if "\\.+*?()|[]{}^$".contains(ch) {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

/// Text that Prometheus's alert templates print as it is: `{{` opens an action, so it is
/// written as an action printing it.
fn template_literal(s: &str) -> String {
    s.replace("{{", "{{ \"{{\" }}")
}

/// The dashboard's uid, the same for a service at every render: `runway-<name>` when that
/// fits Grafana's 40 characters, else its first 24 characters and a hash of the whole name.
pub fn dashboard_uid(service: &str) -> String {
    let name: String = runway_manifest::dns_name(service)
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || ch == '-' {
                ch
            } else {
                '-'
            }
        })
        .collect();
    let uid = format!("runway-{name}");
    if uid.len() <= 40 {
        return uid;
    }
    // FNV-1a: stable across builds and releases, unlike std's hasher.
    let hash = service.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let head: String = name.chars().take(24).collect();
    format!("runway-{head}-{:08x}", hash >> 32)
}

/// The dashboard's data source: the `datasource` variable, a Prometheus.
fn datasource() -> Value {
    json!({ "type": "prometheus", "uid": "${datasource}" })
}

/// A service's Grafana dashboard (JSON model, schema version 39): traffic, errors, latency
/// percentiles, apdex, the objectives' burn rates, concurrency, saturation and upstream
/// errors, by revision where that tells something; variables `datasource`, `env` and
/// `revision` (from the ingress's label values); deployments as annotations: a revision
/// appearing in the ingress's series, which it does when it enters the route table (and again
/// when it comes back, a rollback). The apdex threshold and the targets shown are `slo`'s.
pub fn dashboard(slo: &ServiceSlo) -> Value {
    let sel = format!(
        "service={},env=\"$env\",revision=~\"$revision\"",
        quote(&slo.service)
    );
    let service_env = format!("service={},env=\"$env\"", quote(&slo.service));
    let rate =
        |metric: &str, extra: &str| format!("rate({metric}{{{sel}{extra}}}[$__rate_interval])");
    let requests = rate("runway_ingress_requests_total", "");
    let errors = rate("runway_ingress_requests_total", ",class=\"5xx\"");
    let bucket = |le: String| {
        format!(
            "sum by (revision) ({})",
            rate(
                "runway_ingress_request_duration_seconds_bucket",
                &format!(",le=\"{le}\"")
            )
        )
    };
    let quantile = |q: &str| {
        format!(
            "histogram_quantile({q}, sum by (le) ({}))",
            rate("runway_ingress_request_duration_seconds_bucket", "")
        )
    };
    let gauge = |metric: &str| format!("sum by (revision) ({metric}{{{sel}}})");
    let budget = 1.0 - slo.availability_target;

    let panels = vec![
        panel(
            "Traffic",
            "Requests answered per second, by revision.",
            "reqps",
            vec![target(
                format!("sum by (revision) ({requests})"),
                "{{revision}}",
            )],
            None,
        ),
        panel(
            "Errors (5xx ratio)",
            &format!(
                "Share of requests answered with a 5xx, by revision. The line is the error budget, \
                 {} % (availability target {} %).",
                percent(budget),
                percent(slo.availability_target)
            ),
            "percentunit",
            vec![target(
                format!("sum by (revision) ({errors}) / sum by (revision) ({requests})"),
                "{{revision}}",
            )],
            Some(budget),
        ),
        panel(
            "Latency",
            "Time from a request's arrival at the ingress to its response head: p50, p90 and p99 \
             over the revisions chosen.",
            "s",
            vec![
                target(quantile("0.5"), "p50"),
                target(quantile("0.9"), "p90"),
                target(quantile("0.99"), "p99"),
            ],
            Some(slo.apdex_threshold_seconds),
        ),
        panel(
            "Apdex",
            &format!(
                "Responses within {} s satisfy, within {} s count half, by revision. The line is \
                 the target, {}.",
                slo.satisfied_le(),
                slo.tolerating_le(),
                slo.apdex_target
            ),
            "percentunit",
            vec![target(
                format!(
                    "({} + {}) / 2 / sum by (revision) ({})",
                    bucket(slo.satisfied_le()),
                    bucket(slo.tolerating_le()),
                    rate("runway_ingress_request_duration_seconds_count", "")
                ),
                "{{revision}}",
            )],
            Some(slo.apdex_target),
        ),
        panel(
            "Error budget burn rate",
            "How many times as fast as the objectives allow the error and apdex budgets are \
             spent, from the recording rules (every revision). The alerts page at 14.4 over 1h \
             and 6 over 6h, and open a ticket at 1 over 3d.",
            "none",
            vec![
                target(
                    format!(
                        "{ERROR_RATIO}1h{{{service_env}}} / (1 - {})",
                        slo.availability_target
                    ),
                    "errors, 1h",
                ),
                target(
                    format!(
                        "{ERROR_RATIO}6h{{{service_env}}} / (1 - {})",
                        slo.availability_target
                    ),
                    "errors, 6h",
                ),
                target(
                    format!(
                        "{ERROR_RATIO}3d{{{service_env}}} / (1 - {})",
                        slo.availability_target
                    ),
                    "errors, 3d",
                ),
                target(
                    format!(
                        "(1 - {APDEX_RATIO}1h{{{service_env}}}) / (1 - {})",
                        slo.apdex_target
                    ),
                    "apdex, 1h",
                ),
                target(
                    format!(
                        "(1 - {APDEX_RATIO}6h{{{service_env}}}) / (1 - {})",
                        slo.apdex_target
                    ),
                    "apdex, 6h",
                ),
                target(
                    format!(
                        "(1 - {APDEX_RATIO}3d{{{service_env}}}) / (1 - {})",
                        slo.apdex_target
                    ),
                    "apdex, 3d",
                ),
            ],
            Some(1.0),
        ),
        panel(
            "Instances' concurrency",
            "Requests being served by the revision's instances (in flight), waiting for a free \
             slot on a ready instance (queued), and held because the revision has no ready \
             instance (held, a scale from zero).",
            "short",
            vec![
                target(
                    gauge("runway_ingress_in_flight_requests"),
                    "in flight {{revision}}",
                ),
                target(
                    gauge("runway_ingress_queued_requests"),
                    "queued {{revision}}",
                ),
                target(gauge("runway_ingress_held_requests"), "held {{revision}}"),
            ],
            None,
        ),
        panel(
            "Saturation",
            &format!(
                "Requests in flight as a share of the most the service serves at once ({} \
                 instances × {} requests = {}), and requests waiting (queued or held) per \
                 request in flight.",
                slo.max_instances,
                slo.concurrency,
                slo.capacity()
            ),
            "percentunit",
            vec![
                target(
                    format!(
                        "sum(runway_ingress_in_flight_requests{{{sel}}}) / {}",
                        slo.capacity().max(1)
                    ),
                    "in flight / capacity",
                ),
                target(
                    format!(
                        "(sum(runway_ingress_queued_requests{{{sel}}}) + sum(runway_ingress_held_requests{{{sel}}})) / clamp_min(sum(runway_ingress_in_flight_requests{{{sel}}}), 1)"
                    ),
                    "waiting / in flight",
                ),
            ],
            Some(1.0),
        ),
        panel(
            "Upstream errors",
            &format!(
                "Failed connections to the revision's instances, and requests whose connection \
                 broke before a whole response head came back, per second. The error ratio's \
                 budget is {} % of requests.",
                percent(budget)
            ),
            "reqps",
            vec![
                target(
                    format!(
                        "sum by (revision) ({})",
                        rate("runway_ingress_upstream_connect_errors_total", "")
                    ),
                    "connect errors {{revision}}",
                ),
                target(
                    format!(
                        "sum by (revision) ({})",
                        rate("runway_ingress_upstream_errors_total", "")
                    ),
                    "broken responses {{revision}}",
                ),
            ],
            None,
        ),
    ];
    let panels: Vec<Value> = panels
        .into_iter()
        .enumerate()
        .map(|(i, mut panel)| {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            panel["id"] = json!(i + 1);
            panel["gridPos"] = json!({ "h": 8, "w": 12, "x": (i % 2) * 12, "y": (i / 2) * 8 });
            panel
        })
        .collect();

    let env_query = format!(
        "label_values(runway_ingress_requests_total{{service={}}}, env)",
        quote(&slo.service)
    );
    let revision_query =
        format!("label_values(runway_ingress_requests_total{{{service_env}}}, revision)");
    let mut env_variable = json!({
        "name": "env",
        "label": "Environment",
        "type": "query",
        "datasource": datasource(),
        "definition": env_query,
        "query": { "query": env_query, "refId": "PrometheusVariableQueryEditor-VariableQuery" },
        "refresh": 2,
        "sort": 1,
        "includeAll": false,
        "multi": false,
        "hide": 0,
        "options": [],
        "regex": "",
    });
    if let Some(env) = &slo.env {
        env_variable["current"] = json!({ "selected": true, "text": env, "value": env });
    }
    let deployments = format!(
        "group by (env, revision) (runway_ingress_in_flight_requests{{{service_env}}}) unless \
         group by (env, revision) (runway_ingress_in_flight_requests{{{service_env}}} offset 1m)"
    );

    json!({
        "uid": dashboard_uid(&slo.service),
        "title": format!("Runway: {}", slo.service),
        "description": format!(
            "{} as Runway's ingress sees it. Rendered by Runway from the service's manifest; \
             changes made here are lost at the next render.",
            slo.service
        ),
        "tags": ["runway", format!("service:{}", slo.service)],
        "editable": true,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "time": { "from": "now-6h", "to": "now" },
        "timezone": "browser",
        "refresh": "1m",
        "links": [],
        "fiscalYearStartMonth": 0,
        "liveNow": false,
        "annotations": { "list": [
            {
                "builtIn": 1,
                "datasource": { "type": "grafana", "uid": "-- Grafana --" },
                "enable": true,
                "hide": true,
                "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts",
                "type": "dashboard",
            },
            {
                "name": "Deployments",
                "datasource": datasource(),
                "enable": true,
                "hide": false,
                "iconColor": "purple",
                "expr": deployments,
                "step": "1m",
                "titleFormat": "{{revision}}",
                "textFormat": "{{revision}} entered the ingress's route table in {{env}}",
                "tagKeys": "env,revision",
                "useValueForTime": false,
            },
        ] },
        "templating": { "list": [
            {
                "name": "datasource",
                "label": "Data source",
                "type": "datasource",
                "query": "prometheus",
                "refresh": 1,
                "hide": 0,
                "includeAll": false,
                "multi": false,
                "options": [],
                "regex": "",
            },
            env_variable,
            {
                "name": "revision",
                "label": "Revision",
                "type": "query",
                "datasource": datasource(),
                "definition": revision_query,
                "query": { "query": revision_query, "refId": "PrometheusVariableQueryEditor-VariableQuery" },
                "refresh": 2,
                "sort": 1,
                "includeAll": true,
                "allValue": ".*",
                "multi": true,
                "hide": 0,
                "current": { "selected": true, "text": ["All"], "value": ["$__all"] },
                "options": [],
                "regex": "",
            },
        ] },
        "panels": panels,
    })
}

/// A time series panel; `line` draws a threshold line at that value.
fn panel(
    title: &str,
    description: &str,
    unit: &str,
    targets: Vec<Value>,
    line: Option<f64>,
) -> Value {
    let mut custom =
        json!({ "drawStyle": "line", "lineWidth": 1, "fillOpacity": 0, "spanNulls": false });
    let mut steps = vec![json!({ "color": "green", "value": null })];
    if let Some(value) = line {
        custom["thresholdsStyle"] = json!({ "mode": "dashed" });
        steps.push(json!({ "color": "red", "value": value }));
    }
    let targets: Vec<Value> = targets
        .into_iter()
        .zip('A'..='Z')
        .map(|(mut target, ref_id)| {
            target["refId"] = json!(ref_id.to_string());
            target
        })
        .collect();
    json!({
        "id": 0,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": datasource(),
        "gridPos": {},
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "custom": custom,
                "thresholds": { "mode": "absolute", "steps": steps },
            },
            "overrides": [],
        },
        "options": {
            "legend": { "displayMode": "list", "placement": "bottom", "showLegend": true },
            "tooltip": { "mode": "multi", "sort": "desc" },
        },
        "targets": targets,
    })
}

/// A Prometheus query of a panel.
fn target(expr: String, legend: &str) -> Value {
    json!({
        "datasource": datasource(),
        "expr": expr,
        "legendFormat": legend,
        "range": true,
        "editorMode": "code",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_escaped_for_promql_regexes_and_templates() {
        assert_eq!(quote(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(regex_escape("prod.eu|x"), r"prod\.eu\|x");
        assert_eq!(
            template_literal("https://x/{{y}}"),
            "https://x/{{ \"{{\" }}y}}"
        );
        assert_eq!(percent(14.4 * (1.0 - 0.999)), "1.44");
        assert_eq!(decimal(1.0 - 14.4 * (1.0 - 0.999)), "0.9856");
        assert_eq!(percent(0.999), "99.9");
    }

    #[test]
    fn dashboard_uids_are_stable_and_fit_grafana() {
        assert_eq!(dashboard_uid("web_app"), "runway-web-app");
        let long = "a".repeat(63);
        let uid = dashboard_uid(&long);
        assert_eq!(uid.len(), 40, "{uid}");
        assert_eq!(uid, dashboard_uid(&long));
        assert_ne!(uid, dashboard_uid(&format!("{}b", "a".repeat(62))));
        assert!(dashboard_uid("a").len() >= 8);
    }
}
