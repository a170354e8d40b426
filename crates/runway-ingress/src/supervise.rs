//! `runway-ingress --supervise`: the ingress as nginx runs, a small supervisor and the worker
//! that serves.
//!
//! The supervisor binds every socket the ingress serves on (the listeners, the admin port, the
//! control socket and `--control-listen`, the instances' listener and resolver: see
//! [`crate::daemon::bind`]) and holds them. It starts the worker (this same executable,
//! `/proc/self/exe`, with the same arguments, and [`WORKER_ENV`] naming the supervisor) and
//! hands it the sockets over a socket pair that is the worker's standard input (SCM_RIGHTS: a
//! descriptor received so is owned, with no `unsafe`). It never accepts on them: when the
//! worker dies, connections keep queueing in the kernel and the worker started at once in its
//! place (which serves the saved table from its first moment) accepts them. It reads no table
//! and talks to no control plane.
//!
//! The pair then carries single bytes. The worker says `R` once it serves (the supervisor
//! then puts the control socket at its path, the first time) and `S` when it begins a stop
//! asked for (`stop` on the control socket, SIGTERM, SIGINT): the supervisor closes its
//! copies of the sockets, so that a replacement sharing the ports (`--replacing`) takes every
//! new connection, and exits with the worker. The supervisor says `T` (stop) on SIGTERM or
//! SIGINT and `H` on SIGHUP. A worker that dies without `S` (a crash, `kill -9`, a server task
//! failing) is started again at once; one that dies before it serves, time after time, after
//! a pause that doubles from 100 ms to 10 s, said on stderr. The first worker failing before
//! it serves fails the supervisor, so a bad argument, file or address stops the start as it
//! did.
//!
//! A worker whose supervisor is gone (killed) reads the end of the pair: it serves on, and
//! says so in `hello` (its own pid, no `worker`), and a control plane replaces it
//! ([`crate::daemon::ensure`]) as it replaces an ingress of another build.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::Context;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;

use crate::daemon::{self, Args, Layout, Sockets};

/// Set in a worker's environment: its supervisor's pid.
pub const WORKER_ENV: &str = "RUNWAY_INGRESS_SUPERVISOR";

/// The worker serves.
const READY: u8 = b'R';
/// The worker begins a stop asked for.
const STOPPING: u8 = b'S';
/// Stop (the supervisor got SIGTERM or SIGINT).
const STOP: u8 = b'T';
/// Read the route file again (the supervisor got SIGHUP).
const RELOAD: u8 = b'H';

/// Descriptors in one message, under the kernel's 253.
const MAX_FDS_PER_MESSAGE: usize = 200;
/// Bounds on the handover's header.
const MAX_HEADER_BYTES: usize = 64 << 10;
const MAX_DESCRIPTORS: usize = 1 << 16;
/// Time a worker waits for its sockets.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause before starting a worker after one died before serving, doubled for each such
/// death in a row, up to the most.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(10);

/// What the supervisor tells its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Said {
    Stop,
    Reload,
}

/// The supervisor's pid when this process is a worker ([`WORKER_ENV`]).
pub(crate) fn worker_of() -> anyhow::Result<Option<u32>> {
    let Some(value) = std::env::var_os(WORKER_ENV) else {
        return Ok(None);
    };
    value
        .to_str()
        .and_then(|pid| pid.parse().ok())
        .map(Some)
        .with_context(|| format!("{WORKER_ENV} holds no pid"))
}

/// A worker's end of its channel: its standard input.
pub(crate) fn channel() -> anyhow::Result<UnixStream> {
    let fd = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .context("cannot take the supervisor's channel (standard input)")?;
    Ok(UnixStream::from(fd))
}

/// Sends `layout` and its descriptors: the header's length and the descriptors' count (little
/// endian `u32`s), the header (JSON), then one byte per message carrying the descriptors.
fn hand_over(channel: &UnixStream, layout: &Layout, fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
    let header = serde_json::to_vec(layout).map_err(std::io::Error::other)?;
    let mut frame = Vec::with_capacity(8 + header.len());
    frame.extend(
        u32::try_from(header.len())
            .map_err(std::io::Error::other)?
            .to_le_bytes(),
    );
    frame.extend(
        u32::try_from(fds.len())
            .map_err(std::io::Error::other)?
            .to_le_bytes(),
    );
    frame.extend(header);
    let mut writer = channel;
    writer.write_all(&frame)?;
    for chunk in fds.chunks(MAX_FDS_PER_MESSAGE) {
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(chunk.len()))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(chunk)) {
            return Err(std::io::Error::other(
                "the descriptors do not fit their message",
            ));
        }
        let sent = rustix::net::sendmsg(
            channel,
            &[IoSlice::new(&[0])],
            &mut control,
            SendFlags::NOSIGNAL,
        )?;
        if sent != 1 {
            return Err(std::io::Error::other("the descriptors were not sent"));
        }
    }
    Ok(())
}

