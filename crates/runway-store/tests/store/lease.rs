//! Leases and fencing, on either backend: one holder at a time, a token that grows when the
//! lease changes hands, and a fenced handle whose writes stop the moment another holds it.

use std::sync::Arc;
use std::time::Duration;

use runway_store::{Fence, FenceCell, Store, StoreError};

use crate::support::{fixture, onboard};

const LEADER: &str = "control-plane";

#[test]
fn one_holder_at_a_time_and_a_token_that_grows_with_each_change_of_hands() {
    let f = fixture();
    let store: Arc<dyn Store> = Arc::from(f.store);
    assert_eq!(store.lease_get(LEADER).unwrap(), None);

    let a = store
        .lease_acquire(LEADER, "replica-a", Duration::from_millis(300))
        .unwrap()
        .unwrap();
    assert_eq!((a.holder.as_str(), a.token), ("replica-a", 1));
    // Another waits while it is held.
    assert_eq!(
        store
            .lease_acquire(LEADER, "replica-b", Duration::from_secs(10))
            .unwrap(),
        None
    );
    // A renewal keeps the token and moves the expiry on.
    std::thread::sleep(Duration::from_millis(20));
    let renewed = store
        .lease_acquire(LEADER, "replica-a", Duration::from_millis(300))
        .unwrap()
        .unwrap();
    assert_eq!(renewed.token, 1);
    assert!(renewed.expires_at > a.expires_at);

    let fence_a = FenceCell::new(Some(Fence {
        lease: LEADER.into(),
        holder: "replica-a".into(),
        token: 1,
    }));
    let fenced_a = Arc::clone(&store).fenced(fence_a.clone());
    onboard(fenced_a.as_ref(), "hello");

    // Expired: another takes it, with a new token; the first's writes are refused whole.
    std::thread::sleep(Duration::from_millis(400));
    let b = store
        .lease_acquire(LEADER, "replica-b", Duration::from_secs(10))
        .unwrap()
        .unwrap();
    assert_eq!((b.holder.as_str(), b.token), ("replica-b", 2));
    let audit_before = store.audit_list(0, 1000).unwrap().len();
    let refused = fenced_a
        .service_update(
            "alice",
            "hello",
            &runway_store::ServiceUpdate {
                owners: Some(vec!["mallory".into()]),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(
        matches!(&refused, StoreError::Fenced { lease, token: 1 } if lease == LEADER),
        "{refused}"
    );
    assert_eq!(store.service_get("hello").unwrap().owners, ["alice"]);
    assert_eq!(store.audit_list(0, 1000).unwrap().len(), audit_before);
    // Its reads still work.
    assert_eq!(fenced_a.service_get("hello").unwrap().name, "hello");
    // The new holder's handle writes.
    let fenced_b = Arc::clone(&store).fenced(FenceCell::new(Some(Fence {
        lease: LEADER.into(),
        holder: "replica-b".into(),
        token: 2,
    })));
    onboard(fenced_b.as_ref(), "api");
    // A handle whose cell is emptied (its replica stepped down) writes nothing at all.
    fence_a.set(None);
    assert!(matches!(
        fenced_a.service_decommission("alice", "api"),
        Err(StoreError::NotLeading)
    ));
    assert!(store.service_get("api").is_ok());

    // Given up, it is taken at once; a stale release changes nothing.
    store.lease_release(LEADER, "replica-b", 1).unwrap();
    assert_eq!(
        store.lease_get(LEADER).unwrap().unwrap().holder,
        "replica-b"
    );
    store.lease_release(LEADER, "replica-b", 2).unwrap();
    let again = store
        .lease_acquire(LEADER, "replica-a", Duration::from_secs(10))
        .unwrap()
        .unwrap();
    assert_eq!(again.token, 3);

    let actions: Vec<String> = store
        .audit_list(0, 1000)
        .unwrap()
        .into_iter()
        .filter(|e| e.action.starts_with("lease."))
        .map(|e| format!("{} {}", e.action, e.actor))
        .collect();
    assert_eq!(
        actions,
        [
            "lease.acquire replica-a",
            "lease.acquire replica-b",
            "lease.release replica-b",
            "lease.acquire replica-a"
        ]
    );
}

#[test]
fn replicas_racing_for_a_free_lease_get_it_once() {
    let f = fixture();
    let handles: Vec<_> = (0..6)
        .map(|n| {
            let store = f.reopen();
            std::thread::spawn(move || {
                store
                    .lease_acquire(LEADER, &format!("replica-{n}"), Duration::from_secs(30))
                    .unwrap()
            })
        })
        .collect();
    let winners: Vec<_> = handles
        .into_iter()
        .filter_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(winners[0].token, 1);
    assert_eq!(
        f.store.lease_get(LEADER).unwrap().unwrap().holder,
        winners[0].holder
    );
}
