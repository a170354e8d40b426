//! The platform registry a real `runway server` serves at `/v2/` beside its API, over the API's
//! TLS (the server's own CA), to the API's tokens: a real client (skopeo) pushes and pulls
//! with a service's deploy token under that service's repositories, and everything else is
//! refused: another service's repositories, the mirror the server writes, an anonymous pull.
//! And the mirror: a deployed image is copied there, and what runs keeps running, scaling and
//! rolling back from it when the image is deleted and its tag moved where it came from.

#![allow(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use support::{FAST_AUTOSCALER, Platform, Settings, run};

/// Bound on one skopeo or helm run.
const TOOL: Duration = Duration::from_secs(120);

/// A deploy token for `service` in `environments`.
fn deploy_token(platform: &Platform, name: &str, service: &str, environments: &[&str]) -> String {
    let (status, created) = platform.call(
        Method::POST,
        "/v1/tokens",
        Some(&platform.token),
        Some(json!({"name": name, "scope": {"deploy": {"service": service, "environments": environments}}})),
    );
    assert_eq!(status, 201, "{created}");
    created["token"].as_str().unwrap().to_owned()
}

/// `skopeo copy` from `from` to `to` (each `transport:reference`), trusting the server's CA,
/// with `creds` (`user:token`) on the registry's side of the copy.
fn skopeo_copy(certs: &Path, from: &str, to: &str, creds: Option<&str>) -> support::Ran {
    let mut copy = Command::new("skopeo");
    copy.args(["copy", "--quiet"]);
    let registry_side = if to.starts_with("docker://") {
        "dest"
    } else {
        "src"
    };
    copy.arg(format!("--{registry_side}-cert-dir")).arg(certs);
    match creds {
        Some(creds) => copy.arg(format!("--{registry_side}-creds={creds}")),
        None => copy.arg(format!("--{registry_side}-no-creds")),
    };
    copy.args([from, to]);
    run(copy, None, TOOL)
}

