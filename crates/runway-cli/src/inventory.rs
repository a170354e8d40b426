//! `runway inventory validate|diff|apply FILE`: the platform's inventory (which services are
//! onboarded, and their owners, environments and upstream keys) as a document kept in a
//! repository and changed through review. `validate` needs no server; `diff` and `apply` send
//! the document to it, which compares it with the services there are and, for `apply`, makes
//! them what it says in one transaction, audited with the document's digest.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use runway_manifest::{SourceFile, load_inventory};

use crate::api::{InventoryPlan, InventoryRequest};
use crate::platform::{OutputArg, client, print_json, tokio};
use crate::{EXIT_INVALID, Output, print_stdout};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum InventoryCommand {
    /// Check an inventory document against its schema (`runway inventory schema`), reporting
    /// every mistake with its file, line and field. Needs no server. Exit code 0 when valid,
    /// 1 when not.
    Validate(FileArgs),
    /// Show what applying the document would change: services onboarded, changed (field by
    /// field), decommissioned (only with --prune) or not listed and kept. Changes nothing.
    Diff(ApplyArgs),
    /// Make the services what the document says (admin): onboard, change, and with --prune
    /// decommission the services it does not list (their previews too). One transaction:
    /// all of it or nothing. Applying it again changes nothing. Audited as `inventory.apply`
    /// with the document's SHA-256.
    Apply(ApplyArgs),
    /// Print the inventory's JSON Schema (draft 2020-12), as `schemas/inventory-v1.json`.
    Schema,
}

#[derive(Debug, clap::Args)]
pub(crate) struct FileArgs {
    /// The inventory document (YAML or JSON).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ApplyArgs {
    #[command(flatten)]
    file: FileArgs,
    /// Decommission the services the document does not list. Without it they are kept, and
    /// said to be unlisted.
    #[arg(long)]
    prune: bool,
}

pub(crate) fn inventory(command: &InventoryCommand) -> anyhow::Result<ExitCode> {
    match command {
        InventoryCommand::Validate(args) => {
            let (name, text) = read(&args.file)?;
            let loaded = load_inventory(&SourceFile::new(name.as_str(), text.as_str()), &[]);
            let valid = loaded.diagnostics.is_empty();
            match args.output.output {
                Output::Json => print_json(&serde_json::json!({
                    "valid": valid,
                    "services": loaded.inventory.as_ref().map_or(0, |i| i.inventory.len()),
                    "diagnostics": loaded.diagnostics,
                }))?,
                Output::Text if valid => print_stdout(&format!(
                    "{name}: valid: {} services\n",
                    loaded.inventory.as_ref().map_or(0, |i| i.inventory.len())
                )),
                Output::Text => print_stdout(&format!(
                    "{}{name}: invalid: {} errors\n",
                    crate::validate::show(&loaded.diagnostics, &[(&name, &text)]),
                    loaded.diagnostics.len()
                )),
            }
            Ok(if valid {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_INVALID)
            })
        }
        InventoryCommand::Diff(args) => send(args, false),
        InventoryCommand::Apply(args) => send(args, true),
        InventoryCommand::Schema => {
            print_stdout(&runway_manifest::inventory_schema_json());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The file's name as shown in errors, and its text.
fn read(path: &std::path::Path) -> anyhow::Result<(String, String)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok((path.display().to_string(), text))
}

/// Checks the document here (so its mistakes show with their lines), then sends it.
fn send(args: &ApplyArgs, apply: bool) -> anyhow::Result<ExitCode> {
    let (name, text) = read(&args.file.file)?;
    let loaded = load_inventory(&SourceFile::new(name.as_str(), text.as_str()), &[]);
    if !loaded.diagnostics.is_empty() {
        eprint!(
            "{}",
            crate::validate::show(&loaded.diagnostics, &[(&name, &text)])
        );
        eprintln!(
            "error: {name} is invalid, so nothing was sent; `runway inventory validate {name}` checks it again"
        );
        return Ok(ExitCode::from(EXIT_INVALID));
    }
    let request = InventoryRequest {
        document: text,
        file: Some(name.clone()),
        apply,
        prune: args.prune,
    };
    let client = client()?;
    let plan = tokio()?.block_on(client.inventory(&request))?;
    match args.file.output.output {
        Output::Json => print_json(&plan)?,
        Output::Text => print_stdout(&describe(&name, &plan, args.prune)),
    }
    Ok(ExitCode::SUCCESS)
}

/// The plan for people: a line a service, then the counts.
fn describe(name: &str, plan: &InventoryPlan, prune: bool) -> String {
    let (onboard, change, decommission) = if plan.applied {
        ("onboarded", "changed", "decommissioned")
    } else {
        ("onboard", "change", "decommission")
    };
    let mut out = format!("{name} ({})\n", plan.digest);
    for created in &plan.create {
        let replaces = created.replaces.as_ref().map_or_else(String::new, |old| {
            format!(
                "; its project's service was {old}: a service is not renamed, {old} goes only \
                 with --prune"
            )
        });
        out.push_str(&format!(
            "  + {onboard} {} (owners: {}; environments: {}){replaces}\n",
            created.name,
            list(&created.owners),
            created.environments.join(", ")
        ));
    }
    for updated in &plan.update {
        let fields: Vec<String> = updated
            .changes
            .iter()
            .map(|c| format!("{} {} → {}", c.field, c.from, c.to))
            .collect();
        out.push_str(&format!(
            "  ~ {change} {}: {}\n",
            updated.name,
            fields.join("; ")
        ));
    }
    for gone in &plan.decommission {
        out.push_str(&format!(
            "  - {decommission} {gone} (not listed; --prune)\n"
        ));
    }
    for kept in &plan.unlisted {
        out.push_str(&format!(
            "  ? {kept} is not listed: kept{}\n",
            if prune {
                ""
            } else {
                " (--prune decommissions it)"
            }
        ));
    }
    let counts = [
        (plan.create.len(), onboard),
        (plan.update.len(), change),
        (plan.decommission.len(), decommission),
    ]
    .map(|(n, what)| {
        if plan.applied {
            format!("{n} {what}")
        } else {
            format!("{n} to {what}")
        }
    });
    out.push_str(&format!(
        "{}, {} unlisted and kept, {} unchanged{}\n",
        counts.join(", "),
        plan.unlisted.len(),
        plan.unchanged.len(),
        if plan.applied {
            format!("; applied, audited as inventory.apply {}", plan.digest)
        } else {
            String::new()
        }
    ));
    out
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}
