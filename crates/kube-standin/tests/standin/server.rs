//! The server itself: authentication, discovery, the record of requests, validation of
//! what clients wrote, stopping.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::{bounded, client_for, deployment, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_the_token_get_401() {
    bounded(async {
        let (api, client) = start().await;
        let wrong = api.kubeconfig().replace(api.token(), "not-the-token");
        let stranger = client_for(&wrong).await;
        let namespaces: Api<Namespace> = Api::all(stranger);
        match namespaces.list(&Default::default()).await.unwrap_err() {
            kube::Error::Api(s) => {
                assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized"));
            }
            other => panic!("expected 401, got {other:?}"),
        }

        // With it, everything works, and is recorded.
        let version = client.apiserver_version().await.unwrap();
        assert_eq!(
            (version.major.as_str(), version.minor.as_str()),
            ("1", "33")
        );
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let names: Vec<String> = namespaces
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|n| n.metadata.name.unwrap())
            .collect();
        assert_eq!(
            names,
            ["default", "kube-node-lease", "kube-public", "kube-system"]
        );
        let requests = api.requests();
        assert_eq!(requests[0].code, 401);
        let listed = requests.iter().rfind(|r| r.verb == "list").unwrap();
        assert_eq!(
            (
                listed.group.as_str(),
                listed.resource.as_str(),
                listed.namespace.as_deref(),
                listed.code
            ),
            ("", "namespaces", None, 200)
        );

        // Discovery, as kube::Discovery reads it.
        let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
        let apps = discovery.get("apps").unwrap();
        assert!(
            apps.recommended_resources()
                .iter()
                .any(|(r, _)| r.plural == "deployments")
        );
        api.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_received_checks_what_clients_wrote() {
    bounded(async {
        let (api, client) = start().await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
            )
            .await
            .unwrap();
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "team");
        deployments
            .patch(
                "web",
                &PatchParams::apply("runway"),
                &Patch::Apply(deployment("web", "r1", 1)),
            )
            .await
            .unwrap();
        // A partial apply by another manager is checked as the object it produced.
        deployments
            .patch(
                "web",
                &PatchParams::apply("scaler").force(),
                &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "web"}, "spec": {"replicas": 2}})),
            )
            .await
            .unwrap();
        api.validate_received().unwrap();

        // A field Kubernetes does not have: stored (no schema at write time), caught here.
        let mut bad = deployment("bad", "r1", 1);
        bad["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] =
            json!({"httpGet": {"port": 8080}});
        deployments
            .patch("bad", &PatchParams::apply("runway"), &Patch::Apply(&bad))
            .await
            .unwrap();
        match api.validate_received() {
            Err(err) => {
                assert!(err.contains("readinessprobe"), "{err}");
                assert!(err.starts_with("Deployment bad:"), "{err}");
            }
            Ok(()) => assert!(
                std::process::Command::new("kubernetes-validate")
                    .arg("--version")
                    .output()
                    .is_err(),
                "kubernetes-validate is installed but passed an unknown field"
            ),
        }
        api.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_ends_everything() {
    bounded(async {
        let (api, client) = start().await;
        crate::apply_deployment(&client, "default", &deployment("web", "r1", 1)).await;
        let url = api.url();
        let pod = crate::eventually("a pod with an address", || async {
            api.objects("pods").into_iter().find(|p| {
                p.pointer("/status/podIP").is_some()
                    && p.pointer("/status/containerStatuses/0/ready") == Some(&json!(true))
            })
        })
        .await;
        let ip = pod["status"]["podIP"].as_str().unwrap().to_owned();
        let name = pod["metadata"]["name"].as_str().unwrap();
        assert!(api.object("Pod", "default", name).is_some());
        assert!(api.object("apps/v1/Deployment", "default", "web").is_some());
        api.stop().await;
        let port = url.rsplit(':').next().unwrap().parse::<u16>().unwrap();
        assert!(
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
        );
        assert!(
            tokio::net::TcpStream::connect((ip.as_str(), 8080))
                .await
                .is_err()
        );
    })
    .await;
}
