//! The targets: each proxy's configuration and start command, the upstream they share, and
//! the processes the bench runs.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::client::Client;

/// The host every target serves (SNI and `Host`), and the certificate's name.
pub(crate) const HOST: &str = "hello.bench.localhost";

/// What the upstream answers to every request.
pub(crate) const BODY: &[u8] = b"hello world\n";

/// Where a running target listens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Listening {
    /// Plain HTTP/1.1.
    pub(crate) plain: SocketAddr,
    /// TLS with ALPN h2 and http/1.1; None for the direct connection.
    pub(crate) tls: Option<SocketAddr>,
}

/// How many threads a proxy gets.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shape {
    /// This many threads (the ingress's runtime, nginx's workers, HAProxy's `nbthread`).
    Threads(u64),
    /// One process with one event loop, for instruction counts.
    Single,
}

/// How a target's process is started.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Launcher<'a> {
    /// As it is.
    Native,
    /// Under callgrind, which writes its dumps in this directory as `cg.PID[.PART]`.
    Callgrind(&'a Path),
}

impl Launcher<'_> {
    /// `command`, or valgrind running it.
    fn wrap(self, command: Command) -> Command {
        match self {
            Self::Native => command,
            Self::Callgrind(dir) => {
                let mut valgrind = Command::new("valgrind");
                valgrind
                    // Names written out in every dump, not as references to an earlier one, so that
                    // each dump kept (`--keep-dumps`) reads on its own.
                    .args(["--tool=callgrind", "--instr-atstart=yes", "--vgdb=yes"])
                    .arg("--compress-strings=no")
                    .arg(format!("--callgrind-out-file={}/cg.%p", dir.display()))
                    .arg(command.get_program())
                    .args(command.get_args());
                valgrind
            }
        }
    }

    /// How long a target may take to listen and answer its first requests.
    fn patience(self) -> Duration {
        match self {
            Self::Native => Duration::from_secs(10),
            Self::Callgrind(_) => Duration::from_secs(60),
        }
    }
}

#[derive(Debug)]
enum Kind {
    /// The upstream itself, no proxy: the baseline for added latency.
    Direct,
    Ingress,
    Nginx,
    Haproxy,
    /// A separate spike's binary (env `BENCH_PINGORA`).
    Pingora(PathBuf),
}

/// One target: a proxy, or the direct connection to the upstream.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) name: &'static str,
    kind: Kind,
}

impl Target {
    /// The program it needs on the PATH, when it is not one the bench built or was given.
    pub(crate) fn program(&self) -> Option<&'static str> {
        match self.kind {
            Kind::Nginx => Some("nginx"),
            Kind::Haproxy => Some("haproxy"),
            Kind::Direct | Kind::Ingress | Kind::Pingora(_) => None,
        }
    }

    /// How the target runs as one process with one event loop ([`Shape::Single`]).
    pub(crate) fn single(&self) -> &'static str {
        match self.kind {
            Kind::Direct => "no proxy",
            Kind::Ingress => "--threads 1 --event-loops 1",
            Kind::Nginx => "master_process off, worker_processes 1",
            Kind::Haproxy => "nbthread 1",
            Kind::Pingora(_) => "--threads 1",
        }
    }
}

/// A target started, listening and checked.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) name: &'static str,
    pub(crate) at: Listening,
    /// None for the direct connection (the upstream is not measured).
    process: Option<Process>,
}

impl Running {
    /// The process whose memory or instructions are measured.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Process::id)
    }
}

/// What every target shares: a temporary directory, a certificate for [`HOST`], the
/// upstream, and the bench's own client.
pub(crate) struct Bench {
    /// Stopped on drop, first.
    _upstream_process: Process,
    upstream: SocketAddr,
    ingress: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    pub(crate) client: Client,
    pub(crate) runtime: tokio::runtime::Runtime,
    dir: tempfile::TempDir,
}

