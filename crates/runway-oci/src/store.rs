//! The content-addressed cache and the pull that fills it.

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::{Client, Reference};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::auth::{self, Credentials};
use crate::digest::{Digest, Hasher};
use crate::error::{BlobKind, OciError};
use crate::image::{
    self, Compression, Descriptor, ImageConfig, Manifest, ManifestOrIndex, Platform,
};
use crate::unpack::{self, UnpackOptions};

/// The first host uid and gid that container id 0 maps to, by default (in the rootfs ownership
/// and in the bundle's user namespace).
pub const DEFAULT_HOST_ID_BASE: u32 = 100_000;

/// The largest manifest or config this crate reads into memory.
const MAX_DOCUMENT_BYTES: i64 = 16 << 20;

/// Temporary entries older than this, left by a process that died mid-pull, are removed when a
/// store opens.
const STALE_TMP_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// How to pull.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// Where credentials come from.
    pub credentials: Credentials,
    /// Credentials for the registries named (`host` or `host:port`, as the reference writes
    /// it), in place of `credentials`: a platform registry's own, beside the operator's
    /// `config.json` for the others.
    pub registry_credentials: BTreeMap<String, Credentials>,
    /// Registries (`host` or `host:port`, as in the reference) reached over plain HTTP. Every
    /// other registry is HTTPS only.
    pub insecure_registries: Vec<String>,
    /// The platform picked from an image index.
    pub platform: Platform,
    /// Added to every uid and gid in the unpacked rootfs when running as root: the host id that
    /// container id 0 maps to in the bundle's user namespace (`0` for no user namespace).
    pub id_shift: u32,
    /// The bound on the whole pull (manifests, blobs, unpacking).
    pub timeout: Duration,
    /// The bound on establishing each connection.
    pub connect_timeout: Duration,
    /// Registries images may come from (see [`registry_allowed`]); `None` allows any.
    pub allowed_registries: Option<Vec<String>>,
    /// Root certificates trusted for HTTPS registries besides the system's: PEM, several
    /// certificates one after another (other PEM sections are ignored); empty for none. A
    /// registry served with a certificate from Runway's own CA needs that CA here. Anything
    /// but certificates a TLS client can trust is [`OciError::ExtraRoots`], before any request.
    pub extra_roots: Vec<u8>,
}

/// Whether images may be pulled from `registry` (`host` or `host:port`, as the reference
/// writes it). An entry allows the registry it names, `*.example.com` any below that domain,
/// and `*` any registry whose host is a name or a public address: a loopback, link-local,
/// private or unspecified address, or `localhost`, only when an entry names it. Registries
/// reached over plain HTTP (`insecure_registries`) were named by the operator and are allowed.
pub fn registry_allowed(registry: &str, opts: &PullOptions) -> bool {
    let Some(allowed) = &opts.allowed_registries else {
        return true;
    };
    let named = |entry: &String| {
        entry.eq_ignore_ascii_case(registry)
            || entry.strip_prefix("*.").is_some_and(|domain| {
                let host = host_of(registry).to_ascii_lowercase();
                host.ends_with(&format!(".{}", domain.to_ascii_lowercase()))
            })
    };
    if opts.insecure_registries.iter().any(named) || allowed.iter().any(named) {
        return true;
    }
    allowed.iter().any(|entry| entry == "*") && !is_internal(host_of(registry))
}

/// `reference` parsed, when its registry is one images may come from.
fn allowed_reference(reference: &str, opts: &PullOptions) -> Result<Reference, OciError> {
    let parsed: Reference =
        reference
            .parse()
            .map_err(|e: oci_client::ParseError| OciError::InvalidReference {
                reference: reference.to_string(),
                reason: e.to_string(),
            })?;
    if !registry_allowed(parsed.registry(), opts) {
        return Err(OciError::NotAllowed {
            registry: parsed.registry().to_string(),
        });
    }
    Ok(parsed)
}

/// The host of `host`, `host:port` or `[v6]:port`.
fn host_of(registry: &str) -> &str {
    if let Some(rest) = registry.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match registry.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => registry,
    }
}

/// A host that names this machine or a private network rather than a public registry.
fn is_internal(host: &str) -> bool {
    use std::net::IpAddr;
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => {
            ip.is_loopback()
                || ip.is_link_local()
                || ip.is_private()
                || ip.is_unspecified()
                || ip.is_broadcast()
                || ip.octets()[0] == 0
                || (ip.octets()[0] == 100 && ip.octets()[1] & 0xc0 == 64)
        }
        Ok(IpAddr::V6(ip)) => {
            ip.is_loopback()
                || ip.is_unspecified()
                || ip.is_unicast_link_local()
                || ip.is_unique_local()
                || ip
                    .to_ipv4_mapped()
                    .is_some_and(|v4| is_internal(&v4.to_string()))
        }
        // Not an address in its usual form. A public name ends in a label of letters (`io`);
        // anything else (`2130706433`, `127.1`, `0x7f.1`) is an address in another form that
        // HTTP clients still read as one, so it counts as internal.
        // A single label (`registry`) is a name the local network resolves.
        Err(_) => {
            !host.contains('.')
                || !host.rsplit('.').next().is_some_and(|tld| {
                    tld.len() >= 2 && tld.bytes().all(|b| b.is_ascii_alphabetic())
                })
        }
    }
}

impl PullOptions {
    /// The credentials `registry` is reached with: its own in `registry_credentials`, else
    /// `credentials`.
    pub fn credentials_for(&self, registry: &str) -> &Credentials {
        self.registry_credentials
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(registry))
            .map_or(&self.credentials, |(_, credentials)| credentials)
    }
}

impl Default for PullOptions {
    fn default() -> PullOptions {
        PullOptions {
            credentials: Credentials::default(),
            registry_credentials: BTreeMap::new(),
            insecure_registries: Vec::new(),
            platform: Platform::host(),
            id_shift: DEFAULT_HOST_ID_BASE,
            timeout: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(10),
            allowed_registries: None,
            extra_roots: Vec::new(),
        }
    }
}

/// An unpacked root filesystem in the cache. Shared by every instance of the image: never write
/// to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rootfs {
    /// Absolute path of the directory.
    pub path: PathBuf,
    /// What was added to the archive's uids and gids (see [`PullOptions::id_shift`]).
    pub id_shift: u32,
}

