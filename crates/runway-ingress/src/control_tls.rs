//! Mutual TLS for control connections over the network (`runway-ingress --control-listen`).
//!
//! Both sides read a directory laid out as a Kubernetes TLS Secret mounts it: `ca.crt` (the
//! control channel's own authority, which nothing else trusts), `tls.crt` (the chain) and
//! `tls.key` (PKCS#8, PKCS#1 or SEC1). The ingress serves its certificate, which must name
//! [`SERVER_NAME`], and accepts only clients whose certificate that authority signed: the
//! control plane's. Nothing else can set a table, drain an instance or read the figures.
//! [`generate`] makes such an authority and both directories.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;

use crate::tls::TlsError;

/// The name an ingress's control certificate is for, and the name a control plane checks.
pub const SERVER_NAME: &str = "runway-ingress-control";
/// The control channel's authority, in the directory.
pub const CA_FILE: &str = "ca.crt";
/// This side's certificate chain.
pub const CERT_FILE: &str = "tls.crt";
/// This side's private key.
pub const KEY_FILE: &str = "tls.key";

/// One side's files, read.
struct Files {
    roots: RootCertStore,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

fn read(dir: &Path) -> Result<Files, TlsError> {
    let bad = |file: &str, message: String| TlsError::Certificate {
        path: dir.join(file),
        message,
    };
    let certificates = |file: &str| -> Result<Vec<CertificateDer<'static>>, TlsError> {
        let path = dir.join(file);
        if !path.is_file() {
            return Err(bad(file, "no such file".to_owned()));
        }
        let certificates = CertificateDer::pem_file_iter(&path)
            .map_err(|e| bad(file, e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(file, e.to_string()))?;
        if certificates.is_empty() {
            return Err(bad(file, "no certificate in the file".to_owned()));
        }
        Ok(certificates)
    };
    let mut roots = RootCertStore::empty();
    for ca in certificates(CA_FILE)? {
        roots
            .add(ca)
            .map_err(|e| bad(CA_FILE, format!("not a usable authority: {e}")))?;
    }
    let chain = certificates(CERT_FILE)?;
    let key = PrivateKeyDer::from_pem_file(dir.join(KEY_FILE))
        .map_err(|e| bad(KEY_FILE, e.to_string()))?;
    Ok(Files { roots, chain, key })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The ingress's side: its certificate, and a client certificate demanded of every peer.
pub fn acceptor(dir: &Path) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    let files = read(dir)?;
    let provider = provider();
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(files.roots), Arc::clone(&provider))
            .build()
            .map_err(|e| TlsError::Certificate {
                path: dir.join(CA_FILE),
                message: e.to_string(),
            })?;
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::Rustls)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(files.chain, files.key)
        .map_err(|e| TlsError::Certificate {
            path: dir.join(KEY_FILE),
            message: e.to_string(),
        })?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The control plane's side: trusts the control channel's authority alone, checks the
/// ingress's certificate for `server_name`, and presents its own.
#[derive(Clone)]
pub struct ClientTls {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
    dir: PathBuf,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("dir", &self.dir)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    pub fn load(dir: &Path, server_name: &str) -> Result<Self, TlsError> {
        let files = read(dir)?;
        let name =
            ServerName::try_from(server_name.to_owned()).map_err(|e| TlsError::Certificate {
                path: dir.to_owned(),
                message: format!("{server_name:?} is not a server name: {e}"),
            })?;
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(TlsError::Rustls)?
            .with_root_certificates(files.roots)
            .with_client_auth_cert(files.chain, files.key)
            .map_err(|e| TlsError::Certificate {
                path: dir.join(KEY_FILE),
                message: e.to_string(),
            })?;
        Ok(Self {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            name,
            dir: dir.to_owned(),
        })
    }

    pub(crate) async fn connect(
        &self,
        tcp: tokio::net::TcpStream,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        self.connector.connect(self.name.clone(), tcp).await
    }
}

/// Makes a new control-channel authority and, signed by it, the ingress's certificate (for
/// [`SERVER_NAME`]) in `ingress_dir` and the control plane's (a client certificate) in
/// `control_dir`, each with the authority's certificate. The authority's key is not kept:
/// another certificate means generating both again.
pub fn generate(ingress_dir: &Path, control_dir: &Path) -> Result<(), TlsError> {
    let ca_key = KeyPair::generate().map_err(TlsError::Ca)?;
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "Runway control channel authority");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).map_err(TlsError::Ca)?;
    let issuer = Issuer::new(ca, ca_key);
    let sides = [
        (
            ingress_dir,
            SERVER_NAME,
            ExtendedKeyUsagePurpose::ServerAuth,
        ),
        (
            control_dir,
            "runway-control-plane",
            ExtendedKeyUsagePurpose::ClientAuth,
        ),
    ];
    for (dir, name, usage) in sides {
        let key = KeyPair::generate().map_err(TlsError::Ca)?;
        let mut params = CertificateParams::new(vec![name.to_owned()]).map_err(TlsError::Ca)?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![usage];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &issuer).map_err(TlsError::Ca)?;
        let io = |path: PathBuf| move |source| TlsError::Io { path, source };
        std::fs::create_dir_all(dir).map_err(io(dir.to_owned()))?;
        std::fs::write(dir.join(CA_FILE), ca_cert.pem()).map_err(io(dir.join(CA_FILE)))?;
        std::fs::write(dir.join(CERT_FILE), cert.pem()).map_err(io(dir.join(CERT_FILE)))?;
        crate::tls::write_private(&dir.join(KEY_FILE), key.serialize_pem().as_bytes())
            .map_err(io(dir.join(KEY_FILE)))?;
    }
    Ok(())
}
