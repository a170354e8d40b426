//! The controller's settings (`control` in `runway server`'s configuration): every wait it
//! makes has a bound named here.

use std::time::Duration;

use runway_reconciler::Policy;
use serde::{Deserialize, Serialize};

/// How the controller runs. Unknown keys are refused; every field has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ControllerConfig {
    /// The domain under which services are reachable: `{service}.{env}.{domain}`. Default
    /// `localhost`, whose subdomains resolve to loopback without DNS set-up.
    pub domain: String,
    /// The ingress's HTTPS port, for the URL shown to users. Default 8443.
    pub https_port: u16,
    /// Time between two reconciliations when nothing wakes the controller. Default 2 s.
    pub reconcile_interval_ms: u64,
    /// How many services (each in one environment) are reconciled at once, each on its own:
    /// one whose driver is slow (an image pull, a cluster's API) holds up none of the others.
    /// Default 16.
    pub reconcile_concurrency: usize,
    /// A deployment whose new instances are not all ready (and given their traffic) within
    /// this time of its creation fails, and the previous revision is restored. Default 120 s.
    pub deploy_timeout_ms: u64,
    /// How long a draining instance may finish its requests before it is stopped; the
    /// manifest's `stop_grace_period_seconds` when that is shorter. Default 30 s.
    pub drain_grace_ms: u64,
    /// The planner's bounds. Its `drain_grace_ms` is replaced by the one above (or the
    /// manifest's grace, when shorter).
    pub policy: Policy,
    /// How often the autoscaler samples each serving revision's demand and decides its
    /// instance count. Default 1 s; 0 turns autoscaling off (revisions keep the count they
    /// were deployed with).
    pub autoscale_interval_ms: u64,
    /// The autoscaler's windows, rates and utilisation (Knative's defaults). Each revision's
    /// `min_instances`, `max_instances` and concurrency come from its manifest instead.
    pub autoscaler: runway_autoscaler::Settings,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            domain: "localhost".to_owned(),
            https_port: 8443,
            reconcile_interval_ms: 2_000,
            reconcile_concurrency: 16,
            deploy_timeout_ms: 120_000,
            drain_grace_ms: 30_000,
            policy: Policy::default(),
            autoscale_interval_ms: 1_000,
            autoscaler: runway_autoscaler::Settings::default(),
        }
    }
}

impl ControllerConfig {
    /// [`ControllerConfig::reconcile_interval_ms`] as a duration (at least 1 ms).
    pub fn reconcile_interval(&self) -> Duration {
        Duration::from_millis(self.reconcile_interval_ms.max(1))
    }

    /// [`ControllerConfig::deploy_timeout_ms`] as a duration.
    pub fn deploy_timeout(&self) -> Duration {
        Duration::from_millis(self.deploy_timeout_ms)
    }

    /// The drain grace for a revision whose manifest allows `stop_grace_seconds`.
    pub fn drain_grace_for(&self, stop_grace_seconds: u32) -> u64 {
        self.drain_grace_ms
            .min(u64::from(stop_grace_seconds).saturating_mul(1000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_missing_keys_and_unknown_keys_are_refused() {
        let config: ControllerConfig =
            serde_json::from_str(r#"{"domain": "example.com"}"#).unwrap();
        assert_eq!(config.domain, "example.com");
        assert_eq!(config.reconcile_interval(), Duration::from_secs(2));
        assert_eq!(config.deploy_timeout(), Duration::from_secs(120));
        assert!(serde_json::from_str::<ControllerConfig>(r#"{"domian": "x"}"#).is_err());
    }

    #[test]
    fn the_manifest_grace_shortens_the_drain() {
        let config = ControllerConfig::default();
        assert_eq!(config.drain_grace_for(10), 10_000);
        assert_eq!(config.drain_grace_for(600), 30_000);
    }
}
