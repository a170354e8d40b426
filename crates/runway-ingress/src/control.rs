//! The ingress's control socket: how a control plane in another process feeds it.
//!
//! `runway-ingress --state-dir DIR` listens on `DIR/control.sock` (`0600`, in a `0700`
//! directory) for one JSON request a line, as the instances' supervisors do. A connection
//! carries one request:
//!
//! | request | answer |
//! | --- | --- |
//! | `{"request":"hello"}` | `{"reply":"hello", ...}`: protocol, version, build, pid (and `worker`, the process serving, under `--supervise`), listen addresses (as asked and as bound), the table in force |
//! | `{"request":"set_routes","table":{...}}` | `done` once the table is validated, in force and saved to `DIR/table.json` (`0600`: it holds its certificates' keys); `error` when refused (the old table stays) |
//! | `{"request":"drain","address":"127.0.0.1:PORT","grace_ms":N}` | `drained` with `idle`, once the instance has no request in flight or the grace is over |
//! | `{"request":"watch","interval_ms":N}` | a stream: `stats` (every revision's figures) every interval, `scale_up` the moment a revision at zero holds a request |
//! | `{"request":"stop"}` | `done`, then the ingress stops accepting, lets in-flight requests finish and exits |
//!
//! [`ControlClient`] sends one request; [`RemoteIngress`] is the control plane's handle on a
//! running ingress: it pushes tables and drains, and keeps a `watch` open to hold the latest
//! figures (read without waiting) and forward scale-up signals.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{broadcast, watch};

use crate::Ingress;
use crate::config::RouteTableConfig;
use crate::metrics::{RevisionSnapshot, RevisionStats};
use crate::table::ScaleUp;

/// The protocol's version; an ingress speaking another is replaced, not fed.
pub const PROTOCOL_VERSION: u32 = 1;
/// The control socket, in the ingress's state directory.
pub const SOCKET: &str = "control.sock";
/// The last table set, in the ingress's state directory: served again after a restart.
pub const TABLE_FILE: &str = "table.json";
/// The running ingress's process id, in its state directory.
pub const PID_FILE: &str = "ingress.pid";
/// The longest request or reply line: a table of many thousand routes fits.
pub const MAX_LINE_BYTES: u64 = 64 << 20;
/// Time a client has to send its request once connected (a replacement opens its connection
/// to the old ingress before starting the new one, which has `start_timeout` to answer).
pub const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest drain grace the socket accepts.
pub const MAX_DRAIN_GRACE: Duration = Duration::from_secs(3600);
/// The bounds of a `watch`'s interval.
pub const WATCH_INTERVAL_BOUNDS: (Duration, Duration) =
    (Duration::from_millis(20), Duration::from_secs(10));

/// One request on the control socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Hello,
    SetRoutes { table: RouteTableConfig },
    Drain { address: SocketAddr, grace_ms: u64 },
    Watch { interval_ms: u64 },
    Stop,
}

/// One reply (a `watch` gets many).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    Hello(Box<Hello>),
    Done,
    Drained { idle: bool },
    Stats { revisions: Vec<RevisionSnapshot> },
    ScaleUp(ScaleUp),
    Error { message: String },
}

/// Who answers on the socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    /// The ingress's package version.
    pub version: String,
    /// Its build: see [`build_of`]. A control plane replaces an ingress whose build is not the
    /// one it would start.
    pub build: String,
    /// The ingress's process, the one to watch and stop: under `--supervise`, the supervisor
    /// (which starts the process serving again when it dies).
    pub pid: u32,
    /// Under `--supervise`, the process serving now. None for an ingress of one process, or
    /// one whose supervisor is gone (it serves on until replaced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<u32>,
    /// The addresses it was asked to listen on (a port may be 0).
    pub listen: Listen,
    /// The addresses it listens on.
    pub bound: Listen,
    /// The table in force.
    pub table: RouteTableConfig,
}

