//! Progressive-delivery state on deployments: the controller's rollout progress and the
//! operator's commands, set, replaced, consumed compare-and-clear, and dropped at the end.

use runway_store::{AuditEntry, DeploymentState, RolloutCommand, Store, StoreError, revision_name};

use crate::support::{all_new, deploy_ok, fixture, new_revision, onboard, only};

fn events(store: &dyn Store, id: i64) -> Vec<String> {
    store
        .deployment_events(id)
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect()
}

fn audited(store: &dyn Store, action: &str) -> Vec<AuditEntry> {
    store
        .audit_list(0, 1000)
        .unwrap()
        .into_iter()
        .filter(|e| e.action == action)
        .collect()
}

/// A deploy of `hello` to production, left `Pending`; its id.
fn pending(store: &dyn Store, digest: &str) -> i64 {
    store
        .record_deploy(
            "bob",
            &new_revision("hello", "production", digest),
            &all_new(1),
        )
        .unwrap()
        .deployment
        .id
}

#[test]
fn commands_are_set_replaced_and_consumed_compare_and_clear() {
    use RolloutCommand::*;
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let id = pending(store, "a");
    let fresh = store.deployment_get(id).unwrap();
    assert_eq!((fresh.rollout.as_deref(), fresh.command), (None, None));

    // A pending deployment takes a command, and keeps it as it starts progressing.
    let paused = store
        .deployment_command("alice", "hello", "production", Pause)
        .unwrap();
    assert_eq!(paused.id, id);
    assert_eq!(paused.command, Some(Pause));
    assert_eq!(store.deployment_get(id).unwrap(), paused);
    let progressing = store
        .deployment_transition("rollout", id, DeploymentState::Progressing, None)
        .unwrap();
    assert_eq!(progressing.command, Some(Pause));

    // The controller read the pause; before it saves, an operator asks for an abort.
    let aborted = store
        .deployment_command("carol", "hello", "production", Abort)
        .unwrap();
    assert_eq!(aborted.command, Some(Abort));
    // Saving with the pause consumed leaves the newer abort for the next step.
    let saved = store
        .deployment_save_rollout("rollout", id, r#"{"step":1,"paused":true}"#, Some(Pause))
        .unwrap();
    assert_eq!(
        saved.rollout.as_deref(),
        Some(r#"{"step":1,"paused":true}"#)
    );
    assert_eq!(saved.command, Some(Abort));
    // Without a consumed command, only the progress changes.
    let saved = store
        .deployment_save_rollout("rollout", id, r#"{"step":2}"#, None)
        .unwrap();
    assert_eq!(saved.rollout.as_deref(), Some(r#"{"step":2}"#));
    assert_eq!(saved.command, Some(Abort));
    // A pending abort stands: nothing but an abort replaces it.
    let refused = store
        .deployment_command("alice", "hello", "production", Resume)
        .unwrap_err();
    assert!(matches!(refused, StoreError::Conflict(_)), "{refused:?}");
    assert!(refused.to_string().contains("abort pending"), "{refused}");
    assert_eq!(store.deployment_get(id).unwrap().command, Some(Abort));
    // Consuming the stored command clears it.
    let saved = store
        .deployment_save_rollout("rollout", id, r#"{"step":2,"aborting":true}"#, Some(Abort))
        .unwrap();
    assert_eq!(saved.command, None);
    assert_eq!(saved.state, DeploymentState::Progressing);
    assert_eq!(store.deployment_get(id).unwrap(), saved);
    // Consuming again finds nothing to clear, and is no error.
    let again = store
        .deployment_save_rollout("rollout", id, r#"{"step":3}"#, Some(Abort))
        .unwrap();
    assert_eq!(
        (again.rollout.as_deref(), again.command),
        (Some(r#"{"step":3}"#), None)
    );
    // Asking the same command twice keeps one, and says so once per ask.
    store
        .deployment_command("alice", "hello", "production", Promote)
        .unwrap();
    let promoted = store
        .deployment_command("alice", "hello", "production", Promote)
        .unwrap();
    assert_eq!(promoted.command, Some(Promote));

    assert_eq!(
        events(store, id)[1..],
        [
            "pause asked by alice",
            "pending → progressing",
            "abort asked by carol, in place of pause",
            "promote asked by alice",
            "promote asked by alice",
        ]
    );

    let commands = audited(store, "deployment.command");
    assert_eq!(commands.len(), 4);
    assert!(
        commands
            .iter()
            .all(|e| e.target == "service/hello/production" && e.detail["deployment"] == id)
    );
    assert_eq!(commands[0].actor, "alice");
    assert_eq!(commands[0].detail["command"], "pause");
    assert_eq!(commands[0].detail["replaced"], serde_json::Value::Null);
    assert_eq!(commands[1].actor, "carol");
    assert_eq!(commands[1].detail["command"], "abort");
    assert_eq!(commands[1].detail["replaced"], "pause");

    let rollouts = audited(store, "deployment.rollout");
    let consumed: Vec<_> = rollouts
        .iter()
        .map(|e| e.detail["consumed"].clone())
        .collect();
    // Only the save that cleared a command names it.
    assert_eq!(
        consumed,
        [
            serde_json::Value::Null,
            serde_json::Value::Null,
            serde_json::json!("abort"),
            serde_json::Value::Null,
        ]
    );
    for entry in &rollouts {
        assert_eq!(entry.actor, "rollout");
        assert_eq!(entry.target, "service/hello/production");
        assert_eq!(entry.detail["deployment"], id);
        // The progress itself is not copied into the audit log.
        assert!(
            !entry.detail.to_string().contains("step"),
            "{}",
            entry.detail
        );
    }
}

#[test]
fn a_command_needs_a_deployment_in_progress() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let before = store.audit_list(0, 1000).unwrap();
    // Before the first deploy.
    let err = store
        .deployment_command("alice", "hello", "production", RolloutCommand::Pause)
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "conflict: no deployment of hello/production is pending or progressing; there is \
         nothing to pause"
    );
    assert_eq!(store.audit_list(0, 1000).unwrap(), before);
    // After one that ended, and with one in flight in another environment only.
    let done = deploy_ok(store, "hello", "production", "a");
    pending_in(store, "staging");
    let after_deploys = store.audit_list(0, 1000).unwrap();
    let err = store
        .deployment_command("alice", "hello", "production", RolloutCommand::Promote)
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err}");
    assert_eq!(
        store.deployment_get(done.deployment.id).unwrap().command,
        None
    );
    // Unknown service or environment.
    assert!(matches!(
        store.deployment_command("alice", "nope", "production", RolloutCommand::Pause),
        Err(StoreError::NotFound {
            kind: "service",
            ..
        })
    ));
    assert!(matches!(
        store.deployment_command("alice", "hello", "nope", RolloutCommand::Pause),
        Err(StoreError::NotFound {
            kind: "environment",
            ..
        })
    ));
    // Refusals write nothing.
    assert_eq!(store.audit_list(0, 1000).unwrap(), after_deploys);
    assert_eq!(events(store, done.deployment.id).len(), 3);
}

/// A pending deploy of `hello` in `env`.
fn pending_in(store: &dyn Store, env: &str) -> i64 {
    store
        .record_deploy("bob", &new_revision("hello", env, "s"), &all_new(1))
        .unwrap()
        .deployment
        .id
}

#[test]
fn saving_a_rollout_is_refused_once_the_deployment_ended() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let id = pending(store, "a");
    store
        .deployment_save_rollout("rollout", id, r#"{"step":0}"#, None)
        .unwrap();
    store
        .deployment_transition("rollout", id, DeploymentState::Failed, Some("probe"))
        .unwrap();
    let audit = store.audit_list(0, 1000).unwrap();
    let err = store
        .deployment_save_rollout("rollout", id, r#"{"step":1}"#, None)
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "conflict: deployment {id} of hello/production is failed; its rollout cannot \
             change any more"
        )
    );
    assert_eq!(
        store.deployment_get(id).unwrap().rollout.as_deref(),
        Some(r#"{"step":0}"#)
    );
    assert_eq!(store.audit_list(0, 1000).unwrap(), audit);
    assert!(matches!(
        store.deployment_save_rollout("rollout", 999, "{}", None),
        Err(StoreError::NotFound {
            kind: "deployment",
            ..
        })
    ));
}

#[test]
fn a_terminal_state_drops_the_pending_command() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let id = pending(store, "a");
    store
        .deployment_transition("rollout", id, DeploymentState::Progressing, None)
        .unwrap();
    store
        .deployment_save_rollout("rollout", id, r#"{"step":4}"#, None)
        .unwrap();
    store
        .deployment_command("alice", "hello", "production", RolloutCommand::Pause)
        .unwrap();
    let done = store
        .deployment_transition("rollout", id, DeploymentState::Succeeded, None)
        .unwrap();
    assert_eq!(done.command, None);
    // The progress stays, as the record of how it went.
    assert_eq!(done.rollout.as_deref(), Some(r#"{"step":4}"#));
    assert_eq!(
        events(store, id)[2..],
        [
            "pause asked by alice",
            "progressing → succeeded",
            "pause not carried out: the deployment is succeeded",
        ]
    );
    let transitions = audited(store, "deployment.transition");
    assert_eq!(
        transitions[0].detail["dropped_command"],
        serde_json::Value::Null
    );
    assert_eq!(transitions[1].detail["dropped_command"], "pause");

    // A rollback supersedes a deployment in flight, and its command goes with it.
    let two = pending(store, "b");
    store
        .deployment_command("alice", "hello", "production", RolloutCommand::Resume)
        .unwrap();
    let one = revision_name("hello", "production", 1);
    let back = store
        .record_rollback("carol", "hello", "production", &one, &only(&one, 1))
        .unwrap();
    let superseded = store.deployment_get(two).unwrap();
    assert_eq!(superseded.state, DeploymentState::Failed);
    assert_eq!(superseded.command, None);
    assert_eq!(
        events(store, two).last().unwrap(),
        "resume not carried out: the deployment is failed"
    );
    // The rollback itself takes commands.
    let paused = store
        .deployment_command("alice", "hello", "production", RolloutCommand::Pause)
        .unwrap();
    assert_eq!(paused.id, back.deployment.id);
}

#[test]
fn commands_have_names_and_serialize_with_deployments() {
    for command in RolloutCommand::ALL {
        assert_eq!(command.to_string(), command.as_str());
        assert_eq!(command.as_str().parse::<RolloutCommand>().unwrap(), command);
        assert_eq!(
            serde_json::to_value(command).unwrap(),
            serde_json::json!(command.as_str())
        );
    }
    let names: Vec<_> = RolloutCommand::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(names, ["pause", "resume", "abort", "promote"]);
    let err = "Pause".parse::<RolloutCommand>().unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "invalid request: unknown rollout command \"Pause\": expected pause, resume, abort or \
         promote"
    );

    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let id = pending(store, "a");
    store
        .deployment_save_rollout("rollout", id, r#"{"step":1}"#, None)
        .unwrap();
    let stored = store
        .deployment_command("alice", "hello", "production", RolloutCommand::Abort)
        .unwrap();
    let value = serde_json::to_value(&stored).unwrap();
    assert_eq!(value["command"], "abort");
    assert_eq!(value["rollout"], r#"{"step":1}"#);
    let back: runway_store::Deployment = serde_json::from_value(value).unwrap();
    assert_eq!(back, stored);
}
