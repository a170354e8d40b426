//! The instructions mode: each proxy as one process with one event loop under callgrind,
//! driven by the bench's own client; instructions per request = the Ir counted between a
//! zero and a dump, divided by the requests sent between them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::client::{self, Client, Protocol};
use crate::stats::{Spread, thousands};
use crate::target::{Bench, Launcher, Running, Shape, Target};

#[derive(Debug, clap::Args)]
pub(crate) struct Settings {
    /// Requests counted, per protocol and target.
    #[arg(long, default_value_t = 5000)]
    requests: u64,
    /// Requests sent first over the same connections, not counted (caches, pools, TLS
    /// sessions warm; connection set-up is behind them).
    #[arg(long, default_value_t = 500)]
    warmup: u64,
    /// Client connections, opened before the warm-up (HTTP/2: 4 streams at once on each).
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Times the whole measurement runs (min / median / max per cell when more than one).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Measure only these targets (runway-ingress, nginx, haproxy, pingora-spike), comma
    /// separated; all by default.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// New connections counted for the cost of a connection (each opened, one request sent
    /// over it, closed), per protocol and target.
    #[arg(long, default_value_t = 500)]
    new_connections: u64,
    /// Keep each counted dump in this directory, as `TARGET-PROTOCOL-ROUND.callgrind`, for
    /// callgrind_annotate or KCachegrind: where the instructions go.
    #[arg(long, value_name = "DIR")]
    keep_dumps: Option<PathBuf>,
}

/// HTTP/2 requests at once on each connection: the proxy sees concurrent streams, and each
/// connection stays busy.
const HTTP2_STREAMS: usize = 4;

/// Instructions per request of one target over one protocol in one round: on kept-alive
/// connections, or (`fresh`) on a new connection each, its set-up and closing included.
#[derive(Debug)]
struct Count {
    target: &'static str,
    protocol: Protocol,
    fresh: bool,
    per_request: f64,
}

pub(crate) fn run(settings: &Settings) -> anyhow::Result<()> {
    if settings.requests == 0 || settings.connections == 0 || settings.rounds == 0 {
        bail!("--requests, --connections and --rounds must be at least 1");
    }
    let bench = Bench::start()?;
    let mut targets = bench.targets(false)?;
    if !settings.only.is_empty() {
        if let Some(unknown) = settings
            .only
            .iter()
            .find(|name| !targets.iter().any(|target| target.name == name.as_str()))
        {
            let known: Vec<&str> = targets.iter().map(|target| target.name).collect();
            bail!(
                "--only: no target {unknown:?} (the targets: {})",
                known.join(", ")
            );
        }
        targets.retain(|target| settings.only.iter().any(|name| name == target.name));
    }
    if let Some(dir) = &settings.keep_dumps {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--keep-dumps: cannot create {}", dir.display()))?;
    }
    let mut counts = Vec::new();
    for round in 0..settings.rounds {
        for target in &targets {
            let out = bench
                .dir()
                .join(format!("callgrind-{}-{}", target.name, round + 1));
            std::fs::create_dir_all(&out)
                .with_context(|| format!("cannot create {}", out.display()))?;
            eprintln!(
                "bench: round {}/{}: starting {} under callgrind",
                round + 1,
                settings.rounds,
                target.name
            );
            let running = bench.launch(target, Shape::Single, Launcher::Callgrind(&out))?;
            let callgrind = Callgrind::new(&running, out)?;
            for protocol in Protocol::ALL {
                eprintln!("bench: {}: {}", target.name, protocol.label());
                let measured = count(&bench.client, &running, &callgrind, protocol, settings);
                let (instructions, dump) = bench
                    .runtime
                    .block_on(measured)
                    .with_context(|| format!("{} over {}", target.name, protocol.label()))?;
                keep(settings, &dump, target.name, protocol.slug(), round)?;
                counts.push(Count {
                    target: target.name,
                    protocol,
                    fresh: false,
                    per_request: instructions as f64 / settings.requests as f64,
                });
            }
            // A new connection's cost: plain, and with a TLS handshake (HTTP/1.1 over each).
            for protocol in [Protocol::Http1, Protocol::Https1] {
                eprintln!(
                    "bench: {}: new {} connections",
                    target.name,
                    protocol.label()
                );
                let measured = count_new(&bench.client, &running, &callgrind, protocol, settings);
                let (instructions, dump) = bench
                    .runtime
                    .block_on(measured)
                    .with_context(|| format!("{} over new connections", target.name))?;
                let what = format!("new-{}", protocol.slug());
                keep(settings, &dump, target.name, &what, round)?;
                counts.push(Count {
                    target: target.name,
                    protocol,
                    fresh: true,
                    per_request: instructions as f64 / settings.new_connections as f64,
                });
            }
        }
    }
    report(settings, &targets, &counts);
    Ok(())
}

