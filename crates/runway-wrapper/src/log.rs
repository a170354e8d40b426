//! The wrapper's own log lines, through `tracing`: on stderr, where the child's output goes
//! too, marked apart from it by their target (`runway_wrapper`), as upstream marks its own
//! with `[WRAPPER]`.

use std::fmt;

pub(crate) fn info(message: fmt::Arguments<'_>) {
    tracing::info!("{message}");
}

pub(crate) fn warn(message: fmt::Arguments<'_>) {
    tracing::warn!("{message}");
}

pub(crate) fn error(message: fmt::Arguments<'_>) {
    tracing::error!("{message}");
}
