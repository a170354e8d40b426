//! The configuration file (`runway server --config`): every section and key, its defaults,
//! and `ServerConfig::load`, which checks it whole with the path of a bad key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use runway_api::ApiConfig;
use runway_control::ControllerConfig;
use runway_ingress::control::{Listen, RemoteOptions};
use runway_ingress::fleet::{FleetOptions, IngressFleet};
use runway_secrets::MasterKey;
use runway_store::{DatabaseTrust, PostgresStore, SqliteStore, Store};
use serde::{Deserialize, Serialize};

pub use crate::driver::settings::{EgressSettings, RuntimeConfig};

/// The whole configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// The API: listen address, data directory, TLS, environments, limits.
    pub api: ApiConfig,
    /// Where the ingress serves the services.
    pub ingress: IngressConfig,
    /// The controller: domain, intervals, deploy timeout, drain grace.
    pub control: ControllerConfig,
    /// How instances run: the registries reached over plain HTTP, the OCI runtime.
    pub runtime: RuntimeConfig,
    /// Where the control plane's state is kept.
    pub store: StoreConfig,
    /// Several replicas on one store (`store.url`): who leads.
    pub leader: LeaderConfig,
    /// Where deploys read secrets: OpenBao or Vault (`secrets.vault`), or the sealed store
    /// alone.
    pub secrets: runway_api::vault::SecretsConfig,
    /// The monitoring generated for every service: where to write it, the runbooks' base.
    pub observability: ObservabilityConfig,
    /// Custom domains (`runway domains add`): where their certificates come from.
    pub domains: DomainsConfig,
    /// The platform registry: images mirrored at deploy, and where it is reached.
    pub registry: crate::registry::RegistryConfig,
    /// The audit trail's export: a file, syslog or an HTTPS webhook, at least once.
    pub audit: crate::audit_export::AuditConfig,
    /// Which images may deploy where: each rule covers services and environments, and names
    /// the keys, or the certificate authority and pipelines, a cosign signature must come from.
    pub signatures: Vec<crate::signatures::SignatureRule>,
    /// The identity token every instance gets, signed by Runway as an OpenID Connect issuer:
    /// on or off, the issuer's URL, the tokens' lifetime, the signing keys' rotation.
    pub identity: runway_control::identity::IdentityConfig,
}

/// `domains`: custom domains' certificates. Without `acme`, a domain is routed and served
/// with an operator's certificate for it (`ingress.certificates`) or the local authority's.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DomainsConfig {
    /// The ACME directory (Let's Encrypt, or any RFC 8555 server) that certificates are
    /// ordered from and renewed with.
    pub acme: Option<runway_control::acme::AcmeConfig>,
    /// How often the store's domains and certificates are read again: a change made through
    /// another replica's API is routed within this (one through this server's, at once).
    pub interval_ms: u64,
}

impl Default for DomainsConfig {
    fn default() -> Self {
        Self {
            acme: None,
            interval_ms: 5_000,
        }
    }
}

/// `observability`: the rule file and dashboards generated from the serving revisions'
/// manifests, also served by the API (`GET /v1/observability/rules`, `GET
/// /v1/services/{service}/dashboard`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ObservabilityConfig {
    /// Write `runway.rules.yml` (for Prometheus's `rule_files`) and `dashboards/<service>.json`
    /// (for Grafana's file provisioning) here, again whenever they change; nothing written
    /// without it.
    pub dir: Option<PathBuf>,
    /// The alerts' runbooks are at `{runbook_base}/{service}` unless a manifest names one
    /// (`spec.workload.slo.runbook_url`).
    pub runbook_base: Option<String>,
    /// How often the files are made again and compared with those written.
    pub interval_ms: u64,
}

impl Default for ObservabilityConfig {
    fn default() -> Self {
        Self {
            dir: None,
            runbook_base: None,
            interval_ms: 10_000,
        }
    }
}

/// With `store.url`, several `runway server` replicas may share the store: every one serves
/// the API, and the one holding the store's lease runs the controller. A leader that loses
/// the lease exits (its supervisor starts it again, as a follower), so that no state it held
/// outlives its term.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaderConfig {
    /// The lease's length: how long the others wait before taking over from a leader that
    /// stopped renewing (it renews every third of it).
    pub lease_ms: u64,
    /// This replica's name among them (default: the host's name and this process's id).
    pub replica: Option<String>,
}

