//! `runway validate`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use runway_manifest::{Diagnostic, Severity, load};
use serde::Serialize;

use crate::repo::{Repository, discover};
use crate::{EXIT_INVALID, Output, RepoArg, print_stdout};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    repo: RepoArg,
    /// Print results as text or as one JSON document.
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

#[derive(Debug, Serialize)]
struct Report {
    valid: bool,
    errors: usize,
    warnings: usize,
    services: Vec<ServiceReport>,
    diagnostics: Vec<Diagnostic>,
}

#[derive(Debug, Serialize)]
struct ServiceReport {
    id: String,
    name: Option<String>,
    valid: bool,
    files: Vec<String>,
    environments: Vec<String>,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let repo = discover(&args.repo.path)?;
    let report = check(&repo);
    match args.output {
        Output::Json => print_stdout(&format!("{}\n", serde_json::to_string_pretty(&report)?)),
        Output::Text => print_stdout(&text(&report, &repo)),
    }
    Ok(if report.valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_INVALID)
    })
}

/// What `runway deploy` checks before it sends anything: `Err` with the findings as
/// `runway validate` prints them when one is an error; otherwise `Ok` with the warnings alone,
/// as validate prints them (empty when there are none), for deploy to show before it goes on.
pub(crate) fn before_deploy(repo: &Repository) -> Result<String, String> {
    let report = check(repo);
    if report.valid {
        Ok(findings(&report, repo))
    } else {
        Err(text(&report, repo))
    }
}

fn check(repo: &Repository) -> Report {
    let mut diagnostics = Vec::new();
    let mut services = Vec::new();
    for (file, reason) in &repo.ignored {
        diagnostics.push(Diagnostic::warning(
            None,
            "",
            format!("{file} is not read: {reason}"),
        ));
    }
    for files in &repo.services {
        let loaded = load(files);
        let mut names: Vec<String> = files.base.iter().map(|f| f.name.to_string()).collect();
        names.extend(files.overrides.values().map(|f| f.name.to_string()));
        names.extend(files.env_files.values().map(|f| f.name.to_string()));
        let mut environments: Vec<String> = files
            .overrides
            .keys()
            .chain(files.env_files.keys())
            .cloned()
            .collect();
        environments.sort();
        environments.dedup();
        services.push(ServiceReport {
            id: files.id.clone(),
            name: loaded.service.as_ref().map(|s| s.name().to_owned()),
            valid: loaded.service.is_some(),
            files: names,
            environments,
        });
        diagnostics.extend(loaded.diagnostics);
    }
    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    Report {
        valid: errors == 0 && services.iter().all(|s| s.valid),
        errors,
        warnings: diagnostics.len() - errors,
        services,
        diagnostics,
    }
}

/// Each finding with its location and the line it points at, a caret under the column.
fn findings(report: &Report, repo: &Repository) -> String {
    let texts: Vec<(&str, &str)> = repo
        .texts
        .iter()
        .map(|(name, text)| (name.as_str(), text.as_str()))
        .collect();
    show(&report.diagnostics, &texts)
}

/// `diagnostics`, each with its location and the line of `texts` (file name, text) it points
/// at, a caret under the column.
pub(crate) fn show(diagnostics: &[Diagnostic], texts: &[(&str, &str)]) -> String {
    let mut out = String::new();
    let lines: BTreeMap<&str, Vec<&str>> = texts
        .iter()
        .map(|(name, text)| (*name, runway_manifest::yaml_lines(text)))
        .collect();
    for d in diagnostics {
        let severity = match d.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let _ = writeln!(out, "{severity}: {}", d.headline());
        if let Some(at) = &d.location {
            let field = if d.path.is_empty() {
                String::new()
            } else {
                format!(" at {}", d.path)
            };
            let _ = writeln!(out, "  --> {at}{field}");
            if let Some(line) = lines
                .get(at.file.as_ref())
                .and_then(|l| l.get(at.line.wrapping_sub(1)))
            {
                let number = at.line.to_string();
                let pad = " ".repeat(number.len());
                let caret = " ".repeat(
                    line.chars()
                        .take(at.column.saturating_sub(1))
                        .map(|c| if c == '\t' { 8 } else { 1 })
                        .sum(),
                );
                let _ = writeln!(out, "{pad} |\n{number} | {line}\n{pad} | {caret}^");
            }
        } else if !d.path.is_empty() {
            let _ = writeln!(out, "  --> {}", d.path);
        }
        out.push('\n');
    }
    out
}

fn text(report: &Report, repo: &Repository) -> String {
    let mut out = findings(report, repo);
    for service in &report.services {
        let label = service.name.clone().unwrap_or_else(|| {
            if service.id.is_empty() {
                "service".into()
            } else {
                service.id.clone()
            }
        });
        let mark = if service.valid { "valid" } else { "invalid" };
        let envs = if service.environments.is_empty() {
            String::new()
        } else {
            format!(" (environments: {})", service.environments.join(", "))
        };
        let _ = writeln!(out, "{label}: {mark}: {}{envs}", service.files.join(", "));
    }
    let _ = writeln!(
        out,
        "{} error{}, {} warning{} in {} service{}",
        report.errors,
        plural(report.errors),
        report.warnings,
        plural(report.warnings),
        report.services.len(),
        plural(report.services.len())
    );
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
