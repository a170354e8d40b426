//! Progressive delivery and autoscaling figures, on the real `runway server` driven by the real
//! CLI: the cold start's time to first byte through the ingress (beside the app's own start
//! when run directly), 25 services started from zero at the same moment, the autoscaler's
//! reaction to a load step (1 → 40 clients) and its way back down, and failed requests
//! during 20 canary rollouts in a row under a paced ~1,000 req/s load. The autoscaler runs with
//! short windows (4 s stable, 1 s panic, 1 s grace) so that scaling to zero takes seconds.
//! Run with `cargo bench -p runway --bench delivery`.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark prints its figures"
)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::Method;
use runway_oci::testing::Registry;
use serde_json::Value;
use support::{
    FAST_AUTOSCALER, Load, Platform, Settings, live_instances, median, millis, percentile,
    set_env_file, set_manifest,
};

/// Cold starts timed one after the other, and direct starts of the app: enough for a p99.
const COLD: usize = 20;
/// Services started from zero at once.
const PARALLEL: usize = 25;
/// Clients after the load step (before it: one).
const STEP_CLIENTS: usize = 40;
/// Ready instances waited for after the step.
const STEP_READY: u64 = 4;
/// Canary rollouts under the paced load.
const CANARIES: usize = 20;
/// The paced load: clients × rate each.
const CLIENTS: usize = 50;
const PER_CLIENT: f64 = 20.0;

fn main() {
    if !support::have_python() {
        return;
    }
    let begun = Instant::now();
    // The image figure's registry, on loopback over plain HTTP, which the server is told of.
    let registry = image_tools_missing()
        .map_or_else(|| Ok(runway_oci::testing::Registry::start().unwrap()), Err);
    let sections = match &registry {
        Ok(registry) => format!(
            "runtime:\n  insecure_registries: [\"{}\"]\n",
            registry.host()
        ),
        Err(_) => String::new(),
    };
    let platform = Platform::start(&Settings {
        control: FAST_AUTOSCALER.to_owned(),
        sections,
        ..Settings::default()
    });
    println!(
        "runway delivery figures (autoscaler: 250 ms interval, 4 s stable window, 1 s panic window, 1 s grace to zero)"
    );

    cold_start(&platform);
    let image = image_cold_start(&platform, registry.as_ref());
    parallel_cold_starts(&platform, None);
    if let Some(image) = image {
        parallel_cold_starts(&platform, Some(&image));
    }
    load_step(&platform);
    canaries(&platform);

    println!("(bench ran {:.0} s)", begun.elapsed().as_secs_f64());
}

/// Figure 1: one service at zero, one request, time to the response's headers; beside it the
/// app's own start (`python3 app.py` to its first answer) and a request on a fresh connection
/// to a running instance (TLS and the ingress, no start).
fn cold_start(platform: &Platform) {
    let name = "cold";
    let host = host(name);
    let repo = platform.onboard(name, &["dev"], "bench-secret");
    set_manifest(&repo, "legacy", "", 0, 1, 100);
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "deploy {name}: {}", first.all());

    let (cold_ms, to_zero_s) = cold_requests(platform, name, "/");
    // Warm: the instance the last cold start left, each request on a new client (new TLS
    // connection), as the cold ones were.
    let mut warm_ms = Vec::new();
    for _ in 0..COLD {
        let client = platform.ingress_client(&host);
        let url = platform.ingress_url(&host, "/");
        let (ms, code) = platform.rt.block_on(ttfb(&client, &url));
        assert_eq!(code, 200);
        warm_ms.push(ms);
    }
    let app_ms: Vec<f64> = (0..COLD).map(|_| app_start_ms(&repo)).collect();
    println!();
    println!(
        "1. cold start, process artifact, {COLD} times (time to response headers, HTTPS through the ingress, new connection):"
    );
    println!("   cold TTFB                   {}", stats(&cold_ms));
    println!("   warm TTFB, new connection   {}", stats(&warm_ms));
    println!(
        "   app alone (python3 app.py to its first answer on /healthz, run directly) {}",
        stats(&app_ms)
    );
    println!(
        "   platform overhead ≈ cold − app alone: {} (median cold − app − warm: {:.0} ms)",
        platform_share(&cold_ms, &app_ms),
        median(&cold_ms) - median(&app_ms) - median(&warm_ms)
    );
    print_back_to_zero(&to_zero_s);
}

