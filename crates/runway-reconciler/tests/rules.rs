//! The planner's rules, each with plain values.

#![allow(clippy::unwrap_used, reason = "tests")]

use runway_reconciler::{
    Action, Condition, Desired, DesiredRevision, InstanceState, Observed, ObservedInstance, Plan,
    Policy, RouteWeight, plan,
};

const NOW: u64 = 1_000_000;

fn desired(revisions: &[(&str, u32, u32)]) -> Desired {
    Desired {
        revisions: revisions
            .iter()
            .map(|&(name, instances, weight)| DesiredRevision {
                name: name.to_owned(),
                instances,
                weight,
            })
            .collect(),
    }
}

fn instance(id: &str, revision: &str, state: InstanceState, since_ms: u64) -> ObservedInstance {
    ObservedInstance {
        id: id.to_owned(),
        revision: revision.to_owned(),
        state,
        since_ms,
    }
}

fn ready(id: &str, revision: &str) -> ObservedInstance {
    instance(id, revision, InstanceState::Ready, NOW - 10_000)
}

fn starting(id: &str, revision: &str) -> ObservedInstance {
    instance(id, revision, InstanceState::Starting, NOW - 1_000)
}

fn draining(id: &str, revision: &str, since_ms: u64) -> ObservedInstance {
    instance(id, revision, InstanceState::Draining, since_ms)
}

fn observed(instances: Vec<ObservedInstance>, routes: &[(&str, u32)]) -> Observed {
    Observed {
        instances,
        routes: routes
            .iter()
            .map(|&(r, w)| RouteWeight::new(r, w))
            .collect(),
        now_ms: NOW,
    }
}

fn routes(weights: &[(&str, u32)]) -> Action {
    Action::SetRoutes {
        weights: weights
            .iter()
            .map(|&(r, w)| RouteWeight::new(r, w))
            .collect(),
    }
}

fn start(revision: &str) -> Action {
    Action::Start {
        revision: revision.to_owned(),
    }
}

fn drain(instance: &str) -> Action {
    Action::Drain {
        instance: instance.to_owned(),
    }
}

fn stop(instance: &str) -> Action {
    Action::Stop {
        instance: instance.to_owned(),
    }
}

fn condition(plan: &Plan, revision: &str) -> Condition {
    plan.status
        .iter()
        .find(|status| status.revision == revision)
        .unwrap()
        .condition
        .clone()
}

fn plan_default(desired: &Desired, observed: &Observed) -> Plan {
    plan(desired, observed, &Policy::default())
}

// First deploy.

#[test]
fn first_deploy_starts_every_instance_and_routes_nothing_yet() {
    let plan = plan_default(&desired(&[("v1", 2, 100)]), &observed(vec![], &[]));
    assert_eq!(plan.actions, vec![start("v1"), start("v1")]);
    assert_eq!(condition(&plan, "v1"), Condition::Progressing);
    assert_eq!(plan.requeue_after_ms, None);
}

#[test]
fn first_deploy_routes_as_soon_as_an_instance_is_ready_when_nothing_serves() {
    let state = observed(vec![ready("i1", "v1"), starting("i2", "v1")], &[]);
    let plan = plan_default(&desired(&[("v1", 2, 100)]), &state);
    assert_eq!(plan.actions, vec![routes(&[("v1", 100)])]);
}

#[test]
fn first_deploy_is_ready_once_all_instances_are() {
    let state = observed(vec![ready("i1", "v1"), ready("i2", "v1")], &[("v1", 100)]);
    let plan = plan_default(&desired(&[("v1", 2, 100)]), &state);
    assert!(plan.actions.is_empty());
    assert_eq!(condition(&plan, "v1"), Condition::Ready);
}

// Rolling deploy v1 → v2.

fn v1_serving() -> Vec<ObservedInstance> {
    vec![ready("a1", "v1"), ready("a2", "v1")]
}

#[test]
fn rolling_deploy_starts_the_new_revision_beside_the_old() {
    let state = observed(v1_serving(), &[("v1", 100)]);
    let plan = plan_default(&desired(&[("v2", 2, 100)]), &state);
    assert_eq!(plan.actions, vec![start("v2"), start("v2")]);
}

