//! Integration tests with real parts: a Debian docker-registry on loopback, images built with
//! umoci and pushed with skopeo, and the bundles run by runc and crun.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use runway_oci::testing::{
    BusyboxImage, ManifestFormat, RawLayer, Registry, Runtime, push_busybox_image, push_image,
    raw_tar, require_tools, run_bundle,
};
use runway_oci::{
    BlobKind, BundleOptions, CgroupVersion, Digest, Image, OciError, Platform, PullOptions, Store,
    UserNamespace, build_bundle,
};
use tar::EntryType::{Char, Directory as D, Regular as F, Symlink as S};

const REGISTRY_TOOLS: &[&str] = &["docker-registry", "skopeo", "umoci", "busybox"];
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

fn opts(registry: &Registry) -> PullOptions {
    runway_oci::testing::insecure_pull_options(&registry.host())
}

fn pull(store: &Store, reference: &str, opts: &PullOptions) -> Result<Image, OciError> {
    runway_oci::testing::block_on(store.pull(reference, opts))
}

/// Nothing half-made: `tmp/` is empty and no rootfs exists.
fn assert_nothing_left(store: &Store) {
    let tmp: Vec<_> = std::fs::read_dir(store.root().join("tmp"))
        .expect("tmp")
        .collect();
    assert!(tmp.is_empty(), "tmp/ holds {tmp:?}");
    let rootfs = walk(&store.root().join("rootfs"));
    assert!(
        rootfs.iter().all(|p| !p.contains("sha256/")),
        "a rootfs was left: {rootfs:?}"
    );
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        out.push(entry.path().display().to_string());
        if entry.file_type().is_ok_and(|t| t.is_dir()) && out.len() < 100 {
            out.extend(walk(&entry.path()));
        }
    }
    out
}

fn hello_image() -> BusyboxImage {
    BusyboxImage {
        entrypoint: vec!["/bin/sh".into(), "-c".into()],
        cmd: vec!["echo hello".into()],
        env: vec![
            "PATH=/bin:/usr/bin".into(),
            "FOO=image".into(),
            "BAR=image".into(),
        ],
        working_dir: Some("/home/app".into()),
        user: Some("app".into()),
        ..BusyboxImage::default()
    }
}

#[test]
fn pull_pins_the_digest_and_a_second_pull_is_a_cache_hit() {
    if !require_tools("pull", REGISTRY_TOOLS) {
        return;
    }
    let mut registry = Registry::start().expect("registry");
    let first = push_busybox_image(&registry, "team/app", "v1", &hello_image()).expect("push");
    let cache = tempfile::tempdir().expect("cache");
    let store = Store::open(cache.path()).expect("store");
    let opts = opts(&registry);

    let started = Instant::now();
    let image = pull(&store, &first.reference, &opts).expect("pull by tag");
    let cold = started.elapsed();
    assert_eq!(image.digest, first.digest);
    assert_eq!(image.pinned, first.pinned);
    assert!(!image.cache_hit);
    assert_eq!(image.config.cmd, ["echo hello"]);
    assert!(image.rootfs.path.join("bin/busybox").is_file());
    let after_first = store.stats();
    assert_eq!(after_first.unpacks, 1);
    assert_eq!(after_first.blob_fetches, 2, "config and one layer");

    // The tag moves to another image; the recorded digest still gives the first.
    let second = push_busybox_image(
        &registry,
        "team/app",
        "v1",
        &BusyboxImage {
            cmd: vec!["echo changed".into()],
            ..hello_image()
        },
    )
    .expect("push again");
    assert_ne!(second.digest, first.digest);
    let started = Instant::now();
    let again = pull(&store, &image.pinned, &opts).expect("pull by digest");
    let warm = started.elapsed();
    assert_eq!(again.digest, first.digest);
    assert_eq!(again.config.cmd, ["echo hello"]);
    assert!(again.cache_hit);
    assert_eq!(store.stats(), after_first, "no fetch and no unpack");

    // By tag: one manifest request, then the new image.
    let moved = pull(&store, &first.reference, &opts).expect("pull moved tag");
    assert_eq!(moved.digest, second.digest);
    assert_eq!(moved.config.cmd, ["echo changed"]);

    // A corrupted cache is detected, not trusted: the bad layer is dropped and fetched again.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(store.blob_path(&first.digest)).expect("manifest"))
            .expect("json");
    let layer =
        Digest::parse(manifest["layers"][0]["digest"].as_str().expect("layer")).expect("digest");
    let mut bytes = std::fs::read(store.blob_path(&layer)).expect("cached layer");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(store.blob_path(&layer), &bytes).expect("corrupt");
    std::fs::remove_dir_all(&image.rootfs.path).expect("drop rootfs");
    let err = pull(&store, &image.pinned, &opts).expect_err("corrupt cache");
    assert!(
        matches!(
            &err,
            OciError::DigestMismatch {
                kind: BlobKind::Layer,
                ..
            }
        ),
        "{err}"
    );
    assert!(!store.blob_path(&layer).exists());
    assert!(!image.rootfs.path.exists());
    assert_eq!(
        std::fs::read_dir(store.root().join("tmp"))
            .expect("tmp")
            .count(),
        0
    );
    let healed = pull(&store, &image.pinned, &opts).expect("refetched");
    assert!(healed.rootfs.path.join("bin/busybox").is_file());

    // With the registry gone, the pinned image is still served from the cache.
    registry.stop();
    let offline = pull(&store, &image.pinned, &opts).expect("offline pull by digest");
    assert_eq!(offline.rootfs, image.rootfs);
    let err = pull(&store, &first.reference, &opts).expect_err("a tag needs the registry");
    assert!(matches!(err, OciError::Unreachable { .. }), "{err}");
    eprintln!(
        "busybox image: cold pull {cold:?} (fetch + verify + unpack), cached pull by digest {warm:?}"
    );
}

