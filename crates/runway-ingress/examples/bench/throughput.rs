//! The throughput mode: every load against every target, in interleaved rounds (the target
//! order rotated each round), with wrk and h2load; medians over rounds, ratios to nginx.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::memory::{self, Memory};
use crate::stats::{Spread, median};
use crate::target::{Bench, HOST, Launcher, Running, Shape, Target};

#[derive(Debug, clap::Args)]
pub(crate) struct Settings {
    /// Rounds; each runs every load against every target, the target order rotated by one.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Seconds each load runs against each target in a round.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Client connections (HTTP/2: this many streams, 10 per connection).
    #[arg(long, default_value_t = 50)]
    connections: u64,
    /// Threads of wrk and h2load, and of each proxy (the ingress's --threads, nginx's
    /// workers, HAProxy's nbthread, the spike's --threads).
    #[arg(long, default_value_t = 2)]
    threads: u64,
}

/// A load, run against each target in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    /// HTTP/1.1 over plain TCP, as fast as it goes (wrk).
    FullSpeed,
    /// HTTP/1.1 over plain TCP at a fixed 1,000 req/s (h2load).
    Paced,
    /// HTTP/1.1 over TLS, as fast as it goes (h2load).
    Https1,
    /// HTTP/2 over TLS, 10 streams at once per connection (h2load).
    Https2,
}

const LOADS: [Load; 4] = [Load::FullSpeed, Load::Paced, Load::Https1, Load::Https2];

/// h2load's paced load: 10 clients of 100 req/s each.
const PACED_CLIENTS: u64 = 10;
const PACED_PER_CLIENT: u64 = 100;
/// h2load's HTTP/2 load: streams at once on each connection.
const HTTP2_STREAMS: u64 = 10;

impl Load {
    fn title(self) -> &'static str {
        match self {
            Self::FullSpeed => "HTTP/1.1, full speed (wrk)",
            Self::Paced => "HTTP/1.1 at 1,000 req/s (h2load)",
            Self::Https1 => "HTTPS, HTTP/1.1 (h2load)",
            Self::Https2 => "HTTPS, HTTP/2, 10 streams per connection (h2load)",
        }
    }
}

/// One load's figures on one target.
#[derive(Debug, Default)]
struct Sample {
    requests_per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// What the load generator reported as failed, if anything.
    errors: String,
}

/// A sample, where and when it was taken.
#[derive(Debug)]
struct Measurement {
    round: usize,
    load: Load,
    target: &'static str,
    sample: Sample,
    memory: Option<Memory>,
    /// After the HTTP/2 load: the memory [`AT_REST`] after it ended, what the proxy keeps.
    at_rest: Option<Memory>,
}

/// How long after the HTTP/2 load its memory at rest is read: its connections closed, idle
/// timers run, what a proxy gives back given back.
const AT_REST: Duration = Duration::from_secs(3);

pub(crate) fn run(settings: &Settings) -> anyhow::Result<()> {
    if settings.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let bench = Bench::start()?;
    let targets = bench.targets(true)?;
    crate::target::require(
        ["wrk", "h2load"]
            .into_iter()
            .chain(targets.iter().filter_map(Target::program)),
    )?;
    let running = targets
        .iter()
        .map(|target| bench.launch(target, Shape::Threads(settings.threads), Launcher::Native))
        .collect::<anyhow::Result<Vec<Running>>>()?;
    let mut measurements = Vec::new();
    for round in 0..settings.rounds {
        for load in LOADS {
            for target in rotated(&running, round) {
                let log = bench.dir().join(format!("{}.log", target.name));
                measurements.extend(measure(round, load, target, settings, &log)?);
            }
        }
    }
    let names: Vec<&'static str> = running.iter().map(|target| target.name).collect();
    drop(running);
    report(settings, &names, &measurements);
    Ok(())
}

/// `items`, starting at the `by`-th (cyclically).
fn rotated<T>(items: &[T], by: usize) -> impl Iterator<Item = &T> {
    items
        .iter()
        .cycle()
        .skip(by % items.len().max(1))
        .take(items.len())
}

