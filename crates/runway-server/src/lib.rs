//! `runway server` as a library: the control plane in one process (the API, the store, the
//! controller and the driver), the configuration that shapes it, and the data plane it keeps
//! beside it (the ingress in a process of its own, started or adopted, and each instance under
//! its own supervisor), so stopping or killing the server stops no instance and fails no
//! request; the next start adopts them and feeds the ingress again. The `runway` binary's
//! `runway server` is a thin main over it (its arguments, its messages, the signal); `runway
//! quickstart` runs it in-process.
//!
//! Entry points:
//!
//! - [`ServerConfig::load`]: the configuration file, checked whole, or the defaults. A caller
//!   may also fill a [`ServerConfig`] itself.
//! - [`start`] (or [`start_with`] and its [`Drivers`]): opens the data directory and the store,
//!   builds the driver, the controller and the API, starts or adopts the ingress (or with
//!   `ingress.remote` feeds the ingresses someone else runs, `IngressFleet`), and returns a
//!   [`Running`] once every listener is bound. With `store.url` (PostgreSQL) it is one of
//!   several replicas: no data-directory lock (replicas on one machine share it), an election,
//!   the controller only while leading, and an exit (code 75) when a replica that led loses
//!   the lease.
//! - [`check_config`], [`migrate_store`], [`admin_token`]: `runway server check-config` (the
//!   file and what it names, nothing started), `migrate-store` (SQLite to PostgreSQL) and
//!   `admin-token`.
//! - [`driver::drivers`]: every driver `runtime.kind` may name, built once into a
//!   [`driver::ServerDriver`]; adding one is a line there (`docs/dev/adding-a-driver.md`).
//!
//! Files:
//!
//! - `config.rs`: the configuration's sections and keys, their defaults and checks.
//! - `start.rs`: `start` and `Running`; `ingress.rs`: the ingress process started or adopted,
//!   and the keeper that starts it again when it stops answering; `data_dir.rs`: the data
//!   directory made private, opened for containers, and locked by one server at a time;
//!   `tasks.rs`: code snapshots and images no revision names collected, previews past their
//!   time decommissioned, observability files written.
//! - `platform.rs`: `ServerPlatform`, the API's `runway_api::Platform` over the controller, the
//!   driver and the code snapshots.
//! - `driver.rs`: the driver choice (`DriverKind`, `Drivers`, `ServerDriver`); `driver/local.rs`
//!   this machine's (`runtime.kind: local`), `driver/kubernetes.rs` a cluster's (`kubernetes`:
//!   a kubeconfig, or the pod's service account; tags pinned by `runway-oci`'s
//!   `Store::resolve`, no layer fetched); `driver/settings.rs` the `runtime` section.
//! - `registry.rs`: the platform registry's `registry` section, the images mirrored into it at
//!   deploy (`Mirror`) and what a driver pulls from it with (`PlatformRegistry`).
//! - `cells.rs`: the cell-routed routes of `ingress.cells` (and of `runway router`), put in
//!   every table beside the services'. `beside.rs`: the programs a server starts, the small
//!   binary beside this one or this binary's own subcommand.
//! - `admin.rs`: the commands besides serving.
//! - `signatures.rs`: `signatures`, the rules an image's cosign signature must pass to deploy
//!   (a key's, or a certificate naming the pipeline that signed), checked with `sigstore`.
//! - `audit_export.rs`: `audit.export`, the audit log sent as JSON lines to a file, syslog or
//!   an HTTPS webhook, at least once, each sink's cursor in the store, while this replica
//!   leads.
//!
//! The binary that links this crate is the one the server runs again for its helpers, unless
//! `runway-ingress` and `runway-supervisor` of the same build are installed beside it: it must
//! take `ingress` and `supervise` as `runway` does. Like the binary it is the body of, this
//! crate writes `runway server: ...` lines on stderr (the operator's messages, as they always
//! were); the rest goes through `tracing`.
//!
//! Tests: the unit tests beside the code, and one integration test binary, `tests/server/`
//! (a fake driver through [`driver::Drivers::with`], as `docs/dev/adding-a-driver.md` says).
//! The tests that drive a real `runway server` stay in `crates/runway-cli/tests/` (`server.rs`,
//! `delivery.rs`, `replicas.rs`, `kubernetes.rs` and the rest): they need the `runway` binary
//! (`CARGO_BIN_EXE_runway`), which the server runs again for `runway ingress` and `runway
//! supervise`, and which is also the client they drive it with.

// Library code logs through `tracing`; what a command has to say it returns to the CLI.
#![deny(clippy::print_stderr, clippy::print_stdout)]

mod admin;
pub mod audit_export;
mod beside;
pub mod cells;
pub mod config;
mod data_dir;
pub mod driver;
mod ingress;
mod platform;
pub mod registry;
pub mod signatures;
mod start;
mod tasks;

pub use admin::{admin_token, check_config, migrate_store};
pub use config::ServerConfig;
pub use data_dir::create_data_dir;
pub use driver::{Drivers, drivers};
pub use ingress::IngressProcess;
pub use start::{Running, shutdown_signal, start, start_with};
