//! Runway as an OpenID Connect issuer for its instances: each replica gets a short-lived
//! token (ES256) naming its service, environment and revision, for the audience its manifest
//! names (`spec.workload.identity.audience`, else the issuer's URL), which OpenBao's or Vault's
//! JWT auth, or a cloud's workload identity federation, accepts in place of a static
//! credential.
//!
//! Signing keys are P-256 keys made here, their private halves sealed with the master key in
//! the store (`identity_keys`), so every replica of the control plane signs with the same key
//! and the API of any of them publishes the key set. A key signs for `rotation_hours`; the next
//! token after that makes a new one, and the old stays published until the last token it
//! signed has expired. The API serves the discovery document and the key set
//! (`/.well-known/openid-configuration`, `/.well-known/jwks.json`) from the store.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use runway_secrets::{Context, Sealed, Sealer, SecretValue};
use runway_store::{IdentityKey, Store, Timestamp};
use serde::{Deserialize, Serialize};

/// `identity`: the instances' identity tokens.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdentityConfig {
    /// Issue tokens to instances (default true).
    pub enabled: bool,
    /// The issuer's URL, the tokens' `iss`: where relying parties find
    /// `/.well-known/openid-configuration`, so the API as they reach it. Default: the API's
    /// own URL (its first `api.tls.hostnames` name, else its listen address).
    pub issuer: Option<String>,
    /// How long a token is valid, in minutes (default 10); each is renewed when half of it is
    /// left.
    pub lifetime_minutes: u64,
    /// How long a signing key signs before a new one takes over, in hours (default 24).
    pub rotation_hours: u64,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            issuer: None,
            lifetime_minutes: 10,
            rotation_hours: 24,
        }
    }
}

impl IdentityConfig {
    /// Checks the keys: `Err((key, message))`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if !(1..=24 * 60).contains(&self.lifetime_minutes) {
            return Err((
                "lifetime_minutes",
                format!(
                    "{} is out of range: expected 1 to 1440 (a day)",
                    self.lifetime_minutes
                ),
            ));
        }
        if !(1..=24 * 90).contains(&self.rotation_hours) {
            return Err((
                "rotation_hours",
                format!(
                    "{} is out of range: expected 1 to 2160 (90 days)",
                    self.rotation_hours
                ),
            ));
        }
        if let Some(issuer) = &self.issuer
            && (!issuer.starts_with("https://")
                || issuer.contains(['?', '#'])
                || issuer.ends_with('/'))
        {
            return Err((
                "issuer",
                format!(
                    "`{issuer}` is not an issuer URL: expected https://host[:port][/path], with no \
                     query, fragment or trailing slash"
                ),
            ));
        }
        Ok(())
    }

    /// How long a token is valid.
    pub fn lifetime(&self) -> Duration {
        Duration::from_secs(self.lifetime_minutes.saturating_mul(60))
    }
}

/// The claims of an instance's token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceClaims {
    pub iss: String,
    /// `service:<service>:env:<env>`.
    pub sub: String,
    pub aud: String,
    pub iat: i64,
    pub nbf: i64,
    pub exp: i64,
    pub jti: String,
    pub service: String,
    pub env: String,
    pub revision: String,
}

/// The key that signs now, opened.
struct SigningKey {
    kid: String,
    key: jsonwebtoken::EncodingKey,
    created_at: Timestamp,
}

/// Issues instances' tokens (see the module's documentation).
pub struct Issuer {
    issuer: String,
    lifetime: Duration,
    rotation: Duration,
    store: Arc<dyn Store>,
    sealer: Arc<Sealer>,
    current: Mutex<Option<Arc<SigningKey>>>,
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issuer")
            .field("issuer", &self.issuer)
            .field("lifetime", &self.lifetime)
            .field("rotation", &self.rotation)
            .finish_non_exhaustive()
    }
}

