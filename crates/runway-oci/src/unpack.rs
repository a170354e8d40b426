//! Applies layer archives to a root directory, refusing anything that would escape it.
//!
//! The rules (also in the crate docs):
//! - Entry paths are taken relative to the root: a leading `/` or `./` is dropped, and any `..`
//!   component is refused.
//! - No symlink is ever followed while writing. Every parent directory of an entry is checked
//!   with `lstat`; a parent that is a symlink (whatever it points at) is refused, so a layer
//!   cannot plant `evil -> /etc` and then write `evil/passwd`. The entry itself replaces whatever
//!   is at its path (a symlink there is removed, never opened), and files are created with
//!   `O_CREAT | O_EXCL`.
//! - Symlinks may point anywhere: they are only stored, and resolve inside the container, which
//!   runs chrooted into the root. Hard-link targets are archive paths under the same rules as
//!   entry paths, must exist, and must not be reached through a symlink.
//! - Character and block devices are refused (an image has no business shipping them; the
//!   runtime creates `/dev`). FIFOs and other special types are skipped and reported
//!   ([`crate::Image::unpack_warnings`]).
//! - Whiteouts: `.wh.NAME` removes `NAME` from the layers below; `.wh..wh..opq` empties its
//!   directory of everything the layers below put there. Neither marker is written.
//! - Modes (including setuid, setgid and sticky bits) and modification times are kept. When the
//!   process runs as root, ownership is the tar's uid and gid plus the id shift; otherwise files
//!   belong to the caller. Extended attributes are not applied.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::digest::{Digest, HashingReader};
use crate::error::{BlobKind, OciError};
use crate::image::Compression;

/// How to unpack.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UnpackOptions {
    /// Added to every uid and gid from the archive (the user namespace's host base).
    pub(crate) id_shift: u32,
    /// Whether to `lchown` at all (only root can).
    pub(crate) chown: bool,
    /// Modes made plain, as for a code snapshot: directories and files with an execute bit
    /// `0755`, other files `0644`; no setuid, setgid or sticky bit, nothing private.
    pub(crate) plain_modes: bool,
}

/// What applying one layer did besides writing files.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct LayerReport {
    /// Entries written (files, directories, links).
    pub(crate) entries: u64,
    /// Entries skipped, with the reason (`path: reason`).
    pub(crate) skipped: Vec<String>,
}

/// Reads a layer blob from `path`, decompresses it, applies it to `root`, and checks both the
/// blob's digest and, when given, the uncompressed stream's digest (`diff_id`).
pub(crate) fn apply_layer_file(
    root: &Path,
    path: &Path,
    compression: Compression,
    layer: &Digest,
    diff_id: Option<&Digest>,
    opts: UnpackOptions,
) -> Result<LayerReport, OciError> {
    let file = File::open(path).map_err(|e| OciError::io("open layer", path, e))?;
    let mut blob = HashingReader::new(BufReader::new(file));
    let report = {
        let read_err = |source| OciError::LayerRead {
            layer: layer.to_string(),
            path: None,
            source,
        };
        let decompressed: Box<dyn Read + '_> = match compression {
            Compression::None => Box::new(&mut blob),
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(&mut blob)),
            Compression::Zstd => Box::new(ZstdReader::new(BufReader::new(&mut blob))),
        };
        let mut tar_stream = HashingReader::new(decompressed);
        let report = apply_layer(root, &mut tar_stream, layer, opts)?;
        let (uncompressed, _) = tar_stream.finish().map_err(read_err)?;
        if let Some(expected) = diff_id
            && *expected != uncompressed
        {
            return Err(OciError::DigestMismatch {
                kind: BlobKind::UncompressedLayer,
                expected: expected.to_string(),
                actual: uncompressed.to_string(),
            });
        }
        report
    };
    let (actual, _) = blob
        .finish()
        .map_err(|e| OciError::io("read layer", path, e))?;
    if actual != *layer {
        return Err(OciError::DigestMismatch {
            kind: BlobKind::Layer,
            expected: layer.to_string(),
            actual: actual.to_string(),
        });
    }
    Ok(report)
}

