//! Routable tokens from a request's header: `decode` and the router's transforms return claims
//! or an error, never panic; claims a token decodes to encode again (with GitLab's keys and
//! `c` or `o`) to a token that decodes to them.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = routable_token::lines_claims(&text);
    let _ = routable_token::payload_claims(&text, data.first().map_or(0, |b| usize::from(*b)));
    if let Ok(claims) = routable_token::decode(&text) {
        if let Ok(token) = routable_token::encode("glrt-", &claims, &[0; 16]) {
            assert_eq!(routable_token::decode(&token).ok(), Some(claims));
        }
    }
});
