//! The control socket end to end in one process: an ingress serving on loopback, its control
//! socket in a temporary directory, and the control plane's handle ([`RemoteIngress`]) on it.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use runway_ingress::control::{
    self, ControlClient, ControlError, ControlState, Listen, RemoteIngress, RemoteOptions,
};
use runway_ingress::{
    Ingress, InstanceConfig, Options, RevisionConfig, RouteConfig, RouteTableConfig,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::watch;

/// Every test is bounded.
const BOUND: Duration = Duration::from_secs(30);

/// An instance answering `ok`, after `?sleep_ms=N` when asked; one request per connection.
async fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream);
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                let sleep = head
                    .split_once("sleep_ms=")
                    .and_then(|(_, rest)| rest.split([' ', '&']).next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(sleep)).await;
                let _ = reader
                    .get_mut()
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    address
}

/// `GET path` through the ingress on a new connection: the status line and the body.
async fn get(ingress: SocketAddr, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(ingress).await.unwrap();
    let request =
        format!("GET {path} HTTP/1.1\r\nhost: hello.dev.localhost\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, body.to_owned())
}

fn table(revision: &str, weight: u32, instance: SocketAddr, ready: bool) -> RouteTableConfig {
    RouteTableConfig {
        domain: "localhost".to_owned(),
        environments: Vec::new(),
        routes: vec![RouteConfig {
            service: "hello".to_owned(),
            env: "dev".to_owned(),
            domains: vec![],
            request_timeout_seconds: 10.0,
            sticky: false,
            revisions: vec![RevisionConfig {
                name: revision.to_owned(),
                weight,
                tag: None,
                average_start_seconds: None,
                protocol: runway_ingress::Protocol::Http1,
                failing: false,
                instances: vec![InstanceConfig {
                    address: instance,
                    ready,
                    draining: false,
                    max_concurrency: 0,
                }],
            }],
            cells: None,
        }],
        ..RouteTableConfig::default()
    }
}

/// An ingress serving HTTP on loopback, with its control socket in `dir`; returns its address
/// and the receiver a `stop` request sets.
async fn serve(dir: &Path) -> (SocketAddr, watch::Receiver<bool>) {
    let ingress = Ingress::new(Options {
        min_hold: Duration::from_millis(300),
        ..Options::default()
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let served = ingress.clone();
    tokio::spawn(async move { served.serve(listener, std::future::pending()).await });
    let listen = Listen {
        http: address,
        https: None,
        admin: address,
        redirect: false,
    };
    let (stop, stopped) = watch::channel(false);
    let state = Arc::new(ControlState::new(
        ingress,
        dir,
        listen.clone(),
        listen,
        RouteTableConfig::default(),
        stop,
    ));
    let (socket, _) = control::bind_socket(dir).unwrap();
    tokio::spawn(control::serve_control(
        socket,
        state,
        std::future::pending(),
    ));
    (address, stopped)
}

/// Polls `check` every 10 ms until it holds, at most 5 s.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A table pushed is in force and saved; a bad one is refused and the old one stays; figures
/// come back within the watch's interval; a held request's scale-up signal arrives; a drain
/// waits for the instance's request in flight (and says when its grace ran out first); a
/// request the ingress cannot read gets an error; `stop` stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_stats_scale_up_and_drain_over_the_control_socket() {
    tokio::time::timeout(BOUND, async {
        let dir = tempfile::tempdir().unwrap();
        let (ingress, mut stopped) = serve(dir.path()).await;
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(control::SOCKET))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let remote = RemoteIngress::connect(
            dir.path(),
            RemoteOptions {
                stats_interval: Duration::from_millis(50),
                ..RemoteOptions::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(remote.hello().pid, std::process::id());
        assert_eq!(remote.hello().protocol, control::PROTOCOL_VERSION);
        assert!(remote.hello().table.routes.is_empty());

        // A table: in force, and saved for the ingress's next start.
        let instance = upstream().await;
        let first = table("hello-1", 100, instance, true);
        remote.set_routes(&first).await.unwrap();
        assert_eq!(get(ingress, "/").await.1, "ok");
        assert_eq!(
            control::load_table(dir.path()).unwrap(),
            Some(first.clone())
        );
        assert_eq!(
            ControlClient::new(dir.path()).hello().await.unwrap().table,
            first
        );

        // Weights that do not add up: refused, the table in force stays.
        let refused = remote
            .set_routes(&table("hello-1", 50, instance, true))
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, ControlError::Refused { message } if message.contains("100")),
            "{refused:?}"
        );
        assert_eq!(get(ingress, "/").await.1, "ok");
        assert_eq!(
            control::load_table(dir.path()).unwrap(),
            Some(first.clone())
        );

        // Figures come back without asking.
        eventually("the figures show the requests", || {
            remote
                .revision_stats("hello", "dev", "hello-1")
                .is_some_and(|stats| stats.requests >= 2)
        })
        .await;

        // A revision with no ready instance holds a request: its scale-up signal arrives,
        // and the held count shows in the figures while it waits.
        let mut signals = remote.subscribe_scale_up();
        remote
            .set_routes(&table("hello-2", 100, instance, false))
            .await
            .unwrap();
        let held = tokio::spawn(get(ingress, "/"));
        let signal = tokio::time::timeout(Duration::from_secs(5), signals.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                signal.service.as_str(),
                signal.env.as_str(),
                signal.revision.as_str()
            ),
            ("hello", "dev", "hello-2")
        );
        eventually("the figures show the held request", || {
            remote
                .revision_stats("hello", "dev", "hello-2")
                .is_some_and(|stats| stats.held == 1)
        })
        .await;
        // Nothing became ready within the hold.
        assert!(held.await.unwrap().0.contains("503"));

        // A drain waits for the request in flight.
        remote.set_routes(&first).await.unwrap();
        let slow = tokio::spawn(get(ingress, "/?sleep_ms=400"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        assert!(
            remote
                .drain(instance, Duration::from_secs(5))
                .await
                .unwrap()
        );
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(slow.await.unwrap().1, "ok");
        // An instance drained past its grace: false, and the request still ends well.
        let second = upstream().await;
        remote
            .set_routes(&table("hello-1", 100, second, true))
            .await
            .unwrap();
        let slow = tokio::spawn(get(ingress, "/?sleep_ms=600"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !remote
                .drain(second, Duration::from_millis(100))
                .await
                .unwrap()
        );
        assert_eq!(slow.await.unwrap().1, "ok");

        // A request it cannot read: an error, on one line.
        let mut raw = UnixStream::connect(dir.path().join(control::SOCKET))
            .await
            .unwrap();
        raw.write_all(b"{\"request\":\"reboot\"}\n").await.unwrap();
        let mut reply = String::new();
        BufReader::new(raw).read_line(&mut reply).await.unwrap();
        assert!(reply.starts_with("{\"reply\":\"error\""), "{reply}");

        // Stop.
        ControlClient::new(dir.path()).stop().await.unwrap();
        stopped.wait_for(|stop| *stop).await.unwrap();
    })
    .await
    .unwrap();
}
