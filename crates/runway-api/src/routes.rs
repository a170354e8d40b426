//! The handlers, one per route of the contract. The gate ([`crate::access`]) has
//! authenticated the caller and checked the route's role on the path's service before a
//! handler runs (so no body is read for a caller without a token); a handler checks the
//! services it finds itself, and calls the store off the async threads or the platform.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use runway_secrets::{Env, SecretValue, Target, TokenKind};
use runway_store::{
    DesiredRevision, NewService, NewToken, ServiceUpdate, StoreError, Timestamp, TokenScope,
};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Caller;
use crate::deploy;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::platform::SourceRefused;
use crate::state::ApiState;
use crate::types::*;

/// The longest a token may live: ten years.
const MAX_EXPIRY_SECONDS: u64 = 315_360_000;

type JsonResponse<T> = ApiResult<axum::Json<T>>;

/// Every route of the contract, with its OpenAPI description.
pub(crate) fn api_router_with(doc: utoipa::openapi::OpenApi) -> OpenApiRouter<ApiState> {
    OpenApiRouter::with_openapi(doc)
        .routes(routes!(healthz))
        .routes(routes!(metrics))
        .routes(routes!(prometheus_targets))
        .routes(routes!(observability_rules))
        .routes(routes!(traffic))
        .routes(routes!(service_dashboard))
        .routes(routes!(openapi_json))
        .routes(routes!(whoami))
        .routes(routes!(crate::access::access_table))
        .routes(routes!(create_service, list_services))
        .routes(routes!(get_service, update_service, decommission_service))
        .routes(routes!(deploy_handler, list_deployments))
        .routes(routes!(get_deployment))
        .routes(routes!(deployment_events))
        .routes(routes!(list_revisions))
        .routes(routes!(get_source, put_source))
        .routes(routes!(rollback))
        .routes(routes!(set_variables))
        .routes(routes!(promote))
        .routes(routes!(rollout_command))
        .routes(routes!(status))
        .routes(routes!(logs))
        .routes(routes!(set_secret, delete_secret))
        .routes(routes!(list_secrets))
        .routes(routes!(create_token, list_tokens))
        .routes(routes!(revoke_token))
        .routes(routes!(audit))
        .routes(routes!(crate::audit::verify_audit))
        .routes(routes!(crate::audit::audit_export))
        .routes(routes!(
            crate::domains::list_domains,
            crate::domains::add_domain
        ))
        .routes(routes!(crate::domains::remove_domain))
        .routes(routes!(
            crate::maintenance::get_maintenance,
            crate::maintenance::set_maintenance,
            crate::maintenance::end_maintenance
        ))
        .routes(routes!(
            crate::session::create_session,
            crate::session::end_session
        ))
        .routes(routes!(crate::watch::watch))
        .routes(routes!(crate::previews::list_previews))
        .routes(routes!(crate::previews::stop_preview))
        .routes(routes!(crate::previews::list_all_previews))
        .routes(routes!(crate::inventory::inventory))
        .routes(routes!(crate::teams::list_teams))
        .routes(routes!(crate::identity::discovery))
        .routes(routes!(crate::identity::jwks))
        .routes(routes!(crate::sso::sso_status))
        .routes(routes!(crate::sso::login))
        .routes(routes!(crate::sso::callback))
        .routes(routes!(crate::sso::confirm_cli))
        .routes(routes!(crate::sso::redeem))
        .routes(routes!(
            crate::teams::get_team,
            crate::teams::put_team,
            crate::teams::delete_team
        ))
        .merge(crate::console::routes(OpenApiRouter::new()))
}

/// Whether `name` is a DNS label: 1 to 63 of `a-z`, `0-9`, `-`, not starting or ending
/// with `-`; and without `---`, which parts a tag from its service in a host name
/// (`<tag>---<service>.<env>.<domain>`), so the ingress would refuse the whole table.
pub(crate) fn is_label(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("---")
}

/// What [`is_label`] asks, for an error message.
pub(crate) const LABEL_RULE: &str =
    "lower-case letters, digits and `-`, at most 63, not starting or ending with `-`, no `---`";

/// A query parameter within its documented bounds; 400 naming it if not.
fn in_range<T: PartialOrd + std::fmt::Display>(
    value: Option<T>,
    min: T,
    max: T,
    field: &str,
) -> ApiResult<()> {
    match value {
        Some(v) if v < min || v > max => Err(ApiError::invalid(format!(
            "{field} is {v}, it must be from {min} to {max}"
        ))
        .field(field)),
        _ => Ok(()),
    }
}

/// The `since` of a logs query: an RFC 3339 time, or a duration before now (`90s`, `10m`,
/// `2h`, `1d`).
fn since_time(text: &str) -> ApiResult<runway_store::Timestamp> {
    if let Some(at) = runway_store::Timestamp::parse_rfc3339(text) {
        return Ok(at);
    }
    let unit_ms = |unit: &str| match unit {
        "s" => Some(1_000),
        "m" => Some(60_000),
        "h" => Some(3_600_000),
        "d" => Some(86_400_000),
        _ => None,
    };
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let millis = digits
        .parse::<i64>()
        .ok()
        .zip(unit_ms(&text[digits.len()..]))
        .and_then(|(n, unit)| n.checked_mul(unit));
    match millis {
        Some(ms) if ms >= 0 => Ok(runway_store::Timestamp::now().add_millis(-ms)),
        _ => Err(ApiError::invalid(format!(
            "since is {text:?}: expected an RFC 3339 time (2026-11-24T10:00:00Z) or a \
             duration before now (90s, 10m, 2h, 1d)"
        ))
        .field("since")),
    }
}

/// The service exists and has `env`; 404 if not.
pub(crate) fn service_env(s: &dyn runway_store::Store, service: &str, env: &str) -> ApiResult<()> {
    let environments = s.service_get(service)?.environments;
    if environments.iter().any(|e| e == env) {
        Ok(())
    } else {
        Err(ApiError::not_found(format!(
            "service {service:?} has no environment {env:?} (it has {})",
            environments.join(", ")
        )))
    }
}

