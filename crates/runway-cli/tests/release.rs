//! The release `scripts/release` builds. Building one takes minutes, so the test command
//! (`scripts/test`) builds it once, before the tests, and names its directory in
//! `RUNWAY_RELEASE_DIST`; without it these tests say so and pass on a developer's machine, and
//! fail under `CI=true`.

#![allow(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const BINARIES: [&str; 4] = ["runway", "runway-ingress", "runway-supervisor", "deployer"];

fn repo_root() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .canonicalize()
        .unwrap()
}

/// The release's directory, or `None` (said) where none was built.
fn dist() -> Option<PathBuf> {
    match std::env::var_os("RUNWAY_RELEASE_DIST") {
        Some(dir) => Some(repo_root().join(dir)),
        None => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "RUNWAY_RELEASE_DIST is not set: scripts/test builds the release first"
            );
            eprintln!("skipped: no release built (scripts/release, then RUNWAY_RELEASE_DIST)");
            None
        }
    }
}

/// What a command printed on stdout; panics with its stderr when it failed.
fn output(command: &mut Command) -> String {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn git(args: &[&str]) -> String {
    output(Command::new("git").args(args).current_dir(repo_root()))
        .trim()
        .to_owned()
}

/// The commit and date every binary must say: this checkout's, and the commit's date in UTC.
/// (A release built with `--dirty` from a checkout with changes says `-dirty` after the
/// commit: what the tests do to the tree after it is built is not the release's.)
fn expected_build() -> (String, String) {
    let commit = git(&["rev-parse", "HEAD"]);
    let seconds = git(&["log", "-1", "--format=%ct"]);
    let date = output(Command::new("date").args(["-u", "-d", &format!("@{seconds}"), "+%F"]));
    (commit, date.trim().to_owned())
}

/// Each file is what SHA256SUMS says; each binary is statically linked and says the
/// version, commit and date of this checkout.
#[test]
fn every_binary_is_static_checksummed_and_says_its_commit() {
    let Some(dist) = dist() else { return };
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    let listed: BTreeSet<&str> = sums
        .lines()
        .filter_map(|line| line.split_once("  ").map(|(_, name)| name))
        .collect();
    for binary in BINARIES {
        assert!(listed.contains(format!("bin/{binary}").as_str()), "{sums}");
    }
    assert!(listed.contains("sbom.cdx.json"), "{sums}");
    output(
        Command::new("sha256sum")
            .args(["--check", "--strict", "--quiet", "SHA256SUMS"])
            .current_dir(&dist),
    );

    let (commit, date) = expected_build();
    let version = env!("CARGO_PKG_VERSION");
    for binary in BINARIES {
        let path = dist.join("bin").join(binary);
        let kind = output(Command::new("file").arg("-b").arg(&path));
        assert!(kind.contains("static"), "{binary}: {kind}");
        if binary == "deployer" {
            let said = output(Command::new(&path).arg("version"));
            assert!(said.starts_with(&format!("deployer {version}\n")), "{said}");
            assert!(said.contains(&format!("\ncommit: {commit}")), "{said}");
            assert!(said.contains(&format!("\ndate: {date}\n")), "{said}");
        } else {
            let said = output(Command::new(&path).arg("--version"));
            let line = format!("{binary} {version}, commit {commit}");
            assert!(
                said.starts_with(&line),
                "{said:?} does not start with {line:?}"
            );
            assert!(
                said.contains(&format!(", {date}")),
                "{said:?}: no date {date}"
            );
        }
    }
}

/// The static binaries run in a root that holds nothing else (no libc, no NSS library, no
/// /etc), under runc.
#[test]
fn the_static_binaries_run_in_an_empty_root() {
    let Some(dist) = dist() else { return };
    let bundle = tempfile::tempdir().unwrap();
    let rootfs = bundle.path().join("rootfs");
    std::fs::create_dir(&rootfs).unwrap();
    for binary in ["runway", "deployer"] {
        std::fs::copy(dist.join("bin").join(binary), rootfs.join(binary)).unwrap();
    }
    output(
        Command::new("runc")
            .args(["spec", "--bundle"])
            .arg(bundle.path()),
    );
    let (commit, _) = expected_build();
    for (args, said) in [
        (vec!["/runway", "--version"], format!("commit {commit}")),
        (vec!["/deployer", "version"], format!("commit: {commit}")),
    ] {
        let config = bundle.path().join("config.json");
        let mut spec: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
        spec["process"]["terminal"] = false.into();
        spec["process"]["args"] = serde_json::json!(args);
        spec["root"]["readonly"] = true.into();
        std::fs::write(&config, spec.to_string()).unwrap();
        let id = format!("runway-release-test-{}", std::process::id());
        let run = Command::new("timeout")
            .args(["30", "runc", "run", "--bundle"])
            .arg(bundle.path())
            .arg(&id)
            .output()
            .unwrap();
        let _ = Command::new("runc")
            .args(["delete", "--force", &id])
            .output();
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success() && stdout.contains(&said),
            "{args:?} in an empty root: {}\n{stdout}\n{}",
            run.status,
            String::from_utf8_lossy(&run.stderr)
        );
    }
}

