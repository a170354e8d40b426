//! Test fixtures (feature `test-support`): a real OpenSSH server on a loopback port with its
//! own host key and config, and ed25519 keys made by `ssh-keygen`. Used by this crate's tests
//! and the deployer's.

#![allow(
    clippy::print_stderr,
    reason = "test support: a skip is told to whoever runs the tests"
)]

use std::net::TcpListener as StdTcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's openssh-server.
pub const SSHD: &str = "/usr/sbin/sshd";

pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// `None` (and a note on stderr) when a tool the test needs is missing; a failure under CI.
pub fn require(path: &str, what: &str) -> Option<()> {
    if Path::new(path).exists() {
        return Some(());
    }
    assert!(!ci(), "{path} is missing ({what}); CI=true requires it");
    eprintln!("skipped: {path} is missing ({what})");
    None
}

pub fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run a command");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An ed25519 key pair at `path` and `path.pub`.
pub fn keygen(path: &Path, extra: &[&str]) {
    let mut cmd = Command::new("ssh-keygen");
    cmd.args(["-q", "-N", "", "-C", "test", "-f"])
        .arg(path)
        .args(extra);
    if !extra.contains(&"-t") {
        cmd.args(["-t", "ed25519"]);
    }
    run(&mut cmd);
}

pub fn free_port() -> u16 {
    StdTcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A real `sshd` on a loopback port, killed on drop.
#[derive(Debug)]
pub struct Sshd {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Sshd {
    /// Starts sshd with its own host key in `dir`, accepting the public keys `authorized`.
    pub fn start(dir: &Path, authorized: &[&Path]) -> Sshd {
        std::fs::create_dir_all(dir).expect("sshd dir");
        std::fs::create_dir_all("/run/sshd").expect("/run/sshd");
        let host_key = dir.join("host_key");
        keygen(&host_key, &[]);
        let mut keys = String::new();
        for key in authorized {
            keys.push_str(&std::fs::read_to_string(key.with_extension("pub")).expect("pub key"));
        }
        std::fs::write(dir.join("authorized_keys"), keys).expect("authorized_keys");
        let port = free_port();
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {host}\nAuthorizedKeysFile {auth}\n\
                 PidFile {pid}\nUsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n\
                 AllowStreamLocalForwarding yes\nAllowTcpForwarding yes\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nLogLevel VERBOSE\n",
                host = host_key.display(),
                auth = dir.join("authorized_keys").display(),
                pid = dir.join("sshd.pid").display(),
            ),
        )
        .expect("sshd_config");
        let log = std::fs::File::create(dir.join("sshd.log")).expect("sshd.log");
        let child = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start sshd");
        let sshd = Sshd {
            child,
            port,
            dir: dir.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "sshd did not listen on {port}: {}",
                sshd.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        sshd
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its directory: config, host key (`host_key`, `host_key.pub`), log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn host_key_pub(&self) -> String {
        std::fs::read_to_string(self.dir.join("host_key.pub")).expect("host key")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sshd.log")).unwrap_or_default()
    }

    /// Waits until sshd has closed `n` sessions in all: a dropped stream ends its session.
    /// sshd logs "Closing connection to …" when the client closes cleanly, and "Read error
    /// from remote host …" when the connection was reset (a killed `ProxyCommand` resets it);
    /// either is the end of a session that was authenticated.
    pub async fn wait_closed(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let ended = |log: &str| {
            log.matches("Closing connection to").count()
                + log.matches("Read error from remote host").count()
        };
        while ended(&self.log()) < n {
            assert!(
                Instant::now() < deadline,
                "sshd on {} did not close {n} sessions: {}",
                self.port,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes, at `path`, a relay between stdio and the unix socket named as its first argument:
/// what `socat - UNIX-CONNECT:PATH` does, for hosts without socat. Run it with python3 on the
/// "remote" side of an SSH command.
pub fn write_unix_relay(path: &Path) {
    std::fs::write(
        path,
        "import socket, sys, threading\n\
         s = socket.socket(socket.AF_UNIX)\n\
         s.connect(sys.argv[1])\n\
         def up():\n\
         \x20   while True:\n\
         \x20       b = sys.stdin.buffer.raw.read(65536)\n\
         \x20       if not b: break\n\
         \x20       s.sendall(b)\n\
         \x20   s.shutdown(socket.SHUT_WR)\n\
         threading.Thread(target=up, daemon=True).start()\n\
         while True:\n\
         \x20   b = s.recv(65536)\n\
         \x20   if not b: break\n\
         \x20   sys.stdout.buffer.write(b); sys.stdout.buffer.flush()\n",
    )
    .expect("write the relay");
}
