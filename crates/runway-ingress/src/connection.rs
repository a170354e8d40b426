//! A client connection from accept to close: admission (the ingress's connection budget and
//! each client address's share of it, refused at accept), the connections still waiting to be
//! served (in their TLS handshake, or before their first request), which make room for
//! newcomers when the budget is full, accepting with a back-off when descriptors or memory run
//! out, and the lingering close of a connection whose request body was left unread.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

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
///
/// A connection is *waiting* from accept until it is served: its TLS handshake done, or (plain
/// HTTP) its first request's head read. Waiting connections cost the server little but hold
/// their place in the budget, and a client that connects and says nothing is one, so: when the
/// budget is full, a newcomer takes the place of the oldest waiting connection, which is
/// closed (nginx closes its oldest connections still waiting for a request when it runs out,
/// HAProxy bounds its handshakes tightly); with the budget [`limits::under_pressure`], a
/// connection still waiting after [`limits::PRESSURE_WAIT`] is closed. A connection being
/// served is never closed for another; when the budget is full of them, newcomers are
/// refused.
#[derive(Debug)]
pub(crate) struct Admission {
    total: usize,
    per_client: usize,
    state: Mutex<State>,
    open: Gauge,
}

#[derive(Debug, Default)]
struct State {
    /// Connections holding a place in the budget (a shed one's place is its successor's).
    held: usize,
    by_client: HashMap<IpAddr, usize>,
    /// The waiting connections, by admission number: the first is the oldest.
    waiting: BTreeMap<u64, Arc<Slot>>,
    next: u64,
    /// The most connections held at once since [`Admission::flood_over`] last said yes.
    peak: usize,
}

/// A connection's progress, shared by its [`Admitted`], its [`Handshake`] and (while it
/// waits) the admission's list. Changed under the admission's lock.
#[derive(Debug)]
struct Slot {
    since: Instant,
    stage: AtomicU8,
    /// Woken when the connection is shed.
    shed: Notify,
}

const WAITING: u8 = 0;
const SERVED: u8 = 1;
/// Closed for a newcomer or for waiting too long under pressure: its place in the budget was
/// given up at once.
const SHED: u8 = 2;

impl Slot {
    fn stage(&self) -> u8 {
        self.stage.load(Ordering::Acquire)
    }

    /// Marks it shed (its place given up by the caller) and wakes its connection.
    fn shed(&self) {
        self.stage.store(SHED, Ordering::Release);
        self.shed.notify_one();
    }
}

/// A client connection's place in the budget, given back when it closes.
#[derive(Debug)]
pub(crate) struct Admitted {
    admission: Arc<Admission>,
    client: Option<IpAddr>,
    id: u64,
    slot: Arc<Slot>,
}

/// What a connection's task holds of its admission: it says when the connection is served,
/// and learns when it must close before that ([`Handshake::closed`]).
#[derive(Debug, Clone)]
pub(crate) struct Handshake {
    admission: Arc<Admission>,
    id: u64,
    slot: Arc<Slot>,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The server holds all the connections it may, and none of them is waiting.
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

/// Why a waiting connection was closed before it was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// A newcomer took its place, or it waited past [`limits::PRESSURE_WAIT`] with the budget
    /// under pressure.
    Shed,
    /// It waited past its bound (the TLS handshake's, or the request head's).
    Late,
}

/// What the counters call a shed connection (`refused_connections_total{reason=…}`).
const SHED_REASON: &str = "shed";

