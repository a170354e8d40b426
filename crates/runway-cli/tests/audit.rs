//! The audit trail exported and tamper-evident, through a real `runway server`: an HTTPS
//! webhook on loopback (a test CA's certificate) that answers 503 for a minute loses nothing,
//! nor does a server killed with SIGKILL in the middle of an export; a file sink and syslog
//! (UDP and a unix datagram socket, listeners in the test) get every entry; `runway audit
//! verify` holds, then names an entry changed in the SQLite file below the server;
//! `runway audit verify --file` checks the exported file, and names the line edited in it.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use support::{Platform, Settings};

/// How long the webhook receiver answers 503: the minute. `RUNWAY_TEST_AUDIT_OUTAGE_S`
/// shortens it for a quick local run; CI keeps the minute.
fn outage() -> Duration {
    let seconds = std::env::var("RUNWAY_TEST_AUDIT_OUTAGE_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    Duration::from_secs(seconds)
}

/// What the webhook receiver saw.
#[derive(Default)]
struct Received {
    /// Every line of every accepted batch, in arrival order (repeats included).
    lines: Vec<String>,
    /// The same, of the sink whose buffer is small (`X-Sink: small`).
    small: Vec<String>,
    /// Requests answered 503.
    refused: usize,
    /// Requests whose Content-Type was not application/x-ndjson.
    wrong_type: usize,
}

struct Receiver {
    url: String,
    ca_pem: String,
    received: Arc<Mutex<Received>>,
    /// Answers 503 until then.
    down_until: Arc<Mutex<Instant>>,
    /// Waits this long before answering an accepted batch (a slow receiver, so that a kill
    /// lands in the middle of an export).
    delay: Arc<Mutex<Duration>>,
}

/// An HTTPS listener on loopback whose certificate a fresh CA signed, for axum.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, peer)) = self.tcp.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, peer);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

fn receiver(rt: &tokio::runtime::Runtime, outage: Duration) -> Receiver {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "runway audit test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .unwrap();
    let tcp = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("https://{}/audit", tcp.local_addr().unwrap());
    let listener = TlsListener {
        tcp,
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
    };
    let received = Arc::new(Mutex::new(Received::default()));
    let down_until = Arc::new(Mutex::new(Instant::now() + outage));
    let delay = Arc::new(Mutex::new(Duration::ZERO));
    let app = axum::Router::new().route(
        "/audit",
        axum::routing::post({
            let (received, down_until, delay) = (
                Arc::clone(&received),
                Arc::clone(&down_until),
                Arc::clone(&delay),
            );
            move |headers: axum::http::HeaderMap, body: String| async move {
                if Instant::now() < *down_until.lock().unwrap() {
                    received.lock().unwrap().refused += 1;
                    return (
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        "down for a while",
                    );
                }
                let wait = *delay.lock().unwrap();
                tokio::time::sleep(wait).await;
                let mut received = received.lock().unwrap();
                if headers
                    .get("content-type")
                    .is_none_or(|t| t != "application/x-ndjson")
                {
                    received.wrong_type += 1;
                }
                let lines = body.lines().filter(|l| !l.is_empty()).map(str::to_owned);
                if headers.get("x-sink").is_some_and(|s| s == "small") {
                    received.small.extend(lines);
                } else {
                    received.lines.extend(lines);
                }
                (axum::http::StatusCode::OK, "ok")
            }
        }),
    );
    rt.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Receiver {
        url,
        ca_pem: ca_cert.pem(),
        received,
        down_until,
        delay,
    }
}

/// The datagrams a syslog listener received, as text.
type Messages = Arc<Mutex<Vec<String>>>;

/// Collects what arrives on a UDP socket and a unix datagram socket: each datagram's text.
fn syslog_listeners(
    rt: &tokio::runtime::Runtime,
    unix_path: &Path,
) -> (SocketAddr, Messages, Messages) {
    let udp = rt
        .block_on(tokio::net::UdpSocket::bind("127.0.0.1:0"))
        .unwrap();
    let address = udp.local_addr().unwrap();
    let unix = {
        let _guard = rt.enter();
        tokio::net::UnixDatagram::bind(unix_path).unwrap()
    };
    let over_udp: Messages = Arc::default();
    let over_unix: Messages = Arc::default();
    for (socket, into) in [
        (Either::Udp(udp), Arc::clone(&over_udp)),
        (Either::Unix(unix), Arc::clone(&over_unix)),
    ] {
        rt.spawn(async move {
            let mut buf = vec![0u8; 65_536];
            loop {
                let n = match &socket {
                    Either::Udp(s) => s.recv(&mut buf).await,
                    Either::Unix(s) => s.recv(&mut buf).await,
                };
                let Ok(n) = n else { return };
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                into.lock().unwrap().push(text);
            }
        });
    }
    (address, over_udp, over_unix)
}

enum Either {
    Udp(tokio::net::UdpSocket),
    Unix(tokio::net::UnixDatagram),
}

/// Every audit entry the server holds, oldest first.
fn all_entries(platform: &Platform) -> Vec<Value> {
    let (status, body) = platform.call(
        Method::GET,
        "/v1/audit?after=0&limit=1000",
        Some(&platform.token),
        None,
    );
    assert_eq!(status, 200, "{body}");
    body.as_array().unwrap().clone()
}

/// Changes that each write an audit entry: services onboarded.
fn changes(platform: &Platform, prefix: &str, count: usize) {
    for n in 0..count {
        let (status, body) = platform.call(
            Method::POST,
            "/v1/services",
            Some(&platform.token),
            Some(json!({"name": format!("{prefix}{n}"), "owners": ["audit@example.com"]})),
        );
        assert_eq!(status, 201, "{body}");
    }
}

/// The ids of JSON lines, each line checked to be an entry with its hashes.
fn ids_of(lines: &[String]) -> Vec<i64> {
    lines
        .iter()
        .map(|line| {
            let entry: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert_eq!(entry["hash"].as_str().map(str::len), Some(64), "{line}");
            assert_eq!(
                entry["prev_hash"].as_str().map(str::len),
                Some(64),
                "{line}"
            );
            entry["id"].as_i64().unwrap()
        })
        .collect()
}

/// Every id of `expected` arrived, and the first arrival of each is in order.
fn assert_all_in_order(what: &str, got: &[i64], expected: &[i64]) {
    let mut first = Vec::new();
    let mut seen = BTreeSet::new();
    for id in got {
        if seen.insert(*id) {
            first.push(*id);
        }
    }
    let wanted: Vec<i64> = expected.to_vec();
    assert_eq!(
        first.iter().filter(|id| wanted.contains(id)).count(),
        wanted.len(),
        "{what}: missing {:?}",
        wanted
            .iter()
            .filter(|id| !seen.contains(id))
            .collect::<Vec<_>>()
    );
    let mut sorted = first.clone();
    sorted.sort_unstable();
    assert_eq!(first, sorted, "{what}: first arrivals out of order");
}

/// Waits, at most `bound`, until `check` holds.
/// `runway audit export --output json`: each sink's state.
fn export(platform: &Platform) -> Value {
    let status = platform.runway(&["audit", "export", "--output", "json"]);
    assert!(status.ok(), "{}", status.all());
    status.json()
}

fn wait_until(bound: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {bound:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn sink<'a>(sinks: &'a Value, name: &str) -> &'a Value {
    sinks
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no sink {name} in {sinks}"))
}

#[test]
fn the_audit_trail_reaches_every_sink_through_an_outage_and_a_kill_and_verifies() {
    let outage = outage();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let webhook = receiver(&rt, outage);
    let ca = scratch.path().join("webhook-ca.pem");
    std::fs::write(&ca, &webhook.ca_pem).unwrap();
    let unix_path = scratch.path().join("log.sock");
    let (udp, over_udp, over_unix) = syslog_listeners(&rt, &unix_path);
    let exported = scratch.path().join("audit.jsonl");
    let sections = format!(
        "audit:\n  export:\n\
         \x20   - name: siem\n      webhook:\n        url: {}\n        ca_file: {}\n        \
         headers:\n          Authorization: Bearer audit-test\n      batch: 5\n      \
         poll_ms: 100\n      retry_min_ms: 100\n      retry_max_ms: 1000\n\
         \x20   - name: siem-small\n      webhook:\n        url: {}\n        ca_file: {}\n        \
         headers:\n          X-Sink: small\n      batch: 2\n      buffer: 4\n      \
         poll_ms: 100\n      retry_min_ms: 100\n      retry_max_ms: 1000\n\
         \x20   - name: archive\n      file:\n        path: {}\n      poll_ms: 100\n\
         \x20   - name: syslog-udp\n      syslog:\n        address: udp://{udp}\n      poll_ms: 100\n\
         \x20   - name: syslog-local\n      syslog:\n        address: unix://{}\n        \
         facility: local3\n      poll_ms: 100\n",
        webhook.url,
        ca.display(),
        webhook.url,
        ca.display(),
        exported.display(),
        unix_path.display(),
    );
    let mut platform = Platform::start(&Settings {
        sections,
        ..Settings::default()
    });

    // While the receiver is down: changes, and a server killed and started again.
    changes(&platform, "before", 6);
    wait_until(
        Duration::from_secs(20),
        "the webhook refused a retry",
        || webhook.received.lock().unwrap().refused >= 2,
    );
    // Both webhook sinks call the one receiver: its refusals may all be the other's so far.
    // What `siem` saw is read once it has seen one.
    wait_until(Duration::from_secs(20), "siem saw the refusal", || {
        sink(&export(&platform), "siem")["error"].is_string()
    });
    let sinks = export(&platform);
    let siem = sink(&sinks, "siem");
    assert!(siem["lag"].as_u64().unwrap() >= 6, "{sinks}");
    assert!(
        siem["error"].as_str().unwrap().contains("503"),
        "the failure is shown: {sinks}"
    );
    assert!(siem["failing_since"].is_string(), "{sinks}");
    platform.kill9();
    platform.restart();
    changes(&platform, "during", 6);
    assert!(
        webhook.received.lock().unwrap().lines.is_empty(),
        "nothing accepted while down"
    );
    // The sink whose buffer holds 4 says it is behind, and counts what it left in the store.
    wait_until(
        Duration::from_secs(10),
        "the small buffer overflowed",
        || {
            platform
                .log()
                .contains("audit export to sink siem-small is")
        },
    );
    let log = platform.log();
    assert!(log.contains("none is lost"), "{log}");
    // The log holds the server's before its restart too, whose warning may be the one seen:
    // this one's figures are waited for.
    wait_until(Duration::from_secs(10), "siem-small counted a drop", || {
        sink(&export(&platform), "siem-small")["this_replica"]["dropped"]
            .as_u64()
            .is_some_and(|dropped| dropped > 0)
    });
    let sinks = export(&platform);
    let small = sink(&sinks, "siem-small");
    assert!(
        small["this_replica"]["dropped"].as_u64().unwrap() > 0,
        "{sinks}"
    );
    assert_eq!(small["this_replica"]["buffered"], 4, "{sinks}");
    let metrics = platform.call(Method::GET, "/metrics", None, None).1;
    let metrics = metrics.as_str().unwrap_or_default().to_owned();
    let dropped: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("runway_audit_export_dropped_total{sink=\"siem-small\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no dropped figure: {metrics}"));
    assert!(dropped > 0, "{metrics}");
    assert!(
        metrics.contains("runway_audit_export_lag{sink=\"siem\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("runway_audit_export_failures_total{sink=\"siem\"}"),
        "{metrics}"
    );

    // Up again: every entry arrives, in order, none lost.
    let up_at = *webhook.down_until.lock().unwrap();
    let expected: Vec<i64> = all_entries(&platform)
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    let last = *expected.last().unwrap();
    wait_until(
        outage + Duration::from_secs(30),
        "every entry reached the webhook after its outage",
        || ids_of(&webhook.received.lock().unwrap().lines).contains(&last),
    );
    assert!(
        Instant::now() >= up_at,
        "the webhook accepted nothing before its outage ended"
    );
    let got = ids_of(&webhook.received.lock().unwrap().lines);
    assert_all_in_order("webhook after its outage", &got, &expected);
    wait_until(
        Duration::from_secs(30),
        "the small buffer's sink caught up",
        || ids_of(&webhook.received.lock().unwrap().small).contains(&last),
    );
    let got = ids_of(&webhook.received.lock().unwrap().small);
    assert_all_in_order("webhook with a small buffer", &got, &expected);

    // A kill in the middle of an export: a slow receiver, a burst, SIGKILL once part of it
    // arrived, and a start again.
    *webhook.delay.lock().unwrap() = Duration::from_millis(400);
    let before = webhook.received.lock().unwrap().lines.len();
    changes(&platform, "burst", 30);
    wait_until(Duration::from_secs(20), "part of the burst arrived", || {
        webhook.received.lock().unwrap().lines.len() > before
    });
    platform.kill9();
    let arrived = webhook.received.lock().unwrap().lines.len() - before;
    assert!(
        arrived < 30,
        "the kill came mid-export ({arrived} of 30 arrived)"
    );
    *webhook.delay.lock().unwrap() = Duration::ZERO;
    platform.restart();
    let entries = all_entries(&platform);
    let expected: Vec<i64> = entries.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    let last = *expected.last().unwrap();
    wait_until(
        Duration::from_secs(30),
        "the burst reached the webhook",
        || ids_of(&webhook.received.lock().unwrap().lines).contains(&last),
    );
    let got = ids_of(&webhook.received.lock().unwrap().lines);
    assert_all_in_order("webhook after a kill", &got, &expected);
    assert_eq!(webhook.received.lock().unwrap().wrong_type, 0);
    // The lines are the entries as the API shows them, hashes and all.
    let by_id: BTreeMap<i64, &Value> = entries
        .iter()
        .map(|e| (e["id"].as_i64().unwrap(), e))
        .collect();
    for line in webhook.received.lock().unwrap().lines.iter() {
        let entry: Value = serde_json::from_str(line).unwrap();
        let shown = by_id[&entry["id"].as_i64().unwrap()];
        for key in [
            "at",
            "actor",
            "action",
            "target",
            "detail",
            "prev_hash",
            "hash",
        ] {
            assert_eq!(entry[key], shown[key], "{key} of {line}");
        }
    }

    // The file and syslog sinks have every entry too.
    wait_until(Duration::from_secs(20), "the other sinks caught up", || {
        let file = std::fs::read_to_string(&exported).unwrap_or_default();
        let lines: Vec<String> = file.lines().map(str::to_owned).collect();
        let messages = |store: &Messages| store.lock().unwrap().clone();
        ids_of(&lines).contains(&last)
            && messages(&over_udp)
                .iter()
                .any(|m| m.contains(&format!("\"id\":{last},")))
            && messages(&over_unix)
                .iter()
                .any(|m| m.contains(&format!("\"id\":{last},")))
    });
    let file = std::fs::read_to_string(&exported).unwrap();
    let lines: Vec<String> = file.lines().map(str::to_owned).collect();
    assert_all_in_order("file", &ids_of(&lines), &expected);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&exported).unwrap().permissions().mode() & 0o777,
        0o600
    );
    for (what, messages, priority) in [
        ("syslog over UDP", &over_udp, "<85>1 "),
        ("syslog on a unix socket", &over_unix, "<157>1 "),
    ] {
        let messages = messages.lock().unwrap().clone();
        let json: Vec<String> = messages
            .iter()
            .map(|m| {
                // <PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID SD MSG
                assert!(m.starts_with(priority), "{what}: {m}");
                let fields: Vec<&str> = m.splitn(8, ' ').collect();
                assert_eq!(fields.len(), 8, "{what}: {m}");
                assert_eq!(
                    (fields[3], fields[5], fields[6]),
                    ("runway", "audit", "-"),
                    "{m}"
                );
                fields[7].to_owned()
            })
            .collect();
        assert_all_in_order(what, &ids_of(&json), &expected);
    }

    // The chain holds, and every sink has acknowledged the head.
    let verified = platform.runway(&["audit", "verify", "--output", "json"]);
    assert!(verified.ok(), "{}", verified.all());
    let verified = verified.json();
    assert_eq!(verified["ok"], true, "{verified}");
    assert_eq!(verified["head"]["id"], last, "{verified}");
    wait_until(Duration::from_secs(10), "every cursor at the head", || {
        let sinks = export(&platform);
        [
            "siem",
            "siem-small",
            "archive",
            "syslog-udp",
            "syslog-local",
        ]
        .iter()
        .all(|name| sink(&sinks, name)["cursor"] == last && sink(&sinks, name)["lag"] == 0)
    });
    let text = platform.runway(&["audit", "verify"]);
    assert!(text.ok(), "{}", text.all());
    assert!(
        text.stdout.contains("the audit log's chain holds"),
        "{}",
        text.all()
    );
    assert!(
        text.stdout.contains("siem"),
        "the sinks are listed: {}",
        text.all()
    );

    // The exported file checks out offline, and an edited line is named.
    let offline = platform.runway(&["audit", "verify", "--file", exported.to_str().unwrap()]);
    assert!(offline.ok(), "{}", offline.all());
    assert!(
        offline.stdout.contains("the chain holds"),
        "{}",
        offline.all()
    );
    let edited_id = expected[3];
    let edited: String = file
        .lines()
        .map(|line| {
            let mut entry: Value = serde_json::from_str(line).unwrap();
            if entry["id"] == edited_id {
                entry["actor"] = json!("mallory");
            }
            format!("{}\n", serde_json::to_string(&entry).unwrap())
        })
        .collect();
    let tampered = scratch.path().join("tampered.jsonl");
    std::fs::write(&tampered, edited).unwrap();
    let offline = platform.runway(&[
        "audit",
        "verify",
        "--file",
        tampered.to_str().unwrap(),
        "--output",
        "json",
    ]);
    assert_eq!(offline.code, Some(1), "{}", offline.all());
    let found = offline.json();
    assert_eq!(found["ok"], false, "{found}");
    assert_eq!(found["first_broken"]["id"], edited_id, "{found}");

    // A row changed in the store's SQLite file, below the server: verify names it.
    let changed_id = expected[expected.len() / 2];
    let mut sqlite = std::process::Command::new("sqlite3");
    sqlite.arg(platform.data.join("runway.db"));
    let script = format!(
        ".timeout 5000\nUPDATE audit SET detail = '{{\"forged\":true}}' WHERE id = {changed_id};\n"
    );
    let ran = support::run(sqlite, Some(script.as_bytes()), support::COMMAND);
    assert!(ran.ok(), "sqlite3: {}", ran.all());
    let broken = platform.runway(&["audit", "verify"]);
    assert_eq!(broken.code, Some(1), "{}", broken.all());
    assert!(
        broken
            .stderr
            .contains(&format!("broken at entry {changed_id}:")),
        "{}",
        broken.all()
    );
    let broken = platform
        .runway(&["audit", "verify", "--output", "json"])
        .json();
    assert_eq!(broken["first_broken"]["id"], changed_id, "{broken}");
}
