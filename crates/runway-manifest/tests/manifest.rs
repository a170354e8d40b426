//! The manifest crate through its public API: upstream files, overrides, environment files, and
//! located errors.

use std::collections::BTreeMap;

use runway_manifest::{
    AnalysisConfig, Diagnostic, RolloutConfig, ServiceConfig, ServiceFiles, SloConfig, SourceFile,
    Strategy, load,
};

fn base(name: &str, text: &str) -> ServiceFiles {
    ServiceFiles {
        base: Some(SourceFile::new(name, text)),
        ..ServiceFiles::default()
    }
}

fn render(diagnostics: &[Diagnostic]) -> String {
    diagnostics.iter().map(|d| format!("{d}\n")).collect()
}

#[test]
fn upstream_manifests_validate_unchanged() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/upstream");
    let mut count = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let loaded = load(&base(&path.display().to_string(), &text));
        let errors: Vec<_> = loaded.diagnostics.iter().filter(|d| d.is_error()).collect();
        assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
        assert!(loaded.service.is_some());
        count += 1;
    }
    assert!(count >= 5);
}

#[test]
fn five_mistakes_give_five_located_errors() {
    let text = "\
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: Hello_World
spec:
  container_port: 70000
  request_timout: 60
  scalability:
    min_instances: 5
    max_instances: 2
  resources:
    limits:
      memory: 512MB
";
    let loaded = load(&base(".runway/runway.yml", text));
    insta::assert_snapshot!("five_mistakes", render(&loaded.diagnostics));
    assert!(loaded.service.is_none());
}

const MINIMAL: &str = "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: svc\nspec:\n  regions: [us-east1]\n  scalability:\n    min_instances: 1\n    max_instances: 3\n  workload:\n    env: {A: base, B: base}\n    secrets: [TOKEN]\n";

#[test]
fn overrides_deep_merge_and_env_files_add_variables() {
    let mut files = base(".runway/runway.yml", MINIMAL);
    files.overrides.insert(
        "production".into(),
        SourceFile::new(
            ".runway/runway-production.yml",
            "spec:\n  scalability:\n    max_instances: 10\n  regions: [us-east1, europe-west1]\n",
        ),
    );
    files.env_files.insert(
        "production".into(),
        SourceFile::new(".runway/env-production.yml", "B: prod\nC: 3\nD: true\n"),
    );
    let loaded = load(&files);
    let warnings: Vec<String> = loaded.diagnostics.iter().map(|d| d.to_string()).collect();
    assert_eq!(
        warnings,
        [
            "warning: .runway/runway-production.yml:4:23: spec.regions[1]: the platform runs \
             the service once, not once per region: `europe-west1` gets no instances of its \
             own (expected one region)"
        ],
        "only the second region, in the file that adds it"
    );
    let service = loaded.service.unwrap();
    assert_eq!(service.environments().collect::<Vec<_>>(), ["production"]);

    let prod = service.config(Some("production")).unwrap();
    assert_eq!(
        (prod.min_instances, prod.max_instances),
        (1, 10),
        "mappings merge key by key"
    );
    assert_eq!(
        prod.regions,
        ["us-east1", "europe-west1"],
        "lists are replaced"
    );
    let env: BTreeMap<_, _> = prod
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        env,
        BTreeMap::from([("A", "base"), ("B", "prod"), ("C", "3"), ("D", "true")])
    );

    let plain = service.config(None).unwrap();
    assert_eq!(plain.max_instances, 3);
    assert_eq!(
        service.config(Some("staging")).unwrap().max_instances,
        3,
        "no override: the base"
    );
}

#[test]
fn errors_in_override_files_point_at_the_override() {
    let mut files = base(".runway/runway.yml", MINIMAL);
    files.overrides.insert(
        "staging".into(),
        SourceFile::new(
            ".runway/runway-staging.yml",
            "spec:\n  scalability:\n    min_instances: 9\n",
        ),
    );
    files.env_files.insert(
        "staging".into(),
        SourceFile::new(
            ".runway/env-staging.yml",
            "TOKEN: x\nPORT: 1\nnested: {a: 1}\n",
        ),
    );
    let loaded = load(&files);
    assert!(loaded.service.is_none());
    insta::assert_snapshot!("override_errors", render(&loaded.diagnostics));
}