/// A control plane whose images run on a cluster pins a tag without pulling the image: one
/// manifest fetch, no blob, the same digest a pull pins.
#[test]
fn resolve_pins_a_tag_without_fetching_a_layer() {
    if !require_tools("resolve", REGISTRY_TOOLS) {
        return;
    }
    let registry = Registry::start().expect("registry");
    let pushed = push_busybox_image(&registry, "team/app", "v1", &hello_image()).expect("push");
    let cache = tempfile::tempdir().expect("cache");
    let store = Store::open(cache.path()).expect("store");
    let opts = opts(&registry);
    let pinned =
        runway_oci::testing::block_on(store.resolve(&pushed.reference, &opts)).expect("resolve");
    assert_eq!(pinned, pushed.pinned);
    let stats = store.stats();
    assert_eq!((stats.blob_fetches, stats.unpacks), (0, 0), "{stats:?}");
    // Pinned already: the same, from the cache.
    assert_eq!(
        runway_oci::testing::block_on(store.resolve(&pinned, &opts)).expect("again"),
        pinned
    );
    let err = runway_oci::testing::block_on(
        store.resolve(&format!("{}/team/none:v1", registry.host()), &opts),
    )
    .expect_err("no such image");
    assert!(!err.to_string().is_empty());
    let refused = PullOptions {
        allowed_registries: Some(vec!["registry.example".to_owned()]),
        insecure_registries: Vec::new(),
        ..opts.clone()
    };
    let err = runway_oci::testing::block_on(store.resolve(&pushed.reference, &refused))
        .expect_err("not allowed");
    assert!(matches!(err, OciError::NotAllowed { .. }), "{err}");
}

