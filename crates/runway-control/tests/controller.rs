//! The controller over an in-memory driver, a real SQLite store and a real ingress (its
//! table, not its sockets).

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Behavior, Harness, fast_config};
use runway_reconciler::{Condition, RouteWeight};
use runway_secrets::{Context, Sealer, SecretValue};
use runway_store::{DeploymentState, DesiredRevision, Store};

const BOUND: Duration = Duration::from_secs(10);
const V1: &str = "hello-dev-00001";
const V2: &str = "hello-dev-00002";

fn weights(pairs: &[(&str, u32)]) -> Vec<RouteWeight> {
    pairs.iter().map(|&(r, w)| RouteWeight::new(r, w)).collect()
}

/// A harness with v1 of hello deployed and serving.
async fn serving_v1() -> Harness {
    let harness = Harness::new(fast_config());
    harness.onboard("hello");
    let first = harness.deploy("hello", BTreeMap::new());
    harness
        .settle(BOUND, |h| h.state(&first) == DeploymentState::Succeeded)
        .await;
    harness
}

#[tokio::test]
async fn first_deploy_starts_an_instance_and_routes_to_it() {
    let harness = Harness::new(fast_config());
    harness.onboard("hello");
    let deployment = harness.deploy("hello", BTreeMap::new());
    harness
        .settle(BOUND, |h| {
            h.state(&deployment) == DeploymentState::Succeeded
        })
        .await;

    let controller = &harness.controller;
    assert_eq!(controller.routes("hello", "dev"), weights(&[(V1, 100)]));
    assert_eq!(
        controller.url("hello", "dev"),
        "https://hello.dev.localhost:8443/"
    );
    let instances = controller.instances("hello", "dev").await.unwrap();
    assert_eq!(instances.len(), 1);
    assert!(instances[0].ready);
    assert_eq!(instances[0].revision, V1);
    assert!(instances[0].id.starts_with("hello-dev-00001-"));

    let table = controller.route_table();
    assert_eq!(table.routes.len(), 1);
    let route = &table.routes[0];
    assert_eq!(
        (route.service.as_str(), route.env.as_str()),
        ("hello", "dev")
    );
    assert_eq!(route.request_timeout_seconds, 30.0);
    assert_eq!(route.revisions[0].tag.as_deref(), Some("r1"));
    assert_eq!(route.revisions[0].instances.len(), 1);
    assert_eq!(route.revisions[0].instances[0].max_concurrency, 50);
    assert_eq!(harness.ingress.table().routes().len(), 1);

    let workload = &harness.driver.workloads()[0];
    assert_eq!(workload.revision, V1);
    assert_eq!(
        (workload.service.as_str(), workload.env.as_str()),
        ("hello", "dev")
    );
    assert_eq!(
        workload.config.env.get("GREETING").map(String::as_str),
        Some("hi")
    );
    assert_eq!(workload.source.as_deref(), Some(common::SOURCE));
    assert_eq!(workload.image, None);

    let events = harness.events(&deployment).join("\n");
    for expected in [
        "started",
        "is ready",
        "traffic: hello-dev-00001 100%",
        "succeeded",
    ] {
        assert!(events.contains(expected), "{expected:?} not in\n{events}");
    }
    let statuses = controller.revision_status("hello", "dev");
    assert_eq!(statuses[0].ready, 1);
}

#[tokio::test]
async fn a_rolling_deploy_never_leaves_the_route_without_a_ready_instance() {
    let harness = serving_v1().await;
    harness
        .driver
        .watch_ingress(&harness.ingress, "hello", "dev");
    harness.driver.behave(V2, Behavior::ReadyAfter(4));
    let v1_ids = harness.driver.ids_of(V1);

    let second = harness.deploy("hello", BTreeMap::new());
    assert_eq!(second.from_revision.as_deref(), Some(V1));
    // Stops run in the background; the pass after drops the instance from the table.
    harness
        .settle(BOUND, |h| {
            let table = h.controller.route_table();
            let only_v2 = table
                .routes
                .first()
                .is_some_and(|r| r.revisions.iter().all(|r| r.name == V2));
            h.state(&second) == DeploymentState::Succeeded
                && h.driver.ids_of(V1).is_empty()
                && only_v2
        })
        .await;

    assert_eq!(harness.driver.violations(), Vec::<String>::new());
    assert_eq!(
        harness.controller.routes("hello", "dev"),
        weights(&[(V2, 100)])
    );
    let stopped = harness.driver.stopped();
    assert!(v1_ids.iter().all(|id| stopped.contains(id)));
    let events = harness.events(&second).join("\n");
    for expected in [
        "traffic: hello-dev-00002 100%",
        "draining",
        "stopped",
        "succeeded",
    ] {
        assert!(events.contains(expected), "{expected:?} not in\n{events}");
    }
    // The draining v1 instance was dropped from the table once stopped.
    let table = harness.controller.route_table();
    let names: Vec<&str> = table.routes[0]
        .revisions
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(names, [V2]);
}

