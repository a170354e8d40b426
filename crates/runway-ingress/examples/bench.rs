//! The ingress beside nginx, both as reverse proxies with keep-alive to the same upstream (a
//! minimal hyper server), under the same wrk load; prints req/s, p50/p99 latency and peak
//! memory side by side.
//!
//! ```text
//! cargo build --release -p runway-ingress --bin runway-ingress --example bench
//! target/release/examples/bench [--seconds 10] [--connections 50] [--threads 2]
//! ```
//!
//! Needs `nginx` and `wrk` on the PATH. `bench upstream ADDR` is the upstream (run by itself).

#![allow(clippy::print_stdout)]

use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

const HOST: &str = "hello.bench.localhost";

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("upstream") {
        let address: SocketAddr = args.get(1).context("upstream needs an address")?.parse()?;
        return upstream(address);
    }
    let flag = |name: &str, default: u64| -> anyhow::Result<u64> {
        match args.iter().position(|a| a == name) {
            Some(i) => Ok(args.get(i + 1).context("flag needs a value")?.parse()?),
            None => Ok(default),
        }
    };
    let seconds = flag("--seconds", 10)?;
    let connections = flag("--connections", 50)?;
    let threads = flag("--threads", 2)?;
    run(seconds, connections, threads)
}

/// The upstream: `hello world` to every request, HTTP/1.1 keep-alive.
fn upstream(address: SocketAddr) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(address).await?;
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = service_fn(|_request| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                        b"hello world\n",
                    ))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}

/// A child process killed on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        // SIGTERM first: nginx's master stops its workers on it, not on SIGKILL.
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(StdListener::bind("127.0.0.1:0")?.local_addr()?)
}

fn wait_listening(address: SocketAddr) -> anyhow::Result<()> {
    let start = Instant::now();
    while TcpStream::connect(address).is_err() {
        if start.elapsed() > Duration::from_secs(10) {
            bail!("nothing listens on {address} after 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Peak resident memory (VmHWM) of a process and its children, in KiB.
fn peak_kib(pid: u32) -> u64 {
    let mut pids = vec![pid];
    if let Ok(children) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
        pids.extend(
            children
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .sum()
}

#[derive(Debug, Default)]
struct Result {
    requests_per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    peak_kib: u64,
    errors: String,
}

fn wrk(
    address: SocketAddr,
    seconds: u64,
    connections: u64,
    threads: u64,
) -> anyhow::Result<Result> {
    let output = Command::new("wrk")
        .args([
            &format!("-t{threads}"),
            &format!("-c{connections}"),
            &format!("-d{seconds}s"),
            "--latency",
            "-H",
            &format!("Host: {HOST}"),
            &format!("http://{address}/"),
        ])
        .output()
        .context("cannot run wrk")?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut result = Result::default();
    for line in text.lines().map(str::trim) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["Requests/sec:", value] => result.requests_per_second = value.parse()?,
            ["50%", value] => result.p50_ms = millis(value)?,
            ["99%", value] => result.p99_ms = millis(value)?,
            _ if line.starts_with("Non-2xx") || line.starts_with("Socket errors") => {
                result.errors = line.to_owned();
            }
            _ => {}
        }
    }
    if result.requests_per_second == 0.0 {
        bail!("wrk printed no rate:\n{text}");
    }
    Ok(result)
}

/// wrk's `1.23ms`, `456.00us`, `1.2s` to milliseconds.
fn millis(value: &str) -> anyhow::Result<f64> {
    let (number, factor) = if let Some(v) = value.strip_suffix("us") {
        (v, 0.001)
    } else if let Some(v) = value.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = value.strip_suffix('s') {
        (v, 1000.0)
    } else {
        bail!("unknown latency {value}");
    };
    Ok(number.parse::<f64>()? * factor)
}

fn nginx_config(dir: &Path, listen: SocketAddr, upstream: SocketAddr, workers: u64) -> String {
    let d = dir.display();
    format!(
        "worker_processes {workers};
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    upstream app {{ server {upstream}; keepalive 64; }}
    server {{
        listen {listen};
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }}
    }}
}}
"
    )
}

