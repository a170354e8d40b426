//! A followed log as a body: one JSON line per [`LogLine`], until the platform stops sending
//! or the client goes (the body, and with it the receiver, is dropped).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Bytes;
use tokio::sync::mpsc;

use runway_store::Timestamp;

use crate::types::LogLine;

/// The stream of NDJSON lines.
#[derive(Debug)]
pub(crate) struct NdjsonLines {
    receiver: mpsc::Receiver<LogLine>,
    since: Option<Timestamp>,
}

impl NdjsonLines {
    /// The lines `receiver` gives, leaving out those written before `since`.
    pub(crate) fn new(receiver: mpsc::Receiver<LogLine>, since: Option<Timestamp>) -> Self {
        Self { receiver, since }
    }
}

impl futures_core::Stream for NdjsonLines {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let line = match self.receiver.poll_recv(cx) {
                Poll::Ready(Some(line)) => line,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            };
            if !written_since(&line, self.since) {
                continue;
            }
            // Serializing a LogLine cannot fail.
            let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
            bytes.push(b'\n');
            return Poll::Ready(Some(Ok(Bytes::from(bytes))));
        }
    }
}

/// Whether `line` was written at or after `since` (always, with none; a line whose time
/// does not parse is kept).
pub(crate) fn written_since(line: &LogLine, since: Option<Timestamp>) -> bool {
    match (since, Timestamp::parse_rfc3339(&line.time)) {
        (Some(since), Some(at)) => at >= since,
        _ => true,
    }
}
