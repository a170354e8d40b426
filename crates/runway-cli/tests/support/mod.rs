//! A real `runway server` in a temporary directory, driven by the real CLI and HTTPS clients:
//! shared by `tests/server.rs` and `benches/platform.rs`.
//!
//! Every wait is bounded. Dropping a [`Platform`] kills the server, stops (then kills) every
//! instance it started, and kills the ingress process the server started (which, like the
//! instances, outlives the server by design), even when a test panics.

#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    reason = "test support, each user takes what it needs"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod gitlab;
pub mod kube;

pub const RUNWAY: &str = env!("CARGO_BIN_EXE_runway");

/// Bound on one CLI command that does not wait for a deployment.
pub const COMMAND: Duration = Duration::from_secs(30);

/// True when python3 runs; otherwise prints why the caller skips (a failure under CI=true).
pub fn have_python() -> bool {
    if Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        return true;
    }
    let reason = "python3 is not installed (the test service is a Python program)";
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
    eprintln!("skipped: {reason}");
    false
}

/// The test service: `/` greets with its revision, `/metrics` is Prometheus's `app_up 1`,
/// `/secret` says whether `API_KEY` is set
/// with its length and byte sum (never the value), `/healthz` is ok. As a hostile tenant's
/// probe: `/env` lists its environment's names, `/id` its user and group, `/read?path=P`
/// whether it can read a file (`read N bytes` or the error's name), `/connect?to=HOST:PORT`
/// whether it can open a TCP connection there (`connected` or the error's name),
/// `/resolve?name=N` the IPv4 address it resolves to (or the error's name), `/fetch?url=U`
/// (with `&header=Name:Value`s) what a GET of it answered (`STATUS BODY`, or the error's name),
/// `/whoami` the `Runway-Caller` it was called with. `LOG_REQUESTS=1` prints a line per request
/// on stdout, `FLOOD=1` prints lines as fast as it can. `/exit` exits at once with code 1;
/// `HEALTHZ_HANGS=1` never answers `/healthz`. `CRASH=1`
/// exits at once
/// (a revision that can never start); `START_DELAY` seconds pass before it listens;
/// `LISTEN_PORT` is the port it listens on instead of `PORT` (an app that ignores it);
/// `FAIL_EVERY=N` answers every Nth `/` with a 500; `?sleep=S` waits S seconds before
/// answering.
pub const APP: &str = r#"import os, signal, socket, sys, threading, time, urllib.error, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

if os.environ.get("CRASH") == "1":
    print("crashing on purpose: CRASH=1", flush=True)
    sys.exit(3)
time.sleep(float(os.environ.get("START_DELAY", "0")))
FAIL_EVERY = int(os.environ.get("FAIL_EVERY", "0"))
LOG_REQUESTS = os.environ.get("LOG_REQUESTS") == "1"
served = 0
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Head and body go out in two writes: with Nagle's algorithm the body waits for the
    # ingress's delayed ACK of the head, 40 ms a request.
    disable_nagle_algorithm = True

    def do_GET(self):
        global served
        url = urlsplit(self.path)
        sleep = parse_qs(url.query).get("sleep")
        if sleep:
            time.sleep(float(sleep[0]))
        if url.path == "/" and FAIL_EVERY:
            with lock:
                served += 1
                fail = served % FAIL_EVERY == 0
            if fail:
                body = f"injected failure from {os.environ.get('K_REVISION', '?')}\n".encode()
                self.send_response(500)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
        if url.path == "/healthz" and os.environ.get("HEALTHZ_HANGS") == "1":
            time.sleep(3600)
        if url.path == "/exit":
            os._exit(1)
        if url.path == "/healthz":
            body = b"ok\n"
        elif url.path == "/metrics":
            body = b"app_up 1\n"
        elif url.path == "/":
            greeting = os.environ.get("GREETING", "hello")
            body = f"{greeting} from {os.environ.get('K_REVISION', '?')} pid {os.getpid()}\n".encode()
        elif url.path == "/env":
            body = ("\n".join(sorted(os.environ)) + "\n").encode()
        elif url.path == "/id":
            body = f"uid={os.getuid()} gid={os.getgid()}\n".encode()
        elif url.path == "/read":
            path = parse_qs(url.query).get("path", [""])[0]
            try:
                with open(path, "rb") as f:
                    body = f"read {len(f.read())} bytes\n".encode()
            except OSError as e:
                body = f"{type(e).__name__}\n".encode()
        elif url.path == "/connect":
            host, _, port = parse_qs(url.query).get("to", [""])[0].rpartition(":")
            try:
                socket.create_connection((host, int(port)), timeout=2).close()
                body = b"connected\n"
            except (OSError, ValueError) as e:
                body = f"{type(e).__name__}\n".encode()
        elif url.path == "/resolve":
            try:
                body = socket.gethostbyname(parse_qs(url.query)["name"][0]).encode() + b"\n"
            except (OSError, KeyError) as e:
                body = f"{type(e).__name__}\n".encode()
        elif url.path == "/fetch":
            query = parse_qs(url.query)
            headers = dict(h.split(":", 1) for h in query.get("header", []))
            request = urllib.request.Request(query.get("url", [""])[0], headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=3) as answer:
                    body = f"{answer.status} {answer.read().decode()}".encode()
            except urllib.error.HTTPError as e:
                body = f"{e.code} {e.read().decode()}".encode()
            except Exception as e:
                reason = getattr(e, "reason", None)
                body = f"{type(reason or e).__name__}\n".encode()
        elif url.path == "/header":
            name = parse_qs(url.query).get("name", [""])[0]
            body = f"{name}={self.headers.get(name)}\n".encode()
        elif url.path == "/whoami":
            body = f"caller={self.headers.get('Runway-Caller')}\n".encode()
        elif url.path == "/secret":
            value = os.environ.get("API_KEY")
            if value is None:
                body = b"API_KEY absent\n"
            else:
                raw = value.encode()
                body = f"API_KEY present length={len(raw)} sum={sum(raw) % 65521}\n".encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        if LOG_REQUESTS:
            print(format % args, flush=True)