/// Applies one uncompressed layer archive to `root`.
pub(crate) fn apply_layer(
    root: &Path,
    archive: impl Read,
    layer: &Digest,
    opts: UnpackOptions,
) -> Result<LayerReport, OciError> {
    let mut state = Layer {
        root,
        layer,
        opts,
        report: LayerReport::default(),
        written: HashSet::new(),
        dirs: Vec::new(),
    };
    let mut archive = tar::Archive::new(archive);
    let entries = archive.entries().map_err(|e| state.read_err(None, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| state.read_err(None, e))?;
        state.entry(entry)?;
    }
    // Directory modes and times last, deepest first, so a read-only directory does not stop
    // its own children from being written and children do not bump their parent's mtime.
    // A later entry of the layer may have replaced the directory, or one of its parents, with
    // a symlink: chmod follows symlinks, so apply only to what is still a real directory
    // reached through real directories.
    let dirs = std::mem::take(&mut state.dirs);
    for (rel, mode, mtime) in dirs.iter().rev() {
        if !is_real_dir(root, rel) {
            continue;
        }
        let path = root.join(rel);
        fs::set_permissions(&path, fs::Permissions::from_mode(*mode))
            .map_err(|e| OciError::io("set mode of", &path, e))?;
        filetime::set_symlink_file_times(&path, *mtime, *mtime)
            .map_err(|e| OciError::io("set times of", &path, e))?;
    }
    Ok(state.report)
}

/// Whether `root/rel` and every directory on the way are real directories (no symlinks).
fn is_real_dir(root: &Path, rel: &Path) -> bool {
    let mut path = root.to_path_buf();
    rel.components().all(|c| {
        path.push(c);
        fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir())
    })
}

struct Layer<'a> {
    root: &'a Path,
    layer: &'a Digest,
    opts: UnpackOptions,
    report: LayerReport,
    /// Paths (relative) this layer wrote, with all their ancestors: what an opaque whiteout keeps.
    written: HashSet<PathBuf>,
    /// Directories (relative) whose mode and time are set at the end.
    dirs: Vec<(PathBuf, u32, filetime::FileTime)>,
}

