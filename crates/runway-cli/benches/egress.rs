//! What the platform's firewall costs: the time it adds to an instance's start, the kernel
//! memory of its sets with 100 services, and new connections per second through its NAT
//! against the CPU they take, side by side with the same path routed plainly (no table, no
//! connection tracking). Run as root with `cargo bench -p runway --bench egress`.
//!
//! Everything runs in network namespaces the bench makes: an instance (`c`), the host (`h`,
//! the firewall's, forwarding), and an "internet" (`i`, at 198.18.1.1, the benchmarking
//! range) whose server accepts and closes. The bench re-runs itself in each namespace
//! (`nsenter --net`) for its roles.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark prints its figures"
)]

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use runway_runtime::firewall::{EgressLimits, Firewall, Policy};

const ROLE: &str = "RUNWAY_EGRESS_BENCH_ROLE";
const SERVER: &str = "198.18.1.1:9000";
const INSTANCE: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 6);
/// Connection rates tried, per second.
const RATES: [u32; 4] = [1_000, 2_000, 4_000, 8_000];
const SECONDS: u64 = 4;

fn firewall() -> Firewall {
    Firewall::new(
        "10.213.0.0/16".parse().unwrap(),
        Ipv4Addr::new(10, 213, 0, 1),
        EgressLimits::default(),
        std::env::temp_dir().join("runway-egress-bench"),
    )
}

/// A service's policy as the bench gives each of 100: two allowed ranges, one denied.
fn policy() -> Policy {
    Policy {
        allow: vec![
            "203.0.113.0/24:443".parse().unwrap(),
            "198.51.100.0/24:80".parse().unwrap(),
        ],
        deny: vec!["192.0.2.0/24".parse().unwrap()],
        internet: true,
        vpc: false,
    }
}

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => return serve(),
        Ok("client") => return connect(),
        Ok("install") => return install(),
        _ => {}
    }
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: the egress bench makes network namespaces, which needs root");
        return;
    }
    let net = Namespaces::new();
    net.run("h", "install", &["report"]);
    let _server = net.spawn("i", "server");
    std::thread::sleep(Duration::from_millis(300));

    println!("connections per second through the platform's NAT, against plain routing");
    println!("(CPU is system + softirq time of the whole machine, both namespaces' ends included)");
    println!(
        "{:>8}  {:>14}  {:>14}  {:>12}",
        "rate", "routed % core", "NAT % core", "NAT adds"
    );
    let mut per_thousand = Vec::new();
    for rate in RATES {
        sh(&format!(
            "ip netns exec {}h nft delete table inet runway",
            net.prefix
        ));
        let (routed, routed_rate) = net.measure(rate);
        net.run("h", "install", &[]);
        let (natted, natted_rate) = net.measure(rate);
        // Per connection made, scaled to the rate asked, so a client that fell short of it
        // in one mode does not flatter that mode.
        let routed = routed / routed_rate * f64::from(rate);
        let natted = natted / natted_rate * f64::from(rate);
        let added = natted - routed;
        per_thousand.push(added / f64::from(rate) * 1000.0);
        println!(
            "{rate:>8}  {routed:>14.1}  {natted:>14.1}  {added:>11.1}%   (made {routed_rate:.0}/s and {natted_rate:.0}/s)"
        );
    }
    let mut sorted = per_thousand.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    if median > 0.0 {
        println!(
            "the NAT and firewall cost {median:.2} % of a core per 1,000 new connections a second: \
             10 % of a core at about {:.0} connections a second",
            10.0 / median * 1000.0
        );
    }
}

/// In the host's namespace: the table, and 100 services' elements, timed one by one.
fn install() {
    let report = std::env::args().nth(1).is_some();
    std::fs::create_dir_all(std::env::temp_dir().join("runway-egress-bench")).unwrap();
    let firewall = firewall();
    firewall.install().unwrap();
    let slab = || {
        std::fs::read_to_string("/proc/meminfo")
            .unwrap()
            .lines()
            .find(|l| l.starts_with("SUnreclaim:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap()
    };
    let before = slab();
    let mut times = Vec::new();
    for n in 0..100u32 {
        let address = Ipv4Addr::from(u32::from(INSTANCE) + 4 * (n + 1));
        let started = Instant::now();
        firewall.apply(address, &policy()).unwrap();
        times.push(started.elapsed());
    }
    firewall.apply(INSTANCE, &policy()).unwrap();
    let after = slab();
    times.sort();
    let rules = Command::new("nft")
        .args(["list", "table", "inet", "runway"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&rules.stdout);
    let rules = text
        .lines()
        .filter(|l| {
            let l = l.trim();
            !l.is_empty()
                && !l.ends_with('{')
                && l != "}"
                && !l.starts_with("type ")
                && !l.starts_with("flags ")
                && !l.contains("elements")
                && !l.starts_with("auto-merge")
        })
        .count();
    if !report {
        return;
    }
    eprintln!(
        "an instance's policy written at its start (one nft transaction), 100 services: \
         median {:.1} ms, p90 {:.1} ms; the table: {} rule and element lines; unreclaimable \
         kernel memory {} KiB more with 101 services' elements (noisy)",
        times[50].as_secs_f64() * 1e3,
        times[90].as_secs_f64() * 1e3,
        rules,
        after.saturating_sub(before)
    );
}

/// In the internet's namespace: accept and close, on a few threads.
fn serve() {
    let listener = TcpListener::bind(SERVER).unwrap();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let listener = listener.try_clone().unwrap();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    drop(stream);
                }
            })
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
}

