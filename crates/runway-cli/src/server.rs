//! `runway server`: the control plane in one process: the API, the store, the controller and
//! the local runtime. The data plane runs beside it: the ingress in a process of its own
//! (started, or adopted when one already runs on the data directory) and each instance under
//! its own supervisor, so stopping or killing the server stops no instance and fails no
//! request; the next start adopts them and feeds the ingress again.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use runway_api::{ApiConfig, ApiState, BoxFuture, Platform, SourceRefused, StatusParts};
use runway_control::DataPlane;
use runway_control::leader::{Election, Leadership};
use runway_control::{Controller, ControllerConfig};
use runway_driver::Driver;
use runway_ingress::control::{ControlClient, Listen, RemoteIngress, RemoteOptions};
use runway_ingress::daemon::{IngressCommand, Launch, Outcome};
use runway_ingress::fleet::{FleetOptions, IngressFleet};
use runway_oci::source::{SourceError, SourceStore};
use runway_runtime::network::{AddressPool, DEFAULT_LEASES_DIR};
use runway_runtime::sandbox::SandboxPolicy;
use runway_runtime::seccomp::SeccompPolicy;
use runway_runtime::{LocalDriver, LocalDriverOptions, LocalRuntime};

use crate::driver::{KubernetesConfig, RuntimeKind, ServerDriver};
use runway_secrets::{MasterKey, Sealer};
use runway_store::{DatabaseTrust, PostgresStore, SqliteStore, Store};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc, watch};

/// `runway server`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The configuration file (YAML): `api`, `ingress`, `control`, `runtime`, `store`,
    /// `leader`, `secrets`, `observability` and `domains` sections, every key optional, unknown
    /// keys refused (docs/server-configuration.md has a sample with every key; `runway server
    /// check-config` prints the configuration in force, ports included).
    #[arg(long, value_name = "FILE", global = true)]
    pub(crate) config: Option<PathBuf>,
    /// Where the store, the master key, the certificate authority and the instances' state
    /// live (overrides `api.data_dir`).
    #[arg(long, value_name = "DIR", env = "RUNWAY_DATA_DIR", global = true)]
    pub(crate) data_dir: Option<PathBuf>,
    /// How this process's log lines are written on stderr: `text` (readable) or `json` (one
    /// object a line, with the spans it happened in: service, environment, deployment,
    /// revision, instance); `RUST_LOG` filters them (default `info`).
    #[arg(long, value_name = "FORMAT", default_value = "text", global = true)]
    pub(crate) log_format: runway_log::LogFormat,
    #[command(subcommand)]
    pub(crate) command: Option<ServerCommand>,
}

/// What `runway server` does besides serving.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ServerCommand {
    /// Recover admin access: revoke every admin token and print a new one.
    ///
    /// For an operator who lost the admin token (or never saw it). Needs what the server
    /// itself needs: to read and write the data directory's store, so local root (or the
    /// server's user) on this machine. Works whether or not the server is running; the old
    /// admin tokens stop working at once. The new token goes to standard output, alone.
    AdminToken,
    /// Check the configuration and what it names, start nothing, and print the configuration
    /// in force (every default applied) as JSON.
    ///
    /// Checks the file's keys and values, the certificate authority when it exists, the
    /// control channel's certificates with `ingress.remote`, the store URL's form and a named
    /// master key, and with `runtime.kind: kubernetes` the kubeconfig (or the pod's service
    /// account), reaching neither the database nor the cluster. Exits non-zero, naming the
    /// key or file, on the first problem.
    CheckConfig,
    /// Copy this data directory's SQLite store into an empty PostgreSQL database.
    ///
    /// Everything is copied as it is: services and their identities, revisions, deployments
    /// with their events, desired state, secrets (still sealed: the copy never sees a value),
    /// tokens and the audit log. The server must not be running on the data directory (its
    /// lock is held for the copy), and the target must hold nothing. Afterwards set
    /// `store.url` in the configuration, and give every replica this data directory's
    /// `master.key`: the secrets are sealed with it.
    MigrateStore {
        /// The PostgreSQL database to copy into (`postgres://user:password@host:port/db`), or
        /// `-` to read it from standard input, keeping a password out of the process list.
        /// Over TLS its certificate is checked against `store.ca_file` from --config, or the
        /// system's roots.
        #[arg(long, value_name = "URL")]
        to: String,
    },
}

/// The whole configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ServerConfig {
    /// The API: listen address, data directory, TLS, environments, limits.
    pub(crate) api: ApiConfig,
    /// Where the ingress serves the services.
    pub(crate) ingress: IngressConfig,
    /// The controller: domain, intervals, deploy timeout, drain grace.
    pub(crate) control: ControllerConfig,
    /// How instances run: the registries reached over plain HTTP, the OCI runtime.
    pub(crate) runtime: RuntimeConfig,
    /// Where the control plane's state is kept.
    pub(crate) store: StoreConfig,
    /// Several replicas on one store (`store.url`): who leads.
    pub(crate) leader: LeaderConfig,
    /// Where deploys read secrets: OpenBao or Vault (`secrets.vault`), or the sealed store
    /// alone.
    pub(crate) secrets: runway_api::vault::SecretsConfig,
    /// The monitoring generated for every service: where to write it, the runbooks' base.
    pub(crate) observability: ObservabilityConfig,
    /// Custom domains (`runway domains add`): where their certificates come from.
    pub(crate) domains: DomainsConfig,
}

