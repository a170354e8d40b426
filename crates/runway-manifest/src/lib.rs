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

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

mod config;
mod diagnostic;
pub mod egress;
mod quantity;
mod schema;
mod service;
mod source;
mod types;
mod validate;

pub use config::{
    AnalysisConfig, Artifact, EgressConfig, ProbeAction, ProbeConfig, RolloutConfig, ServiceConfig,
    SloConfig, dns_name, secret_suffix,
};
pub use diagnostic::{Diagnostic, Location, Severity, dotted_path};
pub use quantity::{Quantity, QuantityError};
pub use schema::{manifest_reference_markdown, manifest_schema, manifest_schema_json};
pub use service::{ConfigError, Loaded, Service, ServiceFiles, load, merge};
pub use source::{Document, NodeSpan, SourceFile, SpanMap, parse, yaml_lines};
pub use types::*;
pub use validate::{EnvFile, RESERVED_ENV, is_secret_name};