/// Whether the server knows `env`; 404 if not.
pub(crate) fn known_env(state: &ApiState, env: &str) -> ApiResult<()> {
    if state.environments.iter().any(|e| e == env) {
        Ok(())
    } else {
        Err(ApiError::not_found(format!(
            "environment {env:?} not found (this server's environments: {})",
            state.environments.join(", ")
        )))
    }
}

/// The server is up.
#[utoipa::path(get, path = "/healthz", security(()), responses((status = 200, body = Health)))]
async fn healthz() -> axum::Json<Health> {
    axum::Json(Health {
        status: "ok".to_owned(),
    })
}

/// The control plane's own metrics, in Prometheus's text format: its requests by method and
/// status code, and their durations. No token: figures only.
#[utoipa::path(get, path = "/metrics", security(()),
    responses((status = 200, description = "OpenMetrics text, as Prometheus scrapes it", body = String,
        content_type = "application/openmetrics-text")))]
async fn metrics(state: axum::extract::State<ApiState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}

/// Prometheus's HTTP service discovery (admin): every instance's scrape targets (the
/// manifest's `observability.scrape_targets`, each port at the instance's address, with
/// `metrics_path`) labelled with its service, environment, revision and instance; and the
/// platform's own metrics endpoints (the ingresses', the API's). Point `http_sd_configs` at
/// it with an admin token.
#[utoipa::path(get, path = "/v1/prometheus/targets",
    responses((status = 200, body = Vec<crate::metrics::TargetGroup>)))]
async fn prometheus_targets(
    state: axum::extract::State<ApiState>,
) -> JsonResponse<Vec<crate::metrics::TargetGroup>> {
    let desired = state.store(|s| Ok(s.desired_list()?)).await?;
    let mut groups = state.platform.metrics_endpoints();
    for wanted in desired {
        let parts = state.platform.status(&wanted.service, &wanted.env).await;
        let revisions: std::collections::BTreeSet<String> =
            parts.instances.iter().map(|i| i.revision.clone()).collect();
        let manifests = state
            .store(move |s| {
                let mut manifests = std::collections::BTreeMap::new();
                for name in revisions {
                    if let Ok(revision) = s.revision_get(&name) {
                        manifests.insert(name, revision.manifest);
                    }
                }
                Ok(manifests)
            })
            .await?;
        groups.extend(parts.instances.iter().filter_map(|instance| {
            crate::metrics::instance_targets(
                [
                    &wanted.service,
                    &wanted.env,
                    &instance.revision,
                    &instance.id,
                ],
                instance.address.as_deref(),
                manifests.get(&instance.revision)?,
            )
        }));
    }
    Ok(axum::Json(groups))
}

/// The Prometheus rule file of every service serving (admin): recording rules (request rate,
/// 5xx ratio, apdex over 5m to 3d) and multi-window, multi-burn-rate alerts, a group per
/// service and environment, from each serving revision's manifest (`spec.workload.slo`).
#[utoipa::path(get, path = "/v1/observability/rules",
    responses((status = 200, description = "A Prometheus rule file (YAML): `groups`",
        body = Object, content_type = "application/yaml")))]
async fn observability_rules(state: axum::extract::State<ApiState>) -> ApiResult<Response> {
    let base = state.runbook_base.clone();
    let generated = state
        .store(move |s| {
            crate::observability::generate(&crate::observability::slos(s, base.as_deref(), None)?)
        })
        .await?;
    Ok((
        [(header::CONTENT_TYPE, "application/yaml")],
        generated.rules,
    )
        .into_response())
}

/// A service's Grafana dashboard (JSON model): traffic, errors, latency, apdex, concurrency,
/// saturation, deployments as annotations; its `uid` stable. 404 until it serves somewhere.
#[utoipa::path(get, path = "/v1/services/{service}/dashboard",
    params(("service" = String, Path)),
    responses((status = 200, description = "A Grafana dashboard", body = Object)))]
async fn service_dashboard(
    state: axum::extract::State<ApiState>,
    Path(service): Path<String>,
) -> JsonResponse<serde_json::Value> {
    let base = state.runbook_base.clone();
    let name = service.clone();
    let slos = state
        .store(move |s| {
            s.service_get(&name)?;
            crate::observability::slos(s, base.as_deref(), Some(&name))
        })
        .await?;
    let mut generated = crate::observability::generate(&slos)?;
    generated
        .dashboards
        .remove(&service)
        .map(axum::Json)
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "{service} serves nowhere yet: its dashboard comes with its first deploy"
            ))
        })
}

/// Every routed revision's traffic over the last minutes (request rate, 5xx ratio, p99), of
/// the services the token may read: what `runway top` shows.
#[utoipa::path(get, path = "/v1/traffic", responses((status = 200, body = Vec<TrafficView>)))]
async fn traffic(
    caller: Caller,
    state: axum::extract::State<ApiState>,
) -> JsonResponse<Vec<TrafficView>> {
    let all = state.platform.traffic();
    Ok(axum::Json(
        all.into_iter()
            .filter(|t| caller.shows(&t.service, Env::One(&t.env)))
            .collect(),
    ))
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document", body = Object)))]
async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::openapi_json(),
    )
        .into_response()
}

/// The token making the request.
#[utoipa::path(get, path = "/v1/whoami", responses((status = 200, body = WhoAmI)))]
async fn whoami(caller: Caller) -> axum::Json<WhoAmI> {
    let mut team_services: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (service, team) in caller.teams.iter() {
        team_services
            .entry(team.clone())
            .or_default()
            .push(service.clone());
    }
    let grants = match &caller.policy {
        runway_secrets::Scope::Admin => Vec::new(),
        runway_secrets::Scope::Grants { grants, .. } => grants.iter().map(Into::into).collect(),
    };
    axum::Json(WhoAmI {
        token_id: caller.id,
        scope: ScopeView::from(&caller.scope),
        admin: caller.is_admin(),
        grants,
        team_services,
        name: caller.name,
    })
}

/// Onboards a service (admin).
#[utoipa::path(post, path = "/v1/services", request_body = CreateService,
    responses((status = 201, body = ServiceView)))]
