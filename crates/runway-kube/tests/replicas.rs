//! Which pods go, on a real control plane (`kube-cluster`): the ReplicaSet controller removes
//! pods that are not ready before ready ones whatever their deletion cost, so a drained, ready
//! replica the control plane retires beside a starting one must still be the one that goes;
//! and a followed log goes on across a container's restarts.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code, where a failing unwrap is a failing test, as clippy.toml allows in tests"
)]

mod support;

use std::time::Duration;

use kube_cluster::Behavior;
use runway_driver::{Driver, LogQuery, Replica, Scale};
use runway_kube::{KubeDriver, KubeOptions};
use support::workload;

const BOUND: Duration = Duration::from_secs(60);

const WEB: &str = "apiVersion: runway/v1
kind: RunwayService
metadata: {name: web}
spec:
  container_port: 8080
";

/// Waits until `check` holds of the revision's replicas.
async fn until(
    driver: &KubeDriver,
    revision: &str,
    what: &str,
    check: impl Fn(&[Replica]) -> bool,
) -> Vec<Replica> {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let replicas: Vec<Replica> = driver
            .replicas()
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.revision.as_deref() == Some(revision))
            .filter(|r| r.phase != runway_driver::Phase::Stopping)
            .collect();
        if check(&replicas) {
            return replicas;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {replicas:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_ready_replica_goes_before_a_starting_one() {
    let Some(cluster) = kube_cluster::start_or_skip("a_retired_ready_replica_goes").await else {
        return;
    };
    cluster.create_namespace("runway-dev", &[]).await.unwrap();
    let options = KubeOptions {
        environments: vec!["dev".to_owned()],
        ..KubeOptions::default()
    };
    let driver = KubeDriver::new(cluster.client(), options, None);
    driver.ready(BOUND).await.unwrap();
    let revision = "web-dev-00001";
    let web = workload(WEB, revision);

    // One ready replica, then a second that takes a minute to be ready.
    driver
        .scale(
            &web,
            &Scale {
                replicas: 1,
                retire: Vec::new(),
            },
        )
        .await
        .unwrap();
    let ready = until(&driver, revision, "one ready", |r| {
        r.len() == 1 && r[0].ready
    })
    .await;
    let drained = ready[0].id.clone();
    cluster.behave(
        "runway-dev",
        revision,
        Behavior::Ready {
            after: Duration::from_secs(120),
        },
    );
    driver
        .scale(
            &web,
            &Scale {
                replicas: 2,
                retire: Vec::new(),
            },
        )
        .await
        .unwrap();
    let two = until(&driver, revision, "a second, starting", |r| r.len() == 2).await;
    let starting = two.iter().find(|r| r.id != drained).unwrap().id.clone();

    // The ready one is retired, as after a drain: it goes, the starting one stays.
    driver
        .retire("web", "dev", revision, std::slice::from_ref(&drained))
        .await
        .unwrap();
    until(&driver, revision, "the retired one gone", |r| {
        !r.iter().any(|r| r.id == drained)
    })
    .await;
    // Let the ReplicaSet settle: the one left must be the starting one, and stay.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let left = until(&driver, revision, "the starting one left", |r| r.len() == 1).await;
    assert_eq!(left[0].id, starting, "{left:#?}");

    // A crash-looping revision's log, followed: lines of several runs arrive.
    let crashing = "web-dev-00002";
    cluster.behave(
        "runway-dev",
        crashing,
        Behavior::CrashLoop {
            exit_code: 1,
            message: "boom".into(),
            logs: vec!["starting".into()],
        },
    );
    driver
        .scale(
            &workload(WEB, crashing),
            &Scale {
                replicas: 1,
                retire: Vec::new(),
            },
        )
        .await
        .unwrap();
    let query = LogQuery {
        service: "web".to_owned(),
        env: "dev".to_owned(),
        replica: None,
        tail: 0,
        previous: false,
    };
    let mut lines = driver.follow(&query).await.unwrap();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + BOUND;
    while seen.len() < 3 {
        let line = tokio::time::timeout_at(deadline, lines.recv())
            .await
            .expect("three runs' lines within the bound")
            .expect("the follow ended");
        if line.replica.starts_with(crashing) {
            seen.push(line.time);
        }
    }
    seen.dedup();
    assert_eq!(seen.len(), 3, "the same line twice: {seen:?}");
    cluster.stop();
}