/// Runs `load` against `target` while sampling its memory; None when the load needs TLS and
/// the target has none. `log` is for h2load's per-request log.
fn measure(
    round: usize,
    load: Load,
    target: &Running,
    settings: &Settings,
    log: &Path,
) -> anyhow::Result<Option<Measurement>> {
    eprintln!(
        "bench: round {}/{}: {}: {}",
        round + 1,
        settings.rounds,
        target.name,
        load.title()
    );
    let (sample, memory) =
        memory::peak_during(target.pid(), || run_load(load, target, settings, log));
    let sample = sample.with_context(|| format!("{}: {}", target.name, load.title()))?;
    let at_rest = match (load, &sample) {
        (Load::Https2, Some(_)) => {
            std::thread::sleep(AT_REST);
            target.pid().and_then(memory::sample)
        }
        _ => None,
    };
    Ok(sample.map(|sample| Measurement {
        round,
        load,
        target: target.name,
        sample,
        memory,
        at_rest,
    }))
}

/// Runs `load` against `target`; None when the load needs TLS and the target has none.
fn run_load(
    load: Load,
    target: &Running,
    settings: &Settings,
    log: &Path,
) -> anyhow::Result<Option<Sample>> {
    let address = match load {
        Load::FullSpeed | Load::Paced => target.at.plain,
        Load::Https1 | Load::Https2 => match target.at.tls {
            Some(tls) => tls,
            None => return Ok(None),
        },
    };
    let (connections, threads) = (settings.connections, settings.threads);
    let sample = match load {
        Load::FullSpeed => wrk(address, settings)?,
        Load::Paced => {
            let paced = [
                "--h1".to_owned(),
                format!("--clients={PACED_CLIENTS}"),
                format!("--rps={PACED_PER_CLIENT}"),
            ];
            h2load(address, "http", &paced, settings.seconds, log)?
        }
        Load::Https1 => {
            let https1 = [
                "--h1".to_owned(),
                format!("--clients={connections}"),
                format!("--threads={threads}"),
            ];
            h2load(address, "https", &https1, settings.seconds, log)?
        }
        Load::Https2 => {
            let https2 = [
                format!(
                    "--clients={}",
                    connections.div_ceil(HTTP2_STREAMS).max(threads)
                ),
                format!("--max-concurrent-streams={HTTP2_STREAMS}"),
                format!("--threads={threads}"),
            ];
            h2load(address, "https", &https2, settings.seconds, log)?
        }
    };
    Ok(Some(sample))
}

