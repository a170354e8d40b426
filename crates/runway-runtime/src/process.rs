//! The supervisor's core: start one process, signal it, stop it within a grace period and record
//! how it ended.
//!
//! Both the instance supervisor and `runway wrapper` use this: what differs between them is what
//! they do around it (probes, restarts and log files for instances; a gRPC API for the wrapper).

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::str::FromStr;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, ChildStderr, ChildStdout};

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct ProcessSpec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Variables set on top of the inherited environment (or of an empty one, see `clear_env`).
    pub env: Vec<(OsString, OsString)>,
    /// Start from an empty environment instead of this process's own.
    pub clear_env: bool,
    pub working_dir: Option<PathBuf>,
    /// Capture stdout and stderr through pipes; otherwise they are inherited.
    pub capture_output: bool,
    /// Put the process in a process group of its own, so a terminal's Ctrl-C reaches only the
    /// supervisor, which then stops it with the configured signal.
    pub own_process_group: bool,
}

/// Why a process could not be started or signalled.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("cannot start {program}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot send {signal} to process {pid}")]
    Signal {
        signal: StopSignal,
        pid: u32,
        #[source]
        source: nix::Error,
    },
}

/// A signal given by name (`SIGTERM`, `TERM`, `sigterm`) or number (`15`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopSignal(pub Signal);

impl StopSignal {
    pub const TERM: Self = Self(Signal::SIGTERM);
    pub const QUIT: Self = Self(Signal::SIGQUIT);
    pub const KILL: Self = Self(Signal::SIGKILL);
    pub const INT: Self = Self(Signal::SIGINT);
}

impl fmt::Display for StopSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

/// The text was not a signal name or number.
#[derive(Debug, thiserror::Error)]
#[error("unknown signal {0:?}: expected a name such as SIGTERM, TERM or QUIT, or a number")]
pub struct UnknownSignal(pub String);

impl FromStr for StopSignal {
    type Err = UnknownSignal;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let trimmed = text.trim();
        if let Ok(number) = trimmed.parse::<i32>() {
            return Signal::try_from(number)
                .map(Self)
                .map_err(|_| UnknownSignal(text.to_owned()));
        }
        let upper = trimmed.to_ascii_uppercase();
        let name = if upper.starts_with("SIG") {
            upper
        } else {
            format!("SIG{upper}")
        };
        Signal::from_str(&name)
            .map(Self)
            .map_err(|_| UnknownSignal(text.to_owned()))
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(StopSignal),
    /// Neither (a stopped process reported as ended, which `wait` never returns).
    Unknown,
}

impl Exit {
    pub fn from_status(status: std::process::ExitStatus) -> Self {
        if let Some(code) = status.code() {
            Exit::Code(code)
        } else if let Some(signal) = status.signal().and_then(|s| Signal::try_from(s).ok()) {
            Exit::Signal(StopSignal(signal))
        } else {
            Exit::Unknown
        }
    }

    /// A shell's view of the same: the code, or 128 + the signal number.
    pub fn code(self) -> i32 {
        match self {
            Exit::Code(code) => code,
            Exit::Signal(signal) => 128 + signal.0 as i32,
            Exit::Unknown => -1,
        }
    }

    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exited with code {code}"),
            Exit::Signal(signal) => write!(f, "killed by {signal}"),
            Exit::Unknown => f.write_str("ended for an unknown reason"),
        }
    }
}

/// How [`Process::stop`] ended the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    pub exit: Exit,
    /// The grace period ran out and the process was sent SIGKILL.
    pub killed: bool,
}

/// One running process.
#[derive(Debug)]
pub struct Process {
    child: Child,
    pid: u32,
    exit: Option<Exit>,
}

