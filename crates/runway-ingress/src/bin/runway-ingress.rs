//! `runway-ingress`: the ingress on its own, with its route table from a file (reloaded on
//! SIGHUP) until the control plane feeds it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use runway_ingress::{CertificateFiles, Ingress, Options, RouteTableConfig, TlsOptions};
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Runway's ingress: routes requests by host to the instances of a route table.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The route table, JSON or YAML (by extension); reloaded on SIGHUP.
    #[arg(long)]
    routes: PathBuf,
    /// Where clients connect over plain HTTP (HTTP/1.1 and h2c); with --https, this port
    /// redirects to HTTPS unless --no-redirect.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Serve HTTPS here (TLS 1.2 and 1.3, HTTP/2 by ALPN).
    #[arg(long)]
    https: Option<SocketAddr>,
    /// The local certificate authority's directory, made on first start; its `ca.pem` goes in
    /// clients' trust stores.
    #[arg(long, default_value = "ingress-ca")]
    ca_dir: PathBuf,
    /// An operator certificate: `DOMAIN[,DOMAIN...]:CERT.pem:KEY.pem` (`*.example.com` allowed).
    #[arg(long = "certificate", value_parser = parse_certificate)]
    certificates: Vec<CertificateFiles>,
    /// With --https, proxy plain HTTP too instead of redirecting it.
    #[arg(long)]
    no_redirect: bool,
    /// Where `/metrics` and `/healthz` are served.
    #[arg(long, default_value = "127.0.0.1:9090")]
    admin: SocketAddr,
    /// Write the JSON access log to standard output.
    #[arg(long)]
    access_log: bool,
    /// Worker threads of the shared runtime, which serves the admin port, and clients with
    /// `--event-loops 0` (default: one per CPU).
    #[arg(long)]
    threads: Option<usize>,
    /// Serve clients from this many single-threaded event loops, each with its own listening
    /// socket (SO_REUSEPORT), as nginx's workers do (default: one per CPU); 0 serves them
    /// from the shared runtime.
    #[arg(long)]
    event_loops: Option<usize>,
    /// Seconds in-flight requests get to finish on SIGTERM or SIGINT.
    #[arg(long, default_value_t = 30)]
    shutdown_grace_seconds: u64,
}

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

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
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

async fn run(args: Args) -> anyhow::Result<()> {
    let event_loops = args
        .event_loops
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let table = RouteTableConfig::load(&args.routes)?;
    // Before the options: their connection budget is computed from the limit.
    let fd_limit = runway_ingress::raise_fd_limit().context("cannot read the open-file limit")?;
    let options = Options {
        shutdown_grace: Duration::from_secs(args.shutdown_grace_seconds),
        ..Options::default()
    };
    let ingress = if args.access_log {
        Ingress::with_access_log(options, tokio::io::stdout())
    } else {
        Ingress::new(options)
    };
    ingress.set_routes(&table)?;
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let admin = TcpListener::bind(args.admin)
        .await
        .with_context(|| format!("cannot listen on {}", args.admin))?;
    eprintln!(
        "runway-ingress: serving {} route(s) on {}, metrics on {}; {} client connections at most ({fd_limit} open files)",
        table.routes.len(),
        args.listen,
        args.admin,
        ingress.options().max_connections,
    );

    let (stop, stopped) = watch::channel(false);
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut hangup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
    let reloader = ingress.clone();
    let routes = args.routes.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = hangup.recv() => {
                    match RouteTableConfig::load(&routes).and_then(|t| reloader.set_routes(&t)) {
                        Ok(()) => eprintln!("runway-ingress: reloaded {}", routes.display()),
                        // A bad file keeps the table in force.
                        Err(error) => eprintln!("runway-ingress: kept the previous table: {error}"),
                    }
                }
                _ = terminate.recv() => break,
                _ = interrupt.recv() => break,
            }
        }
        let _ = stop.send(true);
    });
    let until = |mut stopped: watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let admin_ingress = ingress.clone();
    let admin_task = tokio::spawn({
        let stopped = stopped.clone();
        async move { admin_ingress.serve_admin(admin, until(stopped)).await }
    });
    let https_task = match args.https {
        Some(address) => {
            let tls = ingress
                .tls(&TlsOptions {
                    ca_dir: Some(args.ca_dir.clone()),
                    certificates: args.certificates.clone(),
                })
                .context("cannot set up TLS")?;
            eprintln!(
                "runway-ingress: HTTPS on {address}; local CA certificate in {}",
                args.ca_dir.join("ca.pem").display()
            );
            let https_ingress = ingress.clone();
            let stopped = stopped.clone();
            let loops = event_loops;
            if loops > 0 {
                Some(tokio::spawn(async move {
                    https_ingress
                        .serve_event_loops(address, loops, Some(&tls), stopped)
                        .await
                }))
            } else {
                let listener = TcpListener::bind(address)
                    .await
                    .with_context(|| format!("cannot listen on {address}"))?;
                Some(tokio::spawn(async move {
                    https_ingress
                        .serve_tls(listener, &tls, until(stopped))
                        .await
                }))
            }
        }
        None => None,
    };
    match (args.https, args.no_redirect) {
        (Some(https), false) => {
            ingress
                .serve_redirect(listener, https.port(), until(stopped))
                .await?;
        }
        _ if event_loops > 0 => {
            drop(listener);
            ingress
                .serve_event_loops(args.listen, event_loops, None, stopped)
                .await?;
        }
        _ => ingress.serve(listener, until(stopped)).await?,
    }
    if let Some(task) = https_task {
        task.await??;
    }
    let _ = admin_task.await;
    eprintln!("runway-ingress: stopped");
    Ok(())
}
