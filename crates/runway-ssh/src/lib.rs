//! The `deployer`'s SSH transport: a byte stream to a runner manager's wrapper socket, over
//! which the deployer runs gRPC (GRIT's "SSH connection strategies").
//!
//! - [`connect`], direct: SSH to the manager's `address` (`host:port`) with a username and a
//!   private key, then a `direct-streamlocal@openssh.com` channel to the wrapper's unix socket
//!   or a `direct-tcpip` channel to its `host:port`.
//! - [`connect`] with [`Settings::jump`] (ProxyJump): SSH to the bastion with its own key,
//!   a `direct-tcpip` channel to the manager's `address` through it, and the manager's SSH
//!   session over that channel.
//! - [`connect`] with [`Settings::proxy_command`] (ProxyCommand): `sh -c COMMAND` (a
//!   [template](TemplateVars)), whose stdin and stdout carry the SSH session.
//! - [`command_stream`] (SSH command): `sh -c COMMAND` reaches the wrapper's socket itself
//!   (`gcloud compute ssh ... -- socat - UNIX-CONNECT:{{.GRPCServer.Address}}`); its stdin
//!   and stdout are the stream. No SSH in this process.
//!
//! Which strategy applies, and whose username and key (flags over the Terraform output), is
//! the deployer's decision; upstream's order is SSH command, then ProxyCommand, then
//! ProxyJump, then direct, and mixing them is an error there.
//!
//! Host keys are checked against a known-hosts file when one is given
//! ([`HostKeyPolicy::KnownHosts`]); without one every key is accepted, as upstream always does,
//! and the [`Stream`] carries a [`Notice`] per host for the caller's log. Every connection is
//! bounded by [`Settings::timeout`] (upstream: 30 s per SSH connection). Commands run in a
//! process group of their own, killed with the stream; their stderr is kept, never inherited
//! (the deployer's stderr is its NDJSON log), and shown in errors.
//!
//! gRPC over it, with tonic (`hyper_util::rt::TokioIo` makes the stream hyper's; the URI is
//! only the `:authority`):
//!
//! ```text
//! let channel = Endpoint::from_static("http://localhost")
//!     .connect_timeout(timeout)
//!     .connect_with_connector(tower::service_fn(move |_: Uri| {
//!         let (target, settings, destination, vars) = (target.clone(), settings.clone(), destination.clone(), vars.clone());
//!         async move {
//!             let stream = runway_ssh::connect(&target, &settings, &destination, &vars).await?;
//!             for notice in stream.notices() { /* log it */ }
//!             Ok::<_, runway_ssh::SshError>(TokioIo::new(stream))
//!         }
//!     }))
//!     .await?;
//! let client = ProcessWrapperClient::new(channel);
//! ```
//!
//! SSH is [russh] with `ring` for its ciphers (no OpenSSL, no cmake): the deployer stays one
//! static binary.
//!
//! # Files
//!
//! - `lib.rs`: `connect`, directly or through a ProxyJump bastion; `hostkey.rs`: host keys from a
//!   known-hosts file, or reported unchecked.
//! - `command.rs`: a ProxyCommand, or an SSH command that reaches the wrapper's socket itself.
//!   `template.rs`: their Go-template variables, as upstream's. `stream.rs`: the stream either
//!   way gives.
//! - `address.rs`: SSH and wrapper addresses. `error.rs`: the crate's error.
//! - `testing.rs` (feature `test-support`): starts a real sshd.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

mod address;
mod command;
mod error;
mod hostkey;
mod stream;
mod template;
#[cfg(feature = "test-support")]
pub mod testing;

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use russh::client::{self, AuthResult, Handle};
use russh::keys::{PrivateKey, PrivateKeyWithHashAlg};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

pub use address::Destination;
pub use error::{HostKeyError, SshError, Stage};
pub use hostkey::{HostKeyPolicy, Notice};
pub use stream::Stream;
pub use template::{TemplateVars, expand};

use address::split_host_port;
use hostkey::{Checker, Verdict};

/// A private key: PEM (or OpenSSH) text, as the Terraform output's `ssh_key_pem`, or a file.
/// Ed25519, ECDSA and RSA keys; not passphrase-protected ones.
#[derive(Clone, PartialEq, Eq)]
pub enum Key {
    Pem(String),
    File(PathBuf),
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Pem(_) => f.write_str("Pem(..)"),
            Key::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

/// An SSH server to log in to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `host:port` (`[v6]:port`; port 22 when none).
    pub address: String,
    pub username: String,
    pub key: Key,
}

