//! The control plane's HTTP API as the CLI sees it: the API's own request and response types
//! ([`runway_api::types`], from which `openapi.json` is generated), one [`Client`] with a
//! method per route, and one error type, [`ApiError`].
//!
//! One model, so the CLI and the server cannot drift apart. Responses ignore fields they do not
//! know, so a newer server's added fields do not break an older CLI; a new enum value would,
//! and within `/v1` the API adds none.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// How long one request may take, connection included (not a followed log stream).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long uploading a code snapshot may take (the server's own bound is the same).
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(600);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

use runway_api::ErrorBody;
pub(crate) use runway_api::types::{
    AddDomain, AdminScope, AuditEntryView, CreateService, CreateToken, CreatedToken,
    Decommissioned, DeployRequest, DeploymentEventView, DeploymentStateView, DeploymentView,
    DomainView, GrantView, InventoryPlan, InventoryRequest, LogLine, MaintenanceView, PreviewView,
    PromoteRequest, PutTeam, RevisionView, RoleName, RollbackRequest, RolloutCommandView,
    RolloutRequest, ScopeView, SecretInfoView, ServiceView, SetMaintenance, SetSecret,
    SetVariables, StatusView, TeamMemberView, TeamView, TokenInfo, UpdateService, WhoAmI,
};

/// Everything that can go wrong talking to the server.
#[derive(Debug)]
pub(crate) enum ApiError {
    /// The server answered with an error.
    Api {
        status: StatusCode,
        code: String,
        message: String,
        field: Option<String>,
    },
    /// The server could not be reached (or the connection broke).
    Connect { server: String, reason: String },
    /// The server's answer was not what the contract says.
    Decode { what: String, reason: String },
    /// The client's own settings are unusable (server URL, CA file).
    Config { reason: String },
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Api {
                status,
                code,
                message,
                field,
            } => {
                let message = if message.is_empty() {
                    status.canonical_reason().unwrap_or("error")
                } else {
                    message
                };
                write!(f, "{message}")?;
                match field.as_deref() {
                    // Request fields the CLI fills from a flag of the same name.
                    Some(flag @ ("image" | "pause" | "preview")) => {
                        write!(f, " (flag `--{flag}`)")?;
                    }
                    Some(field) => write!(f, " (field `{field}`)")?,
                    None => {}
                }
                let code = if code.is_empty() { "error" } else { code };
                write!(f, " [{} {code}]", status.as_u16())?;
                if *status == StatusCode::UNAUTHORIZED {
                    write!(
                        f,
                        "; the token was refused: run `runway login` with a valid one"
                    )?;
                }
                Ok(())
            }
            Self::Connect { server, reason } => write!(
                f,
                "cannot reach the Runway server at {server}: {reason}; check the address, or run `runway login --server URL --token -`"
            ),
            Self::Decode { what, reason } => {
                write!(f, "unexpected answer from the server to {what}: {reason}")
            }
            Self::Config { reason } => write!(f, "{reason}"),
        }
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    /// The server answered 404.
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, Self::Api { status, .. } if *status == StatusCode::NOT_FOUND)
    }

    /// The server answered with this error code.
    pub(crate) fn has_code(&self, wanted: &str) -> bool {
        matches!(self, Self::Api { code, .. } if code == wanted)
    }
}

/// Parses and checks a server URL: HTTPS, or plain HTTP on a loopback address only (tests and
/// local use), so that a token never crosses a network in clear text.
pub(crate) fn server_url(text: &str) -> Result<Url, ApiError> {
    let bad = |reason: String| ApiError::Config { reason };
    let mut url =
        Url::parse(text.trim()).map_err(|e| bad(format!("invalid server URL `{text}`: {e}")))?;
    match url.scheme() {
        "https" => {}
        "http" => {
            let host = url.host_str().unwrap_or_default();
            let ip = host.trim_start_matches('[').trim_end_matches(']');
            let loopback = host == "localhost"
                || ip
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            if !loopback {
                return Err(bad(format!(
                    "the server URL `{text}` is plain HTTP: use https:// (plain HTTP is allowed only on localhost)"
                )));
            }
        }
        other => {
            return Err(bad(format!(
                "the server URL `{text}` has scheme `{other}`: use https://"
            )));
        }
    }
    if url.cannot_be_a_base() || url.host().is_none() {
        return Err(bad(format!("the server URL `{text}` has no host")));
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    url.set_query(None);
    url.set_fragment(None);
    Ok(url)
}

/// A client of one server with one token.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    base: Url,
    token: String,
    http: reqwest::Client,
}

