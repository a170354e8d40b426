//! The trust boundary end to end, as a hostile tenant tries it: a deploy token, a manifest
//! and the service's own code against the real `runway server`, its CLI and its ingress. A
//! tenant's process is refused unless allowed; allowed, it runs as its service's own user and
//! reaches neither the server's environment nor its data directory nor other services; a
//! decommissioned service's token and secrets do not pass to a service onboarded again under
//! its name.
//!
//! Every wait is bounded; every server and instance is killed when a test ends
//! (`support::Platform`'s drop).

#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;
use support::{Platform, Settings, have_python};

/// A deploy token for `service` in `dev`, made by the admin.
fn deploy_token(platform: &Platform, service: &str) -> String {
    let (status, created) = platform.call(
        Method::POST,
        "/v1/tokens",
        Some(&platform.token),
        Some(json!({"name": format!("ci-{service}"),
            "scope": {"deploy": {"service": service, "environments": ["dev"]}}})),
    );
    assert_eq!(status, 201, "{created}");
    created["token"].as_str().unwrap().to_owned()
}

/// `runway deploy --env dev --wait REPO` with `token`.
fn deploy_as(platform: &Platform, token: &str, repo: &Path) -> support::Ran {
    let mut deploy = Command::new(support::RUNWAY);
    deploy
        .env("RUNWAY_CONFIG", &platform.cli_config)
        .env("RUNWAY_TOKEN", token)
        .args(["deploy", "--env", "dev", "--wait", "--timeout", "60s"])
        .arg(repo);
    support::run(deploy, None, Duration::from_secs(90))
}

/// The host pid of the first instance of `service` (from `runway local ps`).
fn instance_pid(platform: &Platform, service: &str) -> u64 {
    platform
        .local_ps()
        .iter()
        .find(|i| i["service"] == service && i["phase"] == "running")
        .and_then(|i| i["pid"].as_u64())
        .unwrap_or_else(|| panic!("no running instance of {service}"))
}

