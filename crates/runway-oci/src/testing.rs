//! Test fixtures.
