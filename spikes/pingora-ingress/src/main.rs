//! The ingress's fast path on pingora (issue 21's spike): host → route → revision by weight →
//! an instance slot → the instance over a pooled HTTP/1.1 keep-alive connection, with the
//! ingress's headers (X-Forwarded-For/Proto/Host, X-Request-Id both ways, hop-by-hop headers
//! stripped both ways), its host rules (400 for no host or two, 421 for a TLS connection's
//! request for another host the table serves, 404 for a host no route serves), its per-revision
//! metrics (prometheus-client, the same calls per response) and its error answers (plain text
//! with the request id). See README.md for what it leaves out.
//!
//! ```text
//! pingora-ingress --listen ADDR --https ADDR --cert CERT.pem --key KEY.pem --upstream ADDR \
//!     [--threads N] [--no-work-stealing] [--host NAME] [--bare]
//! ```

use std::any::Any;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Uri, Version};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::listeners::TlsAccept;
use pingora::listeners::tls::TlsSettings;
use pingora::protocols::tls::TlsRef;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::server::Server;
use pingora::server::configuration::ServerConf;
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorSource, ErrorType, Result};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The same names for pingora's `insert_header`, which keeps a second, case-preserving map of
/// names: from a `&'static str` it makes that entry without an allocation, from a `HeaderName`
/// with one (measured: about 2,000 instructions less per request, for its five inserts).
const X_REQUEST_ID_STR: &str = "x-request-id";
const X_FORWARDED_FOR_STR: &str = "x-forwarded-for";
const X_FORWARDED_PROTO_STR: &str = "x-forwarded-proto";
const X_FORWARDED_HOST_STR: &str = "x-forwarded-host";

/// The ingress's defaults (runway-ingress `Options` and the route table's).
const MAX_BODY_BYTES: u64 = 32 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

// ---------------------------------------------------------------------------------------------
// The route table, as the ingress's data plane reads it (cut down to what one request touches).

#[derive(Debug)]
struct Instance {
    /// Built once: pingora wants a `Box<HttpPeer>` per request, cloned from this.
    peer: HttpPeer,
    in_flight: AtomicUsize,
    /// 0: no limit (the manifest's `max_instance_request_concurrency`).
    limit: u32,
    ready: AtomicBool,
    draining: AtomicBool,
}

impl Instance {
    fn new(address: SocketAddr, limit: u32) -> Self {
        let mut peer = HttpPeer::new(address, false, String::new());
        peer.options.connection_timeout = Some(CONNECT_TIMEOUT);
        // The ingress's deadline is per request (300 s by default); pingora's nearest is a
        // deadline per read from the instance, armed on pingora's cheap timer wheel.
        peer.options.read_timeout = Some(REQUEST_TIMEOUT);
        Self {
            peer,
            in_flight: AtomicUsize::new(0),
            limit,
            ready: AtomicBool::new(true),
            draining: AtomicBool::new(false),
        }
    }

    fn serving(&self) -> bool {
        self.ready.load(Ordering::Acquire) && !self.draining.load(Ordering::Acquire)
    }

    fn has_room(&self) -> bool {
        self.limit == 0 || self.in_flight.load(Ordering::Acquire) < self.limit as usize
    }

    /// Takes one slot under the concurrency limit (the ingress's `Instance::try_acquire`).
    fn try_acquire(&self) -> bool {
        let limit = self.limit as usize;
        let mut current = self.in_flight.load(Ordering::Relaxed);
        loop {
            if limit != 0 && current >= limit {
                return false;
            }
            match self.in_flight.compare_exchange_weak(
                current,
                current + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => current = now,
            }
        }
    }

