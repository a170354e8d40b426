//! A container run by an OCI runtime (runc, or crun) the way containerd's shim does it:
//! `create` with our pipes as its stdio, `start`, then wait for the container's init process,
//! which the supervisor reaps as the child subreaper. The cgroup stays until `delete`, so the
//! kernel's OOM-kill counter can be read after the process ended.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::process::{ChildStderr, ChildStdout, Command};
use tokio::sync::oneshot;

use crate::network::InstanceNetwork;
use crate::process::{Exit, StopSignal, Stopped};
use crate::secret_bundle::{self, SecretBundle};

/// How long one `runc` command may take before the start counts as failed.
const OCI_RUNTIME_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub(crate) struct Container {
    id: String,
    oci_runtime: PathBuf,
    state_dir: PathBuf,
    cgroup_path: Option<String>,
    pid: u32,
    exited: oneshot::Receiver<Exit>,
    exit: Option<Exit>,
}

/// What the container printed, through the pipes it was created with.
pub(crate) type Output = (Option<ChildStdout>, Option<ChildStderr>);

impl Container {
    /// Creates and starts the container. `state_dir` holds the pid file and the OCI runtime's
    /// own log; its errors are in the returned message.
    pub(crate) async fn start(
        id: &str,
        bundle: &Path,
        oci_runtime: &Path,
        cgroup_path: Option<&str>,
        state_dir: &Path,
        secret_env: &BTreeMap<String, String>,
        network: Option<&InstanceNetwork>,
    ) -> Result<(Self, Output), String> {
        // A container left by an earlier supervisor of this instance would block the id.
        delete(oci_runtime, id).await;
        let pid_file = state_dir.join("container.pid");
        let log_file = state_dir.join("oci-runtime.log");
        let _ = fs::remove_file(&pid_file);
        let _ = fs::remove_file(&log_file);
        // The bundle on disk has no secrets: `create` reads a copy with them, in memory, gone
        // once it has ([`crate::secret_bundle`]).
        let memory = secret_bundle::memory_dir();
        if is_crun(oci_runtime) || !secret_env.is_empty() {
            secret_bundle::ensure_memory_backed(memory)?;
        }
        let with_secrets = if secret_env.is_empty() {
            None
        } else {
            let config = bundle.join("config.json");
            let plain =
                fs::read(&config).map_err(|e| format!("cannot read {}: {e}", config.display()))?;
            let text = secret_bundle::with_secrets(&plain, bundle, secret_env)?;
            Some(SecretBundle::write(memory, id, &text)?)
        };
        let mut create = oci_command(oci_runtime);
        create
            .arg("--log")
            .arg(&log_file)
            .args(["--log-format", "json", "create", "--bundle"])
            .arg(with_secrets.as_ref().map_or(bundle, SecretBundle::dir))
            .arg("--pid-file")
            .arg(&pid_file)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let created = async {
            let mut child = create
                .spawn()
                .map_err(|e| format!("cannot run {}: {e}", oci_runtime.display()))?;
            let output = (child.stdout.take(), child.stderr.take());
            let status = tokio::time::timeout(OCI_RUNTIME_TIMEOUT, child.wait())
                .await
                .map_err(|_| format!("{} create did not finish in time", oci_runtime.display()))?
                .map_err(|e| format!("{} create: {e}", oci_runtime.display()))?;
            Ok::<_, String>((output, status))
        }
        .await;
        drop(with_secrets);
        let (output, status) = created?;
        if !status.success() {
            return Err(format!(
                "{} create failed: {}",
                oci_runtime.display(),
                last_error(&log_file).unwrap_or_else(|| Exit::from_status(status).to_string())
            ));
        }
        let pid = fs::read_to_string(&pid_file)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok())
            .ok_or_else(|| format!("{} create wrote no pid file", oci_runtime.display()))?;
        let exited = spawn_reaper(pid);
        let container = Self {
            id: id.to_owned(),
            oci_runtime: oci_runtime.to_owned(),
            state_dir: state_dir.to_owned(),
            cgroup_path: cgroup_path.map(str::to_owned),
            pid,
            exited,
            exit: None,
        };
        // The namespace exists from `create` on; the process starts once it is joined.
        if let Some(network) = network
            && let Err(error) = crate::network::attach(network, pid).await
        {
            container.remove().await;
            return Err(format!("cannot give the instance its network: {error}"));
        }
        let started = oci_command(oci_runtime)
            .arg("--log")
            .arg(&log_file)
            .args(["--log-format", "json", "start", id])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .status();
        let status = tokio::time::timeout(OCI_RUNTIME_TIMEOUT, started).await;
        if !matches!(status, Ok(Ok(s)) if s.success()) {
            let reason = last_error(&log_file).unwrap_or_else(|| "no reason given".to_owned());
            container.remove().await;
            return Err(format!("{} start failed: {reason}", oci_runtime.display()));
        }
        Ok((container, output))
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    pub(crate) fn signal(&self, signal: StopSignal) {
        if self.exit.is_none() {
            let _ = nix::sys::signal::kill(Pid::from_raw(self.pid as i32), signal.0);
        }
    }

