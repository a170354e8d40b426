//! Progressive delivery and autoscaling end to end, through the real `runway server` and CLI:
//! a canary with a bad revision rolled back by its analysis under load, a good one walked to
//! 100 %, a paused rollout resumed, blue/green promoted, a dry run, and the autoscaler
//! following a load step and scaling to zero then cold-starting.
//!
//! The service is `support::APP` (a Python program run as a plain process); `FAIL_EVERY`
//! makes a revision answer every Nth request with a 500. Every wait is bounded and every
//! process is killed when a test ends (`support::Platform`'s drop). The tests that put load
//! on the machine take an exclusive lock.

#![allow(clippy::unwrap_used, reason = "tests")]

#[path = "../../runway-ingress/tests/support/otelcol.rs"]
mod otelcol;
mod support;

use std::path::Path;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use support::{
    FAST_AUTOSCALER, Load, Platform, Settings, have_python, live_instances, set_env_file,
    set_manifest,
};

/// Load tests run alone; the others share the machine.
static MACHINE: RwLock<()> = RwLock::new(());

const HOST: &str = "hello.dev.localhost";

fn events(platform: &Platform, id: &Value) -> Vec<String> {
    let (status, events) = platform.call(
        Method::GET,
        &format!("/v1/deployments/{}/events", support::id_text(id)),
        Some(&platform.token),
        None,
    );
    assert_eq!(status, 200, "{events}");
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn status(platform: &Platform) -> Value {
    platform.status("hello", "dev")
}

/// `runway deploy` without waiting: the deployment's id.
fn deploy_nowait(platform: &Platform, repo: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["deploy", "--env", "dev", "--output", "json"];
    args.extend_from_slice(extra);
    let ran = platform.runway_with(&args, Some(repo.as_os_str()), None, support::COMMAND);
    assert!(
        ran.ok(),
        "deploy: {}\nserver:\n{}",
        ran.all(),
        platform.log()
    );
    ran.json()["id"].clone()
}

/// Waits until `check` holds of the status, at most `bound`; returns that status.
fn wait_status(
    platform: &Platform,
    bound: Duration,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + bound;
    loop {
        let now = status(platform);
        if check(&now) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {bound:?}; status: {now:#}\nserver:\n{}",
            platform.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn weight_of(status: &Value, revision: &str) -> u64 {
    status["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["revision"] == revision)
        .map_or(0, |r| r["weight"].as_u64().unwrap_or(0))
}

/// A revision answering 5 % of its requests with a 500 is rolled back by the canary's first
/// analysis, under load: the only failed requests are those it answered itself in its step,
/// and none after the rollback. Then a good revision walks every step to 100 %.
#[test]
fn a_bad_canary_is_rolled_back_and_a_good_one_reaches_100() {
    let _alone = MACHINE.write().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], "canary-secret");
    let rollout = "      steps: [20, 50, 100]\n      pause_seconds: 2\n      analysis:\n        \
                   min_requests: 40\n";
    set_manifest(&repo, "runway_canary", rollout, 1, 1, 100);
    set_env_file(&repo, "dev", &[("GREETING", "v1")]);
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "first deploy: {}", first.all());
    platform.get(HOST, "/", Duration::from_secs(10));

    let client = platform.ingress_client(HOST);
    let load = Load::start(
        &platform.rt,
        &client,
        &platform.ingress_url(HOST, "/"),
        6,
        Some(40.0),
    );

    // The bad one: every 20th request a 500.
    set_env_file(&repo, "dev", &[("GREETING", "v2"), ("FAIL_EVERY", "20")]);
    let started = Instant::now();
    let bad = platform.deploy(&repo, "dev");
    let took = started.elapsed();
    assert!(!bad.ok(), "the bad canary succeeded: {}", bad.all());
    let (code, listed) = platform.call(
        Method::GET,
        "/v1/services/hello/environments/dev/deployments?limit=1",
        Some(&platform.token),
        None,
    );
    assert_eq!(code, 200);
    let deployment = &listed[0];
    assert_eq!(
        deployment["state"],
        "rolled_back",
        "{deployment:#}\n{}",
        bad.all()
    );
    let reason = deployment["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("error ratio"), "{reason}");
    let story = events(&platform, &deployment["id"]);
    assert!(
        story
            .iter()
            .any(|e| e.starts_with("runway_canary: step 1 of 3, hello-dev-00002 20 %")),
        "{story:#?}"
    );
    assert!(
        story
            .iter()
            .any(|e| e.starts_with("rolled back to hello-dev-00001")),
        "{story:#?}"
    );

    // Traffic is back on v1; the failures so far are all the bad revision's own 500s.
    let now = status(&platform);
    assert_eq!(weight_of(&now, "hello-dev-00001"), 100, "{now:#}");
    let (ok_at_rollback, failed_at_rollback) = load.snapshot();
    for failure in load.failures() {
        assert!(
            failure.starts_with("500 Internal Server Error: injected failure from hello-dev-00002"),
            "a failure not from the canary itself: {failure}"
        );
    }
    std::thread::sleep(Duration::from_secs(2));
    let (ok_after, failed_after) = load.snapshot();
    assert_eq!(
        failed_after, failed_at_rollback,
        "requests failed after the rollback"
    );
    assert!(ok_after > ok_at_rollback);
    eprintln!(
        "bad canary rolled back {:.1} s after the deploy; {failed_at_rollback} of {} requests \
         failed, all its own 500s",
        took.as_secs_f64(),
        ok_at_rollback + failed_at_rollback
    );

    // The good one walks 20 → 50 → 100 with no failed request.
    set_env_file(&repo, "dev", &[("GREETING", "v3")]);
    let good = platform.deploy(&repo, "dev");
    assert!(
        good.ok(),
        "good canary: {}\nserver:\n{}",
        good.all(),
        platform.log()
    );
    let (_, failed_end) = load.snapshot();
    assert_eq!(
        failed_end,
        failed_after,
        "the good canary failed requests: {:?}",
        load.failures()
    );
    let (code, listed) = platform.call(
        Method::GET,
        "/v1/services/hello/environments/dev/deployments?limit=1",
        Some(&platform.token),
        None,
    );
    assert_eq!(code, 200);
    let story = events(&platform, &listed[0]["id"]);
    for expected in [
        "runway_canary: step 1 of 3, hello-dev-00003 20 %",
        "runway_canary: step 2 of 3, hello-dev-00003 50 %",
        "rollout complete: hello-dev-00003 100 %",
    ] {
        assert!(
            story.iter().any(|e| e.starts_with(expected)),
            "{expected}: {story:#?}"
        );
    }
    // The steps after the first say what the window they leave showed.
    let passed = story
        .iter()
        .filter(|e| e.contains("(analysis passed: new revision ") && e.contains("5xx, p99"))
        .count();
    assert_eq!(passed, 2, "{story:#?}");
    let (ok, failed) = load.stop(&platform.rt);
    let now = status(&platform);
    assert_eq!(weight_of(&now, "hello-dev-00003"), 100, "{now:#}");
    eprintln!("canary test: {ok} requests, {failed} failed (the bad canary's own)");
}

/// A server restart in the middle of a canary step does not shorten the step's analysis: the
/// window's start is stored with the rollout, and the ingress (which outlives the server) kept
/// counting, so the step is judged on all its requests, not only those since the restart.
#[test]
fn a_restart_mid_canary_judges_the_step_over_its_whole_window() {
    let _alone = MACHINE.write().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    const PAUSE: u64 = 6;
    let mut platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], "canary-secret");
    let rollout = format!(
        "      steps: [50, 100]\n      pause_seconds: {PAUSE}\n      analysis:\n        \
         min_requests: 1\n"
    );
    set_manifest(&repo, "runway_canary", &rollout, 1, 1, 100);
    set_env_file(&repo, "dev", &[("GREETING", "v1")]);
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "first deploy: {}", first.all());
    platform.get(HOST, "/", Duration::from_secs(10));
    let client = platform.ingress_client(HOST);
    // 100 requests a second, half of them the canary's during its step.
    let load = Load::start(
        &platform.rt,
        &client,
        &platform.ingress_url(HOST, "/"),
        4,
        Some(25.0),
    );
    set_env_file(&repo, "dev", &[("GREETING", "v2")]);
    let id = deploy_nowait(&platform, &repo, &[]);
    wait_status(
        &platform,
        Duration::from_secs(30),
        "the canary at 50 %",
        |now| weight_of(now, "hello-dev-00002") == 50,
    );
    std::thread::sleep(Duration::from_secs(PAUSE / 2));
    // Mid-step, the status says the analysis so far: the manifest's limits with the defaults
    // for the rest, both revisions' counts since the step began, and how each stands.
    let mid = status(&platform);
    let analysis = &mid["rollout"]["analysis"];
    assert_eq!(analysis["revision"], "hello-dev-00002", "{mid:#}");
    assert_eq!(analysis["stable_revision"], "hello-dev-00001", "{mid:#}");
    assert_eq!(analysis["window_seconds"], json!(PAUSE as f64), "{mid:#}");
    let thresholds = &analysis["thresholds"];
    assert_eq!(thresholds["min_requests"], 1, "{mid:#}");
    assert_eq!(thresholds["max_error_ratio"], json!(0.01), "{mid:#}");
    assert_eq!(thresholds["latency_slo_seconds"], json!(1.024), "{mid:#}");
    assert_eq!(thresholds["max_restarts"], 0, "{mid:#}");
    for side in ["canary", "stable"] {
        assert!(
            analysis[side]["requests"].as_u64().unwrap_or(0) > 0,
            "{side}: {mid:#}"
        );
        assert_eq!(analysis[side]["errors_5xx"], 0, "{side}: {mid:#}");
    }
    let checks = &analysis["checks"];
    assert_eq!(checks["requests"]["standing"], "within", "{mid:#}");
    assert_eq!(checks["error_ratio"]["standing"], "within", "{mid:#}");
    // In force: the stable revision's 0 % plus half a point, under the absolute 1 %.
    assert_eq!(checks["error_ratio"]["limit"], json!(0.005), "{mid:#}");
    assert_eq!(checks["restarts"]["standing"], "within", "{mid:#}");
    assert!(
        ["pass", "inconclusive"].contains(&analysis["verdict"].as_str().unwrap_or_default()),
        "{mid:#}"
    );
    let text = platform.runway(&["status", "--service", "hello", "--env", "dev"]);
    let line = text
        .stdout
        .lines()
        .find(|line| line.starts_with("analysis since "))
        .unwrap_or_else(|| panic!("no analysis line: {}", text.all()));
    assert!(
        line.contains(&format!("({PAUSE} s window): "))
            && line.contains(" requests (min 1), 5xx 0.00 % (max 0.50 %), p99 "),
        "{line}"
    );
    eprintln!("mid-step: {line}");
    platform.kill9();
    platform.restart();
    let ended = platform.wait_deployment(&id, Duration::from_secs(60));
    assert_eq!(ended["state"], "succeeded", "{ended:#}\n{}", platform.log());
    let (ok, failed) = load.stop(&platform.rt);
    assert_eq!(failed, 0, "{ok} served");
    let story = events(&platform, &id);
    let judged: u64 = story
        .iter()
        .find_map(|e| e.split("(analysis passed: new revision ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no analysis in {story:#?}"));
    eprintln!(
        "a canary step of {PAUSE} s with the server restarted half way judged {judged} requests"
    );
    // About 50 a second for the whole step; from the restart on, under half of that.
    assert!(
        judged >= 50 * PAUSE * 3 / 4,
        "the step judged {judged} requests: {story:#?}"
    );
}