impl Default for LeaderConfig {
    fn default() -> Self {
        Self {
            lease_ms: 10_000,
            replica: None,
        }
    }
}

impl LeaderConfig {
    pub(crate) fn replica(&self) -> String {
        self.replica.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|name| name.trim().to_owned())
                .unwrap_or_else(|_| "runway".to_owned());
            format!("{host}-{}", std::process::id())
        })
    }
}

/// Where the control plane's state is kept: SQLite in the data directory, or a PostgreSQL
/// database that several replicas share.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `postgres://user:password@host:port/database` (or libpq's `key=value` form). Without
    /// it, `runway.db` in the data directory.
    #[serde(serialize_with = "without_password")]
    pub url: Option<String>,
    /// A file holding `url` (a mounted Kubernetes Secret's key, say), so the configuration
    /// holds no password. Read at the start; give one of the two.
    pub url_file: Option<PathBuf>,
    /// The authority (PEM) the database's certificate must come from over TLS; default: the
    /// system's roots. Over TLS (`sslmode=require` in the URL, or `prefer`, the default, when
    /// the server offers it) the certificate is always checked, its chain and the host's name.
    pub ca_file: Option<PathBuf>,
    /// The key that seals secrets (32 bytes, readable by its owner only, or read by this
    /// process's group too: a Kubernetes Secret mounted with `defaultMode: 0440` for the
    /// pod's `fsGroup`). Default:
    /// `master.key` in the data directory, made on the first start. Replicas on several
    /// machines share one, named here (a Kubernetes Secret's file, say), which must exist:
    /// one made by each would seal secrets the others cannot open.
    pub master_key: Option<PathBuf>,
}

/// A store URL as shown (`runway server check-config`): its password replaced by `***`.
fn without_password<S: serde::Serializer>(
    url: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let shown = url.as_deref().map(|url| {
        let Some((scheme, rest)) = url.split_once("://") else {
            // The key=value form: its password= pair hidden.
            return url
                .split_whitespace()
                .map(|pair| match pair.split_once('=') {
                    Some(("password", _)) => "password=***".to_owned(),
                    _ => pair.to_owned(),
                })
                .collect::<Vec<_>>()
                .join(" ");
        };
        match rest.rsplit_once('@') {
            Some((credentials, host)) => match credentials.split_once(':') {
                Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
                None => url.to_owned(),
            },
            None => url.to_owned(),
        }
    });
    serializer.serialize_some(&shown)
}

impl StoreConfig {
    /// The master key: the one named (which must exist), or the data directory's, made on
    /// the first start.
    pub(crate) fn master_key(&self, data_dir: &Path) -> anyhow::Result<MasterKey> {
        match &self.master_key {
            Some(path) => MasterKey::load(path).with_context(|| {
                format!(
                    "store.master_key: cannot use {} (a named key must exist: every replica \
                     shares it)",
                    path.display()
                )
            }),
            None => {
                let path = data_dir.join("master.key");
                MasterKey::load_or_create(&path)
                    .map(|(key, _)| key)
                    .with_context(|| format!("cannot use the master key {}", path.display()))
            }
        }
    }

    /// `url` read from `url_file` when that is given (one of the two may be).
    pub(crate) fn read_url_file(&mut self, path: &Path) -> anyhow::Result<()> {
        let Some(file) = &self.url_file else {
            return Ok(());
        };
        if self.url.is_some() {
            bail!(
                "{}: store.url and store.url_file: give one of the two",
                path.display()
            );
        }
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("store.url_file: cannot read {}", file.display()))?;
        let url = text.trim();
        if url.is_empty() {
            bail!("store.url_file: {} is empty", file.display());
        }
        self.url = Some(url.to_owned());
        Ok(())
    }

    /// Whom a TLS connection to the database trusts.
    pub fn trust(&self) -> anyhow::Result<DatabaseTrust> {
        Ok(match &self.ca_file {
            Some(path) => DatabaseTrust::Pem(
                std::fs::read(path)
                    .with_context(|| format!("store.ca_file: cannot read {}", path.display()))?,
            ),
            None => DatabaseTrust::System,
        })
    }

    /// Opens the store: PostgreSQL's when a URL is given, else `runway.db` in `data_dir`.
    pub(crate) fn open(&self, data_dir: &Path) -> anyhow::Result<Arc<dyn Store>> {
        Ok(match &self.url {
            Some(url) => Arc::new(
                PostgresStore::open_trusting(url, &self.trust()?)
                    .context("store.url: cannot open the store")?,
            ),
            None => Arc::new(
                SqliteStore::open(data_dir.join("runway.db"))
                    .with_context(|| format!("cannot open the store in {}", data_dir.display()))?,
            ),
        })
    }
}

