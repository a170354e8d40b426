//! The crate's errors, and the one place a proxy error becomes an HTTP response.

use std::borrow::Cow;
use std::path::PathBuf;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::body::ProxyBody;

/// A route table that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read route table {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("route table{}: {message}", path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    Parse {
        path: Option<PathBuf>,
        message: String,
    },
    #[error("route {route}: {message}")]
    Invalid { route: String, message: String },
    /// A certificate of the table, named by its domains; the message never holds key material.
    #[error("certificate for {domains}: {message}")]
    Certificate { domains: String, message: String },
    /// An ACME challenge: `kind` is `http-01` (named by its token) or `tls-alpn-01` (by its
    /// domain).
    #[error("acme {kind} challenge for {name}: {message}")]
    Challenge {
        kind: &'static str,
        name: String,
        message: String,
    },
}

/// Why a request was not proxied, or not completely.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("request has no host")]
    MissingHost,
    #[error("request names more than one host (two Host headers, or Host unlike :authority)")]
    AmbiguousHost,
    #[error("request for {host} on a TLS connection opened for {server_name}")]
    Misdirected { server_name: String, host: String },
    #[error("request body too large")]
    BodyTooLarge,
    #[error("the client's request body broke off or was malformed")]
    BodyBroken {
        #[source]
        source: hyper::Error,
    },
    #[error("the client's request body was still coming in after {timeout_ms} ms")]
    BodyTimeout { timeout_ms: u64 },
    #[error("no route for host {host}")]
    NoRoute { host: String },
    #[error("{address} is no instance of the platform")]
    UnknownCaller { address: std::net::IpAddr },
    #[error("caller {caller} is not among {host}'s callers")]
    CallerRefused { caller: String, host: String },
    #[error("{address} is not in the Cloudflare ranges, and {host} admits only those")]
    NotCloudflare {
        address: std::net::IpAddr,
        host: String,
    },
    #[error("{host} admits only Cloudflare's addresses, and the platform has no Cloudflare ranges")]
    NoCloudflareRanges { host: String },
    #[error("no revision of the service at {host} has tag {tag:?}")]
    UnknownTag { tag: String, host: String },
    #[error("the service at {host} does not pick revisions by {header}")]
    TagHeaderOff { header: String, host: String },
    #[error("service at {host} has no revision serving")]
    NotServing { host: String },
    #[error("revision {revision} fails to start")]
    RevisionFailing { revision: String },
    #[error("revision {revision} had no ready instance within {waited_ms} ms")]
    NoReadyInstance { revision: String, waited_ms: u64 },
    #[error("revision {revision} holds too many requests already")]
    HoldQueueFull { revision: String },
    #[error("revision {revision} has too many requests queued")]
    QueueFull { revision: String },
    #[error("{address} is not among the service's allowed client addresses")]
    AddressRefused { address: std::net::IpAddr },
    #[error("past the {} rate limit; retry after {retry_after} s", match scope { crate::controls::Scope::Service => "service's", crate::controls::Scope::Client => "client's" })]
    RateLimited {
        scope: crate::controls::Scope,
        retry_after: u64,
    },
    #[error("the service is under maintenance")]
    Maintenance {
        message: std::sync::Arc<str>,
        retry_after: u32,
    },
    #[error("request timed out after {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    #[error("cannot connect to instance {address}")]
    Connect {
        address: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("instance {address} failed")]
    Upstream {
        address: std::net::SocketAddr,
        #[source]
        source: hyper::Error,
    },
}

