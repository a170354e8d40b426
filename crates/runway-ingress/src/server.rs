//! The client-facing server (HTTP/1.1 and h2c on one port) and the admin server (metrics).
//!
//! ACME challenges are answered here, on the listeners an ACME server reaches: HTTP-01
//! (`GET /.well-known/acme-challenge/{token}`) on plain HTTP, before the redirect to HTTPS (a
//! token the table does not hold gets a 404 there; where plain HTTP is proxied, it goes on to
//! the service); a TLS-ALPN-01 handshake (`acme-tls/1`, see `tls.rs`) is closed once done,
//! with no HTTP read. Neither adds anything to the HTTPS path's requests.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::{Service as _, service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use tokio_rustls::TlsAcceptor;

use crate::body::ProxyBody;
use crate::connection::{Admission, ClientIo, Closed, Handshake, accept_until};
use crate::drain::{Drain, Held, Idle, Started};
use crate::proxy::{Peer, handle};
use crate::tls::{self, TlsError, TlsOptions};
use crate::{Ingress, Shared};

/// A TLS set-up made by [`Ingress::tls`].
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
    resolver: Arc<tls::Resolver>,
    ca_pem: Option<String>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

impl Tls {
    /// The local certificate authority's certificate (PEM), for clients' trust stores.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Reads the operator's certificates again if their files changed, and swaps them in
    /// whole; true when they were. On an error the previous ones stay in use.
    /// [`Ingress::serve_tls`] does this every [`crate::Options::certificate_poll`].
    pub fn reload_certificates(&self) -> Result<bool, TlsError> {
        self.resolver.reload_if_changed()
    }
}

impl Ingress {
    /// Serves clients on `listener` until `shutdown` completes, then stops accepting, lets
    /// in-flight requests finish within [`crate::Options::shutdown_grace`] and returns.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        self.accept_loop(listener, None, false, shutdown).await
    }

    /// Serves the platform's own instances on `listener` (plain HTTP/1.1 and h2c), the
    /// private listener: only `<service>.<env>.internal` names, each to the callers its route
    /// admits, with `Runway-Caller` set; a peer that is no instance of the table is refused.
    pub async fn serve_private(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        self.accept_loop(listener, None, true, shutdown).await
    }

    /// Builds the TLS set-up: operator certificates and the local certificate authority (made
    /// in `ca_dir` on first start). Returns it with the authority's certificate (PEM), if any.
    pub fn tls(&self, options: &TlsOptions) -> Result<Tls, TlsError> {
        let (config, resolver, ca_pem) = tls::server_config(options, Arc::clone(&self.shared))?;
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            resolver,
            ca_pem,
        })
    }

    /// Like [`Ingress::serve`], over TLS (HTTP/2 by ALPN, HTTP/1.1 otherwise).
    pub async fn serve_tls(
        &self,
        listener: TcpListener,
        tls: &Tls,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        let watcher = tokio::spawn(watch_certificates(
            tls.clone(),
            self.shared.options.certificate_poll,
            Arc::clone(&self.shared.metrics),
        ));
        let served = self
            .accept_loop(listener, Some(tls.acceptor.clone()), false, shutdown)
            .await;
        watcher.abort();
        served
    }

    /// Answers every plain-HTTP request with a permanent redirect to HTTPS (same host and
    /// path; `https_port` when it is not 443), but for ACME's HTTP-01 challenges
    /// (`GET /.well-known/acme-challenge/{token}`, any host): the key authorization of a token
    /// the table holds, a 404 for any other.
    pub async fn serve_redirect(
        &self,
        listener: TcpListener,
        https_port: u16,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        let timeout = self.shared.options.header_read_timeout;
        let shared = &self.shared;
        let limits = (&shared.admission, &shared.metrics);
        serve_http1(listener, shutdown, timeout, limits, move || {
            let shared = Arc::clone(shared);
            service_fn(move |request: Request<Incoming>| {
                let response = match http01_token(&request) {
                    Some(token) => match http01_answer(&shared, token) {
                        Some(answer) => plain_text(StatusCode::OK, Full::new(answer)),
                        None => plain_text(
                            StatusCode::NOT_FOUND,
                            Full::new(Bytes::from_static(b"no such ACME challenge\n")),
                        ),
                    },
                    None => redirect(&request, https_port),
                };
                async move { Ok::<_, Infallible>(response) }
            })
        })
        .await
    }
}

