//! Every method of the store, through `dyn Store`.

use std::collections::BTreeMap;
use std::sync::Arc;

use runway_store::{
    DeploymentKind, DeploymentState, DesiredRevision, NewService, NewToken, PlannedRevision,
    RevisionRef, ServiceUpdate, Store, StoreError, Timestamp, TokenScope,
};
use serde_json::json;

use crate::support::{all_new, deploy_ok, fixture, new_revision, onboard, only};

fn actions(store: &dyn Store) -> Vec<String> {
    store
        .audit_list(0, 1000)
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect()
}

#[test]
fn the_trait_is_object_safe_and_shareable() {
    let f = fixture();
    let store: Arc<dyn Store> = Arc::from(f.store);
    let other = Arc::clone(&store);
    std::thread::spawn(move || onboard(other.as_ref(), "hello"))
        .join()
        .unwrap();
    assert_eq!(store.service_get("hello").unwrap().name, "hello");
}

#[test]
fn services_create_get_list_and_refuse_duplicates() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    onboard(store, "api");
    let hello = store.service_get("hello").unwrap();
    assert_eq!(hello.environments, ["staging", "production"]);
    assert_eq!(hello.owners, ["alice"]);
    assert_eq!(hello.created_by, "alice");
    let names: Vec<_> = store
        .service_list()
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["api", "hello"]);

    let again = store.service_create(
        "bob",
        &NewService {
            name: "hello".into(),
            owners: vec![],
            environments: vec!["dev".into()],
            team: None,
        },
    );
    let err = again.unwrap_err();
    assert!(matches!(
        err,
        StoreError::AlreadyExists {
            kind: "service",
            ..
        }
    ));
    assert_eq!(err.to_string(), "service \"hello\" already exists");

    let missing = store.service_get("nope").unwrap_err();
    assert_eq!(missing.to_string(), "service \"nope\" not found");

    for bad in [
        NewService {
            name: "x".into(),
            owners: vec![],
            environments: vec![],
            team: None,
        },
        NewService {
            name: "x".into(),
            owners: vec![],
            environments: vec!["a".into(), "a".into()],
            team: None,
        },
        NewService {
            name: String::new(),
            owners: vec![],
            environments: vec!["a".into()],
            team: None,
        },
    ] {
        assert!(matches!(
            store.service_create("bob", &bad),
            Err(StoreError::Invalid(_))
        ));
    }
    assert_eq!(actions(store), ["service.create", "service.create"]);
}

#[test]
fn deploy_allocates_numbers_per_service_and_env() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    onboard(store, "api");
    let names: Vec<_> = [
        ("hello", "production"),
        ("hello", "production"),
        ("hello", "staging"),
        ("api", "production"),
        ("hello", "production"),
    ]
    .into_iter()
    .map(|(s, e)| deploy_ok(store, s, e, "sha256:aa").revision.name)
    .collect();
    assert_eq!(
        names,
        [
            "hello-production-00001",
            "hello-production-00002",
            "hello-staging-00001",
            "api-production-00001",
            "hello-production-00003",
        ]
    );
    let numbers: Vec<_> = store
        .revision_list("hello", "production")
        .unwrap()
        .into_iter()
        .map(|r| r.number)
        .collect();
    assert_eq!(numbers, [1, 2, 3]);
}

#[test]
fn record_deploy_writes_everything_together() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let first = deploy_ok(store, "hello", "production", "sha256:11");
    assert_eq!(first.deployment.from_revision, None);

    let new = new_revision("hello", "production", "sha256:22");
    let planned = vec![
        PlannedRevision {
            revision: RevisionRef::Named(first.revision.name.clone()),
            instances: 2,
            weight: 100,
        },
        PlannedRevision {
            revision: RevisionRef::New,
            instances: 2,
            weight: 0,
        },
    ];
    let second = store.record_deploy("bob", &new, &planned).unwrap();
    let revision = &second.revision;
    assert_eq!(revision.number, 2);
    assert_eq!(revision.name, "hello-production-00002");
    assert_eq!(revision.artifact, new.artifact);
    assert_eq!(revision.manifest, new.manifest);
    assert_eq!(revision.env_vars, new.env_vars);
    assert_eq!(revision.secret_versions, new.secret_versions);
    assert_eq!(revision.created_by, "bob");
    assert_eq!(store.revision_get(&revision.name).unwrap(), *revision);

    let deployment = &second.deployment;
    assert_eq!(deployment.kind, DeploymentKind::Deploy);
    assert_eq!(deployment.state, DeploymentState::Pending);
    assert_eq!(
        deployment.from_revision.as_deref(),
        Some("hello-production-00001")
    );
    assert_eq!(deployment.to_revision, "hello-production-00002");
    assert_eq!(store.deployment_get(deployment.id).unwrap(), *deployment);
    let events = store.deployment_events(deployment.id).unwrap();
    assert_eq!(events.len(), 1);
    assert!(events[0].message.contains("hello-production-00002"));

    let desired = store.desired_get("hello", "production").unwrap().unwrap();
    assert_eq!(desired, second.desired);
    assert_eq!(desired.generation, 2);
    assert_eq!(
        desired.revisions,
        [
            DesiredRevision {
                revision: "hello-production-00001".into(),
                instances: 2,
                weight: 100
            },
            DesiredRevision {
                revision: "hello-production-00002".into(),
                instances: 2,
                weight: 0
            },
        ]
    );

    let audit = store.audit_list(0, 100).unwrap();
    let last = audit.last().unwrap();
    assert_eq!(last.action, "deploy");
    assert_eq!(last.actor, "bob");
    assert_eq!(last.target, "service/hello/production");
    assert_eq!(last.detail["revision"], "hello-production-00002");
    assert_eq!(last.detail["deployment"], deployment.id);
    // The tail is the same entries' end, oldest first.
    let tail = store.audit_tail(2).unwrap();
    let ids: Vec<i64> = tail.iter().map(|e| e.id).collect();
    let end: Vec<i64> = audit[audit.len() - 2..].iter().map(|e| e.id).collect();
    assert_eq!(ids, end);
    assert_eq!(store.audit_tail(1000).unwrap().len(), audit.len());
}