/// In the instance's namespace: new connections at the rate given, for [`SECONDS`]; prints
/// how many were made.
fn connect() {
    let rate: u32 = std::env::args().nth(1).unwrap().parse().unwrap();
    let server: SocketAddr = SERVER.parse().unwrap();
    let interval = Duration::from_secs(1) / rate;
    let start = Instant::now();
    let end = start + Duration::from_secs(SECONDS);
    let mut made = 0u64;
    let mut next = start;
    while Instant::now() < end {
        if let Ok(mut stream) = TcpStream::connect_timeout(&server, Duration::from_secs(1)) {
            let _ = stream.read(&mut [0; 1]);
            made += 1;
        }
        next += interval;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    println!("{made}");
}

struct Namespaces {
    prefix: String,
}

impl Namespaces {
    fn new() -> Self {
        let prefix = format!("eb{}", std::process::id() % 100_000);
        let p = &prefix;
        sh(&format!(
            "ip netns add {p}c; ip netns add {p}h; ip netns add {p}i
             ip link add rw{p} netns {p}h type veth peer name eth0 netns {p}c
             ip link add {p}hi netns {p}h type veth peer name {p}ih netns {p}i
             ip -n {p}c addr add {INSTANCE}/30 dev eth0
             ip -n {p}h addr add 10.213.0.5/30 dev rw{p}
             ip -n {p}h addr add 198.18.0.2/30 dev {p}hi
             ip -n {p}i addr add 198.18.0.1/30 dev {p}ih
             ip -n {p}i addr add 198.18.1.1/32 dev lo
             for ns in c h i; do ip -n {p}$ns link set lo up; done
             ip -n {p}c link set eth0 up; ip -n {p}h link set rw{p} up
             ip -n {p}h link set {p}hi up; ip -n {p}i link set {p}ih up
             ip -n {p}c route add default via 10.213.0.5
             ip -n {p}h route add default via 198.18.0.1
             ip -n {p}i route add 10.213.0.0/16 via 198.18.0.2
             ip netns exec {p}h sysctl -q net.ipv4.ip_forward=1"
        ));
        Self { prefix }
    }

    fn command(&self, ns: &str, role: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/run/netns/{}{ns}", self.prefix))
            .arg("--")
            .arg(std::env::current_exe().unwrap())
            .env(ROLE, role);
        command
    }

    fn run(&self, ns: &str, role: &str, args: &[&str]) -> String {
        let out = self.command(ns, role).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{role}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        print!("{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn spawn(&self, ns: &str, role: &str) -> Killed {
        Killed(
            self.command(ns, role)
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    /// The CPU the machine spent in the kernel (system and softirq) while the instance made
    /// connections at `rate` a second, in percent of one core, and the rate it made.
    fn measure(&self, rate: u32) -> (f64, f64) {
        let before = kernel_ticks();
        let started = Instant::now();
        let made: u64 = self
            .run("c", "client", &[&rate.to_string()])
            .trim()
            .parse()
            .unwrap();
        let seconds = started.elapsed().as_secs_f64();
        let ticks = kernel_ticks() - before;
        (
            ticks as f64 / ticks_per_second() / seconds * 100.0,
            made as f64 / SECONDS as f64,
        )
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in ["c", "h", "i"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &format!("{}{ns}", self.prefix)])
                .status();
        }
    }
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// System and softirq ticks of every CPU, from `/proc/stat`.
fn kernel_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let cpu: Vec<u64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|n| n.parse().unwrap())
        .collect();
    // user nice system idle iowait irq softirq
    cpu[2] + cpu[5] + cpu[6]
}

fn ticks_per_second() -> f64 {
    let out = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn sh(script: &str) {
    let out = Command::new("sh").args(["-ec", script]).output().unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
