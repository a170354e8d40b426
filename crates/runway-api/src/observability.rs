//! The monitoring of every service the control plane serves, generated from the manifests of
//! the revisions serving (`runway-render`'s `observability`): one Prometheus rule file for all
//! (recording rules and burn-rate alerts, a group per service and environment) and a Grafana
//! dashboard per service. Served by the API (`GET /v1/observability/rules`, `GET
//! /v1/services/{service}/dashboard`) and written by `runway server` to
//! `observability.dir` as services change.

use std::collections::BTreeMap;

use runway_manifest::{Manifest, ServiceConfig, WorkloadKind};
use runway_render::observability::{ServiceSlo, dashboard, rules};
use runway_store::Store;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};

/// What is generated for the services serving now.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    /// The rule file.
    pub rules: String,
    /// Each service's dashboard (from its first environment's objectives), by name.
    pub dashboards: BTreeMap<String, Value>,
}

/// The objectives of every service and environment with a revision serving: its manifest's
/// `spec.workload.slo` with the defaults, runbooks at `{runbook_base}/{service}` unless the
/// manifest names one. Workers (nothing routed) are left out. `only`: one service's.
pub fn slos(
    store: &dyn Store,
    runbook_base: Option<&str>,
    only: Option<&str>,
) -> ApiResult<Vec<ServiceSlo>> {
    let mut slos = Vec::new();
    for desired in store.desired_list()? {
        if only.is_some_and(|service| service != desired.service) {
            continue;
        }
        let Some(top) = desired.revisions.iter().max_by_key(|r| r.weight) else {
            continue;
        };
        let revision = store.revision_get(&top.revision)?;
        let manifest: Manifest = serde_json::from_value(revision.manifest).map_err(|e| {
            ApiError::internal(format!("revision {}'s manifest: {e}", top.revision))
        })?;
        let config =
            ServiceConfig::from_manifest(&manifest, Some(&desired.env), &revision.env_vars);
        if config.kind == WorkloadKind::Worker {
            continue;
        }
        slos.push(
            ServiceSlo::new(&config, runbook_base)
                .map_err(|e| ApiError::internal(format!("{}: {e}", desired.service)))?,
        );
    }
    Ok(slos)
}

/// The rule file and dashboards of `slos`.
pub fn generate(slos: &[ServiceSlo]) -> ApiResult<Generated> {
    let rules = rules(slos).map_err(|e| ApiError::internal(e.to_string()))?;
    let mut dashboards = BTreeMap::new();
    for slo in slos {
        dashboards
            .entry(slo.service.clone())
            .or_insert_with(|| dashboard(slo));
    }
    Ok(Generated { rules, dashboards })
}