#[test]
fn rolling_deploy_keeps_traffic_on_the_old_revision_until_the_new_is_fully_ready() {
    let mut instances = v1_serving();
    instances.extend([ready("b1", "v2"), starting("b2", "v2")]);
    let plan = plan_default(
        &desired(&[("v2", 2, 100)]),
        &observed(instances, &[("v1", 100)]),
    );
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
}

#[test]
fn rolling_deploy_shifts_traffic_once_ready_but_does_not_drain_in_the_same_plan() {
    let mut instances = v1_serving();
    instances.extend([ready("b1", "v2"), ready("b2", "v2")]);
    let plan = plan_default(
        &desired(&[("v2", 2, 100)]),
        &observed(instances, &[("v1", 100)]),
    );
    assert_eq!(plan.actions, vec![routes(&[("v2", 100)])]);
}

#[test]
fn rolling_deploy_drains_the_old_revision_once_the_routes_left_it() {
    let mut instances = v1_serving();
    instances.extend([ready("b1", "v2"), ready("b2", "v2")]);
    let plan = plan_default(
        &desired(&[("v2", 2, 100)]),
        &observed(instances, &[("v2", 100)]),
    );
    assert_eq!(plan.actions, vec![drain("a2"), drain("a1")]);
    assert_eq!(condition(&plan, "v1"), Condition::Progressing);
    // Their stop is looked at when the grace they begin now is over.
    assert_eq!(
        plan.requeue_after_ms,
        Some(Policy::default().drain_grace_ms)
    );
}

#[test]
fn drained_instances_stop_after_the_grace_and_not_before() {
    let policy = Policy::default();
    let began = NOW - 10_000;
    let state = observed(
        vec![draining("a1", "v1", began), ready("b1", "v2")],
        &[("v2", 100)],
    );
    let early = plan(&desired(&[("v2", 1, 100)]), &state, &policy);
    assert!(early.actions.is_empty());
    assert_eq!(early.requeue_after_ms, Some(policy.drain_grace_ms - 10_000));

    let later = Observed {
        now_ms: began + policy.drain_grace_ms,
        ..state
    };
    let plan = plan(&desired(&[("v2", 1, 100)]), &later, &policy);
    assert_eq!(plan.actions, vec![stop("a1")]);
}

// A revision that never becomes ready.

#[test]
fn a_revision_never_ready_times_out_and_the_old_one_keeps_all_traffic() {
    let policy = Policy::default();
    let mut instances = v1_serving();
    let started = NOW - policy.start_timeout_ms;
    instances.push(instance("b1", "v2", InstanceState::Starting, started));
    let plan = plan(
        &desired(&[("v2", 1, 100)]),
        &observed(instances, &[("v1", 100)]),
        &policy,
    );
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
    assert!(matches!(
        condition(&plan, "v2"),
        Condition::TimedOut { reason } if reason.contains("not ready within 300000 ms")
    ));
}

#[test]
fn the_start_timeout_is_requeued_for() {
    let policy = Policy::default();
    let mut instances = v1_serving();
    instances.push(instance("b1", "v2", InstanceState::Starting, NOW - 1_000));
    let plan = plan(
        &desired(&[("v2", 1, 100)]),
        &observed(instances, &[("v1", 100)]),
        &policy,
    );
    assert_eq!(plan.requeue_after_ms, Some(policy.start_timeout_ms - 1_000));
}

#[test]
fn a_timed_out_revision_says_why_its_instances_fail() {
    let policy = Policy::default();
    let mut instances = v1_serving();
    let reason = "readiness probe GET /healthz: 500".to_owned();
    instances.push(instance(
        "b1",
        "v2",
        InstanceState::CrashLoop {
            reason: reason.clone(),
        },
        NOW - policy.start_timeout_ms,
    ));
    let plan = plan(
        &desired(&[("v2", 1, 100)]),
        &observed(instances, &[("v1", 100)]),
        &policy,
    );
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
    assert!(matches!(
        condition(&plan, "v2"),
        Condition::TimedOut { reason: said } if said.contains(&reason)
    ));
}

// Rollback.

#[test]
fn rollback_starts_the_old_revision_while_the_new_keeps_serving() {
    let state = observed(vec![ready("b1", "v2")], &[("v2", 100)]);
    let plan = plan_default(&desired(&[("v1", 1, 100)]), &state);
    assert_eq!(plan.actions, vec![start("v1")]);
}

