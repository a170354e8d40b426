//! Preview figures, on the real `runway server` driven by the real CLI: twenty previews of one
//! service deployed one after the other (each from `runway deploy --preview` to its first
//! answer through the ingress: a merge request's push to its preview serving, less the CI
//! runner), then left idle: how many instances they run (the goal: none), the control plane's
//! and the ingress's memory before and after, and the first request to an idle one (a cold
//! start). The autoscaler runs with short windows (4 s stable, 1 s grace to zero). Run with
//! `cargo bench -p runway --bench previews`.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark prints its figures"
)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use support::{FAST_AUTOSCALER, Platform, Settings, median, percentile};

/// Previews deployed.
const PREVIEWS: usize = 20;

fn main() {
    if !support::have_python() {
        return;
    }
    let platform = Platform::start(&Settings {
        api: format!(
            "  environments: [dev, preview]\n  previews:\n    max_per_service: {PREVIEWS}\n"
        ),
        control: FAST_AUTOSCALER.to_owned(),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev", "preview"], "bench-secret");
    let (server, ingress) = (platform.server_pid(), platform.ingress_pid());
    let before = (rss_kib(server), rss_kib(ingress));
    println!("runway preview figures ({PREVIEWS} previews of one service, a Python process each)");

    let mut serving_ms = Vec::new();
    for n in 1..=PREVIEWS {
        let started = Instant::now();
        let deployed = platform.runway_with(
            &[
                "deploy",
                "--env",
                "dev",
                "--preview",
                &format!("mr-{n}"),
                "--wait",
            ],
            Some(repo.as_os_str()),
            None,
            Duration::from_secs(120),
        );
        assert!(deployed.ok(), "{}", deployed.all());
        let host = format!("mr-{n}--hello.preview.localhost");
        let (status, _) = platform.get(&host, "/", Duration::from_secs(30));
        assert_eq!(status, 200);
        serving_ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    serving_ms.sort_by(f64::total_cmp);
    println!(
        "  deploy to serving: median {:.0} ms, p90 {:.0} ms, max {:.0} ms ({PREVIEWS} previews, one after the other)",
        median(&serving_ms),
        percentile(&serving_ms, 0.9),
        percentile(&serving_ms, 1.0)
    );

    // Idle: every preview scales to zero.
    let idle_from = Instant::now();
    let running = |platform: &Platform| -> usize {
        (1..=PREVIEWS)
            .map(|n| {
                platform.status(&format!("mr-{n}--hello"), "preview")["instances"]
                    .as_array()
                    .map_or(0, |all| {
                        all.iter().filter(|i| i["phase"] == "running").count()
                    })
            })
            .sum()
    };
    let peak = running(&platform);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut now = peak;
    while now > 0 {
        assert!(Instant::now() < deadline, "{now} instances still run");
        std::thread::sleep(Duration::from_millis(500));
        now = running(&platform);
    }
    println!(
        "  idle: {now} instances for {PREVIEWS} previews ({peak} right after the last deploy), all gone {:.1} s after it",
        idle_from.elapsed().as_secs_f64()
    );
    let after = (rss_kib(server), rss_kib(ingress));
    println!(
        "  memory: control plane {:.1} MiB ({:+.1} MiB with {PREVIEWS} idle previews), ingress {:.1} MiB ({:+.1} MiB)",
        after.0 / 1024.0,
        (after.0 - before.0) / 1024.0,
        after.1 / 1024.0,
        (after.1 - before.1) / 1024.0
    );

    // An idle preview's first request starts an instance.
    let started = Instant::now();
    let (status, _) = platform.get(
        "mr-7--hello.preview.localhost",
        "/",
        Duration::from_secs(30),
    );
    assert_eq!(status, 200);
    println!(
        "  an idle preview's first request (a cold start): {:.0} ms",
        started.elapsed().as_secs_f64() * 1000.0
    );
}

/// The resident set of `pid` in KiB, as a figure.
fn rss_kib(pid: u32) -> f64 {
    support::rss_kib(pid).map_or(f64::NAN, |kib| kib as f64)
}