    fn release(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

const LATENCY_START: f64 = 0.000_25;
const LATENCY_BUCKETS: usize = 20;

/// A revision's figures, recorded as the ingress's `RevisionMetrics::record` does.
#[derive(Debug)]
struct RevisionMetrics {
    requests: [Counter; 5],
    latency: Histogram,
    buckets: [AtomicU64; LATENCY_BUCKETS + 1],
    in_flight: Gauge,
}

impl RevisionMetrics {
    fn new() -> Self {
        Self {
            requests: Default::default(),
            latency: Histogram::new(exponential_buckets(
                LATENCY_START,
                2.0,
                LATENCY_BUCKETS as u16,
            )),
            buckets: Default::default(),
            in_flight: Gauge::default(),
        }
    }

    fn record(&self, status: u16, seconds: f64) {
        let class = usize::from((status / 100).clamp(1, 5)) - 1;
        self.buckets[bucket_index(seconds)].fetch_add(1, Ordering::SeqCst);
        self.requests[class].inc();
        self.latency.observe(seconds);
    }
}

fn bucket_index(seconds: f64) -> usize {
    if seconds <= LATENCY_START || seconds.is_nan() {
        return 0;
    }
    let index = (seconds / LATENCY_START).log2().ceil();
    if index >= LATENCY_BUCKETS as f64 {
        LATENCY_BUCKETS
    } else {
        index as usize
    }
}

#[derive(Debug)]
struct Revision {
    weight: u32,
    instances: Vec<Arc<Instance>>,
    metrics: RevisionMetrics,
}

impl Revision {
    /// A ready instance with room, least loaded first (the ingress's `try_pick`: two random
    /// choices when there are several, else a scan).
    fn try_pick(&self) -> Option<Arc<Instance>> {
        let n = self.instances.len();
        if n > 1 {
            for _ in 0..2 {
                let a = fastrand::usize(..n);
                let mut b = fastrand::usize(..n - 1);
                if b >= a {
                    b += 1;
                }
                let (x, y) = (&self.instances[a], &self.instances[b]);
                let best = match (x.serving() && x.has_room(), y.serving() && y.has_room()) {
                    (true, true)
                        if y.in_flight.load(Ordering::Acquire)
                            < x.in_flight.load(Ordering::Acquire) =>
                    {
                        y
                    }
                    (true, _) => x,
                    (false, true) => y,
                    (false, false) => break,
                };
                if best.try_acquire() {
                    return Some(Arc::clone(best));
                }
            }
        }
        loop {
            let mut best: Option<&Arc<Instance>> = None;
            for instance in self.instances.iter().filter(|i| i.serving()) {
                if instance.has_room()
                    && best.is_none_or(|b| {
                        instance.in_flight.load(Ordering::Acquire)
                            < b.in_flight.load(Ordering::Acquire)
                    })
                {
                    best = Some(instance);
                }
            }
            let best = best?;
            if best.try_acquire() {
                return Some(Arc::clone(best));
            }
        }
    }
}

#[derive(Debug)]
struct Route {
    revisions: Vec<Arc<Revision>>,
    total_weight: u32,
}

impl Route {
    /// A revision by weight.
    fn weighed(&self) -> Option<&Arc<Revision>> {
        match self.revisions.as_slice() {
            [] => None,
            [only] => Some(only),
            several => {
                let mut ticket = fastrand::u32(..self.total_weight.max(1));
                for revision in several {
                    if ticket < revision.weight {
                        return Some(revision);
                    }
                    ticket -= revision.weight;
                }
                several.last()
            }
        }
    }
}

#[derive(Debug, Default)]
struct Table {
    routes: HashMap<String, Arc<Route>>,
}

// ---------------------------------------------------------------------------------------------
// Per request.

/// What a request carries from one of pingora's phases to the next.
#[derive(Debug)]
struct Ctx {
    start: Instant,
    request_id: HeaderValue,
    tls: bool,
    revision: Option<Arc<Revision>>,
    /// The instance slot, released when the context is dropped (after `logging`).
    slot: Option<Slot>,
}

#[derive(Debug)]
struct Slot {
    revision: Arc<Revision>,
    instance: Arc<Instance>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.instance.release();
        self.revision.metrics.in_flight.dec();
    }
}

/// Why a request was answered by the proxy itself.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    MissingHost,
    AmbiguousHost,
    Misdirected,
    BodyTooLarge,
    NoRoute,
    NotServing,
    NoReadyInstance,
}

