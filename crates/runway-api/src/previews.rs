//! Preview environments: a deploy with `preview: NAME` (`runway deploy --preview NAME`),
//! `GET /v1/services/{service}/previews`, `DELETE /v1/services/{service}/previews/{name}` and
//! `GET /v1/previews`.
//!
//! Preview `mr-12` of `app` is the service `mr-12--app` in environment `preview`
//! ([`runway_secrets::preview`]), served at `mr-12--app.preview.<domain>`: everything a
//! service has (revisions, routes, scale to zero, status, logs) it has as one. Its deploys take
//! the manifest of `app` for a base environment, run with `app`'s `preview` secrets (none for a
//! merge request from a fork) and scale to zero when idle. Its first deploy creates it, each
//! deploy extends its life (`api.previews.ttl_seconds`), and a service has at most
//! `api.previews.max_per_service`. Acting on previews needs leave to act in `preview`, which a
//! GitLab job of a review environment (`review/…`) is narrowed to.

use axum::http::StatusCode;
use runway_secrets::preview;
use runway_store::NewPreview;
use serde_json::json;

use runway_secrets::Env;

use crate::auth::Caller;
use crate::deploy::{self, PreviewOf};
use crate::error::{ApiError, ApiResult};
use crate::extract::Path;
use crate::routes::{LABEL_RULE, is_label, known_env, service_env};
use crate::state::ApiState;
use crate::types::{Decommissioned, DeployRequest, DeploymentView, PreviewView};

/// Deploys `body` as preview `name` of `parent`, with the settings of `base_env` (the path's
/// environment): see the module's documentation.
pub(crate) async fn deploy_preview(
    caller: &Caller,
    state: &ApiState,
    parent: &str,
    base_env: &str,
    name: &str,
    mut body: DeployRequest,
) -> ApiResult<(StatusCode, axum::Json<DeploymentView>)> {
    let env = preview::ENVIRONMENT;
    caller
        .allow(parent, Env::One(env))
        .map_err(|e| e.field("preview"))?;
    check_enabled(state)?;
    known_env(state, base_env)?;
    if base_env == env {
        return Err(ApiError::invalid(format!(
            "a preview takes the settings of another of {parent}'s environments: deploy it \
             from the one it is a preview of (`--env staging --preview {name}`)"
        ))
        .field("env"));
    }
    let service = preview_service(parent, name)?;
    let new = NewPreview {
        parent: parent.to_owned(),
        name: name.to_owned(),
        base_env: base_env.to_owned(),
        origin: json!({ "deployed_by": caller.name, "fork": caller.fork }),
        ttl: state.previews.ttl(),
        max_per_parent: state.previews.max_per_service,
    };
    let actor = caller.name.clone();
    let (parent_name, base) = (parent.to_owned(), base_env.to_owned());
    let (record, created, serving) = state
        .store(move |s| {
            onboarded_for_previews(s, &parent_name)?;
            service_env(s, &parent_name, &base)?;
            let (record, created) = s.preview_put(&actor, &new)?;
            let serving = deploy::serving(s, &record.service, env)?;
            Ok((record, created, serving))
        })
        .await?;
    body.preview = None;
    let (body, set_vars, changes) = deploy::keep_set_variables(body, serving.as_ref());
    let of = PreviewOf {
        parent: parent.to_owned(),
        base_env: base_env.to_owned(),
        secrets: !caller.fork,
    };
    let deployed = deploy::deploy(state, caller, &service, env, body, set_vars, Some(&of)).await;
    let deployment = match deployed {
        Ok(deployment) => deployment,
        Err(refused) => {
            // A first deploy refused leaves no preview that never ran.
            if created {
                let actor = caller.name.clone();
                let gone = state
                    .store(move |s| Ok(s.service_decommission(&actor, &service)?))
                    .await;
                if let Err(e) = gone {
                    tracing::warn!(error = %e.message(), "a refused preview was not removed");
                }
            }
            return Err(refused);
        }
    };
    let url = state.platform.url(&record.service, env);
    let mut view = DeploymentView::from(deployment);
    view.variables = Some(changes).filter(|changes| !changes.is_empty());
    view.preview = Some(PreviewView::new(record, url));
    Ok((StatusCode::ACCEPTED, axum::Json(view)))
}

/// A service's previews.
#[utoipa::path(get, path = "/v1/services/{service}/previews",
    params(("service" = String, Path)), responses((status = 200, body = Vec<PreviewView>)))]
pub(crate) async fn list_previews(
    state: axum::extract::State<ApiState>,
    Path(service): Path<String>,
) -> ApiResult<axum::Json<Vec<PreviewView>>> {
    let previews = state
        .store(move |s| {
            s.service_get(&service)?;
            Ok(s.preview_list(Some(&service))?)
        })
        .await?;
    Ok(axum::Json(views(&state, previews)))
}

