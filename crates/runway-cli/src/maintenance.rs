//! `runway maintenance on|off|status`: a service's requests answered with a 503 and a message,
//! its instances left running.

use std::process::ExitCode;

use crate::api::{MaintenanceView, SetMaintenance};
use crate::platform::{OutputArg, Target, client, print_json, tokio};
use crate::{Output, print_stdout};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum MaintenanceCommand {
    /// Answer the service's requests in the environment with a 503, `--message` as its body
    /// and `Retry-After`, but for the clients `--allow` names (a maintainer's act). Instances
    /// keep running and deploys go on; the ingress has it within a table's propagation. Run
    /// it again to change the message or the networks.
    On(OnArgs),
    /// Serve the service's requests again.
    Off(OffArgs),
    /// Whether the service is in maintenance, since when, by whom, and what clients are told.
    Status(OffArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct OnArgs {
    #[command(flatten)]
    target: Target,
    /// What clients are told (at most 1024 bytes); default: that the service is under
    /// maintenance.
    #[arg(short, long, default_value = "")]
    message: String,
    /// A network (`203.0.113.0/24`, `2001:db8::1`) whose clients still reach the service, to
    /// check it before it opens again; repeat for more.
    #[arg(long, value_name = "NETWORK")]
    allow: Vec<String>,
    /// The `Retry-After` clients are given, in seconds (at most 86400).
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    retry_after: u32,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct OffArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    output: OutputArg,
}

pub(crate) fn maintenance(command: &MaintenanceCommand) -> anyhow::Result<ExitCode> {
    let client = client()?;
    let rt = tokio()?;
    match command {
        MaintenanceCommand::On(args) => {
            let service = args.target.service_name()?;
            let env = &args.target.env;
            let request = SetMaintenance {
                message: args.message.clone(),
                allow: args.allow.clone(),
                retry_after_seconds: Some(args.retry_after),
            };
            let set = rt.block_on(client.set_maintenance(&service, env, &request))?;
            match args.output.output {
                Output::Json => print_json(&set)?,
                Output::Text => print_stdout(&describe(&set)),
            }
        }
        MaintenanceCommand::Off(args) => {
            let service = args.target.service_name()?;
            let env = &args.target.env;
            rt.block_on(client.end_maintenance(&service, env))?;
            match args.output.output {
                Output::Json => print_json(&serde_json::json!({
                    "service": service, "env": env, "maintenance": false
                }))?,
                Output::Text => print_stdout(&format!("{service} in {env} is served again\n")),
            }
        }
        MaintenanceCommand::Status(args) => {
            let service = args.target.service_name()?;
            let env = &args.target.env;
            let found = rt.block_on(client.maintenance(&service, env))?;
            match (args.output.output, found) {
                (Output::Json, found) => print_json(&found)?,
                (Output::Text, Some(set)) => print_stdout(&describe(&set)),
                (Output::Text, None) => {
                    print_stdout(&format!("{service} in {env} is not in maintenance\n"));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn describe(m: &MaintenanceView) -> String {
    let safe = crate::terminal::line;
    let mut out = format!(
        "{} in {} is in maintenance since {} (by {}): clients get 503, Retry-After {} s\n",
        m.service,
        m.env,
        m.since,
        safe(&m.set_by),
        m.retry_after_seconds
    );
    if !m.message.is_empty() {
        out.push_str(&format!("  message: {}\n", safe(&m.message)));
    }
    if !m.allow.is_empty() {
        out.push_str(&format!("  let through: {}\n", m.allow.join(", ")));
    }
    out
}