#[test]
fn docker_v2_manifests_and_indexes() {
    if !require_tools("docker v2 and index", REGISTRY_TOOLS) {
        return;
    }
    let registry = Registry::start().expect("registry");
    let docker = push_busybox_image(
        &registry,
        "docker/app",
        "v2",
        &BusyboxImage {
            format: ManifestFormat::DockerV2,
            ..hello_image()
        },
    )
    .expect("push v2s2");
    let other = push_busybox_image(
        &registry,
        "docker/app",
        "other",
        &BusyboxImage {
            cmd: vec!["echo other".into()],
            ..hello_image()
        },
    )
    .expect("push other");
    let (status, body) = {
        let r = registry
            .request(
                "GET",
                "/v2/docker/app/manifests/v2",
                &[(
                    "Accept",
                    "application/vnd.docker.distribution.manifest.v2+json",
                )],
                &[],
            )
            .expect("get manifest");
        (r.status, String::from_utf8_lossy(&r.body).into_owned())
    };
    assert_eq!(status, 200);
    assert!(
        body.contains("application/vnd.docker.distribution.manifest.v2+json"),
        "{body}"
    );

    let cache = tempfile::tempdir().expect("cache");
    let store = Store::open(cache.path()).expect("store");
    let opts = opts(&registry);
    let image = pull(&store, &docker.reference, &opts).expect("pull docker v2");
    assert_eq!(image.digest, docker.digest);
    assert_eq!(image.config.entrypoint, ["/bin/sh", "-c"]);

    // An index: the host's platform gets one image, s390x the other.
    let other_size = registry
        .request(
            "GET",
            &format!("/v2/docker/app/manifests/{}", other.digest),
            &[("Accept", "application/vnd.oci.image.manifest.v1+json")],
            &[],
        )
        .expect("get other")
        .body
        .len();
    let docker_size = body.len();
    let host = Platform::host();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.list.v2+json",
        "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": other.digest.to_string(), "size": other_size,
             "platform": {"os": "linux", "architecture": "s390x"}},
            {"mediaType": "application/vnd.docker.distribution.manifest.v2+json", "digest": docker.digest.to_string(), "size": docker_size,
             "platform": {"os": host.os, "architecture": host.architecture}},
        ]
    });
    let index_bytes = serde_json::to_vec(&index).expect("json");
    let index_digest = registry
        .put_manifest(
            "docker/app",
            "multi",
            "application/vnd.docker.distribution.manifest.list.v2+json",
            &index_bytes,
        )
        .expect("put index");
    let reference = format!("{}/docker/app:multi", registry.host());
    let picked = pull(&store, &reference, &opts).expect("pull index");
    assert_eq!(picked.digest, docker.digest);
    assert_eq!(picked.index_digest, Some(index_digest.clone()));
    assert_eq!(
        picked.pinned, docker.pinned,
        "the pin is the platform's manifest"
    );
    let s390x = PullOptions {
        platform: Platform {
            os: "linux".into(),
            architecture: "s390x".into(),
            variant: None,
        },
        ..opts.clone()
    };
    let picked = pull(&store, &reference, &s390x).expect("pull index for s390x");
    assert_eq!(picked.digest, other.digest);
    let arm = PullOptions {
        platform: Platform {
            os: "linux".into(),
            architecture: "riscv64".into(),
            variant: None,
        },
        ..opts
    };
    let err = pull(
        &store,
        &format!("{}/docker/app@{index_digest}", registry.host()),
        &arm,
    )
    .expect_err("no riscv64");
    assert!(matches!(err, OciError::NoMatchingPlatform { .. }), "{err}");
}

#[test]
fn concurrent_pulls_share_one_rootfs() {
    if !require_tools("concurrent pulls", REGISTRY_TOOLS) {
        return;
    }
    let registry = Registry::start().expect("registry");
    let pushed = push_busybox_image(&registry, "race/app", "v1", &hello_image()).expect("push");
    let cache = tempfile::tempdir().expect("cache");
    let store = Store::open(cache.path()).expect("store");
    let opts = opts(&registry);
    let (a, b, c) = runway_oci::testing::block_on(async {
        tokio::join!(
            store.pull(&pushed.reference, &opts),
            store.pull(&pushed.reference, &opts),
            store.pull(&pushed.pinned, &opts)
        )
    });
    let (a, b, c) = (a.expect("a"), b.expect("b"), c.expect("c"));
    assert_eq!(a.rootfs, b.rootfs);
    assert_eq!(b.rootfs, c.rootfs);
    assert!(a.rootfs.path.join("bin/busybox").is_file());
    let tmp: Vec<_> = std::fs::read_dir(store.root().join("tmp"))
        .expect("tmp")
        .collect();
    assert!(tmp.is_empty(), "losers left {tmp:?}");
}

