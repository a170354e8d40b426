//! The child under supervision: one task owns the process; the gRPC service and the wrapper's
//! own shutdown talk to it through a [`SupervisorHandle`] (commands on an mpsc channel, the
//! latest state on a watch channel).

use std::time::Duration;

use runway_runtime::process::{Exit, Process, StopSignal};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::callback::{self, ShutdownCallback};
use crate::proto::Status;

/// What the API reports, and how the child ended once it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WrapperState {
    pub(crate) status: Status,
    /// Empty unless the child ended badly: then how it ended, as the runtime says it.
    pub(crate) failure_reason: String,
    pub(crate) exit: Option<Exit>,
}

/// The signals and bounds of a shutdown.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StopPolicy {
    /// Sent by `InitGracefulShutdown`; nothing follows it (a graceful stop lets jobs finish).
    pub(crate) graceful: StopSignal,
    /// Sent by `InitForcefulShutdown` and by the wrapper's own shutdown.
    pub(crate) forceful: StopSignal,
    /// After `forceful`, how long until SIGKILL.
    pub(crate) termination_timeout: Duration,
}

#[derive(Debug)]
enum Command {
    Graceful {
        callback: Option<ShutdownCallback>,
        reply: oneshot::Sender<Reply>,
    },
    Forceful {
        reply: oneshot::Sender<Reply>,
    },
    /// The wrapper itself is stopping: a forceful stop nobody waits on.
    Terminate,
}

type Reply = Result<WrapperState, String>;

/// Talks to the supervisor task. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct SupervisorHandle {
    commands: mpsc::Sender<Command>,
    state: watch::Receiver<WrapperState>,
}

impl SupervisorHandle {
    pub(crate) fn state(&self) -> WrapperState {
        self.state.borrow().clone()
    }

    /// Sends the graceful signal (again, if asked again, as upstream) and registers the
    /// callback; once the child has stopped, only reports the state.
    pub(crate) async fn graceful(&self, callback: Option<ShutdownCallback>) -> Reply {
        let (reply, answer) = oneshot::channel();
        self.ask(Command::Graceful { callback, reply }, answer)
            .await
    }

    /// Sends the forceful signal and arms the kill after the termination timeout.
    pub(crate) async fn forceful(&self) -> Reply {
        let (reply, answer) = oneshot::channel();
        self.ask(Command::Forceful { reply }, answer).await
    }

    async fn ask(&self, command: Command, answer: oneshot::Receiver<Reply>) -> Reply {
        if self.commands.send(command).await.is_err() {
            return Ok(self.state());
        }
        answer.await.unwrap_or_else(|_| Ok(self.state()))
    }

    /// Stops the child forcefully and waits until it has stopped, at most `bound`.
    pub(crate) async fn terminate(&mut self, bound: Duration) -> Option<WrapperState> {
        let _ = self.commands.send(Command::Terminate).await;
        let stopped = self.state.wait_for(|state| state.status == Status::Stopped);
        match tokio::time::timeout(bound, stopped).await {
            Ok(Ok(state)) => Some(state.clone()),
            Ok(Err(_)) | Err(_) => None,
        }
    }
}

/// Owns the process; runs until every handle is dropped, then waits for the callbacks it sent.
#[derive(Debug)]
pub(crate) struct Supervisor {
    process: Process,
    program: String,
    policy: StopPolicy,
    commands: mpsc::Receiver<Command>,
    state: watch::Sender<WrapperState>,
    callback: Option<ShutdownCallback>,
    /// When the forceful stop turns into SIGKILL.
    kill_at: Option<Instant>,
    killed: bool,
    callbacks: JoinSet<()>,
}

impl Supervisor {
    /// Takes charge of a started process: its status is `running`.
    pub(crate) fn new(
        process: Process,
        program: String,
        policy: StopPolicy,
    ) -> (Self, SupervisorHandle) {
        let (commands_tx, commands) = mpsc::channel(16);
        let initial = WrapperState {
            status: Status::Running,
            failure_reason: String::new(),
            exit: None,
        };
        let (state, state_rx) = watch::channel(initial);
        let supervisor = Self {
            process,
            program,
            policy,
            commands,
            state,
            callback: None,
            kill_at: None,
            killed: false,
            callbacks: JoinSet::new(),
        };
        (
            supervisor,
            SupervisorHandle {
                commands: commands_tx,
                state: state_rx,
            },
        )
    }

