//! A service's network policy on Kubernetes: what reaches its pods and what they reach, as one
//! `networking.k8s.io/v1` NetworkPolicy; and the name of its internal Service, the private name
//! other services call it by.
//!
//! Egress mirrors the local runtime's firewall (`runway-runtime`'s `firewall.rs`): DNS to the
//! cluster's resolver (`kube-dns` pods in `kube-system`, UDP and TCP 53) always; other Runway
//! pods (their own ingress policy decides whether they answer); the internet as
//! `0.0.0.0/0` except the private ([`egress::PRIVATE`]) and never-reached ([`egress::NEVER`])
//! ranges when `spec.workload.egress.internet`; the operator's private ranges
//! ([`NetworkOptions::vpc_ranges`]) with `spec.vpc_access.enabled`, refused without them; each
//! `allow` rule as an `ipBlock` with its ports. NetworkPolicy has no deny, so each `deny` rule
//! is subtracted exactly from what is allowed: its range goes into the `except` of every
//! block holding it, and when it names ports, the range comes back as a block of its own with
//! the other ports (a port range is `port` and `endPort`, for TCP and UDP). What a deny cannot
//! take away: DNS and other Runway pods, selected by label rather than address; and a
//! port-restricted deny makes its range reachable on TCP and UDP alone (not ICMP), narrower
//! than asked, never wider.
//!
//! Ingress: the pods admit the platform's public traffic ([`NetworkOptions::ingress`], the
//! ingress controller's pods) when the service is external; its callers' pods
//! (`spec.workload.callers`, every Runway pod when it names none) on its port when it is
//! internal; the ports of its `observability.scrape_targets` from anywhere. A public service
//! whose ingress controller is not named gets no ingress policy at all: it is public anyway.

use std::collections::BTreeMap;

use runway_manifest::egress::{self, Range, Rule};
use runway_manifest::{ServiceConfig, WorkloadKind};
use serde_json::{Map, Value, json};

use crate::RenderError;
use crate::common::{self, NAME_LABEL};

/// The label every namespace carries with its own name (Kubernetes 1.22 and later).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// The label Runway puts on every object and pod it renders.
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "runway");
/// The label carrying a pod's environment.
const ENVIRONMENT_LABEL: &str = "runway.dev/environment";

/// What the cluster around a service is, for its network policy: settings of the operator's,
/// from the command line (`runway render`) or the server's configuration (the driver).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkOptions {
    /// The private ranges (within [`egress::PRIVATE`]) a service with
    /// `spec.vpc_access.enabled: true` reaches; without any, such a service is refused.
    pub vpc_ranges: Vec<Range>,
    /// The pods that bring public traffic: the ingress controller's. Admitted to an external
    /// service's pods; `None` leaves an external service's pods open to the cluster.
    pub ingress: Option<Peer>,
}

/// Pods a policy names: those with `labels` in `namespace` (any namespace when `None`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peer {
    pub namespace: Option<String>,
    pub labels: BTreeMap<String, String>,
}

impl Peer {
    /// Runway's own ingress as its Helm chart runs it (`deploy/helm/runway`): pods labelled
    /// `app.kubernetes.io/part-of: runway` and `app.kubernetes.io/component: ingress`, in any
    /// namespace (the release's is not known to the driver).
    pub fn runway_ingress() -> Self {
        Self {
            namespace: None,
            labels: BTreeMap::from([
                (
                    "app.kubernetes.io/component".to_owned(),
                    "ingress".to_owned(),
                ),
                ("app.kubernetes.io/part-of".to_owned(), "runway".to_owned()),
            ]),
        }
    }

