//! A connection flood against the ingress, for the figures of the audit's finding 5: how many
//! connections the ingress holds before it refuses, how fast a second client (another
//! address) and the admin port (a second server in the process, as the API is in `runway
//! server`) answer during the flood, and the process's memory before, at the peak and after.
//!
//! ```text
//! cargo build --release -p runway-ingress --example flood
//! target/release/examples/flood [--connections 18000] [--loops 2] [--rounds 2] [--tls]
//! ```
//!
//! The flood runs in a child process (`flood client ...`), so its sockets do not count
//! against the ingress's descriptor limit. Each flood connection sends half a request head
//! (as a slow client does) and holds the connection; the first flood comes from one address,
//! the second from many (127.0.0.10 and up).

// Tests and benches keep time on tokio's runtimes, never on an event loop's.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::print_stdout)]

use std::convert::Infallible;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{Empty, Full};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use runway_ingress::{
    Ingress, InstanceConfig, Options, RevisionConfig, RouteConfig, RouteTableConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

const HOST: &str = "hello.flood.localhost";

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("client") {
        return client(&args[1..]);
    }
    let flag = |name: &str, default: u64| -> anyhow::Result<u64> {
        match args.iter().position(|a| a == name) {
            Some(i) => Ok(args.get(i + 1).context("flag needs a value")?.parse()?),
            None => Ok(default),
        }
    };
    let connections = flag("--connections", 18_000)?;
    let loops = flag("--loops", 2)? as usize;
    let rounds = flag("--rounds", 2)?;
    let tls = args.iter().any(|a| a == "--tls");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?
        .block_on(run(connections, loops, rounds, tls))
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix(field)?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

fn rss_mib() -> f64 {
    status_kib("VmRSS:") as f64 / 1024.0
}

fn gauge(ingress: &Ingress, name: &str) -> u64 {
    ingress
        .metrics()
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

async fn upstream() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(|_: Request<hyper::body::Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"fine"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(address)
}

/// Times of `count` requests, each on a new connection from `local`, to `path` at `address`
/// (plain HTTP/1.1); a refused or failed one counts as None.
async fn probe(
    local: &str,
    address: SocketAddr,
    host: &str,
    count: usize,
) -> Vec<Option<Duration>> {
    let mut times = Vec::new();
    for _ in 0..count {
        let start = Instant::now();
        let ok = tokio::time::timeout(Duration::from_secs(5), async {
            let socket = TcpSocket::new_v4().ok()?;
            socket.bind(format!("{local}:0").parse().ok()?).ok()?;
            let stream = socket.connect(address).await.ok()?;
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .ok()?;
            tokio::spawn(connection);
            let request = Request::get("/healthz")
                .header("host", host)
                .body(Empty::<Bytes>::new())
                .ok()?;
            let response = sender.send_request(request).await.ok()?;
            response.status().is_success().then_some(())
        })
        .await;
        times.push(matches!(ok, Ok(Some(()))).then(|| start.elapsed()));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    times
}

fn summary(times: &[Option<Duration>]) -> String {
    let mut ok: Vec<Duration> = times.iter().flatten().copied().collect();
    ok.sort();
    if ok.is_empty() {
        return format!("0/{} answered", times.len());
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "{}/{} answered, median {:.2} ms, max {:.2} ms",
        ok.len(),
        times.len(),
        ms(ok[ok.len() / 2]),
        ms(ok[ok.len() - 1])
    )
}

/// Starts `flood client ADDRESS COUNT FIRST_SOURCE SOURCES`; returns it once it reports its
/// connections made.
fn flood(
    address: SocketAddr,
    count: u64,
    sources: (u8, u8),
    tls: bool,
) -> anyhow::Result<(std::process::Child, String)> {
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "client",
            &address.to_string(),
            &count.to_string(),
            &sources.0.to_string(),
            &sources.1.to_string(),
            if tls { "tls" } else { "plain" },
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    Ok((child, line.trim().to_owned()))
}

fn end_flood(mut child: std::process::Child) -> anyhow::Result<()> {
    drop(child.stdin.take());
    child.wait()?;
    Ok(())
}

async fn run(connections: u64, loops: usize, rounds: u64, tls: bool) -> anyhow::Result<()> {
    let fd_limit = runway_ingress::raise_fd_limit()?;
    let instance = upstream().await?;
    let ingress = Ingress::new(Options::default());
    // As `runway-ingress` does: the memory a flood took goes back once it is over.
    let _memory = ingress.give_back_memory();
    ingress.set_routes(&RouteTableConfig {
        domain: "localhost".to_owned(),
        environments: Vec::new(),
        routes: vec![RouteConfig {
            service: "hello".to_owned(),
            env: "flood".to_owned(),
            domains: vec![],
            request_timeout_seconds: 5.0,
            sticky: false,
            revisions: vec![RevisionConfig {
                name: "hello-1".to_owned(),
                weight: 100,
                tag: None,
                average_start_seconds: None,
                protocol: runway_ingress::config::Protocol::Http1,
                failing: false,
                instances: vec![InstanceConfig {
                    address: instance,
                    ready: true,
                    draining: false,
                    max_concurrency: 0,
                }],
            }],
            cells: None,
            public: true,
            private: false,
            callers: Vec::new(),
            cloudflare: false,
            tag_header: None,
            controls: Default::default(),
        }],
        ..RouteTableConfig::default()
    })?;
    let options = ingress.options().clone();
    println!(
        "open files: {fd_limit}; connection budget {} ({} per client address); {loops} event loops{}",
        options.max_connections,
        options.max_connections_per_client,
        if tls { ", TLS" } else { "" }
    );
    // The plain listener for the probes, the event loops for the flood (TLS or not).
    let address: SocketAddr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
        probe.local_addr()?
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let tls_setup = if tls {
        let dir = std::env::temp_dir().join(format!("flood-ca-{}", std::process::id()));
        Some(ingress.tls(&runway_ingress::TlsOptions {
            ca_dir: Some(dir),
            certificates: vec![],
        })?)
    } else {
        None
    };
    let serving = {
        let ingress = ingress.clone();
        let stopped = stopped.clone();
        tokio::spawn(async move {
            ingress
                .serve_event_loops(
                    &[runway_ingress::server::LoopListener {
                        address,
                        tls: tls_setup,
                    }],
                    loops,
                    stopped,
                )
                .await
        })
    };
    let plain = TcpListener::bind("127.0.0.1:0").await?;
    let plain_address = plain.local_addr()?;
    let admin = TcpListener::bind("127.0.0.1:0").await?;
    let admin_address = admin.local_addr()?;
    for (listener, is_admin) in [(plain, false), (admin, true)] {
        let ingress = ingress.clone();
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let until = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            if is_admin {
                ingress.serve_admin(listener, until).await
            } else {
                ingress.serve(listener, until).await
            }
        });
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = rss_mib();
    let idle = summary(&probe("127.0.0.2", plain_address, HOST, 20).await);
    println!("before: RSS {before:.1} MiB; a client's GET: {idle}");

    // 1. From one address: its share, then refused; another address is served.
    let (child, report) = flood(address, connections.min(5000), (1, 1), tls)?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = gauge(&ingress, "runway_ingress_open_connections");
    let second = summary(&probe("127.0.0.2", plain_address, HOST, 20).await);
    println!(
        "flood from one address ({report}): ingress holds {held}; another address's GET: {second}"
    );
    end_flood(child)?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // 2. From many addresses, past the budget; twice, to tell memory kept for reuse from
    // memory lost.
    for round in 1..=rounds {
        let (child, report) = flood(address, connections, (10, 250), tls)?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let held = gauge(&ingress, "runway_ingress_open_connections");
        let peak = rss_mib();
        let admin_times = summary(&probe("127.0.0.2", admin_address, "admin", 20).await);
        let second = summary(&probe("127.0.0.2", plain_address, HOST, 20).await);
        let refused = ingress
            .metrics()
            .encode()
            .lines()
            .filter(|l| l.starts_with("runway_ingress_refused_connections_total"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "flood from many addresses ({report}): ingress holds {held} ({refused}); RSS {peak:.1} MiB"
        );
        println!("  during it: the admin port's GET: {admin_times}; a new client's GET: {second}");
        println!(
            "  accept errors: {}",
            gauge(&ingress, "runway_ingress_accept_errors_total")
        );
        end_flood(child)?;
        for seconds in [1, 5] {
            tokio::time::sleep(Duration::from_secs(if seconds == 1 { 1 } else { 4 })).await;
            println!(
                "{seconds} s after the flood: RSS {:.1} MiB (peak {:.1} MiB), {} connections open",
                rss_mib(),
                status_kib("VmHWM:") as f64 / 1024.0,
                gauge(&ingress, "runway_ingress_open_connections")
            );
        }
        let after = summary(&probe("127.0.0.2", plain_address, HOST, 20).await);
        println!("after flood {round}: a client's GET: {after}");
    }
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(40), serving).await;
    Ok(())
}

/// The flood: `count` connections to `address` from 127.0.0.FIRST..=127.0.0.LAST in turn,
/// each sending half a request head (or a TLS ClientHello, then half a head); prints how many
/// were still open after a moment, then holds them until stdin closes.
fn client(args: &[String]) -> anyhow::Result<()> {
    let [address, count, first, last, mode] = args else {
        bail!("flood client ADDRESS COUNT FIRST LAST plain|tls");
    };
    let address: SocketAddr = address.parse()?;
    let count: u64 = count.parse()?;
    let (first, last): (u8, u8) = (first.parse()?, last.parse()?);
    let tls = mode == "tls";
    runway_ingress::raise_fd_limit()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let half_head = format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nX-Slow: ");
        let mut tasks = Vec::new();
        let semaphore = Arc::new(tokio::sync::Semaphore::new(256));
        for i in 0..count {
            let source = first + (i % u64::from(last - first + 1)) as u8;
            let permit = Arc::clone(&semaphore).acquire_owned().await?;
            let half_head = half_head.clone();
            tasks.push(tokio::spawn(async move {
                let held = async {
                    let socket = TcpSocket::new_v4().ok()?;
                    socket
                        .bind(format!("127.0.0.{source}:0").parse().ok()?)
                        .ok()?;
                    let mut stream: TcpStream = socket.connect(address).await.ok()?;
                    drop(permit);
                    if tls {
                        // A TLS ClientHello's record header only: the server waits for more.
                        stream
                            .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00])
                            .await
                            .ok()?;
                    } else {
                        stream.write_all(half_head.as_bytes()).await.ok()?;
                    }
                    // A refused connection is closed at once.
                    let mut byte = [0u8; 1];
                    match tokio::time::timeout(Duration::from_millis(300), stream.read(&mut byte))
                        .await
                    {
                        Err(_) => Some(stream),
                        Ok(_) => None,
                    }
                };
                held.await
            }));
        }
        let mut open = Vec::new();
        let mut refused = 0;
        for task in tasks {
            match task.await {
                Ok(Some(stream)) => open.push(stream),
                _ => refused += 1,
            }
        }
        println!(
            "{} attempted, {} held, {refused} closed or failed",
            count,
            open.len()
        );
        std::io::stdout().flush()?;
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        drop(open);
        Ok(())
    })
}
