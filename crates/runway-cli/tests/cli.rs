//! The `runway` binary as a user runs it: exit codes, messages, files written.

#![allow(clippy::unwrap_used, reason = "tests")]

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

/// Upstream's fields that a runtime accepts but does not do (docs/upstream-fields.md): each
/// is a warning at its field, and the manifest stays valid.
const UNSUPPORTED_UPSTREAM_FIELDS: &str = "\
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: gateway
spec:
  image: registry.example.com/gateway:1.0
  regions: [us-east1, europe-west1]
  resources:
    startup_cpu_boost: true
  vpc_access:
    enabled: true
    egress: ALL_TRAFFIC
  execution_environment: EXECUTION_ENVIRONMENT_GEN1
";

/// The warnings of [`UNSUPPORTED_UPSTREAM_FIELDS`]: where each points, and the field.
const UNSUPPORTED_AT: [(&str, &str); 4] = [
    (".runway/runway.yml:7:23", "spec.regions[1]"),
    (
        ".runway/runway.yml:9:24",
        "spec.resources.startup_cpu_boost",
    ),
    (".runway/runway.yml:12:13", "spec.vpc_access.egress"),
    (".runway/runway.yml:13:26", "spec.execution_environment"),
];

#[test]
fn upstream_fields_a_runtime_does_not_do_are_warned_where_they_are_written() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join(".runway")).unwrap();
    fs::write(
        dir.path().join(".runway/runway.yml"),
        UNSUPPORTED_UPSTREAM_FIELDS,
    )
    .unwrap();

    let o = runway(&["validate"], dir.path());
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "warnings pass:\n{text}");
    for (at, field) in UNSUPPORTED_AT {
        assert!(
            text.contains(&format!("  --> {at} at {field}\n")),
            "{at} {field} missing from:\n{text}"
        );
    }
    assert!(
        text.contains(
            "warning: the platform runs the service once, not once per region: \
             `europe-west1` gets no instances of its own (expected one region)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("7 |   regions: [us-east1, europe-west1]\n  |                       ^"),
        "the line is shown with a caret under the second region:\n{text}"
    );
    assert!(
        text.contains("but their internet traffic leaves through the host's NAT"),
        "{text}"
    );
    assert!(text.contains("0 errors, 4 warnings in 1 service"), "{text}");

    let o = runway(&["validate", "--output", "json"], dir.path());
    assert_eq!(o.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (&report["valid"], &report["warnings"]),
        (&true.into(), &4.into())
    );
    let found: Vec<(String, String)> = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            assert_eq!(d["severity"], "warning", "{d}");
            let at = format!(
                "{}:{}:{}",
                d["file"].as_str().unwrap(),
                d["line"],
                d["column"]
            );
            (at, d["path"].as_str().unwrap().to_owned())
        })
        .collect();
    let expected: Vec<(String, String)> = UNSUPPORTED_AT
        .iter()
        .map(|(at, field)| (at.to_string(), field.to_string()))
        .collect();
    assert_eq!(found, expected);
}

