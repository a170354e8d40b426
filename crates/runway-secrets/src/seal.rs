//! Sealing secret values for the store: XChaCha20-Poly1305 under the master key, bound to
//! the row they belong to.
//!
//! # Format
//!
//! A [`Sealed`] value is two byte strings, stored as they are:
//!
//! - `nonce`: 24 random bytes, new for every seal. XChaCha20's 192-bit nonce makes a random
//!   nonce safe: a collision is negligible even after 2^64 seals under one key.
//! - `ciphertext`: one format byte, then the AEAD output (the encrypted value followed by its
//!   16-byte Poly1305 tag).
//!
//! Format [`FORMAT_V1`] (`0x01`) is XChaCha20-Poly1305 under the master key as it is in the
//! key file. The format byte is what lets the key or the algorithm change later: a new key or
//! cipher gets the next byte, [`Sealer::open`] dispatches on the byte, and old rows are
//! re-sealed in the new format at leisure (opened, then sealed again). A byte this build does
//! not know is refused with [`Error::UnknownFormat`], never guessed at.
//!
//! # What is bound
//!
//! The associated data (authenticated, not encrypted) is the [`Context`]: service,
//! environment, secret name and version, together with a fixed label and the format byte.
//! Each string is preceded by its length, so no two contexts encode alike (`("ab", "c")` and
//! `("a", "bc")` differ). A ciphertext copied into another row, another service's secret,
//! another name or another version does not open, and neither does one whose format byte was
//! changed.

use std::fmt;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use zeroize::Zeroize;

use crate::error::Error;
use crate::key::MasterKey;
use crate::random_bytes;

/// The format this build writes: XChaCha20-Poly1305 under the master key.
pub const FORMAT_V1: u8 = 1;

/// The nonce's length in bytes.
pub const NONCE_LEN: usize = 24;

/// Label at the start of the associated data, so a ciphertext made for something else under
/// the same key (should the key ever be reused) cannot pass for a secret.
const AAD_LABEL: &[u8] = b"runway secret\0";

/// A secret's value. Wiped from memory when dropped; `Debug` and `Display` print
/// `<redacted>`; deliberately neither `Serialize` nor `Clone`.
pub struct SecretValue {
    bytes: Vec<u8>,
}

/// The largest secret value, in bytes: a secret reaches its instance as an environment
/// variable, and Linux refuses to start a program with one longer than 128 KiB (with all of
/// them past about a quarter of the stack limit), so a larger value would only fail every
/// deploy later.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// Why a secret value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// Longer than [`MAX_VALUE_BYTES`].
    #[error("the value is {len} bytes, over the limit of {} KiB for a secret (it becomes an environment variable)", MAX_VALUE_BYTES / 1024)]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// A NUL byte, which an environment variable cannot hold.
    #[error("the value has a NUL byte at offset {at}, which an environment variable cannot hold")]
    Nul {
        /// Where the first one is.
        at: usize,
    },
}

impl SecretValue {
    /// Checks that the value can reach an instance as an environment variable; the error
    /// never shows the value.
    pub fn check(&self) -> Result<(), ValueError> {
        if self.bytes.len() > MAX_VALUE_BYTES {
            return Err(ValueError::TooLong {
                len: self.bytes.len(),
            });
        }
        match self.bytes.iter().position(|&b| b == 0) {
            Some(at) => Err(ValueError::Nul { at }),
            None => Ok(()),
        }
    }

    /// Wraps `bytes`, which are wiped when the value is dropped.
    pub fn new(bytes: Vec<u8>) -> SecretValue {
        SecretValue { bytes }
    }

    /// The value itself, for the one place that needs it (sealing, or the instance's
    /// environment).
    pub fn expose(&self) -> &[u8] {
        &self.bytes
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl From<Vec<u8>> for SecretValue {
    fn from(bytes: Vec<u8>) -> SecretValue {
        SecretValue::new(bytes)
    }
}

impl From<String> for SecretValue {
    fn from(text: String) -> SecretValue {
        SecretValue::new(text.into_bytes())
    }
}

impl Drop for SecretValue {
    fn drop(&mut self) {
        // Clears the spare capacity too.
        self.bytes.zeroize();
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The row a sealed value belongs to, bound into it as associated data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context<'a> {
    /// The service's name.
    pub service: &'a str,
    /// The environment's name.
    pub env: &'a str,
    /// The secret's name.
    pub name: &'a str,
    /// The secret's version.
    pub version: u64,
}

impl Context<'_> {
    /// The associated data for `format`: label, format byte, then each string preceded by
    /// its length (u64, big-endian), then the version (u64, big-endian).
    fn associated_data(&self, format: u8) -> Vec<u8> {
        let strings = [self.service, self.env, self.name];
        let len = AAD_LABEL.len() + 1 + strings.iter().map(|s| 8 + s.len()).sum::<usize>() + 8;
        let mut aad = Vec::with_capacity(len);
        aad.extend_from_slice(AAD_LABEL);
        aad.push(format);
        for s in strings {
            aad.extend_from_slice(&(s.len() as u64).to_be_bytes());
            aad.extend_from_slice(s.as_bytes());
        }
        aad.extend_from_slice(&self.version.to_be_bytes());
        aad
    }
}

/// A sealed secret as the store keeps it: see the module's documentation for the format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The nonce, [`NONCE_LEN`] bytes.
    pub nonce: Vec<u8>,
    /// The format byte, then the encrypted value and its tag.
    pub ciphertext: Vec<u8>,
}

impl Sealed {
    /// The format byte, `None` when the ciphertext is empty.
    pub fn format(&self) -> Option<u8> {
        self.ciphertext.first().copied()
    }
}

/// Seals and opens secret values under the master key.
pub struct Sealer {
    cipher: XChaCha20Poly1305,
}

impl Sealer {
    /// A sealer for `key`. The cipher keeps its own copy of the key, wiped on drop.
    pub fn new(key: &MasterKey) -> Sealer {
        let key: &chacha20poly1305::Key = key.as_bytes().into();
        Sealer {
            cipher: XChaCha20Poly1305::new(key),
        }
    }