/// Where an ingress serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listen {
    /// Plain HTTP (HTTP/1.1 and h2c), or the redirect to HTTPS.
    pub http: SocketAddr,
    /// HTTPS (HTTP/2 by ALPN).
    pub https: Option<SocketAddr>,
    /// `/metrics` and `/healthz`.
    pub admin: SocketAddr,
    /// With `https`, plain HTTP redirects to it.
    pub redirect: bool,
    /// The operator's certificates, as `--certificate` takes them
    /// (`DOMAIN[,DOMAIN...]:CERT.pem:KEY.pem`): served before any the table carries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<String>,
    /// The private listener, which only instances reach (`--private-listen`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private: Option<SocketAddr>,
    /// The instances' resolver, UDP and TCP (`--dns-listen`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<SocketAddr>,
    /// Where it forwards what is not the platform's (`--dns-upstream`); empty,
    /// `/etc/resolv.conf`'s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_upstreams: Vec<SocketAddr>,
    /// The operator's Cloudflare ranges file (`--cloudflare-ranges`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloudflare_ranges: Option<std::path::PathBuf>,
    /// Where its traces go (`--otlp-endpoint`, `--trace-sample-ratio`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traces: Option<TraceExport>,
    /// `--max-connections-per-client`; none, the ingress's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections_per_client: Option<usize>,
    /// `--max-rate-limited-clients`; none, the ingress's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rate_limited_clients: Option<usize>,
}

impl Listen {
    /// Plain HTTP on `http` and the admin port on `admin`, and nothing else: no HTTPS, no
    /// private listener or resolver, the ingress's defaults for the rest.
    pub fn plain(http: SocketAddr, admin: SocketAddr) -> Self {
        Self {
            http,
            https: None,
            admin,
            redirect: false,
            certificates: Vec::new(),
            private: None,
            dns: None,
            dns_upstreams: Vec::new(),
            cloudflare_ranges: None,
            traces: None,
            max_connections_per_client: None,
            max_rate_limited_clients: None,
        }
    }
}

/// Where an ingress sends its traces, and the share of traces started there it keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceExport {
    /// The collector's OTLP/HTTP base URL.
    pub endpoint: String,
    /// 0 to 1.
    pub sample_ratio: f64,
}

