//! Manifests, indexes and image configs: the few fields this crate reads, parsed tolerantly so
//! OCI and Docker v2 schema 2 documents both fit.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use crate::digest::Digest;
use crate::error::{BlobKind, OciError};

pub(crate) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub(crate) const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub(crate) const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// What we send in `Accept` when asking for a manifest.
pub(crate) const MANIFEST_TYPES: &[&str] = &[OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST];

const CONFIG_TYPES: &[&str] = &[
    "application/vnd.oci.image.config.v1+json",
    "application/vnd.docker.container.image.v1+json",
];

/// How a layer is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub(crate) fn of_media_type(media_type: &str) -> Option<Compression> {
        match media_type {
            "application/vnd.oci.image.layer.v1.tar"
            | "application/vnd.oci.image.layer.nondistributable.v1.tar" => Some(Compression::None),
            "application/vnd.oci.image.layer.v1.tar+gzip"
            | "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
            | "application/vnd.docker.image.rootfs.diff.tar.gzip"
            | "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip" => {
                Some(Compression::Gzip)
            }
            "application/vnd.oci.image.layer.v1.tar+zstd"
            | "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd" => {
                Some(Compression::Zstd)
            }
            _ => None,
        }
    }
}

/// A content descriptor.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Descriptor {
    #[serde(default)]
    pub(crate) media_type: String,
    pub(crate) digest: String,
    #[serde(default)]
    pub(crate) size: Option<i64>,
    #[serde(default)]
    pub(crate) platform: Option<Platform>,
}

/// An image manifest (OCI, or Docker v2 schema 2).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Manifest {
    pub(crate) config: Descriptor,
    #[serde(default)]
    pub(crate) layers: Vec<Descriptor>,
}

/// Either kind of document a manifest URL can return.
#[derive(Debug)]
pub(crate) enum ManifestOrIndex {
    Manifest(Manifest),
    Index(Vec<Descriptor>),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnyManifest {
    schema_version: Option<i64>,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Option<Vec<Descriptor>>,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
}

/// Parses a manifest or index and checks that an image manifest's config and layers are of
/// media types this crate runs; `content_type` is the registry's header, if any.
pub(crate) fn parse_manifest(
    reference: &str,
    digest: &Digest,
    bytes: &[u8],
    content_type: Option<&str>,
) -> Result<ManifestOrIndex, OciError> {
    let (_, document) = read_manifest(reference, digest, bytes, content_type)?;
    if let ManifestOrIndex::Manifest(manifest) = &document {
        check_runnable(reference, manifest)?;
    }
    Ok(document)
}

/// Parses a manifest or index and says its media type (the document's `mediaType`, else the
/// registry's `content_type`, else the OCI type its shape is), leaving an image manifest's
/// config and layers unjudged: content to copy need not be content this crate runs.
pub(crate) fn read_manifest(
    reference: &str,
    digest: &Digest,
    bytes: &[u8],
    content_type: Option<&str>,
) -> Result<(&'static str, ManifestOrIndex), OciError> {
    let invalid = |reason: String| OciError::InvalidDocument {
        kind: BlobKind::Manifest,
        digest: digest.to_string(),
        reason,
    };
    let any: AnyManifest = serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
    if any.schema_version != Some(2) {
        return Err(invalid(format!(
            "schemaVersion {:?}, expected 2 (Docker schema 1 is not supported)",
            any.schema_version
        )));
    }
    let media_type = any
        .media_type
        .clone()
        .or_else(|| content_type.map(str::to_string));
    let media_type = match media_type.as_deref() {
        Some(OCI_INDEX) => OCI_INDEX,
        Some(DOCKER_LIST) => DOCKER_LIST,
        Some(OCI_MANIFEST) => OCI_MANIFEST,
        Some(DOCKER_MANIFEST) => DOCKER_MANIFEST,
        // The media type is optional in OCI documents: go by shape.
        None | Some("application/json" | "") if any.manifests.is_some() => OCI_INDEX,
        None | Some("application/json" | "") => OCI_MANIFEST,
        Some(other) => {
            return Err(OciError::UnsupportedMediaType {
                reference: reference.to_string(),
                kind: BlobKind::Manifest,
                media_type: other.to_string(),
            });
        }
    };
    if media_type == OCI_INDEX || media_type == DOCKER_LIST {
        let manifests = any
            .manifests
            .ok_or_else(|| invalid("an index without manifests".to_string()))?;
        return Ok((media_type, ManifestOrIndex::Index(manifests)));
    }
    let config = any
        .config
        .ok_or_else(|| invalid("a manifest without config".to_string()))?;
    let layers = any.layers.unwrap_or_default();
    Ok((
        media_type,
        ManifestOrIndex::Manifest(Manifest { config, layers }),
    ))
}

/// Refuses an image manifest whose config or layers are of media types this crate cannot
/// unpack and run.
pub(crate) fn check_runnable(reference: &str, manifest: &Manifest) -> Result<(), OciError> {
    if !CONFIG_TYPES.contains(&manifest.config.media_type.as_str()) {
        return Err(OciError::UnsupportedMediaType {
            reference: reference.to_string(),
            kind: BlobKind::Config,
            media_type: manifest.config.media_type.clone(),
        });
    }
    for layer in &manifest.layers {
        if Compression::of_media_type(&layer.media_type).is_none() {
            return Err(OciError::UnsupportedMediaType {
                reference: reference.to_string(),
                kind: BlobKind::Layer,
                media_type: layer.media_type.clone(),
            });
        }
    }
    Ok(())
}

/// An image platform: `os/architecture[/variant]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Platform {
    /// `linux`.
    pub os: String,
    /// `amd64`, `arm64`, ... (Go's names).
    pub architecture: String,
    /// `v8`, `v7`, ...; `None` matches any.
    #[serde(default)]
    pub variant: Option<String>,
}