/// How to reach the manager's SSH server, shared by all managers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// ProxyJump: the bastion, with its own username and key.
    pub jump: Option<Target>,
    /// ProxyCommand: a [template](TemplateVars) run by `sh -c`, whose stdin and stdout carry
    /// SSH. Takes precedence over `jump`.
    pub proxy_command: Option<String>,
    pub host_keys: HostKeyPolicy,
    /// For the whole connection: TCP connect, handshakes, authentications and the channel.
    pub timeout: Duration,
}

/// Upstream's SSH client timeout (`sshClientConnectionTimeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Keepalives on a session, so that a dead peer ends a long wait with an error.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// Opens a byte stream to `destination` on the manager `target`, through SSH as `settings`
/// say. `vars` feed the ProxyCommand template. The stream keeps its sessions (and command)
/// alive; dropping it ends them.
pub async fn connect(
    target: &Target,
    settings: &Settings,
    destination: &Destination,
    vars: &TemplateVars,
) -> Result<Stream, SshError> {
    let deadline = Instant::now() + settings.timeout;
    let key = load_key(target)?;
    let mut notices = Vec::new();
    let mut sessions = Vec::new();
    let mut child = None;
    let session = if let Some(template) = &settings.proxy_command {
        let command = expand(template, vars)?;
        let (mut guard, io) = command::spawn(&command).map_err(|source| SshError::Io {
            address: target.address.clone(),
            stage: Stage::ProxyCommandSpawn,
            source,
        })?;
        match login(target, key, settings, deadline, io, &mut notices).await {
            Ok(session) => {
                child = Some(guard);
                session
            }
            Err(e) => {
                guard.settle().await;
                return Err(SshError::ProxyCommand {
                    command,
                    stderr: guard.stderr.text(),
                    source: Box::new(e),
                });
            }
        }
    } else if let Some(jump) = &settings.jump {
        let jump_key = load_key(jump)?;
        let tcp = tcp_connect(&jump.address, settings, deadline).await?;
        let bastion = login(jump, jump_key, settings, deadline, tcp, &mut notices).await?;
        let (host, port) = split_host_port(&target.address)?;
        let channel = bounded(
            deadline,
            settings,
            &jump.address,
            Stage::ChannelOpen,
            bastion.channel_open_direct_tcpip(host, u32::from(port), "127.0.0.1", 0),
        )
        .await?;
        sessions.push(bastion);
        let stream = channel.into_stream();
        login(target, key, settings, deadline, stream, &mut notices).await?
    } else {
        let tcp = tcp_connect(&target.address, settings, deadline).await?;
        login(target, key, settings, deadline, tcp, &mut notices).await?
    };
    let channel = match destination {
        Destination::Unix(path) => {
            bounded(
                deadline,
                settings,
                &target.address,
                Stage::ChannelOpen,
                session.channel_open_direct_streamlocal(path.to_string_lossy()),
            )
            .await?
        }
        Destination::Tcp { host, port } => {
            bounded(
                deadline,
                settings,
                &target.address,
                Stage::ChannelOpen,
                session.channel_open_direct_tcpip(host.as_str(), u32::from(*port), "127.0.0.1", 0),
            )
            .await?
        }
    };
    sessions.push(session);
    Ok(Stream::ssh(channel.into_stream(), sessions, child, notices))
}

/// The SSH command strategy: expands `template` with `vars` and starts it with `sh -c`; its
/// stdin and stdout are the stream to the wrapper. The command runs in a process group of its
/// own, killed when the stream is dropped; [`Stream::command_stderr`] tells what it wrote to
/// stderr. Must be called within a tokio runtime.
pub fn command_stream(template: &str, vars: &TemplateVars) -> Result<Stream, SshError> {
    let command = expand(template, vars)?;
    let (guard, io) = command::spawn(&command).map_err(|source| SshError::Io {
        address: vars.address.clone(),
        stage: Stage::ProxyCommandSpawn,
        source,
    })?;
    Ok(Stream::command(io, guard))
}