#[test]
fn rollback_moves_traffic_back_once_the_old_revision_is_ready() {
    let state = observed(vec![ready("a1", "v1"), ready("b1", "v2")], &[("v2", 100)]);
    let plan = plan_default(&desired(&[("v1", 1, 100)]), &state);
    assert_eq!(plan.actions, vec![routes(&[("v1", 100)])]);
}

#[test]
fn rollback_mid_deploy_stops_the_new_revisions_starting_instances_at_once() {
    let mut instances = v1_serving();
    instances.extend([starting("b1", "v2"), starting("b2", "v2")]);
    let plan = plan_default(
        &desired(&[("v1", 2, 100)]),
        &observed(instances, &[("v1", 100)]),
    );
    assert_eq!(plan.actions, vec![stop("b2"), stop("b1")]);
}

// Canary.

#[test]
fn canary_waits_for_both_revisions_then_splits_90_10() {
    let wanted = desired(&[("v1", 2, 90), ("v2", 1, 10)]);
    let mut instances = v1_serving();
    instances.push(starting("b1", "v2"));
    let waiting = plan_default(&wanted, &observed(instances.clone(), &[("v1", 100)]));
    assert!(waiting.actions.is_empty(), "{:?}", waiting.actions);

    instances[2] = ready("b1", "v2");
    let split = plan_default(&wanted, &observed(instances.clone(), &[("v1", 100)]));
    assert_eq!(split.actions, vec![routes(&[("v1", 90), ("v2", 10)])]);

    let steady = plan_default(&wanted, &observed(instances, &[("v1", 90), ("v2", 10)]));
    assert!(steady.actions.is_empty());
}

#[test]
fn weights_that_do_not_sum_to_100_are_scaled() {
    let state = observed(vec![ready("a1", "v1"), ready("b1", "v2")], &[]);
    let plan = plan_default(&desired(&[("v1", 1, 3), ("v2", 1, 1)]), &state);
    assert_eq!(plan.actions, vec![routes(&[("v1", 75), ("v2", 25)])]);
}

// Scaling.

#[test]
fn scale_up_starts_instances_and_leaves_the_routes() {
    let state = observed(v1_serving(), &[("v1", 100)]);
    let plan = plan_default(&desired(&[("v1", 4, 100)]), &state);
    assert_eq!(plan.actions, vec![start("v1"), start("v1")]);
}

#[test]
fn max_surge_bounds_the_instances_starting_at_once() {
    let policy = Policy {
        max_surge: Some(1),
        ..Policy::default()
    };
    let none_starting = observed(v1_serving(), &[("v1", 100)]);
    let plan1 = plan(&desired(&[("v1", 4, 100)]), &none_starting, &policy);
    assert_eq!(plan1.actions, vec![start("v1")]);

    let mut instances = v1_serving();
    instances.push(starting("a3", "v1"));
    let plan2 = plan(
        &desired(&[("v1", 4, 100)]),
        &observed(instances, &[("v1", 100)]),
        &policy,
    );
    assert!(plan2.actions.is_empty());
}

#[test]
fn scale_down_drains_the_newest_ready_instances() {
    let state = observed(
        vec![
            instance("a1", "v1", InstanceState::Ready, 100),
            instance("a2", "v1", InstanceState::Ready, 300),
            instance("a3", "v1", InstanceState::Ready, 200),
        ],
        &[("v1", 100)],
    );
    let plan = plan_default(&desired(&[("v1", 1, 100)]), &state);
    assert_eq!(plan.actions, vec![drain("a2"), drain("a3")]);
}

#[test]
fn scale_down_removes_not_ready_instances_first() {
    let state = observed(
        vec![
            ready("a1", "v1"),
            ready("a2", "v1"),
            starting("a3", "v1"),
            instance("a4", "v1", InstanceState::NotReady, NOW - 5),
        ],
        &[("v1", 100)],
    );
    let plan = plan_default(&desired(&[("v1", 2, 100)]), &state);
    assert_eq!(plan.actions, vec![drain("a4"), stop("a3")]);
}

