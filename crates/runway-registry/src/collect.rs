//! Garbage collection: [`Registry::collect`], a mark-and-sweep pass over every repository and
//! then the content store.
//!
//! Per repository, a manifest is live when it is tagged, one of the caller's roots
//! ([`Collect::keep`]), younger than [`Collect::grace`], listed by a live index, or a referrer
//! whose subject is live; a blob link is live when a live manifest refers to it (config,
//! layers) or it is younger than the grace. The rest is unlinked, and then a content file no
//! repository links, older than the grace, is deleted. A repository left with nothing goes.
//!
//! The pass holds the registry's collection lock exclusively from its first read to its last
//! delete, and every write that creates a link holds it shared, so nothing is linked to
//! content while the pass decides that it is unlinked. The work is done in one blocking task
//! that owns the lock: a caller that goes away does not leave a sweep running unlocked.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::Metadata;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use runway_oci::Digest;

use crate::error::RegistryError;
use crate::manifest;
use crate::name::Repository;
use crate::storage::Registry;
use crate::usage::Space;

/// What one [`Registry::collect`] pass keeps whatever else holds.
#[derive(Debug, Clone)]
pub struct Collect {
    /// Manifests kept whatever their age or tags: (repository, digest). The caller's roots
    /// (Runway passes every revision's mirrored image, `<service>/mirror` and its digest).
    pub keep: BTreeSet<(String, Digest)>,
    /// How old (by the link file's mtime) an unreferenced manifest link, blob link or content
    /// file must be before it is removed: anything younger is kept (a push or deploy may be on
    /// its way).
    pub grace: Duration,
}

/// What a [`Registry::collect`] pass removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Collected {
    /// Manifest links removed (each with its referrer entry; none of them was tagged).
    pub manifests: usize,
    /// Blob links removed.
    pub blob_links: usize,
    /// Content files (blobs and manifests) deleted from the store.
    pub blobs: usize,
    /// The bytes those files held.
    pub bytes: u64,
}

impl Registry {
    /// One mark-and-sweep pass (see the module's rules): removes the manifest and blob links
    /// no live manifest needs, then the content no repository links, then repositories left
    /// empty. Writes that create links wait while it runs. An error stops the pass; what it
    /// removed until then stays removed (and counted in [`Registry::usage`]).
    pub async fn collect(&self, policy: &Collect) -> Result<Collected, RegistryError> {
        let guard = self.gc.clone().write_owned().await;
        let root = self.root.clone();
        let space = self.space.clone();
        let policy = policy.clone();
        tokio::task::spawn_blocking(move || {
            let collected = Pass::new(&root, &policy, &space).run();
            drop(guard);
            collected
        })
        .await
        .map_err(|e| RegistryError::Io {
            operation: "collecting garbage in",
            path: self.root.clone(),
            source: io::Error::other(e),
        })?
    }
}

/// One pass's state.
struct Pass<'a> {
    root: &'a Path,
    policy: &'a Collect,
    space: &'a Space,
    now: SystemTime,
    collected: Collected,
}

/// One repository as the mark found it.
struct Marked {
    name: String,
    dir: PathBuf,
    /// Digests of the manifests that stay.
    live: HashSet<Digest>,
    /// Manifest links to remove.
    dead_manifests: Vec<Digest>,
    /// Blob links that stay.
    kept_blobs: Vec<Digest>,
    /// Blob links to remove.
    dead_blobs: Vec<Digest>,
}

/// A manifest link of a repository, as read by the mark.
struct Linked {
    young: bool,
    /// What it refers to; `None` when its content is gone (nothing to follow).
    refers: Option<Refers>,
}

struct Refers {
    blobs: Vec<Digest>,
    manifests: Vec<Digest>,
    subject: Option<Digest>,
}

