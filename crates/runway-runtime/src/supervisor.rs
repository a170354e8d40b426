//! The supervisor: one process per instance that starts it, probes it, restarts it with backoff,
//! captures its output and stops it, and that outlives whoever asked for the instance.
//!
//! Its state directory holds everything another process needs to find it again:
//! `spec.json` (secrets left out), `status.json` (rewritten on every change), `output.log*`, and
//! `supervisor.sock`, where it answers one JSON request a line ([`Request`]) with JSON lines of
//! [`InstanceStatus`]: `watch` pushes every change.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{self, Read};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::container::{Container, Output};
use crate::logs::{self, LogWriter};
use crate::probe::{self, Tally, Verdict};
use crate::process::{Exit, Process, ProcessSpec, StopSignal, Stopped};
use crate::secret_bundle;
use crate::spec::{Artifact, DEFAULT_PATH, InstanceSpec, Probe, RestartMode};
use crate::status::{ExitRecord, InstanceStatus, Phase, now_ms, to_ms};

pub const SOCKET: &str = "supervisor.sock";
pub const STATUS_FILE: &str = "status.json";
pub const SPEC_FILE: &str = "spec.json";
/// Lines of output kept in memory to say why an instance ended.
const LAST_LINES: usize = 20;
/// How long a starting process may listen elsewhere than its address before it is told (an
/// app may open another port, for metrics, before its own).
const WARN_AFTER: Duration = Duration::from_secs(2);

/// One request on the supervisor's socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Answer with the status once.
    Status,
    /// Answer with the status now and after every change, until it is final.
    Watch,
    /// Stop the instance (its stop signal, its grace period, then SIGKILL) and then exit.
    Stop,
}

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("cannot read the instance spec from stdin: {0}")]
    Spec(String),
    #[error("cannot prepare the state directory {path}")]
    StateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot listen on {path}")]
    Listen {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The entry point of `runway supervise`: detaches from the caller's session, becomes the child
/// subreaper (to reap container processes), reads the [`InstanceSpec`] as JSON from stdin and
/// supervises the instance until it is stopped or ends for good. Returns the exit code.
pub fn main(state_dir: &Path) -> i32 {
    // Its stderr is the instance's supervisor log; `RUST_LOG` filters it.
    runway_log::init(runway_log::LogFormat::Text);
    // Not in the caller's session nor process group: its terminal's signals do not reach us,
    // and the process group this makes is the instance's, which the watchdog can end whole.
    if let Err(error) = nix::unistd::setsid() {
        tracing::warn!(%error, "cannot leave the caller's session");
    }
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let spec = match read_spec() {
        Ok(spec) => spec,
        Err(error) => {
            tracing::error!(error = runway_log::chain(&error), "cannot read the spec");
            return 1;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "cannot start");
            return 1;
        }
    };
    // Before the instance starts: from here on, however this process ends, the instance ends.
    let watchdog = match spawn_watchdog(state_dir) {
        Ok(watchdog) => watchdog,
        Err(error) => {
            tracing::error!(%error, "cannot start its watchdog");
            return 1;
        }
    };
    let span = tracing::info_span!(
        "instance",
        id = %spec.id,
        service = %spec.service,
        revision = %spec.revision
    );
    let ended = runtime.block_on(tracing::Instrument::instrument(
        supervise(state_dir, spec),
        span,
    ));
    release_watchdog(watchdog);
    match ended {
        Ok(status) if status.phase == Phase::Failed => 1,
        Ok(_) => 0,
        Err(error) => {
            tracing::error!(error = runway_log::chain(&error), "supervision failed");
            1
        }
    }
}

/// The argument that makes a supervisor binary a watchdog: `runway-supervisor --watchdog DIR`,
/// `runway supervise --watchdog DIR`.
pub const WATCHDOG_ARG: &str = "--watchdog";

/// The supervisor's pid, in its watchdog's environment: asking for the parent's pid later
/// would give init's if the supervisor died first.
const SUPERVISOR_PID_ENV: &str = "RUNWAY_SUPERVISOR_PID";