async fn create_service(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Json(body): Json<CreateService>,
) -> ApiResult<(StatusCode, axum::Json<ServiceView>)> {
    if !is_label(&body.name) {
        return Err(ApiError::invalid(format!(
            "service name {:?} is not a DNS label ({LABEL_RULE})",
            body.name
        ))
        .field("name"));
    }
    if body.name.contains(runway_secrets::preview::SEPARATOR) {
        return Err(ApiError::invalid(format!(
            "service name {:?} holds `{}`, which separates a preview's name from its \
             service's (`mr-12--app`)",
            body.name,
            runway_secrets::preview::SEPARATOR
        ))
        .field("name"));
    }
    let environments = body
        .environments
        .unwrap_or_else(|| state.environments.to_vec());
    check_environments(&state, &environments)?;
    let new = NewService {
        name: body.name,
        owners: body.owners,
        environments,
        team: body.team,
    };
    let actor = caller.name.clone();
    let service = state
        .store(move |s| s.service_create(&actor, &new).map_err(no_such_team))
        .await?;
    Ok((StatusCode::CREATED, axum::Json(service.into())))
}

/// A team named in a request that does not exist: the request's mistake (`team`).
fn no_such_team(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound { kind: "team", name } => ApiError::invalid(format!(
            "there is no team {name:?}: an admin makes it first (`runway team set {name}`)"
        ))
        .field("team"),
        other => other.into(),
    }
}

/// A service's environments: at least one, each one of the server's.
fn check_environments(state: &ApiState, environments: &[String]) -> ApiResult<()> {
    if environments.is_empty() {
        return Err(
            ApiError::invalid("a service needs at least one environment").field("environments"),
        );
    }
    if let Some(unknown) = environments
        .iter()
        .find(|e| !state.environments.contains(e))
    {
        return Err(ApiError::invalid(format!(
            "environment {unknown:?} is not one of this server's: {}",
            state.environments.join(", ")
        ))
        .field("environments"));
    }
    Ok(())
}

/// Changes a service's owners, environments, team or leave to deploy plain processes (admin).
#[utoipa::path(patch, path = "/v1/services/{service}", params(("service" = String, Path)),
    request_body = Option<UpdateService>, responses((status = 200, body = ServiceView)))]
async fn update_service(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path(service): Path<String>,
    Json(body): Json<UpdateService>,
) -> JsonResponse<ServiceView> {
    if let Some(environments) = &body.environments {
        check_environments(&state, environments)?;
    }
    if !body.add_environments.is_empty() {
        if body.environments.is_some() {
            return Err(ApiError::invalid(
                "add_environments adds to the environments a service has; environments \
                 replaces them: give one of the two",
            )
            .field("add_environments"));
        }
        check_environments(&state, &body.add_environments)
            .map_err(|e| e.field("add_environments"))?;
    }
    let mut update = ServiceUpdate {
        owners: body.owners,
        environments: body.environments,
        allow_processes: body.allow_processes,
        team: body.team.map(|team| Some(team).filter(|t| !t.is_empty())),
    };
    let (actor, add) = (caller.name.clone(), body.add_environments);
    let updated = state
        .store(move |s| {
            if !add.is_empty() {
                let mut environments = s.service_get(&service)?.environments;
                for env in add {
                    if !environments.contains(&env) {
                        environments.push(env);
                    }
                }
                update.environments = Some(environments);
            }
            s.service_update(&actor, &service, &update)
                .map_err(no_such_team)
        })
        .await?;
    state.platform.wake();
    Ok(axum::Json(updated.into()))
}

/// Every service the caller has a role on (an admin's: all of them).
#[utoipa::path(get, path = "/v1/services", responses((status = 200, body = Vec<ServiceView>)))]
async fn list_services(
    caller: Caller,
    state: axum::extract::State<ApiState>,
) -> JsonResponse<Vec<ServiceView>> {
    let services = state.store(|s| Ok(s.service_list()?)).await?;
    Ok(axum::Json(
        services
            .into_iter()
            // Previews are listed with their parent (`GET …/previews`).
            .filter(|s| runway_secrets::preview::split(&s.name).is_none())
            .filter(|s| caller.shows(&s.name, Env::Whole))
            .map(ServiceView::from)
            .collect(),
    ))
}

/// One service.
#[utoipa::path(get, path = "/v1/services/{service}", params(("service" = String, Path)),
    responses((status = 200, body = ServiceView)))]
async fn get_service(
    state: axum::extract::State<ApiState>,
    Path(service): Path<String>,
) -> JsonResponse<ServiceView> {
    let found = state.store(move |s| Ok(s.service_get(&service)?)).await?;
    Ok(axum::Json(found.into()))
}

/// Decommissions a service (admin): its revisions, deployments and desired state go, so its
/// instances stop; its secrets are deleted and its deploy tokens revoked, so a service
/// onboarded again under its name starts with none of them.
#[utoipa::path(delete, path = "/v1/services/{service}",
    params(("service" = String, Path), DecommissionQuery),
    responses((status = 200, body = Decommissioned)))]
async fn decommission_service(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path(service): Path<String>,
    Query(query): Query<DecommissionQuery>,
) -> JsonResponse<Decommissioned> {
    if query.confirm.as_deref() != Some(service.as_str()) {
        return Err(ApiError::invalid(format!(
            "to decommission {service:?}, repeat its name: `confirm={service}`"
        ))
        .field("confirm"));
    }
    let actor = caller.name.clone();
    let name = service.clone();
    state
        .store(move |s| Ok(s.service_decommission(&actor, &name)?))
        .await?;
    state.platform.wake();
    Ok(axum::Json(Decommissioned {
        decommissioned: service,
    }))
}

/// Deploys a new revision: validates the manifest, pins the image to a digest, records the
/// revision with the latest secret versions, and asks the reconciler to roll it out.
#[utoipa::path(post, path = "/v1/services/{service}/environments/{env}/deployments",
    params(("service" = String, Path), ("env" = String, Path)), request_body = DeployRequest,
    responses((status = 202, body = DeploymentView),
        (status = 422, description = "The manifest is invalid", body = crate::error::ErrorBody)))]