/// A pulled image.
#[derive(Debug, Clone)]
pub struct Image {
    /// The reference as the caller gave it.
    pub reference: String,
    /// `registry/repository@sha256:...`: what to record, so a later tag change cannot change
    /// what runs.
    pub pinned: String,
    /// The digest of the platform's image manifest.
    pub digest: Digest,
    /// The digest of the image index the manifest was picked from, if the reference named one.
    pub index_digest: Option<Digest>,
    /// The digest of the image config.
    pub config_digest: Digest,
    /// The image config.
    pub config: ImageConfig,
    /// The unpacked filesystem.
    pub rootfs: Rootfs,
    /// Whether this pull fetched no blob and unpacked nothing (a pull by tag still made one
    /// manifest request).
    pub cache_hit: bool,
    /// Layer entries the unpacker skipped (FIFOs, unknown types), as `path: reason`; empty when
    /// nothing was unpacked.
    pub unpack_warnings: Vec<String>,
}

/// Which manifests of an image index [`Store::fetch`] fetches. For a reference that names an
/// image manifest, both fetch that image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platforms {
    /// The index and every manifest it lists: the index can be put into another registry
    /// whole, and each node pulling from there picks its own platform.
    All,
    /// Only the image manifest [`PullOptions::platform`] picks, as [`Store::pull`] does. The
    /// index is not part of what is returned (a registry refuses an index whose other
    /// manifests it lacks): the pin is the picked manifest's.
    Selected,
}

/// A blob to push: its digest and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushBlob {
    /// Its digest.
    pub digest: Digest,
    /// Its bytes: a file (a blob of the store's), or in memory.
    pub source: BlobSource,
}

/// Where a blob's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobSource {
    /// A file that hashes to the digest.
    File(PathBuf),
    /// The bytes themselves.
    Bytes(Vec<u8>),
}

/// What [`Store::push`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// `registry/repository@sha256:…` of the manifest pushed.
    pub pinned: String,
    /// Blobs uploaded, and their bytes.
    pub uploaded: (usize, u64),
    /// Blobs the registry had already, so not uploaded.
    pub reused: usize,
}

/// An image's content in the store's verified blobs, fetched by [`Store::fetch`] to be put
/// into another registry: blobs first, then the manifests in their order.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The reference as the caller gave it.
    pub reference: String,
    /// `registry/repository@sha256:...` of what was fetched: the index with
    /// [`Platforms::All`], else the image manifest.
    pub pinned: String,
    /// The digest in [`Fetched::pinned`].
    pub digest: Digest,
    /// With [`Platforms::Selected`], the index the manifest was picked from, if the reference
    /// named one.
    pub index_digest: Option<Digest>,
    /// Every manifest, each once, an index after the manifests it lists (the order a registry
    /// accepts them in).
    pub manifests: Vec<FetchedManifest>,
    /// Every config and layer, each once.
    pub blobs: Vec<FetchedBlob>,
}

/// An image and its cosign signatures as [`Store::cosign_signatures`] fetched them: the raw
/// material a verifier checks, nothing trusted yet.
#[derive(Debug, Clone)]
pub struct Signatures {
    /// `registry/repository@sha256:...` of what the reference names now: an index as it is,
    /// not a platform's manifest, since that is what a signature covers.
    pub pinned: String,
    /// The digest in [`Signatures::pinned`].
    pub digest: Digest,
    /// The layers of the signature manifest (`<repository>:sha256-<hex>.sig`), in its order;
    /// empty when there is none.
    pub layers: Vec<SignatureLayer>,
}

/// One layer of a cosign signature manifest: a payload and what its descriptor says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureLayer {
    /// The descriptor's media type (cosign's `application/vnd.dev.cosign.simplesigning.v1+json`).
    pub media_type: String,
    /// The payload's digest, checked against it.
    pub digest: Digest,
    /// The descriptor's annotations: the signature, and a certificate and its chain.
    pub annotations: BTreeMap<String, String>,
    /// The signed payload.
    pub payload: Vec<u8>,
}

/// The most layers a signature manifest may have for [`Store::cosign_signatures`] to read it,
/// and the largest payload it fetches (cosign's are a few hundred bytes).
const MAX_SIGNATURE_LAYERS: usize = 64;
const MAX_SIGNATURE_BYTES: i64 = 64 << 10;

/// A manifest or index [`Store::fetch`] returns, verified against its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedManifest {
    /// Its digest.
    pub digest: Digest,
    /// Its media type: the document's `mediaType`, or the OCI type its shape is.
    pub media_type: String,
    /// The document as the registry served it.
    pub bytes: Vec<u8>,
}

/// A config or layer [`Store::fetch`] returns: a file in the store that hashes to its digest.
/// Link or copy it; never write to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedBlob {
    /// Its digest.
    pub digest: Digest,
    /// [`BlobKind::Config`] or [`BlobKind::Layer`].
    pub kind: BlobKind,
    /// `<root>/blobs/sha256/<hex>`.
    pub path: PathBuf,
}

/// Counts of what a store has done since it opened (for metrics and tests).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StoreStats {
    /// Manifests and indexes fetched from a registry.
    pub manifest_fetches: u64,
    /// Configs and layers fetched from a registry.
    pub blob_fetches: u64,
    /// Root filesystems unpacked.
    pub unpacks: u64,
}

/// A content-addressed image cache on disk, safe to share between tasks and processes.
///
/// Layout under the root:
/// - `blobs/sha256/<hex>`: verified manifests, indexes, configs and layers;
/// - `rootfs/idshift-<n>/sha256/<manifest hex>/`: an image's unpacked filesystem, owned with
///   id shift `n`;
/// - `tmp/`: downloads and unpacks in progress, renamed into place only once complete.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    as_root: bool,
    manifest_fetches: AtomicU64,
    blob_fetches: AtomicU64,
    unpacks: AtomicU64,
}

impl Store {
    /// Opens (creating if needed) the cache at `root`.
    pub fn open(root: impl AsRef<Path>) -> Result<Store, OciError> {
        use std::os::unix::fs::PermissionsExt;
        let root = root.as_ref();
        // Only the store's user reads blobs and work in progress; a container's root (another
        // host id, in its user namespace) must be able to search down to its rootfs.
        for (dir, mode) in [
            ("blobs/sha256", 0o700),
            ("blobs", 0o700),
            ("rootfs", 0o711),
            ("tmp", 0o700),
            ("", 0o711),
        ] {
            let path = root.join(dir);
            std::fs::create_dir_all(&path).map_err(|e| OciError::io("create", &path, e))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .map_err(|e| OciError::io("set mode of", &path, e))?;
        }
        let root = root
            .canonicalize()
            .map_err(|e| OciError::io("resolve", root, e))?;
        let tmp = root.join("tmp");
        remove_stale(&tmp);
        let probe = tempfile::NamedTempFile::new_in(&tmp)
            .map_err(|e| OciError::io("create a file in", &tmp, e))?;
        let as_root = unpack::running_as_root(probe.path());
        Ok(Store {
            root,
            as_root,
            manifest_fetches: AtomicU64::new(0),
            blob_fetches: AtomicU64::new(0),
            unpacks: AtomicU64::new(0),
        })
    }

