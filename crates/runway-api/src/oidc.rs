//! OIDC identity tokens as bearer tokens: a CI job's signed, short-lived JWT (GitLab CI's
//! `id_tokens`) instead of a long-lived Runway token.
//!
//! A token is checked against the issuer its `iss` names among those configured
//! (`api.oidc.issuers`): its signature (RS256 or ES256) by the key its `kid` names in the
//! issuer's key set (from its discovery document, or a given URL; cached, and fetched again
//! when a `kid` is unknown, at most every [`REFRESH_AT_MOST_EVERY`], so a rotated key is
//! picked up), its audience, its times (`exp` not past, `iat` and `nbf` not ahead, with 60 s
//! of clock skew allowed), and then the issuer's bindings: the first whose claims all match
//! says which service and environments it may act on. Every refusal is logged with its
//! reason; the client gets a plain 401, or 403 when the token is good but bound to nothing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

/// A key set is fetched again for an unknown `kid` no more often than this.
pub const REFRESH_AT_MOST_EVERY: Duration = Duration::from_secs(30);

/// A key set is fetched again after this, whatever is asked.
pub const KEYS_KEPT: Duration = Duration::from_secs(3600);

/// Clock skew allowed on `exp`, `nbf` and `iat`.
pub const LEEWAY_SECONDS: u64 = 60;

/// Bound on fetching a discovery document or a key set.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// `api.oidc`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OidcConfig {
    pub issuers: Vec<IssuerConfig>,
}

/// One trusted issuer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerConfig {
    /// Its `iss`, exactly (`https://gitlab.example.com`).
    pub issuer: String,
    /// The `aud` a token must carry for this server (GitLab CI's `id_tokens: ...: aud:`).
    pub audience: String,
    /// Its key set; default: the `jwks_uri` of `{issuer}/.well-known/openid-configuration`.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// The authority (PEM) its HTTPS certificate comes from; default the system's roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// What its tokens may do: the first binding whose claims all match decides.
    #[serde(default)]
    pub bindings: Vec<Binding>,
}

/// Claims to what a token may do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// Each claim's required value, as text (`ref_protected: "true"`,
    /// `project_path: group/app`). A claim the token lacks does not match.
    pub claims: BTreeMap<String, String>,
    /// What its tokens may do: a role on `service` (every service when it names none), or
    /// `admin`. `deployer` by default.
    #[serde(default)]
    pub role: Role,
    /// The service its tokens act on; none for every service (and for `admin`).
    #[serde(default)]
    pub service: String,
    /// The environments its tokens act in: for a binding on one service, these only (none
    /// when empty); for one on every service, these, or every one when empty. A token with an
    /// `environment` claim is narrowed to it.
    #[serde(default)]
    pub environments: Vec<String>,
}

/// What a binding's tokens may do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Read (`reader`, the name earlier versions gave it on every service).
    #[serde(alias = "reader")]
    Viewer,
    /// Deploy (`deploy`, the name earlier versions gave it).
    #[default]
    #[serde(alias = "deploy")]
    Deployer,
    /// Also secrets, tokens and domains.
    Maintainer,
    /// Anything, as an admin token: bind it to protected refs only.
    Admin,
}

impl Role {
    /// The role on services it grants; `None` for `admin`.
    pub fn grant(self) -> Option<runway_secrets::Role> {
        match self {
            Self::Viewer => Some(runway_secrets::Role::Viewer),
            Self::Deployer => Some(runway_secrets::Role::Deployer),
            Self::Maintainer => Some(runway_secrets::Role::Maintainer),
            Self::Admin => None,
        }
    }
}

impl Binding {
    /// Why this binding cannot be used, if it cannot: an `admin` binding names no service and
    /// no environments; a `deployer` or `maintainer` names its service (a forgotten one must
    /// not mean every service); a `viewer` may name none, for every service.
    pub fn check(&self) -> Result<(), String> {
        match self.role {
            Role::Admin if !self.service.is_empty() || !self.environments.is_empty() => Err(
                "a binding with role `admin` acts on everything: it names no `service` and no \
                 `environments`"
                    .to_owned(),
            ),
            Role::Deployer | Role::Maintainer if self.service.is_empty() => Err(format!(
                "a `{}` binding names its `service`",
                if self.role == Role::Deployer {
                    "deployer"
                } else {
                    "maintainer"
                }
            )),
            _ => Ok(()),
        }
    }
}

