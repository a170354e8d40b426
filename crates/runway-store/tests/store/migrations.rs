//! Migrations: applied once, idempotent on reopen, and a newer database refused untouched.

use runway_store::{SCHEMA_VERSION, SqliteStore, Store, StoreError};

use crate::support::{deploy_ok, onboard};

fn tables(path: &std::path::Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .unwrap();
    stmt.query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn a_new_database_gets_the_latest_schema_with_its_pragmas() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runway.db");
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(SCHEMA_VERSION, 1);
    assert_eq!(store.path(), path);
    store.integrity_check().unwrap();
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let names = tables(&path);
    for table in [
        "audit",
        "deployment_events",
        "deployments",
        "desired",
        "desired_revisions",
        "revisions",
        "secrets",
        "services",
        "tokens",
    ] {
        assert!(names.iter().any(|n| n == table), "{table} in {names:?}");
    }
}

#[test]
fn reopening_keeps_data_and_applies_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runway.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        onboard(&store, "hello");
        deploy_ok(&store, "hello", "production", "a");
    }
    let before = tables(&path);
    for _ in 0..3 {
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(store.revision_list("hello", "production").unwrap().len(), 1);
    }
    assert_eq!(tables(&path), before);
    // Foreign keys are on in every new connection (SQLite's default is off).
    let store = SqliteStore::open(&path).unwrap();
    let next = deploy_ok(&store, "hello", "production", "b");
    assert_eq!(next.revision.number, 2);
}

#[test]
fn a_newer_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE from_the_future (x INTEGER); PRAGMA user_version = 99;")
            .unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(
        matches!(err, StoreError::TooNew { found: 99, supported } if supported == SCHEMA_VERSION),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("99") && message.contains("upgrade runway"),
        "{message}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the file changed");
    assert!(!dir.path().join("future.db-wal").exists());
    assert_eq!(tables(&path), ["from_the_future"]);
}

#[test]
fn a_file_that_is_not_a_database_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.db");
    std::fs::write(&path, vec![0x42; 8192]).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Sqlite(_)), "{err}");
    assert!(err.to_string().starts_with("database error:"), "{err}");
}

#[test]
fn a_missing_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = SqliteStore::open(dir.path().join("no/such/dir/runway.db")).unwrap_err();
    assert!(matches!(err, StoreError::Sqlite(_)), "{err}");
}
