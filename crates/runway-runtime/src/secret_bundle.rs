//! The bundle that carries an instance's secrets, which never reaches a disk.
//!
//! An instance's bundle in its state directory (`bundle/config.json`) holds its environment
//! without its secrets. For `create`, the supervisor writes a copy with the secrets added to
//! `/run/runway/secret/bundles/<id>/config.json` (directory `0700`, file `0600`) on a tmpfs:
//! `/run`'s own where it is one, else a small one mounted at `/run/runway/secret`
//! ([`ensure_memory_backed`]), and refused where neither is possible. The copy's `root.path`
//! is the real rootfs's, absolute, so nothing else needs to be beside it. It is removed as
//! soon as `create` has read it; one left by a supervisor killed in that moment is removed by
//! its watchdog, by the instance's next supervisor and when the instance is removed
//! ([`remove_stale`]).
//!
//! runc keeps no process environment in its own state (`/run/runc/<id>/state.json`); crun
//! keeps a copy of the whole `config.json` in its state directory for the container's life,
//! so crun runs with its state on the same tmpfs ([`crun_root`]).

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::mount::MsFlags;
use nix::sys::statfs::{FsType, TMPFS_MAGIC, statfs};

/// The memory-backed directory that holds bundles with secrets and crun's state.
const MEMORY_DIR: &str = "/run/runway/secret";

/// [`MEMORY_DIR`], where the supervisor and the runtime look.
pub(crate) fn memory_dir() -> &'static Path {
    Path::new(MEMORY_DIR)
}

/// The tmpfs mounted at [`MEMORY_DIR`] where `/run` is not one: this user's alone, nothing
/// run from it, and small (a bundle is a few KiB, its secrets at most 64 KiB each).
const TMPFS_OPTIONS: &str = "mode=0700,size=64m";

/// Whether a file system of this type keeps its files in memory, never on a disk.
pub(crate) fn is_memory_backed(kind: FsType) -> bool {
    kind == TMPFS_MAGIC
}

/// Makes `dir` a directory on a tmpfs that is this user's alone: created `0700` when missing,
/// a tmpfs mounted on it when the file system under it is not one (under a lock on `dir`,
/// as supervisors start at once, so it is mounted once). Refuses, saying why, a directory
/// it cannot make so: secrets are then not written at all.
pub(crate) fn ensure_memory_backed(dir: &Path) -> Result<(), String> {
    let refuse = |why: String| {
        format!(
            "cannot keep secrets in memory at {}: {why}; they are never written to disk",
            dir.display()
        )
    };
    let parent = dir.parent().unwrap_or(Path::new("/"));
    fs::create_dir_all(parent).map_err(|e| refuse(format!("cannot create it: {e}")))?;
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(refuse(format!("cannot create it: {e}"))),
    }
    // Not through a symbolic link (mounted on, it would put the tmpfs elsewhere), and not a
    // directory another user could have filled.
    check_private(dir).map_err(refuse)?;
    let lock = fs::File::open(dir).map_err(|e| refuse(e.to_string()))?;
    lock.lock()
        .map_err(|e| refuse(format!("cannot lock it: {e}")))?;
    let kind = |dir: &Path| statfs(dir).map(|s| s.filesystem_type());
    let found = kind(dir).map_err(|e| refuse(e.to_string()))?;
    if !is_memory_backed(found) {
        nix::mount::mount(
            Some("tmpfs"),
            dir,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some(TMPFS_OPTIONS),
        )
        .map_err(|e| {
            refuse(format!(
                "it is not on a tmpfs (file system type {:#x}) and mounting one there failed: {e}",
                found.0
            ))
        })?;
        let mounted = kind(dir).map_err(|e| refuse(e.to_string()))?;
        if !is_memory_backed(mounted) {
            return Err(refuse(format!(
                "it is still not on a tmpfs after mounting one (file system type {:#x})",
                mounted.0
            )));
        }
    }
    check_private(dir).map_err(refuse)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(|e| refuse(e.to_string()))
}

/// `dir` is a directory (not a link to one) owned by this user.
fn check_private(dir: &Path) -> Result<(), String> {
    let meta = fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if !meta.is_dir() {
        return Err("it is not a directory".to_owned());
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!("it belongs to uid {}, not {me}", meta.uid()));
    }
    Ok(())
}

/// Where the bundle with an instance's secrets is written under `memory`: one directory per
/// instance id, which must be one plain name.
pub(crate) fn bundle_dir(memory: &Path, id: &str) -> Result<PathBuf, String> {
    let mut components = Path::new(id).components();
    match (components.next(), components.next()) {
        (Some(Component::Normal(name)), None) if name == id => {
            Ok(memory.join("bundles").join(name))
        }
        _ => Err(format!("{id:?} is not an instance id")),
    }
}

