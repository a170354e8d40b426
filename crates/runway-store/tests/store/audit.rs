//! The audit log's hash chain: every entry linked to the one before in the transaction that
//! writes it, on either backend and with writers racing; `audit_verify` names the first entry
//! changed or removed below the store; export sinks' cursors.

use std::sync::Arc;

use runway_store::{AuditChain, GENESIS, Store};

use crate::support::{Fixture, deploy_ok, fixture, onboard};

/// Every entry, oldest first.
fn all(store: &dyn Store) -> Vec<runway_store::AuditEntry> {
    store.audit_list(0, 1000).unwrap()
}

#[test]
fn every_entry_links_to_the_one_before_and_the_chain_verifies() {
    let f = fixture();
    let store = f.store.as_ref();
    assert!(store.audit_verify().unwrap().ok, "an empty log verifies");
    onboard(store, "hello");
    deploy_ok(store, "hello", "staging", "sha256:aaaa");
    store.service_decommission("bob", "hello").unwrap();
    let entries = all(store);
    assert!(entries.len() >= 4, "{entries:?}");
    let mut prev = GENESIS.to_owned();
    for entry in &entries {
        assert_eq!(entry.prev_hash.as_deref(), Some(prev.as_str()), "{entry:?}");
        let hash = entry.hash.clone().unwrap();
        assert_eq!(hash, runway_store::audit_hash(&prev, entry));
        assert_eq!(hash.len(), 64);
        prev = hash;
    }
    let verified = store.audit_verify().unwrap();
    assert!(verified.ok, "{verified:?}");
    assert_eq!(verified.entries, entries.len() as u64);
    assert_eq!(verified.head.id, entries.last().unwrap().id);
    assert_eq!(verified.head.hash, prev);
    assert_eq!(verified.first_broken, None);
}

/// Several handles (on PostgreSQL, several connections as several replicas would have)
/// writing at once still make one line: each entry follows exactly one other.
#[test]
fn writers_racing_keep_the_chain_linear() {
    let f = fixture();
    let handles: Vec<Arc<dyn Store>> = (0..4).map(|_| Arc::from(f.reopen())).collect();
    std::thread::scope(|scope| {
        for (i, store) in handles.iter().enumerate() {
            scope.spawn(move || {
                for n in 0..10 {
                    onboard(store.as_ref(), &format!("s{i}-{n}"));
                }
            });
        }
    });
    let entries = all(f.store.as_ref());
    assert_eq!(entries.len(), 40);
    let mut chain = AuditChain::new();
    for entry in &entries {
        chain.push(entry).unwrap();
    }
    let verified = f.store.audit_verify().unwrap();
    assert!(verified.ok, "{verified:?}");
    assert_eq!(verified.entries, 40);
}

fn three_entries(f: &Fixture) -> Vec<runway_store::AuditEntry> {
    for name in ["a", "b", "c"] {
        onboard(f.store.as_ref(), name);
    }
    let entries = all(f.store.as_ref());
    assert_eq!(entries.len(), 3);
    entries
}

#[test]
fn a_row_changed_below_the_store_is_named() {
    for sql in [
        "UPDATE audit SET detail = '{\"forged\":true}' WHERE id = {id}",
        "UPDATE audit SET actor = 'mallory' WHERE id = {id}",
        "UPDATE audit SET at = at + 1 WHERE id = {id}",
    ] {
        let f = fixture();
        let entries = three_entries(&f);
        let id = entries[1].id;
        f.raw_execute(&sql.replace("{id}", &id.to_string()))
            .unwrap();
        let verified = f.store.audit_verify().unwrap();
        assert!(!verified.ok, "{sql}");
        let broken = verified.first_broken.unwrap();
        assert_eq!(broken.id, id, "{sql}: {broken:?}");
        assert!(broken.reason.contains("content"), "{broken:?}");
        assert_eq!(verified.entries, 1);
    }
}

#[test]
fn a_row_changed_with_its_hash_breaks_the_next_link() {
    let f = fixture();
    let entries = three_entries(&f);
    let mut forged = entries[1].clone();
    forged.actor = "mallory".into();
    let hash = runway_store::audit_hash(forged.prev_hash.as_deref().unwrap(), &forged);
    f.raw_execute(&format!(
        "UPDATE audit SET actor = 'mallory', hash = '{hash}' WHERE id = {}",
        forged.id
    ))
    .unwrap();
    let broken = f.store.audit_verify().unwrap().first_broken.unwrap();
    assert_eq!(broken.id, entries[2].id, "{broken:?}");
    assert!(broken.reason.contains("prev_hash"), "{broken:?}");
}