/// A listener the event loops serve: its address, over TLS when a set-up is given.
#[derive(Debug, Clone)]
pub struct LoopListener {
    pub address: SocketAddr,
    pub tls: Option<Tls>,
}

impl Ingress {
    /// Serves clients on every listener from `loops` threads, each a single-threaded event
    /// loop with its own socket per listener (`SO_REUSEPORT`: the kernel spreads
    /// connections), as nginx's workers do. A connection, its requests and the instance
    /// connections they use stay on one thread. Returns once `shutdown` turns true and every
    /// loop has let its in-flight requests finish.
    pub async fn serve_event_loops(
        &self,
        listeners: &[LoopListener],
        loops: usize,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> std::io::Result<()> {
        let watchers: Vec<_> = listeners
            .iter()
            .filter_map(|l| l.tls.clone())
            .map(|tls| {
                tokio::spawn(watch_certificates(
                    tls,
                    self.shared.options.certificate_poll,
                    Arc::clone(&self.shared.metrics),
                ))
            })
            .collect();
        // Bind every socket first, so that an address in use fails here, not in a thread.
        let sockets = (0..loops.max(1))
            .map(|_| {
                listeners
                    .iter()
                    .map(|l| {
                        Ok((
                            crate::connection::reuse_port_listener(l.address)?,
                            l.tls.clone(),
                        ))
                    })
                    .collect::<std::io::Result<Vec<_>>>()
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let threads: Vec<_> = sockets
            .into_iter()
            .enumerate()
            .map(|(index, sockets)| {
                let ingress = self.clone();
                let shutdown = shutdown.clone();
                std::thread::Builder::new()
                    .name(format!("ingress-loop-{}", index + 1))
                    .spawn(move || -> std::io::Result<()> {
                        crate::upstream::enter_event_loop(index + 1);
                        crate::timer::event_loop(ingress.event_loop(sockets, shutdown))?
                    })
            })
            .collect::<std::io::Result<_>>()?;
        let joined = tokio::task::spawn_blocking(move || {
            for thread in threads {
                thread
                    .join()
                    .map_err(|_| std::io::Error::other("an event loop panicked"))??;
            }
            Ok(())
        })
        .await
        .map_err(std::io::Error::other)?;
        for watcher in watchers {
            watcher.abort();
        }
        joined
    }

    /// One event loop: its sockets served until `shutdown` turns true.
    async fn event_loop(
        &self,
        sockets: Vec<(std::net::TcpListener, Option<Tls>)>,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> std::io::Result<()> {
        let mut served = tokio::task::JoinSet::new();
        for (socket, tls) in sockets {
            let listener = TcpListener::from_std(socket)?;
            let ingress = self.clone();
            let mut shutdown = shutdown.clone();
            served.spawn(async move {
                let stop = async move {
                    let _ = shutdown.wait_for(|stop| *stop).await;
                };
                let acceptor = tls.map(|tls| tls.acceptor);
                ingress.accept_loop(listener, acceptor, false, stop).await
            });
        }
        while let Some(ended) = served.join_next().await {
            ended.map_err(std::io::Error::other)??;
        }
        Ok(())
    }
}

/// Reloads the operator's certificates whenever their files change.
async fn watch_certificates(tls: Tls, period: Duration, metrics: Arc<crate::Metrics>) {
    let mut ticks = crate::timer::Interval::new(period);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let tls = tls.clone();
        // Reading files and parsing keys blocks.
        let Ok(reloaded) = tokio::task::spawn_blocking(move || tls.reload_certificates()).await
        else {
            continue;
        };
        match reloaded {
            Ok(true) => {
                metrics.certificate_reloads.inc();
            }
            Ok(false) => {}
            Err(error) => {
                metrics.certificate_reload_errors.inc();
                tracing::warn!(
                    error = runway_log::chain(&error),
                    "kept the previous certificates"
                );
            }
        }
    }
}

impl Ingress {
    async fn accept_loop(
        &self,
        listener: TcpListener,
        tls: Option<TlsAcceptor>,
        private: bool,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        let options = &self.shared.options;
        let protocols = Arc::new(Protocols::new(options));
        let drain = Drain::new();
        let metrics = &self.shared.metrics;
        tokio::pin!(shutdown);
        while let Some((stream, address)) =
            accept_until(&listener, shutdown.as_mut(), metrics).await
        {
            // Past the budget, a connection is closed at once: a clean refusal, and the loop
            // goes on accepting (and refusing) rather than leaving clients in the backlog. A
            // full budget with connections still waiting to be served gives the oldest's
            // place instead (see `Admission`).
            let (admitted, handshake, shed) = match self.shared.admission.admit(address, metrics) {
                Ok(admitted) => admitted,
                Err(refused) => {
                    metrics.refused_connection(refused.reason());
                    drop(stream);
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let linger = Arc::new(AtomicBool::new(false));
            let client = Client {
                stream: ClientIo::new(stream, admitted, Arc::clone(&linger)),
                address,
                private,
                linger,
                handshake: handshake.clone(),
                shared: Arc::clone(&self.shared),
                protocols: Arc::clone(&protocols),
                held: drain.hold(),
            };
            let tls = tls.clone();
            let bound = options.header_read_timeout;
            let metrics = Arc::clone(metrics);
            // Boxed: spawning moves a task's future a few times over (into the task, and its
            // stage when it ends), and a box moves as a pointer, where this future is 1 KiB.
            tokio::spawn(Box::pin(async move {
                let is_tls = tls.is_some();
                // Set once a TLS handshake is done: a connection late past it is late with
                // its first request, not with its handshake.
                let handshaken = AtomicBool::new(false);
                let handshaken = &handshaken;
                // Until the client says something, its task is this small future and its
                // socket; the TLS and HTTP state (and their buffers) come with the first byte.
                let served = async move {
                    let mut client = client;
                    let first = client.stream.first_byte().await;
                    match tls {
                        Some(acceptor) => Box::pin(client.serve_tls(acceptor, handshaken)).await,
                        None => Box::pin(client.serve_plain(first)).await,
                    }
                };
                tokio::select! {
                    biased;
                    () = served => {}
                    closed = handshake.closed(bound, &metrics) => {
                        if closed == Closed::Late
                            && is_tls
                            && !handshaken.load(std::sync::atomic::Ordering::Acquire)
                        {
                            metrics.tls_handshake_errors.inc();
                        }
                    }
                }
            }));
            if shed > 0 {
                // The shed connection's task closes its socket: let it run before the next
                // accept takes another descriptor.
                tokio::task::yield_now().await;
            }
        }
        drop(listener);
        drain.finish(options.shutdown_grace).await;
        Ok(())
    }

    /// Serves `GET /metrics` (Prometheus text), `GET /healthz` and `GET /readyz` on `listener` until
    /// `shutdown` completes.
    pub async fn serve_admin(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        let ingress = self.clone();
        // The admin port has its own small budget: a flood of clients does not reach it.
        let admission = Admission::new(ADMIN_CONNECTIONS, 0, Default::default());
        let limits = (&admission, &self.shared.metrics);
        // Idle connections are closed like clients' are, so a few held open cannot keep
        // `/metrics` and `/healthz` from everyone else.
        let header_read_timeout = self.shared.options.header_read_timeout;
        serve_http1(listener, shutdown, header_read_timeout, limits, move || {
            let ingress = ingress.clone();
            service_fn(move |request: Request<Incoming>| {
                let ingress = ingress.clone();
                async move { Ok::<_, Infallible>(ingress.admin(&request)) }
            })
        })
        .await
    }

    fn admin(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        let (status, content_type, body) = match request.uri().path() {
            "/metrics" => (
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                self.metrics().encode(),
            ),
            "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
            "/readyz" if self.shared.ready.load(std::sync::atomic::Ordering::Acquire) => {
                (StatusCode::OK, "text/plain", "ok\n".to_owned())
            }
            "/readyz" => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                "waiting for the first route table from the control plane\n".to_owned(),
            ),
            _ => (
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found\n".to_owned(),
            ),
        };
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(value) = header::HeaderValue::from_str(content_type) {
            response.headers_mut().insert(header::CONTENT_TYPE, value);
        }
        response
    }
}

/// A client connection of [`Ingress::accept_loop`]'s, admitted, with what serving it takes.
struct Client {
    stream: ClientIo,
    address: SocketAddr,
    private: bool,
    linger: Arc<AtomicBool>,
    handshake: Handshake,
    shared: Arc<Shared>,
    protocols: Arc<Protocols>,
    held: Held,
}

/// The HTTP servers a client connection may get: HTTP/1.1 at once when that is its protocol
/// (by ALPN, or by a first byte no HTTP/2 preface starts with), else hyper-util's `auto`,
/// which reads the first bytes to tell, and replays them to the server it chose.
struct Protocols {
    http1: http1::Builder,
    auto: auto::Builder<TokioExecutor>,
    /// How long an HTTP/2 connection may go without a new request: the head-read timeout,
    /// which bounds an idle HTTP/1.1 connection (see [`Idle`]).
    idle_after: Duration,
}

/// The settings of an HTTP/1.1 server, hyper's own builder or `auto`'s.
macro_rules! http1_settings {
    ($builder:expr, $options:expr) => {
        $builder
            // On an event loop, a request head's read timeout costs no timer registration.
            .timer(crate::timer::HyperTimer)
            .header_read_timeout($options.header_read_timeout)
            .max_buf_size($options.max_header_bytes.max(8192))
            .keep_alive(true)
    };
}

impl Protocols {
    fn new(options: &crate::Options) -> Self {
        let mut http1 = http1::Builder::new();
        http1_settings!(http1, options);
        let mut auto = auto::Builder::new(TokioExecutor::new());
        http1_settings!(auto.http1(), options);
        auto.http2()
            .timer(crate::timer::HyperTimer)
            .max_header_list_size(options.max_header_bytes as u32)
            .max_concurrent_streams(250)
            .keep_alive_interval(Some(options.http2_ping))
            .keep_alive_timeout(options.http2_ping);
        Self {
            http1,
            auto,
            idle_after: options.header_read_timeout,
        }
    }
}

impl Client {
    /// Plain HTTP (HTTP/1.1, or h2c by its preface): served from its first request on.
    /// `first` is the first byte the client sent: one that no HTTP/2 preface starts with
    /// (`PRI`) is HTTP/1.1's.
    async fn serve_plain(self, first: Option<u8>) {
        let Self {
            stream,
            address,
            private,
            linger,
            handshake,
            shared,
            protocols,
            held,
        } = self;
        let peer = Peer::new(address, false, None, linger);
        // Shared by the connection's requests: each holds one count, not a copy.
        let peer = Arc::new(if private { peer.private() } else { peer });
        // Plain HTTP answers the HTTP-01 challenges the table holds; anything else (another
        // token too) is the service's. Not on the private listener: no ACME server reaches it.
        let service = service_fn(move |request: Request<Incoming>| {
            // One load once served: the first request ends the connection's wait.
            handshake.serving();
            let answer = http01_token(&request)
                .filter(|_| !private)
                .and_then(|token| http01_answer(&shared, token));
            let (shared, peer) = (Arc::clone(&shared), Arc::clone(&peer));
            async move {
                match answer {
                    Some(answer) => Ok(plain_text(StatusCode::OK, ProxyBody::full(answer))),
                    None => handle(shared, peer, request).await,
                }
            }
        });
        let io = TokioIo::new(stream);
        if first == Some(b'P') {
            // h2c (or HTTP/1.1 whose first method starts with P): its requests are counted, so
            // that an idle HTTP/2 connection is told to go, as hyper closes an idle HTTP/1.1 one.
            let started = Arc::new(Started::default());
            let idle = Idle::new(Arc::clone(&started), protocols.idle_after);
            let service = service_fn(move |request| {
                started.one();
                service.call(request)
            });
            let connection = protocols.auto.serve_connection_with_upgrades(io, service);
            // Boxed: `auto`'s connection is twice the size of HTTP/1.1's, and this future is
            // as large as its largest branch.
            let _ = Box::pin(held.watch_idle(connection, |c| c.graceful_shutdown(), idle)).await;
        } else {
            let connection = protocols
                .http1
                .serve_connection(io, service)
                .with_upgrades();
            let _ = held.watch(connection, |c| c.graceful_shutdown()).await;
        }
    }

    /// TLS: HTTP/2 by ALPN, HTTP/1.1 otherwise; a TLS-ALPN-01 validation is closed once its
    /// handshake is done. `handshaken` is set then.
    async fn serve_tls(self, acceptor: TlsAcceptor, handshaken: &AtomicBool) {
        let Self {
            stream,
            address,
            linger,
            handshake,
            shared,
            protocols,
            held,
            ..
        } = self;
        // A client's protocol error ends its own connection only.
        let Ok(mut stream) = acceptor.accept(stream).await else {
            shared.metrics.tls_handshake_errors.inc();
            return;
        };
        handshaken.store(true, std::sync::atomic::Ordering::Release);
        let alpn = stream.get_ref().1.alpn_protocol();
        let (h2, acme) = (alpn == Some(b"h2"), alpn == Some(tls::ACME_TLS_ALPN));
        // HTTP/1.1 has hyper's head-read deadline from here on. An HTTP/2 connection counts as
        // served at its first request, as plain HTTP does: until then the accept loop's bound
        // (and the budget's shedding) applies, so that a client that chose h2 and sends no
        // preface, or no request, does not hold a place for ever.
        if !h2 && !handshake.serving() {
            return;
        }
        if acme {
            // A TLS-ALPN-01 validation: the handshake was the answer (RFC 8737); nothing is
            // read from it.
            let _ = crate::timer::timeout(ACME_CLOSE_TIMEOUT, stream.shutdown()).await;
            return;
        }
        let session = stream.get_ref().1;
        let peer = Arc::new(Peer::new(address, true, session.server_name(), linger));
        let io = TokioIo::new(stream);
        if h2 {
            // HTTP/2 spawns a task per stream with the service's future in it: boxed, the
            // task stays small and the future is not copied into it.
            let started = Arc::new(Started::default());
            let idle = Idle::new(Arc::clone(&started), protocols.idle_after);
            let service = service_fn(move |request| {
                // One load once served: the first request ends the connection's wait.
                handshake.serving();
                started.one();
                Box::pin(handle(Arc::clone(&shared), Arc::clone(&peer), request))
            });
            // Through `auto`: until the client's preface has come, a shutdown ends the
            // connection at once (hyper's HTTP/2 server would wait for the preface first).
            let connection = protocols.auto.serve_connection_with_upgrades(io, service);
            // Boxed, as in `serve_plain`: an HTTP/1.1 connection's future stays its own size.
            let _ = Box::pin(held.watch_idle(connection, |c| c.graceful_shutdown(), idle)).await;
        } else {
            let service =
                service_fn(move |request| handle(Arc::clone(&shared), Arc::clone(&peer), request));
            let connection = protocols
                .http1
                .serve_connection(io, service)
                .with_upgrades();
            let _ = held.watch(connection, |c| c.graceful_shutdown()).await;
        }
    }
}

/// Where HTTP-01 challenges are fetched (RFC 8555 section 8.3).
const ACME_CHALLENGE_PATH: &str = "/.well-known/acme-challenge/";

/// How long a TLS-ALPN-01 connection's close may take (its close_notify sent).
const ACME_CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The token of an HTTP-01 challenge request (`GET` or `HEAD` of
/// `/.well-known/acme-challenge/{token}`), if it is one.
fn http01_token(request: &Request<Incoming>) -> Option<&str> {
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        return None;
    }
    request.uri().path().strip_prefix(ACME_CHALLENGE_PATH)
}

/// The key authorization the table holds for an HTTP-01 token.
fn http01_answer(shared: &Shared, token: &str) -> Option<Bytes> {
    shared.routes.load_guard().http01(token).cloned()
}

/// `body` as plain text: a key authorization, which is no secret (the token, which travels in
/// the URL, and the account key's thumbprint).
fn plain_text<B>(status: StatusCode, body: B) -> Response<B> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    response
}

/// Connections the admin port (metrics, health) takes at once.
const ADMIN_CONNECTIONS: usize = 64;

/// Serves HTTP/1.1 on `listener` until `shutdown`, each connection with the service `make`
/// returns (the redirect and admin servers: no pool), within `admission`'s budget: a
/// connection waits to be served (see `Admission`) until its first request, whose head it has
/// `header_read_timeout` to send.
async fn serve_http1<S>(
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    header_read_timeout: Duration,
    (admission, metrics): (&Arc<Admission>, &Arc<crate::Metrics>),
    make: impl Fn() -> S,
) -> std::io::Result<()>
where
    S: hyper::service::Service<
            Request<Incoming>,
            Response = Response<Full<Bytes>>,
            Error = Infallible,
        > + Send
        + 'static,
    S::Future: Send,
{
    tokio::pin!(shutdown);
    while let Some((stream, address)) = accept_until(&listener, shutdown.as_mut(), metrics).await {
        let (admitted, handshake, shed) = match admission.admit(address, metrics) {
            Ok(admitted) => admitted,
            Err(refused) => {
                metrics.refused_connection(refused.reason());
                continue;
            }
        };
        let stream = ClientIo::new(stream, admitted, Arc::new(AtomicBool::new(false)));
        let inner = make();
        let served = handshake.clone();
        let service = service_fn(move |request| {
            served.serving();
            hyper::service::Service::call(&inner, request)
        });
        let metrics = Arc::clone(metrics);
        tokio::spawn(async move {
            // No HTTP state (nor its buffers) before the client's first byte.
            let connection = async move {
                let mut stream = stream;
                stream.first_byte().await;
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(crate::timer::HyperTimer)
                    .header_read_timeout(header_read_timeout)
                    .serve_connection(TokioIo::new(stream), service);
                let _ = Box::pin(connection).await;
            };
            tokio::select! {
                biased;
                () = connection => {}
                _ = handshake.closed(header_read_timeout, &metrics) => {}
            }
        });
        if shed > 0 {
            tokio::task::yield_now().await;
        }
    }
    Ok(())
}

/// 308 to the same host and path over HTTPS.
fn redirect(request: &Request<Incoming>, https_port: u16) -> Response<Full<Bytes>> {
    let host = request.uri().host().map(str::to_owned).or_else(|| {
        let value = request.headers().get(header::HOST)?.to_str().ok()?;
        let authority = value.parse::<http::uri::Authority>().ok()?;
        Some(authority.host().to_owned())
    });
    let Some(host) = host else {
        let mut response = Response::new(Full::new(Bytes::from_static(b"request has no host\n")));
        *response.status_mut() = StatusCode::BAD_REQUEST;
        return response;
    };
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let location = if https_port == 443 {
        format!("https://{host}{path}")
    } else {
        format!("https://{host}:{https_port}{path}")
    };
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::PERMANENT_REDIRECT;
    if let Ok(value) = header::HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}
