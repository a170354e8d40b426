//! The distribution API over HTTP: one axum handler that reads the path (repository names
//! hold `/`, so the route is found from the end, as distribution does), asks the
//! [`Authorizer`], and calls the storage; and the one function that turns a
//! [`RegistryError`] into the spec's status and `{"errors":[...]}` body.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use http::header::{
    ACCEPT_RANGES, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, HeaderName, HeaderValue, LINK,
    LOCATION, RANGE, WWW_AUTHENTICATE,
};
use http::{HeaderMap, Method, StatusCode};
use http_body_util::BodyExt as _;
use runway_oci::Digest;
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};
use tokio_util::io::ReaderStream;

use crate::auth::{Access, Authorizer, Refusal};
use crate::error::RegistryError;
use crate::manifest::OCI_INDEX;
use crate::name::{Reference, Repository};
use crate::storage::{Registry, parse_reference, parse_repository};
use crate::upload::Chunk;

const DOCKER_CONTENT_DIGEST: HeaderName = HeaderName::from_static("docker-content-digest");
const DOCKER_UPLOAD_UUID: HeaderName = HeaderName::from_static("docker-upload-uuid");
const API_VERSION: HeaderName = HeaderName::from_static("docker-distribution-api-version");
const OCI_SUBJECT: HeaderName = HeaderName::from_static("oci-subject");
const OCI_FILTERS_APPLIED: HeaderName = HeaderName::from_static("oci-filters-applied");
/// Read size when streaming a blob.
const READ_CHUNK: usize = 1 << 16;

struct Shared<A> {
    registry: Arc<Registry>,
    auth: Arc<A>,
}

impl<A> Clone for Shared<A> {
    fn clone(&self) -> Self {
        Shared {
            registry: self.registry.clone(),
            auth: self.auth.clone(),
        }
    }
}

/// The distribution API under `/v2/`, to be merged into the caller's router at its root.
/// It sets no body limit of its own beyond the manifest bound (blobs are streamed), so the
/// caller must not put a request-body limit layer over it.
pub fn router<A: Authorizer>(registry: Arc<Registry>, auth: Arc<A>) -> Router {
    Router::new()
        .route("/v2", any(base::<A>))
        .route("/v2/", any(base::<A>))
        .route("/v2/{*path}", any(dispatch::<A>))
        .layer(DefaultBodyLimit::disable())
        .with_state(Shared { registry, auth })
}

/// What a path under `/v2/` names.
#[derive(Debug, PartialEq, Eq)]
enum Route<'a> {
    Tags(&'a str),
    Manifest(&'a str, &'a str),
    Blob(&'a str, &'a str),
    Uploads(&'a str),
    Upload(&'a str, &'a str),
    Referrers(&'a str, &'a str),
}

fn route(path: &str) -> Option<Route<'_>> {
    if let Some(name) = path.strip_suffix("/tags/list") {
        return Some(Route::Tags(name));
    }
    if let Some(name) = path
        .strip_suffix("/blobs/uploads/")
        .or_else(|| path.strip_suffix("/blobs/uploads"))
    {
        return Some(Route::Uploads(name));
    }
    let (rest, last) = path.rsplit_once('/')?;
    let (rest, kind) = rest.rsplit_once('/')?;
    match kind {
        "manifests" => Some(Route::Manifest(rest, last)),
        "blobs" => Some(Route::Blob(rest, last)),
        "referrers" => Some(Route::Referrers(rest, last)),
        "uploads" => rest
            .strip_suffix("/blobs")
            .map(|name| Route::Upload(name, last)),
        _ => None,
    }
}

async fn base<A: Authorizer>(
    State(shared): State<Shared<A>>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return unsupported();
    }
    if let Err(refusal) = shared.auth.authorize(&headers, None, Access::Pull).await {
        return refused(refusal);
    }
    let mut response = (StatusCode::OK, [(CONTENT_TYPE, "application/json")], "{}").into_response();
    response
        .headers_mut()
        .insert(API_VERSION, HeaderValue::from_static("registry/2.0"));
    response
}

