//! Blob uploads: sessions that take a blob in one request or in ordered chunks, hash the bytes
//! as they are written to `uploads/<id>`, and move the file into the content store only when
//! the client's digest matches.
//!
//! A session lives in memory (its sha256 state cannot be saved), so uploads do not survive a
//! restart; [`Registry::open`] removes what they left. A session idle for
//! [`Limits::upload_idle_timeout`](crate::Limits::upload_idle_timeout) is forgotten, and its
//! file removed, the next time an upload starts or it is asked for.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use http_body_util::BodyExt as _;
use runway_oci::Digest;
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncSeekExt as _, AsyncWriteExt as _};
use tokio::sync::OwnedMutexGuard;

use crate::error::RegistryError;
use crate::name::Repository;
use crate::storage::{Registry, hex_digest, lock, random_id};
use crate::usage::Pending;

/// One upload in progress.
#[derive(Debug)]
pub(crate) struct Session {
    repository: Repository,
    /// Bytes received, all of them written and hashed.
    offset: u64,
    /// Bytes reserved against [`Limits::max_total_bytes`](crate::Limits::max_total_bytes)
    /// for this upload (at least `offset`): released when it ends, or handed to its blob.
    reserved: u64,
    hasher: Sha256,
    last_used: Instant,
    /// Finished or aborted: a request that got the session after that sees it unknown.
    closed: bool,
}

/// Where a chunk says it goes (`Content-Range`) and how long it says it is
/// (`Content-Range` or `Content-Length`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Chunk {
    pub(crate) start: Option<u64>,
    pub(crate) length: Option<u64>,
}

type Guard = OwnedMutexGuard<Session>;

impl Registry {
    /// Starts an upload to `repository`; returns its id.
    pub(crate) async fn start_upload(
        &self,
        repository: &Repository,
    ) -> Result<String, RegistryError> {
        self.sweep_uploads().await;
        let id = random_id()?;
        let path = self.upload_path(&id);
        tokio::fs::File::create(&path)
            .await
            .map_err(RegistryError::io("creating", &path))?;
        let session = Session {
            repository: repository.clone(),
            offset: 0,
            reserved: 0,
            hasher: Sha256::new(),
            last_used: Instant::now(),
            closed: false,
        };
        let refused = {
            let mut uploads = lock(&self.uploads);
            if uploads.len() >= self.limits.max_uploads {
                true
            } else {
                uploads.insert(id.clone(), Arc::new(tokio::sync::Mutex::new(session)));
                false
            }
        };
        if refused {
            let _ = tokio::fs::remove_file(&path).await;
            return Err(RegistryError::TooManyUploads {
                limit: self.limits.max_uploads,
            });
        }
        Ok(id)
    }

    /// Forgets sessions idle past the timeout and removes their files.
    async fn sweep_uploads(&self) {
        let timeout = self.limits.upload_idle_timeout;
        let expired: Vec<String> = {
            let mut uploads = lock(&self.uploads);
            let mut expired = Vec::new();
            for (id, session) in uploads.iter() {
                // Closed while held: whoever takes the session next sees it unknown, so its
                // bytes are released here once.
                if let Ok(mut s) = session.try_lock()
                    && !s.closed
                    && s.last_used.elapsed() > timeout
                {
                    s.closed = true;
                    self.space.release(std::mem::take(&mut s.reserved));
                    expired.push(id.clone());
                }
            }
            for id in &expired {
                uploads.remove(id);
            }
            expired
        };
        for id in expired {
            let _ = tokio::fs::remove_file(self.upload_path(&id)).await;
        }
    }

    /// The session `id` of `repository`, held for this request.
    async fn session(&self, repository: &Repository, id: &str) -> Result<Guard, RegistryError> {
        let unknown = || RegistryError::UploadUnknown { id: id.to_string() };
        let session = lock(&self.uploads).get(id).cloned().ok_or_else(unknown)?;
        let guard = session
            .try_lock_owned()
            .map_err(|_| RegistryError::UploadBusy { offset: 0 })?;
        if guard.closed || guard.repository != *repository {
            return Err(unknown());
        }
        if guard.last_used.elapsed() > self.limits.upload_idle_timeout {
            self.abort(id, guard).await;
            return Err(unknown());
        }
        Ok(guard)
    }

    /// Ends a session and removes its bytes.
    async fn abort(&self, id: &str, mut guard: Guard) {
        guard.closed = true;
        self.space.release(std::mem::take(&mut guard.reserved));
        lock(&self.uploads).remove(id);
        let _ = tokio::fs::remove_file(self.upload_path(id)).await;
    }

    /// Bytes received so far.
    pub(crate) async fn upload_offset(
        &self,
        repository: &Repository,
        id: &str,
    ) -> Result<u64, RegistryError> {
        let mut guard = self.session(repository, id).await?;
        guard.last_used = Instant::now();
        Ok(guard.offset)
    }

