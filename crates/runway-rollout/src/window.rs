//! What one revision did over a window of time, from the ingress's counters.

use serde::{Deserialize, Serialize};

/// One revision's requests, errors, latency and instance trouble, either as counters since
/// some start (what the ingress and the runtime expose) or over a window (their
/// [`delta`](Window::delta)).
///
/// `latency_buckets` is a Prometheus histogram: `(upper bound in seconds, cumulative count)`,
/// as the ingress's `runway_ingress_request_duration_seconds_bucket` series. The `+Inf`
/// bucket may be given (as `f64::INFINITY`) or left out, since `requests` is the total; JSON
/// cannot carry an infinity, so leaving it out is the portable form.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub requests: u64,
    /// Responses with a 5xx status, the ingress's own 502/503/504 included.
    pub errors_5xx: u64,
    pub latency_buckets: Vec<(f64, u64)>,
    pub readiness_failures: u32,
    pub restarts: u32,
}

impl Window {
    /// The window between two readings of the same counters, `earlier` then `later`.
    ///
    /// A counter that went down was reset (the ingress restarted, an instance was replaced):
    /// as Prometheus's `increase()` does, its later value is then taken as the increase.
    /// Requests, errors and the histogram are one family, reset together; readiness failures
    /// and restarts are judged each on its own. Buckets are matched by upper bound; a bucket
    /// the earlier reading lacks counts from zero.
    pub fn delta(later: &Window, earlier: &Window) -> Window {
        let earlier_bucket = |bound: f64| {
            earlier
                .latency_buckets
                .iter()
                .find(|(b, _)| b.total_cmp(&bound).is_eq())
                .map_or(0, |&(_, count)| count)
        };
        let reset = later.requests < earlier.requests
            || later.errors_5xx < earlier.errors_5xx
            || later
                .latency_buckets
                .iter()
                .any(|&(bound, count)| count < earlier_bucket(bound));
        let (requests, errors_5xx, latency_buckets) = if reset {
            (
                later.requests,
                later.errors_5xx,
                later.latency_buckets.clone(),
            )
        } else {
            (
                later.requests - earlier.requests,
                later.errors_5xx - earlier.errors_5xx,
                later
                    .latency_buckets
                    .iter()
                    .map(|&(bound, count)| (bound, count - earlier_bucket(bound)))
                    .collect(),
            )
        };
        let increase = |later: u32, earlier: u32| later.checked_sub(earlier).unwrap_or(later);
        Window {
            requests,
            errors_5xx,
            latency_buckets,
            readiness_failures: increase(later.readiness_failures, earlier.readiness_failures),
            restarts: increase(later.restarts, earlier.restarts),
        }
    }

    /// The share of requests answered with a 5xx, from 0 to 1; 0 when there were none.
    pub fn error_ratio(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.errors_5xx.min(self.requests) as f64 / self.requests as f64
        }
    }

    /// What the window shows, for a person: `512 requests, 0.2 % 5xx, p99 12 ms`.
    pub fn summary(&self) -> String {
        let p99 = self
            .p99_seconds()
            .map_or_else(|| "unknown".to_owned(), crate::analysis::seconds);
        format!(
            "{} requests, {} 5xx, p99 {p99}",
            self.requests,
            crate::analysis::percent(self.error_ratio())
        )
    }

    /// The 99th percentile of latency, in seconds.
    pub fn p99_seconds(&self) -> Option<f64> {
        self.quantile_seconds(0.99)
    }

    /// A quantile of latency, in seconds, as Prometheus's `histogram_quantile`: the bucket
    /// holding the quantile's rank is found, and the value interpolated linearly between its
    /// lower bound (the previous bucket's upper bound, or 0 for the first) and its upper
    /// bound. A rank in the `+Inf` bucket gives the highest finite bound (so the value is a
    /// lower bound on the truth). Counts that go down across buckets are raised to keep them
    /// cumulative. `None` when there is no finite bucket or no observation, or `q` is not
    /// within 0..=1.
    pub fn quantile_seconds(&self, q: f64) -> Option<f64> {
        if !(0.0..=1.0).contains(&q) {
            return None;
        }
        let mut buckets: Vec<(f64, u64)> = self
            .latency_buckets
            .iter()
            .copied()
            .filter(|(bound, _)| !bound.is_nan())
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut highest = 0;
        for bucket in &mut buckets {
            highest = highest.max(bucket.1);
            bucket.1 = highest;
        }
        let finite: Vec<(f64, u64)> = buckets
            .iter()
            .copied()
            .filter(|(bound, _)| bound.is_finite())
            .collect();
        let &(last_bound, last_count) = finite.last()?;
        let infinite = buckets
            .iter()
            .find(|(bound, _)| bound.is_infinite() && *bound > 0.0)
            .map_or(0, |&(_, count)| count);
        let total = self.requests.max(last_count).max(infinite);
        if total == 0 {
            return None;
        }
        let rank = q * total as f64;
        let mut lower_bound = 0.0;
        let mut lower_count = 0u64;
        for (index, &(bound, count)) in finite.iter().enumerate() {
            if count as f64 >= rank && count > 0 {
                if index == 0 && bound <= 0.0 {
                    return Some(bound);
                }
                let in_bucket = (count - lower_count) as f64;
                let into = rank - lower_count as f64;
                return Some(lower_bound + (bound - lower_bound) * (into / in_bucket));
            }
            lower_bound = bound;
            lower_count = count;
        }
        Some(last_bound)
    }
}
