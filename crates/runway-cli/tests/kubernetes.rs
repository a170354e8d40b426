//! `runway server` with `runtime.kind: kubernetes`, end to end over a stand-in API server
//! (`kube-standin`: real HTTPS, server-side apply, watches, a simulated deployment
//! controller, EndpointSlices and kubelet whose pods answer on loopback addresses). Through
//! the real server and CLI: a deploy that runs as a Deployment and is served through the
//! ingress at the pod's address, a second revision taking over, a crash-looping revision
//! diagnosed and rolled back, and a restart of Runway that adopts everything with no write.

#![allow(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

mod support;

use std::time::Duration;

use kube_standin::{Behavior, StandIn};
use support::{Platform, Settings, set_image_manifest};

const BOUND: Duration = Duration::from_secs(90);
const IMAGE: &str = "registry.example/hello@sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";

/// A stand-in cluster and a platform driving it.
fn cluster() -> (tokio::runtime::Runtime, StandIn, Platform) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let standin = rt.block_on(StandIn::start()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, standin.kubeconfig()).unwrap();
    // The environment's namespace is the installation's to make (Runway's chart does).
    rt.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
        let namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "runway-dev"}
        }))
        .unwrap();
        namespaces
            .create(&Default::default(), &namespace)
            .await
            .unwrap();
    });
    let settings = Settings {
        sections: format!(
            "runtime:\n  kind: kubernetes\n  kubernetes:\n    kubeconfig: {}\n",
            kubeconfig.display()
        ),
        allow_processes: false,
        ..Settings::default()
    };
    let platform = Platform::start(&settings);
    // The kubeconfig stays as long as the platform.
    std::mem::forget(dir);
    (rt, standin, platform)
}

/// The stand-in's writes: what the driver changed on the cluster.
fn writes(standin: &StandIn) -> Vec<String> {
    standin
        .requests()
        .into_iter()
        .filter(|r| matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete"))
        .map(|r| {
            format!(
                "{} {}/{} {}",
                r.verb,
                r.resource,
                r.namespace.unwrap_or_default(),
                r.name.unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn a_service_runs_on_kubernetes_through_the_real_server_and_cli() {
    let (rt, standin, platform) = cluster();
    let repo = platform.onboard("hello", &["dev"], "s3cr3t");
    set_image_manifest(&repo, 2, 2);

    // The first revision: a Deployment and a Service of its own, its secret referenced by
    // version, served through the ingress at its pods' addresses.
    let deploy = platform.deploy_image(&repo, "dev", IMAGE);
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    let (status, body) = platform.get_until("hello.dev.localhost", "/", BOUND, |s, b| {
        s == 200 && b.trim() == "hello-dev-00001"
    });
    assert_eq!((status, body.trim()), (200, "hello-dev-00001"));
    let deployment = standin
        .object("deployments", "runway-dev", "hello-dev-00001")
        .expect("no Deployment for the revision");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "runway"
    );
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"]["runway.dev/revision"],
        "hello-dev-00001"
    );
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], IMAGE);
    let env = container["env"].as_array().unwrap();
    let secret = env.iter().find(|e| e["name"] == "API_KEY").unwrap();
    assert_eq!(
        secret["valueFrom"]["secretKeyRef"],
        serde_json::json!({"name": "hello-api-key", "key": "v1"})
    );
    assert!(
        !deployment.to_string().contains("s3cr3t"),
        "a secret's value is inlined into the Deployment"
    );
    let secret = standin
        .object("secrets", "runway-dev", "hello-api-key")
        .expect("no Secret");
    assert!(secret["data"]["v1"].is_string(), "{secret}");
    let managers: Vec<&str> = deployment["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(managers.contains(&"runway"), "{managers:?}");

    // The status shows the pods as instances, with their addresses.
    let status = platform.runway(&[
        "status",
        "--service",
        "hello",
        "--env",
        "dev",
        "--output",
        "json",
    ]);
    assert!(status.ok(), "{}", status.all());
    let instances = status.json()["instances"].as_array().unwrap().clone();
    assert_eq!(instances.len(), 2, "{instances:?}");
    assert!(
        instances.iter().all(|i| i["ready"] == true),
        "{instances:?}"
    );

    // A second revision takes over; the first goes to no pods.
    let deploy = platform.deploy_image(&repo, "dev", IMAGE);
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    platform.get_until("hello.dev.localhost", "/", BOUND, |s, b| {
        s == 200 && b.trim() == "hello-dev-00002"
    });

    // A revision whose pods crash: the deployment fails with the container's last words,
    // and the second revision keeps serving.
    standin.behave(
        "hello-dev-00003",
        Behavior::CrashLoop {
            exit_code: 3,
            message: "cannot reach the database".to_owned(),
            logs: vec!["connecting to db:5432".to_owned()],
        },
    );
    let deploy = platform.deploy_image(&repo, "dev", IMAGE);
    assert!(
        !deploy.ok(),
        "a crash-looping revision deployed: {}",
        deploy.all()
    );
    let said = deploy.all();
    assert!(
        said.contains("exit code 3") || said.contains("code 3"),
        "{said}"
    );
    assert!(said.contains("cannot reach the database"), "{said}");
    let (status, body) = platform.get("hello.dev.localhost", "/", Duration::from_secs(10));
    assert_eq!((status, body.trim()), (200, "hello-dev-00002"));

    // Every object the driver wrote is valid against the official schemas.
    standin.validate_received().unwrap();
    drop(platform);
    rt.block_on(standin.stop());
}

#[test]
fn a_restart_of_runway_adopts_what_runs_with_no_write() {
    let (rt, standin, mut platform) = cluster();
    let repo = platform.onboard("hello", &["dev"], "s3cr3t");
    set_image_manifest(&repo, 1, 1);
    let deploy = platform.deploy_image(&repo, "dev", IMAGE);
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    platform.get_until("hello.dev.localhost", "/", BOUND, |s, b| {
        s == 200 && b.trim() == "hello-dev-00001"
    });
    // Steady state: rounds run (every 250 ms) and neither write nor read: replicas come from
    // the driver's watches.
    std::thread::sleep(Duration::from_secs(2));
    let seen = standin.requests().len();
    std::thread::sleep(Duration::from_secs(3));
    let steady: Vec<String> = standin.requests()[seen..]
        .iter()
        .map(|r| format!("{} {}", r.verb, r.resource))
        .collect();
    eprintln!(
        "steady state: {} API requests in 3 s (12 rounds)",
        steady.len()
    );
    assert_eq!(steady, [] as [String; 0], "requests at steady state");

    // A restart adopts everything: it lists and watches, and writes nothing.
    let before = writes(&standin);
    let seen = standin.requests().len();
    platform.kill9();
    platform.restart();
    std::thread::sleep(Duration::from_secs(4));
    let restart = &standin.requests()[seen..];
    let count = |verb: &str| restart.iter().filter(|r| r.verb == verb).count();
    eprintln!(
        "a restart of Runway: {} API requests, {} lists and {} watches (pods, EndpointSlices, \
         Deployments and events in each environment's namespace), 0 writes",
        restart.len(),
        count("list"),
        count("watch")
    );
    assert_eq!(restart.len(), count("list") + count("watch"), "{restart:?}");
    assert_eq!(writes(&standin), before, "a restart wrote to the cluster");
    let (status, body) = platform.get("hello.dev.localhost", "/", Duration::from_secs(10));
    assert_eq!((status, body.trim()), (200, "hello-dev-00001"));
    assert_eq!(standin.objects("pods").len(), 1);
    drop(platform);
    rt.block_on(standin.stop());
}