    /// The cache's root directory (absolute).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// What this store has fetched and unpacked since it opened.
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            manifest_fetches: self.manifest_fetches.load(Ordering::Relaxed),
            blob_fetches: self.blob_fetches.load(Ordering::Relaxed),
            unpacks: self.unpacks.load(Ordering::Relaxed),
        }
    }

    /// Where a verified blob lives.
    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.root.join("blobs/sha256").join(digest.hex())
    }

    /// Keeps `bytes` as a verified blob (its digest is computed here) and returns where: for
    /// content made on this machine (a built image's config and layer) that is then put
    /// where blobs are taken from a file.
    pub fn put_bytes(&self, bytes: &[u8]) -> Result<PathBuf, OciError> {
        let digest = Digest::of(bytes);
        let path = self.blob_path(&digest);
        if !path.exists() {
            self.write_blob(&digest, bytes)?;
        }
        Ok(path)
    }

    /// Where the rootfs of the image with manifest `digest`, owned with `id_shift`, lives.
    pub fn rootfs_path(&self, digest: &Digest, id_shift: u32) -> PathBuf {
        self.root
            .join("rootfs")
            .join(format!("idshift-{id_shift}"))
            .join("sha256")
            .join(digest.hex())
    }

    /// `rootfs/idshift-<n>/` and its `sha256/`, made (again, whatever an older version left)
    /// so that only the store's user and containers of that shift get through: as root with a
    /// shift, `idshift-<n>/` is `0710` with group `n` (the container's root group) and
    /// `sha256/` `0711` (searchable, not listable); otherwise both are `0700`, the store's user
    /// being the container's root.
    fn create_shift_dir(&self, id_shift: u32) -> Result<(), OciError> {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.root.join("rootfs").join(format!("idshift-{id_shift}"));
        let digests = dir.join("sha256");
        std::fs::create_dir_all(&digests).map_err(|e| OciError::io("create", &digests, e))?;
        let grouped = self.as_root && id_shift != 0;
        if grouped {
            std::os::unix::fs::chown(&dir, None, Some(id_shift))
                .map_err(|e| OciError::io("change the group of", &dir, e))?;
        }
        let (outer, inner) = if grouped {
            (0o710, 0o711)
        } else {
            (0o700, 0o700)
        };
        for (path, mode) in [(&dir, outer), (&digests, inner)] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                .map_err(|e| OciError::io("set mode of", path, e))?;
        }
        Ok(())
    }

    /// Pulls `reference` (`registry/repo:tag` or `registry/repo@sha256:...`) into the cache and
    /// unpacks it. A reference by digest whose blobs and rootfs are cached touches no network.
    pub async fn pull(&self, reference: &str, opts: &PullOptions) -> Result<Image, OciError> {
        let parsed = allowed_reference(reference, opts)?;
        within(
            opts,
            &parsed,
            reference,
            self.pull_inner(reference, &parsed, opts),
        )
        .await
    }

    /// `reference` pinned to the digest of what its registry serves for it now (for a
    /// multi-platform image, its index, so each node of a cluster picks its own platform),
    /// without fetching a layer: for a control plane whose images run elsewhere. The document
    /// is checked to be an image manifest or index and kept in the cache.
    pub async fn resolve(&self, reference: &str, opts: &PullOptions) -> Result<String, OciError> {
        let parsed = allowed_reference(reference, opts)?;
        let asked = parsed.digest().map(Digest::parse).transpose()?;
        let mut remote = Remote::new(self, reference, &parsed, opts)?;
        let fetched = within(
            opts,
            &parsed,
            reference,
            self.manifest(&mut remote, &parsed, asked.as_ref()),
        )
        .await;
        let (digest, bytes) = fetched?;
        image::parse_manifest(reference, &digest, &bytes, None)?;
        Ok(format!(
            "{}/{}@{}",
            parsed.registry(),
            parsed.repository(),
            digest
        ))
    }

    /// `reference` pinned to the digest of what its registry serves for it now, and the cosign
    /// signatures stored beside it in the same repository under the tag
    /// `sha256-<hex>.sig` (cosign's own format, which `cosign sign` writes with
    /// `--new-bundle-format=false`). Each payload is fetched and checked against its digest;
    /// nothing is verified as a signature here. No signature manifest is no layers, not an
    /// error.
    pub async fn cosign_signatures(
        &self,
        reference: &str,
        opts: &PullOptions,
    ) -> Result<Signatures, OciError> {
        let parsed = allowed_reference(reference, opts)?;
        within(opts, &parsed, reference, async {
            let asked = parsed.digest().map(Digest::parse).transpose()?;
            let mut remote = Remote::new(self, reference, &parsed, opts)?;
            let (digest, bytes) = self.manifest(&mut remote, &parsed, asked.as_ref()).await?;
            image::parse_manifest(reference, &digest, &bytes, None)?;
            let pinned = format!("{}/{}@{}", parsed.registry(), parsed.repository(), digest);
            let tag = format!("{}.sig", digest.to_string().replacen(':', "-", 1));
            let signatures = Reference::with_tag(
                parsed.registry().to_owned(),
                parsed.repository().to_owned(),
                tag,
            );
            let bytes = match remote.manifest(&signatures).await {
                Ok(bytes) => bytes,
                Err(OciError::NotFound { .. }) => {
                    return Ok(Signatures {
                        pinned,
                        digest,
                        layers: Vec::new(),
                    });
                }
                Err(e) => return Err(e),
            };
            let invalid = |reason: String| OciError::InvalidDocument {
                kind: BlobKind::Manifest,
                digest: signatures.to_string(),
                reason,
            };
            let manifest: oci_client::manifest::OciImageManifest =
                serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
            if manifest.layers.len() > MAX_SIGNATURE_LAYERS {
                return Err(invalid(format!(
                    "{} layers, more than the {MAX_SIGNATURE_LAYERS} read",
                    manifest.layers.len()
                )));
            }
            let mut layers = Vec::with_capacity(manifest.layers.len());
            for layer in manifest.layers {
                if !(0..=MAX_SIGNATURE_BYTES).contains(&layer.size) {
                    return Err(invalid(format!(
                        "a layer of {} bytes, more than the {MAX_SIGNATURE_BYTES} a signature's \
                         payload may take",
                        layer.size
                    )));
                }
                let digest = Digest::parse(&layer.digest)?;
                let payload = self
                    .small_blob(&mut remote, &digest, Some(layer.size), BlobKind::Layer)
                    .await?;
                layers.push(SignatureLayer {
                    media_type: layer.media_type,
                    digest,
                    annotations: layer.annotations.unwrap_or_default(),
                    payload,
                });
            }
            Ok(Signatures {
                pinned,
                digest,
                layers,
            })
        })
        .await
    }

    /// Pushes `blobs` to `target` (`registry/repository[:tag]`), each unless the registry has
    /// it already (asked first, so an image on a base the registry holds uploads only its own
    /// layers), then `manifest` (of `media_type`) under `target`'s tag, or by its digest.
    /// `opts` gives the credentials, the roots and the bounds, as for a pull.
    pub async fn push(
        &self,
        target: &str,
        blobs: &[PushBlob],
        manifest: &[u8],
        media_type: &str,
        opts: &PullOptions,
    ) -> Result<Pushed, OciError> {
        let parsed = allowed_reference(target, opts)?;
        within(opts, &parsed, target, async {
            let mut remote = Remote::new(self, target, &parsed, opts)?;
            remote.client().await?;
            let client = remote.client.as_ref().ok_or_else(|| OciError::Task {
                what: "creating the registry client",
                reason: "no client".to_string(),
            })?;
            let mut pushed = Pushed {
                pinned: String::new(),
                uploaded: (0, 0),
                reused: 0,
            };
            for blob in blobs {
                let digest = blob.digest.to_string();
                if client
                    .blob_exists(&parsed, &digest)
                    .await
                    .map_err(|e| remote.error_for(e, BlobKind::Layer))?
                {
                    pushed.reused += 1;
                    continue;
                }
                let bytes = match &blob.source {
                    BlobSource::Bytes(bytes) => bytes.clone(),
                    BlobSource::File(path) => tokio::fs::read(path)
                        .await
                        .map_err(|e| OciError::io("read", path, e))?,
                };
                let size = bytes.len() as u64;
                client
                    .push_blob(&parsed, bytes, &digest)
                    .await
                    .map_err(|e| remote.error_for(e, BlobKind::Layer))?;
                pushed.uploaded.0 += 1;
                pushed.uploaded.1 += size;
            }
            let content_type = http::HeaderValue::from_str(media_type).map_err(|e| {
                OciError::InvalidReference {
                    reference: target.to_string(),
                    reason: format!("media type {media_type:?}: {e}"),
                }
            })?;
            let digest = Digest::of(manifest);
            let at = match parsed.tag() {
                Some(_) if parsed.digest().is_none() => parsed.clone(),
                _ => Reference::with_digest(
                    parsed.registry().to_string(),
                    parsed.repository().to_string(),
                    digest.to_string(),
                ),
            };
            client
                .push_manifest_raw(&at, manifest.to_vec(), content_type)
                .await
                .map_err(|e| remote.error(e))?;
            pushed.pinned = format!("{}/{}@{digest}", parsed.registry(), parsed.repository());
            Ok(pushed)
        })
        .await
    }

    /// Fetches `reference`'s manifests, configs and layers into the cache, verified, without
    /// unpacking anything: for copying the image into another registry. `platforms` says what
    /// of an index is fetched. Content already cached is re-hashed rather than fetched again
    /// (a corrupt copy is dropped and fetched); a reference by digest whose content is cached
    /// touches no network. Manifests must be OCI or Docker v2 schema 2 manifests or indexes;
    /// configs and layers are fetched whatever their media types.
    pub async fn fetch(
        &self,
        reference: &str,
        platforms: Platforms,
        opts: &PullOptions,
    ) -> Result<Fetched, OciError> {
        let parsed = allowed_reference(reference, opts)?;
        within(
            opts,
            &parsed,
            reference,
            self.fetch_inner(reference, &parsed, platforms, opts),
        )
        .await
    }

    async fn pull_inner(
        &self,
        reference: &str,
        parsed: &Reference,
        opts: &PullOptions,
    ) -> Result<Image, OciError> {
        let mut remote = Remote::new(self, reference, parsed, opts)?;

        let asked = parsed.digest().map(Digest::parse).transpose()?;
        let (top_digest, top) = self.manifest(&mut remote, parsed, asked.as_ref()).await?;
        let (digest, manifest, index_digest) =
            match image::read_manifest(reference, &top_digest, &top, None)?.1 {
                ManifestOrIndex::Manifest(m) => (top_digest, m, None),
                ManifestOrIndex::Index(list) => {
                    let entry = image::select_platform(reference, &list, &opts.platform)?;
                    let child = self.index_entry(&mut remote, &top_digest, entry).await?;
                    (child.digest, child.manifest, Some(top_digest))
                }
            };
        image::check_runnable(reference, &manifest)?;

        let config_digest = Digest::parse(&manifest.config.digest)?;
        let config_bytes = self
            .small_blob(
                &mut remote,
                &config_digest,
                manifest.config.size,
                BlobKind::Config,
            )
            .await?;
        let config = ImageConfig::parse(&config_digest, &config_bytes)?;

        let (rootfs, unpacked) = self
            .ensure_rootfs(&mut remote, &digest, &manifest, &config, opts.id_shift)
            .await?;
        Ok(Image {
            reference: reference.to_string(),
            pinned: format!("{}/{}@{}", parsed.registry(), parsed.repository(), digest),
            digest,
            index_digest,
            config_digest,
            config,
            rootfs,
            cache_hit: remote.blob_fetches == 0 && unpacked.is_none(),
            unpack_warnings: unpacked.unwrap_or_default(),
        })
    }

    async fn fetch_inner(
        &self,
        reference: &str,
        parsed: &Reference,
        platforms: Platforms,
        opts: &PullOptions,
    ) -> Result<Fetched, OciError> {
        let mut remote = Remote::new(self, reference, parsed, opts)?;
        let mut content = Content::default();

        let asked = parsed.digest().map(Digest::parse).transpose()?;
        let (top_digest, top) = self.manifest(&mut remote, parsed, asked.as_ref()).await?;
        let (media_type, document) = image::read_manifest(reference, &top_digest, &top, None)?;
        let (digest, index_digest) = match (document, platforms) {
            (ManifestOrIndex::Manifest(manifest), _) => {
                self.fetch_image(&mut remote, &manifest, &mut content)
                    .await?;
                content.manifest(&top_digest, media_type, top);
                (top_digest, None)
            }
            (ManifestOrIndex::Index(list), Platforms::All) => {
                for entry in &list {
                    let child = self.index_entry(&mut remote, &top_digest, entry).await?;
                    self.fetch_image(&mut remote, &child.manifest, &mut content)
                        .await?;
                    content.manifest(&child.digest, child.media_type, child.bytes);
                }
                content.manifest(&top_digest, media_type, top);
                (top_digest, None)
            }
            (ManifestOrIndex::Index(list), Platforms::Selected) => {
                let entry = image::select_platform(reference, &list, &opts.platform)?;
                let child = self.index_entry(&mut remote, &top_digest, entry).await?;
                self.fetch_image(&mut remote, &child.manifest, &mut content)
                    .await?;
                content.manifest(&child.digest, child.media_type, child.bytes);
                (child.digest, Some(top_digest))
            }
        };
        Ok(Fetched {
            reference: reference.to_string(),
            pinned: format!("{}/{}@{}", parsed.registry(), parsed.repository(), digest),
            digest,
            index_digest,
            manifests: content.manifests,
            blobs: content.blobs,
        })
    }

    /// Fetches an image manifest's config and layers, verified, into `content`.
    async fn fetch_image(
        &self,
        remote: &mut Remote<'_>,
        manifest: &Manifest,
        content: &mut Content,
    ) -> Result<(), OciError> {
        let blobs = std::iter::once((&manifest.config, BlobKind::Config))
            .chain(manifest.layers.iter().map(|l| (l, BlobKind::Layer)));
        for (descriptor, kind) in blobs {
            let digest = Digest::parse(&descriptor.digest)?;
            if content.has(&digest) {
                continue;
            }
            let path = self
                .blob_file(remote, &digest, descriptor.size, kind, Recheck::Yes)
                .await?;
            content.blob(digest, kind, path);
        }
        Ok(())
    }

    /// The image manifest an index entry names, from the cache or the registry, verified
    /// against the entry's digest; an entry that is itself an index is refused.
    async fn index_entry(
        &self,
        remote: &mut Remote<'_>,
        index: &Digest,
        entry: &Descriptor,
    ) -> Result<IndexEntry, OciError> {
        let digest = Digest::parse(&entry.digest)?;
        let child = remote.parsed.clone_with_digest(digest.to_string());
        let (digest, bytes) = self.manifest(remote, &child, Some(&digest)).await?;
        match image::read_manifest(remote.reference, &digest, &bytes, None)? {
            (media_type, ManifestOrIndex::Manifest(manifest)) => Ok(IndexEntry {
                digest,
                media_type,
                bytes,
                manifest,
            }),
            (_, ManifestOrIndex::Index(_)) => Err(OciError::InvalidDocument {
                kind: BlobKind::Index,
                digest: index.to_string(),
                reason: "an index entry is itself an index".to_string(),
            }),
        }
    }

    /// A manifest or index: from the cache when asked by digest, else from the registry.
    async fn manifest(
        &self,
        remote: &mut Remote<'_>,
        reference: &Reference,
        digest: Option<&Digest>,
    ) -> Result<(Digest, Vec<u8>), OciError> {
        if let Some(digest) = digest
            && let Some(bytes) = self.read_verified(digest)?
        {
            return Ok((digest.clone(), bytes));
        }
        let bytes = remote.manifest(reference).await?;
        let actual = Digest::of(&bytes);
        if let Some(digest) = digest
            && *digest != actual
        {
            return Err(OciError::DigestMismatch {
                kind: BlobKind::Manifest,
                expected: digest.to_string(),
                actual: actual.to_string(),
            });
        }
        self.write_blob(&actual, &bytes)?;
        Ok((actual, bytes))
    }

    /// A config (or other small blob), from the cache or the registry.
    async fn small_blob(
        &self,
        remote: &mut Remote<'_>,
        digest: &Digest,
        size: Option<i64>,
        kind: BlobKind,
    ) -> Result<Vec<u8>, OciError> {
        if let Some(bytes) = self.read_verified(digest)? {
            return Ok(bytes);
        }
        if size.is_some_and(|s| !(0..=MAX_DOCUMENT_BYTES).contains(&s)) {
            return Err(OciError::InvalidDocument {
                kind,
                digest: digest.to_string(),
                reason: format!("size {size:?} is out of range"),
            });
        }
        remote.blob(digest, size, kind).await?;
        self.read_verified(digest)?.ok_or_else(|| {
            OciError::io(
                "read",
                self.blob_path(digest),
                io::ErrorKind::NotFound.into(),
            )
        })
    }

    /// A config or layer as a verified file in the cache, fetched when missing. A cached file
    /// is re-hashed first with [`Recheck::Yes`] (a corrupt one is removed and fetched again).
    async fn blob_file(
        &self,
        remote: &mut Remote<'_>,
        digest: &Digest,
        size: Option<i64>,
        kind: BlobKind,
        recheck: Recheck,
    ) -> Result<PathBuf, OciError> {
        let path = self.blob_path(digest);
        if path.is_file() {
            if recheck == Recheck::No {
                return Ok(path);
            }
            let hashed = path.clone();
            let actual = tokio::task::spawn_blocking(move || hash_file(&hashed))
                .await
                .map_err(|e| OciError::Task {
                    what: "hashing a cached blob",
                    reason: e.to_string(),
                })?;
            match actual {
                Ok(actual) if actual == *digest => return Ok(path),
                Ok(_) => {
                    let _ = std::fs::remove_file(&path);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(OciError::io("read", path, e)),
            }
        }
        remote.blob(digest, size, kind).await?;
        Ok(path)
    }

    /// Reads a cached blob, checking its digest; a corrupt one is removed and reported missing.
    fn read_verified(&self, digest: &Digest) -> Result<Option<Vec<u8>>, OciError> {
        let path = self.blob_path(digest);
        match std::fs::read(&path) {
            Ok(bytes) if Digest::of(&bytes) == *digest => Ok(Some(bytes)),
            Ok(_) => {
                let _ = std::fs::remove_file(&path);
                Ok(None)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(OciError::io("read", path, e)),
        }
    }

    fn write_blob(&self, digest: &Digest, bytes: &[u8]) -> Result<(), OciError> {
        let tmp_dir = self.root.join("tmp");
        let mut tmp = tempfile::NamedTempFile::new_in(&tmp_dir)
            .map_err(|e| OciError::io("create a file in", &tmp_dir, e))?;
        io::Write::write_all(&mut tmp, bytes).map_err(|e| OciError::io("write", tmp.path(), e))?;
        let dest = self.blob_path(digest);
        tmp.persist(&dest)
            .map_err(|e| OciError::io("rename into", &dest, e.error))?;
        Ok(())
    }

    /// Makes sure the rootfs exists, fetching missing layers and unpacking; returns it and,
    /// when this call unpacked, the unpacker's warnings.
    async fn ensure_rootfs(
        &self,
        remote: &mut Remote<'_>,
        digest: &Digest,
        manifest: &Manifest,
        config: &ImageConfig,
        id_shift: u32,
    ) -> Result<(Rootfs, Option<Vec<String>>), OciError> {
        let path = self.rootfs_path(digest, id_shift);
        let rootfs = Rootfs {
            path: path.clone(),
            id_shift,
        };
        // Every time, cache hit or not: a directory an older version left open is closed.
        self.create_shift_dir(id_shift)?;
        if path.is_dir() {
            return Ok((rootfs, None));
        }
        if !config.diff_ids.is_empty() && config.diff_ids.len() != manifest.layers.len() {
            return Err(OciError::InvalidDocument {
                kind: BlobKind::Config,
                digest: digest.to_string(),
                reason: format!(
                    "{} diff_ids for {} layers",
                    config.diff_ids.len(),
                    manifest.layers.len()
                ),
            });
        }
        let mut layers = Vec::with_capacity(manifest.layers.len());
        for (i, layer) in manifest.layers.iter().enumerate() {
            let layer_digest = Digest::parse(&layer.digest)?;
            // Trusted as cached: the unpacker hashes every layer as it reads it.
            self.blob_file(
                remote,
                &layer_digest,
                layer.size,
                BlobKind::Layer,
                Recheck::No,
            )
            .await?;
            let compression = Compression::of_media_type(&layer.media_type).ok_or_else(|| {
                OciError::UnsupportedMediaType {
                    reference: remote.reference.to_string(),
                    kind: BlobKind::Layer,
                    media_type: layer.media_type.clone(),
                }
            })?;
            layers.push((layer_digest, compression, config.diff_ids.get(i).cloned()));
        }

        let job = UnpackJob {
            blobs: self.root.join("blobs/sha256"),
            tmp: self.root.join("tmp"),
            dest: path,
            layers,
            opts: UnpackOptions {
                id_shift,
                chown: self.as_root,
                plain_modes: false,
            },
        };
        let warnings = tokio::task::spawn_blocking(move || job.run())
            .await
            .map_err(|e| OciError::Task {
                what: "unpacking",
                reason: e.to_string(),
            })??;
        self.unpacks.fetch_add(1, Ordering::Relaxed);
        Ok((rootfs, Some(warnings)))
    }
}

/// Whether a cached blob is hashed again before it is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recheck {
    Yes,
    No,
}