/// What the supervisor writes to its watchdog when it ends on its own terms.
const RELEASE: &str = "released";

/// Starts this binary again as the instance's watchdog ([`watchdog_main`]), in a process group
/// of its own, holding the only copy of a pipe from this process. The same arguments as this
/// process's, with [`WATCHDOG_ARG`] before the state directory.
fn spawn_watchdog(state_dir: &Path) -> io::Result<std::process::Child> {
    let exe = std::env::current_exe()?;
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let leading = &args[..args.len().saturating_sub(1)];
    std::process::Command::new(exe)
        .args(leading)
        .arg(WATCHDOG_ARG)
        .arg(state_dir)
        .env(SUPERVISOR_PID_ENV, std::process::id().to_string())
        .stdin(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
}

/// Tells the watchdog the instance ended here, and lets it go.
fn release_watchdog(mut watchdog: std::process::Child) {
    use std::io::Write;
    if let Some(mut pipe) = watchdog.stdin.take() {
        let _ = writeln!(pipe, "{RELEASE}");
    }
    let _ = watchdog.wait();
}

/// The watchdog: waits on its pipe from the supervisor that started it. When the pipe closes
/// without the supervisor's release (it was killed, `kill -9` included), it ends what the
/// supervisor ran: every process of its process group (a plain process and its children), and
/// the container, which the OCI runtime deletes. So no instance outlives its supervisor with
/// its port and its secrets. Returns the exit code.
pub fn watchdog_main(state_dir: &Path) -> i32 {
    use std::io::BufRead;
    let Some(supervisor) = std::env::var(SUPERVISOR_PID_ENV)
        .ok()
        .and_then(|pid| pid.parse::<i32>().ok())
        .filter(|&pid| pid > 1)
    else {
        tracing::error!("the watchdog started without {SUPERVISOR_PID_ENV}");
        return 2;
    };
    let mut line = String::new();
    let _ = io::stdin().lock().read_line(&mut line);
    if line.trim_end() == RELEASE {
        return 0;
    }
    // The supervisor was started in a process group of its own, which this one left; its
    // plain process is in it.
    let supervisor = nix::unistd::Pid::from_raw(supervisor);
    if supervisor != nix::unistd::getpgrp() {
        let _ = nix::sys::signal::killpg(supervisor, nix::sys::signal::Signal::SIGKILL);
    }
    let spec = std::fs::read_to_string(state_dir.join(SPEC_FILE))
        .ok()
        .and_then(|text| serde_json::from_str::<InstanceSpec>(&text).ok());
    if let Some(InstanceSpec {
        id,
        artifact: Artifact::Container { oci_runtime, .. },
        ..
    }) = spec
    {
        let deleted = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map(|runtime| runtime.block_on(crate::container::delete(&oci_runtime, &id)));
        // Its bundle with secrets, if it was killed while `create` read it.
        secret_bundle::remove_stale(secret_bundle::memory_dir(), &id);
        if let Err(error) = deleted {
            tracing::error!(container = %id, %error, "the watchdog cannot delete the container");
            return 1;
        }
    }
    tracing::warn!(
        %supervisor,
        "the supervisor ended without stopping its instance; the watchdog ended the instance"
    );
    0
}

fn read_spec() -> Result<InstanceSpec, SupervisorError> {
    let mut text = String::new();
    io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| SupervisorError::Spec(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| SupervisorError::Spec(e.to_string()))
}

/// Supervises one instance in this process until it is stopped or ends for good, serving its
/// status on `state_dir/supervisor.sock`. Returns the final status.
pub async fn supervise(
    state_dir: &Path,
    spec: InstanceSpec,
) -> Result<InstanceStatus, SupervisorError> {
    let io_error = |source| SupervisorError::StateDir {
        path: state_dir.to_owned(),
        source,
    };
    std::fs::create_dir_all(state_dir).map_err(io_error)?;
    let mut persisted = spec.clone();
    persisted.secret_env.clear();
    write_json(&state_dir.join(SPEC_FILE), &persisted).map_err(io_error)?;
    // What an earlier supervisor of the instance, killed while `create` read it, left.
    if matches!(spec.artifact, Artifact::Container { .. }) {
        secret_bundle::remove_stale(secret_bundle::memory_dir(), &spec.id);
    }
    let socket = state_dir.join(SOCKET);
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).map_err(|source| SupervisorError::Listen {
        path: socket.clone(),
        source,
    })?;
    let log_writer = LogWriter::open(state_dir, spec.logs).map_err(io_error)?;

    let initial = InstanceStatus {
        id: spec.id.clone(),
        service: Some(spec.service.clone()),
        revision: Some(spec.revision.clone()),
        managed: spec.is_managed(),
        phase: Phase::Starting,
        ready: false,
        pid: None,
        port: spec.port,
        address: spec.address(),
        restarts: 0,
        consecutive_failures: 0,
        started_at_ms: None,
        next_start_at_ms: None,
        message: "starting".to_owned(),
        warning: None,
        last_exit: None,
        dropped_output: None,
        supervisor_pid: std::process::id(),
    };
    let status = Arc::new(watch::Sender::new(initial));
    let rate = Arc::new(logs::Rate::new(&spec.logs));
    let (commands, command_rx) = mpsc::channel(8);
    let persist = tokio::spawn(persist_status(
        state_dir.join(STATUS_FILE),
        status.subscribe(),
    ));
    let server = tokio::spawn(serve(listener, status.subscribe(), commands.clone()));
    let signals = tokio::spawn(stop_on_signals(commands));
    let (chunks, chunk_rx) = mpsc::channel(256);
    let writer = tokio::spawn(write_logs(
        log_writer,
        chunk_rx,
        Arc::clone(&status),
        spec.logs.bytes_per_second,
    ));

    let mut supervisor = Supervisor {
        spec,
        state_dir: state_dir.to_owned(),
        status,
        commands: command_rx,
        chunks,
        rate,
    };
    supervisor.run().await;
    let final_status = supervisor.status.borrow().clone();
    drop(supervisor);
    let _ = writer.await;
    signals.abort();
    // With the status sender gone, the status file gets its last write and watchers their last
    // line; the server stops accepting and ends once they have.
    let _ = tokio::time::timeout(Duration::from_millis(500), async {
        let _ = persist.await;
        let _ = server.await;
    })
    .await;
    write_json(&state_dir.join(STATUS_FILE), &final_status).map_err(io_error)?;
    let _ = std::fs::remove_file(&socket);
    Ok(final_status)
}

