//! The ingress's traces against a real OpenTelemetry Collector (built by `scripts/otelcol` from
//! the upstream components, given as `RUNWAY_OTELCOL_BIN`), receiving OTLP over HTTP on
//! loopback and writing what it received as OTLP JSON lines, which the test reads.
//!
//! A request held while its revision has no ready instance (a cold start) shows the hold as a
//! span of its own between the request's and the call to the instance; the instance receives
//! the call's span as its `traceparent`; a caller's `traceparent` and `tracestate` carry the
//! request into the caller's trace.

// Tests and benches keep time on tokio's runtimes, never on an event loop's.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, reason = "tests")]

#[path = "support/otelcol.rs"]
mod otelcol;
mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use otelcol::{Collector, collector_binary, named, nanos};
use runway_ingress::trace::{Tracing, TracingOptions};
use runway_ingress::{Ingress, Options};
use tokio::net::{TcpListener, TcpStream};

const BOUND: Duration = Duration::from_secs(60);
const HOST: &str = "hello.dev.localhost";

/// An instance that answers every request with the trace context headers it received.
async fn instance() -> (SocketAddr, Arc<Mutex<Vec<(String, String)>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let seen = Arc::clone(&kept);
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let header = |name: &str| {
                        request
                            .headers()
                            .get(name)
                            .map(|v| v.to_str().unwrap().to_owned())
                            .unwrap_or_default()
                    };
                    seen.lock()
                        .unwrap()
                        .push((header("traceparent"), header("tracestate")));
                    async move {
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(
                            Bytes::from_static(b"ok"),
                        )))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (address, seen)
}

async fn get(address: SocketAddr, headers: &[(&str, &str)]) -> StatusCode {
    let stream = TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::get("/work").header("host", HOST);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let _ = response.into_body().collect().await;
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_start_shows_its_hold_and_the_instance_continues_the_trace() {
    let Some(binary) = collector_binary() else {
        return;
    };
    let collector = Collector::start(&binary);
    tokio::time::timeout(BOUND, async {
        let tracing = Arc::new(
            Tracing::new(&TracingOptions {
                endpoint: collector.endpoint.clone(),
                sample_ratio: 1.0,
                service_name: "runway-ingress".to_owned(),
            })
            .unwrap(),
        );
        let ingress = Ingress::new(Options {
            tracing: Some(Arc::clone(&tracing)),
            ..Options::default()
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let serving = ingress.clone();
        tokio::spawn(async move {
            let _ = serving.serve(listener, std::future::pending::<()>()).await;
        });
        let (upstream, seen) = instance().await;

        // Scaled to zero: the instance is not ready until 400 ms after the request came.
        let mut table = support::one_route(upstream);
        table.routes[0].revisions[0].instances[0].ready = false;
        ingress.set_routes(&table).unwrap();
        let held = tokio::spawn(async move { get(address, &[]).await });
        tokio::time::sleep(Duration::from_millis(400)).await;
        table.routes[0].revisions[0].instances[0].ready = true;
        ingress.set_routes(&table).unwrap();
        assert_eq!(held.await.unwrap(), StatusCode::OK);

        // A caller's own trace: its context carried on, its state untouched.
        let caller_trace = "0af7651916cd43dd8448eb211c80319c";
        let caller_span = "b7ad6b7169203331";
        let traceparent = format!("00-{caller_trace}-{caller_span}-01");
        let status = get(
            address,
            &[
                ("traceparent", &traceparent),
                ("tracestate", "congo=t61rcWkgMzE"),
            ],
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        tracing.flush(Duration::from_secs(5));

        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "{seen:?}");
        // The first started a trace here: the instance got the call's span as its parent.
        let (first, _) = &seen[0];
        let parts: Vec<&str> = first.split('-').collect();
        assert_eq!(parts.len(), 4, "{first}");
        let (trace, call) = (parts[1], parts[2]);
        assert_eq!(parts[3], "01", "sampled");
        let spans = collector.trace(trace, 3);
        let request = named(&spans, "GET");
        let hold = named(&spans, "hold");
        let upstream_span = named(&spans, "upstream");
        assert_eq!(request["kind"], 2, "server: {request}");
        assert_eq!(upstream_span["kind"], 3, "client: {upstream_span}");
        assert_eq!(upstream_span["spanId"], call);
        for child in [hold, upstream_span] {
            assert_eq!(child["parentSpanId"], request["spanId"], "{child}");
        }
        let held_for = nanos(hold, "endTimeUnixNano") - nanos(hold, "startTimeUnixNano");
        assert!(
            (300_000_000..5_000_000_000).contains(&held_for),
            "held {held_for} ns"
        );
        assert!(
            nanos(upstream_span, "startTimeUnixNano") >= nanos(hold, "endTimeUnixNano"),
            "the call comes after the hold"
        );
        assert!(nanos(request, "endTimeUnixNano") >= nanos(upstream_span, "endTimeUnixNano"));
        let attributes = request["attributes"].to_string();
        for expected in [
            "runway.revision",
            "hello-1",
            "http.response.status_code",
            "/work",
        ] {
            assert!(attributes.contains(expected), "{expected}: {attributes}");
        }

        // The second is in the caller's trace, under the caller's span.
        let (second, state) = &seen[1];
        assert!(
            second.starts_with(&format!("00-{caller_trace}-")),
            "{second}"
        );
        assert!(
            !second.contains(caller_span),
            "the ingress's call is the parent"
        );
        assert_eq!(state, "congo=t61rcWkgMzE");
        let spans = collector.trace(caller_trace, 2);
        let request = named(&spans, "GET");
        assert_eq!(request["parentSpanId"], caller_span);
        assert!(
            spans.iter().all(|s| s["name"] != "hold"),
            "no hold when an instance was ready: {spans:#?}"
        );
    })
    .await
    .unwrap();
}
