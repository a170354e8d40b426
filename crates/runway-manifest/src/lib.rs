//! The Runway service manifest, `.runway/runway.yml` (`apiVersion: runway/v1`,
//! `kind: RunwayService`): its types, its JSON Schema, parsing with locations, per-environment
//! overrides and validation that reports every error at once.
//!
//! This crate does no I/O: callers read files and hand their text in as [`SourceFile`]s.
//!
//! ```
//! use runway_manifest::{ServiceFiles, SourceFile, load};
//!
//! let files = ServiceFiles {
//!     base: Some(SourceFile::new(
//!         ".runway/runway.yml",
//!         "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: hello\nspec:\n  container_port: 8080\n",
//!     )),
//!     ..ServiceFiles::default()
//! };
//! let loaded = load(&files);
//! assert!(loaded.diagnostics.is_empty());
//! let config = loaded.service.unwrap().config(None).unwrap();
//! assert_eq!(config.port, Some(8080));
//! ```
//!
//! # Files
//!
//! - `types.rs`: the serde and schemars types, whose doc comments are the schema's descriptions.
//! - `source.rs`: YAML (saphyr) to a JSON value, plus a map from JSON pointer to line and column.
//! - `schema.rs`: the JSON Schema generated from the types; structural validation against it
//!   (jsonschema), its errors turned into located, readable diagnostics; the Markdown reference.
//! - `validate.rs`: the rules a schema cannot say.
//! - `service.rs`: one service's files to per-environment manifests (deep merge of overrides,
//!   environment files).
//! - `config.rs`: `ServiceConfig`, every default applied.
//! - `inventory.rs`: the platform's inventory (which services are onboarded), its schema and
//!   its loader.
//! - `quantity.rs`: CPU and memory quantities. `egress.rs`: egress ranges and ports.
//!   `diagnostic.rs`: located findings.
//!
//! # How a manifest is checked
//!
//! 1. `source::parse` turns YAML into a `serde_json::Value` and records where every key and value
//!    is. Syntax errors, duplicate keys, several documents, and nesting past 64 levels stop here,
//!    with their position. Aliases are expanded by saphyr under its own node budget.
//! 2. Overrides are deep-merged over the base as values; their locations are laid over the base's,
//!    so an error in a merged field points at the file that set it.
//! 3. `schema::check` validates the value against the schema generated from the types. Every
//!    violation becomes a `Diagnostic` with file, line, column, dotted path, what was expected, and
//!    for an unknown key the nearest valid one.
//! 4. The faulty nodes are pruned, the rest is deserialised into `Manifest`, and `validate::check`
//!    applies the semantic rules to it, so one run reports structural and semantic mistakes
//!    together.
//! 5. `ServiceConfig::from_manifest` applies every default. The renderers, the runtime and the
//!    control plane read only `ServiceConfig`, so a default lives in one place.
//!
//! The schema is generated from the types and never written by hand; `runway schema` publishes
//! the schema that `runway validate` enforces. No input panics the loader: a proptest runs on
//! every `cargo test`, and `fuzz/` holds a cargo-fuzz target for it.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

mod config;
mod diagnostic;
pub mod egress;
mod inventory;
mod quantity;
mod schema;
mod service;
mod source;
mod types;
mod validate;

pub use config::{
    AnalysisConfig, Artifact, EgressConfig, ProbeAction, ProbeConfig, RolloutConfig, ServiceConfig,
    SloConfig, TokenBucket, TrafficConfig, dns_name, secret_suffix,
};
pub use diagnostic::{Diagnostic, Location, Severity, dotted_path};
pub use inventory::{
    Inventory, InventoryService, LoadedInventory, inventory_schema, inventory_schema_json,
    load_inventory,
};
pub use quantity::{Quantity, QuantityError};
pub use schema::{manifest_reference_markdown, manifest_schema, manifest_schema_json};
pub use service::{ConfigError, Loaded, Service, ServiceFiles, load, merge};
pub use source::{Document, NodeSpan, SourceFile, SpanMap, parse, yaml_lines};
pub use types::*;
pub use validate::{EnvFile, RESERVED_ENV, is_pinned, is_secret_name};