enum Command {
    Stop,
}

/// A running process of the instance.
enum Running {
    Command(Process),
    Container(Container),
}

impl Running {
    fn pid(&self) -> u32 {
        match self {
            Running::Command(process) => process.pid(),
            Running::Container(container) => container.pid(),
        }
    }

    async fn wait(&mut self) -> Exit {
        match self {
            Running::Command(process) => process.wait().await,
            Running::Container(container) => container.wait().await,
        }
    }

    async fn stop(&mut self, signal: StopSignal, grace: Duration) -> Stopped {
        match self {
            Running::Command(process) => process.stop(signal, grace).await,
            Running::Container(container) => container.stop(signal, grace).await,
        }
    }

    /// Releases what the process held; says whether it was OOM-killed.
    async fn finish(self) -> bool {
        match self {
            Running::Command(_) => false,
            Running::Container(container) => {
                let oom = container.oom_killed();
                container.remove().await;
                oom
            }
        }
    }
}

/// How one run of the instance's process ended.
enum Ending {
    /// It ended on its own, or the supervisor ended it for the given cause.
    Ended {
        exit: Exit,
        cause: Option<String>,
        oom: bool,
    },
    /// It was stopped on request.
    Stopped { exit: Exit, killed: bool },
    /// It could not be started.
    NotStarted(String),
}