/// `domains`: custom domains' certificates. Without `acme`, a domain is routed and served
/// with an operator's certificate for it (`ingress.certificates`) or the local authority's.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct DomainsConfig {
    /// The ACME directory (Let's Encrypt, or any RFC 8555 server) that certificates are
    /// ordered from and renewed with.
    pub(crate) acme: Option<runway_control::acme::AcmeConfig>,
    /// How often the store's domains and certificates are read again: a change made through
    /// another replica's API is routed within this (one through this server's, at once).
    pub(crate) interval_ms: u64,
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
pub(crate) struct ObservabilityConfig {
    /// Write `runway.rules.yml` (for Prometheus's `rule_files`) and `dashboards/<service>.json`
    /// (for Grafana's file provisioning) here, again whenever they change; nothing written
    /// without it.
    pub(crate) dir: Option<PathBuf>,
    /// The alerts' runbooks are at `{runbook_base}/{service}` unless a manifest names one
    /// (`spec.workload.slo.runbook_url`).
    pub(crate) runbook_base: Option<String>,
    /// How often the files are made again and compared with those written.
    pub(crate) interval_ms: u64,
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
pub(crate) struct LeaderConfig {
    /// The lease's length: how long the others wait before taking over from a leader that
    /// stopped renewing (it renews every third of it).
    pub(crate) lease_ms: u64,
    /// This replica's name among them (default: the host's name and this process's id).
    pub(crate) replica: Option<String>,
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
    fn replica(&self) -> String {
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
pub(crate) struct StoreConfig {
    /// `postgres://user:password@host:port/database` (or libpq's `key=value` form). Without
    /// it, `runway.db` in the data directory.
    #[serde(serialize_with = "without_password")]
    pub(crate) url: Option<String>,
    /// A file holding `url` (a mounted Kubernetes Secret's key, say), so the configuration
    /// holds no password. Read at the start; give one of the two.
    pub(crate) url_file: Option<PathBuf>,
    /// The authority (PEM) the database's certificate must come from over TLS; default: the
    /// system's roots. Over TLS (`sslmode=require` in the URL, or `prefer`, the default, when
    /// the server offers it) the certificate is always checked, its chain and the host's name.
    pub(crate) ca_file: Option<PathBuf>,
    /// The key that seals secrets (32 bytes, readable by its owner only, or read by this
    /// process's group too: a Kubernetes Secret mounted with `defaultMode: 0440` for the
    /// pod's `fsGroup`). Default:
    /// `master.key` in the data directory, made on the first start. Replicas on several
    /// machines share one, named here (a Kubernetes Secret's file, say), which must exist:
    /// one made by each would seal secrets the others cannot open.
    pub(crate) master_key: Option<PathBuf>,
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
    fn master_key(&self, data_dir: &Path) -> anyhow::Result<MasterKey> {
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
    fn read_url_file(&mut self, path: &Path) -> anyhow::Result<()> {
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
    fn trust(&self) -> anyhow::Result<DatabaseTrust> {
        Ok(match &self.ca_file {
            Some(path) => DatabaseTrust::Pem(
                std::fs::read(path)
                    .with_context(|| format!("store.ca_file: cannot read {}", path.display()))?,
            ),
            None => DatabaseTrust::System,
        })
    }

    /// Opens the store: PostgreSQL's when a URL is given, else `runway.db` in `data_dir`.
    fn open(&self, data_dir: &Path) -> anyhow::Result<Arc<dyn Store>> {
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

/// Where services run, and how the local runtime pulls and runs images.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RuntimeConfig {
    /// `local` (this machine, the default) or `kubernetes` (a cluster, as `kubernetes` says;
    /// the other keys here are the local runtime's).
    pub(crate) kind: RuntimeKind,
    /// The cluster, for `kind: kubernetes`.
    pub(crate) kubernetes: KubernetesConfig,
    /// Registries (`host` or `host:port`, as image references write them) reached over plain
    /// HTTP, such as a registry on this machine. Every other registry is HTTPS only.
    pub(crate) insecure_registries: Vec<String>,
    /// Registries images may come from: `host` or `host:port`, `*.example.com`, and `*` for any
    /// registry whose host is a name or a public address (the default). A loopback,
    /// link-local or private address, or `localhost`, only when listed here or in
    /// `insecure_registries`: a tenant's image reference must not make the server connect
    /// into the machine or its network.
    pub(crate) allowed_registries: Vec<String>,
    /// The OCI runtime that runs containers: `runc`, or `crun` (a name on PATH or a path).
    pub(crate) oci_runtime: PathBuf,
    /// Let every service deploy plain processes (`spec.workload.process`). Off by default: a
    /// process is a program of the tenant's choosing on this machine, so only services an
    /// admin allowed (`runway services update NAME --allow-processes true`) may deploy one.
    pub(crate) allow_processes: bool,
    /// Run each plain process isolated, by the OCI runtime, as its service's own unprivileged
    /// user (`process_uid_base` + the service's id), in its own namespaces and cgroup, seeing
    /// only its code and `process_host_paths`, read-only. On by default; off runs processes
    /// as the server's own user, for a platform whose tenants are all trusted.
    pub(crate) isolate_processes: bool,
    /// The first of the host user ids services' processes run as (default 200000, above the
    /// ids images' user namespaces use).
    pub(crate) process_uid_base: u32,
    /// The host directories an isolated process sees, read-only (default: `/usr`, `/bin`,
    /// `/sbin`, `/lib*` and `/etc`, the system's programs and libraries).
    pub(crate) process_host_paths: Vec<PathBuf>,
    /// Services whose containers (images and isolated processes) run without Runway's
    /// seccomp profile, which otherwise refuses every instance user namespaces, eBPF,
    /// io_uring, keyrings, ptrace, mounts and the rest of what Docker refuses: for a service
    /// the operator trusts with them (a debugger, a nested sandbox). Only this file grants
    /// it, never a manifest; it applies to instances started from then on. The local
    /// runtime's: pods on Kubernetes get the cluster's `RuntimeDefault` profile.
    pub(crate) seccomp_unconfined: Vec<String>,
    /// The IPv4 range instances' own networks come from, a `/30` each (default
    /// `10.213.0.0/16`): every container (an image, an isolated process) gets a network
    /// namespace of its own, reached by the ingress at its own address and reaching nothing
    /// but its link to the host (not other instances, not the host's loopback, not the
    /// internet). `host` runs them in the host's network instead, as a plain process is.
    pub(crate) instance_network: String,
    /// What instances may reach outside the platform, for every service: the ceiling each
    /// service's `spec.vpc_access` and `spec.workload.egress` live under, enforced by the
    /// platform's firewall on this machine and by NetworkPolicies on Kubernetes
    /// (`private_ranges` there too; `internet` and `resolvers` are this machine's).
    pub(crate) egress: EgressSettings,
}

/// The operator's bounds on instances' egress (`runtime.egress`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct EgressSettings {
    /// Whether instances may reach the internet (every address outside the private ranges,
    /// through the host's NAT). Default true.
    pub(crate) internet: bool,
    /// The private ranges (within 10.0.0.0/8, 100.64.0.0/10, 172.16.0.0/12, 192.168.0.0/16) a
    /// service with `spec.vpc_access.enabled: true` reaches, e.g. `[10.20.0.0/16]`. Default
    /// none: no instance reaches a private address.
    pub(crate) private_ranges: Vec<String>,
    /// The DNS servers the platform's resolver (at the platform address, what instances'
    /// `/etc/resolv.conf` names) forwards instances' queries to: `address` or
    /// `address:port`. Default: the host's own, the `nameserver` lines of `/etc/resolv.conf`.
    pub(crate) resolvers: Vec<String>,
}

impl Default for EgressSettings {
    fn default() -> Self {
        Self {
            internet: true,
            private_ranges: Vec::new(),
            resolvers: Vec::new(),
        }
    }
}

impl EgressSettings {
    /// Where the platform's resolver forwards queries: `resolvers`, port 53 unless given.
    /// Empty means the host's `/etc/resolv.conf`, which the ingress reads itself.
    pub(crate) fn dns_upstreams(&self) -> Result<Vec<SocketAddr>, String> {
        self.resolvers
            .iter()
            .enumerate()
            .map(|(i, text)| {
                text.parse::<SocketAddr>()
                    .or_else(|_| text.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
                    .map_err(|_| {
                        format!(
                            "runtime.egress.resolvers[{i}]: {text:?} is not an address, e.g. \
                             192.0.2.53 or 192.0.2.53:5353"
                        )
                    })
            })
            .collect()
    }

    fn limits(&self) -> Result<runway_runtime::firewall::EgressLimits, String> {
        let mut private_ranges = Vec::new();
        for (i, text) in self.private_ranges.iter().enumerate() {
            let range: runway_manifest::egress::Range = text
                .parse()
                .map_err(|why| format!("runtime.egress.private_ranges[{i}]: {why}"))?;
            if !runway_manifest::egress::PRIVATE
                .iter()
                .any(|p| p.contains(range))
            {
                return Err(format!(
                    "runtime.egress.private_ranges[{i}]: {range} is not within a private range \
                     (10.0.0.0/8, 100.64.0.0/10, 172.16.0.0/12, 192.168.0.0/16)"
                ));
            }
            private_ranges.push(range);
        }
        self.dns_upstreams()?;
        Ok(runway_runtime::firewall::EgressLimits {
            internet: self.internet,
            private_ranges,
        })
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        let policy = SandboxPolicy::default();
        Self {
            kind: RuntimeKind::Local,
            kubernetes: KubernetesConfig::default(),
            insecure_registries: Vec::new(),
            allowed_registries: vec!["*".to_owned()],
            oci_runtime: PathBuf::from("runc"),
            allow_processes: false,
            isolate_processes: true,
            process_uid_base: policy.uid_base,
            process_host_paths: policy.host_paths,
            seccomp_unconfined: Vec::new(),
            instance_network: runway_runtime::network::DEFAULT_RANGE.to_owned(),
            egress: EgressSettings::default(),
        }
    }
}

impl RuntimeConfig {
    /// The values serde cannot refuse: the key at fault and what was expected.
    fn check(&self) -> Result<(), (&'static str, String)> {
        self.kubernetes.check()?;
        let images = runway_runtime::sandbox::IMAGE_IDS;
        if self.process_uid_base < images.end {
            return Err((
                "runtime.process_uid_base",
                format!(
                    "{} would give services the ids of the system's users or of images' user \
                     namespaces ({}–{}): expected {} or more",
                    self.process_uid_base,
                    images.start,
                    images.end - 1,
                    images.end
                ),
            ));
        }
        if let Some(path) = self.process_host_paths.iter().find(|p| !p.is_absolute()) {
            return Err((
                "runtime.process_host_paths",
                format!("{} is not an absolute path", path.display()),
            ));
        }
        if let Some(name) = self
            .seccomp_unconfined
            .iter()
            .find(|name| name.is_empty() || name.contains(char::is_whitespace))
        {
            return Err((
                "runtime.seccomp_unconfined",
                format!("{name:?} is not a service's name"),
            ));
        }
        if self.instance_network != "host" {
            AddressPool::new(&self.instance_network, DEFAULT_LEASES_DIR)
                .map_err(|message| ("runtime.instance_network", format!("{message}, or host")))?;
        }
        self.egress
            .limits()
            .map_err(|message| ("runtime.egress", message))?;
        Ok(())
    }

    /// Where instances' own networks come from, behind the platform's firewall; `None` for
    /// the host's network.
    pub(crate) fn address_pool(&self) -> Result<Option<AddressPool>, String> {
        if self.instance_network == "host" {
            return Ok(None);
        }
        let pool = AddressPool::new(&self.instance_network, DEFAULT_LEASES_DIR)?;
        Ok(Some(pool.with_firewall(self.egress.limits()?)))
    }

    /// Which services' containers run without the default seccomp profile.
    fn seccomp_policy(&self) -> SeccompPolicy {
        SeccompPolicy {
            unconfined: self.seccomp_unconfined.iter().cloned().collect(),
        }
    }

    /// How processes are isolated, when they are.
    fn sandbox_policy(&self) -> Option<SandboxPolicy> {
        self.isolate_processes.then(|| SandboxPolicy {
            uid_base: self.process_uid_base,
            host_paths: self.process_host_paths.clone(),
        })
    }
}

/// Where the ingress listens, and its process's bounds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct IngressConfig {
    /// HTTPS, for every service's `https://{service}.{env}.{domain}:{port}/`.
    pub(crate) https: SocketAddr,
    /// Plain HTTP: redirected to HTTPS unless `redirect` is false, then served as is.
    pub(crate) http: SocketAddr,
    pub(crate) redirect: bool,
    /// Prometheus metrics (`/metrics`) and `/healthz`.
    pub(crate) admin: SocketAddr,
    /// Time a new ingress process has to answer on its control socket.
    pub(crate) start_timeout_ms: u64,
    /// Time in-flight requests get when the ingress stops (replaced, or by `runway quickstart`).
    pub(crate) shutdown_grace_ms: u64,
    /// Bound on one request to the ingress's control socket (a table, hello, stop).
    pub(crate) control_timeout_ms: u64,
    /// How often the ingress sends every revision's figures to the controller: how old the
    /// autoscaler's and the canary analysis's figures may be.
    pub(crate) stats_interval_ms: u64,
    /// Ingresses run by someone else (a Deployment in a cluster) and fed over the network,
    /// instead of the ingress process this server starts: then `https`, `http`, `admin`,
    /// `start_timeout_ms` and `shutdown_grace_ms` are theirs to set, not this file's.
    pub(crate) remote: Option<RemoteIngressConfig>,
    /// The operator's own certificates, served by SNI for their domains before any obtained
    /// through ACME (and read again when their files change): for custom domains whose
    /// certificates come from elsewhere, or a wildcard. With `remote`, the ingresses' own
    /// arguments carry them instead.
    pub(crate) certificates: Vec<OperatorCertificate>,
    /// Hosts the ingress routes to cells rather than to services, as `runway router` does
    /// (GitLab's HTTP router rules and a topology): runners reach the platform's ingress.
    pub(crate) cells: Vec<CellRouterConfig>,
    /// Cloudflare's address ranges (one CIDR a line, IPv4 or IPv6, `#` comments): services
    /// with `network_policies.cloudflare: true` admit only clients from these, and trust their
    /// `CF-Connecting-IP` and `X-Forwarded-For`. The ingress reads the file again when it
    /// changes (a bad one keeps the last good list). Without it, such services refuse every
    /// client.
    pub(crate) cloudflare_ranges_file: Option<PathBuf>,
}

/// A host routed to cells.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CellRouterConfig {
    /// The host runners call (`gitlab.example.com`); its certificate comes from the platform's
    /// authority, or an operator's.
    pub(crate) host: String,
    /// The rule file, in GitLab's HTTP router format.
    pub(crate) rules: PathBuf,
    /// The topology file: `cells: [{id, address, session_prefix}]`, `legacy_cell: ID`.
    pub(crate) topology: PathBuf,
    /// GitLab's topology service, as `runway router --topology-service`.
    #[serde(default)]
    pub(crate) topology_service: Option<runway_ingress::config::TopologyServiceConfig>,
    /// Time from a request's arrival to its cell's response head: a long poll's, an
    /// upload's. Default an hour. Bodies are bound by the ingress's own size limit.
    #[serde(default = "default_cells_request_timeout_seconds")]
    pub(crate) request_timeout_seconds: u64,
}

fn default_cells_request_timeout_seconds() -> u64 {
    3600
}

impl IngressConfig {
    /// The cell-routed routes, `cells1`, `cells2`... in env `cells`, files read and names
    /// resolved.
    async fn cell_routes(&self) -> anyhow::Result<Vec<runway_ingress::RouteConfig>> {
        let mut routes = Vec::new();
        for (index, cells) in self.cells.iter().enumerate() {
            let route = crate::router::cell_route(
                &format!("cells{}", index + 1),
                vec![cells.host.to_ascii_lowercase()],
                &cells.rules,
                &crate::router::Topology::File(&cells.topology),
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
pub(crate) struct RemoteIngressConfig {
    /// `host:port` names, each standing for every address it resolves to (a headless
    /// Service's name lists every ingress pod).
    pub(crate) addresses: Vec<String>,
    /// The control channel's certificates: `ca.crt`, and this control plane's client
    /// certificate `tls.crt` and key `tls.key`.
    pub(crate) tls_dir: PathBuf,
    /// The name the ingresses' certificate is for.
    #[serde(default = "default_control_server_name")]
    pub(crate) server_name: String,
    /// How often the names are resolved again.
    #[serde(default = "default_resolve_interval_ms")]
    pub(crate) resolve_interval_ms: u64,
    /// The port clients reach the ingresses' HTTPS on, for the URLs Runway shows.
    #[serde(default = "default_public_https_port")]
    pub(crate) https_port: u16,
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
        }
    }
}

/// `ingress.certificates[]`: a certificate chain and its key (PEM files) for some domains.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OperatorCertificate {
    /// The names it serves (`www.example.com`, `*.example.com`).
    pub(crate) domains: Vec<String>,
    /// The chain, leaf first.
    pub(crate) cert: PathBuf,
    /// Its key.
    pub(crate) key: PathBuf,
}

impl IngressConfig {
    /// Where the ingress this server starts listens. With `platform` (the instance network's
    /// platform address), instances' private listener on port 80 and resolver on port 53.
    fn listen(&self, platform: Option<std::net::Ipv4Addr>) -> Listen {
        Listen {
            private: platform.map(|address| SocketAddr::from((address, 80))),
            dns: platform.map(|address| SocketAddr::from((address, 53))),
            dns_upstreams: Vec::new(),
            cloudflare_ranges: self.cloudflare_ranges_file.clone(),
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
    async fn fleet(&self, remote: &RemoteIngressConfig) -> anyhow::Result<IngressFleet> {
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

    fn remote_options(&self) -> RemoteOptions {
        RemoteOptions {
            timeout: Duration::from_millis(self.control_timeout_ms.max(1)),
            stats_interval: Duration::from_millis(self.stats_interval_ms.max(1)),
            ..RemoteOptions::default()
        }
    }
}

impl ServerConfig {
    /// Reads the file (errors name its line and key path), or the defaults without one.
    pub(crate) fn load(path: Option<&Path>) -> anyhow::Result<Self> {
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
                .any(|env| env == crate::router::CELLS_ENV)
        {
            bail!(
                "{}: ingress.cells: `{}` is an environment, and cell-routed hosts live in an env \
                 of that name: rename the environment",
                path.display(),
                crate::router::CELLS_ENV
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

/// What a running control plane shows its caller (`runway quickstart` uses it in-process).
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) api: SocketAddr,
    /// The port in the services' URLs.
    pub(crate) https_port: u16,
    pub(crate) ca_pem: String,
    pub(crate) ca_path: PathBuf,
    /// The admin token, when this start created it (the first start).
    pub(crate) admin_token: Option<String>,
    /// The ingress process, and whether this start started, adopted or replaced it; none when
    /// the ingresses are remote.
    pub(crate) ingress: Option<IngressProcess>,
    /// Stops the task that starts the ingress again when it stops answering.
    keeper: watch::Sender<bool>,
    pub(crate) controller: Arc<Controller<ServerDriver>>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
    /// `server.lock` in the data directory, locked for as long as this server runs.
    _lock: Option<std::fs::File>,
}

impl Running {
    /// The runtime the control plane runs instances on, when it is this machine's.
    pub(crate) fn runtime(&self) -> Option<&Arc<LocalRuntime>> {
        self.controller.driver().local()
    }

    /// Stops the API and the controller; lets the API's in-flight requests finish (its
    /// grace), and returns. The ingress and the instances keep running.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        let _ = self.keeper.send(true);
        let _ = self.stop.send(true);
        for task in self.tasks {
            task.await.context("a server task panicked")??;
        }
        Ok(())
    }
}

/// Ends the process when this replica, having led, leads no more: a fresh start (by its
/// supervisor) follows with nothing of its term in memory, rather than a controller that
/// carries on from state another leader has since changed.
async fn exit_when_no_longer_leading(mut leadership: watch::Receiver<Leadership>) {
    let mut led = false;
    while leadership.changed().await.is_ok() {
        let now = leadership.borrow_and_update().clone();
        match now {
            Leadership::Leading { .. } => led = true,
            Leadership::Following { leader } if led => {
                // A shutdown gives the lease up on purpose: that is not a loss.
                if leader.is_none() {
                    return;
                }
                eprintln!(
                    "runway server: {} leads now; this replica lost the lease and exits, to \
                     start again as a follower",
                    leader.unwrap_or_default()
                );
                std::process::exit(EXIT_LOST_LEASE);
            }
            Leadership::Following { .. } => {}
        }
    }
}

/// `runway server`'s exit when it lost the lease (see [`LeaderConfig`]).
const EXIT_LOST_LEASE: i32 = 75;

/// `runway server check-config`: see [`ServerCommand::CheckConfig`].
fn check_config(config: &ServerConfig, path: Option<&Path>) -> anyhow::Result<()> {
    let ca_dir = config.api.ca_dir();
    if ca_dir.join("ca.pem").exists() || ca_dir.join("ca-key.pem").exists() {
        runway_ingress::LocalCa::load_or_create(&ca_dir).with_context(|| {
            format!(
                "api.tls.ca_dir: cannot use the certificate authority in {}",
                ca_dir.display()
            )
        })?;
    } else {
        eprintln!(
            "runway server: the certificate authority will be made in {} at the first start",
            ca_dir.display()
        );
    }
    if let Some(remote) = &config.ingress.remote {
        runway_ingress::control_tls::ClientTls::load(&remote.tls_dir, &remote.server_name)
            .context("ingress.remote.tls_dir: cannot use the control channel's certificates")?;
    }
    runway_api::oidc::Verifier::new(&config.api.oidc).map_err(anyhow::Error::msg)?;
    if let Some(vault) = &config.secrets.vault {
        runway_api::vault::Vault::new(vault).map_err(anyhow::Error::msg)?;
    }
    for (index, cells) in config.ingress.cells.iter().enumerate() {
        runway_cells::Rules::load(&cells.rules)
            .with_context(|| format!("ingress.cells[{index}].rules"))?;
        runway_cells::StaticTopology::load(&cells.topology)
            .with_context(|| format!("ingress.cells[{index}].topology"))?;
    }
    if let Some(url) = &config.store.url {
        PostgresStore::check_url(url).context("store.url")?;
        if let DatabaseTrust::Pem(pem) = config.store.trust()? {
            PostgresStore::check_trust(&pem).context("store.ca_file")?;
        }
    }
    if config.store.master_key.is_some() {
        config.store.master_key(&config.api.data_dir)?;
    }
    if let RuntimeKind::Kubernetes = config.runtime.kind {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the async runtime")?
            .block_on(config.runtime.kubernetes.client_config())?;
    }
    let text = serde_json::to_string_pretty(config).context("cannot write the configuration")?;
    crate::print_stdout(&format!("{text}\n"));
    eprintln!(
        "runway server: {} is good",
        path.map_or_else(
            || "the default configuration".to_owned(),
            |p| p.display().to_string()
        )
    );
    Ok(())
}

/// `runway server migrate-store`: see [`ServerCommand::MigrateStore`].
fn migrate_store(data_dir: &Path, to: &str, trust: &DatabaseTrust) -> anyhow::Result<()> {
    let path = data_dir.join("runway.db");
    if !path.is_file() {
        bail!(
            "no store at {}: give the data directory `runway server` runs with (--data-dir)",
            path.display()
        );
    }
    let url = if to == "-" {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .context("cannot read the URL from standard input")?;
        line.trim().to_owned()
    } else {
        to.to_owned()
    };
    PostgresStore::check_url(&url).context("--to")?;
    // No server writes while it is copied.
    let _lock = lock_data_dir(data_dir)?;
    let from = SqliteStore::open(&path)
        .with_context(|| format!("cannot open the store {}", path.display()))?;
    let target =
        PostgresStore::open_trusting(&url, trust).context("--to: cannot open the target store")?;
    let copied =
        runway_store::copy_sqlite_to_postgres(&from, &target).context("cannot copy the store")?;
    for (table, rows) in &copied.tables {
        eprintln!(
            "runway server: copied {rows} row{} of {table}",
            plural(*rows)
        );
    }
    eprintln!(
        "runway server: {} is copied. Set `store: {{url: ...}}` in the configuration, and give \
         every replica {} (the secrets are sealed with it). The SQLite file is left as it was.",
        path.display(),
        data_dir.join("master.key").display()
    );
    Ok(())
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `runway server admin-token`: see [`ServerCommand::AdminToken`].
fn admin_token(config: &ServerConfig) -> anyhow::Result<()> {
    let path = config.api.data_dir.join("runway.db");
    if config.store.url.is_none() && !path.is_file() {
        bail!(
            "no store at {}: give the data directory `runway server` runs with (--data-dir, or \
             api.data_dir in --config)",
            path.display()
        );
    }
    let store = config.store.open(&config.api.data_dir)?;
    let (token, revoked) =
        runway_api::recover_admin(store.as_ref()).context("cannot create an admin token")?;
    eprintln!(
        "runway server: revoked {revoked} admin token{}; the new one, shown this once:",
        if revoked == 1 { "" } else { "s" }
    );
    crate::print_stdout(&format!("{}\n", token.expose()));
    Ok(())
}

/// Starts everything; returns once every listener is bound.
pub(crate) async fn start(mut config: ServerConfig) -> anyhow::Result<Running> {
    let data_dir = config.api.data_dir.clone();
    create_data_dir(&data_dir)?;
    // One server per data directory, unless they share a PostgreSQL store: then replicas on
    // one machine share it (its runtime, master key and CA), and the store's lease decides
    // which one acts.
    let lock = match config.store.url {
        None => Some(lock_data_dir(&data_dir)?),
        Some(_) => None,
    };
    let store = config.store.open(&data_dir)?;
    let key = config.store.master_key(&data_dir)?;

    let ca_dir = config.api.ca_dir();
    // The API's connections, instances' pipes and the store share this process's limit.
    runway_ingress::raise_fd_limit().context("cannot raise the open-file limit")?;
    // Made here, before the ingress process reads it, so two never race to make it.
    let ca = runway_ingress::LocalCa::load_or_create(&ca_dir).with_context(|| {
        format!(
            "cannot set up the certificate authority in {}",
            ca_dir.display()
        )
    })?;
    let ca_pem = ca.cert_pem().to_owned();
    let sources = SourceStore::open(data_dir.join(crate::local::SOURCES_DIR))
        .context("cannot prepare the code snapshots' directory")?;
    let driver = match config.runtime.kind {
        RuntimeKind::Local => {
            let runtime = Arc::new(
                crate::local::runtime_with(
                    data_dir.join("runtime"),
                    &config.runtime.insecure_registries,
                    &config.runtime.allowed_registries,
                    &config.runtime.oci_runtime,
                    config
                        .runtime
                        .address_pool()
                        .map_err(|e| anyhow::anyhow!("runtime.instance_network: {e}"))?,
                )?
                .with_seccomp(config.runtime.seccomp_policy()),
            );
            // Private first, then the way through opened.
            runtime
                .create_state_dirs()
                .context("cannot prepare the runtime's state directory")?;
            ServerDriver::Local(LocalDriver::new(
                runtime,
                LocalDriverOptions {
                    sandbox: config.runtime.sandbox_policy(),
                    snapshots: Some(sources.root().to_owned()),
                },
            ))
        }
        RuntimeKind::Kubernetes => {
            // Images run on the cluster: a tag is pinned here, its layers never fetched.
            let images = Arc::new(
                runway_oci::Store::open(data_dir.join("images"))
                    .context("cannot prepare the image cache")?,
            );
            let pull = runway_oci::PullOptions {
                insecure_registries: config.runtime.insecure_registries.clone(),
                allowed_registries: Some(config.runtime.allowed_registries.clone()),
                ..runway_oci::PullOptions::default()
            };
            let resolver: runway_kube::Resolver = Arc::new(move |reference: String| {
                let (images, pull) = (Arc::clone(&images), pull.clone());
                Box::pin(async move {
                    images
                        .resolve(&reference, &pull)
                        .await
                        .map_err(|e| e.to_string())
                })
            });
            // The same operator bounds as on this machine: the private ranges `vpc_access`
            // gives, and Runway's own ingress pods admitted to every service's.
            let network = runway_kube::NetworkOptions {
                vpc_ranges: config
                    .runtime
                    .egress
                    .limits()
                    .map_err(|e| anyhow::anyhow!(e))?
                    .private_ranges,
                ingress: Some(runway_kube::Peer::runway_ingress()),
            };
            ServerDriver::Kubernetes(
                config
                    .runtime
                    .kubernetes
                    .driver(&config.api.environments, resolver)
                    .await?
                    .with_network(network),
            )
        }
    };
    open_data_dir(&data_dir);

    let (stop, stopped) = watch::channel(false);
    let until = |mut stopped: watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let bind = |address: SocketAddr, what: &'static str| async move {
        TcpListener::bind(address)
            .await
            .with_context(|| format!("cannot listen on {address} ({what})"))
    };
    let api_listener = bind(config.api.listen, "API").await?;
    let api_address = api_listener.local_addr()?;
    let (dataplane, ingress, launch): (Arc<dyn DataPlane>, _, _) = match &config.ingress.remote {
        Some(remote) => {
            config.control.https_port = remote.https_port;
            let fleet = config.ingress.fleet(remote).await?;
            (Arc::new(fleet), None, None)
        }
        None => {
            let (dataplane, ingress, launch) = ingress_ensure(&config, &data_dir, &ca_dir).await?;
            config.control.https_port = ingress.bound.https.unwrap_or(config.ingress.https).port();
            (Arc::new(dataplane), Some(ingress), Some(launch))
        }
    };
    // Several replicas share a PostgreSQL store: the controller acts only while this one leads,
    // its writes fenced by the lease.
    let replica = config.leader.replica();
    let election = config.store.url.is_some().then(|| {
        Election::new(
            Arc::clone(&store),
            replica.clone(),
            Duration::from_millis(config.leader.lease_ms.max(300)),
        )
    });
    let (leading, following) = watch::channel(Leadership::Following { leader: None });
    let controller_store = match &election {
        Some(election) => Arc::clone(&store).fenced(election.fence_cell()),
        None => Arc::clone(&store),
    };
    let mut controller = Controller::new(
        config.control.clone(),
        Arc::clone(&controller_store),
        Arc::new(driver),
        dataplane,
        Sealer::new(&key),
    )
    .environments(config.api.environments.clone())
    .fixed_routes(config.ingress.cell_routes().await?)
    .allow_processes(config.runtime.allow_processes);
    let replicated = election.is_some();
    if replicated {
        controller = controller.leadership(following.clone());
    }
    let controller = Arc::new(controller);
    // The domains and their certificates before the first table: one sent without them would
    // take the certificates from the ingress until the next read.
    let (domains, certificates) =
        runway_control::edge::read_domains(store.as_ref(), &Sealer::new(&key))
            .context("cannot read the custom domains")?;
    controller.edge().set_domains(domains, certificates);

    let mut tasks = Vec::new();
    if let Some(election) = election {
        tasks.push(tokio::spawn({
            let stopped = stopped.clone();
            async move {
                election.run(leading, until(stopped)).await;
                Ok(())
            }
        }));
        tokio::spawn(exit_when_no_longer_leading(following.clone()));
    }
    let (keeper, keeper_stopped) = watch::channel(false);
    if let Some(launch) = launch {
        tasks.push(tokio::spawn(keep_ingress(
            launch,
            config.ingress.remote_options(),
            keeper_stopped,
        )));
    }
    tasks.push(tokio::spawn({
        let controller = Arc::clone(&controller);
        let stopped = stopped.clone();
        async move {
            controller.run(until(stopped)).await;
            Ok(())
        }
    }));
    tasks.push(tokio::spawn(collect_sources(
        Arc::clone(&store),
        sources.clone(),
        stopped.clone(),
    )));
    // Custom domains: the store's domains and certificates kept in every table, and (with
    // `domains.acme`) certificates ordered and renewed while this replica leads.
    let domains_read = Arc::new(Notify::new());
    let domains_added = Arc::new(Notify::new());
    tasks.push(tokio::spawn({
        let sync = runway_control::edge::sync_domains(
            Arc::clone(&store),
            Arc::new(Sealer::new(&key)),
            controller.edge(),
            Arc::clone(&domains_read),
            Duration::from_millis(config.domains.interval_ms.max(1)),
            until(stopped.clone()),
        );
        async move {
            sync.await;
            Ok(())
        }
    }));
    if let Some(acme) = &config.domains.acme {
        let mut issuer = runway_control::acme::Issuer::new(
            acme.clone(),
            Arc::clone(&controller_store),
            Arc::new(Sealer::new(&key)),
            controller.edge(),
            Arc::clone(&domains_read),
        )
        .map_err(anyhow::Error::msg)?;
        if replicated {
            issuer = issuer.leadership(following.clone());
        }
        let (issuer, wake, stopped) = (
            Arc::new(issuer),
            Arc::clone(&domains_added),
            stopped.clone(),
        );
        tasks.push(tokio::spawn(async move {
            issuer.run(wake, until(stopped)).await;
            Ok(())
        }));
    }
    if let Some(dir) = &config.observability.dir {
        tasks.push(tokio::spawn(write_observability(
            Arc::clone(&store),
            dir.clone(),
            config.observability.clone(),
            stopped.clone(),
        )));
    }
    // What Prometheus scrapes of the platform itself: this API's `/metrics` and the ingress
    // this server runs (remote ingresses are their operator's to scrape).
    let mut metrics = vec![runway_api::metrics::TargetGroup {
        targets: vec![api_address.to_string()],
        labels: [
            ("job", "runway-api"),
            (
                "__scheme__",
                if config.api.tls.enabled {
                    "https"
                } else {
                    "http"
                },
            ),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into(),
    }];
    if let Some(ingress) = &ingress {
        metrics.push(runway_api::metrics::TargetGroup {
            targets: vec![ingress.bound.admin.to_string()],
            labels: [("job".to_owned(), "runway-ingress".to_owned())].into(),
        });
    }
    let platform = Arc::new(ServerPlatform {
        controller: Arc::clone(&controller),
        sources,
        leadership: replicated.then_some((replica, following)),
        metrics,
        domains: runway_api::domains::DomainSettings {
            acme_directory: config.domains.acme.as_ref().map(|a| a.directory.clone()),
            reserved: std::iter::once(config.control.domain.clone())
                .chain(config.api.tls.hostnames.iter().cloned())
                .collect(),
            https_port: config.control.https_port,
        },
        domains_changed: [domains_read, domains_added],
    });
    let state = ApiState::new(
        Arc::clone(&store),
        platform,
        Sealer::new(&key),
        config.api.environments.clone(),
    )
    .allow_processes(config.runtime.allow_processes)
    .max_source_bytes(config.api.limits.source_bytes)
    .runbook_base(config.observability.runbook_base.clone());
    let state = if config.api.oidc.issuers.is_empty() {
        state
    } else {
        state.oidc(runway_api::oidc::Verifier::new(&config.api.oidc).map_err(anyhow::Error::msg)?)
    };
    let state = match &config.secrets.vault {
        Some(vault) => {
            state.vault(runway_api::vault::Vault::new(vault).map_err(anyhow::Error::msg)?)
        }
        None => state,
    };
    let router = runway_api::router(state, config.api.request_limits());
    let api_tls = if config.api.tls.enabled {
        Some(
            runway_api::tls_config(&ca_dir, &config.api.tls.hostnames)
                .context("cannot set up the API's TLS")?,
        )
    } else {
        None
    };
    let options = config.api.serve_options();
    tasks.push(tokio::spawn({
        let stopped = stopped.clone();
        async move {
            runway_api::serve(api_listener, router, api_tls, options, until(stopped))
                .await
                .context("the API server stopped")
        }
    }));
    // Only now that it serves: a start that failed above (a port in use) made no token its
    // operator never saw, and the next start makes the first one.
    let admin_token = runway_api::bootstrap_admin(store.as_ref())
        .context("cannot create the admin token")?
        .map(|token| token.expose().to_owned());
    Ok(Running {
        api: api_address,
        https_port: config.control.https_port,
        ca_pem,
        ca_path: ca_dir.join("ca.pem"),
        admin_token,
        ingress,
        keeper,
        controller,
        stop,
        tasks,
        _lock: lock,
    })
}

/// The ingress process a start found or made.
#[derive(Debug, Clone)]
pub(crate) struct IngressProcess {
    pub(crate) pid: u32,
    pub(crate) outcome: Outcome,
    /// Where it listens.
    pub(crate) bound: Listen,
    state_dir: PathBuf,
    shutdown_grace: Duration,
}

impl IngressProcess {
    /// Stops the ingress process (it lets in-flight requests finish first) and waits for it
    /// to end, at most its grace and a margin: for `runway quickstart`, whose data plane goes
    /// with it, once its control plane has stopped (so nothing watching it reports it lost).
    /// `runway server` never does, so the data plane outlives it.
    pub(crate) async fn stop(&self) -> anyhow::Result<()> {
        let client = ControlClient::new(&self.state_dir);
        // The one answering now: the keeper may have started another since this one started.
        let pid = client.hello().await.map_or(self.pid, |hello| hello.pid);
        client
            .stop()
            .await
            .with_context(|| format!("cannot stop the ingress (pid {pid})"))?;
        let bound = self.shutdown_grace + INGRESS_STOP_MARGIN;
        let deadline = tokio::time::Instant::now() + bound;
        while runway_runtime::process::alive(pid) {
            if tokio::time::Instant::now() >= deadline {
                // Its whole group (the supervisor and its worker): nothing is left behind.
                let group = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(
                    i32::try_from(pid).unwrap_or(i32::MAX),
                )));
                let killed = group.and_then(|group| {
                    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL)
                });
                bail!(
                    "the ingress (pid {pid}) did not stop within {bound:?}; {}",
                    match killed {
                        Ok(()) => "killed it".to_owned(),
                        Err(error) => format!("cannot kill it: {error}"),
                    }
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

/// Past the ingress's shutdown grace, the time its process gets to exit.
const INGRESS_STOP_MARGIN: Duration = Duration::from_secs(5);

/// The ingress of this data directory (`<data>/ingress/`), running as configured: adopted
/// when one runs there already with the same addresses and build, else started (replacing
/// the one there, if any).
/// The address instances reach the platform at (the private listener, the resolver): the
/// first of `runtime.instance_network`'s range; none in the host's network or on a cluster.
fn platform_address(config: &ServerConfig) -> Option<std::net::Ipv4Addr> {
    if config.runtime.kind != RuntimeKind::Local {
        return None;
    }
    let pool = config.runtime.address_pool().ok().flatten()?;
    Some(pool.platform_address())
}

async fn ingress_ensure(
    config: &ServerConfig,
    data_dir: &Path,
    ca_dir: &Path,
) -> anyhow::Result<(RemoteIngress, IngressProcess, Launch)> {
    let state_dir = data_dir.join("ingress");
    let shutdown_grace = Duration::from_millis(config.ingress.shutdown_grace_ms);
    let launch = Launch {
        command: ingress_command()?,
        state_dir: state_dir.clone(),
        listen: Listen {
            dns_upstreams: config
                .runtime
                .egress
                .dns_upstreams()
                .map_err(|message| anyhow::anyhow!(message))?,
            ..config.ingress.listen(platform_address(config))
        },
        ca_dir: ca_dir.to_owned(),
        shutdown_grace,
        start_timeout: Duration::from_millis(config.ingress.start_timeout_ms.max(1)),
    };
    let (remote, outcome) =
        runway_ingress::daemon::ensure(&launch, config.ingress.remote_options())
            .await
            .context("cannot start the ingress")?;
    let process = IngressProcess {
        pid: remote.hello().pid,
        outcome,
        bound: remote.hello().bound.clone(),
        state_dir,
        shutdown_grace,
    };
    Ok((remote, process, launch))
}

/// How often the server checks that the ingress answers on its control socket.
const INGRESS_CHECK: Duration = Duration::from_secs(1);
/// Checks in a row that may fail before the server starts the ingress again.
const INGRESS_CHECKS_FAILED: u32 = 3;

/// Starts the ingress again, on its saved table, when it stops answering (killed, or its
/// supervisor's worker dying again and again before it serves), or replaces it when its
/// supervisor is gone (killed: the worker serves on alone, and a crash of it would be the
/// end): the same path as a server's start. A crash of the worker alone is not seen here: the
/// supervisor starts another at once. Its handle in the controller reaches the new one
/// through the same socket path. Returns when the server stops.
async fn keep_ingress(
    launch: Launch,
    options: RemoteOptions,
    mut stopped: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut client = ControlClient::new(&launch.state_dir);
    client.timeout = options.timeout;
    let mut failed = 0;
    let mut ticks = tokio::time::interval(INGRESS_CHECK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stopped.wait_for(|stop| *stop) => return Ok(()),
        }
        let alone = match client.hello().await {
            Ok(hello) if hello.worker.is_some() => {
                failed = 0;
                continue;
            }
            Ok(hello) => Some(hello.pid),
            Err(_) => None,
        };
        if alone.is_none() {
            failed += 1;
            if failed < INGRESS_CHECKS_FAILED {
                continue;
            }
        }
        failed = 0;
        match (
            runway_ingress::daemon::ensure(&launch, options.clone()).await,
            alone,
        ) {
            (Ok((remote, _)), Some(old)) => eprintln!(
                "runway server: the ingress's supervisor is gone; replaced its worker (pid {old}) \
                 with a supervised ingress (pid {})",
                remote.hello().pid
            ),
            (Ok((remote, _)), None) => eprintln!(
                "runway server: the ingress stopped answering; started it again (pid {}) on its \
                 saved table",
                remote.hello().pid
            ),
            (Err(error), Some(old)) => eprintln!(
                "runway server: the ingress's supervisor is gone and its worker (pid {old}) \
                 cannot be replaced: {:#}",
                anyhow::Error::new(error)
            ),
            (Err(error), None) => eprintln!(
                "runway server: the ingress stopped answering and cannot be started again: {:#}",
                anyhow::Error::new(error)
            ),
        }
    }
}

/// The small ingress binary installed beside this one when it is of this build; else this
/// binary's own `ingress`.
fn ingress_command() -> anyhow::Result<IngressCommand> {
    let (program, args) =
        crate::local::beside_or_own("runway-ingress", "ingress", Some(runway_ingress::VERSION))?;
    Ok(IngressCommand { program, args })
}

/// `runway server`: runs until SIGTERM or SIGINT.
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let mut config = ServerConfig::load(args.config.as_deref())?;
    if let Some(dir) = &args.data_dir {
        config.api.data_dir.clone_from(dir);
    } else if args.config.is_none() {
        config.api.data_dir = crate::local::default_state_dir()?.join("server");
    }
    if let Some(ServerCommand::AdminToken) = args.command {
        return admin_token(&config);
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    match &args.command {
        Some(ServerCommand::CheckConfig) => {
            return check_config(&config, args.config.as_deref());
        }
        Some(ServerCommand::MigrateStore { to }) => {
            return migrate_store(&config.api.data_dir, to, &config.store.trust()?);
        }
        _ => {}
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(async move {
            let running = start(config).await?;
            let scheme = if running.ca_pem.is_empty() { "http" } else { "https" };
            eprintln!("runway server: API on {scheme}://{}", running.api);
            eprintln!(
                "runway server: the console on {scheme}://{}/ui/ (sign in with a token)",
                running.api
            );
            match &running.ingress {
                Some(process) => {
                    eprintln!(
                        "runway server: services on https://{{service}}.{{env}}.localhost:{} (HTTP \
                         on {})",
                        running.https_port, process.bound.http
                    );
                    eprintln!(
                        "runway server: ingress metrics on http://{}/metrics",
                        process.bound.admin
                    );
                    let pid = process.pid;
                    match &process.outcome {
                        Outcome::Started => eprintln!("runway server: ingress pid {pid} (started)"),
                        Outcome::Adopted => eprintln!("runway server: ingress pid {pid} (adopted)"),
                        Outcome::Replaced { old_pid, reason } => eprintln!(
                            "runway server: ingress pid {pid} (replaced pid {old_pid}: {reason})"
                        ),
                    }
                }
                None => eprintln!(
                    "runway server: services on port {} of the ingresses fed over the network",
                    running.https_port
                ),
            }
            eprintln!(
                "runway server: clients trust the certificate authority in {}",
                running.ca_path.display()
            );
            if let Some(token) = &running.admin_token {
                eprintln!(
                    "runway server: the admin token, shown this once (it is stored hashed):\n{token}\n\
                     log in with: runway login --server https://{} --ca {} --token -",
                    running.api,
                    running.ca_path.display()
                );
            }
            shutdown_signal().await?;
            match &running.ingress {
                Some(process) => eprintln!(
                    "runway server: stopping (the ingress, pid {}, and the instances keep \
                     running)",
                    process.pid
                ),
                None => eprintln!("runway server: stopping (the ingresses keep serving)"),
            }
            running.stop().await?;
            eprintln!("runway server: stopped");
            Ok(())
        })
}

pub(crate) async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    Ok(())
}

/// The data directory, created private (`0700`); [`open_data_dir`] opens the way through it
/// once what is inside is private on its own.
pub(crate) fn create_data_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

/// Lets others search the data directory (`go+x`, not list it: `0711` from `0700`): a
/// container's root (another host id, in its user namespace) goes through it to reach its
/// image's rootfs under `runtime/images/`. What is private inside is private itself: the database, the master key
/// and the CA's key are `0600`, the runtime's `instances/` `0700`, unpacked images behind
/// `0710` with the container's group. Other bits the operator set are kept; a failure is
/// only a warning, as processes still run and only images would not start.
fn open_data_dir(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let opened = std::fs::metadata(dir).and_then(|meta| {
        let mode = meta.permissions().mode();
        if mode & 0o001 == 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o011))
        } else {
            Ok(())
        }
    });
    if let Err(e) = opened {
        eprintln!(
            "runway server: warning: cannot let containers search {} ({e}); images will not \
             start until others may search it (chmod o+x)",
            dir.display()
        );
    }
}

/// `ENOLCK` on Linux: no locks available.
const ENOLCK: i32 = 37;

/// Locks `server.lock` in the data directory (and writes this process's id in it), so a
/// second server on the same directory is refused instead of acting on the same instances.
/// The kernel releases the lock when the process ends, however it ends.
fn lock_data_dir(dir: &Path) -> anyhow::Result<std::fs::File> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("server.lock");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        // Some file systems (NFS without a lock daemon) have no locks: run, but say so.
        Err(std::fs::TryLockError::Error(e))
            if e.kind() == std::io::ErrorKind::Unsupported || e.raw_os_error() == Some(ENOLCK) =>
        {
            eprintln!(
                "runway server: warning: cannot lock {} ({e}); a second server on this data \
                 directory would not be refused",
                path.display()
            );
        }
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => String::new(),
                pid => format!(" (pid {pid})"),
            };
            bail!(
                "another runway server is using the data directory {}{holder}; stop it, or give \
                 this one another --data-dir",
                dir.display()
            );
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("cannot lock {}", path.display()));
        }
    }
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(file)
}

/// The API's view of the world outside the store: the controller, its driver, and the code
/// snapshots.
#[derive(Clone)]
struct ServerPlatform {
    controller: Arc<Controller<ServerDriver>>,
    sources: SourceStore,
    /// This replica's name and whether it leads, when it is one of several.
    leadership: Option<(String, watch::Receiver<Leadership>)>,
    /// The platform's own metrics endpoints, for Prometheus's discovery.
    metrics: Vec<runway_api::metrics::TargetGroup>,
    /// How custom domains are served.
    domains: runway_api::domains::DomainSettings,
    /// Told when a domain is added or removed: the edge view's reader and the ACME issuer.
    domains_changed: [Arc<Notify>; 2],
}

fn api_log_line(line: runway_driver::LogLine) -> runway_api::types::LogLine {
    runway_api::types::LogLine {
        instance: line.replica,
        time: line.time,
        stream: match line.stream {
            runway_driver::Stream::Stdout => runway_api::types::Stream::Stdout,
            runway_driver::Stream::Stderr => runway_api::types::Stream::Stderr,
        },
        text: line.text,
    }
}

/// How long an uploaded snapshot no revision names is kept: its deploy may be on its way.
const SOURCE_GRACE: Duration = Duration::from_secs(3600);

/// Removes, every ten minutes, the code snapshots no revision names (see
/// [`SourceStore::collect`]); the first pass a minute after the start.
async fn collect_sources(
    store: Arc<dyn Store>,
    sources: SourceStore,
    mut stopped: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut wait = Duration::from_secs(60);
    loop {
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => return Ok(()),
            () = tokio::time::sleep(wait) => {}
        }
        wait = Duration::from_secs(600);
        let (store, sources) = (Arc::clone(&store), sources.clone());
        let pass = tokio::task::spawn_blocking(move || -> anyhow::Result<usize> {
            let mut services = std::collections::BTreeSet::new();
            let mut keep = std::collections::BTreeSet::new();
            for service in store.service_list()? {
                services.insert(service.id);
                for env in &service.environments {
                    for revision in store.revision_list(&service.name, env)? {
                        if let Some(digest) = runway_store::artifact_source(&revision.artifact) {
                            keep.insert((service.id, digest.to_owned()));
                        }
                    }
                }
            }
            Ok(sources.collect(&services, &keep, SOURCE_GRACE)?)
        })
        .await;
        match pass {
            Ok(Ok(0)) => {}
            Ok(Ok(removed)) => eprintln!("runway server: removed {removed} unused code snapshots"),
            Ok(Err(e)) => eprintln!("runway server: warning: cannot collect code snapshots: {e:#}"),
            Err(e) => eprintln!("runway server: warning: cannot collect code snapshots: {e}"),
        }
    }
}

/// Writes the generated rule file and dashboards to `dir` every `interval_ms` when they
/// changed (each file replaced whole, by a rename), and removes the dashboards of services
/// that serve no more. A failure is logged and tried again at the next pass.
async fn write_observability(
    store: Arc<dyn Store>,
    dir: PathBuf,
    config: ObservabilityConfig,
    mut stopped: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let every = Duration::from_millis(config.interval_ms.max(100));
    loop {
        let (store, into, base) = (Arc::clone(&store), dir.clone(), config.runbook_base.clone());
        let pass = tokio::task::spawn_blocking(move || -> anyhow::Result<bool> {
            let dir = into;
            let slos = runway_api::observability::slos(store.as_ref(), base.as_deref(), None)
                .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
            let generated = runway_api::observability::generate(&slos)
                .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
            let dashboards = dir.join("dashboards");
            std::fs::create_dir_all(&dashboards)
                .with_context(|| format!("cannot make {}", dashboards.display()))?;
            let mut changed = replace_if_changed(&dir.join("runway.rules.yml"), &generated.rules)?;
            for (service, dashboard) in &generated.dashboards {
                let text = format!("{:#}\n", dashboard);
                changed |= replace_if_changed(&dashboards.join(format!("{service}.json")), &text)?;
            }
            // Only dashboards Runway wrote (their uid is the service's) are removed: the
            // directory may be Grafana's, holding others'.
            for entry in std::fs::read_dir(&dashboards)? {
                let path = entry?.path();
                let Some(service) = path.file_stem().and_then(|s| s.to_str()) else {
                    continue;
                };
                let ours = || {
                    std::fs::read_to_string(&path)
                        .ok()
                        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
                        .is_some_and(|d| {
                            d["uid"] == runway_render::observability::dashboard_uid(service)
                        })
                };
                let stale = !generated.dashboards.contains_key(service);
                if stale && path.extension().is_some_and(|e| e == "json") && ours() {
                    std::fs::remove_file(&path)?;
                    changed = true;
                }
            }
            Ok(changed)
        })
        .await;
        match pass {
            Ok(Ok(true)) => tracing::info!(dir = %dir.display(), "observability files written"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!(
                error = format!("{e:#}"),
                "cannot write the observability files"
            ),
            Err(e) => tracing::warn!(error = %e, "cannot write the observability files"),
        }
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => return Ok(()),
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// Replaces `path` with `text` (written beside it, then renamed) unless it holds it already.
fn replace_if_changed(path: &Path, text: &str) -> anyhow::Result<bool> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(false);
    }
    // A name of this process's own: replicas sharing the directory never rename each
    // other's half-written file into place.
    let temporary = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&temporary, text)
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::rename(&temporary, path)
        .with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(true)
}

fn traffic_view(
    service: &str,
    env: &str,
    t: &runway_control::RevisionTraffic,
) -> runway_api::types::TrafficView {
    runway_api::types::TrafficView {
        service: service.to_owned(),
        env: env.to_owned(),
        revision: t.revision.clone(),
        window_seconds: t.window_seconds,
        requests_per_second: t.requests_per_second,
        error_ratio: t.error_ratio,
        p99_seconds: t.p99_seconds,
    }
}

/// A canary step's analysis so far, as the status says it: the controller's figures, limits
/// and checks as they are.
fn analysis_view(a: runway_control::AnalysisSummary) -> runway_api::types::RolloutAnalysis {
    use runway_api::types::{AnalysisCheck, AnalysisChecks, AnalysisFigures, AnalysisThresholds};
    let figures = |w: runway_control::WindowFigures| AnalysisFigures {
        requests: w.requests,
        errors_5xx: w.errors_5xx,
        error_ratio: w.error_ratio,
        p99_seconds: w.p99_seconds,
        restarts: w.restarts,
        readiness_failures: w.readiness_failures,
    };
    let check = |c: runway_control::CheckSummary| AnalysisCheck {
        standing: c.standing.to_owned(),
        value: c.value,
        stable_value: c.stable_value,
        limit: c.limit,
        reason: c.reason,
    };
    let s = &a.settings;
    runway_api::types::RolloutAnalysis {
        window_started_at: rfc3339(a.window_started_ms),
        window_seconds: a.window_ms as f64 / 1000.0,
        canary: figures(a.canary),
        stable: figures(a.stable),
        thresholds: AnalysisThresholds {
            min_requests: s.min_requests,
            max_error_ratio: s.max_error_ratio,
            max_error_ratio_over_stable: s.max_error_ratio_over_stable,
            latency_slo_seconds: s.latency_slo_seconds,
            max_p99_over_stable_ratio: s.max_p99_over_stable_ratio,
            min_p99_increase_seconds: s.min_p99_increase_seconds,
            p99_samples: a.p99_samples,
            max_restarts: s.max_restarts,
            max_readiness_failures: s.max_readiness_failures,
            max_inconclusive_windows: s.max_inconclusive_windows,
        },
        checks: AnalysisChecks {
            requests: check(a.requests),
            error_ratio: check(a.error_ratio),
            latency_p99: check(a.latency_p99),
            restarts: check(a.restarts),
            readiness_failures: check(a.readiness_failures),
        },
        verdict: a.verdict.to_owned(),
        reason: a.reason,
        revision: a.revision,
        stable_revision: a.stable_revision,
    }
}

/// Reads what the API forwards of an upload, on a blocking thread.
struct Chunks {
    rx: mpsc::Receiver<Result<bytes::Bytes, String>>,
    current: bytes::Bytes,
}

impl std::io::Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                None => return Ok(0),
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

impl Platform for ServerPlatform {
    fn metrics_endpoints(&self) -> Vec<runway_api::metrics::TargetGroup> {
        self.metrics.clone()
    }