/// `cargo metadata`'s packages by id, and the ids the workspace links on the release's
/// target (dev-dependencies left out).
fn linked_packages() -> (BTreeMap<String, (String, String)>, BTreeSet<String>) {
    let metadata: serde_json::Value = serde_json::from_str(&output(
        Command::new(env!("CARGO"))
            .args(["metadata", "--format-version", "1", "--locked"])
            .args(["--filter-platform", "x86_64-unknown-linux-gnu"])
            .current_dir(repo_root()),
    ))
    .unwrap();
    let packages: BTreeMap<String, (String, String)> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_str().unwrap().to_owned(),
                (
                    p["name"].as_str().unwrap().to_owned(),
                    p["version"].as_str().unwrap().to_owned(),
                ),
            )
        })
        .collect();
    let nodes: BTreeMap<&str, &serde_json::Value> = metadata["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| (node["id"].as_str().unwrap(), node))
        .collect();
    // From every member, along the edges that are not only a dev-dependency.
    let mut linked: BTreeSet<String> = BTreeSet::new();
    let mut next: Vec<String> = metadata["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    while let Some(id) = next.pop() {
        if !linked.insert(id.clone()) {
            continue;
        }
        for dep in nodes[id.as_str()]["deps"].as_array().unwrap() {
            let kinds = dep["dep_kinds"].as_array().unwrap();
            if kinds.iter().any(|k| k["kind"].as_str() != Some("dev")) {
                next.push(dep["pkg"].as_str().unwrap().to_owned());
            }
        }
    }
    (packages, linked)
}

/// The SBOM names every crate the workspace links (each at its version in Cargo.lock), and
/// no path of the machine it was built on.
#[test]
fn the_sbom_lists_every_crate_the_release_links() {
    let Some(dist) = dist() else { return };
    let text = std::fs::read_to_string(dist.join("sbom.cdx.json")).unwrap();
    let root = repo_root();
    assert!(
        !text.contains(root.to_str().unwrap()),
        "the SBOM names the checkout's path"
    );
    let sbom: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    let listed: BTreeSet<(String, String)> = sbom["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["version"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let (packages, linked) = linked_packages();
    let missing: Vec<&(String, String)> = linked
        .iter()
        .map(|id| &packages[id])
        .filter(|package| !listed.contains(*package))
        .collect();
    assert!(missing.is_empty(), "linked, not in the SBOM: {missing:?}");
    let dev_only = packages.len() - linked.len();
    eprintln!(
        "the SBOM lists {} components; Cargo.lock has {} packages on this target, {dev_only} of them \
         dev-dependencies only",
        listed.len(),
        packages.len()
    );
}

/// The registry the release was pushed to (`RUNWAY_RELEASE_REGISTRY`, `HOST:PORT/PATH`, plain
/// HTTP on loopback), or `None` (said) where none was given.
fn registry() -> Option<String> {
    match std::env::var("RUNWAY_RELEASE_REGISTRY") {
        Ok(registry) => Some(registry),
        Err(_) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "RUNWAY_RELEASE_REGISTRY is not set: scripts/test pushes the release to a registry on loopback"
            );
            eprintln!(
                "skipped: the release was not pushed (scripts/release --push, then RUNWAY_RELEASE_REGISTRY)"
            );
            None
        }
    }
}

