//! runway-server's integration tests, in one binary. `driver.rs`: a driver of the test's own,
//! added as `docs/dev/adding-a-driver.md` says. The tests that drive a real `runway server`
//! need the `runway` binary and live in `crates/runway-cli/tests/`.

#![allow(clippy::unwrap_used, reason = "tests")]

mod driver;