/// Where crun keeps its state (`crun --root`): beside the bundles, since it copies theirs.
pub(crate) fn crun_root(memory: &Path) -> PathBuf {
    memory.join("crun")
}

/// The bundle's `config.json` with the secrets in `process.env` (each replacing a variable of
/// its name) and `root.path` absolute from `bundle`, the directory the text was read from,
/// so that the copy runs from anywhere. Errors never hold a value.
pub(crate) fn with_secrets(
    config: &[u8],
    bundle: &Path,
    secrets: &BTreeMap<String, String>,
) -> Result<Vec<u8>, String> {
    let cannot = |e: &dyn std::fmt::Display| {
        format!(
            "cannot add secrets to {}: {e}",
            bundle.join("config.json").display()
        )
    };
    let mut spec: serde_json::Value = serde_json::from_slice(config).map_err(|e| cannot(&e))?;
    let root = spec
        .pointer_mut("/root/path")
        .ok_or_else(|| cannot(&"it has no root.path"))?;
    let rootfs = PathBuf::from(
        root.as_str()
            .ok_or_else(|| cannot(&"root.path is not text"))?,
    );
    if rootfs.is_relative() {
        *root = serde_json::Value::from(bundle.join(rootfs).to_string_lossy().into_owned());
    }
    let env = spec
        .pointer_mut("/process/env")
        .and_then(serde_json::Value::as_array_mut)
        .ok_or_else(|| cannot(&"it has no process.env"))?;
    env.retain(|entry| {
        let key = entry
            .as_str()
            .and_then(|e| e.split('=').next())
            .unwrap_or_default();
        !secrets.contains_key(key)
    });
    env.extend(
        secrets
            .iter()
            .map(|(k, v)| serde_json::Value::from(format!("{k}={v}"))),
    );
    serde_json::to_vec(&spec).map_err(|e| cannot(&e))
}

/// A bundle with secrets, in memory; removed when dropped.
#[derive(Debug)]
pub(crate) struct SecretBundle {
    dir: PathBuf,
}

impl SecretBundle {
    /// Writes `config` (a `config.json` with secrets, [`with_secrets`]) as the instance's
    /// bundle under `memory`, which must be memory-backed ([`ensure_memory_backed`]),
    /// replacing one an earlier supervisor left.
    pub(crate) fn write(memory: &Path, id: &str, config: &[u8]) -> Result<Self, String> {
        let dir = bundle_dir(memory, id)?;
        let cannot = |e: io::Error| format!("cannot write {}: {e}", dir.display());
        remove_stale(memory, id);
        if let Some(parent) = dir.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(cannot)?;
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(cannot)?;
        // From here on, whatever fails, the directory goes when this does.
        let bundle = Self { dir: dir.clone() };
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.join("config.json"))
            .map_err(cannot)?;
        file.write_all(config).map_err(cannot)?;
        Ok(bundle)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for SecretBundle {
    fn drop(&mut self) {
        if let Err(error) = fs::remove_dir_all(&self.dir)
            && error.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.dir.display(), %error, "cannot remove the secret bundle");
        }
    }
}

