//! `runway-ingress` as a process: its arguments and main ([`Args`], [`main`]), and how a
//! control plane starts one, or finds the one already running ([`ensure`]).
//!
//! With `--state-dir DIR` the ingress is the data plane of a control plane: it serves the
//! table saved in `DIR/table.json` from its first moment, listens on `DIR/control.sock` for
//! new tables (see [`crate::control`]), and outlives whoever started it. Every client-facing
//! socket is bound with `SO_REUSEPORT`, so a replacement (`--replacing`) listens on the same
//! ports before the ingress it replaces stops accepting.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tokio::net::{TcpListener, TcpSocket};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::control::{
    self, ControlClient, ControlError, ControlState, Hello, Listen, PROTOCOL_VERSION,
    RemoteIngress, RemoteOptions,
};
use crate::server::LoopListener;
use crate::{CertificateFiles, Ingress, Options, RouteTableConfig, TlsOptions};

/// Runway's ingress: routes requests by host to the instances of a route table.
#[derive(Debug, Clone, Parser)]
#[command(version)]
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

/// Runs the ingress until SIGTERM, SIGINT or (with `--state-dir`) a `stop` request.
pub fn main(args: Args) -> anyhow::Result<()> {
    runway_log::init(args.log_format);
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.threads {
        runtime.worker_threads(threads.max(1));
    }
    runtime
        .enable_all()
        .build()
        .context("cannot start the runtime")?
        .block_on(run(args))
}