/// `deploy --pause` starts the new revision but takes no step until `rollout resume`;
/// `rollout abort` then rolls back at once. Blue/green stages the new revision at full
/// capacity on its tag URL with no traffic until `rollout promote`, then switches all of it
/// at once and keeps the old one warm for `keep_old_seconds`.
#[test]
fn pause_resume_abort_and_blue_green_promote() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], "pause-secret");
    set_manifest(
        &repo,
        "runway_canary",
        "      steps: [50, 100]\n      pause_seconds: 1\n      analysis:\n        min_requests: 1\n",
        1,
        1,
        100,
    );
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "first deploy: {}", first.all());

    // Paused: v2 becomes ready, but keeps 0 %.
    set_env_file(&repo, "dev", &[("GREETING", "v2")]);
    let paused = deploy_nowait(&platform, &repo, &["--pause"]);
    let now = wait_status(
        &platform,
        Duration::from_secs(20),
        "v2 ready while paused",
        |s| {
            s["revisions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["revision"] == "hello-dev-00002" && r["condition"] == "ready")
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    let now2 = status(&platform);
    assert_eq!(weight_of(&now2, "hello-dev-00002"), 0, "{now:#}\n{now2:#}");
    assert_eq!(now2["rollout"]["paused"], true, "{now2:#}");
    let text = platform.runway(&["status", "--service", "hello", "--env", "dev"]);
    assert!(text.stdout.contains("paused"), "{}", text.all());

    // Resumed: it steps to 50 %; aborted: all back on v1, rolled back.
    let resumed = platform.runway(&["rollout", "resume", "--service", "hello", "--env", "dev"]);
    assert!(resumed.ok(), "{}", resumed.all());
    wait_status(&platform, Duration::from_secs(10), "v2 at 50 %", |s| {
        weight_of(s, "hello-dev-00002") == 50
    });
    let aborted = platform.runway(&[
        "rollout",
        "abort",
        "--service",
        "hello",
        "--env",
        "dev",
        "--wait",
    ]);
    assert_eq!(
        aborted.code,
        Some(0),
        "abort --wait succeeds when the deployment was rolled back: {}",
        aborted.all()
    );
    assert!(
        aborted.stdout.contains("was rolled back"),
        "{}",
        aborted.all()
    );
    let deployment = platform.wait_deployment(&paused, Duration::from_secs(10));
    assert_eq!(deployment["state"], "rolled_back", "{deployment:#}");
    assert!(
        deployment["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("abort"),
        "{deployment:#}"
    );
    let now = status(&platform);
    assert_eq!(weight_of(&now, "hello-dev-00001"), 100, "{now:#}");

    // No deployment in progress: a command is refused, saying so.
    let refused = platform.runway(&["rollout", "promote", "--service", "hello", "--env", "dev"]);
    assert!(!refused.ok());
    assert!(
        refused
            .all()
            .contains("no deployment of hello/dev is pending or progressing"),
        "{}",
        refused.all()
    );

    // Blue/green: staged with no traffic, on its tag URL.
    set_manifest(
        &repo,
        "runway_blue_green",
        "      keep_old_seconds: 10\n",
        1,
        1,
        100,
    );
    set_env_file(&repo, "dev", &[("GREETING", "blue-green")]);
    let staged = deploy_nowait(&platform, &repo, &[]);
    wait_status(
        &platform,
        Duration::from_secs(20),
        "the green revision ready",
        |s| {
            s["revisions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["revision"] == "hello-dev-00003" && r["condition"] == "ready")
        },
    );
    // The status and the events say where to try it.
    let try_at = format!(
        "try it at https://r3---hello.dev.localhost:{}/",
        platform.https().port()
    );
    wait_status(&platform, Duration::from_secs(10), "staged", |s| {
        s["rollout"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&try_at))
    });
    assert!(
        events(&platform, &staged)
            .iter()
            .any(|e| e.contains(&try_at)),
        "{:#?}",
        events(&platform, &staged)
    );
    let (code, body) = platform.get("r3---hello.dev.localhost", "/", Duration::from_secs(10));
    assert_eq!(
        (code, body.starts_with("blue-green from hello-dev-00003")),
        (200, true),
        "{body}"
    );
    let (_, body) = platform.get(HOST, "/", Duration::from_secs(10));
    assert!(
        body.contains("hello-dev-00001"),
        "traffic moved before the switch: {body}"
    );
    let promoted = platform.runway(&["rollout", "promote", "--service", "hello", "--env", "dev"]);
    assert!(promoted.ok(), "{}", promoted.all());
    wait_status(&platform, Duration::from_secs(10), "switched", |s| {
        weight_of(s, "hello-dev-00003") == 100
    });
    // The deployment ends at the switch; the old one stays warm, then is stopped.
    let done = platform.wait_deployment(&staged, Duration::from_secs(20));
    assert_eq!(done["state"], "succeeded", "{done:#}");
    let now = status(&platform);
    assert_eq!(live_instances(&now, "hello-dev-00001"), 1, "{now:#}");
    platform.wait_retired("hello-dev-00001", Duration::from_secs(30));
    assert!(
        events(&platform, &staged)
            .iter()
            .any(|e| e.starts_with("hello-dev-00001 was kept warm for 10 s")),
        "{:#?}",
        events(&platform, &staged)
    );
    let story = events(&platform, &staged);
    assert!(
        story
            .iter()
            .any(|e| e.starts_with("switched: hello-dev-00003 100 %")),
        "{story:#?}"
    );
}

/// `dryrun` prints the plan and changes nothing: no instance of the new revision starts and
/// the serving revision keeps all its traffic.
#[test]
fn a_dry_run_changes_nothing() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], "dryrun-secret");
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "first deploy: {}", first.all());
    set_manifest(&repo, "dryrun", "", 1, 1, 100);
    let dry = platform.deploy(&repo, "dev");
    assert!(dry.ok(), "dry run: {}", dry.all());
    let (_, listed) = platform.call(
        Method::GET,
        "/v1/services/hello/environments/dev/deployments?limit=1",
        Some(&platform.token),
        None,
    );
    let reason = listed[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("dry run: nothing was started"),
        "{reason}"
    );
    assert!(reason.contains("100 % new"), "{reason}");
    assert!(
        dry.stdout.contains("was a dry run (")
            && dry
                .stdout
                .contains("hello-dev-00001 still serves dev of hello"),
        "{}",
        dry.all()
    );
    let now = status(&platform);
    assert_eq!(weight_of(&now, "hello-dev-00001"), 100, "{now:#}");
    assert_eq!(live_instances(&now, "hello-dev-00002"), 0, "{now:#}");
    // The dry run's revision is recorded, but is no part of what should run.
    let desired: Vec<&str> = now["desired"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["revision"].as_str())
        .collect();
    assert_eq!(desired, ["hello-dev-00001"], "{now:#}");

    // A first deploy's dry run starts nothing either.
    let fresh = platform.onboard("fresh", &["dev"], "dryrun-secret");
    set_manifest(&fresh, "dryrun", "", 1, 1, 100);
    let text = std::fs::read_to_string(fresh.join(".runway/runway.yml")).unwrap();
    std::fs::write(
        fresh.join(".runway/runway.yml"),
        text.replace("name: hello", "name: fresh"),
    )
    .unwrap();
    let dry = platform.deploy(&fresh, "dev");
    assert!(dry.ok(), "first dry run: {}", dry.all());
    std::thread::sleep(Duration::from_millis(500));
    let now = platform.status("fresh", "dev");
    assert!(now["instances"].as_array().unwrap().is_empty(), "{now:#}");
    assert!(now["routes"].as_array().unwrap().is_empty(), "{now:#}");
}

