//! TLS: rustls (ring, TLS 1.2 and 1.3 only) with the certificate chosen by SNI: an operator's
//! certificate for its domains (exact name, then wildcard), else a certificate of the route
//! table's (the control plane's, from ACME, for custom domains; exact, then wildcard), else one
//! issued on the fly by the local certificate authority for a host the route table serves. Any
//! other name is refused during the handshake. Operator certificates are read again when their
//! files change (a renewal needs no restart); the table's are parsed when a table is set (once
//! per distinct PEM, see [`crate::table::Routes`]), never per handshake.
//!
//! TLS-ALPN-01 (RFC 8737): `acme-tls/1` is offered after `h2` and `http/1.1`, so no ordinary
//! client gets it. A ClientHello offering it (an ACME server's validation, which offers it
//! alone) gets the table's challenge certificate for its server name and nothing else: no
//! challenge for that name, or other protocols offered beside it, and the handshake is refused.
//! The connection is closed once such a handshake is done (`server.rs`).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::table::Table;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot use {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("certificate authority")]
    Ca(#[source] rcgen::Error),
    #[error("certificate {path}: {message}")]
    Certificate { path: PathBuf, message: String },
    #[error("tls configuration")]
    Rustls(#[source] rustls::Error),
}

const CA_NAME: &str = "Runway local certificate authority";

/// The local certificate authority: made on first start in a directory (`ca.pem`, which a
/// client adds to its trust store, and `ca-key.pem`), read again afterwards.
pub struct LocalCa {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
}

impl fmt::Debug for LocalCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalCa").finish_non_exhaustive()
    }
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

impl LocalCa {
    /// Reads the authority from `dir`, or makes it there (key readable by its owner only).
    /// One made elsewhere (an operator's, or the Helm chart's) is used as it is: certificates
    /// name it as their issuer exactly as its own certificate names itself.
    pub fn load_or_create(dir: &Path) -> Result<Self, TlsError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| TlsError::Io { path, source }
        };
        let cert_path = dir.join("ca.pem");
        let key_path = dir.join("ca-key.pem");
        // Made under a lock, so that servers starting together on one data directory (replicas
        // on one machine) make one authority between them, not a key of one and the
        // certificate of another. Not taken to read one made already: its directory may be
        // read-only (a mounted Secret).
        let _making = if key_path.exists() && cert_path.exists() {
            None
        } else {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
            let lock_path = dir.join(".ca.lock");
            let lock = std::fs::File::create(&lock_path).map_err(io(&lock_path))?;
            lock.lock().map_err(io(&lock_path))?;
            Some(lock)
        };
        // One without the other is someone's half-made authority: not replaced in silence.
        if key_path.exists() != cert_path.exists() {
            let (present, missing) = if key_path.exists() {
                (&key_path, &cert_path)
            } else {
                (&cert_path, &key_path)
            };
            return Err(TlsError::Certificate {
                path: missing.clone(),
                message: format!("missing, while {} is there", present.display()),
            });
        }
        let (key, cert_pem) = if key_path.exists() {
            let key_pem = std::fs::read(&key_path).map_err(io(&key_path))?;
            let key = ca_key(&key_pem).map_err(|message| TlsError::Certificate {
                path: key_path.clone(),
                message,
            })?;
            let cert_pem = std::fs::read_to_string(&cert_path).map_err(io(&cert_path))?;
            (key, cert_pem)
        } else {
            let key = KeyPair::generate().map_err(TlsError::Ca)?;
            let cert = ca_params().self_signed(&key).map_err(TlsError::Ca)?;
            write_private(&key_path, key.serialize_pem().as_bytes()).map_err(io(&key_path))?;
            std::fs::write(&cert_path, cert.pem()).map_err(io(&cert_path))?;
            (key, cert.pem())
        };
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|e| {
            TlsError::Certificate {
                path: cert_path.clone(),
                message: e.to_string(),
            }
        })?;
        let issuer =
            Issuer::from_ca_cert_der(&cert_der, key).map_err(|e| TlsError::Certificate {
                path: cert_path.clone(),
                message: format!("not a certificate authority's certificate: {e}"),
            })?;
        Ok(Self {
            issuer,
            cert_pem,
            cert_der,
        })
    }

    /// The authority's certificate, for a client's trust store.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A server certificate for `names` (DNS names or IP addresses; the first is its common
    /// name), as its chain (the certificate, then the authority's) and its new private key.
    /// The control plane's API serves one, so clients trust both with one `ca.pem`.
    pub fn issue(
        &self,
        names: &[String],
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
        let key = KeyPair::generate().map_err(TlsError::Ca)?;
        let mut params = CertificateParams::new(names.to_vec()).map_err(TlsError::Ca)?;
        if let Some(first) = names.first() {
            params.distinguished_name.push(DnType::CommonName, first);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer).map_err(TlsError::Ca)?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        Ok((vec![cert.der().clone(), self.cert_der.clone()], der))
    }

    /// A certificate for one host name, with its chain, for the handshake.
    fn certified(&self, name: &str, provider: &CryptoProvider) -> Option<Arc<CertifiedKey>> {
        let (chain, key) = self.issue(&[name.to_owned()]).ok()?;
        let signing = provider.key_provider.load_private_key(key).ok()?;
        Some(Arc::new(CertifiedKey::new(chain, signing)))
    }
}

