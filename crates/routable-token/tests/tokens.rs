//! Routable tokens against GitLab's own: its fixture decodes to its claims and encodes back
//! to the same bytes; every refusal GitLab makes is made, by name; encode then decode is the
//! identity, and no input panics the decoder.

#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use routable_token::{Claims, RANDOM_BYTES, TokenError, base36, decode, encode, payload_claims};

/// GitLab's own test fixture (a runner registered with a registration token).
const GITLAB: &str = "glrtr-W5m1cHR6skC98Bx7XkuYjmM6MQpnOjgKbzpyegp0OjIQ.01.181uebm4k";

fn gitlab_claims() -> Claims {
    Claims::new()
        .with("c", 1)
        .with("g", 8)
        .with("o", 1007)
        .with("t", 2)
}

/// The fixture's random bytes: the first 16 of its base64.
fn gitlab_random() -> [u8; RANDOM_BYTES] {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode("W5m1cHR6skC98Bx7XkuYjmM6MQpnOjgKbzpyegp0OjIQ")
        .unwrap();
    bytes[..RANDOM_BYTES].try_into().unwrap()
}

#[test]
fn gitlabs_fixture_decodes_to_its_claims_and_encodes_to_the_same_bytes() {
    assert_eq!(decode(GITLAB).unwrap(), gitlab_claims());
    assert_eq!(
        encode("glrtr-", &gitlab_claims(), &gitlab_random()).unwrap(),
        GITLAB
    );
    assert_eq!(gitlab_claims().to_string(), "c=1 g=8 o=1007 t=2");
}

#[test]
fn the_payload_is_sorted_base_36_lines_and_zero_is_kept() {
    let token = encode(
        "",
        &Claims::new().with("o", 35).with("c", 0).with("u", 36),
        &[0; 16],
    )
    .unwrap();
    let claims = decode(&token).unwrap();
    assert_eq!(claims.get("c"), Some(0));
    assert_eq!(claims.get("o"), Some(35));
    assert_eq!(claims.get("u"), Some(36));
    // The payload text itself, behind the random bytes.
    use base64::Engine as _;
    let b64 = token.split('.').next().unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(b64)
        .unwrap();
    assert_eq!(&bytes[16..bytes.len() - 1], b"c:0\no:z\nu:10");
    assert_eq!(usize::from(*bytes.last().unwrap()), bytes.len() - 17);
    assert_eq!(base36(1007), "rz");
}

#[test]
fn refusals_name_what_is_wrong_and_never_echo_the_token() {
    let random = [7; 16];
    // Encoding: a key GitLab does not define, neither c nor o, a payload over 159 bytes.
    assert_eq!(
        encode("glrt-", &Claims::new().with("c", 1).with("x", 2), &random),
        Err(TokenError::UnknownKey { key: "x".into() })
    );
    assert_eq!(
        encode("glrt-", &Claims::new().with("g", 1), &random),
        Err(TokenError::NoRoutingKey)
    );
    let big = ["c", "o", "g", "p", "u", "t"]
        .iter()
        .fold(Claims::new(), |claims, key| claims.with(key, u64::MAX));
    // Six claims of 13 base-36 digits: 6 × 15 + 5 = 95 bytes, within the limit.
    assert!(encode("", &big, &random).is_ok());
    let too_big = "c:1\n".repeat(40);
    let error = payload_claims(&forge(&too_big), forge(&too_big).len()).unwrap_err();
    assert_eq!(error, TokenError::PayloadTooBig { len: too_big.len() });
    assert_eq!(
        error.to_string(),
        "the routing payload is too big: 160 bytes; at most 159"
    );
    assert!(matches!(
        encode("gl.rt-", &gitlab_claims(), &random),
        Err(TokenError::Prefix { .. })
    ));

    // Decoding: one character changed, one missing, a length that does not fit.
    let mut changed = GITLAB.to_owned();
    changed.replace_range(10..11, "x");
    assert_eq!(decode(&changed), Err(TokenError::Checksum));
    assert_eq!(decode(&GITLAB[1..]), Err(TokenError::Checksum));
    assert_eq!(decode("short"), Err(TokenError::TooShort { len: 5 }));
    let long = with_crc("glrt-abc.01.zz");
    assert_eq!(
        decode(&long),
        Err(TokenError::Length {
            declared: 1295,
            available: 8
        })
    );
    assert_eq!(decode(&with_crc("glrt-abc")), Err(TokenError::Parts));
    for wrong in [&changed, &long] {
        let text = decode(wrong).unwrap_err().to_string();
        assert!(!text.contains("glrt"), "{text}");
    }
    // A payload line without `:`, a value not base 36.
    let line = forge("c:1\nnocolon");
    assert_eq!(
        payload_claims(&line, line.len()),
        Err(TokenError::Line { line: 2 })
    );
    let value = forge("c:1-2");
    assert_eq!(
        payload_claims(&value, value.len()),
        Err(TokenError::Value { key: "c".into() })
    );
}

#[test]
fn a_claim_a_later_gitlab_adds_is_kept_when_decoding() {
    let text = forge("c:1\ns:5");
    let claims = payload_claims(&text, text.len()).unwrap();
    assert_eq!(claims.get("s"), Some(5));
    assert_eq!(claims.get("c"), Some(1));
}

/// The base64 of 16 zero bytes, `payload` and its length byte (which may not fit: the
/// decoder does not read it).
fn forge(payload: &str) -> String {
    use base64::Engine as _;
    let mut bytes = vec![0u8; 16];
    bytes.extend_from_slice(payload.as_bytes());
    bytes.push(payload.len().min(255) as u8);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `body` with its checksum.
fn with_crc(body: &str) -> String {
    format!(
        "{body}{:0>7}",
        base36(u64::from(crc32fast::hash(body.as_bytes())))
    )
}

fn claims_strategy() -> impl Strategy<Value = Claims> {
    (
        proptest::option::of(any::<u64>()),
        proptest::option::of(any::<u64>()),
        proptest::collection::btree_map(
            prop::sample::select(vec!["g", "p", "u", "t"]),
            any::<u64>(),
            0..4,
        ),
    )
        .prop_filter("c or o", |(c, o, _)| c.is_some() || o.is_some())
        .prop_map(|(c, o, rest)| {
            let mut claims = Claims::new();
            if let Some(c) = c {
                claims.insert("c", c);
            }
            if let Some(o) = o {
                claims.insert("o", o);
            }
            for (key, value) in rest {
                claims.insert(key, value);
            }
            claims
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn encode_then_decode_is_the_identity(
        prefix in "[a-z_-]{0,12}",
        claims in claims_strategy(),
        random in any::<[u8; 16]>(),
    ) {
        let token = encode(&prefix, &claims, &random).unwrap();
        prop_assert!(token.starts_with(&prefix));
        prop_assert_eq!(decode(&token).unwrap(), claims);
    }

    #[test]
    fn no_input_panics_the_decoder(input in ".{0,400}") {
        let _ = decode(&input);
        let _ = payload_claims(&input, input.len() / 2);
    }

    #[test]
    fn a_changed_character_is_caught(
        claims in claims_strategy(),
        at in any::<prop::sample::Index>(),
        to in "[0-9A-Za-z_.-]",
    ) {
        let token = encode("glrt-", &claims, &[3; 16]).unwrap();
        let at = at.index(token.len());
        let mut changed = token.clone();
        changed.replace_range(at..=at, &to);
        if changed != token {
            prop_assert!(decode(&changed).is_err(), "{changed} decoded");
        }
    }
}
