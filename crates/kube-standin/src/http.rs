//! HTTPS: the listener, one hyper HTTP/1.1 connection per client connection, the bearer
//! token, the record of every request, and replies (JSON, text, or a stream).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::resources::{self, Discovery, Target};
use crate::{Request, Shared, api, util};

/// The real server's limit on a request body.
const MAX_BODY: usize = 3 * 1024 * 1024;

pub(crate) async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
) {
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let conn_shared = Arc::clone(&shared);
        let acceptor = acceptor.clone();
        shared.spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = service_fn(move |req| {
                let shared = Arc::clone(&conn_shared);
                async move { Ok::<_, Infallible>(handle(shared, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

/// Query parameters, decoded, in order.
#[derive(Debug, Default)]
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean parameter: "true" or "1".
    pub(crate) fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }
}

pub(crate) fn parse_query(raw: &str) -> Vec<(String, String)> {
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (util::url_decode(k), util::url_decode(v)),
            None => (util::url_decode(p), String::new()),
        })
        .collect()
}

/// What a handler answers.
pub(crate) enum Reply {
    Json(u16, Value),
    Text(u16, String),
    /// A chunked stream: watch events or a followed log.
    Stream {
        content_type: &'static str,
        rx: mpsc::Receiver<Bytes>,
    },
}

impl Reply {
    fn code(&self) -> u16 {
        match self {
            Reply::Json(code, _) | Reply::Text(code, _) => *code,
            Reply::Stream { .. } => 200,
        }
    }

    fn into_response(self) -> hyper::Response<BoxBody<Bytes, Infallible>> {
        let (code, content_type, body) = match self {
            Reply::Json(code, v) => (
                code,
                "application/json",
                Full::new(Bytes::from(v.to_string())).boxed(),
            ),
            Reply::Text(code, s) => (code, "text/plain", Full::new(Bytes::from(s)).boxed()),
            Reply::Stream { content_type, rx } => (200, content_type, ChannelBody { rx }.boxed()),
        };
        let mut resp = hyper::Response::new(body);
        *resp.status_mut() =
            hyper::StatusCode::from_u16(code).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
        if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
            resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        resp
    }
}

/// A body fed by a channel; ends when the sender goes. Dropped by hyper when the client
/// goes, which ends the sender's task at its next send.
struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx
            .poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok(Frame::data(b))))
    }
}

/// A `Status` object.
pub(crate) fn status(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut v = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some(d) = details {
        v["details"] = d;
    }
    v
}

fn header(req: &hyper::Request<Incoming>, name: hyper::header::HeaderName) -> String {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

async fn handle(
    shared: Arc<Shared>,
    req: hyper::Request<Incoming>,
) -> hyper::Response<BoxBody<Bytes, Infallible>> {
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    let raw_query = req.uri().query().unwrap_or("").to_owned();
    let query = Query(parse_query(&raw_query));
    let content_type = header(&req, hyper::header::CONTENT_TYPE);
    let authorization = header(&req, hyper::header::AUTHORIZATION);
    let user_agent = header(&req, hyper::header::USER_AGENT);
    let target = resources::parse_path(&path);

    let mut record = Request {
        method: method.clone(),
        content_type: Some(content_type.clone()).filter(|c| !c.is_empty()),
        field_manager: query.get("fieldManager").map(str::to_owned),
        path: path.clone(),
        query: raw_query,
        ..Request::default()
    };
    if let Some(Target::Resource {
        res,
        namespace,
        name,
        subresource,
    }) = &target
    {
        let r = resources::get(*res);
        record.group = r.group.to_owned();
        record.version = r.version.to_owned();
        record.resource = r.plural.to_owned();
        record.namespace.clone_from(namespace);
        record.name.clone_from(name);
        record.subresource.clone_from(subresource);
        record.verb = match (method.as_str(), name.is_some()) {
            ("GET", false) if query.flag("watch") => "watch",
            ("GET", false) => "list",
            ("GET", true) => "get",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", false) => "deletecollection",
            ("DELETE", true) => "delete",
            _ => "",
        }
        .to_owned();
    }

    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(c) => Some(c.to_bytes()),
        Err(_) => None,
    };

    let reply = if authorization != format!("Bearer {}", shared.token) {
        Reply::Json(401, status(401, "Unauthorized", "Unauthorized", None))
    } else if let Some(body) = body {
        match target {
            None => Reply::Json(
                404,
                status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                    Some(serde_json::json!({})),
                ),
            ),
            Some(Target::Discovery(d)) => match d {
                Discovery::Health => Reply::Text(200, "ok".into()),
                Discovery::Version => Reply::Json(200, resources::version()),
                Discovery::CoreVersions => Reply::Json(200, resources::core_versions()),
                Discovery::Groups => Reply::Json(200, resources::groups()),
                Discovery::Resources { group, version } => {
                    Reply::Json(200, resources::resource_list(&group, &version))
                }
            },
            Some(Target::Resource {
                res,
                namespace,
                name,
                subresource,
            }) => {
                let call = api::Call {
                    method: &method,
                    res,
                    namespace: namespace.as_deref(),
                    name: name.as_deref(),
                    subresource: subresource.as_deref(),
                    query: &query,
                    body: &body,
                    content_type: &content_type,
                    user_agent: &user_agent,
                };
                api::handle(&shared, call).await
            }
        }
    } else {
        Reply::Json(
            413,
            status(
                413,
                "RequestEntityTooLarge",
                "Request entity too large",
                None,
            ),
        )
    };
    record.code = reply.code();
    shared.with(|w| w.requests.push(record));
    reply.into_response()
}