impl Refusal {
    fn status(self) -> u16 {
        match self {
            Self::MissingHost | Self::AmbiguousHost => 400,
            Self::Misdirected => 421,
            Self::BodyTooLarge => 413,
            Self::NoRoute => 404,
            Self::NotServing | Self::NoReadyInstance => 503,
        }
    }

    fn message(self) -> &'static str {
        match self {
            Self::MissingHost => "request has no host\n",
            Self::AmbiguousHost => "request names more than one host\n",
            Self::Misdirected => "this connection is for another host\n",
            Self::BodyTooLarge => "request body too large\n",
            Self::NoRoute => "no service has this name\n",
            Self::NotServing => {
                "this service has no revision serving yet: none was deployed, or none became ready\n"
            }
            Self::NoReadyInstance => "no instance of this service became ready in time\n",
        }
    }
}

/// The TLS server name a connection was opened for, kept in pingora's TLS digest.
#[derive(Debug)]
struct ServerName(Box<str>);

struct Ingress {
    table: Table,
    /// `--bare`: pingora's floor: every request to this peer, no other work (no routing, no
    /// headers, no request id, no metrics). For measuring only.
    bare: Option<HttpPeer>,
}

#[async_trait]
impl ProxyHttp for Ingress {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx {
            start: Instant::now(),
            request_id: HeaderValue::from_static(""),
            tls: false,
            revision: None,
            slot: None,
        }
    }

    /// No response compression module (pingora adds a disabled one by default): the ingress
    /// does not compress.
    fn init_downstream_modules(&self, _modules: &mut pingora::modules::http::HttpModules) {}

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        if self.bare.is_some() {
            return Ok(false);
        }
        let request = session.req_header();
        ctx.request_id = match request.headers.get(&X_REQUEST_ID) {
            Some(id) if !id.is_empty() && id.len() <= 200 => id.clone(),
            _ => new_request_id(),
        };
        let sni = session
            .digest()
            .and_then(|d| d.ssl_digest.as_ref())
            .map(|ssl| ssl.extension.get::<ServerName>());
        ctx.tls = sni.is_some();
        match self.route(request, sni.flatten(), ctx) {
            Ok(()) => Ok(false),
            Err(refusal) => {
                refuse(session, refusal, &ctx.request_id).await?;
                Ok(true)
            }
        }
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        if let Some(peer) = &self.bare {
            return Ok(Box::new(peer.clone()));
        }
        match &ctx.slot {
            Some(slot) => Ok(Box::new(slot.instance.peer.clone())),
            None => Error::e_explain(ErrorType::InternalError, "no instance slot"),
        }
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if self.bare.is_some() {
            return Ok(());
        }
        // pingora has already dropped the hop-by-hop headers (its standard request policy: the
        // same list as the ingress's, and those `Connection` names) and set `Host` from an
        // HTTP/2 request's `:authority`.
        //
        // `TE: trailers` is the one TE value that passes (gRPC servers look for it); pingora's
        // policy drops TE whole.
        let te_trailers = session
            .req_header()
            .headers
            .get(header::TE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
            });
        if te_trailers {
            upstream.insert_header("te", "trailers")?;
        }
        // The ingress sends the origin form.
        if upstream.uri.authority().is_some() {
            let origin = upstream
                .uri
                .path_and_query()
                .map_or_else(|| Uri::from_static("/"), |p| Uri::from(p.clone()));
            upstream.set_uri(origin);
        }
        if let Some(host) = upstream.headers.get(header::HOST).cloned() {
            upstream.insert_header(X_FORWARDED_HOST_STR, host)?;
        }
        let ip = client_ip(session);
        let forwarded_for = match upstream.headers.get(&X_FORWARDED_FOR) {
            Some(earlier) => {
                HeaderValue::from_bytes(&[earlier.as_bytes(), b", ", ip.as_bytes()].concat()).ok()
            }
            None => Some(ip),
        };
        if let Some(value) = forwarded_for {
            upstream.insert_header(X_FORWARDED_FOR_STR, value)?;
        }
        upstream.insert_header(
            X_FORWARDED_PROTO_STR,
            HeaderValue::from_static(if ctx.tls { "https" } else { "http" }),
        )?;
        upstream.insert_header(X_REQUEST_ID_STR, ctx.request_id.clone())?;
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if self.bare.is_some() {
            return Ok(());
        }
        strip_hop_by_hop(response)?;
        response.insert_header(X_REQUEST_ID_STR, ctx.request_id.clone())?;
        if let Some(revision) = &ctx.revision {
            revision
                .metrics
                .record(response.status.as_u16(), ctx.start.elapsed().as_secs_f64());
        }
        Ok(())
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        // The ingress's answers: 502 when the instance failed, 504 when it was too slow.
        let (status, message) = match (e.esource(), e.etype()) {
            (_, ErrorType::HTTPStatus(code)) => (*code, "request failed\n"),
            (_, ErrorType::ConnectTimedout | ErrorType::ReadTimedout) => {
                (504, "service did not answer in time\n")
            }
            (ErrorSource::Upstream, _) => (502, "service failed to answer\n"),
            (ErrorSource::Downstream, ErrorType::ReadError | ErrorType::WriteError)
            | (ErrorSource::Downstream, ErrorType::ConnectionClosed) => (0, ""),
            (ErrorSource::Downstream, _) => (400, "request broke off or was malformed\n"),
            _ => (500, "internal error\n"),
        };
        if status > 0 {
            if let Some(revision) = &ctx.revision {
                revision
                    .metrics
                    .record(status, ctx.start.elapsed().as_secs_f64());
            }
            let _ = write_answer(session, status, message, &ctx.request_id).await;
        }
        FailToProxy {
            error_code: status,
            can_reuse_downstream: false,
        }
    }

    /// Quiet: the ingress logs no line per request unless asked for an access log.
    fn suppress_error_log(&self, _session: &Session, _ctx: &Ctx, _error: &Error) -> bool {
        true
    }
}

