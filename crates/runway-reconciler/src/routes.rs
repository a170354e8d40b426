//! Which weights the ingress should have: the traffic-shifting rule.

use std::collections::BTreeMap;

use crate::model::RouteWeight;

/// Revision name to weight, positive weights only, ordered by name.
pub(crate) type Weights = BTreeMap<String, u32>;

/// What the route rule needs to know about one revision.
pub(crate) trait Readiness {
    /// Ready (non-draining) instances of the revision.
    fn ready(&self, revision: &str) -> u32;
    /// The revision's desired instance count (0 when not desired).
    fn desired_instances(&self, revision: &str) -> u32;
}

/// The weights the ingress should have (see the crate documentation for the rule).
pub(crate) fn target_routes(
    desired: &Weights,
    observed: &Weights,
    revisions: &(impl Readiness + ?Sized),
) -> Weights {
    if desired.is_empty() {
        // Decommissioned: serve nothing.
        return Weights::new();
    }
    let all_may_take = desired
        .iter()
        .all(|(revision, &weight)| may_take_weight(revision, weight, observed, revisions));
    if all_may_take {
        return desired.clone();
    }
    // Not yet: whoever serves now keeps serving.
    let holders = serving(observed, revisions);
    if !holders.is_empty() {
        return holders;
    }
    // Nothing routed serves: any desired revision that can serve is better than none.
    let servable_desired = serving(desired, revisions);
    if !servable_desired.is_empty() {
        return servable_desired;
    }
    // Nothing can serve: keep the routes and let the ingress hold requests.
    observed.clone()
}

/// A revision may keep or lose traffic while it has a ready instance, and gain traffic only
/// once all its desired instances are ready.
fn may_take_weight(
    revision: &str,
    weight: u32,
    observed: &Weights,
    revisions: &(impl Readiness + ?Sized),
) -> bool {
    let ready = revisions.ready(revision);
    let has_now = observed.get(revision).copied().unwrap_or(0);
    let fully_ready = ready >= revisions.desired_instances(revision).max(1);
    ready >= 1 && (fully_ready || weight <= has_now)
}

/// The revisions of `weights` with a ready instance, their weights scaled back to 100.
fn serving(weights: &Weights, revisions: &(impl Readiness + ?Sized)) -> Weights {
    let with_ready: Vec<(&str, u32)> = weights
        .iter()
        .filter(|(revision, _)| revisions.ready(revision) >= 1)
        .map(|(revision, &weight)| (revision.as_str(), weight))
        .collect();
    scale_to_100(&with_ready)
}

/// Weights scaled to sum to 100 (largest remainder, ties to the first name), zero weights
/// dropped. Empty when the weights sum to 0.
pub(crate) fn scale_to_100(weights: &[(&str, u32)]) -> Weights {
    let mut merged: BTreeMap<&str, u64> = BTreeMap::new();
    for &(revision, weight) in weights {
        *merged.entry(revision).or_default() += u64::from(weight);
    }
    let total: u64 = merged.values().sum();
    if total == 0 {
        return Weights::new();
    }
    let mut shares: Vec<(&str, u64, u64)> = merged
        .iter()
        .map(|(&revision, &weight)| (revision, weight * 100 / total, weight * 100 % total))
        .collect();
    let assigned: u64 = shares.iter().map(|&(_, share, _)| share).sum();
    let mut by_remainder: Vec<usize> = (0..shares.len()).collect();
    by_remainder.sort_by(|&a, &b| shares[b].2.cmp(&shares[a].2).then(a.cmp(&b)));
    for &index in by_remainder
        .iter()
        .take(usize::try_from(100 - assigned).unwrap_or(0))
    {
        shares[index].1 += 1;
    }
    shares
        .into_iter()
        .filter(|&(_, share, _)| share > 0)
        .map(|(revision, share, _)| (revision.to_owned(), u32::try_from(share).unwrap_or(100)))
        .collect()
}

/// The observed routes as [`Weights`]: repeated revisions summed, zero weights dropped.
pub(crate) fn from_route_weights(routes: &[RouteWeight]) -> Weights {
    let mut weights = Weights::new();
    for route in routes.iter().filter(|route| route.weight > 0) {
        *weights.entry(route.revision.clone()).or_default() += route.weight;
    }
    weights
}

pub(crate) fn to_route_weights(weights: &Weights) -> Vec<RouteWeight> {
    weights
        .iter()
        .map(|(revision, &weight)| RouteWeight::new(revision.clone(), weight))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(pairs: &[(&str, u32)]) -> Weights {
        pairs.iter().map(|&(r, w)| (r.to_owned(), w)).collect()
    }

    #[test]
    fn scaling_keeps_weights_that_sum_to_100() {
        assert_eq!(
            scale_to_100(&[("a", 90), ("b", 10)]),
            weights(&[("a", 90), ("b", 10)])
        );
    }

    #[test]
    fn scaling_shares_the_remainder_deterministically() {
        assert_eq!(
            scale_to_100(&[("a", 1), ("b", 1), ("c", 1)]),
            weights(&[("a", 34), ("b", 33), ("c", 33)])
        );
        assert_eq!(
            scale_to_100(&[("a", 30), ("b", 30)]),
            weights(&[("a", 50), ("b", 50)])
        );
    }

    #[test]
    fn scaling_nothing_gives_nothing() {
        assert!(scale_to_100(&[]).is_empty());
        assert!(scale_to_100(&[("a", 0)]).is_empty());
    }

    #[test]
    fn scaled_weights_always_sum_to_100() {
        for a in 0..40 {
            for b in 0..40 {
                let scaled = scale_to_100(&[("a", a), ("b", b), ("c", 7)]);
                assert_eq!(scaled.values().sum::<u32>(), 100, "{a} {b}");
            }
        }
    }
}
