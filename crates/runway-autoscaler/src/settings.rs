//! The autoscaler's settings: Knative's defaults, and their validation.

use serde::{Deserialize, Serialize};

/// The most instances of one revision the platform runs, and what `max_instances: None`
/// means. A cap against runaway scaling (a bug, a flood) rather than a real bound: one
/// machine runs far fewer.
pub const PLATFORM_MAX_INSTANCES: u32 = 1_000;

/// The concurrency per instance when [`Settings::container_concurrency`] is 0 (unlimited):
/// Knative's `container-concurrency-target-default`.
pub const DEFAULT_CONCURRENCY: u32 = 100;

/// The most concurrent requests one instance may be given (Knative's and Cloud Run's limit).
pub const MAX_CONCURRENCY: u32 = 1_000;

/// The smallest target per instance, so a division by it is always defined (Knative's
/// `TargetMin`).
pub const MIN_TARGET: f64 = 0.01;

/// How one revision scales. Every field has Knative's default; `Settings::default()` is what
/// a manifest that says nothing gets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Never fewer instances than this. 0 allows scale to zero.
    pub min_instances: u32,
    /// Never more instances than this; `None` means [`PLATFORM_MAX_INSTANCES`].
    pub max_instances: Option<u32>,
    /// The most requests one instance serves at once (the manifest's
    /// `max_instance_request_concurrency`); 0 means unlimited, and then the target is
    /// computed from [`DEFAULT_CONCURRENCY`].
    pub container_concurrency: u32,
    /// The share of `container_concurrency` to aim for per instance, in (0, 1]. Default 0.7
    /// (Knative's `container-concurrency-target-percentage`).
    pub utilisation: f64,
    /// The window the stable average covers, and how long panic mode lasts after its last
    /// trigger. Default 60 s.
    pub stable_window_ms: u64,
    /// The window the panic average covers. Default 6 s (10 % of the stable window).
    pub panic_window_ms: u64,
    /// Panic when the panic window's demand, in instances, is at least this many times the
    /// ready instances. Default 2.0 (Knative's 200 %).
    pub panic_threshold: f64,
    /// One decision asks for at most `ceil(rate × ready)` instances. Default 1000.
    pub max_scale_up_rate: f64,
    /// One decision asks for at least `floor(ready / rate)` instances. Default 2.
    pub max_scale_down_rate: f64,
    /// After a whole stable window without traffic, how much longer to wait before going to
    /// zero, so the last request's instance is not stopped mid-flight. Default 30 s
    /// (Knative's `scale-to-zero-grace-period`).
    pub scale_to_zero_grace_ms: u64,
    /// Hysteresis against flapping, in standard deviations of the stable window's demand: a
    /// scale-down goes only as far as `ceil((average + margin × stddev) / target)`. Under
    /// steady demand the deviation is 0 and this is Knative's rule exactly; 0 turns it off.
    /// It never adds instances, it only keeps some a little longer. Default 1.0. Not in
    /// Knative.
    pub scale_down_margin: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            min_instances: 0,
            max_instances: None,
            container_concurrency: 0,
            utilisation: 0.7,
            stable_window_ms: 60_000,
            panic_window_ms: 6_000,
            panic_threshold: 2.0,
            max_scale_up_rate: 1_000.0,
            max_scale_down_rate: 2.0,
            scale_to_zero_grace_ms: 30_000,
            scale_down_margin: 1.0,
        }
    }
}

/// A setting out of its range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingsError {
    #[error("autoscaler setting `{field}` is {found}, expected {expected}")]
    Field {
        field: &'static str,
        expected: &'static str,
        found: String,
    },
    #[error(
        "autoscaler setting `min_instances` ({min}) is above `max_instances` ({max}), expected at most `max_instances`"
    )]
    MinAboveMax { min: u32, max: u32 },
}

