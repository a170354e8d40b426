//! `runway-ingress` as a process: its arguments and main ([`Args`], [`main`]), and how a
//! control plane starts one, or finds the one already running ([`ensure`]).
//!
//! With `--state-dir DIR` the ingress is the data plane of a control plane: it serves the
//! table saved in `DIR/table.json` from its first moment, listens on `DIR/control.sock` for
//! new tables (see [`crate::control`]), and outlives whoever started it. Every client-facing
//! socket is bound with `SO_REUSEPORT`, so a replacement (`--replacing`) listens on the same
//! ports before the ingress it replaces stops accepting. With `--supervise` (which [`ensure`]
//! passes) a small supervisor binds those sockets and holds them while the process serving
//! them comes and goes (see [`crate::supervise`]): a crash of that worker fails only the
//! requests it had in flight.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::control::{
    self, ControlClient, ControlError, ControlState, Hello, Listen, PROTOCOL_VERSION,
    RemoteIngress, RemoteOptions,
};
use crate::server::Tls;
use crate::supervise;
use crate::{CertificateFiles, Ingress, Options, RouteTableConfig, TlsOptions};

/// Runway's ingress: routes requests by host to the instances of a route table.
#[derive(Debug, Clone, Parser)]
#[command(version = crate::version())]
pub struct Args {
    /// The route table, JSON or YAML (by extension); reloaded on SIGHUP. With --state-dir, the
    /// first table when the directory has none saved.
    #[arg(long, required_unless_present = "state_dir")]
    pub routes: Option<PathBuf>,
    /// Be a control plane's data plane: take tables on DIR/control.sock, save the last one in
    /// DIR/table.json and serve it again after a restart.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Also take control requests from the network here, over mutual TLS (see
    /// --control-tls): a control plane on another machine, or in another pod, feeds this
    /// ingress. `stop` is refused there.
    #[arg(long, value_name = "ADDRESS", requires_all = ["state_dir", "control_tls"])]
    pub control_listen: Option<SocketAddr>,
    /// The control channel's certificates for --control-listen: DIR/ca.crt (the authority
    /// whose client certificates are obeyed), DIR/tls.crt and DIR/tls.key (this ingress's,
    /// for the name `runway-ingress-control`), as a Kubernetes TLS Secret mounts them.
    #[arg(long, value_name = "DIR", requires = "control_listen")]
    pub control_tls: Option<PathBuf>,
    /// Share the listening ports with the ingress now answering on DIR/control.sock, which is
    /// about to stop: a replacement (an upgrade) that refuses no connection.
    #[arg(long, requires = "state_dir")]
    pub replacing: bool,
    /// Run as nginx does: a small supervisor binds every socket and holds them, and starts
    /// the process that serves on them (this program again) at once whenever it dies, so that
    /// connections waiting in the kernel meanwhile are served, not refused; one that dies
    /// before serving, again and again, is started after a growing pause. Stopping either
    /// (SIGTERM, or `stop` on the control socket) stops both; a worker whose supervisor is
    /// killed serves on until replaced.
    #[arg(long)]
    pub supervise: bool,
    /// Where clients connect over plain HTTP (HTTP/1.1 and h2c); with --https, this port
    /// redirects to HTTPS unless --no-redirect.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// How this process's own log lines are written on stderr: `text` (readable) or `json`
    /// (one object a line); `RUST_LOG` filters them (default `info`). The access log
    /// (`--access-log`) is JSON on stdout either way.
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    pub log_format: runway_log::LogFormat,
    /// Serve HTTPS here (TLS 1.2 and 1.3, HTTP/2 by ALPN).
    #[arg(long)]
    pub https: Option<SocketAddr>,
    /// The local certificate authority's directory, made on first start; its `ca.pem` goes in
    /// clients' trust stores.
    #[arg(long, default_value = "ingress-ca")]
    pub ca_dir: PathBuf,
    /// An operator certificate: `DOMAIN[,DOMAIN...]:CERT.pem:KEY.pem` (`*.example.com` allowed).
    #[arg(long = "certificate", value_parser = parse_certificate)]
    pub certificates: Vec<CertificateFiles>,
    /// With --https, proxy plain HTTP too instead of redirecting it.
    #[arg(long)]
    pub no_redirect: bool,
    /// The port redirects to HTTPS name, when clients reach HTTPS on another port than
    /// --https's (a load balancer's 443 in front of this ingress's 8443). Default: --https's.
    #[arg(long, value_name = "PORT", conflicts_with = "no_redirect")]
    pub redirect_port: Option<u16>,
    /// Where `/metrics`, `/healthz` and `/readyz` (503 while waiting for a first table over
    /// --control-listen) are served.
    #[arg(long, default_value = "127.0.0.1:9090")]
    pub admin: SocketAddr,
    /// Write the JSON access log to standard output.
    #[arg(long)]
    pub access_log: bool,
    /// Worker threads of the shared runtime, which serves the admin port and the control
    /// socket, and clients with `--event-loops 0` (default: one per CPU).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Serve clients from this many single-threaded event loops, each with its own listening
    /// socket (SO_REUSEPORT), as nginx's workers do (default: one per CPU); 0 serves them
    /// from the shared runtime.
    #[arg(long)]
    pub event_loops: Option<usize>,
    /// Seconds in-flight requests get to finish on SIGTERM, SIGINT or a `stop` request.
    #[arg(long, default_value_t = 30)]
    pub shutdown_grace_seconds: u64,
    /// Serve the platform's own instances here (plain HTTP/1.1 and h2c): routes that are
    /// private, at `<service>.<env>.internal`, to the callers each admits, with
    /// `Runway-Caller` set. Bound with IP_FREEBIND: the address need not exist yet.
    #[arg(long, value_name = "ADDRESS")]
    pub private_listen: Option<SocketAddr>,
    /// Answer instances' DNS here (UDP and TCP): private names with --private-listen's
    /// address, other `.internal` names NXDOMAIN, the rest forwarded to --dns-upstream.
    #[arg(long, value_name = "ADDRESS", requires = "private_listen")]
    pub dns_listen: Option<SocketAddr>,
    /// A resolver to forward other queries to (repeatable; tried in order). Default: the
    /// `nameserver` lines of /etc/resolv.conf, port 53.
    #[arg(long = "dns-upstream", value_name = "ADDRESS", requires = "dns_listen")]
    pub dns_upstreams: Vec<SocketAddr>,
    /// The operator's Cloudflare ranges (one CIDR a line, `#` comments), which routes that
    /// admit only Cloudflare admit; read again when it changes. Without it, such routes
    /// refuse every client.
    #[arg(long, value_name = "FILE")]
    pub cloudflare_ranges: Option<PathBuf>,
    /// Trace requests: W3C `traceparent`/`tracestate` read (a trace started without one) and
    /// passed to the instance, and each request's spans (the request, its hold while a
    /// revision starts or queue at the concurrency limit, the call to the instance) sent over
    /// OTLP/HTTP to this collector (`http://127.0.0.1:4318`; spans go to its `/v1/traces`).
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// The share of traces started here that are kept, 0 to 1; a request whose caller sent a
    /// `traceparent` follows its sampled flag.
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "RATIO",
        requires = "otlp_endpoint"
    )]
    pub trace_sample_ratio: f64,
    /// Client connections open at once from one address (an IPv6 client's /64); past it,
    /// its new ones are closed at accept. 0: no limit per address. Default: 256.
    #[arg(long, value_name = "N")]
    pub max_connections_per_client: Option<usize>,
    /// Clients that per-client rate limits keep a bucket for, all routes together (each
    /// route with such a limit an equal share, at least 1,024); past its share a route's
    /// further clients share one bucket. At most about 64 bytes a client, spare room
    /// included. Default: 1048576.
    #[arg(long, value_name = "N")]
    pub max_rate_limited_clients: Option<usize>,
}

