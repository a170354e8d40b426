//! The route table as the control plane (or an operator's file) gives it: plain serde values,
//! validated before they reach the data plane.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// The whole route table. It is always replaced as a whole: see [`crate::Ingress::set_routes`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteTableConfig {
    /// The domain under which `<service>.<env>.<domain>` hosts are made (`localhost` by default,
    /// whose subdomains resolve to loopback without DNS set-up).
    #[serde(default = "default_domain")]
    pub domain: String,
    /// The platform's environments: a name under `<env>.<domain>` that no route serves (yet)
    /// is answered with a 404 after a handshake with that parent's wildcard certificate, not
    /// refused at the handshake.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environments: Vec<String>,
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
}

impl Default for RouteTableConfig {
    fn default() -> Self {
        Self {
            domain: default_domain(),
            environments: Vec::new(),
            routes: Vec::new(),
        }
    }
}

fn default_domain() -> String {
    "localhost".to_owned()
}

/// One service in one environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    pub service: String,
    pub env: String,
    /// Custom domains that reach this route besides `<service>.<env>.<domain>`.
    #[serde(default)]
    pub domains: Vec<String>,
    /// The manifest's `request_timeout`: time from the request's arrival (after any hold) to
    /// the upstream's response head; past it the client gets 504.
    #[serde(default = "default_request_timeout_seconds")]
    pub request_timeout_seconds: f64,
    /// Keep a client on the revision it was first given (a cookie), e.g. during a canary.
    #[serde(default)]
    pub sticky: bool,
    /// Revisions with integer weights that sum to 100, or all 0 while none serves yet (a
    /// known service not yet deployed, or whose deployments all failed): its host is then
    /// answered with a 503 that says so, not a 404.
    #[serde(default)]
    pub revisions: Vec<RevisionConfig>,
    /// Cell routing instead of revisions: each request goes to the cell GitLab's router rules
    /// and the topology place it in (`runway router`). A route with cells has no revisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cells: Option<CellsConfig>,
}

/// A cell-routed route: GitLab's HTTP router rules (as its rule file holds them) and the
/// cells, whose addresses are `ip:port` here (`runway router` resolves names first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellsConfig {
    pub rules: serde_json::Value,
    pub topology: runway_cells::StaticTopology,
    /// GitLab's topology service, asked where a classification's cell is; the topology
    /// above still names the legacy cell, and answers while the service cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_service: Option<TopologyServiceConfig>,
}

/// Where GitLab's topology service is (`POST {url}/v1/classify`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyServiceConfig {
    /// `http://host:port` (and a path prefix, if any).
    pub url: String,
    /// The longest wait for an answer; past it the request is routed without one.
    #[serde(default = "default_topology_timeout_ms")]
    pub timeout_ms: u64,
    /// How long an answer is used before the service is asked again.
    #[serde(default = "default_topology_cache_ms")]
    pub cache_ms: u64,
}

fn default_topology_timeout_ms() -> u64 {
    1_000
}

fn default_topology_cache_ms() -> u64 {
    10_000
}

impl CellsConfig {
    /// The rules, parsed and checked.
    pub fn parse_rules(&self) -> Result<runway_cells::Rules, runway_cells::FileError> {
        runway_cells::Rules::parse(Path::new("rules"), &self.rules.to_string())
    }

    /// A cell's address without its `http://` and trailing `/`: `host:port`.
    pub fn host_port(address: &str) -> &str {
        address
            .strip_prefix("http://")
            .unwrap_or(address)
            .trim_end_matches('/')
    }

    /// A cell's address as a socket address: `ip:port`, or `http://ip:port`.
    pub fn address(address: &str) -> Option<SocketAddr> {
        Self::host_port(address).parse().ok()
    }
}

fn default_request_timeout_seconds() -> f64 {
    300.0
}