struct Supervisor {
    spec: InstanceSpec,
    state_dir: PathBuf,
    /// Shared with the log writer, which says there what output it dropped.
    status: Arc<watch::Sender<InstanceStatus>>,
    commands: mpsc::Receiver<Command>,
    chunks: mpsc::Sender<LogEvent>,
    /// The instance's output rate, over all its runs.
    rate: Arc<logs::Rate>,
}

/// What the log writer task is sent.
enum LogEvent {
    Output(logs::Output),
    /// Answer with the last lines written since the previous flush, once all before is written.
    Flush(oneshot::Sender<Vec<String>>),
}

impl From<logs::Output> for LogEvent {
    fn from(output: logs::Output) -> Self {
        LogEvent::Output(output)
    }
}

/// What probing observed, for the run loop.
enum ProbeEvent {
    Started,
    /// Still starting, and listening elsewhere than its address: why it will not be reached.
    Warning(String),
    Ready(bool),
    /// The startup or liveness probe failed: the process is ended and restarted.
    Failed {
        probe: &'static str,
        error: String,
    },
}

impl Supervisor {
    async fn run(&mut self) {
        loop {
            let started_at = SystemTime::now();
            let ending = self.run_once().await;
            let ran_for = started_at.elapsed().unwrap_or_default();
            let (record, failed) = match ending {
                Ending::Stopped { exit, killed } => {
                    let cause = killed.then(|| "the grace period ran out".to_owned());
                    let record = self.exit_record(exit, cause, false).await;
                    let message = format!("stopped: {}", record.reason);
                    self.update(|s| {
                        s.phase = Phase::Stopped;
                        s.message = message;
                        s.last_exit = Some(record);
                    });
                    return;
                }
                Ending::Ended { exit, cause, oom } => {
                    let failed = !exit.success() || cause.is_some() || oom;
                    (self.exit_record(exit, cause, oom).await, failed)
                }
                Ending::NotStarted(reason) => (
                    self.exit_record(Exit::Unknown, Some(reason), false).await,
                    true,
                ),
            };
            let restart = match self.spec.restart.mode {
                RestartMode::Always => true,
                RestartMode::OnFailure => failed,
                RestartMode::Never => false,
            };
            if !restart {
                self.update(|s| {
                    s.phase = if failed { Phase::Failed } else { Phase::Exited };
                    s.message = record.reason.clone();
                    s.last_exit = Some(record);
                });
                return;
            }
            // Every restart backs off, a clean exit's too (as Kubernetes does), so a process that
            // keeps ending at once never spins; running `reset_after` starts the count again.
            let policy = &self.spec.restart;
            let failures = if ran_for >= policy.reset_after {
                1
            } else {
                self.status.borrow().consecutive_failures.saturating_add(1)
            };
            let wait = policy.backoff(failures);
            let crash_loop = failures >= policy.crash_loop_after.max(1);
            let message = format!(
                "{}{}; starting again {}",
                if crash_loop { "crash loop: " } else { "" },
                record.reason,
                if wait.is_zero() {
                    "now".to_owned()
                } else {
                    format!("in {wait:?}")
                }
            );
            let next = to_ms(SystemTime::now() + wait);
            self.update(|s| {
                s.phase = if crash_loop {
                    Phase::CrashLoop
                } else {
                    Phase::BackingOff
                };
                s.consecutive_failures = failures;
                s.next_start_at_ms = Some(next);
                s.message = message;
                s.last_exit = Some(record);
            });
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                Some(Command::Stop) = self.commands.recv() => {
                    self.update(|s| {
                        s.phase = Phase::Stopped;
                        s.next_start_at_ms = None;
                        s.message = "stopped while waiting to start again".to_owned();
                    });
                    return;
                }
            }
            self.update(|s| {
                s.restarts += 1;
                s.next_start_at_ms = None;
            });
        }
    }

    /// Starts the process, probes it and waits until it ends, is ended by a failed probe, or a
    /// stop is asked for.
    async fn run_once(&mut self) -> Ending {
        self.update(|s| {
            s.phase = Phase::Starting;
            s.ready = false;
            s.pid = None;
            s.message = "starting".to_owned();
        });
        let (mut running, (stdout, stderr)) = match self.start().await {
            Ok(started) => started,
            Err(reason) => return Ending::NotStarted(reason),
        };
        let mut pumps = JoinSet::new();
        if let Some(stdout) = stdout {
            pumps.spawn(logs::pump(
                stdout,
                logs::Stream::Stdout,
                Arc::clone(&self.rate),
                self.chunks.clone(),
            ));
        }
        if let Some(stderr) = stderr {
            pumps.spawn(logs::pump(
                stderr,
                logs::Stream::Stderr,
                Arc::clone(&self.rate),
                self.chunks.clone(),
            ));
        }
        let pid = running.pid();
        let has_startup_probe = self.spec.probes.startup.is_some() && self.spec.port.is_some();
        self.update(|s| {
            s.pid = Some(pid);
            s.started_at_ms = Some(now_ms());
            s.message = format!("process {pid} started");
            s.warning = None;
        });
        let (events, mut event_rx) = mpsc::channel(8);
        let mut probes = JoinSet::new();
        if has_startup_probe {
            self.spawn_startup_probe(&mut probes, events.clone());
        } else {
            self.on_started(&mut probes, events.clone());
        }
        let ending = loop {
            tokio::select! {
                exit = running.wait() => {
                    break Ending::Ended { exit, cause: None, oom: false };
                }
                Some(event) = event_rx.recv() => match event {
                    ProbeEvent::Started => self.on_started(&mut probes, events.clone()),
                    ProbeEvent::Warning(warning) => self.update(|s| {
                        s.message = format!("starting: {warning}");
                        s.warning = Some(warning);
                    }),
                    ProbeEvent::Ready(ready) => self.update(|s| {
                        s.ready = ready;
                        s.message = if ready { "ready" } else { "not ready: readiness probe failing" }
                            .to_owned();
                    }),
                    ProbeEvent::Failed { probe, error } => {
                        let cause = format!("{probe} probe failed: {error}");
                        self.update(|s| {
                            s.ready = false;
                            s.message = format!("{cause}; stopping");
                        });
                        let stopped = self.stop_running(&mut running).await;
                        break Ending::Ended { exit: stopped.exit, cause: Some(cause), oom: false };
                    }
                },
                Some(Command::Stop) = self.commands.recv() => {
                    self.update(|s| {
                        s.phase = Phase::Stopping;
                        s.ready = false;
                        s.message = format!("stopping with {}", self.spec.stop_signal);
                    });
                    let stopped = self.stop_running(&mut running).await;
                    break Ending::Stopped { exit: stopped.exit, killed: stopped.killed };
                }
            }
        };
        probes.abort_all();
        let oom = running.finish().await;
        // The pipes close when the process and everything it started are gone; bound the wait
        // in case a grandchild keeps them open.
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while pumps.join_next().await.is_some() {}
        })
        .await;
        pumps.abort_all();
        self.update(|s| {
            s.pid = None;
            s.ready = false;
        });
        match ending {
            Ending::Ended {
                exit,
                cause,
                oom: _,
            } => Ending::Ended { exit, cause, oom },
            other => other,
        }
    }

    async fn stop_running(&self, running: &mut Running) -> Stopped {
        running
            .stop(self.spec.stop_signal, self.spec.stop_grace_period)
            .await
    }

    async fn start(&self) -> Result<(Running, Output), String> {
        match &self.spec.artifact {
            Artifact::Command {
                program,
                args,
                working_dir,
            } => {
                let mut env: Vec<(OsString, OsString)> = Vec::new();
                for (key, value) in self.spec.env.iter().chain(&self.spec.secret_env) {
                    env.push((key.into(), value.into()));
                }
                if !self.spec.inherit_env && !self.spec.env.contains_key("PATH") {
                    env.push(("PATH".into(), DEFAULT_PATH.into()));
                }
                let spec = ProcessSpec {
                    program: program.clone(),
                    args: args.iter().map(OsString::from).collect(),
                    env,
                    clear_env: !self.spec.inherit_env,
                    working_dir: working_dir.clone(),
                    capture_output: true,
                    own_process_group: false,
                };
                let mut process = Process::spawn(&spec).map_err(|e| runway_log::chain(&e))?;
                let output = process.take_output();
                Ok((Running::Command(process), output))
            }
            Artifact::Container {
                bundle,
                oci_runtime,
                cgroup_path,
                ..
            } => {
                let (container, output) = Container::start(
                    &self.spec.id,
                    bundle,
                    oci_runtime,
                    cgroup_path.as_deref(),
                    &self.state_dir,
                    &self.spec.secret_env,
                    self.spec.network.as_ref(),
                )
                .await?;
                Ok((Running::Container(container), output))
            }
            Artifact::Image { reference, .. } => Err(format!(
                "image {reference} was not made into a bundle before starting"
            )),
        }
    }

    fn spawn_startup_probe(&self, probes: &mut JoinSet<()>, events: mpsc::Sender<ProbeEvent>) {
        let (Some(probe), Some(address)) = (self.spec.probes.startup.clone(), self.spec.address())
        else {
            return;
        };
        // What the instance listens on tells why it is not reached.
        let own_network = self.spec.network.is_some();
        let pid = self.status.borrow().pid;
        let hint =
            move || pid.and_then(|pid| crate::network::listen_hint(pid, address, own_network));
        probes.spawn(async move {
            tokio::time::sleep(probe.initial_delay).await;
            let mut tally = Tally::default();
            let warn_from = tokio::time::Instant::now() + WARN_AFTER;
            let mut warned: Option<String> = None;
            loop {
                let started = tokio::time::Instant::now();
                let checked = probe::check_reaching(&probe, address).await;
                let reached = checked.as_ref().err().is_none_or(|failed| failed.reached);
                let event = match tally.record(&probe, checked.map_err(|failed| failed.message)) {
                    Verdict::Passed => ProbeEvent::Started,
                    Verdict::Failed(mut error) => {
                        if let Some(hint) = hint() {
                            error = format!("{error} ({})", hint.text);
                        }
                        ProbeEvent::Failed {
                            probe: "startup",
                            error,
                        }
                    }
                    Verdict::Unchanged => {
                        // Listening elsewhere is told early, not only when the probe gives up
                        // minutes later.
                        if tokio::time::Instant::now() >= warn_from
                            && let Some(hint) = hint().filter(|hint| hint.elsewhere)
                            && warned.as_ref() != Some(&hint.text)
                        {
                            warned = Some(hint.text.clone());
                            let _ = events.send(ProbeEvent::Warning(hint.text)).await;
                        }
                        probe::wait_period_or_listening(&probe, address, started, reached).await;
                        continue;
                    }
                };
                let _ = events.send(event).await;
                return;
            }
        });
    }

    /// Past startup: readiness and liveness probes begin.
    fn on_started(&self, probes: &mut JoinSet<()>, events: mpsc::Sender<ProbeEvent>) {
        let readiness = self.spec.probes.readiness.clone();
        let liveness = self.spec.probes.liveness.clone();
        let address = self.spec.address();
        let ready_now = readiness.is_none() || address.is_none();
        self.update(|s| {
            s.phase = Phase::Running;
            s.warning = None;
            s.ready = ready_now;
            s.message = if ready_now {
                "running and ready"
            } else {
                "running; not ready yet"
            }
            .to_owned();
        });
        let Some(address) = address else { return };
        if let Some(probe) = readiness {
            let events = events.clone();
            probes.spawn(watch_probe(
                probe,
                address,
                events,
                Eager::UntilPassed,
                |verdict| match verdict {
                    Verdict::Passed => Some(ProbeEvent::Ready(true)),
                    Verdict::Failed(_) => Some(ProbeEvent::Ready(false)),
                    Verdict::Unchanged => None,
                },
            ));
        }
        if let Some(probe) = liveness {
            probes.spawn(watch_probe(
                probe,
                address,
                events,
                Eager::Never,
                |verdict| match verdict {
                    Verdict::Failed(error) => Some(ProbeEvent::Failed {
                        probe: "liveness",
                        error,
                    }),
                    _ => None,
                },
            ));
        }
    }

    async fn exit_record(&self, exit: Exit, cause: Option<String>, oom: bool) -> ExitRecord {
        let signal = match exit {
            Exit::Signal(signal) => Some(signal.to_string()),
            _ => None,
        };
        let mut reason = match (&cause, oom) {
            (_, true) => {
                let limit = self
                    .spec
                    .limits
                    .memory_bytes
                    .map(|b| format!(" of {b} bytes"));
                format!(
                    "killed for going over its memory limit{} (OOM)",
                    limit.unwrap_or_default()
                )
            }
            (Some(cause), false) => format!("{cause} ({exit})"),
            (None, false) => exit.to_string(),
        };
        if exit == Exit::Unknown && cause.is_some() {
            reason = cause.clone().unwrap_or_default();
        }
        let (tx, rx) = oneshot::channel();
        let last_output = match self.chunks.send(LogEvent::Flush(tx)).await {
            Ok(()) => rx.await.unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        ExitRecord {
            code: exit.code(),
            signal,
            oom_killed: oom,
            cause,
            reason,
            last_output,
            at_ms: now_ms(),
        }
    }

    fn update(&self, change: impl FnOnce(&mut InstanceStatus)) {
        self.status.send_modify(change);
    }
}

