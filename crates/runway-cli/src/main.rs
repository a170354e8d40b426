//! `runway`: the command line of the Runway platform.
//!
//! This file holds the commands and their help (`schema` and `completion` inline; `wrapper`
//! and the hidden `ingress` run `runway-wrapper` and `runway-ingress`); the
//! `runway-supervisor` binary is `src/bin/`.
//!
//! # Files
//!
//! - `repo.rs`: finds a repository's services on disk. `init.rs`, `validate.rs`, `render.rs`:
//!   their commands. `local.rs`: `run`, `local ps|logs|stop` and the hidden `supervise`.
//! - `platform.rs`: the control plane's commands (`login`, `services`, `deploy`, `status`,
//!   `rollout`, `tokens`, ...); `everyday.rs`: `open`, `env`, `audit` and `top`. Both go through
//!   `api.rs`, the typed client (the API's own `runway_api::types`), and `config.rs`, the saved
//!   login. `terminal.rs`: text tenants control, made safe to print.
//! - `cells.rs`: `runway cells token decode|encode` and `cells route`. `router.rs`:
//!   `runway router`, cell routing by `runway_server::cells` on the ingress's core.
//!   `domains.rs`: `runway domains add|list|remove`. `maintenance.rs`: `runway maintenance`.
//! - `server.rs`: `runway server`'s arguments and a thin main over `runway-server` (whose `//!`
//!   docs list its files): `check-config`, `migrate-store`, `admin-token`, then `start`.
//!   `quickstart.rs`: `runway quickstart`, `runway_server::start` in-process.
//! - `tests/`: each file says what it covers. Most drive the built `runway`
//!   (`CARGO_BIN_EXE_runway`), which the server runs again as `runway ingress` and
//!   `runway supervise`, so they stay here; `tests/support/` is the real server they share.
//!   `runway-server`'s own tests are in its `tests/server/`.
//! - `benches/`: `platform.rs` and `delivery.rs` on a real server, `start.rs` the local runtime
//!   alone, `egress.rs` the firewall's cost (as root).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

mod api;
mod build;
mod cells;
mod config;
mod domains;
mod everyday;
mod init;
mod inventory;
mod local;
mod maintenance;
mod platform;
mod preview;
mod quickstart;
mod render;
mod repo;
mod router;
mod server;
mod sso;
mod team;
mod terminal;
mod validate;