/// `images.txt`: each image's name and its reference by digest.
fn released_images(dist: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(dist.join("images.txt"))
        .unwrap()
        .lines()
        .map(|line| {
            let (name, reference) = line.split_once(' ').unwrap();
            (name.to_owned(), reference.to_owned())
        })
        .collect()
}

/// A blob of the release's OCI layout, as JSON.
fn layout_blob(dist: &Path, digest: &str) -> serde_json::Value {
    let hex = digest.strip_prefix("sha256:").unwrap();
    serde_json::from_slice(&std::fs::read(dist.join("oci/blobs/sha256").join(hex)).unwrap())
        .unwrap()
}

/// Both images are in the release's OCI layout under their version, named in `images.txt` by
/// the layout's digests, annotated with where they came from, and run as the role allows.
#[test]
fn the_images_are_annotated_and_named_by_digest() {
    let Some(dist) = dist() else { return };
    let version = env!("CARGO_PKG_VERSION");
    let (commit, _) = expected_build();
    let images = released_images(&dist);
    assert_eq!(
        images.keys().map(String::as_str).collect::<Vec<_>>(),
        ["runway", "runway-cli"]
    );
    let index = layout_blob_index(&dist);
    for (name, user) in [("runway", "0:0"), ("runway-cli", "65532:65532")] {
        let entry = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| {
                m["annotations"]["org.opencontainers.image.ref.name"] == format!("{name}-{version}")
            })
            .unwrap_or_else(|| panic!("{name}-{version} is not in the layout: {index}"));
        let digest = entry["digest"].as_str().unwrap();
        assert!(
            images[name].ends_with(&format!("/{name}:{version}@{digest}")),
            "{name}: {}",
            images[name]
        );
        let manifest = layout_blob(&dist, digest);
        let annotations = &manifest["annotations"];
        assert_eq!(annotations["org.opencontainers.image.version"], version);
        // The commit, `-dirty` after it when the release was built from a tree with changes.
        let revision = annotations["org.opencontainers.image.revision"]
            .as_str()
            .unwrap();
        assert!(revision.starts_with(&commit), "{revision}");
        assert_eq!(
            annotations["org.opencontainers.image.source"],
            env!("CARGO_PKG_REPOSITORY")
        );
        let config = layout_blob(&dist, manifest["config"]["digest"].as_str().unwrap());
        assert_eq!(config["config"]["User"], user, "{name}");
        assert_eq!(
            config["config"]["Labels"]["org.opencontainers.image.revision"],
            revision
        );
        // No entrypoint: a CI job's shell starts in it.
        assert!(config["config"]["Entrypoint"].is_null(), "{name}: {config}");
        let size: u64 = manifest["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["size"].as_u64().unwrap())
            .sum();
        eprintln!("{name}: {size} bytes compressed");
    }
}

fn layout_blob_index(dist: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dist.join("oci/index.json")).unwrap()).unwrap()
}

