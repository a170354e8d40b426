//! The harness itself, against the real control plane: a Deployment's pods scheduled to the
//! node, run per their behaviour, published in EndpointSlices by the real controller and
//! answering HTTP at those addresses; logs through `pods/log`; graceful deletion; the audit
//! log; a compaction and an API server restart.

#![allow(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

use std::time::{Duration, Instant};

use futures_util::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, LogParams, PostParams};
use kube::{Api, ResourceExt};
use kube_cluster::Behavior;
use serde_json::json;

const BOUND: Duration = Duration::from_secs(60);

async fn until<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + BOUND;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: not within {BOUND:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn deployment(name: &str, revision: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"runway.dev/revision": revision}},
            "template": {
                "metadata": {"labels": {"runway.dev/revision": revision}},
                "spec": {
                    "automountServiceAccountToken": false,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "app",
                        "image": "registry.example/app:1",
                        "ports": [{"containerPort": 8080}],
                        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                    }],
                },
            },
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_serve_log_and_go_on_the_real_control_plane() {
    let Some(cluster) = kube_cluster::start_or_skip("pods_run_serve_log_and_go").await else {
        return;
    };
    eprintln!("control plane started in {:?}", cluster.started_in());
    let client = cluster.client();
    cluster
        .create_namespace(
            "demo",
            &[("pod-security.kubernetes.io/enforce", "restricted")],
        )
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "demo");
    let services: Api<Service> = Api::namespaced(client.clone(), "demo");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "demo");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "demo");

    // A privileged pod is refused by Pod Security: the ReplicaSet says so, no pod exists.
    let mut loose = deployment("loose", "loose", 1);
    loose
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .security_context = None;
    deployments
        .create(&PostParams::default(), &loose)
        .await
        .unwrap();

    let started = Instant::now();
    deployments
        .create(&PostParams::default(), &deployment("web", "web-1", 2))
        .await
        .unwrap();
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"runway.dev/revision": "web-1"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let addresses = until("two ready endpoints", async || {
        let list = slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
            .await
            .ok()?;
        let ready: Vec<String> = list
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter())
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
            .map(|e| e.addresses[0].clone())
            .collect();
        (ready.len() == 2).then_some(ready)
    })
    .await;
    eprintln!("deployment to two ready endpoints: {:?}", started.elapsed());
    for address in &addresses {
        let body = http_get(&format!("{address}:8080"), "/hello").await;
        assert_eq!(body, "web-1\n");
    }

    // Logs through pods/log, which the API server fetches from the node's kubelet port.
    let pod = pods
        .list(&ListParams::default().labels("runway.dev/revision=web-1"))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| {
            p.status.as_ref().and_then(|s| s.pod_ip.as_deref()) == Some(addresses[0].as_str())
        })
        .unwrap();
    let log = pods
        .logs(&pod.name_any(), &LogParams::default())
        .await
        .unwrap();
    assert!(log.contains("GET /hello"), "{log:?}");

    // A crash loop: the status and the previous run's logs, as a kubelet gives them.
    cluster.behave(
        "demo",
        "boom",
        Behavior::CrashLoop {
            exit_code: 3,
            message: "boom".into(),
            logs: vec!["starting".into(), "panic: boom".into()],
        },
    );
    deployments
        .create(&PostParams::default(), &deployment("boom", "boom", 1))
        .await
        .unwrap();
    let crashed = until("a restart", async || {
        pods.list(&ListParams::default().labels("runway.dev/revision=boom"))
            .await
            .ok()?
            .items
            .into_iter()
            .find(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|c| c.first())
                    .is_some_and(|c| c.restart_count >= 1)
            })
    })
    .await;
    let status = &crashed
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    let last = status
        .last_state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!((last.exit_code, last.message.as_deref()), (3, Some("boom")));
    let previous = pods
        .logs(
            &crashed.name_any(),
            &LogParams {
                previous: true,
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(previous, "starting\npanic: boom\n");

    // Followed logs end when the run ends.
    let follow = pods
        .log_stream(
            &crashed.name_any(),
            &LogParams {
                follow: true,
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    let lines: Vec<String> = tokio::time::timeout(BOUND, follow.lines().try_collect())
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(lines.len() <= 2, "{lines:?}");

    // The refused Deployment: the ReplicaSet's condition carries Pod Security's message.
    let message = until("the ReplicaSet's failure", async || {
        let list =
            Api::<k8s_openapi::api::apps::v1::ReplicaSet>::namespaced(client.clone(), "demo")
                .list(&ListParams::default().labels("runway.dev/revision=loose"))
                .await
                .ok()?;
        list.items
            .iter()
            .flat_map(|rs| rs.status.iter().flat_map(|s| s.conditions.iter().flatten()))
            .find(|c| c.type_ == "ReplicaFailure")
            .and_then(|c| c.message.clone())
    })
    .await;
    assert!(
        message.contains("violates PodSecurity \"restricted:latest\""),
        "{message}"
    );

    // Scale to zero: the pods terminate, are deleted by the node, and stop answering.
    deployments
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    until("no web pods", async || {
        let list = pods
            .list(&ListParams::default().labels("runway.dev/revision=web-1"))
            .await
            .ok()?;
        list.items.is_empty().then_some(())
    })
    .await;
    assert!(
        tokio::net::TcpStream::connect(format!("{}:8080", addresses[0]))
            .await
            .is_err()
    );

    // The audit log has the administrator's writes.
    let writes: Vec<_> = cluster
        .requests(kube_cluster::ADMIN_USER)
        .into_iter()
        .filter(|r| r.is_write() && r.namespace.as_deref() == Some("demo"))
        .map(|r| format!("{} {} {}", r.verb, r.resource, r.name.unwrap_or_default()))
        .collect();
    assert_eq!(
        writes,
        [
            "create deployments loose",
            "create deployments web",
            "create services web",
            "create deployments boom",
            "patch deployments web"
        ]
    );

    // A compaction and a restart: a watch from before is 410 Gone.
    let old = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    deployments
        .create(&PostParams::default(), &deployment("later", "later", 1))
        .await
        .unwrap();
    cluster.compact().unwrap();
    let restarted = Instant::now();
    cluster.restart_api_server().await.unwrap();
    eprintln!("API server restarted in {:?}", restarted.elapsed());
    let watch = pods
        .watch(&kube::api::WatchParams::default(), &old)
        .await
        .unwrap();
    let gone = std::pin::pin!(watch).try_next().await.unwrap();
    assert!(
        matches!(&gone, Some(kube::api::WatchEvent::Error(e)) if e.code == 410),
        "{gone:?}"
    );
    cluster.stop();
}

/// One HTTP/1.1 GET, its body.
async fn http_get(address: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response.split_once("\r\n\r\n").unwrap().1.to_owned()
}
