//! A tenant's plain process, isolated. A process artifact with a [`Sandbox`] is run by the
//! same OCI runtime as images, from a bundle on an empty root where it sees only what the
//! sandbox lists, read-only: the host's system directories (`/usr`, `/bin`, `/lib`, `/etc`…)
//! and the revision's code directory, at [`CODE_MOUNT`] (`/app`) whatever its host path, where
//! the process starts. It runs as the service's own unprivileged user, with no capabilities,
//! `no_new_privileges` and Runway's seccomp profile ([`crate::seccomp`]), in its own mount,
//! pid, ipc and uts namespaces, with a private `/tmp` and `/run`, and the manifest's memory and
//! CPU limits in its own cgroup. The data directory, other instances, other services' code and
//! the host's processes are not there to be read, and nothing it is told names a host path of
//! the platform's.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How one instance's process is isolated (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sandbox {
    /// The host user and group the process runs as: the service's own.
    pub user: u32,
    /// The revision's code on the host, bound read-only at [`CODE_MOUNT`]. Paths the spec gives
    /// under it (its working directory, its program) are the same files under [`CODE_MOUNT`].
    pub code_dir: PathBuf,
    /// Host directories bound read-only at the same path; a symbolic link among them (`/bin`
    /// to `usr/bin` on a merged-`/usr` system) is made again inside instead.
    pub host_paths: Vec<PathBuf>,
}

/// The operator's rules for sandboxes: which users services get and what of the host they see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// Service `id` runs as host user and group `uid_base + id`.
    pub uid_base: u32,
    /// What every sandboxed process sees of the host, read-only.
    pub host_paths: Vec<PathBuf>,
}

/// Where a sandboxed process sees its code, and starts: a fixed path, so that neither its working
/// directory, nor its mount table, nor a refusal tells it where the platform keeps its files.
pub const CODE_MOUNT: &str = "/app";

/// The first service user: above the host ids images' user namespaces map (100000 + 65536).
pub const DEFAULT_UID_BASE: u32 = 200_000;

/// The host ids images' user namespaces map, which no service user may have.
pub const IMAGE_IDS: std::ops::Range<u32> = runway_oci::DEFAULT_HOST_ID_BASE
    ..runway_oci::DEFAULT_HOST_ID_BASE + runway_oci::DEFAULT_ID_RANGE;

/// The host directories a process needs to run a program of the system's: its binaries, its
/// libraries, and `/etc` (the dynamic loader's cache, certificates, time zones, `resolv.conf`).
pub const DEFAULT_HOST_PATHS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

impl Default for SandboxPolicy {
    fn default() -> Self {
        Self {
            uid_base: DEFAULT_UID_BASE,
            host_paths: DEFAULT_HOST_PATHS.iter().map(PathBuf::from).collect(),
        }
    }
}

impl SandboxPolicy {
    /// The sandbox of an instance of service `service_id` whose code is in `code_dir`.
    pub fn sandbox(&self, service_id: i64, code_dir: &Path) -> Result<Sandbox, String> {
        let user = u32::try_from(service_id)
            .ok()
            .and_then(|id| self.uid_base.checked_add(id))
            .filter(|&uid| uid < u32::MAX)
            .ok_or_else(|| {
                format!(
                    "service id {service_id} gives no user id from base {}",
                    self.uid_base
                )
            })?;
        Ok(Sandbox {
            user,
            code_dir: code_dir.to_owned(),
            host_paths: self.host_paths.clone(),
        })
    }
}

/// What [`Sandbox::lay_out`] made: the directories to bind, in order.
#[derive(Debug)]
pub(crate) struct Layout {
    /// `(host path, path inside)`.
    pub(crate) binds: Vec<(PathBuf, PathBuf)>,
    /// `/etc` is among them, so the host's `resolv.conf` and `hosts` come with it.
    pub(crate) has_etc: bool,
}

/// Host directories a code directory may be neither nor lie under: the kernel's views, the
/// running system's sockets and state, root's home.
const NEVER_CODE: &[&str] = &[
    "/proc", "/sys", "/dev", "/run", "/var/run", "/boot", "/root",
];

