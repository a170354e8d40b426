//! `runway wrapper`: runs one command under Runway's supervisor and serves GitLab Runner's
//! process wrapper gRPC API for it, so that upstream's clients (GRIT's `deployer`, a
//! `grpcurl` script) and ours drive it unchanged.
//!
//! The server is the default feature `server`. Without it (`default-features = false`) the
//! crate is only [`client`], [`proto`], [`duration`] and [`ListenAddress`]: what the `deployer`
//! needs, without the process runtime.
//!
//! ```text
//! runway wrapper [--grpc-listen URL] [--process-termination-timeout DURATION]
//!                [--graceful-shutdown-signal SIGNAL] -- COMMAND [ARGS...]
//! ```
//!
//! # Flags
//!
//! - `--grpc-listen URL` (default `tcp://localhost:7777`, as upstream): `tcp://HOST:PORT` or
//!   `unix:///PATH`. The API has no authentication, as upstream's has none: it is meant to be
//!   reached through a unix socket, loopback or an SSH tunnel, and the wrapper warns on stderr
//!   when it listens on anything else. A unix socket left behind by a dead process is replaced;
//!   the socket file is removed when the wrapper exits.
//! - `--process-termination-timeout DURATION` (default `10s`, as upstream), a Go duration
//!   (`10s`, `1m30s`, see [`duration`]): after a forceful stop's SIGTERM, how long until SIGKILL.
//! - `--graceful-shutdown-signal SIGNAL` (default `SIGQUIT`, upstream's fixed choice): what
//!   `InitGracefulShutdown` sends. By name (`SIGQUIT`, `QUIT`) or number (`3`).
//! - `COMMAND [ARGS...]`: the child. It runs in its own process group with stdin on
//!   `/dev/null` and stdout and stderr inherited, as upstream. The wrapper's own log lines go
//!   to stderr, marked by their target, `runway_wrapper`.
//!
//! # Compatibility with upstream
//!
//! The wire format is upstream's `helpers/runner_wrapper/api/proto/wrapper.proto`, kept byte
//! for byte in `proto/runner_wrapper.proto` (package `gitlab_com.gitlab_runner.runner_wrapper`,
//! service `ProcessWrapper`, the same messages, field numbers and enum values). An older
//! upstream proto named the empty requests `Empty`; an empty message encodes the same whatever
//! its name, so clients built from either work. The code generated from it is checked in
//! ([`proto`]); a test regenerates it and fails on drift.
//!
//! On a unix socket, clients built on grpc C-core (Python, Ruby, C++), grpc-java and
//! grpc-swift name the socket's path as the HTTP/2 `:authority`, which the HTTP/2 server under
//! tonic refuses and upstream's Go server takes; each unix socket connection therefore goes
//! through a small proxy that replaces such an authority with `localhost` (see
//! `authority.rs`). A Python client generated from the proto is part of the tests.
//!
//! Behaviour follows upstream's `helpers/runner_wrapper/wrapper.go` and
//! `commands/wrapper.go`:
//!
//! - The status is `running` once the child has started, `in_shutdown` once a shutdown was
//!   asked for, `stopped` once the child has exited; it never goes back. `failureReason` is
//!   empty when the child exited with 0, else how it ended (`exited with code 3`,
//!   `killed by SIGKILL: did not stop within 10s of SIGTERM`); upstream prints Go's
//!   `exit status 3` / `signal: killed` instead, which no client parses.
//! - `InitGracefulShutdown` sends the graceful signal every time it is called and registers
//!   the callback when its URL is not empty (a later call replaces it); nothing more: a
//!   graceful stop lets the child's jobs finish, however long they take.
//! - `InitForcefulShutdown` sends SIGTERM. Upstream stops there; Runway also sends SIGKILL once
//!   `--process-termination-timeout` has passed (a second call does not move that deadline).
//! - Both answer the status read after they took effect; once the child has stopped they
//!   change nothing and answer `stopped`.
//! - When the child stops, the registered callback is sent (see `callback.rs`: method, headers,
//!   no body, 10 s bound; an empty method is `GET`, as Go's `http.NewRequest` has it; failures
//!   are logged).
//! - After the child stopped, the wrapper keeps serving the API (so a client can read
//!   `stopped` and the failure reason) until it is itself told to stop.
//! - The wrapper stops on SIGINT, SIGTERM or SIGQUIT. Whichever it gets, it stops the child
//!   forcefully (SIGTERM; upstream then waits the termination timeout and gives up, Runway
//!   sends SIGKILL), stops serving, and exits with the child's exit code (128 + the signal
//!   number when a signal ended it), where upstream exits 0.
//! - A command that cannot be started is an error and a non-zero exit (upstream keeps serving
//!   `stopped` with the error as the failure reason); the socket file is removed.
//!
//! # Files
//!
//! - `proto/` (beside `src/`) holds upstream's `.proto`; `src/proto/` the checked-in tonic code,
//!   which a test regenerates with protoc and fails on drift.
//! - `supervisor.rs`: runs the command on `runway-runtime`'s process core.
//! - `service.rs`: answers the three calls. `callback.rs`: sends the shutdown callback.
//! - `address.rs`: parses `tcp://` and `unix://`. `duration.rs`: reads and writes Go durations
//!   (`1m30s`), for the `deployer` too.
//! - `authority.rs`: the proxy that rewrites a gRPC client's socket-path `:authority` to
//!   `localhost` (decision 0025 in `docs/decisions/`).
//! - `client.rs`: connects a generated client, for the `deployer`. `log.rs`: the wrapper's own log
//!   lines.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