async fn deploy_handler(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path((service, env)): Path<(String, String)>,
    Json(body): Json<DeployRequest>,
) -> ApiResult<(StatusCode, axum::Json<DeploymentView>)> {
    if let Some(name) = body.preview.clone() {
        return crate::previews::deploy_preview(&caller, &state, &service, &env, &name, body).await;
    }
    caller.allow(&service, Env::One(&env))?;
    known_env(&state, &env)?;
    if env == runway_secrets::preview::ENVIRONMENT {
        return Err(ApiError::invalid(format!(
            "`{env}` is where previews run: deploy one from the environment whose settings it              takes, with `preview` set (`runway deploy --env staging --preview NAME`)"
        ))
        .field("env"));
    }
    // Before anything slow (resolving an image): the service deploys to this environment.
    let (s2, e2) = (service.clone(), env.clone());
    let serving = state
        .store(move |s| {
            service_env(s, &s2, &e2)?;
            deploy::serving(s, &s2, &e2)
        })
        .await?;
    let (body, set_vars, changes) = deploy::keep_set_variables(body, serving.as_ref());
    let deployment = deploy::deploy(&state, &caller, &service, &env, body, set_vars, None).await?;
    let mut view = DeploymentView::from(deployment);
    view.variables = Some(changes).filter(|changes| !changes.is_empty());
    Ok((StatusCode::ACCEPTED, axum::Json(view)))
}

/// A service's deployments in an environment, newest first.
#[utoipa::path(get, path = "/v1/services/{service}/environments/{env}/deployments",
    params(("service" = String, Path), ("env" = String, Path), LimitQuery),
    responses((status = 200, body = Vec<DeploymentView>)))]
async fn list_deployments(
    state: axum::extract::State<ApiState>,
    Path((service, env)): Path<(String, String)>,
    Query(query): Query<LimitQuery>,
) -> JsonResponse<Vec<DeploymentView>> {
    in_range(query.limit, 1, 1000, "limit")?;
    let limit = query.limit.unwrap_or(20);
    let list = state
        .store(move |s| {
            service_env(s, &service, &env)?;
            Ok(s.deployment_list(&service, Some(&env), limit)?)
        })
        .await?;
    Ok(axum::Json(list.into_iter().map(Into::into).collect()))
}

/// One deployment.
#[utoipa::path(get, path = "/v1/deployments/{id}", params(("id" = i64, Path)),
    responses((status = 200, body = DeploymentView)))]
async fn get_deployment(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path(id): Path<i64>,
) -> JsonResponse<DeploymentView> {
    Ok(axum::Json(
        readable_deployment(&caller, &state, id).await?.into(),
    ))
}

/// Deployment `id`, when the caller may read it. Another service's deployment is "not found",
/// exactly as one that does not exist: a deploy token must not learn which ids other
/// services' deployments have.
async fn readable_deployment(
    caller: &Caller,
    state: &ApiState,
    id: i64,
) -> ApiResult<runway_store::Deployment> {
    let found = state.store(move |s| Ok(s.deployment_get(id)?)).await?;
    if !caller.shows(&found.service, Env::One(&found.env)) {
        return Err(StoreError::NotFound {
            kind: "deployment",
            name: id.to_string(),
        }
        .into());
    }
    Ok(found)
}

/// A deployment's events after the first `after` (the count already seen), for polling.
#[utoipa::path(get, path = "/v1/deployments/{id}/events", params(("id" = i64, Path), AfterQuery),
    responses((status = 200, body = Vec<DeploymentEventView>)))]
async fn deployment_events(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path(id): Path<i64>,
    Query(query): Query<AfterQuery>,
) -> JsonResponse<Vec<DeploymentEventView>> {
    readable_deployment(&caller, &state, id).await?;
    in_range(query.after, 0, 1_000_000, "after")?;
    let events = state.store(move |s| Ok(s.deployment_events(id)?)).await?;
    let after = usize::try_from(query.after.unwrap_or(0)).unwrap_or(usize::MAX);
    Ok(axum::Json(
        events.into_iter().skip(after).map(Into::into).collect(),
    ))
}

/// A service's revisions in an environment, newest first.
#[utoipa::path(get, path = "/v1/services/{service}/environments/{env}/revisions",
    params(("service" = String, Path), ("env" = String, Path)),
    responses((status = 200, body = Vec<RevisionView>)))]
async fn list_revisions(
    state: axum::extract::State<ApiState>,
    Path((service, env)): Path<(String, String)>,
) -> JsonResponse<Vec<RevisionView>> {
    let list = state
        .store(move |s| {
            service_env(s, &service, &env)?;
            Ok(s.revision_list(&service, &env)?)
        })
        .await?;
    Ok(axum::Json(list.into_iter().rev().map(Into::into).collect()))
}

/// `sha256:` and 64 lowercase hex digits; 400 naming `digest` if not.
pub(crate) fn check_digest(digest: &str) -> ApiResult<()> {
    let valid = digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if valid {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "{digest:?} is not a snapshot digest: expected sha256: and 64 lowercase hex digits"
        ))
        .field("digest"))
    }
}

/// The service, which has `env`, and may run code: its id.
async fn source_service(
    state: &ApiState,
    service: &str,
    env: &str,
    digest: &str,
) -> ApiResult<i64> {
    known_env(state, env)?;
    check_digest(digest)?;
    let (service, env, allow_all) = (service.to_owned(), env.to_owned(), state.allow_processes);
    state
        .store(move |s| {
            service_env(s, &service, &env)?;
            // Code is only for a service that may run it: no disk for one that may not.
            deploy::check_may_run_processes(s, allow_all, &service)?;
            Ok(s.service_get(&service)?.id)
        })
        .await
}

/// Whether the service has a code snapshot (what `runway deploy` asks before uploading one).
#[utoipa::path(get, path = "/v1/services/{service}/environments/{env}/sources/{digest}",
    params(("service" = String, Path), ("env" = String, Path),
        ("digest" = String, Path, description = "`sha256:` and 64 hex digits: the archive's")),
    responses((status = 200, body = SourceView),
        (status = 404, description = "Not uploaded (or collected)", body = crate::error::ErrorBody)))]
async fn get_source(
    state: axum::extract::State<ApiState>,
    Path((service, env, digest)): Path<(String, String, String)>,
) -> JsonResponse<SourceView> {
    let id = source_service(&state, &service, &env, &digest).await?;
    if state
        .platform
        .source_claim(id, &digest)
        .await
        .map_err(ApiError::internal)?
    {
        Ok(axum::Json(SourceView { service, digest }))
    } else {
        Err(ApiError::not_found(format!(
            "{service} has no code snapshot {digest}"
        )))
    }
}

