//! The store's integration tests: one binary (the durability test re-runs it as a child).
#![allow(clippy::unwrap_used, reason = "tests")]

mod api;
mod audit;
mod copy;
mod domains;
mod durability;
mod lease;
mod migrations;
mod postgres;
mod previews;
mod props;
mod rollout;
mod support;
mod teams;