impl Pass<'_> {
    fn new<'a>(root: &'a Path, policy: &'a Collect, space: &'a Space) -> Pass<'a> {
        Pass {
            root,
            policy,
            space,
            now: SystemTime::now(),
            collected: Collected::default(),
        }
    }

    fn run(mut self) -> Result<Collected, RegistryError> {
        let repositories = self.root.join("repositories");
        // Mark everything before removing anything: an error while reading removes nothing.
        let mut marked = Vec::new();
        for (name, dir) in find_repositories(&repositories)? {
            marked.push(self.mark(name, dir)?);
        }
        let mut linked: HashSet<String> = HashSet::new();
        for repository in &marked {
            self.sweep(repository)?;
            linked.extend(repository.live.iter().map(|d| d.hex().to_string()));
            linked.extend(repository.kept_blobs.iter().map(|d| d.hex().to_string()));
        }
        self.sweep_content(&linked)?;
        for repository in &marked {
            if repository.live.is_empty() && repository.kept_blobs.is_empty() {
                remove_repository(&repositories, &repository.dir)?;
            }
        }
        if self.collected != Collected::default() {
            tracing::info!(
                manifests = self.collected.manifests,
                blob_links = self.collected.blob_links,
                blobs = self.collected.blobs,
                bytes = self.collected.bytes,
                "registry garbage collected"
            );
        }
        Ok(self.collected)
    }

    /// Whether a file of `meta` is younger than the grace (a time it cannot tell is young).
    fn young(&self, meta: &Metadata) -> bool {
        match meta.modified() {
            Ok(modified) => {
                let age = self.now.duration_since(modified).unwrap_or(Duration::ZERO);
                age < self.policy.grace
            }
            Err(_) => true,
        }
    }

    fn mark(&self, name: String, dir: PathBuf) -> Result<Marked, RegistryError> {
        let mut manifests: HashMap<Digest, Linked> = HashMap::new();
        let mut opaque = false;
        for (digest, path) in digests_in(&dir.join("_manifests/sha256"))? {
            let Some(meta) = metadata(&path)? else {
                continue;
            };
            let young = self.young(&meta);
            let refers = match self.refers(&path, &digest)? {
                Read::Refers(refers) => Some(refers),
                Read::Gone => None,
                Read::Unreadable(reason) => {
                    tracing::warn!(
                        repository = %name, manifest = %digest, %reason,
                        "a stored manifest cannot be read: its repository is not collected"
                    );
                    opaque = true;
                    None
                }
            };
            manifests.insert(digest, Linked { young, refers });
        }
        let blob_links: Vec<(Digest, bool)> = digests_in(&dir.join("_blobs/sha256"))?
            .into_iter()
            .filter_map(|(digest, path)| match metadata(&path) {
                Ok(Some(meta)) => Some(Ok((digest, self.young(&meta)))),
                Ok(None) => None,
                Err(e) => Some(Err(e)),
            })
            .collect::<Result<_, _>>()?;
        if opaque {
            return Ok(Marked {
                name,
                dir,
                live: manifests.into_keys().collect(),
                dead_manifests: Vec::new(),
                kept_blobs: blob_links.into_iter().map(|(d, _)| d).collect(),
                dead_blobs: Vec::new(),
            });
        }

        // Roots: tagged, kept by the caller, young.
        let tagged = tags_in(&dir.join("_tags"))?;
        let mut work: Vec<Digest> = manifests
            .iter()
            .filter(|(digest, linked)| {
                linked.young
                    || tagged.contains(*digest)
                    || self
                        .policy
                        .keep
                        .contains(&(name.clone(), (*digest).clone()))
            })
            .map(|(digest, _)| digest.clone())
            .collect();
        let mut referrers: HashMap<&Digest, Vec<&Digest>> = HashMap::new();
        for (digest, linked) in &manifests {
            if let Some(subject) = linked.refers.as_ref().and_then(|r| r.subject.as_ref()) {
                referrers.entry(subject).or_default().push(digest);
            }
        }
        // Everything they reach: an index's manifests, a live manifest's referrers.
        let mut live: HashSet<Digest> = HashSet::new();
        while let Some(digest) = work.pop() {
            if !manifests.contains_key(&digest) || !live.insert(digest.clone()) {
                continue;
            }
            if let Some(refers) = manifests.get(&digest).and_then(|l| l.refers.as_ref()) {
                work.extend(refers.manifests.iter().cloned());
            }
            if let Some(found) = referrers.get(&digest) {
                work.extend(found.iter().map(|d| (*d).clone()));
            }
        }
        let needed: HashSet<&Digest> = live
            .iter()
            .filter_map(|d| manifests.get(d).and_then(|l| l.refers.as_ref()))
            .flat_map(|refers| refers.blobs.iter())
            .collect();
        let (kept_blobs, dead_blobs): (Vec<_>, Vec<_>) = blob_links
            .into_iter()
            .partition(|(digest, young)| *young || needed.contains(digest));
        let dead_manifests = manifests
            .keys()
            .filter(|d| !live.contains(*d))
            .cloned()
            .collect();
        Ok(Marked {
            name,
            dir,
            live,
            dead_manifests,
            kept_blobs: kept_blobs.into_iter().map(|(d, _)| d).collect(),
            dead_blobs: dead_blobs.into_iter().map(|(d, _)| d).collect(),
        })
    }

    /// What the manifest linked at `link` (holding its media type) refers to.
    fn refers(&self, link: &Path, digest: &Digest) -> Result<Read, RegistryError> {
        let media_type = match std::fs::read_to_string(link) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Read::Gone),
            Err(e) => return Err(RegistryError::io("reading", link)(e)),
        };
        let content = self.root.join("blobs/sha256").join(digest.hex());
        let bytes = match std::fs::read(&content) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Read::Gone),
            Err(e) => return Err(RegistryError::io("reading", content)(e)),
        };
        Ok(match manifest::parse(Some(media_type.trim()), &bytes) {
            Ok(parsed) => Read::Refers(Refers {
                blobs: parsed.blobs,
                manifests: parsed.manifests,
                subject: parsed.subject,
            }),
            Err(e) => Read::Unreadable(e.to_string()),
        })
    }

    fn sweep(&mut self, repository: &Marked) -> Result<(), RegistryError> {
        let manifests = repository.dir.join("_manifests/sha256");
        for digest in &repository.dead_manifests {
            if remove(&manifests.join(digest.hex()))?.is_some() {
                self.collected.manifests += 1;
            }
        }
        let blobs = repository.dir.join("_blobs/sha256");
        for digest in &repository.dead_blobs {
            if remove(&blobs.join(digest.hex()))?.is_some() {
                self.collected.blob_links += 1;
            }
        }
        // Referrer entries of manifests that are gone (now, or before: a delete leaves none,
        // but a failure between its steps might).
        let referrers = repository.dir.join("_referrers/sha256");
        for (_, subject) in digests_in(&referrers)? {
            for (digest, entry) in digests_in(&subject)? {
                if !repository.live.contains(&digest) {
                    remove(&entry)?;
                }
            }
            let _ = std::fs::remove_dir(&subject);
        }
        if !repository.dead_manifests.is_empty() || !repository.dead_blobs.is_empty() {
            tracing::debug!(
                repository = %repository.name,
                manifests = repository.dead_manifests.len(),
                blob_links = repository.dead_blobs.len(),
                "unlinked"
            );
        }
        Ok(())
    }

    /// Deletes content files that no repository links (`linked`: hex digests) and that are
    /// older than the grace.
    fn sweep_content(&mut self, linked: &HashSet<String>) -> Result<(), RegistryError> {
        for (digest, path) in digests_in(&self.root.join("blobs/sha256"))? {
            if linked.contains(digest.hex()) {
                continue;
            }
            let Some(meta) = metadata(&path)? else {
                continue;
            };
            if !meta.is_file() || self.young(&meta) {
                continue;
            }
            if remove(&path)?.is_some() {
                self.space.removed(meta.len());
                self.collected.blobs += 1;
                self.collected.bytes += meta.len();
            }
        }
        Ok(())
    }
}