/// A load step from 1 to 200 clients (each request 500 ms at the instance, 50 at once per
/// instance) makes the autoscaler add instances; when the load stops they go back to the
/// minimum. Then with `min_instances: 0` the service goes to zero, and a request is served
/// after a cold start.
#[test]
fn the_autoscaler_follows_a_load_step_and_scales_to_zero() {
    let _alone = MACHINE.write().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings {
        control: FAST_AUTOSCALER.to_owned(),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev"], "scale-secret");
    set_manifest(&repo, "legacy", "", 1, 8, 50);
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "first deploy: {}", first.all());
    let revision = "hello-dev-00001";

    let client = platform.ingress_client(HOST);
    let url = platform.ingress_url(HOST, "/?sleep=0.5");
    let one = Load::start(&platform.rt, &client, &url, 1, None);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(live_instances(&status(&platform), revision), 1);
    let step = Instant::now();
    let step_up = Load::start(&platform.rt, &client, &url, 199, None);
    let scaled = wait_status(&platform, Duration::from_secs(20), "scaled up to 4+", |s| {
        s["revisions"][0]["ready"].as_u64().unwrap_or(0) >= 4
    });
    let reaction = step.elapsed();
    let decision = scaled["scaling"][0]["last_change"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!decision.is_empty(), "{scaled:#}");
    // The decision comes with its inputs: it replays to the same count.
    let event: runway_autoscaler::DecisionEvent =
        serde_json::from_value(scaled["scaling"][0]["last_change_event"].clone()).unwrap();
    let replayed = runway_autoscaler::decide_demand(
        &event.settings,
        &event.demand,
        &event.state_before,
        event.ready_instances,
        event.current_desired,
        event.at_ms,
    );
    assert_eq!(replayed.desired, event.desired, "{event:?}");
    let (step_counts, one_counts) = (
        std::sync::Arc::clone(&step_up.counts),
        std::sync::Arc::clone(&one.counts),
    );
    let (ok, failed) = step_up.stop(&platform.rt);
    let (ok1, failed1) = one.stop(&platform.rt);
    let step_failures = step_counts.failures.lock().unwrap().clone();
    let one_failures = one_counts.failures.lock().unwrap().clone();
    assert_eq!(
        failed + failed1,
        0,
        "requests failed while scaling: {step_failures:?} {one_failures:?}"
    );
    eprintln!(
        "1 → 200 clients: 4 instances ready {:.1} s after the step ({} requests); {decision}",
        reaction.as_secs_f64(),
        ok + ok1
    );
    wait_status(&platform, Duration::from_secs(30), "back to 1", |s| {
        live_instances(s, revision) == 1
    });

    // To zero, then a cold start.
    set_manifest(&repo, "legacy", "", 0, 6, 10);
    let second = platform.deploy(&repo, "dev");
    assert!(second.ok(), "deploy with min 0: {}", second.all());
    let revision = "hello-dev-00002";
    let zero = Instant::now();
    wait_status(&platform, Duration::from_secs(30), "scaled to zero", |s| {
        live_instances(s, revision) == 0 && s["instances"].as_array().unwrap().is_empty()
    });
    eprintln!(
        "to zero {:.1} s after the deploy",
        zero.elapsed().as_secs_f64()
    );
    let cold = Instant::now();
    let (code, body) = platform.get(HOST, "/", Duration::from_secs(20));
    let first_byte = cold.elapsed();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(revision), "{body}");
    eprintln!(
        "cold start: first response {:.0} ms after the request",
        first_byte.as_secs_f64() * 1000.0
    );
    let now = status(&platform);
    assert_eq!(live_instances(&now, revision), 1, "{now:#}");
}

