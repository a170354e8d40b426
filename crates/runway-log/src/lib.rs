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
//! Either goes to stderr, filtered as `RUNWAY_LOG` says, else `RUST_LOG` (`info` when neither
//! is set; the syntax is `tracing-subscriber`'s `EnvFilter`: `runway_control=debug,info`).
//! `RUNWAY_LOG` comes first because `RUST_LOG` often belongs to another program (the
//! wrapper's child inherits it). A filter that does not parse is reported and `info` used:
//! a log setting never stops a command.
//!
//! `init` is called by each binary's entry: `runway`'s `main` for most commands,
//! `runway-ingress`'s `daemon::main`, the wrapper's `run_blocking`, the supervisor's `main`.
//! `chain` writes an error with its sources, each said once (a message ending with its source's
//! text does not get it again). `init` sets `log_internal_errors(false)`:
//! tracing-subscriber otherwise reports a failed write with `eprintln!`, which panics when stderr
//! (a file on a full disk) refuses it too.
//! Tests and test support (`runway-oci`'s and `runway-ssh`'s `testing.rs`, `kube-cluster`) allow
//! `clippy::print_stderr` for one thing only: telling whoever runs the tests why one is skipped.

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

/// Sends this process's events to stderr in `format`, filtered by `RUNWAY_LOG`, else
/// `RUST_LOG` (default `info`; one that does not parse is warned about, and `info` used). A
/// second call (another subscriber already set, as in tests) changes nothing.
pub fn init(format: LogFormat) {
    let mut refused = None;
    let filter = ["RUNWAY_LOG", "RUST_LOG"]
        .iter()
        .find_map(|name| {
            let text = std::env::var(name).ok().filter(|t| !t.trim().is_empty())?;
            Some(EnvFilter::try_new(&text).unwrap_or_else(|e| {
                refused = Some(format!(
                    "{name}={text:?} is not a log filter ({e}); using info"
                ));
                EnvFilter::new("info")
            }))
        })
        .unwrap_or_else(|| EnvFilter::new("info"));
    // A log line that cannot be written (stderr is a file on a full disk, say) is lost, and
    // nothing more: by default the subscriber reports it with `eprintln!`, which panics when
    // stderr refuses it too, in whichever task logged. A supervisor's log writer died so, and
    // with it every pipe its instance printed to.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .log_internal_errors(false);
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
    if let Some(refused) = refused {
        tracing::warn!("{refused}");
    }
}

/// `error` and its sources, `: `-joined, each said once: a cause whose text the message
/// already holds (a library's `"error sending request for url (…): {source}"`) is not said
/// again. The one way Runway prints an error with its causes.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
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
