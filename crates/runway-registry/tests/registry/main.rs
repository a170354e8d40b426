//! runway-registry's integration tests: the API driven in-process (`api`), garbage
//! collection and the bound on disk use (`collect`), hostile input (`hostile`), real clients
//! on loopback (`clients`: skopeo, helm, Runway's own puller) and the OCI distribution-spec
//! conformance suite (`conformance`).

#![allow(
    clippy::unwrap_used,
    clippy::print_stderr,
    unreachable_pub,
    reason = "tests: a failure panics, a skip is told to whoever runs them"
)]

mod api;
mod clients;
mod collect;
mod conformance;
mod hostile;
mod support;
