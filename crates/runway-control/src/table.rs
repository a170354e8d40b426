//! Each service's entry in the ingress table, from its routes and instances; the propagator
//! ([`crate::propagate`]) assembles the table from them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use runway_driver::Phase;
use runway_ingress::{InstanceConfig, Protocol, RevisionConfig, RouteConfig};
use runway_reconciler::Condition;

use crate::key::Key;
use crate::observe::revision_of;
use crate::propagate::Entry;
use crate::revision::RevisionInfo;
use crate::state::{ServiceState, State};

/// One service's entry in the table ([`crate::propagate`]): its route, as [`route`] makes it,
/// and the addresses of its live instances (workers' too, so the private listener knows its
/// callers). A registered service not reached by a round yet has a route with no revision
/// (the ingress answers a 503 that says so); one neither registered nor with state, none.
/// Takes the service's cell: the caller holds the controller's lock, not the cell.
pub(crate) fn entry_for(state: &State, key: &Key) -> Option<Entry> {
    let service = state.services.get(key).map(|cell| cell.lock());
    let Some(service) = service.filter(|service| service.planned) else {
        return state.known.contains(key).then(|| Entry {
            route: route(state, key, &ServiceState::default()),
            ..Entry::default()
        });
    };
    let callers: BTreeSet<IpAddr> = service
        .instances
        .iter()
        .filter(|status| !matches!(status.phase, Phase::Stopped | Phase::Exited | Phase::Failed))
        .filter_map(|status| status.address.map(|address| address.ip()))
        .collect();
    let route = route(state, key, &service);
    (route.is_some() || !callers.is_empty()).then_some(Entry {
        route,
        callers,
        adopted: false,
    })
}

