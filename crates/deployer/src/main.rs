//! `deployer`: zero-downtime deployments of GitLab Runner managers (GRIT's deployer), over
//! Terraform and GitLab Runner's process wrapper gRPC API (`runway wrapper` or
//! `gitlab-runner wrapper`).
//!
//! ```text
//! deployer up              --tf-target DIR                  terraform init + apply
//! deployer wait-healthy    --tf-target DIR | --tf-target-state-file FILE
//! deployer shutdown        --tf-target DIR [--forceful]
//! deployer wait-terminated --tf-target DIR
//! deployer down            --tf-target DIR                  terraform init + destroy
//! deployer targets         --tf-target DIR -o FILE          Prometheus file_sd
//! deployer version
//! ```
//!
//! Exit codes: `up`/`down` exit with terraform's code; the others 0 on success, 1 any other
//! failure, 2 when the connection attempts (`--retry`) to a wrapper ran out, 3 when `--timeout`
//! ran out. stdout carries terraform's output (stdout and stderr); stderr carries only NDJSON
//! log lines (see `log.rs`), usage errors and panics included.
//!
//! # Files
//!
//! - `terraform.rs`: runs terraform (init, apply, destroy, `show -json`) with its output on stdout.
//! - `managers.rs`: reads `grit_runner_managers` from `show -json` or a state file.
//! - `transport.rs`: the one seam that returns a connected wrapper client, direct or through
//!   `runway-ssh`.
//! - `fleet.rs`: acts on every manager at once (wait healthy, shutdown, wait terminated) with
//!   retries, the timeout and the exit codes.
//! - `targets.rs`: writes Prometheus `file_sd`. `log.rs`: writes NDJSON to stderr.
//!
//! The deployer links `runway-wrapper`'s client, never its server (`runway-wrapper` without its
//! default `server` feature).

mod fleet;
mod log;
mod managers;
mod targets;
mod terraform;
mod transport;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use runway_wrapper::GoDuration;

use crate::managers::{Manager, Source};

const VERSION: &str = env!("CARGO_PKG_VERSION");

const AFTER_HELP: &str = "\
A deployment, blue to green:
  deployer up --tf-target green
  deployer wait-healthy --tf-target green
  deployer shutdown --tf-target blue
  deployer wait-terminated --tf-target blue
  deployer down --tf-target blue

Exit codes: up and down exit with terraform's own code. The others: 0 success, 1 any other
failure, 2 the connection attempts to a wrapper (--retry) ran out, 3 --timeout ran out.
When managers fail differently, the lowest of their codes.

stdout carries terraform's output (its stdout and stderr); stderr carries only NDJSON log
lines: {\"time\", \"level\", \"msg\", \"manager\" where it applies, details}.";

const CONNECT_HELP: &str = "\
The runner managers come from the output grit_runner_managers: a map from a name (used in
logs) to {instance_name, address, wrapper_address, username?, ssh_key_pem?, metrics_address?},
read with `terraform show -json` in --tf-target (after `terraform init` when it has no
.terraform) or from --tf-target-state-file (a state file, or a saved `show -json`).