/// The CI component's check that the job's image holds its Runway (templates/runway.yml,
/// the jobs' `before_script`).
fn component_check() -> String {
    let text = std::fs::read_to_string(repo_root().join("templates/runway.yml")).unwrap();
    let (_, body) = text.split_once("\n---\n").unwrap();
    let body = runway_manifest::parse(&runway_manifest::SourceFile::new("runway.yml", body))
        .unwrap()
        .value;
    body[".runway-$[[ inputs.environment ]]"]["before_script"][0]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Waits (bounded) until `status` passes `check`; panics with the last status otherwise.
async fn wait_until(
    runtime: &runway_runtime::LocalRuntime,
    id: &str,
    what: &str,
    check: impl Fn(&runway_runtime::status::InstanceStatus) -> bool,
) -> runway_runtime::status::InstanceStatus {
    use runway_runtime::Runtime as _;
    let mut status = runtime.watch(id).await.unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let now = status.borrow_and_update().clone();
        if check(&now) {
            return now;
        }
        let logs = runtime.logs(id, 20).await.unwrap_or_default();
        match tokio::time::timeout_at(deadline, status.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => panic!("{id}: its status ended before it was {what}: {now:?}\n{logs:?}"),
            Err(_) => panic!("{id}: not {what} in time: {now:?}\n{logs:?}"),
        }
    }
}

/// The released images, pulled back from the registry they were pushed to by Runway's own
/// runtime and run under runc: `runway-cli` says its version as user 65532, and `runway
/// server` from the `runway` image starts and answers `/healthz`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pushed_images_are_pulled_back_and_run_by_runway() {
    use runway_runtime::Runtime as _;
    use runway_runtime::spec::{Artifact, Check, InstanceSpec, Probe, Probes, RestartMode};
    let Some(dist) = dist() else { return };
    let Some(registry) = registry() else { return };
    let images = released_images(&dist);
    let host = registry.split('/').next().unwrap().to_owned();
    for reference in images.values() {
        assert!(
            reference.starts_with(&format!("{registry}/")),
            "{reference}"
        );
    }
    let state = tempfile::tempdir().unwrap();
    let mut config = runway_runtime::LocalConfig::new(
        state.path(),
        runway_runtime::SupervisorCommand {
            program: env!("CARGO_BIN_EXE_runway-supervisor").into(),
            args: vec![],
        },
    );
    config.pull.insecure_registries = vec![host];
    let runtime = runway_runtime::LocalRuntime::new(config);
    let spec = |id: &str, image: &str, script: &str| InstanceSpec {
        id: id.to_owned(),
        service: "release".to_owned(),
        revision: "release-1".to_owned(),
        artifact: Artifact::Image {
            reference: images[image].clone(),
            command: Some(vec!["/bin/sh".into(), "-c".into()]),
            args: Some(vec![script.to_owned()]),
            working_dir: None,
        },
        env: BTreeMap::new(),
        secret_env: BTreeMap::new(),
        port: None,
        container_port: None,
        probes: Probes::default(),
        stop_signal: "TERM".parse().unwrap(),
        stop_grace_period: std::time::Duration::from_secs(10),
        restart: runway_runtime::spec::RestartPolicy {
            mode: RestartMode::Never,
            ..Default::default()
        },
        limits: Default::default(),
        logs: Default::default(),
        managed: false,
        inherit_env: false,
        sandbox: None,
        network: None,
        egress: Default::default(),
        identity_token: None,
    };
    let (commit, _) = expected_build();
    let version = env!("CARGO_PKG_VERSION");

    let _stop = StopAll(runtime.clone());
    // The CI component's own check of the job's image, as its jobs run it.
    let mut cli = spec(
        "release-cli",
        "runway-cli",
        &format!("id -u; runway --version; {}", component_check()),
    );
    cli.env
        .insert("RUNWAY_COMPONENT_VERSION".into(), version.into());
    runtime.instance_ensure(cli).await.unwrap();
    let ended = wait_until(&runtime, "release-cli", "ended", |s| s.phase.is_final()).await;
    let lines: Vec<String> = runtime
        .logs("release-cli", 10)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.text)
        .collect();
    assert_eq!(
        ended.last_exit.as_ref().map(|e| e.code),
        Some(0),
        "{lines:?}"
    );
    assert_eq!(
        lines.first().map(String::as_str),
        Some("65532"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with(&format!("runway {version}, commit {commit}")),
        "{lines:?}"
    );

    // The server on the instance's port, plain HTTP, its ingress on ports of its own; its
    // instances on the container's network (it has no right to make networks of its own).
    let ports: Vec<u16> = (0..3)
        .map(|_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        })
        .collect();
    let script = format!(
        "printf 'api:\\n  listen: 127.0.0.1:%s\\n  tls: {{enabled: false}}\\ningress:\\n  https: 127.0.0.1:{}\\n  http: 127.0.0.1:{}\\n  admin: 127.0.0.1:{}\\nruntime: {{instance_network: host}}\\n' \"$PORT\" > /tmp/server.yml && exec runway server --config /tmp/server.yml --data-dir /tmp/runway",
        ports[0], ports[1], ports[2]
    );
    let mut server = spec("release-server", "runway", &script);
    server.port = Some(0);
    server.probes.startup = Some(Probe {
        check: Check::Http {
            path: "/healthz".into(),
        },
        initial_delay: std::time::Duration::ZERO,
        period: std::time::Duration::from_millis(250),
        timeout: std::time::Duration::from_secs(2),
        failure_threshold: 240,
        success_threshold: 1,
    });
    let started = runtime.instance_ensure(server).await.unwrap();
    wait_until(&runtime, "release-server", "ready", |s| s.ready).await;
    let port = started.port.unwrap();
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(
        &mut stream,
        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut stream, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// Stops every instance of a runtime when dropped, a failed test's too.
struct StopAll(runway_runtime::LocalRuntime);

impl Drop for StopAll {
    fn drop(&mut self) {
        use runway_runtime::Runtime as _;
        let runtime = self.0.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                for status in runtime.instances().await.unwrap_or_default() {
                    let _ = runtime.instance_stop(&status.id).await;
                }
            });
        })
        .join();
    }
}