#[test]
fn a_routed_revision_without_a_ready_instance_keeps_its_instances_that_had_traffic() {
    let state = observed(
        vec![
            instance("a1", "v1", InstanceState::NotReady, 100),
            instance("a2", "v1", InstanceState::NotReady, 200),
        ],
        &[("v1", 100)],
    );
    let plan = plan_default(&desired(&[("v1", 1, 100)]), &state);
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
}

// Decommission.

#[test]
fn decommission_removes_the_routes_then_drains_then_stops() {
    let policy = Policy::default();
    let nothing = Desired::default();

    let serving = observed(v1_serving(), &[("v1", 100)]);
    assert_eq!(plan(&nothing, &serving, &policy).actions, vec![routes(&[])]);

    let unrouted = observed(v1_serving(), &[]);
    assert_eq!(
        plan(&nothing, &unrouted, &policy).actions,
        vec![drain("a2"), drain("a1")]
    );

    let began = NOW - policy.drain_grace_ms;
    let drained = observed(
        vec![draining("a1", "v1", began), draining("a2", "v1", began)],
        &[],
    );
    let last = plan(&nothing, &drained, &policy);
    assert_eq!(last.actions, vec![stop("a1"), stop("a2")]);

    let gone = plan(&nothing, &observed(vec![], &[]), &policy);
    assert!(gone.actions.is_empty());
    assert!(gone.status.is_empty());
}

#[test]
fn a_retired_revision_is_ready_when_its_instances_are_gone() {
    let plan = plan_default(
        &desired(&[("v1", 0, 0), ("v2", 1, 100)]),
        &observed(vec![ready("b1", "v2")], &[("v2", 100)]),
    );
    assert!(plan.actions.is_empty());
    assert_eq!(condition(&plan, "v1"), Condition::Ready);
}

// Recovery.

#[test]
fn recovery_restores_routes_to_ready_instances() {
    let state = observed(
        vec![ready("a1", "v1"), ready("b1", "v2"), starting("b2", "v2")],
        &[],
    );
    let plan = plan_default(&desired(&[("v1", 1, 50), ("v2", 2, 50)]), &state);
    assert_eq!(plan.actions, vec![routes(&[("v1", 50), ("v2", 50)])]);
}

#[test]
fn recovery_drains_leftovers_of_revisions_no_longer_wanted() {
    let state = observed(vec![ready("a1", "v1"), ready("b1", "v2")], &[]);
    let plan = plan_default(&desired(&[("v2", 1, 100)]), &state);
    assert_eq!(plan.actions, vec![routes(&[("v2", 100)]), drain("a1")]);
}

#[test]
fn with_nothing_ready_anywhere_the_last_routes_are_kept() {
    let state = observed(
        vec![
            instance(
                "a1",
                "v1",
                InstanceState::CrashLoop {
                    reason: "exit code 1".to_owned(),
                },
                NOW - 5,
            ),
            starting("b1", "v2"),
        ],
        &[("v1", 100)],
    );
    let plan = plan_default(&desired(&[("v2", 1, 100)]), &state);
    assert!(
        !plan
            .actions
            .iter()
            .any(|action| matches!(action, Action::SetRoutes { .. })),
        "{:?}",
        plan.actions
    );
}

#[test]
fn a_routed_revision_that_lost_its_ready_instances_loses_its_traffic_to_one_that_serves() {
    let state = observed(
        vec![
            instance("a1", "v1", InstanceState::NotReady, NOW - 5),
            ready("b1", "v2"),
        ],
        &[("v1", 50), ("v2", 50)],
    );
    let plan = plan_default(&desired(&[("v1", 1, 50), ("v2", 1, 50)]), &state);
    assert_eq!(plan.actions, vec![routes(&[("v2", 100)])]);
}

// Failures.

#[test]
fn a_crash_looping_instance_is_reported_and_left_to_its_supervisor() {
    let reason = "exited with code 1: panic: no DATABASE_URL".to_owned();
    let state = observed(
        vec![
            ready("a1", "v1"),
            instance(
                "a2",
                "v1",
                InstanceState::CrashLoop {
                    reason: reason.clone(),
                },
                NOW - 5,
            ),
        ],
        &[("v1", 100)],
    );
    let plan = plan_default(&desired(&[("v1", 2, 100)]), &state);
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
    let status = &plan.status[0];
    assert_eq!((status.ready, status.failed), (1, 1));
    assert!(matches!(
        &status.condition,
        Condition::Failing { reason: said } if said.contains(&reason)
    ));
}