#[test]
fn semantic_rules() {
    let text = "\
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: svc-
spec:
  regions: [us-east1, us-east1]
  readiness_probe:
    failure_threshold: 4
  startup_probe:
    path: healthz
  deployment:
    rollout_traffic_percentages: [10, 5, 90]
  resources:
    limits:
      cpu: 2Gi
  workload:
    secrets: [db_password]
";
    let loaded = load(&base("m.yml", text));
    insta::assert_snapshot!("semantic_rules", render(&loaded.diagnostics));
}

#[test]
fn process_artifact_and_workers() {
    let text = "\
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: runner
spec:
  image: busybox
  liveness_probe:
    path: /health
  workload:
    kind: worker
    process:
      command: [./runner, run]
";
    let loaded = load(&base("m.yml", text));
    insta::assert_snapshot!("process_and_worker", render(&loaded.diagnostics));
    let ok = load(&base(
        "m.yml",
        &text
            .replace("  image: busybox\n", "")
            .replace("  liveness_probe:\n    path: /health\n", ""),
    ));
    assert_eq!(ok.diagnostics, vec![]);
    let config = ok.service.unwrap().config(None).unwrap();
    assert_eq!(config.port, None);
    assert_eq!(config.stop_signal.to_string(), "SIGQUIT");
    assert_eq!(config.stop_grace_period_seconds, 3600);
}

#[test]
fn a_built_image_is_one_artifact_on_a_pinned_base() {
    let text = "\
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: web
spec:
  image: busybox
  workload:
    process:
      command: [python3, main.py]
    build:
      base: docker.io/library/python:3.12-slim
      command: ['', main.py]
      include: [main.py, ../secrets, /etc]
      workdir: app
";
    let loaded = load(&base("m.yml", text));
    insta::assert_snapshot!("build", render(&loaded.diagnostics));
    let good = "\
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: web
spec:
  workload:
    build:
      base: docker.io/library/python@sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae
      command: [python3, main.py]
      include: [main.py, app/]
";
    let ok = load(&base("m.yml", good));
    assert_eq!(ok.diagnostics, vec![]);
}

#[test]
fn a_tag_header_is_a_header_of_the_services_own() {
    let manifest = |name: &str| {
        format!(
            "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: web\nspec:\n  \
             image: busybox\n  workload:\n    tag_header: {name}\n"
        )
    };
    let ok = load(&base("m.yml", &manifest("Runway-Tag")));
    assert_eq!(ok.diagnostics, vec![]);
    for (name, says) in [
        ("'bad name'", "is not an HTTP header's name"),
        ("Host", "is a header the platform or HTTP itself uses"),
        (
            "runway-caller",
            "is a header the platform or HTTP itself uses",
        ),
        (
            "X-Forwarded-Host",
            "is a header the platform or HTTP itself uses",
        ),
    ] {
        let loaded = load(&base("m.yml", &manifest(name)));
        let text = render(&loaded.diagnostics);
        assert!(text.contains("m.yml:8"), "{name}: {text}");
        assert!(text.contains("spec.workload.tag_header"), "{name}: {text}");
        assert!(text.contains(says), "{name}: {text}");
    }
}

