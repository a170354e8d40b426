//! How a runner manager's wrapper is reached: the one seam between the deployer and its
//! transports. [`connect`] takes a manager and the settings and returns a connected gRPC client;
//! everything above it (retries, timeouts, the calls) is the same whatever the transport.
//!
//! The rule, in `--help`:
//!
//! 1. `--direct`: the `wrapper_address` is reached straight from here (`unix:///path` on this
//!    machine, or `tcp://host:port`), whatever else is set.
//! 2. Else SSH, when any `--ssh-...` flag is given or the manager has an `address` (upstream
//!    always tunnels through SSH to `address`): direct, ProxyJump, ProxyCommand or SSH command,
//!    then the wrapper's socket at the far end.
//! 3. Else (no SSH flag, no `address`) direct.

use std::path::PathBuf;
use std::time::Duration;

use runway_wrapper::proto::process_wrapper_client::ProcessWrapperClient;
use tonic::transport::Channel;

use crate::managers::Manager;

/// A connected client of a wrapper's API.
pub(crate) type WrapperClient = ProcessWrapperClient<Channel>;

/// The connection settings from the command line.
#[derive(Debug, Clone, Default)]
pub(crate) struct Settings {
    /// `--direct`: never SSH.
    pub(crate) force_direct: bool,
    pub(crate) ssh: SshSettings,
}

/// The `--ssh-...` flags, upstream's names. The flags win over the output's `username` and
/// `ssh_key_pem`.
#[derive(Debug, Clone, Default)]
pub(crate) struct SshSettings {
    pub(crate) username: Option<String>,
    pub(crate) key_file: Option<PathBuf>,
    pub(crate) known_hosts: Option<PathBuf>,
    pub(crate) proxy_jump_address: Option<String>,
    pub(crate) proxy_jump_username: Option<String>,
    pub(crate) proxy_jump_key_file: Option<PathBuf>,
    /// Templated (`{{.Address}}`, `{{.InstanceName}}`, `{{.Username}}`...).
    pub(crate) proxy_command: Option<String>,
    /// Templated; its stdin and stdout carry the gRPC stream itself.
    pub(crate) command: Option<String>,
}

impl SshSettings {
    /// The flags given, by name, for messages; empty when none.
    pub(crate) fn given(&self) -> Vec<&'static str> {
        let mut given = Vec::new();
        let mut note = |set: bool, name| {
            if set {
                given.push(name);
            }
        };
        note(self.username.is_some(), "--ssh-username");
        note(self.key_file.is_some(), "--ssh-key-file");
        note(self.known_hosts.is_some(), "--ssh-known-hosts");
        note(
            self.proxy_jump_address.is_some(),
            "--ssh-proxy-jump-address",
        );
        note(
            self.proxy_jump_username.is_some(),
            "--ssh-proxy-jump-username",
        );
        note(
            self.proxy_jump_key_file.is_some(),
            "--ssh-proxy-jump-key-file",
        );
        note(self.proxy_command.is_some(), "--ssh-proxy-command");
        note(self.command.is_some(), "--ssh-command");
        given
    }
}

/// Which transport reaches a manager, and why (for the logs and errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    Direct,
    Ssh { why: String },
}

/// The rule in the module's documentation.
pub(crate) fn route(manager: &Manager, settings: &Settings) -> Route {
    if settings.force_direct {
        return Route::Direct;
    }
    let flags = settings.ssh.given();
    if !flags.is_empty() {
        return Route::Ssh {
            why: format!("{} given", flags.join(", ")),
        };
    }
    if !manager.address.is_empty() {
        return Route::Ssh {
            why: format!("its output has address {:?}", manager.address),
        };
    }
    Route::Direct
}

/// Why a connection was not made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// Worth another attempt: nothing listening yet, a refused or timed out connection.
    #[error("{0}")]
    Unreachable(String),
    /// Another attempt would fail the same way: a missing key, no SSH in this build.
    #[error("{0}")]
    Fatal(String),
}

/// THE SEAM: a connected client of `manager`'s wrapper, one attempt, bounded by `timeout`.
pub(crate) async fn connect(
    manager: &Manager,
    settings: &Settings,
    timeout: Duration,
) -> Result<WrapperClient, ConnectError> {
    match route(manager, settings) {
        Route::Direct => direct(manager, timeout).await,
        Route::Ssh { why } => ssh(manager, &settings.ssh, &why, timeout).await,
    }
}

/// `wrapper_address` reached straight from here.
async fn direct(manager: &Manager, timeout: Duration) -> Result<WrapperClient, ConnectError> {
    let connecting = runway_wrapper::client::connect(&manager.wrapper_address, timeout);
    // The connect timeout bounds the TCP connect; this bounds the whole attempt (HTTP/2 setup).
    match tokio::time::timeout(timeout, connecting).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(error)) => Err(ConnectError::Unreachable(format!(
            "cannot connect to {}: {}",
            manager.wrapper_address,
            crate::log::chain(&error)
        ))),
        Err(_) => Err(ConnectError::Unreachable(format!(
            "cannot connect to {}: no connection within {}",
            manager.wrapper_address,
            runway_wrapper::duration::format(timeout)
        ))),
    }
}

