//! The commands that talk to the control plane: `login`, `services`, `deploy`, `status`,
//! `revisions`, `rollback`, `promote`, `events`, `logs` and `secrets`. Each prints for people by
//! default and one JSON document on stdout with `--output json`; the API is in [`crate::api`].

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;
use serde_json::Value;

use crate::api::{
    AdminScope, ApiError, Client, CreateService, CreateToken, DeployRequest, DeploymentEventView,
    DeploymentStateView, DeploymentView, GrantView, LogLine, LogsQuery, PromoteRequest, RoleName,
    RollbackRequest, RolloutCommandView, RolloutRequest, ScopeView, UpdateService,
};
use crate::config;
use crate::local::table;
use crate::repo::{Repository, discover, display, is_named, valid_services};
use crate::terminal;
use crate::{EXIT_INVALID, Output, print_stdout};
use runway_oci::source::{Packed, human_bytes};

/// A deployment that ended badly.
pub(crate) const EXIT_FAILED: u8 = 1;
/// `--timeout` ran out while waiting.
pub(crate) const EXIT_TIMEOUT: u8 = 3;
/// The connection to the server was lost while waiting or following: what became of the
/// deployment is not known here (it goes on on the server).
pub(crate) const EXIT_LOST: u8 = 4;

/// How long `--wait` keeps trying a server it cannot reach (a restart) before it gives up
/// with [`EXIT_LOST`].
const LOST_AFTER: Duration = Duration::from_secs(30);

/// How often `--wait` asks the server.
const POLL: Duration = Duration::from_millis(500);

/// `--output`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct OutputArg {
    /// Print for people (text) or one JSON document on stdout (json).
    #[arg(long, value_enum, default_value_t)]
    pub(crate) output: Output,
}

/// Which service and environment a command is about.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Target {
    /// The repository holding `.runway/`, whose service is meant (default: the current
    /// directory). Not needed with `--service`.
    #[arg(value_name = "DIR")]
    pub(crate) path: Option<PathBuf>,
    /// The service, by name; in a repository with several, also picks one (by name or id).
    #[arg(short, long)]
    pub(crate) service: Option<String>,
    /// The environment.
    #[arg(short, long, default_value = "dev")]
    pub(crate) env: String,
}

impl Target {
    /// The service meant: `--service`, or the one of the repository at the path.
    pub(crate) fn service_name(&self) -> anyhow::Result<String> {
        service_name(self.path.as_deref(), self.service.as_deref())
    }
}

/// `--service` alone (for commands whose positional argument is something else).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServiceEnv {
    /// The service, by name (default: the one in the current directory's `.runway/`).
    #[arg(short, long)]
    service: Option<String>,
    /// The environment.
    #[arg(short, long, default_value = "dev")]
    env: String,
}

/// `--wait` and its bound.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WaitArgs {
    /// Show the deployment's progress as it happens and return when it ends: exit code 0 when
    /// it succeeded (for `rollout abort`: when it was rolled back), 1 when it failed or was
    /// rolled back, 3 when --timeout ran out, 4 when the server could not be reached for 30 s
    /// (the deployment goes on there; `runway events` shows it later).
    #[arg(short, long)]
    wait: bool,
    /// How long --wait waits (e.g. 90s, 10m, 1h).
    #[arg(long, default_value = "10m", value_parser = parse_duration, value_name = "DURATION")]
    timeout: Duration,
}

pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    runway_wrapper::duration::parse(text).map_err(|e| e.to_string())
}

