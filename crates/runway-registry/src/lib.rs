//! An OCI distribution registry as a library: Runway's control plane serves it from its data
//! directory so that every deployed image is mirrored into the platform's own registry.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use runway_registry::{Access, Authorizer, Limits, Refusal, Registry, router};
//!
//! struct Anyone;
//! impl Authorizer for Anyone {
//!     async fn authorize(&self, _: &http::HeaderMap, _: Option<&str>, _: Access) -> Result<(), Refusal> {
//!         Ok(())
//!     }
//! }
//! let registry = Arc::new(Registry::open("/var/lib/runway/registry".as_ref(), Limits::default())?);
//! let app = axum::Router::new().merge(router(registry, Arc::new(Anyone)));
//! # let _ = app; Ok(()) }
//! ```
//!
//! # Files
//!
//! - `lib.rs`: this overview and the re-exports.
//! - `auth.rs`: [`Access`], [`Refusal`] and the [`Authorizer`] the caller supplies.
//! - `name.rs`: repository names, tags and references, validated by the spec's grammar.
//! - `manifest.rs`: what a manifest is (media type) and refers to (blobs, manifests, subject).
//! - `storage.rs`: [`Registry`] and [`Limits`]: blobs, links, manifests, tags, referrers on disk.
//! - `upload.rs`: upload sessions, hashed while written.
//! - `collect.rs`: garbage collection, [`Registry::collect`] with [`Collect`] and
//!   [`Collected`].
//! - `usage.rs`: disk use counted against [`Limits::max_total_bytes`]; [`Usage`].
//! - `routes.rs`: the HTTP API ([`router`]) and the one mapping from errors to responses.
//! - `error.rs`: [`RegistryError`].
//!
//! # The API
//!
//! [`router`] serves the OCI distribution spec v1.1 under `/v2/`: `GET /v2/`; blobs (`GET`,
//! `HEAD`, `DELETE`); uploads (`POST` with or without `?digest=`, `PATCH` chunks in order,
//! `PUT ?digest=`, `GET` status, `DELETE` cancels; `?mount=&from=` mounts only a blob the
//! caller may pull from a repository that has it, and otherwise starts an ordinary upload);
//! manifests by tag or digest (`GET`, `HEAD`, `PUT`, `DELETE`); `tags/list` with `n`, `last`
//! and `Link`; and the referrers API with `artifactType` filtering. A blob `GET` honours one
//! `Range: bytes=` range (`206`, or `416` when it starts past the end). Every request asks the [`Authorizer`] first:
//! `GET`/`HEAD` is [`Access::Pull`], the rest [`Access::Push`].
//!
//! Manifests may be OCI image manifests and indexes, or Docker v2 schema 2 manifests and
//! manifest lists; a manifest's blobs (config, layers except non-distributable ones) and an
//! index's manifests must already be in the repository. Digests are sha256 only
//! ([`runway_oci::Digest`]).
//!
//! # Storage
//!
//! ```text
//! <root>/blobs/sha256/<hex>                                  content: blobs and manifests
//! <root>/repositories/<name>/_blobs/sha256/<hex>             the repository may read this blob
//! <root>/repositories/<name>/_manifests/sha256/<hex>         it has this manifest (holds its media type)
//! <root>/repositories/<name>/_tags/<tag>                     holds the manifest's digest
//! <root>/repositories/<name>/_referrers/sha256/<subject>/<hex>   a referrer's descriptor (JSON)
//! <root>/uploads/<id>                                        an upload in progress
//! <root>/tmp/                                                small writes before their rename
//! ```
//!
//! Content is stored once, whoever pushed it; a repository reads only what is linked in it,
//! so a tenant who learns a digest cannot read another tenant's layers, and a mount is the
//! only way a link crosses repositories. Everything is written to `uploads/` or `tmp/` and
//! renamed into place, so a failed write (a digest mismatch, a full disk) leaves nothing
//! visible. Directories are `0700`.
//!
//! Deleting unlinks; the content stays until [`Registry::collect`], a mark-and-sweep pass the
//! caller runs, finds it unneeded. Per repository a manifest is live when it is tagged, one of
//! the caller's roots ([`Collect::keep`]), younger than [`Collect::grace`] (by its link's
//! mtime), listed by a live index, or a referrer of a live subject; a blob link is live when a
//! live manifest refers to it or it is young. Other links go (a manifest with its referrer
//! entry), then content files no repository links and older than the grace, then
//! repositories left with nothing. Writes that create links (an upload's commit,
//! [`Registry::put_blob`], manifests and tags, mounts) hold a lock shared that a pass holds
//! exclusively, so content linked during a pass is never deleted by it.
//!
//! [`Limits::max_total_bytes`] bounds the content store plus the uploads in progress: a chunk,
//! a `put_blob` or a new manifest that would go past it is refused before it is written
//! ([`RegistryError::Full`], `507 Insufficient Storage` over HTTP, as a full disk is) and
//! leaves nothing. The bytes are counted by one walk at [`Registry::open`] and kept current by
//! every write and deletion since ([`Registry::usage`]).

mod auth;
mod collect;
mod error;
mod manifest;
mod name;
mod routes;
mod storage;
mod upload;
mod usage;

pub use auth::{Access, Authorizer, Refusal};
pub use collect::{Collect, Collected};
pub use error::RegistryError;
pub use manifest::{DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST};
pub use name::{MAX_NAME_LEN, Reference, ReferenceError, Repository, Tag};
pub use routes::router;
pub use runway_oci::Digest;
pub use storage::{Limits, Registry, StoredManifest};
pub use usage::Usage;
