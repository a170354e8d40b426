//! Images built from a directory without Docker, as ko and jib build them: the files packed as
//! one layer ([`crate::source::pack_with`]) on a base image pinned by digest, the base's
//! config with the command as entrypoint, the working directory and `PORT` set. The image is
//! the base's layers (fetched into the local cache once, pushed only where the target lacks
//! them) and the files' layer; two builds of the same files on the same base are the same
//! image, byte for byte.

use serde_json::{Value, json};

use crate::digest::Digest;
use crate::error::OciError;
use crate::source::Packed;
use crate::store::{BlobSource, Platforms, PullOptions, PushBlob, Store};

/// The OCI image manifest's media type.
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The OCI image config's media type.
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// The OCI gzip layer's media type.
const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// What to build.
#[derive(Debug, Clone)]
pub struct BuildSpec<'a> {
    /// The base image, `registry/repository@sha256:…`.
    pub base: &'a str,
    /// The entrypoint: the program and its arguments (the base's `Cmd` is cleared).
    pub command: &'a [String],
    /// The working directory, where the files are (`/app`).
    pub workdir: &'a str,
    /// `PORT` in the environment, for a service; none for a worker.
    pub port: Option<u16>,
    /// The history entry of the files' layer (`runway deploy: hello`).
    pub created_by: &'a str,
}

/// A built image: its manifest and every blob it names.
#[derive(Debug, Clone)]
pub struct Built {
    /// The image manifest (OCI), as pushed.
    pub manifest: Vec<u8>,
    /// Its media type.
    pub media_type: &'static str,
    /// Its digest.
    pub digest: Digest,
    /// The base's layers, then the config and the files' layer.
    pub blobs: Vec<PushBlob>,
    /// The files' layer: its digest and compressed size.
    pub code_layer: (Digest, u64),
}

/// Builds the image of `spec` with `code` (packed under the working directory) as its last
/// layer. The base's manifest and config are fetched into `store` (verified; its layers too,
/// the first time, to push them on).
pub async fn build(
    store: &Store,
    spec: &BuildSpec<'_>,
    code: &Packed,
    opts: &PullOptions,
) -> Result<Built, OciError> {
    let fetched = store.fetch(spec.base, Platforms::Selected, opts).await?;
    let invalid = |reason: String| OciError::InvalidReference {
        reference: spec.base.to_string(),
        reason,
    };
    let base_manifest = fetched
        .manifests
        .iter()
        .find(|m| m.digest == fetched.digest)
        .ok_or_else(|| invalid("its image manifest was not fetched".to_string()))?;
    let manifest: Value = serde_json::from_slice(&base_manifest.bytes)
        .map_err(|e| invalid(format!("its manifest is not JSON: {e}")))?;
    let config_digest = manifest["config"]["digest"]
        .as_str()
        .ok_or_else(|| invalid("its manifest names no config".to_string()))
        .and_then(Digest::parse)?;
    let config_path = fetched
        .blobs
        .iter()
        .find(|b| b.digest == config_digest)
        .map(|b| b.path.clone())
        .ok_or_else(|| invalid("its config was not fetched".to_string()))?;
    let config_bytes = tokio::fs::read(&config_path)
        .await
        .map_err(|e| OciError::io("read", &config_path, e))?;
    let base_config: Value = serde_json::from_slice(&config_bytes)
        .map_err(|e| invalid(format!("its config is not JSON: {e}")))?;

    let layer_digest = Digest::of(&code.gzip);
    let layer_size = code.gzip.len() as u64;
    let config = image_config(base_config, spec, &code.digest);
    let config_bytes = serde_json::to_vec(&config).map_err(|e| invalid(e.to_string()))?;
    let config_digest = Digest::of(&config_bytes);

    let mut layers: Vec<Value> = manifest["layers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(oci_layer)
        .collect();
    layers.push(json!({
        "mediaType": OCI_LAYER_GZIP,
        "digest": layer_digest.to_string(),
        "size": layer_size,
    }));
    let (base_name, _) = spec.base.rsplit_once('@').unwrap_or((spec.base, ""));
    let image = json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {
            "mediaType": OCI_CONFIG,
            "digest": config_digest.to_string(),
            "size": config_bytes.len(),
        },
        "layers": layers,
        "annotations": {
            "org.opencontainers.image.base.name": base_name,
            "org.opencontainers.image.base.digest": fetched.digest.to_string(),
        },
    });
    let manifest_bytes = serde_json::to_vec(&image).map_err(|e| invalid(e.to_string()))?;

    let mut blobs: Vec<PushBlob> = fetched
        .blobs
        .iter()
        .filter(|b| b.kind == crate::BlobKind::Layer)
        .map(|b| PushBlob {
            digest: b.digest.clone(),
            source: BlobSource::File(b.path.clone()),
        })
        .collect();
    blobs.push(PushBlob {
        digest: config_digest,
        source: BlobSource::Bytes(config_bytes),
    });
    blobs.push(PushBlob {
        digest: layer_digest.clone(),
        source: BlobSource::Bytes(code.gzip.clone()),
    });
    Ok(Built {
        digest: Digest::of(&manifest_bytes),
        manifest: manifest_bytes,
        media_type: OCI_MANIFEST,
        blobs,
        code_layer: (layer_digest, layer_size),
    })
}

