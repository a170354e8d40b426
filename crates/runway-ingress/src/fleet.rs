//! The control plane's handle on ingresses reached over the network: every address that its
//! names resolve to (a Kubernetes headless Service lists each ingress pod), each fed over
//! mutual TLS as [`RemoteIngress`] feeds one.
//!
//! - A table goes to every member at once, and is in force once each took it. A member that
//!   cannot be reached is dropped from the fleet (the error says so, and the controller sends
//!   the table again); it rejoins when its name resolves to it and it answers, and is given
//!   the latest table before it counts as a member again.
//! - A drain waits on every member; the instance is idle when it is idle everywhere.
//! - A revision's figures are the sum over the members. Counters never go down: a member's
//!   restart (counters from zero) and a member's departure are carried, so the canary
//!   analysis and the autoscaler read one ingress however many serve.
//! - Scale-up signals from any member are forwarded.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::config::RouteTableConfig;
use crate::control::{ControlError, Endpoint, RemoteIngress, RemoteOptions};
use crate::control_tls::ClientTls;
use crate::metrics::RevisionStats;
use crate::table::ScaleUp;

/// Where the fleet is and how it is reached.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// `host:port` names, each standing for every address it resolves to.
    pub addresses: Vec<String>,
    pub tls: ClientTls,
    /// How often the names are resolved again (members come and go between).
    pub resolve_every: Duration,
    pub remote: RemoteOptions,
}

type StatsKey = (String, String, String);

/// See the module's documentation.
#[derive(Debug, Clone)]
pub struct IngressFleet {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    options: FleetOptions,
    members: Mutex<BTreeMap<SocketAddr, RemoteIngress>>,
    /// The latest table set, what a joining member is given; held across a set so a member
    /// joins before or after it, never in between.
    table: tokio::sync::Mutex<Option<RouteTableConfig>>,
    scale_up: broadcast::Sender<ScaleUp>,
    counters: Mutex<Counters>,
    /// The table the members serve, as last asked: kept current until this fleet sets one
    /// (a standby control plane takes over from what they serve then, not at its start).
    serving: Mutex<Option<RouteTableConfig>>,
    /// Whether this fleet has set a table.
    fed: std::sync::atomic::AtomicBool,
}

impl IngressFleet {
    /// Resolves the names and says hello to whoever answers (bounded by the options'
    /// timeout), then keeps looking in the background for as long as a handle lives. No
    /// member yet is not an error: they are looked for again every `resolve_every`.
    pub async fn connect(options: FleetOptions) -> Self {
        let found = resolve(&options.addresses).await;
        let mut members = BTreeMap::new();
        let mut serving = None;
        for address in found {
            if let Some(remote) = hello(address, &options).await {
                serving.get_or_insert_with(|| remote.hello().table.clone());
                members.insert(address, remote);
            }
        }
        if members.is_empty() {
            tracing::warn!(
                addresses = options.addresses.join(", "),
                every = ?options.resolve_every,
                "no ingress answers yet; looking again"
            );
        }
        let shared = Arc::new(Shared {
            members: Mutex::new(BTreeMap::new()),
            table: tokio::sync::Mutex::new(None),
            scale_up: broadcast::channel(1024).0,
            counters: Mutex::default(),
            serving: Mutex::new(serving),
            fed: std::sync::atomic::AtomicBool::new(false),
            options,
        });
        for (address, remote) in members {
            shared.join(address, remote);
        }
        tokio::spawn(keep_looking(Arc::downgrade(&shared)));
        Self { shared }
    }

    /// The members' addresses now.
    pub fn members(&self) -> Vec<SocketAddr> {
        self.shared.lock_members().keys().copied().collect()
    }

    /// Sets the table on every member; see the module's documentation.
    pub async fn set_routes(&self, table: &RouteTableConfig) -> Result<(), String> {
        let mut latest = self.shared.table.lock().await;
        *latest = Some(table.clone());
        self.shared
            .fed
            .store(true, std::sync::atomic::Ordering::Release);
        let members: Vec<(SocketAddr, RemoteIngress)> = self
            .shared
            .lock_members()
            .iter()
            .map(|(address, remote)| (*address, remote.clone()))
            .collect();
        if members.is_empty() {
            return Err(format!(
                "no ingress answers at {}",
                self.shared.options.addresses.join(", ")
            ));
        }
        let table = Arc::new(table.clone());
        let mut sets = tokio::task::JoinSet::new();
        for (address, remote) in members {
            let table = Arc::clone(&table);
            sets.spawn(async move { (address, remote.set_routes(&table).await) });
        }
        let mut errors = Vec::new();
        while let Some(done) = sets.join_next().await {
            let Ok((address, result)) = done else {
                continue;
            };
            match result {
                Ok(()) => {}
                // Every member validates the same way: the controller hears it once.
                Err(ControlError::Refused { message }) => errors.push(message),
                Err(error) => {
                    self.shared.leave(address);
                    errors.push(format!(
                        "{}; it leaves the fleet until it answers again",
                        runway_log::chain(&error)
                    ));
                }
            }
        }
        drop(latest);
        self.shared.lock_counters().keep_only(&table);
        errors.dedup();
        match errors.is_empty() {
            true => Ok(()),
            false => Err(errors.join("; ")),
        }
    }