/// An authority's key from PEM: PKCS#8, or PKCS#1 (RSA, as `openssl genrsa -traditional` and
/// Helm's `genCA` write it), which the signer takes once wrapped as PKCS#8.
fn ca_key(pem: &[u8]) -> Result<KeyPair, String> {
    let key = PrivateKeyDer::from_pem_slice(pem).map_err(|e| e.to_string())?;
    let pkcs8 = match key {
        PrivateKeyDer::Pkcs8(key) => key.secret_pkcs8_der().to_vec(),
        PrivateKeyDer::Pkcs1(key) => pkcs1_as_pkcs8(key.secret_pkcs1_der()),
        _ => {
            return Err(
                "an EC key in SEC1 form: convert it with `openssl pkcs8 -topk8 -nocrypt`, \
                        or give a PKCS#8 or RSA key"
                    .to_owned(),
            );
        }
    };
    KeyPair::try_from(pkcs8).map_err(|e| e.to_string())
}

/// PKCS#8's `PrivateKeyInfo` around an RSA key: version 0, `rsaEncryption` with NULL
/// parameters, the PKCS#1 key as an octet string (RFC 5208).
fn pkcs1_as_pkcs8(pkcs1: &[u8]) -> Vec<u8> {
    fn length(n: usize, out: &mut Vec<u8>) {
        if n < 0x80 {
            out.push(n as u8);
        } else {
            let bytes = n.to_be_bytes();
            let skip = bytes.iter().take_while(|b| **b == 0).count();
            out.push(0x80 | (bytes.len() - skip) as u8);
            out.extend_from_slice(&bytes[skip..]);
        }
    }
    const VERSION_AND_ALGORITHM: [u8; 18] = [
        0x02, 0x01, 0x00, // INTEGER 0
        0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05,
        0x00, // SEQUENCE { rsaEncryption, NULL }
    ];
    let mut octets = vec![0x04];
    length(pkcs1.len(), &mut octets);
    octets.extend_from_slice(pkcs1);
    let mut out = vec![0x30];
    length(VERSION_AND_ALGORITHM.len() + octets.len(), &mut out);
    out.extend_from_slice(&VERSION_AND_ALGORITHM);
    out.extend_from_slice(&octets);
    out
}

#[cfg(unix)]
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)
}

/// The ALPN protocol of TLS-ALPN-01 validation (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The acmeIdentifier extension's OID (1.3.6.1.5.5.7.1.31), as its DER content.
const ACME_IDENTIFIER_OID: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x1f];

/// A certificate chain and its key from PEM, ready for the handshake, with what a table's
/// checks need of the leaf. `Debug` shows no key material (rustls's signing keys show their
/// algorithm only).
#[derive(Debug)]
pub(crate) struct PemPair {
    pub(crate) key: Arc<CertifiedKey>,
    /// The leaf's DNS names (its subjectAltName), lower case.
    pub(crate) names: Vec<String>,
    /// The leaf carries RFC 8737's acmeIdentifier extension.
    pub(crate) acme_identifier: bool,
}