    /// Appends a chunk; returns the bytes received so far.
    pub(crate) async fn append_upload(
        &self,
        repository: &Repository,
        id: &str,
        chunk: Chunk,
        body: Body,
    ) -> Result<u64, RegistryError> {
        let mut guard = self.session(repository, id).await?;
        match self.write_chunk(&mut guard, id, chunk, body).await {
            Ok(()) => {
                guard.last_used = Instant::now();
                Ok(guard.offset)
            }
            Err(e) => Err(self.fail(id, guard, e).await),
        }
    }

    /// Appends the last chunk (maybe empty), checks the digest and stores the blob.
    pub(crate) async fn finish_upload(
        &self,
        repository: &Repository,
        id: &str,
        chunk: Chunk,
        body: Body,
        digest: &Digest,
    ) -> Result<(), RegistryError> {
        let mut guard = self.session(repository, id).await?;
        if let Err(e) = self.write_chunk(&mut guard, id, chunk, body).await {
            return Err(self.fail(id, guard, e).await);
        }
        let actual = hex_digest(guard.hasher.clone());
        if actual != *digest {
            let e = RegistryError::DigestMismatch {
                expected: digest.clone(),
                actual,
            };
            return Err(self.fail(id, guard, e).await);
        }
        guard.closed = true;
        lock(&self.uploads).remove(id);
        // The session's bytes, reserved as they came, become the blob's (or are released).
        let pending = Pending::adopt(
            &self.space,
            std::mem::take(&mut guard.reserved),
            Some(self.upload_path(id)),
        );
        drop(guard);
        self.commit_blob(repository, pending, digest).await
    }

    /// Cancels an upload.
    pub(crate) async fn cancel_upload(
        &self,
        repository: &Repository,
        id: &str,
    ) -> Result<(), RegistryError> {
        let guard = self.session(repository, id).await?;
        self.abort(id, guard).await;
        Ok(())
    }

    /// Ends the session when `e` leaves it unusable (its bytes and hash may disagree, or it
    /// can never become a blob); a misplaced chunk or a client gone mid-body leaves it as it
    /// was, to be resumed.
    async fn fail(&self, id: &str, mut guard: Guard, e: RegistryError) -> RegistryError {
        match e {
            RegistryError::RangeInvalid { .. } | RegistryError::Body { .. } => {
                guard.last_used = Instant::now();
            }
            _ => self.abort(id, guard).await,
        }
        e
    }

    /// Writes `body` at the end of the upload, hashing it, within the size limits.
    async fn write_chunk(
        &self,
        session: &mut Session,
        id: &str,
        chunk: Chunk,
        mut body: Body,
    ) -> Result<(), RegistryError> {
        if let Some(start) = chunk.start
            && start != session.offset
        {
            return Err(RegistryError::RangeInvalid {
                offset: session.offset,
                start,
            });
        }
        let limit = self.limits.max_blob_bytes;
        if chunk
            .length
            .is_some_and(|length| session.offset.saturating_add(length) > limit)
        {
            return Err(RegistryError::BlobTooLarge { limit });
        }
        // An announced chunk that cannot fit is refused before a byte of it is read.
        if let Some(length) = chunk.length {
            self.space.check(length)?;
        }
        let path = self.upload_path(id);
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .await
            .map_err(RegistryError::io("opening", &path))?;
        // The file holds what was hashed, no more: a chunk cut short in the middle of a write
        // (its client went away) may have left bytes past the offset.
        let length = file
            .metadata()
            .await
            .map_err(RegistryError::io("reading", &path))?
            .len();
        if length > session.offset {
            file.set_len(session.offset)
                .await
                .map_err(RegistryError::io("truncating", &path))?;
        }
        // And the space reserved for what was cut off is given back.
        if session.reserved > session.offset {
            self.space.release(session.reserved - session.offset);
            session.reserved = session.offset;
        }
        file.seek(std::io::SeekFrom::Start(session.offset))
            .await
            .map_err(RegistryError::io("seeking in", &path))?;
        let mut written: u64 = 0;
        let mut ended = None;
        while let Some(frame) = body.frame().await {
            let data = match frame {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_trailers) => continue,
                },
                Err(source) => {
                    ended = Some(RegistryError::Body { source });
                    break;
                }
            };
            let len = data.len() as u64;
            if session.offset.saturating_add(len) > limit {
                return Err(RegistryError::BlobTooLarge { limit });
            }
            if let Some(expected) = chunk.length
                && written.saturating_add(len) > expected
            {
                return Err(RegistryError::SizeInvalid {
                    expected,
                    actual: written.saturating_add(len),
                });
            }
            self.space.reserve(len)?;
            session.reserved += len;
            write_all(&mut file, &path, &data).await?;
            session.hasher.update(&data);
            session.offset += len;
            written += len;
        }
        file.flush()
            .await
            .map_err(RegistryError::io("writing", &path))?;
        if let Some(e) = ended {
            return Err(e);
        }
        match chunk.length {
            Some(expected) if expected != written => Err(RegistryError::SizeInvalid {
                expected,
                actual: written,
            }),
            _ => Ok(()),
        }
    }
}

async fn write_all(
    file: &mut tokio::fs::File,
    path: &Path,
    data: &[u8],
) -> Result<(), RegistryError> {
    file.write_all(data)
        .await
        .map_err(RegistryError::io("writing", path))
}
