//! The audit trail's figures: how fast a sink drains a backlog (a file, and an HTTPS webhook on
//! loopback, at two batch sizes), how fast existing entries are chained and a chain verified,
//! and what the chain adds to an audited write on SQLite (with its fsync, and without, where
//! only the extra statements and the hash are left).
//!
//!   cargo bench -p runway-server --bench audit_export
//!
//! `RUNWAY_BENCH_AUDIT_ENTRIES` sets the backlog (default 20,000 entries).

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark prints its figures"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use runway_server::audit_export::{AuditConfig, AuditSinkConfig, start_exports};
use runway_store::{AuditEntry, NewService, ServiceUpdate, SqliteStore, Store, Timestamp};
use serde_json::json;

fn main() {
    let entries: usize = std::env::var("RUNWAY_BENCH_AUDIT_ENTRIES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runway.db");
    drop(SqliteStore::open(&db).unwrap());
    backlog(&db, entries);
    let started = Instant::now();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&db).unwrap());
    let took = started.elapsed();
    println!(
        "chaining {entries} entries written without a hash (at open): {:.2} s, {:.0} entries/s",
        took.as_secs_f64(),
        entries as f64 / took.as_secs_f64()
    );
    let started = Instant::now();
    let verified = store.audit_verify().unwrap();
    let took = started.elapsed();
    assert!(verified.ok, "{verified:?}");
    println!(
        "verifying {} entries: {:.2} s, {:.0} entries/s",
        verified.entries,
        took.as_secs_f64(),
        verified.entries as f64 / took.as_secs_f64()
    );

    let receiver = rt.block_on(webhook_receiver(dir.path()));
    for batch in [100, 1000] {
        let file = dir.path().join(format!("audit-{batch}.jsonl"));
        drain(
            &rt,
            &store,
            &format!("file (batch {batch}, an fsync each)"),
            json!({"name": format!("file-{batch}"), "file": {"path": file}, "batch": batch,
                   "poll_ms": 10}),
            verified.head.id,
        );
        drain(
            &rt,
            &store,
            &format!("HTTPS webhook on loopback (batch {batch})"),
            json!({"name": format!("webhook-{batch}"),
                   "webhook": {"url": receiver.0, "ca_file": receiver.1}, "batch": batch,
                   "poll_ms": 10}),
            verified.head.id,
        );
    }

    chain_cost(dir.path());
}

/// `count` audit entries written below the store, as an older Runway would have left them.
fn backlog(db: &std::path::Path, count: usize) {
    let mut conn = rusqlite::Connection::open(db).unwrap();
    let tx = conn.transaction().unwrap();
    for n in 0..count {
        tx.execute(
            "INSERT INTO audit (at, actor, action, target, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
            rusqlite::params![
                1_700_000_000_000_i64 + n as i64,
                "ci:project_path=acme/web",
                "deploy",
                format!("service/web-{}/production", n % 50),
                json!({"revision": format!("web-production-{n:05}"), "digest":
                    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                    "strategy": "canary"})
                .to_string()
            ],
        )
        .unwrap();
    }
    tx.commit().unwrap();
}

/// An HTTPS receiver on loopback (the API's own server, a certificate from a local CA) that
/// acknowledges every batch: its URL and its CA's file.
async fn webhook_receiver(dir: &std::path::Path) -> (String, std::path::PathBuf) {
    let ca_dir = dir.join("ca");
    let tls = runway_api::tls_config(&ca_dir, &["127.0.0.1".to_owned()]).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}/audit", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/audit",
        axum::routing::post(|body: String| async move {
            std::hint::black_box(body.lines().count());
            "ok"
        }),
    );
    let app = app.layer(axum::extract::DefaultBodyLimit::max(64 << 20));
    tokio::spawn(runway_api::serve(
        listener,
        app,
        Some(tls),
        runway_api::ServeOptions::default(),
        std::future::pending(),
    ));
    (url, ca_dir.join("ca.pem"))
}