async fn dispatch<A: Authorizer>(State(shared): State<Shared<A>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    // The path as sent, not percent-decoded: an escaped `/` or `.` stays a `%`, which no name,
    // tag or digest holds, so it is refused rather than read as a separator.
    let path = parts.uri.path();
    let path = path.strip_prefix("/v2/").unwrap_or(path);
    let query: HashMap<String, String> = Query::try_from_uri(&parts.uri)
        .map(|Query(q)| q)
        .unwrap_or_default();
    let Some(route) = route(path) else {
        return error_response(&ApiError::new(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            "no such endpoint",
        ));
    };
    let method = parts.method;
    let access = if method == Method::GET || method == Method::HEAD {
        Access::Pull
    } else {
        Access::Push
    };
    let name = match route {
        Route::Tags(n)
        | Route::Manifest(n, _)
        | Route::Blob(n, _)
        | Route::Uploads(n)
        | Route::Upload(n, _)
        | Route::Referrers(n, _) => n,
    };
    let repository = match parse_repository(name) {
        Ok(repository) => repository,
        Err(e) => {
            // Authenticated callers only learn that a name is invalid.
            if let Err(refusal) = shared.auth.authorize(&parts.headers, None, access).await {
                return refused(refusal);
            }
            return error(e);
        }
    };
    if let Err(refusal) = shared
        .auth
        .authorize(&parts.headers, Some(repository.as_str()), access)
        .await
    {
        return refused(refusal);
    }
    let request = Req {
        shared: &shared,
        registry: &shared.registry,
        repository,
        method,
        headers: parts.headers,
        query,
        body,
    };
    let result = match route {
        Route::Tags(_) => request.tags().await,
        Route::Manifest(_, reference) => request.manifest(reference).await,
        Route::Blob(_, digest) => request.blob(digest).await,
        Route::Uploads(_) => request.start_upload().await,
        Route::Upload(_, id) => request.upload(id).await,
        Route::Referrers(_, digest) => request.referrers(digest).await,
    };
    result.unwrap_or_else(error)
}

struct Req<'a, A> {
    shared: &'a Shared<A>,
    registry: &'a Registry,
    repository: Repository,
    method: Method,
    headers: HeaderMap,
    query: HashMap<String, String>,
    body: Body,
}

type Answer = Result<Response, RegistryError>;