impl Admission {
    /// `total` connections at once, `per_client` from one address (0: no per-address
    /// limit); `open` counts the connections held.
    pub(crate) fn new(total: usize, per_client: usize, open: Gauge) -> Arc<Self> {
        Arc::new(Self {
            total,
            per_client,
            state: Mutex::new(State::default()),
            open,
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a connection from `address`, if there is one; when the budget is full,
    /// the oldest waiting connection's. The connection waits until [`Handshake::serving`].
    /// Connections shed for it are counted in `metrics`, and their number returned: each
    /// holds its descriptor until its task runs and closes it, so an accept loop that shed
    /// one lets it run before accepting more.
    pub(crate) fn admit(
        self: &Arc<Self>,
        address: SocketAddr,
        metrics: &Metrics,
    ) -> Result<(Admitted, Handshake, usize), Refused> {
        let client = (self.per_client > 0).then(|| client_key(address.ip()));
        let now = Instant::now();
        let mut shed = 0;
        let mut state = self.state();
        if let Some(client) = client
            && state.by_client.get(&client).copied().unwrap_or(0) >= self.per_client
        {
            return Err(Refused::PerClientLimit);
        }
        if state.held >= self.total {
            let (_, oldest) = state.waiting.pop_first().ok_or(Refused::Limit)?;
            oldest.shed();
            state.held -= 1;
            shed += 1;
        }
        // Under pressure, those that waited too long go (the oldest first: the list is in
        // admission order).
        if limits::under_pressure(state.held + 1, self.total) {
            while let Some(oldest) = state.waiting.first_entry() {
                if now.saturating_duration_since(oldest.get().since) < limits::PRESSURE_WAIT {
                    break;
                }
                oldest.remove().shed();
                state.held -= 1;
                shed += 1;
            }
        }
        state.held += 1;
        state.peak = state.peak.max(state.held);
        if let Some(client) = client {
            *state.by_client.entry(client).or_insert(0) += 1;
        }
        let id = state.next;
        state.next += 1;
        let slot = Arc::new(Slot {
            since: now,
            stage: AtomicU8::new(WAITING),
            shed: Notify::new(),
        });
        state.waiting.insert(id, Arc::clone(&slot));
        drop(state);
        self.open.inc();
        for _ in 0..shed {
            metrics.refused_connection(SHED_REASON);
        }
        let handshake = Handshake {
            admission: Arc::clone(self),
            id,
            slot: Arc::clone(&slot),
        };
        let admitted = Admitted {
            admission: Arc::clone(self),
            client,
            id,
            slot,
        };
        Ok((admitted, handshake, shed))
    }

    /// When at least `closed` fewer connections are held now than at the peak since it last
    /// said so: that peak and the number held now (the peak then starts again from it).
    pub(crate) fn flood_over(&self, closed: usize) -> Option<(usize, usize)> {
        let mut state = self.state();
        if state.peak < state.held + closed {
            return None;
        }
        let held = state.held;
        let peak = std::mem::replace(&mut state.peak, held);
        Some((peak, held))
    }

    /// Connections held now from `address`'s client (its /64 for IPv6).
    #[cfg(test)]
    fn held_by(&self, address: IpAddr) -> usize {
        self.state()
            .by_client
            .get(&client_key(address))
            .copied()
            .unwrap_or(0)
    }
}

impl Handshake {
    /// Marks the connection served (its TLS handshake done, or its first request read): it
    /// is closed for no newcomer from now on. False when it was shed meanwhile, and must
    /// close. Cheap once served (every request of a plain-HTTP connection asks).
    pub(crate) fn serving(&self) -> bool {
        match self.slot.stage() {
            SERVED => return true,
            SHED => return false,
            _ => {}
        }
        let mut state = self.admission.state();
        if self.slot.stage() == SHED {
            return false;
        }
        self.slot.stage.store(SERVED, Ordering::Release);
        state.waiting.remove(&self.id);
        true
    }

    /// Completes when the connection, still waiting, must close: shed for a newcomer, past
    /// [`limits::PRESSURE_WAIT`] with the budget under pressure, or past `bound`. Never, once
    /// it is served. Counts what it sheds in `metrics`.
    pub(crate) async fn closed(&self, bound: Duration, metrics: &Metrics) -> Closed {
        // The event loop's own deadlines: no timer registration per connection.
        let since = self.slot.since;
        let shed = self.slot.shed.notified();
        tokio::pin!(shed);
        let pressure_wait = limits::PRESSURE_WAIT.min(bound);
        if self.shed_before(shed.as_mut(), since + pressure_wait).await {
            return Closed::Shed;
        }
        if pressure_wait < bound {
            if self.shed_under_pressure() {
                metrics.refused_connection(SHED_REASON);
                return Closed::Shed;
            }
            if self.shed_before(shed.as_mut(), since + bound).await {
                return Closed::Shed;
            }
        }
        match self.slot.stage() {
            WAITING => Closed::Late,
            SHED => Closed::Shed,
            _ => std::future::pending().await,
        }
    }

    /// Waits until `deadline` (false) or until the connection is shed (true). Once it is
    /// served neither can matter: polled then (with every poll of its connection's task, as
    /// long as the connection lasts), it looks at its stage and nothing else.
    async fn shed_before(
        &self,
        mut shed: Pin<&mut tokio::sync::futures::Notified<'_>>,
        deadline: Instant,
    ) -> bool {
        let mut deadline = std::pin::pin!(crate::timer::Deadline::new(deadline));
        std::future::poll_fn(|cx| {
            if self.slot.stage() == SERVED {
                return Poll::Pending;
            }
            if shed.as_mut().poll(cx).is_ready() {
                return Poll::Ready(true);
            }
            deadline.as_mut().poll(cx).map(|()| false)
        })
        .await
    }

    /// Sheds the connection if it still waits and the budget is under pressure.
    fn shed_under_pressure(&self) -> bool {
        let mut state = self.admission.state();
        if self.slot.stage() != WAITING || !limits::under_pressure(state.held, self.admission.total)
        {
            return false;
        }
        state.waiting.remove(&self.id);
        state.held -= 1;
        self.slot.shed();
        true
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.admission.open.dec();
        let mut state = self.admission.state();
        match self.slot.stage() {
            // Its place went when it was shed.
            SHED => {}
            WAITING => {
                state.waiting.remove(&self.id);
                state.held = state.held.saturating_sub(1);
            }
            _ => state.held = state.held.saturating_sub(1),
        }
        let Some(client) = self.client else {
            return;
        };
        if let Some(count) = state.by_client.get_mut(&client) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                state.by_client.remove(&client);
            }
        }
    }
}

/// The address a client's share is counted under: an IPv4 address (also when mapped into
/// IPv6), or an IPv6 address's /64, which one host usually has whole.
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
        v4 => v4,
    }
}

