//! A client connection from accept to close: admission (the ingress's connection budget and
//! each client address's share of it, refused at accept), accepting with a back-off when
//! descriptors or memory run out, and the lingering close of a connection whose request body
//! was left unread.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::{Metrics, limits};

/// How long a connection closing with a request body unread keeps reading (and dropping)
/// what the client still sends, at most, and how long it waits for each read (nginx's
/// `lingering_time` and `lingering_timeout`). Closing at once with unread data makes the
/// kernel send a reset, and a client still sending its body then loses the response (a 413
/// becomes "connection reset by peer").
const LINGER_TIME: Duration = Duration::from_secs(30);
const LINGER_READ: Duration = Duration::from_secs(5);

/// The client connections a server may hold: a budget for all its listeners and event loops
/// together, and a share of it per client address.
#[derive(Debug)]
pub(crate) struct Admission {
    total: Arc<Semaphore>,
    per_client: usize,
    by_client: Mutex<HashMap<IpAddr, usize>>,
    open: Gauge,
}

/// A client connection's place in the budget, given back when it closes.
#[derive(Debug)]
pub(crate) struct Admitted {
    admission: Arc<Admission>,
    client: Option<IpAddr>,
    _permit: OwnedSemaphorePermit,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The server holds all the connections it may.
    Limit,
    /// This client address holds its share.
    PerClientLimit,
}

impl Refused {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::Limit => "limit",
            Self::PerClientLimit => "per_client_limit",
        }
    }
}

impl Admission {
    /// `total` connections at once, `per_client` from one address (0: no per-address
    /// limit); `open` counts the connections held.
    pub(crate) fn new(total: usize, per_client: usize, open: Gauge) -> Arc<Self> {
        Arc::new(Self {
            total: Arc::new(Semaphore::new(total.min(Semaphore::MAX_PERMITS))),
            per_client,
            by_client: Mutex::new(HashMap::new()),
            open,
        })
    }

    /// A place for a connection from `address`, if there is one.
    pub(crate) fn admit(self: &Arc<Self>, address: SocketAddr) -> Result<Admitted, Refused> {
        let permit = Arc::clone(&self.total)
            .try_acquire_owned()
            .map_err(|_| Refused::Limit)?;
        let client = if self.per_client == 0 {
            None
        } else {
            let client = client_key(address.ip());
            let mut by_client = self
                .by_client
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let count = by_client.entry(client).or_insert(0);
            if *count >= self.per_client {
                return Err(Refused::PerClientLimit);
            }
            *count += 1;
            Some(client)
        };
        self.open.inc();
        Ok(Admitted {
            admission: Arc::clone(self),
            client,
            _permit: permit,
        })
    }

    /// Connections held now from `address`'s client (its /64 for IPv6).
    #[cfg(test)]
    fn held_by(&self, address: IpAddr) -> usize {
        let by_client = self
            .by_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        by_client.get(&client_key(address)).copied().unwrap_or(0)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.admission.open.dec();
        let Some(client) = self.client else {
            return;
        };
        let mut by_client = self
            .admission
            .by_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = by_client.get_mut(&client) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                by_client.remove(&client);
            }
        }
    }
}

/// The address a client's share is counted under: an IPv4 address (also when mapped into
/// IPv6), or an IPv6 address's /64, which one host usually has whole.
fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
        v4 => v4,
    }
}

/// The next connection, or `None` once `shutdown` completes. An accept that failed for want
/// of descriptors or memory is retried after a pause that doubles while it keeps failing
/// (counted in `accept_errors`; see [`crate::limits::accept_pause`]), since the listener
/// stays readable and an immediate retry would only spin.
pub(crate) async fn accept_until(
    listener: &TcpListener,
    mut shutdown: Pin<&mut impl Future<Output = ()>>,
    metrics: &Metrics,
) -> Option<(TcpStream, SocketAddr)> {
    let mut backoff = Duration::ZERO;
    loop {
        let pause = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => return Some(accepted),
                Err(error) => {
                    if limits::out_of_resources(&error) {
                        metrics.accept_errors.inc();
                    }
                    match limits::accept_pause(&error, backoff) {
                        Some(pause) => pause,
                        None => continue,
                    }
                }
            },
            () = &mut shutdown => return None,
        };
        backoff = pause;
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = &mut shutdown => return None,
        }
    }
}