impl Layer<'_> {
    fn read_err(&self, path: Option<&str>, source: io::Error) -> OciError {
        OciError::LayerRead {
            layer: self.layer.to_string(),
            path: path.map(str::to_string),
            source,
        }
    }

    fn unsafe_entry(&self, path: &str, reason: impl Into<String>) -> OciError {
        OciError::UnsafeEntry {
            layer: self.layer.to_string(),
            path: path.to_string(),
            reason: reason.into(),
        }
    }

    fn entry<R: Read>(&mut self, mut entry: tar::Entry<'_, R>) -> Result<(), OciError> {
        let raw_path = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw_path).into_owned();
        let kind = entry.header().entry_type();
        if matches!(
            kind,
            tar::EntryType::XGlobalHeader
                | tar::EntryType::XHeader
                | tar::EntryType::GNULongName
                | tar::EntryType::GNULongLink
        ) {
            return Ok(());
        }
        let components = split_archive_path(&raw_path)
            .ok_or_else(|| self.unsafe_entry(&shown, "path has a `..` component"))?;
        let Some((name, parents)) = components.split_last() else {
            // The root itself (`./`): nothing to create.
            return Ok(());
        };

        // Whiteouts.
        if let Some(hidden) = name.strip_prefix(b".wh.".as_slice()) {
            let parent = self.parent_dir(&shown, parents, false)?;
            let Some((parent_abs, parent_rel)) = parent else {
                return Ok(()); // Nothing below to hide.
            };
            if hidden == b".wh..opq" {
                self.opaque(&parent_abs, &parent_rel)?;
            } else if hidden.starts_with(b".wh.") {
                // Other AUFS metadata (`.wh..wh.plnk` and the like): not content.
            } else if hidden.is_empty() || hidden == b"." || hidden == b".." {
                return Err(self.unsafe_entry(&shown, "whiteout of an invalid name"));
            } else {
                remove_any(&parent_abs.join(OsStr::from_bytes(hidden)))?;
            }
            return Ok(());
        }

        let header = entry.header();
        let mode = header.mode().map_err(|e| self.read_err(Some(&shown), e))? & 0o7777;
        let mode = match kind {
            _ if !self.opts.plain_modes => mode,
            tar::EntryType::Directory => 0o755,
            _ if mode & 0o111 != 0 => 0o755,
            _ => 0o644,
        };
        let uid = header.uid().map_err(|e| self.read_err(Some(&shown), e))?;
        let gid = header.gid().map_err(|e| self.read_err(Some(&shown), e))?;
        let mtime = header.mtime().unwrap_or(0);
        let mtime = filetime::FileTime::from_unix_time(i64::try_from(mtime).unwrap_or(0), 0);

        match kind {
            tar::EntryType::Char | tar::EntryType::Block => {
                return Err(self.unsafe_entry(&shown, "device nodes are not allowed in layers"));
            }
            tar::EntryType::Fifo => {
                self.report.skipped.push(format!("{shown}: fifo"));
                return Ok(());
            }
            tar::EntryType::Regular
            | tar::EntryType::Continuous
            | tar::EntryType::GNUSparse
            | tar::EntryType::Directory
            | tar::EntryType::Symlink
            | tar::EntryType::Link => {}
            other => {
                self.report
                    .skipped
                    .push(format!("{shown}: unsupported entry type {other:?}"));
                return Ok(());
            }
        }

        let Some((parent_abs, parent_rel)) = self.parent_dir(&shown, parents, true)? else {
            return Err(self.unsafe_entry(&shown, "parent directory could not be created"));
        };
        let target = parent_abs.join(OsStr::from_bytes(name));
        let rel = parent_rel.join(OsStr::from_bytes(name));

        match kind {
            tar::EntryType::Directory => {
                match fs::symlink_metadata(&target) {
                    Ok(meta) if meta.is_dir() => {}
                    Ok(_) => {
                        remove_any(&target)?;
                        create_dir(&target)?;
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => create_dir(&target)?,
                    Err(e) => return Err(OciError::io("inspect", &target, e)),
                }
                self.chown(&target, uid, gid, &shown)?;
                self.dirs.push((rel.clone(), mode, mtime));
            }
            tar::EntryType::Symlink => {
                let link = entry
                    .link_name_bytes()
                    .ok_or_else(|| self.unsafe_entry(&shown, "symlink without a target"))?
                    .into_owned();
                if link.is_empty() || link.contains(&0) {
                    return Err(self.unsafe_entry(&shown, "symlink with an empty target"));
                }
                remove_any(&target)?;
                std::os::unix::fs::symlink(OsStr::from_bytes(&link), &target)
                    .map_err(|e| OciError::io("create symlink", &target, e))?;
                self.chown(&target, uid, gid, &shown)?;
                filetime::set_symlink_file_times(&target, mtime, mtime)
                    .map_err(|e| OciError::io("set times of", &target, e))?;
            }
            tar::EntryType::Link => {
                let link = entry
                    .link_name_bytes()
                    .ok_or_else(|| self.unsafe_entry(&shown, "hard link without a target"))?
                    .into_owned();
                let link_components = split_archive_path(&link).ok_or_else(|| {
                    self.unsafe_entry(&shown, "hard link target has a `..` component")
                })?;
                let Some((link_name, link_parents)) = link_components.split_last() else {
                    return Err(self.unsafe_entry(&shown, "hard link to the root"));
                };
                let Some((link_parent, _)) = self.parent_dir(&shown, link_parents, false)? else {
                    return Err(self.unsafe_entry(&shown, "hard link target does not exist"));
                };
                let source = link_parent.join(OsStr::from_bytes(link_name));
                match fs::symlink_metadata(&source) {
                    Ok(meta) if meta.is_dir() => {
                        return Err(self.unsafe_entry(&shown, "hard link to a directory"));
                    }
                    Ok(_) => {}
                    Err(_) => {
                        return Err(self.unsafe_entry(&shown, "hard link target does not exist"));
                    }
                }
                if source != target {
                    remove_any(&target)?;
                    fs::hard_link(&source, &target)
                        .map_err(|e| OciError::io("create hard link", &target, e))?;
                }
            }
            _ => {
                // Regular file.
                remove_any(&target)?;
                let mut file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&target)
                    .map_err(|e| OciError::io("create", &target, e))?;
                io::copy(&mut entry, &mut file).map_err(|e| self.read_err(Some(&shown), e))?;
                drop(file);
                self.chown(&target, uid, gid, &shown)?;
                // After chown, which clears setuid and setgid bits.
                fs::set_permissions(&target, fs::Permissions::from_mode(mode))
                    .map_err(|e| OciError::io("set mode of", &target, e))?;
                filetime::set_symlink_file_times(&target, mtime, mtime)
                    .map_err(|e| OciError::io("set times of", &target, e))?;
            }
        }
        self.report.entries += 1;
        self.mark_written(rel);
        Ok(())
    }

    fn mark_written(&mut self, rel: PathBuf) {
        let mut path = rel.as_path();
        while !path.as_os_str().is_empty() {
            if !self.written.insert(path.to_path_buf()) {
                break;
            }
            match path.parent() {
                Some(p) => path = p,
                None => break,
            }
        }
    }

    fn chown(&self, path: &Path, uid: u64, gid: u64, shown: &str) -> Result<(), OciError> {
        if !self.opts.chown {
            return Ok(());
        }
        let shift = |id: u64| {
            u32::try_from(id)
                .ok()
                .and_then(|id| id.checked_add(self.opts.id_shift))
        };
        let (Some(uid), Some(gid)) = (shift(uid), shift(gid)) else {
            return Err(self.unsafe_entry(shown, "uid or gid out of range"));
        };
        std::os::unix::fs::lchown(path, Some(uid), Some(gid))
            .map_err(|e| OciError::io("change owner of", path, e))
    }

    /// Walks `parents` below the root without following symlinks, creating missing directories
    /// when `create` is set. Returns the absolute and root-relative path, or `None` when a
    /// directory is missing and `create` is unset.
    fn parent_dir(
        &mut self,
        shown: &str,
        parents: &[&[u8]],
        create: bool,
    ) -> Result<Option<(PathBuf, PathBuf)>, OciError> {
        let mut abs = self.root.to_path_buf();
        let mut rel = PathBuf::new();
        for component in parents {
            abs.push(OsStr::from_bytes(component));
            rel.push(OsStr::from_bytes(component));
            match fs::symlink_metadata(&abs) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(self.unsafe_entry(
                        shown,
                        format!(
                            "its parent {} is a symlink, which is never followed",
                            rel.display()
                        ),
                    ));
                }
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return Err(self.unsafe_entry(
                        shown,
                        format!("its parent {} is not a directory", rel.display()),
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    if !create {
                        return Ok(None);
                    }
                    create_dir(&abs)?;
                    fs::set_permissions(&abs, fs::Permissions::from_mode(0o755))
                        .map_err(|e| OciError::io("set mode of", &abs, e))?;
                    self.chown(&abs, 0, 0, shown)?;
                    self.mark_written(rel.clone());
                }
                Err(e) => return Err(OciError::io("inspect", &abs, e)),
            }
        }
        Ok(Some((abs, rel)))
    }

    /// Removes everything under `abs` that this layer did not write.
    fn opaque(&self, abs: &Path, rel: &Path) -> Result<(), OciError> {
        let entries = fs::read_dir(abs).map_err(|e| OciError::io("read directory", abs, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| OciError::io("read directory", abs, e))?;
            let child_abs = entry.path();
            let child_rel = rel.join(entry.file_name());
            if self.written.contains(&child_rel) {
                let is_dir = fs::symlink_metadata(&child_abs)
                    .map(|m| m.is_dir())
                    .map_err(|e| OciError::io("inspect", &child_abs, e))?;
                if is_dir {
                    self.opaque(&child_abs, &child_rel)?;
                }
            } else {
                remove_any(&child_abs)?;
            }
        }
        Ok(())
    }
}

