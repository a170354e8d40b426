//! Migrations: applied once, idempotent on reopen, and a newer database refused untouched.

use runway_store::{
    DeploymentState, RolloutCommand, SCHEMA_VERSION, SqliteStore, Store, StoreError,
};

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
    assert_eq!(SCHEMA_VERSION, 12);
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
        "identity_keys",
        "leases",
        "maintenance",
        "previews",
        "revisions",
        "secrets",
        "service_ids",
        "services",
        "teams",
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

/// A database as Runway wrote it at schema version 1, with a service, a revision and two
/// deployments (one ended, one in flight), written with the released migration itself.
fn version_1_database(path: &std::path::Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(include_str!("../../migrations/0001_initial.sql"))
        .unwrap();
    conn.execute_batch(
        "INSERT INTO services VALUES ('hello', '[\"alice\"]', '[\"production\"]', 1000, 'alice');
         INSERT INTO revisions (service, env, number, name, manifest, artifact, env_vars,
             secret_versions, created_by, created_at)
         VALUES ('hello', 'production', 1, 'hello-production-00001', '{}', '{}', '{}', '{}',
             'alice', 1000);
         INSERT INTO deployments (service, env, kind, from_revision, to_revision, state,
             reason, created_by, created_at, updated_at)
         VALUES ('hello', 'production', 'deploy', NULL, 'hello-production-00001', 'failed',
             'probe', 'alice', 1000, 2000),
                ('hello', 'production', 'rollback', NULL, 'hello-production-00001',
             'progressing', NULL, 'alice', 3000, 3000);
         INSERT INTO deployment_events (deployment_id, at, message)
         VALUES (1, 1000, 'deploy of hello-production-00001 by alice');
         PRAGMA user_version = 1;",
    )
    .unwrap();
}

#[test]
fn a_version_1_database_migrates_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    version_1_database(&path);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    store.integrity_check().unwrap();
    let deployments = store.deployment_list("hello", None, 10).unwrap();
    assert_eq!(deployments.len(), 2);
    let (active, ended) = (&deployments[0], &deployments[1]);
    assert_eq!(
        (ended.state, ended.reason.as_deref()),
        (DeploymentState::Failed, Some("probe"))
    );
    assert_eq!(ended.updated_at.unix_millis(), 2000);
    for d in &deployments {
        assert_eq!((d.rollout.as_deref(), d.command), (None, None));
    }
    assert_eq!(store.deployment_events(ended.id).unwrap().len(), 1);
    // The new columns work on the old rows.
    store
        .deployment_command("alice", "hello", "production", RolloutCommand::Pause)
        .unwrap();
    let saved = store
        .deployment_save_rollout("rollout", active.id, "{}", Some(RolloutCommand::Pause))
        .unwrap();
    assert_eq!(
        (saved.rollout.as_deref(), saved.command),
        (Some("{}"), None)
    );
    drop(store);
    // Reopening applies nothing again, and SQL refuses a command that is not one.
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let err = conn
        .execute("UPDATE deployments SET command = 'stop' WHERE id = 2", [])
        .unwrap_err();
    assert!(err.to_string().contains("CHECK constraint failed"), "{err}");
}

#[test]
fn services_from_before_version_3_get_identities_that_are_never_given_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    version_1_database(&path);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "INSERT INTO services VALUES ('api', '[\"bob\"]', '[\"production\"]', 500, 'bob')",
            [],
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    store.integrity_check().unwrap();
    // Onboarded first, numbered first; neither may run processes until an admin says so.
    let (api, hello) = (
        store.service_get("api").unwrap(),
        store.service_get("hello").unwrap(),
    );
    assert_eq!((api.id, hello.id), (1, 2));
    assert!(!api.allow_processes && !hello.allow_processes);
    store.service_decommission("alice", "hello").unwrap();
    let again = onboard(&store, "hello");
    assert_eq!(again.id, 3, "an identity was given twice");
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
    assert!(
        runway_log::chain(&err).starts_with("database error:"),
        "{err}"
    );
}

#[test]
fn a_missing_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no/such/dir/runway.db");
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Io { .. }), "{err}");
    assert!(
        runway_log::chain(&err).starts_with(&format!("cannot create {}: ", path.display())),
        "{err}"
    );
}