/// Where the ingress listens, and its process's bounds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IngressConfig {
    /// HTTPS, for every service's `https://{service}.{env}.{domain}:{port}/`.
    pub https: SocketAddr,
    /// Plain HTTP: redirected to HTTPS unless `redirect` is false, then served as is.
    pub http: SocketAddr,
    pub redirect: bool,
    /// Prometheus metrics (`/metrics`) and `/healthz`.
    pub admin: SocketAddr,
    /// Time a new ingress process has to answer on its control socket.
    pub start_timeout_ms: u64,
    /// Time in-flight requests get when the ingress stops (replaced, or by `runway quickstart`).
    pub shutdown_grace_ms: u64,
    /// Bound on one request to the ingress's control socket (a table, hello, stop).
    pub control_timeout_ms: u64,
    /// How often the ingress sends every revision's figures to the controller: how old the
    /// autoscaler's and the canary analysis's figures may be.
    pub stats_interval_ms: u64,
    /// Ingresses run by someone else (a Deployment in a cluster) and fed over the network,
    /// instead of the ingress process this server starts: then `https`, `http`, `admin`,
    /// `start_timeout_ms` and `shutdown_grace_ms` are theirs to set, not this file's.
    pub remote: Option<RemoteIngressConfig>,
    /// The operator's own certificates, served by SNI for their domains before any obtained
    /// through ACME (and read again when their files change): for custom domains whose
    /// certificates come from elsewhere, or a wildcard. With `remote`, the ingresses' own
    /// arguments carry them instead.
    pub certificates: Vec<OperatorCertificate>,
    /// Hosts the ingress routes to cells rather than to services, as `runway router` does
    /// (GitLab's HTTP router rules and a topology): runners reach the platform's ingress.
    pub cells: Vec<CellRouterConfig>,
    /// Cloudflare's address ranges (one CIDR a line, IPv4 or IPv6, `#` comments): services
    /// with `network_policies.cloudflare: true` admit only clients from these, and trust their
    /// `CF-Connecting-IP` and `X-Forwarded-For`. The ingress reads the file again when it
    /// changes (a bad one keeps the last good list). Without it, such services refuse every
    /// client.
    pub cloudflare_ranges_file: Option<PathBuf>,
    /// The operator's bounds on services' rate limits.
    pub traffic: TrafficBounds,
    /// Traces of every request through the ingress, sent to an OpenTelemetry collector.
    pub tracing: Option<IngressTracing>,
}

/// `ingress.tracing`: where the ingress sends each request's spans (W3C trace context in and
/// out; the request, its hold while a revision starts, its queue, the call to the instance).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngressTracing {
    /// The collector's OTLP/HTTP base URL (`http://otel-collector:4318`).
    pub otlp_endpoint: String,
    /// The share of traces started at the ingress that are kept, 0 to 1 (default 1); a
    /// request whose caller sent `traceparent` follows its sampled flag.
    #[serde(default = "one")]
    pub sample_ratio: f64,
}

fn one() -> f64 {
    1.0
}

/// `ingress.traffic`: bounds on what services' manifests ask of the ingress.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficBounds {
    /// The most each client may send to any one service (`requests_per_second`, `burst`): a
    /// service's `spec.workload.rate_limit.per_client` may be lower, not higher (a deploy
    /// asking more is refused), and a service without one gets this. None: no ceiling.
    pub per_client: Option<runway_ingress::RateLimitConfig>,
    /// Client connections open at once from one address (an IPv6 client's /64), past which
    /// its new ones are closed at accept; 0, no limit. None: the ingress's default (256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections_per_client: Option<usize>,
    /// Clients that per-client rate limits keep a bucket for, every service together, each
    /// service with such a limit an equal share (at least 1,024). None: the ingress's
    /// default (1,048,576, at most about 64 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rate_limited_clients: Option<usize>,
}

