//! Custom domains against a real ACME server: Pebble (Let's Encrypt's test server, Debian's
//! `pebble`) on loopback, its DNS answered by `pebble-challtestsrv`, validating against the
//! ingress `runway server` runs. A certificate is issued, served (a client trusting Pebble's
//! root gets the service's page), renewed before it expires (Pebble's certificates live 30 s
//! here), and a domain whose challenge fails says why. Both HTTP-01 and TLS-ALPN-01.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Platform, Settings, have_python};

/// A free port on loopback (taken again by the caller at once).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn have_pebble() -> bool {
    let found = ["pebble", "pebble-challtestsrv"].iter().all(|tool| {
        Command::new(tool)
            .arg("-h")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    });
    if !found {
        let reason = "pebble is not installed (Debian's `pebble`: apt-get install pebble)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
        eprintln!("skipped: {reason}");
    }
    found
}

/// Pebble and its DNS, killed on drop.
struct Pebble {
    children: Vec<Child>,
    /// Its configuration, certificates and logs.
    _dir: tempfile::TempDir,
    /// The authority of Pebble's own HTTPS (the directory's), for `domains.acme.ca_file`.
    ca_file: PathBuf,
    management: u16,
    dns_management: u16,
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Ports and files Pebble needs before the server starts (its directory's URL is in the
/// server's configuration).
struct PebblePlan {
    listen: u16,
    management: u16,
    dns: u16,
    dns_management: u16,
    ca_file: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl PebblePlan {
    fn new(dir: &Path) -> Self {
        // Pebble's HTTPS certificate, from an authority of the test's own.
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::default();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let plan = Self {
            listen: free_port(),
            management: free_port(),
            dns: free_port(),
            dns_management: free_port(),
            ca_file: dir.join("pebble-ca.pem"),
            cert: dir.join("pebble-cert.pem"),
            key: dir.join("pebble-key.pem"),
        };
        std::fs::write(&plan.ca_file, ca.as_ref().pem()).unwrap();
        std::fs::write(&plan.cert, leaf.pem()).unwrap();
        std::fs::write(&plan.key, key.serialize_pem()).unwrap();
        plan
    }

    fn directory(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.listen)
    }

    /// Starts Pebble validating against `http` (HTTP-01) and `https` (TLS-ALPN-01), its
    /// certificates valid `validity` seconds.
    fn start(self, scratch: tempfile::TempDir, http: u16, https: u16, validity: u64) -> Pebble {
        let dir = scratch.path();
        let config = dir.join("pebble.json");
        std::fs::write(
            &config,
            serde_json::json!({"pebble": {
                "listenAddress": format!("127.0.0.1:{}", self.listen),
                "managementListenAddress": format!("127.0.0.1:{}", self.management),
                "certificate": self.cert,
                "privateKey": self.key,
                "httpPort": http,
                "tlsPort": https,
                "ocspResponderURL": "",
                "externalAccountBindingRequired": false,
                "certificateValidityPeriod": validity,
            }})
            .to_string(),
        )
        .unwrap();
        let log = |name: &str| std::fs::File::create(dir.join(name)).unwrap();
        let dns = Command::new("pebble-challtestsrv")
            .args([
                "-dns01",
                &format!("127.0.0.1:{}", self.dns),
                "-management",
                &format!("127.0.0.1:{}", self.dns_management),
                "-http01",
                "",
                "-https01",
                "",
                "-tlsalpn01",
                "",
                "-defaultIPv4",
                "127.0.0.1",
                "-defaultIPv6",
                "",
            ])
            .stdout(log("challtestsrv.log"))
            .stderr(log("challtestsrv.err"))
            .spawn()
            .unwrap();
        let pebble = Command::new("pebble")
            .args(["-config"])
            .arg(&config)
            .args(["-dnsserver", &format!("127.0.0.1:{}", self.dns)])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_AUTHZREUSE", "0")
            .stdout(log("pebble.log"))
            .stderr(log("pebble.err"))
            .spawn()
            .unwrap();
        let running = Pebble {
            children: vec![dns, pebble],
            _dir: scratch,
            ca_file: self.ca_file,
            management: self.management,
            dns_management: self.dns_management,
        };
        for port in [self.listen, self.management, self.dns_management] {
            wait_for_port(port, running._dir.path());
        }
        running
    }
}

fn wait_for_port(port: u16, dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nothing listens on {port}: {}",
            std::fs::read_to_string(dir.join("pebble.err")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Pebble {
    /// Pebble's root, which signs (through an intermediate) the certificates it issues.
    fn root(&self, rt: &tokio::runtime::Runtime) -> reqwest::Certificate {
        let pem = std::fs::read(&self.ca_file).unwrap();
        let client = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()])
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let url = format!("https://127.0.0.1:{}/roots/0", self.management);
        let root =
            rt.block_on(async { client.get(url).send().await.unwrap().bytes().await.unwrap() });
        reqwest::Certificate::from_pem(&root).unwrap()
    }

    /// Makes `host` resolve to `address` in Pebble's DNS.
    fn resolve(&self, rt: &tokio::runtime::Runtime, host: &str, address: &str) {
        let url = format!("http://127.0.0.1:{}/add-a", self.dns_management);
        let body = serde_json::json!({"host": host, "addresses": [address]});
        let status = rt.block_on(async {
            reqwest::Client::new()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
        });
        assert!(status.is_success(), "add-a: {status}");
    }
}

/// A platform whose `domains.acme` is a Pebble started on the ingress's ports, with `hello`
/// deployed to dev.
fn platform_with_pebble(
    challenge: &str,
    validity: u64,
    ingress: &str,
) -> Option<(Platform, Pebble)> {
    if !have_python() || !have_pebble() {
        return None;
    }
    let scratch = tempfile::tempdir().unwrap();
    let plan = PebblePlan::new(scratch.path());
    let settings = Settings {
        sections: format!(
            "domains:\n  interval_ms: 500\n  acme:\n    directory: {}\n    ca_file: {}\n    \
             accept_terms: true\n    contact: [\"mailto:ops@example.com\"]\n    challenge: \
             {challenge}\n    order_timeout_ms: 30000\n    retry_ms: 600000\n",
            plan.directory(),
            plan.ca_file.display()
        ),
        ingress: ingress.to_owned(),
        ..Settings::default()
    };
    let platform = Platform::start(&settings);
    let http = platform.http().expect("the ingress's HTTP port").port();
    let https = platform.https().port();
    let pebble = plan.start(scratch, http, https, validity);
    let repo = platform.onboard("hello", &["dev"], "s3cret");
    let deployed = platform.deploy(&repo, "dev");
    assert!(deployed.ok(), "deploy: {}", deployed.all());
    Some((platform, pebble))
}

/// `runway domains add DOMAIN --service hello --env dev --wait`: its JSON and how long it took.
fn add(platform: &Platform, domain: &str) -> (support::Ran, Value) {
    let ran = platform.runway_for(
        &[
            "domains",
            "add",
            domain,
            "--service",
            "hello",
            "--env",
            "dev",
            "--wait",
            "--timeout",
            "60",
            "--output",
            "json",
        ],
        Duration::from_secs(90),
    );
    let json = serde_json::from_str(&ran.stdout).unwrap_or(Value::Null);
    (ran, json)
}

/// The service's page at `https://{domain}:{port}/`, trusting only `root`.
fn page(platform: &Platform, root: &reqwest::Certificate, domain: &str) -> Result<String, String> {
    let client = reqwest::Client::builder()
        .tls_certs_only([root.clone()])
        .resolve(domain, platform.https())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let url = format!("https://{domain}:{}/", platform.https().port());
    platform.rt.block_on(async {
        let answer = client.get(url).send().await.map_err(|e| format!("{e:?}"))?;
        let status = answer.status();
        let text = answer.text().await.map_err(|e| e.to_string())?;
        if status.is_success() {
            Ok(text)
        } else {
            Err(format!("{status}: {text}"))
        }
    })
}

fn listed(platform: &Platform, domain: &str) -> Value {
    let ran = platform.runway(&["domains", "list", "--output", "json"]);
    assert!(ran.ok(), "domains list: {}", ran.all());
    let all: Vec<Value> = serde_json::from_str(&ran.stdout).unwrap();
    all.into_iter()
        .find(|d| d["domain"] == domain)
        .unwrap_or_else(|| panic!("{domain} is not listed: {}", ran.stdout))
}

#[test]
fn a_domain_gets_a_certificate_over_http_01_renewed_before_it_expires() {
    let Some((platform, pebble)) = platform_with_pebble("http-01", 30, "") else {
        return;
    };
    let root = pebble.root(&platform.rt);
    let domain = "hello.example.test";
    // Before a certificate: routed, but served under the local authority, which a client
    // trusting only Pebble refuses.
    let started = Instant::now();
    let (ran, added) = add(&platform, domain);
    let took = started.elapsed();
    assert!(ran.ok(), "domains add: {}\n{}", ran.all(), platform.log());
    assert_eq!(added["state"], "issued", "{added}");
    eprintln!("figure: `runway domains add --wait` to an issued certificate: {took:?}");
    let first_expiry = added["not_after"].as_str().unwrap().to_owned();

    let served = page(&platform, &root, domain).unwrap();
    assert!(served.contains("hello"), "{served}");
    eprintln!(
        "figure: add to a served certificate: {:?}",
        started.elapsed()
    );
    // Its own host is untouched: still the local authority's.
    let own_client = platform.ingress_client("hello.dev.localhost");
    let own_url = platform.ingress_url("hello.dev.localhost", "/");
    let own = platform
        .rt
        .block_on(async { own_client.get(own_url).send().await })
        .unwrap();
    assert!(own.status().is_success());

    let text = platform.runway(&["domains", "list"]);
    assert!(
        text.stdout.contains(domain) && text.stdout.contains("issued, expires"),
        "{}",
        text.all()
    );

    // Renewed at two thirds of its 30 s life; after the first certificate has expired, the
    // page is still served, with the renewed one.
    let deadline = Instant::now() + Duration::from_secs(60);
    let renewed = loop {
        let now = listed(&platform, domain);
        if now["not_after"].as_str() != Some(first_expiry.as_str()) && now["state"] == "issued" {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "not renewed: {now}\n{}",
            platform.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    // The first certificate lived 30 s from its issue.
    let expired = started + took + Duration::from_secs(32);
    std::thread::sleep(expired.saturating_duration_since(Instant::now()));
    let served = page(&platform, &root, domain);
    assert!(
        served.is_ok(),
        "after the first certificate expired: {served:?}\n{renewed}"
    );

    let audit = platform.runway(&["audit", "--output", "json"]);
    let issued = audit.stdout.matches("domain.issued").count();
    assert!(issued >= 2, "{}", audit.stdout);

    // Removed: the name is no longer routed (a client gets no page from it).
    let removed = platform.runway(&["domains", "remove", domain]);
    assert!(removed.ok(), "{}", removed.all());
    let deadline = Instant::now() + Duration::from_secs(10);
    while page(&platform, &root, domain).is_ok() {
        assert!(Instant::now() < deadline, "{domain} is still served");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_domain_whose_challenge_fails_says_why_and_tls_alpn_01_issues() {
    // The operator's own certificate for one name, from an authority of the test's.
    let operator = tempfile::tempdir().unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["own.example.test".into()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let (cert_file, key_file) = (
        operator.path().join("own.pem"),
        operator.path().join("own-key.pem"),
    );
    std::fs::write(&cert_file, leaf.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let operator_ca = reqwest::Certificate::from_pem(ca.as_ref().pem().as_bytes()).unwrap();
    let ingress = format!(
        "  certificates:\n    - domains: [own.example.test]\n      cert: {}\n      key: {}\n",
        cert_file.display(),
        key_file.display()
    );
    let Some((mut platform, pebble)) = platform_with_pebble("tls-alpn-01", 3600, &ingress) else {
        return;
    };
    let root = pebble.root(&platform.rt);

    let (ran, added) = add(&platform, "alpn.example.test");
    assert!(ran.ok(), "domains add: {}\n{}", ran.all(), platform.log());
    assert_eq!(added["state"], "issued", "{added}");
    let served = page(&platform, &root, "alpn.example.test").unwrap();
    assert!(served.contains("hello"), "{served}");

    // A name whose DNS points where nothing listens: the order fails, and says why in the
    // ACME server's words; `--wait` exits non-zero.
    pebble.resolve(&platform.rt, "broken.example.test", "127.0.0.2");
    let (ran, failed) = add(&platform, "broken.example.test");
    assert_eq!(ran.code, Some(1), "{}", ran.all());
    assert_eq!(failed["state"], "failed", "{failed}");
    let detail = failed["detail"].as_str().unwrap();
    assert!(detail.contains("broken.example.test"), "{detail}");
    assert!(
        detail.contains("connection refused") || detail.contains("connect"),
        "{detail}"
    );
    assert_eq!(failed["attempts"], 1);
    assert!(failed["next_attempt_at"].is_string(), "{failed}");
    let text = platform.runway(&["domains", "list"]);
    assert!(text.stdout.contains("failed: "), "{}", text.all());
    // The other domain is not held up by it.
    assert!(page(&platform, &root, "alpn.example.test").is_ok());

    // A name the operator has a certificate for: ACME issues one too (its challenge is
    // answered whatever is served for the name), but the operator's is what clients get.
    let (ran, own) = add(&platform, "own.example.test");
    assert!(ran.ok(), "domains add: {}", ran.all());
    assert_eq!(own["state"], "issued", "{own}");
    let served = page(&platform, &operator_ca, "own.example.test").unwrap();
    assert!(served.contains("hello"), "{served}");
    assert!(page(&platform, &root, "own.example.test").is_err());

    // A restarted control plane's tables keep the certificates from its first one on.
    platform.kill9();
    platform.restart();
    for _ in 0..20 {
        let served = page(&platform, &root, "alpn.example.test");
        assert!(served.is_ok(), "after a restart: {served:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
