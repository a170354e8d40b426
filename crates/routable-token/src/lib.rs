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
//! line. Like GitLab's it reads neither the version nor the trailing length byte. A payload
//! with no claim (no line left once blank ones are dropped) is not a routable token: GitLab's
//! decoder answers `nil` for it (`break if pairs.blank?`), as for any token it cannot read,
//! and so does [`decode`] ([`TokenError::NoClaims`]). It keeps a claim whose key it does not
//! know (a later GitLab may add one; a router needs only the keys its rules name), where
//! [`encode`] refuses one. Errors say what is wrong, never the token itself.
//!
//! A claim's value is a whole number of any size ([`ClaimValue`]): GitLab's generator writes
//! a Ruby `Integer` in base 36 whatever its size (up to 157 digits after `o:` within the
//! 159-byte payload), and its decoder reads it back with `to_i(36)`, a big integer when it
//! must be. Runway keeps the digits as they are, with no big-integer arithmetic, and makes a
//! number of them only where one is needed ([`ClaimValue::to_u64`], [`Claims::number`], an
//! error naming the claim when it does not fit); a router rule's `${decoded.c}` is the value
//! in decimal, of any size ([`ClaimValue`]'s `Display`).
//!
//! Where Runway is stricter than GitLab's decoder: a value must be base-36 digits
//! throughout. Ruby's `to_i(36)` reads the digits a value starts with and ignores the rest
//! (`1-2` is 1, `-` is 0, `-5` is -5); GitLab's generator writes an integer claim (every
//! model's claims are ids) as digits alone, so a value that is not is a token GitLab did not
//! write for an id, and a router placing it by the digits before a stray character would
//! place it by a guess ([`TokenError::Value`]).
//!
//! ```
//! let claims = routable_token::decode("glrtr-W5m1cHR6skC98Bx7XkuYjmM6MQpnOjgKbzpyegp0OjIQ.01.181uebm4k")?;
//! assert_eq!(claims.number("o")?, Some(1007));
//! assert_eq!(claims.get("o").map(|o| o.base36()), Some("rz"));
//! # Ok::<(), routable_token::TokenError>(())
//! ```
//!
//! No I/O: `encode` and `decode` byte for byte as GitLab's generator and decoder (checked against
//! GitLab's own fixture), the payload and line decoders a router rule's transforms use, and typed
//! errors that never echo a token.

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

/// The most digits a claim's value has: what a payload of 159 bytes holds after `k:`. A
/// value is never longer in a token GitLab writes, and this bounds the work of writing one
/// in decimal (a `base64-line-delimited` transform has no payload limit of its own).
pub const MAX_CLAIM_DIGITS: usize = MAX_PAYLOAD - 2;

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

/// A claim's value: a whole number from 0 of any size, kept as its lower-case base-36
/// digits without leading zeros (as GitLab writes an `Integer`, `to_s(36)`), so a value
/// beyond 64 bits decodes, encodes back byte for byte and prints in decimal with no
/// big-integer arithmetic. [`ClaimValue::to_u64`] where a number is needed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimValue(String);

impl ClaimValue {
    /// `digits` read as base 36, either case; `None` unless it is base-36 digits throughout,
    /// at most [`MAX_CLAIM_DIGITS`] of them.
    pub fn from_base36(digits: &str) -> Option<Self> {
        if digits.is_empty()
            || digits.len() > MAX_CLAIM_DIGITS
            || !digits.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return None;
        }
        let digits = digits.to_ascii_lowercase();
        let trimmed = digits.trim_start_matches('0');
        Some(Self(if trimmed.is_empty() {
            "0".to_owned()
        } else {
            trimmed.to_owned()
        }))
    }

    /// `digits` read as decimal; `None` unless it is decimal digits throughout, of a number
    /// of at most [`MAX_CLAIM_DIGITS`] base-36 digits.
    pub fn from_decimal(digits: &str) -> Option<Self> {
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let digits = digits.trim_start_matches('0');
        // 36^157 is 10^244.3: a longer decimal does not fit, and is not converted to find so.
        if digits.len() > 245 {
            return None;
        }
        let values: Vec<u8> = digits.bytes().map(|b| b - b'0').collect();
        let digits: String = rebase(&values, 10, 36)
            .into_iter()
            .map(|d| char::from(DIGITS[usize::from(d)]))
            .collect();
        (digits.len() <= MAX_CLAIM_DIGITS).then_some(Self(digits))
    }

    /// Its lower-case base-36 digits, as a token's payload carries them.
    pub fn base36(&self) -> &str {
        &self.0
    }

    /// Its value, when it fits 64 bits.
    pub fn to_u64(&self) -> Option<u64> {
        u64::from_str_radix(&self.0, 36).ok()
    }

    /// Its decimal digits, of any size.
    pub fn decimal(&self) -> String {
        if let Some(n) = self.to_u64() {
            return n.to_string();
        }
        let values: Vec<u8> = self
            .0
            .bytes()
            .map(|b| match b {
                b'0'..=b'9' => b - b'0',
                _ => b - b'a' + 10,
            })
            .collect();
        rebase(&values, 36, 10)
            .into_iter()
            .map(|d| char::from(b'0' + d))
            .collect()
    }
}

