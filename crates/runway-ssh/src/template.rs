//! The ProxyCommand and SSH command templates: Go `text/template` field references
//! (`{{.Host.Address}}`), as upstream's deployer expands them, and nothing else.

use crate::address::{Destination, split_host_port};
use crate::error::SshError;

/// What a command template can refer to, for one runner manager.
///
/// Upstream's deployer executes its templates on a `TargetDef`, so its names work unchanged:
///
/// | name | value |
/// | --- | --- |
/// | `{{.Host.InstanceName}}` | `instance_name` of the Terraform output |
/// | `{{.Host.InstanceID}}` | `instance_id` of the Terraform output (may be empty) |
/// | `{{.Host.Address}}` | the SSH `host:port` |
/// | `{{.Host.Username}}` | the SSH username (flag, else output) |
/// | `{{.Host.PrivateKeyPem}}` | the SSH private key's PEM text, when known |
/// | `{{.GRPCServer.Network}}` | `unix` or `tcp` |
/// | `{{.GRPCServer.Address}}` | the wrapper's socket path, or its `host:port` |
///
/// Shorter names, ours: `{{.InstanceName}}`, `{{.InstanceID}}`, `{{.Address}}`,
/// `{{.Username}}`, `{{.PrivateKeyPem}}`, `{{.Host}}` and `{{.Port}}` (the two halves of
/// the SSH address; the port is 22 when the address has none), `{{.WrapperNetwork}}`,
/// `{{.WrapperAddress}}`, and `{{.WrapperSocket}}` (the socket path; an error for a `tcp://`
/// wrapper). Values are inserted as they are, unquoted, as Go's templates do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateVars {
    pub instance_name: String,
    pub instance_id: String,
    /// The SSH server's `host:port`.
    pub address: String,
    pub username: String,
    /// Empty when the key is not known as text.
    pub private_key_pem: String,
    /// The wrapper's socket on the manager.
    pub wrapper: Destination,
}

/// The names [`TemplateVars`] answers to, for error messages.
const NAMES: &[&str] = &[
    ".Host.InstanceName",
    ".Host.InstanceID",
    ".Host.Address",
    ".Host.Username",
    ".Host.PrivateKeyPem",
    ".GRPCServer.Network",
    ".GRPCServer.Address",
    ".InstanceName",
    ".InstanceID",
    ".Address",
    ".Username",
    ".PrivateKeyPem",
    ".Host",
    ".Port",
    ".WrapperNetwork",
    ".WrapperAddress",
    ".WrapperSocket",
];

impl TemplateVars {
    fn lookup(&self, name: &str) -> Result<Option<String>, String> {
        Ok(Some(match name {
            "Host.InstanceName" | "InstanceName" => self.instance_name.clone(),
            "Host.InstanceID" | "InstanceID" => self.instance_id.clone(),
            "Host.Address" | "Address" => self.address.clone(),
            "Host.Username" | "Username" => self.username.clone(),
            "Host.PrivateKeyPem" | "PrivateKeyPem" => self.private_key_pem.clone(),
            "GRPCServer.Network" | "WrapperNetwork" => self.wrapper.network().to_owned(),
            "GRPCServer.Address" | "WrapperAddress" => self.wrapper.address(),
            "Host" | "Port" => {
                let (host, port) = split_host_port(&self.address).map_err(|e| e.to_string())?;
                if name == "Host" {
                    host
                } else {
                    port.to_string()
                }
            }
            "WrapperSocket" => match &self.wrapper {
                Destination::Unix(path) => path.display().to_string(),
                Destination::Tcp { .. } => {
                    return Err(format!(
                        "{{{{.WrapperSocket}}}} needs a unix:// wrapper address, not {}; use {{{{.GRPCServer.Address}}}}",
                        self.wrapper
                    ));
                }
            },
            _ => return Ok(None),
        }))
    }
}

