//! Several `runway server` replicas on one real PostgreSQL store (`scripts/with-postgres`),
//! on one machine: they share the data directory (its runtime, master key and CA), each
//! serves the API on its own port, and the holder of the store's lease runs the controller,
//! feeding the ingress that runs beside them (`runway ingress --control-listen`). Killed or
//! paused, the leader is replaced within the lease, and no request through the ingress fails.

#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::time::{Duration, Instant};

use support::{Load, NetworkIngress, Platform, Settings, have_python, set_env_file};

const HOST: &str = "hello.dev.localhost";
/// The lease in these tests: a failover within it, plus a round.
const LEASE: Duration = Duration::from_secs(2);

/// Two replicas (the first leads), the ingress they feed, and what they share.
struct Replicas {
    first: Platform,
    second: Platform,
    ingress: NetworkIngress,
    _pki: tempfile::TempDir,
}

fn replicas(url: &str) -> Replicas {
    let pki = tempfile::tempdir().unwrap();
    let (ingress_tls, control_tls) = (pki.path().join("ingress"), pki.path().join("control"));
    runway_ingress::control_tls::generate(&ingress_tls, &control_tls).unwrap();
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (control, https) = (free(), free());
    let first = Platform::start(&Settings {
        sections: format!(
            "store:\n  url: {url}\nleader:\n  lease_ms: {}\n",
            LEASE.as_millis()
        ),
        ingress: format!(
            "  remote:\n    addresses: ['{control}']\n    tls_dir: {}\n    https_port: {}\n    \
             resolve_interval_ms: 100\n",
            control_tls.display(),
            https.port()
        ),
        ..Settings::default()
    });
    // The ingress serves with the platform's CA, made by the first start.
    let ingress = NetworkIngress::start_at(
        &pki.path().join("ingress-state"),
        &first.data.join("ca"),
        &ingress_tls,
        control,
        https,
    );
    wait_for_log(&first, "this replica leads", LEASE * 3);
    let second = first.replica();
    wait_for_log(&second, "leads; this replica follows", LEASE * 3);
    Replicas {
        first,
        second,
        ingress,
        _pki: pki,
    }
}

impl Replicas {
    /// `hello` onboarded and deployed (`GREETING=v1`) through the follower, carried out by
    /// the leader, and served; `manifest` changes the repository's manifest first.
    fn serving_hello(&self, manifest: impl FnOnce(&std::path::Path)) -> std::path::PathBuf {
        let repo = self.second.onboard("hello", &["dev"], "s3cr3t");
        manifest(&repo);
        set_env_file(&repo, "dev", &[("GREETING", "v1")]);
        let deploy = self.second.deploy(&repo, "dev");
        assert!(
            deploy.ok(),
            "deploy: {}\n{}\n{}",
            deploy.all(),
            self.first.log(),
            self.second.log()
        );
        let (status, body) = self.first.get(HOST, "/", Duration::from_secs(10));
        assert_eq!(status, 200, "{body}");
        repo
    }
}

