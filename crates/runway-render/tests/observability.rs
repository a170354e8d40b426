//! A service's monitoring through the public API: the recording rules and alerts against
//! `promtool check rules` and `promtool test rules` (alerts that must and must not fire, from
//! input series shaped as the ingress exports them), the dashboard against Grafana's model with
//! every query parsed by promtool, and the manifest's objectives reaching both.
//!
//! promtool comes from Debian's `prometheus` package, which `scripts/test` installs; under
//! `CI=true` its absence fails the tests that need it, elsewhere they are skipped.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers, where a failing unwrap is a failing test, as clippy.toml allows in tests"
)]

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use runway_manifest::{ServiceConfig, ServiceFiles, SourceFile, load};
use runway_render::observability::{self, ServiceSlo, dashboard, dashboard_uid, rules};
use runway_render::{RenderError, RenderOptions, Target, render};
use serde_json::{Value, json};
use support::TempDir;

const RUNBOOKS: &str = "https://runbooks.example.com/runway/";

/// A manifest with the objectives given (`slo` is the YAML under `spec.workload.slo`).
fn manifest(name: &str, slo: &str) -> String {
    let mut text = format!(
        "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: {name}\nspec:\n  \
         image: registry.example.com/{name}:1\n  scalability:\n    max_instances: 4\n    \
         max_instance_request_concurrency: 20\n"
    );
    if !slo.is_empty() {
        text.push_str("  workload:\n    slo:\n");
        for line in slo.lines() {
            text.push_str(&format!("      {line}\n"));
        }
    }
    text
}

/// Every override, each unlike its default.
const EVERY_OVERRIDE: &str = "availability_target: 0.995\napdex_target: 0.99\n\
                              apdex_threshold_seconds: 0.256\n\
                              runbook_url: https://wiki.example.com/web/{{oncall}}\n";

fn config(text: &str, env: Option<&str>) -> ServiceConfig {
    let files = ServiceFiles {
        base: Some(SourceFile::new(".runway/runway.yml", text)),
        ..ServiceFiles::default()
    };
    let loaded = load(&files);
    assert!(
        loaded
            .diagnostics
            .iter()
            .all(|d| d.severity != runway_manifest::Severity::Error),
        "{:?}",
        loaded
            .diagnostics
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    );
    loaded.service.unwrap().config(env).unwrap()
}

fn slo(name: &str, slo_yaml: &str, env: Option<&str>) -> ServiceSlo {
    ServiceSlo::new(&config(&manifest(name, slo_yaml), env), Some(RUNBOOKS)).unwrap()
}

/// Whether `promtool` is on PATH. `scripts/test` installs it (Debian's `prometheus`); under
/// `CI=true` its absence is a failure, elsewhere the test is skipped.
fn promtool_installed() -> bool {
    if Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
    {
        return true;
    }
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "promtool is not installed; scripts/test installs it (Debian's prometheus package)"
    );
    eprintln!("skipping: promtool not installed (scripts/test installs it)");
    false
}

/// `promtool <args>` in `dir`, killed if it takes longer than `limit`.
fn promtool(dir: &Path, args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "promtool {args:?} took longer than {limit:?}:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn assert_success(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The rule file's groups as JSON, through saphyr (the YAML reader the renderer itself uses).
fn parsed_rules(text: &str) -> Value {
    use saphyr::{LoadableYamlNode, Scalar, Yaml};
    fn to_json(node: &Yaml<'_>) -> Value {
        match node {
            Yaml::Value(Scalar::Null) => Value::Null,
            Yaml::Value(Scalar::Boolean(b)) => json!(b),
            Yaml::Value(Scalar::Integer(i)) => json!(i),
            Yaml::Value(Scalar::FloatingPoint(f)) => json!(f.into_inner()),
            Yaml::Value(Scalar::String(s)) => json!(s),
            Yaml::Sequence(items) => Value::Array(items.iter().map(to_json).collect()),
            Yaml::Mapping(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (to_json(k).as_str().unwrap().to_owned(), to_json(v)))
                    .collect(),
            ),
            other => panic!("unexpected node {other:?}"),
        }
    }
    let docs = Yaml::load_from_str(text).unwrap();
    assert_eq!(docs.len(), 1);
    to_json(&docs[0])
}

/// Every rule of every group: (group name, record or alert name, the rule).
fn rule_list(text: &str) -> Vec<(String, String, Value)> {
    let parsed = parsed_rules(text);
    let mut out = Vec::new();
    for group in parsed["groups"].as_array().unwrap() {
        let group_name = group["name"].as_str().unwrap();
        for rule in group["rules"].as_array().unwrap() {
            let name = rule
                .get("record")
                .or_else(|| rule.get("alert"))
                .and_then(Value::as_str)
                .unwrap();
            out.push((group_name.to_owned(), name.to_owned(), rule.clone()));
        }
    }
    out
}