/// The first tool the image figure needs that is not installed.
fn image_tools_missing() -> Option<&'static str> {
    ["docker-registry", "skopeo", "umoci", "runc"]
        .into_iter()
        .find(|tool| !runway_oci::testing::tool_available(tool))
}

/// Figure 1b: the same cold start for an image artifact (busybox httpd, pushed to a registry on
/// loopback, deployed with `runway deploy --image`); beside it the local runtime's own start of
/// the same image, ensure → ready, run directly.
/// Returns the image's reference once it has been deployed and served, for figure 2b.
fn image_cold_start(platform: &Platform, registry: Result<&Registry, &&str>) -> Option<String> {
    use runway_oci::testing::{BusyboxImage, push_busybox_image};
    let registry = match registry {
        Ok(registry) => registry,
        Err(missing) => {
            println!();
            println!("figure 1b skipped: {missing} is missing");
            return None;
        }
    };
    let image = BusyboxImage {
        entrypoint: vec!["/bin/sh".into(), "-c".into()],
        cmd: vec!["trap 'exit 0' TERM; httpd -f -p $PORT -h /www & wait".into()],
        env: vec!["PATH=/bin:/usr/bin".into()],
        files: vec![("www/index.html".into(), b"ok\n".to_vec(), 0o644)],
        ..BusyboxImage::default()
    };
    let pushed = push_busybox_image(registry, "bench/web", "1", &image).unwrap();

    let name = "cold-image";
    let repo = platform.onboard(name, &["dev"], "bench-secret");
    support::set_image_manifest(&repo, 0, 1);
    let first = platform.deploy_image(&repo, "dev", &pushed.reference);
    let (first_ready, ready) = runtime_image_ready_ms(registry, &pushed.pinned);
    println!();
    println!(
        "1b. cold start, OCI image artifact (busybox httpd, registry on loopback), {COLD} times \
         (time to response headers, HTTPS through the ingress, new connection):"
    );
    if first.ok() {
        let (cold_ms, to_zero_s) = cold_requests(platform, name, "/index.html");
        println!("   cold TTFB                   {}", stats(&cold_ms));
        print_image_alone(first_ready, &ready);
        println!(
            "   platform overhead ≈ cold − image alone: {}",
            platform_share(&cold_ms, &ready)
        );
        print_back_to_zero(&to_zero_s);
        Some(pushed.reference)
    } else {
        println!(
            "   not measured: runway deploy --image {} --wait failed (exit {:?}): {}",
            pushed.reference,
            first.code,
            first.stderr.trim()
        );
        let log = platform.log();
        for line in log
            .lines()
            .filter(|l| l.contains(name) || l.contains(&registry.host()))
        {
            println!("   server log: {line}");
        }
        print_image_alone(first_ready, &ready);
        None
    }
}

/// [`COLD`] cold requests to `path` of service `name`, each once it is back at zero, on a new
/// connection: their times to first byte (ms), and how long each wait for zero took (s).
fn cold_requests(platform: &Platform, name: &str, path: &str) -> (Vec<f64>, Vec<f64>) {
    let host = host(name);
    let mut cold_ms = Vec::new();
    let mut to_zero_s = Vec::new();
    for _ in 0..COLD {
        let quiet = Instant::now();
        wait_zero(platform, name, Duration::from_secs(60));
        to_zero_s.push(quiet.elapsed().as_secs_f64());
        let client = platform.ingress_client(&host);
        let url = platform.ingress_url(&host, path);
        let (ms, code) = platform.rt.block_on(ttfb(&client, &url));
        assert_eq!(code, 200, "cold request to {name}");
        cold_ms.push(ms);
    }
    (cold_ms, to_zero_s)
}