/// Host directories a code directory may lie under but not be: shared by everyone.
const NOT_WHOLE: &[&str] = &[
    "/", "/tmp", "/var/tmp", "/home", "/srv", "/opt", "/var", "/mnt",
];

impl Sandbox {
    /// Checks what the process would see before anything is made, and returns the code
    /// directory as it is on disk (symbolic links resolved), which is what gets bound. Refused:
    /// a code directory that is not an absolute, existing directory; one that holds or lies in
    /// a `protected` directory (the data directory, the runtime's state), one of the system's
    /// own ([`NEVER_CODE`]) or a shared one whole ([`NOT_WHOLE`]), unless it is a code snapshot
    /// (`<snapshots>/<service id>/<hex>`, unpacked by the platform); a host path that holds or
    /// lies in a protected directory.
    pub(crate) fn check(
        &self,
        protected: &[&Path],
        snapshots: Option<&Path>,
    ) -> Result<PathBuf, String> {
        let protected: Vec<PathBuf> = protected
            .iter()
            .map(|p| fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()))
            .collect();
        let code = &self.code_dir;
        if !code.is_absolute() {
            return Err(format!("code directory {} is not absolute", code.display()));
        }
        if code
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            return Err(format!("code directory {} has `..` in it", code.display()));
        }
        let snapshot_named = snapshots.is_some_and(|dir| {
            code.strip_prefix(dir).is_ok_and(|rel| {
                rel.components().count() == 2
                    && rel
                        .components()
                        .all(|c| matches!(c, std::path::Component::Normal(_)))
            })
        });
        let real = fs::canonicalize(code).map_err(|e| {
            if snapshot_named {
                // Where the platform keeps it is not the tenant's to know.
                "the revision's code snapshot is not on this machine".to_owned()
            } else {
                format!("code directory {}: {e}", code.display())
            }
        })?;
        if !real.is_dir() {
            return Err(format!(
                "code directory {} is not a directory",
                code.display()
            ));
        }
        // A snapshot the platform unpacked (`<snapshots>/<service id>/<hex>`) is code, wherever
        // the platform keeps its files.
        let snapshot = snapshots
            .and_then(|dir| fs::canonicalize(dir).ok())
            .and_then(|dir| {
                real.strip_prefix(dir)
                    .ok()
                    .map(|rel| rel.components().count())
            })
            == Some(2);
        let overlaps = |dir: &Path| {
            protected
                .iter()
                .any(|p| p.starts_with(dir) || dir.starts_with(p))
        };
        if !snapshot && overlaps(&real) {
            return Err(format!(
                "code directory {} holds or is inside the platform's own files: a process may \
                 not see them",
                code.display()
            ));
        }
        if !snapshot
            && (NEVER_CODE.iter().any(|d| real.starts_with(d))
                || NOT_WHOLE.iter().any(|d| real == Path::new(d)))
        {
            return Err(format!(
                "code directory {} is the system's, not a service's code",
                code.display()
            ));
        }
        if let Some(path) = self.host_paths.iter().find(|p| p.starts_with(CODE_MOUNT)) {
            return Err(format!(
                "host path {} is where an isolated process sees its code ({CODE_MOUNT}): take it \
                 out of runtime.process_host_paths",
                path.display()
            ));
        }
        if let Some(path) = self
            .host_paths
            .iter()
            .find(|p| fs::canonicalize(p).is_ok_and(|p| overlaps(&p)))
        {
            return Err(format!(
                "host path {} holds or is inside the platform's own files: take it out of \
                 runtime.process_host_paths",
                path.display()
            ));
        }
        Ok(real)
    }

    /// `path` as the process sees it: one under the code directory's host path is under
    /// [`CODE_MOUNT`]; any other is taken as written inside (`/app/bin/server`, `/usr/bin/env`),
    /// `.` components dropped.
    pub(crate) fn inside(&self, path: &Path) -> PathBuf {
        match path.strip_prefix(&self.code_dir) {
            Ok(rest) => Path::new(CODE_MOUNT).join(rest),
            Err(_) => path.to_owned(),
        }
        .components()
        .collect()
    }

    /// Whether the process can see `path`, a path inside ([`Sandbox::inside`]): under its code
    /// or a host path, with no `..` to leave them.
    pub(crate) fn sees(&self, path: &Path) -> bool {
        !path
            .components()
            .any(|c| c == std::path::Component::ParentDir)
            && (path.starts_with(CODE_MOUNT) || self.host_paths.iter().any(|p| path.starts_with(p)))
    }

    /// Where the file the process sees at `path` is on the host, `code` being the code
    /// directory on disk; `None` for one it cannot see.
    pub(crate) fn on_host(&self, path: &Path, code: &Path) -> Option<PathBuf> {
        if !self.sees(path) {
            return None;
        }
        Some(match path.strip_prefix(CODE_MOUNT) {
            Ok(rest) => code.join(rest),
            Err(_) => path.to_owned(),
        })
    }

    /// Makes the empty root in `rootfs` (symbolic links among the host paths made again in
    /// it) and says what to bind: the host paths that are directories, then the code (`code`
    /// on disk, at [`CODE_MOUNT`]).
    pub(crate) fn lay_out(&self, rootfs: &Path, code: &Path) -> std::io::Result<Layout> {
        use std::os::unix::fs::{DirBuilderExt, symlink};
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(rootfs)?;
        let mut binds = Vec::new();
        let mut has_etc = false;
        for path in &self.host_paths {
            let Ok(meta) = fs::symlink_metadata(path) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                let target = fs::read_link(path)?;
                let inside = rootfs.join(path.strip_prefix("/").unwrap_or(path));
                if let Some(parent) = inside.parent() {
                    fs::create_dir_all(parent)?;
                }
                let _ = fs::remove_file(&inside);
                symlink(target, inside)?;
            } else if meta.is_dir() {
                has_etc |= path == Path::new("/etc");
                binds.push((path.clone(), path.clone()));
            }
        }
        binds.push((code.to_owned(), PathBuf::from(CODE_MOUNT)));
        Ok(Layout { binds, has_etc })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_service_gets_its_own_user_within_range() {
        let policy = SandboxPolicy::default();
        let code = Path::new("/srv/app");
        assert_eq!(policy.sandbox(1, code).unwrap().user, 200_001);
        assert_eq!(policy.sandbox(7, code).unwrap().user, 200_007);
        assert!(policy.sandbox(-1, code).is_err());
        assert!(policy.sandbox(i64::from(u32::MAX), code).is_err());
    }

    #[test]
    fn the_platforms_files_and_the_systems_are_never_code() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let state = data.join("runtime");
        let code = dir.path().join("code");
        fs::create_dir_all(&state).unwrap();
        fs::create_dir_all(&code).unwrap();
        let sandbox = |code_dir: PathBuf, host_paths: Vec<PathBuf>| Sandbox {
            user: 200_001,
            code_dir,
            host_paths,
        };
        let protected = [data.as_path(), state.as_path()];
        let real = fs::canonicalize(&code).unwrap();
        assert_eq!(
            sandbox(code.clone(), vec![]).check(&protected, None),
            Ok(real)
        );
        for bad in [data.clone(), state.clone(), state.join("instances")] {
            fs::create_dir_all(&bad).unwrap();
            let error = sandbox(bad.clone(), vec![])
                .check(&protected, None)
                .unwrap_err();
            assert!(error.contains("platform's own files"), "{bad:?}: {error}");
        }
        // A link into the data directory is what it points at.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&data, &link).unwrap();
        let error = sandbox(link, vec![]).check(&protected, None).unwrap_err();
        assert!(error.contains("platform's own files"), "{error}");
        for system in [
            "/",
            "/proc",
            "/proc/self",
            "/sys",
            "/dev",
            "/run",
            "/tmp",
            "/root",
        ] {
            let error = sandbox(PathBuf::from(system), vec![])
                .check(&protected, None)
                .unwrap_err();
            assert!(
                error.contains("system's") || error.contains("platform's own"),
                "{system}: {error}"
            );
        }
        let error = sandbox(code.clone(), vec![dir.path().to_owned()])
            .check(&protected, None)
            .unwrap_err();
        assert!(error.contains("runtime.process_host_paths"), "{error}");
        for (bad, says) in [
            (PathBuf::from("relative"), "not absolute"),
            (code.join("../code"), "`..`"),
            (dir.path().join("missing"), "missing"),
        ] {
            let error = sandbox(bad, vec![]).check(&protected, None).unwrap_err();
            assert!(error.contains(says), "{error}");
        }
    }

    #[test]
    fn a_code_snapshot_is_code_although_the_platform_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let snapshots = data.join("sources");
        let snapshot = snapshots.join("7").join("ab12");
        fs::create_dir_all(&snapshot).unwrap();
        let sandbox = |code_dir: PathBuf| Sandbox {
            user: 200_007,
            code_dir,
            host_paths: vec![],
        };
        let protected = [data.as_path()];
        assert!(sandbox(snapshot.clone()).check(&protected, None).is_err());
        assert_eq!(
            sandbox(snapshot.clone()).check(&protected, Some(&snapshots)),
            Ok(fs::canonicalize(&snapshot).unwrap())
        );
        // One that is gone is refused without naming where the platform keeps snapshots.
        let missing = sandbox(snapshots.join("7").join("cd34"))
            .check(&protected, Some(&snapshots))
            .unwrap_err();
        assert_eq!(
            missing,
            "the revision's code snapshot is not on this machine"
        );
        // A host path would be hidden under the code.
        let hidden = Sandbox {
            host_paths: vec![PathBuf::from("/app/vendor")],
            ..sandbox(snapshot.clone())
        }
        .check(&protected, Some(&snapshots))
        .unwrap_err();
        assert!(hidden.contains("/app"), "{hidden}");
        // Only a snapshot itself: not the store, not a service's directory of them, not the
        // data directory reached through one.
        for bad in [
            snapshots.clone(),
            snapshots.join("7"),
            snapshot.join("../../.."),
        ] {
            assert!(
                sandbox(bad.clone())
                    .check(&protected, Some(&snapshots))
                    .is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn links_are_made_again_and_directories_bound() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host");
        fs::create_dir_all(host.join("usr/bin")).unwrap();
        std::os::unix::fs::symlink("usr/bin", host.join("bin")).unwrap();
        let sandbox = Sandbox {
            user: 200_001,
            code_dir: PathBuf::from("/srv/app"),
            host_paths: vec![host.join("usr"), host.join("bin"), host.join("nope")],
        };
        let rootfs = dir.path().join("rootfs");
        let layout = sandbox
            .lay_out(&rootfs, Path::new("/data/code/app"))
            .unwrap();
        assert_eq!(
            layout.binds,
            [
                (host.join("usr"), host.join("usr")),
                (PathBuf::from("/data/code/app"), PathBuf::from("/app"))
            ],
            "directories and the code, in order; a missing path is skipped"
        );
        assert!(!layout.has_etc);
        let inside = rootfs.join(host.join("bin").strip_prefix("/").unwrap());
        assert_eq!(fs::read_link(inside).unwrap(), PathBuf::from("usr/bin"));
        // The spec's paths under the code's host path are under /app inside, and back.
        assert_eq!(
            sandbox.inside(Path::new("/srv/app/./bin/app.py")),
            Path::new("/app/bin/app.py")
        );
        assert_eq!(sandbox.inside(Path::new("/app/x")), Path::new("/app/x"));
        assert!(sandbox.sees(Path::new("/app/app.py")));
        assert!(sandbox.sees(&host.join("usr/bin/python3")));
        assert!(!sandbox.sees(Path::new("/srv/app/app.py")), "the host path");
        assert!(!sandbox.sees(Path::new("/root/.pyenv/shims/python3")));
        assert!(!sandbox.sees(Path::new("/app/../root/x")));
        let code = Path::new("/data/code/app");
        assert_eq!(
            sandbox.on_host(Path::new("/app/bin/app.py"), code),
            Some(PathBuf::from("/data/code/app/bin/app.py"))
        );
        assert_eq!(
            sandbox.on_host(&host.join("usr/bin/env"), code),
            Some(host.join("usr/bin/env"))
        );
        assert_eq!(sandbox.on_host(Path::new("/opt/tool"), code), None);
    }
}
