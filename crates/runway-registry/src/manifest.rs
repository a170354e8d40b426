//! Manifests as the registry reads them: the media type (from `Content-Type`, checked against
//! the document's own `mediaType`), and what the document refers to: the blobs (config and
//! layers) of an image manifest, the manifests of an index, and a `subject`.

use std::collections::BTreeMap;

use runway_oci::Digest;
use serde::{Deserialize, Serialize};

use crate::error::RegistryError;

/// An OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// An OCI image index.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// A Docker image manifest, version 2 schema 2.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// A Docker manifest list.
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// What a manifest is and refers to.
#[derive(Debug)]
pub(crate) struct Parsed {
    /// One of the four media types above.
    pub(crate) media_type: &'static str,
    /// Config and layers that must be linked in the repository.
    pub(crate) blobs: Vec<Digest>,
    /// Manifests of an index that must be in the repository.
    pub(crate) manifests: Vec<Digest>,
    /// The manifest this one refers to (`subject`), which need not exist.
    pub(crate) subject: Option<Digest>,
    /// What the referrers API lists for this manifest: `artifactType`, else the config's media
    /// type (an image manifest's).
    pub(crate) artifact_type: Option<String>,
    /// The manifest's annotations.
    pub(crate) annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    schema_version: Option<serde_json::Value>,
    media_type: Option<String>,
    artifact_type: Option<String>,
    config: Option<Descriptor>,
    layers: Option<Vec<Descriptor>>,
    manifests: Option<Vec<Descriptor>>,
    subject: Option<Descriptor>,
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: i64,
}

/// An entry of a referrers list.
#[derive(Debug, Serialize, Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReferrerDescriptor {
    pub(crate) media_type: String,
    pub(crate) digest: Digest,
    pub(crate) size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) artifact_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) annotations: Option<BTreeMap<String, String>>,
}

fn known(media_type: &str) -> Option<&'static str> {
    [OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST]
        .into_iter()
        .find(|known| *known == media_type)
}

/// Layers a registry is not asked to hold (Docker's foreign layers, OCI's non-distributable
/// ones): a manifest may refer to them without their being pushed.
fn non_distributable(media_type: &str) -> bool {
    media_type.starts_with("application/vnd.oci.image.layer.nondistributable.")
        || media_type == "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
}

fn invalid(reason: impl Into<String>) -> RegistryError {
    RegistryError::ManifestInvalid {
        reason: reason.into(),
    }
}

fn digest_of(descriptor: &Descriptor, what: &str) -> Result<Digest, RegistryError> {
    if descriptor.size < 0 {
        return Err(invalid(format!("{what} has a negative size")));
    }
    Digest::parse(&descriptor.digest)
        .map_err(|_| invalid(format!("{what} has an invalid or non-sha256 digest")))
}