    /// Drains an instance on every member; true when it was idle on all of them in time.
    pub async fn drain(&self, address: SocketAddr, grace: Duration) -> bool {
        let members: Vec<RemoteIngress> = self.shared.lock_members().values().cloned().collect();
        let mut drains = tokio::task::JoinSet::new();
        for remote in members {
            drains.spawn(async move { remote.drain(address, grace).await });
        }
        let mut idle = true;
        while let Some(done) = drains.join_next().await {
            match done {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => idle = false,
                Ok(Err(error)) => {
                    tracing::warn!(
                        %address,
                        error = runway_log::chain(&error),
                        "drain failed"
                    );
                    idle = false;
                }
                Err(_) => idle = false,
            }
        }
        idle
    }

    /// A revision's figures summed over the members, counters carried over restarts and
    /// departures; `None` when no member ever reported it.
    pub fn revision_stats(
        &self,
        service: &str,
        env: &str,
        revision: &str,
    ) -> Option<RevisionStats> {
        let key = (service.to_owned(), env.to_owned(), revision.to_owned());
        let now: Vec<(SocketAddr, RevisionStats)> = self
            .shared
            .lock_members()
            .iter()
            .filter_map(|(address, remote)| {
                Some((*address, remote.revision_stats(service, env, revision)?))
            })
            .collect();
        self.shared.lock_counters().sum(&key, now)
    }

    pub fn subscribe_scale_up(&self) -> broadcast::Receiver<ScaleUp> {
        self.shared.scale_up.subscribe()
    }