#[test]
fn gzip_zstd_and_plain_tar_layers_with_whiteouts() {
    if !require_tools("layer formats", &["docker-registry"]) {
        return;
    }
    let registry = Registry::start().expect("registry");
    let lower = raw_tar(&[
        (D, "etc/", "", b""),
        (F, "etc/keep", "", b"kept"),
        (F, "etc/removed", "", b"x"),
        (D, "data/", "", b""),
        (F, "data/old", "", b"x"),
        (D, "data/sub/", "", b""),
        (F, "data/sub/old", "", b"x"),
        (S, "link", "/etc/keep", b""),
    ])
    .expect("tar");
    let upper = raw_tar(&[
        (F, "etc/.wh.removed", "", b""),
        (F, ".wh.link", "", b""),
        (F, "data/.wh..wh..opq", "", b""),
        (F, "data/new", "", b"new"),
        (F, "zstd-was-here", "", b"zstd"),
    ])
    .expect("tar");
    let top = raw_tar(&[(F, "plain", "", b"plain tar")]).expect("tar");
    let layers = [
        RawLayer::gzip(lower).expect("gzip"),
        RawLayer::zstd(upper),
        RawLayer::tar(top),
    ];
    let pushed = push_image(
        &registry,
        "layers/app",
        "v1",
        &layers,
        serde_json::json!({"Cmd": ["/x"]}),
    )
    .expect("push");
    let cache = tempfile::tempdir().expect("cache");
    let store = Store::open(cache.path()).expect("store");
    let started = Instant::now();
    let image = pull(&store, &pushed.reference, &opts(&registry)).expect("pull");
    eprintln!(
        "three small layers (gzip, zstd, tar): pulled and unpacked in {:?}",
        started.elapsed()
    );
    let root = &image.rootfs.path;
    let read = |p: &str| std::fs::read_to_string(root.join(p)).ok();
    assert_eq!(read("etc/keep").as_deref(), Some("kept"));
    assert_eq!(read("etc/removed"), None);
    assert!(
        root.join("link").symlink_metadata().is_err(),
        "whiteout removed the symlink"
    );
    assert_eq!(read("data/old"), None);
    assert!(
        !root.join("data/sub").exists(),
        "opaque directory hid lower subdirectories"
    );
    assert_eq!(read("data/new").as_deref(), Some("new"));
    assert_eq!(read("zstd-was-here").as_deref(), Some("zstd"));
    assert_eq!(read("plain").as_deref(), Some("plain tar"));
    assert!(!root.join("data/.wh..wh..opq").exists());
    assert!(root.join("proc").is_dir() && root.join("etc/resolv.conf").is_file());
}

