//! Gives the ingress a fingerprint of the source it is built from (`RUNWAY_INGRESS_SOURCE`):
//! the `src/` and manifest of this crate and of every workspace crate it links (its `path`
//! dependencies, followed), and the workspace's lock file. `runway server` starts a
//! `runway-ingress` installed beside it only when that binary's `--version` names the same
//! fingerprint as the ingress built into `runway` itself; an older one left beside a newer
//! `runway` (an upgrade of one file, or a `cargo build -p runway`) is not started.

use std::hash::Hasher;
use std::path::{Path, PathBuf};

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let dir = manifest_dir.canonicalize().unwrap_or(manifest_dir);
    // crates/runway-ingress → the workspace.
    let workspace = dir
        .ancestors()
        .nth(2)
        .map_or_else(|| dir.join("../.."), Path::to_path_buf);
    // This crate and the workspace crates it links, each once, in a stable order.
    let mut crates = vec![dir.clone()];
    let mut next = 0;
    while let Some(krate) = crates.get(next).cloned() {
        for linked in path_dependencies(&krate) {
            if !crates.contains(&linked) {
                crates.push(linked);
            }
        }
        next += 1;
    }
    crates.sort();
    let mut inputs = vec![workspace.join("Cargo.lock")];
    for krate in &crates {
        inputs.push(krate.join("Cargo.toml"));
        inputs.push(krate.join("src"));
    }
    // FNV-1a, 64 bits: stable across compilers, and enough to tell builds apart.
    let mut hash = Fnv(0xcbf2_9ce4_8422_2325);
    for input in &inputs {
        // A directory is scanned whole by cargo: a file added or removed is a change too.
        println!("cargo:rerun-if-changed={}", input.display());
        let mut files = Vec::new();
        collect(input, &mut files);
        files.sort();
        for file in files {
            if let Ok(relative) = file.strip_prefix(&workspace) {
                hash.write(relative.to_string_lossy().as_bytes());
            }
            hash.write(&std::fs::read(&file).unwrap_or_default());
        }
    }
    println!(
        "cargo:rustc-env=RUNWAY_INGRESS_SOURCE={:016x}",
        hash.finish()
    );
}

/// The crates `krate`'s `[dependencies]` name by `path` (dev-dependencies are not linked).
fn path_dependencies(krate: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(krate.join("Cargo.toml")).unwrap_or_default();
    let mut section = "";
    let mut found = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[dependencies]"
            && let Some((_, rest)) = line.split_once("path = \"")
            && let Some((path, _)) = rest.split_once('"')
        {
            // `crates/a/../b` and `crates/b` are one crate.
            let linked = krate.join(path);
            found.push(linked.canonicalize().unwrap_or(linked));
        }
    }
    found
}

/// `path` itself when it is a file, else every file under it.
fn collect(path: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(path) else {
        if path.is_file() {
            files.push(path.to_path_buf());
        }
        return;
    };
    for entry in entries.flatten() {
        collect(&entry.path(), files);
    }
}

struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}