#[test]
fn a_failed_deploy_leaves_nothing_behind() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let before = store.audit_list(0, 100).unwrap();
    // The desired state names a revision that does not exist: refused after the revision
    // was inserted, so the transaction must roll it back.
    let planned = vec![
        PlannedRevision {
            revision: RevisionRef::New,
            instances: 1,
            weight: 1,
        },
        PlannedRevision {
            revision: RevisionRef::Named("hello-production-00042".into()),
            instances: 1,
            weight: 1,
        },
    ];
    let err = store
        .record_deploy("bob", &new_revision("hello", "production", "d"), &planned)
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NotFound {
                kind: "revision",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        store
            .revision_list("hello", "production")
            .unwrap()
            .is_empty()
    );
    assert!(store.deployment_list("hello", None, 10).unwrap().is_empty());
    assert_eq!(store.desired_get("hello", "production").unwrap(), None);
    assert_eq!(store.audit_list(0, 100).unwrap(), before);
    // The number was not used up.
    let ok = store
        .record_deploy(
            "bob",
            &new_revision("hello", "production", "d"),
            &all_new(1),
        )
        .unwrap();
    assert_eq!(ok.revision.number, 1);
}

#[test]
fn deploy_checks_its_inputs() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    onboard(store, "api");
    let unknown = store
        .record_deploy("bob", &new_revision("nope", "production", "d"), &all_new(1))
        .unwrap_err();
    assert!(matches!(
        unknown,
        StoreError::NotFound {
            kind: "service",
            ..
        }
    ));
    let env = store
        .record_deploy("bob", &new_revision("hello", "dev", "d"), &all_new(1))
        .unwrap_err();
    assert_eq!(env.to_string(), "environment \"hello/dev\" not found");
    let no_new = store
        .record_deploy("bob", &new_revision("hello", "production", "d"), &[])
        .unwrap_err();
    assert!(matches!(no_new, StoreError::Invalid(_)));
    let other = deploy_ok(store, "api", "production", "d");
    let foreign = vec![
        PlannedRevision {
            revision: RevisionRef::New,
            instances: 1,
            weight: 1,
        },
        PlannedRevision {
            revision: RevisionRef::Named(other.revision.name),
            instances: 1,
            weight: 1,
        },
    ];
    let err = store
        .record_deploy("bob", &new_revision("hello", "production", "d"), &foreign)
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err}");
}

#[test]
fn only_one_deployment_in_flight() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let first = store
        .record_deploy(
            "bob",
            &new_revision("hello", "production", "a"),
            &all_new(1),
        )
        .unwrap();
    let err = store
        .record_deploy(
            "bob",
            &new_revision("hello", "production", "b"),
            &all_new(1),
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err}");
    assert!(err.to_string().contains("still pending"), "{err}");
    // Another environment is free.
    store
        .record_deploy("bob", &new_revision("hello", "staging", "b"), &all_new(1))
        .unwrap();
    store
        .deployment_transition(
            "bob",
            first.deployment.id,
            DeploymentState::Failed,
            Some("probe"),
        )
        .unwrap();
    let next = store
        .record_deploy(
            "bob",
            &new_revision("hello", "production", "b"),
            &all_new(1),
        )
        .unwrap();
    assert_eq!(next.revision.number, 2);
}

#[test]
fn the_state_machine_is_enforced() {
    use DeploymentState::*;
    let all = [Pending, Progressing, Succeeded, Failed, RolledBack];
    let allowed = [
        (Pending, Progressing),
        (Pending, Failed),
        (Progressing, Succeeded),
        (Progressing, Failed),
        (Progressing, RolledBack),
    ];
    for from in all {
        for to in all {
            assert_eq!(
                from.can_become(to),
                allowed.contains(&(from, to)),
                "{from} → {to}"
            );
        }
        if from.is_terminal() {
            assert!(all.iter().all(|to| !from.can_become(*to)));
        }
    }

    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let record = store
        .record_deploy(
            "bob",
            &new_revision("hello", "production", "a"),
            &all_new(1),
        )
        .unwrap();
    let id = record.deployment.id;
    let err = store
        .deployment_transition("bob", id, Succeeded, None)
        .unwrap_err();
    assert!(matches!(
        err,
        StoreError::InvalidTransition {
            from: Pending,
            to: Succeeded
        }
    ));
    assert_eq!(
        err.to_string(),
        "a deployment cannot go from pending to succeeded"
    );
    let progressing = store
        .deployment_transition("rollout", id, Progressing, None)
        .unwrap();
    assert_eq!(progressing.state, Progressing);
    assert!(progressing.updated_at >= record.deployment.updated_at);
    let rolled = store
        .deployment_transition("rollout", id, RolledBack, Some("error rate 12% > 1%"))
        .unwrap();
    assert_eq!(rolled.state, RolledBack);
    assert_eq!(rolled.reason.as_deref(), Some("error rate 12% > 1%"));
    for to in all {
        assert!(matches!(
            store.deployment_transition("bob", id, to, None),
            Err(StoreError::InvalidTransition {
                from: RolledBack,
                ..
            })
        ));
    }
    assert_eq!(store.deployment_get(id).unwrap(), rolled);
    let events: Vec<_> = store
        .deployment_events(id)
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert_eq!(events.len(), 3);
    assert_eq!(events[1], "pending → progressing");
    assert_eq!(events[2], "progressing → rolled_back: error rate 12% > 1%");
    assert!(matches!(
        store.deployment_transition("bob", 999, Failed, None),
        Err(StoreError::NotFound {
            kind: "deployment",
            ..
        })
    ));
    let audited = actions(store);
    assert_eq!(
        audited
            .iter()
            .filter(|a| *a == "deployment.transition")
            .count(),
        2
    );
}