/// A token's identity, as the audit log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub issuer: String,
    pub subject: String,
    pub project: Option<String>,
    pub pipeline: Option<String>,
    /// What the binding allows: its role, its service (none for every service) and its
    /// environments (`None` for every one).
    pub role: Role,
    pub service: String,
    pub environments: Option<Vec<String>>,
    /// A merge request's pipeline from a fork, run in the project (GitLab names the fork in
    /// `project_path` and the project the job runs in in `job_project_path`): its previews
    /// get no secrets.
    pub fork: bool,
    /// `exp` and the skew allowed, in Unix milliseconds.
    pub expires_at: i64,
}

impl Identity {
    /// The audit log's actor: `oidc:{issuer} {subject} pipeline {id}`.
    pub fn actor(&self) -> String {
        let mut actor = format!("oidc:{} {}", self.issuer, self.subject);
        if let Some(pipeline) = &self.pipeline {
            actor.push_str(&format!(" pipeline {pipeline}"));
        }
        actor
    }
}

/// Why a token was refused: [`Refusal::Unbound`] is a 403, the rest 401.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("not a JWT: {0}")]
    Malformed(String),
    #[error("issuer {0:?} is not trusted")]
    UnknownIssuer(String),
    #[error("algorithm {0:?}: only RS256 and ES256 are accepted")]
    Algorithm(String),
    #[error("no key {kid:?} in {issuer}'s key set")]
    UnknownKey { issuer: String, kid: String },
    #[error("cannot fetch {issuer}'s keys: {reason}")]
    Keys { issuer: String, reason: String },
    #[error("{0}")]
    Invalid(String),
    #[error("no binding of {issuer} matches its claims (subject {subject:?})")]
    Unbound { issuer: String, subject: String },
}

/// The claims read from a token, past its signature and times.
#[derive(Debug, Deserialize)]
pub(crate) struct Claims {
    pub(crate) sub: String,
    pub(crate) exp: i64,
    #[serde(flatten)]
    pub(crate) rest: serde_json::Map<String, serde_json::Value>,
}

/// The configured issuers and their cached key sets.
#[derive(Debug)]
pub struct Verifier {
    issuers: Vec<Issuer>,
    refresh_at_most_every: Duration,
}

#[derive(Debug)]
pub(crate) struct Issuer {
    config: IssuerConfig,
    http: reqwest::Client,
    keys: Mutex<Keys>,
}

#[derive(Debug, Default)]
struct Keys {
    set: Option<(JwkSet, Instant)>,
}

/// Whether a bearer token looks like a JWT (three base64url parts, a JSON header).
pub fn looks_like_jwt(token: &str) -> bool {
    token.starts_with("eyJ") && token.split('.').count() == 3
}

impl Verifier {
    /// The verifier of `config`'s issuers; a CA file that cannot be read is an error.
    pub fn new(config: &OidcConfig) -> Result<Self, String> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let issuers = config
            .issuers
            .iter()
            .map(|issuer| {
                let mut builder = reqwest::Client::builder()
                    .timeout(FETCH_TIMEOUT)
                    .user_agent(concat!("runway/", env!("CARGO_PKG_VERSION")));
                if let Some(ca) = &issuer.ca_file {
                    let pem = std::fs::read(ca)
                        .map_err(|e| format!("api.oidc: cannot read {}: {e}", ca.display()))?;
                    let certs = reqwest::Certificate::from_pem_bundle(&pem)
                        .map_err(|e| format!("api.oidc: {}: {e}", ca.display()))?;
                    builder = builder.tls_certs_only(certs);
                }
                Ok(Issuer {
                    config: issuer.clone(),
                    http: builder
                        .build()
                        .map_err(|e| format!("api.oidc: cannot set up HTTPS: {e}"))?,
                    keys: Mutex::default(),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self {
            issuers,
            refresh_at_most_every: REFRESH_AT_MOST_EVERY,
        })
    }

    /// Fetches a key set again for an unknown `kid` at most this often (default
    /// [`REFRESH_AT_MOST_EVERY`]; tests of a rotation shorten it).
    #[must_use]
    pub fn refresh_at_most_every(mut self, every: Duration) -> Self {
        self.refresh_at_most_every = every;
        self
    }

    /// The issuer of `token` and its claims, past its signature, audience and times: what an
    /// identity token and a sign-in's ID token ([`crate::sso`]) both need.
    pub(crate) async fn checked(&self, token: &str) -> Result<(&Issuer, Claims), Refusal> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| Refusal::Malformed(e.to_string()))?;
        let algorithm = match header.alg {
            Algorithm::RS256 | Algorithm::ES256 => header.alg,
            other => return Err(Refusal::Algorithm(format!("{other:?}"))),
        };
        let iss = unverified_issuer(token)?;
        let issuer = self
            .issuers
            .iter()
            .find(|i| i.config.issuer == iss)
            .ok_or_else(|| Refusal::UnknownIssuer(iss.chars().take(200).collect()))?;
        let kid = header.kid.unwrap_or_default();
        let key = issuer.key(&kid, self.refresh_at_most_every).await?;
        let mut validation = Validation::new(algorithm);
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        validation.set_audience(&[&issuer.config.audience]);
        validation.set_issuer(&[&issuer.config.issuer]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let claims = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| Refusal::Invalid(said(&e, &issuer.config.audience)))?
            .claims;
        // jsonwebtoken reads `exp` and `nbf` (a `nbf` that is not a number it skips), never
        // `iat`.
        not_from_the_future(&claims.rest, jsonwebtoken::get_current_timestamp())
            .map_err(Refusal::Invalid)?;
        Ok((issuer, claims))
    }

