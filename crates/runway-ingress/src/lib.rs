//! Runway's ingress: every request a deployed service receives passes through it.
//!
//! An [`Ingress`] holds the route table (set whole with [`Ingress::set_routes`], from a file or
//! the control plane), serves clients over HTTP/1.1 and HTTP/2 (h2c) with [`Ingress::serve`],
//! over TLS with [`Ingress::serve_tls`], and Prometheus metrics with [`Ingress::serve_admin`].
//! See `proxy.rs` for one request's path.
//!
//! Besides routes, a table carries what custom domains need from ACME
//! ([`RouteTableConfig::certificates`], served by SNI; [`RouteTableConfig::acme`], the HTTP-01
//! and TLS-ALPN-01 challenges answered now), so an ingress restarted from its saved table
//! serves them without its control plane.
//!
//! # Files
//!
//! - `config.rs`: the route table (JSON or YAML) and its validation, with the certificates the
//!   control plane obtained for custom domains (each checked: lower-case names its leaf covers,
//!   PEM that parses, the leaf's own key; a bad one refuses the whole table, the error naming its
//!   domains, never the key) and the ACME challenges answered now (HTTP-01 tokens, bounded
//!   base64url, and their `token.thumbprint` key authorizations; TLS-ALPN-01 certificates, each
//!   naming its domain with the acmeIdentifier extension). Keys are left out of `Debug`.
//! - `table.rs`: the live table (swapped whole with arc-swap), weighted revision choice,
//!   power-of-two-choices on outstanding requests, ejection.
//! - `proxy.rs`: one request's path (routing, holding at zero, queueing at the concurrency limit,
//!   timeout, one retry on a refused connection); its entry is `handle`.
//! - `upstream.rs`: a connection pool per instance (HTTP/1.1 keep-alive, or one HTTP/2 connection
//!   for h2c). `body.rs`: what happens when a response ends, and the client's request body as
//!   sent on.
//! - `error.rs`: the one place errors become 400, 404, 408, 413, 421, 502, 503 or 504, and which
//!   are the client's fault.
//! - `tls.rs`: SNI and TLS-ALPN-01, and the local CA (rcgen). An authority made elsewhere (Helm's
//!   `genCA`, an operator's) is used as it is: its PKCS#1 key wrapped as PKCS#8, its certificate's
//!   own subject as the issuer.
//! - `server.rs`: listeners, event loops, the redirect to HTTPS (HTTP-01 answered before it), the
//!   admin port (`/metrics`, `/healthz`, `/readyz`, which is 503 while an ingress fed over the
//!   network waits for its first table).
//! - `controls.rs`: a route's rate limits (GCRA buckets, the clients' bounded), client address
//!   lists and maintenance, checked once its revision is known; refusals are the revision's
//!   client errors.
//! - `trace.rs`: with `--otlp-endpoint`, W3C trace context in and out and each request's
//!   spans (the request, its hold or queue, the call to the instance), exported over OTLP by
//!   the OpenTelemetry SDK's batch processor; nothing at all without it.
//! - `connection.rs`: a client connection from accept to close. `limits.rs`: the open-file limit
//!   (raised to the hard limit), the budget it allows, the accept back-off the API shares.
//! - `control.rs`: the control protocol on the control socket and, with `--control-listen`, on
//!   the network over mutual TLS (`stop` refused there: whoever runs that ingress stops it); the
//!   table saved to `table.json` (`0600`, through a temporary file and a rename: it holds private
//!   keys); and the control plane's side: an `Endpoint` (socket or TLS address), `ControlClient`
//!   (one request) and `RemoteIngress` (tables and drains out, a `watch` kept open for the latest
//!   figures and scale-up signals). `control_tls.rs`: the control channel's mutual TLS, whose
//!   authority trusts nothing else and is trusted by nothing else.
//! - `fleet.rs`: `IngressFleet`, every ingress its names resolve to, each a `RemoteIngress`.
//! - `cells.rs`: a cell-routed route (`runway router`): its revisions are its cells, and
//!   `runway-cells` rules choose among them; an older runner's body is read ahead 16 KiB and
//!   replayed, only when a `json-body` rule comes before the rule that decided on the headers. A
//!   cell the topology service places on port 443 or `https://` is refused, since cells are
//!   reached over HTTP. A route for `*` takes every host no other route names, but only named
//!   hosts get a certificate from the local authority.
//! - `daemon.rs`: `runway-ingress` as a process (`main`: arguments, `SO_REUSEPORT` listeners, the
//!   control socket, signals) and `ensure`, which adopts the ingress running on a state directory
//!   or starts one (replacing one of another build or addresses, or a worker whose supervisor is
//!   gone). `bin/runway-ingress.rs` calls `daemon::main`.
//! - `supervise.rs`: `--supervise`, what `ensure` starts. A `kill -9` of the worker fails only its
//!   requests in flight (`tests/crash.rs`: at 500 req/s from 16 clients, 2 to 14 of 2,000 failed,
//!   all in flight, and it served again 10 to 50 ms after the kill, with no control plane).
//! - `metrics.rs`: per-revision series, also read back for the autoscaler and the canary
//!   analysis, kept 10 minutes after a revision leaves the table, then removed at the next table
//!   change or scrape. `log.rs`: the JSON access log.
//! - `timer.rs`: an event loop's runtime (tokio's I/O driver, no tokio timer), its own deadlines
//!   and the thread that rings for them, a request's deadline as a future of its own, and
//!   hyper's timer on them; the crate's sleeps and timeouts, which work on and off the loops.
//! - `cloudflare.rs`: `--cloudflare-ranges FILE`; a `cloudflare` route admits only peers in them
//!   (403 otherwise, and 403 saying the platform has none when no file is given), and passes
//!   their `CF-Connecting-IP` on.
//! - `dns.rs`: `--dns-listen`; each upstream given 2 s, 256 forwarded queries and 64 TCP
//!   connections at most (past them SERVFAIL, or the connection closed); a proptest that no
//!   packet panics it.
//! - `examples/bench/`: beside nginx and HAProxy doing the same per-request work: req/s, latency
//!   and PSS under wrk and h2load in interleaved, rotated rounds, and instructions per request
//!   under callgrind. `examples/flood.rs`: a connection flood (connections held, latency beside
//!   it, memory after).
//!
//! # Instances' own listener
//!
//! Instances talk through the ingress too. With `--private-listen` (the platform address, port
//! 80, which only instances reach; bound with IP_FREEBIND, so it may come before the address, and
//! a failure there is logged and never stops the public listeners) a route with `private` is
//! served at `<service>.<env>.internal` (and `<tag>---…`) on that listener alone, on the same
//! proxy path (weights, holding, limits, metrics), and `.internal` names never on the public
//! ones. The table's `callers` (address to `service/env`, every instance the control plane sees)
//! identify the peer: an unknown one is refused 403, one the route's `callers` do not admit is
//! refused 403 by name, and the rest get `Runway-Caller` set. A client's `Runway-Caller` and
//! `CF-Connecting-IP` are dropped in the walk that already finds hop-by-hop headers, so a public
//! request pays no lookup for them. A route with `public: false` has no public host (404).
//!
//! The ingress never calls the store, and keeps serving its last route table whatever happens to
//! whoever feeds it; a table is validated whole before it replaces the old one.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]
// Unit tests keep time on tokio's runtimes, never on an event loop's.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod body;
mod cells;
pub mod cloudflare;
pub mod config;
mod connection;
pub mod control;
pub mod control_tls;
pub mod controls;
pub mod daemon;
pub mod dns;
mod drain;
pub mod error;
pub mod fleet;
pub mod limits;
mod log;
pub mod metrics;
mod proxy;
pub mod server;
pub mod supervise;
pub mod table;
mod timer;
pub mod tls;
pub mod trace;
mod upstream;

