//! The SSH transport against real OpenSSH servers (Debian's `openssh-server`) on loopback
//! ports, each with its own host key and config; the SSH command through the real `ssh`
//! client (`openssh-client`) and a `python3` relay on the "remote" side; one gRPC call to a
//! real `runway wrapper` over a tunnel.
//!
//! A missing `sshd` (or `runway` binary, for the gRPC test) skips a test with a reason, and
//! fails it under `CI=true`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use runway_ssh::testing::{SSHD, Sshd, ci, free_port, keygen, require, run, write_unix_relay};
use runway_ssh::{
    Destination, HostKeyPolicy, Key, Notice, Settings, SshError, Stage, Stream, Target,
    TemplateVars,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};

/// Every test's bound.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A test's directory, a user key, and one sshd accepting it; `None` when sshd is missing.
struct Fixture {
    dir: tempfile::TempDir,
    user_key: PathBuf,
    sshd: Sshd,
}

impl Fixture {
    fn new() -> Option<Fixture> {
        require(SSHD, "Debian's openssh-server")?;
        let dir = tempfile::tempdir().expect("tempdir");
        let user_key = dir.path().join("user_key");
        keygen(&user_key, &[]);
        let sshd = Sshd::start(&dir.path().join("sshd"), &[&user_key]);
        Some(Fixture {
            dir,
            user_key,
            sshd,
        })
    }

