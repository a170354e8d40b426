//! `signatures`: which images may deploy where. Each rule covers services and environments and
//! names what a signature must come from: a cosign key, or a certificate from a configured
//! authority naming the pipeline that signed (the project and the ref, the same kind of claims
//! a CI identity binding checks). An image a rule covers deploys only if a cosign signature
//! stored beside it (`<repository>:sha256-<hex>.sig`) passes every rule that covers it; its
//! revision records what verified it.
//!
//! The signatures are fetched with `runway-oci`, through the same registry settings as every
//! pull (credentials, plain-HTTP registries, allowed registries, bounds), and checked with the
//! `sigstore` crate: its cosign payloads and verification constraints (a key's signature; a
//! certificate chained to the authority, for code signing, valid now, whose key signed). The
//! certificate's identity is read from Fulcio's extensions (OID 1.3.6.1.4.1.57264.1.*), which
//! the crate reads only for GitHub's.
//!
//! Without a transparency log there is no signing time to hold a short-lived certificate's
//! validity against: a certificate is checked as of the deploy, so an authority for keyless
//! signatures here issues certificates that live as long as an image may be deployed after its
//! signing (a private authority), or a key is used. cosign's new bundle format (OCI referrers,
//! `cosign sign`'s default since v3) is not read: sign with `--new-bundle-format=false`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use runway_api::ImageSignature;
use runway_oci::{PullOptions, Store};
use serde::{Deserialize, Serialize};
use sigstore::cosign::SignatureLayer;
use sigstore::cosign::payload::SimpleSigning;
use sigstore::cosign::verification_constraint::{
    CertificateVerifier, PublicKeyVerifier, VerificationConstraint,
};
use sigstore::registry::{Certificate, CertificateEncoding};

use crate::registry::PlatformRegistry;

/// The bound on reading an image's manifest and signatures (a few small documents): a
/// registry that never answers holds a deploy this long, not a whole pull's bound.
pub const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// cosign's payload media type, and its annotations on a signature layer.
const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";

/// Fulcio's certificate extensions, by the last arc of 1.3.6.1.4.1.57264.1.N.
const FULCIO_OID: &str = "1.3.6.1.4.1.57264.1.";
const OID_ISSUER_V1: u32 = 1;
const OID_ISSUER: u32 = 8;
const OID_SOURCE_REPOSITORY: u32 = 12;
const OID_SOURCE_DIGEST: u32 = 13;
const OID_SOURCE_REF: u32 = 14;

/// `signatures[]`: one rule.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureRule {
    /// The services it covers (a preview as the service it previews); none for every service.
    #[serde(default)]
    pub services: Vec<String>,
    /// The environments it covers; none for every environment.
    #[serde(default)]
    pub environments: Vec<String>,
    /// Public keys, PEM files as `cosign generate-key-pair` writes `cosign.pub`: a signature
    /// by any of them passes.
    #[serde(default)]
    pub keys: Vec<PathBuf>,
    /// A certificate from an authority, naming a pipeline: passes too.
    #[serde(default)]
    pub keyless: Option<KeylessRule>,
}

/// `signatures[].keyless`: a signature made with a certificate that names the pipeline that
/// signed (cosign's `--certificate`, or Fulcio's keyless flow).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeylessRule {
    /// The authority's certificates (PEM: its root and intermediates, as Fulcio's trusted root
    /// lists them) that a signing certificate must chain to.
    pub ca_file: PathBuf,
    /// The OpenID Connect issuer the certificate names (extension 1.3.6.1.4.1.57264.1.8), e.g.
    /// `https://gitlab.example.com`.
    pub issuer: String,
    /// The projects whose pipelines may sign, as paths (`group/project`): the certificate's
    /// source repository (1.3.6.1.4.1.57264.1.12) is `{issuer}/{path}`.
    pub projects: Vec<String>,
    /// The refs a pipeline may sign from (1.3.6.1.4.1.57264.1.14), e.g. `refs/heads/main`, or
    /// `refs/tags/*` for every tag; none for any ref. Certificates do not say whether a ref is
    /// protected: name the refs the project protects.
    #[serde(default)]
    pub refs: Vec<String>,
}