    fn to_json(&self) -> Value {
        let namespace = match &self.namespace {
            Some(namespace) => json!({"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}),
            None => json!({}),
        };
        json!({"namespaceSelector": namespace, "podSelector": match_labels(&self.labels)})
    }
}

fn match_labels(labels: &BTreeMap<String, String>) -> Value {
    if labels.is_empty() {
        json!({})
    } else {
        json!({ "matchLabels": labels })
    }
}

/// Where the other services' pods are.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scope<'a> {
    /// In the policy's own namespace (`runway render`): a caller's environment is its pods'
    /// `runway.dev/environment` label.
    Namespace,
    /// In each environment's namespace, `(environment, namespace)` (the driver's), where
    /// Runway's own ingress also carries calls to private names.
    Environments(&'a [(String, String)]),
}

impl Scope<'_> {
    /// Pods labelled `labels` in the namespaces of `env` (every environment's when `None`);
    /// `None` when this cluster has no namespace for `env`.
    fn peer(&self, labels: BTreeMap<String, String>, env: Option<&str>) -> Option<Value> {
        match self {
            Scope::Namespace => {
                let mut labels = labels;
                if let Some(env) = env {
                    labels.insert(ENVIRONMENT_LABEL.into(), common::label_value(env));
                }
                Some(json!({"podSelector": match_labels(&labels)}))
            }
            Scope::Environments(namespaces) => {
                let names: Vec<&String> = namespaces
                    .iter()
                    .filter(|(e, _)| env.is_none_or(|env| env == e))
                    .map(|(_, namespace)| namespace)
                    .collect();
                let namespace = match names.as_slice() {
                    [] => return None,
                    [one] => json!({"matchLabels": {NAMESPACE_NAME_LABEL: one}}),
                    many => json!({"matchExpressions": [{
                        "key": NAMESPACE_NAME_LABEL, "operator": "In", "values": many,
                    }]}),
                };
                Some(json!({"namespaceSelector": namespace, "podSelector": match_labels(&labels)}))
            }
        }
    }

    fn runway_pods(&self) -> Option<Value> {
        self.peer(managed_by(), None)
    }
}

fn managed_by() -> BTreeMap<String, String> {
    BTreeMap::from([(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned())])
}

/// The name of the internal Service, the private name other services call it by
/// (`<name>-internal.<namespace>.svc`): never a revision's name (which ends in digits), nor the
/// Service the public route targets. At most 63 characters, as a Service's name must be.
pub(crate) fn internal_name(dns_name: &str) -> String {
    let base: String = dns_name.chars().take(63 - "-internal".len()).collect();
    format!("{}-internal", base.trim_end_matches('-'))
}

/// A NetworkPolicy's rules: `ingress` is `None` when nothing restricts what reaches the pods.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rules {
    pub(crate) ingress: Option<Vec<Value>>,
    pub(crate) egress: Vec<Value>,
}

impl Rules {
    pub(crate) fn policy_types(&self) -> Vec<&'static str> {
        match self.ingress {
            Some(_) => vec!["Ingress", "Egress"],
            None => vec!["Egress"],
        }
    }

    /// The NetworkPolicy's spec for pods selected by `pod_selector`.
    pub(crate) fn spec(&self, pod_selector: Map<String, Value>) -> Value {
        let mut spec = Map::new();
        spec.insert("podSelector".into(), json!({"matchLabels": pod_selector}));
        spec.insert("policyTypes".into(), json!(self.policy_types()));
        if let Some(ingress) = self.ingress.as_ref().filter(|i| !i.is_empty()) {
            spec.insert("ingress".into(), json!(ingress));
        }
        spec.insert("egress".into(), json!(self.egress));
        Value::Object(spec)
    }
}

/// The service's rules, or why they cannot be rendered.
pub(crate) fn rules(
    config: &ServiceConfig,
    options: &NetworkOptions,
    scope: Scope<'_>,
) -> Result<Rules, RenderError> {
    Ok(Rules {
        ingress: ingress(config, options, scope),
        egress: egress_rules(config, options, scope)?,
    })
}

fn ingress(
    config: &ServiceConfig,
    options: &NetworkOptions,
    scope: Scope<'_>,
) -> Option<Vec<Value>> {
    let mut scrape_ports: Vec<u16> = config
        .scrape_targets
        .iter()
        .filter_map(|target| target.rsplit_once(':')?.1.parse().ok())
        .collect();
    scrape_ports.sort_unstable();
    scrape_ports.dedup();
    let scrape = (!scrape_ports.is_empty()).then(|| {
        let ports: Vec<Value> = scrape_ports
            .iter()
            .map(|port| json!({"protocol": "TCP", "port": port}))
            .collect();
        json!({"ports": ports})
    });
    let port = match (config.kind, config.port) {
        (WorkloadKind::Service, Some(port)) => port,
        // Nothing serves on a worker: only its metrics are scraped.
        _ => return Some(scrape.into_iter().collect()),
    };
    let mut from = Vec::new();
    // Runway's own ingress carries calls to private names too.
    let driver = matches!(scope, Scope::Environments(_));
    if config.external || (driver && config.internal) {
        match &options.ingress {
            Some(peer) => from.push(peer.to_json()),
            None if config.external => return None,
            None => {}
        }
    }
    if config.internal {
        if config.callers.is_empty() {
            from.extend(scope.runway_pods());
        }
        for caller in &config.callers {
            let (service, env) = match caller.split_once('/') {
                Some((service, env)) => (service, Some(env)),
                None => (caller.as_str(), None),
            };
            let mut labels = managed_by();
            labels.insert(NAME_LABEL.into(), runway_manifest::dns_name(service));
            from.extend(scope.peer(labels, env));
        }
    }
    let mut rules = Vec::new();
    if !from.is_empty() {
        rules.push(json!({"from": from, "ports": [{"protocol": "TCP", "port": port}]}));
    }
    rules.extend(scrape);
    Some(rules)
}

