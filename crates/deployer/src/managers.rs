//! The Terraform output contract: `grit_runner_managers`, a map from a name (used only in logs)
//! to a runner manager. No I/O: JSON text in, managers or a located error out.
//!
//! ```hcl
//! type = map(object({
//!   instance_name   = string
//!   instance_id     = optional(string, "") # upstream's code reads it; for SSH command templates
//!   address         = string            # SSH host:port
//!   wrapper_address = string            # unix:///path or tcp://host:port, on the manager
//!   username        = optional(string, "")
//!   ssh_key_pem     = optional(string, "")
//!   metrics_address = optional(string, "") # Runway's: host:port of the metrics endpoint
//! }))
//! ```
//!
//! Two JSON documents carry it: `terraform show -json` (at
//! `values.outputs.grit_runner_managers.value`) and a state file (at
//! `outputs.grit_runner_managers.value`); either is accepted, whichever way it was read.
//! `address` is required upstream; here an absent or empty `address` means "no SSH host" (the
//! wrapper is reached directly). Empty strings and `null` are absent, as HCL's
//! `optional(string, "")` writes them. Unknown fields are ignored, as upstream ignores them.

use std::fmt;
use std::path::PathBuf;

use runway_wrapper::ListenAddress;
use serde_json::Value;

/// The output's name.
pub(crate) const OUTPUT: &str = "grit_runner_managers";

/// One runner manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Manager {
    /// The map's key.
    pub(crate) name: String,
    pub(crate) instance_name: String,
    /// Upstream reads it too (for the SSH command templates); empty when not given.
    pub(crate) instance_id: String,
    /// The SSH `host:port`; empty when not given.
    pub(crate) address: String,
    pub(crate) wrapper_address: ListenAddress,
    /// Empty when not given.
    pub(crate) username: String,
    /// Empty when not given.
    pub(crate) ssh_key_pem: String,
    /// `host:port` of the metrics endpoint; empty when not given.
    pub(crate) metrics_address: String,
}

/// Where the JSON was read from, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// `terraform show -json` run in this directory.
    Show(PathBuf),
    /// A state file (or a saved `show -json`).
    File(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Show(dir) => write!(f, "`terraform show -json` in {}", dir.display()),
            Self::File(path) => write!(f, "the state file {}", path.display()),
        }
    }
}

/// Why the output could not be read. Each message names where it was read from, and the
/// manager and field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OutputError {
    #[error("{source_}: not JSON: {reason}")]
    NotJson { source_: Source, reason: String },
    #[error(
        "{source_}: no output `{OUTPUT}` (looked for {path}): the configuration must declare \
         it and be applied"
    )]
    Missing { source_: Source, path: &'static str },
    #[error(
        "{source_}: output `{OUTPUT}` must be a map (or object) from a name to a runner \
         manager, found {found}"
    )]
    NotAMap {
        source_: Source,
        found: &'static str,
    },
    #[error("{source_}: runner manager {name:?} in `{OUTPUT}` must be an object, found {found}")]
    NotAnObject {
        source_: Source,
        name: String,
        found: &'static str,
    },
    #[error("{source_}: runner manager {name:?} in `{OUTPUT}` has no `{field}`, which is required")]
    MissingField {
        source_: Source,
        name: String,
        field: &'static str,
    },
    #[error(
        "{source_}: runner manager {name:?} in `{OUTPUT}`: `{field}` must be a string, found \
         {found}"
    )]
    NotAString {
        source_: Source,
        name: String,
        field: &'static str,
        found: &'static str,
    },
    #[error("{source_}: runner manager {name:?} in `{OUTPUT}`: `wrapper_address`: {reason}")]
    BadWrapperAddress {
        source_: Source,
        name: String,
        reason: String,
    },
}

