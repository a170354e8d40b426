//! `ServerPlatform`: the API's `Platform`, what it needs of the world outside the store (the
//! controller's view, the driver's logs and image pinning, the code snapshots, the domains'
//! settings), and the views it makes of the controller's figures.

use std::sync::Arc;

use runway_api::{BoxFuture, ImageSignature, Platform, ResolvedImage, SourceRefused, StatusParts};
use runway_control::Controller;
use runway_control::leader::Leadership;
use runway_driver::Driver;
use runway_oci::source::{SourceError, SourceStore};
use tokio::sync::{Notify, mpsc, watch};

use crate::driver::ServerDriver;

/// The API's view of the world outside the store: the controller, its driver, and the code
/// snapshots.
#[derive(Clone)]
pub(crate) struct ServerPlatform {
    pub(crate) controller: Arc<Controller<ServerDriver>>,
    /// Copies deployed images into the platform registry (`registry.mirror`).
    pub(crate) mirror: Option<Arc<crate::registry::Mirror>>,
    /// The `signatures` rules and what reads images' signatures.
    pub(crate) signatures: Arc<crate::signatures::ImageSignatures>,
    pub(crate) sources: SourceStore,
    /// This replica's name and whether it leads, when it is one of several.
    pub(crate) leadership: Option<(String, watch::Receiver<Leadership>)>,
    /// The platform's own metrics endpoints, for Prometheus's discovery.
    pub(crate) metrics: Vec<runway_api::metrics::TargetGroup>,
    /// How custom domains are served.
    pub(crate) domains: runway_api::domains::DomainSettings,
    /// Told when a domain is added or removed: the edge view's reader and the ACME issuer.
    pub(crate) edge_changed: [Arc<Notify>; 2],
}

fn api_log_line(line: runway_driver::LogLine) -> runway_api::types::LogLine {
    runway_api::types::LogLine {
        instance: line.replica,
        time: line.time,
        stream: match line.stream {
            runway_driver::Stream::Stdout => runway_api::types::Stream::Stdout,
            runway_driver::Stream::Stderr => runway_api::types::Stream::Stderr,
        },
        text: line.text,
    }
}

fn traffic_view(
    service: &str,
    env: &str,
    t: &runway_control::RevisionTraffic,
) -> runway_api::types::TrafficView {
    runway_api::types::TrafficView {
        service: service.to_owned(),
        env: env.to_owned(),
        revision: t.revision.clone(),
        window_seconds: t.window_seconds,
        requests_per_second: t.requests_per_second,
        error_ratio: t.error_ratio,
        p99_seconds: t.p99_seconds,
    }
}

/// A canary step's analysis so far, as the status says it: the controller's figures, limits
/// and checks as they are.
fn analysis_view(a: runway_control::AnalysisSummary) -> runway_api::types::RolloutAnalysis {
    use runway_api::types::{AnalysisCheck, AnalysisChecks, AnalysisFigures, AnalysisThresholds};
    let figures = |w: runway_control::WindowFigures| AnalysisFigures {
        requests: w.requests,
        errors_5xx: w.errors_5xx,
        error_ratio: w.error_ratio,
        p99_seconds: w.p99_seconds,
        restarts: w.restarts,
        readiness_failures: w.readiness_failures,
    };
    let check = |c: runway_control::CheckSummary| AnalysisCheck {
        standing: c.standing.to_owned(),
        value: c.value,
        stable_value: c.stable_value,
        limit: c.limit,
        reason: c.reason,
    };
    let s = &a.settings;
    runway_api::types::RolloutAnalysis {
        window_started_at: rfc3339(a.window_started_ms),
        window_seconds: a.window_ms as f64 / 1000.0,
        canary: figures(a.canary),
        stable: figures(a.stable),
        thresholds: AnalysisThresholds {
            min_requests: s.min_requests,
            max_error_ratio: s.max_error_ratio,
            max_error_ratio_over_stable: s.max_error_ratio_over_stable,
            latency_slo_seconds: s.latency_slo_seconds,
            max_p99_over_stable_ratio: s.max_p99_over_stable_ratio,
            min_p99_increase_seconds: s.min_p99_increase_seconds,
            p99_samples: a.p99_samples,
            max_restarts: s.max_restarts,
            max_readiness_failures: s.max_readiness_failures,
            max_inconclusive_windows: s.max_inconclusive_windows,
        },
        checks: AnalysisChecks {
            requests: check(a.requests),
            error_ratio: check(a.error_ratio),
            latency_p99: check(a.latency_p99),
            restarts: check(a.restarts),
            readiness_failures: check(a.readiness_failures),
        },
        verdict: a.verdict.to_owned(),
        reason: a.reason,
        revision: a.revision,
        stable_revision: a.stable_revision,
    }
}

/// Reads what the API forwards of an upload, on a blocking thread.
struct Chunks {
    rx: mpsc::Receiver<Result<bytes::Bytes, String>>,
    current: bytes::Bytes,
}

impl std::io::Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                None => return Ok(0),
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