#[test]
fn bad_inputs_are_clear_errors_and_leave_nothing() {
    if !require_tools("bad inputs", REGISTRY_TOOLS) {
        return;
    }
    let registry = Registry::start().expect("registry");
    let cache = tempfile::tempdir().expect("cache");
    let store = Store::open(cache.path()).expect("store");
    let opts = opts(&registry);

    // Unknown image.
    let err = pull(&store, &format!("{}/no/such:image", registry.host()), &opts)
        .expect_err("unknown image");
    eprintln!("unknown image: {err}");
    assert!(
        matches!(err, OciError::NotFound { status: 404, .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("no/such:image not found at 127.0.0.1"),
        "{err}"
    );
    assert_nothing_left(&store);

    // A closed port.
    let port = runway_oci::testing::free_port().expect("port");
    let closed = format!("127.0.0.1:{port}");
    let closed_opts = PullOptions {
        insecure_registries: vec![closed.clone()],
        ..opts.clone()
    };
    let err = pull(&store, &format!("{closed}/a/b:c"), &closed_opts).expect_err("refused");
    eprintln!("closed port: {err}");
    assert!(
        matches!(&err, OciError::Unreachable { scheme: "http", .. }),
        "{err}"
    );

    // A plain-HTTP registry not marked insecure: HTTPS is tried and fails.
    let pushed = push_busybox_image(&registry, "bad/app", "v1", &hello_image()).expect("push");
    let strict = PullOptions {
        insecure_registries: Vec::new(),
        ..opts.clone()
    };
    let err = pull(&store, &pushed.reference, &strict).expect_err("https required");
    eprintln!("https required: {err}");
    assert!(
        matches!(
            &err,
            OciError::Unreachable {
                scheme: "https",
                ..
            }
        ),
        "{err}"
    );
    assert_nothing_left(&store);

    // A tampered layer in the registry's storage: digest mismatch, blob not kept.
    let manifest = registry
        .request(
            "GET",
            &format!("/v2/bad/app/manifests/{}", pushed.digest),
            &[("Accept", "application/vnd.oci.image.manifest.v1+json")],
            &[],
        )
        .expect("manifest");
    let manifest: serde_json::Value = serde_json::from_slice(&manifest.body).expect("json");
    let layer = Digest::parse(
        manifest["layers"][0]["digest"]
            .as_str()
            .expect("layer digest"),
    )
    .expect("digest");
    let data = registry.blob_data_path(&layer);
    let mut bytes = std::fs::read(&data).expect("blob data");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&data, &bytes).expect("tamper");
    let err = pull(&store, &pushed.reference, &opts).expect_err("tampered");
    eprintln!("tampered: {err}");
    assert!(
        matches!(&err, OciError::DigestMismatch { kind: BlobKind::Layer, expected, .. } if *expected == layer.to_string()),
        "{err}"
    );
    assert!(!store.blob_path(&layer).exists(), "the bad blob was kept");
    assert_nothing_left(&store);

    // Layers that try to escape, or carry a device.
    let marker = format!("runway-oci-escape-{}", std::process::id());
    let host_marker = std::env::temp_dir().join(&marker);
    let escape_path = format!("../../../../../../tmp/{marker}");
    let through_link = format!("evil/{marker}");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "dotdot",
            raw_tar(&[(F, &escape_path, "", b"x")]).expect("tar"),
            "`..`",
        ),
        (
            "symlink",
            raw_tar(&[(S, "evil", "/tmp", b""), (F, &through_link, "", b"x")]).expect("tar"),
            "symlink",
        ),
        (
            "device",
            raw_tar(&[(Char, "dev/null", "", b"")]).expect("tar"),
            "device",
        ),
    ];
    for (name, tar, reason) in cases {
        let pushed = push_image(
            &registry,
            &format!("evil/{name}"),
            "v1",
            &[RawLayer::gzip(tar).expect("gzip")],
            serde_json::json!({}),
        )
        .expect("push evil");
        let err = pull(&store, &pushed.reference, &opts).expect_err(name);
        eprintln!("{name}: {err}");
        assert!(
            matches!(&err, OciError::UnsafeEntry { .. }),
            "{name}: {err}"
        );
        assert!(err.to_string().contains(reason), "{name}: {err}");
        assert!(!host_marker.exists(), "{name} escaped");
        assert_nothing_left(&store);
    }
}

/// A CA, and a certificate and key for `127.0.0.1` it signed, in PEM.
fn ca_and_server_certificate() -> (String, String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "runway-oci test CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_pem = ca.self_signed(&ca_key).expect("ca").pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().expect("key");
    let mut server = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = server.signed_by(&key, &issuer).expect("sign");
    (ca_pem, cert.pem(), key.serialize_pem())
}

