//! One revision's desired count and observed instances, gathered from the inputs.

use std::collections::BTreeSet;

use crate::model::{Desired, InstanceState, Observed, ObservedInstance};
use crate::routes::{Readiness, Weights};

/// One revision as the planner sees it.
#[derive(Debug)]
pub(crate) struct Revision<'a> {
    pub(crate) name: &'a str,
    /// 0 when the revision is not desired.
    pub(crate) desired_instances: u32,
    /// Desired with traffic weight but no instances: scaled to zero, the ingress holding
    /// its requests until it has an instance again.
    pub(crate) scaled_to_zero: bool,
    /// Its observed instances, ordered by id.
    pub(crate) instances: Vec<&'a ObservedInstance>,
}

impl<'a> Revision<'a> {
    pub(crate) fn ready(&self) -> u32 {
        self.count(InstanceState::is_ready)
    }

    pub(crate) fn live(&self) -> impl Iterator<Item = &'a ObservedInstance> + '_ {
        self.instances
            .iter()
            .copied()
            .filter(|instance| instance.state.is_live())
    }

    pub(crate) fn dead(&self) -> impl Iterator<Item = &'a ObservedInstance> + '_ {
        self.instances
            .iter()
            .copied()
            .filter(|instance| instance.state.is_dead())
    }

    pub(crate) fn draining(&self) -> impl Iterator<Item = &'a ObservedInstance> + '_ {
        self.instances
            .iter()
            .copied()
            .filter(|instance| instance.state == InstanceState::Draining)
    }

    /// Live but not ready: starting, not ready, or crash-looping.
    pub(crate) fn not_ready(&self) -> impl Iterator<Item = &'a ObservedInstance> + '_ {
        self.live().filter(|instance| !instance.state.is_ready())
    }

    pub(crate) fn count(&self, predicate: impl Fn(&InstanceState) -> bool) -> u32 {
        let count = self
            .instances
            .iter()
            .filter(|instance| predicate(&instance.state))
            .count();
        u32::try_from(count).unwrap_or(u32::MAX)
    }
}

/// Every revision that is desired, has instances, or has traffic: the desired ones in desired
/// order, then the others by name.
pub(crate) fn gather<'a>(
    desired: &'a Desired,
    observed: &'a Observed,
    routed: &'a Weights,
) -> Vec<Revision<'a>> {
    let mut seen = BTreeSet::new();
    let mut revisions = Vec::new();
    for wanted in &desired.revisions {
        if seen.insert(wanted.name.as_str()) {
            let mut revision = new_revision(&wanted.name, wanted.instances, observed);
            revision.scaled_to_zero = wanted.instances == 0 && wanted.weight > 0;
            revisions.push(revision);
        }
    }
    let others: BTreeSet<&str> = observed
        .instances
        .iter()
        .map(|instance| instance.revision.as_str())
        .chain(routed.keys().map(String::as_str))
        .filter(|name| !seen.contains(name))
        .collect();
    for name in others {
        revisions.push(new_revision(name, 0, observed));
    }
    revisions
}

fn new_revision<'a>(name: &'a str, desired_instances: u32, observed: &'a Observed) -> Revision<'a> {
    let mut instances: Vec<&ObservedInstance> = observed
        .instances
        .iter()
        .filter(|instance| instance.revision == name)
        .collect();
    instances.sort_by(|a, b| a.id.cmp(&b.id));
    Revision {
        name,
        desired_instances,
        scaled_to_zero: false,
        instances,
    }
}

/// Readiness of gathered revisions, for the route rule.
impl Readiness for [Revision<'_>] {
    fn ready(&self, revision: &str) -> u32 {
        find(self, revision).map_or(0, Revision::ready)
    }

    fn desired_instances(&self, revision: &str) -> u32 {
        find(self, revision).map_or(0, |found| found.desired_instances)
    }
}

fn find<'r, 'a>(revisions: &'r [Revision<'a>], name: &str) -> Option<&'r Revision<'a>> {
    revisions.iter().find(|revision| revision.name == name)
}