impl Ingress {
    /// Host → route → revision → instance slot, or why not.
    fn route(
        &self,
        request: &RequestHeader,
        sni: Option<&ServerName>,
        ctx: &mut Ctx,
    ) -> Result<(), Refusal> {
        let host = host_of(request)?;
        // A TLS connection opened for one host the table serves is not used for another.
        if let Some(ServerName(sni)) = sni
            && **sni != *host
            && self.table.routes.contains_key(&**sni)
        {
            return Err(Refusal::Misdirected);
        }
        let route = self.table.routes.get(&host).ok_or(Refusal::NoRoute)?;
        let revision = route.weighed().ok_or(Refusal::NotServing)?;
        if let Some(length) = request
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            && length > MAX_BODY_BYTES
        {
            return Err(Refusal::BodyTooLarge);
        }
        ctx.revision = Some(Arc::clone(revision));
        // The ingress holds a request while no instance is ready and queues it while all are
        // full; here, none ready or with room is a 503 at once (see README.md).
        let instance = revision.try_pick().ok_or(Refusal::NoReadyInstance)?;
        revision.metrics.in_flight.inc();
        ctx.slot = Some(Slot {
            revision: Arc::clone(revision),
            instance,
        });
        Ok(())
    }
}

/// The client's address as a header value.
fn client_ip(session: &Session) -> HeaderValue {
    session
        .client_addr()
        .and_then(|a| a.as_inet())
        .and_then(|a| HeaderValue::from_str(&a.ip().to_string()).ok())
        .unwrap_or_else(|| HeaderValue::from_static("unknown"))
}

