//! Garbage collection (`Registry::collect`) and the bound on disk use
//! (`Limits::max_total_bytes`, `Registry::usage`).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::{Method, StatusCode};
use runway_registry::{
    Collect, Collected, Digest, Limits, OCI_INDEX, OCI_MANIFEST, Registry, RegistryError,
};
use serde_json::json;

use crate::support::{
    ADMIN, ALICE, Answer, descriptor, fixture, fixture_with, image_manifest, push_blob, push_image,
    send, tree,
};

const EMPTY_TYPE: &str = "application/vnd.oci.empty.v1+json";

fn collect_all(keep: &[(&str, &Digest)]) -> Collect {
    Collect {
        keep: keep
            .iter()
            .map(|(repository, digest)| (repository.to_string(), (*digest).clone()))
            .collect(),
        grace: Duration::ZERO,
    }
}

async fn put_manifest(
    app: &axum::Router,
    repository: &str,
    reference: &str,
    media_type: &str,
    bytes: &[u8],
) -> Digest {
    let put = send(
        app,
        Method::PUT,
        &format!("/v2/{repository}/manifests/{reference}"),
        Some(ADMIN),
        &[("content-type", media_type)],
        bytes.to_vec(),
    )
    .await;
    assert_eq!(put.status, StatusCode::CREATED, "{put:?}");
    Digest::of(bytes)
}

async fn get(app: &axum::Router, uri: &str) -> Answer {
    send(app, Method::GET, uri, Some(ADMIN), &[], Body::empty()).await
}

/// An artifact whose subject is `subject` (an image manifest's bytes).
fn referrer(subject: &[u8], note: &str) -> Vec<u8> {
    json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": "application/vnd.example.note",
        "config": descriptor(EMPTY_TYPE, b"{}"),
        "layers": [descriptor("text/plain", note.as_bytes())],
        "subject": descriptor(OCI_MANIFEST, subject),
    })
    .to_string()
    .into_bytes()
}

/// The bytes the content store and the uploads hold on disk.
fn disk_bytes(root: &Path) -> u64 {
    ["blobs/sha256", "uploads"]
        .iter()
        .flat_map(|dir| {
            let dir = root.join(dir);
            tree(&dir).into_iter().map(move |rel| dir.join(rel))
        })
        .filter_map(|path| std::fs::metadata(path).ok())
        .filter(|meta| meta.is_file())
        .map(|meta| meta.len())
        .sum()
}

fn content_files(root: &Path) -> usize {
    tree(&root.join("blobs/sha256")).len()
}

/// Every blob and manifest link below `repositories/` whose content is not in the store.
fn dangling_links(root: &Path) -> Vec<String> {
    let repositories = root.join("repositories");
    tree(&repositories)
        .into_iter()
        .filter(|rel| {
            let parent = rel.parent().and_then(Path::file_name);
            let kind = rel
                .parent()
                .and_then(Path::parent)
                .and_then(Path::file_name);
            parent.is_some_and(|p| p == "sha256")
                && kind.is_some_and(|k| k == "_blobs" || k == "_manifests")
        })
        .filter(|rel| {
            let hex = rel.file_name().unwrap_or_default();
            !root.join("blobs/sha256").join(hex).is_file()
        })
        .map(|rel| rel.display().to_string())
        .collect()
}

