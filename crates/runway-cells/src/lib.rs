//! Cell routing for CI runners, as GitLab's HTTP router does it: rules in its format
//! ([`Rules`]) decide what a request is classified by (a routable token's cell claim, a
//! session cookie's prefix), and the topology ([`StaticTopology`]) says where that cell is.
//! A request no rule places, or whose classification finds no cell, goes to the legacy cell.
//!
//! The router (`runway router`) proxies on the ingress's core; this crate only decides.
//!
//! # Files
//!
//! - `rules.rs`: GitLab's HTTP router rules read unchanged (JSON or YAML, `regexValue`/`name` and
//!   the older `regex_value`/`regex_name`, one rule or a list), checked at load (unknown fields,
//!   regular expressions, `${...}` references to captures and transform outputs, inputs per
//!   transform) with file, line and key path. `template.rs`: those `${...}` templates.
//! - `decide.rs`: a request (headers, cookies, path, and Runway's opt-in `json-body` match on a
//!   body's first bytes) against the rules: first match wins, a rule whose transform or
//!   validation fails passes to the next, and `explain` says why each earlier rule passed.
//!   `body.rs`: the `json-body` reader.
//! - `topology.rs`: the static topology (`cells`, `legacy_cell`) and what a classification
//!   (`CELL_ID`, `SESSION_PREFIX`, `FIRST_CELL`) finds, else the legacy cell.
//!
//! As GitLab's router, a rule reads a token's payload, not its checksum: the cell checks the
//! token. A `json-body` match takes a top-level field of an object whole within the first 16 KiB,
//! its last value when given twice (as the cell's parser reads it), so the router never routes by
//! one token while the cell authenticates another.

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
