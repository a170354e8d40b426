//! The web console in a real browser: a real `runway server` (`support::Platform`) with a
//! deployed service, and `tests/console/console.mjs` driving Debian's headless Chromium
//! through `playwright-core` against it (sign in, the services, a deploy followed live, a
//! rollback from the page, a canary watched under load and aborted from the page, a custom
//! domain added and removed through its page with bad names refused at the field, a preview
//! listed under its service and stopped from the page, a deploy token's view, a cross-site
//! POST refused, sign out). The server has no `domains.acme`: a
//! domain added stays pending, saying why.
//! The script asks for the deploy (`deploy-now` on its stdout) so that it happens while the
//! page is open; this test runs it with the CLI and says `deployed` on the script's stdin.
//! Likewise `canary-now`: clients start calling the service through the ingress and a canary
//! (two instances logging every request, every 10th answered with a 500, an analysis that
//! needs more requests than it will get) is deployed without waiting, then `canary-started`;
//! `load-stop` stops the clients, then `load-stopped`.
//!
//! Skipped, saying why, without node, Chromium or playwright-core (`scripts/test` installs
//! them into `target/tools`); under `CI=true` their absence fails. The script runs in a
//! process group of its own, killed whole (its browser too) when it overruns its bound or
//! the test fails.

#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;
use support::{Load, Platform, Settings, have_python, set_env_file, set_manifest};

/// The whole browser run, at most.
const BOUND: Duration = Duration::from_secs(340);

/// The service's host at the ingress.
const HOST: &str = "hello.dev.localhost";

/// The canary's steps and analysis: 20 % of the traffic, a step of 10 minutes and an analysis
/// that needs 100000 requests, so it holds (inconclusive) until the page aborts it.
const CANARY: &str = "      steps: [20, 100]\n      pause_seconds: 600\n      analysis:\n        \
                      min_requests: 100000\n        max_error_percent: 2.5\n";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where `scripts/test` installs playwright-core, and screenshots go.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace().join("target"), PathBuf::from)
}

fn node_path() -> std::ffi::OsString {
    let mut paths = vec![workspace().join("target/tools/node_modules")];
    paths.extend(std::env::var_os("NODE_PATH").map(PathBuf::from));
    std::env::join_paths(paths).unwrap()
}