enum Read {
    Refers(Refers),
    /// The link or its content is gone.
    Gone,
    /// Content that does not parse as the manifest it was stored as.
    Unreadable(String),
}

/// Every repository under `dir` (`repositories/`): each directory holding one of the store's
/// own `_blobs`, `_manifests`, `_tags` or `_referrers`, named by its path. A name is never a
/// `_` component, so a repository's own directories are never taken for a nested one.
fn find_repositories(dir: &Path) -> Result<Vec<(String, PathBuf)>, RegistryError> {
    let mut out = Vec::new();
    let mut stack = vec![(String::new(), dir.to_path_buf())];
    while let Some((name, path)) = stack.pop() {
        let mut holds_links = false;
        for entry in std::fs::read_dir(&path).map_err(RegistryError::io("listing", &path))? {
            let entry = entry.map_err(RegistryError::io("listing", &path))?;
            // Not followed: a symbolic link is nothing the registry made.
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let file_name = entry.file_name();
            let Some(component) = file_name.to_str() else {
                continue;
            };
            if component.starts_with('_') {
                holds_links |=
                    matches!(component, "_blobs" | "_manifests" | "_tags" | "_referrers");
                continue;
            }
            let child = if name.is_empty() {
                component.to_string()
            } else {
                format!("{name}/{component}")
            };
            stack.push((child, entry.path()));
        }
        if holds_links && Repository::parse(&name).is_ok() {
            out.push((name, path));
        }
    }
    Ok(out)
}

