//! The route table the data plane reads: built from a [`RouteTableConfig`], swapped whole.
//!
//! A revision's and an instance's live state (requests in flight, queue, idle connections)
//! outlives a table: a new table reuses the state of every revision and instance it keeps, so a
//! swap drops no request and resets no counter. Requests hold `Arc`s to what they use, so an
//! instance removed from the table still finishes what it was given.
//!
//! A table also holds what TLS and ACME need of it: its certificates by name, its TLS-ALPN-01
//! challenge certificates, its HTTP-01 answers. Certificates are parsed when a table is set,
//! once per distinct PEM: tables are swapped often, and an unchanged certificate is taken
//! from the one before.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use rustls::sign::CertifiedKey;
use tokio::sync::{Notify, broadcast};

use crate::config::{Protocol, RouteTableConfig};
use crate::error::ConfigError;
use crate::metrics::{Metrics, RevisionMetrics};
use crate::tls::PemPair;
use crate::upstream::Pool;

/// The shortest hold by default, Cloud Run's rule: a request waits for a ready instance the
/// longer of this or 3.5 × the revision's average start time.
pub const MIN_HOLD: Duration = Duration::from_secs(10);

/// Failures in a row (refused or broken connections) after which an instance is ejected
/// (passive health).
pub const EJECT_AFTER: u32 = 3;
/// How long an ejected instance gets no requests, unless every instance is ejected.
pub const EJECT_FOR: Duration = Duration::from_secs(10);

/// Milliseconds on a monotonic clock private to this process (0 is never a real time).
fn now_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
        + 1
}

/// One instance's live state.
#[derive(Debug)]
pub struct Instance {
    pub address: SocketAddr,
    ready: AtomicBool,
    draining: AtomicBool,
    limit: AtomicU32,
    in_flight: AtomicUsize,
    h2c: AtomicBool,
    failures: AtomicU32,
    ejected_until_ms: AtomicU64,
    pub(crate) pool: Pool,
    idle: Notify,
}

impl Instance {
    fn new(address: SocketAddr) -> Self {
        Self {
            address,
            ready: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            limit: AtomicU32::new(0),
            in_flight: AtomicUsize::new(0),
            h2c: AtomicBool::new(false),
            failures: AtomicU32::new(0),
            ejected_until_ms: AtomicU64::new(0),
            pool: Pool::default(),
            idle: Notify::new(),
        }
    }

    /// Requests this instance is serving now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Whether requests go to it over HTTP/2 with prior knowledge (gRPC), not HTTP/1.1.
    pub fn is_h2c(&self) -> bool {
        self.h2c.load(Ordering::Relaxed)
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    fn eligible(&self) -> bool {
        self.serving() && !self.is_ejected()
    }

    /// Ready and not draining, ejected or not.
    fn serving(&self) -> bool {
        self.ready.load(Ordering::Acquire) && !self.is_draining()
    }

    /// Ejected after connection failures in a row (passive health).
    pub fn is_ejected(&self) -> bool {
        let until = self.ejected_until_ms.load(Ordering::Relaxed);
        until != 0 && now_ms() < until
    }

    /// A connection to it could not be made, or broke before a response head came back; the
    /// [`EJECT_AFTER`]th failure in a row ejects it.
    pub(crate) fn failed(&self) {
        if self.failures.fetch_add(1, Ordering::AcqRel) + 1 >= EJECT_AFTER {
            self.failures.store(0, Ordering::Release);
            self.ejected_until_ms
                .store(now_ms() + EJECT_FOR.as_millis() as u64, Ordering::Relaxed);
        }
    }

    /// A request reached it.
    pub(crate) fn connected(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Release);
        }
    }

    fn has_room(&self) -> bool {
        let limit = self.limit.load(Ordering::Relaxed) as usize;
        limit == 0 || self.in_flight() < limit
    }

    /// Takes one slot under the concurrency limit.
    fn try_acquire(&self) -> bool {
        let limit = self.limit.load(Ordering::Relaxed) as usize;
        if limit == 0 {
            // No limit: one add, no compare-and-swap loop.
            self.in_flight.fetch_add(1, Ordering::AcqRel);
            return true;
        }
        let mut current = self.in_flight.load(Ordering::Relaxed);
        loop {
            if limit != 0 && current >= limit {
                return false;
            }
            match self.in_flight.compare_exchange_weak(
                current,
                current + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => current = now,
            }
        }
    }

    pub(crate) fn release(&self) {
        let before = self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if before == 1 && self.is_draining() {
            self.idle.notify_waiters();
        }
    }

    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
        self.pool.close_idle();
        if self.in_flight() == 0 {
            self.idle.notify_waiters();
        }
    }

    /// Waits until no request is in flight on this instance, at most `grace`; true when it
    /// became idle.
    pub async fn wait_idle(&self, grace: Duration) -> bool {
        let deadline = std::time::Instant::now() + grace;
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.in_flight() == 0 {
                return true;
            }
            if crate::timer::timeout_at(deadline, idle).await.is_err() {
                return self.in_flight() == 0;
            }
        }
    }
}

