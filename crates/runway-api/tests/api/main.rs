//! The API over real sockets on loopback, with a real `SqliteStore` in a temporary directory
//! and an in-memory `Platform`.

#![allow(clippy::unwrap_used, reason = "tests")]

mod access;
mod audit;
mod auth;
mod config;
mod domains;
mod flows;
mod identity;
mod maintenance;
mod observability;
mod oidc;
mod openapi_doc;
mod previews;
mod secrets;
mod session;
mod support;
mod vault;
