//! What is PostgreSQL's own: its migrations, run once however many replicas start together,
//! and a database from a newer Runway refused untouched. Runs on the PostgreSQL pass.

use std::sync::Arc;

use runway_store::{POSTGRES_SCHEMA_VERSION, PostgresStore, StoreError};

use crate::support::{fixture, on_postgres, onboard};

#[test]
fn replicas_opening_together_migrate_once_and_a_newer_schema_is_refused() {
    if !on_postgres() {
        return;
    }
    let f = fixture();
    let url = Arc::new(f.postgres_url().to_owned());
    // Five handles at once on the migrated database: each finds it done.
    let handles: Vec<_> = (0..5)
        .map(|_| {
            let url = Arc::clone(&url);
            std::thread::spawn(move || PostgresStore::open(&url).map(|s| s.schema_version()))
        })
        .collect();
    for handle in handles {
        assert_eq!(
            handle.join().unwrap().unwrap().unwrap(),
            POSTGRES_SCHEMA_VERSION
        );
    }
    onboard(&*f.store, "hello");

    f.raw_execute("UPDATE runway_schema SET version = 99")
        .unwrap();
    let refused = PostgresStore::open(&url).unwrap_err();
    assert!(
        matches!(refused, StoreError::TooNew { found: 99, supported } if supported == POSTGRES_SCHEMA_VERSION),
        "{refused}"
    );
    f.raw_execute(&format!(
        "UPDATE runway_schema SET version = {POSTGRES_SCHEMA_VERSION}"
    ))
    .unwrap();
    assert_eq!(f.store.service_get("hello").unwrap().name, "hello");
}

#[test]
fn an_unreachable_database_is_unavailable_and_its_password_is_not_shown() {
    if !on_postgres() {
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = std::time::Instant::now();
    let error = PostgresStore::open(&format!(
        "postgres://runway:s3cret@127.0.0.1:{port}/runway?connect_timeout=1"
    ))
    .unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, StoreError::Unavailable(_)), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}
