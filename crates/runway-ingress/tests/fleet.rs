//! Ingresses fed over the network: `runway-ingress --control-listen` processes on loopback,
//! their control channel's certificates made by `control_tls::generate`, and the control
//! plane's [`IngressFleet`] on them; and what the control port refuses.

// Tests and benches keep time on tokio's runtimes, never on an event loop's.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, reason = "tests")]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use runway_ingress::control::{ControlClient, ControlError, Endpoint, RemoteOptions};
use runway_ingress::control_tls::{self, ClientTls};
use runway_ingress::fleet::{FleetOptions, IngressFleet};
use runway_ingress::{InstanceConfig, RevisionConfig, RouteConfig, RouteTableConfig};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Every test is bounded.
const BOUND: Duration = Duration::from_secs(60);

/// An instance answering `ok`; one request per connection.
async fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
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

/// `GET path` on `address` with `host`: the status line and the body.
async fn get(address: SocketAddr, path: &str) -> (String, String) {
    let Ok(mut stream) = TcpStream::connect(address).await else {
        return ("refused".to_owned(), String::new());
    };
    let request =
        format!("GET {path} HTTP/1.1\r\nhost: hello.dev.localhost\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response).await;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

fn table(revision: &str, instance: SocketAddr) -> RouteTableConfig {
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
                weight: 100,
                tag: None,
                average_start_seconds: None,
                protocol: runway_ingress::Protocol::Http1,
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
    }
}

fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// A `runway-ingress` process fed over the network; killed when dropped.
struct Process {
    child: tokio::process::Child,
    control: SocketAddr,
    http: SocketAddr,
    admin: SocketAddr,
}

impl Process {
    async fn start(state: &Path, control: SocketAddr, tls: &Path) -> Self {
        let (http, admin) = (free_port(), free_port());
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_runway-ingress"))
            .arg("--state-dir")
            .arg(state)
            .args(["--listen", &http.to_string(), "--admin", &admin.to_string()])
            .args(["--control-listen", &control.to_string()])
            .arg("--control-tls")
            .arg(tls)
            .args(["--event-loops", "0", "--threads", "1"])
            .args(["--shutdown-grace-seconds", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let process = Self {
            child,
            control,
            http,
            admin,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(admin).await.is_err() {
            assert!(Instant::now() < deadline, "the ingress never listened");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        process
    }

    async fn readyz(&self) -> String {
        let mut stream = TcpStream::connect(self.admin).await.unwrap();
        stream
            .write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response.lines().next().unwrap_or_default().to_owned()
    }

    async fn kill(mut self) {
        self.child.kill().await.unwrap();
    }
}

struct Pki {
    _dir: tempfile::TempDir,
    ingress: PathBuf,
    control: PathBuf,
}

fn make_pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let (ingress, control) = (dir.path().join("ingress"), dir.path().join("control"));
    control_tls::generate(&ingress, &control).unwrap();
    Pki {
        _dir: dir,
        ingress,
        control,
    }
}

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two ingresses, one fleet: a table reaches both (each ready only once fed); figures are
/// their sum; a drain reaches both; one killed leaves the fleet (the error says so once) and
/// the other keeps serving; started again on its saved table, it rejoins and is given the
/// latest table; and the control plane can be gone while both serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_ingresses_is_fed_as_one() {
    tokio::time::timeout(BOUND, async {
        let pki = make_pki();
        let states = tempfile::tempdir().unwrap();
        let (state_a, state_b) = (states.path().join("a"), states.path().join("b"));
        let a = Process::start(&state_a, free_port(), &pki.ingress).await;
        let b = Process::start(&state_b, free_port(), &pki.ingress).await;
        assert!(a.readyz().await.contains("503"), "ready before any table");

        let options = FleetOptions {
            addresses: vec![a.control.to_string(), b.control.to_string()],
            tls: ClientTls::load(&pki.control, control_tls::SERVER_NAME).unwrap(),
            resolve_every: Duration::from_millis(200),
            remote: RemoteOptions {
                stats_interval: Duration::from_millis(50),
                ..RemoteOptions::default()
            },
        };
        let fleet = IngressFleet::connect(options.clone()).await;
        assert_eq!(fleet.members().len(), 2);
        assert_eq!(fleet.serving(), Some(RouteTableConfig::default()));

        let instance = upstream().await;
        fleet.set_routes(&table("hello-1", instance)).await.unwrap();
        for ingress in [&a, &b] {
            assert_eq!(get(ingress.http, "/").await.1, "ok");
            assert!(ingress.readyz().await.contains("200"));
        }
        get(a.http, "/").await;
        // 2 through a, 1 through b: one revision's figures, summed.
        eventually("the figures of both", async || {
            fleet
                .revision_stats("hello", "dev", "hello-1")
                .is_some_and(|stats| stats.requests == 3)
        })
        .await;
        assert!(fleet.drain(instance, Duration::from_secs(1)).await);

        // One goes: the next table says so, and the fleet goes on without it.
        let a_control = a.control;
        a.kill().await;
        let second = upstream().await;
        let lost = fleet
            .set_routes(&table("hello-1", second))
            .await
            .unwrap_err();
        assert!(lost.contains("leaves the fleet"), "{lost}");
        assert_eq!(fleet.members(), vec![b.control]);
        fleet.set_routes(&table("hello-1", second)).await.unwrap();
        assert_eq!(get(b.http, "/").await.1, "ok");
        // What it counted stays in the figures.
        assert_eq!(
            fleet
                .revision_stats("hello", "dev", "hello-1")
                .map(|stats| stats.requests),
            Some(3)
        );

        // Started again on its saved (older) table: it rejoins with the latest.
        let a = Process::start(&state_a, a_control, &pki.ingress).await;
        eventually("the ingress rejoins", async || fleet.members().len() == 2).await;
        let hello = ControlClient::at(Endpoint::Tls {
            address: a.control,
            tls: options.tls.clone(),
        })
        .hello()
        .await
        .unwrap();
        assert_eq!(hello.table, table("hello-1", second));

        // The control plane goes: both keep serving.
        drop(fleet);
        tokio::time::sleep(Duration::from_millis(300)).await;
        for ingress in [&a, &b] {
            assert_eq!(get(ingress.http, "/").await.1, "ok");
        }
    })
    .await
    .unwrap();
}

/// The control port obeys only the control plane's certificate: no client certificate, or one
/// of another authority, gets no answer; `stop` is refused over the network; the files'
/// problems are named at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_port_refuses_strangers() {
    tokio::time::timeout(BOUND, async {
        let pki = make_pki();
        let state = tempfile::tempdir().unwrap();
        let ingress = Process::start(state.path(), free_port(), &pki.ingress).await;
        let ours = ClientTls::load(&pki.control, control_tls::SERVER_NAME).unwrap();
        let client = |tls: ClientTls| {
            ControlClient::at(Endpoint::Tls {
                address: ingress.control,
                tls,
            })
        };
        assert!(client(ours.clone()).hello().await.is_ok());

        // A client certificate of another authority.
        let other = make_pki();
        let stranger = ClientTls::load(&other.control, control_tls::SERVER_NAME).unwrap();
        let refused = client(stranger).hello().await.unwrap_err();
        assert!(
            matches!(refused, ControlError::Connect { .. } | ControlError::Io { .. } | ControlError::Closed { .. }),
            "{refused:?}"
        );
        // The ingress's own certificate as a client's: not the control plane's either, since
        // the ingress's certificate is for serving only.
        let ingress_as_client = ClientTls::load(&pki.ingress, control_tls::SERVER_NAME).unwrap();
        assert!(client(ingress_as_client).hello().await.is_err());

        // No client certificate at all: plain TLS with the right roots, then a request.
        let mut raw = TcpStream::connect(ingress.control).await.unwrap();
        raw.write_all(b"{\"request\":\"hello\"}\n").await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut answer)).await;
        assert!(!String::from_utf8_lossy(&answer).contains("\"reply\""));

        // `stop` over the network: refused, and the ingress serves on.
        let stop = client(ours.clone()).stop().await.unwrap_err();
        assert!(
            matches!(&stop, ControlError::Refused { message } if message.contains("control socket")),
            "{stop:?}"
        );
        assert!(client(ours).hello().await.is_ok());

        // The ingress checks a wrong name: a control plane expecting another is refused.
        let wrong_name = ClientTls::load(&pki.control, "someone-else").unwrap();
        assert!(client(wrong_name).hello().await.is_err());

        // Missing files are named at start.
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_runway-ingress"))
            .arg("--state-dir")
            .arg(state.path().join("other"))
            .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .args(["--control-listen", "127.0.0.1:0", "--control-tls"])
            .arg(state.path().join("nowhere"))
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success());
        assert!(stderr.contains("nowhere") && stderr.contains("ca.crt"), "{stderr}");
    })
    .await
    .unwrap();
}

/// Behind a load balancer that takes 443 to this ingress's HTTPS port, plain HTTP redirects
/// to the port clients reach (`--redirect-port`), not the ingress's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_name_the_port_clients_reach() {
    tokio::time::timeout(BOUND, async {
        let state = tempfile::tempdir().unwrap();
        let (http, https, admin) = (free_port(), free_port(), free_port());
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_runway-ingress"))
            .arg("--state-dir")
            .arg(state.path().join("state"))
            .arg("--ca-dir")
            .arg(state.path().join("ca"))
            .args(["--listen", &http.to_string(), "--admin", &admin.to_string()])
            .args(["--https", &https.to_string(), "--redirect-port", "443"])
            .args(["--event-loops", "0", "--threads", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(http).await.is_err() {
            assert!(Instant::now() < deadline, "the ingress never listened");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut stream = TcpStream::connect(http).await.unwrap();
        stream
            .write_all(
                b"GET /a?b HTTP/1.1\r\nhost: hello.dev.localhost\r\nconnection: close\r\n\r\n",
            )
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(
            response
                .to_ascii_lowercase()
                .contains("location: https://hello.dev.localhost/a?b\r\n"),
            "{response}"
        );
        child.kill().await.unwrap();
    })
    .await
    .unwrap();
}