/// A host routed to cells.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellRouterConfig {
    /// The host runners call (`gitlab.example.com`); its certificate comes from the platform's
    /// authority, or an operator's.
    pub host: String,
    /// The rule file, in GitLab's HTTP router format.
    pub rules: PathBuf,
    /// The topology file: `cells: [{id, address, session_prefix}]`, `legacy_cell: ID`.
    pub topology: PathBuf,
    /// GitLab's topology service, as `runway router --topology-service`.
    #[serde(default)]
    pub topology_service: Option<runway_ingress::config::TopologyServiceConfig>,
    /// Time from a request's arrival to its cell's response head: a long poll's, an
    /// upload's. Default an hour. Bodies are bound by the ingress's own size limit.
    #[serde(default = "default_cells_request_timeout_seconds")]
    pub request_timeout_seconds: u64,
}

fn default_cells_request_timeout_seconds() -> u64 {
    3600
}

impl IngressConfig {
    /// The cell-routed routes, `cells1`, `cells2`... in env `cells`, files read and names
    /// resolved.
    pub(crate) async fn cell_routes(&self) -> anyhow::Result<Vec<runway_ingress::RouteConfig>> {
        let mut routes = Vec::new();
        for (index, cells) in self.cells.iter().enumerate() {
            let route = crate::cells::cell_route(
                &format!("cells{}", index + 1),
                vec![cells.host.to_ascii_lowercase()],
                &cells.rules,
                &crate::cells::Topology::File(&cells.topology),
                cells.topology_service.clone(),
                Duration::from_secs(cells.request_timeout_seconds.max(1)),
            )
            .await
            .with_context(|| format!("ingress.cells[{index}]"))?;
            routes.push(route);
        }
        Ok(routes)
    }
}

/// Ingresses reached over the network (`runway-ingress --control-listen`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteIngressConfig {
    /// `host:port` names, each standing for every address it resolves to (a headless
    /// Service's name lists every ingress pod).
    pub addresses: Vec<String>,
    /// The control channel's certificates: `ca.crt`, and this control plane's client
    /// certificate `tls.crt` and key `tls.key`.
    pub tls_dir: PathBuf,
    /// The name the ingresses' certificate is for.
    #[serde(default = "default_control_server_name")]
    pub server_name: String,
    /// How often the names are resolved again.
    #[serde(default = "default_resolve_interval_ms")]
    pub resolve_interval_ms: u64,
    /// The port clients reach the ingresses' HTTPS on, for the URLs Runway shows.
    #[serde(default = "default_public_https_port")]
    pub https_port: u16,
}

fn default_control_server_name() -> String {
    runway_ingress::control_tls::SERVER_NAME.to_owned()
}

fn default_resolve_interval_ms() -> u64 {
    2_000
}

fn default_public_https_port() -> u16 {
    443
}

impl Default for IngressConfig {
    fn default() -> Self {
        Self {
            https: SocketAddr::from(([127, 0, 0, 1], 8443)),
            http: SocketAddr::from(([127, 0, 0, 1], 8080)),
            redirect: true,
            admin: SocketAddr::from(([127, 0, 0, 1], 9090)),
            start_timeout_ms: 10_000,
            shutdown_grace_ms: 30_000,
            control_timeout_ms: 5_000,
            stats_interval_ms: 200,
            remote: None,
            cells: Vec::new(),
            certificates: Vec::new(),
            cloudflare_ranges_file: None,
            traffic: TrafficBounds::default(),
            tracing: None,
        }
    }
}

/// `ingress.certificates[]`: a certificate chain and its key (PEM files) for some domains.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorCertificate {
    /// The names it serves (`www.example.com`, `*.example.com`).
    pub domains: Vec<String>,
    /// The chain, leaf first.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
}

