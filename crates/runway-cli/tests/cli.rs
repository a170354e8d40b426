//! The `runway` binary as a user runs it: exit codes, messages, files written.

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn runway(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runway"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("runway runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn repo_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn init_then_validate_passes() {
    let dir = tempfile::tempdir().unwrap();
    let o = runway(&["init", "--name", "shop", "--port", "9000"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = fs::read_to_string(dir.path().join(".runway/runway.yml")).unwrap();
    assert!(
        text.contains("name: shop") && text.contains("container_port: 9000"),
        "{text}"
    );

    let o = runway(&["validate"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("0 errors, 0 warnings in 1 service"),
        "{}",
        stdout(&o)
    );

    let again = runway(&["init"], dir.path());
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("already exists; pass --force"),
        "{}",
        stderr(&again)
    );
    assert_eq!(
        fs::read_to_string(dir.path().join(".runway/runway.yml")).unwrap(),
        text,
        "nothing lost"
    );
}

#[test]
fn init_without_a_name_uses_the_directory() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("Billing_API");
    fs::create_dir(&dir).unwrap();
    assert!(runway(&["init"], &dir).status.success());
    let text = fs::read_to_string(dir.join(".runway/runway.yml")).unwrap();
    assert!(text.contains("name: billing-api"), "{text}");
    let bad = runway(&["init", "--force", "--name", "Bad Name"], &dir);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("`Bad Name` contains"),
        "{}",
        stderr(&bad)
    );
}

const FIVE_MISTAKES: &str = "\
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

#[test]
fn five_mistakes_five_located_errors_in_text_and_json() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join(".runway")).unwrap();
    fs::write(dir.path().join(".runway/runway.yml"), FIVE_MISTAKES).unwrap();

    let o = runway(&["validate"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    let text = stdout(&o);
    assert_eq!(
        text.matches("\nerror: ").count() + usize::from(text.starts_with("error: ")),
        5,
        "{text}"
    );
    for at in [
        ".runway/runway.yml:4:9",
        ".runway/runway.yml:6:19",
        ".runway/runway.yml:7:3",
        ".runway/runway.yml:9:20",
        ".runway/runway.yml:13:15",
    ] {
        assert!(text.contains(at), "{at} missing from:\n{text}");
    }
    assert!(text.contains("did you mean `request_timeout`?"), "{text}");
    assert!(
        text.contains("7 |   request_timout: 60\n  |   ^"),
        "the line is shown with a caret:\n{text}"
    );

    let o = runway(&["validate", "--output", "json"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["valid"], false);
    assert_eq!(report["errors"], 5);
    let first = &report["diagnostics"][0];
    assert_eq!(first["file"], ".runway/runway.yml");
    assert_eq!(first["line"], 4);
    assert_eq!(first["column"], 9);
    assert_eq!(first["path"], "metadata.name");
    assert_eq!(report["diagnostics"][2]["suggestion"], "request_timeout");
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let o = runway(&["validate"], dir.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no .runway directory"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        runway(&["validate", "--bogus"], dir.path()).status.code(),
        Some(2)
    );
    assert_eq!(
        runway(&["render"], dir.path()).status.code(),
        Some(2),
        "--target is required"
    );
}

#[test]
fn several_services_and_environments_are_found() {
    let dir = tempfile::tempdir().unwrap();
    let runway_dir = dir.path().join(".runway");
    fs::create_dir_all(runway_dir.join("worker")).unwrap();
    fs::write(
        runway_dir.join("runway.yml"),
        "kind: RunwayService\nmetadata: {name: web}\nspec: {image: web:1}\n",
    )
    .unwrap();
    fs::write(
        runway_dir.join("runway-staging.yml"),
        "spec: {scalability: {max_instances: 2}}\n",
    )
    .unwrap();
    fs::write(runway_dir.join("env-staging.yml"), "LOG: debug\n").unwrap();
    fs::write(runway_dir.join("env-production.yml"), "LOG: info\n").unwrap();
    fs::write(
        runway_dir.join("worker/runway.yml"),
        "kind: RunwayService\nmetadata: {name: jobs}\nspec:\n  workload: {kind: worker, process: {command: [./jobs]}}\n",
    )
    .unwrap();
    fs::write(
        runway_dir.join("worker/runway-production.yaml"),
        "spec: {}\n",
    )
    .unwrap();

    let o = runway(&["validate", "--output", "json"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<_> = report["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web", "jobs"]);
    assert_eq!(
        report["services"][0]["environments"],
        serde_json::json!(["production", "staging"])
    );
    assert_eq!(
        report["warnings"], 1,
        "the .yaml file is pointed out: {report}"
    );

    let o = runway(
        &["render", "-t", "kubernetes", "-s", "web", "-e", "staging"],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("maxReplicas: 2"), "{}", stdout(&o));
    let o = runway(&["render", "-t", "kubernetes", "-s", "nope"], dir.path());
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn the_example_renders_to_all_three_targets() {
    let out = tempfile::tempdir().unwrap();
    let example = repo_root().join("examples/hello");
    for target in ["kubernetes", "knative", "helm"] {
        let dir = out.path().join(target);
        let o = runway(
            &[
                "render",
                "-t",
                target,
                "-e",
                "production",
                "-o",
                dir.to_str().unwrap(),
                example.to_str().unwrap(),
            ],
            repo_root(),
        );
        assert!(o.status.success(), "{target}: {}", stderr(&o));
        assert!(dir.join("hello").is_dir(), "{target}: nothing written");
    }
    assert!(out.path().join("helm/hello/Chart.yaml").is_file());
    assert!(
        out.path()
            .join("kubernetes/hello/deployment.yaml")
            .is_file()
    );
}

#[test]
fn invalid_manifests_are_not_rendered() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join(".runway")).unwrap();
    fs::write(dir.path().join(".runway/runway.yml"), FIVE_MISTAKES).unwrap();
    let o = runway(&["render", "-t", "kubernetes"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).is_empty());
    assert!(stderr(&o).contains("runway validate"), "{}", stderr(&o));
}

#[test]
fn schema_command_prints_the_checked_in_schema() {
    let o = runway(&["schema"], repo_root());
    assert!(o.status.success());
    assert_eq!(
        stdout(&o),
        fs::read_to_string(repo_root().join("schemas/runway-v1.json")).unwrap()
    );
}
