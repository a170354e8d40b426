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

use runway_ssh::{Destination, HostKeyPolicy, Key, SshError, Target, TemplateVars};
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
            runway_log::chain(&error)
        ))),
        Err(_) => Err(ConnectError::Unreachable(format!(
            "cannot connect to {}: no connection within {}",
            manager.wrapper_address,
            runway_wrapper::duration::format(timeout)
        ))),
    }
}

/// Through SSH, by upstream's strategies: SSH command, else ProxyCommand, else ProxyJump, else
/// direct SSH to the manager's `address`; then the wrapper's socket at the far end. Mixing
/// strategies is an error, as upstream has it. The connector opens a new tunnel whenever the
/// channel (re)connects.
async fn ssh(
    manager: &Manager,
    settings: &SshSettings,
    why: &str,
    timeout: Duration,
) -> Result<WrapperClient, ConnectError> {
    let fatal = |message: String| {
        ConnectError::Fatal(format!(
            "runner manager {:?} through SSH ({why}): {message}",
            manager.name
        ))
    };
    let jump_flags = [
        settings.proxy_jump_address.is_some(),
        settings.proxy_jump_username.is_some(),
        settings.proxy_jump_key_file.is_some(),
    ];
    let jump_given = jump_flags.iter().any(|&set| set);
    let strategies = [
        settings.command.is_some(),
        settings.proxy_command.is_some(),
        jump_given,
    ];
    if strategies.iter().filter(|&&set| set).count() > 1 {
        return Err(fatal(
            "--ssh-command, --ssh-proxy-command and --ssh-proxy-jump-* are alternatives: give one"
                .to_owned(),
        ));
    }
    if jump_given && !jump_flags.iter().all(|&set| set) {
        return Err(fatal(
            "ProxyJump needs --ssh-proxy-jump-address, --ssh-proxy-jump-username and \
             --ssh-proxy-jump-key-file together"
                .to_owned(),
        ));
    }
    let username = settings
        .username
        .clone()
        .unwrap_or_else(|| manager.username.clone());
    let destination = Destination::parse(&manager.wrapper_address.to_string())
        .map_err(|error| fatal(runway_log::chain(&error)))?;
    let vars = TemplateVars {
        instance_name: manager.instance_name.clone(),
        instance_id: manager.instance_id.clone(),
        address: manager.address.clone(),
        username: username.clone(),
        private_key_pem: manager.ssh_key_pem.clone(),
        wrapper: destination.clone(),
    };
    let tunnel = if let Some(command) = &settings.command {
        // The command reaches the socket itself: no SSH here, and no key needed.
        runway_ssh::expand(command, &vars).map_err(|error| fatal(runway_log::chain(&error)))?;
        Tunnel::Command(command.clone())
    } else {
        if manager.address.is_empty() {
            return Err(fatal(
                "its grit_runner_managers entry has no `address` (the SSH host:port)".to_owned(),
            ));
        }
        if username.is_empty() {
            return Err(fatal(
                "no SSH user: give --ssh-username or `username` in its grit_runner_managers entry"
                    .to_owned(),
            ));
        }
        let key = match (&settings.key_file, manager.ssh_key_pem.is_empty()) {
            (Some(file), _) => Key::File(file.clone()),
            (None, false) => Key::Pem(manager.ssh_key_pem.clone()),
            (None, true) => {
                return Err(fatal(
                    "no SSH key: give --ssh-key-file or `ssh_key_pem` in its grit_runner_managers \
                     entry"
                        .to_owned(),
                ));
            }
        };
        let jump = match (
            &settings.proxy_jump_address,
            &settings.proxy_jump_username,
            &settings.proxy_jump_key_file,
        ) {
            (Some(address), Some(username), Some(key)) => Some(Target {
                address: address.clone(),
                username: username.clone(),
                key: Key::File(key.clone()),
            }),
            _ => None,
        };
        let host_keys = match &settings.known_hosts {
            Some(path) => HostKeyPolicy::KnownHosts(path.clone()),
            None => HostKeyPolicy::AcceptAny,
        };
        Tunnel::Ssh {
            target: Target {
                address: manager.address.clone(),
                username,
                key,
            },
            settings: runway_ssh::Settings {
                jump,
                proxy_command: settings.proxy_command.clone(),
                host_keys,
                timeout,
            },
        }
    };
    let name = manager.name.clone();
    let connector = tower::service_fn(move |_: tonic::transport::Uri| {
        let (tunnel, destination, vars, name) = (
            tunnel.clone(),
            destination.clone(),
            vars.clone(),
            name.clone(),
        );
        async move {
            let stream = match &tunnel {
                Tunnel::Command(command) => runway_ssh::command_stream(command, &vars)?,
                Tunnel::Ssh { target, settings } => {
                    runway_ssh::connect(target, settings, &destination, &vars).await?
                }
            };
            for notice in stream.notices() {
                crate::log::warn(notice.to_string()).manager(&name).emit();
            }
            Ok::<_, SshError>(hyper_util::rt::TokioIo::new(stream))
        }
    });
    let endpoint =
        tonic::transport::Endpoint::from_static("http://localhost").connect_timeout(timeout);
    let connecting = endpoint.connect_with_connector(connector);
    match tokio::time::timeout(timeout, connecting).await {
        Ok(Ok(channel)) => Ok(WrapperClient::new(channel)),
        Ok(Err(error)) => {
            let message = format!(
                "cannot reach {} through SSH: {}",
                manager.wrapper_address,
                runway_log::chain(&error)
            );
            match find_ssh_error(&error) {
                Some(ssh) if !retryable(ssh) => Err(ConnectError::Fatal(message)),
                _ => Err(ConnectError::Unreachable(message)),
            }
        }
        Err(_) => Err(ConnectError::Unreachable(format!(
            "cannot reach {} through SSH: no connection within {}",
            manager.wrapper_address,
            runway_wrapper::duration::format(timeout)
        ))),
    }
}

