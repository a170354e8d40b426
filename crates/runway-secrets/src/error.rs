//! The crate's error types: [`Error`] for the key file and sealing, [`TokenError`] for a
//! token's text.
//!
//! Name validation ([`NameError`](crate::NameError)) and authorization
//! ([`Denied`](crate::Denied)) have types of their own: they are answers to give a user, not
//! failures. No message here ever holds a secret's value, the key, or a token's text.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong loading or creating the key, sealing or opening.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file system operation on the key file (or its temporary file) failed.
    #[error("cannot {op} {}", path.display())]
    KeyIo {
        /// What was being done, as a verb phrase.
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// The key file's mode gives others any access, or its group more than reading or a
    /// group other than the process's own.
    #[error(
        "key file {} has mode {mode:04o}, which lets group or others read or change it; \
         a key file must be readable by its owner only (or read by this process's own group): \
         run `chmod 600 {}`",
        path.display(),
        path.display()
    )]
    KeyPermissions {
        /// The key file.
        path: PathBuf,
        /// Its permission bits as seen (`0o644`, …).
        mode: u32,
    },

    /// The key file does not hold exactly [`KEY_LEN`](crate::KEY_LEN) bytes.
    #[error(
        "key file {} holds {len} bytes, expected exactly {expected}: \
         it is not a Runway master key, or it was truncated",
        path.display()
    )]
    KeyLength {
        /// The key file.
        path: PathBuf,
        /// Its length in bytes.
        len: u64,
        /// The length a key has.
        expected: usize,
    },

    /// The key path names something other than a regular file.
    #[error("key file {} is not a regular file", path.display())]
    KeyNotAFile {
        /// The path.
        path: PathBuf,
    },

    /// The operating system gave no random numbers.
    #[error("cannot read random bytes from the operating system: {0}")]
    Random(getrandom::Error),

    /// The value is too long for the cipher (over 256 GiB; never in practice).
    #[error("cannot seal the value: it is too long for the cipher")]
    SealTooLong,

    /// A sealed value names a format this build does not know.
    #[error(
        "sealed value has format {found}, this build knows only format {known}: \
         it was written by a newer Runway, or the row is corrupt"
    )]
    UnknownFormat {
        /// The format byte found (0 when the ciphertext is empty).
        found: u8,
        /// The format this build writes.
        known: u8,
    },

    /// A sealed value's nonce is not 24 bytes.
    #[error("sealed value has a {len}-byte nonce, expected 24: the row is corrupt")]
    NonceLength {
        /// The nonce's length.
        len: usize,
    },

    /// A sealed value failed authentication.
    #[error(
        "cannot open the sealed secret {name} (service {service}, environment {env}, version {version}): \
         it was sealed with another key, for another secret, or was altered"
    )]
    OpenFailed {
        /// The service the caller asked for.
        service: String,
        /// The environment the caller asked for.
        env: String,
        /// The secret's name the caller asked for.
        name: String,
        /// The version the caller asked for.
        version: u64,
    },
}

/// Why a token's text is not a Runway token. The text itself is never included: it may be
/// a real credential pasted in the wrong place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The text does not start with a known prefix.
    #[error("invalid token: a Runway token starts with `runway_admin_` or `runway_deploy_`")]
    UnknownPrefix,
    /// The text after the prefix has the wrong length.
    #[error(
        "invalid token: expected {expected} characters after the `{prefix}` prefix, found {found}"
    )]
    Length {
        /// The prefix that was recognised.
        prefix: &'static str,
        /// The body's length a token has.
        expected: usize,
        /// The body's length found.
        found: usize,
    },
    /// A character outside the token's alphabet (lower-case letters and the digits 2 to 7).
    #[error(
        "invalid token: character {position} after the prefix is not one of a-z or 2-7 \
         (a token is lower-case base32)"
    )]
    Character {
        /// Its position after the prefix, from 1.
        position: usize,
    },
    /// The checksum does not match: a typo, or a truncated or altered copy.
    #[error("invalid token: its checksum does not match: it was mistyped or cut short when copied")]
    Checksum,
}

impl Error {
    pub(crate) fn key_io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::KeyIo {
            op,
            path: path.into(),
            source,
        }
    }
}