    /// The identity `token` proves, or why not.
    pub async fn verify(&self, token: &str) -> Result<Identity, Refusal> {
        let (issuer, claims) = self.checked(token).await?;
        let text = |name: &str| claims.rest.get(name).map(claim_text);
        let binding = issuer
            .config
            .bindings
            .iter()
            .find(|binding| {
                binding
                    .claims
                    .iter()
                    .all(|(name, wanted)| text(name).as_deref() == Some(wanted.as_str()))
            })
            .ok_or_else(|| Refusal::Unbound {
                issuer: issuer.config.issuer.clone(),
                subject: claims.sub.clone(),
            })?;
        // A binding on one service acts in its list; one on every service in its list, or
        // everywhere when it lists none.
        let allowed = (!binding.service.is_empty() || !binding.environments.is_empty())
            .then(|| binding.environments.clone());
        // A job's `environment` narrows what its binding allows; GitLab's review apps
        // (`review/…`) are previews.
        let environments = match text("environment") {
            Some(env) => {
                let env = if env.starts_with("review/") {
                    runway_secrets::preview::ENVIRONMENT.to_owned()
                } else {
                    env
                };
                Some(match allowed {
                    None => vec![env],
                    Some(list) => list.into_iter().filter(|e| *e == env).collect(),
                })
            }
            None => allowed,
        };
        let fork = text("job_project_path").is_some_and(|job| Some(job) != text("project_path"));
        Ok(Identity {
            issuer: issuer.config.issuer.clone(),
            subject: claims.sub.clone(),
            project: text("project_path"),
            pipeline: text("pipeline_id"),
            role: binding.role,
            service: binding.service.clone(),
            environments,
            fork,
            // Its `exp`, with the same skew the check above allowed.
            expires_at: claims
                .exp
                .saturating_add(LEEWAY_SECONDS as i64)
                .saturating_mul(1000),
        })
    }
}

/// Refuses a token issued (`iat`) or valid from (`nbf`) later than `now` (Unix seconds) plus
/// the skew allowed on `exp`: a clock that far off, or a token minted ahead of its use, is
/// not one to act on. A claim that is there but not a number (a NumericDate) is refused too;
/// one that is absent is not required.
fn not_from_the_future(
    claims: &serde_json::Map<String, serde_json::Value>,
    now: u64,
) -> Result<(), String> {
    for (name, what) in [("iat", "issued"), ("nbf", "valid from")] {
        let Some(value) = claims.get(name) else {
            continue;
        };
        let at = value
            .as_f64()
            .filter(|at| at.is_finite())
            .ok_or_else(|| format!("its `{name}` claim is not a time in seconds since 1970"))?;
        // Seconds since 1970 are well within an f64's exact integers.
        let ahead = at - now as f64;
        if ahead > LEEWAY_SECONDS as f64 {
            return Err(format!(
                "{what} in the future: `{name}` is {} s ahead of this server's clock \
                 ({LEEWAY_SECONDS} s of skew allowed)",
                ahead.ceil()
            ));
        }
    }
    Ok(())
}

