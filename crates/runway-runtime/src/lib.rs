//! Runway's local runtime: it runs a service's instances on this machine and keeps them running.
//!
//! - [`process`] is the supervisor's core: start one process, signal it, stop it within a grace
//!   period, record how it ended. `runway wrapper` is built on it too.
//! - [`supervisor`] is one process per instance (like containerd's shim or conmon): it starts the
//!   instance (a command, or a container through runc), probes it, restarts it with backoff,
//!   writes its output to rotating files and serves its status on a unix socket. It outlives the
//!   process that asked for the instance.
//! - [`runtime`] is the per-instance interface; [`local`] implements it on this machine,
//!   pulling images with `runway-oci`. [`driver`] is the control plane's seam
//!   (`runway_driver::Driver`, revision workloads with N replicas) over it.
//! - [`spec`] and [`status`] are what goes in and what comes out; [`service`] makes a spec from
//!   a service's settings.
//! - [`sandbox`] isolates a tenant's plain process: run by the OCI runtime as images are, as
//!   the service's own user, seeing only the host's system directories and its code.
//! - [`seccomp`] is the system calls no container (image or sandboxed process) may make,
//!   unless the operator lifts it for a service.
//! - [`network`] gives a container a network of its own: a namespace joined to the host by a
//!   veth pair on a `/30` leased from the operator's range, with no route out.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

mod container;
pub mod driver;
pub mod firewall;
pub mod local;
pub mod logs;
pub mod network;
pub mod probe;
pub mod process;
pub mod runtime;
pub mod sandbox;
pub mod seccomp;
mod secret_bundle;
pub mod service;
pub mod spec;
pub mod status;
pub mod supervisor;

pub use driver::{LocalDriver, LocalDriverOptions};
pub use local::{LocalConfig, LocalRuntime, Previous, SupervisorCommand};
pub use runtime::{Runtime, RuntimeError};
pub use runway_oci::{Credentials, Digest, PullOptions};
pub use spec::InstanceSpec;
pub use status::{InstanceStatus, Phase};
