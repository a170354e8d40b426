//! `runway domains add|list|remove`: custom domains, routed to a service's environment and
//! served with a certificate the control plane obtains from its ACME directory.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::api::{AddDomain, DomainView};
use crate::local::table;
use crate::platform::{OutputArg, client, print_json, tokio};
use crate::{Output, print_stdout};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum DomainsCommand {
    /// Route a domain to a service's environment (admin only) and order its certificate.
    ///
    /// Point the name's DNS at the ingress first: the ACME server checks it over HTTP (port
    /// 80) or TLS (port 443) there. `--wait` waits until the certificate is issued, or its
    /// order fails (the ACME server's reason is shown).
    Add(AddArgs),
    /// List custom domains and their certificates: pending, issued (with the expiry), or
    /// failed (with the reason).
    List(ListArgs),
    /// Remove a custom domain (admin only): its route and certificate go.
    Remove(RemoveArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct AddArgs {
    /// The domain (`www.example.com`).
    domain: String,
    /// The service it reaches.
    #[arg(long)]
    service: String,
    /// In this environment.
    #[arg(long = "env", value_name = "ENV")]
    env: String,
    /// Wait until the certificate is issued or its order fails.
    #[arg(long)]
    wait: bool,
    /// How long --wait waits, in seconds.
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    timeout: u64,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// Only this service's.
    #[arg(long)]
    service: Option<String>,
    /// Only in this environment.
    #[arg(long = "env", value_name = "ENV")]
    env: Option<String>,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RemoveArgs {
    /// The domain.
    domain: String,
    #[command(flatten)]
    output: OutputArg,
}

pub(crate) fn domains(command: &DomainsCommand) -> anyhow::Result<ExitCode> {
    let client = client()?;
    let rt = tokio()?;
    match command {
        DomainsCommand::Add(args) => {
            let request = AddDomain {
                domain: args.domain.clone(),
                service: args.service.clone(),
                env: args.env.clone(),
            };
            let mut domain = rt.block_on(client.add_domain(&request))?;
            let text = args.output.output == Output::Text;
            if text {
                print_stdout(&format!(
                    "{} routed to {} in {}\n",
                    domain.domain, domain.service, domain.env
                ));
            }
            if args.wait {
                let deadline = Instant::now() + Duration::from_secs(args.timeout);
                let mut said = String::new();
                while domain.state == "pending" {
                    let now = describe(&domain);
                    if text && now != said {
                        eprintln!("  {now}");
                        said = now;
                    }
                    if Instant::now() >= deadline {
                        bail!(
                            "{} has no certificate after {} s: see `runway domains list`",
                            domain.domain,
                            args.timeout
                        );
                    }
                    std::thread::sleep(Duration::from_millis(500));
                    let list = rt.block_on(client.domains())?;
                    match list.into_iter().find(|d| d.domain == domain.domain) {
                        Some(found) => domain = found,
                        None => bail!("{} was removed meanwhile", domain.domain),
                    }
                }
            }
            match args.output.output {
                Output::Json => print_json(&domain)?,
                Output::Text => print_stdout(&format!("  {}\n", describe(&domain))),
            }
            if args.wait && domain.state == "failed" {
                return Ok(ExitCode::FAILURE);
            }
        }
        DomainsCommand::List(args) => {
            let list: Vec<DomainView> = rt
                .block_on(client.domains())?
                .into_iter()
                .filter(|d| args.service.as_ref().is_none_or(|s| *s == d.service))
                .filter(|d| args.env.as_ref().is_none_or(|e| *e == d.env))
                .collect();
            match args.output.output {
                Output::Json => print_json(&list)?,
                Output::Text if list.is_empty() => {
                    print_stdout("no custom domains: add one with `runway domains add`\n");
                }
                Output::Text => {
                    let mut rows = vec![[
                        "DOMAIN".to_owned(),
                        "SERVICE".to_owned(),
                        "ENV".to_owned(),
                        "CERTIFICATE".to_owned(),
                    ]];
                    for d in &list {
                        rows.push([
                            d.domain.clone(),
                            d.service.clone(),
                            d.env.clone(),
                            describe(d),
                        ]);
                    }
                    print_stdout(&table(&rows));
                }
            }
        }
        DomainsCommand::Remove(args) => {
            rt.block_on(client.remove_domain(&args.domain))?;
            match args.output.output {
                Output::Json => print_json(&serde_json::json!({ "removed": args.domain }))?,
                Output::Text => print_stdout(&format!("removed {}\n", args.domain)),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A domain's certificate in a few words: `issued, expires …`, `failed: why (retry at …)`.
fn describe(d: &DomainView) -> String {
    let expiry = d
        .not_after
        .as_deref()
        .map(|at| format!(", expires {at}"))
        .unwrap_or_default();
    match d.state.as_str() {
        "issued" => format!("issued{expiry}"),
        "failed" => {
            let why = d.detail.as_deref().unwrap_or("no reason given");
            let retry = d
                .next_attempt_at
                .as_deref()
                .map(|at| format!(" (next try {at})"))
                .unwrap_or_default();
            let kept = if d.not_after.is_some() {
                format!("; the current certificate is kept{expiry}")
            } else {
                String::new()
            };
            format!("failed: {why}{retry}{kept}")
        }
        _ => match &d.detail {
            Some(why) => format!("pending: {why}"),
            None => "pending: the certificate is being ordered".to_owned(),
        },
    }
}
