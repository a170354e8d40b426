//! The route table's one owner (omicron's `DnsPropagator`). Each service's reconciler
//! publishes its entry: its route and its instances' addresses. The propagator alone assembles
//! the whole table from the entries, the operator's fixed routes (a cell router's,
//! `ingress.cells`, given with `Controller::fixed_routes`), the platform's environments and
//! the edge's domains, certificates and challenges, and gives it to the data plane.
//!
//! One table is set at a time. Entries published while one is being set go out together in
//! the next, so 1,000 services that change at once cost a few tables, not 1,000 (each of them
//! whole). A publisher returns once a table with its entry is in force, or with the data
//! plane's refusal, its entry then back as it was. Each round publishes too (the services no
//! reconciler reached, those gone) and sets the table when anything else in it changed (a
//! domain, a certificate), so a missed change heals at the next round.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use runway_ingress::{RateLimitConfig, RouteConfig, RouteTableConfig};

use crate::dataplane::DataPlane;
use crate::edge::{Edge, EdgeView};
use crate::key::Key;

/// What one service in one environment puts in the table.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Entry {
    /// Its route; `None` while it has none (a decommissioned service draining).
    pub(crate) route: Option<RouteConfig>,
    /// The addresses of its live instances: who calls, on the private listener.
    pub(crate) callers: BTreeSet<IpAddr>,
    /// Kept as the data plane served it when this controller started: its domains too, until
    /// its reconciler reaches it.
    pub(crate) adopted: bool,
}

/// At most this many refusals are kept for publishers to collect.
const KEPT_REFUSALS: usize = 1_000;

#[derive(Debug, Default)]
struct Inner {
    /// Each key's entry, published changes included, and the generation of its last change.
    entries: BTreeMap<Key, (Entry, u64)>,
    /// Changes not yet in a table the data plane took, oldest first.
    pending: Vec<(u64, Key, Option<Entry>)>,
    /// The entries of the table in force (and, while one is being set, of that table).
    applied_entries: BTreeMap<Key, Entry>,
    /// The table in force: as last set, or found serving.
    applied: Option<RouteTableConfig>,
    /// The last generation given out, and the last one settled (in force or refused).
    generation: u64,
    settled: u64,
    /// The data plane's refusal of a change, by its generation.
    refused: BTreeMap<u64, String>,
}

/// The table's owner: see the module's documentation.
pub(crate) struct Propagator {
    dataplane: Arc<dyn DataPlane>,
    edge: Arc<Edge>,
    pub(crate) domain: String,
    /// The platform's environments: each has a name under the domain the ingress answers.
    pub(crate) environments: Vec<String>,
    /// Routes the operator names besides the services' (cell routers), in every table.
    pub(crate) fixed: Vec<RouteConfig>,
    inner: Mutex<Inner>,
    /// Held while a table is assembled and set: one at a time, in the order of their changes.
    setting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Propagator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Propagator")
            .field("domain", &self.domain)
            .finish_non_exhaustive()
    }
}

