//! The planner against a simulated executor and runtime: from random observed and desired
//! states, repeated plan and apply converges, and traffic is never dropped on the way.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use runway_reconciler::{
    Action, Desired, DesiredRevision, InstanceState, Observed, ObservedInstance, Plan, Policy,
    RouteWeight, plan,
};

/// One simulated step, in milliseconds.
const STEP_MS: u64 = 1_000;
/// Every scenario must have converged after this many steps.
const MAX_STEPS: usize = 60;
const REVISIONS: [&str; 4] = ["r0", "r1", "r2", "r3"];

/// What happens to a started instance, decided when it starts.
#[derive(Debug, Clone, Copy)]
enum Fate {
    /// Ready at this time.
    ReadyAt(u64),
    /// Crash-loops from this time on, and is never ready.
    CrashLoopAt(u64),
    /// Stays starting for ever.
    StuckStarting,
}

/// A fake runtime and ingress that apply actions to an observed state, and let time pass.
#[derive(Debug)]
struct Simulator {
    observed: Observed,
    fates: BTreeMap<String, Fate>,
    /// Revisions whose instances never become ready.
    bad: BTreeSet<String>,
    /// Ready delays in steps, used in turn for each instance that starts.
    delays: Vec<u64>,
    next_delay: usize,
    next_id: u64,
}

impl Simulator {
    fn new(scenario: &Scenario) -> Self {
        let mut simulator = Self {
            observed: Observed {
                instances: Vec::new(),
                routes: scenario.routes.clone(),
                now_ms: scenario.now_ms,
            },
            fates: BTreeMap::new(),
            bad: scenario.bad.clone(),
            delays: scenario.delays.clone(),
            next_delay: 0,
            next_id: 0,
        };
        for instance in &scenario.instances {
            simulator.adopt(instance.clone());
        }
        simulator
    }

    /// Takes over an instance of the initial state, giving not-ready ones a fate.
    fn adopt(&mut self, mut instance: ObservedInstance) {
        let bad = self.bad.contains(&instance.revision);
        if bad && instance.state.is_ready() {
            instance.state = InstanceState::Starting;
        }
        if instance.state.is_live() && !instance.state.is_ready() {
            let fate = self.fate(bad);
            self.fates.insert(instance.id.clone(), fate);
        }
        self.observed.instances.push(instance);
    }

    fn fate(&mut self, bad: bool) -> Fate {
        let delay = self.delays[self.next_delay % self.delays.len()];
        self.next_delay += 1;
        let at = self.observed.now_ms + delay * STEP_MS;
        match (bad, delay % 2) {
            (false, _) => Fate::ReadyAt(at),
            (true, 0) => Fate::StuckStarting,
            (true, _) => Fate::CrashLoopAt(at),
        }
    }

    fn apply(&mut self, actions: &[Action]) {
        for action in actions {
            match action {
                Action::SetRoutes { weights } => self.observed.routes.clone_from(weights),
                Action::Start { revision } => self.start(revision),
                Action::Replace { instance, revision } => {
                    self.remove(instance);
                    self.start(revision);
                }
                Action::Drain { instance } => self.drain(instance),
                Action::Stop { instance } => self.remove(instance),
            }
        }
    }

    fn start(&mut self, revision: &str) {
        let id = format!("new-{}", self.next_id);
        self.next_id += 1;
        let fate = self.fate(self.bad.contains(revision));
        self.fates.insert(id.clone(), fate);
        self.observed.instances.push(ObservedInstance {
            id,
            revision: revision.to_owned(),
            state: InstanceState::Starting,
            since_ms: self.observed.now_ms,
        });
    }

    fn drain(&mut self, id: &str) {
        let now_ms = self.observed.now_ms;
        for instance in &mut self.observed.instances {
            if instance.id == id && instance.state != InstanceState::Draining {
                instance.state = InstanceState::Draining;
                instance.since_ms = now_ms;
                self.fates.remove(id);
            }
        }
    }

    fn remove(&mut self, id: &str) {
        self.observed.instances.retain(|instance| instance.id != id);
        self.fates.remove(id);
    }