    /// The table the members serve: as one answered lately, while this fleet has set none.
    pub fn serving(&self) -> Option<RouteTableConfig> {
        self.shared
            .serving
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Shared {
    fn lock_members(&self) -> std::sync::MutexGuard<'_, BTreeMap<SocketAddr, RemoteIngress>> {
        self.members.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_counters(&self) -> std::sync::MutexGuard<'_, Counters> {
        self.counters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `remote` a member, forwarding its scale-up signals.
    fn join(&self, address: SocketAddr, remote: RemoteIngress) {
        let mut signals = remote.subscribe_scale_up();
        let forward = self.scale_up.clone();
        // Ends when the member's handle is dropped (its sender with it).
        tokio::spawn(async move {
            loop {
                match signals.recv().await {
                    Ok(signal) => {
                        let _ = forward.send(signal);
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        tracing::info!(ingress = %address, "an ingress joined the fleet");
        self.lock_members().insert(address, remote);
    }

    fn leave(&self, address: SocketAddr) {
        if self.lock_members().remove(&address).is_some() {
            self.lock_counters().depart(address);
            tracing::info!(ingress = %address, "an ingress left the fleet");
        }
    }
}

/// Resolves the names again every `resolve_every`: new addresses join (given the latest
/// table first), addresses no name leads to any more leave.
async fn keep_looking(shared: Weak<Shared>) {
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let options = strong.options.clone();
        drop(strong);
        crate::timer::sleep(options.resolve_every).await;
        let found = resolve(&options.addresses).await;
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let known: BTreeSet<SocketAddr> = strong.lock_members().keys().copied().collect();
        for gone in known.difference(&found) {
            strong.leave(*gone);
        }
        for new in found.difference(&known) {
            let Some(remote) = hello(*new, &options).await else {
                continue;
            };
            let latest = strong.table.lock().await;
            if let Some(table) = latest.as_ref()
                && let Err(error) = remote.set_routes(table).await
            {
                tracing::warn!(
                    ingress = %new,
                    error = runway_log::chain(&error),
                    "an ingress did not take the table"
                );
                continue;
            }
            strong.join(*new, remote);
        }
        // Not feeding them (yet): what they serve now, for when this fleet takes over.
        if !strong.fed.load(std::sync::atomic::Ordering::Acquire) {
            let first = strong.lock_members().values().next().cloned();
            if let Some(member) = first
                && let Ok(hello) = member.client().hello().await
            {
                *strong
                    .serving
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(hello.table);
            }
        }
    }
}

/// Every address the names resolve to; a name that does not resolve (no pod yet) adds none.
async fn resolve(names: &[String]) -> BTreeSet<SocketAddr> {
    let mut found = BTreeSet::new();
    for name in names {
        match tokio::net::lookup_host(name.as_str()).await {
            Ok(addresses) => found.extend(addresses),
            Err(error) => tracing::warn!(%name, %error, "cannot resolve an ingress address"),
        }
    }
    found
}

async fn hello(address: SocketAddr, options: &FleetOptions) -> Option<RemoteIngress> {
    let endpoint = Endpoint::Tls {
        address,
        tls: options.tls.clone(),
    };
    match RemoteIngress::connect_to(endpoint, options.remote.clone()).await {
        Ok(remote) => Some(remote),
        Err(error) => {
            tracing::warn!(
                ingress = %address,
                error = runway_log::chain(&error),
                "an ingress does not answer"
            );
            None
        }
    }
}

/// What makes the fleet's counters one ingress's: for each member and revision the last
/// figures seen and what its earlier lives counted; for members gone, what they counted.
#[derive(Debug, Default)]
struct Counters {
    members: HashMap<(SocketAddr, StatsKey), (RevisionStats, RevisionStats)>,
    departed: HashMap<StatsKey, RevisionStats>,
}

impl Counters {
    /// The sum of `now` (each member's latest) with what restarts and departures carry.
    fn sum(
        &mut self,
        key: &StatsKey,
        now: Vec<(SocketAddr, RevisionStats)>,
    ) -> Option<RevisionStats> {
        let departed = self.departed.get(key);
        if now.is_empty() && departed.is_none() {
            return None;
        }
        let mut total = departed.cloned().unwrap_or_default();
        for (address, stats) in now {
            let (last, carried) = self.members.entry((address, key.clone())).or_default();
            // A counter that went down: the member started again from zero.
            if stats.requests < last.requests
                || stats.errors_5xx < last.errors_5xx
                || stats.client_errors < last.client_errors
            {
                add_counters(carried, last);
            }
            add_counters(&mut total, carried);
            add_counters(&mut total, &stats);
            total.in_flight += stats.in_flight;
            total.queued += stats.queued;
            total.held += stats.held;
            *last = stats;
        }
        Some(total)
    }

    /// Forgets what departed members counted for revisions no longer in the table.
    fn keep_only(&mut self, table: &RouteTableConfig) {
        let live: BTreeSet<(&str, &str, &str)> = table
            .routes
            .iter()
            .flat_map(|route| {
                route.revisions.iter().map(|revision| {
                    (
                        route.service.as_str(),
                        route.env.as_str(),
                        revision.name.as_str(),
                    )
                })
            })
            .collect();
        self.departed.retain(|(service, env, revision), _| {
            live.contains(&(service.as_str(), env.as_str(), revision.as_str()))
        });
    }

    /// A member left: what it counted stays in the sum.
    fn depart(&mut self, address: SocketAddr) {
        let gone: Vec<(SocketAddr, StatsKey)> = self
            .members
            .keys()
            .filter(|(member, _)| *member == address)
            .cloned()
            .collect();
        for member_key in gone {
            if let Some((last, carried)) = self.members.remove(&member_key) {
                let into = self.departed.entry(member_key.1).or_default();
                add_counters(into, &carried);
                add_counters(into, &last);
            }
        }
    }
}

/// Adds the counters (not the gauges) of `from` to `into`; latency buckets by their bound.
fn add_counters(into: &mut RevisionStats, from: &RevisionStats) {
    into.requests += from.requests;
    into.errors_5xx += from.errors_5xx;
    into.client_errors += from.client_errors;
    for &(bound, count) in &from.latency_buckets {
        match into
            .latency_buckets
            .iter_mut()
            .find(|(b, _)| b.to_bits() == bound.to_bits())
        {
            Some((_, total)) => *total += count,
            None => into.latency_buckets.push((bound, count)),
        }
    }
    into.latency_buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(requests: u64, errors: u64, in_flight: u64) -> RevisionStats {
        RevisionStats {
            in_flight,
            requests,
            errors_5xx: errors,
            latency_buckets: vec![(0.1, requests / 2), (1.0, requests)],
            ..RevisionStats::default()
        }
    }

    fn at(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    #[test]
    fn figures_are_summed_and_never_go_down() {
        let key: StatsKey = ("web".into(), "dev".into(), "web-1".into());
        let mut counters = Counters::default();
        assert_eq!(counters.sum(&key, vec![]), None);

        let both = counters
            .sum(
                &key,
                vec![(at(1), stats(10, 1, 2)), (at(2), stats(30, 0, 3))],
            )
            .unwrap();
        assert_eq!((both.requests, both.errors_5xx, both.in_flight), (40, 1, 5));
        assert_eq!(both.latency_buckets, vec![(0.1, 20), (1.0, 40)]);

        // The first restarts (counts from zero again): its 10 are carried.
        let restarted = counters
            .sum(
                &key,
                vec![(at(1), stats(4, 0, 0)), (at(2), stats(31, 0, 1))],
            )
            .unwrap();
        assert_eq!((restarted.requests, restarted.errors_5xx), (45, 1));
        assert_eq!(restarted.in_flight, 1);

        // The second leaves: its 31 stay.
        counters.depart(at(2));
        let left = counters.sum(&key, vec![(at(1), stats(5, 0, 0))]).unwrap();
        assert_eq!((left.requests, left.errors_5xx), (46, 1));
        assert_eq!(left.latency_buckets, vec![(0.1, 22), (1.0, 46)]);

        // Another revision is its own.
        let other: StatsKey = ("web".into(), "dev".into(), "web-2".into());
        assert_eq!(counters.sum(&other, vec![]), None);
    }
}
