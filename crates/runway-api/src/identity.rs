//! The discovery document and key set of the issuer of instances' identity tokens
//! (`runway_control::identity`): what OpenBao's or Vault's JWT auth, or a cloud's workload
//! identity federation, reads to check a token. Public, as an OpenID Connect provider's are;
//! the keys come from the store, so every replica serves the same set.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{ApiError, ApiResult};
use crate::state::ApiState;

/// Where the key set is, under the issuer's URL.
pub const JWKS_PATH: &str = "/.well-known/jwks.json";

/// The issuer's OpenID Connect discovery document (the parts a relying party of an
/// identity token reads).
#[derive(Debug, Serialize, ToSchema)]
pub struct Discovery {
    /// The tokens' `iss`.
    pub issuer: String,
    /// The key set's URL.
    pub jwks_uri: String,
    /// Always `["id_token"]`: tokens are issued to instances, not through a browser.
    pub response_types_supported: Vec<String>,
    /// Always `["public"]`.
    pub subject_types_supported: Vec<String>,
    /// Always `["ES256"]`.
    pub id_token_signing_alg_values_supported: Vec<String>,
    /// The claims a token carries.
    pub claims_supported: Vec<String>,
}

/// The issuer's public keys, JSON Web Keys (RFC 7517).
#[derive(Debug, Serialize, ToSchema)]
pub struct KeySet {
    /// Each key: `kty` `EC`, `crv` `P-256`, `x`, `y`, `kid`, `use` `sig`, `alg` `ES256`.
    #[schema(value_type = Vec<Object>)]
    pub keys: Vec<serde_json::Value>,
}

fn issuer(state: &ApiState) -> ApiResult<&str> {
    state.identity_issuer.as_deref().ok_or_else(|| {
        ApiError::not_found("this server issues no identity tokens (identity.enabled: false)")
    })
}

/// The identity tokens' issuer: its discovery document. 404 when none are issued.
#[utoipa::path(get, path = "/.well-known/openid-configuration", security(()),
    responses((status = 200, body = Discovery),
        (status = 404, description = "No identity tokens are issued here", body = crate::error::ErrorBody)))]
pub(crate) async fn discovery(State(state): State<ApiState>) -> ApiResult<Json<Discovery>> {
    let issuer = issuer(&state)?;
    let strings = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect();
    Ok(Json(Discovery {
        issuer: issuer.to_owned(),
        jwks_uri: format!("{issuer}{JWKS_PATH}"),
        response_types_supported: strings(&["id_token"]),
        subject_types_supported: strings(&["public"]),
        id_token_signing_alg_values_supported: strings(&["ES256"]),
        claims_supported: strings(&[
            "iss", "sub", "aud", "iat", "nbf", "exp", "jti", "service", "env", "revision",
        ]),
    }))
}

/// The identity tokens' issuer: its public keys, those that sign now and those whose tokens
/// may still be valid. 404 when none are issued.
#[utoipa::path(get, path = "/.well-known/jwks.json", security(()),
    responses((status = 200, body = KeySet),
        (status = 404, description = "No identity tokens are issued here", body = crate::error::ErrorBody)))]
pub(crate) async fn jwks(State(state): State<ApiState>) -> ApiResult<Json<KeySet>> {
    issuer(&state)?;
    let now = runway_store::Timestamp::now();
    let keys = state.store(move |s| Ok(s.identity_keys(now)?)).await?;
    let keys = keys
        .iter()
        .filter_map(|k| serde_json::from_str(&k.public_jwk).ok())
        .collect();
    Ok(Json(KeySet { keys }))
}