    /// Lets one step pass: instances become ready or start crash-looping as fated.
    fn advance(&mut self) {
        self.observed.now_ms += STEP_MS;
        let now_ms = self.observed.now_ms;
        for instance in &mut self.observed.instances {
            let next = match self.fates.get(&instance.id) {
                Some(&Fate::ReadyAt(at)) if now_ms >= at => InstanceState::Ready,
                Some(&Fate::CrashLoopAt(at)) if now_ms >= at => InstanceState::CrashLoop {
                    reason: "exited with code 1".to_owned(),
                },
                _ => continue,
            };
            if instance.state != next {
                instance.state = next;
                instance.since_ms = now_ms;
            }
        }
    }

    fn ready(&self, revision: &str) -> usize {
        self.observed
            .instances
            .iter()
            .filter(|i| i.revision == revision && i.state.is_ready())
            .count()
    }

    fn routes(&self) -> BTreeMap<String, u32> {
        self.observed
            .routes
            .iter()
            .filter(|route| route.weight > 0)
            .map(|route| (route.revision.clone(), route.weight))
            .collect()
    }

    /// Some routed revision has a ready instance: traffic is being served.
    fn serving(&self) -> bool {
        self.routes()
            .keys()
            .any(|revision| self.ready(revision) > 0)
    }
}

#[derive(Debug, Clone)]
struct Scenario {
    instances: Vec<ObservedInstance>,
    routes: Vec<RouteWeight>,
    now_ms: u64,
    /// Desired states in force before the last, each for `steps_each` steps (a deploy
    /// interrupted by another, a rollback mid-way).
    earlier: Vec<Desired>,
    steps_each: usize,
    /// The desired state to converge to.
    desired: Desired,
    bad: BTreeSet<String>,
    delays: Vec<u64>,
    policy: Policy,
}

impl Scenario {
    fn weighted(&self) -> impl Iterator<Item = &DesiredRevision> {
        self.desired.revisions.iter().filter(|r| r.weight > 0)
    }

    fn desired_instances(&self, revision: &str) -> u32 {
        self.desired
            .revisions
            .iter()
            .find(|r| r.name == revision)
            .map_or(0, |r| r.instances)
    }
}

/// Integer weights summing to 100 (or all zero), the remainder to the first.
fn to_100(weights: &[u32]) -> Vec<u32> {
    let total: u32 = weights.iter().sum();
    if total == 0 {
        return weights.to_vec();
    }
    let mut scaled: Vec<u32> = weights.iter().map(|w| w * 100 / total).collect();
    let short = 100 - scaled.iter().sum::<u32>();
    if let Some(first) = scaled.iter_mut().find(|w| **w > 0) {
        *first += short;
    } else if let Some(index) = weights.iter().position(|w| *w > 0) {
        scaled[index] += short;
    }
    scaled
}

fn state_strategy() -> impl Strategy<Value = InstanceState> {
    prop_oneof![
        Just(InstanceState::Starting),
        Just(InstanceState::Ready),
        Just(InstanceState::Ready),
        Just(InstanceState::NotReady),
        Just(InstanceState::Draining),
        Just(InstanceState::Failed {
            reason: "image pull failed".to_owned()
        }),
        Just(InstanceState::CrashLoop {
            reason: "exited with code 2".to_owned()
        }),
        Just(InstanceState::Exited),
    ]
}