/// A worker that notes what it does in `WORK_LOG`: a tick every 200 ms; on SIGQUIT it stops
/// taking work, finishes the job in hand (1 s) and exits, unless `IGNORE_QUIT=1`.
const WORKER: &str = r#"import os, signal, time
gen, log = os.environ["GEN"], os.environ["WORK_LOG"]
quitting = False

def note(what):
    with open(log, "a") as f:
        f.write(f"{time.time():.3f} {gen} {what}\n")

def on_quit(*_):
    global quitting
    if os.environ.get("IGNORE_QUIT") == "1":
        note("ignores SIGQUIT")
        return
    quitting = True
    note("quitting")

signal.signal(signal.SIGQUIT, on_quit)
note("started")
while not quitting:
    note("tick")
    time.sleep(0.2)
time.sleep(1.0)
note("done")
"#;

/// The worker's notes: (time, generation, what).
fn work_log(path: &Path) -> Vec<(f64, String, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            Some((
                parts.next()?.parse().ok()?,
                parts.next()?.to_owned(),
                parts.next()?.to_owned(),
            ))
        })
        .collect()
}

fn first(log: &[(f64, String, String)], generation: &str, what: &str) -> Option<f64> {
    log.iter()
        .find(|(_, g, w)| g == generation && w == what)
        .map(|(t, _, _)| *t)
}

