//! The server's configuration file, and serving over TLS from the local CA.

use std::sync::Arc;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use runway_api::ApiConfig;
use tokio::net::{TcpListener, TcpStream};

#[test]
fn defaults_and_a_full_file() {
    let path = std::path::Path::new("server.yml");
    let empty = ApiConfig::parse(path, "").unwrap();
    assert_eq!(empty.listen.to_string(), "127.0.0.1:7443");
    assert!(empty.tls.enabled);
    assert_eq!(empty.environments, ["dev", "staging", "production"]);
    assert_eq!(empty.ca_dir(), empty.data_dir.join("ca"));
    let full = ApiConfig::parse(
        path,
        "listen: 0.0.0.0:9000\ndata_dir: /srv/runway\ntls:\n  enabled: false\nenvironments: [test, prod]\nlimits:\n  body_bytes: 2048\n",
    )
    .unwrap();
    assert_eq!(full.listen.port(), 9000);
    assert!(!full.tls.enabled);
    assert_eq!(full.environments, ["test", "prod"]);
    assert_eq!(full.request_limits().body_bytes, 2048);
    assert_eq!(full.serve_options().max_connections, 256);
    let budget = ApiConfig::parse(path, "limits:\n  max_connections: 64\n").unwrap();
    assert_eq!(budget.serve_options().max_connections, 64);
    let none = ApiConfig::parse(path, "limits:\n  max_connections: 0\n")
        .unwrap_err()
        .to_string();
    assert!(none.contains("limits.max_connections"), "{none}");
    let json = ApiConfig::parse(path, r#"{"listen": "127.0.0.1:1"}"#).unwrap();
    assert_eq!(json.listen.port(), 1);
}

#[test]
fn errors_name_the_file_line_and_key() {
    let path = std::path::Path::new("/etc/runway/server.yml");
    let unknown = ApiConfig::parse(path, "listen: 127.0.0.1:7443\nlimits:\n  body_byte: 10\n")
        .unwrap_err()
        .to_string();
    assert!(
        unknown.starts_with("/etc/runway/server.yml:3:"),
        "{unknown}"
    );
    assert!(unknown.contains("limits"), "{unknown}");
    assert!(
        unknown.contains("limits.body_byte: unknown field `body_byte`"),
        "{unknown}"
    );
    let wrong = ApiConfig::parse(path, "tls:\n  enabled: maybe\n")
        .unwrap_err()
        .to_string();
    assert!(
        wrong.contains(":2:") && wrong.contains("tls.enabled"),
        "{wrong}"
    );
    let invalid = ApiConfig::parse(path, "environments: [dev, Dev]\n")
        .unwrap_err()
        .to_string();
    assert!(invalid.contains("environments[1]"), "{invalid}");
    let missing = ApiConfig::load(std::path::Path::new("/nonexistent/runway.yml"))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("/nonexistent/runway.yml"), "{missing}");
}

#[tokio::test]
async fn serves_https_with_a_certificate_from_the_local_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca_dir = dir.path().join("ca");
    let tls = runway_api::tls_config(&ca_dir, &["localhost".to_owned()]).unwrap();
    let router = router_in(dir.path());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(runway_api::serve(
        listener,
        router,
        Some(tls),
        runway_api::ServeOptions::default(),
        async move {
            let _ = stopped.await;
        },
    ));

    let mut roots = rustls::RootCertStore::empty();
    let ca_pem = std::fs::read(ca_dir.join("ca.pem")).unwrap();
    use rustls::pki_types::pem::PemObject;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&ca_pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let stream = connector.connect(name, tcp).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let request = hyper::Request::get("/healthz")
        .header("host", "localhost")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], br#"{"status":"ok"}"#);
    drop(sender);

    // A second call reuses the CA, it does not make a new one.
    let again = std::fs::read(ca_dir.join("ca.pem")).unwrap();
    runway_api::tls_config(&ca_dir, &["localhost".to_owned()]).unwrap();
    assert_eq!(again, std::fs::read(ca_dir.join("ca.pem")).unwrap());

    stop.send(()).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), serving)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

/// The API's router over a store in `dir`.
fn router_in(dir: &std::path::Path) -> axum::Router {
    let store = Arc::new(runway_store::SqliteStore::open(dir.join("runway.db")).unwrap());
    let state = runway_api::ApiState::new(
        store,
        Arc::new(crate::support::FakePlatform::default()),
        runway_secrets::Sealer::new(&runway_secrets::MasterKey::generate().unwrap()),
        vec!["dev".to_owned()],
    );
    runway_api::router(state, runway_api::Limits::default())
}

/// A GET of `/healthz` on `stream`: its status, or None when the server closed it.
async fn healthz_on(stream: TcpStream) -> Option<u16> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(conn);
    let request = hyper::Request::get("/healthz")
        .header("host", "localhost")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        sender.send_request(request),
    )
    .await
    .ok()?
    .ok()?;
    Some(response.status().as_u16())
}

#[tokio::test]
async fn connections_past_the_budget_are_closed_at_accept_and_the_api_keeps_serving() {
    use tokio::io::AsyncReadExt;
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = runway_api::ServeOptions {
        max_connections: 4,
        ..runway_api::ServeOptions::default()
    };
    let serving = tokio::spawn(runway_api::serve(
        listener,
        router_in(dir.path()),
        None,
        options,
        async move {
            let _ = stopped.await;
        },
    ));
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(TcpStream::connect(addr).await.unwrap());
        }
        for _ in 0..10 {
            let mut refused = TcpStream::connect(addr).await.unwrap();
            let mut byte = [0u8; 1];
            let read =
                tokio::time::timeout(std::time::Duration::from_secs(5), refused.read(&mut byte))
                    .await;
            assert!(matches!(read, Ok(Ok(0) | Err(_))), "{read:?}");
        }
        // A connection within the budget is served; once the flood is gone, new ones are.
        assert_eq!(healthz_on(held.pop().unwrap()).await, Some(200));
        drop(held);
        let mut served = None;
        for _ in 0..100 {
            served = healthz_on(TcpStream::connect(addr).await.unwrap()).await;
            if served.is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(served, Some(200));
    })
    .await
    .unwrap();
    stop.send(()).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), serving)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
