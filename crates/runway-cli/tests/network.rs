//! Services that talk, end to end through `runway server` and the CLI: egress under the
//! platform's firewall and DNS, private names with the caller's identity, and upstream's
//! network fields honoured.
//!
//! Everything runs in network namespaces this test makes, never through the host's default
//! route: the server's "host" (`<p>h`), whose default route leads to an "internet" (`<p>i`, at
//! 198.18.0.0/15, the benchmarking range, with a DNS server answering for `internet.test` and
//! `private.test`), and a "private" host (`<p>p`, 10.99.0.2) on a link of its own. All routes
//! are added before anything is sent.

#![allow(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::{Platform, Settings, write_repo};

/// The programs this test drives, besides the server's own (runc, ip, nsenter, nft).
const TOOLS: [&str; 6] = ["ip", "nsenter", "nft", "runc", "dnsmasq", "python3"];

/// Whether every tool is here; otherwise prints why the test skips (a failure under CI=true).
fn have_tools() -> bool {
    let missing: Vec<&str> = TOOLS
        .into_iter()
        .filter(|tool| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    let reason = format!("{} not installed", missing.join(", "));
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
    eprintln!("skipped: {reason}");
    false
}

fn sh(script: &str) {
    let out = Command::new("sh").args(["-ec", script]).output().unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The namespaces, their links and the programs running in them; all gone on drop.
struct Hosts {
    prefix: String,
    children: Vec<Child>,
    dir: tempfile::TempDir,
}

impl Hosts {
    fn new() -> Self {
        // Short enough for interface names (15 bytes), never `rw…` (the instances' links).
        let prefix = format!("tn{}", std::process::id() % 100_000);
        let p = &prefix;
        // Left by an earlier run that was killed.
        for ns in ["h", "i", "p"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &format!("{p}{ns}")])
                .stderr(Stdio::null())
                .status();
        }
        sh(&format!(
            "ip netns add {p}h; ip netns add {p}i; ip netns add {p}p
             ip link add {p}hi netns {p}h type veth peer name {p}ih netns {p}i
             ip link add {p}hp netns {p}h type veth peer name {p}ph netns {p}p
             ip -n {p}h addr add 198.18.0.2/30 dev {p}hi
             ip -n {p}h addr add 10.99.0.1/30 dev {p}hp
             ip -n {p}i addr add 198.18.0.1/30 dev {p}ih
             ip -n {p}i addr add 198.18.1.1/32 dev lo
             ip -n {p}i addr add 198.18.1.2/32 dev lo
             ip -n {p}i addr add 169.254.169.254/32 dev lo
             ip -n {p}p addr add 10.99.0.2/30 dev {p}ph
             for ns in h i p; do ip -n {p}$ns link set lo up; done
             ip -n {p}h link set {p}hi up; ip -n {p}h link set {p}hp up
             ip -n {p}i link set {p}ih up; ip -n {p}p link set {p}ph up
             ip -n {p}h route add default via 198.18.0.1
             ip -n {p}i route add 10.213.0.0/16 via 198.18.0.2
             ip -n {p}p route add default via 10.99.0.1"
        ));
        let mut hosts = Self {
            prefix: prefix.clone(),
            children: Vec::new(),
            dir: tempfile::tempdir().unwrap(),
        };
        // The internet's web server (every address of it), the private host's, and one on the
        // server's host itself, on all its addresses, as sshd or PostgreSQL would listen.
        hosts.serve("i", "0.0.0.0", 80, "internet");
        hosts.serve("p", "10.99.0.2", 80, "private");
        hosts.serve("h", "0.0.0.0", 2222, "host service");
        let dns = Command::new("ip")
            .args([
                "netns",
                "exec",
                &format!("{p}i"),
                "dnsmasq",
                "--keep-in-foreground",
            ])
            .args([
                "--no-resolv",
                "--no-hosts",
                "--bind-interfaces",
                "--user=root",
            ])
            .args(["--listen-address=198.18.0.1", "--port=53"])
            .args(["--address=/internet.test/198.18.1.1"])
            .args(["--address=/private.test/10.99.0.2"])
            .arg(format!(
                "--pid-file={}",
                hosts.dir.path().join("dnsmasq.pid").display()
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = dns.id();
        hosts.children.push(dns);
        wait_listening(pid, 53);
        hosts
    }

    /// A web server in namespace `ns` answering `body` at `/`.
    fn serve(&mut self, ns: &str, address: &str, port: u16, body: &str) {
        let root = self.dir.path().join(format!("www-{ns}-{port}"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("index.html"), body).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &format!("{}{ns}", self.prefix)])
            .args([
                "python3",
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                address,
            ])
            .current_dir(&root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        self.children.push(child);
        wait_listening(pid, port);
    }

    fn host(&self) -> String {
        format!("{}h", self.prefix)
    }

    /// The platform's firewall in the server's namespace, for failure messages.
    fn firewall(&self) -> String {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.host(),
                "nft",
                "list",
                "table",
                "inet",
                "runway",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for ns in ["h", "i", "p"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &format!("{}{ns}", self.prefix)])
                .status();
        }
    }
}

