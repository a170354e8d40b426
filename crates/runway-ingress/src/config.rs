//! The route table as the control plane (or an operator's file) gives it: plain serde values,
//! validated before they reach the data plane.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use serde::{Deserialize, Serialize};

pub use crate::controls::{ControlsConfig, MaintenanceConfig, RateLimitConfig};
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
    /// Certificates the control plane obtained for custom domains (ACME): served by SNI for the
    /// names they cover; an operator's certificate (`--cert`) for the same name takes precedence.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<TableCertificate>,
    /// The ACME challenges being answered now.
    #[serde(default, skip_serializing_if = "AcmeChallenges::is_empty")]
    pub acme: AcmeChallenges,
    /// Who each instance of the platform is, by its address: `service/env` for every instance
    /// that has an address of its own, workers too. On the private listener a request from
    /// an address not here is refused, and one from an address here is stamped
    /// `Runway-Caller: service/env`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub callers: BTreeMap<IpAddr, String>,
}

impl Default for RouteTableConfig {
    fn default() -> Self {
        Self {
            domain: default_domain(),
            environments: Vec::new(),
            routes: Vec::new(),
            certificates: Vec::new(),
            acme: AcmeChallenges::default(),
            callers: BTreeMap::new(),
        }
    }
}

/// The domain of private names: `<service>.<env>.internal`, served on the private listener
/// alone.
pub const PRIVATE_DOMAIN: &str = "internal";

/// A certificate for some names, served by SNI (see [`RouteTableConfig::certificates`]). Its
/// names are lower-case DNS names (`*.example.com` for a wildcard), each covered by the
/// certificate's subjectAltName; its key is its leaf's. `Debug` leaves the key out.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableCertificate {
    pub domains: Vec<String>,
    /// PEM: the leaf, then the chain.
    pub cert_pem: String,
    /// PEM: PKCS#8, SEC1 or PKCS#1.
    pub key_pem: String,
}

impl fmt::Debug for TableCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableCertificate")
            .field("domains", &self.domains)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &REDACTED)
            .finish()
    }
}

/// What `Debug` shows for a private key.
const REDACTED: &str = "<redacted>";

/// The ACME challenges an ingress answers (RFC 8555 HTTP-01, RFC 8737 TLS-ALPN-01).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcmeChallenges {
    /// HTTP-01: token → key authorization, answered on the HTTP listener at
    /// `/.well-known/acme-challenge/{token}`. A token is 22 to 256 base64url characters
    /// (RFC 8555 wants 128 bits at least); a key authorization is `{token}.{thumbprint}`, the
    /// thumbprint base64url, at most 128 characters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub http01: BTreeMap<String, String>,
    /// TLS-ALPN-01: domain → the challenge certificate (self-signed, with the acmeIdentifier
    /// extension) and its key, PEM. Served only to a handshake offering `acme-tls/1` alone,
    /// for that name; such a connection is closed once the handshake is done.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tls_alpn01: BTreeMap<String, ChallengeCertificate>,
}

impl AcmeChallenges {
    pub fn is_empty(&self) -> bool {
        self.http01.is_empty() && self.tls_alpn01.is_empty()
    }
}

/// A TLS-ALPN-01 challenge certificate and its key, PEM. `Debug` leaves the key out.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChallengeCertificate {
    pub cert_pem: String,
    pub key_pem: String,
}

impl fmt::Debug for ChallengeCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChallengeCertificate")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &REDACTED)
            .finish()
    }
}

/// The shortest and longest HTTP-01 token taken: 128 bits in base64url is 22 characters.
pub const HTTP01_TOKEN_LENGTH: (usize, usize) = (22, 256);
/// The longest thumbprint in an HTTP-01 key authorization (SHA-256's is 43 characters).
pub const HTTP01_THUMBPRINT_MAX: usize = 128;

