//! The platform registry in `runway server`: opened in the data directory and served by the
//! API at `/v2/` (`runway_api::registry`), every image a deploy names mirrored into it
//! ([`Mirror`]), and what a driver needs to pull from it ([`PlatformRegistry`]).
//!
//! A deploy's image is fetched from where its reference points, verified, and put into
//! `<service>/mirror` before the revision is recorded; the revision records both references
//! and its instances run from the mirror's, so a tag moved or an image deleted upstream
//! changes nothing for a revision that exists. The local runtime mirrors the one platform it
//! runs (an index's other platforms are never fetched); Kubernetes mirrors an index whole, so
//! each node picks its own.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use runway_api::registry::{MIRROR, PullKey};
use runway_api::{ProcessImage, ResolvedImage};
use runway_oci::source::PackOptions;
use runway_oci::{BlobSource, Credentials, Digest, Platforms, PullOptions, PushBlob, Store};
use runway_registry::Registry;
use serde::{Deserialize, Serialize};

use crate::driver::settings::RuntimeConfig;

/// `registry`: the platform registry the API serves at `/v2/`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegistryConfig {
    /// Copy every image a deploy names into the platform registry (`<service>/mirror`) before
    /// its revision is recorded, and run instances from that copy (default true). Off, the
    /// runtime pulls from where the image's reference points, whenever it starts an instance.
    pub mirror: bool,
    /// The `host:port` the runtime and a cluster's nodes reach the registry at: the API as
    /// they see it, a name its certificate is for (`api.tls.hostnames`). Default: the API's
    /// listen address, a wildcard as `127.0.0.1`, which only this machine reaches.
    pub host: Option<String>,
    /// How long an image no revision refers to (nor a tag, in a repository a service pushes
    /// to) is kept before it is collected, in hours (default 168, a week).
    pub retention_hours: u64,
    /// The most bytes the registry's content may take: a push or a mirror past it is refused
    /// (507), and running services are not touched. Default: no bound but the disk's.
    pub max_bytes: Option<u64>,
    /// A registry of the operator's that mirrors are pushed to instead of the platform
    /// registry (which still serves builds and CI pushes).
    pub external: Option<ExternalMirror>,
    /// An image pinned by digest that holds what services' plain processes run on (an
    /// interpreter, the system's libraries): each process revision's code is then also built
    /// onto it as an image (the code under `/app`, its command the entrypoint) and mirrored,
    /// so a runtime that runs only images runs processes too. Needed for processes on
    /// Kubernetes; on this machine processes run from their code snapshot either way.
    pub process_base: Option<String>,
}

/// `registry.external`: the operator's registry (the GitLab container registry, Harbor) as the
/// mirror.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalMirror {
    /// Where mirrors go, `host[:port]/path`: each service's to `<repository>/<service>/mirror`,
    /// e.g. `registry.gitlab.com/acme/runway`. The server pushes there with the credentials of
    /// its docker `config.json` (`$DOCKER_CONFIG`, as for every registry it pulls from); the
    /// local runtime pulls with them too, and pods on Kubernetes with
    /// `runtime.kubernetes.image_pull_secrets`. What is kept there is that registry's own policy
    /// (GitLab's cleanup policies, Harbor's retention rules): it must keep every `mirror` tag-less
    /// manifest a revision names, or revisions lose their image as they would upstream.
    pub repository: String,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            mirror: true,
            host: None,
            retention_hours: 168,
            max_bytes: None,
            external: None,
            process_base: None,
        }
    }
}

impl RegistryConfig {
    /// How long what nothing refers to is kept.
    pub fn retention(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.retention_hours.saturating_mul(3600))
    }

    /// The registry's limits: the defaults, and `max_bytes`.
    pub fn limits(&self) -> runway_registry::Limits {
        runway_registry::Limits {
            max_total_bytes: self.max_bytes,
            ..runway_registry::Limits::default()
        }
    }
}

