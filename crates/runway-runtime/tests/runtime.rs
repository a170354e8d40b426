//! The runtime with a real OCI runtime (runc, and crun): a container started by a supervisor
//! (in this process, [`supervise`]) from a bundle the test builds on busybox-static.
//!
//! Skipped, saying why, where the OCI runtime, busybox-static or root is missing, except
//! under `CI=true`, where that is a failure.

#![allow(
    clippy::unwrap_used,
    reason = "test fixtures: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use runway_runtime::spec::{
    Artifact, InstanceSpec, Limits, LogLimits, Probes, RestartMode, RestartPolicy,
};
use runway_runtime::supervisor::{SOCKET, supervise};
use runway_runtime::{LocalConfig, LocalRuntime, Phase, Runtime, SupervisorCommand};

/// Bound on any one wait in these tests.
const WAIT: Duration = Duration::from_secs(20);

/// Where the runtime has crun keep its state: in memory, as it holds a copy of the bundle.
const CRUN_ROOT: &str = "/run/runway/secret/crun";

/// What the test needs of the machine: the OCI runtime on `PATH`, busybox-static, and root
/// (cgroups, and the tmpfs for secrets). `None`, saying why, when one is missing outside CI.
fn oci_runtime(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    let missing = if found.is_none() {
        Some(format!("{name} is not on PATH (apt-get install {name})"))
    } else if !Path::new("/bin/busybox").is_file() {
        Some("busybox is not installed (apt-get install busybox-static)".to_owned())
    } else if !nix::unistd::geteuid().is_root() {
        Some("containers need root".to_owned())
    } else {
        None
    };
    if let Some(reason) = missing {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
        eprintln!("skipped: {reason}");
        return None;
    }
    found
}

/// A root file system of busybox-static and the applets the test's script runs.
fn busybox_rootfs(dir: &Path) -> PathBuf {
    let rootfs = dir.join("rootfs");
    for sub in ["bin", "proc", "dev", "sys", "tmp", "run", "etc"] {
        std::fs::create_dir_all(rootfs.join(sub)).unwrap();
    }
    std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
    for applet in ["sh", "tr", "sleep"] {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
    }
    rootfs
}

/// Every regular file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file()
                && std::fs::read(&path)
                    .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
            {
                found.push(path);
            }
        }
    }
    found
}

/// The OCI runtime's command, with crun's state where the runtime keeps it.
fn command(oci_runtime: &Path) -> std::process::Command {
    let mut command = std::process::Command::new(oci_runtime);
    if oci_runtime.ends_with("crun") {
        command.args(["--root", CRUN_ROOT]);
    }
    command
}

/// The OCI runtime's own state of a container: its directory.
fn state_dir(oci_runtime: &Path, id: &str) -> PathBuf {
    let root = if oci_runtime.ends_with("crun") {
        CRUN_ROOT
    } else {
        "/run/runc"
    };
    Path::new(root).join(id)
}

/// The bundle the OCI runtime was given at `create`, from its `state`.
fn created_from(oci_runtime: &Path, id: &str) -> PathBuf {
    let output = command(oci_runtime).args(["state", id]).output().unwrap();
    assert!(output.status.success(), "state {id}: {output:?}");
    let state: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    PathBuf::from(state["bundle"].as_str().unwrap())
}

/// Whether the nearest existing directory at or above `path` is on a tmpfs.
fn on_tmpfs(path: &Path) -> bool {
    let existing = path.ancestors().find(|p| p.exists()).unwrap();
    nix::sys::statfs::statfs(existing)
        .unwrap()
        .filesystem_type()
        == nix::sys::statfs::TMPFS_MAGIC
}

/// Ends the container when dropped, so a failed test leaves none running (and the
/// supervisor's reaper, waiting for it, lets the test end): its init (from the pid file
/// `create` wrote in the state directory), then the container.
struct Delete<'a> {
    oci_runtime: &'a Path,
    id: &'a str,
    state_dir: &'a Path,
}

