//! Single sign-on: people sign in to the console and the CLI through an OpenID Connect
//! provider (`api.sso`: GitLab, Dex, Keycloak…), this server its confidential client.
//!
//! - `GET /v1/sso/login` sends the browser to the provider's authorization endpoint (from its
//!   discovery document) with the authorization code flow, PKCE (S256), a `state` and a
//!   `nonce`, which it keeps in a cookie of its own (`runway_sso`, sealed with the master key,
//!   `HttpOnly`, `Secure`, `SameSite=Lax` so the provider's redirect back carries it, ten
//!   minutes).
//! - `GET /v1/sso/callback` takes the code back: the `state` must be the cookie's; the code is
//!   exchanged (with the client's secret and the PKCE verifier) for an ID token, which must be
//!   signed by the provider's keys, for this client, unexpired, with the cookie's `nonce`
//!   ([`crate::oidc::Verifier::checked`]). The person is its `username_claim`, their groups its
//!   `groups_claim`. A session is a token of its own (`sso: <name>`, the [`TokenScope::Person`]
//!   scope) living `session_hours`, in the console's `runway_session` cookie: what a person may
//!   do is what the teams they are in by name or by those groups allow, looked up at each
//!   request, or everything when a group is one of `admin_groups`. Groups are the provider's
//!   at sign-in: a change takes effect at the next. Revoking the token (`runway tokens revoke`,
//!   signing out) ends the session.
//! - For the CLI (`runway login --sso`), the login names a port on 127.0.0.1, the S256
//!   challenge of a verifier the CLI keeps, and a state of its own. The callback asks the
//!   person first (a page with one button, posting to `POST /v1/sso/cli` from this origin, and
//!   the code the CLI prints beside it), so a link someone else made starts nothing by
//!   itself; then it sends the browser to `http://127.0.0.1:<port>/callback` with the CLI's
//!   state and a one-time code (the sign-in, sealed, for two minutes), which `POST
//!   /v1/sso/token` turns into a session token once, for whoever has the verifier. The browser
//!   never sees the token.
//! - A person in no team and in no admin group is refused at sign-in: the provider's people
//!   are not all this platform's. Whether a person is an admin is read again at each request
//!   from the groups they signed in with and `admin_groups` as they are now.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use runway_secrets::{Context, SecretValue, TokenKind};
use runway_store::{NewToken, Timestamp, TokenScope};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Query};
use crate::state::ApiState;

/// The cookie a sign-in in progress keeps its `state`, `nonce` and PKCE verifier in.
const PENDING_COOKIE: &str = "runway_sso";

/// How long a sign-in may take at the provider.
const PENDING_SECONDS: i64 = 600;

/// How long the CLI has to redeem its one-time code.
const HANDOFF_SECONDS: i64 = 120;

/// Bound on one request to the provider.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);

/// The discovery document is fetched again after this.
const ENDPOINTS_KEPT: Duration = Duration::from_secs(3600);

/// `api.sso`: people sign in through an OpenID Connect provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SsoConfig {
    /// The provider's issuer, exactly as its ID tokens' `iss` (`https://gitlab.example.com`).
    pub issuer: String,
    /// This server's client id at the provider.
    pub client_id: String,
    /// A file holding the client's secret.
    pub client_secret_file: PathBuf,
    /// The authority (PEM) the provider's HTTPS certificate comes from; default the system's.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// This API as people's browsers reach it (`https://runway.example.com`): the provider
    /// sends them back to `{public_url}/v1/sso/callback`, which is registered with it.
    pub public_url: String,
    /// The scopes asked for: `openid profile email` by default; Dex wants `groups` too.
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// The ID token's claim naming the person (`user:<it>` in a team).
    #[serde(default = "default_username_claim")]
    pub username_claim: String,
    /// The ID token's claim listing their groups (`group:<each>` in a team): GitLab's is
    /// `groups_direct`.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// Groups whose people are platform admins.
    #[serde(default)]
    pub admin_groups: Vec<String>,
    /// How long a session lives.
    #[serde(default = "default_session_hours")]
    pub session_hours: u32,
}

fn default_scopes() -> Vec<String> {
    ["openid", "profile", "email"].map(str::to_owned).to_vec()
}

fn default_username_claim() -> String {
    "preferred_username".to_owned()
}

fn default_groups_claim() -> String {
    "groups".to_owned()
}

