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

use runway_runtime::seccomp::SeccompPolicy;
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
        identity_token: None,
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

/// What the tenant's probe program asks the kernel, with the error number of each answer (0
/// for none): calls Runway's seccomp profile refuses, made with arguments the kernel itself
/// would refuse otherwise (so each answer tells the filter's `EPERM`, or `ENOSYS` for `clone3`,
/// from the kernel's: `EINVAL`, `EFAULT`, `EOPNOTSUPP`, `ESRCH`).
const PROBE_C: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
static void try(const char *name, long result) {
    printf("%s=%d\n", name, result < 0 ? errno : 0);
}
int main(void) {
    try("bpf", syscall(SYS_bpf, 1000, 0, 0));
    try("io_uring_setup", syscall(SYS_io_uring_setup, 1, 0));
    try("clone3", syscall(SYS_clone3, 0, 0));
    try("keyctl", syscall(SYS_keyctl, 1000, 0, 0, 0, 0));
    try("ptrace", syscall(SYS_ptrace, 0x7fff, 0, 0, 0));
    return 0;
}
"#;

/// The probe, compiled static (it runs on an image's busybox root too) into `dir`. `None`,
/// saying why, where gcc or a static C library is missing outside CI.
fn probe_program(dir: &Path) -> Option<PathBuf> {
    let source = dir.join("probe.c");
    let program = dir.join("probe");
    std::fs::write(&source, PROBE_C).unwrap();
    let built = std::process::Command::new("gcc")
        .args(["-static", "-O1", "-o"])
        .arg(&program)
        .arg(&source)
        .output();
    match built {
        Ok(output) if output.status.success() => Some(program),
        other => {
            let reason = format!("cannot build the static probe with gcc: {other:?}");
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
            eprintln!("skipped: {reason}");
            None
        }
    }
}

/// What the instance runs: its seccomp mode, where it is, whether it may make a user
/// namespace (as `unshare -Urn …` did in the issue), and the probe's answers.
fn confinement_script(probe: &str) -> String {
    format!(
        "grep Seccomp: /proc/self/status; echo pwd=$(pwd); \
         busybox unshare -U true 2>/dev/null && echo unshare=made || echo unshare=refused; \
         {probe}; echo done"
    )
}

/// The probe's and the script's answers, as `name=value` (`Seccomp` from `Seccomp:\t2`).
fn answers(lines: &[String]) -> BTreeMap<String, String> {
    lines
        .iter()
        .filter_map(|line| {
            let (name, value) = line.split_once(['=', ':'])?;
            Some((name.trim().to_owned(), value.trim().to_owned()))
        })
        .collect()
}

/// A runtime's configuration on `state` running containers with `oci_runtime`.
fn runtime_config(state: &Path, oci_runtime: &Path) -> LocalConfig {
    let mut config = LocalConfig::new(
        state,
        SupervisorCommand {
            program: "runway-supervisor".into(),
            args: Vec::new(),
        },
    );
    config.oci_runtime = oci_runtime.to_owned();
    config
}

/// The runtime of `config`, with service `test` unconfined when `relaxed`, as a server does
/// for the services its operator names in `runtime.seccomp_unconfined`.
fn confining_runtime(config: LocalConfig, relaxed: bool) -> LocalRuntime {
    let mut policy = SeccompPolicy::default();
    if relaxed {
        policy.unconfined.insert("test".to_owned());
    }
    LocalRuntime::new(config).with_seccomp(policy)
}

/// A spec of service `test` that runs `artifact` once.
fn once(id: &str, artifact: Artifact) -> InstanceSpec {
    InstanceSpec {
        id: id.to_owned(),
        service: "test".into(),
        revision: "test-1".into(),
        artifact,
        env: BTreeMap::new(),
        secret_env: BTreeMap::new(),
        port: None,
        container_port: None,
        probes: Probes::default(),
        stop_signal: "TERM".parse().unwrap(),
        stop_grace_period: Duration::from_secs(1),
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
        identity_token: None,
        egress: Default::default(),
    }
}

/// Makes what `spec` runs from as the runtime does for a supervisor (the bundle, its seccomp
/// profile), runs it under a supervisor in this process until it ends (bounded), and returns
/// its output and the bundle's `config.json`. Nothing is left running or on disk.
async fn run_prepared(
    runtime: &LocalRuntime,
    spec: InstanceSpec,
    oci_runtime: &Path,
) -> (Vec<String>, serde_json::Value) {
    let id = spec.id.clone();
    let dir = runtime.instance_dir(&id);
    let prepared = runtime.prepare(spec).await.unwrap();
    let Artifact::Container { bundle, .. } = &prepared.artifact else {
        panic!("not made a container: {prepared:?}");
    };
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    let _delete = Delete {
        oci_runtime,
        id: &id,
        state_dir: &dir,
    };
    // The container's init is ours to reap, as a supervisor's is: its exit code is known.
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let ended = tokio::time::timeout(WAIT, supervise(&dir, prepared))
        .await
        .unwrap_or_else(|_| panic!("{id} did not end within {WAIT:?}"))
        .unwrap();
    assert_eq!(ended.phase, Phase::Exited, "{ended:?}");
    let lines: Vec<String> = runtime
        .logs(&id, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|line| line.text)
        .collect();
    assert!(
        lines.iter().any(|l| l == "done"),
        "{id} did not finish its script ({ended:?}): {lines:?}"
    );
    runtime.instance_remove(&id).await.unwrap();
    assert!(!dir.exists());
    (lines, config)
}

