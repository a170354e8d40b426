//! The control plane end to end: the real `runway server` binary on ephemeral ports with a
//! temporary data directory, driven by the real CLI (`runway login`, `services`, `secrets`,
//! `deploy --wait`, `rollback`, `promote`, `status`, `revisions`, `local ps`), requests through
//! its HTTPS ingress trusting only its CA, and its API for what the CLI has no command for
//! (tokens). The service is a small Python program (`support::APP`) run as a plain process.
//!
//! Every wait is bounded; every server and instance is killed when a test ends, even when it
//! fails (`support::Platform`'s drop). The two tests that put load on the machine take an
//! exclusive lock, so their figures do not depend on what else runs.

#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::path::Path;
use std::process::Command;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use support::gitlab::{Pipeline, TestIssuer, gitlab_ci_local};
use support::{Load, Platform, Settings, have_python, revision_of, set_env_file};

/// Load tests run alone; the others share the machine.
static MACHINE: RwLock<()> = RwLock::new(());

const HOST: &str = "hello.dev.localhost";

fn secret_value() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("s3cret-{nanos:x}-{:x}", std::process::id())
}

/// What the test service's `/secret` answers for a value (never the value itself).
fn secret_fingerprint(value: &str) -> String {
    let sum: u64 = value.bytes().map(u64::from).sum::<u64>() % 65521;
    format!("API_KEY present length={} sum={sum}\n", value.len())
}

fn assert_absent(path: &Path, needle: &str) {
    let Ok(bytes) = std::fs::read(path) else {
        return;
    };
    assert!(
        !bytes
            .windows(needle.len())
            .any(|window| window == needle.as_bytes()),
        "a secret's value is in {} in plaintext",
        path.display()
    );
}

/// The instances: id → (pid, supervisor pid, restarts), from `runway local ps`.
fn instances(platform: &Platform) -> Vec<(String, u64, u64, u64)> {
    platform
        .local_ps()
        .iter()
        .map(|i| {
            (
                i["id"].as_str().unwrap().to_owned(),
                i["pid"].as_u64().unwrap_or(0),
                i["supervisor_pid"].as_u64().unwrap_or(0),
                i["restarts"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// Onboard, deploy and serve; secrets injected and sealed at rest; a failing revision leaves
/// the old one serving; rollback; promote dev → staging.
#[test]
fn deploy_secrets_failure_rollback_and_promote() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings {
        deploy_timeout_ms: 8_000,
        ..Settings::default()
    });
    let secret = secret_value();
    let repo = platform.onboard("hello", &["dev", "staging"], &secret);

    // Onboard + deploy + GET through the ingress.
    set_env_file(&repo, "dev", &[("GREETING", "first")]);
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "first deploy: {}", first.all());
    let (status, body) = platform.get(HOST, "/", Duration::from_secs(10));
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("first from hello-dev-00001"), "{body}");
    // A name of the platform's that nothing serves: an HTTP 404 that says so, through a
    // handshake the client trusts, not a TLS alert.
    let (status, body) = platform.get("helo.dev.localhost", "/", Duration::from_secs(10));
    assert_eq!(status, 404, "{body}");
    assert!(body.starts_with("no service has this name"), "{body}");
    let shown = platform.runway(&["status", "--service", "hello", "--output", "json"]);
    assert!(shown.ok(), "{}", shown.all());
    let shown = shown.json();
    assert_eq!(
        shown["routes"],
        json!([{"revision": "hello-dev-00001", "weight": 100}])
    );
    assert!(
        shown["url"]
            .as_str()
            .unwrap()
            .starts_with("https://hello.dev.localhost:"),
        "{shown}"
    );

    // The secret reached the instance, and is nowhere in the store's files in plaintext, nor
    // in what the API or the CLI show.
    let (_, body) = platform.get(HOST, "/secret", Duration::from_secs(5));
    assert_eq!(body, secret_fingerprint(&secret));
    for file in ["runway.db", "runway.db-wal", "runway.db-shm"] {
        let path = platform.data.join(file);
        if file == "runway.db" {
            assert!(path.exists(), "no store at {}", path.display());
        }
        assert_absent(&path, &secret);
    }
    let revisions = platform.runway(&["revisions", "--service", "hello", "--output", "json"]);
    assert!(revisions.ok(), "{}", revisions.all());
    assert!(!revisions.stdout.contains(&secret));
    assert_eq!(
        revisions.json()[0]["secret_versions"],
        json!({"API_KEY": 1})
    );
    let listed = platform.runway(&["secrets", "list", "--service", "hello", "--output", "json"]);
    assert!(
        listed.ok() && !listed.stdout.contains(&secret),
        "{}",
        listed.all()
    );

    // A revision that can never start: the deployment fails at its instance's first exit,
    // well within the deploy timeout (8 s), with the reason and the program's last output, and
    // the first revision serves every request meanwhile.
    let client = platform.ingress_client(HOST);
    let load = Load::start(
        &platform.rt,
        &client,
        &platform.ingress_url(HOST, "/"),
        4,
        None,
    );
    let counts = std::sync::Arc::clone(&load.counts);
    set_env_file(&repo, "dev", &[("GREETING", "broken"), ("CRASH", "1")]);
    let broken = platform.deploy(&repo, "dev");
    let (ok, failed) = load.stop(&platform.rt);
    assert_eq!(broken.code, Some(1), "a failing deploy: {}", broken.all());
    assert!(
        broken.took < Duration::from_secs(8),
        "the failure took {:?}",
        broken.took
    );
    let said = format!("{}{}", broken.stdout, broken.stderr);
    assert!(said.contains("ended before it was ready"), "{said}");
    assert!(said.contains("hello-dev-00002"), "{said}");
    assert!(said.contains("crashing on purpose"), "no reason: {said}");
    assert_eq!(
        failed,
        0,
        "requests failed while a broken revision was deployed: {:?}",
        counts.failures.lock().unwrap()
    );
    assert!(ok > 10, "only {ok} requests");
    assert_eq!(
        *counts.bodies.lock().unwrap(),
        ["first from hello-dev-00001".to_owned()].into()
    );
    let (_, body) = platform.get(HOST, "/", Duration::from_secs(5));
    assert!(body.starts_with("first from hello-dev-00001"), "{body}");
    platform.wait_retired("hello-dev-00002", Duration::from_secs(20));

    // A second good revision, then rollback to the first.
    set_env_file(&repo, "dev", &[("GREETING", "third")]);
    let third = platform.deploy(&repo, "dev");
    assert!(third.ok(), "third deploy: {}", third.all());
    let (_, body) = platform.get(HOST, "/", Duration::from_secs(5));
    assert!(body.starts_with("third from hello-dev-00003"), "{body}");
    // The working tree moves on; a revision keeps the code it was deployed with.
    let app = repo.join("app.py");
    let code = std::fs::read_to_string(&app).unwrap();
    let edited = code.replace(
        "greeting = os.environ.get(\"GREETING\", \"hello\")",
        "greeting = \"edited \" + os.environ.get(\"GREETING\", \"hello\")",
    );
    assert_ne!(code, edited, "the test's app changed: edit another line");
    std::fs::write(&app, edited).unwrap();
    let back = platform.runway_for(
        &[
            "rollback",
            "--service",
            "hello",
            "--to",
            "hello-dev-00001",
            "--wait",
            "--timeout",
            "60s",
        ],
        Duration::from_secs(90),
    );
    assert!(back.ok(), "rollback: {}", back.all());
    let (_, body) = platform.get(HOST, "/", Duration::from_secs(5));
    assert!(body.starts_with("first from hello-dev-00001"), "{body}");

    // Promote what dev serves to staging: a new revision of staging with the same content.
    let promoted = platform.runway_for(
        &[
            "promote",
            "--service",
            "hello",
            "--from",
            "dev",
            "--to",
            "staging",
            "--wait",
            "--timeout",
            "60s",
        ],
        Duration::from_secs(90),
    );
    assert!(promoted.ok(), "promote: {}", promoted.all());
    let (status, body) = platform.get("hello.staging.localhost", "/", Duration::from_secs(10));
    assert_eq!(status, 200);
    assert!(body.starts_with("first from hello-staging-00001"), "{body}");
    let revision = |env: &str, name: &str| -> Value {
        let listed = platform.runway(&[
            "revisions",
            "--service",
            "hello",
            "--env",
            env,
            "--output",
            "json",
        ]);
        assert!(listed.ok(), "{}", listed.all());
        listed
            .json()
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {}", listed.stdout))
    };
    let (dev, staging) = (
        revision("dev", "hello-dev-00001"),
        revision("staging", "hello-staging-00001"),
    );
    assert!(
        dev["source"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:")),
        "{dev}"
    );
    for field in ["manifest", "env_vars", "image", "source"] {
        assert_eq!(
            dev[field], staging[field],
            "{field} differs after promotion"
        );
    }
    // staging's instance has staging's secret version (set once, version 1).
    let (_, body) = platform.get("hello.staging.localhost", "/secret", Duration::from_secs(5));
    assert_eq!(body, secret_fingerprint(&secret));
    // Production is not one of the service's environments.
    let refused = platform.runway(&[
        "promote",
        "--service",
        "hello",
        "--from",
        "staging",
        "--to",
        "production",
    ]);
    assert_eq!(refused.code, Some(1), "{}", refused.all());
    for file in ["runway.db", "runway.db-wal", "runway.db-shm"] {
        assert_absent(&platform.data.join(file), &secret);
    }
}

/// 20 consecutive rollouts under concurrent load through the ingress: not one failed request.
#[test]
fn twenty_rollouts_under_load_fail_no_request() {
    let _alone = MACHINE.write().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let started = Instant::now();
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], &secret_value());
    set_env_file(&repo, "dev", &[("GREETING", "v0")]);
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "first deploy: {}", first.all());
    platform.get(HOST, "/", Duration::from_secs(10));

    let client = platform.ingress_client(HOST);
    let load = Load::start(
        &platform.rt,
        &client,
        &platform.ingress_url(HOST, "/"),
        8,
        None,
    );
    let counts = std::sync::Arc::clone(&load.counts);
    const ROLLOUTS: usize = 20;
    for n in 1..=ROLLOUTS {
        let greeting = format!("v{n}");
        set_env_file(&repo, "dev", &[("GREETING", &greeting)]);
        let rolled = platform.deploy(&repo, "dev");
        assert!(
            rolled.ok(),
            "rollout {n}: {}\nserver:\n{}",
            rolled.all(),
            platform.log()
        );
        let (ok, failed) = load.snapshot();
        assert_eq!(
            failed,
            0,
            "rollout {n}: {failed} of {} requests failed: {:?}",
            ok + failed,
            load.failures()
        );
    }
    // The last rollout's old revision drains and stops with the load still running.
    let last_old = format!("hello-dev-{:05}", ROLLOUTS);
    platform.wait_retired(&last_old, Duration::from_secs(20));
    let (ok, failed) = load.stop(&platform.rt);
    let seen = counts.bodies.lock().unwrap().clone();
    eprintln!(
        "{ROLLOUTS} rollouts under load in {:.1} s: {ok} requests, {failed} failed; {} revisions answered",
        started.elapsed().as_secs_f64(),
        seen.len()
    );
    assert_eq!(
        failed,
        0,
        "failed requests: {:?}",
        counts.failures.lock().unwrap()
    );
    assert!(ok > 500, "only {ok} requests in {ROLLOUTS} rollouts");
    let newest = format!("v{ROLLOUTS} from hello-dev-{:05}", ROLLOUTS + 1);
    assert!(seen.contains(&newest), "{newest} never answered: {seen:?}");
    assert!(
        seen.len() > ROLLOUTS / 2,
        "few revisions answered: {seen:?}"
    );
    // Only the newest revision is left.
    let left = instances(&platform);
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(
        revision_of(&left[0].0),
        format!("hello-dev-{:05}", ROLLOUTS + 1)
    );
    assert!(
        started.elapsed() < Duration::from_secs(170),
        "took {:?}",
        started.elapsed()
    );
}

