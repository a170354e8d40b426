//! The control-plane commands (`login`, `services`, `deploy`, `status`, `logs`, `secrets`, ...)
//! run as a user runs them, against a fake control plane on loopback that answers the
//! contract's routes with canned values and records every request it gets.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

/// Every CLI run in these tests ends within this, or the test fails.
const LIMIT: Duration = Duration::from_secs(30);
const TOKEN: &str = "runway_admin_test0123456789";

/// One request as the fake server received it.
#[derive(Debug, Clone)]
struct Recorded {
    method: String,
    path: String,
    query: String,
    auth: Option<String>,
    body: Vec<u8>,
}

impl Recorded {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// What the fake answers.
enum Reply {
    Json(u16, Value),
    Empty(u16),
    /// NDJSON lines, each after a pause.
    Stream(Vec<(Duration, String)>),
}

type Handler = Box<dyn FnMut(&Recorded) -> Reply + Send>;

struct Shared {
    requests: Mutex<Vec<Recorded>>,
    handler: Mutex<Handler>,
}

/// The fake control plane.
struct Fake {
    url: String,
    shared: Arc<Shared>,
    _rt: tokio::runtime::Runtime,
}

impl Fake {
    /// Answers with [`contract`], unless `custom` returns a reply first.
    fn start(mut custom: impl FnMut(&Recorded) -> Option<Reply> + Send + 'static) -> Self {
        let handler: Handler = Box::new(move |r| custom(r).unwrap_or_else(|| contract(r)));
        let shared = Arc::new(Shared {
            requests: Mutex::new(Vec::new()),
            handler: Mutex::new(handler),
        });
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        rt.spawn(async move { axum::serve(listener, app).await });
        Self {
            url: format!("http://{addr}"),
            shared,
            _rt: rt,
        }
    }

    fn contract() -> Self {
        Self::start(|_| None)
    }

    fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The requests other than `GET`s of deployments and events (the polling).
    fn find(&self, method: &str, path: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path == path)
            .collect()
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let recorded = Recorded {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or_default().to_owned(),
        auth: parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: body.to_vec(),
    };
    shared.requests.lock().unwrap().push(recorded.clone());
    let reply = if recorded.auth.as_deref() == Some(&format!("Bearer {TOKEN}"))
        || recorded.auth.as_deref() == Some("Bearer runway_deploy_other")
    {
        (shared.handler.lock().unwrap())(&recorded)
    } else {
        error(401, "unauthorized", "missing or invalid token", None)
    };
    let builder = Response::builder();
    match reply {
        Reply::Json(status, value) => builder
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(value.to_string()))
            .unwrap(),
        Reply::Empty(status) => builder.status(status).body(Body::empty()).unwrap(),
        Reply::Stream(lines) => {
            let stream = futures_util::stream::unfold(lines.into_iter(), |mut lines| async move {
                let (pause, line) = lines.next()?;
                tokio::time::sleep(pause).await;
                Some((
                    Ok::<_, std::io::Error>(Bytes::from(format!("{line}\n"))),
                    lines,
                ))
            });
            builder
                .status(StatusCode::OK)
                .header("content-type", "application/x-ndjson")
                .body(Body::from_stream(stream))
                .unwrap()
        }
    }
}

fn error(status: u16, code: &str, message: &str, field: Option<&str>) -> Reply {
    Reply::Json(
        status,
        json!({"error": {"code": code, "message": message, "field": field}}),
    )
}

fn deployment(id: u64, state: &str, reason: Option<&str>) -> Value {
    json!({
        "id": id, "service": "hello", "env": "dev", "kind": "deploy",
        "from_revision": "hello-dev-00001", "to_revision": "hello-dev-00002",
        "state": state, "reason": reason, "created_by": "admin",
        "created_at": "2026-11-21T14:00:00Z", "updated_at": "2026-11-21T14:00:01Z"
    })
}

fn event(n: u64, message: &str) -> Value {
    json!({"deployment_id": 7, "at": format!("2026-11-21T14:00:{n:02}.5Z"), "message": message})
}

