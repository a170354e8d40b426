//! The fixture: a server on a loopback port, a client, a fake platform.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use runway_api::types::{Condition, InstanceView, LogLine, RevisionStatus, RouteView, Stream};
use runway_api::{
    ApiState, BoxFuture, Limits, Platform, ResolvedImage, ServeOptions, SourceRefused, StatusParts,
};
use runway_secrets::{MasterKey, Sealer};
use runway_store::{SqliteStore, Store};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// The largest code snapshot the test servers take.
pub(crate) const SOURCE_LIMIT: u64 = 1 << 20;

/// A platform of plain values.
#[derive(Debug, Default)]
pub(crate) struct FakePlatform {
    pub(crate) wakes: AtomicUsize,
    /// Code snapshots taken, by service id and digest, with their bytes.
    pub(crate) sources: std::sync::Mutex<std::collections::BTreeMap<(i64, String), Vec<u8>>>,
}

pub(crate) fn log_line(n: usize) -> LogLine {
    LogLine {
        instance: "hello-dev-00001-3f9a1c".into(),
        time: "2026-11-21T13:50:39.123Z".into(),
        stream: Stream::Stdout,
        text: format!("line {n}"),
    }
}

impl Platform for FakePlatform {
    /// Pins a tag to `sha256:abab…`, and mirrors every image into `<service>/mirror`.
    fn resolve_image<'a>(
        &'a self,
        service: &'a str,
        reference: &'a str,
    ) -> BoxFuture<'a, Result<ResolvedImage, String>> {
        Box::pin(async move {
            if reference.contains("missing") {
                return Err("manifest unknown".to_owned());
            }
            let pinned = if reference.contains("@sha256:") {
                reference.to_owned()
            } else {
                let repo = reference.rsplit_once(':').map_or(reference, |(r, _)| r);
                format!("{repo}@sha256:{}", "ab".repeat(32))
            };
            let digest = pinned.rsplit_once('@').map_or("", |(_, d)| d);
            let mirror = Some(format!("{service}/mirror@{digest}"));
            Ok(ResolvedImage { pinned, mirror })
        })
    }

    fn url(&self, service: &str, env: &str) -> String {
        format!("https://{service}.{env}.localhost:8443/")
    }

    fn status(&self, service: &str, env: &str) -> BoxFuture<'_, StatusParts> {
        let (service, env) = (service.to_owned(), env.to_owned());
        Box::pin(async move {
            if service == "slow" {
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            }
            if service == "unreadable" {
                return StatusParts {
                    url: format!("https://{service}.{env}.localhost:8443/"),
                    warnings: vec!["instances: the runtime did not answer: gone".into()],
                    ..StatusParts::default()
                };
            }
            StatusParts {
                url: format!("https://{service}.{env}.localhost:8443/"),
                routes: vec![RouteView {
                    revision: format!("{service}-{env}-00001"),
                    weight: 100,
                }],
                revisions: vec![RevisionStatus {
                    revision: format!("{service}-{env}-00001"),
                    desired_instances: 1,
                    ready: 1,
                    starting: 0,
                    failed: 0,
                    condition: Condition::Ready,
                    reason: None,
                    traffic: None,
                }],
                instances: vec![InstanceView {
                    id: format!("{service}-{env}-00001-3f9a1c"),
                    revision: format!("{service}-{env}-00001"),
                    phase: "running".into(),
                    ready: true,
                    port: Some(8123),
                    address: Some("10.213.0.2:8123".into()),
                    restarts: 0,
                    message: String::new(),
                }],
                ..StatusParts::default()
            }
        })
    }

    fn logs(
        &self,
        _service: &str,
        _env: &str,
        _instance: Option<&str>,
        lines: usize,
        _previous: bool,
    ) -> BoxFuture<'_, Result<Vec<LogLine>, String>> {
        Box::pin(async move { Ok((0..lines.min(3)).map(log_line).collect()) })
    }

    fn follow_logs(
        &self,
        _service: &str,
        _env: &str,
        _instance: Option<&str>,
        _lines: usize,
    ) -> BoxFuture<'_, Result<mpsc::Receiver<LogLine>, String>> {
        Box::pin(async move {
            let (tx, rx) = mpsc::channel(8);
            for n in 0..3 {
                tx.send(log_line(n)).await.map_err(|e| e.to_string())?;
            }
            Ok(rx)
        })
    }

    fn source_claim(&self, service_id: i64, digest: &str) -> BoxFuture<'_, Result<bool, String>> {
        let key = (service_id, digest.to_owned());
        Box::pin(async move { Ok(self.sources.lock().unwrap().contains_key(&key)) })
    }

    fn source_share(&self, from: i64, to: i64, digest: &str) -> BoxFuture<'_, Result<(), String>> {
        let mut sources = self.sources.lock().unwrap();
        let shared = match sources.get(&(from, digest.to_owned())).cloned() {
            Some(code) => {
                sources.insert((to, digest.to_owned()), code);
                Ok(())
            }
            None => Err(format!("there is no code snapshot {digest} to share")),
        };
        Box::pin(async move { shared })
    }

    /// Takes anything but what starts with `bad`, as a snapshot that is not one.
    fn source_put(
        &self,
        service_id: i64,
        digest: &str,
        _: u64,
        mut chunks: mpsc::Receiver<Result<Bytes, String>>,
    ) -> BoxFuture<'_, Result<(), SourceRefused>> {
        let key = (service_id, digest.to_owned());
        Box::pin(async move {
            let mut bytes = Vec::new();
            while let Some(chunk) = chunks.recv().await {
                bytes.extend_from_slice(&chunk.map_err(SourceRefused::Invalid)?);
            }
            if bytes.starts_with(b"bad") {
                return Err(SourceRefused::Invalid(
                    "not a gzip-compressed tar archive".into(),
                ));
            }
            self.sources.lock().unwrap().insert(key, bytes);
            Ok(())
        })
    }

    fn wake(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }

    /// One revision of `hello` and one of `other` in dev, each serving.
    fn traffic(&self) -> Vec<runway_api::types::TrafficView> {
        ["hello", "other"]
            .map(|service| runway_api::types::TrafficView {
                service: service.to_owned(),
                env: "dev".to_owned(),
                revision: format!("{service}-dev-00001"),
                window_seconds: 60.0,
                requests_per_second: 12.5,
                error_ratio: 0.01,
                p99_seconds: Some(0.02),
            })
            .to_vec()
    }
}

