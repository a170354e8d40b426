//! API tokens: their text, their checksum, and the hash the store keeps.
//!
//! # Text
//!
//! `runway_admin_<body>` or `runway_deploy_<body>`, where the body is 58 characters of
//! lower-case base32 (RFC 4648's alphabet `a-z2-7`, without padding) encoding 36 bytes:
//! 32 random bytes from the OS, then a 4-byte checksum. The fixed prefix lets secret scanners
//! (and people) recognise a leaked token and its kind; base32 survives double-click
//! selection, URLs and shells unquoted, and reads back without `0/O`, `1/l` confusion.
//!
//! The checksum is the first 4 bytes of SHA-256 over the prefix and the 32 random bytes. It
//! catches typos, truncation and a changed prefix before any database lookup (a random
//! mistake passes with probability 2^-32). It is not a secret and proves nothing: only the
//! store's hash does. The encoding is strict: the last character's 2 unused bits must be
//! zero, so every token has exactly one text.
//!
//! # Hash
//!
//! The store keeps [`TokenHash`], SHA-256 of the whole text, never the text. A slow password
//! hash (argon2, bcrypt) exists to make guessing a *low-entropy* secret expensive; a token
//! has 256 random bits, so guessing one from its hash is infeasible at any speed, and a fast
//! unsalted hash lets the server find a token by an indexed lookup on its hash with one cheap
//! computation per request. Hashes are compared in constant time.

use std::fmt;
use std::hash::{Hash, Hasher};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::Zeroize;

use crate::error::{Error, TokenError};
use crate::random_bytes;

/// How many random bytes a token carries.
pub const TOKEN_RANDOM_LEN: usize = 32;
/// The checksum's length in bytes.
const CHECKSUM_LEN: usize = 4;
/// Random bytes and checksum.
const PAYLOAD_LEN: usize = TOKEN_RANDOM_LEN + CHECKSUM_LEN;
/// The body's length in base32 characters: ceil(36 * 8 / 5).
pub const TOKEN_BODY_LEN: usize = (PAYLOAD_LEN * 8).div_ceil(5);

const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// What a token may do, as far as its text says; the store holds its exact scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// Everything, including creating services and tokens.
    Admin,
    /// Reads and deploys one service in some of its environments.
    Deploy,
}

impl TokenKind {
    /// Every kind.
    pub const ALL: [TokenKind; 2] = [TokenKind::Admin, TokenKind::Deploy];

    /// The text a token of this kind starts with.
    pub fn prefix(self) -> &'static str {
        match self {
            TokenKind::Admin => "runway_admin_",
            TokenKind::Deploy => "runway_deploy_",
        }
    }

    /// The kind's name: `admin` or `deploy`.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenKind::Admin => "admin",
            TokenKind::Deploy => "deploy",
        }
    }
}

impl fmt::Display for TokenKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A token's text, as shown to its owner once at creation. Wiped from memory when dropped;
/// `Debug` prints `<redacted>`; no `Display`, so it cannot slip into a message.
pub struct PlaintextToken {
    text: String,
}

impl PlaintextToken {
    /// The text, for the one place that shows or sends it.
    pub fn expose(&self) -> &str {
        &self.text
    }
}

impl Drop for PlaintextToken {
    fn drop(&mut self) {
        self.text.zeroize();
    }
}

impl fmt::Debug for PlaintextToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PlaintextToken(<redacted>)")
    }
}

/// SHA-256 of a token's text: what the store keeps and looks tokens up by.
///
/// `==` runs in constant time. `Debug` shows the first 4 bytes in hex, enough to tell
/// hashes apart in a log.
#[derive(Clone, Copy)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// The hash of `text` (which is not checked: see [`Token::parse`]).
    pub fn of(text: &str) -> TokenHash {
        TokenHash(Sha256::digest(text.as_bytes()).into())
    }

    /// A hash as read back from the store.
    pub fn from_bytes(bytes: [u8; 32]) -> TokenHash {
        TokenHash(bytes)
    }

    /// The hash's bytes, as the store keeps them.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The hash in lower-case hex (64 characters).
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }
}