/// A registry served over HTTPS with a certificate from a private CA: refused until the CA is
/// among `extra_roots`.
#[test]
fn https_registries_with_a_private_ca_need_extra_roots() {
    if !require_tools("https registry", &["docker-registry"]) {
        return;
    }
    let plain = Registry::start().expect("registry");
    let pushed = push_image(
        &plain,
        "tls/app",
        "v1",
        &[RawLayer::tar(
            raw_tar(&[(F, "hello", "", b"over tls")]).expect("tar"),
        )],
        serde_json::json!({"Cmd": ["/hello"]}),
    )
    .expect("push");
    let (ca, certificate, key) = ca_and_server_certificate();
    let tls = Registry::start_tls(&plain.storage_dir(), certificate.as_bytes(), key.as_bytes())
        .expect("https registry");
    let reference = format!("{}/tls/app:v1", tls.host());
    let cache = tempfile::tempdir().expect("cache");
    let store = Store::open(cache.path()).expect("store");
    let https = PullOptions {
        insecure_registries: Vec::new(),
        ..opts(&plain)
    };

    let err = pull(&store, &reference, &https).expect_err("an unknown CA");
    eprintln!("without the CA: {err}");
    assert!(
        matches!(&err, OciError::Unreachable { scheme: "https", reason, .. } if reason.contains("UnknownIssuer")),
        "{err}"
    );
    assert!(err.to_string().contains("extra_roots"), "{err}");
    assert_nothing_left(&store);

    // Trusted with the CA, given among other certificates.
    let (other_ca, _, _) = ca_and_server_certificate();
    let trusting = PullOptions {
        extra_roots: format!("{other_ca}{ca}").into_bytes(),
        ..https.clone()
    };
    let image = pull(&store, &reference, &trusting).expect("pull over https");
    assert_eq!(image.digest, pushed.digest);
    assert_eq!(
        std::fs::read_to_string(image.rootfs.path.join("hello")).ok(),
        Some("over tls".to_owned())
    );
    let fetched = runway_oci::testing::block_on(store.fetch(
        &reference,
        runway_oci::Platforms::All,
        &trusting,
    ))
    .expect("fetch over https");
    assert_eq!(fetched.digest, pushed.digest);

    // Not certificates: a clear error before any request.
    for (bad, what) in [
        (b"not pem at all".to_vec(), "no PEM certificate"),
        (
            b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n".to_vec(),
            "certificate 1",
        ),
    ] {
        let err = pull(
            &store,
            &reference,
            &PullOptions {
                extra_roots: bad,
                ..https.clone()
            },
        )
        .expect_err("bad PEM");
        assert!(matches!(err, OciError::ExtraRoots { .. }), "{err}");
        assert!(err.to_string().contains(what), "{err}");
    }
}

static CONTAINER: AtomicU32 = AtomicU32::new(0);

fn container_id() -> String {
    format!(
        "runway-oci-test-{}-{}",
        std::process::id(),
        CONTAINER.fetch_add(1, Ordering::Relaxed)
    )
}

fn run(runtime: Runtime, image: &Image, options: BundleOptions) -> runway_oci::testing::RunOutput {
    let dir = tempfile::tempdir().expect("bundle dir");
    let id = container_id();
    let options = BundleOptions {
        cgroups_path: Some(format!("/runway-oci-test/{id}")),
        hostname: Some("box".into()),
        ..options
    };
    build_bundle(dir.path(), &image.config, &image.rootfs, &options).expect("bundle");
    run_bundle(runtime, dir.path(), &id, RUN_TIMEOUT).expect("run")
}

fn script(s: &str) -> BundleOptions {
    BundleOptions {
        args: Some(vec![s.to_string()]),
        ..BundleOptions::default()
    }
}