/// Workers roll as GRIT's runners do: the new generation starts and is healthy, then the old
/// one gets SIGQUIT, finishes the job in hand and exits; one that ignores SIGQUIT is killed
/// when its stop grace runs out. Generations never overlap past that, and the control loop is
/// not held up while an old one finishes.
#[test]
fn workers_roll_new_first_then_the_old_quits_within_its_grace() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    // The workers note what they do in a file of this test's: not isolated, so they can.
    let platform = Platform::start(&Settings {
        sections: "runtime:\n  isolate_processes: false\n".to_owned(),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev"], "worker-secret");
    std::fs::write(repo.join("worker.py"), WORKER).unwrap();
    std::fs::write(
        repo.join(".runway/runway.yml"),
        "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: hello\nspec:\n  \
         regions: [local]\n  workload:\n    kind: worker\n    stop_grace_period_seconds: 2\n    \
         process:\n      command: [\"python3\", \"worker.py\"]\n    secrets: [API_KEY]\n",
    )
    .unwrap();
    let log_path = platform.dir.path().join("work.log");
    let log_text = log_path.to_str().unwrap();
    let deploy = |generation: &str, ignore_quit: &str| {
        set_env_file(
            &repo,
            "dev",
            &[
                ("GEN", generation),
                ("WORK_LOG", log_text),
                ("IGNORE_QUIT", ignore_quit),
            ],
        );
        let started = Instant::now();
        let ran = platform.deploy(&repo, "dev");
        assert!(
            ran.ok(),
            "deploy {generation}: {}\nserver:\n{}",
            ran.all(),
            platform.log()
        );
        started.elapsed()
    };
    let wait_for = |generation: &str, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = work_log(&log_path);
            if let Some(at) = first(&log, generation, what) {
                return (at, log);
            }
            assert!(
                Instant::now() < deadline,
                "no `{generation} {what}`: {log:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    deploy("g1", "0");
    wait_for("g1", "tick");
    let took = deploy("g2", "0");
    let (done, log) = wait_for("g1", "done");
    let g2_started = first(&log, "g2", "started").unwrap();
    let g1_quit = first(&log, "g1", "quitting").unwrap();
    assert!(
        g2_started < g1_quit,
        "the old one quit before the new started: {log:?}"
    );
    let late: Vec<_> = log
        .iter()
        .filter(|(t, g, w)| g == "g1" && w == "tick" && *t > g1_quit)
        .collect();
    assert!(late.is_empty(), "g1 took work after SIGQUIT: {late:?}");
    assert!(done - g1_quit >= 0.9, "g1 did not finish its job: {log:?}");
    eprintln!(
        "worker roll: deploy took {:.1} s; g1 quit {:.2} s after g2 started and finished its job in {:.2} s",
        took.as_secs_f64(),
        g1_quit - g2_started,
        done - g1_quit
    );

    // A generation that ignores SIGQUIT is killed when its 2 s grace runs out; the loop is
    // not held up meanwhile (the next deploy ends before the kill).
    deploy("g3", "1");
    wait_for("g2", "done");
    let took = deploy("g4", "0");
    let (ignored, _) = wait_for("g3", "ignores SIGQUIT");
    platform.wait_retired("hello-dev-00003", Duration::from_secs(20));
    let log = work_log(&log_path);
    let last_g3 = log
        .iter()
        .filter(|(_, g, _)| g == "g3")
        .map(|(t, _, _)| *t)
        .fold(0.0, f64::max);
    assert!(
        last_g3 - ignored < 2.6,
        "g3 ran {:.2} s past SIGQUIT with a 2 s grace: {log:?}",
        last_g3 - ignored
    );
    assert!(
        took < Duration::from_secs(10),
        "deploying g4 took {took:?} while g3 was being stopped"
    );
    let now = status(&platform);
    assert_eq!(now["instances"].as_array().unwrap().len(), 1, "{now:#}");
}

/// Blue/green with `auto_switch_after_seconds` switches by itself once the new revision has
/// been ready that long; the deployment ends there, the old revision warm, and a rollback to
/// it is served at once by its instance still running.
#[test]
fn blue_green_switches_by_itself_and_rolls_back_to_the_warm_revision() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], "switch-secret");
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "first deploy: {}", first.all());
    let (_, blue) = platform.get(HOST, "/", Duration::from_secs(10));
    assert!(
        blue.starts_with("hello from hello-dev-00001 pid "),
        "{blue}"
    );
    set_manifest(
        &repo,
        "runway_blue_green",
        "      auto_switch_after_seconds: 1\n      keep_old_seconds: 60\n",
        1,
        1,
        100,
    );
    set_env_file(&repo, "dev", &[("GREETING", "green")]);
    let started = Instant::now();
    let switched = platform.deploy(&repo, "dev");
    assert!(
        switched.ok(),
        "{}\nserver:\n{}",
        switched.all(),
        platform.log()
    );
    // The deployment ends at the switch: it does not wait out the old revision's warm time.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(30),
        "{took:?}: {}",
        switched.all()
    );
    assert!(
        switched
            .stdout
            .contains("switched: hello-dev-00002 100 %, hello-dev-00001 kept warm for 60 s"),
        "{}",
        switched.all()
    );
    let (_, green) = platform.get(HOST, "/", Duration::from_secs(10));
    assert!(green.starts_with("green from hello-dev-00002"), "{green}");
    let now = status(&platform);
    assert!(now["rollout"].is_null(), "{now:#}");
    assert_eq!(live_instances(&now, "hello-dev-00001"), 1, "{now:#}");

    // The rollback to the warm revision is instant: the same process serves again.
    let back = platform.runway_for(
        &[
            "rollback",
            "--service",
            "hello",
            "--env",
            "dev",
            "--to",
            "hello-dev-00001",
            "--wait",
        ],
        Duration::from_secs(60),
    );
    assert!(back.ok(), "{}", back.all());
    let (_, again) = platform.get(HOST, "/", Duration::from_secs(10));
    assert_eq!(again, blue, "not the warm instance");
    platform.wait_retired("hello-dev-00002", Duration::from_secs(20));
}