#[tokio::test]
async fn collect_removes_what_nothing_needs_and_keeps_the_rest() {
    let f = fixture();
    let app = &f.app;
    // Tagged: stays, with its referrer.
    let tagged = push_image(app, ADMIN, "alice/app", "v1", "tagged").await;
    push_blob(app, ADMIN, "alice/app", b"{}").await;
    push_blob(app, ADMIN, "alice/app", b"a note on v1").await;
    let note = referrer(&tagged, "a note on v1");
    let note = put_manifest(
        app,
        "alice/app",
        &Digest::of(&note).to_string(),
        OCI_MANIFEST,
        &note,
    )
    .await;
    // In `keep`, untagged: stays.
    let kept = push_image(app, ADMIN, "alice/app", "kept", "kept").await;
    let kept = Digest::of(&kept);
    let deleted = send(
        app,
        Method::DELETE,
        "/v2/alice/app/manifests/kept",
        Some(ADMIN),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(deleted.status, StatusCode::ACCEPTED);
    // An index, tagged, over two manifests pushed by digest: all stay.
    let mut children = Vec::new();
    for arch in ["amd64", "arm64"] {
        let config = format!("{{\"arch\":\"{arch}\"}}").into_bytes();
        let layer = format!("layer for {arch}").into_bytes();
        push_blob(app, ADMIN, "alice/app", &config).await;
        push_blob(app, ADMIN, "alice/app", &layer).await;
        let child = image_manifest(&config, &[&layer]);
        put_manifest(
            app,
            "alice/app",
            &Digest::of(&child).to_string(),
            OCI_MANIFEST,
            &child,
        )
        .await;
        children.push((child, layer));
    }
    let index = json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": children.iter().map(|(c, _)| descriptor(OCI_MANIFEST, c)).collect::<Vec<_>>(),
    })
    .to_string()
    .into_bytes();
    put_manifest(app, "alice/app", "multi", OCI_INDEX, &index).await;
    // Untagged and not kept: goes, with its referrer, its blobs' links and their content,
    // except the layer bob's image shares.
    let shared = b"a layer alice and bob share".to_vec();
    let config = b"{\"seed\":\"doomed\"}".to_vec();
    let own = b"a layer only the doomed image has".to_vec();
    for blob in [&config, &own, &shared] {
        push_blob(app, ADMIN, "alice/app", blob).await;
    }
    let doomed = image_manifest(&config, &[&own, &shared]);
    let doomed_digest = put_manifest(
        app,
        "alice/app",
        &Digest::of(&doomed).to_string(),
        OCI_MANIFEST,
        &doomed,
    )
    .await;
    push_blob(app, ADMIN, "alice/app", b"a note on the doomed").await;
    let doomed_note = referrer(&doomed, "a note on the doomed");
    put_manifest(
        app,
        "alice/app",
        &Digest::of(&doomed_note).to_string(),
        OCI_MANIFEST,
        &doomed_note,
    )
    .await;
    let bob_config = b"{\"seed\":\"bob\"}".to_vec();
    push_blob(app, ADMIN, "bob/app", &bob_config).await;
    push_blob(app, ADMIN, "bob/app", &shared).await;
    let bob = image_manifest(&bob_config, &[&shared]);
    put_manifest(app, "bob/app", "latest", OCI_MANIFEST, &bob).await;
    // A repository with a blob and nothing else: goes whole.
    push_blob(app, ADMIN, "alice/scratch/deep", b"scratch").await;

    // A young pass keeps everything.
    let young = f
        .registry
        .collect(&Collect {
            keep: BTreeSet::new(),
            grace: Duration::from_secs(3600),
        })
        .await
        .unwrap();
    assert_eq!(young, Collected::default());

    let before = f.registry.usage();
    let freed: u64 = [
        &config[..],
        &own,
        &doomed,
        &doomed_note,
        b"a note on the doomed",
        b"scratch",
    ]
    .iter()
    .map(|b| b.len() as u64)
    .sum();
    let collected = f
        .registry
        .collect(&collect_all(&[("alice/app", &kept)]))
        .await
        .unwrap();
    assert_eq!(
        collected,
        Collected {
            manifests: 2,
            // alice/app: the doomed image's config, own layer, shared layer and its note's
            // layer; alice/scratch/deep: its one blob.
            blob_links: 5,
            // The config, the own layer, both manifests, the note's layer, the scratch blob;
            // the shared layer stays, linked in bob/app.
            blobs: 6,
            bytes: freed,
        }
    );
    let after = f.registry.usage();
    assert_eq!(after.bytes, before.bytes - collected.bytes);
    assert_eq!(after.blobs, before.blobs - collected.blobs as u64);
    assert_eq!(after.bytes, disk_bytes(&f.root));
    assert_eq!(after.blobs, content_files(&f.root) as u64);

    // What stays is served.
    for uri in [
        "/v2/alice/app/manifests/v1".to_string(),
        format!("/v2/alice/app/manifests/{kept}"),
        format!("/v2/alice/app/manifests/{note}"),
        "/v2/alice/app/manifests/multi".to_string(),
        format!("/v2/alice/app/blobs/{}", Digest::of(b"layer of kept")),
        format!("/v2/alice/app/blobs/{}", Digest::of(b"a note on v1")),
        format!("/v2/bob/app/blobs/{}", Digest::of(&shared)),
        "/v2/bob/app/manifests/latest".to_string(),
    ] {
        assert_eq!(get(app, &uri).await.status, StatusCode::OK, "{uri}");
    }
    for (child, layer) in &children {
        let child = get(
            app,
            &format!("/v2/alice/app/manifests/{}", Digest::of(child)),
        )
        .await;
        assert_eq!(child.status, StatusCode::OK);
        let served = get(app, &format!("/v2/alice/app/blobs/{}", Digest::of(layer))).await;
        assert_eq!(&served.body[..], &layer[..]);
    }
    let referrers = get(
        app,
        &format!("/v2/alice/app/referrers/{}", Digest::of(&tagged)),
    )
    .await;
    assert_eq!(referrers.json()["manifests"][0]["digest"], note.to_string());
    // What went is gone.
    let gone = get(app, &format!("/v2/alice/app/manifests/{doomed_digest}")).await;
    assert_eq!(gone.code(), "MANIFEST_UNKNOWN");
    for blob in [&config, &own, &shared] {
        let unlinked = get(app, &format!("/v2/alice/app/blobs/{}", Digest::of(blob))).await;
        assert_eq!(unlinked.code(), "BLOB_UNKNOWN");
    }
    let referrers = get(app, &format!("/v2/alice/app/referrers/{doomed_digest}")).await;
    assert_eq!(referrers.json()["manifests"], json!([]));
    assert!(
        tree(&f.root.join("repositories/alice/app/_referrers"))
            .iter()
            .all(|rel| !rel.ends_with(Digest::of(&doomed_note).hex())),
        "the referrer entry went with its manifest"
    );
    for blob in [&config, &own, &doomed] {
        assert!(
            !f.root
                .join("blobs/sha256")
                .join(Digest::of(blob).hex())
                .exists()
        );
    }
    assert!(
        f.root
            .join("blobs/sha256")
            .join(Digest::of(&shared).hex())
            .is_file(),
        "content bob links stays"
    );
    assert!(!f.root.join("repositories/alice/scratch").exists());
    assert!(f.root.join("repositories/alice/app").is_dir());
    let scratch = get(app, "/v2/alice/scratch/deep/tags/list").await;
    assert_eq!(scratch.code(), "NAME_UNKNOWN");
    assert!(dangling_links(&f.root).is_empty());

    // A second pass finds nothing; dropping the root lets its manifest go.
    let again = f
        .registry
        .collect(&collect_all(&[("alice/app", &kept)]))
        .await
        .unwrap();
    assert_eq!(again, Collected::default());
    let unkept = f.registry.collect(&collect_all(&[])).await.unwrap();
    assert_eq!(unkept.manifests, 1);
    assert_eq!(unkept.blob_links, 2);
    let gone = get(app, &format!("/v2/alice/app/manifests/{kept}")).await;
    assert_eq!(gone.code(), "MANIFEST_UNKNOWN");
    assert_eq!(f.registry.usage().bytes, disk_bytes(&f.root));
}

