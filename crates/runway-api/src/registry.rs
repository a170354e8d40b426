//! The platform registry's callers are the API's: a Runway token, or a CI job's identity token,
//! given as the password of Basic authentication (`docker login -u <anything> -p <token>`,
//! `skopeo --creds`, a Kubernetes pull secret) or as a bearer token.
//!
//! A repository belongs to the service its first component names (`<service>` or
//! `<service>/...`). An admin token pulls and pushes anywhere; a service's deploy token (or a
//! CI job's identity bound to the service) pulls and pushes under its service, whatever its
//! environments; another service's repositories are refused. `<service>/mirror/...` holds the images the server mirrored at
//! deploy: the service's tokens pull from it, and only the server writes there, so a tenant
//! cannot replace what its running revisions are made of.

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use base64::Engine as _;
use runway_registry::{Access, Authorizer, Refusal};

use crate::auth::{Caller, Read};
use crate::state::ApiState;

/// The path component, after the service's, of the repositories the server mirrors into.
pub const MIRROR: &str = "mirror";

/// The API's callers, as the registry asks about them.
#[derive(Debug, Clone)]
pub(crate) struct RegistryCallers(pub(crate) ApiState);

/// The token a request carries: the password of `Authorization: Basic`, or a bearer token.
fn credential(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, rest) = value.split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(rest.to_owned());
    }
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest)
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_, password) = text.split_once(':')?;
    Some(password.to_owned())
}

/// The refusal of `caller` for `access` to `repository`; `None` when it is allowed.
fn refusal(caller: &Caller, repository: &str, access: Access) -> Option<Refusal> {
    let mut parts = repository.split('/');
    let service = parts.next().unwrap_or_default();
    if let Err(e) = caller.allow(Read, Some(service), None) {
        return Some(Refusal::Denied(e.message().to_owned()));
    }
    if access == Access::Pull {
        return None;
    }
    if parts.next() == Some(MIRROR) {
        return Some(Refusal::Denied(format!(
            "{service}/{MIRROR}/ holds the images Runway mirrored at deploy; only Runway writes there"
        )));
    }
    None
}

impl Authorizer for RegistryCallers {
    async fn authorize(
        &self,
        headers: &HeaderMap,
        repository: Option<&str>,
        access: Access,
    ) -> Result<(), Refusal> {
        let text = credential(headers).ok_or(Refusal::Unauthenticated)?;
        let caller = crate::auth::caller_for(&self.0, &text)
            .await
            .map_err(|_| Refusal::Unauthenticated)?;
        match repository {
            None => Ok(()),
            Some(repository) => refusal(&caller, repository, access).map_or(Ok(()), Err),
        }
    }
}