/// Runway turns `.runway/runway.yml` into a running, observable, safely rolled-out service.
#[derive(Debug, Parser)]
#[command(
    name = "runway",
    version = runway_build::LINE,
    propagate_version = true,
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create `.runway/runway.yml` for a new service, with comments.
    ///
    /// Asks for the name, port and image when run in a terminal; takes the flags (or their
    /// defaults) without asking otherwise.
    Init(init::Args),
    /// Check every manifest in a repository and report every mistake at once.
    ///
    /// Finds `.runway/runway.yml`, its `runway-<env>.yml` overrides and `env-<env>.yml`
    /// variables, and `.runway/<service-id>/` for further services. Exit code 0 when valid
    /// (warnings allowed), 1 when invalid, 2 on a usage error.
    Validate(validate::Args),
    /// Render a service to Kubernetes, Knative (Cloud Run) or a Helm chart.
    ///
    /// Prints the files to standard output, or writes them under `-o DIR`. The output is
    /// deterministic: the same manifest gives the same bytes.
    Render(render::Args),
    /// Print the manifest's JSON Schema (draft 2020-12).
    ///
    /// Point an editor at it for completion and inline errors, e.g. with a first line
    /// `# yaml-language-server: $schema=./schemas/runway-v1.json`.
    Schema,
    /// Run a service on this machine: start an instance and show its output.
    ///
    /// The instance gets a free port in `PORT`, the manifest's variables, `K_SERVICE` and
    /// `K_REVISION`; its probes are checked and it is restarted with backoff when it ends. It
    /// runs under a supervisor process of its own, so it keeps running if this command is
    /// killed: `runway local ps` finds it again. Ctrl-C stops it (its stop signal, then SIGKILL
    /// after its grace period). With `--detach`, returns once it has started. Secrets the
    /// manifest names are taken from this command's environment.
    Run(local::RunArgs),
    /// The instances on this machine (started by `runway run`): list, output, stop.
    #[command(subcommand)]
    Local(LocalCommand),
    /// Start a platform on this machine and watch it roll out a service without failing a
    /// request.
    ///
    /// Starts an embedded control plane (API, store, controller, ingress, local runtime) in a
    /// temporary directory (or --data-dir), onboards the bundled example service, deploys it
    /// as a plain process and prints its HTTPS URL and the certificate authority to trust;
    /// then deploys a second version while clients keep requesting it through the ingress,
    /// and reports how many requests failed (the answer should be 0). Keeps serving until
    /// Ctrl-C, or exits with --exit-after-rollout (0 when no request failed). The platform's
    /// instances are stopped when it exits.
    Quickstart(quickstart::Args),
    /// Run the control plane on this machine: the API, the store, the controller, the ingress
    /// and the local runtime, in one process.
    ///
    /// State (the SQLite store, the master key that seals secrets, the certificate authority,
    /// the instances) lives in --data-dir. The first start prints an admin token once. SIGTERM
    /// or Ctrl-C stops the servers; instances keep running under their supervisors and the
    /// next start adopts them.
    Server(server::Args),
    /// Log in to a Runway control plane: check the token, then save the server, token and CA.
    ///
    /// The token is checked with the server (`GET /v1/whoami`) before anything is saved. The
    /// settings go to $RUNWAY_CONFIG, else ~/.config/runway/config.json (mode 0600). The
    /// environment variables RUNWAY_SERVER, RUNWAY_TOKEN and RUNWAY_CA override the file (for
    /// CI). `--token -` reads the token from standard input; it is never printed.
    Login(platform::LoginArgs),
    /// Register, list and decommission services on the control plane.
    #[command(subcommand)]
    Services(platform::ServicesCommand),
    /// The platform's inventory as a document: validate it, see what it would change, apply
    /// it (admin).
    ///
    /// The document lists the services onboarded (upstream's `name`, `project_id`, `members`,
    /// `groups`, `regions` with Runway's `owners`, `environments`, `allow_processes`); kept
    /// in a repository, it is changed through review and applied from CI.
    #[command(subcommand)]
    Inventory(inventory::InventoryCommand),
    /// Deploy the repository's service to an environment of the control plane.
    ///
    /// Validates `.runway/` first (as `runway validate`), then sends the manifest merged for the
    /// environment and the variables of `env-<env>.yml` (secret values never leave the
    /// server); for a process service, first uploads a snapshot of the code (`.gitignore` and
    /// `.runwayignore` honoured; skipped when the server has it). The control plane records an
    /// immutable revision and rolls it out. With `--wait`, shows the rollout's events as they
    /// happen and ends with the service's URL. Exit codes: 0 started (or succeeded, with
    /// --wait), 1 failed or rolled back (or an error from the server), 2 usage or invalid
    /// settings, 3 --timeout ran out, 4 the server could not be reached while waiting.
    Deploy(platform::DeployArgs),
    /// Show a service in an environment: its URL, traffic, revisions and instances.
    Status(platform::TargetArgs),
    /// Open a service's URL in the browser (`$BROWSER`, else xdg-open), or print it.
    Open(everyday::OpenArgs),
    /// Set, unset and list a service's environment variables: each change is a new revision
    /// of the one serving, rolled out as a deploy is.
    #[command(subcommand)]
    Env(everyday::EnvCommand),
    /// List a service's revisions in an environment, newest first.
    Revisions(platform::TargetArgs),
    /// Move traffic back to an earlier revision (nothing is rebuilt).
    Rollback(platform::RollbackArgs),
    /// Deploy the revision serving in one environment to another: same manifest, image digest
    /// and variables.
    Promote(platform::PromoteArgs),
    /// Steer the progressive rollout in progress (`regional_rollout`, `runway_canary`,
    /// `runway_blue_green`): pause, resume, abort (all traffic back to the stable revision)
    /// or promote (to 100 % once ready; blue/green switches now). With `--wait`, follows the
    /// deployment to its end.
    Rollout(platform::RolloutArgs),
    /// Show a deployment's events: by id, or the latest of a service in an environment.
    Events(platform::EventsArgs),
    /// Show a service's output on the control plane (all its instances, or one), with
    /// `--follow` as it comes. For an instance on this machine: `runway local logs`.
    Logs(platform::LogsArgs),
    /// Set, list and unset a service's secrets in an environment (values are never shown).
    #[command(subcommand)]
    Secrets(platform::SecretsCommand),
    /// API tokens: create (an admin any; a service's maintainer tokens on it), list, revoke.
    #[command(subcommand)]
    Tokens(platform::TokensCommand),
    /// Teams: people (by name, or a sign-in provider's groups) with a role on every service
    /// the team owns.
    #[command(subcommand)]
    Team(team::TeamCommand),
    /// Custom domains: route a domain to a service's environment, with a certificate from
    /// the server's ACME directory; list them with their certificates' state; remove them.
    #[command(subcommand)]
    Domains(domains::DomainsCommand),
    /// Maintenance: answer a service's requests with a 503 and a message (its instances keep
    /// running), letting listed networks through; serve them again; show whether it is on.
    #[command(subcommand)]
    Maintenance(maintenance::MaintenanceCommand),
    /// Preview environments (made by `runway deploy --preview NAME`): list them with their
    /// URLs and expiry, or stop one.
    #[command(subcommand)]
    Preview(preview::PreviewCommand),
    /// The audit log (admin only): who changed what, when; the last 50 entries by default.
    Audit(everyday::AuditArgs),
    /// Every routed revision's traffic over the last minutes (requests per second, 5xx
    /// share, p99), busiest first, refreshed until Ctrl-C; `--once` prints it once.
    Top(everyday::TopArgs),
    /// Cell routing for CI runners: routable tokens, and where the router would send a
    /// request.
    #[command(subcommand)]
    Cells(cells::CellsCommand),
    /// Run a reverse proxy in front of cells (GitLab's HTTP router, for CI runners).
    ///
    /// Each request is placed by the rules (GitLab's HTTP router format, unchanged: a
    /// runner's routable token in `RUNNER-TOKEN`, a session cookie, a path,
    /// or an older runner's `token` in a JSON body) and the topology, and streamed to its
    /// cell: long polls held, traces and artifacts of any size passed through, never
    /// buffered. A request no rule places, or whose cell does not exist, goes to the legacy
    /// cell. The cell is told `X-Gitlab-Http-Router-Rule-Action` and `-Type`. `runway cells
    /// route` explains a decision without sending anything.
    Router(router::Args),
    /// Print a shell completion script: `runway completion bash > /etc/bash_completion.d/runway`,
    /// `runway completion zsh > "${fpath[1]}/_runway"`, `runway completion fish >
    /// ~/.config/fish/completions/runway.fish`.
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Run a command and serve GitLab Runner's process wrapper gRPC API for it.
    ///
    /// Wire-compatible with `gitlab-runner wrapper`: the `deployer` (or any client built from
    /// the same proto) checks its status and asks it to shut the command down gracefully
    /// (SIGQUIT: let jobs finish) or forcefully (SIGTERM, then SIGKILL after the termination
    /// timeout). Exits with the command's exit code.
    Wrapper(runway_wrapper::WrapperArgs),
    /// Supervise one instance (started by the runtime, not by hand).
    #[command(hide = true)]
    Supervise(local::SuperviseArgs),
    /// The ingress in a process of its own (started by `runway server`, when no
    /// `runway-ingress` is installed beside `runway`).
    #[command(hide = true)]
    Ingress(runway_ingress::daemon::Args),
}