/// Parses `bytes` sent with `content_type` (its parameters ignored; `None` when absent).
pub(crate) fn parse(content_type: Option<&str>, bytes: &[u8]) -> Result<Parsed, RegistryError> {
    let document: Document =
        serde_json::from_slice(bytes).map_err(|e| invalid(format!("not a JSON manifest: {e}")))?;
    let content_type = content_type
        .map(|t| t.split(';').next().unwrap_or_default().trim())
        .filter(|t| !t.is_empty());
    let media_type = match (content_type, document.media_type.as_deref()) {
        (Some(header), Some(field)) if header != field => {
            return Err(invalid(format!(
                "Content-Type {header} does not match mediaType {field}"
            )));
        }
        (Some(header), _) => known(header),
        (None, Some(field)) => known(field),
        (None, None) => None,
    }
    .ok_or_else(|| {
        invalid(format!(
            "media type {:?} is not an OCI or Docker v2 image manifest or index",
            content_type
                .or(document.media_type.as_deref())
                .unwrap_or("")
        ))
    })?;
    if document.schema_version != Some(serde_json::Value::from(2)) {
        return Err(invalid("schemaVersion must be 2"));
    }
    let subject = document
        .subject
        .as_ref()
        .map(|s| digest_of(s, "subject"))
        .transpose()?;
    let mut parsed = Parsed {
        media_type,
        blobs: Vec::new(),
        manifests: Vec::new(),
        subject,
        artifact_type: document.artifact_type.clone(),
        annotations: document.annotations,
    };
    if media_type == OCI_INDEX || media_type == DOCKER_LIST {
        if document.config.is_some() || document.layers.is_some() {
            return Err(invalid("an index has no config or layers"));
        }
        let manifests = document
            .manifests
            .ok_or_else(|| invalid("an index needs manifests"))?;
        for manifest in &manifests {
            parsed.manifests.push(digest_of(manifest, "a manifest")?);
        }
    } else {
        if document.manifests.is_some() {
            return Err(invalid("an image manifest has no manifests"));
        }
        let config = document
            .config
            .ok_or_else(|| invalid("an image manifest needs a config"))?;
        let layers = document
            .layers
            .ok_or_else(|| invalid("an image manifest needs layers"))?;
        parsed.blobs.push(digest_of(&config, "the config")?);
        for layer in &layers {
            let digest = digest_of(layer, "a layer")?;
            if !non_distributable(&layer.media_type) {
                parsed.blobs.push(digest);
            }
        }
        if parsed.artifact_type.is_none() {
            parsed.artifact_type = Some(config.media_type);
        }
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn image(media_type: &str) -> String {
        format!(
            r#"{{"schemaVersion":2,"mediaType":"{media_type}","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{D}","size":0}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"{D}","size":0}},{{"mediaType":"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip","digest":"sha256:{}","size":1}}]}}"#,
            "1".repeat(64)
        )
    }

    #[test]
    fn image_manifest_refers_to_its_distributable_blobs() {
        let parsed = parse(Some(OCI_MANIFEST), image(OCI_MANIFEST).as_bytes()).ok();
        let parsed = parsed.as_ref();
        assert_eq!(parsed.map(|p| p.media_type), Some(OCI_MANIFEST));
        assert_eq!(parsed.map(|p| p.blobs.len()), Some(2));
        assert_eq!(
            parsed.and_then(|p| p.artifact_type.as_deref()),
            Some("application/vnd.oci.image.config.v1+json")
        );
    }

    #[test]
    fn refusals() {
        let cases: &[(Option<&str>, &str)] = &[
            (Some(OCI_MANIFEST), "not json"),
            (Some(OCI_INDEX), &image(OCI_MANIFEST)),
            (Some("application/json"), &image(OCI_MANIFEST)),
            (None, r#"{"schemaVersion":2}"#),
            (Some(OCI_MANIFEST), r#"{"schemaVersion":1,"layers":[]}"#),
            (Some(OCI_MANIFEST), r#"{"schemaVersion":2,"layers":[]}"#),
            (Some(OCI_INDEX), r#"{"schemaVersion":2}"#),
            (
                Some(OCI_INDEX),
                r#"{"schemaVersion":2,"manifests":[{"mediaType":"x","digest":"sha256:../../etc","size":1}]}"#,
            ),
            (
                Some("application/vnd.docker.distribution.manifest.v1+prettyjws"),
                r#"{"schemaVersion":1}"#,
            ),
        ];
        for (content_type, body) in cases {
            assert!(
                matches!(
                    parse(*content_type, body.as_bytes()),
                    Err(RegistryError::ManifestInvalid { .. })
                ),
                "{content_type:?} {body} accepted"
            );
        }
    }

    #[test]
    fn content_type_parameters_and_absence() {
        let with_charset = format!("{OCI_MANIFEST}; charset=utf-8");
        assert!(parse(Some(&with_charset), image(OCI_MANIFEST).as_bytes()).is_ok());
        assert!(parse(None, image(DOCKER_MANIFEST).as_bytes()).is_ok());
    }
}
