//! The subset of the OCI runtime spec (`config.json`) that Runway writes.
//!
//! Plain serde structs rather than `oci-spec`'s types: `oci-spec`'s builders fill every field
//! left unset from runc's example `config.json` (a network namespace, a sysfs mount, a default
//! capability set), which is exactly what these bundles must not have. Here every field runc
//! receives is visible in one file, and serialises in a fixed order.

use serde::{Deserialize, Serialize};

/// `config.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// The runtime spec version.
    pub oci_version: String,
    /// The container's process.
    pub process: Process,
    /// The root filesystem.
    pub root: Root,
    /// The hostname, in the container's UTS namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Mounts, in order.
    pub mounts: Vec<Mount>,
    /// Linux specifics.
    pub linux: Linux,
}

/// `process`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    /// Whether to allocate a pseudo-terminal.
    pub terminal: bool,
    /// Who the process runs as, inside the container.
    pub user: User,
    /// The command line.
    pub args: Vec<String>,
    /// `KEY=value` pairs.
    pub env: Vec<String>,
    /// The working directory, absolute.
    pub cwd: String,
    /// Capability sets.
    pub capabilities: Capabilities,
    /// `no_new_privs`.
    pub no_new_privileges: bool,
}

/// `process.user`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Supplementary groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_gids: Vec<u32>,
}

/// `process.capabilities`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Bounding set.
    pub bounding: Vec<String>,
    /// Effective set.
    pub effective: Vec<String>,
    /// Permitted set.
    pub permitted: Vec<String>,
    /// Inheritable set.
    pub inheritable: Vec<String>,
    /// Ambient set.
    pub ambient: Vec<String>,
}

/// `root`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Root {
    /// Absolute path of the root filesystem.
    pub path: String,
    /// Mount it read-only.
    pub readonly: bool,
}

/// One entry of `mounts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// Where, inside the container.
    pub destination: String,
    /// File system type (`none` for bind mounts).
    #[serde(rename = "type")]
    pub kind: String,
    /// Source device, file system or host path.
    pub source: String,
    /// mount(8) options.
    #[serde(default)]
    pub options: Vec<String>,
}

/// `linux`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Linux {
    /// User namespace uid mappings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uid_mappings: Vec<IdMapping>,
    /// User namespace gid mappings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gid_mappings: Vec<IdMapping>,
    /// Namespaces to create.
    pub namespaces: Vec<Namespace>,
    /// The cgroup path, relative to the cgroup mount(s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroups_path: Option<String>,
    /// Resource limits.
    pub resources: Resources,
    /// Paths hidden from the container.
    pub masked_paths: Vec<String>,
    /// Paths made read-only in the container.
    pub readonly_paths: Vec<String>,
}

/// One id mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IdMapping {
    /// First id inside the container.
    #[serde(rename = "containerID")]
    pub container_id: u32,
    /// First id on the host.
    #[serde(rename = "hostID")]
    pub host_id: u32,
    /// How many ids.
    pub size: u32,
}

/// One namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespace {
    /// `pid`, `ipc`, `uts`, `mount`, `user`, `network`, `cgroup`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// `linux.resources`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// Device cgroup rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceRule>,
    /// Memory limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    /// CPU limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    /// Process count limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<Pids>,
}

/// A device cgroup rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRule {
    /// Allow or deny.
    pub allow: bool,
    /// `r`, `w`, `m` combined.
    pub access: String,
}

/// `linux.resources.memory`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// Memory limit in bytes.
    pub limit: i64,
    /// Memory plus swap, in bytes (cgroup v1 semantics; runc converts it for v2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<i64>,
}

/// `linux.resources.cpu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cpu {
    /// CPU time allowed per period, in microseconds.
    pub quota: i64,
    /// The period, in microseconds.
    pub period: u64,
}

/// `linux.resources.pids`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pids {
    /// Maximum number of tasks.
    pub limit: i64,
}
