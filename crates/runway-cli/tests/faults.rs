//! Faults of tenants' instances, through the real server, supervisors and ingress: a full disk
//! (the data directory on a tmpfs of the test's own, filled while instances serve and print a
//! line per request), an instance printing as fast as it can, one that crashes, one that never
//! answers its probe.

#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use support::{Load, Platform, Settings, have_python, set_env_file, set_manifest};

const HOST: &str = "chatty.dev.localhost";

/// Tests that load the machine, or time what it does, run alone; the others share it.
static MACHINE: RwLock<()> = RwLock::new(());

/// True as root, who can mount a tmpfs; otherwise prints why the caller skips (a failure under
/// CI=true).
fn root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(str::to_owned));
    if euid.as_deref() == Some("0") {
        return true;
    }
    let reason = "not root: the data directory's tmpfs cannot be mounted";
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
    eprintln!("skipped: {reason}");
    false
}

/// Writes zeros to `path` until the filesystem has no room left; returns the bytes written.
fn fill(path: &Path) -> u64 {
    let mut file = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 1 << 20];
    let mut written = 0;
    loop {
        match file.write(&block) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling {path:?}: {e}"),
        }
    }
    // The last blocks a partial write left.
    let _ = file.flush();
    written
}

/// The instances' current output files.
fn output_logs(platform: &Platform) -> Vec<PathBuf> {
    platform
        .local_ps()
        .iter()
        .filter(|i| i["service"] == "chatty")
        .filter_map(|i| i["id"].as_str())
        .map(|id| {
            platform
                .data
                .join("runtime/instances")
                .join(id)
                .join("output.log")
        })
        .collect()
}

/// With the data directory's disk full for 10 s, a deploy is refused for the disk (507), and
/// instances that print a line per request go on serving every request: the supervisors keep draining their output, drop what they cannot
/// write, count it, and write again once there is room, saying in the instance's status how
/// much was lost.
#[test]
fn a_full_disk_breaks_no_instance_and_their_output_resumes() {
    let _alone = MACHINE.write().unwrap_or_else(|e| e.into_inner());
    if !have_python() || !root() {
        return;
    }
    let platform = Platform::start(&Settings {
        data_tmpfs_mib: Some(512),
        ..Settings::default()
    });
    let repo = platform.onboard("chatty", &["dev"], "s3cr3t");
    set_manifest(&repo, "legacy", "", 2, 2, 100);
    set_env_file(&repo, "dev", &[("LOG_REQUESTS", "1")]);
    let deploy = platform.deploy(&repo, "dev");
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    platform.get(HOST, "/", Duration::from_secs(10));
    let logs = output_logs(&platform);
    assert_eq!(logs.len(), 2, "{:?}", platform.local_ps());

    let client = platform.ingress_client(HOST);
    let load = Load::start(
        &platform.rt,
        &client,
        &platform.ingress_url(HOST, "/"),
        10,
        Some(50.0),
    );
    std::thread::sleep(Duration::from_secs(2));
    let filler = platform.data.join("filler");
    let filled = fill(&filler);
    let full_since = Instant::now();
    // A deploy now is refused for the disk, not blamed on the code.
    std::fs::write(repo.join("CHANGES"), "a change to deploy\n").unwrap();
    let refused = platform.deploy(&repo, "dev");
    let said = refused.all();
    assert!(!refused.ok(), "deployed on a full disk: {said}");
    assert!(
        said.contains("disk is full") && !said.contains("gzip"),
        "{said}"
    );
    std::thread::sleep(Duration::from_secs(10).saturating_sub(full_since.elapsed()));
    let (ok_full, failed_full) = load.snapshot();
    std::fs::remove_file(&filler).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    // Requests the app logs once there is room again, marked.
    for n in 0..20 {
        let path = format!("/?after-the-disk-had-room-{n}");
        let (code, body) = platform.get(HOST, &path, Duration::from_secs(10));
        assert_eq!(code, 200, "{body}");
    }
    std::thread::sleep(Duration::from_secs(2));
    let failures = load.failures();
    let (ok, failed) = load.stop(&platform.rt);
    eprintln!(
        "disk full for 10 s ({} MiB written to fill it): {failed_full} of {} requests failed \
         while full, {failed} of {} in all",
        filled >> 20,
        ok_full + failed_full,
        ok + failed
    );
    assert_eq!(
        failed,
        0,
        "requests failed with the disk full: {failures:?}\n{}",
        platform.log()
    );
    assert!(ok > 1_000, "only {ok} requests were served");

    // The same instances serve, and write their output again.
    let ps = platform.local_ps();
    assert!(
        ps.iter()
            .filter(|i| i["service"] == "chatty")
            .all(|i| i["restarts"] == 0 && i["phase"] == "running"),
        "{ps:#?}"
    );
    for log in &logs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        assert!(
            text.contains("after-the-disk-had-room-"),
            "{log:?} was not written after the disk had room again; it ends:\n{}",
            text.lines().rev().take(10).collect::<Vec<_>>().join("\n")
        );
    }
    // Each instance says what it lost.
    let status = platform.status("chatty", "dev");
    let instances = status["instances"].as_array().unwrap();
    assert!(
        instances.iter().all(|i| i["message"]
            .as_str()
            .is_some_and(|w| w.contains("bytes of output were dropped")
                && w.contains("No space left on device"))),
        "{status:#}"
    );
}