/// Uploads a code snapshot: the gzip of a tar archive of the service's source tree, named by
/// the sha256 of the uncompressed archive (`runway deploy` packs and uploads it for a process
/// service, then deploys it by digest). Unpacked with the image layers' rules (no `..`,
/// nothing through a symbolic link, no device), read-only, kept as long as a revision names
/// it. Putting one that is there already changes nothing.
#[utoipa::path(put, path = "/v1/services/{service}/environments/{env}/sources/{digest}",
    params(("service" = String, Path), ("env" = String, Path),
        ("digest" = String, Path, description = "`sha256:` and 64 hex digits: the archive's")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream",
        description = "A gzip-compressed tar archive"),
    responses((status = 201, body = SourceView),
        (status = 413, description = "Over `api.limits.source_bytes`", body = crate::error::ErrorBody),
        (status = 422, description = "Not a snapshot, or not this one", body = crate::error::ErrorBody)))]
async fn put_source(
    state: axum::extract::State<ApiState>,
    Path((service, env, digest)): Path<(String, String, String)>,
    body: Body,
) -> ApiResult<(StatusCode, axum::Json<SourceView>)> {
    use futures_core::Stream;
    let id = source_service(&state, &service, &env, &digest).await?;
    let limit = state.max_source_bytes;
    // gzip adds a little to what does not compress.
    let wire_limit = limit.saturating_add(limit / 64).saturating_add(64 << 10);
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let put = state.platform.source_put(id, &digest, limit, rx);
    let forward = async move {
        let mut stream = body.into_data_stream();
        let mut total = 0u64;
        loop {
            let next = std::future::poll_fn(|cx| std::pin::Pin::new(&mut stream).poll_next(cx));
            let failed = match next.await {
                None => return Ok(()),
                Some(Err(e)) => ApiError::invalid(format!("the upload broke off: {e}")),
                Some(Ok(chunk)) => {
                    total = total.saturating_add(chunk.len() as u64);
                    if total <= wire_limit {
                        if tx.send(Ok(chunk)).await.is_err() {
                            // Refused already: its reason is the answer.
                            return Ok(());
                        }
                        continue;
                    }
                    ApiError::too_large(format!("the snapshot is over the limit of {limit} bytes"))
                }
            };
            let _ = tx.send(Err("the upload failed".to_owned())).await;
            return Err(failed);
        }
    };
    let (forwarded, put) = tokio::join!(forward, put);
    // What the client did wrong comes first: the platform saw only that it stopped.
    forwarded?;
    match put {
        Ok(()) => Ok((
            StatusCode::CREATED,
            axum::Json(SourceView { service, digest }),
        )),
        Err(SourceRefused::TooLarge(message)) => Err(ApiError::too_large(message)),
        Err(SourceRefused::Invalid(message)) => Err(ApiError::source_invalid(message)),
        Err(SourceRefused::Full) => Err(ApiError::insufficient_storage(
            "the code snapshot was not kept",
        )),
        Err(SourceRefused::Internal(cause)) => Err(ApiError::internal(cause)),
    }
}

/// Moves traffic back to an earlier revision (by default the one before the serving one).
#[utoipa::path(post, path = "/v1/services/{service}/environments/{env}/rollback",
    params(("service" = String, Path), ("env" = String, Path)),
    request_body = Option<RollbackRequest>,
    responses((status = 202, body = DeploymentView)))]
async fn rollback(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path((service, env)): Path<(String, String)>,
    Json(body): Json<RollbackRequest>,
) -> ApiResult<(StatusCode, axum::Json<DeploymentView>)> {
    let actor = caller.name.clone();
    let allow_all = state.allow_processes;
    let record = state
        .store(move |s| {
            let target = match body.to {
                Some(name) => s.revision_get(&name).map_err(|e| match e {
                    StoreError::NotFound { .. } => {
                        ApiError::not_found(format!("revision {name:?} not found")).field("to")
                    }
                    other => other.into(),
                })?,
                None => deploy::previous_revision(s, &service, &env)?,
            };
            if target.service != service || target.env != env {
                return Err(ApiError::invalid(format!(
                    "revision {:?} is not a revision of {service} in {env}",
                    target.name
                ))
                .field("to"));
            }
            deploy::check_processes_allowed(s, allow_all, &service, &target.artifact)?;
            let current = s.desired_get(&service, &env)?;
            if let Some(current) = current
                && let [only] = current.revisions.as_slice()
                && only.revision == target.name
            {
                return Err(ApiError::conflict(format!(
                    "{} already serves all of {service} in {env}: there is nothing to roll \
                     back; `runway revisions` lists the others",
                    target.name
                ))
                .field("to"));
            }
            let desired = [DesiredRevision {
                revision: target.name.clone(),
                instances: deploy::instances_of(&target.manifest, &env),
                weight: 100,
            }];
            Ok(s.record_rollback(&actor, &service, &env, &target.name, &desired)?)
        })
        .await?;
    state.platform.wake();
    Ok((StatusCode::ACCEPTED, axum::Json(record.deployment.into())))
}

/// A new revision of the one serving, with environment variables set or unset, rolled out
/// as a deploy of the same manifest and artifact (image digest or code snapshot) would be.
/// What is set here stays over the repository's variables at later deploys, until unset.
/// 409 when nothing is deployed; 400 (field `unset`) for a variable this did not set (the
/// manifest's, the repository's).
#[utoipa::path(post, path = "/v1/services/{service}/environments/{env}/variables",
    params(("service" = String, Path), ("env" = String, Path)), request_body = SetVariables,
    responses((status = 202, body = DeploymentView),
        (status = 422, description = "A variable's name is not one an environment can hold, or \
            the platform sets it", body = crate::error::ErrorBody)))]
