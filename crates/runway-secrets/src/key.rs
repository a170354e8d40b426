//! The master key file: 32 random bytes, readable by its owner only (or its own group).
//!
//! The file holds the raw key and nothing else. It is created once, atomically: the key is
//! written to a temporary file beside it (created with `O_EXCL` and mode 0600, then fsynced),
//! which is then hard-linked to the key's path. A link never replaces an existing file, so
//! when two processes start at once on an empty directory one of them wins, the other finds
//! the winner's key and uses it: both end with the same key. The temporary file is removed
//! and the directory fsynced, so a crash leaves either no key or a whole one, never a
//! partial key under the real name. The file system must support hard links (every local
//! Linux file system does).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use zeroize::Zeroize;

use crate::error::Error;
use crate::random_bytes;

/// A master key's length in bytes (XChaCha20-Poly1305's key size).
pub const KEY_LEN: usize = 32;

/// The mode a key file is created with, and the most it may have when loaded.
const KEY_MODE: u32 = 0o600;

/// Whether a key file with `mode`, of group `gid`, is readable by its owner only, or also
/// by this process's own group: a Kubernetes Secret is mounted for a pod that runs as no
/// root with mode 0440, owned by root and the pod's `fsGroup`, the only way such a pod can
/// read it. Others never, and the group never writes.
fn private_enough(mode: u32, gid: u32) -> bool {
    mode & 0o077 == 0 || (mode & 0o037 == 0 && gid == nix::unistd::getegid().as_raw())
}

/// The key that seals every secret. Wiped from memory when dropped; never printed.
pub struct MasterKey {
    bytes: [u8; KEY_LEN],
}

impl MasterKey {
    /// Loads the key at `path`, or creates it there when no file exists, and says whether it
    /// was created (`true`) or loaded (`false`).
    ///
    /// The directory must exist. Creation is atomic and safe against a concurrent creator:
    /// see the module's documentation.
    ///
    /// # Errors
    /// The file cannot be read or written; it exists with the wrong length, is not a regular
    /// file, or can be read by group or others ([`Error::KeyPermissions`] names the mode and
    /// the `chmod 600` that fixes it); the OS gives no random numbers.
    pub fn load_or_create(path: impl AsRef<Path>) -> Result<(MasterKey, bool), Error> {
        let path = path.as_ref();
        match MasterKey::load(path) {
            Ok(key) => return Ok((key, false)),
            Err(Error::KeyIo { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let key = MasterKey::generate()?;
        if create_exclusive(path, &key.bytes)? {
            Ok((key, true))
        } else {
            // Another process created it between our look and our link: use theirs.
            Ok((MasterKey::load(path)?, false))
        }
    }

    /// Loads the key at `path`.
    ///
    /// # Errors
    /// As [`MasterKey::load_or_create`], and the file not existing ([`Error::KeyIo`] with
    /// [`io::ErrorKind::NotFound`]).
    pub fn load(path: impl AsRef<Path>) -> Result<MasterKey, Error> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::key_io("open key file", path, e))?;
        // Checked on the open file, so what is checked is what is read.
        let meta = file
            .metadata()
            .map_err(|e| Error::key_io("read the metadata of key file", path, e))?;
        if !meta.is_file() {
            return Err(Error::KeyNotAFile {
                path: path.to_owned(),
            });
        }
        let mode = meta.permissions().mode() & 0o7777;
        if !private_enough(mode, meta.gid()) {
            return Err(Error::KeyPermissions {
                path: path.to_owned(),
                mode,
            });
        }
        if meta.len() != KEY_LEN as u64 {
            return Err(Error::KeyLength {
                path: path.to_owned(),
                len: meta.len(),
                expected: KEY_LEN,
            });
        }
        // One byte more than a key, to notice a file that grew since the check above.
        let mut buf = Vec::with_capacity(KEY_LEN + 1);
        let read = file
            .take(KEY_LEN as u64 + 1)
            .read_to_end(&mut buf)
            .map_err(|e| Error::key_io("read key file", path, e));
        let result = match read {
            Ok(_) => match <[u8; KEY_LEN]>::try_from(buf.as_slice()) {
                Ok(bytes) => Ok(MasterKey { bytes }),
                Err(_) => Err(Error::KeyLength {
                    path: path.to_owned(),
                    len: buf.len() as u64,
                    expected: KEY_LEN,
                }),
            },
            Err(e) => Err(e),
        };
        buf.zeroize();
        result
    }

    /// A new random key, in memory only (for tests, or a caller that stores it elsewhere).
    ///
    /// # Errors
    /// The OS gives no random numbers.
    pub fn generate() -> Result<MasterKey, Error> {
        Ok(MasterKey {
            bytes: random_bytes()?,
        })
    }

    /// A key from its bytes (for tests, or a key kept outside a file).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> MasterKey {
        MasterKey { bytes }
    }

    pub(crate) fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.bytes
    }
}

impl Drop for MasterKey {
    fn drop(&mut self) {
        self.bytes.zeroize();
    }
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MasterKey(<redacted>)")
    }
}