/// What `runway-ingress --version` prints after its name: the build's version, commit and
/// date ([`runway_build::LINE`]) and the fingerprint of the source it was built from (see
/// `build.rs`), which `runway server` compares before it starts one installed beside it.
pub fn version() -> &'static str {
    static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "{}, source {}",
            runway_build::LINE,
            env!("RUNWAY_INGRESS_SOURCE")
        )
    });
    &VERSION
}

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio::sync::broadcast;

pub use body::ProxyBody;
pub use cells::CellRouting;
pub use config::{
    AcmeChallenges, CellsConfig, ChallengeCertificate, ControlsConfig, InstanceConfig,
    MaintenanceConfig, Protocol, RateLimitConfig, RevisionConfig, RouteConfig, RouteTableConfig,
    TableCertificate,
};
pub use connection::ClientIo;
pub use error::{ConfigError, ProxyError};
pub use limits::raise_fd_limit;
pub use log::AccessRecord;
pub use metrics::{Metrics, RevisionSnapshot, RevisionStats};
pub use proxy::{CF_CONNECTING_IP, RUNWAY_CALLER, X_REQUEST_ID};
pub use server::Tls;
pub use table::{Instance, Revision, Route, ScaleUp, Table};
pub use tls::{CertificateFiles, LocalCa, TlsError, TlsOptions};