async fn set_variables(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path((service, env)): Path<(String, String)>,
    Json(body): Json<SetVariables>,
) -> ApiResult<(StatusCode, axum::Json<DeploymentView>)> {
    known_env(&state, &env)?;
    if body.set.is_empty() && body.unset.is_empty() {
        return Err(ApiError::invalid("nothing to set or unset").field("set"));
    }
    if let Some(name) = body.unset.iter().find(|n| body.set.contains_key(*n)) {
        return Err(ApiError::invalid(format!("{name} is both set and unset")).field("unset"));
    }
    let (s2, e2) = (service.clone(), env.clone());
    let (serving, preview) = state
        .store(move |s| {
            service_env(s, &s2, &e2)?;
            let serving = deploy::serving(s, &s2, &e2)?.ok_or_else(|| {
                ApiError::conflict(format!(
                    "nothing is deployed for {s2} in {e2}: deploy it first (`runway deploy`)"
                ))
            })?;
            Ok((serving, crate::previews::preview_of(s, &s2)?))
        })
        .await?;
    let mut env_vars = serving.env_vars.clone();
    let mut set_vars = serving.set_vars.clone();
    for name in &body.unset {
        if set_vars.remove(name) {
            env_vars.remove(name);
            continue;
        }
        let in_manifest = serving
            .manifest
            .pointer("/spec/workload/env")
            .and_then(|env| env.get(name))
            .is_some();
        return Err(ApiError::invalid(if env_vars.contains_key(name) {
            format!(
                "{name} comes from the repository (.runway/env-{env}.yml), not `runway env \
                 set`: remove it there and deploy"
            )
        } else if in_manifest {
            format!("{name} is set by the manifest (spec.workload.env): change it there")
        } else {
            format!("{name} is not set in {}", serving.name)
        })
        .field("unset"));
    }
    set_vars.extend(body.set.keys().cloned());
    env_vars.extend(body.set);
    let request = DeployRequest {
        manifest: serving.manifest.clone(),
        env_vars,
        image: runway_store::artifact_image(&serving.artifact).map(str::to_owned),
        source: runway_store::artifact_source(&serving.artifact).map(str::to_owned),
        pause: body.pause,
        preview: None,
    };
    let deployment = deploy::deploy(
        &state,
        &caller,
        &service,
        &env,
        request,
        set_vars,
        preview.as_ref(),
    )
    .await?;
    Ok((StatusCode::ACCEPTED, axum::Json(deployment.into())))
}

/// Promotes the revision serving in `from` to `to`: same manifest, digest and environment
/// variables, a new revision there, which pins `to`'s latest version of each secret the
/// source uses. 400, naming them, when some are not set in `to`, or clash with a variable.
#[utoipa::path(post, path = "/v1/services/{service}/promote",
    params(("service" = String, Path)), request_body = PromoteRequest,
    responses((status = 202, body = DeploymentView)))]
async fn promote(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path(service): Path<String>,
    Json(body): Json<PromoteRequest>,
) -> ApiResult<(StatusCode, axum::Json<DeploymentView>)> {
    caller.check(
        runway_secrets::Need::Role(runway_secrets::Role::Viewer),
        Some(&service),
        Env::One(&body.from),
    )?;
    caller.allow(&service, Env::One(&body.to))?;
    let deployment = deploy::promote(&state, &caller, &service, body).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(deployment.into())))
}

/// Gives an operator's command to the progressive rollout in progress: pause, resume, abort
/// (all traffic back to the stable revision) or promote (to 100 % once ready). The controller
/// carries it out on its next pass; its events say when. 409 when no deployment is in
/// progress.
#[utoipa::path(post, path = "/v1/services/{service}/environments/{env}/rollout",
    params(("service" = String, Path), ("env" = String, Path)), request_body = RolloutRequest,
    responses((status = 202, body = DeploymentView),
        (status = 409, description = "No deployment is in progress", body = crate::error::ErrorBody)))]
async fn rollout_command(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path((service, env)): Path<(String, String)>,
    Json(body): Json<RolloutRequest>,
) -> ApiResult<(StatusCode, axum::Json<DeploymentView>)> {
    known_env(&state, &env)?;
    let actor = caller.name.clone();
    let deployment = state
        .store(move |s| {
            service_env(s, &service, &env)?;
            deploy::check_steerable(s, &service, &env)?;
            Ok(s.deployment_command(&actor, &service, &env, body.command.into())?)
        })
        .await?;
    state.platform.wake();
    Ok((StatusCode::ACCEPTED, axum::Json(deployment.into())))
}

/// What runs for a service in an environment: desired state, routes, revisions, instances.
#[utoipa::path(get, path = "/v1/services/{service}/environments/{env}/status",
    params(("service" = String, Path), ("env" = String, Path)),
    responses((status = 200, body = StatusView)))]
async fn status(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path((service, env)): Path<(String, String)>,
) -> JsonResponse<StatusView> {
    let mut view = status_view(&state, service, env).await?;
    if caller.is_admin() {
        view.registry = state.registry.as_ref().map(|registry| {
            let usage = registry.usage();
            crate::types::RegistryUsageView {
                bytes: usage.bytes,
                blobs: usage.blobs,
                max_bytes: usage.max_bytes,
            }
        });
    }
    Ok(axum::Json(view))
}

/// The status document of `service` in `env` (for `GET …/status` and the watch stream); 404
/// when the service or its environment is not there.
pub(crate) async fn status_view(
    state: &ApiState,
    service: String,
    env: String,
) -> ApiResult<StatusView> {
    let (s2, e2) = (service.clone(), env.clone());
    let (desired, maintenance) = state
        .store(move |s| {
            service_env(s, &s2, &e2)?;
            Ok((s.desired_get(&s2, &e2)?, s.maintenance_get(&s2, &e2)?))
        })
        .await?;
    let parts = state.platform.status(&service, &env).await;
    Ok(StatusView {
        desired: desired
            .map(|d| d.revisions.into_iter().map(Into::into).collect())
            .unwrap_or_default(),
        service,
        env,
        url: parts.url,
        routes: parts.routes,
        revisions: parts.revisions,
        instances: parts.instances,
        scaling: parts.scaling,
        rollout: parts.rollout,
        maintenance: maintenance.map(Into::into),
        control_plane: parts.control_plane,
        registry: None,
        warnings: parts.warnings,
    })
}

/// The last lines the service's instances wrote; with `follow=true`, NDJSON until the client
/// goes.
#[utoipa::path(get, path = "/v1/services/{service}/environments/{env}/logs",
    params(("service" = String, Path), ("env" = String, Path), LogsQuery),
    responses((status = 200, description = "The lines, oldest first; NDJSON with follow=true",
        content((Vec<LogLine> = "application/json"), (LogLine = "application/x-ndjson")))))]
