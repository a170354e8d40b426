//! `validate_received`: every object a client wrote, checked at once by
//! `kubernetes-validate --strict` (PyPI) against Kubernetes 1.33's schemas.

#![allow(
    clippy::print_stderr,
    reason = "test support: a skip is told to whoever runs the tests"
)]

use std::io::Write as _;
use std::process::Command;

use crate::Received;

const TOOL: &str = "kubernetes-validate";
const VERSION: &str = "1.33.0";

pub(crate) fn run(received: &[Received]) -> Result<(), String> {
    if received.is_empty() {
        return Ok(());
    }
    if let Err(why) = Command::new(TOOL).arg("--version").output() {
        let message = format!(
            "{TOOL} is not available ({why}): install it with `pip install kubernetes-validate`"
        );
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            return Err(message);
        }
        eprintln!("kube-standin: not validating what clients wrote: {message}");
        return Ok(());
    }
    let dir = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    // First pass: everything as received.
    let mut unique: Vec<&Received> = Vec::new();
    for r in received {
        if !unique.iter().any(|u| u.object == r.object) {
            unique.push(r);
        }
    }
    let objects: Vec<&serde_json::Value> = unique.iter().map(|r| &r.object).collect();
    let failures = check(dir.path(), "received", &objects)?;
    let mut errors = Vec::new();
    // An apply configuration may leave out required fields another manager set: those are
    // checked again as the object the apply produced.
    let mut second: Vec<&serde_json::Value> = Vec::new();
    for (i, message) in failures {
        match unique[i].result.as_ref() {
            Some(result) if message.contains("is a required property") => second.push(result),
            _ => errors.push(describe(unique[i].object.clone(), &message)),
        }
    }
    if !second.is_empty() {
        for (i, message) in check(dir.path(), "applied", &second)? {
            errors.push(describe(
                second[i].clone(),
                &format!("{message} (as applied)"),
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

fn describe(object: serde_json::Value, message: &str) -> String {
    let kind = object.get("kind").and_then(|k| k.as_str()).unwrap_or("?");
    let name = object
        .pointer("/metadata/name")
        .and_then(|n| n.as_str())
        .unwrap_or("?");
    format!("{kind} {name}: {message}")
}

/// Writes each object to its own file and runs the tool on all of them; returns the index
/// and message of each that failed.
fn check(
    dir: &std::path::Path,
    prefix: &str,
    objects: &[&serde_json::Value],
) -> Result<Vec<(usize, String)>, String> {
    let mut paths = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        let path = dir.join(format!("{prefix}-{i}.json"));
        let mut f =
            std::fs::File::create(&path).map_err(|e| format!("write {}: {e}", path.display()))?;
        f.write_all(o.to_string().as_bytes())
            .map_err(|e| format!("write {}: {e}", path.display()))?;
        paths.push(path);
    }
    let out = Command::new(TOOL)
        .args(["--strict", "--kubernetes-version", VERSION, "--no-warn"])
        .args(&paths)
        .output()
        .map_err(|e| format!("run {TOOL}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut failures = Vec::new();
    for line in text.lines() {
        if line.starts_with("INFO") {
            continue;
        }
        let Some(i) = paths
            .iter()
            .position(|p| line.contains(&*p.to_string_lossy()))
        else {
            continue;
        };
        let message = line
            .split_once(": ")
            .map_or(line, |(_, m)| m)
            .trim()
            .to_owned();
        failures.push((i, message));
    }
    if failures.is_empty() && !out.status.success() {
        return Err(format!("{TOOL} failed: {text}"));
    }
    Ok(failures)
}