/// Splits an archive path into its components, dropping empty and `.` ones. `None` when a
/// component is `..`.
pub(crate) fn split_archive_path(raw: &[u8]) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    for component in raw.split(|b| *b == b'/') {
        match component {
            b"" | b"." => {}
            b".." => return None,
            other => out.push(other),
        }
    }
    Some(out)
}

fn create_dir(path: &Path) -> Result<(), OciError> {
    fs::create_dir(path).map_err(|e| OciError::io("create directory", path, e))
}

/// Removes whatever is at `path` (file, symlink, or directory tree) without following symlinks.
fn remove_any(path: &Path) -> Result<(), OciError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {
            fs::remove_dir_all(path).map_err(|e| OciError::io("remove", path, e))
        }
        Ok(_) => fs::remove_file(path).map_err(|e| OciError::io("remove", path, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(OciError::io("inspect", path, e)),
    }
}

/// Makes the mount points the bundle needs, so the runtime never writes into a shared rootfs:
/// `/proc`, `/sys`, `/dev`, `/tmp`, `/run`, and empty `/etc/hosts`, `/etc/resolv.conf` and
/// `/etc/hostname` when the image has none. Existing entries (even symlinks) are left alone.
pub(crate) fn add_mount_points(root: &Path, opts: UnpackOptions) -> Result<(), OciError> {
    let owner = |path: &Path| -> Result<(), OciError> {
        if opts.chown {
            std::os::unix::fs::lchown(path, Some(opts.id_shift), Some(opts.id_shift))
                .map_err(|e| OciError::io("change owner of", path, e))?;
        }
        Ok(())
    };
    for (dir, mode) in [
        ("proc", 0o555),
        ("sys", 0o555),
        ("dev", 0o755),
        ("tmp", 0o1777),
        ("run", 0o755),
        ("etc", 0o755),
    ] {
        let path = root.join(dir);
        if fs::symlink_metadata(&path).is_err() {
            create_dir(&path)?;
            fs::set_permissions(&path, fs::Permissions::from_mode(mode))
                .map_err(|e| OciError::io("set mode of", &path, e))?;
            owner(&path)?;
        }
    }
    let etc = root.join("etc");
    if fs::symlink_metadata(&etc)
        .map(|m| m.is_dir())
        .unwrap_or(false)
    {
        for file in ["hosts", "resolv.conf", "hostname"] {
            let path = etc.join(file);
            if fs::symlink_metadata(&path).is_err() {
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .open(&path)
                    .map_err(|e| OciError::io("create", &path, e))?;
                owner(&path)?;
            }
        }
    }
    Ok(())
}

