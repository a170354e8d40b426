//! The response body the ingress sends: a short body of its own, or an instance's body
//! streamed through. When an instance's body ends or is dropped, the request is finished: its
//! slot on the instance freed, its connection back in the pool if it was read to the end, its
//! metrics and access-log line written.
//!
//! The request body sent on to an instance is a [`ClientBody`]: the client's body under the
//! size limit, watched, so that when sending fails the proxy can tell the client's fault (a
//! body that broke off, was malformed, went past the limit or stalled) from the instance's.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{LengthLimitError, Limited};
use hyper::body::Incoming;

use crate::log::{AccessLog, AccessRecord, millis};
use crate::table::{Instance, Revision};
use crate::upstream::Sender;

/// The body of every response the ingress sends.
#[derive(Debug)]
pub struct ProxyBody {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Full(Option<Bytes>),
    Upstream {
        body: Incoming,
        finish: Option<Finish>,
    },
}

impl ProxyBody {
    pub(crate) fn full(bytes: Bytes) -> Self {
        Self {
            inner: Inner::Full(Some(bytes)),
        }
    }

    pub(crate) fn upstream(body: Incoming, mut finish: Finish) -> Self {
        // An empty body may never be polled: it is complete already.
        if body.is_end_stream() {
            finish.complete = true;
        }
        Self {
            inner: Inner::Upstream {
                body,
                finish: Some(finish),
            },
        }
    }
}

/// What remains to do when a proxied response ends.
#[derive(Debug)]
pub(crate) struct Finish {
    /// The access log and the request's record, when there is a log.
    pub(crate) log: Option<(AccessLog, Box<AccessRecord>)>,
    /// The request's trace, when traced, and its response's status.
    pub(crate) trace: Option<(Box<crate::trace::RequestTrace>, u16)>,
    pub(crate) start: Instant,
    pub(crate) instance: Arc<Instance>,
    pub(crate) revision: Arc<Revision>,
    pub(crate) sender: Option<Sender>,
    pub(crate) complete: bool,
}