#[test]
fn a_tenants_process_needs_leave_and_then_reaches_nothing_outside_its_service() {
    if !have_python() || !runway_oci::testing::require_tools("process isolation", &["runc"]) {
        return;
    }
    let platform = Platform::start(&Settings {
        allow_processes: false,
        ..Settings::default()
    });
    let repo = platform.onboard("tenant", &["dev"], "tenant-secret");
    let token = deploy_token(&platform, "tenant");

    // With a deploy token only, a plain process is refused, saying why and what to do.
    let refused = deploy_as(&platform, &token, &repo);
    assert!(!refused.ok(), "{}", refused.all());
    for says in ["may not run plain processes", "--allow-processes"] {
        assert!(refused.stderr.contains(says), "{}", refused.all());
    }
    // The tenant cannot give itself the leave.
    let denied = platform.runway_as(
        &token,
        &["services", "update", "tenant", "--allow-processes", "true"],
    );
    assert!(!denied.ok(), "{}", denied.all());

    // An admin allows it for this service; the same deploy then runs.
    let allowed = platform.runway(&["services", "update", "tenant", "--allow-processes", "true"]);
    assert!(allowed.ok(), "{}", allowed.all());
    assert!(
        allowed.stdout.contains("plain processes: allowed"),
        "{}",
        allowed.all()
    );
    let deployed = deploy_as(&platform, &token, &repo);
    assert!(deployed.ok(), "{}", deployed.all());

    // Another service with a secret of its own, running beside it.
    let other = platform.onboard("other", &["dev"], "the-other-teams-secret");
    platform.runway(&["services", "update", "other", "--allow-processes", "true"]);
    let deployed = platform.deploy(&other, "dev");
    assert!(deployed.ok(), "{}", deployed.all());

    let host = "tenant.dev.localhost";
    let get = |path: &str| platform.get(host, path, Duration::from_secs(10)).1;

    // Its environment is its revision's: nothing of the server's (cargo's CARGO_* and the
    // like, which the server inherited from this test), no other service's secret.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let names: BTreeSet<String> = get("/env")
        .lines()
        .map(str::to_owned)
        // Python sets LC_CTYPE itself under the C locale (PEP 538).
        .filter(|name| name != "LC_CTYPE")
        .collect();
    let expected: BTreeSet<String> = [
        "API_KEY",
        "GREETING",
        "HOME",
        "K_CONFIGURATION",
        "K_REVISION",
        "K_SERVICE",
        "PATH",
        "PORT",
        // Where its identity token is (bound into its sandbox; see tests/identity.rs).
        "RUNWAY_IDENTITY_TOKEN_FILE",
    ]
    .map(str::to_owned)
    .into();
    assert_eq!(names, expected);

    // Its own unprivileged user, derived from its service's identity.
    let services = platform.runway(&["services", "list", "--output", "json"]);
    let id = services
        .json()
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "tenant")
        .and_then(|s| s["id"].as_u64())
        .unwrap();
    assert_eq!(get("/id").trim(), format!("uid={0} gid={0}", 200_000 + id));

    // The data directory, the server's and the other service's processes are out of reach.
    let read = |path: &Path| get(&format!("/read?path={}", path.display()));
    for private in ["master.key", "runway.db", "server.lock", "ca/ca-key.pem"] {
        let answer = read(&platform.data.join(private));
        assert!(!answer.starts_with("read"), "{private}: {answer}");
    }
    let server = platform.server_pid();
    let other_pid = instance_pid(&platform, "other");
    for pid in [u64::from(server), other_pid] {
        let answer = read(Path::new(&format!("/proc/{pid}/environ")));
        assert!(!answer.starts_with("read"), "/proc/{pid}/environ: {answer}");
    }
    // Its network is its own, on the port its manifest names: the ingress reaches it at its
    // own address; it reaches neither the other service's instance nor what listens on the
    // host's loopback (the API, the ingress), on the host's end of its link or not.
    let own = platform.address_of("tenant");
    let theirs = platform.address_of("other");
    assert!(
        own.starts_with("10.213.") && own.ends_with(":8080"),
        "{own}"
    );
    assert!(theirs.starts_with("10.213.") && own != theirs, "{theirs}");
    let connect = |to: &str| get(&format!("/connect?to={to}"));
    assert_eq!(connect(&own).trim(), "connected", "its own address");
    let api = platform.api();
    let api = api.trim_start_matches("http://").trim_end_matches('/');
    let api_port = api.rsplit(':').next().unwrap();
    let own_ip: std::net::Ipv4Addr = own.split(':').next().unwrap().parse().unwrap();
    let host_end = std::net::Ipv4Addr::from(u32::from(own_ip) - 1);
    for target in [
        theirs.clone(),
        api.to_owned(),
        platform.https().to_string(),
        format!("{host_end}:{api_port}"),
    ] {
        let answer = connect(&target);
        assert_ne!(answer.trim(), "connected", "{target} is in reach");
    }

    // Its own code is there to read: the snapshot deployed, not the deployer's working tree.
    assert!(
        get("/read?path=app.py").starts_with("read"),
        "no code to read"
    );
    let tree = read(&repo.join("app.py"));
    assert!(
        !tree.starts_with("read"),
        "the working tree is in reach: {tree}"
    );

    // The leave taken back: the running process stops, and does not start again, saying why.
    let revoked = platform.runway(&["services", "update", "tenant", "--allow-processes", "false"]);
    assert!(revoked.ok(), "{}", revoked.all());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = platform.runway(&["status", "--service", "tenant", "--output", "json"]);
        assert!(status.ok(), "{}", status.all());
        let status = status.json();
        let live = status["instances"].as_array().map_or(0, |all| {
            all.iter()
                .filter(|i| i["phase"] != "exited" && i["phase"] != "failed")
                .count()
        });
        if live == 0
            && status["revisions"]
                .to_string()
                .contains("may not run plain processes")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running after the leave was taken back: {status}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // The other service keeps its leave and its process.
    let (status, _) = platform.get("other.dev.localhost", "/", Duration::from_secs(10));
    assert_eq!(status, 200);
}