#[tokio::test]
async fn a_service_not_serving_keeps_its_host_and_a_crashing_revision_is_marked_failing() {
    let harness = Harness::new(fast_config());
    harness.onboard("hello");
    // Registered, never deployed: routed with no revision (the ingress's 503, not a 404).
    harness
        .settle(BOUND, |h| {
            h.controller
                .route_table()
                .routes
                .iter()
                .any(|r| r.service == "hello" && r.env == "dev" && r.revisions.is_empty())
        })
        .await;
    let first = harness.deploy("hello", BTreeMap::new());
    harness
        .settle(BOUND, |h| h.state(&first) == DeploymentState::Succeeded)
        .await;
    let failing = |h: &Harness| {
        h.controller.route_table().routes[0]
            .revisions
            .iter()
            .find(|r| r.name == V1)
            .map(|r| r.failing)
    };
    assert_eq!(failing(&harness), Some(false));

    // The serving revision's instance crash-loops: the ingress is told not to hold requests.
    harness.driver.behave_now(
        V1,
        Behavior::Crash {
            code: 1,
            output: Vec::new(),
        },
    );
    harness.settle(BOUND, |h| failing(h) == Some(true)).await;
    assert_eq!(
        harness.controller.routes("hello", "dev"),
        weights(&[(V1, 100)])
    );
    // Ready again: no longer failing.
    harness.driver.behave_now(V1, Behavior::ReadyAfter(0));
    harness.settle(BOUND, |h| failing(h) == Some(false)).await;
}

#[tokio::test]
async fn a_failing_deploy_fails_with_the_exit_code_and_output_and_v1_keeps_serving() {
    let harness = serving_v1().await;
    harness
        .driver
        .watch_ingress(&harness.ingress, "hello", "dev");
    harness.driver.behave(
        V2,
        Behavior::Crash {
            code: 3,
            output: vec![
                "booting".to_owned(),
                "panic: DATABASE_URL is not set".to_owned(),
            ],
        },
    );
    let started = tokio::time::Instant::now();
    let second = harness.deploy("hello", BTreeMap::new());
    harness
        .settle(BOUND, |h| h.state(&second) == DeploymentState::Failed)
        .await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "took {took:?}");

    let failed = harness.store.deployment_get(second.id).unwrap();
    let reason = failed.reason.unwrap();
    // At its first exit, not at the deploy timeout.
    assert!(reason.contains("ended before it was ready"), "{reason}");
    assert!(reason.contains("exit code 3"), "{reason}");
    assert!(
        reason.contains("panic: DATABASE_URL is not set"),
        "{reason}"
    );
    assert!(reason.contains(V2), "{reason}");

    // The previous revision is desired again, and the bad instances go.
    let desired = harness.store.desired_get("hello", "dev").unwrap().unwrap();
    assert_eq!(
        desired.revisions,
        [DesiredRevision {
            revision: V1.to_owned(),
            instances: 1,
            weight: 100
        }]
    );
    harness
        .settle(BOUND, |h| h.driver.ids_of(V2).is_empty())
        .await;
    assert_eq!(
        harness.controller.routes("hello", "dev"),
        weights(&[(V1, 100)])
    );
    assert_eq!(harness.driver.ids_of(V1).len(), 1);
    assert_eq!(harness.driver.violations(), Vec::<String>::new());
    let events = harness.events(&second).join("\n");
    assert!(events.contains("failed: crash loop"), "{events}");
}