use std::time::Duration;
#[cfg(feature = "server")]
use std::{ffi::OsString, future::Future, path::PathBuf, pin::Pin};

#[cfg(feature = "server")]
use anyhow::Context as _;
#[cfg(feature = "server")]
use runway_runtime::process::{Process, ProcessSpec, StopSignal};
#[cfg(feature = "server")]
use tokio::{
    io::DuplexStream,
    signal::unix::{SignalKind, signal},
    sync::oneshot,
};
#[cfg(feature = "server")]
use tokio_stream::{
    Stream, StreamExt as _,
    wrappers::{TcpListenerStream, UnixListenerStream},
};

// Without the `server` feature (the `deployer`'s build), the listening half of `address` and
// the log lines it writes are unused.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
mod address;
#[cfg(feature = "server")]
mod authority;
#[cfg(feature = "server")]
mod callback;
pub mod client;
pub mod duration;
#[cfg_attr(not(feature = "server"), allow(dead_code))]
mod log;
#[cfg(feature = "server")]
mod service;
#[cfg(feature = "server")]
mod supervisor;

pub use address::{AddressError, DEFAULT_LISTEN, ListenAddress};
pub use duration::{DurationError, GoDuration};

#[cfg(feature = "server")]
use address::Listener;
#[cfg(feature = "server")]
use supervisor::{StopPolicy, Supervisor};

/// The gRPC code generated from `proto/runner_wrapper.proto` by tonic-prost-build: the
/// messages, [`proto::Status`], the client ([`proto::process_wrapper_client`]) and the server
/// ([`proto::process_wrapper_server`]).
#[allow(
    missing_debug_implementations,
    unreachable_pub,
    clippy::all,
    clippy::unwrap_used
)]
pub mod proto {
    include!("proto/gitlab_com.gitlab_runner.runner_wrapper.rs");
}

/// Upstream's default `--process-termination-timeout`.
pub const DEFAULT_TERMINATION_TIMEOUT: Duration = Duration::from_secs(10);

#[cfg(feature = "server")]
/// How long the wrapper waits, past the termination timeout, for a killed child to be reaped.
const REAP_BOUND: Duration = Duration::from_secs(10);
#[cfg(feature = "server")]
/// How long in-flight gRPC calls get to finish when the wrapper stops.
const SERVER_STOP_BOUND: Duration = Duration::from_secs(5);