/// An image manifest listed in an index.
#[derive(Debug)]
struct IndexEntry {
    digest: Digest,
    media_type: &'static str,
    bytes: Vec<u8>,
    manifest: Manifest,
}

/// What a fetch has gathered, each digest once.
#[derive(Debug, Default)]
struct Content {
    seen: HashSet<Digest>,
    manifests: Vec<FetchedManifest>,
    blobs: Vec<FetchedBlob>,
}

impl Content {
    fn has(&self, digest: &Digest) -> bool {
        self.seen.contains(digest)
    }

    fn blob(&mut self, digest: Digest, kind: BlobKind, path: PathBuf) {
        if self.seen.insert(digest.clone()) {
            self.blobs.push(FetchedBlob { digest, kind, path });
        }
    }

    fn manifest(&mut self, digest: &Digest, media_type: &str, bytes: Vec<u8>) {
        if self.seen.insert(digest.clone()) {
            self.manifests.push(FetchedManifest {
                digest: digest.clone(),
                media_type: media_type.to_string(),
                bytes,
            });
        }
    }
}

/// Runs one operation on `reference` within [`PullOptions::timeout`].
async fn within<T>(
    opts: &PullOptions,
    parsed: &Reference,
    reference: &str,
    operation: impl std::future::Future<Output = Result<T, OciError>>,
) -> Result<T, OciError> {
    tokio::time::timeout(opts.timeout, operation)
        .await
        .unwrap_or_else(|_| {
            Err(OciError::Timeout {
                registry: parsed.resolve_registry().to_string(),
                reference: reference.to_string(),
                after: opts.timeout,
            })
        })
}

