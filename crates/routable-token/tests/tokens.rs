//! Routable tokens against GitLab's own: its fixture decodes to its claims and encodes back
//! to the same bytes; every refusal GitLab makes is made, by name; encode then decode is the
//! identity, and no input panics the decoder.

#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use routable_token::{
    ClaimValue, Claims, RANDOM_BYTES, TokenError, base36, decode, encode, lines_claims,
    payload_claims,
};

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
    assert_eq!(claims.number("c"), Ok(Some(0)));
    assert_eq!(claims.number("o"), Ok(Some(35)));
    assert_eq!(claims.number("u"), Ok(Some(36)));
    assert_eq!(claims.number("g"), Ok(None));
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
    assert_eq!(claims.number("s"), Ok(Some(5)));
    assert_eq!(claims.number("c"), Ok(Some(1)));
}

/// GitLab's decoder spec (`spec/lib/authn/token_field/decoders/v1/routable_payload_spec.rb`):
/// a token whose checksum holds but whose payload is empty ("when token payload is empty
/// hash") decodes to `nil`, as does one whose lines are not `key:value` ("just an array, not
/// a hash"). Both are its fixtures, with the checksum its spec appends (`crc_of`).
#[test]
fn gitlabs_tokens_without_claims_are_not_routable_tokens() {
    let empty = "glrtr-8CLoDbhWwqW3qiRbgpHYEwA.01.0n00i4flb";
    assert_eq!(decode(empty), Err(TokenError::NoClaims));
    assert_eq!(
        decode(empty).unwrap_err().to_string(),
        "the token's payload holds no claims: GitLab does not read it as a routable token"
    );
    // Its payload `a\nx\n1\n2`.
    let array = "glrtr-igz7z_MRijGFhUQwq0FCzWEKeAoxCjIH.01.0w1tpko2z";
    assert_eq!(decode(array), Err(TokenError::Line { line: 1 }));
    // Blank lines alone are no claims either (GitLab drops them: `filter(&:present?)`), and
    // among claims they are skipped.
    for blank in ["", "\n", "\n \n\t"] {
        let text = forge(blank);
        assert_eq!(
            payload_claims(&text, text.len()),
            Err(TokenError::NoClaims),
            "{blank:?}"
        );
        assert_eq!(lines_claims(blank), Err(TokenError::NoClaims));
    }
    assert_eq!(
        lines_claims("c:1\n \no:2").unwrap(),
        Claims::new().with("c", 1).with("o", 2)
    );
}

/// A token as GitLab's generator writes one for `o: <a 157-digit integer>` (Ruby's
/// `Integer#to_s(36)` has no size limit; `o:` and 157 digits are the 159 bytes a payload may
/// hold), with its spec's random bytes (`'a' * 16`), no cell configured and prefix `glrt-`.
const GITLAB_BIG: &str = "glrt-YWFhYWFhYWFhYWFhYWFhYW86MTdpZThjeHg3eTM0dWNkZHJzNDlqdjZmemJ6NXQ1OWxudWZudzhsOXUwbjM1NXJ0MG15aWhia2tjdTIyMXAyMmtjcGY3M2J4bzhlbDJ5aGFvdG1pZjQ2bHB0cG0wODhnZnU3YTRhY2d4Zmc2dHBqOXhxa3prcjdjMDNnYTY1NTJwbGwzcGVqaHMyOXN4ZHhobWp1cjBvOHZvbTh0dZ8.01.6j1hv4h3j";
const BIG_BASE36: &str = "17ie8cxx7y34ucddrs49jv6fzbz5t59lnufnw8l9u0n355rt0myihbkkcu221p22kcpf73bxo8el2yhaotmif46lptpm088gfu7a4acgxfg6tpj9xqkzkr7c03ga6552pll3pejhs29sxdxhmjur0o8vom8tu";
/// The same number in decimal, as Ruby (and Python) print it.
const BIG_DECIMAL: &str = "733645909367111002931655980417849705729594930460613725976795762650674739400237860114782249613696983067203973551342915299545565455740603651498640016094152521164906946060931085319499191699616751698034424468894855650509470214198445890857893317170";

