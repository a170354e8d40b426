//! `runway run` and `runway local ps`, `logs` and `stop`: a service's instances on this machine, through the
//! local runtime. Each instance has a supervisor process of its own (`runway supervise`,
//! hidden), so instances keep running when the command that started them ends.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use runway_manifest::Service;
use runway_runtime::logs::{Follower, LogLine};
use runway_runtime::service::{InstanceOptions, instance_spec};
use runway_runtime::status::{InstanceStatus, Phase};
use runway_runtime::{Credentials, LocalConfig, LocalRuntime, Runtime};

use crate::repo::{discover, display, is_named, valid_services};
use crate::{EXIT_INVALID, Output, RepoArg, print_stdout};

/// Where instances' state lives.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StateArg {
    /// Directory holding the instances' state (sockets, status, output). Defaults to
    /// /var/lib/runway for root, else $XDG_STATE_HOME/runway or ~/.local/state/runway.
    #[arg(long, env = "RUNWAY_STATE_DIR", value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Environment whose overrides and variables apply (`runway-<env>.yml`, `env-<env>.yml`).
    #[arg(short, long)]
    env: Option<String>,
    /// The service to run, by name or id, when the repository has several.
    #[arg(short, long)]
    service: Option<String>,
    /// The image to run, instead of the manifest's `spec.image`.
    #[arg(long)]
    image: Option<String>,
    /// Instance id; default `<service>-<env>` (`<service>` without an environment).
    #[arg(long)]
    id: Option<String>,
    /// Start the instance and return, leaving it running.
    #[arg(short, long)]
    detach: bool,
    #[command(flatten)]
    images: ImageArgs,
    #[command(flatten)]
    state: StateArg,
}

/// How images are pulled and run.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ImageArgs {
    /// A registry (`host` or `host:port`, as in the image reference) reached over plain HTTP.
    /// Every other registry is HTTPS only. Repeat for several.
    #[arg(long, value_name = "HOST[:PORT]")]
    insecure_registry: Vec<String>,
    /// Log in to the registry as this user, with the password read from standard input.
    /// Without it, credentials come from $DOCKER_CONFIG/config.json or ~/.docker/config.json.
    #[arg(long, value_name = "USER", requires = "registry_password_stdin")]
    registry_username: Option<String>,
    /// Read the registry password (or token) from standard input.
    #[arg(long, requires = "registry_username")]
    registry_password_stdin: bool,
    /// The OCI runtime that runs containers: runc, or crun (a name on PATH or a path).
    #[arg(long, value_name = "PROGRAM", default_value = "runc")]
    oci_runtime: PathBuf,
}