#[test]
fn events_and_listing_deployments() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let a = deploy_ok(store, "hello", "production", "a");
    let b = deploy_ok(store, "hello", "staging", "b");
    let c = deploy_ok(store, "hello", "production", "c");
    let ids = |env, limit| -> Vec<i64> {
        store
            .deployment_list("hello", env, limit)
            .unwrap()
            .into_iter()
            .map(|d| d.id)
            .collect()
    };
    assert_eq!(
        ids(None, 10),
        [c.deployment.id, b.deployment.id, a.deployment.id]
    );
    assert_eq!(
        ids(Some("production"), 10),
        [c.deployment.id, a.deployment.id]
    );
    assert_eq!(ids(Some("production"), 1), [c.deployment.id]);
    let event = store
        .deployment_add_event("rollout", a.deployment.id, "3 of 3 instances ready")
        .unwrap();
    assert_eq!(event.deployment_id, a.deployment.id);
    let events = store.deployment_events(a.deployment.id).unwrap();
    assert_eq!(events.last().unwrap(), &event);
    assert!(matches!(
        store.deployment_add_event("rollout", 999, "x"),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.deployment_events(999),
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(actions(store).last().unwrap(), "deployment.event");

    // The same event again is counted on the last one, with no new row or audit entry; a
    // different one in between starts a new count.
    let audited = actions(store).len();
    let say = |message: &str| {
        store
            .deployment_add_event("rollout", a.deployment.id, message)
            .unwrap()
    };
    let failing = "cannot start an instance of a-00001: no entrypoint";
    say(failing);
    say(failing);
    let third = say(failing);
    assert_eq!(third.message, format!("{failing} (×3)"));
    say("instance x started");
    say(failing);
    let messages: Vec<String> = store
        .deployment_events(a.deployment.id)
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert_eq!(
        messages[messages.len() - 4..],
        [
            "3 of 3 instances ready".to_owned(),
            format!("{failing} (×3)"),
            "instance x started".to_owned(),
            failing.to_owned(),
        ]
    );
    assert_eq!(actions(store).len(), audited + 3);
}

#[test]
fn revisions_are_immutable() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let record = deploy_ok(store, "hello", "production", "sha256:aa");
    // Nothing in the API changes a revision; below it, SQL refuses too.
    let err = f
        .raw_execute(&format!(
            "UPDATE revisions SET artifact = '{{}}' WHERE name = '{}'",
            record.revision.name
        ))
        .unwrap_err();
    assert!(err.contains("revisions are immutable"), "{err}");
    assert_eq!(
        store.revision_get(&record.revision.name).unwrap(),
        record.revision
    );
}

#[test]
fn rollback_moves_traffic_back_without_a_new_revision() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let one = deploy_ok(store, "hello", "production", "a");
    let two = store
        .record_deploy(
            "bob",
            &new_revision("hello", "production", "b"),
            &all_new(3),
        )
        .unwrap();
    store
        .deployment_transition(
            "rollout",
            two.deployment.id,
            DeploymentState::Progressing,
            None,
        )
        .unwrap();

    let back = store
        .record_rollback(
            "carol",
            "hello",
            "production",
            &one.revision.name,
            &only(&one.revision.name, 3),
        )
        .unwrap();
    assert_eq!(back.revision, one.revision);
    assert_eq!(back.deployment.kind, DeploymentKind::Rollback);
    assert_eq!(back.deployment.state, DeploymentState::Pending);
    assert_eq!(
        back.deployment.from_revision.as_deref(),
        Some(two.revision.name.as_str())
    );
    assert_eq!(back.deployment.to_revision, one.revision.name);
    assert_eq!(back.desired.revisions, only(&one.revision.name, 3));
    assert_eq!(store.revision_list("hello", "production").unwrap().len(), 2);
    // The deploy in flight was superseded.
    let superseded = store.deployment_get(two.deployment.id).unwrap();
    assert_eq!(superseded.state, DeploymentState::Failed);
    assert_eq!(
        superseded.reason,
        Some(format!("superseded by rollback {}", back.deployment.id))
    );
    assert_eq!(actions(store).last().unwrap(), "rollback");

    // Refusals: foreign revision, desired state without the target.
    deploy_ok(store, "hello", "staging", "s");
    assert!(matches!(
        store.record_rollback(
            "carol",
            "hello",
            "production",
            "hello-staging-00001",
            &only("hello-staging-00001", 1)
        ),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.record_rollback(
            "carol",
            "hello",
            "production",
            &one.revision.name,
            &only(&two.revision.name, 1)
        ),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.record_rollback("carol", "hello", "production", "nope", &only("nope", 1)),
        Err(StoreError::NotFound { .. })
    ));
}