/// Where `args` send traces, as [`Listen`] says it.
fn traces(args: &Args) -> Option<crate::control::TraceExport> {
    args.otlp_endpoint
        .as_ref()
        .map(|endpoint| crate::control::TraceExport {
            endpoint: endpoint.clone(),
            sample_ratio: args.trace_sample_ratio,
        })
}

/// How often the Cloudflare ranges file is checked for a change.
const CLOUDFLARE_POLL: Duration = Duration::from_secs(5);

fn parse_certificate(value: &str) -> Result<CertificateFiles, String> {
    let mut parts = value.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(domains), Some(cert), Some(key)) if !domains.is_empty() => Ok(CertificateFiles {
            domains: domains.split(',').map(str::to_owned).collect(),
            cert: cert.into(),
            key: key.into(),
        }),
        _ => Err("expected DOMAIN[,DOMAIN...]:CERT.pem:KEY.pem".to_owned()),
    }
}

/// Runs the ingress until SIGTERM, SIGINT or (with `--state-dir`) a `stop` request: as one
/// process, or (`--supervise`) as a supervisor and the worker it keeps serving; a process
/// started by a supervisor is that worker (see [`crate::supervise`]).
pub fn main(args: Args) -> anyhow::Result<()> {
    runway_log::init(args.log_format);
    if let Some(supervisor) = supervise::worker_of()? {
        return worker(args, supervisor);
    }
    if args.supervise {
        return supervise::main(args);
    }
    runtime(&args)?.block_on(async move {
        let sockets = bind(&args).await?;
        let own = sockets.control.as_ref().and_then(|c| c.pending.clone());
        let served = serve(args, sockets, None).await;
        // The control socket's own name, left when it failed before publishing it.
        if let Some(own) = own {
            let _ = std::fs::remove_file(own);
        }
        served
    })
}

/// The runtime clients, the admin port and the control socket are served from.
fn runtime(args: &Args) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.threads {
        runtime.worker_threads(threads.max(1));
    }
    runtime
        .enable_all()
        .build()
        .context("cannot start the runtime")
}

/// A supervisor's worker: takes the sockets it is handed, then serves them.
fn worker(args: Args, supervisor: u32) -> anyhow::Result<()> {
    let channel = supervise::channel()?;
    let (layout, fds) = supervise::take_over(&channel)?;
    let sockets = Sockets::from_handover(layout, fds)?;
    runtime(&args)?.block_on(async move {
        let link = supervise::Link::new(channel, supervisor)?;
        serve(args, sockets, Some(link)).await
    })
}

/// `count` listeners (at least one) on one address, `SO_REUSEPORT`: the first binds it (and
/// picks the port, for port 0), the others bind the port it got.
fn reuse_port_listeners(
    address: SocketAddr,
    count: usize,
) -> std::io::Result<Vec<std::net::TcpListener>> {
    let first = crate::connection::reuse_port_listener(address)?;
    let bound = first.local_addr()?;
    let mut listeners = vec![first];
    for _ in 1..count {
        listeners.push(crate::connection::reuse_port_listener(bound)?);
    }
    Ok(listeners)
}

/// A socket for an address that may not exist yet (the platform address, made by the
/// runtime): IP_FREEBIND, and `SO_REUSEPORT` so a replacement shares it.
fn freebind_socket(address: SocketAddr, kind: socket2::Type) -> std::io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(address), kind, None)?;
    if address.is_ipv4() {
        socket.set_freebind_v4(true)?;
    } else {
        socket.set_freebind_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    Ok(socket)
}

fn freebind_listener(address: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = freebind_socket(address, socket2::Type::STREAM)?;
    socket.listen(1024)?;
    Ok(socket.into())
}

fn freebind_udp(address: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    Ok(freebind_socket(address, socket2::Type::DGRAM)?.into())
}

/// The instances' sockets (`--private-listen`, `--dns-listen`), each logged and left out
/// when it cannot be had: they never stop the public ones.
fn bind_instances(args: &Args) -> (Option<std::net::TcpListener>, Option<Dns>) {
    let Some(private) = args.private_listen else {
        return (None, None);
    };
    let listener = match freebind_listener(private) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(
                address = %private,
                %error,
                "cannot listen on --private-listen; instances cannot call private names"
            );
            return (None, None);
        }
    };
    let Some(dns) = args.dns_listen else {
        return (Some(listener), None);
    };
    let bound = listener.local_addr().unwrap_or(private);
    if !bound.is_ipv4() {
        tracing::error!(
            "--dns-listen answers private names with --private-listen's address, which must be \
             IPv4; no DNS served"
        );
        return (Some(listener), None);
    }
    match freebind_udp(dns).and_then(|udp| Ok((udp, freebind_listener(dns)?))) {
        Ok((udp, tcp)) => (Some(listener), Some(Dns { udp, tcp })),
        Err(error) => {
            tracing::error!(
                address = %dns,
                %error,
                "cannot listen on --dns-listen; instances have no resolver"
            );
            (Some(listener), None)
        }
    }
}