impl<A: Authorizer> Req<'_, A> {
    fn name(&self) -> &str {
        self.repository.as_str()
    }

    // ---- blobs ------------------------------------------------------------------------

    async fn blob(self, digest: &str) -> Answer {
        let digest = parse_digest(digest)?;
        if self.method == Method::DELETE {
            self.registry.unlink_blob(&self.repository, &digest).await?;
            return Ok(StatusCode::ACCEPTED.into_response());
        }
        if self.method != Method::GET && self.method != Method::HEAD {
            return Ok(unsupported());
        }
        let unknown = || RegistryError::BlobUnknown {
            repository: self.repository.to_string(),
            digest: digest.clone(),
        };
        let size = self
            .registry
            .linked_blob_size(&self.repository, &digest)
            .await
            .ok_or_else(unknown)?;
        let range = match self.headers.get(RANGE).and_then(|v| v.to_str().ok()) {
            Some(header) => byte_range(header, size),
            None => Ok(None),
        };
        let Ok(range) = range else {
            return Ok((
                StatusCode::RANGE_NOT_SATISFIABLE,
                [
                    (CONTENT_RANGE, format!("bytes */{size}")),
                    (DOCKER_CONTENT_DIGEST, digest.to_string()),
                ],
            )
                .into_response());
        };
        let (status, start, length) = match range {
            Some((start, end)) => (StatusCode::PARTIAL_CONTENT, start, end - start + 1),
            None => (StatusCode::OK, 0, size),
        };
        let mut response = (
            status,
            [
                (CONTENT_TYPE, "application/octet-stream".to_string()),
                (CONTENT_LENGTH, length.to_string()),
                (DOCKER_CONTENT_DIGEST, digest.to_string()),
                (ACCEPT_RANGES, "bytes".to_string()),
            ],
        )
            .into_response();
        if status == StatusCode::PARTIAL_CONTENT
            && let Ok(value) =
                HeaderValue::from_str(&format!("bytes {start}-{}/{size}", start + length - 1))
        {
            response.headers_mut().insert(CONTENT_RANGE, value);
        }
        if self.method == Method::HEAD {
            return Ok(response);
        }
        let path = self.registry.blob_path(&digest);
        let mut file = match tokio::fs::File::open(&path).await {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(unknown()),
            Err(e) => return Err(RegistryError::io("opening", path)(e)),
        };
        if start > 0 {
            file.seek(std::io::SeekFrom::Start(start))
                .await
                .map_err(RegistryError::io("seeking", &path))?;
        }
        let stream = ReaderStream::with_capacity(file.take(length), READ_CHUNK);
        *response.body_mut() = Body::from_stream(stream);
        Ok(response)
    }

    // ---- uploads ----------------------------------------------------------------------

    async fn start_upload(self) -> Answer {
        if self.method != Method::POST {
            return Ok(unsupported());
        }
        if let Some(mount) = self.query.get("mount") {
            let from = self.query.get("from").map(String::as_str);
            let mounted =
                try_mount(self.shared, &self.headers, &self.repository, mount, from).await?;
            if let Some(response) = mounted {
                return Ok(response);
            }
        } else if let Some(digest) = self.query.get("digest") {
            // A monolithic upload: the whole blob in this request.
            let digest = parse_digest(digest)?;
            let chunk = chunk_of(&self.headers, false)?;
            let id = self.registry.start_upload(&self.repository).await?;
            self.registry
                .finish_upload(&self.repository, &id, chunk, self.body, &digest)
                .await?;
            return Ok(blob_created(self.repository.as_str(), &digest));
        }
        let id = self.registry.start_upload(&self.repository).await?;
        Ok(upload_status(StatusCode::ACCEPTED, self.name(), &id, 0))
    }

    async fn upload(self, id: &str) -> Answer {
        let registry = self.registry;
        let repository = &self.repository;
        match self.method {
            Method::GET => {
                let offset = registry.upload_offset(repository, id).await?;
                Ok(upload_status(
                    StatusCode::NO_CONTENT,
                    self.name(),
                    id,
                    offset,
                ))
            }
            Method::PATCH => {
                let chunk = chunk_of(&self.headers, true)?;
                let offset = registry
                    .append_upload(repository, id, chunk, self.body)
                    .await?;
                Ok(upload_status(
                    StatusCode::ACCEPTED,
                    repository.as_str(),
                    id,
                    offset,
                ))
            }
            Method::PUT => {
                let digest = self
                    .query
                    .get("digest")
                    .ok_or(RegistryError::UploadInvalid {
                        reason: "the final PUT needs ?digest=",
                    })?;
                let digest = parse_digest(digest)?;
                let chunk = chunk_of(&self.headers, true)?;
                registry
                    .finish_upload(repository, id, chunk, self.body, &digest)
                    .await?;
                Ok(blob_created(repository.as_str(), &digest))
            }
            Method::DELETE => {
                registry.cancel_upload(repository, id).await?;
                Ok(StatusCode::NO_CONTENT.into_response())
            }
            _ => Ok(unsupported()),
        }
    }

    // ---- manifests --------------------------------------------------------------------

    async fn manifest(self, reference: &str) -> Answer {
        let reference = parse_reference(reference)?;
        match self.method {
            Method::GET | Method::HEAD => {
                let stored = self.registry.manifest(&self.repository, &reference).await?;
                let headers = [
                    (CONTENT_TYPE, stored.media_type),
                    (CONTENT_LENGTH, stored.bytes.len().to_string()),
                    (DOCKER_CONTENT_DIGEST, stored.digest.to_string()),
                ];
                if self.method == Method::HEAD {
                    Ok((StatusCode::OK, headers).into_response())
                } else {
                    Ok((StatusCode::OK, headers, stored.bytes).into_response())
                }
            }
            Method::PUT => self.put_manifest(&reference).await,
            Method::DELETE => {
                self.registry
                    .delete_manifest(&self.repository, &reference)
                    .await?;
                Ok(StatusCode::ACCEPTED.into_response())
            }
            _ => Ok(unsupported()),
        }
    }

    async fn put_manifest(self, reference: &Reference) -> Answer {
        let limit = self.registry.limits().max_manifest_bytes;
        let announced = self
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if announced.is_some_and(|n| n > limit as u64) {
            return Err(RegistryError::ManifestTooLarge { limit });
        }
        let bytes = http_body_util::Limited::new(self.body, limit)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    RegistryError::ManifestTooLarge { limit }
                } else {
                    RegistryError::Body {
                        source: axum::Error::new(e),
                    }
                }
            })?
            .to_bytes();
        let content_type = self.headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
        let put = self
            .registry
            .store_manifest(&self.repository, reference, content_type, &bytes)
            .await?;
        let mut response = (
            StatusCode::CREATED,
            [
                (
                    LOCATION,
                    format!("/v2/{}/manifests/{}", self.repository, put.digest),
                ),
                (DOCKER_CONTENT_DIGEST, put.digest.to_string()),
            ],
        )
            .into_response();
        if let Some(subject) = put.subject
            && let Ok(value) = HeaderValue::from_str(&subject.to_string())
        {
            response.headers_mut().insert(OCI_SUBJECT, value);
        }
        Ok(response)
    }

    // ---- tags and referrers -----------------------------------------------------------

    async fn tags(self) -> Answer {
        if self.method != Method::GET && self.method != Method::HEAD {
            return Ok(unsupported());
        }
        let all = self.registry.tags(&self.repository).await?;
        let last = self.query.get("last");
        let mut tags: Vec<&str> = all
            .iter()
            .map(|t| t.as_str())
            .filter(|t| last.is_none_or(|last| *t > last.as_str()))
            .collect();
        let page = self.registry.limits().max_tags_page;
        let n = match self.query.get("n") {
            Some(n) => Some(
                n.parse::<usize>()
                    .map_err(|_| RegistryError::UploadInvalid {
                        reason: "n must be a number",
                    })?,
            ),
            None => None,
        };
        let n = n.unwrap_or(page).min(page);
        let more = tags.len() > n;
        tags.truncate(n);
        let body = json!({ "name": self.name(), "tags": tags }).to_string();
        let mut response =
            (StatusCode::OK, [(CONTENT_TYPE, "application/json")], body).into_response();
        if more && let Some(last) = tags.last() {
            let link = format!(
                "</v2/{}/tags/list?n={n}&last={last}>; rel=\"next\"",
                self.name()
            );
            if let Ok(value) = HeaderValue::from_str(&link) {
                response.headers_mut().insert(LINK, value);
            }
        }
        Ok(response)
    }

    async fn referrers(self, digest: &str) -> Answer {
        if self.method != Method::GET && self.method != Method::HEAD {
            return Ok(unsupported());
        }
        let subject = parse_digest(digest)?;
        let artifact_type = self.query.get("artifactType").map(String::as_str);
        let manifests = self
            .registry
            .referrers(&self.repository, &subject, artifact_type)
            .await?;
        let body = json!({
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": manifests,
        })
        .to_string();
        let mut response = (StatusCode::OK, [(CONTENT_TYPE, OCI_INDEX)], body).into_response();
        if artifact_type.is_some() {
            response.headers_mut().insert(
                OCI_FILTERS_APPLIED,
                HeaderValue::from_static("artifactType"),
            );
        }
        Ok(response)
    }
}