/// One immutable revision of a service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevisionConfig {
    pub name: String,
    /// Share of the route's traffic, 0 to 100; a route's weights sum to 100.
    pub weight: u32,
    /// A tag reachable directly at `<tag>---<service>.<env>.<domain>`, whatever the weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The revision's average start time, which bounds how long a request is held while the
    /// revision has no ready instance (the longer of 10 s or 3.5 times this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub average_start_seconds: Option<f64>,
    /// How the ingress talks to the instances: HTTP/1.1, or HTTP/2 with prior knowledge for
    /// services declaring `HTTP2` or `grpc` as their backend protocol.
    #[serde(default)]
    pub protocol: Protocol,
    /// Its instances fail to start (they crash, or are not ready in time): while none is ready,
    /// a request is answered with a 503 at once rather than held for one that will not come.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failing: bool,
    #[serde(default)]
    pub instances: Vec<InstanceConfig>,
}

/// The protocol between the ingress and a revision's instances.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Http1,
    H2c,
}

/// One running instance of a revision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceConfig {
    pub address: SocketAddr,
    /// Whether its probes pass; only ready instances get requests.
    #[serde(default = "default_true")]
    pub ready: bool,
    /// Being removed: no new requests, in-flight ones finish, idle connections are closed.
    #[serde(default)]
    pub draining: bool,
    /// The manifest's `max_instance_request_concurrency`; 0 means unlimited.
    #[serde(default)]
    pub max_concurrency: u32,
}

fn default_true() -> bool {
    true
}