/// Waits until process `pid` (`ip netns exec` becomes the program it runs) listens on TCP
/// `port` (or UDP, for a resolver), in its namespace.
fn wait_listening(pid: u32, port: u16) {
    let wanted = format!(":{port:04X} ");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let tcp = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
        let udp = std::fs::read_to_string(format!("/proc/{pid}/net/udp")).unwrap_or_default();
        let listening = tcp
            .lines()
            .any(|l| l.split_whitespace().nth(3) == Some("0A") && l.contains(&wanted))
            || udp.lines().any(|l| l.contains(&wanted));
        if listening {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pid {pid} does not listen on port {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes `extra` (YAML lines under `spec:`, indented two spaces) and workload lines
/// (indented four) into the test service's manifest.
fn service(dir: &Path, name: &str, spec: &str, workload: &str) -> std::path::PathBuf {
    let repo = write_repo(dir, name);
    let path = repo.join(".runway/runway.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text
        .replacen("spec:\n", &format!("spec:\n{spec}"), 1)
        .replacen("  workload:\n", &format!("  workload:\n{workload}"), 1);
    std::fs::write(&path, text).unwrap();
    repo
}

/// `GET path` of `service` in `dev` through the public ingress, from the server's host; the
/// status and body. Made with curl in the host's namespace.
fn get(platform: &Platform, hosts: &Hosts, service: &str, path: &str) -> (u16, String) {
    let https = platform.https();
    let host = format!("{service}.dev.localhost");
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", hosts.host()))
        .args(["--", "curl", "-sS", "--max-time", "15", "--cacert"])
        .arg(platform.ca())
        .args(["--resolve", &format!("{host}:{}:127.0.0.1", https.port())])
        .args(["-w", "\n%{http_code}"])
        .arg(format!("https://{host}:{}{path}", https.port()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// What `service`'s instance answers to `path`, with a 200.
fn ask(platform: &Platform, hosts: &Hosts, service: &str, path: &str) -> String {
    let (status, body) = get(platform, hosts, service, path);
    assert_eq!(status, 200, "{service}{path}: {body}");
    body.trim().to_owned()
}

fn deploy(platform: &Platform, repo: &Path) {
    let ran = platform.deploy(repo, "dev");
    assert!(ran.ok(), "deploy: {}\n{}", ran.all(), platform.log());
}

#[test]
fn services_reach_the_internet_and_private_names_under_the_platforms_policy() {
    if !have_tools() {
        return;
    }
    let hosts = Hosts::new();
    // Cloudflare's ranges, as the operator keeps them: none of them the test's client yet.
    let ranges = hosts.dir.path().join("cloudflare.txt");
    std::fs::write(&ranges, "# Cloudflare\n173.245.48.0/20\n2400:cb00::/32\n").unwrap();
    let platform = Platform::start(&Settings {
        netns: Some(hosts.host()),
        ingress: format!("  cloudflare_ranges_file: {}\n", ranges.display()),
        sections: "runtime:\n  egress:\n    private_ranges: [10.99.0.0/24]\n    \
                   resolvers: [198.18.0.1]\n"
            .to_owned(),
        ..Settings::default()
    });
    let work = tempfile::tempdir().unwrap();
    let repos = [
        ("caller", "", ""),
        ("vpc", "  vpc_access:\n    enabled: true\n", ""),
        (
            "locked",
            "",
            "    egress:\n      internet: false\n      allow: [198.18.1.1/32:80]\n",
        ),
        (
            "backend",
            "  load_balancing:\n    external_load_balancer:\n      enabled: false\n",
            "    callers: [caller]\n",
        ),
        ("edge", "  network_policies:\n    cloudflare: true\n", ""),
    ];
    for (name, spec, workload) in repos {
        platform.onboard(name, &["dev"], "s3cret");
        let repo = service(work.path(), name, spec, workload);
        deploy(&platform, &repo);
    }

    // Out to the internet, by name through the platform's resolver.
    assert_eq!(
        ask(&platform, &hosts, "caller", "/resolve?name=internet.test"),
        "198.18.1.1"
    );
    assert_eq!(
        ask(
            &platform,
            &hosts,
            "caller",
            "/fetch?url=http://internet.test/"
        ),
        "200 internet"
    );
    // Never to the host (what listens on all its addresses), another instance, link-local or
    // a private range it was not given.
    let other = platform.address_of("vpc");
    for target in [
        "198.18.0.2:2222".to_owned(),
        "10.99.0.1:2222".to_owned(),
        other,
        "169.254.169.254:80".to_owned(),
        "10.99.0.2:80".to_owned(),
    ] {
        let answer = ask(
            &platform,
            &hosts,
            "caller",
            &format!("/connect?to={target}"),
        );
        assert_eq!(answer, "ConnectionRefusedError", "{target} is in reach");
    }
    // With vpc_access, the private host; still not the host itself.
    let private = ask(&platform, &hosts, "vpc", "/fetch?url=http://private.test/");
    assert_eq!(private, "200 private", "{}", hosts.firewall());
    assert_eq!(
        ask(&platform, &hosts, "vpc", "/connect?to=10.99.0.1:2222"),
        "ConnectionRefusedError"
    );
    // Locked down: what it allows, nothing else of the internet.
    assert_eq!(
        ask(&platform, &hosts, "locked", "/fetch?url=http://198.18.1.1/"),
        "200 internet"
    );
    assert_eq!(
        ask(&platform, &hosts, "locked", "/connect?to=198.18.1.2:80"),
        "ConnectionRefusedError"
    );

    // A private name: its caller stamped, a forged one replaced, an uninvited caller refused,
    // and no public host.
    let internal = "http://backend.dev.internal/whoami";
    assert_eq!(
        ask(
            &platform,
            &hosts,
            "caller",
            &format!("/fetch?url={internal}")
        ),
        "200 caller=caller/dev"
    );
    assert_eq!(
        ask(
            &platform,
            &hosts,
            "caller",
            &format!("/fetch?url={internal}&header=Runway-Caller:admin/production")
        ),
        "200 caller=caller/dev"
    );
    let refused = ask(&platform, &hosts, "vpc", &format!("/fetch?url={internal}"));
    assert!(refused.starts_with("403 "), "{refused}");
    let (status, body) = get(&platform, &hosts, "backend", "/whoami");
    assert_eq!(
        status, 404,
        "the public host of an internal-only service: {body}"
    );
    // A public request's forged caller never reaches the instance.
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", hosts.host()))
        .args(["--", "curl", "-sS", "--max-time", "15", "--cacert"])
        .arg(platform.ca())
        .args(["-H", "Runway-Caller: admin/production", "--resolve"])
        .arg(format!(
            "caller.dev.localhost:{}:127.0.0.1",
            platform.https().port()
        ))
        .arg(format!(
            "https://caller.dev.localhost:{}/whoami",
            platform.https().port()
        ))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "caller=None");

    // Cloudflare only: a client outside its ranges is refused, one inside served once the
    // operator's file names it.
    let (status, body) = get(&platform, &hosts, "edge", "/");
    assert_eq!(status, 403, "a client outside Cloudflare's ranges: {body}");
    std::fs::write(&ranges, "173.245.48.0/20\n127.0.0.0/8\n").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while get(&platform, &hosts, "edge", "/").0 != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "the ranges were not read again"
        );
        std::thread::sleep(Duration::from_millis(250));
    }

    // Asking for what can never be reached is refused, saying which field.
    platform.onboard("nosy", &["dev"], "s3cret");
    let nosy = service(
        work.path(),
        "nosy",
        "",
        "    egress:\n      allow: [10.99.0.0/24]\n",
    );
    let refused = platform.deploy(&nosy, "dev");
    assert!(!refused.ok(), "deployed: {}", refused.all());
    assert!(
        refused
            .all()
            .contains("spec.workload.egress.allow: 10.99.0.0/24 is private"),
        "{}",
        refused.all()
    );
}
