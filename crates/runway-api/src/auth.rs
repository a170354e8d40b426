//! Authentication and authorization.
//!
//! [`Caller`] is an extractor: `Authorization: Bearer <token>` → [`Token::parse`] (prefix,
//! length, checksum) → the store's lookup by hash → not revoked, not expired. Every failure
//! before the lookup and an unknown token give the same 401, so a caller cannot tell a
//! malformed token from one the server does not know. Each handler then asks
//! [`Caller::allow`] for its route's action, with the service and environment from the
//! path; a refusal is a 403 from [`runway_secrets::authorize`].
//!
//! Without an `Authorization` header, the token is the console's session cookie
//! (`runway_session`, see [`crate::session`]). A browser sends that cookie with whatever
//! request a page makes to this origin, so a cookie-carrying request that changes something
//! (any method but GET and HEAD) must also carry `X-Runway-Console: 1`, a header a page on
//! another site cannot add without a CORS preflight (which this API never grants), and, when
//! the browser says where it comes from (`Origin`), come from the API's own origin; it is
//! refused with a 403 otherwise ([`from_console`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header::{AUTHORIZATION, COOKIE, HOST, ORIGIN};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method};
use runway_secrets::{Action, Denied, Env, Grant, Need, PlaintextToken, Scope, Target, TokenKind};
use runway_store::{NewToken, Store, Timestamp, TokenScope};

use crate::error::ApiError;
use crate::state::ApiState;

/// The one message for a missing, malformed or unknown token.
pub(crate) const UNAUTHORIZED: &str =
    "missing or invalid token: send `Authorization: Bearer <token>`";

/// The cookie that carries a console session's token.
pub(crate) const SESSION_COOKIE: &str = "runway_session";

/// The header only the console sends, which a cross-site page cannot.
pub(crate) const CONSOLE_HEADER: &str = "x-runway-console";

/// The authenticated token behind a request.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's id.
    pub id: i64,
    /// The token's name: the actor in the audit log.
    pub name: String,
    /// What it allows, as the store keeps it.
    pub scope: TokenScope,
    /// What it allows, as the policy reads it.
    pub(crate) policy: Scope,
    /// The team of each service a team it has a grant on owns.
    pub(crate) teams: Arc<BTreeMap<String, String>>,
    /// When it stops working (Unix milliseconds).
    pub(crate) expires_at: Option<i64>,
    /// The token's hash (empty for an identity token, which the store does not hold): how a
    /// long-lived answer (the watch stream) looks again whether it was revoked.
    pub(crate) hash: Vec<u8>,
    /// For a console session, the token it was made from.
    pub(crate) parent: Option<i64>,
    /// A CI job of a merge request from a fork: its previews get no secrets.
    pub(crate) fork: bool,
    /// What the request's route needs ([`crate::access::ROUTES`]), for the handler's checks of
    /// the services it finds.
    pub(crate) route: Option<Need>,
}

impl Caller {
    /// The token's name, as the audit log's actor.
    pub fn actor(&self) -> &str {
        &self.name
    }

    /// Whether this caller has `need` on `service` (or across services) at `env`: 403 if not
    /// (401 once the token expired).
    ///
    /// # Errors
    /// The refusal.
    pub(crate) fn check(
        &self,
        need: Need,
        service: Option<&str>,
        env: Env<'_>,
    ) -> Result<(), ApiError> {
        let team = service
            .and_then(|s| self.teams.get(runway_secrets::preview::owner(s)))
            .map(String::as_str);
        let action = Action {
            service,
            team,
            env,
            need,
        };
        runway_secrets::authorize(&self.policy, &action, Timestamp::now().unix_millis(), false)
            .map_err(|denied| match denied {
                Denied::Revoked | Denied::Expired => ApiError::unauthorized(denied.to_string()),
                other => ApiError::forbidden(other.to_string()),
            })
    }

    /// [`Caller::check`] with what the route needs: for a service the handler found.
    ///
    /// # Errors
    /// The refusal.
    pub(crate) fn allow(&self, service: &str, env: Env<'_>) -> Result<(), ApiError> {
        self.check(self.need(), Some(service), env)
    }

    /// Whether the route's need is met on `service` at `env`: what a list shows.
    pub(crate) fn shows(&self, service: &str, env: Env<'_>) -> bool {
        self.allow(service, env).is_ok()
    }

    /// What the route needs; an admin when the route said nothing (a handler called outside
    /// the gate asks the most).
    fn need(&self) -> Need {
        self.route.unwrap_or(Need::Admin)
    }

    /// Whether this token is a platform admin's.
    pub fn is_admin(&self) -> bool {
        self.policy == Scope::Admin
    }
}

