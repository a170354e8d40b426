//! runway-registry's integration tests: the API driven in-process (`api`), hostile input
//! (`hostile`), real clients on loopback (`clients`: skopeo, helm, Runway's own puller) and
//! the OCI distribution-spec conformance suite (`conformance`).

#![allow(
    clippy::unwrap_used,
    clippy::print_stderr,
    unreachable_pub,
    reason = "tests: a failure panics, a skip is told to whoever runs them"
)]

mod api;
mod clients;
mod conformance;
mod hostile;
mod support;
