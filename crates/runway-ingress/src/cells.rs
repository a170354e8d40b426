//! A cell-routed route (`runway router`): GitLab's HTTP router rules decide which cell a
//! request belongs to, and the request is proxied to that cell as to a revision's instance,
//! with the same streaming, bounds, access log and metrics. Each cell is a revision of the
//! route named `cell-<id>`, with one instance at the cell's address.

use std::collections::HashMap;
use std::sync::Arc;

use runway_cells::{Action, Decision, RequestView, Rules, StaticTopology};

use crate::config::{CellsConfig, InstanceConfig, Protocol, RevisionConfig};
use crate::table::Revision;

/// The revision standing for cell `id`.
pub(crate) fn revision_name(id: u64) -> String {
    format!("cell-{id}")
}

/// A cell-routed route's revisions: one per cell, weighing 0, its one instance the cell.
pub(crate) fn revisions(config: &CellsConfig) -> Vec<RevisionConfig> {
    config
        .topology
        .cells
        .iter()
        .filter_map(|cell| {
            Some(RevisionConfig {
                name: revision_name(cell.id),
                weight: 0,
                tag: None,
                average_start_seconds: None,
                protocol: Protocol::Http1,
                failing: false,
                instances: vec![InstanceConfig {
                    address: CellsConfig::address(&cell.address)?,
                    ready: true,
                    draining: false,
                    max_concurrency: 0,
                }],
            })
        })
        .collect()
}

/// The rules and topology of a cell-routed route, and its cells' revisions.
#[derive(Debug)]
pub struct CellRouting {
    rules: Rules,
    topology: StaticTopology,
    cells: HashMap<u64, Arc<Revision>>,
}

/// Where one request goes.
#[derive(Debug)]
pub(crate) struct Chosen {
    pub(crate) revision: Arc<Revision>,
    pub(crate) decision: Decision,
    pub(crate) cell: u64,
    /// Why a classified request went to the legacy cell.
    pub(crate) fell_back: Option<String>,
}

impl Chosen {
    /// The outcome for metrics: `classified` (to the cell its rule named), `fell_back` (a
    /// classification that found no cell), `proxied` (a `proxy` rule), `unmatched` (no rule).
    pub(crate) fn outcome(&self) -> &'static str {
        match (&self.decision.rule, &self.decision.action, &self.fell_back) {
            (None, _, _) => "unmatched",
            (Some(_), Action::Proxy, _) => "proxied",
            (Some(_), Action::Classify { .. }, Some(_)) => "fell_back",
            (Some(_), Action::Classify { .. }, None) => "classified",
        }
    }
}

impl CellRouting {
    /// From a validated config and the route's revisions (see [`revisions`]).
    pub(crate) fn new(config: &CellsConfig, revisions: &[(u32, Arc<Revision>)]) -> Option<Self> {
        let rules = config.parse_rules().ok()?;
        let cells = config
            .topology
            .cells
            .iter()
            .filter_map(|cell| {
                let name = revision_name(cell.id);
                let revision = revisions.iter().find(|(_, r)| r.name == name)?;
                Some((cell.id, Arc::clone(&revision.1)))
            })
            .collect();
        Some(Self {
            rules,
            topology: config.topology.clone(),
            cells,
        })
    }

    /// Whether a rule reads the body's first bytes.
    pub(crate) fn reads_body(&self) -> bool {
        self.rules.reads_body()
    }

    /// The cell for a request: the one its classification names, else the legacy cell.
    pub(crate) fn choose(&self, request: &RequestView<'_>) -> Option<Chosen> {
        let routed = self.topology.route(self.rules.decide(request))?;
        let cell = routed.cell.id;
        Some(Chosen {
            revision: Arc::clone(self.cells.get(&cell)?),
            fell_back: routed.fell_back.map(|e| e.to_string()),
            decision: routed.decision,
            cell,
        })
    }
}