impl ProxyError {
    /// The status this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MissingHost | Self::AmbiguousHost | Self::BodyBroken { .. } => {
                StatusCode::BAD_REQUEST
            }
            Self::Misdirected { .. } => StatusCode::MISDIRECTED_REQUEST,
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::NoRoute { .. } | Self::UnknownTag { .. } => StatusCode::NOT_FOUND,
            Self::TagHeaderOff { .. } => StatusCode::BAD_REQUEST,
            Self::UnknownCaller { .. }
            | Self::AddressRefused { .. }
            | Self::CallerRefused { .. }
            | Self::NotCloudflare { .. }
            | Self::NoCloudflareRanges { .. } => StatusCode::FORBIDDEN,
            Self::NotServing { .. }
            | Self::RevisionFailing { .. }
            | Self::NoReadyInstance { .. }
            | Self::HoldQueueFull { .. }
            | Self::QueueFull { .. }
            | Self::Maintenance { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::Connect { .. } | Self::Upstream { .. } => StatusCode::BAD_GATEWAY,
        }
    }

    /// For an error that is the client's own doing (its request was malformed, too large
    /// or too slow), the reason it is counted under; never counted against a revision.
    pub fn client_fault(&self) -> Option<&'static str> {
        match self {
            Self::MissingHost => Some("missing_host"),
            Self::AmbiguousHost => Some("ambiguous_host"),
            Self::Misdirected { .. } => Some("misdirected"),
            Self::BodyTooLarge => Some("body_too_large"),
            Self::BodyBroken { .. } => Some("body_broken"),
            Self::BodyTimeout { .. } => Some("body_timeout"),
            Self::UnknownCaller { .. } => Some("unknown_caller"),
            Self::CallerRefused { .. } => Some("caller_refused"),
            Self::NotCloudflare { .. } => Some("not_cloudflare"),
            Self::NoCloudflareRanges { .. } => Some("no_cloudflare_ranges"),
            Self::UnknownTag { .. } => Some("unknown_tag"),
            Self::TagHeaderOff { .. } => Some("tag_header_off"),
            // Not the client's doing, but the service's own policy: never against a revision.
            Self::AddressRefused { .. } => Some("address_refused"),
            Self::RateLimited {
                scope: crate::controls::Scope::Service,
                ..
            } => Some("rate_limited"),
            Self::RateLimited {
                scope: crate::controls::Scope::Client,
                ..
            } => Some("client_rate_limited"),
            Self::Maintenance { .. } => Some("maintenance"),
            Self::NoRoute { .. }
            | Self::NotServing { .. }
            | Self::RevisionFailing { .. }
            | Self::NoReadyInstance { .. }
            | Self::HoldQueueFull { .. }
            | Self::QueueFull { .. }
            | Self::Timeout { .. }
            | Self::Connect { .. }
            | Self::Upstream { .. } => None,
        }
    }

    /// A short body for the client, which names no instance or internal cause (a refused
    /// caller is told who it was taken for, and a peer its own address).
    pub fn public_message(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            Self::UnknownCaller { address } => {
                return Cow::Owned(format!(
                    "{address} is no instance of this platform: the private listener serves \
                     the platform's own instances only\n"
                ));
            }
            Self::CallerRefused { caller, .. } => {
                return Cow::Owned(format!(
                    "caller {caller} may not call this service: it is not among its callers\n"
                ));
            }
            Self::NotCloudflare { address, .. } => {
                return Cow::Owned(format!(
                    "this service admits only clients coming through Cloudflare, and {address} \
                     is not in Cloudflare's ranges\n"
                ));
            }
            Self::NoCloudflareRanges { .. } => {
                "this service admits only clients coming through Cloudflare, and the platform \
                 has no Cloudflare ranges configured (ingress.cloudflare_ranges_file)\n"
            }
            Self::AddressRefused { address } => {
                return Cow::Owned(format!(
                    "this service does not admit clients from {address}\n"
                ));
            }
            Self::Maintenance { message, .. } if !message.is_empty() => {
                return Cow::Owned(format!("{message}\n"));
            }
            Self::Maintenance { .. } => "this service is under maintenance, retry later\n",
            Self::RateLimited { .. } => "too many requests, retry later\n",
            Self::MissingHost => "request has no host\n",
            Self::AmbiguousHost => "request names more than one host\n",
            Self::Misdirected { .. } => "this connection is for another host\n",
            Self::BodyTooLarge => "request body too large\n",
            Self::BodyBroken { .. } => "request body broke off or was malformed\n",
            Self::BodyTimeout { .. } => "request body took too long\n",
            Self::NoRoute { .. } => "no service has this name\n",
            Self::UnknownTag { .. } => "no revision of this service has that tag\n",
            Self::TagHeaderOff { .. } => {
                "this service does not pick revisions by the Runway-Tag header (its manifest's \
                 spec.workload.tag_header)\n"
            }
            Self::NotServing { .. } => {
                "this service has no revision serving yet: none was deployed, or none became ready\n"
            }
            Self::RevisionFailing { .. } => {
                "this service's revision fails to start; its owners can see why with `runway status`\n"
            }
            Self::NoReadyInstance { .. } => "no instance of this service became ready in time\n",
            Self::HoldQueueFull { .. } | Self::QueueFull { .. } => {
                "service is overloaded, retry later\n"
            }
            Self::Timeout { .. } => "service did not answer in time\n",
            Self::Connect { .. } | Self::Upstream { .. } => "service failed to answer\n",
        })
    }
}

/// The one function that turns a [`ProxyError`] into the client's response.
pub fn error_response(error: &ProxyError, request_id: &HeaderValue) -> Response<ProxyBody> {
    let body = match error.public_message() {
        Cow::Borrowed(text) => Bytes::from_static(text.as_bytes()),
        Cow::Owned(text) => Bytes::from(text),
    };
    let mut response = Response::new(ProxyBody::full(body));
    *response.status_mut() = error.status();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(crate::proxy::X_REQUEST_ID, request_id.clone());
    let retry_after = match error {
        ProxyError::NoReadyInstance { .. }
        | ProxyError::HoldQueueFull { .. }
        | ProxyError::QueueFull { .. } => Some(1),
        ProxyError::RateLimited { retry_after, .. } => Some(*retry_after),
        ProxyError::Maintenance { retry_after, .. } => Some(u64::from(*retry_after)),
        _ => None,
    };
    if let Some(seconds) = retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}
