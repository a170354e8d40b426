//! The audit log's chain through the API: each entry shows its hashes, `GET /v1/audit/verify`
//! says whether the chain holds and names the first entry changed below the store, and the
//! export's sinks and figures show in `GET /v1/audit/export` and `/metrics`.

use runway_store::Store;

use crate::support::start;

#[tokio::test]
async fn the_chain_shows_and_verifies_and_a_changed_entry_is_named() {
    let server = start().await;
    server.onboard("hello").await;
    server.onboard("world").await;
    let entries = server.admin("GET", "/v1/audit", None, 200).await;
    let entries = entries.as_array().unwrap();
    assert!(entries.len() >= 2, "{entries:?}");
    assert_eq!(entries[0]["prev_hash"], runway_store::GENESIS);
    for pair in entries.windows(2) {
        assert_eq!(pair[1]["prev_hash"], pair[0]["hash"], "{pair:?}");
    }
    let last = entries.last().unwrap();

    let verified = server.admin("GET", "/v1/audit/verify", None, 200).await;
    assert_eq!(verified["ok"], true, "{verified}");
    assert_eq!(verified["entries"], entries.len());
    assert_eq!(verified["head"]["id"], last["id"]);
    assert_eq!(verified["head"]["hash"], last["hash"]);
    assert!(verified["first_broken"].is_null(), "{verified}");
    assert_eq!(verified["sinks"], serde_json::json!([]));

    // A sink's cursor, as the exporter records it.
    let first = entries[0]["id"].as_i64().unwrap();
    server.store.audit_export_ack("siem", first).unwrap();
    let sinks = server.admin("GET", "/v1/audit/export", None, 200).await;
    assert_eq!(sinks[0]["name"], "siem", "{sinks}");
    assert_eq!(sinks[0]["cursor"], first);
    assert_eq!(sinks[0]["lag"], entries.len() - 1);

    // Changed below the store.
    let path = server.store.path().to_owned();
    let target = entries[1]["id"].as_i64().unwrap();
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("UPDATE audit SET actor = 'mallory' WHERE id = ?1", [target])
        .unwrap();
    let verified = server.admin("GET", "/v1/audit/verify", None, 200).await;
    assert_eq!(verified["ok"], false, "{verified}");
    assert_eq!(verified["first_broken"]["id"], target, "{verified}");
    assert!(
        verified["first_broken"]["reason"]
            .as_str()
            .unwrap()
            .contains("changed"),
        "{verified}"
    );
}