#[derive(Debug, clap::Args)]
pub(crate) struct LoginArgs {
    /// The control plane's URL: https://..., or http:// on localhost only.
    #[arg(long, value_name = "URL")]
    server: String,
    /// The API token; `-` reads it from standard input (recommended: it stays out of the shell's
    /// history and the process list). A CI job's identity token (a JWT from an issuer the
    /// server trusts, `api.oidc`) works too.
    #[arg(long, value_name = "TOKEN", required_unless_present_any = ["oidc_token_env", "sso"])]
    token: Option<String>,
    /// Instead of --token: sign in through the server's single sign-on provider in a browser
    /// (`$BROWSER`, else the desktop's; the URL is printed too). The CLI waits on 127.0.0.1 for
    /// the browser to come back, and saves a session token for you.
    #[arg(long, conflicts_with_all = ["token", "oidc_token_env"])]
    sso: bool,
    /// Instead of --token: the environment variable that holds the job's identity token (GitLab
    /// CI's `id_tokens`, e.g. RUNWAY_ID_TOKEN). Its name is saved, not the token, which is
    /// short-lived: each command reads it again.
    #[arg(long, value_name = "VAR", conflicts_with = "token")]
    oidc_token_env: Option<String>,
    /// A PEM file of the certificate authority that signed the server's certificate (the
    /// control plane's local CA). When given, only it is trusted for this server.
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum ServicesCommand {
    /// Register a service: its owners and environments (admin token).
    Create(CreateArgs),
    /// List the services this token can see.
    List(OutputArg),
    /// Change a service's owners, environments, or leave to deploy plain processes (admin
    /// token).
    Update(UpdateArgs),
    /// Decommission a service: stop it everywhere and forget it, with its secrets and deploy
    /// tokens (admin token).
    ///
    /// Asks to type the service's name to confirm, unless `--yes`.
    Delete(DeleteArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct UpdateArgs {
    /// The service.
    name: String,
    /// Its owners, replacing the ones it has. Repeat for several.
    #[arg(long = "owner", value_name = "EMAIL")]
    owners: Vec<String>,
    /// Its environments, replacing the ones it has (one with revisions cannot be removed).
    /// Repeat for several.
    #[arg(long = "env", value_name = "ENV", conflicts_with = "add_environments")]
    environments: Vec<String>,
    /// An environment to add to those it has, keeping them and their history. Repeat for
    /// several.
    #[arg(long = "add-env", value_name = "ENV")]
    add_environments: Vec<String>,
    /// Let it deploy plain processes (`spec.workload.process`) where the server does not
    /// allow them for every service (`true`), or no longer (`false`). A process runs as the
    /// service's own unprivileged user, isolated from the host and other services.
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    allow_processes: Option<bool>,
    /// Give it to this team, whose members then act on it with their roles (`""`: to no
    /// team).
    #[arg(long, value_name = "TEAM")]
    team: Option<String>,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct CreateArgs {
    /// The service's name (a DNS label, as its manifest's `metadata.name`).
    name: String,
    /// An owner's e-mail address. Repeat for several.
    #[arg(long = "owner", value_name = "EMAIL")]
    owners: Vec<String>,
    /// An environment it may be deployed to. Repeat for several; default: every environment
    /// the server has.
    #[arg(long = "env", value_name = "ENV")]
    environments: Vec<String>,
    /// The team that owns it: its members act on it with their roles (`runway team`).
    #[arg(long, value_name = "TEAM")]
    team: Option<String>,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct DeleteArgs {
    /// The service.
    name: String,
    /// Do not ask to type the name.
    #[arg(short, long)]
    yes: bool,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct DeployArgs {
    /// The repository holding `.runway/` (or a `.runway` directory, a service directory under
    /// it, or one manifest file).
    #[arg(value_name = "DIR", default_value = ".")]
    path: PathBuf,
    /// The service to deploy, by name or id, when the repository has several.
    #[arg(short, long)]
    service: Option<String>,
    /// The environment: its `runway-<env>.yml` overrides and `env-<env>.yml` variables apply.
    #[arg(short, long, default_value = "dev")]
    env: String,
    /// The image to deploy instead of the manifest's `spec.image`; the server pins a tag to its
    /// digest.
    #[arg(long, value_name = "REF")]
    image: Option<String>,
    /// Start the rollout paused: the new revision starts, but a progressive strategy
    /// (`regional_rollout`, `runway_canary`, `runway_blue_green`) takes no step until
    /// `runway rollout resume` or `promote`. Refused with any other strategy, and for a first
    /// deploy, which go to 100 % in one step.
    #[arg(long)]
    pause: bool,
    /// Roll out with this strategy instead of the manifest's `spec.deployment.strategy` for
    /// the environment (the CI component's `strategy` input).
    #[arg(long, value_name = "STRATEGY", value_parser = StrategyParser)]
    strategy: Option<runway_manifest::Strategy>,
    /// Deploy as preview NAME of the service instead (`mr-12`): a service of its own,
    /// `NAME--SERVICE`, served at its own URL (`NAME--SERVICE.preview.<domain>`), with the
    /// settings of `--env` and the service's `preview` secrets, scaled to zero when idle. Its
    /// first deploy makes it, each one extends its life; it goes after the server's time to
    /// live (`api.previews.ttl_seconds`) or with `runway preview stop NAME`.
    #[arg(long, value_name = "NAME", conflicts_with = "pause")]
    preview: Option<String>,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    output: OutputArg,
}

/// A strategy by its name in the manifest (`runway_canary`): the names the manifest's type
/// knows ([`runway_manifest::Strategy::names`]) are the possible values `--help` lists and a
/// wrong one is told.
#[derive(Debug, Clone, Copy)]
struct StrategyParser;

impl clap::builder::TypedValueParser for StrategyParser {
    type Value = runway_manifest::Strategy;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        let text = value.to_string_lossy();
        serde_json::from_value(serde_json::Value::String(text.clone().into_owned())).map_err(|_| {
            let expected = runway_manifest::Strategy::names().join(", ");
            clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                format!("{text:?} is not a strategy: expected {expected}\n"),
            )
            .with_cmd(cmd)
        })
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        let names = runway_manifest::Strategy::names();
        Some(Box::new(
            names.into_iter().map(clap::builder::PossibleValue::new),
        ))
    }
}

/// What `runway rollout` asks of the rollout in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RolloutAction {
    /// Hold the traffic where it is (a failed analysis still rolls back).
    Pause,
    /// Carry on; the current step's analysis window starts again.
    Resume,
    /// Move all traffic back to the stable revision now: the deployment is rolled back.
    Abort,
    /// Go to 100 % as soon as the new revision is ready (blue/green: switch now).
    Promote,
}

impl From<RolloutAction> for RolloutCommandView {
    fn from(action: RolloutAction) -> Self {
        match action {
            RolloutAction::Pause => Self::Pause,
            RolloutAction::Resume => Self::Resume,
            RolloutAction::Abort => Self::Abort,
            RolloutAction::Promote => Self::Promote,
        }
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct RolloutArgs {
    /// What to do.
    #[arg(value_enum)]
    action: RolloutAction,
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct TargetArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RollbackArgs {
    #[command(flatten)]
    target: Target,
    /// The revision to go back to (as `runway revisions` lists it); default: the one before the
    /// revision serving now.
    #[arg(long, value_name = "REVISION")]
    to: Option<String>,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct PromoteArgs {
    /// The repository holding `.runway/`, whose service is meant (default: the current
    /// directory). Not needed with `--service`.
    #[arg(value_name = "DIR")]
    path: Option<PathBuf>,
    /// The service, by name.
    #[arg(short, long)]
    service: Option<String>,
    /// The environment whose serving revision is promoted.
    #[arg(long, value_name = "ENV")]
    from: String,
    /// The environment it goes to.
    #[arg(long, value_name = "ENV")]
    to: String,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct EventsArgs {
    /// A deployment's id (as `runway deploy` prints it).
    #[arg(long, value_name = "ID", conflicts_with_all = ["service", "path"])]
    deployment: Option<String>,
    /// The repository holding `.runway/`; the events are its latest deployment's.
    #[arg(value_name = "DIR")]
    path: Option<PathBuf>,
    /// The service whose latest deployment's events are shown.
    #[arg(short, long)]
    service: Option<String>,
    /// The environment.
    #[arg(short, long, default_value = "dev")]
    env: String,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct LogsArgs {
    #[command(flatten)]
    target: Target,
    /// Only this instance's lines (as `runway status` lists them).
    #[arg(long, value_name = "ID")]
    instance: Option<String>,
    /// Keep printing lines as they come, until Ctrl-C or the server ends the stream (exit
    /// code 0; 4 when the connection breaks). With --output json, one JSON object a line.
    #[arg(short, long)]
    follow: bool,
    /// Lines to show from the end (default 100; with --since, all of them up to 10000).
    #[arg(short = 'n', long)]
    lines: Option<u32>,
    /// Only lines written since then: a duration before now (90s, 10m, 2h, 1d) or an RFC 3339
    /// time (2026-11-24T10:00:00Z).
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// The output of instances that ended (stopped, crashed and replaced, retired by a
    /// rollout), as `kubectl logs --previous`: kept an hour, the last 64 instances, on one
    /// machine; a container's run before its restart on Kubernetes.
    #[arg(long, conflicts_with = "follow")]
    previous: bool,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum TokensCommand {
    /// Create a token (admin only); its text is printed this once and never again.
    ///
    /// With --service, a deploy token that can read and deploy that service only, in the
    /// environments given with --env (at least one). With --admin, an admin token; one of the
    /// two is required.
    Create(TokenCreateArgs),
    /// List tokens: id, name, scope, expiry, revocation (never their text).
    List(OutputArg),
    /// Revoke a token by id; it is refused from then on.
    Revoke(TokenRevokeArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct TokenCreateArgs {
    /// A name for people; the audit log shows it as the actor.
    name: String,
    /// The token's role: `viewer` (reads), `deployer` (also deploys, rolls back, promotes,
    /// pauses) or `maintainer` (also secrets, tokens and domains). Without it, a token with
    /// `--service` is a deployer limited to its `--env`s, as deploy tokens always were.
    #[arg(long, value_enum)]
    role: Option<RoleArg>,
    /// The service the token acts on (and its previews).
    #[arg(long, conflicts_with_all = ["team", "every_service"])]
    service: Option<String>,
    /// Every service this team owns, now and later.
    #[arg(long, requires = "role", conflicts_with = "every_service")]
    team: Option<String>,
    /// Every service (a platform-wide `viewer`, say).
    #[arg(long, requires = "role")]
    every_service: bool,
    /// An admin token, which may do everything: said outright, never a missing `--service`.
    #[arg(long, conflicts_with_all = ["service", "environments", "role", "team", "every_service"])]
    admin: bool,
    /// An environment the token may act in (repeat for more); with `--role`, every one when
    /// none is given.
    #[arg(long = "env", value_name = "ENV")]
    environments: Vec<String>,
    /// Expire the token after this long (`90d`, `12h`, `30m`); never by default.
    #[arg(long, value_parser = parse_lifetime)]
    expires_in: Option<Duration>,
    #[command(flatten)]
    output: OutputArg,
}

/// A role on services, as `--role` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RoleArg {
    Viewer,
    Deployer,
    Maintainer,
}

impl From<RoleArg> for RoleName {
    fn from(role: RoleArg) -> Self {
        match role {
            RoleArg::Viewer => Self::Viewer,
            RoleArg::Deployer => Self::Deployer,
            RoleArg::Maintainer => Self::Maintainer,
        }
    }
}

fn parse_lifetime(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number.parse().map_err(|_| {
        format!("expected a number and a unit (d, h, m, s), e.g. 90d, not {text:?}")
    })?;
    let seconds = match unit {
        "d" => n * 86_400,
        "h" => n * 3_600,
        "m" => n * 60,
        "s" | "" => n,
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {text:?}: use d, h, m or s"
            ));
        }
    };
    Ok(Duration::from_secs(seconds))
}

#[derive(Debug, clap::Args)]
pub(crate) struct TokenRevokeArgs {
    /// The token's id, as `runway tokens list` shows it.
    id: u64,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum SecretsCommand {
    /// Set a secret's value (a new version), read from standard input or --from-file, never
    /// from an argument. One trailing newline is dropped.
    ///
    /// On a terminal the value is asked for without being shown. A revision records the
    /// secrets' versions: deploy again for instances to get the new value.
    Set(SecretSetArgs),
    /// List the secrets' names and versions (never their values).
    List(SecretListArgs),
    /// Delete a secret.
    Unset(SecretUnsetArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct SecretSetArgs {
    /// The secret's name, as the manifest's `spec.workload.secrets` lists it.
    name: String,
    #[command(flatten)]
    target: ServiceEnv,
    /// Read the value from this file instead of standard input.
    #[arg(long, value_name = "FILE")]
    from_file: Option<PathBuf>,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct SecretListArgs {
    #[command(flatten)]
    target: ServiceEnv,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct SecretUnsetArgs {
    /// The secret's name.
    name: String,
    #[command(flatten)]
    target: ServiceEnv,
    #[command(flatten)]
    output: OutputArg,
}

pub(crate) fn tokio() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// A client from the configuration file and environment.
pub(crate) fn client() -> anyhow::Result<Client> {
    let settings = config::resolve()?;
    Ok(Client::new(
        &settings.server,
        &settings.token,
        settings.ca.as_deref(),
    )?)
}

pub(crate) fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    print_stdout(&format!("{}\n", serde_json::to_string_pretty(value)?));
    Ok(())
}

// ---- login ----

pub(crate) fn login(args: &LoginArgs) -> anyhow::Result<ExitCode> {
    let ca = args
        .ca
        .as_ref()
        .map(|ca| std::path::absolute(ca).unwrap_or_else(|_| ca.clone()));
    let token = match (&args.token, &args.oidc_token_env) {
        _ if args.sso => crate::sso::sign_in(&args.server, ca.as_deref())?,
        (Some(token), _) if token == "-" => read_token()?,
        (Some(token), _) => token.trim().to_owned(),
        (None, Some(name)) => std::env::var(name)
            .map(|t| t.trim().to_owned())
            .unwrap_or_default(),
        (None, None) => bail!("give --token, --oidc-token-env VAR, or --sso"),
    };
    if token.is_empty() {
        match &args.oidc_token_env {
            Some(name) => bail!(
                "--oidc-token-env {name}: the variable is empty or not set (in GitLab CI, \
                 `id_tokens: {name}: aud: ...` sets it)"
            ),
            None => bail!("the token is empty"),
        }
    }
    let client = Client::new(&args.server, &token, ca.as_deref())?;
    let who = tokio()?.block_on(client.whoami())?;
    let path = config::path()?;
    let server = client.server().to_owned();
    config::save(
        &path,
        &config::Config {
            server: Some(server.clone()),
            // An identity token expires within the job: its variable is kept, not it.
            token: args.oidc_token_env.is_none().then_some(token),
            token_env: args.oidc_token_env.clone(),
            ca: ca.clone(),
        },
    )?;
    match args.output.output {
        Output::Json => print_json(&serde_json::json!({
            "server": server,
            "name": who.name,
            "token_id": who.token_id,
            "scope": who.scope,
            "team_services": who.team_services,
            "config": path,
        }))?,
        Output::Text => print_stdout(&format!(
            "logged in to {server} as {} ({}); settings saved in {}\n",
            if who.name.is_empty() { "?" } else { &who.name },
            describe_scope(&who.scope),
            path.display()
        )),
    }
    Ok(ExitCode::SUCCESS)
}

fn read_token() -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return read_hidden("token: ");
    }
    let mut line = String::new();
    stdin
        .lock()
        .read_line(&mut line)
        .context("cannot read the token from standard input")?;
    Ok(line.trim().to_owned())
}

/// What a token may do, in a few words.
fn describe_scope(scope: &ScopeView) -> String {
    match scope {
        ScopeView::Admin(_) => "admin".to_owned(),
        ScopeView::Deploy {
            service,
            environments,
        } => format!("deploy {service} to {}", environments.join(", ")),
        ScopeView::Role(grant) => {
            let role = match grant.role {
                RoleName::Viewer => "viewer",
                RoleName::Deployer => "deployer",
                RoleName::Maintainer => "maintainer",
            };
            let on = match (&grant.service, &grant.team) {
                (Some(service), _) => format!("of {service}"),
                (None, Some(team)) => format!("of team {team}'s services"),
                (None, None) => "of every service".to_owned(),
            };
            let envs = grant
                .environments
                .as_ref()
                .map_or_else(|| "every environment".to_owned(), |envs| envs.join(", "));
            format!("{role} {on} in {envs}")
        }
        ScopeView::Person {
            user,
            groups,
            admin,
        } => format!(
            "{user}, signed in{}{}",
            if groups.is_empty() {
                String::new()
            } else {
                format!(" (groups {})", groups.join(", "))
            },
            if *admin { ": a platform admin" } else { "" }
        ),
    }
}

/// Reads a line from the terminal without echoing it.
fn read_hidden(prompt: &str) -> anyhow::Result<String> {
    use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
    let stdin = std::io::stdin();
    eprint!("{prompt}");
    let original = tcgetattr(&stdin).context("cannot set up the terminal")?;
    let mut quiet = original.clone();
    quiet.local_flags.remove(LocalFlags::ECHO);
    tcsetattr(&stdin, SetArg::TCSANOW, &quiet).context("cannot set up the terminal")?;
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    let _ = tcsetattr(&stdin, SetArg::TCSANOW, &original);
    eprintln!();
    read.context("cannot read from the terminal")?;
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

// ---- services ----

pub(crate) fn services(command: &ServicesCommand) -> anyhow::Result<ExitCode> {
    let client = client()?;
    let rt = tokio()?;
    match command {
        ServicesCommand::Create(args) => {
            let request = CreateService {
                name: args.name.clone(),
                owners: args.owners.clone(),
                environments: (!args.environments.is_empty()).then(|| args.environments.clone()),
                team: args.team.clone(),
            };
            let service = rt.block_on(client.create_service(&request))?;
            match args.output.output {
                Output::Json => print_json(&service)?,
                Output::Text => print_stdout(&format!(
                    "created service {} (environments: {}; owners: {}; team: {})\n",
                    service.name,
                    list_or_none(&service.environments),
                    list_or_none(&service.owners),
                    service.team.as_deref().unwrap_or("-")
                )),
            }
        }
        ServicesCommand::List(output) => {
            let services = rt.block_on(client.services())?;
            match output.output {
                Output::Json => print_json(&services)?,
                Output::Text => {
                    let mut rows = vec![[
                        "NAME".to_owned(),
                        "ENVIRONMENTS".to_owned(),
                        "OWNERS".to_owned(),
                        "TEAM".to_owned(),
                        "CREATED".to_owned(),
                    ]];
                    for s in &services {
                        rows.push([
                            s.name.clone(),
                            list_or_none(&s.environments),
                            list_or_none(&s.owners),
                            s.team.clone().unwrap_or_else(|| "-".to_owned()),
                            s.created_at.clone(),
                        ]);
                    }
                    print_stdout(&table(&rows));
                }
            }
        }
        ServicesCommand::Update(args) => {
            let update = UpdateService {
                owners: (!args.owners.is_empty()).then(|| args.owners.clone()),
                environments: (!args.environments.is_empty()).then(|| args.environments.clone()),
                add_environments: args.add_environments.clone(),
                allow_processes: args.allow_processes,
                team: args.team.clone(),
            };
            if update.owners.is_none()
                && update.environments.is_none()
                && update.add_environments.is_empty()
                && update.allow_processes.is_none()
                && update.team.is_none()
            {
                anyhow::bail!(
                    "nothing to change: give --owner, --env, --add-env, --allow-processes or \
                     --team (see --help)"
                );
            }
            let service = rt.block_on(client.update_service(&args.name, &update))?;
            match args.output.output {
                Output::Json => print_json(&service)?,
                Output::Text => print_stdout(&format!(
                    "updated service {} (environments: {}; owners: {}; team: {}; plain \
                     processes: {})\n",
                    service.name,
                    list_or_none(&service.environments),
                    list_or_none(&service.owners),
                    service.team.as_deref().unwrap_or("-"),
                    if service.allow_processes {
                        "allowed"
                    } else {
                        "as the server allows"
                    }
                )),
            }
        }
        ServicesCommand::Delete(args) => {
            let confirm = if args.yes {
                args.name.clone()
            } else {
                let typed = ask(&format!(
                    "This stops {0} in every environment and forgets it, with its secrets and \
                     deploy tokens. Type its name ({0}) to confirm: ",
                    args.name,
                ))?;
                if typed != args.name {
                    eprintln!("not deleted: `{typed}` is not `{}`", args.name);
                    return Ok(ExitCode::from(EXIT_FAILED));
                }
                typed
            };
            let done = rt.block_on(client.delete_service(&args.name, &confirm))?;
            match args.output.output {
                Output::Json => print_json(&done)?,
                Output::Text => print_stdout(&format!(
                    "decommissioned {} with its secrets and deploy tokens\n",
                    done.decommissioned,
                )),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Names (owners, environments, secrets) for people, on one line.
fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "-".to_owned()
    } else {
        terminal::line(&items.join(", ")).into_owned()
    }
}

/// Asks a question on stderr and reads one line of answer from stdin.
fn ask(question: &str) -> anyhow::Result<String> {
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    let read = std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("cannot read the answer from standard input")?;
    if read == 0 {
        eprintln!();
        bail!("no answer on standard input: pass --yes to skip the question");
    }
    Ok(line.trim().to_owned())
}

// ---- finding the service ----

/// The service named by `--service`, or the one service of the repository at `path`.
pub(crate) fn service_name(path: Option<&Path>, service: Option<&str>) -> anyhow::Result<String> {
    if let (Some(service), None) = (service, path) {
        return Ok(service.to_owned());
    }
    let path = path.unwrap_or(Path::new("."));
    let repo = discover(path).map_err(|error| {
        anyhow::anyhow!(
            "{error:#}\nhint: outside a repository, name the service: `-s NAME` (`runway \
             services list` lists them)"
        )
    })?;
    let Some(services) = valid_services(&repo, path, |s| is_named(s, service)) else {
        bail!("cannot tell which service is meant: name it with --service");
    };
    Ok(only_one(services, &repo, service)?.name().to_owned())
}

fn only_one(
    mut services: Vec<runway_manifest::Service>,
    repo: &Repository,
    wanted: Option<&str>,
) -> anyhow::Result<runway_manifest::Service> {
    if services.len() > 1 {
        let names: Vec<&str> = services
            .iter()
            .map(runway_manifest::Service::name)
            .collect();
        bail!(
            "{} holds several services ({}): choose one with --service",
            display(&repo.runway_dir),
            names.join(", ")
        );
    }
    match services.pop() {
        Some(service) => Ok(service),
        None => bail!(
            "no service named `{}` in {}",
            wanted.unwrap_or_default(),
            display(&repo.runway_dir)
        ),
    }
}

/// The directory holding `.runway/`.
fn repository_root(runway_dir: &Path) -> PathBuf {
    let named = |p: &Path| p.file_name().is_some_and(|n| n == ".runway");
    let root = if named(runway_dir) {
        runway_dir.parent()
    } else if runway_dir.parent().is_some_and(named) {
        runway_dir.parent().and_then(Path::parent)
    } else {
        Some(runway_dir)
    };
    let root = match root {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::canonicalize(&root)
        .or_else(|_| std::path::absolute(&root))
        .unwrap_or(root)
}

// ---- deploy ----

pub(crate) fn deploy(args: &DeployArgs) -> anyhow::Result<ExitCode> {
    let path = &args.path;
    let repo = discover(path)?;
    match crate::validate::before_deploy(&repo) {
        Ok(warnings) => eprint!("{warnings}"),
        Err(errors) => {
            eprint!("{errors}");
            eprintln!(
                "error: the manifest is invalid, so nothing was deployed; `runway validate {}` checks it again",
                display(path)
            );
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    }
    let wanted = args.service.as_deref();
    let Some(services) = valid_services(&repo, path, |s| is_named(s, wanted)) else {
        return Ok(ExitCode::from(EXIT_INVALID));
    };
    let service = only_one(services, &repo, wanted)?;
    let env = args.env.as_str();
    let (name, mut request, code) = deploy_request(&repo, &service, env, args.image.clone())?;
    request.pause = args.pause;
    if let Some(strategy) = args.strategy {
        // The server validates the manifest as sent: the strategy's own settings
        // (`spec.workload.rollout`) are checked against it there.
        request.manifest["spec"]["deployment"]["strategy"] =
            serde_json::to_value(strategy).context("cannot encode the strategy as JSON")?;
    }
    request.preview.clone_from(&args.preview);
    let client = client()?;
    let rt = tokio()?;
    if let Some(code) = code {
        // A preview's code is its service's, uploaded where previews are: a job allowed only
        // previews may upload there.
        let to = if args.preview.is_some() {
            runway_secrets::preview::ENVIRONMENT
        } else {
            env
        };
        rt.block_on(upload_code(&client, &name, to, code))?;
    }
    let config = service.config(Some(env))?;
    let build = config
        .manifest
        .spec
        .workload
        .as_ref()
        .and_then(|w| w.build.as_ref());
    if let (Some(build), None) = (build, &request.image) {
        let settings = crate::config::resolve()?;
        let root = repository_root(&repo.runway_dir);
        let pinned = rt.block_on(crate::build::build_and_push(
            &settings,
            &name,
            &root,
            build,
            config.port,
        ))?;
        request.image = Some(pinned);
    }
    let deployment = rt.block_on(client.deploy(&name, env, &request))?;
    if args.output.output == Output::Text {
        match &deployment.preview {
            Some(preview) => print_stdout(&format!(
                "deployment {} of preview {} of {name} (from {env}): revision {} ({})\n  {}\n  \
                 expires {} unless deployed again\n",
                deployment.id,
                preview.name,
                deployment.to_revision.as_str(),
                deployment.state.as_str(),
                preview.url,
                preview.expires_at
            )),
            None => print_stdout(&format!(
                "deployment {} of {name} to {env}: revision {} ({})\n",
                deployment.id,
                deployment.to_revision.as_str(),
                deployment.state.as_str()
            )),
        }
        if let Some(changes) = &deployment.variables {
            eprint!("{}", variable_changes(changes));
        }
    }
    finish(&rt, &client, deployment, &args.wait, args.output.output)
}

/// How a deploy changes the environment variables, for people: names only, a line each.
fn variable_changes(changes: &runway_api::types::VariableChanges) -> String {
    let names = |names: &[String]| terminal::line(&names.join(", ")).into_owned();
    let mut said = String::new();
    if !changes.kept.is_empty() {
        said.push_str(&format!(
            "runway: kept over the repository's, as set with `runway env set`: {} (`runway env \
             unset NAME` drops one)\n",
            names(&changes.kept)
        ));
    }
    for (what, list) in [
        ("added", &changes.added),
        ("changed", &changes.changed),
        ("removed", &changes.removed),
    ] {
        if !list.is_empty() {
            said.push_str(&format!("runway: variables {what}: {}\n", names(list)));
        }
    }
    said
}

/// What `runway deploy` sends for a valid service: its manifest merged for `env`, the env
/// file's variables and the image; for a process service, its code packed from the
/// repository (see [`runway_oci::source::pack`]), to upload with [`upload_code`] before the
/// request names it. Returns the service's name with them.
pub(crate) fn deploy_request(
    repo: &Repository,
    service: &runway_manifest::Service,
    env: &str,
    image: Option<String>,
) -> anyhow::Result<(String, DeployRequest, Option<Packed>)> {
    let config = service.config(Some(env))?;
    let manifest =
        serde_json::to_value(&config.manifest).context("cannot encode the manifest as JSON")?;
    let env_vars = env_file_vars(repo, &service.id, env)?;
    let code = match config.artifact {
        runway_manifest::Artifact::Process { .. } => {
            let root = repository_root(&repo.runway_dir);
            let packed = runway_oci::source::pack(&root, MAX_SOURCE_BYTES)
                .with_context(|| format!("cannot pack the code in {}", root.display()))?;
            for skipped in &packed.skipped {
                eprintln!("runway: left out of the code snapshot: {skipped}");
            }
            Some(packed)
        }
        runway_manifest::Artifact::Image { .. } => None,
    };
    let request = DeployRequest {
        manifest,
        env_vars,
        image,
        source: code.as_ref().map(|c| c.digest.to_string()),
        pause: false,
        preview: None,
    };
    Ok((service.name().to_owned(), request, code))
}

/// The largest code snapshot `runway deploy` packs (the server's default limit; a server
/// with a lower one says so when it is sent).
const MAX_SOURCE_BYTES: u64 = runway_oci::source::DEFAULT_MAX_SOURCE_BYTES;

/// Uploads a process service's code snapshot unless the server has it already, saying so on
/// stderr.
pub(crate) async fn upload_code(
    client: &Client,
    service: &str,
    env: &str,
    code: Packed,
) -> anyhow::Result<()> {
    let digest = code.digest.to_string();
    if client.has_source(service, env, &digest).await? {
        eprintln!(
            "runway: code {} is on the server already",
            short_digest(&digest)
        );
        return Ok(());
    }
    eprintln!(
        "runway: uploading code {} ({} files, {} compressed)...",
        short_digest(&digest),
        code.files,
        human_bytes(code.gzip.len() as u64)
    );
    client
        .upload_source(service, env, &digest, code.gzip)
        .await
        .context("cannot upload the code snapshot")
}

/// `sha256:0123456789ab`: enough of a digest to tell it.
fn short_digest(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}

/// The variables of `.runway/[<id>/]env-<env>.yml`, as the manifest loader reads them.
fn env_file_vars(
    repo: &Repository,
    id: &str,
    env: &str,
) -> anyhow::Result<BTreeMap<String, String>> {
    let Some(file) = repo
        .services
        .iter()
        .find(|files| files.id == id)
        .and_then(|files| files.env_files.get(env))
    else {
        return Ok(BTreeMap::new());
    };
    let doc = runway_manifest::parse(file).map_err(|diagnostics| {
        let first = diagnostics
            .first()
            .map(ToString::to_string)
            .unwrap_or_default();
        anyhow::anyhow!("cannot read {}: {first}", file.name)
    })?;
    let Value::Object(map) = doc.value else {
        bail!("{} is not a mapping of variable names to values", file.name);
    };
    map.into_iter()
        .map(|(name, value)| {
            let text = match value {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => bail!("{}: {name} is not a string, number or boolean", file.name),
            };
            Ok((name, text))
        })
        .collect()
}

/// After a deploy, rollback or promote: print it (JSON), or wait for it with `--wait`.
pub(crate) fn finish(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    deployment: DeploymentView,
    wait: &WaitArgs,
    output: Output,
) -> anyhow::Result<ExitCode> {
    finish_expecting(
        rt,
        client,
        deployment,
        wait,
        output,
        DeploymentStateView::Succeeded,
    )
}

/// [`finish`], for a command whose success is the deployment ending in `expected`
/// (`rollout abort`: rolled back).
fn finish_expecting(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    deployment: DeploymentView,
    wait: &WaitArgs,
    output: Output,
    expected: DeploymentStateView,
) -> anyhow::Result<ExitCode> {
    if !wait.wait {
        if output == Output::Json {
            print_json(&deployment)?;
        } else {
            print_stdout(&format!(
                "follow it with `runway events --deployment {0}`, or pass --wait\n",
                deployment.id
            ));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (last, outcome) = rt.block_on(wait_for(client, deployment, wait.timeout, output))?;
    if output == Output::Json {
        print_json(&last)?;
    }
    let id = last.id.to_string();
    Ok(match outcome {
        Outcome::Ended(_) if expected != DeploymentStateView::Succeeded => {
            let reason = terminal::text(last.reason.as_deref().unwrap_or("no reason given"));
            let state = last.state.as_str().replace('_', " ");
            if last.state == expected {
                if output == Output::Text {
                    print_stdout(&format!("deployment {id} was {state}: {reason}\n"));
                }
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "error: deployment {id} ended {state} before the command took effect: {reason}"
                );
                ExitCode::from(EXIT_FAILED)
            }
        }
        Outcome::Ended(watched) => match last.state {
            DeploymentStateView::Succeeded => {
                // From its creation to its end, as the server recorded them; else as watched.
                let took = |d: &DeploymentView| {
                    let at = |t: &str| runway_store::Timestamp::parse_rfc3339(t);
                    let (start, end) = (at(&d.created_at)?, at(&d.updated_at)?);
                    let ms = end.unix_millis().checked_sub(start.unix_millis())?;
                    Some(Duration::from_millis(u64::try_from(ms).ok()?))
                };
                let took = format!("{:.1}s", took(&last).unwrap_or(watched).as_secs_f64());
                let dry_run = last
                    .reason
                    .as_deref()
                    .is_some_and(|r| r.starts_with("dry run"));
                if output == Output::Text && dry_run {
                    let (service, env) = (&last.service, &last.env);
                    let still = match last.from_revision.as_deref() {
                        Some(serving) => format!("{serving} still serves {env} of {service}"),
                        None => format!("{service} is still not deployed to {env}"),
                    };
                    print_stdout(&format!(
                        "deployment {id} was a dry run ({took}): nothing was started or routed; \
                         {still}\n"
                    ));
                } else if output == Output::Text {
                    // Where it is served: best effort, the deployment has succeeded either way.
                    let url = rt
                        .block_on(client.status(&last.service, &last.env))
                        .ok()
                        .map(|status| format!("\n{}", served_at(&status.url)))
                        .unwrap_or_default();
                    print_stdout(&format!(
                        "deployment {id} succeeded in {took}: {} serves {} of {}{url}\n",
                        last.to_revision.as_str(),
                        last.env,
                        last.service
                    ));
                }
                ExitCode::SUCCESS
            }
            _ => {
                let reason = last.reason.as_deref().unwrap_or("no reason given");
                // For people, the events above said it whole, the instance's last output
                // included: its first line here, the output not twice.
                let reason = match reason.split_once('\n') {
                    Some((first, _)) if output == Output::Text => {
                        format!("{first} (its last output is above)")
                    }
                    _ => reason.to_owned(),
                };
                eprintln!(
                    "error: deployment {id} {}: {}",
                    match last.state {
                        DeploymentStateView::RolledBack => "was rolled back",
                        _ => "failed",
                    },
                    terminal::text(&reason)
                );
                ExitCode::from(EXIT_FAILED)
            }
        },
        Outcome::Lost(error) => {
            eprintln!(
                "error: lost the server while waiting ({error}); deployment {id} goes on there, \
                 last seen {}: `runway events --deployment {id}` shows it once the server is \
                 back",
                last.state.as_str()
            );
            ExitCode::from(EXIT_LOST)
        }
        Outcome::TimedOut => {
            eprintln!(
                "error: gave up waiting after {}: deployment {id} is still {}; `runway events --deployment {id}` shows what it does",
                humanize(wait.timeout),
                last.state.as_str()
            );
            ExitCode::from(EXIT_TIMEOUT)
        }
    })
}

/// A service's URL for people, with what a `*.localhost` name needs: curl and browsers
/// resolve it to this machine; most other HTTP clients (Python's `urllib`, Go's) ask DNS, which
/// does not know it. Said once in [`NOTE_AGAIN_AFTER`], not on every command (a marker file
/// beside the CLI's configuration remembers when).
pub(crate) fn served_at(url: &str) -> String {
    let host = url
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split(['/', ':']).next())
        .unwrap_or_default();
    if host.ends_with(".localhost") && note_due("localhost-note") {
        format!(
            "{url}\n  ({host} is resolved by curl and browsers; other clients need it in \
             /etc/hosts, or the server's control.domain set to a wildcard DNS name)"
        )
    } else {
        url.to_owned()
    }
}

/// How long a note said once stays unsaid: a working day.
const NOTE_AGAIN_AFTER: Duration = Duration::from_secs(12 * 3600);

/// Whether the note `name` is to be said now: not said in [`NOTE_AGAIN_AFTER`]; marked said.
/// A note whose marker cannot be kept is always said.
fn note_due(name: &str) -> bool {
    let Ok(config) = crate::config::path() else {
        return true;
    };
    let marker = config.with_file_name(name);
    let said_lately = std::fs::metadata(&marker)
        .and_then(|meta| meta.modified())
        .ok()
        .and_then(|at| at.elapsed().ok())
        .is_some_and(|ago| ago < NOTE_AGAIN_AFTER);
    if said_lately {
        return false;
    }
    if let Some(dir) = marker.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(&marker, b"");
    true
}

pub(crate) enum Outcome {
    Ended(Duration),
    TimedOut,
    /// The server could not be reached for [`LOST_AFTER`].
    Lost(ApiError),
}

fn humanize(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 60 && secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

/// Polls the deployment and its events every 500 ms, printing each event as it arrives, until
/// it ends or `timeout` runs out. A spinner with the elapsed time shows on a terminal only. A
/// server that cannot be reached is asked again (it may be restarting) for [`LOST_AFTER`].
pub(crate) async fn wait_for(
    client: &Client,
    mut deployment: DeploymentView,
    timeout: Duration,
    output: Output,
) -> Result<(DeploymentView, Outcome), ApiError> {
    let id = deployment.id.to_string();
    let start = Instant::now();
    let deadline = start + timeout;
    let spinner = std::io::stderr().is_terminal();
    let mut seen = 0usize;
    let mut frame = 0usize;
    let mut next_poll = Instant::now();
    let mut unreachable_since: Option<Instant> = None;
    loop {
        if Instant::now() >= next_poll {
            next_poll = Instant::now() + POLL;
            let polled = async {
                let events = client.events(&id, seen).await?;
                let deployment = client.deployment(&id).await?;
                Ok::<_, ApiError>((events, deployment))
            };
            let (events, polled) = match polled.await {
                Ok(answer) => answer,
                Err(error @ ApiError::Connect { .. }) => {
                    let since = *unreachable_since.get_or_insert_with(|| {
                        clear_spinner(spinner);
                        eprintln!("runway: cannot reach the server ({error}); trying again");
                        Instant::now()
                    });
                    if since.elapsed() >= LOST_AFTER {
                        clear_spinner(spinner);
                        return Ok((deployment, Outcome::Lost(error)));
                    }
                    continue;
                }
                Err(error) => return Err(error),
            };
            if unreachable_since.take().is_some() {
                eprintln!("runway: the server answers again");
            }
            seen += events.len();
            print_events(&events, output, spinner);
            deployment = polled;
            if deployment.state.is_final() {
                // What happened between the two calls.
                let events = client.events(&id, seen).await?;
                print_events(&events, output, spinner);
                clear_spinner(spinner);
                return Ok((deployment, Outcome::Ended(start.elapsed())));
            }
        }
        if Instant::now() >= deadline {
            clear_spinner(spinner);
            return Ok((deployment, Outcome::TimedOut));
        }
        if spinner {
            const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\r\x1b[2K{} {} {}, {}s",
                FRAMES[frame % FRAMES.len()],
                id,
                deployment.state.as_str(),
                start.elapsed().as_secs()
            );
            let _ = err.flush();
            frame += 1;
        }
        let step = if spinner {
            Duration::from_millis(100)
        } else {
            next_poll.saturating_duration_since(Instant::now())
        };
        tokio::time::sleep(step.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

fn clear_spinner(spinner: bool) {
    if spinner {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
}

/// Events as `HH:MM:SS  message`: on stdout, or on stderr when stdout holds JSON. A message's
/// further lines (a crashed instance's last output) are indented under its first, so none
/// passes for an event of its own.
fn print_events(events: &[DeploymentEventView], output: Output, spinner: bool) {
    if events.is_empty() {
        return;
    }
    clear_spinner(spinner);
    let mut text = String::new();
    for event in events {
        let at = clock(&event.at);
        let message = terminal::text(&event.message).replace('\n', "\n          ");
        text.push_str(&format!("{}  {message}\n", terminal::line(at)));
    }
    match output {
        Output::Text => print_stdout(&text),
        Output::Json => eprint!("{text}"),
    }
}

/// The time of day of an RFC 3339 time (`2026-11-21T14:05:03.12Z` → `14:05:03`), else the text.
fn clock(at: &str) -> &str {
    time_of_day(at, 8)
}

/// The first `width` characters of an RFC 3339 time's time of day (`Z` left out), all of it
/// when shorter; the text itself when it has no time.
fn time_of_day(at: &str, width: usize) -> &str {
    at.split_once('T')
        .map(|(_, time)| {
            let time = time.trim_end_matches('Z');
            time.get(..width).unwrap_or(time)
        })
        .unwrap_or(at)
}

// ---- status, revisions, rollback, promote, events ----

pub(crate) fn status(args: &TargetArgs) -> anyhow::Result<ExitCode> {
    let name = service_name(args.target.path.as_deref(), args.target.service.as_deref())?;
    let client = client()?;
    let status = tokio()?.block_on(client.status(&name, &args.target.env))?;
    if args.output.output == Output::Json {
        print_json(&status)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = format!(
        "{} in {}: {}\n",
        name,
        args.target.env,
        served_at(&status.url)
    );
    if let Some(m) = &status.maintenance {
        // First: whatever else it says, clients get a 503.
        out.push_str(&format!(
            "in maintenance since {} (by {}): clients get 503 ({})\n",
            m.since,
            terminal::line(&m.set_by),
            if m.message.is_empty() {
                "under maintenance".to_owned()
            } else {
                terminal::line(&m.message).into_owned()
            }
        ));
    }
    let traffic: Vec<String> = status
        .routes
        .iter()
        .map(|r| format!("{} {}%", r.revision, r.weight))
        .collect();
    out.push_str(&format!(
        "traffic: {}\n",
        if traffic.is_empty() {
            "none".to_owned()
        } else {
            traffic.join(", ")
        }
    ));
    if !status.revisions.is_empty() {
        out.push('\n');
        let mut rows = vec![[
            "REVISION".to_owned(),
            "CONDITION".to_owned(),
            "READY".to_owned(),
            "STARTING".to_owned(),
            "FAILED".to_owned(),
            "REQ/S".to_owned(),
            "5XX".to_owned(),
            "P99".to_owned(),
            "REASON".to_owned(),
        ]];
        for r in &status.revisions {
            let [rate, errors, p99] = traffic_cells(r.traffic.as_ref());
            // No instance wanted: its own words, rather than a "ready" with nothing running.
            let condition = match (r.condition.as_str(), r.desired_instances) {
                ("progressing", 0) => "draining",
                ("ready", 0) => "at zero",
                (condition, _) => condition,
            };
            // None wanted: what is left while it drains, not "1/0".
            let ready = match (r.desired_instances, r.ready) {
                (0, 0) => "-".to_owned(),
                (0, left) => format!("{left} left"),
                (desired, ready) => format!("{ready}/{desired}"),
            };
            rows.push([
                r.revision.clone(),
                condition.to_owned(),
                ready,
                r.starting.to_string(),
                r.failed.to_string(),
                rate,
                errors,
                p99,
                terminal::line(r.reason.as_deref().unwrap_or_default()).into_owned(),
            ]);
        }
        out.push_str(&table(&rows));
        if let Some(t) = status.revisions.iter().find_map(|r| r.traffic.as_ref()) {
            out.push_str(&format!(
                "(traffic over the last {:.0} s, as the ingress counted it)\n",
                t.window_seconds
            ));
        }
    }
    if let Some(rollout) = &status.rollout {
        let step = match (rollout.step, rollout.steps) {
            (Some(at), Some(of)) => format!(", step {at} of {of}"),
            _ => String::new(),
        };
        let paused = if rollout.paused { ", paused" } else { "" };
        out.push_str(&format!(
            "rollout: {} (deployment {}), {}{step}, new revision at {} %{paused}: {}\n",
            rollout.strategy,
            rollout.deployment,
            rollout.phase,
            rollout.new_weight,
            terminal::line(&rollout.message)
        ));
        if let Some(a) = &rollout.analysis {
            out.push_str(&analysis_line(a));
        }
    }
    if !status.scaling.is_empty() {
        out.push('\n');
        let mut rows = vec![[
            "REVISION".to_owned(),
            "CONCURRENCY".to_owned(),
            "LAST SCALING".to_owned(),
            "AT".to_owned(),
        ]];
        for s in &status.scaling {
            let panic = if s.panicking { " (panicking)" } else { "" };
            rows.push([
                s.revision.clone(),
                s.concurrency.to_string(),
                format!(
                    "{}{panic}",
                    terminal::line(s.last_change.as_deref().unwrap_or("none yet"))
                ),
                s.last_change_at.as_deref().map_or("-", clock).to_owned(),
            ]);
        }
        out.push_str(&table(&rows));
    }
    if !status.instances.is_empty() {
        out.push('\n');
        let mut rows = vec![[
            "INSTANCE".to_owned(),
            "PHASE".to_owned(),
            "READY".to_owned(),
            "ADDRESS".to_owned(),
            "RESTARTS".to_owned(),
            "MESSAGE".to_owned(),
        ]];
        for i in &status.instances {
            rows.push([
                i.id.clone(),
                i.phase.clone(),
                if i.ready { "yes" } else { "no" }.to_owned(),
                i.address
                    .clone()
                    .or_else(|| i.port.map(|p| format!(":{p}")))
                    .unwrap_or_else(|| "-".to_owned()),
                i.restarts.to_string(),
                terminal::line(&i.message).into_owned(),
            ]);
        }
        out.push_str(&table(&rows));
    }
    if let Some(control_plane) = &status.control_plane {
        let leads = control_plane.leader.as_deref().unwrap_or("no replica");
        let through = if control_plane.leader.as_deref() == Some(control_plane.replica.as_str()) {
            String::new()
        } else {
            format!(
                "; answered by {}, as it observes the instances (the revisions' progress and \
                 scaling are the leader's)",
                control_plane.replica
            )
        };
        out.push_str(&format!("\ncontrol plane: {leads} leads{through}\n"));
    }
    if let Some(registry) = &status.registry {
        let bound = registry.max_bytes.map_or_else(
            || "no bound".to_owned(),
            |max| format!("of {}", human_bytes(max)),
        );
        out.push_str(&format!(
            "\nplatform registry: {} {bound}, {} blobs\n",
            human_bytes(registry.bytes),
            registry.blobs
        ));
    }
    print_stdout(&out);
    for warning in &status.warnings {
        eprintln!("warning: not shown: {}", terminal::line(warning));
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn revisions(args: &TargetArgs) -> anyhow::Result<ExitCode> {
    let name = service_name(args.target.path.as_deref(), args.target.service.as_deref())?;
    let client = client()?;
    let rt = tokio()?;
    let revisions = rt.block_on(client.revisions(&name, &args.target.env))?;
    if args.output.output == Output::Json {
        print_json(&revisions)?;
        return Ok(ExitCode::SUCCESS);
    }
    // Which serve now, and how much.
    let routes = rt
        .block_on(client.status(&name, &args.target.env))
        .map(|status| status.routes)
        .unwrap_or_default();
    let mut rows = vec![[
        "REVISION".to_owned(),
        "TRAFFIC".to_owned(),
        "ARTIFACT".to_owned(),
        "SECRETS".to_owned(),
        "CREATED".to_owned(),
        "BY".to_owned(),
    ]];
    for r in &revisions {
        let secrets: Vec<String> = r
            .secret_versions
            .iter()
            .map(|(name, version)| format!("{name}@{version}"))
            .collect();
        let artifact = r
            .image
            .clone()
            .or_else(|| {
                r.source
                    .as_deref()
                    .map(|d| format!("code {}", short_digest(d)))
            })
            .or_else(|| r.source_dir.clone())
            .unwrap_or_else(|| "-".to_owned());
        // What verified it is in `--output json` (`signature`); here, that something did.
        let artifact = if r.signature.is_empty() {
            artifact
        } else {
            format!("{artifact} (signature verified)")
        };
        let traffic = routes
            .iter()
            .find(|route| route.revision == r.name && route.weight > 0)
            .map_or_else(|| "-".to_owned(), |route| format!("{}%", route.weight));
        rows.push([
            r.name.clone(),
            traffic,
            terminal::line(&artifact).into_owned(),
            list_or_none(&secrets),
            r.created_at.clone(),
            terminal::line(&r.created_by).into_owned(),
        ]);
    }
    print_stdout(&table(&rows));
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn rollback(args: &RollbackArgs) -> anyhow::Result<ExitCode> {
    let name = service_name(args.target.path.as_deref(), args.target.service.as_deref())?;
    let client = client()?;
    let rt = tokio()?;
    let request = RollbackRequest {
        to: args.to.clone(),
    };
    let deployment = rt.block_on(client.rollback(&name, &args.target.env, &request))?;
    if args.output.output == Output::Text {
        print_stdout(&format!(
            "rollback {} of {name} in {}: {} → {} ({})\n",
            deployment.id,
            args.target.env,
            deployment.from_revision.as_deref().unwrap_or("-"),
            deployment.to_revision.as_str(),
            deployment.state.as_str()
        ));
    }
    finish(&rt, &client, deployment, &args.wait, args.output.output)
}

pub(crate) fn rollout(args: &RolloutArgs) -> anyhow::Result<ExitCode> {
    let name = service_name(args.target.path.as_deref(), args.target.service.as_deref())?;
    let client = client()?;
    let rt = tokio()?;
    let request = RolloutRequest {
        command: args.action.into(),
    };
    let deployment = rt.block_on(client.rollout(&name, &args.target.env, &request))?;
    let expected = match args.action {
        RolloutAction::Abort => DeploymentStateView::RolledBack,
        _ => DeploymentStateView::Succeeded,
    };
    if args.output.output == Output::Text {
        print_stdout(&format!(
            "{} asked of deployment {} of {name} in {}: {} → {} ({})\n",
            request.command.as_str(),
            deployment.id,
            args.target.env,
            deployment.from_revision.as_deref().unwrap_or("-"),
            deployment.to_revision.as_str(),
            deployment.state.as_str()
        ));
    }
    finish_expecting(
        &rt,
        &client,
        deployment,
        &args.wait,
        args.output.output,
        expected,
    )
}

pub(crate) fn promote(args: &PromoteArgs) -> anyhow::Result<ExitCode> {
    let name = service_name(args.path.as_deref(), args.service.as_deref())?;
    let client = client()?;
    let rt = tokio()?;
    let request = PromoteRequest {
        from: args.from.clone(),
        to: args.to.clone(),
    };
    let deployment = rt.block_on(client.promote(&name, &request))?;
    if args.output.output == Output::Text {
        print_stdout(&format!(
            "promotion {} of {name} from {} to {}: revision {} ({})\n",
            deployment.id,
            args.from,
            args.to,
            deployment.to_revision.as_str(),
            deployment.state.as_str()
        ));
    }
    finish(&rt, &client, deployment, &args.wait, args.output.output)
}

pub(crate) fn events(args: &EventsArgs) -> anyhow::Result<ExitCode> {
    let client = client()?;
    let rt = tokio()?;
    let id = match &args.deployment {
        Some(id) => id.clone(),
        None => {
            let name = service_name(args.path.as_deref(), args.service.as_deref())?;
            let latest = rt.block_on(client.deployments(&name, &args.env, 1))?;
            match latest.first() {
                Some(d) => d.id.to_string(),
                None => bail!("{name} has no deployment in {}", args.env),
            }
        }
    };
    let (deployment, events) = rt.block_on(async {
        let deployment = client.deployment(&id).await?;
        let events = client.events(&id, 0).await?;
        Ok::<_, ApiError>((deployment, events))
    })?;
    match args.output.output {
        Output::Json => print_json(&serde_json::json!({
            "deployment": deployment,
            "events": events,
        }))?,
        Output::Text => {
            print_stdout(&format!(
                "deployment {id} ({}) of {} to {}: {} → {}, {}{}\n",
                deployment.kind.as_str(),
                deployment.service,
                deployment.env,
                deployment.from_revision.as_deref().unwrap_or("-"),
                deployment.to_revision.as_str(),
                deployment.state.as_str(),
                deployment
                    .reason
                    .as_deref()
                    // Indented, as an event's further lines are: none passes for an event.
                    .map(|r| format!(": {}", terminal::text(r).replace('\n', "\n  ")))
                    .unwrap_or_default()
            ));
            print_events(&events, Output::Text, false);
        }
    }
    Ok(ExitCode::SUCCESS)
}

// ---- logs ----

pub(crate) fn logs(args: &LogsArgs) -> anyhow::Result<ExitCode> {
    let name = service_name(args.target.path.as_deref(), args.target.service.as_deref())?;
    let client = client()?;
    let rt = tokio()?;
    let query = LogsQuery {
        instance: args.instance.as_deref(),
        lines: args.lines,
        since: args.since.as_deref(),
        previous: args.previous,
    };
    let env = &args.target.env;
    let output = args.output.output;
    if !args.follow {
        let lines = rt.block_on(client.logs(&name, env, &query))?;
        match output {
            Output::Json => print_json(&lines)?,
            Output::Text => {
                let text: String = lines.iter().map(log_text).collect();
                print_stdout(&text);
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    rt.block_on(async {
        let stream = client.follow_logs(&name, env, &query, |line| {
            let text = match output {
                Output::Json => match serde_json::to_string(&line) {
                    Ok(json) => format!("{json}\n"),
                    Err(_) => return true,
                },
                Output::Text => log_text(&line),
            };
            write_stdout(&text)
        });
        tokio::select! {
            result = stream => match result {
                Ok(true) => {
                    eprintln!("runway: the server ended the stream (it is stopping or restarting)");
                    Ok(ExitCode::SUCCESS)
                }
                Ok(false) => Ok(ExitCode::SUCCESS),
                Err(error @ ApiError::Connect { .. }) => {
                    eprintln!("error: lost the server while following: {error}");
                    Ok(ExitCode::from(EXIT_LOST))
                }
                Err(error) => Err(anyhow::Error::from(error)),
            },
            _ = tokio::signal::ctrl_c() => Ok(ExitCode::SUCCESS),
        }
    })
}

/// One log line for people: when (UTC time of day, to the millisecond), the instance, the
/// text; its control characters shown as escapes (JSON output keeps them as they are).
fn log_text(line: &LogLine) -> String {
    format!(
        "{} {} {}\n",
        terminal::line(time_of_day(&line.time, 12)),
        terminal::line(&line.instance),
        terminal::line(&line.text)
    )
}

/// Writes and flushes; false once stdout is closed (`runway logs -f | head`).
fn write_stdout(text: &str) -> bool {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .is_ok()
}

// ---- tokens ----

pub(crate) fn tokens(command: &TokensCommand) -> anyhow::Result<ExitCode> {
    let client = client()?;
    let rt = tokio()?;
    match command {
        TokensCommand::Create(args) => {
            let environments =
                || (!args.environments.is_empty()).then(|| args.environments.clone());
            let scope = match &args.service {
                _ if args.role.is_some() => ScopeView::Role(GrantView {
                    role: args.role.map_or(RoleName::Viewer, Into::into),
                    service: args.service.clone(),
                    team: args.team.clone(),
                    every_service: args.every_service,
                    environments: environments(),
                }),
                None if args.admin => ScopeView::Admin(AdminScope {}),
                None if args.environments.is_empty() => bail!(
                    "say what the token may do: --role ROLE with --service NAME, --team NAME or \
                     --every-service; --service NAME --env ENV for a deploy token; or --admin for \
                     one that may do everything"
                ),
                None => bail!("--env scopes a deploy token: give --service too"),
                Some(_) if args.environments.is_empty() => {
                    bail!("a deploy token needs at least one --env it may act in")
                }
                Some(service) => ScopeView::Deploy {
                    service: service.clone(),
                    environments: args.environments.clone(),
                },
            };
            let request = CreateToken {
                name: args.name.clone(),
                scope,
                expires_in_seconds: args.expires_in.map(|lifetime| lifetime.as_secs()),
            };
            let created = rt.block_on(client.create_token(&request))?;
            match args.output.output {
                Output::Json => print_json(&created)?,
                Output::Text => {
                    print_stdout(&format!(
                        "token {} ({}, {}); shown this once:\n{}\n",
                        created.info.id,
                        terminal::line(&created.info.name),
                        describe_scope(&created.info.scope),
                        created.token
                    ));
                }
            }
        }
        TokensCommand::List(output) => {
            let list = rt.block_on(client.tokens())?;
            match output.output {
                Output::Json => print_json(&list)?,
                Output::Text => {
                    let text = |v: &Option<String>| v.as_deref().unwrap_or("-").to_owned();
                    let mut rows = vec![[
                        "ID".to_owned(),
                        "NAME".to_owned(),
                        "SCOPE".to_owned(),
                        "EXPIRES".to_owned(),
                        "REVOKED".to_owned(),
                    ]];
                    for t in &list {
                        rows.push([
                            t.id.to_string(),
                            terminal::line(&t.name).into_owned(),
                            describe_scope(&t.scope),
                            text(&t.expires_at),
                            text(&t.revoked_at),
                        ]);
                    }
                    print_stdout(&table(&rows));
                }
            }
        }
        TokensCommand::Revoke(args) => {
            let revoked = rt.block_on(client.revoke_token(&args.id.to_string()))?;
            match args.output.output {
                Output::Json => print_json(&revoked)?,
                Output::Text => print_stdout(&format!("revoked token {}\n", args.id)),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

// ---- secrets ----

pub(crate) fn secrets(command: &SecretsCommand) -> anyhow::Result<ExitCode> {
    match command {
        SecretsCommand::Set(args) => {
            let name = service_name(None, args.target.service.as_deref())?;
            let value = match &args.from_file {
                Some(file) => {
                    let bytes = std::fs::read(file)
                        .with_context(|| format!("cannot read {}", file.display()))?;
                    String::from_utf8(bytes)
                        .with_context(|| format!("{} is not UTF-8 text", file.display()))?
                }
                None if std::io::stdin().is_terminal() => {
                    read_hidden(&format!("value of {} (not shown): ", args.name))?
                }
                None => {
                    let mut value = String::new();
                    std::io::stdin()
                        .read_to_string(&mut value)
                        .context("cannot read the value from standard input")?;
                    value
                }
            };
            let value = strip_newline(&value);
            if value.is_empty() {
                bail!("the value of {} is empty", args.name);
            }
            let client = client()?;
            let info =
                tokio()?.block_on(client.set_secret(&name, &args.target.env, &args.name, value))?;
            match args.output.output {
                Output::Json => print_json(&info)?,
                Output::Text => print_stdout(&format!(
                    "set {} for {name} in {} (version {}); deploy again for instances to get it\n",
                    info.name, args.target.env, info.version
                )),
            }
        }
        SecretsCommand::List(args) => {
            let name = service_name(None, args.target.service.as_deref())?;
            let client = client()?;
            let list = tokio()?.block_on(client.secrets(&name, &args.target.env))?;
            match args.output.output {
                Output::Json => print_json(&list)?,
                Output::Text => {
                    let mut rows = vec![[
                        "NAME".to_owned(),
                        "VERSION".to_owned(),
                        "CREATED".to_owned(),
                        "BY".to_owned(),
                        "FROM".to_owned(),
                    ]];
                    for s in &list {
                        rows.push([
                            s.name.clone(),
                            s.version.to_string(),
                            s.created_at.clone(),
                            terminal::line(&s.created_by).into_owned(),
                            terminal::line(s.origin.as_deref().unwrap_or("runway secrets set"))
                                .into_owned(),
                        ]);
                    }
                    print_stdout(&table(&rows));
                }
            }
        }
        SecretsCommand::Unset(args) => {
            let name = service_name(None, args.target.service.as_deref())?;
            let client = client()?;
            tokio()?.block_on(client.unset_secret(&name, &args.target.env, &args.name))?;
            match args.output.output {
                Output::Json => print_json(&serde_json::json!({
                    "service": name,
                    "env": args.target.env,
                    "unset": args.name,
                }))?,
                Output::Text => print_stdout(&format!(
                    "unset {} for {name} in {}\n",
                    args.name, args.target.env
                )),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn strip_newline(value: &str) -> &str {
    value
        .strip_suffix("\r\n")
        .or_else(|| value.strip_suffix('\n'))
        .unwrap_or(value)
}

/// The API client's error behind an error that reached `main`, if there is one.
fn api_error(error: &anyhow::Error) -> Option<&ApiError> {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<ApiError>())
}

/// A failure as `--output json` prints it: `{"error": {"message", and from the server
/// "status", "code", "server_message" and "field"}}`.
pub(crate) fn error_json(error: &anyhow::Error) -> Value {
    let mut body = serde_json::json!({ "message": format!("{error:#}") });
    if let Some(ApiError::Api {
        status,
        code,
        message,
        field,
    }) = api_error(error)
    {
        body["status"] = status.as_u16().into();
        body["code"] = code.as_str().into();
        body["server_message"] = message.as_str().into();
        if let Some(field) = field {
            body["field"] = field.as_str().into();
        }
    }
    serde_json::json!({ "error": body })
}

/// The exit code for an error that reached `main`: 1 for what the server or the network said,
/// 2 (usage) for the rest.
pub(crate) fn exit_code(error: &anyhow::Error) -> Option<u8> {
    api_error(error).map(|e| match e {
        ApiError::Config { .. } => crate::EXIT_USAGE,
        _ => EXIT_FAILED,
    })
}

/// A canary step's analysis so far, on one line, as the API says it: `analysis since
/// 14:05:03 (60 s window): 120 requests (min 50), 5xx 0.00 % (max 1.00 %), p99 12 ms (max
/// 1024 ms): within`.
fn analysis_line(a: &runway_api::types::RolloutAnalysis) -> String {
    let c = &a.checks;
    let t = &a.thresholds;
    let millis = |seconds: f64| {
        if seconds < 1.0 {
            format!("{:.0} ms", seconds * 1000.0)
        } else {
            format!("{seconds:.2} s")
        }
    };
    let percent = |ratio: f64| format!("{:.2} %", ratio * 100.0);
    // The limit in force; while too few requests leave a measure unjudged, the absolute one.
    let max =
        |check: &runway_api::types::AnalysisCheck, absolute: f64, show: &dyn Fn(f64) -> String| {
            let limit = match check.standing.as_str() {
                "too_few" => Some(absolute),
                _ => check.limit,
            };
            limit.map_or_else(String::new, |limit| format!(" (max {})", show(limit)))
        };
    let mut parts = vec![
        format!("{} requests (min {})", a.canary.requests, t.min_requests),
        format!(
            "5xx {}{}",
            percent(a.canary.error_ratio),
            max(&c.error_ratio, t.max_error_ratio, &percent)
        ),
        format!(
            "p99 {}{}",
            a.canary.p99_seconds.map_or_else(|| "-".to_owned(), millis),
            max(&c.latency_p99, t.latency_slo_seconds, &millis)
        ),
    ];
    // Restarts and readiness failures, once there are any.
    for (what, value, limit) in [
        ("restarts", a.canary.restarts, t.max_restarts),
        (
            "readiness failures",
            a.canary.readiness_failures,
            t.max_readiness_failures,
        ),
    ] {
        if value > 0 {
            parts.push(format!("{what} {value} (max {limit})"));
        }
    }
    let over = [
        &c.readiness_failures,
        &c.restarts,
        &c.error_ratio,
        &c.latency_p99,
    ]
    .iter()
    .any(|check| check.standing == "over");
    let stands = match a.verdict.as_str() {
        "pass" => "within".to_owned(),
        "fail" => "over".to_owned(),
        _ if c.requests.standing == "too_few" => "too few".to_owned(),
        _ if over => "over so far (latency is judged over the whole window)".to_owned(),
        _ => format!(
            "inconclusive ({})",
            terminal::line(a.reason.as_deref().unwrap_or_default())
        ),
    };
    let since = a
        .window_started_at
        .as_deref()
        .map_or_else(String::new, |at| format!(" since {}", clock(at)));
    format!(
        "analysis{since} ({:.0} s window): {}: {stands}\n",
        a.window_seconds,
        parts.join(", ")
    )
}

/// A revision's traffic as three cells: requests per second, 5xx share, p99; `-` when the
/// control plane has not watched it long enough.
pub(crate) fn traffic_cells(traffic: Option<&runway_api::types::TrafficView>) -> [String; 3] {
    let Some(t) = traffic else {
        return ["-".to_owned(), "-".to_owned(), "-".to_owned()];
    };
    [
        format!("{:.1}", t.requests_per_second),
        format!("{:.2} %", t.error_ratio * 100.0),
        t.p99_seconds.map_or_else(
            || "-".to_owned(),
            |p99| {
                if p99 < 1.0 {
                    format!("{:.0} ms", p99 * 1000.0)
                } else {
                    format!("{p99:.2} s")
                }
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_shows_the_time_of_day() {
        assert_eq!(clock("2026-11-21T14:05:03.123456Z"), "14:05:03");
        assert_eq!(clock("later"), "later");
        assert_eq!(
            time_of_day("2026-11-21T14:05:03.123456Z", 12),
            "14:05:03.123"
        );
        assert_eq!(time_of_day("2026-11-21T14:05:03Z", 12), "14:05:03");
    }

    #[test]
    fn one_trailing_newline_is_dropped() {
        assert_eq!(strip_newline("s3cr3t\n"), "s3cr3t");
        assert_eq!(strip_newline("s3cr3t\r\n"), "s3cr3t");
        assert_eq!(strip_newline("a\n\n"), "a\n");
    }

    #[test]
    fn status_codes_are_kept() {
        let err = ApiError::Api {
            status: reqwest::StatusCode::NOT_FOUND,
            code: "not_found".into(),
            message: "service x not found".into(),
            field: None,
        };
        assert_eq!(exit_code(&anyhow::Error::from(err)), Some(EXIT_FAILED));
        let config = ApiError::Config {
            reason: "bad".into(),
        };
        assert_eq!(
            exit_code(&anyhow::Error::from(config)),
            Some(crate::EXIT_USAGE)
        );
    }

    #[test]
    fn token_lifetimes() {
        use std::time::Duration;
        assert_eq!(parse_lifetime("90d"), Ok(Duration::from_secs(90 * 86_400)));
        assert_eq!(parse_lifetime("12h"), Ok(Duration::from_secs(12 * 3_600)));
        assert_eq!(parse_lifetime("30m"), Ok(Duration::from_secs(1_800)));
        assert_eq!(parse_lifetime("45"), Ok(Duration::from_secs(45)));
        assert!(parse_lifetime("d").is_err());
        assert!(parse_lifetime("3w").unwrap_err().contains("unknown unit"));
    }
}
