//! The fixture: a registry in a temporary directory behind a test authorizer that checks
//! `Authorization: Basic`, driven in-process (`send`) or served on loopback (`Served`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt as _;
use runway_registry::{
    Access, Authorizer, Digest, Limits, OCI_MANIFEST, Refusal, Registry, router,
};
use serde_json::json;
use tower::ServiceExt as _;

/// `admin` may do anything; `alice` and `bob` push and pull below `alice/` and `bob/`;
/// `reader` pulls anything; `ci` pushes and pulls `ci/app` only.
pub const ADMIN: &str = "admin:admin-secret";
pub const ALICE: &str = "alice:alice-secret";
pub const BOB: &str = "bob:bob-secret";
pub const READER: &str = "reader:reader-secret";

#[derive(Debug)]
pub struct TestAuth {
    users: HashMap<&'static str, &'static str>,
}

impl TestAuth {
    pub fn new() -> TestAuth {
        let users = [ADMIN, ALICE, BOB, READER]
            .into_iter()
            .filter_map(|credentials| credentials.split_once(':'))
            .collect();
        TestAuth { users }
    }

    fn user(&self, headers: &HeaderMap) -> Option<&'static str> {
        let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
        let encoded = value.strip_prefix("Basic ")?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        let (user, password) = decoded.split_once(':')?;
        let (&known, &expected) = self.users.get_key_value(user)?;
        (expected == password).then_some(known)
    }
}

impl Authorizer for TestAuth {
    async fn authorize(
        &self,
        headers: &HeaderMap,
        repository: Option<&str>,
        access: Access,
    ) -> Result<(), Refusal> {
        let user = self.user(headers).ok_or(Refusal::Unauthenticated)?;
        let Some(repository) = repository else {
            return Ok(());
        };
        let allowed = match user {
            "admin" => true,
            "reader" => access == Access::Pull,
            own => repository.starts_with(&format!("{own}/")),
        };
        if allowed {
            Ok(())
        } else {
            Err(Refusal::Denied(format!(
                "{user} may not {access:?} {repository}"
            )))
        }
    }
}

pub fn basic(credentials: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    )
}

#[derive(Debug)]
pub struct Fixture {
    /// Holds `root` and nothing else: a test checks nothing escaped into it.
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub registry: Arc<Registry>,
    pub app: Router,
}

pub fn fixture() -> Fixture {
    fixture_with(Limits::default())
}

pub fn fixture_with(limits: Limits) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("registry");
    let registry = Arc::new(Registry::open(&root, limits).expect("open"));
    let app = router(registry.clone(), Arc::new(TestAuth::new()));
    Fixture {
        dir,
        root,
        registry,
        app,
    }
}

/// An answer, read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The first error code of an OCI error body.
    pub fn code(&self) -> String {
        let value: serde_json::Value = serde_json::from_slice(&self.body).unwrap_or_default();
        value["errors"][0]["code"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// One request through the router in-process.
pub async fn send(
    app: &Router,
    method: Method,
    uri: &str,
    credentials: Option<&str>,
    headers: &[(&str, &str)],
    body: impl Into<Body>,
) -> Answer {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(credentials) = credentials {
        request = request.header("authorization", basic(credentials));
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(body.into()).expect("request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// Pushes `bytes` as a blob of `repository` in one request; returns its digest.
pub async fn push_blob(app: &Router, credentials: &str, repository: &str, bytes: &[u8]) -> Digest {
    let digest = Digest::of(bytes);
    let answer = send(
        app,
        Method::POST,
        &format!("/v2/{repository}/blobs/uploads/?digest={digest}"),
        Some(credentials),
        &[],
        bytes.to_vec(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
    digest
}

pub const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
pub const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

pub fn descriptor(media_type: &str, bytes: &[u8]) -> serde_json::Value {
    json!({ "mediaType": media_type, "digest": Digest::of(bytes), "size": bytes.len() })
}

pub fn image_manifest(config: &[u8], layers: &[&[u8]]) -> Vec<u8> {
    json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": descriptor(CONFIG_TYPE, config),
        "layers": layers.iter().map(|l| descriptor(LAYER_TYPE, l)).collect::<Vec<_>>(),
    })
    .to_string()
    .into_bytes()
}

/// Pushes a config and a layer and a manifest under `tag`; returns the manifest's bytes.
pub async fn push_image(
    app: &axum::Router,
    credentials: &str,
    repository: &str,
    tag: &str,
    seed: &str,
) -> Vec<u8> {
    let config = format!("{{\"seed\":\"{seed}\"}}").into_bytes();
    let layer = format!("layer of {seed}").into_bytes();
    push_blob(app, credentials, repository, &config).await;
    push_blob(app, credentials, repository, &layer).await;
    let manifest = image_manifest(&config, &[&layer]);
    let put = send(
        app,
        Method::PUT,
        &format!("/v2/{repository}/manifests/{tag}"),
        Some(credentials),
        &[("content-type", OCI_MANIFEST)],
        manifest.clone(),
    )
    .await;
    assert_eq!(put.status, StatusCode::CREATED, "{put:?}");
    manifest
}

/// Every file and directory below `dir`, relative.
pub fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if let Ok(rel) = path.strip_prefix(dir) {
                out.push(rel.to_path_buf());
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The router served over plain HTTP on `127.0.0.1:<port>` by a thread of its own; stopped
/// when dropped.
#[derive(Debug)]
pub struct Served {
    pub port: u16,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Served {
    pub fn start(app: Router) -> Served {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .await
                    .expect("serve");
            });
        });
        Served {
            port,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Whether `CI=true`: a missing tool then fails the test instead of skipping it.
pub fn in_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Skips (printing why) or, under `CI=true`, fails.
pub fn skip(reason: &str) {
    assert!(!in_ci(), "{reason}");
    eprintln!("skipping: {reason}");
}

/// Runs `command` to its end within `timeout`, its output piped; kills it (only the process
/// this test started, by its id) and fails the test past the bound.
pub fn bounded(
    command: &mut std::process::Command,
    timeout: std::time::Duration,
) -> std::process::Output {
    let described = format!("{command:?}");
    let child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{described}: {e}"));
    let id = child.id();
    let (done, waited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match waited.recv_timeout(timeout) {
        Ok(output) => output.unwrap_or_else(|e| panic!("{described}: {e}")),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .arg("-9")
                .arg(id.to_string())
                .status();
            panic!("{described} took longer than {timeout:?}");
        }
    }
}
