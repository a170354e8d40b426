//! The control socket end to end in one process: an ingress serving on loopback, its control
//! socket in a temporary directory, and the control plane's handle ([`RemoteIngress`]) on it.

// Tests and benches keep time on tokio's runtimes, never on an event loop's.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, reason = "tests")]

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
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
    let listen = Listen::plain(address, address);
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

        // A revision with no ready instance holds a request: its scale-up signal arrives, with
        // figures that show the held request already (the control plane decides on them at
        // once: figures from before the request would say there is nothing to start).
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
        assert_eq!(
            remote
                .revision_stats("hello", "dev", "hello-2")
                .map(|stats| stats.held),
            Some(1),
            "the figures that came with the signal"
        );
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

fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// A `runway-ingress` process on `state` serving HTTPS (plain HTTP redirects to it) from two
/// event loops, fed on its control socket; killed when dropped. Its stderr is passed on, and
/// [`Process::kill`] fails the test if it says a thread panicked (a panicking task ends alone,
/// and the ingress goes on serving without what it did).
struct Process {
    child: tokio::process::Child,
    http: SocketAddr,
    https: SocketAddr,
    panicked: Arc<std::sync::atomic::AtomicBool>,
}

impl Process {
    async fn start(state: &Path, ca: &Path) -> Self {
        let (http, https, admin) = (free_port(), free_port(), free_port());
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_runway-ingress"))
            .arg("--state-dir")
            .arg(state)
            .arg("--ca-dir")
            .arg(ca)
            .args(["--listen", &http.to_string(), "--admin", &admin.to_string()])
            .args(["--https", &https.to_string()])
            .args(["--event-loops", "2", "--threads", "1"])
            .args(["--shutdown-grace-seconds", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let panicked = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let seen = Arc::clone(&panicked);
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("{line}");
                if line.contains("panicked at") {
                    seen.store(true, std::sync::atomic::Ordering::Release);
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let answered = async || ControlClient::new(state).hello().await.ok().map(|h| h.pid);
        while answered().await != child.id() {
            assert!(Instant::now() < deadline, "the ingress never answered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self {
            child,
            http,
            https,
            panicked,
        }
    }

    /// SIGKILL, and waits for it to be gone; fails if it panicked meanwhile.
    async fn kill(mut self) {
        self.child.kill().await.unwrap();
        assert!(
            !self.panicked.load(std::sync::atomic::Ordering::Acquire),
            "the ingress panicked (its stderr is above)"
        );
    }
}

/// `GET /` over HTTPS to `name`, trusting only `ca_pem`: the response, or the handshake's
/// error.
async fn get_https(address: SocketAddr, ca_pem: &str, name: &str) -> std::io::Result<String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let server_name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
    let mut stream = connector
        .connect(server_name, TcpStream::connect(address).await?)
        .await?;
    let request = format!("GET / HTTP/1.1\r\nhost: {name}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response).await;
    Ok(response)
}

/// An authority of its own (as an ACME directory's) and a certificate it issued for `name`,
/// as a table carries it.
fn issued(name: &str) -> (String, runway_ingress::TableCertificate) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let certificate = runway_ingress::TableCertificate {
        domains: vec![name.to_owned()],
        cert_pem: format!("{}{}", cert.pem(), ca_cert.pem()),
        key_pem: key.serialize_pem(),
    };
    (ca_cert.pem(), certificate)
}

/// A table with a certificate and an HTTP-01 challenge, set on the control socket: in force
/// (the certificate served by SNI, the challenge answered where plain HTTP redirects), saved
/// `0600` since it holds the key, and served again, certificate and all, by the ingress
/// started anew on that state directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_and_challenges_are_saved_privately_and_served_after_a_restart() {
    tokio::time::timeout(BOUND, async {
        let dir = tempfile::tempdir().unwrap();
        let (state, ca) = (dir.path().join("state"), dir.path().join("ca"));
        let instance = upstream().await;
        let mut routes = table("hello-1", 100, instance, true);
        routes.routes[0].domains = vec!["shop.example.test".to_owned()];
        let (authority, certificate) = issued("shop.example.test");
        routes.certificates = vec![certificate.clone()];
        let token = "jwQ5qsXx0v4RW0wKz4YQ2MaNwxmB1T6c4LvkM9b0q2k";
        let authorization = format!("{token}.9jg46WB3rR_AHD-EBXdN7cBkH1WOu0tA3M9fm21mqTI");
        routes
            .acme
            .http01
            .insert(token.to_owned(), authorization.clone());

        let first = Process::start(&state, &ca).await;
        ControlClient::new(&state)
            .set_routes(&routes)
            .await
            .unwrap();
        let response = get_https(first.https, &authority, "shop.example.test")
            .await
            .unwrap();
        assert!(
            response.starts_with("HTTP/1.1 200") && response.ends_with("ok"),
            "{response}"
        );
        let mut plain = TcpStream::connect(first.http).await.unwrap();
        let challenge = format!(
            "GET /.well-known/acme-challenge/{token} HTTP/1.1\r\nhost: shop.example.test\r\n\
             connection: close\r\n\r\n"
        );
        plain.write_all(challenge.as_bytes()).await.unwrap();
        let mut answer = String::new();
        plain.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            answer.ends_with(&format!("\r\n\r\n{authorization}")),
            "{answer}"
        );

        // Saved for the owner alone, keys and all.
        {
            use std::os::unix::fs::PermissionsExt;
            let saved = state.join(control::TABLE_FILE);
            let mode = std::fs::metadata(&saved).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            let text = std::fs::read_to_string(&saved).unwrap();
            assert!(text.contains("PRIVATE KEY"));
            assert_eq!(control::load_table(&state).unwrap(), Some(routes.clone()));
        }

        // Killed (no time to say anything) and started again: the saved table is served,
        // its certificate too, with no control plane.
        first.kill().await;
        let again = Process::start(&state, &ca).await;
        let response = get_https(again.https, &authority, "shop.example.test")
            .await
            .unwrap();
        assert!(
            response.starts_with("HTTP/1.1 200") && response.ends_with("ok"),
            "{response}"
        );
        let hello = ControlClient::new(&state).hello().await.unwrap();
        assert_eq!(hello.table.certificates, vec![certificate]);
        again.kill().await;
    })
    .await
    .unwrap();
}