/// What went wrong talking to an ingress.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("cannot reach the ingress at {at}")]
    Connect {
        at: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the ingress at {at} did not answer within {after:?}")]
    Timeout { at: String, after: Duration },
    #[error("lost the connection to the ingress at {at}")]
    Io {
        at: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the ingress at {at} closed the connection without an answer")]
    Closed { at: String },
    #[error("the ingress at {at} answered something unreadable")]
    Protocol {
        at: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("the ingress refused: {message}")]
    Refused { message: String },
    #[error("the ingress answered {got} to {asked}")]
    Unexpected { asked: &'static str, got: String },
    #[error("cannot start the ingress: {message}")]
    Start { message: String },
}

/// A build's identity: its version, and the size and modification time of its executable.
/// Two builds of one version differ here; the same file started twice does not.
pub fn build_of(program: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let version = env!("CARGO_PKG_VERSION");
    match std::fs::metadata(program) {
        Ok(meta) => format!(
            "{version}+{}.{}.{}",
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec()
        ),
        Err(_) => format!("{version}+unknown"),
    }
}

// ---------------------------------------------------------------------------------------
// The ingress's side.

/// What the control socket serves from.
#[derive(Debug)]
pub struct ControlState {
    ingress: Ingress,
    dir: PathBuf,
    listen: Listen,
    bound: Listen,
    build: String,
    /// The table in force, as given; set under this lock, so saves happen in order.
    table: tokio::sync::Mutex<RouteTableConfig>,
    /// Told `true` on a `stop` request.
    stop: watch::Sender<bool>,
    /// Under `--supervise`, the supervisor's pid while it lives; 0 otherwise.
    supervisor: Arc<AtomicU32>,
}

impl ControlState {
    /// `table` is in force already.
    pub fn new(
        ingress: Ingress,
        dir: &Path,
        listen: Listen,
        bound: Listen,
        table: RouteTableConfig,
        stop: watch::Sender<bool>,
    ) -> Self {
        let build = std::env::current_exe().map_or_else(
            |_| format!("{}+unknown", env!("CARGO_PKG_VERSION")),
            |exe| build_of(&exe),
        );
        Self {
            ingress,
            dir: dir.to_owned(),
            listen,
            bound,
            build,
            table: tokio::sync::Mutex::new(table),
            stop,
            supervisor: Arc::new(AtomicU32::new(0)),
        }
    }

    /// This ingress is a supervisor's worker: `hello` names the supervisor as the ingress's
    /// process while `supervisor` holds its pid (0 once it is gone), and this one as `worker`.
    pub fn supervised_by(mut self, supervisor: Arc<AtomicU32>) -> Self {
        self.supervisor = supervisor;
        self
    }

    async fn hello(&self) -> Hello {
        let own = std::process::id();
        let (pid, worker) = match self.supervisor.load(Ordering::Relaxed) {
            0 => (own, None),
            supervisor => (supervisor, Some(own)),
        };
        Hello {
            protocol: PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            build: self.build.clone(),
            pid,
            worker,
            listen: self.listen.clone(),
            bound: self.bound.clone(),
            table: self.table.lock().await.clone(),
        }
    }

    /// Validates, swaps in and saves a table; the old one stays on a refusal.
    async fn set_routes(&self, table: RouteTableConfig) -> Reply {
        let mut current = self.table.lock().await;
        if let Err(error) = self.ingress.set_routes(&table) {
            return Reply::Error {
                message: error.to_string(),
            };
        }
        // In force from here. Unsaved, a restart would serve an older table that the control
        // plane believes is saved: the error makes it send the table again until it is.
        let saved = save_table(&self.dir, &table).await;
        *current = table;
        match saved {
            Ok(()) => Reply::Done,
            Err(error) => Reply::Error {
                message: format!(
                    "the table is in force but could not be saved in {}: {error}",
                    self.dir.display()
                ),
            },
        }
    }
}

/// The table saved in `dir`, if any; a missing file is an empty table, an unreadable one an
/// error (the operator decides, rather than the ingress serving nothing in silence).
pub fn load_table(dir: &Path) -> Result<Option<RouteTableConfig>, crate::ConfigError> {
    let path = dir.join(TABLE_FILE);
    if !path.exists() {
        return Ok(None);
    }
    RouteTableConfig::load(&path).map(Some)
}

/// Writes the table beside its place and renames it there: a crash leaves the old or the new.
/// Both are `0600`: a table holds its certificates' private keys.
async fn save_table(dir: &Path, table: &RouteTableConfig) -> std::io::Result<()> {
    let text = serde_json::to_vec(table).map_err(std::io::Error::other)?;
    let temporary = dir.join(format!("{TABLE_FILE}.tmp"));
    let path = dir.join(TABLE_FILE);
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?;
        // One left behind by an older build may be wider: narrowed before a key is written.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Serves the control socket until `shutdown` completes; each connection in a task of its own.
pub async fn serve_control(
    listener: UnixListener,
    state: Arc<ControlState>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(connection(stream, Arc::clone(&state), Origin::Socket));
                }
                // Out of descriptors, say: wait it out, keep serving.
                Err(_) => crate::timer::sleep(Duration::from_millis(10)).await,
            },
            () = &mut shutdown => return,
        }
    }
}

/// Serves control connections from the network until `shutdown` completes: each must present
/// a client certificate of the control plane's authority (`acceptor` demands it) and finish
/// its handshake within [`HANDSHAKE_TIMEOUT`]; at most [`MAX_HANDSHAKES`] at once.
pub async fn serve_control_tls(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    state: Arc<ControlState>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    // More handshakes under way than any control plane needs: refused.
                    let Ok(permit) = Arc::clone(&handshakes).try_acquire_owned() else {
                        continue;
                    };
                    let (acceptor, state) = (acceptor.clone(), Arc::clone(&state));
                    tokio::spawn(async move {
                        let _ = tcp.set_nodelay(true);
                        let handshake = crate::timer::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
                        let stream = match handshake.await {
                            Ok(Ok(stream)) => stream,
                            Ok(Err(error)) => {
                                tracing::warn!(%peer, %error, "control connection refused");
                                return;
                            }
                            Err(_) => return,
                        };
                        drop(permit);
                        connection(stream, state, Origin::Network).await;
                    });
                }
                Err(_) => crate::timer::sleep(Duration::from_millis(10)).await,
            },
            () = &mut shutdown => return,
        }
    }
}

/// How long a network control connection has for its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Network control connections in their handshake at once.
pub const MAX_HANDSHAKES: usize = 64;

