//! `spec.workload.build`: `runway deploy` builds the service's image from the repository's
//! files on the base image (`runway_oci::build`, no Docker), pushes it to the platform registry
//! (`<server>/<service>/build`) with the caller's token, and deploys it by digest. The base's
//! layers are uploaded once: the registry is asked first, so a change of code uploads only the
//! files' layer, the config and the manifest.

use std::path::{Path, PathBuf};

use anyhow::Context;
use runway_manifest::Build;
use runway_oci::source::{PackOptions, human_bytes};
use runway_oci::{Credentials, PullOptions, Store};

use crate::config::Resolved;

/// The largest set of files a build packs, uncompressed.
const MAX_BUILD_BYTES: u64 = runway_oci::source::DEFAULT_MAX_SOURCE_BYTES;

/// Where the base images' blobs are kept between builds: `$XDG_CACHE_HOME/runway/images`, else
/// `~/.cache/runway/images`, else the system's temporary directory's `runway-images`.
fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("runway/images");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => PathBuf::from(home).join(".cache/runway/images"),
        None => std::env::temp_dir().join("runway-images"),
    }
}

/// The platform registry's `host:port` at `server` (the API's URL), and whether it is plain
/// HTTP.
fn registry_of(server: &str) -> anyhow::Result<(String, bool)> {
    let url = crate::api::server_url(server)?;
    let host = url
        .host_str()
        .with_context(|| format!("the server URL {server} names no host"))?;
    let port = url
        .port_or_known_default()
        .with_context(|| format!("the server URL {server} names no port"))?;
    Ok((format!("{host}:{port}"), url.scheme() == "http"))
}

/// Builds `service`'s image as `build` says from the files under `root`, pushes it to the
/// platform registry of `settings`' server, and returns its reference pinned by digest.
/// Progress goes to stderr.
pub(crate) async fn build_and_push(
    settings: &Resolved,
    service: &str,
    root: &Path,
    build: &Build,
    port: Option<u16>,
) -> anyhow::Result<String> {
    let workdir = build.workdir.clone().unwrap_or_else(|| "/app".to_owned());
    let options = PackOptions {
        prefix: Some(PathBuf::from(workdir.trim_start_matches('/'))),
        include: build
            .include
            .as_ref()
            .map(|paths| paths.iter().map(PathBuf::from).collect()),
        without_runway_dir: true,
    };
    let code = runway_oci::source::pack_with(root, MAX_BUILD_BYTES, &options)
        .with_context(|| format!("cannot pack the files in {}", root.display()))?;
    for skipped in &code.skipped {
        eprintln!("runway: left out of the image: {skipped}");
    }
    let (host, plain_http) = registry_of(&settings.server)?;
    let mut pull = PullOptions::default();
    pull.registry_credentials.insert(
        host.clone(),
        Credentials::Basic {
            username: "runway".to_owned(),
            password: settings.token.clone(),
        },
    );
    if plain_http {
        pull.insecure_registries.push(host.clone());
    }
    if let Some(ca) = &settings.ca {
        pull.extra_roots = std::fs::read(ca)
            .with_context(|| format!("cannot read the CA file {}", ca.display()))?;
    }
    let cache = cache_dir();
    let store = Store::open(&cache)
        .with_context(|| format!("cannot prepare the image cache in {}", cache.display()))?;
    eprintln!(
        "runway: building {service} on {} ({} files, {} compressed)...",
        build.base,
        code.files,
        human_bytes(code.gzip.len() as u64)
    );
    let created_by = format!("runway deploy: {service}");
    let spec = runway_oci::build::BuildSpec {
        base: &build.base,
        command: &build.command,
        workdir: &workdir,
        port,
        created_by: &created_by,
    };
    let built = runway_oci::build::build(&store, &spec, &code, &pull)
        .await
        .with_context(|| format!("cannot build on the base image {}", build.base))?;
    let target = format!("{host}/{service}/build");
    let pushed = store
        .push(
            &target,
            &built.blobs,
            &built.manifest,
            built.media_type,
            &pull,
        )
        .await
        .with_context(|| format!("cannot push the image to {target}"))?;
    eprintln!(
        "runway: pushed {} ({} uploaded in {} blobs, {} already there)",
        pushed.pinned,
        human_bytes(pushed.uploaded.1),
        pushed.uploaded.0,
        pushed.reused
    );
    Ok(pushed.pinned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_is_the_servers_host_and_port() {
        assert_eq!(
            registry_of("https://runway.example.com").unwrap(),
            ("runway.example.com:443".to_owned(), false)
        );
        assert_eq!(
            registry_of("https://127.0.0.1:7443/").unwrap(),
            ("127.0.0.1:7443".to_owned(), false)
        );
        assert_eq!(
            registry_of("http://localhost:7443").unwrap(),
            ("localhost:7443".to_owned(), true)
        );
    }
}