impl FromRequestParts<ApiState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        match parts.extensions.get::<Self>() {
            Some(caller) => Ok(caller.clone()),
            None => authenticate(parts, state).await,
        }
    }
}

/// The caller a request's credential proves: its bearer token, or the console's session
/// cookie (a change made with which must be the console's own, see [`from_console`]).
pub(crate) async fn authenticate(parts: &Parts, state: &ApiState) -> Result<Caller, ApiError> {
    if parts.headers.get(AUTHORIZATION).is_none()
        && let Some(text) = session_cookie(&parts.headers)
    {
        if parts.method != Method::GET && parts.method != Method::HEAD {
            from_console(&parts.headers)?;
        }
        return token_caller(state, text).await;
    }
    let text = parts
        .headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .ok_or_else(|| ApiError::unauthorized(UNAUTHORIZED))?;
    caller_for(state, text).await
}

/// The caller a credential's text proves: a CI job's identity token when OIDC issuers are
/// configured and it looks like a JWT, else a Runway token.
pub(crate) async fn caller_for(state: &ApiState, text: &str) -> Result<Caller, ApiError> {
    if let Some(verifier) = &state.oidc
        && crate::oidc::looks_like_jwt(text)
    {
        return identity_caller(state, verifier, text).await;
    }
    token_caller(state, text).await
}

/// The caller a Runway token's text proves: well formed, known by its hash, neither revoked
/// nor expired. A malformed and an unknown token get the same 401.
pub(crate) async fn token_caller(state: &ApiState, text: &str) -> Result<Caller, ApiError> {
    let token =
        runway_secrets::Token::parse(text).map_err(|_| ApiError::unauthorized(UNAUTHORIZED))?;
    let hash = token.hash().as_bytes().to_vec();
    let store = Arc::clone(&state.store);
    let key = hash.clone();
    let found = tokio::task::spawn_blocking(move || store.token_by_hash(&key)).await??;
    let found = found.ok_or_else(|| ApiError::unauthorized(UNAUTHORIZED))?;
    if found.revoked_at.is_some() {
        return Err(ApiError::unauthorized(Denied::Revoked.to_string()));
    }
    if !found.is_active_at(Timestamp::now()) {
        return Err(ApiError::unauthorized(Denied::Expired.to_string()));
    }
    let expires_at = found.expires_at.map(Timestamp::unix_millis);
    // A person's roles are their teams': looked up now, so a change of a team's members holds
    // at once.
    let teams = if found.scope.is_person() {
        state.store(|s| Ok(s.team_list()?)).await?
    } else {
        Vec::new()
    };
    let admin_groups = state
        .sso
        .as_deref()
        .map_or(&[][..], crate::sso::Sso::admin_groups);
    let policy = found.scope.policy(expires_at, &teams, admin_groups);
    Ok(Caller {
        id: found.id,
        name: found.name,
        scope: found.scope,
        teams: team_services(state, &policy).await?,
        policy,
        expires_at,
        hash,
        parent: found.parent,
        fork: false,
        route: None,
    })
}

/// The team of each service owned by a team `policy` has a grant on: one look at the store,
/// only for a caller with such a grant.
async fn team_services(
    state: &ApiState,
    policy: &Scope,
) -> Result<Arc<BTreeMap<String, String>>, ApiError> {
    let teams: Vec<String> = match policy {
        Scope::Grants { grants, .. } => grants
            .iter()
            .filter_map(|g| match &g.on {
                Target::Team(team) => Some(team.clone()),
                _ => None,
            })
            .collect(),
        Scope::Admin => Vec::new(),
    };
    if teams.is_empty() {
        return Ok(Arc::default());
    }
    let services = state.store(|s| Ok(s.service_list()?)).await?;
    Ok(Arc::new(
        services
            .into_iter()
            .filter_map(|s| Some((s.name, s.team?)))
            .filter(|(_, team)| teams.contains(team))
            .collect(),
    ))
}

/// The console session's token, from the `Cookie` headers; none when absent or empty.
pub(crate) fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    cookie(headers, SESSION_COOKIE)
}

/// Cookie `name`'s value, from the `Cookie` headers; none when absent or empty.
pub(crate) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value.trim().trim_matches('"'))
        .filter(|value| !value.is_empty())
}

