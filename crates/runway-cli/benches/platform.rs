//! The control plane's figures, on the real `runway server` driven by the real CLI: time from
//! `runway deploy` to 100% of traffic on the new revision (less the app's own readiness, from
//! the deployment's events), failed requests during rollouts under a paced ~1,000 req/s load,
//! the API's latency, and the server's memory with 50 services deployed. Run with
//! `cargo bench -p runway --bench platform`.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark prints its figures"
)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use reqwest::Method;
use support::{Load, Platform, Settings, median, millis, percentile, set_env_file};

const HOST: &str = "hello.dev.localhost";
/// Deployments timed for the first figure.
const TIMED: usize = 10;
/// Rollouts under the paced load.
const LOADED: usize = 5;
/// The paced load: clients × rate each.
const CLIENTS: usize = 50;
const PER_CLIENT: f64 = 20.0;
/// API calls timed.
const CALLS: usize = 2_000;
/// Services deployed for the memory figure.
const SERVICES: usize = 50;

fn main() {
    if !support::have_python() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], "bench-secret");
    set_env_file(&repo, "dev", &[("GREETING", "v0")]);
    assert!(platform.deploy(&repo, "dev").ok());
    platform.get(HOST, "/", Duration::from_secs(10));

    // 1. From deploy to 100% of traffic on the new revision, less the app's readiness.
    let mut platform_ms = Vec::new();
    let mut total_ms = Vec::new();
    let mut ready_ms = Vec::new();
    for n in 1..=TIMED {
        set_env_file(&repo, "dev", &[("GREETING", &format!("timed {n}"))]);
        let started = platform.runway_with(
            &["deploy", "--env", "dev", "--output", "json"],
            Some(repo.as_os_str()),
            None,
            support::COMMAND,
        );
        assert!(started.ok(), "{}", started.all());
        let deployment = started.json();
        let ended = platform.wait_deployment(&deployment["id"], Duration::from_secs(60));
        assert_eq!(ended["state"], "succeeded", "{ended}");
        let target = ended["to_revision"].as_str().unwrap().to_owned();
        let (_, events) = platform.call(
            Method::GET,
            &format!(
                "/v1/deployments/{}/events",
                support::id_text(&deployment["id"])
            ),
            Some(&platform.token),
            None,
        );
        let at = |wanted: &dyn Fn(&str) -> bool| -> f64 {
            events
                .as_array()
                .unwrap()
                .iter()
                .find(|e| wanted(e["message"].as_str().unwrap_or_default()))
                .map(|e| millis(e["at"].as_str().unwrap()))
                .unwrap_or_else(|| panic!("no such event in {events:#}"))
        };
        let created = millis(ended["created_at"].as_str().unwrap());
        let instance_started =
            at(&|m| m.starts_with("instance ") && m.contains(&target) && m.ends_with("started"));
        let instance_ready =
            at(&|m| m.starts_with("instance ") && m.contains(&target) && m.ends_with("is ready"));
        let full = at(&|m| m.starts_with("traffic:") && m.contains(&format!("{target} 100%")));
        let readiness = instance_ready - instance_started;
        total_ms.push(full - created);
        ready_ms.push(readiness);
        platform_ms.push(full - created - readiness);
        platform.wait_retired(&previous(&target), Duration::from_secs(30));
    }
    println!(
        "deploy → 100% traffic, {TIMED} deploys: median {:.0} ms, max {:.0} ms less the app's readiness \
         (median {:.0} ms from start to ready; total median {:.0} ms)",
        median(&platform_ms),
        max(&platform_ms),
        median(&ready_ms),
        median(&total_ms)
    );

    // 2. Failed requests during rollouts under a paced load.
    let client = platform.ingress_client(HOST);
    let load = Load::start(
        &platform.rt,
        &client,
        &platform.ingress_url(HOST, "/"),
        CLIENTS,
        Some(PER_CLIENT),
    );
    let counts = std::sync::Arc::clone(&load.counts);
    let started = Instant::now();
    for n in 1..=LOADED {
        set_env_file(&repo, "dev", &[("GREETING", &format!("loaded {n}"))]);
        let rolled = platform.deploy(&repo, "dev");
        assert!(rolled.ok(), "{}", rolled.all());
    }
    std::thread::sleep(Duration::from_secs(3));
    let elapsed = started.elapsed().as_secs_f64();
    let (ok, failed) = load.stop(&platform.rt);
    println!(
        "{LOADED} rollouts under a paced load of {:.0} req/s asked: {} requests in {elapsed:.1} s \
         ({:.0} req/s served), {failed} failed{}",
        CLIENTS as f64 * PER_CLIENT,
        ok + failed,
        (ok + failed) as f64 / elapsed,
        if failed > 0 {
            format!(": {:?}", counts.failures.lock().unwrap())
        } else {
            String::new()
        }
    );

    // 3. The API's latency: `GET /v1/services` and a status, one after the other, one client.
    let api = platform.api_client();
    let base = platform.api();
    let mut latencies = platform.rt.block_on(async {
        let mut latencies = Vec::with_capacity(CALLS);
        for n in 0..CALLS {
            let path = if n % 2 == 0 {
                "/v1/services"
            } else {
                "/v1/services/hello/environments/dev/status"
            };
            let started = Instant::now();
            let response = api
                .get(format!("{base}{path}"))
                .bearer_auth(&platform.token)
                .send()
                .await
                .unwrap();
            assert!(response.status().is_success());
            response.bytes().await.unwrap();
            latencies.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        latencies
    });
    latencies.sort_by(f64::total_cmp);
    println!(
        "API, {CALLS} calls (GET /v1/services and status, alternately): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default()
    );

    // 4. The server's memory with 50 services, each deployed with one instance.
    let rss_one = rss_kib(platform.server_pid());
    let started = Instant::now();
    let mut deployments = Vec::new();
    for n in 1..SERVICES {
        let name = format!("svc-{n:02}");
        let repo = platform.onboard(&name, &["dev"], "bench-secret");
        let ran = platform.runway_with(
            &["deploy", "--env", "dev", "--output", "json"],
            Some(repo.as_os_str()),
            None,
            support::COMMAND,
        );
        assert!(ran.ok(), "{}", ran.all());
        deployments.push(ran.json()["id"].clone());
    }
    for id in &deployments {
        let ended = platform.wait_deployment(id, Duration::from_secs(180));
        assert_eq!(ended["state"], "succeeded", "{ended}");
    }
    let instances = platform.local_ps().len();
    // A few reconciliations over all of them, then the figure.
    std::thread::sleep(Duration::from_secs(5));
    let rss_all = rss_kib(platform.server_pid());
    println!(
        "server RSS: {:.1} MiB with 1 service, {:.1} MiB with {SERVICES} services deployed \
         ({instances} instances, one plain process each; onboarded and deployed in {:.0} s)",
        rss_one / 1024.0,
        rss_all / 1024.0,
        started.elapsed().as_secs_f64()
    );
}

/// The revision numbered one less.
fn previous(revision: &str) -> String {
    let (base, number) = revision.rsplit_once('-').unwrap();
    let number: u32 = number.parse().unwrap();
    format!("{base}-{:05}", number - 1)
}

fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::NAN, f64::max)
}

/// A process's resident memory, from /proc.
fn rss_kib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}
