//! `runway wrapper` driven from outside, as a real process: this test binary re-runs itself as
//! the wrapper (see `wrapper_entry_point`), and the tests talk to it with gRPC clients, send it
//! signals and read its exit code and stderr. Everything is on loopback or unix sockets, every
//! wait is bounded, and every process started is killed when its test ends.

#![allow(
    clippy::unwrap_used,
    reason = "test fixtures: a failed unwrap is a failed test"
)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use runway_wrapper::proto::process_wrapper_client::ProcessWrapperClient;
use runway_wrapper::proto::{
    CheckStatusRequest, InitForcefulShutdownRequest, InitGracefulShutdownRequest, ShutdownCallback,
    Status,
};
use runway_wrapper::{ListenAddress, WrapperArgs};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};
use tonic::transport::Channel;

/// Set in the environment of this binary when it runs as the wrapper; holds its arguments.
const ENTRY_ARGS: &str = "RUNWAY_WRAPPER_TEST_ARGS";
const TEST_BOUND: Duration = Duration::from_secs(60);
const WAIT_BOUND: Duration = Duration::from_secs(15);

#[derive(Debug, Parser)]
#[command(name = "runway-wrapper")]
struct Cli {
    #[command(flatten)]
    args: WrapperArgs,
}

/// Not a test: the wrapper's `main` when this binary is re-run with `ENTRY_ARGS` set.
#[test]
fn wrapper_entry_point() {
    let Ok(joined) = std::env::var(ENTRY_ARGS) else {
        return;
    };
    let args = joined.split('\u{1f}').map(str::to_owned);
    let cli = match Cli::try_parse_from(std::iter::once("runway-wrapper".to_owned()).chain(args)) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    let code = match runway_wrapper::run_blocking(cli.args) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            1
        }
    };
    std::process::exit(code);
}