impl IngressConfig {
    /// Where the ingress this server starts listens. With `platform` (the instance network's
    /// platform address), instances' private listener on port 80 and resolver on port 53.
    pub(crate) fn listen(&self, platform: Option<std::net::Ipv4Addr>) -> Listen {
        Listen {
            private: platform.map(|address| SocketAddr::from((address, 80))),
            dns: platform.map(|address| SocketAddr::from((address, 53))),
            dns_upstreams: Vec::new(),
            cloudflare_ranges: self.cloudflare_ranges_file.clone(),
            traces: self
                .tracing
                .as_ref()
                .map(|t| runway_ingress::control::TraceExport {
                    endpoint: t.otlp_endpoint.clone(),
                    sample_ratio: t.sample_ratio,
                }),
            max_connections_per_client: self.traffic.max_connections_per_client,
            max_rate_limited_clients: self.traffic.max_rate_limited_clients,
            http: self.http,
            https: Some(self.https),
            admin: self.admin,
            redirect: self.redirect,
            certificates: self
                .certificates
                .iter()
                .map(|c| runway_ingress::tls::certificate_argument(&c.domains, &c.cert, &c.key))
                .collect(),
        }
    }

    /// The ingresses of `remote`, looked for now and from then on.
    pub(crate) async fn fleet(&self, remote: &RemoteIngressConfig) -> anyhow::Result<IngressFleet> {
        let tls =
            runway_ingress::control_tls::ClientTls::load(&remote.tls_dir, &remote.server_name)
                .context("ingress.remote.tls_dir: cannot use the control channel's certificates")?;
        Ok(IngressFleet::connect(FleetOptions {
            addresses: remote.addresses.clone(),
            tls,
            resolve_every: Duration::from_millis(remote.resolve_interval_ms.max(100)),
            remote: self.remote_options(),
        })
        .await)
    }

    pub(crate) fn remote_options(&self) -> RemoteOptions {
        RemoteOptions {
            timeout: Duration::from_millis(self.control_timeout_ms.max(1)),
            stats_interval: Duration::from_millis(self.stats_interval_ms.max(1)),
            ..RemoteOptions::default()
        }
    }
}