/// A client's socket as an HTTP server uses it, holding the connection's place in its
/// budget (`held`). When it is dropped with the connection's `linger` flag set (a request
/// body was left unread), it closes lingering: the write side first, then what the client
/// still sends is read and dropped for a while, so that the client reads the response rather
/// than a reset. Its place in the budget is held until then. The ingress sets the flag when a
/// body is left; the API, which does not track it, sets it always.
pub struct ClientIo {
    stream: Option<TcpStream>,
    held: Option<Box<dyn Send>>,
    linger: Arc<AtomicBool>,
}

impl std::fmt::Debug for ClientIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIo")
            .field("stream", &self.stream)
            .field("linger", &self.linger)
            .finish_non_exhaustive()
    }
}

impl ClientIo {
    pub fn new(stream: TcpStream, held: impl Send + 'static, linger: Arc<AtomicBool>) -> Self {
        Self {
            stream: Some(stream),
            held: Some(Box::new(held)),
            linger,
        }
    }

    /// The socket itself (to peek at what the client sent first).
    pub fn get_mut(&mut self) -> Option<&mut TcpStream> {
        self.stream.as_mut()
    }

    fn stream(self: Pin<&mut Self>) -> io::Result<Pin<&mut TcpStream>> {
        match self.get_mut().stream.as_mut() {
            Some(stream) => Ok(Pin::new(stream)),
            None => Err(io::Error::from(io::ErrorKind::NotConnected)),
        }
    }
}

impl Drop for ClientIo {
    fn drop(&mut self) {
        if !self.linger.load(Ordering::Acquire) {
            return;
        }
        let (Some(stream), Ok(runtime)) =
            (self.stream.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let held = self.held.take();
        runtime.spawn(async move {
            linger(stream).await;
            drop(held);
        });
    }
}

/// Ends the write side, then reads and drops what the client sends until it closes, stops
/// sending for [`LINGER_READ`], or [`LINGER_TIME`] has passed.
async fn linger(mut stream: TcpStream) {
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(LINGER_TIME, async {
        while let Ok(Ok(read)) = tokio::time::timeout(LINGER_READ, stream.read(&mut sink)).await {
            if read == 0 {
                break;
            }
        }
    })
    .await;
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.stream() {
            Ok(stream) => stream.poll_read(cx, buf),
            Err(error) => Poll::Ready(Err(error)),
        }
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.stream() {
            Ok(stream) => stream.poll_write(cx, buf),
            Err(error) => Poll::Ready(Err(error)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.stream() {
            Ok(stream) => stream.poll_write_vectored(cx, bufs),
            Err(error) => Poll::Ready(Err(error)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream
            .as_ref()
            .is_some_and(AsyncWrite::is_write_vectored)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.stream() {
            Ok(stream) => stream.poll_flush(cx),
            Err(error) => Poll::Ready(Err(error)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.stream() {
            Ok(stream) => stream.poll_shutdown(cx),
            Err(error) => Poll::Ready(Err(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_gets_its_share_and_the_server_its_total() {
        let admission = Admission::new(3, 2, Gauge::default());
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "127.0.0.2:1000".parse().unwrap();
        let first = admission.admit(a).unwrap();
        let _second = admission.admit(a).unwrap();
        assert_eq!(admission.admit(a).err(), Some(Refused::PerClientLimit));
        let _third = admission.admit(b).unwrap();
        assert_eq!(admission.admit(b).err(), Some(Refused::Limit));
        drop(first);
        assert_eq!(admission.held_by(a.ip()), 1);
        let _again = admission.admit(a).unwrap();
        assert_eq!(admission.open.get(), 3);
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64() {
        let admission = Admission::new(10, 2, Gauge::default());
        let one: SocketAddr = "[2001:db8:1:2::1]:1".parse().unwrap();
        let other: SocketAddr = "[2001:db8:1:2:ffff::9]:1".parse().unwrap();
        let elsewhere: SocketAddr = "[2001:db8:1:3::1]:1".parse().unwrap();
        let _held = (
            admission.admit(one).unwrap(),
            admission.admit(other).unwrap(),
        );
        assert_eq!(admission.admit(one).err(), Some(Refused::PerClientLimit));
        assert!(admission.admit(elsewhere).is_ok());
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:1".parse().unwrap();
        assert_eq!(
            client_key(mapped.ip()),
            "10.0.0.1".parse::<IpAddr>().unwrap()
        );
    }
}
