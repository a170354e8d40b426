//! The deployer's log: NDJSON on stderr, one JSON object a line, and nothing else on stderr.
//!
//! Every line has `time` (RFC 3339, UTC, milliseconds), `level` (`DEBUG`, `INFO`, `WARN`,
//! `ERROR`) and `msg`, the keys and level names of Go's `log/slog` JSON handler, which upstream's
//! deployer uses. Lines about one runner manager add `manager` (the key of its entry in
//! `grit_runner_managers`; upstream calls it `runner-manager-alias`). Other keys are details:
//! `error`, `wrapper_address`, `status`, `attempt`...
//!
//! A line is written with one `write` on a locked stderr, so concurrent tasks never interleave.
//!
//! `--log-format text` writes the same lines for a person (a CI job's log): `time LEVEL
//! manager: msg key=value...`.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use serde_json::{Map, Value};

static DEBUG: AtomicBool = AtomicBool::new(false);
static TEXT: AtomicBool = AtomicBool::new(false);

/// Turns debug lines on (`--debug`).
pub(crate) fn set_debug(on: bool) {
    DEBUG.store(on, Ordering::Relaxed);
}

/// Writes lines as text instead of JSON (`--log-format text`).
pub(crate) fn set_text(on: bool) {
    TEXT.store(on, Ordering::Relaxed);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Self::Debug => "DEBUG",
            Self::Info => "INFO",
            Self::Warn => "WARN",
            Self::Error => "ERROR",
        }
    }
}

/// One log line being built; [`Event::emit`] writes it.
#[derive(Debug)]
#[must_use = "a log event is written only by `emit`"]
pub(crate) struct Event {
    level: Level,
    fields: Map<String, Value>,
}

pub(crate) fn debug(msg: impl Into<String>) -> Event {
    Event::new(Level::Debug, msg.into())
}

pub(crate) fn info(msg: impl Into<String>) -> Event {
    Event::new(Level::Info, msg.into())
}

pub(crate) fn warn(msg: impl Into<String>) -> Event {
    Event::new(Level::Warn, msg.into())
}

pub(crate) fn error(msg: impl Into<String>) -> Event {
    Event::new(Level::Error, msg.into())
}

impl Event {
    fn new(level: Level, msg: String) -> Self {
        let mut fields = Map::new();
        let time = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        fields.insert("time".to_owned(), Value::String(time));
        fields.insert("level".to_owned(), Value::String(level.name().to_owned()));
        fields.insert("msg".to_owned(), Value::String(msg));
        Self { level, fields }
    }

    /// The runner manager the line is about.
    pub(crate) fn manager(self, name: &str) -> Self {
        self.field("manager", name)
    }

    pub(crate) fn field(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.fields.insert(key.to_owned(), value.into());
        self
    }

    /// An error with its whole chain of causes, `outer: inner: innermost`.
    pub(crate) fn error(self, error: &(dyn std::error::Error + 'static)) -> Self {
        self.field("error", runway_log::chain(error))
    }

    pub(crate) fn emit(self) {
        if self.level == Level::Debug && !DEBUG.load(Ordering::Relaxed) {
            return;
        }
        let mut line = if TEXT.load(Ordering::Relaxed) {
            text(&self.fields)
        } else {
            Value::Object(self.fields).to_string()
        };
        line.push('\n');
        // Nowhere to report a failed write to stderr.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// `time LEVEL manager: msg key=value...`: a value with a space, a quote or an `=` is quoted
/// as JSON writes strings.
fn text(fields: &Map<String, Value>) -> String {
    let get = |key: &str| fields.get(key).and_then(Value::as_str).unwrap_or_default();
    let mut line = format!("{} {:<5} ", get("time"), get("level"));
    if let Some(manager) = fields.get("manager").and_then(Value::as_str) {
        line.push_str(manager);
        line.push_str(": ");
    }
    line.push_str(get("msg"));
    for (key, value) in fields {
        if matches!(key.as_str(), "time" | "level" | "msg" | "manager") {
            continue;
        }
        let value = match value {
            Value::String(s) if !s.is_empty() && !s.contains([' ', '"', '=', '\n']) => s.clone(),
            other => other.to_string(),
        };
        line.push_str(&format!(" {key}={value}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_line_reads_as_the_json_says() {
        let fields = serde_json::json!({
            "time": "2026-11-29T12:00:00.000Z",
            "level": "INFO",
            "msg": "the runner process is healthy",
            "manager": "green-0",
            "attempt": 2,
            "error": "connection refused: no such file",
            "wrapper_address": "unix:///run/wrapper.sock",
        })
        .as_object()
        .cloned()
        .unwrap();
        assert_eq!(
            text(&fields),
            "2026-11-29T12:00:00.000Z INFO  green-0: the runner process is healthy attempt=2 \
             error=\"connection refused: no such file\" wrapper_address=unix:///run/wrapper.sock"
        );
    }
}
