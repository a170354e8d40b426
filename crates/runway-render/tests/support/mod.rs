//! What the render tests share: a temporary directory, YAML as JSON, and whether helm is there.

#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::print_stderr,
    reason = "test support, each test file takes what it needs"
)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use saphyr::{Scalar, Yaml};
use serde_json::{Value, json};

/// A directory of its own under the system's temporary directory, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `runway-render-<name>-<pid>-<n>`, empty.
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("runway-render-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A YAML node as JSON, whose objects compare without regard to key order.
pub fn to_json(node: &Yaml<'_>) -> Value {
    match node {
        Yaml::Value(Scalar::Null) => Value::Null,
        Yaml::Value(Scalar::Boolean(b)) => json!(b),
        Yaml::Value(Scalar::Integer(i)) => json!(i),
        Yaml::Value(Scalar::FloatingPoint(f)) => json!(f.into_inner()),
        Yaml::Value(Scalar::String(s)) => json!(s),
        Yaml::Sequence(items) => Value::Array(items.iter().map(to_json).collect()),
        Yaml::Mapping(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.as_str().unwrap().to_owned(), to_json(v)))
                .collect(),
        ),
        other => panic!("unexpected YAML node {other:?}"),
    }
}

/// Whether `helm` is on PATH. `scripts/test` installs it when it is missing; under `CI=true` its
/// absence is a failure, elsewhere the test is skipped.
pub fn helm_installed() -> bool {
    if Command::new("helm").arg("version").output().is_ok() {
        return true;
    }
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "helm is not installed; scripts/test installs it"
    );
    eprintln!("skipping: helm not installed (scripts/test installs it)");
    false
}