/// Serves the instances' listeners bound by [`bind_instances`]. Returns the addresses bound.
fn serve_instances(
    ingress: &Ingress,
    args: &Args,
    private: Option<std::net::TcpListener>,
    dns: Option<Dns>,
    stopped: &watch::Receiver<bool>,
) -> anyhow::Result<(Option<SocketAddr>, Option<SocketAddr>)> {
    let Some(private) = private else {
        return Ok((None, None));
    };
    let private_bound = private.local_addr()?;
    let listener = TcpListener::from_std(private)?;
    {
        let (ingress, stopped) = (ingress.clone(), stopped.clone());
        tokio::spawn(async move {
            if let Err(error) = ingress.serve_private(listener, until(stopped)).await {
                tracing::error!(%error, "the private listener (--private-listen) stopped");
            }
        });
    }
    let (Some(Dns { udp, tcp }), IpAddr::V4(answer)) = (dns, private_bound.ip()) else {
        return Ok((Some(private_bound), None));
    };
    let dns_bound = udp.local_addr()?;
    let mut upstreams = if args.dns_upstreams.is_empty() {
        crate::dns::system_upstreams()
    } else {
        args.dns_upstreams.clone()
    };
    // Never itself: a query would go round.
    upstreams.retain(|upstream| *upstream != dns_bound);
    if upstreams.is_empty() {
        tracing::warn!(
            "no DNS upstream (--dns-upstream, or nameserver lines in /etc/resolv.conf): \
             names other than the platform's get SERVFAIL"
        );
    }
    let resolver = crate::dns::Dns::new(
        ingress.clone(),
        crate::dns::DnsOptions::new(answer, upstreams),
    );
    let (udp, tcp) = (
        tokio::net::UdpSocket::from_std(udp)?,
        TcpListener::from_std(tcp)?,
    );
    for serve in [
        tokio::spawn(Arc::clone(&resolver).serve_udp(udp)),
        tokio::spawn(resolver.serve_tcp(tcp)),
    ] {
        let stopped = stopped.clone();
        tokio::spawn(async move {
            tokio::select! {
                ended = serve => if let Ok(Err(error)) = ended {
                    tracing::error!(%error, "the DNS server (--dns-listen) stopped");
                },
                () = until(stopped) => {}
            }
        });
    }
    Ok((Some(private_bound), Some(dns_bound)))
}

/// Resolves once `stopped` turns true.
async fn until(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

/// Refuses an address something else listens on: `SO_REUSEPORT` alone would share it with
/// whoever holds it. A plain bind fails on any listener, shared or not.
fn check_free(address: SocketAddr, what: &str) -> anyhow::Result<()> {
    if address.port() == 0 {
        return Ok(());
    }
    std::net::TcpListener::bind(address)
        .map(drop)
        .with_context(|| format!("cannot listen on {address} ({what})"))
}

/// The address to bind for `asked`: the port of the ingress being replaced when `asked` has
/// port 0 and that ingress was asked the same, so a replacement keeps the ports clients use.
fn bind_address(asked: SocketAddr, old: Option<(SocketAddr, SocketAddr)>) -> SocketAddr {
    match old {
        Some((old_asked, old_bound)) if asked.port() == 0 && old_asked == asked => old_bound,
        _ => asked,
    }
}

/// The instances' resolver's sockets.
#[derive(Debug)]
struct Dns {
    udp: std::net::UdpSocket,
    tcp: std::net::TcpListener,
}

/// The control socket, bound under a name of its own (`control.sock.PID`) and renamed into
/// place ([`ControlSocket::publish`]) only once an ingress serves behind it: until then the
/// path stays the running ingress's, which a failed replacement leaves reachable.
#[derive(Debug)]
pub(crate) struct ControlSocket {
    listener: std::os::unix::net::UnixListener,
    inode: u64,
    /// Its own name, until it is published.
    pending: Option<PathBuf>,
}

impl ControlSocket {
    fn bind(dir: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let own = dir.join(format!("{}.{}", control::SOCKET, std::process::id()));
        let _ = std::fs::remove_file(&own);
        let listener = std::os::unix::net::UnixListener::bind(&own)?;
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o600))?;
        let inode = std::fs::metadata(&own)?.ino();
        listener.set_nonblocking(true)?;
        Ok(Self {
            listener,
            inode,
            pending: Some(own),
        })
    }

    /// What publishing it takes: its own name and its inode.
    pub(crate) fn publication(&self) -> (Option<PathBuf>, u64) {
        (self.pending.clone(), self.inode)
    }
}

/// Puts the control socket bound at `own` at `dir/control.sock` (taking the path over from
/// the ingress there, which keeps serving the connections it has) and this process's pid in
/// `dir/ingress.pid`: the ingress is this process from now on.
pub(crate) fn publish(dir: &Path, own: Option<&Path>) -> std::io::Result<()> {
    if let Some(own) = own {
        std::fs::rename(own, dir.join(control::SOCKET))?;
    }
    write_pid(dir);
    Ok(())
}

/// Undoes [`publish`] as this process leaves: the socket's path, unless another ingress took
/// it over, or its own name when it was never published; the pid file if it names this one.
pub(crate) fn unpublish(dir: &Path, own: Option<&Path>, inode: u64) {
    match own {
        Some(own) => {
            let _ = std::fs::remove_file(own);
        }
        None => control::remove_socket_if_ours(dir, inode),
    }
    remove_pid_if_ours(dir);
}

/// Every socket an ingress serves on, bound before anything is served: by its supervisor
/// (`--supervise`), which holds them while workers come and go and hands them to each, or by
/// the ingress itself.
#[derive(Debug)]
pub(crate) struct Sockets {
    /// The event loops (0: clients are served from the shared runtime). A listener the loops
    /// serve has one socket per loop (`SO_REUSEPORT`), the others one.
    loops: usize,
    /// Plain HTTP (or the redirect to HTTPS, which the shared runtime serves).
    http: Vec<std::net::TcpListener>,
    /// HTTPS, with --https.
    https: Vec<std::net::TcpListener>,
    admin: std::net::TcpListener,
    /// --control-listen.
    control_network: Option<std::net::TcpListener>,
    /// The control socket, with --state-dir.
    pub(crate) control: Option<ControlSocket>,
    private: Option<std::net::TcpListener>,
    dns: Option<Dns>,
}

