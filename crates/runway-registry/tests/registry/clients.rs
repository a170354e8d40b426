//! Real clients against the router served on loopback (plain HTTP), with Basic credentials
//! checked by the test authorizer: skopeo (containers/image), helm (oras-go), and Runway's
//! own puller (oci-client).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use runway_oci::testing::{busybox_layout, require_tools};
use runway_oci::{Credentials, Digest, PullOptions, Store};

use crate::support::{ADMIN, ALICE, BOB, Served, bounded, fixture, skip};

/// The bound on one client command.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(180);

/// Runs `command` within [`CLIENT_TIMEOUT`]; its output.
fn run(command: &mut Command) -> Output {
    bounded(command, CLIENT_TIMEOUT)
}

fn ok(command: &mut Command) -> String {
    let described = format!("{command:?}");
    let output = run(command);
    assert!(
        output.status.success(),
        "{described}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn skopeo() -> Command {
    let mut command = Command::new("skopeo");
    // No user policy or auth file on the machine may change what the test does.
    command.env("REGISTRY_AUTH_FILE", "/nonexistent/auth.json");
    command.arg("--insecure-policy");
    command
}

/// The digest of the manifest an OCI layout's `index.json` names with `tag`.
fn layout_digest(layout: &Path, tag: &str) -> String {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .map(|m| m["digest"].as_str().unwrap().to_string())
        .unwrap_or_default()
}

#[test]
fn skopeo_copies_an_image_in_and_back() {
    if !require_tools(
        "skopeo_copies_an_image_in_and_back",
        &["skopeo", "umoci", "busybox"],
    ) {
        return;
    }
    let f = fixture();
    let served = Served::start(f.app.clone());
    let host = served.host();
    let layout = busybox_layout().unwrap();
    let work = tempfile::tempdir().unwrap();

    for (format, tag) in [(None, "oci"), (Some("v2s2"), "docker")] {
        let digest_file = work.path().join(format!("{tag}.digest"));
        let mut push = skopeo();
        push.args([
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            "--dest-creds",
            ALICE,
            "--digestfile",
        ])
        .arg(&digest_file);
        if let Some(format) = format {
            push.args(["--format", format]);
        }
        ok(push
            .arg(format!("oci:{}:base", layout.display()))
            .arg(format!("docker://{host}/alice/app:{tag}")));
        let pushed = std::fs::read_to_string(&digest_file).unwrap();
        let pushed = Digest::parse(pushed.trim()).unwrap();
        assert!(f.registry.has_manifest("alice/app", &pushed));

        let back = work.path().join(format!("back-{tag}"));
        ok(skopeo()
            .args([
                "copy",
                "--quiet",
                "--src-tls-verify=false",
                "--src-creds",
                ALICE,
            ])
            .arg(format!("docker://{host}/alice/app:{tag}"))
            .arg(format!("oci:{}:back", back.display())));
        if format.is_none() {
            assert_eq!(
                layout_digest(&back, "back"),
                pushed.to_string(),
                "the same manifest came back"
            );
        }
        let inspected = ok(skopeo()
            .args(["inspect", "--raw", "--tls-verify=false", "--creds", ALICE])
            .arg(format!("docker://{host}/alice/app@{pushed}")));
        assert_eq!(Digest::of(inspected.as_bytes()), pushed);
    }

    // Within the registry, skopeo mounts the layers it can (admin may pull alice/app).
    ok(skopeo()
        .args([
            "copy",
            "--quiet",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
        ])
        .args(["--src-creds", ADMIN, "--dest-creds", ADMIN])
        .arg(format!("docker://{host}/alice/app:oci"))
        .arg(format!("docker://{host}/bob/app:copied")));
    let tags = ok(skopeo()
        .args(["list-tags", "--tls-verify=false", "--creds", BOB])
        .arg(format!("docker://{host}/bob/app")));
    assert!(tags.contains("copied"), "{tags}");

    // Refusals: no credentials, wrong ones, another tenant's repository.
    for (creds, what) in [
        (None, "no credentials"),
        (Some("alice:wrong"), "a wrong password"),
        (Some(BOB), "bob in alice/"),
    ] {
        let mut inspect = skopeo();
        inspect.args(["inspect", "--raw", "--tls-verify=false"]);
        match creds {
            Some(creds) => inspect.args(["--creds", creds]),
            None => inspect.arg("--no-creds"),
        };
        let output = run(inspect.arg(format!("docker://{host}/alice/app:oci")));
        assert!(!output.status.success(), "{what} was let in");
    }
}

#[test]
fn runway_pulls_from_it() {
    if !require_tools("runway_pulls_from_it", &["skopeo", "umoci", "busybox"]) {
        return;
    }
    let f = fixture();
    let served = Served::start(f.app.clone());
    let host = served.host();
    let layout = busybox_layout().unwrap();
    ok(skopeo()
        .args([
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            "--dest-creds",
            ALICE,
        ])
        .arg(format!("oci:{}:base", layout.display()))
        .arg(format!("docker://{host}/alice/app:1")));

    let cache = tempfile::tempdir().unwrap();
    let store = Store::open(cache.path().join("images")).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let options = |username: &str, password: &str| PullOptions {
        credentials: Credentials::Basic {
            username: username.to_string(),
            password: password.to_string(),
        },
        insecure_registries: vec![host.clone()],
        id_shift: 0,
        timeout: Duration::from_secs(120),
        ..PullOptions::default()
    };
    let image = runtime
        .block_on(store.pull(
            &format!("{host}/alice/app:1"),
            &options("alice", "alice-secret"),
        ))
        .unwrap();
    assert!(
        image
            .pinned
            .starts_with(&format!("{host}/alice/app@sha256:"))
    );
    assert!(f.registry.has_manifest("alice/app", &image.digest));
    assert!(image.rootfs.path.join("bin/busybox").is_file());
    // Bob's credentials do not pull Alice's image, nor does a wrong password (a fresh cache,
    // so the first pull's copy cannot answer).
    let fresh = Store::open(cache.path().join("fresh")).unwrap();
    for (user, password) in [("bob", "bob-secret"), ("alice", "wrong")] {
        let refused =
            runtime.block_on(fresh.pull(&format!("{host}/alice/app:1"), &options(user, password)));
        assert!(refused.is_err(), "{user} pulled alice/app");
    }
}

/// helm: on PATH, else where `scripts/test` puts it (`target/tools/helm`).
fn helm() -> Option<PathBuf> {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/helm");
    for candidate in [PathBuf::from("helm"), tools] {
        if Command::new(&candidate)
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(candidate);
        }
    }
    skip("helm is not installed (scripts/test installs it in target/tools)");
    None
}

