//! Each rule of the API, driven through the router in-process.

use std::time::Duration;

use axum::body::Body;
use http::{Method, StatusCode};
use runway_registry::{Digest, Limits, OCI_INDEX, OCI_MANIFEST, RegistryError};
use serde_json::json;

use crate::support::{
    ADMIN, ALICE, BOB, CONFIG_TYPE, LAYER_TYPE, READER, descriptor, fixture, fixture_with,
    image_manifest, push_blob, push_image, send, tree,
};

#[tokio::test]
async fn base_asks_for_basic_credentials() {
    let f = fixture();
    let anonymous = send(&f.app, Method::GET, "/v2/", None, &[], Body::empty()).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        anonymous.header("www-authenticate"),
        "Basic realm=\"runway\""
    );
    assert_eq!(anonymous.code(), "UNAUTHORIZED");
    let wrong = send(
        &f.app,
        Method::GET,
        "/v2/",
        Some("admin:nope"),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    let ok = send(&f.app, Method::GET, "/v2/", Some(BOB), &[], Body::empty()).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(&ok.body[..], b"{}");
    assert_eq!(ok.header("docker-distribution-api-version"), "registry/2.0");

    // Every route: unauthenticated is 401, out of scope is 403.
    let digest = Digest::of(b"x");
    for uri in [
        format!("/v2/alice/app/blobs/{digest}"),
        "/v2/alice/app/manifests/latest".to_string(),
        "/v2/alice/app/tags/list".to_string(),
        format!("/v2/alice/app/referrers/{digest}"),
    ] {
        let anonymous = send(&f.app, Method::GET, &uri, None, &[], Body::empty()).await;
        assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED, "{uri}");
        assert_eq!(
            anonymous.header("www-authenticate"),
            "Basic realm=\"runway\""
        );
        let denied = send(&f.app, Method::GET, &uri, Some(BOB), &[], Body::empty()).await;
        assert_eq!(denied.status, StatusCode::FORBIDDEN, "{uri}");
        assert_eq!(denied.code(), "DENIED");
    }
    let push = send(
        &f.app,
        Method::POST,
        "/v2/alice/app/blobs/uploads/",
        Some(READER),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(push.status, StatusCode::FORBIDDEN, "a reader cannot push");
}