/// 32 random hex digits (128 bits), as the ingress makes them.
fn new_request_id() -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let random = fastrand::u128(..);
    let mut id = [0u8; 32];
    for (i, digit) in id.iter_mut().enumerate() {
        *digit = HEX[((random >> (4 * (31 - i))) & 0xf) as usize];
    }
    HeaderValue::from_bytes(&id).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// The request's host, lower case and without port, by the ingress's rules: the URI's
/// (HTTP/2's `:authority`, HTTP/1.1's absolute form) else `Host`'s; two `Host` headers, or an
/// HTTP/2 `Host` unlike `:authority`, name no one host.
fn host_of(request: &RequestHeader) -> Result<String, Refusal> {
    let mut values = request.headers.get_all(header::HOST).iter();
    let header = values.next();
    if values.next().is_some() {
        return Err(Refusal::AmbiguousHost);
    }
    let from_header = || {
        header
            .and_then(|value| value.to_str().ok())
            .and_then(strip_port)
    };
    let raw = match request.uri.host() {
        Some(host) => {
            if request.version >= Version::HTTP_2
                && header.is_some()
                && !from_header().is_some_and(|h| h.eq_ignore_ascii_case(host))
            {
                return Err(Refusal::AmbiguousHost);
            }
            host
        }
        None => from_header().ok_or(Refusal::MissingHost)?,
    };
    Ok(raw.to_ascii_lowercase())
}

/// `host`, `host:port`, `[v6]` or `[v6]:port` to the host; None when what follows is no port.
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

/// Headers that describe one connection (RFC 9110 section 7.6.1). `Transfer-Encoding` stays:
/// pingora frames the response to the client by it (and drops it for HTTP/2), as hyper does.
const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
];

/// The response's hop-by-hop headers, and those its `Connection` names, found by walking the
/// few names there are (the ingress's way: most responses have none).
fn strip_hop_by_hop(response: &mut ResponseHeader) -> Result<()> {
    let headers: &HeaderMap = &response.headers;
    let mut present: Vec<HeaderName> = headers
        .keys()
        .filter(|name| *name == header::UPGRADE || HOP_BY_HOP.contains(name))
        .cloned()
        .collect();
    if present.is_empty() {
        return Ok(());
    }
    if present.contains(&header::CONNECTION) {
        present.extend(
            headers
                .get_all(header::CONNECTION)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
                .filter(|name| *name != header::TRANSFER_ENCODING),
        );
    }
    for name in &present {
        response.remove_header(name);
    }
    Ok(())
}

async fn refuse(session: &mut Session, refusal: Refusal, request_id: &HeaderValue) -> Result<()> {
    write_answer(session, refusal.status(), refusal.message(), request_id).await
}

/// The proxy's own answer: plain text, with the request id (the ingress's `error_response`).
async fn write_answer(
    session: &mut Session,
    status: u16,
    message: &'static str,
    request_id: &HeaderValue,
) -> Result<()> {
    let mut response = ResponseHeader::build(status, Some(3))?;
    response.insert_header(header::CONTENT_TYPE, "text/plain; charset=utf-8")?;
    response.insert_header(header::CONTENT_LENGTH, message.len())?;
    response.insert_header(X_REQUEST_ID_STR, request_id.clone())?;
    session
        .write_response_header(Box::new(response), false)
        .await?;
    session
        .write_response_body(Some(Bytes::from_static(message.as_bytes())), true)
        .await
}

// ---------------------------------------------------------------------------------------------
// TLS: a certificate by SNI (the ingress's resolver, cut down to operator certificates), and
// the server name kept for the request's 421 check.