#[test]
fn a_failed_instance_is_replaced() {
    let state = observed(
        vec![
            ready("a1", "v1"),
            instance(
                "a2",
                "v1",
                InstanceState::Failed {
                    reason: "supervisor died".to_owned(),
                },
                NOW - 5,
            ),
        ],
        &[("v1", 100)],
    );
    let plan = plan_default(&desired(&[("v1", 2, 100)]), &state);
    assert_eq!(
        plan.actions,
        vec![Action::Replace {
            instance: "a2".to_owned(),
            revision: "v1".to_owned()
        }]
    );
    assert!(matches!(condition(&plan, "v1"), Condition::Failing { .. }));
}

#[test]
fn dead_instances_not_needed_are_stopped() {
    let state = observed(
        vec![
            ready("a1", "v1"),
            instance("a2", "v1", InstanceState::Exited, NOW - 5),
            instance("z1", "v0", InstanceState::Exited, NOW - 5),
        ],
        &[("v1", 100)],
    );
    let plan = plan_default(&desired(&[("v1", 1, 100)]), &state);
    assert_eq!(plan.actions, vec![stop("a2"), stop("z1")]);
}

// Level-triggered.

#[test]
fn planning_twice_on_the_same_state_gives_the_same_plan() {
    let mut instances = v1_serving();
    instances.extend([ready("b1", "v2"), starting("b2", "v2")]);
    let state = observed(instances, &[("v1", 100)]);
    let wanted = desired(&[("v1", 1, 90), ("v2", 2, 10)]);
    assert_eq!(plan_default(&wanted, &state), plan_default(&wanted, &state));
}

#[test]
fn status_lists_desired_revisions_then_the_others() {
    let state = observed(vec![ready("z1", "v0"), ready("b1", "v2")], &[("v0", 100)]);
    let plan = plan_default(&desired(&[("v2", 1, 100), ("v1", 0, 0)]), &state);
    let order: Vec<&str> = plan.status.iter().map(|s| s.revision.as_str()).collect();
    assert_eq!(order, ["v2", "v1", "v0"]);
}

#[test]
fn rollback_from_a_canary_moves_all_traffic_back_at_once() {
    let mut instances = v1_serving();
    instances.push(ready("b1", "v2"));
    let state = observed(instances, &[("v1", 90), ("v2", 10)]);
    let plan = plan_default(&desired(&[("v1", 2, 100)]), &state);
    assert_eq!(plan.actions, vec![routes(&[("v1", 100)])]);
}

#[test]
fn scaled_to_zero_drains_every_instance_and_keeps_the_route() {
    let plan = plan_default(
        &desired(&[("v1", 0, 100)]),
        &observed(vec![ready("a", "v1"), ready("b", "v1")], &[("v1", 100)]),
    );
    assert_eq!(plan.actions, [drain("b"), drain("a")]);

    // Drained: the route stays, so the ingress holds requests; stopped after the grace.
    let plan = plan_default(
        &desired(&[("v1", 0, 100)]),
        &observed(vec![draining("a", "v1", 0)], &[("v1", 100)]),
    );
    assert_eq!(plan.actions, [stop("a")]);
    let plan = plan_default(
        &desired(&[("v1", 0, 100)]),
        &observed(vec![], &[("v1", 100)]),
    );
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
}

#[test]
fn a_cold_start_from_zero_starts_an_instance_then_serves_on_the_same_route() {
    let plan = plan_default(
        &desired(&[("v1", 1, 100)]),
        &observed(vec![], &[("v1", 100)]),
    );
    assert_eq!(plan.actions, [start("v1")]);
    let plan = plan_default(
        &desired(&[("v1", 1, 100)]),
        &observed(vec![ready("a", "v1")], &[("v1", 100)]),
    );
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
}

#[test]
fn a_retired_revision_still_routed_is_not_taken_for_one_scaled_to_zero() {
    // v1 has no desired weight: it keeps its instances until the routes leave it (rule 4).
    let plan = plan_default(
        &desired(&[("v1", 0, 0), ("v2", 1, 100)]),
        &observed(vec![ready("a", "v1"), starting("b", "v2")], &[("v1", 100)]),
    );
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
}
