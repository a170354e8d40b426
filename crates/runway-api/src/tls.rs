//! The API's TLS: a server certificate issued by the local certificate authority that the
//! ingress also uses (`{data_dir}/ca`, made on first start by
//! [`runway_ingress::LocalCa::load_or_create`]), so a client trusts both with one `ca.pem`.
//!
//! `LocalCa` issues certificates only to the ingress (its `issue` is private), so this module
//! reads the authority's key from the same directory and signs with the same parameters.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The authority's name, as `runway-ingress` writes it.
const CA_NAME: &str = "Runway local certificate authority";

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// The local CA could not be made or read.
    #[error("local certificate authority in {}", dir.display())]
    Ca {
        /// Its directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: runway_ingress::TlsError,
    },
    /// A file of the CA could not be read.
    #[error("cannot read {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Issuing the certificate failed.
    #[error("cannot issue the API's certificate: {0}")]
    Issue(String),
    /// rustls refused the configuration.
    #[error("tls configuration")]
    Rustls(#[source] rustls::Error),
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, CA_NAME);
    params.distinguished_name = name;
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
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
    let key_path = ca_dir.join("ca-key.pem");
    let key_pem = std::fs::read_to_string(&key_path).map_err(|source| TlsSetupError::Io {
        path: key_path.clone(),
        source,
    })?;
    let issue = |e: rcgen::Error| TlsSetupError::Issue(e.to_string());
    let ca_key = KeyPair::from_pem(&key_pem).map_err(issue)?;
    let issuer = Issuer::new(ca_params(), ca_key);
    let ca_der = CertificateDer::from_pem_slice(ca.cert_pem().as_bytes())
        .map_err(|e| TlsSetupError::Issue(e.to_string()))?;

    let key = KeyPair::generate().map_err(issue)?;
    let mut params = CertificateParams::new(hostnames.to_vec()).map_err(issue)?;
    if let Some(first) = hostnames.first() {
        params.distinguished_name.push(DnType::CommonName, first);
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, &issuer).map_err(issue)?;
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsSetupError::Rustls)?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone(), ca_der], private)
        .map_err(TlsSetupError::Rustls)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