/// The base's config with the entrypoint, working directory and `PORT` of `spec`, and the
/// files' layer (`diff_id`, the uncompressed archive's digest) and its history entry added.
fn image_config(mut config: Value, spec: &BuildSpec<'_>, diff_id: &Digest) -> Value {
    if !config["config"].is_object() {
        config["config"] = json!({});
    }
    let run = &mut config["config"];
    run["Entrypoint"] = json!(spec.command);
    if let Some(object) = run.as_object_mut() {
        object.remove("Cmd");
    }
    run["WorkingDir"] = json!(spec.workdir);
    let mut env: Vec<Value> = run["Env"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| !e.as_str().is_some_and(|e| e.starts_with("PORT=")))
        .collect();
    if let Some(port) = spec.port {
        env.push(json!(format!("PORT={port}")));
        run["ExposedPorts"] = json!({ format!("{port}/tcp"): {} });
    }
    run["Env"] = Value::Array(env);
    if !config["rootfs"]["diff_ids"].is_array() {
        config["rootfs"] = json!({"type": "layers", "diff_ids": []});
    }
    if let Some(ids) = config["rootfs"]["diff_ids"].as_array_mut() {
        ids.push(json!(diff_id.to_string()));
    }
    let entry = json!({"created_by": spec.created_by, "comment": "runway: the files"});
    match config["history"].as_array_mut() {
        Some(history) => history.push(entry),
        None => config["history"] = json!([entry]),
    }
    config
}

/// A Docker layer descriptor's media type as OCI's (the same bytes); others as they are.
fn oci_layer(mut layer: Value) -> Value {
    let oci = match layer["mediaType"].as_str() {
        Some("application/vnd.docker.image.rootfs.diff.tar.gzip") => Some(OCI_LAYER_GZIP),
        Some("application/vnd.docker.image.rootfs.diff.tar") => {
            Some("application/vnd.oci.image.layer.v1.tar")
        }
        _ => None,
    };
    if let Some(oci) = oci {
        layer["mediaType"] = json!(oci);
    }
    layer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_runs_the_command_in_the_workdir_with_port() {
        let base = json!({
            "architecture": "amd64", "os": "linux",
            "config": {"Env": ["PATH=/usr/bin", "PORT=1"], "Cmd": ["python3"]},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:aa"]},
            "history": [{"created_by": "base"}],
        });
        let command = ["python3".to_owned(), "main.py".to_owned()];
        let spec = BuildSpec {
            base: "r/p@sha256:00",
            command: &command,
            workdir: "/app",
            port: Some(8080),
            created_by: "runway deploy: hello",
        };
        let diff = Digest::of(b"code");
        let config = image_config(base, &spec, &diff);
        assert_eq!(
            config["config"]["Entrypoint"],
            json!(["python3", "main.py"])
        );
        assert!(config["config"].get("Cmd").is_none());
        assert_eq!(config["config"]["WorkingDir"], "/app");
        assert_eq!(
            config["config"]["Env"],
            json!(["PATH=/usr/bin", "PORT=8080"])
        );
        assert_eq!(config["rootfs"]["diff_ids"][1], diff.to_string());
        assert_eq!(config["history"][1]["created_by"], "runway deploy: hello");
    }

    #[test]
    fn docker_layers_become_oci_layers() {
        let layer = oci_layer(json!({
            "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
            "digest": "sha256:aa", "size": 1,
        }));
        assert_eq!(layer["mediaType"], OCI_LAYER_GZIP);
        let zstd = json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd"});
        assert_eq!(oci_layer(zstd.clone()), zstd);
    }
}
