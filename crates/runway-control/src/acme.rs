//! Certificates for custom domains from an ACME directory (RFC 8555: Let's Encrypt, or any
//! other), through `instant-acme`.
//!
//! The [`Issuer`], set up by `domains.acme` in `runway server`'s configuration
//! ([`AcmeConfig`]), runs beside the controller, and orders only while its replica leads
//! ([`Issuer::leadership`]). Each domain the store holds is due at its `next_attempt_at`:
//! added (at once), failed (after a back-off doubling from `retry_ms` up to six hours), or
//! issued (when a third of its certificate's life is left, 30 days of Let's Encrypt's 90). Due
//! domains are ordered one at a time:
//!
//! 1. an order for the name, with the account kept sealed in the store (made on first use);
//! 2. the challenge (`http-01` by default, or `tls-alpn-01`) published in the edge view, so the
//!    next table carries it to every ingress; the issuer waits until the ingress has that
//!    table ([`Edge::applied`]) before telling the ACME server to look;
//! 3. the order polled until ready or invalid; an invalid one's reason is the failed
//!    challenge's own problem document (`connection refused`, `unauthorized`, ...);
//! 4. a new key and CSR (rcgen), the order finalized, the chain fetched, the key sealed for
//!    the next generation and everything stored in one transaction; the challenge withdrawn
//!    whatever happened.
//!
//! A failure is stored with its reason and retried later; a certificate issued before stays
//! served (a failed renewal replaces nothing). The whole attempt is bounded by
//! `order_timeout_ms`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use instant_acme::{
    Account, AccountBuilder, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier,
    NewAccount, NewOrder, Order, OrderStatus, RetryPolicy,
};
use runway_ingress::ChallengeCertificate;
use runway_secrets::{Context, Sealed, Sealer, SecretValue};
use runway_store::{Domain, IssuedCertificate, Store, Timestamp};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};

use crate::edge::{Edge, key_context};
use crate::leader::Leadership;

/// The actor of the issuer's audit entries.
const ACTOR: &str = "acme";

/// The longest wait between two failed attempts.
const MAX_RETRY: Duration = Duration::from_secs(6 * 3600);

/// How long the ingress may take to have a published challenge.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(15);

/// `domains.acme` in the server's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcmeConfig {
    /// The directory's URL: Let's Encrypt's is
    /// `https://acme-v02.api.letsencrypt.org/directory` (staging:
    /// `https://acme-staging-v02.api.letsencrypt.org/directory`).
    pub directory: String,
    /// Contact URLs for the account (`mailto:ops@example.com`), where the ACME server writes
    /// about expiring certificates and problems.
    #[serde(default)]
    pub contact: Vec<String>,
    /// The directory's terms of service are agreed to: it must be `true` to make an account.
    #[serde(default)]
    pub accept_terms: bool,
    /// A PEM file holding the authority the directory's own HTTPS certificate is checked
    /// against instead of the system's (a test server such as Pebble).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// How the ACME server checks control of a domain: `http-01` (the ingress's HTTP
    /// listener, which must be reachable on port 80) or `tls-alpn-01` (its HTTPS listener, on
    /// port 443).
    #[serde(default)]
    pub challenge: ChallengeKind,
    /// The longest one domain's order may take, challenge and certificate included.
    #[serde(default = "default_order_timeout_ms")]
    pub order_timeout_ms: u64,
    /// The wait after a first failure, doubled with each further one up to six hours.
    #[serde(default = "default_retry_ms")]
    pub retry_ms: u64,
}

fn default_order_timeout_ms() -> u64 {
    120_000
}

fn default_retry_ms() -> u64 {
    60_000
}

/// The challenge answered for each domain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChallengeKind {
    /// A token served over plain HTTP at `/.well-known/acme-challenge/`.
    #[default]
    #[serde(rename = "http-01")]
    Http01,
    /// A certificate served to a TLS handshake offering `acme-tls/1` (RFC 8737).
    #[serde(rename = "tls-alpn-01")]
    TlsAlpn01,
}