#[derive(Debug)]
struct Certificates {
    by_name: HashMap<String, Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name()?.to_ascii_lowercase();
        if let Some(key) = self.by_name.get(&name) {
            return Some(Arc::clone(key));
        }
        let (_, parent) = name.split_once('.')?;
        self.by_name.get(&format!("*.{parent}")).map(Arc::clone)
    }
}

struct KeepServerName;

#[async_trait]
impl TlsAccept for KeepServerName {
    async fn handshake_complete_callback(
        &self,
        tls: &TlsRef,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        let name = tls.server_name()?.to_ascii_lowercase();
        Some(Arc::new(ServerName(name.into_boxed_str())))
    }
}

fn load_certified(cert: &str, key: &str) -> anyhow_like::Result<CertifiedKey> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("{cert}: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{cert}: {e}"))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{key}: {e}"))?;
    let provider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("key: {e}"))?;
    Ok(CertifiedKey::new(chain, signing))
}

/// Errors as strings: the spike carries no error crate of its own.
mod anyhow_like {
    pub type Result<T> = std::result::Result<T, String>;
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct Args {
    listen: String,
    https: String,
    cert: String,
    key: String,
    upstream: SocketAddr,
    threads: usize,
    work_stealing: bool,
    host: String,
    bare: bool,
}

fn parse_args() -> anyhow_like::Result<Args> {
    let mut args = std::env::args().skip(1);
    let (mut listen, mut https, mut cert, mut key, mut upstream) = (None, None, None, None, None);
    let mut threads = 1;
    let mut work_stealing = true;
    let mut bare = false;
    let mut host = "hello.bench.localhost".to_owned();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => listen = Some(value()?),
            "--https" => https = Some(value()?),
            "--cert" => cert = Some(value()?),
            "--key" => key = Some(value()?),
            "--upstream" => {
                upstream = Some(value()?.parse().map_err(|e| format!("--upstream: {e}"))?);
            }
            "--threads" => threads = value()?.parse().map_err(|e| format!("--threads: {e}"))?,
            "--host" => host = value()?.to_ascii_lowercase(),
            "--no-work-stealing" => work_stealing = false,
            "--bare" => bare = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        listen: listen.ok_or("--listen is required")?,
        https: https.ok_or("--https is required")?,
        cert: cert.ok_or("--cert is required")?,
        key: key.ok_or("--key is required")?,
        upstream: upstream.ok_or("--upstream is required")?,
        threads: threads.max(1),
        work_stealing,
        host,
        bare,
    })
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("pingora-ingress: {message}");
            std::process::exit(2);
        }
    };
    let certified = match load_certified(&args.cert, &args.key) {
        Ok(certified) => Arc::new(certified),
        Err(message) => {
            eprintln!("pingora-ingress: {message}");
            std::process::exit(1);
        }
    };

    let instance = Arc::new(Instance::new(args.upstream, 0));
    let bare = args.bare.then(|| instance.peer.clone());
    let revision = Arc::new(Revision {
        weight: 100,
        instances: vec![instance],
        metrics: RevisionMetrics::new(),
    });
    let route = Arc::new(Route {
        total_weight: revision.weight,
        revisions: vec![revision],
    });
    let mut table = Table::default();
    table.routes.insert(args.host.clone(), route);

    let conf = ServerConf {
        threads: args.threads,
        work_stealing: args.work_stealing,
        // Quick exits for benchmarks; the ingress's own grace is 30 s.
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();

    let mut service =
        pingora::proxy::http_proxy_service(&server.configuration, Ingress { table, bare });
    service.add_tcp(&args.listen);
    let mut tls = match TlsSettings::with_callbacks(Box::new(KeepServerName)) {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("pingora-ingress: {e}");
            std::process::exit(1);
        }
    };
    tls.set_cert_resolver(Arc::new(Certificates {
        by_name: HashMap::from([(args.host.clone(), certified)]),
    }));
    tls.enable_h2();
    service.add_tls_with_settings(&args.https, None, tls);
    server.add_service(service);
    server.run_forever();
}
