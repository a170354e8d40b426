//! The local runtime with real supervisor processes (`runway-supervisor`) and real commands:
//! probes, readiness, restarts with backoff, crash loops, stops past the grace period, output,
//! and instances that outlive the process that started them.

#![allow(
    clippy::unwrap_used,
    reason = "test fixtures: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use runway_runtime::process::alive;
use runway_runtime::spec::{
    Artifact, Check, InstanceSpec, Limits, LogLimits, Probe, Probes, RestartMode, RestartPolicy,
};
use runway_runtime::status::{InstanceStatus, Phase};
use runway_runtime::{LocalConfig, LocalRuntime, Runtime, RuntimeError, SupervisorCommand};
use tokio::sync::watch;

const RUNWAY: &str = env!("CARGO_BIN_EXE_runway");
const SUPERVISOR: &str = env!("CARGO_BIN_EXE_runway-supervisor");
/// Bound on any one wait in these tests.
const WAIT: Duration = Duration::from_secs(20);

/// busybox from Debian's busybox-static, for a real HTTP server.
fn busybox() -> Option<PathBuf> {
    let path = PathBuf::from("/bin/busybox");
    if path.exists() {
        return Some(path);
    }
    let reason = "busybox is not installed (apt-get install busybox-static)";
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
    eprintln!("skipped: {reason}");
    None
}

struct Fixture {
    _state: tempfile::TempDir,
    work: tempfile::TempDir,
    supervisor: SupervisorCommand,
    runtime: LocalRuntime,
}

impl Fixture {
    /// Supervisors are the `runway-supervisor` binary.
    fn new() -> Self {
        Self::with(SupervisorCommand {
            program: SUPERVISOR.into(),
            args: vec![],
        })
    }

    /// Supervisors are `runway supervise`, as when `runway-supervisor` is not installed.
    fn with_runway_supervise() -> Self {
        Self::with(SupervisorCommand {
            program: RUNWAY.into(),
            args: vec!["supervise".into()],
        })
    }

    fn with(supervisor: SupervisorCommand) -> Self {
        let state = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        std::fs::create_dir(work.path().join("www")).unwrap();
        let runtime = LocalRuntime::new(LocalConfig::new(state.path(), supervisor.clone()));
        Self {
            _state: state,
            work,
            supervisor,
            runtime,
        }
    }

    fn www(&self) -> PathBuf {
        self.work.path().join("www")
    }

    /// A spec running `sh -c script` in the work directory.
    fn shell(&self, id: &str, script: &str) -> InstanceSpec {
        InstanceSpec {
            id: id.to_owned(),
            service: "test".to_owned(),
            revision: "test-1".to_owned(),
            artifact: Artifact::Command {
                program: "/bin/sh".into(),
                args: vec!["-c".into(), script.into()],
                working_dir: Some(self.work.path().to_owned()),
            },
            env: BTreeMap::from([("GREETING".to_owned(), "hello".to_owned())]),
            secret_env: BTreeMap::from([("API_TOKEN".to_owned(), "s3cr3t".to_owned())]),
            port: None,
            container_port: None,
            probes: Probes::default(),
            stop_signal: "TERM".parse().unwrap(),
            stop_grace_period: Duration::from_secs(5),
            restart: RestartPolicy {
                mode: RestartMode::Always,
                initial_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_millis(400),
                reset_after: Duration::from_secs(60),
                crash_loop_after: 3,
            },
            limits: Limits::default(),
            logs: LogLimits::default(),
            managed: false,
            inherit_env: false,
            sandbox: None,
            network: None,
            egress: Default::default(),
            identity_token: None,
        }
    }

    /// busybox httpd serving `www/` on the instance's port.
    fn web(&self, id: &str, busybox: &Path) -> InstanceSpec {
        let script = format!(
            "echo \"serving $GREETING on $PORT\"; exec {} httpd -f -vv -p 127.0.0.1:$PORT -h www",
            busybox.display()
        );
        let mut spec = self.shell(id, &script);
        spec.port = Some(0);
        spec.probes.startup = Some(probe(
            Check::Http {
                path: "/index.html".into(),
            },
            50,
        ));
        spec.probes.readiness = Some(probe(
            Check::Http {
                path: "/ready".into(),
            },
            1,
        ));
        std::fs::write(self.www().join("index.html"), "hello from runway\n").unwrap();
        std::fs::write(self.www().join("ready"), "yes\n").unwrap();
        spec
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Stop whatever a failed test left running.
        let runtime = self.runtime.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                for status in runtime.instances().await.unwrap_or_default() {
                    let _ = runtime.instance_stop(&status.id).await;
                }
            });
        })
        .join();
    }
}

fn probe(check: Check, failure_threshold: u32) -> Probe {
    Probe {
        check,
        initial_delay: Duration::ZERO,
        period: Duration::from_millis(100),
        timeout: Duration::from_millis(500),
        failure_threshold,
        success_threshold: 1,
    }
}

async fn wait_for(
    status: &mut watch::Receiver<InstanceStatus>,
    what: &str,
    condition: impl FnMut(&InstanceStatus) -> bool,
) -> InstanceStatus {
    let waited = tokio::time::timeout(WAIT, async {
        status.wait_for(condition).await.map(|s| s.clone())
    })
    .await;
    match waited {
        Ok(Ok(status)) => status,
        Ok(Err(_)) => panic!(
            "the status stream ended waiting for {what}: {:?}",
            *status.borrow()
        ),
        Err(_) => panic!("timed out waiting for {what}: {:?}", *status.borrow()),
    }
}

