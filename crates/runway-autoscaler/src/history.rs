//! The demand samples of one revision, and their time-weighted averages.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::Settings;

/// How many samples a [`History`] keeps at most by default: a 60 s window sampled ten times a
/// second, with room to spare.
pub const DEFAULT_CAPACITY: usize = 1_024;

/// The ingress's demand for one revision at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When the gauges were read, in milliseconds (the same clock as `now_ms`).
    pub at_ms: u64,
    /// In-flight + held + queued requests for the revision at that instant.
    pub concurrency: f64,
}

impl Sample {
    pub fn new(at_ms: u64, concurrency: f64) -> Self {
        Self { at_ms, concurrency }
    }
}

/// A sample [`History::push`] refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SampleError {
    #[error(
        "demand sample at {at_ms} ms has concurrency {concurrency}, expected a finite number of at least 0"
    )]
    Concurrency { at_ms: u64, concurrency: f64 },
    #[error("demand sample at {at_ms} ms is older than the latest, at {latest_ms} ms")]
    OutOfOrder { at_ms: u64, latest_ms: u64 },
}

/// The samples of one revision covering at least the stable window: a bounded ring, in time
/// order, pruned by time as samples arrive.
///
/// A sample read at `t` stands for the time since the previous sample (the gauge's value
/// then is the best knowledge of that interval), and the latest sample also stands for the
/// time from it until now. Averages are over time, not over samples, so a burst of samples
/// does not weigh more than a quiet second.
///
/// Serialisable to show; not stored (a new one fills within a stable window), so not
/// deserialisable.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct History {
    window_ms: u64,
    capacity: usize,
    samples: VecDeque<Sample>,
}

/// What the samples say at one instant: the figures a decision reads from a [`History`]. A
/// [`crate::DecisionEvent`] carries it, so a decision can be replayed from its event.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Demand {
    /// The time-weighted average concurrency over the stable window.
    pub stable_average: f64,
    /// The time-weighted standard deviation of the concurrency over the stable window.
    pub stable_stddev: f64,
    /// The time-weighted average concurrency over the panic window.
    pub panic_average: f64,
    /// The latest sample's concurrency (0 without samples).
    pub latest: f64,
    /// The last time the samples show demand above 0: `now_ms` when the latest sample is
    /// above 0, else the time of the latest sample above 0 (its demand ended before the next
    /// sample).
    pub last_nonzero_ms: Option<u64>,
    /// How much of the stable window the samples cover (less after a start or a gap).
    pub stable_covered_ms: u64,
    /// How much of the panic window the samples cover.
    pub panic_covered_ms: u64,
}

impl Demand {
    /// Whether any figure shows requests: averages or the latest sample above 0.
    pub fn any(&self) -> bool {
        self.latest > 0.0 || self.stable_average > 0.0 || self.panic_average > 0.0
    }
}

/// A time-weighted average over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Average {
    mean: f64,
    stddev: f64,
    covered_ms: u64,
}

impl History {
    /// A history keeping `window_ms` (the stable window) with [`DEFAULT_CAPACITY`].
    pub fn new(window_ms: u64) -> Self {
        Self::with_capacity(window_ms, DEFAULT_CAPACITY)
    }

    /// A history for these settings' stable window.
    pub fn for_settings(settings: &Settings) -> Self {
        Self::new(settings.stable_window_ms)
    }

    /// A history keeping `window_ms`, and at most `capacity` samples (at least 2): when full,
    /// the oldest sample goes, and the averages cover less than the window.
    pub fn with_capacity(window_ms: u64, capacity: usize) -> Self {
        let capacity = capacity.max(2);
        Self {
            window_ms,
            capacity,
            samples: VecDeque::with_capacity(capacity.min(DEFAULT_CAPACITY)),
        }
    }

    /// Adds a sample. A sample at the same time as the latest replaces it; an older one, or
    /// one whose concurrency is negative or not finite, is refused. Samples older than the
    /// window before this one are dropped, keeping the one at or before its start.
    pub fn push(&mut self, sample: Sample) -> Result<(), SampleError> {
        if !sample.concurrency.is_finite() || sample.concurrency < 0.0 {
            return Err(SampleError::Concurrency {
                at_ms: sample.at_ms,
                concurrency: sample.concurrency,
            });
        }
        if let Some(latest) = self.samples.back_mut() {
            if sample.at_ms < latest.at_ms {
                return Err(SampleError::OutOfOrder {
                    at_ms: sample.at_ms,
                    latest_ms: latest.at_ms,
                });
            }
            if sample.at_ms == latest.at_ms {
                *latest = sample;
                return Ok(());
            }
        }
        if self.samples.len() >= self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
        let start = sample.at_ms.saturating_sub(self.window_ms);
        while self.samples.len() >= 2 && self.samples.get(1).is_some_and(|s| s.at_ms <= start) {
            self.samples.pop_front();
        }
        Ok(())
    }

