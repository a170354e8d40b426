//! A followed log as a body: one JSON line per [`LogLine`], until the platform stops sending
//! or the client goes (the body, and with it the receiver, is dropped).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Bytes;
use tokio::sync::mpsc;

use crate::types::LogLine;

/// The stream of NDJSON lines.
#[derive(Debug)]
pub(crate) struct NdjsonLines {
    receiver: mpsc::Receiver<LogLine>,
}

impl NdjsonLines {
    pub(crate) fn new(receiver: mpsc::Receiver<LogLine>) -> Self {
        Self { receiver }
    }
}

impl futures_core::Stream for NdjsonLines {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.receiver.poll_recv(cx).map(|line| {
            line.map(|line| {
                // Serializing a LogLine cannot fail.
                let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
                bytes.push(b'\n');
                Ok(Bytes::from(bytes))
            })
        })
    }
}
