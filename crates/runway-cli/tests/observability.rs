//! `runway render -t observability` as a user runs it: the rule file and the dashboard written
//! for a repository's service, every environment covered, and promtool reading the rules.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `runway <args>` in `dir`, killed after a minute.
fn runway(args: &[&str], dir: &Path) -> Output {
    bounded(
        Command::new(env!("CARGO_BIN_EXE_runway"))
            .args(args)
            .current_dir(dir),
        Duration::from_secs(60),
    )
}

/// Runs `command` to its end, killing it past `limit`.
fn bounded(command: &mut Command, limit: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{command:?} took longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const BASE: &str = "\
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: web
spec:
  image: registry.example.com/web:1
  workload:
    slo:
      availability_target: 0.995
";

/// A repository whose service has objectives of its own, and a production file that tightens
/// the apdex threshold.
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join(".runway")).unwrap();
    fs::write(dir.path().join(".runway/runway.yml"), BASE).unwrap();
    fs::write(
        dir.path().join(".runway/runway-production.yml"),
        "spec:\n  workload:\n    slo:\n      apdex_threshold_seconds: 0.256\n",
    )
    .unwrap();
    dir
}

/// Whether `promtool` is on PATH; under `CI=true` its absence is a failure.
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
    eprintln!("skipping promtool: not installed (scripts/test installs it)");
    false
}

#[test]
fn writes_the_rules_and_the_dashboard_for_every_environment() {
    let dir = repository();
    let o = runway(
        &[
            "render",
            "-t",
            "observability",
            "-o",
            "out",
            "--runbook-base",
            "https://runbooks.example.com/services/",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("wrote out/web.rules.yml")
            && stderr(&o).contains("wrote out/web.dashboard.json"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("runbook"), "{}", stderr(&o));

    let rules = fs::read_to_string(dir.path().join("out/web.rules.yml")).unwrap();
    for needle in [
        "name: \"runway:web\"",
        "name: \"runway:web:production\"",
        // Every environment but production, by the base manifest's objectives...
        r#"{service=\"web\",env!~\"production\"}[5m]"#,
        "(14.4 * (1 - 0.995))",
        r#"le=\"1.024\""#,
        // ...and production by its own.
        r#"{service=\"web\",env=\"production\",le=\"0.256\"}"#,
        "runbook_url: \"https://runbooks.example.com/services/web\"",
        "alert: RunwayErrorBudgetBurn1h",
        "alert: RunwayApdexBudgetBurn3d",
    ] {
        assert!(rules.contains(needle), "no {needle} in\n{rules}");
    }
    let dashboard: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(dir.path().join("out/web.dashboard.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(dashboard["uid"], "runway-web");
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 36);

    // The same files again, byte for byte.
    let again = runway(
        &[
            "render",
            "-t",
            "observability",
            "-o",
            "again",
            "--runbook-base",
            "https://runbooks.example.com/services/",
        ],
        dir.path(),
    );
    assert!(again.status.success(), "{}", stderr(&again));
    for file in ["web.rules.yml", "web.dashboard.json"] {
        assert_eq!(
            fs::read(dir.path().join("out").join(file)).unwrap(),
            fs::read(dir.path().join("again").join(file)).unwrap(),
            "{file}"
        );
    }

    if promtool_installed() {
        let check = bounded(
            Command::new("promtool")
                .args([
                    "check",
                    "rules",
                    "--lint=all",
                    "--lint-fatal",
                    "web.rules.yml",
                ])
                .current_dir(dir.path().join("out")),
            Duration::from_secs(60),
        );
        assert!(
            check.status.success() && stdout(&check).contains("SUCCESS: 68 rules found"),
            "{}{}",
            stdout(&check),
            stderr(&check)
        );
    }
}

#[test]
fn one_environment_to_stdout_and_a_note_without_a_runbook() {
    let dir = repository();
    let o = runway(
        &["render", "-t", "observability", "--env", "production"],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with("# Source: web.rules.yml\n")
            && out.contains("---\n# Source: web.dashboard.json\n{"),
        "{out}"
    );
    assert!(out.contains("name: \"runway:web:production\""), "{out}");
    assert!(!out.contains("name: \"runway:web\"\n"), "{out}");
    assert!(!out.contains("runbook_url"), "{out}");
    assert!(
        stderr(&o).contains(
            "note: the alerts of web link to no runbook: pass --runbook-base or set \
             spec.workload.slo.runbook_url"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn mistakes_are_refused_with_what_to_do() {
    let dir = repository();
    let o = runway(
        &[
            "render",
            "-t",
            "kubernetes",
            "--runbook-base",
            "https://runbooks.example.com",
        ],
        dir.path(),
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--runbook-base is for `-t observability`, not kubernetes"),
        "{}",
        stderr(&o)
    );

    let o = runway(
        &[
            "render",
            "-t",
            "observability",
            "--runbook-base",
            "runbooks/",
        ],
        dir.path(),
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--runbook-base `runbooks/` is not an `http://` or `https://` URL"),
        "{}",
        stderr(&o)
    );

    // A threshold the ingress cannot measure is the manifest's error, located.
    fs::write(
        dir.path().join(".runway/runway-production.yml"),
        "spec:\n  workload:\n    slo:\n      apdex_threshold_seconds: 0.3\n",
    )
    .unwrap();
    let o = runway(&["render", "-t", "observability"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let shown = format!("{}{}", stdout(&o), stderr(&o));
    assert!(
        shown.contains(".runway/runway-production.yml:4:32")
            && shown.contains("spec.workload.slo.apdex_threshold_seconds")
            && shown.contains("0.3 seconds is not a bound of the ingress's latency histogram"),
        "{shown}"
    );

    // A worker has no requests to measure.
    fs::remove_file(dir.path().join(".runway/runway-production.yml")).unwrap();
    fs::write(
        dir.path().join(".runway/runway.yml"),
        BASE.replace("  workload:\n", "  workload:\n    kind: worker\n"),
    )
    .unwrap();
    let o = runway(&["render", "-t", "observability"], dir.path());
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("cannot render .runway/runway.yml to observability")
            && stderr(&o).contains("is a worker"),
        "{}",
        stderr(&o)
    );
}