#[derive(Debug, clap::Args)]
pub(crate) struct PsArgs {
    /// Print a JSON array of statuses instead of a table.
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    state: StateArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct LogsArgs {
    /// The instance, as `runway local ps` lists it.
    id: String,
    /// Lines to show from the end.
    #[arg(short = 'n', long, default_value_t = 100)]
    lines: usize,
    /// Keep printing new lines until the instance ends or Ctrl-C.
    #[arg(short, long)]
    follow: bool,
    #[command(flatten)]
    state: StateArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct StopArgs {
    /// The instances, as `runway local ps` lists them.
    #[arg(required = true)]
    ids: Vec<String>,
    /// Keep them listed, stopped, with their output (for `runway local logs`); by default a
    /// stopped instance is removed, its status and output with it.
    #[arg(long)]
    keep: bool,
    /// The default now; accepted for scripts written before it was.
    #[arg(long, hide = true, conflicts_with = "keep")]
    remove: bool,
    #[command(flatten)]
    state: StateArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct SuperviseArgs {
    /// Be the instance's watchdog, started by its supervisor, rather than its supervisor.
    #[arg(long, hide = true)]
    watchdog: bool,
    /// The instance's state directory. The instance spec is read as JSON from stdin.
    state_dir: PathBuf,
}

pub(crate) fn supervise(args: &SuperviseArgs) -> ExitCode {
    let code = if args.watchdog {
        runway_runtime::supervisor::watchdog_main(&args.state_dir)
    } else {
        runway_runtime::supervisor::main(&args.state_dir)
    };
    if code == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn runtime(state: &StateArg) -> anyhow::Result<LocalRuntime> {
    Ok(LocalRuntime::new(local_config(state)?))
}

fn runtime_for_images(state: &StateArg, images: &ImageArgs) -> anyhow::Result<LocalRuntime> {
    let mut config = local_config(state)?;
    config.pull.insecure_registries = images.insecure_registry.clone();
    config.oci_runtime = images.oci_runtime.clone();
    if let Some(username) = &images.registry_username {
        let mut password = String::new();
        std::io::stdin()
            .read_line(&mut password)
            .context("cannot read the registry password from standard input")?;
        config.pull.credentials = Credentials::Basic {
            username: username.clone(),
            password: password.trim_end_matches(['\r', '\n']).to_owned(),
        };
    }
    Ok(LocalRuntime::new(config))
}

fn local_config(state: &StateArg) -> anyhow::Result<LocalConfig> {
    let root = match &state.state_dir {
        Some(dir) => dir.clone(),
        None => default_state_dir()?,
    };
    config_in(root)
}

fn config_in(root: PathBuf) -> anyhow::Result<LocalConfig> {
    Ok(LocalConfig::new(
        root,
        runway_server::driver::local::supervisor_command()?,
    ))
}

pub(crate) fn default_state_dir() -> anyhow::Result<PathBuf> {
    if is_root() {
        return Ok(PathBuf::from("/var/lib/runway"));
    }
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("runway"));
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/state/runway")),
        None => bail!("no state directory: set --state-dir or RUNWAY_STATE_DIR"),
    }
}

/// `/proc/self` belongs to the effective user.
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn tokio() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

pub(crate) fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let repo = discover(&args.repo.path)?;
    let wanted = |service: &Service| is_named(service, args.service.as_deref());
    let Some(mut services) = valid_services(&repo, &args.repo.path, wanted) else {
        return Ok(ExitCode::from(EXIT_INVALID));
    };
    if services.len() > 1 {
        bail!(
            "{} holds several services: choose one with --service",
            display(&repo.runway_dir)
        );
    }
    let Some(service) = services.pop() else {
        bail!(
            "no service named `{}` in {}",
            args.service.as_deref().unwrap_or_default(),
            display(&repo.runway_dir)
        );
    };
    let config = service.config(args.env.as_deref())?;
    let base_dir = repo
        .runway_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let id = args.id.clone().unwrap_or_else(|| match &args.env {
        Some(env) => format!("{}-{env}", config.dns_name),
        None => config.dns_name.clone(),
    });
    // Until the control plane keeps secrets, a local run takes them from the caller's
    // environment, by name.
    let mut secret_env = BTreeMap::new();
    for name in &config.secrets {
        match std::env::var(name) {
            Ok(value) => {
                secret_env.insert(name.clone(), value);
            }
            Err(_) => eprintln!(
                "warning: secret {name} is not set: export {name} to give the instance a value"
            ),
        }
    }
    let options = InstanceOptions {
        id: id.clone(),
        revision: format!("{}-local", config.dns_name),
        image: args.image.clone(),
        base_dir: std::path::absolute(&base_dir).unwrap_or(base_dir),
        secret_env,
    };
    let mut spec = instance_spec(&config, &options)?;
    // A developer's own machine: a plain process sees the environment `runway run` has (its
    // virtualenv, its PATH); the control plane's instances never do.
    spec.inherit_env = true;
    // The app gets the port its manifest says it listens on when nothing else has it, so
    // `PORT` and `container_port` agree; else a free one, said so.
    if let (Some(0), Some(wanted)) = (spec.port, spec.container_port) {
        if std::net::TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, wanted)).is_ok() {
            spec.port = Some(wanted);
            spec.env.insert("PORT".to_owned(), wanted.to_string());
        } else {
            eprintln!(
                "note: port {wanted} (the manifest's container_port) is taken on this machine, \
                 so the instance gets another in PORT"
            );
        }
    }
    let runtime = runtime_for_images(&args.state, &args.images)?;
    tokio()?.block_on(async {
        let status = runtime.instance_ensure(spec).await?;
        eprintln!("{}", describe(&status));
        if args.detach {
            eprintln!(
                "instance {id} runs in the background: `runway local logs -f {id}`, `runway local stop {id}`"
            );
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!("showing its output; Ctrl-C stops it");
        let exit = follow(&runtime, &id, Some(&status), true).await?;
        Ok(exit)
    })
}

