//! Deadlines for every request (its head's read timeout, its timeout), cheap on an event loop.
//!
//! A tokio `Sleep` registers in the runtime's timer wheel when first polled and takes itself
//! out when dropped, each under the time driver's lock; hyper also allocates a new one for
//! every request head it reads. Nearly every request ends long before its deadlines, so that
//! work is almost always wasted. On an event loop ([`event_loop`]), a deadline is instead a
//! slot in the loop's own list: a push and a waker clone when first polled, a pop when dropped,
//! no lock and no clock read. One task per loop waits until the earliest deadline and wakes
//! what is due; a deadline fires at most [`GRAIN`] late. The loop's runtime has no tokio timer
//! at all: its time driver would take a lock and read the clock twice every time the loop waits
//! for events (about 500 instructions each time). The loop's clock is a thread of its own
//! ([`Clock`]), which sleeps until the next deadline and wakes the loop only then. Anywhere
//! else (the shared runtime) a deadline is a tokio `Sleep`.
//!
//! Code that may run on an event loop waits with [`sleep`], [`timeout`], [`timeout_at`] and
//! [`Interval`], never with tokio's, which would panic there: the crate's `clippy.toml` refuses
//! those.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How late a deadline on an event loop may fire: its loop's task wakes at most this often
/// while deadlines are due, never while none is.
pub(crate) const GRAIN: Duration = Duration::from_millis(10);

thread_local! {
    static LOOP: RefCell<Option<Deadlines>> = const { RefCell::new(None) };
}

/// Tells event loops apart, so that a deadline dropped on another thread leaves them alone.
static NEXT_LOOP: AtomicU64 = AtomicU64::new(1);

/// One event loop's deadlines.
struct Deadlines {
    id: u64,
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
    /// When the loop's task next looks (`None`: it waits for a first deadline).
    next_look: Option<Instant>,
    /// Wakes the loop's task for a deadline earlier than its next look.
    rearm: Arc<Notify>,
}

struct Entry {
    at: Instant,
    waker: Waker,
    fired: bool,
}

impl Deadlines {
    fn insert(&mut self, at: Instant, waker: Waker) -> usize {
        if self.next_look.is_none_or(|next| at < next) {
            self.next_look = Some(at);
            self.rearm.notify_one();
        }
        let entry = Some(Entry {
            at,
            waker,
            fired: false,
        });
        match self.free.pop() {
            Some(index) => {
                self.slots[index] = entry;
                index
            }
            None => {
                self.slots.push(entry);
                self.slots.len() - 1
            }
        }
    }

    fn remove(&mut self, index: usize) {
        if let Some(slot) = self.slots.get_mut(index)
            && slot.take().is_some()
        {
            self.free.push(index);
        }
    }

    /// Marks what is due at `now` fired and returns its wakers; the next look is set to the
    /// earliest deadline still pending.
    fn fire_due(&mut self, now: Instant) -> Vec<Waker> {
        let mut wakers = Vec::new();
        let mut earliest: Option<Instant> = None;
        for entry in self.slots.iter_mut().flatten().filter(|e| !e.fired) {
            if entry.at <= now {
                entry.fired = true;
                wakers.push(entry.waker.clone());
            } else if earliest.is_none_or(|at| entry.at < at) {
                earliest = Some(entry.at);
            }
        }
        self.next_look = earliest;
        wakers
    }
}

/// Runs `future` on this thread as an event loop: a single-threaded runtime with tokio's I/O
/// driver and this module's deadlines, no tokio timer.
pub(crate) fn event_loop<F: Future>(future: F) -> std::io::Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let output = runtime.block_on(async {
        install()?;
        Ok(future.await)
    });
    // Its tasks (and their deadlines) go first; then the thread is no loop any more.
    drop(runtime);
    LOOP.with(|deadlines| deadlines.borrow_mut().take());
    output
}

/// Makes this thread an event loop with its own deadlines, and spawns the task that fires
/// them on the current (single-threaded) runtime.
fn install() -> std::io::Result<()> {
    let clock = Clock::start()?;
    let rearm = Arc::new(Notify::new());
    let id = NEXT_LOOP.fetch_add(1, Ordering::Relaxed);
    LOOP.with(|deadlines| {
        *deadlines.borrow_mut() = Some(Deadlines {
            id,
            slots: Vec::new(),
            free: Vec::new(),
            next_look: None,
            rearm: Arc::clone(&rearm),
        });
    });
    tokio::spawn(fire(rearm, clock));
    Ok(())
}