/// What a sealed signing key is bound to.
fn key_context(kid: &str) -> Context<'_> {
    Context {
        service: "",
        env: "identity-key",
        name: kid,
        version: 1,
    }
}

/// Past a token's lifetime, how long a retired key stays published (clocks that disagree).
const PUBLISHED_MARGIN: Duration = Duration::from_secs(3600);

impl Issuer {
    /// An issuer at `issuer` (its URL) with `config`'s lifetime and rotation.
    pub fn new(
        issuer: String,
        config: &IdentityConfig,
        store: Arc<dyn Store>,
        sealer: Arc<Sealer>,
    ) -> Issuer {
        Issuer {
            issuer,
            lifetime: config.lifetime(),
            rotation: Duration::from_secs(config.rotation_hours.saturating_mul(3600)),
            store,
            sealer,
            current: Mutex::new(None),
        }
    }

    /// The issuer's URL.
    pub fn url(&self) -> &str {
        &self.issuer
    }

    /// How long a token is valid.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// A token for a replica of `revision` of `service` in `env`, for `audience` (the
    /// issuer's URL when `None`).
    pub async fn issue(
        &self,
        service: &str,
        env: &str,
        revision: &str,
        audience: Option<&str>,
    ) -> Result<String, String> {
        let key = self.signing_key().await?;
        let now = Timestamp::now().unix_millis() / 1000;
        let claims = InstanceClaims {
            iss: self.issuer.clone(),
            sub: format!("service:{service}:env:{env}"),
            aud: audience.unwrap_or(&self.issuer).to_owned(),
            iat: now,
            nbf: now - 5,
            exp: now + millis(self.lifetime) / 1000,
            jti: random_id()?,
            service: service.to_owned(),
            env: env.to_owned(),
            revision: revision.to_owned(),
        };
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(key.kid.clone());
        jsonwebtoken::encode(&header, &claims, &key.key)
            .map_err(|e| format!("cannot sign an identity token: {e}"))
    }

    /// The key that signs now: the one in memory while it is young enough, else the newest in
    /// the store that is, else a new one.
    async fn signing_key(&self) -> Result<Arc<SigningKey>, String> {
        let now = Timestamp::now();
        // A key made after this still signs.
        let since = now.add_millis(-millis(self.rotation));
        if let Some(key) = lock(&self.current).as_ref()
            && key.created_at > since
        {
            return Ok(Arc::clone(key));
        }
        let store = Arc::clone(&self.store);
        let keys = tokio::task::spawn_blocking(move || store.identity_keys(now))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot read the identity keys: {}", runway_log::chain(&e)))?;
        let stored = match keys.iter().find(|k| k.created_at > since) {
            Some(key) => key.clone(),
            None => match self.make_key(now, since).await {
                Ok(key) => key,
                // The store refuses writes (a full disk, another replica leading): a key past
                // its rotation signs on while it stays published longer than the token lives,
                // rather than no replica starting.
                Err(error) => {
                    let until = now.add_millis(millis(self.lifetime));
                    let Some(older) = keys.iter().find(|k| k.expires_at >= until) else {
                        return Err(error);
                    };
                    tracing::warn!(
                        %error, kid = %older.kid,
                        "cannot make a new identity key: signing with the last one a while longer"
                    );
                    return Ok(Arc::new(self.open(older)?));
                }
            },
        };
        let opened = Arc::new(self.open(&stored)?);
        *lock(&self.current) = Some(Arc::clone(&opened));
        Ok(opened)
    }

