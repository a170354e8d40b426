//! Code snapshots: a process revision's source tree as it was deployed.
//!
//! `runway deploy` packs the repository (the directory holding `.runway/`) into one tar
//! archive with [`pack`]: every file `.gitignore` and `.runwayignore` files do not exclude,
//! never `.git/`, sorted by name, with no owner, time or private mode, so the same tree always
//! gives the same bytes and so the same digest. The server takes the gzip of that archive,
//! unpacks it with the image layers' rules ([`crate::unpack`]: no `..`, nothing written
//! through a symlink, no device node), checks the archive's digest, and keeps it read-only
//! under `<root>/<service id>/<hex>/` ([`SourceStore`]). A revision names its snapshot by
//! digest, so a rollback or a promotion runs exactly the code that was deployed, from any
//! machine the CLI ran on.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::digest::{Digest, Hasher, HashingReader};
use crate::error::OciError;
use crate::unpack::{UnpackOptions, apply_layer};

/// The time `tar`'s deterministic headers carry (1153704088, as `tar::HeaderMode::Deterministic`
/// writes), for the entries made here.
const DETERMINISTIC_MTIME: u64 = 1_153_704_088;

/// The default bound on a snapshot's archive, uncompressed: 128 MiB.
pub const DEFAULT_MAX_SOURCE_BYTES: u64 = 128 << 20;

/// The file, besides `.gitignore`, that keeps paths out of a snapshot (same syntax).
pub const IGNORE_FILE: &str = ".runwayignore";

/// Why a snapshot could not be made, taken or kept.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The archive is over the size limit.
    #[error("{0}")]
    TooLarge(String),
    /// The archive is not what it claims (not gzip or tar, another digest, an unsafe entry).
    #[error("{0}")]
    Invalid(String),
    /// The disk the snapshots are kept on is full (or over its quota).
    #[error("no room for the snapshot: {0}")]
    Full(io::Error),
    /// A file could not be read or written.
    #[error("cannot {what} {}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl SourceError {
    fn io(what: &'static str, path: &Path, source: io::Error) -> Self {
        if is_full(&source) {
            return Self::Full(source);
        }
        Self::Io {
            what,
            path: path.to_owned(),
            source,
        }
    }
}

