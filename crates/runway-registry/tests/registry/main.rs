//! runway-registry's integration tests: the API driven in-process (`api`), hostile input
//! (`hostile`), and real clients on loopback (`clients`: skopeo, helm, Runway's own puller).

#![allow(
    clippy::unwrap_used,
    clippy::print_stderr,
    unreachable_pub,
    reason = "tests: a failure panics, a skip is told to whoever runs them"
)]

mod api;
mod clients;
mod hostile;
mod support;