/// Who reaches a route, from its heaviest revision's manifest: the public listeners unless
/// `external_load_balancer.enabled` is false; the private name when it is internal, to its
/// callers; only Cloudflare's addresses when `network_policies.cloudflare` is true; the
/// header that picks a revision by its tag (`spec.workload.tag_header`); and how fast, and
/// from which addresses (`spec.workload.rate_limit`, `client_addresses`). A revision
/// whose manifest cannot be read leaves the route public only, as before these fields.
fn access(route: &mut RouteConfig, info: Option<&RevisionInfo>) {
    let Some(Ok(config)) = info.map(|info| &info.config) else {
        return;
    };
    route.public = config.external;
    route.private = config.internal;
    route.callers = config.callers.clone();
    route.cloudflare = config
        .manifest
        .spec
        .network_policies
        .as_ref()
        .and_then(|policies| policies.cloudflare)
        .unwrap_or(false);
    route.tag_header = config
        .manifest
        .spec
        .workload
        .as_ref()
        .and_then(|workload| workload.tag_header.clone());
    let bucket = |b: runway_manifest::TokenBucket| runway_ingress::RateLimitConfig {
        requests_per_second: b.requests_per_second,
        burst: b.burst,
    };
    let traffic = &config.traffic;
    route.controls = runway_ingress::ControlsConfig {
        rate_limit: traffic.rate_limit.map(bucket),
        client_rate_limit: traffic.per_client.map(bucket),
        allow: traffic.allow.clone(),
        deny: traffic.deny.clone(),
        maintenance: None,
    };
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
    let mut route = RouteConfig {
        request_timeout_seconds: heaviest.map_or(300.0, |info| info.request_timeout_seconds()),
        revisions,
        ..RouteConfig::new(key.0.clone(), key.1.clone())
    };
    access(&mut route, heaviest.map(|info| &**info));
    Some(route)
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
                || service.retiring.contains_key(&status.id)
                || service
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use runway_driver::Replica;
    use runway_reconciler::RouteWeight;

    use runway_ingress::RouteTableConfig;

    use super::*;

    /// The table of every service in `state`, as the propagator assembles it.
    fn build_table(
        state: &State,
        domain: &str,
        environments: &[String],
        fixed: &[RouteConfig],
    ) -> RouteTableConfig {
        let entries = state
            .services
            .keys()
            .chain(&state.known)
            .filter_map(|key| Some((key.clone(), entry_for(state, key)?)))
            .collect();
        crate::propagate::assemble(
            &entries,
            domain,
            environments,
            fixed,
            &crate::edge::EdgeView::default(),
        )
    }

    /// A revision of `service` in `env` whose manifest's spec has `spec` besides a port.
    fn info(service: &str, env: &str, spec: serde_json::Value) -> Arc<RevisionInfo> {
        let mut manifest = serde_json::json!({
            "apiVersion": "runway/v1",
            "kind": "RunwayService",
            "metadata": {"name": service},
            "spec": {"container_port": 8080},
        });
        if let (Some(base), Some(extra)) = (manifest["spec"].as_object_mut(), spec.as_object()) {
            base.extend(extra.clone());
        }
        Arc::new(RevisionInfo::new(runway_store::Revision {
            id: 1,
            service: service.to_owned(),
            env: env.to_owned(),
            number: 1,
            name: format!("{service}-{env}-00001"),
            manifest,
            artifact: serde_json::json!({"image": "example.test/app@sha256:00"}),
            env_vars: BTreeMap::new(),
            set_vars: Default::default(),
            secret_versions: BTreeMap::new(),
            created_by: "test".to_owned(),
            created_at: runway_store::Timestamp::now(),
        }))
    }

    fn replica(revision: &str, suffix: &str, phase: Phase, address: &str) -> Replica {
        Replica {
            id: format!("{revision}-{suffix}"),
            service: None,
            revision: Some(revision.to_owned()),
            managed: true,
            phase,
            ready: phase == Phase::Running,
            address: Some(address.parse().unwrap()),
            restarts: 0,
            consecutive_failures: 0,
            started_at_ms: None,
            next_start_at_ms: None,
            message: String::new(),
            warning: None,
            last_exit: None,
        }
    }

    /// An instance: its id's suffix, its phase, its address.
    type Instance<'a> = (&'a str, Phase, &'a str);

    /// A state with one service per `(service, env, spec, instances)`, each served whole by
    /// its one revision.
    fn state(services: &[(&str, &str, serde_json::Value, Vec<Instance<'_>>)]) -> State {
        let mut state = State::default();
        for (service, env, spec, instances) in services {
            let info = info(service, env, spec.clone());
            let name = info.record.name.clone();
            let key: Key = ((*service).to_owned(), (*env).to_owned());
            state.known.insert(key.clone());
            let service = ServiceState {
                planned: true,
                routes: vec![RouteWeight::new(name.clone(), 100)],
                instances: instances
                    .iter()
                    .map(|(suffix, phase, address)| replica(&name, suffix, *phase, address))
                    .collect(),
                ..ServiceState::default()
            };
            state
                .services
                .insert(key, Arc::new(crate::state::Cell::new(service)));
            state.revisions.insert(name, info);
        }
        state
    }

    /// A route's listeners and callers come from its serving revision's manifest; one without
    /// those fields is public only, as before them.
    #[test]
    fn routes_carry_who_reaches_them() {
        let state = state(&[
            (
                "api",
                "prod",
                serde_json::json!({
                    "load_balancing": {
                        "external_load_balancer": {"enabled": false},
                        "internal_load_balancer": {"enabled": true},
                    },
                }),
                vec![],
            ),
            (
                "billing",
                "prod",
                serde_json::json!({"workload": {"callers": ["api", "web/prod"]}}),
                vec![],
            ),
            (
                "web",
                "prod",
                serde_json::json!({"network_policies": {"cloudflare": true}}),
                vec![],
            ),
            ("plain", "prod", serde_json::json!({}), vec![]),
        ]);
        let table = build_table(&state, "example.test", &[], &[]);
        let route = |service: &str| {
            let route = table
                .routes
                .iter()
                .find(|route| route.service == service)
                .unwrap();
            (
                route.public,
                route.private,
                route.callers.clone(),
                route.cloudflare,
            )
        };
        assert_eq!(route("api"), (false, true, vec![], false));
        assert_eq!(
            route("billing"),
            (
                true,
                true,
                vec!["api".to_owned(), "web/prod".to_owned()],
                false
            )
        );
        assert_eq!(route("web"), (true, false, vec![], true));
        assert_eq!(route("plain"), (true, false, vec![], false));
        runway_ingress::Ingress::new(runway_ingress::Options::default())
            .set_routes(&table)
            .unwrap();
    }

    /// Every live instance with an address is a caller, by its address; an ended one is not,
    /// and an address two services claim is nobody's.
    #[test]
    fn the_table_names_every_instance_by_address() {
        let state = state(&[
            (
                "api",
                "prod",
                serde_json::json!({}),
                vec![
                    ("aaaaaa", Phase::Running, "10.213.0.6:8080"),
                    ("bbbbbb", Phase::Starting, "10.213.0.10:8080"),
                    ("cccccc", Phase::Stopped, "10.213.0.14:8080"),
                    ("dddddd", Phase::Running, "10.213.0.18:8080"),
                ],
            ),
            (
                "worker",
                "dev",
                serde_json::json!({}),
                vec![
                    ("eeeeee", Phase::Running, "10.213.0.22:8080"),
                    ("ffffff", Phase::Running, "10.213.0.18:9090"),
                ],
            ),
        ]);
        let table = build_table(&state, "example.test", &[], &[]);
        let expected: BTreeMap<IpAddr, String> = [
            ("10.213.0.6", "api/prod"),
            ("10.213.0.10", "api/prod"),
            ("10.213.0.22", "worker/dev"),
        ]
        .into_iter()
        .map(|(address, name)| (address.parse().unwrap(), name.to_owned()))
        .collect();
        assert_eq!(table.callers, expected);
    }
}