impl ServerConfig {
    /// Reads the file (errors name its line and key path), or the defaults without one.
    pub fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let mut config: Self = runway_api::config::parse_file(path, &text)?;
        config.store.read_url_file(path)?;
        // Its keys are under `api` in this file.
        config.api.check(path).map_err(|error| match error {
            runway_api::config::ConfigError::Invalid { path, key, message } => {
                runway_api::config::ConfigError::Invalid {
                    path,
                    key: format!("api.{key}"),
                    message,
                }
            }
            other => other,
        })?;
        config
            .runtime
            .check()
            .map_err(|(key, message)| anyhow::anyhow!("{}: {key}: {message}", path.display()))?;
        if let Some(vault) = &config.secrets.vault {
            vault.check().map_err(|(key, message)| {
                anyhow::anyhow!("{}: secrets.vault.{key}: {message}", path.display())
            })?;
        }
        config.audit.check().map_err(|(key, message)| {
            anyhow::anyhow!("{}: audit.{key}: {message}", path.display())
        })?;
        config.identity.check().map_err(|(key, message)| {
            anyhow::anyhow!("{}: identity.{key}: {message}", path.display())
        })?;
        crate::signatures::SignaturePolicy::load(&config.signatures)
            .map_err(|error| anyhow::anyhow!("{}: {error:#}", path.display()))?;
        if let Some(acme) = &config.domains.acme {
            acme.check().map_err(|(key, message)| {
                anyhow::anyhow!("{}: domains.acme.{key}: {message}", path.display())
            })?;
        }
        for (index, certificate) in config.ingress.certificates.iter().enumerate() {
            let at = format!("{}: ingress.certificates[{index}]", path.display());
            if certificate.domains.is_empty() {
                bail!("{at}.domains: name at least one domain the certificate serves");
            }
            for (key, file) in [("cert", &certificate.cert), ("key", &certificate.key)] {
                if file.to_string_lossy().contains(':') {
                    bail!(
                        "{at}.{key}: {} has a `:` in its path, which the ingress's \
                           --certificate cannot take",
                        file.display()
                    );
                }
                if let Err(error) = std::fs::metadata(file) {
                    bail!("{at}.{key}: cannot read {}: {error}", file.display());
                }
            }
        }
        if config.domains.interval_ms == 0 {
            bail!("{}: domains.interval_ms: must be above 0", path.display());
        }
        for (index, cells) in config.ingress.cells.iter().enumerate() {
            let host = cells.host.to_ascii_lowercase();
            let domain = config.control.domain.to_ascii_lowercase();
            if host == domain || host.ends_with(&format!(".{domain}")) {
                bail!(
                    "{}: ingress.cells[{index}].host: {host} is under the platform's domain \
                     {domain}, where services' names live: give a host of its own",
                    path.display()
                );
            }
        }
        if !config.ingress.cells.is_empty()
            && config
                .api
                .environments
                .iter()
                .any(|env| env == crate::cells::CELLS_ENV)
        {
            bail!(
                "{}: ingress.cells: `{}` is an environment, and cell-routed hosts live in an env \
                 of that name: rename the environment",
                path.display(),
                crate::cells::CELLS_ENV
            );
        }
        if let Some(file) = &config.ingress.cloudflare_ranges_file {
            let at = format!("{}: ingress.cloudflare_ranges_file", path.display());
            if config.ingress.remote.is_some() {
                bail!(
                    "{at}: the ingresses of ingress.remote take their ranges with their own \
                     --cloudflare-ranges argument"
                );
            }
            runway_ingress::cloudflare::load(file)
                .map_err(|error| anyhow::anyhow!("{at}: {}", runway_log::chain(&error)))?;
        }
        if let Some(tracing) = &config.ingress.tracing {
            let at = format!("{}: ingress.tracing", path.display());
            if config.ingress.remote.is_some() {
                bail!(
                    "{at}: the ingresses of ingress.remote take it with their own \
                     --otlp-endpoint argument"
                );
            }
            runway_ingress::trace::check_endpoint(&tracing.otlp_endpoint)
                .map_err(|why| anyhow::anyhow!("{at}.otlp_endpoint: {why}"))?;
            if !(0.0..=1.0).contains(&tracing.sample_ratio) {
                bail!(
                    "{at}.sample_ratio: {} is not between 0 and 1",
                    tracing.sample_ratio
                );
            }
        }
        if let Some(ceiling) = &config.ingress.traffic.per_client {
            runway_ingress::ControlsConfig {
                client_rate_limit: Some(*ceiling),
                ..runway_ingress::ControlsConfig::default()
            }
            .check()
            .map_err(|why| {
                anyhow::anyhow!(
                    "{}: ingress.traffic.per_client: {}",
                    path.display(),
                    why.replace("controls.client_rate_limit.", "")
                )
            })?;
        }
        if config.registry.retention_hours == 0 {
            bail!(
                "{}: registry.retention_hours: 0 would collect an image a deploy is copying \
                 before its revision names it: expected at least 1 (hours)",
                path.display()
            );
        }
        if let Some(host) = &config.registry.host
            && !crate::registry::is_registry_host(host)
        {
            bail!(
                "{}: registry.host: `{host}` is not a registry's host: expected `host:port` \
                 (or `host`), as an image reference begins, e.g. `runway.example.com:7443`",
                path.display()
            );
        }
        if let Some(external) = &config.registry.external
            && !crate::registry::is_external_repository(&external.repository)
        {
            bail!(
                "{}: registry.external.repository: `{}` is not a repository to push mirrors \
                 to: expected a registry's host and a lower-case path, as an image reference \
                 begins, e.g. `registry.gitlab.com/acme/runway`",
                path.display(),
                external.repository
            );
        }
        if let Some(base) = &config.registry.process_base
            && !runway_manifest::is_pinned(base)
        {
            bail!(
                "{}: registry.process_base: `{base}` is not pinned by digest: expected \
                 `registry/repository@sha256:<64 hex digits>` (`skopeo inspect \
                 docker://IMAGE` prints the digest), so that no process's image changes under it",
                path.display()
            );
        }
        if let Some(remote) = &config.ingress.remote
            && remote.addresses.is_empty()
        {
            bail!(
                "{}: ingress.remote.addresses: expected at least one `host:port`",
                path.display()
            );
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ingress_traffic_bounds_go_to_the_ingress_it_starts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.yml");
        std::fs::write(
            &path,
            "ingress:\n  traffic:\n    max_connections_per_client: 0\n    max_rate_limited_clients: 4096\n",
        )
        .unwrap();
        let listen = ServerConfig::load(Some(&path))
            .unwrap()
            .ingress
            .listen(None);
        assert_eq!(listen.max_connections_per_client, Some(0));
        assert_eq!(listen.max_rate_limited_clients, Some(4096));
        let defaults = ServerConfig::default().ingress.listen(None);
        assert_eq!(defaults.max_connections_per_client, None);
        std::fs::write(&path, "ingress:\n  traffic:\n    max_connections: 1\n").unwrap();
        let error = format!("{:#}", ServerConfig::load(Some(&path)).unwrap_err());
        assert!(error.contains("max_connections"), "{error}");
    }