/// Runs a probe every period for as long as the process runs, turning verdicts into events.
/// Whether a probe checks again sooner than its period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Eager {
    /// Every [`EAGER_PERIOD`] until it first passes, then every period: a readiness probe,
    /// so that an instance that just started is in traffic the moment it answers, not up to
    /// a period later (a cold start, a deploy). Its failures before then change nothing: an
    /// instance is not ready until it passes.
    UntilPassed,
    /// Every period.
    Never,
}

/// How often an [`Eager::UntilPassed`] probe checks before it first passes.
const EAGER_PERIOD: Duration = Duration::from_millis(50);

async fn watch_probe(
    probe: Probe,
    address: SocketAddr,
    events: mpsc::Sender<ProbeEvent>,
    eager: Eager,
    to_event: impl Fn(Verdict) -> Option<ProbeEvent>,
) {
    tokio::time::sleep(probe.initial_delay).await;
    let mut tally = Tally::default();
    let mut passed = false;
    loop {
        let started = tokio::time::Instant::now();
        let verdict = tally.record(&probe, probe::check(&probe, address).await);
        passed |= verdict == Verdict::Passed;
        if let Some(event) = to_event(verdict)
            && events.send(event).await.is_err()
        {
            return;
        }
        if eager == Eager::UntilPassed && !passed {
            let period = probe.period.max(Duration::from_millis(10));
            tokio::time::sleep_until(started + EAGER_PERIOD.min(period)).await;
        } else {
            probe::wait_period(&probe, started).await;
        }
    }
}