/// Addresses, all but some within them, on some ports: one `ipBlock` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    range: Range,
    except: Vec<Range>,
    /// Inclusive port ranges; `[Rule::ALL_PORTS]` for every port and protocol.
    ports: Vec<(u16, u16)>,
}

impl Block {
    fn new(range: Range, except: impl IntoIterator<Item = Range>, ports: (u16, u16)) -> Self {
        Self {
            range,
            except: except
                .into_iter()
                .filter(|e| strictly_within(*e, range))
                .collect(),
            ports: vec![ports],
        }
    }

    /// This block without `deny`'s addresses on `deny`'s ports: none, itself, or itself
    /// narrowed and the denied range on the remaining ports.
    fn without(self, deny: &Rule) -> Vec<Block> {
        let untouched = !self.range.overlaps(deny.range)
            || self.except.iter().any(|e| e.contains(deny.range))
            || !self.ports.iter().any(|p| ports_overlap(*p, deny.ports));
        if untouched {
            return vec![self];
        }
        let remaining: Vec<(u16, u16)> = self
            .ports
            .iter()
            .flat_map(|p| ports_without(*p, deny.ports))
            .collect();
        if deny.range.contains(self.range) {
            return if remaining.is_empty() {
                Vec::new()
            } else {
                vec![Block {
                    ports: remaining,
                    ..self
                }]
            };
        }
        let (inner, outer): (Vec<Range>, Vec<Range>) =
            self.except.iter().partition(|e| deny.range.contains(**e));
        let mut blocks = vec![Block {
            range: self.range,
            except: outer.into_iter().chain([deny.range]).collect(),
            ports: self.ports,
        }];
        if !remaining.is_empty() {
            blocks.push(Block {
                range: deny.range,
                except: inner,
                ports: remaining,
            });
        }
        blocks
    }

    fn to_json(&self) -> Option<Value> {
        let mut block = Map::new();
        block.insert("cidr".into(), json!(self.range.to_string()));
        if !self.except.is_empty() {
            let mut except = self.except.clone();
            except.sort_unstable();
            block.insert(
                "except".into(),
                json!(except.iter().map(Range::to_string).collect::<Vec<_>>()),
            );
        }
        let mut rule = Map::new();
        rule.insert("to".into(), json!([{"ipBlock": block}]));
        if self.ports != [Rule::ALL_PORTS] {
            let mut ports = Vec::new();
            for (first, last) in &self.ports {
                // Port 0 is no port a connection goes to.
                let first = (*first).max(1);
                if first > *last {
                    continue;
                }
                for protocol in ["TCP", "UDP"] {
                    let mut port = Map::new();
                    port.insert("protocol".into(), json!(protocol));
                    port.insert("port".into(), json!(first));
                    if *last > first {
                        port.insert("endPort".into(), json!(last));
                    }
                    ports.push(Value::Object(port));
                }
            }
            if ports.is_empty() {
                return None;
            }
            rule.insert("ports".into(), Value::Array(ports));
        }
        Some(Value::Object(rule))
    }
}

fn strictly_within(inner: Range, outer: Range) -> bool {
    outer.contains(inner) && inner != outer
}