/// `kill -9` of the server, five rounds, under steady load through the ingress: not one request
/// fails, because the ingress is a process of its own that keeps serving its last table while
/// no server runs. Each restarted server adopts that same ingress process (same pid) and feeds
/// it: a deploy after the last round is routed by it.
#[test]
fn kill_9_of_the_server_under_load_fails_no_request() {
    let _alone = MACHINE.write().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    /// Kill, wait, restart: this many times.
    const ROUNDS: usize = 5;
    /// Load: clients each paced at this rate (about 1,000 requests a second in all).
    const CLIENTS: usize = 8;
    const PER_CLIENT: f64 = 125.0;
    /// Load before each kill, and the time the server stays dead.
    const BEFORE_KILL: Duration = Duration::from_millis(1_500);
    const DEAD: Duration = Duration::from_millis(1_000);
    let mut platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], &secret_value());
    set_env_file(&repo, "dev", &[("GREETING", "before")]);
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "first deploy: {}", first.all());
    platform.get(HOST, "/", Duration::from_secs(10));
    let ingress = platform.ingress_pid();
    assert_eq!(platform.ingress_outcome(), "started");

    let client = platform.ingress_client(HOST);
    let started = Instant::now();
    let load = Load::start(
        &platform.rt,
        &client,
        &platform.ingress_url(HOST, "/"),
        CLIENTS,
        Some(PER_CLIENT),
    );
    let counts = std::sync::Arc::clone(&load.counts);
    for round in 1..=ROUNDS {
        std::thread::sleep(BEFORE_KILL);
        let server = platform.server_pid();
        platform.kill9();
        std::thread::sleep(DEAD);
        platform.restart();
        assert_ne!(platform.server_pid(), server);
        assert_eq!(
            (platform.ingress_pid(), platform.ingress_outcome().as_str()),
            (ingress, "adopted"),
            "round {round}: the restarted server did not adopt the running ingress\n{}",
            platform.log()
        );
        let (ok, failed) = load.snapshot();
        assert_eq!(
            failed,
            0,
            "round {round}: {failed} of {} requests failed: {:?}",
            ok + failed,
            load.failures()
        );
    }
    let (during, _) = load.snapshot();
    let took = started.elapsed();

    // The adopted ingress takes the restarted server's tables: a new revision is routed.
    set_env_file(&repo, "dev", &[("GREETING", "after")]);
    let rolled = platform.deploy(&repo, "dev");
    assert!(
        rolled.ok(),
        "deploy after the rounds: {}\n{}",
        rolled.all(),
        platform.log()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !counts
        .bodies
        .lock()
        .unwrap()
        .contains("after from hello-dev-00002")
    {
        assert!(
            Instant::now() < deadline,
            "the new revision never answered through the adopted ingress"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ok, failed) = load.stop(&platform.rt);
    assert_eq!(platform.ingress_pid(), ingress);
    let rss = support::rss_kib(ingress).unwrap_or(0);
    eprintln!(
        "kill -9 x{ROUNDS} under load: {during} requests in {:.1} s ({:.0}/s) across the kills, \
         {ok} in all, {failed} failed; the ingress (pid {ingress}) resident: {rss} KiB",
        took.as_secs_f64(),
        during as f64 / took.as_secs_f64()
    );
    assert_eq!(
        failed,
        0,
        "failed requests: {:?}",
        counts.failures.lock().unwrap()
    );
    // Paced at about 1,000 a second, a slow machine still does a good share of it.
    assert!(
        during as f64 > took.as_secs_f64() * 200.0,
        "only {during} requests in {took:?}"
    );
}

/// A server started with other ingress addresses replaces the running ingress: the new one
/// binds the same service ports (`SO_REUSEPORT`; port 0 keeps the old one's) before the old
/// one stops accepting and finishes its requests. Prints what the load saw across it: a
/// request or two of 2,000 can fail (an idle keep-alive connection closed by the old one as a
/// request arrives on it).
#[test]
fn a_changed_ingress_configuration_replaces_the_ingress_under_load() {
    let _alone = MACHINE.write().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let mut platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], &secret_value());
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "first deploy: {}", first.all());
    platform.get(HOST, "/", Duration::from_secs(10));
    let (old, https) = (platform.ingress_pid(), platform.https());
    let client = platform.ingress_client(HOST);
    let load = Load::start(
        &platform.rt,
        &client,
        &platform.ingress_url(HOST, "/"),
        8,
        Some(125.0),
    );
    std::thread::sleep(Duration::from_secs(1));
    platform.kill9();
    // Another metrics address: the running ingress is not the one configured any more.
    let config = std::fs::read_to_string(&platform.config).unwrap();
    std::fs::write(
        &platform.config,
        config.replace("admin: 127.0.0.1:0", "admin: 127.0.0.2:0"),
    )
    .unwrap();
    platform.restart();
    let outcome = platform.ingress_outcome();
    assert!(
        outcome.starts_with(&format!("replaced pid {old}: it listens on")),
        "{outcome}"
    );
    assert_ne!(platform.ingress_pid(), old);
    assert_eq!(platform.https(), https, "the service port moved");
    // The old one finishes and exits.
    let deadline = Instant::now() + Duration::from_secs(35);
    while support::rss_kib(old).is_some() {
        assert!(Instant::now() < deadline, "the replaced ingress still runs");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    let counts = std::sync::Arc::clone(&load.counts);
    let (ok, failed) = load.stop(&platform.rt);
    eprintln!(
        "ingress replaced under load: {ok} requests, {failed} failed: {:?}",
        counts.failures.lock().unwrap()
    );
    assert!(ok > 500, "only {ok} requests");
    // No connection is refused (the ports are shared), but the old ingress's graceful stop
    // closes idle HTTP/1.1 keep-alive connections, which can race a client's next request on
    // them: at most one request per client connection (see
    // docs/decisions/0046-data-plane-own-process.md).
    assert!(failed <= 8, "{failed} failed");
    let (status, body) = platform.get(HOST, "/", Duration::from_secs(5));
    assert_eq!(status, 200, "{body}");
}

