//! `Store::fetch`: an image's content fetched into the store's verified blobs without
//! unpacking, against a real docker-registry on loopback, then put into the platform registry
//! (`runway-registry`) and pulled back from it once the upstream registry is gone.

use std::collections::HashSet;
use std::sync::Arc;

use runway_oci::testing::{
    BusyboxImage, ManifestFormat, PushedImage, RawLayer, Registry, push_busybox_image, push_image,
    raw_tar, require_tools,
};
use runway_oci::{BlobKind, Digest, Fetched, OciError, Platform, Platforms, PullOptions, Store};
use tar::EntryType::Regular as F;

const REGISTRY_TOOLS: &[&str] = &["docker-registry", "skopeo", "umoci", "busybox"];
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

fn opts(host: &str) -> PullOptions {
    runway_oci::testing::insecure_pull_options(host)
}

fn fetch(
    store: &Store,
    reference: &str,
    platforms: Platforms,
    opts: &PullOptions,
) -> Result<Fetched, OciError> {
    runway_oci::testing::block_on(store.fetch(reference, platforms, opts))
}

fn platform(architecture: &str) -> Platform {
    Platform {
        os: "linux".into(),
        architecture: architecture.into(),
        variant: None,
    }
}

/// Every manifest hashes to its digest, every blob's file too, and each digest comes once.
fn assert_verified(fetched: &Fetched) {
    let mut seen = HashSet::new();
    for manifest in &fetched.manifests {
        assert_eq!(Digest::of(&manifest.bytes), manifest.digest);
        assert!(
            seen.insert(manifest.digest.clone()),
            "{} twice",
            manifest.digest
        );
    }
    for blob in &fetched.blobs {
        let bytes = std::fs::read(&blob.path).expect("blob file");
        assert_eq!(Digest::of(&bytes), blob.digest, "{}", blob.path.display());
        assert!(seen.insert(blob.digest.clone()), "{} twice", blob.digest);
    }
}

/// What `fetch` left: `tmp/` empty and no rootfs unpacked.
fn assert_nothing_unpacked(store: &Store) {
    let tmp: Vec<_> = std::fs::read_dir(store.root().join("tmp"))
        .expect("tmp")
        .collect();
    assert!(tmp.is_empty(), "tmp/ holds {tmp:?}");
    let rootfs: Vec<_> = std::fs::read_dir(store.root().join("rootfs"))
        .expect("rootfs")
        .collect();
    assert!(rootfs.is_empty(), "rootfs/ holds {rootfs:?}");
}

/// The digests a pushed manifest names (config, then layers).
fn blobs_of(registry: &Registry, repo: &str, image: &PushedImage) -> Vec<Digest> {
    let accept = format!("{OCI_MANIFEST}, {DOCKER_MANIFEST}");
    let manifest = registry
        .request(
            "GET",
            &format!("/v2/{repo}/manifests/{}", image.digest),
            &[("Accept", accept.as_str())],
            &[],
        )
        .expect("manifest");
    let manifest: serde_json::Value = serde_json::from_slice(&manifest.body).expect("json");
    let mut digests = vec![manifest["config"]["digest"].as_str().expect("config")];
    for layer in manifest["layers"].as_array().expect("layers") {
        digests.push(layer["digest"].as_str().expect("layer"));
    }
    digests
        .into_iter()
        .map(|d| Digest::parse(d).expect("digest"))
        .collect()
}

/// An index (`media_type`) of `images` with their platforms, put under `tag`.
fn put_index(
    registry: &Registry,
    repo: &str,
    tag: &str,
    media_type: &str,
    images: &[(&PushedImage, &str, Platform)],
) -> Digest {
    let manifests: Vec<_> = images
        .iter()
        .map(|&(image, manifest_type, ref platform)| {
            let size = registry
                .request(
                    "GET",
                    &format!("/v2/{repo}/manifests/{}", image.digest),
                    &[("Accept", manifest_type)],
                    &[],
                )
                .expect("manifest")
                .body
                .len();
            serde_json::json!({
                "mediaType": manifest_type,
                "digest": image.digest.to_string(),
                "size": size,
                "platform": {"os": platform.os, "architecture": platform.architecture},
            })
        })
        .collect();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": media_type,
        "manifests": manifests,
    });
    registry
        .put_manifest(
            repo,
            tag,
            media_type,
            &serde_json::to_vec(&index).expect("json"),
        )
        .expect("put index")
}