impl PartialEq for TokenHash {
    fn eq(&self, other: &TokenHash) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for TokenHash {}

impl Hash for TokenHash {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenHash({}…)", hex(&self.0[..4]))
    }
}

/// A token whose text is well formed: its kind and its hash, ready for the store's lookup.
/// The text itself is not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    kind: TokenKind,
    hash: TokenHash,
}

impl Token {
    /// A new token of `kind`: its text, to show once, and its hash, to store.
    ///
    /// # Errors
    /// The OS gives no random numbers.
    pub fn generate(kind: TokenKind) -> Result<(PlaintextToken, TokenHash), Error> {
        let mut random: [u8; TOKEN_RANDOM_LEN] = random_bytes()?;
        let text = Token::text(kind, &random);
        random.zeroize();
        let hash = TokenHash::of(&text.text);
        Ok((text, hash))
    }

    /// The text of the token of `kind` carrying `random`.
    fn text(kind: TokenKind, random: &[u8; TOKEN_RANDOM_LEN]) -> PlaintextToken {
        let mut payload = [0u8; PAYLOAD_LEN];
        payload[..TOKEN_RANDOM_LEN].copy_from_slice(random);
        payload[TOKEN_RANDOM_LEN..].copy_from_slice(&checksum(kind, random));
        let mut text = String::with_capacity(kind.prefix().len() + TOKEN_BODY_LEN);
        text.push_str(kind.prefix());
        encode(&payload, &mut text);
        payload.zeroize();
        PlaintextToken { text }
    }

    /// Checks `text`'s prefix, length, alphabet and checksum, and hashes it.
    ///
    /// # Errors
    /// What is wrong with it; the message never repeats the text.
    pub fn parse(text: &str) -> Result<Token, TokenError> {
        let (kind, body) = TokenKind::ALL
            .into_iter()
            .find_map(|kind| text.strip_prefix(kind.prefix()).map(|body| (kind, body)))
            .ok_or(TokenError::UnknownPrefix)?;
        let found = body.chars().count();
        if found != TOKEN_BODY_LEN {
            return Err(TokenError::Length {
                prefix: kind.prefix(),
                expected: TOKEN_BODY_LEN,
                found,
            });
        }
        let mut payload = decode(body)?;
        let matches = payload
            .split_first_chunk::<TOKEN_RANDOM_LEN>()
            .is_some_and(|(random, sum)| checksum(kind, random)[..] == *sum);
        payload.zeroize();
        if !matches {
            return Err(TokenError::Checksum);
        }
        Ok(Token {
            kind,
            hash: TokenHash::of(text),
        })
    }

    /// The kind its prefix names.
    pub fn kind(&self) -> TokenKind {
        self.kind
    }

    /// Its hash, to look it up by.
    pub fn hash(&self) -> &TokenHash {
        &self.hash
    }
}

fn checksum(kind: TokenKind, random: &[u8; TOKEN_RANDOM_LEN]) -> [u8; CHECKSUM_LEN] {
    let digest = Sha256::new()
        .chain_update(kind.prefix().as_bytes())
        .chain_update(random)
        .finalize();
    let mut sum = [0u8; CHECKSUM_LEN];
    sum.copy_from_slice(&digest[..CHECKSUM_LEN]);
    sum
}

/// Appends `bytes` in lower-case base32 without padding.
fn encode(bytes: &[u8], out: &mut String) {
    let mut buffer: u16 = 0;
    let mut bits = 0;
    for &b in bytes {
        buffer = (buffer << 8) | u16::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[usize::from((buffer >> bits) & 0x1f)]));
        }
        buffer &= (1 << bits) - 1;
    }
    if bits > 0 {
        out.push(char::from(
            ALPHABET[usize::from((buffer << (5 - bits)) & 0x1f)],
        ));
    }
}