/// A running server.
/// The URL of the issuer of instances' identity tokens the tests' API serves.
pub(crate) const ISSUER: &str = "https://runway.test:7443";

pub(crate) struct Server {
    pub(crate) addr: std::net::SocketAddr,
    pub(crate) admin: String,
    pub(crate) store: Arc<SqliteStore>,
    pub(crate) platform: Arc<FakePlatform>,
    pub(crate) dir: TempDir,
    /// The master key its secrets are sealed with.
    pub(crate) key: Arc<MasterKey>,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A server whose operator allows plain processes for every service (most tests deploy one).
pub(crate) async fn start() -> Server {
    start_with(Limits::default()).await
}

pub(crate) async fn start_with(limits: Limits) -> Server {
    start_new(limits, true).await
}

/// A server as configured by default: plain processes only for services an admin allowed.
pub(crate) async fn start_without_processes() -> Server {
    start_new(Limits::default(), false).await
}

/// A server that accepts the identity tokens of `verifier`'s issuers.
pub(crate) async fn start_with_oidc(verifier: runway_api::oidc::Verifier) -> Server {
    start_fresh(
        Limits::default(),
        true,
        Box::new(|state| state.oidc(verifier)),
    )
    .await
}

/// A server whose deploys read their secrets from `vault`.
pub(crate) async fn start_with_vault(vault: runway_api::vault::Vault) -> Server {
    start_fresh(
        Limits::default(),
        true,
        Box::new(|state| state.vault(vault)),
    )
    .await
}

async fn start_new(limits: Limits, allow_processes: bool) -> Server {
    start_fresh(limits, allow_processes, Box::new(|state| state)).await
}

/// The environments of a test server.
const ENVIRONMENTS: [&str; 3] = ["dev", "staging", "production"];

/// A server with previews (`preview` among its environments), living and capped as
/// `previews` says, accepting the identity tokens of `verifier` when given.
pub(crate) async fn start_with_previews(
    previews: runway_api::config::PreviewsConfig,
    verifier: Option<runway_api::oidc::Verifier>,
) -> Server {
    start_in(
        &["dev", "staging", "production", "preview"],
        Limits::default(),
        true,
        Box::new(move |state| {
            let state = state.previews(previews);
            match verifier {
                Some(verifier) => state.oidc(verifier),
                None => state,
            }
        }),
    )
    .await
}

/// What a test sets on the state beyond the defaults.
type Configure = Box<dyn FnOnce(ApiState) -> ApiState + Send>;

/// A server over a new store, with a new admin token and master key.
async fn start_fresh(limits: Limits, allow_processes: bool, configure: Configure) -> Server {
    start_in(&ENVIRONMENTS, limits, allow_processes, configure).await
}

/// [`start_fresh`] with these environments.
async fn start_in(
    environments: &[&str],
    limits: Limits,
    allow_processes: bool,
    configure: Configure,
) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("runway.db")).unwrap());
    let admin = runway_api::bootstrap_admin(store.as_ref())
        .unwrap()
        .unwrap();
    let key = Arc::new(MasterKey::generate().unwrap());
    serve_with(
        dir,
        store,
        key,
        admin.expose().to_owned(),
        environments,
        limits,
        allow_processes,
        configure,
    )
    .await
}

/// A second server over the same database file and master key, as another replica of the
/// control plane would be: its own store handle and its own state.
pub(crate) async fn replica_of(server: &Server) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(server.dir.path().join("runway.db")).unwrap());
    serve_with(
        dir,
        store,
        Arc::clone(&server.key),
        server.admin.clone(),
        &ENVIRONMENTS,
        Limits::default(),
        true,
        Box::new(|state| state),
    )
    .await
}