fn scenario_strategy() -> impl Strategy<Value = Scenario> {
    let instances = prop::collection::vec((0..4usize, state_strategy(), 0..120_000u64), 0..8);
    let routes = prop::collection::vec((0..4usize, 0..100u32), 0..3);
    let desired = prop::collection::vec((0..4usize, 0..4u32, 0..100u32), 0..3);
    let earlier = prop::collection::vec(
        prop::collection::vec((0..4usize, 0..4u32, 0..100u32), 0..3),
        0..3,
    );
    let changes = (earlier, 0..8usize);
    let bad = prop::collection::vec(any::<bool>(), 4);
    let delays = prop::collection::vec(0..5u64, 1..8);
    let policy = (1..20u64, 0..6u64, prop::option::of(1..3u32));
    (instances, routes, changes, desired, bad, delays, policy).prop_map(
        |(instances, routes, (earlier, steps_each), desired, bad, delays, policy)| {
            let (timeout, grace, surge) = policy;
            let now_ms = 200_000;
            let instances = instances
                .into_iter()
                .enumerate()
                .map(|(n, (revision, state, age))| ObservedInstance {
                    id: format!("old-{n}"),
                    revision: REVISIONS[revision].to_owned(),
                    state,
                    since_ms: now_ms - age,
                })
                .collect();
            Scenario {
                instances,
                routes: unique_weights(&routes),
                now_ms,
                earlier: earlier.iter().map(|d| desired_from(d)).collect(),
                steps_each,
                desired: desired_from(&desired),
                bad: REVISIONS
                    .iter()
                    .zip(bad)
                    .filter(|(_, bad)| *bad)
                    .map(|(name, _)| (*name).to_owned())
                    .collect(),
                delays,
                policy: Policy {
                    start_timeout_ms: timeout * STEP_MS,
                    drain_grace_ms: grace * STEP_MS,
                    max_surge: surge,
                },
            }
        },
    )
}

/// Routes over distinct revisions, summing to 100 or empty.
fn unique_weights(routes: &[(usize, u32)]) -> Vec<RouteWeight> {
    let mut by_revision: BTreeMap<usize, u32> = BTreeMap::new();
    for &(revision, weight) in routes {
        by_revision.insert(revision, weight);
    }
    let weights = to_100(&by_revision.values().copied().collect::<Vec<_>>());
    by_revision
        .keys()
        .zip(weights)
        .filter(|(_, weight)| *weight > 0)
        .map(|(&revision, weight)| RouteWeight::new(REVISIONS[revision], weight))
        .collect()
}

/// Distinct desired revisions with weights summing to 100 (or all zero); a weighted revision
/// has at least one instance.
fn desired_from(revisions: &[(usize, u32, u32)]) -> Desired {
    let mut by_revision: BTreeMap<usize, (u32, u32)> = BTreeMap::new();
    for &(revision, instances, weight) in revisions {
        by_revision.insert(revision, (instances, weight));
    }
    let weights = to_100(&by_revision.values().map(|&(_, w)| w).collect::<Vec<_>>());
    Desired {
        revisions: by_revision
            .iter()
            .zip(weights)
            .map(|((&revision, &(instances, _)), weight)| DesiredRevision {
                name: REVISIONS[revision].to_owned(),
                instances: if weight > 0 {
                    instances.max(1)
                } else {
                    instances
                },
                weight,
            })
            .collect(),
    }
}

/// Runs plan and apply until nothing is left to do, checking the safety properties at every
/// step. Returns the simulator at the end and the number of steps taken.
fn run(scenario: &Scenario) -> Result<(Simulator, usize), TestCaseError> {
    let mut simulator = Simulator::new(scenario);
    for desired in &scenario.earlier {
        for _ in 0..scenario.steps_each {
            step(&mut simulator, desired, &scenario.policy)?;
        }
    }
    for steps in 0..MAX_STEPS {
        let planned = plan(&scenario.desired, &simulator.observed, &scenario.policy);
        if planned.actions.is_empty() && converged(scenario, &simulator) {
            return Ok((simulator, steps));
        }
        step(&mut simulator, &scenario.desired, &scenario.policy)?;
    }
    Err(TestCaseError::fail(format!(
        "not converged after {MAX_STEPS} steps: {:#?}\nplan: {:#?}",
        simulator.observed,
        plan(&scenario.desired, &simulator.observed, &scenario.policy)
    )))
}