/// Two small OCI images sharing their first layer, pushed as `<repo>:one` and `<repo>:two`.
fn two_images(registry: &Registry, repo: &str) -> (PushedImage, PushedImage) {
    let shared = RawLayer::gzip(raw_tar(&[(F, "shared", "", b"both")]).expect("tar")).expect("gz");
    let push = |tag: &str| {
        let own = RawLayer::tar(raw_tar(&[(F, "own", "", tag.as_bytes())]).expect("tar"));
        push_image(
            registry,
            repo,
            tag,
            &[shared.clone(), own],
            serde_json::json!({"Cmd": ["/own"]}),
        )
        .expect("push")
    };
    (push("one"), push("two"))
}

#[test]
fn fetch_by_tag_and_by_digest_verifies_and_caches() {
    if !require_tools("fetch by tag and digest", REGISTRY_TOOLS) {
        return;
    }
    let registry = Registry::start().expect("registry");
    let pushed = push_busybox_image(
        &registry,
        "team/app",
        "v1",
        &BusyboxImage {
            format: ManifestFormat::DockerV2,
            ..BusyboxImage::default()
        },
    )
    .expect("push");
    let cache = tempfile::tempdir().expect("cache");
    let store = Store::open(cache.path()).expect("store");
    let opts = opts(&registry.host());

    let by_tag = fetch(&store, &pushed.reference, Platforms::All, &opts).expect("fetch by tag");
    assert_eq!(by_tag.pinned, pushed.pinned);
    assert_eq!(by_tag.digest, pushed.digest);
    assert_eq!(by_tag.index_digest, None);
    assert_eq!(by_tag.manifests.len(), 1);
    assert_eq!(by_tag.manifests[0].digest, pushed.digest);
    assert_eq!(by_tag.manifests[0].media_type, DOCKER_MANIFEST);
    let expected = blobs_of(&registry, "team/app", &pushed);
    let got: Vec<_> = by_tag.blobs.iter().map(|b| b.digest.clone()).collect();
    assert_eq!(got, expected, "the config, then the layers");
    assert_eq!(by_tag.blobs[0].kind, BlobKind::Config);
    assert!(by_tag.blobs[1..].iter().all(|b| b.kind == BlobKind::Layer));
    assert!(
        by_tag
            .blobs
            .iter()
            .all(|b| b.path == store.blob_path(&b.digest))
    );
    assert_verified(&by_tag);
    assert_nothing_unpacked(&store);
    let stats = store.stats();
    assert_eq!(
        (stats.manifest_fetches, stats.blob_fetches, stats.unpacks),
        (1, expected.len() as u64, 0),
        "{stats:?}"
    );

    // By digest, everything cached: no request at all, the same content.
    let by_digest = fetch(&store, &pushed.pinned, Platforms::Selected, &opts).expect("by digest");
    assert_eq!(by_digest.pinned, pushed.pinned);
    assert_eq!(by_digest.manifests, by_tag.manifests);
    assert_eq!(by_digest.blobs, by_tag.blobs);
    assert_eq!(store.stats(), stats, "no request");

    // By tag again: the tag is resolved (one manifest request), no blob is fetched.
    fetch(&store, &pushed.reference, Platforms::All, &opts).expect("again by tag");
    assert_eq!(store.stats().manifest_fetches, stats.manifest_fetches + 1);
    assert_eq!(store.stats().blob_fetches, stats.blob_fetches);

    // A cached blob that went bad is dropped and fetched again, not handed out.
    let layer = &by_tag.blobs[1];
    std::fs::write(&layer.path, b"rotten").expect("corrupt the cache");
    let healed = fetch(&store, &pushed.pinned, Platforms::All, &opts).expect("refetched");
    assert_verified(&healed);
    assert_eq!(store.stats().blob_fetches, stats.blob_fetches + 1);
}