impl TableCertificate {
    /// Parses the certificate and its key and checks them as a table's validation does: the
    /// names, the PEM, the key against the leaf, the names against the leaf's. A control plane
    /// checks a certificate once this way, when it gets it, rather than every table.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.check_names()?;
        let pair = self.parse()?;
        self.check_parsed(&pair)
    }

    fn invalid(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::Certificate {
            domains: if self.domains.is_empty() {
                "no domain".to_owned()
            } else {
                self.domains.join(", ")
            },
            message: message.into(),
        }
    }

    fn check_names(&self) -> Result<(), ConfigError> {
        if self.domains.is_empty() {
            return Err(self.invalid("it names no domain"));
        }
        for domain in &self.domains {
            let host = domain.strip_prefix("*.").unwrap_or(domain);
            if !is_host(host) || !host.contains('.') {
                return Err(self.invalid(format!(
                    "domain {domain:?} is not a lower-case DNS name (or `*.` and one)"
                )));
            }
        }
        Ok(())
    }

    pub(crate) fn parse(&self) -> Result<crate::tls::PemPair, ConfigError> {
        crate::tls::parse_pem_pair(&self.cert_pem, &self.key_pem).map_err(|m| self.invalid(m))
    }

    /// The parsed certificate covers every domain.
    pub(crate) fn check_parsed(&self, pair: &crate::tls::PemPair) -> Result<(), ConfigError> {
        for domain in &self.domains {
            if !pair.covers(domain) {
                return Err(self.invalid(format!(
                    "the certificate does not cover {domain} (its names: {})",
                    if pair.names.is_empty() {
                        "none".to_owned()
                    } else {
                        pair.names.join(", ")
                    }
                )));
            }
        }
        Ok(())
    }
}

impl ChallengeCertificate {
    /// Parses the certificate and its key and checks them as a table's validation does: the
    /// PEM, the key against the certificate, `domain` among its names, the acmeIdentifier
    /// extension there.
    pub fn check(&self, domain: &str) -> Result<(), ConfigError> {
        check_challenge_name(domain)?;
        let pair = self.parse(domain)?;
        self.check_parsed(domain, &pair)
    }

    pub(crate) fn parse(&self, domain: &str) -> Result<crate::tls::PemPair, ConfigError> {
        crate::tls::parse_pem_pair(&self.cert_pem, &self.key_pem)
            .map_err(|message| challenge("tls-alpn-01", domain, message))
    }

    pub(crate) fn check_parsed(
        &self,
        domain: &str,
        pair: &crate::tls::PemPair,
    ) -> Result<(), ConfigError> {
        if !pair.names.iter().any(|name| name == domain) {
            return Err(challenge(
                "tls-alpn-01",
                domain,
                "the certificate does not name it",
            ));
        }
        if !pair.acme_identifier {
            return Err(challenge(
                "tls-alpn-01",
                domain,
                "the certificate has no acmeIdentifier extension (RFC 8737)",
            ));
        }
        Ok(())
    }
}

fn challenge(kind: &'static str, name: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Challenge {
        kind,
        name: name.to_owned(),
        message: message.into(),
    }
}

fn check_challenge_name(domain: &str) -> Result<(), ConfigError> {
    if !is_host(domain) || !domain.contains('.') {
        return Err(challenge(
            "tls-alpn-01",
            domain,
            "not a lower-case DNS name (a wildcard is validated by DNS-01, not here)",
        ));
    }
    Ok(())
}