/// Whether an error says the disk is full or the quota spent: the platform's fault, never the
/// snapshot's.
fn is_full(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// A packed snapshot: the gzip of its archive, and the archive's digest and size.
#[derive(Debug)]
pub struct Packed {
    /// `sha256:…` of the uncompressed archive: the snapshot's name.
    pub digest: Digest,
    /// The archive's size, uncompressed.
    pub size: u64,
    /// Files (and symbolic links) in it.
    pub files: u64,
    /// The archive, gzip-compressed, as uploaded.
    pub gzip: Vec<u8>,
    /// What was left out that is not ignored on purpose: sockets, fifos, devices.
    pub skipped: Vec<String>,
}

/// Writes through to `inner`, hashing and counting, and stops past `max` bytes.
struct Counting<W> {
    inner: W,
    hasher: Hasher,
    max: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.hasher.len().saturating_add(buf.len() as u64) > self.max {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                "over the limit",
            ));
        }
        let n = self.inner.write(buf)?;
        if let Some(written) = buf.get(..n) {
            self.hasher.update(written);
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Packs `root` (see the module documentation), refusing an archive over `max_bytes`; the
/// error then names the largest files, which are what to ignore.
pub fn pack(root: &Path, max_bytes: u64) -> Result<Packed, SourceError> {
    pack_with(root, max_bytes, &PackOptions::default())
}

/// What [`pack_with`] packs besides [`pack`]'s rules.
#[derive(Debug, Clone, Default)]
pub struct PackOptions {
    /// The directory the files are put under in the archive (`app` for `/app`), its parents
    /// made as directories; none, at the archive's root.
    pub prefix: Option<PathBuf>,
    /// Only these paths (files, or directories and what they hold), relative to the root;
    /// none, everything.
    pub include: Option<Vec<PathBuf>>,
    /// Leave `.runway/` out too (an image has no use for the manifests).
    pub without_runway_dir: bool,
}

/// Whether `rel` is one of `include`, under one, or a directory on the way to one.
fn included(include: &[PathBuf], rel: &Path, is_dir: bool) -> bool {
    include
        .iter()
        .any(|path| rel.starts_with(path) || (is_dir && path.starts_with(rel)))
}

/// Packs `root` as [`pack`] does, with `options`: an image layer's files under a directory,
/// some paths only.
pub fn pack_with(
    root: &Path,
    max_bytes: u64,
    options: &PackOptions,
) -> Result<Packed, SourceError> {
    let without_runway = options.without_runway_dir;
    let walk = ignore::WalkBuilder::new(root)
        .standard_filters(false)
        .git_ignore(true)
        .require_git(false)
        .add_custom_ignore_filename(IGNORE_FILE)
        .filter_entry(move |entry| {
            entry.file_name() != ".git"
                && !(without_runway && entry.depth() == 1 && entry.file_name() == ".runway")
        })
        .sort_by_file_name(std::ffi::OsStr::cmp)
        .build();
    let gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut archive = tar::Builder::new(Counting {
        inner: gzip,
        hasher: Hasher::new(),
        max: max_bytes,
    });
    archive.mode(tar::HeaderMode::Deterministic);
    archive.follow_symlinks(false);
    let prefix = options.prefix.clone().unwrap_or_default();
    let mut made = PathBuf::new();
    for part in prefix.components() {
        made.push(part);
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_uid(0);
        header.set_gid(0);
        header.set_size(0);
        header.set_mtime(DETERMINISTIC_MTIME);
        archive
            .append_data(&mut header, &made, io::empty())
            .map_err(|e| SourceError::io("pack", root, e))?;
    }
    let mut files = 0u64;
    let mut skipped = Vec::new();
    let mut sizes: Vec<(u64, PathBuf)> = Vec::new();
    let mut over = false;
    for entry in walk {
        let entry = entry.map_err(|e| SourceError::Invalid(format!("cannot read {e}")))?;
        let path = entry.path();
        let Ok(rel) = path.strip_prefix(root) else {
            continue;
        };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let meta = fs::symlink_metadata(path).map_err(|e| SourceError::io("read", path, e))?;
        let kind = meta.file_type();
        if let Some(include) = &options.include
            && !included(include, rel, kind.is_dir())
        {
            continue;
        }
        if !(kind.is_dir() || kind.is_file() || kind.is_symlink()) {
            skipped.push(format!("{}: not a file, directory or link", rel.display()));
            continue;
        }
        if kind.is_file() {
            sizes.push((meta.len(), rel.to_owned()));
            files += 1;
        } else if kind.is_symlink() {
            files += 1;
        }
        if over {
            continue;
        }
        match archive.append_path_with_name(path, prefix.join(rel)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::FileTooLarge => over = true,
            Err(e) => return Err(SourceError::io("pack", path, e)),
        }
    }
    let finished = if over {
        Err(io::ErrorKind::FileTooLarge.into())
    } else {
        archive.into_inner()
    };
    let counting = match finished {
        Ok(counting) => counting,
        Err(e) if e.kind() == io::ErrorKind::FileTooLarge => {
            sizes.sort_unstable_by_key(|(size, _)| std::cmp::Reverse(*size));
            let largest: Vec<String> = sizes
                .iter()
                .take(5)
                .map(|(size, path)| format!("{} ({})", path.display(), human_bytes(*size)))
                .collect();
            return Err(SourceError::TooLarge(format!(
                "{} is over the limit of {} for a code snapshot; its largest files: {}. Leave \
                 out what the service does not run with a {IGNORE_FILE} (as .gitignore), or \
                 deploy an image",
                root.display(),
                human_bytes(max_bytes),
                largest.join(", ")
            )));
        }
        Err(e) => return Err(SourceError::io("pack", root, e)),
    };
    let size = counting.hasher.len();
    let digest = counting.hasher.finish();
    let gzip = counting
        .inner
        .finish()
        .map_err(|e| SourceError::io("compress", root, e))?;
    Ok(Packed {
        digest,
        size,
        files,
        gzip,
        skipped,
    })
}

/// `12.3 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["bytes", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Reads through to `inner`, failing past `max` bytes.
struct Bounded<R> {
    inner: R,
    left: u64,
    max: u64,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.left = self.left.checked_sub(n as u64).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("over the limit of {}", human_bytes(self.max)),
            )
        })?;
        Ok(n)
    }
}

