//! The response body the ingress sends: a short body of its own, or an instance's body
//! streamed through. When an instance's body ends or is dropped, the request is finished: its
//! slot on the instance freed, its connection back in the pool if it was read to the end, its
//! metrics and access-log line written.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
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
        finish: Option<Box<Finish>>,
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
                finish: Some(Box::new(finish)),
            },
        }
    }
}

/// What remains to do when a proxied response ends.
#[derive(Debug)]
pub(crate) struct Finish {
    pub(crate) record: AccessRecord,
    pub(crate) start: Instant,
    pub(crate) instance: Arc<Instance>,
    pub(crate) revision: Arc<Revision>,
    pub(crate) sender: Option<Sender>,
    pub(crate) log: Option<AccessLog>,
    pub(crate) complete: bool,
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
        if let Some(log) = &self.log {
            let mut record = std::mem::take(&mut self.record);
            record.duration_ms = millis(self.start.elapsed());
            if !self.complete {
                record.error = Some("response body not completed".to_owned());
            }
            log.send(record);
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
                            f.record.bytes += data.len() as u64;
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