/// A cross-repository mount, when the caller may pull `from` and `from` has the blob;
/// `None` (an ordinary upload follows) otherwise, saying nothing of why.
async fn try_mount<A: Authorizer>(
    shared: &Shared<A>,
    headers: &HeaderMap,
    target: &Repository,
    mount: &str,
    from: Option<&str>,
) -> Result<Option<Response>, RegistryError> {
    let Ok(digest) = Digest::parse(mount) else {
        return Ok(None);
    };
    let Some(from) = from.and_then(|f| Repository::parse(f).ok()) else {
        return Ok(None);
    };
    if shared
        .auth
        .authorize(headers, Some(from.as_str()), Access::Pull)
        .await
        .is_err()
    {
        return Ok(None);
    }
    if !shared.registry.mount_blob(target, &from, &digest).await? {
        return Ok(None);
    }
    Ok(Some(blob_created(target.as_str(), &digest)))
}

/// The one range of a `Range: bytes=<first>-<last>`, `bytes=<first>-` or `bytes=-<suffix>`
/// header within `size` bytes, inclusive. `Ok(None)`: serve the whole blob (no range this
/// reads: several ranges, another unit, a malformed one). `Err(())`: not satisfiable.
fn byte_range(header: &str, size: u64) -> Result<Option<(u64, u64)>, ()> {
    let Some(spec) = header.trim().strip_prefix("bytes=") else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let Some((first, last)) = spec.split_once('-') else {
        return Ok(None);
    };
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        let Ok(suffix) = last.parse::<u64>() else {
            return Ok(None);
        };
        if suffix == 0 || size == 0 {
            return Err(());
        }
        return Ok(Some((size.saturating_sub(suffix), size - 1)));
    }
    let Ok(first) = first.parse::<u64>() else {
        return Ok(None);
    };
    let last = if last.is_empty() {
        u64::MAX
    } else {
        match last.parse::<u64>() {
            Ok(last) if last >= first => last,
            // Ends before it starts: refused, as Go's http.ServeContent and the conformance
            // suite do (RFC 9110 would also allow ignoring it).
            Ok(_) => return Err(()),
            Err(_) => return Ok(None),
        }
    };
    if first >= size {
        return Err(());
    }
    Ok(Some((first, last.min(size - 1))))
}

