//! The bench's own HTTP client (hyper and tokio-rustls, trusting the bench's certificate): the
//! check that a target answers, and the load that `bench instructions` counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::{http1, http2};
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::target::{BODY, HOST, Listening};

/// How the client speaks to a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// HTTP/1.1 over plain TCP.
    Http1,
    /// HTTP/1.1 over TLS (ALPN http/1.1).
    Https1,
    /// HTTP/2 over TLS (ALPN h2).
    Http2,
}

impl Protocol {
    pub(crate) const ALL: [Self; 3] = [Self::Http1, Self::Https1, Self::Http2];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Http1 => "HTTP/1.1",
            Self::Https1 => "HTTPS/1.1",
            Self::Http2 => "HTTP/2 over TLS",
        }
    }

    /// The protocol in a file name.
    pub(crate) fn slug(self) -> &'static str {
        match self {
            Self::Http1 => "http1",
            Self::Https1 => "https1",
            Self::Http2 => "http2",
        }
    }
}

/// Opens connections to targets.
pub(crate) struct Client {
    /// TLS offering http/1.1 alone.
    http1: TlsConnector,
    /// TLS offering h2 alone.
    http2: TlsConnector,
}

impl Client {
    /// A client that trusts `certificate` (the bench's self-signed one) and nothing else.
    pub(crate) fn new(certificate: CertificateDer<'static>) -> anyhow::Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(certificate)
            .context("cannot trust the bench's certificate")?;
        let connector = |alpn: &[u8]| -> anyhow::Result<TlsConnector> {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots.clone())
                .with_no_client_auth();
            config.alpn_protocols = vec![alpn.to_vec()];
            // Every connection a full handshake: what a new client costs.
            config.resumption = rustls::client::Resumption::disabled();
            Ok(TlsConnector::from(Arc::new(config)))
        };
        Ok(Self {
            http1: connector(b"http/1.1")?,
            http2: connector(b"h2")?,
        })
    }

    /// One GET over each protocol `at` serves: plain HTTP/1.1, and HTTPS/1.1 and HTTP/2 where
    /// it has TLS. Each must be answered 200 with the upstream's body.
    pub(crate) async fn check(&self, at: Listening) -> anyhow::Result<()> {
        for protocol in Protocol::ALL {
            if protocol != Protocol::Http1 && at.tls.is_none() {
                continue;
            }
            let checked = async {
                let senders = self.connect(at, protocol, 1).await?;
                send(senders, 1).await
            };
            checked
                .await
                .with_context(|| format!("over {}", protocol.label()))?;
        }
        Ok(())
    }

    /// Opens one connection to `at`: for HTTP/2, `streams` senders sharing it (as many
    /// requests at once); for HTTP/1.1, one.
    pub(crate) async fn connect(
        &self,
        at: Listening,
        protocol: Protocol,
        streams: usize,
    ) -> anyhow::Result<Vec<Sender>> {
        let address = match protocol {
            Protocol::Http1 => at.plain,
            Protocol::Https1 | Protocol::Http2 => at.tls.context("the target has no TLS port")?,
        };
        let tcp = TcpStream::connect(address)
            .await
            .with_context(|| format!("cannot connect to {address}"))?;
        tcp.set_nodelay(true)?;
        match protocol {
            Protocol::Http1 => http1_sender(tcp).await,
            Protocol::Https1 => http1_sender(tls(&self.http1, tcp).await?).await,
            Protocol::Http2 => {
                let stream = tls(&self.http2, tcp).await?;
                let alpn = stream.get_ref().1.alpn_protocol();
                if alpn != Some(b"h2") {
                    bail!("ALPN chose {:?}, not h2", alpn.map(String::from_utf8_lossy));
                }
                http2_senders(stream, streams).await
            }
        }
    }
}

async fn tls(connector: &TlsConnector, tcp: TcpStream) -> anyhow::Result<TlsStream<TcpStream>> {
    let name = ServerName::try_from(HOST)?;
    connector
        .connect(name, tcp)
        .await
        .context("TLS handshake failed")
}

async fn http1_sender<T>(io: T) -> anyhow::Result<Vec<Sender>>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(io))
        .await
        .context("HTTP/1.1 handshake failed")?;
    tokio::spawn(connection);
    Ok(vec![Sender::Http1(sender)])
}

async fn http2_senders<T>(io: T, streams: usize) -> anyhow::Result<Vec<Sender>>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(io))
        .await
        .context("HTTP/2 handshake failed")?;
    tokio::spawn(connection);
    Ok((0..streams.max(1))
        .map(|_| Sender::Http2(sender.clone()))
        .collect())
}

/// Sends requests, one at a time, over a connection (HTTP/1.1) or a stream of one (HTTP/2).
pub(crate) enum Sender {
    Http1(http1::SendRequest<Empty<Bytes>>),
    Http2(http2::SendRequest<Empty<Bytes>>),
}

impl Sender {
    /// One GET, which must be answered 200 with the upstream's body.
    async fn get(&mut self) -> anyhow::Result<()> {
        let response = match self {
            Self::Http1(sender) => {
                sender.ready().await?;
                let request = Request::get("/")
                    .header(hyper::header::HOST, HOST)
                    .body(Empty::new())?;
                sender.send_request(request).await?
            }
            Self::Http2(sender) => {
                sender.ready().await?;
                // The authority (`:authority`) comes from the URI.
                let request = Request::get(format!("https://{HOST}/")).body(Empty::new())?;
                sender.send_request(request).await?
            }
        };
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        if status != StatusCode::OK || body != BODY {
            let shown = &body[..body.len().min(300)];
            bail!("answered {status}: {:?}", String::from_utf8_lossy(shown));
        }
        Ok(())
    }
}

/// Sends exactly `count` GETs over `senders`, each one request at a time (so as many at once
/// as there are senders), and gives the senders back for the next batch. Fails at the first
/// request that fails or is answered otherwise than 200 with the upstream's body.
pub(crate) async fn send(senders: Vec<Sender>, count: u64) -> anyhow::Result<Vec<Sender>> {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for mut sender in senders {
        let next = Arc::clone(&next);
        tasks.spawn(async move {
            let mut sent = 0_u64;
            while next.fetch_add(1, Ordering::Relaxed) < count {
                sender.get().await?;
                sent += 1;
            }
            anyhow::Ok((sender, sent))
        });
    }
    let (mut senders, mut sent) = (Vec::new(), 0);
    while let Some(joined) = tasks.join_next().await {
        let (sender, by_this) = joined.context("a client task failed")??;
        senders.push(sender);
        sent += by_this;
    }
    if sent != count {
        bail!("sent {sent} requests instead of {count}");
    }
    Ok(senders)
}