fn ports_overlap(a: (u16, u16), b: (u16, u16)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

/// `ports` without `deny`: up to two ranges.
fn ports_without(ports: (u16, u16), deny: (u16, u16)) -> Vec<(u16, u16)> {
    if !ports_overlap(ports, deny) {
        return vec![ports];
    }
    let mut left = Vec::new();
    if ports.0 < deny.0 {
        left.push((ports.0, deny.0 - 1));
    }
    if deny.1 < ports.1 {
        left.push((deny.1 + 1, ports.1));
    }
    left
}

fn egress_rules(
    config: &ServiceConfig,
    options: &NetworkOptions,
    scope: Scope<'_>,
) -> Result<Vec<Value>, RenderError> {
    let wanted = &config.egress;
    for (i, range) in options.vpc_ranges.iter().enumerate() {
        if !egress::PRIVATE.iter().any(|p| p.contains(*range)) {
            return Err(RenderError::VpcRangeNotPrivate {
                index: i,
                range: *range,
            });
        }
    }
    let unreachable = egress::PRIVATE.iter().chain(&egress::NEVER).copied();
    let mut blocks = Vec::new();
    if wanted.internet {
        let all = Range::new(std::net::Ipv4Addr::UNSPECIFIED, 0);
        blocks.push(Block::new(all, unreachable.clone(), Rule::ALL_PORTS));
    }
    if wanted.vpc {
        if options.vpc_ranges.is_empty() {
            return Err(RenderError::VpcWithoutRanges {
                service: config.name.clone(),
            });
        }
        for range in &options.vpc_ranges {
            blocks.push(Block::new(*range, [], Rule::ALL_PORTS));
        }
    }
    for (index, rule) in wanted.allow.iter().enumerate() {
        if let Some(within) = unreachable.clone().find(|r| r.contains(rule.range)) {
            return Err(RenderError::EgressAllowUnreachable {
                service: config.name.clone(),
                index,
                rule: *rule,
                within,
            });
        }
        blocks.push(Block::new(rule.range, unreachable.clone(), rule.ports));
    }
    for deny in &wanted.deny {
        blocks = blocks.into_iter().flat_map(|b| b.without(deny)).collect();
    }
    let dns = json!({
        "to": [{
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    });
    let mut rules = vec![dns];
    // Other services: each one's own policy says whether it answers.
    let mut platform: Vec<Value> = scope.runway_pods().into_iter().collect();
    if matches!(scope, Scope::Environments(_))
        && let Some(peer) = &options.ingress
    {
        platform.push(peer.to_json());
    }
    if !platform.is_empty() {
        rules.push(json!({ "to": platform }));
    }
    rules.extend(blocks.iter().filter_map(Block::to_json));
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> Rule {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn range(text: &str) -> Range {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn a_deny_is_subtracted_exactly() {
        let block = Block::new(range("203.0.113.0/24"), [], Rule::ALL_PORTS);
        // Outside: untouched.
        assert_eq!(
            block.clone().without(&rule("198.51.100.0/24")),
            vec![block.clone()]
        );
        // Every port of a range within: excepted.
        let [narrowed] = <[Block; 1]>::try_from(block.clone().without(&rule("203.0.113.8/29")))
            .unwrap_or_else(|b| panic!("{b:?}"));
        assert_eq!(narrowed.except, [range("203.0.113.8/29")]);
        // Some ports of a range within: excepted, and back on the other ports.
        let blocks = block.clone().without(&rule("203.0.113.7:25"));
        assert_eq!(blocks.len(), 2, "{blocks:?}");
        assert_eq!(blocks[0].except, [range("203.0.113.7/32")]);
        assert_eq!(blocks[1].range, range("203.0.113.7/32"));
        assert_eq!(blocks[1].ports, [(0, 24), (26, 65535)]);
        // Every port of the whole block: gone.
        assert!(block.clone().without(&rule("203.0.0.0/16")).is_empty());
        // Some ports of the whole block: the others stay.
        let allow = Block::new(range("203.0.113.0/24"), [], (8000, 8099));
        assert_eq!(
            allow.without(&rule("203.0.0.0/16:8050-8199"))[0].ports,
            [(8000, 8049)]
        );
        // A deny already excepted changes nothing.
        let internet = Block::new(range("0.0.0.0/0"), egress::PRIVATE, Rule::ALL_PORTS);
        assert_eq!(
            internet.clone().without(&rule("10.1.0.0/16:22")),
            [internet]
        );
    }

    #[test]
    fn port_ranges_render_with_end_port() {
        let block = Block {
            range: range("203.0.113.7/32"),
            except: Vec::new(),
            ports: vec![(0, 24), (443, 443)],
        };
        assert_eq!(
            block.to_json().unwrap()["ports"],
            json!([
                {"protocol": "TCP", "port": 1, "endPort": 24},
                {"protocol": "UDP", "port": 1, "endPort": 24},
                {"protocol": "TCP", "port": 443},
                {"protocol": "UDP", "port": 443},
            ])
        );
        let nothing = Block {
            ports: vec![(0, 0)],
            ..block
        };
        assert_eq!(nothing.to_json(), None);
    }

    #[test]
    fn internal_names_are_service_names() {
        assert_eq!(internal_name("users-api"), "users-api-internal");
        let long = internal_name(&format!("{}-b", "a".repeat(53)));
        assert_eq!(long, format!("{}-internal", "a".repeat(53)));
        assert!(long.len() <= 63);
    }
}