impl PemPair {
    /// Whether the leaf is valid for `domain` (lower case): a name of its own, or, for a name
    /// that is no wildcard, a wildcard of its parent (one label, as clients match).
    pub(crate) fn covers(&self, domain: &str) -> bool {
        if self.names.iter().any(|name| name == domain) {
            return true;
        }
        match domain.split_once('.') {
            Some((label, parent)) if label != "*" => self
                .names
                .iter()
                .any(|name| name.strip_prefix("*.") == Some(parent)),
            _ => false,
        }
    }
}

/// Parses a chain (leaf first) and its key (PKCS#8, SEC1 or PKCS#1), and checks that the key
/// is the leaf's. The messages say what is wrong without quoting the key.
pub(crate) fn parse_pem_pair(cert_pem: &str, key_pem: &str) -> Result<PemPair, String> {
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cert_pem is not PEM certificates: {e}"))?;
    let Some(leaf) = chain.first() else {
        return Err("cert_pem holds no certificate".to_owned());
    };
    let (_, x509) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| format!("cert_pem: its first certificate cannot be read: {e}"))?;
    let names = match x509.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|name| match name {
                x509_parser::extensions::GeneralName::DNSName(dns) => {
                    Some(dns.to_ascii_lowercase())
                }
                _ => None,
            })
            .collect(),
        Ok(None) => Vec::new(),
        Err(e) => return Err(format!("cert_pem: its subjectAltName cannot be read: {e}")),
    };
    let acme_identifier = x509
        .extensions()
        .iter()
        .any(|extension| extension.oid.as_bytes() == ACME_IDENTIFIER_OID);
    // The PEM parser's own errors are not passed on: they may quote a line of the key.
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|_| "key_pem holds no private key in PEM (PKCS#8, SEC1 or PKCS#1)".to_owned())?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|_| "key_pem is not an RSA, ECDSA or Ed25519 key that can sign".to_owned())?;
    // As rustls's `keys_match`, which would refuse a challenge certificate's critical
    // acmeIdentifier extension before comparing anything.
    if signing
        .public_key()
        .is_some_and(|public| public.as_ref() != x509.public_key().raw)
    {
        return Err("the key does not match the certificate (its first in cert_pem)".to_owned());
    }
    drop(x509);
    Ok(PemPair {
        key: Arc::new(CertifiedKey::new(chain, signing)),
        names,
        acme_identifier,
    })
}

/// An operator's certificate and key (PEM) for some domains (`*.example.com` allowed).
#[derive(Debug, Clone)]
pub struct CertificateFiles {
    pub domains: Vec<String>,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Operator certificate files as `--certificate` takes them:
/// `DOMAIN[,DOMAIN...]:CERT.pem:KEY.pem`.
pub fn certificate_argument(domains: &[String], cert: &Path, key: &Path) -> String {
    format!("{}:{}:{}", domains.join(","), cert.display(), key.display())
}

impl fmt::Display for CertificateFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&certificate_argument(&self.domains, &self.cert, &self.key))
    }
}

/// Operator certificates by lower-case domain (`*.example.com` for a wildcard).
type ByDomain = HashMap<String, Arc<CertifiedKey>>;

/// What identifies a version of a file: modification time, size and inode. A Kubernetes
/// secret volume swaps a symlink, which changes the inode the path leads to.
type Fingerprint = Vec<Option<(std::time::SystemTime, u64, u64)>>;

/// Chooses a certificate by SNI.
pub(crate) struct Resolver {
    provider: Arc<CryptoProvider>,
    files: Vec<CertificateFiles>,
    operator: ArcSwap<ByDomain>,
    seen: Mutex<Fingerprint>,
    ca: Option<LocalCa>,
    issued: Mutex<HashMap<String, Arc<CertifiedKey>>>,
    routes: Arc<crate::Shared>,
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolver")
            .field("operator", &self.operator.load().keys().collect::<Vec<_>>())
            .field("ca", &self.ca.is_some())
            .finish_non_exhaustive()
    }
}