/// Where a control connection came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The socket, `0600` in a `0700` directory: this ingress's own user.
    Socket,
    /// The network, authenticated by the control plane's client certificate.
    Network,
}

async fn connection<S: AsyncRead + AsyncWrite + Send>(
    stream: S,
    state: Arc<ControlState>,
    origin: Origin,
) {
    let (read, mut write) = tokio::io::split(stream);
    let mut lines = BufReader::new(read.take(MAX_LINE_BYTES));
    let request = match crate::timer::timeout(REQUEST_READ_TIMEOUT, read_line(&mut lines)).await {
        Ok(Ok(Some(line))) => serde_json::from_str::<Request>(&line),
        // Gone, silent or too long: nothing to answer.
        _ => return,
    };
    let request = match request {
        Ok(request) => request,
        Err(error) => {
            let _ = send(
                &mut write,
                &Reply::Error {
                    message: format!("not a request: {error}"),
                },
            )
            .await;
            return;
        }
    };
    match request {
        Request::Hello => {
            let _ = send(&mut write, &Reply::Hello(Box::new(state.hello().await))).await;
        }
        Request::SetRoutes { table } => {
            let reply = state.set_routes(table).await;
            let _ = send(&mut write, &reply).await;
        }
        Request::Drain { address, grace_ms } => {
            let grace = Duration::from_millis(grace_ms).min(MAX_DRAIN_GRACE);
            let idle = state.ingress.drain(address, grace).await;
            let _ = send(&mut write, &Reply::Drained { idle }).await;
        }
        Request::Watch { interval_ms } => {
            let (low, high) = WATCH_INTERVAL_BOUNDS;
            let interval = Duration::from_millis(interval_ms).clamp(low, high);
            watch_stream(&state, &mut write, interval).await;
        }
        // Over the network an ingress is a pod of a Deployment, or a unit of a service manager:
        // whoever runs it stops it, and a control plane could not start it again.
        Request::Stop if origin == Origin::Network => {
            let message = "`stop` is taken only on the control socket: this ingress is stopped \
                           by whoever runs it"
                .to_owned();
            let _ = send(&mut write, &Reply::Error { message }).await;
        }
        Request::Stop => {
            let _ = send(&mut write, &Reply::Done).await;
            let _ = state.stop.send(true);
        }
    }
}

/// Streams figures every `interval` and scale-up signals as they come, until the client goes.
/// A signal is preceded by the figures of that moment: the control plane decides on them at
/// once, and figures up to an interval old would not show the request just held (a cold
/// start would wait for the next ones, or the autoscaler's next round).
async fn watch_stream(
    state: &ControlState,
    write: &mut (impl AsyncWrite + Unpin),
    interval: Duration,
) {
    let mut scale_up = state.ingress.subscribe_scale_up();
    let mut ticks = crate::timer::Interval::new(interval);
    let mut stopped = state.stop.subscribe();
    loop {
        let reply = tokio::select! {
            _ = ticks.tick() => Reply::Stats {
                revisions: state.ingress.metrics().all_revision_stats(),
            },
            signal = scale_up.recv() => match signal {
                Ok(signal) => Reply::ScaleUp(signal),
                // Missed some: the held gauge in the next figures says the same.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = stopped.wait_for(|stop| *stop) => return,
        };
        if matches!(reply, Reply::ScaleUp(_)) {
            let now = Reply::Stats {
                revisions: state.ingress.metrics().all_revision_stats(),
            };
            if send(write, &now).await.is_err() {
                return;
            }
        }
        if send(write, &reply).await.is_err() {
            return;
        }
    }
}

async fn send(
    write: &mut (impl AsyncWriteExt + Unpin),
    message: &impl Serialize,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await
}

/// The next line, without its end; `None` at the end of the stream. A line cut by the length
/// limit is an error.
async fn read_line<R: AsyncRead + Unpin>(
    lines: &mut BufReader<tokio::io::Take<R>>,
) -> std::io::Result<Option<String>> {
    let mut line = String::new();
    if lines.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    if !line.ends_with('\n') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "a line longer than the limit, or cut short",
        ));
    }
    line.pop();
    Ok(Some(line))
}

