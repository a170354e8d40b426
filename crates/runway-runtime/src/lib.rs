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
//!
//! # Files
//!
//! - `process.rs`: the supervisor's core (spawn, signal, stop with a grace period then SIGKILL,
//!   exit), shared with `runway wrapper`.
//! - `supervisor.rs`: the per-instance supervisor (start, probes, restart with backoff, crash
//!   loop, stop, output, status on a unix socket and in `status.json`), and its watchdog.
//! - `container.rs`: runc `create` and `start`, reaping the container's init as child subreaper,
//!   the OOM count from its cgroup, `delete`.
//! - `probe.rs`: HTTP, TCP and gRPC-health checks with thresholds.
//! - `logs.rs`: CRI-format rotating log files, tail and follow.
//! - `runtime.rs`: the `Runtime` trait. `local.rs`: `LocalRuntime`, which starts supervisors and
//!   finds them again from their state directories, and keeps a removed instance's output in
//!   `previous/<id>/` an hour (the last 64: `runway logs --previous`).
//! - `service.rs`: `ServiceConfig` to `InstanceSpec`. `spec.rs` and `status.rs`: what goes in and
//!   what comes out.
//! - `sandbox.rs`: a tenant's plain process isolated (the service's own user, what of the host it
//!   sees, the checks that keep the state directory out), made into an OCI bundle by `local.rs`.
//!   `seccomp.rs`: the system calls no container may make.
//! - `network.rs`: a container's own network (an address pool leased through files, the veth pair
//!   made by iproute2 between `create` and `start`), and what an instance listens on, read from
//!   `/proc/<pid>/net/tcp{,6}` (all of its namespace's on its own network; on the host's, the
//!   sockets its processes hold, by their `/proc/<pid>/fd` inodes) for a failed startup probe's
//!   hint. `firewall.rs`: the nftables table that keeps instances to their policy.
//! - `driver.rs`: `LocalDriver`, the `runway_driver::Driver` of this machine: a workload's replicas
//!   as instances, built from its settings by `service.rs`, a plain process from its code snapshot
//!   and in its service's sandbox; surplus and retired ones stopped in the background; output
//!   tailed and followed, a later replica from its start.
//! - `secret_bundle.rs`: the copy of a bundle's `config.json` with the instance's secrets that
//!   `create` reads, on a tmpfs (`/run/runway/secret`, mounted when it is not one), removed once
//!   `create` returns, and stale copies cleaned up.
//!
//! The supervisor binary is `runway-supervisor` (in `runway-cli`'s `src/bin/`), which calls
//! `supervisor::main`. Only this crate starts, signals or reaps instances' processes and
//! containers; the CLI and the control plane ask it.
//!
//! # How an instance runs
//!
//! 1. `runway run` (or the control plane, through `LocalDriver`) turns `ServiceConfig` into an
//!    `InstanceSpec` (`service.rs`): artifact, environment (`PORT`, `K_SERVICE`, `K_REVISION`, the
//!    manifest's variables), probes, stop signal and grace period, limits.
//! 2. `LocalRuntime::instance_ensure` checks what can be checked before anything is created (the
//!    command exists; for an image, the pull and the bundle; for a sandboxed process, the sandbox
//!    and its bundle), gives a free port when asked (`port: Some(0)`), makes
//!    `<state>/instances/<id>/` and starts `runway-supervisor <dir>` in a session of its own,
//!    writing the spec (secrets included) to its stdin, never to disk.
//! 3. The supervisor writes `spec.json` (without secrets), binds `supervisor.sock`, starts the
//!    process (or `runc create` and `runc start`), and from then on owns it: probes, restarts,
//!    output, stop. Every status change is written to `status.json` and pushed to watchers on the
//!    socket (one JSON request a line: `status`, `watch`, `stop`).
//! 4. Whoever asked may die: a new `LocalRuntime` lists the state directories, connects to each
//!    socket and watches or stops the instance there. A supervisor that died leaves a
//!    `status.json` that is not final; the runtime reports that instance as failed, saying so.
//!
//! Instances outlive whoever started them: each has its own supervisor in its own session, and
//! the runtime holds no state that is not in the supervisors' state directories. A secret's value
//! reaches a supervisor through a pipe and the process through its environment; it is never
//! written to a state directory.
//!
//! # File modes
//!
//! File modes follow who must read what. A container's root is another host id (100000, in its
//! user namespace), and the OCI runtime mounts the rootfs from inside that namespace, so every
//! directory down to `images/rootfs/idshift-<n>/sha256/<digest>/` must be searchable by it: the
//! server's data directory and the image store's root and `rootfs/` are `0711` (searchable, not
//! listable), `idshift-<n>/` is `0710` with group `n` and its `sha256/` `0711`, so no other user
//! reaches an unpacked image. Everything private is private on its own, and is made so before the
//! data directory is opened: the database (with its `-wal` and `-shm`), the master key and the
//! CA's key `0600`, `instances/`, `blobs/` and `tmp/` `0700`. `server.lock` (`0600`, flocked for
//! the server's life, holding its pid) keeps a second server off the same data directory.
//! `runway_oci::build_bundle` checks the way down (`reachable_by`) and names the directory that
//! blocks it, rather than leaving runc's bare "permission denied".
//!
//! # What is enforced
//!
//! For a command artifact: the stop signal, grace period and SIGKILL, restarts, probes, output
//! capture. A sandboxed one (every process the control plane starts, unless
//! `runtime.isolate_processes` is off) is run by runc like an image, with its limits, namespaces,
//! its service's own user and a pids limit (4096). Unsandboxed (`runway run` on a developer's
//! machine, or isolation turned off), memory and CPU limits are not enforced (it runs in the
//! supervisor's cgroup), and it has no namespaces.

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
