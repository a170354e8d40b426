//! `expedited`: straight to 100 % once ready; on one machine, the same as `legacy`.
//!
//! How it goes: the crate's documentation, "The strategies".

use super::Kind;

/// Straight to 100 % once ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Expedited;

impl Kind for Expedited {
    fn name(&self) -> &'static str {
        "expedited"
    }
}