    /// Encrypts `value` for the row `context` names, with a new random nonce.
    ///
    /// # Errors
    /// The OS gives no random numbers; the value is over 256 GiB.
    pub fn seal(&self, value: &SecretValue, context: &Context<'_>) -> Result<Sealed, Error> {
        let nonce: [u8; NONCE_LEN] = random_bytes()?;
        let aad = context.associated_data(FORMAT_V1);
        let encrypted = self
            .cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: value.expose(),
                    aad: &aad,
                },
            )
            .map_err(|_| Error::SealTooLong)?;
        let mut ciphertext = Vec::with_capacity(1 + encrypted.len());
        ciphertext.push(FORMAT_V1);
        ciphertext.extend_from_slice(&encrypted);
        Ok(Sealed {
            nonce: nonce.to_vec(),
            ciphertext,
        })
    }

    /// Decrypts `sealed`, which must have been sealed under this key for exactly this
    /// `context`.
    ///
    /// # Errors
    /// An unknown format byte, a nonce of the wrong length, or a ciphertext that does not
    /// authenticate ([`Error::OpenFailed`]): another key, another row, or altered bytes.
    pub fn open(&self, sealed: &Sealed, context: &Context<'_>) -> Result<SecretValue, Error> {
        let Some((&format, encrypted)) = sealed.ciphertext.split_first() else {
            return Err(Error::UnknownFormat {
                found: 0,
                known: FORMAT_V1,
            });
        };
        if format != FORMAT_V1 {
            return Err(Error::UnknownFormat {
                found: format,
                known: FORMAT_V1,
            });
        }
        let nonce = <[u8; NONCE_LEN]>::try_from(sealed.nonce.as_slice()).map_err(|_| {
            Error::NonceLength {
                len: sealed.nonce.len(),
            }
        })?;
        let aad = context.associated_data(format);
        self.cipher
            .decrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: encrypted,
                    aad: &aad,
                },
            )
            .map(SecretValue::new)
            .map_err(|_| Error::OpenFailed {
                service: context.service.to_owned(),
                env: context.env.to_owned(),
                name: context.name.to_owned(),
                version: context.version,
            })
    }
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sealer(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_an_environment_variable_cannot_hold_is_refused_without_showing_it() {
        assert_eq!(SecretValue::new(b"hunter2".to_vec()).check(), Ok(()));
        let limit = SecretValue::new(vec![b'x'; MAX_VALUE_BYTES]);
        assert_eq!(limit.check(), Ok(()));
        let long = SecretValue::new(vec![b'x'; MAX_VALUE_BYTES + 1]);
        let error = long.check().unwrap_err();
        assert!(error.to_string().contains("64 KiB"), "{error}");
        let nul = SecretValue::new(b"top\0secret".to_vec());
        let error = nul.check().unwrap_err();
        assert_eq!(error, ValueError::Nul { at: 3 });
        assert!(!error.to_string().contains("secret"), "{error}");
    }

    const CTX: Context<'static> = Context {
        service: "billing",
        env: "production",
        name: "DB_PASSWORD",
        version: 3,
    };

    fn sealer() -> Sealer {
        Sealer::new(&MasterKey::generate().unwrap())
    }

    fn value(text: &str) -> SecretValue {
        SecretValue::from(text.to_owned())
    }

    #[test]
    fn round_trips() {
        let sealer = sealer();
        for text in ["", "x", "hunter2", &"long ".repeat(10_000)] {
            let sealed = sealer.seal(&value(text), &CTX).unwrap();
            assert_eq!(sealed.nonce.len(), NONCE_LEN);
            assert_eq!(sealed.format(), Some(FORMAT_V1));
            assert_eq!(sealed.ciphertext.len(), 1 + text.len() + 16);
            let opened = sealer.open(&sealed, &CTX).unwrap();
            assert_eq!(opened.expose(), text.as_bytes());
        }
    }

    #[test]
    fn ciphertext_does_not_contain_the_value() {
        let sealed = sealer()
            .seal(&value("correct horse battery staple"), &CTX)
            .unwrap();
        assert!(
            !sealed
                .ciphertext
                .windows(7)
                .any(|w| w == b"correct" || w == b"battery")
        );
    }

    #[test]
    fn every_seal_has_a_new_nonce() {
        let sealer = sealer();
        let a = sealer.seal(&value("same"), &CTX).unwrap();
        let b = sealer.seal(&value("same"), &CTX).unwrap();
        assert_ne!(a.nonce, b.nonce);
        assert_ne!(a.ciphertext, b.ciphertext);
    }

    #[test]
    fn a_ciphertext_moved_to_another_row_does_not_open() {
        let sealer = sealer();
        let sealed = sealer.seal(&value("s3cret"), &CTX).unwrap();
        let others = [
            Context {
                service: "billing2",
                ..CTX
            },
            Context {
                env: "staging",
                ..CTX
            },
            Context {
                name: "DB_PASSWORD_OLD",
                ..CTX
            },
            Context { version: 4, ..CTX },
            Context { version: 2, ..CTX },
            // The same bytes split differently between fields.
            Context {
                service: "billingp",
                env: "roduction",
                ..CTX
            },
        ];
        for other in others {
            let err = sealer.open(&sealed, &other).unwrap_err();
            assert!(matches!(err, Error::OpenFailed { .. }), "{other:?}: {err}");
        }
    }

    #[test]
    fn the_error_names_the_row_not_the_value() {
        let sealer = sealer();
        let sealed = sealer.seal(&value("s3cret-value"), &CTX).unwrap();
        let err = sealer
            .open(&sealed, &Context { version: 9, ..CTX })
            .unwrap_err()
            .to_string();
        assert!(err.contains("DB_PASSWORD") && err.contains("billing") && err.contains('9'));
        assert!(!err.contains("s3cret"), "{err}");
    }

    #[test]
    fn another_key_does_not_open() {
        let sealed = sealer().seal(&value("s3cret"), &CTX).unwrap();
        assert!(matches!(
            sealer().open(&sealed, &CTX),
            Err(Error::OpenFailed { .. })
        ));
    }

    #[test]
    fn the_same_key_loaded_again_opens() {
        let bytes = [42u8; crate::KEY_LEN];
        let sealed = Sealer::new(&MasterKey::from_bytes(bytes))
            .seal(&value("s3cret"), &CTX)
            .unwrap();
        let opened = Sealer::new(&MasterKey::from_bytes(bytes))
            .open(&sealed, &CTX)
            .unwrap();
        assert_eq!(opened.expose(), b"s3cret");
    }

    #[test]
    fn altered_bytes_do_not_open() {
        let sealer = sealer();
        let sealed = sealer.seal(&value("s3cret"), &CTX).unwrap();
        for i in 1..sealed.ciphertext.len() {
            let mut bad = sealed.clone();
            bad.ciphertext[i] ^= 1;
            assert!(matches!(
                sealer.open(&bad, &CTX),
                Err(Error::OpenFailed { .. })
            ));
        }
        for i in 0..sealed.nonce.len() {
            let mut bad = sealed.clone();
            bad.nonce[i] ^= 0x80;
            assert!(matches!(
                sealer.open(&bad, &CTX),
                Err(Error::OpenFailed { .. })
            ));
        }
        let mut short = sealed.clone();
        short.ciphertext.truncate(10);
        assert!(matches!(
            sealer.open(&short, &CTX),
            Err(Error::OpenFailed { .. })
        ));
    }

    #[test]
    fn unknown_formats_and_bad_nonces_are_refused() {
        let sealer = sealer();
        let sealed = sealer.seal(&value("s3cret"), &CTX).unwrap();
        let mut other = sealed.clone();
        other.ciphertext[0] = 2;
        assert!(matches!(
            sealer.open(&other, &CTX),
            Err(Error::UnknownFormat { found: 2, known: 1 })
        ));
        let empty = Sealed {
            nonce: sealed.nonce.clone(),
            ciphertext: Vec::new(),
        };
        assert!(matches!(
            sealer.open(&empty, &CTX),
            Err(Error::UnknownFormat { found: 0, .. })
        ));
        let mut short_nonce = sealed;
        short_nonce.nonce.pop();
        assert!(matches!(
            sealer.open(&short_nonce, &CTX),
            Err(Error::NonceLength { len: 23 })
        ));
    }

    #[test]
    fn values_and_sealers_are_redacted() {
        let v = value("hunter2");
        assert_eq!(format!("{v:?}"), "<redacted>");
        assert_eq!(format!("{v}"), "<redacted>");
        assert_eq!(format!("{:?}", sealer()), "Sealer(<redacted>)");
        assert_eq!(v.len(), 7);
        assert!(!v.is_empty());
    }

    #[test]
    fn associated_data_is_unambiguous() {
        let a = Context {
            service: "ab",
            env: "c",
            name: "N",
            version: 1,
        };
        let b = Context {
            service: "a",
            env: "bc",
            ..a
        };
        assert_ne!(a.associated_data(1), b.associated_data(1));
        assert_ne!(a.associated_data(1), a.associated_data(2));
    }
}