fn http_get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_serves_passes_its_probes_and_stops_gracefully() {
    let Some(busybox) = busybox() else { return };
    let fixture = Fixture::new();
    let spec = fixture.web("web", &busybox);
    let started = fixture.runtime.instance_ensure(spec.clone()).await.unwrap();
    let port = started.port.expect("a port was allocated");
    assert_ne!(port, 0);

    let mut status = fixture.runtime.watch("web").await.unwrap();
    let ready = wait_for(&mut status, "ready", |s| {
        s.phase == Phase::Running && s.ready
    })
    .await;
    assert_eq!(ready.restarts, 0);
    let response = http_get(port, "/index.html");
    assert!(response.contains("hello from runway"), "{response}");

    // Ensuring again is a no-op: the same process answers.
    let again = fixture.runtime.instance_ensure(spec).await.unwrap();
    assert_eq!(again.pid, ready.pid);

    // Readiness is reported continuously, not once.
    std::fs::remove_file(fixture.www().join("ready")).unwrap();
    wait_for(&mut status, "not ready", |s| !s.ready).await;
    std::fs::write(fixture.www().join("ready"), "yes\n").unwrap();
    wait_for(&mut status, "ready again", |s| s.ready).await;

    // Output is captured with the platform's environment; secrets reach the process only.
    let logs = fixture.runtime.logs("web", 100).await.unwrap();
    let texts: Vec<&str> = logs.iter().map(|l| l.text.as_str()).collect();
    assert!(
        texts.contains(&format!("serving hello on {port}").as_str()),
        "{texts:?}"
    );
    let spec_file = fixture.runtime.instance_dir("web").join("spec.json");
    let persisted = std::fs::read_to_string(spec_file).unwrap();
    assert!(
        !persisted.contains("s3cr3t"),
        "a secret reached the disk: {persisted}"
    );

    let stopped = fixture.runtime.instance_stop("web").await.unwrap();
    assert_eq!(stopped.phase, Phase::Stopped);
    let exit = stopped.last_exit.expect("the exit is recorded");
    assert_eq!(exit.signal.as_deref(), Some("SIGTERM"), "{exit:?}");
    assert_eq!(exit.cause, None);
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "still listening after stop"
    );
}

/// An instance that answers its readiness probe a moment after it started is ready then,
/// not a readiness period later: until it first passes, the probe checks every 50 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_is_ready_as_soon_as_it_answers_not_a_period_later() {
    let Some(busybox) = busybox() else { return };
    let fixture = Fixture::new();
    let mut spec = fixture.web("eager", &busybox);
    let period = Duration::from_secs(30);
    if let Some(readiness) = &mut spec.probes.readiness {
        readiness.period = period;
        readiness.failure_threshold = 3;
    }
    std::fs::remove_file(fixture.www().join("ready")).unwrap();
    fixture.runtime.instance_ensure(spec).await.unwrap();
    let mut status = fixture.runtime.watch("eager").await.unwrap();
    wait_for(&mut status, "running", |s| s.phase == Phase::Running).await;
    // Its first readiness check has failed by now; it answers from here on.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answering = std::time::Instant::now();
    std::fs::write(fixture.www().join("ready"), "yes\n").unwrap();
    wait_for(&mut status, "ready", |s| s.ready).await;
    let took = answering.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "ready {took:?} after it answered (period {period:?})"
    );
}