/// Plans, applies and lets time pass once, checking the properties that hold at every step.
fn step(
    simulator: &mut Simulator,
    desired: &Desired,
    policy: &Policy,
) -> Result<(), TestCaseError> {
    let planned = plan(desired, &simulator.observed, policy);
    let again = plan(desired, &simulator.observed, policy);
    prop_assert_eq!(&planned, &again, "planning is not deterministic");
    let serves_something = desired.revisions.iter().any(|r| r.weight > 0);
    let was_serving = simulator.serving();
    let before = Before::of(simulator, desired);
    simulator.apply(&planned.actions);
    if serves_something && was_serving {
        check_no_dropped_traffic(simulator, &planned)?;
    }
    check_traffic_moves_only_to_ready_revisions(&before, simulator)?;
    check_no_repeated_starts(desired, policy, simulator)?;
    simulator.advance();
    Ok(())
}

/// Whenever traffic was served before a step, after it the routes sum to 100 and point only at
/// revisions with a ready instance.
fn check_no_dropped_traffic(simulator: &Simulator, planned: &Plan) -> Result<(), TestCaseError> {
    let routes = simulator.routes();
    prop_assert_eq!(
        routes.values().sum::<u32>(),
        100,
        "routes {:?} after {:?}",
        routes,
        planned.actions
    );
    for revision in routes.keys() {
        prop_assert!(
            simulator.ready(revision) > 0,
            "{} routed without a ready instance: {:#?} after {:?}",
            revision,
            simulator.observed,
            planned.actions
        );
    }
    Ok(())
}

/// What the traffic rule looked at before a step.
#[derive(Debug)]
struct Before {
    routes: BTreeMap<String, u32>,
    /// Routed, and every routed revision has a ready instance.
    all_routed_ready: bool,
    /// Revisions with all their desired instances (at least one) ready.
    fully_ready: BTreeSet<String>,
}

impl Before {
    fn of(simulator: &Simulator, desired: &Desired) -> Self {
        let routes = simulator.routes();
        let all_routed_ready =
            !routes.is_empty() && routes.keys().all(|revision| simulator.ready(revision) > 0);
        let wanted = |name: &str| {
            desired
                .revisions
                .iter()
                .find(|r| r.name == name)
                .map_or(0, |r| r.instances)
        };
        let fully_ready = REVISIONS
            .iter()
            .filter(|name| simulator.ready(name) >= wanted(name).max(1) as usize)
            .map(|name| (*name).to_owned())
            .collect();
        Self {
            routes,
            all_routed_ready,
            fully_ready,
        }
    }
}

/// While every routed revision serves, a revision gains traffic only once all its desired
/// instances are ready.
fn check_traffic_moves_only_to_ready_revisions(
    before: &Before,
    simulator: &Simulator,
) -> Result<(), TestCaseError> {
    if !before.all_routed_ready {
        return Ok(());
    }
    for (revision, weight) in simulator.routes() {
        let had = before.routes.get(&revision).copied().unwrap_or(0);
        prop_assert!(
            weight <= had || before.fully_ready.contains(&revision),
            "{} went from {} to {} before all its instances were ready",
            revision,
            had,
            weight
        );
    }
    Ok(())
}

/// Planning again right after applying a plan, before anything changes, starts nothing more:
/// what was started is already counted.
fn check_no_repeated_starts(
    desired: &Desired,
    policy: &Policy,
    simulator: &Simulator,
) -> Result<(), TestCaseError> {
    let replanned = plan(desired, &simulator.observed, policy);
    prop_assert!(
        !replanned
            .actions
            .iter()
            .any(|action| matches!(action, Action::Start { .. } | Action::Replace { .. })),
        "starts repeated: {:?}",
        replanned.actions
    );
    Ok(())
}