/// Bounds and limits; every wait has one.
#[derive(Debug, Clone)]
pub struct Options {
    /// Requests held per revision while it has no ready instance; past it, 503.
    pub max_held_per_revision: usize,
    /// Requests queued per revision while all its instances are at their concurrency limit;
    /// past it, 503.
    pub max_queued_per_revision: usize,
    /// The shortest time a request is held for a revision with no ready instance; the hold is
    /// the longer of this and 3.5 × the revision's average start time.
    pub min_hold: Duration,
    /// Request body size; a larger declared length gets 413, a larger streamed body is cut.
    pub max_body_bytes: usize,
    /// Size of a request's head (HTTP/1.1 read buffer).
    pub max_header_bytes: usize,
    /// Time a client has to send a request's head.
    pub header_read_timeout: Duration,
    /// Client connections open at once, across all the ingress's listeners and event loops;
    /// past it, new ones are closed at accept. By default what the process's file-descriptor
    /// limit allows ([`limits::connections_for_fd_limit`]; call [`raise_fd_limit`] first).
    pub max_connections: usize,
    /// Client connections open at once from one address (an IPv6 client's /64); past it, its
    /// new ones are closed at accept. 0: no limit per address.
    pub max_connections_per_client: usize,
    /// Clients the routes' per-client rate limits keep a bucket for, all routes together
    /// (each route an equal share of it, at least [`controls::MIN_CLIENTS_PER_ROUTE`]); past
    /// its share, a route's further clients share one bucket (see [`controls`]). Bounds the
    /// memory a flood of addresses can take (at most about 64 bytes a client), and keeps a flood
    /// at one service from taking another's buckets.
    pub max_rate_limited_clients: usize,
    /// Traces of requests, exported over OTLP ([`trace`]); none, none are made.
    pub tracing: Option<Arc<trace::Tracing>>,
    /// Time to connect to an instance.
    pub connect_timeout: Duration,
    /// Time in-flight requests get to finish when the server shuts down.
    pub shutdown_grace: Duration,
    /// How often the operator's certificate files are checked for a change.
    pub certificate_poll: Duration,
    /// Time between pings on an HTTP/2 client connection; a ping unanswered for as long
    /// closes it, so a vanished client does not hold its streams.
    pub http2_ping: Duration,
}