/// How a driver pulls from the platform registry: where it is, how it is trusted, and the
/// pull-only credentials it hands out.
#[derive(Debug, Clone)]
pub struct PlatformRegistry {
    /// `host:port`, as image references write it.
    pub host: String,
    /// Reached over plain HTTP (`api.tls.enabled: false`).
    pub plain_http: bool,
    /// The API's certificate authority (PEM), when it serves HTTPS.
    pub ca_pem: Vec<u8>,
    /// The key of its pull-only credentials.
    pub key: Arc<PullKey>,
    /// The other `host:port`s clients reach it at (the API's names with its port): an image
    /// a CI job pushed there as `runway.example.com:7443/hello/build` is fetched from `host`.
    pub aliases: Vec<String>,
    /// The external mirror's host (`registry.external`), pulled from with the operator's
    /// credentials, when there is one.
    pub external_host: Option<String>,
}

impl PlatformRegistry {
    /// `reference` with the registry's own address when it names it by another of its names.
    pub(crate) fn local(&self, reference: &str) -> String {
        match reference.split_once('/') {
            Some((registry, rest))
                if self
                    .aliases
                    .iter()
                    .any(|alias| alias.eq_ignore_ascii_case(registry)) =>
            {
                format!("{}/{rest}", self.host)
            }
            _ => reference.to_owned(),
        }
    }

    /// How `service` reads `reference`: with this registry's own address when it names it by
    /// another of its names, and with `upstream`'s options, or, in this registry, with the
    /// platform's pull credential and only from one of `service`'s own repositories.
    pub(crate) fn reach<'a>(
        &self,
        service: &str,
        reference: &str,
        upstream: &'a PullOptions,
    ) -> Result<Reach<'a>, String> {
        let reference = self.local(reference);
        let Some(path) = reference.strip_prefix(&format!("{}/", self.host)) else {
            return Ok(Reach {
                reference,
                options: Cow::Borrowed(upstream),
                platform_path: None,
            });
        };
        own_repository(service, path)?;
        Ok(Reach {
            platform_path: Some(path.to_owned()),
            options: Cow::Owned(self.pull_options(upstream.clone())),
            reference,
        })
    }

    /// `options` able to pull from this registry with the platform's pull credential: its host
    /// allowed, trusted, and the credential used there alone.
    pub fn pull_options(&self, mut options: PullOptions) -> PullOptions {
        let (username, password) = self.key.platform();
        options
            .registry_credentials
            .insert(self.host.clone(), Credentials::Basic { username, password });
        if self.plain_http {
            options.insecure_registries.push(self.host.clone());
        } else {
            options.extra_roots.extend_from_slice(&self.ca_pem);
        }
        if let Some(allowed) = &mut options.allowed_registries {
            allowed.push(self.host.clone());
            allowed.extend(self.external_host.clone());
        }
        options
    }
}

/// Refuses `reference` (a platform registry's, without its host) unless it is in one of
/// `service`'s own repositories.
fn own_repository(service: &str, reference: &str) -> Result<(), String> {
    let (repository, _) = split_reference(reference);
    if repository.split('/').next() == Some(service) {
        return Ok(());
    }
    Err(format!(
        "{repository} is not one of {service}'s repositories in the platform registry \
         ({service}/...): a service deploys only its own images from there"
    ))
}

/// How images are pulled from where their references point: the `runtime` section's
/// registries.
pub(crate) fn upstream_options(runtime: &RuntimeConfig) -> PullOptions {
    PullOptions {
        insecure_registries: runtime.insecure_registries.clone(),
        allowed_registries: Some(runtime.allowed_registries.clone()),
        ..PullOptions::default()
    }
}

/// Where an image a service names is read from ([`PlatformRegistry::reach`]).
#[derive(Debug)]
pub(crate) struct Reach<'a> {
    /// The reference, with the platform registry's own address.
    pub(crate) reference: String,
    /// What it is read with.
    pub(crate) options: Cow<'a, PullOptions>,
    /// Its repository and tag or digest in the platform registry, when it is there.
    pub(crate) platform_path: Option<String>,
}