struct UnpackJob {
    blobs: PathBuf,
    tmp: PathBuf,
    dest: PathBuf,
    layers: Vec<(Digest, Compression, Option<Digest>)>,
    opts: UnpackOptions,
}

impl UnpackJob {
    fn run(self) -> Result<Vec<String>, OciError> {
        let work = tempfile::Builder::new()
            .prefix("rootfs-")
            .tempdir_in(&self.tmp)
            .map_err(|e| OciError::io("create a directory in", &self.tmp, e))?;
        let mut warnings = Vec::new();
        for (digest, compression, diff_id) in &self.layers {
            let blob = self.blobs.join(digest.hex());
            let result = unpack::apply_layer_file(
                work.path(),
                &blob,
                *compression,
                digest,
                diff_id.as_ref(),
                self.opts,
            );
            let result = match result {
                Err(e) if !matches!(e, OciError::DigestMismatch { .. }) => {
                    // A decompression or tar error may be a corrupt cached blob: say so if it is.
                    match hash_file(&blob) {
                        Ok(actual) if actual != *digest => Err(OciError::DigestMismatch {
                            kind: BlobKind::Layer,
                            expected: digest.to_string(),
                            actual: actual.to_string(),
                        }),
                        _ => Err(e),
                    }
                }
                other => other,
            };
            if let Err(OciError::DigestMismatch {
                kind: BlobKind::Layer,
                ..
            }) = &result
            {
                // The cached blob is corrupt: drop it so the next pull fetches it again.
                let _ = std::fs::remove_file(&blob);
            }
            warnings.extend(result?.skipped);
        }
        unpack::add_mount_points(work.path(), self.opts)?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755))
                .map_err(|e| OciError::io("set mode of", work.path(), e))?;
            if self.opts.chown {
                std::os::unix::fs::lchown(
                    work.path(),
                    Some(self.opts.id_shift),
                    Some(self.opts.id_shift),
                )
                .map_err(|e| OciError::io("change owner of", work.path(), e))?;
            }
        }
        if let Some(parent) = self.dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| OciError::io("create", parent, e))?;
        }
        let work = work.keep();
        match std::fs::rename(&work, &self.dest) {
            Ok(()) => Ok(warnings),
            Err(_) if self.dest.is_dir() => {
                // Another pull finished first: theirs is identical, ours goes.
                let _ = std::fs::remove_dir_all(&work);
                Ok(warnings)
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&work);
                Err(OciError::io("rename into", &self.dest, e))
            }
        }
    }
}