fn wait_for_log(platform: &Platform, needle: &str, bound: Duration) -> Duration {
    let started = Instant::now();
    while !platform.log().contains(needle) {
        assert!(
            started.elapsed() < bound,
            "never said {needle:?}:\n{}",
            platform.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    started.elapsed()
}

/// The leader killed under load: the other takes over within the lease, the deploy after it
/// goes through, and no request through the ingress fails.
#[test]
fn a_killed_leader_is_replaced_and_no_request_fails() {
    if !have_python() {
        return;
    }
    let Some(url) = support::test_database("replicas kill") else {
        return;
    };
    let replicas = replicas(&url);
    // A deploy through the follower's API: the leader carries it out.
    let repo = replicas.serving_hello(|_| {});
    let Replicas {
        mut first,
        second,
        ingress,
        _pki,
    } = replicas;
    // Through the follower, the status shows what it observes, and who leads.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = second.status("hello", "dev");
        let instances = status["instances"].as_array().map_or(0, Vec::len);
        let routed = status["routes"].as_array().is_some_and(|r| !r.is_empty());
        let control_plane = &status["control_plane"];
        let leader = control_plane["leader"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if instances == 1
            && routed
            && !leader.is_empty()
            && control_plane["replica"].as_str() != Some(leader.as_str())
        {
            let through_leader = first.status("hello", "dev");
            assert_eq!(
                through_leader["control_plane"],
                serde_json::json!({"replica": leader, "leader": leader}),
                "{through_leader:#}"
            );
            let text = second.runway(&["status", "--service", "hello", "--env", "dev"]);
            assert!(
                text.stdout
                    .contains(&format!("control plane: {leader} leads; answered by")),
                "{}",
                text.all()
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the follower's status: {status:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let client = first.ingress_client(HOST);
    let load = Load::start(&first.rt, &client, &first.ingress_url(HOST, "/"), 4, None);
    std::thread::sleep(Duration::from_millis(500));
    let killed = Instant::now();
    first.kill9();
    let failover = wait_for_log(&second, "this replica leads", LEASE * 4);
    eprintln!(
        "failover: the follower leads {:.2} s after the leader's kill -9 (lease {:?})",
        failover.as_secs_f64(),
        LEASE
    );
    assert!(killed.elapsed() < LEASE * 4);

    set_env_file(&repo, "dev", &[("GREETING", "v2")]);
    let deploy = second.deploy(&repo, "dev");
    assert!(
        deploy.ok(),
        "deploy after failover: {}\n{}",
        deploy.all(),
        second.log()
    );
    assert!(deploy.all().contains("hello-dev-00002"), "{}", deploy.all());
    let (_, body) = second.get_until(HOST, "/", Duration::from_secs(20), |s, b| {
        s == 200 && b.starts_with("v2")
    });
    assert!(body.starts_with("v2"), "{body}");
    let failures = load.failures();
    let (ok, failed) = load.stop(&first.rt);
    eprintln!(
        "failures: {:?}",
        failures.iter().take(5).collect::<Vec<_>>()
    );
    eprintln!("through the failover: {ok} requests, {failed} failed");
    assert_eq!(failed, 0, "requests failed across the failover");
    assert!(ok > 20, "only {ok} requests");
    drop(ingress);
}

/// A leader paused (SIGSTOP) past its lease is replaced; resumed, it finds another leading
/// and exits without acting (its writes are fenced, its own deadline passed).
#[test]
fn a_paused_leader_is_fenced_and_exits_when_it_wakes() {
    if !have_python() {
        return;
    }
    let Some(url) = support::test_database("replicas pause") else {
        return;
    };
    let replicas = replicas(&url);
    let repo = replicas.serving_hello(|_| {});
    let Replicas {
        mut first,
        second,
        ingress,
        _pki,
    } = replicas;

    let pid = nix::unistd::Pid::from_raw(i32::try_from(first.server_pid()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    wait_for_log(&second, "this replica leads", LEASE * 4);
    let deploy = second.deploy(&repo, "dev");
    assert!(
        deploy.ok(),
        "deploy while paused: {}\n{}",
        deploy.all(),
        second.log()
    );

    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    wait_for_log(&first, "lost the lease and exits", LEASE * 4);
    let server = first.server.as_mut().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the old leader did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(75), "{}", first.log());
    let (status, _) = second.get(HOST, "/", Duration::from_secs(10));
    assert_eq!(status, 200);
    drop(ingress);
}

/// PostgreSQL restarted under the replicas: the ingress serves throughout, and once the
/// database is back the replicas go on (a leader leads, a deploy goes through).
#[test]
fn the_replicas_go_on_after_a_database_restart() {
    if !have_python() {
        return;
    }
    let Some(url) = support::test_database("replicas restart") else {
        return;
    };
    let restart = std::env::var("RUNWAY_TEST_POSTGRES_RESTART")
        .expect("scripts/with-postgres sets RUNWAY_TEST_POSTGRES_RESTART");
    let replicas = replicas(&url);
    let repo = replicas.serving_hello(|_| {});
    let Replicas {
        first,
        second,
        ingress,
        _pki,
    } = replicas;

    let client = first.ingress_client(HOST);
    let load = Load::start(&first.rt, &client, &first.ingress_url(HOST, "/"), 4, None);
    let restarting = Instant::now();
    let restarted = std::process::Command::new(&restart).output().unwrap();
    eprintln!(
        "the database restarted in {:.1} s",
        restarting.elapsed().as_secs_f64()
    );
    assert!(
        restarted.status.success(),
        "{}",
        String::from_utf8_lossy(&restarted.stderr)
    );
    std::thread::sleep(LEASE);

    // Through whichever replica answers: the API reconnects, and the leader deploys.
    set_env_file(&repo, "dev", &[("GREETING", "v2")]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let back = Instant::now();
    loop {
        let deploy = second.deploy(&repo, "dev");
        if deploy.ok() {
            eprintln!(
                "a deploy went through {:.1} s after the database was back",
                back.elapsed().as_secs_f64()
            );
            break;
        }
        eprintln!("deploy refused: {}", deploy.all());
        assert!(
            Instant::now() < deadline,
            "no deploy after the restart: {}\n{}\n{}",
            deploy.all(),
            first.log(),
            second.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    second.get_until(HOST, "/", Duration::from_secs(20), |s, b| {
        s == 200 && b.starts_with("v2")
    });
    let failures = load.failures();
    let (ok, failed) = load.stop(&first.rt);
    eprintln!("through the database's restart: {ok} requests, {failed} failed {failures:?}");
    assert_eq!(failed, 0);
    drop(ingress);
}

/// The leader killed in the middle of a canary rollout, at several moments (in its first
/// step, in its pause, near its end): each time the other replica takes over and carries
/// the rollout to 100 %, from the progress the store holds, with no request failed; the
/// killed replica starts again as a follower and becomes the next one killed.
#[test]
fn a_rollout_survives_its_leader_killed_at_several_moments() {
    if !have_python() {
        return;
    }
    let Some(url) = support::test_database("replicas rollout") else {
        return;
    };
    let replicas = replicas(&url);
    let repo = replicas.serving_hello(|repo| {
        let rollout = "      steps: [50, 100]\n      pause_seconds: 2\n      analysis:\n        \
                       min_requests: 5\n";
        support::set_manifest(repo, "runway_canary", rollout, 1, 1, 100);
    });
    let Replicas {
        first,
        second,
        ingress,
        _pki,
    } = replicas;

    let client = first.ingress_client(HOST);
    let url_through_ingress = first.ingress_url(HOST, "/");
    let load = Load::start(&first.rt, &client, &url_through_ingress, 4, Some(25.0));
    let mut replicas = [first, second];
    let mut leader = 0;
    for (n, moment) in [300, 1_500, 3_000].into_iter().enumerate() {
        let version = format!("v{}", n + 2);
        set_env_file(&repo, "dev", &[("GREETING", &version)]);
        let follower = 1 - leader;
        let started = replicas[follower].runway_with(
            &["deploy", "--env", "dev", "--output", "json"],
            Some(repo.as_os_str()),
            None,
            support::COMMAND,
        );
        assert!(
            started.ok(),
            "{}\n--- the follower's log\n{}",
            started.all(),
            replicas[follower].log()
        );
        let id = started.json()["id"].clone();
        std::thread::sleep(Duration::from_millis(moment));
        replicas[leader].kill9();
        let ended = replicas[follower].wait_deployment(&id, Duration::from_secs(90));
        assert_eq!(
            ended["state"],
            "succeeded",
            "killed {moment} ms in: {ended}\n{}",
            replicas[follower].log()
        );
        replicas[follower].get_until(HOST, "/", Duration::from_secs(20), |s, b| {
            s == 200 && b.starts_with(&version)
        });
        eprintln!("leader killed {moment} ms into the rollout: it completed on the other");
        replicas[leader].restart();
        leader = follower;
    }
    let failures = load.failures();
    let (ok, failed) = load.stop(&replicas[0].rt);
    eprintln!("through three failovers mid-rollout: {ok} requests, {failed} failed {failures:?}");
    assert_eq!(failed, 0);
    drop(ingress);
}