impl ChallengeKind {
    fn acme(self) -> ChallengeType {
        match self {
            Self::Http01 => ChallengeType::Http01,
            Self::TlsAlpn01 => ChallengeType::TlsAlpn01,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Http01 => "http-01",
            Self::TlsAlpn01 => "tls-alpn-01",
        }
    }
}

impl AcmeConfig {
    /// What is wrong with it, as the key at fault (under `domains.acme`) and why.
    ///
    /// # Errors
    /// The first problem found.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let url = &self.directory;
        let loopback = [
            "http://127.",
            "http://localhost:",
            "http://localhost/",
            "http://[::1]",
        ];
        if !url.starts_with("https://") && !loopback.iter().any(|p| url.starts_with(p)) {
            return Err((
                "directory",
                format!("{url:?} is not an https:// URL (plain http:// only on this machine)"),
            ));
        }
        if !self.accept_terms {
            return Err((
                "accept_terms",
                "must be true: an ACME account is made only by agreeing to the directory's \
                 terms of service (read them at the directory's `meta.termsOfService`)"
                    .to_owned(),
            ));
        }
        if let Some(bad) = self.contact.iter().find(|c| !c.starts_with("mailto:")) {
            return Err((
                "contact",
                format!("{bad:?} is not a mailto: URL (mailto:ops@example.com)"),
            ));
        }
        if let Some(path) = &self.ca_file
            && let Err(error) = std::fs::metadata(path)
        {
            return Err((
                "ca_file",
                format!("cannot read {}: {error}", path.display()),
            ));
        }
        if self.order_timeout_ms == 0 || self.retry_ms == 0 {
            let key = if self.order_timeout_ms == 0 {
                "order_timeout_ms"
            } else {
                "retry_ms"
            };
            return Err((key, "must be above 0".to_owned()));
        }
        Ok(())
    }
}

/// Obtains and renews the certificates of the store's domains. See the module's documentation.
pub struct Issuer {
    config: AcmeConfig,
    store: Arc<dyn Store>,
    sealer: Arc<Sealer>,
    edge: Arc<Edge>,
    /// Told when a certificate is stored, so the edge view reads it at once.
    stored: Arc<Notify>,
    account: tokio::sync::Mutex<Option<Account>>,
    leadership: Option<watch::Receiver<Leadership>>,
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issuer")
            .field("directory", &self.config.directory)
            .finish_non_exhaustive()
    }
}

/// What one attempt got: the chain, leaf first, and its key, PEM.
struct Obtained {
    chain: String,
    key: String,
}

impl Issuer {
    /// An issuer for `config` (checked) over the store, whose certificates reach the ingress
    /// through `edge`; `stored` is notified after each certificate is stored.
    ///
    /// # Errors
    /// The configuration's first problem, as `domains.acme.<key>: why`.
    pub fn new(
        config: AcmeConfig,
        store: Arc<dyn Store>,
        sealer: Arc<Sealer>,
        edge: Arc<Edge>,
        stored: Arc<Notify>,
    ) -> Result<Self, String> {
        config
            .check()
            .map_err(|(key, why)| format!("domains.acme.{key}: {why}"))?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(Self {
            config,
            store,
            sealer,
            edge,
            stored,
            account: tokio::sync::Mutex::new(None),
            leadership: None,
        })
    }

    /// Orders only while `leadership` says this replica leads.
    #[must_use]
    pub fn leadership(mut self, leadership: watch::Receiver<Leadership>) -> Self {
        self.leadership = Some(leadership);
        self
    }

    fn leading(&self) -> bool {
        self.leadership
            .as_ref()
            .is_none_or(|leadership| leadership.borrow().may_act())
    }