/// The managers in `json`, sorted by name.
pub(crate) fn parse(json: &[u8], source: &Source) -> Result<Vec<Manager>, OutputError> {
    let document: Value = serde_json::from_slice(json).map_err(|error| OutputError::NotJson {
        source_: source.clone(),
        reason: error.to_string(),
    })?;
    // `show -json` of an empty state has no `values` at all.
    let (outputs, path) = match (document.get("values"), source) {
        (Some(values), _) => (
            values.get("outputs"),
            "values.outputs.grit_runner_managers.value",
        ),
        (None, Source::Show(_)) => (None, "values.outputs.grit_runner_managers.value"),
        (None, Source::File(_)) => (
            document.get("outputs"),
            "outputs.grit_runner_managers.value",
        ),
    };
    let missing = || OutputError::Missing {
        source_: source.clone(),
        path,
    };
    let value = outputs
        .and_then(|outputs| outputs.get(OUTPUT))
        .and_then(|output| output.get("value"))
        .ok_or_else(missing)?;
    let Value::Object(entries) = value else {
        return Err(OutputError::NotAMap {
            source_: source.clone(),
            found: kind(value),
        });
    };
    let mut managers = entries
        .iter()
        .map(|(name, entry)| manager(name, entry, source))
        .collect::<Result<Vec<_>, _>>()?;
    managers.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(managers)
}