/// How a tunnel is opened, cloned into the channel's connector.
#[derive(Debug, Clone)]
enum Tunnel {
    Command(String),
    Ssh {
        target: Target,
        settings: runway_ssh::Settings,
    },
}

/// The SSH error somewhere in tonic's chain of sources.
fn find_ssh_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a SshError> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(ssh) = error.downcast_ref::<SshError>() {
            return Some(ssh);
        }
        current = error.source();
    }
    None
}

/// Worth another attempt: the network, not the configuration. A refused key, a refused host
/// key or a bad template fails the same way every time.
fn retryable(error: &SshError) -> bool {
    match error {
        SshError::Io { .. } | SshError::Protocol { .. } | SshError::Timeout { .. } => true,
        SshError::ProxyCommand { source, .. } => retryable(source),
        _ => false,
    }
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
    async fn ssh_settings_that_cannot_work_are_fatal_and_say_why() {
        let no_user = connect(
            &manager("127.0.0.1:1"),
            &Settings::default(),
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
        assert!(matches!(no_user, ConnectError::Fatal(_)));
        assert!(no_user.to_string().contains("--ssh-username"), "{no_user}");

        let mixed = Settings {
            ssh: SshSettings {
                command: Some("ssh {{.Address}}".to_owned()),
                proxy_command: Some("nc {{.Address}}".to_owned()),
                ..SshSettings::default()
            },
            ..Settings::default()
        };
        let error = connect(&manager("127.0.0.1:1"), &mixed, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("alternatives"), "{error}");

        let half_jump = Settings {
            ssh: SshSettings {
                proxy_jump_address: Some("127.0.0.1:2".to_owned()),
                ..SshSettings::default()
            },
            ..Settings::default()
        };
        let error = connect(&manager("127.0.0.1:1"), &half_jump, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("together"), "{error}");
    }
}
