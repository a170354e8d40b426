//! Acting on every runner manager at once: `wait-healthy`, `shutdown`, `wait-terminated`.
//!
//! Each manager gets a task of its own, so the whole takes about as long as the slowest
//! manager. Within a task:
//!
//! - Connecting makes up to `--retry` attempts (each bounded by `--wrapper-connection-timeout`,
//!   with pauses of 1s, 2s, 4s... up to 30s between them); when they are all spent the manager fails with
//!   exit code 2. A call that fails because the connection broke or stayed silent (each call is
//!   bounded by `--wrapper-connection-timeout` too) reconnects and calls again, at most
//!   `--retry` times in a row, else exit code 2 as well.
//! - The waits poll `CheckStatus` every [`POLL_INTERVAL`] (upstream's pause) until the status is
//!   `running` or `in_shutdown` (healthy) or `stopped` (terminated); `--timeout` bounds the
//!   whole wait, connecting included, and its end is exit code 3. A runner process that stopped
//!   while `wait-healthy` waits will never be healthy: exit code 1 at once, with its failure
//!   reason.
//! - `shutdown` calls `InitGracefulShutdown` (no callback) or `InitForcefulShutdown` once.
//!
//! Every manager runs to its end, failed or not; the exit code is then 0 when all succeeded,
//! else the lowest code among the failures (1 any other failure, 2 retries spent, 3 timeout).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use runway_wrapper::duration;
use runway_wrapper::proto::{
    CheckStatusRequest, InitForcefulShutdownRequest, InitGracefulShutdownRequest, Status,
};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::log;
use crate::managers::Manager;
use crate::transport::{self, ConnectError, Route, WrapperClient};

/// Before the second connection attempt; it doubles before each next one, up to
/// [`RETRY_PAUSE_MAX`], so that the default 10 attempts span about 2.5 minutes: time for a
/// manager that was just created to boot and start its wrapper.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_secs(1);
pub(crate) const RETRY_PAUSE_MAX: Duration = Duration::from_secs(30);

/// The pause after the failed attempt number `attempt` (from 1).
fn retry_pause(attempt: u32) -> Duration {
    RETRY_PAUSE
        .saturating_mul(1 << attempt.saturating_sub(1).min(16))
        .min(RETRY_PAUSE_MAX)
}
/// Between two status checks, as upstream.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    WaitHealthy,
    Shutdown { forceful: bool },
    WaitTerminated,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Self::WaitHealthy => "wait-healthy",
            Self::Shutdown { forceful: false } => "shutdown",
            Self::Shutdown { forceful: true } => "shutdown --forceful",
            Self::WaitTerminated => "wait-terminated",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Connection attempts (at least 1).
    pub(crate) retry: u32,
    /// One attempt's bound, and one call's.
    pub(crate) connection_timeout: Duration,
    /// The bound of a whole wait; `None` for `shutdown`.
    pub(crate) timeout: Option<Duration>,
    pub(crate) transport: transport::Settings,
}

/// Why one manager failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ManagerError {
    #[error("gave up connecting to the wrapper at {address} after {attempts} attempt(s): {last}")]
    RetriesExhausted {
        address: String,
        attempts: u32,
        last: String,
    },
    #[error(
        "--timeout {timeout} ran out waiting for the runner process to be {wanted} (last: {last})"
    )]
    Timeout {
        timeout: String,
        wanted: &'static str,
        last: String,
    },
    #[error("{0}")]
    Failed(String),
}

impl ManagerError {
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Self::Failed(_) => 1,
            Self::RetriesExhausted { .. } => 2,
            Self::Timeout { .. } => 3,
        }
    }
}

/// Runs `action` on every manager concurrently; the exit code.
pub(crate) async fn run(managers: Vec<Manager>, action: Action, settings: Settings) -> i32 {
    if managers.is_empty() {
        log::warn(format!(
            "no runner managers in the output: nothing to do for {}",
            action.name()
        ))
        .emit();
        return 0;
    }
    let count = managers.len();
    log::info(format!("{} on {count} runner manager(s)", action.name())).emit();
    let started = Instant::now();
    let settings = Arc::new(settings);
    let mut tasks = JoinSet::new();
    for manager in managers {
        let settings = Arc::clone(&settings);
        tasks.spawn(async move {
            let result = handle(&manager, action, &settings).await;
            (manager.name, result)
        });
    }
    let mut failures = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((name, Ok(()))) => log::info(format!("{} succeeded", action.name()))
                .manager(&name)
                .emit(),
            Ok((name, Err(error))) => {
                log::error(format!("{} failed", action.name()))
                    .manager(&name)
                    .field("error", error.to_string())
                    .field("exit_code", error.exit_code())
                    .emit();
                failures.push(error.exit_code());
            }
            Err(error) => {
                log::error(format!("{} task failed", action.name()))
                    .error(&error)
                    .emit();
                failures.push(1);
            }
        }
    }
    let elapsed = duration::format(Duration::from_millis(
        u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    ));
    match failures.iter().min() {
        None => {
            log::info(format!(
                "{} succeeded on all {count} runner manager(s)",
                action.name()
            ))
            .field("elapsed", elapsed)
            .emit();
            0
        }
        Some(&code) => {
            log::error(format!(
                "{} failed on {} of {count} runner manager(s)",
                action.name(),
                failures.len()
            ))
            .field("elapsed", elapsed)
            .field("exit_code", code)
            .emit();
            code
        }
    }
}