#[test]
fn an_index_is_fetched_whole_or_for_one_platform() {
    if !require_tools("fetch an index", &["docker-registry"]) {
        return;
    }
    let registry = Registry::start().expect("registry");
    let (one, two) = two_images(&registry, "multi/app");
    let index = put_index(
        &registry,
        "multi/app",
        "multi",
        OCI_INDEX,
        &[
            (&one, OCI_MANIFEST, Platform::host()),
            (&two, OCI_MANIFEST, platform("s390x")),
        ],
    );
    let cache = tempfile::tempdir().expect("cache");
    let store = Store::open(cache.path()).expect("store");
    let opts = opts(&registry.host());
    let reference = format!("{}/multi/app:multi", registry.host());

    let whole = fetch(&store, &reference, Platforms::All, &opts).expect("fetch whole");
    assert_eq!(
        whole.pinned,
        format!("{}/multi/app@{index}", registry.host())
    );
    assert_eq!(whole.digest, index);
    let manifests: Vec<_> = whole
        .manifests
        .iter()
        .map(|m| (m.digest.clone(), m.media_type.as_str()))
        .collect();
    assert_eq!(
        manifests,
        [
            (one.digest.clone(), OCI_MANIFEST),
            (two.digest.clone(), OCI_MANIFEST),
            (index.clone(), OCI_INDEX),
        ],
        "the images before the index that lists them"
    );
    let mut expected: Vec<_> = blobs_of(&registry, "multi/app", &one);
    for digest in blobs_of(&registry, "multi/app", &two) {
        if !expected.contains(&digest) {
            expected.push(digest);
        }
    }
    assert_eq!(
        expected.len(),
        5,
        "two configs, a shared layer, two own layers"
    );
    let got: Vec<_> = whole.blobs.iter().map(|b| b.digest.clone()).collect();
    assert_eq!(got, expected, "the shared layer once");
    assert_verified(&whole);
    assert_nothing_unpacked(&store);
    let stats = store.stats();
    assert_eq!(stats.blob_fetches, 5, "{stats:?}");

    // One platform of the index, by its digest: the picked image alone, pinned to itself.
    let s390x = PullOptions {
        platform: platform("s390x"),
        ..opts.clone()
    };
    let by_index_digest = format!("{}/multi/app@{index}", registry.host());
    let picked = fetch(&store, &by_index_digest, Platforms::Selected, &s390x).expect("s390x");
    assert_eq!(picked.pinned, two.pinned);
    assert_eq!(picked.digest, two.digest);
    assert_eq!(picked.index_digest, Some(index.clone()));
    assert_eq!(picked.manifests.len(), 1);
    assert_eq!(picked.manifests[0].digest, two.digest);
    let got: Vec<_> = picked.blobs.iter().map(|b| b.digest.clone()).collect();
    assert_eq!(got, blobs_of(&registry, "multi/app", &two));
    assert_verified(&picked);
    assert_eq!(store.stats(), stats, "all cached: no request");

    // In a fresh store, one platform fetches that image's blobs only.
    let fresh_dir = tempfile::tempdir().expect("cache");
    let fresh = Store::open(fresh_dir.path()).expect("store");
    let host = fetch(&fresh, &reference, Platforms::Selected, &opts).expect("host platform");
    assert_eq!(host.pinned, one.pinned);
    assert_eq!(fresh.stats().blob_fetches, 3, "{:?}", fresh.stats());

    let err = fetch(
        &store,
        &reference,
        Platforms::Selected,
        &PullOptions {
            platform: platform("riscv64"),
            ..opts
        },
    )
    .expect_err("no riscv64");
    assert!(matches!(err, OciError::NoMatchingPlatform { .. }), "{err}");
}

