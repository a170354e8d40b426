//! The wrapper's own log lines, on stderr, marked apart from the child's output (which shares
//! the same stderr), as upstream marks its own with `[WRAPPER]`.

use std::fmt;

pub(crate) fn info(message: fmt::Arguments<'_>) {
    eprintln!("[runway wrapper] {message}");
}

pub(crate) fn warn(message: fmt::Arguments<'_>) {
    eprintln!("[runway wrapper] warning: {message}");
}

pub(crate) fn error(message: fmt::Arguments<'_>) {
    eprintln!("[runway wrapper] error: {message}");
}