impl RouteTableConfig {
    /// Reads a table from a `.json`, `.yaml` or `.yml` file and validates it.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        let table = if yaml {
            Self::from_yaml(&text)
        } else {
            Self::from_json(&text)
        }
        .map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: Some(path.to_owned()),
                message,
            },
            other => other,
        })?;
        Ok(table)
    }

    /// Parses and validates a JSON table.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let table: Self = serde_json::from_str(text).map_err(|e| ConfigError::Parse {
            path: None,
            message: e.to_string(),
        })?;
        table.validate()?;
        Ok(table)
    }

    /// Parses and validates a YAML table.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let table: Self = serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse {
            path: None,
            message: e.to_string(),
        })?;
        table.validate()?;
        Ok(table)
    }

    /// Checks what serde cannot: names, weights, tags and hosts unique across the table.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |route: &str, message: String| ConfigError::Invalid {
            route: route.to_owned(),
            message,
        };
        if !is_host(&self.domain) {
            return Err(invalid(
                "",
                format!("domain {:?} is not a host name", self.domain),
            ));
        }
        let mut hosts: BTreeMap<String, String> = BTreeMap::new();
        for route in &self.routes {
            let id = format!("{}.{}", route.service, route.env);
            for (what, label) in [("service", &route.service), ("env", &route.env)] {
                if !is_label(label) || label.contains("---") {
                    return Err(invalid(
                        &id,
                        format!(
                            "{what} {label:?} is not a DNS label (a-z, 0-9, '-', without '---')"
                        ),
                    ));
                }
            }
            if !(route.request_timeout_seconds.is_finite() && route.request_timeout_seconds > 0.0) {
                return Err(invalid(
                    &id,
                    format!(
                        "request_timeout_seconds must be positive, not {}",
                        route.request_timeout_seconds
                    ),
                ));
            }
            let mut sum = 0u64;
            let mut names = Vec::new();
            for rev in &route.revisions {
                if rev.name.is_empty() || names.contains(&&rev.name) {
                    return Err(invalid(
                        &id,
                        format!("revision name {:?} is empty or repeated", rev.name),
                    ));
                }
                names.push(&rev.name);
                if rev.weight > 100 {
                    return Err(invalid(
                        &id,
                        format!(
                            "revision {} has weight {} (at most 100)",
                            rev.name, rev.weight
                        ),
                    ));
                }
                sum += u64::from(rev.weight);
                if let Some(start) = rev.average_start_seconds
                    && !(start.is_finite() && start >= 0.0)
                {
                    return Err(invalid(
                        &id,
                        format!("revision {} has average_start_seconds {start}", rev.name),
                    ));
                }
                let mut addresses = Vec::new();
                for inst in &rev.instances {
                    if addresses.contains(&inst.address) {
                        return Err(invalid(
                            &id,
                            format!(
                                "revision {} lists instance {} twice",
                                rev.name, inst.address
                            ),
                        ));
                    }
                    addresses.push(inst.address);
                }
            }
            if sum != 100 && sum != 0 {
                let detail: Vec<String> = route
                    .revisions
                    .iter()
                    .map(|r| format!("{}={}", r.name, r.weight))
                    .collect();
                return Err(invalid(
                    &id,
                    format!("weights sum to {sum}, not 100 ({})", detail.join(", ")),
                ));
            }
            if let Some(cells) = &route.cells {
                if !route.revisions.is_empty() {
                    return Err(invalid(
                        &id,
                        "a route with cells has no revisions: its cells are its upstreams"
                            .to_owned(),
                    ));
                }
                cells
                    .parse_rules()
                    .map_err(|e| invalid(&id, format!("cells: {e}")))?;
                for cell in &cells.topology.cells {
                    if CellsConfig::address(&cell.address).is_none() {
                        return Err(invalid(
                            &id,
                            format!(
                                "cell {}: address {:?} is not ip:port",
                                cell.id, cell.address
                            ),
                        ));
                    }
                }
                if let Some(service) = &cells.topology_service
                    && !(service.url.starts_with("http://")
                        && service.url.parse::<http::Uri>().is_ok())
                {
                    return Err(invalid(
                        &id,
                        format!(
                            "cells: topology service {:?} is not an http:// URL",
                            service.url
                        ),
                    ));
                }
                if cells.topology.legacy().is_none() {
                    return Err(invalid(
                        &id,
                        format!("cells: no legacy cell {}", cells.topology.legacy_cell),
                    ));
                }
            }
            let mut claim = |host: String| -> Result<(), ConfigError> {
                if let Some(other) = hosts.insert(host.clone(), id.clone()) {
                    return Err(invalid(&id, format!("host {host} is also used by {other}")));
                }
                Ok(())
            };
            claim(format!("{}.{}.{}", route.service, route.env, self.domain))?;
            for domain in &route.domains {
                let host = domain.to_ascii_lowercase();
                // `*`: every host no other route serves (a router in front of cells).
                if host != ANY_HOST && !is_host(&host) {
                    return Err(invalid(
                        &id,
                        format!("custom domain {domain:?} is not a host name"),
                    ));
                }
                claim(host)?;
            }
            for rev in &route.revisions {
                if let Some(tag) = &rev.tag {
                    if !is_label(tag) || tag.contains("---") {
                        return Err(invalid(
                            &id,
                            format!("tag {tag:?} of revision {} is not a DNS label", rev.name),
                        ));
                    }
                    claim(format!(
                        "{tag}---{}.{}.{}",
                        route.service, route.env, self.domain
                    ))?;
                }
            }
        }
        Ok(())
    }
}

/// The domain that stands for every host no other route serves.
pub const ANY_HOST: &str = "*";

