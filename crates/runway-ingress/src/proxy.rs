//! One request through the ingress: host → route → revision by weight → instance (held while
//! none is ready, queued while all are full) → the instance's response, or an error from
//! [`crate::error::error_response`].

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::gauge::Gauge;

use crate::Shared;
use crate::body::{BodyFault, BodyWatch, ClientBody, Finish, ProxyBody};
use crate::error::{ProxyError, error_response};
use crate::log::{AccessRecord, millis};
use crate::table::{Instance, Pick, Revision, Route};
use crate::trace::{RequestTrace, Wait};
use crate::upstream::{self, Attempt, Sender, UpstreamBody};

pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
/// Who called, on the private listener: `service/env`, set by the ingress alone.
pub const RUNWAY_CALLER: HeaderName = HeaderName::from_static("runway-caller");
/// The tag header a route without one of its own refuses (`spec.workload.tag_header`): no
/// client may count on reaching a revision by a header the service did not ask for.
pub(crate) const RUNWAY_TAG: HeaderName = HeaderName::from_static("runway-tag");
/// The client's address as Cloudflare saw it: passed on only for a Cloudflare route, whose
/// peers are all Cloudflare's.
pub const CF_CONNECTING_IP: HeaderName = HeaderName::from_static("cf-connecting-ip");

/// Headers that describe one connection, never forwarded (RFC 9110 section 7.6.1).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// What the proxy knows about the connection a request came on.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub(crate) tls: bool,
    /// The client's address (the TCP peer).
    pub(crate) address: IpAddr,
    /// On the private listener: the client is an instance, and `.internal` names are served.
    pub(crate) private: bool,
    /// The client's address as a header value, made once per connection.
    pub(crate) ip: HeaderValue,
    /// The TLS server name the client asked for (lower case), if any.
    pub(crate) sni: Option<Arc<str>>,
    /// Set when a request body was left unread: the connection then closes lingering.
    pub(crate) linger: Arc<std::sync::atomic::AtomicBool>,
}

impl Peer {
    pub(crate) fn new(
        address: SocketAddr,
        tls: bool,
        sni: Option<&str>,
        linger: Arc<std::sync::atomic::AtomicBool>,
    ) -> Self {
        let ip = ip_header(address.ip());
        Self {
            tls,
            address: address.ip().to_canonical(),
            private: false,
            ip,
            sni: sni.map(|name| Arc::from(name.to_ascii_lowercase())),
            linger,
        }
    }

    /// The same peer, on the private listener.
    pub(crate) fn private(mut self) -> Self {
        self.private = true;
        self
    }
}

/// An address as a header value. An IPv4 one, the usual peer, is written without the
/// formatting machinery, on the stack, and copied once: this runs for every new connection.
fn ip_header(ip: IpAddr) -> HeaderValue {
    let value = match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let mut text = [0u8; 15];
            let mut len = 0;
            let mut push = |byte: u8| {
                text[len] = byte;
                len += 1;
            };
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    push(b'.');
                }
                if octet >= 100 {
                    push(b'0' + octet / 100);
                }
                if octet >= 10 {
                    push(b'0' + octet / 10 % 10);
                }
                push(b'0' + octet % 10);
            }
            HeaderValue::from_bytes(&text[..len])
        }
        IpAddr::V6(_) => HeaderValue::from_str(&ip.to_string()),
    };
    value.unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

/// The service function of every client connection.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would carry the request twice (see `proxy`)"
)]
pub(crate) fn handle(
    shared: Arc<Shared>,
    peer: Arc<Peer>,
    request: Request<Incoming>,
) -> impl Future<Output = Result<Response<ProxyBody>, Infallible>> + Send {
    async move {
        let start = Instant::now();
        let (request_id, fresh_id) = match request.headers().get(&X_REQUEST_ID) {
            Some(id) if !id.is_empty() && id.len() <= 200 => (id.clone(), false),
            _ => (new_request_id(), true),
        };
        // Without an access log there is no record: nothing is allocated or copied for it.
        let mut record = shared.access_log.as_ref().map(|_| {
            Box::new(AccessRecord {
                time_ms: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                request_id: request_id.to_str().unwrap_or_default().to_owned(),
                client: peer.ip.to_str().unwrap_or_default().to_owned(),
                method: request.method().to_string(),
                path: request
                    .uri()
                    .path_and_query()
                    .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
                ..AccessRecord::default()
            })
        });
        // Likewise without a tracer: no trace.
        let mut trace = shared.options.tracing.as_ref().map(|tracing| {
            Box::new(tracing.begin(
                request.headers(),
                request.method(),
                request.uri().path(),
                peer.address,
                start,
            ))
        });
        let mut revision = None;
        let (parts, body) = request.into_parts();
        let (body, watch) = ClientBody::new(body, shared.options.max_body_bytes, &peer.linger);
        let request = Request::from_parts(parts, body);
        let id = RequestId {
            value: &request_id,
            fresh: fresh_id,
        };
        let context = Context {
            shared: &shared,
            peer: &peer,
            body: &watch,
            id,
            start,
        };
        match proxy(&context, request, &mut record, &mut trace, &mut revision).await {
            Ok(response) => Ok(response),
            Err(error) => {
                if watch.unfinished() || matches!(watch.fault(), Some(BodyFault::TooLarge)) {
                    // The client may still be sending: close lingering, so it reads this answer.
                    peer.linger
                        .store(true, std::sync::atomic::Ordering::Release);
                }
                let response = error_response(&error, &request_id);
                let status = response.status().as_u16();
                // The client's own faults are counted apart: a revision's figures (and so the
                // canary analysis and the autoscaler) hold only what its instances answered, or
                // failed to answer.
                match (&revision, error.client_fault()) {
                    (Some(rev), None) => {
                        rev.metrics.record(status, start.elapsed());
                    }
                    (Some(rev), Some(reason)) => rev.metrics.client_error(reason),
                    (None, Some(reason)) => shared.metrics.refused(reason),
                    (None, None) => shared.metrics.unrouted(),
                }
                if let Some(trace) = trace {
                    trace.end(status, Some(&error.to_string()));
                }
                if let (Some(log), Some(mut record)) = (&shared.access_log, record) {
                    record.status = status;
                    record.duration_ms = millis(start.elapsed());
                    record.error = Some(error.to_string());
                    log.send(*record);
                }
                Ok(response)
            }
        }
    }
}