impl From<u64> for ClaimValue {
    fn from(n: u64) -> Self {
        Self(base36(n))
    }
}

impl fmt::Display for ClaimValue {
    /// In decimal, as a router rule's `${decoded.c}` reads it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.decimal())
    }
}

/// Digit values (most significant first) in base `from` written in base `to` (no leading
/// zeros but for zero itself), schoolbook: a claim is at most [`MAX_CLAIM_DIGITS`] digits, so
/// this is some thousands of small multiplications, and only for a value beyond 64 bits.
fn rebase(digits: &[u8], from: u32, to: u32) -> Vec<u8> {
    // Least significant first while building.
    let mut out: Vec<u8> = Vec::new();
    for &digit in digits {
        let mut carry = u32::from(digit);
        for slot in &mut out {
            let value = u32::from(*slot) * from + carry;
            // `value % to` < `to` ≤ 36: fits a byte.
            *slot = (value % to) as u8;
            carry = value / to;
        }
        while carry > 0 {
            out.push((carry % to) as u8);
            carry /= to;
        }
    }
    if out.is_empty() {
        out.push(0);
    }
    out.reverse();
    out
}

/// A token's claims: key to value, sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claims(BTreeMap<String, ClaimValue>);

impl Claims {
    /// No claims.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`.
    pub fn with(mut self, key: &str, value: u64) -> Self {
        self.insert(key, value);
        self
    }

    /// Sets `key` to `value`.
    pub fn insert(&mut self, key: &str, value: u64) {
        self.insert_value(key, value.into());
    }

    /// Sets `key` to `value`, of any size.
    pub fn with_value(mut self, key: &str, value: ClaimValue) -> Self {
        self.insert_value(key, value);
        self
    }

    /// Sets `key` to `value`, of any size.
    pub fn insert_value(&mut self, key: &str, value: ClaimValue) {
        self.0.insert(key.to_owned(), value);
    }

    /// The claim `key`'s value.
    pub fn get(&self, key: &str) -> Option<&ClaimValue> {
        self.0.get(key)
    }

    /// The claim `key` as a number, where one is needed: `Ok(None)` when the token does not
    /// carry it, [`TokenError::TooLarge`] naming it when it does not fit 64 bits.
    pub fn number(&self, key: &str) -> Result<Option<u64>, TokenError> {
        self.get(key)
            .map(|value| {
                value.to_u64().ok_or_else(|| TokenError::TooLarge {
                    key: key.chars().take(16).collect(),
                    digits: value.base36().len(),
                })
            })
            .transpose()
    }

    /// Each claim, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ClaimValue)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The payload text: `key:value` lines sorted by key, values in base 36.
    fn payload(&self) -> String {
        self.0
            .iter()
            .map(|(key, value)| format!("{key}:{}", value.base36()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl fmt::Display for Claims {
    /// `c=1 g=8 o=1007 t=2`, values in decimal.
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
        Self(iter.into_iter().map(|(k, v)| (k, v.into())).collect())
    }
}

impl FromIterator<(String, ClaimValue)> for Claims {
    fn from_iter<I: IntoIterator<Item = (String, ClaimValue)>>(iter: I) -> Self {
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
    #[error(
        "claim `{key}` of the token is not a base-36 integer (of at most {MAX_CLAIM_DIGITS} digits)"
    )]
    Value { key: String },
    #[error("the token's payload holds no claims: GitLab does not read it as a routable token")]
    NoClaims,
    #[error(
        "claim `{key}` is a number of {digits} base-36 digits, too large where it is used \
         here (at most 2^64 - 1)"
    )]
    TooLarge { key: String, digits: usize },
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
/// `base64-line-delimited` transform decodes). Text with no claim in it is
/// [`TokenError::NoClaims`], as GitLab's decoder reads nothing from it.
pub fn lines_claims(text: &str) -> Result<Claims, TokenError> {
    let mut claims = Claims::new();
    // Blank lines are skipped, as GitLab's decoder leaves them out (`filter(&:present?)`).
    for (index, line) in text
        .split('\n')
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let (key, value) = line
            .split_once(':')
            .ok_or(TokenError::Line { line: index + 1 })?;
        let parsed = ClaimValue::from_base36(value).ok_or_else(|| TokenError::Value {
            key: key.chars().take(16).collect(),
        })?;
        claims.insert_value(key, parsed);
    }
    if claims.is_empty() {
        return Err(TokenError::NoClaims);
    }
    Ok(claims)
}

/// Base 36's digits, lower case.
const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// `n` in lower-case base 36.
pub fn base36(mut n: u64) -> String {
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
