//! Graceful shutdown of the client connections an accept loop served: once the loop stops
//! accepting, each connection is told to finish the request in flight and close (HTTP/1.1
//! after its response, HTTP/2 with a GOAWAY), and the loop waits for them, up to its grace.
//! An HTTP/2 connection on which no request starts for a while is told the same ([`Idle`]):
//! hyper's HTTP/1.1 server closes an idle connection at its head-read timeout, its HTTP/2
//! server never.
//!
//! hyper-util's `GracefulShutdown` does the same, but each poll of each connection polls a
//! `watch` channel's `changed()` again (hundreds of instructions per proxied request), and it
//! cannot watch hyper's own HTTP/1.1 connection with upgrades. Here a connection's task is
//! registered once, on its first poll, and later polls read one flag.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::futures::OwnedNotified;
use tokio::sync::{Notify, watch};

use crate::timer::Deadline;

/// One accept loop's connections, and whether they are being drained.
#[derive(Debug)]
pub(crate) struct Drain {
    draining: AtomicBool,
    /// Wakes every connection's task once draining begins.
    notify: Arc<Notify>,
    /// One receiver per connection not yet ended: `closed()` completes when none is left.
    open: watch::Sender<()>,
}

/// The requests started on one connection, counted by its service and read by its [`Idle`]
/// bound.
#[derive(Debug, Default)]
pub(crate) struct Started(AtomicU64);

impl Started {
    /// Counts a request: one relaxed increment, nothing else on the request's path.
    pub(crate) fn one(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A connection is told to close (as when draining) once no request has started on it for
/// `after`: looked at every `after`, so it closes between one and two of them after its last
/// request started. A request still in flight then finishes (HTTP/2's GOAWAY lets it).
#[derive(Debug)]
pub(crate) struct Idle {
    started: Arc<Started>,
    after: Duration,
    seen: u64,
    next_look: Deadline,
}

impl Idle {
    pub(crate) fn new(started: Arc<Started>, after: Duration) -> Self {
        Self {
            seen: started.count(),
            started,
            after,
            next_look: Deadline::new(Instant::now() + after),
        }
    }

    /// Ready once the connection is idle; until then its task is woken at each look.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while Pin::new(&mut self.next_look).poll(cx).is_ready() {
            let started = self.started.count();
            if started == self.seen {
                return Poll::Ready(());
            }
            self.seen = started;
            self.next_look = Deadline::new(Instant::now() + self.after);
        }
        Poll::Pending
    }
}

/// A connection's place in its loop's [`Drain`], taken when it is accepted (so that a
/// connection still in its TLS handshake is waited for too) and held until it ends.
#[derive(Debug)]
pub(crate) struct Held {
    drain: Arc<Drain>,
    _open: watch::Receiver<()>,
}

impl Drain {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            draining: AtomicBool::new(false),
            notify: Arc::new(Notify::new()),
            open: watch::Sender::new(()),
        })
    }

    /// A place for a newly accepted connection.
    pub(crate) fn hold(self: &Arc<Self>) -> Held {
        Held {
            drain: Arc::clone(self),
            _open: self.open.subscribe(),
        }
    }

    /// Tells every connection to finish and close, then waits until all have ended, or for
    /// `grace` at most.
    pub(crate) async fn finish(&self, grace: Duration) {
        self.draining.store(true, Ordering::Release);
        self.notify.notify_waiters();
        let _ = crate::timer::timeout(grace, self.open.closed()).await;
    }
}

impl Held {
    /// Runs `connection` to its end; once its loop drains, `shutdown` is called on it once
    /// (hyper's `graceful_shutdown`), and the connection ends when its request in flight is
    /// answered.
    ///
    /// Its task is registered for the drain's wake-up on the first poll only: a tokio task's
    /// waker does not change, and every later poll reads the flag.
    pub(crate) fn watch<C: Future>(
        self,
        connection: C,
        shutdown: impl FnOnce(Pin<&mut C>),
    ) -> impl Future<Output = C::Output> {
        self.watch_until(connection, shutdown, |_| false)
    }

    /// [`watch`](Self::watch), and `shutdown` is called too once `idle` says the connection
    /// is idle.
    pub(crate) fn watch_idle<C: Future>(
        self,
        connection: C,
        shutdown: impl FnOnce(Pin<&mut C>),
        mut idle: Idle,
    ) -> impl Future<Output = C::Output> {
        let is_idle = move |cx: &mut Context<'_>| idle.poll_idle(cx).is_ready();
        self.watch_until(connection, shutdown, is_idle)
    }