/// Services' code snapshots on this machine: `<root>/<service id>/<hex>/`, read-only once
/// there. The root and each service's directory are `0711` (searchable, not listable); a
/// snapshot's files are readable by all who can reach them, as its service's own user must.
#[derive(Debug, Clone)]
pub struct SourceStore {
    root: PathBuf,
}

impl SourceStore {
    /// The store at `root`, created `0711` if need be.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, SourceError> {
        use std::os::unix::fs::PermissionsExt;
        let root = root.into();
        fs::create_dir_all(&root).map_err(|e| SourceError::io("create", &root, e))?;
        fs::set_permissions(&root, fs::Permissions::from_mode(0o711))
            .map_err(|e| SourceError::io("set the mode of", &root, e))?;
        Ok(Self { root })
    }

    /// Where snapshots are.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where service `service_id`'s snapshot `digest` is (or would be).
    pub fn path(&self, service_id: i64, digest: &Digest) -> PathBuf {
        self.root.join(service_id.to_string()).join(digest.hex())
    }

    /// Whether the service has snapshot `digest`.
    pub fn contains(&self, service_id: i64, digest: &Digest) -> bool {
        self.path(service_id, digest).is_dir()
    }

    /// Whether the service has snapshot `digest`, which [`SourceStore::collect`] then keeps for
    /// another grace period (a deploy naming it is on its way).
    pub fn claim(&self, service_id: i64, digest: &Digest) -> bool {
        let path = self.path(service_id, digest);
        path.is_dir() && filetime::set_file_mtime(&path, filetime::FileTime::now()).is_ok()
    }

    /// Takes `gzip` (the gzip of a [`pack`]ed archive) as service `service_id`'s snapshot
    /// `digest`: unpacked aside, checked against the digest and `max_bytes` (uncompressed),
    /// then renamed into place. Taking one that is there already reads nothing.
    pub fn put(
        &self,
        service_id: i64,
        digest: &Digest,
        gzip: impl Read,
        max_bytes: u64,
    ) -> Result<PathBuf, SourceError> {
        use std::os::unix::fs::PermissionsExt;
        let target = self.path(service_id, digest);
        if self.claim(service_id, digest) {
            return Ok(target);
        }
        let staging = self.staging(service_id)?;
        let tree = staging.path().join("tree");
        fs::create_dir(&tree).map_err(|e| SourceError::io("create", &tree, e))?;
        let decoded = flate2::read::GzDecoder::new(gzip);
        let mut archive = HashingReader::new(Bounded {
            inner: decoded,
            left: max_bytes,
            max: max_bytes,
        });
        let opts = UnpackOptions {
            id_shift: 0,
            chown: false,
            plain_modes: true,
        };
        let applied = apply_layer(&tree, &mut archive, digest, opts);
        // The rest of the stream (the archive's end, and anything after) is hashed too.
        let finished = archive.finish();
        let report = match (applied, finished) {
            (_, Err(e)) | (Err(OciError::LayerRead { source: e, .. }), _)
                if e.kind() == io::ErrorKind::FileTooLarge =>
            {
                return Err(SourceError::TooLarge(format!(
                    "the snapshot is over the limit of {} uncompressed",
                    human_bytes(max_bytes)
                )));
            }
            (_, Err(e)) | (Err(OciError::LayerRead { source: e, .. }), _) if is_full(&e) => {
                return Err(SourceError::Full(e));
            }
            (Err(OciError::UnsafeEntry { path, reason, .. }), _) => {
                return Err(SourceError::Invalid(format!(
                    "the snapshot's entry {path:?} is refused: {reason}"
                )));
            }
            (Err(OciError::LayerRead { source, .. }), _) | (_, Err(source)) => {
                return Err(SourceError::Invalid(format!(
                    "the snapshot is not a gzip-compressed tar archive: {source}"
                )));
            }
            (Err(e), _) => return Err(SourceError::Invalid(runway_log::chain(&e))),
            (Ok(report), Ok((actual, _))) if actual != *digest => {
                let _ = report;
                return Err(SourceError::Invalid(format!(
                    "the snapshot's archive is {actual}, not {digest} as named"
                )));
            }
            (Ok(report), Ok(_)) => report,
        };
        if let Some(skipped) = report.skipped.first() {
            return Err(SourceError::Invalid(format!(
                "the snapshot's entry {skipped} is not a file, directory or link"
            )));
        }
        fs::set_permissions(&tree, fs::Permissions::from_mode(0o755))
            .map_err(|e| SourceError::io("set the mode of", &tree, e))?;
        into_place(&tree, target)
    }

    /// A new directory for a snapshot on its way in, in service `service_id`'s (made `0711`
    /// if need be), removed when dropped; [`SourceStore::collect`] removes one left behind.
    fn staging(&self, service_id: i64) -> Result<tempfile::TempDir, SourceError> {
        use std::os::unix::fs::PermissionsExt;
        let service_dir = self.root.join(service_id.to_string());
        fs::create_dir_all(&service_dir).map_err(|e| SourceError::io("create", &service_dir, e))?;
        fs::set_permissions(&service_dir, fs::Permissions::from_mode(0o711))
            .map_err(|e| SourceError::io("set the mode of", &service_dir, e))?;
        tempfile::Builder::new()
            .prefix(".upload-")
            .tempdir_in(&service_dir)
            .map_err(|e| SourceError::io("create a directory in", &service_dir, e))
    }

    /// Gives service `to` the snapshot `digest` of service `from` (a preview runs its parent's
    /// code): hard links of its files in a tree of `to`'s own, which [`SourceStore::collect`]
    /// keeps or removes as `to`'s. When `to` has it already, nothing is linked.
    pub fn share(&self, from: i64, to: i64, digest: &Digest) -> Result<PathBuf, SourceError> {
        let target = self.path(to, digest);
        if self.claim(to, digest) {
            return Ok(target);
        }
        let source = self.path(from, digest);
        if !source.is_dir() {
            return Err(SourceError::Invalid(format!(
                "there is no code snapshot {digest} to share"
            )));
        }
        let staging = self.staging(to)?;
        let tree = staging.path().join("tree");
        link_tree(&source, &tree)?;
        into_place(&tree, target)
    }

    /// Removes what no revision names: every snapshot of a service not in `services`, and a
    /// service's snapshot not in `keep` once it is older than `grace` (an upload whose deploy
    /// may still come). Returns how many went.
    pub fn collect(
        &self,
        services: &BTreeSet<i64>,
        keep: &BTreeSet<(i64, String)>,
        grace: Duration,
    ) -> Result<usize, SourceError> {
        let now = SystemTime::now();
        let mut removed = 0;
        let listing =
            fs::read_dir(&self.root).map_err(|e| SourceError::io("list", &self.root, e))?;
        for service_dir in listing.flatten() {
            let Some(id) = service_dir
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i64>().ok())
            else {
                continue;
            };
            let dir = service_dir.path();
            if !services.contains(&id) {
                fs::remove_dir_all(&dir).map_err(|e| SourceError::io("remove", &dir, e))?;
                removed += 1;
                continue;
            }
            let Ok(snapshots) = fs::read_dir(&dir) else {
                continue;
            };
            for snapshot in snapshots.flatten() {
                let name = snapshot.file_name().to_string_lossy().into_owned();
                let hex = name.strip_prefix(".upload-").unwrap_or(&name);
                let old = snapshot
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|at| now.duration_since(at).unwrap_or_default() >= grace);
                let named = hex == name && keep.contains(&(id, format!("sha256:{hex}")));
                if !named && old {
                    let path = snapshot.path();
                    fs::remove_dir_all(&path).map_err(|e| SourceError::io("remove", &path, e))?;
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }
}