/// Confined: filter mode 2, no user namespace, and each probed call refused by the filter.
fn assert_confined(what: &str, lines: &[String], config: &serde_json::Value) {
    let found = answers(lines);
    let expected = [
        ("Seccomp", "2"),
        ("unshare", "refused"),
        ("bpf", "1"),
        ("io_uring_setup", "1"),
        ("clone3", "38"),
        ("keyctl", "1"),
        ("ptrace", "1"),
    ];
    for (name, value) in expected {
        assert_eq!(
            found.get(name).map(String::as_str),
            Some(value),
            "{what}: {name} in {lines:?}"
        );
    }
    assert_eq!(
        config["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ALLOW",
        "{what}"
    );
}

/// Unconfined by the operator: no filter, a user namespace made, the kernel's own answers.
fn assert_unconfined(what: &str, lines: &[String], config: &serde_json::Value) {
    let found = answers(lines);
    for (name, value) in [
        ("Seccomp", "0"),
        ("unshare", "made"),
        // EFAULT, EINVAL: the kernel read the (missing) arguments.
        ("io_uring_setup", "14"),
        ("clone3", "22"),
    ] {
        assert_eq!(
            found.get(name).map(String::as_str),
            Some(value),
            "{what}: {name} in {lines:?}"
        );
    }
    assert!(config["linux"].get("seccomp").is_none(), "{what}: {config}");
}

/// The layer, config and manifest of a one-layer image of `rootfs`, put in the runtime's image
/// cache under `state` as a pull would leave them; returns a reference by digest, which the
/// runtime then pulls from the cache alone (no registry).
fn cache_image(state: &Path, rootfs: &Path) -> String {
    let work = tempfile::tempdir().unwrap();
    let layer_path = work.path().join("layer.tar");
    let packed = std::process::Command::new("tar")
        .args(["--owner=0", "--group=0", "--numeric-owner", "-C"])
        .arg(rootfs)
        .arg("-cf")
        .arg(&layer_path)
        .arg(".")
        .status()
        .unwrap();
    assert!(packed.success());
    let layer = std::fs::read(&layer_path).unwrap();
    let layer_digest = runway_oci::Digest::of(&layer).to_string();
    let architecture = match std::env::consts::ARCH {
        "aarch64" => "arm64",
        _ => "amd64",
    };
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": architecture,
        "os": "linux",
        "config": {"Entrypoint": ["/bin/sh"], "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }))
    .unwrap();
    let config_digest = runway_oci::Digest::of(&config).to_string();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": layer_digest,
            "size": layer.len(),
        }],
    }))
    .unwrap();
    let store = runway_oci::Store::open(state.join("images")).unwrap();
    for blob in [&layer, &config, &manifest] {
        let path = store.blob_path(&runway_oci::Digest::of(blob));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, blob).unwrap();
    }
    format!(
        "127.0.0.1:5999/runway/probe@{}",
        runway_oci::Digest::of(&manifest)
    )
}

