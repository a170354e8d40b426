//! The stand-in driven by the real kube-rs client over HTTPS.

#![allow(clippy::unwrap_used)]

mod apply;
mod cluster;
mod pods;
mod server;
mod watch;

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use kube_standin::StandIn;
use serde_json::{Value, json};

/// Every test's bound.
const LIMIT: Duration = Duration::from_secs(60);

/// Runs a test body within [`LIMIT`].
async fn bounded<F: Future<Output = ()>>(body: F) {
    tokio::time::timeout(LIMIT, body)
        .await
        .expect("the test took longer than its bound");
}

/// A started stand-in and a kube client configured from its kubeconfig.
async fn start() -> (StandIn, kube::Client) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let api = StandIn::start().await.unwrap();
    let client = api.client().await.unwrap();
    (api, client)
}

async fn client_for(kubeconfig: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::from_yaml(kubeconfig).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// Polls `check` every 50 ms until it returns Some, for at most 20 s.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A Deployment of `replicas` pods labelled `app: {name}` and `runway.dev/revision:
/// {revision}`, listening on 8080 (named `http`).
fn deployment(name: &str, revision: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, "runway.dev/revision": revision}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "app",
                        "image": "registry.example/app:1",
                        "ports": [{"name": "http", "containerPort": 8080}],
                    }],
                },
            },
        },
    })
}

/// Applies a Deployment as manager `runway`, forcing (as a driver that owns its objects does).
async fn apply_deployment(client: &kube::Client, ns: &str, body: &Value) -> Deployment {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let name = body["metadata"]["name"].as_str().unwrap();
    api.patch(
        name,
        &PatchParams::apply("runway").force(),
        &Patch::Apply(body),
    )
    .await
    .unwrap()
}