/// The `le` labels of `runway_ingress_request_duration_seconds_bucket` as the ingress's
/// `/metrics` prints them (prometheus_client 0.25's encoder, run on the ingress's buckets:
/// 0.00025 doubling, 20 of them).
const INGRESS_LE: [&str; 20] = [
    "0.00025", "0.0005", "0.001", "0.002", "0.004", "0.008", "0.016", "0.032", "0.064", "0.128",
    "0.256", "0.512", "1.024", "2.048", "4.096", "8.192", "16.384", "32.768", "65.536", "131.072",
];

#[test]
fn bucket_bounds_print_as_the_ingress_labels_them() {
    let printed: Vec<String> = runway_manifest::latency_bucket_bounds()
        .map(|b| b.to_string())
        .collect();
    assert_eq!(printed, INGRESS_LE);
    for threshold in runway_manifest::apdex_thresholds() {
        let slo = ServiceSlo {
            apdex_threshold_seconds: threshold,
            ..slo("web", "", None)
        };
        assert!(INGRESS_LE.contains(&slo.satisfied_le().as_str()));
        assert!(
            INGRESS_LE.contains(&slo.tolerating_le().as_str()),
            "{}",
            slo.tolerating_le()
        );
    }
}

/// The names every group records and alerts on, in order.
fn expected_names() -> Vec<String> {
    let mut names = Vec::new();
    for window in observability::WINDOWS {
        names.push(format!("service_env:runway_requests:rate{window}"));
        names.push(format!("service_env:runway_errors:rate{window}"));
        names.push(format!("service_env:runway_error_ratio:ratio_rate{window}"));
        names.push(format!("service_env:runway_apdex:ratio_rate{window}"));
    }
    for kind in ["Error", "Apdex"] {
        for window in ["1h", "6h", "3d"] {
            names.push(format!("Runway{kind}BudgetBurn{window}"));
        }
    }
    names
}

