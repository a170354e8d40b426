//! One probe check: HTTP GET, TCP connect or gRPC health check against the instance where it
//! is reached (its own network's address, or loopback), bounded by the probe's timeout.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use crate::spec::{Check, Probe};

/// Runs one check. `Err` says why it failed, for people.
pub async fn check(probe: &Probe, address: SocketAddr) -> Result<(), String> {
    check_reaching(probe, address)
        .await
        .map_err(|failed| failed.message)
}

/// A failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// Why, for people.
    pub message: String,
    /// It connected: something listens there (and answered badly, or too late).
    pub reached: bool,
}

/// [`check`], saying whether a failed check reached the instance.
pub async fn check_reaching(probe: &Probe, address: SocketAddr) -> Result<(), Failed> {
    let what = describe(&probe.check, address.port());
    let deadline = tokio::time::Instant::now() + probe.timeout;
    let late = |reached| Failed {
        message: format!("{what}: no answer within {:?}", probe.timeout),
        reached,
    };
    let stream = match tokio::time::timeout_at(deadline, TcpStream::connect(address)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            return Err(Failed {
                message: format!("{what}: {e}"),
                reached: false,
            });
        }
        Err(_) => return Err(late(false)),
    };
    let answer = match &probe.check {
        Check::Tcp => return Ok(()),
        Check::Http { path } => {
            tokio::time::timeout_at(deadline, http_get(stream, address, path)).await
        }
        Check::Grpc { service } => {
            tokio::time::timeout_at(deadline, grpc_health(stream, service)).await
        }
    };
    match answer {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Failed {
            message: format!("{what}: {e}"),
            reached: true,
        }),
        Err(_) => Err(late(true)),
    }
}

/// The check in a few words: `HTTP GET :8080/healthz`.
pub fn describe(check: &Check, port: u16) -> String {
    match check {
        Check::Http { path } => format!("HTTP GET :{port}{path}"),
        Check::Tcp => format!("TCP :{port}"),
        Check::Grpc { service } => format!("gRPC health :{port} {service:?}"),
    }
}

async fn http_get(stream: TcpStream, address: SocketAddr, path: &str) -> Result<(), String> {
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    let connection = tokio::spawn(connection);
    let request = Request::get(path)
        .header(hyper::header::HOST, address.to_string())
        .header(hyper::header::USER_AGENT, "runway-probe")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let result = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string());
    connection.abort();
    let status = result?.status();
    if status.is_success() || status.is_redirection() {
        Ok(())
    } else {
        Err(format!("status {status}"))
    }
}

/// `grpc.health.v1.Health/Check`, written by hand: one request message with one string field,
/// one answer with one enum field, which does not warrant generated code.
async fn grpc_health(stream: TcpStream, service: &str) -> Result<(), String> {
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    let connection = tokio::spawn(connection);
    // HealthCheckRequest { string service = 1; }, in a gRPC length-prefixed frame.
    let mut message = Vec::with_capacity(service.len() + 2);
    if !service.is_empty() {
        message.push(0x0a);
        push_varint(&mut message, service.len() as u64);
        message.extend_from_slice(service.as_bytes());
    }
    let mut frame = vec![0u8];
    frame.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    frame.extend_from_slice(&message);
    let request = Request::post("http://127.0.0.1/grpc.health.v1.Health/Check")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from(frame)))
        .map_err(|e| e.to_string())?;
    let result = async {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        if response.status() != StatusCode::OK {
            return Err(format!("status {}", response.status()));
        }
        // A "trailers-only" answer (an error) carries grpc-status in its headers.
        let in_headers = response.headers().get("grpc-status").cloned();
        let collected = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        let grpc_status = in_headers
            .as_ref()
            .or_else(|| collected.trailers().and_then(|t| t.get("grpc-status")))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("0")
            .to_owned();
        if grpc_status != "0" {
            return Err(format!("grpc-status {grpc_status}"));
        }
        // HealthCheckResponse { ServingStatus status = 1; }: SERVING is 1.
        let body = collected.to_bytes();
        match body.get(5..) {
            Some([0x08, 1, ..]) => Ok(()),
            Some([0x08, status, ..]) => Err(format!("serving status {status}, not SERVING")),
            _ => Err("serving status UNKNOWN, not SERVING".to_owned()),
        }
    }
    .await;
    connection.abort();
    result
}