/// Receives what [`hand_over`] sent: the layout and the descriptors, owned.
pub(crate) fn take_over(channel: &UnixStream) -> anyhow::Result<(Layout, Vec<OwnedFd>)> {
    let failed = "cannot take the sockets from the supervisor";
    channel
        .set_read_timeout(Some(HANDOVER_TIMEOUT))
        .context(failed)?;
    let mut reader = channel;
    let mut sizes = [0; 8];
    reader.read_exact(&mut sizes).context(failed)?;
    let [a, b, c, d, e, f, g, h] = sizes;
    let header_bytes = u32::from_le_bytes([a, b, c, d]) as usize;
    let count = u32::from_le_bytes([e, f, g, h]) as usize;
    anyhow::ensure!(
        header_bytes <= MAX_HEADER_BYTES && count <= MAX_DESCRIPTORS,
        "{failed}: a header of {header_bytes} bytes for {count} descriptors"
    );
    let mut header = vec![0; header_bytes];
    reader.read_exact(&mut header).context(failed)?;
    let layout: Layout = serde_json::from_slice(&header).context(failed)?;
    anyhow::ensure!(
        layout.descriptors() == count,
        "{failed}: {count} descriptors for {layout:?}"
    );
    let mut fds = Vec::with_capacity(count);
    while fds.len() < count {
        let expected = (count - fds.len()).min(MAX_FDS_PER_MESSAGE);
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(expected))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut byte = [0];
        let received = rustix::net::recvmsg(
            channel,
            &mut [IoSliceMut::new(&mut byte)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )
        .map_err(std::io::Error::from)
        .context(failed)?;
        anyhow::ensure!(
            received.bytes == 1,
            "{failed}: the channel closed with {} of {count} descriptors",
            fds.len()
        );
        anyhow::ensure!(
            !received.flags.contains(ReturnFlags::CTRUNC),
            "{failed}: descriptors cut short"
        );
        let before = fds.len();
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = message {
                fds.extend(received);
            }
        }
        anyhow::ensure!(fds.len() > before, "{failed}: a message with no descriptor");
    }
    channel.set_read_timeout(None).context(failed)?;
    Ok((layout, fds))
}

// ---------------------------------------------------------------------------------------
// The worker's side.

/// A worker's channel to its supervisor.
#[derive(Debug)]
pub(crate) struct Link {
    /// The supervisor's pid while it lives, 0 once it is gone (what `hello` says).
    supervisor: Arc<AtomicU32>,
    pid: u32,
    write: Arc<UnixStream>,
    read: Option<tokio::net::UnixStream>,
}

impl Link {
    /// Within the runtime: the channel is read by a task.
    pub(crate) fn new(channel: UnixStream, supervisor: u32) -> anyhow::Result<Self> {
        let write = channel
            .try_clone()
            .context("cannot use the supervisor's channel")?;
        channel
            .set_nonblocking(true)
            .context("cannot use the supervisor's channel")?;
        let read = tokio::net::UnixStream::from_std(channel)
            .context("cannot use the supervisor's channel")?;
        // Gone already (killed while this one started): alone from the start.
        let alive = std::os::unix::process::parent_id() == supervisor;
        Ok(Self {
            supervisor: Arc::new(AtomicU32::new(if alive { supervisor } else { 0 })),
            pid: supervisor,
            write: Arc::new(write),
            read: Some(read),
        })
    }

    pub(crate) fn supervisor(&self) -> Arc<AtomicU32> {
        Arc::clone(&self.supervisor)
    }

    pub(crate) fn supervisor_pid(&self) -> u32 {
        self.pid
    }

    fn tell(write: &UnixStream, byte: u8) {
        // A supervisor gone cannot hear it; a byte never fills the socket's buffer.
        let mut writer = write;
        let _ = writer.write_all(&[byte]);
    }

    /// Says the worker serves.
    pub(crate) fn ready(&self) {
        Self::tell(&self.write, READY);
    }

