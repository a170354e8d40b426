//! The simulated cluster: Deployments to pods, scale-down order, rolling updates,
//! EndpointSlices following readiness, pods answering HTTP, garbage collection.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_standin::Behavior;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{apply_deployment, bounded, deployment, eventually, start};

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

async fn pods_of(client: &kube::Client, app: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
}

/// The pods of `app` once there are exactly `n`, none terminating, all ready.
async fn ready_pods(client: &kube::Client, app: &str, n: usize) -> Vec<Pod> {
    eventually(&format!("{n} ready pods of {app}"), || async {
        let pods = pods_of(client, app).await;
        (pods.len() == n
            && pods
                .iter()
                .all(|p| ready(p) && p.metadata.deletion_timestamp.is_none()))
        .then_some(pods)
    })
    .await
}

/// GET / on the pod's address.
async fn http_get(ip: &str, port: u16) -> String {
    let mut tcp = tokio::net::TcpStream::connect((ip, port)).await.unwrap();
    tcp.write_all(b"GET /hello HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    tcp.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_scales_up_and_down_respecting_deletion_cost() {
    bounded(async {
        let (api, client) = start().await;
        let created = apply_deployment(&client, "default", &deployment("web", "r1", 3)).await;
        let pods = ready_pods(&client, "web", 3).await;
        let uid = created.metadata.uid.clone().unwrap();
        for p in &pods {
            let name = p.metadata.name.clone().unwrap();
            let parts: Vec<&str> = name.split('-').collect();
            assert_eq!(parts.len(), 3, "{name}");
            assert_eq!(parts[0], "web");
            assert_eq!(parts[1].len(), 10);
            assert_eq!(parts[2].len(), 5);
            assert!(
                name[4..]
                    .chars()
                    .all(|c| c == '-' || c.is_ascii_lowercase() || c.is_ascii_digit())
            );
            let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
            assert_eq!(
                (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
                ("Deployment", uid.as_str(), Some(true))
            );
            let labels = p.metadata.labels.as_ref().unwrap();
            assert_eq!(labels["runway.dev/revision"], "r1");
            assert_eq!(labels["pod-template-hash"], parts[1]);
            assert!(
                p.status
                    .as_ref()
                    .unwrap()
                    .pod_ip
                    .as_ref()
                    .unwrap()
                    .starts_with("127.77.")
            );
        }
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        let status = eventually("the deployment's status", || async {
            let d = deployments.get("web").await.unwrap();
            let s = d.status.unwrap_or_default();
            (s.ready_replicas == Some(3) && s.available_replicas == Some(3)).then_some(s)
        })
        .await;
        assert_eq!(status.observed_generation, Some(1));
        assert_eq!(status.updated_replicas, Some(3));
        let conditions = status.conditions.unwrap();
        let available = conditions.iter().find(|c| c.type_ == "Available").unwrap();
        assert_eq!(
            (available.status.as_str(), available.reason.as_deref()),
            ("True", Some("MinimumReplicasAvailable"))
        );
        let progressing = conditions
            .iter()
            .find(|c| c.type_ == "Progressing")
            .unwrap();
        assert_eq!(
            progressing.reason.as_deref(),
            Some("NewReplicaSetAvailable")
        );

        // Costs: the cheapest goes first, then (among the rest, all ready) the default 0.
        let names: Vec<String> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        let pod_api: Api<Pod> = Api::namespaced(client.clone(), "default");
        for (name, cost) in names.iter().zip(["-10", "0", "10"]) {
            if cost == "0" {
                continue;
            }
            pod_api
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Strategic(json!({"metadata": {"annotations": {
                        "controller.kubernetes.io/pod-deletion-cost": cost
                    }}})),
                )
                .await
                .unwrap();
        }
        deployments
            .patch_scale(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 2}})),
            )
            .await
            .unwrap();
        let left = ready_pods(&client, "web", 2).await;
        let mut left: Vec<String> = left
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        left.sort();
        let mut want = vec![names[1].clone(), names[2].clone()];
        want.sort();
        assert_eq!(left, want, "the pod with cost -10 went");

        let mut smaller = deployment("web", "r1", 1);
        smaller["spec"]["replicas"] = json!(1);
        apply_deployment(&client, "default", &smaller).await;
        let left = ready_pods(&client, "web", 1).await;
        assert_eq!(
            left[0].metadata.name.as_ref(),
            Some(&names[2]),
            "the pod with cost 10 stays"
        );

        // Up again.
        apply_deployment(&client, "default", &deployment("web", "r1", 4)).await;
        ready_pods(&client, "web", 4).await;
        let scale = deployments.get_scale("web").await.unwrap();
        assert_eq!(scale.spec.unwrap().replicas, Some(4));
        assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=web"));
        // The Scale's resource version is a precondition, as the Deployment's.
        let stale = json!({"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 2}});
        match deployments
            .patch_scale("web", &PatchParams::default(), &Patch::Merge(&stale))
            .await
            .unwrap_err()
        {
            kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (409, "Conflict")),
            other => panic!("{other:?}"),
        }

        // At rest, nothing is written: the controllers and the kubelet are idempotent.
        let version = || async {
            pod_api
                .list(&ListParams::default())
                .await
                .unwrap()
                .metadata
                .resource_version
                .unwrap()
        };
        let settled = eventually("the deployment's status to settle", || async {
            let d = deployments.get("web").await.unwrap();
            (d.status.unwrap_or_default().available_replicas == Some(4)).then_some(())
        });
        settled.await;
        let before = version().await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(version().await, before, "writes at rest");
        api.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_change_rolls_the_pods() {
    bounded(async {
        let (api, client) = start().await;
        apply_deployment(&client, "default", &deployment("web", "r1", 2)).await;
        let before = ready_pods(&client, "web", 2).await;
        apply_deployment(&client, "default", &deployment("web", "r2", 2)).await;
        let after = eventually("every pod on r2", || async {
            let pods = pods_of(&client, "web").await;
            (pods.len() == 2
                && pods.iter().all(|p| {
                    ready(p) && p.metadata.labels.as_ref().unwrap()["runway.dev/revision"] == "r2"
                }))
            .then_some(pods)
        })
        .await;
        for p in &after {
            assert!(before.iter().all(|b| b.metadata.name != p.metadata.name));
        }
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        eventually("the rollout to finish", || async {
            let s = deployments
                .get("web")
                .await
                .unwrap()
                .status
                .unwrap_or_default();
            (s.observed_generation == Some(2)
                && s.updated_replicas == Some(2)
                && s.replicas == Some(2)
                && s.available_replicas == Some(2))
            .then_some(())
        })
        .await;
        api.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_slices_follow_readiness_and_pods_answer_http() {
    bounded(async {
        let (api, client) = start().await;
        api.behave("r1", Behavior::NotReady);
        let services: Api<Service> = Api::namespaced(client.clone(), "default");
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
        }))
        .unwrap();
        let svc = services.create(&PostParams::default(), &svc).await.unwrap();
        apply_deployment(&client, "default", &deployment("web", "r1", 2)).await;

        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
        let by_service = ListParams::default().labels("kubernetes.io/service-name=web");
        let slice = eventually("two not-ready endpoints", || async {
            let list = slices.list(&by_service).await.unwrap().items;
            let slice = list.into_iter().next()?;
            (slice.endpoints.len() == 2).then_some(slice)
        })
        .await;
        let name = slice.metadata.name.clone().unwrap();
        assert!(name.starts_with("web-") && name.len() == "web-".len() + 5, "{name}");
        let labels = slice.metadata.labels.clone().unwrap();
        assert_eq!(labels["endpointslice.kubernetes.io/managed-by"], "endpointslice-controller.k8s.io");
        assert_eq!(slice.address_type, "IPv4");
        let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Service", svc.metadata.uid.as_deref().unwrap()));
        let port = &slice.ports.as_ref().unwrap()[0];
        assert_eq!((port.name.as_deref(), port.port, port.protocol.as_deref()), (Some("http"), Some(8080), Some("TCP")));
        for e in &slice.endpoints {
            let c = e.conditions.as_ref().unwrap();
            assert_eq!((c.ready, c.serving, c.terminating), (Some(false), Some(false), Some(false)));
            assert_eq!(e.target_ref.as_ref().unwrap().kind.as_deref(), Some("Pod"));
        }

        // The readiness probe passes: the endpoints become ready.
        api.behave("r1", Behavior::Ready { after: Duration::from_millis(50) });
        let slice = eventually("two ready endpoints", || async {
            let slice = slices.list(&by_service).await.unwrap().items.into_iter().next()?;
            (slice.endpoints.len() == 2
                && slice.endpoints.iter().all(|e| e.conditions.as_ref().unwrap().ready == Some(true)))
            .then_some(slice)
        })
        .await;

        // A real request to a pod's address is answered with its revision.
        let ip = slice.endpoints[0].addresses[0].clone();
        let response = http_get(&ip, 8080).await;
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        assert!(response.ends_with("\r\n\r\nr1\n"), "{response}");

        // A deleted pod's endpoint is terminating (not ready, still serving), then gone.
        let pod_name = slice.endpoints[0].target_ref.as_ref().unwrap().name.clone().unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        pods.delete(&pod_name, &DeleteParams::default()).await.unwrap();
        eventually("a terminating endpoint", || async {
            let slice = slices.list(&by_service).await.unwrap().items.into_iter().next()?;
            slice
                .endpoints
                .iter()
                .any(|e| {
                    let c = e.conditions.as_ref().unwrap();
                    e.target_ref.as_ref().unwrap().name.as_deref() == Some(pod_name.as_str())
                        && (c.ready, c.serving, c.terminating) == (Some(false), Some(true), Some(true))
                })
                .then_some(())
        })
        .await;
        eventually("the deleted pod's endpoint gone, a replacement ready", || async {
            let slice = slices.list(&by_service).await.unwrap().items.into_iter().next()?;
            (slice.endpoints.len() == 2
                && slice.endpoints.iter().all(|e| {
                    e.target_ref.as_ref().unwrap().name.as_deref() != Some(pod_name.as_str())
                        && e.conditions.as_ref().unwrap().ready == Some(true)
                }))
            .then_some(())
        })
        .await;
        assert!(pods.get_opt(&pod_name).await.unwrap().is_none());
        api.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_collection_follows_owner_references() {
    bounded(async {
        let (api, client) = start().await;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");

        // Background (the default): the Deployment goes at once, its pods after it.
        apply_deployment(&client, "default", &deployment("bg", "r1", 2)).await;
        ready_pods(&client, "bg", 2).await;
        deployments.delete("bg", &DeleteParams::default()).await.unwrap();
        assert!(deployments.get_opt("bg").await.unwrap().is_none());
        eventually("the pods of bg gone", || async { pods_of(&client, "bg").await.is_empty().then_some(()) }).await;

        // Foreground: the Deployment stays (with the finalizer) until its pods are gone.
        apply_deployment(&client, "default", &deployment("fg", "r1", 2)).await;
        ready_pods(&client, "fg", 2).await;
        deployments.delete("fg", &DeleteParams::foreground()).await.unwrap();
        let d = deployments.get("fg").await.unwrap();
        assert!(d.metadata.deletion_timestamp.is_some());
        assert_eq!(d.metadata.finalizers, Some(vec!["foregroundDeletion".to_owned()]));
        eventually("fg and its pods gone", || async {
            (deployments.get_opt("fg").await.unwrap().is_none() && pods_of(&client, "fg").await.is_empty()).then_some(())
        })
        .await;

        // Orphan: the pods stay, without the reference.
        apply_deployment(&client, "default", &deployment("orphan", "r1", 1)).await;
        ready_pods(&client, "orphan", 1).await;
        deployments.delete("orphan", &DeleteParams::orphan()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let left = pods_of(&client, "orphan").await;
        assert_eq!(left.len(), 1);
        assert!(left[0].metadata.owner_references.as_ref().is_none_or(Vec::is_empty));

        // Any object, by uid, cascading.
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let owner = maps
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap())
            .await
            .unwrap();
        let reference = |name: &str, uid: &str| json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid}]);
        let child = maps
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {
                "name": "child", "ownerReferences": reference("owner", owner.metadata.uid.as_deref().unwrap())
            }})).unwrap())
            .await
            .unwrap();
        maps.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {
            "name": "grandchild", "ownerReferences": reference("child", child.metadata.uid.as_deref().unwrap())
        }})).unwrap())
        .await
        .unwrap();
        // A finalizer holds the owner back until it is removed.
        maps.patch(
            "owner",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}})),
        )
        .await
        .unwrap();
        maps.delete("owner", &DeleteParams::default()).await.unwrap();
        let held = maps.get("owner").await.unwrap();
        assert!(held.metadata.deletion_timestamp.is_some());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(maps.get_opt("child").await.unwrap().is_some(), "its owner is still there");
        maps.patch(
            "owner",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
        assert!(maps.get_opt("owner").await.unwrap().is_none());
        eventually("child and grandchild collected", || async {
            let names: BTreeMap<String, ()> = maps
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|m| (m.metadata.name.unwrap(), ()))
                .collect();
            (!names.contains_key("child") && !names.contains_key("grandchild")).then_some(())
        })
        .await;
        api.stop().await;
    })
    .await;
}