#[tokio::test]
async fn young_links_and_content_are_kept_until_the_grace_passes() {
    let f = fixture();
    let image = push_image(&f.app, ADMIN, "alice/app", "v1", "young").await;
    let digest = Digest::of(&image);
    let untag = send(
        &f.app,
        Method::DELETE,
        "/v2/alice/app/manifests/v1",
        Some(ADMIN),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(untag.status, StatusCode::ACCEPTED);
    push_blob(&f.app, ADMIN, "alice/app", b"a loose blob").await;
    let grace = Collect {
        keep: BTreeSet::new(),
        grace: Duration::from_secs(3600),
    };
    assert_eq!(
        f.registry.collect(&grace).await.unwrap(),
        Collected::default()
    );
    assert!(f.registry.has_manifest("alice/app", &digest));
    // Old enough now (a short grace, then a wait past it).
    let short = Collect {
        keep: BTreeSet::new(),
        grace: Duration::from_millis(300),
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    let collected = f.registry.collect(&short).await.unwrap();
    assert_eq!(collected.manifests, 1);
    assert_eq!(collected.blob_links, 3);
    assert_eq!(collected.blobs, 4);
    assert!(!f.registry.has_manifest("alice/app", &digest));
    assert!(tree(&f.root.join("blobs/sha256")).is_empty());
    assert!(tree(&f.root.join("repositories")).is_empty());
    assert_eq!(f.registry.usage().bytes, 0);
    assert_eq!(f.registry.usage().blobs, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_blob_linked_while_a_collection_runs_keeps_its_content() {
    let f = fixture();
    let source = f.dir.path().join("layer.bin");
    let bytes = vec![7u8; 64 << 10];
    std::fs::write(&source, &bytes).unwrap();
    let digest = Digest::of(&bytes);
    let registry: Arc<Registry> = f.registry.clone();
    registry
        .put_blob("alice/seed", &digest, &source)
        .await
        .unwrap();
    for round in 0..100 {
        let collecting = {
            let registry = registry.clone();
            tokio::spawn(async move { registry.collect(&collect_all(&[])).await })
        };
        let mut linking = Vec::new();
        for n in 0..3 {
            let registry = registry.clone();
            let source = source.clone();
            let digest = digest.clone();
            linking.push(tokio::spawn(async move {
                registry
                    .put_blob(&format!("alice/r{round}x{n}"), &digest, &source)
                    .await
            }));
        }
        collecting.await.unwrap().unwrap();
        for linked in linking {
            linked.await.unwrap().unwrap();
        }
        let dangling = dangling_links(&f.root);
        assert!(dangling.is_empty(), "round {round}: {dangling:?}");
    }
    assert_eq!(registry.usage().bytes, disk_bytes(&f.root));
    assert_eq!(registry.usage().blobs, content_files(&f.root) as u64);
}

#[tokio::test]
async fn pushes_past_the_bound_are_refused_until_a_collection_makes_room() {
    let f = fixture_with(Limits {
        max_total_bytes: Some(100),
        ..Limits::default()
    });
    let app = &f.app;
    let first = vec![b'a'; 60];
    let second = vec![b'b'; 60];
    push_blob(app, ALICE, "alice/app", &first).await;
    let usage = f.registry.usage();
    assert_eq!(
        (usage.bytes, usage.blobs, usage.max_bytes),
        (60, 1, Some(100))
    );

    // Monolithic.
    let refused = send(
        app,
        Method::POST,
        &format!(
            "/v2/alice/app/blobs/uploads/?digest={}",
            Digest::of(&second)
        ),
        Some(ALICE),
        &[],
        second.clone(),
    )
    .await;
    assert_eq!(
        refused.status,
        StatusCode::INSUFFICIENT_STORAGE,
        "{refused:?}"
    );
    assert_eq!(refused.code(), "UNKNOWN");
    let message = refused.json()["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("the registry is full"), "{message}");
    assert!(message.contains("delete"), "{message}");
    assert!(tree(&f.root.join("uploads")).is_empty());
    assert!(
        !f.root
            .join("blobs/sha256")
            .join(Digest::of(&second).hex())
            .exists()
    );
    assert_eq!(f.registry.usage().bytes, 60);

    // Chunked: a chunk that fits, then one that does not (streamed, its length unsaid).
    let start = send(
        app,
        Method::POST,
        "/v2/alice/app/blobs/uploads/",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    let location = start.header("location").to_string();
    let fits = send(
        app,
        Method::PATCH,
        &location,
        Some(ALICE),
        &[],
        vec![b'b'; 30],
    )
    .await;
    assert_eq!(fits.status, StatusCode::ACCEPTED);
    assert_eq!(f.registry.usage().bytes, 90, "an upload in progress counts");
    let over = send(
        app,
        Method::PATCH,
        &location,
        Some(ALICE),
        &[],
        Body::from_stream(futures_util::stream::iter(vec![Ok::<_, std::io::Error>(
            bytes::Bytes::from(vec![b'b'; 30]),
        )])),
    )
    .await;
    assert_eq!(over.status, StatusCode::INSUFFICIENT_STORAGE, "{over:?}");
    let status = send(app, Method::GET, &location, Some(ALICE), &[], Body::empty()).await;
    assert_eq!(
        status.code(),
        "BLOB_UPLOAD_UNKNOWN",
        "a refused upload is ended"
    );
    assert!(tree(&f.root.join("uploads")).is_empty());
    assert_eq!(f.registry.usage().bytes, 60);

    // Chunked, its length announced: refused before its body is read.
    let start = send(
        app,
        Method::POST,
        "/v2/alice/app/blobs/uploads/",
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    let location = start.header("location").to_string();
    let announced = send(
        app,
        Method::PUT,
        &format!("{location}?digest={}", Digest::of(&second)),
        Some(ALICE),
        &[("content-length", "60")],
        second.clone(),
    )
    .await;
    assert_eq!(announced.status, StatusCode::INSUFFICIENT_STORAGE);
    assert!(tree(&f.root.join("uploads")).is_empty());

    // The library's put_blob.
    let source = f.dir.path().join("second.bin");
    std::fs::write(&source, &second).unwrap();
    let put = f
        .registry
        .put_blob("alice/app", &Digest::of(&second), &source)
        .await;
    assert!(
        matches!(put, Err(RegistryError::Full { limit: 100, .. })),
        "{put:?}"
    );
    assert!(tree(&f.root.join("tmp")).is_empty());
    assert_eq!(f.registry.usage().bytes, 60);
    // Content stored already takes no more room: linking it elsewhere is not refused.
    let mirror = f.dir.path().join("first.bin");
    std::fs::write(&mirror, &first).unwrap();
    f.registry
        .put_blob("alice/other", &Digest::of(&first), &mirror)
        .await
        .unwrap();
    assert_eq!(f.registry.usage().bytes, 60);

    // Unlink the first blob everywhere and collect: the second fits.
    for repository in ["alice/app", "alice/other"] {
        let unlinked = send(
            app,
            Method::DELETE,
            &format!("/v2/{repository}/blobs/{}", Digest::of(&first)),
            Some(ALICE),
            &[],
            Body::empty(),
        )
        .await;
        assert_eq!(unlinked.status, StatusCode::ACCEPTED);
    }
    let collected = f.registry.collect(&collect_all(&[])).await.unwrap();
    assert_eq!((collected.blobs, collected.bytes), (1, 60));
    assert_eq!(f.registry.usage().bytes, 0);
    push_blob(app, ALICE, "alice/app", &second).await;
    let usage = f.registry.usage();
    assert_eq!((usage.bytes, usage.blobs), (60, 1));
    assert_eq!(usage.bytes, disk_bytes(&f.root));

    // A reopened registry counts the same from the disk.
    let reopened = Registry::open(
        &f.root,
        Limits {
            max_total_bytes: Some(100),
            ..Limits::default()
        },
    )
    .unwrap();
    assert_eq!(reopened.usage(), usage);
}

#[tokio::test]
async fn a_manifest_past_the_bound_is_refused() {
    let f = fixture_with(Limits {
        max_total_bytes: Some(64),
        ..Limits::default()
    });
    let config = b"{}".to_vec();
    let layer = vec![b'l'; 60];
    push_blob(&f.app, ALICE, "alice/app", &config).await;
    push_blob(&f.app, ALICE, "alice/app", &layer).await;
    let manifest = image_manifest(&config, &[&layer]);
    let put = send(
        &f.app,
        Method::PUT,
        "/v2/alice/app/manifests/v1",
        Some(ALICE),
        &[("content-type", OCI_MANIFEST)],
        manifest.clone(),
    )
    .await;
    assert_eq!(put.status, StatusCode::INSUFFICIENT_STORAGE, "{put:?}");
    assert!(!f.root.join("repositories/alice/app/_tags/v1").exists());
    assert!(!f.root.join("repositories/alice/app/_manifests").exists());
    assert!(tree(&f.root.join("tmp")).is_empty());
    assert_eq!(f.registry.usage().bytes, 62);
    assert_eq!(f.registry.usage().bytes, disk_bytes(&f.root));
}

/// `copy_image` links in the target only what the source links, and stores the manifests
/// there: an image copied whole is pulled from the target; a copy from a repository that
/// lacks a part fails and stores no manifest.
#[tokio::test]
async fn an_image_is_copied_only_from_a_repository_that_has_it() {
    let f = fixture();
    let manifest = push_image(&f.app, ALICE, "alice/build", "1", "copied").await;
    let digest = f
        .registry
        .copy_image("alice/build", "1", "alice/mirror")
        .await
        .unwrap();
    assert_eq!(digest, Digest::of(&manifest));
    assert!(f.registry.has_manifest("alice/mirror", &digest));
    let get = send(
        &f.app,
        Method::GET,
        &format!("/v2/alice/mirror/manifests/{digest}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(get.status, StatusCode::OK, "{get:?}");

    // A source whose layer's link is gone (deleted) cannot give it: the copy fails and
    // stores no manifest, whatever the content store holds.
    let layer = Digest::of(b"layer of copied");
    let deleted = send(
        &f.app,
        Method::DELETE,
        &format!("/v2/alice/build/blobs/{layer}"),
        Some(ALICE),
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(deleted.status, StatusCode::ACCEPTED, "{deleted:?}");
    let refused = f
        .registry
        .copy_image("alice/build", "1", "alice/other")
        .await;
    assert!(
        matches!(refused, Err(RegistryError::BlobUnknown { .. })),
        "{refused:?}"
    );
    assert!(!f.registry.has_manifest("alice/other", &digest));
}
