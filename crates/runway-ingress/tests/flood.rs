//! A flood of idle connections (TCP connected, then nothing: no ClientHello, no request line)
//! from many loopback addresses against the ingress's event loops, with a small connection
//! budget: once the budget is full, a real client still gets through promptly, again and again
//! while the flood goes on; a connection already serving is never closed for a newcomer; and
//! once the flood is over, the memory it took is given back to the system: the process's
//! resident size is back near where it was.
//!
//! The flood's sockets are plain `socket2` sockets (no task, no buffer in this process), so
//! the resident size read here is the ingress's.

// Tests and benches keep time on tokio's runtimes, never on an event loop's.
#![allow(clippy::disallowed_methods)]
// Test code: a failing unwrap is a failing test; the figures are printed for the record.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use runway_ingress::server::LoopListener;
use runway_ingress::{Ingress, Options};
use socket2::{Domain, Socket, Type};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Every test is bounded.
const BOUND: Duration = Duration::from_secs(120);

/// How long a real client may take, handshake and response, while the flood holds.
const PROMPTLY: Duration = Duration::from_secs(2);

const HOST: &str = "hello.dev.localhost";

/// The tests here measure the process's memory: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The process's resident size, KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix("VmRSS:")?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// A series of the ingress's metrics (the first line starting with `name`), 0 when absent.
fn metric(ingress: &Ingress, name: &str) -> u64 {
    ingress
        .metrics()
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

fn open_connections(ingress: &Ingress) -> u64 {
    metric(ingress, "runway_ingress_open_connections ")
}

/// An instance answering `fine`.
async fn upstream() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
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
    (address, task)
}

/// The ingress served by two event loops (as the daemon serves it) on a port of its own,
/// until the returned sender is dropped or sent `true`; the task ends once they stopped.
async fn serve(
    ingress: &Ingress,
    tls: Option<runway_ingress::Tls>,
) -> (
    SocketAddr,
    watch::Sender<bool>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    // Reserved with SO_REUSEPORT, bound but not listening, until the loops listen on it.
    let reserved = tokio::net::TcpSocket::new_v4().unwrap();
    reserved.set_reuseport(true).unwrap();
    reserved.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let address = reserved.local_addr().unwrap();
    let (stop, stopped) = watch::channel(false);
    let ingress = ingress.clone();
    let served = tokio::spawn(async move {
        let listeners = [LoopListener { address, tls }];
        ingress.serve_event_loops(&listeners, 2, stopped).await
    });
    let listening = async {
        while TcpStream::connect(address).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), listening)
        .await
        .expect("the event loops listen within 10 s");
    drop(reserved);
    (address, stop, served)
}

/// `count` connections to `address`, spread over the flood's source addresses
/// (127.0.1.1 and up, `sources` of them) starting at `first`, that send nothing.
async fn flood(address: SocketAddr, first: usize, count: usize, sources: usize) -> Vec<Socket> {
    tokio::task::spawn_blocking(move || {
        (first..first + count)
            .filter_map(|n| {
                let source: SocketAddr = format!("127.0.1.{}:0", 1 + n % sources).parse().ok()?;
                let socket = Socket::new(Domain::IPV4, Type::STREAM, None).ok()?;
                socket.bind(&source.into()).ok()?;
                socket.connect(&address.into()).ok()?;
                Some(socket)
            })
            .collect()
    })
    .await
    .unwrap()
}

/// A client's TCP connection from `local` (another loopback address, another client).
async fn connect_from(local: &str, address: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{local}:0").parse().unwrap())?;
    socket.connect(address).await
}

fn tls_client(ca_pem: &str) -> tokio_rustls::TlsConnector {
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
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// An HTTP/1.1 client on `stream` (over TLS or not).
async fn http1<S>(stream: S) -> Option<hyper::client::conn::http1::SendRequest<Empty<Bytes>>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(connection);
    Some(sender)
}

/// `GET /` for [`HOST`] on `sender`: the body when the answer is a 200.
async fn get(sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>) -> Option<Bytes> {
    let request = Request::get("/")
        .header("host", HOST)
        .body(Empty::new())
        .ok()?;
    let response = sender.send_request(request).await.ok()?;
    if response.status() != StatusCode::OK {
        return None;
    }
    Some(response.into_body().collect().await.ok()?.to_bytes())
}