/// What every step of one request reads.
struct Context<'a> {
    shared: &'a Shared,
    peer: &'a Peer,
    /// The client's body, as sending it went.
    body: &'a BodyWatch,
    id: RequestId<'a>,
    start: Instant,
}

/// The request's id: the client's, or one made for it (`fresh`), which goes to the instance
/// and back to the client.
#[derive(Clone, Copy)]
struct RequestId<'a> {
    value: &'a HeaderValue,
    fresh: bool,
}

/// 32 random hex digits (128 bits), without the formatting machinery: this runs per request.
/// Marked sensitive, so that HTTP/2's HPACK never indexes it: a value seen once would only
/// push others out of the table.
fn new_request_id() -> HeaderValue {
    /// Each byte's two hex digits: one lookup per byte.
    const DIGITS: [[u8; 2]; 256] = {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut digits = [[0u8; 2]; 256];
        let mut byte = 0;
        while byte < 256 {
            digits[byte] = [HEX[byte >> 4], HEX[byte & 0xf]];
            byte += 1;
        }
        digits
    };
    let random = fastrand::u128(..).to_be_bytes();
    let mut id = [0u8; 32];
    for (digits, byte) in id.chunks_exact_mut(2).zip(random) {
        digits.copy_from_slice(&DIGITS[usize::from(byte)]);
    }
    // Hex digits are always a valid header value.
    let mut value = HeaderValue::from_bytes(&id).unwrap_or_else(|_| HeaderValue::from_static("0"));
    value.set_sensitive(true);
    value
}

/// A request's host, lower case and without port, kept without a copy when the request's
/// own is already so (the usual case).
enum Host {
    /// The `Host` header's value, its host part ending at `end`.
    Header(HeaderValue, usize),
    /// The URI's authority (HTTP/2's `:authority`, HTTP/1.1's absolute form), its host part
    /// at `start..end`: found once (`Authority::host` splits the authority on each call).
    Authority(http::uri::Authority, usize, usize),
    Lowered(String),
}

impl Host {
    fn as_str(&self) -> &str {
        match self {
            // Checked to be visible ASCII when made (`to_str`): read as UTF-8, a cheaper
            // check than `to_str`'s byte by byte.
            Self::Header(value, end) => value
                .as_bytes()
                .get(..*end)
                .and_then(|host| std::str::from_utf8(host).ok())
                .unwrap_or_default(),
            Self::Authority(authority, start, end) => {
                authority.as_str().get(*start..*end).unwrap_or_default()
            }
            Self::Lowered(host) => host,
        }
    }

    fn lowered(host: &str) -> Option<Self> {
        host.bytes()
            .any(|b| b.is_ascii_uppercase())
            .then(|| Self::Lowered(host.to_ascii_lowercase()))
    }
}

