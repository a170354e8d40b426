//! The crate's one error type.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// What kind of content a digest named, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobKind {
    /// An image manifest (OCI or Docker v2 schema 2).
    Manifest,
    /// An image index or Docker manifest list.
    Index,
    /// The image configuration.
    Config,
    /// A layer as stored (usually compressed).
    Layer,
    /// A layer's uncompressed tar stream, checked against the config's `rootfs.diff_ids`.
    UncompressedLayer,
}

impl fmt::Display for BlobKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BlobKind::Manifest => "manifest",
            BlobKind::Index => "image index",
            BlobKind::Config => "image config",
            BlobKind::Layer => "layer",
            BlobKind::UncompressedLayer => "uncompressed layer",
        })
    }
}

/// Everything that can go wrong pulling, unpacking or bundling an image.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// The registry is not one images may come from here.
    #[error(
        "images from registry {registry} are not allowed here: the server's \
         runtime.allowed_registries does not list it (its operator adds it there, and to \
         runtime.insecure_registries if it speaks plain HTTP)"
    )]
    NotAllowed {
        /// The registry as the reference names it.
        registry: String,
    },
    /// The image reference does not parse.
    #[error("invalid image reference {reference:?}: {reason}")]
    InvalidReference {
        /// The reference as given.
        reference: String,
        /// Why it was refused.
        reason: String,
    },

    /// A digest is malformed or uses an algorithm other than sha256.
    #[error("invalid digest {digest:?}: {reason}")]
    InvalidDigest {
        /// The digest as given.
        digest: String,
        /// Why it was refused.
        reason: &'static str,
    },

    /// The registry does not have the image, tag or blob.
    #[error("image {reference} not found at {registry} (http {status})")]
    NotFound {
        /// The registry host.
        registry: String,
        /// The reference or blob asked for.
        reference: String,
        /// The HTTP status (404).
        status: u16,
    },

    /// The registry refused our credentials, or wanted some.
    #[error("access to {reference} denied by {registry} (http {status}): {message}")]
    Unauthorized {
        /// The registry host.
        registry: String,
        /// The reference asked for.
        reference: String,
        /// The HTTP status (401 or 403).
        status: u16,
        /// What the registry said.
        message: String,
    },

    /// The registry answered with an error other than not-found or denied.
    #[error("pulling {reference} from {registry} failed{}: {message}", status.map(|s| format!(" (http {s})")).unwrap_or_default())]
    Registry {
        /// The registry host.
        registry: String,
        /// The reference asked for.
        reference: String,
        /// The HTTP status, when the failure had one.
        status: Option<u16>,
        /// What went wrong.
        message: String,
    },

    /// No connection could be made (refused, DNS, TLS handshake).
    #[error("cannot reach registry {registry} over {scheme}: {reason}")]
    Unreachable {
        /// The registry host.
        registry: String,
        /// `https`, or `http` for a registry marked insecure.
        scheme: &'static str,
        /// The connection error chain, with a hint when plain HTTP may be what the registry speaks.
        reason: String,
    },

    /// The pull did not finish within its bound.
    #[error("pulling {reference} from {registry} timed out after {after:?}")]
    Timeout {
        /// The registry host.
        registry: String,
        /// The reference asked for.
        reference: String,
        /// The bound that was exceeded.
        after: Duration,
    },

    /// Content does not hash to the digest it was asked for by; it was not kept.
    #[error("{kind} {expected} failed verification: its content hashes to {actual}")]
    DigestMismatch {
        /// What the content was.
        kind: BlobKind,
        /// The digest asked for.
        expected: String,
        /// The digest of what arrived.
        actual: String,
    },

    /// Content has another size than its descriptor says; it was not kept.
    #[error("{kind} {digest} is {actual} bytes, its descriptor says {expected}")]
    SizeMismatch {
        /// What the content was.
        kind: BlobKind,
        /// Its digest.
        digest: String,
        /// The descriptor's size.
        expected: u64,
        /// The size that arrived.
        actual: u64,
    },

    /// A manifest, index, config or layer has a media type this crate does not handle.
    #[error("{reference}: unsupported {kind} media type {media_type:?}")]
    UnsupportedMediaType {
        /// The image reference.
        reference: String,
        /// What had the media type.
        kind: BlobKind,
        /// The media type.
        media_type: String,
    },

    /// An image index has no manifest for the wanted platform.
    #[error("{reference}: the image index has no manifest for {platform} (it has: {available})")]
    NoMatchingPlatform {
        /// The image reference.
        reference: String,
        /// The platform wanted, `os/arch[/variant]`.
        platform: String,
        /// The platforms the index lists.
        available: String,
    },

    /// A manifest, index or config is not valid JSON of the expected shape.
    #[error("invalid {kind} {digest}: {reason}")]
    InvalidDocument {
        /// What the document was.
        kind: BlobKind,
        /// Its digest.
        digest: String,
        /// Why it was refused.
        reason: String,
    },

    /// A layer entry would escape the root, or is a kind of file this crate refuses.
    #[error("layer {layer}: refusing entry {path:?}: {reason}")]
    UnsafeEntry {
        /// The layer's digest.
        layer: String,
        /// The entry's path as written in the archive.
        path: String,
        /// Why it was refused.
        reason: String,
    },

    /// A layer could not be decompressed or read as a tar archive.
    #[error("layer {layer}: cannot read archive{}", path.as_ref().map(|p| format!(" at entry {p:?}")).unwrap_or_default())]
    LayerRead {
        /// The layer's digest.
        layer: String,
        /// The entry being read, when known.
        path: Option<String>,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A file system operation failed.
    #[error("cannot {op} {}", path.display())]
    Io {
        /// What was being done, as a verb phrase.
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// [`PullOptions::extra_roots`](crate::PullOptions::extra_roots) is not PEM certificates a
    /// TLS client can trust.
    #[error("invalid extra root certificates: {reason}")]
    ExtraRoots {
        /// What is wrong with them.
        reason: String,
    },

    /// The docker-style credentials file is unreadable or malformed.
    #[error("registry credentials {}: {reason}", path.display())]
    DockerConfig {
        /// The file.
        path: PathBuf,
        /// What is wrong with it (never the secret itself).
        reason: String,
    },

    /// The image's or caller's user names an account the image does not have.
    #[error("user {user:?}: {reason}")]
    User {
        /// The user as given (`name`, `uid`, `name:group`, `uid:gid`).
        user: String,
        /// Why it could not be resolved.
        reason: String,
    },

    /// A bundle setting is out of range or inconsistent.
    #[error("invalid bundle setting {field}: {reason}")]
    InvalidBundle {
        /// The option.
        field: &'static str,
        /// Why it was refused.
        reason: String,
    },

    /// A background task (the unpacker) panicked or was cancelled.
    #[error("{what} did not complete: {reason}")]
    Task {
        /// What the task was doing.
        what: &'static str,
        /// The join error.
        reason: String,
    },
}

impl OciError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> OciError {
        OciError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// A `Result` with [`OciError`].
pub type Result<T, E = OciError> = std::result::Result<T, E>;
