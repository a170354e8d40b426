//! The one place errors become responses: every failure, whatever its source (the store, a
//! token, a request body, the manifest), leaves as `{"error": {"code", "message", "field"}}`
//! with the status that fits. A 500 says only "internal error"; its cause goes to stderr with
//! the request's id (see `crate::server`'s request middleware).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use runway_store::StoreError;
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error response.
#[derive(Debug, Clone, Serialize, serde::Deserialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Clone, Serialize, serde::Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable, machine-readable code: `invalid`, `unauthorized`, `forbidden`, `not_found`,
    /// `conflict`, `manifest_invalid`, `payload_too_large`, `timeout`, `internal`, …
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
    /// The request field at fault, as a JSON path (`manifest.spec.container_port`) or a query
    /// parameter's name.
    pub field: Option<String>,
}

/// An error a handler returns.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    field: Option<String>,
    /// For a 500: the cause, logged and never sent.
    internal: Option<String>,
}

/// The cause of a 500, carried in the response's extensions to the middleware that logs it
/// with the request's id, and removed there.
#[derive(Debug, Clone)]
pub(crate) struct InternalCause(pub(crate) String);

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
            internal: None,
        }
    }

    /// 400: the request is malformed.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid", message)
    }

    /// 401: no token, or not one this server knows. The same message for both.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403: the token may not do this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 404 for something that exists but is not in the state asked about, with a code of its
    /// own (`not_in_maintenance`), so that a client tells it from a missing service.
    pub fn not_in_state(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    /// 409: contradicts what is stored now.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 422: the manifest is not valid.
    pub fn manifest_invalid(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "manifest_invalid",
            message,
        )
    }

    /// 422: an uploaded code snapshot is not one (not gzip or tar, not the digest it is put
    /// under, an entry that would escape).
    pub fn source_invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "source_invalid", message)
    }

    /// 507: the control plane's disk is full; nothing was written.
    pub fn insufficient_storage(what: &str) -> Self {
        Self::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "insufficient_storage",
            format!(
                "the control plane's disk is full: {what}; try again once its operator has \
                 freed space"
            ),
        )
    }

    /// 405: the path exists, the method does not.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this method is not allowed on this path",
        )
    }

    /// 413.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
    }

    /// 503: the request took longer than the server's bound.
    pub fn timeout() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "timeout",
            "the request took too long",
        )
    }

    /// 503: a service the request needs (Vault) could not answer it; the message says which
    /// and why.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    /// 500: says "internal error"; `cause` is logged with the request's id, never sent.
    pub fn internal(cause: impl Into<String>) -> Self {
        Self {
            internal: Some(cause.into()),
            ..Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error",
            )
        }
    }

    /// Names the request field at fault.
    #[must_use]
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// The status it answers with.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The message it answers with.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match &error {
            StoreError::NotFound {
                kind: "service",
                name,
            } => Self::not_found(format!(
                "{error}: it is not registered; an admin registers it with `runway services \
                 create {name}`"
            )),
            StoreError::NotFound { .. } => Self::not_found(error.to_string()),
            StoreError::AlreadyExists { .. } => Self::conflict(error.to_string()),
            // The answer's code already says "conflict".
            StoreError::Conflict(message) => Self::conflict(message.clone()),
            StoreError::InvalidTransition { .. }
            | StoreError::Fenced { .. }
            | StoreError::NotLeading => Self::conflict(error.to_string()),
            StoreError::Invalid(message) => Self::invalid(message.clone()),
            StoreError::Full => Self::insufficient_storage("nothing was written"),
            StoreError::Unavailable(_) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "the control plane cannot reach its store: nothing was written; try again",
            ),
            StoreError::Sqlite(_)
            | StoreError::Postgres(_)
            | StoreError::Corrupt(_)
            | StoreError::Io { .. }
            | StoreError::TooNew { .. } => {
                Self::internal(format!("store: {}", runway_log::chain(&error)))
            }
        }
    }
}

impl From<tokio::task::JoinError> for ApiError {
    fn from(error: tokio::task::JoinError) -> Self {
        Self::internal(format!("blocking task: {error}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
                field: self.field,
            },
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(cause) = self.internal {
            response.extensions_mut().insert(InternalCause(cause));
        }
        response
    }
}

/// The result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_500_says_only_internal_error_and_carries_its_cause_to_the_log() {
        let response = ApiError::internal("database is corrupt: page 7").into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let cause = response
            .extensions()
            .get::<InternalCause>()
            .map(|c| c.0.clone());
        assert_eq!(cause.as_deref(), Some("database is corrupt: page 7"));
        let store = ApiError::from(StoreError::Corrupt("page 7".into()));
        assert_eq!(store.message(), "internal error");
        assert_eq!(store.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
