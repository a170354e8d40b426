//! sha256 content digests: the only algorithm registries use for images in practice.

use std::fmt;
use std::io::{self, Read};
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

use crate::error::OciError;

/// A `sha256:<64 lowercase hex>` content digest.
///
/// Parsing checks the hex strictly, so a `Digest` is always safe to use as a path component.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    hex: String,
}

impl Digest {
    /// Parses `sha256:<hex>`. Other algorithms are refused.
    pub fn parse(s: &str) -> Result<Digest, OciError> {
        let invalid = |reason| OciError::InvalidDigest {
            digest: s.to_string(),
            reason,
        };
        let (algorithm, hex) = s
            .split_once(':')
            .ok_or_else(|| invalid("expected algorithm:hex"))?;
        if algorithm != "sha256" {
            return Err(invalid("only sha256 is supported"));
        }
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(invalid("expected 64 lowercase hex digits"));
        }
        Ok(Digest {
            hex: hex.to_string(),
        })
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        let mut hasher = Hasher::new();
        hasher.update(bytes);
        hasher.finish()
    }

    /// The 64 hex digits, without the algorithm.
    pub fn hex(&self) -> &str {
        &self.hex
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest(sha256:{})", self.hex)
    }
}

impl FromStr for Digest {
    type Err = OciError;
    fn from_str(s: &str) -> Result<Digest, OciError> {
        Digest::parse(s)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Digest, D::Error> {
        let s = String::deserialize(d)?;
        Digest::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// An incremental sha256 that also counts bytes.
pub(crate) struct Hasher {
    inner: Sha256,
    len: u64,
}

impl Hasher {
    pub(crate) fn new() -> Hasher {
        Hasher {
            inner: Sha256::new(),
            len: 0,
        }
    }

    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.inner.update(bytes);
        self.len = self.len.saturating_add(bytes.len() as u64);
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    pub(crate) fn finish(self) -> Digest {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let out = self.inner.finalize();
        let mut hex = String::with_capacity(64);
        for byte in out.iter() {
            hex.push(char::from(HEX[usize::from(byte >> 4)]));
            hex.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        Digest { hex }
    }
}

/// A reader that hashes what passes through it.
pub(crate) struct HashingReader<R> {
    inner: R,
    hasher: Hasher,
}

impl<R: Read> HashingReader<R> {
    pub(crate) fn new(inner: R) -> HashingReader<R> {
        HashingReader {
            inner,
            hasher: Hasher::new(),
        }
    }

    /// Reads the rest of the stream, then returns the digest and length of everything read.
    pub(crate) fn finish(mut self) -> io::Result<(Digest, u64)> {
        io::copy(&mut self, &mut io::sink())?;
        let len = self.hasher.len();
        Ok((self.hasher.finish(), len))
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(read) = buf.get(..n) {
            self.hasher.update(read);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digest() {
        assert_eq!(
            Digest::of(b"").to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn parse_is_strict() {
        let good = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(
            Digest::parse(good).map(|d| d.to_string()).ok(),
            Some(good.to_string())
        );
        for bad in [
            "",
            "sha256:",
            "sha512:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
            "sha256:../../../../etc/passwd/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        ] {
            assert!(Digest::parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}