impl Finish {
    /// Response body bytes sent, for the access log.
    pub(crate) fn add_bytes(&mut self, bytes: u64) {
        if let Some((_, record)) = &mut self.log {
            record.bytes += bytes;
        }
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take()
            && self.complete
        {
            self.instance.pool.put(sender);
        }
        self.revision.release(&self.instance);
        self.revision.metrics.in_flight.dec();
        if let Some((trace, status)) = self.trace.take() {
            trace.end(
                status,
                (!self.complete).then_some("response body not completed"),
            );
        }
        if let Some((log, mut record)) = self.log.take() {
            record.duration_ms = millis(self.start.elapsed());
            if !self.complete {
                record.error = Some("response body not completed".to_owned());
            }
            log.send(*record);
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match &mut self.get_mut().inner {
            Inner::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Inner::Upstream { body, finish } => {
                let polled = Pin::new(&mut *body).poll_frame(cx);
                match &polled {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let (Some(data), Some(f)) = (frame.data_ref(), finish.as_mut()) {
                            f.add_bytes(data.len() as u64);
                        }
                        // A server stops polling once the body says it ended.
                        if body.is_end_stream()
                            && let Some(mut f) = finish.take()
                        {
                            f.complete = true;
                        }
                    }
                    Poll::Ready(None) => {
                        if let Some(mut f) = finish.take() {
                            f.complete = true;
                        }
                    }
                    Poll::Ready(Some(Err(_))) => {
                        finish.take();
                    }
                    Poll::Pending => {}
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Full(bytes) => bytes.is_none(),
            Inner::Upstream { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            Inner::Full(None) => SizeHint::with_exact(0),
            Inner::Upstream { body, .. } => body.size_hint(),
        }
    }
}

/// Where a request body stands, as its last poll left it.
const SENDING: u8 = 0;
/// The last poll found no data from the client yet: the body waits for the client.
const WAITING_FOR_CLIENT: u8 = 1;
const ENDED: u8 = 2;
const TOO_LARGE: u8 = 3;
const BROKEN: u8 = 4;

/// How the client's request body failed, as far as the ingress saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFault {
    /// It went past the body-size limit.
    TooLarge,
    /// The client's connection broke, or its body was malformed (bad chunked encoding,
    /// shorter than its `Content-Length`, a stream reset).
    Broken,
}

/// The request body sent to an instance: the client's, with the size limit, reporting what
/// became of it to a [`BodyWatch`] and, when dropped before its end, marking the client's
/// connection for a lingering close (see [`crate::server`]).
///
/// A body empty from the start (most requests) is nothing at all, and one that is not is
/// boxed: a request is moved a dozen times on its way through hyper's client (its dispatch
/// channel, the callback that may hand it back), and it moves as 232 bytes rather than 320.
#[derive(Debug)]
pub(crate) struct ClientBody(Option<Box<Streaming>>);

#[derive(Debug)]
struct Streaming {
    inner: Limited<Incoming>,
    /// Frames read ahead (a cell rule's look at the body's first bytes), sent first.
    replay: std::collections::VecDeque<Result<Frame<Bytes>, BodyError>>,
    state: Arc<AtomicU8>,
    linger: Arc<AtomicBool>,
}

/// The proxy's side of a [`ClientBody`].
#[derive(Debug, Clone, Default)]
pub(crate) struct BodyWatch(Option<Arc<AtomicU8>>);

impl ClientBody {
    /// Wraps a client's body; `linger` is its connection's flag.
    pub(crate) fn new(body: Incoming, limit: usize, linger: &Arc<AtomicBool>) -> (Self, BodyWatch) {
        // Most requests have no body: nothing to watch, nothing allocated.
        if body.is_end_stream() {
            return (Self::taken(), BodyWatch(None));
        }
        let state = Arc::new(AtomicU8::new(SENDING));
        let watch = BodyWatch(Some(Arc::clone(&state)));
        let body = Streaming {
            inner: Limited::new(body, limit),
            replay: std::collections::VecDeque::new(),
            state,
            linger: Arc::clone(linger),
        };
        (Self(Some(Box::new(body))), watch)
    }

    /// An empty body, left in a request's place when the request is taken out to be sent
    /// (see `upstream::take`).
    pub(crate) fn taken() -> Self {
        Self(None)
    }

    /// Reads up to `limit` bytes of the body (fewer if it ends first, or if the client sends
    /// nothing more within `wait`), keeping them to be sent first: a rule decides on them and
    /// the body still goes on whole. A body that fails here fails where it is sent.
    pub(crate) async fn read_prefix(&mut self, limit: usize, wait: std::time::Duration) -> Bytes {
        use http_body_util::BodyExt as _;
        let mut prefix = bytes::BytesMut::new();
        let deadline = std::time::Instant::now() + wait;
        let Some(body) = self.0.as_deref_mut() else {
            return Bytes::new();
        };
        while prefix.len() < limit && !body.inner.is_end_stream() {
            let Ok(Some(frame)) = crate::timer::timeout_at(deadline, body.inner.frame()).await
            else {
                break;
            };
            let failed = frame.is_err();
            if let Ok(data) = frame.as_ref().map(Frame::data_ref)
                && let Some(data) = data
            {
                prefix.extend_from_slice(&data[..data.len().min(limit - prefix.len())]);
            }
            body.replay.push_back(frame);
            if failed {
                break;
            }
        }
        prefix.freeze()
    }
}

impl BodyWatch {
    /// How the body failed, if it did.
    pub(crate) fn fault(&self) -> Option<BodyFault> {
        match self.0.as_ref()?.load(Ordering::Acquire) {
            TOO_LARGE => Some(BodyFault::TooLarge),
            BROKEN => Some(BodyFault::Broken),
            _ => None,
        }
    }

    /// Whether the client may still be sending the body: it neither ended nor failed.
    pub(crate) fn unfinished(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|s| matches!(s.load(Ordering::Acquire), SENDING | WAITING_FOR_CLIENT))
    }

    /// Whether the body is unfinished and its last poll waited for the client: an instance
    /// that has not answered yet may well be waiting for the rest of it.
    pub(crate) fn waiting_for_client(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Acquire) == WAITING_FOR_CLIENT)
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        if self.state.load(Ordering::Acquire) != ENDED {
            self.linger.store(true, Ordering::Release);
        }
    }
}

/// A client body's error (the size limit's, or the connection's).
type BodyError = Box<dyn std::error::Error + Send + Sync>;

impl Body for ClientBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let Some(this) = self.get_mut().0.as_deref_mut() else {
            return Poll::Ready(None);
        };
        let polled = match this.replay.pop_front() {
            Some(frame) => Poll::Ready(Some(frame)),
            None => Pin::new(&mut this.inner).poll_frame(cx),
        };
        let now = match &polled {
            Poll::Pending => WAITING_FOR_CLIENT,
            Poll::Ready(None) => ENDED,
            Poll::Ready(Some(Ok(_))) if this.replay.is_empty() && this.inner.is_end_stream() => {
                ENDED
            }
            Poll::Ready(Some(Ok(_))) => SENDING,
            Poll::Ready(Some(Err(error))) if error.is::<LengthLimitError>() => TOO_LARGE,
            Poll::Ready(Some(Err(_))) => BROKEN,
        };
        this.state.store(now, Ordering::Release);
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.0
            .as_deref()
            .is_none_or(|body| body.replay.is_empty() && body.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let Some(body) = self.0.as_deref() else {
            return SizeHint::with_exact(0);
        };
        let replayed: u64 = body
            .replay
            .iter()
            .filter_map(|frame| frame.as_ref().ok()?.data_ref())
            .map(|data| data.len() as u64)
            .sum();
        let inner = body.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + replayed);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + replayed);
        }
        hint
    }
}
