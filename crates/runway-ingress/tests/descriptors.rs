//! The ingress when file descriptors run short. A test binary of its own: it lowers its own
//! process's limit on open files, which would disturb other tests.

// Tests and benches keep time on tokio's runtimes, never on an event loop's.
#![allow(clippy::disallowed_methods)]
// Test code: a failing unwrap is a failing test.
#![allow(clippy::unwrap_used)]

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use runway_ingress::{Ingress, Options};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

const HOST: &str = "hello.dev.localhost";

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

async fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(|_: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"fine"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    address
}

/// Serves `ingress` on a new loopback port until the returned sender is dropped.
async fn serve(ingress: &Ingress) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let ingress = ingress.clone();
    tokio::spawn(async move {
        let _ = ingress
            .serve(listener, async {
                let _ = stopped.await;
            })
            .await;
    });
    (address, stop)
}

async fn connect_from(local: &str, address: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(format!("{local}:0").parse().unwrap())?;
    socket.connect(address).await
}

async fn get(local: &str, address: SocketAddr) -> Option<StatusCode> {
    let stream = connect_from(local, address).await.ok()?;
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

/// A metric's value (without labels, or with the given ones) from the ingress's registry.
fn metric(ingress: &Ingress, series: &str) -> u64 {
    let text = ingress.metrics().encode();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_budget_keeps_the_process_clear_of_its_descriptor_limit() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let instance = upstream().await;
        // Room for about 130 more descriptors in this whole process, clients included.
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        let limit = open_fds() + 130;
        setrlimit(Resource::RLIMIT_NOFILE, limit, hard).unwrap();

        // 1. The budget by default is what the limit allows: it refuses at accept, well
        // before the descriptors run out, and the admin port (its own budget) still answers.
        let options = Options {
            max_connections_per_client: 0,
            ..Options::default()
        };
        assert_eq!(
            options.max_connections,
            runway_ingress::limits::connections_for_fd_limit(limit)
        );
        let budget = options.max_connections as u64;
        assert!(2 * budget < 130, "{budget}");
        let ingress = Ingress::new(options);
        ingress.set_routes(&support::one_route(instance)).unwrap();
        let (address, stop) = serve(&ingress).await;
        let mut flood = Vec::new();
        for _ in 0..40 {
            flood.push(connect_from("127.0.0.1", address).await.unwrap());
        }
        // Each past the budget is refused, or (these being silent) takes the place of the
        // oldest, which is closed.
        let refused = 40 - budget;
        let refused_or_shed = || {
            metric(
                &ingress,
                "runway_ingress_refused_connections_total{reason=\"limit\"}",
            ) + metric(
                &ingress,
                "runway_ingress_refused_connections_total{reason=\"shed\"}",
            )
        };
        for _ in 0..500 {
            if refused_or_shed() >= refused
                && metric(&ingress, "runway_ingress_open_connections") == budget
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(refused_or_shed(), refused);
        assert_eq!(metric(&ingress, "runway_ingress_open_connections"), budget);
        assert_eq!(metric(&ingress, "runway_ingress_accept_errors_total"), 0);
        drop(flood);
        drop(stop);

        // 2. A budget past the limit (misconfigured): accepts fail for want of descriptors.
        // The loop backs off instead of spinning, and serves again once the flood is gone.
        let ingress = Ingress::new(Options {
            max_connections: 100_000,
            max_connections_per_client: 0,
            ..Options::default()
        });
        ingress.set_routes(&support::one_route(instance)).unwrap();
        let (address, stop) = serve(&ingress).await;
        let mut flood = Vec::new();
        for _ in 0..200 {
            // The test's own sockets run out too, at some point.
            match connect_from("127.0.0.1", address).await {
                Ok(stream) => flood.push(stream),
                Err(_) => break,
            }
        }
        // Client and server share this process's descriptors: whether the last one went to a
        // connect or an accept is a race. Take every one left, then give back one at a time
        // for a connect: once a connection is pending with none free, its accept must fail.
        let mut held = Vec::new();
        while let Ok(file) = std::fs::File::open("/dev/null") {
            held.push(file);
        }
        for _ in 0..50 {
            if metric(&ingress, "runway_ingress_accept_errors_total") > 0 {
                break;
            }
            held.pop();
            if let Ok(stream) = connect_from("127.0.0.1", address).await {
                flood.push(stream);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let errors = metric(&ingress, "runway_ingress_accept_errors_total");
        assert!(errors > 0);
        drop(held);
        tokio::time::sleep(Duration::from_secs(1)).await;
        // A spin would have failed thousands of times in that second.
        let errors = metric(&ingress, "runway_ingress_accept_errors_total") - errors;
        assert!(errors < 100, "{errors} failed accepts in a second");
        drop(flood);
        let mut served = None;
        for _ in 0..200 {
            served = get("127.0.0.2", address).await;
            if served.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(served, Some(StatusCode::OK));
        drop(stop);
    })
    .await
    .unwrap();
}