/// A listening socket that others of this user may share (`SO_REUSEPORT`: one per event loop,
/// and a replacement ingress's beside this one's).
pub(crate) fn reuse_port_listener(address: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(address),
        socket2::Type::STREAM,
        None,
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
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
            // Polled, not `accept().await`: the listener's own waker slot rather than a waiter
            // queued on it and taken off again for each connection. The slot holds one waker:
            // each listener is its accept loop's own, polled by that one task.
            accepted = std::future::poll_fn(|cx| listener.poll_accept(cx)) => match accepted {
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
            () = crate::timer::sleep(pause) => {}
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

    /// Completes once the client has sent something, or closed: until then, a connection
    /// needs no buffer, no TLS state and no HTTP state (a flood of silent connections costs
    /// their sockets and small tasks).
    /// The byte, if one came.
    pub(crate) async fn first_byte(&mut self) -> Option<u8> {
        let stream = self.stream.as_ref()?;
        // A peek, not `readable()`: that completes at once on a new socket (tokio reports it
        // readable until a read finds nothing). Polled, not `peek().await`: the socket's own
        // waker slot, not a waiter queued on it.
        let mut first = [0u8; 1];
        let mut buffer = tokio::io::ReadBuf::new(&mut first);
        let peeked = std::future::poll_fn(|cx| stream.poll_peek(cx, &mut buffer)).await;
        match peeked {
            Ok(1) => Some(first[0]),
            _ => None,
        }
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
    let _ = crate::timer::timeout(LINGER_TIME, async {
        while let Ok(Ok(read)) = crate::timer::timeout(LINGER_READ, stream.read(&mut sink)).await {
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

    fn shed_count(metrics: &Metrics) -> Option<u64> {
        metrics.encode().lines().find_map(|line| {
            line.strip_prefix("runway_ingress_refused_connections_total{reason=\"shed\"} ")?
                .parse()
                .ok()
        })
    }

    #[test]
    fn a_flood_is_over_once_enough_of_its_connections_closed() {
        let metrics = Metrics::new();
        let admission = Admission::new(100, 0, Gauge::default());
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let mut held: Vec<_> = (0..10)
            .map(|_| admission.admit(a, &metrics).unwrap().0)
            .collect();
        assert_eq!(admission.flood_over(4), None, "none closed");
        held.truncate(7);
        assert_eq!(admission.flood_over(4), None, "3 closed");
        held.truncate(6);
        assert_eq!(admission.flood_over(4), Some((10, 6)));
        // Said once: the peak starts again from what is held.
        assert_eq!(admission.flood_over(4), None);
        held.truncate(2);
        assert_eq!(admission.flood_over(4), Some((6, 2)));
    }

    #[test]
    fn a_client_gets_its_share_and_the_server_its_total() {
        let metrics = Metrics::new();
        let admission = Admission::new(3, 2, Gauge::default());
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "127.0.0.2:1000".parse().unwrap();
        let admit = |address| {
            let (admitted, handshake, _) = admission.admit(address, &metrics)?;
            assert!(handshake.serving());
            Ok::<_, Refused>(admitted)
        };
        let first = admit(a).unwrap();
        let _second = admit(a).unwrap();
        assert_eq!(admit(a).err(), Some(Refused::PerClientLimit));
        let _third = admit(b).unwrap();
        // Every one served: none makes room.
        assert_eq!(admit(b).err(), Some(Refused::Limit));
        drop(first);
        assert_eq!(admission.held_by(a.ip()), 1);
        let _again = admit(a).unwrap();
        assert_eq!(admission.open.get(), 3);
        assert_eq!(shed_count(&metrics), None);
    }

    #[test]
    fn the_oldest_waiting_connection_makes_room_and_a_served_one_never() {
        let metrics = Metrics::new();
        let admission = Admission::new(3, 0, Gauge::default());
        let client: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let (oldest, oldest_handshake, _) = admission.admit(client, &metrics).unwrap();
        let (served, served_handshake, _) = admission.admit(client, &metrics).unwrap();
        assert!(served_handshake.serving());
        let (younger, younger_handshake, shed) = admission.admit(client, &metrics).unwrap();
        assert_eq!(shed, 0);
        // Full: a newcomer takes the oldest waiting connection's place, not the served one's.
        let (newcomer, newcomer_handshake, shed) = admission.admit(client, &metrics).unwrap();
        assert_eq!(shed, 1);
        assert_eq!(oldest_handshake.slot.stage(), SHED);
        assert!(!oldest_handshake.serving(), "a shed connection is served");
        assert_eq!(admission.state().held, 3);
        // Its socket is open until its task closes it; its place is the newcomer's already.
        assert_eq!(admission.open.get(), 4);
        drop(oldest);
        assert_eq!(admission.state().held, 3);
        assert_eq!(admission.open.get(), 3);
        assert!(newcomer_handshake.serving());
        let (_next, next_handshake, _) = admission.admit(client, &metrics).unwrap();
        assert_eq!(younger_handshake.slot.stage(), SHED);
        drop(younger);
        assert!(next_handshake.serving());
        // All three served: the next one is refused.
        assert_eq!(
            admission.admit(client, &metrics).err(),
            Some(Refused::Limit)
        );
        assert_eq!(shed_count(&metrics), Some(2));
        drop((served, newcomer));
        assert_eq!(admission.state().held, 1);
        assert!(admission.state().waiting.is_empty());
    }

    #[tokio::test]
    async fn a_waiting_connection_is_bounded_tighter_under_pressure() {
        let metrics = Metrics::new();
        let admission = Admission::new(4, 0, Gauge::default());
        let client: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        // In real time (the ingress's binary is built without tokio's paused clock): a bound
        // a second past the pressure's wait.
        let bound = limits::PRESSURE_WAIT + Duration::from_secs(1);
        let waiting: Vec<_> = (0..3)
            .map(|_| admission.admit(client, &metrics).unwrap())
            .collect();
        // Three of four held: under pressure, the first closes after PRESSURE_WAIT...
        let started = tokio::time::Instant::now();
        assert_eq!(waiting[0].1.closed(bound, &metrics).await, Closed::Shed);
        let about = |elapsed: Duration, wait: Duration| {
            elapsed >= wait && elapsed < wait + Duration::from_millis(500)
        };
        assert!(about(started.elapsed(), limits::PRESSURE_WAIT));
        assert_eq!(admission.state().held, 2);
        assert_eq!(shed_count(&metrics), Some(1));
        // ...and with two of four, the next waits its whole bound.
        assert_eq!(waiting[1].1.closed(bound, &metrics).await, Closed::Late);
        assert!(about(started.elapsed(), bound));
        // A served connection is never closed by its wait, though its bound is past.
        assert!(waiting[2].1.serving());
        let served = tokio::time::timeout(
            Duration::from_millis(200),
            waiting[2].1.closed(bound, &metrics),
        )
        .await;
        assert!(served.is_err());
        drop(waiting);
        assert_eq!(admission.state().held, 0);
        assert!(admission.state().waiting.is_empty());
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64() {
        let metrics = Metrics::new();
        let admission = Admission::new(10, 2, Gauge::default());
        let one: SocketAddr = "[2001:db8:1:2::1]:1".parse().unwrap();
        let other: SocketAddr = "[2001:db8:1:2:ffff::9]:1".parse().unwrap();
        let elsewhere: SocketAddr = "[2001:db8:1:3::1]:1".parse().unwrap();
        let _held = (
            admission.admit(one, &metrics).unwrap(),
            admission.admit(other, &metrics).unwrap(),
        );
        assert_eq!(
            admission.admit(one, &metrics).err(),
            Some(Refused::PerClientLimit)
        );
        assert!(admission.admit(elsewhere, &metrics).is_ok());
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:1".parse().unwrap();
        assert_eq!(
            client_key(mapped.ip()),
            "10.0.0.1".parse::<IpAddr>().unwrap()
        );
    }
}
