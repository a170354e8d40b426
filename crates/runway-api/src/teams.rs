//! Teams: `GET /v1/teams`, `GET`, `PUT` and `DELETE /v1/teams/{team}`. An admin makes a team
//! and says who is in it (people by name, or a sign-in provider's groups) with which role on
//! the services it owns; a service is given to a team by `PATCH /v1/services/{service}`.
//! Whoever has a role through a team sees it.

use axum::http::StatusCode;
use runway_secrets::{Role, Scope, Target};

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path};
use crate::routes::{LABEL_RULE, is_label};
use crate::state::ApiState;
use crate::types::{PutTeam, TeamView};

/// Whether `caller` sees team `team`: an admin every team, anyone else the teams it has a
/// role through.
fn sees(caller: &Caller, team: &str) -> bool {
    match &caller.policy {
        Scope::Admin => true,
        Scope::Grants { grants, .. } => grants
            .iter()
            .any(|g| matches!(&g.on, Target::Team(t) if t == team) && g.role >= Role::Viewer),
    }
}

/// The teams the caller sees.
#[utoipa::path(get, path = "/v1/teams", responses((status = 200, body = Vec<TeamView>)))]
pub(crate) async fn list_teams(
    caller: Caller,
    state: axum::extract::State<ApiState>,
) -> ApiResult<axum::Json<Vec<TeamView>>> {
    let (teams, services) = state
        .store(|s| Ok((s.team_list()?, s.service_list()?)))
        .await?;
    Ok(axum::Json(
        teams
            .into_iter()
            .filter(|t| sees(&caller, &t.name))
            .map(|t| TeamView::new(t, &services))
            .collect(),
    ))
}

/// One team; another one is not found.
#[utoipa::path(get, path = "/v1/teams/{team}", params(("team" = String, Path)),
    responses((status = 200, body = TeamView)))]
pub(crate) async fn get_team(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path(team): Path<String>,
) -> ApiResult<axum::Json<TeamView>> {
    if !sees(&caller, &team) {
        return Err(ApiError::not_found(format!("team {team:?} not found")));
    }
    let (found, services) = state
        .store(move |s| Ok((s.team_get(&team)?, s.service_list()?)))
        .await?;
    Ok(axum::Json(TeamView::new(found, &services)))
}

/// Makes a team with these members, or replaces the members it has (admin); no body is a
/// team with no one in it.
#[utoipa::path(put, path = "/v1/teams/{team}", params(("team" = String, Path)),
    request_body = Option<PutTeam>, responses((status = 200, body = TeamView)))]
pub(crate) async fn put_team(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path(team): Path<String>,
    Json(body): Json<PutTeam>,
) -> ApiResult<axum::Json<TeamView>> {
    if !is_label(&team) {
        return Err(ApiError::invalid(format!(
            "team name {team:?} is not a DNS label ({LABEL_RULE})"
        ))
        .field("team"));
    }
    for (i, member) in body.members.iter().enumerate() {
        if let Some(env) = member
            .environments
            .iter()
            .flatten()
            .find(|e| !state.environments.contains(e))
        {
            return Err(ApiError::invalid(format!(
                "environment {env:?} is not one of this server's: {}",
                state.environments.join(", ")
            ))
            .field(format!("members[{i}].environments")));
        }
    }
    let members: Vec<runway_store::TeamMember> = body.members.into_iter().map(Into::into).collect();
    let actor = caller.name.clone();
    let (made, services) = state
        .store(move |s| {
            let made = s.team_put(&actor, &team, &members).map_err(|e| match e {
                runway_store::StoreError::Invalid(message) => {
                    ApiError::invalid(message).field("members")
                }
                other => other.into(),
            })?;
            Ok((made, s.service_list()?))
        })
        .await?;
    Ok(axum::Json(TeamView::new(made, &services)))
}

/// Removes a team (admin): 409 while it owns services. Its tokens are revoked.
#[utoipa::path(delete, path = "/v1/teams/{team}", params(("team" = String, Path)),
    responses((status = 204)))]
pub(crate) async fn delete_team(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path(team): Path<String>,
) -> ApiResult<StatusCode> {
    let actor = caller.name.clone();
    state
        .store(move |s| Ok(s.team_delete(&actor, &team)?))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