/// Binds the control socket at `dir/control.sock`, `0600`: bound under a name of its own and
/// renamed into place, so an ingress replacing another takes the path over at once (the old
/// one keeps serving the connections it has). Returns the listener and the socket's inode,
/// for [`remove_socket_if_ours`].
pub fn bind_socket(dir: &Path) -> std::io::Result<(UnixListener, u64)> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let path = dir.join(SOCKET);
    let own = dir.join(format!("{SOCKET}.{}", std::process::id()));
    let _ = std::fs::remove_file(&own);
    let listener = UnixListener::bind(&own)?;
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o600))?;
    let inode = std::fs::metadata(&own)?.ino();
    std::fs::rename(&own, &path)?;
    Ok((listener, inode))
}

/// Removes `dir/control.sock` unless another ingress has taken the path over since.
pub fn remove_socket_if_ours(dir: &Path, inode: u64) {
    use std::os::unix::fs::MetadataExt;
    let path = dir.join(SOCKET);
    if std::fs::metadata(&path).is_ok_and(|meta| meta.ino() == inode) {
        let _ = std::fs::remove_file(path);
    }
}

// ---------------------------------------------------------------------------------------
// The control plane's side.

/// Where a control connection goes: the socket of an ingress on this machine, or an ingress
/// listening on the network (`--control-listen`), reached with mutual TLS.
#[derive(Clone)]
pub enum Endpoint {
    Socket(PathBuf),
    Tls {
        address: SocketAddr,
        tls: crate::control_tls::ClientTls,
    },
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Socket(path) => write!(f, "{}", path.display()),
            Self::Tls { address, .. } => write!(f, "tls://{address}"),
        }
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Endpoint({self})")
    }
}

/// A control connection's byte stream, whatever carries it.
pub trait ControlStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> ControlStream for T {}

impl Endpoint {
    async fn connect(&self) -> std::io::Result<Box<dyn ControlStream>> {
        match self {
            Self::Socket(path) => Ok(Box::new(UnixStream::connect(path).await?)),
            Self::Tls { address, tls } => {
                let tcp = tokio::net::TcpStream::connect(address).await?;
                tcp.set_nodelay(true)?;
                Ok(Box::new(tls.connect(tcp).await?))
            }
        }
    }
}

/// Sends one request to an ingress.
#[derive(Debug, Clone)]
pub struct ControlClient {
    endpoint: Endpoint,
    /// Bound on connecting, sending and reading a short answer (not a drain's wait).
    pub timeout: Duration,
}

/// A connection opened ahead of its request (see [`ControlClient::open`]).
pub struct Opened {
    at: String,
    stream: Box<dyn ControlStream>,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

impl ControlClient {
    /// The default bound on a short request.
    pub const TIMEOUT: Duration = Duration::from_secs(5);

    /// The ingress whose state directory is `dir`, on its socket.
    pub fn new(dir: &Path) -> Self {
        Self::at(Endpoint::Socket(dir.join(SOCKET)))
    }