impl Bench {
    /// Writes the certificate and starts the upstream.
    pub(crate) fn start() -> anyhow::Result<Self> {
        let me = std::env::current_exe().context("cannot find the bench's own binary")?;
        let ingress = me
            .parent()
            .and_then(Path::parent)
            .map(|dir| dir.join("runway-ingress"))
            .context("cannot find the target directory")?;
        if !ingress.exists() {
            bail!(
                "{} is missing: cargo build --profile ingress -p runway-ingress --bin runway-ingress --example bench",
                ingress.display()
            );
        }
        let dir = tempfile::tempdir().context("cannot make a temporary directory")?;
        let (cert, key, der) = write_certificate(dir.path())?;
        let upstream = free_port()?;
        let mut command = Command::new(&me);
        command.args(["upstream", &upstream.to_string()]);
        let mut upstream_process = Process::spawn(command, &dir.path().join("upstream.stderr"))?;
        upstream_process
            .wait_listening(upstream, Duration::from_secs(10))
            .context("the upstream does not start")?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the client's runtime")?;
        Ok(Self {
            _upstream_process: upstream_process,
            upstream,
            ingress,
            cert,
            key,
            client: Client::new(der)?,
            runtime,
            dir,
        })
    }

    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// runway-ingress, nginx, HAProxy and, when `BENCH_PINGORA` names its binary,
    /// pingora-spike; `direct` first when asked for.
    pub(crate) fn targets(&self, direct: bool) -> anyhow::Result<Vec<Target>> {
        let mut targets = Vec::new();
        if direct {
            targets.push(Target {
                name: "direct",
                kind: Kind::Direct,
            });
        }
        targets.extend([
            Target {
                name: "runway-ingress",
                kind: Kind::Ingress,
            },
            Target {
                name: "nginx",
                kind: Kind::Nginx,
            },
            Target {
                name: "haproxy",
                kind: Kind::Haproxy,
            },
        ]);
        if let Some(binary) = std::env::var_os("BENCH_PINGORA").filter(|v| !v.is_empty()) {
            let binary = PathBuf::from(binary);
            if !binary.is_file() {
                bail!("BENCH_PINGORA: {} is no file", binary.display());
            }
            targets.push(Target {
                name: "pingora-spike",
                kind: Kind::Pingora(binary),
            });
        }
        Ok(targets)
    }