/// The names in an instance's environment, from its `env` output (`NAME=value` lines).
async fn env_names(fixture: &Fixture, id: &str) -> Vec<String> {
    let mut status = fixture.runtime.watch(id).await.unwrap();
    wait_for(&mut status, "the end", |s| s.phase.is_final()).await;
    let logs = fixture.runtime.logs(id, 100).await.unwrap();
    let mut names: Vec<String> = logs
        .iter()
        .filter_map(|l| l.text.split_once('=').map(|(name, _)| name.to_owned()))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_sees_only_its_own_environment() {
    // The test's own environment (cargo's CARGO_*, HOME, PATH) is what a supervisor inherits.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let fixture = Fixture::new();
    let mut spec = fixture.shell("env", "exec env");
    spec.restart.mode = RestartMode::Never;
    spec.env
        .insert("K_REVISION".to_owned(), "test-1".to_owned());
    fixture.runtime.instance_ensure(spec.clone()).await.unwrap();
    // `sh` adds PWD (and nothing else) to what it was given.
    assert_eq!(
        env_names(&fixture, "env").await,
        ["API_TOKEN", "GREETING", "K_REVISION", "PATH", "PWD"],
        "the platform's own environment leaked into the instance"
    );
    let log = fixture.runtime.logs("env", 100).await.unwrap();
    assert!(
        log.iter()
            .any(|l| l.text == format!("PATH={}", runway_runtime::spec::DEFAULT_PATH)),
        "{log:?}"
    );

    // A developer's `runway run` keeps its own environment under the instance's.
    spec.id = "env-dev".to_owned();
    spec.inherit_env = true;
    fixture.runtime.instance_ensure(spec).await.unwrap();
    let names = env_names(&fixture, "env-dev").await;
    assert!(
        names.iter().any(|n| n == "CARGO_MANIFEST_DIR") && names.iter().any(|n| n == "GREETING"),
        "{names:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashing_command_backs_off_into_a_crash_loop_that_says_why() {
    let fixture = Fixture::with_runway_supervise();
    let spec = fixture.shell("crash", "echo \"failing as usual\" >&2; exit 3");
    let started_at = Instant::now();
    fixture.runtime.instance_ensure(spec).await.unwrap();
    let mut status = fixture.runtime.watch("crash").await.unwrap();
    let looping = wait_for(&mut status, "a crash loop", |s| s.phase == Phase::CrashLoop).await;
    // The first restart at once, then backoff of 100 ms and 200 ms: the third failure comes
    // after at least 100 ms of waiting.
    assert!(started_at.elapsed() >= Duration::from_millis(100));
    assert!(looping.consecutive_failures >= 3, "{looping:?}");
    assert!(
        looping
            .message
            .starts_with("crash loop: exited with code 3"),
        "{}",
        looping.message
    );
    let exit = looping.last_exit.expect("the exit is recorded");
    assert_eq!(exit.code, 3);
    assert_eq!(exit.last_output, ["failing as usual"]);
    // After the third failure in a row, 200 ms (the cap is 400 ms).
    let due = looping.next_start_at_ms.expect("a restart is due") - exit.at_ms;
    assert!((150..=250).contains(&due), "next start in {due} ms");

    let stopped = fixture.runtime.instance_stop("crash").await.unwrap();
    assert_eq!(stopped.phase, Phase::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_exit_restarts_with_backoff_or_ends_by_the_restart_policy() {
    let fixture = Fixture::new();
    // Always: restarted, at once and then backing off (100 ms, 200 ms…) so that it never spins.
    let started_at = Instant::now();
    fixture
        .runtime
        .instance_ensure(fixture.shell("done", "echo done"))
        .await
        .unwrap();
    let mut status = fixture.runtime.watch("done").await.unwrap();
    let again = wait_for(&mut status, "a second restart", |s| s.restarts >= 2).await;
    assert!(started_at.elapsed() >= Duration::from_millis(100));
    let exit = again.last_exit.as_ref().expect("the exit is recorded");
    assert_eq!((exit.code, exit.cause.as_deref()), (0, None), "{again:?}");
    fixture.runtime.instance_stop("done").await.unwrap();

    // On failure only: a clean exit ends the instance.
    let mut once = fixture.shell("once", "echo done");
    once.restart.mode = RestartMode::OnFailure;
    fixture.runtime.instance_ensure(once).await.unwrap();
    let mut status = fixture.runtime.watch("once").await.unwrap();
    let ended = wait_for(&mut status, "the end", |s| s.phase.is_final()).await;
    assert_eq!((ended.phase, ended.restarts), (Phase::Exited, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_command_is_killed_after_its_grace_period() {
    let fixture = Fixture::new();
    let mut spec = fixture.shell(
        "hung",
        "trap 'echo ignoring TERM' TERM; while :; do sleep 0.1; done",
    );
    spec.stop_grace_period = Duration::from_millis(700);
    fixture.runtime.instance_ensure(spec).await.unwrap();
    let mut status = fixture.runtime.watch("hung").await.unwrap();
    wait_for(&mut status, "running", |s| s.phase == Phase::Running).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started_at = Instant::now();
    let stopped = fixture.runtime.instance_stop("hung").await.unwrap();
    assert!(started_at.elapsed() >= Duration::from_millis(700));
    let exit = stopped.last_exit.expect("the exit is recorded");
    assert_eq!(exit.signal.as_deref(), Some("SIGKILL"), "{exit:?}");
    assert_eq!(exit.code, 137);
    assert_eq!(exit.cause.as_deref(), Some("the grace period ran out"));
    assert!(
        exit.last_output.contains(&"ignoring TERM".to_owned()),
        "{exit:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_liveness_probe_restarts_the_instance_and_says_so() {
    let Some(busybox) = busybox() else { return };
    let fixture = Fixture::new();
    let mut spec = fixture.web("live", &busybox);
    if let Artifact::Command { args, .. } = &mut spec.artifact {
        args[1] = format!("echo yes > www/alive; {}", args[1]);
    }
    spec.probes.liveness = Some(probe(
        Check::Http {
            path: "/alive".into(),
        },
        2,
    ));
    fixture.runtime.instance_ensure(spec).await.unwrap();
    let mut status = fixture.runtime.watch("live").await.unwrap();
    let first = wait_for(&mut status, "ready", |s| s.ready).await;

    std::fs::remove_file(fixture.www().join("alive")).unwrap();
    let restarted = wait_for(&mut status, "a restart", |s| s.restarts == 1 && s.ready).await;
    assert_ne!(restarted.pid, first.pid);
    let exit = restarted.last_exit.expect("the exit is recorded");
    let cause = exit
        .cause
        .expect("the supervisor says why it ended the process");
    assert!(
        cause.starts_with("liveness probe failed: HTTP GET :"),
        "{cause}"
    );
    assert!(cause.contains("404"), "{cause}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_command_is_a_clear_error_and_leaves_nothing_behind() {
    let fixture = Fixture::new();
    let mut spec = fixture.shell("missing", "");
    spec.artifact = Artifact::Command {
        program: "no-such-program-anywhere".into(),
        args: vec![],
        working_dir: None,
    };
    let error = fixture.runtime.instance_ensure(spec).await.unwrap_err();
    assert!(matches!(error, RuntimeError::Artifact { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.starts_with("instance missing: command no-such-program-anywhere not found on PATH"),
        "{message}"
    );
    assert!(!fixture.runtime.instance_dir("missing").exists());
    assert!(fixture.runtime.instances().await.unwrap().is_empty());
}

/// `runway run` is killed with SIGKILL: its instance keeps running, and a new runtime finds it,
/// watches it and stops it.
#[test]
fn an_instance_outlives_the_process_that_started_it_and_is_adopted() {
    let Some(busybox) = busybox() else { return };
    let state = tempfile::tempdir().unwrap();
    let repo = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repo.path().join(".runway")).unwrap();
    std::fs::create_dir_all(repo.path().join("www")).unwrap();
    std::fs::write(repo.path().join("www/index.html"), "adopted\n").unwrap();
    // The port the manifest says the app listens on: `runway run` gives it when it is free.
    let wanted = std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let manifest = format!(
        "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: orphan\nspec:\n  container_port: {wanted}\n  startup_probe:\n    path: /index.html\n    period_seconds: 1\n  workload:\n    process:\n      command: [\"sh\", \"-c\", \"exec {} httpd -f -p 127.0.0.1:$PORT -h www\"]\n",
        busybox.display()
    );
    std::fs::write(repo.path().join(".runway/runway.yml"), manifest).unwrap();

    let mut parent = Command::new(RUNWAY)
        .args(["run", "--state-dir"])
        .arg(state.path())
        .arg(repo.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = parent.stderr.take().unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let deadline = Instant::now() + WAIT;
    loop {
        let line = lines_rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("runway run reports the instance ready");
        if line.contains("running, ready") {
            break;
        }
    }
    parent.kill().unwrap();
    parent.wait().unwrap();

    let supervisor = SupervisorCommand {
        program: SUPERVISOR.into(),
        args: vec![],
    };
    let runtime = LocalRuntime::new(LocalConfig::new(state.path(), supervisor));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let found = runtime.instances().await.unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        let status = &found[0];
        assert_eq!(
            (status.id.as_str(), status.phase, status.ready),
            ("orphan", Phase::Running, true)
        );
        let port = status.port.unwrap();
        assert_eq!(port, wanted, "PORT is the manifest's container_port");
        assert!(http_get(port, "/index.html").contains("adopted"));

        // Pushed status still flows to the new runtime, and it can stop the instance.
        let mut watched = runtime.watch("orphan").await.unwrap();
        assert_eq!(watched.borrow().pid, status.pid);
        let stop = tokio::spawn({
            let runtime = runtime.clone();
            async move { runtime.instance_stop("orphan").await }
        });
        wait_for(&mut watched, "stopped", |s| s.phase == Phase::Stopped).await;
        assert_eq!(stop.await.unwrap().unwrap().phase, Phase::Stopped);
        runtime.instance_remove("orphan").await.unwrap();
        assert!(runtime.instances().await.unwrap().is_empty());
    });
}

/// The tools an image test drives; false (after printing why) when one is missing outside CI.
fn image_tools(test: &str) -> bool {
    runway_oci::testing::require_tools(
        test,
        &["docker-registry", "skopeo", "umoci", "busybox", "runc"],
    )
}

/// Pushes a busybox image whose shell runs `script` and that serves `page` at /index.html
/// from /www.
fn push_web_image(
    registry: &runway_oci::testing::Registry,
    name: &str,
    script: &str,
    page: &str,
) -> runway_oci::testing::PushedImage {
    let image = runway_oci::testing::BusyboxImage {
        entrypoint: vec!["/bin/sh".into(), "-c".into()],
        cmd: vec![script.into()],
        env: vec!["PATH=/bin:/usr/bin".into()],
        files: vec![("www/index.html".into(), page.as_bytes().to_vec(), 0o644)],
        ..runway_oci::testing::BusyboxImage::default()
    };
    runway_oci::testing::push_busybox_image(registry, name, "1.0", &image).unwrap()
}

/// An image built from busybox-static with umoci, pushed with skopeo into a real registry on
/// loopback, pulled by the runtime and pinned by digest, run by runc under a supervisor: it
/// serves HTTP, passes its probes, gets its secret, stops gracefully; a second instance that
/// allocates past its memory limit is OOM-killed and reported so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_runs_under_runc_with_probes_limits_and_a_graceful_stop() {
    if !image_tools("runtime images") {
        return;
    }
    let registry = runway_oci::testing::Registry::start().unwrap();
    // A container's PID 1 has no default action for SIGTERM: the shell traps it.
    let pushed = push_web_image(
        &registry,
        "runway/web",
        "trap 'echo graceful stop; exit 0' TERM; echo \"serving as $(id -u) with $API_TOKEN\"; httpd -f -p 127.0.0.1:$PORT -h /www & wait",
        "hello from a container\n",
    );

    let mut fixture = Fixture::new();
    let mut config = LocalConfig::new(fixture._state.path(), fixture.supervisor.clone());
    config.pull.insecure_registries = vec![registry.host()];
    fixture.runtime = LocalRuntime::new(config);

    let mut spec = fixture.shell("ctr", "");
    spec.artifact = Artifact::Image {
        reference: pushed.reference.clone(),
        command: None,
        args: None,
        working_dir: None,
    };
    spec.port = Some(0);
    spec.probes.startup = Some(probe(
        Check::Http {
            path: "/index.html".into(),
        },
        100,
    ));
    spec.limits = Limits {
        memory_bytes: Some(64 << 20),
        cpu_millis: Some(500),
    };
    let started = fixture.runtime.instance_ensure(spec.clone()).await.unwrap();
    let port = started.port.unwrap();
    let mut status = fixture.runtime.watch("ctr").await.unwrap();
    wait_for(&mut status, "ready", |s| s.ready).await;
    assert!(http_get(port, "/index.html").contains("hello from a container"));
    // The limits are the container's cgroup's: 64 MiB, and half a CPU (50 ms per 100 ms).
    let memory = cgroup_file(&[
        "memory/runway/ctr/memory.limit_in_bytes",
        "runway/ctr/memory.max",
    ]);
    assert_eq!(memory.trim(), (64u64 << 20).to_string());
    let cpu = cgroup_file(&["cpu/runway/ctr/cpu.cfs_quota_us", "runway/ctr/cpu.max"]);
    assert!(
        cpu.trim() == "50000" || cpu.trim() == "50000 100000",
        "cpu limit {cpu}"
    );

    // Pinned: the recorded spec names the digest, not the tag.
    let dir = fixture.runtime.instance_dir("ctr");
    let persisted = std::fs::read_to_string(dir.join("spec.json")).unwrap();
    assert!(persisted.contains(&pushed.pinned), "{persisted}");
    // The secret reached the process but no file: not the spec, not the bundle.
    let logs = fixture.runtime.logs("ctr", 10).await.unwrap();
    assert!(
        logs.iter().any(|l| l.text == "serving as 0 with s3cr3t"),
        "{logs:?}"
    );
    for file in ["spec.json", "bundle/config.json", "status.json"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(!text.contains("s3cr3t"), "the secret is in {file}");
    }

    let stopped = fixture.runtime.instance_stop("ctr").await.unwrap();
    let exit = stopped.last_exit.unwrap();
    assert_eq!((exit.code, exit.cause.as_deref()), (0, None), "{exit:?}");
    assert!(
        exit.last_output.contains(&"graceful stop".to_owned()),
        "{exit:?}"
    );

    // Over the memory limit: the kernel kills it, and the supervisor says why.
    let mut hungry = spec.clone();
    hungry.id = "hungry".into();
    hungry.artifact = Artifact::Image {
        reference: pushed.pinned.clone(),
        command: Some(vec!["/bin/sh".into(), "-c".into()]),
        args: Some(vec![
            "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived".into(),
        ]),
        working_dir: None,
    };
    hungry.port = None;
    hungry.probes = Probes::default();
    hungry.restart.mode = RestartMode::Never;
    hungry.limits.memory_bytes = Some(32 << 20);
    fixture.runtime.instance_ensure(hungry).await.unwrap();
    let mut status = fixture.runtime.watch("hungry").await.unwrap();
    let failed = wait_for(&mut status, "the OOM kill", |s| s.phase.is_final()).await;
    let exit = failed.last_exit.unwrap();
    assert!(exit.oom_killed, "{exit:?}");
    assert_eq!(failed.phase, Phase::Failed);
    assert!(exit.reason.contains("memory limit"), "{}", exit.reason);
}

/// The first of these files under /sys/fs/cgroup that exists (cgroup v1, then v2).
fn cgroup_file(candidates: &[&str]) -> String {
    candidates
        .iter()
        .find_map(|path| std::fs::read_to_string(Path::new("/sys/fs/cgroup").join(path)).ok())
        .unwrap_or_else(|| panic!("none of {candidates:?} exists under /sys/fs/cgroup"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_image_is_a_clear_error_and_leaves_nothing_behind() {
    if !runway_oci::testing::require_tools("unknown image", &["docker-registry"]) {
        return;
    }
    let registry = runway_oci::testing::Registry::start().unwrap();
    let mut fixture = Fixture::new();
    let mut config = LocalConfig::new(fixture._state.path(), fixture.supervisor.clone());
    config.pull.insecure_registries = vec![registry.host()];
    fixture.runtime = LocalRuntime::new(config);
    let mut spec = fixture.shell("nope", "");
    spec.artifact = Artifact::Image {
        reference: format!("{}/no/such:image", registry.host()),
        command: None,
        args: None,
        working_dir: None,
    };
    let error = fixture.runtime.instance_ensure(spec).await.unwrap_err();
    assert!(matches!(error, RuntimeError::Image { .. }), "{error:?}");
    assert!(error.to_string().contains("no/such"), "{error}");
    assert!(!fixture.runtime.instance_dir("nope").exists());
}

/// The same through the command line: `runway run --detach --image`, `runway local ps`, `logs`,
/// `stop`.
#[test]
fn runway_run_ps_logs_and_stop_an_image() {
    if image_tools("runway run an image") {
        run_an_image_through_the_cli("runc");
    }
}

/// The same with crun, which the runtime runs with the host's cgroup v2 mount hidden.
#[test]
fn runway_run_an_image_with_crun() {
    if image_tools("runway run with crun")
        && runway_oci::testing::require_tools("runway run with crun", &["crun"])
    {
        run_an_image_through_the_cli("crun");
    }
}

fn run_an_image_through_the_cli(oci_runtime: &str) {
    let registry = runway_oci::testing::Registry::start().unwrap();
    let pushed = push_web_image(
        &registry,
        "runway/cli",
        "trap 'exit 0' TERM; echo \"hello from $K_SERVICE\"; httpd -f -p 127.0.0.1:$PORT -h /www & wait",
        "served from a container\n",
    );
    let state = tempfile::tempdir().unwrap();
    let repo = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repo.path().join(".runway")).unwrap();
    // A port of its own (the runc and crun tests run at once, and `runway run` gives the
    // manifest's container_port when it is free).
    let port = std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        repo.path().join(".runway/runway.yml"),
        format!(
            "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: shop\nspec:\n  \
             container_port: {port}\n  startup_probe:\n    path: /index.html\n    \
             period_seconds: 1\n"
        ),
    )
    .unwrap();
    let runway = |args: &[&str]| {
        let output = Command::new(RUNWAY)
            .args(args)
            .arg("--state-dir")
            .arg(state.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (
            output.status.code(),
            text(&output.stdout),
            text(&output.stderr),
        )
    };

    // Its own id (and so its own cgroup), as the runc and crun tests run at once.
    let id = format!("shop-{oci_runtime}");
    let repo_path = repo.path().to_str().unwrap();
    let host = registry.host();
    let (code, _, err) = runway(&[
        "run",
        "--detach",
        "--image",
        &pushed.reference,
        "--insecure-registry",
        &host,
        "--oci-runtime",
        oci_runtime,
        "--id",
        &id,
        repo_path,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "instance {id} runs in the background: `runway local logs -f {id}`"
        )),
        "{err}"
    );

    // Wait for ready through `ps --output json`.
    let deadline = Instant::now() + WAIT;
    let port = loop {
        let (code, out, err) = runway(&["local", "ps", "--output", "json"]);
        assert_eq!(code, Some(0), "{err}");
        let list: serde_json::Value = serde_json::from_str(&out).unwrap();
        if list[0]["ready"] == true {
            break u16::try_from(list[0]["port"].as_u64().unwrap()).unwrap();
        }
        assert!(Instant::now() < deadline, "not ready: {out}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(http_get(port, "/index.html").contains("served from a container"));
    let (_, table, _) = runway(&["local", "ps"]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "ID", "PHASE", "READY", "ADDRESS", "PID", "RESTARTS", "MESSAGE"
        ]
    );
    assert!(table.contains(&format!("{id}  running  yes")), "{table}");
    let (code, logs, err) = runway(&["local", "logs", &id]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(logs, "hello from shop\n");

    // Kept on request: listed as ended, with what to do about it.
    let (code, _, err) = runway(&["local", "stop", "--keep", &id]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains(&format!("{id}: stopped")), "{err}");
    let (_, table, hint) = runway(&["local", "ps"]);
    assert!(table.contains(&format!("{id}  stopped")), "{table}");
    assert!(
        hint.contains(&format!("`runway local stop {id}` removes it")),
        "{hint}"
    );
    // By default a stopped instance is removed, output and all.
    let (code, _, err) = runway(&["local", "stop", &id]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains(&format!("{id}: removed")), "{err}");
    let (_, out, _) = runway(&["local", "ps", "--output", "json"]);
    assert_eq!(out.trim(), "[]");
    let (code, _, err) = runway(&["local", "logs", &id]);
    assert_eq!(code, Some(2));
    assert!(err.contains(&format!("no instance \"{id}\"")), "{err}");
}

/// A tenant's plain process, isolated: a hostile script looks for what it should not reach
/// and prints what it found. It runs as the service's own user with its limits, sees its code
/// (read-only) and the host's system directories, and not the runtime's state, the host's
/// processes, the host's /tmp, nor anything of root's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_process_runs_as_its_services_user_and_reaches_nothing_else() {
    if !runway_oci::testing::require_tools("sandboxed processes", &["runc"]) {
        return;
    }
    let fixture = Fixture::new();
    let code = fixture.work.path().join("code");
    std::fs::create_dir_all(&code).unwrap();
    std::fs::write(code.join("app.txt"), "the service's code\n").unwrap();
    // Something on the host's /tmp, and a file the runtime's state holds.
    let host_tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(host_tmp.path(), "host tmp\n").unwrap();
    let state = fixture._state.path();
    std::fs::write(state.join("master.key"), "not for tenants\n").unwrap();
    let script = format!(
        "echo uid=$(id -u) gid=$(id -g); cat app.txt; \
         touch app.txt 2>/dev/null && echo code-writable || echo code-read-only; \
         cat {key} 2>/dev/null && echo key-read || echo key-unreachable; \
         ls {state} >/dev/null 2>&1 && echo state-listed || echo state-unreachable; \
         cat {tmp} 2>/dev/null && echo host-tmp-read || echo host-tmp-unseen; \
         cat /root/.bashrc >/dev/null 2>&1 && echo root-home-read || echo root-home-unseen; \
         echo processes=$(ls -d /proc/[0-9]* | wc -l); \
         cat /proc/1/environ >/dev/null 2>&1 && echo own-init-environ; \
         echo tmp-ok > /tmp/mine && cat /tmp/mine",
        key = state.join("master.key").display(),
        state = state.display(),
        tmp = host_tmp.path().display(),
    );
    let mut spec = fixture.shell("sandboxed", &script);
    spec.restart.mode = RestartMode::Never;
    spec.limits = Limits {
        memory_bytes: Some(64 << 20),
        cpu_millis: Some(500),
    };
    spec.artifact = Artifact::Command {
        program: "sh".into(),
        args: vec!["-c".into(), script],
        working_dir: Some(code.clone()),
    };
    spec.sandbox = Some(
        runway_runtime::sandbox::SandboxPolicy::default()
            .sandbox(7, &code)
            .unwrap(),
    );
    fixture.runtime.instance_ensure(spec.clone()).await.unwrap();
    let mut status = fixture.runtime.watch("sandboxed").await.unwrap();
    let ended = wait_for(&mut status, "the end", |s| s.phase.is_final()).await;
    let logs = fixture.runtime.logs("sandboxed", 100).await.unwrap();
    let lines: Vec<&str> = logs.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(ended.phase, Phase::Exited, "{ended:?} {lines:?}");
    for expected in [
        "uid=200007 gid=200007",
        "the service's code",
        "code-read-only",
        "key-unreachable",
        "state-unreachable",
        "host-tmp-unseen",
        "root-home-unseen",
        "own-init-environ",
        "tmp-ok",
    ] {
        assert!(lines.contains(&expected), "{expected:?} not in {lines:?}");
    }
    // Its own pid namespace: the shell, `ls` and `wc` at most, not the host's processes.
    let processes: usize = lines
        .iter()
        .find_map(|l| l.strip_prefix("processes="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(processes <= 4, "{processes} processes visible: {lines:?}");
    // Its secret reached it through the environment, and its limits its cgroup: it ran as
    // a container of the OCI runtime.
    let dir = fixture.runtime.instance_dir("sandboxed");
    let config = std::fs::read_to_string(dir.join("bundle/config.json")).unwrap();
    assert!(!config.contains("s3cr3t"), "the secret is in the bundle");
    assert!(config.contains("\"uid\": 200007"), "{config}");

    // Code that holds the runtime's state is refused before anything starts.
    let mut exposed = spec.clone();
    exposed.id = "exposed".into();
    exposed.sandbox = Some(
        runway_runtime::sandbox::SandboxPolicy::default()
            .sandbox(7, state)
            .unwrap(),
    );
    exposed.artifact = Artifact::Command {
        program: "sh".into(),
        args: vec!["-c".into(), "true".into()],
        working_dir: Some(state.to_owned()),
    };
    let error = fixture.runtime.instance_ensure(exposed).await.unwrap_err();
    assert!(
        error.to_string().contains("platform's own files"),
        "{error}"
    );
    assert!(!fixture.runtime.instance_dir("exposed").exists());
}

/// Waits up to `WAIT` for `pid` to be gone.
async fn gone(pid: u32) -> bool {
    let deadline = Instant::now() + WAIT;
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// `kill -9` of a supervisor ends its instance too: a plain process with a child of its own,
/// and a sandboxed one (a container), which the OCI runtime deletes. Nothing keeps the port
/// and the secrets it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_ends_with_its_killed_supervisor() {
    let fixture = Fixture::new();
    let mut plain = fixture.shell("orphan", "sleep 300 & sleep 300");
    plain.restart.mode = RestartMode::Never;
    let mut specs = vec![plain.clone()];
    let sandboxed = runway_oci::testing::require_tools("a killed sandbox's supervisor", &["runc"]);
    if sandboxed {
        let mut spec = plain.clone();
        spec.id = "orphan-sandboxed".into();
        spec.sandbox = Some(
            runway_runtime::sandbox::SandboxPolicy::default()
                .sandbox(3, fixture.work.path())
                .unwrap(),
        );
        specs.push(spec);
    }
    for spec in specs {
        let id = spec.id.clone();
        fixture.runtime.instance_ensure(spec).await.unwrap();
        let mut status = fixture.runtime.watch(&id).await.unwrap();
        let running = wait_for(&mut status, "running", |s| s.pid.is_some()).await;
        let (app, supervisor) = (running.pid.unwrap(), running.supervisor_pid);
        assert!(alive(app) && alive(supervisor), "{running:?}");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(supervisor).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        assert!(
            gone(app).await,
            "{id}: process {app} outlived its supervisor"
        );
        let after = fixture.runtime.instances().await.unwrap();
        let this = after.iter().find(|s| s.id == id).unwrap();
        assert_eq!(this.phase, Phase::Failed, "{this:?}");
        assert!(this.message.contains("gone"), "{this:?}");
        // Removing it leaves nothing behind.
        fixture.runtime.instance_remove(&id).await.unwrap();
    }
}

/// The pids of the processes whose command line has all of `words`.
fn pids_with(words: &[&str]) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| {
                let line = String::from_utf8_lossy(&line).replace('\0', " ");
                words.iter().all(|w| line.contains(w))
            })
        })
        .collect()
}

/// Supervisor and watchdog both killed: the container is a stray until the instance is
/// removed (as the control plane does when it finds the supervisor gone), which deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_an_instance_whose_supervisor_and_watchdog_died_reaps_its_container() {
    if !runway_oci::testing::require_tools("a stray container", &["runc"]) {
        return;
    }
    let fixture = Fixture::new();
    let mut spec = fixture.shell("stray", "sleep 300");
    spec.restart.mode = RestartMode::Never;
    spec.sandbox = Some(
        runway_runtime::sandbox::SandboxPolicy::default()
            .sandbox(4, fixture.work.path())
            .unwrap(),
    );
    fixture.runtime.instance_ensure(spec).await.unwrap();
    let mut status = fixture.runtime.watch("stray").await.unwrap();
    let running = wait_for(&mut status, "running", |s| s.pid.is_some()).await;
    let dir = fixture.runtime.instance_dir("stray");
    let dir_text = dir.display().to_string();
    let kill = |pid: u32| {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
    };
    let watchdogs = pids_with(&["--watchdog", &dir_text]);
    assert_eq!(watchdogs.len(), 1, "{watchdogs:?}");
    kill(watchdogs[0]);
    assert!(gone(watchdogs[0]).await);
    kill(running.supervisor_pid);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let app = running.pid.unwrap();
    assert!(alive(app), "the container ended without anyone to end it");
    fixture.runtime.instance_remove("stray").await.unwrap();
    assert!(gone(app).await, "the stray container was not reaped");
    assert!(!dir.exists());
}

/// A container on a network of its own: reached at its own address on its `container_port`
/// (80, which needs no capability there), joined again after a restart (a new namespace), its address given back when removed; one
/// that listens only on its loopback fails its startup probe saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_on_its_own_network_is_reached_there_and_told_where_it_listens() {
    if !runway_oci::testing::require_tools("instance networks", &["runc", "ip", "nsenter"]) {
        return;
    }
    let Some(busybox) = busybox() else { return };
    let fixture = Fixture::new();
    let leases = tempfile::tempdir().unwrap();
    // A range of this test's own, leased in a directory of its own.
    let pool = runway_runtime::network::AddressPool::new("10.214.9.0/28", leases.path()).unwrap();
    let mut config = LocalConfig::new(fixture._state.path(), fixture.supervisor.clone());
    config.instance_network = Some(pool);
    let runtime = LocalRuntime::new(config);
    let code = fixture.work.path().join("code");
    std::fs::create_dir_all(code.join("www")).unwrap();
    std::fs::write(code.join("www/index.html"), "on its own network\n").unwrap();
    let isolated = |id: &str, listen: &str| {
        let mut spec = fixture.shell(id, "");
        spec.artifact = Artifact::Command {
            program: busybox.clone(),
            args: ["httpd", "-f", "-p", listen, "-h", "www"]
                .map(str::to_owned)
                .to_vec(),
            working_dir: Some(code.clone()),
        };
        spec.port = Some(0);
        spec.container_port = Some(80);
        // busybox as its namespace's init ignores SIGTERM: the grace is all a stop waits.
        spec.stop_grace_period = Duration::from_millis(500);
        spec.probes.startup = Some(probe(
            Check::Http {
                path: "/index.html".into(),
            },
            20,
        ));
        spec.sandbox = Some(
            runway_runtime::sandbox::SandboxPolicy::default()
                .sandbox(9, &code)
                .unwrap(),
        );
        spec
    };
    // busybox reads `-p` as given: the port is written out, `$PORT` being 80, which an
    // unprivileged user may take in its own namespace.
    runtime
        .instance_ensure(isolated("netted", "80"))
        .await
        .unwrap();
    let mut status = runtime.watch("netted").await.unwrap();
    let running = wait_for(&mut status, "running", |s| s.phase == Phase::Running).await;
    let address = running.address.unwrap();
    assert_eq!(
        address,
        "10.214.9.6:80".parse().unwrap(),
        "the first /30 is the platform's"
    );
    let get = |address: std::net::SocketAddr| {
        let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        write!(stream, "GET /index.html HTTP/1.0\r\n\r\n").unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    };
    assert!(get(address).ends_with("on its own network\n"));
    let link = Command::new("ip")
        .args(["link", "show", "rw0ad60906"])
        .output()
        .unwrap();
    assert!(link.status.success(), "no host end: {link:?}");
    // Its sysfs is its own: its network devices, not the host's (other instances' links).
    let pid = running.pid.unwrap();
    let mut devices: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/root/sys/class/net"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    devices.sort();
    assert_eq!(devices, ["eth0", "lo"]);

    // Killed, it starts again in a new namespace, joined again at the same address.
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    assert!(killed.unwrap().success());
    let again = wait_for(&mut status, "running again", |s| {
        s.phase == Phase::Running && s.restarts == 1
    })
    .await;
    assert_eq!(again.address, Some(address));
    assert!(get(address).ends_with("on its own network\n"));

    // Listening on its loopback only: not reached, and told why.
    let mut lonely = isolated("lonely", "127.0.0.1:80");
    lonely.restart.mode = RestartMode::Never;
    lonely.probes.startup = Some(probe(
        Check::Http {
            path: "/index.html".into(),
        },
        3,
    ));
    runtime.instance_ensure(lonely).await.unwrap();
    let mut status = runtime.watch("lonely").await.unwrap();
    let failed = wait_for(&mut status, "the end", |s| s.phase.is_final()).await;
    let reason = failed.last_exit.map(|e| e.reason).unwrap_or_default();
    assert_eq!(failed.address, Some("10.214.9.10:80".parse().unwrap()));
    assert!(
        reason.contains("the app listens on 127.0.0.1:80, where") && reason.contains("0.0.0.0:80 "),
        "{reason}"
    );

    // Removed, each gives its address back.
    for id in ["netted", "lonely"] {
        runtime.instance_remove(id).await.unwrap();
    }
    let left: Vec<_> = std::fs::read_dir(leases.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|name| name != ".lock")
        .collect();
    assert!(left.is_empty(), "leases left: {left:?}");
}

/// The local driver runs a revision workload's replicas: as many as asked, the named ones
/// retired first, their output tailed and followed across a scale-up, all stopped on removal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_driver_scales_a_revision_workload_and_follows_its_output() {
    use runway_driver::{Driver, LogQuery, Scale, Workload};
    use runway_runtime::{LocalDriver, LocalDriverOptions};
    let Some(busybox) = busybox() else { return };
    let fixture = Fixture::new();
    // A code snapshot, where the driver looks for it: `<snapshots>/<service id>/<hex>`.
    let snapshots = fixture.work.path().join("snapshots");
    let hex = "ab".repeat(32);
    let code = snapshots.join("7").join(&hex);
    std::fs::create_dir_all(&code).unwrap();
    std::fs::write(code.join("healthz"), "ok\n").unwrap();
    let manifest: runway_manifest::Manifest = serde_json::from_value(serde_json::json!({
        "apiVersion": "runway/v1",
        "kind": "RunwayService",
        "metadata": {"name": "hello"},
        "spec": {
            "container_port": 8080,
            "startup_probe": {"path": "/healthz", "period_seconds": 1, "failure_threshold": 30},
            "workload": {"process": {"command": ["/bin/sh", "-c", format!(
                "echo serving on $PORT; exec {} httpd -f -p 127.0.0.1:$PORT -h .",
                busybox.display()
            )]}}
        }
    }))
    .unwrap();
    let workload = Workload {
        service: "hello".into(),
        service_id: 7,
        env: "dev".into(),
        revision: "hello-dev-00001".into(),
        config: runway_manifest::ServiceConfig::from_manifest(
            &manifest,
            Some("dev"),
            &BTreeMap::new(),
        ),
        image: None,
        source: Some(format!("sha256:{hex}")),
        secrets: BTreeMap::from([("API_KEY".to_owned(), "hunter2".to_owned())]),
        secret_versions: BTreeMap::from([("API_KEY".to_owned(), 1)]),
        identity: None,
    };
    let state = tempfile::tempdir().unwrap();
    let runtime = std::sync::Arc::new(LocalRuntime::new(LocalConfig::new(
        state.path(),
        fixture.supervisor.clone(),
    )));
    let driver = LocalDriver::new(
        runtime,
        LocalDriverOptions {
            sandbox: None,
            snapshots: Some(snapshots),
        },
    );
    let mut changes = driver.changes();
    let ready = |count: usize| {
        let driver = driver.clone();
        async move {
            tokio::time::timeout(WAIT, async {
                loop {
                    let replicas = driver.replicas().await.unwrap();
                    let ready: Vec<_> = replicas.into_iter().filter(|r| r.ready).collect();
                    if ready.len() == count {
                        return ready;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .await
            .expect("replicas ready in time")
        }
    };

    let scale = |replicas: u32, retire: Vec<String>| Scale { replicas, retire };
    let started = driver.scale(&workload, &scale(2, vec![])).await.unwrap();
    assert_eq!(started.len(), 2, "{started:?}");
    let both = ready(2).await;
    assert!(changes.has_changed().unwrap() || changes.changed().await.is_ok());
    for replica in &both {
        assert_eq!(replica.revision.as_deref(), Some("hello-dev-00001"));
        assert!(replica.managed);
        let address = replica.address.expect("a ready replica has an address");
        let body = tokio::task::spawn_blocking(move || http_get(address.port(), "/healthz"))
            .await
            .unwrap();
        assert!(body.ends_with("ok\n"), "{body}");
    }
    // Asking again changes nothing.
    let again = driver.scale(&workload, &scale(2, vec![])).await.unwrap();
    assert_eq!(again.len(), 2);

    // One fewer, the named one first.
    let (gone, kept) = (both[0].id.clone(), both[1].id.clone());
    driver
        .scale(&workload, &scale(1, vec![gone.clone()]))
        .await
        .unwrap();
    tokio::time::timeout(WAIT, async {
        while driver
            .replicas()
            .await
            .unwrap()
            .iter()
            .any(|r| r.id == gone)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the retired replica stopped and was removed");
    assert_eq!(ready(1).await[0].id, kept);

    // Output: tailed, then followed, a replica started later included.
    let query = LogQuery {
        service: "hello".into(),
        env: "dev".into(),
        replica: None,
        tail: 10,
        previous: false,
    };
    let lines = driver.logs(&query).await.unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l.replica == kept && l.text.starts_with("serving on")),
        "{lines:?}"
    );
    let other_env = LogQuery {
        env: "prod".into(),
        ..query.clone()
    };
    assert!(driver.logs(&other_env).await.unwrap().is_empty());
    let mut followed = driver.follow(&query).await.unwrap();
    driver.scale(&workload, &scale(2, vec![])).await.unwrap();
    let newcomer = tokio::time::timeout(WAIT, async {
        loop {
            let line = followed.recv().await.expect("the follow goes on");
            if line.replica != kept && line.text.starts_with("serving on") {
                return line.replica;
            }
        }
    })
    .await
    .expect("the new replica's output is followed");
    assert_ne!(newcomer, gone);

    // Removed: every replica stops and is forgotten.
    driver
        .remove("hello", "dev", "hello-dev-00001")
        .await
        .unwrap();
    tokio::time::timeout(WAIT, async {
        while !driver.replicas().await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("every replica removed");
    // Their output is kept a while: `--previous`, one of them or all.
    let previous = LogQuery {
        previous: true,
        ..query.clone()
    };
    let lines = driver.logs(&previous).await.unwrap();
    for replica in [&kept, &newcomer] {
        assert!(
            lines
                .iter()
                .any(|l| &l.replica == replica && l.text.starts_with("serving on")),
            "{replica}: {lines:?}"
        );
    }
    let one = LogQuery {
        replica: Some(kept.clone()),
        ..previous.clone()
    };
    let lines = driver.logs(&one).await.unwrap();
    assert!(
        !lines.is_empty() && lines.iter().all(|l| l.replica == kept),
        "{lines:?}"
    );
    assert!(
        driver
            .logs(&LogQuery {
                env: "prod".into(),
                ..previous
            })
            .await
            .unwrap()
            .is_empty()
    );
    // Kept private, as instances' own directories are.
    let previous_dir = state.path().join("previous");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&previous_dir).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o700, "{}", previous_dir.display());
}