fn hash_file(path: &Path) -> io::Result<Digest> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = io::Read::read(&mut file, &mut buf)?;
        match buf.get(..n) {
            Some(chunk) if n > 0 => hasher.update(chunk),
            _ => return Ok(hasher.finish()),
        }
    }
}

/// Best effort: removes what a dead process left in `tmp/`.
fn remove_stale(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > STALE_TMP_AGE);
        if old {
            let path = entry.path();
            let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
        }
    }
}

/// The registry side of one pull: the client is made on first use, so a pull served from the
/// cache makes no connection at all.
struct Remote<'a> {
    store: &'a Store,
    reference: &'a str,
    parsed: &'a Reference,
    opts: &'a PullOptions,
    registry: String,
    roots: Vec<Certificate>,
    client: Option<Client>,
    blob_fetches: u64,
}

impl<'a> Remote<'a> {
    fn new(
        store: &'a Store,
        reference: &'a str,
        parsed: &'a Reference,
        opts: &'a PullOptions,
    ) -> Result<Remote<'a>, OciError> {
        Ok(Remote {
            store,
            reference,
            parsed,
            opts,
            registry: parsed.resolve_registry().to_string(),
            roots: extra_roots(&opts.extra_roots)?,
            client: None,
            blob_fetches: 0,
        })
    }

    fn insecure(&self) -> bool {
        self.opts.insecure_registries.contains(&self.registry)
    }

    async fn client(&mut self) -> Result<&Client, OciError> {
        if self.client.is_none() {
            // reqwest is built without a bundled crypto provider: use ring unless the process
            // installed one already.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let config = ClientConfig {
                protocol: ClientProtocol::HttpsExcept(self.opts.insecure_registries.clone()),
                platform_resolver: None,
                connect_timeout: Some(self.opts.connect_timeout),
                read_timeout: Some(self.opts.timeout),
                extra_root_certificates: self.roots.clone(),
                ..ClientConfig::default()
            };
            let client = Client::try_from(config).map_err(|e| self.error(e))?;
            let auth = auth::resolve(self.opts.credentials_for(&self.registry), &self.registry)?;
            client.store_auth_if_needed(&self.registry, &auth).await;
            self.client = Some(client);
        }
        self.client.as_ref().ok_or_else(|| OciError::Task {
            what: "creating the registry client",
            reason: "no client".to_string(),
        })
    }

    async fn manifest(&mut self, reference: &Reference) -> Result<Vec<u8>, OciError> {
        let auth = auth::resolve(self.opts.credentials_for(&self.registry), &self.registry)?;
        let client = self.client().await?;
        let result = client
            .pull_manifest_raw(reference, &auth, image::MANIFEST_TYPES)
            .await;
        self.store.manifest_fetches.fetch_add(1, Ordering::Relaxed);
        let (bytes, _) = result.map_err(|e| self.error_for(e, BlobKind::Manifest))?;
        if bytes.len() as u64 > MAX_DOCUMENT_BYTES as u64 {
            return Err(OciError::InvalidDocument {
                kind: BlobKind::Manifest,
                digest: reference.to_string(),
                reason: format!("{} bytes is too large", bytes.len()),
            });
        }
        Ok(bytes.to_vec())
    }

    /// Downloads a blob into the cache, verifying digest and size before it becomes visible.
    async fn blob(
        &mut self,
        digest: &Digest,
        size: Option<i64>,
        kind: BlobKind,
    ) -> Result<(), OciError> {
        let tmp_dir = self.store.root.join("tmp");
        let (file, tmp_path) = tempfile::NamedTempFile::new_in(&tmp_dir)
            .map_err(|e| OciError::io("create a file in", &tmp_dir, e))?
            .into_parts();
        let mut out = HashingWriter {
            inner: tokio::fs::File::from_std(file),
            hasher: Hasher::new(),
        };
        let digest_str = digest.to_string();
        let parsed = self.parsed;
        let client = self.client().await?;
        let result = client
            .pull_blob(parsed, digest_str.as_str(), &mut out)
            .await;
        self.store.blob_fetches.fetch_add(1, Ordering::Relaxed);
        self.blob_fetches += 1;
        result.map_err(|e| self.error_for(e, kind))?;
        out.inner
            .flush()
            .await
            .map_err(|e| OciError::io("write", &*tmp_path, e))?;
        let len = out.hasher.len();
        let actual = out.hasher.finish();
        if actual != *digest {
            return Err(OciError::DigestMismatch {
                kind,
                expected: digest.to_string(),
                actual: actual.to_string(),
            });
        }
        if let Some(expected) = size
            && u64::try_from(expected).ok() != Some(len)
        {
            return Err(OciError::SizeMismatch {
                kind,
                digest: digest.to_string(),
                expected: u64::try_from(expected).unwrap_or(0),
                actual: len,
            });
        }
        let dest = self.store.blob_path(digest);
        tmp_path
            .persist(&dest)
            .map_err(|e| OciError::io("rename into", &dest, e.error))?;
        Ok(())
    }

    fn error(&self, e: OciDistributionError) -> OciError {
        self.error_for(e, BlobKind::Manifest)
    }

    /// Turns a client error into ours, with the registry and reference.
    fn error_for(&self, e: OciDistributionError, kind: BlobKind) -> OciError {
        let registry = self.registry.clone();
        let reference = self.reference.to_string();
        let status_error = |status: u16, message: String| match status {
            404 => OciError::NotFound {
                registry: registry.clone(),
                reference: reference.clone(),
                status,
            },
            401 | 403 => OciError::Unauthorized {
                registry: registry.clone(),
                reference: reference.clone(),
                status,
                message,
            },
            _ => OciError::Registry {
                registry: registry.clone(),
                reference: reference.clone(),
                status: Some(status),
                message,
            },
        };
        match e {
            OciDistributionError::RegistryError { envelope, .. } => {
                let message = envelope
                    .errors
                    .iter()
                    .map(|e| e.message.clone())
                    .collect::<Vec<_>>()
                    .join("; ");
                let status = envelope.errors.first().map_or(400, |e| match e.code {
                    OciErrorCode::BlobUnknown
                    | OciErrorCode::ManifestUnknown
                    | OciErrorCode::NameUnknown
                    | OciErrorCode::NotFound => 404,
                    OciErrorCode::Unauthorized => 401,
                    OciErrorCode::Denied => 403,
                    OciErrorCode::Toomanyrequests => 429,
                    _ => 400,
                });
                status_error(status, message)
            }
            OciDistributionError::ServerError { code, message, .. } => {
                status_error(code, message.chars().take(200).collect())
            }
            OciDistributionError::UnauthorizedError { .. } => {
                status_error(401, "credentials refused or required".to_string())
            }
            OciDistributionError::AuthenticationFailure(message) => status_error(401, message),
            OciDistributionError::DigestError(
                oci_client::errors::DigestError::VerificationError { expected, actual },
            ) => OciError::DigestMismatch {
                kind,
                expected,
                actual,
            },
            OciDistributionError::RequestError(e) => {
                let scheme = if self.insecure() { "http" } else { "https" };
                let mut reason = runway_log::chain(&e);
                if e.is_timeout() {
                    return OciError::Timeout {
                        registry,
                        reference,
                        after: self.opts.timeout,
                    };
                }
                if !self.insecure()
                    && (reason.contains("corrupt message") || reason.contains("InvalidContentType"))
                {
                    reason.push_str(
                        " (the registry may speak plain http: list it in insecure_registries if that is intended)",
                    );
                }
                if reason.contains("UnknownIssuer") {
                    reason.push_str(
                        " (its certificate is not signed by a root this machine trusts: give its CA in extra_roots if that is intended)",
                    );
                }
                if e.is_connect() || e.is_request() {
                    OciError::Unreachable {
                        registry,
                        scheme,
                        reason,
                    }
                } else {
                    OciError::Registry {
                        registry,
                        reference,
                        status: e.status().map(|s| s.as_u16()),
                        message: reason,
                    }
                }
            }
            OciDistributionError::IoError(e) => {
                OciError::io("write a blob into", self.store.root.join("tmp"), e)
            }
            other => OciError::Registry {
                registry,
                reference,
                status: None,
                message: other.to_string(),
            },
        }
    }
}