fn load_key(target: &Target) -> Result<PrivateKey, SshError> {
    let (origin, result) = match &target.key {
        Key::Pem(text) => (
            "from the terraform output".to_owned(),
            russh::keys::decode_secret_key(text, None),
        ),
        Key::File(path) => (
            path.display().to_string(),
            russh::keys::load_secret_key(path, None),
        ),
    };
    result.map_err(|source| SshError::Key {
        address: target.address.clone(),
        origin,
        source: Box::new(source),
    })
}

async fn tcp_connect(
    address: &str,
    settings: &Settings,
    deadline: Instant,
) -> Result<tokio::net::TcpStream, SshError> {
    let (host, port) = split_host_port(address)?;
    let stream = match tokio::time::timeout_at(
        deadline,
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    {
        Ok(result) => result.map_err(|source| SshError::Io {
            address: address.to_owned(),
            stage: Stage::TcpConnect,
            source,
        })?,
        Err(_) => return Err(timeout_error(address, Stage::TcpConnect, settings)),
    };
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// The handshake (host key check included) and the public key authentication of `target`
/// over `stream`.
async fn login<R>(
    target: &Target,
    key: PrivateKey,
    settings: &Settings,
    deadline: Instant,
    stream: R,
    notices: &mut Vec<Notice>,
) -> Result<Handle<Checker>, SshError>
where
    R: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let address = target.address.as_str();
    let (host, port) = split_host_port(address)?;
    let known = match &settings.host_keys {
        HostKeyPolicy::KnownHosts(path) => Some((
            path.clone(),
            hostkey::known_keys(address, &host, port, path)?,
        )),
        HostKeyPolicy::AcceptAny => None,
    };
    let mut preferred = russh::Preferred::DEFAULT;
    if let Some((_, keys)) = &known {
        preferred.key = Cow::Owned(hostkey::preferred_algorithms(keys));
    }
    let config = Arc::new(client::Config {
        preferred,
        keepalive_interval: Some(KEEPALIVE),
        nodelay: true,
        ..client::Config::default()
    });
    let verdict = Arc::new(Mutex::new(Verdict::default()));
    let checker = Checker {
        address: address.to_owned(),
        host,
        port,
        known,
        verdict: verdict.clone(),
    };
    let handshake =
        tokio::time::timeout_at(deadline, client::connect_stream(config, stream, checker)).await;
    let mut verdict = verdict
        .lock()
        .map(|mut v| std::mem::take(&mut *v))
        .unwrap_or_default();
    let mut session = match handshake {
        Ok(Ok(session)) => session,
        Ok(Err(source)) => {
            return Err(verdict.rejected.take().unwrap_or(SshError::Protocol {
                address: address.to_owned(),
                stage: Stage::Handshake,
                source: Box::new(source),
            }));
        }
        Err(_) => {
            return Err(verdict
                .rejected
                .take()
                .unwrap_or_else(|| timeout_error(address, Stage::Handshake, settings)));
        }
    };
    notices.extend(verdict.notice.take());

    let hash = if key.algorithm().is_rsa() {
        bounded(
            deadline,
            settings,
            address,
            Stage::Auth,
            session.best_supported_rsa_hash(),
        )
        .await?
        .flatten()
    } else {
        None
    };
    let key = PrivateKeyWithHashAlg::new(Arc::new(key), hash);
    let result = bounded(
        deadline,
        settings,
        address,
        Stage::Auth,
        session.authenticate_publickey(target.username.as_str(), key),
    )
    .await?;
    match result {
        AuthResult::Success => Ok(session),
        AuthResult::Failure {
            remaining_methods, ..
        } => Err(SshError::AuthRejected {
            address: address.to_owned(),
            username: target.username.clone(),
            methods: remaining_methods
                .iter()
                .map(<&str>::from)
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Runs one stage of the connection within the caller's deadline.
async fn bounded<T>(
    deadline: Instant,
    settings: &Settings,
    address: &str,
    stage: Stage,
    future: impl Future<Output = Result<T, russh::Error>>,
) -> Result<T, SshError> {
    match tokio::time::timeout_at(deadline, future).await {
        Ok(result) => result.map_err(|source| SshError::Protocol {
            address: address.to_owned(),
            stage,
            source: Box::new(source),
        }),
        Err(_) => Err(timeout_error(address, stage, settings)),
    }
}

fn timeout_error(address: &str, stage: Stage, settings: &Settings) -> SshError {
    SshError::Timeout {
        address: address.to_owned(),
        stage,
        timeout: settings.timeout,
    }
}
