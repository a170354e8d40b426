//! `legacy`, upstream's default: the rolling deploy, 100 % once the new revision is ready
//! (every answer of [`Kind`]'s defaults).
//!
//! How it goes: the crate's documentation, "The strategies".

use super::Kind;

/// The rolling deploy: the new revision takes all the traffic once it is fully ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Legacy;

impl Kind for Legacy {
    fn name(&self) -> &'static str {
        "legacy"
    }
}
