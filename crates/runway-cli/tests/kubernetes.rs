//! `runway server` with `runtime.kind: kubernetes`, end to end over a real control plane
//! (`kube-cluster`: etcd, kube-apiserver with RBAC and Pod Security, the controller manager's
//! deployment, ReplicaSet, EndpointSlice and garbage collector controllers, the scheduler, and
//! a simulated node whose pods answer HTTP). Runway is installed as the chart installs it
//! (`helm template | kubectl apply`: namespaces enforcing `restricted`, a ServiceAccount and
//! its Roles) and its driver runs with that ServiceAccount's token. Through the real server and
//! CLI: a deploy that runs as a Deployment and is served through the ingress at the pods'
//! addresses, a second revision taking over, a crash-looping revision diagnosed and rolled
//! back, a restart of Runway that adopts everything with no write, one of the API server
//! (watches ended, history compacted: 410) that the driver lists through, rollback, promote,
//! scale to zero and back, a canary, blue/green, decommission with real garbage collection.

#![allow(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

mod support;

use std::time::Duration;

use kube_cluster::Behavior;
use support::kube::Installed;
use support::{Platform, Settings, set_image_manifest};

const BOUND: Duration = Duration::from_secs(90);
const IMAGE: &str = "registry.example/hello@sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";

/// Runway installed on the process's cluster, and a platform driving it; `None` when the
/// cluster cannot run here (a failure under `CI=true`).
fn cluster(test: &str) -> Option<(Installed, Platform)> {
    cluster_from(test, Settings::default())
}

/// As [`cluster`], with `extra`'s `control`, `api` and `ingress` lines.
fn cluster_from(test: &str, extra: Settings) -> Option<(Installed, Platform)> {
    let helm = support::kube::helm()?;
    let cluster = kube_cluster::shared(test)?;
    Some(start_on(cluster, &helm, extra))
}

fn start_on(
    cluster: &'static kube_cluster::Cluster,
    helm: &std::path::Path,
    extra: Settings,
) -> (Installed, Platform) {
    let installed = support::kube::install(
        cluster,
        helm,
        &support::kube::release("k"),
        &["dev", "staging", "production"],
    );
    let settings = Settings {
        sections: installed.runtime_section(),
        allow_processes: false,
        ..extra
    };
    let platform = Platform::start(&settings);
    (installed, platform)
}