impl Propagator {
    pub(crate) fn new(dataplane: Arc<dyn DataPlane>, edge: Arc<Edge>, domain: String) -> Self {
        Self {
            dataplane,
            edge,
            domain,
            environments: Vec::new(),
            fixed: Vec::new(),
            inner: Mutex::default(),
            setting: tokio::sync::Mutex::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts from a table the data plane serves (it outlived the last controller): the table
    /// in force, and the entries of `adopted` routes kept as they are until published anew.
    pub(crate) fn adopt(&self, table: RouteTableConfig, adopted: &[RouteConfig]) {
        let mut inner = self.lock();
        for route in adopted {
            let key = (route.service.clone(), route.env.clone());
            let name = format!("{}/{}", key.0, key.1);
            let entry = Entry {
                route: Some(route.clone()),
                callers: table
                    .callers
                    .iter()
                    .filter(|(_, caller)| **caller == name)
                    .map(|(address, _)| *address)
                    .collect(),
                adopted: true,
            };
            inner.applied_entries.insert(key.clone(), entry.clone());
            inner.entries.insert(key, (entry, 0));
        }
        inner.applied = Some(table);
    }

    /// Forgets everything: a replica that leads again starts as a new controller would.
    pub(crate) fn reset(&self) {
        *self.lock() = Inner::default();
    }

    /// The table in force.
    pub(crate) fn applied(&self) -> Option<RouteTableConfig> {
        self.lock().applied.clone()
    }

    /// The keys with an entry, published or in force.
    pub(crate) fn keys(&self) -> Vec<Key> {
        self.lock().entries.keys().cloned().collect()
    }

    /// `key`'s route in the table in force (or the one being set).
    pub(crate) fn route_in_force(&self, key: &Key) -> Option<RouteConfig> {
        self.lock()
            .applied_entries
            .get(key)
            .and_then(|entry| entry.route.clone())
    }

    /// Whether `key`'s entry is `entry` now (published, maybe not yet in force).
    pub(crate) fn holds(&self, key: &Key, entry: Option<&Entry>) -> bool {
        self.lock().entries.get(key).map(|(held, _)| held) == entry
    }

    /// Publishes `key`'s entry (`None`: it has none) and waits until a table with it is in
    /// force; the data plane's refusal otherwise, the entry then back as it was.
    pub(crate) async fn publish(&self, key: Key, entry: Option<Entry>) -> Result<(), String> {
        self.publish_all(vec![(key, entry)], false).await
    }

    /// Publishes every change at once, and waits as [`Propagator::publish`] does; the first
    /// refusal. With `whole`, the table is assembled again even with no change published, so
    /// whatever else changed in it (the edge's part) is set too.
    pub(crate) async fn publish_all(
        &self,
        changes: Vec<(Key, Option<Entry>)>,
        whole: bool,
    ) -> Result<(), String> {
        let mut waits = Vec::new();
        {
            let mut inner = self.lock();
            for (key, entry) in changes {
                let held = inner.entries.get(&key);
                if held.map(|(held, _)| held) == entry.as_ref() {
                    // Published already: in force, or waited for as the earlier change.
                    if let Some((_, generation)) = held
                        && *generation > inner.settled
                    {
                        waits.push(*generation);
                    }
                    continue;
                }
                inner.generation += 1;
                let generation = inner.generation;
                match &entry {
                    Some(entry) => {
                        inner
                            .entries
                            .insert(key.clone(), (entry.clone(), generation));
                    }
                    None => {
                        inner.entries.remove(&key);
                    }
                }
                inner.pending.push((generation, key, entry));
                waits.push(generation);
            }
        }
        if waits.is_empty() && !whole {
            return Ok(());
        }
        let through = waits.iter().copied().max().unwrap_or(0);
        self.settle(through, whole).await;
        let mut inner = self.lock();
        let mut refusals = waits.iter().filter_map(|g| inner.refused.remove(g));
        refusals.next().map_or(Ok(()), Err)
    }

    /// Sets a table with every change up to `through` (and, with `whole`, the edge's part as it
    /// is now), unless one set meanwhile had them.
    async fn settle(&self, through: u64, whole: bool) {
        let _one = self.setting.lock().await;
        let batch = {
            let mut inner = self.lock();
            if inner.settled >= through && !whole {
                return;
            }
            std::mem::take(&mut inner.pending)
        };
        let (edge_generation, edge) = self.edge.snapshot();
        // Changed in place, with what each change replaced, so a refusal undoes it: the entries
        // are not copied for every table.
        let undo = self.change_in_force(&batch);
        match self.set(&edge).await {
            Ok(()) => {
                self.edge.mark_applied(edge_generation);
                let mut inner = self.lock();
                inner.settled = inner.settled.max(batch.last().map_or(0, |(g, _, _)| *g));
            }
            Err(error) => {
                self.undo(undo);
                if batch.is_empty() {
                    // The edge's part alone was refused: it is tried again at the next round.
                    tracing::warn!(error, "the ingress refused the route table");
                    return;
                }
                // Refused together: one at a time, so each change hears its own answer and
                // the others go out.
                let alone = batch.len() == 1;
                for change in batch {
                    let generation = change.0;
                    let undo = self.change_in_force(std::slice::from_ref(&change));
                    let result = if alone {
                        Err(error.clone())
                    } else {
                        self.set(&edge).await
                    };
                    match result {
                        Ok(()) => self.edge.mark_applied(edge_generation),
                        Err(error) => {
                            self.undo(undo);
                            self.refuse(generation, &change.1, error);
                        }
                    }
                    let mut inner = self.lock();
                    inner.settled = inner.settled.max(generation);
                }
            }
        }
    }

    /// Makes the changes part of the entries in force; what each replaced.
    fn change_in_force(&self, batch: &[(u64, Key, Option<Entry>)]) -> Vec<(Key, Option<Entry>)> {
        let mut inner = self.lock();
        batch
            .iter()
            .map(|(_, key, entry)| {
                let before = match entry {
                    Some(entry) => inner.applied_entries.insert(key.clone(), entry.clone()),
                    None => inner.applied_entries.remove(key),
                };
                (key.clone(), before)
            })
            .collect()
    }

    fn undo(&self, undo: Vec<(Key, Option<Entry>)>) {
        let mut inner = self.lock();
        for (key, before) in undo.into_iter().rev() {
            match before {
                Some(entry) => inner.applied_entries.insert(key, entry),
                None => inner.applied_entries.remove(&key),
            };
        }
    }

    /// The change of `generation` was refused: `key`'s entry goes back to the one in force
    /// (unless changed again since), and its publisher hears why.
    fn refuse(&self, generation: u64, key: &Key, error: String) {
        let mut inner = self.lock();
        if inner.entries.get(key).is_none_or(|(_, g)| *g == generation) {
            match inner.applied_entries.get(key).cloned() {
                Some(entry) => {
                    inner.entries.insert(key.clone(), (entry, 0));
                }
                None => {
                    inner.entries.remove(key);
                }
            }
        }
        inner.refused.insert(generation, error);
        while inner.refused.len() > KEPT_REFUSALS {
            inner.refused.pop_first();
        }
    }

    /// Gives the data plane the table of the entries in force, unless it has it already.
    async fn set(&self, edge: &EdgeView) -> Result<(), String> {
        let table = assemble(
            &self.lock().applied_entries,
            &self.domain,
            &self.environments,
            &self.fixed,
            edge,
        );
        if self.lock().applied.as_ref() == Some(&table) {
            return Ok(());
        }
        self.dataplane.set_routes(&table).await?;
        self.lock().applied = Some(table);
        Ok(())
    }
}

/// The whole table: every entry's route (with its custom domains, unless adopted as served)
/// and the operator's fixed routes, by name; each live instance's address naming its service
/// (one claimed by two services is left out: its caller is refused, never taken for the wrong
/// one); the edge's certificates and challenges.
pub(crate) fn assemble(
    entries: &BTreeMap<Key, Entry>,
    domain: &str,
    environments: &[String],
    fixed: &[RouteConfig],
    edge: &EdgeView,
) -> RouteTableConfig {
    let mut routes: Vec<RouteConfig> = entries
        .iter()
        .filter_map(|(key, entry)| {
            let mut route = entry.route.clone()?;
            if !entry.adopted {
                route.domains = edge.domains.get(key).cloned().unwrap_or_default();
                let controls = &mut route.controls;
                controls.maintenance = edge.maintenance.get(key).cloned();
                controls.client_rate_limit =
                    within_ceiling(controls.client_rate_limit, edge.client_ceiling);
            }
            Some(route)
        })
        .chain(fixed.iter().cloned())
        .collect();
    routes.sort_by(|a, b| (&a.service, &a.env).cmp(&(&b.service, &b.env)));
    let mut found: BTreeMap<IpAddr, Option<String>> = BTreeMap::new();
    for (key, entry) in entries {
        let name = format!("{}/{}", key.0, key.1);
        for address in &entry.callers {
            found
                .entry(address.to_canonical())
                .and_modify(|held| {
                    if held.as_ref() != Some(&name) {
                        *held = None;
                    }
                })
                .or_insert_with(|| Some(name.clone()));
        }
    }
    RouteTableConfig {
        domain: domain.to_owned(),
        environments: environments.to_vec(),
        routes,
        callers: found
            .into_iter()
            .filter_map(|(address, name)| Some((address, name?)))
            .collect(),
        certificates: edge.certificates.clone(),
        acme: edge.acme.clone(),
    }
}

/// A service's per-client rate limit under the operator's ceiling: the lower rate and the
/// smaller burst of the two, or the ceiling for a service that asks none.
fn within_ceiling(
    asked: Option<RateLimitConfig>,
    ceiling: Option<RateLimitConfig>,
) -> Option<RateLimitConfig> {
    match (asked, ceiling) {
        (Some(asked), Some(ceiling)) => Some(RateLimitConfig {
            requests_per_second: asked.requests_per_second.min(ceiling.requests_per_second),
            burst: asked.burst.min(ceiling.burst),
        }),
        (asked, ceiling) => asked.or(ceiling),
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use runway_ingress::{RevisionStats, ScaleUp};
    use tokio::sync::{Notify, broadcast};

    use super::*;

    #[test]
    fn a_client_limit_stays_under_the_operators_ceiling() {
        let limit = |requests_per_second, burst| {
            Some(RateLimitConfig {
                requests_per_second,
                burst,
            })
        };
        assert_eq!(within_ceiling(None, None), None);
        assert_eq!(within_ceiling(limit(5.0, 10), None), limit(5.0, 10));
        assert_eq!(within_ceiling(None, limit(100.0, 200)), limit(100.0, 200));
        assert_eq!(
            within_ceiling(limit(500.0, 10), limit(100.0, 200)),
            limit(100.0, 10)
        );
    }
    use crate::dataplane::BoxFuture;

    /// A data plane that refuses any table with a route of the service `bad`, and counts the
    /// tables it took.
    #[derive(Default)]
    struct Picky {
        taken: AtomicUsize,
        table: Mutex<Option<RouteTableConfig>>,
    }

    impl DataPlane for Picky {
        fn set_routes<'a>(
            &'a self,
            table: &'a RouteTableConfig,
        ) -> BoxFuture<'a, Result<(), String>> {
            Box::pin(async move {
                if table.routes.iter().any(|route| route.service == "bad") {
                    return Err("route bad refused".to_owned());
                }
                self.taken.fetch_add(1, Ordering::SeqCst);
                *self.table.lock().unwrap_or_else(PoisonError::into_inner) = Some(table.clone());
                Ok(())
            })
        }

        fn drain(&self, _: SocketAddr, _: Duration) -> BoxFuture<'static, bool> {
            Box::pin(async { true })
        }

        fn revision_stats(&self, _: &str, _: &str, _: &str) -> Option<RevisionStats> {
            None
        }

        fn subscribe_scale_up(&self) -> broadcast::Receiver<ScaleUp> {
            broadcast::channel(1).1
        }

        fn serving(&self) -> Option<RouteTableConfig> {
            None
        }
    }

