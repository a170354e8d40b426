//! Fixtures shared by the tests.

use std::collections::BTreeMap;

use runway_store::{
    DeployRecord, DesiredRevision, NewRevision, NewService, PlannedRevision, PostgresStore,
    RevisionRef, SqliteStore, Store,
};
use serde_json::json;
use tempfile::TempDir;

/// A store for one test, on the backend `RUNWAY_TEST_STORE` names: `sqlite` (the default) or
/// `postgres` (a database of its own made on the server `RUNWAY_TEST_POSTGRES` points at,
/// as `scripts/with-postgres` sets it, and dropped afterwards).
pub(crate) struct Fixture {
    pub(crate) store: Box<dyn Store>,
    pub(crate) dir: TempDir,
    backend: Backend,
}

enum Backend {
    Sqlite,
    Postgres(TestDatabase),
}

impl Fixture {
    /// The SQLite file (only for a test that checks the file itself).
    pub(crate) fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("runway.db")
    }

    /// Whether the store is SQLite, for the few tests of SQLite's own behaviour.
    pub(crate) fn is_sqlite(&self) -> bool {
        matches!(self.backend, Backend::Sqlite)
    }

    /// Another handle on the same database, as another process (or replica) would open it.
    pub(crate) fn reopen(&self) -> Box<dyn Store> {
        match &self.backend {
            Backend::Sqlite => Box::new(SqliteStore::open(self.path()).unwrap()),
            Backend::Postgres(database) => Box::new(PostgresStore::open(&database.url).unwrap()),
        }
    }

    /// The PostgreSQL database's URL (a PostgreSQL fixture only).
    pub(crate) fn postgres_url(&self) -> &str {
        match &self.backend {
            Backend::Postgres(database) => &database.url,
            Backend::Sqlite => panic!("not a PostgreSQL fixture"),
        }
    }

    /// Another handle on the PostgreSQL database (a PostgreSQL fixture only).
    pub(crate) fn reopen_postgres(&self) -> PostgresStore {
        match &self.backend {
            Backend::Postgres(database) => PostgresStore::open(&database.url).unwrap(),
            Backend::Sqlite => panic!("not a PostgreSQL fixture"),
        }
    }

    /// Runs a statement below the store, straight on the database: the error's text when
    /// the database refuses it.
    pub(crate) fn raw_execute(&self, sql: &str) -> Result<(), String> {
        match &self.backend {
            Backend::Sqlite => rusqlite::Connection::open(self.path())
                .unwrap()
                .execute_batch(sql)
                .map_err(|e| e.to_string()),
            Backend::Postgres(database) => {
                postgres::Client::connect(&database.url, postgres::NoTls)
                    .unwrap()
                    .batch_execute(sql)
                    .map_err(|e| {
                        e.as_db_error()
                            .map_or_else(|| e.to_string(), |db| db.message().to_owned())
                    })
            }
        }
    }

    /// The database's own consistency check, where it has one (SQLite's integrity check).
    pub(crate) fn check_integrity(&self) {
        if self.is_sqlite() {
            SqliteStore::open(self.path())
                .unwrap()
                .integrity_check()
                .unwrap();
        }
    }
}

/// A database made for one test on the shared test server, dropped with it.
struct TestDatabase {
    admin: String,
    name: String,
    url: String,
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if let Ok(mut admin) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// Which backend the tests run on.
pub(crate) fn on_postgres() -> bool {
    match std::env::var("RUNWAY_TEST_STORE").as_deref() {
        Ok("postgres") => true,
        Ok("sqlite") | Err(_) => false,
        Ok(other) => panic!("RUNWAY_TEST_STORE={other}: expected sqlite or postgres"),
    }
}

pub(crate) fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    if !on_postgres() {
        let store = SqliteStore::open(dir.path().join("runway.db")).unwrap();
        return Fixture {
            store: Box::new(store),
            dir,
            backend: Backend::Sqlite,
        };
    }
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let admin = std::env::var("RUNWAY_TEST_POSTGRES").expect(
        "RUNWAY_TEST_STORE=postgres needs RUNWAY_TEST_POSTGRES (run under scripts/with-postgres)",
    );
    let name = format!(
        "runway_test_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    postgres::Client::connect(&admin, postgres::NoTls)
        .unwrap()
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let url = runway_store::PostgresStore::url_for_database(&admin, &name);
    let store = PostgresStore::open(&url).unwrap();
    Fixture {
        store: Box::new(store),
        dir,
        backend: Backend::Postgres(TestDatabase { admin, name, url }),
    }
}

pub(crate) fn onboard(store: &dyn Store, name: &str) -> runway_store::Service {
    store
        .service_create(
            "alice",
            &NewService {
                name: name.into(),
                owners: vec!["alice".into()],
                environments: vec!["staging".into(), "production".into()],
                team: None,
            },
        )
        .unwrap()
}

pub(crate) fn new_revision(service: &str, env: &str, digest: &str) -> NewRevision {
    NewRevision {
        service: service.into(),
        env: env.into(),
        manifest: json!({ "apiVersion": "runway/v1", "kind": "RunwayService",
                          "metadata": { "name": service }, "spec": {} }),
        artifact: json!({ "image": "registry.example/hello", "digest": digest }),
        env_vars: BTreeMap::from([("LOG_LEVEL".into(), "info".into())]),
        set_vars: Default::default(),
        secret_versions: BTreeMap::from([("DATABASE_URL".into(), 1)]),
    }
}

pub(crate) fn all_new(instances: u32) -> Vec<PlannedRevision> {
    vec![PlannedRevision {
        revision: RevisionRef::New,
        instances,
        weight: 100,
    }]
}

pub(crate) fn only(revision: &str, instances: u32) -> Vec<DesiredRevision> {
    vec![DesiredRevision {
        revision: revision.into(),
        instances,
        weight: 100,
    }]
}

/// Deploys and marks the deployment succeeded.
pub(crate) fn deploy_ok(store: &dyn Store, service: &str, env: &str, digest: &str) -> DeployRecord {
    let record = store
        .record_deploy("alice", &new_revision(service, env, digest), &all_new(1))
        .unwrap();
    let id = record.deployment.id;
    store
        .deployment_transition(
            "rollout",
            id,
            runway_store::DeploymentState::Progressing,
            None,
        )
        .unwrap();
    store
        .deployment_transition(
            "rollout",
            id,
            runway_store::DeploymentState::Succeeded,
            None,
        )
        .unwrap();
    record
}
