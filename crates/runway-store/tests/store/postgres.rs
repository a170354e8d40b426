//! What is PostgreSQL's own: its migrations, run once however many replicas start together,
//! a database from a newer Runway refused untouched, and TLS to it, whose certificate is
//! checked. Runs on the PostgreSQL pass.

use std::sync::Arc;

use runway_store::{DatabaseTrust, POSTGRES_SCHEMA_VERSION, PostgresStore, Store, StoreError};

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

/// Over TLS (`sslmode=require`, the test server's certificate from `RUNWAY_TEST_POSTGRES_CA`),
/// the store works, on an encrypted connection; a server whose certificate comes from an
/// authority not trusted, or names another host, is refused with what to do, and nothing
/// is sent to it.
#[test]
fn tls_to_the_database_checks_its_certificate() {
    if !on_postgres() {
        return;
    }
    let ca = std::fs::read(std::env::var("RUNWAY_TEST_POSTGRES_CA").expect(
        "RUNWAY_TEST_POSTGRES_CA: the test server's authority (run under scripts/with-postgres)",
    ))
    .unwrap();
    let f = fixture();
    let url = f
        .postgres_url()
        .replace("sslmode=disable", "sslmode=require");
    assert!(url.contains("sslmode=require"), "{url}");

    let store = PostgresStore::open_trusting(&url, &DatabaseTrust::Pem(ca.clone())).unwrap();
    onboard(&store, "hello");
    assert_eq!(store.service_get("hello").unwrap().name, "hello");
    let encrypted: i64 = postgres::Client::connect(f.postgres_url(), postgres::NoTls)
        .unwrap()
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
             WHERE ssl AND datname = current_database()",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(encrypted >= 1, "no TLS connection to the test database");

    let refused = |url: &str, trust: &DatabaseTrust| {
        let error = PostgresStore::open_trusting(url, trust).unwrap_err();
        let text = error.to_string();
        assert!(matches!(error, StoreError::Unavailable(_)), "{text}");
        assert!(text.contains("store.ca_file"), "{text}");
        text
    };
    // The system's roots do not hold the test authority.
    let text = refused(&url, &DatabaseTrust::System);
    assert!(text.to_lowercase().contains("certificate"), "{text}");
    // The certificate names 127.0.0.1 and localhost, not this host (at the same address).
    let renamed = format!(
        "{}&hostaddr=127.0.0.1",
        url.replace("127.0.0.1", "db.invalid")
    );
    let text = refused(&renamed, &DatabaseTrust::Pem(ca));
    assert!(text.to_lowercase().contains("certificate"), "{text}");

    let error =
        PostgresStore::open_trusting(&url, &DatabaseTrust::Pem(b"not pem".to_vec())).unwrap_err();
    assert!(matches!(error, StoreError::Invalid(_)), "{error}");
}
