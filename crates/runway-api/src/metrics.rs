//! The control plane's own Prometheus metrics (`GET /metrics`, no token: figures only, no
//! names of services or callers) and what Prometheus discovers through the API
//! (`GET /v1/prometheus/targets`, Prometheus's HTTP service discovery).

use std::collections::BTreeMap;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    /// The status code, `200`.
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: String,
}

/// The API's request figures.
#[derive(Debug)]
pub struct ApiMetrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    duration: Family<MethodLabels, Histogram, fn() -> Histogram>,
    /// The audit export's figures (`runway_audit_export_*`), the server's exporter's to set.
    pub(crate) audit_export: std::sync::Arc<crate::audit::AuditExport>,
}

fn duration_histogram() -> Histogram {
    // 1 ms to about 16 s, doubling.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

impl Default for ApiMetrics {
    fn default() -> Self {
        let mut root = Registry::default();
        let audit_export = std::sync::Arc::new(crate::audit::AuditExport::default());
        audit_export.register(root.sub_registry_with_prefix("runway_audit_export"));
        let registry = root.sub_registry_with_prefix("runway_api");
        let requests = Family::<RequestLabels, Counter>::default();
        let duration = Family::<MethodLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram,
        );
        registry.register(
            "requests",
            "API requests answered, by method and status code",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from an API request's arrival to its response head, by method",
            duration.clone(),
        );
        Self {
            registry: root,
            requests,
            duration,
            audit_export,
        }
    }
}

impl ApiMetrics {
    /// Counts one answered request.
    pub(crate) fn observe(&self, method: &str, code: u16, took: Duration) {
        // Methods outside HTTP's own (a client's invention) are counted together.
        let method = match method {
            "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE" | "OPTIONS" => method,
            _ => "other",
        };
        self.requests
            .get_or_create(&RequestLabels {
                method: method.to_owned(),
                code,
            })
            .inc();
        self.duration
            .get_or_create(&MethodLabels {
                method: method.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// The text exposition format.
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// One group of Prometheus's HTTP service discovery: targets (`host:port`) and the labels
/// they share. Labels starting with `__` are Prometheus's own (`__metrics_path__`,
/// `__scheme__`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TargetGroup {
    /// `host:port` to scrape.
    pub targets: Vec<String>,
    /// Their labels.
    pub labels: BTreeMap<String, String>,
}

/// The scrape targets of one instance: each of the manifest's `observability.scrape_targets`
/// (`host:port` inside the instance: its port, at the instance's address), with
/// `metrics_path`. None when the manifest names none or the instance has no address.
pub(crate) fn instance_targets(
    [service, env, revision, instance]: [&str; 4],
    address: Option<&str>,
    manifest: &serde_json::Value,
) -> Option<TargetGroup> {
    let host = address?.parse::<std::net::SocketAddr>().ok()?.ip();
    let observability = manifest.pointer("/spec/observability")?;
    let ports: Vec<String> = observability["scrape_targets"]
        .as_array()?
        .iter()
        .filter_map(|target| {
            let (_, port) = target.as_str()?.rsplit_once(':')?;
            let port: u16 = port.parse().ok()?;
            Some(std::net::SocketAddr::new(host, port).to_string())
        })
        .collect();
    if ports.is_empty() {
        return None;
    }
    let path = observability["metrics_path"]
        .as_str()
        .unwrap_or("/metrics")
        .to_owned();
    let labels = BTreeMap::from([
        ("__metrics_path__".to_owned(), path),
        ("service".to_owned(), service.to_owned()),
        ("env".to_owned(), env.to_owned()),
        ("revision".to_owned(), revision.to_owned()),
        ("runway_instance".to_owned(), instance.to_owned()),
        ("job".to_owned(), "runway-service".to_owned()),
    ]);
    Some(TargetGroup {
        targets: ports,
        labels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instances_targets_are_its_ports_at_its_address() {
        let manifest = serde_json::json!({"spec": {"observability":
            {"scrape_targets": ["localhost:9100", "127.0.0.1:9200"], "metrics_path": "/m"}}});
        let group = instance_targets(
            ["web", "dev", "web-dev-00001", "web-dev-00001-ab12cd"],
            Some("10.213.0.6:8080"),
            &manifest,
        )
        .unwrap();
        assert_eq!(group.targets, ["10.213.0.6:9100", "10.213.0.6:9200"]);
        assert_eq!(group.labels["__metrics_path__"], "/m");
        assert_eq!(group.labels["revision"], "web-dev-00001");
        let none = serde_json::json!({"spec": {}});
        assert!(instance_targets(["a", "b", "c", "d"], Some("10.0.0.1:1"), &none).is_none());
        assert!(instance_targets(["a", "b", "c", "d"], None, &manifest).is_none());
    }

    #[test]
    fn requests_are_counted_by_method_and_code() {
        let metrics = ApiMetrics::default();
        metrics.observe("GET", 200, Duration::from_millis(3));
        metrics.observe("BREW", 405, Duration::from_millis(1));
        let text = metrics.encode();
        assert!(
            text.contains("runway_api_requests_total{method=\"GET\",code=\"200\"} 1"),
            "{text}"
        );
        assert!(text.contains("method=\"other\",code=\"405\""), "{text}");
        assert!(
            text.contains("runway_api_request_duration_seconds_bucket"),
            "{text}"
        );
    }
}