/// One manager, bounded by `--timeout` when there is one.
async fn handle(
    manager: &Manager,
    action: Action,
    settings: &Settings,
) -> Result<(), ManagerError> {
    let route = transport::route(manager, &settings.transport);
    let mut event = log::debug(format!("{} starting", action.name()))
        .manager(&manager.name)
        .field("instance_name", manager.instance_name.clone())
        .field("wrapper_address", manager.wrapper_address.to_string());
    event = match route {
        Route::Direct => event.field("transport", "direct"),
        Route::Ssh { why } => event.field("transport", "ssh").field("why", why),
    };
    event.emit();

    let mut last = String::from("not connected yet");
    let (wanted, work): (&'static str, _) = match action {
        Action::WaitHealthy => ("running", Work::Wait(true)),
        Action::WaitTerminated => ("stopped", Work::Wait(false)),
        Action::Shutdown { forceful } => ("", Work::Shutdown(forceful)),
    };
    let mut session = Session {
        manager,
        settings,
        client: None,
        last: &mut last,
    };
    let Some(timeout) = settings.timeout else {
        return session.work(work).await;
    };
    match tokio::time::timeout(timeout, session.work(work)).await {
        Ok(result) => result,
        Err(_) => Err(ManagerError::Timeout {
            timeout: duration::format(timeout),
            wanted,
            last,
        }),
    }
}

#[derive(Debug, Clone, Copy)]
enum Work {
    /// `true`: until healthy; `false`: until stopped.
    Wait(bool),
    /// `true`: forceful.
    Shutdown(bool),
}

/// One manager's connection, reopened when it breaks.
struct Session<'a> {
    manager: &'a Manager,
    settings: &'a Settings,
    client: Option<WrapperClient>,
    /// The last thing seen, for the timeout's message.
    last: &'a mut String,
}

