//! Connections to instances: HTTP/1.1 with keep-alive, one small pool of idle connections per
//! instance, so draining an instance closes exactly its connections.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http_body_util::Limited;
use hyper::body::Incoming;
use hyper::client::conn::http1::{Builder, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The request body sent to an instance: the client's, with the body-size limit.
pub(crate) type UpstreamBody = Limited<Incoming>;
pub(crate) type Sender = SendRequest<UpstreamBody>;

/// Idle connections kept per instance.
const MAX_IDLE: usize = 64;

/// Idle keep-alive connections to one instance.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    idle: Mutex<Vec<Sender>>,
    closed: AtomicBool,
}

impl Pool {
    /// An idle connection ready for a request, if there is one.
    pub(crate) async fn take(&self) -> Option<Sender> {
        loop {
            let mut sender = {
                let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                idle.pop()?
            };
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
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(sender);
        }
    }

    /// Closes the idle connections and keeps no more (the instance is draining).
    pub(crate) fn close_idle(&self) {
        self.closed.store(true, Ordering::Release);
        let drained = std::mem::take(&mut *self.idle.lock().unwrap_or_else(|e| e.into_inner()));
        drop(drained);
    }
}

/// Opens a new HTTP/1.1 connection to an instance.
pub(crate) async fn connect(address: SocketAddr, timeout: Duration) -> std::io::Result<Sender> {
    let stream = tokio::time::timeout(timeout, TcpStream::connect(address))
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