    #[test]
    fn the_runtime_section_names_plain_http_registries_and_refuses_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.yml");
        std::fs::write(
            &path,
            "runtime:\n  insecure_registries: [\"127.0.0.1:5000\"]\n  oci_runtime: crun\n",
        )
        .unwrap();
        let config = ServerConfig::load(Some(&path)).unwrap();
        assert_eq!(config.runtime.insecure_registries, ["127.0.0.1:5000"]);
        std::fs::write(&path, "runtime:\n  seccomp_unconfined: [debugger]\n").unwrap();
        let unconfined = ServerConfig::load(Some(&path)).unwrap().runtime;
        assert!(
            unconfined
                .seccomp_policy()
                .profile_for("debugger")
                .is_none()
        );
        assert!(unconfined.seccomp_policy().profile_for("web").is_some());
        assert_eq!(config.runtime.oci_runtime, PathBuf::from("crun"));
        assert_eq!(
            ServerConfig::default().runtime.oci_runtime,
            PathBuf::from("runc")
        );

        std::fs::write(&path, "runtime:\n  insecure_registry: [x]\n").unwrap();
        let error = format!("{:#}", ServerConfig::load(Some(&path)).unwrap_err());
        assert!(error.contains("runtime.insecure_registry"), "{error}");
        assert!(error.contains(":2:"), "{error}");

        for (text, key) in [
            (
                "runtime:\n  process_uid_base: 100500\n",
                "runtime.process_uid_base",
            ),
            (
                "runtime:\n  process_uid_base: 0\n",
                "runtime.process_uid_base",
            ),
            (
                "runtime:\n  process_host_paths: [usr]\n",
                "runtime.process_host_paths",
            ),
            (
                "runtime:\n  seccomp_unconfined: [\"\"]\n",
                "runtime.seccomp_unconfined",
            ),
            ("runtime:\n  kind: k8s\n", "runtime.kind"),
            (
                "runtime:\n  kind: kubernetes\n  kubernetes:\n    namespace_pattern: apps\n",
                "runtime.kubernetes.namespace_pattern: \"apps\" does not contain {env}",
            ),
            (
                "runtime:\n  kubernetes:\n    kubeconfg: /x\n",
                "runtime.kubernetes.kubeconfg",
            ),
            (
                "runtime:\n  instance_network: 10.213.0.1/16\n",
                "runtime.instance_network: \"10.213.0.1/16\" is not an IPv4 range like \
                 10.213.0.0/16: it has host bits set; the range starts at 10.213.0.0/16, or host",
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let error = format!("{:#}", ServerConfig::load(Some(&path)).unwrap_err());
            assert!(error.contains(key), "{error}");
        }
        std::fs::write(
            &path,
            "runtime:\n  kind: kubernetes\n  kubernetes:\n    kubeconfig: /etc/k\n",
        )
        .unwrap();
        let config = ServerConfig::load(Some(&path)).unwrap();
        assert_eq!(config.runtime.kind, "kubernetes");
        assert_eq!(
            config.runtime.kubernetes.kubeconfig.as_deref(),
            Some(Path::new("/etc/k"))
        );
        assert_eq!(config.runtime.kubernetes.namespace_pattern, "runway-{env}");
        let defaults = RuntimeConfig::default();
        assert_eq!(defaults.kind, "local");
        assert!(!defaults.allow_processes && defaults.isolate_processes);
        assert!(defaults.seccomp_policy().unconfined.is_empty());
        assert_eq!(defaults.allowed_registries, ["*"]);
        assert_eq!(
            defaults.address_pool().unwrap().map(|pool| pool.capacity()),
            Some(16_383)
        );
        let host = RuntimeConfig {
            instance_network: "host".to_owned(),
            ..defaults
        };
        assert_eq!(host.address_pool(), Ok(None));
    }

