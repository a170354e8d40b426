//! `GET /v1/services/{service}/environments/{env}/watch`: a service's state in an
//! environment as server-sent events, for the console to follow without reloading.
//!
//! A task per stream reads what `GET …/status`, `GET …/deployments` and the newest
//! deployment's events give, once a second, and sends only what changed:
//!
//! - `status`: the status document ([`StatusView`](crate::types::StatusView)), whole;
//! - `deployments`: the 20 newest deployments ([`DeploymentView`](crate::types::DeploymentView)s);
//! - `deployment_events`: the newest deployment's events not sent yet
//!   ([`WatchEvents`](crate::types::WatchEvents));
//! - `end`: why the stream ends (the token was revoked or expired, the service or its
//!   environment went), as text; the stream then closes.
//!
//! Everything is sent once at the start, so a client that reconnects (as `EventSource` does
//! by itself) starts over from a whole picture. A comment every 15 s keeps proxies from
//! closing a quiet stream. The task ends when the client goes; it looks again each second
//! whether the token still works, so signing out or revoking a token ends its streams too.

use std::convert::Infallible;
use std::time::Duration;

use axum::http::{HeaderMap, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::Path;
use crate::state::ApiState;
use crate::types::{DeploymentView, WatchEvents};

/// How often the state is read.
const POLL: Duration = Duration::from_secs(1);

/// How often a quiet stream gets a comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How many deployments the `deployments` event lists.
const DEPLOYMENTS: u32 = 20;

/// Follows a service in an environment: server-sent events (`status`, `deployments`,
/// `deployment_events`, `end`) whenever what they carry changes, read once a second. Needs
/// `Accept: text/event-stream` (400 otherwise: `GET …/status` answers once).
#[utoipa::path(get, path = "/v1/services/{service}/environments/{env}/watch",
    params(("service" = String, Path), ("env" = String, Path)),
    responses((status = 200, content_type = "text/event-stream", body = crate::types::WatchEvent,
        description = "Server-sent events, each as its schema says: `status` (a StatusView), \
            `deployments` (the 20 newest DeploymentViews), `deployment_events` (a \
            WatchEvents), `end` (why the stream ends, as text)")))]
pub(crate) async fn watch(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path((service, env)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let (s2, e2) = (service.clone(), env.clone());
    state
        .store(move |s| crate::routes::service_env(s, &s2, &e2))
        .await?;
    let streams = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"));
    if !streams {
        return Err(ApiError::invalid(
            "this route streams server-sent events: send `Accept: text/event-stream` \
             (GET …/status answers once)",
        )
        .field("accept"));
    }
    let (tx, rx) = mpsc::channel::<Event>(16);
    let span = tracing::info_span!("watch", service = %service, env = %env);
    tokio::spawn(tracing::Instrument::instrument(
        follow(state.0.clone(), caller, service, env, tx),
        span,
    ));
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|event| (Ok::<_, Infallible>(event), rx))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// What was sent last, to send only changes.
#[derive(Default)]
struct Sent {
    status: String,
    deployments: String,
    /// The newest deployment, and how many of its events were sent.
    events: Option<(i64, usize)>,
}

/// Reads and sends until the client goes or the stream must end.
async fn follow(
    state: ApiState,
    caller: Caller,
    service: String,
    env: String,
    tx: mpsc::Sender<Event>,
) {
    let mut sent = Sent::default();
    loop {
        let next = match still_allowed(&state, &caller).await {
            Err(reason) => Some(reason),
            Ok(()) => round(&state, &service, &env, &mut sent).await,
        };
        let ended = match next {
            Some(Step::End(reason)) => {
                let _ = tx.send(Event::default().event("end").data(reason)).await;
                return;
            }
            Some(Step::Send(events)) => {
                let mut gone = false;
                for event in events {
                    if tx.send(event).await.is_err() {
                        gone = true;
                        break;
                    }
                }
                gone
            }
            None => false,
        };
        if ended {
            return;
        }
        tokio::select! {
            () = tx.closed() => return,
            () = tokio::time::sleep(POLL) => {}
        }
    }
}

/// What one round gives.
enum Step {
    /// Events to send (none when nothing changed).
    Send(Vec<Event>),
    /// The stream ends, for this reason.
    End(String),
}

/// The token is still active: not revoked (looked up again) and not expired.
async fn still_allowed(state: &ApiState, caller: &Caller) -> Result<(), Step> {
    let now = runway_store::Timestamp::now().unix_millis();
    if caller.expires_at.is_some_and(|at| now >= at) {
        return Err(Step::End(
            "the session or token expired: sign in again".into(),
        ));
    }
    if caller.hash.is_empty() {
        return Ok(());
    }
    let hash = caller.hash.clone();
    match state.store(move |s| Ok(s.token_by_hash(&hash)?)).await {
        Ok(Some(token)) if token.revoked_at.is_none() => Ok(()),
        Ok(_) => Err(Step::End(
            "signed out, or the token was revoked: sign in again".into(),
        )),
        // The store did not answer this time: try again at the next round.
        Err(e) => {
            tracing::warn!(error = %e.message(), "watch: cannot look the token up");
            Ok(())
        }
    }
}

/// One round: what changed since `sent`, as events.
async fn round(state: &ApiState, service: &str, env: &str, sent: &mut Sent) -> Option<Step> {
    let status = match crate::routes::status_view(state, service.to_owned(), env.to_owned()).await {
        Ok(status) => status,
        Err(e) if e.status() == axum::http::StatusCode::NOT_FOUND => {
            return Some(Step::End(e.message().to_owned()));
        }
        Err(e) => {
            tracing::warn!(error = %e.message(), "watch: cannot read the status");
            return None;
        }
    };
    let (s2, e2) = (service.to_owned(), env.to_owned());
    let newest = sent.events;
    let read = state
        .store(move |s| {
            let deployments = s.deployment_list(&s2, Some(&e2), DEPLOYMENTS)?;
            let events = match deployments.first() {
                Some(d) => Some((d.id, s.deployment_events(d.id)?)),
                None => None,
            };
            Ok((deployments, events))
        })
        .await;
    let (deployments, events) = match read {
        Ok(read) => read,
        Err(e) => {
            tracing::warn!(error = %e.message(), "watch: cannot read the deployments");
            return None;
        }
    };
    let mut out = Vec::new();
    if let Some(event) = changed(&mut sent.status, "status", &status) {
        out.push(event);
    }
    let views: Vec<DeploymentView> = deployments.into_iter().map(Into::into).collect();
    if let Some(event) = changed(&mut sent.deployments, "deployments", &views) {
        out.push(event);
    }
    if let Some((id, events)) = events {
        // A deployment newer than the one followed is sent whole; the same one, its new events.
        let from = match newest {
            Some((seen, count)) if seen == id => (events.len() > count).then_some(count),
            _ => Some(0),
        };
        if let Some(from) = from {
            let total = events.len();
            let body = WatchEvents {
                deployment: id,
                after: u32::try_from(from).unwrap_or(u32::MAX),
                events: events.into_iter().skip(from).map(Into::into).collect(),
            };
            if let Ok(data) = serde_json::to_string(&body) {
                out.push(Event::default().event("deployment_events").data(data));
            }
            sent.events = Some((id, total));
        }
    }
    Some(Step::Send(out))
}

/// `kind`'s event when `value` differs from what was sent last (kept in `last`).
fn changed<T: serde::Serialize>(last: &mut String, kind: &str, value: &T) -> Option<Event> {
    let text = serde_json::to_string(value).ok()?;
    if *last == text {
        return None;
    }
    last.clone_from(&text);
    Some(Event::default().event(kind).data(text))
}