async fn logs(
    state: axum::extract::State<ApiState>,
    Path((service, env)): Path<(String, String)>,
    Query(query): Query<LogsQuery>,
) -> ApiResult<Response> {
    let (s2, e2) = (service.clone(), env.clone());
    state.store(move |s| service_env(s, &s2, &e2)).await?;
    in_range(query.lines, 0, 10_000, "lines")?;
    let since = query.since.as_deref().map(since_time).transpose()?;
    let lines = query
        .lines
        .unwrap_or(if since.is_some() { 10_000 } else { 100 });
    let instance = query.instance.as_deref();
    if query.previous && query.follow {
        return Err(
            ApiError::invalid("`previous` output has ended: it cannot be followed").field("follow"),
        );
    }
    if !query.follow {
        let mut lines = state
            .platform
            .logs(&service, &env, instance, lines, query.previous)
            .await
            .map_err(|e| ApiError::invalid(format!("cannot read logs: {e}")))?;
        lines.retain(|line| crate::stream::written_since(line, since));
        return Ok(axum::Json(lines).into_response());
    }
    let receiver = state
        .platform
        .follow_logs(&service, &env, instance, lines)
        .await
        .map_err(|e| ApiError::invalid(format!("cannot follow logs: {e}")))?;
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(crate::stream::NdjsonLines::new(receiver, since)),
    )
        .into_response())
}

/// Sets a secret: a new version, sealed for that version before it reaches the store. The
/// value is never returned.
#[utoipa::path(put, path = "/v1/services/{service}/environments/{env}/secrets/{name}",
    params(("service" = String, Path), ("env" = String, Path), ("name" = String, Path)),
    request_body = SetSecret, responses((status = 200, body = SecretInfoView)))]
async fn set_secret(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path((service, env, name)): Path<(String, String, String)>,
    Json(body): Json<SetSecret>,
) -> JsonResponse<SecretInfoView> {
    runway_secrets::validate_name(&name)
        .map_err(|e| ApiError::invalid(e.to_string()).field("name"))?;
    refuse_with_vault(&state, &service, &env, &name)?;
    let value = SecretValue::from(body.value);
    value
        .check()
        .map_err(|e| ApiError::invalid(e.to_string()).field("value"))?;
    let actor = caller.name.clone();
    let sealer = std::sync::Arc::clone(&state.sealer);
    let info = state
        .store(move |s| {
            deploy::set_secret(s, &sealer, &actor, [&service, &env, &name], &value, None)
        })
        .await?;
    Ok(axum::Json(info.into()))
}

/// With `secrets.vault`, a secret is set in Vault, where the next deploy reads it: a value set
/// here would be replaced by Vault's at that deploy.
fn refuse_with_vault(state: &ApiState, service: &str, env: &str, name: &str) -> ApiResult<()> {
    match &state.vault {
        Some(vault) => Err(ApiError::conflict(format!(
            "this server reads secrets from Vault (secrets.vault): set {name} at {} \
             (`bao kv put -mount={} ... value=...`); the next deploy takes it",
            vault.config().place(service, env, name),
            vault.config().mount
        ))),
        None => Ok(()),
    }
}

/// Deletes a secret: it leaves the listing; revisions that pinned a version keep it.
#[utoipa::path(delete, path = "/v1/services/{service}/environments/{env}/secrets/{name}",
    params(("service" = String, Path), ("env" = String, Path), ("name" = String, Path)),
    responses((status = 204, description = "Deleted")))]
async fn delete_secret(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path((service, env, name)): Path<(String, String, String)>,
) -> ApiResult<StatusCode> {
    refuse_with_vault(&state, &service, &env, &name)?;
    let actor = caller.name.clone();
    state
        .store(move |s| Ok(s.secret_unset(&actor, &service, &env, &name)?))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The secrets set for a service in an environment: names and versions, never values.
#[utoipa::path(get, path = "/v1/services/{service}/environments/{env}/secrets",
    params(("service" = String, Path), ("env" = String, Path)),
    responses((status = 200, body = Vec<SecretInfoView>)))]
async fn list_secrets(
    state: axum::extract::State<ApiState>,
    Path((service, env)): Path<(String, String)>,
) -> JsonResponse<Vec<SecretInfoView>> {
    let list = state
        .store(move |s| Ok(s.secret_list(&service, &env)?))
        .await?;
    Ok(axum::Json(list.into_iter().map(Into::into).collect()))
}

/// Creates a token. Its text is in this answer only. An admin makes any; a maintainer makes
/// tokens on the services it maintains, in the environments it maintains them in.
#[utoipa::path(post, path = "/v1/tokens", request_body = CreateToken,
    responses((status = 201, body = CreatedToken)))]
async fn create_token(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Json(body): Json<CreateToken>,
) -> ApiResult<(StatusCode, axum::Json<CreatedToken>)> {
    if body.name.trim().is_empty() {
        return Err(ApiError::invalid("a token needs a name").field("name"));
    }
    // The audit log tells people from the platform by these names.
    if runway_store::PLATFORM_ACTORS.contains(&body.name.trim()) {
        return Err(ApiError::invalid(format!(
            "{:?} is the platform's own name in the audit log: choose another",
            body.name.trim()
        ))
        .field("name"));
    }
    in_range(
        body.expires_in_seconds,
        1,
        MAX_EXPIRY_SECONDS,
        "expires_in_seconds",
    )?;
    let expires_at = body.expires_in_seconds.map(|seconds| {
        // In range: at most ten years, so the product fits.
        Timestamp::now().add_millis(i64::try_from(seconds * 1000).unwrap_or(i64::MAX))
    });
    let scope = body.scope.scope()?;
    may_manage(&caller, &scope)?;
    // A token made by another that expires expires no later, and one made by a non-admin
    // goes with its maker when that is revoked: a role lent for a while is not kept.
    let limit = (!caller.is_admin())
        .then_some(caller.expires_at)
        .flatten()
        .and_then(Timestamp::from_unix_millis);
    if let Some(limit) = limit
        && expires_at.is_none_or(|at| at > limit)
    {
        return Err(ApiError::invalid(format!(
            "this token expires at {limit}: one it makes expires no later (give \
             expires_in_seconds)"
        ))
        .field("expires_in_seconds"));
    }
    let parent = (!caller.is_admin() && caller.id != 0).then_some(caller.id);
    let kind = match &scope {
        TokenScope::Admin => TokenKind::Admin,
        TokenScope::Deploy { .. } | TokenScope::Grant { .. } | TokenScope::Person { .. } => {
            TokenKind::Deploy
        }
    };
    let (text, hash) = runway_secrets::Token::generate(kind)
        .map_err(|e| ApiError::internal(format!("generating a token: {e}")))?;
    let actor = caller.name.clone();
    let name = body.name;
    let token = state
        .store(move |s| {
            check_token_scope(s, &scope)?;
            let new = NewToken {
                name,
                hash: hash.as_bytes().to_vec(),
                scope,
                expires_at,
                parent,
            };
            Ok(s.token_create(&actor, &new)?)
        })
        .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(CreatedToken {
            token: text.expose().to_owned(),
            info: token.into(),
        }),
    ))
}