impl Platform for ServerPlatform {
    fn metrics_endpoints(&self) -> Vec<runway_api::metrics::TargetGroup> {
        self.metrics.clone()
    }

    fn domains(&self) -> runway_api::domains::DomainSettings {
        self.domains.clone()
    }

    fn edge_changed(&self) {
        for notify in &self.edge_changed {
            notify.notify_one();
        }
    }

    fn traffic(&self) -> Vec<runway_api::types::TrafficView> {
        self.controller
            .all_traffic()
            .iter()
            .map(|(service, env, t)| traffic_view(service, env, t))
            .collect()
    }

    fn source_claim(&self, service_id: i64, digest: &str) -> BoxFuture<'_, Result<bool, String>> {
        let digest = runway_oci::Digest::parse(digest);
        Box::pin(async move {
            let digest = digest.map_err(|e| e.to_string())?;
            let sources = self.sources.clone();
            tokio::task::spawn_blocking(move || sources.claim(service_id, &digest))
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn source_share(&self, from: i64, to: i64, digest: &str) -> BoxFuture<'_, Result<(), String>> {
        let digest = runway_oci::Digest::parse(digest);
        Box::pin(async move {
            let digest = digest.map_err(|e| e.to_string())?;
            let sources = self.sources.clone();
            tokio::task::spawn_blocking(move || sources.share(from, to, &digest))
                .await
                .map_err(|e| e.to_string())?
                .map(drop)
                .map_err(|e| runway_log::chain(&e))
        })
    }

    fn source_put(
        &self,
        service_id: i64,
        digest: &str,
        max: u64,
        chunks: mpsc::Receiver<Result<bytes::Bytes, String>>,
    ) -> BoxFuture<'_, Result<(), SourceRefused>> {
        let digest = runway_oci::Digest::parse(digest);
        Box::pin(async move {
            let digest = digest.map_err(|e| SourceRefused::Invalid(e.to_string()))?;
            let sources = self.sources.clone();
            let reader = Chunks {
                rx: chunks,
                current: bytes::Bytes::new(),
            };
            let put =
                tokio::task::spawn_blocking(move || sources.put(service_id, &digest, reader, max))
                    .await
                    .map_err(|e| SourceRefused::Internal(e.to_string()))?;
            match put {
                Ok(_) => Ok(()),
                Err(SourceError::TooLarge(m)) => Err(SourceRefused::TooLarge(m)),
                Err(SourceError::Invalid(m)) => Err(SourceRefused::Invalid(m)),
                Err(SourceError::Full(e)) => {
                    tracing::warn!(error = %e, "a code snapshot was refused: the disk is full");
                    Err(SourceRefused::Full)
                }
                Err(e @ SourceError::Io { .. }) => {
                    Err(SourceRefused::Internal(runway_log::chain(&e)))
                }
            }
        })
    }