fn parse_digest(digest: &str) -> Result<Digest, RegistryError> {
    Digest::parse(digest).map_err(|_| RegistryError::DigestInvalid {
        digest: digest.to_string(),
    })
}

/// The chunk's place and length from `Content-Range` (`<start>-<end>`, inclusive; read only
/// when `ranged`) and `Content-Length`, which must agree.
fn chunk_of(headers: &HeaderMap, ranged: bool) -> Result<Chunk, RegistryError> {
    let invalid = |reason| RegistryError::UploadInvalid { reason };
    let length = match headers.get(CONTENT_LENGTH) {
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| invalid("Content-Length is not a number"))?,
        ),
        None => None,
    };
    let range = if ranged {
        headers.get(http::header::CONTENT_RANGE)
    } else {
        None
    };
    let Some(range) = range else {
        return Ok(Chunk {
            start: None,
            length,
        });
    };
    let text = range
        .to_str()
        .map_err(|_| invalid("Content-Range is not text"))?
        .trim();
    let text = text
        .strip_prefix("bytes=")
        .or_else(|| text.strip_prefix("bytes "))
        .unwrap_or(text);
    let (start, end) = text
        .split_once('-')
        .and_then(|(s, e)| Some((s.trim().parse::<u64>().ok()?, e.trim().parse::<u64>().ok()?)))
        .ok_or_else(|| invalid("Content-Range must be <start>-<end>"))?;
    let ranged_length = end
        .checked_sub(start)
        .and_then(|n| n.checked_add(1))
        .ok_or_else(|| invalid("Content-Range ends before it starts"))?;
    if let Some(length) = length
        && length != ranged_length
    {
        return Err(RegistryError::SizeInvalid {
            expected: ranged_length,
            actual: length,
        });
    }
    Ok(Chunk {
        start: Some(start),
        length: Some(ranged_length),
    })
}