/// Bound on one helm, kubectl or kubernetes-validate run.
const TOOL: std::time::Duration = std::time::Duration::from_secs(120);

/// Runs `command`, failing the test with its output when it fails; its stdout.
fn ran(command: Command, stdin: Option<&[u8]>, what: &str) -> String {
    let ran = support::run(command, stdin, TOOL);
    assert!(ran.ok(), "{what}: {}", ran.all());
    ran.stdout
}

/// Every container's image in a stream of rendered objects.
fn images_in(stream: &str) -> BTreeSet<String> {
    stream
        .lines()
        .filter_map(|line| line.trim().strip_prefix("image: "))
        .map(|image| image.trim_matches('"').to_owned())
        .collect()
}

/// Runway's chart, pulled back from the registry by helm (the same bytes as the release's
/// package), runs the released `runway` image by digest, and what `helm template` makes of it
/// passes `kubernetes-validate --strict` and is created by a real API server.
#[test]
fn runways_chart_is_pulled_back_and_accepted_by_the_api_server() {
    let Some(dist) = dist() else { return };
    let Some(registry) = registry() else { return };
    let Some(helm) = support::kube::helm() else {
        return;
    };
    let version = env!("CARGO_PKG_VERSION");
    let pulled = tempfile::tempdir().unwrap();
    let mut pull = Command::new(&helm);
    pull.args(["pull", &format!("oci://{registry}/charts/runway")])
        .args(["--version", version, "--plain-http", "-d"])
        .arg(pulled.path());
    ran(pull, None, "helm pull");
    let package = format!("runway-{version}.tgz");
    assert_eq!(
        std::fs::read(pulled.path().join(&package)).unwrap(),
        std::fs::read(dist.join("charts").join(&package)).unwrap(),
        "the registry's chart is the release's"
    );

    let mut template = Command::new(&helm);
    template
        .args(["template", "rel"])
        .arg(pulled.path().join(&package))
        .args([
            "--namespace",
            "rel-system",
            "--set",
            "namespacePattern=rel-{env}",
        ]);
    let stream = ran(template, None, "helm template");
    let runway = &released_images(&dist)["runway"];
    let (repository, digest) = runway.split_once('@').unwrap();
    let repository = repository.rsplit_once(':').unwrap().0;
    assert_eq!(
        images_in(&stream),
        BTreeSet::from([format!("{repository}@{digest}")]),
        "every pod runs the released image by digest"
    );

    let rendered = pulled.path().join("rendered.yaml");
    std::fs::write(&rendered, &stream).unwrap();
    let mut validate = Command::new("kubernetes-validate");
    validate
        .args(["--strict", "--kubernetes-version", "1.33.0"])
        .arg(&rendered);
    if support::runs(Path::new("kubernetes-validate"), "--version", TOOL) {
        ran(validate, None, "kubernetes-validate");
    } else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kubernetes-validate is not installed (scripts/test installs it)"
        );
        eprintln!("skipping kubernetes-validate: not installed");
    }

    let Some(cluster) = kube_cluster::shared("the released chart") else {
        return;
    };
    let mut namespace = cluster.kubectl();
    namespace.args(["create", "namespace", "rel-system"]);
    ran(namespace, None, "kubectl create namespace");
    let mut apply = cluster.kubectl();
    apply.args(["apply", "-f", "-"]);
    ran(apply, Some(stream.as_bytes()), "kubectl apply");
    let mut get = cluster.kubectl();
    get.args([
        "get",
        "deployments,statefulsets",
        "-n",
        "rel-system",
        "-o",
        "yaml",
    ]);
    let created = ran(get, None, "kubectl get");
    assert_eq!(
        images_in(&created),
        BTreeSet::from([format!("{repository}@{digest}")]),
        "{created}"
    );
}