/// A request a browser sends with the console's cookie is the console's own: it carries
/// `X-Runway-Console: 1`, and its `Origin`, when given, is this API's (`https://` and the
/// request's `Host`). Anything else is a page on another site riding on the cookie: 403.
pub(crate) fn from_console(headers: &HeaderMap) -> Result<(), ApiError> {
    let marked = headers
        .get(CONSOLE_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() == "1");
    if !marked {
        return Err(ApiError::forbidden(
            "refused: a change made with the console's session cookie must carry the header \
             `X-Runway-Console: 1`, which only the console sends (a page on another site \
             cannot); a script or the CLI sends `Authorization: Bearer <token>` instead",
        ));
    }
    if let Some(origin) = headers.get(ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        let own = headers
            .get(HOST)
            .and_then(|v| v.to_str().ok())
            .map(|host| format!("https://{host}"));
        if own.as_deref() != Some(origin) {
            return Err(ApiError::forbidden(format!(
                "refused: a change made with the console's session cookie must come from the \
                 console's own origin ({}), not from {origin:?}",
                own.as_deref().unwrap_or("https://<this host>")
            )));
        }
    }
    Ok(())
}

/// The caller an identity token proves: its binding's role, until its `exp`. The reason for
/// a refusal goes to the server's log; the client learns only 401 or 403.
async fn identity_caller(
    state: &ApiState,
    verifier: &crate::oidc::Verifier,
    token: &str,
) -> Result<Caller, ApiError> {
    let identity = match verifier.verify(token).await {
        Ok(identity) => identity,
        Err(refusal) => {
            tracing::warn!(reason = %refusal, "identity token refused");
            return Err(match refusal {
                crate::oidc::Refusal::Unbound { .. } => {
                    ApiError::forbidden("this identity token may do nothing here")
                }
                _ => ApiError::unauthorized(UNAUTHORIZED),
            });
        }
    };
    let scope = match identity.role.grant() {
        None => TokenScope::Admin,
        Some(role) => TokenScope::Grant {
            grant: Grant {
                role,
                on: if identity.service.is_empty() {
                    Target::AnyService
                } else {
                    Target::Service(identity.service.clone())
                },
                environments: identity.environments.clone(),
            },
        },
    };
    let policy = scope.policy(Some(identity.expires_at), &[], &[]);
    Ok(Caller {
        id: 0,
        name: identity.actor(),
        scope,
        teams: team_services(state, &policy).await?,
        policy,
        expires_at: Some(identity.expires_at),
        hash: Vec::new(),
        parent: None,
        fork: identity.fork,
        route: None,
    })
}

/// Makes the first admin token, named `admin`, when the store has no admin token yet, and
/// returns its text, which exists nowhere else: the server prints it once at its first start.
/// `None` while an active (unrevoked) admin token exists; revoking every admin token and
/// restarting the server is how an operator who lost theirs gets a new one.
///
/// # Errors
/// The store fails, or the OS gives no random numbers.
pub fn bootstrap_admin(store: &dyn Store) -> Result<Option<PlaintextToken>, BootstrapError> {
    let tokens = store.token_list().map_err(BootstrapError::Store)?;
    let now = Timestamp::now();
    if tokens
        .iter()
        .any(|t| t.scope == TokenScope::Admin && t.is_active_at(now))
    {
        return Ok(None);
    }
    let (text, hash) =
        runway_secrets::Token::generate(TokenKind::Admin).map_err(BootstrapError::Token)?;
    store
        .token_create(
            "bootstrap",
            &NewToken {
                name: "admin".to_owned(),
                hash: hash.as_bytes().to_vec(),
                scope: TokenScope::Admin,
                expires_at: None,
                parent: None,
            },
        )
        .map_err(BootstrapError::Store)?;
    Ok(Some(text))
}

/// Recovers admin access for whoever can open the store (local root on the data directory):
/// revokes every active admin token and creates a new one. Returns it, with how many were
/// revoked.
///
/// # Errors
/// The store fails, or the OS gives no random numbers.
pub fn recover_admin(store: &dyn Store) -> Result<(PlaintextToken, usize), BootstrapError> {
    let now = Timestamp::now();
    let active: Vec<i64> = store
        .token_list()
        .map_err(BootstrapError::Store)?
        .into_iter()
        .filter(|t| t.scope == TokenScope::Admin && t.is_active_at(now))
        .map(|t| t.id)
        .collect();
    for id in &active {
        store
            .token_revoke("recovery", *id)
            .map_err(BootstrapError::Store)?;
    }
    let (text, hash) =
        runway_secrets::Token::generate(TokenKind::Admin).map_err(BootstrapError::Token)?;
    store
        .token_create(
            "recovery",
            &NewToken {
                name: "admin (recovered)".to_owned(),
                hash: hash.as_bytes().to_vec(),
                scope: TokenScope::Admin,
                expires_at: None,
                parent: None,
            },
        )
        .map_err(BootstrapError::Store)?;
    Ok((text, active.len()))
}

/// Why the first admin token could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The store failed.
    #[error("cannot create the admin token")]
    Store(#[source] runway_store::StoreError),
    /// No random numbers.
    #[error("cannot generate the admin token")]
    Token(#[source] runway_secrets::Error),
}