fn upload_status(status: StatusCode, name: &str, id: &str, offset: u64) -> Response {
    (
        status,
        [
            (LOCATION, format!("/v2/{name}/blobs/uploads/{id}")),
            (DOCKER_UPLOAD_UUID, id.to_string()),
            (RANGE, format!("0-{}", offset.saturating_sub(1))),
            (CONTENT_LENGTH, "0".to_string()),
        ],
    )
        .into_response()
}

fn blob_created(name: &str, digest: &Digest) -> Response {
    (
        StatusCode::CREATED,
        [
            (LOCATION, format!("/v2/{name}/blobs/{digest}")),
            (DOCKER_CONTENT_DIGEST, digest.to_string()),
            (CONTENT_LENGTH, "0".to_string()),
        ],
    )
        .into_response()
}

// ---- errors -----------------------------------------------------------------------------

/// One entry of the spec's error body, with its status.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    detail: serde_json::Value,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            detail: serde_json::Value::Null,
        }
    }

    fn detail(mut self, detail: serde_json::Value) -> ApiError {
        self.detail = detail;
        self
    }
}

fn error_response(e: &ApiError) -> Response {
    let mut entry = json!({ "code": e.code, "message": e.message });
    if !e.detail.is_null() {
        entry["detail"] = e.detail.clone();
    }
    let body = json!({ "errors": [entry] }).to_string();
    (e.status, [(CONTENT_TYPE, "application/json")], body).into_response()
}

fn unsupported() -> Response {
    error_response(&ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "UNSUPPORTED",
        "the operation is unsupported",
    ))
}

fn refused(refusal: Refusal) -> Response {
    match refusal {
        Refusal::Unauthenticated => {
            let mut response = error_response(&ApiError::new(
                StatusCode::UNAUTHORIZED,
                "UNAUTHORIZED",
                "authentication required",
            ));
            let headers = response.headers_mut();
            headers.insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"runway\""),
            );
            headers.insert(API_VERSION, HeaderValue::from_static("registry/2.0"));
            response
        }
        Refusal::Denied(message) => {
            error_response(&ApiError::new(StatusCode::FORBIDDEN, "DENIED", message))
        }
    }
}