fn default_session_hours() -> u32 {
    12
}

impl SsoConfig {
    /// Why these settings cannot work, naming the key.
    pub(crate) fn check(&self) -> Result<(), (String, String)> {
        let bad = |key: &str, why: &str| Err((format!("sso.{key}"), why.to_owned()));
        if !self.issuer.starts_with("https://") && !self.issuer.starts_with("http://127.0.0.1") {
            return bad("issuer", "an https:// URL (or http://127.0.0.1 for a test)");
        }
        if self.client_id.is_empty() {
            return bad("client_id", "this server's client id at the provider");
        }
        if !self.public_url.starts_with("https://") || self.public_url.ends_with('/') {
            return bad(
                "public_url",
                "this API's https:// URL as browsers reach it, without a trailing /",
            );
        }
        if !self.scopes.iter().any(|s| s == "openid") {
            return bad(
                "scopes",
                "`openid` among them: it is what makes an ID token",
            );
        }
        if !(1..=24 * 30).contains(&self.session_hours) {
            return bad("session_hours", "1 to 720 hours");
        }
        Ok(())
    }
}

/// The provider, its endpoints and its keys.
#[derive(Debug)]
pub struct Sso {
    config: SsoConfig,
    secret: String,
    http: reqwest::Client,
    keys: crate::oidc::Verifier,
    endpoints: Mutex<Option<(Endpoints, Instant)>>,
    /// The CLI codes redeemed, until they expire: each gives one session.
    redeemed: std::sync::Mutex<std::collections::HashMap<String, i64>>,
}

#[derive(Debug, Clone, Deserialize)]
struct Endpoints {
    authorization_endpoint: String,
    token_endpoint: String,
}

/// A sign-in in progress, sealed in [`PENDING_COOKIE`].
#[derive(Debug, Serialize, Deserialize)]
struct Pending {
    state: String,
    nonce: String,
    verifier: String,
    /// Where in the console to go after, a path of this origin.
    to: String,
    /// For `runway login --sso`: the CLI's loopback port, PKCE challenge and state.
    cli: Option<Cli>,
    expires: i64,
}

/// The CLI's side of its sign-in.
#[derive(Debug, Serialize, Deserialize)]
struct Cli {
    port: u16,
    challenge: String,
    state: String,
}

/// A sign-in done, sealed in the CLI's one-time code.
#[derive(Debug, Serialize, Deserialize)]
struct Handoff {
    user: String,
    groups: Vec<String>,
    admin: bool,
    challenge: String,
    port: u16,
    state: String,
    expires: i64,
}

/// `GET /v1/sso`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SsoView {
    /// Whether people sign in through a provider here.
    pub enabled: bool,
    /// The provider's issuer, when enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
}

/// `GET /v1/sso/login` query.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LoginQuery {
    /// Where in the console to go once signed in (a path under `/ui/`).
    pub to: Option<String>,
    /// For the CLI: the port on 127.0.0.1 it waits on.
    #[param(minimum = 1, maximum = 65535)]
    pub cli_port: Option<u16>,
    /// For the CLI: the base64url SHA-256 of the verifier it will redeem the code with.
    pub cli_challenge: Option<String>,
    /// For the CLI: what it expects back with the code, so it takes no other.
    pub cli_state: Option<String>,
}

/// `GET /v1/sso/callback` query: the provider's answer.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackQuery {
    pub code: Option<String>,
    pub state: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
}

/// `POST /v1/sso/cli`, the confirmation page's form.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ConfirmCli {
    /// The sealed sign-in the page holds.
    pub handoff: String,
}

/// `POST /v1/sso/token`: the CLI's one-time code and its verifier.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedeemCode {
    pub code: String,
    pub verifier: String,
}

/// `POST /v1/sso/token` answer: the session's token, shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SsoSession {
    pub token: String,
    pub name: String,
    pub expires_at: String,
    pub scope: crate::types::ScopeView,
}

