//! Who may call what: every route of the API and the console, with the role it needs, in one
//! table ([`ROUTES`]), which [`gate`] enforces before a handler runs and the API's tests walk
//! with every role. A route the table does not name is refused (500) rather than let through.
//!
//! - **Public** routes take no credential (health, the document, the console's pages, and
//!   signing in, whose credential is in the body).
//! - **Signed** routes take any valid credential and answer for the caller alone (who am I,
//!   signing out).
//! - A **role** on a service: the service named in the path, in the path's environment (or
//!   the one the table names, or the service as a whole). Where the service is not in the
//!   path, the handler finds it (a deployment's, a token's, a domain's, the body's) and checks
//!   the same role there ([`On::Found`]); a list shows only the items the caller has the role
//!   on ([`On::Each`]).
//! - **Admin**: platform actions.
//!
//! The registry (`/v2/`) follows [`REGISTRY`]: pulling a service's repository needs `viewer`
//! on it, pushing `deployer` in some environment.

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use runway_secrets::{Env, Need, Role};
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::state::ApiState;

/// What a route needs of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Needs {
    /// Nothing: no credential.
    Public,
    /// Any valid credential.
    Signed,
    /// Reading a service.
    Viewer,
    /// Deploying it.
    Deployer,
    /// Its secrets, tokens and domains.
    Maintainer,
    /// A platform admin.
    Admin,
}

impl Needs {
    /// What the policy checks, for a role or admin.
    pub(crate) fn policy(self) -> Option<Need> {
        match self {
            Self::Public | Self::Signed => None,
            Self::Viewer => Some(Need::Role(Role::Viewer)),
            Self::Deployer => Some(Need::Role(Role::Deployer)),
            Self::Maintainer => Some(Need::Role(Role::Maintainer)),
            Self::Admin => Some(Need::Admin),
        }
    }
}

/// Where the service and environment a route's role is checked on come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum On {
    /// The platform: no one service (an admin route, or a role on every service).
    Platform,
    /// The path's `{service}` in the path's `{env}`.
    PathEnv,
    /// The path's `{service}` as a whole.
    PathService,
    /// The path's `{service}` in its previews' environment.
    PathPreviews,
    /// The path's `{service}`, in some environment: the handler checks each environment the
    /// body names.
    PathSomeEnv,
    /// A service the handler finds (a deployment's, a token's, a domain's, the body's).
    Found,
    /// Each item of a list, shown when the caller has the role on its service.
    Each,
}

/// One route: its method, its path as the router has it, and what it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct RouteAccess {
    /// `GET`, `POST`...
    pub method: &'static str,
    /// `/v1/services/{service}`...
    pub path: &'static str,
    /// What its caller needs.
    pub needs: Needs,
    /// On what.
    pub on: On,
}

const fn route(method: &'static str, path: &'static str, needs: Needs, on: On) -> RouteAccess {
    RouteAccess {
        method,
        path,
        needs,
        on,
    }
}

macro_rules! env_route {
    ($method:literal, $rest:literal, $needs:ident) => {
        route(
            $method,
            concat!("/v1/services/{service}/environments/{env}", $rest),
            Needs::$needs,
            On::PathEnv,
        )
    };
}

use Needs::{Admin, Deployer, Maintainer, Public, Signed, Viewer};
use On::{Each, Found, PathPreviews, PathService, PathSomeEnv, Platform};