    pub fn at(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            timeout: Self::TIMEOUT,
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Connects now; the request follows later, to whoever answered now.
    pub async fn open(&self) -> Result<Opened, ControlError> {
        let at = self.endpoint.to_string();
        let stream = crate::timer::timeout(self.timeout, self.endpoint.connect())
            .await
            .map_err(|_| ControlError::Timeout {
                at: at.clone(),
                after: self.timeout,
            })?
            .map_err(|source| ControlError::Connect {
                at: at.clone(),
                source,
            })?;
        Ok(Opened { at, stream })
    }

    /// One request and its one answer, all within `bound`.
    pub async fn call(&self, request: &Request, bound: Duration) -> Result<Reply, ControlError> {
        let opened = self.open().await?;
        opened.call(request, bound).await
    }

    pub async fn hello(&self) -> Result<Hello, ControlError> {
        match self.call(&Request::Hello, self.timeout).await? {
            Reply::Hello(hello) => Ok(*hello),
            other => Err(unexpected("hello", other)),
        }
    }

    /// Sets the whole table; `Ok` once it is in force.
    pub async fn set_routes(&self, table: &RouteTableConfig) -> Result<(), ControlError> {
        let request = Request::SetRoutes {
            table: table.clone(),
        };
        match self.call(&request, self.timeout).await? {
            Reply::Done => Ok(()),
            other => Err(unexpected("set_routes", other)),
        }
    }

    /// Drains an instance; true when none of its requests was left at the end of `grace`.
    pub async fn drain(&self, address: SocketAddr, grace: Duration) -> Result<bool, ControlError> {
        let request = Request::Drain {
            address,
            grace_ms: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
        };
        match self.call(&request, grace + self.timeout).await? {
            Reply::Drained { idle } => Ok(idle),
            other => Err(unexpected("drain", other)),
        }
    }

    /// Asks the ingress to stop (it finishes its in-flight requests first).
    pub async fn stop(&self) -> Result<(), ControlError> {
        let opened = self.open().await?;
        opened.stop(self.timeout).await
    }
}

impl Opened {
    pub async fn call(mut self, request: &Request, bound: Duration) -> Result<Reply, ControlError> {
        let at = self.at.clone();
        let exchange = async {
            send(&mut self.stream, request)
                .await
                .map_err(|source| ControlError::Io {
                    at: at.clone(),
                    source,
                })?;
            let mut lines = BufReader::new((&mut self.stream).take(MAX_LINE_BYTES));
            match read_line(&mut lines).await {
                Ok(Some(line)) => {
                    serde_json::from_str::<Reply>(&line).map_err(|source| ControlError::Protocol {
                        at: at.clone(),
                        source,
                    })
                }
                Ok(None) => Err(ControlError::Closed { at: at.clone() }),
                Err(source) => Err(ControlError::Io {
                    at: at.clone(),
                    source,
                }),
            }
        };
        let reply =
            crate::timer::timeout(bound, exchange)
                .await
                .map_err(|_| ControlError::Timeout {
                    at: self.at.clone(),
                    after: bound,
                })??;
        match reply {
            Reply::Error { message } => Err(ControlError::Refused { message }),
            reply => Ok(reply),
        }
    }

    /// Asks whoever answered when this was opened to stop.
    pub async fn stop(self, bound: Duration) -> Result<(), ControlError> {
        match self.call(&Request::Stop, bound).await? {
            Reply::Done => Ok(()),
            other => Err(unexpected("stop", other)),
        }
    }
}

fn unexpected(asked: &'static str, reply: Reply) -> ControlError {
    let got = serde_json::to_value(&reply)
        .ok()
        .and_then(|value| {
            value
                .get("reply")
                .and_then(|r| r.as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "something else".to_owned());
    ControlError::Unexpected { asked, got }
}

/// Bounds of a [`RemoteIngress`].
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Bound on a short request (hello, a table, stop).
    pub timeout: Duration,
    /// How often the ingress sends every revision's figures: how old
    /// [`RemoteIngress::revision_stats`] may be.
    pub stats_interval: Duration,
    /// Time between attempts to reconnect the watch after losing it.
    pub reconnect: Duration,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        Self {
            timeout: ControlClient::TIMEOUT,
            stats_interval: Duration::from_millis(200),
            reconnect: Duration::from_millis(200),
        }
    }
}

type StatsKey = (String, String, String);

#[derive(Debug)]
struct Shared {
    client: ControlClient,
    /// The figures of the last `stats` received; kept while the watch is lost (the last known
    /// demand is better than none for the autoscaler).
    stats: Mutex<HashMap<StatsKey, RevisionStats>>,
    scale_up: broadcast::Sender<ScaleUp>,
    /// Whether the watch is connected; said once each time it changes.
    connected: Mutex<bool>,
}

/// The control plane's handle on an ingress running in its own process: tables and drains go
/// to its socket; its figures and scale-up signals come back over a `watch` kept open (and
/// reopened, every `reconnect`, when lost) by a task that ends with the last clone.
#[derive(Debug, Clone)]
pub struct RemoteIngress {
    shared: Arc<Shared>,
    hello: Hello,
}

impl RemoteIngress {
    /// Says hello to the ingress of `dir` and starts watching it.
    pub async fn connect(dir: &Path, options: RemoteOptions) -> Result<Self, ControlError> {
        Self::connect_to(Endpoint::Socket(dir.join(SOCKET)), options).await
    }