#[test]
fn promote_copies_a_revision_to_another_environment() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    deploy_ok(store, "hello", "production", "old");
    deploy_ok(store, "hello", "staging", "x");
    let staged = deploy_ok(store, "hello", "staging", "sha256:beef");
    assert_eq!(staged.revision.secret_versions["DATABASE_URL"], 1);

    // Production has no DATABASE_URL (staging's version 1 is staging's): refused, by name.
    let set = |env: &str, version: u32| {
        store
            .secret_set(
                "alice",
                "hello",
                env,
                "DATABASE_URL",
                version,
                b"n",
                b"c",
                None,
            )
            .unwrap()
    };
    let missing = |store: &dyn Store| {
        let refused = store
            .record_promote(
                "carol",
                &staged.revision.name,
                "production",
                &all_new(2),
                None,
            )
            .unwrap_err();
        assert!(matches!(refused, StoreError::Invalid(_)), "{refused}");
        let message = refused.to_string();
        assert!(message.contains("DATABASE_URL"), "{message}");
        assert!(message.contains("production"), "{message}");
        assert_eq!(store.revision_list("hello", "production").unwrap().len(), 1);
    };
    missing(store);
    // Set, then unset: still missing.
    set("production", 1);
    store
        .secret_unset("alice", "hello", "production", "DATABASE_URL")
        .unwrap();
    missing(store);
    // Set again (version 2) and once more (3): the promotion pins production's latest.
    set("production", 2);
    set("production", 3);

    let promoted = store
        .record_promote(
            "carol",
            &staged.revision.name,
            "production",
            &all_new(2),
            None,
        )
        .unwrap();
    let revision = &promoted.revision;
    assert_eq!(revision.env, "production");
    assert_eq!(revision.name, "hello-production-00002");
    assert_eq!(revision.artifact, staged.revision.artifact);
    assert_eq!(revision.artifact["digest"], "sha256:beef");
    assert_eq!(revision.manifest, staged.revision.manifest);
    assert_eq!(revision.env_vars, staged.revision.env_vars);
    assert_eq!(
        revision.secret_versions,
        BTreeMap::from([("DATABASE_URL".to_owned(), 3)])
    );
    assert_eq!(revision.created_by, "carol");
    assert_eq!(promoted.deployment.kind, DeploymentKind::Promote);
    assert_eq!(
        promoted.deployment.from_revision.as_deref(),
        Some("hello-production-00001")
    );
    let events = store.deployment_events(promoted.deployment.id).unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.message.contains(&staged.revision.name))
    );
    let audit = store.audit_list(0, 1000).unwrap();
    let last = audit.last().unwrap();
    assert_eq!(last.action, "promote");
    assert_eq!(last.detail["source_revision"], staged.revision.name);

    assert!(matches!(
        store.record_promote("carol", &staged.revision.name, "staging", &all_new(1), None),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.record_promote("carol", &staged.revision.name, "dev", &all_new(1), None),
        Err(StoreError::NotFound {
            kind: "environment",
            ..
        })
    ));
    assert!(matches!(
        store.record_promote(
            "carol",
            &staged.revision.name,
            "production",
            &all_new(1),
            None
        ),
        Err(StoreError::Conflict(_))
    ));
}

#[test]
fn desired_state_generations_and_instances() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    assert_eq!(store.desired_get("hello", "production").unwrap(), None);
    let one = deploy_ok(store, "hello", "production", "a");
    let two = deploy_ok(store, "hello", "production", "b");
    assert_eq!(two.desired.generation, 2);

    let split = vec![
        DesiredRevision {
            revision: one.revision.name.clone(),
            instances: 1,
            weight: 25,
        },
        DesiredRevision {
            revision: two.revision.name.clone(),
            instances: 3,
            weight: 75,
        },
    ];
    let set = store
        .desired_set("rollout", "hello", "production", &split, Some(2))
        .unwrap();
    assert_eq!(set.generation, 3);
    assert_eq!(set.revisions, split);
    let stale = store
        .desired_set("rollout", "hello", "production", &split, Some(2))
        .unwrap_err();
    assert!(matches!(stale, StoreError::Conflict(_)));
    assert!(stale.to_string().contains("generation 3, not 2"), "{stale}");

    let scaled = store
        .desired_set_instances(
            "autoscaler",
            "hello",
            "production",
            &two.revision.name,
            7,
            Some(3),
        )
        .unwrap();
    assert_eq!(scaled.generation, 4);
    assert_eq!(scaled.revisions[1].instances, 7);
    assert_eq!(scaled.revisions[1].weight, 75);
    assert_eq!(scaled.revisions[0], split[0]);
    assert!(matches!(
        store.desired_set_instances("autoscaler", "hello", "production", "nope", 1, None),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.desired_set_instances("autoscaler", "hello", "staging", "x", 1, None),
        Err(StoreError::NotFound { .. })
    ));

    let dup = vec![split[0].clone(), split[0].clone()];
    assert!(matches!(
        store.desired_set("rollout", "hello", "production", &dup, None),
        Err(StoreError::Invalid(_))
    ));
    // Expected generation 0 means "none yet".
    deploy_ok(store, "hello", "staging", "s");
    let empty = store
        .desired_set("rollout", "hello", "staging", &[], Some(1))
        .unwrap();
    assert!(empty.revisions.is_empty());
    assert_eq!(empty.generation, 2);

    let all: Vec<_> = store
        .desired_list()
        .unwrap()
        .into_iter()
        .map(|d| (d.env, d.generation))
        .collect();
    assert_eq!(all, [("production".into(), 4), ("staging".into(), 2)]);
    let audited = actions(store);
    assert!(audited.contains(&"desired.set".to_owned()));
    assert!(audited.contains(&"desired.instances".to_owned()));
}