#[test]
fn a_decommissioned_services_token_and_secrets_do_not_pass_to_its_namesake() {
    let platform = Platform::start(&Settings::default());
    platform.onboard("app", &["dev"], "old-team-secret");
    let old_token = deploy_token(&platform, "app");
    let first = platform
        .runway(&["services", "list", "--output", "json"])
        .json()[0]["id"]
        .as_u64()
        .unwrap();

    let gone = platform.runway(&["services", "delete", "app", "--yes"]);
    assert!(gone.ok(), "{}", gone.all());
    assert!(
        gone.stdout.contains("with its secrets and deploy tokens"),
        "{}",
        gone.all()
    );

    // Another team onboards a service of the same name.
    let created = platform.runway(&["services", "create", "app", "--env", "dev"]);
    assert!(created.ok(), "{}", created.all());
    let listed = platform
        .runway(&["services", "list", "--output", "json"])
        .json();
    assert_ne!(listed[0]["id"].as_u64().unwrap(), first, "{listed}");
    let secrets = platform.runway(&["secrets", "list", "--service", "app", "--env", "dev"]);
    assert!(secrets.ok(), "{}", secrets.all());
    assert!(!secrets.stdout.contains("API_KEY"), "{}", secrets.all());

    // The old team's token reaches nothing of it: not its secrets, not its status.
    for (method, path, body) in [
        (
            Method::PUT,
            "/v1/services/app/environments/dev/secrets/API_KEY",
            Some(json!({"value": "planted"})),
        ),
        (
            Method::GET,
            "/v1/services/app/environments/dev/status",
            None,
        ),
    ] {
        let (status, answer) = platform.call(method, path, Some(&old_token), body);
        assert_eq!(status, 401, "{path}: {answer}");
    }
    let secrets = platform.runway(&["secrets", "list", "--service", "app", "--env", "dev"]);
    assert!(!secrets.stdout.contains("API_KEY"), "{}", secrets.all());
}

#[test]
fn an_image_on_an_address_inside_the_machine_is_refused_without_connecting() {
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("imaged", &["dev"], "image-secret");
    support::set_image_manifest(&repo, 1, 1);
    // A port on this machine the tenant would like the server to reach.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let inside = listener.local_addr().unwrap();
    for reference in [
        format!("{inside}/team/app:1"),
        "169.254.169.254/latest/meta:1".to_owned(),
        "localhost:5000/app:1".to_owned(),
    ] {
        let ran = platform.deploy_image(&repo, "dev", &reference);
        assert!(!ran.ok(), "{reference}: {}", ran.all());
        assert!(
            ran.stderr.contains("not allowed"),
            "{reference}: {}",
            ran.all()
        );
    }
    assert!(
        listener.accept().is_err(),
        "the server connected to {inside} for a tenant's image"
    );
}

/// Sends `request` over TLS to the ingress as `host` (its SNI) and returns what came back,
/// at most 2 s of it; `None` when the ingress refuses the handshake (a host it does not serve
/// yet, such as a revision's tag before the revision exists).
async fn raw_tls(platform: &Platform, host: &str, request: &[u8]) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(platform.ca()).unwrap();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(platform.https())
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).unwrap();
    let mut tls = connector.connect(name, tcp).await.ok()?;
    let _ = tls.write_all(request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), tls.read_to_end(&mut answer)).await;
    Some(String::from_utf8_lossy(&answer).into_owned())
}

