//! Runway's control-plane API: HTTP/JSON over TLS, as `tools/api-contract.md` specifies it.
//!
//! # Routes
//!
//! | route | needs |
//! | --- | --- |
//! | `GET /healthz`, `GET /openapi.json`, the console (`GET /` → `/ui/`, `/ui/…`) | nothing |
//! | `POST /v1/session` (a token in the body, or the bearer token) | that token |
//! | `DELETE /v1/session` | the session's own token |
//! | `GET /v1/whoami`, `GET /v1/services` (a deploy token sees its own) | any token |
//! | `POST /v1/services`, `DELETE /v1/services/{service}?confirm=`, `/v1/tokens…`, `GET /v1/audit` | admin |
//! | `GET /v1/services/{service}` | read on the service |
//! | `…/environments/{env}/deployments` (POST deploys), `…/rollback`, `…/secrets/{name}` (PUT, DELETE) | write in the environment |
//! | `…/deployments` (GET), `…/revisions`, `…/status`, `…/watch`, `…/logs`, `…/secrets` (GET), `/v1/deployments/{id}…` | read in the environment |
//! | `POST /v1/services/{service}/promote` | read in `from`, write in `to` |
//!
//! The OpenAPI 3.1 document ([`openapi::openapi_json`], checked in as `openapi.json`) is
//! generated from the handlers with `utoipa`; `utoipa-axum` builds the router and the
//! document from the same list, so a route cannot be served undescribed.
//!
//! # Authentication and authorization
//!
//! `Authorization: Bearer <token>` on every route but the two public ones. The token's text
//! is checked ([`runway_secrets::Token::parse`]), looked up by hash in the store, and must be
//! neither revoked nor expired: a missing, malformed or unknown token is a 401 with one
//! message for all three. Each handler then authorizes its action with
//! [`runway_secrets::authorize`], the service and environment taken from the path: a refusal
//! is a 403. The token's name is the actor of every audit entry the store writes.
//! [`bootstrap_admin`] makes the first admin token.
//!
//! The web console ([`console`], under `/ui/`) signs in with `POST /v1/session`, which makes
//! a session token of the one given and sets it in an `HttpOnly`, `Secure`,
//! `SameSite=Strict` cookie; without an `Authorization` header that cookie is the token, and
//! a change made with it needs `X-Runway-Console: 1` and the API's own `Origin` (403 if not).
//!
//! # Errors
//!
//! Every error is `{"error": {"code", "message", "field"}}` ([`error`], the one place where
//! store, token, body and manifest errors become statuses): 400 invalid input, 401, 403,
//! 404, 409 conflict, 413 body too large, 422 invalid manifest (with `field`, e.g.
//! `manifest.spec.container_port`), 503 over the request timeout, and 500, which says only
//! "internal error" and logs its cause to stderr with the request's id (`x-request-id`).
//!
//! # Secrets
//!
//! A value is sealed ([`runway_secrets::Sealer`]) for its service, environment, name and
//! version before it reaches the store, and is never returned, listed or logged. The version
//! is the store's next one ([`runway_store::Store::secret_next_version`]); the store refuses a
//! set for any other in its transaction, so when another writer (in this process or another
//! sharing the store) took it first, the API seals again for the new next one and retries.
//! A promotion pins the target environment's latest version of each secret the source
//! revision uses, and is refused when one is not set there.
//!
//! # Serving
//!
//! ```no_run
//! # async fn run(store: std::sync::Arc<dyn runway_store::Store>,
//! #     platform: std::sync::Arc<dyn runway_api::Platform>,
//! #     sealer: runway_secrets::Sealer) -> Result<(), Box<dyn std::error::Error>> {
//! use runway_api::{ApiConfig, ApiState, router, serve, tls_config};
//! let config = ApiConfig::load("runway-server.yml".as_ref())?;
//! if let Some(token) = runway_api::bootstrap_admin(store.as_ref())? {
//!     println!("admin token (shown once): {}", token.expose());
//! }
//! let state = ApiState::new(store, platform, sealer, config.environments.clone());
//! let app = router(state, config.request_limits());
//! let tls = config.tls.enabled.then(|| tls_config(&config.ca_dir(), &config.tls.hostnames)).transpose()?;
//! let listener = tokio::net::TcpListener::bind(config.listen).await?;
//! serve(listener, app, tls, config.serve_options(), async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```
//!
//! # Files
//!
//! - `routes.rs`: the handlers. `extract.rs`: extractors whose rejections take the API's error
//!   shape. `state.rs`: what every handler shares. `types.rs`: the JSON types (the CLI uses them
//!   too, as `runway_api::types`, so the two cannot drift).
//! - `deploy.rs`: deploys and promotions, and the checks rollbacks share (the manifest
//!   validated by `runway-manifest`, the image pinned to a digest through the platform, Vault's
//!   values mirrored into the sealed store when their version changed). `platform.rs`: the
//!   `Platform` trait, what the API needs from outside the store; `runway-server` implements it.
//! - `access.rs`: the one table of what every route needs (public, signed, a role on the
//!   path's service, admin), enforced before a handler runs and served at `GET /v1/access`.
//! - `auth.rs`: bearer tokens and the console's session cookie, the first admin token and its
//!   recovery (`runway server admin-token`). `session.rs`: `POST` and `DELETE /v1/session`.
//!   `teams.rs`: teams (`/v1/teams`), whose members have a role on the services they own.
//!   `sso.rs`: single sign-on (`/v1/sso/…`) through an OpenID Connect provider, people's
//!   groups mapped to teams.
//! - `identity.rs`: the discovery document and key set of the issuer of instances' identity
//!   tokens (`/.well-known/…`), the keys read from the store.
//! - `oidc.rs`: CI identity tokens (OIDC JWTs from `api.oidc.issuers`) bound to a role;
//!   audit actor `oidc:{iss} {sub} pipeline {id}`. `vault.rs`: secrets read from OpenBao or
//!   Vault (`secrets.vault`, KV v2), signed in with a token file or a JWT auth role.
//! - `domains.rs`: custom domains (`/v1/domains`), mapped by a service's maintainer, the name
//!   checked.
//! - `registry.rs`: who may pull and push at `/v2/`, the platform registry (`runway-registry`)
//!   served beside the API: the API's tokens, a repository per service.
//! - `metrics.rs`: the API's own `/metrics` and Prometheus's HTTP service discovery
//!   (`GET /v1/prometheus/targets`). `observability.rs`: the serving revisions' rule file and
//!   dashboards (`runway-render`), served, and written by `runway server` to `observability.dir`.
//! - `console.rs`: the web console's files from `console/` (`index.html`, ES modules,
//!   `style.css`, `icon.svg`), built in, under `/ui/`. `watch.rs`: `GET …/watch`, server-sent
//!   events of what changed. `stream.rs`: a followed log as a response body.
//! - `error.rs`: the one error shape. `openapi.rs`: the OpenAPI document, checked in as
//!   `openapi.json` (a test fails on drift). `config.rs`: the configuration file. `server.rs`:
//!   the router's layers and `serve`. `tls.rs`: the server certificate from the local CA.
//! - `tests/api/`: the API on loopback over a real SQLite store and a fake platform, a module per
//!   area; the console in a real browser is `crates/runway-cli/tests/console.rs`.
//!   `benches/api.rs`: latency over SQLite and PostgreSQL. `examples/dev_server.rs`: the API on
//!   plain HTTP, to try by hand.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

pub mod access;
pub mod audit;
mod auth;
pub mod config;
pub mod console;
mod deploy;
pub mod domains;
pub mod error;
mod extract;
pub mod identity;
mod inventory;
pub mod maintenance;
pub mod metrics;
pub mod observability;
pub mod oidc;
pub mod openapi;
mod platform;
mod previews;
pub mod registry;
mod routes;
mod server;
mod session;
pub mod sso;
mod state;
mod stream;
mod teams;
mod tls;
pub mod types;
pub mod vault;
mod watch;

pub use auth::{BootstrapError, Caller, bootstrap_admin, recover_admin};
pub use config::{ApiConfig, ConfigError, LimitsConfig, TlsConfig};
pub use error::{ApiError, ErrorBody, ErrorDetail};
pub use platform::{
    BoxFuture, ImageSignature, Platform, ProcessImage, ResolvedImage, SourceRefused, StatusParts,
};
pub use server::{Limits, ServeOptions, X_REQUEST_ID, router, serve};
pub use state::ApiState;
pub use tls::{TlsSetupError, tls_config};
