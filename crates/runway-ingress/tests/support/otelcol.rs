//! A real OpenTelemetry Collector for tests (built by `scripts/otelcol`, given as
//! `RUNWAY_OTELCOL_BIN`): OTLP over HTTP on loopback in, OTLP JSON lines out, read back as
//! spans. Shared by the ingress's trace test and the CLI's end-to-end one (included by path).

#![allow(dead_code, reason = "each test binary uses part of it")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The collector, or a skip (a failure under `CI=true`) saying how to build it.
pub(crate) fn collector_binary() -> Option<PathBuf> {
    let dir = std::env::var_os("RUNWAY_OTELCOL_BIN").map(PathBuf::from);
    match dir.filter(|d| d.join("otelcol").is_file()) {
        Some(dir) => Some(dir.join("otelcol")),
        None => {
            let reason =
                "the collector is not built: RUNWAY_OTELCOL_BIN=$(scripts/otelcol | tail -n 1)";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
            eprintln!("skipped: {reason}");
            None
        }
    }
}

/// A collector on loopback, killed when dropped.
pub(crate) struct Collector {
    child: Child,
    pub(crate) endpoint: String,
    output: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Collector {
    pub(crate) fn start(binary: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("traces.jsonl");
        let port = free_port();
        let config = format!(
            "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{port}\n\
             exporters:\n  file:\n    path: {}\n    flush_interval: 100ms\n\
             service:\n  telemetry:\n    metrics:\n      level: none\n\
             \x20 pipelines:\n    traces:\n      receivers: [otlp]\n      exporters: [file]\n",
            output.display()
        );
        let config_path = dir.path().join("config.yaml");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("collector.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config=file:{}", config_path.display()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut collector = Self {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            output,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(exit)) = collector.child.try_wait() {
                panic!("the collector ended ({exit}): {}", collector.log());
            }
            assert!(
                Instant::now() < deadline,
                "the collector did not listen within 20 s: {}",
                collector.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        collector
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.output.with_file_name("collector.log")).unwrap_or_default()
    }

    /// Every span received so far.
    pub(crate) fn spans(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.output).unwrap_or_default();
        let mut spans = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let Ok(batch) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            for resource in batch["resourceSpans"].as_array().into_iter().flatten() {
                for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                    spans.extend(scope["spans"].as_array().into_iter().flatten().cloned());
                }
            }
        }
        spans
    }

    /// Waits (10 s at most) until `count` spans of `trace` arrived.
    pub(crate) fn trace(&self, trace: &str, count: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let spans: Vec<Value> = self
                .spans()
                .into_iter()
                .filter(|s| s["traceId"] == trace)
                .collect();
            if spans.len() >= count {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {count} spans of trace {trace} arrived: {spans:#?}\n{}",
                spans.len(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The span named `name` among `spans`.
pub(crate) fn named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no span {name} in {spans:#?}"))
}

/// A span's time field (`startTimeUnixNano`, `endTimeUnixNano`), in nanoseconds.
pub(crate) fn nanos(span: &Value, field: &str) -> u64 {
    span[field].as_str().unwrap().parse().unwrap()
}
