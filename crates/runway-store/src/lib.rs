//! Runway's control-plane store: everything a user creates (services, immutable revisions,
//! deployments and their events, desired state, sealed secrets, API tokens) and the audit log
//! of every change. Only this crate touches SQL.
//!
//! # Shape
//!
//! [`Store`] is the interface the control plane programs against; [`SqliteStore`] is the
//! embedded implementation (one file, nothing else to install), and [`PostgresStore`] lets
//! several control-plane replicas share one database. The trait is object safe
//! (`Arc<dyn Store>`).
//! Its queries and rules are written once (`logic.rs`) over a small neutral interface to SQL
//! (`sql.rs`: numbered parameters, rows of integers, text, bytes and NULL, the one place a
//! dialect differs); a backend gives them transactions.
//!
//! - **Synchronous methods.** SQLite calls block; pretending otherwise would only hide that.
//!   The API runs them with `tokio::task::spawn_blocking`; tests and tools call them directly.
//!   A synchronous trait also keeps a lock from ever being held across an `.await`.
//! - **One method, one transaction.** Whatever must happen together is a single method: a
//!   deploy allocates the revision number, inserts the revision, the deployment with its first
//!   event, the new desired state and the audit entry, or none of them
//!   ([`Store::record_deploy`], [`Store::record_rollback`], [`Store::record_promote`]). Write
//!   transactions are `BEGIN IMMEDIATE`, so a number read with `MAX(number) + 1` cannot be taken
//!   by another writer before the insert.
//! - **Every change is audited** in the transaction that makes it, with the actor the caller
//!   names: there is no change without its audit entry and no entry for a change that rolled
//!   back.
//! - **Revisions are immutable**: the trait has no update or delete, and a trigger refuses an
//!   `UPDATE` in SQL. They leave only with their service ([`Store::service_decommission`]).
//! - **Deployments move through a checked state machine** ([`DeploymentState::can_become`]);
//!   terminal states never change. A deployment in progress also carries the rollout
//!   controller's progress (JSON the store does not read) and at most one operator command
//!   ([`RolloutCommand`]) waiting for the controller; the controller clears the command
//!   compare-and-clear as it saves its progress ([`Store::deployment_save_rollout`]), so a
//!   newer command that arrived meanwhile is not lost, and a terminal state drops it.
//! - **The audit log is a hash chain**: each entry carries the hash of the one before and its
//!   own, written in its transaction (`audit.rs` defines the encoding an outside verifier
//!   recomputes); [`Store::audit_verify`] names the first entry changed or removed below the
//!   store. Export sinks' cursors live beside it ([`Store::audit_export_ack`]).
//! - **The store sees only ciphertext** for secrets, and only [`Store::secret_read`] returns
//!   it; listings carry names, versions and dates. Tokens are stored by hash.
//!
//! # Durability
//!
//! The database runs in WAL mode with `synchronous=FULL`: a method that returned `Ok` has its
//! transaction in the WAL and fsynced, so it survives `kill -9` and a power cut, not only a
//! crash of the process (`NORMAL` may lose the last transactions on power loss, which for a
//! deploy means a revision the CLI already printed). The cost is one fsync per write
//! transaction, small against a control plane's few writes a second. Foreign keys are on
//! (SQLite's default is off), and a busy timeout ([`BUSY_TIMEOUT`]) makes a second process
//! wait instead of failing at once. A test kills a writer with SIGKILL and checks that every
//! acknowledged record is there and `PRAGMA integrity_check` passes.
//!
//! # Migrations
//!
//! `migrations/NNNN_name.sql` in this crate are embedded with `include_str!` and applied in
//! order, each at most once, in one `BEGIN IMMEDIATE` transaction that also sets
//! `PRAGMA user_version` to the number of migrations applied; a failure leaves the schema as it
//! was. A released migration is never edited; a change is a new file. Opening a database whose
//! `user_version` is above what this binary knows fails with [`StoreError::TooNew`] before any
//! write (even the switch to WAL), so an older binary never damages a newer database.
//!
//! # Timestamps
//!
//! [`Timestamp`]: Unix milliseconds in SQL (`INTEGER`), RFC 3339 in JSON.
//!
//! # Files
//!
//! - `store.rs`: the object-safe `Store` trait.
//! - `model.rs`: the model: services, immutable revisions, deployments with events, desired state
//!   with generations, sealed secret versions, tokens (a console session is a token with a
//!   parent, revoked with it), custom domains with their sealed certificate keys, ACME accounts,
//!   the audit log; and the lease's fence (`FenceCell`).
//! - `logic.rs`: the queries and rules, written once, generic over a `Backend` that gives
//!   transactions. `sql.rs`: the neutral SQL interface under them.
//! - `sqlite.rs`: `SqliteStore`, WAL, `synchronous=FULL`, foreign keys; every write and its audit
//!   entry in one immediate transaction.
//! - `postgres.rs`: `PostgresStore`, a pool; a write takes one advisory lock and runs at READ
//!   COMMITTED, so writers are one at a time as on SQLite; a read is one REPEATABLE READ snapshot.
//!   Its own migrations are in `migrations/postgres/`, the version in `runway_schema`.
//! - `migrate.rs`: the SQLite migrations in `migrations/`, applied by `PRAGMA user_version`.
//!   `0003` gives every service an identity from `service_ids`, whose AUTOINCREMENT never hands a
//!   number out twice, and the admin's `allow_processes`; `0005` (PostgreSQL's `0003`) records a
//!   secret version's `origin`, where a value mirrored from Vault came from.
//! - `audit.rs`: the audit chain's hash and `AuditChain`, which checks entries in order (the
//!   store's verification and `runway audit verify --file`'s); no SQL. `0010` (PostgreSQL's
//!   `0008`) adds the hashes, the head and the export cursors.
//! - `copy.rs`: SQLite to PostgreSQL, for `runway server migrate-store`. `time.rs`: timestamps.
//!   `error.rs`: the store's error.
//!
//! The behaviour suite (`tests/store`) runs on either backend: `RUNWAY_TEST_STORE=postgres` under
//! `scripts/with-postgres`, which CI does.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