if os.environ.get("FLOOD") == "1":
    def flood():
        block = ("y" * 99 + "\n") * 1000
        while True:
            sys.stdout.write(block)
            sys.stdout.flush()
    threading.Thread(target=flood, daemon=True).start()

ThreadingHTTPServer.daemon_threads = True
# socketserver's default backlog is 5: a burst of new connections would be reset.
ThreadingHTTPServer.request_queue_size = 128
server = ThreadingHTTPServer(
    ("0.0.0.0", int(os.environ.get("LISTEN_PORT") or os.environ["PORT"])), Handler
)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print(f"listening on {os.environ['PORT']}", flush=True)
server.serve_forever()
"#;

/// The test service's manifest: one plain-process instance, a startup probe on `/healthz`.
pub fn manifest(name: &str) -> String {
    format!(
        "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: {name}\n  \
         owner_email_handle: platform-team\n  department: engineering\nspec:\n  \
         container_port: 8080\n  regions: [local]\n  request_timeout: 30\n{}",
        manifest_rest("legacy", "", 1, 1, 100)
    )
}

/// The manifest from `scalability:` on: the bounds, the startup probe, `strategy`, and the
/// process with `rollout` (YAML for `spec.workload.rollout`, indented six spaces) when given.
fn manifest_rest(strategy: &str, rollout: &str, min: u32, max: u32, concurrency: u32) -> String {
    format!(
        "  scalability:\n    min_instances: {min}\n    max_instances: {max}\n    \
         max_instance_request_concurrency: {concurrency}\n  startup_probe:\n    path: /healthz\n    \
         period_seconds: 1\n    failure_threshold: 60\n  deployment:\n    strategy: {strategy}\n  \
         workload:\n    process:\n      command: [\"python3\", \"app.py\"]\n    env:\n      \
         GREETING: hello\n    secrets: [API_KEY]\n{}",
        if rollout.is_empty() {
            String::new()
        } else {
            format!("    rollout:\n{rollout}")
        }
    )
}

/// Rewrites the repository's manifest with another `strategy`, `rollout` settings (see
/// [`manifest_rest`]) and scalability bounds; its name and the rest stay.
pub fn set_manifest(
    repo: &Path,
    strategy: &str,
    rollout: &str,
    min: u32,
    max: u32,
    concurrency: u32,
) {
    let path = repo.join(".runway/runway.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    let base = text.split("  scalability:").next().unwrap();
    let rest = manifest_rest(strategy, rollout, min, max, concurrency);
    std::fs::write(&path, format!("{base}{rest}")).unwrap();
}

/// Rewrites the repository's manifest for an image artifact: no `workload.process` (the image
/// given at deploy runs), `min`..=`max` instances, a startup probe on the image's `/index.html`.
pub fn set_image_manifest(repo: &Path, min: u32, max: u32) {
    let path = repo.join(".runway/runway.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    let base = text.split("  scalability:").next().unwrap();
    let rest = format!(
        "  scalability:\n    min_instances: {min}\n    max_instances: {max}\n    \
         max_instance_request_concurrency: 100\n  startup_probe:\n    path: /index.html\n    \
         period_seconds: 1\n    failure_threshold: 60\n  deployment:\n    strategy: legacy\n  \
         workload:\n    env:\n      GREETING: hello\n    secrets: [API_KEY]\n"
    );
    std::fs::write(&path, format!("{base}{rest}")).unwrap();
}

/// The autoscaler's windows, short enough for tests and benches: 4 s stable, 1 s panic, 1 s
/// grace before zero; a decision every 250 ms. Lines for [`Settings::control`].
pub const FAST_AUTOSCALER: &str = "  autoscale_interval_ms: 250\n  autoscaler:\n    \
                                   stable_window_ms: 4000\n    panic_window_ms: 1000\n    \
                                   scale_to_zero_grace_ms: 1000\n";

/// A busybox image serving `/www`: `/index.html` says `page`; `/cgi-bin/env` shows what the
/// platform put in the environment (the variable, the secret's presence, the revision).
pub fn web_image(page: &str) -> runway_oci::testing::BusyboxImage {
    let cgi = "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\n\
               echo \"$GREETING from $K_REVISION secret=${API_KEY:+set}\"\n";
    runway_oci::testing::BusyboxImage {
        entrypoint: vec!["/bin/sh".into(), "-c".into()],
        cmd: vec!["trap 'exit 0' TERM; httpd -f -p $PORT -h /www & wait".into()],
        env: vec!["PATH=/bin:/usr/bin".into()],
        files: vec![
            ("www/index.html".into(), page.as_bytes().to_vec(), 0o644),
            ("www/cgi-bin/env".into(), cgi.as_bytes().to_vec(), 0o755),
            (
                "www/cgi-bin/identity".into(),
                IDENTITY_CGI.as_bytes().to_vec(),
                0o755,
            ),
        ],
        ..runway_oci::testing::BusyboxImage::default()
    }
}

/// The web image's `/cgi-bin/identity`: where the identity token is, then the token.
const IDENTITY_CGI: &str = "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\n\
                            echo \"$RUNWAY_IDENTITY_TOKEN_FILE\"\ncat \"$RUNWAY_IDENTITY_TOKEN_FILE\"\n";

/// Running instances of `revision` in a status (`runway status --output json`).
pub fn live_instances(status: &Value, revision: &str) -> usize {
    status["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["revision"] == revision && i["phase"] == "running")
        .count()
}

/// A repository holding the test service, under `dir`.
pub fn write_repo(dir: &Path, name: &str) -> PathBuf {
    let repo = dir.join(format!("repo-{name}"));
    std::fs::create_dir_all(repo.join(".runway")).unwrap();
    std::fs::write(repo.join(".runway/runway.yml"), manifest(name)).unwrap();
    std::fs::write(repo.join("app.py"), APP).unwrap();
    repo
}

/// Sets the variables of `.runway/env-<env>.yml` (a new revision's content).
pub fn set_env_file(repo: &Path, env: &str, vars: &[(&str, &str)]) {
    let text: String = vars
        .iter()
        .map(|(k, v)| format!("{k}: \"{v}\"\n"))
        .collect();
    std::fs::write(repo.join(format!(".runway/env-{env}.yml")), text).unwrap();
}

/// What one CLI command did.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Ran {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }

    pub fn all(&self) -> String {
        format!(
            "exit {:?} after {:.1} s\n--- stdout\n{}--- stderr\n{}",
            self.code,
            self.took.as_secs_f64(),
            self.stdout,
            self.stderr
        )
    }
}

/// Whether `program arg` runs and succeeds, within `bound` (a program that is not installed
/// does not).
pub fn runs(program: &Path, arg: &str, bound: Duration) -> bool {
    let Ok(mut child) = Command::new(program)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.success();
        }
        if started.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs a command to its end, at most `bound` (then kills it, and says so in `code: None`).
pub fn run(mut command: Command, stdin: Option<&[u8]>, bound: Duration) -> Ran {
    let started = Instant::now();
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(bytes).unwrap();
    }
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if started.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ran {
        code,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        took: started.elapsed(),
    }
}

/// The `control` section and anything else a test sets in the server's configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    pub deploy_timeout_ms: u64,
    pub drain_grace_ms: u64,
    pub reconcile_interval_ms: u64,
    /// More of the `control` section, as YAML lines indented by two spaces.
    pub control: String,
    /// Whole sections after `control` (`runtime:` …), as YAML lines.
    pub sections: String,
    /// `runtime.allow_processes`: the test service is a plain process, so on by default.
    pub allow_processes: bool,
    /// More of the `api` section, as YAML lines indented by two spaces.
    pub api: String,
    /// More of the `ingress` section, as YAML lines indented by two spaces (`remote:` for
    /// ingresses the test runs itself).
    pub ingress: String,
    /// A network namespace (of `ip netns`) the server and the CLI run in, joined with
    /// `nsenter --net` (which, unlike `ip netns exec`, keeps the host's `/sys` and so its
    /// cgroups).
    pub netns: Option<String>,
    /// The data directory on a tmpfs of its own of this many MiB, for a disk that fills (root
    /// only); unmounted when the platform is dropped.
    pub data_tmpfs_mib: Option<u32>,
}

