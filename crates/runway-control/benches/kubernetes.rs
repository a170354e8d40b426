//! The controller over the Kubernetes driver and a real control plane (`kube-cluster`: etcd,
//! kube-apiserver, the controller manager, the scheduler and a simulated node), with 1,000
//! services in one environment: the first rounds, which apply 1,000 Deployments and Services and
//! wait until every revision's pod is ready and routed; then rounds at rest, their time and
//! their API requests, from the API server's audit log (the goal: none, the driver's view comes
//! from its watches).
//! Run with `cargo bench -p runway-control --bench kubernetes`; `SERVICES=N` for another count.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark prints its figures"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube_cluster::{ADMIN_USER, Cluster, Error};
use runway_control::{Controller, ControllerConfig};
use runway_ingress::{Ingress, Options};
use runway_kube::{KubeDriver, KubeOptions};
use runway_secrets::{MasterKey, Sealer};
use runway_store::{NewRevision, NewService, PlannedRevision, RevisionRef, SqliteStore, Store};

const IMAGE: &str =
    "registry.example/app@sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";

fn main() {
    let services: usize = std::env::var("SERVICES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000);
    // Every pod's listener is a descriptor of this process's.
    runway_ingress::raise_fd_limit().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(services));
}

async fn run(services: usize) {
    let cluster = match Cluster::start().await {
        Ok(cluster) => cluster,
        Err(Error::Missing(why)) => {
            println!("no real control plane here: {why}");
            return;
        }
        Err(e) => panic!("the control plane did not start: {e}"),
    };
    println!(
        "the control plane started in {:.1} s",
        cluster.started_in().as_secs_f64()
    );
    cluster.create_namespace("runway-dev", &[]).await.unwrap();
    let client = cluster.client();
    let options = KubeOptions {
        environments: vec!["dev".to_owned()],
        ..KubeOptions::default()
    };
    let driver = KubeDriver::new(client, options, None);
    driver.ready(Duration::from_secs(30)).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("runway.db")).unwrap());
    let recorded = Instant::now();
    for n in 0..services {
        record(store.as_ref(), &format!("svc-{n:04}"));
    }
    println!(
        "{services} services recorded in the store in {:.1} s",
        recorded.elapsed().as_secs_f64()
    );
    let ingress = Ingress::new(Options::default());
    let controller = Controller::new(
        ControllerConfig {
            deploy_timeout_ms: 600_000,
            autoscale_interval_ms: 0,
            ..ControllerConfig::default()
        },
        Arc::clone(&store) as Arc<dyn Store>,
        Arc::new(driver),
        Arc::new(ingress.clone()),
        Sealer::new(&MasterKey::generate().unwrap()),
    );

    // From nothing to every service served by a ready pod.
    let started = Instant::now();
    let mut rounds = 0;
    let mut first_round = None;
    loop {
        let round = Instant::now();
        let errors = controller.reconcile_all().await;
        rounds += 1;
        first_round.get_or_insert(round.elapsed());
        let unique: BTreeSet<String> = errors.iter().map(ToString::to_string).collect();
        assert!(unique.is_empty(), "{unique:?}");
        let served = controller
            .route_table()
            .routes
            .iter()
            .filter(|r| r.revisions.iter().any(|v| !v.instances.is_empty()))
            .count();
        if served == services {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "{served} of {services} served after 15 minutes"
        );
    }
    let requests = cluster.requests(ADMIN_USER);
    let mut by_verb: BTreeMap<String, usize> = BTreeMap::new();
    for request in &requests {
        *by_verb.entry(request.verb.clone()).or_default() += 1;
    }
    println!(
        "{services} services from nothing to served: {:.1} s, {rounds} rounds (the first {:.1} s), \
         {} API requests {by_verb:?}",
        started.elapsed().as_secs_f64(),
        first_round.unwrap_or_default().as_secs_f64(),
        requests.len()
    );

    // At rest.
    let seen = cluster.requests(ADMIN_USER).len();
    let mut times = Vec::new();
    for _ in 0..10 {
        let round = Instant::now();
        assert!(controller.reconcile_all().await.is_empty());
        times.push(round.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    let at_rest = cluster.requests(ADMIN_USER).len() - seen;
    println!(
        "a round at rest over {services} services: median {:.0} ms, max {:.0} ms; {at_rest} API \
         requests in 10 rounds",
        times[times.len() / 2],
        times[times.len() - 1]
    );
    // The driver's watches end before the server they watch.
    drop(controller);
    cluster.stop();
}

/// A service with one image revision in `dev`, desired with one instance and all traffic, as
/// the API records a deploy.
fn record(store: &SqliteStore, name: &str) {
    store
        .service_create(
            "admin",
            &NewService {
                name: name.to_owned(),
                owners: vec!["team".to_owned()],
                environments: vec!["dev".to_owned()],
                team: None,
            },
        )
        .unwrap();
    let revision = NewRevision {
        service: name.to_owned(),
        env: "dev".to_owned(),
        manifest: serde_json::json!({
            "apiVersion": "runway/v1",
            "kind": "RunwayService",
            "metadata": {"name": name},
            "spec": {
                "image": IMAGE,
                "container_port": 8080,
                "scalability": {"min_instances": 1, "max_instances": 1},
            }
        }),
        artifact: serde_json::json!({"image": IMAGE}),
        env_vars: BTreeMap::new(),
        set_vars: Default::default(),
        secret_versions: BTreeMap::new(),
    };
    let planned = [PlannedRevision {
        revision: RevisionRef::New,
        instances: 1,
        weight: 100,
    }];
    store.record_deploy("admin", &revision, &planned).unwrap();
}
