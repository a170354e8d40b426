//! The identity tokens' issuer as the API serves it: the discovery document, and the key set
//! from the store, without a credential, keys past their time left out.

use runway_store::{IdentityKey, Store, Timestamp};
use serde_json::json;

use crate::support::{ISSUER, start};

fn key(kid: &str, created_at: i64, expires_at: i64) -> IdentityKey {
    IdentityKey {
        kid: kid.to_owned(),
        nonce: vec![1; 24],
        ciphertext: vec![2; 40],
        public_jwk: json!({"kty": "EC", "crv": "P-256", "kid": kid, "x": "x", "y": "y"})
            .to_string(),
        created_at: Timestamp::from_unix_millis(created_at).unwrap(),
        expires_at: Timestamp::from_unix_millis(expires_at).unwrap(),
    }
}

#[tokio::test]
async fn discovery_and_the_key_set_need_no_credential_and_leave_out_expired_keys() {
    let server = start().await;
    let discovery = server
        .call("GET", "/.well-known/openid-configuration", None, None)
        .await;
    assert_eq!(discovery.status, 200, "{}", discovery.text);
    assert_eq!(discovery.body["issuer"], ISSUER);
    assert_eq!(
        discovery.body["jwks_uri"],
        format!("{ISSUER}/.well-known/jwks.json")
    );
    assert_eq!(
        discovery.body["id_token_signing_alg_values_supported"],
        json!(["ES256"])
    );

    let empty = server
        .call("GET", "/.well-known/jwks.json", None, None)
        .await;
    assert_eq!(
        (empty.status.as_u16(), &empty.body),
        (200, &json!({"keys": []}))
    );

    // Two keys kept, one of them since expired (a later add sweeps it from the store too).
    let now = Timestamp::now().unix_millis();
    let at = |millis: i64| Timestamp::from_unix_millis(millis).unwrap();
    server
        .store
        .identity_key_add(
            "test",
            &key("old", now - 10_000, now - 1_000),
            at(0),
            at(now - 20_000),
        )
        .unwrap();
    let kept = server
        .store
        .identity_key_add(
            "test",
            &key("new", now - 500, now + 60_000),
            at(now - 600),
            at(now),
        )
        .unwrap();
    assert_eq!(kept.kid, "new");
    // A replica racing this one keeps the newer key it finds, not its own.
    let raced = server
        .store
        .identity_key_add(
            "test",
            &key("raced", now, now + 60_000),
            at(now - 600),
            at(now),
        )
        .unwrap();
    assert_eq!(raced.kid, "new");
    let keys = server
        .call("GET", "/.well-known/jwks.json", None, None)
        .await;
    assert_eq!(keys.status, 200, "{}", keys.text);
    let kids: Vec<&str> = keys.body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert_eq!(kids, ["new"]);
}
