//! The `runtime` section: which driver runs services (`kind`) and its settings.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use runway_runtime::network::{AddressPool, DEFAULT_LEASES_DIR};
use runway_runtime::sandbox::SandboxPolicy;
use runway_runtime::seccomp::SeccompPolicy;
use serde::{Deserialize, Serialize};

use super::RuntimeKind;
use super::kubernetes::KubernetesConfig;

/// Where services run, and how the local runtime pulls and runs images.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// `local` (this machine, the default) or `kubernetes` (a cluster, as `kubernetes` says;
    /// the other keys here are the local runtime's).
    pub kind: RuntimeKind,
    /// The cluster, for `kind: kubernetes`.
    pub kubernetes: KubernetesConfig,
    /// Registries (`host` or `host:port`, as image references write them) reached over plain
    /// HTTP, such as a registry on this machine. Every other registry is HTTPS only.
    pub insecure_registries: Vec<String>,
    /// Registries images may come from: `host` or `host:port`, `*.example.com`, and `*` for any
    /// registry whose host is a name or a public address (the default). A loopback,
    /// link-local or private address, or `localhost`, only when listed here or in
    /// `insecure_registries`: a tenant's image reference must not make the server connect
    /// into the machine or its network.
    pub allowed_registries: Vec<String>,
    /// The OCI runtime that runs containers: `runc`, or `crun` (a name on PATH or a path).
    pub oci_runtime: PathBuf,
    /// Let every service deploy plain processes (`spec.workload.process`). Off by default: a
    /// process is a program of the tenant's choosing on this machine, so only services an
    /// admin allowed (`runway services update NAME --allow-processes true`) may deploy one.
    pub allow_processes: bool,
    /// Run each plain process isolated, by the OCI runtime, as its service's own unprivileged
    /// user (`process_uid_base` + the service's id), in its own namespaces and cgroup, seeing
    /// only its code and `process_host_paths`, read-only. On by default; off runs processes
    /// as the server's own user, for a platform whose tenants are all trusted.
    pub isolate_processes: bool,
    /// The first of the host user ids services' processes run as (default 200000, above the
    /// ids images' user namespaces use).
    pub process_uid_base: u32,
    /// The host directories an isolated process sees, read-only (default: `/usr`, `/bin`,
    /// `/sbin`, `/lib*` and `/etc`, the system's programs and libraries).
    pub process_host_paths: Vec<PathBuf>,
    /// Services whose containers (images and isolated processes) run without Runway's
    /// seccomp profile, which otherwise refuses every instance user namespaces, eBPF,
    /// io_uring, keyrings, ptrace, mounts and the rest of what Docker refuses: for a service
    /// the operator trusts with them (a debugger, a nested sandbox). Only this file grants
    /// it, never a manifest; it applies to instances started from then on. The local
    /// runtime's: pods on Kubernetes get the cluster's `RuntimeDefault` profile.
    pub seccomp_unconfined: Vec<String>,
    /// The IPv4 range instances' own networks come from, a `/30` each (default
    /// `10.213.0.0/16`): every container (an image, an isolated process) gets a network
    /// namespace of its own, reached by the ingress at its own address and reaching nothing
    /// but its link to the host (not other instances, not the host's loopback, not the
    /// internet). `host` runs them in the host's network instead, as a plain process is.
    pub instance_network: String,
    /// What instances may reach outside the platform, for every service: the ceiling each
    /// service's `spec.vpc_access` and `spec.workload.egress` live under, enforced by the
    /// platform's firewall on this machine and by NetworkPolicies on Kubernetes
    /// (`private_ranges` there too; `internet` and `resolvers` are this machine's).
    pub egress: EgressSettings,
}

/// The operator's bounds on instances' egress (`runtime.egress`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressSettings {
    /// Whether instances may reach the internet (every address outside the private ranges,
    /// through the host's NAT). Default true.
    pub internet: bool,
    /// The private ranges (within 10.0.0.0/8, 100.64.0.0/10, 172.16.0.0/12, 192.168.0.0/16) a
    /// service with `spec.vpc_access.enabled: true` reaches, e.g. `[10.20.0.0/16]`. Default
    /// none: no instance reaches a private address.
    pub private_ranges: Vec<String>,
    /// The DNS servers the platform's resolver (at the platform address, what instances'
    /// `/etc/resolv.conf` names) forwards instances' queries to: `address` or
    /// `address:port`. Default: the host's own, the `nameserver` lines of `/etc/resolv.conf`.
    pub resolvers: Vec<String>,
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
    pub fn dns_upstreams(&self) -> Result<Vec<SocketAddr>, String> {
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

    pub(crate) fn limits(&self) -> Result<runway_runtime::firewall::EgressLimits, String> {
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
            kind: RuntimeKind::default(),
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
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
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
    pub fn address_pool(&self) -> Result<Option<AddressPool>, String> {
        if self.instance_network == "host" {
            return Ok(None);
        }
        let pool = AddressPool::new(&self.instance_network, DEFAULT_LEASES_DIR)?;
        Ok(Some(pool.with_firewall(self.egress.limits()?)))
    }

    /// Which services' containers run without the default seccomp profile.
    pub(crate) fn seccomp_policy(&self) -> SeccompPolicy {
        SeccompPolicy {
            unconfined: self.seccomp_unconfined.iter().cloned().collect(),
        }
    }

    /// How processes are isolated, when they are.
    pub(crate) fn sandbox_policy(&self) -> Option<SandboxPolicy> {
        self.isolate_processes.then(|| SandboxPolicy {
            uid_base: self.process_uid_base,
            host_paths: self.process_host_paths.clone(),
        })
    }
}