/// The waits for zero of [`cold_requests`]: the first follows the deploy, the others a request.
fn print_back_to_zero(to_zero_s: &[f64]) {
    println!(
        "   (back to zero took {} after each request; after the first deploy {:.1} s)",
        stats_s(&to_zero_s[1..]),
        to_zero_s[0]
    );
}

fn print_image_alone(first_ready: f64, ready: &[f64]) {
    println!(
        "   image alone (local runtime, cached image, ensure → ready on /index.html, run directly) {}",
        stats(ready)
    );
    println!("   (its first start, pull and unpack included: {first_ready:.0} ms)");
}

/// The local runtime on its own, in a fresh state directory: ms from `instance_ensure` to
/// ready for the image, the first start (pull and unpack) apart, then [`COLD`] cached starts.
fn runtime_image_ready_ms(
    registry: &runway_oci::testing::Registry,
    pinned: &str,
) -> (f64, Vec<f64>) {
    use std::collections::BTreeMap;

    use runway_runtime::spec::{
        Artifact, Check, InstanceSpec, Limits, LogLimits, Probe, Probes, RestartPolicy,
    };
    use runway_runtime::{LocalConfig, LocalRuntime, Runtime, SupervisorCommand};

    let state = tempfile::tempdir().unwrap();
    let supervisor = SupervisorCommand {
        program: env!("CARGO_BIN_EXE_runway-supervisor").into(),
        args: vec![],
    };
    let mut config = LocalConfig::new(state.path(), supervisor);
    config.pull.insecure_registries = vec![registry.host()];
    let runtime = LocalRuntime::new(config);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut first = 0.0;
    let mut ready = Vec::new();
    rt.block_on(async {
        for run in 0..=COLD {
            let id = format!("bench-delivery-image-{run}");
            let spec = InstanceSpec {
                id: id.clone(),
                service: "bench".to_owned(),
                revision: "bench-1".to_owned(),
                artifact: Artifact::Image {
                    reference: pinned.to_owned(),
                    command: None,
                    args: None,
                    working_dir: None,
                },
                env: BTreeMap::new(),
                secret_env: BTreeMap::new(),
                port: Some(0),
                container_port: None,
                probes: Probes {
                    startup: Some(Probe {
                        check: Check::Http {
                            path: "/index.html".to_owned(),
                        },
                        initial_delay: Duration::ZERO,
                        period: Duration::from_millis(10),
                        timeout: Duration::from_secs(1),
                        failure_threshold: 1000,
                        success_threshold: 1,
                    }),
                    ..Probes::default()
                },
                stop_signal: "TERM".parse().unwrap(),
                stop_grace_period: Duration::from_secs(5),
                restart: RestartPolicy::default(),
                limits: Limits::default(),
                logs: LogLimits::default(),
                managed: false,
                inherit_env: false,
                sandbox: None,
                network: None,
                egress: Default::default(),
                identity_token: None,
            };
            let started = Instant::now();
            runtime.instance_ensure(spec).await.unwrap();
            let mut status = runtime.watch(&id).await.unwrap();
            status.wait_for(|s| s.ready).await.unwrap();
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            if run == 0 {
                first = ms;
            } else {
                ready.push(ms);
            }
            runtime.instance_remove(&id).await.unwrap();
        }
    });
    (first, ready)
}