impl Settings {
    /// Checks every field against the ranges Knative accepts (and the platform cap), naming
    /// the first that is out of range. [`crate::decide`] never panics on unchecked settings,
    /// but its result is only meaningful on checked ones.
    pub fn check(&self) -> Result<(), SettingsError> {
        fn field(
            field: &'static str,
            ok: bool,
            expected: &'static str,
            found: impl ToString,
        ) -> Result<(), SettingsError> {
            if ok {
                Ok(())
            } else {
                Err(SettingsError::Field {
                    field,
                    expected,
                    found: found.to_string(),
                })
            }
        }
        let cap_text = "at most 1000 (the platform's cap)";
        field(
            "min_instances",
            self.min_instances <= PLATFORM_MAX_INSTANCES,
            cap_text,
            self.min_instances,
        )?;
        if let Some(max) = self.max_instances {
            field(
                "max_instances",
                max >= 1,
                "at least 1 (leave it out for the platform's cap)",
                max,
            )?;
            field(
                "max_instances",
                max <= PLATFORM_MAX_INSTANCES,
                cap_text,
                max,
            )?;
            if self.min_instances > max {
                return Err(SettingsError::MinAboveMax {
                    min: self.min_instances,
                    max,
                });
            }
        }
        field(
            "container_concurrency",
            self.container_concurrency <= MAX_CONCURRENCY,
            "at most 1000 (0 for unlimited)",
            self.container_concurrency,
        )?;
        field(
            "utilisation",
            self.utilisation.is_finite() && self.utilisation > 0.0 && self.utilisation <= 1.0,
            "a fraction in (0, 1], such as 0.7",
            self.utilisation,
        )?;
        field(
            "stable_window_ms",
            (6_000..=3_600_000).contains(&self.stable_window_ms),
            "between 6000 (6 s) and 3600000 (1 h)",
            self.stable_window_ms,
        )?;
        field(
            "panic_window_ms",
            self.panic_window_ms >= 1 && self.panic_window_ms <= self.stable_window_ms,
            "at least 1 and at most `stable_window_ms`",
            self.panic_window_ms,
        )?;
        field(
            "panic_threshold",
            self.panic_threshold.is_finite() && (1.1..=10.0).contains(&self.panic_threshold),
            "between 1.1 and 10 (times the ready capacity)",
            self.panic_threshold,
        )?;
        field(
            "max_scale_up_rate",
            self.max_scale_up_rate.is_finite() && self.max_scale_up_rate > 1.0,
            "a finite number above 1",
            self.max_scale_up_rate,
        )?;
        field(
            "max_scale_down_rate",
            self.max_scale_down_rate.is_finite() && self.max_scale_down_rate > 1.0,
            "a finite number above 1",
            self.max_scale_down_rate,
        )?;
        field(
            "scale_to_zero_grace_ms",
            self.scale_to_zero_grace_ms <= 3_600_000,
            "at most 3600000 (1 h)",
            self.scale_to_zero_grace_ms,
        )?;
        field(
            "scale_down_margin",
            self.scale_down_margin.is_finite() && (0.0..=10.0).contains(&self.scale_down_margin),
            "between 0 and 10 (standard deviations)",
            self.scale_down_margin,
        )?;
        Ok(())
    }

    /// The concurrency one instance is given: `container_concurrency`, or
    /// [`DEFAULT_CONCURRENCY`] when that is 0.
    pub fn concurrency(&self) -> u32 {
        if self.container_concurrency == 0 {
            DEFAULT_CONCURRENCY
        } else {
            self.container_concurrency
        }
    }

    /// The concurrency to aim for per instance: `concurrency() × utilisation`, at least
    /// [`MIN_TARGET`].
    pub fn target(&self) -> f64 {
        let target = f64::from(self.concurrency()) * self.utilisation;
        if target.is_finite() && target > MIN_TARGET {
            target
        } else {
            MIN_TARGET
        }
    }

    /// The upper bound: `max_instances`, or [`PLATFORM_MAX_INSTANCES`].
    pub fn max(&self) -> u32 {
        self.max_instances.unwrap_or(PLATFORM_MAX_INSTANCES)
    }
}