How each manager's wrapper is reached:
  --direct                          wrapper_address (unix:///path, tcp://host:port) straight
                                    from here, whatever else is set
  any --ssh-... flag, or an address in the output
                                    through SSH to address, then to wrapper_address there
  otherwise                         wrapper_address straight from here

Through SSH, one strategy (upstream's order; giving two is an error):
  --ssh-command CMD                 CMD reaches the wrapper itself; its stdin and stdout are
                                    the gRPC stream (e.g. `ssh ... socat - UNIX-CONNECT:...`)
  --ssh-proxy-command CMD           CMD's stdin and stdout carry the SSH session to address
  --ssh-proxy-jump-address/-username/-key-file
                                    SSH to the bastion first (its own key), then to address
  (none of these)                   SSH straight to address
The user and key: --ssh-username and --ssh-key-file, else the output's username and
ssh_key_pem. Commands are templates run by `sh -c`: {{.Host.Address}}, {{.Host.InstanceName}},
{{.Host.InstanceID}}, {{.Host.Username}}, {{.GRPCServer.Network}}, {{.GRPCServer.Address}}
as upstream, and {{.Host}}, {{.Port}}, {{.WrapperSocket}}. Host keys are checked against
--ssh-known-hosts when given; otherwise any key is accepted and a WARN line says so.

All managers are handled at once. Each connection attempt and each call is bounded by
--wrapper-connection-timeout; between attempts the deployer waits 1s, 2s, 4s... up to 30s
(the default 10 attempts span about 2.5 minutes).";

/// Zero-downtime deployments of GitLab Runner managers over Terraform (GRIT's deployer)
#[derive(Debug, Parser)]
#[command(name = "deployer", version, after_help = AFTER_HELP)]
struct Cli {
    /// Add debug-level log lines
    #[arg(long, global = true)]
    debug: bool,

    /// How log lines are written on stderr: `json` (NDJSON, as upstream's deployer writes
    /// them) or `text` (a line a person reads, as in a CI job's log)
    #[arg(long, global = true, value_name = "FORMAT", default_value = "json",
          value_parser = ["json", "text"])]
    log_format: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create or update a deployment version: terraform init, then apply -auto-approve
    Up(TerraformArgs),
    /// Wait until every runner manager's process is running (or already shutting down)
    #[command(after_help = CONNECT_HELP)]
    WaitHealthy(WaitArgs),
    /// Ask every runner manager's process to shut down: gracefully (its jobs finish first)
    /// or, with --forceful, at once
    #[command(after_help = CONNECT_HELP)]
    Shutdown(ShutdownArgs),
    /// Wait until every runner manager's process has stopped
    #[command(after_help = CONNECT_HELP)]
    WaitTerminated(WaitArgs),
    /// Remove a deployment version: terraform init, then destroy -auto-approve
    Down(TerraformArgs),
    /// Write the runner managers' metrics endpoints as a Prometheus file_sd file
    Targets(TargetsArgs),
    /// Print the version, the commit and the target it was built for
    Version,
}

#[derive(Debug, Args)]
struct TerraformArgs {
    /// The deployment version's Terraform directory
    #[arg(long = "tf-target", visible_alias = "target", value_name = "DIR")]
    tf_target: PathBuf,

    /// The terraform binary (or a compatible one, such as tofu) [default: terraform on PATH,
    /// else tofu]
    #[arg(long, value_name = "PATH")]
    tf_exec_path: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[group(id = "state", required = true, multiple = false, args = ["tf_target", "tf_target_state_file"])]
struct StateArgs {
    /// The deployment version's Terraform directory, read with `terraform show -json`
    #[arg(long = "tf-target", visible_alias = "target", value_name = "DIR")]
    tf_target: Option<PathBuf>,

    /// A Terraform state file (or a saved `terraform show -json`) to read instead
    #[arg(long, value_name = "FILE")]
    tf_target_state_file: Option<PathBuf>,