    /// Passes on what the supervisor says, until it is gone; then serves on alone, the pid
    /// file naming this process.
    pub(crate) fn listen(&mut self, told: mpsc::UnboundedSender<Said>, state_dir: Option<PathBuf>) {
        let Some(mut read) = self.read.take() else {
            return;
        };
        let supervisor = Arc::clone(&self.supervisor);
        let pid = self.pid;
        tokio::spawn(async move {
            let mut byte = [0];
            while let Ok(1) = read.read(&mut byte).await {
                let said = match byte[0] {
                    STOP => Said::Stop,
                    RELOAD => Said::Reload,
                    _ => continue,
                };
                let _ = told.send(said);
            }
            // A supervisor that stops tells its worker first: this one was killed.
            supervisor.store(0, Ordering::Relaxed);
            tracing::warn!(
                supervisor = pid,
                "the supervisor is gone: serving on alone until replaced"
            );
            if let Some(dir) = &state_dir {
                daemon::write_pid(dir);
            }
        });
    }

    /// Says `S`: a stop asked for begins (not a server task that ended by itself, a crash
    /// after which the supervisor starts another worker).
    pub(crate) fn stopping(&self) {
        Self::tell(&self.write, STOPPING);
    }
}

// ---------------------------------------------------------------------------------------
// The supervisor's side.

/// Runs the supervisor until its worker stops as asked (or the first fails before serving).
pub(crate) fn main(args: Args) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?
        .block_on(async move {
            let sockets = daemon::bind(&args).await?;
            let mut supervisor = Supervisor::new(args, sockets)?;
            let result = supervisor.run().await;
            supervisor.leave();
            result
        })
}

/// What one worker said.
#[derive(Debug, Default)]
struct Heard {
    ready: bool,
    stopping: bool,
}

#[derive(Debug)]
struct Supervisor {
    args: Args,
    /// Held until the worker stops as asked.
    sockets: Option<Sockets>,
    /// The control socket's name before it is published, and its inode.
    control: Option<(Option<PathBuf>, u64)>,
    published: bool,
    /// Some worker served.
    served: bool,
    /// Workers in a row that died before serving.
    failures: u32,
    terminate: Signal,
    interrupt: Signal,
    hangup: Signal,
}

impl Supervisor {
    fn new(args: Args, sockets: Sockets) -> anyhow::Result<Self> {
        let control = sockets
            .control
            .as_ref()
            .map(daemon::ControlSocket::publication);
        Ok(Self {
            args,
            sockets: Some(sockets),
            control,
            published: false,
            served: false,
            failures: 0,
            terminate: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            interrupt: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            hangup: signal(SignalKind::hangup()).context("cannot handle SIGHUP")?,
        })
    }

    async fn run(&mut self) -> anyhow::Result<()> {
        loop {
            let Some(sockets) = &self.sockets else {
                return Ok(());
            };
            let (mut child, channel) = match start_worker(sockets) {
                Ok(started) => started,
                Err(error) if !self.served => return Err(error),
                Err(error) => {
                    self.failures += 1;
                    let pause = pause_after(self.failures);
                    tracing::error!(
                        error = runway_log::chain(error.as_ref()),
                        failures = self.failures,
                        "cannot start the serving process; trying again in {pause:?}"
                    );
                    if self.pause(pause).await {
                        return Ok(());
                    }
                    continue;
                }
            };
            let pid = child.id().unwrap_or_default();
            let (mut read, mut write) = channel.into_split();
            let mut heard = Heard::default();
            let mut asked = false;
            let mut open = true;
            let mut failed_publish = None;
            let status = loop {
                tokio::select! {
                    status = child.wait() => break status,
                    byte = read.read_u8(), if open => match byte {
                        Ok(byte) => {
                            if let Err(error) = self.heard(byte, &mut heard) {
                                tracing::error!(error = runway_log::chain(error.as_ref()), "stopping");
                                failed_publish = Some(error);
                                asked = true;
                                let _ = write.write_all(&[STOP]).await;
                            }
                        }
                        Err(_) => open = false,
                    },
                    _ = self.terminate.recv() => {
                        asked = true;
                        let _ = write.write_all(&[STOP]).await;
                    }
                    _ = self.interrupt.recv() => {
                        asked = true;
                        let _ = write.write_all(&[STOP]).await;
                    }
                    _ = self.hangup.recv() => {
                        let _ = write.write_all(&[RELOAD]).await;
                    }
                }
            };
            // What it said before it went.
            while open {
                match crate::timer::timeout(Duration::from_millis(100), read.read_u8()).await {
                    Ok(Ok(byte)) => {
                        if let Err(error) = self.heard(byte, &mut heard) {
                            failed_publish = Some(error);
                        }
                    }
                    _ => open = false,
                }
            }
            let status = status.context("cannot wait for the serving process")?;
            if let Some(error) = failed_publish {
                return Err(error);
            }
            if heard.stopping || asked {
                anyhow::ensure!(
                    status.success(),
                    "the serving process (pid {pid}) ended: {status}"
                );
                return Ok(());
            }
            if !heard.ready {
                self.failures += 1;
                anyhow::ensure!(
                    self.served,
                    "the serving process (pid {pid}) ended before it served: {status}"
                );
            }
            let pause = pause_after(self.failures);
            if heard.ready {
                tracing::warn!(
                    "the serving process (pid {pid}) died ({status}); starting another at once \
                     on the same sockets"
                );
            } else {
                tracing::warn!(
                    "the serving process (pid {pid}) died before it served ({status}), {} time(s) \
                     in a row; starting another in {pause:?}",
                    self.failures
                );
            }
            if self.pause(pause).await {
                return Ok(());
            }
        }
    }