    /// Starts `target`, waits until it listens, and checks that one GET over each protocol it
    /// serves gets the upstream's answer.
    pub(crate) fn launch(
        &self,
        target: &Target,
        shape: Shape,
        launcher: Launcher<'_>,
    ) -> anyhow::Result<Running> {
        let (at, process) = if let Kind::Direct = target.kind {
            let at = Listening {
                plain: self.upstream,
                tls: None,
            };
            (at, None)
        } else {
            let (plain, tls) = (free_port()?, free_port()?);
            let command = launcher.wrap(self.command(&target.kind, plain, tls, shape)?);
            let stderr = self.dir().join(format!("{}.stderr", target.name));
            let mut process = Process::spawn(command, &stderr)
                .with_context(|| format!("cannot start {}", target.name))?;
            for address in [plain, tls] {
                process
                    .wait_listening(address, launcher.patience())
                    .with_context(|| format!("{} does not start", target.name))?;
            }
            let at = Listening {
                plain,
                tls: Some(tls),
            };
            (at, Some(process))
        };
        let patience = launcher.patience();
        let check = async { tokio::time::timeout(patience, self.client.check(at)).await };
        match self.runtime.block_on(check) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                return Err(error.context(format!("{} does not answer as it should", target.name)));
            }
            Err(_) => bail!("{} does not answer within {patience:?}", target.name),
        }
        Ok(Running {
            name: target.name,
            at,
            process,
        })
    }

    /// Writes the target's configuration and gives the command that starts it.
    fn command(
        &self,
        kind: &Kind,
        plain: SocketAddr,
        tls: SocketAddr,
        shape: Shape,
    ) -> anyhow::Result<Command> {
        match kind {
            Kind::Direct => bail!("the direct connection has no process"),
            Kind::Ingress => self.ingress_command(plain, tls, shape),
            Kind::Nginx => self.nginx_command(plain, tls, shape),
            Kind::Haproxy => self.haproxy_command(plain, tls, shape),
            Kind::Pingora(binary) => Ok(self.pingora_command(binary, plain, tls, shape)),
        }
    }

    fn ingress_command(
        &self,
        plain: SocketAddr,
        tls: SocketAddr,
        shape: Shape,
    ) -> anyhow::Result<Command> {
        let routes = self.dir().join("routes.json");
        let mut route = serde_json::json!({"service": "hello", "env": "bench", "revisions": [
            {"name": "hello-1", "weight": 100, "instances": [{"address": self.upstream}]}
        ]});
        // `BENCH_CONTROLS=1`: what a route's controls cost when every request passes them
        // (both buckets, far above the load; an allow list naming loopback).
        if std::env::var("BENCH_CONTROLS").is_ok_and(|v| v == "1") {
            route["controls"] = serde_json::json!({
                "rate_limit": {"requests_per_second": 1e7, "burst": 10_000_000},
                "client_rate_limit": {"requests_per_second": 1e7, "burst": 10_000_000},
                "allow": ["127.0.0.0/8"],
                "deny": ["192.0.2.0/24"]
            });
        }
        let table = serde_json::json!({"domain": "localhost", "routes": [route]});
        std::fs::write(&routes, table.to_string()).context("cannot write routes.json")?;
        let mut command = Command::new(&self.ingress);
        command
            .arg("--routes")
            .arg(&routes)
            .args(["--listen", &plain.to_string()])
            .args(["--https", &tls.to_string(), "--no-redirect"])
            .arg("--ca-dir")
            .arg(self.dir().join("ca"))
            .arg("--certificate")
            .arg(format!(
                "{HOST}:{}:{}",
                self.cert.display(),
                self.key.display()
            ))
            .args(["--admin", &free_port()?.to_string()])
            // Every load comes from 127.0.0.1, and the peers limit no address's connections
            // (nginx's `limit_conn` and HAProxy's stick tables are off unless configured).
            .args(["--max-connections-per-client", "0"]);
        // `BENCH_OTLP=URL`: every request traced, its spans sent to that collector.
        // `BENCH_OTLP_RATIO`: the share of those traces kept (`--trace-sample-ratio`).
        if let Some(endpoint) = std::env::var("BENCH_OTLP").ok().filter(|v| !v.is_empty()) {
            command.args(["--otlp-endpoint", &endpoint]);
            if let Ok(ratio) = std::env::var("BENCH_OTLP_RATIO") {
                command.args(["--trace-sample-ratio", &ratio]);
            }
        }
        match shape {
            Shape::Single => {
                command.args(["--threads", "1", "--event-loops", "1"]);
            }
            Shape::Threads(threads) => {
                command.args(["--threads", &threads.to_string()]);
                if let Ok(loops) = std::env::var("BENCH_EVENT_LOOPS") {
                    command.args(["--event-loops", &loops]);
                }
            }
        }
        Ok(command)
    }

    fn nginx_command(
        &self,
        plain: SocketAddr,
        tls: SocketAddr,
        shape: Shape,
    ) -> anyhow::Result<Command> {
        let config = self.dir().join("nginx.conf");
        std::fs::write(&config, self.nginx_config(plain, tls, shape))
            .context("cannot write nginx.conf")?;
        let mut command = Command::new("nginx");
        command
            .arg("-p")
            .arg(self.dir())
            .arg("-e")
            .arg(self.dir().join("nginx-error.log"))
            .arg("-c")
            .arg(&config);
        Ok(command)
    }

    fn nginx_config(&self, plain: SocketAddr, tls: SocketAddr, shape: Shape) -> String {
        let d = self.dir().display();
        let (cert, key) = (self.cert.display(), self.key.display());
        let upstream = self.upstream;
        let processes = match shape {
            Shape::Threads(workers) => format!("worker_processes {workers};"),
            Shape::Single => "master_process off;\nworker_processes 1;".to_owned(),
        };
        let ingress_work = if minimal_peers() {
            ""
        } else {
            "            # What the ingress adds: the forwarding headers and a request id both ways.
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Forwarded-Host $http_host;
            proxy_set_header X-Request-Id $request_id;
            add_header X-Request-Id $request_id always;
"
        };
        format!(
            "{processes}
daemon off;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    # nginx closes a keep-alive connection after 1,000 requests by default, client side and
    # upstream side; the ingress does not, and h2load does not reconnect: lift the limit.
    keepalive_requests 1000000;
    # `keepalive` is the idle upstream connections each worker keeps (nginx's documentation:
    # the cache of each worker process). Under the HTTP/2 load's 500 streams, 64 made nginx open
    # and close upstream connections on every burst; the ingress and HAProxy keep as many as
    # they use. 512 per worker covers every stream the loads have in flight.
    upstream app {{ server {upstream}; keepalive 512; keepalive_requests 1000000; }}
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    server {{
        # reuseport: a socket per worker, as the ingress has one per event loop.
        listen {plain} reuseport;
        listen {tls} ssl http2 reuseport;
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
{ingress_work}        }}
    }}
}}
"
        )
    }

    fn haproxy_command(
        &self,
        plain: SocketAddr,
        tls: SocketAddr,
        shape: Shape,
    ) -> anyhow::Result<Command> {
        // HAProxy takes the certificate and its key in one file.
        let pem = self.dir().join("haproxy.pem");
        let cert = std::fs::read_to_string(&self.cert).context("cannot read cert.pem")?;
        let key = std::fs::read_to_string(&self.key).context("cannot read key.pem")?;
        std::fs::write(&pem, cert + &key).context("cannot write haproxy.pem")?;
        let config = self.dir().join("haproxy.cfg");
        let threads = match shape {
            Shape::Threads(threads) => threads,
            Shape::Single => 1,
        };
        std::fs::write(
            &config,
            haproxy_config(plain, tls, &pem, self.upstream, threads),
        )
        .context("cannot write haproxy.cfg")?;
        let mut command = Command::new("haproxy");
        // -db: in the foreground, one process (no master), so SIGTERM on drop stops it.
        command.arg("-db").arg("-f").arg(&config);
        Ok(command)
    }

    fn pingora_command(
        &self,
        binary: &Path,
        plain: SocketAddr,
        tls: SocketAddr,
        shape: Shape,
    ) -> Command {
        let threads = match shape {
            Shape::Threads(threads) => threads,
            Shape::Single => 1,
        };
        let mut command = Command::new(binary);
        command
            .args(["--listen", &plain.to_string()])
            .args(["--https", &tls.to_string()])
            .arg("--cert")
            .arg(&self.cert)
            .arg("--key")
            .arg(&self.key)
            .args(["--upstream", &self.upstream.to_string()])
            .args(["--threads", &threads.to_string()]);
        command
    }
}

