//! Where Runway's processes send their `tracing` events.
//!
//! Library crates log with `tracing` and never print (`clippy::print_stderr` is denied in
//! each of them); a binary calls [`init`] once, with the format its `--log-format` names:
//!
//! - `text` (the default): one readable line an event, `2026-11-24T14:50:01.123456Z  INFO
//!   reconcile{service=hello env=dev}: the message field=value`;
//! - `json`: one JSON object a line, with `timestamp`, `level`, `target`, `fields` (the
//!   message among them) and `spans`, the spans it happened in, outermost first.
//!
//! Either goes to stderr, filtered as `RUST_LOG` says (`info` when unset; the syntax is
//! `tracing-subscriber`'s `EnvFilter`: `runway_control=debug,info`).

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

use std::error::Error;
use std::fmt;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One readable line an event.
    #[default]
    Text,
    /// One JSON object a line.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!(
                "{other:?} is not a log format: expected text or json"
            )),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Text => "text",
            Self::Json => "json",
        })
    }
}

/// Why [`init`] could not set the subscriber up.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// `RUST_LOG` is not a filter.
    #[error("RUST_LOG: {0}")]
    Filter(String),
}

/// Sends this process's events to stderr in `format`, filtered by `RUST_LOG` (default
/// `info`). A second call (another subscriber already set, as in tests) changes nothing.
///
/// # Errors
/// [`InitError::Filter`] when `RUST_LOG` is set but not a filter.
pub fn init(format: LogFormat) -> Result<(), InitError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(text) if !text.trim().is_empty() => {
            EnvFilter::try_new(&text).map_err(|e| InitError::Filter(e.to_string()))?
        }
        _ => EnvFilter::new("info"),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    // Err only when a subscriber is already set: that one stays.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(false)
            .with_current_span(false)
            .with_span_list(true)
            .try_init(),
    };
    Ok(())
}

/// `error` and its sources, `: `-joined, each said once: a message that already ends with
/// its source's text (thiserror's `"cannot read {path}: {source}"`) does not get it again.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read runway.yml: {source}")]
    struct Repeats {
        #[source]
        source: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("cannot start the ingress")]
    struct Wraps {
        #[source]
        source: Repeats,
    }

    #[test]
    fn a_chain_says_each_cause_once() {
        let error = Wraps {
            source: Repeats {
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            },
        };
        assert_eq!(
            chain(&error),
            "cannot start the ingress: cannot read runway.yml: no such file"
        );
    }

    #[test]
    fn formats_parse_and_name_themselves() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!(LogFormat::Text.to_string(), "text");
        assert!(
            "xml"
                .parse::<LogFormat>()
                .unwrap_err()
                .contains("text or json")
        );
    }
}