/// Writes the instance's output, keeping the last lines of the current run in memory, and
/// says in the instance's status what it could not write. It always reads on: the disk's
/// refusals cost the instance its log lines, never its pipes.
async fn write_logs(
    mut writer: LogWriter,
    mut events: mpsc::Receiver<LogEvent>,
    status: Arc<watch::Sender<InstanceStatus>>,
    bytes_per_second: u64,
) {
    let mut last_lines = VecDeque::with_capacity(LAST_LINES);
    let mut reported = None;
    let over_rate = format!("printed faster than {bytes_per_second} bytes a second");
    while let Some(event) = events.recv().await {
        match event {
            LogEvent::Output(logs::Output::Chunk(chunk)) => {
                writer.write(&chunk, SystemTime::now());
                if last_lines.len() == LAST_LINES {
                    last_lines.pop_front();
                }
                last_lines.push_back(String::from_utf8_lossy(&chunk.text).into_owned());
            }
            LogEvent::Output(logs::Output::Dropped { bytes }) => {
                writer.count_dropped(bytes, &over_rate);
            }
            LogEvent::Flush(answer) => {
                writer.flush();
                let _ = answer.send(last_lines.drain(..).collect());
            }
        }
        // A batch is written once nothing more is waiting: at once when the instance prints
        // little, in large writes when it prints a lot.
        if events.is_empty() {
            writer.flush();
            report_dropped(&writer, &status, &mut reported);
        }
    }
    writer.flush();
    report_dropped(&writer, &status, &mut None);
}

