//! Maintenance: `GET`, `PUT` and `DELETE /v1/services/{service}/environments/{env}/maintenance`.
//!
//! A service in maintenance is answered by the ingress with a 503 carrying its message and
//! `Retry-After`, but for the clients its `allow` names; its instances keep running, and
//! deploys go on. The state is the store's, so it outlives the server and reaches every
//! ingress with the next table.

use axum::http::StatusCode;

use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path};
use crate::state::ApiState;
use crate::types::{MaintenanceView, SetMaintenance};

/// The longest message clients are given.
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// The most networks let through.
pub const MAX_ALLOW: usize = 256;
/// The longest `Retry-After`, a day.
pub const MAX_RETRY_AFTER_SECONDS: u32 = 86_400;
/// The code of the 404 a service that is not in maintenance gets.
pub const NOT_IN_MAINTENANCE: &str = "not_in_maintenance";
/// `Retry-After` when none is given.
pub const DEFAULT_RETRY_AFTER_SECONDS: u32 = 300;

/// The request checked: 400 naming the field that is wrong.
fn check(body: SetMaintenance) -> ApiResult<runway_store::Maintenance> {
    if body.message.len() > MAX_MESSAGE_BYTES {
        return Err(ApiError::invalid(format!(
            "the message is {} bytes, more than {MAX_MESSAGE_BYTES}",
            body.message.len()
        ))
        .field("message"));
    }
    if body.allow.len() > MAX_ALLOW {
        return Err(ApiError::invalid(format!(
            "{} networks, more than {MAX_ALLOW}",
            body.allow.len()
        ))
        .field("allow"));
    }
    let mut allow = Vec::with_capacity(body.allow.len());
    for (i, network) in body.allow.iter().enumerate() {
        let parsed = runway_manifest::egress::client_network(network).map_err(|why| {
            ApiError::invalid(format!("{network:?} is not a network: {why}"))
                .field(format!("allow[{i}]"))
        })?;
        allow.push(parsed.to_string());
    }
    let retry_after_seconds = body
        .retry_after_seconds
        .unwrap_or(DEFAULT_RETRY_AFTER_SECONDS);
    if retry_after_seconds > MAX_RETRY_AFTER_SECONDS {
        return Err(ApiError::invalid(format!(
            "{retry_after_seconds} s is more than a day ({MAX_RETRY_AFTER_SECONDS} s)"
        ))
        .field("retry_after_seconds"));
    }
    Ok(runway_store::Maintenance {
        service: String::new(),
        env: String::new(),
        message: body.message,
        allow,
        retry_after_seconds,
        since: runway_store::Timestamp::now(),
        set_by: String::new(),
    })
}

/// Whether the service is in maintenance in the environment: 404 when it is not.
#[utoipa::path(get, path = "/v1/services/{service}/environments/{env}/maintenance",
    params(("service" = String, Path), ("env" = String, Path)),
    responses((status = 200, body = MaintenanceView),
        (status = 404, description = "Not in maintenance (code `not_in_maintenance`), or no such service or environment (`not_found`)")))]
pub(crate) async fn get_maintenance(
    state: axum::extract::State<ApiState>,
    Path((service, env)): Path<(String, String)>,
) -> ApiResult<axum::Json<MaintenanceView>> {
    let (s2, e2) = (service.clone(), env.clone());
    let found = state
        .store(move |s| Ok(s.maintenance_get(&s2, &e2)?))
        .await?;
    found.map(|m| axum::Json(m.into())).ok_or_else(|| {
        ApiError::not_in_state(
            NOT_IN_MAINTENANCE,
            format!("{service} is not in maintenance in {env}"),
        )
    })
}

/// Puts the service in maintenance in the environment, or changes its message, networks or
/// `Retry-After` (a maintainer's act). Its requests get a 503 within a table's propagation.
#[utoipa::path(put, path = "/v1/services/{service}/environments/{env}/maintenance",
    params(("service" = String, Path), ("env" = String, Path)),
    request_body = SetMaintenance, responses((status = 200, body = MaintenanceView)))]
pub(crate) async fn set_maintenance(
    caller: crate::auth::Caller,
    state: axum::extract::State<ApiState>,
    Path((service, env)): Path<(String, String)>,
    Json(body): Json<SetMaintenance>,
) -> ApiResult<axum::Json<MaintenanceView>> {
    let maintenance = check(body)?;
    let actor = caller.name.clone();
    let set = state
        .store(move |s| Ok(s.maintenance_set(&actor, &service, &env, Some(&maintenance))?))
        .await?
        .ok_or_else(|| ApiError::internal("maintenance was set but cannot be read back"))?;
    state.platform.edge_changed();
    Ok(axum::Json(set.into()))
}

/// Takes the service out of maintenance in the environment; 204 also when it was not in it.
#[utoipa::path(delete, path = "/v1/services/{service}/environments/{env}/maintenance",
    params(("service" = String, Path), ("env" = String, Path)),
    responses((status = 204, description = "Out of maintenance")))]
pub(crate) async fn end_maintenance(
    caller: crate::auth::Caller,
    state: axum::extract::State<ApiState>,
    Path((service, env)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let actor = caller.name.clone();
    state
        .store(move |s| Ok(s.maintenance_set(&actor, &service, &env, None)?))
        .await?;
    state.platform.edge_changed();
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn a_bad_request_names_its_field() {
        let cases = [
            (
                SetMaintenance {
                    message: "x".repeat(MAX_MESSAGE_BYTES + 1),
                    ..SetMaintenance::default()
                },
                "message",
            ),
            (
                SetMaintenance {
                    allow: vec!["10.0.0.0/8".into(), "10.0.0.1/8".into()],
                    ..SetMaintenance::default()
                },
                "allow[1]",
            ),
            (
                SetMaintenance {
                    retry_after_seconds: Some(MAX_RETRY_AFTER_SECONDS + 1),
                    ..SetMaintenance::default()
                },
                "retry_after_seconds",
            ),
        ];
        for (body, field) in cases {
            let error = format!("{:?}", check(body).unwrap_err());
            assert!(
                error.contains(&format!("field: Some({field:?})")),
                "{error}"
            );
        }
        let ok = check(SetMaintenance {
            allow: vec!["2001:db8::1".into()],
            ..SetMaintenance::default()
        })
        .unwrap();
        assert_eq!(ok.allow, vec!["2001:db8::1/128".to_owned()]);
        assert_eq!(ok.retry_after_seconds, DEFAULT_RETRY_AFTER_SECONDS);
    }
}