/// Whether `caller` may make, see and revoke tokens of `scope`: an admin any; a maintainer
/// those on a service it maintains wherever the token reaches.
fn may_manage(caller: &Caller, scope: &TokenScope) -> ApiResult<()> {
    let (service, environments) = match scope {
        TokenScope::Deploy {
            service,
            environments,
        } => (service, Some(environments)),
        TokenScope::Grant { grant } => match &grant.on {
            Target::Service(service) => (service, grant.environments.as_ref()),
            Target::Team(_) | Target::AnyService => {
                return caller.check(runway_secrets::Need::Admin, None, Env::Whole);
            }
        },
        TokenScope::Admin | TokenScope::Person { .. } => {
            return caller.check(runway_secrets::Need::Admin, None, Env::Whole);
        }
    };
    match environments {
        Some(environments) => environments
            .iter()
            .try_for_each(|env| caller.allow(service, Env::One(env))),
        None => caller.allow(service, Env::Whole),
    }
}

/// A token's service (or team) exists, with the environments it names.
fn check_token_scope(s: &dyn runway_store::Store, scope: &TokenScope) -> ApiResult<()> {
    if let Some(team) = scope.team() {
        s.team_get(team).map_err(|e| match e {
            StoreError::NotFound { .. } => {
                ApiError::not_found(format!("team {team:?} not found")).field("scope.role.team")
            }
            other => other.into(),
        })?;
    }
    let (Some(service), field) = (
        scope.service(),
        match scope {
            TokenScope::Deploy { .. } => "scope.deploy",
            _ => "scope.role",
        },
    ) else {
        return Ok(());
    };
    let environments = match scope {
        TokenScope::Deploy { environments, .. } => Some(environments),
        TokenScope::Grant { grant } => grant.environments.as_ref(),
        TokenScope::Admin | TokenScope::Person { .. } => None,
    };
    let found = s.service_get(service).map_err(|e| match e {
        StoreError::NotFound { .. } => {
            ApiError::not_found(format!("service {service:?} not found"))
                .field(format!("{field}.service"))
        }
        other => other.into(),
    })?;
    if let Some(env) = environments
        .into_iter()
        .flatten()
        .find(|e| !found.environments.contains(e))
    {
        return Err(
            ApiError::invalid(format!("service {service:?} has no environment {env:?}"))
                .field(format!("{field}.environments")),
        );
    }
    Ok(())
}

/// The tokens the caller may manage (an admin's: all); never a token's text or hash.
#[utoipa::path(get, path = "/v1/tokens", responses((status = 200, body = Vec<TokenInfo>)))]
async fn list_tokens(
    caller: Caller,
    state: axum::extract::State<ApiState>,
) -> JsonResponse<Vec<TokenInfo>> {
    let list = state.store(|s| Ok(s.token_list()?)).await?;
    Ok(axum::Json(
        list.into_iter()
            .filter(|t| may_manage(&caller, &t.scope).is_ok())
            .map(Into::into)
            .collect(),
    ))
}

/// Revokes a token (one the caller may manage; any other is not found).
#[utoipa::path(delete, path = "/v1/tokens/{id}", params(("id" = i64, Path)),
    responses((status = 200, body = TokenInfo)))]
async fn revoke_token(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path(id): Path<i64>,
) -> JsonResponse<TokenInfo> {
    let not_found = || ApiError::not_found(format!("token {id} not found"));
    if !caller.is_admin() {
        let tokens = state.store(|s| Ok(s.token_list()?)).await?;
        let found = tokens.iter().find(|t| t.id == id).ok_or_else(not_found)?;
        may_manage(&caller, &found.scope).map_err(|_| not_found())?;
    }
    let actor = caller.name.clone();
    let token = state
        .store(move |s| Ok(s.token_revoke(&actor, id)?))
        .await?;
    Ok(axum::Json(token.into()))
}

/// The audit log (admin), oldest first; filtered by service, actor, action, time and who (people
/// or the platform) when asked.
#[utoipa::path(get, path = "/v1/audit", params(AuditQuery),
    responses((status = 200, body = Vec<AuditEntryView>)))]
async fn audit(
    state: axum::extract::State<ApiState>,
    Query(query): Query<AuditQuery>,
) -> JsonResponse<Vec<AuditEntryView>> {
    in_range(query.after, 0, i64::MAX, "after")?;
    in_range(query.limit, 1, 1000, "limit")?;
    in_range(query.last, 1, 1000, "last")?;
    let last = query.last;
    if last.is_some() && (query.after.is_some() || query.limit.is_some()) {
        return Err(ApiError::invalid("last is not given with after or limit").field("last"));
    }
    let (after, limit) = match last {
        Some(last) => (None, last),
        None => (Some(query.after.unwrap_or(0)), query.limit.unwrap_or(100)),
    };
    let since = query.since.as_deref().map(since_time).transpose()?;
    let filter = runway_store::AuditFilter {
        service: query.service,
        actor: query.actor,
        action: query.action,
        since,
        by: query.by.map(|by| match by {
            AuditBy::People => runway_store::AuditBy::People,
            AuditBy::Platform => runway_store::AuditBy::Platform,
        }),
    };
    let list = state
        .store(move |s| Ok(s.audit_find(&filter, after, limit)?))
        .await?;
    Ok(axum::Json(list.into_iter().map(Into::into).collect()))
}