/// `runway local ...`: instances on this machine.
#[derive(Debug, Subcommand)]
enum LocalCommand {
    /// List the instances on this machine with their phase, readiness, port and restarts.
    Ps(local::PsArgs),
    /// Print an instance's output (stdout and stderr, with `--follow` as it comes).
    Logs(local::LogsArgs),
    /// Stop instances: their stop signal, their grace period, then SIGKILL.
    Stop(local::StopArgs),
}

/// How results are printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
enum Output {
    /// For people.
    #[default]
    Text,
    /// One JSON document, for scripts.
    Json,
}

/// Exit codes, as documented in `--help`.
const EXIT_INVALID: u8 = 1;
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let json = wants_json(&matches);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // Where library code's log events go; `runway ingress` sets its own up.
    let log_format = match &cli.command {
        Command::Server(args) => Some(args.log_format),
        Command::Router(args) => Some(args.log_format),
        // They set their own up, each with its `--log-format`.
        Command::Wrapper(_) | Command::Ingress(_) => None,
        _ => Some(runway_log::LogFormat::Text),
    };
    if let Some(format) = log_format {
        runway_log::init(format);
    }
    let result = match cli.command {
        Command::Init(args) => init::run(&args),
        Command::Validate(args) => validate::run(&args),
        Command::Render(args) => render::run(&args),
        Command::Run(args) => local::run(&args),
        Command::Local(LocalCommand::Ps(args)) => local::ps(&args),
        Command::Local(LocalCommand::Logs(args)) => local::logs(&args),
        Command::Local(LocalCommand::Stop(args)) => local::stop(&args),
        Command::Login(args) => platform::login(&args),
        Command::Services(command) => platform::services(&command),
        Command::Deploy(args) => platform::deploy(&args),
        Command::Status(args) => platform::status(&args),
        Command::Open(args) => everyday::open(&args),
        Command::Env(command) => everyday::env(&command),
        Command::Audit(args) => everyday::audit(&args),
        Command::Top(args) => everyday::top(&args),
        Command::Cells(command) => cells::run(&command),
        Command::Router(args) => router::run(&args),
        Command::Completion { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "runway", &mut script);
            print_stdout(&String::from_utf8_lossy(&script));
            Ok(ExitCode::SUCCESS)
        }
        Command::Revisions(args) => platform::revisions(&args),
        Command::Rollback(args) => platform::rollback(&args),
        Command::Promote(args) => platform::promote(&args),
        Command::Rollout(args) => platform::rollout(&args),
        Command::Events(args) => platform::events(&args),
        Command::Logs(args) => platform::logs(&args),
        Command::Secrets(command) => platform::secrets(&command),
        Command::Tokens(command) => platform::tokens(&command),
        Command::Team(command) => team::team(&command),
        Command::Domains(command) => domains::domains(&command),
        Command::Maintenance(command) => maintenance::maintenance(&command),
        Command::Preview(command) => preview::preview(&command),
        Command::Inventory(command) => inventory::inventory(&command),
        Command::Server(args) => server::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Quickstart(args) => quickstart::run(&args),
        Command::Supervise(args) => return local::supervise(&args),
        Command::Ingress(args) => runway_ingress::daemon::main(args).map(|()| ExitCode::SUCCESS),
        Command::Wrapper(args) => runway_wrapper::run_blocking(args)
            .map(|code| ExitCode::from(u8::try_from(code).unwrap_or(1))),
        Command::Schema => {
            print_stdout(&runway_manifest::manifest_schema_json());
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            // Each cause once, even where a message already ends with its source's text; the
            // server's words may quote a tenant's (a manifest's value, an app's output).
            let chain = runway_log::chain(error.as_ref());
            eprintln!("error: {}", terminal::text(&chain));
            if json {
                print_stdout(&format!("{:#}\n", platform::error_json(&error)));
            }
            ExitCode::from(platform::exit_code(&error).unwrap_or(EXIT_USAGE))
        }
    }
}

/// Whether the command asked for `--output json`: then a failure is one JSON document on
/// stdout too (its text stays on stderr), so a script always has something to parse.
fn wants_json(matches: &clap::ArgMatches) -> bool {
    let mut level = matches;
    loop {
        if let Ok(Some(output)) = level.try_get_one::<Output>("output") {
            return *output == Output::Json;
        }
        match level.subcommand() {
            Some((_, sub)) => level = sub,
            None => return false,
        }
    }
}

/// Writes to standard output, ignoring a closed pipe (`runway render | head`).
fn print_stdout(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

/// The repository path argument shared by the commands.
#[derive(Debug, Clone, clap::Args)]
struct RepoArg {
    /// Repository root (holding `.runway/`), a `.runway` directory, a service directory, or one
    /// manifest file.
    #[arg(default_value = ".")]
    path: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own checks of the whole command tree (positional order, flag clashes), which
    /// otherwise fire only when a command is built, e.g. for `runway completion`.
    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