/// Puts what the writer dropped in the status: when it starts or stops dropping, and at most
/// once a second in between (every change of the status is written to the disk).
fn report_dropped(
    writer: &LogWriter,
    status: &watch::Sender<InstanceStatus>,
    reported: &mut Option<Instant>,
) {
    let dropped = writer.dropped();
    status.send_if_modified(|s| {
        let was = s.dropped_output.as_ref();
        let due = was.map(|d| d.ongoing) != dropped.map(|d| d.ongoing)
            || (was != dropped && reported.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)));
        if due {
            if dropped.is_some_and(|d| d.ongoing) && !was.is_some_and(|d| d.ongoing) {
                tracing::warn!(
                    reason = dropped.map_or("", |d| d.reason.as_str()),
                    "the instance's output cannot be written: it is dropped and counted"
                );
            }
            s.dropped_output = dropped.cloned();
            *reported = Some(Instant::now());
        }
        due
    });
}

async fn persist_status(path: PathBuf, mut status: watch::Receiver<InstanceStatus>) {
    loop {
        let current = status.borrow_and_update().clone();
        if let Err(error) = write_json(&path, &current) {
            tracing::warn!(file = %path.display(), %error, "cannot write the status");
        }
        if status.changed().await.is_err() {
            return;
        }
    }
}

