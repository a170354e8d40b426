//! The access log: one JSON object a line per request, written by one task so that a request
//! never waits on the log's output.

use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;

/// One line of the access log.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AccessRecord {
    /// Milliseconds since the Unix epoch at which the request arrived.
    pub time_ms: u64,
    pub request_id: String,
    pub client: String,
    pub method: String,
    pub host: String,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// A cell-routed request's deciding rule (`-` when none did) and its outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cell_outcome: Option<&'static str>,
    pub status: u16,
    /// From arrival to the end of the response body (or to the error).
    pub duration_ms: f64,
    /// Response body bytes sent.
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where access records go; a full buffer drops records rather than slow requests.
#[derive(Debug, Clone)]
pub(crate) struct AccessLog {
    sender: mpsc::Sender<AccessRecord>,
}

impl AccessLog {
    /// Starts the writer task on `out`.
    pub(crate) fn spawn<W: AsyncWrite + Unpin + Send + 'static>(out: W) -> Self {
        let (sender, mut receiver) = mpsc::channel::<AccessRecord>(8192);
        tokio::spawn(async move {
            let mut out = BufWriter::new(out);
            while let Some(record) = receiver.recv().await {
                let mut line = serde_json::to_vec(&record).unwrap_or_default();
                line.push(b'\n');
                if out.write_all(&line).await.is_err() {
                    return;
                }
                if receiver.is_empty() && out.flush().await.is_err() {
                    return;
                }
            }
            let _ = out.flush().await;
        });
        Self { sender }
    }

    pub(crate) fn send(&self, record: AccessRecord) {
        let _ = self.sender.try_send(record);
    }
}

pub(crate) fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
