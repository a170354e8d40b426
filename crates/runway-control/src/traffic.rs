//! The last minutes of each routed revision's traffic, for `runway status` and `runway top`
//! (`GET /v1/traffic`): the ingress's counters read every [`SAMPLE_EVERY`] and kept [`KEPT`],
//! so the request rate, the 5xx ratio and the p99 over that span are the difference of two
//! readings (as Prometheus's `rate()` is), with no series database.
//!
//! The readings are taken on the autoscaler's turns, while this replica may act, and kept in
//! its memory: a replica that does not lead, or one with autoscaling off
//! (`autoscale_interval_ms: 0`), has no figures.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use runway_driver::Driver;
use runway_reconciler::RouteWeight;
use runway_rollout::Window;

use crate::controller::Controller;

/// How often the counters are read.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// How far back the figures reach.
pub(crate) const KEPT: Duration = Duration::from_secs(300);

/// The readings of every routed revision, by service, environment and revision.
#[derive(Debug, Default)]
pub(crate) struct Samples {
    last: Option<Instant>,
    readings: HashMap<(String, String, String), VecDeque<(Instant, Window)>>,
}

/// One revision's traffic over the last minutes.
#[derive(Debug, Clone, PartialEq)]
pub struct RevisionTraffic {
    pub revision: String,
    /// The span the figures cover, in seconds (up to `KEPT`, 5 minutes; shorter for a new revision).
    pub window_seconds: f64,
    pub requests_per_second: f64,
    /// 5xx responses over all, from 0 to 1.
    pub error_ratio: f64,
    /// `None` with no request in the span.
    pub p99_seconds: Option<f64>,
}

impl<D: Driver> Controller<D> {
    /// The service, environment and name of each revision in the routes the API shows (on the
    /// status board) that `keep` keeps.
    fn routed(&self, keep: impl Fn(&RouteWeight) -> bool) -> Vec<(String, String, String)> {
        self.status.read(|board| {
            board
                .iter()
                .flat_map(|((service, env), status)| {
                    status
                        .routes
                        .iter()
                        .filter(|route| keep(route))
                        .map(|route| (service.clone(), env.clone(), route.revision.clone()))
                })
                .collect()
        })
    }

    /// Reads every routed revision's counters, at most every [`SAMPLE_EVERY`]; readings older
    /// than [`KEPT`] (but the one just before, the span's start) and revisions no longer
    /// routed are dropped.
    pub(crate) fn sample_traffic(&self) {
        let now = Instant::now();
        let routed = self.routed(|_| true);
        let mut samples = self.traffic_samples();
        if samples.last.is_some_and(|last| now - last < SAMPLE_EVERY) {
            return;
        }
        samples.last = Some(now);
        samples.readings.retain(|key, _| routed.contains(key));
        for key in routed {
            let Some(stats) = self.dataplane.revision_stats(&key.0, &key.1, &key.2) else {
                continue;
            };
            let readings = samples.readings.entry(key).or_default();
            readings.push_back((
                now,
                Window {
                    requests: stats.requests,
                    errors_5xx: stats.errors_5xx,
                    latency_buckets: stats.latency_buckets,
                    ..Window::default()
                },
            ));
            while readings.len() > 2 && now - readings[1].0 > KEPT {
                readings.pop_front();
            }
        }
    }

    /// Each routed revision's traffic over the last minutes, by revision name; none before
    /// two readings.
    pub fn traffic(&self, service: &str, env: &str) -> Vec<RevisionTraffic> {
        self.all_traffic()
            .into_iter()
            .filter(|(s, e, _)| s == service && e == env)
            .map(|(_, _, traffic)| traffic)
            .collect()
    }

    /// Every routed revision's traffic over the last minutes, with its service and
    /// environment, in their order.
    pub fn all_traffic(&self) -> Vec<(String, String, RevisionTraffic)> {
        let samples = self.traffic_samples();
        let mut out: Vec<(String, String, RevisionTraffic)> = samples
            .readings
            .iter()
            .filter_map(|(key, readings)| {
                let (first, last) = (readings.front()?, readings.back()?);
                let seconds = (last.0 - first.0).as_secs_f64();
                if seconds <= 0.0 {
                    return None;
                }
                // Each pair of readings on its own, a counter that went down taken as reset
                // (an ingress restarted), as Prometheus's increase() does; summed.
                let mut window = Window::default();
                for (earlier, later) in readings.iter().zip(readings.iter().skip(1)) {
                    let step = Window::delta(&later.1, &earlier.1);
                    window.requests += step.requests;
                    window.errors_5xx += step.errors_5xx;
                    for (bound, count) in step.latency_buckets {
                        match window
                            .latency_buckets
                            .iter_mut()
                            .find(|(b, _)| b.total_cmp(&bound).is_eq())
                        {
                            Some((_, total)) => *total += count,
                            None => window.latency_buckets.push((bound, count)),
                        }
                    }
                }
                #[allow(clippy::cast_precision_loss, reason = "a request count")]
                let requests_per_second = window.requests as f64 / seconds;
                Some((
                    key.0.clone(),
                    key.1.clone(),
                    RevisionTraffic {
                        revision: key.2.clone(),
                        window_seconds: seconds,
                        requests_per_second,
                        error_ratio: window.error_ratio(),
                        p99_seconds: window.p99_seconds(),
                    },
                ))
            })
            .collect();
        // A revision routed since the last reading (a deploy a moment ago) is listed too, with
        // no figures yet, rather than missing.
        let routed = self.routed(|route| route.weight > 0);
        for (service, env, revision) in routed {
            let known = out
                .iter()
                .any(|(s, e, t)| *s == service && *e == env && t.revision == revision);
            if !known {
                out.push((
                    service,
                    env,
                    RevisionTraffic {
                        revision,
                        window_seconds: 0.0,
                        requests_per_second: 0.0,
                        error_ratio: 0.0,
                        p99_seconds: None,
                    },
                ));
            }
        }
        out.sort_by(|a, b| (&a.0, &a.1, &a.2.revision).cmp(&(&b.0, &b.1, &b.2.revision)));
        out
    }
}
