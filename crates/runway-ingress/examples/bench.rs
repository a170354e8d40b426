//! The ingress beside nginx, both as reverse proxies with keep-alive to the same upstream (a
//! minimal hyper server), under the same load; prints req/s, p50/p99 latency and peak memory
//! side by side, for:
//!
//! - plain HTTP/1.1 at full speed (wrk);
//! - plain HTTP/1.1 at a fixed 1,000 req/s (h2load `--rps`), the latency a proxy adds when it
//!   is not saturated, beside a direct connection;
//! - HTTPS with HTTP/1.1 and with HTTP/2 (h2load), the same certificate in both proxies.
//!
//! ```text
//! cargo build --release -p runway-ingress --bin runway-ingress --example bench
//! target/release/examples/bench [--seconds 10] [--connections 50] [--threads 2]
//! ```
//!
//! Needs `nginx`, `wrk` and `h2load` (Debian's nghttp2-client) on the PATH. `bench upstream
//! ADDR` is the upstream (run by itself).

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

/// How h2load loads a target.
#[derive(Debug, Clone, Copy)]
enum Load {
    /// HTTP/1.1 over plain TCP at a fixed rate: `clients` × `per_client` req/s.
    Paced { clients: u64, per_client: u64 },
    /// HTTP/1.1 over TLS, as fast as it goes.
    Https1,
    /// HTTP/2 over TLS (ALPN), `streams` at once per connection, as fast as it goes.
    Https2 { streams: u64 },
}