fn random_text() -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| ApiError::internal("the OS gives no random numbers"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// PKCE's S256: base64url(SHA-256(verifier)).
pub fn challenge_of(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(ring::digest::digest(
        &ring::digest::SHA256,
        verifier.as_bytes(),
    ))
}

impl Sso {
    /// Whether a person in `groups` is a platform admin, as `admin_groups` says now.
    pub(crate) fn admin(&self, groups: &[String]) -> bool {
        groups.iter().any(|g| self.config.admin_groups.contains(g))
    }

    /// The groups of the server's configuration that make platform admins.
    pub(crate) fn admin_groups(&self) -> &[String] {
        &self.config.admin_groups
    }

    /// The provider of `config`; an unreadable secret or CA file is an error. The provider is
    /// first asked at the first sign-in, so one that is down does not stop the server.
    pub fn new(config: &SsoConfig) -> Result<Self, String> {
        config
            .check()
            .map_err(|(key, why)| format!("api.{key}: {why}"))?;
        let secret = std::fs::read_to_string(&config.client_secret_file)
            .map_err(|e| {
                format!(
                    "api.sso.client_secret_file: cannot read {}: {e}",
                    config.client_secret_file.display()
                )
            })?
            .trim()
            .to_owned();
        let mut builder = reqwest::Client::builder()
            .timeout(PROVIDER_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("runway/", env!("CARGO_PKG_VERSION")));
        if let Some(ca) = &config.ca_file {
            let pem = std::fs::read(ca)
                .map_err(|e| format!("api.sso.ca_file: cannot read {}: {e}", ca.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("api.sso.ca_file: {}: {e}", ca.display()))?;
            builder = builder.tls_certs_only(certs);
        }
        let keys = crate::oidc::Verifier::new(&crate::oidc::OidcConfig {
            issuers: vec![crate::oidc::IssuerConfig {
                issuer: config.issuer.clone(),
                audience: config.client_id.clone(),
                jwks_url: None,
                ca_file: config.ca_file.clone(),
                bindings: Vec::new(),
            }],
        })?;
        Ok(Self {
            config: config.clone(),
            secret,
            http: builder
                .build()
                .map_err(|e| format!("api.sso: cannot set up HTTPS: {e}"))?,
            keys,
            endpoints: Mutex::default(),
            redeemed: std::sync::Mutex::default(),
        })
    }

    /// The provider's endpoints, from its discovery document (kept an hour).
    async fn endpoints(&self) -> Result<Endpoints, ApiError> {
        let mut kept = self.endpoints.lock().await;
        if let Some((endpoints, at)) = kept.as_ref()
            && at.elapsed() < ENDPOINTS_KEPT
        {
            return Ok(endpoints.clone());
        }
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.config.issuer.trim_end_matches('/')
        );
        let unavailable = |why: String| {
            tracing::warn!(%url, reason = %why, "the sign-in provider's discovery document");
            ApiError::unavailable(format!(
                "the sign-in provider cannot be reached ({url}): {why}"
            ))
        };
        let response = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| unavailable(runway_log::chain(&e).to_string()))?;
        if !response.status().is_success() {
            return Err(unavailable(response.status().to_string()));
        }
        let endpoints: Endpoints = response
            .json()
            .await
            .map_err(|e| unavailable(runway_log::chain(&e).to_string()))?;
        *kept = Some((endpoints.clone(), Instant::now()));
        Ok(endpoints)
    }

    fn redirect_uri(&self) -> String {
        format!("{}/v1/sso/callback", self.config.public_url)
    }

    /// The code exchanged for an ID token, checked: who signed in, and their groups.
    async fn sign_in(
        &self,
        code: &str,
        pending: &Pending,
    ) -> Result<(String, Vec<String>), ApiError> {
        let endpoints = self.endpoints().await?;
        let refused = |why: String| {
            tracing::warn!(reason = %why, "a sign-in refused");
            ApiError::unauthorized(format!("the sign-in failed: {why}"))
        };
        let response = self
            .http
            .post(&endpoints.token_endpoint)
            .basic_auth(&self.config.client_id, Some(&self.secret))
            .form(&[
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", &self.redirect_uri()),
                ("code_verifier", &pending.verifier),
            ])
            .send()
            .await
            .map_err(|e| {
                ApiError::unavailable(format!(
                    "the sign-in provider cannot be reached: {}",
                    runway_log::chain(&e)
                ))
            })?;
        let status = response.status();
        let body: serde_json::Value = response.json().await.unwrap_or_default();
        if !status.is_success() {
            return Err(refused(format!(
                "the provider refused the code ({status}: {})",
                body["error_description"]
                    .as_str()
                    .or(body["error"].as_str())
                    .unwrap_or("no reason given")
            )));
        }
        let id_token = body["id_token"]
            .as_str()
            .ok_or_else(|| refused("the provider sent no ID token".to_owned()))?;
        let (_, claims) = self
            .keys
            .checked(id_token)
            .await
            .map_err(|e| refused(format!("its ID token: {e}")))?;
        if claims.rest.get("nonce").and_then(|n| n.as_str()) != Some(pending.nonce.as_str()) {
            return Err(refused(
                "its ID token is not this sign-in's (nonce)".to_owned(),
            ));
        }
        // Issued for several clients, it names this one as the one it was for.
        if claims
            .rest
            .get("aud")
            .and_then(|a| a.as_array())
            .is_some_and(|a| a.len() > 1)
            && claims.rest.get("azp").and_then(|a| a.as_str()) != Some(&self.config.client_id)
        {
            return Err(refused(
                "its ID token was issued for another client (azp)".to_owned(),
            ));
        }
        let user = claims
            .rest
            .get(&self.config.username_claim)
            .and_then(|u| u.as_str())
            .filter(|u| !u.is_empty() && !u.chars().any(char::is_control))
            .ok_or_else(|| {
                refused(format!(
                    "its ID token has no `{}` claim naming the person (api.sso.username_claim)",
                    self.config.username_claim
                ))
            })?
            .to_owned();
        // A person with no groups is sent none at all by some providers.
        let groups = match claims.rest.get(&self.config.groups_claim) {
            None => Vec::new(),
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .filter_map(|g| g.as_str())
                .filter(|g| !g.is_empty() && !g.chars().any(char::is_control))
                .map(str::to_owned)
                .collect(),
            Some(_) => {
                return Err(refused(format!(
                    "its `{}` claim is not a list of groups (api.sso.groups_claim)",
                    self.config.groups_claim
                )));
            }
        };
        Ok((user, groups))
    }
}