/// Published when a request is held for a revision that has no ready instance (once each time
/// the number held rises from zero): the autoscaler's cue to start one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScaleUp {
    pub service: String,
    pub env: String,
    pub revision: String,
}

/// One revision's live state.
#[derive(Debug)]
pub struct Revision {
    pub service: String,
    pub env: String,
    pub name: String,
    instances: ArcSwap<Vec<Arc<Instance>>>,
    /// Woken when a slot frees up or the table changes; waiters re-check.
    pub(crate) changed: Notify,
    pub(crate) queued: AtomicUsize,
    pub(crate) held: AtomicUsize,
    hold_timeout_ms: AtomicU64,
    /// The control plane says its instances fail to start: none ready means a 503 at once.
    failing: AtomicBool,
    removed: AtomicBool,
    pub(crate) metrics: RevisionMetrics,
}

/// What a try at picking an instance found.
#[derive(Debug)]
pub(crate) enum Pick {
    /// A slot taken on this instance; the caller must release it.
    Got(Arc<Instance>),
    /// Ready instances exist but all are at their limit.
    Busy,
    /// No ready instance.
    NoneReady,
}

impl Revision {
    /// A revision outside any table with one ready instance at `address`: a cell the
    /// topology service named that the route's own topology does not list.
    pub(crate) fn single(
        service: &str,
        env: &str,
        name: String,
        address: SocketAddr,
        metrics: &Metrics,
    ) -> Self {
        let instance = Instance::new(address);
        instance.ready.store(true, Ordering::Release);
        Self {
            service: service.to_owned(),
            env: env.to_owned(),
            metrics: metrics.revision(service, env, &name),
            name,
            instances: ArcSwap::from_pointee(vec![Arc::new(instance)]),
            changed: Notify::new(),
            queued: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            hold_timeout_ms: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            removed: AtomicBool::new(false),
        }
    }

    pub fn instances(&self) -> Arc<Vec<Arc<Instance>>> {
        self.instances.load_full()
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    pub(crate) fn hold_timeout(&self) -> Duration {
        Duration::from_millis(self.hold_timeout_ms.load(Ordering::Relaxed))
    }

    /// Its instances fail to start, so a request is not held for one.
    pub(crate) fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Acquire)
    }

    /// Least outstanding requests among ready instances, by the power of two choices.
    pub(crate) fn try_pick(&self) -> Pick {
        let instances = self.instances.load();
        let n = instances.len();
        if n == 0 {
            return Pick::NoneReady;
        }
        if n > 1 {
            for _ in 0..2 {
                let a = fastrand::usize(..n);
                let mut b = fastrand::usize(..n - 1);
                if b >= a {
                    b += 1;
                }
                let (x, y) = (&instances[a], &instances[b]);
                let best = match (x.eligible() && x.has_room(), y.eligible() && y.has_room()) {
                    (true, true) if y.in_flight() < x.in_flight() => y,
                    (true, _) => x,
                    (false, true) => y,
                    (false, false) => break,
                };
                if best.try_acquire() {
                    return Pick::Got(Arc::clone(best));
                }
            }
        }
        // Few or busy instances: scan them all, least loaded first; when every serving
        // instance is ejected, ejection is ignored rather than refusing all traffic.
        let mut any_ready = false;
        let all_ejected = !instances.iter().any(|i| i.eligible());
        loop {
            let mut best: Option<&Arc<Instance>> = None;
            for inst in instances.iter().filter(|i| {
                if all_ejected {
                    i.serving()
                } else {
                    i.eligible()
                }
            }) {
                any_ready = true;
                if inst.has_room() && best.is_none_or(|b| inst.in_flight() < b.in_flight()) {
                    best = Some(inst);
                }
            }
            match best {
                Some(inst) if inst.try_acquire() => return Pick::Got(Arc::clone(inst)),
                Some(_) => continue,
                None if any_ready => return Pick::Busy,
                None => return Pick::NoneReady,
            }
        }
    }

    /// Gives back a slot taken by [`Revision::try_pick`].
    pub(crate) fn release(&self, instance: &Instance) {
        instance.release();
        if self.queued.load(Ordering::Acquire) > 0 {
            self.changed.notify_waiters();
        }
    }
}

/// A route as the data plane reads it.
#[derive(Debug)]
pub struct Route {
    pub service: String,
    pub env: String,
    pub request_timeout: Duration,
    /// A cookie keeps a client on the revision it was first given.
    pub sticky: bool,
    /// Revisions with their weights (summing to 100, or all 0 while none serves). A
    /// cell-routed route's are its cells, each weighing 0: its rules choose.
    pub revisions: Vec<(u32, Arc<Revision>)>,
    /// Cell routing: the rules and topology that choose among `revisions`.
    pub cells: Option<Arc<crate::cells::CellRouting>>,
    /// Public clients only from the operator's Cloudflare ranges.
    pub cloudflare: bool,
    /// Who may call its private name (`service` or `service/env`); empty, any instance.
    pub callers: Vec<String>,
    /// The header that picks a revision by its tag on the route's own names, and the
    /// revisions by tag; none, a request carrying [`crate::proxy::RUNWAY_TAG`] is refused.
    pub tag_header: Option<(http::HeaderName, HashMap<String, Arc<Revision>>)>,
    /// Rate limits, address lists, maintenance; none for most routes, which then pay one
    /// branch for them.
    pub(crate) controls: Option<Box<crate::controls::Controls>>,
}