/// A state directory the containers' root (host id 100000, in its user namespace) can search
/// its way through, as a server's data directory is (`0711`).
fn searchable_state() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let state = tempfile::tempdir().unwrap();
    std::fs::set_permissions(state.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_under_runc_is_confined_by_seccomp_unless_the_operator_lifts_it() {
    if let Some(runc) = oci_runtime("runc") {
        an_image_is_confined_by_seccomp_unless_the_operator_lifts_it(&runc).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_under_crun_is_confined_by_seccomp_unless_the_operator_lifts_it() {
    if let Some(crun) = oci_runtime("crun") {
        an_image_is_confined_by_seccomp_unless_the_operator_lifts_it(&crun).await;
    }
}

/// An image (busybox and the probe, in the runtime's image cache), run by the runtime in its
/// user namespace: its root may not make a user namespace of its own (where it would have
/// every capability), nor use eBPF, io_uring, keyrings or ptrace; with the operator's
/// `seccomp_unconfined` for its service it may.
async fn an_image_is_confined_by_seccomp_unless_the_operator_lifts_it(oci_runtime: &Path) {
    let work = tempfile::tempdir().unwrap();
    let Some(probe) = probe_program(work.path()) else {
        return;
    };
    let rootfs = busybox_rootfs(work.path());
    for applet in ["grep", "pwd", "true", "echo", "unshare"] {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
    }
    std::fs::copy(&probe, rootfs.join("bin/probe")).unwrap();
    let name = oci_runtime.file_name().unwrap().to_str().unwrap();
    for relaxed in [false, true] {
        let state = searchable_state();
        let reference = cache_image(state.path(), &rootfs);
        let runtime = confining_runtime(runtime_config(state.path(), oci_runtime), relaxed);
        let id = format!("seccomp-image-{name}-{relaxed}-{}", std::process::id());
        let spec = once(
            &id,
            Artifact::Image {
                reference,
                command: Some(vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    confinement_script("/bin/probe"),
                ]),
                args: None,
                working_dir: None,
            },
        );
        let (lines, config) = run_prepared(&runtime, spec, oci_runtime).await;
        assert!(
            config["linux"]["uidMappings"].is_array(),
            "an image runs in a user namespace: {config}"
        );
        if relaxed {
            assert_unconfined(&id, &lines, &config);
        } else {
            assert_confined(&id, &lines, &config);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_process_under_runc_is_confined_at_app_unless_the_operator_lifts_it() {
    if let Some(runc) = oci_runtime("runc") {
        a_sandboxed_process_is_confined_at_app_unless_the_operator_lifts_it(&runc).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_process_under_crun_is_confined_at_app_unless_the_operator_lifts_it() {
    if let Some(crun) = oci_runtime("crun") {
        a_sandboxed_process_is_confined_at_app_unless_the_operator_lifts_it(&crun).await;
    }
}

/// A tenant's plain process in its sandbox: confined as an image is, and its code at `/app`,
/// where it starts, whatever the code's host path: neither its working directory, nor its
/// mount table, nor a refusal names that path. Relative paths in its command keep working.
async fn a_sandboxed_process_is_confined_at_app_unless_the_operator_lifts_it(oci_runtime: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let work = tempfile::tempdir().unwrap();
    let Some(probe) = probe_program(work.path()) else {
        return;
    };
    // The code somewhere only the platform knows: a snapshot in the data directory.
    let state = searchable_state();
    let snapshots = state.path().join("sources");
    let code = snapshots.join("7").join("ab12cd");
    std::fs::create_dir_all(code.join("bin")).unwrap();
    for dir in [&snapshots, &snapshots.join("7"), &code, &code.join("bin")] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::copy(&probe, code.join("bin/probe")).unwrap();
    let host_code = code.display().to_string();
    let name = oci_runtime.file_name().unwrap().to_str().unwrap();
    for relaxed in [false, true] {
        // As a server has it: the runtime's state and the snapshots in its data directory.
        let mut config = runtime_config(&state.path().join("runtime"), oci_runtime);
        config.private_dirs = vec![state.path().to_owned()];
        config.code_snapshots = Some(snapshots.clone());
        let runtime = confining_runtime(config, relaxed);
        let sandbox = runway_runtime::sandbox::SandboxPolicy::default()
            .sandbox(7, &code)
            .unwrap();
        let id = format!("seccomp-process-{name}-{relaxed}-{}", std::process::id());
        let script = format!(
            "echo mounts-name-host-path=$(grep -c '{host_code}' /proc/self/mounts); \
             grep -q ' /app ' /proc/self/mounts && echo app-mounted=yes; {}",
            confinement_script("bin/probe")
        );
        let mut spec = once(
            &id,
            Artifact::Command {
                program: "sh".into(),
                args: vec!["-c".into(), script],
                // As the driver gives it: the code's host path, which the process never sees.
                working_dir: Some(code.clone()),
            },
        );
        spec.sandbox = Some(sandbox.clone());
        let (lines, config) = run_prepared(&runtime, spec.clone(), oci_runtime).await;
        let found = answers(&lines);
        assert_eq!(
            found.get("pwd").map(String::as_str),
            Some("/app"),
            "{lines:?}"
        );
        assert_eq!(
            found.get("mounts-name-host-path").map(String::as_str),
            Some("0"),
            "{lines:?}"
        );
        assert_eq!(found.get("app-mounted").map(String::as_str), Some("yes"));
        assert_eq!(config["process"]["cwd"], "/app");
        // Nor its environment (its own command line holds the path only to look for it).
        assert!(
            !config["process"]["env"].to_string().contains(&host_code),
            "the process is told the code's host path: {}",
            config["process"]
        );
        if relaxed {
            assert_unconfined(&id, &lines, &config);
            continue;
        }
        assert_confined(&id, &lines, &config);
        // Refusals name paths as the process would see them, never the host's.
        for (working_dir, program, says) in [
            (
                code.join("nowhere"),
                "sh",
                "working directory /app/nowhere does not",
            ),
            (
                PathBuf::from("/etc"),
                "sh",
                "outside the code directory /app",
            ),
            (
                code.clone(),
                "bin/missing",
                "command /app/bin/missing does not exist",
            ),
            (code.clone(), "/opt/tool", "command /opt/tool is outside"),
        ] {
            let mut refused = spec.clone();
            refused.artifact = Artifact::Command {
                program: program.into(),
                args: Vec::new(),
                working_dir: Some(working_dir),
            };
            let error = match runtime.prepare(refused).await {
                Ok(spec) => panic!("{program} was not refused: {spec:?}"),
                Err(error) => error.to_string(),
            };
            assert!(error.contains(says), "{error}");
            assert!(!error.contains(&host_code), "{error}");
        }
    }
}