fn run(seconds: u64, connections: u64, threads: u64) -> anyhow::Result<()> {
    let me = std::env::current_exe()?;
    let ingress_bin: PathBuf = me
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("runway-ingress"))
        .context("cannot find the target directory")?;
    if !ingress_bin.exists() {
        bail!(
            "{} is missing: cargo build --release -p runway-ingress --bin runway-ingress",
            ingress_bin.display()
        );
    }
    let dir = tempfile::tempdir()?;
    let upstream_address = free_port()?;
    let _upstream = Process(
        Command::new(&me)
            .args(["upstream", &upstream_address.to_string()])
            .spawn()?,
    );
    wait_listening(upstream_address)?;

    let mut rows = Vec::new();

    // Direct, for the added latency.
    eprintln!("bench: direct");
    let direct = wrk(upstream_address, seconds, connections, threads)?;
    rows.push(("direct", direct));

    // The ingress.
    let routes = dir.path().join("routes.json");
    std::fs::write(
        &routes,
        serde_json::to_string(&serde_json::json!({
            "domain": "localhost",
            "routes": [{"service": "hello", "env": "bench", "revisions": [
                {"name": "hello-1", "weight": 100, "instances": [{"address": upstream_address}]}
            ]}]
        }))?,
    )?;
    let listen = free_port()?;
    let admin = free_port()?;
    let ingress = Process(
        Command::new(&ingress_bin)
            .arg("--routes")
            .arg(&routes)
            .args([
                "--listen",
                &listen.to_string(),
                "--admin",
                &admin.to_string(),
            ])
            .args(["--threads", &threads.to_string()])
            .args([
                "--event-loops",
                &std::env::var("BENCH_EVENT_LOOPS").unwrap_or_else(|_| "0".to_owned()),
            ])
            .stderr(Stdio::null())
            .spawn()?,
    );
    wait_listening(listen)?;
    eprintln!("bench: runway-ingress");
    let mut result = wrk(listen, seconds, connections, threads)?;
    result.peak_kib = peak_kib(ingress.0.id());
    rows.push(("runway-ingress", result));
    drop(ingress);

    // nginx.
    let listen = free_port()?;
    let config = dir.path().join("nginx.conf");
    std::fs::write(
        &config,
        nginx_config(dir.path(), listen, upstream_address, threads),
    )?;
    let nginx = Process(
        Command::new("nginx")
            .arg("-c")
            .arg(&config)
            .arg("-p")
            .arg(dir.path())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start nginx")?,
    );
    wait_listening(listen)?;
    eprintln!("bench: nginx");
    let mut result = wrk(listen, seconds, connections, threads)?;
    result.peak_kib = peak_kib(nginx.0.id());
    rows.push(("nginx", result));
    drop(nginx);

    println!(
        "wrk -t{threads} -c{connections} -d{seconds}s, same upstream; {} CPUs",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    println!(
        "{:<16} {:>12} {:>10} {:>10} {:>12}  errors",
        "", "req/s", "p50 ms", "p99 ms", "peak MiB"
    );
    for (name, r) in &rows {
        // The upstream's own memory is not measured: "direct" shows none.
        let peak = if r.peak_kib == 0 {
            "-".to_owned()
        } else {
            format!("{:.1}", r.peak_kib as f64 / 1024.0)
        };
        println!(
            "{name:<16} {:>12.0} {:>10.3} {:>10.3} {peak:>12}  {}",
            r.requests_per_second, r.p50_ms, r.p99_ms, r.errors
        );
    }
    if let (Some((_, ours)), Some((_, theirs))) = (rows.get(1), rows.get(2)) {
        println!(
            "runway-ingress / nginx: throughput {:.2}×, p99 {:.2}×",
            ours.requests_per_second / theirs.requests_per_second,
            ours.p99_ms / theirs.p99_ms
        );
    }
    Ok(())
}