/// Expands `template`: each `{{.Name}}` (spaces inside the braces and Go's `{{-`/`-}}`
/// whitespace trimming allowed) becomes its value. Anything else between braces, an unknown
/// name or an unclosed action is an error, as is a command that is empty once expanded.
pub fn expand(template: &str, vars: &TemplateVars) -> Result<String, SshError> {
    let error = |reason: String| SshError::Template {
        template: template.to_owned(),
        reason,
    };
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    let mut trim_next = false;
    while let Some(start) = rest.find("{{") {
        let text = &rest[..start];
        out.push_str(if trim_next { text.trim_start() } else { text });
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| {
            error(format!(
                "unclosed action at byte {}",
                template.len() - rest.len() + start
            ))
        })?;
        let mut action = &after[..end];
        rest = &after[end + 2..];
        if let Some(a) = action
            .strip_prefix('-')
            .filter(|a| a.starts_with(char::is_whitespace))
        {
            out.truncate(out.trim_end().len());
            action = a;
        }
        trim_next = false;
        if let Some(a) = action
            .strip_suffix('-')
            .filter(|a| a.ends_with(char::is_whitespace))
        {
            trim_next = true;
            action = a;
        }
        let action = action.trim();
        let name = action
            .strip_prefix('.')
            .filter(|n| {
                !n.is_empty()
                    && n.split('.').all(|part| {
                        part.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    })
            })
            .ok_or_else(|| {
                error(format!(
                    "{{{{{action}}}}} is not supported: only field references such as {{{{.Host.Address}}}} are"
                ))
            })?;
        match vars.lookup(name).map_err(&error)? {
            Some(value) => out.push_str(&value),
            None => {
                return Err(error(format!(
                    "unknown field .{name}; known: {}",
                    NAMES.join(", ")
                )));
            }
        }
    }
    out.push_str(if trim_next { rest.trim_start() } else { rest });
    if out.trim().is_empty() {
        return Err(error("the command is empty once expanded".to_owned()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    proptest::proptest! {
        /// Any template text expands or is an error, never a panic.
        #[test]
        fn no_template_panics(template in "[{}. a-zA-Z-]{0,40}") {
            let vars = TemplateVars {
                instance_name: "i".into(),
                instance_id: String::new(),
                address: "h:22".into(),
                username: "u".into(),
                private_key_pem: String::new(),
                wrapper: Destination::Unix("/w.sock".into()),
            };
            let _ = expand(&template, &vars);
        }
    }

    use std::path::PathBuf;

    use super::*;

    fn vars(wrapper: Destination) -> TemplateVars {
        TemplateVars {
            instance_name: "rm-1".into(),
            instance_id: "i-0abc".into(),
            address: "10.0.0.5:2222".into(),
            username: "ubuntu".into(),
            private_key_pem: String::new(),
            wrapper,
        }
    }

    fn unix() -> Destination {
        Destination::Unix(PathBuf::from("/run/w.sock"))
    }

    #[test]
    fn upstream_names_expand() {
        let out = expand(
            "gcloud compute ssh {{.Host.InstanceName}} --zone z -- socat - UNIX-CONNECT:{{.GRPCServer.Address}} # {{.GRPCServer.Network}} {{.Host.Username}}@{{.Host.Address}} {{.Host.InstanceID}}",
            &vars(unix()),
        )
        .unwrap();
        assert_eq!(
            out,
            "gcloud compute ssh rm-1 --zone z -- socat - UNIX-CONNECT:/run/w.sock # unix ubuntu@10.0.0.5:2222 i-0abc"
        );
    }

    #[test]
    fn short_names_spaces_and_trimming() {
        let out = expand(
            "nc {{ .Host }} {{.Port}} {{.WrapperSocket}} x  {{- .InstanceName -}}  y",
            &vars(unix()),
        )
        .unwrap();
        assert_eq!(out, "nc 10.0.0.5 2222 /run/w.sock xrm-1y");
        let tcp = vars(Destination::Tcp {
            host: "127.0.0.1".into(),
            port: 7777,
        });
        assert_eq!(
            expand("{{.GRPCServer.Network}} {{.WrapperAddress}}", &tcp).unwrap(),
            "tcp 127.0.0.1:7777"
        );
        let err = expand("{{.WrapperSocket}}", &tcp).unwrap_err().to_string();
        assert!(err.contains("needs a unix:// wrapper address"), "{err}");
    }

    #[test]
    fn errors_are_clear() {
        let v = vars(unix());
        let err = expand("ssh {{.Hots.Address}}", &v).unwrap_err().to_string();
        assert!(
            err.contains("unknown field .Hots.Address; known: .Host.InstanceName"),
            "{err}"
        );
        let err = expand("ssh {{.Host.Address", &v).unwrap_err().to_string();
        assert!(err.contains("unclosed action at byte 4"), "{err}");
        let err = expand("ssh {{if .Host}}x{{end}}", &v)
            .unwrap_err()
            .to_string();
        assert!(err.contains("{{if .Host}} is not supported"), "{err}");
        let err = expand(
            "  {{.InstanceID}} ",
            &TemplateVars {
                instance_id: String::new(),
                ..v
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("empty once expanded"), "{err}");
    }
}
