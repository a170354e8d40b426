//! `runway quickstart`: an embedded control plane serving the bundled example, and a rollout
//! under load that must not fail a single request.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use runway_runtime::{LocalRuntime, Runtime};

use crate::api::{Client, CreateService, DeploymentStateView, DeploymentView};
use crate::platform::{deploy_request, upload_code, wait_for};
use crate::repo::{discover, valid_services};
use crate::{EXIT_INVALID, Output};
use runway_server::config::IngressConfig;
use runway_server::{Running, ServerConfig};

/// The bundled example, written into a temporary directory so the command works from anywhere.
const EXAMPLE: [(&str, &str); 5] = [
    (
        ".runway/runway.yml",
        include_str!("../../../examples/hello/.runway/runway.yml"),
    ),
    (
        ".runway/runway-dev.yml",
        include_str!("../../../examples/hello/.runway/runway-dev.yml"),
    ),
    (
        ".runway/runway-production.yml",
        include_str!("../../../examples/hello/.runway/runway-production.yml"),
    ),
    (
        ".runway/env-production.yml",
        include_str!("../../../examples/hello/.runway/env-production.yml"),
    ),
    ("app.py", include_str!("../../../examples/hello/app.py")),
];

const SERVICE: &str = "hello";
const ENV: &str = "dev";

/// `runway quickstart`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Keep the platform's state here (default: a temporary directory, removed at exit).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Where the services are served over HTTPS (port 0: any free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8443")]
    https: SocketAddr,
    /// Where plain HTTP is redirected to HTTPS (port 0: any free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    http: SocketAddr,
    /// Clients that keep requesting through the ingress during the rollout.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Exit after the rollout's report: 0 when no request failed, 1 otherwise (for scripts
    /// and CI); the instances are stopped.
    #[arg(long)]
    exit_after_rollout: bool,
}

