//! `runway preview list|stop`: a service's preview environments (made by `runway deploy
//! --preview NAME`), each a service of its own (`NAME--SERVICE`) in environment `preview`.

use std::process::ExitCode;

use crate::api::PreviewView;
use crate::local::table;
use crate::platform::{OutputArg, client, print_json, service_name, tokio};
use crate::{Output, print_stdout};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum PreviewCommand {
    /// List a service's previews: their URLs, what they were made from, and when they go
    /// (the server's time to live from each one's last deploy). `--all` lists every
    /// service's (admin only).
    List(ListArgs),
    /// Stop a preview now: its instances stop and its revisions go, as when its time runs
    /// out. `runway deploy --preview NAME` makes it again.
    Stop(StopArgs),
}

/// Whose previews.
#[derive(Debug, clap::Args)]
pub(crate) struct Whose {
    /// The service, by name (default: the one in the current directory's `.runway/`).
    #[arg(short, long)]
    service: Option<String>,
}

impl Whose {
    fn service(&self) -> anyhow::Result<String> {
        service_name(None, self.service.as_deref())
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    whose: Whose,
    /// Every service's previews (admin only).
    #[arg(long, conflicts_with = "service")]
    all: bool,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct StopArgs {
    /// The preview's name (`mr-12`), as `runway deploy --preview` was given it.
    name: String,
    #[command(flatten)]
    whose: Whose,
    /// A preview that is not there (stopped already, or gone with its time) is no error: for
    /// a merge request's stop job.
    #[arg(long)]
    missing_ok: bool,
    #[command(flatten)]
    output: OutputArg,
}

pub(crate) fn preview(command: &PreviewCommand) -> anyhow::Result<ExitCode> {
    let client = client()?;
    let rt = tokio()?;
    match command {
        PreviewCommand::List(args) => {
            let service = if args.all {
                None
            } else {
                Some(args.whose.service()?)
            };
            let list = rt.block_on(client.previews(service.as_deref()))?;
            match args.output.output {
                Output::Json => print_json(&list)?,
                Output::Text if list.is_empty() => print_stdout(&format!(
                    "no previews{}: `runway deploy --preview NAME` makes one\n",
                    service.map(|s| format!(" of {s}")).unwrap_or_default()
                )),
                Output::Text => print_stdout(&table(&rows(&list))),
            }
        }
        PreviewCommand::Stop(args) => {
            let service = args.whose.service()?;
            let stopped = match rt.block_on(client.stop_preview(&service, &args.name)) {
                Ok(stopped) => stopped,
                Err(e) if args.missing_ok && e.is_not_found() => {
                    eprintln!("runway: {e} (already stopped)");
                    return Ok(ExitCode::SUCCESS);
                }
                Err(e) => return Err(e.into()),
            };
            match args.output.output {
                Output::Json => print_json(&stopped)?,
                Output::Text => print_stdout(&format!(
                    "stopped preview {} of {service} ({} decommissioned)\n",
                    args.name, stopped.decommissioned
                )),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The listing's table: a header, then a preview a row.
fn rows(list: &[PreviewView]) -> Vec<[String; 6]> {
    let mut rows = vec![[
        "PREVIEW".to_owned(),
        "SERVICE".to_owned(),
        "FROM".to_owned(),
        "URL".to_owned(),
        "LAST DEPLOY".to_owned(),
        "EXPIRES".to_owned(),
    ]];
    for p in list {
        let from = if p.origin["fork"] == true {
            format!("{} (a fork: no secrets)", p.base_env)
        } else {
            p.base_env.clone()
        };
        rows.push([
            p.name.clone(),
            p.parent.clone(),
            from,
            p.url.clone(),
            p.updated_at.clone(),
            p.expires_at.clone(),
        ]);
    }
    rows
}