/// Copies a counted dump into `--keep-dumps`, as `TARGET-WHAT-ROUND.callgrind`.
fn keep(
    settings: &Settings,
    dump: &Path,
    target: &str,
    what: &str,
    round: usize,
) -> anyhow::Result<()> {
    let Some(dir) = &settings.keep_dumps else {
        return Ok(());
    };
    let kept = dir.join(format!("{target}-{what}-{}.callgrind", round + 1));
    std::fs::copy(dump, &kept)
        .with_context(|| format!("cannot copy {} to {}", dump.display(), kept.display()))?;
    Ok(())
}

/// The instructions `running` spends on exactly `settings.requests` requests over `protocol`,
/// on connections opened and warmed before the counters are zeroed, and the dump they were
/// read from.
async fn count(
    client: &Client,
    running: &Running,
    callgrind: &Callgrind,
    protocol: Protocol,
    settings: &Settings,
) -> anyhow::Result<(u64, PathBuf)> {
    let mut senders = Vec::new();
    for _ in 0..settings.connections {
        senders.extend(client.connect(running.at, protocol, HTTP2_STREAMS).await?);
    }
    let senders = client::send(senders, settings.warmup)
        .await
        .context("during the warm-up")?;
    callgrind.control("zero").await?;
    let senders = client::send(senders, settings.requests).await?;
    let counted = callgrind.dump().await?;
    drop(senders);
    Ok(counted)
}

/// The instructions `running` spends on `settings.new_connections` connections over
/// `protocol`, one after the other, each opened, sent one request and closed (after a warm-up
/// of as many, so that what a first connection sets up once is not counted).
async fn count_new(
    client: &Client,
    running: &Running,
    callgrind: &Callgrind,
    protocol: Protocol,
    settings: &Settings,
) -> anyhow::Result<(u64, PathBuf)> {
    let one = || async {
        let senders = client.connect(running.at, protocol, 1).await?;
        drop(client::send(senders, 1).await?);
        // The proxy sees the close before the next connection comes.
        tokio::time::sleep(Duration::from_millis(1)).await;
        anyhow::Ok(())
    };
    for _ in 0..settings.new_connections.min(100) {
        one().await.context("during the warm-up")?;
    }
    callgrind.control("zero").await?;
    for _ in 0..settings.new_connections {
        one().await?;
    }
    callgrind.dump().await
}

/// A process under callgrind, reached with `callgrind_control` (through vgdb).
#[derive(Debug)]
struct Callgrind {
    pid: u32,
    /// Where its dumps go: `cg.PID` at exit, `cg.PID.PART` for each dump asked for.
    dir: PathBuf,
}

impl Callgrind {
    fn new(running: &Running, dir: PathBuf) -> anyhow::Result<Self> {
        let pid = running
            .pid()
            .with_context(|| format!("{} has no process", running.name))?;
        Ok(Self { pid, dir })
    }