    fn domains(&self) -> runway_api::domains::DomainSettings {
        self.domains.clone()
    }

    fn domains_changed(&self) {
        for notify in &self.domains_changed {
            notify.notify_one();
        }
    }

    fn traffic(&self) -> Vec<runway_api::types::TrafficView> {
        self.controller
            .all_traffic()
            .iter()
            .map(|(service, env, t)| traffic_view(service, env, t))
            .collect()
    }

    fn source_claim(&self, service_id: i64, digest: &str) -> BoxFuture<'_, Result<bool, String>> {
        let digest = runway_oci::Digest::parse(digest);
        Box::pin(async move {
            let digest = digest.map_err(|e| e.to_string())?;
            let sources = self.sources.clone();
            tokio::task::spawn_blocking(move || sources.claim(service_id, &digest))
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn source_put(
        &self,
        service_id: i64,
        digest: &str,
        max: u64,
        chunks: mpsc::Receiver<Result<bytes::Bytes, String>>,
    ) -> BoxFuture<'_, Result<(), SourceRefused>> {
        let digest = runway_oci::Digest::parse(digest);
        Box::pin(async move {
            let digest = digest.map_err(|e| SourceRefused::Invalid(e.to_string()))?;
            let sources = self.sources.clone();
            let reader = Chunks {
                rx: chunks,
                current: bytes::Bytes::new(),
            };
            let put =
                tokio::task::spawn_blocking(move || sources.put(service_id, &digest, reader, max))
                    .await
                    .map_err(|e| SourceRefused::Internal(e.to_string()))?;
            match put {
                Ok(_) => Ok(()),
                Err(SourceError::TooLarge(m)) => Err(SourceRefused::TooLarge(m)),
                Err(SourceError::Invalid(m)) => Err(SourceRefused::Invalid(m)),
                Err(SourceError::Full(e)) => {
                    tracing::warn!(error = %e, "a code snapshot was refused: the disk is full");
                    Err(SourceRefused::Full)
                }
                Err(e @ SourceError::Io { .. }) => Err(SourceRefused::Internal(e.to_string())),
            }
        })
    }

    fn resolve_image(&self, reference: &str) -> BoxFuture<'_, Result<String, String>> {
        let reference = reference.to_owned();
        Box::pin(async move {
            self.controller
                .driver()
                .resolve_image(&reference)
                .await
                .map_err(|e| match e {
                    // The caller names the image already.
                    runway_driver::DriverError::Image { message, .. } => message,
                    other => other.to_string(),
                })
        })
    }

