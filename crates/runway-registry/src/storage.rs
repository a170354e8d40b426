//! The registry on disk: content-addressed blobs, and per repository the links that say which
//! blobs and manifests it may read, its tags and its referrers. Every write goes to `tmp/` (or
//! `uploads/`) and is renamed into place, so nothing half-written is ever visible.

use std::collections::HashMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use runway_oci::Digest;
use sha2::{Digest as _, Sha256};
use tokio::sync::OwnedRwLockReadGuard;

use crate::error::RegistryError;
use crate::manifest::{self, ReferrerDescriptor};
use crate::name::{Reference, Repository, Tag};
use crate::upload::Session;
use crate::usage::{Pending, Space, Usage, commit_file};

/// Bounds on what the registry accepts.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest blob accepted, in bytes (a larger upload is refused and its bytes removed).
    pub max_blob_bytes: u64,
    /// The largest manifest accepted, in bytes (4 MiB, as the spec suggests).
    pub max_manifest_bytes: usize,
    /// An upload untouched this long is forgotten and its bytes removed.
    pub upload_idle_timeout: Duration,
    /// Uploads in progress at once, over all repositories.
    pub max_uploads: usize,
    /// The most tags one `tags/list` answer holds (a larger `n` is lowered to this).
    pub max_tags_page: usize,
    /// The most bytes the content store (`blobs/sha256`) and the uploads in progress may hold
    /// together; `None`, the default, bounds them only by the disk. A write that would go past
    /// it (an upload's chunk, [`Registry::put_blob`], a new manifest) is refused with
    /// [`RegistryError::Full`] (`507` over HTTP) and leaves nothing.
    pub max_total_bytes: Option<u64>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_blob_bytes: 16 << 30,
            max_manifest_bytes: 4 << 20,
            upload_idle_timeout: Duration::from_secs(15 * 60),
            max_uploads: 1024,
            max_tags_page: 10_000,
            max_total_bytes: None,
        }
    }
}

/// An OCI registry's storage in a directory. Cheap to share in an `Arc`; every method takes
/// `&self`.
#[derive(Debug)]
pub struct Registry {
    pub(crate) root: PathBuf,
    pub(crate) limits: Limits,
    /// Upload sessions by id. Held only to look up, insert or remove; never across an await.
    pub(crate) uploads: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Session>>>>,
    /// Writes that create links hold it shared; [`Registry::collect`] holds it exclusively for
    /// its mark and sweep, so nothing is linked to content while it decides what is unlinked.
    /// In an `Arc` so that a pass's blocking task keeps it even when its caller goes away.
    pub(crate) gc: Arc<tokio::sync::RwLock<()>>,
    /// Held from "is this content stored?" to its rename into the store, so that two writes
    /// of one digest store (and count) it once.
    commit: Arc<tokio::sync::Mutex<()>>,
    /// Disk use, against [`Limits::max_total_bytes`].
    pub(crate) space: Arc<Space>,
}

/// A manifest as stored.
#[derive(Debug, Clone)]
pub struct StoredManifest {
    /// Its digest.
    pub digest: Digest,
    /// Its media type (the `Content-Type` it was pushed with).
    pub media_type: String,
    /// Its bytes.
    pub bytes: Bytes,
}

/// A manifest stored by [`Registry::put_manifest`].
#[derive(Debug, Clone)]
pub(crate) struct PutManifest {
    pub(crate) digest: Digest,
    pub(crate) subject: Option<Digest>,
}

const DIR_MODE: u32 = 0o700;