/// The previews of every service the caller may see.
#[utoipa::path(get, path = "/v1/previews", responses((status = 200, body = Vec<PreviewView>)))]
pub(crate) async fn list_all_previews(
    caller: Caller,
    state: axum::extract::State<ApiState>,
) -> ApiResult<axum::Json<Vec<PreviewView>>> {
    let previews = state.store(|s| Ok(s.preview_list(None)?)).await?;
    let previews = previews
        .into_iter()
        .filter(|p| caller.shows(&p.service, Env::One(preview::ENVIRONMENT)))
        .collect();
    Ok(axum::Json(views(&state, previews)))
}

/// Stops a preview: its service is decommissioned, so its instances stop and its revisions go.
#[utoipa::path(delete, path = "/v1/services/{service}/previews/{name}",
    params(("service" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = Decommissioned)))]
pub(crate) async fn stop_preview(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path((parent, name)): Path<(String, String)>,
) -> ApiResult<axum::Json<Decommissioned>> {
    let missing = || ApiError::not_found(format!("{parent} has no preview {name:?}"));
    // A name no preview can have names none there is.
    let service = preview_service(&parent, &name).map_err(|_| missing())?;
    let (actor, target) = (caller.name.clone(), service.clone());
    let gone = missing();
    state
        .store(move |s| {
            if !s
                .preview_list(Some(&parent))?
                .iter()
                .any(|p| p.service == target)
            {
                return Err(gone);
            }
            Ok(s.service_decommission(&actor, &target)?)
        })
        .await?;
    state.platform.wake();
    Ok(axum::Json(Decommissioned {
        decommissioned: service,
    }))
}

/// How a deploy of `service` that is a preview (a change of its variables) takes its
/// settings and secrets: as its last deploy did. `None` for a service of its own.
pub(crate) fn preview_of(
    s: &dyn runway_store::Store,
    service: &str,
) -> ApiResult<Option<PreviewOf>> {
    let Some((_, parent)) = preview::split(service) else {
        return Ok(None);
    };
    Ok(s.preview_list(Some(parent))?
        .into_iter()
        .find(|p| p.service == service)
        .map(|p| PreviewOf {
            secrets: p.origin["fork"] != true,
            parent: p.parent,
            base_env: p.base_env,
        }))
}

fn views(state: &ApiState, previews: Vec<runway_store::Preview>) -> Vec<PreviewView> {
    previews
        .into_iter()
        .map(|p| {
            let url = state.platform.url(&p.service, preview::ENVIRONMENT);
            PreviewView::new(p, url)
        })
        .collect()
}

/// 404 on a server whose environments do not list `preview`.
fn check_enabled(state: &ApiState) -> ApiResult<()> {
    if state.has_previews() {
        return Ok(());
    }
    Err(ApiError::not_found(format!(
        "this server has no previews: its configuration's `environments` ({}) does not list \
         `{}`",
        state.environments.join(", "),
        preview::ENVIRONMENT
    ))
    .field("preview"))
}

/// The service of preview `name` of `parent`; 400 naming `preview` when it cannot be one.
fn preview_service(parent: &str, name: &str) -> ApiResult<String> {
    if preview::split(parent).is_some() {
        return Err(ApiError::invalid(format!(
            "{parent} is a preview: a preview has no previews of its own"
        ))
        .field("preview"));
    }
    if !is_label(name) || name.contains(preview::SEPARATOR) {
        return Err(ApiError::invalid(format!(
            "preview name {name:?} is not a DNS label without `{}` ({LABEL_RULE})",
            preview::SEPARATOR
        ))
        .field("preview"));
    }
    let service = preview::service_name(name, parent);
    if !is_label(&service) {
        return Err(ApiError::invalid(format!(
            "preview name {name:?} is too long: `{service}` is over 63 characters, the most a \
             host name's label has; give at most {} characters",
            63_usize.saturating_sub(parent.len() + preview::SEPARATOR.len())
        ))
        .field("preview"));
    }
    Ok(service)
}

/// 409 unless `parent` is onboarded in `preview`: which services have previews is the
/// inventory's choice.
fn onboarded_for_previews(s: &dyn runway_store::Store, parent: &str) -> ApiResult<()> {
    let environments = s.service_get(parent)?.environments;
    if environments.iter().any(|e| e == preview::ENVIRONMENT) {
        return Ok(());
    }
    Err(ApiError::conflict(format!(
        "{parent} has no previews: it is not onboarded in `{env}` (it has {}); an admin adds \
         it with `runway services update {parent} --add-env {env}`",
        environments.join(", "),
        env = preview::ENVIRONMENT
    ))
    .field("preview"))
}
