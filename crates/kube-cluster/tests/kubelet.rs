//! The real node (`RUNWAY_KUBE_NODE=kubelet`, see the crate's docs, "A real node"): containerd
//! and a kubelet run a Deployment's busybox pods under the `restricted` Pod Security Standard,
//! ready, in EndpointSlices, answering HTTP at their addresses from the host, their logs through
//! `kubectl logs`, with no default route; a worker's `lifecycle.stopSignal` is the signal the
//! runtime sends on delete; and the host is as it was once the cluster stops.
//!
//! Opt-in: without the switch it prints why and passes.

#![allow(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// What `scripts/kubelet` builds and the node imports.
const BUSYBOX: &str = "runway.invalid/busybox:1";

const NAMESPACE: &str = "real-node";

/// A pod's first start on a loaded 2-core machine: sandbox, network, container.
const BOUND: Duration = Duration::from_secs(120);

/// The sysctls the kubelet sets, which the reaper puts back.
const SYSCTLS: [&str; 6] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

async fn until<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + BOUND;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: not within {BOUND:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The `restricted` Pod Security Standard: not root (a numeric user, as the image names
/// none), the runtime's seccomp profile, no capability, no escalation.
fn pod_security() -> Value {
    json!({
        "runAsNonRoot": true,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}

fn container_security() -> Value {
    json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}})
}

fn web() -> Deployment {
    let script = "echo \"hello from $HOSTNAME\" > /www/index.html && echo serving /www on 8080 && exec httpd -f -p 8080 -h /www";
    serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "automountServiceAccountToken": false,
                    "securityContext": pod_security(),
                    "containers": [{
                        "name": "web",
                        "image": BUSYBOX,
                        "imagePullPolicy": "Never",
                        "command": ["/bin/sh", "-c", script],
                        "ports": [{"containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/index.html", "port": 8080}, "periodSeconds": 1},
                        "securityContext": container_security(),
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                        "volumeMounts": [{"name": "www", "mountPath": "/www"}],
                    }],
                    "volumes": [{"name": "www", "emptyDir": {}}],
                },
            },
        },
    }))
    .unwrap()
}

/// A worker that stops on SIGQUIT: its trap says which signal came, and takes two seconds to
/// finish, so the line is read before the container goes. No preStop hook: the signal is the
/// runtime's, from `lifecycle.stopSignal`.
fn worker() -> Pod {
    let script = "trap 'echo got SIGQUIT; sleep 2; exit 0' QUIT; trap 'echo got SIGTERM; exit 1' TERM; echo working; while true; do sleep 1; done";
    serde_json::from_value(json!({
        "metadata": {"name": "worker"},
        "spec": {
            "automountServiceAccountToken": false,
            "os": {"name": "linux"},
            "terminationGracePeriodSeconds": 30,
            "securityContext": pod_security(),
            "containers": [{
                "name": "worker",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", script],
                "lifecycle": {"stopSignal": "SIGQUIT"},
                "securityContext": container_security(),
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
            }],
        },
    }))
    .unwrap()
}