/// The certificates in `pem`, each checked to be one a TLS client can trust as a root; none
/// when `pem` is empty.
fn extra_roots(pem: &[u8]) -> Result<Vec<Certificate>, OciError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    if pem.is_empty() {
        return Ok(Vec::new());
    }
    let mut roots = Vec::new();
    for (n, certificate) in CertificateDer::pem_slice_iter(pem).enumerate() {
        let invalid = |reason: String| OciError::ExtraRoots {
            reason: format!("certificate {}: {reason}", n + 1),
        };
        let certificate = certificate.map_err(|e| invalid(e.to_string()))?;
        rustls::RootCertStore::empty()
            .add(certificate.clone())
            .map_err(|e| invalid(e.to_string()))?;
        roots.push(Certificate {
            encoding: CertificateEncoding::Der,
            data: certificate.to_vec(),
        });
    }
    if roots.is_empty() {
        return Err(OciError::ExtraRoots {
            reason: "no PEM certificate (-----BEGIN CERTIFICATE-----) in them".to_string(),
        });
    }
    Ok(roots)
}

/// An async writer that hashes what it writes.
struct HashingWriter<W> {
    inner: W,
    hasher: Hasher,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for HashingWriter<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                if let Some(written) = buf.get(..n) {
                    this.hasher.update(written);
                }
                Poll::Ready(Ok(n))
            }
            other => other,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_are_an_allow_list_and_internal_addresses_must_be_named() {
        let opts = |allowed: &[&str], insecure: &[&str]| PullOptions {
            allowed_registries: Some(allowed.iter().map(|s| (*s).to_owned()).collect()),
            insecure_registries: insecure.iter().map(|s| (*s).to_owned()).collect(),
            ..PullOptions::default()
        };
        let any = opts(&["*"], &[]);
        for public in [
            "docker.io",
            "ghcr.io",
            "registry.example.com:5000",
            "8.8.8.8",
        ] {
            assert!(registry_allowed(public, &any), "{public}");
        }
        for internal in [
            "localhost:5000",
            "127.0.0.1:5000",
            "127.1.2.3",
            "169.254.169.254",
            "10.0.0.1:443",
            "192.168.1.1",
            "172.16.0.1",
            "100.64.0.1",
            "0.0.0.0:80",
            "[::1]:5000",
            "[fe80::1]",
            "[fd00::1]:5000",
            "[::ffff:127.0.0.1]:5000",
            "2130706433:5000",
            "127.1:5000",
            "0x7f.1",
            "0177.0.0.1",
            "registry",
        ] {
            assert!(!registry_allowed(internal, &any), "{internal}");
        }
        // Named, it is allowed: in the list, or as a plain-HTTP registry.
        assert!(registry_allowed(
            "127.0.0.1:5000",
            &opts(&["*", "127.0.0.1:5000"], &[])
        ));
        assert!(registry_allowed(
            "127.0.0.1:5000",
            &opts(&[], &["127.0.0.1:5000"])
        ));
        assert!(!registry_allowed(
            "127.0.0.1:5001",
            &opts(&["127.0.0.1:5000"], &[])
        ));
        // A list without `*` allows only what it names.
        let listed = opts(&["registry.example.com", "*.pkg.dev"], &[]);
        assert!(registry_allowed("registry.example.com", &listed));
        assert!(registry_allowed("europe-docker.pkg.dev", &listed));
        assert!(!registry_allowed("pkg.dev.evil.com", &listed));
        assert!(!registry_allowed("docker.io", &listed));
        assert!(registry_allowed("anything:1", &PullOptions::default()));
    }
}