/// How [`Sockets`] travel to a worker: this, then their descriptors in its order.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Layout {
    loops: usize,
    http: usize,
    https: usize,
    control_network: bool,
    /// The control socket's inode (the worker removes its path as it stops, if still ours).
    control: Option<u64>,
    private: bool,
    dns: bool,
}

impl Layout {
    pub(crate) fn descriptors(&self) -> usize {
        self.http
            + self.https
            + 1
            + usize::from(self.control_network)
            + usize::from(self.control.is_some())
            + usize::from(self.private)
            + 2 * usize::from(self.dns)
    }
}

impl Sockets {
    /// What a worker is handed: the layout and the descriptors, in its order.
    pub(crate) fn handover(&self) -> (Layout, Vec<BorrowedFd<'_>>) {
        let layout = Layout {
            loops: self.loops,
            http: self.http.len(),
            https: self.https.len(),
            control_network: self.control_network.is_some(),
            control: self.control.as_ref().map(|control| control.inode),
            private: self.private.is_some(),
            dns: self.dns.is_some(),
        };
        let mut fds: Vec<BorrowedFd<'_>> = Vec::with_capacity(layout.descriptors());
        fds.extend(self.http.iter().map(AsFd::as_fd));
        fds.extend(self.https.iter().map(AsFd::as_fd));
        fds.push(self.admin.as_fd());
        fds.extend(self.control_network.iter().map(AsFd::as_fd));
        fds.extend(self.control.iter().map(|control| control.listener.as_fd()));
        fds.extend(self.private.iter().map(AsFd::as_fd));
        if let Some(dns) = &self.dns {
            fds.push(dns.udp.as_fd());
            fds.push(dns.tcp.as_fd());
        }
        (layout, fds)
    }

    /// The sockets a worker was handed. The control socket is published already: its
    /// supervisor did that.
    fn from_handover(layout: Layout, fds: Vec<OwnedFd>) -> anyhow::Result<Self> {
        anyhow::ensure!(
            fds.len() == layout.descriptors()
                && layout.http >= 1
                && (layout.loops == 0 || layout.https == 0 || layout.https == layout.loops),
            "handed {} descriptors for {layout:?}",
            fds.len()
        );
        let mut fds = fds.into_iter();
        // The count was checked: each is there.
        let mut next = || fds.next().context("a descriptor short");
        let tcp = |fd: anyhow::Result<OwnedFd>| fd.map(std::net::TcpListener::from);
        let http = (0..layout.http)
            .map(|_| tcp(next()))
            .collect::<anyhow::Result<_>>()?;
        let https = (0..layout.https)
            .map(|_| tcp(next()))
            .collect::<anyhow::Result<_>>()?;
        let admin = tcp(next())?;
        let control_network = match layout.control_network {
            true => Some(tcp(next())?),
            false => None,
        };
        let control = match layout.control {
            Some(inode) => Some(ControlSocket {
                listener: std::os::unix::net::UnixListener::from(next()?),
                inode,
                pending: None,
            }),
            None => None,
        };
        let private = match layout.private {
            true => Some(tcp(next())?),
            false => None,
        };
        let dns = match layout.dns {
            true => Some(Dns {
                udp: std::net::UdpSocket::from(next()?),
                tcp: tcp(next())?,
            }),
            false => None,
        };
        Ok(Self {
            loops: layout.loops,
            http,
            https,
            admin,
            control_network,
            control,
            private,
            dns,
        })
    }
}

/// Binds every socket `args` asks for (see [`Sockets`]), after the state directory is made
/// and, with `--replacing`, the ingress being replaced is asked which ports it has.
pub(crate) async fn bind(args: &Args) -> anyhow::Result<Sockets> {
    let loops = args
        .event_loops
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    if let Some(dir) = &args.state_dir {
        create_private_dir(dir)?;
    }
    // The ingress being replaced, asked before this one takes the socket's path over.
    let replaced: Option<Hello> = match (&args.state_dir, args.replacing) {
        (Some(dir), true) => Some(
            ControlClient::new(dir)
                .hello()
                .await
                .context("--replacing, but no ingress answers on the control socket")?,
        ),
        _ => None,
    };
    if let Some(old) = &replaced {
        tracing::info!(pid = old.pid, "replacing the ingress running before");
    }
    let old = |pick: fn(&Listen) -> Option<SocketAddr>| {
        replaced
            .as_ref()
            .and_then(|hello| Some((pick(&hello.listen)?, pick(&hello.bound)?)))
    };
    let http_at = bind_address(args.listen, old(|l| Some(l.http)));
    let admin_at = bind_address(args.admin, old(|l| Some(l.admin)));
    let https_at = args
        .https
        .map(|https| bind_address(https, old(|l| l.https)));
    if replaced.is_none() {
        check_free(http_at, "HTTP")?;
        check_free(admin_at, "metrics")?;
        if let Some(https) = https_at {
            check_free(https, "HTTPS")?;
        }
    }
    // Proxied plain HTTP is served from the event loops, like HTTPS, a socket per loop; the
    // redirect to HTTPS from the shared runtime.
    let redirect = args.https.is_some() && !args.no_redirect;
    let http_loops = if redirect { 1 } else { loops.max(1) };
    let http = reuse_port_listeners(http_at, http_loops)
        .with_context(|| format!("cannot listen on {http_at} (HTTP)"))?;
    let admin = crate::connection::reuse_port_listener(admin_at)
        .with_context(|| format!("cannot listen on {admin_at} (metrics)"))?;
    let https = match https_at {
        Some(address) => reuse_port_listeners(address, loops.max(1))
            .with_context(|| format!("cannot listen on {address} (HTTPS)"))?,
        None => Vec::new(),
    };
    let control_network = match args.control_listen {
        Some(address) => Some(
            std::net::TcpListener::bind(address)
                .and_then(|listener| {
                    listener.set_nonblocking(true)?;
                    Ok(listener)
                })
                .with_context(|| format!("cannot listen on {address} (control)"))?,
        ),
        None => None,
    };
    let (private, dns) = bind_instances(args);
    let control = match &args.state_dir {
        Some(dir) => Some(ControlSocket::bind(dir).with_context(|| {
            format!("cannot listen on {}", dir.join(control::SOCKET).display())
        })?),
        None => None,
    };
    Ok(Sockets {
        loops,
        http,
        https,
        admin,
        control_network,
        control,
        private,
        dns,
    })
}

