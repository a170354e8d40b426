//! The ingress beside nginx and HAProxy (and, when asked, a Pingora spike), each a reverse
//! proxy with keep-alive to the same upstream (a minimal hyper server, `hello world`), measured
//! two ways. Each does the ingress's per-request work, so that like is compared with like:
//! `Host` passed on, `X-Forwarded-For`, `-Proto` and `-Host` added, and an `X-Request-Id`
//! (128 random bits) made and sent to the upstream and back to the client. With
//! `BENCH_PEERS=minimal`, nginx and HAProxy only pass `Host` on and add `X-Forwarded-For`.
//!
//! **Throughput** (the default mode): req/s, p50/p99 latency and peak memory under
//!
//! - plain HTTP/1.1 at full speed (wrk);
//! - plain HTTP/1.1 at a fixed 1,000 req/s (h2load `--rps`), the latency a proxy adds when it
//!   is not saturated, beside `direct` (the upstream without a proxy);
//! - HTTPS with HTTP/1.1, and HTTP/2 over TLS with 10 streams per connection (h2load), the
//!   same certificate in every proxy.
//!
//! It runs `--rounds` rounds; each runs every load against every target, the target order
//! rotated by one each round, so that whatever else the machine does hits all targets alike.
//! It prints, per load and target, the median over rounds, and each proxy's per-round ratio to
//! nginx. Memory is PSS (proportional set size: a page shared by N processes counts 1/N in
//! each), summed over the proxy's process and its descendants (nginx's master and workers),
//! sampled every 200 ms during each load; the peak is printed, with the largest single
//! process's peak RSS for reference.
//!
//! **Instructions per request** (`bench instructions`): each proxy as one process with one
//! event loop (`runway-ingress --threads 1 --event-loops 1`, nginx with `master_process off`
//! and one worker, HAProxy with `nbthread 1`, the spike with `--threads 1`) runs under
//! valgrind's callgrind; the bench's own client opens its connections, sends the warm-up
//! requests, has callgrind's counters zeroed, sends exactly `--requests` requests over the same
//! connections, has the counters dumped, and divides the instructions (Ir) by the requests. For
//! plain HTTP/1.1, HTTPS/1.1 and HTTP/2 over TLS (4 streams at once per connection: enough for
//! the proxy to see concurrent streams, few enough that each connection stays busy). Only
//! user-space instructions are counted: the kernel's share (syscalls, TCP over loopback) is
//! not. Why callgrind: on a noisy 2-core machine (other builds, CI) the same target's req/s
//! moves by tens of percent from one run to the next, while its instructions per request
//! repeat to about 1%, so a change to a proxy's request path shows in them.
//!
//! ```text
//! cargo build --profile ingress -p runway-ingress --bin runway-ingress --example bench
//! target/ingress/examples/bench [--rounds 5] [--seconds 10] [--connections 50] [--threads 2]
//! target/ingress/examples/bench instructions [--requests 5000] [--warmup 500] [--connections 4] [--rounds 1]
//! target/ingress/examples/bench instructions --only runway-ingress --keep-dumps /tmp/dumps
//! callgrind_annotate --inclusive=yes /tmp/dumps/runway-ingress-http1-1.callgrind | head -60
//! ```
//!
//! `--threads` is both the load generators' threads and each proxy's: the ingress's
//! `--threads` (its event loops stay one per CPU unless `BENCH_EVENT_LOOPS` says otherwise),
//! nginx's worker processes, HAProxy's `nbthread`, the spike's `--threads`. `instructions`
//! runs the targets one after another, all three protocols in one process each, the whole
//! `--rounds` times (min / median / max per cell when more than one).
//!
//! Needs on the PATH: `nginx`, `haproxy`, and for throughput `wrk` and `h2load` (Debian's
//! nghttp2-client), for instructions `valgrind` and `callgrind_control` (which reaches the
//! process through `vgdb`, over ptrace). `runway-ingress` is taken from beside this example's
//! directory (`target/release/`). With `BENCH_PINGORA=/path/to/binary`, target
//! `pingora-spike` joins both modes, started as `BIN --listen ADDR --https ADDR --cert
//! CERT.pem --key KEY.pem --upstream ADDR --threads N` (plain HTTP/1.1 on `--listen`, TLS with
//! ALPN h2 and http/1.1 on `--https`, for Host `hello.bench.localhost`). Every target must
//! answer one GET over each protocol with the upstream's 200 before it is measured.
//! `bench upstream ADDR` is the upstream (the bench runs it itself). What the ingress's own
//! controls and traces cost: `BENCH_CONTROLS=1` gives its route both rate limits (far above
//! the load) and address lists, `BENCH_OTLP=URL` traces every request to that OTLP collector (`BENCH_OTLP_RATIO`: the share
//! of traces kept).

// Tests and benches keep time on tokio's runtimes, never on an event loop's.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::print_stdout)]

mod client;
mod instructions;
mod memory;
mod stats;
mod target;
mod throughput;

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use clap::{Parser, Subcommand};
use http_body_util::Full;
use hyper::Response;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// Runway's ingress beside nginx and HAProxy: throughput, latency and memory (the default),
/// or instructions per request under callgrind.
#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    #[command(flatten)]
    throughput: throughput::Settings,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Instructions per request of each proxy, one event loop each, under callgrind.
    Instructions(instructions::Settings),
    /// The upstream every target proxies to (the bench starts it itself).
    Upstream { address: SocketAddr },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.mode {
        None => throughput::run(&cli.throughput),
        Some(Mode::Instructions(settings)) => instructions::run(&settings),
        Some(Mode::Upstream { address }) => upstream(address),
    }
}

/// The upstream: [`target::BODY`] to every request, HTTP/1.1 keep-alive.
fn upstream(address: SocketAddr) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(address).await?;
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = service_fn(|_request| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(target::BODY))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}