    /// Makes a signing key and keeps it, unless another replica just did: then that one.
    async fn make_key(&self, now: Timestamp, since: Timestamp) -> Result<IdentityKey, String> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| "cannot make a signing key".to_owned())?;
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .map_err(|_| "cannot read the signing key just made".to_owned())?;
        let (jwk, kid) = public_jwk(pair.public_key().as_ref())?;
        let sealed = self
            .sealer
            .seal(
                &SecretValue::new(pkcs8.as_ref().to_vec()),
                &key_context(&kid),
            )
            .map_err(|e| format!("cannot seal the signing key: {e}"))?;
        let published = self.rotation + self.lifetime + PUBLISHED_MARGIN;
        let key = IdentityKey {
            kid,
            nonce: sealed.nonce,
            ciphertext: sealed.ciphertext,
            public_jwk: jwk.to_string(),
            created_at: now,
            expires_at: now.add_millis(millis(published)),
        };
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || store.identity_key_add("runway", &key, since, now))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot keep the identity key: {}", runway_log::chain(&e)))
    }

    fn open(&self, key: &IdentityKey) -> Result<SigningKey, String> {
        let pkcs8 = self
            .sealer
            .open(
                &Sealed {
                    nonce: key.nonce.clone(),
                    ciphertext: key.ciphertext.clone(),
                },
                &key_context(&key.kid),
            )
            .map_err(|e| format!("identity key {} does not open: {e}", key.kid))?;
        Ok(SigningKey {
            kid: key.kid.clone(),
            key: jsonwebtoken::EncodingKey::from_ec_der(pkcs8.expose()),
            created_at: key.created_at,
        })
    }
}

/// A P-256 public key (uncompressed, 65 bytes) as a JSON Web Key, and its key id: the
/// base64url of the first 16 bytes of the SHA-256 of the key.
fn public_jwk(point: &[u8]) -> Result<(serde_json::Value, String), String> {
    let (x, y) = match point {
        [4, rest @ ..] if rest.len() == 64 => rest.split_at(32),
        _ => return Err("the signing key's public half is not a P-256 point".to_owned()),
    };
    let digest = ring::digest::digest(&ring::digest::SHA256, point);
    let kid = URL_SAFE_NO_PAD.encode(&digest.as_ref()[..16]);
    let jwk = serde_json::json!({
        "kty": "EC",
        "crv": "P-256",
        "x": URL_SAFE_NO_PAD.encode(x),
        "y": URL_SAFE_NO_PAD.encode(y),
        "kid": kid,
        "use": "sig",
        "alg": "ES256",
    });
    Ok((jwk, kid))
}