#[tokio::test]
async fn a_rollback_moves_traffic_back_and_stops_the_newer_revision() {
    let harness = serving_v1().await;
    let second = harness.deploy("hello", BTreeMap::new());
    harness
        .settle(BOUND, |h| {
            h.state(&second) == DeploymentState::Succeeded && h.driver.ids_of(V1).is_empty()
        })
        .await;
    harness
        .driver
        .watch_ingress(&harness.ingress, "hello", "dev");

    let rollback = harness
        .store
        .record_rollback(
            "admin",
            "hello",
            "dev",
            V1,
            &[DesiredRevision {
                revision: V1.to_owned(),
                instances: 1,
                weight: 100,
            }],
        )
        .unwrap()
        .deployment;
    harness
        .settle(BOUND, |h| {
            h.state(&rollback) == DeploymentState::Succeeded && h.driver.ids_of(V2).is_empty()
        })
        .await;
    assert_eq!(
        harness.controller.routes("hello", "dev"),
        weights(&[(V1, 100)])
    );
    assert_eq!(harness.driver.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn scaling_up_adds_the_new_ready_instance_to_the_table() {
    let harness = serving_v1().await;
    harness
        .driver
        .watch_ingress(&harness.ingress, "hello", "dev");
    harness
        .store
        .desired_set_instances("autoscaler", "hello", "dev", V1, 2, None)
        .unwrap();
    harness
        .settle(BOUND, |h| {
            let table = h.controller.route_table();
            table.routes[0].revisions[0].instances.len() == 2
        })
        .await;
    assert_eq!(harness.driver.ids_of(V1).len(), 2);
    assert_eq!(harness.driver.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_decommissioned_service_is_drained_and_stopped() {
    let harness = serving_v1().await;
    let id = harness.driver.ids_of(V1)[0].clone();
    harness
        .store
        .service_decommission("admin", "hello")
        .unwrap();
    harness.settle(BOUND, |h| h.driver.ids().is_empty()).await;
    assert!(harness.driver.stopped().contains(&id));
    assert!(harness.controller.route_table().routes.is_empty());
    assert!(harness.ingress.table().routes().is_empty());
    assert!(harness.controller.routes("hello", "dev").is_empty());
}

#[tokio::test]
async fn a_new_controller_stops_the_instances_of_a_service_decommissioned_meanwhile() {
    let harness = serving_v1().await;
    let platform = harness.driver.ids_of(V1);
    assert_eq!(platform.len(), 1);
    harness
        .store
        .service_decommission("admin", "hello")
        .unwrap();

    // Instances a developer started with `runway run`, not the platform: one with an id of
    // the platform's shape, one of a service the store never knew, one with its own id.
    let own = [
        "hello-dev-00001-abcdef",
        "other-dev-00003-123456",
        "hello-dev",
    ];
    for id in own {
        harness.driver.add_unmanaged(id, "hello", "hello-local");
    }

    // The controller that knew hello is gone; a new one never saw its revisions.
    let (second, ingress) = harness.another_controller();
    let until = tokio::time::Instant::now() + BOUND;
    while harness.driver.ids().iter().any(|id| platform.contains(id)) {
        let _ = second.reconcile_all().await;
        assert!(
            tokio::time::Instant::now() < until,
            "still running: {:?}",
            harness.driver.ids()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(harness.driver.stopped().contains(&platform[0]));
    for _ in 0..5 {
        let _ = second.reconcile_all().await;
    }
    let mut left = harness.driver.ids();
    left.sort();
    let mut expected: Vec<String> = own.iter().map(|id| (*id).to_owned()).collect();
    expected.sort();
    assert_eq!(left, expected, "the developer's instances are left alone");
    assert!(
        harness
            .driver
            .stopped()
            .iter()
            .all(|id| !own.contains(&id.as_str()))
    );
    assert!(second.routes("hello", "dev").is_empty());
    assert!(ingress.table().routes().is_empty());
}

#[tokio::test]
async fn a_new_controller_adopts_running_instances_and_restores_routes() {
    let harness = serving_v1().await;
    let starts = harness.driver.workloads().len();
    let ids = harness.driver.ids();

    let (second, ingress) = harness.another_controller();
    assert!(second.routes("hello", "dev").is_empty());
    for _ in 0..5 {
        assert!(second.reconcile_all().await.is_empty());
    }
    assert_eq!(second.routes("hello", "dev"), weights(&[(V1, 100)]));
    assert_eq!(
        harness.driver.workloads().len(),
        starts,
        "nothing restarted"
    );
    assert!(harness.driver.stopped().is_empty(), "nothing stopped");
    assert_eq!(harness.driver.ids(), ids);
    let table = ingress.table();
    let route = &table.routes()[0];
    assert_eq!(route.revisions[0].0, 100);
    assert_eq!(route.revisions[0].1.instances().len(), 1);
}

/// A data plane that outlived the last controller: an ingress already serving a table, which
/// records every table it is given.
struct Outlived {
    ingress: runway_ingress::Ingress,
    serving: runway_ingress::RouteTableConfig,
    set: std::sync::Mutex<Vec<runway_ingress::RouteTableConfig>>,
}

impl runway_control::DataPlane for Outlived {
    fn set_routes<'a>(
        &'a self,
        table: &'a runway_ingress::RouteTableConfig,
    ) -> runway_control::BoxFuture<'a, Result<(), String>> {
        self.set.lock().unwrap().push(table.clone());
        runway_control::DataPlane::set_routes(&self.ingress, table)
    }

    fn drain(
        &self,
        address: std::net::SocketAddr,
        grace: Duration,
    ) -> runway_control::BoxFuture<'static, bool> {
        runway_control::DataPlane::drain(&self.ingress, address, grace)
    }

    fn revision_stats(
        &self,
        service: &str,
        env: &str,
        revision: &str,
    ) -> Option<runway_ingress::RevisionStats> {
        self.ingress.revision_stats(service, env, revision)
    }

    fn subscribe_scale_up(&self) -> tokio::sync::broadcast::Receiver<runway_ingress::ScaleUp> {
        self.ingress.subscribe_scale_up()
    }

    fn serving(&self) -> Option<runway_ingress::RouteTableConfig> {
        Some(self.serving.clone())
    }
}

/// A new controller over a data plane that kept serving (the ingress outlives the server)
/// carries on from its table: no table it sets leaves out a service it served, not even
/// while its first pass has reached only some of them, and nothing restarts.
#[tokio::test]
async fn a_new_controller_carries_on_from_the_table_the_data_plane_serves() {
    let harness = Harness::new(fast_config());
    let mut deployments = Vec::new();
    for service in ["alpha", "hello", "omega"] {
        harness.onboard(service);
        deployments.push(harness.deploy(service, BTreeMap::new()));
    }
    harness
        .settle(BOUND, |h| {
            deployments
                .iter()
                .all(|d| h.state(d) == DeploymentState::Succeeded)
        })
        .await;
    let serving = harness.controller.route_table();
    let names = |table: &runway_ingress::RouteTableConfig| -> Vec<String> {
        table.routes.iter().map(|r| r.service.clone()).collect()
    };
    assert_eq!(names(&serving), ["alpha", "hello", "omega"]);
    let starts = harness.driver.workloads().len();

    let plane = std::sync::Arc::new(Outlived {
        ingress: harness.ingress.clone(),
        serving: serving.clone(),
        set: std::sync::Mutex::default(),
    });
    let next = runway_control::Controller::new(
        fast_config(),
        std::sync::Arc::clone(&harness.store) as std::sync::Arc<dyn Store>,
        std::sync::Arc::clone(&harness.driver),
        plane.clone(),
        Sealer::new(&harness.key),
    )
    .allow_processes(true);
    for _ in 0..3 {
        assert!(next.reconcile_all().await.is_empty());
    }
    for table in plane.set.lock().unwrap().iter() {
        assert_eq!(names(table), ["alpha", "hello", "omega"], "{table:?}");
    }
    assert_eq!(next.routes("hello", "dev"), weights(&[(V1, 100)]));
    assert_eq!(next.route_table(), serving);
    assert_eq!(
        harness.driver.workloads().len(),
        starts,
        "nothing restarted"
    );
    assert!(harness.driver.stopped().is_empty(), "nothing stopped");
}

#[tokio::test]
async fn a_restart_mid_deploy_keeps_the_previous_revision_serving_until_the_new_one_is_ready() {
    let harness = serving_v1().await;
    harness.driver.behave(V2, Behavior::ReadyAfter(6));
    let v1_ids = harness.driver.ids_of(V1);
    let second = harness.deploy("hello", BTreeMap::new());
    // The first controller starts v2's instance, then "dies" before it is ready.
    assert!(harness.controller.reconcile_all().await.is_empty());
    assert!(!harness.driver.ids_of(V2).is_empty());

    // A new controller (a new server process) with a new, empty ingress.
    let (next, ingress) = harness.another_controller();
    harness.driver.watch_ingress(&ingress, "hello", "dev");
    assert!(next.reconcile_all().await.is_empty());
    // At once, before v2 is ready: v1 routed, not drained, not stopped.
    assert_eq!(next.routes("hello", "dev"), weights(&[(V1, 100)]));
    assert!(
        !ingress.table().routes().is_empty(),
        "the new ingress routes hello"
    );
    assert!(harness.driver.stopped().is_empty(), "nothing stopped");
    for _ in 0..40 {
        if harness.state(&second) == DeploymentState::Succeeded
            && harness.driver.ids_of(V1).is_empty()
        {
            break;
        }
        let _ = next.reconcile_all().await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(harness.state(&second), DeploymentState::Succeeded);
    assert_eq!(next.routes("hello", "dev"), weights(&[(V2, 100)]));
    // v1 went only after v2 took the traffic, and the route never lacked a ready instance.
    assert!(
        v1_ids
            .iter()
            .all(|id| harness.driver.stopped().contains(id))
    );
    assert_eq!(harness.driver.violations(), Vec::<String>::new());
}

/// The same over the running loop, where services are reconciled in tasks of their own after
/// the round that read them: the round's clean-up must not take v1 for a revision of no use
/// before its service's task has run.
#[tokio::test]
async fn a_restart_mid_deploy_under_the_running_loop_keeps_the_previous_revision() {
    let harness = serving_v1().await;
    harness.driver.behave(V2, Behavior::ReadyAfter(u32::MAX));
    let second = harness.deploy("hello", BTreeMap::new());
    assert!(harness.controller.reconcile_all().await.is_empty());
    assert!(!harness.driver.ids_of(V2).is_empty());

    let (next, ingress) = harness.another_controller();
    harness.driver.watch_ingress(&ingress, "hello", "dev");
    let next = std::sync::Arc::new(next);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(std::sync::Arc::clone(&next).run(async {
        let _ = stopped.await;
    }));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(harness.driver.stopped().is_empty(), "v1 was stopped");
    assert_eq!(next.routes("hello", "dev"), weights(&[(V1, 100)]));
    assert_eq!(harness.state(&second), DeploymentState::Progressing);
    assert_eq!(harness.driver.violations(), Vec::<String>::new());
    stop.send(()).unwrap();
    tokio::time::timeout(BOUND, task).await.unwrap().unwrap();
}

/// What a driver keeps of a revision nothing uses any more (a cluster's Deployment at zero,
/// left by a control plane that stopped before it removed it) is removed by the next one;
/// what is of use is not.
#[tokio::test]
async fn a_new_controller_removes_what_the_driver_keeps_of_revisions_of_no_use() {
    let harness = serving_v1().await;
    harness.driver.keep("hello", "dev", "hello-dev-00007");
    harness.driver.keep("hello", "dev", V1);
    let (next, _ingress) = harness.another_controller();
    assert!(next.reconcile_all().await.is_empty());
    assert_eq!(harness.driver.removed(), ["hello-dev-00007"]);
    assert_eq!(harness.driver.ids_of(V1).len(), 1, "v1 kept running");
    for _ in 0..3 {
        assert!(next.reconcile_all().await.is_empty());
    }
    assert_eq!(
        harness.driver.removed(),
        ["hello-dev-00007"],
        "removed once"
    );
}

fn set_secret(harness: &Harness, service: &str, name: &str, value: &str, tamper: bool) -> u32 {
    let sealer = Sealer::new(&harness.key);
    // The store numbers versions; the first one of a name is 1.
    let version = 1;
    let mut sealed = sealer
        .seal(
            &SecretValue::from(value.to_owned()),
            &Context {
                service,
                env: "dev",
                name,
                version: u64::from(version),
            },
        )
        .unwrap();
    if tamper {
        let last = sealed.ciphertext.len() - 1;
        sealed.ciphertext[last] ^= 0x01;
    }
    let info = harness
        .store
        .secret_set(
            "admin",
            service,
            "dev",
            name,
            version,
            &sealed.nonce,
            &sealed.ciphertext,
            None,
        )
        .unwrap();
    assert_eq!(info.version, version);
    info.version
}

#[tokio::test]
async fn secrets_are_opened_into_the_spec_and_a_tampered_one_fails_the_start() {
    let harness = Harness::new(fast_config());
    harness.onboard("hello");
    let version = set_secret(&harness, "hello", "API_KEY", "s3cr3t-value", false);
    let good = harness.deploy("hello", BTreeMap::from([("API_KEY".to_owned(), version)]));
    harness
        .settle(BOUND, |h| h.state(&good) == DeploymentState::Succeeded)
        .await;
    let workload = &harness.driver.workloads()[0];
    assert_eq!(
        workload.secrets,
        BTreeMap::from([("API_KEY".to_owned(), "s3cr3t-value".to_owned())])
    );
    assert!(!workload.config.env.contains_key("API_KEY"));

    harness.onboard("other");
    let version = set_secret(&harness, "other", "TOKEN", "tampered-value", true);
    let bad = harness.deploy("other", BTreeMap::from([("TOKEN".to_owned(), version)]));
    harness
        .settle(BOUND, |h| h.state(&bad) == DeploymentState::Failed)
        .await;
    let reason = harness
        .store
        .deployment_get(bad.id)
        .unwrap()
        .reason
        .unwrap();
    assert!(
        reason.contains("secret TOKEN version 1 cannot be opened"),
        "{reason}"
    );
    let story = format!("{reason}\n{}", harness.events(&bad).join("\n"));
    assert!(!story.contains("tampered-value"), "{story}");
    assert!(harness.driver.ids_of("other-dev-00001").is_empty());
    // hello was not disturbed.
    assert_eq!(harness.driver.ids_of(V1).len(), 1);
    assert_eq!(
        harness.controller.routes("hello", "dev"),
        weights(&[(V1, 100)])
    );
}

/// Blue/green: the deployment succeeds at the switch, the old revision stays warm with no
/// traffic, and leaves once its warm time is over, even when a dry run came in between.
#[tokio::test]
async fn blue_green_ends_at_the_switch_and_retires_the_warm_revision_after_a_dry_run() {
    let harness = serving_v1().await;
    let with = |strategy: &str, rollout: serde_json::Value| {
        let mut manifest = common::manifest("hello");
        manifest["spec"]["deployment"] = serde_json::json!({"strategy": strategy});
        manifest["spec"]["workload"]["rollout"] = rollout;
        manifest
    };
    let green = harness.deploy_manifest(
        "hello",
        with(
            "runway_blue_green",
            serde_json::json!({"auto_switch_after_seconds": 0, "keep_old_seconds": 2}),
        ),
        BTreeMap::new(),
    );
    harness
        .settle(BOUND, |h| h.state(&green) == DeploymentState::Succeeded)
        .await;
    let switched = std::time::Instant::now();
    assert_eq!(
        harness.controller.routes("hello", "dev"),
        weights(&[(V2, 100)])
    );
    let warm = |h: &Harness| {
        h.store
            .desired_get("hello", "dev")
            .unwrap()
            .unwrap()
            .revisions
            .iter()
            .any(|r| r.revision == V1 && r.weight == 0)
    };
    assert!(warm(&harness));
    assert_eq!(harness.driver.ids_of(V1).len(), 1);

    let dry = harness.deploy_manifest(
        "hello",
        with("dryrun", serde_json::json!({})),
        BTreeMap::new(),
    );
    harness
        .settle(BOUND, |h| h.state(&dry) == DeploymentState::Succeeded)
        .await;
    harness
        .settle(BOUND, |h| !warm(h) && h.driver.ids_of(V1).is_empty())
        .await;
    assert!(switched.elapsed() >= Duration::from_millis(1_900));
    assert!(
        harness
            .events(&green)
            .iter()
            .any(|e| e.starts_with("hello-dev-00001 was kept warm for 2 s")),
        "{:?}",
        harness.events(&green)
    );
    assert_eq!(
        harness.controller.routes("hello", "dev"),
        weights(&[(V2, 100)])
    );
}

#[tokio::test]
async fn run_reconciles_until_shutdown() {
    let harness = std::sync::Arc::new(Harness::new(fast_config()));
    harness.onboard("hello");
    let deployment = harness.deploy("hello", BTreeMap::new());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = std::sync::Arc::new(harness.another_controller().0);
    let task = tokio::spawn(std::sync::Arc::clone(&controller).run(async {
        let _ = stopped.await;
    }));
    controller.wake();
    tokio::time::timeout(BOUND, async {
        while harness.state(&deployment) != DeploymentState::Succeeded {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    stop.send(()).unwrap();
    tokio::time::timeout(BOUND, task).await.unwrap().unwrap();
}

/// Services are reconciled each on its own: one whose driver call hangs (an image pull, a
/// cluster's API) holds up neither another service's deployment nor the loop.
#[tokio::test]
async fn a_slow_service_holds_up_no_other() {
    let harness = std::sync::Arc::new(Harness::new(fast_config()));
    harness.onboard("slow");
    harness.onboard("hello");
    harness
        .driver
        .slow("slow-dev-00001", Duration::from_secs(600));
    let stuck = harness.deploy("slow", BTreeMap::new());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = std::sync::Arc::new(harness.another_controller().0);
    let task = tokio::spawn(std::sync::Arc::clone(&controller).run(async {
        let _ = stopped.await;
    }));
    // The slow service's start is under way, and hangs.
    tokio::time::timeout(BOUND, async {
        while harness.driver.calls_under_way() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    let deployment = harness.deploy("hello", BTreeMap::new());
    controller.wake();
    tokio::time::timeout(Duration::from_secs(10), async {
        while harness.state(&deployment) != DeploymentState::Succeeded {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("hello's deployment waited for slow's start");
    assert_eq!(harness.state(&stuck), DeploymentState::Progressing);
    assert_eq!(harness.driver.calls_under_way(), 1);
    stop.send(()).unwrap();
    tokio::time::timeout(BOUND, task).await.unwrap().unwrap();
}

/// A change that comes while a service's pass is under way (a replica it started becoming
/// ready as the pass returns) is looked at as soon as that pass ends, not a reconcile interval
/// later: a cold start once waited a whole interval to be routed.
#[tokio::test]
async fn a_change_during_a_pass_is_looked_at_when_it_ends() {
    let harness = serving_v1().await;
    let (controller, _ingress) =
        harness.another_controller_with(runway_control::ControllerConfig {
            reconcile_interval_ms: 60_000,
            ..fast_config()
        });
    let controller = std::sync::Arc::new(controller);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(std::sync::Arc::clone(&controller).run(async {
        let _ = stopped.await;
    }));
    let routed = |n: usize| {
        let table = controller.route_table();
        table.routes.first().map(|r| r.revisions[0].instances.len()) == Some(n)
    };
    tokio::time::timeout(BOUND, async {
        while !routed(1) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the new controller routes the serving instance");
    // A second instance: its start takes a moment, and it is ready from the next look on.
    // Without a look when the pass ends, the next comes only when a starting replica is
    // looked at again (a second later) or at the interval.
    harness.driver.slow(V1, Duration::from_millis(100));
    harness.driver.behave(V1, Behavior::ReadyAfter(1));
    harness
        .store
        .desired_set_instances("autoscaler", "hello", "dev", V1, 2, None)
        .unwrap();
    let woken = std::time::Instant::now();
    controller.wake();
    tokio::time::timeout(Duration::from_secs(10), async {
        while !routed(2) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the second replica is routed");
    let took = woken.elapsed();
    assert!(
        took < Duration::from_millis(800),
        "the ready replica was routed {took:?} after the wake: it waited for a later look"
    );
    stop.send(()).unwrap();
    tokio::time::timeout(BOUND, task).await.unwrap().unwrap();
}

/// A small file system of the test's own (tmpfs, mounted as root), unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// `None`, saying why, where mounting is not possible (not root); under `CI=true` that
    /// fails the test instead.
    fn mount(bytes: u64) -> Option<(Self, tempfile::TempDir)> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            let reason = "cannot mount a small tmpfs (the full-disk test needs root)";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
            eprintln!("skipped: {reason}");
            return None;
        }
        let store = tempfile::tempdir_in(dir.path()).unwrap();
        Some((Self { dir }, store))
    }

    /// Fills what is left with one file; removing it gives the room back.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.dir.path().join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while file.write_all(&chunk).is_ok() {}
        while file.write_all(&chunk[..512]).is_ok() {}
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// The store's disk fills mid-deploy: the events it could not take are kept, and written in
/// their order, saying when they happened, once there is room again; the deploy then ends.
#[tokio::test]
async fn events_refused_by_a_full_disk_are_written_once_it_has_room() {
    let Some((disk, store_dir)) = SmallDisk::mount(8 << 20) else {
        return;
    };
    let harness = Harness::with_store_in(fast_config(), store_dir);
    harness.onboard("hello");
    let first = harness.deploy("hello", BTreeMap::new());
    harness
        .settle(BOUND, |h| h.state(&first) == DeploymentState::Succeeded)
        .await;
    // The new instance takes a while to be ready: the disk fills once it has started.
    harness.driver.behave(V2, Behavior::ReadyAfter(8));
    let deployment = harness.deploy("hello", BTreeMap::new());
    harness
        .settle(BOUND, |h| {
            h.driver.workloads().iter().any(|s| s.revision == V2)
        })
        .await;
    let filler = disk.fill();
    let mut full = Vec::new();
    for _ in 0..20 {
        let errors = harness.controller.reconcile_all().await;
        full.extend(
            errors
                .iter()
                .map(|e| runway_log::chain(e))
                .filter(|e| e.contains("disk is full")),
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!full.is_empty(), "no write failed on the full disk");
    // Long enough that the late ones say when they happened.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let _ = harness.controller.reconcile_all().await;

    std::fs::remove_file(filler).unwrap();
    harness
        .settle(BOUND, |h| {
            h.state(&deployment) == DeploymentState::Succeeded
        })
        .await;
    let events = harness.events(&deployment);
    let late = events
        .iter()
        .position(|e| e.contains("written late"))
        .unwrap_or_else(|| panic!("no refused event was written: {events:#?}"));
    let succeeded = events
        .iter()
        .position(|e| e.contains("succeeded"))
        .unwrap_or_else(|| panic!("{events:#?}"));
    assert!(late < succeeded, "{events:#?}");
    eprintln!("events after a full disk: {events:#?}");
    drop(harness);
}

/// A plain process deployed while allowed does not start again once the leave is taken back
/// (a new instance, a restart, a scale-up): only an image, or the leave given again, does.
#[tokio::test]
async fn a_process_revision_does_not_start_once_processes_are_no_longer_allowed() {
    let harness = serving_v1().await;
    let strict = runway_control::Controller::new(
        fast_config(),
        std::sync::Arc::clone(&harness.store) as std::sync::Arc<dyn Store>,
        std::sync::Arc::clone(&harness.driver),
        std::sync::Arc::new(harness.ingress.clone()),
        Sealer::new(&harness.key),
    );
    let deployment = harness.deploy("hello", BTreeMap::new());
    let mut reasons = Vec::new();
    for _ in 0..10 {
        reasons.extend(strict.reconcile_all().await.iter().map(ToString::to_string));
    }
    assert!(
        !harness.driver.workloads().iter().any(|s| s.revision == V2),
        "a process started without leave"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("may not run plain processes")),
        "{reasons:?}"
    );
    // It can never start as things are: the deploy failed, saying why.
    let failed = harness.store.deployment_get(deployment.id).unwrap();
    assert_eq!(failed.state, DeploymentState::Failed, "{failed:?}");
    assert!(
        failed
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("may not run plain processes")),
        "{failed:?}"
    );
    harness
        .store
        .service_update(
            "admin",
            "hello",
            &runway_store::ServiceUpdate {
                allow_processes: Some(true),
                ..runway_store::ServiceUpdate::default()
            },
        )
        .unwrap();
    let again = harness.deploy("hello", BTreeMap::new());
    let until = tokio::time::Instant::now() + BOUND;
    while harness.state(&again) != DeploymentState::Succeeded {
        assert!(
            tokio::time::Instant::now() < until,
            "not deployed with leave"
        );
        let _ = strict.reconcile_all().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One pass over a service is a function of plain values: its desired state and its replicas
/// as a driver lists them in, its route, its status and when to look again out; what the
/// plan asks of the driver goes to the driver.
#[tokio::test]
async fn a_pass_over_plain_values_returns_its_route_status_and_next_look() {
    let harness = Harness::new(fast_config());
    harness.onboard("hello");
    harness.driver.behave(V1, Behavior::ReadyAfter(0));
    let deployment = harness.deploy("hello", BTreeMap::new());
    let desired = harness.store.desired_get("hello", "dev").unwrap();
    let controller = &harness.controller;

    // Nothing runs: the driver is asked for one instance, and nothing is routed to yet.
    let first = controller
        .reconcile("hello", "dev", desired.as_ref(), Vec::new())
        .await;
    assert!(first.errors.is_empty(), "{:?}", first.errors);
    assert_eq!(first.deployment, Some(deployment.id));
    assert_eq!(harness.driver.ids_of(V1).len(), 1);
    // Its events are written by the pass (no writer task runs beside `reconcile`).
    let started = format!("instance {} started", harness.driver.ids_of(V1)[0]);
    let events = harness.events(&deployment);
    assert!(events.contains(&started), "{events:#?}");
    let status = &first.status[0];
    assert_eq!(
        (
            status.revision.as_str(),
            status.desired_instances,
            status.ready
        ),
        (V1, 1, 0)
    );
    assert_eq!(status.condition, Condition::Progressing);
    assert!(first.route.is_none(), "{:?}", first.route);
    assert_eq!(harness.state(&deployment), DeploymentState::Progressing);

    // Its replica ready, as the driver lists it: routed whole, the deployment done, nothing
    // to look at again for time's sake, and nothing more asked of the driver.
    let listed = runway_driver::Driver::replicas(&*harness.driver)
        .await
        .unwrap();
    assert!(listed[0].ready);
    let second = controller
        .reconcile("hello", "dev", desired.as_ref(), listed.clone())
        .await;
    assert!(second.errors.is_empty(), "{:?}", second.errors);
    let route = second.route.expect("its route");
    assert_eq!(route.revisions.len(), 1);
    assert_eq!(
        (route.revisions[0].name.as_str(), route.revisions[0].weight),
        (V1, 100)
    );
    let addresses: Vec<_> = route.revisions[0]
        .instances
        .iter()
        .map(|i| i.address)
        .collect();
    assert_eq!(addresses, vec![listed[0].address.unwrap()]);
    assert_eq!(second.status[0].condition, Condition::Ready);
    assert_eq!(second.requeue_after_ms, None);
    assert_eq!(harness.state(&deployment), DeploymentState::Succeeded);
    assert_eq!(harness.driver.workloads().len(), 1);

    // No desired state: the route leaves the table first; the next pass drains the replica
    // and asks to be woken when the drain grace is over; the pass after that stops it.
    let third = controller
        .reconcile("hello", "dev", None, listed.clone())
        .await;
    assert!(third.errors.is_empty(), "{:?}", third.errors);
    assert!(third.route.is_none(), "{:?}", third.route);
    let fourth = controller
        .reconcile("hello", "dev", None, listed.clone())
        .await;
    assert!(fourth.errors.is_empty(), "{:?}", fourth.errors);
    let grace = fast_config().drain_grace_ms;
    assert!(
        fourth.requeue_after_ms.is_some_and(|ms| ms <= grace),
        "{:?}",
        fourth.requeue_after_ms
    );
    assert!(harness.driver.stopped().is_empty());
    tokio::time::sleep(Duration::from_millis(grace + 10)).await;
    let fifth = controller
        .reconcile("hello", "dev", None, listed.clone())
        .await;
    assert!(fifth.errors.is_empty(), "{:?}", fifth.errors);
    assert_eq!(harness.driver.stopped(), vec![listed[0].id.clone()]);
}