    fn status(&self, service: &str, env: &str) -> BoxFuture<'_, StatusParts> {
        let (service, env) = (service.to_owned(), env.to_owned());
        Box::pin(async move {
            use runway_api::types::{
                Condition, InstanceView, RevisionStatus, RolloutView, RouteView, ScalingView,
            };
            use runway_reconciler::Condition as Planned;
            let controller = &self.controller;
            let mut warnings = Vec::new();
            let control_plane = self.leadership.as_ref().map(|(replica, leadership)| {
                runway_api::types::ControlPlaneView {
                    replica: replica.clone(),
                    leader: match &*leadership.borrow() {
                        Leadership::Leading { .. } => Some(replica.clone()),
                        Leadership::Following { leader } => leader.clone(),
                    },
                }
            });
            let instances = controller
                .instances(&service, &env)
                .await
                .unwrap_or_else(|e| {
                    warnings.push(format!("instances: {e}"));
                    Vec::new()
                })
                .into_iter()
                .map(|i| InstanceView {
                    id: i.id,
                    revision: i.revision,
                    phase: i.phase.as_str().to_owned(),
                    ready: i.ready,
                    port: i.port,
                    address: i.address.map(|a| a.to_string()),
                    restarts: i.restarts,
                    message: i.message,
                })
                .collect();
            let traffic = controller.traffic(&service, &env);
            StatusParts {
                url: controller.url(&service, &env),
                routes: controller
                    .routes(&service, &env)
                    .into_iter()
                    .map(|r| RouteView {
                        revision: r.revision,
                        weight: r.weight,
                    })
                    .collect(),
                revisions: controller
                    .revision_status(&service, &env)
                    .into_iter()
                    .map(|r| {
                        let (condition, reason) = match r.condition {
                            Planned::Progressing => (Condition::Progressing, None),
                            Planned::Ready => (Condition::Ready, None),
                            Planned::Failing { reason } => (Condition::Failing, Some(reason)),
                            Planned::TimedOut { reason } => (Condition::TimedOut, Some(reason)),
                        };
                        RevisionStatus {
                            traffic: traffic
                                .iter()
                                .find(|t| t.revision == r.revision)
                                .map(|t| traffic_view(&service, &env, t)),
                            revision: r.revision,
                            desired_instances: r.desired_instances,
                            ready: r.ready,
                            starting: r.starting,
                            failed: r.failed,
                            condition,
                            reason,
                        }
                    })
                    .collect(),
                instances,
                scaling: controller
                    .scaling(&service, &env)
                    .into_iter()
                    .map(|s| ScalingView {
                        revision: s.revision,
                        concurrency: s.concurrency,
                        last_decision: s.last_decision,
                        last_decision_at: s.last_decision_at_ms.and_then(rfc3339),
                        last_change: s.last_change,
                        last_change_at: s.last_change_at_ms.and_then(rfc3339),
                        last_change_event: s
                            .last_change_event
                            .and_then(|event| serde_json::to_value(event).ok()),
                        panicking: s.panicking,
                    })
                    .collect(),
                rollout: controller
                    .rollout(&service, &env)
                    .await
                    .unwrap_or_else(|e| {
                        warnings.push(format!("rollout: {e}"));
                        None
                    })
                    .map(|r| RolloutView {
                        deployment: r.deployment,
                        strategy: r.strategy,
                        phase: r.phase,
                        new_weight: r.new_weight,
                        step: r.step.and_then(|(at, _)| u32::try_from(at).ok()),
                        steps: r.step.and_then(|(_, of)| u32::try_from(of).ok()),
                        paused: r.paused,
                        message: r.message,
                        analysis: r.analysis.map(analysis_view),
                    }),
                warnings,
                control_plane,
            }
        })
    }

