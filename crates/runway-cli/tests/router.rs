//! `runway router` in front of three cells, all real sockets on loopback: each runner token
//! to its cell, a corrupted or unknown one to the legacy cell, session cookies, an older
//! runner's token in its JSON body (the body still forwarded whole), what the cells are told,
//! a long poll held, and a 1 GiB upload streamed through with bounded memory.

#![allow(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::routing::any;
use futures_util::StreamExt;

/// A cell: answers every request with its id, the router's headers, and the body's length
/// (read as it streams, never kept); `/api/v4/jobs/request?hold=S` waits S seconds first.
async fn cell(id: u64) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(any(move |request: Request| async move {
        let (parts, body) = request.into_parts();
        if let Some(hold) = parts
            .uri
            .query()
            .and_then(|q| q.strip_prefix("hold="))
            .and_then(|s| s.parse::<u64>().ok())
        {
            tokio::time::sleep(Duration::from_secs(hold)).await;
        }
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned()
        };
        let mut stream = body.into_data_stream();
        let (mut bytes, mut sum) = (0u64, 0u64);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.unwrap();
            bytes += chunk.len() as u64;
            sum = chunk
                .iter()
                .fold(sum, |s, b| s.wrapping_mul(31).wrapping_add(u64::from(*b)));
        }
        Body::from(format!(
            "cell={id} action={} type={} spoof={} bytes={bytes} sum={sum}\n",
            header("x-gitlab-http-router-rule-action"),
            header("x-gitlab-http-router-rule-type"),
            header("x-gitlab-http-router-spoofed"),
        ))
    }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

/// The router process, killed when dropped.
struct Router {
    child: Child,
    address: SocketAddr,
    admin: SocketAddr,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn start_router(dir: &std::path::Path, cells: &[SocketAddr]) -> Router {
    let listed: Vec<(u64, SocketAddr)> = (1..).zip(cells.iter().copied()).collect();
    start_router_with(dir, &listed, &[])
}

/// The router before the cells `listed` (id, address), cell 1 the legacy one, with `extra`
/// arguments; with none listed, no topology file.
fn start_router_with(
    dir: &std::path::Path,
    listed: &[(u64, SocketAddr)],
    extra: &[&str],
) -> Router {
    let rules = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../runway-cells/tests/fixtures/rules.json"
    );
    let topology = dir.join("topology.yml");
    let mut text = String::from("cells:\n");
    for (id, address) in listed {
        text.push_str(&format!(
            "  - {{id: {id}, address: \"{address}\", session_prefix: cell-{id}}}\n"
        ));
    }
    text.push_str("legacy_cell: 1\n");
    std::fs::write(&topology, text).unwrap();
    let (address, admin) = (free(), free());
    let mut child = Command::new(env!("CARGO_BIN_EXE_runway"))
        .args(["router", "--rules", rules])
        // No cells listed: the topology service's alone, with --legacy-cell in `extra`.
        .args(if listed.is_empty() {
            Vec::new()
        } else {
            vec!["--topology".as_ref(), topology.as_os_str()]
        })
        .args([
            "--listen",
            &address.to_string(),
            "--admin",
            &admin.to_string(),
        ])
        .arg("--access-log")
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    for pipe in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let log = std::sync::Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                log.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
    }
    let router = Router {
        child,
        address,
        admin,
        log,
    };
    let started = Instant::now();
    while TcpStream::connect(address).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the router did not listen: {}",
            router.log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    router
}

/// One HTTP/1.1 request (`Connection: close`); the status and body.
fn request(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: gitlab.example.com\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    read_response(stream)
}

fn read_response(mut stream: TcpStream) -> (u16, String) {
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (status, body)
}