impl std::ops::Deref for Host {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

/// The request's host, lower case and without port: the URI's (HTTP/2's `:authority`, or
/// HTTP/1.1's absolute form), else the `Host` header's. A request with two `Host` headers, or
/// an HTTP/2 request whose `Host` names another host than its `:authority`, names no one
/// host: 400 (RFC 9112 section 3.2, RFC 9113 section 8.3.1).
fn host_of<B>(request: &Request<B>) -> Result<Host, ProxyError> {
    let mut values = request.headers().get_all(header::HOST).iter();
    let header = values.next();
    if values.next().is_some() {
        return Err(ProxyError::AmbiguousHost);
    }
    let from_header = || {
        header
            .and_then(|value| value.to_str().ok())
            .and_then(strip_port)
    };
    match request.uri().authority() {
        Some(authority) => {
            let host = authority.host();
            if request.version() >= Version::HTTP_2
                && header.is_some()
                && !from_header().is_some_and(|h| h.eq_ignore_ascii_case(host))
            {
                return Err(ProxyError::AmbiguousHost);
            }
            Ok(Host::lowered(host).unwrap_or_else(|| {
                // `host` is a part of the authority's own string: where it lies is kept. Were
                // it not (another `http` release), it is copied rather than trusted.
                let whole = authority.as_str();
                let start = host.as_ptr().addr().wrapping_sub(whole.as_ptr().addr());
                let end = start.wrapping_add(host.len());
                match whole.get(start..end) {
                    Some(_) => Host::Authority(authority.clone(), start, end),
                    None => Host::Lowered(host.to_owned()),
                }
            }))
        }
        None => {
            let host = from_header().ok_or(ProxyError::MissingHost)?;
            let end = host.len();
            match (Host::lowered(host), header) {
                (Some(lowered), _) => Ok(lowered),
                (None, Some(value)) => Ok(Host::Header(value.clone(), end)),
                (None, None) => Err(ProxyError::MissingHost),
            }
        }
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port` to the host (`[v6]` keeps its brackets, as
/// `Uri::host` gives it). None when what follows the host is not a port. The host itself is
/// not checked here: one no route serves gets 404.
fn strip_port(authority: &str) -> Option<&str> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => {
            let end = rest.find(']')? + 2;
            let port = match &authority[end..] {
                "" => None,
                after => Some(after.strip_prefix(':')?),
            };
            (&authority[..end], port)
        }
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    (!host.is_empty() && port_ok).then_some(host)
}

/// Routes the request and sends it to an instance. Not an `async fn`: rustc keeps an
/// `async fn`'s arguments in its future apart from its body's state, so the request would be
/// carried (and copied) twice; an `async move` block keeps what it captures once. Every
/// request's future is moved, so that copy was paid per request (with `send_http1`, which
/// has since taken the request by reference: 142 instructions per proxied HTTP/1.1 request,
/// 197 per HTTPS/1.1 and 276 per HTTP/2 one).
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would carry the request twice"
)]
fn proxy(
    context: &Context<'_>,
    mut request: Request<ClientBody>,
    record: &mut Option<Box<AccessRecord>>,
    trace: &mut Option<Box<RequestTrace>>,
    chosen: &mut Option<Arc<Revision>>,
) -> impl Future<Output = Result<Response<ProxyBody>, ProxyError>> {
    async move {
        let Context {
            shared,
            peer,
            start,
            ..
        } = *context;
        let found = host_of(&request)?;
        // Read once: a `Host` header's value is checked again on each reading.
        let host: &str = &found;
        if let Some(record) = record {
            record.host = host.to_owned();
        }
        misdirected(shared, peer, host)?;
        // An HTTP/1.1 upgrade (WebSocket) keeps its two headers and becomes a tunnel on 101.
        let upgrade = upgrade_protocol(&request);
        let client_upgrade = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut request));
        let Resolved {
            route,
            revision: weighed,
            caller,
            tag_header,
        } = resolve(shared, peer, host, request.headers())?;
        // The tag header is the platform's to read: the instance never sees it.
        let by_tag_header = tag_header.is_some_and(|(name, picked)| {
            request.headers_mut().remove(&name);
            picked
        });
        let (revision, cell) = match (&route.cells, weighed) {
            (Some(cells), _) => {
                // Cell routing reads rules (and perhaps the body's first bytes): off the usual
                // path, and boxed so that its state does not weigh on every request's future.
                let cell = Box::pin(choose_cell(shared, &route, cells, &mut request)).await?;
                if let Some(record) = record {
                    record.rule =
                        Some(cell.decision.rule.clone().unwrap_or_else(|| "-".to_owned()));
                    record.cell_outcome = Some(cell.outcome());
                }
                (Arc::clone(&cell.revision), Some(cell))
            }
            (None, Some(revision)) => (revision, None),
            (None, None) => {
                return Err(ProxyError::NotServing {
                    host: host.to_owned(),
                });
            }
        };
        *chosen = Some(Arc::clone(&revision));
        if let Some(controls) = &route.controls {
            controls.admit(
                client_address(peer, &route, request.headers()),
                !peer.private,
            )?;
        }
        // A declared length (hyper has checked `Content-Length`) past the limit is refused
        // before an instance is bothered.
        if request.body().size_hint().lower() > shared.options.max_body_bytes as u64 {
            return Err(ProxyError::BodyTooLarge);
        }
        let cloudflare = route.cloudflare && !peer.private;
        let set_cookie = route
            .sticky
            .then(|| sticky_set_cookie(request.headers(), &revision.name))
            .flatten();
        if let Some(record) = record {
            record.service = Some(route.service.clone());
            record.env = Some(route.env.clone());
        }

        // A slot is tried at once; only when none is free does the request wait (boxed: the
        // waiting's state is not carried by the requests that never wait).
        let picked = match (!revision.is_removed()).then(|| revision.try_pick()) {
            Some(Pick::Got(instance)) => Some(instance),
            _ => None,
        };
        let (instance, revision, deadline) = match picked {
            Some(instance) => (instance, revision, start + route.request_timeout),
            None => {
                // A revision the tag header named is the only one that may serve the request.
                let choose_again = (!by_tag_header).then_some(host);
                let mut waits = trace.as_ref().map(|_| Vec::new());
                let acquired = Box::pin(acquire(
                    context,
                    choose_again,
                    route,
                    revision,
                    chosen,
                    waits.as_mut(),
                ))
                .await;
                if let (Some(trace), Some(waits), Some(revision)) =
                    (trace.as_deref(), &waits, &*chosen)
                {
                    for &(wait, from, to) in waits {
                        trace.waited(wait, from, to, &revision.name);
                    }
                }
                acquired?
            }
        };
        revision.metrics.in_flight.inc();
        if let Some(record) = record {
            record.revision = Some(revision.name.clone());
        }
        if let Some(trace) = trace {
            trace.routed(&revision.service, &revision.env, &revision.name);
        }
        let instance_address = instance.address;
        // From here the slot is released by `Finish` (on success) or `Slot` (on error).
        let slot = Slot {
            revision: Arc::clone(&revision),
            instance: Some(instance),
        };
        let stamp = Stamp { caller, cloudflare };
        upstream_request(
            &mut request,
            peer,
            &found,
            context.id,
            upgrade.as_ref(),
            stamp,
        );
        drop(found);
        if let Some(cell) = cell {
            // Dropped here, not carried across the send in the request's future.
            mark_cell_request(request.headers_mut(), &cell);
        }
        // Boxed: the span is carried across the send, and most requests are not traced.
        let call = match (trace.as_deref(), &shared.options.tracing) {
            (Some(trace), Some(tracing)) => Some(Box::new(trace.call(
                tracing,
                instance_address,
                request.headers_mut(),
            ))),
            _ => None,
        };
        let timeout_ms = deadline.saturating_duration_since(start).as_millis() as u64;
        let body = context.body;
        let sent =
            crate::timer::timeout_at(deadline, send(shared, &revision, slot, &mut request, body))
                .await
                .map_err(|_| {
                    // An instance cannot be blamed for not answering a request still coming in.
                    if body.waiting_for_client() {
                        ProxyError::BodyTimeout { timeout_ms }
                    } else {
                        ProxyError::Timeout { timeout_ms }
                    }
                })
                .and_then(|sent| sent);
        if let Some(call) = call {
            let status = sent
                .as_ref()
                .ok()
                .map(|(response, ..)| response.status().as_u16());
            crate::trace::end_call(*call, status);
        }
        let (mut response, sender, mut slot) = sent?;
        let Some(instance) = slot.instance.take() else {
            // `send` hands back the slot it used, instance and all.
            return Err(ProxyError::NoReadyInstance {
                revision: revision.name.clone(),
                waited_ms: 0,
            });
        };
        drop(slot);
        if let Some(record) = record {
            record.instance = Some(instance.address.to_string());
        }
        let tunnel = match client_upgrade {
            Some(client) if response.status() == StatusCode::SWITCHING_PROTOCOLS => {
                Some((client, hyper::upgrade::on(&mut response)))
            }
            _ => None,
        };
        let (mut parts, body) = response.into_parts();
        // The instance's HTTP version is its own hop's: the client hears the ingress's (an
        // HTTP/1.0 answer would otherwise go out as `HTTP/1.0 200 OK` to an HTTP/1.1 client).
        parts.version = Version::HTTP_11;
        let protocol = match tunnel {
            Some(_) => parts.headers.get(header::UPGRADE).cloned(),
            None => None,
        };
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.insert(X_REQUEST_ID, context.id.value.clone());
        if let Some(cookie) = set_cookie {
            parts.headers.append(header::SET_COOKIE, cookie);
        }
        revision
            .metrics
            .record(parts.status.as_u16(), start.elapsed());
        let log = match (&shared.access_log, record.take()) {
            (Some(log), Some(mut record)) => {
                record.status = parts.status.as_u16();
                Some((log.clone(), record))
            }
            _ => None,
        };
        let mut finish = Finish {
            log,
            trace: trace.take().map(|trace| (trace, parts.status.as_u16())),
            start,
            instance,
            revision,
            sender,
            complete: false,
        };
        if let Some((client, upstream)) = tunnel {
            // The upgraded connection is the tunnel's now; the slot is held until it closes.
            finish.sender = None;
            if let Some(protocol) = protocol {
                parts.headers.insert(header::UPGRADE, protocol);
                parts
                    .headers
                    .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            }
            tokio::spawn(async move {
                if let (Ok(client), Ok(upstream)) = (client.await, upstream.await) {
                    let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
                    if let Ok((_, to_client)) =
                        tokio::io::copy_bidirectional(&mut client, &mut upstream).await
                    {
                        finish.add_bytes(to_client);
                        finish.complete = true;
                    }
                }
                drop(finish);
            });
            return Ok(Response::from_parts(parts, ProxyBody::full(Bytes::new())));
        }
        Ok(Response::from_parts(
            parts,
            ProxyBody::upstream(body, finish),
        ))
    }
}

/// A request over TLS must be for the host its connection was opened for, when that is a
/// host the table serves: its certificate was made for that host, and a client that reuses a
/// connection for another host (HTTP/2 coalescing) is told to open a new one (421, RFC 9110
/// section 15.5.20), which it does. A name the table does not serve (an operator's
/// certificate's other domains) leaves routing to `Host`.
fn misdirected(shared: &Shared, peer: &Peer, host: &str) -> Result<(), ProxyError> {
    let Some(sni) = peer.sni.as_deref() else {
        return Ok(());
    };
    if sni != host && shared.routes.load_guard().names(sni) {
        return Err(ProxyError::Misdirected {
            server_name: sni.to_owned(),
            host: host.to_owned(),
        });
    }
    Ok(())
}

/// What [`resolve`] found: the route, its revision (none for a cell-routed route, whose rules
/// choose), on the private listener the caller's `Runway-Caller`, and the tag header the
/// request carried (to strip) with whether it picked the revision.
struct Resolved {
    route: Arc<Route>,
    revision: Option<Arc<Revision>>,
    caller: Option<HeaderValue>,
    tag_header: Option<(HeaderName, bool)>,
}

/// The route for `host` on the peer's listener, and its revision: the tag's, else the sticky
/// cookie's (when the route has sticky sessions and that revision still gets traffic), else
/// one chosen by weight; none for a cell-routed route, whose rules choose.
///
/// On the private listener, the peer must be an instance of the platform that the route's
/// callers admit; on the public ones, a Cloudflare route's peer must be in Cloudflare's
/// ranges. Neither costs a public request of any other route more than a field's read.
fn resolve(
    shared: &Shared,
    peer: &Peer,
    host: &str,
    headers: &HeaderMap,
) -> Result<Resolved, ProxyError> {
    let table = shared.routes.load_guard();
    let no_route = || ProxyError::NoRoute {
        host: host.to_owned(),
    };
    let (target, caller) = if peer.private {
        let caller = table
            .caller(peer.address)
            .ok_or(ProxyError::UnknownCaller {
                address: peer.address,
            })?;
        let target = table.resolve_private(host).ok_or_else(no_route)?;
        if !crate::config::admits(&target.route.callers, &caller.name) {
            return Err(ProxyError::CallerRefused {
                caller: caller.name.clone(),
                host: host.to_owned(),
            });
        }
        (target, Some(caller.header.clone()))
    } else {
        let target = table.resolve(host).ok_or_else(no_route)?;
        if target.route.cloudflare {
            cloudflare_admits(shared, peer, host)?;
        }
        (target, None)
    };
    let route = &target.route;
    if route.cells.is_some() {
        return Ok(Resolved {
            route: Arc::clone(route),
            revision: None,
            caller,
            tag_header: None,
        });
    }
    // The route's tag header picks a revision by its tag on the route's own names (a tag
    // host's revision is its own); a route without one refuses `Runway-Tag`.
    let (header, tags) = match &route.tag_header {
        Some((name, tags)) => (name, Some(tags)),
        None => (&RUNWAY_TAG, None),
    };
    let asked = headers.get(header);
    // The cookie is read only for a route with sticky sessions.
    let sticky = || {
        let name = sticky_cookie(headers)?;
        route
            .revisions
            .iter()
            .find(|(weight, r)| *weight > 0 && r.name == name)
            .map(|(_, r)| r)
    };
    let (revision, picked) = match (&target.revision, asked, tags) {
        (Some(tagged), _, _) => (Arc::clone(tagged), false),
        (None, Some(value), Some(tags)) => {
            let tag = value.to_str().unwrap_or_default().trim();
            let revision = tags.get(tag).ok_or_else(|| ProxyError::UnknownTag {
                tag: tag.to_owned(),
                host: host.to_owned(),
            })?;
            (Arc::clone(revision), true)
        }
        (None, Some(_), None) => {
            return Err(ProxyError::TagHeaderOff {
                header: header.to_string(),
                host: host.to_owned(),
            });
        }
        (None, None, _) => match route.sticky.then(sticky).flatten() {
            Some(sticky) => (Arc::clone(sticky), false),
            None => (
                Arc::clone(route.choose().ok_or_else(|| ProxyError::NotServing {
                    host: host.to_owned(),
                })?),
                false,
            ),
        },
    };
    Ok(Resolved {
        route: Arc::clone(route),
        revision: Some(revision),
        caller,
        tag_header: asked.map(|_| (header.clone(), picked)),
    })
}

/// The client's address as a route's controls see it: the peer's, but on a Cloudflare route
/// (whose peers are all Cloudflare's) the `CF-Connecting-IP` Cloudflare gives.
fn client_address(peer: &Peer, route: &Route, headers: &HeaderMap) -> IpAddr {
    let cloudflare = route.cloudflare && !peer.private;
    cloudflare
        .then(|| {
            headers
                .get(CF_CONNECTING_IP)?
                .to_str()
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .flatten()
        .unwrap_or(peer.address)
}

/// A Cloudflare route's peer is in the operator's Cloudflare ranges; with no ranges
/// configured, no peer is (fail closed).
fn cloudflare_admits(shared: &Shared, peer: &Peer, host: &str) -> Result<(), ProxyError> {
    match shared.cloudflare.ranges() {
        None => Err(ProxyError::NoCloudflareRanges {
            host: host.to_owned(),
        }),
        Some(ranges) if !ranges.contains(peer.address) => Err(ProxyError::NotCloudflare {
            address: peer.address,
            host: host.to_owned(),
        }),
        Some(_) => Ok(()),
    }
}

/// The cell a request goes to, by the route's rules: on its headers, cookies and path, and
/// when that leaves a `json-body` rule to decide, on the body's first bytes too (read ahead,
/// kept, and sent on first).
async fn choose_cell(
    shared: &Shared,
    route: &Route,
    cells: &crate::cells::CellRouting,
    request: &mut Request<ClientBody>,
) -> Result<crate::cells::Chosen, ProxyError> {
    let view = |prefix: Option<&[u8]>, request: &Request<ClientBody>| {
        cells.decide(&runway_cells::RequestView {
            path: request.uri().path(),
            headers: request.headers(),
            body_prefix: prefix,
        })
    };
    let mut decision = view(None, request);
    let json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.to_ascii_lowercase().contains("json"));
    if cells.reads_body() && json && !request.body().is_end_stream() && cells.needs_body(&decision)
    {
        let prefix = request
            .body_mut()
            .read_prefix(
                runway_cells::BODY_PREFIX_BYTES,
                shared.options.header_read_timeout,
            )
            .await;
        decision = view(Some(&prefix), request);
    }
    let chosen = cells
        .place(decision)
        .await
        .ok_or_else(|| ProxyError::NotServing {
            host: route.service.clone(),
        })?;
    shared.metrics.cell_decision(route, &chosen);
    Ok(chosen)
}

/// What the cell is told of the decision, as GitLab's router tells it; a client's own
/// `X-Gitlab-Http-Router-*` headers are not passed on.
fn mark_cell_request(headers: &mut HeaderMap, cell: &crate::cells::Chosen) {
    const ACTION: HeaderName = HeaderName::from_static("x-gitlab-http-router-rule-action");
    const TYPE: HeaderName = HeaderName::from_static("x-gitlab-http-router-rule-type");
    let spoofed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| name.as_str().starts_with("x-gitlab-http-router-"))
        .cloned()
        .collect();
    for name in spoofed {
        headers.remove(name);
    }
    if cell.decision.rule.is_some() {
        headers.insert(
            ACTION,
            HeaderValue::from_static(cell.decision.action.header_value()),
        );
    }
    if let runway_cells::Action::Classify { kind, .. } = &cell.decision.action {
        headers.insert(TYPE, HeaderValue::from_static(kind.as_str()));
    }
}

/// The sticky cookie's name.
const STICKY_COOKIE: &str = "runway-revision";

/// The revision named by the request's sticky cookie.
fn sticky_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == STICKY_COOKIE)
        .map(|(_, value)| value.trim())
}

/// The sticky cookie to set on a response from `revision`, unless the client has it already.
fn sticky_set_cookie(headers: &HeaderMap, revision: &str) -> Option<HeaderValue> {
    if sticky_cookie(headers) == Some(revision) {
        return None;
    }
    HeaderValue::from_str(&format!(
        "{STICKY_COOKIE}={revision}; Path=/; HttpOnly; SameSite=Lax"
    ))
    .ok()
}

/// A slot on an instance, released on drop unless handed on.
struct Slot {
    revision: Arc<Revision>,
    instance: Option<Arc<Instance>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(instance) = self.instance.take() {
            self.revision.release(&instance);
            self.revision.metrics.in_flight.dec();
        }
    }
}

/// Counts a request in a queue (and its gauge) while it waits.
struct Waiting<'a> {
    count: &'a AtomicUsize,
    gauge: &'a Gauge,
}

impl<'a> Waiting<'a> {
    /// Joins the queue unless it already holds `limit`; also returns whether it was empty.
    fn join(count: &'a AtomicUsize, gauge: &'a Gauge, limit: usize) -> Option<(Self, bool)> {
        let before = count.fetch_add(1, Ordering::AcqRel);
        if before >= limit {
            count.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        gauge.inc();
        Some((Self { count, gauge }, before == 0))
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
        self.gauge.dec();
    }
}

/// Waits for a slot on a ready instance: held (bounded) while the revision has none ready,
/// queued (bounded) while all are full. Returns the instance, the revision (another one,
/// chosen again at `choose_again`'s host, if the table dropped the first meanwhile; none
/// when the request's tag header named it) and the request's deadline.
async fn acquire(
    context: &Context<'_>,
    choose_again: Option<&str>,
    route: Arc<Route>,
    revision: Arc<Revision>,
    chosen: &mut Option<Arc<Revision>>,
    waits: Option<&mut Vec<(Wait, Instant, Instant)>>,
) -> Result<(Arc<Instance>, Arc<Revision>, Instant), ProxyError> {
    let Context {
        shared,
        peer,
        start,
        ..
    } = *context;
    let mut waits = Waits {
        done: waits,
        current: None,
    };
    let mut revision = revision;
    let mut timeout = route.request_timeout;
    let mut held_for = Duration::ZERO;
    let mut rerouted = false;
    loop {
        let mut hold_started: Option<Instant> = None;
        let mut held: Option<Waiting<'_>> = None;
        let mut queued: Option<Waiting<'_>> = None;
        let revision_ref: &Revision = &revision;
        let outcome = loop {
            let changed = revision_ref.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if revision_ref.is_removed() {
                break None;
            }
            let wait_until = match revision_ref.try_pick() {
                Pick::Got(instance) => break Some(instance),
                Pick::NoneReady if revision_ref.is_failing() => {
                    return Err(ProxyError::RevisionFailing {
                        revision: revision_ref.name.clone(),
                    });
                }
                Pick::NoneReady => {
                    waits.enter(Wait::Hold);
                    queued = None;
                    let since = *hold_started.get_or_insert_with(Instant::now);
                    if held.is_none() {
                        let (waiting, first) = Waiting::join(
                            &revision_ref.held,
                            &revision_ref.metrics.held,
                            shared.options.max_held_per_revision,
                        )
                        .ok_or_else(|| ProxyError::HoldQueueFull {
                            revision: revision_ref.name.clone(),
                        })?;
                        if first {
                            shared.routes.publish_scale_up(revision_ref);
                        }
                        held = Some(waiting);
                    }
                    let hold = revision_ref.hold_timeout();
                    if since.elapsed() >= hold {
                        return Err(ProxyError::NoReadyInstance {
                            revision: revision_ref.name.clone(),
                            waited_ms: since.elapsed().as_millis() as u64,
                        });
                    }
                    since + hold
                }
                Pick::Busy => {
                    waits.enter(Wait::Queue);
                    if let Some(since) = hold_started.take() {
                        held_for += since.elapsed();
                        held = None;
                    }
                    if queued.is_none() {
                        let (waiting, _) = Waiting::join(
                            &revision_ref.queued,
                            &revision_ref.metrics.queued,
                            shared.options.max_queued_per_revision,
                        )
                        .ok_or_else(|| ProxyError::QueueFull {
                            revision: revision_ref.name.clone(),
                        })?;
                        queued = Some(waiting);
                    }
                    let deadline = start + held_for + timeout;
                    if Instant::now() >= deadline {
                        return Err(ProxyError::Timeout {
                            timeout_ms: timeout.as_millis() as u64,
                        });
                    }
                    deadline
                }
            };
            let _ = crate::timer::timeout_at(wait_until, changed).await;
        };
        if let Some(since) = hold_started {
            held_for += since.elapsed();
        }
        waits.close();
        drop((held, queued));
        match outcome {
            Some(instance) => return Ok((instance, revision, start + held_for + timeout)),
            None if !rerouted && choose_again.is_some() => {
                // The table dropped this revision while we waited: choose again, once.
                rerouted = true;
                let host = choose_again.unwrap_or_default();
                let Resolved {
                    route: new_route,
                    revision: new_revision,
                    ..
                } = resolve(shared, peer, host, &HeaderMap::new())?;
                // A cell's revision is not chosen again: its cell left the topology.
                let new_revision = new_revision.ok_or_else(|| ProxyError::NotServing {
                    host: host.to_owned(),
                })?;
                timeout = new_route.request_timeout;
                *chosen = Some(Arc::clone(&new_revision));
                revision = new_revision;
            }
            None => {
                return Err(ProxyError::NoReadyInstance {
                    revision: revision.name.clone(),
                    waited_ms: held_for.as_millis() as u64,
                });
            }
        }
    }
}

/// A request's waits for its trace, each closed when the next begins or the wait ends (also
/// by an error's early return); nothing without a trace.
struct Waits<'a> {
    done: Option<&'a mut Vec<(Wait, Instant, Instant)>>,
    current: Option<(Wait, Instant)>,
}

impl Waits<'_> {
    fn enter(&mut self, wait: Wait) {
        if self.done.is_some() && self.current.map(|(w, _)| w) != Some(wait) {
            self.close();
            self.current = Some((wait, Instant::now()));
        }
    }

    fn close(&mut self) {
        if let (Some(done), Some((wait, from))) = (self.done.as_deref_mut(), self.current.take()) {
            done.push((wait, from, Instant::now()));
        }
    }
}

impl Drop for Waits<'_> {
    fn drop(&mut self) {
        self.close();
    }
}

/// The protocol an HTTP/1.1 request asks to upgrade to (`Connection: upgrade` and `Upgrade`).
fn upgrade_protocol<B>(request: &Request<B>) -> Option<HeaderValue> {
    if request.version() != Version::HTTP_11 {
        return None;
    }
    let asks = request
        .headers()
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    if asks {
        request.headers().get(header::UPGRADE).cloned()
    } else {
        None
    }
}

/// What [`strip_hop_by_hop`] found.
#[derive(Debug, Default)]
struct Stripped {
    /// A `TE` header asked for trailers.
    te_trailers: bool,
    /// `Connection` named headers of its own, which went too.
    named_by_connection: bool,
}

fn strip_hop_by_hop(headers: &mut HeaderMap) -> Stripped {
    strip_headers(headers, false)
}

/// [`strip_hop_by_hop`], and for a request also what only the ingress may say
/// (`Runway-Caller`, `CF-Connecting-IP`), in the same walk.
fn strip_headers(headers: &mut HeaderMap, request: bool) -> Stripped {
    // Most messages carry none of them: find them by walking the few names there are, since
    // every lookup or removal by name hashes it. This runs twice per request.
    let mut present: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            *name == header::UPGRADE
                || HOP_BY_HOP.contains(name)
                || request && (*name == RUNWAY_CALLER || *name == CF_CONNECTING_IP)
        })
        .cloned()
        .collect();
    if present.is_empty() {
        return Stripped::default();
    }
    let te_trailers = present.contains(&header::TE)
        && headers
            .get_all(header::TE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("trailers"));
    // Headers named in `Connection` are hop-by-hop too.
    let hop_by_hop = present.len();
    if present.contains(&header::CONNECTION) {
        present.extend(
            headers
                .get_all(header::CONNECTION)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok()),
        );
    }
    for name in &present {
        headers.remove(name);
    }
    Stripped {
        te_trailers,
        named_by_connection: present.len() > hop_by_hop,
    }
}

/// What the ingress vouches for on a request, beyond what every request gets.
struct Stamp {
    /// On the private listener: `Runway-Caller`.
    caller: Option<HeaderValue>,
    /// A Cloudflare route's request, whose peer is Cloudflare's: its `CF-Connecting-IP` is
    /// passed on.
    cloudflare: bool,
}

/// The request as the instance gets it: origin-form, HTTP/1.1 (HTTP/2 for h2c instances,
/// in `send_h2c`), hop-by-hop headers stripped, and what the proxy knows added. The client's
/// `Host` is kept as it came; each header added or replaced is one hashed insert.
///
/// `Runway-Caller` and `CF-Connecting-IP` are the ingress's to say: a client's are dropped
/// in the walk that finds hop-by-hop headers, so a public request pays no lookup for them.
/// The caller's is set on the private listener; Cloudflare's is kept for a Cloudflare route.
fn upstream_request(
    request: &mut Request<UpstreamBody>,
    peer: &Peer,
    host: &Host,
    id: RequestId<'_>,
    upgrade: Option<&HeaderValue>,
    stamp: Stamp,
) {
    // In place: the request is not moved (320 bytes) for its head's few changes.
    // HTTP/2's `:authority` (or an absolute-form URI's) becomes `Host`.
    let uri = request.uri();
    let authority = uri
        .authority()
        .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
    if uri.authority().is_some() || uri.path_and_query().is_none() {
        *request.uri_mut() = uri
            .path_and_query()
            .map_or_else(|| Uri::from_static("/"), |p| Uri::from(p.clone()));
    }
    *request.version_mut() = Version::HTTP_11;
    // Read before stripping: `Connection` may name `Host`, which goes on all the same.
    let from_uri = authority.is_some();
    let forwarded_host = authority.or_else(|| match host {
        // The `Host` header, as `host_of` found it: not looked up again.
        Host::Header(value, _) => Some(value.clone()),
        _ => request.headers().get(header::HOST).cloned(),
    });
    let connecting_ip = if stamp.cloudflare {
        request.headers().get(CF_CONNECTING_IP).cloned()
    } else {
        None
    };
    let headers = request.headers_mut();
    let stripped = strip_headers(headers, true);
    // Room for what is added below, at once: a map made for the client's headers alone
    // would otherwise grow (and rehash) on the way.
    headers.reserve(4);
    if let Some(caller) = stamp.caller {
        headers.insert(RUNWAY_CALLER, caller);
    }
    if let Some(client) = connecting_ip {
        // Cloudflare names the client in X-Forwarded-For too; when it did not, the client it
        // names comes first, as a proxy before Cloudflare would have put it.
        if !headers.contains_key(X_FORWARDED_FOR) {
            headers.insert(X_FORWARDED_FOR, client.clone());
        }
        headers.insert(CF_CONNECTING_IP, client);
    }
    // `TE: trailers` is the one TE value that passes (gRPC servers look for it).
    if stripped.te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    if let Some(protocol) = upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, protocol.clone());
    }
    // The client's `Host` stays as sent, unless it came as the URI's or `Connection` named it.
    if let Some(value) = &forwarded_host
        && (from_uri || stripped.named_by_connection)
    {
        headers.insert(header::HOST, value.clone());
    }
    if let Some(value) = forwarded_host.or_else(|| HeaderValue::from_str(host).ok()) {
        headers.insert(X_FORWARDED_HOST, value);
    }
    match headers.entry(X_FORWARDED_FOR) {
        header::Entry::Occupied(mut earlier) => {
            let joined = [earlier.get().as_bytes(), b", ", peer.ip.as_bytes()].concat();
            if let Ok(value) = HeaderValue::from_bytes(&joined) {
                earlier.insert(value);
            }
        }
        header::Entry::Vacant(entry) => {
            entry.insert(peer.ip.clone());
        }
    }
    headers.insert(
        X_FORWARDED_PROTO,
        HeaderValue::from_static(if peer.tls { "https" } else { "http" }),
    );
    // The client's own id is there already, unless `Connection` named it.
    if id.fresh || stripped.named_by_connection {
        headers.insert(X_REQUEST_ID, id.value.clone());
    }
}

/// Sends the request to the slot's instance; a connection that cannot be made is retried once
/// on another ready instance of the revision. Nothing else is retried: a request that reached
/// an instance may have had effects. A failure of the client's body (`body`) is the client's,
/// whatever error the instance's connection shows for it.
async fn send(
    shared: &Shared,
    revision: &Arc<Revision>,
    mut slot: Slot,
    request: &mut Request<UpstreamBody>,
    body: &BodyWatch,
) -> Result<(Response<Incoming>, Option<Sender>, Slot), ProxyError> {
    let mut retried = false;
    loop {
        let Some(instance) = slot.instance.clone() else {
            // A slot always holds its instance until it is handed to `Finish`.
            return Err(ProxyError::NoReadyInstance {
                revision: revision.name.clone(),
                waited_ms: 0,
            });
        };
        let attempt = if instance.is_h2c() {
            // Boxed: HTTP/2 to instances (gRPC) is the rarer path, and its state the larger.
            Box::pin(upstream::send_h2c(
                &instance,
                request,
                shared.options.connect_timeout,
            ))
            .await
        } else {
            upstream::send_http1(&instance, request, shared.options.connect_timeout).await
        };
        let source = match attempt {
            Attempt::Done(response, sender) => {
                instance.connected();
                return Ok((response, sender, slot));
            }
            Attempt::Failed(source) => {
                return Err(match body.fault() {
                    Some(BodyFault::TooLarge) => ProxyError::BodyTooLarge,
                    Some(BodyFault::Broken) => ProxyError::BodyBroken { source },
                    None => {
                        revision.metrics.upstream_errors.inc();
                        instance.failed();
                        ProxyError::Upstream {
                            address: instance.address,
                            source,
                        }
                    }
                });
            }
            Attempt::ConnectFailed(source) => source,
        };
        revision.metrics.connect_errors.inc();
        instance.failed();
        let other = if retried {
            None
        } else {
            retried = true;
            match revision.try_pick() {
                Pick::Got(other) if !Arc::ptr_eq(&other, &instance) => Some(other),
                Pick::Got(same) => {
                    revision.release(&same);
                    None
                }
                Pick::Busy | Pick::NoneReady => None,
            }
        };
        match other {
            Some(other) => {
                // Swap slots: the new one is taken, the failed one given back.
                if let Some(failed) = slot.instance.replace(other) {
                    revision.release(&failed);
                }
            }
            None => {
                return Err(ProxyError::Connect {
                    address: instance.address,
                    source,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{IpAddr, ProxyError, Request, Version, host_of, ip_header, strip_port};

    #[test]
    fn an_address_header_is_its_text() {
        for ip in [
            "0.0.0.0",
            "127.0.0.1",
            "10.213.0.9",
            "192.168.100.255",
            "::1",
            "2001:db8::7",
        ] {
            let parsed: IpAddr = ip.parse().unwrap();
            assert_eq!(ip_header(parsed), ip);
        }
        let mapped: IpAddr = "::ffff:203.0.113.45".parse().unwrap();
        assert_eq!(ip_header(mapped), "203.0.113.45");
    }

    #[test]
    fn a_request_names_one_host() {
        let request = |version: Version, uri: &str, hosts: &[&str]| {
            let mut builder = Request::builder().version(version).uri(uri);
            for host in hosts {
                builder = builder.header("host", *host);
            }
            host_of(&builder.body(()).unwrap())
        };
        let http1 = Version::HTTP_11;
        let http2 = Version::HTTP_2;
        assert_eq!(
            request(http1, "/", &["A.test:80"]).ok().as_deref(),
            Some("a.test")
        );
        assert!(matches!(
            request(http1, "/", &["a.test", "b.test"]),
            Err(ProxyError::AmbiguousHost)
        ));
        assert!(matches!(
            request(http1, "/", &["a.test", "a.test"]),
            Err(ProxyError::AmbiguousHost)
        ));
        assert!(matches!(
            request(http1, "/", &[]),
            Err(ProxyError::MissingHost)
        ));
        // HTTP/1.1's absolute form wins over Host (RFC 9112 section 3.2.2).
        assert_eq!(
            request(http1, "http://a.test/", &["b.test"])
                .ok()
                .as_deref(),
            Some("a.test")
        );
        // HTTP/2's :authority and Host must agree (RFC 9113 section 8.3.1).
        assert_eq!(
            request(http2, "http://a.test/", &[]).ok().as_deref(),
            Some("a.test")
        );
        assert_eq!(
            request(http2, "http://a.test/", &["A.test:443"])
                .ok()
                .as_deref(),
            Some("a.test")
        );
        assert!(matches!(
            request(http2, "http://a.test/", &["b.test"]),
            Err(ProxyError::AmbiguousHost)
        ));
        // The authority's host part, without user information or port.
        for (uri, host) in [
            ("http://a.test:8080/", "a.test"),
            ("http://user:secret@a.test:8080/x", "a.test"),
            ("http://[::1]:8080/", "[::1]"),
            ("http://[::1]/", "[::1]"),
        ] {
            assert_eq!(
                request(http2, uri, &[]).ok().as_deref(),
                Some(host),
                "{uri}"
            );
        }
    }

    #[test]
    fn hosts_lose_their_port() {
        for (authority, host) in [
            ("hello.dev.localhost", Some("hello.dev.localhost")),
            ("hello.dev.localhost:8443", Some("hello.dev.localhost")),
            ("[::1]", Some("[::1]")),
            ("[::1]:80", Some("[::1]")),
            ("127.0.0.1:80", Some("127.0.0.1")),
            ("", None),
            (":80", None),
            ("host:", None),
            ("host:http", None),
            ("host:80:81", None),
            ("[::1", None),
            ("[::1]x", None),
        ] {
            assert_eq!(strip_port(authority), host, "{authority}");
        }
    }
}

#[cfg(test)]
mod hot_path {
    use super::*;

    /// The size of the future `make` returns.
    fn future_size<A, F: std::future::Future>(_make: impl Fn(A) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every request's future is moved (into hyper's dispatcher, into a task for HTTP/2): the
    /// paths few requests take (waiting for a slot, cell rules, new connections, h2c) are
    /// boxed so that it stays small, and the deadline wraps the send without a second copy of
    /// it. Sizes depend on the dependencies' features (a workspace build unifies more of them)
    /// and the profile, so the checks are relative: sending a request carries less than the
    /// h2c path alone would, a pooled send no more than a new connection's send (which it
    /// would hold whole, and more, were it not boxed), and the deadline less than half a send
    /// more.
    #[test]
    fn a_requests_future_carries_no_cold_path() {
        type SendArguments<'a> = (
            &'a Shared,
            &'a Arc<Revision>,
            Slot,
            &'a mut Request<UpstreamBody>,
            &'a BodyWatch,
        );
        type InstanceArguments<'a> = (&'a Instance, &'a mut Request<UpstreamBody>, Duration);
        let send_alone = future_size(
            |(shared, revision, slot, request, body): SendArguments<'_>| {
                send(shared, revision, slot, request, body)
            },
        );
        let with_deadline = future_size(
            |(shared, revision, slot, request, body): SendArguments<'_>| {
                crate::timer::timeout_at(
                    Instant::now(),
                    send(shared, revision, slot, request, body),
                )
            },
        );
        let h2c = future_size(|(instance, request, timeout): InstanceArguments<'_>| {
            upstream::send_h2c(instance, request, timeout)
        });
        let pooled = future_size(|(instance, request, timeout): InstanceArguments<'_>| {
            upstream::send_http1(instance, request, timeout)
        });
        let connecting = future_size(
            |(address, request, timeout): (SocketAddr, &mut Request<UpstreamBody>, Duration)| {
                upstream::connect_and_send(address, request, timeout)
            },
        );
        assert!(
            send_alone < h2c,
            "send's future ({send_alone} bytes) holds the h2c path ({h2c})"
        );
        assert!(
            pooled <= connecting,
            "a pooled send ({pooled} bytes) holds a new connection's send ({connecting})"
        );
        assert!(
            with_deadline < send_alone + send_alone / 2,
            "the deadline ({with_deadline} bytes) holds its send ({send_alone}) twice"
        );
    }

    /// A fresh id is marked sensitive: HTTP/2's HPACK sends it never-indexed, so a value
    /// seen once does not push others out of the table.
    #[test]
    fn a_fresh_request_id_is_never_indexed() {
        let id = new_request_id();
        assert!(id.is_sensitive());
        assert_eq!(id.len(), 32);
        assert!(id.as_bytes().iter().all(u8::is_ascii_hexdigit), "{id:?}");
        assert_ne!(id, new_request_id());
    }
}