fn wrk(address: SocketAddr, settings: &Settings) -> anyhow::Result<Sample> {
    let output = Command::new("wrk")
        .args([
            &format!("-t{}", settings.threads),
            &format!("-c{}", settings.connections),
            &format!("-d{}s", settings.seconds),
            "--latency",
            "-H",
            &format!("Host: {HOST}"),
            &format!("http://{address}/"),
        ])
        .output()
        .context("cannot run wrk (is it on the PATH?)")?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut sample = Sample::default();
    for line in text.lines().map(str::trim) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["Requests/sec:", value] => sample.requests_per_second = value.parse()?,
            ["50%", value] => sample.p50_ms = millis(value)?,
            ["99%", value] => sample.p99_ms = millis(value)?,
            _ if line.starts_with("Non-2xx") || line.starts_with("Socket errors") => {
                sample.errors = line.to_owned();
            }
            _ => {}
        }
    }
    if sample.requests_per_second == 0.0 {
        bail!(
            "wrk printed no rate:\n{text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(sample)
}

/// wrk's `1.23ms`, `456.00us`, `1.2s` to milliseconds.
fn millis(value: &str) -> anyhow::Result<f64> {
    let (number, factor) = if let Some(v) = value.strip_suffix("us") {
        (v, 0.001)
    } else if let Some(v) = value.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = value.strip_suffix('s') {
        (v, 1000.0)
    } else {
        bail!("unknown latency {value}");
    };
    Ok(number.parse::<f64>()? * factor)
}

/// Runs h2load with `load` (its arguments for the load's shape) against `address`, `Host` and
/// SNI [`HOST`]; latencies from its per-request log at `log`, removed after.
fn h2load(
    address: SocketAddr,
    scheme: &str,
    load: &[String],
    seconds: u64,
    log: &Path,
) -> anyhow::Result<Sample> {
    let output = Command::new("h2load")
        .arg(format!("--connect-to={address}"))
        .arg(format!("--duration={seconds}"))
        .arg("--warm-up-time=1")
        .arg(format!("--log-file={}", log.display()))
        .args(load)
        .arg(format!("{scheme}://{HOST}/"))
        .output()
        .context("cannot run h2load (is it on the PATH?)")?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut sample = parse_h2load(&text)?;
    if sample.requests_per_second == 0.0 {
        bail!(
            "h2load printed no rate:\n{text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let log_text = std::fs::read_to_string(log).context("cannot read h2load's log")?;
    let _ = std::fs::remove_file(log);
    // Each line: start time (µs since the epoch), status, time to the response's end (µs).
    let mut micros: Vec<u64> = log_text
        .lines()
        .filter_map(|line| line.split('\t').nth(2)?.trim().parse().ok())
        .collect();
    micros.sort_unstable();
    let percentile = |p: f64| {
        let index = ((micros.len() as f64 * p).ceil() as usize).saturating_sub(1);
        micros.get(index).map_or(0.0, |&us| us as f64 / 1000.0)
    };
    sample.p50_ms = percentile(0.50);
    sample.p99_ms = percentile(0.99);
    Ok(sample)
}

/// The rate and the failures from h2load's summary.
fn parse_h2load(text: &str) -> anyhow::Result<Sample> {
    let mut sample = Sample::default();
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("finished in ") {
            // `finished in 10.00s, 45234.50 req/s, 5.02MB/s`
            if let Some(rate) = rest
                .split(", ")
                .nth(1)
                .and_then(|r| r.strip_suffix(" req/s"))
            {
                sample.requests_per_second = rate.parse()?;
            }
        } else if let Some(rest) = line.strip_prefix("requests: ") {
            // `requests: N total, N started, N done, N succeeded, F failed, E errored, T timeout`
            let failed: u64 = rest
                .split(", ")
                .filter(|f| {
                    f.ends_with(" failed") || f.ends_with(" errored") || f.ends_with(" timeout")
                })
                .filter_map(|f| f.split(' ').next()?.parse::<u64>().ok())
                .sum();
            if failed > 0 {
                sample.errors = format!("{failed} failed");
            }
        } else if let Some(rest) = line.strip_prefix("status codes: ") {
            // `status codes: N 2xx, N 3xx, N 4xx, N 5xx`
            let not_2xx: u64 = rest
                .split(", ")
                .filter(|f| !f.ends_with(" 2xx"))
                .filter_map(|f| f.split(' ').next()?.parse::<u64>().ok())
                .sum();
            if not_2xx > 0 {
                sample.errors = format!("{} {not_2xx} not 2xx", sample.errors)
                    .trim()
                    .to_owned();
            }
        }
    }
    Ok(sample)
}

/// The proxies compared with nginx, when present.
const COMPARED: [&str; 3] = ["runway-ingress", "haproxy", "pingora-spike"];

fn report(settings: &Settings, targets: &[&'static str], measurements: &[Measurement]) {
    let Settings {
        rounds,
        seconds,
        connections,
        threads,
    } = *settings;
    println!(
        "same upstream; {} CPUs; rounds: {rounds}, each every load against every target (the \
         order rotated each round), {seconds} s each\n\
         {connections} connections, {threads} client threads, {threads} threads or workers \
         per proxy\n\
         req/s, p50, p99: the median over rounds\n\
         PSS MiB: memory as the peak PSS (proportional set size: shared pages split among the \
         processes mapping them) of the proxy and its children together, sampled every 200 ms \
         during the load\n\
         RSS MiB: the largest single process's peak RSS, for reference; the upstream's memory \
         is not counted (direct shows none)",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    for load in LOADS {
        println!("\n{}", load.title());
        println!(
            "  {:<16} {:>10} {:>9} {:>9} {:>8} {:>8}  errors",
            "", "req/s", "p50 ms", "p99 ms", "PSS MiB", "RSS MiB"
        );
        for &target in targets {
            print_row(load, target, measurements);
        }
        for ours in COMPARED {
            print_ratio(load, ours, measurements);
        }
        if load == Load::Paced {
            print_added(load, "runway-ingress", measurements);
        }
        if load == Load::Https2 {
            print_at_rest(targets, measurements);
        }
    }
}

/// Each target's PSS [`AT_REST`] after the HTTP/2 load (min / median / max over rounds), and
/// its ratio to nginx's.
fn print_at_rest(targets: &[&'static str], measurements: &[Measurement]) {
    let at_rest = |target: &str| {
        Spread::of(
            measurements
                .iter()
                .filter(|m| m.target == target)
                .filter_map(|m| m.at_rest)
                .map(|m| m.pss_kib as f64 / 1024.0),
        )
    };
    println!(
        "  memory at rest, {} s after the load (PSS MiB, min / median / max over rounds):",
        AT_REST.as_secs()
    );
    let nginx = at_rest("nginx");
    for &target in targets {
        if let Some(spread) = at_rest(target) {
            let ratio = nginx
                .filter(|_| target != "nginx")
                .map(|n| format!(" ({:.2}× nginx)", spread.median / n.median))
                .unwrap_or_default();
            println!(
                "    {target:<16} {:.1} / {:.1} / {:.1}{ratio}",
                spread.min, spread.median, spread.max
            );
        }
    }
}

/// A target's medians under `load`, its peak memory, and the rounds that saw errors.
fn print_row(load: Load, target: &str, measurements: &[Measurement]) {
    let rows: Vec<&Measurement> = measurements
        .iter()
        .filter(|m| m.load == load && m.target == target)
        .collect();
    if rows.is_empty() {
        return;
    }
    let rate = median(rows.iter().map(|m| m.sample.requests_per_second));
    let p50 = median(rows.iter().map(|m| m.sample.p50_ms));
    let p99 = median(rows.iter().map(|m| m.sample.p99_ms));
    let peak = rows.iter().filter_map(|m| m.memory).reduce(|a, b| Memory {
        pss_kib: a.pss_kib.max(b.pss_kib),
        largest_rss_kib: a.largest_rss_kib.max(b.largest_rss_kib),
    });
    let mib = |kib: u64| format!("{:.1}", kib as f64 / 1024.0);
    let (pss, rss) = peak.map_or(("-".to_owned(), "-".to_owned()), |m| {
        (mib(m.pss_kib), mib(m.largest_rss_kib))
    });
    let errors: Vec<String> = rows
        .iter()
        .filter(|m| !m.sample.errors.is_empty())
        .map(|m| format!("round {}: {}", m.round + 1, m.sample.errors))
        .collect();
    let row = format!(
        "  {target:<16} {rate:>10.0} {p50:>9.3} {p99:>9.3} {pss:>8} {rss:>8}  {}",
        errors.join("; ")
    );
    println!("{}", row.trim_end());
}

/// Pairs `ours` and `theirs` round by round under `load`.
fn paired<'a>(
    load: Load,
    ours: &str,
    theirs: &str,
    measurements: &'a [Measurement],
) -> Vec<(&'a Sample, &'a Sample)> {
    let find = |target: &str, round: usize| {
        measurements
            .iter()
            .find(|m| m.load == load && m.target == target && m.round == round)
            .map(|m| &m.sample)
    };
    measurements
        .iter()
        .filter(|m| m.load == load && m.target == ours)
        .filter_map(|m| Some((&m.sample, find(theirs, m.round)?)))
        .collect()
}

/// `ours` / nginx: the per-round throughput ratio's spread and the p99 ratio's median.
fn print_ratio(load: Load, ours: &str, measurements: &[Measurement]) {
    let pairs = paired(load, ours, "nginx", measurements);
    let throughput = Spread::of(
        pairs
            .iter()
            .map(|(a, b)| a.requests_per_second / b.requests_per_second),
    );
    let Some(throughput) = throughput else {
        return;
    };
    let p99 = median(pairs.iter().map(|(a, b)| a.p99_ms / b.p99_ms));
    println!(
        "  {ours} / nginx: throughput {:.2} / {:.2} / {:.2}× (min / median / max over rounds), \
         p99 {p99:.2}× (median)",
        throughput.min, throughput.median, throughput.max
    );
}

/// What `ours` adds to the direct connection's latency: the per-round differences' median.
fn print_added(load: Load, ours: &str, measurements: &[Measurement]) {
    let pairs = paired(load, ours, "direct", measurements);
    if pairs.is_empty() {
        return;
    }
    let p50 = median(pairs.iter().map(|(a, b)| a.p50_ms - b.p50_ms));
    let p99 = median(pairs.iter().map(|(a, b)| a.p99_ms - b.p99_ms));
    println!("  added by {ours} (median over rounds): p50 {p50:+.3} ms, p99 {p99:+.3} ms");
}