    /// Orders each domain when it is due, at once when `wake` is notified (a domain added),
    /// until `shutdown`.
    pub async fn run(self: Arc<Self>, wake: Arc<Notify>, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let wait = if self.leading() {
                self.round().await
            } else {
                Duration::from_secs(1)
            };
            tokio::select! {
                () = &mut shutdown => return,
                () = wake.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Orders every due domain, one at a time; how long until the next is due (at most a
    /// minute, when none is).
    pub async fn round(&self) -> Duration {
        let store = Arc::clone(&self.store);
        let domains = match tokio::task::spawn_blocking(move || store.domain_list()).await {
            Ok(Ok(domains)) => domains,
            Ok(Err(error)) => {
                tracing::warn!(error = %runway_log::chain(&error), "cannot list the domains");
                return Duration::from_secs(5);
            }
            Err(_) => return Duration::from_secs(5),
        };
        let now = Timestamp::now();
        let mut next = Duration::from_secs(60);
        for domain in domains {
            let due = domain.next_attempt_at.unwrap_or(now);
            if due > now {
                let millis = u64::try_from(due.unix_millis() - now.unix_millis()).unwrap_or(0);
                next = next.min(Duration::from_millis(millis));
                continue;
            }
            if !self.leading() {
                break;
            }
            self.attempt(&domain).await;
            // What the attempt stored sets the next time: read again at once.
            next = Duration::ZERO;
        }
        next.max(Duration::from_millis(50))
    }

    /// One order for `domain`, its outcome stored.
    async fn attempt(&self, domain: &Domain) {
        let name = domain.name.as_str();
        tracing::info!(domain = name, "ordering a certificate");
        let started = std::time::Instant::now();
        let bound = Duration::from_millis(self.config.order_timeout_ms);
        let outcome = match tokio::time::timeout(bound, self.obtain(name)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!(
                "no certificate within {} s (domains.acme.order_timeout_ms)",
                bound.as_secs()
            )),
        };
        let result = match outcome {
            Ok(obtained) => self.store_certificate(domain, obtained).await,
            Err(why) => Err(why),
        };
        match result {
            Ok(not_after) => {
                tracing::info!(
                    domain = name,
                    %not_after,
                    took_ms = started.elapsed().as_millis() as u64,
                    "certificate issued"
                );
                self.stored.notify_one();
            }
            Err(why) => {
                tracing::warn!(domain = name, reason = %why, "no certificate");
                let backoff = Duration::from_millis(self.config.retry_ms)
                    .saturating_mul(1 << domain.attempts.min(16))
                    .min(MAX_RETRY);
                let retry_at =
                    Timestamp::now().add_millis(i64::try_from(backoff.as_millis()).unwrap_or(0));
                let (store, owned) = (Arc::clone(&self.store), name.to_owned());
                let stored = tokio::task::spawn_blocking(move || {
                    store.domain_failed(ACTOR, &owned, &why, retry_at)
                })
                .await;
                if let Ok(Err(error)) = stored {
                    tracing::warn!(domain = name, error = %runway_log::chain(&error), "cannot record the failure");
                }
            }
        }
    }

    /// Seals the key for the next generation and stores the certificate; its expiry.
    async fn store_certificate(
        &self,
        domain: &Domain,
        obtained: Obtained,
    ) -> Result<Timestamp, String> {
        let (not_before, not_after) = validity(&obtained.chain)?;
        // A third of its life left: 30 days of Let's Encrypt's 90.
        let life = not_after.unix_millis() - not_before.unix_millis();
        let renew_at = Timestamp::from_unix_millis(not_before.unix_millis() + life * 2 / 3)
            .unwrap_or(not_after);
        let generation = domain.generation.saturating_add(1);
        let sealed = self
            .sealer
            .seal(
                &SecretValue::new(obtained.key.into_bytes()),
                &key_context(&domain.name, generation),
            )
            .map_err(|e| format!("cannot seal the key: {e}"))?;
        let certificate = IssuedCertificate {
            cert_pem: obtained.chain,
            not_after,
            generation,
            nonce: sealed.nonce,
            ciphertext: sealed.ciphertext,
            renew_at,
        };
        let (store, name) = (Arc::clone(&self.store), domain.name.clone());
        tokio::task::spawn_blocking(move || store.domain_issued(ACTOR, &name, &certificate))
            .await
            .map_err(|e| format!("cannot store the certificate: {e}"))?
            .map_err(|e| format!("cannot store the certificate: {}", runway_log::chain(&e)))?;
        Ok(not_after)
    }

    /// Orders a certificate for `name`: the challenge published and answered, the order
    /// finalized with a new key.
    async fn obtain(&self, name: &str) -> Result<Obtained, String> {
        let account = self.account().await?;
        let identifiers = [Identifier::Dns(name.to_owned())];
        let mut order = account
            .new_order(&NewOrder::new(&identifiers))
            .await
            .map_err(|e| acme_error("cannot place the order", &e))?;
        let mut published = Published {
            edge: Arc::clone(&self.edge),
            tokens: Vec::new(),
            names: Vec::new(),
        };
        let kind = self.config.challenge;
        {
            let mut authorizations = order.authorizations();
            while let Some(authorization) = authorizations.next().await {
                let mut authorization =
                    authorization.map_err(|e| acme_error("cannot read the authorization", &e))?;
                match authorization.status {
                    AuthorizationStatus::Pending => {}
                    AuthorizationStatus::Valid => continue,
                    other => return Err(format!("the authorization for {name} is {other:?}")),
                }
                let mut challenge = authorization.challenge(kind.acme()).ok_or_else(|| {
                    format!(
                        "the ACME server offers no {} challenge for {name}",
                        kind.name()
                    )
                })?;
                let key_authorization = challenge.key_authorization();
                let generation = match kind {
                    ChallengeKind::Http01 => {
                        let token = challenge.token.clone();
                        published.tokens.push(token.clone());
                        self.edge.set_challenges(|acme| {
                            acme.http01
                                .insert(token, key_authorization.as_str().to_owned());
                        })
                    }
                    ChallengeKind::TlsAlpn01 => {
                        let certificate = alpn_certificate(name, key_authorization.digest())?;
                        published.names.push(name.to_owned());
                        self.edge.set_challenges(|acme| {
                            acme.tls_alpn01.insert(name.to_owned(), certificate);
                        })
                    }
                };
                if !self.edge.applied(generation, PUBLISH_TIMEOUT).await {
                    return Err(format!(
                        "the ingress did not take the {} challenge within {} s",
                        kind.name(),
                        PUBLISH_TIMEOUT.as_secs()
                    ));
                }
                challenge
                    .set_ready()
                    .await
                    .map_err(|e| acme_error("cannot ask for the challenge's check", &e))?;
            }
        }
        let bound = Duration::from_millis(self.config.order_timeout_ms);
        let retries = RetryPolicy::new()
            .initial_delay(Duration::from_millis(200))
            .backoff(1.5)
            .timeout(bound);
        match order.poll_ready(&retries).await {
            Ok(OrderStatus::Ready) => {}
            Ok(OrderStatus::Invalid) => return Err(why_invalid(&mut order).await),
            Ok(other) => return Err(format!("the order is {other:?}")),
            Err(instant_acme::Error::Api(problem)) => {
                let challenge = why_invalid(&mut order).await;
                return Err(format!("{challenge} ({})", describe(&problem)));
            }
            Err(e) => return Err(acme_error("the order did not become ready", &e)),
        }
        drop(published);
        let key = order
            .finalize()
            .await
            .map_err(|e| acme_error("cannot finalize the order", &e))?;
        let chain = order
            .poll_certificate(&retries)
            .await
            .map_err(|e| acme_error("cannot fetch the certificate", &e))?;
        Ok(Obtained { chain, key })
    }

    /// The account, from the store or made (and stored) on first use.
    async fn account(&self) -> Result<Account, String> {
        let mut cached = self.account.lock().await;
        if let Some(account) = cached.as_ref() {
            return Ok(account.clone());
        }
        let directory = self.config.directory.clone();
        let store = Arc::clone(&self.store);
        let kept = tokio::task::spawn_blocking(move || store.acme_account_get(&directory))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot read the ACME account: {}", runway_log::chain(&e)))?;
        let account = match kept {
            Some(sealed) => self.open_account(sealed).await?,
            None => {
                let contact: Vec<&str> = self.config.contact.iter().map(String::as_str).collect();
                let (account, credentials) = self
                    .builder()?
                    .create(
                        &NewAccount {
                            contact: &contact,
                            terms_of_service_agreed: self.config.accept_terms,
                            only_return_existing: false,
                        },
                        self.config.directory.clone(),
                        None,
                    )
                    .await
                    .map_err(|e| acme_error("cannot make an ACME account", &e))?;
                let json = serde_json::to_vec(&credentials).map_err(|e| e.to_string())?;
                let sealed = self
                    .sealer
                    .seal(&SecretValue::new(json), &self.account_context())
                    .map_err(|e| format!("cannot seal the ACME account: {e}"))?;
                let ours = (sealed.nonce, sealed.ciphertext);
                let (store, directory, put) = (
                    Arc::clone(&self.store),
                    self.config.directory.clone(),
                    ours.clone(),
                );
                let kept = tokio::task::spawn_blocking(move || {
                    store.acme_account_put(ACTOR, &directory, &put.0, &put.1)
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("cannot keep the ACME account: {}", runway_log::chain(&e)))?;
                // Another replica made one first: that one is used by both.
                if kept == ours {
                    account
                } else {
                    self.open_account(kept).await?
                }
            }
        };
        *cached = Some(account.clone());
        Ok(account)
    }

    fn account_context(&self) -> Context<'_> {
        Context {
            service: "",
            env: "acme-account",
            name: &self.config.directory,
            version: 1,
        }
    }

    async fn open_account(
        &self,
        (nonce, ciphertext): (Vec<u8>, Vec<u8>),
    ) -> Result<Account, String> {
        let json = self
            .sealer
            .open(&Sealed { nonce, ciphertext }, &self.account_context())
            .map_err(|e| format!("the stored ACME account does not open: {e}"))?;
        let credentials: AccountCredentials = serde_json::from_slice(json.expose())
            .map_err(|e| format!("the stored ACME account is unreadable: {e}"))?;
        self.builder()?
            .from_credentials(credentials)
            .await
            .map_err(|e| acme_error("cannot use the stored ACME account", &e))
    }

    fn builder(&self) -> Result<AccountBuilder, String> {
        match &self.config.ca_file {
            Some(path) => Account::builder_with_root(path).map_err(|e| {
                format!(
                    "domains.acme.ca_file: {}: {}",
                    path.display(),
                    runway_log::chain(&e)
                )
            }),
            None => Account::builder().map_err(|e| acme_error("cannot set up HTTPS", &e)),
        }
    }
}

/// The challenges one attempt published, withdrawn when it ends, however it ends.
struct Published {
    edge: Arc<Edge>,
    tokens: Vec<String>,
    names: Vec<String>,
}

impl Drop for Published {
    fn drop(&mut self) {
        if self.tokens.is_empty() && self.names.is_empty() {
            return;
        }
        self.edge.set_challenges(|acme| {
            for token in &self.tokens {
                acme.http01.remove(token);
            }
            for name in &self.names {
                acme.tls_alpn01.remove(name);
            }
        });
    }
}

/// Why an order went invalid: each failed challenge's problem, as the ACME server put it.
async fn why_invalid(order: &mut Order) -> String {
    let mut reasons = Vec::new();
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let Ok(mut authorization) = authorization else {
            continue;
        };
        if authorization.refresh().await.is_err() {
            continue;
        }
        let identifier = authorization.identifier().to_string();
        for challenge in &authorization.challenges {
            if let Some(problem) = &challenge.error {
                reasons.push(format!(
                    "{identifier}: {:?} challenge failed: {}",
                    challenge.r#type,
                    describe(problem)
                ));
            }
        }
    }
    if reasons.is_empty() {
        "the ACME server found the order invalid and gave no reason".to_owned()
    } else {
        reasons.join("; ")
    }
}

/// A problem document as one line: its detail, then its type.
fn describe(problem: &instant_acme::Problem) -> String {
    let detail = problem.detail.as_deref().unwrap_or("no detail");
    match &problem.r#type {
        Some(kind) => format!("{detail} ({kind})"),
        None => detail.to_owned(),
    }
}

