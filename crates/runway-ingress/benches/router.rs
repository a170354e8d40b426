//! Cell routing's cost, side by side in one run: the same load (keep-alive HTTP/1.1
//! connections, each a request at a time, for a fixed time) straight to a minimal upstream,
//! through the ingress on a plain route, and through a cell-routed route (`runway router`'s:
//! GitLab's runner-token rule, a routable token decoded per request); req/s and p50/p99 of
//! each. Then what deciding costs alone: decoding a token, and the rules' whole decision.
//!
//!   cargo bench -p runway-ingress --bench router [-- --seconds 5 --connections 32]

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark prints its figures"
)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use routable_token::{Claims, encode};
use runway_cells::{RequestView, Rules, StaticTopology};
use runway_ingress::{
    CellsConfig, Ingress, InstanceConfig, Options, Protocol, RevisionConfig, RouteConfig,
    RouteTableConfig,
};

const RULES: &str = r#"[
  {"id":"session_token_header_runner_token",
   "match":{"type":"header","name":"runner-token",
    "regexValue":"^glrtr?-(?<payload>[0-9A-Za-z_-]{27,300})\\.01\\.(?<payload_length>[0-9a-z]{2})[0-9a-z]{7}$"},
   "transform":{"type":"routable-token-payload","input":["${payload}","${payload_length}"],"output":"decoded"},
   "action":"classify","classify":{"type":"CELL_ID","value":"${decoded.c}"},
   "validate":{"exist":["${decoded.c}"]}},
  {"id":"default","action":"proxy"}
]"#;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let seconds = arg("--seconds", 5);
    let connections = arg("--connections", 32) as usize;
    let token = encode(
        "glrt-",
        &Claims::new().with("c", 2).with("o", 1007).with("t", 3),
        &[7; 16],
    )
    .unwrap();

    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let upstream = server.block_on(upstream());
    let plain = server.block_on(ingress(RouteConfig {
        service: "hello".into(),
        env: "bench".into(),
        domains: vec![],
        request_timeout_seconds: 30.0,
        sticky: false,
        revisions: vec![RevisionConfig {
            name: "hello-1".into(),
            weight: 100,
            tag: None,
            average_start_seconds: None,
            protocol: Protocol::Http1,
            failing: false,
            instances: vec![InstanceConfig {
                address: upstream,
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
    }));
    let topology = StaticTopology::parse(
        Path::new("topology"),
        &format!("cells: [{{id: 1, address: '{upstream}'}}, {{id: 2, address: '{upstream}'}}]\nlegacy_cell: 1\n"),
    )
    .unwrap();
    let cells = server.block_on(ingress(RouteConfig {
        service: "router".into(),
        env: "cells".into(),
        domains: vec!["*".into()],
        request_timeout_seconds: 30.0,
        sticky: false,
        revisions: vec![],
        cells: Some(CellsConfig {
            rules: serde_json::from_str(RULES).unwrap(),
            topology,
            topology_service: None,
        }),
        ..RouteConfig::new("router", "cells")
    }));

    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "{connections} connections, {seconds} s each, a request at a time per connection, \
         RUNNER-TOKEN on every request"
    );
    println!(
        "{:<28} {:>10} {:>9} {:>9}",
        "path", "req/s", "p50 ms", "p99 ms"
    );
    for (name, address) in [
        ("upstream, direct", upstream),
        ("ingress, plain route", plain),
        ("router, cell-routed route", cells),
    ] {
        let (rate, p50, p99) = client.block_on(load(
            address,
            &token,
            connections,
            Duration::from_secs(seconds),
        ));
        println!("{name:<28} {rate:>10.0} {p50:>9.3} {p99:>9.3}");
    }

    // Deciding alone.
    let rules = Rules::parse(Path::new("rules"), RULES).unwrap();
    let n = 200_000u32;
    let started = Instant::now();
    for _ in 0..n {
        std::hint::black_box(routable_token::decode(std::hint::black_box(&token)).unwrap());
    }
    let decode = started.elapsed() / n;
    let mut headers = http::HeaderMap::new();
    headers.insert("runner-token", token.parse().unwrap());
    let started = Instant::now();
    for _ in 0..n {
        let view = RequestView {
            path: "/api/v4/jobs/request",
            headers: &headers,
            body_prefix: None,
        };
        std::hint::black_box(rules.decide(std::hint::black_box(&view)));
    }
    let decide = started.elapsed() / n;
    println!(
        "decoding a routable token: {} ns; the rules' decision (regex, decode, validate, classify): {} ns",
        decode.as_nanos(),
        decide.as_nanos()
    );
}

/// A minimal upstream: 200 and two bytes to every request.
async fn upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = service_fn(|_| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    address
}

/// An ingress serving `route` on a loopback port.
async fn ingress(route: RouteConfig) -> SocketAddr {
    let ingress = Ingress::new(Options::default());
    ingress
        .set_routes(&RouteTableConfig {
            routes: vec![route],
            ..RouteTableConfig::default()
        })
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { ingress.serve(listener, std::future::pending()).await });
    address
}

/// `connections` clients, each a request at a time for `time`: req/s, p50 and p99 in ms.
async fn load(
    address: SocketAddr,
    token: &str,
    connections: usize,
    time: Duration,
) -> (f64, f64, f64) {
    let deadline = Instant::now() + time;
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let token = token.to_owned();
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(address).await.unwrap();
            let _ = stream.set_nodelay(true);
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .unwrap();
            tokio::spawn(connection);
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let request = http::Request::get("/api/v4/jobs/request")
                    .header("host", "hello.bench.localhost")
                    .header("runner-token", &token)
                    .body(Empty::<Bytes>::new())
                    .unwrap();
                let started = Instant::now();
                let response = sender.send_request(request).await.unwrap();
                assert!(response.status().is_success(), "{}", response.status());
                response.into_body().collect().await.unwrap();
                latencies.push(started.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort();
    let at =
        |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)].as_secs_f64() * 1000.0;
    (all.len() as f64 / time.as_secs_f64(), at(0.50), at(0.99))
}