    fn target(&self) -> Target {
        Target {
            address: self.sshd.address(),
            username: "root".into(),
            key: Key::File(self.user_key.clone()),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn settings() -> Settings {
    Settings {
        jump: None,
        proxy_command: None,
        host_keys: HostKeyPolicy::AcceptAny,
        timeout: Duration::from_secs(10),
    }
}

fn vars(target: &Target, wrapper: &Destination) -> TemplateVars {
    TemplateVars {
        instance_name: "manager-1".into(),
        instance_id: "i-1".into(),
        address: target.address.clone(),
        username: target.username.clone(),
        private_key_pem: String::new(),
        wrapper: wrapper.clone(),
    }
}

/// An echo server on a unix socket, until the test ends.
fn unix_echo(path: &Path) -> Destination {
    let listener = UnixListener::bind(path).expect("bind unix echo");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    Destination::Unix(path.to_owned())
}

/// An echo server on a loopback TCP port, until the test ends.
async fn tcp_echo() -> Destination {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind tcp echo");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    Destination::Tcp {
        host: "127.0.0.1".into(),
        port,
    }
}

/// Sends a few KiB through the stream and expects them back.
async fn assert_echoes(stream: &mut Stream) {
    let message: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    stream.write_all(&message).await.expect("write");
    stream.flush().await.expect("flush");
    let mut back = vec![0u8; message.len()];
    stream.read_exact(&mut back).await.expect("read the echo");
    assert_eq!(back, message);
}

fn assert_unchecked(notices: &[Notice], addresses: &[String]) {
    let got: Vec<&str> = notices
        .iter()
        .map(|n| match n {
            Notice::HostKeyNotChecked { address, .. } => address.as_str(),
            _ => "",
        })
        .collect();
    assert_eq!(got, addresses);
    for notice in notices {
        let text = notice.to_string();
        assert!(text.contains("host key checking is off"), "{text}");
        assert!(text.contains("SHA256:"), "{text}");
    }
}

async fn bounded<F: Future<Output = ()>>(test: F) {
    tokio::time::timeout(TEST_TIMEOUT, test)
        .await
        .expect("the test finished in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_to_a_unix_socket_and_a_tcp_port() {
    let Some(f) = Fixture::new() else { return };
    bounded(async {
        let unix = unix_echo(&f.path("echo.sock"));
        let target = f.target();
        let mut stream = runway_ssh::connect(&target, &settings(), &unix, &vars(&target, &unix))
            .await
            .expect("connect to the unix socket");
        assert_echoes(&mut stream).await;
        assert_unchecked(stream.notices(), std::slice::from_ref(&target.address));
        assert_eq!(stream.command_stderr(), None);
        drop(stream);
        f.sshd.wait_closed(1).await;

        let tcp = tcp_echo().await;
        let mut stream = runway_ssh::connect(&target, &settings(), &tcp, &vars(&target, &tcp))
            .await
            .expect("connect to the tcp port");
        assert_echoes(&mut stream).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rsa_pem_key_as_terraform_writes_it() {
    let Some(_) = require(SSHD, "Debian's openssh-server") else {
        return;
    };
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = dir.path().join("rsa_key");
        // tls_private_key's `private_key_pem`: PKCS#1 "BEGIN RSA PRIVATE KEY".
        keygen(&key, &["-t", "rsa", "-b", "2048", "-m", "PEM"]);
        let pem = std::fs::read_to_string(&key).expect("pem");
        assert!(pem.starts_with("-----BEGIN RSA PRIVATE KEY-----"), "{pem}");
        let sshd = Sshd::start(&dir.path().join("sshd"), &[&key]);
        let target = Target {
            address: sshd.address(),
            username: "root".into(),
            key: Key::Pem(pem),
        };
        let unix = unix_echo(&dir.path().join("echo.sock"));
        let mut stream = runway_ssh::connect(&target, &settings(), &unix, &vars(&target, &unix))
            .await
            .expect("connect with an rsa key");
        assert_echoes(&mut stream).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_jump_through_a_bastion_with_its_own_key() {
    let Some(f) = Fixture::new() else { return };
    bounded(async {
        let bastion_key = f.path("bastion_key");
        keygen(&bastion_key, &[]);
        // The bastion knows only its own key, the manager only the user's.
        let bastion = Sshd::start(&f.path("bastion"), &[&bastion_key]);
        let unix = unix_echo(&f.path("echo.sock"));
        let target = f.target();
        let settings = Settings {
            jump: Some(Target {
                address: bastion.address(),
                username: "root".into(),
                key: Key::File(bastion_key.clone()),
            }),
            ..settings()
        };
        let mut stream = runway_ssh::connect(&target, &settings, &unix, &vars(&target, &unix))
            .await
            .expect("connect through the bastion");
        assert_echoes(&mut stream).await;
        assert_unchecked(
            stream.notices(),
            &[bastion.address(), target.address.clone()],
        );
        drop(stream);

        // The user key does not open the bastion: the error names the bastion.
        let wrong = Settings {
            jump: Some(Target {
                key: Key::File(f.user_key.clone()),
                ..settings.jump.clone().expect("jump")
            }),
            ..settings
        };
        let err = runway_ssh::connect(&target, &wrong, &unix, &vars(&target, &unix))
            .await
            .expect_err("the bastion refuses the user key");
        assert!(
            matches!(&err, SshError::AuthRejected { address, .. } if *address == bastion.address()),
            "{err}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_command_carries_ssh() {
    let Some(f) = Fixture::new() else { return };
    require("/usr/bin/busybox", "Debian's busybox, for its nc").expect("busybox");
    bounded(async {
        let unix = unix_echo(&f.path("echo.sock"));
        let target = f.target();
        let settings = Settings {
            proxy_command: Some("exec busybox nc {{.Host}} {{.Port}}".into()),
            ..settings()
        };
        let mut stream = runway_ssh::connect(&target, &settings, &unix, &vars(&target, &unix))
            .await
            .expect("connect through the proxy command");
        assert_echoes(&mut stream).await;
        assert_eq!(stream.command_stderr().as_deref(), Some(""));
        drop(stream);
        f.sshd.wait_closed(1).await;

        // A proxy command that fails: its stderr is in the error.
        let failing = Settings {
            proxy_command: Some("echo no route to {{.Host.InstanceName}} >&2; exit 1".into()),
            ..settings.clone()
        };
        let err = runway_ssh::connect(&target, &failing, &unix, &vars(&target, &unix))
            .await
            .expect_err("the proxy command fails");
        let text = runway_log::chain(&err);
        assert!(matches!(err, SshError::ProxyCommand { .. }), "{text}");
        assert!(text.contains("no route to manager-1"), "{text}");
        assert!(text.contains(&target.address), "{text}");

        // An unknown template field, before anything runs.
        let unknown = Settings {
            proxy_command: Some("nc {{.Hostname}} 22".into()),
            ..settings
        };
        let err = runway_ssh::connect(&target, &unknown, &unix, &vars(&target, &unix))
            .await
            .expect_err("unknown field");
        assert!(err.to_string().contains("unknown field .Hostname"), "{err}");
    })
    .await;
}

/// Process state from /proc: `None` when gone, `Some('Z')` for a zombie.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_command_is_the_stream_and_dies_with_it() {
    let Some(f) = Fixture::new() else { return };
    require("/usr/bin/ssh", "Debian's openssh-client").expect("ssh");
    require("/usr/bin/python3", "Debian's python3, the remote relay").expect("python3");
    bounded(async {
        let unix = unix_echo(&f.path("echo.sock"));
        // On the "remote" side, a relay between stdio and the unix socket (socat's job, when
        // installed).
        let relay = f.path("relay.py");
        write_unix_relay(&relay);
        let pid_file = f.path("command.pid");
        let template = format!(
            "echo $$ > {pid}; exec ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
             -o BatchMode=yes -o LogLevel=ERROR -i {key} -p {{{{.Port}}}} {{{{.Host.Username}}}}@{{{{.Host}}}} \
             /usr/bin/python3 {relay} {{{{.WrapperSocket}}}}",
            pid = pid_file.display(),
            key = f.user_key.display(),
            relay = relay.display(),
        );
        let target = f.target();
        let mut stream =
            runway_ssh::command_stream(&template, &vars(&target, &unix)).expect("start the command");
        assert_echoes(&mut stream).await;
        assert!(stream.notices().is_empty());
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .expect("pid file")
            .trim()
            .parse()
            .expect("pid");
        assert_eq!(process_state(pid).map(|s| s != 'Z'), Some(true));
        drop(stream);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !matches!(process_state(pid), None | Some('Z')) {
            assert!(Instant::now() < deadline, "ssh {pid} outlived its stream");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // A command that cannot reach the socket: what it says is kept.
        let mut stream = runway_ssh::command_stream(
            "echo cannot reach {{.GRPCServer.Address}} >&2",
            &vars(&target, &unix),
        )
        .expect("start");
        let mut buf = Vec::new();
        stream.read_to_end(&mut buf).await.expect("eof");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let stderr = stream.command_stderr().unwrap_or_default();
            if stderr.contains("cannot reach") {
                assert!(stderr.contains("echo.sock"), "{stderr}");
                break;
            }
            assert!(Instant::now() < deadline, "stderr not kept: {stderr:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

fn fingerprint(public_key: &Path) -> String {
    let out = Command::new("ssh-keygen")
        .arg("-lf")
        .arg(public_key)
        .output()
        .expect("ssh-keygen -l");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(1)
        .expect("a fingerprint")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_keys_checked_against_known_hosts() {
    let Some(f) = Fixture::new() else { return };
    bounded(async {
        let unix = unix_echo(&f.path("echo.sock"));
        let target = f.target();
        let host_fp = fingerprint(&f.sshd.dir().join("host_key.pub"));
        let pattern = format!("[127.0.0.1]:{}", f.sshd.port());
        let known_hosts = f.path("known_hosts");
        let with = |path: &Path| Settings {
            host_keys: HostKeyPolicy::KnownHosts(path.to_owned()),
            ..settings()
        };

        let other = f.path("other_host_key");
        keygen(&other, &[]);
        let other_pub = std::fs::read_to_string(other.with_extension("pub")).expect("pub");

        // The right key, after a comment and another host's line.
        let mut file = std::fs::File::create(&known_hosts).expect("known_hosts");
        writeln!(file, "# comment").expect("write");
        write!(file, "other.example {other_pub}").expect("write");
        write!(file, "{pattern} {}", f.sshd.host_key_pub()).expect("write");
        drop(file);
        let stream = runway_ssh::connect(&target, &with(&known_hosts), &unix, &vars(&target, &unix))
            .await
            .expect("a known host key");
        assert!(stream.notices().is_empty(), "{:?}", stream.notices());
        drop(stream);

        // Hashed, as `ssh-keygen -H` writes it.
        run(Command::new("ssh-keygen").arg("-H").arg("-f").arg(&known_hosts));
        let hashed = std::fs::read_to_string(&known_hosts).expect("read");
        assert!(hashed.contains("|1|") && !hashed.contains(&pattern), "{hashed}");
        runway_ssh::connect(&target, &with(&known_hosts), &unix, &vars(&target, &unix))
            .await
            .expect("a hashed known host key");

        // Another key for this host: changed.
        let wrong = f.path("known_hosts_wrong");
        std::fs::write(&wrong, format!("{pattern} {other_pub}")).expect("write");
        let err = runway_ssh::connect(&target, &with(&wrong), &unix, &vars(&target, &unix))
            .await
            .expect_err("a changed host key");
        let text = err.to_string();
        assert!(
            matches!(&err, SshError::HostKey(e) if e.changed == Some(1) && e.fingerprint == host_fp),
            "{text}"
        );
        assert!(text.contains("host key changed"), "{text}");
        assert!(text.contains(&target.address) && text.contains(&host_fp), "{text}");

        // Not in the file: unknown.
        let err = runway_ssh::connect(
            &target,
            &with(&f.path("known_hosts_wrong_other")),
            &unix,
            &vars(&target, &unix),
        )
        .await
        .expect_err("a missing file");
        assert!(matches!(err, SshError::KnownHosts { .. }), "{err}");
        std::fs::write(f.path("empty"), "").expect("write");
        let err = runway_ssh::connect(&target, &with(&f.path("empty")), &unix, &vars(&target, &unix))
            .await
            .expect_err("an unknown host key");
        let text = err.to_string();
        assert!(
            matches!(&err, SshError::HostKey(e) if e.changed.is_none()),
            "{text}"
        );
        assert!(text.contains("unknown") && text.contains(&host_fp), "{text}");
        assert!(text.contains(&pattern), "{text}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_name_the_address_and_the_stage() {
    let Some(f) = Fixture::new() else { return };
    bounded(async {
        let unix = unix_echo(&f.path("echo.sock"));

        // A key the server does not know.
        let stranger = f.path("stranger_key");
        keygen(&stranger, &[]);
        let target = Target {
            key: Key::File(stranger),
            ..f.target()
        };
        let err = runway_ssh::connect(&target, &settings(), &unix, &vars(&target, &unix))
            .await
            .expect_err("a refused key");
        let text = err.to_string();
        assert!(matches!(err, SshError::AuthRejected { .. }), "{text}");
        assert!(
            text.starts_with(&format!("ssh {}: auth:", target.address))
                && text.contains("publickey"),
            "{text}"
        );

        // A key that is not a key.
        let target = Target {
            key: Key::Pem("not a key".into()),
            ..f.target()
        };
        let err = runway_ssh::connect(&target, &settings(), &unix, &vars(&target, &unix))
            .await
            .expect_err("a bad key");
        assert!(
            err.to_string()
                .contains("auth: private key from the terraform output"),
            "{err}"
        );

        // A socket that is not there: the channel is refused.
        let missing = Destination::Unix(f.path("missing.sock"));
        let err = runway_ssh::connect(
            &f.target(),
            &settings(),
            &missing,
            &vars(&f.target(), &missing),
        )
        .await
        .expect_err("no socket");
        assert!(
            matches!(
                err,
                SshError::Protocol {
                    stage: Stage::ChannelOpen,
                    ..
                }
            ),
            "{err}"
        );

        // A closed port.
        let closed = Target {
            address: format!("127.0.0.1:{}", free_port()),
            ..f.target()
        };
        let err = runway_ssh::connect(&closed, &settings(), &unix, &vars(&closed, &unix))
            .await
            .expect_err("a closed port");
        let text = err.to_string();
        assert!(
            matches!(
                err,
                SshError::Io {
                    stage: Stage::TcpConnect,
                    ..
                }
            ),
            "{text}"
        );
        assert!(
            text.contains(&closed.address) && text.contains("tcp connect"),
            "{text}"
        );

        // A listener that never sends its banner: the timeout holds.
        let silent = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let silent_address = silent.local_addr().expect("addr").to_string();
        let held = Arc::new(tokio::sync::Mutex::new(Vec::new()));
        let keep = held.clone();
        tokio::spawn(async move {
            while let Ok((s, _)) = silent.accept().await {
                keep.lock().await.push(s);
            }
        });
        let target = Target {
            address: silent_address.clone(),
            ..f.target()
        };
        let short = Settings {
            timeout: Duration::from_millis(700),
            ..settings()
        };
        let started = Instant::now();
        let err = runway_ssh::connect(&target, &short, &unix, &vars(&target, &unix))
            .await
            .expect_err("a silent server");
        let took = started.elapsed();
        assert!(
            matches!(
                err,
                SshError::Timeout {
                    stage: Stage::Handshake,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            took >= Duration::from_millis(650) && took < Duration::from_secs(5),
            "{took:?}"
        );
        assert!(err.to_string().contains(&silent_address), "{err}");
    })
    .await;
}

/// The `runway` binary of this build, next to the test executable's directory.
fn runway_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .map(|dir| dir.join("runway"))
        .find(|path| path.is_file())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_check_status_over_ssh() {
    use runway_wrapper::proto::process_wrapper_client::ProcessWrapperClient;
    use runway_wrapper::proto::{CheckStatusRequest, Status};

    let Some(f) = Fixture::new() else { return };
    let Some(runway) = runway_binary() else {
        assert!(
            !ci(),
            "target/debug/runway is missing; CI=true requires it (cargo build -p runway-cli)"
        );
        eprintln!("skipped: target/debug/runway is missing (cargo build -p runway-cli)");
        return;
    };
    let socket = f.path("w.sock");
    let mut wrapper = Command::new(runway)
        .arg("wrapper")
        .arg("--grpc-listen")
        .arg(format!("unix://{}", socket.display()))
        .args(["--", "sleep", "30"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start runway wrapper");
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _kill = Kill(&mut wrapper);

    bounded(async {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "the wrapper did not listen");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let target = f.target();
        let destination = Destination::Unix(socket.clone());
        let channel = tonic::transport::Endpoint::from_static("http://localhost")
            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let target = target.clone();
                let destination = destination.clone();
                async move {
                    let vars = vars(&target, &destination);
                    runway_ssh::connect(&target, &settings(), &destination, &vars)
                        .await
                        .map(hyper_util::rt::TokioIo::new)
                }
            }))
            .await
            .expect("a grpc channel over ssh");
        let mut client = ProcessWrapperClient::new(channel);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let response = client
                .check_status(CheckStatusRequest {})
                .await
                .expect("CheckStatus")
                .into_inner();
            if response.status() == Status::Running {
                break;
            }
            assert!(Instant::now() < deadline, "not running: {response:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}