    /// Takes in one byte from the worker.
    fn heard(&mut self, byte: u8, heard: &mut Heard) -> anyhow::Result<()> {
        match byte {
            READY => {
                heard.ready = true;
                self.served = true;
                self.failures = 0;
                if !self.published
                    && let (Some(dir), Some((own, _))) = (&self.args.state_dir, &self.control)
                {
                    daemon::publish(dir, own.as_deref()).with_context(|| {
                        format!(
                            "cannot listen on {}",
                            dir.join(crate::control::SOCKET).display()
                        )
                    })?;
                }
                self.published = true;
            }
            STOPPING => {
                heard.stopping = true;
                // The worker stops accepting: so does this, so that new connections go to
                // whoever shares the ports, or are refused, rather than wait here.
                self.sockets = None;
            }
            _ => {}
        }
        Ok(())
    }

    /// Waits `pause` before the next worker; true when told to stop meanwhile.
    async fn pause(&mut self, pause: Duration) -> bool {
        if pause.is_zero() {
            return false;
        }
        tokio::select! {
            () = crate::timer::sleep(pause) => false,
            _ = self.terminate.recv() => true,
            _ = self.interrupt.recv() => true,
        }
    }

    /// Leaves the state directory as an ingress that stopped leaves it.
    fn leave(&mut self) {
        self.sockets = None;
        if let (Some(dir), Some((own, inode))) = (&self.args.state_dir, &self.control) {
            let own = if self.published { None } else { own.as_deref() };
            daemon::unpublish(dir, own, *inode);
        }
    }
}

/// The pause after `failures` workers in a row died before serving.
fn pause_after(failures: u32) -> Duration {
    match failures {
        0 => Duration::ZERO,
        n => FIRST_PAUSE
            .saturating_mul(1 << (n - 1).min(16))
            .min(MAX_PAUSE),
    }
}

/// Starts a worker: this executable again, with the same arguments, handed `sockets`.
fn start_worker(
    sockets: &Sockets,
) -> anyhow::Result<(tokio::process::Child, tokio::net::UnixStream)> {
    let (ours, theirs) = UnixStream::pair().context("cannot make the worker's channel")?;
    let mut args = std::env::args_os();
    let name = args.next().unwrap_or_else(|| "runway-ingress".into());
    // The running executable, even if a new build replaced its file since.
    let program = match Path::new("/proc/self/exe") {
        proc if proc.exists() => proc.to_owned(),
        _ => std::env::current_exe().context("cannot find this executable")?,
    };
    let mut command = tokio::process::Command::new(program);
    command
        .arg0(name)
        .args(args)
        .env(WORKER_ENV, std::process::id().to_string())
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .kill_on_drop(false);
    let child = command
        .spawn()
        .context("cannot start the serving process")?;
    // Its end is the worker's alone: the channel ends when the worker does.
    drop(command);
    let (layout, fds) = sockets.handover();
    if let Err(error) = hand_over(&ours, &layout, &fds) {
        // It died already: its exit says why.
        tracing::warn!(%error, "cannot hand the sockets over");
    }
    ours.set_nonblocking(true)
        .context("cannot use the worker's channel")?;
    let ours = tokio::net::UnixStream::from_std(ours).context("cannot use the worker's channel")?;
    Ok((child, ours))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_doubles_from_a_tenth_of_a_second_to_ten() {
        let pauses: Vec<u128> = (0..10).map(|n| pause_after(n).as_millis()).collect();
        assert_eq!(
            pauses,
            [0, 100, 200, 400, 800, 1_600, 3_200, 6_400, 10_000, 10_000]
        );
        assert_eq!(pause_after(u32::MAX), MAX_PAUSE);
    }
}
