//! The stream to a wrapper: an SSH channel, or a command's stdio.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use russh::ChannelStream;
use russh::client::{Handle, Msg};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::command::{ChildGuard, ChildIo};
use crate::hostkey::{Checker, Notice};

/// A byte stream to a wrapper's socket (`AsyncRead + AsyncWrite + Unpin + Send`), for gRPC.
/// It owns what carries it: dropping it closes the channel, the SSH sessions (the manager's,
/// then the bastion's) and kills the command's process group.
pub struct Stream {
    // Fields drop in order: the channel first, then its sessions, then the command under them.
    io: Io,
    sessions: Vec<Handle<Checker>>,
    child: Option<ChildGuard>,
    notices: Vec<Notice>,
}

enum Io {
    Channel(ChannelStream<Msg>),
    Command(ChildIo),
}

impl Stream {
    pub(crate) fn ssh(
        channel: ChannelStream<Msg>,
        sessions: Vec<Handle<Checker>>,
        child: Option<ChildGuard>,
        notices: Vec<Notice>,
    ) -> Self {
        Stream {
            io: Io::Channel(channel),
            sessions,
            child,
            notices,
        }
    }

    pub(crate) fn command(io: ChildIo, child: ChildGuard) -> Self {
        Stream {
            io: Io::Command(io),
            sessions: Vec::new(),
            child: Some(child),
            notices: Vec::new(),
        }
    }

    /// What the caller should log about this connection, e.g. that a host key was not
    /// checked. One per host (bastion first).
    pub fn notices(&self) -> &[Notice] {
        &self.notices
    }

    /// The end (up to 8 KiB) of what the ProxyCommand or SSH command wrote to stderr so far;
    /// `None` without a command.
    pub fn command_stderr(&self) -> Option<String> {
        self.child.as_ref().map(|c| c.stderr.text())
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field(
                "io",
                &match self.io {
                    Io::Channel(_) => "ssh channel",
                    Io::Command(_) => "command stdio",
                },
            )
            .field("sessions", &self.sessions.len())
            .field("child", &self.child)
            .field("notices", &self.notices)
            .finish()
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match &mut self.io {
            Io::Channel(s) => Pin::new(s).poll_read(cx, buf),
            Io::Command(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.io {
            Io::Channel(s) => Pin::new(s).poll_write(cx, buf),
            Io::Command(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.io {
            Io::Channel(s) => Pin::new(s).poll_flush(cx),
            Io::Command(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.io {
            Io::Channel(s) => Pin::new(s).poll_shutdown(cx),
            Io::Command(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