#[allow(
    clippy::too_many_arguments,
    reason = "a test helper, each caller names every setting"
)]
async fn serve_with(
    dir: TempDir,
    store: Arc<SqliteStore>,
    key: Arc<MasterKey>,
    admin: String,
    environments: &[&str],
    limits: Limits,
    allow_processes: bool,
    configure: Configure,
) -> Server {
    let platform = Arc::new(FakePlatform::default());
    let state = ApiState::new(
        Arc::clone(&store) as Arc<dyn Store>,
        Arc::clone(&platform) as Arc<dyn Platform>,
        Sealer::new(&key),
        environments.iter().map(|e| (*e).to_owned()).collect(),
    )
    .allow_processes(allow_processes)
    .max_source_bytes(SOURCE_LIMIT)
    .identity_issuer(Some(ISSUER.to_owned()));
    let state = configure(state);
    let router = runway_api::router(state, limits);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(runway_api::serve(
        listener,
        router,
        None,
        ServeOptions::default(),
        async move {
            let _ = stopped.await;
        },
    ));
    Server {
        addr,
        admin,
        store,
        platform,
        dir,
        key,
        stop: Some(stop),
    }
}

/// An answer: status, content type, body (JSON when it parses, else a string).
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) request_id: String,
    pub(crate) content_type: String,
    pub(crate) text: String,
    pub(crate) body: Value,
}

impl Answer {
    pub(crate) fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
    pub(crate) fn field(&self) -> &str {
        self.body["error"]["field"].as_str().unwrap_or("")
    }
    pub(crate) fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }
}

impl Server {
    pub(crate) async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        let bytes = body.map(|b| serde_json::to_vec(&b).unwrap());
        self.raw(method, path, token, bytes).await
    }

    pub(crate) async fn raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Answer {
        let stream = TcpStream::connect(self.addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut request = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(path)
            .header("host", "localhost");
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let request_id = response
            .headers()
            .get(runway_api::X_REQUEST_ID)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer {
            status,
            request_id,
            content_type,
            text,
            body,
        }
    }

    /// As the admin, expecting `status`.
    pub(crate) async fn admin(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        status: u16,
    ) -> Value {
        let answer = self.call(method, path, Some(&self.admin), body).await;
        assert_eq!(
            answer.status.as_u16(),
            status,
            "{method} {path}: {}",
            answer.text
        );
        answer.body
    }

    /// Uploads `bytes` as `service`'s code snapshot `digest` (through dev), as the admin.
    pub(crate) async fn upload(&self, service: &str, digest: &str, bytes: &[u8]) -> Answer {
        self.raw(
            "PUT",
            &format!("/v1/services/{service}/environments/dev/sources/{digest}"),
            Some(&self.admin),
            Some(bytes.to_vec()),
        )
        .await
    }

    /// Carries deployment `id` to its end, as the reconciler would: progressing, then
    /// succeeded.
    pub(crate) fn finish(&self, id: i64) {
        for state in [
            runway_store::DeploymentState::Progressing,
            runway_store::DeploymentState::Succeeded,
        ] {
            self.store
                .deployment_transition("reconciler", id, state, None)
                .unwrap();
        }
    }

    /// Onboards `name` in every environment.
    pub(crate) async fn onboard(&self, name: &str) {
        self.admin(
            "POST",
            "/v1/services",
            Some(json!({"name": name, "owners": ["alice"]})),
            201,
        )
        .await;
    }

    /// A deploy token for `service` in `envs`.
    pub(crate) async fn deploy_token(
        &self,
        service: &str,
        envs: &[&str],
        expires: Option<u64>,
    ) -> String {
        let mut body = json!({"name": format!("ci for {service}"),
            "scope": {"deploy": {"service": service, "environments": envs}}});
        if let Some(seconds) = expires {
            body["expires_in_seconds"] = json!(seconds);
        }
        let created = self.admin("POST", "/v1/tokens", Some(body), 201).await;
        created["token"].as_str().unwrap().to_owned()
    }
}

/// A valid manifest for `name`.
pub(crate) fn manifest(name: &str) -> Value {
    json!({
        "apiVersion": "runway/v1",
        "kind": "RunwayService",
        "metadata": {"name": name},
        "spec": {
            "container_port": 8080,
            "image": format!("registry.local/{name}:1"),
            "scalability": {"min_instances": 2}
        }
    })
}

pub(crate) fn deploy_body(name: &str) -> Value {
    json!({"manifest": manifest(name), "env_vars": {"GREETING": "hi"}})
}

/// [`deploy_body`] with a manifest that uses these secrets (`spec.workload.secrets`).
pub(crate) fn deploy_body_with_secrets(name: &str, secrets: &[&str]) -> Value {
    let mut body = deploy_body(name);
    body["manifest"]["spec"]["workload"] = json!({ "secrets": secrets });
    body
}