/// Decodes a body of exactly [`TOKEN_BODY_LEN`] base32 characters; unused trailing bits must
/// be zero (else [`TokenError::Checksum`]: the last character was mistyped).
fn decode(body: &str) -> Result<[u8; PAYLOAD_LEN], TokenError> {
    let mut out = [0u8; PAYLOAD_LEN];
    let mut n = 0;
    let mut buffer: u16 = 0;
    let mut bits = 0;
    for (i, c) in body.chars().enumerate() {
        let value = match c {
            'a'..='z' => c as u8 - b'a',
            '2'..='7' => c as u8 - b'2' + 26,
            _ => return Err(TokenError::Character { position: i + 1 }),
        };
        buffer = (buffer << 5) | u16::from(value);
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            let Some(slot) = out.get_mut(n) else {
                return Err(TokenError::Checksum);
            };
            *slot = ((buffer >> bits) & 0xff) as u8;
            n += 1;
            buffer &= (1 << bits) - 1;
        }
    }
    if n != PAYLOAD_LEN || buffer != 0 {
        return Err(TokenError::Checksum);
    }
    Ok(out)
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn generated_tokens_parse_to_their_kind_and_hash() {
        for kind in TokenKind::ALL {
            let (text, hash) = Token::generate(kind).unwrap();
            let t = text.expose();
            assert!(t.starts_with(kind.prefix()), "{t}");
            assert_eq!(t.len(), kind.prefix().len() + TOKEN_BODY_LEN);
            assert_eq!(TOKEN_BODY_LEN, 58);
            assert!(
                t[kind.prefix().len()..]
                    .bytes()
                    .all(|b| ALPHABET.contains(&b))
            );
            let token = Token::parse(t).unwrap();
            assert_eq!(token.kind(), kind);
            assert_eq!(*token.hash(), hash);
            assert_eq!(hash, TokenHash::of(t));
        }
    }

    #[test]
    fn tokens_differ() {
        let (a, ha) = Token::generate(TokenKind::Deploy).unwrap();
        let (b, hb) = Token::generate(TokenKind::Deploy).unwrap();
        assert_ne!(a.expose(), b.expose());
        assert_ne!(ha, hb);
    }

    #[test]
    fn the_hash_is_sha256_of_the_text() {
        // SHA-256("abc"), FIPS 180-2's example.
        assert_eq!(
            TokenHash::of("abc").to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let h = TokenHash::of("abc");
        assert_eq!(TokenHash::from_bytes(*h.as_bytes()), h);
        assert_eq!(format!("{h:?}"), "TokenHash(ba7816bf…)");
    }

    #[test]
    fn plaintext_is_redacted() {
        let (text, _) = Token::generate(TokenKind::Admin).unwrap();
        assert_eq!(format!("{text:?}"), "PlaintextToken(<redacted>)");
        let token = Token::parse(text.expose()).unwrap();
        let shown = format!("{token:?}");
        assert!(!shown.contains(&text.expose()[13..20]), "{shown}");
    }

    #[test]
    fn malformed_tokens_are_refused_with_a_clear_reason() {
        let (text, _) = Token::generate(TokenKind::Deploy).unwrap();
        let t = text.expose();
        let body = &t["runway_deploy_".len()..];

        let cases: Vec<(String, TokenError)> = vec![
            (String::new(), TokenError::UnknownPrefix),
            (format!("glpat-{body}"), TokenError::UnknownPrefix),
            (format!("RUNWAY_DEPLOY_{body}"), TokenError::UnknownPrefix),
            (
                t[..t.len() - 1].to_owned(),
                TokenError::Length {
                    prefix: "runway_deploy_",
                    expected: 58,
                    found: 57,
                },
            ),
            (
                format!("{t}a"),
                TokenError::Length {
                    prefix: "runway_deploy_",
                    expected: 58,
                    found: 59,
                },
            ),
            (
                format!("runway_deploy_A{}", &body[1..]),
                TokenError::Character { position: 1 },
            ),
            (
                format!("runway_deploy_{}1{}", &body[..9], &body[10..]),
                TokenError::Character { position: 10 },
            ),
            // Multi-byte characters are counted as characters.
            (
                format!("runway_deploy_{}é{}", &body[..20], &body[21..]),
                TokenError::Character { position: 21 },
            ),
            // The right body under the other kind's prefix.
            (format!("runway_admin_{body}"), TokenError::Checksum),
        ];
        for (input, expected) in cases {
            let err = Token::parse(&input).unwrap_err();
            assert_eq!(err, expected, "{input}");
            let msg = err.to_string();
            assert!(msg.starts_with("invalid token: "), "{msg}");
            if body.len() > 10 {
                assert!(!msg.contains(&body[..10]), "{msg}");
            }
        }
        assert_eq!(
            Token::parse("runway_admin_x").unwrap_err().to_string(),
            "invalid token: expected 58 characters after the `runway_admin_` prefix, found 1"
        );
    }

    #[test]
    fn every_single_character_typo_is_caught() {
        // Fixed bytes, so the test is deterministic (a random token's typo would pass with
        // probability 2^-32).
        let random: [u8; TOKEN_RANDOM_LEN] = std::array::from_fn(|i| (i * 37 + 11) as u8);
        let text = Token::text(TokenKind::Admin, &random);
        assert!(Token::parse(text.expose()).is_ok());
        let t = text.expose();
        let prefix = TokenKind::Admin.prefix().len();
        for i in prefix..t.len() {
            for &c in ALPHABET {
                if t.as_bytes()[i] == c {
                    continue;
                }
                let mut typo = t.as_bytes().to_vec();
                typo[i] = c;
                let typo = String::from_utf8(typo).unwrap();
                assert_eq!(Token::parse(&typo), Err(TokenError::Checksum), "{i}");
            }
        }
        // Two neighbours swapped.
        let mut swapped = t.as_bytes().to_vec();
        let i = (prefix..t.len() - 1)
            .find(|&i| swapped[i] != swapped[i + 1])
            .unwrap();
        swapped.swap(i, i + 1);
        assert_eq!(
            Token::parse(&String::from_utf8(swapped).unwrap()),
            Err(TokenError::Checksum)
        );
    }

    #[test]
    fn base32_matches_rfc_4648() {
        // RFC 4648 section 10, lower-cased, without padding.
        for (input, expected) in [
            ("", ""),
            ("f", "my"),
            ("fo", "mzxq"),
            ("foo", "mzxw6"),
            ("foob", "mzxw6yq"),
            ("fooba", "mzxw6ytb"),
            ("foobar", "mzxw6ytboi"),
        ] {
            let mut out = String::new();
            encode(input.as_bytes(), &mut out);
            assert_eq!(out, expected);
        }
    }

    proptest! {
        #[test]
        fn payloads_round_trip(payload in proptest::array::uniform32(any::<u8>()), sum in any::<[u8; 4]>()) {
            let mut bytes = [0u8; PAYLOAD_LEN];
            bytes[..32].copy_from_slice(&payload);
            bytes[32..].copy_from_slice(&sum);
            let mut text = String::new();
            encode(&bytes, &mut text);
            prop_assert_eq!(text.len(), TOKEN_BODY_LEN);
            prop_assert_eq!(decode(&text), Ok(bytes));
        }

        #[test]
        fn parse_never_panics(text in "\\PC{0,100}") {
            let _ = Token::parse(&text);
        }

        #[test]
        fn parse_never_panics_near_a_token(body in "[a-z2-7]{58}", kind in prop_oneof![Just(TokenKind::Admin), Just(TokenKind::Deploy)]) {
            // Random bodies have the right shape; almost none has a valid checksum.
            let text = format!("{}{body}", kind.prefix());
            if let Ok(token) = Token::parse(&text) {
                prop_assert_eq!(token.kind(), kind);
            }
        }
    }
}