/// Renames the finished snapshot `tree` to `target`; another of the same snapshot that got
/// there first is the same bytes.
fn into_place(tree: &Path, target: PathBuf) -> Result<PathBuf, SourceError> {
    match fs::rename(tree, &target) {
        Ok(()) => Ok(target),
        Err(_) if target.is_dir() => Ok(target),
        Err(e) => Err(SourceError::io("rename into", &target, e)),
    }
}

/// `to`, a new tree of hard links to the files of `from` (its directories made anew with their
/// modes, its symbolic links copied), walked without recursion: a tenant's tree may be deep.
fn link_tree(from: &Path, to: &Path) -> Result<(), SourceError> {
    // Directories get their modes once filled: a read-only one could take no entry after.
    let mut modes = Vec::new();
    let mut pending = vec![(from.to_owned(), to.to_owned())];
    while let Some((source, target)) = pending.pop() {
        let mode = fs::symlink_metadata(&source)
            .map_err(|e| SourceError::io("read", &source, e))?
            .permissions();
        fs::create_dir(&target).map_err(|e| SourceError::io("create", &target, e))?;
        modes.push((target.clone(), mode));
        let entries = fs::read_dir(&source).map_err(|e| SourceError::io("list", &source, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| SourceError::io("list", &source, e))?;
            let (path, into) = (entry.path(), target.join(entry.file_name()));
            let kind = entry
                .file_type()
                .map_err(|e| SourceError::io("read", &path, e))?;
            if kind.is_dir() {
                pending.push((path, into));
            } else if kind.is_symlink() {
                let link = fs::read_link(&path).map_err(|e| SourceError::io("read", &path, e))?;
                std::os::unix::fs::symlink(&link, &into)
                    .map_err(|e| SourceError::io("create", &into, e))?;
            } else {
                fs::hard_link(&path, &into).map_err(|e| SourceError::io("link", &into, e))?;
            }
        }
    }
    for (dir, mode) in modes.into_iter().rev() {
        fs::set_permissions(&dir, mode).map_err(|e| SourceError::io("set the mode of", &dir, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        fs::create_dir_all(root.join(".runway")).expect("mkdir");
        fs::create_dir_all(root.join("src/deep")).expect("mkdir");
        fs::create_dir_all(root.join(".git/objects")).expect("mkdir");
        fs::create_dir_all(root.join("node_modules/x")).expect("mkdir");
        fs::write(root.join(".runway/runway.yml"), "spec: {}\n").expect("write");
        fs::write(root.join("app.py"), "print('v1')\n").expect("write");
        fs::write(root.join("run.sh"), "#!/bin/sh\n").expect("write");
        fs::set_permissions(root.join("run.sh"), fs::Permissions::from_mode(0o4750))
            .expect("chmod");
        fs::write(root.join("secret.key"), "k").expect("write");
        fs::set_permissions(root.join("secret.key"), fs::Permissions::from_mode(0o600))
            .expect("chmod");
        fs::write(root.join("src/deep/lib.py"), "x = 1\n").expect("write");
        fs::write(root.join(".git/objects/a"), "git").expect("write");
        fs::write(root.join("node_modules/x/index.js"), "big").expect("write");
        fs::write(root.join("debug.log"), "log").expect("write");
        fs::write(root.join(".gitignore"), "*.log\n").expect("write");
        fs::write(root.join(IGNORE_FILE), "node_modules/\n").expect("write");
        symlink("app.py", root.join("main.py")).expect("symlink");
        dir
    }

    fn files(root: &Path) -> BTreeSet<String> {
        ignore::WalkBuilder::new(root)
            .standard_filters(false)
            .build()
            .flatten()
            .filter_map(|e| {
                let rel = e
                    .path()
                    .strip_prefix(root)
                    .ok()?
                    .to_string_lossy()
                    .into_owned();
                (!rel.is_empty()).then_some(rel)
            })
            .collect()
    }

    /// The entries of a packed archive: path, uid, gid, mode.
    fn entries(packed: &Packed) -> Vec<(String, u64, u64, u32)> {
        let gzip = flate2::read::GzDecoder::new(packed.gzip.as_slice());
        let mut archive = tar::Archive::new(gzip);
        archive
            .entries()
            .expect("entries")
            .map(|entry| {
                let entry = entry.expect("entry");
                let header = entry.header();
                (
                    entry.path().expect("path").to_string_lossy().into_owned(),
                    header.uid().expect("uid"),
                    header.gid().expect("gid"),
                    header.mode().expect("mode"),
                )
            })
            .collect()
    }

    #[test]
    fn a_layer_holds_the_included_files_under_its_directory_and_no_manifests() {
        let source = tree();
        let options = PackOptions {
            prefix: Some(PathBuf::from("srv/app")),
            include: Some(vec![PathBuf::from("app.py"), PathBuf::from("src")]),
            without_runway_dir: true,
        };
        let packed = pack_with(source.path(), DEFAULT_MAX_SOURCE_BYTES, &options).expect("pack");
        let names: Vec<String> = entries(&packed).into_iter().map(|e| e.0).collect();
        assert_eq!(
            names,
            [
                "srv",
                "srv/app",
                "srv/app/app.py",
                "srv/app/src",
                "srv/app/src/deep",
                "srv/app/src/deep/lib.py",
            ]
        );
        // Every header is whole (owner root), as an image's layer must be.
        assert!(entries(&packed).iter().all(|e| e.1 == 0 && e.2 == 0));
        let again = pack_with(source.path(), DEFAULT_MAX_SOURCE_BYTES, &options).expect("pack");
        assert_eq!(again.digest, packed.digest);
        // Without `include`, everything but `.git/`, `.runway/` and what is ignored.
        let all = PackOptions {
            include: None,
            ..options
        };
        let packed = pack_with(source.path(), DEFAULT_MAX_SOURCE_BYTES, &all).expect("pack");
        let names: Vec<String> = entries(&packed).into_iter().map(|e| e.0).collect();
        assert!(names.contains(&"srv/app/main.py".to_owned()), "{names:?}");
        assert!(
            !names
                .iter()
                .any(|n| n.contains(".runway/") || n.contains(".git/"))
        );
        assert!(
            !names
                .iter()
                .any(|n| n.contains("debug.log") || n.contains("node_modules"))
        );
    }

    #[test]
    fn a_tree_packs_to_the_same_digest_and_round_trips_without_what_is_ignored() {
        let source = tree();
        let packed = pack(source.path(), DEFAULT_MAX_SOURCE_BYTES).expect("pack");
        // Another copy of the tree, made later, packs to the same bytes.
        std::thread::sleep(Duration::from_millis(1100));
        fs::write(source.path().join("app.py"), "print('v1')\n").expect("touch");
        let again = pack(source.path(), DEFAULT_MAX_SOURCE_BYTES).expect("pack");
        assert_eq!(packed.digest, again.digest);
        assert_eq!(packed.files, 8, "{:?}", files(source.path()));

        let store_dir = tempfile::tempdir().expect("tempdir");
        let store = SourceStore::open(store_dir.path().join("sources")).expect("open");
        let path = store
            .put(
                7,
                &packed.digest,
                packed.gzip.as_slice(),
                DEFAULT_MAX_SOURCE_BYTES,
            )
            .expect("put");
        assert_eq!(path, store.path(7, &packed.digest));
        assert!(store.contains(7, &packed.digest));
        assert!(!store.contains(8, &packed.digest), "another service's");
        let got = files(&path);
        let expected: BTreeSet<String> = [
            ".gitignore",
            ".runway",
            ".runway/runway.yml",
            ".runwayignore",
            "app.py",
            "main.py",
            "run.sh",
            "secret.key",
            "src",
            "src/deep",
            "src/deep/lib.py",
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(got, expected);
        let mode = |p: &str| {
            fs::symlink_metadata(path.join(p))
                .map(|m| m.permissions().mode() & 0o7777)
                .ok()
        };
        assert_eq!(
            mode("run.sh"),
            Some(0o755),
            "setuid dropped, executable kept"
        );
        assert_eq!(
            mode("secret.key"),
            Some(0o644),
            "readable by the service's user"
        );
        assert_eq!(mode("src/deep"), Some(0o755));
        assert_eq!(
            fs::read_link(path.join("main.py")).ok(),
            Some(PathBuf::from("app.py"))
        );
        assert_eq!(
            fs::read_to_string(path.join("app.py")).ok().as_deref(),
            Some("print('v1')\n")
        );
    }

    #[test]
    fn a_snapshot_that_is_not_what_it_is_named_is_refused_and_leaves_nothing() {
        let source = tree();
        let packed = pack(source.path(), DEFAULT_MAX_SOURCE_BYTES).expect("pack");
        let store_dir = tempfile::tempdir().expect("tempdir");
        let store = SourceStore::open(store_dir.path()).expect("open");
        let other = Digest::of(b"another");
        let err = store
            .put(1, &other, packed.gzip.as_slice(), DEFAULT_MAX_SOURCE_BYTES)
            .expect_err("wrong digest");
        assert!(
            matches!(err, SourceError::Invalid(ref m) if m.contains("not sha256:")),
            "{err}"
        );
        let err = store
            .put(
                1,
                &packed.digest,
                &b"not gzip"[..],
                DEFAULT_MAX_SOURCE_BYTES,
            )
            .expect_err("garbage");
        assert!(matches!(err, SourceError::Invalid(_)), "{err}");
        let err = store
            .put(1, &packed.digest, packed.gzip.as_slice(), 1024)
            .expect_err("over the limit");
        assert!(matches!(err, SourceError::TooLarge(_)), "{err}");
        assert!(!store.contains(1, &packed.digest));
        assert_eq!(
            fs::read_dir(store_dir.path().join("1"))
                .expect("list")
                .count(),
            0
        );
    }

    #[test]
    fn an_archive_that_escapes_is_refused() {
        let mut raw = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        // `set_path` refuses `..`; write the name by hand as a hostile client would.
        let name = b"../../escape";
        header.as_old_mut().name[..name.len()].copy_from_slice(name);
        header.set_cksum();
        raw.append(&header, &b"x"[..]).expect("append");
        let bytes = raw.into_inner().expect("tar");
        let digest = Digest::of(&bytes);
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gzip.write_all(&bytes).expect("gzip");
        let gzip = gzip.finish().expect("gzip");
        let store_dir = tempfile::tempdir().expect("tempdir");
        let store = SourceStore::open(store_dir.path().join("s")).expect("open");
        let err = store
            .put(1, &digest, gzip.as_slice(), DEFAULT_MAX_SOURCE_BYTES)
            .expect_err("escape");
        assert!(err.to_string().contains("refused"), "{err}");
        assert!(!store_dir.path().join("escape").exists());
    }

    #[test]
    fn packing_over_the_limit_names_the_largest_files() {
        let source = tree();
        fs::write(source.path().join("model.bin"), vec![7u8; 300_000]).expect("write");
        let err = pack(source.path(), 100_000).expect_err("over");
        let text = err.to_string();
        assert!(matches!(err, SourceError::TooLarge(_)));
        assert!(text.contains("model.bin (293.0 KiB)"), "{text}");
        assert!(text.contains(IGNORE_FILE), "{text}");
    }

    #[test]
    fn collecting_keeps_what_revisions_name_and_fresh_uploads() {
        let source = tree();
        let packed = pack(source.path(), DEFAULT_MAX_SOURCE_BYTES).expect("pack");
        let store_dir = tempfile::tempdir().expect("tempdir");
        let store = SourceStore::open(store_dir.path()).expect("open");
        for id in [1, 2, 3] {
            store
                .put(
                    id,
                    &packed.digest,
                    packed.gzip.as_slice(),
                    DEFAULT_MAX_SOURCE_BYTES,
                )
                .expect("put");
        }
        let services = BTreeSet::from([1, 2]);
        let keep = BTreeSet::from([(1, packed.digest.to_string())]);
        // Service 3 is gone: its snapshots go at once; service 2's is fresh, so it stays.
        assert_eq!(
            store
                .collect(&services, &keep, Duration::from_secs(3600))
                .expect("gc"),
            1
        );
        assert!(store.contains(2, &packed.digest));
        assert!(!store.contains(3, &packed.digest));
        // Past the grace period, only what a revision names stays.
        assert_eq!(
            store.collect(&services, &keep, Duration::ZERO).expect("gc"),
            1
        );
        assert!(store.contains(1, &packed.digest));
        assert!(!store.contains(2, &packed.digest));
    }

    #[test]
    fn a_shared_snapshot_is_a_tree_of_its_own_with_the_same_files() {
        let source = tree();
        fs::create_dir_all(source.path().join("ro")).expect("mkdir");
        fs::write(source.path().join("ro/file"), "x").expect("write");
        symlink("app.py", source.path().join("link.py")).expect("symlink");
        fs::set_permissions(source.path().join("ro"), fs::Permissions::from_mode(0o555))
            .expect("chmod");
        let packed = pack(source.path(), DEFAULT_MAX_SOURCE_BYTES).expect("pack");
        let store_dir = tempfile::tempdir().expect("tempdir");
        let store = SourceStore::open(store_dir.path()).expect("open");
        store
            .put(
                1,
                &packed.digest,
                packed.gzip.as_slice(),
                DEFAULT_MAX_SOURCE_BYTES,
            )
            .expect("put");
        let shared = store.share(1, 2, &packed.digest).expect("share");
        assert_eq!(shared, store.path(2, &packed.digest));
        assert_eq!(
            fs::read_to_string(shared.join("src/deep/lib.py")).expect("read"),
            "x = 1\n"
        );
        assert_eq!(
            fs::read_link(shared.join("link.py")).expect("link"),
            Path::new("app.py")
        );
        let mode = |p: &Path| fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        let original = store.path(1, &packed.digest);
        assert_eq!(mode(&shared.join("ro")), mode(&original.join("ro")));
        // Sharing again links nothing; the original may go and the share stays.
        assert_eq!(store.share(1, 2, &packed.digest).expect("again"), shared);
        let keep = BTreeSet::from([(2, packed.digest.to_string())]);
        store
            .collect(&BTreeSet::from([2]), &keep, Duration::ZERO)
            .expect("gc");
        assert!(!store.contains(1, &packed.digest));
        assert!(shared.join("app.py").is_file());
        // Nothing to share is said so.
        let err = store.share(3, 4, &packed.digest).expect_err("none");
        assert!(err.to_string().contains("no code snapshot"), "{err}");
    }
}
