//! Hostile names, references and bodies: refused with the spec's codes, never a panic, a 5xx
//! or a path outside the registry's root.

use axum::body::Body;
use http::{Method, StatusCode};
use proptest::prelude::*;
use runway_registry::Digest;

use crate::support::{ADMIN, fixture, send, tree};

#[tokio::test]
async fn names_and_references_never_leave_the_root() {
    let f = fixture();
    let digest = Digest::of(b"payload");
    let cases = [
        ("/v2/../../etc/blobs/uploads/", "NAME_INVALID"),
        ("/v2/a/../../../tmp/blobs/uploads/", "NAME_INVALID"),
        ("/v2/%2e%2e/%2e%2e/blobs/uploads/", "NAME_INVALID"),
        ("/v2/%2Fetc/blobs/uploads/", "NAME_INVALID"),
        ("/v2//etc/blobs/uploads/", "NAME_INVALID"),
        ("/v2/Upper/blobs/uploads/", "NAME_INVALID"),
        ("/v2/a/_blobs/blobs/uploads/", "NAME_INVALID"),
        ("/v2/a%00b/blobs/uploads/", "NAME_INVALID"),
    ];
    for (uri, code) in cases {
        let uri = format!("{uri}?digest={digest}");
        let answer = send(&f.app, Method::POST, &uri, Some(ADMIN), &[], "payload").await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{uri}: {answer:?}");
        assert_eq!(answer.code(), code, "{uri}");
    }
    for (reference, code) in [
        ("..", "TAG_INVALID"),
        ("%2e%2e", "TAG_INVALID"),
        ("..%2F..%2Fescape", "TAG_INVALID"),
        ("sha256:..%2F..%2F..%2Fetc%2Fpasswd", "DIGEST_INVALID"),
        ("sha512:abcd", "DIGEST_INVALID"),
        (".hidden", "TAG_INVALID"),
    ] {
        let uri = format!("/v2/team/app/manifests/{reference}");
        let answer = send(
            &f.app,
            Method::PUT,
            &uri,
            Some(ADMIN),
            &[("content-type", runway_registry::OCI_MANIFEST)],
            "{}",
        )
        .await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{uri}: {answer:?}");
        assert_eq!(answer.code(), code, "{uri}");
    }
    let blob = send(
        &f.app,
        Method::GET,
        "/v2/team/app/blobs/sha256:..%2F..%2Fblobs",
        Some(ADMIN),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(blob.code(), "DIGEST_INVALID");
    // Nothing was written: not below the root, not beside it.
    assert!(tree(&f.root.join("repositories")).is_empty());
    assert!(tree(&f.root.join("blobs/sha256")).is_empty());
    let beside: Vec<_> = tree(f.dir.path())
        .into_iter()
        .filter(|p| !p.starts_with("registry"))
        .collect();
    assert!(beside.is_empty(), "{beside:?}");
    // An invalid name is only reported to an authenticated caller.
    let anonymous = send(
        &f.app,
        Method::GET,
        "/v2/../x/tags/list",
        None,
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
}

fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("..".to_string()),
        Just("%2e%2e".to_string()),
        Just("%2F".to_string()),
        Just("blobs".to_string()),
        Just("uploads".to_string()),
        Just("manifests".to_string()),
        Just("tags".to_string()),
        Just("list".to_string()),
        Just("referrers".to_string()),
        Just("_blobs".to_string()),
        Just("sha256:".to_string()),
        Just(Digest::of(b"fuzz").to_string()),
        Just("latest".to_string()),
        Just("".to_string()),
        "[a-zA-Z0-9._\\-:%]{1,12}",
    ]
}

fn request() -> impl Strategy<Value = (u8, Vec<String>, String, Vec<u8>, Option<String>)> {
    (
        0u8..6,
        prop::collection::vec(fragment(), 0..7),
        prop_oneof![
            Just(String::new()),
            Just(format!("?digest={}", Digest::of(b"fuzz"))),
            Just("?digest=sha256:zz".to_string()),
            Just("?mount=x&from=../../a".to_string()),
            Just("?n=-1&last=%00".to_string()),
            Just("?n=99999999999999999999999".to_string()),
            "\\?[a-z]{1,6}=[a-zA-Z0-9:%./]{0,20}",
        ],
        prop_oneof![
            Just(Vec::new()),
            Just(b"fuzz".to_vec()),
            Just(br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"x","digest":"sha256:../../x","size":-1}]}"#.to_vec()),
            Just(br#"{"schemaVersion":2,"config":null,"layers":[{"digest":7}]}"#.to_vec()),
            prop::collection::vec(any::<u8>(), 0..64),
        ],
        prop_oneof![
            Just(None),
            Just(Some("0-3".to_string())),
            Just(Some("5-1".to_string())),
            Just(Some("18446744073709551615-0".to_string())),
            Just(Some("0-18446744073709551615".to_string())),
            "[0-9a-z =-]{0,12}".prop_map(Some),
        ],
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn hostile_requests_get_an_answer_never_a_panic_or_a_5xx(cases in prop::collection::vec(request(), 1..6)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let f = fixture();
            for (method, segments, query, body, range) in cases {
                let method = [Method::GET, Method::HEAD, Method::POST, Method::PATCH, Method::PUT, Method::DELETE][usize::from(method)].clone();
                let uri = format!("/v2/{}{query}", segments.join("/"));
                let Ok(parsed) = uri.parse::<http::Uri>() else { continue };
                let mut headers = vec![("content-type", runway_registry::OCI_MANIFEST)];
                if let Some(range) = range.as_deref() {
                    headers.push(("content-range", range));
                }
                let answer = send(&f.app, method.clone(), &parsed.to_string(), Some(ADMIN), &headers, body).await;
                prop_assert!(answer.status.as_u16() < 500, "{method} {uri}: {answer:?}");
                if !answer.status.is_success() && method != Method::HEAD && answer.status != StatusCode::NOT_FOUND {
                    prop_assert!(!answer.code().is_empty(), "{method} {uri}: no OCI error body: {answer:?}");
                }
            }
            let beside: Vec<_> = tree(f.dir.path()).into_iter().filter(|p| !p.starts_with("registry")).collect();
            prop_assert!(beside.is_empty(), "{beside:?}");
            Ok(())
        })?;
    }
}
