//! `runway router`: a reverse proxy in front of cells, on the ingress's core. Every request is
//! placed by GitLab's HTTP router rules and the topology, and streamed to its cell.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args as ClapArgs;
use runway_ingress::config::ANY_HOST;
use runway_ingress::config::TopologyServiceConfig;
use runway_ingress::{CertificateFiles, Ingress, Options, RouteTableConfig, TlsOptions};
use runway_server::cells::{Topology, cell_route};
use tokio::net::TcpListener;

/// `runway router`.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    /// The rule file, in GitLab's HTTP router format (a JSON list of rules, or one rule).
    /// Refused at start, with its line, when a rule cannot work.
    #[arg(long, value_name = "FILE")]
    rules: PathBuf,
    /// How this process's log lines are written on stderr: `text` (readable) or `json` (one
    /// object a line, with the spans it happened in: service, environment, deployment,
    /// revision, instance); `RUST_LOG` filters them (default `info`).
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    pub(crate) log_format: runway_log::LogFormat,
    /// The topology file: `cells: [{id, address, session_prefix}]` and `legacy_cell: ID`;
    /// an address is `host:port` (a name is resolved at start) or `http://host:port`.
    #[arg(long, value_name = "FILE", required_unless_present = "legacy_cell")]
    topology: Option<PathBuf>,
    /// Instead of a topology file, with --topology-service: the legacy cell's `host:port`,
    /// which takes what no rule places and what the service cannot.
    #[arg(
        long,
        value_name = "HOST:PORT",
        requires = "topology_service",
        conflicts_with = "topology"
    )]
    legacy_cell: Option<String>,
    /// GitLab's topology service (`http://host:port`), asked where a classification's cell
    /// is (`POST /v1/classify`). Its answers are kept --topology-cache-ms; while it cannot
    /// answer (down, slow past --topology-timeout-ms, garbage) an answer up to 5 minutes old
    /// is used, else the topology file's cells, else the legacy cell.
    #[arg(long, value_name = "URL")]
    topology_service: Option<String>,
    /// The longest wait for the topology service, in milliseconds.
    #[arg(long, default_value_t = 1_000, requires = "topology_service")]
    topology_timeout_ms: u64,
    /// How long its answers are used before asking again, in milliseconds.
    #[arg(long, default_value_t = 10_000, requires = "topology_service")]
    topology_cache_ms: u64,
    /// Where to serve clients (runners).
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Serve HTTPS with this certificate chain (PEM), with --tls-key and --tls-domain.
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "tls_domain"])]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// A name the certificate serves (`gitlab.example.com`, `*.example.com`). Repeatable.
    #[arg(long, value_name = "NAME", requires = "tls_cert")]
    tls_domain: Vec<String>,
    /// Serve Prometheus metrics (`/metrics`: requests and latency per cell, decisions per
    /// rule and cell) and `/healthz` here.
    #[arg(long, value_name = "ADDR")]
    admin: Option<SocketAddr>,
    /// Write an access log (JSON lines, with each request's rule and cell) to standard output.
    #[arg(long)]
    access_log: bool,
    /// Time from a request's arrival to its cell's response head, in seconds: long enough for
    /// a runner's long poll and a large artifact's upload.
    #[arg(long, default_value_t = 3600)]
    request_timeout_seconds: u64,
    /// The largest request body, in bytes (artifacts).
    #[arg(long, default_value_t = 64 << 30)]
    max_body_bytes: u64,
}

/// The route table of a router: one route, every host, the topology's addresses resolved.
async fn table(
    rules_path: &std::path::Path,
    topology_path: &Topology<'_>,
    topology_service: Option<TopologyServiceConfig>,
    request_timeout: Duration,
) -> anyhow::Result<RouteTableConfig> {
    Ok(RouteTableConfig {
        domain: "localhost".to_owned(),
        environments: Vec::new(),
        routes: vec![
            cell_route(
                "router",
                vec![ANY_HOST.to_owned()],
                rules_path,
                topology_path,
                topology_service,
                request_timeout,
            )
            .await?,
        ],
        ..RouteTableConfig::default()
    })
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(serve(args))?;
    Ok(ExitCode::SUCCESS)
}

async fn serve(args: &Args) -> anyhow::Result<()> {
    runway_ingress::raise_fd_limit().context("cannot raise the open-file limit")?;
    let service = args
        .topology_service
        .as_ref()
        .map(|url| TopologyServiceConfig {
            url: url.clone(),
            timeout_ms: args.topology_timeout_ms,
            cache_ms: args.topology_cache_ms,
        });
    let topology = match (&args.topology, &args.legacy_cell) {
        (Some(path), _) => Topology::File(path),
        (None, Some(address)) => Topology::Legacy(address),
        (None, None) => bail!("--topology FILE, or --topology-service with --legacy-cell"),
    };
    let table = table(
        &args.rules,
        &topology,
        service,
        Duration::from_secs(args.request_timeout_seconds.max(1)),
    )
    .await?;
    let options = Options {
        max_body_bytes: usize::try_from(args.max_body_bytes).unwrap_or(usize::MAX),
        ..Options::default()
    };
    let ingress = if args.access_log {
        Ingress::with_access_log(options, tokio::io::stdout())
    } else {
        Ingress::new(options)
    };
    ingress
        .set_routes(&table)
        .context("the rules and topology do not make a route")?;
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let bound = listener.local_addr()?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            ingress
                .tls(&TlsOptions {
                    ca_dir: None,
                    certificates: vec![CertificateFiles {
                        domains: args.tls_domain.clone(),
                        cert: cert.clone(),
                        key: key.clone(),
                    }],
                })
                .context("--tls-cert: cannot serve TLS")?,
        ),
        _ => None,
    };
    let cells = table.routes[0]
        .cells
        .as_ref()
        .map_or(0, |cells| cells.topology.cells.len());
    eprintln!(
        "runway router: {} on {bound}, {cells} cell{} ({})",
        if tls.is_some() { "HTTPS" } else { "HTTP" },
        if cells == 1 { "" } else { "s" },
        args.rules.display()
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let mut tasks = Vec::new();
    if let Some(admin) = args.admin {
        let listener = TcpListener::bind(admin)
            .await
            .with_context(|| format!("cannot listen on {admin} (--admin)"))?;
        eprintln!(
            "runway router: metrics on http://{}/metrics",
            listener.local_addr()?
        );
        let ingress = ingress.clone();
        let stopped = stopped.clone();
        tasks.push(tokio::spawn(async move {
            ingress.serve_admin(listener, until(stopped)).await
        }));
    }
    let mut serving = {
        let ingress = ingress.clone();
        let stopped = stopped.clone();
        tokio::spawn(async move {
            match tls {
                Some(tls) => ingress.serve_tls(listener, &tls, until(stopped)).await,
                None => ingress.serve(listener, until(stopped)).await,
            }
        })
    };
    tokio::select! {
        signal = runway_server::shutdown_signal() => signal?,
        served = &mut serving => {
            served.context("the router stopped")?.context("the router stopped")?;
            return Ok(());
        }
    }
    eprintln!("runway router: stopping; requests in flight get their grace");
    let _ = stop.send(true);
    let _ = serving.await;
    for task in tasks {
        let _ = task.await;
    }
    Ok(())
}