/// Every route of the API and the console, and what it needs.
pub const ROUTES: &[RouteAccess] = &[
    route("GET", "/healthz", Public, Platform),
    route("GET", "/metrics", Public, Platform),
    route("GET", "/openapi.json", Public, Platform),
    route("GET", "/v1/access", Public, Platform),
    route("GET", "/", Public, Platform),
    route("GET", "/ui", Public, Platform),
    route("GET", "/ui/", Public, Platform),
    route("GET", "/ui/{*path}", Public, Platform),
    route("POST", "/v1/session", Public, Platform),
    // Single sign-on: the provider, not a token, says who signs in.
    route("GET", "/.well-known/openid-configuration", Public, Platform),
    route("GET", "/.well-known/jwks.json", Public, Platform),
    route("GET", "/v1/sso", Public, Platform),
    route("GET", "/v1/sso/login", Public, Platform),
    route("GET", "/v1/sso/callback", Public, Platform),
    route("POST", "/v1/sso/cli", Public, Platform),
    route("POST", "/v1/sso/token", Public, Platform),
    // Signing out answers a session that no longer works by clearing its cookie: the
    // handler authenticates.
    route("DELETE", "/v1/session", Public, Platform),
    route("GET", "/v1/whoami", Signed, Platform),
    route("GET", "/v1/prometheus/targets", Admin, Platform),
    route("GET", "/v1/observability/rules", Admin, Platform),
    route("GET", "/v1/traffic", Viewer, Each),
    route("GET", "/v1/services", Viewer, Each),
    route("POST", "/v1/services", Admin, Platform),
    route("GET", "/v1/services/{service}", Viewer, PathService),
    route("PATCH", "/v1/services/{service}", Admin, Platform),
    route("DELETE", "/v1/services/{service}", Admin, Platform),
    route(
        "GET",
        "/v1/services/{service}/dashboard",
        Viewer,
        PathService,
    ),
    route(
        "POST",
        "/v1/services/{service}/promote",
        Deployer,
        PathSomeEnv,
    ),
    route(
        "GET",
        "/v1/services/{service}/previews",
        Viewer,
        PathPreviews,
    ),
    route(
        "DELETE",
        "/v1/services/{service}/previews/{name}",
        Deployer,
        PathPreviews,
    ),
    route("GET", "/v1/previews", Viewer, Each),
    env_route!("GET", "/deployments", Viewer),
    // A deploy in the path's environment, or a preview (the body's `preview`) in theirs: the
    // handler checks which.
    route(
        "POST",
        "/v1/services/{service}/environments/{env}/deployments",
        Deployer,
        PathSomeEnv,
    ),
    env_route!("GET", "/revisions", Viewer),
    env_route!("GET", "/status", Viewer),
    env_route!("GET", "/logs", Viewer),
    env_route!("GET", "/watch", Viewer),
    env_route!("GET", "/sources/{digest}", Deployer),
    env_route!("PUT", "/sources/{digest}", Deployer),
    env_route!("POST", "/rollback", Deployer),
    env_route!("POST", "/rollout", Deployer),
    env_route!("POST", "/variables", Deployer),
    env_route!("GET", "/maintenance", Viewer),
    env_route!("PUT", "/maintenance", Maintainer),
    env_route!("DELETE", "/maintenance", Maintainer),
    env_route!("GET", "/secrets", Viewer),
    env_route!("PUT", "/secrets/{name}", Maintainer),
    env_route!("DELETE", "/secrets/{name}", Maintainer),
    route("GET", "/v1/deployments/{id}", Viewer, Found),
    route("GET", "/v1/deployments/{id}/events", Viewer, Found),
    route("GET", "/v1/tokens", Maintainer, Each),
    route("POST", "/v1/tokens", Maintainer, Found),
    route("DELETE", "/v1/tokens/{id}", Maintainer, Found),
    route("GET", "/v1/domains", Viewer, Each),
    route("POST", "/v1/domains", Maintainer, Found),
    route("DELETE", "/v1/domains/{domain}", Maintainer, Found),
    route("GET", "/v1/teams", Viewer, Each),
    route("GET", "/v1/teams/{team}", Viewer, Found),
    route("PUT", "/v1/teams/{team}", Admin, Platform),
    route("DELETE", "/v1/teams/{team}", Admin, Platform),
    route("GET", "/v1/audit", Admin, Platform),
    route("GET", "/v1/audit/verify", Admin, Platform),
    route("GET", "/v1/audit/export", Admin, Platform),
    // Validating and comparing a document reads every service; applying it is the handler's
    // check, an admin's.
    route("POST", "/v1/inventory", Viewer, Platform),
];