/// HAProxy as the other proxies are set up: keep-alive to the upstream (`http-reuse always`),
/// `Host` passed on, the ingress's headers added (`X-Forwarded-For`, `-Proto`, `-Host`, an
/// `X-Request-Id` made and sent both ways), no log (no `log` line anywhere).
fn haproxy_config(
    plain: SocketAddr,
    tls: SocketAddr,
    pem: &Path,
    upstream: SocketAddr,
    threads: u64,
) -> String {
    let pem = pem.display();
    let ingress_work = if minimal_peers() {
        ""
    } else {
        "    # What the ingress adds: the forwarding headers and a request id (128 random bits as 32
    # hex digits) both ways.
    unique-id-format %[rand(4294967295),hex]%[rand(4294967295),hex]%[rand(4294967295),hex]%[rand(4294967295),hex]
    http-request set-header X-Forwarded-Proto https if { ssl_fc }
    http-request set-header X-Forwarded-Proto http unless { ssl_fc }
    http-request set-header X-Forwarded-Host %[req.hdr(host)]
    http-request set-header X-Request-Id %[unique-id]
    http-response set-header X-Request-Id %[unique-id]
"
    };
    format!(
        "global
    nbthread {threads}
    maxconn 4096
    ssl-default-bind-options ssl-min-ver TLSv1.2

defaults
    mode http
    option forwardfor
    http-reuse always
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s

frontend bench
    bind {plain}
    bind {tls} ssl crt {pem} alpn h2,http/1.1
{ingress_work}    default_backend app

backend app
    server app {upstream}
"
    )
}