#[test]
fn a_claim_of_any_size_gitlab_writes_decodes_and_encodes_back() {
    assert_eq!(BIG_BASE36.len(), 157);
    let claims = decode(GITLAB_BIG).unwrap();
    let o = claims.get("o").unwrap();
    assert_eq!(o.base36(), BIG_BASE36);
    assert_eq!(o.decimal(), BIG_DECIMAL);
    assert_eq!(o.to_string(), BIG_DECIMAL);
    assert_eq!(o.to_u64(), None);
    assert_eq!(claims.to_string(), format!("o={BIG_DECIMAL}"));
    // Where a number is needed, an error naming the claim.
    let error = claims.number("o").unwrap_err();
    assert_eq!(
        error,
        TokenError::TooLarge {
            key: "o".into(),
            digits: 157
        }
    );
    assert!(error.to_string().contains("claim `o`"), "{error}");
    // Encoded again: GitLab's bytes.
    assert_eq!(encode("glrt-", &claims, &[b'a'; 16]).unwrap(), GITLAB_BIG);
    assert_eq!(
        ClaimValue::from_decimal(BIG_DECIMAL).unwrap().base36(),
        BIG_BASE36
    );
    // A byte more is over GitLab's limit: its generator's refusal, "Routing payload is too
    // big: 160" (its spec's `o: 'a' * 158`; a value alone is never that long here, so with
    // another claim).
    let over = Claims::new()
        .with("c", 1)
        .with_value("o", ClaimValue::from_base36(&"a".repeat(154)).unwrap());
    assert_eq!(
        encode("", &over, &[0; 16]),
        Err(TokenError::PayloadTooBig { len: 160 })
    );
    // Upper case and leading zeros read as GitLab's `to_i(36)` reads them; u64's edges.
    let text = forge("c:00Rz\no:3w5e11264sgsf\nu:3w5e11264sgsg");
    let claims = payload_claims(&text, text.len()).unwrap();
    assert_eq!(claims.number("c"), Ok(Some(1007)));
    assert_eq!(claims.get("c").unwrap().base36(), "rz");
    assert_eq!(claims.number("o"), Ok(Some(u64::MAX)));
    assert_eq!(claims.get("u").unwrap().decimal(), "18446744073709551616");
    assert_eq!(ClaimValue::from_base36("000").unwrap().decimal(), "0");
    assert_eq!(ClaimValue::from_decimal("0").unwrap().base36(), "0");
    assert_eq!(ClaimValue::from_base36("1-2"), None);
    assert_eq!(ClaimValue::from_decimal("1a"), None);
    // No longer than a token holds (a `base64-line-delimited` transform has no payload
    // limit: a long value costs no long conversion).
    assert!(ClaimValue::from_base36(&"z".repeat(157)).is_some());
    assert_eq!(ClaimValue::from_base36(&"z".repeat(158)), None);
    assert_eq!(
        lines_claims(&format!("c:{}", "1".repeat(10_000))),
        Err(TokenError::Value { key: "c".into() })
    );
    let most = ClaimValue::from_base36(&"z".repeat(157)).unwrap().decimal();
    assert_eq!(
        ClaimValue::from_decimal(&most).unwrap().base36(),
        "z".repeat(157)
    );
    assert_eq!(most.len(), 245);
    assert!(ClaimValue::from_decimal(&format!("0000{most}")).is_some());
    // 36^157, the first number of 158 base-36 digits: 245 decimal digits, refused; and a
    // longer decimal refused unread.
    let mut one_more = most.into_bytes();
    for digit in one_more.iter_mut().rev() {
        if *digit == b'9' {
            *digit = b'0';
        } else {
            *digit += 1;
            break;
        }
    }
    let one_more = String::from_utf8(one_more).unwrap();
    assert_eq!(one_more.len(), 245);
    assert_eq!(ClaimValue::from_decimal(&one_more), None);
    assert_eq!(ClaimValue::from_decimal(&"1".repeat(246)), None);
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
            prop_oneof![
                any::<u64>().prop_map(ClaimValue::from),
                // Beyond 64 bits too: GitLab writes an integer of any size.
                "[1-9a-z][0-9a-z]{0,29}".prop_map(|d| ClaimValue::from_base36(&d).unwrap()),
            ],
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
                claims.insert_value(key, value);
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
    fn a_value_is_the_same_number_in_base_36_and_in_decimal(
        n in any::<u64>(),
        digits in "[0-9]{1,244}",
    ) {
        let value = ClaimValue::from(n);
        prop_assert_eq!(value.base36(), base36(n));
        prop_assert_eq!(value.decimal(), n.to_string());
        prop_assert_eq!(ClaimValue::from_decimal(&n.to_string()).unwrap(), value.clone());
        prop_assert_eq!(ClaimValue::from_base36(&base36(n).to_uppercase()).unwrap(), value);
        let big = ClaimValue::from_decimal(&digits).unwrap();
        let canonical = digits.trim_start_matches('0');
        prop_assert_eq!(big.decimal(), if canonical.is_empty() { "0" } else { canonical });
        prop_assert_eq!(ClaimValue::from_base36(big.base36()).unwrap(), big);
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