/// [`Options::max_connections_per_client`] by default.
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 256;
/// [`Options::max_rate_limited_clients`] by default: at most about 64 MiB of buckets.
pub const DEFAULT_MAX_RATE_LIMITED_CLIENTS: usize = 1 << 20;

impl Default for Options {
    fn default() -> Self {
        Self {
            max_held_per_revision: 1000,
            max_queued_per_revision: 1000,
            min_hold: table::MIN_HOLD,
            max_body_bytes: 32 << 20,
            max_header_bytes: 64 << 10,
            header_read_timeout: Duration::from_secs(30),
            max_connections: limits::connections_for_fd_limit(limits::fd_limit()),
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            max_rate_limited_clients: DEFAULT_MAX_RATE_LIMITED_CLIENTS,
            tracing: None,
            connect_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(30),
            certificate_poll: Duration::from_secs(5),
            http2_ping: Duration::from_secs(30),
        }
    }
}

/// What every connection and request shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) routes: table::Routes,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) options: Options,
    pub(crate) access_log: Option<log::AccessLog>,
    /// The client connections' budget, shared by every listener and event loop.
    pub(crate) admission: Arc<connection::Admission>,
    /// What `/readyz` answers: false while an ingress fed over the network waits for its
    /// first table (see [`Ingress::set_waiting`]).
    pub(crate) ready: std::sync::atomic::AtomicBool,
    /// The operator's Cloudflare ranges, for routes that admit only Cloudflare.
    pub(crate) cloudflare: Arc<cloudflare::Cloudflare>,
}

/// The ingress: a route table, its live state, and the servers that use it.
#[derive(Debug, Clone)]
pub struct Ingress {
    shared: Arc<Shared>,
}

impl Ingress {
    /// An ingress with an empty route table and no access log.
    pub fn new(options: Options) -> Self {
        Self::build(options, None)
    }