#[test]
fn helm_pushes_and_pulls_a_chart() {
    let Some(helm) = helm() else { return };
    let f = fixture();
    let served = Served::start(f.app.clone());
    let host = served.host();
    let work = tempfile::tempdir().unwrap();
    let helm_cmd = || {
        let mut command = Command::new(&helm);
        command
            .current_dir(work.path())
            .env("HELM_CONFIG_HOME", work.path().join("config"))
            .env("HELM_CACHE_HOME", work.path().join("cache"))
            .env("HELM_DATA_HOME", work.path().join("data"))
            .env("HELM_REGISTRY_CONFIG", work.path().join("registry.json"));
        command
    };
    ok(helm_cmd().args(["create", "demo"]));
    ok(helm_cmd().args(["package", "demo", "--version", "1.2.3"]));
    let packaged = work.path().join("demo-1.2.3.tgz");
    ok(helm_cmd()
        .args(["push"])
        .arg(&packaged)
        .arg(format!("oci://{host}/alice/charts"))
        .args([
            "--plain-http",
            "--username",
            "alice",
            "--password",
            "alice-secret",
        ]));
    let tags = f.registry.get_manifest("alice/charts/demo", "1.2.3");
    let manifest = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(tags)
        .unwrap();
    assert_eq!(manifest.media_type, runway_registry::OCI_MANIFEST);

    let pulled = work.path().join("pulled");
    std::fs::create_dir(&pulled).unwrap();
    ok(helm_cmd()
        .args(["pull"])
        .arg(format!("oci://{host}/alice/charts/demo"))
        .args([
            "--version",
            "1.2.3",
            "--plain-http",
            "--username",
            "alice",
            "--password",
            "alice-secret",
            "--destination",
        ])
        .arg(&pulled));
    assert_eq!(
        std::fs::read(pulled.join("demo-1.2.3.tgz")).unwrap(),
        std::fs::read(&packaged).unwrap(),
        "the same chart came back"
    );
    let refused = run(helm_cmd()
        .args(["pull"])
        .arg(format!("oci://{host}/alice/charts/demo"))
        .args([
            "--version",
            "1.2.3",
            "--plain-http",
            "--username",
            "bob",
            "--password",
            "bob-secret",
            "--destination",
        ])
        .arg(&pulled));
    assert!(!refused.status.success(), "bob pulled alice's chart");
}

/// One HTTP/1.1 exchange over a fresh connection (`Connection: close`): the status line,
/// the headers, and how many body bytes came, read as they arrive and dropped.
fn exchange(host: &str, method: &str, path: &str, body: &[u8]) -> (String, String, usize) {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    stream.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        crate::support::basic(ALICE),
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut reader = BufReader::with_capacity(1 << 16, stream);
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    let mut headers = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
        headers.push_str(&line);
    }
    let mut received = 0;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = reader.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        received += n;
    }
    (status, headers, received)
}

/// A 100 MiB blob pushed in one PATCH and pulled back over loopback; prints the times.
/// Ignored by default (it measures, it checks no rule):
/// `cargo test -p runway-registry --test registry -- --ignored --nocapture measure`.
#[test]
#[ignore = "a measurement"]
fn measure_a_100_mib_blob() {
    const SIZE: usize = 100 << 20;
    let f = fixture();
    let served = Served::start(f.app.clone());
    let host = served.host();
    let blob: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
    let digest = Digest::of(&blob);

    let started = Instant::now();
    let (status, headers, _) = exchange(&host, "POST", "/v2/alice/big/blobs/uploads/", b"");
    assert!(status.contains(" 202 "), "{status}");
    let location = headers
        .lines()
        .find_map(|l| l.strip_prefix("location: "))
        .unwrap()
        .trim()
        .to_string();
    let (status, _, _) = exchange(&host, "PATCH", &location, &blob);
    assert!(status.contains(" 202 "), "{status}");
    let (status, _, _) = exchange(&host, "PUT", &format!("{location}?digest={digest}"), b"");
    assert!(status.contains(" 201 "), "{status}");
    let pushed = started.elapsed();

    let started = Instant::now();
    let (status, _, received) =
        exchange(&host, "GET", &format!("/v2/alice/big/blobs/{digest}"), b"");
    let pulled = started.elapsed();
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(received, SIZE);
    eprintln!(
        "100 MiB blob on loopback: push {pushed:.2?} ({:.0} MiB/s), pull {pulled:.2?} ({:.0} MiB/s)",
        100.0 / pushed.as_secs_f64(),
        100.0 / pulled.as_secs_f64()
    );
}