#[test]
fn the_platform_registry_takes_a_services_images_and_refuses_the_rest() {
    if !runway_oci::testing::require_tools("platform registry", &["skopeo", "umoci", "busybox"]) {
        return;
    }
    let platform = Platform::start(&Settings::default());
    for service in ["hello", "other"] {
        let created = platform.runway(&[
            "services",
            "create",
            service,
            "--owner",
            "team@example.com",
            "--env",
            "dev",
        ]);
        assert!(created.ok(), "{}", created.all());
    }
    let hello = deploy_token(&platform, "ci-hello", "hello", &["dev"]);
    let other = deploy_token(&platform, "ci-other", "other", &["dev"]);
    let admin = platform.token.clone();
    let host = platform.api().trim_start_matches("https://").to_owned();
    // skopeo reads the registry's CA from a directory, as `ca.crt`.
    let certs = tempfile::tempdir().unwrap();
    std::fs::copy(platform.ca(), certs.path().join("ca.crt")).unwrap();
    let layout = runway_oci::testing::busybox_layout().unwrap();
    let source = format!("oci:{}:base", layout.display());
    let creds = |token: &str| format!("ci:{token}");

    // A service's token pushes under its service, and pulls it back.
    let pushed = skopeo_copy(
        certs.path(),
        &source,
        &format!("docker://{host}/hello/app:1.0"),
        Some(&creds(&hello)),
    );
    assert!(
        pushed.ok(),
        "push with the service's token: {}",
        pushed.all()
    );
    let back = tempfile::tempdir().unwrap();
    let pulled = skopeo_copy(
        certs.path(),
        &format!("docker://{host}/hello/app:1.0"),
        &format!("oci:{}:back", back.path().display()),
        Some(&creds(&hello)),
    );
    assert!(
        pulled.ok(),
        "pull with the service's token: {}",
        pulled.all()
    );
    let admin_pull = skopeo_copy(
        certs.path(),
        &format!("docker://{host}/hello/app:1.0"),
        &format!("oci:{}:admin", back.path().display()),
        Some(&creds(&admin)),
    );
    assert!(admin_pull.ok(), "pull as the admin: {}", admin_pull.all());

    // Refused: another service's repository, either way; the mirror; no token at all.
    for (what, ran) in [
        (
            "a push to another service",
            skopeo_copy(
                certs.path(),
                &source,
                &format!("docker://{host}/other/app:1.0"),
                Some(&creds(&hello)),
            ),
        ),
        (
            "a pull of another service's image",
            skopeo_copy(
                certs.path(),
                &format!("docker://{host}/hello/app:1.0"),
                &format!("oci:{}:stolen", back.path().display()),
                Some(&creds(&other)),
            ),
        ),
        (
            "a push to the mirror",
            skopeo_copy(
                certs.path(),
                &source,
                &format!("docker://{host}/hello/mirror:1.0"),
                Some(&creds(&hello)),
            ),
        ),
        (
            "an anonymous pull",
            skopeo_copy(
                certs.path(),
                &format!("docker://{host}/hello/app:1.0"),
                &format!("oci:{}:anonymous", back.path().display()),
                None,
            ),
        ),
    ] {
        assert!(!ran.ok(), "{what} went through: {}", ran.all());
        let said = ran.all().to_lowercase();
        assert!(
            said.contains("denied")
                || said.contains("unauthorized")
                || said.contains("401")
                || said.contains("403"),
            "{what}: {}",
            ran.all()
        );
    }
    // The answers themselves: 401 with a challenge without a token, 403 for another service.
    let (status, _) = platform.call(Method::GET, "/v2/", None, None);
    assert_eq!(status, 401);
    let (status, body) = platform.call(Method::GET, "/v2/hello/app/tags/list", Some(&other), None);
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["errors"][0]["code"], "DENIED", "{body}");
    let (status, body) = platform.call(Method::GET, "/v2/hello/app/tags/list", Some(&hello), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["tags"], json!(["1.0"]));
    // A viewer of hello pulls its images and pushes none (access.md: pushing is a deployer's).
    let (status, viewer) = platform.call(
        Method::POST,
        "/v1/tokens",
        Some(&platform.token),
        Some(json!({"name": "viewer", "scope": {"role": {"role": "viewer", "service": "hello"}}})),
    );
    assert_eq!(status, 201, "{viewer}");
    let viewer = viewer["token"].as_str().unwrap();
    let (status, body) = platform.call(Method::GET, "/v2/hello/app/tags/list", Some(viewer), None);
    assert_eq!(status, 200, "{body}");
    let (status, body) = platform.call(
        Method::POST,
        "/v2/hello/app/blobs/uploads/",
        Some(viewer),
        None,
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["errors"][0]["code"], "DENIED", "{body}");
    assert!(body.to_string().contains("`deployer`"), "{body}");
    // The images are under the data directory, not in memory.
    assert!(platform.data.join("registry").is_dir());
    eprintln!("pushed and pulled busybox through {host}");
}

