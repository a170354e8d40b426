//! `dryrun`: the plan of the deploy without it (`legacy`'s), and nothing started, routed or
//! stopped.
//!
//! How it goes: the crate's documentation, "The strategies".

use super::Kind;
use super::legacy::Legacy;
use crate::rollout::PlannedStep;

/// Compute the plan, change nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct DryRun;

impl Kind for DryRun {
    fn name(&self) -> &'static str {
        "dryrun"
    }

    /// No steps: nothing is rolled out.
    fn ladder(&self) -> Vec<u32> {
        Vec::new()
    }

    fn is_dry_run(&self) -> bool {
        true
    }

    /// What the deploy would do without `dryrun`.
    fn plan(&self) -> Vec<PlannedStep> {
        Legacy.plan()
    }
}