#[test]
fn secrets_version_list_unset_and_read() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let v1 = store
        .secret_set(
            "alice",
            "hello",
            "production",
            "DATABASE_URL",
            1,
            b"n1",
            b"sealed-1",
            None,
        )
        .unwrap();
    assert_eq!(v1.version, 1);
    let v2 = store
        .secret_set(
            "alice",
            "hello",
            "production",
            "DATABASE_URL",
            2,
            b"n2",
            b"sealed-2",
            None,
        )
        .unwrap();
    assert_eq!(v2.version, 2);
    let mirrored = store
        .secret_set(
            "alice",
            "hello",
            "production",
            "API_KEY",
            1,
            b"n3",
            b"sealed-3",
            Some("vault secret/runway/env/production/service/hello/API_KEY version 7"),
        )
        .unwrap();
    assert_eq!(
        mirrored.origin.as_deref(),
        Some("vault secret/runway/env/production/service/hello/API_KEY version 7")
    );
    store
        .secret_set(
            "alice",
            "hello",
            "staging",
            "API_KEY",
            1,
            b"n4",
            b"sealed-4",
            None,
        )
        .unwrap();

    let listed = store.secret_list("hello", "production").unwrap();
    let summary: Vec<_> = listed
        .iter()
        .map(|s| (s.name.as_str(), s.version))
        .collect();
    assert_eq!(summary, [("API_KEY", 1), ("DATABASE_URL", 2)]);
    // Where each came from: Vault's place and version for a mirrored one, nothing for the
    // API's.
    assert_eq!(listed[0].origin, mirrored.origin);
    assert_eq!(listed[1].origin, None);
    // Never a ciphertext in a listing, whatever form it takes.
    let json = serde_json::to_string(&listed).unwrap();
    assert!(!json.contains("sealed") && !json.contains("ciphertext") && !json.contains("nonce"));
    assert!(!format!("{listed:?}").contains("sealed"));

    let read = store
        .secret_read("hello", "production", "DATABASE_URL", 1)
        .unwrap();
    assert_eq!(read.ciphertext, b"sealed-1");
    assert_eq!(read.nonce, b"n1");
    assert_eq!(read.version, 1);
    // Debug output does not carry the bytes either.
    assert!(!format!("{read:?}").contains("115, 101"));

    store
        .secret_unset("bob", "hello", "production", "DATABASE_URL")
        .unwrap();
    let names: Vec<_> = store
        .secret_list("hello", "production")
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["API_KEY"]);
    assert!(matches!(
        store.secret_unset("bob", "hello", "production", "DATABASE_URL"),
        Err(StoreError::NotFound { kind: "secret", .. })
    ));
    // Pinned versions stay readable for rollbacks.
    assert!(
        store
            .secret_read("hello", "production", "DATABASE_URL", 2)
            .is_ok()
    );
    // Unset versions still count: the next is 3, and only 3 is taken.
    assert_eq!(
        store
            .secret_next_version("hello", "production", "DATABASE_URL")
            .unwrap(),
        3
    );
    for stale in [1, 2, 4] {
        let refused = store
            .secret_set(
                "alice",
                "hello",
                "production",
                "DATABASE_URL",
                stale,
                b"n",
                b"c",
                None,
            )
            .unwrap_err();
        assert!(matches!(refused, StoreError::Conflict(_)), "{refused}");
        assert!(
            refused.to_string().contains("next version is 3"),
            "{refused}"
        );
    }
    let v3 = store
        .secret_set(
            "alice",
            "hello",
            "production",
            "DATABASE_URL",
            3,
            b"n5",
            b"sealed-5",
            None,
        )
        .unwrap();
    assert_eq!(v3.version, 3);
    assert_eq!(store.secret_list("hello", "production").unwrap().len(), 2);

    assert!(matches!(
        store.secret_read("hello", "production", "DATABASE_URL", 9),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.secret_set("alice", "hello", "production", "lower", 1, b"", b"", None),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.secret_set("alice", "hello", "dev", "A", 1, b"", b"", None),
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(
        store
            .secret_next_version("hello", "staging", "NEW")
            .unwrap(),
        1
    );
    assert!(matches!(
        store.secret_next_version("hello", "dev", "A"),
        Err(StoreError::NotFound { .. })
    ));

    // The audit log has the versions, never the bytes.
    let audit = store.audit_list(0, 100).unwrap();
    let audit_json = serde_json::to_string(&audit).unwrap();
    assert!(!audit_json.contains("sealed"));
    assert_eq!(
        audit
            .iter()
            .filter(|e| e.action.starts_with("secret."))
            .count(),
        6
    );
}

#[test]
fn decommission_removes_the_service_with_its_secrets_and_deploy_tokens() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    let first = onboard(store, "hello");
    onboard(store, "api");
    let record = deploy_ok(store, "hello", "production", "a");
    store
        .deployment_add_event("x", record.deployment.id, "hi")
        .unwrap();
    store
        .secret_set("alice", "hello", "production", "TOKEN", 1, b"n", b"c", None)
        .unwrap();
    store
        .secret_set("alice", "api", "production", "TOKEN", 1, b"n", b"c", None)
        .unwrap();
    let deploy_token = |service: &str, hash: &[u8]| NewToken {
        name: format!("ci-{service}"),
        hash: hash.to_vec(),
        scope: TokenScope::Deploy {
            service: service.to_owned(),
            environments: vec!["production".to_owned()],
        },
        expires_at: None,
        parent: None,
    };
    let hello_token = store
        .token_create("alice", &deploy_token("hello", b"h1"))
        .unwrap();
    let api_token = store
        .token_create("alice", &deploy_token("api", b"h2"))
        .unwrap();
    deploy_ok(store, "api", "production", "a");

    store.service_decommission("alice", "hello").unwrap();
    assert!(matches!(
        store.service_get("hello"),
        Err(StoreError::NotFound { .. })
    ));
    assert!(
        store
            .revision_list("hello", "production")
            .unwrap()
            .is_empty()
    );
    assert!(store.deployment_list("hello", None, 10).unwrap().is_empty());
    assert_eq!(store.desired_get("hello", "production").unwrap(), None);
    assert!(matches!(
        store.deployment_get(record.deployment.id),
        Err(StoreError::NotFound { .. })
    ));
    // Its deploy token is revoked; the other service's is not, nor are its secrets.
    let by_hash = |hash: &[u8]| store.token_by_hash(hash).unwrap().unwrap();
    assert!(by_hash(b"h1").revoked_at.is_some(), "{hello_token:?}");
    assert!(by_hash(b"h2").revoked_at.is_none(), "{api_token:?}");
    assert_eq!(store.secret_list("api", "production").unwrap().len(), 1);
    assert_eq!(store.desired_list().unwrap().len(), 1);
    assert!(matches!(
        store.service_decommission("alice", "hello"),
        Err(StoreError::NotFound { .. })
    ));

    // Onboarded again under the same name, it is another service: a new identity, no secrets,
    // revision numbers going on from the old one's (whose instances, named by revision, may
    // still drain: no name is given twice), and the old token stays revoked.
    let second = onboard(store, "hello");
    assert_ne!(second.id, first.id);
    assert!(second.id > store.service_get("api").unwrap().id);
    assert!(store.secret_list("hello", "production").unwrap().is_empty());
    let again = deploy_ok(store, "hello", "production", "b");
    assert_eq!(again.revision.number, 2);
    assert_ne!(again.revision.name, record.revision.name);
    assert!(by_hash(b"h1").revoked_at.is_some());

    let audit = store.audit_list(0, 1000).unwrap();
    let decommissions: Vec<_> = audit
        .iter()
        .filter(|e| e.action == "service.decommission")
        .collect();
    assert_eq!(decommissions.len(), 1);
    assert_eq!(decommissions[0].detail["id"], first.id);
    assert_eq!(decommissions[0].detail["secret_versions_removed"], 1);
    assert_eq!(decommissions[0].detail["deploy_tokens_revoked"], 1);
    f.check_integrity();
}