/// Empties the runtime's image cache, so that what starts next is pulled again, and waits (at
/// most 30 s) until hello in dev has scaled to zero. Returns the cache's blobs directory.
fn cold(platform: &Platform) -> std::path::PathBuf {
    let cached = platform.data.join("runtime/images/blobs/sha256");
    for blob in std::fs::read_dir(&cached).unwrap() {
        std::fs::remove_file(blob.unwrap().path()).unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !platform.status("hello", "dev")["instances"]
        .as_array()
        .is_some_and(Vec::is_empty)
    {
        assert!(std::time::Instant::now() < deadline, "never scaled to zero");
        std::thread::sleep(Duration::from_millis(200));
    }
    cached
}

/// The revision `number` of hello in dev, as the API lists it.
fn revision(platform: &Platform, number: u64) -> serde_json::Value {
    let (status, revisions) = platform.call(
        Method::GET,
        "/v1/services/hello/environments/dev/revisions",
        Some(&platform.token),
        None,
    );
    assert_eq!(status, 200, "{revisions}");
    revisions
        .as_array()
        .and_then(|all| all.iter().find(|r| r["number"] == number))
        .cloned()
        .unwrap_or_else(|| panic!("no revision {number}: {revisions:#}"))
}

/// A deploy copies its image into `hello/mirror` and records both references; the image is then
/// deleted where it came from (its manifest, then the registry's garbage collection) and its
/// tag pushed again with other content. The runtime's own image cache is emptied too, so each
/// instance started from then on is pulled from the mirror: a scale from zero, a restart of
/// the server, a rollback to the first image all serve what was deployed.
#[test]
fn a_deployed_image_outlives_its_deletion_upstream() {
    const HOST: &str = "hello.dev.localhost";
    if !runway_oci::testing::require_tools(
        "mirroring images",
        &["docker-registry", "skopeo", "umoci", "busybox", "runc"],
    ) {
        return;
    }
    let upstream = runway_oci::testing::Registry::start().unwrap();
    let mut platform = Platform::start(&Settings {
        control: FAST_AUTOSCALER.to_owned(),
        sections: format!(
            "runtime:\n  insecure_registries: [\"{}\"]\n",
            upstream.host()
        ),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev"], "mirror-secret");
    support::set_image_manifest(&repo, 0, 1);
    let push = |tag: &str, page: &str| {
        runway_oci::testing::push_busybox_image(
            &upstream,
            "team/web",
            tag,
            &support::web_image(page),
        )
        .unwrap()
    };
    let deploy = |reference: &str| {
        let ran = platform.deploy_image(&repo, "dev", reference);
        assert!(
            ran.ok(),
            "deploy {reference}: {}\n{}",
            ran.all(),
            platform.log()
        );
    };
    let serves = |platform: &Platform, page: &str, what: &str| {
        let (code, body) =
            platform.get_until(HOST, "/index.html", Duration::from_secs(30), |_, b| {
                b == page
            });
        assert_eq!(
            (code, body.as_str()),
            (200, page),
            "{what}\n{}",
            platform.log()
        );
    };

    let one = push("1", "one\n");
    let started = std::time::Instant::now();
    deploy(&one.reference);
    eprintln!(
        "deploy with the mirror: {:.2} s",
        started.elapsed().as_secs_f64()
    );
    serves(&platform, "one\n", "the first image");
    let first = revision(&platform, 1);
    assert_eq!(first["image"], one.pinned, "{first:#}");
    assert_eq!(
        first["mirror"],
        format!("hello/mirror@{}", one.digest),
        "{first:#}"
    );
    let two = push("2", "two\n");
    deploy(&two.reference);
    serves(&platform, "two\n", "the second image");
    // An admin's status shows the registry's disk; a service's token's does not.
    let status = platform.status("hello", "dev");
    assert!(
        status["registry"]["bytes"].as_u64().unwrap() > 0,
        "{status:#}"
    );
    let text = platform.runway(&["status", "--service", "hello", "--env", "dev"]);
    assert!(
        text.stdout.contains("platform registry: "),
        "{}",
        text.all()
    );
    let token = deploy_token(&platform, "ci-hello", "hello", &["dev"]);
    let theirs = platform.runway_as(
        &token,
        &[
            "status",
            "--service",
            "hello",
            "--env",
            "dev",
            "--output",
            "json",
        ],
    );
    assert!(theirs.ok(), "{}", theirs.all());
    assert!(theirs.json().get("registry").is_none(), "{}", theirs.stdout);

    // Gone upstream: both manifests deleted and collected, the tags moved to other content.
    for image in [&one, &two] {
        upstream
            .delete_and_collect("team/web", &image.digest)
            .unwrap();
        let gone = upstream
            .request(
                "GET",
                &format!("/v2/team/web/manifests/{}", image.digest),
                &[],
                &[],
            )
            .unwrap();
        assert_eq!(gone.status, 404, "{} is still upstream", image.digest);
    }
    let moved = push("1", "moved\n");
    push("2", "moved\n");
    assert_ne!(moved.digest, one.digest);
    // And gone from the runtime's cache: what starts next is pulled again, from the mirror.
    // Scale up: scaled to zero, then a request starts an instance.
    let cached = cold(&platform);
    serves(
        &platform,
        "two\n",
        "a cold start after the image went upstream",
    );
    assert!(
        std::fs::read_dir(&cached).unwrap().count() > 0,
        "the cold start pulled nothing"
    );

    // A restart of the server (another API port, so another registry address): what serves
    // is adopted, and new instances come from the mirror where it now is.
    platform.kill9();
    platform.restart();
    serves(&platform, "two\n", "after a restart");

    // A rollback to the first image, from the mirror.
    let back = platform.runway(&[
        "rollback",
        "--service",
        "hello",
        "--env",
        "dev",
        "--to",
        "hello-dev-00001",
        "--wait",
        "--timeout",
        "60s",
    ]);
    assert!(back.ok(), "{}\n{}", back.all(), platform.log());
    serves(&platform, "one\n", "after the rollback");
}

/// An operator's registry as the mirror (`registry.external`), one that serves only its users
/// as GitLab's and Harbor's do: a deploy's image is pushed there with the server's docker
/// login, not into the platform registry, and the instances pull it from there, so the image
/// deleted where it came from still starts. Without the login the deploy fails, saying where
/// it could not push, and records no revision.
#[test]
fn an_external_registry_is_the_mirror() {
    const HOST: &str = "hello.dev.localhost";
    if !runway_oci::testing::require_tools(
        "mirroring to an external registry",
        &["docker-registry", "skopeo", "umoci", "busybox", "runc"],
    ) {
        return;
    }
    let upstream = runway_oci::testing::Registry::start().unwrap();
    let external = runway_oci::testing::Registry::start_with_login().unwrap();
    let platform = Platform::start(&Settings {
        control: FAST_AUTOSCALER.to_owned(),
        sections: format!(
            "runtime:\n  insecure_registries: [\"{}\", \"{}\"]\nregistry:\n  external:\n    \
             repository: {}/mirrors/runway\n",
            upstream.host(),
            external.host(),
            external.host()
        ),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev"], "external-secret");
    support::set_image_manifest(&repo, 0, 1);
    let image = runway_oci::testing::push_busybox_image(
        &upstream,
        "team/web",
        "1",
        &support::web_image("one\n"),
    )
    .unwrap();
    let target = format!("{}/mirrors/runway/hello/mirror", external.host());

    // No login for it yet: refused there, and the deploy says where.
    let refused = platform.deploy_image(&repo, "dev", &image.reference);
    assert!(!refused.ok(), "{}", refused.all());
    assert!(
        refused
            .all()
            .contains(&format!("cannot push it to the mirror {target}")),
        "{}",
        refused.all()
    );
    let (_, revisions) = platform.call(
        Method::GET,
        "/v1/services/hello/environments/dev/revisions",
        Some(&platform.token),
        None,
    );
    assert_eq!(revisions.as_array().map(Vec::len), Some(0), "{revisions:#}");

    // The operator's login, as `docker login` writes it.
    let (user, password, _) = runway_oci::testing::REGISTRY_LOGIN;
    let docker = platform.dir.path().join("docker");
    std::fs::create_dir_all(&docker).unwrap();
    let auth = base64_encode(format!("{user}:{password}").as_bytes());
    std::fs::write(
        docker.join("config.json"),
        json!({"auths": {external.host(): {"auth": auth}}}).to_string(),
    )
    .unwrap();
    let deployed = platform.deploy_image(&repo, "dev", &image.reference);
    assert!(deployed.ok(), "{}\n{}", deployed.all(), platform.log());
    let first = revision(&platform, 1);
    assert_eq!(first["image"], image.pinned, "{first:#}");
    assert_eq!(
        first["mirror"],
        format!("{target}@{}", image.digest),
        "{first:#}"
    );
    // There, and not in the platform registry.
    let manifest = external
        .request(
            "GET",
            &format!("/v2/mirrors/runway/hello/mirror/manifests/{}", image.digest),
            &[
                ("authorization", &format!("Basic {auth}")),
                ("accept", "application/vnd.oci.image.manifest.v1+json"),
            ],
            &[],
        )
        .unwrap();
    assert_eq!(manifest.status, 200);
    assert!(
        !platform.data.join("registry/repositories/hello").exists(),
        "the platform registry has a mirror too"
    );

    // Gone upstream and from the runtime's cache: a cold start pulls the external mirror.
    upstream
        .delete_and_collect("team/web", &image.digest)
        .unwrap();
    cold(&platform);
    let (code, body) = platform.get_until(HOST, "/index.html", Duration::from_secs(30), |_, b| {
        b == "one\n"
    });
    assert_eq!((code, body.as_str()), (200, "one\n"), "{}", platform.log());
}

/// Standard base64 with padding, as a docker `config.json`'s `auth` is written.
fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A folder with `main.py` and a manifest naming a Python base image (built here from the
/// machine's Debian Python, kept in the platform registry) becomes a served URL with `runway
/// deploy --wait`: the image is built and pushed by the CLI, without Docker. A change of code
/// uploads only the files' layer, the config and the manifest; the base's layers are reused.
#[test]
fn a_folder_of_python_is_built_and_served_without_docker() {
    const HOST: &str = "hello.dev.localhost";
    if !runway_oci::testing::require_tools(
        "building images",
        &["skopeo", "umoci", "busybox", "runc", "ldd"],
    ) {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], "build-secret");
    let host = platform.api().trim_start_matches("https://").to_owned();
    // The base, pushed where the team keeps it: under its service in the platform registry.
    let base = support::push_python_base(&format!("{host}/hello/base:3.11"), Some(&platform));

    support::set_build_manifest(&repo, &base);

    let deploy = |page: &str| {
        std::fs::write(repo.join("main.py"), support::python_app(page)).unwrap();
        let started = std::time::Instant::now();
        let ran = platform.runway_for(
            &["deploy", "--env", "dev", "--wait", repo.to_str().unwrap()],
            Duration::from_secs(180),
        );
        assert!(ran.ok(), "deploy: {}\n{}", ran.all(), platform.log());
        let (code, body) = platform.get_until(HOST, "/", Duration::from_secs(30), |_, body| {
            body.trim() == page
        });
        assert_eq!((code, body.trim()), (200, page), "{}", platform.log());
        let took = started.elapsed();
        // "runway: pushed HOST/hello/build@sha256:… (12.3 KiB uploaded in 3 blobs, 4 already there)"
        let line = ran
            .stderr
            .lines()
            .find(|l| l.starts_with("runway: pushed "))
            .unwrap_or_else(|| panic!("no push said: {}", ran.all()))
            .to_owned();
        (took, line)
    };
    let (first, first_push) = deploy("built one");
    let (second, second_push) = deploy("built two");
    eprintln!(
        "source to serving: {:.1} s the first time ({first_push}); {:.1} s after a code change \
         ({second_push})",
        first.as_secs_f64(),
        second.as_secs_f64()
    );
    // The second push: the files' layer, the config and the manifest's blobs only.
    assert!(second_push.contains("in 2 blobs"), "{second_push}");
    assert!(!second_push.contains(" 0 already there"), "{second_push}");
    assert!(
        second_push.contains(" B uploaded") || second_push.contains("KiB uploaded"),
        "more than the code was uploaded: {second_push}"
    );
    // What runs is the image built, mirrored like any other.
    let revision = revision(&platform, 2);
    let image = revision["image"].as_str().unwrap();
    assert!(
        image.starts_with(&format!("{host}/hello/build@sha256:")),
        "{revision:#}"
    );
    assert!(
        revision["mirror"]
            .as_str()
            .unwrap()
            .starts_with("hello/mirror@sha256:")
    );
    // Another service cannot deploy hello's image, nor hello's mirror, though it knows both:
    // the mirror copies only from the deploying service's own repositories.
    let other = platform.onboard("other", &["dev"], "other-secret");
    support::set_image_manifest(&other, 1, 1);
    let mirrored = format!("{host}/{}", revision["mirror"].as_str().unwrap());
    for stolen in [image, mirrored.as_str()] {
        let ran = platform.deploy_image(&other, "dev", stolen);
        assert!(!ran.ok(), "other deployed {stolen}: {}", ran.all());
        assert!(
            ran.stderr.contains("is not one of other's repositories"),
            "{}",
            ran.all()
        );
    }
}

/// With `registry.process_base`, a process revision is an image too: its code snapshot built
/// onto the operator's base (here a Python base built from this machine's Debian Python, in a
/// loopback registry) under `/app`, its command the entrypoint, and mirrored as any deployed
/// image is. The process runs from its snapshot on this machine, as before; that image, deployed
/// as an image, runs the same code in a container and serves the same answers: the one artifact
/// a runtime that runs only images (a cluster) runs.
#[test]
fn a_process_revision_is_an_image_that_serves_as_the_process_does() {
    const HOST: &str = "hello.dev.localhost";
    if !runway_oci::testing::require_tools(
        "process images",
        &[
            "docker-registry",
            "skopeo",
            "umoci",
            "busybox",
            "runc",
            "ldd",
        ],
    ) {
        return;
    }
    let upstream = runway_oci::testing::Registry::start().unwrap();
    let base = support::push_python_base(&format!("{}/base/python:3", upstream.host()), None);
    let platform = Platform::start(&Settings {
        sections: format!(
            "runtime:\n  insecure_registries: [\"{}\"]\nregistry:\n  process_base: {base}\n",
            upstream.host()
        ),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev"], "process-image-secret");
    let deployed = platform.deploy(&repo, "dev");
    assert!(deployed.ok(), "{}\n{}", deployed.all(), platform.log());
    let (code, body) = platform.get(HOST, "/", Duration::from_secs(20));
    assert_eq!(code, 200, "{body}");
    assert!(body.starts_with("hello from hello-dev-00001"), "{body}");
    let first = revision(&platform, 1);
    assert!(first["source"].is_string(), "{first:#}");
    let mirror = first["mirror"]
        .as_str()
        .unwrap_or_else(|| panic!("{first:#}"));
    assert!(mirror.starts_with("hello/mirror@sha256:"), "{first:#}");

    // That image, as an image: the same manifest without `process`, so the image's own
    // entrypoint (the process's command, in /app) runs.
    let path = repo.join(".runway/runway.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    let process = "    process:\n      command: [\"python3\", \"app.py\"]\n";
    assert!(text.contains(process), "{text}");
    std::fs::write(&path, text.replace(process, "")).unwrap();
    let registry = platform.api().trim_start_matches("https://").to_owned();
    let image = format!("{registry}/{mirror}");
    let as_image = platform.deploy_image(&repo, "dev", &image);
    assert!(as_image.ok(), "{}\n{}", as_image.all(), platform.log());
    let (code, body) = platform.get_until(HOST, "/", Duration::from_secs(30), |_, body| {
        body.starts_with("hello from hello-dev-00002")
    });
    assert_eq!(code, 200, "{body}\n{}", platform.log());
    let second = revision(&platform, 2);
    assert!(second["source"].is_null(), "{second:#}");
    assert_eq!(second["mirror"], mirror, "the same image: {second:#}");
}
