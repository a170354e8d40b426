//! The everyday commands peers have: `runway open`, `runway env set|unset|list` and
//! `runway audit`. (`runway completion` is in `main.rs`, beside the command it describes.)

use std::collections::BTreeMap;
use std::process::{Command, ExitCode, Stdio};

use crate::api::SetVariables;
use anyhow::{Context, bail};
use runway_manifest::{Manifest, ServiceConfig};

use crate::local::table;
use crate::platform::{OutputArg, Target, WaitArgs, client, finish, print_json, tokio};
use crate::terminal;
use crate::{Output, print_stdout};

#[derive(Debug, clap::Args)]
pub(crate) struct OpenArgs {
    #[command(flatten)]
    target: Target,
    /// Print the URL instead of opening it.
    #[arg(long)]
    print: bool,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum EnvCommand {
    /// Set variables (`KEY=VALUE`…): a new revision of the one serving, with the same
    /// manifest, image or code, rolled out as a deploy is. They stay over the repository's
    /// (`.runway/env-<env>.yml`) at later deploys, until `env unset`.
    Set(EnvSetArgs),
    /// Remove variables set with `env set`: a new revision, as for `env set`. A later deploy
    /// brings back the repository's value of the name, if it has one.
    Unset(EnvUnsetArgs),
    /// The variables of the revision serving now, and where each comes from.
    List(EnvListArgs),
}

/// Which service and environment, for commands whose positional arguments are something else.
#[derive(Debug, clap::Args)]
pub(crate) struct Which {
    /// The repository holding `.runway/`, whose service is meant (default: the current
    /// directory). Not needed with `--service`.
    #[arg(long, value_name = "DIR")]
    dir: Option<std::path::PathBuf>,
    /// The service, by name; in a repository with several, also picks one (by name or id).
    #[arg(short, long)]
    service: Option<String>,
    /// The environment.
    #[arg(short, long, default_value = "dev")]
    env: String,
}

impl Which {
    fn service_name(&self) -> anyhow::Result<String> {
        crate::platform::service_name(self.dir.as_deref(), self.service.as_deref())
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct EnvSetArgs {
    /// `KEY=VALUE`, one or more. A secret is not a variable: `runway secrets set`.
    #[arg(required = true, value_name = "KEY=VALUE", value_parser = parse_assignment)]
    variables: Vec<(String, String)>,
    #[command(flatten)]
    target: Which,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct EnvUnsetArgs {
    /// The variables' names.
    #[arg(required = true, value_name = "KEY")]
    names: Vec<String>,
    #[command(flatten)]
    target: Which,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct EnvListArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct AuditArgs {
    #[command(subcommand)]
    command: Option<AuditCommand>,
    /// How many entries: the last N (default 50), newest first; or N from --after on.
    #[arg(short = 'n', long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    limit: u32,
    /// The entries after this id, oldest first (to page through the whole log).
    #[arg(long, value_name = "ID")]
    after: Option<i64>,
    /// Only what concerns this service: it, its environments, deployments and secrets.
    #[arg(short, long, value_name = "NAME")]
    service: Option<String>,
    /// Only what this actor did: a token's name, an identity (`ci:…`), `reconciler` or
    /// `acme` for the platform's own.
    #[arg(long, value_name = "ACTOR")]
    actor: Option<String>,
    /// Only this action (`deploy`, `secret.set`), or a family of them (`secret` for
    /// `secret.set` and `secret.unset`).
    #[arg(long, value_name = "ACTION")]
    action: Option<String>,
    /// Only entries since then: a duration before now (90s, 10m, 2h, 1d) or an RFC 3339
    /// time (2026-11-24T10:00:00Z).
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// Only people's actions (tokens and identities), or only the platform's own (the
    /// reconciler's rollout events, ACME's certificates).
    #[arg(long, value_enum)]
    by: Option<By>,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum AuditCommand {
    /// Check the audit log's hash chain: each entry's hash recomputed from its content and
    /// the hash before it. Exits 1 naming the first entry changed or removed. With --file,
    /// checks an exported copy (JSON lines, as `audit.export` writes them) here, offline.
    Verify(AuditVerifyArgs),
    /// Where each export sink stands: the last entry it acknowledged, how many it has still
    /// to get, its last failure.
    Export(OutputArg),
}

#[derive(Debug, clap::Args)]
pub(crate) struct AuditVerifyArgs {
    /// An exported copy to check instead of the server's log (no token needed). It may start
    /// after the first entry and hold entries twice (the export is at least once).
    #[arg(long, value_name = "PATH")]
    file: Option<std::path::PathBuf>,
    #[command(flatten)]
    output: OutputArg,
}

/// Whose audit entries: `--by`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum By {
    /// Tokens and identities: people and CI jobs.
    People,
    /// The platform's own: the reconciler, ACME.
    Platform,
}

#[derive(Debug, clap::Args)]
pub(crate) struct TopArgs {
    /// Print once and exit, rather than refreshing until Ctrl-C.
    #[arg(long)]
    once: bool,
    /// How often to refresh (e.g. 2s, 10s).
    #[arg(long, default_value = "2s", value_parser = crate::platform::parse_duration)]
    interval: std::time::Duration,
    #[command(flatten)]
    output: OutputArg,
}

/// `runway top`: every routed revision the token may read, busiest first.
pub(crate) fn top(args: &TopArgs) -> anyhow::Result<ExitCode> {
    let client = client()?;
    let rt = tokio()?;
    loop {
        let mut traffic = rt.block_on(client.traffic())?;
        traffic.sort_by(|a, b| {
            b.requests_per_second
                .total_cmp(&a.requests_per_second)
                .then_with(|| {
                    (&a.service, &a.env, &a.revision).cmp(&(&b.service, &b.env, &b.revision))
                })
        });
        if args.output.output == Output::Json {
            print_json(&traffic)?;
        } else {
            let mut rows = vec![[
                "SERVICE".to_owned(),
                "ENV".to_owned(),
                "REVISION".to_owned(),
                "REQ/S".to_owned(),
                "5XX".to_owned(),
                "P99".to_owned(),
            ]];
            for t in &traffic {
                let [rate, errors, p99] = crate::platform::traffic_cells(Some(t));
                rows.push([
                    t.service.clone(),
                    t.env.clone(),
                    t.revision.clone(),
                    rate,
                    errors,
                    p99,
                ]);
            }
            let mut screen = String::new();
            if !args.once {
                // Clear the terminal and go home, as top does.
                screen.push_str("\x1b[2J\x1b[H");
            }
            screen.push_str(&table(&rows));
            let window = traffic.iter().map(|t| t.window_seconds).fold(0.0, f64::max);
            screen.push_str(&if traffic.is_empty() {
                "nothing routed yet\n".to_owned()
            } else {
                format!(
                    "{} revisions routed; figures over the last {window:.0} s (the control plane \
                     reads the ingress every 10 s: a revision routed since has none yet)\n",
                    traffic.len(),
                )
            });
            print_stdout(&screen);
        }
        if args.once {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(args.interval);
    }
}

/// `KEY=VALUE`, split at the first `=`.
fn parse_assignment(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

pub(crate) fn open(args: &OpenArgs) -> anyhow::Result<ExitCode> {
    let name = args.target.service_name()?;
    let env = &args.target.env;
    let client = client()?;
    let status = tokio()?.block_on(client.status(&name, env))?;
    if status.routes.is_empty() {
        bail!("{name} is not served in {env} yet: `runway deploy -e {env}` first");
    }
    let url = status.url;
    if args.print {
        print_stdout(&format!("{url}\n"));
        return Ok(ExitCode::SUCCESS);
    }
    let Some(opener) = opener() else {
        print_stdout(&format!("{url}\n"));
        eprintln!("runway: no browser to open it with (set BROWSER, or install xdg-utils)");
        return Ok(ExitCode::SUCCESS);
    };
    eprintln!("runway: opening {url}");
    let status = Command::new(&opener)
        .arg(&url)
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("cannot run {opener}"))?;
    if !status.success() {
        bail!("{opener} could not open {url} ({status})");
    }
    Ok(ExitCode::SUCCESS)
}

/// What opens a URL here: `$BROWSER`, else the desktop's opener when it is installed.
pub(crate) fn opener() -> Option<String> {
    if let Some(browser) = std::env::var("BROWSER").ok().filter(|b| !b.is_empty()) {
        return Some(browser);
    }
    let desktop = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    runway_runtime::local::on_path(std::path::Path::new(desktop)).then(|| desktop.to_owned())
}

pub(crate) fn env(command: &EnvCommand) -> anyhow::Result<ExitCode> {
    let (target, request, wait, output) = match command {
        EnvCommand::List(args) => return env_list(args),
        EnvCommand::Set(args) => (
            &args.target,
            SetVariables {
                set: args.variables.iter().cloned().collect(),
                ..SetVariables::default()
            },
            &args.wait,
            args.output.output,
        ),
        EnvCommand::Unset(args) => (
            &args.target,
            SetVariables {
                unset: args.names.clone(),
                ..SetVariables::default()
            },
            &args.wait,
            args.output.output,
        ),
    };
    let name = target.service_name()?;
    let client = client()?;
    let rt = tokio()?;
    let deployment = rt.block_on(client.set_variables(&name, &target.env, &request))?;
    if output == Output::Text {
        print_stdout(&format!(
            "deployment {} of {name} to {}: revision {} ({}), with the variables changed\n",
            deployment.id,
            target.env,
            deployment.to_revision.as_str(),
            deployment.state.as_str()
        ));
    }
    finish(&rt, &client, deployment, wait, output)
}

fn env_list(args: &EnvListArgs) -> anyhow::Result<ExitCode> {
    let name = args.target.service_name()?;
    let env = &args.target.env;
    let client = client()?;
    let rt = tokio()?;
    let status = rt.block_on(client.status(&name, env))?;
    let Some(serving) = status.routes.iter().max_by_key(|r| r.weight) else {
        bail!("{name} is not deployed to {env} yet");
    };
    let revisions = rt.block_on(client.revisions(&name, env))?;
    let Some(revision) = revisions.iter().find(|r| r.name == serving.revision) else {
        bail!(
            "revision {} is not among {name}'s revisions",
            serving.revision
        );
    };
    // The manifest's own variables, and those set on top (env file, `env set`).
    let manifest: Option<Manifest> = serde_json::from_value(revision.manifest.clone()).ok();
    let from_manifest = manifest
        .map(|m| ServiceConfig::from_manifest(&m, Some(env), &BTreeMap::new()).env)
        .unwrap_or_default();
    let mut all: BTreeMap<&str, (&str, &str)> = from_manifest
        .iter()
        .map(|(k, v)| (k.as_str(), (v.as_str(), "manifest")))
        .collect();
    let env_file = format!(".runway/env-{env}.yml");
    for (key, value) in &revision.env_vars {
        let from = if revision.set_variables.contains(key) {
            "runway env set"
        } else {
            env_file.as_str()
        };
        all.insert(key, (value, from));
    }
    if args.output.output == Output::Json {
        let map: BTreeMap<&str, &str> = all.iter().map(|(k, (v, _))| (*k, *v)).collect();
        let from: BTreeMap<&str, &str> = all.iter().map(|(k, (_, f))| (*k, *f)).collect();
        print_json(&serde_json::json!({
            "revision": revision.name,
            "variables": map,
            "from": from,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    // A value is a tenant's: shown with its control characters escaped.
    let mut rows = vec![["NAME".to_owned(), "VALUE".to_owned(), "FROM".to_owned()]];
    rows.extend(all.iter().map(|(k, (v, from))| {
        [
            terminal::line(k).into_owned(),
            terminal::line(v).into_owned(),
            (*from).to_owned(),
        ]
    }));
    print_stdout(&format!("{} serves {name} in {env}\n", revision.name));
    print_stdout(&table(&rows));
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn audit(args: &AuditArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        Some(AuditCommand::Verify(verify)) => return audit_verify(verify),
        Some(AuditCommand::Export(output)) => return audit_export(output),
        None => {}
    }
    let client = client()?;
    let filter = crate::api::AuditFilter {
        service: args.service.as_deref(),
        actor: args.actor.as_deref(),
        action: args.action.as_deref(),
        since: args.since.as_deref(),
        by: args.by.map(|by| match by {
            By::People => runway_api::types::AuditBy::People,
            By::Platform => runway_api::types::AuditBy::Platform,
        }),
    };
    let mut entries = tokio()?.block_on(client.audit(args.after, args.limit, &filter))?;
    // The last entries newest first, as people read a log; pages (--after) in order.
    if args.after.is_none() {
        entries.reverse();
    }
    if args.output.output == Output::Json {
        print_json(&entries)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = vec![[
        "ID".to_owned(),
        "AT".to_owned(),
        "ACTOR".to_owned(),
        "ACTION".to_owned(),
        "TARGET".to_owned(),
        "DETAIL".to_owned(),
    ]];
    rows.extend(entries.iter().map(|e| {
        let detail = readable(&e.detail);
        // An actor may be an identity token's claims, a detail quote an app's output.
        [
            e.id.to_string(),
            e.at.clone(),
            terminal::line(&e.actor).into_owned(),
            e.action.clone(),
            terminal::line(&e.target).into_owned(),
            terminal::line(&detail).into_owned(),
        ]
    }));
    print_stdout(&table(&rows));
    Ok(ExitCode::SUCCESS)
}

/// `runway audit verify`: the server's chain, or an exported file's.
fn audit_verify(args: &AuditVerifyArgs) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.file {
        return audit_verify_file(path, args.output.output);
    }
    let verified = tokio()?.block_on(client()?.audit_verify())?;
    if args.output.output == Output::Json {
        print_json(&verified)?;
    } else {
        match &verified.first_broken {
            None => print_stdout(&format!(
                "the audit log's chain holds: {} entries, up to entry {} ({})\n",
                verified.entries, verified.head.id, verified.head.hash
            )),
            Some(broken) => eprintln!(
                "runway: the audit log's chain is broken at entry {}: {} ({} entries before it \
                 check out)",
                broken.id,
                terminal::line(&broken.reason),
                verified.entries
            ),
        }
        if !verified.sinks.is_empty() {
            print_stdout(&sinks_table(&verified.sinks));
        }
    }
    Ok(if verified.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What `runway audit verify --file` found.
#[derive(Debug, serde::Serialize)]
struct FileVerification {
    ok: bool,
    /// Distinct entries checked before the first break (all when `ok`).
    entries: u64,
    /// The first entry in the file, and the last checked.
    first: Option<i64>,
    last: Option<runway_api::audit::AuditHeadView>,
    first_broken: Option<FileBreak>,
}

#[derive(Debug, serde::Serialize)]
struct FileBreak {
    /// The entry, when its line could be read.
    id: Option<i64>,
    /// Its line in the file, from 1.
    line: u64,
    reason: String,
}

fn audit_verify_file(path: &std::path::Path, output: Output) -> anyhow::Result<ExitCode> {
    use std::io::BufRead;
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut chain = runway_store::AuditChain::exported();
    let mut first = None;
    let mut broken = None;
    for (index, line) in std::io::BufReader::new(file).lines().enumerate() {
        let number = index as u64 + 1;
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let entry: runway_store::AuditEntry = match serde_json::from_str(&line) {
            Ok(entry) => entry,
            Err(error) => {
                broken = Some(FileBreak {
                    id: None,
                    line: number,
                    reason: format!("it is not an audit entry: {error}"),
                });
                break;
            }
        };
        first.get_or_insert(entry.id);
        if let Err(found) = chain.push(&entry) {
            broken = Some(FileBreak {
                id: Some(found.id),
                line: number,
                reason: found.reason,
            });
            break;
        }
    }
    let result = FileVerification {
        ok: broken.is_none(),
        entries: chain.entries(),
        first,
        last: chain
            .last()
            .map(|(id, hash)| runway_api::audit::AuditHeadView {
                id,
                hash: hash.to_owned(),
            }),
        first_broken: broken,
    };
    if output == Output::Json {
        print_json(&result)?;
    } else {
        match (&result.first_broken, &result.last) {
            (None, Some(last)) => print_stdout(&format!(
                "{}: the chain holds: {} entries, {} to {} ({})\n",
                path.display(),
                result.entries,
                result.first.unwrap_or(last.id),
                last.id,
                last.hash
            )),
            (None, None) => print_stdout(&format!("{}: no entries\n", path.display())),
            (Some(broken), _) => eprintln!(
                "runway: {}: the chain is broken at line {}{}: {}",
                path.display(),
                broken.line,
                broken
                    .id
                    .map(|id| format!(" (entry {id})"))
                    .unwrap_or_default(),
                terminal::line(&broken.reason)
            ),
        }
    }
    Ok(if result.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `runway audit export`: each sink's cursor and lag.
fn audit_export(output: &OutputArg) -> anyhow::Result<ExitCode> {
    let sinks = tokio()?.block_on(client()?.audit_export())?;
    if output.output == Output::Json {
        print_json(&sinks)?;
    } else if sinks.is_empty() {
        print_stdout("no export sink has sent or failed anything yet (audit.export)\n");
    } else {
        print_stdout(&sinks_table(&sinks));
    }
    Ok(ExitCode::SUCCESS)
}

fn sinks_table(sinks: &[runway_api::audit::AuditSinkView]) -> String {
    let mut rows = vec![[
        "SINK".to_owned(),
        "CURSOR".to_owned(),
        "LAG".to_owned(),
        "ACKED".to_owned(),
        "DROPPED".to_owned(),
        "FAILING".to_owned(),
    ]];
    rows.extend(sinks.iter().map(|sink| {
        [
            sink.name.clone(),
            sink.cursor.to_string(),
            sink.lag.to_string(),
            sink.acked_at.clone().unwrap_or_else(|| "-".to_owned()),
            sink.this_replica
                .as_ref()
                .map_or_else(|| "-".to_owned(), |figures| figures.dropped.to_string()),
            match (&sink.failing_since, &sink.error) {
                (Some(since), Some(error)) => {
                    terminal::line(&format!("since {since}: {error}")).into_owned()
                }
                _ => "-".to_owned(),
            },
        ]
    }));
    table(&rows)
}

/// An audit entry's detail for people: `key=value` pairs, a value in quotes only when it has
/// a space, nested values as compact JSON.
fn readable(detail: &serde_json::Value) -> String {
    use serde_json::Value;
    let value = |value: &Value| match value {
        Value::String(text) if text.is_empty() || text.contains([' ', '"', '=']) => {
            format!("{text:?}")
        }
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    match detail {
        Value::Null => String::new(),
        Value::Object(map) => map
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("{k}={}", value(v)))
            .collect::<Vec<_>>()
            .join(" "),
        other => value(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_details_read_as_pairs() {
        let detail = serde_json::json!({
            "deployment": 7,
            "message": "instance hello-dev-00001-x started",
            "revision": "hello-dev-00001",
            "from_revision": null,
            "weights": {"a": 100},
        });
        assert_eq!(
            readable(&detail),
            "deployment=7 message=\"instance hello-dev-00001-x started\" \
             revision=hello-dev-00001 weights={\"a\":100}"
        );
        assert_eq!(readable(&serde_json::Value::Null), "");
        assert_eq!(readable(&serde_json::json!({})), "");
    }

    #[test]
    fn assignments_split_at_the_first_equals_sign() {
        assert_eq!(
            parse_assignment("URL=http://x/?a=b"),
            Ok(("URL".to_owned(), "http://x/?a=b".to_owned()))
        );
        assert_eq!(
            parse_assignment("EMPTY="),
            Ok(("EMPTY".to_owned(), String::new()))
        );
        assert!(parse_assignment("NOVALUE").is_err());
        assert!(parse_assignment("=x").is_err());
    }
}