/// Exports the whole log to a new sink and prints how fast it went.
fn drain(
    rt: &tokio::runtime::Runtime,
    store: &Arc<dyn Store>,
    what: &str,
    sink: serde_json::Value,
    head: i64,
) {
    let sink: AuditSinkConfig = serde_json::from_value(sink).unwrap();
    let name = sink.name.clone();
    let config = AuditConfig { export: vec![sink] };
    let figures = Arc::new(runway_api::audit::AuditExport::default());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    let tasks = {
        let _runtime = rt.enter();
        start_exports(&config, store, &figures, None, &stopped).unwrap()
    };
    let deadline = started + Duration::from_secs(600);
    while store.audit_export_get(&name).unwrap().cursor < head {
        assert!(
            Instant::now() < deadline,
            "{what}: not drained in 10 minutes"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = started.elapsed();
    let _ = stop.send(true);
    for task in tasks {
        rt.block_on(task).unwrap().unwrap();
    }
    println!(
        "export to {what}: {head} entries in {:.2} s, {:.0} entries/s",
        took.as_secs_f64(),
        head as f64 / took.as_secs_f64()
    );
}

/// What the chain adds to an audited write: the store's own write (onboarding a service
/// changed, one audit entry, chained) timed whole; then the same audit insert replayed below
/// the store with and without the chain's step (the head read, the pending entries read, the
/// entry's hash and the two updates), with SQLite's fsync (`synchronous=FULL`, the store's) and
/// without it.
fn chain_cost(dir: &std::path::Path) {
    const WRITES: usize = 300;
    let store = SqliteStore::open(dir.join("writes.db")).unwrap();
    store
        .service_create(
            "bench",
            &NewService {
                name: "web".into(),
                owners: vec!["a@example.com".into()],
                environments: vec!["production".into()],
                team: None,
            },
        )
        .unwrap();
    let mut took = Vec::with_capacity(WRITES);
    for n in 0..WRITES {
        let update = ServiceUpdate {
            owners: Some(vec![format!("owner-{n}@example.com")]),
            ..ServiceUpdate::default()
        };
        let started = Instant::now();
        store.service_update("bench", "web", &update).unwrap();
        took.push(started.elapsed());
    }
    println!(
        "an audited write through the store (service_update, chained, fsync): median {}",
        micros(&mut took)
    );
    drop(store);

    for synchronous in ["FULL", "OFF"] {
        // One database each, written in turn, so both see the same disk.
        let open = |variant: &str| {
            let db = dir.join(format!("replay-{variant}-{synchronous}.db"));
            drop(SqliteStore::open(&db).unwrap());
            let conn = rusqlite::Connection::open(&db).unwrap();
            conn.pragma_update(None, "journal_mode", "WAL").unwrap();
            conn.pragma_update(None, "synchronous", synchronous)
                .unwrap();
            conn
        };
        let (unchained, chained_db) = (open("plain"), open("chained"));
        let mut plain = Vec::with_capacity(WRITES);
        let mut chained = Vec::with_capacity(WRITES);
        for n in 0..WRITES {
            let started = Instant::now();
            insert(&unchained, n, false);
            plain.push(started.elapsed());
            let started = Instant::now();
            insert(&chained_db, n, true);
            chained.push(started.elapsed());
        }
        let (plain, chained) = (micros(&mut plain), micros(&mut chained));
        println!(
            "an audit insert replayed (synchronous={synchronous}): median {plain} without the \
             chain, {chained} with it"
        );
    }
}

/// One audit insert in its own immediate transaction, chained as the store does when `chain`.
fn insert(conn: &rusqlite::Connection, n: usize, chain: bool) {
    let tx = conn.unchecked_transaction().unwrap();
    let detail = json!({"owners": [format!("owner-{n}@example.com")]});
    conn.execute(
        "INSERT INTO audit (at, actor, action, target, detail) VALUES (?1, 'bench', \
         'service.update', 'service/web', ?2)",
        rusqlite::params![Timestamp::now().unix_millis(), detail.to_string()],
    )
    .unwrap();
    if chain {
        let (head_id, head_hash): (i64, String) = conn
            .query_row("SELECT id, hash FROM audit_head WHERE one = 1", [], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .unwrap();
        let mut pending = conn
            .prepare_cached(
                "SELECT id, at, actor, action, target, detail FROM audit \
                 WHERE id > ?1 AND hash IS NULL ORDER BY id",
            )
            .unwrap();
        let rows: Vec<AuditEntry> = pending
            .query_map([head_id], |row| {
                Ok(AuditEntry {
                    id: row.get(0)?,
                    at: Timestamp::from_unix_millis(row.get(1)?).unwrap(),
                    actor: row.get(2)?,
                    action: row.get(3)?,
                    target: row.get(4)?,
                    detail: serde_json::from_str(&row.get::<_, String>(5)?).unwrap(),
                    prev_hash: None,
                    hash: None,
                })
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut head = (head_id, head_hash);
        for entry in rows {
            let hash = runway_store::audit_hash(&head.1, &entry);
            conn.execute(
                "UPDATE audit SET prev_hash = ?2, hash = ?3 WHERE id = ?1",
                rusqlite::params![entry.id, head.1, hash],
            )
            .unwrap();
            head = (entry.id, hash);
        }
        conn.execute(
            "UPDATE audit_head SET id = ?1, hash = ?2 WHERE one = 1",
            rusqlite::params![head.0, head.1],
        )
        .unwrap();
    }
    tx.commit().unwrap();
}

fn micros(took: &mut [Duration]) -> String {
    took.sort_unstable();
    let median = took[took.len() / 2];
    format!("{:.0} µs", median.as_secs_f64() * 1e6)
}