    /// `callgrind_control --ACTION PID`, which prints `OK.` when the process did it (and
    /// exits 0 either way).
    async fn control(&self, action: &str) -> anyhow::Result<()> {
        let output = tokio::process::Command::new("callgrind_control")
            .arg(format!("--{action}"))
            .arg(self.pid.to_string())
            .output()
            .await
            .context("cannot run callgrind_control (is valgrind installed?)")?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() || !stdout.contains("OK.") {
            bail!(
                "callgrind_control --{action} {} could not reach the process through vgdb \
                 (valgrind --vgdb=yes, ptrace allowed?):\n{stdout}{}",
                self.pid,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }

    /// Has the counters dumped and reads the instructions (Ir) in that dump (the cost since
    /// the last zero); the dump's file with them.
    async fn dump(&self) -> anyhow::Result<(u64, PathBuf)> {
        let before = self.parts()?;
        self.control("dump").await?;
        let start = Instant::now();
        loop {
            let new: Vec<PathBuf> = self.parts()?.difference(&before).cloned().collect();
            if let [file] = new.as_slice()
                && let Some(instructions) = instructions_in(file)?
            {
                return Ok((instructions, file.clone()));
            }
            if new.len() > 1 {
                bail!("more than one new callgrind dump: {new:?}");
            }
            if start.elapsed() > Duration::from_secs(30) {
                bail!(
                    "no complete callgrind dump in {} after 30 s",
                    self.dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The dumps asked for so far (`cg.PID.PART`), not the one written at exit (`cg.PID`).
    fn parts(&self) -> anyhow::Result<BTreeSet<PathBuf>> {
        let prefix = format!("cg.{}.", self.pid);
        let entries = std::fs::read_dir(&self.dir)
            .with_context(|| format!("cannot read {}", self.dir.display()))?;
        Ok(entries
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))
            .map(|entry| entry.path())
            .collect())
    }
}

/// The Ir total of a callgrind dump (its `totals:` line, else `summary:`, at the position of
/// `Ir` in `events:`); None while the file is not complete.
fn instructions_in(file: &Path) -> anyhow::Result<Option<u64>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::split_whitespace)
    };
    let Some(index) = field("events:").and_then(|mut events| events.position(|e| e == "Ir")) else {
        return Ok(None);
    };
    let Some(mut totals) = field("totals:").or_else(|| field("summary:")) else {
        return Ok(None);
    };
    let instructions = totals
        .nth(index)
        .with_context(|| format!("{}: no Ir in its totals", file.display()))?;
    Ok(Some(instructions.parse().with_context(|| {
        format!("{}: Ir total {instructions:?}", file.display())
    })?))
}

fn report(settings: &Settings, targets: &[Target], counts: &[Count]) {
    let Settings {
        requests,
        warmup,
        connections,
        rounds,
        ..
    } = *settings;
    let shapes: Vec<String> = targets
        .iter()
        .map(|target| format!("{} {}", target.name, target.single()))
        .collect();
    println!(
        "instructions per request under callgrind (valgrind): user-space instructions only; the \
         kernel's work (syscalls, TCP over loopback) is not counted\n\
         each proxy one process with one event loop, all its threads counted: {}\n\
         {requests} requests counted after {warmup} warm-up requests, over {connections} \
         connections opened before (HTTP/1.1: one request at a time on each; HTTP/2: \
         {HTTP2_STREAMS} streams at once on each)\n\
         the load client is another process, not counted; rounds: {rounds}{}",
        shapes.join("; "),
        if rounds > 1 {
            " (each cell: min / median / max)"
        } else {
            ""
        }
    );
    let spread = |target: &str, protocol: Protocol| {
        Spread::of(
            counts
                .iter()
                .filter(|c| c.target == target && c.protocol == protocol && !c.fresh)
                .map(|c| c.per_request),
        )
    };
    let cell = |target: &str, protocol: Protocol| {
        spread(target, protocol).map_or("-".to_owned(), |s| {
            if rounds > 1 {
                let (min, median, max) = (thousands(s.min), thousands(s.median), thousands(s.max));
                format!("{min} / {median} / {max}")
            } else {
                thousands(s.median)
            }
        })
    };
    let ratio = |target: &str, protocol: Protocol| {
        spread(target, protocol)
            .zip(spread("nginx", protocol))
            .map_or("-".to_owned(), |(ours, nginx)| {
                format!("{:.2}×", ours.median / nginx.median)
            })
    };
    let names: Vec<&str> = targets.iter().map(|target| target.name).collect();
    let counted: Vec<(&str, Vec<String>)> = names
        .iter()
        .map(|&name| (name, Protocol::ALL.map(|p| cell(name, p)).to_vec()))
        .collect();
    // Ratios only when nginx was measured (not with `--only` leaving it out).
    let nginx_measured = names.contains(&"nginx");
    let ratios: Vec<(&str, Vec<String>)> = names
        .iter()
        .filter(|&&name| nginx_measured && name != "nginx")
        .map(|&name| (name, Protocol::ALL.map(|p| ratio(name, p)).to_vec()))
        .collect();
    let header = Protocol::ALL.map(|p| p.label().to_owned()).to_vec();
    println!();
    print_table(
        &[("", header)]
            .into_iter()
            .chain(counted)
            .chain(
                (!ratios.is_empty())
                    .then(|| [("", Vec::new()), ("ratio to nginx (medians)", Vec::new())])
                    .into_iter()
                    .flatten(),
            )
            .chain(ratios)
            .collect::<Vec<_>>(),
    );
    report_connections(settings, &names, counts);
}

/// A new connection's cost: the instructions of a connection that carries one request, less
/// that request's on a kept-alive connection (each round's own), with its ratio to nginx's.
fn report_connections(settings: &Settings, names: &[&str], counts: &[Count]) {
    let cost = |target: &str, protocol: Protocol| {
        let per = |fresh: bool| {
            counts
                .iter()
                .filter(move |c| c.target == target && c.protocol == protocol && c.fresh == fresh)
                .map(|c| c.per_request)
        };
        Spread::of(per(true).zip(per(false)).map(|(fresh, kept)| fresh - kept))
    };
    let protocols = [Protocol::Http1, Protocol::Https1];
    let nginx = |protocol| cost("nginx", protocol);
    println!(
        "\ninstructions per new connection ({} connections, each opened, one request, closed; \
         less that request on a kept-alive connection): plain TCP, and TCP with a TLS \
         handshake (TLS 1.3, no resumption)",
        settings.new_connections
    );
    let header = vec!["new HTTP/1.1".to_owned(), "new TLS (HTTPS/1.1)".to_owned()];
    let rows: Vec<(&str, Vec<String>)> = names
        .iter()
        .map(|&name| {
            let cells = protocols
                .iter()
                .map(|&protocol| {
                    cost(name, protocol).map_or("-".to_owned(), |c| {
                        let ratio = nginx(protocol)
                            .filter(|_| name != "nginx")
                            .map(|n| format!(" ({:.2}×)", c.median / n.median))
                            .unwrap_or_default();
                        format!("{}{ratio}", thousands(c.median))
                    })
                })
                .collect();
            (name, cells)
        })
        .collect();
    print_table(&[("", header)].into_iter().chain(rows).collect::<Vec<_>>());
}

/// Rows of a name and right-aligned cells, each column as wide as its widest cell.
fn print_table(rows: &[(&str, Vec<String>)]) {
    let columns = rows.iter().map(|(_, cells)| cells.len()).max().unwrap_or(0);
    let width = |column: usize| {
        rows.iter()
            .filter_map(|(_, cells)| cells.get(column))
            .map(|cell| cell.chars().count())
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..columns).map(width).collect();
    // A row without cells is a heading: it may stick out.
    let name_width = rows
        .iter()
        .filter(|(_, cells)| !cells.is_empty())
        .map(|(name, _)| name.len())
        .max()
        .unwrap_or(0);
    for (name, cells) in rows {
        let mut line = format!("  {name:<name_width$}");
        for (cell, width) in cells.iter().zip(&widths) {
            line.push_str(&format!("   {cell:>width$}"));
        }
        println!("{}", line.trim_end());
    }
}