fn push_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Consecutive results of one probe, turned into pass/fail by its thresholds.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    successes: u32,
    failures: u32,
}

/// What a result changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The success threshold was just reached.
    Passed,
    /// The failure threshold was just reached; the last error.
    Failed(String),
    Unchanged,
}

impl Tally {
    pub fn record(&mut self, probe: &Probe, result: Result<(), String>) -> Verdict {
        match result {
            Ok(()) => {
                self.failures = 0;
                self.successes = self.successes.saturating_add(1);
                if self.successes == probe.success_threshold.max(1) {
                    Verdict::Passed
                } else {
                    Verdict::Unchanged
                }
            }
            Err(error) => {
                self.successes = 0;
                self.failures = self.failures.saturating_add(1);
                if self.failures == probe.failure_threshold.max(1) {
                    Verdict::Failed(error)
                } else {
                    Verdict::Unchanged
                }
            }
        }
    }
}

/// The probe's period, from one check's start to the next (as the kubelet counts it), so that
/// `failure_threshold` checks take `failure_threshold` periods however long each one waited
/// for its answer.
fn period(probe: &Probe) -> Duration {
    probe.period.max(Duration::from_millis(10))
}

/// Sleeps until a period after `started`, when the check begun then was.
pub async fn wait_period(probe: &Probe, started: tokio::time::Instant) {
    tokio::time::sleep_until(started + period(probe)).await;
}

/// How often a starting instance's port is tried while nothing listens on it.
const LISTEN_POLL: Duration = Duration::from_millis(20);

