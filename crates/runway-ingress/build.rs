//! Gives the ingress a fingerprint of the source it is built from (`RUNWAY_INGRESS_SOURCE`):
//! its `src/`, its manifest and the workspace's lock file. `runway server` starts a
//! `runway-ingress` installed beside it only when that binary's `--version` names the same
//! fingerprint as the ingress built into `runway` itself; an older one left beside a newer
//! `runway` (an upgrade of one file, or a `cargo build -p runway`) is not started.

use std::hash::Hasher;
use std::path::{Path, PathBuf};

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let mut files = Vec::new();
    collect(&dir.join("src"), &mut files);
    files.sort();
    files.push(dir.join("Cargo.toml"));
    files.push(dir.join("../../Cargo.lock"));
    // FNV-1a, 64 bits: stable across compilers, and enough to tell builds apart.
    let mut hash = Fnv(0xcbf2_9ce4_8422_2325);
    for file in &files {
        if let Ok(relative) = file.strip_prefix(&dir) {
            hash.write(relative.to_string_lossy().as_bytes());
        }
        hash.write(&std::fs::read(file).unwrap_or_default());
    }
    // A directory is scanned whole: a file added or removed is a change too.
    for watched in ["src", "Cargo.toml", "../../Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", dir.join(watched).display());
    }
    println!(
        "cargo:rustc-env=RUNWAY_INGRESS_SOURCE={:016x}",
        hash.finish()
    );
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files);
        } else {
            files.push(path);
        }
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