#[test]
fn a_corrupted_blob_upstream_is_refused_and_not_kept() {
    if !require_tools("fetch a corrupted blob", &["docker-registry"]) {
        return;
    }
    let registry = Registry::start().expect("registry");
    let (one, _) = two_images(&registry, "bad/app");
    let layer = blobs_of(&registry, "bad/app", &one).pop().expect("a layer");
    let data = registry.blob_data_path(&layer);
    let mut bytes = std::fs::read(&data).expect("blob data");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&data, &bytes).expect("tamper");

    let cache = tempfile::tempdir().expect("cache");
    let store = Store::open(cache.path()).expect("store");
    let err = fetch(
        &store,
        &one.reference,
        Platforms::All,
        &opts(&registry.host()),
    )
    .expect_err("tampered");
    assert!(
        matches!(&err, OciError::DigestMismatch { kind: BlobKind::Layer, expected, .. } if *expected == layer.to_string()),
        "{err}"
    );
    assert!(!store.blob_path(&layer).exists(), "the bad blob was kept");
    assert_nothing_unpacked(&store);
}

/// Lets every request through: the platform registry's authorization is not under test.
struct Anyone;

impl runway_registry::Authorizer for Anyone {
    async fn authorize(
        &self,
        _: &axum::http::HeaderMap,
        _: Option<&str>,
        _: runway_registry::Access,
    ) -> Result<(), runway_registry::Refusal> {
        Ok(())
    }
}

/// The point of `fetch`: what it returned is enough to serve the image from the platform
/// registry after the upstream registry is gone.
#[test]
fn fetched_content_outlives_upstream_in_the_platform_registry() {
    if !require_tools("mirror", REGISTRY_TOOLS) {
        return;
    }
    let mut upstream = Registry::start().expect("registry");
    let runnable = push_busybox_image(
        &upstream,
        "team/app",
        "v1",
        &BusyboxImage {
            cmd: vec!["echo mirrored".into()],
            format: ManifestFormat::DockerV2,
            ..BusyboxImage::default()
        },
    )
    .expect("push busybox");
    let (other, _) = two_images(&upstream, "team/app");
    let list = put_index(
        &upstream,
        "team/app",
        "multi",
        DOCKER_LIST,
        &[
            (&other, OCI_MANIFEST, platform("s390x")),
            (&runnable, DOCKER_MANIFEST, Platform::host()),
        ],
    );
    let cache = tempfile::tempdir().expect("cache");
    let store = Store::open(cache.path()).expect("store");
    let reference = format!("{}/team/app:multi", upstream.host());
    let fetched =
        fetch(&store, &reference, Platforms::All, &opts(&upstream.host())).expect("fetch");
    assert_eq!(fetched.digest, list);
    assert_eq!(
        fetched.manifests.last().map(|m| m.media_type.as_str()),
        Some(DOCKER_LIST)
    );
    upstream.stop();
    assert_verified(&fetched);

    let mirror_dir = tempfile::tempdir().expect("mirror");
    let mirror = Arc::new(
        runway_registry::Registry::open(
            &mirror_dir.path().join("registry"),
            runway_registry::Limits::default(),
        )
        .expect("open the platform registry"),
    );
    let repo = "team/mirror/app";
    let pulled = runway_oci::testing::block_on(async {
        for blob in &fetched.blobs {
            mirror
                .put_blob(repo, &blob.digest, &blob.path)
                .await
                .expect("put blob");
        }
        for manifest in &fetched.manifests {
            mirror
                .put_manifest(
                    repo,
                    &manifest.digest.to_string(),
                    &manifest.media_type,
                    &manifest.bytes,
                )
                .await
                .expect("put manifest");
        }
        let top = fetched.manifests.last().expect("the index");
        mirror
            .put_manifest(repo, "multi", &top.media_type, &top.bytes)
            .await
            .expect("tag");

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let host = format!("127.0.0.1:{}", listener.local_addr().expect("addr").port());
        let app = runway_registry::router(Arc::clone(&mirror), Arc::new(Anyone));
        let server = tokio::spawn(async move { axum::serve(listener, app).await });

        let fresh_dir = tempfile::tempdir().expect("cache");
        let fresh = Store::open(fresh_dir.path()).expect("store");
        let opts = opts(&host);
        let by_digest = fresh
            .pull(&format!("{host}/{repo}@{list}"), &opts)
            .await
            .expect("pull from the mirror by digest");
        let by_tag = fresh
            .pull(&format!("{host}/{repo}:multi"), &opts)
            .await
            .expect("pull from the mirror by tag");
        server.abort();
        (by_digest, by_tag, fresh_dir)
    });
    let (by_digest, by_tag, _fresh_dir) = pulled;
    assert_eq!(by_digest.digest, runnable.digest, "the host's platform");
    assert_eq!(by_digest.index_digest, Some(list));
    assert_eq!(by_digest.config.cmd, ["echo mirrored"]);
    assert!(by_digest.rootfs.path.join("bin/busybox").is_file());
    assert_eq!(by_tag.digest, runnable.digest);
    assert!(by_tag.cache_hit);
}

