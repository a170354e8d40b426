//! The router with its layers (request id, timeout, body limit, the logging of internal
//! errors), and [`serve`]: HTTP/1.1 over TCP or TLS with a graceful shutdown.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::error::{ApiError, InternalCause};
use crate::state::ApiState;

/// The header carrying the request's id, also in the server's log lines.
pub const X_REQUEST_ID: &str = "x-request-id";

/// Bounds on one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest request body accepted (413 above).
    pub body_bytes: usize,
    /// From a request's arrival to its response's head (a followed log's body is not cut).
    pub request_timeout: Duration,
    /// The same for an upload (`PUT …/sources/{digest}`), whose body may be large.
    pub upload_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            body_bytes: 1 << 20,
            request_timeout: Duration::from_secs(30),
            upload_timeout: Duration::from_secs(600),
        }
    }
}

/// The API's router over `state`, every route of the contract with its layers.
pub fn router(state: ApiState, limits: Limits) -> Router {
    let metrics = Arc::clone(&state.metrics);
    let (router, _) = crate::routes::api_router_with(crate::openapi::base()).split_for_parts();
    let registry = state.registry.clone().map(|registry| {
        let callers = Arc::new(crate::registry::RegistryCallers(state.clone()));
        runway_registry::router(registry, callers)
    });
    let mut router = router
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::access::gate,
        ))
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .with_state(state)
        .layer(DefaultBodyLimit::max(limits.body_bytes));
    // The registry streams blobs and bounds manifests itself.
    if let Some(registry) = registry {
        router = router.merge(registry);
    }
    router.layer(axum::middleware::from_fn(
        move |req: Request, next: Next| {
            let timeout = if is_upload(&req) {
                limits.upload_timeout
            } else {
                limits.request_timeout
            };
            per_request(Arc::clone(&metrics), timeout, req, next)
        },
    ))
}

/// Whether the request uploads a code snapshot
/// (`PUT /v1/services/{service}/environments/{env}/sources/{digest}`), or moves a blob to or
/// from the registry (`/v2/<name>/blobs/...`).
fn is_upload(req: &Request) -> bool {
    let path = req.uri().path();
    if path.starts_with("/v2/") && path.contains("/blobs/") {
        return true;
    }
    let segments: Vec<&str> = path.split('/').collect();
    req.method() == axum::http::Method::PUT
        && matches!(
            segments.as_slice(),
            ["", "v1", "services", _, "environments", _, "sources", _]
        )
}

fn next_request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let start = *START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    });
    format!("{start:x}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Gives the request an id, bounds it in time, and logs the cause of a 500 with that id.
async fn per_request(
    metrics: Arc<crate::metrics::ApiMetrics>,
    timeout: Duration,
    req: Request,
    next: Next,
) -> Response {
    let started = std::time::Instant::now();
    let id = next_request_id();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let mut response = match tokio::time::timeout(timeout, next.run(req)).await {
        Ok(response) => response,
        Err(_) => {
            tracing::warn!(request = %id, %method, %path, ?timeout, "request timed out");
            ApiError::timeout().into_response()
        }
    };
    if let Some(InternalCause(cause)) = response.extensions_mut().remove::<InternalCause>() {
        tracing::error!(request = %id, %method, %path, error = %cause, "internal error");
    }
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(X_REQUEST_ID, value);
    }
    metrics.observe(
        method.as_str(),
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// Bounds on connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeOptions {
    /// How long a TLS handshake may take.
    pub tls_handshake_timeout: Duration,
    /// How long a client may take to send a request's head.
    pub header_read_timeout: Duration,
    /// How long open connections may finish after shutdown is asked.
    pub shutdown_grace: Duration,
    /// Connections open at once; past it, new ones are closed at accept. The API has its own
    /// budget, apart from the ingress's, so a flood of either does not starve the other.
    pub max_connections: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            tls_handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(30),
            max_connections: 256,
        }
    }
}

/// Serves `router` on `listener` (over TLS when `tls` is given) until `shutdown` completes,
/// then lets open connections finish for at most `options.shutdown_grace`.
///
/// At most `options.max_connections` are served at once: more are closed at accept. An
/// accept that fails for want of descriptors or memory is retried after a pause that doubles
/// while it lasts, as the ingress's (`runway_ingress::limits::accept_pause`).
///
/// # Errors
/// None today: a failed accept is logged and retried after a pause; the result leaves room.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let graceful = GracefulShutdown::new();
    let acceptor = tls.map(TlsAcceptor::from);
    let connections = Arc::new(Semaphore::new(
        options.max_connections.min(Semaphore::MAX_PERMITS),
    ));
    let mut pause = Duration::ZERO;
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => {
                    pause = Duration::ZERO;
                    pair
                }
                Err(e) => {
                    let Some(next) = runway_ingress::limits::accept_pause(&e, pause) else {
                        continue;
                    };
                    // Once per run of failures, not at every retry.
                    if pause.is_zero() {
                        tracing::warn!(error = %e, retry_after = ?next, "accept failed; retrying");
                    }
                    pause = next;
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(pause) => continue,
                    }
                }
            },
        };
        let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
            // Closed at once: a clean refusal, and the loop goes on.
            drop(stream);
            continue;
        };
        let watcher = graceful.watcher();
        let service = TowerToHyperService::new(router.clone());
        let acceptor = acceptor.clone();
        // Closed lingering: a client still sending a body the answer did not need (a refused
        // upload) reads that answer rather than a reset. Its place is held until then.
        let linger = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let stream = runway_ingress::ClientIo::new(stream, permit, linger);
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(options.header_read_timeout);
            let result = match acceptor {
                None => {
                    watcher
                        .watch(builder.serve_connection(TokioIo::new(stream), service))
                        .await
                }
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(options.tls_handshake_timeout, async {
                        let mut stream = stream;
                        if let Some(tcp) = stream.get_mut()
                            && refuse_plain_http(tcp).await
                        {
                            return Ok(None);
                        }
                        acceptor.accept(stream).await.map(Some)
                    })
                    .await;
                    let stream = match handshake {
                        Ok(Ok(Some(stream))) => stream,
                        Ok(Ok(None)) => return,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                    watcher
                        .watch(builder.serve_connection(TokioIo::new(stream), service))
                        .await
                }
            };
            if let Err(e) = result
                && !e.is_incomplete_message()
            {
                tracing::debug!(%peer, error = %e, "connection failed");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(options.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace = ?options.shutdown_grace,
            "connections still open after the shutdown grace; closing them"
        );
    }
    Ok(())
}

/// A TLS connection starts with a handshake record (byte 22). One that starts with a letter is
/// plain HTTP (`http://` against the HTTPS port): it is answered, in plain HTTP, with the API's
/// error body saying to use `https://`, rather than with a TLS alert the client cannot read.
/// Returns whether it was.
async fn refuse_plain_http(stream: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncWriteExt;
    let mut first = [0u8; 1];
    if !matches!(stream.peek(&mut first).await, Ok(1)) || !first[0].is_ascii_alphabetic() {
        return false;
    }
    let body = serde_json::json!({"error": {
        "code": "https_required",
        "message": "this is the Runway API's HTTPS port: use an https:// URL",
    }})
    .to_string();
    let response = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
    true
}