// ─── SSH TRANSPORT PLUGS IN HERE ────────────────────────────────────────────────────────────
//
// `runway-ssh` (crates/runway-ssh) provides the stream. To plug it in, add to Cargo.toml
// `runway-ssh = { path = "../runway-ssh" }`, `tower = { version = "0.5", default-features =
// false, features = ["util"] }` and `hyper-util = { version = "0.1", default-features = false,
// features = ["tokio"] }`, and replace the body of `ssh` below (nothing else changes):
//
// 1. The manager: `runway_ssh::Target { address: manager.address, username:
//    settings.username else manager.username, key: Key::File(settings.key_file) else
//    Key::Pem(manager.ssh_key_pem) }`; a missing username or key is `ConnectError::Fatal`
//    naming the manager, the flag and the output field.
// 2. `runway_ssh::Settings { jump: proxy_jump_address with proxy_jump_username and
//    Key::File(proxy_jump_key_file) (either missing: Fatal), proxy_command, host_keys:
//    KnownHosts(known_hosts) else AcceptAny, timeout }`; `TemplateVars` from the manager
//    (`instance_name`, `instance_id`, `address`, username, `ssh_key_pem`,
//    `Destination::parse(wrapper_address)`).
// 3. The stream: `runway_ssh::command_stream(command, &vars)` when `--ssh-command` is given,
//    else `runway_ssh::connect(&target, &settings, &destination, &vars)`. Log each
//    `stream.notices()` as a WARN line with `.manager(name)` (host keys not checked).
//    Classify `SshError`: refused / timed out connections `Unreachable` (retried), bad keys,
//    refused host keys, failed authentication and template errors `Fatal`.
// 4. gRPC over it; the URI only names the `:authority`, and the connector opens a new stream
//    if the channel reconnects:
//
//        let channel = tonic::transport::Endpoint::from_static("http://localhost")
//            .connect_timeout(timeout)
//            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
//                let (target, settings, destination, vars) = (/* clones */);
//                async move {
//                    let stream = runway_ssh::connect(&target, &settings, &destination, &vars).await?;
//                    Ok::<_, runway_ssh::SshError>(hyper_util::rt::TokioIo::new(stream))
//                }
//            }))
//            .await
//            .map_err(|error| ConnectError::Unreachable(crate::log::chain(&error)))?;
//        Ok(WrapperClient::new(channel))
async fn ssh(
    manager: &Manager,
    _settings: &SshSettings,
    why: &str,
    _timeout: Duration,
) -> Result<WrapperClient, ConnectError> {
    Err(ConnectError::Fatal(format!(
        "runner manager {:?} is reached through SSH ({why}), but SSH is not available in this \
         build of the deployer yet; if {} is reachable from here, pass --direct",
        manager.name, manager.wrapper_address
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager(address: &str) -> Manager {
        Manager {
            name: "m1".to_owned(),
            instance_name: "i-1".to_owned(),
            instance_id: String::new(),
            address: address.to_owned(),
            wrapper_address: "unix:///run/w.sock".parse().unwrap(),
            username: String::new(),
            ssh_key_pem: String::new(),
            metrics_address: String::new(),
        }
    }

    #[test]
    fn direct_only_without_ssh_flags_and_address_or_when_forced() {
        let none = Settings::default();
        assert_eq!(route(&manager(""), &none), Route::Direct);
        assert_eq!(
            route(&manager("10.0.0.1:22"), &none),
            Route::Ssh {
                why: "its output has address \"10.0.0.1:22\"".to_owned()
            }
        );
        let flags = Settings {
            ssh: SshSettings {
                proxy_command: Some("nc {{.Address}}".to_owned()),
                ..SshSettings::default()
            },
            ..Settings::default()
        };
        assert_eq!(
            route(&manager(""), &flags),
            Route::Ssh {
                why: "--ssh-proxy-command given".to_owned()
            }
        );
        let forced = Settings {
            force_direct: true,
            ..flags
        };
        assert_eq!(route(&manager("10.0.0.1:22"), &forced), Route::Direct);
    }

    #[tokio::test]
    async fn ssh_is_a_clear_error_for_now() {
        let error = connect(
            &manager("10.0.0.1:22"),
            &Settings::default(),
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
        assert!(matches!(error, ConnectError::Fatal(_)));
        let text = error.to_string();
        assert!(
            text.contains("SSH is not available in this build"),
            "{text}"
        );
        assert!(text.contains("--direct"), "{text}");
    }
}