#[test]
fn a_row_removed_below_the_store_is_named() {
    let f = fixture();
    let entries = three_entries(&f);
    f.raw_execute(&format!("DELETE FROM audit WHERE id = {}", entries[1].id))
        .unwrap();
    let broken = f.store.audit_verify().unwrap().first_broken.unwrap();
    assert_eq!(broken.id, entries[2].id, "{broken:?}");
    assert!(
        broken
            .reason
            .contains(&format!("between {} and {}", entries[0].id, entries[2].id)),
        "{broken:?}"
    );

    // The first one, and the last one.
    let f = fixture();
    let entries = three_entries(&f);
    f.raw_execute(&format!("DELETE FROM audit WHERE id = {}", entries[0].id))
        .unwrap();
    let broken = f.store.audit_verify().unwrap().first_broken.unwrap();
    assert_eq!(broken.id, entries[1].id, "{broken:?}");
    assert!(broken.reason.contains("genesis"), "{broken:?}");
    let f = fixture();
    let entries = three_entries(&f);
    f.raw_execute(&format!("DELETE FROM audit WHERE id = {}", entries[2].id))
        .unwrap();
    let verified = f.store.audit_verify().unwrap();
    let broken = verified.first_broken.unwrap();
    assert_eq!(broken.id, entries[1].id, "{broken:?}");
    assert!(
        broken
            .reason
            .contains(&format!("head records entry {}", entries[2].id)),
        "{broken:?}"
    );
    assert_eq!(verified.entries, 2);
}

/// Entries with no hash (written before the chain existed, or by an older replica) are
/// chained, in order, by the next write and by opening the store: the genesis rule.
#[test]
fn entries_written_without_a_hash_are_chained_next() {
    let f = fixture();
    onboard(f.store.as_ref(), "a");
    for n in 0..3 {
        f.raw_execute(&format!(
            "INSERT INTO audit (at, actor, action, target, detail) \
             VALUES (1700000000000, 'old', 'legacy', 'x/{n}', '{{\"n\":{n}}}')"
        ))
        .unwrap();
    }
    let unchained = all(f.store.as_ref());
    assert!(unchained[1..].iter().all(|e| e.hash.is_none()));
    // Opening chains them.
    let reopened = f.reopen();
    let verified = reopened.audit_verify().unwrap();
    assert!(verified.ok, "{verified:?}");
    assert_eq!(verified.entries, 4);
    // And so does a write.
    f.raw_execute(
        "INSERT INTO audit (at, actor, action, target, detail) \
         VALUES (1700000000000, 'old', 'legacy', 'x/9', '{}')",
    )
    .unwrap();
    onboard(f.store.as_ref(), "b");
    let verified = f.store.audit_verify().unwrap();
    assert!(verified.ok, "{verified:?}");
    assert_eq!(verified.entries, 6);
}

#[test]
fn an_export_cursor_moves_forward_only_and_says_what_is_left() {
    let f = fixture();
    let store = f.store.as_ref();
    let entries = three_entries(&f);
    let fresh = store.audit_export_get("siem").unwrap();
    assert_eq!((fresh.cursor, fresh.lag), (0, 3));
    assert!(store.audit_export_list().unwrap().is_empty());

    store
        .audit_export_failed("siem", "503 Service Unavailable")
        .unwrap();
    let failing = store.audit_export_get("siem").unwrap();
    assert_eq!(failing.error.as_deref(), Some("503 Service Unavailable"));
    let since = failing.failing_since.unwrap();
    store
        .audit_export_failed("siem", "connection refused")
        .unwrap();
    let again = store.audit_export_get("siem").unwrap();
    assert_eq!(
        again.failing_since,
        Some(since),
        "since the first failure in a row"
    );

    store.audit_export_ack("siem", entries[1].id).unwrap();
    let acked = store.audit_export_get("siem").unwrap();
    assert_eq!((acked.cursor, acked.lag), (entries[1].id, 1));
    assert_eq!((acked.error, acked.failing_since), (None, None));
    assert!(acked.acked_at.is_some());
    // Never back.
    store.audit_export_ack("siem", entries[0].id).unwrap();
    assert_eq!(
        store.audit_export_get("siem").unwrap().cursor,
        entries[1].id
    );
    // Moving it writes no audit entry.
    assert_eq!(all(store).len(), 3);
    assert_eq!(
        store
            .audit_export_list()
            .unwrap()
            .iter()
            .map(|s| s.sink.as_str())
            .collect::<Vec<_>>(),
        ["siem"]
    );
}
