//! The whole ingress table, built from every service's routes and instances.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use runway_driver::Phase;
use runway_ingress::{InstanceConfig, Protocol, RevisionConfig, RouteConfig, RouteTableConfig};
use runway_reconciler::Condition;

use crate::observe::revision_of;
use crate::state::{Key, ServiceState, State};

/// The table for every service with routes: each routed revision (and each other revision
/// with instances, at weight 0, so its tag host answers) with its ready, non-draining
/// instances, and its draining ones marked so. A registered service with no revision serving
/// has a route with no weight, which the ingress answers with a 503 that says so.
pub(crate) fn build_table(
    state: &State,
    domain: &str,
    environments: &[String],
    fixed: &[RouteConfig],
) -> RouteTableConfig {
    let keys: BTreeSet<&Key> = state
        .services
        .keys()
        .chain(state.adopted.keys())
        .chain(&state.known)
        .collect();
    // By name, whichever services a round reached first; the operator's fixed routes (cell
    // routers, in an env no service is in) among them.
    let mut routes: Vec<RouteConfig> = keys
        .into_iter()
        .filter_map(|key| route_for(state, key))
        .chain(fixed.iter().cloned())
        .collect();
    routes.sort_by(|a, b| (&a.service, &a.env).cmp(&(&b.service, &b.env)));
    RouteTableConfig {
        domain: domain.to_owned(),
        environments: environments.to_vec(),
        routes,
        ..RouteTableConfig::default()
    }
}

/// One service's route in one environment, as [`build_table`] puts it in the table: from its
/// state; served before this controller started and not yet reached by a round, as it was;
/// registered, and neither deployed nor served, a route with no revision.
pub(crate) fn route_for(state: &State, key: &Key) -> Option<RouteConfig> {
    match (state.services.get(key), state.adopted.get(key)) {
        (Some(service), _) => route(state, key, service),
        (None, Some(adopted)) => Some(adopted.clone()),
        (None, None) if state.known.contains(key) => route(state, key, &ServiceState::default()),
        (None, None) => None,
    }
}

/// The route the ingress has for a service in an environment, as last set.
pub(crate) fn applied_route<'a>(state: &'a State, key: &Key) -> Option<&'a RouteConfig> {
    let routes = &state.applied_table.as_ref()?.routes;
    routes
        .binary_search_by(|route| (&route.service, &route.env).cmp(&(&key.0, &key.1)))
        .ok()
        .map(|i| &routes[i])
}

fn route(state: &State, key: &Key, service: &ServiceState) -> Option<RouteConfig> {
    let mut weights: BTreeMap<&str, u32> = service
        .routes
        .iter()
        .filter(|route| route.weight > 0)
        .map(|route| (route.revision.as_str(), route.weight))
        .collect();
    if weights.values().sum::<u32>() != 100 {
        // None serving: a registered service keeps its host (a 503, and its revisions' tag
        // hosts); one decommissioned, draining its last instances, has none.
        if !state.known.contains(key) {
            return None;
        }
        weights.clear();
    }
    let names: BTreeSet<&str> = weights
        .keys()
        .copied()
        .chain(
            service
                .instances
                .iter()
                .filter_map(|status| revision_of(&status.id)),
        )
        .collect();
    let mut seen = BTreeSet::new();
    let revisions: Vec<RevisionConfig> = names
        .into_iter()
        .map(|name| {
            let weight = weights.get(name).copied().unwrap_or(0);
            revision(state, service, name, weight, &mut seen)
        })
        .filter(|revision| revision.weight > 0 || !revision.instances.is_empty())
        .collect();
    let heaviest = weights
        .iter()
        .max_by_key(|(_, weight)| **weight)
        .and_then(|(name, _)| state.revisions.get(*name));
    Some(RouteConfig {
        service: key.0.clone(),
        env: key.1.clone(),
        domains: state.domains.get(key).cloned().unwrap_or_default(),
        request_timeout_seconds: heaviest.map_or(300.0, |info| info.request_timeout_seconds()),
        sticky: false,
        revisions,
        cells: None,
    })
}

fn revision(
    state: &State,
    service: &ServiceState,
    name: &str,
    weight: u32,
    seen: &mut BTreeSet<SocketAddr>,
) -> RevisionConfig {
    let info = state.revisions.get(name);
    let max_concurrency = info.map_or(0, |info| info.max_concurrency());
    let instances = service
        .instances
        .iter()
        .filter(|status| revision_of(&status.id) == Some(name))
        .filter_map(|status| {
            let address = status.address?;
            let draining = status.phase == Phase::Stopping
                || state.retiring.contains_key(&status.id)
                || state
                    .tracked
                    .get(&status.id)
                    .is_some_and(|tracked| tracked.draining_since_ms.is_some());
            let serving = status.phase == Phase::Running && status.ready;
            ((draining || serving) && seen.insert(address)).then_some(InstanceConfig {
                address,
                ready: true,
                draining,
                max_concurrency,
            })
        })
        .collect();
    // Its instances crash or are not ready in time, and none is ready: a request is told so
    // at once, not held for an instance that will not come.
    let failing = service.status.iter().any(|status| {
        status.revision == name
            && status.ready == 0
            && status.failed > 0
            && matches!(
                status.condition,
                Condition::Failing { .. } | Condition::TimedOut { .. }
            )
    });
    RevisionConfig {
        name: name.to_owned(),
        weight,
        tag: info.map(|info| info.tag()),
        average_start_seconds: None,
        protocol: info.map_or(Protocol::Http1, |info| info.protocol()),
        failing,
        instances,
    }
}