/// Reads the route file again (SIGHUP), keeping the table in force when it is bad.
fn reload(ingress: &Ingress, routes: &Path) {
    match RouteTableConfig::load(routes).and_then(|t| ingress.set_routes(&t)) {
        Ok(()) => tracing::info!(file = %routes.display(), "routes reloaded"),
        Err(error) => tracing::warn!(
            file = %routes.display(),
            error = runway_log::chain(&error),
            "kept the previous table"
        ),
    }
}

/// Serves on `sockets` until a stop (SIGTERM, SIGINT, a `stop` request, or the supervisor's
/// word over `link`), then lets in-flight requests finish.
async fn serve(
    args: Args,
    sockets: Sockets,
    mut link: Option<supervise::Link>,
) -> anyhow::Result<()> {
    let state_dir = args.state_dir.clone();
    let saved = match &state_dir {
        Some(dir) => control::load_table(dir)?,
        None => None,
    };
    let waiting = args.control_listen.is_some() && saved.is_none();
    let table = match (saved, &args.routes) {
        (Some(saved), _) => saved,
        (None, Some(path)) => RouteTableConfig::load(path)?,
        (None, None) => RouteTableConfig::default(),
    };
    // Before the options: their connection budget is computed from the open-file limit.
    let fd_limit = crate::raise_fd_limit().context("cannot read the open-file limit")?;
    let tracing = args
        .otlp_endpoint
        .as_ref()
        .map(|endpoint| {
            crate::trace::Tracing::new(&crate::trace::TracingOptions {
                endpoint: endpoint.clone(),
                sample_ratio: args.trace_sample_ratio,
                service_name: "runway-ingress".to_owned(),
            })
            .map(Arc::new)
        })
        .transpose()?;
    let options = Options {
        shutdown_grace: Duration::from_secs(args.shutdown_grace_seconds),
        tracing: tracing.clone(),
        max_connections_per_client: args
            .max_connections_per_client
            .unwrap_or(crate::DEFAULT_MAX_CONNECTIONS_PER_CLIENT),
        max_rate_limited_clients: args
            .max_rate_limited_clients
            .unwrap_or(crate::DEFAULT_MAX_RATE_LIMITED_CLIENTS),
        ..Options::default()
    };
    tracing::info!(
        max_connections = options.max_connections,
        open_files = fd_limit,
        "client connections bounded"
    );
    let ingress = if args.access_log {
        Ingress::with_access_log(options, tokio::io::stdout())
    } else {
        Ingress::new(options)
    };
    ingress.set_routes(&table)?;
    if waiting {
        ingress.set_waiting();
    }
    if let Some(path) = &args.cloudflare_ranges {
        // Read now, so the first requests have them; a bad file is logged and refuses every
        // Cloudflare route's client until it is fixed.
        match crate::cloudflare::load(path) {
            Ok(ranges) => ingress.set_cloudflare_ranges(ranges),
            Err(error) => tracing::error!(
                error = runway_log::chain(&error),
                "--cloudflare-ranges: Cloudflare routes refuse every client until the file \
                 can be used"
            ),
        }
    }
    // Read before anything is served, so bad files stop the start with their name.
    let control_acceptor = match (&sockets.control_network, &args.control_tls) {
        (Some(_), Some(dir)) => Some(crate::control_tls::acceptor(dir).with_context(|| {
            format!(
                "cannot use the control channel's certificates in {}",
                dir.display()
            )
        })?),
        _ => None,
    };
    let tls = match args.https {
        Some(_) => Some(
            ingress
                .tls(&TlsOptions {
                    ca_dir: Some(args.ca_dir.clone()),
                    certificates: args.certificates.clone(),
                })
                .context("cannot set up TLS")?,
        ),
        None => None,
    };

    let redirect = args.https.is_some() && !args.no_redirect;
    let certificates: Vec<String> = args
        .certificates
        .iter()
        .map(CertificateFiles::to_string)
        .collect();
    let listen = Listen {
        http: args.listen,
        https: args.https,
        admin: args.admin,
        redirect,
        certificates: certificates.clone(),
        private: args.private_listen,
        dns: args.dns_listen,
        dns_upstreams: args.dns_upstreams.clone(),
        cloudflare_ranges: args.cloudflare_ranges.clone(),
        traces: traces(&args),
        max_connections_per_client: args.max_connections_per_client,
        max_rate_limited_clients: args.max_rate_limited_clients,
    };
    let Sockets {
        loops,
        http,
        https,
        admin,
        control_network,
        control: control_socket,
        private,
        dns,
    } = sockets;
    let (stop, stopped) = watch::channel(false);
    let (private_bound, dns_bound) = serve_instances(&ingress, &args, private, dns, &stopped)?;
    let cloudflare_watch = args
        .cloudflare_ranges
        .clone()
        .map(|path| ingress.watch_cloudflare_ranges(path, CLOUDFLARE_POLL));
    let memory_watch = ingress.give_back_memory();
    let bound = Listen {
        http: http.first().context("no HTTP socket")?.local_addr()?,
        https: https
            .first()
            .map(std::net::TcpListener::local_addr)
            .transpose()?,
        admin: admin.local_addr()?,
        redirect,
        certificates,
        private: private_bound,
        dns: dns_bound,
        dns_upstreams: args.dns_upstreams.clone(),
        cloudflare_ranges: args.cloudflare_ranges.clone(),
        traces: traces(&args),
        max_connections_per_client: args.max_connections_per_client,
        max_rate_limited_clients: args.max_rate_limited_clients,
    };

    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut hangup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
    // With a control plane, it alone sets tables.
    let routes = args.routes.clone().filter(|_| state_dir.is_none());
    let (told, mut told_by_supervisor) = tokio::sync::mpsc::unbounded_channel();
    {
        let reloader = ingress.clone();
        let routes = routes.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = hangup.recv() => {
                        if let Some(routes) = &routes {
                            reload(&reloader, routes);
                        }
                    }
                    said = told_by_supervisor.recv() => match said {
                        Some(supervise::Said::Reload) => if let Some(routes) = &routes {
                            reload(&reloader, routes);
                        },
                        Some(supervise::Said::Stop) => break,
                        None => std::future::pending().await,
                    },
                    _ = terminate.recv() => break,
                    _ = interrupt.recv() => break,
                }
            }
            let _ = stop.send(true);
        });
    }
    let supervisor = match &mut link {
        Some(link) => {
            let supervisor = link.supervisor();
            link.listen(told, state_dir.clone());
            Some(supervisor)
        }
        None => None,
    };

    let mut tasks = tokio::task::JoinSet::new();
    let admin_ingress = ingress.clone();
    let admin = TcpListener::from_std(admin)?;
    tasks.spawn({
        let stopped = stopped.clone();
        async move {
            admin_ingress
                .serve_admin(admin, until(stopped))
                .await
                .context("the metrics server stopped")
        }
    });
    // Proxied plain HTTP and HTTPS from the event loops, socket `i` of each from loop `i`;
    // the redirect (and everything, with no loops) from the shared runtime.
    let mut http = http.into_iter();
    let mut https = https.into_iter();
    let mut per_loop: Vec<Vec<(std::net::TcpListener, Option<Tls>)>> = Vec::new();
    if loops > 0 {
        for _ in 0..loops {
            let mut sockets = Vec::new();
            if !redirect && let Some(socket) = http.next() {
                sockets.push((socket, None));
            }
            if let (Some(socket), Some(tls)) = (https.next(), &tls) {
                sockets.push((socket, Some(tls.clone())));
            }
            per_loop.push(sockets);
        }
    }
    if let Some(socket) = http.next() {
        let listener = TcpListener::from_std(socket)?;
        let http_ingress = ingress.clone();
        let redirect_port = args.redirect_port;
        let stopped = stopped.clone();
        let redirect_to = bound.https.filter(|_| redirect);
        tasks.spawn(async move {
            match redirect_to {
                Some(https) => {
                    let port = redirect_port.unwrap_or(https.port());
                    http_ingress
                        .serve_redirect(listener, port, until(stopped))
                        .await
                }
                None => http_ingress.serve(listener, until(stopped)).await,
            }
            .context("the HTTP server stopped")
        });
    }
    if let (Some(socket), Some(tls)) = (https.next(), tls) {
        let listener = TcpListener::from_std(socket)?;
        let https_ingress = ingress.clone();
        let stopped = stopped.clone();
        tasks.spawn(async move {
            https_ingress
                .serve_tls(listener, &tls, until(stopped))
                .await
                .context("the HTTPS server stopped")
        });
    }
    if per_loop.iter().any(|sockets| !sockets.is_empty()) {
        let loops_ingress = ingress.clone();
        let stopped = stopped.clone();
        tasks.spawn(async move {
            serve_loops(loops_ingress, per_loop, stopped)
                .await
                .context("the event loops stopped")
        });
    }

    let control_bound = control_network
        .as_ref()
        .map(std::net::TcpListener::local_addr)
        .transpose()?;
    let mut published = None;
    if let (Some(dir), Some(socket)) = (&state_dir, control_socket) {
        let ControlSocket {
            listener,
            inode,
            pending,
        } = socket;
        let state = ControlState::new(
            ingress.clone(),
            dir,
            listen,
            bound.clone(),
            table.clone(),
            stop.clone(),
        );
        let state = Arc::new(match &supervisor {
            Some(supervisor) => state.supervised_by(Arc::clone(supervisor)),
            None => state,
        });
        if let (Some(listener), Some(acceptor)) = (control_network, control_acceptor) {
            tokio::spawn(control::serve_control_tls(
                TcpListener::from_std(listener)?,
                acceptor,
                Arc::clone(&state),
                until(stopped.clone()),
            ));
        }
        tokio::spawn(control::serve_control(
            tokio::net::UnixListener::from_std(listener)?,
            state,
            until(stopped.clone()),
        ));
        // A worker's supervisor published it; an ingress of one process does it now.
        if link.is_none() {
            publish(dir, pending.as_deref()).with_context(|| {
                format!("cannot listen on {}", dir.join(control::SOCKET).display())
            })?;
        }
        published = Some(inode);
    }
    if let Some(link) = &link {
        link.ready();
    }
    tracing::info!(
        "pid {}{}, serving {} route(s) on {}{}, metrics on {}{}",
        std::process::id(),
        link.as_ref()
            .map(|link| format!(" (worker of pid {})", link.supervisor_pid()))
            .unwrap_or_default(),
        table.routes.len(),
        bound.http,
        bound
            .https
            .map(|https| format!(" and HTTPS on {https}"))
            .unwrap_or_default(),
        bound.admin,
        state_dir
            .as_ref()
            .map(|dir| format!(", control socket {}", dir.join(control::SOCKET).display()))
            .unwrap_or_default(),
    );
    if let Some(address) = control_bound {
        tracing::info!(%address, "control over mutual TLS");
    }

    let mut failed = None;
    let mut stopped_now = stopped.clone();
    tokio::select! {
        biased;
        _ = stopped_now.wait_for(|s| *s) => {}
        // A server that ends by itself (it cannot bind, an event loop panicked) ends all. One
        // that ended because a stop was asked for meanwhile is no failure: taken for one, the
        // supervisor would start another worker instead of stopping.
        Some(ended) = tasks.join_next() => {
            if *stopped.borrow() {
                if !matches!(&ended, Ok(Ok(()))) {
                    failed = Some(ended);
                }
            } else {
                failed = Some(ended);
                let _ = stop.send(true);
            }
        }
    }
    // Said here, before anything else of the stop, not by a task woken by it: the process
    // could end before such a task ran, and the supervisor, not told, would start another.
    if failed.is_none()
        && let Some(link) = &link
    {
        link.stopping();
    }
    // The path is the next ingress's once it took it over.
    if let (Some(dir), Some(inode)) = (&state_dir, published) {
        control::remove_socket_if_ours(dir, inode);
    }
    tracing::info!("stopping: no new connections; in-flight requests finish");
    while let Some(ended) = tasks.join_next().await {
        if failed.is_none() && !matches!(&ended, Ok(Ok(()))) {
            failed = Some(ended);
        }
    }
    if let Some(dir) = &state_dir {
        remove_pid_if_ours(dir);
    }
    if let Some(watch) = cloudflare_watch {
        watch.abort();
    }
    memory_watch.abort();
    if let Some(tracing) = &tracing {
        // The spans of the last requests, before the process ends.
        tracing.flush(Duration::from_secs(2));
    }
    tracing::info!("stopped");
    match failed {
        Some(Ok(result)) => result,
        Some(Err(panicked)) => Err(anyhow::anyhow!("a server task panicked: {panicked}")),
        None => Ok(()),
    }
}