/// Answers on the socket until the status channel closes (the instance is done), then waits
/// for the connections still open.
async fn serve(
    listener: UnixListener,
    status: watch::Receiver<InstanceStatus>,
    commands: mpsc::Sender<Command>,
) {
    let mut connections = JoinSet::new();
    let mut closed = status.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { break };
                connections.spawn(answer(stream, status.clone(), commands.clone()));
                while connections.try_join_next().is_some() {}
            }
            changed = closed.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

async fn answer(
    stream: UnixStream,
    mut status: watch::Receiver<InstanceStatus>,
    commands: mpsc::Sender<Command>,
) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let request = match serde_json::from_str::<Request>(&line) {
            Ok(request) => request,
            Err(error) => {
                let answer = serde_json::json!({ "error": format!("bad request: {error}") });
                if send_line(&mut write, &answer).await.is_err() {
                    return;
                }
                continue;
            }
        };
        match request {
            Request::Status => {
                let current = status.borrow().clone();
                if send_line(&mut write, &current).await.is_err() {
                    return;
                }
            }
            Request::Stop => {
                let _ = commands.send(Command::Stop).await;
                let current = status.borrow().clone();
                if send_line(&mut write, &current).await.is_err() {
                    return;
                }
            }
            Request::Watch => loop {
                let current = status.borrow_and_update().clone();
                let done = current.phase.is_final();
                if send_line(&mut write, &current).await.is_err() || done {
                    return;
                }
                if status.changed().await.is_err() {
                    return;
                }
            },
        }
    }
}

async fn send_line(
    write: &mut tokio::net::unix::OwnedWriteHalf,
    value: &impl Serialize,
) -> io::Result<()> {
    let mut line = serde_json::to_vec(value).map_err(io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await
}

async fn stop_on_signals(commands: mpsc::Sender<Command>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    let _ = commands.send(Command::Stop).await;
}

/// Writes JSON to a temporary file and renames it into place, so readers never see half.
pub(crate) fn write_json(path: &Path, value: &impl Serialize) -> io::Result<()> {
    let text = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    let temporary = path.with_extension("json.tmp");
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}