fn sso(state: &ApiState) -> ApiResult<&Sso> {
    state
        .sso
        .as_deref()
        .ok_or_else(|| ApiError::not_found("single sign-on is not set up on this server (api.sso)"))
}

fn seal<T: Serialize>(state: &ApiState, what: &str, value: &T) -> ApiResult<String> {
    let text = serde_json::to_vec(value).map_err(|e| ApiError::internal(e.to_string()))?;
    let sealed = state
        .sealer
        .seal(&SecretValue::new(text), &context(what))
        .map_err(|e| ApiError::internal(format!("sealing the sign-in: {e}")))?;
    let mut bytes = sealed.nonce;
    bytes.extend_from_slice(&sealed.ciphertext);
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

fn open<T: serde::de::DeserializeOwned>(state: &ApiState, what: &str, text: &str) -> Option<T> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()?;
    if bytes.len() < runway_secrets::seal::NONCE_LEN {
        return None;
    }
    let (nonce, ciphertext) = bytes.split_at(runway_secrets::seal::NONCE_LEN);
    let sealed = runway_secrets::Sealed {
        nonce: nonce.to_vec(),
        ciphertext: ciphertext.to_vec(),
    };
    let value = state.sealer.open(&sealed, &context(what)).ok()?;
    serde_json::from_slice(value.expose()).ok()
}

fn context(what: &str) -> Context<'_> {
    Context {
        service: "",
        env: "sso",
        name: what,
        version: 0,
    }
}

fn see_other(location: &str, cookies: &[String]) -> ApiResult<Response> {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::LOCATION,
        HeaderValue::from_str(location).map_err(|_| ApiError::internal("a redirect's location"))?,
    );
    for cookie in cookies {
        headers.append(
            header::SET_COOKIE,
            HeaderValue::from_str(cookie).map_err(|_| ApiError::internal("a cookie"))?,
        );
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// Whether people sign in through a provider here, and which.
#[utoipa::path(get, path = "/v1/sso", security(()), responses((status = 200, body = SsoView)))]
pub(crate) async fn sso_status(state: axum::extract::State<ApiState>) -> axum::Json<SsoView> {
    axum::Json(SsoView {
        enabled: state.sso.is_some(),
        issuer: state.sso.as_ref().map(|s| s.config.issuer.clone()),
    })
}

/// Starts a sign-in: 303 to the provider, the sign-in's `state`, `nonce` and PKCE verifier
/// sealed in the `runway_sso` cookie. 404 without `api.sso`.
#[utoipa::path(get, path = "/v1/sso/login", params(LoginQuery), security(()),
    responses((status = 303, description = "To the provider's authorization endpoint"),
        (status = 400, description = "Invalid input", body = crate::error::ErrorBody),
        (status = 401, description = "The sign-in was refused", body = crate::error::ErrorBody),
        (status = 404, description = "Single sign-on is not set up here", body = crate::error::ErrorBody),
        (status = 503, description = "The provider cannot be reached", body = crate::error::ErrorBody)))]