    /// Says hello to the ingress at `endpoint` and starts watching it.
    pub async fn connect_to(
        endpoint: Endpoint,
        options: RemoteOptions,
    ) -> Result<Self, ControlError> {
        let mut client = ControlClient::at(endpoint);
        client.timeout = options.timeout;
        let hello = client.hello().await?;
        let shared = Arc::new(Shared {
            client,
            stats: Mutex::default(),
            scale_up: broadcast::channel(1024).0,
            connected: Mutex::new(true),
        });
        tokio::spawn(keep_watching(Arc::downgrade(&shared), options));
        Ok(Self { shared, hello })
    }

    /// Who answered when connecting: its pid, addresses, and the table it was serving.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    pub fn client(&self) -> &ControlClient {
        &self.shared.client
    }

    pub async fn set_routes(&self, table: &RouteTableConfig) -> Result<(), ControlError> {
        self.shared.client.set_routes(table).await
    }

    pub async fn drain(&self, address: SocketAddr, grace: Duration) -> Result<bool, ControlError> {
        self.shared.client.drain(address, grace).await
    }

    /// A revision's figures as last received (at most about `stats_interval` old while the
    /// watch is connected); `None` when the ingress never reported it.
    pub fn revision_stats(
        &self,
        service: &str,
        env: &str,
        revision: &str,
    ) -> Option<RevisionStats> {
        let key = (service.to_owned(), env.to_owned(), revision.to_owned());
        self.shared
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned()
    }

    pub fn subscribe_scale_up(&self) -> broadcast::Receiver<ScaleUp> {
        self.shared.scale_up.subscribe()
    }
}

/// Keeps a `watch` open while a handle lives.
async fn keep_watching(shared: Weak<Shared>, options: RemoteOptions) {
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let client = strong.client.clone();
        drop(strong);
        let interval_ms = u64::try_from(options.stats_interval.as_millis()).unwrap_or(u64::MAX);
        if let Ok(opened) = client.open().await {
            let watched = watch_once(opened, &shared, interval_ms).await;
            if !watched {
                return;
            }
        }
        let Some(strong) = shared.upgrade() else {
            return;
        };
        set_connected(&strong, false);
        drop(strong);
        crate::timer::sleep(options.reconnect).await;
    }
}

/// One `watch` connection, read until it ends; false when the handle is gone.
async fn watch_once(opened: Opened, shared: &Weak<Shared>, interval_ms: u64) -> bool {
    let Opened { mut stream, .. } = opened;
    if send(&mut stream, &Request::Watch { interval_ms })
        .await
        .is_err()
    {
        return true;
    }
    let mut lines = BufReader::new(stream.take(MAX_LINE_BYTES));
    // A silent ingress counts as lost after this many intervals.
    let silence = Duration::from_millis(interval_ms.saturating_mul(10)).max(Duration::from_secs(2));
    loop {
        let line = match crate::timer::timeout(silence, read_line(&mut lines)).await {
            Ok(Ok(Some(line))) => line,
            _ => return true,
        };
        let Some(strong) = shared.upgrade() else {
            return false;
        };
        set_connected(&strong, true);
        match serde_json::from_str::<Reply>(&line) {
            Ok(Reply::Stats { revisions }) => {
                let fresh: HashMap<StatsKey, RevisionStats> = revisions
                    .into_iter()
                    .map(|r| ((r.service, r.env, r.revision), r.stats))
                    .collect();
                *strong.stats.lock().unwrap_or_else(PoisonError::into_inner) = fresh;
            }
            Ok(Reply::ScaleUp(signal)) => {
                // Nobody listening is fine.
                let _ = strong.scale_up.send(signal);
            }
            // Anything else on a watch is a broken peer: start over.
            _ => return true,
        }
        // Lines count against `take`'s limit: renew it so a long watch is not cut.
        lines.get_mut().set_limit(MAX_LINE_BYTES);
    }
}

fn set_connected(shared: &Shared, now: bool) {
    let mut connected = shared
        .connected
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if *connected != now {
        *connected = now;
        let at = shared.client.endpoint();
        if now {
            tracing::info!(ingress = %at, "watching the ingress again");
        } else {
            tracing::warn!(ingress = %at, "lost the watch on the ingress; retrying");
        }
    }
}