#[test]
fn bundles_run_under_runc_and_crun() {
    if !require_tools(
        "bundles",
        &[REGISTRY_TOOLS, &["runc", "crun", "unshare"]].concat(),
    ) {
        return;
    }
    let registry = Registry::start().expect("registry");
    let pushed = push_busybox_image(&registry, "run/app", "v1", &hello_image()).expect("push");
    let cache = tempfile::tempdir().expect("cache");
    let store = Store::open(cache.path()).expect("store");
    let image = pull(&store, &pushed.reference, &opts(&registry)).expect("pull");

    // The image's own command.
    let out = run(Runtime::Runc, &image, BundleOptions::default());
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "hello\n"),
        "{out:?}"
    );

    // env (caller wins), args (replace CMD), cwd, user and groups, user namespace, hostname.
    let out = run(
        Runtime::Runc,
        &image,
        BundleOptions {
            env: vec![
                ("BAR".into(), "caller".into()),
                ("PORT".into(), "8080".into()),
            ],
            ..script(
                "echo $FOO $BAR $PORT; pwd; id -u; id -g; id -G; cat /proc/self/uid_map; hostname; grep CapEff /proc/self/status",
            )
        },
    );
    let lines: Vec<&str> = out.stdout.lines().map(str::trim).collect();
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(lines[0], "image caller 8080");
    assert_eq!(lines[1], "/home/app");
    assert_eq!(lines[2], "1000");
    assert_eq!(lines[3], "1000");
    assert_eq!(lines[4], "1000 50", "supplementary group from /etc/group");
    assert_eq!(
        lines[5].split_whitespace().collect::<Vec<_>>(),
        ["0", "100000", "65536"]
    );
    assert_eq!(lines[6], "box");
    assert_eq!(
        lines[7].split_whitespace().nth(1),
        Some("0000000000000000"),
        "no capabilities"
    );

    // command replaces ENTRYPOINT, and the root filesystem is read-only.
    let out = run(
        Runtime::Runc,
        &image,
        BundleOptions {
            command: Some(vec![
                "/bin/busybox".into(),
                "sh".into(),
                "-c".into(),
                "touch /bin/x 2>&1; touch /tmp/ok && echo tmp-ok".into(),
            ]),
            user: Some("0".into()),
            ..BundleOptions::default()
        },
    );
    assert!(out.stdout.contains("Read-only file system"), "{out:?}");
    assert!(out.stdout.contains("tmp-ok"), "{out:?}");

    // Over the memory limit: OOM-killed (SIGKILL, 137).
    let out = run(
        Runtime::Runc,
        &image,
        BundleOptions {
            memory_limit_bytes: Some(32 << 20),
            ..script("x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived ${#x}")
        },
    );
    assert_eq!(out.code, Some(137), "{out:?}");
    assert!(!out.stdout.contains("survived"), "{out:?}");

    // The CPU quota reaches the cgroup (v1: the container sees its own cpu controller).
    if matches!(CgroupVersion::detect(), CgroupVersion::V1 { .. }) {
        let out = run(
            Runtime::Runc,
            &image,
            BundleOptions {
                cpu_millis: Some(250),
                ..script(
                    "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us",
                )
            },
        );
        assert_eq!(
            out.stdout.split_whitespace().collect::<Vec<_>>(),
            ["25000", "100000"],
            "{out:?}"
        );
    }

    // crun runs the same bundle.
    let out = run(Runtime::Crun, &image, BundleOptions::default());
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "hello\n"),
        "crun: {out:?}"
    );
    let out = run(
        Runtime::Crun,
        &image,
        BundleOptions {
            memory_limit_bytes: Some(32 << 20),
            ..script("x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived ${#x}")
        },
    );
    assert_eq!(out.code, Some(137), "crun: {out:?}");

    // Without a user namespace: a rootfs with unshifted ownership, the host's id map.
    let started = Instant::now();
    let plain = pull(
        &store,
        &image.pinned,
        &PullOptions {
            id_shift: 0,
            ..opts(&registry)
        },
    )
    .expect("pull unshifted");
    eprintln!(
        "busybox image: unpack from cached blobs (id shift 0) {:?}",
        started.elapsed()
    );
    assert_eq!(
        store.stats().blob_fetches,
        2,
        "the blobs came from the cache"
    );
    assert_ne!(plain.rootfs.path, image.rootfs.path);
    let no_userns = BundleOptions {
        user_namespace: None,
        ..script("cat /proc/self/uid_map; id -u")
    };
    let out = run(Runtime::Runc, &plain, no_userns.clone());
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(
        out.stdout.split_whitespace().collect::<Vec<_>>(),
        ["0", "0", "4294967295", "1000"]
    );
    // The shifted rootfs with no user namespace is refused before anything runs.
    let dir = tempfile::tempdir().expect("dir");
    let err = build_bundle(dir.path(), &image.config, &image.rootfs, &no_userns)
        .expect_err("shift mismatch");
    assert!(
        matches!(
            err,
            OciError::InvalidBundle {
                field: "user_namespace",
                ..
            }
        ),
        "{err}"
    );
    let custom = BundleOptions {
        user_namespace: Some(UserNamespace {
            host_base: 200_000,
            size: 65_536,
        }),
        ..BundleOptions::default()
    };
    assert!(build_bundle(dir.path(), &image.config, &image.rootfs, &custom).is_err());
}
