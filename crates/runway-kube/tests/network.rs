//! A revision's network objects on a real API server (`kube-cluster`): its NetworkPolicy applied
//! with (and owned by) its Deployment, the service's internal Service shared by its revisions
//! and pruned with the last by the garbage collector, `vpc_access` refused without private
//! ranges. The API server validates every object the driver applies, strictly.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code, where a failing unwrap is a failing test, as clippy.toml allows in tests"
)]

mod support;

use std::time::Duration;

use runway_driver::{Driver, DriverError, Scale};
use runway_kube::{KubeDriver, KubeOptions, NetworkOptions, Peer};
use serde_json::Value;
use support::workload;

const USERS: &str = "apiVersion: runway/v1
kind: RunwayService
metadata: {name: users}
spec:
  container_port: 8080
  load_balancing:
    external_load_balancer: {enabled: false}
  workload:
    callers: [web]
";

/// The object, as JSON, if it exists.
async fn object(client: &kube::Client, resource: &str, name: &str) -> Option<Value> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let namespace = "runway-dev";
    match resource {
        "networkpolicies" => kube::Api::<NetworkPolicy>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .unwrap()
            .map(|o| serde_json::to_value(o).unwrap()),
        "services" => kube::Api::<Service>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .unwrap()
            .map(|o| serde_json::to_value(o).unwrap()),
        "deployments" => kube::Api::<Deployment>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .unwrap()
            .map(|o| serde_json::to_value(o).unwrap()),
        other => panic!("no such resource here: {other}"),
    }
}

/// Waits, at most 30 s, until `check` holds of the object (None when it is gone).
async fn until(
    client: &kube::Client,
    resource: &str,
    name: &str,
    check: impl Fn(Option<&Value>) -> bool,
) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let object = object(client, resource, name).await;
        if check(object.as_ref()) {
            return object;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{resource}/{name}: {object:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the driver's watch has seen the revision's Deployment: it removes only those.
async fn seen(driver: &KubeDriver, revision: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !driver
        .revisions()
        .await
        .unwrap()
        .iter()
        .any(|k| k.revision == revision)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{revision} never seen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The names of the object's owners, sorted.
fn owners(object: &Value) -> Vec<String> {
    let mut names: Vec<String> = object["metadata"]["ownerReferences"]
        .as_array()
        .map(|refs| {
            refs.iter()
                .map(|r| r["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revisions_policy_and_internal_service_are_applied_and_pruned() {
    let Some(cluster) =
        kube_cluster::start_or_skip("a_revisions_policy_and_internal_service").await
    else {
        return;
    };
    cluster.create_namespace("runway-dev", &[]).await.unwrap();
    let client = cluster.client();
    let options = KubeOptions {
        namespace_pattern: "runway-{env}".to_owned(),
        environments: vec!["dev".to_owned()],
        ..KubeOptions::default()
    };
    let driver = KubeDriver::new(client.clone(), options, None);
    driver.ready(Duration::from_secs(30)).await.unwrap();
    let one = Scale {
        replicas: 1,
        retire: Vec::new(),
    };

    let first = workload(USERS, "users-dev-00001");
    driver.scale(&first, &one).await.unwrap();
    let policy = object(&client, "networkpolicies", "users-dev-00001")
        .await
        .expect("the revision's NetworkPolicy");
    assert_eq!(owners(&policy), ["users-dev-00001"]);
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"]["runway.dev/revision"],
        "users-dev-00001"
    );
    // Off the public ingress, but Runway's ingress carries calls to private names too.
    let from = &policy["spec"]["ingress"][0]["from"];
    assert_eq!(
        from[0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "ingress"
    );
    assert_eq!(
        from[1]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "runway-dev"
    );
    assert_eq!(
        from[1]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "web"
    );
    let internal = object(&client, "services", "users-internal")
        .await
        .expect("the internal Service");
    assert_eq!(owners(&internal), ["users-dev-00001"]);

    // A second revision shares the internal Service, as one more of its owners.
    let second = workload(USERS, "users-dev-00002");
    driver.scale(&second, &one).await.unwrap();
    let internal = object(&client, "services", "users-internal").await.unwrap();
    assert_eq!(owners(&internal), ["users-dev-00001", "users-dev-00002"]);

    // The first removed: its policy goes, the internal Service stays with the second.
    seen(&driver, "users-dev-00001").await;
    driver
        .remove("users", "dev", "users-dev-00001")
        .await
        .unwrap();
    until(&client, "networkpolicies", "users-dev-00001", |o| {
        o.is_none()
    })
    .await;
    until(&client, "services", "users-internal", |o| {
        o.is_some_and(|o| owners(o) == ["users-dev-00002"])
    })
    .await;
    assert!(
        object(&client, "networkpolicies", "users-dev-00002")
            .await
            .is_some()
    );

    // The last removed: nothing is left.
    seen(&driver, "users-dev-00002").await;
    driver
        .remove("users", "dev", "users-dev-00002")
        .await
        .unwrap();
    for (resource, name) in [
        ("networkpolicies", "users-dev-00002"),
        ("services", "users-dev-00002"),
        ("services", "users-internal"),
    ] {
        until(&client, resource, name, |o| o.is_none()).await;
    }

    // vpc_access without private ranges is refused before anything is written; with them, the
    // policy reaches them.
    let vpc = USERS.replace("spec:\n", "spec:\n  vpc_access: {enabled: true}\n");
    let third = workload(&vpc, "users-dev-00003");
    let error = driver.scale(&third, &one).await.unwrap_err();
    assert!(
        matches!(&error, DriverError::Refused(why) if why.contains("vpc_access")),
        "{error:?}"
    );
    assert!(
        object(&client, "deployments", "users-dev-00003")
            .await
            .is_none()
    );
    let driver = driver.with_network(NetworkOptions {
        vpc_ranges: vec!["10.20.0.0/16".parse().unwrap()],
        ingress: Some(Peer::runway_ingress()),
    });
    driver.scale(&third, &one).await.unwrap();
    let policy = object(&client, "networkpolicies", "users-dev-00003")
        .await
        .unwrap();
    assert!(
        policy["spec"]["egress"]
            .as_array()
            .unwrap()
            .iter()
            .any(|rule| rule["to"][0]["ipBlock"]["cidr"] == "10.20.0.0/16"),
        "{policy:#}"
    );

    cluster.stop();
}