/// One HTTP/1.0 GET from the host: the status line and the body.
fn http_get(address: &str, path: &str) -> (String, String) {
    let address: SocketAddr = format!("{address}:8080").parse().unwrap();
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: pod\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

fn kubectl(cluster: &kube_cluster::Cluster, args: &[&str]) -> String {
    let output = cluster
        .kubectl()
        .args(["--request-timeout=60s", "--namespace", NAMESPACE])
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn sysctls() -> Vec<(String, String)> {
    SYSCTLS
        .iter()
        .map(|name| {
            let value = std::fs::read_to_string(format!("/proc/sys/{name}")).unwrap();
            ((*name).to_owned(), value.trim().to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_kubelet_runs_serves_logs_and_stops_pods_with_their_signal() {
    if std::env::var("RUNWAY_KUBE_NODE").as_deref() != Ok("kubelet") {
        eprintln!("skipped: RUNWAY_KUBE_NODE is not kubelet");
        return;
    }
    let before = sysctls();
    let Some(cluster) = kube_cluster::start_or_skip("a_real_kubelet").await else {
        return;
    };
    eprintln!(
        "control plane and node up in {:?}; the node (containerd, images, kubelet) Ready in {:?}",
        cluster.started_in(),
        cluster.node_started_in()
    );
    let client = cluster.client();
    cluster
        .create_namespace(
            NAMESPACE,
            &[("pod-security.kubernetes.io/enforce", "restricted")],
        )
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);

    // Two pods, Ready and published.
    let created = Instant::now();
    deployments
        .create(&PostParams::default(), &web())
        .await
        .unwrap();
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let ready = until("two Ready pods", async || {
        let list = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .ok()?;
        let ready: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .collect();
        (ready.len() == 2).then_some(ready)
    })
    .await;
    eprintln!("Deployment to two Ready pods: {:?}", created.elapsed());
    let mut addresses = until("two ready endpoints", async || {
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
    eprintln!("Deployment to two ready endpoints: {:?}", created.elapsed());
    let mut pod_ips: Vec<String> = ready
        .iter()
        .map(|p| p.status.as_ref().unwrap().pod_ip.clone().unwrap())
        .collect();
    addresses.sort();
    pod_ips.sort();
    assert_eq!(addresses, pod_ips);

    // Each answers the host at its address, from its own container.
    for pod in &ready {
        let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
        let (status, body) = http_get(&ip, "/index.html");
        assert!(status.contains(" 200"), "{ip}: {status}");
        assert_eq!(body, format!("hello from {}\n", pod.name_any()));
    }

    // Logs through the API server and the kubelet; exec too, which shows the pod's routes.
    let name = ready[0].name_any();
    let logs = kubectl(&cluster, &["logs", &name]);
    assert_eq!(logs, "serving /www on 8080\n");
    let routes = kubectl(&cluster, &["exec", &name, "--", "ip", "route"]);
    assert!(
        !routes.is_empty() && !routes.contains("default"),
        "{routes}"
    );

    // The worker: on delete the runtime sends SIGQUIT, its stop signal.
    let started = Instant::now();
    pods.create(&PostParams::default(), &worker())
        .await
        .unwrap();
    let running = until("the worker running", async || {
        let pod = pods.get("worker").await.ok()?;
        let status = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
        status.state.as_ref()?.running.as_ref()?;
        Some(serde_json::to_value(status).unwrap())
    })
    .await;
    eprintln!("worker pod to running: {:?}", started.elapsed());
    assert_eq!(running["stopSignal"], "SIGQUIT", "{running}");
    let mut follow = cluster
        .kubectl()
        .args([
            "--request-timeout=90s",
            "--namespace",
            NAMESPACE,
            "logs",
            "--follow",
            "worker",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    let stdout = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    assert_eq!(
        received.recv_timeout(Duration::from_secs(60)).unwrap(),
        "working"
    );
    let deleted = Instant::now();
    pods.delete("worker", &DeleteParams::default())
        .await
        .unwrap();
    let mut after = Vec::new();
    while let Ok(line) = received.recv_timeout(Duration::from_secs(60)) {
        after.push(line);
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert_eq!(
        after,
        ["got SIGQUIT"],
        "what the worker printed once deleted"
    );
    until("the worker gone", async || {
        pods.get_opt("worker").await.ok()?.is_none().then_some(())
    })
    .await;
    eprintln!(
        "worker deleted to gone (SIGQUIT, 2 s to finish): {:?}",
        deleted.elapsed()
    );

    // Stopped, the host is as it was: no bridge, no cgroups, no fixed paths, the sysctls back.
    cluster.stop();
    assert!(!std::path::Path::new("/sys/class/net/kube-cluster").exists());
    for path in [
        "/sys/fs/cgroup/kubepods",
        "/sys/fs/cgroup/memory/kubepods",
        "/sys/fs/cgroup/pids/kubepods",
        "/var/lib/kubelet",
        "/var/log/containers",
    ] {
        assert!(!std::path::Path::new(path).exists(), "{path} is left");
    }
    assert_eq!(sysctls(), before);
}