fn chromium() -> PathBuf {
    std::env::var_os("RUNWAY_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// Node, Chromium and playwright-core are there; otherwise prints why the test skips (a
/// failure under CI=true).
fn have_browser() -> bool {
    let runs = |command: &mut Command| {
        command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let reason = if !runs(Command::new("node").arg("--version")) {
        "node is not installed (Debian's nodejs)"
    } else if !runs(Command::new(chromium()).arg("--version")) {
        "chromium is not installed (Debian's chromium)"
    } else if !runs(
        Command::new("node")
            .args(["-e", "require('playwright-core')"])
            .env("NODE_PATH", node_path()),
    ) {
        "playwright-core is not installed (scripts/test puts it in target/tools/node_modules)"
    } else {
        return true;
    };
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
    eprintln!("skipped: {reason}");
    false
}

/// The script's process group, killed whole when dropped.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let pid = self.0.id();
        let _ = Command::new("kill")
            .args(["-9", "--", &format!("-{pid}")])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.wait();
    }
}

#[test]
fn the_console_in_chromium() {
    if !have_python() || !have_browser() {
        return;
    }
    let platform = Platform::start(&Settings {
        api: "  environments: [dev, staging, preview]\n".to_owned(),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev", "staging", "preview"], "s3cret-console");
    set_env_file(&repo, "dev", &[("GREETING", "first")]);
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "first deploy: {}", first.all());
    // A merge request's preview, which the page lists under hello and stops.
    let preview = platform.runway_with(
        &["deploy", "--env", "dev", "--preview", "mr-5"],
        Some(repo.as_os_str()),
        None,
        Duration::from_secs(60),
    );
    assert!(preview.ok(), "preview: {}", preview.all());
    platform.onboard("other", &["dev"], "s3cret-other");
    let (status, created) = platform.call(
        Method::POST,
        "/v1/tokens",
        Some(&platform.token),
        Some(json!({"name": "ci for other",
            "scope": {"deploy": {"service": "other", "environments": ["dev"]}}})),
    );
    assert_eq!(status, 201, "{created}");
    let deploy_token = created["token"].as_str().unwrap().to_owned();
    let role_token = |role: &str| {
        let (status, created) = platform.call(
            Method::POST,
            "/v1/tokens",
            Some(&platform.token),
            Some(json!({"name": format!("{role} of hello"),
                "scope": {"role": {"role": role, "service": "hello"}}})),
        );
        assert_eq!(status, 201, "{created}");
        created["token"].as_str().unwrap().to_owned()
    };
    let (viewer_token, maintainer_token) = (role_token("viewer"), role_token("maintainer"));

    let shots = target_dir().join("console-screenshots");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console/console.mjs");
    let mut command = Command::new("node");
    command
        .arg(&script)
        .env("NODE_PATH", node_path())
        .env("RUNWAY_API", platform.api())
        .env("RUNWAY_ADMIN_TOKEN", &platform.token)
        .env("RUNWAY_DEPLOY_TOKEN", &deploy_token)
        .env("RUNWAY_VIEWER_TOKEN", &viewer_token)
        .env("RUNWAY_MAINTAINER_TOKEN", &maintainer_token)
        .env("RUNWAY_SCREENSHOTS", &shots)
        .env("RUNWAY_CHROMIUM", chromium())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut group = Group(command.spawn().unwrap());
    let mut stdin = group.0.stdin.take().unwrap();
    let (lines, from_script) = mpsc::channel::<String>();
    let stdout = BufReader::new(group.0.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = group.0.stderr.take().unwrap();
    let errors = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());

    let started = Instant::now();
    let mut output = String::new();
    let mut deployed = false;
    let mut canary = false;
    let mut load: Option<Load> = None;
    loop {
        match from_script.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                println!("{line}");
                output.push_str(&line);
                output.push('\n');
                if line == "deploy-now" {
                    // A new revision while the page is open.
                    set_env_file(&repo, "dev", &[("GREETING", "second")]);
                    let second = platform.deploy(&repo, "dev");
                    assert!(second.ok(), "second deploy: {}\n{output}", second.all());
                    deployed = true;
                    let _ = stdin.write_all(b"deployed\n");
                    let _ = stdin.flush();
                }
                if line == "canary-now" {
                    // Clients calling, then a canary that takes a share of them.
                    load = Some(Load::start(
                        &platform.rt,
                        &platform.ingress_client(HOST),
                        &platform.ingress_url(HOST, "/"),
                        2,
                        Some(10.0),
                    ));
                    set_manifest(&repo, "runway_canary", CANARY, 2, 2, 100);
                    set_env_file(
                        &repo,
                        "dev",
                        &[
                            ("GREETING", "canary"),
                            ("LOG_REQUESTS", "1"),
                            ("FAIL_EVERY", "10"),
                        ],
                    );
                    let started = platform.runway_with(
                        &["deploy", "--env", "dev"],
                        Some(repo.as_os_str()),
                        None,
                        Duration::from_secs(120),
                    );
                    assert!(started.ok(), "canary deploy: {}\n{output}", started.all());
                    canary = true;
                    let _ = stdin.write_all(b"canary-started\n");
                    let _ = stdin.flush();
                }
                if line == "load-stop" {
                    if let Some(load) = load.take() {
                        let (ok, failed) = load.stop(&platform.rt);
                        println!("load: {ok} requests answered, {failed} failed");
                    }
                    let _ = stdin.write_all(b"load-stopped\n");
                    let _ = stdin.flush();
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        assert!(
            started.elapsed() < BOUND,
            "console.mjs overran {BOUND:?}:\n{output}"
        );
    }
    let code = loop {
        if let Some(status) = group.0.try_wait().unwrap() {
            break status.code();
        }
        assert!(
            started.elapsed() < BOUND,
            "console.mjs did not exit:\n{output}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let errors = errors.join().unwrap();
    assert_eq!(
        code,
        Some(0),
        "console.mjs failed:\n{output}\n--- stderr\n{errors}\n--- server\n{}",
        platform.log()
    );
    assert!(deployed, "the script never asked for the deploy:\n{output}");
    assert!(canary, "the script never asked for the canary:\n{output}");
    if let Some(load) = load.take() {
        load.stop(&platform.rt);
    }
    assert!(output.contains("metric: "), "{output}");
    // What the page did is what the API says: rolled back to the first revision, the canary
    // aborted (its deployment rolled back).
    let (status, now) = platform.call(
        Method::GET,
        "/v1/services/hello/environments/dev/status",
        Some(&platform.token),
        None,
    );
    assert_eq!(status, 200, "{now}");
    assert_eq!(
        now["desired"],
        json!([{"revision": "hello-dev-00001", "instances": 1, "weight": 100}])
    );
    let (status, listed) = platform.call(
        Method::GET,
        "/v1/services/hello/environments/dev/deployments?limit=1",
        Some(&platform.token),
        None,
    );
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed[0]["to_revision"], "hello-dev-00003", "{listed:#}");
    assert_eq!(listed[0]["state"], "rolled_back", "{listed:#}");
    // Every domain the script added, it removed (through the page, or the API's DELETE).
    let (status, domains) = platform.call(Method::GET, "/v1/domains", Some(&platform.token), None);
    assert_eq!(status, 200, "{domains}");
    assert_eq!(domains, json!([]));
    println!("screenshots in {}", shots.display());
}