/// Canned answers for the contract's routes.
fn contract(r: &Recorded) -> Reply {
    let segments: Vec<&str> = r.path.trim_start_matches('/').split('/').collect();
    match (r.method.as_str(), segments.as_slice()) {
        ("GET", ["v1", "whoami"]) => Reply::Json(
            200,
            json!({"token_id": 1, "name": "admin", "scope": {"admin": {}}}),
        ),
        ("POST", ["v1", "services"]) => {
            let body = r.json();
            Reply::Json(
                201,
                json!({"id": 2, "name": body["name"], "owners": body["owners"],
                       "environments": body.get("environments").cloned().unwrap_or(json!(["dev", "staging", "production"])),
                       "created_at": "2026-11-21T14:00:00Z", "created_by": "admin",
                       "allow_processes": false}),
            )
        }
        ("GET", ["v1", "services"]) => Reply::Json(
            200,
            json!([{"id": 1, "name": "hello", "owners": ["a@example.com"], "environments": ["dev", "staging"],
                    "created_at": "2026-11-21T14:00:00Z", "created_by": "admin",
                    "allow_processes": false}]),
        ),
        ("DELETE", ["v1", "services", name]) => Reply::Json(200, json!({"decommissioned": name})),
        ("POST", ["v1", "services", _, "environments", _, "deployments"]) => {
            Reply::Json(202, deployment(7, "pending", None))
        }
        ("GET", ["v1", "services", _, "environments", _, "deployments"]) => {
            Reply::Json(200, json!([deployment(7, "succeeded", None)]))
        }
        ("GET", ["v1", "deployments", "7"]) => Reply::Json(200, deployment(7, "succeeded", None)),
        ("GET", ["v1", "deployments", "7", "events"]) => {
            let all = [
                event(1, "revision hello-dev-00002 recorded"),
                event(2, "instance hello-dev-00002-3f9a1c is ready"),
            ];
            let after: usize = r
                .query
                .strip_prefix("after=")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            Reply::Json(200, Value::Array(all.into_iter().skip(after).collect()))
        }
        ("GET", ["v1", "services", _, "environments", _, "revisions"]) => Reply::Json(
            200,
            json!([{"name": "hello-dev-00002", "number": 2, "service": "hello", "env": "dev",
                    "image": "reg/hello@sha256:abc", "source": null, "env_vars": {"A": "1"},
                    "secret_versions": {"DB_PASSWORD": 3}, "created_by": "admin",
                    "created_at": "2026-11-21T14:00:00Z", "manifest": {}}]),
        ),
        ("POST", ["v1", "services", _, "environments", _, "rollback"]) => {
            let mut d = deployment(8, "pending", None);
            d["kind"] = json!("rollback");
            Reply::Json(202, d)
        }
        ("POST", ["v1", "services", _, "promote"]) => {
            let mut d = deployment(9, "pending", None);
            d["kind"] = json!("promote");
            d["env"] = json!("staging");
            d["to_revision"] = json!("hello-staging-00001");
            Reply::Json(202, d)
        }
        ("GET", ["v1", "services", _, "environments", _, "status"]) => Reply::Json(
            200,
            json!({"service": "hello", "env": "dev", "url": "https://hello.dev.localhost:8443/",
                   "desired": [{"revision": "hello-dev-00002", "instances": 1, "weight": 100}],
                   "routes": [{"revision": "hello-dev-00002", "weight": 100}],
                   "revisions": [{"revision": "hello-dev-00002", "desired_instances": 1, "ready": 1,
                                  "starting": 0, "failed": 0, "condition": "ready", "reason": null},
                                 {"revision": "hello-dev-00001", "desired_instances": 0, "ready": 0,
                                  "starting": 0, "failed": 0, "condition": "ready", "reason": null}],
                   "instances": [{"id": "hello-dev-00002-3f9a1c", "revision": "hello-dev-00002",
                                  "phase": "running", "ready": true, "port": 8123,
                                  "address": "10.213.0.2:8123", "restarts": 0,
                                  "message": "ready"}],
                   "warnings": ["rollout: the store did not answer"]}),
        ),
        ("GET", ["v1", "services", _, "environments", _, "logs"]) => {
            let line = |n: u32| {
                json!({"instance": "hello-dev-00002-3f9a1c", "time": "2026-11-21T14:00:00Z",
                       "stream": "stdout", "text": format!("line {n}")})
            };
            if r.query.contains("follow=true") {
                Reply::Stream(vec![
                    (Duration::ZERO, line(1).to_string()),
                    (Duration::from_millis(300), line(2).to_string()),
                ])
            } else {
                Reply::Json(200, json!([line(1), line(2)]))
            }
        }
        ("PUT", ["v1", "services", _, "environments", _, "secrets", name]) => Reply::Json(
            200,
            json!({"name": name, "version": 4, "created_by": "admin", "created_at": "2026-11-21T14:00:00Z"}),
        ),
        ("GET", ["v1", "services", _, "environments", _, "secrets"]) => Reply::Json(
            200,
            json!([{"name": "DB_PASSWORD", "version": 3, "created_by": "admin", "created_at": "2026-11-21T14:00:00Z"}]),
        ),
        ("DELETE", ["v1", "services", _, "environments", _, "secrets", _]) => Reply::Empty(204),
        _ => error(404, "not_found", &format!("no route {}", r.path), None),
    }
}

/// A finished CLI run.
#[derive(Debug)]
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// How a test runs the CLI: its config file, home, and environment.
struct Cli {
    home: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Cli {
    /// Logged in through the environment to `fake`.
    fn env(fake: &Fake) -> Self {
        let mut cli = Self::bare();
        cli.env.push(("RUNWAY_SERVER".into(), fake.url.clone()));
        cli.env.push(("RUNWAY_TOKEN".into(), TOKEN.into()));
        cli
    }

    /// With no settings at all.
    fn bare() -> Self {
        Self {
            home: tempfile::tempdir().unwrap(),
            env: Vec::new(),
        }
    }

    fn config(&self) -> PathBuf {
        self.home.path().join("config/runway.json")
    }

    fn command(&self, args: &[&str], dir: &Path) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_runway"));
        command
            .args(args)
            .current_dir(dir)
            .env("HOME", self.home.path())
            .env("RUNWAY_CONFIG", self.config())
            .env_remove("RUNWAY_SERVER")
            .env_remove("RUNWAY_TOKEN")
            .env_remove("RUNWAY_CA")
            .env_remove("XDG_CONFIG_HOME")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    fn run(&self, args: &[&str]) -> Ran {
        self.run_in(args, self.home.path(), None)
    }

    fn run_in(&self, args: &[&str], dir: &Path, stdin: Option<&str>) -> Ran {
        let mut child = self
            .command(args, dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).unwrap();
        }
        drop(input);
        let out = read_all(child.stdout.take().unwrap());
        let err = read_all(child.stderr.take().unwrap());
        let deadline = Instant::now() + LIMIT;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "runway {args:?} ran past {LIMIT:?}; stderr: {}",
                    err.recv().unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Ran {
            code: status.code(),
            stdout: out.recv_timeout(LIMIT).unwrap(),
            stderr: err.recv_timeout(LIMIT).unwrap(),
        }
    }
}

fn read_all(mut from: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = from.read_to_string(&mut text);
        let _ = tx.send(text);
    });
    rx
}

