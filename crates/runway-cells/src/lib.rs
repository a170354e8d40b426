//! Cell routing for CI runners, as GitLab's HTTP router does it: rules in its format
//! ([`Rules`]) decide what a request is classified by (a routable token's cell claim, a
//! session cookie's prefix), and the topology ([`StaticTopology`]) says where that cell is.
//! A request no rule places, or whose classification finds no cell, goes to the legacy cell.
//!
//! The router (`runway router`) proxies on the ingress's core; this crate only decides.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

mod body;
mod decide;
mod rules;
mod template;
mod topology;

pub use decide::{Action, Decision, Passed, RequestView};

/// How much of a body a `json-body` rule reads: an older runner's `token` comes first in
/// its small JSON body; the rest streams on unread.
pub const BODY_PREFIX_BYTES: usize = 16 * 1024;
pub use rules::{ClassifyType, FileError, MatchType, Rule, Rules, TransformType};
pub use template::Template;
pub use topology::{Cell, ClassifyError, StaticTopology};

/// Where one request goes, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed<'a> {
    pub decision: Decision,
    pub cell: &'a Cell,
    /// Why it went to the legacy cell although a rule classified it.
    pub fell_back: Option<ClassifyError>,
}

impl StaticTopology {
    /// The cell for `decision`: the one its classification names, else the legacy cell.
    pub fn route(&self, decision: Decision) -> Option<Routed<'_>> {
        let (cell, fell_back) = match &decision.action {
            Action::Classify { kind, value } => match self.classify(*kind, value) {
                Ok(cell) => (cell, None),
                Err(error) => (self.legacy()?, Some(error)),
            },
            Action::Proxy => (self.legacy()?, None),
        };
        Some(Routed {
            decision,
            cell,
            fell_back,
        })
    }
}
