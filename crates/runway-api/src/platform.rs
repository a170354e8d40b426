//! What the API needs from outside the store: the registry, the runtime's view of instances,
//! their logs, and a nudge for the reconciler. The server binary implements it over the
//! reconciler and the runtime; the tests over plain values.

use std::future::Future;
use std::pin::Pin;

use axum::body::Bytes;
use tokio::sync::mpsc;

use crate::types::{InstanceView, LogLine, RevisionStatus, RolloutView, RouteView, ScalingView};

/// A boxed, sendable future (the trait stays object safe: `Arc<dyn Platform>`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the runtime and the ingress say about a service in an environment; the desired state
/// comes from the store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatusParts {
    /// Where it is served, `https://hello.dev.localhost:8443/`.
    pub url: String,
    /// What the ingress routes now.
    pub routes: Vec<RouteView>,
    /// How each revision is doing.
    pub revisions: Vec<RevisionStatus>,
    /// Every instance of the service in the environment.
    pub instances: Vec<InstanceView>,
    /// Each autoscaled revision's demand and last decisions.
    pub scaling: Vec<ScalingView>,
    /// The progressive rollout in progress.
    pub rollout: Option<RolloutView>,
    /// What could not be read, each saying which part is missing and why.
    pub warnings: Vec<String>,
    /// Which replica answered and which leads, when there are several.
    pub control_plane: Option<crate::types::ControlPlaneView>,
}

/// An image a deploy runs, pinned by [`Platform::resolve_image`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedImage {
    /// The reference given, pinned to its digest: `registry/name@sha256:…`.
    pub pinned: String,
    /// Where the platform registry holds a copy, which instances pull:
    /// `<service>/mirror@sha256:…`, without the registry's host (which may move); `None`
    /// when images are not mirrored (`registry.mirror: false`).
    pub mirror: Option<String>,
}

/// What verified an image's signature ([`Platform::verify_image`]): its revision records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSignature {
    /// The image pinned to the digest that was verified, which the deploy then runs.
    pub pinned: String,
    /// One line per rule that covered it, saying what passed it.
    pub by: Vec<String>,
}

/// What runs a process revision's code as an image ([`Platform::process_image`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessImage {
    /// The program and its arguments: the image's entrypoint.
    pub command: Vec<String>,
    /// Where it runs, relative to the code (`spec.workload.process.working_dir`).
    pub working_dir: Option<String>,
    /// `PORT`, for a service; none for a worker.
    pub port: Option<u16>,
}