/// A signature manifest as cosign writes one beside `image`: one layer per payload, each
/// with its annotations, claiming `size` bytes when given (a lie to the reader).
fn put_signatures(
    registry: &Registry,
    repo: &str,
    image: &Digest,
    layers: &[(&[u8], Option<i64>)],
) {
    let config = registry.put_blob(repo, b"{}").expect("config");
    let descriptors: Vec<serde_json::Value> = layers
        .iter()
        .map(|(payload, size)| {
            let digest = registry.put_blob(repo, payload).expect("payload");
            serde_json::json!({
                "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
                "digest": digest.to_string(),
                "size": size.unwrap_or(payload.len() as i64),
                "annotations": {"dev.cosignproject.cosign/signature": "c2lnbmF0dXJl"},
            })
        })
        .collect();
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config.to_string(), "size": 2},
        "layers": descriptors,
    });
    let tag = format!("{}.sig", image.to_string().replacen(':', "-", 1));
    registry
        .put_manifest(repo, &tag, OCI_MANIFEST, manifest.to_string().as_bytes())
        .expect("signature manifest");
}

#[test]
fn cosign_signatures_are_read_beside_the_image_and_bounded() {
    if !require_tools("cosign signatures", REGISTRY_TOOLS) {
        return;
    }
    let registry = Registry::start().expect("registry");
    let (one, two) = two_images(&registry, "team/signed");
    let cache = tempfile::tempdir().expect("cache");
    let store = Store::open(cache.path()).expect("store");
    let opts = opts(&registry.host());
    let signatures =
        |reference: &str| runway_oci::testing::block_on(store.cosign_signatures(reference, &opts));

    // None yet: no layers, the image pinned all the same (by its tag).
    let none = signatures(&one.reference).expect("no signatures");
    assert_eq!(none.pinned, one.pinned);
    assert!(none.layers.is_empty());

    // One payload, read with its annotations, checked against its digest.
    let payload = br#"{"critical":{"identity":{"docker-reference":"x"},"image":{"docker-manifest-digest":"sha256:0"},"type":"cosign container image signature"},"optional":null}"#;
    put_signatures(&registry, "team/signed", &one.digest, &[(payload, None)]);
    let read = signatures(&one.pinned).expect("one signature");
    assert_eq!(read.digest, one.digest);
    assert_eq!(read.layers.len(), 1);
    assert_eq!(read.layers[0].payload, payload.to_vec());
    assert_eq!(
        read.layers[0].annotations["dev.cosignproject.cosign/signature"],
        "c2lnbmF0dXJl"
    );

    // A payload claiming more than a signature takes, or too many layers: refused unread.
    put_signatures(
        &registry,
        "team/signed",
        &two.digest,
        &[(payload, Some(1 << 20))],
    );
    let error = signatures(&two.pinned).expect_err("refused");
    assert!(
        matches!(
            error,
            OciError::InvalidDocument {
                kind: BlobKind::Manifest,
                ..
            }
        ) && error.to_string().contains("a signature's payload may take"),
        "{error}"
    );
    let many: Vec<(&[u8], Option<i64>)> = (0..65).map(|_| (&payload[..], None)).collect();
    put_signatures(&registry, "team/signed", &two.digest, &many);
    let error = signatures(&two.pinned).expect_err("refused");
    assert!(error.to_string().contains("65 layers"), "{error}");
}
