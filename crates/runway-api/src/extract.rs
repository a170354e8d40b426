//! Extractors whose rejections take the API's error shape: a JSON body (the field at fault
//! named by its path), query parameters and path parameters.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON request body: an object, as every body the document describes is (serde would also
/// read a struct from an array of its fields). An empty body reads as `{}`; unknown keys are
/// refused where the type says so; a type error names its field (`manifest.spec`,
/// `scope.deploy.service`).
#[derive(Debug)]
pub(crate) struct Json<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::too_large("the request body is too large")
            } else {
                ApiError::invalid("cannot read the request body")
            }
        })?;
        let bytes: &[u8] = match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            None => b"{}",
            Some(b'{') => &bytes,
            Some(_) => return Err(ApiError::invalid("invalid JSON body: expected an object")),
        };
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            let error = ApiError::invalid(format!("invalid JSON body: {}", e.into_inner()));
            if path.is_empty() || path == "." {
                error
            } else {
                error.field(path)
            }
        })?;
        de.end()
            .map_err(|e| ApiError::invalid(format!("invalid JSON body: {e}")))?;
        Ok(Json(value))
    }
}

/// Query parameters.
#[derive(Debug)]
pub(crate) struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Query(q.0))
            .map_err(|e| ApiError::invalid(format!("invalid query parameters: {}", e.body_text())))
    }
}

/// Path parameters.
#[derive(Debug)]
pub(crate) struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e| ApiError::invalid(format!("invalid path: {}", e.body_text())))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use axum::body::Body;

    use super::*;
    use crate::types::{CreateSession, RollbackRequest};

    async fn read<T: DeserializeOwned>(body: &'static str) -> Result<T, ApiError> {
        let request = Request::builder().body(Body::from(body)).unwrap();
        Json::<T>::from_request(request, &()).await.map(|Json(v)| v)
    }

    /// serde reads a struct from an array of its fields too; the document allows objects only.
    #[tokio::test]
    async fn a_body_is_an_object_or_nothing() {
        assert!(read::<CreateSession>("").await.unwrap().token.is_none());
        assert!(read::<CreateSession>(" \n").await.is_ok());
        let to = read::<RollbackRequest>(r#"{"to": "hello-dev-00001"}"#)
            .await
            .unwrap();
        assert_eq!(to.to.as_deref(), Some("hello-dev-00001"));
        for body in ["[]", r#"["hello-dev-00001"]"#, "null", "1", r#""x""#] {
            let refused = read::<RollbackRequest>(body).await.unwrap_err();
            assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{body}");
            assert!(refused.message().contains("expected an object"), "{body}");
        }
    }
}