#[test]
fn default_rules_record_every_window_and_alert_as_the_workbook_does() {
    let text = rules(&[slo("web", "", Some("production"))]).unwrap();
    let list = rule_list(&text);
    assert!(
        list.iter()
            .all(|(group, _, _)| group == "runway:web:production")
    );
    let names: Vec<String> = list.iter().map(|(_, name, _)| name.clone()).collect();
    assert_eq!(names, expected_names());

    let rule = |name: &str| &list.iter().find(|(_, n, _)| n == name).unwrap().2;
    let sel = r#"{service="web",env="production"}"#;
    assert_eq!(
        rule("service_env:runway_requests:rate5m")["expr"],
        format!(r#"sum by (service, env) (rate(runway_ingress_requests_total{sel}[5m]))"#)
    );
    assert_eq!(
        rule("service_env:runway_apdex:ratio_rate1h")["expr"],
        "(sum by (service, env) (rate(runway_ingress_request_duration_seconds_bucket{service=\"web\",env=\"production\",le=\"1.024\"}[1h])) \
         + sum by (service, env) (rate(runway_ingress_request_duration_seconds_bucket{service=\"web\",env=\"production\",le=\"4.096\"}[1h]))) \
         / 2 / sum by (service, env) (rate(runway_ingress_request_duration_seconds_count{service=\"web\",env=\"production\"}[1h]))"
    );
    let page = rule("RunwayErrorBudgetBurn1h");
    assert_eq!(
        page["expr"],
        format!(
            "service_env:runway_error_ratio:ratio_rate1h{sel} > (14.4 * (1 - 0.999)) and \
             service_env:runway_error_ratio:ratio_rate5m{sel} > (14.4 * (1 - 0.999))"
        )
    );
    assert_eq!(
        page["labels"],
        json!({"service": "web", "env": "production", "severity": "page", "slo": "errors"})
    );
    assert_eq!(
        rule("service_env:runway_errors:rate6h")["labels"],
        json!({"service": "web", "env": "production"})
    );
    assert_eq!(
        page["annotations"]["runbook_url"],
        "https://runbooks.example.com/runway/web"
    );
    assert_eq!(page["annotations"]["grafana_dashboard_uid"], "runway-web");
    for (name, severity, long, short, factor) in [
        ("RunwayErrorBudgetBurn6h", "page", "6h", "30m", "6"),
        ("RunwayErrorBudgetBurn3d", "ticket", "3d", "6h", "1"),
    ] {
        let alert = rule(name);
        assert_eq!(alert["labels"]["severity"], severity);
        let expr = alert["expr"].as_str().unwrap();
        assert!(
            expr.contains(&format!("ratio_rate{long}{sel} > ({factor} * (1 - 0.999))"))
                && expr.contains(&format!(
                    "ratio_rate{short}{sel} > ({factor} * (1 - 0.999))"
                )),
            "{expr}"
        );
    }
    assert_eq!(
        rule("RunwayApdexBudgetBurn6h")["expr"],
        format!(
            "service_env:runway_apdex:ratio_rate6h{sel} < (1 - 6 * (1 - 0.999)) and \
             service_env:runway_apdex:ratio_rate30m{sel} < (1 - 6 * (1 - 0.999))"
        )
    );
    // The same input gives the same bytes.
    assert_eq!(text, rules(&[slo("web", "", Some("production"))]).unwrap());
}

#[test]
fn manifest_overrides_reach_the_rules_and_the_dashboard() {
    let with = slo("web", EVERY_OVERRIDE, Some("production"));
    assert_eq!(
        (
            with.availability_target,
            with.apdex_target,
            with.apdex_threshold_seconds
        ),
        (0.995, 0.99, 0.256)
    );
    let text = rules(std::slice::from_ref(&with)).unwrap();
    let list = rule_list(&text);
    let rule = |name: &str| &list.iter().find(|(_, n, _)| n == name).unwrap().2;
    let apdex = rule("service_env:runway_apdex:ratio_rate5m")["expr"]
        .as_str()
        .unwrap();
    assert!(
        apdex.contains(r#"le="0.256""#) && apdex.contains(r#"le="1.024""#),
        "the threshold and 4 times it: {apdex}"
    );
    assert!(!apdex.contains(r#"le="4.096""#), "{apdex}");
    assert!(
        rule("RunwayErrorBudgetBurn1h")["expr"]
            .as_str()
            .unwrap()
            .contains("(14.4 * (1 - 0.995))")
    );
    assert!(
        rule("RunwayApdexBudgetBurn3d")["expr"]
            .as_str()
            .unwrap()
            .contains("(1 - 1 * (1 - 0.99))")
    );
    let annotations = &rule("RunwayApdexBudgetBurn1h")["annotations"];
    assert_eq!(
        annotations["runbook_url"], r#"https://wiki.example.com/web/{{ "{{" }}oncall}}"#,
        "the manifest's runbook wins, printed as written"
    );
    assert!(
        annotations["description"]
            .as_str()
            .unwrap()
            .contains("(responses within 0.256 s satisfy, within 1.024 s count half); a target of 0.99 allows 0.01 below 1"),
        "{annotations}"
    );
    assert!(
        rule("RunwayErrorBudgetBurn6h")["annotations"]["description"]
            .as_str()
            .unwrap()
            .contains("more than 3 % of those of the last 30 minutes; an availability target of 99.5 % allows 0.5 %")
    );

    let board = dashboard(&with).to_string();
    assert!(board.contains(r#"le=\"0.256\""#) && board.contains("(1 - 0.995)"));

    // Without a base or the manifest's, there is no runbook.
    let bare = ServiceSlo::new(&config(&manifest("web", ""), None), None).unwrap();
    let text = rules(&[bare]).unwrap();
    assert!(!text.contains("runbook_url"), "{text}");
}

#[test]
fn bad_overrides_are_refused_naming_the_field() {
    for (slo_yaml, field, expected) in [
        (
            "availability_target: 1.0",
            "spec.workload.slo.availability_target",
            "found `1.0` (expected less than 1)",
        ),
        (
            "apdex_target: 0",
            "spec.workload.slo.apdex_target",
            "found `0` (expected more than 0)",
        ),
        (
            "apdex_threshold_seconds: 1",
            "spec.workload.slo.apdex_threshold_seconds",
            "1 seconds is not a bound of the ingress's latency histogram",
        ),
        (
            "apdex_threshold_seconds: 65.536",
            "spec.workload.slo.apdex_threshold_seconds",
            "expected one of 0.00025, 0.0005, 0.001",
        ),
        (
            "runbook_url: wiki/web",
            "spec.workload.slo.runbook_url",
            "`wiki/web` is not a web address",
        ),
    ] {
        let files = ServiceFiles {
            base: Some(SourceFile::new(
                ".runway/runway.yml",
                manifest("web", slo_yaml),
            )),
            ..ServiceFiles::default()
        };
        let loaded = load(&files);
        assert!(loaded.service.is_none(), "{slo_yaml} was accepted");
        let shown: Vec<String> = loaded.diagnostics.iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 1, "{shown:#?}");
        assert!(
            shown[0].starts_with("error: .runway/runway.yml:12:")
                && shown[0].contains(&format!(" {field}: "))
                && shown[0].contains(expected),
            "{slo_yaml}: {shown:#?}"
        );
    }
}

#[test]
fn environments_partition_a_service_and_duplicates_are_refused() {
    let every = slo("web", "", None);
    let production = slo("web", "", Some("production"));
    let staging = slo("web", "apdex_threshold_seconds: 0.512", Some("staging.eu"));
    let other = slo("api", "", None);
    let text = rules(&[
        every.clone(),
        production.clone(),
        staging.clone(),
        other.clone(),
    ])
    .unwrap();
    let list = rule_list(&text);
    let groups: BTreeSet<&str> = list.iter().map(|(group, _, _)| group.as_str()).collect();
    assert_eq!(
        groups,
        BTreeSet::from([
            "runway:web",
            "runway:web:production",
            "runway:web:staging.eu",
            "runway:api"
        ])
    );
    let expr_of = |group: &str| {
        list.iter()
            .find(|(g, name, _)| g == group && name == "service_env:runway_requests:rate5m")
            .unwrap()
            .2["expr"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        expr_of("runway:web").contains(r#"{service="web",env!~"production|staging\\.eu"}"#),
        "every other environment: {}",
        expr_of("runway:web")
    );
    assert!(expr_of("runway:api").contains(r#"{service="api"}"#));
    assert!(expr_of("runway:web:staging.eu").contains(r#"env="staging.eu""#));

    for twice in [
        vec![production.clone(), every.clone(), production.clone()],
        vec![every.clone(), other.clone(), every.clone()],
    ] {
        let error = rules(&twice).unwrap_err();
        assert!(
            matches!(&error, RenderError::DuplicateSlo { service, .. } if service == "web"),
            "{error}"
        );
    }
    assert_eq!(
        rules(&[production.clone(), production])
            .unwrap_err()
            .to_string(),
        "service `web` has two sets of objectives for environment `production`"
    );

    // One rule file per service, holding all of its environments; the dashboard from the one
    // for every environment.
    let files = observability::files(&[production_for("web"), every, other]).unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "web.rules.yml",
            "web.dashboard.json",
            "api.rules.yml",
            "api.dashboard.json"
        ]
    );
    assert!(
        files[0]
            .contents
            .contains("name: \"runway:web:production\"")
    );
    assert!(files[0].contents.contains("name: \"runway:web\""));
    assert!(!files[0].contents.contains("runway:api"));
    let board: Value = serde_json::from_str(&files[1].contents).unwrap();
    let env = &board["templating"]["list"][1];
    assert_eq!(env["name"], "env");
    assert!(env.get("current").is_none(), "every environment: {env}");
}

fn production_for(name: &str) -> ServiceSlo {
    slo(name, "", Some("production"))
}

#[test]
fn a_worker_has_nothing_to_measure() {
    let text = "kind: RunwayService\nmetadata: {name: jobs}\nspec:\n  image: jobs:1\n  \
                workload: {kind: worker}\n";
    let error = ServiceSlo::new(&config(text, None), None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "service `jobs` is a worker (`spec.workload.kind: worker`); observability runs only \
         services that serve requests on a port"
    );
}

#[test]
fn the_render_target_writes_both_files() {
    let web = config(&manifest("web_app", ""), Some("production"));
    let files = render(&web, Target::Observability, &RenderOptions::default()).unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["web-app.rules.yml", "web-app.dashboard.json"]);
    assert_eq!(
        files,
        observability::files(&[ServiceSlo::new(&web, None).unwrap()]).unwrap()
    );
    assert_eq!(Target::Observability.to_string(), "observability");
}

#[test]
fn rule_files_pass_promtool_check() {
    if !promtool_installed() {
        return;
    }
    let dir = TempDir::new("check");
    let cases = [
        ("default.yml", vec![slo("web", "", None)]),
        (
            "every-override.yml",
            vec![slo("web", EVERY_OVERRIDE, Some("production"))],
        ),
        (
            "combined.yml",
            vec![
                slo("web", "", None),
                slo("web", EVERY_OVERRIDE, Some("production")),
                slo("web", "apdex_threshold_seconds: 32.768", Some("staging")),
                slo("api", "apdex_threshold_seconds: 0.00025", None),
            ],
        ),
    ];
    for (name, slos) in cases {
        std::fs::write(dir.0.join(name), rules(&slos).unwrap()).unwrap();
        let output = promtool(
            &dir.0,
            &["check", "rules", "--lint=all", "--lint-fatal", name],
            Duration::from_secs(60),
        );
        assert_success(&output, &format!("promtool check rules {name}"));
        let expected = format!("SUCCESS: {} rules found", 34 * slos.len());
        assert!(
            String::from_utf8_lossy(&output.stdout).contains(&expected),
            "{name}: {}",
            String::from_utf8_lossy(&output.stdout)
        );
    }
}

/// One input series of a promtool unit test.
fn series(labels: &str, values: &str) -> Value {
    json!({ "series": labels, "values": values })
}

/// `runway_ingress_requests_total` of one revision of `service` in `env`, by status class.
fn requests(service: &str, env: &str, class: &str, values: &str) -> Value {
    series(
        &format!(
            r#"runway_ingress_requests_total{{service="{service}",env="{env}",revision="{service}-00001",class="{class}"}}"#
        ),
        values,
    )
}

/// A bucket (`le`, or `count` for `_count`) of the latency histogram.
fn latency(service: &str, le: &str, values: &str) -> Value {
    let labels = format!(r#"service="{service}",env="production",revision="{service}-00001""#);
    if le == "count" {
        series(
            &format!("runway_ingress_request_duration_seconds_count{{{labels}}}"),
            values,
        )
    } else {
        series(
            &format!(r#"runway_ingress_request_duration_seconds_bucket{{{labels},le="{le}"}}"#),
            values,
        )
    }
}

/// The firing alerts matching `matchers` at `eval_time` are exactly `expected`
/// (alertname, service, env, severity, slo).
fn firing(matchers: &str, eval_time: &str, expected: &[(&str, &str, &str, &str, &str)]) -> Value {
    let samples: Vec<Value> = expected
        .iter()
        .map(|(alert, service, env, severity, slo)| {
            json!({
                "labels": format!(
                    r#"ALERTS{{alertname="{alert}",alertstate="firing",env="{env}",service="{service}",severity="{severity}",slo="{slo}"}}"#
                ),
                "value": 1,
            })
        })
        .collect();
    json!({
        "expr": format!(r#"ALERTS{{alertstate="firing",{matchers}}}"#),
        "eval_time": eval_time,
        "exp_samples": samples,
    })
}

/// Runs promtool's unit tests `tests` against the rules of `slos`, evaluated every
/// `evaluation_interval`.
fn promtool_unit_tests(name: &str, slos: &[ServiceSlo], evaluation_interval: &str, tests: Value) {
    let dir = TempDir::new(name);
    std::fs::write(dir.0.join("rules.yml"), rules(slos).unwrap()).unwrap();
    let file = json!({
        "rule_files": ["rules.yml"],
        "evaluation_interval": evaluation_interval,
        "tests": tests,
    });
    // JSON is YAML.
    std::fs::write(dir.0.join("tests.yml"), file.to_string()).unwrap();
    let output = promtool(
        &dir.0,
        &["test", "rules", "tests.yml"],
        Duration::from_secs(180),
    );
    assert_success(&output, &format!("promtool test rules ({name})"));
}

fn page(
    alert: &'static str,
    service: &'static str,
    env: &'static str,
    slo: &'static str,
) -> (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
) {
    (alert, service, env, "page", slo)
}

/// The alerts that must fire within minutes, and those that must not, on traffic shaped as
/// the ingress counts it, one request a minute standing for a thousand.
#[test]
fn bursts_of_errors_and_slow_responses_page_within_minutes() {
    if !promtool_installed() {
        return;
    }
    let slos = [
        slo("web", "", Some("production")),
        slo("web", "", None),
        slo("lenient", "availability_target: 0.99", Some("production")),
        slo("api", "", Some("production")),
        slo(
            "snappy",
            "apdex_threshold_seconds: 0.256",
            Some("production"),
        ),
        slo("relaxed", "", Some("production")),
    ];

    // Six hours at 1,000 requests a minute without an error, then 5 % answered with a 5xx.
    let burst = |service: &'static str| {
        [
            requests(service, "production", "2xx", "0+1000x360 360950+950x60"),
            requests(service, "production", "5xx", "0+0x360 50+50x60"),
        ]
    };
    let mut burst_series: Vec<Value> = burst("web").into();
    burst_series.extend(burst("lenient"));
    burst_series.extend([
        // Staging fails every request: the rules for every other environment catch it.
        requests("web", "staging", "5xx", "0+100x420"),
        // A service without rules alerts on nothing.
        requests("unknown", "production", "5xx", "0+100x420"),
    ]);
    let burst_test = json!({
        "name": "a 5 % error burst pages within minutes, where the target allows it not",
        "interval": "1m",
        "input_series": burst_series,
        "promql_expr_test": [
            firing(r#"service=~"web|lenient",env="production""#, "6h", &[]),
            firing(r#"severity="page",service="web",env="production""#, "6h10m", &[]),
            firing(
                r#"severity="page",service=~"web|lenient",env="production""#,
                "6h25m",
                &[page("RunwayErrorBudgetBurn1h", "web", "production", "errors")],
            ),
            firing(
                r#"env="staging""#,
                "6h25m",
                &[
                    page("RunwayErrorBudgetBurn1h", "web", "staging", "errors"),
                    page("RunwayErrorBudgetBurn6h", "web", "staging", "errors"),
                    ("RunwayErrorBudgetBurn3d", "web", "staging", "ticket", "errors"),
                ],
            ),
            firing(r#"service="unknown""#, "6h25m", &[]),
        ],
    });

    // Two good hours, then half the responses take 1.024 to 4.096 s: the apdex pages. The
    // same responses within 0.5 s are slow only for a service whose threshold is 0.256 s.
    let apdex_test = json!({
        "name": "slow responses page on the apdex, at the manifest's threshold",
        "interval": "1m",
        "input_series": [
            requests("api", "production", "2xx", "0+1000x150"),
            latency("api", "1.024", "0+1000x120 120500+500x30"),
            latency("api", "4.096", "0+1000x150"),
            latency("api", "count", "0+1000x150"),
            latency("snappy", "0.256", "0+0x60"),
            latency("snappy", "1.024", "0+1000x60"),
            latency("snappy", "count", "0+1000x60"),
            latency("relaxed", "1.024", "0+1000x60"),
            latency("relaxed", "4.096", "0+1000x60"),
            latency("relaxed", "count", "0+1000x60"),
        ],
        "promql_expr_test": [
            firing(r#"service="api""#, "2h", &[]),
            firing(
                r#"service="api",severity="page""#,
                "2h10m",
                &[
                    page("RunwayApdexBudgetBurn1h", "api", "production", "apdex"),
                    page("RunwayApdexBudgetBurn6h", "api", "production", "apdex"),
                ],
            ),
            firing(r#"service="api",slo="errors""#, "2h10m", &[]),
            firing(
                r#"service=~"snappy|relaxed",severity="page""#,
                "30m",
                &[
                    page("RunwayApdexBudgetBurn1h", "snappy", "production", "apdex"),
                    page("RunwayApdexBudgetBurn6h", "snappy", "production", "apdex"),
                ],
            ),
        ],
    });

    // What on-call reads, whole: 5 % of requests failing from the start, and an apdex of 0.75.
    let annotations_test = json!({
        "name": "the alerts say what burns, how fast, and where to look",
        "interval": "1m",
        "input_series": [
            requests("web", "production", "2xx", "0+950x30"),
            requests("web", "production", "5xx", "0+50x30"),
            requests("api", "production", "2xx", "0+1000x30"),
            latency("api", "1.024", "0+500x30"),
            latency("api", "4.096", "0+1000x30"),
            latency("api", "count", "0+1000x30"),
        ],
        "alert_rule_test": [
            {
                "eval_time": "10m",
                "alertname": "RunwayErrorBudgetBurn1h",
                "exp_alerts": [{
                    "exp_labels": {
                        "service": "web", "env": "production", "severity": "page", "slo": "errors",
                    },
                    "exp_annotations": {
                        "summary": "web in production is spending its error budget 14.4 times as fast as its SLO allows",
                        "description": "5% of the requests of the last hour were answered with a 5xx, and more than 1.44 % of those of the last 5 minutes; an availability target of 99.9 % allows 0.1 %. At this rate an hour spends 2 % of a 30-day error budget.",
                        "runbook_url": "https://runbooks.example.com/runway/web",
                        "grafana_dashboard_uid": "runway-web",
                    },
                }],
            },
            {
                "eval_time": "10m",
                "alertname": "RunwayApdexBudgetBurn3d",
                "exp_alerts": [{
                    "exp_labels": {
                        "service": "api", "env": "production", "severity": "ticket", "slo": "apdex",
                    },
                    "exp_annotations": {
                        "summary": "api in production is spending its apdex budget as fast as its SLO allows",
                        "description": "The apdex of the last 3 days is 0.7500, and under 0.999 for the last 6 hours too (responses within 1.024 s satisfy, within 4.096 s count half); a target of 0.999 allows 0.001 below 1. At this rate 3 days spend 10 % of a 30-day apdex budget.",
                        "runbook_url": "https://runbooks.example.com/runway/api",
                        "grafana_dashboard_uid": "runway-api",
                    },
                }],
            },
        ],
    });
    promtool_unit_tests(
        "minutes",
        &slos,
        "1m",
        json!([burst_test, apdex_test, annotations_test]),
    );
}

/// Three days of traffic, sampled every 2 minutes and evaluated every 5 (a 3-day window read
/// every minute is slow to evaluate), twenty requests a sample standing for a thousand a
/// minute.
#[test]
fn a_slow_burn_tickets_and_a_budget_kept_never_alerts() {
    if !promtool_installed() {
        return;
    }
    let slos = [
        slo("quiet", "", Some("production")),
        slo("slow", "", Some("production")),
    ];
    // 0.05 % of requests fail, for three days: within budget, nothing fires. 0.2 % fail after
    // a good day: no page, but a ticket once the three days' ratio passes the budget.
    let test = json!({
        "name": "0.05 % never alerts; a slow burn over days tickets",
        "interval": "2m",
        "input_series": [
            requests("quiet", "production", "2xx", "0+19990x2165"),
            requests("quiet", "production", "5xx", "0+10x2165"),
            requests("slow", "production", "2xx", "0+2000x720 1441996+1996x1445"),
            requests("slow", "production", "5xx", "0+0x720 4+4x1445"),
        ],
        "promql_expr_test": [
            firing(r#"service="quiet""#, "1h", &[]),
            firing(r#"service="quiet""#, "6h", &[]),
            firing(r#"service="quiet""#, "1d", &[]),
            firing(r#"service="quiet""#, "3d", &[]),
            firing(r#"service="slow""#, "1d12h", &[]),
            firing(
                r#"service="slow""#,
                "3d",
                &[("RunwayErrorBudgetBurn3d", "slow", "production", "ticket", "errors")],
            ),
        ],
    });
    promtool_unit_tests("days", &slos, "5m", json!([test]));
}

/// Grafana's variables and the built-ins a panel may use, each with a value promtool can
/// parse in its place.
const VARIABLES: [(&str, &str); 3] = [
    ("$__rate_interval", "5m"),
    ("$env", "production"),
    ("$revision", ".*"),
];

/// Every PromQL query of the dashboard, with the variables in place, and where it is.
fn dashboard_queries(board: &Value) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for panel in board["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            queries.push((
                format!("panel {} target {}", panel["title"], target["refId"]),
                target["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    for annotation in board["annotations"]["list"].as_array().unwrap() {
        if let Some(expr) = annotation.get("expr").and_then(Value::as_str) {
            queries.push((
                format!("annotation {}", annotation["name"]),
                expr.to_owned(),
            ));
        }
    }
    for variable in board["templating"]["list"].as_array().unwrap() {
        if variable["type"] == "query" {
            let query = variable["query"]["query"].as_str().unwrap();
            assert_eq!(variable["definition"], query);
            // `label_values(<series selector>, <label>)`: the selector is PromQL.
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .and_then(|q| q.rsplit_once(", "))
                .unwrap_or_else(|| panic!("not label_values: {query}"));
            queries.push((format!("variable {}", variable["name"]), inner.0.to_owned()));
        }
    }
    queries
        .into_iter()
        .map(|(place, mut expr)| {
            for (name, value) in VARIABLES {
                expr = expr.replace(name, value);
            }
            assert!(!expr.contains('$'), "{place}: unknown variable in {expr}");
            (place, expr)
        })
        .collect()
}

#[test]
fn the_dashboard_follows_grafanas_model() {
    for slo in [
        slo("web", "", Some("production")),
        slo("web_app", EVERY_OVERRIDE, None),
    ] {
        let board = dashboard(&slo);
        let uid = board["uid"].as_str().unwrap();
        assert_eq!(uid, dashboard_uid(&slo.service));
        assert!(
            (8..=40).contains(&uid.len())
                && uid
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "{uid}"
        );
        assert!(board["title"].as_str().unwrap().contains(&slo.service));
        assert!(board["schemaVersion"].as_u64().unwrap() >= 36);
        for key in [
            "version", "editable", "tags", "time", "timezone", "refresh", "links",
        ] {
            assert!(board.get(key).is_some(), "no {key}");
        }
        assert!(board["time"]["from"].is_string() && board["time"]["to"].is_string());

        let variables: Vec<&str> = board["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert_eq!(variables, ["datasource", "env", "revision"]);
        let list = &board["templating"]["list"];
        assert_eq!(list[0]["type"], "datasource");
        assert_eq!(list[0]["query"], "prometheus");
        assert_eq!(list[1]["type"], "query");
        assert_eq!(list[2]["type"], "query");
        assert_eq!(list[2]["includeAll"], true);
        assert_eq!(list[2]["multi"], true);
        if let Some(env) = &slo.env {
            assert_eq!(list[1]["current"]["value"], env.as_str());
        }

        let source = json!({"type": "prometheus", "uid": "${datasource}"});
        let panels = board["panels"].as_array().unwrap();
        assert!(panels.len() >= 8);
        let mut ids = BTreeSet::new();
        let mut cells = BTreeSet::new();
        let mut titles = Vec::new();
        for panel in panels {
            let title = panel["title"].as_str().unwrap();
            titles.push(title);
            assert!(
                ids.insert(panel["id"].as_u64().unwrap()),
                "{title}: id twice"
            );
            assert_eq!(panel["type"], "timeseries", "{title}");
            assert_eq!(panel["datasource"], source, "{title}");
            let grid = &panel["gridPos"];
            let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| grid[k].as_u64().unwrap());
            assert!(w > 0 && h > 0 && x + w <= 24, "{title}: {grid}");
            for column in x..x + w {
                for row in y..y + h {
                    assert!(
                        cells.insert((column, row)),
                        "{title} overlaps another panel"
                    );
                }
            }
            assert!(
                panel["fieldConfig"]["defaults"]["unit"].is_string(),
                "{title}"
            );
            assert_eq!(
                panel["fieldConfig"]["defaults"]["thresholds"]["steps"][0]["value"],
                Value::Null,
                "{title}: Grafana's base step"
            );
            let targets = panel["targets"].as_array().unwrap();
            assert!(!targets.is_empty(), "{title}");
            let mut refs = BTreeSet::new();
            for target in targets {
                assert!(refs.insert(target["refId"].as_str().unwrap()), "{title}");
                assert_eq!(target["datasource"], source, "{title}");
                assert!(!target["expr"].as_str().unwrap().is_empty(), "{title}");
                assert!(target["legendFormat"].is_string(), "{title}");
            }
        }
        for wanted in [
            "Traffic",
            "Errors (5xx ratio)",
            "Latency",
            "Apdex",
            "Error budget burn rate",
            "Instances' concurrency",
            "Saturation",
        ] {
            assert!(titles.contains(&wanted), "no {wanted} panel: {titles:?}");
        }
        let queries = dashboard_queries(&board);
        let all = queries
            .iter()
            .map(|(_, e)| e.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        for needle in [
            "histogram_quantile(0.5,",
            "histogram_quantile(0.9,",
            "histogram_quantile(0.99,",
            "runway_ingress_in_flight_requests",
            "runway_ingress_queued_requests",
            "runway_ingress_held_requests",
            "runway_ingress_upstream_connect_errors_total",
            "runway_ingress_upstream_errors_total",
            &format!(r#"le="{}""#, slo.satisfied_le()),
            &format!(r#"le="{}""#, slo.tolerating_le()),
            "service_env:runway_error_ratio:ratio_rate1h",
            "service_env:runway_apdex:ratio_rate6h",
        ] {
            assert!(all.contains(needle), "no query has {needle}");
        }
        let deployments = &board["annotations"]["list"][1];
        assert_eq!(deployments["name"], "Deployments");
        assert_eq!(deployments["datasource"], source);
    }
    // The uid is the service's, whatever the environment or objectives.
    assert_eq!(
        dashboard(&slo("web", "", Some("production")))["uid"],
        dashboard(&slo("web", EVERY_OVERRIDE, Some("staging")))["uid"]
    );
    assert_eq!(dashboard_uid("web"), "runway-web");
    assert_ne!(dashboard_uid("web"), dashboard_uid("web2"));
    let board = dashboard(&slo("web", "", None));
    assert_eq!(board, dashboard(&slo("web", "", None)), "deterministic");
}

#[test]
fn every_dashboard_query_parses() {
    if !promtool_installed() {
        return;
    }
    let dir = TempDir::new("dashboard");
    let mut records = Vec::new();
    for slo in [
        slo("web", "", Some("production")),
        slo("web_app", EVERY_OVERRIDE, None),
    ] {
        for (place, expr) in dashboard_queries(&dashboard(&slo)) {
            records.push(json!({
                "record": format!("dashboard:query_{}:check", records.len()),
                "expr": expr,
                "labels": { "place": place },
            }));
        }
    }
    let count = records.len();
    let file = json!({ "groups": [{ "name": "dashboard-queries", "rules": records }] });
    std::fs::write(dir.0.join("queries.yml"), file.to_string()).unwrap();
    let output = promtool(
        &dir.0,
        &[
            "check",
            "rules",
            "--lint=all",
            "--lint-fatal",
            "queries.yml",
        ],
        Duration::from_secs(60),
    );
    assert_success(&output, "promtool check rules on the dashboard's queries");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains(&format!("SUCCESS: {count} rules found")),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}
