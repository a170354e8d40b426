//! Connections to instances: HTTP/1.1 with keep-alive, one small pool of idle connections per
//! instance, so draining an instance closes exactly its connections.

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::{Request, Response, Version};
use hyper::body::Incoming;
use hyper::client::conn::http1::{Builder, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::table::Instance;
use tokio::net::TcpStream;

/// The request body sent to an instance: the client's, with the body-size limit.
pub(crate) type UpstreamBody = crate::body::ClientBody;
pub(crate) type Sender = SendRequest<UpstreamBody>;

/// Idle connections kept per instance and event loop.
const MAX_IDLE: usize = 256;

/// Event loops with a pool of their own per instance; loops past this share
/// (`index % LOOP_POOLS`), and the shared runtime has its own.
const LOOP_POOLS: usize = 16;

thread_local! {
    /// The event loop this thread runs (see [`crate::Ingress::serve_event_loops`]); 0 on the
    /// shared multi-threaded runtime.
    static EVENT_LOOP: Cell<usize> = const { Cell::new(0) };
}

/// Marks this thread as event loop `index` (from 1), so that it uses its own connections.
pub(crate) fn enter_event_loop(index: usize) {
    EVENT_LOOP.with(|l| l.set(index));
}

fn event_loop() -> usize {
    EVENT_LOOP.with(Cell::get)
}

/// Idle keep-alive connections to one instance (HTTP/1.1), or its one shared HTTP/2
/// connection (h2c). An HTTP/1.1 connection is driven by a task on the event loop that made
/// it, so each loop has a pool of its own, on a cache line of its own: a request never hops
/// to another thread's loop, and loops share no lock.
#[derive(Debug)]
pub(crate) struct Pool {
    /// Index 0: the shared runtime's; 1 + (loop - 1) % [`LOOP_POOLS`]: an event loop's.
    idle: Box<[LoopPool; LOOP_POOLS + 1]>,
    h2: Mutex<Option<H2Sender>>,
    closed: AtomicBool,
}

/// One event loop's idle connections to an instance.
#[derive(Debug, Default)]
#[repr(align(64))]
struct LoopPool(Mutex<Vec<Sender>>);

impl Default for Pool {
    fn default() -> Self {
        Self {
            idle: Box::new(std::array::from_fn(|_| LoopPool::default())),
            h2: Mutex::default(),
            closed: AtomicBool::new(false),
        }
    }
}

pub(crate) type H2Sender = hyper::client::conn::http2::SendRequest<UpstreamBody>;

/// How one try at an instance went.
pub(crate) enum Attempt {
    /// The response head, and an HTTP/1.1 connection to give back once its body ended.
    Done(Response<Incoming>, Option<Sender>),
    /// No connection could be made; the request was not sent, and is where it was.
    ConnectFailed(std::io::Error),
    /// The request was sent (or partly) and failed: never retried.
    Failed(hyper::Error),
}

/// The request out of its place, for hyper to send; an empty one is left there. The request
/// is passed down by reference to here, where it is sent, rather than moved into each
/// function on the way: each `async fn`'s future would carry it (twice, as rustc keeps an
/// async fn's arguments apart from its body's state), and every request's future is moved
/// several times before it runs.
fn take(request: &mut Request<UpstreamBody>) -> Request<UpstreamBody> {
    std::mem::replace(request, Request::new(UpstreamBody::taken()))
}

/// Sends over a pooled or new HTTP/1.1 connection.
pub(crate) async fn send_http1(
    instance: &Instance,
    request: &mut Request<UpstreamBody>,
    connect_timeout: Duration,
) -> Attempt {
    // An idle connection that turns out dead before the request was written gives the request
    // back; then a fresh connection is made.
    if let Some(mut sender) = instance.pool.take().await {
        match sender.try_send_request(take(request)).await {
            Ok(response) => return Attempt::Done(response, Some(sender)),
            Err(mut error) => match error.take_message() {
                Some(back) => *request = back,
                None => return Attempt::Failed(error.into_error()),
            },
        }
    }
    // Boxed: a new connection's state is carried only by the requests that make one.
    Box::pin(connect_and_send(instance.address, request, connect_timeout)).await
}

pub(crate) async fn connect_and_send(
    address: SocketAddr,
    request: &mut Request<UpstreamBody>,
    connect_timeout: Duration,
) -> Attempt {
    match connect(address, connect_timeout).await {
        Ok(mut sender) => match sender.send_request(take(request)).await {
            Ok(response) => Attempt::Done(response, Some(sender)),
            Err(error) => Attempt::Failed(error),
        },
        Err(error) => Attempt::ConnectFailed(error),
    }
}

/// Sends over the instance's HTTP/2 connection, made on first use (h2c, prior knowledge).
pub(crate) async fn send_h2c(
    instance: &Instance,
    request: &mut Request<UpstreamBody>,
    connect_timeout: Duration,
) -> Attempt {
    *request.version_mut() = Version::HTTP_2;
    // HTTP/2 needs :scheme and :authority, which an origin-form URI lacks.
    if request.uri().scheme().is_none() {
        let authority = request
            .headers()
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.parse::<http::uri::Authority>().ok());
        let mut parts = request.uri().clone().into_parts();
        parts.scheme = Some(http::uri::Scheme::HTTP);
        parts.authority = Some(authority.unwrap_or_else(|| {
            http::uri::Authority::from_maybe_shared(instance.address.to_string())
                .unwrap_or_else(|_| http::uri::Authority::from_static("localhost"))
        }));
        if parts.path_and_query.is_none() {
            parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
        }
        if let Ok(uri) = http::Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
    request.headers_mut().remove(http::header::HOST);
    let existing = {
        let h2 = instance.pool.h2.lock().unwrap_or_else(|e| e.into_inner());
        h2.as_ref().filter(|s| !s.is_closed()).cloned()
    };
    let mut sender = match existing {
        Some(sender) => sender,
        None => match connect_h2(instance.address, connect_timeout).await {
            Ok(sender) => {
                if !instance.pool.closed.load(Ordering::Acquire) {
                    *instance.pool.h2.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(sender.clone());
                }
                sender
            }
            Err(error) => return Attempt::ConnectFailed(error),
        },
    };
    if let Err(error) = sender.ready().await {
        return Attempt::Failed(error);
    }
    match sender.send_request(take(request)).await {
        Ok(response) => Attempt::Done(response, None),
        Err(error) => Attempt::Failed(error),
    }
}

async fn connect_h2(address: SocketAddr, timeout: Duration) -> std::io::Result<H2Sender> {
    let stream = crate::timer::timeout(timeout, TcpStream::connect(address))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(crate::timer::HyperTimer)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

impl Pool {
    /// This thread's idle connections.
    fn here(&self) -> &Mutex<Vec<Sender>> {
        let index = match event_loop() {
            0 => 0,
            n => 1 + (n - 1) % LOOP_POOLS,
        };
        &self.idle[index].0
    }

    /// An idle connection ready for a request, if there is one.
    pub(crate) async fn take(&self) -> Option<Sender> {
        loop {
            let mut sender = self
                .here()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop()?;
            // A connection goes back to the pool once its response body ended, so it is ready
            // at once or very soon; one that closed meanwhile is dropped.
            if sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
    }

    /// Keeps a connection whose last response was read to the end.
    pub(crate) fn put(&self, sender: Sender) {
        if self.closed.load(Ordering::Acquire) || sender.is_closed() {
            return;
        }
        let mut idle = self.here().lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(sender);
        }
    }

    /// Closes the idle connections and keeps no more (the instance is draining).
    pub(crate) fn close_idle(&self) {
        self.closed.store(true, Ordering::Release);
        for pool in self.idle.iter() {
            let drained = std::mem::take(&mut *pool.0.lock().unwrap_or_else(|e| e.into_inner()));
            drop(drained);
        }
        // Requests in flight on the HTTP/2 connection keep it open until they end.
        let h2 = self.h2.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(h2);
    }
}

/// Opens a new HTTP/1.1 connection to an instance.
pub(crate) async fn connect(address: SocketAddr, timeout: Duration) -> std::io::Result<Sender> {
    let stream = crate::timer::timeout(timeout, TcpStream::connect(address))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    stream.set_nodelay(true)?;
    let (sender, connection) = Builder::new()
        .handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(async move {
        // The connection ends when the instance closes it or its senders are dropped; its
        // errors reach the request that was using it.
        let _ = connection.with_upgrades().await;
    });
    Ok(sender)
}
