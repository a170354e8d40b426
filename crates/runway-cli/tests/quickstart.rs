//! `runway quickstart --exit-after-rollout`, the README's main command as CI runs it: a
//! platform on this machine, the example deployed, a second version rolled out under load with
//! no failed request, and nothing left running.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn quickstart_rolls_out_without_a_failed_request() {
    if Command::new("python3").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 is needed under CI"
        );
        eprintln!("skipped: the example needs python3");
        return;
    }
    let temporary = tempfile::tempdir().unwrap();
    // Not there yet: made as `runway server --data-dir` makes it.
    let data = temporary.path().join("state");
    let mut child = Command::new(env!("CARGO_BIN_EXE_runway"))
        .args([
            "quickstart",
            "--https",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(&data)
        .arg("--exit-after-rollout")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read as it writes, with a bound at the end: a process left behind holding the pipes
    // must fail the test, not hang it.
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        let (sender, receiver) = std::sync::mpsc::channel();
        let mut pipe = pipe.unwrap();
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            let _ = sender.send(text);
        });
        receiver
    };
    let out = read(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = read(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(180) {
            let _ = child.kill();
            panic!("quickstart still running after 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let bound = Duration::from_secs(10);
    let (out, err) = match (out.recv_timeout(bound), err.recv_timeout(bound)) {
        (Ok(out), Ok(err)) => (out, err),
        _ => {
            // Say what happened (the platform's logs), and end what is left before failing.
            let left = leftovers(&data);
            panic!(
                "quickstart ended ({status}) but a process it started still holds its output: \
                 {left:?}\n{}",
                logs(&data)
            );
        }
    };
    assert!(status.success(), "{out}{err}\n{}", logs(&data));
    assert!(
        out.contains("hello serves https://hello.dev.localhost:"),
        "{out}"
    );
    assert!(out.contains("curl --cacert"), "{out}");
    assert!(out.contains("the console on https://127.0.0.1:"), "{out}");
    let report = out
        .lines()
        .find(|l| l.contains("under load"))
        .unwrap_or_else(|| panic!("no report: {out}"));
    assert!(report.contains(", 0 failed,"), "{report}");
    let served: u64 = report
        .split("): ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(
        served > 100,
        "only {served} requests during the rollout: {report}"
    );
    // The platform's own log lines went to its log, not among the quickstart's story.
    let stray: Vec<&str> = err.lines().filter(|l| !l.starts_with("note: ")).collect();
    assert!(stray.is_empty(), "stray lines on stderr: {stray:?}");
    assert!(out.contains("the platform's log: "), "{out}");
    // The CLI can talk to the platform without a lost token: a login of its own, 0600.
    let cli = data.join("cli.json");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&cli).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let login: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cli).unwrap()).unwrap();
    assert!(
        login["token"]
            .as_str()
            .unwrap()
            .starts_with("runway_admin_"),
        "{login}"
    );
    assert!(
        login["server"]
            .as_str()
            .unwrap()
            .starts_with("https://127.0.0.1:")
    );
    // The platform stopped its instances: no supervisor is left in its data directory.
    let instances = data.join("runtime/instances");
    let left: Vec<_> = std::fs::read_dir(&instances)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "instances left: {left:?}");
}

/// The last lines of the platform's logs in `data`.
fn logs(data: &std::path::Path) -> String {
    ["server.log", "ingress/ingress.log"]
        .iter()
        .map(|name| {
            let text = std::fs::read_to_string(data.join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(40)..].join("\n");
            format!("--- {name}, last lines:\n{tail}\n")
        })
        .collect()
}

/// Kills (SIGKILL) the processes still running with `data` in their arguments; their pids and
/// arguments.
fn leftovers(data: &std::path::Path) -> Vec<String> {
    let data = data.to_string_lossy().into_owned();
    let mut left = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(args) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args = String::from_utf8_lossy(&args).replace('\0', " ");
        if args.contains(&data) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            left.push(format!("{pid} {args}"));
        }
    }
    left
}