pub(crate) async fn login(
    state: axum::extract::State<ApiState>,
    Query(query): Query<LoginQuery>,
) -> ApiResult<Response> {
    let sso = sso(&state)?;
    // Only a page of this console: never a redirect elsewhere.
    let to = query
        .to
        .filter(|to| {
            to.starts_with("/ui/")
                && !to.contains("//")
                && !to.contains('\\')
                && to.bytes().all(|b| b.is_ascii_graphic())
        })
        .unwrap_or_else(|| "/ui/".to_owned());
    let token_like = |text: &str| {
        (16..=128).contains(&text.len())
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    let cli = match (query.cli_port, query.cli_challenge, query.cli_state) {
        (None, None, None) => None,
        (Some(port), Some(challenge), Some(state))
            if port > 0
                && challenge.len() == 43
                && token_like(&challenge)
                && token_like(&state) =>
        {
            Some(Cli {
                port,
                challenge,
                state,
            })
        }
        _ => {
            return Err(ApiError::invalid(
                "cli_port, cli_challenge and cli_state come together: the CLI's port on \
                 127.0.0.1, the base64url SHA-256 of its verifier, and its state",
            )
            .field("cli_challenge"));
        }
    };
    let endpoints = sso.endpoints().await?;
    let pending = Pending {
        state: random_text()?,
        nonce: random_text()?,
        verifier: random_text()?,
        to,
        cli,
        expires: Timestamp::now().unix_millis() / 1000 + PENDING_SECONDS,
    };
    let mut url = url::Url::parse(&endpoints.authorization_endpoint).map_err(|e| {
        ApiError::unavailable(format!("the provider's authorization endpoint: {e}"))
    })?;
    url.query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", &sso.config.client_id)
        .append_pair("redirect_uri", &sso.redirect_uri())
        .append_pair("scope", &sso.config.scopes.join(" "))
        .append_pair("state", &pending.state)
        .append_pair("nonce", &pending.nonce)
        .append_pair("code_challenge", &challenge_of(&pending.verifier))
        .append_pair("code_challenge_method", "S256");
    let cookie = format!(
        "{PENDING_COOKIE}={}; HttpOnly; Secure; SameSite=Lax; Path=/v1/sso; Max-Age={PENDING_SECONDS}",
        seal(&state, "pending", &pending)?
    );
    see_other(url.as_str(), &[cookie])
}

/// The provider's answer: the person signed in, a session made (the console's cookie, or the
/// CLI's one-time code), 303 back to the console or the CLI.
#[utoipa::path(get, path = "/v1/sso/callback", params(CallbackQuery), security(()),
    responses((status = 303, description = "Signed in: to the console (with its session cookie) or to the CLI"),
        (status = 400, description = "Invalid input", body = crate::error::ErrorBody),
        (status = 401, description = "The sign-in was refused", body = crate::error::ErrorBody),
        (status = 404, description = "Single sign-on is not set up here", body = crate::error::ErrorBody),
        (status = 503, description = "The provider cannot be reached", body = crate::error::ErrorBody)))]
