//! The crate's one error type.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Where a connection was when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Resolving the SSH server's address and opening the TCP connection to it.
    TcpConnect,
    /// Starting the ProxyCommand or the SSH command.
    ProxyCommandSpawn,
    /// The SSH version exchange, key exchange and host key check.
    Handshake,
    /// Public key authentication.
    Auth,
    /// Opening the `direct-streamlocal` or `direct-tcpip` channel.
    ChannelOpen,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::TcpConnect => "tcp connect",
            Stage::ProxyCommandSpawn => "proxy command spawn",
            Stage::Handshake => "handshake",
            Stage::Auth => "auth",
            Stage::ChannelOpen => "channel open",
        })
    }
}

/// Why a stream to a wrapper could not be had. Every variant about a connection names the SSH
/// server's address (`host:port`) and the stage; messages are lower-case.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SshError {
    /// An I/O error, e.g. a refused TCP connection or a failed spawn.
    #[error("ssh {address}: {stage}")]
    Io {
        address: String,
        stage: Stage,
        #[source]
        source: std::io::Error,
    },
    /// The SSH protocol failed (the peer closed, a bad packet, a refused channel...).
    #[error("ssh {address}: {stage}")]
    Protocol {
        address: String,
        stage: Stage,
        #[source]
        source: Box<russh::Error>,
    },
    /// The stage did not finish within the caller's timeout.
    #[error("ssh {address}: {stage}: timed out after {timeout:?}")]
    Timeout {
        address: String,
        stage: Stage,
        timeout: Duration,
    },
    /// The server refused the key for this user.
    #[error(
        "ssh {address}: auth: the server refused the key for user {username:?} (it accepts: {methods})"
    )]
    AuthRejected {
        address: String,
        username: String,
        methods: String,
    },
    /// The private key could not be read or parsed.
    #[error("ssh {address}: auth: private key {origin}")]
    Key {
        address: String,
        /// `from the terraform output` or the file's path.
        origin: String,
        #[source]
        source: Box<russh::keys::Error>,
    },
    /// The known-hosts file has no entry for this host, or other keys for it.
    #[error("{0}")]
    HostKey(Box<HostKeyError>),
    /// The known-hosts file could not be read.
    #[error("ssh {address}: handshake: known-hosts file {path}")]
    KnownHosts {
        address: String,
        path: PathBuf,
        #[source]
        source: Box<russh::keys::Error>,
    },
    /// The SSH session over a ProxyCommand failed; `stderr` is what the command wrote.
    #[error("ssh through proxy command `{command}` (its stderr: {stderr:?})")]
    ProxyCommand {
        command: String,
        stderr: String,
        #[source]
        source: Box<SshError>,
    },
    /// An address that is not `host:port`, or a wrapper address that is neither `unix://` nor
    /// `tcp://`.
    #[error("address {address:?}: {reason}")]
    Address { address: String, reason: String },
    /// A command template that cannot be expanded.
    #[error("command template {template:?}: {reason}")]
    Template { template: String, reason: String },
}

/// A host key the known-hosts file does not vouch for.
#[derive(Debug)]
pub struct HostKeyError {
    pub address: String,
    /// How the file names the host: `host`, or `[host]:port`.
    pub host_pattern: String,
    pub algorithm: String,
    /// `SHA256:...`, as `ssh-keygen -l` prints it.
    pub fingerprint: String,
    pub known_hosts: PathBuf,
    /// The first line holding another key for the host: the key changed. `None`: the host is
    /// not in the file.
    pub changed: Option<usize>,
}

impl fmt::Display for HostKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let HostKeyError {
            address,
            host_pattern,
            algorithm,
            fingerprint,
            known_hosts,
            changed,
        } = self;
        let known_hosts = known_hosts.display();
        match changed {
            Some(line) => write!(
                f,
                "ssh {address}: handshake: host key changed: the server offers {fingerprint} ({algorithm}), but {known_hosts} line {line} holds another key for {host_pattern}"
            ),
            None => write!(
                f,
                "ssh {address}: handshake: host key {fingerprint} ({algorithm}) unknown: {known_hosts} has no entry for {host_pattern}"
            ),
        }
    }
}

impl std::error::Error for HostKeyError {}
