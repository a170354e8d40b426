//! GitLab's routable tokens, as GitLab's own generator writes them and its decoder reads them
//! (`lib/authn/token_field/generator/routable_token.rb`, `decoders/v1/routable_payload.rb`):
//! a token carries the claims a cell router needs (`c` the cell, `o` the organization, ...)
//! and a checksum, so the router finds a request's cell, and turns a mistyped token away,
//! without a database.
//!
//! `PREFIX` + `B64` + `.01.` + `LL` + `CRC`:
//! - `B64`: URL-safe base64 without padding of 16 random bytes, the payload, and one byte
//!   holding the payload's length. The payload is the claims as `key:value` lines sorted by
//!   key, joined by `\n`, integers in lower-case base 36, at most 159 bytes.
//! - `01`: the version, base 36, two characters. `LL`: `B64`'s length, base 36, two
//!   characters.
//! - `CRC`: zlib's CRC-32 of everything before it, the prefix included, base 36, seven
//!   characters.
//!
//! [`decode`] checks what GitLab's decoder checks, in its order: the checksum, the three
//! parts, the declared length within the first part, the base64, the payload's size, each
//! line. Like GitLab's it reads neither the version nor the trailing length byte. It keeps a
//! claim whose key it does not know (a later GitLab may add one; a router needs only the
//! keys its rules name), where [`encode`] refuses one. Errors say what is wrong, never the
//! token itself.
//!
//! ```
//! let claims = routable_token::decode("glrtr-W5m1cHR6skC98Bx7XkuYjmM6MQpnOjgKbzpyegp0OjIQ.01.181uebm4k")?;
//! assert_eq!(claims.get("o"), Some(1007));
//! # Ok::<(), routable_token::TokenError>(())
//! ```

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// The claim keys GitLab defines: cell, organization, group, project, user, runner type.
pub const CLAIM_KEYS: [&str; 6] = ["c", "o", "g", "p", "u", "t"];

/// The keys of which a token must carry one: without either, no router can place it.
pub const ROUTING_KEYS: [&str; 2] = ["c", "o"];

/// The largest payload, in bytes.
pub const MAX_PAYLOAD: usize = 159;

/// How many random bytes come before the payload.
pub const RANDOM_BYTES: usize = 16;

/// The only version there is.
const VERSION: &str = "01";

/// The checksum's length in characters.
const CRC_CHARS: usize = 7;

/// URL-safe base64, written without padding; read with or without it, and with non-zero
/// trailing bits, as Ruby's `Base64.urlsafe_decode64` reads it.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// A token's claims: key to integer, sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claims(BTreeMap<String, u64>);

impl Claims {
    /// No claims.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`.
    pub fn with(mut self, key: &str, value: u64) -> Self {
        self.0.insert(key.to_owned(), value);
        self
    }

    /// Sets `key` to `value`.
    pub fn insert(&mut self, key: &str, value: u64) {
        self.0.insert(key.to_owned(), value);
    }

    /// The claim `key`'s value.
    pub fn get(&self, key: &str) -> Option<u64> {
        self.0.get(key).copied()
    }

    /// Each claim, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The payload text: `key:value` lines sorted by key, values in base 36.
    fn payload(&self) -> String {
        self.0
            .iter()
            .map(|(key, value)| format!("{key}:{}", base36(*value)))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl fmt::Display for Claims {
    /// `c=1 g=8 o=1007 t=2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (key, value) in self.iter() {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            write!(f, "{key}={value}")?;
        }
        Ok(())
    }
}

impl FromIterator<(String, u64)> for Claims {
    fn from_iter<I: IntoIterator<Item = (String, u64)>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

/// What is wrong with a token, or with claims to encode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token is {len} characters, too short to be a routable token")]
    TooShort { len: usize },
    #[error(
        "the token's checksum does not match: a character is wrong, missing or extra (or it is \
         not a routable token)"
    )]
    Checksum,
    #[error("the token has no `.VV.LL` version and length before its checksum")]
    Parts,
    #[error("the token's length part `{0}` is not base 36")]
    LengthPart(String),
    #[error(
        "the token declares {declared} characters of payload, but its first part has {available}"
    )]
    Length { declared: usize, available: usize },
    #[error("the token's payload is not URL-safe base64")]
    Base64,
    #[error(
        "the token's payload is {len} bytes, fewer than the {RANDOM_BYTES} random bytes and the length byte"
    )]
    Short { len: usize },
    #[error("the routing payload is too big: {len} bytes; at most {MAX_PAYLOAD}")]
    PayloadTooBig { len: usize },
    #[error("the token's payload is not text")]
    NotText,
    #[error("line {line} of the token's payload is not `key:value`")]
    Line { line: usize },
    #[error("claim `{key}` of the token is not a base-36 integer")]
    Value { key: String },
    #[error("`{key}` is not a routing claim: expected one of c, o, g, p, u, t")]
    UnknownKey { key: String },
    #[error("at least one routing key must be present: c or o")]
    NoRoutingKey,
    #[error("the prefix `{prefix}` holds a `.` or a character a token cannot carry")]
    Prefix { prefix: String },
}