#[test]
fn tokens_by_hash_revoke_and_expiry() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    let soon = Timestamp::now().add_millis(60_000);
    let admin = store
        .token_create(
            "root",
            &NewToken {
                name: "admin".into(),
                hash: vec![1; 32],
                scope: TokenScope::Admin,
                expires_at: None,
                parent: None,
            },
        )
        .unwrap();
    let deploy = store
        .token_create(
            "root",
            &NewToken {
                name: "ci for hello".into(),
                hash: vec![2; 32],
                scope: TokenScope::Deploy {
                    service: "hello".into(),
                    environments: vec!["staging".into()],
                },
                expires_at: Some(soon),
                parent: None,
            },
        )
        .unwrap();
    assert_eq!(deploy.expires_at, Some(soon));
    assert_eq!(deploy.created_by, "root");
    assert_eq!(store.token_by_hash(&[2; 32]).unwrap(), Some(deploy.clone()));
    assert_eq!(store.token_by_hash(&[3; 32]).unwrap(), None);
    assert!(deploy.is_active_at(Timestamp::now()));
    assert!(!deploy.is_active_at(soon));
    assert_eq!(store.token_list().unwrap(), [admin.clone(), deploy.clone()]);

    let dup = store
        .token_create(
            "root",
            &NewToken {
                name: "other".into(),
                hash: vec![1; 32],
                scope: TokenScope::Admin,
                expires_at: None,
                parent: None,
            },
        )
        .unwrap_err();
    assert!(matches!(dup, StoreError::Conflict(_)));

    let revoked = store.token_revoke("root", admin.id).unwrap();
    let at = revoked.revoked_at.unwrap();
    assert!(!revoked.is_active_at(Timestamp::now()));
    let again = store.token_revoke("root", admin.id).unwrap();
    assert_eq!(again.revoked_at, Some(at));
    assert_eq!(
        store.token_by_hash(&[1; 32]).unwrap().unwrap().revoked_at,
        Some(at)
    );
    assert!(matches!(
        store.token_revoke("root", 999),
        Err(StoreError::NotFound { kind: "token", .. })
    ));
    let scope = serde_json::to_value(&deploy.scope).unwrap();
    assert_eq!(
        scope,
        json!({ "type": "deploy", "service": "hello", "environments": ["staging"] })
    );
    assert_eq!(
        actions(store),
        [
            "token.create",
            "token.create",
            "token.revoke",
            "token.revoke"
        ]
    );
}

#[test]
fn audit_pages_in_order() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    for i in 0..5 {
        onboard(store, &format!("svc{i}"));
    }
    let first = store.audit_list(0, 2).unwrap();
    assert_eq!(first.len(), 2);
    let rest = store.audit_list(first[1].id, 100).unwrap();
    assert_eq!(rest.len(), 3);
    assert!(rest.windows(2).all(|w| w[0].id < w[1].id));
    assert_eq!(rest[0].target, "service/svc2");
    assert_eq!(
        rest[0].detail["environments"],
        json!(["staging", "production"])
    );
    assert!(rest.iter().all(|e| e.actor == "alice"));
}

