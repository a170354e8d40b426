//! SQLite beside PostgreSQL, side by side in one run: with 50 and 500 services, how many
//! deploys a minute each records (the revision, deployment, desired state and audit entry of
//! `record_deploy`, then the controller's two transitions and an event), and the latency of
//! what the API and a controller round read most (`service_list`, `desired_list`, a
//! service's deployments and its revisions). PostgreSQL comes from `RUNWAY_TEST_POSTGRES`:
//!
//!   scripts/with-postgres cargo bench -p runway-store --bench stores

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark prints its figures"
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use runway_store::{
    DeploymentState, NewRevision, NewService, PlannedRevision, PostgresStore, RevisionRef,
    SqliteStore, Store,
};

const READS: usize = 2_000;

fn main() {
    for services in [50, 500] {
        let dir = tempfile::tempdir().unwrap();
        let sqlite: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path().join("runway.db")).unwrap());
        run("SQLite", &sqlite, services);
        match std::env::var("RUNWAY_TEST_POSTGRES") {
            Ok(admin) => {
                let name = format!("runway_bench_{}_{services}", std::process::id());
                let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
                client
                    .batch_execute(&format!("CREATE DATABASE {name}"))
                    .unwrap();
                let store: Arc<dyn Store> = Arc::new(
                    PostgresStore::open(&runway_store::PostgresStore::url_for_database(
                        &admin, &name,
                    ))
                    .unwrap(),
                );
                run("PostgreSQL", &store, services);
                drop(store);
                client
                    .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
                    .unwrap();
            }
            Err(_) => println!("PostgreSQL: not measured (run under scripts/with-postgres)"),
        }
    }
}

fn run(backend: &str, store: &Arc<dyn Store>, services: usize) {
    let started = Instant::now();
    for n in 0..services {
        let name = format!("svc-{n:04}");
        store
            .service_create(
                "bench",
                &NewService {
                    name: name.clone(),
                    owners: vec!["team".into()],
                    environments: vec!["dev".into()],
                    team: None,
                },
            )
            .unwrap();
        deploy(store.as_ref(), &name);
    }
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    println!(
        "{backend}, {services} services: {:.0} deploys a minute (each onboarded and deployed once, \
         the deployment taken to succeeded with an event)",
        services as f64 / minutes
    );
    // Then as many again, onto services that have one already.
    let started = Instant::now();
    for n in 0..services {
        deploy(store.as_ref(), &format!("svc-{n:04}"));
    }
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    println!(
        "{backend}, {services} services: {:.0} deploys a minute over deployed services",
        services as f64 / minutes
    );
    let read = |what: &str, call: &dyn Fn(usize)| {
        let mut took: Vec<f64> = (0..READS)
            .map(|n| {
                let started = Instant::now();
                call(n);
                started.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        took.sort_by(f64::total_cmp);
        println!(
            "{backend}, {services} services: {what}: p50 {:.3} ms, p99 {:.3} ms",
            took[READS / 2],
            took[READS * 99 / 100]
        );
    };
    read("service_list", &|_| {
        store.service_list().unwrap();
    });
    read("desired_list (a controller round)", &|_| {
        store.desired_list().unwrap();
    });
    read("a service's deployments and revisions", &|n| {
        let name = format!("svc-{:04}", n % services);
        store.deployment_list(&name, Some("dev"), 20).unwrap();
        store.revision_list(&name, "dev").unwrap();
    });
}

fn deploy(store: &dyn Store, service: &str) {
    let record = store
        .record_deploy(
            "bench",
            &NewRevision {
                service: service.into(),
                env: "dev".into(),
                manifest: serde_json::json!({"apiVersion": "runway/v1", "kind": "RunwayService",
                    "metadata": {"name": service}, "spec": {}}),
                artifact: serde_json::json!({"image": "registry.example/app", "digest": "sha256:00"}),
                env_vars: BTreeMap::new(),
                set_vars: Default::default(),
                secret_versions: BTreeMap::new(),
            },
            &[PlannedRevision {
                revision: RevisionRef::New,
                instances: 1,
                weight: 100,
            }],
        )
        .unwrap();
    let id = record.deployment.id;
    store
        .deployment_transition("ctl", id, DeploymentState::Progressing, None)
        .unwrap();
    store
        .deployment_add_event("ctl", id, "instance started")
        .unwrap();
    store
        .deployment_transition("ctl", id, DeploymentState::Succeeded, None)
        .unwrap();
}