/// Whether this process can give files away (`lchown` to another uid): only root can.
pub(crate) fn running_as_root(probe: &Path) -> bool {
    fs::metadata(probe).map(|m| m.uid() == 0).unwrap_or(false)
}

/// A zstd decoder over any number of concatenated frames.
struct ZstdReader<R: BufRead> {
    state: ZstdState<R>,
}

enum ZstdState<R: BufRead> {
    Between(R),
    InFrame(Box<ruzstd::decoding::StreamingDecoder<R, ruzstd::decoding::FrameDecoder>>),
    Done,
}

impl<R: BufRead> ZstdReader<R> {
    fn new(inner: R) -> ZstdReader<R> {
        ZstdReader {
            state: ZstdState::Between(inner),
        }
    }
}

impl<R: BufRead> Read for ZstdReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match std::mem::replace(&mut self.state, ZstdState::Done) {
                ZstdState::Done => return Ok(0),
                ZstdState::Between(mut inner) => {
                    if inner.fill_buf()?.is_empty() {
                        return Ok(0);
                    }
                    let decoder = ruzstd::decoding::StreamingDecoder::new(inner)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                    self.state = ZstdState::InFrame(Box::new(decoder));
                }
                ZstdState::InFrame(mut decoder) => {
                    let n = decoder.read(buf)?;
                    if n > 0 {
                        self.state = ZstdState::InFrame(decoder);
                        return Ok(n);
                    }
                    self.state = ZstdState::Between(decoder.into_inner());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar of `(kind, path, link, data)` with paths written raw (`tar::Builder` refuses `..`,
    /// which these tests need): `testing::raw_tar`, as the crate's tests have `test-support`.
    fn tar_of(entries: &[(tar::EntryType, &str, &str, &str)]) -> Vec<u8> {
        let entries: Vec<(tar::EntryType, &str, &str, &[u8])> = entries
            .iter()
            .map(|(kind, path, link, data)| (*kind, *path, *link, data.as_bytes()))
            .collect();
        crate::testing::raw_tar(&entries).expect("a raw tar")
    }

    const OPTS: UnpackOptions = UnpackOptions {
        id_shift: 0,
        chown: false,
        plain_modes: false,
    };

    fn apply(
        root: &Path,
        entries: &[(tar::EntryType, &str, &str, &str)],
    ) -> Result<LayerReport, OciError> {
        apply_layer(
            root,
            tar_of(entries).as_slice(),
            &Digest::of(b"layer"),
            OPTS,
        )
    }

    use tar::EntryType::{
        Block, Char, Directory as D, Fifo, Link as H, Regular as F, Symlink as S,
    };

    #[test]
    fn files_dirs_links_and_modes() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let report = apply(
            root,
            &[
                (D, "./etc/", "", ""),
                (F, "./etc/passwd", "", "root:x:0:0::/root:/bin/sh\n"),
                (F, "/abs/file", "", "abs"),
                (S, "etc/link", "/etc/passwd", ""),
                (H, "etc/hard", "etc/passwd", ""),
                (Fifo, "fifo", "", ""),
            ],
        )
        .expect("apply");
        assert_eq!(
            fs::read_to_string(root.join("abs/file")).ok().as_deref(),
            Some("abs")
        );
        assert_eq!(
            fs::read_link(root.join("etc/link")).ok(),
            Some(PathBuf::from("/etc/passwd"))
        );
        assert_eq!(
            fs::metadata(root.join("etc/hard")).map(|m| m.nlink()).ok(),
            Some(2)
        );
        assert_eq!(
            fs::metadata(root.join("etc/passwd"))
                .map(|m| m.mode() & 0o7777)
                .ok(),
            Some(0o644)
        );
        assert_eq!(report.skipped, ["fifo: fifo"]);
    }

    #[test]
    fn whiteouts_and_opaque_directories() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        apply(
            root,
            &[
                (F, "keep", "", "1"),
                (F, "gone", "", "1"),
                (F, "d/old", "", "1"),
                (F, "d/sub/old", "", "1"),
                (F, "o/old", "", "1"),
            ],
        )
        .expect("lower");
        apply(
            root,
            &[
                (F, ".wh.gone", "", ""),
                (F, "d/sub/new", "", "2"),
                (F, "d/.wh..wh..opq", "", ""),
                (F, "d/new", "", "2"),
                (F, "o/.wh.old", "", ""),
                (F, "missing/.wh.x", "", ""),
            ],
        )
        .expect("upper");
        assert!(root.join("keep").exists());
        assert!(!root.join("gone").exists());
        assert!(!root.join("d/old").exists());
        assert!(
            !root.join("d/sub/old").exists(),
            "opaque hides lower content in kept subdirs"
        );
        assert!(
            root.join("d/sub/new").exists(),
            "opaque keeps what the same layer wrote before it"
        );
        assert!(root.join("d/new").exists());
        assert!(root.join("o").is_dir() && !root.join("o/old").exists());
        assert!(!root.join("missing").exists());
        assert!(!root.join("d/.wh..wh..opq").exists());
    }