/// The loop's task: wakes what is due, then sleeps until the next deadline (a [`GRAIN`] past
/// it) or until an earlier one is set.
async fn fire(rearm: Arc<Notify>, clock: Clock) {
    loop {
        let (wakers, next) = LOOP.with(|deadlines| {
            let mut deadlines = deadlines.borrow_mut();
            match deadlines.as_mut() {
                Some(deadlines) => {
                    let wakers = deadlines.fire_due(Instant::now());
                    (wakers, deadlines.next_look)
                }
                None => (Vec::new(), None),
            }
        });
        // Woken outside the borrow: a wake only schedules a task, but need not be trusted to.
        for waker in wakers {
            waker.wake();
        }
        match next {
            Some(at) => {
                clock.ring_at(at.max(Instant::now()) + GRAIN);
                tokio::select! {
                    () = clock.rang() => {}
                    () = rearm.notified() => {}
                }
            }
            None => rearm.notified().await,
        }
    }
}

/// An event loop's clock: a thread that sleeps until the time it was last set to, then wakes
/// the loop's task. Stops with the loop (when its task, which owns it, is dropped).
struct Clock {
    shared: Arc<ClockShared>,
    thread: std::thread::Thread,
}

#[derive(Default)]
struct ClockShared {
    /// When to ring next (`None`: not until set).
    at: std::sync::Mutex<Option<Instant>>,
    rang: Notify,
    stop: std::sync::atomic::AtomicBool,
}

impl ClockShared {
    fn at(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Clock {
    fn start() -> std::io::Result<Self> {
        let shared = Arc::new(ClockShared::default());
        let ticking = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("ingress-clock".to_owned())
            .spawn(move || tick(&ticking))?;
        Ok(Self {
            shared,
            thread: handle.thread().clone(),
        })
    }

    /// Rings at `at` (rather than any earlier time it was set to).
    fn ring_at(&self, at: Instant) {
        let mut next = self.shared.at();
        if *next != Some(at) {
            *next = Some(at);
            drop(next);
            self.thread.unpark();
        }
    }

    /// Completes when the clock rings.
    async fn rang(&self) {
        self.shared.rang.notified().await;
    }
}

impl Drop for Clock {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// The clock's thread.
fn tick(shared: &ClockShared) {
    while !shared.stop.load(Ordering::Acquire) {
        let mut next = shared.at();
        match *next {
            None => {
                drop(next);
                std::thread::park();
            }
            Some(at) => {
                let now = Instant::now();
                if now >= at {
                    *next = None;
                    drop(next);
                    // Kept if the task is not waiting yet: it will not miss it.
                    shared.rang.notify_one();
                } else {
                    drop(next);
                    std::thread::park_timeout(at - now);
                }
            }
        }
    }
}

/// A point in time to wait for.
#[derive(Debug)]
pub(crate) struct Deadline {
    at: Instant,
    state: State,
}

#[derive(Debug)]
enum State {
    /// On an event loop, not polled yet.
    Unregistered,
    /// In loop `loop_id`'s list at `index`.
    Registered {
        loop_id: u64,
        index: usize,
    },
    /// Not on an event loop.
    Tokio(Pin<Box<tokio::time::Sleep>>),
    Done,
}

impl Deadline {
    pub(crate) fn new(at: Instant) -> Self {
        let on_loop = LOOP.with(|deadlines| deadlines.borrow().is_some());
        let state = if on_loop {
            State::Unregistered
        } else {
            State::Tokio(tokio_sleep(at))
        };
        Self { at, state }
    }
}

/// tokio's timer, off the event loops.
fn tokio_sleep(at: Instant) -> Pin<Box<tokio::time::Sleep>> {
    #[expect(
        clippy::disallowed_methods,
        reason = "off the event loops, tokio keeps time"
    )]
    Box::pin(tokio::time::sleep_until(at.into()))
}

impl Future for Deadline {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let at = self.at;
        match &mut self.state {
            State::Done => Poll::Ready(()),
            State::Tokio(sleep) => sleep.as_mut().poll(cx),
            State::Unregistered => {
                let registered = LOOP.with(|deadlines| {
                    let mut deadlines = deadlines.borrow_mut();
                    let deadlines = deadlines.as_mut()?;
                    Some((deadlines.id, deadlines.insert(at, cx.waker().clone())))
                });
                self.state = match registered {
                    Some((loop_id, index)) => State::Registered { loop_id, index },
                    // Polled off its loop (never, by how the ingress runs): tokio's timer.
                    None => State::Tokio(tokio_sleep(at)),
                };
                if let State::Tokio(sleep) = &mut self.state {
                    return sleep.as_mut().poll(cx);
                }
                Poll::Pending
            }
            State::Registered { loop_id, index } => {
                let (loop_id, index) = (*loop_id, *index);
                let fired = LOOP.with(|deadlines| {
                    let mut deadlines = deadlines.borrow_mut();
                    let deadlines = deadlines.as_mut().filter(|d| d.id == loop_id)?;
                    let entry = deadlines.slots.get_mut(index)?.as_mut()?;
                    if !entry.waker.will_wake(cx.waker()) {
                        entry.waker.clone_from(cx.waker());
                    }
                    Some(entry.fired)
                });
                match fired {
                    Some(false) => Poll::Pending,
                    Some(true) => {
                        self.state = State::Done;
                        remove(loop_id, index);
                        Poll::Ready(())
                    }
                    // Moved off its loop: the time itself tells, or this thread's own clock
                    // (another loop's list, or tokio's timer off the loops; a loop has no
                    // tokio timer). The old slot goes when it fires.
                    None if Instant::now() >= at => Poll::Ready(()),
                    None => {
                        self.state = State::Unregistered;
                        self.poll(cx)
                    }
                }
            }
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        if let State::Registered { loop_id, index } = self.state {
            remove(loop_id, index);
        }
    }
}

/// Takes entry `index` out of this thread's list, if the thread is loop `loop_id` (elsewhere
/// the entry stays until it fires, and then only wakes a task that no longer waits).
fn remove(loop_id: u64, index: usize) {
    // `try_with`: a deadline may be dropped while the thread's locals are torn down.
    let _ = LOOP.try_with(|deadlines| {
        if let Ok(mut deadlines) = deadlines.try_borrow_mut()
            && let Some(deadlines) = deadlines.as_mut().filter(|d| d.id == loop_id)
        {
            deadlines.remove(index);
        }
    });
}

/// Completes after `duration` (on an event loop, up to a [`GRAIN`] later).
pub(crate) fn sleep(duration: Duration) -> Deadline {
    Deadline::new(Instant::now() + duration)
}

/// A periodic task's pace, on or off an event loop: tokio's `interval` with
/// `MissedTickBehavior::Delay`.
#[derive(Debug)]
pub(crate) struct Interval {
    period: Duration,
    next: Instant,
}

impl Interval {
    /// Ticks at once, then every `period`.
    pub(crate) fn new(period: Duration) -> Self {
        Self {
            period,
            next: Instant::now(),
        }
    }