/// A new client from `local`: connection, TLS handshake (when `tls` is given), `GET /`. The
/// time it took, when it got `fine` within [`PROMPTLY`].
async fn client(
    local: &str,
    address: SocketAddr,
    tls: Option<&tokio_rustls::TlsConnector>,
) -> Option<Duration> {
    let started = Instant::now();
    let served = tokio::time::timeout(PROMPTLY, async {
        let stream = connect_from(local, address).await.ok()?;
        let mut sender = match tls {
            Some(connector) => {
                let name = rustls::pki_types::ServerName::try_from(HOST).ok()?;
                http1(connector.connect(name, stream).await.ok()?).await?
            }
            None => http1(stream).await?,
        };
        get(&mut sender).await
    })
    .await;
    matches!(served, Ok(Some(body)) if &body[..] == b"fine").then(|| started.elapsed())
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// The flood, the clients beside it and the memory, over TLS or plain HTTP.
async fn idle_flood(tls: bool) {
    const BUDGET: usize = 2_000;
    /// The flood's source addresses (each under the default share of 256 per address).
    const SOURCES: usize = 16;
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(BOUND, async {
        runway_ingress::raise_fd_limit().unwrap();
        let (instance, instance_task) = upstream().await;
        // The default handshake and head bound (30 s), as measured in the issue.
        let ingress = Ingress::new(Options {
            max_connections: BUDGET,
            ..Options::default()
        });
        ingress.set_routes(&support::one_route(instance)).unwrap();
        let memory = ingress.give_back_memory();
        let dir = tempfile::tempdir().unwrap();
        let (tls_setup, connector) = if tls {
            let setup = ingress
                .tls(&runway_ingress::TlsOptions {
                    ca_dir: Some(dir.path().join("ca")),
                    certificates: Vec::new(),
                })
                .unwrap();
            let connector = tls_client(setup.ca_pem().unwrap());
            (Some(setup), Some(connector))
        } else {
            (None, None)
        };
        let connector = connector.as_ref();
        let (address, stop, served) = serve(&ingress, tls_setup).await;

        // Warm up (the local authority's certificate for the host, the instance's pool), and
        // keep one client connected and served.
        for _ in 0..5 {
            assert!(client("127.0.0.2", address, connector).await.is_some());
        }
        let stream = connect_from("127.0.0.3", address).await.unwrap();
        let mut kept = match connector {
            Some(connector) => {
                let name = rustls::pki_types::ServerName::try_from(HOST).unwrap();
                http1(connector.connect(name, stream).await.unwrap()).await
            }
            None => http1(stream).await,
        }
        .unwrap();
        assert_eq!(get(&mut kept).await.as_deref(), Some(&b"fine"[..]));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = rss_kib();

        // The flood, until the budget is full.
        let mut held = Vec::new();
        let mut peak = before;
        while held.len() < 3 * BUDGET && (open_connections(&ingress) as usize) < BUDGET {
            held.extend(flood(address, held.len(), 100, SOURCES).await);
            peak = peak.max(rss_kib());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let filled = held.len();
        assert!(
            open_connections(&ingress) as usize >= BUDGET - 1,
            "the flood did not fill the budget"
        );

        // While it goes on (more silent connections between the clients), a new client is
        // served promptly, every time.
        let mut waits = Vec::new();
        for round in 0..10 {
            held.extend(flood(address, held.len(), 100, SOURCES).await);
            peak = peak.max(rss_kib());
            let local = format!("127.0.0.{}", 10 + round);
            let waited = client(&local, address, connector).await;
            assert!(
                waited.is_some(),
                "round {round}: a client was not served within {PROMPTLY:?} while {} \
                 connections were open ({} flood connections made)",
                open_connections(&ingress),
                held.len()
            );
            waits.extend(waited);
        }
        // The client connected before the flood was never closed for a newcomer.
        assert_eq!(
            get(&mut kept).await.as_deref(),
            Some(&b"fine"[..]),
            "a served connection was shed"
        );
        let flooded = held.len();
        let shed = metric(
            &ingress,
            "runway_ingress_refused_connections_total{reason=\"shed\"}",
        );

        // The flood ends: its connections close, the ingress's go, and so does the memory.
        drop(held);
        drop(kept);
        let gone = async {
            while open_connections(&ingress) > 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), gone)
            .await
            .expect("the flood's connections closed within 10 s");
        // Given back at the next check.
        tokio::time::sleep(runway_ingress::limits::FLOOD_CHECK + Duration::from_millis(500)).await;
        let after = rss_kib();

        let slowest = waits.iter().max().copied().unwrap_or_default();
        let mut sorted = waits.clone();
        sorted.sort();
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
        println!(
            "{} flood: budget {BUDGET}, filled after {filled} connections from {SOURCES} \
             addresses, {flooded} in all, {shed} shed; a new client served in {:.1} ms \
             (median) / {:.1} ms (slowest) of {} rounds; RSS {:.1} MiB before, {:.1} MiB \
             peak, {:.1} MiB after",
            if tls { "TLS" } else { "plain HTTP" },
            ms(median),
            ms(slowest),
            waits.len(),
            mib(before),
            mib(peak),
            mib(after),
        );
        // The flood's growth given back, but for what the allocator and the test's own
        // threads keep (measured: within 1 MiB of before).
        assert!(
            after <= before + (4 << 10),
            "RSS {:.1} MiB before, {:.1} MiB peak, {:.1} MiB after the flood",
            mib(before),
            mib(peak),
            mib(after)
        );

        memory.abort();
        let _ = stop.send(true);
        tokio::time::timeout(Duration::from_secs(35), served)
            .await
            .expect("the event loops stop")
            .unwrap()
            .unwrap();
        instance_task.abort();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tls_flood_leaves_room_for_clients_and_its_memory_goes() {
    idle_flood(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_plain_flood_leaves_room_for_clients_and_its_memory_goes() {
    idle_flood(false).await;
}

/// A plain-HTTP connection that never sends a byte is closed at the head-read bound, as one
/// that sent half a head is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_at_the_head_read_bound() {
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(BOUND, async {
        let ingress = Ingress::new(Options {
            header_read_timeout: Duration::from_millis(300),
            ..Options::default()
        });
        let dir = tempfile::tempdir().unwrap();
        let setup = ingress
            .tls(&runway_ingress::TlsOptions {
                ca_dir: Some(dir.path().join("ca")),
                certificates: Vec::new(),
            })
            .unwrap();
        for tls in [None, Some(setup)] {
            let (address, stop, served) = serve(&ingress, tls).await;
            let started = Instant::now();
            let mut stream = connect_from("127.0.0.2", address).await.unwrap();
            let mut byte = [0u8; 1];
            let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte)).await;
            assert!(
                matches!(read, Ok(Ok(0) | Err(_))),
                "a silent connection was held past 5 s"
            );
            assert!(started.elapsed() < Duration::from_secs(3));
            let _ = stop.send(true);
            tokio::time::timeout(Duration::from_secs(35), served)
                .await
                .expect("the event loops stop")
                .unwrap()
                .unwrap();
        }
    })
    .await
    .unwrap();
}
