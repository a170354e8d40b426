//! The server's own certificate authority and its certificate for 127.0.0.1 (rcgen, ring).

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

pub(crate) struct Tls {
    pub(crate) ca_pem: String,
    config: Arc<rustls::ServerConfig>,
}

impl Tls {
    pub(crate) fn new() -> Result<Self, String> {
        let ca_key = KeyPair::generate().map_err(|e| format!("ca key: {e}"))?;
        let mut ca = CertificateParams::default();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "kube-standin-ca");
        ca.distinguished_name = dn;
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca
            .self_signed(&ca_key)
            .map_err(|e| format!("ca certificate: {e}"))?;
        let ca_pem = ca_cert.pem();
        let issuer = Issuer::new(ca, ca_key);

        let key = KeyPair::generate().map_err(|e| format!("server key: {e}"))?;
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![
            SanType::IpAddress(std::net::IpAddr::from([127, 0, 0, 1])),
            SanType::DnsName("localhost".try_into().map_err(|e| format!("san: {e}"))?),
        ];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "kube-apiserver");
        params.distinguished_name = dn;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(|e| format!("server certificate: {e}"))?;
        let chain = vec![cert.der().clone(), ca_cert.der().clone()];
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("tls: {e}"))?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .map_err(|e| format!("tls: {e}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            ca_pem,
            config: Arc::new(config),
        })
    }

    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(Arc::clone(&self.config))
    }
}