/// Everything outside the store the API asks about.
pub trait Platform: Send + Sync + 'static {
    /// Resolves an image reference service `service` deploys to `repository@sha256:…`, and
    /// mirrors it into the platform registry (once, at deploy). The error is shown to the
    /// caller, so it must say what is wrong without internals.
    fn resolve_image<'a>(
        &'a self,
        service: &'a str,
        reference: &'a str,
    ) -> BoxFuture<'a, Result<ResolvedImage, String>>;

    /// The server's signature rules that cover `service`'s images in `env`, by name
    /// (`signatures[0]`); none when its images deploy unsigned.
    fn signatures_required(&self, _service: &str, _env: &str) -> Vec<String> {
        Vec::new()
    }

    /// Checks the signatures of `reference` against every rule that covers `service` in
    /// `env`: `Ok(None)` when none does, `Ok(Some)` with the digest verified and what passed
    /// each rule, or `Err` saying why it may not deploy (shown to the caller, without
    /// internals).
    fn verify_image<'a>(
        &'a self,
        _service: &'a str,
        _env: &'a str,
        _reference: &'a str,
    ) -> BoxFuture<'a, Result<Option<ImageSignature>, String>> {
        Box::pin(async { Ok(None) })
    }

    /// What runs for `service` in `env` now.
    fn status(&self, service: &str, env: &str) -> BoxFuture<'_, StatusParts>;

    /// Where `service` in `env` is served (its host under the platform's domain), whether it
    /// runs or not: `https://hello.dev.localhost:8443/`.
    fn url(&self, service: &str, env: &str) -> String;

    /// The last `lines` lines of the service's instances in `env` (or one instance), oldest
    /// first; with `previous`, of those that ended (kept a while: `--previous`).
    fn logs(
        &self,
        service: &str,
        env: &str,
        instance: Option<&str>,
        lines: usize,
        previous: bool,
    ) -> BoxFuture<'_, Result<Vec<LogLine>, String>>;

    /// The last `lines` lines, then every new one as it is written, until the receiver is
    /// dropped (the client went away).
    fn follow_logs(
        &self,
        service: &str,
        env: &str,
        instance: Option<&str>,
        lines: usize,
    ) -> BoxFuture<'_, Result<mpsc::Receiver<LogLine>, String>>;

    /// Whether service `service_id` has code snapshot `digest` (`sha256:…`), which is then
    /// kept from garbage collection a while longer (a deploy naming it is on its way).
    fn source_claim(&self, service_id: i64, digest: &str) -> BoxFuture<'_, Result<bool, String>>;

    /// Gives service `to` the code snapshot `digest` of service `from`, which has it: a
    /// preview runs its parent's code as a snapshot of its own.
    fn source_share(&self, from: i64, to: i64, digest: &str) -> BoxFuture<'_, Result<(), String>>;

    /// Takes the gzip-compressed snapshot archive arriving on `chunks` as service
    /// `service_id`'s snapshot `digest`, checked against it and at most `max_bytes`
    /// uncompressed. An `Err` chunk means the upload failed (the client went away, or sent
    /// too much): nothing is kept. The sender stops when the receiver is dropped (refused
    /// early).
    fn source_put(
        &self,
        service_id: i64,
        digest: &str,
        max_bytes: u64,
        chunks: mpsc::Receiver<Result<Bytes, String>>,
    ) -> BoxFuture<'_, Result<(), SourceRefused>>;

    /// A process revision's code snapshot (service `service_id`'s `digest`) as an image that
    /// runs it (`process`): the operator's process base with the code under `/app`, mirrored as
    /// a deployed image is, so a runtime that runs only images (a cluster) runs it too. `None`
    /// when the platform builds no such images (no `registry.process_base`, the default here).
    /// The error is shown to the caller.
    fn process_image<'a>(
        &'a self,
        _service: &'a str,
        _service_id: i64,
        _digest: &'a str,
        _process: &'a ProcessImage,
    ) -> BoxFuture<'a, Result<Option<String>, String>> {
        Box::pin(async { Ok(None) })
    }

    /// The desired state changed: the reconciler should look again now.
    fn wake(&self);

    /// The platform's own metrics endpoints, for Prometheus's discovery (the ingresses'
    /// admin ports, the API's `/metrics`); none by default.
    fn metrics_endpoints(&self) -> Vec<crate::metrics::TargetGroup> {
        Vec::new()
    }

    /// Every routed revision's traffic over the last minutes (`GET /v1/traffic`); none by
    /// default.
    fn traffic(&self) -> Vec<crate::types::TrafficView> {
        Vec::new()
    }

    /// How custom domains are served here: the ACME directory, the names reserved, the port.
    fn domains(&self) -> crate::domains::DomainSettings {
        crate::domains::DomainSettings {
            reserved: vec!["localhost".to_owned()],
            ..crate::domains::DomainSettings::default()
        }
    }

    /// A custom domain was added or removed, or a service's maintenance changed: the
    /// ingress's table should follow now.
    fn edge_changed(&self) {}
}

/// Why a code snapshot was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceRefused {
    /// Over the server's size limit (413).
    TooLarge(String),
    /// Not a snapshot, or not the one named (422).
    Invalid(String),
    /// No room to keep it: the disk is full (507).
    Full,
    /// The server could not keep it (500; the cause is logged, not shown).
    Internal(String),
}