    /// Cancel-safe.
    pub(crate) async fn wait(&mut self) -> Exit {
        if let Some(exit) = self.exit {
            return exit;
        }
        let exit = (&mut self.exited).await.unwrap_or(Exit::Unknown);
        self.exit = Some(exit);
        exit
    }

    pub(crate) async fn stop(&mut self, signal: StopSignal, grace: Duration) -> Stopped {
        self.signal(signal);
        if let Ok(exit) = tokio::time::timeout(grace, self.wait()).await {
            return Stopped {
                exit,
                killed: false,
            };
        }
        self.signal(StopSignal::KILL);
        Stopped {
            exit: self.wait().await,
            killed: true,
        }
    }

    /// Whether the kernel OOM-killed a process of the container. Read before [`Self::remove`].
    pub(crate) fn oom_killed(&self) -> bool {
        self.cgroup_path
            .as_deref()
            .is_some_and(|path| oom_kills(path) > 0)
    }

    /// Deletes the container (and its cgroup) from the OCI runtime.
    pub(crate) async fn remove(self) {
        delete(&self.oci_runtime, &self.id).await;
        let _ = fs::remove_file(self.state_dir.join("container.pid"));
    }
}

/// A command running the OCI runtime. crun (1.8) refuses a hybrid cgroup host (v1 controllers
/// with a v2 hierarchy at `/sys/fs/cgroup/unified`); it is run in a mount namespace of its own
/// with that mount hidden, where it sees plain cgroup v1. Every crun command gets the same view.
///
/// crun keeps a copy of a container's `config.json`, its secrets included, in its state
/// directory for the container's life: its state is kept in memory, beside the bundles with
/// secrets ([`secret_bundle::crun_root`]). runc's state holds no environment.
fn oci_command(oci_runtime: &Path) -> Command {
    if !is_crun(oci_runtime) {
        return Command::new(oci_runtime);
    }
    let mut command = if Path::new("/sys/fs/cgroup/unified/cgroup.controllers").exists() {
        let mut command = Command::new("unshare");
        command
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg("umount /sys/fs/cgroup/unified && exec \"$0\" \"$@\"")
            .arg(oci_runtime);
        command
    } else {
        Command::new(oci_runtime)
    };
    command
        .arg("--root")
        .arg(secret_bundle::crun_root(secret_bundle::memory_dir()));
    command
}

fn is_crun(oci_runtime: &Path) -> bool {
    oci_runtime.file_name().is_some_and(|name| name == "crun")
}

pub(crate) async fn delete(oci_runtime: &Path, id: &str) {
    let deleted = oci_command(oci_runtime)
        .args(["delete", "--force", id])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .status();
    let _ = tokio::time::timeout(OCI_RUNTIME_TIMEOUT, deleted).await;
}

/// Waits for the container's init process, which is ours to reap as child subreaper. If it is
/// not (the supervisor was not made a subreaper), watches for it to disappear instead.
fn spawn_reaper(pid: u32) -> oneshot::Receiver<Exit> {
    let (tx, rx) = oneshot::channel();
    let pid = Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
    tokio::task::spawn_blocking(move || {
        let exit = loop {
            match waitpid(pid, None) {
                Ok(WaitStatus::Exited(_, code)) => break Exit::Code(code),
                Ok(WaitStatus::Signaled(_, signal, _)) => break Exit::Signal(StopSignal(signal)),
                Ok(_) | Err(nix::Error::EINTR) => continue,
                Err(_) => {
                    while nix::sys::signal::kill(pid, None).is_ok() {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    break Exit::Unknown;
                }
            }
        };
        let _ = tx.send(exit);
    });
    rx
}

/// The OCI runtime's last error message from its JSON log.
fn last_error(log_file: &Path) -> Option<String> {
    let text = fs::read_to_string(log_file).ok()?;
    text.lines().rev().find_map(|line| {
        let entry: serde_json::Value = serde_json::from_str(line).ok()?;
        (entry.get("level")?.as_str()? == "error")
            .then(|| entry.get("msg")?.as_str().map(str::to_owned))
            .flatten()
    })
}

/// The kernel's count of OOM kills in a cgroup: `memory.events` on cgroup v2,
/// `memory.oom_control` on v1 (both say `oom_kill N`).
fn oom_kills(cgroup_path: &str) -> u64 {
    let relative = cgroup_path.trim_start_matches('/');
    let candidates = [
        format!("/sys/fs/cgroup/memory/{relative}/memory.oom_control"),
        format!("/sys/fs/cgroup/{relative}/memory.events"),
        format!("/sys/fs/cgroup/unified/{relative}/memory.events"),
    ];
    candidates
        .iter()
        .filter_map(|path| fs::read_to_string(path).ok())
        .filter_map(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("oom_kill "))
                .and_then(|n| n.trim().parse::<u64>().ok())
        })
        .max()
        .unwrap_or(0)
}