#[test]
fn deploy_shows_the_warnings_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join(".runway")).unwrap();
    fs::write(
        dir.path().join(".runway/runway.yml"),
        UNSUPPORTED_UPSTREAM_FIELDS,
    )
    .unwrap();
    // No server to deploy to: the deploy gets past the manifest's check and stops at the login.
    let o = Command::new(env!("CARGO_BIN_EXE_runway"))
        .args(["deploy", "--env", "production", "."])
        .current_dir(dir.path())
        .env("RUNWAY_CONFIG", dir.path().join("no-config.json"))
        .env_remove("RUNWAY_SERVER")
        .env_remove("RUNWAY_TOKEN")
        .env_remove("RUNWAY_CA")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = stderr(&o);
    for (at, field) in UNSUPPORTED_AT {
        assert!(
            err.contains(&format!("  --> {at} at {field}\n")),
            "{at} {field} missing from:\n{err}"
        );
    }
    assert!(!err.contains("the manifest is invalid"), "{err}");
    assert!(
        err.contains("not logged in"),
        "went on to the server:\n{err}"
    );
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

    // The GitLab release and the stage label the objects; a value no label takes, or another
    // target, is refused.
    let o = runway(
        &[
            "render",
            "-t",
            "kubernetes",
            "-s",
            "web",
            "-e",
            "staging",
            "--gitlab-release",
            "17.6",
            "--stage",
            "canary",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("runway.dev/gitlab-release: \"17.6\""),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains("runway.dev/stage: canary"),
        "{}",
        stdout(&o)
    );
    let o = runway(
        &["render", "-t", "helm", "--stage", "not a label"],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("is not a label value"),
        "{}",
        stderr(&o)
    );
    let o = runway(
        &["render", "-t", "knative", "--stage", "canary"],
        dir.path(),
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("for `-t kubernetes`, `-t helm` and `-t flux`"),
        "{}",
        stderr(&o)
    );
}

/// A directory with one service, `web`, for the render tests below.
fn one_service() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join(".runway")).unwrap();
    fs::write(
        dir.path().join(".runway/runway.yml"),
        "kind: RunwayService\nmetadata: {name: web}\nspec: {image: web:1}\n",
    )
    .unwrap();
    dir
}