/// `runway deploy --image` through the server: an image from a registry on loopback (plain
/// HTTP, named in the server's `runtime.insecure_registries`) is pulled, run under runc with
/// its variables and secret, served through the ingress, replaced by a second image with no
/// failed request, scaled to zero and cold-started.
#[test]
fn an_image_is_deployed_replaced_and_cold_started() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !runway_oci::testing::require_tools(
        "deploying images",
        &["docker-registry", "skopeo", "umoci", "busybox", "runc"],
    ) {
        return;
    }
    let registry = runway_oci::testing::Registry::start().unwrap();
    let platform = Platform::start(&Settings {
        control: FAST_AUTOSCALER.to_owned(),
        sections: format!(
            "runtime:\n  insecure_registries: [\"{}\"]\n",
            registry.host()
        ),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev"], "image-secret");
    support::set_image_manifest(&repo, 1, 1);
    let deploy_image = |tag: &str, page: &str| {
        let pushed = runway_oci::testing::push_busybox_image(
            &registry,
            "team/web",
            tag,
            &support::web_image(page),
        )
        .unwrap();
        let ran = platform.deploy_image(&repo, "dev", &pushed.reference);
        assert!(
            ran.ok(),
            "deploy {}: {}\nserver:\n{}",
            pushed.reference,
            ran.all(),
            platform.log()
        );
        pushed
    };

    // An image the registry does not have is refused at once, saying so, with its field.
    let missing = format!("{}/team/web:nope", registry.host());
    let refused = platform.deploy_image(&repo, "dev", &missing);
    assert!(!refused.ok(), "{}", refused.all());
    assert!(
        refused.stderr.contains(&format!(
            "cannot resolve image \"{missing}\": image {missing} not found"
        )) && refused.stderr.contains("(flag `--image`)"),
        "{}",
        refused.all()
    );

    let first = deploy_image("1", "one\n");
    let (code, body) = platform.get(HOST, "/index.html", Duration::from_secs(10));
    assert_eq!((code, body.as_str()), (200, "one\n"));
    let (code, body) = platform.get(HOST, "/cgi-bin/env", Duration::from_secs(10));
    assert_eq!(code, 200, "{body}");
    assert_eq!(body.trim(), "hello from hello-dev-00001 secret=set");
    // The revision records the image pinned by digest.
    let (code, revisions) = platform.call(
        Method::GET,
        "/v1/services/hello/environments/dev/revisions",
        Some(&platform.token),
        None,
    );
    assert_eq!(code, 200, "{revisions}");
    assert!(
        revisions.to_string().contains(&first.digest.to_string()),
        "{revisions:#}"
    );

    // A second image replaces the first under load, with no failed request.
    let client = platform.ingress_client(HOST);
    let url = platform.ingress_url(HOST, "/index.html");
    let load = Load::start(&platform.rt, &client, &url, 4, None);
    deploy_image("2", "two\n");
    let counts = std::sync::Arc::clone(&load.counts);
    let (ok, failed) = load.stop(&platform.rt);
    assert_eq!(
        failed,
        0,
        "requests failed while replacing the image: {:?}",
        counts.failures.lock().unwrap()
    );
    assert!(ok > 0);
    let (code, body) = platform.get(HOST, "/index.html", Duration::from_secs(10));
    assert_eq!((code, body.as_str()), (200, "two\n"));

    // To zero, then a cold start of the cached image.
    support::set_image_manifest(&repo, 0, 1);
    deploy_image("2", "two\n");
    wait_status(&platform, Duration::from_secs(30), "scaled to zero", |s| {
        s["instances"].as_array().unwrap().is_empty()
    });
    let cold = Instant::now();
    let (code, body) = platform.get(HOST, "/cgi-bin/env", Duration::from_secs(20));
    assert_eq!(code, 200, "{body}");
    assert_eq!(body.trim(), "hello from hello-dev-00003 secret=set");
    eprintln!(
        "image cold start: first response {:.0} ms after the request",
        cold.elapsed().as_secs_f64() * 1000.0
    );

    // The data directory lets the container's root search through it; what is inside and
    // private stays private.
    let mode = |path: &str| {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(platform.data.join(path)).unwrap();
        meta.permissions().mode() & 0o777
    };
    let modes: Vec<(&str, u32)> = [
        "",
        "runway.db",
        "master.key",
        "ca/ca-key.pem",
        "runtime/instances",
        "runtime/images/blobs",
    ]
    .into_iter()
    .map(|path| (path, mode(path)))
    .collect();
    assert_eq!(
        modes,
        [
            ("", 0o711),
            ("runway.db", 0o600),
            ("master.key", 0o600),
            ("ca/ca-key.pem", 0o600),
            ("runtime/instances", 0o700),
            ("runtime/images/blobs", 0o700),
        ]
    );
}

/// Blue/green with `min_instances: 0`, the stable revision scaled to zero: the deploy does not
/// start it only to stop it again, and the switch says it is kept with no instance rather
/// than "warm for an instant rollback".
#[test]
fn blue_green_from_zero_neither_wakes_the_stable_revision_nor_calls_it_warm() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings {
        control: FAST_AUTOSCALER.to_owned(),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev"], "zero-secret");
    let rollout = "      auto_switch_after_seconds: 1\n      keep_old_seconds: 60\n";
    set_manifest(&repo, "runway_blue_green", rollout, 0, 1, 100);
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "first deploy: {}", first.all());
    wait_status(&platform, Duration::from_secs(30), "scaled to zero", |s| {
        live_instances(s, "hello-dev-00001") == 0
    });

    set_env_file(&repo, "dev", &[("GREETING", "green")]);
    let second = platform.deploy(&repo, "dev");
    assert!(second.ok(), "{}\nserver:\n{}", second.all(), platform.log());
    assert!(
        second
            .stdout
            .contains("switched: hello-dev-00002 100 %, hello-dev-00001 kept for 60 s (until")
            && second
                .stdout
                .contains("with no instance (it had scaled to zero)"),
        "{}",
        second.all()
    );
    assert!(
        !second.stdout.contains("instance hello-dev-00001-"),
        "the stable revision was started: {}",
        second.all()
    );
    assert_eq!(live_instances(&status(&platform), "hello-dev-00001"), 0);
}