    /// The samples kept, oldest first.
    pub fn samples(&self) -> impl ExactSizeIterator<Item = &Sample> {
        self.samples.iter()
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The time-weighted average concurrency over `window_ms` up to `now_ms` (0 without
    /// samples). Samples after `now_ms` are ignored.
    pub fn average(&self, now_ms: u64, window_ms: u64) -> f64 {
        self.window(now_ms, window_ms).mean
    }

    /// The figures a decision at `now_ms` reads, for these settings' windows.
    pub fn demand(&self, settings: &Settings, now_ms: u64) -> Demand {
        let stable = self.window(now_ms, settings.stable_window_ms);
        let panic = self.window(now_ms, settings.panic_window_ms);
        let mut latest = None;
        let mut last_nonzero_ms = None;
        for (i, sample) in self.until(now_ms).enumerate() {
            latest = Some(sample);
            if sample.concurrency > 0.0 {
                last_nonzero_ms = Some(i);
            }
        }
        let count = self.until(now_ms).count();
        let last_nonzero_ms = last_nonzero_ms.and_then(|i| {
            if i + 1 == count {
                Some(now_ms)
            } else {
                self.samples.get(i).map(|s| s.at_ms)
            }
        });
        Demand {
            stable_average: stable.mean,
            stable_stddev: stable.stddev,
            panic_average: panic.mean,
            latest: latest.map_or(0.0, |s| s.concurrency),
            last_nonzero_ms,
            stable_covered_ms: stable.covered_ms,
            panic_covered_ms: panic.covered_ms,
        }
    }

    fn until(&self, now_ms: u64) -> impl Iterator<Item = &Sample> {
        self.samples.iter().take_while(move |s| s.at_ms <= now_ms)
    }

    /// The pieces of constant demand within (`from`, `now_ms`]: each sample covers the time
    /// since the previous one, the latest also the time until now.
    fn pieces(&self, from: u64, now_ms: u64) -> impl Iterator<Item = (f64, f64)> {
        let samples: Vec<&Sample> = self.until(now_ms).collect();
        let mut pieces = Vec::with_capacity(samples.len());
        for pair in samples.windows(2) {
            if let [previous, sample] = pair {
                let start = previous.at_ms.max(from);
                let end = sample.at_ms.min(now_ms);
                if end > start {
                    pieces.push((sample.concurrency, (end - start) as f64));
                }
            }
        }
        if let Some(latest) = samples.last() {
            let start = latest.at_ms.max(from);
            if now_ms > start {
                pieces.push((latest.concurrency, (now_ms - start) as f64));
            }
        }
        pieces.into_iter()
    }

    fn window(&self, now_ms: u64, window_ms: u64) -> Average {
        let Some(first) = self.until(now_ms).next() else {
            return Average {
                mean: 0.0,
                stddev: 0.0,
                covered_ms: 0,
            };
        };
        let from = now_ms.saturating_sub(window_ms).max(first.at_ms);
        if from >= now_ms {
            // No time covered (a single sample at `now_ms`, or an empty window): the latest
            // reading is all there is.
            let latest = self.until(now_ms).last().map_or(0.0, |s| s.concurrency);
            return Average {
                mean: latest,
                stddev: 0.0,
                covered_ms: 0,
            };
        }
        let covered = (now_ms - from) as f64;
        let pieces: Vec<(f64, f64)> = self.pieces(from, now_ms).collect();
        let lowest = pieces.iter().map(|&(v, _)| v).fold(f64::INFINITY, f64::min);
        let highest = pieces
            .iter()
            .map(|&(v, _)| v)
            .fold(f64::NEG_INFINITY, f64::max);
        if lowest == highest {
            // Constant demand: exactly its value, with no rounding to push a ceiling over.
            return Average {
                mean: lowest,
                stddev: 0.0,
                covered_ms: now_ms - from,
            };
        }
        let mean = pieces.iter().map(|&(v, d)| v * d).sum::<f64>() / covered;
        let variance = pieces
            .iter()
            .map(|&(v, d)| (v - mean) * (v - mean) * d)
            .sum::<f64>()
            / covered;
        Average {
            mean,
            stddev: variance.max(0.0).sqrt(),
            covered_ms: now_ms - from,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn history(samples: &[(u64, f64)]) -> History {
        let mut history = History::new(60_000);
        for &(at, c) in samples {
            history.push(Sample::new(at, c)).unwrap();
        }
        history
    }

    #[test]
    fn empty_history_has_no_demand() {
        let h = History::new(60_000);
        assert_eq!(h.average(10_000, 60_000), 0.0);
        let d = h.demand(&Settings::default(), 10_000);
        assert!(!d.any());
        assert_eq!(d.last_nonzero_ms, None);
    }

    #[test]
    fn average_is_per_time_not_per_sample() {
        // 10 for 1 s read ten times, then 0 for 9 s read once: the time average is 1, the
        // per-sample average would be 10 × 10 / 11.
        let mut samples = vec![(0, 0.0)];
        for i in 1..=10 {
            samples.push((i * 100, 10.0));
        }
        samples.push((10_000, 0.0));
        let h = history(&samples);
        let average = h.average(10_000, 60_000);
        assert!((average - 1.0).abs() < 1e-9, "{average}");
    }

    #[test]
    fn latest_sample_holds_until_now() {
        let h = history(&[(0, 0.0), (1_000, 4.0)]);
        // (0, 1000] is 4, (1000, 3000] is 4 too.
        assert!((h.average(3_000, 60_000) - 4.0).abs() < 1e-9);
        let h = history(&[(0, 4.0), (1_000, 0.0)]);
        // The first sample covers nothing before it; (0, 1000] is 0.
        assert_eq!(h.average(2_000, 60_000), 0.0);
    }

    #[test]
    fn window_cuts_older_demand() {
        let h = history(&[(0, 100.0), (10_000, 100.0), (20_000, 0.0), (26_000, 0.0)]);
        // Over the last 6 s: only the zero samples.
        assert_eq!(h.average(26_000, 6_000), 0.0);
        // Over 60 s from 26 s: (0, 10] 100, (10, 20] 0, (20, 26] 0 => 100 × 10 / 26.
        let average = h.average(26_000, 60_000);
        assert!((average - 1_000.0 / 26.0).abs() < 1e-9, "{average}");
    }

    #[test]
    fn push_prunes_by_time_and_keeps_the_boundary_sample() {
        let mut h = History::new(10_000);
        for t in 0..=30 {
            h.push(Sample::new(t * 1_000, 1.0)).unwrap();
        }
        let times: Vec<u64> = h.samples().map(|s| s.at_ms).collect();
        assert_eq!(times.first(), Some(&20_000));
        assert_eq!(times.last(), Some(&30_000));
        assert_eq!(
            h.demand(&Settings::default(), 30_000).stable_covered_ms,
            10_000
        );
    }

    #[test]
    fn capacity_bounds_the_ring() {
        let mut h = History::with_capacity(60_000, 5);
        for t in 0..100 {
            h.push(Sample::new(t * 10, 1.0)).unwrap();
        }
        assert_eq!(h.len(), 5);
    }

    #[test]
    fn push_refuses_bad_samples_and_replaces_same_time() {
        let mut h = history(&[(1_000, 1.0)]);
        assert!(matches!(
            h.push(Sample::new(500, 1.0)),
            Err(SampleError::OutOfOrder { .. })
        ));
        assert!(matches!(
            h.push(Sample::new(2_000, f64::NAN)),
            Err(SampleError::Concurrency { .. })
        ));
        assert!(matches!(
            h.push(Sample::new(2_000, -1.0)),
            Err(SampleError::Concurrency { .. })
        ));
        h.push(Sample::new(1_000, 3.0)).unwrap();
        assert_eq!(h.len(), 1);
        assert_eq!(h.samples().next().unwrap().concurrency, 3.0);
    }

    #[test]
    fn last_nonzero_is_now_while_demand_lasts() {
        let h = history(&[(0, 1.0), (1_000, 2.0)]);
        assert_eq!(
            h.demand(&Settings::default(), 5_000).last_nonzero_ms,
            Some(5_000)
        );
        let h = history(&[(0, 1.0), (1_000, 2.0), (2_000, 0.0)]);
        assert_eq!(
            h.demand(&Settings::default(), 5_000).last_nonzero_ms,
            Some(1_000)
        );
    }

    #[test]
    fn constant_demand_has_no_deviation() {
        let mut h = History::new(60_000);
        for t in 0..200 {
            h.push(Sample::new(t * 733, 12_345.678)).unwrap();
        }
        let d = h.demand(&Settings::default(), 200 * 733);
        assert_eq!(d.stable_stddev, 0.0);
    }

    #[test]
    fn samples_after_now_are_ignored() {
        let h = history(&[(0, 1.0), (1_000, 1.0), (5_000, 100.0)]);
        assert!((h.average(2_000, 60_000) - 1.0).abs() < 1e-9);
    }
}