impl Session<'_> {
    async fn work(&mut self, work: Work) -> Result<(), ManagerError> {
        match work {
            Work::Wait(healthy) => self.wait(healthy).await,
            Work::Shutdown(forceful) => self.shutdown(forceful).await,
        }
    }

    async fn wait(&mut self, healthy: bool) -> Result<(), ManagerError> {
        loop {
            let response = self
                .call(|mut client| async move {
                    client
                        .check_status(CheckStatusRequest {})
                        .await
                        .map(|r| r.into_inner())
                })
                .await?;
            let status = response.status();
            *self.last = describe(status, &response.failure_reason);
            log::debug("status")
                .manager(&self.manager.name)
                .field("status", status.as_str_name())
                .field("failure_reason", response.failure_reason.clone())
                .emit();
            match (healthy, status) {
                (true, Status::Running | Status::InShutdown) => {
                    log::info("the runner process is healthy")
                        .manager(&self.manager.name)
                        .field("status", status.as_str_name())
                        .emit();
                    return Ok(());
                }
                (true, Status::Stopped) => {
                    return Err(ManagerError::Failed(format!(
                        "the runner process has stopped, so it will never be healthy: {}",
                        describe(status, &response.failure_reason)
                    )));
                }
                (false, Status::Stopped) => {
                    let event = if response.failure_reason.is_empty() {
                        log::info("the runner process has stopped")
                    } else {
                        log::warn("the runner process has stopped, with a failure")
                            .field("failure_reason", response.failure_reason.clone())
                    };
                    event.manager(&self.manager.name).emit();
                    return Ok(());
                }
                _ => tokio::time::sleep(POLL_INTERVAL).await,
            }
        }
    }

    async fn shutdown(&mut self, forceful: bool) -> Result<(), ManagerError> {
        let (status, failure_reason) = if forceful {
            let response = self
                .call(|mut client| async move {
                    client
                        .init_forceful_shutdown(InitForcefulShutdownRequest {})
                        .await
                        .map(|r| r.into_inner())
                })
                .await?;
            (response.status(), response.failure_reason)
        } else {
            let response = self
                .call(|mut client| async move {
                    let request = InitGracefulShutdownRequest {
                        shutdown_callback: None,
                    };
                    client
                        .init_graceful_shutdown(request)
                        .await
                        .map(|r| r.into_inner())
                })
                .await?;
            (response.status(), response.failure_reason)
        };
        let kind = if forceful { "forceful" } else { "graceful" };
        log::info(format!("{kind} shutdown started"))
            .manager(&self.manager.name)
            .field("status", status.as_str_name())
            .field("failure_reason", failure_reason)
            .emit();
        Ok(())
    }

    /// One call, each bounded by the connection timeout; a broken connection is reopened (up to
    /// `--retry` attempts) and the call made again.
    async fn call<T, F, Fut>(&mut self, call: F) -> Result<T, ManagerError>
    where
        F: Fn(WrapperClient) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let bound = self.settings.connection_timeout;
        let attempts = self.settings.retry.max(1);
        let mut failed_calls = 0;
        loop {
            let client = match &self.client {
                Some(client) => client.clone(),
                None => {
                    let client = self.connect().await?;
                    self.client = Some(client.clone());
                    client
                }
            };
            let error = match tokio::time::timeout(bound, call(client)).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(status)) => status,
                Err(_) => tonic::Status::deadline_exceeded(format!(
                    "no answer within {}",
                    duration::format(bound)
                )),
            };
            // Only a broken or silent connection is worth a new one; anything else the wrapper
            // answered is final.
            if !matches!(
                error.code(),
                tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Unknown
            ) {
                return Err(ManagerError::Failed(format!(
                    "the wrapper at {} refused the call: {}: {}",
                    self.manager.wrapper_address,
                    error.code(),
                    error.message()
                )));
            }
            let reason = format!("{}: {}", error.code(), error.message());
            *self.last = format!("call failed: {reason}");
            self.client = None;
            failed_calls += 1;
            if failed_calls >= attempts {
                return Err(ManagerError::RetriesExhausted {
                    address: self.manager.wrapper_address.to_string(),
                    attempts,
                    last: reason,
                });
            }
            log::warn("the call failed; reconnecting")
                .manager(&self.manager.name)
                .field("error", reason)
                .emit();
            tokio::time::sleep(retry_pause(failed_calls)).await;
        }
    }

    async fn connect(&mut self) -> Result<WrapperClient, ManagerError> {
        let attempts = self.settings.retry.max(1);
        let mut last = String::new();
        for attempt in 1..=attempts {
            match transport::connect(
                self.manager,
                &self.settings.transport,
                self.settings.connection_timeout,
            )
            .await
            {
                Ok(client) => {
                    log::debug("connected to the wrapper")
                        .manager(&self.manager.name)
                        .field("wrapper_address", self.manager.wrapper_address.to_string())
                        .field("attempt", attempt)
                        .emit();
                    return Ok(client);
                }
                Err(ConnectError::Fatal(reason)) => return Err(ManagerError::Failed(reason)),
                Err(ConnectError::Unreachable(reason)) => {
                    log::warn("connection attempt failed")
                        .manager(&self.manager.name)
                        .field("attempt", attempt)
                        .field("attempts", attempts)
                        .field("error", reason.clone())
                        .emit();
                    *self.last = reason.clone();
                    last = reason;
                    if attempt < attempts {
                        tokio::time::sleep(retry_pause(attempt)).await;
                    }
                }
            }
        }
        Err(ManagerError::RetriesExhausted {
            address: self.manager.wrapper_address.to_string(),
            attempts,
            last,
        })
    }
}

fn describe(status: Status, failure_reason: &str) -> String {
    if failure_reason.is_empty() {
        format!("status {}", status.as_str_name())
    } else {
        format!("status {} ({failure_reason})", status.as_str_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_up_to_30s() {
        let pauses: Vec<u64> = (1..=8).map(|a| retry_pause(a).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(retry_pause(u32::MAX), RETRY_PAUSE_MAX);
        // The default 10 attempts: 9 pauses.
        let total: u64 = (1..10).map(|a| retry_pause(a).as_secs()).sum();
        assert_eq!(total, 151);
    }

    #[test]
    fn exit_codes_are_upstreams() {
        let retries = ManagerError::RetriesExhausted {
            address: "unix:///x".to_owned(),
            attempts: 2,
            last: "no such file".to_owned(),
        };
        let timeout = ManagerError::Timeout {
            timeout: "3s".to_owned(),
            wanted: "stopped",
            last: "status running".to_owned(),
        };
        assert_eq!(ManagerError::Failed("x".to_owned()).exit_code(), 1);
        assert_eq!(retries.exit_code(), 2);
        assert_eq!(timeout.exit_code(), 3);
        assert_eq!(
            timeout.to_string(),
            "--timeout 3s ran out waiting for the runner process to be stopped (last: status running)"
        );
    }
}
