//! The control plane's election over a real store: one leader at a time, a leader that stops
//! renewing stops acting by its own clock, and one that shuts down hands over at once.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::Duration;

use runway_control::leader::{Election, LEASE, Leadership};
use runway_store::{SqliteStore, Store};
use tokio::sync::watch;

fn store() -> (tempfile::TempDir, Arc<dyn Store>) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("runway.db")).unwrap();
    (dir, Arc::new(store))
}

fn following() -> Leadership {
    Leadership::Following { leader: None }
}

#[tokio::test]
async fn one_leads_and_a_paused_leader_stops_acting_before_another_takes_over() {
    let (_dir, store) = store();
    let ttl = Duration::from_millis(500);
    let a = Election::new(Arc::clone(&store), "replica-a", ttl);
    let b = Election::new(Arc::clone(&store), "replica-b", ttl);

    let led = a.attempt(&following()).await;
    assert!(led.may_act(), "{led:?}");
    assert_eq!(led.fence().unwrap().token, 1);
    let followed = b.attempt(&following()).await;
    assert_eq!(
        followed,
        Leadership::Following {
            leader: Some("replica-a".into())
        }
    );
    assert!(!followed.may_act());

    // A renews: it leads on with the same token.
    let renewed = a.attempt(&led).await;
    assert_eq!(renewed.fence(), led.fence());

    // A is "paused" past its lease: by its own clock it stops acting before the lease has
    // run out in the store (its margin), so before B can take over.
    tokio::time::sleep(ttl - ttl / 5 + Duration::from_millis(20)).await;
    assert!(!renewed.may_act(), "a paused leader may still act");
    assert_eq!(
        b.attempt(&followed).await,
        Leadership::Following {
            leader: Some("replica-a".into())
        },
        "taken over before the lease ran out"
    );
    tokio::time::sleep(ttl / 5 + Duration::from_millis(50)).await;
    let took = b.attempt(&followed).await;
    assert!(took.may_act(), "{took:?}");
    assert_eq!(took.fence().unwrap().token, 2);
    // A, running again, learns it follows; its fenced writes are refused meanwhile.
    let fenced = Arc::clone(&store).fenced(runway_store::FenceCell::new(renewed.fence().cloned()));
    assert!(fenced.token_list().is_ok());
    assert!(matches!(
        fenced.service_decommission("replica-a", "nothing"),
        Err(runway_store::StoreError::Fenced { .. })
    ));
    assert_eq!(
        a.attempt(&renewed).await,
        Leadership::Following {
            leader: Some("replica-b".into())
        }
    );
}

#[tokio::test]
async fn a_leader_shutting_down_hands_over_at_once() {
    let (_dir, store) = store();
    let ttl = Duration::from_secs(30);
    let (sender, mut watched) = watch::channel(following());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(Election::new(Arc::clone(&store), "replica-a", ttl).run(
        sender,
        async move {
            let _ = stopped.await;
        },
    ));
    watched.wait_for(Leadership::may_act).await.unwrap();
    stop.send(()).unwrap();
    running.await.unwrap();
    assert_eq!(*watched.borrow(), following());
    // Not 30 s later: now.
    let b = Election::new(Arc::clone(&store), "replica-b", ttl);
    let took = b.attempt(&following()).await;
    assert_eq!(took.fence().unwrap().token, 2, "{took:?}");
    assert_eq!(store.lease_get(LEASE).unwrap().unwrap().holder, "replica-b");
}