/// `kill -9` of the server while a deployment is in progress, then a restart on the same data
/// directory: the deployment converges, and no instance was restarted or replaced by it.
///
/// The instances and the ingress run in processes of their own and survive the kill (see
/// `kill_9_of_the_server_under_load_fails_no_request` for the ingress under load). Here the
/// proof is about the deployment and the instances: every instance that ran
/// before the kill runs after the restart with the same pid and no restart (the new server
/// adopted them), the old revision's instance answered every request sent straight to it
/// across the kill and the restart, the deployment then succeeds on the new instance started
/// before the kill, and from the restart on the ingress serves without failing while the
/// deployment finishes. That last part fails today (a bug in the controller, see the final
/// assertion): everything before it passes.
#[test]
fn kill_9_mid_deploy_then_restart_converges() {
    let _alone = MACHINE.write().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let mut platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], &secret_value());
    set_env_file(&repo, "dev", &[("GREETING", "old")]);
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "first deploy: {}", first.all());
    platform.get(HOST, "/", Duration::from_secs(10));
    let old = instances(&platform);
    assert_eq!(old.len(), 1, "{old:?}");
    // Where the ingress reaches it: its own network's address.
    let old_address = platform.local_ps()[0]["address"]
        .as_str()
        .unwrap()
        .to_owned();

    // Requests straight to the old instance, across the kill and the restart.
    let direct_client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let direct = Load::start(
        &platform.rt,
        &direct_client,
        &format!("http://{old_address}/"),
        4,
        None,
    );
    let direct_counts = std::sync::Arc::clone(&direct.counts);

    // The new revision takes 8 s before it listens, so the deployment is in progress when the
    // server dies, and the old instance still has the traffic when the new server is up.
    set_env_file(&repo, "dev", &[("GREETING", "new"), ("START_DELAY", "8")]);
    let started = platform.runway_with(
        &["deploy", "--env", "dev", "--output", "json"],
        Some(repo.as_os_str()),
        None,
        support::COMMAND,
    );
    assert!(started.ok(), "deploy: {}", started.all());
    let deployment = started.json();
    assert_eq!(deployment["to_revision"], "hello-dev-00002");
    // Wait for the new revision's instance to exist, then kill the server.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !instances(&platform)
        .iter()
        .any(|i| revision_of(&i.0) == "hello-dev-00002" && i.1 > 0)
    {
        assert!(Instant::now() < deadline, "no new instance was started");
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = instances(&platform);
    let mid = platform.call(
        Method::GET,
        &format!("/v1/deployments/{}", support::id_text(&deployment["id"])),
        Some(&platform.token),
        None,
    );
    assert!(
        matches!(mid.1["state"].as_str(), Some("pending" | "progressing")),
        "not mid-deploy: {}",
        mid.1
    );
    platform.kill9();
    std::thread::sleep(Duration::from_secs(1));
    let during = instances(&platform);
    assert_eq!(
        during, before,
        "instances changed while the server was down"
    );

    platform.restart();
    // Requests through the ingress from the moment its port accepts connections.
    let https = platform.https();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(https).is_err() {
        assert!(
            Instant::now() < deadline,
            "the ingress does not listen again"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = platform.ingress_client(HOST);
    let load = Load::start(
        &platform.rt,
        &client,
        &platform.ingress_url(HOST, "/"),
        4,
        None,
    );
    let counts = std::sync::Arc::clone(&load.counts);
    // The new revision is not ready yet (it sleeps 8 s): the old instance still serves.
    let (direct_ok, direct_failed) = direct.stop(&platform.rt);
    assert_eq!(
        direct_failed,
        0,
        "the old instance failed requests across the kill: {:?}",
        direct_counts.failures.lock().unwrap()
    );
    assert!(direct_ok > 20, "only {direct_ok} direct requests");
    // Adopted, not restarted: same pids, no restarts.
    let after = instances(&platform);
    for instance in &before {
        assert!(
            after.contains(instance),
            "{instance:?} was not adopted as it was: {after:?}"
        );
    }

    // The deployment converges on the instance started before the kill, never restarted.
    let ended = platform.wait_deployment(&deployment["id"], Duration::from_secs(60));
    assert_eq!(ended["state"], "succeeded", "{ended}\n{}", platform.log());
    platform.wait_retired("hello-dev-00001", Duration::from_secs(20));
    let (ok, failed) = load.stop(&platform.rt);
    let (_, body) = platform.get(HOST, "/", Duration::from_secs(5));
    assert!(body.starts_with("new from hello-dev-00002"), "{body}");
    let new_before: Vec<_> = before
        .iter()
        .filter(|i| revision_of(&i.0) == "hello-dev-00002")
        .collect();
    let now = instances(&platform);
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(&now[0], new_before[0], "the new instance was replaced");

    // Through the ingress, from the restart to the end of the deployment: no failure. The old
    // revision was ready and adopted all along, so it must keep the traffic until the new one
    // is ready. (Fails today: the restarted controller starts with empty routes, and the
    // planner routes only desired revisions with weight, so hello/dev has no route, and its
    // TLS handshakes are refused, until the new revision is ready.)
    let events = platform.runway(&[
        "events",
        "--deployment",
        &support::id_text(&deployment["id"]),
    ]);
    assert_eq!(
        failed,
        0,
        "{failed} of {} requests through the ingress failed after the restart, while the old \
         revision's instance was ready: {:?}\nthe deployment's events:\n{}",
        ok + failed,
        counts.failures.lock().unwrap().first(),
        events.stdout
    );
    assert!(ok > 10, "only {ok} requests after the restart");
}

/// A second server on a data directory in use is refused, naming the directory and the
/// first server's pid, and leaves the first serving.
#[test]
fn a_second_server_on_the_same_data_directory_is_refused() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    let platform = Platform::start(&Settings::default());
    let mut second = Command::new(support::RUNWAY);
    second
        .arg("server")
        .arg("--config")
        .arg(&platform.config)
        .arg("--data-dir")
        .arg(&platform.data)
        .env_remove("RUNWAY_DATA_DIR");
    let ran = support::run(second, None, Duration::from_secs(30));
    assert_eq!(ran.code, Some(2), "{}", ran.all());
    let expected = format!(
        "another runway server is using the data directory {} (pid {})",
        platform.data.display(),
        platform.server_pid()
    );
    assert!(ran.stderr.contains(&expected), "{}", ran.all());
    let listed = platform.runway(&["services", "list"]);
    assert!(
        listed.ok(),
        "the first server stopped answering: {}",
        listed.all()
    );
}

/// A deploy token reaches its own service and environments only; a revoked token is refused;
/// every route of the OpenAPI document refuses a missing or a wrong token.
#[test]
fn tokens_are_scoped_and_revocable() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let secret = secret_value();
    let repo = platform.onboard("hello", &["dev", "staging"], &secret);
    let other = platform.onboard("other", &["dev"], &secret);
    let admin = platform.token.clone();

    let (status, created) = platform.call(
        Method::POST,
        "/v1/tokens",
        Some(&admin),
        Some(json!({"name": "ci-hello", "scope": {"deploy": {"service": "hello", "environments": ["dev"]}}})),
    );
    assert_eq!(status, 201, "{created}");
    let token = created["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("runway_deploy_"));
    let id = created["info"]["id"].clone();

    // Its own service in its environment: deploy, status, secrets.
    let mut deploy = Command::new(support::RUNWAY);
    deploy
        .env("RUNWAY_CONFIG", &platform.cli_config)
        .env("RUNWAY_TOKEN", &token)
        .args(["deploy", "--env", "dev", "--wait", "--timeout", "60s"])
        .arg(&repo);
    let deployed = support::run(deploy, None, Duration::from_secs(90));
    assert!(
        deployed.ok(),
        "deploy with the deploy token: {}",
        deployed.all()
    );
    let listed = platform.runway_as(&token, &["services", "list", "--output", "json"]);
    assert!(listed.ok(), "{}", listed.all());
    let names: Vec<String> = listed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["hello"]);
    assert!(
        platform
            .runway_as(&token, &["status", "--service", "hello"])
            .ok()
    );

    // Another service, another environment, admin routes: 403.
    let forbidden = [
        (Method::GET, "/v1/services/other".to_owned(), None),
        (
            Method::GET,
            "/v1/services/other/environments/dev/status".to_owned(),
            None,
        ),
        (
            Method::PUT,
            "/v1/services/other/environments/dev/secrets/API_KEY".to_owned(),
            Some(json!({"value": "x"})),
        ),
        (
            Method::GET,
            "/v1/services/hello/environments/staging/status".to_owned(),
            None,
        ),
        (
            Method::POST,
            "/v1/services/hello/promote".to_owned(),
            Some(json!({"from": "dev", "to": "staging"})),
        ),
        (
            Method::POST,
            "/v1/services".to_owned(),
            Some(json!({"name": "third", "owners": ["a@example.com"]})),
        ),
        (Method::GET, "/v1/audit".to_owned(), None),
    ];
    for (method, path, body) in forbidden {
        let (status, answer) = platform.call(method.clone(), &path, Some(&token), body);
        assert_eq!(status, 403, "{method} {path}: {answer}");
        assert_eq!(answer["error"]["code"], "forbidden", "{answer}");
    }
    // Tokens are a maintainer's: a deployer sees none.
    let (status, answer) = platform.call(Method::GET, "/v1/tokens", Some(&token), None);
    assert_eq!((status, answer), (200, json!([])));
    // The CLI says so and exits 1.
    let mut deploy_other = Command::new(support::RUNWAY);
    deploy_other
        .env("RUNWAY_CONFIG", &platform.cli_config)
        .env("RUNWAY_TOKEN", &token)
        .args(["deploy", "--env", "dev"])
        .arg(&other);
    let refused = support::run(deploy_other, None, support::COMMAND);
    assert_eq!(refused.code, Some(1), "{}", refused.all());
    assert!(
        refused.stderr.contains("403")
            || refused.stderr.to_lowercase().contains("not allowed")
            || refused.stderr.to_lowercase().contains("forbidden"),
        "{}",
        refused.all()
    );
    let secret_other = platform.runway_with(
        &[
            "secrets",
            "set",
            "API_KEY",
            "--service",
            "other",
            "--env",
            "dev",
        ],
        None,
        Some(b"x"),
        support::COMMAND,
    );
    // (as admin this works: the refusal above is the token's scope)
    assert!(secret_other.ok(), "{}", secret_other.all());

    // Revoked: refused everywhere, by the API and the CLI.
    let (status, revoked) = platform.call(
        Method::DELETE,
        &format!("/v1/tokens/{}", support::id_text(&id)),
        Some(&admin),
        None,
    );
    assert_eq!(status, 200, "{revoked}");
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    let (status, answer) = platform.call(Method::GET, "/v1/whoami", Some(&token), None);
    assert_eq!(status, 401, "{answer}");
    let (status, _) = platform.call(Method::GET, "/v1/services/hello", Some(&token), None);
    assert_eq!(status, 401);
    let after = platform.runway_as(&token, &["status", "--service", "hello"]);
    assert_eq!(after.code, Some(1), "{}", after.all());

    // Every route of the document refuses a missing or a wrong token (401), except the two
    // that need none.
    let (status, document) = platform.call(Method::GET, "/openapi.json", None, None);
    assert_eq!(status, 200);
    let wrong = format!("runway_admin_{}", "0".repeat(40));
    let mut routes = 0;
    for (path, operations) in document["paths"].as_object().unwrap() {
        let concrete = path
            .replace("{service}", "hello")
            .replace("{env}", "dev")
            .replace("{id}", "1")
            .replace("{name}", "API_KEY");
        for method in operations.as_object().unwrap().keys() {
            let Ok(method) = Method::from_bytes(method.to_uppercase().as_bytes()) else {
                continue;
            };
            if runway_api::openapi::PUBLIC_PATHS.contains(&path.as_str()) {
                continue;
            }
            let body = matches!(method, Method::POST | Method::PUT).then(|| json!({}));
            for token in [None, Some(wrong.as_str()), Some("not-a-token")] {
                let (status, answer) =
                    platform.call(method.clone(), &concrete, token, body.clone());
                assert_eq!(status, 401, "{method} {concrete} with {token:?}: {answer}");
                assert_eq!(answer["error"]["code"], "unauthorized", "{answer}");
            }
            routes += 1;
        }
    }
    assert!(routes >= 20, "only {routes} routes in the document");
    // Nothing was touched by the refused calls: the service still serves.
    let (status, _) = platform.get(HOST, "/", Duration::from_secs(5));
    assert_eq!(status, 200);
}