impl Route {
    /// A revision chosen by weight; none while no revision serves.
    pub(crate) fn choose(&self) -> Option<&Arc<Revision>> {
        let mut roll = fastrand::u32(..100);
        for (weight, revision) in &self.revisions {
            if roll < *weight {
                return Some(revision);
            }
            roll -= weight;
        }
        // Weights are validated to sum to 100 or 0, so the loop has returned unless all are 0.
        None
    }
}

/// Where a host leads.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) route: Arc<Route>,
    /// A tag host pins one revision.
    pub(crate) revision: Option<Arc<Revision>>,
}

/// An instance of the platform calling on the private listener.
#[derive(Debug)]
pub(crate) struct Caller {
    /// `service/env`.
    pub(crate) name: String,
    /// The same, as `Runway-Caller`'s value.
    pub(crate) header: http::HeaderValue,
}

/// One immutable route table.
#[derive(Debug, Default)]
pub struct Table {
    /// The public listeners' hosts.
    hosts: HashMap<String, Target>,
    /// The private listener's: `<service>.<env>.internal` and its tags'.
    private_hosts: HashMap<String, Target>,
    /// The platform's instances by address.
    callers: HashMap<IpAddr, Caller>,
    /// Where a host no route names goes: a route whose domains hold `*`.
    fallback: Option<Target>,
    routes: Vec<Arc<Route>>,
    /// `{env}.{domain}` of every route: the platform's own names live under these.
    parents: HashSet<String>,
    /// The table's certificates by name (`*.example.com` for a wildcard).
    certificates: HashMap<String, Arc<CertifiedKey>>,
    /// TLS-ALPN-01 challenge certificates by name.
    challenges: HashMap<String, Arc<CertifiedKey>>,
    /// HTTP-01: token → key authorization.
    http01: HashMap<String, Bytes>,
}

impl Table {
    /// The route for a host (lower case, without port) on the public listeners. A `.internal`
    /// name never reaches a route there, not even through `*`.
    pub(crate) fn resolve(&self, host: &str) -> Option<&Target> {
        match self.hosts.get(host) {
            Some(target) => Some(target),
            None if host.ends_with(".internal") => None,
            None => self.fallback.as_ref(),
        }
    }

    /// The route for a host on the private listener.
    pub(crate) fn resolve_private(&self, host: &str) -> Option<&Target> {
        self.private_hosts.get(host)
    }

    /// Whether the private listener serves `host` (lower case, no trailing dot).
    pub fn serves_privately(&self, host: &str) -> bool {
        self.private_hosts.contains_key(host)
    }

    /// The instance at `address`, if it is one of the platform's.
    pub(crate) fn caller(&self, address: IpAddr) -> Option<&Caller> {
        self.callers.get(&address.to_canonical())
    }

    /// Whether some route takes `host`, by name or through `*`.
    #[cfg(test)]
    pub(crate) fn resolve_any(&self, host: &str) -> bool {
        self.resolve(host).is_some()
    }

    /// Whether a route names `host` itself (not through `*`): only such a name, never any a
    /// client sends, gets a certificate from the local authority.
    pub(crate) fn names(&self, host: &str) -> bool {
        self.hosts.contains_key(host)
    }

    /// The platform's name `host` would have, `{env}.{domain}`, for one of its environments
    /// (or where some route's generated names live): a name under it that no route serves is
    /// answered with a 404, after a handshake with that parent's wildcard certificate, not
    /// refused at the handshake.
    pub(crate) fn platform_parent<'a>(&self, host: &'a str) -> Option<&'a str> {
        let (_, parent) = host.split_once('.')?;
        self.parents.contains(parent).then_some(parent)
    }

    pub fn routes(&self) -> &[Arc<Route>] {
        &self.routes
    }

    /// The table's certificate for `name` (lower case): its own, else its parent's wildcard.
    pub(crate) fn certificate(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        if self.certificates.is_empty() {
            return None;
        }
        if let Some(key) = self.certificates.get(name) {
            return Some(Arc::clone(key));
        }
        let (_, parent) = name.split_once('.')?;
        self.certificates.get(&format!("*.{parent}")).cloned()
    }

    /// The TLS-ALPN-01 challenge certificate for `name` (lower case).
    pub(crate) fn challenge(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.challenges.get(name).cloned()
    }

    /// The HTTP-01 key authorization for `token`.
    pub(crate) fn http01(&self, token: &str) -> Option<&Bytes> {
        self.http01.get(token)
    }
}

/// Parsed certificates by their PEM, kept from one table to the next: the certificate's PEM
/// leads to its key's PEM and what the two gave.
type Parsed = HashMap<String, (String, Arc<PemPair>)>;

