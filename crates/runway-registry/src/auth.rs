//! Who may do what: the [`Authorizer`] the caller supplies is asked before every request is
//! served, with the repository and whether the request reads ([`Access::Pull`]) or writes
//! ([`Access::Push`]).

use std::future::Future;

/// What a request does to a repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads: `GET` and `HEAD` of manifests, blobs, tags and referrers; the source of a
    /// cross-repository mount.
    Pull,
    /// Writes: uploads, manifest `PUT`, deletes.
    Push,
}

/// Why a request is not served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No credentials, or wrong ones: `401` with `WWW-Authenticate: Basic realm="runway"`.
    Unauthenticated,
    /// Known caller, not allowed this: `403` with this message.
    Denied(String),
}

/// Decides whether a request may go on.
pub trait Authorizer: Send + Sync + 'static {
    /// `repository` is `None` for `GET /v2/` (is the caller authenticated at all) and for a
    /// request whose repository name is invalid (answered `NAME_INVALID` when authenticated).
    fn authorize(
        &self,
        headers: &http::HeaderMap,
        repository: Option<&str>,
        access: Access,
    ) -> impl Future<Output = Result<(), Refusal>> + Send;
}