#[test]
fn rate_limits_and_client_addresses_take_defaults_and_name_bad_fields() {
    let manifest = |workload: &str| {
        format!(
            "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: web\nspec:\n  \
             image: busybox\n  workload:\n{workload}"
        )
    };
    let good = manifest(
        "    rate_limit:\n      requests_per_second: 2.5\n      per_client:\n        \
         requests_per_second: 0.5\n        burst: 4\n    client_addresses:\n      \
         allow: [203.0.113.0/24, '2001:db8::/32', 198.51.100.7]\n      deny: [203.0.113.9]\n",
    );
    let loaded = load(&base("m.yml", &good));
    assert_eq!(loaded.diagnostics, vec![]);
    let config = loaded
        .service
        .expect("a service")
        .config(None)
        .expect("settings");
    let traffic = config.traffic;
    let limit = traffic.rate_limit.expect("the service's");
    assert_eq!(
        (limit.requests_per_second, limit.burst),
        (2.5, 3),
        "a second's worth"
    );
    let client = traffic.per_client.expect("each client's");
    assert_eq!((client.requests_per_second, client.burst), (0.5, 4));
    assert_eq!(traffic.allow.len(), 3);
    assert_eq!(traffic.deny, vec!["203.0.113.9".to_owned()]);

    for (workload, line, field, says) in [
        (
            "    rate_limit:\n      burst: 5\n",
            "m.yml:9",
            "spec.workload.rate_limit",
            "limits nothing",
        ),
        (
            "    rate_limit:\n      requests_per_second: 0\n",
            "m.yml:9",
            "spec.workload.rate_limit.requests_per_second",
            "",
        ),
        (
            "    rate_limit:\n      per_client:\n        burst: 5\n",
            "m.yml:9",
            "spec.workload.rate_limit.per_client",
            "requests_per_second",
        ),
        (
            "    client_addresses:\n      deny: [10.0.0.0/8, 10.1.2.3/16]\n",
            "m.yml:9",
            "spec.workload.client_addresses.deny[1]",
            "host bits set; the network is 10.1.0.0/16",
        ),
        (
            "    client_addresses:\n      allow: [example.com]\n",
            "m.yml:9",
            "spec.workload.client_addresses.allow[0]",
            "is not a network",
        ),
        (
            "    client_addresses:\n      allow: []\n",
            "m.yml:9",
            "spec.workload.client_addresses.allow",
            "admit no client",
        ),
    ] {
        let loaded = load(&base("m.yml", &manifest(workload)));
        let text = render(&loaded.diagnostics);
        assert!(text.contains(line), "{workload}: {text}");
        assert!(text.contains(field), "{workload}: {text}");
        assert!(text.contains(says), "{workload}: {text}");
    }
}

#[test]
fn structural_errors_of_every_kind() {
    let text = "\
apiVersion: runway/v2
kind: Service
metadata:
  owner: me
spec:
  container_port: \"8080\"
  scalability: 
  deployment:
    strategy: canery
  regions: []
";
    let loaded = load(&base("m.yml", text));
    insta::assert_snapshot!("structural_errors", render(&loaded.diagnostics));
}

/// The base's config, asserting the files load without any finding.
fn clean_config(files: &ServiceFiles, environment: Option<&str>) -> ServiceConfig {
    let loaded = load(files);
    assert_eq!(
        loaded.diagnostics,
        vec![],
        "{}",
        render(&loaded.diagnostics)
    );
    let Some(service) = loaded.service else {
        panic!("no service without a finding");
    };
    match service.config(environment) {
        Ok(config) => config,
        Err(e) => panic!("{e}"),
    }
}

const CANARY: &str = "\
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: svc
spec:
  deployment:
    strategy: runway_canary
  workload:
    rollout:
      steps: [10, 50, 100]
      pause_seconds: 30
      analysis:
        max_error_percent: 2.5
        max_error_percent_over_stable: 0.25
        latency_slo_ms: 500
        max_p99_over_stable_ratio: 1.2
        min_p99_increase_ms: 10
        min_requests: 100
        max_readiness_failures: 1
        max_restarts: 2
        max_inconclusive_windows: 4
      auto_switch_after_seconds: 300
      keep_old_seconds: 900
";

#[test]
fn rollout_settings_parse_into_the_config() {
    let config = clean_config(&base("m.yml", CANARY), None);
    assert_eq!(config.strategy, Strategy::RunwayCanary);
    assert_eq!(
        config.rollout,
        RolloutConfig {
            steps: vec![10, 50, 100],
            pause_seconds: 30,
            analysis: AnalysisConfig {
                max_error_percent: 2.5,
                max_error_percent_over_stable: 0.25,
                latency_slo_ms: 500,
                max_p99_over_stable_ratio: 1.2,
                min_p99_increase_ms: 10,
                min_requests: 100,
                max_readiness_failures: 1,
                max_restarts: 2,
                max_inconclusive_windows: 4,
            },
            auto_switch_after_seconds: Some(300),
            keep_old_seconds: 900,
        }
    );
}