/// Anonymous clients sending broken bodies to a canary's tag URL and to the service's own
/// cannot fail the canary: their requests are their own 400s, never the revision's 5xx, and
/// the good revision walks to 100 % while real traffic sees no failure.
#[test]
fn a_poisoned_canary_is_not_rolled_back() {
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], "canary-secret");
    // Judged on errors alone: the latency of a loaded 2-core machine is not this test's.
    let rollout = "      steps: [50, 100]\n      pause_seconds: 3\n      analysis:\n        \
                   min_requests: 20\n        min_p99_increase_ms: 60000\n";
    support::set_manifest(&repo, "runway_canary", rollout, 1, 1, 100);
    support::set_env_file(&repo, "dev", &[("GREETING", "v1")]);
    let first = platform.deploy(&repo, "dev");
    assert!(first.ok(), "first deploy: {}", first.all());
    let host = "hello.dev.localhost";
    platform.get(host, "/", Duration::from_secs(10));
    let client = platform.ingress_client(host);
    let load = support::Load::start(
        &platform.rt,
        &client,
        &platform.ingress_url(host, "/"),
        4,
        Some(40.0),
    );

    // While the canary runs, broken chunked bodies at its tag URL and at the service's.
    let stop = AtomicBool::new(false);
    let answers = Mutex::new(Vec::new());
    let (deployed, sent) = std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            platform.rt.block_on(async {
                let mut sent = 0u32;
                while !stop.load(Ordering::Relaxed) && sent < 2_000 {
                    for target in ["r2---hello.dev.localhost", host] {
                        let request = format!(
                            "POST / HTTP/1.1\r\nHost: {target}\r\nTransfer-Encoding: \
                             chunked\r\n\r\n5\r\nhello\r\nZZ\r\n"
                        );
                        if let Some(answer) = raw_tls(&platform, target, request.as_bytes()).await {
                            answers.lock().unwrap().push(answer);
                            sent += 1;
                        } else {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
                sent
            })
        });
        support::set_env_file(&repo, "dev", &[("GREETING", "v2")]);
        let deployed = platform.deploy(&repo, "dev");
        stop.store(true, Ordering::Relaxed);
        (deployed, worker.join().unwrap())
    });
    let answers = answers.into_inner().unwrap();
    assert!(
        deployed.ok(),
        "the canary was failed by broken requests: {}\nserver:\n{}",
        deployed.all(),
        platform.log()
    );
    assert!(sent >= 10, "only {sent} broken requests were sent");
    for answer in &answers {
        let status = answer.split(' ').nth(1).unwrap_or("");
        assert!(
            !status.starts_with('5'),
            "a broken request got a server error: {answer}"
        );
    }
    let (ok, failed) = load.stop(&platform.rt);
    assert_eq!(failed, 0, "real requests failed: {ok} ok");
    let (code, listed) = platform.call(
        Method::GET,
        "/v1/services/hello/environments/dev/deployments?limit=1",
        Some(&platform.token),
        None,
    );
    assert_eq!(code, 200);
    assert_eq!(listed[0]["state"], "succeeded", "{listed:#}");
    eprintln!(
        "poisoned canary: {sent} broken requests during the rollout, {ok} real ones, 0 failed, \
         the canary reached 100 %"
    );
}

/// A flood of connections from one client past its share is refused at accept, while another
/// client (another loopback address) is served through the ingress and the API keeps
/// answering.
#[test]
fn a_connection_flood_is_refused_while_others_are_served() {
    use std::io::Read;
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], "flood-secret");
    let deployed = platform.deploy(&repo, "dev");
    assert!(deployed.ok(), "{}", deployed.all());
    let host = "hello.dev.localhost";
    platform.get(host, "/", Duration::from_secs(10));

    // 400 connections from 127.0.0.1 that say nothing: more than one client's share (256).
    let flood: Vec<std::net::TcpStream> = (0..400)
        .filter_map(|_| std::net::TcpStream::connect(platform.https()).ok())
        .collect();
    assert!(flood.len() > 300, "only {} connected", flood.len());
    // Refused ones are closed at once; held ones wait for a handshake that never comes.
    std::thread::sleep(Duration::from_millis(500));
    let closed = flood
        .iter()
        .filter(|stream| {
            stream
                .set_read_timeout(Some(Duration::from_millis(20)))
                .unwrap();
            // A held connection has nothing to say yet: the read times out.
            match (&**stream).read_exact(&mut [0u8; 1]) {
                Err(e) => !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                Ok(()) => true,
            }
        })
        .count();
    let held = flood.len() - closed;
    assert!(
        (200..=256).contains(&held),
        "{held} of {} flood connections held",
        flood.len()
    );

    // Another client, from another address, is served; so is the API.
    let pem = std::fs::read(platform.ca()).unwrap();
    let other = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()])
        .resolve(host, platform.https())
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let url = platform.ingress_url(host, "/");
    let served = platform.rt.block_on(async {
        let mut served = 0;
        for _ in 0..20 {
            if let Ok(response) = other.get(&url).send().await
                && response.status().is_success()
            {
                served += 1;
            }
        }
        served
    });
    assert_eq!(served, 20, "another client was not served during the flood");
    let (status, _) = platform.call(Method::GET, "/v1/whoami", Some(&platform.token), None);
    assert_eq!(status, 200, "the API did not answer during the flood");
    eprintln!(
        "flood: {} connections from one address, {held} held, {closed} closed at accept; \
         another address served 20 of 20; the API answered",
        flood.len()
    );
    drop(flood);
}
