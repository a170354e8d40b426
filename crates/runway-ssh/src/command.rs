//! Commands whose stdin and stdout carry a byte stream: the ProxyCommand (SSH inside) and the
//! SSH command (gRPC inside).

use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How much of a command's stderr is kept (its end).
const STDERR_KEPT: usize = 8 * 1024;

/// The end of a command's stderr, shared with the task that reads it.
#[derive(Debug, Clone, Default)]
pub(crate) struct StderrTail(Arc<Mutex<Vec<u8>>>);

impl StderrTail {
    fn push(&self, bytes: &[u8]) {
        if let Ok(mut kept) = self.0.lock() {
            kept.extend_from_slice(bytes);
            if kept.len() > STDERR_KEPT {
                let cut = kept.len() - STDERR_KEPT;
                kept.drain(..cut);
            }
        }
    }

    pub(crate) fn text(&self) -> String {
        self.0
            .lock()
            .map(|kept| String::from_utf8_lossy(&kept).trim().to_owned())
            .unwrap_or_default()
    }
}

/// A running command in a process group of its own; dropping it kills the whole group
/// (`sh`, and whatever `sh` started), and tokio reaps the child.
#[derive(Debug)]
pub(crate) struct ChildGuard {
    child: Child,
    pgid: Option<Pid>,
    pub(crate) stderr: StderrTail,
    stderr_task: Option<tokio::task::JoinHandle<()>>,
}

impl ChildGuard {
    /// After a failure: gives the command a moment to exit and its stderr to be read, so
    /// that the error can say why.
    pub(crate) async fn settle(&mut self) {
        let _ = tokio::time::timeout(Duration::from_millis(500), self.child.wait()).await;
        if let Some(task) = self.stderr_task.take() {
            let _ = tokio::time::timeout(Duration::from_millis(200), task).await;
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            // The group may be gone already; there is nothing to do about a failure here.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        let _ = self.child.start_kill();
    }
}

/// The child's stdout and stdin as one duplex stream.
#[derive(Debug)]
pub(crate) struct ChildIo {
    pub(crate) stdout: ChildStdout,
    pub(crate) stdin: ChildStdin,
}

impl AsyncRead for ChildIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stdout).poll_read(cx, buf)
    }
}

impl AsyncWrite for ChildIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stdin).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stdin).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stdin).poll_shutdown(cx)
    }
}

/// Starts `sh -c COMMAND` with piped stdin and stdout, its stderr kept (not inherited: the
/// deployer's stderr carries only its NDJSON log). Needs a tokio runtime.
pub(crate) fn spawn(command: &str) -> std::io::Result<(ChildGuard, ChildIo)> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let stderr = StderrTail::default();
    let stderr_task = child.stderr.take().map(|mut pipe| {
        let tail = stderr.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut buf).await {
                tail.push(&buf[..n]);
            }
        })
    });
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(std::io::Error::other("the child's stdio was not piped"));
    };
    Ok((
        ChildGuard {
            child,
            pgid,
            stderr,
            stderr_task,
        },
        ChildIo { stdout, stdin },
    ))
}