/// What the load loop counted.
#[derive(Debug, Default)]
struct Counts {
    ok: AtomicU64,
    failed: AtomicU64,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let temporary = match &args.data_dir {
        Some(_) => None,
        None => Some(tempfile::tempdir().context("cannot make a temporary directory")?),
    };
    let data_dir = match (&args.data_dir, &temporary) {
        (Some(dir), _) => {
            let dir = std::path::absolute(dir)
                .with_context(|| format!("cannot use {}", dir.display()))?;
            // Made as `runway server --data-dir` makes it.
            runway_server::create_data_dir(&dir)?;
            dir
        }
        (None, Some(temp)) => temp.path().to_path_buf(),
        (None, None) => bail!("no data directory"),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(quickstart(args, &data_dir));
    drop(temporary);
    result
}

async fn quickstart(args: &Args, data_dir: &Path) -> anyhow::Result<ExitCode> {
    // The example's code is a repository of its own, out of the data directory: an isolated
    // process may never see the platform's files.
    let code = tempfile::tempdir().context("cannot make a directory for the example")?;
    let example = code.path().join("hello");
    for (path, text) in EXAMPLE {
        let path = example.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let mut config = ServerConfig::default();
    config.api.data_dir = data_dir.to_path_buf();
    config.api.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.ingress = IngressConfig {
        https: args.https,
        http: args.http,
        redirect: true,
        admin: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..IngressConfig::default()
    };
    // Old instances stop a few seconds after traffic left them, so the report comes soon.
    config.control.drain_grace_ms = 3_000;
    // The example is a plain process, and this platform is the user's own. It runs isolated
    // as a tenant's would when an OCI runtime is there to do it.
    config.runtime.allow_processes = true;
    if !nix::unistd::geteuid().is_root() {
        config.runtime.isolate_processes = false;
        eprintln!(
            "note: not root, so the example runs as your own user, not isolated as `runway \
             server` run as root runs a tenant's process"
        );
    } else if !runway_runtime::local::on_path(&config.runtime.oci_runtime) {
        config.runtime.isolate_processes = false;
        eprintln!(
            "note: {} is not installed, so the example runs as your own user, not isolated as \
             `runway server` runs a tenant's process (apt-get install runc)",
            config.runtime.oci_runtime.display()
        );
    }
    // An isolated example gets a network of its own, when this machine has what makes one.
    if !config.runtime.isolate_processes {
        config.runtime.instance_network = "host".to_owned();
    } else if let Err(missing) = runway_runtime::network::AddressPool::check_tools()
        .and_then(|()| runway_runtime::firewall::Firewall::check_tools())
    {
        config.runtime.instance_network = "host".to_owned();
        eprintln!(
            "note: {missing}, so the example shares this machine's network instead of having \
             its own behind the platform's firewall as on `runway server` (apt-get install \
             iproute2 nftables)"
        );
    }
    // The platform's own log lines (its servers', its ingress's) go to a file, so the
    // terminal shows the quickstart's story alone; our own stderr is back once it ends.
    let log = data_dir.join("server.log");
    let _log = StderrTo::file(&log)?;
    say(&format!("the platform's log: {}", log.display()));
    let running = runway_server::start(config).await?;
    let outcome = demonstrate(args, &running, data_dir, &example).await;
    // The platform's instances go with it: the control plane stops first (else it would start
    // them again), then the instances, then the ingress.
    // Each is stopped whatever became of the one before, so nothing is left running.
    let ingress = running.ingress.clone();
    let runtime = running.runtime().cloned();
    let stopped = running.stop().await;
    if let Some(runtime) = runtime {
        stop_instances(&runtime).await;
    }
    let ingress_stopped = match ingress {
        Some(ingress) => ingress.stop().await,
        None => Ok(()),
    };
    stopped.context("cannot stop the control plane")?;
    ingress_stopped?;
    outcome
}

/// Standard error sent to a file while it lives (the processes started meanwhile keep
/// writing there), then back where it was.
struct StderrTo {
    saved: std::os::fd::OwnedFd,
}

impl StderrTo {
    fn file(path: &Path) -> anyhow::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        // Close-on-exec: the processes the platform starts must not hold our standard error
        // (a caller reading it to its end would wait for them).
        let saved = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .context("cannot keep standard error")?;
        nix::unistd::dup2_stderr(&file).context("cannot send standard error to the log")?;
        Ok(Self { saved })
    }
}

impl Drop for StderrTo {
    fn drop(&mut self) {
        let _ = nix::unistd::dup2_stderr(&self.saved);
    }
}

async fn demonstrate(
    args: &Args,
    running: &Running,
    data_dir: &Path,
    example: &Path,
) -> anyhow::Result<ExitCode> {
    let token = running
        .admin_token
        .clone()
        .context("the data directory already has an admin token: give an empty --data-dir")?;
    let client = Client::new(
        &format!("https://{}", running.api),
        &token,
        Some(&running.ca_path),
    )?;
    say(&format!(
        "platform: API on https://{}, the console on https://{}/ui/, state in {}",
        running.api,
        running.api,
        data_dir.display()
    ));
    client
        .create_service(&CreateService {
            name: SERVICE.to_owned(),
            owners: vec!["quickstart@localhost".to_owned()],
            environments: None,
            team: None,
        })
        .await?;
    say(&format!("onboarded service {SERVICE}"));
    // The example only checks that its secret is set; the value is not worth guarding.
    client
        .set_secret(SERVICE, ENV, "API_KEY", "quickstart-example-key")
        .await?;
    say("set secret API_KEY (sealed at rest, injected at start)");

    let repo = discover(example)?;
    let Some(mut services) = valid_services(&repo, example, |_| true) else {
        return Ok(ExitCode::from(EXIT_INVALID));
    };
    let service = services.remove(0);
    let (_, mut request, code) = deploy_request(&repo, &service, ENV, None)?;
    if let Some(code) = code {
        upload_code(&client, SERVICE, ENV, code).await?;
    }
    let first = deploy(&client, &request, "first version").await?;
    let url = format!("https://{SERVICE}.{ENV}.localhost:{}/", running.https_port);
    say(&format!("{SERVICE} serves {url} ({first})"));
    say(&format!(
        "trust the platform's certificate authority: {}\n    curl --cacert {} {url}",
        running.ca_path.display(),
        running.ca_path.display()
    ));
    let cli = log_in_cli(running, data_dir, &token)?;

    // The second version, with a load loop running through the ingress all along.
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let load = start_load(args.clients, running, &counts, &stop)?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    request
        .env_vars
        .insert("GREETING".to_owned(), "hello again".to_owned());
    let started = Instant::now();
    let second = deploy(&client, &request, "second version").await?;
    // The rollout ends when the old revision's instances are gone, drained and stopped.
    wait_retired(running, &first, Duration::from_secs(60)).await;
    let rollout = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    for task in load {
        let _ = task.await;
    }
    let (ok, failed) = (
        counts.ok.load(Ordering::SeqCst),
        counts.failed.load(Ordering::SeqCst),
    );
    say(&format!(
        "rollout {first} → {second} under load ({} clients): {ok} requests, {failed} failed, {:.1} s \
         from deploy to the old revision stopped",
        args.clients,
        rollout.as_secs_f64()
    ));
    if args.exit_after_rollout {
        return Ok(if failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    say(&format!(
        "{SERVICE} keeps serving {url}; Ctrl-C stops the platform. Meanwhile, in another \
         terminal (the CLI is logged in to this platform as its admin in {0}):\n    \
         export RUNWAY_CONFIG={0}\n    \
         runway status -s {SERVICE}                       # URL, traffic, revisions, instances\n    \
         runway logs -s {SERVICE} -f                      # its output, as it comes\n    \
         runway env set GREETING=hi -s {SERVICE} --wait   # a new revision with the variable\n    \
         runway rollback -s {SERVICE} --wait              # back to the revision before\n    \
         runway open -s {SERVICE}                         # in the browser",
        cli.display()
    ));
    tokio::signal::ctrl_c()
        .await
        .context("cannot wait for Ctrl-C")?;
    say("stopping the platform and its instances");
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Writes a CLI configuration for this platform (its API, admin token and CA) into the data
/// directory, mode 0600, and returns its path; the user's own login is left alone.
fn log_in_cli(running: &Running, data_dir: &Path, token: &str) -> anyhow::Result<PathBuf> {
    let path = data_dir.join("cli.json");
    let config = crate::config::Config {
        server: Some(format!("https://{}", running.api)),
        token: Some(token.to_owned()),
        token_env: None,
        ca: Some(running.ca_path.clone()),
    };
    crate::config::save(&path, &config)?;
    Ok(path)
}

/// What the quickstart tells its user, on standard output beside the deployments' events.
fn say(text: &str) {
    crate::print_stdout(&format!("quickstart: {text}\n"));
}

/// Deploys and waits for the deployment to succeed; returns the revision's name.
async fn deploy(
    client: &Client,
    request: &crate::api::DeployRequest,
    what: &str,
) -> anyhow::Result<String> {
    let deployment = client.deploy(SERVICE, ENV, request).await?;
    say(&format!(
        "deploying the {what}: {}",
        deployment.to_revision.as_str()
    ));
    let (deployment, _) = wait_for(client, deployment, Duration::from_secs(120), Output::Text)
        .await
        .map_err(anyhow::Error::from)?;
    succeeded(&deployment)
}

fn succeeded(deployment: &DeploymentView) -> anyhow::Result<String> {
    let revision = &deployment.to_revision;
    if deployment.state != DeploymentStateView::Succeeded {
        bail!(
            "the deployment of {revision} ended {}: {}",
            deployment.state.as_str(),
            deployment.reason.as_deref().unwrap_or("no reason given")
        );
    }
    Ok(revision.clone())
}

/// Clients requesting `/` through the ingress over HTTPS (the platform's CA trusted, SNI and
/// Host the service's name) until `stop`.
fn start_load(
    clients: usize,
    running: &Running,
    counts: &Arc<Counts>,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let ca = reqwest::Certificate::from_pem(running.ca_pem.as_bytes())
        .context("cannot read the platform's CA certificate")?;
    let host = format!("{SERVICE}.{ENV}.localhost");
    let https = running
        .ingress
        .as_ref()
        .and_then(|ingress| ingress.bound.https)
        .context("the quickstart's platform has no HTTPS listener of its own")?;
    let http = reqwest::Client::builder()
        .tls_certs_only([ca])
        .resolve(&host, https)
        .timeout(Duration::from_secs(10))
        .build()
        .context("cannot build the load client")?;
    let url = format!("https://{host}:{}/", https.port());
    Ok((0..clients.max(1))
        .map(|_| {
            let (http, url, counts, stop) = (
                http.clone(),
                url.clone(),
                Arc::clone(counts),
                Arc::clone(stop),
            );
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let ok = match http.get(&url).send().await {
                        Ok(response) => {
                            response.status().is_success() && response.bytes().await.is_ok()
                        }
                        Err(_) => false,
                    };
                    let counter = if ok { &counts.ok } else { &counts.failed };
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect())
}

/// Waits until no instance of `revision` is left, at most `bound`.
async fn wait_retired(running: &Running, revision: &str, bound: Duration) {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        let left = running
            .controller
            .instances(SERVICE, ENV)
            .await
            .map(|all| all.iter().any(|i| i.revision == revision))
            .unwrap_or(true);
        if !left {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Stops and removes every instance the embedded platform started.
async fn stop_instances(runtime: &LocalRuntime) {
    if let Ok(instances) = runtime.instances().await {
        for instance in instances {
            let _ = runtime.instance_remove(&instance.id).await;
        }
    }
}