/// A service's chart, as seed 001 ships it: rendered from the manifest for a stage and a
/// GitLab release, packaged and pushed to the registry with helm; pulled back, its
/// annotations say both. `runway render -t flux` names it, and a real API server with Flux's
/// own CRDs (scripts/flux-crds) creates the OCIRepository and HelmRelease, strict about their
/// fields.
#[test]
fn a_services_chart_goes_through_the_registry_to_flux() {
    let Some(registry) = registry() else { return };
    let Some(helm) = support::kube::helm() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo");
    std::fs::create_dir_all(repo.join(".runway")).unwrap();
    std::fs::write(
        repo.join(".runway/runway.yml"),
        "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: ai-gateway\n\
         spec:\n  image: registry.example.com/ai-gateway:2.4.0\n  container_port: 8080\n",
    )
    .unwrap();
    let runway = |args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_runway"));
        command.args(args).arg(&repo);
        ran(command, None, &format!("runway {}", args.join(" ")))
    };
    let charts = format!("oci://{registry}/service-charts");
    let out = work.path().join("out");
    runway(&[
        "render",
        "-t",
        "helm",
        "--chart-version",
        "2.4.0",
        "--stage",
        "canary",
        "--gitlab-release",
        "17.6",
        "-o",
        out.to_str().unwrap(),
    ]);
    let mut package = Command::new(&helm);
    package
        .args(["package", "-d"])
        .arg(work.path())
        .arg(out.join("ai-gateway"));
    ran(package, None, "helm package");
    let mut push = Command::new(&helm);
    push.args(["push", "--plain-http"])
        .arg(work.path().join("ai-gateway-2.4.0.tgz"))
        .arg(&charts);
    ran(push, None, "helm push");
    let mut show = Command::new(&helm);
    show.args(["show", "chart", "--plain-http", "--version", "2.4.0"])
        .arg(format!("{charts}/ai-gateway"));
    let chart = ran(show, None, "helm show chart");
    assert!(chart.contains("runway.dev/stage: canary"), "{chart}");
    assert!(
        chart.contains("runway.dev/gitlab-release: \"17.6\""),
        "{chart}"
    );

    let flux = work.path().join("flux");
    runway(&[
        "render",
        "-t",
        "flux",
        "--chart-repository",
        &charts,
        "--chart-version",
        "2.4.0",
        "--stage",
        "canary",
        "--gitlab-release",
        "17.6",
        "-n",
        "rel-flux",
        "--chart-repository-insecure",
        "-o",
        flux.to_str().unwrap(),
    ]);
    let Some(cluster) = kube_cluster::shared("a service's chart to Flux") else {
        return;
    };
    let crds = std::process::Command::new(repo_root().join("scripts/flux-crds"))
        .output()
        .unwrap();
    assert!(
        crds.status.success(),
        "{}",
        String::from_utf8_lossy(&crds.stderr)
    );
    let crds = PathBuf::from(
        String::from_utf8(crds.stdout)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    );
    let mut apply = cluster.kubectl();
    apply.args(["apply", "--server-side", "-f"]).arg(&crds);
    ran(apply, None, "kubectl apply Flux's CRDs");
    let mut established = cluster.kubectl();
    established.args([
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/ocirepositories.source.toolkit.fluxcd.io",
        "crd/helmreleases.helm.toolkit.fluxcd.io",
    ]);
    ran(established, None, "kubectl wait for the CRDs");
    let mut namespace = cluster.kubectl();
    namespace.args(["create", "namespace", "rel-flux"]);
    ran(namespace, None, "kubectl create namespace");
    let mut apply = cluster.kubectl();
    apply
        .args(["apply", "--validate=strict", "-f"])
        .arg(flux.join("ai-gateway"));
    ran(apply, None, "kubectl apply the Flux objects");
    let mut get = cluster.kubectl();
    get.args([
        "get",
        "ocirepositories,helmreleases",
        "-n",
        "rel-flux",
        "-l",
        "runway.dev/stage=canary,runway.dev/gitlab-release=17.6",
        "-o",
        "json",
    ]);
    let created: serde_json::Value = serde_json::from_str(&ran(get, None, "kubectl get")).unwrap();
    let items = created["items"].as_array().unwrap();
    let kinds: BTreeSet<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from(["HelmRelease", "OCIRepository"]),
        "{created}"
    );
    let source = items.iter().find(|i| i["kind"] == "OCIRepository").unwrap();
    assert_eq!(source["spec"]["url"], format!("{charts}/ai-gateway"));
    assert_eq!(source["spec"]["ref"]["tag"], "2.4.0");

    // A wrong field is refused, so the apply above could not pass by ignoring fields.
    let wrong = std::fs::read_to_string(flux.join("ai-gateway/helmrelease.yaml"))
        .unwrap()
        .replace("releaseName:", "releaseNmae:");
    let mut apply = cluster.kubectl();
    apply.args(["apply", "--validate=strict", "-f", "-"]);
    let refused = support::run(apply, Some(wrong.as_bytes()), TOOL);
    assert!(
        !refused.ok() && refused.all().contains("releaseNmae"),
        "{}",
        refused.all()
    );
}

