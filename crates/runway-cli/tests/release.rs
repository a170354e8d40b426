//! The release `scripts/release` builds. Building one takes minutes, so the test command
//! (`scripts/test`) builds it once, before the tests, and names its directory in
//! `RUNWAY_RELEASE_DIST`; without it these tests say so and pass on a developer's machine, and
//! fail under `CI=true`.

#![allow(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

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