impl Process {
    /// Starts the process. With `capture_output`, take its pipes with [`Process::take_output`].
    pub fn spawn(spec: &ProcessSpec) -> Result<Self, ProcessError> {
        let mut command = tokio::process::Command::new(&spec.program);
        command.args(&spec.args);
        if spec.clear_env {
            command.env_clear();
        }
        command.envs(spec.env.iter().map(|(k, v)| (k, v)));
        if let Some(dir) = &spec.working_dir {
            command.current_dir(dir);
        }
        command.stdin(Stdio::null());
        if spec.capture_output {
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        if spec.own_process_group {
            command.process_group(0);
        }
        // The supervisor decides when the process dies; dropping the handle never kills it.
        command.kill_on_drop(false);
        let child = command.spawn().map_err(|source| ProcessError::Spawn {
            program: spec.program.display().to_string(),
            source,
        })?;
        let pid = child.id().unwrap_or_default();
        Ok(Self {
            child,
            pid,
            exit: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The process's stdout and stderr pipes, once, when they were captured.
    pub fn take_output(&mut self) -> (Option<ChildStdout>, Option<ChildStderr>) {
        (self.child.stdout.take(), self.child.stderr.take())
    }

    /// Sends a signal. Signalling a process that already ended is not an error.
    pub fn signal(&self, signal: StopSignal) -> Result<(), ProcessError> {
        if self.exit.is_some() {
            return Ok(());
        }
        let pid = i32::try_from(self.pid).unwrap_or(i32::MAX);
        match kill(Pid::from_raw(pid), signal.0) {
            Ok(()) | Err(nix::Error::ESRCH) => Ok(()),
            Err(source) => Err(ProcessError::Signal {
                signal,
                pid: self.pid,
                source,
            }),
        }
    }

    /// Waits until the process ends. Cancel-safe; returns the same value when called again.
    pub async fn wait(&mut self) -> Exit {
        if let Some(exit) = self.exit {
            return exit;
        }
        let exit = match self.child.wait().await {
            Ok(status) => Exit::from_status(status),
            // Only when the child was already reaped elsewhere; nothing more is known.
            Err(_) => Exit::Unknown,
        };
        self.exit = Some(exit);
        exit
    }

    /// The exit, if the process has ended and was waited for.
    pub fn exit(&self) -> Option<Exit> {
        self.exit
    }

    /// Sends `signal`, waits up to `grace`, then sends SIGKILL and waits for the end.
    pub async fn stop(&mut self, signal: StopSignal, grace: Duration) -> Stopped {
        if let Some(exit) = self.exit {
            return Stopped {
                exit,
                killed: false,
            };
        }
        // An error here means the process is beyond our reach; SIGKILL below says so too.
        let _ = self.signal(signal);
        if let Ok(exit) = tokio::time::timeout(grace, self.wait()).await {
            return Stopped {
                exit,
                killed: false,
            };
        }
        let _ = self.signal(StopSignal::KILL);
        let exit = self.wait().await;
        Stopped { exit, killed: true }
    }
}

/// Whether process `pid` is running: there, and not a zombie waiting to be reaped (which has
/// ended all the same).
pub fn alive(pid: u32) -> bool {
    pid > 0
        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> ProcessSpec {
        ProcessSpec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            ..ProcessSpec::default()
        }
    }

    #[test]
    fn signals_parse_by_name_or_number() {
        assert_eq!("SIGTERM".parse::<StopSignal>().unwrap(), StopSignal::TERM);
        assert_eq!("quit".parse::<StopSignal>().unwrap(), StopSignal::QUIT);
        assert_eq!("9".parse::<StopSignal>().unwrap(), StopSignal::KILL);
        let error = "SIGNOPE".parse::<StopSignal>().unwrap_err();
        assert!(error.to_string().contains("SIGNOPE"), "{error}");
    }

    #[tokio::test]
    async fn records_exit_code_and_signal() {
        let mut process = Process::spawn(&sh("exit 3")).unwrap();
        assert_eq!(process.wait().await, Exit::Code(3));
        assert_eq!(process.wait().await.code(), 3);

        let mut process = Process::spawn(&sh("kill -USR1 $$")).unwrap();
        let exit = process.wait().await;
        assert_eq!(exit, Exit::Signal(StopSignal(Signal::SIGUSR1)));
        assert_eq!(exit.to_string(), "killed by SIGUSR1");
    }

    #[tokio::test]
    async fn stop_uses_the_signal_then_kills_after_the_grace_period() {
        // Ends on SIGTERM.
        let mut process = Process::spawn(&sh("sleep 30")).unwrap();
        let stopped = process.stop(StopSignal::TERM, Duration::from_secs(5)).await;
        assert_eq!(
            stopped,
            Stopped {
                exit: Exit::Signal(StopSignal::TERM),
                killed: false
            }
        );

        // Ignores SIGTERM: killed once the grace period is over.
        let mut process =
            Process::spawn(&sh("trap '' TERM; echo ready; while :; do sleep 1; done")).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = std::time::Instant::now();
        let stopped = process
            .stop(StopSignal::TERM, Duration::from_millis(300))
            .await;
        assert!(stopped.killed);
        assert_eq!(stopped.exit, Exit::Signal(StopSignal::KILL));
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    #[tokio::test]
    async fn a_missing_program_is_a_clear_error() {
        let spec = ProcessSpec {
            program: "/nonexistent/app".into(),
            ..ProcessSpec::default()
        };
        let error = Process::spawn(&spec).unwrap_err();
        assert!(
            runway_log::chain(&error).starts_with("cannot start /nonexistent/app: "),
            "{error}"
        );
    }
}