#[test]
fn rollout_defaults_apply_field_by_field() {
    let expected_defaults = RolloutConfig {
        steps: vec![10, 25, 50, 100],
        pause_seconds: 60,
        analysis: AnalysisConfig {
            max_error_percent: 1.0,
            max_error_percent_over_stable: 0.5,
            latency_slo_ms: 1024,
            max_p99_over_stable_ratio: 1.5,
            min_p99_increase_ms: 25,
            min_requests: 50,
            max_readiness_failures: 0,
            max_restarts: 0,
            max_inconclusive_windows: 3,
        },
        auto_switch_after_seconds: None,
        keep_old_seconds: 600,
    };
    assert_eq!(RolloutConfig::default(), expected_defaults);
    let none = clean_config(&base("m.yml", MINIMAL), None);
    assert_eq!(none.rollout, expected_defaults, "no rollout mapping");
    assert_eq!(none.strategy, Strategy::Legacy);

    let partial = MINIMAL.to_owned()
        + "    rollout:\n      analysis: {max_restarts: 2, max_error_percent: 0}\n";
    let config = clean_config(&base("m.yml", &partial), None);
    assert_eq!(
        config.rollout,
        RolloutConfig {
            analysis: AnalysisConfig {
                max_restarts: 2,
                max_error_percent: 0.0,
                ..expected_defaults.analysis.clone()
            },
            ..expected_defaults.clone()
        }
    );
    let empty = MINIMAL.to_owned() + "    rollout: {analysis: {}}\n";
    assert_eq!(
        clean_config(&base("m.yml", &empty), None).rollout,
        expected_defaults
    );
}

#[test]
fn an_example_per_strategy() {
    let manifest = |strategy: &str, deployment: &str, rollout: &str| {
        format!(
            "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: svc\nspec:\n  \
             deployment:\n    strategy: {strategy}\n{deployment}  workload:\n    rollout:\n{rollout}"
        )
    };
    let cases = [
        (
            manifest("legacy", "", "      keep_old_seconds: 60\n"),
            Strategy::Legacy,
        ),
        (
            manifest("expedited", "", "      pause_seconds: 5\n"),
            Strategy::Expedited,
        ),
        (
            manifest("dryrun", "", "      steps: [50, 100]\n"),
            Strategy::Dryrun,
        ),
        (
            manifest(
                "regional_rollout",
                "    rollout_traffic_percentages: [20, 100]\n",
                "      pause_seconds: 120\n",
            ),
            Strategy::RegionalRollout,
        ),
        (
            manifest(
                "runway_canary",
                "",
                "      steps: [5, 100]\n      analysis:\n        min_requests: 0\n",
            ),
            Strategy::RunwayCanary,
        ),
        (
            manifest(
                "runway_blue_green",
                "",
                "      auto_switch_after_seconds: 0\n      keep_old_seconds: 3600\n",
            ),
            Strategy::RunwayBlueGreen,
        ),
    ];
    for (text, strategy) in cases {
        let config = clean_config(&base("m.yml", &text), None);
        assert_eq!(config.strategy, strategy, "{text}");
        match strategy {
            Strategy::RegionalRollout => {
                assert_eq!(config.rollout_percentages, [20, 100]);
                assert_eq!(config.rollout.pause_seconds, 120, "the regional pause");
            }
            Strategy::RunwayCanary => {
                assert_eq!(config.rollout.steps, [5, 100]);
                assert_eq!(config.rollout.analysis.min_requests, 0);
            }
            Strategy::RunwayBlueGreen => {
                assert_eq!(config.rollout.auto_switch_after_seconds, Some(0));
                assert_eq!(config.rollout.keep_old_seconds, 3600);
            }
            _ => {}
        }
    }
}

#[test]
fn bad_rollout_settings_are_located() {
    let text = "\
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: svc
spec:
  deployment:
    strategy: runway_canary
  workload:
    rollout:
      steps: [10, 50, 40]
      pause_seconds: 0
      keep_old_secs: 60
      analysis:
        max_error_percent: 150
        max_error_percent_over_stable: .inf
        max_p99_over_stable_ratio: 0.5
        max_inconclusive_windows: 0
        latency_slo: 200
";
    let loaded = load(&base("m.yml", text));
    assert!(loaded.service.is_none());
    insta::assert_snapshot!("rollout_errors", render(&loaded.diagnostics));

    let out_of_range = CANARY.replace("[10, 50, 100]", "[0, 100]");
    let loaded = load(&base("m.yml", &out_of_range));
    assert_eq!(
        render(&loaded.diagnostics),
        "error: m.yml:10:15: spec.workload.rollout.steps[0]: found `0` (expected at least 1)\n"
    );
    let empty = CANARY.replace("[10, 50, 100]", "[]");
    let loaded = load(&base("m.yml", &empty));
    assert_eq!(
        render(&loaded.diagnostics),
        "error: m.yml:10:14: spec.workload.rollout.steps: the list is empty \
         (expected strictly increasing percentages from 1 to 100, ending at 100)\n"
    );
}

