//! The client-facing server (HTTP/1.1 and h2c on one port) and the admin server (metrics).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::Ingress;
use crate::proxy::{Peer, handle};

impl Ingress {
    /// Serves clients on `listener` until `shutdown` completes, then stops accepting, lets
    /// in-flight requests finish within [`crate::Options::shutdown_grace`] and returns.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        let options = &self.shared.options;
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(options.header_read_timeout)
            .max_buf_size(options.max_header_bytes.max(8192))
            .keep_alive(true);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_header_list_size(options.max_header_bytes as u32)
            .max_concurrent_streams(250);
        let builder = Arc::new(builder);
        let graceful = GracefulShutdown::new();
        let connections = Arc::new(Semaphore::new(options.max_connections));
        tokio::pin!(shutdown);
        loop {
            let (stream, address) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    // Out of descriptors or a connection reset before accept: keep serving.
                    Err(_) => {
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let shared = Arc::clone(&self.shared);
            let peer = Peer {
                address,
                tls: false,
            };
            let service = service_fn(move |request: Request<Incoming>| {
                handle(Arc::clone(&shared), peer, request)
            });
            let connection = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .into_owned();
            let connection = graceful.watch(connection);
            let gauge = self.shared.metrics.connections.clone();
            gauge.inc();
            tokio::spawn(async move {
                // A client's protocol error ends its own connection only.
                let _ = connection.await;
                gauge.dec();
                drop(permit);
            });
        }
        drop(listener);
        let _ = tokio::time::timeout(options.shutdown_grace, graceful.shutdown()).await;
        Ok(())
    }

    /// Serves `GET /metrics` (Prometheus text) and `GET /healthz` on `listener` until
    /// `shutdown` completes.
    pub async fn serve_admin(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        tokio::pin!(shutdown);
        loop {
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(_) => continue,
                },
                () = &mut shutdown => return Ok(()),
            };
            let ingress = self.clone();
            let service = service_fn(move |request: Request<Incoming>| {
                let ingress = ingress.clone();
                async move { Ok::<_, Infallible>(ingress.admin(&request)) }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    fn admin(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        let (status, content_type, body) = match request.uri().path() {
            "/metrics" => (
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                self.metrics().encode(),
            ),
            "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
            _ => (
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found\n".to_owned(),
            ),
        };
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(value) = header::HeaderValue::from_str(content_type) {
            response.headers_mut().insert(header::CONTENT_TYPE, value);
        }
        response
    }
}
