//! The cells: which exist, where each is, which is the legacy cell that takes what no rule
//! places. A static file here; GitLab's topology service answers the same questions over HTTP.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::rules::{ClassifyType, FileError, parse, read};

/// One cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cell {
    /// Its id: `c` in a routable token, `CELL_ID`'s value.
    pub id: u64,
    /// Where its requests go: `host:port`, or `http://host:port`.
    pub address: String,
    /// The prefix of its session cookies (`cell-1`), `SESSION_PREFIX`'s value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_prefix: Option<String>,
}

/// A topology file: `cells: [{id, address, session_prefix}]`, `legacy_cell: ID`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticTopology {
    pub cells: Vec<Cell>,
    /// The cell that takes what no rule places, and what a classification finds no cell for.
    pub legacy_cell: u64,
}

/// Why a classification found no cell.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassifyError {
    #[error("no cell {kind} `{value}`")]
    NotFound { kind: &'static str, value: String },
    #[error("the topology service: {0}")]
    Service(String),
}

impl StaticTopology {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Self, FileError> {
        Self::parse(path, &read(path)?)
    }

    /// Parses and checks a topology as read from `path`: ids and session prefixes unique, the
    /// legacy cell among the cells.
    pub fn parse(path: &Path, text: &str) -> Result<Self, FileError> {
        let topology: Self = parse(path, text)?;
        let invalid = |key: String, message: String| FileError::Invalid {
            path: path.display().to_string(),
            line: None,
            column: None,
            key,
            message,
        };
        for (index, cell) in topology.cells.iter().enumerate() {
            let earlier = &topology.cells[..index];
            if earlier.iter().any(|c| c.id == cell.id) {
                return Err(invalid(
                    format!("cells[{index}].id"),
                    format!("cell {} twice", cell.id),
                ));
            }
            if let Some(prefix) = &cell.session_prefix
                && earlier
                    .iter()
                    .any(|c| c.session_prefix.as_ref() == Some(prefix))
            {
                return Err(invalid(
                    format!("cells[{index}].session_prefix"),
                    format!("`{prefix}` is another cell's too"),
                ));
            }
            if cell.address.trim().is_empty() {
                return Err(invalid(
                    format!("cells[{index}].address"),
                    "empty".to_owned(),
                ));
            }
        }
        if topology.cell(topology.legacy_cell).is_none() {
            return Err(invalid(
                "legacy_cell".to_owned(),
                format!("no cell {} among the cells", topology.legacy_cell),
            ));
        }
        Ok(topology)
    }

    pub fn cell(&self, id: u64) -> Option<&Cell> {
        self.cells.iter().find(|cell| cell.id == id)
    }

    /// The legacy cell (checked to exist when the file was read).
    pub fn legacy(&self) -> Option<&Cell> {
        self.cell(self.legacy_cell)
    }

    /// The cell a classification names.
    pub fn classify(&self, kind: ClassifyType, value: &str) -> Result<&Cell, ClassifyError> {
        let found = match kind {
            ClassifyType::CellId => value.parse::<u64>().ok().and_then(|id| self.cell(id)),
            ClassifyType::SessionPrefix => self
                .cells
                .iter()
                .find(|cell| cell.session_prefix.as_deref() == Some(value)),
            ClassifyType::FirstCell => self.cells.first(),
        };
        found.ok_or_else(|| ClassifyError::NotFound {
            kind: kind.as_str(),
            value: value.chars().take(64).collect(),
        })
    }
}
