//! The ingress over real loopback sockets, with small hyper servers as instances.

// Tests and benches keep time on tokio's runtimes, never on an event loop's.
#![allow(clippy::disallowed_methods)]
// The helpers below are test code too: a failing unwrap is a failing test.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use runway_ingress::{
    Ingress, InstanceConfig, Options, RevisionConfig, RouteConfig, RouteTableConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Every test is bounded.
const BOUND: Duration = Duration::from_secs(30);

/// A small instance: answers its name; `?sleep_ms=N` waits first, `?gather=N` waits for N
/// requests to have been in flight at once; counts concurrent requests.
struct Upstream {
    address: SocketAddr,
    active: Arc<AtomicUsize>,
    max_active: Arc<AtomicUsize>,
    served: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
    open: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn query_number(request: &Request<Incoming>, key: &str) -> u64 {
    request
        .uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix(key))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn upstream(name: &'static str) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let active = Arc::new(AtomicUsize::new(0));
    let max_active = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let connections = Arc::new(AtomicUsize::new(0));
    let open = Arc::new(AtomicUsize::new(0));
    let (a, m, s, c, o) = (
        active.clone(),
        max_active.clone(),
        served.clone(),
        connections.clone(),
        open.clone(),
    );
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            c.fetch_add(1, Ordering::SeqCst);
            o.fetch_add(1, Ordering::SeqCst);
            let (a, m, s, o) = (a.clone(), m.clone(), s.clone(), o.clone());
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let (a, m, s) = (a.clone(), m.clone(), s.clone());
                    async move {
                        let now = a.fetch_add(1, Ordering::SeqCst) + 1;
                        m.fetch_max(now, Ordering::SeqCst);
                        let sleep = query_number(&request, "sleep_ms=");
                        let gather = query_number(&request, "gather=");
                        let saw = |name: &str| {
                            request
                                .headers()
                                .get(name)
                                .map(|v| v.to_str().unwrap().to_owned())
                                .unwrap_or_default()
                        };
                        let (forwarded, host, id) =
                            (saw("x-forwarded-for"), saw("host"), saw("x-request-id"));
                        let tag_header = saw("runway-tag") + &saw("x-pick");
                        // Read the whole body first, as an application does.
                        let received = request
                            .into_body()
                            .collect()
                            .await
                            .map_or(0, |b| b.to_bytes().len());
                        tokio::time::sleep(Duration::from_millis(sleep)).await;
                        // `?gather=N` holds the request until N have been in flight at once
                        // (or 5 s pass), so a test of concurrency does not race the clock.
                        for _ in 0..500 {
                            if m.load(Ordering::SeqCst) as u64 >= gather {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        a.fetch_sub(1, Ordering::SeqCst);
                        s.fetch_add(1, Ordering::SeqCst);
                        let mut response = Response::new(Full::new(Bytes::from(name)));
                        let headers = response.headers_mut();
                        headers.insert("x-saw-forwarded-for", forwarded.parse().unwrap());
                        headers.insert("x-saw-host", host.parse().unwrap());
                        headers.insert("x-saw-request-id", id.parse().unwrap());
                        headers.insert("x-saw-body-bytes", received.into());
                        headers.insert("x-saw-tag-header", tag_header.parse().unwrap());
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                o.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Upstream {
        address,
        active,
        max_active,
        served,
        connections,
        open,
        task,
    }
}

/// A running ingress; stops (gracefully) on drop.
struct Running {
    ingress: Ingress,
    address: SocketAddr,
    admin: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn start(ingress: Ingress) -> Running {
    start_with(ingress, Serving::SharedRuntime).await
}

/// Where a test's ingress serves clients from.
#[derive(Debug, Clone, Copy)]
enum Serving {
    /// The test's own (multi-threaded) runtime, as `--event-loops 0` does.
    SharedRuntime,
    /// One event loop of its own, as the daemon does by default: the ingress keeps its
    /// deadlines (request and head-read timeouts) itself there.
    EventLoop,
}

async fn start_with(ingress: Ingress, serving: Serving) -> Running {
    // The port is bound with SO_REUSEPORT. The event loop binds its own socket on it: until
    // that one listens, this one holds the port bound but not listening (so it gets no
    // connections), and no other test's bind can take the port in between.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_reuseport(true).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let address = socket.local_addr().unwrap();
    let (listener, reserved) = match serving {
        Serving::SharedRuntime => (Some(socket.listen(1024).unwrap()), None),
        Serving::EventLoop => (None, Some(socket)),
    };
    let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = admin_listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let served = ingress.clone();
    tokio::spawn(async move {
        let (admin_stop, admin_stopped) = oneshot::channel::<()>();
        let admin_ingress = served.clone();
        tokio::spawn(async move {
            let _ = admin_ingress
                .serve_admin(admin_listener, async {
                    let _ = admin_stopped.await;
                })
                .await;
        });
        match listener {
            Some(listener) => {
                let _ = served
                    .serve(listener, async {
                        let _ = stopped.await;
                    })
                    .await;
            }
            None => {
                let (loop_stop, loop_stopped) = tokio::sync::watch::channel(false);
                let listeners = [runway_ingress::server::LoopListener { address, tls: None }];
                let serving = tokio::spawn(async move {
                    served.serve_event_loops(&listeners, 1, loop_stopped).await
                });
                let _ = stopped.await;
                let _ = loop_stop.send(true);
                let _ = serving.await;
            }
        }
        let _ = admin_stop.send(());
    });
    if let Some(reserved) = reserved {
        let listening = async {
            while TcpStream::connect(address).await.is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), listening)
            .await
            .expect("the event loop listens within 10 s");
        drop(reserved);
    }
    Running {
        ingress,
        address,
        admin,
        stop: Some(stop),
    }
}

/// The table most tests serve: `hello-1` with all the traffic, on one ready instance at
/// `address` with no concurrency limit.
fn one_revision(address: SocketAddr) -> RouteTableConfig {
    one_revision_timed(address, 5.0)
}

/// [`one_revision`] with a request timeout of `timeout` seconds.
fn one_revision_timed(address: SocketAddr, timeout: f64) -> RouteTableConfig {
    table(
        timeout,
        vec![revision("hello-1", 100, vec![instance(address, true, 0)])],
    )
}

/// TLS for `ingress` from a local certificate authority of its own, made in a new directory
/// (held by the caller as long as the authority is used), and that authority's PEM.
fn local_tls(ingress: &Ingress) -> (tempfile::TempDir, runway_ingress::Tls, String) {
    let dir = tempfile::tempdir().unwrap();
    let tls = ingress
        .tls(&runway_ingress::TlsOptions {
            ca_dir: Some(dir.path().join("ca")),
            certificates: vec![],
        })
        .unwrap();
    let ca_pem = tls.ca_pem().unwrap().to_owned();
    (dir, tls, ca_pem)
}

/// Serves `ingress` over TLS on a port of its own until `stop` is sent; the task gives the
/// server's result.
async fn serve_tls(
    ingress: &Ingress,
    tls: runway_ingress::Tls,
) -> (
    SocketAddr,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let ingress = ingress.clone();
    let server = tokio::spawn(async move {
        ingress
            .serve_tls(listener, &tls, async {
                let _ = stopped.await;
            })
            .await
    });
    (address, stop, server)
}

fn instance(address: SocketAddr, ready: bool, max_concurrency: u32) -> InstanceConfig {
    InstanceConfig {
        address,
        ready,
        draining: false,
        max_concurrency,
    }
}

fn revision(name: &str, weight: u32, instances: Vec<InstanceConfig>) -> RevisionConfig {
    RevisionConfig {
        name: name.to_owned(),
        weight,
        tag: None,
        average_start_seconds: None,
        protocol: runway_ingress::config::Protocol::Http1,
        failing: false,
        instances,
    }
}

fn table(timeout: f64, revisions: Vec<RevisionConfig>) -> RouteTableConfig {
    RouteTableConfig {
        domain: "localhost".to_owned(),
        environments: Vec::new(),
        routes: vec![RouteConfig {
            service: "hello".to_owned(),
            env: "dev".to_owned(),
            domains: vec!["hello.example.test".to_owned()],
            request_timeout_seconds: timeout,
            sticky: false,
            revisions,
            cells: None,
            public: true,
            private: false,
            callers: Vec::new(),
            cloudflare: false,
            tag_header: None,
            controls: Default::default(),
        }],
        ..RouteTableConfig::default()
    }
}

const HOST: &str = "hello.dev.localhost";

/// One GET over a new HTTP/1.1 connection: status, headers and body.
async fn get(address: SocketAddr, host: &str, path: &str) -> (StatusCode, http::HeaderMap, String) {
    send_one(address, Request::get(path).header("host", host)).await
}

/// One request, without a body, on a new HTTP/1.1 connection: its status, headers and body.
async fn send_one(
    address: SocketAddr,
    request: http::request::Builder,
) -> (StatusCode, http::HeaderMap, String) {
    let stream = TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = request.body(Empty::<Bytes>::new()).unwrap();
    let response = sender.send_request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

async fn metrics(running: &Running) -> String {
    get(running.admin, "admin", "/metrics").await.2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_by_host_and_weight_with_request_ids_and_metrics() {
    tokio::time::timeout(BOUND, async {
        let (blue, green) = (upstream("blue").await, upstream("green").await);
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("access.log");
        let log = tokio::fs::File::create(&log_path).await.unwrap();
        let running = start(Ingress::with_access_log(Options::default(), log)).await;
        let mut config = table(
            5.0,
            vec![
                revision("hello-1", 70, vec![instance(blue.address, true, 0)]),
                revision("hello-2", 30, vec![instance(green.address, true, 0)]),
            ],
        );
        config.routes[0].revisions[1].tag = Some("canary".to_owned());
        running.ingress.set_routes(&config).unwrap();

        let mut counts: HashMap<String, usize> = HashMap::new();
        let n = 1000;
        for _ in 0..n {
            let (status, headers, body) = get(running.address, HOST, "/").await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(headers["x-request-id"].len(), 32);
            assert_eq!(headers["x-saw-forwarded-for"], "127.0.0.1");
            *counts.entry(body).or_default() += 1;
        }
        // 70 % of 1000: σ ≈ 14.5, so ±75 is past five sigmas.
        let blue_count = counts.get("blue").copied().unwrap_or(0);
        assert!((625..=775).contains(&blue_count), "{counts:?}");
        assert_eq!(blue_count + counts.get("green").copied().unwrap_or(0), n);
        // One request at a time: one keep-alive connection per instance serves them all.
        assert_eq!(blue.connections.load(Ordering::SeqCst), 1);
        assert_eq!(green.connections.load(Ordering::SeqCst), 1);

        // A tag host reaches its revision only; a custom domain and a port work; x-request-id
        // given is kept.
        for _ in 0..20 {
            let (_, _, body) = get(running.address, "canary---hello.dev.localhost:80", "/").await;
            assert_eq!(body, "green");
        }
        let (status, _, _) = get(running.address, "HELLO.example.test", "/").await;
        assert_eq!(status, StatusCode::OK);
        let given_id = Request::get("/")
            .header("host", HOST)
            .header("x-request-id", "abc-123");
        let (_, headers, _) = send_one(running.address, given_id).await;
        assert_eq!(headers["x-request-id"], "abc-123");
        assert_eq!(headers["x-saw-request-id"], "abc-123");
        // `Connection` naming them does not keep `Host` or the id from the instance.
        let naming_them = Request::get("/")
            .header("host", HOST)
            .header("x-request-id", "abc-456")
            .header("connection", "host, x-request-id");
        let (_, headers, _) = send_one(running.address, naming_them).await;
        assert_eq!(headers["x-saw-host"], HOST);
        assert_eq!(headers["x-saw-request-id"], "abc-456");

        // No route: 404 with a short body naming nothing internal.
        let (status, headers, body) = get(running.address, "nope.dev.localhost", "/").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body.starts_with("no service has this name"), "{body}");
        assert!(headers.contains_key("x-request-id"));

        let text = metrics(&running).await;
        assert!(
            text.contains(
                r#"runway_ingress_requests_total{service="hello",env="dev",revision="hello-1",class="2xx"}"#
            ),
            "{text}"
        );
        assert!(text.contains("runway_ingress_request_duration_seconds_bucket"));
        assert!(text.contains("runway_ingress_unrouted_requests_total 1"));

        // The access log has one JSON line per request, the 404 included.
        let mut lines = Vec::new();
        for _ in 0..100 {
            let text = tokio::fs::read_to_string(&log_path).await.unwrap();
            lines = text.lines().map(str::to_owned).collect();
            if lines.len() >= n + 24 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(lines.len(), n + 24);
        let first: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(first["service"], "hello");
        assert_eq!(first["status"], 200);
        let bytes = if first["revision"] == "hello-1" { 4 } else { 5 };
        assert_eq!(first["bytes"], bytes);
        let unrouted: Vec<serde_json::Value> = lines
            .iter()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|l| l["status"] == 404)
            .collect();
        assert_eq!(unrouted.len(), 1);
        assert_eq!(unrouted[0]["host"], "nope.dev.localhost");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_is_served_once_an_instance_is_ready() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("late").await;
        let options = Options {
            min_hold: Duration::from_millis(600),
            ..Options::default()
        };
        let running = start(Ingress::new(options)).await;
        let cold = table(
            5.0,
            vec![revision(
                "hello-1",
                100,
                vec![instance(up.address, false, 0)],
            )],
        );
        running.ingress.set_routes(&cold).unwrap();
        let mut signals = running.ingress.subscribe_scale_up();

        // Nothing becomes ready: 503 after the hold, with a clear body.
        let started = Instant::now();
        let (status, headers, body) = get(running.address, HOST, "/").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "no instance of this service became ready in time\n");
        assert_eq!(headers["retry-after"], "1");
        assert!(started.elapsed() >= Duration::from_millis(600));
        assert_eq!(signals.recv().await.unwrap().revision, "hello-1");

        // The instance becomes ready while the request is held.
        let address = running.address;
        let held = tokio::spawn(async move { get(address, HOST, "/").await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(metrics(&running).await.contains(
            r#"runway_ingress_held_requests{service="hello",env="dev",revision="hello-1"} 1"#
        ));
        assert_eq!(signals.recv().await.unwrap().revision, "hello-1");
        let warm = one_revision(up.address);
        running.ingress.set_routes(&warm).unwrap();
        let (status, _, body) = held.await.unwrap();
        assert_eq!((status, body.as_str()), (StatusCode::OK, "late"));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_revision_and_a_service_with_none_serving_get_a_503_at_once() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("late").await;
        // A hold far longer than the test: an answer within it was not held.
        let options = Options {
            min_hold: Duration::from_secs(60),
            ..Options::default()
        };
        let running = start(Ingress::new(options)).await;
        // hello-1 with its one instance, ready or not, marked failing or not.
        let hello = |ready: bool, failing: bool| {
            let mut revision = revision("hello-1", 100, vec![instance(up.address, ready, 0)]);
            revision.failing = failing;
            table(5.0, vec![revision])
        };

        // A known service with no revision serving: a 503 that says so, not a 404.
        running.ingress.set_routes(&table(5.0, Vec::new())).unwrap();
        let (status, _, body) = get(running.address, HOST, "/").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body.starts_with("this service has no revision serving yet"),
            "{body}"
        );
        let (status, _, _) = get(running.address, "nope.dev.localhost", "/").await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        // A revision whose instances fail to start: a 503 at once, not after the hold.
        running.ingress.set_routes(&hello(false, true)).unwrap();
        let started = Instant::now();
        let (status, _, body) = get(running.address, HOST, "/").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body.starts_with("this service's revision fails to start"),
            "{body}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));

        // A request held for a revision that starts failing meanwhile is answered then.
        running.ingress.set_routes(&hello(false, false)).unwrap();
        let address = running.address;
        let held = tokio::spawn(async move { get(address, HOST, "/").await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!held.is_finished());
        running.ingress.set_routes(&hello(false, true)).unwrap();
        let (status, _, _) = held.await.unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

        // Once an instance is ready, it serves, whatever the flag says.
        running.ingress.set_routes(&hello(true, true)).unwrap();
        let (status, _, body) = get(running.address, HOST, "/").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "late"));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_instance_gets_504_after_the_request_timeout() {
    slow_instance_gets_504(Serving::SharedRuntime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_instance_gets_504_after_the_request_timeout_on_an_event_loop() {
    slow_instance_gets_504(Serving::EventLoop).await;
}

async fn slow_instance_gets_504(serving: Serving) {
    tokio::time::timeout(BOUND, async {
        let up = upstream("slow").await;
        let running = start_with(Ingress::new(Options::default()), serving).await;
        let config = one_revision_timed(up.address, 0.3);
        running.ingress.set_routes(&config).unwrap();
        let started = Instant::now();
        let (status, _, body) = get(running.address, HOST, "/?sleep_ms=3000").await;
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(body, "service did not answer in time\n");
        assert!(started.elapsed() < Duration::from_secs(2));
        // The instance's slot was given back.
        let (status, _, _) = get(running.address, HOST, "/").await;
        assert_eq!(status, StatusCode::OK);
    })
    .await
    .unwrap();
}

/// A client that goes away while its request is at an instance cancels the request there: the
/// ingress closes its connection to the instance at once (an HTTP/1.1 connection cannot drop a
/// request and go on), rather than holding the instance's slot until the request timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_cancels_its_request() {
    client_goes_away(Serving::SharedRuntime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_cancels_its_request_on_an_event_loop() {
    client_goes_away(Serving::EventLoop).await;
}

async fn client_goes_away(serving: Serving) {
    tokio::time::timeout(BOUND, async {
        let up = upstream("slow").await;
        let running = start_with(Ingress::new(Options::default()), serving).await;
        // A request timeout far past what the test waits for.
        let config = one_revision_timed(up.address, 60.0);
        running.ingress.set_routes(&config).unwrap();
        let mut client = TcpStream::connect(running.address).await.unwrap();
        let request = format!("GET /?sleep_ms=60000 HTTP/1.1\r\nhost: {HOST}\r\n\r\n");
        client.write_all(request.as_bytes()).await.unwrap();
        while up.active.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(up.open.load(Ordering::SeqCst), 1);
        let gone = Instant::now();
        drop(client);
        while up.open.load(Ordering::SeqCst) > 0 {
            assert!(
                gone.elapsed() < Duration::from_secs(5),
                "the instance's connection is still open 5 s after its client went away"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limits_queue_and_never_overload_an_instance() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("limited").await;
        let running = start(Ingress::new(Options::default())).await;
        let config = table(
            10.0,
            vec![revision(
                "hello-1",
                100,
                vec![instance(up.address, true, 2)],
            )],
        );
        running.ingress.set_routes(&config).unwrap();
        let address = running.address;
        let tasks: Vec<_> = (0..10)
            .map(|_| tokio::spawn(async move { get(address, HOST, "/?sleep_ms=100").await.0 }))
            .collect();
        for task in tasks {
            assert_eq!(task.await.unwrap(), StatusCode::OK);
        }
        assert_eq!(up.max_active.load(Ordering::SeqCst), 2);
        assert_eq!(up.served.load(Ordering::SeqCst), 10);

        // A full queue answers 503 at once rather than waiting.
        let options = Options {
            max_queued_per_revision: 2,
            ..Options::default()
        };
        let small = start(Ingress::new(options)).await;
        let one = table(
            10.0,
            vec![revision(
                "hello-1",
                100,
                vec![instance(up.address, true, 1)],
            )],
        );
        small.ingress.set_routes(&one).unwrap();
        let address = small.address;
        let tasks: Vec<_> = (0..6)
            .map(|_| tokio::spawn(async move { get(address, HOST, "/?sleep_ms=300").await }))
            .collect();
        let mut statuses = Vec::new();
        for task in tasks {
            let (status, _, body) = task.await.unwrap();
            if status == StatusCode::SERVICE_UNAVAILABLE {
                assert_eq!(body, "service is overloaded, retry later\n");
            }
            statuses.push(status);
        }
        let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
        assert_eq!(ok, 3, "{statuses:?}");
        assert_eq!(up.active.load(Ordering::SeqCst), 0);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_instance_finishes_its_requests_and_gets_no_new_ones() {
    tokio::time::timeout(BOUND, async {
        let (old, new) = (upstream("old").await, upstream("new").await);
        let running = start(Ingress::new(Options::default())).await;
        let config = table(
            10.0,
            vec![revision(
                "hello-1",
                100,
                vec![instance(old.address, true, 0)],
            )],
        );
        running.ingress.set_routes(&config).unwrap();
        let address = running.address;
        let slow = tokio::spawn(async move { get(address, HOST, "/?sleep_ms=500").await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(old.active.load(Ordering::SeqCst), 1);

        // The new instance joins, then the old one drains.
        let both = table(
            10.0,
            vec![revision(
                "hello-1",
                100,
                vec![
                    instance(old.address, true, 0),
                    instance(new.address, true, 0),
                ],
            )],
        );
        running.ingress.set_routes(&both).unwrap();
        let ingress = running.ingress.clone();
        let old_address = old.address;
        let drained =
            tokio::spawn(async move { ingress.drain(old_address, Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        for _ in 0..20 {
            assert_eq!(get(running.address, HOST, "/").await.2, "new");
        }
        let (status, _, body) = slow.await.unwrap();
        assert_eq!((status, body.as_str()), (StatusCode::OK, "old"));
        assert!(drained.await.unwrap());
        assert_eq!(
            running.ingress.instance(old.address).unwrap().in_flight(),
            0
        );
        // Its keep-alive connections are closed, the busy one once its response ended.
        for _ in 0..100 {
            if old.open.load(Ordering::SeqCst) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(old.open.load(Ordering::SeqCst), 0);
        assert!(new.open.load(Ordering::SeqCst) >= 1);

        // A drain past its grace says so.
        let slow = tokio::spawn(async move { get(address, HOST, "/?sleep_ms=800").await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !running
                .ingress
                .drain(new.address, Duration::from_millis(100))
                .await
        );
        assert_eq!(slow.await.unwrap().0, StatusCode::OK);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_retried_once_on_another_instance() {
    tokio::time::timeout(BOUND, async {
        let live = upstream("live").await;
        let dead = {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            listener.local_addr().unwrap()
        };
        let running = start(Ingress::new(Options::default())).await;
        let config = table(
            5.0,
            vec![revision(
                "hello-1",
                100,
                vec![instance(dead, true, 0), instance(live.address, true, 0)],
            )],
        );
        running.ingress.set_routes(&config).unwrap();
        for _ in 0..30 {
            let (status, _, body) = get(running.address, HOST, "/").await;
            assert_eq!((status, body.as_str()), (StatusCode::OK, "live"));
        }
        // After a few failures in a row the dead instance is ejected: no more tries on it.
        assert!(running.ingress.instance(dead).unwrap().is_ejected());
        let text = metrics(&running).await;
        let errors: u32 = text
            .lines()
            .find(|l| l.starts_with("runway_ingress_upstream_connect_errors_total{"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert_eq!(errors, runway_ingress::table::EJECT_AFTER);
        // Ejection never leaves a revision with nothing: an ejected instance alone is tried.
        let only_dead = one_revision(dead);
        running.ingress.set_routes(&only_dead).unwrap();
        let (status, _, body) = get(running.address, HOST, "/").await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert_eq!(body, "service failed to answer\n");
        assert!(metrics(&running).await.contains(
            r#"runway_ingress_upstream_connect_errors_total{service="hello",env="dev",revision="hello-1"}"#
        ));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_breaks_connections_gets_502_and_is_ejected() {
    tokio::time::timeout(BOUND, async {
        let live = upstream("live").await;
        // Reads a request head, then closes the connection without an answer.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let broken = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&accepted);
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer).await;
            }
        });
        let running = start(Ingress::new(Options::default())).await;
        let only_broken = one_revision(broken);
        running.ingress.set_routes(&only_broken).unwrap();
        // The request reached the instance: it is not retried (it may have had effects).
        for _ in 0..runway_ingress::table::EJECT_AFTER {
            let (status, _, body) = get(running.address, HOST, "/").await;
            assert_eq!((status, body.as_str()), (StatusCode::BAD_GATEWAY, "service failed to answer\n"));
        }
        assert_eq!(accepted.load(Ordering::SeqCst), runway_ingress::table::EJECT_AFTER as usize);
        assert!(running.ingress.instance(broken).unwrap().is_ejected());
        assert!(metrics(&running).await.contains(&format!(
            "runway_ingress_upstream_errors_total{{service=\"hello\",env=\"dev\",revision=\"hello-1\"}} {}",
            runway_ingress::table::EJECT_AFTER
        )));
        // Beside a live instance, the ejected one gets no requests.
        let both = table(
            5.0,
            vec![revision("hello-1", 100, vec![instance(broken, true, 0), instance(live.address, true, 0)])],
        );
        running.ingress.set_routes(&both).unwrap();
        for _ in 0..20 {
            let (status, _, body) = get(running.address, HOST, "/").await;
            assert_eq!((status, body.as_str()), (StatusCode::OK, "live"));
        }
        assert_eq!(accepted.load(Ordering::SeqCst), runway_ingress::table::EJECT_AFTER as usize);
        task.abort();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_that_stops_answering_pings_is_disconnected() {
    tokio::time::timeout(BOUND, async {
        let running = start(Ingress::new(Options {
            http2_ping: Duration::from_millis(200),
            ..Options::default()
        }))
        .await;
        let mut stream = TcpStream::connect(running.address).await.unwrap();
        // A client preface and its SETTINGS, then silence: nothing acknowledged, no PING answered.
        stream
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
            .await
            .unwrap();
        let mut out = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await;
        assert!(closed.is_ok(), "the connection was still open after 5 s");
        assert!(
            h2_frame_types(&out).contains(&PING),
            "{:?}",
            h2_frame_types(&out)
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_loops_share_one_port_and_stop_on_shutdown() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("looped").await;
        let ingress = Ingress::new(Options::default());
        let config = one_revision(up.address);
        ingress.set_routes(&config).unwrap();
        let address = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let served = ingress.clone();
        let server = tokio::spawn(async move {
            let listener = runway_ingress::server::LoopListener { address, tls: None };
            served.serve_event_loops(&[listener], 2, stopped).await
        });
        let mut ready = false;
        for _ in 0..100 {
            if TcpStream::connect(address).await.is_ok() {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(ready, "nothing listens on {address}");
        // Many connections at once: the kernel spreads them over the loops; all are served.
        let tasks: Vec<_> = (0..40)
            .map(|_| tokio::spawn(async move { get(address, HOST, "/").await }))
            .collect();
        for task in tasks {
            let (status, _, body) = task.await.unwrap();
            assert_eq!((status, body.as_str()), (StatusCode::OK, "looped"));
        }
        // A second server cannot take the port from under it without SO_REUSEPORT.
        assert!(std::net::TcpListener::bind(address).is_err());
        stop.send(true).unwrap();
        server.await.unwrap().unwrap();
        assert!(TcpStream::connect(address).await.is_err());
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_table_swaps_under_load_drop_nothing() {
    tokio::time::timeout(BOUND, async {
        let (blue, green) = (upstream("blue").await, upstream("green").await);
        let running = start(Ingress::new(Options::default())).await;
        let both = |blue_weight: u32| {
            table(
                5.0,
                vec![
                    revision(
                        "hello-1",
                        blue_weight,
                        vec![instance(blue.address, true, 0)],
                    ),
                    revision(
                        "hello-2",
                        100 - blue_weight,
                        vec![instance(green.address, true, 0)],
                    ),
                ],
            )
        };
        running.ingress.set_routes(&both(100)).unwrap();
        // Eight clients, each on one keep-alive connection, with a 20 ms request always in
        // flight somewhere, while the table is replaced 200 times: weights shift, a revision
        // comes and goes, the domain list changes.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let clients: Vec<_> = (0..8)
            .map(|_| {
                let stop = Arc::clone(&stop);
                let address = running.address;
                tokio::spawn(async move {
                    let stream = TcpStream::connect(address).await.unwrap();
                    let (mut sender, connection) =
                        hyper::client::conn::http1::handshake(TokioIo::new(stream))
                            .await
                            .unwrap();
                    tokio::spawn(connection);
                    let mut seen: HashMap<String, usize> = HashMap::new();
                    while !stop.load(Ordering::SeqCst) {
                        let request = Request::get("/?sleep_ms=20")
                            .header("host", HOST)
                            .body(Empty::<Bytes>::new())
                            .unwrap();
                        let response = sender.send_request(request).await.unwrap();
                        let status = response.status();
                        let body = response.into_body().collect().await.unwrap().to_bytes();
                        // The body says which refusal it was, should one come.
                        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
                        *seen
                            .entry(String::from_utf8_lossy(&body).into_owned())
                            .or_default() += 1;
                    }
                    seen
                })
            })
            .collect();
        for step in 0..200u32 {
            let mut config = match step % 4 {
                0 => both(100),
                1 => both(50),
                2 => table(
                    5.0,
                    vec![revision(
                        "hello-2",
                        100,
                        vec![instance(green.address, true, 0)],
                    )],
                ),
                _ => both(0),
            };
            if step % 2 == 0 {
                config.routes[0]
                    .domains
                    .push(format!("extra-{step}.example.test"));
            }
            running.ingress.set_routes(&config).unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stop.store(true, Ordering::SeqCst);
        let mut total: HashMap<String, usize> = HashMap::new();
        for client in clients {
            for (body, count) in client.await.unwrap() {
                *total.entry(body).or_default() += count;
            }
        }
        // Every request answered 200 by one of the two (asserted in the clients), both served.
        assert!(total.get("blue").is_some_and(|&n| n > 0), "{total:?}");
        assert!(total.get("green").is_some_and(|&n| n > 0), "{total:?}");
        // An instance listed in every table kept its connections across the swaps (one per
        // client at most); blue's revision left the table and came back 50 times, and each
        // time its connections were closed as a drained instance's are.
        assert!(green.connections.load(Ordering::SeqCst) <= 8);
    })
    .await
    .unwrap();
}

/// An instance that answers in HTTP/1.0 is still answered to an HTTP/1.1 client in HTTP/1.1:
/// the ingress speaks its own version to its clients, as nginx does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_1_0_answer_reaches_an_http_1_1_client_as_http_1_1() {
    tokio::time::timeout(BOUND, async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let old = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer).await;
                let _ = stream
                    .write_all(b"HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\nold")
                    .await;
            }
        });
        let running = start(Ingress::new(Options::default())).await;
        running.ingress.set_routes(&one_revision(old)).unwrap();
        let answer = raw(
            running.address,
            format!("GET / HTTP/1.1\r\nhost: {HOST}\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nold"), "{answer}");
        task.abort();
    })
    .await
    .unwrap();
}

/// Sends raw bytes and reads until the ingress answers or closes; returns what it sent.
async fn raw(address: SocketAddr, bytes: &[u8]) -> String {
    String::from_utf8_lossy(&raw_bytes(address, bytes).await).into_owned()
}

async fn raw_bytes(address: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(address).await.unwrap();
    // The peer may close before reading it all: that is an answer too.
    let _ = stream.write_all(bytes).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await;
    out
}

const PING: u8 = 6;
const GOAWAY: u8 = 7;

/// The types of the HTTP/2 frames in what a server sent.
fn h2_frame_types(mut bytes: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    while bytes.len() >= 9 {
        let length =
            usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
        types.push(bytes[3]);
        bytes = &bytes[(9 + length).min(bytes.len())..];
    }
    types
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_4xx_or_a_closed_connection() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("fine").await;
        let options = Options {
            max_body_bytes: 1024,
            max_header_bytes: 8192,
            ..Options::default()
        };
        let running = start(Ingress::new(options)).await;
        let config = one_revision(up.address);
        running.ingress.set_routes(&config).unwrap();
        let a = running.address;

        let four = |answer: &str| answer.is_empty() || answer.starts_with("HTTP/1.1 4");
        let garbage = raw(a, b"GARBAGE\r\n\r\n").await;
        assert!(four(&garbage), "{garbage}");
        let bad_header = raw(a, b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n").await;
        assert!(four(&bad_header), "{bad_header}");
        let huge = format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nX-Big: {}\r\n\r\n", "a".repeat(20_000));
        let huge = raw(a, huge.as_bytes()).await;
        assert!(four(&huge), "{huge}");
        let no_host = raw(a, b"GET / HTTP/1.0\r\n\r\n").await;
        assert!(no_host.starts_with("HTTP/1.0 400") || no_host.starts_with("HTTP/1.1 400"), "{no_host}");
        let body = format!(
            "POST / HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 5000\r\nConnection: close\r\n\r\n{}",
            "b".repeat(5000)
        );
        let body = raw(a, body.as_bytes()).await;
        assert!(body.starts_with("HTTP/1.1 413"), "{body}");
        // A streamed (chunked) body that goes past the limit: 413 too, and the instance is
        // not blamed for it.
        let chunk = format!("400\r\n{}\r\n", "c".repeat(0x400));
        let chunked = format!(
            "POST / HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{}0\r\n\r\n",
            chunk.repeat(5)
        );
        let chunked = raw(a, chunked.as_bytes()).await;
        assert!(chunked.starts_with("HTTP/1.1 413"), "{chunked}");
        assert!(!running.ingress.instance(up.address).unwrap().is_ejected());
        let within = format!(
            "POST / HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{chunk}0\r\n\r\n"
        );
        let within = raw(a, within.as_bytes()).await;
        assert!(within.starts_with("HTTP/1.1 200"), "{within}");
        assert!(within.to_ascii_lowercase().contains("x-saw-body-bytes: 1024"), "{within}");
        let bad_length = raw(a, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n").await;
        assert!(four(&bad_length), "{bad_length}");
        // The HTTP/2 preface followed by invalid frames: a SETTINGS frame of a wrong length; a
        // HEADERS frame on stream 0; a frame too long for the peer's limit; garbage. The
        // ingress ends the connection with GOAWAY (or closes it).
        const SETTINGS: [u8; 9] = [0, 0, 0, 4, 0, 0, 0, 0, 0];
        let invalid: [&[u8]; 4] = [
            &[0, 0, 5, 4, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5],
            &[SETTINGS.as_slice(), &[0, 0, 1, 1, 4, 0, 0, 0, 0, 0x82]].concat(),
            &[SETTINGS.as_slice(), &[0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 1]].concat(),
            &[0xff; 64],
        ];
        for frames in invalid {
            let mut h2 = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
            h2.extend_from_slice(frames);
            let answer = raw_bytes(a, &h2).await;
            let types = h2_frame_types(&answer);
            assert!(answer.is_empty() || types.contains(&GOAWAY), "{types:?}");
        }

        // Still serving.
        let (status, _, body) = get(a, HOST, "/").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "fine"));
    })
    .await
    .unwrap();
}

/// An instance that switches to an echo protocol on `Upgrade: echo` (as WebSocket does).
async fn echo_upstream() -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let service = service_fn(|mut request: Request<Incoming>| async move {
                    assert_eq!(request.headers()["upgrade"], "echo");
                    let upgrade = hyper::upgrade::on(&mut request);
                    tokio::spawn(async move {
                        let mut io = TokioIo::new(upgrade.await.unwrap());
                        let mut buffer = [0u8; 1024];
                        loop {
                            match io.read(&mut buffer).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => io.write_all(&buffer[..n]).await.unwrap(),
                            }
                        }
                    });
                    let response = Response::builder()
                        .status(StatusCode::SWITCHING_PROTOCOLS)
                        .header("connection", "upgrade")
                        .header("upgrade", "echo")
                        .body(Empty::<Bytes>::new())
                        .unwrap();
                    Ok::<_, Infallible>(response)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades()
                    .await;
            });
        }
    });
    (address, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_becomes_a_tunnel_held_as_one_request() {
    tokio::time::timeout(BOUND, async {
        let (address, task) = echo_upstream().await;
        let running = start(Ingress::new(Options::default())).await;
        let config = one_revision(address);
        running.ingress.set_routes(&config).unwrap();

        let mut stream = TcpStream::connect(running.address).await.unwrap();
        let head = format!(
            "GET /chat HTTP/1.1\r\nHost: {HOST}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let mut byte = [0u8; 1];
        while !answer.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut byte).await.unwrap();
            answer.push(byte[0]);
        }
        let answer = String::from_utf8(answer).unwrap().to_ascii_lowercase();
        assert!(answer.starts_with("http/1.1 101"), "{answer}");
        assert!(answer.contains("upgrade: echo"), "{answer}");
        let instance = running.ingress.instance(address).unwrap();
        for message in ["ping", "a longer message"] {
            stream.write_all(message.as_bytes()).await.unwrap();
            let mut back = vec![0u8; message.len()];
            stream.read_exact(&mut back).await.unwrap();
            assert_eq!(back, message.as_bytes());
        }
        assert_eq!(instance.in_flight(), 1);
        drop(stream);
        for _ in 0..100 {
            if instance.in_flight() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(instance.in_flight(), 0);
        task.abort();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_clients_are_served_over_h2c() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("h2").await;
        let running = start(Ingress::new(Options::default())).await;
        let config = one_revision(up.address);
        running.ingress.set_routes(&config).unwrap();
        let stream = TcpStream::connect(running.address).await.unwrap();
        let (sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            TokioIo::new(stream),
        )
        .await
        .unwrap();
        tokio::spawn(connection);
        // Many streams on one connection at once.
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let mut sender = sender.clone();
                tokio::spawn(async move {
                    let request = Request::get(format!("http://{HOST}/?gather=20"))
                        .body(Empty::<Bytes>::new())
                        .unwrap();
                    let response = sender.send_request(request).await.unwrap();
                    assert_eq!(response.version(), http::Version::HTTP_2);
                    let status = response.status();
                    let body = response.into_body().collect().await.unwrap().to_bytes();
                    (status, body)
                })
            })
            .collect();
        for task in tasks {
            let (status, body) = task.await.unwrap();
            assert_eq!(status, StatusCode::OK);
            assert_eq!(&body[..], b"h2");
        }
        assert_eq!(up.max_active.load(Ordering::SeqCst), 20);
    })
    .await
    .unwrap();
}

/// A TLS connection to the ingress for `name`, trusting `ca_pem`, that speaks HTTP/1.1 (its
/// ALPN offer: what a client must have agreed to before it sends HTTP/1.1).
async fn tls_connect(
    address: SocketAddr,
    ca_pem: &str,
    name: &str,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    tls_connect_offering(address, ca_pem, name, &[b"http/1.1"]).await
}

/// [`tls_connect`], offering HTTP/2 first, as browsers do.
async fn tls_connect_h2(
    address: SocketAddr,
    ca_pem: &str,
    name: &str,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    tls_connect_offering(address, ca_pem, name, &[b"h2", b"http/1.1"]).await
}

async fn tls_connect_offering(
    address: SocketAddr,
    ca_pem: &str,
    name: &str,
    alpn: &[&[u8]],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let stream = TcpStream::connect(address).await?;
    let name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
    connector.connect(name, stream).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_sni_from_the_local_ca_and_a_redirect_from_http() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("secure").await;
        let running = start(Ingress::new(Options::default())).await;
        let config = one_revision(up.address);
        running.ingress.set_routes(&config).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let options = runway_ingress::TlsOptions {
            ca_dir: Some(dir.path().join("ca")),
            certificates: vec![],
        };
        let tls = running.ingress.tls(&options).unwrap();
        let ca_pem = tls.ca_pem().unwrap().to_owned();
        // The authority is made once and read again afterwards.
        let again = running.ingress.tls(&options).unwrap();
        assert_eq!(again.ca_pem().unwrap(), ca_pem);

        let (address, stop, server) = serve_tls(&running.ingress, tls).await;

        // HTTP/2 by ALPN, to a host the table serves.
        let stream = tls_connect_h2(address, &ca_pem, HOST).await.unwrap();
        assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (mut sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            TokioIo::new(stream),
        )
        .await
        .unwrap();
        tokio::spawn(connection);
        let response = sender
            .send_request(
                Request::get(format!("https://{HOST}/"))
                    .body(Empty::<Bytes>::new())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"secure");

        // A name of the platform's that no route serves (a typo, a service not deployed yet)
        // completes the handshake with its parent's wildcard and gets an HTTP 404 saying so,
        // not a TLS alert that reads as a certificate problem.
        let stream = tls_connect_h2(address, &ca_pem, "other.dev.localhost")
            .await
            .unwrap();
        let (mut sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            TokioIo::new(stream),
        )
        .await
        .unwrap();
        tokio::spawn(connection);
        let response = sender
            .send_request(
                Request::get("https://other.dev.localhost/")
                    .body(Empty::<Bytes>::new())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert!(body.starts_with(b"no service has this name"), "{body:?}");
        // Any other name gets no certificate: none is minted for names a client chooses.
        assert!(
            tls_connect(address, &ca_pem, "other.example.com")
                .await
                .is_err()
        );
        assert!(
            metrics(&running)
                .await
                .contains("runway_ingress_tls_handshake_errors_total 1")
        );

        // Plain HTTP is redirected.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let plain = listener.local_addr().unwrap();
        let ingress = running.ingress.clone();
        let redirect = tokio::spawn(async move {
            ingress
                .serve_redirect(listener, 8443, std::future::pending())
                .await
        });
        let (status, headers, _) = get(plain, HOST, "/a/b?c=d").await;
        assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
        assert_eq!(
            headers["location"],
            "https://hello.dev.localhost:8443/a/b?c=d"
        );
        redirect.abort();
        let _ = stop.send(());
        server.await.unwrap().unwrap();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_h2c_keeps_trailers() {
    tokio::time::timeout(BOUND, async {
        // An HTTP/2-only instance answering like a gRPC server: a body, then grpc-status.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let service = service_fn(|request: Request<Incoming>| async move {
                        assert_eq!(request.version(), http::Version::HTTP_2);
                        assert_eq!(request.uri().path(), "/grpc.health.v1.Health/Check");
                        assert_eq!(request.headers()["te"], "trailers");
                        let body = request.into_body().collect().await.unwrap().to_bytes();
                        let mut trailers = http::HeaderMap::new();
                        trailers.insert("grpc-status", "0".parse().unwrap());
                        trailers.insert("grpc-message", "fine".parse().unwrap());
                        let body = Full::new(body).with_trailers(async move { Some(Ok(trailers)) });
                        let response = Response::builder()
                            .header("content-type", "application/grpc")
                            .body(body)
                            .unwrap();
                        Ok::<_, Infallible>(response)
                    });
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                });
            }
        });
        let running = start(Ingress::new(Options::default())).await;
        let mut config = one_revision(address);
        config.routes[0].revisions[0].protocol = runway_ingress::Protocol::H2c;
        running.ingress.set_routes(&config).unwrap();

        let stream = TcpStream::connect(running.address).await.unwrap();
        let (sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            TokioIo::new(stream),
        )
        .await
        .unwrap();
        tokio::spawn(connection);
        for _ in 0..5 {
            let mut sender = sender.clone();
            let request = Request::post(format!("http://{HOST}/grpc.health.v1.Health/Check"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
                .unwrap();
            let response = sender.send_request(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(response.headers()["content-type"], "application/grpc");
            let collected = response.into_body().collect().await.unwrap();
            let trailers = collected.trailers().cloned().unwrap();
            assert_eq!(trailers["grpc-status"], "0");
            assert_eq!(trailers["grpc-message"], "fine");
            assert_eq!(&collected.to_bytes()[..], b"\0\0\0\0\0");
        }
        server.abort();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sticky_cookie_keeps_a_client_on_its_revision() {
    tokio::time::timeout(BOUND, async {
        let (blue, green) = (upstream("blue").await, upstream("green").await);
        let running = start(Ingress::new(Options::default())).await;
        let mut config = table(
            5.0,
            vec![
                revision("hello-1", 50, vec![instance(blue.address, true, 0)]),
                revision("hello-2", 50, vec![instance(green.address, true, 0)]),
            ],
        );
        config.routes[0].sticky = true;
        running.ingress.set_routes(&config).unwrap();
        let (_, headers, first) = get(running.address, HOST, "/").await;
        let cookie = headers["set-cookie"].to_str().unwrap().to_owned();
        let pair = cookie.split(';').next().unwrap().to_owned();
        assert!(pair.starts_with("runway-revision=hello-"), "{cookie}");
        for _ in 0..30 {
            let with_cookie = Request::get("/")
                .header("host", HOST)
                .header("cookie", format!("a=b; {pair}"));
            let (_, headers, body) = send_one(running.address, with_cookie).await;
            assert!(!headers.contains_key("set-cookie"));
            assert_eq!(body, first);
        }
        // A revision that no longer gets traffic is not kept.
        config.routes[0].revisions[0].weight = if first == "blue" { 0 } else { 100 };
        config.routes[0].revisions[1].weight = 100 - config.routes[0].revisions[0].weight;
        running.ingress.set_routes(&config).unwrap();
        let with_cookie = Request::get("/")
            .header("host", HOST)
            .header("cookie", pair);
        let (_, headers, body) = send_one(running.address, with_cookie).await;
        assert!(headers.contains_key("set-cookie"));
        assert_ne!(body, first);
    })
    .await
    .unwrap();
}

/// A route with a tag header (`X-Pick` here) sends a request carrying a revision's tag to that
/// revision, whatever the weights, and strips the header; a tag no revision has is a 404,
/// never another revision. A route without one refuses `Runway-Tag` (400), and on a tag host
/// the header changes nothing but is stripped all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_header_picks_a_revision_where_the_route_enables_it() {
    tokio::time::timeout(BOUND, async {
        let (blue, green) = (upstream("blue").await, upstream("green").await);
        let running = start(Ingress::new(Options::default())).await;
        let mut config = table(
            5.0,
            vec![
                revision("hello-1", 100, vec![instance(blue.address, true, 0)]),
                revision("hello-2", 0, vec![instance(green.address, true, 0)]),
            ],
        );
        config.routes[0].revisions[0].tag = Some("r1".to_owned());
        config.routes[0].revisions[1].tag = Some("r2".to_owned());
        let send = |header: &'static str, value: &'static str, host: &'static str| {
            let address = running.address;
            async move {
                send_one(
                    address,
                    Request::get("/").header("host", host).header(header, value),
                )
                .await
            }
        };

        // Not enabled: the platform's header is refused, another passes as any header does.
        running.ingress.set_routes(&config).unwrap();
        let (status, _, body) = send("runway-tag", "r2", HOST).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.contains("spec.workload.tag_header"), "{body}");
        let (status, headers, body) = send("x-pick", "r2", HOST).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "blue"));
        assert_eq!(
            headers["x-saw-tag-header"], "r2",
            "not the route's: passed on"
        );

        config.routes[0].tag_header = Some("X-Pick".to_owned());
        running.ingress.set_routes(&config).unwrap();
        for _ in 0..20 {
            let (status, headers, body) = send("x-pick", "r2", HOST).await;
            assert_eq!((status, body.as_str()), (StatusCode::OK, "green"));
            assert_eq!(headers["x-saw-tag-header"], "", "stripped");
        }
        let (_, _, body) = send("x-pick", "r1", HOST).await;
        assert_eq!(body, "blue");
        let (status, _, body) = send("x-pick", "r9", HOST).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert!(body.contains("tag"), "{body}");
        // On a tag host its own revision serves; the header is stripped.
        let (_, headers, body) = send("x-pick", "r2", "r1---hello.dev.localhost").await;
        assert_eq!(body, "blue");
        assert_eq!(headers["x-saw-tag-header"], "");
        // The route's header is its own: `Runway-Tag` is now any header.
        let (status, _, body) = send("runway-tag", "r2", HOST).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "blue"));

        // A name that is no header's is refused with the table.
        config.routes[0].tag_header = Some("bad name".to_owned());
        assert!(running.ingress.set_routes(&config).is_err());
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_address_lists_and_maintenance_refuse_before_the_instance() {
    use runway_ingress::{ControlsConfig, MaintenanceConfig, RateLimitConfig};
    tokio::time::timeout(BOUND, async {
        let up = upstream("up").await;
        let running = start(Ingress::new(Options::default())).await;
        let mut config = one_revision(up.address);
        config.routes[0].controls = ControlsConfig {
            client_rate_limit: Some(RateLimitConfig {
                requests_per_second: 0.5,
                burst: 3,
            }),
            ..ControlsConfig::default()
        };
        running.ingress.set_routes(&config).unwrap();
        for _ in 0..3 {
            let (status, _, body) = get(running.address, HOST, "/").await;
            assert_eq!((status, body.as_str()), (StatusCode::OK, "up"));
        }
        let (status, headers, body) = get(running.address, HOST, "/").await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert_eq!(headers["retry-after"], "2", "one request per 2 s");
        assert!(headers.contains_key("x-request-id"));
        // A table that keeps the rate keeps what the client spent.
        config.routes[0].request_timeout_seconds = 6.0;
        running.ingress.set_routes(&config).unwrap();
        let (status, _, _) = get(running.address, HOST, "/").await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);

        // The address lists: this client (127.0.0.1) is not in `allow`.
        config.routes[0].controls = ControlsConfig {
            allow: vec!["192.0.2.0/24".to_owned()],
            ..ControlsConfig::default()
        };
        running.ingress.set_routes(&config).unwrap();
        let (status, _, body) = get(running.address, HOST, "/").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(body.contains("127.0.0.1"), "{body}");
        config.routes[0].controls.allow.push("127.0.0.0/8".to_owned());
        config.routes[0].controls.deny.push("127.0.0.1".to_owned());
        running.ingress.set_routes(&config).unwrap();
        let (status, _, _) = get(running.address, HOST, "/").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "deny wins");

        // Maintenance: the message and Retry-After; a listed client goes through.
        config.routes[0].controls = ControlsConfig {
            maintenance: Some(MaintenanceConfig {
                message: "Upgrading the database, back by 14:00 UTC".to_owned(),
                allow: Vec::new(),
                retry_after_seconds: 600,
            }),
            ..ControlsConfig::default()
        };
        running.ingress.set_routes(&config).unwrap();
        let (status, headers, body) = get(running.address, HOST, "/").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "Upgrading the database, back by 14:00 UTC\n");
        assert_eq!(headers["retry-after"], "600");
        if let Some(maintenance) = &mut config.routes[0].controls.maintenance {
            maintenance.allow.push("127.0.0.1".to_owned());
        }
        running.ingress.set_routes(&config).unwrap();
        let (status, _, body) = get(running.address, HOST, "/").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "up"));

        // Each refusal is the revision's client error, by reason, and none is a request.
        let text = metrics(&running).await;
        for (reason, count) in [
            ("client_rate_limited", 2),
            ("address_refused", 2),
            ("maintenance", 1),
        ] {
            let line = format!(
                "runway_ingress_client_errors_total{{service=\"hello\",env=\"dev\",revision=\"hello-1\",reason=\"{reason}\"}} {count}"
            );
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        assert!(
            text.contains(
                "runway_ingress_requests_total{service=\"hello\",env=\"dev\",revision=\"hello-1\",class=\"2xx\"} 4"
            ),
            "{text}"
        );
        assert!(text.contains("class=\"4xx\"} 0"), "{text}");

        // A bad rule refuses the table, naming the route and the field.
        config.routes[0].controls.deny = vec!["10.0.0.1/8".to_owned()];
        let error = running.ingress.set_routes(&config).unwrap_err().to_string();
        assert!(error.contains("hello.dev") && error.contains("controls.deny[0]"), "{error}");
    })
    .await
    .unwrap();
}

/// An operator's own authority, and a certificate it issued for `name` with its key.
fn operator_certificate(name: &str) -> (rcgen::Certificate, rcgen::Certificate, rcgen::KeyPair) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "operator CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca_cert, cert, key)
}

/// Waits (at most 5 s) for a counter on the admin port to reach `at_least`.
async fn metric_after(running: &Running, name: &str, at_least: u64) -> bool {
    for _ in 0..100 {
        let value = metrics(running)
            .await
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok());
        if value.is_some_and(|v| v >= at_least) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_certificate_serves_its_domains() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("custom").await;
        let running = start(Ingress::new(Options {
            certificate_poll: Duration::from_millis(50),
            ..Options::default()
        }))
        .await;
        let config = one_revision(up.address);
        running.ingress.set_routes(&config).unwrap();
        // The operator's own authority and a certificate for the custom domain.
        let dir = tempfile::tempdir().unwrap();
        let (ca_cert, cert, key) = operator_certificate("hello.example.test");
        let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        let tls = running
            .ingress
            .tls(&runway_ingress::TlsOptions {
                ca_dir: None,
                certificates: vec![runway_ingress::CertificateFiles {
                    domains: vec!["hello.example.test".to_owned()],
                    cert: cert_path.clone(),
                    key: key_path.clone(),
                }],
            })
            .unwrap();
        assert!(tls.ca_pem().is_none());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let ingress = running.ingress.clone();
        let server = tokio::spawn(async move {
            ingress
                .serve_tls(listener, &tls, std::future::pending())
                .await
        });
        let stream = tls_connect(address, &ca_cert.pem(), "hello.example.test")
            .await
            .unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let response = sender
            .send_request(
                Request::get("/")
                    .header("host", "hello.example.test")
                    .body(Empty::<Bytes>::new())
                    .unwrap(),
            )
            .await
            .unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"custom");
        // Without a local authority, a routed name with no operator certificate gets none.
        assert!(tls_connect(address, &ca_cert.pem(), HOST).await.is_err());

        // A renewal from another authority is picked up without a restart; a half-written one
        // (new certificate, old key) is refused and the previous certificate stays in use.
        let (renewed_ca, renewed, renewed_key) = operator_certificate("hello.example.test");
        std::fs::write(&cert_path, renewed.pem()).unwrap();
        let mismatched = metric_after(
            &running,
            "runway_ingress_certificate_reload_errors_total",
            1,
        )
        .await;
        assert!(mismatched);
        assert!(
            tls_connect(address, &ca_cert.pem(), "hello.example.test")
                .await
                .is_ok()
        );
        std::fs::write(&key_path, renewed_key.serialize_pem()).unwrap();
        assert!(metric_after(&running, "runway_ingress_certificate_reloads_total", 1).await);
        assert!(
            tls_connect(address, &renewed_ca.pem(), "hello.example.test")
                .await
                .is_ok()
        );
        assert!(
            tls_connect(address, &ca_cert.pem(), "hello.example.test")
                .await
                .is_err()
        );
        // The broken pair was reported once, not at every look.
        let text = metrics(&running).await;
        assert!(
            text.contains("runway_ingress_certificate_reload_errors_total 1\n"),
            "{text}"
        );
        server.abort();
    })
    .await
    .unwrap();
}

/// A certificate for the route table: `name`'s, issued by an authority of its own (as ACME's
/// would be), with that authority's certificate for a client's trust store.
fn table_certificate(name: &str) -> (runway_ingress::TableCertificate, String) {
    let (ca_cert, cert, key) = operator_certificate(name);
    let certificate = runway_ingress::TableCertificate {
        domains: vec![name.to_owned()],
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    };
    (certificate, ca_cert.pem())
}

/// `GET /` over a TLS stream, HTTP/1.1, naming `host`: the body.
async fn get_over(stream: tokio_rustls::client::TlsStream<TcpStream>, host: &str) -> String {
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let response = sender
        .send_request(
            Request::get("/")
                .header("host", host)
                .body(Empty::<Bytes>::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

/// A table's certificate is served for its name ahead of the local authority's, and a client
/// trusting only its issuer gets the route's page; a new table's certificate is served at the
/// next handshake; an operator's certificate for the same name wins over the table's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_certificate_is_served_by_name_and_an_operators_wins() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("custom").await;
        let running = start(Ingress::new(Options::default())).await;
        let mut config = one_revision(up.address);
        let (certificate, table_ca) = table_certificate("hello.example.test");
        config.certificates = vec![certificate];
        running.ingress.set_routes(&config).unwrap();
        let (dir, tls, local_ca) = local_tls(&running.ingress);
        let (address, stop, server) = serve_tls(&running.ingress, tls).await;

        let stream = tls_connect(address, &table_ca, "hello.example.test")
            .await
            .unwrap();
        assert_eq!(get_over(stream, "hello.example.test").await, "custom");
        // The platform's own names still get the local authority's.
        let stream = tls_connect(address, &local_ca, HOST).await.unwrap();
        assert_eq!(get_over(stream, HOST).await, "custom");
        assert!(
            tls_connect(address, &local_ca, "hello.example.test")
                .await
                .is_err()
        );

        // A renewal, from another authority, in the next table: served at the next handshake.
        let (renewed, renewed_ca) = table_certificate("hello.example.test");
        config.certificates = vec![renewed];
        running.ingress.set_routes(&config).unwrap();
        let stream = tls_connect(address, &renewed_ca, "hello.example.test")
            .await
            .unwrap();
        assert_eq!(get_over(stream, "hello.example.test").await, "custom");
        assert!(
            tls_connect(address, &table_ca, "hello.example.test")
                .await
                .is_err()
        );
        // A table with a certificate whose key is another's is refused whole, naming it; the
        // one in force stays.
        let mut mismatched = config.clone();
        let (other, _) = table_certificate("hello.example.test");
        mismatched.certificates[0].key_pem = other.key_pem;
        let error = running
            .ingress
            .set_routes(&mismatched)
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "certificate for hello.example.test: the key does not match the certificate (its \
             first in cert_pem)"
        );
        assert!(
            tls_connect(address, &renewed_ca, "hello.example.test")
                .await
                .is_ok()
        );

        // An operator's certificate for the same name takes precedence.
        let (operator_ca, cert, key) = operator_certificate("hello.example.test");
        let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        let operator = running
            .ingress
            .tls(&runway_ingress::TlsOptions {
                ca_dir: Some(dir.path().join("ca")),
                certificates: vec![runway_ingress::CertificateFiles {
                    domains: vec!["hello.example.test".to_owned()],
                    cert: cert_path,
                    key: key_path,
                }],
            })
            .unwrap();
        let (operator_address, operator_stop, operator_server) =
            serve_tls(&running.ingress, operator).await;
        let stream = tls_connect(operator_address, &operator_ca.pem(), "hello.example.test")
            .await
            .unwrap();
        assert_eq!(get_over(stream, "hello.example.test").await, "custom");
        assert!(
            tls_connect(operator_address, &renewed_ca, "hello.example.test")
                .await
                .is_err()
        );
        for (stop, server) in [(stop, server), (operator_stop, operator_server)] {
            let _ = stop.send(());
            server.await.unwrap().unwrap();
        }
    })
    .await
    .unwrap();
}

/// Accepts any server certificate: an ACME server checks a TLS-ALPN-01 certificate by its
/// acmeIdentifier, not by a chain; the test compares it with the one the table holds. The
/// handshake's signature is checked with the certificate's key, read without refusing the
/// critical acmeIdentifier extension (which webpki would).
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        // The ingress speaks TLS 1.3 to a client that does.
        Err(rustls::Error::General("TLS 1.2 is not expected".to_owned()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let (_, parsed) = x509_parser::parse_x509_certificate(cert)
            .map_err(|e| rustls::Error::General(e.to_string()))?;
        let spki = rustls::pki_types::SubjectPublicKeyInfoDer::from(parsed.public_key().raw);
        rustls::crypto::verify_tls13_signature_with_raw_key(
            message,
            &spki,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A handshake as an ACME server's TLS-ALPN-01 validation makes it, offering `alpn`.
async fn acme_connect(
    address: SocketAddr,
    name: &str,
    alpn: &[&[u8]],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let stream = TcpStream::connect(address).await?;
    let name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
    connector.connect(name, stream).await
}

/// The leaf certificate a TLS stream's server presented.
fn presented(stream: &tokio_rustls::client::TlsStream<TcpStream>) -> Vec<u8> {
    stream.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// HTTP-01: plain HTTP answers a token of the table with its key authorization (whatever the
/// host), a token it does not hold with a 404 where it redirects (and the service where it
/// proxies), and redirects everything else as before. TLS-ALPN-01: a handshake offering
/// `acme-tls/1` alone gets exactly the challenge certificate for its name, and is then closed;
/// a name without one, or `acme-tls/1` beside other protocols, is refused; ordinary clients
/// never get a challenge certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acme_challenges_are_answered_on_their_listeners() {
    use rustls::pki_types::pem::PemObject;
    tokio::time::timeout(BOUND, async {
        let up = upstream("service").await;
        let running = start(Ingress::new(Options::default())).await;
        let mut config = one_revision(up.address);
        let token = "LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0";
        let authorization = format!("{token}.9jg46WB3rR_AHD-EBXdN7cBkH1WOu0tA3M9fm21mqTI");
        config
            .acme
            .http01
            .insert(token.to_owned(), authorization.clone());
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(vec!["hello.example.test".to_owned()]).unwrap();
        params
            .custom_extensions
            .push(rcgen::CustomExtension::new_acme_identifier(&[42; 32]));
        let challenge = params.self_signed(&key).unwrap();
        config.acme.tls_alpn01.insert(
            "hello.example.test".to_owned(),
            runway_ingress::ChallengeCertificate {
                cert_pem: challenge.pem(),
                key_pem: key.serialize_pem(),
            },
        );
        running.ingress.set_routes(&config).unwrap();

        // HTTP-01 where plain HTTP redirects.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let plain = listener.local_addr().unwrap();
        let ingress = running.ingress.clone();
        let redirect = tokio::spawn(async move {
            ingress
                .serve_redirect(listener, 443, std::future::pending())
                .await
        });
        let path = format!("/.well-known/acme-challenge/{token}");
        for host in ["hello.example.test", "anything.example"] {
            let (status, headers, body) = get(plain, host, &path).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(headers["content-type"], "text/plain");
            assert_eq!(body, authorization);
        }
        let unknown = "/.well-known/acme-challenge/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        let (status, _, _) = get(plain, "hello.example.test", unknown).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, headers, _) = get(plain, "hello.example.test", "/.well-known/other").await;
        assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
        assert_eq!(
            headers["location"],
            "https://hello.example.test/.well-known/other"
        );
        // Where plain HTTP is proxied, a token the table holds is answered and any other is
        // the service's.
        let (status, _, body) = get(running.address, HOST, &path).await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::OK, authorization.as_str())
        );
        let (_, _, body) = get(running.address, HOST, unknown).await;
        assert_eq!(body, "service");
        // Once the table no longer holds it, the token is not answered.
        let mut later = config.clone();
        later.acme.http01.clear();
        running.ingress.set_routes(&later).unwrap();
        let (status, _, _) = get(plain, "hello.example.test", &path).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        running.ingress.set_routes(&config).unwrap();
        redirect.abort();

        // TLS-ALPN-01.
        let (_dir, tls, local_ca) = local_tls(&running.ingress);
        let (address, stop, server) = serve_tls(&running.ingress, tls).await;
        let mut stream = acme_connect(address, "hello.example.test", &[b"acme-tls/1"])
            .await
            .unwrap();
        assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"acme-tls/1"[..]));
        let expected =
            rustls::pki_types::CertificateDer::from_pem_slice(challenge.pem().as_bytes()).unwrap();
        assert_eq!(presented(&stream), expected.to_vec());
        assert_eq!(stream.get_ref().1.peer_certificates().unwrap().len(), 1);
        // Then closed, with nothing read from it.
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
            .await
            .unwrap();
        assert!(read.is_ok_and(|n| n == 0) || rest.is_empty(), "{rest:?}");

        // No challenge for the name: refused, though the local authority would serve it.
        assert!(acme_connect(address, HOST, &[b"acme-tls/1"]).await.is_err());
        assert!(
            acme_connect(address, "nothing.example", &[b"acme-tls/1"])
                .await
                .is_err()
        );
        // `acme-tls/1` beside other protocols is no validation: refused.
        assert!(
            acme_connect(address, "hello.example.test", &[b"h2", b"acme-tls/1"])
                .await
                .is_err()
        );
        // Ordinary clients, with ALPN or without, never get the challenge certificate.
        for alpn in [&[&b"h2"[..], &b"http/1.1"[..]][..], &[]] {
            let stream = acme_connect(address, "hello.example.test", alpn)
                .await
                .unwrap();
            assert_ne!(presented(&stream), expected.to_vec());
        }
        let stream = tls_connect_h2(address, &local_ca, "hello.example.test")
            .await
            .unwrap();
        assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        assert_ne!(presented(&stream), expected.to_vec());
        let _ = stop.send(());
        server.await.unwrap().unwrap();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_in_flight_requests_finish() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("last").await;
        let ingress = Ingress::new(Options::default());
        let config = one_revision(up.address);
        ingress.set_routes(&config).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let served = ingress.clone();
        let server = tokio::spawn(async move {
            served
                .serve(listener, async {
                    let _ = stopped.await;
                })
                .await
        });
        // A keep-alive connection, idle when the stop comes: told to close, it does at once.
        let mut idle = TcpStream::connect(address).await.unwrap();
        idle.write_all(format!("GET / HTTP/1.1\r\nhost: {HOST}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut answer = [0u8; 1024];
        let read = idle.read(&mut answer).await.unwrap();
        assert!(answer[..read].starts_with(b"HTTP/1.1 200"));
        let slow = tokio::spawn(async move { get(address, HOST, "/?sleep_ms=400").await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let stopping = Instant::now();
        stop.send(()).unwrap();
        let (status, _, body) = slow.await.unwrap();
        assert_eq!((status, body.as_str()), (StatusCode::OK, "last"));
        server.await.unwrap().unwrap();
        // Every connection closed: the stop did not wait out its grace (30 s).
        assert!(stopping.elapsed() < Duration::from_secs(5));
        let closed = tokio::time::timeout(Duration::from_secs(1), idle.read(&mut answer)).await;
        assert!(matches!(closed, Ok(Ok(0) | Err(_))), "{closed:?}");
        // Stopped: no longer accepting.
        assert!(TcpStream::connect(address).await.is_err());
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_clients_are_cut_off() {
    slow_and_idle_cut_off(Serving::SharedRuntime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_clients_are_cut_off_on_an_event_loop() {
    slow_and_idle_cut_off(Serving::EventLoop).await;
}

async fn slow_and_idle_cut_off(serving: Serving) {
    tokio::time::timeout(BOUND, async {
        let up = upstream("quick").await;
        let options = Options {
            header_read_timeout: Duration::from_millis(300),
            ..Options::default()
        };
        let running = start_with(Ingress::new(options), serving).await;
        let config = one_revision(up.address);
        running.ingress.set_routes(&config).unwrap();

        // A head that never ends.
        let started = Instant::now();
        let mut stream = TcpStream::connect(running.address).await.unwrap();
        stream
            .write_all(format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nX-Slow: ").as_bytes())
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out).await;
        let elapsed = started.elapsed();
        assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
        let answer = String::from_utf8_lossy(&out);
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
            "{answer}"
        );

        // A kept-alive connection with nothing more to say.
        let started = Instant::now();
        let mut stream = TcpStream::connect(running.address).await.unwrap();
        stream
            .write_all(format!("GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out).await;
        assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
        let elapsed = started.elapsed();
        assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    })
    .await
    .unwrap();
}

/// A TLS client that chooses HTTP/2 and then sends nothing (no preface), or only the
/// preface, holds its place no longer than a slow HTTP/1.1 head would: its connection is closed
/// at the head-read bound, and that is not counted as a TLS handshake error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_http2_client_is_cut_off() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("quick").await;
        let options = Options {
            header_read_timeout: Duration::from_millis(300),
            ..Options::default()
        };
        let running = start(Ingress::new(options)).await;
        running
            .ingress
            .set_routes(&one_revision(up.address))
            .unwrap();
        let (_dir, tls, ca_pem) = local_tls(&running.ingress);
        let (address, stop, server) = serve_tls(&running.ingress, tls).await;

        for preface in [&b""[..], b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"] {
            let started = Instant::now();
            let mut stream = tls_connect_h2(address, &ca_pem, HOST).await.unwrap();
            assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
            stream.write_all(preface).await.unwrap();
            let mut out = Vec::new();
            let _ = stream.read_to_end(&mut out).await;
            let elapsed = started.elapsed();
            assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
        }
        // A client that sends its request is served as before.
        let stream = tls_connect_h2(address, &ca_pem, HOST).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            TokioIo::new(stream),
        )
        .await
        .unwrap();
        tokio::spawn(connection);
        let request = Request::get(format!("https://{HOST}/"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(
            metrics(&running)
                .await
                .contains("runway_ingress_tls_handshake_errors_total 0")
        );
        drop(sender);
        let _ = stop.send(());
        server.await.unwrap().unwrap();
    })
    .await
    .unwrap();
}

/// An HTTP/2 connection on which requests keep starting stays open; once none has started
/// for the head-read timeout (what closes an idle HTTP/1.1 connection), it is told to go
/// (GOAWAY) and closes: over h2c on an event loop, and over TLS on the shared runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_is_told_to_go() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("quick").await;
        // Requests start every fifth of it below: only a stall of four fifths would close the
        // connection early.
        let idle = Duration::from_millis(500);
        for tls in [false, true] {
            let options = Options {
                header_read_timeout: idle,
                ..Options::default()
            };
            let serving = if tls {
                Serving::SharedRuntime
            } else {
                Serving::EventLoop
            };
            let running = start_with(Ingress::new(options), serving).await;
            running
                .ingress
                .set_routes(&one_revision(up.address))
                .unwrap();
            // The TLS listener, kept to the end of the round.
            let mut tls_server = None;
            let (mut sender, connection) = if tls {
                let (dir, config, ca_pem) = local_tls(&running.ingress);
                let (address, stop, server) = serve_tls(&running.ingress, config).await;
                let stream = tls_connect_h2(address, &ca_pem, HOST).await.unwrap();
                tls_server = Some((dir, stop, server));
                http2_client(stream).await
            } else {
                http2_client(TcpStream::connect(running.address).await.unwrap()).await
            };
            let scheme = if tls { "https" } else { "http" };
            let mut last = Instant::now();
            for _ in 0..12 {
                let request = Request::get(format!("{scheme}://{HOST}/"))
                    .body(Empty::<Bytes>::new())
                    .unwrap();
                let response = sender.send_request(request).await.unwrap();
                assert_eq!(response.status(), StatusCode::OK);
                last = Instant::now();
                tokio::time::sleep(idle / 5).await;
                assert!(
                    !connection.is_finished(),
                    "tls {tls}: closed while requests kept starting"
                );
            }
            tokio::time::timeout(Duration::from_secs(5), connection)
                .await
                .unwrap_or_else(|_| panic!("tls {tls}: the idle connection stayed open"))
                .unwrap()
                .unwrap();
            let idle_for = last.elapsed();
            assert!(
                idle_for >= idle,
                "tls {tls}: closed {idle_for:?} after its last request"
            );
            assert!(
                sender
                    .send_request(Request::new(Empty::new()))
                    .await
                    .is_err()
            );
            if let Some((_dir, stop, server)) = tls_server {
                let _ = stop.send(());
                server.await.unwrap().unwrap();
            }
        }
    })
    .await
    .unwrap();
}

/// An HTTP/2 client on `io`, its connection driven by a task of its own.
async fn http2_client<T>(
    io: T,
) -> (
    hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(io),
    )
    .await
    .unwrap();
    (sender, tokio::spawn(connection))
}

/// The revision's 5xx count and its request count in `/metrics`' text.
fn series(text: &str, name: &str, labels: &str) -> Option<u64> {
    text.lines()
        .find(|line| line.starts_with(name) && line.contains(labels))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

/// Sends `head` and `body` (written whole before anything is read, as an uploading client
/// does), then reads the answer; returns whether the whole upload was accepted, and the
/// answer.
async fn upload(address: SocketAddr, head: &str, body: &[u8]) -> (bool, String) {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let written = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        stream.flush().await
    }
    .await
    .is_ok();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await;
    (written, String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_body_breaks_gets_400_and_the_revision_is_not_blamed() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("fine").await;
        let running = start(Ingress::new(Options::default())).await;
        // A canary's tag host, as in the audit.
        let mut canary = revision("hello-2", 0, vec![instance(up.address, true, 0)]);
        canary.tag = Some("canary".to_owned());
        let config = table(
            5.0,
            vec![revision("hello-1", 100, vec![instance(up.address, true, 0)]), canary],
        );
        running.ingress.set_routes(&config).unwrap();
        let tag = "canary---hello.dev.localhost";
        let a = running.address;

        // A chunk size that is not hexadecimal, after a first good chunk the instance reads.
        let malformed = format!(
            "POST / HTTP/1.1\r\nHost: {tag}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nZZ\r\n"
        );
        // A body shorter than its length, the client closing its side.
        let truncated = format!("POST / HTTP/1.1\r\nHost: {tag}\r\nContent-Length: 100\r\n\r\nonly ten..");
        for _ in 0..3 {
            let answer = raw(a, malformed.as_bytes()).await;
            assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
            let mut stream = TcpStream::connect(a).await.unwrap();
            stream.write_all(truncated.as_bytes()).await.unwrap();
            stream.shutdown().await.unwrap();
            let mut answer = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
            let answer = String::from_utf8_lossy(&answer);
            // The client closed its side: the answer may not even reach it, but it is never
            // the instance's fault.
            assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 400"), "{answer}");
        }
        let (status, _, body) = get(a, tag, "/").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "fine"));

        let stats = running.ingress.revision_stats("hello", "dev", "hello-2").unwrap();
        assert_eq!((stats.requests, stats.errors_5xx), (1, 0), "{stats:?}");
        assert_eq!(stats.client_errors, 6, "{stats:?}");
        // Only what the instance answered is in the latency too.
        assert_eq!(stats.latency_buckets.last().unwrap().1, 1);
        assert!(!running.ingress.instance(up.address).unwrap().is_ejected());
        let text = metrics(&running).await;
        let labels = "revision=\"hello-2\"";
        assert_eq!(series(&text, "runway_ingress_requests_total", &format!("{labels},class=\"5xx\"")), Some(0), "{text}");
        assert_eq!(series(&text, "runway_ingress_requests_total", &format!("{labels},class=\"2xx\"")), Some(1), "{text}");
        assert_eq!(series(&text, "runway_ingress_upstream_errors_total", labels), Some(0), "{text}");
        assert_eq!(
            series(&text, "runway_ingress_client_errors_total", &format!("{labels},reason=\"body_broken\"")),
            Some(6),
            "{text}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_too_slow_with_its_body_gets_408_not_the_revisions_504() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("fine").await;
        let running = start(Ingress::new(Options::default())).await;
        let config = one_revision_timed(up.address, 0.5);
        running.ingress.set_routes(&config).unwrap();

        // Ten bytes of a hundred, then nothing: the instance waits for the rest.
        let mut stream = TcpStream::connect(running.address).await.unwrap();
        let head =
            format!("POST / HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 100\r\n\r\nonly ten..");
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut answer = vec![0u8; 12];
        stream.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"HTTP/1.1 408");
        drop(stream);
        // A slow instance is still the instance's 504.
        let (status, _, _) = get(running.address, HOST, "/?sleep_ms=2000").await;
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);

        let stats = running
            .ingress
            .revision_stats("hello", "dev", "hello-1")
            .unwrap();
        assert_eq!(
            (stats.requests, stats.errors_5xx, stats.client_errors),
            (1, 1, 1),
            "{stats:?}"
        );
        let text = metrics(&running).await;
        assert!(text.contains("reason=\"body_timeout\"} 1"), "{text}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_over_the_limit_gets_413_read_by_the_client() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("fine").await;
        let options = Options {
            max_body_bytes: 1024,
            ..Options::default()
        };
        let running = start(Ingress::new(options)).await;
        let config = one_revision(up.address);
        running.ingress.set_routes(&config).unwrap();

        // 4 MiB in 16 KiB chunks, far past the limit and past what socket buffers hold: the
        // client is still sending when the ingress answers.
        let chunk = format!("4000\r\n{}\r\n", "c".repeat(0x4000));
        let body = format!("{}0\r\n\r\n", chunk.repeat(256));
        let head = format!("POST / HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\n\r\n");
        let (written, answer) = upload(running.address, &head, body.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(
            written,
            "the ingress reset the connection while the client was sending"
        );
        // And with a declared length, refused before any byte is sent on.
        let head = format!(
            "POST / HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: {}\r\n\r\n",
            4 << 20
        );
        let (written, answer) = upload(running.address, &head, &vec![b'd'; 4 << 20]).await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(
            written,
            "the ingress reset the connection while the client was sending"
        );

        let stats = running
            .ingress
            .revision_stats("hello", "dev", "hello-1")
            .unwrap();
        assert_eq!((stats.requests, stats.client_errors), (0, 2), "{stats:?}");
        assert!(!running.ingress.instance(up.address).unwrap().is_ejected());
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_naming_two_hosts_gets_400() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("fine").await;
        let running = start(Ingress::new(Options::default())).await;
        let config = one_revision(up.address);
        running.ingress.set_routes(&config).unwrap();
        let a = running.address;

        for hosts in [
            format!("Host: {HOST}\r\nHost: hello.example.test\r\n"),
            format!("Host: {HOST}\r\nHost: {HOST}\r\n"),
            format!("Host: other.dev.localhost\r\nHost: {HOST}\r\n"),
        ] {
            let answer = raw(
                a,
                format!("GET / HTTP/1.1\r\n{hosts}Connection: close\r\n\r\n").as_bytes(),
            )
            .await;
            assert!(answer.starts_with("HTTP/1.1 400"), "{hosts}: {answer}");
        }
        // HTTP/1.1's absolute form names the host; a Host header is then ignored (RFC 9112).
        let absolute = raw(
            a,
            format!("GET http://{HOST}/ HTTP/1.1\r\nHost: elsewhere\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await;
        assert!(absolute.starts_with("HTTP/1.1 200"), "{absolute}");
        assert_eq!(up.served.load(Ordering::SeqCst), 1);
        let text = metrics(&running).await;
        assert!(
            text.contains("runway_ingress_refused_requests_total{reason=\"ambiguous_host\"} 3"),
            "{text}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_unlike_the_connections_server_name_gets_421() {
    tokio::time::timeout(BOUND, async {
        let (one, two) = (upstream("one").await, upstream("two").await);
        let running = start(Ingress::new(Options::default())).await;
        let mut config = one_revision(one.address);
        let mut other = config.routes[0].clone();
        other.service = "other".to_owned();
        other.domains = vec![];
        other.revisions = vec![revision(
            "other-1",
            100,
            vec![instance(two.address, true, 0)],
        )];
        config.routes.push(other);
        running.ingress.set_routes(&config).unwrap();
        let (_dir, tls, ca_pem) = local_tls(&running.ingress);
        let (address, stop, server) = serve_tls(&running.ingress, tls).await;

        // HTTP/2 (by ALPN): the connection is for hello; a request for other on it.
        let stream = tls_connect_h2(address, &ca_pem, HOST).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            TokioIo::new(stream),
        )
        .await
        .unwrap();
        tokio::spawn(connection);
        let mut status_for = async |host: &str| {
            let request = Request::get(format!("https://{host}/"))
                .body(Empty::<Bytes>::new())
                .unwrap();
            let response = sender.send_request(request).await.unwrap();
            let status = response.status();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        };
        assert_eq!(
            status_for("other.dev.localhost").await.0,
            StatusCode::MISDIRECTED_REQUEST
        );
        // The route's own other domain is another host too.
        assert_eq!(
            status_for("hello.example.test").await.0,
            StatusCode::MISDIRECTED_REQUEST
        );
        assert_eq!(status_for(HOST).await, (StatusCode::OK, "one".to_owned()));

        // HTTP/1.1 over TLS, a Host header for other on hello's connection.
        let mut stream = tls_connect(address, &ca_pem, HOST).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: other.dev.localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
        // Other's own connection reaches other.
        let mut stream = tls_connect(address, &ca_pem, "other.dev.localhost")
            .await
            .unwrap();
        stream
            .write_all(
                b"GET / HTTP/1.1\r\nHost: other.dev.localhost:443\r\nConnection: close\r\n\r\n",
            )
            .await
            .unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("two"),
            "{answer}"
        );
        assert_eq!(two.served.load(Ordering::SeqCst), 1);
        let text = metrics(&running).await;
        assert!(
            text.contains("runway_ingress_refused_requests_total{reason=\"misdirected\"} 3"),
            "{text}"
        );
        let _ = stop.send(());
        server.await.unwrap().unwrap();
    })
    .await
    .unwrap();
}

/// A connection from `local` (another loopback address plays another client).
async fn connect_from(local: &str, address: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{local}:0").parse().unwrap()).unwrap();
    socket.connect(address).await.unwrap()
}

/// Whether the ingress closed `stream` without a word (a refusal at accept).
async fn closed_at_once(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// One GET on an open connection; the status, or None when the connection was closed.
async fn get_on(stream: TcpStream) -> Option<StatusCode> {
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(connection);
    let request = Request::get("/")
        .header("host", HOST)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), sender.send_request(request))
        .await
        .ok()?
        .ok()?;
    Some(response.status())
}

/// One GET on `stream`, answered 200 with `fine`, the connection kept open.
async fn served_on(stream: &mut TcpStream) {
    let request = format!("GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    while !answer.ends_with(b"fine") {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
            .await
            .unwrap()
            .unwrap();
        assert_ne!(read, 0, "closed: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buffer[..read]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_connections_is_refused_at_accept_and_other_clients_are_served() {
    tokio::time::timeout(BOUND, async {
        let up = upstream("fine").await;
        let options = Options {
            max_connections: 12,
            max_connections_per_client: 5,
            ..Options::default()
        };
        let running = start(Ingress::new(options)).await;
        let config = one_revision(up.address);
        running.ingress.set_routes(&config).unwrap();
        let a = running.address;

        // One client opens more than its share, and holds them idle.
        let mut flood = Vec::new();
        for _ in 0..5 {
            flood.push(connect_from("127.0.0.1", a).await);
        }
        let mut refused = Vec::new();
        for _ in 0..20 {
            refused.push(connect_from("127.0.0.1", a).await);
        }
        for stream in &mut refused {
            assert!(closed_at_once(stream).await);
        }
        // The flood's own connections still work; another address is served at once.
        assert_eq!(get_on(flood.pop().unwrap()).await, Some(StatusCode::OK));
        assert_eq!(
            get_on(connect_from("127.0.0.2", a).await).await,
            Some(StatusCode::OK)
        );

        // More addresses fill the whole budget with connections being served (a request
        // each, kept alive; a silent one would give its place to a newcomer, see
        // tests/flood.rs): then everyone new is refused...
        for _ in 0..500 {
            if metric_value(&running, "runway_ingress_open_connections").await == Some(4) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for local in ["127.0.0.2", "127.0.0.3"] {
            for _ in 0..4 {
                flood.push(connect_from(local, a).await);
            }
        }
        for stream in &mut flood {
            served_on(stream).await;
        }
        // (4 + 8 held; wait until the ingress has admitted them all.)
        for _ in 0..500 {
            if metric_value(&running, "runway_ingress_open_connections").await == Some(12) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            metric_value(&running, "runway_ingress_open_connections").await,
            Some(12)
        );
        let mut late = connect_from("127.0.0.4", a).await;
        assert!(closed_at_once(&mut late).await);
        // ...the admin port still answers, and once the flood ends, clients are served again.
        let text = metrics(&running).await;
        assert!(
            text.contains(
                "runway_ingress_refused_connections_total{reason=\"per_client_limit\"} 20"
            ),
            "{text}"
        );
        assert!(
            text.contains("runway_ingress_refused_connections_total{reason=\"limit\"} 1"),
            "{text}"
        );
        drop(flood);
        let mut served = None;
        for _ in 0..500 {
            served = get_on(connect_from("127.0.0.1", a).await).await;
            if served.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(served, Some(StatusCode::OK));
        assert_eq!(
            get_on(connect_from("127.0.0.4", a).await).await,
            Some(StatusCode::OK)
        );
    })
    .await
    .unwrap();
}

/// A metric without labels, from `/metrics`.
async fn metric_value(running: &Running, name: &str) -> Option<u64> {
    let text = metrics(running).await;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Connections held open and silent on the admin port are closed after the header read
/// timeout, so they cannot keep `/healthz` from everyone else for long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_do_not_hold_the_admin_port() {
    let running = start(Ingress::new(Options {
        header_read_timeout: Duration::from_millis(300),
        ..Options::default()
    }))
    .await;
    let mut idle = Vec::new();
    for _ in 0..80 {
        idle.push(TcpStream::connect(running.admin).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut stream = TcpStream::connect(running.admin).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer))
        .await
        .expect("the admin port did not answer")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(idle);
}

/// An instance that answers `GET /big?bytes=N` with N bytes, `POST` with the length of the
/// body it read, anything else `ok`; with the connections it accepted, and a way to close
/// every one of them at once (as an instance does with its idle connections).
struct Closing {
    address: SocketAddr,
    accepted: Arc<AtomicUsize>,
    connections: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>,
    task: JoinHandle<()>,
}

impl Closing {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (count, kept) = (accepted.clone(), connections.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let service = service_fn(|request: Request<Incoming>| async move {
                    let big = query_number(&request, "bytes=") as usize;
                    let answer = if request.method() == http::Method::POST {
                        let body = request.into_body().collect().await.unwrap().to_bytes();
                        Bytes::from(body.len().to_string())
                    } else if big > 0 {
                        Bytes::from(vec![b'x'; big])
                    } else {
                        Bytes::from_static(b"ok")
                    };
                    Ok::<_, Infallible>(Response::new(Full::new(answer)))
                });
                kept.lock().unwrap().push(tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }));
            }
        });
        Self {
            address,
            accepted,
            connections,
            task,
        }
    }

    fn close_all(&self) {
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }
}

impl Drop for Closing {
    fn drop(&mut self) {
        self.close_all();
        self.task.abort();
    }
}

/// An instance's HTTP/1.1 connection carries a body larger than any socket buffer whole,
/// each way (its channels waking the side that waits, and only that side), and is used again
/// after it; one the instance closed while it sat idle in the pool is left for a new one, the
/// request never failing.
async fn instance_connections_carry_bodies_and_are_replaced(serving: Serving) {
    tokio::time::timeout(BOUND, async {
        let instance = Closing::start().await;
        let running = start_with(Ingress::new(Options::default()), serving).await;
        running
            .ingress
            .set_routes(&one_revision(instance.address))
            .unwrap();
        const BIG: usize = 8 << 20;
        let (status, _, body) = get(running.address, HOST, &format!("/big?bytes={BIG}")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body.len(), BIG);
        assert!(body.bytes().all(|b| b == b'x'));

        let stream = TcpStream::connect(running.address).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let upload = Request::post("/")
            .header("host", HOST)
            .body(Full::new(Bytes::from(vec![b'y'; BIG / 2])))
            .unwrap();
        let response = sender.send_request(upload).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let read = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(read, (BIG / 2).to_string().as_bytes());

        let (status, _, body) = get(running.address, HOST, "/").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
        assert_eq!(
            instance.accepted.load(Ordering::SeqCst),
            1,
            "each request after the first reused its connection"
        );

        instance.close_all();
        tokio::time::sleep(Duration::from_millis(100)).await;
        for _ in 0..3 {
            let (status, _, body) = get(running.address, HOST, "/").await;
            assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
        }
        assert_eq!(instance.accepted.load(Ordering::SeqCst), 2);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_connections_carry_bodies_and_are_replaced_when_closed() {
    instance_connections_carry_bodies_and_are_replaced(Serving::SharedRuntime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_connections_carry_bodies_and_are_replaced_when_closed_on_an_event_loop() {
    instance_connections_carry_bodies_and_are_replaced(Serving::EventLoop).await;
}