fn is_base64url(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl AcmeChallenges {
    /// Everything but parsing the TLS-ALPN-01 certificates.
    fn check_shape(&self) -> Result<(), ConfigError> {
        let (shortest, longest) = HTTP01_TOKEN_LENGTH;
        for (token, authorization) in &self.http01 {
            // Bounded before it is quoted in an error.
            let shown: String = token.chars().take(longest).collect();
            if !(shortest..=longest).contains(&token.len()) || !is_base64url(token) {
                return Err(challenge(
                    "http-01",
                    &shown,
                    format!("a token is {shortest} to {longest} base64url characters"),
                ));
            }
            let thumbprint = authorization
                .strip_prefix(token.as_str())
                .and_then(|rest| rest.strip_prefix('.'));
            let well_formed = thumbprint.is_some_and(|t| {
                !t.is_empty() && t.len() <= HTTP01_THUMBPRINT_MAX && is_base64url(t)
            });
            if !well_formed {
                return Err(challenge(
                    "http-01",
                    &shown,
                    format!(
                        "the key authorization is not `{{token}}.{{thumbprint}}` with a \
                         base64url thumbprint of at most {HTTP01_THUMBPRINT_MAX} characters"
                    ),
                ));
            }
        }
        for domain in self.tls_alpn01.keys() {
            check_challenge_name(domain)?;
        }
        Ok(())
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
    /// Served on the public listeners (upstream's `external_load_balancer.enabled`): when
    /// false, its public name, tag hosts and custom domains answer 404.
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub public: bool,
    /// Served on the private listener as `<service>.<env>.internal` (and its tags'
    /// `<tag>---<service>.<env>.internal`), to the platform's own instances.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub private: bool,
    /// The request header whose value picks a revision by its tag on the route's own names
    /// (the manifest's `spec.workload.tag_header`); stripped before the instance. None: a
    /// request carrying `Runway-Tag` is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag_header: Option<String>,
    /// Who may call the private name: `service` (any of its environments) or `service/env`;
    /// empty, any instance of the platform.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callers: Vec<String>,
    /// Public clients only from the operator's Cloudflare ranges (upstream's
    /// `network_policies.cloudflare`): any other peer gets 403.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cloudflare: bool,
    /// Rate limits, client address lists and maintenance ([`crate::controls`]).
    #[serde(default, skip_serializing_if = "ControlsConfig::is_empty")]
    pub controls: ControlsConfig,
}

impl RouteConfig {
    /// A route for `service` in `env` with no revision, public only, as most are.
    pub fn new(service: impl Into<String>, env: impl Into<String>) -> Self {
        Self {
            service: service.into(),
            env: env.into(),
            domains: Vec::new(),
            request_timeout_seconds: default_request_timeout_seconds(),
            sticky: false,
            revisions: Vec::new(),
            cells: None,
            public: true,
            private: false,
            callers: Vec::new(),
            cloudflare: false,
            tag_header: None,
            controls: ControlsConfig::default(),
        }
    }

    /// Whether `caller` (`service/env`) may call this route's private name.
    pub fn admits(&self, caller: &str) -> bool {
        admits(&self.callers, caller)
    }
}

/// Whether an entry of `callers` (`service` or `service/env`; none: everyone) names `caller`
/// (`service/env`).
pub(crate) fn admits(callers: &[String], caller: &str) -> bool {
    callers.is_empty()
        || callers.iter().any(|entry| {
            entry == caller
                || caller
                    .split_once('/')
                    .is_some_and(|(service, _)| service == entry)
        })
}

fn is_true(value: &bool) -> bool {
    *value
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

    /// Checks what serde cannot: names, weights, tags and hosts unique across the table; each
    /// certificate's names, PEM and key (its leaf's), each ACME challenge's form. One bad
    /// certificate or challenge refuses the whole table, as a bad route does: the table in
    /// force stays, and the error names the certificate's domains (or the challenge's token or
    /// domain) and what is wrong, never the key. The keys are parsed on every call; an ingress
    /// setting a table parses only those it has not seen (see [`crate::Ingress::set_routes`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_without_keys()?;
        for certificate in &self.certificates {
            certificate.check_parsed(&certificate.parse()?)?;
        }
        for (domain, certificate) in &self.acme.tls_alpn01 {
            certificate.check_parsed(domain, &certificate.parse(domain)?)?;
        }
        Ok(())
    }

    /// [`RouteTableConfig::validate`] but for parsing the certificates and keys, which the
    /// live table does with a cache ([`crate::table::Routes`]).
    pub(crate) fn validate_without_keys(&self) -> Result<(), ConfigError> {
        self.validate_routes()?;
        let mut covered: BTreeMap<&str, usize> = BTreeMap::new();
        for (index, certificate) in self.certificates.iter().enumerate() {
            certificate.check_names()?;
            for domain in &certificate.domains {
                if covered.insert(domain, index).is_some() {
                    return Err(certificate.invalid(format!(
                        "{domain} is also named by another certificate of the table"
                    )));
                }
            }
        }
        self.acme.check_shape()
    }

    fn validate_routes(&self) -> Result<(), ConfigError> {
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
        if self.domain == PRIVATE_DOMAIN || self.domain.ends_with(".internal") {
            return Err(invalid(
                "",
                format!(
                    "domain {:?}: `.{PRIVATE_DOMAIN}` names are the private listener's",
                    self.domain
                ),
            ));
        }
        for (address, caller) in &self.callers {
            let well_formed = caller
                .split_once('/')
                .is_some_and(|(service, env)| is_label(service) && is_label(env));
            if !well_formed {
                return Err(invalid(
                    "",
                    format!("callers: {address} is {caller:?}, not `service/env`"),
                ));
            }
        }
        let mut hosts: BTreeMap<String, String> = BTreeMap::new();
        for route in &self.routes {
            let id = format!("{}.{}", route.service, route.env);
            for entry in &route.callers {
                let well_formed = match entry.split_once('/') {
                    Some((service, env)) => is_label(service) && is_label(env),
                    None => is_label(entry),
                };
                if !well_formed {
                    return Err(invalid(
                        &id,
                        format!("callers: {entry:?} is not `service` or `service/env`"),
                    ));
                }
            }
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
            route
                .controls
                .check()
                .map_err(|message| invalid(&id, message))?;
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
            if let Some(name) = &route.tag_header
                && http::HeaderName::from_bytes(name.as_bytes()).is_err()
            {
                return Err(invalid(
                    &id,
                    format!("tag header {name:?} is not a header name"),
                ));
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
                if host.ends_with(".internal") {
                    return Err(invalid(
                        &id,
                        format!(
                            "custom domain {domain:?}: `.{PRIVATE_DOMAIN}` names are the \
                             private listener's"
                        ),
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
                public: true,
                private: false,
                callers: Vec::new(),
                cloudflare: false,
                tag_header: None,
                controls: Default::default(),
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
            ..RouteTableConfig::default()
        }
    }

    fn certificate(domains: &[&str], (cert_pem, key_pem): (String, String)) -> TableCertificate {
        TableCertificate {
            domains: domains.iter().map(|d| (*d).to_owned()).collect(),
            cert_pem,
            key_pem,
        }
    }

    /// A certificate's names are lower-case DNS names (or wildcards) that its leaf covers, its
    /// key is the leaf's, and a name is one certificate's; the error names the certificate's
    /// domains and what is wrong, and refuses the whole table.
    #[test]
    fn table_certificates_are_checked() {
        use crate::tls::testing::self_signed;
        let pem = self_signed(&["shop.example.test", "*.shop.example.test"]);
        let good = certificate(
            &[
                "shop.example.test",
                "www.shop.example.test",
                "*.shop.example.test",
            ],
            pem.clone(),
        );
        good.check().unwrap();
        let mut t = table(&[100]);
        t.certificates = vec![good.clone()];
        t.validate().unwrap();

        let error = |certificate: TableCertificate| {
            let mut t = table(&[100]);
            t.certificates = vec![certificate];
            let message = t.validate().unwrap_err().to_string();
            // Names are checked without parsing; the rest needs the PEM.
            let names = message.contains("DNS name") || message.contains("no domain");
            assert_eq!(t.validate_without_keys().is_err(), names, "{message}");
            message
        };
        let (_, other_key) = self_signed(&["shop.example.test"]);
        assert_eq!(
            error(certificate(
                &["shop.example.test"],
                (pem.0.clone(), other_key)
            )),
            "certificate for shop.example.test: the key does not match the certificate (its \
             first in cert_pem)"
        );
        assert_eq!(
            error(certificate(
                &["api.example.test", "shop.example.test"],
                pem.clone()
            )),
            "certificate for api.example.test, shop.example.test: the certificate does not \
             cover api.example.test (its names: shop.example.test, *.shop.example.test)"
        );
        for bad in [
            "Shop.example.test",
            "*.*.example.test",
            "shop",
            "shop..example.test",
        ] {
            let message = error(certificate(&[bad], pem.clone()));
            assert!(
                message.contains("is not a lower-case DNS name"),
                "{message}"
            );
        }
        assert!(error(certificate(&[], pem.clone())).contains("names no domain"));
        assert!(
            error(certificate(
                &["shop.example.test"],
                ("x".into(), pem.1.clone())
            ))
            .contains("cert_pem holds no certificate")
        );
        let mut twice = table(&[100]);
        twice.certificates = vec![good.clone(), certificate(&["shop.example.test"], pem)];
        assert!(
            twice
                .validate()
                .unwrap_err()
                .to_string()
                .ends_with("shop.example.test is also named by another certificate of the table"),
        );
    }

    /// HTTP-01 tokens are bounded base64url and their answers `{token}.{thumbprint}`;
    /// TLS-ALPN-01 certificates name their domain and carry the acmeIdentifier extension.
    #[test]
    fn acme_challenges_are_checked() {
        use crate::tls::testing::{challenge, self_signed};
        let token = "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA";
        let answer = format!("{token}.9jg46WB3rR_AHD-EBXdN7cBkH1WOu0tA3M9fm21mqTI");
        let mut t = table(&[100]);
        t.acme.http01.insert(token.to_owned(), answer.clone());
        t.acme.tls_alpn01.insert("shop.example.test".to_owned(), {
            let (cert_pem, key_pem) = challenge("shop.example.test");
            ChallengeCertificate { cert_pem, key_pem }
        });
        t.validate().unwrap();

        let http01 = |token: &str, answer: &str| {
            let mut t = table(&[100]);
            t.acme.http01.insert(token.to_owned(), answer.to_owned());
            t.validate().map_err(|e| e.to_string())
        };
        assert!(
            http01("short", "short.abc")
                .unwrap_err()
                .contains("22 to 256")
        );
        let long = "a".repeat(257);
        assert!(http01(&long, &format!("{long}.abc")).is_err());
        let slash = format!("{}/x", &token[..30]);
        assert!(http01(&slash, &format!("{slash}.abc")).is_err());
        assert!(
            http01(token, "another.thumbprint")
                .unwrap_err()
                .starts_with(&format!(
                    "acme http-01 challenge for {token}: the key authorization"
                ))
        );
        assert!(http01(token, &format!("{token}.")).is_err());
        assert!(http01(token, &format!("{token}.a b")).is_err());
        assert!(http01(token, &format!("{token}.{}", "a".repeat(129))).is_err());

        let tls_alpn01 = |domain: &str, (cert_pem, key_pem): (String, String)| {
            let mut t = table(&[100]);
            t.acme.tls_alpn01.insert(
                domain.to_owned(),
                ChallengeCertificate { cert_pem, key_pem },
            );
            t.validate().unwrap_err().to_string()
        };
        assert_eq!(
            tls_alpn01("shop.example.test", self_signed(&["shop.example.test"])),
            "acme tls-alpn-01 challenge for shop.example.test: the certificate has no \
             acmeIdentifier extension (RFC 8737)"
        );
        assert!(
            tls_alpn01("api.example.test", challenge("shop.example.test"))
                .ends_with("the certificate does not name it")
        );
        assert!(tls_alpn01("*.example.test", challenge("*.example.test")).contains("wildcard"));
        let (cert, _) = challenge("shop.example.test");
        let (_, key) = challenge("shop.example.test");
        assert!(tls_alpn01("shop.example.test", (cert, key)).contains("does not match"));
    }

    /// A table's `Debug` (and so any log of it or of a control request holding it) shows no
    /// private key; one without certificates or challenges is written as before them.
    #[test]
    fn keys_stay_out_of_debug_and_old_tables_read_the_same() {
        let (cert_pem, key_pem) = crate::tls::testing::self_signed(&["shop.example.test"]);
        let (challenge_cert, challenge_key) = crate::tls::testing::challenge("shop.example.test");
        let mut t = table(&[100]);
        t.certificates = vec![certificate(
            &["shop.example.test"],
            (cert_pem.clone(), key_pem.clone()),
        )];
        t.acme.tls_alpn01.insert(
            "shop.example.test".to_owned(),
            ChallengeCertificate {
                cert_pem: challenge_cert,
                key_pem: challenge_key.clone(),
            },
        );
        let debug = format!("{t:?} {t:#?}");
        assert!(!debug.contains("PRIVATE KEY"), "{debug}");
        let key_body = key_pem.lines().nth(1).unwrap();
        let challenge_body = challenge_key.lines().nth(1).unwrap();
        assert!(!debug.contains(key_body) && !debug.contains(challenge_body));
        assert!(debug.contains("shop.example.test") && debug.contains("<redacted>"));
        // The keys do reach the saved table.
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(RouteTableConfig::from_json(&json).unwrap(), t);

        let plain = table(&[100]);
        let json = serde_json::to_value(&plain).unwrap();
        assert!(json.get("certificates").is_none() && json.get("acme").is_none());
        let bad = r#"{"routes": [], "acme": {"http-01": {}}}"#;
        assert!(RouteTableConfig::from_json(bad).is_err());
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