    /// Completes at the next tick. Dropped before then, it leaves the tick where it was; a
    /// tick seen late puts the next a whole period after it.
    pub(crate) async fn tick(&mut self) {
        if Instant::now() < self.next {
            Deadline::new(self.next).await;
        }
        let now = Instant::now();
        let next = self.next + self.period;
        self.next = if next < now { now + self.period } else { next };
    }
}

/// `future`'s output, or `Err(Elapsed)` if `at` comes first.
pub(crate) fn timeout_at<F: Future>(at: Instant, future: F) -> Timeout<F> {
    Timeout {
        future,
        deadline: Deadline::new(at),
    }
}

/// `future`'s output, or `Err(Elapsed)` if `duration` passes first.
pub(crate) fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    timeout_at(Instant::now() + duration, future)
}

pin_project_lite::pin_project! {
    /// [`timeout_at`]'s future: a struct, not an `async fn`, whose state would hold the
    /// future twice (the argument and its pinned copy), and every request's future with it.
    pub(crate) struct Timeout<F> {
        #[pin]
        future: F,
        deadline: Deadline,
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        Pin::new(this.deadline).poll(cx).map(|()| Err(Elapsed))
    }
}

/// A deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Elapsed;

/// hyper's timer (a request head's read timeout) on [`Deadline`]s.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HyperTimer;

impl hyper::rt::Timer for HyperTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HyperSleep(Deadline::new(deadline)))
    }
}

struct HyperSleep(Deadline);

