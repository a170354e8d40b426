//! Teams: members with a role on the services a team owns. A service names its team; a team
//! that owns services stays; a removed team's tokens stop.

use runway_secrets::{Grant, Role, Target};
use runway_store::{NewToken, ServiceUpdate, Store, StoreError, TeamMember, TokenScope};

use crate::support::{fixture, onboard};

fn member(subject: &str, role: Role, envs: Option<&[&str]>) -> TeamMember {
    TeamMember {
        subject: subject.to_owned(),
        role,
        environments: envs.map(|e| e.iter().map(|e| (*e).to_owned()).collect()),
    }
}

fn give(store: &dyn Store, service: &str, team: Option<&str>) -> Result<(), StoreError> {
    store
        .service_update(
            "alice",
            service,
            &ServiceUpdate {
                team: Some(team.map(str::to_owned)),
                ..ServiceUpdate::default()
            },
        )
        .map(|_| ())
}

#[test]
fn a_team_is_made_changed_given_services_and_kept_while_it_owns_them() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "app");

    let made = store
        .team_put(
            "alice",
            "payments",
            &[
                member("group:acme/payments", Role::Deployer, Some(&["staging"])),
                member("user:bob", Role::Maintainer, None),
            ],
        )
        .unwrap();
    assert_eq!(made.members.len(), 2);
    assert_eq!(made.created_by, "alice");
    let changed = store
        .team_put(
            "carol",
            "payments",
            &[member("user:bob", Role::Viewer, None)],
        )
        .unwrap();
    assert_eq!(
        changed.members,
        vec![member("user:bob", Role::Viewer, None)]
    );
    assert_eq!(changed.created_by, "alice", "a change keeps who made it");
    assert_eq!(store.team_list().unwrap().len(), 1);

    // A service is given to a team that exists only.
    assert!(matches!(
        give(store, "app", Some("nobody")),
        Err(StoreError::NotFound { .. })
    ));
    give(store, "app", Some("payments")).unwrap();
    assert_eq!(
        store.service_get("app").unwrap().team.as_deref(),
        Some("payments")
    );
    let refused = store.team_delete("alice", "payments").unwrap_err();
    assert!(
        matches!(&refused, StoreError::Conflict(m) if m.contains("app")),
        "{refused:?}"
    );
    give(store, "app", None).unwrap();
    assert_eq!(store.service_get("app").unwrap().team, None);
    store.team_delete("alice", "payments").unwrap();
    assert!(matches!(
        store.team_get("payments"),
        Err(StoreError::NotFound { .. })
    ));

    let actions: Vec<String> = store
        .audit_tail(20)
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .filter(|a| a.starts_with("team."))
        .collect();
    assert_eq!(actions, ["team.create", "team.update", "team.delete"]);
}

#[test]
fn members_are_users_or_groups_each_once() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    for (members, says) in [
        (
            vec![member("bob", Role::Viewer, None)],
            "`user:<name>` or `group:<path>`",
        ),
        (vec![member("user:", Role::Viewer, None)], "`user:<name>`"),
        (vec![member("team:x", Role::Viewer, None)], "`group:<path>`"),
        (
            vec![
                member("user:bob", Role::Viewer, None),
                member("user:bob", Role::Deployer, None),
            ],
            "twice",
        ),
        (
            vec![member("user:bob", Role::Viewer, Some(&["a", "a"]))],
            "twice",
        ),
    ] {
        let refused = store.team_put("alice", "t", &members).unwrap_err();
        assert!(
            matches!(&refused, StoreError::Invalid(m) if m.contains(says)),
            "{members:?}: {refused:?}"
        );
    }
    assert!(store.team_list().unwrap().is_empty(), "nothing was made");
}

#[test]
fn a_removed_team_and_a_decommissioned_service_revoke_their_tokens() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "app");
    store.team_put("alice", "payments", &[]).unwrap();
    let token = |name: &str, hash: u8, on: Target| {
        store
            .token_create(
                "alice",
                &NewToken {
                    name: name.to_owned(),
                    hash: vec![hash; 32],
                    scope: TokenScope::Grant {
                        grant: Grant {
                            role: Role::Viewer,
                            on,
                            environments: None,
                        },
                    },
                    expires_at: None,
                    parent: None,
                },
            )
            .unwrap()
    };
    let team = token("team", 1, Target::Team("payments".into()));
    let service = token("service", 2, Target::Service("app".into()));
    let other = token("other", 3, Target::AnyService);
    let session = store
        .token_create(
            "alice",
            &NewToken {
                name: "session".into(),
                hash: vec![4; 32],
                scope: service.scope.clone(),
                expires_at: None,
                parent: Some(service.id),
            },
        )
        .unwrap();

    store.team_delete("alice", "payments").unwrap();
    store.service_decommission("alice", "app").unwrap();
    let revoked = |id: i64| {
        store
            .token_list()
            .unwrap()
            .into_iter()
            .find(|t| t.id == id)
            .unwrap()
            .revoked_at
            .is_some()
    };
    assert!(revoked(team.id));
    assert!(revoked(service.id));
    assert!(revoked(session.id), "a session goes with its token");
    assert!(
        !revoked(other.id),
        "a token on every service is no one service's"
    );
}