/// Waits out the startup probe's period from `started` (see [`wait_period`]), cut short the
/// moment the instance begins to listen when the check begun then did not reach it (`reached`
/// false: nothing listened, or no answer came): the next check then runs at once rather than
/// up to a period later. A cold start waits for this (Knative's queue-proxy probes a starting
/// container as eagerly). A check that reached the instance (which answered it badly) waits
/// the whole period, so such failures come one per period. Whether the check reached it is
/// the check's own word, not a second look: an instance that begins to listen between the two
/// would otherwise wait a whole period for nothing.
pub async fn wait_period_or_listening(
    probe: &Probe,
    address: SocketAddr,
    started: tokio::time::Instant,
    reached: bool,
) {
    let deadline = started + period(probe);
    if reached {
        tokio::time::sleep_until(deadline).await;
        return;
    }
    let listening = || async {
        matches!(
            tokio::time::timeout(LISTEN_POLL, TcpStream::connect(address)).await,
            Ok(Ok(_))
        )
    };
    if listening().await {
        return;
    }
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(LISTEN_POLL.min(deadline - tokio::time::Instant::now())).await;
        if listening().await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn at(port: u16) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, port))
    }

    fn probe(check: Check) -> Probe {
        Probe {
            check,
            initial_delay: Duration::ZERO,
            period: Duration::from_millis(10),
            timeout: Duration::from_millis(500),
            failure_threshold: 2,
            success_threshold: 2,
        }
    }

    async fn serve_once(answer: &'static str) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buffer = [0u8; 1024];
                let _ = socket.read(&mut buffer).await;
                let _ = socket.write_all(answer.as_bytes()).await;
            }
        });
        port
    }

    #[tokio::test]
    async fn the_wait_ends_when_the_port_listens_after_a_check_that_did_not_reach_it() {
        let mut slow = probe(Check::Tcp);
        slow.period = Duration::from_secs(5);
        // Nothing listens yet; it does 100 ms later: the wait ends then, not after 5 s.
        let spare = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = spare.local_addr().unwrap().port();
        drop(spare);
        let started = tokio::time::Instant::now();
        let opener = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
            drop(listener);
        });
        wait_period_or_listening(&slow, at(port), tokio::time::Instant::now(), false).await;
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        // Listening by the time the wait begins (it began between a refused check and now):
        // the next check at once, not a period later (a cold start once took a whole period).
        let started = tokio::time::Instant::now();
        wait_period_or_listening(&slow, at(port), tokio::time::Instant::now(), false).await;
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        // A check that reached it (and was answered badly): the whole period.
        slow.period = Duration::from_millis(300);
        let started = tokio::time::Instant::now();
        wait_period_or_listening(&slow, at(port), tokio::time::Instant::now(), true).await;
        assert!(started.elapsed() >= Duration::from_millis(300));
        opener.abort();
    }

    #[tokio::test]
    async fn http_passes_on_2xx_and_3xx_and_fails_otherwise() {
        let ok = serve_once("HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n").await;
        assert_eq!(
            check(&probe(Check::Http { path: "/up".into() }), at(ok)).await,
            Ok(())
        );
        let bad = serve_once("HTTP/1.1 503 Unavailable\r\ncontent-length: 0\r\n\r\n").await;
        let error = check(&probe(Check::Http { path: "/up".into() }), at(bad)).await;
        assert_eq!(
            error,
            Err(format!(
                "HTTP GET :{bad}/up: status 503 Service Unavailable"
            ))
        );
    }

    #[tokio::test]
    async fn tcp_fails_on_a_closed_port_and_a_silent_server_times_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let error = check(&probe(Check::Tcp), at(port)).await.unwrap_err();
        assert!(error.starts_with(&format!("TCP :{port}: ")), "{error}");

        // Accepts and never answers, holding the connection open.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let mut slow = probe(Check::Http { path: "/".into() });
        slow.timeout = Duration::from_millis(100);
        let error = check(&slow, at(silent)).await.unwrap_err();
        assert!(error.contains("no answer within 100ms"), "{error}");
    }

    #[tokio::test]
    async fn grpc_passes_when_serving_and_says_why_when_not() {
        use tonic_health::ServingStatus;
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("shop", ServingStatus::Serving)
            .await;
        reporter
            .set_service_status("cart", ServingStatus::NotServing)
            .await;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let grpc = |service: &str| {
            probe(Check::Grpc {
                service: service.into(),
            })
        };
        assert_eq!(check(&grpc("shop"), at(port)).await, Ok(()));
        assert_eq!(check(&grpc(""), at(port)).await, Ok(()));
        let error = check(&grpc("cart"), at(port)).await.unwrap_err();
        assert!(error.ends_with("serving status 2, not SERVING"), "{error}");
        // An unknown service is NOT_FOUND, in the grpc-status trailer.
        let error = check(&grpc("nope"), at(port)).await.unwrap_err();
        assert!(error.ends_with("grpc-status 5"), "{error}");
    }

    #[test]
    fn thresholds_count_consecutive_results() {
        let probe = probe(Check::Tcp);
        let mut tally = Tally::default();
        assert_eq!(tally.record(&probe, Ok(())), Verdict::Unchanged);
        assert_eq!(tally.record(&probe, Err("x".into())), Verdict::Unchanged);
        assert_eq!(tally.record(&probe, Ok(())), Verdict::Unchanged);
        assert_eq!(tally.record(&probe, Ok(())), Verdict::Passed);
        assert_eq!(tally.record(&probe, Ok(())), Verdict::Unchanged);
        assert_eq!(tally.record(&probe, Err("a".into())), Verdict::Unchanged);
        assert_eq!(
            tally.record(&probe, Err("b".into())),
            Verdict::Failed("b".into())
        );
    }
}