impl Platform {
    /// The platform this process runs on, in Go's names (`linux/amd64` on x86-64 Linux).
    pub fn host() -> Platform {
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "powerpc64" => "ppc64le",
            "loongarch64" => "loong64",
            other => other,
        };
        Platform {
            os: std::env::consts::OS.to_string(),
            architecture: architecture.to_string(),
            variant: None,
        }
    }

    fn matches(&self, other: &Platform) -> bool {
        self.os == other.os
            && self.architecture == other.architecture
            && match (&self.variant, &other.variant) {
                (Some(want), Some(have)) => want == have,
                _ => true,
            }
    }
}

impl Default for Platform {
    fn default() -> Platform {
        Platform::host()
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(variant) = &self.variant {
            write!(f, "/{variant}")?;
        }
        Ok(())
    }
}

/// Picks the index entry for `want`: the first image manifest whose platform matches.
pub(crate) fn select_platform<'a>(
    reference: &str,
    manifests: &'a [Descriptor],
    want: &Platform,
) -> Result<&'a Descriptor, OciError> {
    manifests
        .iter()
        .filter(|d| {
            d.media_type.is_empty()
                || d.media_type == OCI_MANIFEST
                || d.media_type == DOCKER_MANIFEST
        })
        .find(|d| d.platform.as_ref().is_some_and(|p| want.matches(p)))
        .ok_or_else(|| OciError::NoMatchingPlatform {
            reference: reference.to_string(),
            platform: want.to_string(),
            available: manifests
                .iter()
                .filter_map(|d| d.platform.as_ref().map(Platform::to_string))
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The runtime part of an image's configuration: what `docker inspect` calls `Config`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct ImageConfig {
    /// `ENTRYPOINT`.
    pub entrypoint: Vec<String>,
    /// `CMD`.
    pub cmd: Vec<String>,
    /// `ENV`, as `KEY=value`.
    pub env: Vec<String>,
    /// `WORKDIR`; empty means `/`.
    pub working_dir: String,
    /// `USER`: `uid`, `uid:gid`, `name` or `name:group`; empty means root.
    pub user: String,
    /// `EXPOSE`, as `port/proto` (`8080/tcp`), sorted.
    pub exposed_ports: Vec<String>,
    /// `LABEL`s.
    pub labels: BTreeMap<String, String>,
    /// `STOPSIGNAL`, if set.
    pub stop_signal: Option<String>,
    /// The image's OS (`linux`).
    pub os: String,
    /// The image's architecture (`amd64`).
    pub architecture: String,
    /// The digests of the uncompressed layers (`rootfs.diff_ids`), in order.
    pub diff_ids: Vec<Digest>,
}

#[derive(Deserialize)]
struct RawConfigFile {
    #[serde(default)]
    os: String,
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    config: Option<RawConfig>,
    #[serde(default)]
    rootfs: Option<RawRootfs>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct RawConfig {
    #[serde(default)]
    entrypoint: Option<Vec<String>>,
    #[serde(default)]
    cmd: Option<Vec<String>>,
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    exposed_ports: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    stop_signal: Option<String>,
}

#[derive(Deserialize)]
struct RawRootfs {
    #[serde(default)]
    diff_ids: Vec<String>,
}

impl ImageConfig {
    /// Parses an image configuration blob (OCI or Docker).
    pub fn parse(digest: &Digest, bytes: &[u8]) -> Result<ImageConfig, OciError> {
        let invalid = |reason: String| OciError::InvalidDocument {
            kind: BlobKind::Config,
            digest: digest.to_string(),
            reason,
        };
        let raw: RawConfigFile =
            serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
        let config = raw.config.unwrap_or_default();
        let diff_ids = raw
            .rootfs
            .map(|r| r.diff_ids)
            .unwrap_or_default()
            .iter()
            .map(|d| Digest::parse(d))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(format!("rootfs.diff_ids: {e}")))?;
        Ok(ImageConfig {
            entrypoint: config.entrypoint.unwrap_or_default(),
            cmd: config.cmd.unwrap_or_default(),
            env: config.env.unwrap_or_default(),
            working_dir: config.working_dir.unwrap_or_default(),
            user: config.user.unwrap_or_default(),
            exposed_ports: config
                .exposed_ports
                .map(|p| p.into_keys().collect())
                .unwrap_or_default(),
            labels: config.labels.unwrap_or_default(),
            stop_signal: config.stop_signal,
            os: raw.os,
            architecture: raw.architecture,
            diff_ids,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d() -> Digest {
        Digest::of(b"x")
    }

    #[test]
    fn docker_v2_manifest_parses() {
        let m = br#"{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",
          "config":{"mediaType":"application/vnd.docker.container.image.v1+json","size":1,"digest":"sha256:aa"},
          "layers":[{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","size":2,"digest":"sha256:bb"}]}"#;
        match parse_manifest("r", &d(), m, None) {
            Ok(ManifestOrIndex::Manifest(m)) => assert_eq!(m.layers.len(), 1),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn index_selects_platform_and_reports_what_it_has() {
        let i = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[
          {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:a1","size":1,"platform":{"os":"linux","architecture":"arm64","variant":"v8"}},
          {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:a2","size":1,"platform":{"os":"linux","architecture":"amd64"}}]}"#;
        let Ok(ManifestOrIndex::Index(list)) = parse_manifest("r", &d(), i, None) else {
            panic!("not an index")
        };
        let amd = Platform {
            os: "linux".into(),
            architecture: "amd64".into(),
            variant: None,
        };
        assert_eq!(
            select_platform("r", &list, &amd)
                .map(|d| d.digest.as_str())
                .ok(),
            Some("sha256:a2")
        );
        let s390 = Platform {
            architecture: "s390x".into(),
            ..amd
        };
        let err = select_platform("r", &list, &s390)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "r: the image index has no manifest for linux/s390x (it has: linux/arm64/v8, linux/amd64)"
            )
        );
    }

    #[test]
    fn media_types_are_read_or_told_by_shape() {
        let untyped = br#"{"schemaVersion":2,"manifests":[]}"#;
        assert!(matches!(
            read_manifest("r", &d(), untyped, None),
            Ok((OCI_INDEX, ManifestOrIndex::Index(_)))
        ));
        // Content to copy: a config of any type is read, and refused only to run.
        let artifact = br#"{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",
          "config":{"mediaType":"application/vnd.in-toto+json","digest":"sha256:aa"},"layers":[]}"#;
        assert!(matches!(
            read_manifest("r", &d(), artifact, None),
            Ok((DOCKER_MANIFEST, ManifestOrIndex::Manifest(_)))
        ));
        assert!(matches!(
            parse_manifest("r", &d(), artifact, None),
            Err(OciError::UnsupportedMediaType {
                kind: BlobKind::Config,
                ..
            })
        ));
    }

    #[test]
    fn unknown_layer_type_is_refused() {
        let m = br#"{"schemaVersion":2,"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:aa"},
          "layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+lz4","digest":"sha256:bb"}]}"#;
        assert!(matches!(
            parse_manifest("r", &d(), m, None),
            Err(OciError::UnsupportedMediaType {
                kind: BlobKind::Layer,
                ..
            })
        ));
    }

    #[test]
    fn config_fields() {
        let c = br#"{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/bin/sh"],"Cmd":["-c","x"],
          "Env":["A=1"],"WorkingDir":"/w","User":"1:2","ExposedPorts":{"8080/tcp":{}}},
          "rootfs":{"type":"layers","diff_ids":["sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"]}}"#;
        let Ok(cfg) = ImageConfig::parse(&d(), c) else {
            panic!("config did not parse")
        };
        assert_eq!(cfg.entrypoint, ["/bin/sh"]);
        assert_eq!(cfg.cmd, ["-c", "x"]);
        assert_eq!(cfg.working_dir, "/w");
        assert_eq!(cfg.user, "1:2");
        assert_eq!(cfg.exposed_ports, ["8080/tcp"]);
        assert_eq!(cfg.diff_ids.len(), 1);
        // A config with nulls (as Docker writes) parses too.
        let c = br#"{"config":{"Entrypoint":null,"Cmd":null,"Env":null}}"#;
        assert!(ImageConfig::parse(&d(), c).is_ok());
    }

    mod property {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Whatever a registry sends, parsing returns a value or an error, never a panic.
            #[test]
            fn documents_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256), text in ".{0,80}") {
                let _ = parse_manifest("r", &d(), &bytes, None);
                let _ = parse_manifest("r", &d(), text.as_bytes(), Some(&text));
                let _ = ImageConfig::parse(&d(), &bytes);
                let _ = ImageConfig::parse(&d(), text.as_bytes());
                let _ = Digest::parse(&text);
                let manifests = [Descriptor { media_type: String::new(), digest: text.clone(), size: None, platform: None }];
                let _ = select_platform("r", &manifests, &Platform::host());
            }
        }
    }
}
