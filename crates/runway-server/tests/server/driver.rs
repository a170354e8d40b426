//! A third driver, added as `docs/dev/adding-a-driver.md` says: a `runway_driver::Driver` (here
//! in memory), its `DriverKind`, and one `.with(...)` on `drivers()`. A new driver's crate
//! copies this test with its own driver in place of `Memory`.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use runway_driver::{Driver, DriverError, Kept, LogLine, LogQuery, Replica, Scale, Workload};
use runway_server::ServerConfig;
use runway_server::config::RemoteIngressConfig;
use runway_server::driver::{BoxFuture, DriverKind, RuntimeKind, ServerDriver, Start};
use tokio::sync::{mpsc, watch};

/// A driver that runs nothing, and counts how often it is asked what runs.
#[derive(Debug)]
struct Memory {
    asked: AtomicUsize,
    changes: watch::Sender<u64>,
}

impl Driver for Memory {
    async fn scale(&self, _: &Workload, _: &Scale) -> Result<Vec<Replica>, DriverError> {
        Ok(Vec::new())
    }

    async fn retire(&self, _: &str, _: &str, _: &str, _: &[String]) -> Result<(), DriverError> {
        Ok(())
    }

    async fn remove(&self, _: &str, _: &str, _: &str) -> Result<(), DriverError> {
        Ok(())
    }

    async fn revisions(&self) -> Result<Vec<Kept>, DriverError> {
        Ok(Vec::new())
    }

    async fn replicas(&self) -> Result<Vec<Replica>, DriverError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Ok(Vec::new())
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    async fn logs(&self, _: &LogQuery) -> Result<Vec<LogLine>, DriverError> {
        Ok(Vec::new())
    }

    async fn follow(&self, _: &LogQuery) -> Result<mpsc::Receiver<LogLine>, DriverError> {
        Ok(mpsc::channel(1).1)
    }

    async fn resolve_image(&self, reference: &str) -> Result<String, DriverError> {
        Ok(format!("{reference}@sha256:{}", "0".repeat(64)))
    }
}

/// `runtime.kind: memory`.
struct MemoryKind;

impl DriverKind for MemoryKind {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn build<'a>(&'a self, _: &'a Start<'a>) -> BoxFuture<'a, anyhow::Result<ServerDriver>> {
        Box::pin(async {
            Ok(ServerDriver::new(Memory {
                asked: AtomicUsize::new(0),
                changes: watch::channel(0).0,
            }))
        })
    }
}

/// A server of `runtime.kind: memory`, its API on a free port without TLS, and no ingress
/// process: ingresses someone else runs (none answers here) take its tables.
fn config(dir: &Path) -> ServerConfig {
    let mut config = ServerConfig::default();
    config.api.data_dir = dir.join("data");
    config.api.listen = "127.0.0.1:0".parse().unwrap();
    config.api.tls.enabled = false;
    config.runtime.kind = RuntimeKind::new("memory");
    let tls_dir = dir.join("control-tls");
    runway_ingress::control_tls::generate(&dir.join("ingress-tls"), &tls_dir).unwrap();
    config.ingress.remote = Some(RemoteIngressConfig {
        addresses: vec!["127.0.0.1:9".to_owned()],
        tls_dir,
        server_name: runway_ingress::control_tls::SERVER_NAME.to_owned(),
        resolve_interval_ms: 2_000,
        https_port: 443,
    });
    config
}

#[tokio::test(flavor = "multi_thread")]
async fn a_driver_added_with_one_line_runs_the_server() {
    let dir = tempfile::tempdir().unwrap();
    // The guide's one line, on the server's own list.
    let drivers = runway_server::drivers().with(MemoryKind);
    assert_eq!(drivers.names(), ["local", "kubernetes", "memory"]);

    let running = runway_server::start_with(config(dir.path()), &drivers)
        .await
        .unwrap();
    let memory = running
        .controller
        .driver()
        .get::<Memory>()
        .expect("the server runs the driver runtime.kind names");
    // The controller's rounds ask it what runs.
    let deadline = Instant::now() + Duration::from_secs(30);
    while memory.asked.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the controller never asked the driver"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(running.runtime().is_none(), "not this machine's runtime");
    assert!(running.ingress.is_none());
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kind_without_its_line_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let error = runway_server::start(config(dir.path())).await.unwrap_err();
    let error = format!("{error:#}");
    assert!(
        error.contains("runtime.kind: no driver \"memory\" (known: local, kubernetes)"),
        "{error}"
    );
}

/// The guide quotes the list as it is, names every method of `DriverKind`, and every file it
/// names exists: a guide gone stale fails here.
#[test]
fn the_guide_says_what_the_code_does() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let guide = std::fs::read_to_string(root.join("docs/dev/adding-a-driver.md")).unwrap();
    let code = std::fs::read_to_string(root.join("crates/runway-server/src/driver.rs")).unwrap();

    let quoted = guide
        .split("```rust\n")
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .find(|block| block.contains("pub fn drivers()"))
        .expect("the guide quotes drivers()");
    assert!(code.contains(quoted), "the guide quotes:\n{quoted}");

    let trait_body = code
        .split("pub trait DriverKind")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .unwrap();
    let methods: Vec<&str> = trait_body
        .split("fn ")
        .skip(1)
        .filter_map(|rest| rest.split(['(', '<']).next())
        .collect();
    assert_eq!(
        methods,
        [
            "name",
            "build",
            "check_config",
            "mirrored_platforms",
            "platform_address"
        ]
    );
    for method in methods {
        assert!(
            guide.contains(&format!("`{method}`")),
            "the guide says nothing of {method}"
        );
    }

    for path in guide.split('`').filter(|word| word.starts_with("crates/")) {
        let path = path.split(':').next().unwrap();
        assert!(
            root.join(path).exists(),
            "the guide names {path}, which is not there"
        );
    }
}