#[test]
fn audit_is_found_by_service_actor_action_time_and_who() {
    use runway_store::{AuditBy, AuditFilter};
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    onboard(store, "hello-two");
    let a = deploy_ok(store, "hello", "production", "a");
    store
        .deployment_add_event("reconciler", a.deployment.id, "instance started")
        .unwrap();
    store
        .secret_set("bob", "hello", "production", "TOKEN", 1, b"n", b"c", None)
        .unwrap();
    deploy_ok(store, "hello-two", "production", "b");
    let find = |filter: AuditFilter| {
        store
            .audit_find(&filter, None, 100)
            .unwrap()
            .into_iter()
            .map(|e| format!("{} {} {}", e.actor, e.action, e.target))
            .collect::<Vec<_>>()
    };
    let all = find(AuditFilter::default());
    assert_eq!(all.len(), store.audit_list(0, 1000).unwrap().len());
    // A service: its own entries, not those of a service whose name it begins.
    let hello = find(AuditFilter {
        service: Some("hello".into()),
        ..AuditFilter::default()
    });
    assert!(hello.iter().all(|e| !e.contains("hello-two")), "{hello:?}");
    assert!(
        hello
            .iter()
            .any(|e| e.contains("secret/hello/production/TOKEN")),
        "{hello:?}"
    );
    assert!(
        hello.iter().any(|e| e.ends_with(" service/hello")),
        "{hello:?}"
    );
    // People, or the platform.
    let platform = find(AuditFilter {
        by: Some(AuditBy::Platform),
        ..AuditFilter::default()
    });
    assert_eq!(
        platform,
        ["reconciler deployment.event service/hello/production"]
    );
    let people = find(AuditFilter {
        by: Some(AuditBy::People),
        ..AuditFilter::default()
    });
    assert_eq!(people.len() + 1, all.len());
    // An actor; an action and its family.
    assert_eq!(
        find(AuditFilter {
            actor: Some("bob".into()),
            ..AuditFilter::default()
        }),
        ["bob secret.set secret/hello/production/TOKEN"]
    );
    let secrets = find(AuditFilter {
        action: Some("secret".into()),
        ..AuditFilter::default()
    });
    assert_eq!(secrets, ["bob secret.set secret/hello/production/TOKEN"]);
    assert_eq!(
        find(AuditFilter {
            action: Some("secret.set".into()),
            ..AuditFilter::default()
        }),
        secrets
    );
    // `_` and `%` are matched as themselves.
    assert!(
        find(AuditFilter {
            action: Some("s%".into()),
            ..AuditFilter::default()
        })
        .is_empty()
    );
    // Since a time; the last N, oldest first; a page after an id.
    let future = Timestamp::from_unix_millis(Timestamp::now().unix_millis() + 60_000).unwrap();
    assert!(
        find(AuditFilter {
            since: Some(future),
            ..AuditFilter::default()
        })
        .is_empty()
    );
    let last = store.audit_find(&AuditFilter::default(), None, 2).unwrap();
    let every = store.audit_list(0, 1000).unwrap();
    assert_eq!(last, every[every.len() - 2..]);
    let page = store
        .audit_find(&AuditFilter::default(), Some(every[0].id), 2)
        .unwrap();
    assert_eq!(page, every[1..3]);
}

#[test]
fn records_serialize_with_rfc3339_times() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let record = deploy_ok(store, "hello", "production", "a");
    let stored = store.deployment_get(record.deployment.id).unwrap();
    let value = serde_json::to_value(&stored).unwrap();
    let at = value["created_at"].as_str().unwrap();
    assert!(
        at.ends_with('Z') && at.len() == "2026-11-21T13:50:39.123Z".len(),
        "{at}"
    );
    assert_eq!(value["kind"], "deploy");
    let back: runway_store::Deployment = serde_json::from_value(value).unwrap();
    assert_eq!(back, stored);
}

#[test]
fn two_handles_on_one_file_see_each_other() {
    let f = fixture();
    let other = f.reopen();
    onboard(&*f.store, "hello");
    assert_eq!(other.service_get("hello").unwrap().name, "hello");
}