#[test]
fn render_flux_writes_the_objects_that_install_the_pushed_chart() {
    let dir = one_service();
    let o = runway(
        &[
            "render",
            "-t",
            "flux",
            "--chart-repository",
            "oci://registry.example.com/charts/",
            "--chart-version",
            "1.4.0",
            "--stage",
            "canary",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for line in [
        "# Source: web/ocirepository.yaml",
        "# Source: web/helmrelease.yaml",
        "url: \"oci://registry.example.com/charts/web\"",
        "tag: \"1.4.0\"",
        "runway.dev/stage: canary",
    ] {
        assert!(out.contains(line), "no {line} in\n{out}");
    }
    let o = runway(
        &["render", "-t", "helm", "--chart-version", "1.4.0"],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("version: \"1.4.0\"\n"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn render_flux_needs_an_oci_chart_repository() {
    let dir = one_service();
    let o = runway(&["render", "-t", "flux"], dir.path());
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("`-t flux` needs --chart-repository oci://HOST[:PORT]/PATH"),
        "{}",
        stderr(&o)
    );
    let o = runway(
        &[
            "render",
            "-t",
            "flux",
            "--chart-repository",
            "registry.example.com/charts",
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("for '--chart-repository <URL>'")
            && stderr(&o).contains("expected oci://HOST[:PORT]/PATH"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn render_refuses_chart_flags_for_other_targets() {
    let dir = one_service();
    for (args, said) in [
        (
            [
                "-t",
                "helm",
                "--chart-repository",
                "oci://registry.example.com/charts",
            ],
            "--chart-repository and --chart-repository-insecure are for `-t flux`, not helm",
        ),
        (
            ["-t", "kubernetes", "--chart-version", "1.4.0"],
            "--chart-version is for `-t helm` and `-t flux`, not kubernetes",
        ),
    ] {
        let o = runway(&[&["render"], &args[..]].concat(), dir.path());
        assert!(!o.status.success(), "{args:?}");
        assert!(stderr(&o).contains(said), "{args:?}: {}", stderr(&o));
    }
    let o = runway(
        &["render", "-t", "kubernetes", "--chart-repository-insecure"],
        dir.path(),
    );
    assert!(!o.status.success());
}

#[test]
fn render_refuses_a_chart_version_that_is_not_semver_2() {
    let dir = one_service();
    for bad in ["1.4", "v1.4.0", "latest"] {
        let o = runway(
            &["render", "-t", "helm", "--chart-version", bad],
            dir.path(),
        );
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(
            stderr(&o).contains("for '--chart-version <VERSION>'")
                && stderr(&o).contains("is not a SemVer 2 version: expected MAJOR.MINOR.PATCH"),
            "{bad}: {}",
            stderr(&o)
        );
    }
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

/// `runway cells token`: GitLab's fixture decoded for people and for scripts, a token that
/// does not decode is exit 1 with why, and `encode` writes a token that decodes to its
/// claims (a blank one left out), refusing claims a router cannot place.
#[test]
fn cells_token_decode_and_encode() {
    let dir = tempfile::tempdir().unwrap();
    let gitlab = "glrtr-W5m1cHR6skC98Bx7XkuYjmM6MQpnOjgKbzpyegp0OjIQ.01.181uebm4k";
    let o = runway(&["cells", "token", "decode", gitlab], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("o  organization  1007"),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains("t  runner type   2 (group)"),
        "{}",
        stdout(&o)
    );
    let o = runway(
        &["cells", "token", "decode", "--output", "json", gitlab],
        dir.path(),
    );
    assert_eq!(stdout(&o), "{\"c\":1,\"g\":8,\"o\":1007,\"t\":2}\n");

    let typo = gitlab.replace("W5m1", "W5m2");
    let o = runway(
        &["cells", "token", "decode", "--output", "json", &typo],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("checksum does not match"),
        "{}",
        stderr(&o)
    );
    assert!(
        !stderr(&o).contains("W5m2"),
        "the token was echoed: {}",
        stderr(&o)
    );
    let error: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(error["error"]["code"], "invalid_token");

    let hex = "5b99b570747ab240bdf01c7b5e4b988e";
    let o = runway(
        &[
            "cells",
            "token",
            "encode",
            "--prefix",
            "glrtr-",
            "--claim",
            "c=1",
            "--claim",
            "g=8",
            "--claim",
            "o=1007",
            "--claim",
            "t=2",
            "--claim",
            "p=",
            "--random-hex",
            hex,
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("{gitlab}\n"));

    let o = runway(&["cells", "token", "encode", "--claim", "g=8"], dir.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("c or o"), "{}", stderr(&o));
    let o = runway(
        &[
            "cells", "token", "encode", "--claim", "x=1", "--claim", "c=1",
        ],
        dir.path(),
    );
    assert!(
        stderr(&o).contains("`x` is not a routing claim"),
        "{}",
        stderr(&o)
    );
    let o = runway(&["cells", "token", "encode", "--claim", "c=-1"], dir.path());
    assert!(stderr(&o).contains("--claim c=-1"), "{}", stderr(&o));
    // Random bytes from the system: two tokens differ, both decode to the claims.
    let tokens: Vec<String> = (0..2)
        .map(|_| {
            let o = runway(
                &[
                    "cells", "token", "encode", "--prefix", "glrt-", "--claim", "c=3",
                ],
                dir.path(),
            );
            stdout(&o).trim().to_owned()
        })
        .collect();
    assert_ne!(tokens[0], tokens[1]);
    for token in &tokens {
        let o = runway(
            &["cells", "token", "decode", "--output", "json", token],
            dir.path(),
        );
        assert_eq!(stdout(&o), "{\"c\":3}\n");
    }
}

/// `runway cells token decode` as GitLab's decoder reads its fixtures: a payload with no
/// claim is not a routable token (exit 1, saying so), and a claim of any size GitLab's
/// generator writes (`o:` and 157 base-36 digits) decodes, in decimal, and encodes back.
#[test]
fn cells_token_decode_refuses_no_claims_and_reads_a_claim_of_any_size() {
    let dir = tempfile::tempdir().unwrap();
    // GitLab's spec: "when token payload is empty hash", `nil`.
    let empty = "glrtr-8CLoDbhWwqW3qiRbgpHYEwA.01.0n00i4flb";
    for output in ["text", "json"] {
        let o = runway(
            &["cells", "token", "decode", "--output", output, empty],
            dir.path(),
        );
        assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
        assert!(
            stderr(&o).contains("the token does not decode: the token's payload holds no claims"),
            "{}",
            stderr(&o)
        );
        if output == "json" {
            let error: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
            assert_eq!(error["error"]["code"], "invalid_token");
        } else {
            assert_eq!(stdout(&o), "");
        }
    }

    // GitLab's generator, `o: <157 base-36 digits>`, random bytes `'a' * 16`.
    let big = "glrt-YWFhYWFhYWFhYWFhYWFhYW86MTdpZThjeHg3eTM0dWNkZHJzNDlqdjZmemJ6NXQ1OWxudWZudzhsOXUwbjM1NXJ0MG15aWhia2tjdTIyMXAyMmtjcGY3M2J4bzhlbDJ5aGFvdG1pZjQ2bHB0cG0wODhnZnU3YTRhY2d4Zmc2dHBqOXhxa3prcjdjMDNnYTY1NTJwbGwzcGVqaHMyOXN4ZHhobWp1cjBvOHZvbTh0dZ8.01.6j1hv4h3j";
    let decimal = "733645909367111002931655980417849705729594930460613725976795762650674739400237860114782249613696983067203973551342915299545565455740603651498640016094152521164906946060931085319499191699616751698034424468894855650509470214198445890857893317170";
    let o = runway(&["cells", "token", "decode", big], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("o  organization  {decimal}\n"));
    let o = runway(
        &["cells", "token", "decode", "--output", "json", big],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("{{\"o\":\"{decimal}\"}}\n"));
    let o = runway(
        &[
            "cells",
            "token",
            "encode",
            "--prefix",
            "glrt-",
            "--claim",
            &format!("o={decimal}"),
            "--random-hex",
            &"61".repeat(16),
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("{big}\n"));
}

/// `runway cells route` explains a decision with GitLab's rules: a runner token to its cell,
/// an unknown cell to the legacy one (saying so), a rule file's mistake with its line.
#[test]
fn cells_route_explains_without_sending() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = repo_root().join("crates/runway-cells/tests/fixtures");
    let rules = fixtures.join("rules.json");
    let topology = fixtures.join("topology.yml");
    let (rules, topology) = (rules.to_str().unwrap(), topology.to_str().unwrap());
    let token = |cell: &str| {
        let o = runway(
            &[
                "cells",
                "token",
                "encode",
                "--prefix",
                "glrt-",
                "--claim",
                &format!("c={cell}"),
            ],
            dir.path(),
        );
        stdout(&o).trim().to_owned()
    };
    let route = |header: String| {
        let o = runway(
            &[
                "cells",
                "route",
                "--rules",
                rules,
                "--topology",
                topology,
                "-H",
                &header,
                "--path",
                "/api/v4/jobs/request",
                "--output",
                "json",
            ],
            dir.path(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str::<serde_json::Value>(&stdout(&o)).unwrap()
    };
    let routed = route(format!("RUNNER-TOKEN: {}", token("2")));
    assert_eq!(routed["rule"], "session_token_header_runner_token");
    assert_eq!(routed["classify"]["type"], "CELL_ID");
    assert_eq!(routed["claims"]["c"], 2);
    assert_eq!(routed["cell"]["id"], 2);
    assert_eq!(routed["fell_back"], serde_json::Value::Null);

    let unknown = route(format!("RUNNER-TOKEN: {}", token("8")));
    assert_eq!(unknown["cell"]["id"], 1);
    assert_eq!(unknown["fell_back"], "no cell CELL_ID `8`");

    let o = runway(
        &[
            "cells",
            "route",
            "--rules",
            rules,
            "--topology",
            topology,
            "-H",
            "Cookie: force-cell=cell-3",
        ],
        dir.path(),
    );
    let text = stdout(&o);
    assert!(
        text.contains("passed    session_cookie: no such cookie"),
        "{text}"
    );
    assert!(text.contains("rule      force_cell_cookie"), "{text}");
    assert!(text.contains("cell      3 at 127.0.0.1:9003"), "{text}");

    let bad = dir.path().join("rules.json");
    fs::write(
        &bad,
        "[\n  {\"id\": \"a\", \"action\": \"proxy\",\n   \"matc\": {}}\n]\n",
    )
    .unwrap();
    let o = runway(
        &[
            "cells",
            "route",
            "--rules",
            bad.to_str().unwrap(),
            "--topology",
            topology,
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("rules.json:3:"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("unknown field `matc`"),
        "{}",
        stderr(&o)
    );
}

// ---- the GitLab CI component ------------------------------------------------------------

/// The component's two documents: its `spec` header, and its jobs with `inputs` put in as
/// GitLab interpolates them (after checking each against its declared rules, as GitLab
/// does: a value that breaks one fails the pipeline's creation).
struct Component {
    inputs: serde_json::Map<String, serde_json::Value>,
    body: String,
}

impl Component {
    fn load() -> Component {
        let text = fs::read_to_string(repo_root().join("templates/runway.yml")).unwrap();
        let (header, body) = text.split_once("\n---\n").expect("a spec header, then ---");
        let header = runway_manifest::parse(&runway_manifest::SourceFile::new("spec", header))
            .unwrap()
            .value;
        let keys: Vec<&String> = header.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["spec"], "the header holds the spec alone");
        Component {
            inputs: header["spec"]["inputs"].as_object().unwrap().clone(),
            body: body.to_owned(),
        }
    }

    /// The value of each input given `given`, or why GitLab would refuse them.
    fn resolve(&self, given: &serde_json::Value) -> Result<Vec<(String, String)>, String> {
        for name in given.as_object().unwrap().keys() {
            if !self.inputs.contains_key(name) {
                return Err(format!("unknown input {name}"));
            }
        }
        let mut values = Vec::new();
        for (name, rules) in &self.inputs {
            let value = match (given.get(name), rules.get("default")) {
                (Some(value), _) | (None, Some(value)) => value.clone(),
                (None, None) => return Err(format!("input {name} is required")),
            };
            let text = match (rules["type"].as_str().unwrap_or("string"), &value) {
                ("boolean", serde_json::Value::Bool(b)) => b.to_string(),
                ("string", serde_json::Value::String(s)) => s.clone(),
                (kind, other) => return Err(format!("input {name}: {other} is not a {kind}")),
            };
            if let Some(options) = rules.get("options").and_then(|o| o.as_array())
                && !options.contains(&value)
            {
                return Err(format!("input {name}: {text:?} is not one of the options"));
            }
            if let Some(pattern) = rules["regex"].as_str()
                && !regex::Regex::new(pattern).unwrap().is_match(&text)
            {
                return Err(format!("input {name}: {text:?} does not match {pattern}"));
            }
            values.push((name.clone(), text));
        }
        Ok(values)
    }

    /// The jobs, for `given` inputs.
    fn jobs(&self, given: &serde_json::Value) -> serde_json::Value {
        let mut body = self.body.clone();
        for (name, value) in self.resolve(given).unwrap() {
            body = body.replace(&format!("$[[ inputs.{name} ]]"), &value);
        }
        assert!(
            !body.contains("$[["),
            "an input left uninterpolated:\n{body}"
        );
        runway_manifest::parse(&runway_manifest::SourceFile::new("jobs", body.as_str()))
            .unwrap()
            .value
    }
}

/// The component's `strategy` input offers every strategy the manifest knows, and only those
/// (GitLab needs the list in the file; this keeps it the manifest's).
#[test]
fn the_ci_components_strategies_are_the_manifests() {
    let component = Component::load();
    let options: Vec<&str> = component.inputs["strategy"]["options"]
        .as_array()
        .expect("the strategy input's options")
        .iter()
        .map(|option| option.as_str().unwrap())
        .collect();
    let names = runway_manifest::Strategy::names();
    assert!(names.len() >= 6, "{names:?}");
    let expected: Vec<&str> = std::iter::once("")
        .chain(names.iter().map(String::as_str))
        .collect();
    assert_eq!(options, expected);
}

#[test]
fn the_ci_component_lints_against_its_input_rules() {
    let component = Component::load();
    // Every input declared is used, and every one used is declared.
    let used: std::collections::BTreeSet<String> =
        regex::Regex::new(r"\$\[\[ inputs\.([a-z_]+) \]\]")
            .unwrap()
            .captures_iter(&component.body)
            .map(|c| c[1].to_owned())
            .collect();
    let declared: std::collections::BTreeSet<String> = component.inputs.keys().cloned().collect();
    assert_eq!(used, declared);
    for (name, rules) in &component.inputs {
        let keys = rules.as_object().unwrap().keys();
        for key in keys {
            assert!(
                ["description", "default", "regex", "options", "type"].contains(&key.as_str()),
                "input {name}: {key} is not an input rule"
            );
        }
    }

    let minimal = serde_json::json!({"service": "app", "server": "https://runway.example.com"});
    let jobs = component.jobs(&minimal);
    let deploy = &jobs["runway-deploy-staging"];
    assert_eq!(deploy["id_tokens"]["RUNWAY_ID_TOKEN"]["aud"], "runway");
    assert_eq!(deploy["environment"]["name"], "staging");
    assert_eq!(deploy["environment"]["url"], "$RUNWAY_URL");
    assert_eq!(
        deploy["needs"][0],
        serde_json::json!({"job": "runway-validate-staging", "optional": true})
    );
    assert_eq!(deploy["extends"], ".runway-staging");
    assert_eq!(
        jobs["runway-validate-staging"]["extends"],
        ".runway-staging"
    );
    let variables = &jobs[".runway-staging"]["variables"];
    assert_eq!(variables["RUNWAY_AUTO_DEPLOY"], "false");
    // Production waits for a person unless auto_deploy; a merge request's pipeline never
    // deploys.
    let rules = deploy["rules"].as_array().unwrap();
    assert_eq!(
        rules[0],
        serde_json::json!({"if": "$CI_PIPELINE_SOURCE == \"merge_request_event\"", "when": "never"})
    );
    // Only protected refs deploy.
    assert_eq!(
        rules[1],
        serde_json::json!({"if": "$CI_COMMIT_REF_PROTECTED != \"true\"", "when": "never"})
    );
    assert_eq!(rules[2]["when"], "manual");
    assert!(
        rules[2]["if"]
            .as_str()
            .unwrap()
            .contains("== \"production\"")
    );

    // It pins the Runway it runs: this build's version.
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(variables["RUNWAY_COMPONENT_VERSION"], version);
    // The released `runway-cli` image of that version, where scripts/release pushes it by
    // default (tests/release.rs runs the component's check in it).
    assert_eq!(
        component.inputs["runway_image"]["default"],
        format!("registry.gitlab.com/runway/runway-cli:{version}"),
        "the default image is Runway {version}'s runway-cli"
    );

    // What GitLab would refuse when the pipeline is created.
    for (given, why) in [
        (
            serde_json::json!({"server": "https://r.example.com"}),
            "input service is required",
        ),
        (
            serde_json::json!({"service": "Hello_World", "server": "https://r.example.com"}),
            "input service",
        ),
        (
            serde_json::json!({"service": "app", "server": "ftp://r.example.com"}),
            "input server",
        ),
        (
            serde_json::json!({"service": "app", "server": "https://r.example.com", "environment": "prod uction"}),
            "input environment",
        ),
        (
            serde_json::json!({"service": "app", "server": "https://r.example.com", "strategy": "yolo"}),
            "not one of the options",
        ),
        (
            serde_json::json!({"service": "app", "server": "https://r.example.com", "timeout": "ten minutes"}),
            "input timeout",
        ),
        (
            serde_json::json!({"service": "app", "server": "https://r.example.com", "wait": "yes"}),
            "not a boolean",
        ),
        (
            serde_json::json!({"service": "app", "server": "https://r.example.com", "region": "eu"}),
            "unknown input region",
        ),
    ] {
        let refused = component.resolve(&given).unwrap_err();
        assert!(refused.contains(why), "{given}: {refused}");
    }
    let every = serde_json::json!({"service": "app", "server": "https://runway.example.com",
        "environment": "production", "audience": "https://runway.example.com", "ca": "$RUNWAY_CA",
        "image": "$CI_REGISTRY_IMAGE:$CI_COMMIT_SHA", "strategy": "runway_canary", "wait": false,
        "timeout": "1h", "auto_deploy": true});
    let jobs = component.jobs(&every);
    let variables = &jobs[".runway-production"]["variables"];
    assert_eq!(variables["RUNWAY_DEPLOY_STRATEGY"], "runway_canary");
    assert_eq!(variables["RUNWAY_AUTO_DEPLOY"], "true");
    assert_eq!(
        jobs["runway-deploy-production"]["id_tokens"]["RUNWAY_ID_TOKEN"]["aud"],
        "https://runway.example.com"
    );
}

#[test]
fn deploy_strategy_flag_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let out = runway(&["deploy", "--strategy", "yolo", "."], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("\"yolo\" is not a strategy: expected legacy"),
        "{}",
        stderr(&out)
    );
}

// ---- log lines ---------------------------------------------------------------------------

/// `runway ingress` for about a second with `args`, `RUST_LOG` set to `filter`; its stderr.
fn ingress_log(args: &[&str], filter: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("routes.json"), "{\"routes\": []}").unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_runway"))
        .args([
            "ingress",
            "--routes",
            "routes.json",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--admin", "127.0.0.1:0"])
        .args(args)
        .env("RUST_LOG", filter)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    );
    let out = child.wait_with_output().unwrap();
    (out.status.code(), stderr(&out))
}

#[test]
fn log_lines_are_text_or_json_and_filtered_as_rust_log_says() {
    let (code, json) = ingress_log(&["--log-format", "json"], "info");
    assert_eq!(code, Some(0), "{json}");
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let started = lines
        .iter()
        .find(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("serving 0 route(s)"))
        })
        .unwrap_or_else(|| panic!("{json}"));
    assert_eq!(started["level"], "INFO");
    assert_eq!(started["target"], "runway_ingress::daemon");
    assert!(started["timestamp"].as_str().unwrap().ends_with('Z'));
    let bounded = lines
        .iter()
        .find(|l| l["fields"]["message"] == "client connections bounded")
        .unwrap();
    assert!(
        bounded["fields"]["max_connections"].as_u64().is_some(),
        "{bounded}"
    );

    let (_, text) = ingress_log(&[], "info");
    assert!(
        text.lines().any(|l| l
            .contains(" INFO runway_ingress::daemon: client connections bounded max_connections=")),
        "{text}"
    );
    let (_, quiet) = ingress_log(&[], "warn");
    assert!(!quiet.contains("INFO"), "{quiet}");

    let (code, bad) = ingress_log(&["--log-format", "xml"], "info");
    assert_eq!(code, Some(2), "{bad}");
    assert!(bad.contains("expected text or json"), "{bad}");
    // A filter that does not parse stops nothing: it is told, and `info` used.
    let (code, bad_filter) = ingress_log(&[], "runway=loud");
    assert_eq!(code, Some(0), "{bad_filter}");
    assert!(
        bad_filter.contains("RUST_LOG=\"runway=loud\" is not a log filter"),
        "{bad_filter}"
    );
    assert!(
        bad_filter.contains("client connections bounded"),
        "{bad_filter}"
    );
}