    /// [`watch`](Self::watch), and `shutdown` is called too once `now` says so (polled with
    /// the connection until then).
    fn watch_until<C, S, N>(self, connection: C, shutdown: S, now: N) -> Watched<C, S, N>
    where
        C: Future,
        S: FnOnce(Pin<&mut C>),
        N: FnMut(&mut Context<'_>) -> bool,
    {
        Watched {
            notified: Arc::clone(&self.drain.notify).notified_owned(),
            connection,
            shutdown: Some(shutdown),
            now,
            registered: false,
            held: self,
        }
    }
}

pin_project_lite::pin_project! {
    /// A connection and its [`Held`] place (see [`Held::watch`]). A future of its own rather
    /// than an `async fn`: the connection (hundreds of bytes) is moved into it once, where
    /// each `async fn` layer around it moved it again and kept room for another copy.
    struct Watched<C, S, N> {
        #[pin]
        connection: C,
        #[pin]
        notified: OwnedNotified,
        shutdown: Option<S>,
        now: N,
        registered: bool,
        // Last, so dropped after the connection: the drain counts it ended once its place
        // is given up.
        held: Held,
    }
}

impl<C, S, N> Future for Watched<C, S, N>
where
    C: Future,
    S: FnOnce(Pin<&mut C>),
    N: FnMut(&mut Context<'_>) -> bool,
{
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let mut this = self.project();
        if this.shutdown.is_some() {
            if !*this.registered {
                // Registered before the flag is read: a drain that begins after the read
                // wakes this task.
                let _ = this.notified.poll(cx);
                *this.registered = true;
            }
            if ((this.now)(cx) || this.held.drain.draining.load(Ordering::Acquire))
                && let Some(shutdown) = this.shutdown.take()
            {
                shutdown(this.connection.as_mut());
            }
        }
        this.connection.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that ends only once told to, counting its polls.
    struct Told {
        told: bool,
        polls: usize,
    }

    impl Future for Told {
        type Output = usize;

        fn poll(mut self: Pin<&mut Self>, _: &mut std::task::Context<'_>) -> Poll<usize> {
            self.polls += 1;
            if self.told {
                Poll::Ready(self.polls)
            } else {
                Poll::Pending
            }
        }
    }

    fn told() -> Told {
        Told {
            told: false,
            polls: 0,
        }
    }

    #[tokio::test]
    async fn a_drain_tells_each_connection_once_and_waits_for_them() {
        let drain = Drain::new();
        let watched: Vec<_> = (0..3)
            .map(|_| {
                let held = drain.hold();
                tokio::spawn(held.watch(told(), |c| c.get_mut().told = true))
            })
            .collect();
        tokio::task::yield_now().await;
        let finished =
            tokio::time::timeout(Duration::from_secs(5), drain.finish(Duration::from_secs(5)));
        finished.await.expect("every connection ended");
        for task in watched {
            let polls = task.await.unwrap();
            // Once when spawned, once when woken by the drain.
            assert_eq!(polls, 2);
        }
    }

    #[tokio::test]
    async fn a_connection_accepted_while_draining_is_told_at_once() {
        let drain = Drain::new();
        let held = drain.hold();
        let finishing = {
            let drain = Arc::clone(&drain);
            tokio::spawn(async move { drain.finish(Duration::from_secs(5)).await })
        };
        tokio::task::yield_now().await;
        let polls = held.watch(told(), |c| c.get_mut().told = true).await;
        assert_eq!(polls, 1);
        tokio::time::timeout(Duration::from_secs(5), finishing)
            .await
            .expect("the drain ended with its last connection")
            .unwrap();
    }

    /// Told to close once no request has started for a look's time; not while they start.
    #[tokio::test]
    async fn an_idle_connection_is_told_to_close() {
        let drain = Drain::new();
        let started = Arc::new(Started::default());
        // Requests start every fifth of it: only a stall of four fifths would close it early.
        let after = Duration::from_millis(200);
        let idle = Idle::new(Arc::clone(&started), after);
        let watched = tokio::spawn(drain.hold().watch_idle(
            told(),
            |c| c.get_mut().told = true,
            idle,
        ));
        let mut last = Instant::now();
        for _ in 0..10 {
            started.one();
            last = Instant::now();
            tokio::time::sleep(after / 5).await;
            assert!(!watched.is_finished(), "closed while requests started");
        }
        tokio::time::timeout(Duration::from_secs(5), watched)
            .await
            .expect("the idle connection was told to close")
            .unwrap();
        let idle_for = last.elapsed();
        assert!(
            idle_for >= after,
            "closed {idle_for:?} after its last request"
        );
    }

    #[tokio::test]
    async fn a_connection_that_does_not_end_is_given_the_grace_only() {
        let drain = Drain::new();
        let held = drain.hold();
        let stuck = tokio::spawn(held.watch(told(), |_| {}));
        tokio::task::yield_now().await;
        let grace = Duration::from_millis(100);
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(5), drain.finish(grace))
            .await
            .expect("the drain ended after its grace");
        assert!(started.elapsed() >= grace);
        assert!(!stuck.is_finished());
        stuck.abort();
    }
}