#[test]
fn rollout_settings_no_strategy_uses_are_allowed() {
    // Blue/green and canary settings beside `legacy`: an environment may switch strategy.
    let text = CANARY.replace("runway_canary", "legacy");
    let config = clean_config(&base("m.yml", &text), None);
    assert_eq!(config.strategy, Strategy::Legacy);
    assert_eq!(config.rollout.steps, [10, 50, 100]);
}

#[test]
fn overrides_change_the_strategy_and_merge_rollout_settings() {
    let base_text = MINIMAL.to_owned()
        + "    rollout:\n      steps: [10, 50, 100]\n      pause_seconds: 30\n      \
           analysis: {min_requests: 10, max_restarts: 5}\n";
    let mut files = base(".runway/runway.yml", &base_text);
    files.overrides.insert(
        "production".into(),
        SourceFile::new(
            ".runway/runway-production.yml",
            "spec:\n  deployment:\n    strategy: runway_canary\n  workload:\n    rollout:\n      \
             steps: [5, 20, 100]\n      analysis:\n        max_restarts: 1\n",
        ),
    );
    files.overrides.insert(
        "staging".into(),
        SourceFile::new(
            ".runway/runway-staging.yml",
            "spec:\n  deployment: {strategy: runway_blue_green}\n  workload:\n    rollout: {auto_switch_after_seconds: 0}\n",
        ),
    );
    let loaded = load(&files);
    assert_eq!(loaded.diagnostics, vec![]);
    let service = loaded.service.unwrap();

    let plain = service.config(None).unwrap();
    assert_eq!(plain.strategy, Strategy::Legacy);
    assert_eq!(plain.rollout.steps, [10, 50, 100]);

    let prod = service.config(Some("production")).unwrap();
    assert_eq!(prod.strategy, Strategy::RunwayCanary);
    assert_eq!(prod.rollout.steps, [5, 20, 100], "lists are replaced");
    assert_eq!(prod.rollout.pause_seconds, 30, "the base's, merged");
    assert_eq!(
        (
            prod.rollout.analysis.min_requests,
            prod.rollout.analysis.max_restarts
        ),
        (10, 1),
        "mappings merge key by key"
    );
    assert_eq!(prod.env.get("A").map(String::as_str), Some("base"));

    let staging = service.config(Some("staging")).unwrap();
    assert_eq!(staging.strategy, Strategy::RunwayBlueGreen);
    assert_eq!(staging.rollout.auto_switch_after_seconds, Some(0));
    assert_eq!(staging.rollout.steps, [10, 50, 100]);

    // A bad list in an override is reported in the override.
    files.overrides.insert(
        "production".into(),
        SourceFile::new(
            ".runway/runway-production.yml",
            "spec:\n  workload:\n    rollout:\n      steps: [50, 25]\n",
        ),
    );
    let loaded = load(&files);
    assert!(loaded.service.is_none());
    assert_eq!(
        render(&loaded.diagnostics),
        "error: .runway/runway-production.yml:4:19: spec.workload.rollout.steps[1]: 25 does not \
         increase on 50 (expected strictly increasing percentages from 1 to 100, ending at 100)\n\
         error: .runway/runway-production.yml:4:19: spec.workload.rollout.steps[1]: the last step \
         is 25 (expected strictly increasing percentages from 1 to 100, ending at 100)\n"
    );
}