    #[test]
    fn refuses_escapes_and_devices() {
        for (entries, why) in [
            (vec![(F, "../escape", "", "x")], "`..`"),
            (vec![(F, "a/../../escape", "", "x")], "`..`"),
            (
                vec![(S, "evil", "/", ""), (F, "evil/tmp/x", "", "x")],
                "symlink",
            ),
            (
                vec![(S, "evil", "../..", ""), (D, "evil/d", "", "")],
                "symlink",
            ),
            (
                vec![
                    (S, "inner", "d", ""),
                    (D, "d", "", ""),
                    (F, "inner/x", "", ""),
                ],
                "symlink",
            ),
            (vec![(H, "h", "../../etc/passwd", "")], "`..`"),
            (
                vec![(S, "l", "/etc", ""), (H, "h", "l/passwd", "")],
                "symlink",
            ),
            (vec![(H, "h", "nothing", "")], "does not exist"),
            (vec![(Char, "dev/null", "", "")], "device"),
            (vec![(Block, "sda", "", "")], "device"),
        ] {
            let tmp = tempfile::tempdir().expect("tempdir");
            let root = tmp.path().join("root");
            fs::create_dir(&root).expect("root");
            let err = apply(&root, &entries).expect_err("must be refused");
            let msg = err.to_string();
            assert!(matches!(err, OciError::UnsafeEntry { .. }), "{msg}");
            assert!(msg.contains(why), "{msg} does not say {why}");
            let outside: Vec<_> = fs::read_dir(tmp.path()).expect("ls").collect();
            assert_eq!(outside.len(), 1, "something was written beside the root");
        }
    }