/// Schemathesis, from PyPI, fuzzes the API from its checked-in OpenAPI document against a live
/// server with the admin token, with every check it has: no response is a 5xx, every answer is
/// as documented (status, content type, headers, body), what the document refuses is refused
/// and what it allows is accepted. Token revocation is left out (it would revoke the admin
/// token the run uses).
#[test]
fn schemathesis_finds_the_api_as_documented() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    let found = Command::new("schemathesis")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        let reason = "schemathesis is not installed (python3 -m pip install schemathesis)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
        eprintln!("skipped: {reason}");
        return;
    }
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    // Something to find: a service with a secret and a deployment.
    let repo = platform.onboard("hello", &["dev", "staging"], &secret_value());
    let deployed = platform.deploy(&repo, "dev");
    assert!(deployed.ok(), "{}", deployed.all());

    let document = Path::new(env!("CARGO_MANIFEST_DIR")).join("../runway-api/openapi.json");
    let reports = platform.dir.path().join("schemathesis");
    // `follow=true` streams logs until the client goes: by design it never ends, so the fuzzer
    // asks for the lines so far (as a string: a TOML `false` is sent as `False`, which is no
    // boolean). The operations that act on one service and environment are pointed at the one
    // that exists (random names only reach a 404); the others keep random path parameters.
    //
    // The watch stream is read for two events (its `Accept` is one OpenAPI leaves out of the
    // parameters).
    //
    // A valid request may still be refused for what no static document can say, and only
    // there: environments among the server's configured ones (services, tokens, promotions),
    // variables the serving revision has (`unset`), an instance the service does not have
    // (logs), a confirmation that repeats the path's service, `last` with `after` or `limit`
    // (both in the parameters' descriptions), a sign-out with a token that is no console
    // session (400); a manifest's or an inventory document's own schema and rules, a snapshot
    // that is no gzip of a tar archive or not the digest's (422, documented).
    let config = platform.dir.path().join("schemathesis.toml");
    std::fs::write(
        &config,
        r#"[[operations]]
include-operation-id = "logs"
parameters = { "query.follow" = "false" }

[[operations]]
include-operation-id = ["deploy_handler", "rollback", "promote", "status", "list_revisions", "get_maintenance", "set_maintenance", "end_maintenance"]
parameters = { "path.service" = "hello", "path.env" = "dev" }

[[operations]]
include-operation-id = "watch"
headers = { "Accept" = "text/event-stream" }
max-stream-events = 2

[[operations]]
include-operation-id = ["create_service", "update_service", "create_token", "promote", "set_variables", "logs", "decommission_service", "audit", "end_session", "put_team", "login", "set_maintenance"]
checks.positive_data_acceptance.expected-statuses = ["2XX", "400", "401", "403", "404", "409"]

[[operations]]
include-operation-id = ["deploy_handler", "put_source", "inventory"]
checks.positive_data_acceptance.expected-statuses = ["2XX", "401", "403", "404", "409", "422"]
"#,
    )
    .unwrap();
    let mut command = Command::new("schemathesis");
    command
        .current_dir(platform.dir.path())
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(&document)
        .args(["--url", &platform.api()])
        .arg("--tls-verify")
        .arg(platform.ca())
        .args([
            "--header",
            &format!("Authorization: Bearer {}", platform.token),
        ])
        .args(["--checks", "all"])
        .args(["--exclude-operation-id", "revoke_token"])
        .args(["--max-examples", "25", "--max-time", "90"])
        .args(["--request-timeout", "10", "--workers", "1", "--seed", "1"])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--report", "junit", "--report-dir"])
        .arg(&reports)
        .env("SCHEMATHESIS_HOOKS", "")
        .env("NO_COLOR", "1");
    let ran = support::run(command, None, Duration::from_secs(200));
    // The summary, for the log of a passing run too.
    let summary: Vec<&str> = ran.stdout.lines().rev().take(12).collect();
    for line in summary.iter().rev() {
        eprintln!("{line}");
    }
    assert!(
        ran.ok(),
        "schemathesis found the API unlike its document (or could not run): {}\nserver:\n{}",
        ran.all(),
        platform.log()
    );
}