/// A repository with one service, `hello`, with a staging override, staging variables and a
/// secret it names.
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let runway = dir.path().join(".runway");
    std::fs::create_dir(&runway).unwrap();
    std::fs::write(
        runway.join("runway.yml"),
        "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: hello\nspec:\n  container_port: 8080\n  image: registry.example.com/hello:1.0\n  scalability:\n    min_instances: 1\n    max_instances: 4\n  workload:\n    env:\n      GREETING: hi\n    secrets: [DB_PASSWORD]\n",
    )
    .unwrap();
    std::fs::write(
        runway.join("runway-staging.yml"),
        "spec:\n  scalability:\n    max_instances: 7\n",
    )
    .unwrap();
    std::fs::write(
        runway.join("env-staging.yml"),
        "LOG_LEVEL: debug\nWORKERS: 3\n",
    )
    .unwrap();
    dir
}

#[test]
fn login_checks_the_token_saves_it_0600_and_the_environment_overrides_it() {
    let fake = Fake::contract();
    let cli = Cli::bare();

    let bad = cli.run_in(
        &["login", "--server", &fake.url, "--token", "-"],
        cli.home.path(),
        Some("runway_admin_wrong\n"),
    );
    assert_eq!(bad.code, Some(1), "{bad:?}");
    assert!(bad.stderr.contains("missing or invalid token"), "{bad:?}");
    assert!(!cli.config().exists(), "nothing saved for a refused token");
    // With --output json, the failure is also one JSON document on stdout, for scripts.
    let bad = cli.run_in(
        &[
            "login", "--server", &fake.url, "--token", "-", "--output", "json",
        ],
        cli.home.path(),
        Some("runway_admin_wrong\n"),
    );
    assert_eq!(bad.code, Some(1), "{bad:?}");
    let answer: Value = serde_json::from_str(&bad.stdout).unwrap();
    assert_eq!(answer["error"]["status"], 401, "{answer:#}");
    assert_eq!(answer["error"]["code"], "unauthorized", "{answer:#}");
    assert_eq!(
        answer["error"]["server_message"], "missing or invalid token",
        "{answer:#}"
    );
    assert!(bad.stderr.contains("missing or invalid token"), "{bad:?}");

    let ran = cli.run_in(
        &["login", "--server", &fake.url, "--token", "-"],
        cli.home.path(),
        Some(&format!("{TOKEN}\n")),
    );
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(ran.stdout.contains("logged in to"), "{ran:?}");
    assert!(ran.stdout.contains("as admin (admin)"), "{ran:?}");
    assert!(!ran.stdout.contains(TOKEN) && !ran.stderr.contains(TOKEN));
    let whoami = fake.find("GET", "/v1/whoami");
    assert_eq!(
        whoami.last().unwrap().auth.as_deref(),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    let meta = std::fs::metadata(cli.config()).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let saved: Value = serde_json::from_slice(&std::fs::read(cli.config()).unwrap()).unwrap();
    assert_eq!(saved["server"], fake.url.as_str());
    assert_eq!(saved["token"], TOKEN);
    let leftovers: Vec<_> = std::fs::read_dir(cli.config().parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "no temporary file left: {leftovers:?}");

    // The saved settings are used...
    let ran = cli.run(&["services", "list"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(ran.stdout.contains("hello"), "{ran:?}");

    // ...and the environment overrides them.
    let mut other = Cli::bare();
    std::fs::create_dir_all(other.config().parent().unwrap()).unwrap();
    std::fs::copy(cli.config(), other.config()).unwrap();
    other
        .env
        .push(("RUNWAY_TOKEN".into(), "runway_deploy_other".into()));
    let ran = other.run(&["services", "list", "--output", "json"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert_eq!(
        fake.requests().last().unwrap().auth.as_deref(),
        Some("Bearer runway_deploy_other")
    );
    let list: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(list[0]["name"], "hello");

    // A server that is not there: its URL, and `runway login`.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    other.env.push(("RUNWAY_SERVER".into(), dead_url.clone()));
    let ran = other.run(&["services", "list"]);
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(ran.stderr.contains(&dead_url), "{ran:?}");
    assert!(ran.stderr.contains("runway login"), "{ran:?}");
}

#[test]
fn without_settings_the_error_says_to_log_in_and_plain_http_is_loopback_only() {
    let cli = Cli::bare();
    let ran = cli.run(&["status", "--service", "hello"]);
    assert_eq!(ran.code, Some(2), "{ran:?}");
    assert!(ran.stderr.contains("not logged in"), "{ran:?}");
    assert!(ran.stderr.contains("runway login"), "{ran:?}");

    let ran = cli.run_in(
        &[
            "login",
            "--server",
            "http://runway.example.com",
            "--token",
            "-",
        ],
        cli.home.path(),
        Some("x\n"),
    );
    assert_eq!(ran.code, Some(2), "{ran:?}");
    assert!(ran.stderr.contains("plain HTTP"), "{ran:?}");
}

#[test]
fn services_are_created_listed_and_deleted_with_confirmation() {
    let fake = Fake::contract();
    let cli = Cli::env(&fake);

    let ran = cli.run(&[
        "services",
        "create",
        "shop",
        "--owner",
        "a@example.com",
        "--owner",
        "b@example.com",
        "--env",
        "dev",
        "--env",
        "staging",
    ]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(
        ran.stdout
            .contains("created service shop (environments: dev, staging"),
        "{ran:?}"
    );
    let sent = fake.find("POST", "/v1/services")[0].json();
    assert_eq!(
        sent,
        json!({"name": "shop", "owners": ["a@example.com", "b@example.com"], "environments": ["dev", "staging"]})
    );
    let ran = cli.run(&["services", "create", "all-envs", "--output", "json"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(
        fake.find("POST", "/v1/services")[1]
            .json()
            .get("environments")
            .is_none()
    );
    let created: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(created["name"], "all-envs");

    let ran = cli.run(&["services", "list"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let header: Vec<&str> = ran
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "ENVIRONMENTS", "OWNERS", "TEAM", "CREATED"]
    );

    // A wrong name typed: nothing sent.
    let ran = cli.run_in(
        &["services", "delete", "hello"],
        cli.home.path(),
        Some("helo\n"),
    );
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(ran.stderr.contains("Type its name"), "{ran:?}");
    assert!(fake.find("DELETE", "/v1/services/hello").is_empty());

    let ran = cli.run_in(
        &["services", "delete", "hello"],
        cli.home.path(),
        Some("hello\n"),
    );
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(ran.stdout.contains("decommissioned hello"), "{ran:?}");
    assert!(
        ran.stdout.contains("with its secrets and deploy tokens"),
        "{ran:?}"
    );
    let ran = cli.run(&["services", "delete", "hello", "--yes"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let deletes = fake.find("DELETE", "/v1/services/hello");
    assert_eq!(deletes[0].query, "confirm=hello");
    assert_eq!(deletes[1].query, "confirm=hello");
}

#[test]
fn deploy_sends_the_merged_manifest_and_variables_but_no_secret_value() {
    let fake = Fake::contract();
    let mut cli = Cli::env(&fake);
    // The secret's value in the caller's environment (as `runway run` would read it) must not
    // be sent.
    cli.env.push(("DB_PASSWORD".into(), "hunter2-value".into()));
    let repo = repository();

    let ran = cli.run_in(
        &[
            "deploy",
            "--env",
            "staging",
            "--image",
            "registry.example.com/hello:2.0",
        ],
        repo.path(),
        None,
    );
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(
        ran.stdout
            .contains("deployment 7 of hello to staging: revision hello-dev-00002 (pending)"),
        "{ran:?}"
    );
    let sent = fake.find(
        "POST",
        "/v1/services/hello/environments/staging/deployments",
    );
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].auth.as_deref(),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    let body = sent[0].json();
    assert_eq!(body["manifest"]["metadata"]["name"], "hello");
    assert_eq!(
        body["manifest"]["spec"]["scalability"]["max_instances"], 7,
        "{body}"
    );
    assert_eq!(
        body["manifest"]["spec"]["scalability"]["min_instances"], 1,
        "{body}"
    );
    assert_eq!(
        body["manifest"]["spec"]["workload"]["secrets"],
        json!(["DB_PASSWORD"])
    );
    assert_eq!(
        body["env_vars"],
        json!({"LOG_LEVEL": "debug", "WORKERS": "3"})
    );
    assert_eq!(body["image"], "registry.example.com/hello:2.0");
    assert!(
        body.get("source").is_none(),
        "an image has no code to send: {body}"
    );
    assert!(
        fake.requests()
            .iter()
            .all(|r| !r.path.contains("/sources/"))
    );
    assert!(
        !String::from_utf8_lossy(&sent[0].body).contains("hunter2"),
        "no secret value is sent"
    );

    // Default environment dev: the base manifest, no variables, no image; JSON output.
    let ran = cli.run_in(&["deploy", "--output", "json"], repo.path(), None);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let printed: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(printed["id"], 7);
    assert_eq!(printed["state"], "pending");
    let body = fake.find("POST", "/v1/services/hello/environments/dev/deployments")[0].json();
    assert_eq!(body["manifest"]["spec"]["scalability"]["max_instances"], 4);
    assert_eq!(body["env_vars"], json!({}));
    assert!(body.get("image").is_none());
}

#[test]
fn a_process_service_uploads_its_code_once_then_deploys_it_by_digest() {
    let uploaded = Arc::new(Mutex::new(false));
    let fake = Fake::start({
        let uploaded = Arc::clone(&uploaded);
        move |r| {
            if !r.path.contains("/sources/") {
                return None;
            }
            let mut uploaded = uploaded.lock().unwrap();
            Some(match r.method.as_str() {
                "GET" if *uploaded => Reply::Json(200, json!({"service": "hello"})),
                "GET" => error(404, "not_found", "no such snapshot", None),
                _ => {
                    *uploaded = true;
                    Reply::Json(201, json!({"service": "hello"}))
                }
            })
        }
    });
    let cli = Cli::env(&fake);
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    std::fs::create_dir(root.join(".runway")).unwrap();
    std::fs::write(
        root.join(".runway/runway.yml"),
        "apiVersion: runway/v1\nkind: RunwayService\nmetadata: {name: hello}\nspec:\n  \
         container_port: 8080\n  workload:\n    process:\n      command: [python3, app.py]\n",
    )
    .unwrap();
    std::fs::write(root.join("app.py"), "print('hello')\n").unwrap();
    std::fs::write(root.join(".runwayignore"), "*.bin\n").unwrap();
    std::fs::write(root.join("weights.bin"), "big").unwrap();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::write(root.join(".git/HEAD"), "ref").unwrap();

    let ran = cli.run_in(&["deploy"], root, None);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(ran.stderr.contains("uploading code sha256:"), "{ran:?}");
    let sources = "/v1/services/hello/environments/dev/sources/";
    let puts: Vec<Recorded> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.path.starts_with(sources))
        .collect();
    assert_eq!(puts.len(), 1);
    let digest = puts[0].path.trim_start_matches(sources).to_owned();
    // What was sent is the snapshot the path names (the store checks the digest), without
    // what is ignored.
    let store_dir = tempfile::tempdir().unwrap();
    let store = runway_oci::source::SourceStore::open(store_dir.path()).unwrap();
    let snapshot = store
        .put(
            1,
            &runway_oci::Digest::parse(&digest).unwrap(),
            puts[0].body.as_slice(),
            1 << 20,
        )
        .unwrap();
    assert!(snapshot.join("app.py").is_file());
    assert!(snapshot.join(".runway/runway.yml").is_file());
    assert!(!snapshot.join("weights.bin").exists());
    assert!(!snapshot.join(".git").exists());
    let deploy = fake.find("POST", "/v1/services/hello/environments/dev/deployments");
    assert_eq!(deploy[0].json()["source"], digest.as_str());
    assert!(deploy[0].json().get("source_dir").is_none());

    // The same code again: asked for, not sent.
    let again = cli.run_in(&["deploy"], root, None);
    assert_eq!(again.code, Some(0), "{again:?}");
    assert!(again.stderr.contains("on the server already"), "{again:?}");
    let puts = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.path.starts_with(sources))
        .count();
    assert_eq!(puts, 1);
}

#[test]
fn an_invalid_manifest_is_not_sent() {
    let fake = Fake::contract();
    let cli = Cli::env(&fake);
    let repo = tempfile::tempdir().unwrap();
    std::fs::create_dir(repo.path().join(".runway")).unwrap();
    std::fs::write(
        repo.path().join(".runway/runway.yml"),
        "kind: RunwayService\nmetadata: {name: hello}\nspec:\n  container_port: 70000\n",
    )
    .unwrap();
    let ran = cli.run_in(&["deploy"], repo.path(), None);
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(ran.stderr.contains(".runway/runway.yml:4:19"), "{ran:?}");
    assert!(ran.stderr.contains("runway validate"), "{ran:?}");
    assert!(fake.requests().is_empty());
}

#[test]
fn an_api_error_prints_its_message_and_field() {
    let fake = Fake::start(|r| {
        (r.method == "POST").then(|| {
            error(
                422,
                "invalid_manifest",
                "container_port is not allowed here",
                Some("manifest.spec.container_port"),
            )
        })
    });
    let cli = Cli::env(&fake);
    let repo = repository();
    let ran = cli.run_in(&["deploy"], repo.path(), None);
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(
        ran.stderr.contains("container_port is not allowed here"),
        "{ran:?}"
    );
    assert!(
        ran.stderr.contains("manifest.spec.container_port"),
        "{ran:?}"
    );
}

#[test]
fn deploy_wait_prints_events_as_they_arrive_and_exits_0_on_success() {
    // The deployment stays progressing, with one event, until the test has seen that event
    // printed; then it gets a second event and succeeds.
    let release = Arc::new(AtomicBool::new(false));
    let polls = Arc::new(AtomicUsize::new(0));
    let (r2, p2) = (release.clone(), polls.clone());
    let fake = Fake::start(move |r| {
        let released = r2.load(Ordering::SeqCst);
        match (r.method.as_str(), r.path.as_str()) {
            ("GET", "/v1/deployments/7") => {
                p2.fetch_add(1, Ordering::SeqCst);
                Some(Reply::Json(
                    200,
                    deployment(7, if released { "succeeded" } else { "progressing" }, None),
                ))
            }
            ("GET", "/v1/deployments/7/events") => {
                let mut all = vec![event(1, "revision hello-dev-00002 recorded")];
                if released {
                    all.push(event(2, "instance hello-dev-00002-3f9a1c is ready"));
                }
                let after: usize = r.query.trim_start_matches("after=").parse().unwrap();
                Some(Reply::Json(
                    200,
                    Value::Array(all.into_iter().skip(after).collect()),
                ))
            }
            _ => None,
        }
    });
    let cli = Cli::env(&fake);
    let repo = repository();
    let mut child = cli
        .command(&["deploy", "--wait"], repo.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = read_all(child.stderr.take().unwrap());
    let (tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + LIMIT;
    let mut seen = Vec::new();
    loop {
        let line = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("no event printed; got {seen:?}"));
        let first_event = line.contains("revision hello-dev-00002 recorded");
        seen.push(line);
        if first_event {
            break;
        }
    }
    assert_eq!(
        seen.last().unwrap(),
        "14:00:01  revision hello-dev-00002 recorded"
    );
    assert!(child.try_wait().unwrap().is_none(), "still waiting");
    let polled = polls.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(1200));
    assert!(
        polls.load(Ordering::SeqCst) > polled,
        "it keeps polling while progressing"
    );
    release.store(true, Ordering::SeqCst);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "deploy --wait did not end");
        std::thread::sleep(Duration::from_millis(20));
    };
    let rest: Vec<String> = lines.iter().collect();
    let stderr = err.recv_timeout(LIMIT).unwrap();
    assert_eq!(status.code(), Some(0), "{seen:?} {rest:?} {stderr}");
    assert_eq!(
        rest[0],
        "14:00:02  instance hello-dev-00002-3f9a1c is ready"
    );
    assert!(
        rest[1].starts_with("deployment 7 succeeded in "),
        "{rest:?}"
    );
    // It ends with where the service is served, and what a `*.localhost` name needs.
    assert_eq!(rest[2], "https://hello.dev.localhost:8443/", "{rest:?}");
    assert!(
        rest[3].contains("other clients need it in /etc/hosts"),
        "{rest:?}"
    );
    assert!(!stderr.contains('⠋'), "no spinner off a terminal: {stderr}");
}

#[test]
fn a_failed_or_rolled_back_deployment_exits_1_with_its_reason_and_the_wait_is_bounded() {
    for (state, said) in [("failed", "failed"), ("rolled_back", "was rolled back")] {
        let fake = Fake::start(move |r| {
            (r.method == "GET" && r.path == "/v1/deployments/7").then(|| {
                Reply::Json(
                    200,
                    deployment(
                        7,
                        state,
                        Some("instance hello-dev-00002-3f9a1c crashed: exit 1"),
                    ),
                )
            })
        });
        let cli = Cli::env(&fake);
        let repo = repository();
        let ran = cli.run_in(&["deploy", "--wait"], repo.path(), None);
        assert_eq!(ran.code, Some(1), "{ran:?}");
        assert!(
            ran.stderr.contains(&format!(
                "deployment 7 {said}: instance hello-dev-00002-3f9a1c crashed: exit 1"
            )),
            "{ran:?}"
        );
        assert!(
            ran.stdout
                .contains("14:00:02  instance hello-dev-00002-3f9a1c is ready")
        );

        // JSON: one document on stdout, the final deployment; the events go to stderr.
        let ran = cli.run_in(&["deploy", "--wait", "--output", "json"], repo.path(), None);
        assert_eq!(ran.code, Some(1), "{ran:?}");
        let printed: Value = serde_json::from_str(&ran.stdout).unwrap();
        assert_eq!(printed["state"], state);
        assert!(ran.stderr.contains("is ready"), "{ran:?}");
    }

    let fake = Fake::start(|r| {
        (r.method == "GET" && r.path == "/v1/deployments/7")
            .then(|| Reply::Json(200, deployment(7, "progressing", None)))
    });
    let cli = Cli::env(&fake);
    let repo = repository();
    let started = Instant::now();
    let ran = cli.run_in(&["deploy", "--wait", "--timeout", "1s"], repo.path(), None);
    assert_eq!(ran.code, Some(3), "{ran:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        ran.stderr
            .contains("gave up waiting after 1s: deployment 7 is still progressing"),
        "{ran:?}"
    );
}

#[test]
fn status_revisions_rollback_promote_and_events() {
    let fake = Fake::contract();
    let cli = Cli::env(&fake);
    let repo = repository();

    // The service comes from the repository, or from --service.
    let ran = cli.run_in(&["status"], repo.path(), None);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(
        ran.stdout
            .starts_with("hello in dev: https://hello.dev.localhost:8443/\n  (")
            && ran.stdout.contains("\ntraffic: hello-dev-00002 100%\n"),
        "{ran:?}"
    );
    assert!(
        ran.stdout
            .contains("hello-dev-00002-3f9a1c  running  yes    10.213.0.2:8123"),
        "{ran:?}"
    );
    // A revision with no instance wanted says so; a part the server could not read is named.
    assert!(ran.stdout.contains("hello-dev-00001  at zero"), "{ran:?}");
    assert!(
        ran.stderr
            .contains("warning: not shown: rollout: the store did not answer"),
        "{ran:?}"
    );
    let ran = cli.run(&[
        "status",
        "--service",
        "hello",
        "--env",
        "staging",
        "--output",
        "json",
    ]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let status: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(status["instances"][0]["port"], 8123);
    assert_eq!(
        fake.requests().last().unwrap().path,
        "/v1/services/hello/environments/staging/status"
    );

    let ran = cli.run(&["revisions", "--service", "hello"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(ran.stdout.contains("hello-dev-00002"), "{ran:?}");
    assert!(ran.stdout.contains("DB_PASSWORD@3"), "{ran:?}");

    let ran = cli.run(&["rollback", "--service", "hello", "--to", "hello-dev-00001"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(
        ran.stdout.starts_with("rollback 8 of hello in dev"),
        "{ran:?}"
    );
    let sent = fake.find("POST", "/v1/services/hello/environments/dev/rollback");
    assert_eq!(sent[0].json(), json!({"to": "hello-dev-00001"}));
    let ran = cli.run(&["rollback", "--service", "hello"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let sent = fake.find("POST", "/v1/services/hello/environments/dev/rollback");
    assert_eq!(sent[1].json(), json!({}));

    let ran = cli.run(&[
        "promote",
        "--service",
        "hello",
        "--from",
        "dev",
        "--to",
        "staging",
        "--output",
        "json",
    ]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let promoted: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(promoted["kind"], "promote");
    let sent = fake.find("POST", "/v1/services/hello/promote");
    assert_eq!(sent[0].json(), json!({"from": "dev", "to": "staging"}));

    let ran = cli.run(&["events", "--deployment", "7"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(
        ran.stdout
            .contains("14:00:01  revision hello-dev-00002 recorded\n14:00:02  instance"),
        "{ran:?}"
    );
    let ran = cli.run(&["events", "--service", "hello", "--output", "json"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let events: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(events["events"].as_array().unwrap().len(), 2);
    assert_eq!(
        fake.find("GET", "/v1/services/hello/environments/dev/deployments")[0].query,
        "limit=1"
    );
}

#[test]
fn logs_show_the_last_lines_and_follow_the_stream() {
    let fake = Fake::contract();
    let cli = Cli::env(&fake);
    let ran = cli.run(&[
        "logs",
        "--service",
        "hello",
        "--lines",
        "5",
        "--instance",
        "hello-dev-00002-3f9a1c",
    ]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert_eq!(
        ran.stdout,
        "14:00:00 hello-dev-00002-3f9a1c line 1\n14:00:00 hello-dev-00002-3f9a1c line 2\n"
    );
    let sent = fake.find("GET", "/v1/services/hello/environments/dev/logs");
    assert_eq!(
        sent[0].query,
        "instance=hello-dev-00002-3f9a1c&lines=5&follow=false"
    );

    let ran = cli.run(&["logs", "--service", "hello", "-f", "--output", "json"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    // The server ended the stream: said, and not an error.
    assert!(
        ran.stderr.contains("the server ended the stream"),
        "{ran:?}"
    );
    let lines: Vec<Value> = ran
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{ran:?}");
    assert_eq!(lines[1]["text"], "line 2");
    assert!(
        fake.find("GET", "/v1/services/hello/environments/dev/logs")[1]
            .query
            .contains("follow=true")
    );

    let ran = cli.run(&["logs", "--service", "hello", "--since", "10m"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert_eq!(
        fake.find("GET", "/v1/services/hello/environments/dev/logs")[2].query,
        "since=10m&follow=false"
    );
}

/// What an app controls (its output, the events and reasons that quote it, an instance's
/// message) reaches people with its control characters shown as escapes, so a tenant cannot
/// clear, recolour or rewrite an operator's terminal; scripts (`--output json`) get it as the
/// server sent it.
#[test]
fn tenant_text_is_escaped_for_people_and_kept_as_it_is_in_json() {
    const HOSTILE: &str = "\x1b[2J\x1b[Hall is well\r";
    const SHOWN: &str = r"\x1b[2J\x1b[Hall is well\r";
    let reason = format!("hello-dev-00002 ended before it was ready\nlast output of i:\n{HOSTILE}");
    let failed = reason.clone();
    let fake = Fake::start(move |r| {
        let segments: Vec<&str> = r.path.trim_start_matches('/').split('/').collect();
        match (r.method.as_str(), segments.as_slice()) {
            ("GET", ["v1", "services", _, "environments", _, "logs"]) => {
                let line = json!({"instance": "hello-dev-00002-3f9a1c",
                    "time": "2026-11-21T14:00:00Z", "stream": "stdout", "text": HOSTILE});
                Some(if r.query.contains("follow=true") {
                    Reply::Stream(vec![(Duration::ZERO, line.to_string())])
                } else {
                    Reply::Json(200, json!([line]))
                })
            }
            ("GET", ["v1", "deployments", "7"]) => {
                Some(Reply::Json(200, deployment(7, "failed", Some(&failed))))
            }
            ("GET", ["v1", "deployments", "7", "events"]) => {
                let all = [
                    event(1, HOSTILE),
                    event(2, &format!("progressing → failed: {failed}")),
                ];
                let after: usize = r
                    .query
                    .strip_prefix("after=")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                Some(Reply::Json(
                    200,
                    Value::Array(all.into_iter().skip(after).collect()),
                ))
            }
            ("GET", ["v1", "services", _, "environments", _, "status"]) => {
                let Reply::Json(_, mut status) = contract(r) else {
                    unreachable!("the contract's status is JSON")
                };
                status["instances"][0]["message"] = json!(HOSTILE);
                Some(Reply::Json(200, status))
            }
            _ => None,
        }
    });
    let cli = Cli::env(&fake);
    let raw = |text: &str| text.contains('\x1b') || text.contains('\r');

    // The output, for people: the last lines and followed.
    for args in [
        &["logs", "--service", "hello"][..],
        &["logs", "--service", "hello", "--follow"],
    ] {
        let ran = cli.run(args);
        assert_eq!(ran.code, Some(0), "{ran:?}");
        assert_eq!(
            ran.stdout,
            format!("14:00:00 hello-dev-00002-3f9a1c {SHOWN}\n"),
            "{args:?}"
        );
    }
    // For scripts, as it was written.
    let ran = cli.run(&["logs", "--service", "hello", "--output", "json"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let lines: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(lines[0]["text"], HOSTILE);
    let ran = cli.run(&["logs", "--service", "hello", "-f", "--output", "json"]);
    let line: Value = serde_json::from_str(ran.stdout.trim_end()).unwrap();
    assert_eq!(line["text"], HOSTILE);

    // A deployment's events and reason: escaped, its lines kept, a quoted line indented
    // under its event's message so it cannot pass for an event.
    let repo = repository();
    let ran = cli.run_in(&["deploy", "--wait"], repo.path(), None);
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(!raw(&ran.stdout) && !raw(&ran.stderr), "{ran:?}");
    assert!(
        ran.stdout.contains(&format!(
            "14:00:01  {SHOWN}\n14:00:02  progressing → failed: hello-dev-00002 ended before \
             it was ready\n          last output of i:\n          {SHOWN}\n"
        )),
        "{ran:?}"
    );
    // The error line does not print the output the events above showed.
    assert!(
        ran.stderr.contains(
            "error: deployment 7 failed: hello-dev-00002 ended before it was ready (its last \
             output is above)\n"
        ),
        "{ran:?}"
    );
    // With JSON on stdout, the events shown on stderr are for people; the document is raw.
    let ran = cli.run_in(&["deploy", "--wait", "--output", "json"], repo.path(), None);
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(!raw(&ran.stderr) && ran.stderr.contains(SHOWN), "{ran:?}");
    let printed: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(printed["reason"], reason.as_str());
    let ran = cli.run(&["events", "--deployment", "7"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(!raw(&ran.stdout) && ran.stdout.contains(SHOWN), "{ran:?}");
    let ran = cli.run(&["events", "--deployment", "7", "--output", "json"]);
    let events: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(events["events"][0]["message"], HOSTILE);
    assert_eq!(events["deployment"]["reason"], reason.as_str());

    // An instance's message in the status.
    let ran = cli.run(&["status", "--service", "hello"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(!raw(&ran.stdout) && ran.stdout.contains(SHOWN), "{ran:?}");
    let ran = cli.run(&["status", "--service", "hello", "--output", "json"]);
    let status: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(status["instances"][0]["message"], HOSTILE);
}

#[test]
fn secrets_are_set_from_stdin_or_a_file_never_shown() {
    let fake = Fake::contract();
    let cli = Cli::env(&fake);
    let ran = cli.run_in(
        &[
            "secrets",
            "set",
            "DB_PASSWORD",
            "--service",
            "hello",
            "--env",
            "staging",
        ],
        cli.home.path(),
        Some("s3cr3t-value\n"),
    );
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(
        !ran.stdout.contains("s3cr3t") && !ran.stderr.contains("s3cr3t"),
        "{ran:?}"
    );
    assert!(
        ran.stdout
            .contains("set DB_PASSWORD for hello in staging (version 4)"),
        "{ran:?}"
    );
    let sent = fake.find(
        "PUT",
        "/v1/services/hello/environments/staging/secrets/DB_PASSWORD",
    );
    assert_eq!(sent[0].json(), json!({"value": "s3cr3t-value"}));

    let file = cli.home.path().join("value.txt");
    std::fs::write(&file, "line one\nline two\n").unwrap();
    let ran = cli.run(&[
        "secrets",
        "set",
        "CERT",
        "--service",
        "hello",
        "--from-file",
        file.to_str().unwrap(),
    ]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let sent = fake.find("PUT", "/v1/services/hello/environments/dev/secrets/CERT");
    assert_eq!(sent[0].json(), json!({"value": "line one\nline two"}));

    let ran = cli.run_in(
        &["secrets", "set", "EMPTY", "--service", "hello"],
        cli.home.path(),
        Some(""),
    );
    assert_eq!(ran.code, Some(2), "{ran:?}");
    assert!(ran.stderr.contains("empty"), "{ran:?}");

    let ran = cli.run(&["secrets", "list", "--service", "hello"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(ran.stdout.contains("DB_PASSWORD  3"), "{ran:?}");
    let ran = cli.run(&[
        "secrets",
        "unset",
        "DB_PASSWORD",
        "--service",
        "hello",
        "--output",
        "json",
    ]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let printed: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(printed["unset"], "DB_PASSWORD");
    assert_eq!(
        fake.find(
            "DELETE",
            "/v1/services/hello/environments/dev/secrets/DB_PASSWORD"
        )
        .len(),
        1
    );
}

#[test]
fn local_instances_are_under_runway_local() {
    let cli = Cli::bare();
    let state = tempfile::tempdir().unwrap();
    let ran = cli.run(&[
        "local",
        "ps",
        "--output",
        "json",
        "--state-dir",
        state.path().to_str().unwrap(),
    ]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert_eq!(ran.stdout.trim(), "[]");
    let ran = cli.run(&[
        "local",
        "logs",
        "nope",
        "--state-dir",
        state.path().to_str().unwrap(),
    ]);
    assert_eq!(ran.code, Some(2), "{ran:?}");
    assert!(ran.stderr.contains("no instance \"nope\""), "{ran:?}");
    let ran = cli.run(&["logs", "--help"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(ran.stdout.contains("runway local logs"), "{ran:?}");
}

/// An HTTPS server whose certificate (for 127.0.0.1) a fresh CA signed, answering every request
/// with `whoami`; returns its URL and the CA's PEM.
fn tls_whoami(rt: &tokio::runtime::Runtime) -> (String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "runway test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone(), ca_cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    rt.spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let body = r#"{"token_id": 1, "name": "admin", "scope": {"admin": {}}}"#;
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (url, ca_cert.pem())
}

#[test]
fn https_trusts_the_given_ca_only() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (url, ca_pem) = tls_whoami(&rt);
    let (_, other_ca) = tls_whoami(&rt);
    let cli = Cli::bare();
    let ca = cli.home.path().join("ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();
    let wrong = cli.home.path().join("other-ca.pem");
    std::fs::write(&wrong, other_ca).unwrap();

    for refused in [
        vec!["login", "--server", &url, "--token", "-"],
        vec![
            "login",
            "--server",
            &url,
            "--token",
            "-",
            "--ca",
            wrong.to_str().unwrap(),
        ],
    ] {
        let ran = cli.run_in(&refused, cli.home.path(), Some(&format!("{TOKEN}\n")));
        assert_eq!(ran.code, Some(1), "{refused:?}: {ran:?}");
        assert!(
            ran.stderr
                .contains(&format!("cannot reach the Runway server at {url}")),
            "{ran:?}"
        );
        assert!(!cli.config().exists());
    }

    let ran = cli.run_in(
        &["login", "--server", &url, "--token", "-", "--ca", "ca.pem"],
        cli.home.path(),
        Some(&format!("{TOKEN}\n")),
    );
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let saved: Value = serde_json::from_slice(&std::fs::read(cli.config()).unwrap()).unwrap();
    assert_eq!(
        saved["ca"],
        ca.to_str().unwrap(),
        "the CA's absolute path is saved"
    );

    let not_pem = cli.home.path().join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let ran = cli.run_in(
        &[
            "login",
            "--server",
            &url,
            "--token",
            "-",
            "--ca",
            not_pem.to_str().unwrap(),
        ],
        cli.home.path(),
        Some(&format!("{TOKEN}\n")),
    );
    assert_eq!(ran.code, Some(2), "{ran:?}");
    assert!(ran.stderr.contains("holds no PEM certificate"), "{ran:?}");
}

/// `runway tokens create NAME` says what the token may do: a deploy token with `--service`
/// and `--env`, an admin token only with `--admin`; nothing is created for a bare name.
#[test]
fn an_admin_token_is_made_only_when_asked_for() {
    let fake = Fake::start(|r| {
        (r.method == "POST" && r.path == "/v1/tokens").then(|| {
            Reply::Json(
                201,
                json!({"info": {"id": 3, "name": "ops", "scope": {"admin": {}}, "expires_at": null,
                                "revoked_at": null, "created_at": "2026-11-21T14:00:00Z",
                                "created_by": "admin"},
                       "token": "runway_admin_x"}),
            )
        })
    });
    let cli = Cli::env(&fake);
    let bare = cli.run(&["tokens", "create", "ci"]);
    assert_eq!(bare.code, Some(2), "{bare:?}");
    assert!(
        bare.stderr.contains("--service NAME --env ENV") && bare.stderr.contains("--admin"),
        "{bare:?}"
    );
    let both = cli.run(&["tokens", "create", "ci", "--admin", "--service", "hello"]);
    assert_eq!(both.code, Some(2), "{both:?}");
    assert!(
        fake.find("POST", "/v1/tokens").is_empty(),
        "a token was made"
    );

    let admin = cli.run(&["tokens", "create", "ops", "--admin"]);
    assert_eq!(admin.code, Some(0), "{admin:?}");
    let made = fake.find("POST", "/v1/tokens");
    let body: Value = serde_json::from_slice(&made[0].body).unwrap();
    assert_eq!(body["scope"], json!({"admin": {}}));
    assert!(admin.stdout.contains("runway_admin_x"), "{admin:?}");
}