/// The end state: every good desired revision has its instances ready, nothing failed or
/// draining is left, and the routes are the desired weights when every weighted revision can
/// become ready.
fn converged(scenario: &Scenario, simulator: &Simulator) -> bool {
    let instances = &simulator.observed.instances;
    let counts_met = scenario.desired.revisions.iter().all(|revision| {
        let of_revision = instances.iter().filter(|i| i.revision == revision.name);
        let routed = simulator.routes().contains_key(&revision.name);
        if revision.instances == 0 && routed {
            // A retired revision keeps its instances while it is routed (rule 4).
            true
        } else if scenario.bad.contains(&revision.name) {
            // A routed revision with no ready instance keeps those that had traffic (rule 3).
            routed
                || of_revision.filter(|i| i.state.is_live()).count() <= revision.instances as usize
        } else {
            let states: Vec<&InstanceState> = of_revision.map(|i| &i.state).collect();
            states.len() == revision.instances as usize && states.iter().all(|s| s.is_ready())
        }
    });
    // A bad revision's failed instance may still wait for its replacement while `max_surge`
    // instances are stuck starting.
    let nothing_left_over = instances.iter().all(|i| {
        i.state != InstanceState::Draining
            && (!i.state.is_dead() || scenario.bad.contains(&i.revision))
    });
    counts_met && nothing_left_over && routes_converged(scenario, simulator)
}

fn routes_converged(scenario: &Scenario, simulator: &Simulator) -> bool {
    let routes = simulator.routes();
    let only_desired_instances = simulator
        .observed
        .instances
        .iter()
        .all(|i| scenario.desired_instances(&i.revision) > 0);
    if scenario.weighted().next().is_none() {
        return routes.is_empty() && only_desired_instances;
    }
    if scenario.weighted().all(|r| !scenario.bad.contains(&r.name)) {
        let desired: BTreeMap<String, u32> = scenario
            .weighted()
            .map(|r| (r.name.clone(), r.weight))
            .collect();
        return routes == desired && only_desired_instances;
    }
    // Some weighted revision never becomes ready: whoever serves keeps serving, and instances
    // of revisions neither desired nor routed are gone.
    let retired_gone =
        simulator.observed.instances.iter().all(|i| {
            scenario.desired_instances(&i.revision) > 0 || routes.contains_key(&i.revision)
        });
    let no_bad_routed_unless_nothing_serves =
        !simulator.serving() || routes.keys().all(|revision| simulator.ready(revision) > 0);
    retired_gone && no_bad_routed_unless_nothing_serves
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn plan_and_apply_converge_without_dropping_traffic(scenario in scenario_strategy()) {
        let (_, steps) = run(&scenario)?;
        prop_assert!(steps <= MAX_STEPS);
    }

    #[test]
    fn planning_is_a_function_of_its_inputs(scenario in scenario_strategy()) {
        let simulator = Simulator::new(&scenario);
        let first = plan(&scenario.desired, &simulator.observed, &scenario.policy);
        let second = plan(&scenario.desired, &simulator.observed, &scenario.policy);
        prop_assert_eq!(first, second);
    }
}

#[test]
fn a_rolling_deploy_converges_in_a_few_steps() {
    let scenario = Scenario {
        instances: vec![
            ObservedInstance {
                id: "a1".to_owned(),
                revision: "r0".to_owned(),
                state: InstanceState::Ready,
                since_ms: 0,
            },
            ObservedInstance {
                id: "a2".to_owned(),
                revision: "r0".to_owned(),
                state: InstanceState::Ready,
                since_ms: 0,
            },
        ],
        routes: vec![RouteWeight::new("r0", 100)],
        now_ms: 10_000,
        earlier: Vec::new(),
        steps_each: 0,
        desired: Desired {
            revisions: vec![DesiredRevision {
                name: "r1".to_owned(),
                instances: 2,
                weight: 100,
            }],
        },
        bad: BTreeSet::new(),
        delays: vec![2, 3],
        policy: Policy {
            start_timeout_ms: 60_000,
            drain_grace_ms: 2_000,
            max_surge: None,
        },
    };
    let (simulator, steps) = run(&scenario).unwrap();
    // Start, wait 3 steps for readiness, shift, drain, wait 2 steps of grace, stop.
    assert!(steps <= 8, "{steps} steps");
    assert_eq!(simulator.observed.routes, vec![RouteWeight::new("r1", 100)]);
    assert!(
        simulator
            .observed
            .instances
            .iter()
            .all(|i| i.revision == "r1")
    );
}