/// Writes `bytes` to `path` unless something is already there. `Ok(true)`: written;
/// `Ok(false)`: a file was already there and is left as it was.
fn create_exclusive(path: &Path, bytes: &[u8]) -> Result<bool, Error> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "key".to_owned());
    let tag: [u8; 8] = random_bytes()?;
    let tmp = dir.join(format!(
        ".{file_name}.{}.{:016x}.tmp",
        std::process::id(),
        u64::from_le_bytes(tag)
    ));

    let written = write_new(&tmp, bytes);
    let linked = written.and_then(|()| match fs::hard_link(&tmp, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(Error::key_io("link the new key to", path, e)),
    });
    // The temporary name is ours alone (created with O_EXCL); remove it whatever happened.
    let removed = fs::remove_file(&tmp);
    let created = linked?;
    match removed {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::key_io("remove temporary key file", tmp, e)),
    }
    if created {
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::key_io("sync directory", &dir, e))?;
    }
    Ok(created)
}

/// Creates `tmp` (it must not exist) with mode 0600, writes `bytes` and fsyncs it.
fn write_new(tmp: &Path, bytes: &[u8]) -> Result<(), Error> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(KEY_MODE)
        .open(tmp)
        .map_err(|e| Error::key_io("create temporary key file", tmp, e))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::key_io("write temporary key file", tmp, e))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use super::*;

    fn mode_of(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn creates_then_loads_the_same_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.key");
        let (first, created) = MasterKey::load_or_create(&path).unwrap();
        assert!(created);
        assert_eq!(fs::read(&path).unwrap().len(), KEY_LEN);
        assert_eq!(mode_of(&path), 0o600);
        let (second, created) = MasterKey::load_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(first.as_bytes(), second.as_bytes());
        // Only the key is left in the directory.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("master.key")]);
    }

    #[test]
    fn two_keys_differ() {
        let a = MasterKey::generate().unwrap();
        let b = MasterKey::generate().unwrap();
        assert_ne!(a.as_bytes(), b.as_bytes());
    }

    #[test]
    fn concurrent_creators_end_with_one_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = Arc::new(dir.path().join("master.key"));
        let n = 16;
        let barrier = Arc::new(Barrier::new(n));
        let handles: Vec<_> = (0..n)
            .map(|_| {
                let path = Arc::clone(&path);
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    let (key, created) = MasterKey::load_or_create(path.as_path()).unwrap();
                    (*key.as_bytes(), created)
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(results.iter().filter(|(_, created)| *created).count(), 1);
        let on_disk = fs::read(path.as_path()).unwrap();
        assert!(results.iter().all(|(key, _)| key.as_slice() == on_disk));
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "temporary files left"
        );
    }

    #[test]
    fn refuses_a_key_others_can_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.key");
        MasterKey::load_or_create(&path).unwrap();
        for mode in [0o644, 0o604, 0o660, 0o460] {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            let err = MasterKey::load_or_create(&path).unwrap_err();
            assert!(
                matches!(err, Error::KeyPermissions { mode: m, .. } if m == mode),
                "{err}"
            );
            let msg = err.to_string();
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(msg.contains(&format!("{mode:04o}")), "{msg}");
            assert!(
                msg.contains(&format!("chmod 600 {}", path.display())),
                "{msg}"
            );
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(0o400)).unwrap();
        MasterKey::load(&path).unwrap();
        // Read by this process's own group too, as a Secret mounted for a pod's fsGroup is.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o440)).unwrap();
        MasterKey::load(&path).unwrap();
    }

    #[test]
    fn refuses_a_key_another_group_can_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.key");
        MasterKey::load_or_create(&path).unwrap();
        let other = nix::unistd::Gid::from_raw(nix::unistd::getegid().as_raw() ^ 1);
        if nix::unistd::chown(&path, None, Some(other)).is_err() {
            // Only root, or a member of the other group, may give the file to it.
            #[allow(clippy::print_stderr, reason = "a test's skip")]
            {
                eprintln!("skipped: cannot give the key file to another group");
            }
            return;
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(0o440)).unwrap();
        let err = MasterKey::load(&path).unwrap_err();
        assert!(
            matches!(err, Error::KeyPermissions { mode: 0o440, .. }),
            "{err}"
        );
    }

    #[test]
    fn refuses_the_wrong_length() {
        let dir = tempfile::tempdir().unwrap();
        for len in [0, 16, 31, 33, 64] {
            let path = dir.path().join(format!("key{len}"));
            write_new(&path, &vec![7u8; len]).unwrap();
            let err = MasterKey::load_or_create(&path).unwrap_err();
            assert!(
                matches!(err, Error::KeyLength { len: l, .. } if l == len as u64),
                "{err}"
            );
            assert!(err.to_string().contains(&path.display().to_string()));
            // Never replaced.
            assert_eq!(fs::read(&path).unwrap().len(), len);
        }
    }

    #[test]
    fn refuses_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        fs::create_dir(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
        let err = MasterKey::load_or_create(&path).unwrap_err();
        assert!(matches!(err, Error::KeyNotAFile { .. }), "{err}");
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope").join("master.key");
        let err = MasterKey::load_or_create(&path).unwrap_err();
        assert!(matches!(err, Error::KeyIo { .. }), "{err}");
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn debug_never_shows_the_key() {
        let key = MasterKey::from_bytes([0xab; KEY_LEN]);
        assert_eq!(format!("{key:?}"), "MasterKey(<redacted>)");
        assert_eq!(format!("{key:#?}"), "MasterKey(<redacted>)");
    }
}