impl Future for HyperSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl hyper::rt::Sleep for HyperSleep {}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting() -> usize {
        LOOP.with(|d| {
            d.borrow()
                .as_ref()
                .map_or(0, |d| d.slots.iter().flatten().count())
        })
    }

    #[test]
    fn a_deadline_fires_on_time_and_a_finished_future_takes_its_out() {
        event_loop(async {
            let start = Instant::now();
            let late = timeout_at(
                start + Duration::from_millis(50),
                std::future::pending::<()>(),
            );
            assert_eq!(late.await, Err(Elapsed));
            let waited = start.elapsed();
            assert!(waited >= Duration::from_millis(50), "{waited:?}");
            assert!(
                waited < Duration::from_millis(50) + GRAIN * 20,
                "{waited:?}"
            );
            assert_eq!(waiting(), 0);

            let quick = timeout_at(start + Duration::from_secs(30), async {
                tokio::task::yield_now().await;
                7
            });
            assert_eq!(quick.await, Ok(7));
            assert_eq!(waiting(), 0, "a finished request left its deadline behind");
        })
        .unwrap();
    }

    #[test]
    fn an_earlier_deadline_wakes_the_loop_sooner() {
        event_loop(async {
            let start = Instant::now();
            let far = tokio::spawn(timeout_at(
                start + Duration::from_secs(60),
                std::future::pending::<()>(),
            ));
            tokio::task::yield_now().await;
            let near = timeout_at(
                start + Duration::from_millis(30),
                std::future::pending::<()>(),
            )
            .await;
            assert_eq!(near, Err(Elapsed));
            assert!(start.elapsed() < Duration::from_secs(5));
            far.abort();
            let _ = far.await;
            assert_eq!(waiting(), 0);
        })
        .unwrap();
    }

    #[test]
    fn many_deadlines_reuse_their_slots() {
        event_loop(async {
            for _ in 0..3 {
                let futures: Vec<_> = (0..100)
                    .map(|_| {
                        timeout_at(Instant::now() + Duration::from_secs(30), async {
                            tokio::task::yield_now().await;
                        })
                    })
                    .collect();
                for future in futures {
                    assert_eq!(future.await, Ok(()));
                }
            }
            let slots = LOOP.with(|d| d.borrow().as_ref().map_or(0, |d| d.slots.len()));
            assert!(slots <= 100, "{slots} slots for 100 deadlines at a time");
        })
        .unwrap();
    }

    #[test]
    fn a_loop_without_tokio_timer_sleeps_and_times_out() {
        event_loop(async {
            // The loop has no tokio timer to make a tokio sleep with.
            let tokio_sleep = std::panic::catch_unwind(|| tokio::time::sleep(Duration::ZERO));
            assert!(tokio_sleep.is_err());
            let start = Instant::now();
            sleep(Duration::from_millis(20)).await;
            assert!(start.elapsed() >= Duration::from_millis(20));
            let late = timeout(Duration::from_millis(20), std::future::pending::<()>()).await;
            assert_eq!(late, Err(Elapsed));
            assert!(start.elapsed() >= Duration::from_millis(40));
            assert_eq!(waiting(), 0);
        })
        .unwrap();
    }

    #[test]
    fn an_interval_ticks_at_once_then_every_period_and_keeps_its_pace_when_dropped() {
        event_loop(async {
            let period = Duration::from_millis(50);
            let start = Instant::now();
            let mut ticks = Interval::new(period);
            ticks.tick().await;
            assert!(start.elapsed() < period, "the first tick waited");
            // A tick given up halfway is still due at its time.
            let given_up = timeout(period / 2, ticks.tick()).await;
            assert_eq!(given_up, Err(Elapsed));
            ticks.tick().await;
            let second = start.elapsed();
            assert!(
                second >= period && second < period + GRAIN * 10,
                "{second:?}"
            );
            ticks.tick().await;
            assert!(start.elapsed() >= period * 2);
        })
        .unwrap();
    }

    #[test]
    fn a_deadline_moved_to_another_loop_fires_there() {
        let start = Instant::now();
        let at = start + Duration::from_millis(50);
        // Registered in the first loop's list...
        let mut deadline = event_loop(async move {
            let mut deadline = Box::pin(Deadline::new(at));
            let polled = std::future::poll_fn(|cx| Poll::Ready(deadline.as_mut().poll(cx))).await;
            assert!(polled.is_pending());
            // Handed out as it is, not awaited.
            Some(deadline)
        })
        .unwrap()
        .unwrap();
        // ...then awaited on another loop's thread, which has no tokio timer either.
        std::thread::spawn(move || event_loop(async move { deadline.as_mut().await }).unwrap())
            .join()
            .unwrap();
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_clock_thread_ends_with_its_clock() {
        let clock = Clock::start().unwrap();
        let shared = Arc::downgrade(&clock.shared);
        clock.ring_at(Instant::now() + Duration::from_secs(60));
        drop(clock);
        // The thread holds the other reference until it ends.
        let start = Instant::now();
        while shared.upgrade().is_some() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the clock's thread went on"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn off_an_event_loop_tokio_keeps_time() {
        let start = Instant::now();
        let late = timeout_at(
            start + Duration::from_millis(20),
            std::future::pending::<()>(),
        );
        assert_eq!(late.await, Err(Elapsed));
        assert!(start.elapsed() >= Duration::from_millis(20));
    }
}