/// The rules, their keys and authorities read.
#[derive(Clone, Default)]
pub struct SignaturePolicy {
    rules: Vec<Arc<Rule>>,
}

impl std::fmt::Debug for SignaturePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignaturePolicy")
            .field("rules", &self.rules.len())
            .finish()
    }
}

struct Rule {
    /// `signatures[N]`, as errors and records name it.
    name: String,
    services: Vec<String>,
    environments: Vec<String>,
    keys: Vec<Key>,
    keyless: Option<Keyless>,
}

struct Key {
    /// The file's name, as records name the key.
    name: String,
    verifier: PublicKeyVerifier,
}

struct Keyless {
    roots: Vec<Certificate>,
    issuer: String,
    repositories: Vec<String>,
    refs: Vec<String>,
}

impl SignaturePolicy {
    /// Reads every rule's keys and authorities: the error names the rule's key
    /// (`signatures[1].keys[0]`) and what is wrong.
    pub fn load(rules: &[SignatureRule]) -> anyhow::Result<SignaturePolicy> {
        let mut loaded = Vec::with_capacity(rules.len());
        for (index, rule) in rules.iter().enumerate() {
            let name = format!("signatures[{index}]");
            if rule.keys.is_empty() && rule.keyless.is_none() {
                bail!(
                    "{name}: name what a signature must come from: `keys` (cosign public keys), \
                     `keyless` (a certificate authority and the pipelines it names), or both"
                );
            }
            for (field, values) in [
                ("services", &rule.services),
                ("environments", &rule.environments),
            ] {
                if let Some(empty) = values.iter().position(|v| v.trim().is_empty()) {
                    bail!("{name}.{field}[{empty}]: an empty name");
                }
            }
            let mut keys = Vec::with_capacity(rule.keys.len());
            for (k, path) in rule.keys.iter().enumerate() {
                let pem = read(path).with_context(|| format!("{name}.keys[{k}]"))?;
                let verifier = PublicKeyVerifier::try_from(&pem).map_err(|e| {
                    anyhow::anyhow!(
                        "{name}.keys[{k}]: {} is not a public key in PEM (as `cosign \
                         generate-key-pair` writes cosign.pub): {e}",
                        path.display()
                    )
                })?;
                keys.push(Key {
                    name: path.file_name().map_or_else(
                        || path.display().to_string(),
                        |f| f.to_string_lossy().into(),
                    ),
                    verifier,
                });
            }
            let keyless = match &rule.keyless {
                None => None,
                Some(keyless) => {
                    Some(Keyless::load(keyless).with_context(|| format!("{name}.keyless"))?)
                }
            };
            loaded.push(Arc::new(Rule {
                name,
                services: rule.services.clone(),
                environments: rule.environments.clone(),
                keys,
                keyless,
            }));
        }
        Ok(SignaturePolicy { rules: loaded })
    }

    /// The rules that cover `service` in `env`, by name (`signatures[0]`); none when its
    /// images deploy unsigned.
    pub fn covering(&self, service: &str, env: &str) -> Vec<String> {
        self.rules_for(service, env)
            .map(|r| r.name.clone())
            .collect()
    }

    fn rules_for<'a>(
        &'a self,
        service: &'a str,
        env: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Rule>> {
        self.rules.iter().filter(move |rule| {
            (rule.services.is_empty() || rule.services.iter().any(|s| s == service))
                && (rule.environments.is_empty() || rule.environments.iter().any(|e| e == env))
        })
    }