#[tokio::test]
async fn monolithic_upload_then_head_and_get() {
    let f = fixture();
    let digest = push_blob(&f.app, ALICE, "alice/app", b"hello blob").await;
    let head = send(
        &f.app,
        Method::HEAD,
        &format!("/v2/alice/app/blobs/{digest}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(head.header("content-length"), "10");
    assert_eq!(head.header("docker-content-digest"), digest.to_string());
    assert!(head.body.is_empty());
    let get = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/app/blobs/{digest}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(get.status, StatusCode::OK);
    assert_eq!(&get.body[..], b"hello blob");
    assert_eq!(get.header("docker-content-digest"), digest.to_string());
    let range = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/app/blobs/{digest}"),
        Some(ALICE),
        &[("range", "bytes=6-")],
        Body::empty(),
    )
    .await;
    assert_eq!(range.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(range.header("content-range"), "bytes 6-9/10");
    assert_eq!(&range.body[..], b"blob");
    let past = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/app/blobs/{digest}"),
        Some(ALICE),
        &[("range", "bytes=10-")],
        Body::empty(),
    )
    .await;
    assert_eq!(past.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(past.header("content-range"), "bytes */10");
    let missing = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/app/blobs/{}", Digest::of(b"no")),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.code(), "BLOB_UNKNOWN");
}

#[tokio::test]
async fn chunked_upload_in_order_with_status_and_a_last_chunk() {
    let f = fixture();
    let start = send(
        &f.app,
        Method::POST,
        "/v2/alice/app/blobs/uploads/",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(start.status, StatusCode::ACCEPTED);
    assert_eq!(start.header("range"), "0-0");
    let id = start.header("docker-upload-uuid").to_string();
    let location = start.header("location").to_string();
    assert_eq!(location, format!("/v2/alice/app/blobs/uploads/{id}"));

    let first = send(
        &f.app,
        Method::PATCH,
        &location,
        Some(ALICE),
        &[("content-range", "0-4"), ("content-length", "5")],
        "01234",
    )
    .await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{first:?}");
    assert_eq!(first.header("range"), "0-4");
    assert_eq!(first.header("location"), location);

    let out_of_order = send(
        &f.app,
        Method::PATCH,
        &location,
        Some(ALICE),
        &[("content-range", "10-14")],
        "abcde",
    )
    .await;
    assert_eq!(out_of_order.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(out_of_order.code(), "BLOB_UPLOAD_INVALID");
    let again = send(
        &f.app,
        Method::PATCH,
        &location,
        Some(ALICE),
        &[("content-range", "0-4")],
        "01234",
    )
    .await;
    assert_eq!(
        again.status,
        StatusCode::RANGE_NOT_SATISFIABLE,
        "a chunk sent twice"
    );

    let status = send(
        &f.app,
        Method::GET,
        &location,
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(status.status, StatusCode::NO_CONTENT);
    assert_eq!(
        status.header("range"),
        "0-4",
        "the refused chunks left nothing"
    );

    // A streamed chunk, without Content-Range or Content-Length.
    let stream = futures_stream(vec![b"567".to_vec(), b"89".to_vec()]);
    let second = send(&f.app, Method::PATCH, &location, Some(ALICE), &[], stream).await;
    assert_eq!(second.status, StatusCode::ACCEPTED);
    assert_eq!(second.header("range"), "0-9");

    let digest = Digest::of(b"0123456789last");
    let put = send(
        &f.app,
        Method::PUT,
        &format!("{location}?digest={digest}"),
        Some(ALICE),
        &[("content-range", "10-13")],
        "last",
    )
    .await;
    assert_eq!(put.status, StatusCode::CREATED, "{put:?}");
    assert_eq!(
        put.header("location"),
        format!("/v2/alice/app/blobs/{digest}")
    );
    assert_eq!(put.header("docker-content-digest"), digest.to_string());
    let get = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/app/blobs/{digest}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(&get.body[..], b"0123456789last");
    let gone = send(
        &f.app,
        Method::GET,
        &location,
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(gone.code(), "BLOB_UPLOAD_UNKNOWN");
    assert!(tree(&f.root.join("uploads")).is_empty());
    assert!(tree(&f.root.join("tmp")).is_empty());
}

fn futures_stream(chunks: Vec<Vec<u8>>) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        for chunk in chunks {
            let _ = tx.send(Ok(bytes::Bytes::from(chunk))).await;
        }
    });
    Body::from_stream(tokio_stream(rx))
}

/// An mpsc receiver as a stream (no tokio-stream dependency).
fn tokio_stream(
    mut rx: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, std::io::Error>>,
) -> impl futures_core_stream::Stream<Item = Result<bytes::Bytes, std::io::Error>> {
    futures_core_stream::poll_fn(move |cx| rx.poll_recv(cx))
}

mod futures_core_stream {
    //! The little of `futures` the tests need: a stream from a poll function.
    pub use futures_util::Stream;
    pub use futures_util::stream::poll_fn;
}

#[tokio::test]
async fn put_without_a_last_chunk_and_cancel() {
    let f = fixture();
    let start = send(
        &f.app,
        Method::POST,
        "/v2/alice/app/blobs/uploads/",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    let location = start.header("location").to_string();
    send(&f.app, Method::PATCH, &location, Some(ALICE), &[], "abc").await;
    let digest = Digest::of(b"abc");
    let put = send(
        &f.app,
        Method::PUT,
        &format!("{location}?digest={digest}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(put.status, StatusCode::CREATED);

    let start = send(
        &f.app,
        Method::POST,
        "/v2/alice/app/blobs/uploads/",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    let location = start.header("location").to_string();
    send(
        &f.app,
        Method::PATCH,
        &location,
        Some(ALICE),
        &[],
        "partial",
    )
    .await;
    let cancel = send(
        &f.app,
        Method::DELETE,
        &location,
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(cancel.status, StatusCode::NO_CONTENT);
    let status = send(
        &f.app,
        Method::GET,
        &location,
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(status.code(), "BLOB_UPLOAD_UNKNOWN");
    assert!(tree(&f.root.join("uploads")).is_empty());
}

#[tokio::test]
async fn a_digest_mismatch_leaves_nothing() {
    let f = fixture();
    let claimed = Digest::of(b"what I say");
    let mono = send(
        &f.app,
        Method::POST,
        &format!("/v2/alice/app/blobs/uploads/?digest={claimed}"),
        Some(ALICE),
        &[],
        "what I send",
    )
    .await;
    assert_eq!(mono.status, StatusCode::BAD_REQUEST);
    assert_eq!(mono.code(), "DIGEST_INVALID");

    let start = send(
        &f.app,
        Method::POST,
        "/v2/alice/app/blobs/uploads/",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    let location = start.header("location").to_string();
    send(
        &f.app,
        Method::PATCH,
        &location,
        Some(ALICE),
        &[],
        "what I send",
    )
    .await;
    let put = send(
        &f.app,
        Method::PUT,
        &format!("{location}?digest={claimed}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(put.status, StatusCode::BAD_REQUEST);
    assert_eq!(put.code(), "DIGEST_INVALID");
    let status = send(
        &f.app,
        Method::GET,
        &location,
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(status.code(), "BLOB_UPLOAD_UNKNOWN", "the session ended");
    for dir in ["blobs/sha256", "uploads", "tmp", "repositories"] {
        assert!(
            tree(&f.root.join(dir)).is_empty(),
            "{dir}: {:?}",
            tree(&f.root.join(dir))
        );
    }
    let bad = send(
        &f.app,
        Method::PUT,
        &format!("{location}?digest=sha256:short"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(bad.code(), "DIGEST_INVALID");
}

#[tokio::test]
async fn a_blob_over_the_limit_is_refused_and_removed() {
    let f = fixture_with(Limits {
        max_blob_bytes: 8,
        ..Limits::default()
    });
    // Announced too large.
    let start = send(
        &f.app,
        Method::POST,
        "/v2/alice/app/blobs/uploads/",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    let location = start.header("location").to_string();
    let announced = send(
        &f.app,
        Method::PATCH,
        &location,
        Some(ALICE),
        &[("content-length", "9")],
        "123456789",
    )
    .await;
    assert_eq!(announced.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(announced.code(), "SIZE_INVALID");
    // Streamed past the limit over two chunks.
    let start = send(
        &f.app,
        Method::POST,
        "/v2/alice/app/blobs/uploads/",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    let location = start.header("location").to_string();
    let ok = send(&f.app, Method::PATCH, &location, Some(ALICE), &[], "12345").await;
    assert_eq!(ok.status, StatusCode::ACCEPTED);
    let over = send(
        &f.app,
        Method::PATCH,
        &location,
        Some(ALICE),
        &[],
        futures_stream(vec![b"67".to_vec(), b"89".to_vec()]),
    )
    .await;
    assert_eq!(over.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        send(
            &f.app,
            Method::GET,
            &location,
            Some(ALICE),
            &[],
            Body::empty()
        )
        .await
        .code(),
        "BLOB_UPLOAD_UNKNOWN"
    );
    // Monolithic.
    let mono = send(
        &f.app,
        Method::POST,
        &format!(
            "/v2/alice/app/blobs/uploads/?digest={}",
            Digest::of(b"123456789")
        ),
        Some(ALICE),
        &[],
        "123456789",
    )
    .await;
    assert_eq!(mono.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(tree(&f.root.join("uploads")).is_empty());
    assert!(tree(&f.root.join("blobs/sha256")).is_empty());
}

#[tokio::test]
async fn a_full_disk_is_a_5xx_and_leaves_no_blob() {
    if !std::path::Path::new("/dev/full").exists() {
        crate::support::skip("no /dev/full to stand for a full disk");
        return;
    }
    let f = fixture();
    let start = send(
        &f.app,
        Method::POST,
        "/v2/alice/app/blobs/uploads/",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    let id = start.header("docker-upload-uuid").to_string();
    let location = start.header("location").to_string();
    // The upload's file now writes to /dev/full: every write fails with ENOSPC.
    let data = f.root.join("uploads").join(&id);
    std::fs::remove_file(&data).unwrap();
    std::os::unix::fs::symlink("/dev/full", &data).unwrap();
    let patch = send(
        &f.app,
        Method::PATCH,
        &location,
        Some(ALICE),
        &[],
        "doomed bytes",
    )
    .await;
    assert_eq!(patch.status, StatusCode::INSUFFICIENT_STORAGE, "{patch:?}");
    assert_eq!(patch.code(), "UNKNOWN");
    assert!(
        !String::from_utf8_lossy(&patch.body).contains(&f.root.display().to_string()),
        "no paths in answers"
    );
    assert_eq!(
        send(
            &f.app,
            Method::GET,
            &location,
            Some(ALICE),
            &[],
            Body::empty()
        )
        .await
        .code(),
        "BLOB_UPLOAD_UNKNOWN"
    );
    let blob = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/app/blobs/{}", Digest::of(b"doomed bytes")),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(blob.status, StatusCode::NOT_FOUND);
    assert!(tree(&f.root.join("uploads")).is_empty());
    assert!(tree(&f.root.join("blobs/sha256")).is_empty());
}

/// A chunk cut short in the middle of its write (its client went away) can leave bytes past
/// what was hashed in the upload's file; the next chunk starts where the hash ended, so the
/// blob holds exactly the bytes its digest names.
#[tokio::test]
async fn bytes_past_a_torn_chunk_never_reach_the_blob() {
    let f = fixture();
    let start = send(
        &f.app,
        Method::POST,
        "/v2/alice/app/blobs/uploads/",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    let id = start.header("docker-upload-uuid").to_string();
    let location = start.header("location").to_string();
    let first = send(&f.app, Method::PATCH, &location, Some(ALICE), &[], "abc").await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{first:?}");
    let location = first.header("location").to_string();
    // What a torn write leaves: bytes the session never hashed.
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .append(true)
        .open(f.root.join("uploads").join(&id))
        .unwrap()
        .write_all(b"TORN")
        .unwrap();
    let digest = Digest::of(b"abcdef");
    let sep = if location.contains('?') { '&' } else { '?' };
    let done = send(
        &f.app,
        Method::PUT,
        &format!("{location}{sep}digest={digest}"),
        Some(ALICE),
        &[],
        "def",
    )
    .await;
    assert_eq!(done.status, StatusCode::CREATED, "{done:?}");
    let blob = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/app/blobs/{digest}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(blob.body.as_ref(), b"abcdef");
}

#[tokio::test]
async fn a_tenant_cannot_read_another_tenants_blob_by_digest() {
    let f = fixture();
    let secret = push_blob(&f.app, ALICE, "alice/app", b"alice's secret layer").await;
    // Bob knows the digest; his own repository has no link to it.
    let by_digest = send(
        &f.app,
        Method::GET,
        &format!("/v2/bob/app/blobs/{secret}"),
        Some(BOB),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(by_digest.status, StatusCode::NOT_FOUND);
    assert_eq!(by_digest.code(), "BLOB_UNKNOWN");
    let head = send(
        &f.app,
        Method::HEAD,
        &format!("/v2/bob/app/blobs/{secret}"),
        Some(BOB),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(head.status, StatusCode::NOT_FOUND);
    let direct = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/app/blobs/{secret}"),
        Some(BOB),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(direct.status, StatusCode::FORBIDDEN);
    // A mount from a repository Bob may not pull is an ordinary upload, and links nothing.
    let mount = send(
        &f.app,
        Method::POST,
        &format!("/v2/bob/app/blobs/uploads/?mount={secret}&from=alice/app"),
        Some(BOB),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(mount.status, StatusCode::ACCEPTED);
    assert!(!mount.header("docker-upload-uuid").is_empty());
    let still = send(
        &f.app,
        Method::GET,
        &format!("/v2/bob/app/blobs/{secret}"),
        Some(BOB),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(still.status, StatusCode::NOT_FOUND);
    // A manifest in Bob's repository naming Alice's layer is refused too.
    let config = b"{}";
    push_blob(&f.app, BOB, "bob/app", config).await;
    let manifest = json!({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": descriptor(CONFIG_TYPE, config),
        "layers": [{ "mediaType": LAYER_TYPE, "digest": secret, "size": 20 }],
    });
    let put = send(
        &f.app,
        Method::PUT,
        "/v2/bob/app/manifests/v1",
        Some(BOB),
        &[("content-type", OCI_MANIFEST)],
        manifest.to_string(),
    )
    .await;
    assert_eq!(put.code(), "MANIFEST_BLOB_UNKNOWN");
    // Anonymous mount (no `from`): never.
    let anonymous = send(
        &f.app,
        Method::POST,
        &format!("/v2/bob/app/blobs/uploads/?mount={secret}"),
        Some(BOB),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(anonymous.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_mount_from_a_readable_repository_links_the_blob() {
    let f = fixture();
    let digest = push_blob(&f.app, ALICE, "alice/base", b"shared base layer").await;
    let mount = send(
        &f.app,
        Method::POST,
        &format!("/v2/alice/app/blobs/uploads/?mount={digest}&from=alice/base"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(mount.status, StatusCode::CREATED);
    assert_eq!(
        mount.header("location"),
        format!("/v2/alice/app/blobs/{digest}")
    );
    assert_eq!(mount.header("docker-content-digest"), digest.to_string());
    let get = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/app/blobs/{digest}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(&get.body[..], b"shared base layer");
    // From a repository that does not have it: an upload.
    let other = Digest::of(b"nowhere");
    let miss = send(
        &f.app,
        Method::POST,
        &format!("/v2/alice/app/blobs/uploads/?mount={other}&from=alice/base"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(miss.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn manifests_by_tag_and_digest() {
    let f = fixture();
    let manifest = push_image(&f.app, ALICE, "alice/app", "v1", "one").await;
    let digest = Digest::of(&manifest);
    for reference in ["v1".to_string(), digest.to_string()] {
        let uri = format!("/v2/alice/app/manifests/{reference}");
        let get = send(
            &f.app,
            Method::GET,
            &uri,
            Some(ALICE),
            &[("accept", OCI_MANIFEST)],
            Body::empty(),
        )
        .await;
        assert_eq!(get.status, StatusCode::OK);
        assert_eq!(get.header("content-type"), OCI_MANIFEST);
        assert_eq!(get.header("docker-content-digest"), digest.to_string());
        assert_eq!(get.body, manifest);
        let head = send(&f.app, Method::HEAD, &uri, Some(ALICE), &[], Body::empty()).await;
        assert_eq!(head.status, StatusCode::OK);
        assert_eq!(head.header("content-length"), manifest.len().to_string());
        assert!(head.body.is_empty());
    }
    let unknown = send(
        &f.app,
        Method::GET,
        "/v2/alice/app/manifests/v2",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.code(), "MANIFEST_UNKNOWN");
    // Pushed by digest: 201 with its Location.
    let by_digest = send(
        &f.app,
        Method::PUT,
        &format!("/v2/alice/app/manifests/{digest}"),
        Some(ALICE),
        &[("content-type", OCI_MANIFEST)],
        manifest.clone(),
    )
    .await;
    assert_eq!(by_digest.status, StatusCode::CREATED);
    assert_eq!(
        by_digest.header("location"),
        format!("/v2/alice/app/manifests/{digest}")
    );
    let wrong = send(
        &f.app,
        Method::PUT,
        &format!("/v2/alice/app/manifests/{}", Digest::of(b"other")),
        Some(ALICE),
        &[("content-type", OCI_MANIFEST)],
        manifest.clone(),
    )
    .await;
    assert_eq!(wrong.code(), "DIGEST_INVALID");
    // Not readable from another repository by digest.
    let other = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/other/manifests/{digest}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(other.code(), "MANIFEST_UNKNOWN");
}

#[tokio::test]
async fn invalid_manifests_are_refused() {
    let f = fixture();
    let config = b"{\"c\":1}";
    let layer = b"layer";
    push_blob(&f.app, ALICE, "alice/app", config).await;
    let put = |content_type: &'static str, body: Vec<u8>| {
        let app = f.app.clone();
        async move {
            send(
                &app,
                Method::PUT,
                "/v2/alice/app/manifests/t",
                Some(ALICE),
                &[("content-type", content_type)],
                body,
            )
            .await
        }
    };
    assert_eq!(
        put(OCI_MANIFEST, b"{not json".to_vec()).await.code(),
        "MANIFEST_INVALID"
    );
    assert_eq!(
        put(OCI_INDEX, image_manifest(config, &[])).await.code(),
        "MANIFEST_INVALID",
        "mediaType mismatch"
    );
    assert_eq!(
        put(
            "application/vnd.docker.distribution.manifest.v1+prettyjws",
            b"{\"schemaVersion\":1}".to_vec()
        )
        .await
        .code(),
        "MANIFEST_INVALID"
    );
    let missing_layer = put(OCI_MANIFEST, image_manifest(config, &[layer])).await;
    assert_eq!(missing_layer.status, StatusCode::BAD_REQUEST);
    assert_eq!(missing_layer.code(), "MANIFEST_BLOB_UNKNOWN");
    let missing_config = put(OCI_MANIFEST, image_manifest(b"absent", &[])).await;
    assert_eq!(missing_config.code(), "MANIFEST_BLOB_UNKNOWN");
    let index = |children: &[&[u8]]| {
        json!({
            "schemaVersion": 2, "mediaType": OCI_INDEX,
            "manifests": children.iter().map(|c| descriptor(OCI_MANIFEST, c)).collect::<Vec<_>>(),
        })
        .to_string()
        .into_bytes()
    };
    let child = image_manifest(config, &[]);
    assert_eq!(
        put(OCI_INDEX, index(&[&child])).await.code(),
        "MANIFEST_UNKNOWN",
        "child not pushed"
    );
    assert_eq!(
        put(OCI_MANIFEST, child.clone()).await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        put(OCI_INDEX, index(&[&child])).await.status,
        StatusCode::CREATED
    );
    let bad_tag = send(
        &f.app,
        Method::PUT,
        "/v2/alice/app/manifests/-bad",
        Some(ALICE),
        &[("content-type", OCI_MANIFEST)],
        child.clone(),
    )
    .await;
    assert_eq!(bad_tag.code(), "TAG_INVALID");
    // Docker v2 schema 2 is accepted too.
    let docker = json!({
        "schemaVersion": 2, "mediaType": runway_registry::DOCKER_MANIFEST,
        "config": descriptor("application/vnd.docker.container.image.v1+json", config),
        "layers": [],
    });
    let put_docker = send(
        &f.app,
        Method::PUT,
        "/v2/alice/app/manifests/docker",
        Some(ALICE),
        &[("content-type", runway_registry::DOCKER_MANIFEST)],
        docker.to_string(),
    )
    .await;
    assert_eq!(put_docker.status, StatusCode::CREATED);
    let get = send(
        &f.app,
        Method::GET,
        "/v2/alice/app/manifests/docker",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(get.header("content-type"), runway_registry::DOCKER_MANIFEST);
}

#[tokio::test]
async fn a_manifest_over_the_limit_is_refused() {
    let f = fixture_with(Limits {
        max_manifest_bytes: 64,
        ..Limits::default()
    });
    let big = vec![b' '; 65];
    let put = send(
        &f.app,
        Method::PUT,
        "/v2/alice/app/manifests/t",
        Some(ALICE),
        &[("content-type", OCI_MANIFEST)],
        big.clone(),
    )
    .await;
    assert_eq!(put.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(put.code(), "SIZE_INVALID");
    // Streamed with no Content-Length.
    let put = send(
        &f.app,
        Method::PUT,
        "/v2/alice/app/manifests/t",
        Some(ALICE),
        &[("content-type", OCI_MANIFEST)],
        futures_stream(vec![big.clone(), big]),
    )
    .await;
    assert_eq!(put.status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn subject_and_referrers() {
    let f = fixture();
    let subject = push_image(&f.app, ALICE, "alice/app", "v1", "subject").await;
    let subject_digest = Digest::of(&subject);
    let empty = b"{}";
    push_blob(&f.app, ALICE, "alice/app", empty).await;
    let signature = json!({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "artifactType": "application/vnd.example.signature",
        "config": descriptor("application/vnd.oci.empty.v1+json", empty),
        "layers": [descriptor("application/vnd.oci.empty.v1+json", empty)],
        "subject": descriptor(OCI_MANIFEST, &subject),
        "annotations": { "org.example": "yes" },
    })
    .to_string();
    let digest = Digest::of(signature.as_bytes());
    let put = send(
        &f.app,
        Method::PUT,
        &format!("/v2/alice/app/manifests/{digest}"),
        Some(ALICE),
        &[("content-type", OCI_MANIFEST)],
        signature.clone(),
    )
    .await;
    assert_eq!(put.status, StatusCode::CREATED, "{put:?}");
    assert_eq!(put.header("oci-subject"), subject_digest.to_string());

    let list = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/app/referrers/{subject_digest}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(list.status, StatusCode::OK);
    assert_eq!(list.header("content-type"), OCI_INDEX);
    let body = list.json();
    assert_eq!(body["manifests"][0]["digest"], digest.to_string());
    assert_eq!(
        body["manifests"][0]["artifactType"],
        "application/vnd.example.signature"
    );
    assert_eq!(body["manifests"][0]["annotations"]["org.example"], "yes");
    assert_eq!(body["manifests"][0]["size"], signature.len());
    let filtered = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/app/referrers/{subject_digest}?artifactType=application/other"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(filtered.header("oci-filters-applied"), "artifactType");
    assert_eq!(filtered.json()["manifests"], json!([]));
    // A subject that does not exist: an empty list, not 404.
    let none = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/app/referrers/{}", Digest::of(b"x")),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(none.status, StatusCode::OK);
    // Deleting the referrer drops it from the list.
    let delete = send(
        &f.app,
        Method::DELETE,
        &format!("/v2/alice/app/manifests/{digest}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(delete.status, StatusCode::ACCEPTED);
    let after = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/app/referrers/{subject_digest}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(after.json()["manifests"], json!([]));
}

#[tokio::test]
async fn tags_list_paginates_with_link() {
    let f = fixture();
    for tag in ["e", "a", "c", "b", "d"] {
        push_image(&f.app, ALICE, "alice/app", tag, "same").await;
    }
    let all = send(
        &f.app,
        Method::GET,
        "/v2/alice/app/tags/list",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(
        all.json(),
        json!({ "name": "alice/app", "tags": ["a", "b", "c", "d", "e"] })
    );
    assert_eq!(all.header("link"), "");
    let first = send(
        &f.app,
        Method::GET,
        "/v2/alice/app/tags/list?n=2",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(first.json()["tags"], json!(["a", "b"]));
    assert_eq!(
        first.header("link"),
        "</v2/alice/app/tags/list?n=2&last=b>; rel=\"next\""
    );
    let second = send(
        &f.app,
        Method::GET,
        "/v2/alice/app/tags/list?n=2&last=b",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(second.json()["tags"], json!(["c", "d"]));
    let last = send(
        &f.app,
        Method::GET,
        "/v2/alice/app/tags/list?n=2&last=d",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(last.json()["tags"], json!(["e"]));
    assert_eq!(last.header("link"), "");
    let zero = send(
        &f.app,
        Method::GET,
        "/v2/alice/app/tags/list?n=0",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(zero.json()["tags"], json!([]));
    let unknown = send(
        &f.app,
        Method::GET,
        "/v2/alice/none/tags/list",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.code(), "NAME_UNKNOWN");
}

#[tokio::test]
async fn deletes() {
    let f = fixture();
    let manifest = push_image(&f.app, ALICE, "alice/app", "v1", "del").await;
    let digest = Digest::of(&manifest);
    push_image(&f.app, ALICE, "alice/app", "v2", "del").await;
    let tag = send(
        &f.app,
        Method::DELETE,
        "/v2/alice/app/manifests/v1",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(tag.status, StatusCode::ACCEPTED);
    assert_eq!(
        send(
            &f.app,
            Method::GET,
            "/v2/alice/app/manifests/v1",
            Some(ALICE),
            &[],
            Body::empty()
        )
        .await
        .code(),
        "MANIFEST_UNKNOWN"
    );
    assert_eq!(
        send(
            &f.app,
            Method::GET,
            "/v2/alice/app/manifests/v2",
            Some(ALICE),
            &[],
            Body::empty()
        )
        .await
        .status,
        StatusCode::OK
    );
    let by_digest = send(
        &f.app,
        Method::DELETE,
        &format!("/v2/alice/app/manifests/{digest}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(by_digest.status, StatusCode::ACCEPTED);
    assert_eq!(
        send(
            &f.app,
            Method::GET,
            "/v2/alice/app/manifests/v2",
            Some(ALICE),
            &[],
            Body::empty()
        )
        .await
        .code(),
        "MANIFEST_UNKNOWN",
        "its tags went with it"
    );
    assert_eq!(
        send(
            &f.app,
            Method::DELETE,
            &format!("/v2/alice/app/manifests/{digest}"),
            Some(ALICE),
            &[],
            Body::empty()
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    let layer = Digest::of(b"layer of del");
    assert_eq!(
        send(
            &f.app,
            Method::DELETE,
            &format!("/v2/alice/app/blobs/{layer}"),
            Some(ALICE),
            &[],
            Body::empty()
        )
        .await
        .status,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        send(
            &f.app,
            Method::GET,
            &format!("/v2/alice/app/blobs/{layer}"),
            Some(ALICE),
            &[],
            Body::empty()
        )
        .await
        .code(),
        "BLOB_UNKNOWN"
    );
    assert_eq!(
        send(
            &f.app,
            Method::DELETE,
            &format!("/v2/alice/app/blobs/{layer}"),
            Some(ALICE),
            &[],
            Body::empty()
        )
        .await
        .code(),
        "BLOB_UNKNOWN"
    );
    let denied = send(
        &f.app,
        Method::DELETE,
        &format!("/v2/alice/app/blobs/{layer}"),
        Some(READER),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn an_upload_belongs_to_its_repository_and_expires() {
    let f = fixture_with(Limits {
        upload_idle_timeout: Duration::from_millis(200),
        ..Limits::default()
    });
    let start = send(
        &f.app,
        Method::POST,
        "/v2/alice/app/blobs/uploads/",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    let id = start.header("docker-upload-uuid").to_string();
    let elsewhere = send(
        &f.app,
        Method::PATCH,
        &format!("/v2/bob/app/blobs/uploads/{id}"),
        Some(BOB),
        &[],
        "x",
    )
    .await;
    assert_eq!(elsewhere.code(), "BLOB_UPLOAD_UNKNOWN");
    let hostile = send(
        &f.app,
        Method::GET,
        "/v2/alice/app/blobs/uploads/..%2F..%2Fblobs",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(hostile.status, StatusCode::NOT_FOUND);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let expired = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/app/blobs/uploads/{id}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(expired.code(), "BLOB_UPLOAD_UNKNOWN");
    assert!(tree(&f.root.join("uploads")).is_empty());
}

#[tokio::test]
async fn too_many_uploads_are_refused() {
    let f = fixture_with(Limits {
        max_uploads: 2,
        ..Limits::default()
    });
    for _ in 0..2 {
        let start = send(
            &f.app,
            Method::POST,
            "/v2/alice/app/blobs/uploads/",
            Some(ALICE),
            &[],
            Body::empty(),
        )
        .await;
        assert_eq!(start.status, StatusCode::ACCEPTED);
    }
    let third = send(
        &f.app,
        Method::POST,
        "/v2/alice/app/blobs/uploads/",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(third.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(third.code(), "TOOMANYREQUESTS");
}

#[tokio::test]
async fn the_library_interface_mirrors_content() {
    let f = fixture();
    let source = f.dir.path().join("layer.bin");
    std::fs::write(&source, b"mirrored layer").unwrap();
    let digest = Digest::of(b"mirrored layer");
    let wrong = f
        .registry
        .put_blob("alice/app", &Digest::of(b"else"), &source)
        .await;
    assert!(
        matches!(wrong, Err(RegistryError::DigestMismatch { .. })),
        "{wrong:?}"
    );
    assert!(tree(&f.root.join("blobs/sha256")).is_empty());
    assert!(tree(&f.root.join("tmp")).is_empty());
    f.registry
        .put_blob("alice/app", &digest, &source)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(&source).unwrap(),
        b"mirrored layer",
        "the source is left as it was"
    );
    let config = f.dir.path().join("config.json");
    std::fs::write(&config, b"{}").unwrap();
    f.registry
        .put_blob("alice/app", &Digest::of(b"{}"), &config)
        .await
        .unwrap();
    let manifest = json!({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": descriptor(CONFIG_TYPE, b"{}"),
        "layers": [descriptor(LAYER_TYPE, b"mirrored layer")],
    })
    .to_string();
    let pinned = f
        .registry
        .put_manifest("alice/app", "v1", OCI_MANIFEST, manifest.as_bytes())
        .await
        .unwrap();
    assert_eq!(pinned, Digest::of(manifest.as_bytes()));
    assert!(f.registry.has_manifest("alice/app", &pinned));
    assert!(!f.registry.has_manifest("bob/app", &pinned));
    assert!(!f.registry.has_manifest("../alice/app", &pinned));
    let stored = f.registry.get_manifest("alice/app", "v1").await.unwrap();
    assert_eq!(stored.digest, pinned);
    let get = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/app/blobs/{digest}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(&get.body[..], b"mirrored layer");
    let bad = f.registry.put_blob("../escape", &digest, &source).await;
    assert!(matches!(bad, Err(RegistryError::NameInvalid { .. })));
}

#[tokio::test]
async fn open_removes_stale_uploads() {
    let f = fixture();
    let start = send(
        &f.app,
        Method::POST,
        "/v2/alice/app/blobs/uploads/",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    let id = start.header("docker-upload-uuid").to_string();
    send(
        &f.app,
        Method::PATCH,
        &format!("/v2/alice/app/blobs/uploads/{id}"),
        Some(ALICE),
        &[],
        "left behind",
    )
    .await;
    std::fs::write(f.root.join("tmp/half-written"), b"x").unwrap();
    assert!(!tree(&f.root.join("uploads")).is_empty());
    let _reopened = runway_registry::Registry::open(&f.root, Limits::default()).unwrap();
    assert!(tree(&f.root.join("uploads")).is_empty());
    assert!(tree(&f.root.join("tmp")).is_empty());
    let _ = ADMIN;
}