impl Resolver {
    /// The name the local authority certifies for `name`: itself when the table serves it, the
    /// wildcard of its parent when that is the platform's (`*.dev.localhost` for an unknown
    /// `typo.dev.localhost`, answered with a 404 rather than a handshake alert); none for any
    /// other name, so a client cannot have certificates minted for names of its choosing.
    fn certified_name(table: &Table, name: &str) -> Option<String> {
        if table.names(name) {
            return Some(name.to_owned());
        }
        table
            .platform_parent(name)
            .map(|parent| format!("*.{parent}"))
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name()?.to_ascii_lowercase();
        if let Some(protocols) = hello.alpn() {
            let (mut acme, mut other) = (false, false);
            for protocol in protocols {
                if protocol == ACME_TLS_ALPN {
                    acme = true;
                } else {
                    other = true;
                }
            }
            // TLS-ALPN-01 validation offers `acme-tls/1` alone: it gets the challenge
            // certificate for its name, and nothing else ever does.
            if acme {
                if other {
                    return None;
                }
                return self.routes.routes.load_guard().challenge(&name);
            }
        }
        let operator = self.operator.load();
        if let Some(key) = operator.get(&name) {
            return Some(Arc::clone(key));
        }
        if let Some((_, parent)) = name.split_once('.')
            && let Some(key) = operator.get(&format!("*.{parent}"))
        {
            return Some(Arc::clone(key));
        }
        let table = self.routes.routes.load_guard();
        if let Some(key) = table.certificate(&name) {
            return Some(key);
        }
        // Only names the table serves (or the platform's wildcards) get a certificate from the
        // local authority.
        let ca = self.ca.as_ref()?;
        let name = Self::certified_name(&table, &name)?;
        drop(table);
        let mut issued = self.issued.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(key) = issued.get(&name) {
            return Some(Arc::clone(key));
        }
        let key = ca.certified(&name, &self.provider)?;
        issued.insert(name, Arc::clone(&key));
        Some(key)
    }
}

/// What the TLS listener uses.
#[derive(Debug, Default)]
pub struct TlsOptions {
    /// Where the local certificate authority lives; none means operator certificates only.
    pub ca_dir: Option<PathBuf>,
    pub certificates: Vec<CertificateFiles>,
}

fn load_certified(
    files: &CertificateFiles,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let bad = |path: &Path, message: String| TlsError::Certificate {
        path: path.to_owned(),
        message,
    };
    let chain = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| bad(&files.cert, e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&files.cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(bad(&files.cert, "no certificate in the file".to_owned()));
    }
    let key =
        PrivateKeyDer::from_pem_file(&files.key).map_err(|e| bad(&files.key, e.to_string()))?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| bad(&files.key, e.to_string()))?;
    let certified = CertifiedKey::new(chain, signing);
    // A renewal caught between writing its two files pairs a new certificate with an old key.
    if let Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) =
        certified.keys_match()
    {
        return Err(bad(
            &files.key,
            format!(
                "the key does not match the certificate in {}",
                files.cert.display()
            ),
        ));
    }
    Ok(certified)
}

fn fingerprint(files: &[CertificateFiles]) -> Fingerprint {
    use std::os::unix::fs::MetadataExt;
    files
        .iter()
        .flat_map(|f| [&f.cert, &f.key])
        .map(|path| {
            let meta = std::fs::metadata(path).ok()?;
            Some((meta.modified().ok()?, meta.len(), meta.ino()))
        })
        .collect()
}

fn load_all(files: &[CertificateFiles], provider: &CryptoProvider) -> Result<ByDomain, TlsError> {
    let mut operator = HashMap::new();
    for files in files {
        let key = Arc::new(load_certified(files, provider)?);
        for domain in &files.domains {
            operator.insert(domain.to_ascii_lowercase(), Arc::clone(&key));
        }
    }
    Ok(operator)
}

impl Resolver {
    /// Reads the operator's certificates again if any of their files changed since the last
    /// look, and swaps them in whole. True when they were swapped; on an error the previous
    /// certificates stay in use, and the same files are not tried (nor reported) again until
    /// they change once more (a half-written renewal is picked up when its second file lands).
    pub(crate) fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let now = fingerprint(&self.files);
        if *seen == now {
            return Ok(false);
        }
        *seen = now;
        let operator = load_all(&self.files, &self.provider)?;
        self.operator.store(Arc::new(operator));
        Ok(true)
    }
}