    #[test]
    fn a_file_replaces_a_symlink_instead_of_writing_through_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("root");
        fs::create_dir(&root).expect("root");
        let victim = tmp.path().join("victim");
        fs::write(&victim, "safe").expect("victim");
        let link = victim.to_string_lossy().into_owned();
        apply(&root, &[(S, "f", &link, ""), (F, "f", "", "overwritten")]).expect("apply");
        assert_eq!(fs::read_to_string(&victim).ok().as_deref(), Some("safe"));
        assert_eq!(
            fs::read_to_string(root.join("f")).ok().as_deref(),
            Some("overwritten")
        );
    }

    #[test]
    fn deferred_directory_modes_never_follow_a_later_symlink() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        fs::create_dir(&root).expect("root");
        fs::create_dir_all(outside.join("y")).expect("outside");
        for p in ["", "y"] {
            fs::set_permissions(outside.join(p), fs::Permissions::from_mode(0o700)).expect("chmod");
        }
        let target = outside.to_string_lossy().into_owned();
        // A directory entry, then a symlink replacing it (or its parent) in the same layer: the
        // directory's mode, applied at the end of the layer, must not land on the target.
        let _ = apply(&root, &[(D, "a/", "", ""), (S, "a", &target, "")]);
        let _ = apply(
            &root,
            &[
                (D, "x/", "", ""),
                (D, "x/y/", "", ""),
                (S, "x", &target, ""),
            ],
        );
        for p in ["", "y"] {
            let mode = fs::metadata(outside.join(p))
                .map(|m| m.mode() & 0o7777)
                .ok();
            assert_eq!(mode, Some(0o700), "mode of outside/{p} changed");
        }
    }

    #[test]
    fn zstd_multi_frame_and_digests() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let tar = tar_of(&[(F, "a", "", "hello")]);
        // Two frames: the tar split in the middle.
        let (first, second) = tar.split_at(700);
        let mut blob =
            ruzstd::encoding::compress_to_vec(first, ruzstd::encoding::CompressionLevel::Fastest);
        blob.extend(ruzstd::encoding::compress_to_vec(
            second,
            ruzstd::encoding::CompressionLevel::Fastest,
        ));
        let path = tmp.path().join("blob");
        fs::write(&path, &blob).expect("write");
        let root = tmp.path().join("root");
        fs::create_dir(&root).expect("root");
        let digest = Digest::of(&blob);
        apply_layer_file(
            &root,
            &path,
            Compression::Zstd,
            &digest,
            Some(&Digest::of(&tar)),
            OPTS,
        )
        .expect("apply");
        assert_eq!(
            fs::read_to_string(root.join("a")).ok().as_deref(),
            Some("hello")
        );
        let wrong = Digest::of(b"other");
        let err = apply_layer_file(&root, &path, Compression::Zstd, &digest, Some(&wrong), OPTS);
        assert!(matches!(
            err,
            Err(OciError::DigestMismatch {
                kind: BlobKind::UncompressedLayer,
                ..
            })
        ));
        let err = apply_layer_file(&root, &path, Compression::Zstd, &wrong, None, OPTS);
        assert!(matches!(
            err,
            Err(OciError::DigestMismatch {
                kind: BlobKind::Layer,
                ..
            })
        ));
    }

    mod property {
        use super::*;
        use proptest::prelude::*;

        fn component() -> impl Strategy<Value = String> {
            prop_oneof![
                4 => Just("a".to_string()),
                4 => Just("b".to_string()),
                1 => Just("..".to_string()),
                1 => Just(".".to_string()),
                1 => Just("".to_string()),
                1 => Just(".wh.a".to_string()),
                1 => Just(".wh..wh..opq".to_string()),
            ]
        }

        fn path() -> impl Strategy<Value = String> {
            (any::<bool>(), prop::collection::vec(component(), 1..4)).prop_map(|(abs, parts)| {
                let joined = parts.join("/");
                if abs { format!("/{joined}") } else { joined }
            })
        }

        /// Link targets: mostly ones that lead out of the root (`OUT` becomes the absolute
        /// path of a directory beside it), some inside it.
        fn target() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("OUT".to_string()),
                Just("OUT/a".to_string()),
                Just("/".to_string()),
                Just("..".to_string()),
                Just("../../OUT".to_string()),
                Just("../../../../../../../../..".to_string()),
                path(),
            ]
        }

        fn kind() -> impl Strategy<Value = tar::EntryType> {
            prop_oneof![
                3 => Just(F),
                2 => Just(D),
                3 => Just(S),
                2 => Just(H),
                1 => Just(Char),
                1 => Just(Fifo),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
            /// Whatever the entries, nothing appears outside the root, and nothing panics.
            #[test]
            fn never_writes_outside_the_root(
                entries in prop::collection::vec((kind(), path(), target()), 1..10)
            ) {
                let tmp = tempfile::tempdir().expect("tempdir");
                let root = tmp.path().join("root");
                let outside = tmp.path().join("OUT");
                fs::create_dir(&root).expect("root");
                fs::create_dir(&outside).expect("outside");
                fs::create_dir(outside.join("a")).expect("outside/a");
                fs::write(outside.join("a/b"), "victim").expect("outside/a/b");
                for (p, mode) in [("", 0o700), ("a", 0o700), ("a/b", 0o600)] {
                    fs::set_permissions(outside.join(p), fs::Permissions::from_mode(mode)).expect("chmod");
                    filetime::set_file_mtime(outside.join(p), filetime::FileTime::from_unix_time(1, 0)).expect("mtime");
                }
                let snapshot = || -> Vec<(u32, i64, u32, u32)> {
                    ["", "a", "a/b"].iter().map(|p| {
                        let m = fs::symlink_metadata(outside.join(p)).expect("stat outside");
                        (m.mode(), m.mtime(), m.uid(), m.gid())
                    }).collect()
                };
                let before = snapshot();
                let outside_str = outside.to_string_lossy().into_owned();
                let entries: Vec<(tar::EntryType, String, String, String)> = entries
                    .into_iter()
                    .map(|(k, p, l)| {
                        // Links aimed at the real outside directory, by absolute path and by `..`.
                        let l = l.replace("OUT", &outside_str);
                        (k, p, l, "data".to_string())
                    })
                    .collect();
                let refs: Vec<(tar::EntryType, &str, &str, &str)> =
                    entries.iter().map(|(k, p, l, d)| (*k, p.as_str(), l.as_str(), d.as_str())).collect();
                // The whole layer, then only the entries that are not refused on sight (so the
                // rest of a layer gets applied, deferred directory modes included).
                let plausible: Vec<_> = refs
                    .iter()
                    .copied()
                    .filter(|(k, p, l, _)| {
                        *k != Char
                            && !p.split('/').any(|c| c == "..")
                            && !(*k == H && l.split('/').any(|c| c == ".."))
                    })
                    .collect();
                let _ = apply(&root, &refs);
                let _ = apply(&root, &plausible);
                let _ = apply(&root, &plausible);
                let beside: Vec<_> = fs::read_dir(tmp.path()).expect("ls").filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
                prop_assert_eq!(beside.len(), 2);
                prop_assert_eq!(fs::read_dir(&outside).expect("ls").count(), 1);
                prop_assert_eq!(fs::read_dir(outside.join("a")).expect("ls").count(), 1);
                prop_assert_eq!(fs::read_to_string(outside.join("a/b")).expect("victim"), "victim");
                prop_assert_eq!(snapshot(), before, "modes, times or owners changed outside the root");
            }
        }
    }
}