#[cfg(feature = "server")]
const AFTER_HELP: &str = "\
The API (GitLab Runner's process wrapper, package gitlab_com.gitlab_runner.runner_wrapper):
  CheckStatus           the status: running, in_shutdown or stopped, and a failure reason
  InitGracefulShutdown  sends the graceful signal; the optional callback is an HTTP request
                        sent when the command has stopped
  InitForcefulShutdown  sends SIGTERM, then SIGKILL after the termination timeout

The wrapper keeps serving after the command stopped. It stops on SIGINT, SIGTERM or SIGQUIT:
it stops the command as InitForcefulShutdown does and exits with the command's exit code.

Examples:
  runway wrapper -- gitlab-runner run
  runway wrapper --grpc-listen unix:///run/runway-wrapper.sock -- ./worker --queue jobs
  runway wrapper --grpc-listen tcp://127.0.0.1:7777 --process-termination-timeout 1m30s \\
      --graceful-shutdown-signal SIGTERM -- node server.js";

#[cfg(feature = "server")]
/// Run a command and serve GitLab Runner's process wrapper gRPC API for it
// `runway wrapper`'s flags: the `runway` CLI mounts them as a subcommand's arguments (or with
// `#[command(flatten)]`). The doc comment above is the command's `about` in `--help`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct WrapperArgs {
    /// Where to serve the gRPC API: tcp://HOST:PORT or unix:///PATH
    ///
    /// The API has no authentication: listen on a unix socket or loopback and reach it from
    /// elsewhere through an SSH tunnel. A stale unix socket is replaced, and removed on exit.
    /// Examples: tcp://127.0.0.1:7777, unix:///run/runway-wrapper.sock
    #[arg(long, value_name = "URL", default_value = DEFAULT_LISTEN)]
    pub grpc_listen: ListenAddress,

    /// How this process's log lines are written on stderr: `text` (readable) or `json` (one
    /// object a line, with the spans it happened in: service, environment, deployment,
    /// revision, instance); `RUST_LOG` filters them (default `info`).
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    pub log_format: runway_log::LogFormat,

    /// How long a forceful shutdown waits after SIGTERM before SIGKILL
    ///
    /// A Go duration: a number and a unit, repeated (ns, us, ms, s, m, h).
    /// Examples: 10s, 1m30s, 500ms
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub process_termination_timeout: GoDuration,

    /// The signal InitGracefulShutdown sends to the command
    ///
    /// By name or number. Examples: SIGQUIT, TERM, 15
    #[arg(long, value_name = "SIGNAL", default_value = "SIGQUIT")]
    pub graceful_shutdown_signal: StopSignal,

    /// The command to run and its arguments, best after -- (everything after the command is
    /// its own)
    #[arg(value_name = "COMMAND", required = true, trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

#[cfg(feature = "server")]
/// Runs `runway wrapper` until it receives SIGINT, SIGTERM or SIGQUIT; returns the exit code:
/// the child's (128 + the signal's number if a signal ended it).
pub async fn run(args: WrapperArgs) -> anyhow::Result<i32> {
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut quit = signal(SignalKind::quit()).context("cannot handle SIGQUIT")?;
    let stop = async move {
        let name = tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
            _ = quit.recv() => "SIGQUIT",
        };
        log::info(format_args!("received {name}: stopping"));
    };
    run_until(args, stop).await
}

#[cfg(feature = "server")]
/// [`run`] on a runtime of its own, for a caller that has none: the wrapper's entry point,
/// which sets up its log lines (`--log-format`) unless the process already has.
pub fn run_blocking(args: WrapperArgs) -> anyhow::Result<i32> {
    runway_log::init(args.log_format);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(run(args))
}