fn acme_error(what: &str, error: &instant_acme::Error) -> String {
    match error {
        instant_acme::Error::Api(problem) => format!("{what}: {}", describe(problem)),
        other => format!("{what}: {}", runway_log::chain(other)),
    }
}

/// The TLS-ALPN-01 challenge's certificate for `name` (RFC 8737): self-signed, naming it, with
/// the critical acmeIdentifier extension holding the key authorization's SHA-256 digest.
fn alpn_certificate(name: &str, digest: impl AsRef<[u8]>) -> Result<ChallengeCertificate, String> {
    let failed = |e: rcgen::Error| format!("cannot make the tls-alpn-01 certificate: {e}");
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).map_err(failed)?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest.as_ref())];
    let key = rcgen::KeyPair::generate().map_err(failed)?;
    let certificate = params.self_signed(&key).map_err(failed)?;
    Ok(ChallengeCertificate {
        cert_pem: certificate.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// The leaf's validity: not before, not after.
fn validity(chain: &str) -> Result<(Timestamp, Timestamp), String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(chain.as_bytes())
        .map_err(|e| format!("the certificate chain is not PEM: {e}"))?;
    let leaf = pem
        .parse_x509()
        .map_err(|e| format!("the certificate is unreadable: {e}"))?;
    let at = |t: x509_parser::time::ASN1Time| {
        Timestamp::from_unix_millis(t.timestamp().saturating_mul(1000))
            .ok_or_else(|| "the certificate's validity is out of range".to_owned())
    };
    Ok((
        at(leaf.validity().not_before)?,
        at(leaf.validity().not_after)?,
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn config() -> AcmeConfig {
        AcmeConfig {
            directory: "https://acme.example/directory".into(),
            contact: vec!["mailto:ops@example.com".into()],
            accept_terms: true,
            ca_file: None,
            challenge: ChallengeKind::Http01,
            order_timeout_ms: 1_000,
            retry_ms: 1_000,
        }
    }

    #[test]
    fn the_configuration_is_checked_key_by_key() {
        assert_eq!(config().check(), Ok(()));
        let refused = |change: fn(&mut AcmeConfig)| {
            let mut config = config();
            change(&mut config);
            config.check().unwrap_err().0
        };
        assert_eq!(refused(|c| c.accept_terms = false), "accept_terms");
        assert_eq!(
            refused(|c| c.directory = "http://acme.example/dir".into()),
            "directory"
        );
        assert_eq!(refused(|c| c.contact = vec!["ops@x".into()]), "contact");
        assert_eq!(
            refused(|c| c.ca_file = Some("/nonexistent/ca.pem".into())),
            "ca_file"
        );
        assert_eq!(refused(|c| c.retry_ms = 0), "retry_ms");
        let mut local = config();
        local.directory = "http://127.0.0.1:14000/dir".into();
        assert_eq!(local.check(), Ok(()));
    }

    #[test]
    fn the_challenge_kind_is_named_as_acme_names_it() {
        let parsed: AcmeConfig = serde_json::from_value(serde_json::json!({
            "directory": "https://acme.example/directory",
            "accept_terms": true,
            "challenge": "tls-alpn-01",
        }))
        .unwrap();
        assert_eq!(parsed.challenge, ChallengeKind::TlsAlpn01);
        assert_eq!(parsed.order_timeout_ms, 120_000);
        let wrong = serde_json::from_value::<AcmeConfig>(serde_json::json!({
            "directory": "https://acme.example/directory", "challenge": "dns-01",
        }));
        assert!(wrong.unwrap_err().to_string().contains("http-01"));
    }

    #[test]
    fn the_alpn_certificate_names_the_domain_and_carries_the_digest() {
        let digest = [7u8; 32];
        let made = alpn_certificate("www.example.com", digest).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(made.cert_pem.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        let acme_identifier = cert
            .extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == "1.3.6.1.5.5.7.1.31")
            .unwrap();
        assert!(acme_identifier.critical);
        // An OCTET STRING of the 32-byte digest.
        assert_eq!(&acme_identifier.value[2..], &digest);
        let (before, after) = validity(&made.cert_pem).unwrap();
        assert!(before < after);
    }
}