    fn entry(service: &str) -> (Key, Option<Entry>) {
        (
            (service.to_owned(), "dev".to_owned()),
            Some(Entry {
                route: Some(RouteConfig::new(service.to_owned(), "dev".to_owned())),
                ..Entry::default()
            }),
        )
    }

    fn propagator(dataplane: &Arc<Picky>) -> Propagator {
        let edge = Arc::new(Edge::new(Arc::new(Notify::new())));
        Propagator::new(
            Arc::clone(dataplane) as Arc<dyn DataPlane>,
            edge,
            "example.test".to_owned(),
        )
    }

    fn served(dataplane: &Picky) -> Vec<String> {
        let table = dataplane
            .table
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let routes = table.iter().flat_map(|table| &table.routes);
        routes.map(|route| route.service.clone()).collect()
    }

    /// Changes published together go out in one table; one the data plane refuses is
    /// answered with its refusal and goes back as it was, and the others go out.
    #[tokio::test]
    async fn changes_go_out_together_and_a_refused_one_alone_is_undone() {
        let dataplane = Arc::new(Picky::default());
        let propagator = propagator(&dataplane);
        propagator
            .publish_all(vec![entry("api"), entry("web")], false)
            .await
            .unwrap();
        assert_eq!(dataplane.taken.load(Ordering::SeqCst), 1);
        assert_eq!(served(&dataplane), ["api", "web"]);

        let (bad, bad_entry) = entry("bad");
        let refused = propagator
            .publish_all(vec![entry("jobs"), (bad.clone(), bad_entry.clone())], false)
            .await;
        assert_eq!(refused, Err("route bad refused".to_owned()));
        assert_eq!(served(&dataplane), ["api", "jobs", "web"]);
        assert!(propagator.holds(&bad, None), "the refused entry is undone");
        assert!(!propagator.holds(&bad, bad_entry.as_ref()));

        // Published again unchanged: no table is set.
        let taken = dataplane.taken.load(Ordering::SeqCst);
        propagator
            .publish_all(vec![entry("api")], false)
            .await
            .unwrap();
        assert_eq!(dataplane.taken.load(Ordering::SeqCst), taken);
        // Gone: out of the next table.
        propagator
            .publish(("web".to_owned(), "dev".to_owned()), None)
            .await
            .unwrap();
        assert_eq!(served(&dataplane), ["api", "jobs"]);
    }
}