#[test]
fn followed_logs_show_a_new_revisions_output_as_it_starts() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], &secret_value());
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "first deploy: {}", first.all());

    // Follow the service's output, then roll out a second revision: its instance's first line
    // ("listening on PORT", written as it starts) arrives on the stream.
    let client = platform.api_client();
    let url = format!(
        "{}/v1/services/hello/environments/dev/logs?follow=true&lines=5",
        platform.api()
    );
    let mut response = platform.rt.block_on(async {
        let response = client
            .get(&url)
            .bearer_auth(&platform.token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response
    });
    set_env_file(&repo, "dev", &[("GREETING", "second")]);
    let second = platform.deploy(&repo, "dev");
    assert!(second.ok(), "second deploy: {}", second.all());
    let seen = platform.rt.block_on(async {
        let mut seen = String::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !seen.contains("\"instance\":\"hello-dev-00002-") || !seen.contains("listening on") {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, response.chunk()).await {
                Ok(Ok(Some(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
                _ => break,
            }
        }
        seen
    });
    let line = seen
        .lines()
        .find(|l| l.contains("\"instance\":\"hello-dev-00002-") && l.contains("listening on"));
    assert!(line.is_some(), "no output of the new instance in:\n{seen}");
}

/// `runway server admin-token --data-dir DIR`: what `runway server` ARGS give the server.
fn admin_token_command(data: &Path) -> Command {
    let mut command = Command::new(support::RUNWAY);
    command
        .args(["server", "admin-token", "--data-dir"])
        .arg(data)
        .env_remove("RUNWAY_DATA_DIR");
    command
}

#[test]
fn a_failed_first_start_keeps_no_token_and_a_lost_one_is_recovered() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    // A first start that fails (its API port taken) after making the store leaves no admin
    // token it never showed.
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config = dir.path().join("server.yml");
    std::fs::write(
        &config,
        format!("api:\n  listen: {}\n", taken.local_addr().unwrap()),
    )
    .unwrap();
    let data = dir.path().join("data");
    let mut start = Command::new(support::RUNWAY);
    start
        .args(["server", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(&data);
    let failed = support::run(start, None, Duration::from_secs(60));
    assert!(!failed.ok(), "{}", failed.all());
    assert!(failed.stderr.contains("cannot listen"), "{}", failed.all());
    assert!(data.join("runway.db").is_file(), "the store was made");
    let recovered = support::run(admin_token_command(&data), None, Duration::from_secs(30));
    assert!(recovered.ok(), "{}", recovered.all());
    assert!(
        recovered.stderr.contains("revoked 0 admin tokens"),
        "{}",
        recovered.all()
    );
    assert!(
        recovered.stdout.trim().starts_with("runway_admin_"),
        "{}",
        recovered.all()
    );

    // A data directory with no store is named, not made one.
    let none = support::run(
        admin_token_command(&dir.path().join("elsewhere")),
        None,
        Duration::from_secs(30),
    );
    assert!(
        !none.ok() && none.stderr.contains("no store at"),
        "{}",
        none.all()
    );
    assert!(!dir.path().join("elsewhere/runway.db").exists());

    // Lost while the server runs: recovered from its data directory; the old token stops
    // working at once and the new one works.
    let platform = Platform::start(&Settings::default());
    let old = platform.token.clone();
    assert!(platform.runway_as(&old, &["services", "list"]).ok());
    let recovered = support::run(
        admin_token_command(&platform.data),
        None,
        Duration::from_secs(30),
    );
    assert!(recovered.ok(), "{}", recovered.all());
    assert!(
        recovered.stderr.contains("revoked 1 admin token;"),
        "{}",
        recovered.all()
    );
    let new = recovered.stdout.trim().to_owned();
    let refused = platform.runway_as(&old, &["services", "list"]);
    assert!(
        !refused.ok(),
        "the old token still works: {}",
        refused.all()
    );
    let listed = platform.runway_as(&new, &["services", "list"]);
    assert!(listed.ok(), "{}", listed.all());
}

/// `runway server check-config`: a good file's configuration in force is printed (defaults
/// applied) and nothing is started or made; a bad key, a missing certificate directory and
/// an unreadable kubeconfig are each named.
#[test]
fn check_config_names_the_problem_and_prints_what_is_in_force() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let check = |config: &str| {
        let path = dir.path().join("server.yml");
        std::fs::write(&path, config).unwrap();
        let mut command = Command::new(support::RUNWAY);
        command
            .args(["server", "check-config", "--config"])
            .arg(&path)
            .arg("--data-dir")
            .arg(&data)
            .env_remove("RUNWAY_DATA_DIR");
        support::run(command, None, Duration::from_secs(30))
    };

    let good = check("control:\n  domain: apps.example.com\n");
    assert!(good.ok(), "{}", good.all());
    let config = good.json();
    assert_eq!(config["control"]["domain"], "apps.example.com");
    assert_eq!(config["api"]["listen"], "127.0.0.1:7443");
    assert_eq!(config["ingress"]["remote"], Value::Null);
    assert!(good.stderr.contains("is good"), "{}", good.all());
    assert!(!data.exists(), "check-config made the data directory");

    let misspelt = check("control:\n  domian: apps.example.com\n");
    assert!(!misspelt.ok());
    assert!(
        misspelt.stderr.contains("server.yml:2:3: control.domian"),
        "{}",
        misspelt.all()
    );

    let tls = dir.path().join("no-such-dir");
    let remote = check(&format!(
        "ingress:\n  remote:\n    addresses: ['ingress:9444']\n    tls_dir: {}\n",
        tls.display()
    ));
    assert!(!remote.ok());
    assert!(
        remote.stderr.contains("ingress.remote.tls_dir") && remote.stderr.contains("ca.crt"),
        "{}",
        remote.all()
    );
    let empty = check("ingress:\n  remote:\n    addresses: []\n    tls_dir: /x\n");
    assert!(
        !empty.ok() && empty.stderr.contains("ingress.remote.addresses"),
        "{}",
        empty.all()
    );

    // Environments whose revision names could meet (`x-eu` in prod, `x` in eu-prod).
    let overlapping = check("api:\n  environments: [prod, eu-prod]\n");
    assert!(!overlapping.ok());
    assert!(
        overlapping.stderr.contains("api.environments[1]")
            && overlapping
                .stderr
                .contains("\"eu-prod\" ends with \"-prod\""),
        "{}",
        overlapping.all()
    );

    // A store URL's password is not printed.
    let postgres = check("store:\n  url: postgres://runway:s3cret@db.internal:5432/runway\n");
    assert!(postgres.ok(), "{}", postgres.all());
    assert_eq!(
        postgres.json()["store"]["url"],
        "postgres://runway:***@db.internal:5432/runway"
    );
    assert!(!postgres.stdout.contains("s3cret"));
    // A named master key must exist, and be this user's alone.
    let key = dir.path().join("shared.key");
    let named =
        |path: &std::path::Path| check(&format!("store:\n  master_key: {}\n", path.display()));
    let missing = named(&key);
    assert!(
        !missing.ok() && missing.stderr.contains("store.master_key"),
        "{}",
        missing.all()
    );
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&key, [7u8; 32]).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let readable = named(&key);
        assert!(!readable.ok(), "{}", readable.all());
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
        let good = named(&key);
        assert!(good.ok(), "{}", good.all());
    }
    let bad_url = check("store:\n  url: 'postgres://a@b:notaport/c'\n");
    assert!(!bad_url.ok());
    assert!(bad_url.stderr.contains("store.url"), "{}", bad_url.all());
    // The URL from a file (its password not printed either); not both; a CA that is not one.
    let url_file = dir.path().join("store-url");
    std::fs::write(&url_file, "postgres://runway:s3cret@db.internal/runway\n").unwrap();
    let from_file = check(&format!("store:\n  url_file: {}\n", url_file.display()));
    assert!(from_file.ok(), "{}", from_file.all());
    assert_eq!(
        from_file.json()["store"]["url"],
        "postgres://runway:***@db.internal/runway"
    );
    assert!(!from_file.stdout.contains("s3cret"));
    let both = check(&format!(
        "store:\n  url: postgres://db/runway\n  url_file: {}\n",
        url_file.display()
    ));
    assert!(
        !both.ok() && both.stderr.contains("store.url and store.url_file"),
        "{}",
        both.all()
    );
    let not_a_ca = check(&format!(
        "store:\n  url_file: {}\n  ca_file: {}\n",
        url_file.display(),
        url_file.display()
    ));
    assert!(
        !not_a_ca.ok() && not_a_ca.stderr.contains("store.ca_file"),
        "{}",
        not_a_ca.all()
    );

    // Vault: the configuration in force shows the defaults; a path every service would share
    // and an authority that cannot be read are named.
    let vault = check(
        "secrets:\n  vault:\n    address: https://vault.internal:8200\n    auth:\n      jwt: \
         {role: runway, token_file: /var/run/secrets/tokens/vault}\n",
    );
    assert!(vault.ok(), "{}", vault.all());
    assert_eq!(
        vault.json()["secrets"]["vault"]["path"],
        "runway/env/{environment}/service/{service}"
    );
    assert_eq!(
        vault.json()["secrets"]["vault"]["auth"]["jwt"]["mount"],
        "jwt"
    );
    let shared = check(
        "secrets:\n  vault:\n    address: https://vault.internal:8200\n    path: runway/all\n    \
         auth: {token: {token_file: /t}}\n",
    );
    assert!(
        !shared.ok()
            && shared.stderr.contains("secrets.vault.path")
            && shared
                .stderr
                .contains("every service would read the same secrets"),
        "{}",
        shared.all()
    );
    let unreadable_ca = check(&format!(
        "secrets:\n  vault:\n    address: https://vault.internal:8200\n    ca_file: {}\n    \
         auth: {{token: {{token_file: /t}}}}\n",
        dir.path().join("no-such-ca.pem").display()
    ));
    assert!(
        !unreadable_ca.ok() && unreadable_ca.stderr.contains("secrets.vault.ca_file"),
        "{}",
        unreadable_ca.all()
    );
    let not_pem = dir.path().join("not-a-ca.pem");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let empty_ca = check(&format!(
        "secrets:\n  vault:\n    address: https://vault.internal:8200\n    ca_file: {}\n    \
         auth: {{token: {{token_file: /t}}}}\n",
        not_pem.display()
    ));
    assert!(
        !empty_ca.ok() && empty_ca.stderr.contains("holds no PEM certificate"),
        "{}",
        empty_ca.all()
    );
    let bad_namespace = check(
        "secrets:\n  vault:\n    address: https://vault.internal:8200\n    namespace: 'a b'\n    \
         auth: {token: {token_file: /t}}\n",
    );
    assert!(
        !bad_namespace.ok() && bad_namespace.stderr.contains("secrets.vault.namespace"),
        "{}",
        bad_namespace.all()
    );

    // A cause is said once, though the message carrying it names it too.
    let unreadable_rules = check(
        "ingress:\n  cells:\n    - {host: gitlab.example.com, rules: /no-such-rules.json, topology: t.yml}\n",
    );
    assert!(!unreadable_rules.ok());
    assert_eq!(
        unreadable_rules.stderr.matches("No such file").count(),
        1,
        "{}",
        unreadable_rules.all()
    );

    let under_domain = check(
        "ingress:\n  cells:\n    - {host: gitlab.dev.localhost, rules: r.json, topology: t.yml}\n",
    );
    assert!(
        !under_domain.ok() && under_domain.stderr.contains("ingress.cells[0].host"),
        "{}",
        under_domain.all()
    );

    let cluster = check(&format!(
        "runtime:\n  kind: kubernetes\n  kubernetes:\n    kubeconfig: {}\n",
        dir.path().join("kubeconfig").display()
    ));
    assert!(!cluster.ok());
    assert!(
        cluster.stderr.contains("cannot read the kubeconfig"),
        "{}",
        cluster.all()
    );
}