/// What a table gives TLS and ACME, parsed.
struct Secured {
    certificates: HashMap<String, Arc<CertifiedKey>>,
    challenges: HashMap<String, Arc<CertifiedKey>>,
    http01: HashMap<String, Bytes>,
}

/// A certificate of the new table: the one parsed for the last table if its PEM is the same,
/// else parsed now; kept in `fresh` for the next.
fn parsed(
    old: &mut Parsed,
    fresh: &mut Parsed,
    cert_pem: &str,
    key_pem: &str,
    parse: impl FnOnce() -> Result<PemPair, ConfigError>,
) -> Result<Arc<PemPair>, ConfigError> {
    if let Some((key, pair)) = fresh.get(cert_pem)
        && key == key_pem
    {
        return Ok(Arc::clone(pair));
    }
    let pair = match old.remove(cert_pem) {
        Some((key, pair)) if key == key_pem => pair,
        _ => Arc::new(parse()?),
    };
    fresh.insert(cert_pem.to_owned(), (key_pem.to_owned(), Arc::clone(&pair)));
    Ok(pair)
}

type RevisionKey = (String, String, String);

/// The current table, and the live state that outlives tables.
#[derive(Debug)]
pub struct Routes {
    current: ArcSwap<Table>,
    /// The current table's certificates, parsed (see [`parsed`]).
    parsed: Mutex<Parsed>,
    revisions: Mutex<HashMap<RevisionKey, Arc<Revision>>>,
    metrics: Arc<Metrics>,
    scale_up: broadcast::Sender<ScaleUp>,
    min_hold: Duration,
    /// [`crate::Options::max_rate_limited_clients`].
    max_clients: usize,
}

impl Routes {
    pub(crate) fn new(metrics: Arc<Metrics>, min_hold: Duration, max_clients: usize) -> Self {
        Self {
            current: ArcSwap::from_pointee(Table::default()),
            parsed: Mutex::new(HashMap::new()),
            revisions: Mutex::new(HashMap::new()),
            metrics,
            scale_up: broadcast::channel(1024).0,
            min_hold,
            max_clients,
        }
    }

    pub fn load(&self) -> Arc<Table> {
        self.current.load_full()
    }

    pub(crate) fn load_guard(&self) -> arc_swap::Guard<Arc<Table>> {
        self.current.load()
    }

    pub fn subscribe_scale_up(&self) -> broadcast::Receiver<ScaleUp> {
        self.scale_up.subscribe()
    }

    pub(crate) fn publish_scale_up(&self, revision: &Revision) {
        // Nobody listening is fine: the held-requests gauge says the same.
        let _ = self.scale_up.send(ScaleUp {
            service: revision.service.clone(),
            env: revision.env.clone(),
            revision: revision.name.clone(),
        });
    }

    /// The table's certificates and challenges, parsed (those seen in the last table are not
    /// parsed again) and checked; on an error nothing changes.
    fn secure(&self, config: &RouteTableConfig) -> Result<Secured, ConfigError> {
        let mut old = self
            .parsed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut fresh = Parsed::new();
        let mut parse_all = || -> Result<Secured, ConfigError> {
            let mut certificates = HashMap::new();
            for certificate in &config.certificates {
                let pair = parsed(
                    &mut old,
                    &mut fresh,
                    &certificate.cert_pem,
                    &certificate.key_pem,
                    || certificate.parse(),
                )?;
                certificate.check_parsed(&pair)?;
                for domain in &certificate.domains {
                    certificates.insert(domain.clone(), Arc::clone(&pair.key));
                }
            }
            let mut challenges = HashMap::new();
            for (domain, certificate) in &config.acme.tls_alpn01 {
                let pair = parsed(
                    &mut old,
                    &mut fresh,
                    &certificate.cert_pem,
                    &certificate.key_pem,
                    || certificate.parse(domain),
                )?;
                certificate.check_parsed(domain, &pair)?;
                challenges.insert(domain.clone(), Arc::clone(&pair.key));
            }
            let http01 = config
                .acme
                .http01
                .iter()
                .map(|(token, answer)| (token.clone(), Bytes::from(answer.clone())))
                .collect();
            Ok(Secured {
                certificates,
                challenges,
                http01,
            })
        };
        let secured = parse_all();
        match &secured {
            Ok(_) => *old = fresh,
            // The table is refused; what was parsed for the one in force is kept.
            Err(_) => old.extend(fresh),
        }
        secured
    }