/// Why a token's signature or claims do not hold, for the server's log.
fn said(error: &jsonwebtoken::errors::Error, audience: &str) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match error.kind() {
        ErrorKind::ExpiredSignature => {
            format!("expired (`exp`, {LEEWAY_SECONDS} s of skew allowed)")
        }
        ErrorKind::ImmatureSignature => {
            format!("not valid yet (`nbf`, {LEEWAY_SECONDS} s of skew allowed)")
        }
        ErrorKind::InvalidAudience => format!("its audience is not {audience:?}"),
        ErrorKind::InvalidIssuer => "its issuer does not match".to_owned(),
        ErrorKind::InvalidSignature => "its signature does not match its contents".to_owned(),
        ErrorKind::MissingRequiredClaim(claim) => format!("no `{claim}` claim"),
        _ => error.to_string(),
    }
}

/// A claim as text: a string as it is, anything else as JSON (`true`, `42`).
fn claim_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The `iss` of a token not yet verified, to choose whose keys verify it.
fn unverified_issuer(token: &str) -> Result<String, Refusal> {
    use base64::Engine as _;
    let payload = token
        .split('.')
        .nth(1)
        .ok_or_else(|| Refusal::Malformed("no payload".to_owned()))?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .map_err(|_| Refusal::Malformed("the payload is not base64url".to_owned()))?;
    #[derive(Deserialize)]
    struct Iss {
        iss: String,
    }
    serde_json::from_slice::<Iss>(&bytes)
        .map(|claims| claims.iss)
        .map_err(|_| Refusal::Malformed("no `iss` claim".to_owned()))
}

impl Issuer {
    /// The key `kid` names: from the cached set, else from the set fetched again (at most
    /// every [`REFRESH_AT_MOST_EVERY`]: a rotated key is found, a forged `kid` costs nothing).
    async fn key(&self, kid: &str, refresh: Duration) -> Result<DecodingKey, Refusal> {
        let mut keys = self.keys.lock().await;
        let fresh = keys
            .set
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() < KEYS_KEPT);
        if fresh && let Some(key) = keys.set.as_ref().and_then(|(set, _)| find(set, kid)) {
            return key;
        }
        let recent = keys
            .set
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() < refresh);
        if !recent {
            let set = self.fetch().await.map_err(|reason| Refusal::Keys {
                issuer: self.config.issuer.clone(),
                reason,
            })?;
            keys.set = Some((set, Instant::now()));
        }
        keys.set
            .as_ref()
            .and_then(|(set, _)| find(set, kid))
            .unwrap_or_else(|| {
                Err(Refusal::UnknownKey {
                    issuer: self.config.issuer.clone(),
                    kid: kid.chars().take(100).collect(),
                })
            })
    }

    /// The key set: from `jwks_url`, or the discovery document's `jwks_uri`.
    async fn fetch(&self) -> Result<JwkSet, String> {
        let url = match &self.config.jwks_url {
            Some(url) => url.clone(),
            None => {
                let discovery = format!(
                    "{}/.well-known/openid-configuration",
                    self.config.issuer.trim_end_matches('/')
                );
                let document: serde_json::Value = self.get(&discovery).await?;
                document
                    .get("jwks_uri")
                    .and_then(|u| u.as_str())
                    .ok_or_else(|| format!("{discovery} names no jwks_uri"))?
                    .to_owned()
            }
        };
        self.get(&url).await
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, String> {
        let response = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| format!("{url}: {}", runway_log::chain(&e)))?;
        if !response.status().is_success() {
            return Err(format!("{url}: {}", response.status()));
        }
        response
            .json()
            .await
            .map_err(|e| format!("{url}: {}", runway_log::chain(&e)))
    }
}

/// The key of `kid` in `set`, as a decoding key.
fn find(set: &JwkSet, kid: &str) -> Option<Result<DecodingKey, Refusal>> {
    let jwk = set.find(kid)?;
    Some(DecodingKey::from_jwk(jwk).map_err(|e| Refusal::Invalid(format!("key {kid}: {e}"))))
}

/// The verifier shared by the API's requests.
pub type SharedVerifier = Arc<Verifier>;