    /// Checks `reference` for `service` in `env` against every rule that covers them, reading
    /// its signatures through `store` with `options`. `Ok(None)`: no rule covers them.
    /// `Err`: why it may not deploy, for the deploy's caller (no server internals).
    pub async fn verify(
        &self,
        store: &Store,
        options: &PullOptions,
        service: &str,
        env: &str,
        reference: &str,
    ) -> Result<Option<ImageSignature>, String> {
        let rules: Vec<&Arc<Rule>> = self.rules_for(service, env).collect();
        if rules.is_empty() {
            return Ok(None);
        }
        let fetched = store
            .cosign_signatures(reference, options)
            .await
            .map_err(|e| format!("cannot read its signatures: {}", runway_log::chain(&e)))?;
        let layers = layers(&fetched);
        let mut by = Vec::with_capacity(rules.len());
        for rule in rules {
            by.push(rule.check(&fetched.pinned, &layers)?);
        }
        Ok(Some(ImageSignature {
            pinned: fetched.pinned,
            by,
        }))
    }
}

/// The policy, and how it reads signatures: the registries every pull reaches, and the
/// platform registry, where CI pushes a service's images (and cosign its signatures).
#[derive(Debug)]
pub struct ImageSignatures {
    policy: SignaturePolicy,
    store: Arc<Store>,
    upstream: PullOptions,
    platform: Option<PlatformRegistry>,
}

impl ImageSignatures {
    /// The policy, reading through `store` with `upstream`'s registries, and `platform`'s, each
    /// read bounded by [`READ_TIMEOUT`].
    pub fn new(
        policy: SignaturePolicy,
        store: Arc<Store>,
        upstream: PullOptions,
        platform: Option<PlatformRegistry>,
    ) -> ImageSignatures {
        ImageSignatures {
            policy,
            store,
            upstream: PullOptions {
                timeout: READ_TIMEOUT,
                ..upstream
            },
            platform,
        }
    }

    /// The rules that cover `service` in `env`.
    pub fn covering(&self, service: &str, env: &str) -> Vec<String> {
        self.policy.covering(service, env)
    }

    /// [`SignaturePolicy::verify`] for `service` in `env`; an image in the platform registry is
    /// read there, only from one of `service`'s own repositories.
    pub async fn verify(
        &self,
        service: &str,
        env: &str,
        reference: &str,
    ) -> Result<Option<ImageSignature>, String> {
        if self.policy.covering(service, env).is_empty() {
            return Ok(None);
        }
        let (reference, options) = match &self.platform {
            Some(access) => {
                let reach = access.reach(service, reference, &self.upstream)?;
                (reach.reference, reach.options)
            }
            None => (
                reference.to_owned(),
                std::borrow::Cow::Borrowed(&self.upstream),
            ),
        };
        let started = std::time::Instant::now();
        let verified = self
            .policy
            .verify(&self.store, &options, service, env, &reference)
            .await;
        let took_ms = started.elapsed().as_secs_f64() * 1000.0;
        match &verified {
            Ok(Some(signature)) => tracing::info!(
                %service, %env, image = %signature.pinned, by = ?signature.by, took_ms,
                "image signature verified"
            ),
            Ok(None) => {}
            Err(reason) => tracing::info!(
                %service, %env, %reference, %reason, took_ms, "image signature refused"
            ),
        }
        verified
    }
}

/// The signature layers that are cosign signatures of the image fetched: its payload names the
/// image's digest. What is not is left out here and said by the refusal ("no signature").
fn layers(fetched: &runway_oci::Signatures) -> Vec<(SignatureLayer, Option<String>)> {
    let digest = fetched.digest.to_string();
    fetched
        .layers
        .iter()
        .filter(|layer| layer.media_type == SIMPLE_SIGNING)
        .filter_map(|layer| {
            let simple_signing: SimpleSigning = serde_json::from_slice(&layer.payload).ok()?;
            if !simple_signing.satisfies_manifest_digest(&digest) {
                return None;
            }
            let signature = layer.annotations.get(SIGNATURE_ANNOTATION)?.clone();
            let certificate = layer.annotations.get(CERTIFICATE_ANNOTATION).cloned();
            Some((
                SignatureLayer {
                    simple_signing,
                    oci_digest: layer.digest.to_string(),
                    certificate_signature: None,
                    bundle: None,
                    signature: Some(signature),
                    raw_data: layer.payload.clone(),
                },
                certificate,
            ))
        })
        .collect()
}

