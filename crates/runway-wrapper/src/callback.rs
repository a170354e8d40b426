//! The shutdown callback: one HTTP request sent when the child stops, if `InitGracefulShutdown`
//! asked for one.
//!
//! As upstream (`helpers/runner_wrapper/api/shutdown_callback.go`): the request has the given
//! method and headers and no body, the whole exchange is bounded by 10 seconds, the response
//! body is read and discarded, and a failure is logged, never fatal. An empty method means
//! `GET`, which is what Go's `http.NewRequest` makes of it. Only `http://` is supported: the
//! callback goes to a local agent or through a tunnel, like the API itself.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Uri, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::proto;

/// Upstream's `defaultShutdownCallbackTimeout`.
pub(crate) const CALLBACK_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and how to call back; built from the request's `ShutdownCallback`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShutdownCallback {
    pub(crate) url: String,
    pub(crate) method: String,
    pub(crate) headers: BTreeMap<String, String>,
}

impl ShutdownCallback {
    /// `None` when no callback was asked for: upstream registers one only for a non-empty URL.
    pub(crate) fn from_request(callback: Option<proto::ShutdownCallback>) -> Option<Self> {
        let callback = callback?;
        if callback.url.is_empty() {
            return None;
        }
        Some(Self {
            url: callback.url,
            method: callback.method,
            headers: callback.headers.into_iter().collect(),
        })
    }
}

#[derive(Debug, thiserror::Error)]
enum CallbackError {
    #[error("invalid URL: {0}")]
    Url(String),
    #[error("invalid method {0:?}")]
    Method(String),
    #[error("invalid request")]
    Request(#[source] http::Error),
    #[error("cannot connect")]
    Connect(#[source] std::io::Error),
    #[error("the HTTP exchange failed")]
    Http(#[source] hyper::Error),
    #[error("no response within {}", crate::duration::format(CALLBACK_TIMEOUT))]
    Timeout,
}

/// Sends the callback and logs how it went.
pub(crate) async fn run(callback: ShutdownCallback) {
    crate::log::info(format_args!(
        "sending the shutdown callback to {}",
        callback.url
    ));
    match tokio::time::timeout(CALLBACK_TIMEOUT, send(&callback)).await {
        Ok(Ok(status)) => crate::log::info(format_args!(
            "the shutdown callback to {} answered {status}",
            callback.url
        )),
        Ok(Err(error)) => crate::log::error(format_args!(
            "the shutdown callback to {} failed: {}",
            callback.url,
            runway_log::chain(&error)
        )),
        Err(_) => crate::log::error(format_args!(
            "the shutdown callback to {} failed: {}",
            callback.url,
            CallbackError::Timeout
        )),
    }
}

async fn send(callback: &ShutdownCallback) -> Result<http::StatusCode, CallbackError> {
    let uri: Uri = callback
        .url
        .parse()
        .map_err(|e| CallbackError::Url(format!("{e}")))?;
    if uri.scheme_str() != Some("http") {
        return Err(CallbackError::Url(
            "only http:// URLs are supported".to_owned(),
        ));
    }
    let authority = uri
        .authority()
        .ok_or_else(|| CallbackError::Url("missing the host".to_owned()))?
        .clone();
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = authority.port_u16().unwrap_or(80);
    let method = if callback.method.is_empty() {
        Method::GET
    } else {
        Method::from_bytes(callback.method.as_bytes())
            .map_err(|_| CallbackError::Method(callback.method.clone()))?
    };
    let path = uri.path_and_query().map_or("/", |p| p.as_str());

    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, authority.as_str())
        .header(
            header::USER_AGENT,
            concat!("runway-wrapper/", env!("CARGO_PKG_VERSION")),
        );
    for (name, value) in &callback.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(CallbackError::Request)?;

    let stream = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(CallbackError::Connect)?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(CallbackError::Http)?;
    let connection = tokio::spawn(connection);
    let result = async {
        let response = sender
            .send_request(request)
            .await
            .map_err(CallbackError::Http)?;
        let status = response.status();
        response
            .into_body()
            .collect()
            .await
            .map_err(CallbackError::Http)?;
        Ok(status)
    }
    .await;
    connection.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_callback_with_a_url_is_registered() {
        assert_eq!(ShutdownCallback::from_request(None), None);
        let empty = proto::ShutdownCallback::default();
        assert_eq!(ShutdownCallback::from_request(Some(empty)), None);
        let callback = proto::ShutdownCallback {
            url: "http://127.0.0.1:1/done".to_owned(),
            method: "PUT".to_owned(),
            headers: [("X-A".to_owned(), "1".to_owned())].into(),
        };
        let registered = ShutdownCallback::from_request(Some(callback)).unwrap();
        assert_eq!(registered.method, "PUT");
        assert_eq!(registered.headers.get("X-A").map(String::as_str), Some("1"));
    }

    #[tokio::test]
    async fn an_empty_method_is_get_as_in_go() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/done", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 512];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0);
                head.extend_from_slice(&buf[..n]);
            }
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
            String::from_utf8(head).unwrap()
        });
        let callback = ShutdownCallback {
            url,
            method: String::new(),
            headers: BTreeMap::new(),
        };
        let status = tokio::time::timeout(CALLBACK_TIMEOUT, send(&callback))
            .await
            .unwrap();
        assert_eq!(status.unwrap(), http::StatusCode::OK);
        let head = server.await.unwrap();
        assert!(head.starts_with("GET /done HTTP/1.1\r\n"), "{head}");
        assert!(
            head.to_ascii_lowercase().contains("\r\nhost: 127.0.0.1:"),
            "{head}"
        );
    }

    #[tokio::test]
    async fn bad_callbacks_are_errors_not_panics() {
        for (url, method, says) in [
            ("https://127.0.0.1:1/", "", "only http://"),
            ("not a url", "", "invalid URL"),
            ("http://127.0.0.1:1/", "BAD METHOD", "invalid method"),
        ] {
            let callback = ShutdownCallback {
                url: url.to_owned(),
                method: method.to_owned(),
                headers: BTreeMap::new(),
            };
            let error = send(&callback).await.unwrap_err().to_string();
            assert!(error.contains(says), "{url}: {error}");
        }
        let bad_header = ShutdownCallback {
            url: "http://127.0.0.1:1/".to_owned(),
            method: String::new(),
            headers: [("bad header".to_owned(), "x".to_owned())].into(),
        };
        let error = send(&bad_header).await.unwrap_err().to_string();
        assert!(error.contains("invalid request"), "{error}");
    }
}