/// Runs h2load against `address` (with `Host`/SNI `HOST`); latencies from its per-request log.
fn h2load(
    address: SocketAddr,
    load: Load,
    seconds: u64,
    connections: u64,
    threads: u64,
    log: &Path,
) -> anyhow::Result<Result> {
    let mut command = Command::new("h2load");
    command
        .arg(format!("--connect-to={address}"))
        .arg(format!("--duration={seconds}"))
        .arg("--warm-up-time=1")
        .arg(format!("--log-file={}", log.display()));
    let url = match load {
        Load::Paced {
            clients,
            per_client,
        } => {
            command.args([
                "--h1".to_owned(),
                format!("--clients={clients}"),
                format!("--rps={per_client}"),
            ]);
            format!("http://{HOST}/")
        }
        Load::Https1 => {
            command.args([
                "--h1".to_owned(),
                format!("--clients={connections}"),
                format!("--threads={threads}"),
            ]);
            format!("https://{HOST}/")
        }
        Load::Https2 { streams } => {
            command.args([
                format!("--clients={}", connections.div_ceil(streams).max(threads)),
                format!("--max-concurrent-streams={streams}"),
                format!("--threads={threads}"),
            ]);
            format!("https://{HOST}/")
        }
    };
    let output = command.arg(&url).output().context("cannot run h2load")?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut result = Result::default();
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("finished in ") {
            // `finished in 10.00s, 45234.50 req/s, 5.02MB/s`
            if let Some(rate) = rest
                .split(", ")
                .nth(1)
                .and_then(|r| r.strip_suffix(" req/s"))
            {
                result.requests_per_second = rate.parse()?;
            }
        } else if let Some(rest) = line.strip_prefix("requests: ") {
            // `requests: N total, N started, N done, N succeeded, F failed, E errored, T timeout`
            let failed: u64 = rest
                .split(", ")
                .filter(|f| {
                    f.ends_with(" failed") || f.ends_with(" errored") || f.ends_with(" timeout")
                })
                .filter_map(|f| f.split(' ').next()?.parse::<u64>().ok())
                .sum();
            if failed > 0 {
                result.errors = format!("{failed} failed");
            }
        }
    }
    if result.requests_per_second == 0.0 {
        bail!(
            "h2load printed no rate:\n{text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Each line: start time (µs since the epoch), status, time to the response's end (µs).
    let mut micros: Vec<u64> = std::fs::read_to_string(log)?
        .lines()
        .filter_map(|l| l.split('\t').nth(2)?.trim().parse().ok())
        .collect();
    micros.sort_unstable();
    let percentile = |p: f64| {
        let index = ((micros.len() as f64 * p).ceil() as usize).saturating_sub(1);
        micros.get(index).map_or(0.0, |&us| us as f64 / 1000.0)
    };
    result.p50_ms = percentile(0.50);
    result.p99_ms = percentile(0.99);
    Ok(result)
}

/// Where a proxy under test listens.
#[derive(Debug, Clone, Copy)]
struct Listening {
    plain: SocketAddr,
    tls: SocketAddr,
}

fn nginx_config(dir: &Path, at: Listening, upstream: SocketAddr, workers: u64) -> String {
    let d = dir.display();
    let (plain, tls) = (at.plain, at.tls);
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
    # nginx closes a keep-alive connection after 1,000 requests by default, client side and
    # upstream side; the ingress does not, and h2load does not reconnect: lift the limit.
    keepalive_requests 1000000;
    upstream app {{ server {upstream}; keepalive 64; keepalive_requests 1000000; }}
    ssl_certificate {d}/cert.pem;
    ssl_certificate_key {d}/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    server {{
        listen {plain};
        listen {tls} ssl http2;
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

/// A certificate for [`HOST`] and its key, as PEM files in `dir`, for both proxies.
fn write_certificate(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec![HOST.to_owned()])?.self_signed(&key)?;
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.pem())?;
    std::fs::write(&key_path, key.serialize_pem())?;
    Ok((cert_path, key_path))
}

struct Settings {
    seconds: u64,
    connections: u64,
    threads: u64,
}

/// One proxy (or the direct connection) under test.
struct Target {
    name: &'static str,
    at: Listening,
    /// Whether it serves HTTPS (the direct connection does not).
    tls: bool,
    /// The process whose peak memory is reported.
    pid: Option<u32>,
}

/// The loads, in the order they run; each runs against every target before the next load, so
/// that whatever else the machine does hits the targets alike.
const LOADS: [&str; 4] = [
    "HTTP/1.1, full speed (wrk)",
    "HTTP/1.1 at 1,000 req/s (h2load)",
    "HTTPS, HTTP/1.1 (h2load)",
    "HTTPS, HTTP/2, 10 streams per connection (h2load)",
];

/// Runs load `index` of [`LOADS`] against a target; None when the target has no TLS for it.
fn measure(
    index: usize,
    target: &Target,
    settings: &Settings,
    dir: &Path,
) -> anyhow::Result<Option<Result>> {
    let Settings {
        seconds,
        connections,
        threads,
    } = *settings;
    let log = dir.join(format!("{}.log", target.name));
    eprintln!("bench: {}: {}", target.name, LOADS[index]);
    let mut result = match index {
        0 => wrk(target.at.plain, seconds, connections, threads)?,
        1 => {
            let paced = Load::Paced {
                clients: 10,
                per_client: 100,
            };
            h2load(target.at.plain, paced, seconds, connections, threads, &log)?
        }
        _ if !target.tls => return Ok(None),
        2 => h2load(
            target.at.tls,
            Load::Https1,
            seconds,
            connections,
            threads,
            &log,
        )?,
        _ => {
            let h2 = Load::Https2 { streams: 10 };
            h2load(target.at.tls, h2, seconds, connections, threads, &log)?
        }
    };
    result.peak_kib = target.pid.map_or(0, peak_kib);
    Ok(Some(result))
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
    let settings = Settings {
        seconds,
        connections,
        threads,
    };
    let dir = tempfile::tempdir()?;
    let (cert, key) = write_certificate(dir.path())?;
    let upstream_address = free_port()?;
    let _upstream = Process(
        Command::new(&me)
            .args(["upstream", &upstream_address.to_string()])
            .spawn()?,
    );
    wait_listening(upstream_address)?;

    let mut rows = Vec::new();

    // Direct, for the added latency.
    let direct = Listening {
        plain: upstream_address,
        tls: upstream_address,
    };

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
    let at = Listening {
        plain: free_port()?,
        tls: free_port()?,
    };
    let admin = free_port()?;
    let ingress = Process(
        Command::new(&ingress_bin)
            .arg("--routes")
            .arg(&routes)
            .args(["--listen", &at.plain.to_string()])
            .args(["--https", &at.tls.to_string(), "--no-redirect"])
            .arg("--ca-dir")
            .arg(dir.path().join("ca"))
            .arg("--certificate")
            .arg(format!("{HOST}:{}:{}", cert.display(), key.display()))
            .args(["--admin", &admin.to_string()])
            .args(["--threads", &threads.to_string()])
            .args(
                std::env::var("BENCH_EVENT_LOOPS")
                    .map(|loops| vec!["--event-loops".to_owned(), loops])
                    .unwrap_or_default(),
            )
            .stderr(Stdio::null())
            .spawn()?,
    );
    wait_listening(at.plain)?;
    wait_listening(at.tls)?;
    let ingress_target = Target {
        name: "runway-ingress",
        at,
        tls: true,
        pid: Some(ingress.0.id()),
    };

    // nginx.
    let at = Listening {
        plain: free_port()?,
        tls: free_port()?,
    };
    let config = dir.path().join("nginx.conf");
    std::fs::write(
        &config,
        nginx_config(dir.path(), at, upstream_address, threads),
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
    wait_listening(at.plain)?;
    wait_listening(at.tls)?;
    let targets = [
        Target {
            name: "direct",
            at: direct,
            tls: false,
            pid: None,
        },
        ingress_target,
        Target {
            name: "nginx",
            at,
            tls: true,
            pid: Some(nginx.0.id()),
        },
    ];
    for (index, load) in LOADS.iter().enumerate() {
        for target in &targets {
            if let Some(result) = measure(index, target, &settings, dir.path())? {
                rows.push((*load, target.name, result));
            }
        }
    }
    drop((ingress, nginx));

    println!(
        "same upstream; {} CPUs; {seconds} s per row; {connections} connections, {threads} client threads",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    for load in LOADS {
        println!("\n{load}");
        println!(
            "  {:<16} {:>10} {:>9} {:>9} {:>9}  errors",
            "", "req/s", "p50 ms", "p99 ms", "peak MiB"
        );
        let find = |name: &str| {
            rows.iter()
                .find(|(l, n, _)| *l == load && *n == name)
                .map(|(_, _, r)| r)
        };
        for (_, name, r) in rows.iter().filter(|(l, _, _)| *l == load) {
            // The upstream's own memory is not measured: "direct" shows none.
            let peak = if r.peak_kib == 0 {
                "-".to_owned()
            } else {
                format!("{:.1}", r.peak_kib as f64 / 1024.0)
            };
            println!(
                "  {name:<16} {:>10.0} {:>9.3} {:>9.3} {peak:>9}  {}",
                r.requests_per_second, r.p50_ms, r.p99_ms, r.errors
            );
        }
        if let (Some(ours), Some(theirs)) = (find("runway-ingress"), find("nginx")) {
            println!(
                "  runway-ingress / nginx: throughput {:.2}×, p99 {:.2}×",
                ours.requests_per_second / theirs.requests_per_second,
                ours.p99_ms / theirs.p99_ms
            );
        }
        if let (Some(ours), Some(direct)) = (find("runway-ingress"), find("direct")) {
            println!(
                "  added by runway-ingress: p50 {:+.3} ms, p99 {:+.3} ms",
                ours.p50_ms - direct.p50_ms,
                ours.p99_ms - direct.p99_ms
            );
        }
    }
    Ok(())
}