#[test]
fn a_service_runs_on_kubernetes_through_the_real_server_and_cli() {
    let Some((kube, platform)) = cluster("a_service_runs_on_kubernetes") else {
        return;
    };
    let repo = platform.onboard("hello", &["dev"], "s3cr3t");
    set_image_manifest(&repo, 2, 2);
    let manifest = repo.join(".runway/runway.yml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        format!("{text}    identity:\n      audience: openbao\n"),
    )
    .unwrap();

    // The first revision: a Deployment and a Service of its own, its secret referenced by
    // version, served through the ingress at its pods' addresses.
    let deploy = platform.deploy_image(&repo, "dev", IMAGE);
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    eprintln!(
        "a first deploy on the real control plane, two pods, to ready and routed: {:.1} s",
        deploy.took.as_secs_f64()
    );
    let (status, body) = platform.get_until("hello.dev.localhost", "/", BOUND, |s, b| {
        s == 200 && b.trim() == "hello-dev-00001"
    });
    assert_eq!((status, body.trim()), (200, "hello-dev-00001"));
    let deployment = kube
        .object("deployments", "dev", "hello-dev-00001")
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
    let secret = kube
        .object("secrets", "dev", "hello-api-key")
        .expect("no Secret");
    assert!(secret["data"]["v1"].is_string(), "{secret}");
    let managers: Vec<&str> = deployment["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(managers.contains(&"runway"), "{managers:?}");

    // Its identity: the service's own ServiceAccount, with no API token mounted, whose token
    // is projected into the pods for the manifest's audience where the local runtime puts
    // Runway's; the API server issues it naming the service and its environment's namespace.
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "hello", "{pod:#}");
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(
        pod["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["audience"], "openbao",
        "{pod:#}"
    );
    assert!(
        env.iter().any(|e| e["name"] == "RUNWAY_IDENTITY_TOKEN_FILE"
            && e["value"] == "/run/runway/identity/token"),
        "{env:?}"
    );
    let account = kube
        .object("serviceaccounts", "dev", "hello")
        .expect("no ServiceAccount for the service");
    assert_eq!(account["automountServiceAccountToken"], false, "{account}");
    let namespace = kube.namespace("dev");
    let token = kubectl(
        &kube,
        &[
            "create",
            "token",
            "hello",
            "-n",
            &namespace,
            "--audience",
            "openbao",
        ],
    );
    let claims = token
        .trim()
        .split('.')
        .nth(1)
        .and_then(|part| {
            use base64::Engine as _;
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(part)
                .ok()
        })
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .unwrap_or_else(|| panic!("not a JWT: {token}"));
    assert_eq!(
        claims["sub"],
        format!("system:serviceaccount:{namespace}:hello"),
        "{claims:#}"
    );
    assert_eq!(claims["aud"], serde_json::json!(["openbao"]), "{claims:#}");

    // The status shows the pods as instances, with their addresses.
    let instances = platform.status("hello", "dev")["instances"]
        .as_array()
        .unwrap()
        .clone();
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
    // Its events tell each pod's start once.
    let (_, events) = platform.call(
        reqwest::Method::GET,
        "/v1/deployments/2/events",
        Some(&platform.token),
        None,
    );
    let said: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    eprintln!("events of the second deploy: {said:#?}");
    let starts: Vec<&&str> = said.iter().filter(|m| m.ends_with(" started")).collect();
    let unique: std::collections::BTreeSet<&&&str> = starts.iter().collect();
    assert_eq!(starts.len(), 2, "{said:#?}\n{}", platform.log());
    assert_eq!(unique.len(), starts.len(), "a start told twice: {said:#?}");

    // A revision whose pods crash: the deployment fails with the container's last words,
    // and the second revision keeps serving.
    kube.cluster.behave(
        &kube.namespace("dev"),
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
}

/// A restart of Runway, then of the API server, on a cluster of its own (the API server's
/// restart would disturb the other tests').
#[test]
fn a_restart_of_runway_adopts_what_runs_with_no_write() {
    let Some(helm) = support::kube::helm() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let Some(cluster) = rt.block_on(kube_cluster::start_or_skip("a_restart_of_runway")) else {
        return;
    };
    let cluster: &'static kube_cluster::Cluster = Box::leak(Box::new(cluster));
    let (kube, mut platform) = start_on(cluster, &helm, Settings::default());
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
    let seen = kube.requests().len();
    std::thread::sleep(Duration::from_secs(3));
    let steady: Vec<String> = kube.requests()[seen..]
        .iter()
        .map(|r| format!("{} {}", r.verb, r.resource))
        .collect();
    eprintln!(
        "steady state: {} API requests in 3 s (12 rounds)",
        steady.len()
    );
    assert_eq!(steady, [] as [String; 0], "requests at steady state");

    // A restart adopts everything: it lists and watches, and writes nothing.
    let pod_uid = |kube: &Installed| {
        let pods = kube.objects("pods", "dev");
        assert_eq!(pods.len(), 1, "{pods:?}");
        pods[0]["metadata"]["uid"].clone()
    };
    let uid = pod_uid(&kube);
    let before = kube.writes();
    let seen = kube.requests().len();
    platform.kill9();
    platform.restart();
    std::thread::sleep(Duration::from_secs(4));
    let restart = &kube.requests()[seen..];
    let count = |verb: &str| restart.iter().filter(|r| r.verb == verb).count();
    eprintln!(
        "a restart of Runway: {} API requests completed, {} of them lists (pods, \
         EndpointSlices, Deployments and events in each environment's namespace), 0 writes; \
         its watches stay open",
        restart.len(),
        count("list")
    );
    assert_eq!(restart.len(), count("list") + count("watch"), "{restart:?}");
    assert_eq!(kube.writes(), before, "a restart wrote to the cluster");
    let (status, body) = platform.get("hello.dev.localhost", "/", Duration::from_secs(10));
    assert_eq!((status, body.trim()), (200, "hello-dev-00001"));
    assert_eq!(pod_uid(&kube), uid, "a pod was restarted");

    // etcd compacted and the API server restarted: the driver's watches end, their resource
    // versions are too old (410), they list again, and nothing is restarted or written; a
    // deploy then goes through as before.
    let before = kube.writes();
    let seen = kube.requests().len();
    cluster.compact().unwrap();
    rt.block_on(cluster.restart_api_server()).unwrap();
    let namespace = kube.namespace("dev");
    let relisted = |k: &Installed| {
        k.requests()[seen..]
            .iter()
            .filter(|r| r.verb == "list" && r.namespace.as_deref() == Some(namespace.as_str()))
            .count()
    };
    // Pods, EndpointSlices, Deployments and events, each after its watch's back-off.
    let deadline = std::time::Instant::now() + BOUND;
    while relisted(&kube) < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "every watch listing again: {} lists in {namespace} within {BOUND:?}; the driver's \
             requests since the restart: {:?}\n{}",
            relisted(&kube),
            kube.requests()[seen..]
                .iter()
                .map(|r| format!("{} {} {:?} {}", r.verb, r.resource, r.namespace, r.code))
                .collect::<Vec<_>>(),
            platform.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        kube.writes(),
        before,
        "the API server's restart caused writes"
    );
    assert_eq!(pod_uid(&kube), uid, "a pod was restarted");
    let deploy = platform.deploy_image(&repo, "dev", IMAGE);
    assert!(
        deploy.ok(),
        "deploy after the API server's restart: {}\n{}",
        deploy.all(),
        platform.log()
    );
    platform.get_until("hello.dev.localhost", "/", BOUND, |s, b| {
        s == 200 && b.trim() == "hello-dev-00002"
    });
    drop(platform);
    cluster.stop();
}

#[test]
fn rollback_promote_scale_to_zero_and_decommission_on_kubernetes() {
    let settings = Settings {
        control: support::FAST_AUTOSCALER.to_owned(),
        ..Settings::default()
    };
    let Some((kube, platform)) = cluster_from("rollback_promote_scale_to_zero", settings) else {
        return;
    };
    let repo = platform.onboard("hello", &["dev", "production"], "s3cr3t");
    set_image_manifest(&repo, 1, 1);
    let host = "hello.dev.localhost";
    for revision in ["hello-dev-00001", "hello-dev-00002"] {
        let deploy = platform.deploy_image(&repo, "dev", IMAGE);
        assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
        platform.get_until(host, "/", BOUND, |s, b| s == 200 && b.trim() == revision);
    }
    // The retired revision goes to no pods, then its Deployment goes.
    kube.wait_for(BOUND, "hello-dev-00001 retired", |k| {
        k.pods_of("dev", "hello-dev-00001") == 0
    });

    // A rollback is a deployment like any other: the first revision's pods again.
    let back = platform.runway_for(
        &[
            "rollback",
            "--service",
            "hello",
            "--env",
            "dev",
            "--to",
            "hello-dev-00001",
            "--wait",
        ],
        BOUND,
    );
    assert!(back.ok(), "rollback: {}\n{}", back.all(), platform.log());
    platform.get_until(host, "/", BOUND, |s, b| {
        s == 200 && b.trim() == "hello-dev-00001"
    });

    // Promoted to production: the same image and settings, in production's namespace.
    let promoted = platform.runway_for(
        &[
            "promote",
            "--service",
            "hello",
            "--from",
            "dev",
            "--to",
            "production",
            "--wait",
        ],
        BOUND,
    );
    assert!(
        promoted.ok(),
        "promote: {}\n{}",
        promoted.all(),
        platform.log()
    );
    let production = kube
        .objects("deployments", "production")
        .into_iter()
        .next()
        .expect("no Deployment in production's namespace");
    assert_eq!(
        production["spec"]["template"]["spec"]["containers"][0]["image"],
        IMAGE
    );
    platform.get_until("hello.production.localhost", "/", BOUND, |s, b| {
        s == 200 && b.trim().starts_with("hello-production-")
    });

    // Scale to zero: no pod, the Deployment at 0; a request is held while one starts.
    set_image_manifest(&repo, 0, 2);
    let deploy = platform.deploy_image(&repo, "dev", IMAGE);
    assert!(
        deploy.ok(),
        "deploy with min 0: {}\n{}",
        deploy.all(),
        platform.log()
    );
    let zero = platform.status("hello", "dev")["desired"][0]["revision"]
        .as_str()
        .unwrap()
        .to_owned();
    let zero = zero.as_str();
    kube.wait_for(BOUND, "scaled to zero", |k| {
        k.pods_of("dev", zero) == 0
            && k.object("deployments", "dev", zero)
                .is_some_and(|d| d["spec"]["replicas"] == 0)
    });
    let started = std::time::Instant::now();
    let (status, body) = platform.get(host, "/", Duration::from_secs(60));
    assert_eq!((status, body.trim()), (200, zero));
    eprintln!(
        "a request held through a cold start on the real control plane: {:.2} s",
        started.elapsed().as_secs_f64()
    );
    assert!(kube.pods_of("dev", zero) >= 1);

    // Decommissioned: every revision's objects go (their Services with their Deployments).
    let deleted = platform.runway(&["services", "delete", "hello", "--yes"]);
    assert!(deleted.ok(), "services delete: {}", deleted.all());
    // The garbage collector takes every revision's Service, NetworkPolicy and budget with its
    // Deployment, the ReplicaSet controller its pods; the driver gives up the secret versions
    // the revisions pinned, and their Secrets with the last.
    kube.wait_for(BOUND, "objects removed", |k| {
        ["dev", "production"].iter().all(|env| {
            [
                "deployments",
                "replicasets",
                "services",
                "networkpolicies",
                "poddisruptionbudgets",
                "pods",
                "secrets",
            ]
            .iter()
            .all(|resource| k.objects(resource, env).is_empty())
        })
    });
}

/// Rewrites the image manifest for a `runway_canary` rollout: steps 50 and 100, a second's
/// pause, an analysis that needs one request.
fn set_canary_manifest(repo: &std::path::Path) {
    set_strategy(
        repo,
        "runway_canary",
        "      steps: [50, 100]\n      pause_seconds: 1\n      analysis:\n        min_requests: 1\n",
    );
}

/// Rewrites the image manifest's strategy, with `rollout` settings (YAML indented six spaces).
fn set_strategy(repo: &std::path::Path, strategy: &str, rollout: &str) {
    let path = repo.join(".runway/runway.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replace("strategy: legacy", &format!("strategy: {strategy}"))
        + "    rollout:\n"
        + rollout;
    std::fs::write(&path, text).unwrap();
}

/// The weight of `revision` in a status.
fn weight_of(status: &serde_json::Value, revision: &str) -> u64 {
    status["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["revision"] == revision)
        .and_then(|r| r["weight"].as_u64())
        .unwrap_or(0)
}

#[test]
fn a_canary_splits_traffic_between_deployments_and_an_abort_rolls_it_back() {
    let Some((kube, platform)) = cluster("a_canary_splits_traffic") else {
        return;
    };
    let repo = platform.onboard("hello", &["dev"], "s3cr3t");
    set_image_manifest(&repo, 1, 1);
    set_canary_manifest(&repo);
    let host = "hello.dev.localhost";
    let first = platform.deploy_image(&repo, "dev", IMAGE);
    assert!(first.ok(), "deploy: {}\n{}", first.all(), platform.log());

    // Paused at 0 %, resumed to 50 %: the ingress splits requests between the two
    // Deployments' pods.
    let paused = platform.runway_with(
        &[
            "deploy", "--env", "dev", "--image", IMAGE, "--pause", "--output", "json",
        ],
        Some(repo.as_os_str()),
        None,
        support::COMMAND,
    );
    assert!(paused.ok(), "deploy --pause: {}", paused.all());
    kube.wait_for(BOUND, "the canary's pod", |k| {
        k.pods_of("dev", "hello-dev-00002") == 1
    });
    let resumed = platform.runway(&["rollout", "resume", "--service", "hello", "--env", "dev"]);
    assert!(resumed.ok(), "{}", resumed.all());
    let deadline = std::time::Instant::now() + BOUND;
    while weight_of(&platform.status("hello", "dev"), "hello-dev-00002") != 50 {
        assert!(std::time::Instant::now() < deadline, "never at 50 %");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let (code, body) = platform.get(host, "/", Duration::from_secs(10));
        assert_eq!(code, 200);
        seen.insert(body.trim().to_owned());
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["hello-dev-00001", "hello-dev-00002"],
        "both revisions answer at 50 %"
    );

    // Aborted: all traffic back on the first revision, the canary's pods gone.
    let aborted = platform.runway(&[
        "rollout",
        "abort",
        "--service",
        "hello",
        "--env",
        "dev",
        "--wait",
    ]);
    assert_eq!(aborted.code, Some(0), "{}", aborted.all());
    assert!(
        aborted.stdout.contains("was rolled back"),
        "{}",
        aborted.all()
    );
    assert_eq!(
        weight_of(&platform.status("hello", "dev"), "hello-dev-00001"),
        100
    );
    kube.wait_for(BOUND, "the canary's pods gone", |k| {
        k.pods_of("dev", "hello-dev-00002") == 0
    });
    for _ in 0..10 {
        let (_, body) = platform.get(host, "/", Duration::from_secs(10));
        assert_eq!(body.trim(), "hello-dev-00001");
    }
}

/// Blue/green over Deployments: the new revision's pods come up beside the old ones, all
/// traffic switches at once, and the old revision stays warm (its pods kept) so a rollback to
/// it is instant; then its warm time ends and its pods go.
#[test]
fn blue_green_switches_deployments_and_keeps_the_old_one_warm() {
    let Some((kube, platform)) = cluster("blue_green_switches_deployments") else {
        return;
    };
    let repo = platform.onboard("hello", &["dev"], "s3cr3t");
    set_image_manifest(&repo, 1, 1);
    let host = "hello.dev.localhost";
    let first = platform.deploy_image(&repo, "dev", IMAGE);
    assert!(first.ok(), "deploy: {}\n{}", first.all(), platform.log());
    set_strategy(
        &repo,
        "runway_blue_green",
        "      auto_switch_after_seconds: 1\n      keep_old_seconds: 4\n",
    );
    let switched = platform.deploy_image(&repo, "dev", IMAGE);
    assert!(
        switched.ok(),
        "deploy: {}\n{}",
        switched.all(),
        platform.log()
    );
    platform.get_until(host, "/", BOUND, |s, b| {
        s == 200 && b.trim() == "hello-dev-00002"
    });
    // Warm: the old revision keeps its pod, with no traffic.
    assert_eq!(kube.pods_of("dev", "hello-dev-00001"), 1);
    for _ in 0..10 {
        let (_, body) = platform.get(host, "/", Duration::from_secs(10));
        assert_eq!(body.trim(), "hello-dev-00002");
    }
    // Its warm time over, it goes.
    kube.wait_for(BOUND, "the old revision's pods gone", |k| {
        k.pods_of("dev", "hello-dev-00001") == 0
    });
    assert_eq!(kube.pods_of("dev", "hello-dev-00002"), 1);
}

/// Two services' Secret names collide (`a-b`'s `API_KEY` and `a`'s `B_API_KEY` are both
/// `a-b-api-key`, as the renderer names them): the second to deploy is refused, saying why,
/// and neither writes a value into nor reads one from the other's Secret.
#[test]
fn a_service_cannot_write_into_another_services_secret() {
    let Some((kube, platform)) = cluster("a_service_cannot_write_into_another_services_secret")
    else {
        return;
    };
    let victim = platform.onboard("a-b", &["dev"], "the-victims-value");
    set_image_manifest(&victim, 1, 1);
    let deploy = platform.deploy_image(&victim, "dev", IMAGE);
    assert!(
        deploy.ok(),
        "deploy a-b: {}\n{}",
        deploy.all(),
        platform.log()
    );
    let stored = || kube.object("secrets", "dev", "a-b-api-key").unwrap()["data"].clone();
    let before = stored();
    assert!(before["v1"].is_string(), "{before}");

    let attacker = platform.onboard("a", &["dev"], "unrelated");
    let set = platform.runway_with(
        &[
            "secrets",
            "set",
            "B_API_KEY",
            "--service",
            "a",
            "--env",
            "dev",
        ],
        None,
        Some(b"the-attackers-value"),
        support::COMMAND,
    );
    assert!(set.ok(), "secrets set: {}", set.all());
    set_image_manifest(&attacker, 1, 1);
    let path = attacker.join(".runway/runway.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("secrets: [API_KEY]", "secrets: [API_KEY, B_API_KEY]"),
    )
    .unwrap();
    let deploy = platform.deploy_image(&attacker, "dev", IMAGE);
    assert!(
        !deploy.ok(),
        "a deployed into a-b's Secret: {}",
        deploy.all()
    );
    assert!(
        deploy.all().contains("holds another service's secrets"),
        "{}",
        deploy.all()
    );
    assert_eq!(stored(), before, "a-b's Secret was written by a");
    assert!(
        kube.objects("deployments", "dev")
            .iter()
            .all(|d| d["metadata"]["labels"]["runway.dev/service"] != "a"),
        "a Deployment of a reads a-b's Secret"
    );
    platform.get_until("a-b.dev.localhost", "/", BOUND, |s, b| {
        s == 200 && b.trim() == "a-b-dev-00001"
    });
}

/// `GET /` on `host` at the ingress `at`, trusting `ca` alone: status and body.
fn get_at(
    rt: &tokio::runtime::Runtime,
    at: std::net::SocketAddr,
    ca: &std::path::Path,
    host: &str,
) -> (u16, String) {
    let pem = std::fs::read(ca.join("ca.pem")).unwrap();
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()])
        .resolve(host, at)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    rt.block_on(async {
        match client
            .get(format!("https://{host}:{}/", at.port()))
            .send()
            .await
        {
            Ok(response) => (
                response.status().as_u16(),
                response.text().await.unwrap_or_default(),
            ),
            Err(error) => (0, format!("{error:?}")),
        }
    })
}

/// The ingress in pods of its own, as the chart runs it: two `runway ingress` processes that
/// Runway feeds over mutual TLS (`ingress.remote`), sharing the platform's certificate
/// authority. Both serve the revision at its pods' addresses; the control plane killed, both
/// still serve; started again, it carries on and a deploy reaches both.
#[test]
fn ingresses_of_their_own_are_fed_over_the_network() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, ingress_tls, control_tls) = (
        dir.path().join("ca"),
        dir.path().join("ingress-tls"),
        dir.path().join("control-tls"),
    );
    runway_ingress::LocalCa::load_or_create(&ca).unwrap();
    runway_ingress::control_tls::generate(&ingress_tls, &control_tls).unwrap();
    let a = support::NetworkIngress::start(&dir.path().join("a"), &ca, &ingress_tls);
    let b = support::NetworkIngress::start(&dir.path().join("b"), &ca, &ingress_tls);
    let settings = Settings {
        api: format!("  tls:\n    ca_dir: {}\n", ca.display()),
        ingress: format!(
            "  remote:\n    addresses: ['{}', '{}']\n    tls_dir: {}\n    https_port: {}\n    \
             resolve_interval_ms: 200\n",
            a.control,
            b.control,
            control_tls.display(),
            a.https.port()
        ),
        ..Settings::default()
    };
    let Some((_kube, mut platform)) = cluster_from("ingresses_of_their_own", settings) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let repo = platform.onboard("hello", &["dev"], "s3cr3t");
    set_image_manifest(&repo, 2, 2);
    let deploy = platform.deploy_image(&repo, "dev", IMAGE);
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    // The URL Runway shows names the ingresses' public port.
    let url = platform.status("hello", "dev")["url"].clone();
    assert_eq!(
        url,
        format!("https://hello.dev.localhost:{}/", a.https.port()),
        "{url}"
    );
    let host = "hello.dev.localhost";
    for ingress in [&a, &b] {
        let (status, body) = get_at(&rt, ingress.https, &ca, host);
        assert_eq!(
            (status, body.trim()),
            (200, "hello-dev-00001"),
            "{}",
            platform.log()
        );
    }

    // The control plane goes: both ingresses keep serving its last table.
    platform.kill9();
    std::thread::sleep(Duration::from_millis(500));
    for ingress in [&a, &b] {
        let (status, body) = get_at(&rt, ingress.https, &ca, host);
        assert_eq!((status, body.trim()), (200, "hello-dev-00001"));
    }

    // Started again, it finds both, and a deploy reaches both.
    platform.restart();
    let deploy = platform.deploy_image(&repo, "dev", IMAGE);
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    for ingress in [&a, &b] {
        let deadline = std::time::Instant::now() + BOUND;
        loop {
            let (status, body) = get_at(&rt, ingress.https, &ca, host);
            if (status, body.trim()) == (200, "hello-dev-00002") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} never served the second revision: {status} {body}\n{}",
                ingress.https,
                platform.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    assert!(
        platform.log().contains(&format!(
            "an ingress joined the fleet ingress={}",
            b.control
        )),
        "{}",
        platform.log()
    );
}