/// `runway server` with `store.url` on a real PostgreSQL: a deploy is served, a kill -9 and a
/// restart keep every service, revision, secret and token, and `admin-token` recovers access
/// on that store as on SQLite.
#[test]
fn a_server_on_postgres_keeps_its_state_across_a_restart() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let Some(url) = support::test_database("a server on PostgreSQL") else {
        return;
    };
    // Over TLS, the URL (password and all) from a file as a Kubernetes Secret would give
    // it, the database's certificate checked against the test server's authority.
    let secrets_dir = tempfile::tempdir().unwrap();
    let url_file = secrets_dir.path().join("url");
    std::fs::write(&url_file, url.replace("sslmode=disable", "sslmode=require")).unwrap();
    let ca = std::env::var("RUNWAY_TEST_POSTGRES_CA").unwrap();
    let mut platform = Platform::start(&Settings {
        sections: format!(
            "store:\n  url_file: {}\n  ca_file: {ca}\n",
            url_file.display()
        ),
        ..Settings::default()
    });
    assert!(
        !platform.data.join("runway.db").exists(),
        "a SQLite store was made beside PostgreSQL"
    );
    let encrypted: i64 = postgres::Client::connect(&url, postgres::NoTls)
        .unwrap()
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
             WHERE ssl AND datname = current_database()",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(encrypted >= 1, "the server's connections are not TLS");
    let repo = platform.onboard("hello", &["dev"], &secret_value());
    let deploy = platform.deploy(&repo, "dev");
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    let (status, _) = platform.get(HOST, "/", Duration::from_secs(10));
    assert_eq!(status, 200);

    platform.kill9();
    platform.restart();
    let revisions = platform.runway(&[
        "revisions",
        "--service",
        "hello",
        "--env",
        "dev",
        "--output",
        "json",
    ]);
    assert!(revisions.ok(), "{}", revisions.all());
    assert!(
        revisions.stdout.contains("hello-dev-00001"),
        "{}",
        revisions.all()
    );
    let secrets = platform.runway(&[
        "secrets",
        "list",
        "--service",
        "hello",
        "--env",
        "dev",
        "--output",
        "json",
    ]);
    assert!(
        secrets.stdout.contains("API_KEY") || secrets.stdout.contains("\"name\""),
        "{}",
        secrets.all()
    );
    assert!(secrets.ok(), "{}", secrets.all());
    let deploy = platform.deploy(&repo, "dev");
    assert!(
        deploy.ok(),
        "deploy after restart: {}\n{}",
        deploy.all(),
        platform.log()
    );
    assert!(deploy.all().contains("hello-dev-00002"), "{}", deploy.all());

    let mut recover = Command::new(support::RUNWAY);
    recover
        .args(["server", "admin-token", "--config"])
        .arg(&platform.config)
        .arg("--data-dir")
        .arg(&platform.data)
        .env_remove("RUNWAY_DATA_DIR");
    let recovered = support::run(recover, None, Duration::from_secs(30));
    assert!(recovered.ok(), "{}", recovered.all());
    assert!(recovered.stdout.trim().starts_with("runway_admin_"));
}

/// `runway server migrate-store`: a server's SQLite store copied into PostgreSQL (the URL read
/// from standard input); the server started again on it finds every service, revision and
/// secret, and its next deploy numbers on. A running server's data directory, and a target
/// that is not empty, are refused.
#[test]
fn a_sqlite_store_is_migrated_to_postgres_and_the_server_goes_on() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let Some(url) = support::test_database("migrate store") else {
        return;
    };
    let mut platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], &secret_value());
    let deploy = platform.deploy(&repo, "dev");
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    let migrate = |platform: &Platform| {
        let mut command = Command::new(support::RUNWAY);
        command
            .args(["server", "migrate-store", "--to", "-", "--data-dir"])
            .arg(&platform.data)
            .env_remove("RUNWAY_DATA_DIR");
        support::run(
            command,
            Some(format!("{url}\n").as_bytes()),
            Duration::from_secs(60),
        )
    };
    // The server still runs: its data directory is locked.
    let busy = migrate(&platform);
    assert!(
        !busy.ok() && busy.stderr.contains("another runway server is using"),
        "{}",
        busy.all()
    );

    platform.kill9();
    let moved = migrate(&platform);
    assert!(moved.ok(), "{}", moved.all());
    assert!(
        moved.stderr.contains("copied 1 row of services"),
        "{}",
        moved.all()
    );
    let again = migrate(&platform);
    assert!(
        !again.ok() && again.stderr.contains("not empty"),
        "{}",
        again.all()
    );

    let mut config = std::fs::read_to_string(&platform.config).unwrap();
    config.push_str(&format!("store:\n  url: {url}\n"));
    std::fs::write(&platform.config, config).unwrap();
    // The SQLite file is no longer the store: moved aside, nothing may read it.
    std::fs::rename(
        platform.data.join("runway.db"),
        platform.data.join("runway.db.migrated"),
    )
    .unwrap();
    platform.restart();
    let revisions = platform.runway(&[
        "revisions",
        "--service",
        "hello",
        "--env",
        "dev",
        "--output",
        "json",
    ]);
    assert!(
        revisions.ok() && revisions.stdout.contains("hello-dev-00001"),
        "{}",
        revisions.all()
    );
    let deploy = platform.deploy(&repo, "dev");
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    assert!(deploy.all().contains("hello-dev-00002"), "{}", deploy.all());
    assert!(!platform.data.join("runway.db").exists());
}

/// `ingress.cells`: the platform's own ingress fronts cells for a host, as `runway router`
/// does, beside the services it routes: a runner's token reaches its cell over HTTPS with a
/// certificate from the platform's authority, an unknown cell the legacy one.
#[test]
fn the_ingress_fronts_cells_for_a_host() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    let cells: Vec<std::net::SocketAddr> = (1..=2).map(plain_cell).collect();
    let dir = tempfile::tempdir().unwrap();
    let topology = dir.path().join("topology.yml");
    std::fs::write(
        &topology,
        format!(
            "cells:\n  - {{id: 1, address: '{}'}}\n  - {{id: 2, address: '{}'}}\nlegacy_cell: 1\n",
            cells[0], cells[1]
        ),
    )
    .unwrap();
    let rules = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../runway-cells/tests/fixtures/rules.json"
    );
    let platform = Platform::start(&Settings {
        ingress: format!(
            "  cells:\n    - host: gitlab.test\n      rules: {rules}\n      topology: {}\n",
            topology.display()
        ),
        ..Settings::default()
    });
    let token = |cell: u64| {
        routable_token::encode(
            "glrt-",
            &routable_token::Claims::new().with("c", cell),
            &[5; 16],
        )
        .unwrap()
    };
    let client = platform.ingress_client("gitlab.test");
    let url = platform.ingress_url("gitlab.test", "/api/v4/jobs/request");
    let ask = |cell: u64| {
        platform.rt.block_on(async {
            let response = client
                .post(&url)
                .header("RUNNER-TOKEN", token(cell))
                .send()
                .await
                .ok()?;
            Some((response.status().as_u16(), response.text().await.ok()?))
        })
    };
    let started = std::time::Instant::now();
    let mut answer = ask(2);
    while answer.as_ref().is_none_or(|(status, _)| *status != 200) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{answer:?}\n{}",
            platform.log()
        );
        std::thread::sleep(Duration::from_millis(200));
        answer = ask(2);
    }
    assert_eq!(answer.unwrap().1, "cell 2 classify\n");
    assert_eq!(ask(7).unwrap().1, "cell 1 classify\n");
}

