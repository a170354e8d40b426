//! End to end on the real local runtime: real supervisors (this test binary, re-executed as
//! `local supervise DIR`), real `python3` instances, the real ingress on loopback. Deploys v1,
//! then v2 under a steady stream of concurrent requests: none fails, the answers move from v1
//! to v2, and v1's process is gone at the end.

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests")]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use runway_control::{Controller, ControllerConfig};
use runway_ingress::{Ingress, Options};
use runway_runtime::{
    LocalConfig, LocalDriver, LocalDriverOptions, LocalRuntime, Runtime, SupervisorCommand,
};
use runway_secrets::{MasterKey, Sealer};
use runway_store::{
    Deployment, DeploymentState, NewRevision, NewService, PlannedRevision, RevisionRef,
    SqliteStore, Store,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BOUND: Duration = Duration::from_secs(90);
const HOST: &str = "hello.dev.localhost";

const APP: &str = r#"
import os, signal, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

if os.environ.get("CRASH"):
    print("cannot reach the database", flush=True)
    sys.exit(3)

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"ok\n" if self.path == "/healthz" else os.environ["VERSION"].encode() + b"\n"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("listening", flush=True)
server.serve_forever()
"#;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("supervise") {
        let Some(dir) = args.get(2) else {
            return ExitCode::from(2);
        };
        return match runway_runtime::supervisor::main(Path::new(dir)) {
            0 => ExitCode::SUCCESS,
            _ => ExitCode::FAILURE,
        };
    }
    // Without libtest: honour `--list` and a name filter as it would.
    let name = "rolling_deploy_on_the_local_runtime";
    let filters: Vec<&String> = args
        .iter()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
        return ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "--list") {
        println!("rolling_deploy_on_the_local_runtime: test");
        return ExitCode::SUCCESS;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(rolling_deploy_on_the_local_runtime());
    println!("test rolling_deploy_on_the_local_runtime ... ok");
    ExitCode::SUCCESS
}

/// Removes every instance when dropped, on success or panic.
struct Cleanup {
    runtime: Arc<LocalRuntime>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let runtime = Arc::clone(&self.runtime);
        let _ = std::thread::spawn(move || {
            let Ok(tokio) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            tokio.block_on(async {
                let _ = tokio::time::timeout(Duration::from_secs(30), async {
                    for status in runtime.instances().await.unwrap_or_default() {
                        let _ = runtime.instance_remove(&status.id).await;
                    }
                })
                .await;
            });
        })
        .join();
    }
}

fn manifest() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "runway/v1",
        "kind": "RunwayService",
        "metadata": {"name": "hello"},
        "spec": {
            "container_port": 8080,
            "request_timeout": 10,
            "startup_probe": {"path": "/healthz", "period_seconds": 1, "failure_threshold": 30},
            "readiness_probe": {"path": "/healthz", "period_seconds": 1},
            "workload": {
                "process": {"command": ["python3", "app.py"]},
                "stop_grace_period_seconds": 5
            }
        }
    })
}

/// The code snapshot the revisions run: `snapshots/<service id>/<hex>`, as the server keeps
/// them.
const SNAPSHOT: &str = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";

fn deploy(store: &SqliteStore, version: &str, crash: bool) -> Deployment {
    let revision = NewRevision {
        service: "hello".to_owned(),
        env: "dev".to_owned(),
        manifest: manifest(),
        artifact: serde_json::json!({"source": format!("sha256:{SNAPSHOT}")}),
        env_vars: if crash {
            BTreeMap::from([("CRASH".to_owned(), "1".to_owned())])
        } else {
            BTreeMap::from([("VERSION".to_owned(), version.to_owned())])
        },
        set_vars: Default::default(),
        secret_versions: BTreeMap::new(),
    };
    let planned = [PlannedRevision {
        revision: RevisionRef::New,
        instances: 1,
        weight: 100,
    }];
    store
        .record_deploy("admin", &revision, &planned)
        .unwrap()
        .deployment
}