/// A wrapper process, its stderr collected.
struct Wrapper {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Wrapper {
    fn start(args: &[&str]) -> Self {
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "wrapper_entry_point",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ENTRY_ARGS, args.join("\u{1f}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let collected = stderr.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("  wrapper| {line}");
                let mut text = collected.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
        Self { child, stderr }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The address from the wrapper's "serving the wrapper API on ADDRESS" line.
    async fn address(&self) -> ListenAddress {
        const MARK: &str = "serving the wrapper API on ";
        let found = wait_until(|| {
            let stderr = self.stderr();
            let line = stderr.lines().find(|line| line.contains(MARK))?;
            Some(line.split(MARK).nth(1)?.trim().to_owned())
        })
        .await;
        found
            .expect("the wrapper says where it listens")
            .parse()
            .unwrap()
    }

    async fn client(&self) -> ProcessWrapperClient<Channel> {
        let address = self.address().await;
        runway_wrapper::client::connect(&address, Duration::from_secs(5))
            .await
            .unwrap()
    }

    fn signal(&self, signal: Signal) {
        let pid = i32::try_from(self.child.id().unwrap()).unwrap();
        kill(Pid::from_raw(pid), signal).unwrap();
    }

    async fn exit_code(&mut self) -> i32 {
        let status = tokio::time::timeout(WAIT_BOUND, self.child.wait())
            .await
            .unwrap()
            .unwrap();
        status.code().expect("the wrapper exits, it is not killed")
    }
}

/// Polls `check` every 20 ms until it gives a value, at most `WAIT_BOUND`.
async fn wait_until<T>(mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + WAIT_BOUND;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn status(client: &mut ProcessWrapperClient<Channel>) -> (Status, String) {
    let response = client
        .check_status(CheckStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    (response.status(), response.failure_reason)
}

async fn wait_for_status(client: &mut ProcessWrapperClient<Channel>, wanted: Status) -> String {
    let deadline = Instant::now() + WAIT_BOUND;
    loop {
        let (status, reason) = status(client).await;
        if status == wanted {
            return reason;
        }
        assert!(
            Instant::now() < deadline,
            "still {status:?}, waiting for {wanted:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One HTTP request received by [`callback_server`].
#[derive(Debug)]
struct Received {
    request_line: String,
    headers: HashMap<String, String>,
}

/// A one-request HTTP server on loopback: its URL, and the request once it came.
async fn callback_server() -> (String, tokio::sync::oneshot::Receiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "connection closed before the request's end");
            head.extend_from_slice(&buf[..n]);
        }
        let head = String::from_utf8(head).unwrap();
        let mut lines = head.lines();
        let request_line = lines.next().unwrap().to_owned();
        let headers = lines
            .filter_map(|line| line.split_once(": "))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
            .collect();
        stream
            .write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let _ = tx.send(Received {
            request_line,
            headers,
        });
    });
    (url, rx)
}

fn socket_in(dir: &Path) -> (PathBuf, String) {
    let path = dir.join("wrapper.sock");
    let url = format!("unix://{}", path.display());
    (path, url)
}

#[tokio::test]
async fn unix_socket_graceful_shutdown_sends_the_callback() {
    tokio::time::timeout(TEST_BOUND, async {
        let dir = tempfile::tempdir().unwrap();
        let (socket, listen) = socket_in(dir.path());
        let script = "trap 'echo child: got QUIT; exit 0' QUIT; while :; do sleep 0.05; done";
        let mut wrapper = Wrapper::start(&["--grpc-listen", &listen, "--", "sh", "-c", script]);
        let mut client = wrapper.client().await;
        assert!(socket.exists());

        assert_eq!(status(&mut client).await, (Status::Running, String::new()));

        let (url, received) = callback_server().await;
        let request = InitGracefulShutdownRequest {
            shutdown_callback: Some(ShutdownCallback {
                url: format!("{url}/runner/stopped?id=7"),
                method: "PUT".to_owned(),
                headers: [
                    ("X-Token".to_owned(), "secret-ish".to_owned()),
                    ("X-Runner".to_owned(), "r1".to_owned()),
                ]
                .into(),
            }),
        };
        let response = client
            .init_graceful_shutdown(request)
            .await
            .unwrap()
            .into_inner();
        assert_eq!(response.status(), Status::InShutdown);
        assert_eq!(response.failure_reason, "");

        let received = tokio::time::timeout(WAIT_BOUND, received)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(received.request_line, "PUT /runner/stopped?id=7 HTTP/1.1");
        assert_eq!(
            received.headers.get("x-token").map(String::as_str),
            Some("secret-ish")
        );
        assert_eq!(
            received.headers.get("x-runner").map(String::as_str),
            Some("r1")
        );

        // Exited with 0: stopped, no failure; the API keeps serving; a second call changes nothing.
        assert_eq!(wait_for_status(&mut client, Status::Stopped).await, "");
        let again = client
            .init_graceful_shutdown(InitGracefulShutdownRequest::default())
            .await;
        assert_eq!(again.unwrap().into_inner().status(), Status::Stopped);

        wrapper.signal(Signal::SIGTERM);
        assert_eq!(wrapper.exit_code().await, 0);
        assert!(!socket.exists(), "the socket file is removed on exit");
        let stderr = wrapper.stderr();
        assert!(stderr.contains("sending SIGQUIT"), "{stderr}");
        assert!(stderr.contains("answered 204 No Content"), "{stderr}");
        assert!(!stderr.contains("warning"), "{stderr}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn tcp_forceful_shutdown_kills_after_the_termination_timeout() {
    tokio::time::timeout(TEST_BOUND, async {
        let script = "trap '' TERM; echo child: ignoring SIGTERM; while :; do sleep 0.05; done";
        let mut wrapper = Wrapper::start(&[
            "--grpc-listen",
            "tcp://127.0.0.1:0",
            "--process-termination-timeout",
            "700ms",
            "--",
            "sh",
            "-c",
            script,
        ]);
        let mut client = wrapper.client().await;
        assert_eq!(status(&mut client).await.0, Status::Running);

        let started = Instant::now();
        let response = client
            .init_forceful_shutdown(InitForcefulShutdownRequest {})
            .await;
        assert_eq!(response.unwrap().into_inner().status(), Status::InShutdown);
        assert_eq!(status(&mut client).await.0, Status::InShutdown);

        let reason = wait_for_status(&mut client, Status::Stopped).await;
        assert!(
            started.elapsed() >= Duration::from_millis(700),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            reason,
            "killed by SIGKILL: did not stop within 700ms of SIGTERM"
        );

        // Stopped: a forceful call changes nothing and answers the failure reason.
        let again = client
            .init_forceful_shutdown(InitForcefulShutdownRequest {})
            .await;
        let again = again.unwrap().into_inner();
        assert_eq!(
            (again.status(), again.failure_reason.as_str()),
            (Status::Stopped, &*reason)
        );

        wrapper.signal(Signal::SIGINT);
        assert_eq!(wrapper.exit_code().await, 128 + 9);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_signal_stops_the_child_and_the_wrapper_exits_with_its_code() {
    tokio::time::timeout(TEST_BOUND, async {
        let dir = tempfile::tempdir().unwrap();
        let (socket, listen) = socket_in(dir.path());
        let mut wrapper = Wrapper::start(&["--grpc-listen", &listen, "--", "sleep", "30"]);
        let mut client = wrapper.client().await;
        assert_eq!(status(&mut client).await.0, Status::Running);

        wrapper.signal(Signal::SIGQUIT);
        assert_eq!(
            wrapper.exit_code().await,
            128 + 15,
            "sleep was stopped by SIGTERM"
        );
        assert!(!socket.exists());
        let stderr = wrapper.stderr();
        assert!(stderr.contains("received SIGQUIT"), "{stderr}");
        assert!(stderr.contains("sleep (pid "), "{stderr}");
        assert!(stderr.contains("killed by SIGTERM"), "{stderr}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_child_that_exits_is_reported_and_the_api_stays_up() {
    tokio::time::timeout(TEST_BOUND, async {
        let mut wrapper = Wrapper::start(&[
            "--grpc-listen",
            "tcp://localhost:0",
            "--",
            "sh",
            "-c",
            "sleep 0.2; exit 3",
        ]);
        let mut client = wrapper.client().await;
        assert_eq!(
            wait_for_status(&mut client, Status::Stopped).await,
            "exited with code 3"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(status(&mut client).await.0, Status::Stopped);

        wrapper.signal(Signal::SIGTERM);
        assert_eq!(wrapper.exit_code().await, 3);
        assert!(wrapper.stderr().contains("no shutdown callback registered"));
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_missing_command_is_a_clear_error_and_leaves_no_socket() {
    tokio::time::timeout(TEST_BOUND, async {
        let dir = tempfile::tempdir().unwrap();
        let (socket, listen) = socket_in(dir.path());
        let mut wrapper = Wrapper::start(&["--grpc-listen", &listen, "--", "/nonexistent/app"]);
        assert_eq!(wrapper.exit_code().await, 1);
        // The reader task may still be copying the last line.
        let said = wait_until(|| wrapper.stderr().contains("cannot start").then_some(())).await;
        assert!(said.is_some(), "{}", wrapper.stderr());
        let stderr = wrapper.stderr();
        assert!(
            stderr.contains("error: cannot start /nonexistent/app: No such file"),
            "{stderr}"
        );
        assert!(!socket.exists(), "no socket file is left behind");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn an_address_in_use_is_refused_before_starting_anything() {
    tokio::time::timeout(TEST_BOUND, async {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let listen = format!("tcp://{}", taken.local_addr().unwrap());
        let mut wrapper = Wrapper::start(&["--grpc-listen", &listen, "--", "sleep", "30"]);
        assert_eq!(wrapper.exit_code().await, 1);
        let said = wait_until(|| wrapper.stderr().contains("cannot listen").then_some(())).await;
        assert!(said.is_some(), "{}", wrapper.stderr());
        assert!(
            wrapper
                .stderr()
                .contains(&format!("error: --grpc-listen {listen}: cannot listen"))
        );
        assert!(
            !wrapper.stderr().contains("started"),
            "{}",
            wrapper.stderr()
        );
    })
    .await
    .unwrap();
}

#[test]
fn flags_parse_with_upstream_defaults_and_name_what_is_wrong() {
    let cli =
        Cli::try_parse_from(["w", "--", "gitlab-runner", "run", "--config", "x.toml"]).unwrap();
    assert_eq!(cli.args.grpc_listen.to_string(), "tcp://localhost:7777");
    assert_eq!(
        cli.args.process_termination_timeout.0,
        Duration::from_secs(10)
    );
    assert_eq!(cli.args.graceful_shutdown_signal.to_string(), "SIGQUIT");
    assert_eq!(
        cli.args.command,
        ["gitlab-runner", "run", "--config", "x.toml"]
    );

    let cli = Cli::try_parse_from([
        "w",
        "--grpc-listen",
        "unix:///run/w.sock",
        "--process-termination-timeout",
        "1m30s",
        "--graceful-shutdown-signal",
        "TERM",
        "--",
        "worker",
    ])
    .unwrap();
    assert_eq!(
        cli.args.grpc_listen,
        ListenAddress::Unix("/run/w.sock".into())
    );
    assert_eq!(
        cli.args.process_termination_timeout.0,
        Duration::from_secs(90)
    );
    assert_eq!(cli.args.graceful_shutdown_signal.to_string(), "SIGTERM");

    for (args, says) in [
        (&["--grpc-listen", "udp://x:1"][..], "'--grpc-listen <URL>'"),
        (
            &["--grpc-listen", "localhost:7777"][..],
            "expected tcp://HOST:PORT",
        ),
        (
            &["--process-termination-timeout", "10"][..],
            "'--process-termination-timeout <DURATION>'",
        ),
        (&["--process-termination-timeout", "10"][..], "missing unit"),
        (
            &["--graceful-shutdown-signal", "SIGNOPE"][..],
            "unknown signal \"SIGNOPE\"",
        ),
    ] {
        let argv = std::iter::once("w")
            .chain(args.iter().copied())
            .chain(["--", "worker"]);
        let error = Cli::try_parse_from(argv).unwrap_err().to_string();
        assert!(error.contains(says), "{args:?}: {error}");
    }
    let error = Cli::try_parse_from(["w"]).unwrap_err().to_string();
    assert!(error.contains("<COMMAND>"), "{error}");

    // Without --, everything from the command on is the command's; a mistyped flag before it
    // is an error, not a command.
    let cli = Cli::try_parse_from(["w", "worker", "--grpc-listen", "x"]).unwrap();
    assert_eq!(cli.args.command, ["worker", "--grpc-listen", "x"]);
    assert_eq!(cli.args.grpc_listen.to_string(), "tcp://localhost:7777");
    let error = Cli::try_parse_from(["w", "--grpc-listn", "tcp://localhost:1", "--", "worker"])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("unexpected argument '--grpc-listn'"),
        "{error}"
    );
}

#[test]
fn help_explains_each_flag_with_examples() {
    use clap::CommandFactory;
    let help = Cli::command().render_long_help().to_string();
    for text in [
        "Run a command and serve GitLab Runner's process wrapper gRPC API for it",
        "--grpc-listen <URL>",
        "[default: tcp://localhost:7777]",
        "unix:///run/runway-wrapper.sock",
        "--process-termination-timeout <DURATION>",
        "[default: 10s]",
        "1m30s",
        "--graceful-shutdown-signal <SIGNAL>",
        "[default: SIGQUIT]",
        "InitForcefulShutdown",
        "runway wrapper -- gitlab-runner run",
    ] {
        assert!(help.contains(text), "missing {text:?} in:\n{help}");
    }
}

/// The proof from outside our code: a Python client generated from the proto by grpcio-tools
/// runs the three calls and receives the callback.
#[tokio::test]
async fn a_python_client_generated_from_the_proto_drives_the_wrapper() {
    let has_grpc = std::process::Command::new("python3")
        .args(["-c", "import grpc, grpc_tools"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !has_grpc {
        let why =
            "python3 with grpcio and grpcio-tools is needed (pip install grpcio grpcio-tools)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipped: {why}");
        return;
    }
    tokio::time::timeout(TEST_BOUND, async {
        let dir = tempfile::tempdir().unwrap();
        let (socket, listen) = socket_in(dir.path());
        // Ignores the graceful signal, stops on SIGTERM: all three calls have an effect.
        let script = "trap '' QUIT; exec sleep 30";
        let mut wrapper = Wrapper::start(&["--grpc-listen", &listen, "--", "sh", "-c", script]);
        wrapper.address().await;

        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let output = Command::new("python3")
            .arg(crate_dir.join("tests/python/wrapper_client.py"))
            .arg("--target")
            .arg(&listen)
            .arg("--proto")
            .arg(crate_dir.join("proto/runner_wrapper.proto"))
            .kill_on_drop(true)
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "python client failed:\n{stdout}\n{stderr}"
        );
        assert!(
            stdout.contains("all calls and the callback checked"),
            "{stdout}"
        );

        wrapper.signal(Signal::SIGTERM);
        assert_eq!(wrapper.exit_code().await, 128 + 15);
        assert!(!socket.exists());
    })
    .await
    .unwrap();
}

/// Regenerates the gRPC code from the proto with tonic-prost-build and compares it with the
/// checked-in file; `UPDATE_GENERATED=1` rewrites that file instead.
#[test]
fn generated_code_is_up_to_date() {
    let protoc = std::env::var_os("PROTOC").unwrap_or_else(|| "protoc".into());
    let has_protoc = std::process::Command::new(&protoc)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !has_protoc {
        let why = "protoc is needed to regenerate the gRPC code (Debian: protobuf-compiler)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipped: {why}");
        return;
    }
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = "gitlab_com.gitlab_runner.runner_wrapper.rs";
    let checked_in = crate_dir.join("src/proto").join(file);
    let out = tempfile::tempdir().unwrap();
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .out_dir(out.path())
        .compile_protos(
            &[crate_dir.join("proto/runner_wrapper.proto")],
            &[crate_dir.join("proto")],
        )
        .unwrap();
    let fresh = std::fs::read_to_string(out.path().join(file)).unwrap();
    if std::env::var("UPDATE_GENERATED").as_deref() == Ok("1") {
        std::fs::write(&checked_in, &fresh).unwrap();
        return;
    }
    let current = std::fs::read_to_string(&checked_in).unwrap_or_default();
    assert!(
        current == fresh,
        "{} is out of date with proto/runner_wrapper.proto: run \
         `UPDATE_GENERATED=1 cargo test -p runway-wrapper --test wrapper generated_code` and commit it",
        checked_in.display()
    );
}