/// Serves the event loops' sockets, `per_loop[i]` from loop `i + 1`, each a thread with a
/// single-threaded runtime: what [`Ingress::serve_event_loops`] does, on sockets bound
/// beforehand (by the supervisor, which keeps them across its workers) instead of its own.
/// Returns once `stopped` turns true and every loop has let its in-flight requests finish.
async fn serve_loops(
    ingress: Ingress,
    per_loop: Vec<Vec<(std::net::TcpListener, Option<Tls>)>>,
    stopped: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let threads: Vec<_> = per_loop
        .into_iter()
        .enumerate()
        .map(|(index, sockets)| {
            let ingress = ingress.clone();
            let stopped = stopped.clone();
            std::thread::Builder::new()
                .name(format!("ingress-loop-{}", index + 1))
                .spawn(move || -> std::io::Result<()> {
                    crate::upstream::enter_event_loop(index + 1);
                    crate::timer::event_loop(async move {
                        let mut served = tokio::task::JoinSet::new();
                        for (socket, tls) in sockets {
                            let listener = TcpListener::from_std(socket)?;
                            let ingress = ingress.clone();
                            let stop = until(stopped.clone());
                            served.spawn(async move {
                                match tls {
                                    Some(tls) => ingress.serve_tls(listener, &tls, stop).await,
                                    None => ingress.serve(listener, stop).await,
                                }
                            });
                        }
                        while let Some(ended) = served.join_next().await {
                            ended.map_err(std::io::Error::other)??;
                        }
                        Ok(())
                    })?
                })
        })
        .collect::<std::io::Result<_>>()?;
    tokio::task::spawn_blocking(move || {
        for thread in threads {
            thread
                .join()
                .map_err(|_| std::io::Error::other("an event loop panicked"))??;
        }
        Ok(())
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Creates `dir` (and its parents), `0700`: the socket, the table and the log are this user's.
fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot make {} private", dir.display()))
}

pub(crate) fn write_pid(dir: &Path) {
    let path = dir.join(control::PID_FILE);
    if let Err(error) = std::fs::write(&path, format!("{}\n", std::process::id())) {
        tracing::warn!(file = %path.display(), %error, "cannot write the pid file");
    }
}

fn remove_pid_if_ours(dir: &Path) {
    let path = dir.join(control::PID_FILE);
    let ours = std::fs::read_to_string(&path)
        .is_ok_and(|text| text.trim() == std::process::id().to_string());
    if ours {
        let _ = std::fs::remove_file(path);
    }
}

// ---------------------------------------------------------------------------------------
// Starting one, or finding the one that runs.

/// How to start an ingress: the program and the arguments before the ingress's own (for the
/// `runway` binary: itself and `ingress`).
#[derive(Debug, Clone)]
pub struct IngressCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

/// The ingress a control plane wants.
#[derive(Debug, Clone)]
pub struct Launch {
    pub command: IngressCommand,
    /// Its state directory: socket, saved table, pid, log.
    pub state_dir: PathBuf,
    pub listen: Listen,
    pub ca_dir: PathBuf,
    /// Time in-flight requests get when it stops.
    pub shutdown_grace: Duration,
    /// How long a new ingress may take to answer on its socket.
    pub start_timeout: Duration,
}

/// What [`ensure`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// None answered; this one was started.
    Started,
    /// The one running is what was asked for: fed from now on.
    Adopted,
    /// The one running was not (another build or protocol, other addresses): a new one took
    /// over its ports and the old one was told to stop once the new one answered.
    Replaced { old_pid: u32, reason: String },
}

/// The ingress of `launch.state_dir`, running as asked: the one there if it is, else a new
/// one (replacing the one there, if any). Returns a handle on it and what was done.
pub async fn ensure(
    launch: &Launch,
    options: RemoteOptions,
) -> Result<(RemoteIngress, Outcome), ControlError> {
    create_private_dir(&launch.state_dir).map_err(|e| ControlError::Start {
        message: runway_log::chain(e.as_ref()),
    })?;
    let mut client = ControlClient::new(&launch.state_dir);
    client.timeout = options.timeout;
    let build = build_of(&launch.command);
    let outcome = match client.hello().await {
        Ok(hello) => match mismatch(&hello, launch, &build) {
            None => Outcome::Adopted,
            Some(reason) => {
                // Opened now, so the stop reaches the old one after the new one has taken
                // the socket's path over.
                let old = client.open().await?;
                start(launch, &client, true).await?;
                if let Err(error) = old.stop(options.timeout).await {
                    tracing::warn!(
                        pid = hello.pid,
                        error = runway_log::chain(&error),
                        "the replaced ingress did not take its stop"
                    );
                }
                Outcome::Replaced {
                    old_pid: hello.pid,
                    reason,
                }
            }
        },
        Err(_) => {
            start(launch, &client, false).await?;
            Outcome::Started
        }
    };
    let remote = RemoteIngress::connect(&launch.state_dir, options).await?;
    Ok((remote, outcome))
}

fn build_of(command: &IngressCommand) -> String {
    control::build_of(&command.program)
}

/// Why the running ingress is not the one asked for, if it is not.
fn mismatch(hello: &Hello, launch: &Launch, build: &str) -> Option<String> {
    if hello.protocol != PROTOCOL_VERSION {
        return Some(format!(
            "it speaks control protocol {}, this server {PROTOCOL_VERSION}",
            hello.protocol
        ));
    }
    if hello.listen != launch.listen {
        return Some(format!(
            "it listens on {}, the configuration says {}",
            describe(&hello.listen),
            describe(&launch.listen)
        ));
    }
    if hello.build != build {
        return Some(format!(
            "it runs build {} ({}), the installed one is {build}",
            hello.build, hello.version
        ));
    }
    // Started by `start`, it has one; a worker whose supervisor was killed has none, and
    // serves on alone until this replaces it.
    if hello.worker.is_none() {
        return Some(format!(
            "it runs without a supervisor (pid {} serves alone)",
            hello.pid
        ));
    }
    None
}

fn describe(listen: &Listen) -> String {
    format!(
        "http {}{}{}, admin {}",
        listen.http,
        listen
            .https
            .map(|https| format!(", https {https}"))
            .unwrap_or_default(),
        if listen.redirect { " (redirect)" } else { "" },
        listen.admin
    ) + &if listen.certificates.is_empty() {
        String::new()
    } else {
        format!(", certificates {}", listen.certificates.join(" "))
    } + &listen
        .private
        .map(|private| format!(", private {private}"))
        .unwrap_or_default()
        + &listen
            .dns
            .map(|dns| format!(", dns {dns}"))
            .unwrap_or_default()
        + &if listen.dns_upstreams.is_empty() {
            String::new()
        } else {
            let upstreams: Vec<String> = listen
                .dns_upstreams
                .iter()
                .map(ToString::to_string)
                .collect();
            format!(" (upstreams {})", upstreams.join(" "))
        }
        + &listen
            .cloudflare_ranges
            .as_ref()
            .map(|path| format!(", cloudflare ranges {}", path.display()))
            .unwrap_or_default()
}

/// Starts an ingress (its supervisor, `--supervise`) in a process group of its own and waits
/// until it answers on its socket.
async fn start(
    launch: &Launch,
    client: &ControlClient,
    replacing: bool,
) -> Result<(), ControlError> {
    let dir = &launch.state_dir;
    let failed = |message: String| ControlError::Start { message };
    let log_path = dir.join("ingress.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| failed(format!("cannot open {}: {e}", log_path.display())))?;
    let log_err = log
        .try_clone()
        .map_err(|e| failed(format!("cannot open {}: {e}", log_path.display())))?;
    let mut command = tokio::process::Command::new(&launch.command.program);
    command
        .args(&launch.command.args)
        .arg("--supervise")
        .arg("--state-dir")
        .arg(dir)
        .arg("--listen")
        .arg(launch.listen.http.to_string())
        .arg("--admin")
        .arg(launch.listen.admin.to_string())
        .arg("--ca-dir")
        .arg(&launch.ca_dir)
        .arg("--shutdown-grace-seconds")
        .arg(launch.shutdown_grace.as_secs().to_string());
    if let Some(https) = launch.listen.https {
        command.arg("--https").arg(https.to_string());
    }
    if !launch.listen.redirect {
        command.arg("--no-redirect");
    }
    for certificate in &launch.listen.certificates {
        command.arg("--certificate").arg(certificate);
    }
    if let Some(private) = launch.listen.private {
        command.arg("--private-listen").arg(private.to_string());
    }
    if let Some(dns) = launch.listen.dns {
        command.arg("--dns-listen").arg(dns.to_string());
    }
    for upstream in &launch.listen.dns_upstreams {
        command.arg("--dns-upstream").arg(upstream.to_string());
    }
    if let Some(path) = &launch.listen.cloudflare_ranges {
        command.arg("--cloudflare-ranges").arg(path);
    }
    if let Some(traces) = &launch.listen.traces {
        command
            .arg("--otlp-endpoint")
            .arg(&traces.endpoint)
            .arg("--trace-sample-ratio")
            .arg(traces.sample_ratio.to_string());
    }
    if let Some(max) = launch.listen.max_connections_per_client {
        command
            .arg("--max-connections-per-client")
            .arg(max.to_string());
    }
    if let Some(max) = launch.listen.max_rate_limited_clients {
        command
            .arg("--max-rate-limited-clients")
            .arg(max.to_string());
    }
    if replacing {
        command.arg("--replacing");
    }
    // Its own process group: a terminal's Ctrl-C to the control plane does not reach it.
    // Dropping the handle leaves it running; tokio reaps it if it ends while we live.
    let mut child = command
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0)
        .kill_on_drop(false)
        .spawn()
        .map_err(|e| {
            failed(format!(
                "cannot run {}: {e}",
                launch.command.program.display()
            ))
        })?;
    let pid = child.id();
    let deadline = tokio::time::Instant::now() + launch.start_timeout;
    loop {
        if let Ok(hello) = client.hello().await
            && Some(hello.pid) == pid
        {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(failed(format!(
                "it exited ({status}): {}",
                log_tail(&log_path)
            )));
        }
        if tokio::time::Instant::now() >= deadline {
            let _ = child.start_kill();
            return Err(failed(format!(
                "it did not answer within {:?}: {}",
                launch.start_timeout,
                log_tail(&log_path)
            )));
        }
        crate::timer::sleep(Duration::from_millis(10)).await;
    }
}

/// The last lines of the ingress's log, for an error.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(5)..].join("\n");
    if tail.trim().is_empty() {
        format!("nothing in {}", path.display())
    } else {
        tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `runway server` and a restarted ingress pass as `--certificate` reads back as the
    /// same files.
    #[test]
    fn a_certificate_argument_reads_back_as_its_files() {
        let files = CertificateFiles {
            domains: vec!["www.example.com".to_owned(), "*.example.com".to_owned()],
            cert: "/etc/certs/chain.pem".into(),
            key: "/etc/certs/key.pem".into(),
        };
        let argument = files.to_string();
        assert_eq!(
            argument,
            "www.example.com,*.example.com:/etc/certs/chain.pem:/etc/certs/key.pem"
        );
        let read = parse_certificate(&argument).unwrap();
        assert_eq!(
            (read.domains, read.cert, read.key),
            (files.domains, files.cert, files.key)
        );
        assert!(parse_certificate("/etc/certs/chain.pem").is_err());
        assert!(parse_certificate(":/a.pem:/b.pem").is_err());
    }
}
