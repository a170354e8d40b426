//! The manifest crate through its public API: upstream files, overrides, environment files, and
//! located errors.

use std::collections::BTreeMap;

use runway_manifest::{Diagnostic, ServiceFiles, SourceFile, load};

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
    assert_eq!(loaded.diagnostics, vec![]);
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
        }
    }
}
