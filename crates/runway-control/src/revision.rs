//! A revision as the controller uses it: the store's immutable record and the settings its
//! manifest gives, read once and kept. A manifest that cannot be read is kept as the reason,
//! which fails the revision's start.

use runway_ingress::Protocol;
use runway_manifest::{Manifest, ServiceConfig};
use runway_store::Revision;

/// One revision, with its settings applied.
#[derive(Debug)]
pub(crate) struct RevisionInfo {
    pub(crate) record: Revision,
    /// The settings, or why the manifest cannot be read.
    pub(crate) config: Result<ServiceConfig, String>,
}

impl RevisionInfo {
    pub(crate) fn new(record: Revision) -> Self {
        let config = serde_json::from_value::<Manifest>(record.manifest.clone())
            .map(|manifest| {
                ServiceConfig::from_manifest(&manifest, Some(&record.env), &record.env_vars)
            })
            .map_err(|e| format!("its manifest cannot be read: {e}"));
        Self { record, config }
    }

    pub(crate) fn key(&self) -> (String, String) {
        (self.record.service.clone(), self.record.env.clone())
    }

    /// The tag the ingress serves it under: `r{number}`.
    pub(crate) fn tag(&self) -> String {
        format!("r{}", self.record.number)
    }

    /// The image its instances pull, for an image artifact: its mirror (in the platform
    /// registry at `registry_host`, or an external mirror's whole reference), or (not
    /// mirrored, or no longer pulled from the mirror) the image pinned at deploy.
    pub(crate) fn image(&self, registry_host: Option<&str>) -> Option<String> {
        let artifact = &self.record.artifact;
        match (runway_store::artifact_mirror(artifact), registry_host) {
            (Some(mirror), Some(_)) if runway_store::mirror_is_external(mirror) => {
                Some(mirror.to_owned())
            }
            (Some(mirror), Some(host)) => Some(format!("{host}/{mirror}")),
            _ => runway_store::artifact_image(artifact).map(str::to_owned),
        }
    }

    pub(crate) fn protocol(&self) -> Protocol {
        match &self.config {
            Ok(config) if config.backend_protocol.is_http2() => Protocol::H2c,
            _ => Protocol::Http1,
        }
    }

    pub(crate) fn max_concurrency(&self) -> u32 {
        self.config.as_ref().map_or(0, |config| config.concurrency)
    }

    pub(crate) fn request_timeout_seconds(&self) -> f64 {
        self.config.as_ref().map_or(300.0, |config| {
            f64::from(config.request_timeout_seconds.max(1))
        })
    }

    /// A plain process (its code a snapshot, or a directory before snapshots), not an image.
    pub(crate) fn is_process(&self) -> bool {
        runway_store::artifact_is_process(&self.record.artifact)
    }

    /// A worker (`kind: worker`): no port, no traffic, not autoscaled; nothing to drain, so
    /// its instances get their stop signal as soon as they are retired.
    pub(crate) fn is_worker(&self) -> bool {
        self.config
            .as_ref()
            .is_ok_and(|config| config.kind == runway_manifest::WorkloadKind::Worker)
    }

    pub(crate) fn stop_grace_seconds(&self) -> u32 {
        self.config
            .as_ref()
            .map_or(30, |config| config.stop_grace_period_seconds)
    }

    /// Instances a revision runs until autoscaling: `max(min_instances, 1)`.
    pub(crate) fn default_instances(&self) -> u32 {
        self.config
            .as_ref()
            .map_or(1, |config| config.min_instances.max(1))
    }
}
