//! What the driver's tests share: a revision's workload from a manifest.

#![allow(clippy::unwrap_used, reason = "test support")]

use std::collections::BTreeMap;

use runway_driver::Workload;
use runway_manifest::{ServiceFiles, SourceFile, load};

const DIGEST: &str = "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";

/// Revision `revision` of the service `manifest` describes, in `dev`, its image pinned by
/// digest, with no secret.
pub(crate) fn workload(manifest: &str, revision: &str) -> Workload {
    let loaded = load(&ServiceFiles {
        base: Some(SourceFile::new(".runway/runway.yml", manifest)),
        ..ServiceFiles::default()
    });
    let config = loaded.service.unwrap().config(Some("dev")).unwrap();
    Workload {
        image: Some(format!("registry.example/{}@{DIGEST}", config.name)),
        service: config.name.clone(),
        service_id: 1,
        env: "dev".to_owned(),
        revision: revision.to_owned(),
        config,
        source: None,
        secrets: BTreeMap::new(),
        secret_versions: BTreeMap::new(),
        identity: None,
    }
}
