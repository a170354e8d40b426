//! Durability under `kill -9`: a child process records deploys in a loop and prints each id
//! once its method returned; the parent kills it with SIGKILL mid-way, reopens the database
//! and finds every acknowledged record, in a database that passes `integrity_check`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use runway_store::{DeploymentState, SqliteStore, Store};

use crate::support::{all_new, new_revision, onboard};

const CHILD_ENV: &str = "RUNWAY_STORE_DURABILITY_CHILD_DB";
/// Acknowledgements to read before the kill.
const KILL_AFTER: usize = 150;
/// The whole test's bound.
const DEADLINE: Duration = Duration::from_secs(60);

/// The child's body. Without the variable (a normal test run) it does nothing.
#[test]
fn durability_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = SqliteStore::open(&path).unwrap();
    onboard(&store, "hello");
    let mut out = std::io::stdout().lock();
    for i in 0..100_000u32 {
        let record = store
            .record_deploy(
                "child",
                &new_revision("hello", "production", &format!("d{i}")),
                &all_new(1),
            )
            .unwrap();
        store
            .deployment_transition("child", record.deployment.id, DeploymentState::Failed, None)
            .unwrap();
        let secret = store
            .secret_set(
                "child",
                "hello",
                "production",
                "KEY",
                i + 1,
                b"n",
                format!("c{i}").as_bytes(),
                None,
            )
            .unwrap();
        writeln!(
            out,
            "ACK {} {} {}",
            record.revision.name, record.deployment.id, secret.version
        )
        .unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn acknowledged_records_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runway.db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "durability::durability_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(ack) = line.strip_prefix("ACK ")
                && tx.send(ack.to_owned()).is_err()
            {
                break;
            }
        }
    });

    let start = Instant::now();
    let mut acks = Vec::new();
    while acks.len() < KILL_AFTER {
        let left = DEADLINE.saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok(ack) => acks.push(ack),
            Err(e) => {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!(
                    "the child stopped acknowledging after {} records: {e}",
                    acks.len()
                );
            }
        }
    }
    // SIGKILL, while it is in the middle of its next writes.
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child was killed: {status:?}");
    reader.join().unwrap();
    // Acknowledgements that were in the pipe when it died count too.
    acks.extend(rx.try_iter());

    let store = SqliteStore::open(&path).unwrap();
    store.integrity_check().unwrap();
    let revisions = store.revision_list("hello", "production").unwrap();
    let numbers: Vec<u32> = revisions.iter().map(|r| r.number).collect();
    let expected: Vec<u32> = (1..=u32::try_from(numbers.len()).unwrap()).collect();
    assert_eq!(numbers, expected, "numbers are 1..n without gaps");
    for ack in &acks {
        let mut parts = ack.split(' ');
        let name = parts.next().unwrap();
        let deployment: i64 = parts.next().unwrap().parse().unwrap();
        let version: u32 = parts.next().unwrap().parse().unwrap();
        let revision = store.revision_get(name).unwrap();
        let deployment = store.deployment_get(deployment).unwrap();
        assert_eq!(deployment.to_revision, revision.name);
        assert_eq!(deployment.state, DeploymentState::Failed);
        store
            .secret_read("hello", "production", "KEY", version)
            .unwrap();
    }
    assert!(revisions.len() >= acks.len());
    eprintln!(
        "killed after {} acknowledged loops; {} revisions found",
        acks.len(),
        revisions.len()
    );
    // Every change was audited with it: 1 onboarding, then 3 entries per loop, and at most
    // the unacknowledged loop's first writes beyond that.
    let audit = store.audit_list(0, u32::MAX).unwrap();
    assert!(audit.len() > 3 * acks.len(), "{} entries", audit.len());
    // And the store still works.
    let next = store.record_deploy(
        "parent",
        &new_revision("hello", "production", "after"),
        &all_new(1),
    );
    match next {
        Ok(record) => assert_eq!(
            record.revision.number,
            u32::try_from(revisions.len()).unwrap() + 1
        ),
        // The killed child may have left its last deploy pending.
        Err(runway_store::StoreError::Conflict(_)) => {}
        Err(e) => panic!("{e}"),
    }
}

/// A full disk (here the database's size bound) fails a write with `Full`, saying what ran
/// out, and leaves everything as it was; once there is room again, writes go on.
#[test]
fn a_full_disk_fails_a_write_whole_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("runway.db")).unwrap();
    onboard(&store, "hello");
    let first = store
        .record_deploy(
            "alice",
            &new_revision("hello", "production", "a"),
            &all_new(1),
        )
        .unwrap();
    store.limit_size(Some(1)).unwrap();
    let big = "x".repeat(64 * 1024);
    let error = store
        .deployment_add_event("alice", first.deployment.id, &big)
        .unwrap_err();
    assert!(matches!(error, runway_store::StoreError::Full), "{error}");
    assert!(error.to_string().contains("disk is full"), "{error}");
    assert!(
        store
            .deployment_events(first.deployment.id)
            .unwrap()
            .iter()
            .all(|e| e.message != big),
        "a failed write left a row"
    );
    store.limit_size(None).unwrap();
    store
        .deployment_add_event("alice", first.deployment.id, &big)
        .unwrap();
    store.integrity_check().unwrap();
}