    /// An ingress writing its access log (JSON lines) to `out`. Must be called inside a tokio
    /// runtime, which runs the writer.
    pub fn with_access_log<W: AsyncWrite + Unpin + Send + 'static>(
        options: Options,
        out: W,
    ) -> Self {
        Self::build(options, Some(log::AccessLog::spawn(out)))
    }

    fn build(options: Options, access_log: Option<log::AccessLog>) -> Self {
        let metrics = Arc::new(Metrics::new());
        let admission = connection::Admission::new(
            options.max_connections,
            options.max_connections_per_client,
            metrics.connections.clone(),
        );
        Self {
            shared: Arc::new(Shared {
                routes: table::Routes::new(
                    Arc::clone(&metrics),
                    options.min_hold,
                    options.max_rate_limited_clients,
                ),
                admission,
                metrics,
                options,
                access_log,
                ready: std::sync::atomic::AtomicBool::new(true),
                cloudflare: Arc::default(),
            }),
        }
    }

    /// Validates a table and swaps it in whole. Requests in flight keep their instance; held
    /// and queued requests re-check; instances and revisions no longer listed start draining.
    ///
    /// The table's certificates are parsed here, each distinct PEM once: one the table before
    /// held is taken from it. A bad certificate refuses the whole table, as any invalid table is
    /// refused ([`RouteTableConfig::validate`]).
    pub fn set_routes(&self, config: &RouteTableConfig) -> Result<(), ConfigError> {
        config.validate_without_keys()?;
        self.shared.routes.set(config)?;
        self.shared
            .ready
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Until the next table is set, `/readyz` answers 503: an ingress that starts with nothing
    /// to serve (a new pod) takes no traffic before its control plane fed it.
    pub fn set_waiting(&self) {
        self.shared
            .ready
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// Sets the Cloudflare ranges that routes with `cloudflare: true` admit (until this is
    /// called or [`Ingress::watch_cloudflare_ranges`] reads a file, such routes refuse every
    /// client: the platform has none).
    pub fn set_cloudflare_ranges(&self, ranges: cloudflare::Ranges) {
        self.shared.cloudflare.set(ranges);
    }

    /// Reads the Cloudflare ranges from `path` now and whenever it changes (checked every
    /// `period`), until the returned task is aborted; a bad file keeps the last good list and
    /// is logged with its line. Must be called inside a tokio runtime.
    pub fn watch_cloudflare_ranges(
        &self,
        path: std::path::PathBuf,
        period: Duration,
    ) -> tokio::task::JoinHandle<()> {
        // Configured: fail closed (an empty list) until the file gives one.
        if self.shared.cloudflare.ranges().is_none() {
            self.shared.cloudflare.set(cloudflare::Ranges::default());
        }
        tokio::spawn(cloudflare::watch(
            Arc::clone(&self.shared.cloudflare),
            path,
            period,
        ))
    }

    /// Gives the system back at once the memory a flood of client connections took, once it is
    /// over ([`limits::FLOOD_CLOSED`] fewer connections held than at their peak, checked every
    /// [`limits::FLOOD_CHECK`]), and logs it; the allocator's background thread would return it
    /// within a second or two (`runway_memory::DIRTY_DECAY_MS`), as it returns what a burst of
    /// requests leaves. Until the returned task is aborted. Must be called inside a tokio
    /// runtime.
    pub fn give_back_memory(&self) -> tokio::task::JoinHandle<()> {
        let admission = Arc::clone(&self.shared.admission);
        tokio::spawn(async move {
            let mut ticks = crate::timer::Interval::new(limits::FLOOD_CHECK);
            loop {
                ticks.tick().await;
                let Some((peak, held)) = admission.flood_over(limits::FLOOD_CLOSED) else {
                    continue;
                };
                let before = runway_memory::resident_bytes();
                let began = std::time::Instant::now();
                // It takes the allocator's arenas' locks in turn: off the runtime's threads.
                let _ = tokio::task::spawn_blocking(runway_memory::give_back).await;
                let took_ms = began.elapsed().as_secs_f64() * 1000.0;
                let after = runway_memory::resident_bytes();
                let mib = |bytes: Option<u64>| bytes.map_or(0.0, |b| b as f64 / 1_048_576.0);
                tracing::info!(
                    took_ms,
                    "{} connections closed since their peak: memory given back to the system \
                     (resident {:.1} MiB before, {:.1} MiB after)",
                    peak - held,
                    mib(before),
                    mib(after),
                );
            }
        })
    }

    /// The Cloudflare ranges in force; none when no file is configured.
    pub fn cloudflare_ranges(&self) -> Option<Arc<cloudflare::Ranges>> {
        self.shared.cloudflare.ranges()
    }

    /// The current table.
    pub fn table(&self) -> Arc<Table> {
        self.shared.routes.load()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    pub fn options(&self) -> &Options {
        &self.shared.options
    }

    /// A revision's figures now (see [`RevisionStats`]); `None` when no table ever had it.
    pub fn revision_stats(
        &self,
        service: &str,
        env: &str,
        revision: &str,
    ) -> Option<RevisionStats> {
        self.shared.metrics.revision_stats(service, env, revision)
    }

    /// Scale-up signals: a revision with no ready instance is holding requests.
    pub fn subscribe_scale_up(&self) -> broadcast::Receiver<ScaleUp> {
        self.shared.routes.subscribe_scale_up()
    }

    /// The live state of an instance in the current table.
    pub fn instance(&self, address: SocketAddr) -> Option<Arc<Instance>> {
        self.shared.routes.instance(address)
    }

    /// Drains an instance of the current table: no new requests, its idle connections closed
    /// (and each busy one once its response ends); waits for its in-flight requests, at most
    /// `grace`. True when none was left. The control plane then removes it from the table.
    pub async fn drain(&self, address: SocketAddr, grace: Duration) -> bool {
        let Some(instance) = self.instance(address) else {
            return true;
        };
        instance.start_draining();
        instance.wait_idle(grace).await
    }
}