/// The binaries, Runway's chart and the CI component are one version (docs/releasing.md,
/// "Cutting a release"), and CHANGELOG.md has a section for what comes next or for it.
#[test]
fn the_binaries_the_chart_and_the_component_share_one_version() {
    let version = env!("CARGO_PKG_VERSION");
    let root = repo_root();
    let chart = std::fs::read_to_string(root.join("deploy/helm/runway/Chart.yaml")).unwrap();
    let chart = runway_manifest::parse(&runway_manifest::SourceFile::new("Chart.yaml", chart))
        .unwrap()
        .value;
    assert_eq!(chart["version"], version, "Chart.yaml's version");
    assert_eq!(chart["appVersion"], version, "Chart.yaml's appVersion");
    let component = std::fs::read_to_string(root.join("templates/runway.yml")).unwrap();
    assert!(
        component.contains(&format!("RUNWAY_COMPONENT_VERSION: \"{version}\"")),
        "templates/runway.yml's RUNWAY_COMPONENT_VERSION is not {version}"
    );
    assert!(
        component.contains(&format!(
            "default: registry.gitlab.com/runway/runway-cli:{version}\n"
        )),
        "templates/runway.yml's runway_image is not {version}'s"
    );
    let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap();
    assert!(
        changelog.contains("\n## [Unreleased]\n")
            || changelog.contains(&format!("\n## [{version}]")),
        "CHANGELOG.md has no section for {version} or Unreleased"
    );
}
