//! The API's TLS: a server certificate issued by the local certificate authority that the
//! ingress also uses (`{data_dir}/ca`, made on first start by
//! [`runway_ingress::LocalCa::load_or_create`]), so a client trusts both with one `ca.pem`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// The local CA could not be made or read, or not issue the certificate.
    #[error("local certificate authority in {}", dir.display())]
    Ca {
        /// Its directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: runway_ingress::TlsError,
    },
    /// rustls refused the configuration.
    #[error("tls configuration")]
    Rustls(#[source] rustls::Error),
}

/// A rustls server configuration (HTTP/1.1, TLS 1.2 and 1.3, ring) with a certificate for
/// `hostnames` (DNS names or IP addresses) issued by the local CA in `ca_dir`, which is made
/// there when missing.
///
/// # Errors
/// See [`TlsSetupError`].
pub fn tls_config(
    ca_dir: &Path,
    hostnames: &[String],
) -> Result<Arc<rustls::ServerConfig>, TlsSetupError> {
    let ca =
        runway_ingress::LocalCa::load_or_create(ca_dir).map_err(|source| TlsSetupError::Ca {
            dir: ca_dir.to_owned(),
            source,
        })?;
    let (chain, private) = ca.issue(hostnames).map_err(|source| TlsSetupError::Ca {
        dir: ca_dir.to_owned(),
        source,
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsSetupError::Rustls)?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(TlsSetupError::Rustls)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