impl Registry {
    /// Opens (creating) the registry in `root`. Uploads left by an earlier process are removed:
    /// sessions live in memory, so they cannot be resumed.
    pub fn open(root: &Path, limits: Limits) -> Result<Registry, RegistryError> {
        for dir in ["blobs/sha256", "repositories", "uploads", "tmp"] {
            let path = root.join(dir);
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode_private()
                .create(&path)
                .map_err(RegistryError::io("creating", &path))?;
        }
        for dir in ["uploads", "tmp"] {
            let path = root.join(dir);
            let entries = std::fs::read_dir(&path).map_err(RegistryError::io("listing", &path))?;
            for entry in entries {
                let entry = entry.map_err(RegistryError::io("listing", &path))?;
                let stale = entry.path();
                let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    std::fs::remove_dir_all(&stale)
                } else {
                    std::fs::remove_file(&stale)
                };
                removed.map_err(RegistryError::io("removing a stale upload", &stale))?;
            }
        }
        let space = Space::measure(&root.join("blobs/sha256"), limits.max_total_bytes)?;
        Ok(Registry {
            root: root.to_path_buf(),
            limits,
            uploads: Mutex::new(HashMap::new()),
            gc: Arc::new(tokio::sync::RwLock::new(())),
            commit: Arc::new(tokio::sync::Mutex::new(())),
            space: Arc::new(space),
        })
    }

    /// The limits it was opened with.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// How much the content store and the uploads in progress hold now.
    pub fn usage(&self) -> Usage {
        self.space.usage()
    }

    // ---- paths -------------------------------------------------------------------------

    pub(crate) fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.root.join("blobs/sha256").join(digest.hex())
    }

    fn repository_dir(&self, repository: &Repository) -> PathBuf {
        self.root
            .join("repositories")
            .join(repository.relative_path())
    }

    fn blob_link(&self, repository: &Repository, digest: &Digest) -> PathBuf {
        self.repository_dir(repository)
            .join("_blobs/sha256")
            .join(digest.hex())
    }

    fn manifest_link(&self, repository: &Repository, digest: &Digest) -> PathBuf {
        self.repository_dir(repository)
            .join("_manifests/sha256")
            .join(digest.hex())
    }

    fn tags_dir(&self, repository: &Repository) -> PathBuf {
        self.repository_dir(repository).join("_tags")
    }

    fn referrers_dir(&self, repository: &Repository, subject: &Digest) -> PathBuf {
        self.repository_dir(repository)
            .join("_referrers/sha256")
            .join(subject.hex())
    }

    pub(crate) fn tmp_path(&self) -> Result<PathBuf, RegistryError> {
        Ok(self.root.join("tmp").join(random_id()?))
    }

    pub(crate) fn upload_path(&self, id: &str) -> PathBuf {
        self.root.join("uploads").join(id)
    }

    // ---- small atomic writes ----------------------------------------------------------

    /// Writes `bytes` to `path` through a file in `tmp/` renamed into place.
    async fn write_atomic(&self, path: &Path, bytes: &[u8]) -> Result<(), RegistryError> {
        let tmp = self.tmp_path()?;
        if let Err(e) = tokio::fs::write(&tmp, bytes).await {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(RegistryError::io("writing", &tmp)(e));
        }
        self.rename_into_place(&tmp, path).await
    }

    /// Renames `from` to `to`, creating `to`'s parents; `from` is removed when that fails.
    pub(crate) async fn rename_into_place(
        &self,
        from: &Path,
        to: &Path,
    ) -> Result<(), RegistryError> {
        let result = async {
            if let Some(parent) = to.parent() {
                create_dir_all(parent).await?;
            }
            tokio::fs::rename(from, to)
                .await
                .map_err(RegistryError::io("renaming into", to))
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(from).await;
        }
        result
    }

    // ---- blobs ------------------------------------------------------------------------

    /// Whether `digest` is linked in `repository` (as a blob or a manifest) and on disk: what
    /// a `GET` of the blob in that repository may read. Returns its size.
    pub(crate) async fn linked_blob_size(
        &self,
        repository: &Repository,
        digest: &Digest,
    ) -> Option<u64> {
        let linked = exists(&self.blob_link(repository, digest)).await
            || exists(&self.manifest_link(repository, digest)).await;
        if !linked {
            return None;
        }
        let meta = tokio::fs::metadata(self.blob_path(digest)).await.ok()?;
        meta.is_file().then_some(meta.len())
    }

    pub(crate) async fn link_blob(
        &self,
        repository: &Repository,
        digest: &Digest,
    ) -> Result<(), RegistryError> {
        self.write_atomic(&self.blob_link(repository, digest), b"")
            .await
    }

    /// Moves a verified file, which `pending` holds, into the content store (dropping it when
    /// the blob is there already) and links it in `repository`. Its bytes' reservation becomes
    /// the stored blob's or is released, even when the caller goes away midway.
    pub(crate) async fn commit_blob(
        &self,
        repository: &Repository,
        pending: Pending,
        digest: &Digest,
    ) -> Result<(), RegistryError> {
        let gc = self.gc.clone().read_owned().await;
        let gc = self.commit_content(gc, pending, digest).await?;
        let linked = self.link_blob(repository, digest).await;
        drop(gc);
        linked
    }

    /// Commits `pending`'s file as content `digest` ([`commit_file`]) in a blocking task that
    /// holds the commit lock and `gc`, and so finishes (its accounting too) whatever becomes of
    /// its caller. Gives `gc` back for the link that follows.
    async fn commit_content(
        &self,
        gc: OwnedRwLockReadGuard<()>,
        pending: Pending,
        digest: &Digest,
    ) -> Result<OwnedRwLockReadGuard<()>, RegistryError> {
        let commit = self.commit.clone().lock_owned().await;
        let to = self.blob_path(digest);
        let failed = to.clone();
        let (gc, committed) = tokio::task::spawn_blocking(move || {
            let committed = commit_file(pending, &to);
            drop(commit);
            (gc, committed)
        })
        .await
        .map_err(|e| RegistryError::Io {
            operation: "storing",
            path: failed,
            source: io::Error::other(e),
        })?;
        committed.map(|()| gc)
    }

    /// Links `digest` in `target` when `from` may read it: a cross-repository mount. `false`
    /// when `from` has no such blob.
    pub(crate) async fn mount_blob(
        &self,
        target: &Repository,
        from: &Repository,
        digest: &Digest,
    ) -> Result<bool, RegistryError> {
        let _gc = self.gc.read().await;
        if !exists(&self.blob_link(from, digest)).await || !exists(&self.blob_path(digest)).await {
            return Ok(false);
        }
        self.link_blob(target, digest).await?;
        Ok(true)
    }

    /// Removes `digest`'s link from `repository`. The content stays on disk until a
    /// [`Registry::collect`] pass finds it unlinked. `BlobUnknown` when it was not linked.
    pub(crate) async fn unlink_blob(
        &self,
        repository: &Repository,
        digest: &Digest,
    ) -> Result<(), RegistryError> {
        let link = self.blob_link(repository, digest);
        match tokio::fs::remove_file(&link).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(RegistryError::BlobUnknown {
                repository: repository.to_string(),
                digest: digest.clone(),
            }),
            Err(e) => Err(RegistryError::io("removing", link)(e)),
        }
    }

    /// Stores the file at `source` as blob `digest` in `repository`, for content the server
    /// fetched itself. The file is hard-linked (or copied, across file systems) into `tmp/`,
    /// hashed there, and renamed into place only when it is `digest`; `source` is left as it
    /// was. [`RegistryError::Full`] when new content would go past
    /// [`Limits::max_total_bytes`].
    pub async fn put_blob(
        &self,
        repository: &str,
        digest: &Digest,
        source: &Path,
    ) -> Result<(), RegistryError> {
        let repository = parse_repository(repository)?;
        {
            let _gc = self.gc.read().await;
            if exists(&self.blob_path(digest)).await {
                return self.link_blob(&repository, digest).await;
            }
        }
        let size = tokio::fs::metadata(source)
            .await
            .map_err(RegistryError::io("reading the size of", source))?
            .len();
        let mut pending = Pending::reserve(&self.space, size)?;
        let tmp = self.tmp_path()?;
        pending.hold(tmp.clone());
        if tokio::fs::hard_link(source, &tmp).await.is_err() {
            tokio::fs::copy(source, &tmp)
                .await
                .map_err(RegistryError::io("copying", source))?;
        }
        // The source may have changed since its size was read.
        let copied = tokio::fs::metadata(&tmp)
            .await
            .map_err(RegistryError::io("reading the size of", &tmp))?
            .len();
        pending.resize(copied)?;
        let hashed = tmp.clone();
        let actual = tokio::task::spawn_blocking(move || hash_file(&hashed))
            .await
            .unwrap_or_else(|e| Err(io::Error::other(e)))
            .map_err(RegistryError::io("hashing", &tmp))?;
        if actual != *digest {
            return Err(RegistryError::DigestMismatch {
                expected: digest.clone(),
                actual,
            });
        }
        self.commit_blob(&repository, pending, digest).await
    }

    // ---- manifests --------------------------------------------------------------------

    /// Stores a manifest in `repository` under `reference` (a tag, or its own digest), for
    /// content the server fetched itself; the same checks as a `PUT` over HTTP.
    pub async fn put_manifest(
        &self,
        repository: &str,
        reference: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> Result<Digest, RegistryError> {
        let repository = parse_repository(repository)?;
        let reference = parse_reference(reference)?;
        Ok(self
            .store_manifest(&repository, &reference, Some(media_type), bytes)
            .await?
            .digest)
    }

    /// Copies the image `reference` (a tag or digest) names in `from` into `to`, within the
    /// registry: its blobs are linked in `to` only as `from` links them (a mount), then its
    /// manifests stored by digest, an index's after its children. Nothing is read from
    /// anywhere but `from`, so what `to` gets is what `from` may be pulled for. Returns the
    /// manifest's digest; `ManifestUnknown` or `BlobUnknown` when `from` lacks a part.
    pub async fn copy_image(
        &self,
        from: &str,
        reference: &str,
        to: &str,
    ) -> Result<Digest, RegistryError> {
        let (source, target) = (parse_repository(from)?, parse_repository(to)?);
        let top = self.manifest(&source, &parse_reference(reference)?).await?;
        let mut pending = vec![top.clone()];
        let mut ordered = Vec::new();
        while let Some(stored) = pending.pop() {
            let parsed = crate::manifest::parse(Some(&stored.media_type), &stored.bytes)?;
            for blob in &parsed.blobs {
                if !self.mount_blob(&target, &source, blob).await? {
                    return Err(RegistryError::BlobUnknown {
                        repository: source.to_string(),
                        digest: blob.clone(),
                    });
                }
            }
            for child in &parsed.manifests {
                let child = self
                    .manifest(&source, &Reference::Digest(child.clone()))
                    .await?;
                pending.push(child);
            }
            ordered.push(stored);
        }
        // Children first: an index is taken only once the manifests it lists are there.
        for stored in ordered.iter().rev() {
            self.store_manifest(
                &target,
                &Reference::Digest(stored.digest.clone()),
                Some(&stored.media_type),
                &stored.bytes,
            )
            .await?;
        }
        Ok(top.digest)
    }

    /// Whether the content store holds `digest` (a blob or manifest of any repository).
    pub fn contains(&self, digest: &Digest) -> bool {
        self.blob_path(digest).is_file()
    }

    /// Whether manifest `digest` is in `repository`.
    pub fn has_manifest(&self, repository: &str, digest: &Digest) -> bool {
        let Ok(repository) = Repository::parse(repository) else {
            return false;
        };
        self.manifest_link(&repository, digest).is_file() && self.blob_path(digest).is_file()
    }

    pub(crate) async fn store_manifest(
        &self,
        repository: &Repository,
        reference: &Reference,
        content_type: Option<&str>,
        bytes: &[u8],
    ) -> Result<PutManifest, RegistryError> {
        // Shared with other writes, excluded from a collection's pass: the blobs and
        // manifests checked below stay linked until this manifest's link is written.
        let gc = self.gc.clone().read_owned().await;
        let limit = self.limits.max_manifest_bytes;
        if bytes.len() > limit {
            return Err(RegistryError::ManifestTooLarge { limit });
        }
        let parsed = manifest::parse(content_type, bytes)?;
        let digest = Digest::of(bytes);
        if let Reference::Digest(expected) = reference
            && *expected != digest
        {
            return Err(RegistryError::DigestMismatch {
                expected: expected.clone(),
                actual: digest,
            });
        }
        for blob in &parsed.blobs {
            if self.linked_blob_size(repository, blob).await.is_none() {
                return Err(RegistryError::ManifestBlobUnknown {
                    repository: repository.to_string(),
                    digest: blob.clone(),
                });
            }
        }
        for child in &parsed.manifests {
            if !exists(&self.manifest_link(repository, child)).await {
                return Err(RegistryError::ManifestReferenceUnknown {
                    repository: repository.to_string(),
                    digest: child.clone(),
                });
            }
        }
        let gc = self.store_content(gc, &digest, bytes).await?;
        self.write_atomic(
            &self.manifest_link(repository, &digest),
            parsed.media_type.as_bytes(),
        )
        .await?;
        if let Some(subject) = &parsed.subject {
            let entry = ReferrerDescriptor {
                media_type: parsed.media_type.to_string(),
                digest: digest.clone(),
                size: bytes.len() as u64,
                artifact_type: parsed.artifact_type.clone(),
                annotations: parsed.annotations.clone(),
            };
            let json = serde_json::to_vec(&entry).map_err(|e| RegistryError::Io {
                operation: "encoding a referrer",
                path: PathBuf::new(),
                source: io::Error::other(e),
            })?;
            self.write_atomic(
                &self.referrers_dir(repository, subject).join(digest.hex()),
                &json,
            )
            .await?;
        }
        if let Reference::Tag(tag) = reference {
            self.write_atomic(
                &self.tags_dir(repository).join(tag.as_str()),
                digest.to_string().as_bytes(),
            )
            .await?;
        }
        drop(gc);
        Ok(PutManifest {
            digest,
            subject: parsed.subject,
        })
    }

    /// Writes `bytes` into the content store as `digest` unless it is there, within
    /// [`Limits::max_total_bytes`]. Takes and gives back the caller's `gc` guard.
    async fn store_content(
        &self,
        gc: OwnedRwLockReadGuard<()>,
        digest: &Digest,
        bytes: &[u8],
    ) -> Result<OwnedRwLockReadGuard<()>, RegistryError> {
        if exists(&self.blob_path(digest)).await {
            return Ok(gc);
        }
        let mut pending = Pending::reserve(&self.space, bytes.len() as u64)?;
        let tmp = self.tmp_path()?;
        pending.hold(tmp.clone());
        tokio::fs::write(&tmp, bytes)
            .await
            .map_err(RegistryError::io("writing", &tmp))?;
        self.commit_content(gc, pending, digest).await
    }

    /// The digest a tag or digest names in `repository`, when it has that manifest.
    async fn resolve(
        &self,
        repository: &Repository,
        reference: &Reference,
    ) -> Result<Digest, RegistryError> {
        let unknown = || RegistryError::ManifestUnknown {
            repository: repository.to_string(),
            reference: reference.to_string(),
        };
        let digest = match reference {
            Reference::Digest(digest) => digest.clone(),
            Reference::Tag(tag) => {
                let path = self.tags_dir(repository).join(tag.as_str());
                let text = match tokio::fs::read_to_string(&path).await {
                    Ok(text) => text,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(unknown()),
                    Err(e) => return Err(RegistryError::io("reading", path)(e)),
                };
                Digest::parse(text.trim()).map_err(|_| unknown())?
            }
        };
        if exists(&self.manifest_link(repository, &digest)).await {
            Ok(digest)
        } else {
            Err(unknown())
        }
    }

    /// The manifest a tag or digest names in `repository`.
    pub async fn get_manifest(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<StoredManifest, RegistryError> {
        let repository = parse_repository(repository)?;
        let reference = parse_reference(reference)?;
        self.manifest(&repository, &reference).await
    }

    pub(crate) async fn manifest(
        &self,
        repository: &Repository,
        reference: &Reference,
    ) -> Result<StoredManifest, RegistryError> {
        let digest = self.resolve(repository, reference).await?;
        let link = self.manifest_link(repository, &digest);
        let media_type = tokio::fs::read_to_string(&link)
            .await
            .map_err(RegistryError::io("reading", &link))?;
        let path = self.blob_path(&digest);
        let bytes = match tokio::fs::read(&path).await {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(RegistryError::ManifestUnknown {
                    repository: repository.to_string(),
                    reference: reference.to_string(),
                });
            }
            Err(e) => return Err(RegistryError::io("reading", path)(e)),
        };
        Ok(StoredManifest {
            digest,
            media_type,
            bytes: Bytes::from(bytes),
        })
    }

    /// Deletes a tag (the manifest stays), or a manifest by digest with the tags that name it
    /// and its entry in its subject's referrers.
    pub(crate) async fn delete_manifest(
        &self,
        repository: &Repository,
        reference: &Reference,
    ) -> Result<(), RegistryError> {
        let digest = self.resolve(repository, reference).await?;
        if let Reference::Tag(tag) = reference {
            let path = self.tags_dir(repository).join(tag.as_str());
            return tokio::fs::remove_file(&path)
                .await
                .map_err(RegistryError::io("removing", path));
        }
        // Its subject, to drop it from the referrers.
        if let Ok(stored) = self.manifest(repository, reference).await
            && let Ok(parsed) = manifest::parse(Some(&stored.media_type), &stored.bytes)
            && let Some(subject) = parsed.subject
        {
            let entry = self.referrers_dir(repository, &subject).join(digest.hex());
            let _ = tokio::fs::remove_file(entry).await;
        }
        let link = self.manifest_link(repository, &digest);
        tokio::fs::remove_file(&link)
            .await
            .map_err(RegistryError::io("removing", &link))?;
        for (tag, tagged) in self.tags_with_digests(repository).await? {
            if tagged == digest {
                let _ = tokio::fs::remove_file(self.tags_dir(repository).join(tag.as_str())).await;
            }
        }
        Ok(())
    }

    // ---- tags and referrers -----------------------------------------------------------

    async fn tags_with_digests(
        &self,
        repository: &Repository,
    ) -> Result<Vec<(Tag, Digest)>, RegistryError> {
        let mut out = Vec::new();
        for tag in self.tags(repository).await? {
            let path = self.tags_dir(repository).join(tag.as_str());
            if let Ok(text) = tokio::fs::read_to_string(&path).await
                && let Ok(digest) = Digest::parse(text.trim())
            {
                out.push((tag, digest));
            }
        }
        Ok(out)
    }

    /// `repository`'s tags, sorted. `NameUnknown` when the repository has never been written.
    pub(crate) async fn tags(&self, repository: &Repository) -> Result<Vec<Tag>, RegistryError> {
        if !exists(&self.repository_dir(repository)).await {
            return Err(RegistryError::NameUnknown {
                repository: repository.to_string(),
            });
        }
        let dir = self.tags_dir(repository);
        let mut entries = match tokio::fs::read_dir(&dir).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(RegistryError::io("listing", dir)(e)),
        };
        let mut tags = Vec::new();
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(RegistryError::io("listing", &dir))?
        {
            if let Some(tag) = entry.file_name().to_str().and_then(|n| Tag::parse(n).ok()) {
                tags.push(tag);
            }
        }
        tags.sort();
        Ok(tags)
    }

    /// The manifests in `repository` whose subject is `subject`, filtered by artifact type.
    pub(crate) async fn referrers(
        &self,
        repository: &Repository,
        subject: &Digest,
        artifact_type: Option<&str>,
    ) -> Result<Vec<ReferrerDescriptor>, RegistryError> {
        let dir = self.referrers_dir(repository, subject);
        let mut entries = match tokio::fs::read_dir(&dir).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(RegistryError::io("listing", dir)(e)),
        };
        let mut out = Vec::new();
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(RegistryError::io("listing", &dir))?
        {
            let Ok(bytes) = tokio::fs::read(entry.path()).await else {
                continue;
            };
            let Ok(descriptor) = serde_json::from_slice::<ReferrerDescriptor>(&bytes) else {
                continue;
            };
            // A deleted manifest whose entry outlived it is not listed.
            if !exists(&self.manifest_link(repository, &descriptor.digest)).await {
                continue;
            }
            if artifact_type.is_none_or(|t| descriptor.artifact_type.as_deref() == Some(t)) {
                out.push(descriptor);
            }
        }
        out.sort_by(|a, b| a.digest.cmp(&b.digest));
        Ok(out)
    }
}