/// The rustls configuration: TLS 1.2 and 1.3, ALPN h2, http/1.1 then acme-tls/1, SNI
/// resolution.
pub(crate) fn server_config(
    options: &TlsOptions,
    shared: Arc<crate::Shared>,
) -> Result<(rustls::ServerConfig, Arc<Resolver>, Option<String>), TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let seen = fingerprint(&options.certificates);
    let operator = load_all(&options.certificates, &provider)?;
    let ca = options
        .ca_dir
        .as_deref()
        .map(LocalCa::load_or_create)
        .transpose()?;
    let ca_pem = ca.as_ref().map(|ca| ca.cert_pem().to_owned());
    let resolver = Arc::new(Resolver {
        provider: Arc::clone(&provider),
        files: options.certificates.clone(),
        operator: ArcSwap::from_pointee(operator),
        seen: Mutex::new(seen),
        ca,
        issued: Mutex::new(HashMap::new()),
        routes: shared,
    });
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsError::Rustls)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::clone(&resolver) as Arc<dyn ResolvesServerCert>);
    // The server's order decides: `acme-tls/1` is chosen only by a client offering nothing else.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec(), ACME_TLS_ALPN.to_vec()];
    Ok((config, resolver, ca_pem))
}

/// Certificates for unit tests.
#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
pub(crate) mod testing {
    /// A self-signed certificate for `names` and its key (PKCS#8), PEM.
    pub(crate) fn self_signed(names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        let cert = rcgen::CertificateParams::new(names)
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A TLS-ALPN-01 challenge certificate for `name` (RFC 8737: its acmeIdentifier extension
    /// holds the key authorization's SHA-256, here any 32 bytes) and its key, PEM.
    pub(crate) fn challenge(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
        params
            .custom_extensions
            .push(rcgen::CustomExtension::new_acme_identifier(&[7; 32]));
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// A chain and its key in PKCS#8, SEC1 (`openssl ecparam -genkey`) or PKCS#1 (`openssl
    /// genrsa -traditional`) form; the names and the acmeIdentifier extension are read off the
    /// leaf; another's key is refused.
    #[test]
    fn pem_pairs_are_parsed_in_every_key_form() {
        let (cert, key) = testing::self_signed(&["Shop.example.test", "*.shop.example.test"]);
        let pair = parse_pem_pair(&cert, &key).unwrap();
        assert_eq!(pair.names, ["shop.example.test", "*.shop.example.test"]);
        assert!(!pair.acme_identifier);
        assert!(pair.covers("shop.example.test"));
        assert!(pair.covers("www.shop.example.test"));
        assert!(pair.covers("*.shop.example.test"));
        assert!(!pair.covers("a.b.shop.example.test"));
        assert!(!pair.covers("example.test"));

        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let read = |path: &str| std::fs::read_to_string(fixtures.join(path)).unwrap();
        let sec1 = parse_pem_pair(&read("sec1-key/cert.pem"), &read("sec1-key/key.pem")).unwrap();
        assert!(sec1.covers("sec1.example.test"));
        parse_pem_pair(&read("pkcs1-ca/ca.pem"), &read("pkcs1-ca/ca-key.pem")).unwrap();

        let (challenge, challenge_key) = testing::challenge("shop.example.test");
        let pair = parse_pem_pair(&challenge, &challenge_key).unwrap();
        assert!(pair.acme_identifier);
        assert_eq!(pair.names, ["shop.example.test"]);

        let error = parse_pem_pair(&cert, &challenge_key).unwrap_err();
        assert!(error.contains("the key does not match"), "{error}");
        let error = parse_pem_pair(&cert, &read("sec1-key/key.pem")).unwrap_err();
        assert!(error.contains("the key does not match"), "{error}");
        assert_eq!(
            parse_pem_pair("", &key).unwrap_err(),
            "cert_pem holds no certificate"
        );
        // A broken key is not quoted.
        let broken = "-----BEGIN PRIVATE KEY-----\nSECRETSECRETSECRET\n-----END PRIVATE KEY-----\n";
        let error = parse_pem_pair(&cert, broken).unwrap_err();
        assert!(!error.contains("SECRET"), "{error}");
    }

    /// A route for every host (`*`, a cell router) does not make the local authority sign
    /// whatever name a client sends: only names a route names, and the platform's wildcards.
    #[test]
    fn the_authority_signs_only_names_a_route_names() {
        let routes = crate::table::Routes::new(
            Arc::new(crate::Metrics::new()),
            std::time::Duration::ZERO,
            16,
        );
        let config: crate::RouteTableConfig = serde_json::from_value(serde_json::json!({
            "routes": [{"service": "router", "env": "cells", "domains": ["*", "gitlab.example.com"],
                "cells": {"rules": [{"id": "all", "action": "proxy"}],
                          "topology": {"cells": [{"id": 1, "address": "127.0.0.1:9"}], "legacy_cell": 1}}}]
        }))
        .unwrap();
        config.validate().unwrap();
        routes.set(&config).unwrap();
        let table = routes.load();
        assert_eq!(
            Resolver::certified_name(&table, "gitlab.example.com").as_deref(),
            Some("gitlab.example.com")
        );
        assert_eq!(Resolver::certified_name(&table, "www.bank.example"), None);
        assert!(routes.load().resolve_any("www.bank.example"));
    }

    /// Servers starting together on one empty directory (replicas sharing a data directory)
    /// make one authority between them: every one reads the same certificate, whose key is
    /// the one on disk.
    #[test]
    fn starts_together_make_one_authority() {
        let dir = tempfile::tempdir().unwrap();
        let ca_dir = dir.path().join("ca");
        let together = std::sync::Barrier::new(8);
        let made: Vec<String> = std::thread::scope(|scope| {
            let starts: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        together.wait();
                        LocalCa::load_or_create(&ca_dir).unwrap()
                    })
                })
                .collect();
            starts
                .into_iter()
                .map(|start| start.join().unwrap().cert_pem().to_owned())
                .collect()
        });
        let on_disk = std::fs::read_to_string(ca_dir.join("ca.pem")).unwrap();
        assert!(made.iter().all(|pem| *pem == on_disk), "authorities differ");
        // And the key on disk is that certificate's.
        let again = LocalCa::load_or_create(&ca_dir).unwrap();
        assert_eq!(again.cert_pem(), on_disk);
    }

    /// An authority whose key is PKCS#1 (Helm's `genCA`, `openssl genrsa -traditional`) is
    /// used as it is, and issues certificates chained to it; a SEC1 key is refused by name.
    #[test]
    fn an_rsa_authority_made_elsewhere_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pkcs1-ca");
        for file in ["ca.pem", "ca-key.pem"] {
            std::fs::copy(fixtures.join(file), dir.path().join(file)).unwrap();
        }
        let ca = LocalCa::load_or_create(dir.path()).unwrap();
        let (chain, _) = ca.issue(&["hello.dev.localhost".to_owned()]).unwrap();
        assert_eq!(chain.len(), 2);
        assert_eq!(
            chain[1].as_ref(),
            CertificateDer::from_pem_file(fixtures.join("ca.pem"))
                .unwrap()
                .as_ref()
        );
        // The issued certificate verifies against the authority.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(chain[1].clone()).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        use rustls::client::danger::ServerCertVerifier;
        verifier
            .verify_server_cert(
                &chain[0],
                &[],
                &rustls::pki_types::ServerName::try_from("hello.dev.localhost").unwrap(),
                &[],
                rustls::pki_types::UnixTime::now(),
            )
            .unwrap();

        let sec1 = b"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIDuO4dX0rA6Nk5pYuE5H1dQo8i+Yk3rH5cJb2B3x2zQ1oAoGCCqGSM49\nAwEHoUQDQgAE\n-----END EC PRIVATE KEY-----\n";
        let error = ca_key(sec1).map(drop).unwrap_err();
        assert!(error.contains("openssl pkcs8"), "{error}");
    }
}