/// What the registry's actions need, on the repository's service (its first path segment).
pub const REGISTRY: &[(&str, Needs)] = &[("pull", Viewer), ("push", Deployer)];

/// The table's entry for a route.
pub(crate) fn find(method: &str, path: &str) -> Option<&'static RouteAccess> {
    ROUTES
        .iter()
        .find(|r| r.method.eq_ignore_ascii_case(method) && r.path == path)
}

/// Every route and what it needs: the table the gate enforces, for the console (which shows
/// only the actions its user may take) and for scripts.
#[utoipa::path(get, path = "/v1/access", responses((status = 200, body = Vec<RouteAccess>)))]
pub(crate) async fn access_table() -> axum::Json<&'static [RouteAccess]> {
    axum::Json(ROUTES)
}

/// Checks a request against [`ROUTES`] before its handler runs: authenticates it unless its
/// route is public, checks the route's role where the path names the service, and leaves the
/// [`Caller`] (with the route's need, for the handler's own checks) in its extensions.
pub(crate) async fn gate(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    match admit(&state, req).await {
        Ok(req) => next.run(req).await,
        Err(refusal) => refusal.into_response(),
    }
}

async fn admit(state: &ApiState, req: Request) -> Result<Request, ApiError> {
    let (mut parts, body) = req.into_parts();
    let path = parts
        .extensions
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let Some(entry) = find(parts.method.as_str(), &path) else {
        tracing::error!(method = %parts.method, %path, "a route with no entry in the access table");
        return Err(ApiError::internal(format!(
            "{} {path} has no entry in the access table: refused",
            parts.method
        )));
    };
    if entry.needs == Public {
        return Ok(Request::from_parts(parts, body));
    }
    let mut caller = crate::auth::authenticate(&parts, state).await?;
    caller.route = entry.needs.policy();
    if let Some(need) = entry.needs.policy() {
        let params = RawPathParams::from_request_parts(&mut parts, state)
            .await
            .map_err(|_| ApiError::invalid("the path is not valid UTF-8 once decoded"))?;
        let param = |name: &str| {
            params
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_owned())
        };
        let service = param("service");
        let env = param("env");
        // A route that names its service in the table but not in its path is refused, never
        // let through unchecked.
        let missing = |name: &str| {
            ApiError::internal(format!(
                "{} {path} has no {{{name}}} for the access table's check: refused",
                parts.method
            ))
        };
        let on_path = || service.as_deref().ok_or_else(|| missing("service"));
        match entry.on {
            On::Platform => caller.check(need, None, Env::Whole)?,
            On::PathEnv => {
                let env = env.as_deref().ok_or_else(|| missing("env"))?;
                caller.check(need, Some(on_path()?), Env::One(env))?;
            }
            On::PathService => caller.check(need, Some(on_path()?), Env::Whole)?,
            On::PathPreviews => caller.check(
                need,
                Some(on_path()?),
                Env::One(runway_secrets::preview::ENVIRONMENT),
            )?,
            On::PathSomeEnv => caller.check(need, Some(on_path()?), Env::Any)?,
            // The handler checks the services it finds.
            On::Found | On::Each => {}
        }
    }
    parts.extensions.insert(caller);
    Ok(Request::from_parts(parts, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_route_is_named_once() {
        let mut seen = std::collections::BTreeSet::new();
        for r in ROUTES {
            assert!(
                seen.insert((r.method, r.path)),
                "{} {} twice",
                r.method,
                r.path
            );
        }
        assert!(find("get", "/v1/services").is_some());
        assert!(find("GET", "/v1/nothing").is_none());
    }
}