#[cfg(feature = "server")]
/// [`run`], stopping when `stop` completes instead of on a signal.
async fn run_until(args: WrapperArgs, stop: impl Future<Output = ()>) -> anyhow::Result<i32> {
    let Some((program, program_args)) = args.command.split_first() else {
        anyhow::bail!("no command to run: give it after --, such as `-- gitlab-runner run`");
    };
    // Listen first, so that a bad address never leaves a child running.
    let listener = args
        .grpc_listen
        .bind()
        .await
        .with_context(|| format!("--grpc-listen {}", args.grpc_listen))?;
    if listener.is_exposed() {
        log::warn(format_args!(
            "listening on {}, which is not loopback: the API has no authentication, so anyone \
             who reaches it can stop the command; prefer a unix socket or loopback with an SSH \
             tunnel",
            listener.describe()
        ));
    }

    let spec = ProcessSpec {
        program: PathBuf::from(program),
        args: program_args.to_vec(),
        own_process_group: true,
        ..ProcessSpec::default()
    };
    // On failure the listener is dropped here, which removes a unix socket file.
    let process = Process::spawn(&spec)?;
    let program = PathBuf::from(program).display().to_string();
    log::info(format_args!(
        "started {program} (pid {}); serving the wrapper API on {}",
        process.pid(),
        listener.describe()
    ));

    let termination_timeout = args.process_termination_timeout.0;
    let policy = StopPolicy {
        graceful: args.graceful_shutdown_signal,
        forceful: StopSignal::TERM,
        termination_timeout,
    };
    let (supervisor, mut handle) = Supervisor::new(process, program, policy);
    let supervisor = tokio::spawn(supervisor.run());

    let (stop_serving, serving_stopped) = oneshot::channel::<()>();
    let (server, socket_file) = serve(listener, handle.clone(), async {
        let _ = serving_stopped.await;
    });
    let mut server = tokio::spawn(server);

    stop.await;
    let state = handle.terminate(termination_timeout + REAP_BOUND).await;

    let _ = stop_serving.send(());
    if tokio::time::timeout(SERVER_STOP_BOUND, &mut server)
        .await
        .is_err()
    {
        log::warn(format_args!(
            "gRPC calls still in flight after 5s: closing them"
        ));
        server.abort();
    }
    drop(handle);
    // The supervisor ends once every handle is gone, after the callbacks it sent (each bounded).
    let callbacks_bound = callback::CALLBACK_TIMEOUT + Duration::from_secs(1);
    if tokio::time::timeout(callbacks_bound, supervisor)
        .await
        .is_err()
    {
        log::warn(format_args!("the shutdown callback did not finish in time"));
    }
    drop(socket_file);

    let Some(state) = state else {
        anyhow::bail!("the command did not stop, even after SIGKILL; exiting without it");
    };
    let exit = state.exit.map_or(1, |exit| exit.code());
    log::info(format_args!("exiting with code {exit}"));
    Ok(exit)
}

#[cfg(feature = "server")]
/// The gRPC server on `listener` until `shutdown`, and the unix socket file to remove after.
fn serve(
    listener: Listener,
    supervisor: supervisor::SupervisorHandle,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> (
    impl Future<Output = ()> + Send + 'static,
    Option<address::SocketFile>,
) {
    let service = proto::process_wrapper_server::ProcessWrapperServer::new(
        service::WrapperService::new(supervisor),
    );
    let router = tonic::transport::Server::builder().add_service(service);
    let (incoming, socket_file) = match listener {
        Listener::Tcp(listener) => (Incoming::Tcp(TcpListenerStream::new(listener)), None),
        Listener::Unix(listener, file) => {
            let connections = UnixListenerStream::new(listener)
                .map(|connection| connection.map(authority::normalize));
            (Incoming::Unix(Box::pin(connections)), Some(file))
        }
    };
    let server = async move {
        let result = match incoming {
            Incoming::Tcp(stream) => router.serve_with_incoming_shutdown(stream, shutdown).await,
            Incoming::Unix(stream) => router.serve_with_incoming_shutdown(stream, shutdown).await,
        };
        if let Err(error) = result {
            log::error(format_args!(
                "the gRPC server failed: {}",
                runway_log::chain(&error)
            ));
        }
    };
    (server, socket_file)
}

#[cfg(feature = "server")]
enum Incoming {
    Tcp(TcpListenerStream),
    /// Unix socket connections, each through [`authority::normalize`].
    Unix(Pin<Box<dyn Stream<Item = std::io::Result<DuplexStream>> + Send>>),
}
