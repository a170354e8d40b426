//! Authentication and authorization.
//!
//! [`Caller`] is an extractor: `Authorization: Bearer <token>` → [`Token::parse`] (prefix,
//! length, checksum) → the store's lookup by hash → not revoked, not expired. Every failure
//! before the lookup and an unknown token give the same 401, so a caller cannot tell a
//! malformed token from one the server does not know. Each handler then asks
//! [`Caller::allow`] for its route's action, with the service and environment from the
//! path; a refusal is a 403 from [`runway_secrets::authorize`].

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use runway_secrets::{Action, ActionKind, Denied, PlaintextToken, Scope, TokenKind};
use runway_store::{NewToken, Store, Timestamp, TokenScope};

use crate::error::ApiError;
use crate::state::ApiState;

/// The one message for a missing, malformed or unknown token.
const UNAUTHORIZED: &str = "missing or invalid token: send `Authorization: Bearer <token>`";

/// The authenticated token behind a request.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's id.
    pub id: i64,
    /// The token's name: the actor in the audit log.
    pub name: String,
    /// What it allows, as the store keeps it.
    pub scope: TokenScope,
    expires_at: Option<i64>,
}

impl Caller {
    /// The token's name, as the audit log's actor.
    pub fn actor(&self) -> &str {
        &self.name
    }

    /// Whether this token may act on `service` (or across services) in `env` (or the whole
    /// service): 403 if not.
    ///
    /// # Errors
    /// The refusal, as a 403.
    pub fn allow(
        &self,
        kind: ActionKind,
        service: Option<&str>,
        env: Option<&str>,
    ) -> Result<(), ApiError> {
        let scope = match &self.scope {
            TokenScope::Admin => Scope::Admin,
            TokenScope::Deploy {
                service,
                environments,
            } => Scope::Deploy {
                service: service.clone(),
                environments: environments.clone(),
                expires_at: self.expires_at,
            },
        };
        let action = Action { service, env, kind };
        runway_secrets::authorize(&scope, &action, Timestamp::now().unix_millis(), false).map_err(
            |denied| match denied {
                Denied::Revoked | Denied::Expired => ApiError::unauthorized(denied.to_string()),
                other => ApiError::forbidden(other.to_string()),
            },
        )
    }

    /// Whether this token is an admin token.
    pub fn is_admin(&self) -> bool {
        matches!(self.scope, TokenScope::Admin)
    }
}

impl FromRequestParts<ApiState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
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
        if let Some(verifier) = &state.oidc
            && crate::oidc::looks_like_jwt(text)
        {
            return identity_caller(verifier, text).await;
        }
        let token =
            runway_secrets::Token::parse(text).map_err(|_| ApiError::unauthorized(UNAUTHORIZED))?;
        let hash = token.hash().as_bytes().to_vec();
        let store = Arc::clone(&state.store);
        let found = tokio::task::spawn_blocking(move || store.token_by_hash(&hash)).await??;
        let found = found.ok_or_else(|| ApiError::unauthorized(UNAUTHORIZED))?;
        if found.revoked_at.is_some() {
            return Err(ApiError::unauthorized(Denied::Revoked.to_string()));
        }
        if !found.is_active_at(Timestamp::now()) {
            return Err(ApiError::unauthorized(Denied::Expired.to_string()));
        }
        Ok(Caller {
            id: found.id,
            name: found.name,
            scope: found.scope,
            expires_at: found.expires_at.map(Timestamp::unix_millis),
        })
    }
}

/// The caller an identity token proves: a deploy scope from its binding, until its `exp`.
/// The reason for a refusal goes to the server's log; the client learns only 401 or 403.
async fn identity_caller(
    verifier: &crate::oidc::Verifier,
    token: &str,
) -> Result<Caller, ApiError> {
    match verifier.verify(token).await {
        Ok(identity) => Ok(Caller {
            id: 0,
            name: identity.actor(),
            scope: TokenScope::Deploy {
                service: identity.service.clone(),
                environments: identity.environments.clone(),
            },
            expires_at: Some(identity.expires_at),
        }),
        Err(refusal) => {
            tracing::warn!(reason = %refusal, "identity token refused");
            Err(match refusal {
                crate::oidc::Refusal::Unbound { .. } => {
                    ApiError::forbidden("this identity token may do nothing here")
                }
                _ => ApiError::unauthorized(UNAUTHORIZED),
            })
        }
    }
}

/// Read, write or admin: shorthand for handlers.
pub(crate) use ActionKind::{Admin, Read, Write};

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
