//! Located findings: every error and warning names its file, line, column and field path.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

/// A position in a source file, 1-based.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Location {
    /// The file as the user named it (relative to the repository root where there is one).
    pub file: Arc<str>,
    /// Line, from 1.
    pub line: usize,
    /// Column in characters, from 1.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The manifest is invalid.
    Error,
    /// The manifest is valid but probably not what was meant.
    Warning,
}

/// One finding about a manifest.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// Where it is. Absent only when the file itself is missing.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
    /// Dotted path of the field at fault (`spec.scalability.min_instances`); empty for the
    /// document as a whole.
    pub path: String,
    /// What is wrong, lower-case, without a trailing period.
    pub message: String,
    /// What would have been valid there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    /// For an unknown key, the nearest valid one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
}

impl Diagnostic {
    /// An error at `location` about the field at `path`.
    pub fn error(
        location: Option<Location>,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            severity: Severity::Error,
            location,
            path: path.into(),
            message: message.into(),
            expected: None,
            suggestion: None,
        }
    }

    /// A warning at `location` about the field at `path`.
    pub fn warning(
        location: Option<Location>,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            severity: Severity::Warning,
            ..Self::error(location, path, message)
        }
    }

    /// Adds what would have been valid.
    #[must_use]
    pub fn expected(mut self, expected: impl Into<String>) -> Self {
        self.expected = Some(expected.into());
        self
    }

    /// Adds the nearest valid key.
    #[must_use]
    pub fn suggest(mut self, suggestion: Option<String>) -> Self {
        self.suggestion = suggestion;
        self
    }

    /// The message with what was expected or the suggestion: the finding without its location.
    pub fn headline(&self) -> String {
        // A suggestion says more than the list of every valid key; JSON output keeps both.
        match (&self.suggestion, &self.expected) {
            (Some(suggestion), _) => format!("{}; did you mean `{suggestion}`?", self.message),
            (None, Some(expected)) => format!("{} (expected {expected})", self.message),
            (None, None) => self.message.clone(),
        }
    }

    /// Whether this finding makes the manifest invalid.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{severity}: ")?;
        if let Some(location) = &self.location {
            write!(f, "{location}: ")?;
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.headline())
    }
}

/// Turns a JSON pointer (`/spec/regions/0`) into the dotted path users read
/// (`spec.regions[0]`).
pub fn dotted_path(pointer: &str) -> String {
    let mut out = String::new();
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
            out.push('[');
            out.push_str(&segment);
            out.push(']');
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&segment);
        }
    }
    out
}

/// Escapes one JSON-pointer segment.
pub(crate) fn pointer_segment(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted() {
        assert_eq!(dotted_path(""), "");
        assert_eq!(dotted_path("/spec/regions/0"), "spec.regions[0]");
        assert_eq!(
            dotted_path("/spec/workload/env/A~1B"),
            "spec.workload.env.A/B"
        );
    }
}