/// Figure 2: 25 services at zero, one request to each at the same moment; the Python app, or
/// (2b) the busybox `image` of figure 1b.
fn parallel_cold_starts(platform: &Platform, image: Option<&str>) {
    let started = Instant::now();
    let prefix = if image.is_some() { "zimg" } else { "zero" };
    let names: Vec<String> = (1..=PARALLEL).map(|n| format!("{prefix}-{n:02}")).collect();
    let mut deployments = Vec::new();
    for name in &names {
        let repo = platform.onboard(name, &["dev"], "bench-secret");
        match image {
            Some(image) => {
                support::set_image_manifest(&repo, 0, 1);
                deployments.push(deploy_nowait(platform, &repo, &["--image", image]));
            }
            None => {
                set_manifest(&repo, "legacy", "", 0, 1, 100);
                deployments.push(deploy_nowait(platform, &repo, &[]));
            }
        }
    }
    for id in &deployments {
        let ended = platform.wait_deployment(id, Duration::from_secs(180));
        assert_eq!(ended["state"], "succeeded", "{ended}");
    }
    let deployed = started.elapsed().as_secs_f64();
    for name in &names {
        wait_zero(platform, name, Duration::from_secs(90));
    }
    let at_zero = started.elapsed().as_secs_f64();

    let pem = std::fs::read(platform.ca()).unwrap();
    let mut builder = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()])
        .timeout(Duration::from_secs(60));
    for name in &names {
        builder = builder.resolve(&host(name), platform.https());
    }
    let client = builder.build().unwrap();
    let path = if image.is_some() { "/index.html" } else { "/" };
    let urls: Vec<String> = names
        .iter()
        .map(|name| platform.ingress_url(&host(name), path))
        .collect();
    let results: Vec<(f64, u16)> = platform.rt.block_on(async {
        let barrier = Arc::new(tokio::sync::Barrier::new(urls.len()));
        let tasks: Vec<_> = urls
            .iter()
            .map(|url| {
                let (client, url, barrier) = (client.clone(), url.clone(), Arc::clone(&barrier));
                tokio::spawn(async move {
                    barrier.wait().await;
                    ttfb(&client, &url).await
                })
            })
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap());
        }
        results
    });
    let answered = Instant::now();
    let ok = results.iter().filter(|(_, code)| *code == 200).count();
    let mut ms: Vec<f64> = results.iter().map(|(ms, _)| *ms).collect();
    ms.sort_by(f64::total_cmp);
    println!();
    println!(
        "{} {PARALLEL} services from zero, one request each at the same moment: p50 {:.0} ms, p95 {:.0} ms, \
         max {:.0} ms to first byte ({ok}/{PARALLEL} answered 200; Knative's test allows 2,000 ms at p95)",
        if image.is_some() {
            "2b. (busybox httpd image, cached)"
        } else {
            "2. (python3 app.py)"
        },
        percentile(&ms, 0.50),
        percentile(&ms, 0.95),
        ms.last().copied().unwrap_or_default()
    );
    if image.is_none() {
        print_apps_alone(platform);
    }
    println!(
        "   (onboarded and deployed in {deployed:.0} s, all at zero {:.0} s later)",
        at_zero - deployed
    );
    // Back to zero before the next figure, so that 25 idle instances do not share the machine.
    for name in &names {
        wait_zero(platform, name, Duration::from_secs(60));
    }
    println!(
        "   (all back at zero {:.1} s after the requests were answered)",
        answered.elapsed().as_secs_f64()
    );
}

/// Beside figure 2: the same starts without the platform.
fn print_apps_alone(platform: &Platform) {
    // The same starts without the platform: 25 `python3 app.py` at once, each to its first
    // answer (the machine's share of the figure: the starts compete for its cores).
    let repo = platform.dir.path().join("repo-zero-01");
    let barrier = Arc::new(std::sync::Barrier::new(PARALLEL));
    let threads: Vec<_> = (0..PARALLEL)
        .map(|_| {
            let (repo, barrier) = (repo.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                app_start_ms(&repo)
            })
        })
        .collect();
    let mut alone: Vec<f64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    alone.sort_by(f64::total_cmp);
    println!(
        "   the app alone, {PARALLEL} python3 app.py started directly at once: p50 {:.0} ms, p95 {:.0} ms, \
         max {:.0} ms to their first answer",
        percentile(&alone, 0.50),
        percentile(&alone, 0.95),
        alone.last().copied().unwrap_or_default()
    );
}