impl Drop for Delete<'_> {
    fn drop(&mut self) {
        let pid = std::fs::read_to_string(self.state_dir.join("container.pid"))
            .ok()
            .and_then(|pid| pid.trim().parse::<i32>().ok());
        if let Some(pid) = pid {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = command(self.oci_runtime)
            .args(["delete", "--force", self.id])
            .output();
    }
}

/// rot13, as `tr a-z n-za-m` in the container: what it prints instead of its secret.
fn rot13(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            'a'..='z' => char::from((c as u8 - b'a' + 13) % 26 + b'a'),
            other => other,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_reaches_a_runc_container_and_never_a_disk_backed_file() {
    if let Some(runc) = oci_runtime("runc") {
        a_secret_reaches_the_container_and_never_a_disk_backed_file(&runc).await;
    }
}

/// crun keeps a copy of the bundle in its own state, which must then be in memory too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_reaches_a_crun_container_and_never_a_disk_backed_file() {
    if let Some(crun) = oci_runtime("crun") {
        a_secret_reaches_the_container_and_never_a_disk_backed_file(&crun).await;
    }
}

/// A container's secret reaches its environment and no disk-backed file: the bundle on disk
/// is never rewritten with it (not even for the moment of `create`), the OCI runtime was
/// given a bundle on a tmpfs, which is gone once the container runs, and no file of the
/// instance's state directory holds it, nor of the OCI runtime's own state unless that is on
/// a tmpfs. The instance prints its secret rot13'd, so its output (a file too) does not hold
/// the value itself.
async fn a_secret_reaches_the_container_and_never_a_disk_backed_file(oci_runtime: &Path) {
    let name = oci_runtime.file_name().unwrap().to_str().unwrap();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    // Unique on the machine: container ids and cgroups are the OCI runtime's, shared.
    let id = format!("runtime-secret-{name}-{}-{nanos}", std::process::id());
    let secret = format!("the-secret-value-{nanos}");

    let work = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().join("instances").join(&id);
    let bundle = dir.join("bundle");
    let rootfs = runway_oci::Rootfs {
        path: busybox_rootfs(work.path()),
        id_shift: 0,
    };
    let config = runway_oci::ImageConfig {
        entrypoint: vec![
            "/bin/sh".into(),
            "-c".into(),
            "trap 'exit 0' TERM; echo \"secret rot13: $(echo \"$API_TOKEN\" | tr a-z n-za-m)\"; \
             sleep 600 & wait"
                .into(),
        ],
        ..runway_oci::ImageConfig::default()
    };
    let cgroup_path = format!("/runway/{id}");
    let options = runway_oci::BundleOptions {
        env: vec![("GREETING".into(), "hello".into())],
        hostname: Some(id.clone()),
        cgroups_path: Some(cgroup_path.clone()),
        user_namespace: None,
        host_dns: false,
        ..runway_oci::BundleOptions::default()
    };
    runway_oci::build_bundle(&bundle, &config, &rootfs, &options).unwrap();
    let on_disk = bundle.join("config.json");
    let built = std::fs::metadata(&on_disk).unwrap();
    // A write now would change the file's ctime even within the same clock tick's margin.
    tokio::time::sleep(Duration::from_millis(50)).await;

    // Read the bundle on disk over and over while the instance starts: the secret must not
    // be in it even for the moment `create` reads it.
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (watching, on_disk, secret) = (watching.clone(), on_disk.clone(), secret.clone());
        std::thread::spawn(move || {
            let (mut reads, mut seen) = (0u64, 0u64);
            while watching.load(Ordering::Relaxed) {
                if let Ok(text) = std::fs::read_to_string(&on_disk) {
                    seen += u64::from(text.contains(&secret));
                }
                reads += 1;
            }
            (reads, seen)
        })
    };

    let spec = InstanceSpec {
        id: id.clone(),
        service: "test".into(),
        revision: "test-1".into(),
        artifact: Artifact::Container {
            bundle: bundle.clone(),
            oci_runtime: oci_runtime.to_owned(),
            image: "busybox".into(),
            cgroup_path: Some(cgroup_path),
        },
        env: BTreeMap::from([("GREETING".into(), "hello".into())]),
        secret_env: BTreeMap::from([("API_TOKEN".into(), secret.clone())]),
        port: None,
        container_port: None,
        probes: Probes::default(),
        stop_signal: "TERM".parse().unwrap(),
        stop_grace_period: Duration::from_secs(5),
        restart: RestartPolicy {
            mode: RestartMode::Never,
            ..RestartPolicy::default()
        },
        limits: Limits::default(),
        logs: LogLimits::default(),
        managed: false,
        inherit_env: false,
        sandbox: None,
        network: None,
        egress: Default::default(),
    };
    let _delete = Delete {
        oci_runtime,
        id: &id,
        state_dir: &dir,
    };
    let supervisor = tokio::spawn({
        let dir = dir.clone();
        async move { supervise(&dir, spec).await }
    });
    let runtime = LocalRuntime::new(LocalConfig::new(
        state.path(),
        SupervisorCommand {
            program: "runway-supervisor".into(),
            args: Vec::new(),
        },
    ));
    let deadline = Instant::now() + WAIT;
    while !dir.join(SOCKET).exists() {
        assert!(Instant::now() < deadline, "the supervisor never listened");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut status = runtime.watch(&id).await.unwrap();
    let printed = format!("secret rot13: {}", rot13(&secret));
    let running = tokio::time::timeout(WAIT, async {
        loop {
            let current = status.borrow_and_update().clone();
            assert!(!current.phase.is_final(), "it ended: {current:?}");
            let logs = runtime.logs(&id, 10).await.unwrap();
            if current.phase == Phase::Running && logs.iter().any(|l| l.text == printed) {
                return current;
            }
            let _ = tokio::time::timeout(Duration::from_millis(50), status.changed()).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never ran and printed its secret: {:?}", status.borrow()));
    watching.store(false, Ordering::Relaxed);
    let (reads, seen) = watcher.join().unwrap();
    assert_eq!(
        seen, 0,
        "{on_disk:?} held the secret in {seen} of {reads} reads"
    );

    // (a) It saw its secret (the output above), and the bundle on disk was never rewritten.
    let now = std::fs::metadata(&on_disk).unwrap();
    assert_eq!(
        (now.ino(), now.ctime(), now.ctime_nsec()),
        (built.ino(), built.ctime(), built.ctime_nsec()),
        "{on_disk:?} was written after it was built"
    );
    // (b) `create` read a bundle on a tmpfs, elsewhere, and it is gone now the container runs.
    let created = created_from(oci_runtime, &id);
    assert_ne!(created, bundle, "{name} create read the bundle on disk");
    assert!(
        on_tmpfs(&created),
        "{name} create read {created:?}, not on a tmpfs"
    );
    assert!(!created.exists(), "{created:?} is still there");
    // (c) No file of the instance's holds the secret: not its state directory (the bundle,
    // spec, status, output) nor the OCI runtime's state of the container, unless in memory.
    let runtime_state = state_dir(oci_runtime, &id);
    assert!(runtime_state.is_dir(), "{runtime_state:?}");
    let mut held = files_containing(&dir, secret.as_bytes());
    if !on_tmpfs(&runtime_state) {
        held.extend(files_containing(&runtime_state, secret.as_bytes()));
    }
    assert!(held.is_empty(), "the secret is in {held:?}");
    assert!(running.pid.is_some());

    let stopped = runtime.instance_stop(&id).await.unwrap();
    assert_eq!(stopped.phase, Phase::Stopped, "{stopped:?}");
    let ended = tokio::time::timeout(WAIT, supervisor)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(ended.phase, Phase::Stopped);
    assert!(files_containing(&dir, secret.as_bytes()).is_empty());
    runtime.instance_remove(&id).await.unwrap();
    assert!(!dir.exists());
}