/// The images a deploy names, copied into the platform registry.
pub struct Mirror {
    registry: Arc<Registry>,
    access: PlatformRegistry,
    /// Where images are fetched to: verified blobs, hard-linked into the registry.
    store: Arc<Store>,
    /// How images are pulled from where their references point (the `runtime` section's
    /// registries).
    upstream: PullOptions,
    /// What of an index is mirrored: the driver's choice.
    platforms: Platforms,
    /// Where mirrors are pushed instead of the platform registry (`registry.external`), and
    /// how: the operator's credentials, plain HTTP when `runtime.insecure_registries` says so.
    external: Option<(String, PullOptions)>,
    /// What processes' images are built on (`registry.process_base`).
    process_base: Option<String>,
}

impl std::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror")
            .field("host", &self.access.host)
            .field("platforms", &self.platforms)
            .field("external", &self.external.as_ref().map(|(to, _)| to))
            .finish_non_exhaustive()
    }
}

impl Mirror {
    /// A mirror into `registry`, or into the external one `config` names, fetching into
    /// `cache` with the `runtime` section's registries.
    pub fn new(
        registry: Arc<Registry>,
        access: PlatformRegistry,
        store: Arc<Store>,
        runtime: &RuntimeConfig,
        platforms: Platforms,
        config: &RegistryConfig,
    ) -> Mirror {
        let upstream = upstream_options(runtime);
        // The operator named it: no `allowed_registries` bound.
        let external = config.external.as_ref().map(|external| {
            let push = PullOptions {
                insecure_registries: runtime.insecure_registries.clone(),
                ..PullOptions::default()
            };
            (external.repository.trim_end_matches('/').to_owned(), push)
        });
        Mirror {
            registry,
            access,
            store,
            upstream,
            platforms,
            external,
            process_base: config.process_base.clone(),
        }
    }

    /// Puts `reference` into `service`'s mirror. An image in the platform registry itself is
    /// taken only from one of `service`'s own repositories (copied within the registry, or
    /// fetched to be pushed to an external mirror); any other is fetched (every blob verified)
    /// and put, or pushed. The error says what is wrong, for the deploy's caller, without the
    /// server's internals.
    pub async fn mirror(&self, service: &str, reference: &str) -> Result<ResolvedImage, String> {
        let reach = self.access.reach(service, reference, &self.upstream)?;
        let reference = reach.reference.as_str();
        let mirror = format!("{service}/{MIRROR}");
        let told = |e: runway_registry::RegistryError| {
            tracing::warn!(%service, %reference, error = %runway_log::chain(&e), "cannot mirror an image");
            told(&e)
        };
        if let Some(path) = &reach.platform_path {
            let (repository, tag_or_digest) = split_reference(path);
            if self.external.is_none() {
                let digest = self
                    .registry
                    .copy_image(repository, tag_or_digest, &mirror)
                    .await
                    .map_err(told)?;
                return Ok(ResolvedImage {
                    pinned: format!("{}/{repository}@{digest}", self.access.host),
                    mirror: Some(format!("{mirror}@{digest}")),
                });
            }
        }
        let fetched = self
            .store
            .fetch(reference, self.platforms, &reach.options)
            .await
            .map_err(|e| runway_log::chain(&e))?;
        let blobs: Vec<PushBlob> = fetched
            .blobs
            .iter()
            .map(|blob| PushBlob {
                digest: blob.digest.clone(),
                source: BlobSource::File(blob.path.clone()),
            })
            .collect();
        let manifests: Vec<_> = fetched
            .manifests
            .iter()
            .map(|m| (&m.digest, m.media_type.as_str(), m.bytes.as_slice()))
            .collect();
        let mirror = self
            .keep(service, &blobs, &manifests, &fetched.digest)
            .await?;
        Ok(ResolvedImage {
            mirror: Some(mirror),
            pinned: fetched.pinned,
        })
    }