/// The files of `dir` named by a sha256 hex digest, with their paths; none when `dir` is not
/// there.
fn digests_in(dir: &Path) -> Result<Vec<(Digest, PathBuf)>, RegistryError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RegistryError::io("listing", dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(RegistryError::io("listing", dir))?;
        let name = entry.file_name();
        if let Some(digest) = name
            .to_str()
            .and_then(|hex| Digest::parse(&format!("sha256:{hex}")).ok())
        {
            out.push((digest, entry.path()));
        }
    }
    Ok(out)
}

/// The digests `dir` (`_tags`) names.
fn tags_in(dir: &Path) -> Result<HashSet<Digest>, RegistryError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HashSet::new()),
        Err(e) => return Err(RegistryError::io("listing", dir)(e)),
    };
    let mut out = HashSet::new();
    for entry in entries {
        let entry = entry.map_err(RegistryError::io("listing", dir))?;
        let path = entry.path();
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                if let Ok(digest) = Digest::parse(text.trim()) {
                    out.insert(digest);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(RegistryError::io("reading", path)(e)),
        }
    }
    Ok(out)
}

/// A file's metadata (not following a link); `None` when it is gone.
fn metadata(path: &Path) -> Result<Option<Metadata>, RegistryError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => Ok(Some(meta)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(RegistryError::io("reading", path)(e)),
    }
}

/// Removes a file; `None` when it was gone already.
fn remove(path: &Path) -> Result<Option<()>, RegistryError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(Some(())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(RegistryError::io("removing", path)(e)),
    }
}

/// Removes a repository left with nothing: its own directories, then its directory and each
/// parent below `repositories` that is left empty (a nested repository keeps its parents).
fn remove_repository(repositories: &Path, dir: &Path) -> Result<(), RegistryError> {
    for own in ["_blobs", "_manifests", "_tags", "_referrers"] {
        let path = dir.join(own);
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(RegistryError::io("removing", path)(e)),
        }
    }
    let mut current = Some(dir);
    while let Some(path) = current {
        if path == repositories || !path.starts_with(repositories) {
            break;
        }
        // Fails when something is left in it (a nested repository): then it stays.
        if std::fs::remove_dir(path).is_err() {
            break;
        }
        current = path.parent();
    }
    tracing::debug!(path = %dir.display(), "removed an empty repository");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_are_found_nested() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for path in [
            "a/_blobs/sha256",
            "a/b/_tags",
            "c/d/_manifests/sha256",
            "e/f",
        ] {
            std::fs::create_dir_all(root.join(path)).expect("mkdir");
        }
        let mut found: Vec<String> = find_repositories(root)
            .expect("listing")
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        found.sort();
        assert_eq!(found, ["a", "a/b", "c/d"]);
    }

    #[test]
    fn an_empty_repository_goes_with_its_empty_parents_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for path in ["x/y/z/_blobs/sha256", "x/_tags"] {
            std::fs::create_dir_all(root.join(path)).expect("mkdir");
        }
        remove_repository(root, &root.join("x/y/z")).expect("removing");
        assert!(!root.join("x/y").exists());
        assert!(root.join("x/_tags").exists(), "a parent repository stays");
        remove_repository(root, &root.join("x")).expect("removing");
        assert!(!root.join("x").exists());
        assert!(root.exists());
    }
}