    fn resolve_image<'a>(
        &'a self,
        service: &'a str,
        reference: &'a str,
    ) -> BoxFuture<'a, Result<ResolvedImage, String>> {
        Box::pin(async move {
            if let Some(mirror) = &self.mirror {
                return mirror.mirror(service, reference).await;
            }
            let pinned = self
                .controller
                .driver()
                .resolve_image(reference)
                .await
                .map_err(|e| match e {
                    // The caller names the image already.
                    runway_driver::DriverError::Image { message, .. } => message,
                    other => other.to_string(),
                })?;
            Ok(ResolvedImage {
                pinned,
                mirror: None,
            })
        })
    }

    fn signatures_required(&self, service: &str, env: &str) -> Vec<String> {
        self.signatures.covering(service, env)
    }

    fn verify_image<'a>(
        &'a self,
        service: &'a str,
        env: &'a str,
        reference: &'a str,
    ) -> BoxFuture<'a, Result<Option<ImageSignature>, String>> {
        Box::pin(self.signatures.verify(service, env, reference))
    }

    fn process_image<'a>(
        &'a self,
        service: &'a str,
        service_id: i64,
        digest: &'a str,
        process: &'a runway_api::ProcessImage,
    ) -> BoxFuture<'a, Result<Option<String>, String>> {
        Box::pin(async move {
            let Some(mirror) = &self.mirror else {
                return Ok(None);
            };
            let digest = runway_oci::Digest::parse(digest).map_err(|e| e.to_string())?;
            let code = self.sources.path(service_id, &digest);
            mirror.process_image(service, &code, process).await
        })
    }

    fn url(&self, service: &str, env: &str) -> String {
        self.controller.url(service, env)
    }

    fn status(&self, service: &str, env: &str) -> BoxFuture<'_, StatusParts> {
        let (service, env) = (service.to_owned(), env.to_owned());
        Box::pin(async move {
            use runway_api::types::{
                Condition, InstanceView, RevisionStatus, RolloutView, RouteView, ScalingView,
            };
            use runway_reconciler::Condition as Planned;
            let controller = &self.controller;
            let mut warnings = Vec::new();
            let control_plane = self.leadership.as_ref().map(|(replica, leadership)| {
                runway_api::types::ControlPlaneView {
                    replica: replica.clone(),
                    leader: match &*leadership.borrow() {
                        Leadership::Leading { .. } => Some(replica.clone()),
                        Leadership::Following { leader } => leader.clone(),
                    },
                }
            });
            let instances = controller
                .instances(&service, &env)
                .await
                .unwrap_or_else(|e| {
                    warnings.push(format!("instances: {}", runway_log::chain(&e)));
                    Vec::new()
                })
                .into_iter()
                .map(|i| InstanceView {
                    id: i.id,
                    revision: i.revision,
                    phase: i.phase.as_str().to_owned(),
                    ready: i.ready,
                    port: i.port,
                    address: i.address.map(|a| a.to_string()),
                    restarts: i.restarts,
                    message: i.message,
                })
                .collect();
            let traffic = controller.traffic(&service, &env);
            StatusParts {
                url: controller.url(&service, &env),
                routes: controller
                    .routes(&service, &env)
                    .into_iter()
                    .map(|r| RouteView {
                        revision: r.revision,
                        weight: r.weight,
                    })
                    .collect(),
                revisions: controller
                    .revision_status(&service, &env)
                    .into_iter()
                    .map(|r| {
                        let (condition, reason) = match r.condition {
                            Planned::Progressing => (Condition::Progressing, None),
                            Planned::Ready => (Condition::Ready, None),
                            Planned::Failing { reason } => (Condition::Failing, Some(reason)),
                            Planned::TimedOut { reason } => (Condition::TimedOut, Some(reason)),
                        };
                        RevisionStatus {
                            traffic: traffic
                                .iter()
                                .find(|t| t.revision == r.revision)
                                .map(|t| traffic_view(&service, &env, t)),
                            revision: r.revision,
                            desired_instances: r.desired_instances,
                            ready: r.ready,
                            starting: r.starting,
                            failed: r.failed,
                            condition,
                            reason,
                        }
                    })
                    .collect(),
                instances,
                scaling: controller
                    .scaling(&service, &env)
                    .into_iter()
                    .map(|s| ScalingView {
                        revision: s.revision,
                        concurrency: s.concurrency,
                        last_decision: s.last_decision,
                        last_decision_at: s.last_decision_at_ms.and_then(rfc3339),
                        last_change: s.last_change,
                        last_change_at: s.last_change_at_ms.and_then(rfc3339),
                        last_change_event: s
                            .last_change_event
                            .and_then(|event| serde_json::to_value(event).ok()),
                        panicking: s.panicking,
                    })
                    .collect(),
                rollout: controller
                    .rollout(&service, &env)
                    .await
                    .unwrap_or_else(|e| {
                        warnings.push(format!("rollout: {}", runway_log::chain(&e)));
                        None
                    })
                    .map(|r| RolloutView {
                        deployment: r.deployment,
                        strategy: r.strategy,
                        phase: r.phase,
                        new_weight: r.new_weight,
                        step: r.step.and_then(|(at, _)| u32::try_from(at).ok()),
                        steps: r.step.and_then(|(_, of)| u32::try_from(of).ok()),
                        paused: r.paused,
                        message: r.message,
                        analysis: r.analysis.map(analysis_view),
                    }),
                warnings,
                control_plane,
            }
        })
    }

    fn logs(
        &self,
        service: &str,
        env: &str,
        instance: Option<&str>,
        lines: usize,
        previous: bool,
    ) -> BoxFuture<'_, Result<Vec<runway_api::types::LogLine>, String>> {
        let (service, env, instance) = (
            service.to_owned(),
            env.to_owned(),
            instance.map(str::to_owned),
        );
        Box::pin(async move {
            let lines = self
                .controller
                .logs(&service, &env, instance.as_deref(), lines, previous)
                .await
                .map_err(|e| runway_log::chain(&e))?;
            Ok(lines.into_iter().map(api_log_line).collect())
        })
    }

    fn follow_logs(
        &self,
        service: &str,
        env: &str,
        instance: Option<&str>,
        lines: usize,
    ) -> BoxFuture<'_, Result<mpsc::Receiver<runway_api::types::LogLine>, String>> {
        let (service, env, instance) = (
            service.to_owned(),
            env.to_owned(),
            instance.map(str::to_owned),
        );
        Box::pin(async move {
            let mut followed = self
                .controller
                .follow_logs(&service, &env, instance.as_deref(), lines)
                .await
                .map_err(|e| runway_log::chain(&e))?;
            let (sender, receiver) = mpsc::channel(256);
            tokio::spawn(async move {
                while let Some(line) = followed.recv().await {
                    if sender.send(api_log_line(line)).await.is_err() {
                        return;
                    }
                }
            });
            Ok(receiver)
        })
    }

    fn wake(&self) {
        self.controller.wake();
    }
}

/// Unix milliseconds as RFC 3339, when in range.
fn rfc3339(ms: u64) -> Option<String> {
    let ms = i64::try_from(ms).ok()?;
    runway_store::Timestamp::from_unix_millis(ms).map(|t| t.to_string())
}