    /// Builds the process `process` of `service` (its code snapshot unpacked at `code`) onto
    /// the process base as an image, the code under `/app`, and puts it into `service`'s mirror
    /// (or pushes it to the external one): the mirror's reference, as a deploy's revision
    /// records it; `None` without a process base. The base's layers are fetched once; the
    /// same code on the same base is the same image.
    pub async fn process_image(
        &self,
        service: &str,
        code: &Path,
        process: &ProcessImage,
    ) -> Result<Option<String>, String> {
        let Some(base) = &self.process_base else {
            return Ok(None);
        };
        let dir = code.to_owned();
        let packed = tokio::task::spawn_blocking(move || {
            let options = PackOptions {
                prefix: Some(PathBuf::from("app")),
                ..PackOptions::default()
            };
            // The snapshot was bounded when it was taken.
            runway_oci::source::pack_with(&dir, u64::MAX, &options)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| {
            tracing::warn!(%service, error = %runway_log::chain(&e), "cannot pack a code snapshot");
            "cannot pack its code snapshot (the server's log says why)".to_owned()
        })?;
        let workdir = match &process.working_dir {
            Some(dir) => format!("/app/{}", dir.trim_matches('/')),
            None => "/app".to_owned(),
        };
        let created_by = format!("runway deploy: {service} (process)");
        let spec = runway_oci::build::BuildSpec {
            base: &self.access.local(base),
            command: &process.command,
            workdir: &workdir,
            port: process.port,
            created_by: &created_by,
        };
        // The operator named the base: wherever it is, the platform registry included.
        let options = PullOptions {
            allowed_registries: None,
            ..self.access.pull_options(self.upstream.clone())
        };
        let built = runway_oci::build::build(&self.store, &spec, &packed, &options)
            .await
            .map_err(|e| {
                format!(
                    "cannot build it on the process base {base}: {}",
                    runway_log::chain(&e)
                )
            })?;
        let manifest = (&built.digest, built.media_type, built.manifest.as_slice());
        self.keep(service, &built.blobs, &[manifest], &built.digest)
            .await
            .map(Some)
    }

    /// Keeps an image as `service`'s mirror: its blobs, then its manifests in their order (an
    /// index after those it lists), pushed by digest to the external mirror or put into the
    /// platform registry. Returns the reference of `digest` there, as a revision records it.
    async fn keep(
        &self,
        service: &str,
        blobs: &[PushBlob],
        manifests: &[(&Digest, &str, &[u8])],
        digest: &Digest,
    ) -> Result<String, String> {
        let mirror = format!("{service}/{MIRROR}");
        if let Some((repository, push)) = &self.external {
            let target = format!("{repository}/{mirror}");
            let mut blobs = blobs;
            for (manifest, media_type, bytes) in manifests {
                let at = format!("{target}@{manifest}");
                self.store
                    .push(&at, blobs, bytes, media_type, push)
                    .await
                    .map_err(|e| {
                        tracing::warn!(%service, error = %runway_log::chain(&e), "cannot mirror an image");
                        format!("cannot push it to the mirror {target}: {}", runway_log::chain(&e))
                    })?;
                // Every blob went with the first.
                blobs = &[];
            }
            return Ok(format!("{target}@{digest}"));
        }
        let told = |e: runway_registry::RegistryError| {
            tracing::warn!(%service, error = %runway_log::chain(&e), "cannot mirror an image");
            told(&e)
        };
        for blob in blobs {
            match &blob.source {
                BlobSource::File(path) => self.registry.put_blob(&mirror, &blob.digest, path).await,
                BlobSource::Bytes(bytes) => {
                    let (store, bytes) = (Arc::clone(&self.store), bytes.clone());
                    let path = tokio::task::spawn_blocking(move || store.put_bytes(&bytes))
                        .await
                        .map_err(|e| e.to_string())?
                        .map_err(|e| {
                            tracing::warn!(error = %runway_log::chain(&e), "cannot keep a built image's blob");
                            "the platform registry could not store it (the server's log says why)"
                                .to_owned()
                        })?;
                    self.registry.put_blob(&mirror, &blob.digest, &path).await
                }
            }
            .map_err(told)?;
        }
        for (manifest, media_type, bytes) in manifests {
            self.registry
                .put_manifest(&mirror, &manifest.to_string(), media_type, bytes)
                .await
                .map_err(told)?;
        }
        Ok(format!("{mirror}@{digest}"))
    }
}

/// Whether `repository` can be `registry.external.repository`: a registry's host (with a dot or
/// a port, so it cannot be read as Docker Hub's, nor as a service's name) and at least one
/// path component of the distribution spec's grammar.
pub fn is_external_repository(repository: &str) -> bool {
    let Some((host, path)) = repository.trim_end_matches('/').split_once('/') else {
        return false;
    };
    host.contains(['.', ':']) && is_registry_host(host) && path.split('/').all(is_path_component)
}

/// A repository's path component: lower-case letters and digits in runs joined by `.`, `_`,
/// `__` or dashes (`[a-z0-9]+((\.|_|__|[-]+)[a-z0-9]+)*`).
fn is_path_component(component: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    // The maximal runs of anything else between them are the separators.
    let mut separators = component.split(alnum).filter(|s| !s.is_empty());
    component.starts_with(alnum)
        && component.ends_with(alnum)
        && separators.all(|s| matches!(s, "." | "_" | "__") || s.bytes().all(|b| b == b'-'))
}

/// The `host:port`s an image reference may name the platform registry by: the API's names
/// with its port (and bare, when the port is HTTPS's own, as references then write them).
pub fn aliases(hostnames: &[String], port: u16) -> Vec<String> {
    let mut aliases: Vec<String> = hostnames.iter().map(|n| format!("{n}:{port}")).collect();
    if port == 443 {
        aliases.extend(hostnames.iter().cloned());
    }
    aliases
}

/// What a deploy's caller is told of a registry error: what it says of the image, or that the
/// registry is full; never a path of the server's.
fn told(e: &runway_registry::RegistryError) -> String {
    use runway_registry::RegistryError as E;
    match e {
        E::Io { .. } | E::Body { .. } => {
            "the platform registry could not store it (the server's log says why)".to_owned()
        }
        E::ManifestUnknown { .. } => "the platform registry has no such image".to_owned(),
        other => format!("cannot copy it into the platform registry: {other}"),
    }
}

/// A reference's repository and its tag or digest (`latest` when it names neither), from
/// what follows its registry: `hello/build:1`, `hello/build@sha256:…`.
fn split_reference(rest: &str) -> (&str, &str) {
    if let Some((repository, digest)) = rest.split_once('@') {
        return (repository, digest);
    }
    match rest.rsplit_once(':') {
        Some((repository, tag)) if !tag.contains('/') => (repository, tag),
        _ => (rest, "latest"),
    }
}

/// The registry's host as the runtime and the cluster reach it: `registry.host`, else the
/// API's bound address (a wildcard as loopback).
pub fn registry_host(config: &RegistryConfig, api: std::net::SocketAddr) -> String {
    match &config.host {
        Some(host) => host.clone(),
        None => reachable(api).to_string(),
    }
}

/// Where this machine reaches a listener bound at `address`: a wildcard as loopback.
pub(crate) fn reachable(address: std::net::SocketAddr) -> std::net::SocketAddr {
    let ip = match address.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => std::net::Ipv4Addr::LOCALHOST.into(),
        ip if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    std::net::SocketAddr::new(ip, address.port())
}

/// Whether `host` can begin an image reference: a DNS name or an address, with a port or
/// not (`[::1]:7443` for IPv6).
pub fn is_registry_host(host: &str) -> bool {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') || name.ends_with(']') => (name, Some(port)),
        _ => (host, None),
    };
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
    let name_ok = match name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !name.is_empty()
                && name.split('.').all(|label| {
                    !label.is_empty()
                        && !label.starts_with('-')
                        && !label.ends_with('-')
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                })
        }
    };
    port_ok && name_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_external_mirror_is_a_registry_host_and_a_path() {
        for good in [
            "registry.gitlab.com/acme/runway",
            "harbor.example.com:8443/runway",
            "localhost:5000/a",
            "127.0.0.1:5000/mirrors/runway-1/a__b/c--d/e.f",
            "registry.example.com/runway/",
        ] {
            assert!(is_external_repository(good), "{good}");
        }
        for bad in [
            "registry.gitlab.com",
            "acme/runway",
            "localhost/runway",
            "registry.gitlab.com/Acme",
            "registry.gitlab.com/acme//runway",
            "registry.gitlab.com/-acme",
            "registry.gitlab.com/acme.",
            "registry.gitlab.com/a.-b",
            "registry.gitlab.com/a___b",
            "https://registry.gitlab.com/acme",
            "registry.gitlab.com/acme:latest",
        ] {
            assert!(!is_external_repository(bad), "{bad}");
        }
    }

    #[test]
    fn a_registry_host_is_a_name_or_address_and_a_port() {
        for good in [
            "127.0.0.1:7443",
            "runway.example.com",
            "registry:5000",
            "[::1]:7443",
        ] {
            assert!(is_registry_host(good), "{good}");
        }
        for bad in [
            "",
            "https://x",
            "x/y",
            "x:",
            "x:0",
            "x:99999",
            "-x",
            "a..b",
            "::1",
            "[zz]:1",
        ] {
            assert!(!is_registry_host(bad), "{bad}");
        }
    }

    #[test]
    fn a_reference_naming_the_api_by_another_name_is_the_registrys_own() {
        let access = PlatformRegistry {
            host: "127.0.0.1:7443".to_owned(),
            plain_http: false,
            ca_pem: Vec::new(),
            key: Arc::new(PullKey::from_bytes(&[1; 32])),
            aliases: aliases(
                &["runway.example.com".to_owned(), "localhost".to_owned()],
                7443,
            ),
            external_host: None,
        };
        assert_eq!(
            access.local("runway.example.com:7443/hello/build@sha256:ab"),
            "127.0.0.1:7443/hello/build@sha256:ab"
        );
        assert_eq!(
            access.local("LOCALHOST:7443/hello/build:1"),
            "127.0.0.1:7443/hello/build:1"
        );
        // Another port on a name of the API's is another registry.
        assert_eq!(access.local("localhost:5000/x:1"), "localhost:5000/x:1");
        assert_eq!(
            access.local("docker.io/library/x:1"),
            "docker.io/library/x:1"
        );
        assert!(aliases(&["a.example".to_owned()], 443).contains(&"a.example".to_owned()));
        assert_eq!(
            split_reference("hello/build@sha256:ab"),
            ("hello/build", "sha256:ab")
        );
        assert_eq!(split_reference("hello/build:1"), ("hello/build", "1"));
        assert_eq!(split_reference("hello/build"), ("hello/build", "latest"));
    }

    #[test]
    fn the_host_defaults_to_the_api_address_with_a_wildcard_as_loopback() {
        let config = RegistryConfig::default();
        let at = |a: &str| registry_host(&config, a.parse().unwrap());
        assert_eq!(at("0.0.0.0:7443"), "127.0.0.1:7443");
        assert_eq!(at("[::]:7443"), "[::1]:7443");
        assert_eq!(at("10.1.2.3:7443"), "10.1.2.3:7443");
        let named = RegistryConfig {
            host: Some("runway.example.com:7443".to_owned()),
            ..RegistryConfig::default()
        };
        assert_eq!(
            registry_host(&named, "0.0.0.0:1".parse().unwrap()),
            "runway.example.com:7443"
        );
    }
}