#[test]
fn rollout_settings_round_trip() {
    let config = clean_config(&base("m.yml", CANARY), None);
    // JSON is YAML: the manifest written out loads back to the same manifest and settings.
    let json = serde_json::to_string(&config.manifest).unwrap();
    let again = clean_config(&base("m.json", &json), None);
    assert_eq!(again.manifest, config.manifest);
    assert_eq!(again.rollout, config.rollout);
    let none = clean_config(&base("m.yml", MINIMAL), None);
    let json = serde_json::to_string(&none.manifest).unwrap();
    assert!(!json.contains("rollout"), "absent stays absent: {json}");
}

/// The published schema and the reference generated from it are checked in; this fails when the
/// types change and they were not regenerated. `UPDATE_GENERATED=1 cargo test` rewrites them.
#[test]
fn checked_in_schema_and_reference_match_the_types() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    for (path, generated) in [
        (
            "schemas/runway-v1.json",
            runway_manifest::manifest_schema_json(),
        ),
        (
            "docs/manifest.md",
            runway_manifest::manifest_reference_markdown(),
        ),
    ] {
        let path = format!("{root}/{path}");
        if std::env::var_os("UPDATE_GENERATED").is_some() {
            std::fs::create_dir_all(std::path::Path::new(&path).parent().unwrap()).unwrap();
            std::fs::write(&path, &generated).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == generated,
            "{path} is out of date: run `UPDATE_GENERATED=1 cargo test -p runway-manifest --test manifest`"
        );
    }
}

mod no_panic {
    //! A bounded, always-on cousin of the cargo-fuzz target in `fuzz/`: YAML-shaped noise built
    //! from the manifest's own words must give diagnostics, never a panic.
    use proptest::prelude::*;
    use runway_manifest::{ServiceFiles, SourceFile, load};

    fn token() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("apiVersion: runway/v1\n".to_owned()),
            Just("kind: RunwayService\n".to_owned()),
            Just("metadata:\n  name: x\n".to_owned()),
            Just("spec:\n".to_owned()),
            Just("  scalability: {min_instances: 5, max_instances: 1}\n".to_owned()),
            Just("  regions: [a, a]\n".to_owned()),
            Just("  resources: {limits: {cpu: 1e9, memory: -1}}\n".to_owned()),
            Just("  deployment: {rollout_traffic_percentages: [0, 300]}\n".to_owned()),
            Just("  workload: {secrets: [A, A], env: {A: 1}}\n".to_owned()),
            Just(
                "  workload: {rollout: {steps: [50, 10], analysis: {max_error_percent: 1e9}}}\n"
                    .to_owned()
            ),
            Just("  deployment: {strategy: runway_canary}\n".to_owned()),
            Just("- ".to_owned()),
            Just("&a ".to_owned()),
            Just("*a ".to_owned()),
            Just("[".to_owned()),
            Just("{".to_owned()),
            Just(": ".to_owned()),
            Just("\n".to_owned()),
            Just("  ".to_owned()),
            Just("\r".to_owned()),
            "[ -~]{0,12}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
        #[test]
        fn loading_never_panics(parts in prop::collection::vec(token(), 0..24)) {
            let text: String = parts.concat();
            let files = ServiceFiles { base: Some(SourceFile::new("f.yml", text.clone())), ..ServiceFiles::default() };
            let loaded = load(&files);
            if loaded.service.is_none() {
                prop_assert!(loaded.diagnostics.iter().any(|d| d.is_error()), "invalid without an error: {text:?}");
            }
            for d in &loaded.diagnostics {
                if let Some(at) = &d.location {
                    prop_assert!(at.line >= 1 && at.line <= runway_manifest::yaml_lines(&text).len() + 1, "{d}");
                }
            }
            // The same text as an inventory document.
            let known = ["dev".to_owned()];
            let inventory = runway_manifest::load_inventory(&SourceFile::new("i.yml", text.clone()), &known);
            prop_assert!(inventory.inventory.is_some() == inventory.diagnostics.is_empty(), "{text:?}");
            for d in &inventory.diagnostics {
                if let Some(at) = &d.location {
                    prop_assert!(at.line >= 1 && at.line <= runway_manifest::yaml_lines(&text).len() + 1, "{d}");
                }
            }
        }
    }
}

