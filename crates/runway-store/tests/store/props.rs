//! A random sequence of operations never panics, and the invariants hold after each one.

use std::collections::BTreeMap;

use proptest::prelude::*;
use runway_store::{
    DeploymentState, DesiredRevision, PlannedRevision, RevisionRef, RolloutCommand, Store,
};

use crate::support::{new_revision, onboard};

const SERVICES: [&str; 2] = ["hello", "api"];
const ENVS: [&str; 2] = ["staging", "production"];
const STATES: [DeploymentState; 5] = [
    DeploymentState::Pending,
    DeploymentState::Progressing,
    DeploymentState::Succeeded,
    DeploymentState::Failed,
    DeploymentState::RolledBack,
];

#[derive(Debug, Clone)]
enum Op {
    Deploy {
        service: usize,
        env: usize,
        keep_old: bool,
    },
    Rollback {
        service: usize,
        env: usize,
        pick: usize,
    },
    Promote {
        service: usize,
        pick: usize,
    },
    Transition {
        pick: usize,
        to: usize,
    },
    SetInstances {
        service: usize,
        env: usize,
        pick: usize,
        instances: u32,
    },
    SecretSet {
        service: usize,
        env: usize,
        name: usize,
    },
    SecretUnset {
        service: usize,
        env: usize,
        name: usize,
    },
    Decommission {
        service: usize,
    },
    Onboard {
        service: usize,
    },
    Command {
        service: usize,
        env: usize,
        command: usize,
    },
    SaveRollout {
        pick: usize,
        consumed: Option<usize>,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let s = 0..SERVICES.len();
    let e = 0..ENVS.len();
    prop_oneof![
        4 => (s.clone(), e.clone(), any::<bool>())
            .prop_map(|(service, env, keep_old)| Op::Deploy { service, env, keep_old }),
        1 => (s.clone(), e.clone(), 0..8usize)
            .prop_map(|(service, env, pick)| Op::Rollback { service, env, pick }),
        1 => (s.clone(), 0..8usize).prop_map(|(service, pick)| Op::Promote { service, pick }),
        4 => (0..16usize, 0..STATES.len()).prop_map(|(pick, to)| Op::Transition { pick, to }),
        1 => (s.clone(), e.clone(), 0..4usize, 0..10u32).prop_map(
            |(service, env, pick, instances)| Op::SetInstances { service, env, pick, instances }
        ),
        1 => (s.clone(), e.clone(), 0..2usize)
            .prop_map(|(service, env, name)| Op::SecretSet { service, env, name }),
        1 => (s.clone(), e.clone(), 0..2usize)
            .prop_map(|(service, env, name)| Op::SecretUnset { service, env, name }),
        1 => s.clone().prop_map(|service| Op::Decommission { service }),
        1 => s.clone().prop_map(|service| Op::Onboard { service }),
        2 => (s, e, 0..RolloutCommand::ALL.len())
            .prop_map(|(service, env, command)| Op::Command { service, env, command }),
        2 => (0..16usize, prop::option::of(0..RolloutCommand::ALL.len()))
            .prop_map(|(pick, consumed)| Op::SaveRollout { pick, consumed }),
    ]
}

fn pick<T: Clone>(items: &[T], index: usize) -> Option<T> {
    (!items.is_empty()).then(|| items[index % items.len()].clone())
}

/// Applies one operation; errors are allowed (the store refuses what it must), panics not.
fn apply(store: &dyn Store, op: &Op) {
    let _ = match *op {
        Op::Deploy {
            service,
            env,
            keep_old,
        } => {
            let (service, env) = (SERVICES[service], ENVS[env]);
            let mut planned = vec![PlannedRevision {
                revision: RevisionRef::New,
                instances: 1,
                weight: 100,
            }];
            if keep_old
                && let Ok(Some(desired)) = store.desired_get(service, env)
                && let Some(old) = desired.revisions.first()
            {
                planned.push(PlannedRevision {
                    revision: RevisionRef::Named(old.revision.clone()),
                    instances: 1,
                    weight: 0,
                });
            }
            store
                .record_deploy("prop", &new_revision(service, env, "d"), &planned)
                .map(drop)
        }
        Op::Rollback {
            service,
            env,
            pick: index,
        } => {
            let (service, env) = (SERVICES[service], ENVS[env]);
            let revisions = store.revision_list(service, env).unwrap_or_default();
            match pick(&revisions, index) {
                Some(r) => store
                    .record_rollback(
                        "prop",
                        service,
                        env,
                        &r.name,
                        &[DesiredRevision {
                            revision: r.name.clone(),
                            instances: 1,
                            weight: 1,
                        }],
                    )
                    .map(drop),
                None => Ok(()),
            }
        }
        Op::Promote {
            service,
            pick: index,
        } => {
            let service = SERVICES[service];
            let revisions = store.revision_list(service, "staging").unwrap_or_default();
            match pick(&revisions, index) {
                Some(r) => store
                    .record_promote(
                        "prop",
                        &r.name,
                        "production",
                        &[PlannedRevision {
                            revision: RevisionRef::New,
                            instances: 2,
                            weight: 1,
                        }],
                        None,
                    )
                    .map(drop),
                None => Ok(()),
            }
        }
        Op::Transition { pick: index, to } => {
            match pick(&all_deployments(store), index) {
                Some(d) => {
                    let result = store.deployment_transition("prop", d.id, STATES[to], None);
                    // The state machine decides, whatever the store holds.
                    assert_eq!(result.is_ok(), d.state.can_become(STATES[to]), "{result:?}");
                    result.map(drop)
                }
                None => Ok(()),
            }
        }
        Op::SetInstances {
            service,
            env,
            pick: index,
            instances,
        } => {
            let (service, env) = (SERVICES[service], ENVS[env]);
            match store.desired_get(service, env) {
                Ok(Some(desired)) => match pick(&desired.revisions, index) {
                    Some(r) => store
                        .desired_set_instances("prop", service, env, &r.revision, instances, None)
                        .map(drop),
                    None => Ok(()),
                },
                _ => Ok(()),
            }
        }
        Op::SecretSet { service, env, name } => {
            let (service, env, name) = (SERVICES[service], ENVS[env], ["A", "B"][name]);
            store
                .secret_next_version(service, env, name)
                .and_then(|version| {
                    store.secret_set("prop", service, env, name, version, b"n", b"c", None)
                })
                .map(drop)
        }
        Op::SecretUnset { service, env, name } => {
            store.secret_unset("prop", SERVICES[service], ENVS[env], ["A", "B"][name])
        }
        Op::Decommission { service } => store.service_decommission("prop", SERVICES[service]),
        Op::Onboard { service } => {
            if store.service_get(SERVICES[service]).is_err() {
                onboard(store, SERVICES[service]);
            }
            Ok(())
        }
        Op::Command {
            service,
            env,
            command,
        } => {
            let (service, env) = (SERVICES[service], ENVS[env]);
            let command = RolloutCommand::ALL[command];
            let active = store
                .deployment_list(service, Some(env), 100)
                .ok()
                .and_then(|all| all.into_iter().find(|d| !d.state.is_terminal()));
            // A pending abort is replaced by nothing but an abort.
            let abort_pending = active.as_ref().is_some_and(|d| {
                d.command == Some(RolloutCommand::Abort) && command != RolloutCommand::Abort
            });
            let result = store.deployment_command("prop", service, env, command);
            assert_eq!(
                result.is_ok(),
                active.is_some() && !abort_pending,
                "{result:?}"
            );
            if let Ok(d) = &result {
                assert!(!d.state.is_terminal(), "{d:?}");
                assert_eq!((d.service.as_str(), d.env.as_str()), (service, env));
                assert_eq!(d.command, Some(command));
            }
            result.map(drop)
        }
        Op::SaveRollout {
            pick: index,
            consumed,
        } => match pick(&all_deployments(store), index) {
            Some(d) => {
                let consumed = consumed.map(|c| RolloutCommand::ALL[c]);
                let rollout = format!("{{\"id\":{}}}", d.id);
                let result = store.deployment_save_rollout("prop", d.id, &rollout, consumed);
                assert_eq!(result.is_ok(), !d.state.is_terminal(), "{result:?}");
                if let Ok(saved) = &result {
                    assert_eq!(saved.rollout.as_deref(), Some(rollout.as_str()));
                    // Compare and clear.
                    let expected = if consumed.is_some() && consumed == d.command {
                        None
                    } else {
                        d.command
                    };
                    assert_eq!(saved.command, expected);
                }
                result.map(drop)
            }
            None => Ok(()),
        },
    };
}

fn all_deployments(store: &dyn Store) -> Vec<runway_store::Deployment> {
    let mut all = Vec::new();
    for service in SERVICES {
        all.extend(
            store
                .deployment_list(service, None, 100)
                .unwrap_or_default(),
        );
    }
    all
}

/// What must hold after every operation.
fn check(
    store: &dyn Store,
    generations: &mut BTreeMap<(String, String), u64>,
    names: &mut BTreeMap<String, i64>,
) {
    for service in SERVICES {
        let exists = store.service_get(service).is_ok();
        let mut in_flight = BTreeMap::<&str, usize>::new();
        for env in ENVS {
            let revisions = store.revision_list(service, env).unwrap();
            if !exists {
                assert!(revisions.is_empty());
            }
            // Numbers consecutive and strictly increasing (from past the last one a
            // decommissioned namesake had), names matching.
            for (i, r) in revisions.iter().enumerate() {
                assert_eq!(r.number as usize, revisions[0].number as usize + i);
                assert_eq!(r.name, runway_store::revision_name(service, env, r.number));
                // A name is never given to two revisions, decommissions and all.
                assert_eq!(
                    *names.entry(r.name.clone()).or_insert(r.id),
                    r.id,
                    "{}",
                    r.name
                );
            }
            let desired = store.desired_get(service, env).unwrap();
            if let Some(desired) = &desired {
                for entry in &desired.revisions {
                    assert!(revisions.iter().any(|r| r.name == entry.revision));
                }
                let key = (service.to_owned(), env.to_owned());
                let last = generations.get(&key).copied().unwrap_or(0);
                assert!(desired.generation >= last, "generation went back");
                generations.insert(key, desired.generation);
            } else {
                generations.remove(&(service.to_owned(), env.to_owned()));
            }
        }
        for d in store.deployment_list(service, None, 1000).unwrap() {
            // Nothing carries out a command once a deployment has ended.
            if d.state.is_terminal() {
                assert_eq!(d.command, None, "{d:?}");
            }
            if !d.state.is_terminal() {
                *in_flight
                    .entry(if d.env == "staging" {
                        "staging"
                    } else {
                        "production"
                    })
                    .or_default() += 1;
            }
        }
        for count in in_flight.values() {
            assert!(*count <= 1, "two deployments in flight in one environment");
        }
        if exists {
            for env in ENVS {
                let listed = store.secret_list(service, env).unwrap();
                assert!(listed.windows(2).all(|w| w[0].name < w[1].name));
            }
        }
    }
    let audit = store.audit_list(0, u32::MAX).unwrap();
    assert!(audit.windows(2).all(|w| w[0].id < w[1].id));
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        max_shrink_iters: 64,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_operations_keep_the_invariants(ops in prop::collection::vec(op(), 1..40)) {
        // On the backend the pass runs on (`RUNWAY_TEST_STORE`).
        let f = crate::support::fixture();
        let store: &dyn Store = &*f.store;
        onboard(store, "hello");
        let (mut generations, mut names) = (BTreeMap::new(), BTreeMap::new());
        for op in &ops {
            apply(store, op);
            check(store, &mut generations, &mut names);
        }
        f.check_integrity();
    }
}