/// Prints the instance's new output and status changes until it ends, or until Ctrl-C (which
/// stops it when `stop_on_interrupt`).
async fn follow(
    runtime: &LocalRuntime,
    id: &str,
    shown: Option<&InstanceStatus>,
    stop_on_interrupt: bool,
) -> anyhow::Result<ExitCode> {
    let mut status = runtime.watch(id).await?;
    let mut follower = Follower::from_end(&runtime.instance_dir(id));
    let current = status.borrow().clone();
    if shown.is_none_or(|shown| (shown.phase, shown.ready) != (current.phase, current.ready)) {
        eprintln!("{}", describe(&current));
    }
    if current.phase.is_final() {
        return Ok(exit_code(&current));
    }
    let mut last_phase = current.phase;
    let mut last_ready = current.ready;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                print_lines(&follower.poll().unwrap_or_default());
            }
            changed = status.changed() => {
                let current = status.borrow_and_update().clone();
                if current.phase != last_phase || current.ready != last_ready {
                    eprintln!("{}", describe(&current));
                    last_phase = current.phase;
                    last_ready = current.ready;
                }
                if changed.is_err() || current.phase.is_final() {
                    print_lines(&follower.poll().unwrap_or_default());
                    return Ok(exit_code(&current));
                }
            }
            _ = &mut interrupted => {
                if !stop_on_interrupt {
                    return Ok(ExitCode::SUCCESS);
                }
                eprintln!("stopping {id}");
                let stopped = runtime.instance_stop(id).await?;
                print_lines(&follower.poll().unwrap_or_default());
                eprintln!("{}", describe(&stopped));
                // Stopped on purpose: nothing is left listed in `runway local ps`.
                runtime.instance_remove(id).await?;
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
}

fn exit_code(status: &InstanceStatus) -> ExitCode {
    match status.phase {
        Phase::Failed => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    }
}

fn print_lines(lines: &[LogLine]) {
    let mut out = String::new();
    for line in lines {
        out.push_str(&line.text);
        if !line.partial {
            out.push('\n');
        }
    }
    if !out.is_empty() {
        print_stdout(&out);
    }
}

/// One line about an instance, for people.
fn describe(status: &InstanceStatus) -> String {
    let mut text = format!("{}: {}", status.id, status.phase.as_str());
    if status.phase == Phase::Running {
        text.push_str(if status.ready {
            ", ready"
        } else {
            ", not ready"
        });
    }
    if let Some(address) = status.reached_at() {
        text.push_str(&format!(", at {address}"));
    }
    if let Some(pid) = status.pid {
        text.push_str(&format!(", pid {pid}"));
    }
    text.push_str(&format!(" ({})", status.message));
    if matches!(status.phase, Phase::CrashLoop | Phase::Failed)
        && let Some(exit) = &status.last_exit
    {
        for line in exit.last_output.iter().rev().take(5).rev() {
            text.push_str(&format!("\n  | {line}"));
        }
    }
    text
}

pub(crate) fn ps(args: &PsArgs) -> anyhow::Result<ExitCode> {
    let runtime = runtime(&args.state)?;
    let statuses = tokio()?.block_on(runtime.instances())?;
    match args.output {
        Output::Json => print_stdout(&format!("{}\n", serde_json::to_string_pretty(&statuses)?)),
        Output::Text => {
            let mut rows = vec![[
                "ID".to_owned(),
                "PHASE".to_owned(),
                "READY".to_owned(),
                "ADDRESS".to_owned(),
                "PID".to_owned(),
                "RESTARTS".to_owned(),
                "MESSAGE".to_owned(),
            ]];
            for s in &statuses {
                rows.push([
                    s.id.clone(),
                    s.phase.as_str().to_owned(),
                    if s.ready { "yes" } else { "no" }.to_owned(),
                    s.reached_at()
                        .map(|a| a.to_string())
                        .unwrap_or_else(|| "-".to_owned()),
                    s.pid
                        .map(|p| p.to_string())
                        .unwrap_or_else(|| "-".to_owned()),
                    s.restarts.to_string(),
                    s.message.clone(),
                ]);
            }
            print_stdout(&table(&rows));
            for s in statuses.iter().filter(|s| s.phase.is_final()) {
                eprintln!(
                    "{} has ended and is kept with its output: `runway local logs {0}` shows \
                     it, `runway local stop {0}` removes it",
                    s.id
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:width$}  "));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub(crate) fn logs(args: &LogsArgs) -> anyhow::Result<ExitCode> {
    let runtime = runtime(&args.state)?;
    tokio()?.block_on(async {
        print_lines(&runtime.logs(&args.id, args.lines).await?);
        if args.follow {
            return follow(&runtime, &args.id, None, false).await;
        }
        Ok(ExitCode::SUCCESS)
    })
}

pub(crate) fn stop(args: &StopArgs) -> anyhow::Result<ExitCode> {
    let runtime = runtime(&args.state)?;
    tokio()?.block_on(async {
        for id in &args.ids {
            let status = runtime.instance_stop(id).await?;
            eprintln!("{}", describe(&status));
            if !args.keep {
                runtime.instance_remove(id).await?;
                eprintln!("{id}: removed");
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}