/// `spec.image` is checked with the reference grammar a deploy pulls with: what validates,
/// deploys, and what a deploy would refuse is refused here, at its line.
#[test]
fn image_references_are_checked_as_a_pull_would() {
    let with_image = |image: &str| {
        let text = format!(
            "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: svc\nspec:\n  \
             image: \"{image}\"\n"
        );
        render(&load(&base("m.yml", &text)).diagnostics)
    };
    for good in [
        "busybox",
        "registry.example.com/team/app:1.2",
        "127.0.0.1:5055/try/web:1",
        "ghcr.io/org/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    ] {
        let shown = with_image(good);
        assert!(!shown.contains("image reference"), "{good}: {shown}");
    }
    for (bad, why) in [
        ("127.0.0.1:5055/try/Web:1", "is not an image reference: "),
        (
            "app@sha256:abc",
            "is not an image reference: invalid reference format",
        ),
        ("app:bad:tag", "is not an image reference: "),
    ] {
        let shown = with_image(bad);
        assert!(shown.contains(why), "{bad}: {shown}");
        assert!(shown.contains("m.yml:6"), "{bad} not located: {shown}");
    }
}

#[test]
fn secrets_may_not_take_names_the_platform_or_the_loader_reads() {
    let text = MINIMAL.replace(
        "secrets: [TOKEN]",
        "secrets: [TOKEN, K_SERVICE, K_EXTRA, PATH, LD_PRELOAD]",
    );
    let loaded = load(&base(".runway/runway.yml", &text));
    let messages: Vec<String> = loaded.diagnostics.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 4, "{messages:#?}");
    for (i, expected) in [
        (1, "is set by the platform"),
        (2, "is set by the platform"),
        (3, "decides which code the instance runs"),
        (4, "decides which code the instance runs"),
    ] {
        let path = format!("spec.workload.secrets[{i}]");
        assert!(
            messages
                .iter()
                .any(|m| m.contains(&path) && m.contains(expected) && m.contains(":12:")),
            "{path}: {messages:#?}"
        );
    }
}

/// `TOKEN` and `TOKEN_` would be one Kubernetes Secret (`svc-token`), and one value would
/// reach both variables: refused, at the second.
#[test]
fn secrets_that_would_share_a_kubernetes_secret_are_refused() {
    let text = MINIMAL.replace("secrets: [TOKEN]", "secrets: [TOKEN, API_KEY, TOKEN_]");
    let loaded = load(&base(".runway/runway.yml", &text));
    let messages: Vec<String> = loaded.diagnostics.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert!(
        messages[0].contains("spec.workload.secrets[2]")
            && messages[0].contains("would share its Kubernetes Secret with `TOKEN`"),
        "{messages:#?}"
    );
}

const SLO: &str = "\
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: svc
spec:
  workload:
    slo:
      availability_target: 0.995
      apdex_target: 0.99
      apdex_threshold_seconds: 0.256
      runbook_url: https://runbooks.example.com/svc
";

#[test]
fn slo_settings_and_their_overrides_reach_the_config() {
    let none = clean_config(&base("m.yml", MINIMAL), None);
    assert_eq!(none.slo, SloConfig::default());
    assert_eq!(
        (
            none.slo.availability_target,
            none.slo.apdex_target,
            none.slo.apdex_threshold_seconds,
            none.slo.runbook_url
        ),
        (0.999, 0.999, 1.024, None),
        "upstream's defaults"
    );

    let mut files = base(".runway/runway.yml", SLO);
    files.overrides.insert(
        "production".into(),
        SourceFile::new(
            ".runway/runway-production.yml",
            "spec:\n  workload:\n    slo:\n      apdex_threshold_seconds: 0.00025\n",
        ),
    );
    let set = SloConfig {
        availability_target: 0.995,
        apdex_target: 0.99,
        apdex_threshold_seconds: 0.256,
        runbook_url: Some("https://runbooks.example.com/svc".into()),
    };
    assert_eq!(clean_config(&files, None).slo, set);
    assert_eq!(
        clean_config(&files, Some("production")).slo,
        SloConfig {
            apdex_threshold_seconds: 0.000_25,
            ..set
        },
        "the override merges field by field"
    );
}