fn manager(name: &str, entry: &Value, source: &Source) -> Result<Manager, OutputError> {
    let Value::Object(fields) = entry else {
        return Err(OutputError::NotAnObject {
            source_: source.clone(),
            name: name.to_owned(),
            found: kind(entry),
        });
    };
    // A string field; "" when absent or null.
    let text = |field: &'static str| -> Result<String, OutputError> {
        match fields.get(field) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(text)) => Ok(text.clone()),
            Some(other) => Err(OutputError::NotAString {
                source_: source.clone(),
                name: name.to_owned(),
                field,
                found: kind(other),
            }),
        }
    };
    let required = |field: &'static str| -> Result<String, OutputError> {
        let value = text(field)?;
        if value.is_empty() {
            return Err(OutputError::MissingField {
                source_: source.clone(),
                name: name.to_owned(),
                field,
            });
        }
        Ok(value)
    };
    let instance_name = required("instance_name")?;
    let wrapper_address =
        required("wrapper_address")?
            .parse()
            .map_err(
                |error: runway_wrapper::AddressError| OutputError::BadWrapperAddress {
                    source_: source.clone(),
                    name: name.to_owned(),
                    reason: error.to_string(),
                },
            )?;
    Ok(Manager {
        name: name.to_owned(),
        instance_name,
        instance_id: text("instance_id")?,
        address: text("address")?,
        wrapper_address,
        username: text("username")?,
        ssh_key_pem: text("ssh_key_pem")?,
        metrics_address: text("metrics_address")?,
    })
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> Source {
        Source::File(PathBuf::from("/tmp/x.tfstate"))
    }

    proptest::proptest! {
        /// Whatever terraform or a state file holds, reading it never panics.
        #[test]
        fn no_input_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = parse(&bytes, &file());
        }

        /// Nor does any JSON shape around the output.
        #[test]
        fn no_json_shape_panics(
            name in "[a-z]{0,4}",
            address in proptest::option::of("[a-z0-9:./]{0,20}"),
            wrapper in proptest::option::of("(unix|tcp)?:?/{0,3}[a-z0-9:./]{0,20}"),
            key in proptest::option::of(proptest::num::i64::ANY),
        ) {
            let mut manager = serde_json::Map::new();
            if let Some(address) = address {
                manager.insert("address".into(), address.into());
            }
            if let Some(wrapper) = wrapper {
                manager.insert("wrapper_address".into(), wrapper.into());
            }
            if let Some(key) = key {
                manager.insert("ssh_key_pem".into(), key.into());
            }
            let state = serde_json::json!({
                "outputs": {"grit_runner_managers": {"value": {name: manager}}}
            });
            let _ = parse(state.to_string().as_bytes(), &file());
        }
    }

    #[test]
    fn reads_show_json_and_state_files() {
        let managers = serde_json::json!({
            "b": {"instance_name": "i-2", "address": "10.0.0.2:22",
                  "wrapper_address": "tcp://127.0.0.1:7777", "username": "runner",
                  "ssh_key_pem": null, "instance_id": "i-0abc", "other": "ignored"},
            "a": {"instance_name": "i-1", "wrapper_address": "unix:///run/w.sock",
                  "address": "", "metrics_address": "10.0.0.1:9252"},
        });
        let show = serde_json::json!({"format_version": "1.0", "values": {"outputs": {
            OUTPUT: {"sensitive": false, "value": managers, "type": ["map", "object"]}}}});
        let state = serde_json::json!({"version": 4, "outputs": {
            OUTPUT: {"value": managers, "type": ["map", "object"]}}});
        for document in [show, state] {
            let parsed = parse(document.to_string().as_bytes(), &file()).unwrap();
            let names: Vec<_> = parsed.iter().map(|m| m.name.as_str()).collect();
            assert_eq!(names, ["a", "b"]);
            assert_eq!(parsed[0].address, "");
            assert_eq!(
                parsed[0].wrapper_address,
                ListenAddress::Unix("/run/w.sock".into())
            );
            assert_eq!(parsed[0].metrics_address, "10.0.0.1:9252");
            assert_eq!(parsed[1].username, "runner");
            assert_eq!(parsed[1].instance_id, "i-0abc");
            assert_eq!(parsed[1].ssh_key_pem, "");
        }
    }

    #[test]
    fn errors_name_the_source_the_manager_and_the_field() {
        let cases = [
            ("not json", "the state file /tmp/x.tfstate: not JSON"),
            (
                r#"{"format_version": "1.0"}"#,
                "no output `grit_runner_managers` (looked for outputs.grit_runner_managers.value)",
            ),
            (
                r#"{"values": {"outputs": {}}}"#,
                "looked for values.outputs.grit_runner_managers.value",
            ),
            (
                r#"{"outputs": {"grit_runner_managers": {"value": ["a"]}}}"#,
                "must be a map (or object) from a name to a runner manager, found a list",
            ),
            (
                r#"{"outputs": {"grit_runner_managers": {"value": {"m1": "x"}}}}"#,
                "runner manager \"m1\" in `grit_runner_managers` must be an object, found a string",
            ),
            (
                r#"{"outputs": {"grit_runner_managers": {"value": {"m1": {"instance_name": "i"}}}}}"#,
                "runner manager \"m1\" in `grit_runner_managers` has no `wrapper_address`",
            ),
            (
                r#"{"outputs": {"grit_runner_managers": {"value": {"m1": {"wrapper_address": "unix:///x"}}}}}"#,
                "has no `instance_name`",
            ),
            (
                r#"{"outputs": {"grit_runner_managers": {"value": {"m1": {"instance_name": "i", "wrapper_address": 7}}}}}"#,
                "`wrapper_address` must be a string, found a number",
            ),
            (
                r#"{"outputs": {"grit_runner_managers": {"value": {"m1": {"instance_name": "i", "wrapper_address": "http://x"}}}}}"#,
                "runner manager \"m1\" in `grit_runner_managers`: `wrapper_address`: invalid address \"http://x\"",
            ),
        ];
        for (json, says) in cases {
            let error = parse(json.as_bytes(), &file()).unwrap_err().to_string();
            assert!(error.contains(says), "{json}: {error}");
            assert!(
                error.starts_with("the state file /tmp/x.tfstate"),
                "{error}"
            );
        }
        let error = parse(b"{}", &Source::Show("/srv/blue".into()))
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("`terraform show -json` in /srv/blue: no output"),
            "{error}"
        );
    }

    #[test]
    fn an_empty_map_is_no_managers() {
        let json = r#"{"outputs": {"grit_runner_managers": {"value": {}}}}"#;
        assert_eq!(parse(json.as_bytes(), &file()).unwrap(), []);
    }
}