/// The one place a [`RegistryError`] becomes an HTTP answer. Storage failures are logged
/// with their causes and answered without paths.
fn error(e: RegistryError) -> Response {
    use RegistryError as E;
    let message = e.to_string();
    let api = match &e {
        E::NameInvalid { .. } => ApiError::new(StatusCode::BAD_REQUEST, "NAME_INVALID", message),
        E::NameUnknown { .. } => ApiError::new(StatusCode::NOT_FOUND, "NAME_UNKNOWN", message),
        E::TagInvalid { .. } => ApiError::new(StatusCode::BAD_REQUEST, "TAG_INVALID", message),
        E::DigestInvalid { .. } => {
            ApiError::new(StatusCode::BAD_REQUEST, "DIGEST_INVALID", message)
        }
        E::DigestMismatch { expected, actual } => {
            ApiError::new(StatusCode::BAD_REQUEST, "DIGEST_INVALID", message)
                .detail(json!({ "expected": expected, "actual": actual }))
        }
        E::BlobUnknown { digest, .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "BLOB_UNKNOWN", message)
                .detail(json!({ "digest": digest }))
        }
        E::ManifestUnknown { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN", message)
        }
        E::ManifestInvalid { .. } => {
            ApiError::new(StatusCode::BAD_REQUEST, "MANIFEST_INVALID", message)
        }
        E::ManifestBlobUnknown { digest, .. } => {
            ApiError::new(StatusCode::BAD_REQUEST, "MANIFEST_BLOB_UNKNOWN", message)
                .detail(json!({ "digest": digest }))
        }
        E::ManifestReferenceUnknown { digest, .. } => {
            ApiError::new(StatusCode::BAD_REQUEST, "MANIFEST_UNKNOWN", message)
                .detail(json!({ "digest": digest }))
        }
        E::ManifestTooLarge { .. } | E::BlobTooLarge { .. } => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "SIZE_INVALID", message)
        }
        E::SizeInvalid { .. } => ApiError::new(StatusCode::BAD_REQUEST, "SIZE_INVALID", message),
        E::UploadUnknown { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "BLOB_UPLOAD_UNKNOWN", message)
        }
        E::RangeInvalid { offset, .. } | E::UploadBusy { offset } => ApiError::new(
            StatusCode::RANGE_NOT_SATISFIABLE,
            "BLOB_UPLOAD_INVALID",
            message,
        )
        .detail(json!({ "offset": offset })),
        E::UploadInvalid { .. } | E::Body { .. } => {
            ApiError::new(StatusCode::BAD_REQUEST, "BLOB_UPLOAD_INVALID", message)
        }
        E::TooManyUploads { .. } => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "TOOMANYREQUESTS", message)
        }
        E::Full { .. } => {
            tracing::warn!(error = %e, "registry refused a write past its bound");
            storage_full(format!(
                "{message}: nothing was stored; delete images that are no longer needed (their \
                 space is freed when the registry next collects garbage) or raise the \
                 registry's limit, then push again"
            ))
        }
        E::Io { source, .. } => {
            tracing::error!(error = %runway_log::chain(&e), "registry storage failed");
            if source.kind() == std::io::ErrorKind::StorageFull {
                storage_full("the registry's storage is full".to_string())
            } else {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "UNKNOWN",
                    "the registry's storage failed",
                )
            }
        }
    };
    error_response(&api)
}

/// `507 Insufficient Storage`: the registry's bound or its disk is full.
fn storage_full(message: String) -> ApiError {
    ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "UNKNOWN", message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_read_from_the_end() {
        assert_eq!(route("a/b/tags/list"), Some(Route::Tags("a/b")));
        assert_eq!(
            route("a/manifests/latest"),
            Some(Route::Manifest("a", "latest"))
        );
        assert_eq!(
            route("blobs/blobs/uploads/x"),
            Some(Route::Upload("blobs", "x"))
        );
        assert_eq!(route("a/blobs/uploads/"), Some(Route::Uploads("a")));
        assert_eq!(route("a/blobs/uploads"), Some(Route::Uploads("a")));
        assert_eq!(
            route("a/manifests/blobs/d"),
            Some(Route::Blob("a/manifests", "d"))
        );
        assert_eq!(route("a/referrers/d"), Some(Route::Referrers("a", "d")));
        assert_eq!(route("a/other/d"), None);
        assert_eq!(route("x"), None);
    }

    #[test]
    fn byte_ranges() {
        assert_eq!(byte_range("bytes=0-9", 100), Ok(Some((0, 9))));
        assert_eq!(byte_range("bytes=90-", 100), Ok(Some((90, 99))));
        assert_eq!(byte_range("bytes=90-500", 100), Ok(Some((90, 99))));
        assert_eq!(byte_range("bytes=-10", 100), Ok(Some((90, 99))));
        assert_eq!(byte_range("bytes=-500", 100), Ok(Some((0, 99))));
        assert_eq!(byte_range("bytes=100-", 100), Err(()));
        assert_eq!(byte_range("bytes=-0", 100), Err(()));
        assert_eq!(byte_range("bytes=9-0", 100), Err(()));
        assert_eq!(byte_range("bytes=0-1,5-6", 100), Ok(None));
        assert_eq!(byte_range("items=0-1", 100), Ok(None));
        assert_eq!(byte_range("bytes=x-y", 100), Ok(None));
        assert_eq!(byte_range("bytes=0-", 0), Err(()));
    }
}