    /// Replaces the whole table. The config must be valid but for its keys
    /// ([`RouteTableConfig::validate_without_keys`]): its certificates are parsed and checked
    /// here, and a bad one refuses the table, which then changes nothing. Instances and
    /// revisions that leave the table start draining.
    pub(crate) fn set(&self, config: &RouteTableConfig) -> Result<(), ConfigError> {
        let Secured {
            certificates,
            challenges,
            http01,
        } = self.secure(config)?;
        let mut registry = self
            .revisions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut kept: HashMap<RevisionKey, Arc<Revision>> = HashMap::new();
        let mut hosts = HashMap::new();
        let mut private_hosts = HashMap::new();
        let mut parents: HashSet<String> = config
            .environments
            .iter()
            .map(|env| format!("{env}.{}", config.domain).to_ascii_lowercase())
            .collect();
        let mut routes = Vec::new();
        let mut fallback = None;
        // The table in force, read once: its routes' controls, whose buckets carry over.
        let previous_table = self.current.load();
        let previous_controls: HashMap<(&str, &str), &crate::controls::Controls> = previous_table
            .routes
            .iter()
            .filter_map(|r| Some(((r.service.as_str(), r.env.as_str()), r.controls.as_deref()?)))
            .collect();
        let client_share = crate::controls::client_share(
            self.max_clients,
            config
                .routes
                .iter()
                .filter(|rc| rc.controls.client_rate_limit.is_some())
                .count(),
        );
        for rc in &config.routes {
            let mut revisions = Vec::new();
            let mut tagged = Vec::new();
            // A cell-routed route's upstreams are its cells, one revision each.
            let cell_revisions = rc.cells.as_ref().map(crate::cells::revisions);
            for rev in cell_revisions.as_deref().unwrap_or(&rc.revisions) {
                let key = (rc.service.clone(), rc.env.clone(), rev.name.clone());
                let state = registry.get(&key).cloned().unwrap_or_else(|| {
                    Arc::new(Revision {
                        service: rc.service.clone(),
                        env: rc.env.clone(),
                        name: rev.name.clone(),
                        instances: ArcSwap::from_pointee(Vec::new()),
                        changed: Notify::new(),
                        queued: AtomicUsize::new(0),
                        held: AtomicUsize::new(0),
                        hold_timeout_ms: AtomicU64::new(0),
                        failing: AtomicBool::new(false),
                        removed: AtomicBool::new(false),
                        metrics: self.metrics.revision(&rc.service, &rc.env, &rev.name),
                    })
                });
                let hold = self.min_hold.max(Duration::from_secs_f64(
                    3.5 * rev.average_start_seconds.unwrap_or(0.0),
                ));
                state
                    .hold_timeout_ms
                    .store(hold.as_millis() as u64, Ordering::Relaxed);
                state.failing.store(rev.failing, Ordering::Release);
                let old = state.instances.load_full();
                let mut list = Vec::with_capacity(rev.instances.len());
                for ic in &rev.instances {
                    let inst = old
                        .iter()
                        .find(|i| i.address == ic.address && !i.is_draining())
                        .cloned()
                        .unwrap_or_else(|| Arc::new(Instance::new(ic.address)));
                    inst.ready.store(ic.ready, Ordering::Release);
                    inst.limit.store(ic.max_concurrency, Ordering::Relaxed);
                    inst.h2c
                        .store(rev.protocol == Protocol::H2c, Ordering::Relaxed);
                    if ic.draining {
                        inst.start_draining();
                    }
                    list.push(inst);
                }
                for gone in old
                    .iter()
                    .filter(|o| !list.iter().any(|n| Arc::ptr_eq(n, o)))
                {
                    gone.start_draining();
                }
                state.instances.store(Arc::new(list));
                if let Some(tag) = &rev.tag {
                    tagged.push((tag.clone(), Arc::clone(&state)));
                }
                revisions.push((rev.weight, Arc::clone(&state)));
                kept.insert(key, state);
            }
            let cells = rc
                .cells
                .as_ref()
                .and_then(|config| {
                    // The topology service's answers and the cells it named outlive tables.
                    let previous = self.current.load();
                    let kept = previous
                        .routes
                        .iter()
                        .filter(|r| r.service == rc.service && r.env == rc.env)
                        .find_map(|r| r.cells.as_ref())
                        .map(|cells| Arc::clone(cells.kept()))
                        .filter(|kept| kept.serves(config.topology_service.as_ref()))
                        .unwrap_or_else(|| {
                            Arc::new(crate::cells::Kept::new(
                                (rc.service.clone(), rc.env.clone()),
                                config.topology_service.clone(),
                            ))
                        });
                    crate::cells::CellRouting::new(config, &revisions, kept, &self.metrics)
                })
                .map(Arc::new);
            // Validated with the table.
            let tag_header = rc
                .tag_header
                .as_ref()
                .and_then(|name| http::HeaderName::from_bytes(name.as_bytes()).ok())
                .map(|name| {
                    let tags = tagged
                        .iter()
                        .map(|(tag, revision)| (tag.clone(), Arc::clone(revision)))
                        .collect();
                    (name, tags)
                });
            // A route's buckets outlive tables, as its revisions do.
            let controls = (!rc.controls.is_empty()).then(|| {
                let previous = previous_controls
                    .get(&(rc.service.as_str(), rc.env.as_str()))
                    .copied();
                Box::new(crate::controls::Controls::new(
                    &rc.controls,
                    previous,
                    client_share,
                ))
            });
            let route = Arc::new(Route {
                service: rc.service.clone(),
                env: rc.env.clone(),
                request_timeout: Duration::from_secs_f64(rc.request_timeout_seconds),
                sticky: rc.sticky,
                revisions,
                cells,
                cloudflare: rc.cloudflare,
                callers: rc.callers.clone(),
                tag_header,
                controls,
            });
            let target = |revision| Target {
                route: Arc::clone(&route),
                revision,
            };
            let private = crate::config::PRIVATE_DOMAIN;
            if rc.private {
                private_hosts.insert(format!("{}.{}.{private}", rc.service, rc.env), target(None));
                for (tag, revision) in &tagged {
                    private_hosts.insert(
                        format!("{tag}---{}.{}.{private}", rc.service, rc.env),
                        target(Some(Arc::clone(revision))),
                    );
                }
            }
            // An environment's parent stays the platform's whether or not this route is
            // public: its names are answered with a 404, not refused at the handshake.
            parents.insert(format!("{}.{}", rc.env, config.domain).to_ascii_lowercase());
            if rc.public {
                hosts.insert(
                    format!("{}.{}.{}", rc.service, rc.env, config.domain),
                    target(None),
                );
                for domain in &rc.domains {
                    if domain == crate::config::ANY_HOST {
                        fallback = Some(target(None));
                    } else {
                        hosts.insert(domain.to_ascii_lowercase(), target(None));
                    }
                }
                for (tag, revision) in tagged {
                    hosts.insert(
                        format!("{tag}---{}.{}.{}", rc.service, rc.env, config.domain),
                        target(Some(revision)),
                    );
                }
            }
            routes.push(route);
        }
        for (key, gone) in registry.iter() {
            if !kept.contains_key(key) {
                gone.removed.store(true, Ordering::Release);
                for inst in gone.instances.load().iter() {
                    inst.start_draining();
                }
            }
        }
        self.metrics.prune(
            |labels| {
                kept.contains_key(&(
                    labels.service.clone(),
                    labels.env.clone(),
                    labels.revision.clone(),
                ))
            },
            std::time::Instant::now(),
        );
        let old = std::mem::replace(&mut *registry, kept);
        let callers = config
            .callers
            .iter()
            .filter_map(|(address, name)| {
                let header = http::HeaderValue::from_str(name).ok()?;
                Some((
                    address.to_canonical(),
                    Caller {
                        name: name.clone(),
                        header,
                    },
                ))
            })
            .collect();
        self.current.store(Arc::new(Table {
            hosts,
            private_hosts,
            callers,
            fallback,
            routes,
            parents,
            certificates,
            challenges,
            http01,
        }));
        drop(registry);
        // Held and queued requests re-check against the new table.
        for rev in old.values() {
            rev.changed.notify_waiters();
        }
        for route in self.current.load().routes() {
            for (_, rev) in &route.revisions {
                rev.changed.notify_waiters();
            }
        }
        Ok(())
    }