/// A listening socket that others of this user may share (`SO_REUSEPORT`).
fn reuse_port_listener(address: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = reuse_port_socket(address)?;
    socket.listen(1024)
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

fn freebind_listener(address: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = freebind_socket(address, socket2::Type::STREAM)?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

fn freebind_udp(address: SocketAddr) -> std::io::Result<tokio::net::UdpSocket> {
    let socket = freebind_socket(address, socket2::Type::DGRAM)?;
    tokio::net::UdpSocket::from_std(socket.into())
}

/// The instances' listeners, each logged and left out when it cannot be had: they never stop
/// the public ones. Returns the addresses bound.
fn serve_instances(
    ingress: &Ingress,
    args: &Args,
    stopped: &watch::Receiver<bool>,
) -> (Option<SocketAddr>, Option<SocketAddr>) {
    let Some(private) = args.private_listen else {
        return (None, None);
    };
    let until = |mut stopped: watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let private_bound = match freebind_listener(private) {
        Ok(listener) => {
            let bound = listener.local_addr().ok();
            let (ingress, stopped) = (ingress.clone(), stopped.clone());
            tokio::spawn(async move {
                if let Err(error) = ingress.serve_private(listener, until(stopped)).await {
                    tracing::error!(%error, "the private listener (--private-listen) stopped");
                }
            });
            bound
        }
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
        return (private_bound, None);
    };
    let IpAddr::V4(answer) = private_bound.unwrap_or(private).ip() else {
        tracing::error!(
            "--dns-listen answers private names with --private-listen's address, which must be \
             IPv4; no DNS served"
        );
        return (private_bound, None);
    };
    let mut upstreams = if args.dns_upstreams.is_empty() {
        crate::dns::system_upstreams()
    } else {
        args.dns_upstreams.clone()
    };
    // Never itself: a query would go round.
    upstreams.retain(|upstream| *upstream != dns);
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
    let sockets = freebind_udp(dns).and_then(|udp| Ok((udp, freebind_listener(dns)?)));
    match sockets {
        Ok((udp, tcp)) => {
            let bound = udp.local_addr().ok();
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
            (private_bound, bound)
        }
        Err(error) => {
            tracing::error!(
                address = %dns,
                %error,
                "cannot listen on --dns-listen; instances have no resolver"
            );
            (private_bound, None)
        }
    }
}

fn reuse_port_socket(address: SocketAddr) -> std::io::Result<TcpSocket> {
    let socket = if address.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(address)?;
    Ok(socket)
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

async fn run(args: Args) -> anyhow::Result<()> {
    let event_loops = args
        .event_loops
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let state_dir = args.state_dir.clone();
    if let Some(dir) = &state_dir {
        create_private_dir(dir)?;
    }
    // The ingress being replaced, asked before this one takes the socket's path over.
    let replaced: Option<Hello> = match (&state_dir, args.replacing) {
        (Some(dir), true) => Some(
            ControlClient::new(dir)
                .hello()
                .await
                .context("--replacing, but no ingress answers on the control socket")?,
        ),
        _ => None,
    };
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
    let options = Options {
        shutdown_grace: Duration::from_secs(args.shutdown_grace_seconds),
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
    };
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
    // Proxied plain HTTP is served from the event loops, like HTTPS; this socket then holds
    // the port (bound, not listening: it takes no connection) while the loops bind theirs.
    // The redirect to HTTPS is served from the shared runtime.
    let http_socket =
        reuse_port_socket(http_at).with_context(|| format!("cannot listen on {http_at} (HTTP)"))?;
    let http_bound = http_socket.local_addr()?;
    let http_loops = !redirect && event_loops > 0;
    let (listener, http_placeholder) = if http_loops {
        (None, Some(http_socket))
    } else {
        let listener = http_socket
            .listen(1024)
            .with_context(|| format!("cannot listen on {http_at} (HTTP)"))?;
        (Some(listener), None)
    };
    let admin = reuse_port_listener(admin_at)
        .with_context(|| format!("cannot listen on {admin_at} (metrics)"))?;
    // Port 0: the kernel picks one on a socket bound but not listening (so it takes no
    // connection), held until the event loops have bound theirs.
    let https_placeholder = match https_at {
        Some(address) => Some(
            reuse_port_socket(address)
                .with_context(|| format!("cannot listen on {address} (HTTPS)"))?,
        ),
        None => None,
    };
    let https_bound = match &https_placeholder {
        Some(socket) => Some(socket.local_addr()?),
        None => None,
    };
    let (stop, stopped) = watch::channel(false);
    let (private_bound, dns_bound) = serve_instances(&ingress, &args, &stopped);
    let cloudflare_watch = args
        .cloudflare_ranges
        .clone()
        .map(|path| ingress.watch_cloudflare_ranges(path, CLOUDFLARE_POLL));
    let bound = Listen {
        http: http_bound,
        https: https_bound,
        admin: admin.local_addr()?,
        redirect,
        certificates,
        private: private_bound,
        dns: dns_bound,
        dns_upstreams: args.dns_upstreams.clone(),
        cloudflare_ranges: args.cloudflare_ranges.clone(),
    };

    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut hangup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
    let reloader = ingress.clone();
    let routes = args.routes.clone().filter(|_| state_dir.is_none());
    let stop_on_signal = stop.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = hangup.recv() => {
                    // With a control plane, it alone sets tables.
                    let Some(routes) = &routes else { continue };
                    match RouteTableConfig::load(routes).and_then(|t| reloader.set_routes(&t)) {
                        Ok(()) => tracing::info!(file = %routes.display(), "routes reloaded"),
                        // A bad file keeps the table in force.
                        Err(error) => tracing::warn!(
                            file = %routes.display(),
                            error = runway_log::chain(&error),
                            "kept the previous table"
                        ),
                    }
                }
                _ = terminate.recv() => break,
                _ = interrupt.recv() => break,
            }
        }
        let _ = stop_on_signal.send(true);
    });
    let until = |mut stopped: watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|s| *s).await;
    };

    let mut tasks = tokio::task::JoinSet::new();
    let admin_ingress = ingress.clone();
    tasks.spawn({
        let stopped = stopped.clone();
        async move {
            admin_ingress
                .serve_admin(admin, until(stopped))
                .await
                .context("the metrics server stopped")
        }
    });
    let mut held_ports = vec![http_placeholder];
    // What the event loops serve: proxied plain HTTP and HTTPS, both from the same loops.
    let mut loop_listeners = Vec::new();
    if http_loops {
        loop_listeners.push(LoopListener {
            address: http_bound,
            tls: None,
        });
    }
    if let (Some(address), Some(placeholder)) = (https_bound, https_placeholder) {
        let tls = ingress
            .tls(&TlsOptions {
                ca_dir: Some(args.ca_dir.clone()),
                certificates: args.certificates.clone(),
            })
            .context("cannot set up TLS")?;
        let https_ingress = ingress.clone();
        let stopped = stopped.clone();
        if event_loops > 0 {
            loop_listeners.push(LoopListener {
                address,
                tls: Some(tls),
            });
            // Bound but not listening, it takes no connection; held to the end, it keeps a
            // port the kernel picked ours while the loops bind theirs.
            held_ports.push(Some(placeholder));
        } else {
            let listener = placeholder
                .listen(1024)
                .with_context(|| format!("cannot listen on {address} (HTTPS)"))?;
            tasks.spawn(async move {
                https_ingress
                    .serve_tls(listener, &tls, until(stopped))
                    .await
                    .context("the HTTPS server stopped")
            });
        }
    }
    if !loop_listeners.is_empty() {
        let loops_ingress = ingress.clone();
        let stopped = stopped.clone();
        tasks.spawn(async move {
            loops_ingress
                .serve_event_loops(&loop_listeners, event_loops, stopped)
                .await
                .context("the event loops stopped")
        });
    }
    if let Some(listener) = listener {
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

    // Read before anything is served, so bad files stop the start with their name.
    let control_network = match (args.control_listen, &args.control_tls) {
        (Some(address), Some(dir)) => {
            let acceptor = crate::control_tls::acceptor(dir).with_context(|| {
                format!(
                    "cannot use the control channel's certificates in {}",
                    dir.display()
                )
            })?;
            let listener = TcpListener::bind(address)
                .await
                .with_context(|| format!("cannot listen on {address} (control)"))?;
            Some((listener, acceptor))
        }
        _ => None,
    };
    let control_bound = match &control_network {
        Some((listener, _)) => Some(listener.local_addr()?),
        None => None,
    };
    let mut socket = None;
    if let Some(dir) = &state_dir {
        let (control_listener, inode) = control::bind_socket(dir)
            .with_context(|| format!("cannot listen on {}", dir.join(control::SOCKET).display()))?;
        socket = Some(inode);
        write_pid(dir);
        let state = Arc::new(ControlState::new(
            ingress.clone(),
            dir,
            listen,
            bound.clone(),
            table.clone(),
            stop.clone(),
        ));
        if let Some((listener, acceptor)) = control_network {
            tokio::spawn(control::serve_control_tls(
                listener,
                acceptor,
                Arc::clone(&state),
                until(stopped.clone()),
            ));
        }
        let stopped = stopped.clone();
        tokio::spawn(control::serve_control(
            control_listener,
            state,
            until(stopped),
        ));
    }
    tracing::info!(
        "pid {}, serving {} route(s) on {}{}, metrics on {}{}",
        std::process::id(),
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
    if let Some(old) = &replaced {
        tracing::info!(pid = old.pid, "replacing the ingress running before");
    }

    let mut failed = None;
    let mut stopped_now = stopped.clone();
    tokio::select! {
        _ = stopped_now.wait_for(|s| *s) => {}
        // A server that ends by itself (it cannot bind, an event loop panicked) ends all.
        Some(ended) = tasks.join_next() => {
            failed = Some(ended);
            let _ = stop.send(true);
        }
    }
    // The path is the next ingress's once it took it over.
    if let (Some(dir), Some(inode)) = (&state_dir, socket) {
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
    drop(held_ports);
    tracing::info!("stopped");
    match failed {
        Some(Ok(result)) => result,
        Some(Err(panicked)) => Err(anyhow::anyhow!("a server task panicked: {panicked}")),
        None => Ok(()),
    }
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

fn write_pid(dir: &Path) {
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
        message: format!("{e:#}"),
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

/// Starts an ingress in a session of its own and waits until it answers on its socket.
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
        tokio::time::sleep(Duration::from_millis(10)).await;
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
