//! `deployer targets`: the managers' metrics endpoints as a Prometheus `file_sd` file, so a
//! Prometheus server (`file_sd_configs`) follows each deployment version as it comes and goes.
//!
//! ```json
//! [{"targets": ["10.0.0.5:9252"],
//!   "labels": {"grit_runner_manager": "blue-0", "grit_instance_name": "runner-blue-0"}}]
//! ```
//!
//! One entry a manager, sorted by name. The endpoint is the output's optional
//! `metrics_address` (`host:port`), else the host of `address` with `--metrics-port` (default
//! 9252, GitLab Runner's metrics port). `--label KEY=VALUE` adds labels to every entry (such as
//! `deployment=blue`) and wins over the two above. No managers is `[]`: Prometheus drops them.
//!
//! The file is written whole or not at all: a temporary file beside it, synced, then renamed
//! over it, so Prometheus never reads half a file.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::managers::Manager;

/// GitLab Runner's default metrics port.
pub(crate) const DEFAULT_METRICS_PORT: u16 = 9252;

#[derive(Debug, thiserror::Error)]
pub(crate) enum TargetsError {
    #[error(
        "runner manager {name:?}: no metrics endpoint: give `metrics_address` (host:port) in \
         its output, or an `address` whose host serves metrics on --metrics-port"
    )]
    NoEndpoint { name: String },
    #[error(
        "--label {text:?}: expected KEY=VALUE, KEY a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, \
         not starting with __)"
    )]
    BadLabel { text: String },
}

/// A `--label KEY=VALUE`.
pub(crate) fn parse_label(text: &str) -> Result<(String, String), TargetsError> {
    let bad = || TargetsError::BadLabel {
        text: text.to_owned(),
    };
    let (key, value) = text.split_once('=').ok_or_else(bad)?;
    let mut chars = key.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !key.starts_with("__");
    if !valid {
        return Err(bad());
    }
    Ok((key.to_owned(), value.to_owned()))
}

/// The host of an SSH `address` (`host:port`, `[v6]:port`, or a bare host), kept as Prometheus
/// wants it in a target (IPv6 in brackets).
fn host_of(address: &str) -> &str {
    if address.starts_with('[') {
        return address.find(']').map_or(address, |end| &address[..=end]);
    }
    match address.rsplit_once(':') {
        // A bare IPv6 address has several colons and no port.
        Some((host, _)) if !host.contains(':') => host,
        _ => address,
    }
}

/// The `file_sd` document.
pub(crate) fn file_sd(
    managers: &[Manager],
    metrics_port: u16,
    labels: &[(String, String)],
) -> Result<Value, TargetsError> {
    let mut entries = Vec::with_capacity(managers.len());
    for manager in managers {
        let target = if !manager.metrics_address.is_empty() {
            manager.metrics_address.clone()
        } else if !manager.address.is_empty() {
            let host = host_of(&manager.address);
            if host.starts_with('[') || !host.contains(':') {
                format!("{host}:{metrics_port}")
            } else {
                format!("[{host}]:{metrics_port}")
            }
        } else {
            return Err(TargetsError::NoEndpoint {
                name: manager.name.clone(),
            });
        };
        let mut entry_labels = Map::new();
        entry_labels.insert("grit_runner_manager".to_owned(), json!(manager.name));
        entry_labels.insert(
            "grit_instance_name".to_owned(),
            json!(manager.instance_name),
        );
        for (key, value) in labels {
            entry_labels.insert(key.clone(), json!(value));
        }
        entries.push(json!({"targets": [target], "labels": entry_labels}));
    }
    Ok(Value::Array(entries))
}

/// Writes `contents` to `path` whole: a temporary file in the same directory, synced, made
/// readable by all (Prometheus often runs as another user), renamed over `path`.
pub(crate) fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the output path names no file"))?;
    let mut temporary_name = std::ffi::OsString::from(".");
    temporary_name.push(name);
    temporary_name.push(format!(".tmp{}", std::process::id()));
    let temporary = dir.join(temporary_name);
    let result = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(contents)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager(name: &str, address: &str, metrics: &str) -> Manager {
        Manager {
            name: name.to_owned(),
            instance_name: format!("runner-{name}"),
            instance_id: String::new(),
            address: address.to_owned(),
            wrapper_address: "unix:///run/w.sock".parse().unwrap(),
            username: String::new(),
            ssh_key_pem: String::new(),
            metrics_address: metrics.to_owned(),
        }
    }

    #[test]
    fn endpoints_from_metrics_address_else_the_ssh_host() {
        let managers = [
            manager("a", "10.0.0.1:22", ""),
            manager("b", "10.0.0.2:22", "10.0.0.2:9400"),
            manager("c", "[fd00::3]:22", ""),
            manager("d", "runner-d.internal", ""),
        ];
        let labels = [("deployment".to_owned(), "blue".to_owned())];
        let document = file_sd(&managers, 9252, &labels).unwrap();
        let targets: Vec<_> = document
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| entry["targets"][0].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            targets,
            [
                "10.0.0.1:9252",
                "10.0.0.2:9400",
                "[fd00::3]:9252",
                "runner-d.internal:9252"
            ]
        );
        assert_eq!(
            document[0]["labels"],
            json!({"grit_runner_manager": "a", "grit_instance_name": "runner-a", "deployment": "blue"})
        );
        let error = file_sd(&[manager("e", "", "")], 9252, &[])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("runner manager \"e\": no metrics endpoint"),
            "{error}"
        );
        assert_eq!(file_sd(&[], 9252, &[]).unwrap(), json!([]));
    }

    #[test]
    fn labels_are_prometheus_label_names() {
        assert_eq!(
            parse_label("deployment=blue").unwrap(),
            ("deployment".to_owned(), "blue".to_owned())
        );
        assert_eq!(parse_label("_x=").unwrap().1, "");
        for bad in ["deployment", "1x=a", "a-b=c", "__name__=x", "=x"] {
            assert!(parse_label(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn writes_whole_files_readable_by_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("targets.json");
        write_atomically(&path, b"[]").unwrap();
        write_atomically(&path, b"[1]").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"[1]");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