pub(crate) async fn callback(
    state: axum::extract::State<ApiState>,
    headers: HeaderMap,
    Query(query): Query<CallbackQuery>,
) -> ApiResult<Response> {
    let sso = sso(&state)?;
    let pending: Pending = crate::auth::cookie(&headers, PENDING_COOKIE)
        .and_then(|text| open(&state, "pending", text))
        .filter(|p: &Pending| p.expires > Timestamp::now().unix_millis() / 1000)
        .ok_or_else(|| {
            ApiError::unauthorized(
                "this sign-in was not started here, or took over ten minutes: start again",
            )
        })?;
    if query.state.as_deref() != Some(pending.state.as_str()) {
        return Err(ApiError::unauthorized(
            "the provider's answer is not this sign-in's (state): start again",
        ));
    }
    if let Some(error) = query.error {
        return Err(ApiError::unauthorized(format!(
            "the provider refused the sign-in: {error}{}",
            query
                .error_description
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        )));
    }
    let code = query
        .code
        .ok_or_else(|| ApiError::invalid("the provider sent no code").field("code"))?;
    let (user, groups) = sso.sign_in(&code, &pending).await?;
    let admin = sso.admin(&groups);
    if !admin {
        let teams = state.store(|s| Ok(s.team_list()?)).await?;
        if !runway_store::person_in_a_team(&teams, &user, &groups) {
            tracing::warn!(%user, ?groups, "a sign-in refused: in no team");
            return Err(ApiError::forbidden(format!(
                "{user} is in no team on this platform (by name, or by the groups {}): an \
                 admin adds you to one",
                if groups.is_empty() {
                    "the provider gave: none".to_owned()
                } else {
                    groups.join(", ")
                }
            )));
        }
    }
    let clear =
        format!("{PENDING_COOKIE}=; HttpOnly; Secure; SameSite=Lax; Path=/v1/sso; Max-Age=0");
    if let Some(cli) = pending.cli {
        let handoff = Handoff {
            user,
            groups,
            admin,
            challenge: cli.challenge,
            port: cli.port,
            state: cli.state,
            expires: Timestamp::now().unix_millis() / 1000 + HANDOFF_SECONDS,
        };
        return confirm_page(&handoff, &seal(&state, "handoff", &handoff)?, &clear);
    }
    let (token, created) = session(&state, sso, user, groups, admin).await?;
    let seconds = created.expires_at.map_or(0, |at| {
        (at.unix_millis() - Timestamp::now().unix_millis()).max(0) / 1000
    });
    see_other(
        &pending.to,
        &[clear, crate::session::set_cookie(&token, seconds)],
    )
}

/// The code `runway login --sso` prints and the confirmation page shows beside it, from the
/// challenge of its verifier: `ABCD-1234`.
pub fn display_code(challenge: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, challenge.as_bytes());
    let hex: String = digest.as_ref()[..4]
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect();
    format!("{}-{}", &hex[..4], &hex[4..])
}

/// Text safe in HTML.
fn escape(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '&' => "&amp;".to_owned(),
            '<' => "&lt;".to_owned(),
            '>' => "&gt;".to_owned(),
            '"' => "&quot;".to_owned(),
            '\'' => "&#39;".to_owned(),
            c => c.to_string(),
        })
        .collect()
}

/// The page that asks the person before their sign-in goes to a CLI: one button, posting the
/// sealed sign-in to `POST /v1/sso/cli` from this origin, framed by no one.
fn confirm_page(handoff: &Handoff, sealed: &str, clear: &str) -> ApiResult<Response> {
    let body = format!(
        "<!doctype html><html lang=en><meta charset=utf-8><title>Sign in the Runway CLI</title>\
         <body style=\"font:16px system-ui;max-width:36rem;margin:3rem auto\">\
         <h1>Sign in the Runway CLI?</h1>\
         <p>As <b>{user}</b>, for the <code>runway login --sso</code> waiting on port {port} of \
         this computer. It shows the code <b>{code}</b>: continue only if you started it and \
         the codes match.</p>\
         <form method=post action=/v1/sso/cli><input type=hidden name=handoff value=\"{sealed}\">\
         <button type=submit>Sign in the CLI</button></form></body></html>",
        user = escape(&handoff.user),
        port = handoff.port,
        code = display_code(&handoff.challenge),
        sealed = escape(sealed),
    );
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers.append(
        header::SET_COOKIE,
        HeaderValue::from_str(clear).map_err(|_| ApiError::internal("a cookie"))?,
    );
    Ok(response)
}

/// The person's yes on the confirmation page: 303 to the CLI's port with its state and the
/// one-time code. Only from this API's own origin (a page elsewhere cannot post it).
#[utoipa::path(post, path = "/v1/sso/cli", security(()),
    request_body(content = ConfirmCli, content_type = "application/x-www-form-urlencoded"),
    responses((status = 303, description = "To the CLI's port on 127.0.0.1"),
        (status = 400, description = "Invalid input", body = crate::error::ErrorBody),
        (status = 401, description = "The sign-in was refused", body = crate::error::ErrorBody),
        (status = 403, description = "Not from this API's own page", body = crate::error::ErrorBody),
        (status = 404, description = "Single sign-on is not set up here", body = crate::error::ErrorBody)))]
