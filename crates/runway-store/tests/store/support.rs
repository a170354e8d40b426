//! Fixtures shared by the tests.

use std::collections::BTreeMap;

use runway_store::{
    DeployRecord, DesiredRevision, NewRevision, NewService, PlannedRevision, RevisionRef,
    SqliteStore, Store,
};
use serde_json::json;
use tempfile::TempDir;

pub(crate) struct Fixture {
    pub(crate) store: SqliteStore,
    pub(crate) dir: TempDir,
}

impl Fixture {
    pub(crate) fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("runway.db")
    }
}

pub(crate) fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("runway.db")).unwrap();
    Fixture { store, dir }
}

pub(crate) fn onboard(store: &dyn Store, name: &str) -> runway_store::Service {
    store
        .service_create(
            "alice",
            &NewService {
                name: name.into(),
                owners: vec!["alice".into()],
                environments: vec!["staging".into(), "production".into()],
            },
        )
        .unwrap()
}

pub(crate) fn new_revision(service: &str, env: &str, digest: &str) -> NewRevision {
    NewRevision {
        service: service.into(),
        env: env.into(),
        manifest: json!({ "apiVersion": "runway/v1", "kind": "RunwayService",
                          "metadata": { "name": service }, "spec": {} }),
        artifact: json!({ "image": "registry.example/hello", "digest": digest }),
        env_vars: BTreeMap::from([("LOG_LEVEL".into(), "info".into())]),
        secret_versions: BTreeMap::from([("DATABASE_URL".into(), 1)]),
    }
}

pub(crate) fn all_new(instances: u32) -> Vec<PlannedRevision> {
    vec![PlannedRevision {
        revision: RevisionRef::New,
        instances,
        weight: 100,
    }]
}

pub(crate) fn only(revision: &str, instances: u32) -> Vec<DesiredRevision> {
    vec![DesiredRevision {
        revision: revision.into(),
        instances,
        weight: 100,
    }]
}

/// Deploys and marks the deployment succeeded.
pub(crate) fn deploy_ok(store: &dyn Store, service: &str, env: &str, digest: &str) -> DeployRecord {
    let record = store
        .record_deploy("alice", &new_revision(service, env, digest), &all_new(1))
        .unwrap();
    let id = record.deployment.id;
    store
        .deployment_transition(
            "rollout",
            id,
            runway_store::DeploymentState::Progressing,
            None,
        )
        .unwrap();
    store
        .deployment_transition(
            "rollout",
            id,
            runway_store::DeploymentState::Succeeded,
            None,
        )
        .unwrap();
    record
}
