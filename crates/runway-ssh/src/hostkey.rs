//! Host key checking against an OpenSSH known-hosts file, or none at all (said so).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use russh::keys::known_hosts::known_host_keys_path;
use russh::keys::{Algorithm, HashAlg, PublicKey, PublicKeyOrCertificate};

use crate::error::{HostKeyError, SshError};

/// How servers' host keys are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostKeyPolicy {
    /// Against an OpenSSH known-hosts file: plain or hashed (`|1|...`) host names,
    /// `[host]:port` for a port other than 22. A host missing from it, or listed with other
    /// keys, fails the connection. The file must exist.
    KnownHosts(PathBuf),
    /// Any key is accepted (upstream's only behaviour); each connection reports a
    /// [`Notice::HostKeyNotChecked`] so that the caller says so in its log.
    AcceptAny,
}

/// Something the caller should log about a connection that succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
    /// The host key of `address` was accepted without a check: no known-hosts file was given.
    HostKeyNotChecked {
        address: String,
        algorithm: String,
        fingerprint: String,
    },
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::HostKeyNotChecked {
                address,
                algorithm,
                fingerprint,
            } => write!(
                f,
                "host key checking is off (no known-hosts file given): accepted the host key of {address} unchecked: {fingerprint} ({algorithm})"
            ),
        }
    }
}

/// The host name as a known-hosts file writes it: `host`, or `[host]:port` for another port.
pub(crate) fn host_pattern(host: &str, port: u16) -> String {
    if port == 22 {
        host.to_owned()
    } else {
        format!("[{host}]:{port}")
    }
}

/// The keys the known-hosts file at `path` holds for `host:port`, with their line numbers.
pub(crate) fn known_keys(
    address: &str,
    host: &str,
    port: u16,
    path: &Path,
) -> Result<Vec<(usize, PublicKey)>, SshError> {
    let known_hosts_error = |source| SshError::KnownHosts {
        address: address.to_owned(),
        path: path.to_owned(),
        source: Box::new(source),
    };
    // russh reads a missing file as an empty one; a file the user named must exist.
    std::fs::metadata(path).map_err(|e| known_hosts_error(e.into()))?;
    known_host_keys_path(host, port, path).map_err(known_hosts_error)
}

/// The host key algorithms to offer, those of the keys the known-hosts file holds first, as
/// OpenSSH does: a server with several host keys then shows the one we can check.
pub(crate) fn preferred_algorithms(known: &[(usize, PublicKey)]) -> Vec<Algorithm> {
    let all = russh::Preferred::DEFAULT.key.to_vec();
    let family = |a: &Algorithm| match a {
        Algorithm::Rsa { .. } => Algorithm::Rsa { hash: None },
        other => other.clone(),
    };
    let (mut first, rest): (Vec<_>, Vec<_>) = all.into_iter().partition(|a| {
        known
            .iter()
            .any(|(_, k)| family(&k.algorithm()) == family(a))
    });
    first.extend(rest);
    first
}

/// What the handshake's host key check decided, kept for after the handshake.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    pub(crate) rejected: Option<SshError>,
    pub(crate) notice: Option<Notice>,
}

/// The russh client handler: checks the host key, nothing else.
#[derive(Debug)]
pub(crate) struct Checker {
    pub(crate) address: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The known-hosts file and what it holds for this host; `None` accepts any key.
    pub(crate) known: Option<(PathBuf, Vec<(usize, PublicKey)>)>,
    pub(crate) verdict: Arc<Mutex<Verdict>>,
}

impl Checker {
    fn check(&self, key: &PublicKey) -> Result<Option<Notice>, SshError> {
        let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
        let algorithm = key.algorithm().to_string();
        let Some((path, known)) = &self.known else {
            return Ok(Some(Notice::HostKeyNotChecked {
                address: self.address.clone(),
                algorithm,
                fingerprint,
            }));
        };
        if known.iter().any(|(_, k)| k.key_data() == key.key_data()) {
            return Ok(None);
        }
        Err(SshError::HostKey(Box::new(HostKeyError {
            address: self.address.clone(),
            host_pattern: host_pattern(&self.host, self.port),
            algorithm,
            fingerprint,
            known_hosts: path.clone(),
            changed: known.first().map(|(line, _)| *line),
        })))
    }
}

impl russh::client::Handler for Checker {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        server_public_key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let key = match server_public_key {
            PublicKeyOrCertificate::PublicKey { key, .. } => key.clone(),
            PublicKeyOrCertificate::Certificate(cert) => PublicKey::from(cert.public_key().clone()),
        };
        let result = self.check(&key);
        let accepted = result.is_ok();
        if let Ok(mut verdict) = self.verdict.lock() {
            match result {
                Ok(notice) => verdict.notice = notice,
                Err(e) => verdict.rejected = Some(e),
            }
        }
        Ok(accepted)
    }
}