    pub(crate) async fn run(mut self) {
        loop {
            let running = self.process.exit().is_none();
            let kill_at = self.kill_at.filter(|_| running);
            tokio::select! {
                exit = self.process.wait(), if running => self.stopped(exit),
                () = sleep_until(kill_at), if kill_at.is_some() => self.kill(),
                command = self.commands.recv() => match command {
                    Some(command) => self.handle(command),
                    None => break,
                },
            }
        }
        while self.callbacks.join_next().await.is_some() {}
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Graceful { callback, reply } => {
                let _ = reply.send(self.graceful(callback));
            }
            Command::Forceful { reply } => {
                let _ = reply.send(self.forceful("InitForcefulShutdown"));
            }
            Command::Terminate => {
                if let Err(error) = self.forceful("the wrapper is stopping") {
                    crate::log::error(format_args!("{error}"));
                }
            }
        }
    }

    fn graceful(&mut self, callback: Option<ShutdownCallback>) -> Reply {
        if self.process.exit().is_some() {
            return Ok(self.state.borrow().clone());
        }
        let signal = self.policy.graceful;
        crate::log::info(format_args!(
            "graceful shutdown: sending {signal} to {} (pid {})",
            self.program,
            self.process.pid()
        ));
        self.process.signal(signal).map_err(|e| {
            format!(
                "could not send the graceful shutdown signal: {}",
                runway_log::chain(&e)
            )
        })?;
        if let Some(callback) = callback {
            crate::log::info(format_args!(
                "registered the shutdown callback {} {}",
                if callback.method.is_empty() {
                    "GET"
                } else {
                    &callback.method
                },
                callback.url
            ));
            self.callback = Some(callback);
        }
        Ok(self.in_shutdown())
    }

    fn forceful(&mut self, why: &str) -> Reply {
        if self.process.exit().is_some() {
            return Ok(self.state.borrow().clone());
        }
        let signal = self.policy.forceful;
        let timeout = crate::duration::format(self.policy.termination_timeout);
        crate::log::info(format_args!(
            "forceful shutdown ({why}): sending {signal} to {} (pid {}), SIGKILL after {timeout}",
            self.program,
            self.process.pid()
        ));
        self.process.signal(signal).map_err(|e| {
            format!(
                "could not send the forceful shutdown signal: {}",
                runway_log::chain(&e)
            )
        })?;
        // A second forceful stop signals again but keeps the first deadline.
        if self.kill_at.is_none() {
            self.kill_at = Some(Instant::now() + self.policy.termination_timeout);
        }
        Ok(self.in_shutdown())
    }

    fn in_shutdown(&mut self) -> WrapperState {
        self.state.send_modify(|state| {
            if state.status == Status::Running {
                state.status = Status::InShutdown;
            }
        });
        self.state.borrow().clone()
    }

    fn kill(&mut self) {
        self.kill_at = None;
        crate::log::info(format_args!(
            "{} (pid {}) did not stop within {} of {}: sending SIGKILL",
            self.program,
            self.process.pid(),
            crate::duration::format(self.policy.termination_timeout),
            self.policy.forceful
        ));
        match self.process.signal(StopSignal::KILL) {
            Ok(()) => self.killed = true,
            Err(error) => crate::log::error(format_args!("{}", runway_log::chain(&error))),
        }
    }

    fn stopped(&mut self, exit: Exit) {
        self.kill_at = None;
        let failure_reason = if exit.success() {
            String::new()
        } else if self.killed && exit == Exit::Signal(StopSignal::KILL) {
            format!(
                "{exit}: did not stop within {} of {}",
                crate::duration::format(self.policy.termination_timeout),
                self.policy.forceful
            )
        } else {
            exit.to_string()
        };
        crate::log::info(format_args!(
            "{} (pid {}) {exit}",
            self.program,
            self.process.pid()
        ));
        self.state.send_replace(WrapperState {
            status: Status::Stopped,
            failure_reason,
            exit: Some(exit),
        });
        match self.callback.take() {
            Some(callback) => {
                self.callbacks.spawn(callback::run(callback));
            }
            None => crate::log::info(format_args!("no shutdown callback registered")),
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