impl Rule {
    /// What passes this rule among `layers`, or why nothing does.
    fn check(
        &self,
        pinned: &str,
        layers: &[(SignatureLayer, Option<String>)],
    ) -> Result<String, String> {
        if layers.is_empty() {
            return Err(format!(
                "{pinned} has no cosign signature, and {} requires one (sign it by digest with \
                 `cosign sign --new-bundle-format=false`, which stores the signature beside the \
                 image as the `.sig` tag this reads)",
                self.name
            ));
        }
        for key in &self.keys {
            if layers
                .iter()
                .any(|(layer, _)| key.verifier.verify(layer).unwrap_or(false))
            {
                return Ok(format!("{}: signed by key {}", self.name, key.name));
            }
        }
        let mut reasons = Vec::new();
        if !self.keys.is_empty() {
            reasons.push(format!(
                "no signature by {} ({})",
                if self.keys.len() == 1 {
                    "its key"
                } else {
                    "any of its keys"
                },
                self.keys
                    .iter()
                    .map(|k| k.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if let Some(keyless) = &self.keyless {
            let mut certified = false;
            for (layer, certificate) in layers {
                let Some(certificate) = certificate else {
                    continue;
                };
                certified = true;
                match keyless.check(layer, certificate) {
                    Ok(identity) => return Ok(format!("{}: {identity}", self.name)),
                    Err(reason) => reasons.push(reason),
                }
            }
            if !certified {
                reasons.push("no signature made with a certificate".to_owned());
            }
        }
        Err(format!(
            "{pinned} is not signed as {} requires: {}",
            self.name,
            reasons.join("; ")
        ))
    }
}

impl Keyless {
    fn load(rule: &KeylessRule) -> anyhow::Result<Keyless> {
        let pem = read(&rule.ca_file).context("ca_file")?;
        let roots: Vec<Certificate> = x509_parser::pem::Pem::iter_from_buffer(&pem)
            .filter_map(Result::ok)
            .filter(|p| p.label == "CERTIFICATE")
            .map(|p| Certificate {
                encoding: CertificateEncoding::Der,
                data: p.contents,
            })
            .collect();
        if roots.is_empty() {
            bail!(
                "ca_file: {} holds no PEM certificate (expected the authority's root and \
                 intermediates)",
                rule.ca_file.display()
            );
        }
        let issuer = rule.issuer.trim_end_matches('/').to_owned();
        if !issuer.starts_with("https://") {
            bail!(
                "issuer: `{}` is not an https:// URL (the OpenID Connect issuer a certificate \
                 names, e.g. https://gitlab.example.com)",
                rule.issuer
            );
        }
        if rule.projects.is_empty() {
            bail!("projects: name at least one project path (`group/project`) that may sign");
        }
        if let Some(bad) = rule
            .projects
            .iter()
            .position(|p| p.trim_matches('/').is_empty() || p.contains(char::is_whitespace))
        {
            bail!("projects[{bad}]: expected a project path such as `group/project`");
        }
        if let Some(bad) = rule.refs.iter().position(|r| !r.starts_with("refs/")) {
            bail!(
                "refs[{bad}]: `{}` is not a full ref: expected e.g. `refs/heads/main` or \
                 `refs/tags/*`",
                rule.refs[bad]
            );
        }
        Ok(Keyless {
            roots,
            repositories: rule
                .projects
                .iter()
                .map(|p| format!("{issuer}/{}", p.trim_matches('/')))
                .collect(),
            issuer,
            refs: rule.refs.clone(),
        })
    }

    /// Whether `layer` was signed with `certificate` (PEM), issued by this authority to one of
    /// these pipelines: the identity it names, or why not.
    fn check(&self, layer: &SignatureLayer, certificate: &str) -> Result<String, String> {
        let verifier = CertificateVerifier::from_pem(certificate.as_bytes(), false, Some(&self.roots))
            .map_err(|e| format!("its certificate is not one this authority issued for code signing and valid now ({e})"))?;
        let identity = Identity::read(certificate.as_bytes())?;
        let issuer = identity.issuer().unwrap_or("no issuer");
        if issuer.trim_end_matches('/') != self.issuer {
            return Err(format!(
                "its certificate names issuer {issuer}, not {}",
                self.issuer
            ));
        }
        let repository = identity.get(OID_SOURCE_REPOSITORY).unwrap_or("no project");
        if !self.repositories.iter().any(|r| r == repository) {
            return Err(format!(
                "its certificate names project {repository}, not {}",
                self.repositories.join(" or ")
            ));
        }
        let git_ref = identity.get(OID_SOURCE_REF).unwrap_or("no ref");
        if !self.refs.is_empty()
            && !self
                .refs
                .iter()
                .any(|pattern| ref_matches(pattern, git_ref))
        {
            return Err(format!(
                "its certificate names ref {git_ref}, not {}",
                self.refs.join(" or ")
            ));
        }
        if !verifier.verify(layer).unwrap_or(false) {
            return Err("its signature is not made by its certificate's key".to_owned());
        }
        Ok(format!(
            "signed by {repository} at {git_ref}{} (a certificate from issuer {issuer})",
            identity
                .get(OID_SOURCE_DIGEST)
                .map(|c| format!(", commit {c}"))
                .unwrap_or_default()
        ))
    }
}

/// `pattern` is a ref, or a prefix ending in `*`.
fn ref_matches(pattern: &str, git_ref: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => git_ref.starts_with(prefix),
        None => pattern == git_ref,
    }
}

/// A certificate's Fulcio extensions.
#[derive(Debug, Default)]
struct Identity {
    claims: std::collections::BTreeMap<u32, String>,
}

impl Identity {
    fn read(pem: &[u8]) -> Result<Identity, String> {
        let unreadable = |e: String| format!("its certificate cannot be read: {e}");
        let (_, pem) =
            x509_parser::pem::parse_x509_pem(pem).map_err(|e| unreadable(e.to_string()))?;
        let certificate = pem.parse_x509().map_err(|e| unreadable(e.to_string()))?;
        let mut identity = Identity::default();
        for extension in certificate.extensions() {
            let oid = extension.oid.to_id_string();
            let Some(n) = oid
                .strip_prefix(FULCIO_OID)
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            // 1.1 to 1.6 are the raw string; 1.8 onwards a DER UTF8String.
            let value = if n <= 6 {
                String::from_utf8(extension.value.to_vec()).ok()
            } else {
                utf8_string(extension.value)
            };
            if let Some(value) = value {
                identity.claims.insert(n, value);
            }
        }
        Ok(identity)
    }

    fn issuer(&self) -> Option<&str> {
        self.get(OID_ISSUER).or_else(|| self.get(OID_ISSUER_V1))
    }

    fn get(&self, n: u32) -> Option<&str> {
        self.claims.get(&n).map(String::as_str)
    }
}

/// A DER UTF8String's text.
fn utf8_string(der: &[u8]) -> Option<String> {
    use x509_parser::der_parser::ber::BerObjectContent;
    let (rest, object) = x509_parser::der_parser::parse_der(der).ok()?;
    match object.content {
        BerObjectContent::UTF8String(text) if rest.is_empty() => Some(text.to_owned()),
        _ => None,
    }
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ref_pattern_is_a_ref_or_a_prefix() {
        assert!(ref_matches("refs/heads/main", "refs/heads/main"));
        assert!(!ref_matches("refs/heads/main", "refs/heads/main2"));
        assert!(ref_matches("refs/tags/*", "refs/tags/v1.2"));
        assert!(!ref_matches("refs/tags/*", "refs/heads/v1.2"));
    }

    #[test]
    fn rules_cover_their_services_and_environments() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("cosign.pub");
        let pem = sigstore::crypto::SigningScheme::ECDSA_P256_SHA256_ASN1
            .create_signer()
            .and_then(|signer| signer.to_sigstore_keypair())
            .and_then(|pair| pair.public_key_to_pem())
            .unwrap();
        std::fs::write(&key, pem).unwrap();
        let rule = |services: &[&str], environments: &[&str]| SignatureRule {
            services: services.iter().map(|s| (*s).to_owned()).collect(),
            environments: environments.iter().map(|s| (*s).to_owned()).collect(),
            keys: vec![key.clone()],
            keyless: None,
        };
        let policy =
            SignaturePolicy::load(&[rule(&["gateway"], &["production"]), rule(&[], &["staging"])])
                .unwrap();
        assert_eq!(policy.covering("gateway", "production"), ["signatures[0]"]);
        assert!(policy.covering("gateway", "dev").is_empty());
        assert!(policy.covering("other", "production").is_empty());
        assert_eq!(policy.covering("other", "staging"), ["signatures[1]"]);
    }

    #[tokio::test]
    async fn a_registry_that_never_answers_refuses_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("cosign.pub");
        let pem = sigstore::crypto::SigningScheme::ECDSA_P256_SHA256_ASN1
            .create_signer()
            .and_then(|signer| signer.to_sigstore_keypair())
            .and_then(|pair| pair.public_key_to_pem())
            .unwrap();
        std::fs::write(&key, pem).unwrap();
        let policy = SignaturePolicy::load(&[SignatureRule {
            keys: vec![key],
            ..SignatureRule::default()
        }])
        .unwrap();
        // Accepts connections and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = silent.local_addr().unwrap().to_string();
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((stream, _)) = silent.accept().await {
                open.push(stream);
            }
        });
        let store = Store::open(dir.path().join("images")).unwrap();
        let options = PullOptions {
            insecure_registries: vec![host.clone()],
            timeout: std::time::Duration::from_secs(1),
            ..PullOptions::default()
        };
        let started = std::time::Instant::now();
        let refused = policy
            .verify(
                &store,
                &options,
                "hello",
                "dev",
                &format!("{host}/hello/app:1"),
            )
            .await
            .unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert!(
            refused.starts_with("cannot read its signatures"),
            "{refused}"
        );
        held.abort();
    }

    #[test]
    fn a_rule_names_its_bad_key() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pub");
        std::fs::write(&junk, "not a key").unwrap();
        for (rule, expected) in [
            (
                SignatureRule::default(),
                "signatures[0]: name what a signature must come from",
            ),
            (
                SignatureRule {
                    keys: vec![dir.path().join("missing.pub")],
                    ..SignatureRule::default()
                },
                "signatures[0].keys[0]: cannot read",
            ),
            (
                SignatureRule {
                    keys: vec![junk.clone()],
                    ..SignatureRule::default()
                },
                "signatures[0].keys[0]: ",
            ),
            (
                SignatureRule {
                    keyless: Some(KeylessRule {
                        ca_file: junk.clone(),
                        issuer: "https://gitlab.example.com".into(),
                        projects: vec!["g/p".into()],
                        refs: vec![],
                    }),
                    ..SignatureRule::default()
                },
                "signatures[0].keyless: ca_file: ",
            ),
        ] {
            let error = format!("{:#}", SignaturePolicy::load(&[rule]).unwrap_err());
            assert!(error.starts_with(expected), "{error}");
        }
    }
}