pub(crate) async fn confirm_cli(
    state: axum::extract::State<ApiState>,
    headers: HeaderMap,
    body: String,
) -> ApiResult<Response> {
    let sso = sso(&state)?;
    let origin = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok());
    if origin != Some(sso.config.public_url.as_str()) {
        return Err(ApiError::forbidden(
            "a CLI sign-in is confirmed on this server's own page",
        ));
    }
    let sealed = url::form_urlencoded::parse(body.as_bytes())
        .find(|(name, _)| name == "handoff")
        .map(|(_, value)| value.into_owned())
        .ok_or_else(|| ApiError::invalid("no handoff").field("handoff"))?;
    let handoff: Handoff = open(&state, "handoff", &sealed)
        .filter(|h: &Handoff| h.expires > Timestamp::now().unix_millis() / 1000)
        .ok_or_else(|| {
            ApiError::unauthorized("this sign-in is not one this server began, or it expired")
        })?;
    see_other(
        &format!(
            "http://127.0.0.1:{}/callback?state={}&code={sealed}",
            handoff.port, handoff.state
        ),
        &[],
    )
}

/// The CLI's one-time code and its verifier, for the session's token.
#[utoipa::path(post, path = "/v1/sso/token", request_body = RedeemCode, security(()),
    responses((status = 201, body = SsoSession),
        (status = 400, description = "Invalid input", body = crate::error::ErrorBody),
        (status = 401, description = "The sign-in was refused", body = crate::error::ErrorBody),
        (status = 404, description = "Single sign-on is not set up here", body = crate::error::ErrorBody),
        (status = 503, description = "The provider cannot be reached", body = crate::error::ErrorBody)))]
pub(crate) async fn redeem(
    state: axum::extract::State<ApiState>,
    Json(body): Json<RedeemCode>,
) -> ApiResult<(StatusCode, axum::Json<SsoSession>)> {
    let sso = sso(&state)?;
    let handoff: Handoff = open(&state, "handoff", &body.code)
        .filter(|h: &Handoff| h.expires > Timestamp::now().unix_millis() / 1000)
        .ok_or_else(|| {
            ApiError::unauthorized("this code is not one this server gave, or it expired")
        })?;
    if challenge_of(&body.verifier) != handoff.challenge {
        return Err(ApiError::unauthorized(
            "the verifier is not the one this sign-in was started with",
        ));
    }
    {
        let now = Timestamp::now().unix_millis() / 1000;
        let mut redeemed = sso
            .redeemed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        redeemed.retain(|_, expires| *expires > now);
        if redeemed
            .insert(challenge_of(&body.code), handoff.expires)
            .is_some()
        {
            return Err(ApiError::unauthorized("this code was redeemed already"));
        }
    }
    let (token, created) =
        session(&state, sso, handoff.user, handoff.groups, handoff.admin).await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(SsoSession {
            token: token.expose().to_owned(),
            name: created.name,
            expires_at: created
                .expires_at
                .map(|at| at.to_string())
                .unwrap_or_default(),
            scope: crate::types::ScopeView::from(&created.scope),
        }),
    ))
}

/// A person's session: a token of its own, audited as `sso: <name>` signing in.
async fn session(
    state: &ApiState,
    sso: &Sso,
    user: String,
    groups: Vec<String>,
    admin: bool,
) -> ApiResult<(runway_secrets::PlaintextToken, runway_store::Token)> {
    let kind = if admin {
        TokenKind::Admin
    } else {
        TokenKind::Deploy
    };
    let (token, hash) = runway_secrets::Token::generate(kind)
        .map_err(|e| ApiError::internal(format!("generating a session token: {e}")))?;
    let name = format!("sso: {user}");
    let expires_at = Timestamp::now().add_millis(i64::from(sso.config.session_hours) * 3600 * 1000);
    let new = NewToken {
        name: name.clone(),
        hash: hash.as_bytes().to_vec(),
        scope: TokenScope::Person {
            user,
            groups,
            admin,
        },
        expires_at: Some(expires_at),
        parent: None,
    };
    let created = state
        .store(move |s| Ok(s.token_create(&name, &new)?))
        .await?;
    Ok((token, created))
}
