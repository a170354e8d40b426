//! What an instance's identity token costs the control plane as the instance starts: the
//! first token (a signing key made, sealed and kept in the store), then each one after (an
//! ES256 signature with the key in memory). Prints the figures; asserts nothing about time.
//!
//!     cargo bench -p runway-control --bench identity

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "a bench")]

use std::sync::Arc;
use std::time::Instant;

use runway_control::identity::{IdentityConfig, Issuer};
use runway_secrets::{MasterKey, Sealer};
use runway_store::{SqliteStore, Store};

const TOKENS: u32 = 5_000;

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("runway.db")).unwrap());
    let issuer = Issuer::new(
        "https://runway.example.com:7443".to_owned(),
        &IdentityConfig::default(),
        store,
        Arc::new(Sealer::new(&MasterKey::generate().unwrap())),
    );
    rt.block_on(async {
        let started = Instant::now();
        issuer
            .issue(
                "hello",
                "production",
                "hello-production-00001",
                Some("openbao"),
            )
            .await
            .unwrap();
        let first = started.elapsed();
        let started = Instant::now();
        let mut bytes = 0;
        for n in 0..TOKENS {
            let revision = format!("hello-production-{n:05}");
            bytes += issuer
                .issue("hello", "production", &revision, Some("openbao"))
                .await
                .unwrap()
                .len();
        }
        let each = started.elapsed() / TOKENS;
        println!(
            "identity token: the first {:.2} ms (a key made, sealed, stored); then {:.1} µs each \
             ({TOKENS} tokens, {} bytes each)",
            first.as_secs_f64() * 1000.0,
            each.as_secs_f64() * 1e6,
            bytes / TOKENS as usize
        );
    });
}
