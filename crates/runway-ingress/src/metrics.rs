//! Prometheus metrics, served on the admin port.
//!
//! Label sets are resolved once per revision (when it first appears in a table) and the
//! handles kept on the revision, so a request touches only atomics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
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

fn latency_histogram() -> Histogram {
    // 0.25 ms to about 4 min.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 20))
}

/// Every metric the ingress exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RevisionLabels, Histogram, fn() -> Histogram>,
    in_flight: Family<RevisionLabels, Gauge>,
    queued: Family<RevisionLabels, Gauge>,
    held: Family<RevisionLabels, Gauge>,
    connect_errors: Family<RevisionLabels, Counter>,
    upstream_errors: Family<RevisionLabels, Counter>,
    unrouted: Counter,
    pub(crate) connections: Gauge,
    pub(crate) tls_handshake_errors: Counter,
    pub(crate) certificate_reloads: Counter,
    pub(crate) certificate_reload_errors: Counter,
}

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The handles one revision updates.
#[derive(Debug, Clone)]
pub(crate) struct RevisionMetrics {
    requests: [Counter; 5],
    pub(crate) latency: Histogram,
    pub(crate) in_flight: Gauge,
    pub(crate) queued: Gauge,
    pub(crate) held: Gauge,
    pub(crate) connect_errors: Counter,
    pub(crate) upstream_errors: Counter,
}

impl RevisionMetrics {
    pub(crate) fn count(&self, status: u16) {
        let class = usize::from((status / 100).clamp(1, 5)) - 1;
        self.requests[class].inc();
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
        let latency: Family<RevisionLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        let in_flight = Family::<RevisionLabels, Gauge>::default();
        let queued = Family::<RevisionLabels, Gauge>::default();
        let held = Family::<RevisionLabels, Gauge>::default();
        let connect_errors = Family::<RevisionLabels, Counter>::default();
        let upstream_errors = Family::<RevisionLabels, Counter>::default();
        let unrouted = Counter::default();
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
            unrouted,
            connections,
            tls_handshake_errors,
            certificate_reloads,
            certificate_reload_errors,
        }
    }

    pub(crate) fn revision(&self, service: &str, env: &str, revision: &str) -> RevisionMetrics {
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
        RevisionMetrics {
            requests,
            latency: self.latency.get_or_create(&labels).clone(),
            in_flight: self.in_flight.get_or_create(&labels).clone(),
            queued: self.queued.get_or_create(&labels).clone(),
            held: self.held.get_or_create(&labels).clone(),
            connect_errors: self.connect_errors.get_or_create(&labels).clone(),
            upstream_errors: self.upstream_errors.get_or_create(&labels).clone(),
        }
    }

    pub(crate) fn unrouted(&self) {
        self.unrouted.inc();
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
