//! The crate's one error type, [`RegistryError`]. Each variant says what went wrong at this
//! layer; an I/O cause is its `source`, said once by whoever prints the chain.
//! `routes.rs` alone turns it into the distribution spec's status and error code.

use std::io;
use std::path::PathBuf;

use runway_oci::Digest;

/// What the registry refused or failed to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The repository name does not match the spec's grammar.
    #[error("repository name {name:?} is invalid: {reason}")]
    NameInvalid {
        /// The name as given (possibly hostile).
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// The repository has nothing in it.
    #[error("repository {repository} is unknown")]
    NameUnknown {
        /// The repository.
        repository: String,
    },
    /// The tag does not match the spec's grammar.
    #[error("tag {tag:?} is invalid: {reason}")]
    TagInvalid {
        /// The tag as given.
        tag: String,
        /// Why.
        reason: &'static str,
    },
    /// A digest that is not `sha256:<64 lowercase hex>`.
    #[error("digest {digest:?} is invalid or not sha256")]
    DigestInvalid {
        /// The digest as given.
        digest: String,
    },
    /// Content whose sha256 is not the digest it was sent under.
    #[error("content is {actual}, not {expected}")]
    DigestMismatch {
        /// The digest the client named.
        expected: Digest,
        /// The digest of what it sent.
        actual: Digest,
    },
    /// No blob by that digest is linked in the repository.
    #[error("blob {digest} is unknown in {repository}")]
    BlobUnknown {
        /// The repository.
        repository: String,
        /// The digest.
        digest: Digest,
    },
    /// No manifest by that tag or digest in the repository.
    #[error("manifest {reference} is unknown in {repository}")]
    ManifestUnknown {
        /// The repository.
        repository: String,
        /// The tag or digest.
        reference: String,
    },
    /// The manifest is not JSON, not of a known media type, or not well formed.
    #[error("manifest is invalid: {reason}")]
    ManifestInvalid {
        /// Why.
        reason: String,
    },
    /// The manifest refers to a blob (config or layer) not linked in the repository.
    #[error("manifest refers to blob {digest}, unknown in {repository}")]
    ManifestBlobUnknown {
        /// The repository.
        repository: String,
        /// The blob.
        digest: Digest,
    },
    /// The index refers to a manifest not in the repository.
    #[error("index refers to manifest {digest}, unknown in {repository}")]
    ManifestReferenceUnknown {
        /// The repository.
        repository: String,
        /// The manifest.
        digest: Digest,
    },
    /// The manifest is larger than [`crate::Limits::max_manifest_bytes`].
    #[error("manifest is larger than {limit} bytes")]
    ManifestTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The blob is larger than [`crate::Limits::max_blob_bytes`].
    #[error("blob is larger than {limit} bytes")]
    BlobTooLarge {
        /// The limit.
        limit: u64,
    },
    /// No upload session by that id in the repository (never started, finished, cancelled,
    /// or idle past [`crate::Limits::upload_idle_timeout`]).
    #[error("upload {id:?} is unknown")]
    UploadUnknown {
        /// The id as given.
        id: String,
    },
    /// A chunk that does not start where the upload is.
    #[error("upload is at byte {offset}, the chunk starts at {start}")]
    RangeInvalid {
        /// Bytes received so far.
        offset: u64,
        /// Where the chunk said it starts.
        start: u64,
    },
    /// Another request is writing to the same upload.
    #[error("upload is busy with another request")]
    UploadBusy {
        /// Bytes received so far, as far as is known.
        offset: u64,
    },
    /// A malformed upload request (a bad `Content-Range`, a missing digest).
    #[error("upload request is invalid: {reason}")]
    UploadInvalid {
        /// Why.
        reason: &'static str,
    },
    /// The body was shorter or longer than `Content-Length` or `Content-Range` said.
    #[error("body is {actual} bytes, {expected} were announced")]
    SizeInvalid {
        /// What the headers said.
        expected: u64,
        /// What came.
        actual: u64,
    },
    /// Reading the request body failed (the client went away).
    #[error("reading the request body")]
    Body {
        /// The cause.
        #[source]
        source: axum::Error,
    },
    /// More uploads in progress than [`crate::Limits::max_uploads`].
    #[error("more than {limit} uploads in progress")]
    TooManyUploads {
        /// The limit.
        limit: usize,
    },
    /// Storing this would take the content store (and the uploads in progress) past
    /// [`crate::Limits::max_total_bytes`]. Nothing was stored; deleting what is no longer
    /// needed and a [`crate::Registry::collect`] pass free space.
    #[error(
        "the registry is full: {used} of its {limit} bytes are in use, {needed} more were asked for"
    )]
    Full {
        /// Bytes in use (content and uploads in progress).
        used: u64,
        /// Bytes this write needed.
        needed: u64,
        /// [`crate::Limits::max_total_bytes`].
        limit: u64,
    },
    /// The storage failed (a full disk, permissions).
    #[error("{operation} {}", path.display())]
    Io {
        /// What was being done.
        operation: &'static str,
        /// Where.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl RegistryError {
    pub(crate) fn io(
        operation: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> RegistryError {
        let path = path.into();
        move |source| RegistryError::Io {
            operation,
            path,
            source,
        }
    }
}