/// A cell on loopback that answers every request with its number and the router's action.
fn plain_cell(number: u64) -> std::net::SocketAddr {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut action = String::from("-");
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let line = line.trim_end();
                    if line.is_empty() {
                        let body = format!("cell {number} {action}\n");
                        let _ = write!(
                            stream,
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        action = "-".to_owned();
                        continue;
                    }
                    if let Some((name, value)) = line.split_once(':')
                        && name.eq_ignore_ascii_case("x-gitlab-http-router-rule-action")
                    {
                        action = value.trim().to_owned();
                    }
                }
            });
        }
    });
    address
}

/// A CI job deploys with its identity token, as GitLab CI's `id_tokens` gives one: `runway
/// login --oidc-token-env` keeps the variable's name, not the short-lived token; the deploy
/// goes through the real CLI and server, the audit log names the job's identity; a token of
/// an unprotected ref is bound to nothing and refused.
#[test]
fn a_ci_job_deploys_with_its_identity_token() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let issuer = TestIssuer::start();
    let platform = Platform::start(&Settings {
        api: issuer.api_config("dev"),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev"], &secret_value());
    set_env_file(&repo, "dev", &[("GREETING", "from ci")]);
    let token = |protected: &str| issuer.token(protected);
    let ci = tempfile::tempdir().unwrap();
    let config = ci.path().join("cli.json");
    let job = |protected: &str| -> Vec<(&str, std::ffi::OsString)> {
        vec![
            ("RUNWAY_CONFIG", config.clone().into()),
            ("RUNWAY_ID_TOKEN", token(protected).into()),
        ]
    };
    let vars = job("true");
    let vars: Vec<(&str, &std::ffi::OsStr)> =
        vars.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    let ca = platform.ca();
    let login = platform.runway_env(
        &[
            "login",
            "--server",
            &platform.api(),
            "--ca",
            ca.to_str().unwrap(),
            "--oidc-token-env",
            "RUNWAY_ID_TOKEN",
        ],
        &vars,
    );
    assert!(login.ok(), "{}", login.all());
    assert!(
        login.stdout.contains("oidc:https://gitlab.test"),
        "{}",
        login.all()
    );
    let saved = std::fs::read_to_string(&config).unwrap();
    assert!(
        saved.contains("RUNWAY_ID_TOKEN") && !saved.contains("eyJ"),
        "{saved}"
    );

    let repo_arg = repo.to_str().unwrap();
    let deploy = platform.runway_env(
        &[
            "deploy",
            "--env",
            "dev",
            "--wait",
            "--timeout",
            "90s",
            repo_arg,
        ],
        &vars,
    );
    assert!(deploy.ok(), "{}\n{}", deploy.all(), platform.log());
    let (status, body) = platform.get(HOST, "/", Duration::from_secs(10));
    assert_eq!(status, 200);
    assert!(body.starts_with("from ci"), "{body}");
    let audit = platform.runway(&["audit", "--output", "json"]);
    assert!(
        audit.stdout.contains(
            "oidc:https://gitlab.test project_path:group/hello:ref_type:branch:ref:main pipeline 77"
        ),
        "{}",
        audit.all()
    );

    // An unprotected ref's token is bound to nothing.
    let vars = job("false");
    let vars: Vec<(&str, &std::ffi::OsStr)> =
        vars.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    let refused = platform.runway_env(&["deploy", "--env", "dev", repo_arg], &vars);
    assert!(!refused.ok(), "{}", refused.all());
    assert!(
        refused.stderr.contains("403") || refused.stderr.contains("may do nothing"),
        "{}",
        refused.all()
    );
    assert!(
        platform
            .log()
            .contains("identity token refused reason=no binding"),
        "{}",
        platform.log()
    );
}

/// The CI component (`templates/runway.yml`) run for real: a service repository includes it
/// for dev and production, and `gitlab-ci-local` runs the pipeline ([`Pipeline`]). The validate
/// and deploy jobs pass, the service serves the commit, the audit log names the pipeline,
/// production waits for a person, and an unprotected ref's job fails.
#[test]
fn the_ci_component_validates_and_deploys_with_the_jobs_identity() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let Some(glci) = gitlab_ci_local() else {
        return;
    };
    let issuer = TestIssuer::start();
    let platform = Platform::start(&Settings {
        api: issuer.api_config("dev, production"),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev", "production"], &secret_value());
    set_env_file(&repo, "dev", &[("GREETING", "from the component")]);
    let pipeline = Pipeline::new(glci, &platform, &issuer, &repo, &["dev", "production"], "");

    let listed = pipeline.run(&["--list"], "true");
    assert!(listed.ok(), "{}", listed.all());
    let production = listed
        .stdout
        .lines()
        .find(|l| l.starts_with("runway-deploy-production"))
        .unwrap_or_else(|| panic!("{}", listed.all()));
    assert!(production.contains("manual"), "{production}");

    let ran = pipeline.run(&[], "true");
    assert!(ran.ok(), "{}\n{}", ran.all(), platform.log());
    for job in [
        "runway-validate-dev",
        "runway-validate-production",
        "runway-deploy-dev",
    ] {
        assert!(
            ran.stdout.contains(&format!("PASS  {job}")),
            "{job}: {}",
            ran.all()
        );
    }
    assert!(
        !ran.stdout.contains("runway-deploy-production starting"),
        "{}",
        ran.all()
    );
    assert!(
        ran.stdout.contains("hello is served in dev at https://"),
        "{}",
        ran.all()
    );
    let (status, body) = platform.get(HOST, "/", Duration::from_secs(10));
    assert_eq!(status, 200);
    assert!(body.starts_with("from the component"), "{body}");
    let audit = platform.runway(&["audit", "--output", "json"]);
    assert!(
        audit.stdout.contains(
            "oidc:https://gitlab.test project_path:group/hello:ref_type:branch:ref:main pipeline 77"
        ),
        "{}",
        audit.all()
    );

    // The same job on an unprotected ref: its token is bound to nothing, the job fails.
    let refused = pipeline.run(&["runway-deploy-dev"], "false");
    assert!(!refused.ok(), "{}", refused.all());
    assert!(
        refused.stdout.contains("FAIL  runway-deploy-dev"),
        "{}",
        refused.all()
    );
}

/// The same build runs in the CI component as on a laptop (docs/building.md): a repository with
/// `main.py` and a manifest whose `spec.workload.build` names a Python base image by digest
/// (built from the machine's Python, kept in the platform registry under `hello/base`). The
/// component's deploy job, logged in with its identity token alone, builds the image, pushes it
/// to the platform registry under `hello/build` and deploys it; the service serves main.py's
/// page, and the revision that runs is the image the job pushed, which the registry holds.
#[test]
fn the_ci_component_builds_the_image_from_source() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python()
        || !runway_oci::testing::require_tools(
            "building images in the CI component",
            &["skopeo", "umoci", "busybox", "runc", "ldd"],
        )
    {
        return;
    }
    let Some(glci) = gitlab_ci_local() else {
        return;
    };
    let issuer = TestIssuer::start();
    let platform = Platform::start(&Settings {
        api: issuer.api_config("dev"),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev"], &secret_value());
    let host = platform.api().trim_start_matches("https://").to_owned();

    // The base, pushed where the team keeps it: under its service in the platform registry.
    let base = support::push_python_base(&format!("{host}/hello/base:3.11"), Some(&platform));

    support::set_build_manifest(&repo, &base);
    std::fs::write(repo.join("main.py"), support::python_app("built in ci")).unwrap();
    let pipeline = Pipeline::new(glci, &platform, &issuer, &repo, &["dev"], "");

    let ran = pipeline.run(&[], "true");
    assert!(ran.ok(), "{}\n{}", ran.all(), platform.log());
    for job in ["runway-validate-dev", "runway-deploy-dev"] {
        assert!(
            ran.stdout.contains(&format!("PASS  {job}")),
            "{job}: {}",
            ran.all()
        );
    }
    // What `runway deploy` says on stderr as it builds and pushes (crates/runway-cli/src/
    // build.rs), which gitlab-ci-local passes on to its own stderr after the job's name:
    // "runway: building hello on BASE (1 files, 355 bytes compressed)..." and
    // "runway: pushed HOST/hello/build@sha256:… (17.4 MiB uploaded in 4 blobs, 0 already there)".
    assert!(
        ran.stderr
            .contains(&format!("runway: building hello on {base} (1 files, ")),
        "{}",
        ran.all()
    );
    let push = ran
        .stderr
        .lines()
        .find_map(|l| l.split_once("runway: pushed ").map(|(_, said)| said.trim()))
        .unwrap_or_else(|| panic!("no push said: {}", ran.all()));
    let pinned = push
        .split_once(" (")
        .map_or(push, |(pinned, _)| pinned)
        .to_owned();
    assert!(
        pinned.starts_with(&format!("{host}/hello/build@sha256:")),
        "{}",
        ran.all()
    );
    eprintln!(
        "the component's pipeline built, pushed and deployed in {:.1} s: {push}",
        ran.took.as_secs_f64()
    );
    let (code, body) = platform.get_until(HOST, "/", Duration::from_secs(30), |_, body| {
        body.trim() == "built in ci"
    });
    assert_eq!(
        (code, body.trim()),
        (200, "built in ci"),
        "{}",
        platform.log()
    );

    // What runs is the image the job pushed, and the platform registry holds it.
    let (status, revisions) = platform.call(
        Method::GET,
        "/v1/services/hello/environments/dev/revisions",
        Some(&platform.token),
        None,
    );
    assert_eq!(status, 200, "{revisions}");
    let revision = revisions
        .as_array()
        .and_then(|all| all.iter().find(|r| r["number"] == 1))
        .unwrap_or_else(|| panic!("no revision 1: {revisions:#}"));
    assert_eq!(
        revision["image"].as_str(),
        Some(pinned.as_str()),
        "{revision:#}"
    );
    let digest = pinned.rsplit_once('@').unwrap().1;
    let (status, manifest) = platform.call(
        Method::GET,
        &format!("/v2/hello/build/manifests/{digest}"),
        Some(&platform.token),
        None,
    );
    assert_eq!(status, 200, "{manifest}");
}

/// A real Prometheus (Debian's) discovers the platform through `GET /v1/prometheus/targets`
/// (`http_sd_configs`, the admin token, the platform's CA) and scrapes every instance at the
/// manifest's `observability.scrape_targets` and `metrics_path`, labelled with its service,
/// environment and revision; and the ingress's and the API's own metrics. The rule file
/// `runway server` writes (`observability.dir`) loads in it, and its recorded series come out
/// of the ingress's real ones. (`type: Bearer` is
/// spelt out: Debian's Prometheus 2.42 sends the credentials of an `http_sd_configs` without a
/// type otherwise.)
#[test]
fn prometheus_discovers_every_instance_through_the_api() {
    const PROMETHEUS: &str = "/usr/bin/prometheus";
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    if !Path::new(PROMETHEUS).exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{PROMETHEUS} is missing (apt-get install prometheus)"
        );
        eprintln!("skipped: {PROMETHEUS} is missing (apt-get install prometheus)");
        return;
    }
    let generated = tempfile::tempdir().unwrap();
    let platform = Platform::start(&Settings {
        sections: format!(
            "observability:\n  dir: {}\n  runbook_base: https://runbooks.example.com\n  interval_ms: 300\n",
            generated.path().display()
        ),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev"], &secret_value());
    support::set_manifest(&repo, "legacy", "", 2, 2, 100);
    let manifest = repo.join(".runway/runway.yml");
    let mut text = std::fs::read_to_string(&manifest).unwrap();
    text.push_str(
        "  observability:\n    scrape_targets: ['localhost:8080']\n    metrics_path: /metrics\n",
    );
    std::fs::write(&manifest, text).unwrap();
    let deployed = platform.deploy(&repo, "dev");
    assert!(deployed.ok(), "{}\n{}", deployed.all(), platform.log());
    let revision = "hello-dev-00001";

    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("token"), &platform.token).unwrap();
    let ca = platform.ca();
    let config = root.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: ['{rules}']\nscrape_configs:\n  - job_name: runway\n    \
             tls_config: {{ca_file: {ca}}}\n    \
             http_sd_configs:\n      - url: {api}/v1/prometheus/targets\n        \
             refresh_interval: 1s\n        authorization: {{type: Bearer, credentials_file: {token}}}\n        \
             tls_config: {{ca_file: {ca}}}\n",
            token = root.path().join("token").display(),
            rules = generated.path().join("runway.rules.yml").display(),
            ca = ca.display(),
            api = platform.api(),
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    // The server writes the rules of what it serves, and a dashboard per service.
    let rules_file = generated.path().join("runway.rules.yml");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&rules_file).is_ok_and(|t| t.contains("runway:hello:dev")) {
        assert!(
            Instant::now() < deadline,
            "no rules written\n{}",
            platform.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(generated.path().join("dashboards/hello.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        dashboard["uid"],
        runway_render::observability::dashboard_uid("hello")
    );
    assert!(
        std::fs::read_to_string(&rules_file)
            .unwrap()
            .contains("https://runbooks.example.com/hello")
    );
    let _prometheus = Killed(
        Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                root.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(root.path().join("prometheus.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let api = |path: &str| -> Option<Value> {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        serde_json::from_str(response.split("\r\n\r\n").nth(1)?).ok()
    };
    let targets = || -> Option<Vec<Value>> {
        api("/api/v1/targets")?["data"]["activeTargets"]
            .as_array()
            .cloned()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let found = loop {
        let found = targets().unwrap_or_default();
        let instances = found
            .iter()
            .filter(|t| {
                t["labels"]["service"] == "hello"
                    && t["labels"]["env"] == "dev"
                    && t["labels"]["revision"] == revision
                    && t["health"] == "up"
            })
            .count();
        let own_up = ["runway-ingress", "runway-api"].iter().all(|job| {
            found
                .iter()
                .any(|t| t["discoveredLabels"]["job"] == *job && t["health"] == "up")
        });
        if instances == 2 && own_up {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus found {found:#?}\n{}\n{}",
            platform.log(),
            std::fs::read_to_string(root.path().join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let instance = found
        .iter()
        .find(|t| t["labels"]["service"] == "hello")
        .unwrap();
    assert!(
        instance["scrapeUrl"]
            .as_str()
            .unwrap()
            .ends_with(":8080/metrics"),
        "{instance}"
    );
    assert!(
        instance["labels"]["runway_instance"]
            .as_str()
            .unwrap()
            .starts_with(revision)
    );

    // The generated rules loaded, and recording from the ingress's series as requests come.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, _) = platform.get(HOST, "/", Duration::from_secs(10));
        assert_eq!(status, 200);
        let recorded = api(
            "/api/v1/query?query=service_env:runway_requests:rate5m%7Bservice%3D%22hello%22%2Cenv%3D%22dev%22%7D",
        );
        let value = recorded.as_ref().and_then(|r| {
            r["data"]["result"][0]["value"][1]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok())
        });
        if value.is_some_and(|v| v > 0.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no recorded request rate: {recorded:?}\n{:?}",
            api("/api/v1/rules")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let rules = api("/api/v1/rules").unwrap();
    let group = rules["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "runway:hello:dev")
        .unwrap_or_else(|| panic!("{rules}"));
    assert!(
        group["rules"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["health"] != "err"),
        "{group}"
    );
    // `runway top` and `runway status` show the last minutes' traffic per revision, from the
    // ingress's counters the control plane reads every 10 s.
    let deadline = Instant::now() + Duration::from_secs(40);
    let top =
        loop {
            let _ = platform.get(HOST, "/", Duration::from_secs(10));
            let top = platform.runway(&["top", "--once", "--output", "json"]);
            assert!(top.ok(), "{}", top.all());
            let rows = top.json();
            if let Some(row) = rows.as_array().unwrap().iter().find(|r| {
                r["revision"] == revision && r["requests_per_second"].as_f64() > Some(0.0)
            }) {
                break row.clone();
            }
            assert!(Instant::now() < deadline, "runway top: {}", top.all());
            std::thread::sleep(Duration::from_millis(500));
        };
    assert_eq!(top["error_ratio"], 0.0, "{top}");
    assert!(
        top["p99_seconds"].as_f64().is_some_and(|p| p > 0.0),
        "{top}"
    );
    let status = platform.runway(&["status", "--env", "dev", "--service", "hello"]);
    assert!(status.ok(), "{}", status.all());
    assert!(
        status.stdout.contains("REQ/S") && status.stdout.contains("0.00 %"),
        "{}",
        status.all()
    );
    let text = platform.runway(&["top", "--once"]);
    assert!(
        text.stdout.contains(revision) && text.stdout.contains("P99"),
        "{}",
        text.all()
    );
}