impl Client {
    /// A client of `server` (see [`server_url`]) trusting `ca` (a PEM file) and nothing else
    /// when given, else the system's roots.
    pub(crate) fn new(server: &str, token: &str, ca: Option<&Path>) -> Result<Self, ApiError> {
        let base = server_url(server)?;
        // reqwest is built without a bundled crypto provider: ring, as for image pulls.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("runway/", env!("CARGO_PKG_VERSION")));
        if let Some(ca) = ca {
            let pem = std::fs::read(ca).map_err(|e| ApiError::Config {
                reason: format!("cannot read the CA file {}: {e}", ca.display()),
            })?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ApiError::Config {
                    reason: format!("the CA file {} holds no PEM certificate: {e}", ca.display()),
                })?;
            if certs.is_empty() {
                return Err(ApiError::Config {
                    reason: format!("the CA file {} holds no PEM certificate", ca.display()),
                });
            }
            builder = builder.tls_certs_only(certs);
        }
        let http = builder.build().map_err(|e| ApiError::Config {
            reason: format!("cannot set up the HTTP client: {}", runway_log::chain(&e)),
        })?;
        Ok(Self {
            base,
            token: token.to_owned(),
            http,
        })
    }

    /// The server's URL, as shown in messages.
    pub(crate) fn server(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    /// `segments` percent-encoded onto the base, with `query`.
    fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        if !query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (key, value) in query {
                pairs.append_pair(key, value);
            }
        }
        url
    }

    fn connect_error(&self, error: &reqwest::Error) -> ApiError {
        let mut reason = runway_log::chain(error);
        // A certificate no trusted authority signed: a `runway server`'s own, most likely.
        if reason.contains("UnknownIssuer") || reason.contains("unknown issuer") {
            reason.push_str(
                " (a `runway server` signs its certificate with its own authority: trust it \
                 with `--ca <data-dir>/ca/ca.pem`, as the server printed at its first start)",
            );
        }
        ApiError::Connect {
            server: self.server().to_owned(),
            reason,
        }
    }

    /// Sends a request and returns the successful response, or the server's error.
    async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<(Vec<u8>, &'static str)>,
        timeout: Option<Duration>,
    ) -> Result<reqwest::Response, ApiError> {
        let mut request = self
            .http
            .request(method, url)
            .header(reqwest::header::ACCEPT, "application/json");
        // Signing in (single sign-on) is done with no token yet.
        if !self.token.is_empty() {
            request = request.bearer_auth(&self.token);
        }
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        if let Some((body, content_type)) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(body);
        }
        let response = request.send().await.map_err(|e| self.connect_error(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let bytes = response.bytes().await.unwrap_or_default();
        Err(match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(body) => ApiError::Api {
                status,
                code: body.error.code,
                message: body.error.message,
                field: body.error.field,
            },
            Err(_) => ApiError::Api {
                status,
                code: String::new(),
                message: String::from_utf8_lossy(&bytes)
                    .chars()
                    .take(200)
                    .collect::<String>()
                    .trim()
                    .to_owned(),
                field: None,
            },
        })
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<&impl Serialize>,
    ) -> Result<T, ApiError> {
        let what = format!("{method} {}", url.path());
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| ApiError::Config {
                reason: format!("cannot encode the request: {e}"),
            })?;
        let body = body.map(|b| (b, "application/json"));
        let response = self.send(method, url, body, Some(REQUEST_TIMEOUT)).await?;
        let bytes = response.bytes().await.map_err(|e| self.connect_error(&e))?;
        serde_json::from_slice(&bytes).map_err(|e| ApiError::Decode {
            what,
            reason: e.to_string(),
        })
    }

    async fn get<T: DeserializeOwned>(&self, url: Url) -> Result<T, ApiError> {
        self.call(Method::GET, url, None::<&()>).await
    }

    /// `POST /v1/tokens`: a new token; its text is in the answer, once.
    pub(crate) async fn create_token(
        &self,
        request: &CreateToken,
    ) -> Result<CreatedToken, ApiError> {
        self.call(
            Method::POST,
            self.url(&["v1", "tokens"], &[]),
            Some(request),
        )
        .await
    }

    /// `GET /v1/tokens`.
    pub(crate) async fn tokens(&self) -> Result<Vec<TokenInfo>, ApiError> {
        self.get(self.url(&["v1", "tokens"], &[])).await
    }

    /// `POST /v1/sso/token`: a sign-in's one-time code and the verifier it was started with,
    /// for a session's token.
    pub(crate) async fn redeem_sso(
        &self,
        code: &runway_api::sso::RedeemCode,
    ) -> Result<runway_api::sso::SsoSession, ApiError> {
        self.call(
            Method::POST,
            self.url(&["v1", "sso", "token"], &[]),
            Some(code),
        )
        .await
    }

    /// `GET /v1/teams`.
    pub(crate) async fn teams(&self) -> Result<Vec<TeamView>, ApiError> {
        self.get(self.url(&["v1", "teams"], &[])).await
    }

    /// `GET /v1/teams/{team}`.
    pub(crate) async fn team(&self, name: &str) -> Result<TeamView, ApiError> {
        self.get(self.url(&["v1", "teams", name], &[])).await
    }

    /// `PUT /v1/teams/{team}`: makes it, or replaces its members.
    pub(crate) async fn put_team(&self, name: &str, team: &PutTeam) -> Result<TeamView, ApiError> {
        self.call(
            Method::PUT,
            self.url(&["v1", "teams", name], &[]),
            Some(team),
        )
        .await
    }

    /// `DELETE /v1/teams/{team}`.
    pub(crate) async fn delete_team(&self, name: &str) -> Result<(), ApiError> {
        let url = self.url(&["v1", "teams", name], &[]);
        self.send(Method::DELETE, url, None, Some(REQUEST_TIMEOUT))
            .await
            .map(drop)
    }

    /// `DELETE /v1/tokens/{id}`: revokes it.
    pub(crate) async fn revoke_token(&self, id: &str) -> Result<TokenInfo, ApiError> {
        self.call(
            Method::DELETE,
            self.url(&["v1", "tokens", id], &[]),
            None::<&()>,
        )
        .await
    }

    /// `GET /v1/domains`.
    pub(crate) async fn domains(&self) -> Result<Vec<DomainView>, ApiError> {
        self.get(self.url(&["v1", "domains"], &[])).await
    }

    /// `POST /v1/domains`: routes a domain to a service's environment.
    pub(crate) async fn add_domain(&self, request: &AddDomain) -> Result<DomainView, ApiError> {
        let url = self.url(&["v1", "domains"], &[]);
        self.call(Method::POST, url, Some(request)).await
    }

    /// `DELETE /v1/domains/{domain}`.
    pub(crate) async fn remove_domain(&self, domain: &str) -> Result<(), ApiError> {
        let url = self.url(&["v1", "domains", domain], &[]);
        self.send(Method::DELETE, url, None, Some(REQUEST_TIMEOUT))
            .await
            .map(drop)
    }

    /// `GET …/maintenance`: the service's maintenance in `env`, `None` when it is not in it.
    pub(crate) async fn maintenance(
        &self,
        service: &str,
        env: &str,
    ) -> Result<Option<MaintenanceView>, ApiError> {
        match self
            .get(self.env_url(service, env, &["maintenance"], &[]))
            .await
        {
            Ok(found) => Ok(Some(found)),
            // A missing service or environment is another 404 (`not_found`), said so.
            Err(error) if error.has_code(runway_api::maintenance::NOT_IN_MAINTENANCE) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// `PUT …/maintenance`.
    pub(crate) async fn set_maintenance(
        &self,
        service: &str,
        env: &str,
        request: &SetMaintenance,
    ) -> Result<MaintenanceView, ApiError> {
        let url = self.env_url(service, env, &["maintenance"], &[]);
        self.call(Method::PUT, url, Some(request)).await
    }

    /// `DELETE …/maintenance`.
    pub(crate) async fn end_maintenance(&self, service: &str, env: &str) -> Result<(), ApiError> {
        let url = self.env_url(service, env, &["maintenance"], &[]);
        self.send(Method::DELETE, url, None, Some(REQUEST_TIMEOUT))
            .await
            .map(drop)
    }

    /// `GET /v1/whoami`.
    pub(crate) async fn whoami(&self) -> Result<WhoAmI, ApiError> {
        self.get(self.url(&["v1", "whoami"], &[])).await
    }

    /// `POST /v1/services`.
    pub(crate) async fn create_service(
        &self,
        request: &CreateService,
    ) -> Result<ServiceView, ApiError> {
        let url = self.url(&["v1", "services"], &[]);
        self.call(Method::POST, url, Some(request)).await
    }

    /// `GET /v1/services`.
    pub(crate) async fn services(&self) -> Result<Vec<ServiceView>, ApiError> {
        self.get(self.url(&["v1", "services"], &[])).await
    }

    /// `PATCH /v1/services/{service}`.
    pub(crate) async fn update_service(
        &self,
        service: &str,
        update: &UpdateService,
    ) -> Result<ServiceView, ApiError> {
        let url = self.url(&["v1", "services", service], &[]);
        self.call(Method::PATCH, url, Some(update)).await
    }

    /// `DELETE /v1/services/{service}?confirm=..`.
    pub(crate) async fn delete_service(
        &self,
        service: &str,
        confirm: &str,
    ) -> Result<Decommissioned, ApiError> {
        let url = self.url(
            &["v1", "services", service],
            &[("confirm", confirm.to_owned())],
        );
        self.call(Method::DELETE, url, None::<&()>).await
    }

    /// `POST /v1/inventory`: what an inventory document changes, or changed.
    pub(crate) async fn inventory(
        &self,
        request: &InventoryRequest,
    ) -> Result<InventoryPlan, ApiError> {
        let url = self.url(&["v1", "inventory"], &[]);
        self.call(Method::POST, url, Some(request)).await
    }

    /// `GET /v1/services/{service}/previews`, or every service's (`GET /v1/previews`, admin).
    pub(crate) async fn previews(
        &self,
        service: Option<&str>,
    ) -> Result<Vec<PreviewView>, ApiError> {
        let url = match service {
            Some(service) => self.url(&["v1", "services", service, "previews"], &[]),
            None => self.url(&["v1", "previews"], &[]),
        };
        self.get(url).await
    }

    /// `DELETE /v1/services/{service}/previews/{name}`.
    pub(crate) async fn stop_preview(
        &self,
        service: &str,
        name: &str,
    ) -> Result<Decommissioned, ApiError> {
        let url = self.url(&["v1", "services", service, "previews", name], &[]);
        self.call(Method::DELETE, url, None::<&()>).await
    }

    fn env_url(&self, service: &str, env: &str, rest: &[&str], query: &[(&str, String)]) -> Url {
        let mut segments = vec!["v1", "services", service, "environments", env];
        segments.extend(rest);
        self.url(&segments, query)
    }

    /// Whether the service has code snapshot `digest`:
    /// `GET /v1/services/{service}/environments/{env}/sources/{digest}`.
    pub(crate) async fn has_source(
        &self,
        service: &str,
        env: &str,
        digest: &str,
    ) -> Result<bool, ApiError> {
        let url = self.env_url(service, env, &["sources", digest], &[]);
        match self
            .send(Method::GET, url, None, Some(REQUEST_TIMEOUT))
            .await
        {
            Ok(_) => Ok(true),
            // Only the snapshot missing; a service or environment that is not there is an
            // error, said before any code is uploaded.
            Err(ApiError::Api {
                status, message, ..
            }) if status == StatusCode::NOT_FOUND && message.contains("snapshot") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Uploads a code snapshot (the gzip of its archive):
    /// `PUT /v1/services/{service}/environments/{env}/sources/{digest}`.
    pub(crate) async fn upload_source(
        &self,
        service: &str,
        env: &str,
        digest: &str,
        gzip: Vec<u8>,
    ) -> Result<(), ApiError> {
        let url = self.env_url(service, env, &["sources", digest], &[]);
        self.send(
            Method::PUT,
            url,
            Some((gzip, "application/octet-stream")),
            Some(UPLOAD_TIMEOUT),
        )
        .await
        .map(drop)
    }

    /// `POST /v1/services/{service}/environments/{env}/deployments`.
    pub(crate) async fn deploy(
        &self,
        service: &str,
        env: &str,
        request: &DeployRequest,
    ) -> Result<DeploymentView, ApiError> {
        let url = self.env_url(service, env, &["deployments"], &[]);
        self.call(Method::POST, url, Some(request)).await
    }

    /// `GET /v1/services/{service}/environments/{env}/deployments?limit=N`, newest first.
    pub(crate) async fn deployments(
        &self,
        service: &str,
        env: &str,
        limit: u32,
    ) -> Result<Vec<DeploymentView>, ApiError> {
        let url = self.env_url(
            service,
            env,
            &["deployments"],
            &[("limit", limit.to_string())],
        );
        self.get(url).await
    }

    /// `GET /v1/deployments/{id}`.
    pub(crate) async fn deployment(&self, id: &str) -> Result<DeploymentView, ApiError> {
        self.get(self.url(&["v1", "deployments", id], &[])).await
    }

    /// `GET /v1/deployments/{id}/events?after=N`: the events after the first `after`.
    pub(crate) async fn events(
        &self,
        id: &str,
        after: usize,
    ) -> Result<Vec<DeploymentEventView>, ApiError> {
        let url = self.url(
            &["v1", "deployments", id, "events"],
            &[("after", after.to_string())],
        );
        self.get(url).await
    }

    /// `GET /v1/services/{service}/environments/{env}/revisions`, newest first.
    pub(crate) async fn revisions(
        &self,
        service: &str,
        env: &str,
    ) -> Result<Vec<RevisionView>, ApiError> {
        self.get(self.env_url(service, env, &["revisions"], &[]))
            .await
    }

    /// `POST /v1/services/{service}/environments/{env}/rollback`.
    pub(crate) async fn rollback(
        &self,
        service: &str,
        env: &str,
        request: &RollbackRequest,
    ) -> Result<DeploymentView, ApiError> {
        let url = self.env_url(service, env, &["rollback"], &[]);
        self.call(Method::POST, url, Some(request)).await
    }

    /// `POST /v1/services/{service}/environments/{env}/rollout`.
    pub(crate) async fn rollout(
        &self,
        service: &str,
        env: &str,
        request: &RolloutRequest,
    ) -> Result<DeploymentView, ApiError> {
        let url = self.env_url(service, env, &["rollout"], &[]);
        self.call(Method::POST, url, Some(request)).await
    }

    /// `POST /v1/services/{service}/promote`.
    pub(crate) async fn promote(
        &self,
        service: &str,
        request: &PromoteRequest,
    ) -> Result<DeploymentView, ApiError> {
        let url = self.url(&["v1", "services", service, "promote"], &[]);
        self.call(Method::POST, url, Some(request)).await
    }

    /// `POST /v1/services/{service}/environments/{env}/variables`.
    pub(crate) async fn set_variables(
        &self,
        service: &str,
        env: &str,
        request: &runway_api::types::SetVariables,
    ) -> Result<DeploymentView, ApiError> {
        let url = self.env_url(service, env, &["variables"], &[]);
        self.call(Method::POST, url, Some(request)).await
    }

    /// `GET /v1/audit?last=N`, or `?after=ID&limit=N`: oldest first.
    pub(crate) async fn audit(
        &self,
        after: Option<i64>,
        count: u32,
        filter: &AuditFilter<'_>,
    ) -> Result<Vec<AuditEntryView>, ApiError> {
        let mut query = match after {
            Some(after) => vec![("after", after.to_string()), ("limit", count.to_string())],
            None => vec![("last", count.to_string())],
        };
        let by = filter.by.map(|by| match by {
            runway_api::types::AuditBy::People => "people",
            runway_api::types::AuditBy::Platform => "platform",
        });
        for (key, value) in [
            ("service", filter.service),
            ("actor", filter.actor),
            ("action", filter.action),
            ("since", filter.since),
            ("by", by),
        ] {
            if let Some(value) = value {
                query.push((key, value.to_owned()));
            }
        }
        self.get(self.url(&["v1", "audit"], &query)).await
    }

    /// `GET /v1/audit/verify`.
    pub(crate) async fn audit_verify(
        &self,
    ) -> Result<runway_api::audit::AuditVerifyView, ApiError> {
        self.get(self.url(&["v1", "audit", "verify"], &[])).await
    }

    /// `GET /v1/audit/export`.
    pub(crate) async fn audit_export(
        &self,
    ) -> Result<Vec<runway_api::audit::AuditSinkView>, ApiError> {
        self.get(self.url(&["v1", "audit", "export"], &[])).await
    }

    /// `GET /v1/traffic`.
    pub(crate) async fn traffic(&self) -> Result<Vec<runway_api::types::TrafficView>, ApiError> {
        self.get(self.url(&["v1", "traffic"], &[])).await
    }

    /// `GET /v1/services/{service}/environments/{env}/status`.
    pub(crate) async fn status(&self, service: &str, env: &str) -> Result<StatusView, ApiError> {
        self.get(self.env_url(service, env, &["status"], &[])).await
    }

    fn logs_url(&self, service: &str, env: &str, query: &LogsQuery<'_>, follow: bool) -> Url {
        let pairs: Vec<(&str, String)> = [
            ("instance", query.instance.map(str::to_owned)),
            ("lines", query.lines.map(|n| n.to_string())),
            ("since", query.since.map(str::to_owned)),
            ("previous", query.previous.then(|| "true".to_owned())),
            ("follow", Some(follow.to_string())),
        ]
        .into_iter()
        .filter_map(|(key, value)| Some((key, value?)))
        .collect();
        self.env_url(service, env, &["logs"], &pairs)
    }

    /// `GET .../logs?follow=false`: the last lines.
    pub(crate) async fn logs(
        &self,
        service: &str,
        env: &str,
        query: &LogsQuery<'_>,
    ) -> Result<Vec<LogLine>, ApiError> {
        self.get(self.logs_url(service, env, query, false)).await
    }

    /// `GET .../logs?follow=true`: calls `each` for every line of the NDJSON stream until the
    /// server ends it (`Ok(true)`) or `each` returns false (`Ok(false)`). A connection that
    /// breaks once the stream has begun is `ApiError::Connect`.
    pub(crate) async fn follow_logs(
        &self,
        service: &str,
        env: &str,
        query: &LogsQuery<'_>,
        mut each: impl FnMut(LogLine) -> bool,
    ) -> Result<bool, ApiError> {
        let url = self.logs_url(service, env, query, true);
        let what = format!("GET {}", url.path());
        let mut response = self.send(Method::GET, url, None, None).await?;
        let mut pending: Vec<u8> = Vec::new();
        loop {
            let chunk = response.chunk().await.map_err(|e| self.connect_error(&e))?;
            let Some(chunk) = chunk else {
                return Ok(true);
            };
            pending.extend_from_slice(&chunk);
            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let line = line.trim_ascii();
                if line.is_empty() {
                    continue;
                }
                let parsed: LogLine =
                    serde_json::from_slice(line).map_err(|e| ApiError::Decode {
                        what: what.clone(),
                        reason: e.to_string(),
                    })?;
                if !each(parsed) {
                    return Ok(false);
                }
            }
        }
    }

    /// `PUT .../secrets/{name}` with the value.
    pub(crate) async fn set_secret(
        &self,
        service: &str,
        env: &str,
        name: &str,
        value: &str,
    ) -> Result<SecretInfoView, ApiError> {
        let url = self.env_url(service, env, &["secrets", name], &[]);
        self.call(
            Method::PUT,
            url,
            Some(&SetSecret {
                value: value.to_owned(),
            }),
        )
        .await
    }

    /// `GET .../secrets`.
    pub(crate) async fn secrets(
        &self,
        service: &str,
        env: &str,
    ) -> Result<Vec<SecretInfoView>, ApiError> {
        self.get(self.env_url(service, env, &["secrets"], &[]))
            .await
    }

    /// `DELETE .../secrets/{name}`.
    pub(crate) async fn unset_secret(
        &self,
        service: &str,
        env: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        let url = self.env_url(service, env, &["secrets", name], &[]);
        self.send(Method::DELETE, url, None, Some(REQUEST_TIMEOUT))
            .await
            .map(drop)
    }
}

/// Which lines `logs` asks for.
#[derive(Debug, Clone)]
pub(crate) struct LogsQuery<'a> {
    pub(crate) instance: Option<&'a str>,
    pub(crate) lines: Option<u32>,
    /// An RFC 3339 time, or a duration before now (`10m`).
    pub(crate) since: Option<&'a str>,
    /// The instances that ended, not the running ones.
    pub(crate) previous: bool,
}

/// What `GET /v1/audit` keeps of the log.
#[derive(Debug, Default)]
pub(crate) struct AuditFilter<'a> {
    pub(crate) service: Option<&'a str>,
    pub(crate) actor: Option<&'a str>,
    pub(crate) action: Option<&'a str>,
    /// An RFC 3339 time, or a duration before now (`10m`).
    pub(crate) since: Option<&'a str>,
    pub(crate) by: Option<runway_api::types::AuditBy>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn server_urls_are_https_or_loopback_http() {
        assert_eq!(
            server_url("https://runway.example.com").unwrap().as_str(),
            "https://runway.example.com/"
        );
        assert!(server_url("http://127.0.0.1:8080").is_ok());
        assert!(server_url("http://localhost:8080/").is_ok());
        assert!(server_url("http://[::1]:8080/").is_ok());
        let err = server_url("http://runway.example.com").unwrap_err();
        assert!(err.to_string().contains("plain HTTP"), "{err}");
        assert!(server_url("ftp://x").is_err());
        assert!(server_url("not a url").is_err());
    }

    #[test]
    fn paths_are_encoded_under_the_base() {
        let client = Client::new("http://127.0.0.1:1/prefix", "t", None).unwrap();
        let url = client.env_url("hello", "dev", &["secrets", "A B/C"], &[]);
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:1/prefix/v1/services/hello/environments/dev/secrets/A%20B%2FC"
        );
        let url = client.url(
            &["v1", "deployments", "7", "events"],
            &[("after", "3".into())],
        );
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:1/prefix/v1/deployments/7/events?after=3"
        );
    }

    #[test]
    fn api_errors_say_message_and_field() {
        let err = ApiError::Api {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid_manifest".into(),
            message: "container_port must be below 65536".into(),
            field: Some("manifest.spec.container_port".into()),
        };
        assert_eq!(
            err.to_string(),
            "container_port must be below 65536 (field `manifest.spec.container_port`) [422 invalid_manifest]"
        );
        let flag = ApiError::Api {
            status: StatusCode::BAD_REQUEST,
            code: "invalid".into(),
            message: "`pause` needs a rollout in steps".into(),
            field: Some("pause".into()),
        };
        assert_eq!(
            flag.to_string(),
            "`pause` needs a rollout in steps (flag `--pause`) [400 invalid]"
        );
    }
}