/// Removes the bundle with secrets of instance `id` that a supervisor killed between writing
/// and removing it left under `memory`, if there is one.
pub(crate) fn remove_stale(memory: &Path, id: &str) {
    let Ok(dir) = bundle_dir(memory, id) else {
        return;
    };
    if let Err(error) = fs::remove_dir_all(&dir)
        && error.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %dir.display(), %error, "cannot remove a stale secret bundle");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn secrets() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("API_TOKEN".to_owned(), "s3cr3t".to_owned()),
            ("DB_PASSWORD".to_owned(), "pa=ss".to_owned()),
        ])
    }

    #[test]
    fn a_bundle_with_secrets_has_its_own_directory_under_the_memory_dir() {
        let memory = Path::new(MEMORY_DIR);
        assert_eq!(
            bundle_dir(memory, "web-1.a_b").unwrap(),
            Path::new("/run/runway/secret/bundles/web-1.a_b")
        );
        for bad in ["", ".", "..", "../x", "a/b", "/etc", "x/"] {
            assert!(bundle_dir(memory, bad).is_err(), "{bad:?}");
        }
        // crun's state is beside the bundles, never one of them.
        assert_eq!(crun_root(memory), Path::new("/run/runway/secret/crun"));
    }

    #[test]
    fn secrets_replace_variables_of_their_name_and_the_rootfs_is_made_absolute() {
        let config = serde_json::json!({
            "root": {"path": "rootfs", "readonly": true},
            "process": {"env": ["PATH=/bin", "API_TOKEN=placeholder", "GREETING=hello"]},
        });
        let text = serde_json::to_vec(&config).unwrap();
        let out = with_secrets(&text, Path::new("/data/instances/a/bundle"), &secrets()).unwrap();
        let out: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(out["root"]["path"], "/data/instances/a/bundle/rootfs");
        assert_eq!(
            out["process"]["env"],
            serde_json::json!([
                "PATH=/bin",
                "GREETING=hello",
                "API_TOKEN=s3cr3t",
                "DB_PASSWORD=pa=ss"
            ])
        );
        // An absolute rootfs (what bundles have) is kept.
        let config = serde_json::json!({
            "root": {"path": "/images/rootfs/abc"},
            "process": {"env": []},
        });
        let out = with_secrets(
            &serde_json::to_vec(&config).unwrap(),
            Path::new("/b"),
            &secrets(),
        )
        .unwrap();
        let out: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(out["root"]["path"], "/images/rootfs/abc");
        let error =
            with_secrets(b"{\"root\":{\"path\":\"/r\"}}", Path::new("/b"), &secrets()).unwrap_err();
        assert!(error.contains("no process.env"), "{error}");
        assert!(!error.contains("s3cr3t"), "{error}");
    }

    #[test]
    fn a_written_bundle_is_private_and_goes_when_dropped() {
        let memory = tempfile::tempdir().unwrap();
        let bundle = SecretBundle::write(memory.path(), "web", b"{}").unwrap();
        let dir = bundle.dir().to_owned();
        assert_eq!(dir, memory.path().join("bundles/web"));
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("config.json")), 0o600);
        assert_eq!(fs::read(dir.join("config.json")).unwrap(), b"{}");
        drop(bundle);
        assert!(!dir.exists());
        assert!(memory.path().join("bundles").is_dir());
    }

    /// What a supervisor killed while `create` read its bundle left: removed by the next
    /// supervisor or the instance's removal, and by writing the next one. Other instances'
    /// bundles stay.
    #[test]
    fn a_stale_bundle_is_removed_and_only_its_instances() {
        let memory = tempfile::tempdir().unwrap();
        let leave = |id: &str| {
            let bundle = SecretBundle::write(memory.path(), id, b"{\"secret\":1}").unwrap();
            let dir = bundle.dir().to_owned();
            std::mem::forget(bundle);
            dir
        };
        let (web, other) = (leave("web"), leave("other"));
        remove_stale(memory.path(), "web");
        assert!(!web.exists());
        assert!(other.join("config.json").is_file());
        // Nothing there, or an id that is no directory's name: nothing happens.
        remove_stale(memory.path(), "web");
        remove_stale(memory.path(), "..");
        assert!(memory.path().join("bundles").is_dir());
        // Writing over a stale bundle replaces it.
        let again = SecretBundle::write(memory.path(), "other", b"{}").unwrap();
        assert_eq!(fs::read(again.dir().join("config.json")).unwrap(), b"{}");
    }

    /// A directory not on a tmpfs gets one mounted (as root), and is then private; without
    /// the right to mount, it is refused, saying why.
    #[test]
    fn a_directory_not_in_memory_gets_a_tmpfs_or_is_refused() {
        /// Unmounts what the test mounted, whatever happens.
        struct Unmount<'a>(&'a Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = nix::mount::umount2(self.0, nix::mount::MntFlags::MNT_DETACH);
            }
        }
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join("secret");
        let on_tmpfs = |p: &Path| is_memory_backed(statfs(p).unwrap().filesystem_type());
        let was_tmpfs = on_tmpfs(scratch.path());
        let ensured = ensure_memory_backed(&dir);
        if was_tmpfs {
            ensured.unwrap();
        } else if ensured.is_ok() {
            let unmount = Unmount(&dir);
            assert!(on_tmpfs(&dir));
            // A second call finds the tmpfs and mounts nothing over it.
            fs::write(dir.join("kept"), b"").unwrap();
            ensure_memory_backed(&dir).unwrap();
            assert!(dir.join("kept").exists());
            assert_eq!(
                fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
                0o700
            );
            drop(unmount);
            assert!(!on_tmpfs(&dir));
        } else {
            let error = ensured.unwrap_err();
            assert!(error.contains("mounting one there failed"), "{error}");
            assert!(!nix::unistd::geteuid().is_root(), "{error}");
        }
        // A link is refused, whatever it points at.
        let link = scratch.path().join("link");
        std::os::unix::fs::symlink(scratch.path(), &link).unwrap();
        let error = ensure_memory_backed(&link).unwrap_err();
        assert!(error.contains("not a directory"), "{error}");
    }
}