    fn logs(
        &self,
        service: &str,
        env: &str,
        instance: Option<&str>,
        lines: usize,
        previous: bool,
    ) -> BoxFuture<'_, Result<Vec<runway_api::types::LogLine>, String>> {
        let (service, env, instance) = (
            service.to_owned(),
            env.to_owned(),
            instance.map(str::to_owned),
        );
        Box::pin(async move {
            let lines = self
                .controller
                .logs(&service, &env, instance.as_deref(), lines, previous)
                .await
                .map_err(|e| e.to_string())?;
            Ok(lines.into_iter().map(api_log_line).collect())
        })
    }

    fn follow_logs(
        &self,
        service: &str,
        env: &str,
        instance: Option<&str>,
        lines: usize,
    ) -> BoxFuture<'_, Result<mpsc::Receiver<runway_api::types::LogLine>, String>> {
        let (service, env, instance) = (
            service.to_owned(),
            env.to_owned(),
            instance.map(str::to_owned),
        );
        Box::pin(async move {
            let mut followed = self
                .controller
                .follow_logs(&service, &env, instance.as_deref(), lines)
                .await
                .map_err(|e| e.to_string())?;
            let (sender, receiver) = mpsc::channel(256);
            tokio::spawn(async move {
                while let Some(line) = followed.recv().await {
                    if sender.send(api_log_line(line)).await.is_err() {
                        return;
                    }
                }
            });
            Ok(receiver)
        })
    }

    fn wake(&self) {
        self.controller.wake();
    }
}