/// Figure 3: 1 → 40 clients on a service with 10 requests at once per instance (100 ms each).
fn load_step(platform: &Platform) {
    let name = "step";
    let host = host(name);
    let repo = platform.onboard(name, &["dev"], "bench-secret");
    set_manifest(&repo, "legacy", "", 1, 10, 10);
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "deploy {name}: {}", first.all());
    let revision = "step-dev-00001";

    let client = platform.ingress_client(&host);
    let url = platform.ingress_url(&host, "/?sleep=0.1");
    let one = Load::start(&platform.rt, &client, &url, 1, None);
    std::thread::sleep(Duration::from_secs(3));
    let before = status(platform, name);
    assert_eq!(live_instances(&before, revision), 1, "{before:#}");
    let change_before = scaling_of(&before, revision)["last_change_at"].clone();

    let step_ms = epoch_ms();
    let step = Instant::now();
    let rest = Load::start(&platform.rt, &client, &url, STEP_CLIENTS - 1, None);
    let (mut decision_ms, mut desired_s, mut ready_s) = (None, None, None);
    let mut decision = String::new();
    let mut peak = (0, 0);
    let deadline = step + Duration::from_secs(30);
    while Instant::now() < deadline && (ready_s.is_none() || decision_ms.is_none()) {
        let now = status(platform, name);
        let scaling = scaling_of(&now, revision);
        if decision_ms.is_none()
            && scaling["last_change_at"] != change_before
            && let Some(at) = scaling["last_change_at"].as_str()
        {
            decision_ms = Some(millis(at) - step_ms);
            decision = scaling["last_change"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
        }
        let (desired, ready) = counts(&now, revision);
        peak = (peak.0.max(desired), peak.1.max(ready));
        if desired_s.is_none() && desired > 1 {
            desired_s = Some(step.elapsed().as_secs_f64());
        }
        if ready_s.is_none() && ready >= STEP_READY {
            ready_s = Some(step.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // A little longer under load, to see where it settles.
    std::thread::sleep(Duration::from_secs(3));
    let settled = status(platform, name);
    let (desired_settled, ready_settled) = counts(&settled, revision);
    peak = (peak.0.max(desired_settled), peak.1.max(ready_settled));
    let (ok, failed) = rest.stop(&platform.rt);
    let (ok1, failed1) = one.stop(&platform.rt);
    let stopped = Instant::now();
    let mut back_s = None;
    while stopped.elapsed() < Duration::from_secs(60) {
        let now = status(platform, name);
        let (desired, _) = counts(&now, revision);
        if desired == 1 && live_instances(&now, revision) == 1 {
            back_s = Some(stopped.elapsed().as_secs_f64());
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let show =
        |s: Option<f64>| s.map_or_else(|| "not within 30 s".to_owned(), |s| format!("{s:.2} s"));
    println!();
    println!(
        "3. load step 1 → {STEP_CLIENTS} clients on /?sleep=0.1 (concurrency 10 per instance, min 1, max 10):"
    );
    println!(
        "   first scale-up decision (status scaling.last_change_at) {} after the step: {decision}",
        decision_ms.map_or_else(
            || "none within 30 s".to_owned(),
            |ms| format!("{:.2} s", ms / 1000.0)
        )
    );
    println!(
        "   desired instances > 1 seen in status {}; {STEP_READY} instances ready {}",
        show(desired_s),
        show(ready_s)
    );
    println!(
        "   3 s later: {desired_settled} desired, {ready_settled} ready (peak {} desired, {} ready); \
         {} requests, {} failed",
        peak.0,
        peak.1,
        ok + ok1,
        failed + failed1
    );
    println!(
        "   after the load stopped: back to 1 instance in {}",
        back_s.map_or_else(|| "more than 60 s".to_owned(), |s| format!("{s:.1} s"))
    );
}

/// Figure 4: 20 good canary rollouts in a row under a paced load.
fn canaries(platform: &Platform) {
    let name = "canary";
    let host = host(name);
    let repo = platform.onboard(name, &["dev"], "bench-secret");
    let rollout = "      steps: [25, 100]\n      pause_seconds: 1\n      analysis:\n        \
                   min_requests: 50\n";
    set_manifest(&repo, "runway_canary", rollout, 1, 1, 100);
    set_env_file(&repo, "dev", &[("GREETING", "canary 0")]);
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "deploy {name}: {}", first.all());
    platform.get(&host, "/", Duration::from_secs(10));

    let client = platform.ingress_client(&host);
    let load = Load::start(
        &platform.rt,
        &client,
        &platform.ingress_url(&host, "/"),
        CLIENTS,
        Some(PER_CLIENT),
    );
    let counts = Arc::clone(&load.counts);
    let started = Instant::now();
    let mut took = Vec::new();
    let mut bad = Vec::new();
    for n in 1..=CANARIES {
        set_env_file(&repo, "dev", &[("GREETING", &format!("canary {n}"))]);
        let begun = Instant::now();
        let rolled = platform.deploy(&repo, "dev");
        took.push(begun.elapsed().as_secs_f64());
        if !rolled.ok() {
            bad.push(format!("deploy {n}: {}", rolled.all()));
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let elapsed = started.elapsed().as_secs_f64();
    let (ok, failed) = load.stop(&platform.rt);
    let asked = CLIENTS as f64 * PER_CLIENT;
    let served = (ok + failed) as f64 / elapsed;
    println!();
    println!(
        "4. {CANARIES} canary rollouts (runway_canary, steps [25, 100], pause 1 s, analysis min 50 requests) \
         under a paced load of {asked:.0} req/s asked ({CLIENTS} clients × {PER_CLIENT:.0} req/s):"
    );
    println!(
        "   {} requests in {elapsed:.1} s ({served:.0} req/s served{}), {failed} failed{}",
        ok + failed,
        if served < asked * 0.95 {
            ": less than asked, the most this app and machine sustain, the clients falling behind their pace"
        } else {
            ""
        },
        if failed > 0 {
            format!(": {:?}", counts.failures.lock().unwrap())
        } else {
            String::new()
        }
    );
    println!(
        "   deploy duration (runway deploy --wait, wall clock): median {:.1} s, min {:.1} s, max {:.1} s; \
         {} of {CANARIES} succeeded",
        median(&took),
        took.iter().copied().fold(f64::INFINITY, f64::min),
        took.iter().copied().fold(0.0, f64::max),
        CANARIES - bad.len()
    );
    for b in &bad {
        println!("   FAILED {b}");
    }
    // Each rollout's own story: did it walk 25 % then 100 %?
    let (code, listed) = platform.call(
        Method::GET,
        &format!("/v1/services/{name}/environments/dev/deployments?limit={CANARIES}"),
        Some(&platform.token),
        None,
    );
    assert_eq!(code, 200, "{listed}");
    let mut walked = 0;
    for deployment in listed.as_array().unwrap() {
        let (_, events) = platform.call(
            Method::GET,
            &format!(
                "/v1/deployments/{}/events",
                support::id_text(&deployment["id"])
            ),
            Some(&platform.token),
            None,
        );
        let messages: Vec<&str> = events
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["message"].as_str())
            .collect();
        let stepped = messages
            .iter()
            .any(|m| m.starts_with("runway_canary: step 1 of 2") && m.contains("25 %"));
        let complete = messages
            .iter()
            .any(|m| m.starts_with("rollout complete:") && m.contains("100 %"));
        if stepped && complete && deployment["state"] == "succeeded" {
            walked += 1;
        } else {
            println!(
                "   deployment {} ({}) did not walk 25 % → 100 %: {messages:?}",
                deployment["id"], deployment["state"]
            );
        }
    }
    println!(
        "   {walked} of {} deployments' events show step 1 of 2 at 25 % then rollout complete at 100 %",
        listed.as_array().unwrap().len()
    );
}

fn host(name: &str) -> String {
    format!("{name}.dev.localhost")
}

/// Time to the response's headers (ms) and its status; the body is read afterwards.
async fn ttfb(client: &reqwest::Client, url: &str) -> (f64, u16) {
    let started = Instant::now();
    match client.get(url).send().await {
        Ok(response) => {
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            let code = response.status().as_u16();
            let _ = response.bytes().await;
            (ms, code)
        }
        Err(e) => {
            println!("   request to {url} failed: {e:?}");
            (started.elapsed().as_secs_f64() * 1000.0, 0)
        }
    }
}

/// `python3 app.py` run directly: ms from spawning it to its first answer on `/healthz`.
fn app_start_ms(repo: &Path) -> f64 {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let mut child = Command::new("python3")
        .arg("app.py")
        .current_dir(repo)
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ms = loop {
        if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: app\r\nconnection: close\r\n\r\n")
                .unwrap();
            let mut head = [0u8; 12];
            if stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") {
                break started.elapsed().as_secs_f64() * 1000.0;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "python3 app.py did not answer"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    let _ = child.kill();
    let _ = child.wait();
    ms
}

/// `runway deploy` without waiting: the deployment's id.
fn deploy_nowait(platform: &Platform, repo: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["deploy", "--env", "dev", "--output", "json"];
    args.extend_from_slice(extra);
    let ran = platform.runway_with(&args, Some(repo.as_os_str()), None, support::COMMAND);
    assert!(ran.ok(), "deploy: {}", ran.all());
    ran.json()["id"].clone()
}

/// The service's status in `dev`, from the API (what `runway status --output json` prints).
fn status(platform: &Platform, service: &str) -> Value {
    let (code, body) = platform.call(
        Method::GET,
        &format!("/v1/services/{service}/environments/dev/status"),
        Some(&platform.token),
        None,
    );
    assert_eq!(code, 200, "status of {service}: {body}");
    body
}

/// Waits until the service has no instance at all.
fn wait_zero(platform: &Platform, service: &str, bound: Duration) {
    let deadline = Instant::now() + bound;
    loop {
        let now = status(platform, service);
        if now["instances"].as_array().is_some_and(Vec::is_empty) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{service} not at zero within {bound:?}: {now:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The revision's desired and ready instances.
fn counts(status: &Value, revision: &str) -> (u64, u64) {
    status["revisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["revision"] == revision)
        .map_or((0, 0), |r| {
            (
                r["desired_instances"].as_u64().unwrap_or(0),
                r["ready"].as_u64().unwrap_or(0),
            )
        })
}

fn scaling_of(status: &Value, revision: &str) -> Value {
    status["scaling"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["revision"] == revision)
        .cloned()
        .unwrap_or(Value::Null)
}

fn epoch_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

/// min / median / max in ms.
fn stats(values: &[f64]) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    format!(
        "min {:.0} ms, median {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        sorted.first().copied().unwrap_or(f64::NAN),
        percentile(&sorted, 0.5),
        percentile(&sorted, 0.99),
        sorted.last().copied().unwrap_or(f64::NAN)
    )
}

/// The platform's share of a cold start: the cold times less the app's own median start, at
/// the median and the 99th percentile.
fn platform_share(cold_ms: &[f64], alone_ms: &[f64]) -> String {
    let mut sorted = cold_ms.to_vec();
    sorted.sort_by(f64::total_cmp);
    let alone = median(alone_ms);
    format!(
        "median {:.0} ms, p99 {:.0} ms",
        percentile(&sorted, 0.5) - alone,
        percentile(&sorted, 0.99) - alone
    )
}

/// min / median / max in seconds.
fn stats_s(values: &[f64]) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    format!(
        "min {:.1} s, median {:.1} s, max {:.1} s",
        sorted.first().copied().unwrap_or(f64::NAN),
        percentile(&sorted, 0.5),
        sorted.last().copied().unwrap_or(f64::NAN)
    )
}