/// `spec.workload.tag_header`, through the real ingress: before the service enables it, a
/// request carrying `Runway-Tag` is refused (400). Enabled, the header reaches the revision with
/// that tag on the service's own name, a blue/green revision staged with no traffic too, and
/// never the instance; a tag no revision serves is a 404, not the revision the weights give.
#[test]
fn a_tag_header_reaches_a_revision_where_the_service_enables_it() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], "tag-header-secret");
    let deploy = platform.deploy(&repo, "dev");
    assert!(deploy.ok(), "{}\n{}", deploy.all(), platform.log());
    let client = platform.ingress_client(HOST);
    let get = |path: &str, tag: Option<&str>| {
        let mut request = client.get(platform.ingress_url(HOST, path));
        if let Some(tag) = tag {
            request = request.header("Runway-Tag", tag);
        }
        platform.rt.block_on(async {
            let response = request
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.text().await.unwrap_or_default())
        })
    };
    let (status, body) = get("/", Some("r1"));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("spec.workload.tag_header"), "{body}");

    // Enabled by the revision that serves (the route's settings are its heaviest revision's),
    // then a third staged beside it with no traffic.
    let path = repo.join(".runway/runway.yml");
    let enable = || {
        let text = std::fs::read_to_string(&path).unwrap();
        let enabled = text.replacen(
            "  workload:\n",
            "  workload:\n    tag_header: Runway-Tag\n",
            1,
        );
        std::fs::write(&path, enabled).unwrap();
    };
    enable();
    let deploy = platform.deploy(&repo, "dev");
    assert!(deploy.ok(), "{}\n{}", deploy.all(), platform.log());
    set_manifest(
        &repo,
        "runway_blue_green",
        "      keep_old_seconds: 30\n",
        1,
        1,
        100,
    );
    enable();
    set_env_file(&repo, "dev", &[("GREETING", "staged")]);
    deploy_nowait(&platform, &repo, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let staged = loop {
        let (status, body) = get("/", Some("r3"));
        if status == 200 {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "r3 never served: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        staged.starts_with("staged from hello-dev-00003"),
        "{staged}"
    );
    // Without the header, the weights: all of it still on the second.
    for _ in 0..5 {
        let (status, body) = get("/", None);
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("hello-dev-00002"), "{body}");
    }
    let (_, body) = get("/", Some("r2"));
    assert!(body.contains("hello-dev-00002"), "{body}");
    // The first is retired: its tag gets no answer of another revision's (a 503 while its
    // instance drains, a 404 once it is gone from the table).
    let (status, body) = get("/", Some("r1"));
    assert!(matches!(status, 404 | 503), "{status} {body}");
    let (status, body) = get("/", Some("r7"));
    assert_eq!(status, 404, "{body}");
    let (_, body) = get("/header?name=Runway-Tag", Some("r3"));
    assert_eq!(body, "Runway-Tag=None\n", "the instance saw the header");
}

