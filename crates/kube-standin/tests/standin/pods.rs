//! Pod status per behaviour, events, and logs.

use std::time::Duration;

use futures_util::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::{ContainerStatus, Event, Pod};
use kube::api::{Api, ListParams, LogParams};
use kube_standin::Behavior;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{apply_deployment, bounded, deployment, eventually, start};

async fn the_pod(client: &kube::Client, app: &str) -> Option<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .next()
}

fn container(p: &Pod) -> Option<ContainerStatus> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()
        .cloned()
}

fn condition(p: &Pod, kind: &str) -> Option<(String, Option<String>, Option<String>)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn events_about(client: &kube::Client, pod: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    events
        .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
        .await
        .unwrap()
        .items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_behaviour_shapes_the_pod_status() {
    bounded(async {
        let (api, client) = start().await;
        api.behave(
            "crash",
            Behavior::CrashLoop {
                exit_code: 3,
                message: "config missing".into(),
                logs: vec!["starting".into(), "fatal: config missing".into()],
            },
        );
        api.behave("oom", Behavior::OomKilled);
        api.behave("pull", Behavior::ImagePullBackOff);
        api.behave(
            "pending",
            Behavior::Unschedulable {
                message: "0/1 nodes are available: 1 Insufficient memory.".into(),
            },
        );
        api.behave("sick", Behavior::NotReady);
        for (app, revision) in [
            ("crash", "crash"),
            ("oom", "oom"),
            ("pull", "pull"),
            ("pending", "pending"),
            ("sick", "sick"),
            ("fine", "fine"),
        ] {
            apply_deployment(&client, "default", &deployment(app, revision, 1)).await;
        }

        // CrashLoop: restarts growing, waiting in CrashLoopBackOff, the last exit kept.
        let pod = eventually("a crash loop with two restarts", || async {
            let p = the_pod(&client, "crash").await?;
            let c = container(&p)?;
            let waiting =
                c.state.as_ref()?.waiting.as_ref()?.reason.as_deref() == Some("CrashLoopBackOff");
            (c.restart_count >= 2 && waiting).then_some(p)
        })
        .await;
        let c = container(&pod).unwrap();
        assert_eq!(
            pod.status.as_ref().unwrap().phase.as_deref(),
            Some("Running")
        );
        assert!(!c.ready);
        let waiting = c.state.unwrap().waiting.unwrap();
        assert!(
            waiting.message.as_deref().unwrap().starts_with("back-off ")
                && waiting
                    .message
                    .as_deref()
                    .unwrap()
                    .contains("restarting failed container=app pod=crash-"),
            "{waiting:?}"
        );
        let last = c.last_state.unwrap().terminated.unwrap();
        assert_eq!(last.exit_code, 3);
        assert_eq!(last.reason.as_deref(), Some("Error"));
        assert_eq!(last.message.as_deref(), Some("config missing"));
        assert!(last.started_at.is_some() && last.finished_at.is_some());
        let name = pod.metadata.name.clone().unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let previous = pods
            .logs(
                &name,
                &LogParams {
                    previous: true,
                    ..LogParams::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(previous, "starting\nfatal: config missing\n");
        assert!(
            events_about(&client, &name)
                .await
                .iter()
                .any(|e| e.reason.as_deref() == Some("BackOff"))
        );

        // OOMKilled.
        let pod = eventually("an OOM kill", || async {
            let p = the_pod(&client, "oom").await?;
            let t = container(&p)?.last_state?.terminated?;
            (t.reason.as_deref() == Some("OOMKilled")).then_some(t)
        })
        .await;
        assert_eq!(pod.exit_code, 137);

        // ImagePullBackOff: pending, waiting.
        let pod = eventually("an image pull back-off", || async {
            let p = the_pod(&client, "pull").await?;
            let w = container(&p)?.state?.waiting?;
            (w.reason.as_deref() == Some("ImagePullBackOff")).then_some((p, w))
        })
        .await;
        assert_eq!(
            pod.0.status.as_ref().unwrap().phase.as_deref(),
            Some("Pending")
        );
        assert_eq!(
            pod.1.message.as_deref(),
            Some("Back-off pulling image \"registry.example/app:1\"")
        );
        let pull_name = pod.0.metadata.name.clone().unwrap();
        let status = match pods
            .logs(&pull_name, &LogParams::default())
            .await
            .unwrap_err()
        {
            kube::Error::Api(s) => s,
            other => panic!("{other:?}"),
        };
        assert_eq!(status.code, 400);
        assert!(
            status
                .message
                .contains("is waiting to start: trying and failing to pull image"),
            "{}",
            status.message
        );

        // Unschedulable: PodScheduled False, no node, an event.
        let pod = eventually("an unschedulable pod", || async {
            let p = the_pod(&client, "pending").await?;
            condition(&p, "PodScheduled")
                .filter(|c| c.0 == "False")
                .map(|c| (p, c))
        })
        .await;
        assert_eq!(pod.1.1.as_deref(), Some("Unschedulable"));
        assert_eq!(
            pod.1.2.as_deref(),
            Some("0/1 nodes are available: 1 Insufficient memory.")
        );
        assert!(pod.0.spec.as_ref().unwrap().node_name.is_none());
        assert_eq!(
            pod.0.status.as_ref().unwrap().phase.as_deref(),
            Some("Pending")
        );
        let pending_name = pod.0.metadata.name.clone().unwrap();
        let failed = eventually("a FailedScheduling event", || async {
            events_about(&client, &pending_name)
                .await
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("FailedScheduling"))
        })
        .await;
        assert_eq!(failed.type_.as_deref(), Some("Warning"));
        assert_eq!(failed.involved_object.kind.as_deref(), Some("Pod"));

        // NotReady: running, never ready, Unhealthy.
        let pod = eventually("a running, unready pod", || async {
            let p = the_pod(&client, "sick").await?;
            let c = container(&p)?;
            (c.state.as_ref()?.running.is_some() && c.started == Some(true)).then_some(p)
        })
        .await;
        assert_eq!(
            condition(&pod, "Ready").unwrap().1.as_deref(),
            Some("ContainersNotReady")
        );
        let sick_name = pod.metadata.name.clone().unwrap();
        let unhealthy = eventually("an Unhealthy event", || async {
            events_about(&client, &sick_name)
                .await
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("Unhealthy"))
        })
        .await;
        assert_eq!(
            unhealthy.message.as_deref(),
            Some("Readiness probe failed: HTTP probe failed with statuscode: 503")
        );
        assert_eq!(
            unhealthy.involved_object.field_path.as_deref(),
            Some("spec.containers{app}")
        );

        // The default: ready after ~200 ms, with the kubelet's status.
        let pod = eventually("a ready pod", || async {
            let p = the_pod(&client, "fine").await?;
            (condition(&p, "Ready")?.0 == "True").then_some(p)
        })
        .await;
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));
        assert!(status.start_time.is_some());
        assert_eq!(
            status.pod_ips.as_ref().unwrap()[0].ip,
            *status.pod_ip.as_ref().unwrap()
        );
        let c = container(&pod).unwrap();
        assert!(c.ready && c.started == Some(true) && c.restart_count == 0);
        assert!(c.container_id.unwrap().starts_with("containerd://"));
        assert!(c.image_id.starts_with("registry.example/app@sha256:"));
        for kind in [
            "PodReadyToStartContainers",
            "Initialized",
            "ContainersReady",
            "PodScheduled",
        ] {
            assert_eq!(condition(&pod, kind).unwrap().0, "True", "{kind}");
        }
        assert_eq!(
            pod.spec.as_ref().unwrap().node_name.as_deref(),
            Some("standin-node")
        );
        api.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_tail_and_follow() {
    bounded(async {
        let (api, client) = start().await;
        apply_deployment(&client, "default", &deployment("web", "r7", 1)).await;
        let pod = eventually("a ready pod", || async {
            let p = the_pod(&client, "web").await?;
            (condition(&p, "Ready")?.0 == "True").then_some(p)
        })
        .await;
        let name = pod.metadata.name.clone().unwrap();
        let ip = pod.status.unwrap().pod_ip.unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

        let request = async |path: &str| {
            let mut tcp = tokio::net::TcpStream::connect((ip.as_str(), 8080))
                .await
                .unwrap();
            let req = format!("GET {path} HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n");
            tcp.write_all(req.as_bytes()).await.unwrap();
            let mut out = String::new();
            tcp.read_to_string(&mut out).await.unwrap();
            assert!(out.ends_with("r7\n"), "{out}");
        };
        request("/one").await;
        request("/two").await;

        let all = pods.logs(&name, &LogParams::default()).await.unwrap();
        let lines: Vec<&str> = all.lines().collect();
        assert_eq!(lines.len(), 3, "{all}");
        assert_eq!(lines[0], format!("listening on {ip}:8080"));
        assert!(lines[1].ends_with("\"GET /one HTTP/1.1\" 200"), "{all}");

        let tail = pods
            .logs(
                &name,
                &LogParams {
                    tail_lines: Some(1),
                    timestamps: true,
                    ..LogParams::default()
                },
            )
            .await
            .unwrap();
        let (stamp, line) = tail.trim_end().split_once(' ').unwrap();
        assert!(line.ends_with("\"GET /two HTTP/1.1\" 200"), "{tail}");
        assert_eq!(
            stamp.len(),
            "2006-01-02T15:04:05.999999999Z".len(),
            "{stamp}"
        );
        assert!(stamp.ends_with('Z'));

        // Follow: the lines so far, then new ones as they come.
        let stream = pods
            .log_stream(
                &name,
                &LogParams {
                    follow: true,
                    tail_lines: Some(1),
                    ..LogParams::default()
                },
            )
            .await
            .unwrap();
        let mut lines = stream.lines();
        let first = lines.next().await.unwrap().unwrap();
        assert!(first.ends_with("\"GET /two HTTP/1.1\" 200"), "{first}");
        request("/three").await;
        let next = tokio::time::timeout(Duration::from_secs(5), lines.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(next.ends_with("\"GET /three HTTP/1.1\" 200"), "{next}");

        // A previous instance there is none of.
        let err = pods
            .logs(
                &name,
                &LogParams {
                    previous: true,
                    ..LogParams::default()
                },
            )
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("previous terminated container \"app\""),
            "{err}"
        );

        // The followed log ends when the pod goes.
        pods.delete(&name, &Default::default()).await.unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(line) = lines.next().await {
                line.unwrap();
            }
        })
        .await;
        assert!(ended.is_ok(), "the followed log ended with the pod");
        api.stop().await;
    })
    .await;
}