    #[test]
    fn the_audit_section_names_the_bad_key_of_a_sink() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.yml");
        std::fs::write(
            &path,
            "audit:\n  export:\n    - name: archive\n      file:\n        path: /var/log/a.jsonl\n\
             \x20   - name: siem\n      webhook:\n        url: https://siem.example/in\n\
             \x20       headers:\n          Authorization: Bearer s3cret\n      batch: 50\n",
        )
        .unwrap();
        let config = ServerConfig::load(Some(&path)).unwrap();
        assert_eq!(config.audit.export.len(), 2);
        assert_eq!(config.audit.export[1].batch, 50);
        assert_eq!(config.audit.export[0].buffer, 10_000);
        // A header's value is not shown (check-config prints the configuration).
        let shown = serde_json::to_string(&config.audit).unwrap();
        assert!(!shown.contains("s3cret"), "{shown}");
        for (text, expected) in [
            (
                "audit:\n  export:\n    - name: a\n",
                "audit.export[0]: give exactly one of file, syslog and webhook",
            ),
            (
                "audit:\n  export:\n    - name: a\n      file: {path: x.jsonl}\n",
                "audit.export[0].file.path: x.jsonl is not an absolute path",
            ),
            (
                "audit:\n  export:\n    - name: a\n      webhook: {url: http://x.example}\n",
                "audit.export[0].webhook.url",
            ),
            (
                "audit:\n  export:\n    - name: a\n      syslog: {address: 10.0.0.1:514}\n",
                "audit.export[0].syslog.address",
            ),
            (
                "audit:\n  export:\n    - name: a\n      syslog: {address: udp://h:514, facility: mail}\n",
                "audit.export[0].syslog.facility",
            ),
            (
                "audit:\n  export:\n    - name: a\n      file: {path: /a}\n      buffer: 10\n      batch: 20\n",
                "audit.export[0].buffer: 10 is below batch (20)",
            ),
            (
                "audit:\n  export:\n    - name: a\n      file: {path: /a}\n    - name: a\n      file: {path: /b}\n",
                "audit.export[1].name",
            ),
            (
                "audit:\n  export:\n    - name: a b\n      file: {path: /a}\n",
                "audit.export[0].name",
            ),
            (
                "audit:\n  export:\n    - name: a\n      file: {path: /a}\n      batchh: 2\n",
                "batchh",
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let error = format!("{:#}", ServerConfig::load(Some(&path)).unwrap_err());
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn the_registry_section_refuses_what_no_reference_can_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.yml");
        std::fs::write(
            &path,
            "registry:\n  external:\n    repository: registry.gitlab.com/acme/runway\n",
        )
        .unwrap();
        let config = ServerConfig::load(Some(&path)).unwrap();
        assert_eq!(
            config.registry.external.map(|e| e.repository).as_deref(),
            Some("registry.gitlab.com/acme/runway")
        );
        for (text, expected) in [
            (
                "registry:\n  retention_hours: 0\n",
                "registry.retention_hours: 0",
            ),
            ("registry:\n  host: x/y\n", "registry.host: `x/y`"),
            (
                "registry:\n  external:\n    repository: acme/runway\n",
                "registry.external.repository: `acme/runway` is not a repository",
            ),
            (
                "registry:\n  external:\n    repositry: registry.gitlab.com/a\n",
                "registry.external.repositry",
            ),
            (
                "registry:\n  process_base: python:3\n",
                "registry.process_base: `python:3` is not pinned by digest",
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let error = format!("{:#}", ServerConfig::load(Some(&path)).unwrap_err());
            assert!(error.contains(expected), "{text}: {error}");
            assert!(error.contains("server.yml"), "{text}: {error}");
        }
    }
}