/// The operator's and the service's controls through the real server and ingress: `runway
/// maintenance on` answers 503 with the message and `Retry-After` (instances untouched), lets
/// a listed network through, and `off` serves again; a manifest's per-client rate limit
/// answers 429 past its burst, and its address list 403 to a client it does not name.
#[test]
fn maintenance_rate_limits_and_address_lists_through_the_real_ingress() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], "controls-secret");
    let deploy = platform.deploy(&repo, "dev");
    assert!(deploy.ok(), "{}\n{}", deploy.all(), platform.log());
    let client = platform.ingress_client(HOST);
    let get = || {
        platform.rt.block_on(async {
            let response = client
                .get(platform.ingress_url(HOST, "/"))
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let retry = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            (status, retry, response.text().await.unwrap_or_default())
        })
    };
    // Each change reaches the ingress with the next table: wait for it, boundedly.
    let until = |what: &str, ok: &dyn Fn(u16, &str) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (status, retry, body) = get();
            if ok(status, &body) {
                return (status, retry, body);
            }
            assert!(
                Instant::now() < deadline,
                "{what}: still {status} {body}\n{}",
                platform.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    assert_eq!(get().0, 200);
    let target = ["--service", "hello", "--env", "dev"];
    let on = |extra: &[&str]| {
        let mut args = vec!["maintenance", "on"];
        args.extend_from_slice(&target);
        args.extend_from_slice(extra);
        let ran = platform.runway(&args);
        assert!(ran.ok(), "{}", ran.all());
        ran
    };
    let ran = on(&[
        "--message",
        "Moving to a bigger database; back by 14:00 UTC",
        "--retry-after",
        "60",
    ]);
    assert!(
        ran.stdout.contains("hello in dev is in maintenance"),
        "{}",
        ran.all()
    );
    let (_, retry, body) = until("maintenance on", &|s, _| s == 503);
    assert_eq!(body, "Moving to a bigger database; back by 14:00 UTC\n");
    assert_eq!(retry, "60");
    let shown = platform.runway(&[
        "maintenance",
        "status",
        "--service",
        "hello",
        "--env",
        "dev",
        "--output",
        "json",
    ]);
    let shown: Value = serde_json::from_str(&shown.stdout).unwrap();
    assert_eq!(shown["retry_after_seconds"], 60);
    assert_eq!(shown["set_by"], "admin");
    let now = status(&platform);
    assert!(
        live_instances(&now, "hello-dev-00001") > 0,
        "instances keep running"
    );
    assert_eq!(now["maintenance"]["set_by"], "admin", "{now}");
    let text = platform.runway(&["status", "--service", "hello", "--env", "dev"]);
    assert!(
        text.stdout.contains("in maintenance since")
            && text.stdout.contains("Moving to a bigger database"),
        "{}",
        text.all()
    );
    // The team's own network is let through.
    on(&["--allow", "127.0.0.0/8"]);
    until("let through", &|s, _| s == 200);
    let off = platform.runway(&["maintenance", "off", "--service", "hello", "--env", "dev"]);
    assert!(
        off.ok() && off.stdout.contains("served again"),
        "{}",
        off.all()
    );
    let shown = platform.runway(&[
        "maintenance",
        "status",
        "--service",
        "hello",
        "--env",
        "dev",
    ]);
    assert!(
        shown.stdout.contains("not in maintenance"),
        "{}",
        shown.all()
    );
    // An environment the service lacks is an error, not "not in maintenance".
    let missing = platform.runway(&[
        "maintenance",
        "status",
        "--service",
        "hello",
        "--env",
        "nosuch",
    ]);
    assert!(
        !missing.ok() && missing.all().contains("not found"),
        "{}",
        missing.all()
    );
    let refused = platform.runway(&[
        "maintenance",
        "on",
        "--service",
        "hello",
        "--env",
        "dev",
        "--allow",
        "10.0.0.1/8",
    ]);
    assert!(
        !refused.ok() && refused.all().contains("allow[0]"),
        "{}",
        refused.all()
    );

    // The manifest's own: a client's burst of 3, then 429 for 5 s a request.
    let path = repo.join(".runway/runway.yml");
    let original = std::fs::read_to_string(&path).unwrap();
    let with = |workload: &str| {
        let text = original.replacen("  workload:\n", &format!("  workload:\n{workload}"), 1);
        std::fs::write(&path, text).unwrap();
        let deploy = platform.deploy(&repo, "dev");
        assert!(deploy.ok(), "{}\n{}", deploy.all(), platform.log());
    };
    with(
        "    rate_limit:\n      per_client:\n        requests_per_second: 0.2\n        burst: 3\n",
    );
    let (status, retry, body) = until("rate limited", &|s, _| s == 429);
    assert_eq!(retry, "5", "{status} {body}");
    assert!(body.contains("too many requests"), "{body}");
    with(
        "    rate_limit:\n      per_client:\n        requests_per_second: 1000\n    client_addresses:\n      allow: [192.0.2.0/24]\n",
    );
    let (_, _, body) = until("refused by address", &|s, _| s == 403);
    assert!(body.contains("127.0.0.1"), "{body}");
}

/// A cold start through the real server, traced: `ingress.tracing` sends the ingress's spans to
/// a real OpenTelemetry Collector; a request to a service scaled to zero, in the caller's own
/// trace, shows its hold (the instance starting) as a span of its own under the request's,
/// then the call to the instance.
#[test]
fn a_cold_start_shows_its_hold_in_the_trace() {
    let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let Some(binary) = otelcol::collector_binary() else {
        return;
    };
    let collector = otelcol::Collector::start(&binary);
    let platform = Platform::start(&Settings {
        control: FAST_AUTOSCALER.to_owned(),
        ingress: format!("  tracing:\n    otlp_endpoint: {}\n", collector.endpoint),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev"], "traced-secret");
    set_manifest(&repo, "legacy", "", 0, 2, 10);
    let deploy = platform.deploy(&repo, "dev");
    assert!(deploy.ok(), "{}\n{}", deploy.all(), platform.log());
    wait_status(&platform, Duration::from_secs(30), "scaled to zero", |s| {
        live_instances(s, "hello-dev-00001") == 0 && s["instances"].as_array().unwrap().is_empty()
    });
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client = platform.ingress_client(HOST);
    let (status, body) = platform.rt.block_on(async {
        let response = client
            .get(platform.ingress_url(HOST, "/"))
            .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .unwrap();
        (
            response.status().as_u16(),
            response.text().await.unwrap_or_default(),
        )
    });
    assert_eq!(status, 200, "{body}\n{}", platform.log());
    let spans = collector.trace(trace, 3);
    let request = otelcol::named(&spans, "GET");
    let hold = otelcol::named(&spans, "hold");
    let upstream = otelcol::named(&spans, "upstream");
    assert_eq!(request["parentSpanId"], "00f067aa0ba902b7");
    for child in [hold, upstream] {
        assert_eq!(child["parentSpanId"], request["spanId"], "{child}");
    }
    let held_ms = (otelcol::nanos(hold, "endTimeUnixNano")
        - otelcol::nanos(hold, "startTimeUnixNano"))
        / 1_000_000;
    assert!(held_ms > 0, "{hold}");
    assert!(
        otelcol::nanos(upstream, "startTimeUnixNano") >= otelcol::nanos(hold, "endTimeUnixNano")
    );
    let attributes = request["attributes"].to_string();
    assert!(
        attributes.contains("hello-dev-00001") && attributes.contains("runway.service"),
        "{attributes}"
    );
    eprintln!("cold start traced: held {held_ms} ms before the instance took the request");
}