mod audit;
mod copy;
mod error;
mod logic;
mod migrate;
mod model;
mod postgres;
mod sql;
mod sqlite;
mod store;
mod time;

pub use audit::{AuditBreak, AuditChain, GENESIS, audit_canonical, audit_hash};
pub use copy::{Copied, copy_sqlite_to_postgres};
pub use error::{Result, StoreError};
pub use model::{
    AuditBy, AuditEntry, AuditFilter, AuditHead, AuditSinkCursor, AuditVerification, Deployment,
    DeploymentEvent, DeploymentKind, DeploymentState, Desired, DesiredRevision, Domain,
    DomainCertificate, DomainState, Fence, FenceCell, IdentityKey, InventoryChanges,
    InventoryRecord, IssuedCertificate, Lease, Maintenance, NewPreview, NewRevision, NewService,
    NewToken, PLATFORM_ACTORS, PlannedRevision, Preview, Revision, RevisionRef, RolloutCommand,
    SecretInfo, SecretVersion, Service, ServiceUpdate, Team, TeamMember, Token, TokenScope,
    artifact_image, artifact_is_process, artifact_mirror, artifact_source, mirror_is_external,
    person_in_a_team, revision_name,
};
pub use postgres::{DatabaseTrust, POSTGRES_SCHEMA_VERSION, PostgresStore};
pub use sqlite::{BUSY_TIMEOUT, SqliteStore};
pub use store::{DeployRecord, Store};
pub use time::Timestamp;

/// The schema version this build writes (the number of migrations it knows).
pub const SCHEMA_VERSION: i64 = migrate::LATEST_VERSION;