/// Writes a token for `claims` after `prefix`, with these 16 random bytes. Refuses a key
/// GitLab does not define, claims with neither `c` nor `o`, and a payload over 159 bytes.
pub fn encode(
    prefix: &str,
    claims: &Claims,
    random: &[u8; RANDOM_BYTES],
) -> Result<String, TokenError> {
    if let Some((key, _)) = claims.iter().find(|(key, _)| !CLAIM_KEYS.contains(key)) {
        return Err(TokenError::UnknownKey {
            key: key.to_owned(),
        });
    }
    if !ROUTING_KEYS.iter().any(|key| claims.get(key).is_some()) {
        return Err(TokenError::NoRoutingKey);
    }
    if !prefix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(TokenError::Prefix {
            prefix: prefix.to_owned(),
        });
    }
    let payload = claims.payload();
    let len = payload.len();
    let length_byte = u8::try_from(len)
        .ok()
        .filter(|_| len <= MAX_PAYLOAD)
        .ok_or(TokenError::PayloadTooBig { len })?;
    let mut bytes = Vec::with_capacity(RANDOM_BYTES + len + 1);
    bytes.extend_from_slice(random);
    bytes.extend_from_slice(payload.as_bytes());
    bytes.push(length_byte);
    let text = BASE64.encode(&bytes);
    // At most 176 bytes, 235 characters: two base-36 digits hold it.
    let body = format!("{prefix}{text}.{VERSION}.{:0>2}", base36(text.len() as u64));
    let crc = format!(
        "{:0>width$}",
        base36(u64::from(crc32fast::hash(body.as_bytes()))),
        width = CRC_CHARS
    );
    Ok(body + &crc)
}

/// The claims in `token`, checked as GitLab's decoder checks them.
pub fn decode(token: &str) -> Result<Claims, TokenError> {
    let split = token
        .len()
        .checked_sub(CRC_CHARS)
        .filter(|at| token.is_char_boundary(*at))
        .ok_or(TokenError::TooShort { len: token.len() })?;
    let (body, crc) = token.split_at(split);
    let expected = format!(
        "{:0>width$}",
        base36(u64::from(crc32fast::hash(body.as_bytes()))),
        width = CRC_CHARS
    );
    if crc != expected {
        return Err(TokenError::Checksum);
    }
    let mut parts = body.rsplitn(3, '.');
    let (Some(length), Some(_version), Some(first)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Parts);
    };
    let declared = usize::from_str_radix(length, 36)
        .ok()
        .filter(|_| !length.is_empty() && length.bytes().all(|b| b.is_ascii_alphanumeric()))
        .ok_or_else(|| TokenError::LengthPart(length.chars().take(4).collect()))?;
    payload_claims(first, declared)
}

/// The claims of a payload already cut out of a token: `text` ends with the base64 of the
/// random bytes, payload and length byte, `declared` characters of it (what a router rule's
/// `routable-token-payload` transform is given: the `payload` and `payload_length` captures).
pub fn payload_claims(text: &str, declared: usize) -> Result<Claims, TokenError> {
    let available = text.len();
    let start = available
        .checked_sub(declared)
        .filter(|at| text.is_char_boundary(*at))
        .ok_or(TokenError::Length {
            declared,
            available,
        })?;
    let bytes = BASE64
        .decode(&text[start..])
        .map_err(|_| TokenError::Base64)?;
    if bytes.len() < RANDOM_BYTES + 1 {
        return Err(TokenError::Short { len: bytes.len() });
    }
    let payload = &bytes[RANDOM_BYTES..bytes.len() - 1];
    if payload.len() > MAX_PAYLOAD {
        return Err(TokenError::PayloadTooBig { len: payload.len() });
    }
    let payload = std::str::from_utf8(payload).map_err(|_| TokenError::NotText)?;
    lines_claims(payload)
}

/// Claims from `key:value` lines, values in base 36 (the payload's text, and what a
/// `base64-line-delimited` transform decodes).
pub fn lines_claims(text: &str) -> Result<Claims, TokenError> {
    let mut claims = Claims::new();
    if text.is_empty() {
        return Ok(claims);
    }
    // Empty lines are skipped, as Ruby's `lines` and `split` leave them out.
    for (index, line) in text.split('\n').enumerate().filter(|(_, l)| !l.is_empty()) {
        let (key, value) = line
            .split_once(':')
            .ok_or(TokenError::Line { line: index + 1 })?;
        let parsed = (!value.is_empty() && value.bytes().all(|b| b.is_ascii_alphanumeric()))
            .then(|| u64::from_str_radix(&value.to_ascii_lowercase(), 36).ok())
            .flatten()
            .ok_or_else(|| TokenError::Value {
                key: key.chars().take(16).collect(),
            })?;
        claims.insert(key, parsed);
    }
    Ok(claims)
}

/// `n` in lower-case base 36.
pub fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.iter().rev().map(|&digit| char::from(digit)).collect()
}
