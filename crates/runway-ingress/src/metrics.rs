//! Prometheus metrics, served on the admin port.
//!
//! Label sets are resolved once per revision (when it first appears in a table) and the
//! handles kept on the revision, so a request touches only atomics; a cell-routed request
//! also finds its decision's counter by its labels (rule, cell, outcome), an allocation and a
//! lookup each.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RevisionLabels {
    pub(crate) service: String,
    pub(crate) env: String,
    pub(crate) revision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub(crate) service: String,
    pub(crate) env: String,
    pub(crate) revision: String,
    pub(crate) class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ClientErrorLabels {
    pub(crate) service: String,
    pub(crate) env: String,
    pub(crate) revision: String,
    pub(crate) reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CellLabels {
    pub(crate) service: String,
    pub(crate) env: String,
    /// The deciding rule's id, `-` when none matched.
    pub(crate) rule: String,
    pub(crate) cell: String,
    /// `classified`, `fell_back`, `proxied` or `unmatched`.
    pub(crate) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    pub(crate) reason: &'static str,
}

/// Why a routed request was the client's fault, or refused by the service's own controls
/// (see [`crate::ProxyError::client_fault`]).
const CLIENT_FAULTS: [&str; 7] = [
    "body_too_large",
    "body_broken",
    "body_timeout",
    "address_refused",
    "rate_limited",
    "client_rate_limited",
    "maintenance",
];

/// The latency histogram's first upper bound, in seconds: 0.25 ms.
const LATENCY_START: f64 = 0.000_25;
/// The same in nanoseconds.
const LATENCY_START_NANOS: u64 = 250_000;
/// Its bounds, doubling from [`LATENCY_START`]: up to about 4 min.
const LATENCY_BUCKETS: usize = 20;

/// A revision's latency histogram, kept only in atomics: a count per bucket (not cumulative;
/// the last is `+Inf`) and the sum, one add each per response, no lock. Prometheus reads it
/// through [`EncodeMetric`], the canary analysis and the autoscaler through
/// [`RevisionMetrics::stats`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Latency(Arc<LatencyCounts>);

#[derive(Debug, Default)]
struct LatencyCounts {
    buckets: [AtomicU64; LATENCY_BUCKETS + 1],
    sum_nanos: AtomicU64,
}

impl Latency {
    fn observe(&self, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.0.buckets[bucket_index(nanos)].fetch_add(1, Ordering::SeqCst);
        self.0.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The count in each bucket, `+Inf` last.
    fn counts(&self) -> [u64; LATENCY_BUCKETS + 1] {
        std::array::from_fn(|i| self.0.buckets[i].load(Ordering::SeqCst))
    }
}

impl TypedMetric for Latency {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Latency {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let counts = self.counts();
        let buckets: Vec<(f64, u64)> = latency_bounds()
            .chain(std::iter::once(f64::INFINITY))
            .zip(counts)
            .collect();
        let sum = self.0.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, counts.iter().sum(), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// The histogram's upper bounds, in seconds.
fn latency_bounds() -> impl Iterator<Item = f64> {
    exponential_buckets(LATENCY_START, 2.0, LATENCY_BUCKETS as u16)
}

/// How long a revision's series stay after it leaves the route table: long enough for the
/// last scrapes and for a rollback's comparison, short enough that a server that has routed
/// thousands of revisions does not keep them all.
pub const RETIRED_SERIES_KEPT: Duration = Duration::from_secs(600);

/// Every metric the ingress exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RevisionLabels, Latency>,
    in_flight: Family<RevisionLabels, Gauge>,
    queued: Family<RevisionLabels, Gauge>,
    held: Family<RevisionLabels, Gauge>,
    connect_errors: Family<RevisionLabels, Counter>,
    upstream_errors: Family<RevisionLabels, Counter>,
    client_errors: Family<ClientErrorLabels, Counter>,
    unrouted: Counter,
    cell_decisions: Family<CellLabels, Counter>,
    topology_errors: Counter,
    refused_requests: Family<ReasonLabels, Counter>,
    pub(crate) refused_connections: Family<ReasonLabels, Counter>,
    pub(crate) accept_errors: Counter,
    /// Every revision's handles, for [`Metrics::revision_stats`], and since when it has been
    /// out of the route table.
    revisions: Mutex<HashMap<RevisionLabels, (RevisionMetrics, Option<Instant>)>>,
    pub(crate) connections: Gauge,
    pub(crate) tls_handshake_errors: Counter,
    pub(crate) certificate_reloads: Counter,
    pub(crate) certificate_reload_errors: Counter,
}

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The handles one revision updates.
#[derive(Debug, Clone)]
pub struct RevisionMetrics {
    requests: [Counter; 5],
    latency: Latency,
    pub(crate) in_flight: Gauge,
    pub(crate) queued: Gauge,
    pub(crate) held: Gauge,
    pub(crate) connect_errors: Counter,
    pub(crate) upstream_errors: Counter,
    /// Requests routed to the revision that failed by the client's fault, by reason
    /// ([`CLIENT_FAULTS`]); in neither `requests` nor `latency`.
    client_errors: [Counter; CLIENT_FAULTS.len()],
}

impl RevisionMetrics {
    /// One response: its status class and the time to its head.
    pub fn record(&self, status: u16, elapsed: Duration) {
        let class = usize::from((status / 100).clamp(1, 5)) - 1;
        // The bucket before the class: [`RevisionMetrics::stats`] reads them the other way
        // round, so a response counted in a class is always in a bucket too.
        self.latency.observe(elapsed);
        self.requests[class].inc();
    }

    /// A request refused for the client's fault (`reason`, one of [`CLIENT_FAULTS`]).
    pub(crate) fn client_error(&self, reason: &str) {
        if let Some(index) = CLIENT_FAULTS.iter().position(|r| *r == reason) {
            self.client_errors[index].inc();
        }
    }

    /// A consistent reading while responses are recorded: `requests` is the buckets' own
    /// total (`+Inf` included), read in one pass, so the latency's percentiles never count a
    /// response as slower than every bound because it was counted after its bucket was read
    /// (a canary failed its analysis with a "p99 of 131072 ms" so); the 5xx count is read
    /// first, so it is never more than `requests`.
    fn stats(&self) -> RevisionStats {
        let errors_5xx = self.requests[4].get();
        let counts = self.latency.counts();
        let mut cumulative = 0;
        let latency_buckets = latency_bounds()
            .zip(&counts)
            .map(|(bound, count)| {
                cumulative += count;
                (bound, cumulative)
            })
            .collect();
        RevisionStats {
            in_flight: gauge_value(&self.in_flight),
            queued: gauge_value(&self.queued),
            held: gauge_value(&self.held),
            requests: counts.iter().sum(),
            errors_5xx,
            client_errors: self.client_errors.iter().map(Counter::get).sum(),
            latency_buckets,
        }
    }
}

/// The bucket a latency (in nanoseconds) falls in: the first whose upper bound is at least
/// it, as Prometheus's `le`; the last is `+Inf`. Integer arithmetic only: bound `i` is
/// [`LATENCY_START_NANOS`] × 2^i, so the index is the bit length of
/// `(nanos - 1) / LATENCY_START_NANOS`.
fn bucket_index(nanos: u64) -> usize {
    if nanos <= LATENCY_START_NANOS {
        return 0;
    }
    let quotient = (nanos - 1) / LATENCY_START_NANOS;
    let index = (u64::BITS - quotient.leading_zeros()) as usize;
    index.min(LATENCY_BUCKETS)
}

fn gauge_value(gauge: &Gauge) -> u64 {
    u64::try_from(gauge.get()).unwrap_or(0)
}

/// One revision's figures as the ingress sees them now: gauges of the moment, and counters
/// since the ingress started (take the difference of two readings for a window).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RevisionStats {
    /// Requests being served by its instances.
    pub in_flight: u64,
    /// Requests waiting for a free slot on a ready instance.
    pub queued: u64,
    /// Requests held because it has no ready instance.
    pub held: u64,
    /// Responses given, whatever their status: the instances' and the ingress's own for
    /// what they failed to answer (502, 503, 504), never those for a client's fault.
    pub requests: u64,
    /// Responses with a 5xx status, the ingress's own 502, 503 and 504 included.
    pub errors_5xx: u64,
    /// Requests refused for the client's fault (a body too large, malformed, cut off or too
    /// slow): in neither `requests` nor the latency.
    pub client_errors: u64,
    /// The latency histogram: `(upper bound in seconds, cumulative count)`, as the
    /// `request_duration_seconds_bucket` series, without `+Inf` (which is `requests`).
    pub latency_buckets: Vec<(f64, u64)>,
}

/// One revision's figures with its names, as [`Metrics::all_revision_stats`] lists them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RevisionSnapshot {
    pub service: String,
    pub env: String,
    pub revision: String,
    #[serde(flatten)]
    pub stats: RevisionStats,
}

impl RevisionStats {
    /// Requests in flight, queued and held: the demand the autoscaler reads.
    pub fn concurrency(&self) -> u64 {
        self.in_flight + self.queued + self.held
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("runway_ingress");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<RevisionLabels, Latency>::default();
        let in_flight = Family::<RevisionLabels, Gauge>::default();
        let queued = Family::<RevisionLabels, Gauge>::default();
        let held = Family::<RevisionLabels, Gauge>::default();
        let connect_errors = Family::<RevisionLabels, Counter>::default();
        let upstream_errors = Family::<RevisionLabels, Counter>::default();
        let client_errors = Family::<ClientErrorLabels, Counter>::default();
        let unrouted = Counter::default();
        let cell_decisions = Family::<CellLabels, Counter>::default();
        let topology_errors = Counter::default();
        registry.register(
            "topology_errors",
            "Classifications the topology service did not answer (in time, or at all); the \
             topology's own cells, then the legacy cell, stood in",
            topology_errors.clone(),
        );
        let refused_requests = Family::<ReasonLabels, Counter>::default();
        let refused_connections = Family::<ReasonLabels, Counter>::default();
        let accept_errors = Counter::default();
        let connections = Gauge::default();
        let tls_handshake_errors = Counter::default();
        let certificate_reloads = Counter::default();
        let certificate_reload_errors = Counter::default();
        registry.register(
            "certificate_reloads",
            "Times the operator's certificates were read again after their files changed",
            certificate_reloads.clone(),
        );
        registry.register(
            "certificate_reload_errors",
            "Changed certificate files that could not be used (the previous ones were kept)",
            certificate_reload_errors.clone(),
        );
        registry.register(
            "tls_handshake_errors",
            "TLS handshakes that failed or timed out (unknown names included)",
            tls_handshake_errors.clone(),
        );
        registry.register(
            "requests",
            "Requests answered, by service, env, revision and status class",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from a request's arrival to its response head",
            latency.clone(),
        );
        registry.register(
            "in_flight_requests",
            "Requests being served by an instance of the revision",
            in_flight.clone(),
        );
        registry.register(
            "queued_requests",
            "Requests waiting for a free slot on a ready instance of the revision",
            queued.clone(),
        );
        registry.register(
            "held_requests",
            "Requests held because the revision has no ready instance",
            held.clone(),
        );
        registry.register(
            "upstream_connect_errors",
            "Failed connections to the revision's instances",
            connect_errors.clone(),
        );
        registry.register(
            "upstream_errors",
            "Requests whose connection to an instance broke before a whole response head came back",
            upstream_errors.clone(),
        );
        registry.register(
            "client_errors",
            "Requests routed to the revision that failed by the client's fault, or that its \
             service's rate limits, address lists or maintenance refused (not in requests)",
            client_errors.clone(),
        );
        registry.register(
            "refused_requests",
            "Requests refused before routing for the client's fault, by reason",
            refused_requests.clone(),
        );
        registry.register(
            "refused_connections",
            "Connections closed at accept: the ingress's or the client address's limit reached",
            refused_connections.clone(),
        );
        registry.register(
            "accept_errors",
            "Failed accepts for want of resources (file descriptors, memory); each backs off",
            accept_errors.clone(),
        );
        registry.register(
            "cell_decisions",
            "Cell-routed requests by deciding rule, cell and outcome (classified, fell_back to \
             the legacy cell, proxied by a proxy rule, unmatched by any rule)",
            cell_decisions.clone(),
        );
        registry.register(
            "unrouted_requests",
            "Requests for a host no route serves",
            unrouted.clone(),
        );
        registry.register(
            "open_connections",
            "Client connections open",
            connections.clone(),
        );
        Self {
            registry,
            requests,
            latency,
            in_flight,
            queued,
            held,
            connect_errors,
            upstream_errors,
            client_errors,
            unrouted,
            cell_decisions,
            topology_errors,
            refused_requests,
            refused_connections,
            accept_errors,
            revisions: Mutex::default(),
            connections,
            tls_handshake_errors,
            certificate_reloads,
            certificate_reload_errors,
        }
    }

    /// One revision's handles (made, and its series registered, on first use): what a
    /// request of it updates, also what `benches/metrics.rs` measures.
    pub fn revision(&self, service: &str, env: &str, revision: &str) -> RevisionMetrics {
        let labels = RevisionLabels {
            service: service.to_owned(),
            env: env.to_owned(),
            revision: revision.to_owned(),
        };
        let requests = CLASSES.map(|class| {
            self.requests
                .get_or_create(&RequestLabels {
                    service: labels.service.clone(),
                    env: labels.env.clone(),
                    revision: labels.revision.clone(),
                    class,
                })
                .clone()
        });
        let client_errors = CLIENT_FAULTS.map(|reason| {
            self.client_errors
                .get_or_create(&ClientErrorLabels {
                    service: labels.service.clone(),
                    env: labels.env.clone(),
                    revision: labels.revision.clone(),
                    reason,
                })
                .clone()
        });
        let mut revisions = self
            .revisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((known, _)) = revisions.get(&labels) {
            return known.clone();
        }
        let metrics = RevisionMetrics {
            requests,
            latency: self.latency.get_or_create(&labels).clone(),
            in_flight: self.in_flight.get_or_create(&labels).clone(),
            queued: self.queued.get_or_create(&labels).clone(),
            held: self.held.get_or_create(&labels).clone(),
            connect_errors: self.connect_errors.get_or_create(&labels).clone(),
            upstream_errors: self.upstream_errors.get_or_create(&labels).clone(),
            client_errors,
        };
        revisions.insert(labels, (metrics.clone(), None));
        metrics
    }

    /// After a route table change: revisions for which `routed` is false are noted as gone
    /// (from `now`, unless noted before), the others as routed; then [`Metrics::expire`].
    pub(crate) fn prune(&self, routed: impl Fn(&RevisionLabels) -> bool, now: Instant) {
        {
            let mut revisions = self
                .revisions
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for (labels, (_, gone_since)) in revisions.iter_mut() {
                if routed(labels) {
                    *gone_since = None;
                } else {
                    gone_since.get_or_insert(now);
                }
            }
        }
        self.expire(now);
    }

    /// Removes the series of revisions gone from the table for [`RETIRED_SERIES_KEPT`] by
    /// `now`: run on table changes and on each scrape, so a quiet server loses them too. A
    /// revision routed again later starts its counters from zero, which Prometheus reads as
    /// a counter reset.
    pub(crate) fn expire(&self, now: Instant) {
        let mut revisions = self
            .revisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        revisions.retain(|labels, (_, gone_since)| {
            let Some(since) = *gone_since else {
                return true;
            };
            if now.saturating_duration_since(since) < RETIRED_SERIES_KEPT {
                return true;
            }
            for class in CLASSES {
                self.requests.remove(&RequestLabels {
                    service: labels.service.clone(),
                    env: labels.env.clone(),
                    revision: labels.revision.clone(),
                    class,
                });
            }
            for reason in CLIENT_FAULTS {
                self.client_errors.remove(&ClientErrorLabels {
                    service: labels.service.clone(),
                    env: labels.env.clone(),
                    revision: labels.revision.clone(),
                    reason,
                });
            }
            self.latency.remove(labels);
            self.in_flight.remove(labels);
            self.queued.remove(labels);
            self.held.remove(labels);
            self.connect_errors.remove(labels);
            self.upstream_errors.remove(labels);
            false
        });
    }

    /// A revision's figures now; `None` when no route table ever had it.
    pub fn revision_stats(
        &self,
        service: &str,
        env: &str,
        revision: &str,
    ) -> Option<RevisionStats> {
        let labels = RevisionLabels {
            service: service.to_owned(),
            env: env.to_owned(),
            revision: revision.to_owned(),
        };
        let revisions = self
            .revisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        revisions.get(&labels).map(|(metrics, _)| metrics.stats())
    }

    /// Every revision's figures now, with its service and environment: what the control
    /// socket streams to the control plane.
    pub fn all_revision_stats(&self) -> Vec<RevisionSnapshot> {
        let revisions = self
            .revisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        revisions
            .iter()
            .map(|(labels, (metrics, _))| RevisionSnapshot {
                service: labels.service.clone(),
                env: labels.env.clone(),
                revision: labels.revision.clone(),
                stats: metrics.stats(),
            })
            .collect()
    }

    /// One cell-routed request's decision.
    pub(crate) fn cell_decision(&self, route: &crate::table::Route, chosen: &crate::cells::Chosen) {
        self.cell_decisions
            .get_or_create(&CellLabels {
                service: route.service.clone(),
                env: route.env.clone(),
                rule: chosen
                    .decision
                    .rule
                    .clone()
                    .unwrap_or_else(|| "-".to_owned()),
                cell: chosen.cell.clone(),
                outcome: chosen.outcome(),
            })
            .inc();
    }

    pub(crate) fn topology_error(&self) {
        self.topology_errors.inc();
    }

    pub(crate) fn unrouted(&self) {
        self.unrouted.inc();
    }

    /// A request refused before routing for the client's fault.
    pub(crate) fn refused(&self, reason: &'static str) {
        self.refused_requests
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// A connection closed at accept (`reason`: `limit` or `per_client_limit`).
    pub(crate) fn refused_connection(&self, reason: &'static str) {
        self.refused_connections
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        self.expire(Instant::now());
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Figures read while responses are recorded are consistent: every response counted is
    /// in a bucket (fast ones never show as slower than every bound), and no more are 5xx
    /// than there are responses.
    #[test]
    fn figures_read_while_recording_are_consistent() {
        let metrics = Metrics::new();
        let revision = metrics.revision("web", "dev", "web-1");
        let recording = revision.clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let writer = std::thread::spawn(move || {
            let mut n = 0u64;
            while !stopping.load(Ordering::Relaxed) {
                let status = if n.is_multiple_of(3) { 503 } else { 200 };
                recording.record(status, Duration::from_millis(1));
                n += 1;
            }
        });
        for _ in 0..200_000 {
            let stats = revision.stats();
            let counted = stats.latency_buckets.last().map_or(0, |(_, c)| *c);
            assert_eq!(stats.requests, counted, "a response outside every bucket");
            assert!(stats.errors_5xx <= stats.requests);
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
    }

    #[test]
    fn a_latency_falls_in_the_first_bucket_whose_bound_holds_it() {
        assert_eq!(bucket_index(0), 0);
        assert_eq!(bucket_index(200_000), 0);
        assert_eq!(bucket_index(250_000), 0);
        assert_eq!(bucket_index(250_001), 1);
        assert_eq!(bucket_index(300_000), 1);
        assert_eq!(bucket_index(1_000_000), 2);
        assert_eq!(bucket_index(1_100_000), 3);
        assert_eq!(bucket_index(u64::MAX), LATENCY_BUCKETS);
        for (index, bound) in latency_bounds().enumerate() {
            let nanos = (bound * 1e9).round() as u64;
            assert_eq!(bucket_index(nanos), index, "{bound}");
            assert_eq!(bucket_index(nanos + 1), index + 1, "{bound}");
            assert_eq!(bucket_index(nanos * 99 / 100), index, "{bound}");
        }
    }

    #[test]
    fn revision_stats_add_up_what_was_recorded() {
        let metrics = Metrics::new();
        assert_eq!(
            metrics.revision_stats("hello", "dev", "hello-dev-00001"),
            None
        );
        let revision = metrics.revision("hello", "dev", "hello-dev-00001");
        revision.record(200, Duration::from_micros(100));
        revision.record(503, Duration::from_millis(3));
        revision.record(204, Duration::from_millis(3));
        revision.record(500, Duration::from_secs(600));
        revision.in_flight.inc();
        revision.held.set(2);
        // The same revision asked for again shares the counters.
        metrics
            .revision("hello", "dev", "hello-dev-00001")
            .queued
            .inc();
        let stats = metrics
            .revision_stats("hello", "dev", "hello-dev-00001")
            .unwrap_or_default();
        assert_eq!((stats.requests, stats.errors_5xx), (4, 2));
        assert_eq!(stats.concurrency(), 4);
        assert_eq!(stats.latency_buckets.len(), LATENCY_BUCKETS);
        assert_eq!(stats.latency_buckets[0], (LATENCY_START, 1));
        // 3 ms is in the bucket up to 4 ms; 600 s only in +Inf, left out.
        assert_eq!(stats.latency_buckets[4].1, 3);
        assert_eq!(stats.latency_buckets[LATENCY_BUCKETS - 1].1, 3);
        let text = metrics.encode();
        assert!(text.contains("runway_ingress_requests_total{service=\"hello\",env=\"dev\",revision=\"hello-dev-00001\",class=\"5xx\"} 2"), "{text}");
    }

    #[test]
    fn a_revision_out_of_the_table_keeps_its_series_for_a_while_then_loses_them() {
        let metrics = Metrics::new();
        metrics
            .revision("hello", "dev", "old")
            .record(200, Duration::from_millis(1));
        metrics
            .revision("hello", "dev", "new")
            .record(200, Duration::from_millis(1));
        let routed = |labels: &RevisionLabels| labels.revision == "new";
        let start = Instant::now();
        metrics.prune(routed, start);
        metrics.prune(routed, start + RETIRED_SERIES_KEPT / 2);
        assert!(metrics.revision_stats("hello", "dev", "old").is_some());
        assert!(metrics.encode().contains("revision=\"old\""));
        // No table change needed: the next scrape (or any expiry) removes them.
        metrics.expire(start + RETIRED_SERIES_KEPT);
        assert_eq!(metrics.revision_stats("hello", "dev", "old"), None);
        let text = metrics.encode();
        assert!(!text.contains("revision=\"old\""), "{text}");
        assert!(text.contains("revision=\"new\""), "{text}");
        // Routed again, it starts over; a revision back in the table before its time is up
        // keeps its series.
        metrics.revision("hello", "dev", "old");
        assert_eq!(
            metrics
                .revision_stats("hello", "dev", "old")
                .map(|s| s.requests),
            Some(0)
        );
        metrics.prune(|_| false, start);
        metrics.prune(|_| true, start + RETIRED_SERIES_KEPT / 2);
        metrics.prune(|_| false, start + RETIRED_SERIES_KEPT);
        assert!(metrics.revision_stats("hello", "dev", "new").is_some());
    }
}