    /// The terraform binary (or a compatible one, such as tofu) [default: terraform on PATH,
    /// else tofu]
    #[arg(long, value_name = "PATH")]
    tf_exec_path: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ConnectArgs {
    /// Connection attempts to each wrapper before giving up (exit code 2)
    #[arg(long, value_name = "COUNT", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..))]
    retry: u32,

    /// Bound of one connection attempt and of one call (a Go duration: 30s, 2m, 1h30m)
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    wrapper_connection_timeout: GoDuration,

    /// Reach every wrapper_address straight from here, never through SSH
    #[arg(long)]
    direct: bool,

    /// SSH username on the runner managers (wins over the output's username)
    #[arg(long, value_name = "NAME")]
    ssh_username: Option<String>,

    /// SSH private key file for the runner managers (wins over the output's ssh_key_pem)
    #[arg(long, value_name = "FILE")]
    ssh_key_file: Option<PathBuf>,

    /// known_hosts file to verify the SSH hosts' keys against
    #[arg(long, value_name = "FILE")]
    ssh_known_hosts: Option<PathBuf>,

    /// Bastion host:port to jump through (ProxyJump)
    #[arg(long, value_name = "HOST:PORT")]
    ssh_proxy_jump_address: Option<String>,

    /// Username on the bastion
    #[arg(long, value_name = "NAME")]
    ssh_proxy_jump_username: Option<String>,

    /// Private key file for the bastion
    #[arg(long, value_name = "FILE")]
    ssh_proxy_jump_key_file: Option<PathBuf>,

    /// Command whose stdin and stdout carry the SSH connection (ProxyCommand), templated with
    /// the manager's details as upstream
    #[arg(long, value_name = "COMMAND")]
    ssh_proxy_command: Option<String>,

    /// Command whose stdin and stdout reach the wrapper's socket itself; templated as
    /// --ssh-proxy-command
    #[arg(long, value_name = "COMMAND")]
    ssh_command: Option<String>,
}

impl ConnectArgs {
    fn transport(&self) -> transport::Settings {
        transport::Settings {
            force_direct: self.direct,
            ssh: transport::SshSettings {
                username: self.ssh_username.clone(),
                key_file: self.ssh_key_file.clone(),
                known_hosts: self.ssh_known_hosts.clone(),
                proxy_jump_address: self.ssh_proxy_jump_address.clone(),
                proxy_jump_username: self.ssh_proxy_jump_username.clone(),
                proxy_jump_key_file: self.ssh_proxy_jump_key_file.clone(),
                proxy_command: self.ssh_proxy_command.clone(),
                command: self.ssh_command.clone(),
            },
        }
    }
}

#[derive(Debug, Args)]
struct WaitArgs {
    #[command(flatten)]
    state: StateArgs,

    #[command(flatten)]
    connect: ConnectArgs,

    /// Bound of the whole wait, connecting included (exit code 3)
    #[arg(long, value_name = "DURATION", default_value = "30m")]
    timeout: GoDuration,
}

#[derive(Debug, Args)]
struct ShutdownArgs {
    #[command(flatten)]
    state: StateArgs,

    #[command(flatten)]
    connect: ConnectArgs,

    /// Stop at once (SIGTERM to the runner process), interrupting its jobs
    #[arg(long)]
    forceful: bool,
}

#[derive(Debug, Args)]
struct TargetsArgs {
    #[command(flatten)]
    state: StateArgs,

    /// The file_sd file to write (replaced whole, atomically); - for stdout
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,

    /// Metrics port on the host of a manager's address, when the output has no
    /// metrics_address
    #[arg(long, value_name = "PORT", default_value_t = targets::DEFAULT_METRICS_PORT)]
    metrics_port: u16,

    /// A label for every target, such as deployment=blue (repeatable)
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_label)]
    label: Vec<(String, String)>,
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    targets::parse_label(text).map_err(|error| error.to_string())
}