/// Unix milliseconds as RFC 3339, when in range.
fn rfc3339(ms: u64) -> Option<String> {
    let ms = i64::try_from(ms).ok()?;
    runway_store::Timestamp::from_unix_millis(ms).map(|t| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_help_names_every_section() {
        use clap::CommandFactory;
        let help = crate::Cli::command()
            .find_subcommand_mut("server")
            .map(|server| server.render_long_help().to_string())
            .unwrap_or_default();
        let sections = serde_json::to_value(ServerConfig::default()).unwrap();
        for section in sections.as_object().unwrap().keys() {
            assert!(help.contains(&format!("`{section}`")), "{section}: {help}");
        }
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
        assert_eq!(config.runtime.kind, RuntimeKind::Kubernetes);
        assert_eq!(
            config.runtime.kubernetes.kubeconfig.as_deref(),
            Some(Path::new("/etc/k"))
        );
        assert_eq!(config.runtime.kubernetes.namespace_pattern, "runway-{env}");
        let defaults = RuntimeConfig::default();
        assert_eq!(defaults.kind, RuntimeKind::Local);
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

    /// `ingress.cloudflare_ranges_file` is read at load, a bad line named; the ingress this
    /// server starts gets it, and instances' private listener and resolver on the platform
    /// address, unless instances run in the host's network.
    #[test]
    fn the_ingress_gets_the_platform_address_and_the_cloudflare_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let ranges = dir.path().join("cloudflare.txt");
        let path = dir.path().join("server.yml");
        std::fs::write(&ranges, "# Cloudflare\n173.245.48.0/20\n2400:cb00::/32\n").unwrap();
        let text = format!("ingress:\n  cloudflare_ranges_file: {}\n", ranges.display());
        std::fs::write(&path, &text).unwrap();
        let config = ServerConfig::load(Some(&path)).unwrap();
        let listen = config.ingress.listen(platform_address(&config));
        assert_eq!(listen.cloudflare_ranges.as_deref(), Some(ranges.as_path()));
        assert_eq!(listen.private, Some("10.213.0.1:80".parse().unwrap()));
        assert_eq!(listen.dns, Some("10.213.0.1:53".parse().unwrap()));

        let host = format!("{text}runtime:\n  instance_network: host\n");
        std::fs::write(&path, host).unwrap();
        let config = ServerConfig::load(Some(&path)).unwrap();
        let listen = config.ingress.listen(platform_address(&config));
        assert_eq!((listen.private, listen.dns), (None, None));

        std::fs::write(&ranges, "173.245.48.0/20\n173.245.48.1/20\n").unwrap();
        std::fs::write(&path, &text).unwrap();
        let error = format!("{:#}", ServerConfig::load(Some(&path)).unwrap_err());
        assert!(error.contains("ingress.cloudflare_ranges_file"), "{error}");
        assert!(error.contains("cloudflare.txt:2: "), "{error}");
        std::fs::remove_file(&ranges).unwrap();
        let error = format!("{:#}", ServerConfig::load(Some(&path)).unwrap_err());
        assert!(
            error.contains("cannot read the Cloudflare ranges file"),
            "{error}"
        );
    }
}