/// `duration` in milliseconds, as timestamps count.
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn random_id() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&SystemRandom::new(), &mut bytes)
        .map_err(|_| "no randomness for a token id".to_owned())?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use runway_secrets::MasterKey;
    use runway_store::SqliteStore;

    fn issuer(store: &Arc<dyn Store>, rotation: Duration) -> Issuer {
        let mut issuer = Issuer::new(
            "https://runway.test".to_owned(),
            &IdentityConfig::default(),
            Arc::clone(store),
            Arc::new(Sealer::new(&MasterKey::from_bytes([7; 32]))),
        );
        issuer.rotation = rotation;
        issuer
    }

    /// Checks `token` against the store's published keys, as a relying party would.
    fn verify(store: &dyn Store, token: &str, audience: &str) -> InstanceClaims {
        let header = jsonwebtoken::decode_header(token).unwrap();
        let keys = store.identity_keys(Timestamp::now()).unwrap();
        let jwk: serde_json::Value = keys
            .iter()
            .map(|k| serde_json::from_str::<serde_json::Value>(&k.public_jwk).unwrap())
            .find(|k| Some(k["kid"].as_str().unwrap()) == header.kid.as_deref())
            .expect("the token's key is published");
        let key = jsonwebtoken::DecodingKey::from_ec_components(
            jwk["x"].as_str().unwrap(),
            jwk["y"].as_str().unwrap(),
        )
        .unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
        validation.set_audience(&[audience]);
        validation.set_issuer(&["https://runway.test"]);
        jsonwebtoken::decode::<InstanceClaims>(token, &key, &validation)
            .unwrap()
            .claims
    }

    #[tokio::test]
    async fn tokens_verify_with_the_published_keys_and_keys_rotate() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
        let first = issuer(&store, Duration::from_secs(3600));
        let token = first
            .issue("hello", "dev", "hello-dev-00001", Some("openbao"))
            .await
            .unwrap();
        let claims = verify(store.as_ref(), &token, "openbao");
        assert_eq!(
            (claims.sub.as_str(), claims.revision.as_str()),
            ("service:hello:env:dev", "hello-dev-00001")
        );
        assert_eq!(claims.exp - claims.iat, 600);
        // Another replica signs with the same key, opened from the store.
        let second = issuer(&store, Duration::from_secs(3600));
        let other = second
            .issue("other", "dev", "other-dev-00001", None)
            .await
            .unwrap();
        assert_eq!(
            jsonwebtoken::decode_header(&other).unwrap().kid,
            jsonwebtoken::decode_header(&token).unwrap().kid
        );
        assert_eq!(
            verify(store.as_ref(), &other, "https://runway.test").aud,
            "https://runway.test"
        );
        assert_eq!(store.identity_keys(Timestamp::now()).unwrap().len(), 1);

        // Past its rotation a key gives way to a new one; the old stays published.
        let rotating = issuer(&store, Duration::from_millis(1));
        tokio::time::sleep(Duration::from_millis(5)).await;
        let rotated = rotating
            .issue("hello", "dev", "hello-dev-00001", None)
            .await
            .unwrap();
        assert_ne!(
            jsonwebtoken::decode_header(&rotated).unwrap().kid,
            jsonwebtoken::decode_header(&token).unwrap().kid
        );
        assert_eq!(store.identity_keys(Timestamp::now()).unwrap().len(), 2);
        verify(store.as_ref(), &token, "openbao");
        verify(store.as_ref(), &rotated, "https://runway.test");
    }

    #[tokio::test]
    async fn a_store_refusing_writes_leaves_the_last_key_signing_while_it_is_published() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
        // Writes refused, as on a full disk or on a replica that does not lead.
        let refusing = Arc::clone(&store).fenced(runway_store::FenceCell::new(None));
        let none_yet = issuer(&refusing, Duration::from_secs(3600))
            .issue("hello", "dev", "hello-dev-00001", None)
            .await
            .unwrap_err();
        assert!(
            none_yet.contains("cannot keep the identity key"),
            "{none_yet}"
        );

        let token = issuer(&store, Duration::from_secs(3600))
            .issue("hello", "dev", "hello-dev-00001", None)
            .await
            .unwrap();
        // Past its rotation, and no new key can be kept: the old one signs on.
        let rotating = issuer(&refusing, Duration::from_millis(1));
        tokio::time::sleep(Duration::from_millis(5)).await;
        let later = rotating
            .issue("hello", "dev", "hello-dev-00002", None)
            .await
            .unwrap();
        assert_eq!(
            jsonwebtoken::decode_header(&later).unwrap().kid,
            jsonwebtoken::decode_header(&token).unwrap().kid
        );
        assert_eq!(
            verify(store.as_ref(), &later, "https://runway.test").revision,
            "hello-dev-00002"
        );
        assert_eq!(store.identity_keys(Timestamp::now()).unwrap().len(), 1);
    }

    #[test]
    fn the_section_names_its_bad_key() {
        for (config, key) in [
            (
                IdentityConfig {
                    lifetime_minutes: 0,
                    ..IdentityConfig::default()
                },
                "lifetime_minutes",
            ),
            (
                IdentityConfig {
                    rotation_hours: 0,
                    ..IdentityConfig::default()
                },
                "rotation_hours",
            ),
            (
                IdentityConfig {
                    issuer: Some("http://runway.example.com".into()),
                    ..IdentityConfig::default()
                },
                "issuer",
            ),
        ] {
            assert_eq!(config.check().unwrap_err().0, key);
        }
        assert!(IdentityConfig::default().check().is_ok());
    }
}