/// CPU time (user and system) a process has used so far, from /proc/PID/stat.
fn cpu_seconds(pid: u64) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command (which may hold spaces), from the third on.
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map(|(_, rest)| rest.split(' ').collect())
        .unwrap_or_default();
    let ticks = |n: usize| {
        fields
            .get(n)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15, 11 and 12 here; ticks of 1/100 s.
    (ticks(11) + ticks(12)) / 100.0
}

/// Bytes of an instance's output files (the current one and the rotated ones).
fn output_bytes(current: &Path) -> u64 {
    let dir = current.parent().unwrap();
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("output.log"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// An instance printing as fast as it can costs its supervisor, on the host and outside the
/// instance's CPU limit, a small share of a core: past the output rate, what it prints is read
/// and dropped whole, and counted. Its files stay within their bound, and it serves meanwhile.
#[test]
fn a_log_flood_costs_the_host_little_and_fills_no_disk() {
    let _alone = MACHINE.write().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    const FLOOD: Duration = Duration::from_secs(10);
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("chatty", &["dev"], "s3cr3t");
    set_env_file(&repo, "dev", &[("FLOOD", "1")]);
    let deploy = platform.deploy(&repo, "dev");
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    let instance = platform
        .local_ps()
        .into_iter()
        .find(|i| i["service"] == "chatty")
        .unwrap();
    let (supervisor, app) = (
        instance["supervisor_pid"].as_u64().unwrap(),
        instance["pid"].as_u64().unwrap(),
    );
    let log = output_logs(&platform).remove(0);
    let (supervisor_before, app_before) = (cpu_seconds(supervisor), cpu_seconds(app));
    std::thread::sleep(FLOOD);
    let supervisor_cpu = cpu_seconds(supervisor) - supervisor_before;
    let app_cpu = cpu_seconds(app) - app_before;
    let (code, body) = platform.get(HOST, "/", Duration::from_secs(10));
    assert_eq!(code, 200, "{body}");
    let on_disk = output_bytes(&log);
    let status = platform.status("chatty", "dev");
    let message = status["instances"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    eprintln!(
        "log flood for {FLOOD:?}: the app used {app_cpu:.2} s of CPU, its supervisor \
         {supervisor_cpu:.2} s; {on_disk} bytes on disk; {message}"
    );
    // The default bound: 10 MiB a file, the current one and 3 rotated.
    assert!(
        on_disk <= 4 * 10 * 1024 * 1024 + 64 * 1024,
        "{on_disk} bytes of output"
    );
    assert!(
        message.contains("bytes of output were dropped") && message.contains("faster than"),
        "{status:#}"
    );
    // Before the rate, the supervisor used 8.19 s in a 10 s flood: it must now stay well
    // below a core (a generous bound: this is no benchmark).
    assert!(
        supervisor_cpu < FLOOD.as_secs_f64() * 0.3,
        "the supervisor used {supervisor_cpu:.2} s of CPU in {FLOOD:?}"
    );
}

/// A crash costs the service its instance only as long as the instance takes to start again:
/// the first restart is at once (the kubelet's rule), the backoff only from the second.
#[test]
fn the_first_restart_after_a_crash_is_at_once() {
    let _alone = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("chatty", &["dev"], "s3cr3t");
    let deploy = platform.deploy(&repo, "dev");
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    platform.get(HOST, "/", Duration::from_secs(10));
    let crashed = Instant::now();
    // The connection ends with the process: no answer to wait for.
    let (client, url) = (
        platform.ingress_client(HOST),
        platform.ingress_url(HOST, "/exit"),
    );
    let _ = platform
        .rt
        .block_on(async move { client.get(url).timeout(Duration::from_secs(5)).send().await });
    // Until the app answers: between the crash and the route's withdrawal the dead instance's
    // loopback port can be bound by another test's process (an axum 404 was seen in CI).
    let (code, body) = platform.get_until(HOST, "/", Duration::from_secs(20), |status, body| {
        status == 200 && body.contains(" pid ")
    });
    let back = crashed.elapsed();
    assert_eq!(code, 200, "{body}");
    let instance = platform
        .local_ps()
        .into_iter()
        .find(|i| i["service"] == "chatty")
        .unwrap();
    eprintln!("crashed instance serving again after {back:?}");
    assert_eq!(instance["restarts"], 1, "{instance:#}");
    // The backoff began at 10 s.
    assert!(
        back < Duration::from_secs(8),
        "serving again after {back:?}"
    );
}

/// An app that never answers its startup probe fails its deploy when the probe's budget
/// (`failure_threshold` × `period_seconds`, 8 s here) is spent, not twice that: each check's
/// wait for its answer counts within its period, as the kubelet counts it.
#[test]
fn a_never_ready_app_fails_its_deploy_at_the_probe_budget() {
    let _alone = MACHINE.write().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("chatty", &["dev"], "s3cr3t");
    let path = repo.join(".runway/runway.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replace(
        "period_seconds: 1\n    failure_threshold: 60",
        "period_seconds: 1\n    timeout_seconds: 1\n    failure_threshold: 8",
    );
    std::fs::write(&path, text).unwrap();
    set_env_file(&repo, "dev", &[("HEALTHZ_HANGS", "1")]);
    let started = Instant::now();
    let deploy = platform.deploy(&repo, "dev");
    let took = started.elapsed();
    eprintln!(
        "a never-ready deploy (budget 8 s) failed after {took:?}:\n{}",
        deploy.all()
    );
    assert!(!deploy.ok(), "deployed: {}", deploy.all());
    assert!(
        deploy.all().contains("startup probe"),
        "{}\n{}",
        deploy.all(),
        platform.log()
    );
    // The budget, plus the app's start and the CLI's upload: well short of two budgets.
    assert!(took < Duration::from_secs(13), "failed after {took:?}");
}

/// A restart of the server adopts the running instances and writes nothing: no event (the
/// instance was ready before) and no audit row on the service's last deployment, which ended.
#[test]
fn a_restart_writes_nothing_to_an_ended_deployment() {
    let _alone = MACHINE.read().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    let mut platform = Platform::start(&Settings::default());
    let repo = platform.onboard("chatty", &["dev"], "s3cr3t");
    set_manifest(&repo, "legacy", "", 2, 2, 100);
    let deploy = platform.deploy(&repo, "dev");
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    platform.get(HOST, "/", Duration::from_secs(10));
    let audit = |platform: &Platform| platform.audit(&["--limit", "500"]);
    // Settled: a few reconcile passes (250 ms each) with nothing to do.
    std::thread::sleep(Duration::from_secs(2));
    let before = audit(&platform);
    platform.kill9();
    platform.restart();
    platform.get(HOST, "/", Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(3));
    let after = audit(&platform);
    let new: Vec<&serde_json::Value> = after.iter().filter(|row| !before.contains(row)).collect();
    assert!(new.is_empty(), "the restart wrote {new:#?}");
}

/// The process serving the ingress (its supervisor's child), once there is one.
fn ingress_worker(supervisor: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children =
            std::fs::read_to_string(format!("/proc/{supervisor}/task/{supervisor}/children"))
                .unwrap_or_default();
        if let Some(pid) = children.split_whitespace().find_map(|p| p.parse().ok()) {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "the ingress {supervisor} has no worker"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `kill -9` of the process serving the ingress, under ~500 requests a second, with the server
/// up and then with it down: its supervisor starts another at once on the same sockets, so only
/// the requests it had in flight fail (at most one per client), and serving goes on without the
/// control plane.
#[test]
fn a_killed_ingress_worker_fails_only_its_requests_in_flight() {
    let _alone = MACHINE.write().unwrap_or_else(|e| e.into_inner());
    if !have_python() {
        return;
    }
    const CLIENTS: usize = 10;
    let mut platform = Platform::start(&Settings::default());
    let repo = platform.onboard("chatty", &["dev"], "s3cr3t");
    set_manifest(&repo, "legacy", "", 2, 2, 100);
    let deploy = platform.deploy(&repo, "dev");
    assert!(deploy.ok(), "deploy: {}\n{}", deploy.all(), platform.log());
    platform.get(HOST, "/", Duration::from_secs(10));
    let supervisor = platform.ingress_pid();
    let client = platform.ingress_client(HOST);
    let load = Load::start(
        &platform.rt,
        &client,
        &platform.ingress_url(HOST, "/"),
        CLIENTS,
        Some(50.0),
    );
    let mut failed_before = 0;
    for server_up in [true, false] {
        if !server_up {
            platform.kill9();
        }
        std::thread::sleep(Duration::from_secs(2));
        let worker = ingress_worker(supervisor);
        let (ok_before, _) = load.snapshot();
        let killed = Instant::now();
        let _ = std::process::Command::new("kill")
            .args(["-9", &worker.to_string()])
            .status();
        // Served again: the count of answered requests moves on.
        while load.snapshot().0 <= ok_before + CLIENTS as u64 {
            assert!(
                killed.elapsed() < Duration::from_secs(5),
                "nothing served for 5 s after the kill (server up: {server_up})"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let back = killed.elapsed();
        std::thread::sleep(Duration::from_secs(2));
        let (ok, failed) = load.snapshot();
        assert_ne!(ingress_worker(supervisor), worker);
        eprintln!(
            "ingress worker killed (server up: {server_up}): {} of {} requests failed, served \
             again within {back:?}",
            failed - failed_before,
            ok + failed
        );
        assert!(
            failed - failed_before <= CLIENTS as u64,
            "{} requests failed (server up: {server_up}): {:?}",
            failed - failed_before,
            load.failures()
        );
        failed_before = failed;
    }
    let (ok, failed) = load.stop(&platform.rt);
    assert!(ok > 3_000, "{ok} served, {failed} failed");
}