/// A certificate for [`HOST`] and its key, as PEM files in `dir`, and the certificate for the
/// client to trust.
fn write_certificate(
    dir: &Path,
) -> anyhow::Result<(PathBuf, PathBuf, rustls::pki_types::CertificateDer<'static>)> {
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec![HOST.to_owned()])?.self_signed(&key)?;
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.pem()).context("cannot write cert.pem")?;
    std::fs::write(&key_path, key.serialize_pem()).context("cannot write key.pem")?;
    Ok((cert_path, key_path, cert.der().clone()))
}

/// Fails, before anything is measured, naming every one of `programs` not on the PATH.
pub(crate) fn require<'a>(programs: impl IntoIterator<Item = &'a str>) -> anyhow::Result<()> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let missing: Vec<&str> = programs
        .into_iter()
        .filter(|program| !std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
        .collect();
    if !missing.is_empty() {
        bail!(
            "not on the PATH: {} (Debian: nginx-light, haproxy, wrk, nghttp2-client for h2load, \
             valgrind for callgrind)",
            missing.join(", ")
        );
    }
    Ok(())
}

/// `BENCH_PEERS=minimal`: nginx and HAProxy only pass `Host` on and add `X-Forwarded-For`
/// (the least a reverse proxy does), not the rest of the ingress's per-request work.
fn minimal_peers() -> bool {
    std::env::var("BENCH_PEERS").is_ok_and(|peers| peers == "minimal")
}

fn free_port() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot find a free port")?;
    Ok(listener.local_addr()?)
}

/// A child process, its stderr in a file, stopped on drop.
#[derive(Debug)]
struct Process {
    child: Child,
    stderr: PathBuf,
}

impl Process {
    fn spawn(mut command: Command, stderr: &Path) -> anyhow::Result<Self> {
        let file =
            File::create(stderr).with_context(|| format!("cannot create {}", stderr.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .with_context(|| {
                format!(
                    "cannot run {:?} (is it on the PATH?)",
                    command.get_program()
                )
            })?;
        Ok(Self {
            child,
            stderr: stderr.to_owned(),
        })
    }

    fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits until something accepts connections on `address`, failing early if the process
    /// exits.
    fn wait_listening(&mut self, address: SocketAddr, patience: Duration) -> anyhow::Result<()> {
        let start = Instant::now();
        while TcpStream::connect(address).is_err() {
            if let Some(status) = self.child.try_wait()? {
                bail!("it exited ({status}); its stderr:\n{}", self.stderr_tail());
            }
            if start.elapsed() > patience {
                bail!(
                    "nothing listens on {address} after {patience:?}; its stderr:\n{}",
                    self.stderr_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The last lines the process wrote on stderr.
    fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        if lines.is_empty() {
            return "(nothing)".to_owned();
        }
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SIGTERM first: nginx's master stops its workers on it, not on SIGKILL.
        let _ = Command::new("kill")
            .arg(self.id().to_string())
            .stderr(Stdio::null())
            .status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