async fn wait_for(deployment: &Deployment, store: &SqliteStore, state: DeploymentState) {
    loop {
        let now = store.deployment_get(deployment.id).unwrap();
        assert!(
            now.state == state || !now.state.is_terminal(),
            "deployment {} is {}: {:?}",
            now.id,
            now.state,
            now.reason
        );
        if now.state == state {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET /` through the ingress; the body, or why it failed.
async fn get(ingress: std::net::SocketAddr) -> Result<String, String> {
    let exchange = async {
        let mut stream = TcpStream::connect(ingress)
            .await
            .map_err(|e| e.to_string())?;
        let request = format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .await
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&response).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        if head.split(' ').nth(1) == Some("200") {
            Ok(body.trim().to_owned())
        } else {
            Err(text)
        }
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| "timed out".to_owned())?
}

async fn rolling_deploy_on_the_local_runtime() {
    let dir = tempfile::tempdir().unwrap();

    let supervisor = SupervisorCommand {
        program: std::env::current_exe().unwrap(),
        args: vec!["supervise".into()],
    };
    let runtime = Arc::new(LocalRuntime::new(LocalConfig::new(
        dir.path().join("runtime"),
        supervisor,
    )));
    let _cleanup = Cleanup {
        runtime: Arc::clone(&runtime),
    };
    let store = Arc::new(SqliteStore::open(dir.path().join("runway.db")).unwrap());
    store
        .service_create(
            "admin",
            &NewService {
                name: "hello".to_owned(),
                owners: vec!["team".to_owned()],
                environments: vec!["dev".to_owned()],
                team: None,
            },
        )
        .unwrap();
    let service_id = store.service_get("hello").unwrap().id;
    let snapshots = dir.path().join("snapshots");
    let app_dir = snapshots.join(service_id.to_string()).join(SNAPSHOT);
    std::fs::create_dir_all(&app_dir).unwrap();
    std::fs::write(app_dir.join("app.py"), APP).unwrap();
    let driver = Arc::new(LocalDriver::new(
        Arc::clone(&runtime),
        LocalDriverOptions {
            sandbox: None,
            snapshots: Some(snapshots),
        },
    ));

    let ingress = Ingress::new(Options::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop_serving, serving_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = {
        let ingress = ingress.clone();
        tokio::spawn(async move {
            let _ = ingress
                .serve(listener, async {
                    let _ = serving_stopped.await;
                })
                .await;
        })
    };
    let config = ControllerConfig {
        reconcile_interval_ms: 100,
        deploy_timeout_ms: 15_000,
        drain_grace_ms: 500,
        ..ControllerConfig::default()
    };
    let key = MasterKey::generate().unwrap();
    let controller = Arc::new(
        Controller::new(
            config.clone(),
            Arc::clone(&store) as Arc<dyn Store>,
            Arc::clone(&driver),
            Arc::new(ingress.clone()),
            Sealer::new(&key),
        )
        .allow_processes(true),
    );
    let (stop_controller, controller_stopped) = tokio::sync::oneshot::channel::<()>();
    let control = tokio::spawn(Arc::clone(&controller).run(async {
        let _ = controller_stopped.await;
    }));

    tokio::time::timeout(BOUND, async {
        let first = deploy(&store, "v1", false);
        controller.wake();
        wait_for(&first, &store, DeploymentState::Succeeded).await;
        assert_eq!(get(address).await, Ok("v1".to_owned()));
        let v1 = controller.instances("hello", "dev").await.unwrap();
        assert_eq!(v1.len(), 1);
        let v1_status = runtime
            .instances()
            .await
            .unwrap()
            .into_iter()
            .find(|s| s.id == v1[0].id)
            .unwrap();
        let v1_pids = [v1_status.pid.unwrap(), v1_status.supervisor_pid];
        // The runtime reports whose it is, from the spec, and that the platform started it.
        assert_eq!(v1_status.service.as_deref(), Some("hello"));
        assert_eq!(v1_status.revision.as_deref(), Some("hello-dev-00001"));
        assert!(v1_status.managed);

        // A steady stream of requests from four clients while v2 rolls out.
        let stop = Arc::new(AtomicBool::new(false));
        let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let total = Arc::new(AtomicUsize::new(0));
        let mut clients = Vec::new();
        for _ in 0..4 {
            let (stop, failures, total) =
                (Arc::clone(&stop), Arc::clone(&failures), Arc::clone(&total));
            clients.push(tokio::spawn(async move {
                let mut seen = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    total.fetch_add(1, Ordering::Relaxed);
                    match get(address).await {
                        Ok(body) => seen.push(body),
                        Err(error) => failures.lock().unwrap().push(error),
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                seen
            }));
        }

        let second = deploy(&store, "v2", false);
        controller.wake();
        wait_for(&second, &store, DeploymentState::Succeeded).await;
        loop {
            let left = controller.instances("hello", "dev").await.unwrap();
            if left.iter().all(|i| i.revision == "hello-dev-00002") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.store(true, Ordering::Relaxed);
        let mut orders = Vec::new();
        for client in clients {
            orders.push(client.await.unwrap());
        }

        let failures = failures.lock().unwrap().clone();
        assert!(
            failures.is_empty(),
            "{} of {} requests failed: {failures:?}",
            failures.len(),
            total.load(Ordering::Relaxed)
        );
        for seen in &orders {
            // Each client saw v1, then v2, and never v1 again after v2.
            let first_v2 = seen.iter().position(|b| b == "v2").unwrap();
            assert!(seen[first_v2..].iter().all(|b| b == "v2"), "{seen:?}");
            assert!(seen.iter().all(|b| b == "v1" || b == "v2"), "{seen:?}");
        }
        assert!(
            orders
                .iter()
                .any(|seen| seen.first().map(String::as_str) == Some("v1"))
        );
        assert_eq!(get(address).await, Ok("v2".to_owned()));
        // v1's process and its supervisor are gone (the supervisor may take a moment to
        // be reaped once it has removed its socket).
        let gone = || {
            v1_pids
                .iter()
                .all(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        };
        for _ in 0..100 {
            if gone() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(gone(), "v1's processes {v1_pids:?} still run");
        println!("{} requests, none failed", total.load(Ordering::Relaxed));

        // A revision whose process exits with code 3 fails its deployment within the
        // timeout, with the real exit code and output, and v2 keeps serving.
        let third = deploy(&store, "v3", true);
        controller.wake();
        wait_for(&third, &store, DeploymentState::Failed).await;
        let reason = store.deployment_get(third.id).unwrap().reason.unwrap();
        println!("the failed deployment's reason: {reason}");
        assert!(reason.contains("code 3"), "{reason}");
        assert!(reason.contains("cannot reach the database"), "{reason}");
        assert_eq!(get(address).await, Ok("v2".to_owned()));
        loop {
            let left = controller.instances("hello", "dev").await.unwrap();
            if left.iter().all(|i| i.revision == "hello-dev-00002") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(get(address).await, Ok("v2".to_owned()));
    })
    .await
    .unwrap();

    let _ = stop_controller.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), control).await;

    // Decommissioned while no controller runs: a new one, which never saw its revisions,
    // still drains and stops its instances.
    assert!(!runtime.instances().await.unwrap().is_empty());
    store.service_decommission("admin", "hello").unwrap();
    let fresh = Controller::new(
        config,
        Arc::clone(&store) as Arc<dyn Store>,
        Arc::clone(&driver),
        Arc::new(ingress.clone()),
        Sealer::new(&key),
    )
    .allow_processes(true);
    tokio::time::timeout(BOUND, async {
        while !runtime.instances().await.unwrap().is_empty() {
            let _ = fresh.reconcile_all().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap();

    let _ = stop_serving.send(());
    let _ = tokio::time::timeout(Duration::from_secs(35), server).await;
}
