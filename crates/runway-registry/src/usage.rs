//! How much of the disk the registry holds, kept in counters: the content store's bytes (blobs
//! and manifests in `blobs/sha256`) and the bytes of writes on their way there (uploads in
//! progress, files being copied or written in `tmp/`). The counters are set by one walk at
//! [`Registry::open`](crate::Registry::open) and kept current by every write, delete and
//! collection since; [`Limits::max_total_bytes`](crate::Limits::max_total_bytes) is checked
//! against them before a byte is written.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::RegistryError;

/// The registry's disk use, from [`Registry::usage`](crate::Registry::usage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Bytes of the content store (`blobs/sha256`) plus those of uploads and copies in
    /// progress: what [`Limits::max_total_bytes`](crate::Limits::max_total_bytes) bounds.
    pub bytes: u64,
    /// Files in the content store (blobs and manifests, each stored once).
    pub blobs: u64,
    /// The bound, when there is one.
    pub max_bytes: Option<u64>,
}

/// The counters behind [`Usage`].
#[derive(Debug)]
pub(crate) struct Space {
    max: Option<u64>,
    /// Content plus reservations.
    bytes: AtomicU64,
    blobs: AtomicU64,
}

impl Space {
    /// Counts what is in `blobs` (the content store): one walk, at open.
    pub(crate) fn measure(blobs: &Path, max: Option<u64>) -> Result<Space, RegistryError> {
        let mut bytes: u64 = 0;
        let mut count: u64 = 0;
        let entries = std::fs::read_dir(blobs).map_err(RegistryError::io("listing", blobs))?;
        for entry in entries {
            let entry = entry.map_err(RegistryError::io("listing", blobs))?;
            let path = entry.path();
            let meta = match entry.metadata() {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(RegistryError::io("reading the size of", path)(e)),
            };
            if meta.is_file() {
                bytes = bytes.saturating_add(meta.len());
                count += 1;
            }
        }
        Ok(Space {
            max,
            bytes: AtomicU64::new(bytes),
            blobs: AtomicU64::new(count),
        })
    }

    pub(crate) fn usage(&self) -> Usage {
        Usage {
            bytes: self.bytes.load(Ordering::Acquire),
            blobs: self.blobs.load(Ordering::Acquire),
            max_bytes: self.max,
        }
    }

    /// `Full` when `n` more bytes would go past the bound; reserves nothing.
    pub(crate) fn check(&self, n: u64) -> Result<(), RegistryError> {
        let used = self.bytes.load(Ordering::Acquire);
        match self.max {
            Some(limit) if used.saturating_add(n) > limit => Err(RegistryError::Full {
                used,
                needed: n,
                limit,
            }),
            _ => Ok(()),
        }
    }

    /// Reserves `n` bytes about to be written, or `Full` (reserving nothing) when they would go
    /// past the bound. Each reservation is [`release`](Self::release)d when its bytes are
    /// removed, or stays as the content they became.
    pub(crate) fn reserve(&self, n: u64) -> Result<(), RegistryError> {
        let Some(limit) = self.max else {
            self.bytes.fetch_add(n, Ordering::AcqRel);
            return Ok(());
        };
        self.bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= limit)
            })
            .map(|_| ())
            .map_err(|used| RegistryError::Full {
                used,
                needed: n,
                limit,
            })
    }

    /// Gives back `n` reserved or stored bytes that are gone from the disk.
    pub(crate) fn release(&self, n: u64) {
        let _ = self
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(n))
            });
    }

    /// A reservation became a new file of the content store.
    pub(crate) fn stored(&self) {
        self.blobs.fetch_add(1, Ordering::AcqRel);
    }

    /// A file of `size` bytes left the content store.
    pub(crate) fn removed(&self, size: u64) {
        self.release(size);
        let _ = self
            .blobs
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(1))
            });
    }
}

/// Bytes reserved for a file on its way into the content store. Dropped (an error, or a caller
/// that went away) it releases them and removes the file; [`Pending::stored`] keeps them as the
/// stored content's.
#[derive(Debug)]
pub(crate) struct Pending {
    space: Arc<Space>,
    bytes: u64,
    file: Option<PathBuf>,
}

impl Pending {
    /// Reserves `bytes`, or `Full`.
    pub(crate) fn reserve(space: &Arc<Space>, bytes: u64) -> Result<Pending, RegistryError> {
        space.reserve(bytes)?;
        Ok(Pending::adopt(space, bytes, None))
    }

    /// Takes over `bytes` reserved already (an upload's), and `file`, which holds them.
    pub(crate) fn adopt(space: &Arc<Space>, bytes: u64, file: Option<PathBuf>) -> Pending {
        Pending {
            space: space.clone(),
            bytes,
            file,
        }
    }

    /// The file that holds the bytes, removed if they are not stored.
    pub(crate) fn hold(&mut self, file: PathBuf) {
        self.file = Some(file);
    }

    /// Makes the reservation `bytes` (the file's size turned out to differ), or `Full`.
    pub(crate) fn resize(&mut self, bytes: u64) -> Result<(), RegistryError> {
        if bytes > self.bytes {
            self.space.reserve(bytes - self.bytes)?;
        } else {
            self.space.release(self.bytes - bytes);
        }
        self.bytes = bytes;
        Ok(())
    }

    /// The file became content: its bytes stay counted, and it is not removed.
    fn stored(mut self) {
        self.space.stored();
        self.bytes = 0;
        self.file = None;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.space.release(self.bytes);
        if let Some(file) = self.file.take() {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// Moves the file `pending` holds into the content store at `to`, unless content is there
/// already (then it is dropped: one digest is stored, and counted, once). Blocking; run with
/// the registry's commit lock held, so that "is it there?" stays true until the rename.
pub(crate) fn commit_file(pending: Pending, to: &Path) -> Result<(), RegistryError> {
    let Some(from) = pending.file.clone() else {
        return Err(RegistryError::Io {
            operation: "committing a file that was never written into",
            path: to.to_path_buf(),
            source: std::io::Error::other("no file"),
        });
    };
    match std::fs::symlink_metadata(to) {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(RegistryError::io("checking", to)(e)),
    }
    std::fs::rename(&from, to).map_err(RegistryError::io("renaming into", to))?;
    pending.stored();
    Ok(())
}