#[test]
fn concurrent_writers_on_one_file_allocate_distinct_versions() {
    let f = fixture();
    onboard(&*f.store, "hello");
    let threads: Vec<_> = (0..4)
        .map(|t| {
            // A connection of its own, as another process would have.
            let store = f.reopen();
            std::thread::spawn(move || {
                (0..25)
                    .map(|i| {
                        // As the API does: the next version, sealed for, then stored; again
                        // when another writer took it first.
                        loop {
                            let next = store
                                .secret_next_version("hello", "production", "SHARED")
                                .unwrap();
                            let value = format!("{t}-{i}-{next}");
                            match store.secret_set(
                                &format!("writer{t}"),
                                "hello",
                                "production",
                                "SHARED",
                                next,
                                b"n",
                                value.as_bytes(),
                                None,
                            ) {
                                Ok(info) => {
                                    assert_eq!(info.version, next);
                                    break (next, value);
                                }
                                Err(StoreError::Conflict(_)) => {}
                                Err(other) => panic!("{other}"),
                            }
                        }
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let stored: Vec<(u32, String)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    // Each value is stored under the version it was written for.
    for (version, value) in &stored {
        let read = f
            .store
            .secret_read("hello", "production", "SHARED", *version)
            .unwrap();
        assert_eq!(&read.ciphertext, value.as_bytes());
    }
    let mut versions: Vec<u32> = stored.into_iter().map(|(v, _)| v).collect();
    versions.sort_unstable();
    assert_eq!(versions, (1..=100).collect::<Vec<u32>>());
    let listed = f.store.secret_list("hello", "production").unwrap();
    assert_eq!(listed[0].version, 100);
}

#[test]
fn services_update_owners_and_environments() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    deploy_ok(store, "hello", "production", "a");
    let updated = store
        .service_update(
            "bob",
            "hello",
            &ServiceUpdate {
                owners: Some(vec!["bob".into(), "carol".into()]),
                environments: Some(vec!["production".into(), "dev".into()]),
                allow_processes: Some(true),
                team: None,
            },
        )
        .unwrap();
    assert_eq!(updated.owners, ["bob", "carol"]);
    assert_eq!(updated.environments, ["production", "dev"]);
    assert_eq!(updated.created_by, "alice");
    assert!(updated.allow_processes);
    assert_eq!(store.service_get("hello").unwrap(), updated);
    deploy_ok(store, "hello", "dev", "b");

    let keep_owners = store
        .service_update(
            "bob",
            "hello",
            &ServiceUpdate {
                owners: None,
                environments: Some(vec!["dev".into()]),
                allow_processes: None,
                team: None,
            },
        )
        .unwrap_err();
    assert!(
        matches!(keep_owners, StoreError::Conflict(_)),
        "{keep_owners}"
    );
    assert!(keep_owners.to_string().contains("\"production\""));
    let nothing = store
        .service_update("bob", "hello", &ServiceUpdate::default())
        .unwrap();
    assert_eq!(nothing, updated);
    assert!(matches!(
        store.service_update("bob", "nope", &ServiceUpdate::default()),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.service_update(
            "bob",
            "hello",
            &ServiceUpdate {
                owners: None,
                environments: Some(vec![]),
                allow_processes: None,
                team: None,
            }
        ),
        Err(StoreError::Invalid(_))
    ));
    let audit = store.audit_list(0, 100).unwrap();
    let update = audit.iter().find(|e| e.action == "service.update").unwrap();
    assert_eq!(update.detail["owners"]["to"], json!(["bob", "carol"]));
    assert_eq!(update.detail["allow_processes"]["to"], true);
    assert_eq!(
        audit
            .iter()
            .filter(|e| e.action == "service.update")
            .count(),
        2
    );
}

#[test]
fn maintenance_is_set_changed_listed_cleared_and_audited() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let on = |message: &str| runway_store::Maintenance {
        service: "hello".into(),
        env: "production".into(),
        message: message.into(),
        allow: vec!["192.0.2.0/24".into()],
        retry_after_seconds: 120,
        since: Timestamp::from_unix_millis(0).unwrap(),
        set_by: String::new(),
    };
    let set = store
        .maintenance_set("alice", "hello", "production", Some(&on("back soon")))
        .unwrap()
        .unwrap();
    assert_eq!(
        (set.message.as_str(), set.set_by.as_str()),
        ("back soon", "alice")
    );
    assert_eq!(set.allow, vec!["192.0.2.0/24".to_owned()]);
    assert!(set.since.unix_millis() > 0, "set by the store");
    let changed = store
        .maintenance_set("bob", "hello", "production", Some(&on("back at noon")))
        .unwrap()
        .unwrap();
    assert_eq!(changed.message, "back at noon");
    assert_eq!(
        (changed.since, changed.set_by.as_str()),
        (set.since, "alice"),
        "a change keeps since when and by whom"
    );
    assert_eq!(store.maintenance_list().unwrap(), vec![changed.clone()]);
    assert_eq!(
        store.maintenance_get("hello", "production").unwrap(),
        Some(changed)
    );
    assert_eq!(store.maintenance_get("hello", "staging").unwrap(), None);
    for (service, env) in [("hello", "qa"), ("nobody", "production")] {
        assert!(matches!(
            store.maintenance_get(service, env),
            Err(StoreError::NotFound { .. })
        ));
    }
    assert!(matches!(
        store.maintenance_set("alice", "hello", "qa", Some(&on("x"))),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.maintenance_set("alice", "nobody", "production", None),
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(
        store
            .maintenance_set("alice", "hello", "production", None)
            .unwrap(),
        None
    );
    assert!(store.maintenance_list().unwrap().is_empty());
    assert_eq!(store.maintenance_get("hello", "production").unwrap(), None);
    // Off again is a no-op, not audited twice.
    store
        .maintenance_set("alice", "hello", "production", None)
        .unwrap();
    let actions: Vec<String> = store
        .audit_list(0, 100)
        .unwrap()
        .into_iter()
        .filter(|e| e.action.starts_with("maintenance."))
        .map(|e| format!("{} {} {}", e.action, e.actor, e.target))
        .collect();
    assert_eq!(
        actions,
        [
            "maintenance.on alice service/hello/env/production",
            "maintenance.on bob service/hello/env/production",
            "maintenance.off alice service/hello/env/production",
        ]
    );
    // A decommissioned service leaves none behind.
    store
        .maintenance_set("alice", "hello", "staging", Some(&on("x")))
        .unwrap();
    store.service_decommission("alice", "hello").unwrap();
    assert!(store.maintenance_list().unwrap().is_empty());
}

#[test]
fn identity_keys_are_kept_once_per_rotation_and_dropped_once_expired() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    let at = |millis: i64| Timestamp::from_unix_millis(millis).unwrap();
    let key = |kid: &str, created: i64, expires: i64| runway_store::IdentityKey {
        kid: kid.to_owned(),
        nonce: vec![1; 24],
        ciphertext: vec![2, 3, 4],
        public_jwk: json!({"kid": kid}).to_string(),
        created_at: at(created),
        expires_at: at(expires),
    };
    assert!(store.identity_keys(at(1_000)).unwrap().is_empty());
    let first = key("first", 1_000, 10_000);
    assert_eq!(
        store
            .identity_key_add("runway", &first, at(0), at(1_000))
            .unwrap(),
        first
    );
    // Another replica, racing: the key made within the rotation is kept, not its own.
    let racing = key("racing", 1_500, 10_000);
    assert_eq!(
        store
            .identity_key_add("runway", &racing, at(500), at(1_500))
            .unwrap(),
        first
    );
    // A rotation later: a new key beside the old, newest first.
    let second = key("second", 5_000, 20_000);
    store
        .identity_key_add("runway", &second, at(4_000), at(5_000))
        .unwrap();
    let kids = |now: i64| -> Vec<String> {
        store
            .identity_keys(at(now))
            .unwrap()
            .into_iter()
            .map(|k| k.kid)
            .collect()
    };
    assert_eq!(kids(5_000), ["second", "first"]);
    // Past its time the old one is not listed, and the next add removes it.
    assert_eq!(kids(10_000), ["second"]);
    let third = key("third", 12_000, 30_000);
    store
        .identity_key_add("runway", &third, at(11_000), at(12_000))
        .unwrap();
    assert_eq!(kids(0), ["third", "second"]);
    assert_eq!(
        actions(store)
            .iter()
            .filter(|a| *a == "identity.key")
            .count(),
        3
    );
}
