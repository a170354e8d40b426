//! What the ingress's per-request metrics cost: recording one response (its status class
//! counter, the latency histogram and the bucket the canary analysis reads back), alone and
//! from several threads at once on one revision, beside a whole request's time through the
//! ingress (`benches/router.rs`, `examples/bench.rs`); and how many series one revision adds
//! to a scrape.
//!
//!   cargo bench -p runway-ingress --bench metrics

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark prints its figures"
)]

use std::hint::black_box;
use std::time::Instant;

use runway_ingress::Metrics;

const CALLS: u64 = 20_000_000;

fn main() {
    let metrics = Metrics::new();
    let revision = metrics.revision("web", "production", "web-production-00042");
    for _ in 0..1000 {
        revision.record(200, std::time::Duration::from_millis(3));
    }
    let started = Instant::now();
    for n in 0..CALLS {
        // Statuses and latencies that move over classes and buckets, as real ones do.
        let status = if n % 100 == 0 { 503 } else { 200 };
        let elapsed = std::time::Duration::from_micros(300 * (n % 64 + 1));
        black_box(&revision).record(black_box(status), black_box(elapsed));
    }
    let alone = started.elapsed().as_nanos() as f64 / CALLS as f64;

    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let revision = revision.clone();
            scope.spawn(move || {
                for n in 0..CALLS / threads as u64 {
                    let elapsed = std::time::Duration::from_micros(300 * (n % 64 + 1));
                    black_box(&revision).record(200, black_box(elapsed));
                }
            });
        }
    });
    let together = started.elapsed().as_nanos() as f64 / CALLS as f64 * threads as f64;

    let text = metrics.encode();
    let series = text
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("revision=\"web-production-00042\""))
        .count();
    println!("per-request metrics of the ingress ({CALLS} responses recorded):");
    println!("  one thread:             {alone:>6.1} ns a response");
    println!(
        "  {threads} threads, one revision: {together:>6.1} ns a response (each thread's time, contended)"
    );
    println!(
        "  at 35,000 requests/s (the ingress's full speed on 2 cores) that is {:.2} % of one core",
        alone * 35_000.0 / 1e9 * 100.0
    );
    println!(
        "series one revision adds to a scrape: {series} (5 status classes, a histogram of 20 \
         bounds with +Inf, sum and count, in-flight, queued, held, 2 upstream error counters, \
         3 client-fault counters)"
    );
}