#[test]
fn every_apdex_threshold_is_a_bound_with_a_bound_four_times_it() {
    let bounds: Vec<String> = runway_manifest::latency_bucket_bounds()
        .map(|b| b.to_string())
        .collect();
    // As prometheus_client 0.25 prints the ingress's `le` labels.
    assert_eq!(bounds.first().map(String::as_str), Some("0.00025"));
    assert_eq!(bounds.last().map(String::as_str), Some("131.072"));
    assert_eq!(bounds.len(), 20);
    let thresholds: Vec<String> = runway_manifest::apdex_thresholds()
        .map(|b| b.to_string())
        .collect();
    assert_eq!(thresholds.len(), 18);
    assert_eq!(thresholds.last().map(String::as_str), Some("32.768"));
    for threshold in runway_manifest::apdex_thresholds() {
        let text = SLO.replace("0.256", &threshold.to_string());
        assert_eq!(
            clean_config(&base("m.yml", &text), None)
                .slo
                .apdex_threshold_seconds,
            threshold
        );
    }
}

#[test]
fn bad_slo_settings_name_their_field() {
    let text = SLO
        .replace("0.995", "1")
        .replace("0.99\n", "0\n")
        .replace("0.256", "1.5")
        .replace("https://runbooks.example.com/svc", "runbooks/svc");
    let loaded = load(&base("m.yml", &text));
    assert!(loaded.service.is_none());
    assert_eq!(
        render(&loaded.diagnostics),
        "error: m.yml:8:28: spec.workload.slo.availability_target: found `1` (expected less than 1)\n\
         error: m.yml:9:21: spec.workload.slo.apdex_target: found `0` (expected more than 0)\n\
         error: m.yml:10:32: spec.workload.slo.apdex_threshold_seconds: 1.5 seconds is not a bound \
         of the ingress's latency histogram, so its apdex cannot be measured (expected one of \
         0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, \
         1.024, 2.048, 4.096, 8.192, 16.384, 32.768 (a bound whose 4 times, the tolerating bound, \
         is one too))\n\
         error: m.yml:11:20: spec.workload.slo.runbook_url: `runbooks/svc` is not a web address \
         (expected an `http://` or `https://` URL, e.g. `https://runbooks.example.com/web`)\n"
    );
    // 131.072 is a bound, but 4 times it is not; a negative or infinite threshold is the
    // schema's to refuse.
    for (value, expected) in [
        ("131.072", "131.072 seconds is not a bound"),
        ("-1", "found `-1` (expected more than 0)"),
        (".inf", "which is not a finite number"),
        ("\"1.024\"", "(expected a number)"),
    ] {
        let loaded = load(&base("m.yml", &SLO.replace("0.256", value)));
        let shown = render(&loaded.diagnostics);
        assert!(
            shown.contains("spec.workload.slo.apdex_threshold_seconds") && shown.contains(expected),
            "{value}: {shown}"
        );
    }
    let unknown = load(&base("m.yml", &SLO.replace("apdex_target", "apdex_goal")));
    assert!(
        render(&unknown.diagnostics).contains("unknown field `apdex_goal`"),
        "{}",
        render(&unknown.diagnostics)
    );
}

/// With the external entry point off, the internal one's protocol is the service's (upstream's
/// own example: external off and `rest`, internal `grpc`), and nothing is warned.
#[test]
fn the_internal_protocol_is_the_services_when_the_external_entry_point_is_off() {
    let text = "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: api\nspec:\n  \
                load_balancing:\n    external_load_balancer:\n      enabled: false\n      \
                backend_protocol: rest\n    internal_load_balancer:\n      enabled: true\n      \
                backend_protocol: grpc\n";
    let config = clean_config(&base("runway.yml", text), None);
    assert_eq!(
        config.backend_protocol,
        runway_manifest::BackendProtocol::Grpc
    );
    assert!(!config.external && config.internal);
}

/// `Strategy::names` lists the strategies as a manifest writes them, each one the manifest
/// takes, in the order the type declares them.
#[test]
fn strategy_names_are_the_manifests_values() {
    let names = runway_manifest::Strategy::names();
    assert_eq!(names.first().map(String::as_str), Some("legacy"));
    assert!(
        names.iter().any(|name| name == "runway_blue_green"),
        "{names:?}"
    );
    for name in &names {
        let strategy: runway_manifest::Strategy =
            serde_json::from_value(serde_json::Value::String(name.clone())).unwrap();
        assert_eq!(serde_json::to_value(strategy).unwrap(), name.as_str());
    }
}