fn main() {
    std::panic::set_hook(Box::new(|info| {
        log::error(format!("panic: {info}")).emit();
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // --help and --version go to stdout; a usage error is an NDJSON line too.
            if !error.use_stderr() {
                print!("{error}");
                std::process::exit(0);
            }
            log::error(error.render().to_string().trim_end())
                .field("kind", "usage")
                .emit();
            std::process::exit(1);
        }
    };
    log::set_debug(cli.debug);
    log::set_text(cli.log_format == "text");
    let code = match run(cli.command) {
        Ok(code) => code,
        Err(error) => {
            log::error(runway_log::chain(error.as_ref())).emit();
            1
        }
    };
    std::process::exit(code);
}

fn run(command: Command) -> anyhow::Result<i32> {
    match command {
        Command::Up(args) => up_or_down(&args, false),
        Command::Down(args) => up_or_down(&args, true),
        Command::WaitHealthy(args) => {
            let action = fleet::Action::WaitHealthy;
            act(&args.state, &args.connect, Some(args.timeout.0), action)
        }
        Command::WaitTerminated(args) => {
            let action = fleet::Action::WaitTerminated;
            act(&args.state, &args.connect, Some(args.timeout.0), action)
        }
        Command::Shutdown(args) => {
            let action = fleet::Action::Shutdown {
                forceful: args.forceful,
            };
            act(&args.state, &args.connect, None, action)
        }
        Command::Targets(args) => write_targets(&args),
        Command::Version => {
            println!("deployer {VERSION}");
            println!("commit: {}", runway_build::commit().unwrap_or("unknown"));
            println!("date: {}", runway_build::date().unwrap_or("unknown"));
            println!("target: {}", env!("DEPLOYER_BUILD_TARGET"));
            Ok(0)
        }
    }
}

fn up_or_down(args: &TerraformArgs, destroy: bool) -> anyhow::Result<i32> {
    let exec = terraform::exec_path(args.tf_exec_path.as_deref())?;
    Ok(terraform::apply_or_destroy(
        &exec,
        &args.tf_target,
        destroy,
    )?)
}

fn read_managers(state: &StateArgs) -> anyhow::Result<Vec<Manager>> {
    let (json, source) = match (&state.tf_target, &state.tf_target_state_file) {
        (_, Some(file)) => {
            let json = std::fs::read(file).with_context(|| {
                format!("cannot read --tf-target-state-file {}", file.display())
            })?;
            (json, Source::File(file.clone()))
        }
        (Some(dir), None) => {
            let exec = terraform::exec_path(state.tf_exec_path.as_deref())?;
            (terraform::show_json(&exec, dir)?, Source::Show(dir.clone()))
        }
        (None, None) => anyhow::bail!("give --tf-target DIR or --tf-target-state-file FILE"),
    };
    let managers = managers::parse(&json, &source)?;
    log::debug(format!(
        "read {} runner manager(s) from {source}",
        managers.len()
    ))
    .emit();
    Ok(managers)
}

fn act(
    state: &StateArgs,
    connect: &ConnectArgs,
    timeout: Option<Duration>,
    action: fleet::Action,
) -> anyhow::Result<i32> {
    let managers = read_managers(state)?;
    let settings = fleet::Settings {
        retry: connect.retry,
        connection_timeout: connect.wrapper_connection_timeout.0,
        timeout,
        transport: connect.transport(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    Ok(runtime.block_on(fleet::run(managers, action, settings)))
}

fn write_targets(args: &TargetsArgs) -> anyhow::Result<i32> {
    let managers = read_managers(&args.state)?;
    let document = targets::file_sd(&managers, args.metrics_port, &args.label)?;
    let mut text = serde_json::to_string_pretty(&document).context("cannot encode file_sd")?;
    text.push('\n');
    if args.output == Path::new("-") {
        print!("{text}");
    } else {
        targets::write_atomically(&args.output, text.as_bytes())
            .with_context(|| format!("cannot write {}", args.output.display()))?;
        log::info(format!(
            "wrote {} target(s) to {}",
            managers.len(),
            args.output.display()
        ))
        .emit();
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn the_cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn target_is_an_alias_and_durations_are_go_durations() {
        let cli = Cli::try_parse_from([
            "deployer",
            "wait-terminated",
            "--target",
            "blue",
            "--timeout",
            "1h30m",
            "--retry",
            "3",
        ])
        .unwrap();
        let Command::WaitTerminated(args) = cli.command else {
            panic!("{cli:?}")
        };
        assert_eq!(args.state.tf_target, Some(PathBuf::from("blue")));
        assert_eq!(args.timeout.0, Duration::from_secs(5400));
        assert_eq!(args.connect.retry, 3);
        assert_eq!(
            args.connect.wrapper_connection_timeout.0,
            Duration::from_secs(30)
        );
        assert!(
            Cli::try_parse_from([
                "deployer",
                "shutdown",
                "--tf-target",
                "a",
                "--tf-target-state-file",
                "b"
            ])
            .is_err()
        );
        assert!(Cli::try_parse_from(["deployer", "wait-healthy"]).is_err());
        assert!(
            Cli::try_parse_from([
                "deployer",
                "wait-healthy",
                "--target",
                "a",
                "--timeout",
                "10"
            ])
            .is_err()
        );
    }
}