impl Settings {
    /// `sections`, with `allow_processes` in its `runtime:` section (added when it has none).
    fn runtime_section(&self) -> String {
        let line = format!("  allow_processes: {}\n", self.allow_processes);
        if self.sections.contains("runtime:\n") {
            self.sections
                .replacen("runtime:\n", &format!("runtime:\n{line}"), 1)
        } else {
            format!("{}runtime:\n{line}", self.sections)
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            deploy_timeout_ms: 60_000,
            drain_grace_ms: 1_000,
            reconcile_interval_ms: 250,
            control: String::new(),
            sections: String::new(),
            allow_processes: true,
            api: String::new(),
            ingress: String::new(),
            netns: None,
            data_tmpfs_mib: None,
        }
    }
}

/// One start of `runway server`, and what it printed.
#[derive(Debug)]
pub struct Server {
    pub child: Child,
    pub api: String,
    pub https: SocketAddr,
    /// The ingress's plain-HTTP listener (redirects, ACME's HTTP-01), when it runs here.
    pub http: Option<SocketAddr>,
    pub ca: PathBuf,
    pub token: Option<String>,
    /// The ingress process's pid, and what this start did with it: `started`, `adopted`, or
    /// `replaced pid N: why`; none when the ingresses are remote.
    pub ingress: Option<(u32, String)>,
}

/// A control plane in a temporary directory.
#[derive(Debug)]
pub struct Platform {
    pub dir: tempfile::TempDir,
    pub data: PathBuf,
    pub config: PathBuf,
    pub cli_config: PathBuf,
    pub token: String,
    pub server: Option<Server>,
    /// Everything every start of the server wrote on stderr, for failure messages.
    pub log: Arc<Mutex<String>>,
    /// Every ingress pid a start of the server printed, for the drop to kill.
    pub ingress_pids: Vec<u32>,
    pub rt: tokio::runtime::Runtime,
    /// The network namespace the server and the CLI run in ([`Settings::netns`]).
    pub netns: Option<String>,
}