fn token(prefix: &str, cell: u64) -> String {
    routable_token::encode(
        prefix,
        &routable_token::Claims::new()
            .with("c", cell)
            .with("o", 1007),
        &[4; 16],
    )
    .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn requests_reach_the_cell_that_owns_them() {
    let rt = runtime();
    let cells: Vec<SocketAddr> =
        rt.block_on(async { vec![cell(1).await, cell(2).await, cell(3).await] });
    let dir = tempfile::tempdir().unwrap();
    let router = start_router(dir.path(), &cells);
    let at = router.address;

    for id in [1, 2, 3] {
        let (status, body) = request(
            at,
            "POST",
            "/api/v4/jobs/request",
            &[("RUNNER-TOKEN", &token("glrt-", id))],
            b"{}",
        );
        assert_eq!(status, 200, "{body}");
        assert!(
            body.starts_with(&format!("cell={id} action=classify type=CELL_ID")),
            "{body}"
        );
        let (_, body) = request(
            at,
            "PATCH",
            "/api/v4/jobs/9/trace",
            &[
                ("RUNNER-TOKEN", &token("glrt-", id)),
                ("Content-Range", "0-4"),
            ],
            b"hello",
        );
        assert!(
            body.starts_with(&format!("cell={id} ")) && body.contains("bytes=5"),
            "{body}"
        );
    }
    // A cell that does not exist, a payload that does not decode, no token at all: the
    // legacy cell; a client's own router header is not passed on.
    let (_, body) = request(
        at,
        "GET",
        "/api/v4/jobs/request",
        &[("RUNNER-TOKEN", &token("glrt-", 7))],
        b"",
    );
    assert!(
        body.starts_with("cell=1 action=classify type=CELL_ID"),
        "{body}"
    );
    let good = token("glrt-", 3);
    let at_length = good.len() - 9;
    let corrupted = format!("{}zz{}", &good[..at_length], &good[at_length + 2..]);
    let (_, body) = request(
        at,
        "GET",
        "/",
        &[
            ("RUNNER-TOKEN", &corrupted),
            ("X-Gitlab-Http-Router-Spoofed", "1"),
        ],
        b"",
    );
    assert!(
        body.starts_with("cell=1 action=proxy type=- spoof=-"),
        "{body}"
    );
    // Session cookies.
    let (_, body) = request(
        at,
        "GET",
        "/dashboard",
        &[("Cookie", "_gitlab_session=cell-2-0a1b")],
        b"",
    );
    assert!(
        body.starts_with("cell=2 action=classify type=SESSION_PREFIX"),
        "{body}"
    );
    // An older runner: its token only in the JSON body, which still arrives whole.
    let body_of = |padding: usize, tokens: &[String]| {
        let tokens: String = tokens
            .iter()
            .map(|t| format!(r#""token": "{t}", "#))
            .collect();
        format!(
            r#"{{"info": {{"name": "runner"}}, {tokens}"last_update": "{}"}}"#,
            "x".repeat(padding)
        )
    };
    let post = |payload: &str| {
        let (_, body) = request(
            at,
            "POST",
            "/api/v4/jobs/request",
            &[("Content-Type", "application/json")],
            payload.as_bytes(),
        );
        let sum = payload
            .bytes()
            .fold(0u64, |s, b| s.wrapping_mul(31).wrapping_add(u64::from(b)));
        let whole = format!("bytes={} sum={sum}", payload.len());
        assert!(body.trim().ends_with(&whole), "{body} is not {whole}");
        body
    };
    let payload = body_of(4_000, &[token("glrt-", 3)]);
    assert!(post(&payload).starts_with("cell=3 action=classify type=CELL_ID"));
    // Given twice, the last token counts, as the cell reads it.
    let twice = body_of(10, &[token("glrt-", 2), token("glrt-", 3)]);
    assert!(post(&twice).starts_with("cell=3 "));
    // A body whose object does not end within the first 16 KiB is not judged by its token
    // (another may follow): the legacy cell, the body still whole.
    let long = body_of(40_000, &[token("glrt-", 3)]);
    assert!(post(&long).starts_with("cell=1 action=proxy"));

    // A long poll is held as long as the cell holds it.
    let started = Instant::now();
    let (status, body) = request(
        at,
        "POST",
        "/api/v4/jobs/request?hold=3",
        &[("RUNNER-TOKEN", &token("glrt-", 2))],
        b"{}",
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() >= Duration::from_secs(3) && body.starts_with("cell=2"),
        "{body}"
    );

    // Metrics per rule, cell and outcome; the access log names the rule.
    let (_, metrics) = request(router.admin, "GET", "/metrics", &[], b"");
    for line in [
        r#"runway_ingress_cell_decisions_total{service="router",env="cells",rule="session_token_header_runner_token",cell="2",outcome="classified"} 3"#,
        r#"runway_ingress_cell_decisions_total{service="router",env="cells",rule="session_token_header_runner_token",cell="1",outcome="fell_back"} 1"#,
        r#"runway_ingress_cell_decisions_total{service="router",env="cells",rule="default",cell="1",outcome="proxied"} 2"#,
    ] {
        assert!(metrics.contains(line), "no {line} in\n{metrics}");
    }
    assert!(
        metrics.contains(r#"revision="cell-3",class="2xx"}"#),
        "{metrics}"
    );
    let log = router.log.lock().unwrap().clone();
    assert!(
        log.contains(r#""rule":"runner_body_token","cell_outcome":"classified""#),
        "{log}"
    );
    drop(router);
}

/// 1 GiB streamed through the router to its cell (chunked, as an artifact upload), counted
/// by the cell as it arrives: the router's memory stays bounded, whatever the body's size.
#[test]
fn a_gigabyte_upload_streams_through_in_bounded_memory() {
    let rt = runtime();
    let cells: Vec<SocketAddr> = rt.block_on(async { vec![cell(1).await, cell(2).await] });
    let dir = tempfile::tempdir().unwrap();
    let router = start_router(dir.path(), &cells);
    let mut stream = TcpStream::connect(router.address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let head = format!(
        "POST /api/v4/jobs/5/artifacts HTTP/1.1\r\nHost: gitlab.example.com\r\nRUNNER-TOKEN: {}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        token("glrt-", 2)
    );
    stream.write_all(head.as_bytes()).unwrap();
    const TOTAL: u64 = 1 << 30;
    const CHUNK: usize = 1 << 20;
    let chunk = vec![b'a'; CHUNK];
    let started = Instant::now();
    let mut peak_kib = 0u64;
    for n in 0..(TOTAL / CHUNK as u64) {
        stream
            .write_all(format!("{CHUNK:x}\r\n").as_bytes())
            .unwrap();
        stream.write_all(&chunk).unwrap();
        stream.write_all(b"\r\n").unwrap();
        if n % 128 == 0 {
            peak_kib = peak_kib.max(resident_kib(router.child.id()));
        }
    }
    stream.write_all(b"0\r\n\r\n").unwrap();
    let (status, body) = read_response(stream);
    let elapsed = started.elapsed();
    peak_kib = peak_kib.max(high_water_kib(router.child.id()));
    assert_eq!(status, 200, "{body}");
    assert!(
        body.starts_with(&format!(
            "cell=2 action=classify type=CELL_ID spoof=- bytes={TOTAL}"
        )),
        "{body}"
    );
    eprintln!(
        "1 GiB through the router in {:.1} s ({:.0} MiB/s); the router's peak resident memory {} MiB",
        elapsed.as_secs_f64(),
        1024.0 / elapsed.as_secs_f64(),
        peak_kib / 1024
    );
    assert!(
        peak_kib < 128 * 1024,
        "the router held {peak_kib} KiB: the body was buffered"
    );
}

/// A process's resident memory now, in KiB.
fn resident_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// Its peak resident memory, in KiB.
fn high_water_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// GitLab's topology service, a real HTTP server: it places the cells it is given, answers
/// `{"code": 5}` for any other, counts what it is asked, and can be slowed.
struct TopologyService {
    address: SocketAddr,
    asked: std::sync::Arc<std::sync::atomic::AtomicU64>,
    slow: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

async fn topology_service(cells: std::collections::HashMap<String, SocketAddr>) -> TopologyService {
    use std::sync::atomic::Ordering;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let slow = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (count, delay) = (asked.clone(), slow.clone());
    let app = axum::Router::new().route(
        "/v1/classify",
        axum::routing::post(move |body: axum::body::Bytes| {
            let (count, delay, cells) = (count.clone(), delay.clone(), cells.clone());
            async move {
                count.fetch_add(1, Ordering::SeqCst);
                if delay.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
                let asked: serde_json::Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(asked["type"], "CELL_ID");
                let value = asked["value"].as_str().unwrap_or_default().to_owned();
                let (status, answer) = match cells.get(&value) {
                    Some(address) => (
                        axum::http::StatusCode::OK,
                        serde_json::json!({"action": "PROXY", "proxy": {"address": address.to_string()}}),
                    ),
                    None => (
                        axum::http::StatusCode::NOT_FOUND,
                        serde_json::json!({"code": 5, "message": format!("cell not found: {value}")}),
                    ),
                };
                (status, answer.to_string())
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    TopologyService {
        address,
        asked,
        slow,
    }
}

/// With the topology service: a classification goes where it says (the topology file need
/// not list the cell), its answer is kept; a cell it does not know goes to the legacy cell;
/// slowed past the timeout, a kept answer still serves, the file's cells stand in for new
/// classifications, and else the legacy cell, each counted.
#[test]
fn the_topology_service_places_cells_and_its_failures_are_bounded() {
    use std::sync::atomic::Ordering;
    let rt = runtime();
    let (one, two, three, four) =
        rt.block_on(async { (cell(1).await, cell(2).await, cell(3).await, cell(4).await) });
    let service = rt.block_on(topology_service(
        [
            ("2".to_owned(), two),
            ("3".to_owned(), three),
            ("4".to_owned(), four),
        ]
        .into(),
    ));
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{}", service.address);
    let router = start_router_with(
        dir.path(),
        &[(1, one), (3, three)],
        &[
            "--topology-service",
            &url,
            "--topology-timeout-ms",
            "300",
            "--topology-cache-ms",
            "500",
        ],
    );
    let at = router.address;
    let send = |id: u64| {
        let token = token("glrt-", id);
        request(
            at,
            "POST",
            "/api/v4/jobs/request",
            &[("RUNNER-TOKEN", &token)],
            b"{}",
        )
        .1
    };
    // Cell 2 is not in the file: the service places it, and its answer is kept.
    assert!(send(2).starts_with("cell=2 "), "placed by the service");
    assert!(send(2).starts_with("cell=2 "));
    assert_eq!(
        service.asked.load(Ordering::SeqCst),
        1,
        "the answer was not kept"
    );
    // A cell the service does not know: the legacy cell.
    assert!(send(9).starts_with("cell=1 "));
    assert_eq!(service.asked.load(Ordering::SeqCst), 2);
    // What no cell could be (a CELL_ID past u64, from a client's path) is not asked about.
    let (_, body) = request(
        at,
        "GET",
        &format!("/-/cells/{}/x", "9".repeat(40)),
        &[],
        b"",
    );
    assert!(body.starts_with("cell=1 action=classify"), "{body}");
    assert_eq!(service.asked.load(Ordering::SeqCst), 2);

    service.slow.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(600));
    // Its answer for cell 2 is stale but at hand; 3 was never asked, and the file lists it;
    // 4 neither: the legacy cell. None waits much past the timeout.
    let started = Instant::now();
    assert!(send(2).starts_with("cell=2 "));
    assert!(send(3).starts_with("cell=3 "));
    assert!(send(4).starts_with("cell=1 "));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "waited {:?}",
        started.elapsed()
    );
    let (_, metrics) = request(router.admin, "GET", "/metrics", &[], b"");
    assert!(
        metrics.contains("runway_ingress_topology_errors_total 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"cell="1",outcome="fell_back"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"cell="3",outcome="static"} 1"#),
        "{metrics}"
    );
}

/// `--tls-cert`, `--tls-key`, `--tls-domain`: runners reach the router over HTTPS with the
/// operator's certificate, and are routed as over HTTP.
#[test]
fn the_router_serves_https_with_the_operators_certificate() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = runtime();
    let cells: Vec<SocketAddr> = rt.block_on(async { vec![cell(1).await, cell(2).await] });
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["gitlab.example.com".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let listed: Vec<(u64, SocketAddr)> = (1..).zip(cells.iter().copied()).collect();
    let router = start_router_with(
        dir.path(),
        &listed,
        &[
            "--tls-cert",
            cert_path.to_str().unwrap(),
            "--tls-key",
            key_path.to_str().unwrap(),
            "--tls-domain",
            "gitlab.example.com",
        ],
    );
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(cert.pem().as_bytes()).unwrap()])
        .resolve("gitlab.example.com", router.address)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let url = format!(
        "https://gitlab.example.com:{}/api/v4/jobs/request",
        router.address.port()
    );
    let body = rt.block_on(async {
        client
            .post(&url)
            .header("RUNNER-TOKEN", token("glrt-", 2))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    assert!(body.starts_with("cell=2 action=classify"), "{body}");
}

/// `--topology-service` with `--legacy-cell` and no topology file: the service places every
/// classification, the legacy cell takes the rest.
#[test]
fn the_topology_service_alone_with_a_legacy_cell() {
    let rt = runtime();
    let (one, two) = rt.block_on(async { (cell(1).await, cell(2).await) });
    let service = rt.block_on(topology_service([("2".to_owned(), two)].into()));
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{}", service.address);
    let legacy = one.to_string();
    let router = start_router_with(
        dir.path(),
        &[],
        &["--topology-service", &url, "--legacy-cell", &legacy],
    );
    let send = |id: u64| {
        let token = token("glrt-", id);
        request(
            router.address,
            "GET",
            "/api/v4/jobs/request",
            &[("RUNNER-TOKEN", &token)],
            b"",
        )
        .1
    };
    assert!(send(2).starts_with("cell=2 "));
    assert!(send(5).starts_with("cell=1 "));
    let (_, body) = request(router.address, "GET", "/users/sign_in", &[], b"");
    assert!(body.starts_with("cell=1 action=proxy"), "{body}");
    drop(router);

    // The service stopped (nothing listens where it was): every classification goes to the
    // legacy cell at once, each failure counted.
    let stopped = format!("http://{}", free());
    let dir = tempfile::tempdir().unwrap();
    let router = start_router_with(
        dir.path(),
        &[],
        &["--topology-service", &stopped, "--legacy-cell", &legacy],
    );
    let started = Instant::now();
    for id in [2, 3] {
        let token = token("glrt-", id);
        let (_, body) = request(router.address, "GET", "/", &[("RUNNER-TOKEN", &token)], b"");
        assert!(body.starts_with("cell=1 action=classify"), "{body}");
    }
    assert!(started.elapsed() < Duration::from_secs(3));
    let (_, metrics) = request(router.admin, "GET", "/metrics", &[], b"");
    assert!(
        metrics.contains("runway_ingress_topology_errors_total 2"),
        "{metrics}"
    );
}
