//! Preview environments: a service of their own (`<name>--<parent>`) that a deploy creates or
//! extends, at most so many per parent, gone with their parent.

use std::time::Duration;

use runway_store::{NewPreview, ServiceUpdate, Store, StoreError, Timestamp};

use crate::support::{deploy_ok, fixture, onboard};

fn new(parent: &str, name: &str, ttl: Duration, max: u32) -> NewPreview {
    NewPreview {
        parent: parent.to_owned(),
        name: name.to_owned(),
        base_env: "staging".to_owned(),
        origin: serde_json::json!({"merge_request": "12"}),
        ttl,
        max_per_parent: max,
    }
}

#[test]
fn a_preview_is_created_extended_capped_and_goes_with_its_parent() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "app");
    store
        .service_update(
            "alice",
            "app",
            &ServiceUpdate {
                allow_processes: Some(true),
                ..ServiceUpdate::default()
            },
        )
        .unwrap();
    let hour = Duration::from_secs(3600);

    let before = Timestamp::now();
    let (created, fresh) = store
        .preview_put("ci", &new("app", "mr-12", hour, 2))
        .unwrap();
    assert!(fresh);
    assert_eq!(
        (
            created.service.as_str(),
            created.parent.as_str(),
            created.name.as_str()
        ),
        ("mr-12--app", "app", "mr-12")
    );
    assert!(created.expires_at.unix_millis() >= before.unix_millis() + 3_600_000);
    // A service of its own, its parent's owners and leave, in `preview` alone.
    let service = store.service_get("mr-12--app").unwrap();
    assert_eq!(service.environments, ["preview"]);
    assert_eq!(service.owners, ["alice"]);
    assert!(service.allow_processes);
    assert_ne!(service.id, store.service_get("app").unwrap().id);

    // A second push extends it and takes the new origin; no second service.
    let mut again = new("app", "mr-12", 2 * hour, 2);
    again.origin = serde_json::json!({"merge_request": "12", "pipeline": "78"});
    let (extended, fresh) = store.preview_put("ci", &again).unwrap();
    assert!(!fresh);
    assert!(extended.expires_at > created.expires_at);
    assert_eq!(extended.origin["pipeline"], "78");
    assert_eq!(extended.created_at, created.created_at);

    // The cap counts previews per parent; a refusal leaves nothing behind.
    store
        .preview_put("ci", &new("app", "mr-13", hour, 2))
        .unwrap();
    let refused = store
        .preview_put("ci", &new("app", "mr-14", hour, 2))
        .unwrap_err();
    assert!(
        matches!(&refused, StoreError::Conflict(m) if m.contains("app has 2 previews")),
        "{refused}"
    );
    assert!(store.service_get("mr-14--app").is_err());
    let listed: Vec<String> = store
        .preview_list(Some("app"))
        .unwrap()
        .into_iter()
        .map(|p| p.service)
        .collect();
    assert_eq!(listed, ["mr-12--app", "mr-13--app"]);
    assert!(
        store
            .preview_put("ci", &new("nobody", "x", hour, 2))
            .is_err(),
        "a preview of no service"
    );

    // Stopping one is decommissioning its service; the parent's decommission takes the rest,
    // with their revisions.
    deploy_ok(store, "mr-13--app", "preview", "sha256:13");
    store.service_decommission("ci", "mr-12--app").unwrap();
    assert_eq!(store.preview_list(None).unwrap().len(), 1);
    store.service_decommission("alice", "app").unwrap();
    assert!(store.preview_list(None).unwrap().is_empty());
    assert!(store.service_get("mr-13--app").is_err());
    assert!(store.service_list().unwrap().is_empty());
    let actions: Vec<(String, String)> = store
        .audit_list(0, 100)
        .unwrap()
        .into_iter()
        .map(|e| (e.action, e.target))
        .filter(|(a, _)| a.starts_with("preview") || a == "service.decommission")
        .collect();
    assert_eq!(
        actions,
        [
            ("preview.create".to_owned(), "service/mr-12--app".to_owned()),
            ("preview.create".to_owned(), "service/mr-13--app".to_owned()),
            (
                "service.decommission".to_owned(),
                "service/mr-12--app".to_owned()
            ),
            (
                "service.decommission".to_owned(),
                "service/mr-13--app".to_owned()
            ),
            ("service.decommission".to_owned(), "service/app".to_owned()),
        ]
    );
    f.check_integrity();
}