pub(crate) fn parse_repository(name: &str) -> Result<Repository, RegistryError> {
    Repository::parse(name).map_err(|reason| RegistryError::NameInvalid {
        name: name.to_string(),
        reason,
    })
}

pub(crate) fn parse_reference(reference: &str) -> Result<Reference, RegistryError> {
    Reference::parse(reference).map_err(|e| match e {
        crate::name::ReferenceError::Digest => RegistryError::DigestInvalid {
            digest: reference.to_string(),
        },
        crate::name::ReferenceError::Tag(reason) => RegistryError::TagInvalid {
            tag: reference.to_string(),
            reason,
        },
    })
}

pub(crate) async fn exists(path: &Path) -> bool {
    tokio::fs::try_exists(path).await.unwrap_or(false)
}

async fn create_dir_all(path: &Path) -> Result<(), RegistryError> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode_private()
            .create(&path)
            .map_err(RegistryError::io("creating", &path))
    })
    .await
    .unwrap_or_else(|e| {
        Err(RegistryError::Io {
            operation: "creating a directory",
            path: PathBuf::new(),
            source: io::Error::other(e),
        })
    })
}

/// 128 random bits as 32 lowercase hex digits: upload ids and temporary names.
pub(crate) fn random_id() -> Result<String, RegistryError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| RegistryError::Io {
        operation: "drawing random bytes",
        path: PathBuf::new(),
        source: io::Error::other(e.to_string()),
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

pub(crate) fn hex_digest(hasher: Sha256) -> Digest {
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // A proven invariant: 64 lowercase hex digits always parse.
    Digest::parse(&format!("sha256:{hex}")).expect("64 lowercase hex digits are a sha256 digest")
}

fn hash_file(path: &Path) -> io::Result<Digest> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(buf.get(..n).unwrap_or_default());
    }
    Ok(hex_digest(hasher))
}

trait PrivateDirs {
    fn mode_private(&mut self) -> &mut Self;
}

impl PrivateDirs for std::fs::DirBuilder {
    fn mode_private(&mut self) -> &mut Self {
        use std::os::unix::fs::DirBuilderExt;
        self.mode(DIR_MODE)
    }
}

/// Poison is not a reason to stop serving: the map is consistent after every statement.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