    /// The live state of an instance in the current table (draining or not).
    pub fn instance(&self, address: SocketAddr) -> Option<Arc<Instance>> {
        let table = self.current.load();
        table
            .routes
            .iter()
            .flat_map(|r| r.revisions.iter())
            .flat_map(|(_, rev)| rev.instances().iter().cloned().collect::<Vec<_>>())
            .find(|i| i.address == address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{InstanceConfig, RevisionConfig, RouteConfig};

    fn config(addresses: &[&str], limit: u32) -> RouteTableConfig {
        RouteTableConfig {
            domain: "localhost".into(),
            environments: Vec::new(),
            routes: vec![RouteConfig {
                service: "hello".into(),
                env: "dev".into(),
                domains: vec!["hello.example.com".into()],
                request_timeout_seconds: 1.0,
                sticky: false,
                revisions: vec![RevisionConfig {
                    name: "hello-1".into(),
                    weight: 100,
                    tag: Some("blue".into()),
                    average_start_seconds: Some(4.0),
                    protocol: crate::config::Protocol::Http1,
                    failing: false,
                    instances: addresses
                        .iter()
                        .map(|a| InstanceConfig {
                            address: a.parse().unwrap(),
                            ready: true,
                            draining: false,
                            max_concurrency: limit,
                        })
                        .collect(),
                }],
                cells: None,
                public: true,
                private: false,
                callers: Vec::new(),
                cloudflare: false,
                tag_header: None,
                controls: Default::default(),
            }],
            ..RouteTableConfig::default()
        }
    }

    /// Routes with a per-client limit share the operator's bound on client buckets equally: a
    /// flood of addresses at one fills its share only, and another still keeps a bucket for
    /// each of its own clients.
    #[test]
    fn a_flood_at_one_route_takes_none_of_anothers_client_buckets() {
        use crate::controls::{ControlsConfig, MIN_CLIENTS_PER_ROUTE, RateLimitConfig};
        let total = 4 * MIN_CLIENTS_PER_ROUTE;
        let routes = Routes::new(Arc::new(Metrics::new()), MIN_HOLD, total);
        let mut table = config(&["127.0.0.1:1"], 0);
        table.routes[0].controls = ControlsConfig {
            client_rate_limit: Some(RateLimitConfig {
                requests_per_second: 0.001,
                burst: 5,
            }),
            ..ControlsConfig::default()
        };
        let mut other = table.routes[0].clone();
        other.service = "other".into();
        other.domains = vec!["other.example.com".into()];
        table.routes.push(other);
        routes.set(&table).unwrap();
        let live = routes.load();
        let controls = |i: usize| live.routes[i].controls.as_deref().unwrap();
        let flooded = controls(0);
        for i in 0..u32::try_from(total).unwrap() {
            let address = std::net::IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            let _ = flooded.admit(address, true);
        }
        assert_eq!(flooded.tracked(), total / 2, "the flooded route's share");
        let spared = controls(1);
        for i in 0..100u32 {
            let address = std::net::IpAddr::V4(std::net::Ipv4Addr::from(0xc000_0200 + i));
            spared.admit(address, true).expect("a bucket of its own");
        }
        assert_eq!(spared.tracked(), 100);
        // However many routes, each keeps at least its minimum.
        assert_eq!(
            crate::controls::client_share(total, 1000),
            MIN_CLIENTS_PER_ROUTE
        );
    }

    /// A table's certificates are served by name (a wildcard for one label below it) and
    /// parsed once: the next table with the same PEM reuses them; a refused table changes
    /// nothing; a renewal is served from the table that brings it.
    #[test]
    fn certificates_are_parsed_once_and_swapped_with_the_table() {
        use crate::config::{ChallengeCertificate, TableCertificate};
        use crate::tls::testing::{challenge, self_signed};
        let routes = Routes::new(Arc::new(Metrics::new()), MIN_HOLD, 16);
        let (cert_pem, key_pem) = self_signed(&["shop.example.test", "*.shop.example.test"]);
        let mut table = config(&["127.0.0.1:1"], 0);
        table.certificates = vec![TableCertificate {
            domains: vec!["shop.example.test".into(), "*.shop.example.test".into()],
            cert_pem,
            key_pem: key_pem.clone(),
        }];
        let (challenge_pem, challenge_key) = challenge("acme.example.test");
        table.acme.tls_alpn01.insert(
            "acme.example.test".into(),
            ChallengeCertificate {
                cert_pem: challenge_pem,
                key_pem: challenge_key,
            },
        );
        table
            .acme
            .http01
            .insert("token".into(), "token.thumbprint".into());
        routes.set(&table).unwrap();
        let live = routes.load();
        let first = live.certificate("shop.example.test").unwrap();
        let wildcard = live.certificate("www.shop.example.test").unwrap();
        assert!(Arc::ptr_eq(&first, &wildcard));
        assert!(live.certificate("a.www.shop.example.test").is_none());
        assert!(live.certificate("example.test").is_none());
        assert!(live.challenge("acme.example.test").is_some());
        assert!(live.challenge("shop.example.test").is_none());
        assert_eq!(live.http01("token").unwrap(), "token.thumbprint");
        assert!(live.http01("other").is_none());
        let challenge_key = live.challenge("acme.example.test").unwrap();

        // The next table, routes changed and the certificates not: nothing is parsed again.
        table.routes[0].revisions[0].instances.clear();
        routes.set(&table).unwrap();
        let live = routes.load();
        assert!(Arc::ptr_eq(
            &first,
            &live.certificate("shop.example.test").unwrap()
        ));
        assert!(Arc::ptr_eq(
            &challenge_key,
            &live.challenge("acme.example.test").unwrap()
        ));

        // Another certificate with a key not its own: refused, the table in force stays, and
        // its parsed certificates are kept for the next.
        let mut refused = table.clone();
        refused.certificates.push(TableCertificate {
            domains: vec!["api.example.test".into()],
            cert_pem: self_signed(&["api.example.test"]).0,
            key_pem,
        });
        let error = routes.set(&refused).unwrap_err().to_string();
        assert!(
            error.starts_with("certificate for api.example.test: "),
            "{error}"
        );
        assert!(routes.load().certificate("api.example.test").is_none());
        routes.set(&table).unwrap();
        assert!(Arc::ptr_eq(
            &first,
            &routes.load().certificate("shop.example.test").unwrap()
        ));

        // A renewal is a new certificate; the old one is let go.
        let (cert_pem, key_pem) = self_signed(&["shop.example.test"]);
        table.certificates[0] = TableCertificate {
            domains: vec!["shop.example.test".into()],
            cert_pem,
            key_pem,
        };
        routes.set(&table).unwrap();
        let renewed = routes.load().certificate("shop.example.test").unwrap();
        assert!(!Arc::ptr_eq(&first, &renewed));
        assert!(routes.load().certificate("www.shop.example.test").is_none());
        assert_eq!(routes.parsed.lock().unwrap().len(), 2);
        table.certificates.clear();
        table.acme = Default::default();
        routes.set(&table).unwrap();
        assert!(routes.parsed.lock().unwrap().is_empty());
    }

    #[test]
    fn a_swap_keeps_live_state_and_drains_what_left() {
        let routes = Routes::new(Arc::new(Metrics::new()), MIN_HOLD, 16);
        routes
            .set(&config(&["127.0.0.1:1", "127.0.0.1:2"], 1))
            .unwrap();
        let table = routes.load();
        for host in [
            "hello.dev.localhost",
            "hello.example.com",
            "blue---hello.dev.localhost",
        ] {
            assert!(table.resolve(host).is_some(), "{host}");
        }
        let rev = Arc::clone(&table.routes()[0].revisions[0].1);
        assert_eq!(rev.hold_timeout(), Duration::from_secs(14));
        let Pick::Got(first) = rev.try_pick() else {
            panic!("no pick")
        };
        let Pick::Got(second) = rev.try_pick() else {
            panic!("no pick")
        };
        assert!(!Arc::ptr_eq(&first, &second));
        assert!(matches!(rev.try_pick(), Pick::Busy));

        // Keep only the first instance: same state, the second drains.
        routes
            .set(&config(&[&first.address.to_string()], 1))
            .unwrap();
        let table = routes.load();
        let kept = &table.routes()[0].revisions[0].1;
        assert!(Arc::ptr_eq(kept, &rev));
        assert!(Arc::ptr_eq(&kept.instances()[0], &first));
        assert_eq!(first.in_flight(), 1);
        assert!(second.is_draining() && !first.is_draining());
        rev.release(&first);
        rev.release(&second);
        assert!(matches!(rev.try_pick(), Pick::Got(_)));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn label() -> impl Strategy<Value = String> {
            "[a-z][a-z0-9]{0,5}(-[a-z0-9]{1,5}){0,2}"
        }

        /// Routes for distinct service names, each with two revisions, one tagged.
        fn routes() -> impl Strategy<Value = Vec<(String, String, u32)>> {
            proptest::collection::btree_map(label(), (label(), 0u32..=100), 1..6)
                .prop_map(|m| m.into_iter().map(|(s, (e, w))| (s, e, w)).collect())
        }

        fn table(routes: &[(String, String, u32)]) -> RouteTableConfig {
            RouteTableConfig {
                domain: "example.test".into(),
                environments: Vec::new(),
                routes: routes
                    .iter()
                    .map(|(service, env, weight)| RouteConfig {
                        service: service.clone(),
                        env: env.clone(),
                        domains: vec![format!("{service}.custom.test")],
                        request_timeout_seconds: 5.0,
                        sticky: false,
                        revisions: [("a", *weight, None), ("b", 100 - weight, Some("canary"))]
                            .into_iter()
                            .map(|(suffix, weight, tag)| RevisionConfig {
                                name: format!("{service}-{suffix}"),
                                weight,
                                tag: tag.map(str::to_owned),
                                average_start_seconds: None,
                                protocol: crate::config::Protocol::Http1,
                                failing: false,
                                instances: vec![],
                            })
                            .collect(),
                        cells: None,
                        public: true,
                        private: false,
                        callers: Vec::new(),
                        cloudflare: false,
                        tag_header: None,
                        controls: Default::default(),
                    })
                    .collect(),
                ..RouteTableConfig::default()
            }
        }

        proptest! {
            /// Every route is reached by its generated host, its custom domain, and its tag
            /// host (which pins the tagged revision); nothing panics on any other host.
            #[test]
            fn hosts_lead_to_their_route(routes in routes(), noise in ".{0,40}") {
                let config = table(&routes);
                prop_assert!(config.validate().is_ok());
                let live = Routes::new(Arc::new(Metrics::new()), MIN_HOLD, 16);
                prop_assert!(live.set(&config).is_ok());
                let table = live.load();
                for (service, env, _) in &routes {
                    for host in [format!("{service}.{env}.example.test"), format!("{service}.custom.test")] {
                        let target = table.resolve(&host);
                        prop_assert!(target.is_some_and(|t| &t.route.service == service && t.revision.is_none()), "{host}");
                    }
                    let tagged = table.resolve(&format!("canary---{service}.{env}.example.test"));
                    let canary = format!("{service}-b");
                    prop_assert!(tagged.and_then(|t| t.revision.as_ref()).is_some_and(|r| r.name == canary));
                    // A revision is chosen by weight among those with weight.
                    let route = &table.resolve(&format!("{service}.custom.test")).map(|t| Arc::clone(&t.route));
                    if let Some(route) = route {
                        let chosen = route.choose();
                        prop_assert!(chosen.is_some_and(|chosen| route.revisions.iter().any(|(w, r)| *w > 0 && Arc::ptr_eq(r, chosen))));
                    }
                }
                let _ = table.resolve(&noise);
            }

            /// Any JSON a route table file could hold parses or fails with an error; never a
            /// panic, in parsing or in validation.
            #[test]
            fn any_route_table_text_is_handled(text in ".{0,300}") {
                if let Ok(config) = RouteTableConfig::from_json(&text) {
                    let _ = config.validate();
                }
                if let Ok(config) = RouteTableConfig::from_yaml(&text) {
                    let _ = config.validate();
                }
            }
        }
    }
}