impl Platform {
    /// Starts `runway server` on ephemeral ports and logs the CLI in with the admin token.
    pub fn start(settings: &Settings) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        if let Some(mib) = settings.data_tmpfs_mib {
            std::fs::create_dir_all(&data).unwrap();
            let mut mount = Command::new("mount");
            mount
                .args(["-t", "tmpfs", "-o", &format!("size={mib}m,mode=0755")])
                .arg("runway-test-data")
                .arg(&data);
            let mounted = run(mount, None, COMMAND);
            assert!(mounted.ok(), "mount a tmpfs on {data:?}: {}", mounted.all());
        }
        let config = dir.path().join("server.yml");
        std::fs::write(
            &config,
            format!(
                "api:\n{}{}ingress:\n  https: 127.0.0.1:0\n  http: 127.0.0.1:0\n  \
                 admin: 127.0.0.1:0\n{}control:\n  deploy_timeout_ms: {}\n  drain_grace_ms: {}\n  \
                 reconcile_interval_ms: {}\n{}{}",
                // A test that must know the API's port first (a sign-in provider's redirect)
                // gives its own `listen`.
                if settings.api.contains("  listen:") {
                    ""
                } else {
                    "  listen: 127.0.0.1:0\n"
                },
                settings.api,
                settings.ingress,
                settings.deploy_timeout_ms,
                settings.drain_grace_ms,
                settings.reconcile_interval_ms,
                settings.control,
                settings.runtime_section()
            ),
        )
        .unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        let mut platform = Self {
            cli_config: dir.path().join("cli.json"),
            dir,
            data,
            config,
            token: String::new(),
            server: None,
            log: Arc::new(Mutex::new(String::new())),
            ingress_pids: Vec::new(),
            rt,
            netns: settings.netns.clone(),
        };
        let server = platform.spawn_server();
        platform
            .ingress_pids
            .extend(server.ingress.as_ref().map(|i| i.0));
        platform.token = server
            .token
            .clone()
            .unwrap_or_else(|| panic!("no admin token printed:\n{}", platform.log()));
        platform.server = Some(server);
        let login = platform.runway_with(
            &["login", "--server", &platform.api(), "--token", "-", "--ca"],
            Some(platform.ca().as_os_str()),
            Some(format!("{}\n", platform.token).as_bytes()),
            COMMAND,
        );
        assert!(login.ok(), "login: {}", login.all());
        platform
    }

    /// Another replica of this control plane: `runway server` on the same data directory and
    /// configuration (so, with `store.url`, the same store), its own API port, the CLI of its
    /// own logged in to it.
    pub fn replica(&self) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("server.yml");
        std::fs::copy(&self.config, &config).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut replica = Self {
            cli_config: dir.path().join("cli.json"),
            dir,
            data: self.data.clone(),
            config,
            token: self.token.clone(),
            server: None,
            log: Arc::new(Mutex::new(String::new())),
            ingress_pids: Vec::new(),
            rt,
            netns: self.netns.clone(),
        };
        let server = replica.spawn_server();
        replica.server = Some(server);
        let login = replica.runway_with(
            &["login", "--server", &replica.api(), "--token", "-", "--ca"],
            Some(replica.ca().as_os_str()),
            Some(format!("{}\n", replica.token).as_bytes()),
            COMMAND,
        );
        assert!(login.ok(), "login: {}", login.all());
        replica
    }

    /// `runway`, in the platform's network namespace when it has one.
    fn runway_command(&self) -> Command {
        match &self.netns {
            Some(netns) => {
                let mut command = Command::new("nsenter");
                command
                    .arg(format!("--net=/run/netns/{netns}"))
                    .arg("--")
                    .arg(RUNWAY);
                command
            }
            None => Command::new(RUNWAY),
        }
    }

    fn spawn_server(&self) -> Server {
        let mut child = self
            .runway_command()
            .arg("server")
            .arg("--config")
            .arg(&self.config)
            .arg("--data-dir")
            .arg(&self.data)
            .env_remove("RUNWAY_DATA_DIR")
            // Registry logins of its own (none unless a test writes `docker/config.json`),
            // never the machine's.
            .env("DOCKER_CONFIG", self.dir.path().join("docker"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (lines, receive) = mpsc::channel();
        let log = Arc::clone(&self.log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                log.lock().unwrap().push_str(&format!("{line}\n"));
                let _ = lines.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let (mut api, mut https, mut ca, mut token) = (None, None, None, None);
        let mut http = None;
        let mut remote = false;
        let mut ingress = None;
        let mut token_next = false;
        let mut ended = false;
        while !ended {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = receive.recv_timeout(left) else {
                let _ = child.kill();
                panic!("runway server did not print its addresses:\n{}", self.log());
            };
            if token_next {
                token = Some(line.trim().to_owned());
                token_next = false;
            } else if let Some(rest) = line.strip_prefix("runway server: API on ") {
                api = Some(rest.trim().to_owned());
            } else if let Some(rest) = line.strip_prefix("runway server: services on port ") {
                // N of the ingresses fed over the network
                let port: u16 = rest.split(' ').next().and_then(|p| p.parse().ok()).unwrap();
                https = Some(SocketAddr::from(([127, 0, 0, 1], port)));
                remote = true;
            } else if let Some(rest) = line.strip_prefix("runway server: services on ") {
                // https://{service}.{env}.localhost:PORT (HTTP on ADDR)
                let port: u16 = rest
                    .split("localhost:")
                    .nth(1)
                    .and_then(|r| r.split(' ').next())
                    .and_then(|p| p.parse().ok())
                    .unwrap();
                https = Some(SocketAddr::from(([127, 0, 0, 1], port)));
                http = rest
                    .split("(HTTP on ")
                    .nth(1)
                    .and_then(|r| r.trim_end_matches(')').parse().ok());
            } else if let Some(rest) =
                line.strip_prefix("runway server: clients trust the certificate authority in ")
            {
                ca = Some(PathBuf::from(rest.trim()));
                // A later start prints no token: the CA's line is its last.
                ended = !self.token.is_empty();
            } else if let Some(rest) = line.strip_prefix("runway server: ingress pid ") {
                // N (started|adopted|replaced pid M: why)
                ingress = rest.split_once(" (").and_then(|(pid, outcome)| {
                    Some((
                        pid.parse::<u32>().ok()?,
                        outcome.strip_suffix(')')?.to_owned(),
                    ))
                });
            } else if line.starts_with("runway server: the admin token") {
                token_next = true;
            } else if line.starts_with("log in with:") {
                ended = true;
            }
        }
        let (Some(api), Some(https), Some(ca), true) =
            (api, https, ca, remote || ingress.is_some())
        else {
            let _ = child.kill();
            panic!("runway server printed an incomplete start:\n{}", self.log());
        };
        Server {
            child,
            api,
            https,
            http,
            ca,
            token,
            ingress,
        }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn server(&self) -> &Server {
        self.server.as_ref().expect("the server is running")
    }

    pub fn api(&self) -> String {
        self.server().api.clone()
    }

    pub fn https(&self) -> SocketAddr {
        self.server().https
    }

    /// The ingress's plain-HTTP listener, when this server runs the ingress.
    pub fn http(&self) -> Option<SocketAddr> {
        self.server().http
    }

    pub fn ca(&self) -> PathBuf {
        self.server().ca.clone()
    }

    pub fn server_pid(&self) -> u32 {
        self.server().child.id()
    }

    /// The ingress process the running server started or adopted.
    pub fn ingress_pid(&self) -> u32 {
        self.server().ingress.as_ref().expect("a local ingress").0
    }

    /// What the running server's start did with the ingress: `started`, `adopted`, ….
    pub fn ingress_outcome(&self) -> String {
        self.server()
            .ingress
            .as_ref()
            .expect("a local ingress")
            .1
            .clone()
    }

    /// `kill -9` of the server; its instances keep running under their supervisors.
    pub fn kill9(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = server.child.kill();
            let _ = server.child.wait();
        }
    }

    /// Starts the server again on the same data directory (new ports), and points the CLI at it.
    pub fn restart(&mut self) {
        assert!(self.server.is_none(), "kill the server first");
        let server = self.spawn_server();
        assert!(
            server.token.is_none(),
            "a restart printed a new admin token"
        );
        self.ingress_pids
            .extend(server.ingress.as_ref().map(|i| i.0));
        self.server = Some(server);
        let login = self.runway_with(
            &["login", "--server", &self.api(), "--token", "-", "--ca"],
            Some(self.ca().as_os_str()),
            Some(format!("{}\n", self.token).as_bytes()),
            COMMAND,
        );
        assert!(login.ok(), "login after restart: {}", login.all());
    }

    /// `runway ARGS` with the CLI's configuration in the temporary directory.
    pub fn runway(&self, args: &[&str]) -> Ran {
        self.runway_with(args, None, None, COMMAND)
    }

    /// `runway ARGS` waiting at most `bound`.
    pub fn runway_for(&self, args: &[&str], bound: Duration) -> Ran {
        self.runway_with(args, None, None, bound)
    }

    /// `runway ARGS [extra]` with standard input.
    pub fn runway_with(
        &self,
        args: &[&str],
        extra: Option<&std::ffi::OsStr>,
        stdin: Option<&[u8]>,
        bound: Duration,
    ) -> Ran {
        let mut command = self.command();
        command.args(args);
        if let Some(extra) = extra {
            command.arg(extra);
        }
        run(command, stdin, bound)
    }

    /// The CLI's configuration file, logged in to this platform as the admin.
    pub fn cli_config(&self) -> &Path {
        &self.cli_config
    }

    /// `runway ARGS` with these environment variables set too.
    pub fn runway_env(&self, args: &[&str], vars: &[(&str, &std::ffi::OsStr)]) -> Ran {
        let mut command = self.command();
        command.args(args).envs(vars.iter().copied());
        run(command, None, COMMAND)
    }

    /// `runway ARGS` as another token (`RUNWAY_TOKEN` overrides the saved one).
    pub fn runway_as(&self, token: &str, args: &[&str]) -> Ran {
        let mut command = self.command();
        command.env("RUNWAY_TOKEN", token).args(args);
        run(command, None, COMMAND)
    }

    /// `runway` as this platform's CLI: logged in, in the test's directory (a caller may move it).
    pub fn command(&self) -> Command {
        let mut command = self.runway_command();
        command
            .env("RUNWAY_CONFIG", &self.cli_config)
            .env_remove("RUNWAY_SERVER")
            .env_remove("RUNWAY_TOKEN")
            .env_remove("RUNWAY_CA")
            .env_remove("RUNWAY_STATE_DIR")
            // What the CLI caches (a build's base image) stays in the test's directory.
            .env("XDG_CACHE_HOME", self.dir.path().join("cache"))
            .current_dir(self.dir.path());
        command
    }

    /// The instances under `<data>/runtime`, as `runway local ps --output json` lists them.
    pub fn local_ps(&self) -> Vec<Value> {
        let ran = self.runway_with(
            &["local", "ps", "--output", "json", "--state-dir"],
            Some(self.data.join("runtime").as_os_str()),
            None,
            COMMAND,
        );
        assert!(ran.ok(), "local ps: {}", ran.all());
        match ran.json() {
            Value::Array(items) => items,
            other => panic!("local ps: not an array: {other}"),
        }
    }

    /// An HTTPS client trusting only the platform's CA, reaching `host` at the ingress.
    pub fn ingress_client(&self, host: &str) -> reqwest::Client {
        let pem = std::fs::read(self.ca()).unwrap();
        reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()])
            .resolve(host, self.https())
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    }

    /// The URL of `path` on `host` through the ingress.
    pub fn ingress_url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.https().port())
    }

    /// An HTTPS client for the API, trusting only the platform's CA.
    pub fn api_client(&self) -> reqwest::Client {
        let pem = std::fs::read(self.ca()).unwrap();
        reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()])
            .timeout(Duration::from_secs(15))
            .build()
            .unwrap()
    }

    /// `GET path` through the ingress: status and body, retried until `bound` while the
    /// request fails to connect or answers 5xx.
    pub fn get(&self, host: &str, path: &str, bound: Duration) -> (u16, String) {
        self.get_until(host, path, bound, |status, _| status < 500)
    }

    /// GETs until the answer (status and body) is as `wanted`, for at most `bound`.
    pub fn get_until(
        &self,
        host: &str,
        path: &str,
        bound: Duration,
        wanted: impl Fn(u16, &str) -> bool,
    ) -> (u16, String) {
        let client = self.ingress_client(host);
        let url = self.ingress_url(host, path);
        self.rt.block_on(async {
            let deadline = Instant::now() + bound;
            loop {
                let last = match client.get(&url).send().await {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        let body = response.text().await.unwrap_or_default();
                        if wanted(status, &body) {
                            return (status, body);
                        }
                        format!("{status}: {body}")
                    }
                    Err(e) => format!("{e:?}"),
                };
                assert!(
                    Instant::now() < deadline,
                    "GET {url} never answered as wanted: {last}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    }

    /// An API call with a token (or none): status and JSON body.
    pub fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let client = self.api_client();
        let url = format!("{}{path}", self.api());
        self.rt.block_on(async {
            let mut request = client.request(method, &url);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            if let Some(body) = body {
                request = request.json(&body);
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            (
                status,
                serde_json::from_str(&text).unwrap_or(Value::String(text)),
            )
        })
    }

    /// `runway status --output json` of `service` in `env`.
    /// The address of a running instance of `service` (its only environment), as
    /// `runway status` shows it.
    pub fn address_of(&self, service: &str) -> String {
        let status = self
            .runway(&["status", "--service", service, "--output", "json"])
            .json();
        status["instances"]
            .as_array()
            .and_then(|all| all.iter().find(|i| i["phase"] == "running"))
            .and_then(|i| i["address"].as_str())
            .unwrap_or_else(|| panic!("no address for {service}: {status}"))
            .to_owned()
    }

    pub fn status(&self, service: &str, env: &str) -> Value {
        let ran = self.runway(&[
            "status",
            "--service",
            service,
            "--env",
            env,
            "--output",
            "json",
        ]);
        assert!(ran.ok(), "status: {}", ran.all());
        ran.json()
    }

    /// Polls the API until the deployment ends (or `bound`); returns it.
    pub fn wait_deployment(&self, id: &Value, bound: Duration) -> Value {
        let deadline = Instant::now() + bound;
        loop {
            let (status, deployment) = self.call(
                reqwest::Method::GET,
                &format!("/v1/deployments/{}", id_text(id)),
                Some(&self.token),
                None,
            );
            assert_eq!(status, 200, "{deployment}");
            let state = deployment["state"].as_str().unwrap_or_default().to_owned();
            if !matches!(state.as_str(), "pending" | "progressing") {
                return deployment;
            }
            assert!(
                Instant::now() < deadline,
                "deployment {id} still {state} after {bound:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until no instance of `revision` is left (drained and stopped), at most `bound`.
    pub fn wait_retired(&self, revision: &str, bound: Duration) {
        let deadline = Instant::now() + bound;
        while self.local_ps().iter().any(|i| {
            i["id"]
                .as_str()
                .is_some_and(|id| revision_of(id) == revision)
        }) {
            assert!(
                Instant::now() < deadline,
                "{revision} still has instances after {bound:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Onboards `name` in `envs` and sets its `API_KEY` in each; returns the repository.
    pub fn onboard(&self, name: &str, envs: &[&str], secret: &str) -> PathBuf {
        let mut args = vec!["services", "create", name, "--owner", "team@example.com"];
        for env in envs {
            args.extend(["--env", env]);
        }
        let created = self.runway(&args);
        assert!(created.ok(), "services create: {}", created.all());
        for env in envs {
            let set = self.runway_with(
                &["secrets", "set", "API_KEY", "--service", name, "--env", env],
                None,
                Some(secret.as_bytes()),
                COMMAND,
            );
            assert!(set.ok(), "secrets set: {}", set.all());
        }
        write_repo(self.dir.path(), name)
    }

    /// `runway audit --output json ARGS` (newest first), its entries.
    pub fn audit(&self, args: &[&str]) -> Vec<Value> {
        let ran = self.runway(&[&["audit", "--output", "json"], args].concat());
        assert!(ran.ok(), "{}", ran.all());
        ran.json().as_array().cloned().unwrap_or_default()
    }

    /// `runway deploy REPO --env ENV --wait`, bounded.
    pub fn deploy(&self, repo: &Path, env: &str) -> Ran {
        self.deploy_with(repo, env, &[])
    }

    /// `runway deploy REPO --env ENV --image REFERENCE --wait`, bounded.
    pub fn deploy_image(&self, repo: &Path, env: &str, reference: &str) -> Ran {
        self.deploy_with(repo, env, &["--image", reference])
    }

    fn deploy_with(&self, repo: &Path, env: &str, extra: &[&str]) -> Ran {
        let mut args = vec!["deploy", "--env", env, "--wait", "--timeout", "90s"];
        args.extend_from_slice(extra);
        self.runway_with(
            &args,
            Some(repo.as_os_str()),
            None,
            Duration::from_secs(120),
        )
    }
}

impl Drop for Platform {
    fn drop(&mut self) {
        self.kill9();
        // The instances, which outlive the server by design: stopped and removed, then
        // whatever is left killed by pid.
        let state = self.data.join("runtime");
        let ps = |platform: &Self| {
            let ran = platform.runway_with(
                &["local", "ps", "--output", "json", "--state-dir"],
                Some(state.as_os_str()),
                None,
                COMMAND,
            );
            serde_json::from_str::<Vec<Value>>(&ran.stdout).unwrap_or_default()
        };
        let instances = ps(self);
        let ids: Vec<&str> = instances.iter().filter_map(|i| i["id"].as_str()).collect();
        if !ids.is_empty() {
            let mut command = Command::new(RUNWAY);
            command
                .args(["local", "stop", "--remove", "--state-dir"])
                .arg(&state)
                .args(&ids);
            let _ = run(command, None, Duration::from_secs(30));
        }
        for instance in instances.iter().chain(ps(self).iter()) {
            for key in ["supervisor_pid", "pid"] {
                if let Some(pid) = instance[key].as_u64().filter(|&p| p > 1) {
                    kill9(pid);
                }
            }
        }
        // The ingress, which outlives the server by design too: every one a start printed,
        // and the one whose pid file is there (started by a server that then failed).
        let pid_file = std::fs::read_to_string(self.data.join("ingress/ingress.pid"))
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok());
        // Only a process still serving this data directory: a pid may have been reused.
        let state_dir = self.data.join("ingress");
        for pid in self.ingress_pids.iter().copied().chain(pid_file) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let ours = String::from_utf8_lossy(&cmdline)
                .split('\0')
                .any(|arg| Path::new(arg) == state_dir);
            if pid > 1 && ours {
                kill9(u64::from(pid));
                // And its process group: the worker of a supervisor killed alone serves on.
                let _ = Command::new("kill")
                    .args(["-9", "--", &format!("-{pid}")])
                    .stderr(Stdio::null())
                    .status();
            }
        }
        // A tmpfs of the test's own (Settings::data_tmpfs_mib), once nothing runs from it.
        if std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .any(|line| line.split(' ').nth(1) == Some(&*self.data.to_string_lossy()))
        {
            let _ = Command::new("umount").arg("-l").arg(&self.data).status();
        }
    }
}

fn kill9(pid: u64) {
    let _ = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// The resident set of a process in KiB (`VmRSS`), if it runs.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// A deployment's id as a path segment.
pub fn id_text(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The revision of an instance id: the id minus its last `-` segment.
pub fn revision_of(id: &str) -> &str {
    id.rsplit_once('-').map_or(id, |(revision, _)| revision)
}

/// What a load loop counted.
#[derive(Debug, Default)]
pub struct Counts {
    pub ok: AtomicU64,
    pub failed: AtomicU64,
    /// The first failures, for the assertion's message.
    pub failures: Mutex<Vec<String>>,
    /// Bodies seen, by first word of the revision, for checks on who answered.
    pub bodies: Mutex<std::collections::BTreeSet<String>>,
}

/// A load loop: `clients` tasks requesting `url` until `stop` (each request at most 10 s).
pub struct Load {
    pub counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Load")
            .field("counts", &self.counts)
            .finish()
    }
}

impl Load {
    /// Starts clients as fast as they go, or each paced at `per_client` requests a second.
    pub fn start(
        rt: &tokio::runtime::Runtime,
        client: &reqwest::Client,
        url: &str,
        clients: usize,
        per_client: Option<f64>,
    ) -> Self {
        let counts = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..clients)
            .map(|n| {
                let (client, url, counts, stop) = (
                    client.clone(),
                    url.to_owned(),
                    Arc::clone(&counts),
                    Arc::clone(&stop),
                );
                rt.spawn(async move {
                    let mut pace = per_client.map(|rate| {
                        let period = Duration::from_secs_f64(1.0 / rate);
                        // Spread the clients over one period.
                        let offset = period.mul_f64(n as f64 / clients as f64);
                        let mut interval =
                            tokio::time::interval_at(tokio::time::Instant::now() + offset, period);
                        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                        interval
                    });
                    while !stop.load(Ordering::SeqCst) {
                        if let Some(pace) = &mut pace {
                            pace.tick().await;
                        }
                        let outcome = match client.get(&url).send().await {
                            Ok(response) => {
                                let status = response.status();
                                match response.text().await {
                                    Ok(body) if status.is_success() => Ok(body),
                                    Ok(body) => Err(format!("{status}: {}", body.trim())),
                                    Err(e) => Err(format!("{status}, body: {e:?}")),
                                }
                            }
                            Err(e) => Err(format!("{e:?}")),
                        };
                        match outcome {
                            Ok(body) => {
                                counts.ok.fetch_add(1, Ordering::SeqCst);
                                let who = body.split(" pid ").next().unwrap_or_default().to_owned();
                                counts.bodies.lock().unwrap().insert(who);
                            }
                            Err(e) => {
                                counts.failed.fetch_add(1, Ordering::SeqCst);
                                let mut failures = counts.failures.lock().unwrap();
                                if failures.len() < 10 {
                                    failures.push(e);
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        Self {
            counts,
            stop,
            tasks,
        }
    }

    /// Stops the clients (each finishes its request) and returns (ok, failed).
    pub fn stop(self, rt: &tokio::runtime::Runtime) -> (u64, u64) {
        self.stop.store(true, Ordering::SeqCst);
        rt.block_on(async {
            for task in self.tasks {
                let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
            }
        });
        (
            self.counts.ok.load(Ordering::SeqCst),
            self.counts.failed.load(Ordering::SeqCst),
        )
    }

    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.counts.ok.load(Ordering::SeqCst),
            self.counts.failed.load(Ordering::SeqCst),
        )
    }

    pub fn failures(&self) -> Vec<String> {
        self.counts.failures.lock().unwrap().clone()
    }
}

/// Milliseconds since the epoch of an RFC 3339 time in UTC, as the API writes them.
pub fn millis(text: &str) -> f64 {
    let at = runway_store::Timestamp::parse_rfc3339(text)
        .unwrap_or_else(|| panic!("not an RFC 3339 time in UTC: {text:?}"));
    at.unix_millis() as f64
}

/// The median of some figures (NaN for none).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    percentile(&sorted, 0.5)
}

/// The `p` quantile of sorted figures, nearest rank (NaN for none).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

/// `runway ingress` fed over the network, as the chart's ingress Deployment runs it; killed
/// when dropped.
pub struct NetworkIngress {
    child: std::process::Child,
    pub control: std::net::SocketAddr,
    pub https: std::net::SocketAddr,
}

impl NetworkIngress {
    pub fn start(state: &std::path::Path, ca: &std::path::Path, tls: &std::path::Path) -> Self {
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
        };
        Self::start_at(state, ca, tls, free(), free())
    }

    /// As [`NetworkIngress::start`], on the control and HTTPS addresses given.
    pub fn start_at(
        state: &std::path::Path,
        ca: &std::path::Path,
        tls: &std::path::Path,
        control: std::net::SocketAddr,
        https: std::net::SocketAddr,
    ) -> Self {
        let child = std::process::Command::new(RUNWAY)
            .arg("ingress")
            .arg("--state-dir")
            .arg(state)
            .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .args(["--https", &https.to_string()])
            .arg("--ca-dir")
            .arg(ca)
            .args(["--control-listen", &control.to_string()])
            .arg("--control-tls")
            .arg(tls)
            .args(["--event-loops", "1", "--threads", "1"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(control).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the ingress never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            control,
            https,
        }
    }
}

impl Drop for NetworkIngress {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A database of its own on the test PostgreSQL (`scripts/with-postgres`), for one test: its
/// URL. `None`, said, on a developer's machine without one; under `CI=true`, a failure.
pub fn test_database(purpose: &str) -> Option<String> {
    let Ok(admin) = std::env::var("RUNWAY_TEST_POSTGRES") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "RUNWAY_TEST_POSTGRES is not set: run the tests under scripts/with-postgres"
        );
        eprintln!("skipped: {purpose} needs PostgreSQL (run under scripts/with-postgres)");
        return None;
    };
    let name = format!(
        "runway_{}_{}",
        purpose
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
            .to_ascii_lowercase(),
        std::process::id()
    );
    let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .unwrap();
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    Some(runway_store::PostgresStore::url_for_database(&admin, &name))
}

/// Pushes the Python base image ([`runway_oci::testing::python_layout`]) to `target`
/// (`host/repository:tag`) with skopeo, and returns it pinned (`host/repository@sha256:…`):
/// into `platform`'s registry, trusting its CA, with its admin token; or, with none, to a
/// plain-HTTP registry on loopback.
pub fn push_python_base(target: &str, platform: Option<&Platform>) -> String {
    let scratch = tempfile::tempdir().unwrap();
    let digest_file = scratch.path().join("digest");
    let layout = runway_oci::testing::python_layout().unwrap();
    let mut copy = Command::new("skopeo");
    copy.args(["copy", "--quiet", "--digestfile"])
        .arg(&digest_file);
    match platform {
        Some(platform) => {
            std::fs::copy(platform.ca(), scratch.path().join("ca.crt")).unwrap();
            copy.arg("--dest-cert-dir")
                .arg(scratch.path())
                .arg(format!("--dest-creds=ci:{}", platform.token));
        }
        None => {
            copy.arg("--dest-tls-verify=false");
        }
    }
    copy.arg(format!("oci:{}:python", layout.display()))
        .arg(format!("docker://{target}"));
    let pushed = run(copy, None, Duration::from_secs(120));
    assert!(pushed.ok(), "skopeo copy to {target}: {}", pushed.all());
    let (repository, _tag) = target.rsplit_once(':').unwrap();
    let digest = std::fs::read_to_string(&digest_file).unwrap();
    format!("{repository}@{}", digest.trim())
}

/// Turns the test repository of `hello` into a folder of Python built on `base` (pinned):
/// no `app.py`, and a manifest whose `spec.workload.build` runs [`python_app`]'s `main.py`.
pub fn set_build_manifest(repo: &Path, base: &str) {
    std::fs::remove_file(repo.join("app.py")).unwrap();
    std::fs::write(
        repo.join(".runway/runway.yml"),
        format!(
            "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: hello\n  \
             owner_email_handle: platform-team\n  department: engineering\nspec:\n  \
             container_port: 8080\n  regions: [local]\n  scalability:\n    min_instances: 1\n    \
             max_instances: 1\n  startup_probe:\n    path: /\n    period_seconds: 1\n    \
             failure_threshold: 60\n  deployment:\n    strategy: legacy\n  workload:\n    \
             secrets: [API_KEY]\n    build:\n      base: {base}\n      \
             command: [python3, main.py]\n      include: [main.py]\n"
        ),
    )
    .unwrap();
}

/// A Python service answering every GET with `page` on `$PORT`: the `main.py` of the tests
/// that build images from source.
pub fn python_app(page: &str) -> String {
    format!(
        "import http.server, os\n\
         class H(http.server.BaseHTTPRequestHandler):\n\
         \x20   def do_GET(self):\n\
         \x20       body = b\"{page}\\n\"\n\
         \x20       self.send_response(200)\n\
         \x20       self.send_header(\"Content-Length\", str(len(body)))\n\
         \x20       self.end_headers()\n\
         \x20       self.wfile.write(body)\n\
         http.server.HTTPServer((\"\", int(os.environ[\"PORT\"])), H).serve_forever()\n"
    )
}
