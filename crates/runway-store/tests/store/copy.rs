//! `copy_sqlite_to_postgres`: everything a SQLite store holds, in PostgreSQL as it was. Runs
//! on the PostgreSQL pass (`RUNWAY_TEST_STORE=postgres`); the SQLite pass has no target.

use runway_store::{NewToken, SqliteStore, Store, StoreError, TokenScope, copy_sqlite_to_postgres};

use crate::support::{deploy_ok, fixture, on_postgres, onboard};

/// Everything a store shows, for comparing two.
fn everything(store: &dyn Store) -> serde_json::Value {
    let services = store.service_list().unwrap();
    let mut per_env = Vec::new();
    for service in &services {
        for env in &service.environments {
            let revisions = store.revision_list(&service.name, env).unwrap();
            let secrets = store.secret_list(&service.name, env).unwrap();
            let sealed: Vec<_> = secrets
                .iter()
                .map(|s| {
                    store
                        .secret_read(&service.name, env, &s.name, s.version)
                        .unwrap()
                })
                .collect();
            per_env.push(serde_json::json!({
                "revisions": revisions, "secrets": secrets,
                "sealed": format!("{sealed:?}"),
                "desired": store.desired_get(&service.name, env).unwrap(),
            }));
        }
        let deployments = store.deployment_list(&service.name, None, 1000).unwrap();
        for deployment in &deployments {
            per_env.push(serde_json::json!({
                "deployment": deployment,
                "events": store.deployment_events(deployment.id).unwrap(),
            }));
        }
    }
    serde_json::json!({
        "services": services,
        "per_env": per_env,
        "previews": store.preview_list(None).unwrap(),
        "teams": store.team_list().unwrap(),
        "tokens": format!("{:?}", store.token_list().unwrap()),
        "audit": store.audit_list(0, 10_000).unwrap(),
    })
}

#[test]
fn a_sqlite_store_is_copied_whole_into_an_empty_postgres_one() {
    if !on_postgres() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path().join("runway.db")).unwrap();
    // A decommissioned service leaves an id and revision numbers that are never given again.
    onboard(&sqlite, "gone");
    deploy_ok(&sqlite, "gone", "staging", "sha256:00");
    sqlite.service_decommission("alice", "gone").unwrap();
    onboard(&sqlite, "hello");
    sqlite
        .team_put(
            "alice",
            "web",
            &[runway_store::TeamMember {
                subject: "group:acme/web".into(),
                role: runway_secrets::Role::Deployer,
                environments: Some(vec!["production".into()]),
            }],
        )
        .unwrap();
    sqlite
        .service_update(
            "alice",
            "hello",
            &runway_store::ServiceUpdate {
                team: Some(Some("web".into())),
                ..Default::default()
            },
        )
        .unwrap();
    deploy_ok(&sqlite, "hello", "production", "sha256:aa");
    let second = deploy_ok(&sqlite, "hello", "production", "sha256:bb");
    sqlite
        .deployment_add_event("ctl", second.deployment.id, "instance started")
        .unwrap();
    sqlite
        .secret_set(
            "alice",
            "hello",
            "production",
            "DATABASE_URL",
            1,
            b"nonce",
            b"\x00sealed\xff",
            None,
        )
        .unwrap();
    sqlite
        .preview_put(
            "ci",
            &runway_store::NewPreview {
                parent: "hello".into(),
                name: "mr-1".into(),
                base_env: "staging".into(),
                origin: serde_json::json!({"merge_request": "1"}),
                ttl: std::time::Duration::from_secs(60),
                max_per_parent: 5,
            },
        )
        .unwrap();
    deploy_ok(&sqlite, "mr-1--hello", "preview", "sha256:cc");
    let token = sqlite
        .token_create(
            "alice",
            &NewToken {
                name: "ci".into(),
                hash: vec![7; 32],
                scope: TokenScope::Deploy {
                    service: "hello".into(),
                    environments: vec!["production".into()],
                },
                expires_at: None,
                parent: None,
            },
        )
        .unwrap();
    sqlite.token_revoke("alice", token.id).unwrap();

    let f = fixture();
    let postgres = f.reopen_postgres();
    let copied = copy_sqlite_to_postgres(&sqlite, &postgres).unwrap();
    assert!(copied.tables.contains(&("revisions", 3)), "{copied:?}");
    assert_eq!(everything(&postgres), everything(&sqlite));

    // What PostgreSQL hands out next follows what was copied.
    let was = sqlite.service_get("hello").unwrap().id;
    let new = onboard(&postgres, "again");
    assert!(new.id > was, "{} after {was}", new.id);
    let gone = onboard(&postgres, "gone");
    let again = deploy_ok(&postgres, "gone", "staging", "sha256:01");
    assert_eq!(again.revision.name, "gone-staging-00002");
    assert!(gone.id > new.id);
    let audit = postgres.audit_list(0, 10_000).unwrap();
    let ids: Vec<i64> = audit.iter().map(|e| e.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    // A second copy finds the target in use and changes nothing.
    let before = everything(&postgres);
    let refused = copy_sqlite_to_postgres(&sqlite, &postgres).unwrap_err();
    assert!(
        matches!(&refused, StoreError::Conflict(message) if message.contains("not empty")
            && message.contains("in services")),
        "{refused}"
    );
    assert_eq!(everything(&postgres), before);
}
