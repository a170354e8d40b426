//! The controller over an in-memory driver (the tests' fake) and a real in-process ingress,
//! with 1,000 services in one environment: what the controller itself costs, with no runtime
//! behind it.
//!
//! 1. From nothing: 1,000 deploys recorded at once, then passes (`reconcile_all`) until every
//!    deployment succeeded: the passes, their total time and the slowest.
//! 2. At rest: passes over the 1,000 settled services (nothing to do), each timed.
//! 3. One change among 1,000, with the controller running (`run`): a new revision of one
//!    service deployed, and the time until the ingress routes it whole.
//!
//! Run with `cargo bench -p runway-control --bench reconcile`; `SERVICES=N` for another count.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    dead_code,
    unreachable_pub,
    reason = "a benchmark prints its figures"
)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Harness, fast_config};
use runway_control::ControllerConfig;
use runway_store::{DeploymentState, Store};

fn main() {
    let services: usize = std::env::var("SERVICES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(services));
}

fn name(n: usize) -> String {
    format!("svc{n:04}")
}

async fn run(services: usize) {
    // The tests' deploy timeout (1.5 s) is shorter than a pass over 1,000 services may be.
    let config = ControllerConfig {
        reconcile_interval_ms: 500,
        deploy_timeout_ms: 600_000,
        ..fast_config()
    };
    let harness = Harness::new(config);
    for n in 0..services {
        harness.onboard(&name(n));
    }

    // 1. From nothing.
    let deployments: Vec<_> = (0..services)
        .map(|n| harness.deploy(&name(n), BTreeMap::new()))
        .collect();
    let started = Instant::now();
    let mut passes = Vec::new();
    loop {
        let pass = Instant::now();
        let errors = harness.controller.reconcile_all().await;
        passes.push(pass.elapsed());
        assert!(errors.is_empty(), "errors: {errors:?}");
        let states: Vec<DeploymentState> = deployments.iter().map(|d| harness.state(d)).collect();
        assert!(
            !states.contains(&DeploymentState::Failed),
            "a deployment failed: {:?}",
            harness.events(
                &deployments[states
                    .iter()
                    .position(|s| *s == DeploymentState::Failed)
                    .unwrap()]
            )
        );
        let pending = states
            .iter()
            .filter(|s| **s != DeploymentState::Succeeded)
            .count();
        if pending == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "{pending} deployments pending after 600 s"
        );
    }
    let total = started.elapsed();
    println!(
        "1. from nothing: {services} services deployed and routed in {} passes, {:.2} s \
         (slowest pass {:.0} ms, first {:.0} ms)",
        passes.len(),
        total.as_secs_f64(),
        passes.iter().max().unwrap().as_secs_f64() * 1e3,
        passes[0].as_secs_f64() * 1e3,
    );
    let routed = harness.controller.route_table().routes.len();
    assert_eq!(routed, services, "every service is routed");

    // 2. At rest.
    let mut rest = Vec::new();
    for _ in 0..20 {
        let pass = Instant::now();
        let errors = harness.controller.reconcile_all().await;
        rest.push(pass.elapsed());
        assert!(errors.is_empty(), "errors: {errors:?}");
    }
    rest.sort();
    println!(
        "2. at rest: a pass over {services} services: median {:.1} ms, max {:.1} ms (20 passes)",
        rest[rest.len() / 2].as_secs_f64() * 1e3,
        rest[rest.len() - 1].as_secs_f64() * 1e3,
    );

    // 3. One change among them, the controller running.
    let controller = Arc::new(harness.controller);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(Arc::clone(&controller).run(async {
        let _ = stopped.await;
    }));
    let mut changes = Vec::new();
    for n in (0..services).step_by((services / 10).max(1)) {
        let service = name(n);
        let started = Instant::now();
        let deployment = harness
            .store
            .record_deploy(
                "admin",
                &runway_store::NewRevision {
                    service: service.clone(),
                    env: "dev".to_owned(),
                    manifest: common::manifest(&service),
                    artifact: serde_json::json!({"source": common::SOURCE}),
                    env_vars: BTreeMap::from([("GREETING".to_owned(), format!("{n}"))]),
                    set_vars: Default::default(),
                    secret_versions: BTreeMap::new(),
                },
                &[runway_store::PlannedRevision {
                    revision: runway_store::RevisionRef::New,
                    instances: 1,
                    weight: 100,
                }],
            )
            .unwrap()
            .deployment;
        controller.wake();
        let revision = harness
            .store
            .desired_get(&service, "dev")
            .unwrap()
            .unwrap()
            .revisions[0]
            .revision
            .clone();
        loop {
            let table = controller.route_table();
            let whole = table.routes.iter().any(|route| {
                route.service == service
                    && route
                        .revisions
                        .iter()
                        .any(|r| r.name == revision && r.weight == 100)
            });
            let state = harness.store.deployment_get(deployment.id).unwrap().state;
            if whole && state == DeploymentState::Succeeded {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{service}: not rolled out in 60 s ({state:?})"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        changes.push(started.elapsed());
    }
    changes.sort();
    println!(
        "3. one change among {services}, running: deployed to routed whole, median {:.0} ms, \
         max {:.0} ms ({} deploys, one at a time)",
        changes[changes.len() / 2].as_secs_f64() * 1e3,
        changes[changes.len() - 1].as_secs_f64() * 1e3,
        changes.len(),
    );
    let _ = stop.send(());
    running.await.unwrap();
}