/// A DNS label: 1 to 63 of `a-z`, `0-9` and `-`, not starting or ending with `-`.
fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_host(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(weights: &[u32]) -> RouteTableConfig {
        RouteTableConfig {
            domain: "localhost".into(),
            environments: Vec::new(),
            routes: vec![RouteConfig {
                service: "hello".into(),
                env: "production".into(),
                domains: vec![],
                request_timeout_seconds: 30.0,
                sticky: false,
                revisions: weights
                    .iter()
                    .enumerate()
                    .map(|(i, w)| RevisionConfig {
                        name: format!("hello-{i}"),
                        weight: *w,
                        tag: None,
                        average_start_seconds: None,
                        protocol: Protocol::Http1,
                        failing: false,
                        instances: vec![],
                    })
                    .collect(),
                cells: None,
            }],
        }
    }

    #[test]
    fn weights_must_sum_to_100() {
        assert!(table(&[100]).validate().is_ok());
        assert!(table(&[90, 10]).validate().is_ok());
        assert!(table(&[0, 100]).validate().is_ok());
        let err = table(&[50, 40]).validate().unwrap_err().to_string();
        assert_eq!(
            err,
            "route hello.production: weights sum to 90, not 100 (hello-0=50, hello-1=40)"
        );
        // None serving yet: the host is known, and answered with a 503.
        assert!(table(&[]).validate().is_ok());
        assert!(table(&[0, 0]).validate().is_ok());
    }

    #[test]
    fn hosts_are_unique() {
        let mut t = table(&[100]);
        t.routes.push(t.routes[0].clone());
        let err = t.validate().unwrap_err().to_string();
        assert!(
            err.contains("host hello.production.localhost is also used by"),
            "{err}"
        );
    }

    #[test]
    fn json_and_yaml_load() {
        let json = r#"{"domain": "example.test", "routes": [{"service": "api", "env": "staging",
            "domains": ["api.example.com"], "revisions": [{"name": "api-1", "weight": 100, "tag": "blue",
            "instances": [{"address": "127.0.0.1:8080", "max_concurrency": 80}]}]}]}"#;
        let t = RouteTableConfig::from_json(json).unwrap();
        assert!(t.routes[0].revisions[0].instances[0].ready);
        assert_eq!(t.routes[0].request_timeout_seconds, 300.0);
        let yaml = "domain: example.test\nroutes:\n  - service: api\n    env: staging\n    domains: [api.example.com]\n    revisions:\n      - name: api-1\n        weight: 100\n        tag: blue\n        instances:\n          - address: 127.0.0.1:8080\n            max_concurrency: 80\n";
        assert_eq!(RouteTableConfig::from_yaml(yaml).unwrap(), t);
        let bad = r#"{"routes": [], "rutes": []}"#;
        assert!(RouteTableConfig::from_json(bad).is_err());
    }

    #[test]
    fn the_example_table_is_valid() {
        let text = include_str!("../examples/routes.yaml");
        let table = RouteTableConfig::from_yaml(text).unwrap();
        assert_eq!(table.routes[0].revisions.len(), 2);
    }

    #[test]
    fn labels_are_checked() {
        let mut t = table(&[100]);
        t.routes[0].service = "Hello".into();
        assert!(t.validate().is_err());
        let mut t = table(&[100]);
        t.routes[0].revisions[0].tag = Some("a---b".into());
        assert!(t.validate().is_err());
    }

    /// A cell-routed route: its rules checked, its cells at `ip:port`, no revisions of its
    /// own, `*` for every host.
    #[test]
    fn a_cell_routed_route_is_checked() {
        let topology = |address: &str| runway_cells::StaticTopology {
            cells: vec![runway_cells::Cell {
                id: 1,
                address: address.to_owned(),
                session_prefix: None,
            }],
            legacy_cell: 1,
        };
        let mut config = table(&[]);
        config.routes[0].domains = vec![ANY_HOST.to_owned()];
        config.routes[0].cells = Some(CellsConfig {
            rules: serde_json::json!([{"id": "all", "action": "proxy"}]),
            topology: topology("http://127.0.0.1:9001"),
            topology_service: None,
        });
        assert!(config.validate().is_ok());
        let mut named = config.clone();
        if let Some(cells) = &mut named.routes[0].cells {
            cells.topology = topology("cell-1.internal:9001");
        }
        assert!(
            named
                .validate()
                .unwrap_err()
                .to_string()
                .contains("is not ip:port")
        );
        let mut bad_rules = config.clone();
        if let Some(cells) = &mut bad_rules.routes[0].cells {
            cells.rules = serde_json::json!([{"id": "x", "action": "classify"}]);
        }
        assert!(
            bad_rules
                .validate()
                .unwrap_err()
                .to_string()
                .contains("classify: missing")
        );
        let mut both = table(&[100]);
        both.routes[0].cells = config.routes[0].cells.clone();
        assert!(
            both.validate()
                .unwrap_err()
                .to_string()
                .contains("no revisions")
        );
    }
}
