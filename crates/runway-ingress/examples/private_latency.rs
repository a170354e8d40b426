//! The latency a private call adds over a direct one: the same instance asked directly and
//! through the private listener (caller lookup, `Runway-Caller` stamped), each on one
//! keep-alive connection, one request at a time. `cargo run --release --example
//! private_latency [REQUESTS]`.

#![allow(clippy::unwrap_used, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use runway_ingress::{
    Ingress, InstanceConfig, Options, Protocol, RevisionConfig, RouteConfig, RouteTableConfig,
};
use tokio::net::{TcpListener, TcpSocket};

async fn instance() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service_fn(|_request| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    address
}

/// `requests` GETs of `host` at `to` from 127.0.0.2 on one connection: each one's latency.
async fn measure(to: SocketAddr, host: &str, requests: usize) -> Vec<Duration> {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let stream = socket.connect(to).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut took = Vec::with_capacity(requests);
    for _ in 0..requests {
        let request = Request::get("/")
            .header("host", host)
            .body(Empty::<Bytes>::new())
            .unwrap();
        let start = Instant::now();
        sender.ready().await.unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        response.into_body().collect().await.unwrap();
        took.push(start.elapsed());
    }
    took
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn main() {
    let requests: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let address = instance().await;
        let ingress = Ingress::new(Options::default());
        ingress
            .set_routes(&RouteTableConfig {
                routes: vec![RouteConfig {
                    private: true,
                    revisions: vec![RevisionConfig {
                        name: "api-1".to_owned(),
                        weight: 100,
                        tag: None,
                        average_start_seconds: None,
                        protocol: Protocol::Http1,
                        failing: false,
                        instances: vec![InstanceConfig {
                            address,
                            ready: true,
                            draining: false,
                            max_concurrency: 0,
                        }],
                    }],
                    ..RouteConfig::new("api", "prod")
                }],
                callers: BTreeMap::from([("127.0.0.2".parse().unwrap(), "web/prod".to_owned())]),
                ..RouteTableConfig::default()
            })
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let private = listener.local_addr().unwrap();
        let served = ingress.clone();
        tokio::spawn(async move { served.serve_private(listener, std::future::pending()).await });
        // Warm both paths (connections, allocator), then measure them in turn.
        measure(address, "api", 1_000).await;
        measure(private, "api.prod.internal", 1_000).await;
        let mut direct = Vec::new();
        let mut through = Vec::new();
        for _ in 0..4 {
            direct.extend(measure(address, "api", requests / 4).await);
            through.extend(measure(private, "api.prod.internal", requests / 4).await);
        }
        direct.sort();
        through.sort();
        for (p, name) in [(0.5, "p50"), (0.99, "p99")] {
            let (d, t) = (percentile(&direct, p), percentile(&through, p));
            eprintln!(
                "{name}: direct {:>7.1} µs, private {:>7.1} µs, added {:>7.1} µs",
                d.as_secs_f64() * 1e6,
                t.as_secs_f64() * 1e6,
                (t.as_secs_f64() - d.as_secs_f64()) * 1e6
            );
        }
    });
}
