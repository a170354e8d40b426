//! The cluster's certificates (rcgen): one authority, the API server's serving certificate, the
//! ServiceAccount signing key, a client certificate per component, and kubeconfigs for them.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::Error;

/// The authority, and where its files are.
pub(crate) struct Pki {
    dir: PathBuf,
    issuer: Issuer<'static, KeyPair>,
    ca_der: CertificateDer<'static>,
    pub(crate) ca_pem: String,
}

/// A certificate and its key, as files.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

fn failed(what: &str) -> impl Fn(rcgen::Error) -> Error + '_ {
    move |e| Error::Setup(format!("{what}: {e}"))
}

fn name(common: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common);
    if let Some(organization) = organization {
        dn.push(DnType::OrganizationName, organization);
    }
    dn
}

impl Pki {
    /// A new authority, its certificate written to `dir/ca.crt`.
    pub(crate) fn new(dir: &Path) -> Result<Self, Error> {
        let key = KeyPair::generate().map_err(failed("the authority's key"))?;
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name = name("kube-cluster-ca", None);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params
            .self_signed(&key)
            .map_err(failed("the authority's certificate"))?;
        let pki = Self {
            dir: dir.to_owned(),
            ca_pem: cert.pem(),
            ca_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        };
        write(&pki.ca_file(), &pki.ca_pem)?;
        Ok(pki)
    }

    pub(crate) fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// A key pair of its own: the private key (PKCS#8 PEM) in `dir/<file>.key`, the public
    /// one in `dir/<file>.pub`. The ServiceAccount signing key.
    pub(crate) fn key_pair(&self, file: &str) -> Result<(PathBuf, PathBuf), Error> {
        let key = KeyPair::generate().map_err(failed(file))?;
        let private = self.dir.join(format!("{file}.key"));
        let public = self.dir.join(format!("{file}.pub"));
        write(&private, &key.serialize_pem())?;
        write(&public, &key.public_key_pem())?;
        Ok((private, public))
    }

    fn issue(
        &self,
        file: &str,
        params: CertificateParams,
    ) -> Result<(Identity, KeyPair, CertificateDer<'static>), Error> {
        let key = KeyPair::generate().map_err(failed(file))?;
        let mut params = params;
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer).map_err(failed(file))?;
        let identity = Identity {
            cert: self.dir.join(format!("{file}.crt")),
            key: self.dir.join(format!("{file}.key")),
        };
        write(&identity.cert, &cert.pem())?;
        write(&identity.key, &key.serialize_pem())?;
        Ok((identity, key, cert.der().clone()))
    }

    /// A serving certificate for `ips` and `dns` names.
    pub(crate) fn server(
        &self,
        file: &str,
        ips: &[Ipv4Addr],
        dns: &[&str],
    ) -> Result<Identity, Error> {
        Ok(self.serving(file, ips, dns)?.0)
    }

    /// As [`Pki::server`], also as a rustls configuration.
    pub(crate) fn serving(
        &self,
        file: &str,
        ips: &[Ipv4Addr],
        dns: &[&str],
    ) -> Result<(Identity, Arc<rustls::ServerConfig>), Error> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(file, None);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let mut sans: Vec<SanType> = ips
            .iter()
            .map(|ip| SanType::IpAddress(IpAddr::V4(*ip)))
            .collect();
        for name in dns {
            sans.push(SanType::DnsName(
                (*name)
                    .try_into()
                    .map_err(|e| Error::Setup(format!("{file}: {name}: {e}")))?,
            ));
        }
        params.subject_alt_names = sans;
        let (identity, key, der) = self.issue(file, params)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Setup(format!("{file}: {e}")))?
            .with_no_client_auth()
            .with_single_cert(
                vec![der, self.ca_der.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .map_err(|e| Error::Setup(format!("{file}: {e}")))?;
        Ok((identity, Arc::new(config)))
    }

    /// A client certificate for user `common` in group `organization`.
    pub(crate) fn client(
        &self,
        file: &str,
        common: &str,
        organization: Option<&str>,
    ) -> Result<Identity, Error> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common, organization);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        Ok(self.issue(file, params)?.0)
    }

    /// A kubeconfig at `dir/<file>` for `server` with a client certificate.
    pub(crate) fn kubeconfig(
        &self,
        file: &str,
        server: &str,
        identity: &Identity,
    ) -> Result<PathBuf, Error> {
        let path = self.dir.join(file);
        write(
            &path,
            &kubeconfig(
                server,
                &self.ca_file(),
                &format!(
                    "client-certificate: {}\n    client-key: {}",
                    identity.cert.display(),
                    identity.key.display()
                ),
            ),
        )?;
        Ok(path)
    }
}

/// A kubeconfig for `server`, trusting `ca`, authenticating with `user` (the lines under
/// `user:`, indented four spaces).
pub(crate) fn kubeconfig(server: &str, ca: &Path, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-cluster\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: user\n  user:\n    {user}\ncontexts:\n- name: kube-cluster\n  context:\n    cluster: kube-cluster\n    user: user\ncurrent-context: kube-cluster\n",
        ca.display()
    )
}

pub(crate) fn write(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(|e| Error::Setup(format!("{}: {e}", path.display())))
}