/// A worker has no port, so no Service and no EndpointSlice: it is ready when its pod is, and
/// its deploy goes through; its pods ask the runtime for SIGQUIT without a shell. Pods the API server refuses (here a ResourceQuota that admits
/// none) fail the deploy at once with the API server's own message, instead of a wait for
/// pods that never come.
#[test]
fn a_worker_is_ready_from_its_pod_and_refused_pods_fail_the_deploy() {
    let Some((kube, platform)) = cluster("a_worker_and_refused_pods") else {
        return;
    };
    let repo = platform.onboard("jobs", &["dev", "staging"], "s3cr3t");
    let path = repo.join(".runway/runway.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    let base = text
        .split("  scalability:")
        .next()
        .unwrap()
        .replace("  container_port: 8080\n", "");
    std::fs::write(
        &path,
        format!(
            "{base}  scalability:\n    min_instances: 2\n    max_instances: 2\n  \
             deployment:\n    strategy: legacy\n  workload:\n    kind: worker\n    \
             secrets: [API_KEY]\n"
        ),
    )
    .unwrap();
    let deploy = platform.deploy_image(&repo, "dev", IMAGE);
    assert!(
        deploy.ok(),
        "worker deploy: {}\n{}",
        deploy.all(),
        platform.log()
    );
    let instances = platform.status("jobs", "dev")["instances"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(instances.len(), 2, "{instances:?}");
    assert!(
        instances.iter().all(|i| i["ready"] == true),
        "{instances:?}"
    );
    assert!(kube.objects("services", "dev").is_empty());
    // A worker stops on SIGQUIT. The runtime sends it from `lifecycle.stopSignal`, which the API
    // server keeps: no shell is needed in the image, the preStop hook being only the fallback.
    let pods = kube.objects("pods", "dev");
    assert_eq!(pods.len(), 2, "{pods:?}");
    for pod in pods {
        let spec = &pod["spec"];
        assert_eq!(spec["os"]["name"], "linux", "{pod}");
        let lifecycle = &spec["containers"][0]["lifecycle"];
        assert_eq!(lifecycle["stopSignal"], "SIGQUIT", "{pod}");
    }

    // Staging's namespace admits no pod.
    let quota = format!(
        "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: none\n  namespace: {}\nspec:\n  hard:\n    pods: \"0\"\n",
        kube.namespace("staging")
    );
    let mut apply = kube.cluster.kubectl();
    apply.args(["apply", "-f", "-"]);
    let applied = support::run(apply, Some(quota.as_bytes()), support::COMMAND);
    assert!(applied.ok(), "{}", applied.all());
    let started = std::time::Instant::now();
    let deploy = platform.deploy_image(&repo, "staging", IMAGE);
    assert!(
        !deploy.ok(),
        "deployed with no pod admitted: {}",
        deploy.all()
    );
    let said = deploy.all();
    assert!(said.contains("exceeded quota"), "{said}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the refusal took {:?}: {said}",
        started.elapsed()
    );
}

/// A service whose revision names Kubernetes would refuse as a Service's name or a label's
/// value (longer than 63 characters) runs under object names of its own, and is still known by
/// its revisions' names; its pods pull with the platform's image pull Secret.
#[test]
fn long_revision_names_run_under_names_kubernetes_takes() {
    let Some(helm) = support::kube::helm() else {
        return;
    };
    let Some(cluster) = kube_cluster::shared("long_revision_names") else {
        return;
    };
    let installed = support::kube::install(
        cluster,
        &helm,
        &support::kube::release("n"),
        &["dev", "staging", "production"],
    );
    let settings = Settings {
        sections: installed.runtime_only()
            + "    image_pull_secrets: [registry-credentials]\nregistry:\n  mirror: false\n",
        allow_processes: false,
        ..Settings::default()
    };
    let platform = Platform::start(&settings);
    let name = format!("long{}", "a".repeat(56));
    let repo = platform.onboard(&name, &["dev"], "s3cr3t");
    set_image_manifest(&repo, 1, 1);
    let deploy = platform.deploy_image(&repo, "dev", IMAGE);
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    let revision = format!("{name}-dev-00001");
    let host = format!("{name}.dev.localhost");
    platform.get_until(&host, "/", BOUND, |s, b| s == 200 && !b.trim().is_empty());
    let deployments = installed.objects("deployments", "dev");
    assert_eq!(deployments.len(), 1);
    let deployment = &deployments[0];
    let object = deployment["metadata"]["name"].as_str().unwrap();
    assert!(object.len() <= 63 && object.starts_with('r'), "{object}");
    assert_eq!(
        deployment["metadata"]["annotations"]["runway.dev/revision"],
        revision.as_str()
    );
    assert_eq!(
        deployment["spec"]["template"]["spec"]["imagePullSecrets"],
        serde_json::json!([{"name": "registry-credentials"}])
    );
    let instances = platform.status(&name, "dev")["instances"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(instances.len(), 1, "{instances:?}");
    assert!(
        instances[0]["id"].as_str().unwrap().starts_with(&revision),
        "{instances:?}"
    );
}

/// `kubectl ARGS`, failing the test when it fails.
fn kubectl(kube: &Installed, args: &[&str]) -> String {
    let mut command = kube.cluster.kubectl();
    command.args(args);
    let ran = support::run(command, None, support::COMMAND);
    assert!(ran.ok(), "kubectl {args:?}: {}", ran.all());
    ran.stdout
}

/// With images mirrored (the default): the pods run the platform registry's copy and pull it
/// with their service's own pull secret, applied by the driver; the node pulls as a kubelet
/// does, so a wrong credential leaves a pod in `ImagePullBackOff` saying why. The image is
/// then deleted and its tag moved where it came from, and a pod deleted (a restart) and a
/// rollback to the first image (its Deployment scaled up again) run from the mirror.
#[test]
fn pods_pull_mirrored_images_with_their_services_pull_secret() {
    if !runway_oci::testing::require_tools(
        "mirroring images",
        &["docker-registry", "skopeo", "umoci", "busybox"],
    ) {
        return;
    }
    let Some(helm) = support::kube::helm() else {
        return;
    };
    let Some(cluster) = kube_cluster::shared("pods_pull_mirrored_images") else {
        return;
    };
    let upstream = runway_oci::testing::Registry::start().unwrap();
    let kube = support::kube::install(
        cluster,
        &helm,
        &support::kube::release("m"),
        &["dev", "staging", "production"],
    );
    let platform = Platform::start(&Settings {
        sections: format!(
            "{}  insecure_registries: [\"{}\"]\n",
            kube.runtime_only(),
            upstream.host()
        ),
        allow_processes: false,
        ..Settings::default()
    });
    // The nodes trust the platform registry's CA, as an operator configures containerd to.
    cluster.trust_registry(&std::fs::read(platform.ca()).unwrap());
    let registry = platform.api().trim_start_matches("https://").to_owned();
    let repo = platform.onboard("hello", &["dev"], "s3cr3t");
    set_image_manifest(&repo, 1, 1);
    let push = |tag: &str| {
        runway_oci::testing::push_busybox_image(
            &upstream,
            "team/web",
            tag,
            &support::web_image(tag),
        )
        .unwrap()
    };
    let serves = |revision: &str, what: &str| {
        let (status, body) = platform.get_until("hello.dev.localhost", "/", BOUND, |s, b| {
            s == 200 && b.trim() == revision
        });
        assert_eq!(
            (status, body.trim()),
            (200, revision),
            "{what}\n{}",
            platform.log()
        );
    };

    let one = push("1");
    let deploy = platform.deploy_image(&repo, "dev", &one.reference);
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    serves("hello-dev-00001", "the first image");
    let deployment = kube
        .object("deployments", "dev", "hello-dev-00001")
        .unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["image"],
        format!("{registry}/hello/mirror@{}", one.digest)
    );
    assert_eq!(
        pod["imagePullSecrets"],
        serde_json::json!([{"name": "hello.registry"}])
    );
    let secret = kube.object("secrets", "dev", "hello.registry").unwrap();
    assert_eq!(secret["type"], "kubernetes.io/dockerconfigjson");

    let two = push("2");
    let deploy = platform.deploy_image(&repo, "dev", &two.reference);
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    serves("hello-dev-00002", "the second image");

    // Gone upstream: both manifests deleted and collected, the tags moved elsewhere.
    for image in [&one, &two] {
        upstream
            .delete_and_collect("team/web", &image.digest)
            .unwrap();
    }
    push("1");
    push("2");

    // A restart: the pod deleted, its replacement pulled from the mirror.
    let ns = kube.namespace("dev");
    let selector = "runway.dev/revision=hello-dev-00002";
    let before = kubectl(
        &kube,
        &["get", "pods", "-n", &ns, "-l", selector, "-o", "name"],
    );
    kubectl(
        &kube,
        &["delete", "pods", "-n", &ns, "-l", selector, "--wait=false"],
    );
    kube.wait_for(BOUND, "a new pod of hello-dev-00002 ready", |kube| {
        kube.objects("pods", "dev").iter().any(|p| {
            p["metadata"]["labels"]["runway.dev/revision"] == "hello-dev-00002"
                && p["metadata"]["deletionTimestamp"].is_null()
                && !before.contains(p["metadata"]["name"].as_str().unwrap_or_default())
                && p["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        })
    });
    serves("hello-dev-00002", "after a pod was replaced");

    // A wrong credential: the pull is refused, and the pod says so.
    let forged =
        serde_json::json!({"auths": {&registry: {"username": "hello", "password": "rwpull_00"}}});
    let encoded = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(forged.to_string())
    };
    kubectl(
        &kube,
        &[
            "patch",
            "secret",
            "hello.registry",
            "-n",
            &ns,
            "--type",
            "merge",
            "-p",
            &serde_json::json!({"data": {".dockerconfigjson": encoded}}).to_string(),
        ],
    );
    kubectl(
        &kube,
        &["delete", "pods", "-n", &ns, "-l", selector, "--wait=false"],
    );
    kube.wait_for(BOUND, "a pod in ImagePullBackOff", |kube| {
        kube.objects("pods", "dev").iter().any(|p| {
            p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
        })
    });
    let events = kubectl(&kube, &["get", "events", "-n", &ns, "-o", "json"]);
    assert!(events.contains("401 Unauthorized"), "{events}");
    // Deleted, the pull secret is made again by the next scale: a rollback to the first image,
    // whose Deployment's pods pull it from the mirror.
    kubectl(&kube, &["delete", "secret", "hello.registry", "-n", &ns]);
    let back = platform.runway(&[
        "rollback",
        "--service",
        "hello",
        "--env",
        "dev",
        "--to",
        "hello-dev-00001",
        "--wait",
        "--timeout",
        "90s",
    ]);
    assert!(back.ok(), "{}\n{}", back.all(), platform.log());
    serves("hello-dev-00001", "after the rollback");
}

/// A plain process on a cluster, which runs only images: refused while the server has no
/// process base, saying what to set; with `registry.process_base`, its code is built onto that
/// base as an image in the platform registry, and its pods run that image (its entrypoint
/// the process's command: the Deployment replaces no command), pulled with the service's own
/// pull secret.
#[test]
fn process_revisions_run_on_a_cluster_as_their_images() {
    if !runway_oci::testing::require_tools(
        "process images",
        &["docker-registry", "skopeo", "umoci", "busybox", "ldd"],
    ) {
        return;
    }
    let Some(helm) = support::kube::helm() else {
        return;
    };
    let Some(cluster) = kube_cluster::shared("process_images") else {
        return;
    };
    let upstream = runway_oci::testing::Registry::start().unwrap();
    let base = support::push_python_base(&format!("{}/base/python:3", upstream.host()), None);
    let kube = support::kube::install(
        cluster,
        &helm,
        &support::kube::release("p"),
        &["dev", "staging", "production"],
    );
    let runtime = format!(
        "{}  insecure_registries: [\"{}\"]\n",
        kube.runtime_only(),
        upstream.host()
    );

    // No process base: the deploy fails, saying what to set.
    let without = Platform::start(&Settings {
        sections: runtime.clone(),
        ..Settings::default()
    });
    let repo = without.onboard("hello", &["dev"], "s3cr3t");
    let refused = without.deploy(&repo, "dev");
    assert!(!refused.ok(), "{}", refused.all());
    assert!(
        refused.all().contains("registry.process_base"),
        "{}\n{}",
        refused.all(),
        without.log()
    );
    drop(without);

    let platform = Platform::start(&Settings {
        sections: format!("{runtime}registry:\n  process_base: {base}\n"),
        ..Settings::default()
    });
    cluster.trust_registry(&std::fs::read(platform.ca()).unwrap());
    let registry = platform.api().trim_start_matches("https://").to_owned();
    let repo = platform.onboard("hello", &["dev"], "s3cr3t");
    let deploy = platform.deploy(&repo, "dev");
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    let (status, body) = platform.get_until("hello.dev.localhost", "/", BOUND, |s, b| {
        s == 200 && b.trim() == "hello-dev-00001"
    });
    assert_eq!(
        (status, body.trim()),
        (200, "hello-dev-00001"),
        "{}",
        platform.log()
    );
    let (_, revisions) = platform.call(
        reqwest::Method::GET,
        "/v1/services/hello/environments/dev/revisions",
        Some(&platform.token),
        None,
    );
    let mirror = revisions[0]["mirror"]
        .as_str()
        .unwrap_or_else(|| panic!("{revisions:#}"));
    let deployment = kube
        .object("deployments", "dev", "hello-dev-00001")
        .unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["image"], format!("{registry}/{mirror}"));
    assert!(container.get("command").is_none(), "{container:#}");
    assert_eq!(
        pod["imagePullSecrets"],
        serde_json::json!([{"name": "hello.registry"}])
    );
}
