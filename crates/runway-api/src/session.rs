//! The web console's sessions: `POST /v1/session` and `DELETE /v1/session`.
//!
//! Signing in takes a Runway token (an admin's, or a service's deploy token) and checks it as
//! the bearer path does ([`crate::auth::token_caller`]). The session is then a token of its
//! own in the store, never the one typed: named `console: <token's name>`, with the same
//! scope, living until the earlier of that token's expiry and 12 hours from now, and made
//! from it (`parent`), so revoking that token (or decommissioning the service whose deploy
//! token it is) ends its sessions. Its text goes only into the `runway_session` cookie,
//! `HttpOnly` (no script reads it), `Secure`, `SameSite=Strict`; the answer's body says what
//! the session is, never its token.
//!
//! A browser may be made to send a request by any page, so a sign-in with the token in the
//! body (a browser's) must be the console's own ([`crate::auth::from_console`]): otherwise
//! another site could sign a visitor in as someone else. Signing out revokes the session's
//! token and clears the cookie. An identity token (OIDC) opens no session: it is a CI job's,
//! short-lived and bound to a pipeline.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use runway_secrets::TokenKind;
use runway_store::{NewToken, Timestamp, TokenScope};

use crate::auth::{Caller, SESSION_COOKIE, UNAUTHORIZED, from_console, token_caller};
use crate::error::{ApiError, ApiResult};
use crate::extract::Json;
use crate::state::ApiState;
use crate::types::{CreateSession, ScopeView, SessionView};

/// The longest a console session lives: 12 hours.
pub(crate) const SESSION_MILLIS: i64 = 12 * 3600 * 1000;

/// Opens a console session: checks the token (in the body, or the bearer token), makes a
/// session token from it, and sets it in the `runway_session` cookie (`HttpOnly; Secure;
/// SameSite=Strict`). A token in the body needs `X-Runway-Console: 1` and, when the browser
/// sends `Origin`, this API's own. 400 for an identity token (OIDC) or a session's own token.
#[utoipa::path(post, path = "/v1/session", request_body = Option<CreateSession>,
    responses((status = 201, body = SessionView,
        headers(("set-cookie" = String,
            description = "`runway_session=<token>; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=<seconds>`")))))]
pub(crate) async fn create_session(
    state: axum::extract::State<ApiState>,
    headers: HeaderMap,
    Json(body): Json<CreateSession>,
) -> ApiResult<Response> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    let typed = body
        .token
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let text = typed
        .or(bearer)
        .ok_or_else(|| ApiError::unauthorized(UNAUTHORIZED))?;
    // A request with no Authorization header is a browser's: it may be another site's.
    if headers.get(header::AUTHORIZATION).is_none() {
        from_console(&headers)?;
    }
    if crate::oidc::looks_like_jwt(text) {
        return Err(ApiError::invalid(
            "an identity token (OIDC) cannot open a console session: sign in with a Runway \
             token (`runway_admin_…` or `runway_deploy_…`)",
        )
        .field("token"));
    }
    let parent = token_caller(&state, text).await?;
    if parent.parent.is_some() {
        return Err(ApiError::invalid(
            "this is a console session's own token: sign in with the token it was made from",
        )
        .field("token"));
    }
    let now = Timestamp::now();
    let longest = now.add_millis(SESSION_MILLIS).unix_millis();
    let expires_millis = parent.expires_at.map_or(longest, |at| at.min(longest));
    let expires_at = Timestamp::from_unix_millis(expires_millis)
        .ok_or_else(|| ApiError::internal("a session's expiry is out of range"))?;
    let kind = match &parent.scope {
        TokenScope::Admin => TokenKind::Admin,
        TokenScope::Deploy { .. } | TokenScope::Grant { .. } | TokenScope::Person { .. } => {
            TokenKind::Deploy
        }
    };
    let (token, hash) = runway_secrets::Token::generate(kind)
        .map_err(|e| ApiError::internal(format!("generating a session token: {e}")))?;
    let new = NewToken {
        name: format!("console: {}", parent.name),
        hash: hash.as_bytes().to_vec(),
        scope: parent.scope.clone(),
        expires_at: Some(expires_at),
        parent: Some(parent.id),
    };
    let actor = parent.name.clone();
    let created = state
        .store(move |s| Ok(s.token_create(&actor, &new)?))
        .await?;
    let seconds = (expires_millis - now.unix_millis()).max(0) / 1000;
    let cookie = HeaderValue::from_str(&set_cookie(&token, seconds))
        .map_err(|_| ApiError::internal("a session token is not a header value"))?;
    let view = SessionView {
        token_id: created.id,
        name: created.name,
        scope: ScopeView::from(&created.scope),
        parent: parent.id,
        expires_at: expires_at.to_string(),
    };
    Ok((
        StatusCode::CREATED,
        [(header::SET_COOKIE, cookie)],
        axum::Json(view),
    )
        .into_response())
}

/// Ends the console session making the request: revokes its token and clears the cookie.
/// 400 for a token that is not a session's (revoke a token with `DELETE /v1/tokens/{id}`).
#[utoipa::path(delete, path = "/v1/session",
    responses((status = 204, description = "Signed out",
        headers(("set-cookie" = String, description = "`runway_session=` with `Max-Age=0`")))))]
pub(crate) async fn end_session(
    caller: Result<Caller, ApiError>,
    state: axum::extract::State<ApiState>,
) -> Response {
    let caller = match caller {
        Ok(caller) => caller,
        Err(refused) => {
            let forget = refused.status() == StatusCode::UNAUTHORIZED;
            let mut response = refused.into_response();
            // A session that no longer works is forgotten by the browser too.
            if forget {
                response.headers_mut().insert(header::SET_COOKIE, cleared());
            }
            return response;
        }
    };
    // A console session is made from a token, or by signing in (single sign-on).
    let session = caller.parent.is_some() && caller.name.starts_with("console: ");
    if !session && !caller.scope.is_person() {
        return ApiError::invalid(
            "this token is not a console session: DELETE /v1/session ends the session the \
             console signed in with; revoke a token with DELETE /v1/tokens/{id}",
        )
        .into_response();
    }
    let (actor, id) = (caller.name.clone(), caller.id);
    match state.store(move |s| Ok(s.token_revoke(&actor, id)?)).await {
        Ok(_) => (StatusCode::NO_CONTENT, [(header::SET_COOKIE, cleared())]).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The `Set-Cookie` that gives a browser a session: `token` for `seconds`, no script to read
/// it, sent to this origin alone.
pub(crate) fn set_cookie(token: &runway_secrets::PlaintextToken, seconds: i64) -> String {
    format!(
        "{SESSION_COOKIE}={}; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age={seconds}",
        token.expose()
    )
}

/// The `Set-Cookie` that makes a browser forget the session.
fn cleared() -> HeaderValue {
    HeaderValue::from_static(
        "runway_session=; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=0",
    )
}
