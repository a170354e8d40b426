//! The server's chores beside the controller: code snapshots and images no revision names
//! collected, previews past their time decommissioned, and the generated observability files
//! written.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use runway_oci::source::SourceStore;
use runway_store::Store;
use tokio::sync::watch;

use crate::config::ObservabilityConfig;

/// How long an uploaded snapshot no revision names is kept: its deploy may be on its way.
const SOURCE_GRACE: Duration = Duration::from_secs(3600);
/// How long a blob fetched for the mirror is kept in the image cache before it is known to be
/// in the registry: its mirror may be on its way.
const CACHE_GRACE: Duration = Duration::from_secs(3600);

/// Removes, every ten minutes, the code snapshots no revision names (see
/// [`SourceStore::collect`]); the first pass a minute after the start.
pub(crate) async fn collect_sources(
    store: Arc<dyn Store>,
    sources: SourceStore,
    stopped: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    every_ten_minutes(stopped, || async {
        let (store, sources) = (Arc::clone(&store), sources.clone());
        let pass = tokio::task::spawn_blocking(move || -> anyhow::Result<usize> {
            let mut services = std::collections::BTreeSet::new();
            let mut keep = std::collections::BTreeSet::new();
            for service in store.service_list()? {
                services.insert(service.id);
                for env in &service.environments {
                    for revision in store.revision_list(&service.name, env)? {
                        if let Some(digest) = runway_store::artifact_source(&revision.artifact) {
                            keep.insert((service.id, digest.to_owned()));
                        }
                    }
                }
            }
            Ok(sources.collect(&services, &keep, SOURCE_GRACE)?)
        })
        .await;
        match pass {
            Ok(Ok(0)) => {}
            Ok(Ok(removed)) => tracing::info!(removed, "unused code snapshots removed"),
            Ok(Err(e)) => tracing::warn!(
                error = runway_log::chain(e.as_ref()),
                "cannot collect code snapshots"
            ),
            Err(e) => tracing::warn!(error = %e, "cannot collect code snapshots"),
        }
    })
    .await
}

/// The actor the audit log names for a preview decommissioned at the end of its life.
const PREVIEW_REAPER: &str = "runway (preview expired)";

/// Decommissions, every `min(ttl, 30 s)`, each preview whose time has passed (its last deploy
/// more than `api.previews.ttl_seconds` ago), and wakes `wake` so its instances stop. A
/// replica that does not lead writes nothing (its store is fenced): the leader's pass does it.
pub(crate) async fn expire_previews(
    store: Arc<dyn Store>,
    ttl: Duration,
    wake: impl Fn() + Send + 'static,
    mut stopped: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let period = ttl.clamp(Duration::from_secs(1), Duration::from_secs(30));
    loop {
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => return Ok(()),
            () = tokio::time::sleep(period) => {}
        }
        let store = Arc::clone(&store);
        let pass = tokio::task::spawn_blocking(move || expire_previews_once(store.as_ref())).await;
        match pass {
            Ok(Ok(expired)) if expired.is_empty() => {}
            Ok(Ok(expired)) => {
                tracing::info!(previews = ?expired, "previews past their time decommissioned");
                wake();
            }
            Ok(Err(
                runway_store::StoreError::NotLeading | runway_store::StoreError::Fenced { .. },
            )) => {}
            Ok(Err(e)) => tracing::warn!(
                error = runway_log::chain(&e),
                "cannot decommission the previews past their time"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "cannot decommission the previews past their time")
            }
        }
    }
}

/// Renews every running revision's identity token at start, then a third of the way through
/// its lifetime, so a replica always holds one with most of its life left, until `stopped`.
pub(crate) async fn renew_identities(
    controller: Arc<runway_control::Controller<crate::driver::ServerDriver>>,
    lifetime: Duration,
    mut stopped: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let period = (lifetime / 3).max(Duration::from_secs(1));
    loop {
        // First at start: after an outage longer than a token's life, the instances it adopts
        // hold expired ones.
        match controller.renew_identities().await {
            Ok(renewed) => tracing::debug!(revisions = renewed, "identity tokens renewed"),
            Err(e) => tracing::warn!(
                error = runway_log::chain(&e),
                "cannot renew the instances' identity tokens"
            ),
        }
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => return Ok(()),
            () = tokio::time::sleep(period) => {}
        }
    }
}

/// One pass of [`expire_previews`]: the previews it decommissioned.
pub(crate) fn expire_previews_once(store: &dyn Store) -> runway_store::Result<Vec<String>> {
    let now = runway_store::Timestamp::now();
    let mut expired = Vec::new();
    for preview in store.preview_list(None)? {
        if preview.expires_at > now {
            continue;
        }
        match store.service_decommission(PREVIEW_REAPER, &preview.service) {
            // Stopped by hand meanwhile.
            Ok(()) | Err(runway_store::StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        expired.push(preview.service);
    }
    Ok(expired)
}

/// Runs `pass` a minute after the start, then every ten minutes, until `stopped`.
async fn every_ten_minutes<F, P>(mut stopped: watch::Receiver<bool>, pass: P) -> anyhow::Result<()>
where
    P: Fn() -> F,
    F: std::future::Future<Output = ()>,
{
    let mut wait = Duration::from_secs(60);
    loop {
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => return Ok(()),
            () = tokio::time::sleep(wait) => {}
        }
        wait = Duration::from_secs(600);
        pass().await;
    }
}

/// Collects, every ten minutes (the first pass a minute after the start), the platform
/// registry's images that no revision refers to and no tag names, once older than
/// `retention` (see `runway_registry::Registry::collect`); then, when images are mirrored,
/// drops from the image cache `cache` (where the mirror fetches to, its blobs hard links of
/// the registry's) every blob older than an hour that the registry no longer holds, so the
/// space is freed.
pub(crate) async fn collect_images(
    store: Arc<dyn Store>,
    registry: Arc<runway_registry::Registry>,
    cache: Option<PathBuf>,
    retention: Duration,
    stopped: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    every_ten_minutes(stopped, || async {
        match collect_images_once(&store, &registry, cache.as_deref(), retention).await {
            Ok(collected) if collected.manifests + collected.blobs == 0 => {}
            Ok(collected) => tracing::info!(
                manifests = collected.manifests,
                blobs = collected.blobs,
                bytes = collected.bytes,
                "unused images collected from the platform registry"
            ),
            Err(e) => tracing::warn!(
                error = runway_log::chain(e.as_ref()),
                "cannot collect the platform registry's unused images"
            ),
        }
    })
    .await
}

/// One pass of [`collect_images`].
pub(crate) async fn collect_images_once(
    store: &Arc<dyn Store>,
    registry: &Arc<runway_registry::Registry>,
    cache: Option<&Path>,
    retention: Duration,
) -> anyhow::Result<runway_registry::Collected> {
    let store = Arc::clone(store);
    let keep = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let mut keep = std::collections::BTreeSet::new();
        for service in store.service_list()? {
            for env in &service.environments {
                for revision in store.revision_list(&service.name, env)? {
                    // Its mirror, and the image itself when it is in this registry (a revision
                    // recorded with the mirror off runs it from there): `repository@digest`
                    // after the registry's host, whatever names it.
                    let artifact = &revision.artifact;
                    let image = runway_store::artifact_image(artifact)
                        .and_then(|image| image.split_once('/'))
                        .map(|(_, rest)| rest);
                    for pinned in [runway_store::artifact_mirror(artifact), image]
                        .into_iter()
                        .flatten()
                    {
                        if let Some((repository, digest)) = pinned.split_once('@')
                            && let Ok(digest) = runway_registry::Digest::parse(digest)
                        {
                            keep.insert((repository.to_owned(), digest));
                        }
                    }
                }
            }
        }
        Ok(keep)
    })
    .await??;
    let collected = registry
        .collect(&runway_registry::Collect {
            keep,
            grace: retention,
        })
        .await?;
    // The cache's blobs the registry no longer has (each was a link of its copy), but those
    // of a mirror in progress.
    if let Some(cache) = cache {
        let (cache, registry) = (cache.to_owned(), Arc::clone(registry));
        tokio::task::spawn_blocking(move || sweep_cache(&cache, &registry)).await?;
    }
    Ok(collected)
}

/// Removes from the image cache `cache` every blob older than [`CACHE_GRACE`] that `registry`
/// does not hold.
fn sweep_cache(cache: &Path, registry: &runway_registry::Registry) {
    let entries = std::fs::read_dir(cache.join("blobs/sha256")).ok();
    for entry in entries.into_iter().flatten().flatten() {
        let name = entry.file_name();
        let held = name
            .to_str()
            .and_then(|hex| runway_registry::Digest::parse(&format!("sha256:{hex}")).ok())
            .is_some_and(|digest| registry.contains(&digest));
        let recent = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|at| at.elapsed().ok())
            .is_none_or(|age| age < CACHE_GRACE);
        if !held && !recent {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Writes the generated rule file and dashboards to `dir` every `interval_ms` when they
/// changed (each file replaced whole, by a rename), and removes the dashboards of services
/// that serve no more. A failure is logged and tried again at the next pass.
pub(crate) async fn write_observability(
    store: Arc<dyn Store>,
    dir: PathBuf,
    config: ObservabilityConfig,
    mut stopped: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let every = Duration::from_millis(config.interval_ms.max(100));
    loop {
        let (store, into, base) = (Arc::clone(&store), dir.clone(), config.runbook_base.clone());
        let pass = tokio::task::spawn_blocking(move || -> anyhow::Result<bool> {
            let dir = into;
            let slos = runway_api::observability::slos(store.as_ref(), base.as_deref(), None)
                .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
            let generated = runway_api::observability::generate(&slos)
                .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
            let dashboards = dir.join("dashboards");
            std::fs::create_dir_all(&dashboards)
                .with_context(|| format!("cannot make {}", dashboards.display()))?;
            let mut changed = replace_if_changed(&dir.join("runway.rules.yml"), &generated.rules)?;
            for (service, dashboard) in &generated.dashboards {
                let text = format!("{:#}\n", dashboard);
                changed |= replace_if_changed(&dashboards.join(format!("{service}.json")), &text)?;
            }
            // Only dashboards Runway wrote (their uid is the service's) are removed: the
            // directory may be Grafana's, holding others'.
            for entry in std::fs::read_dir(&dashboards)? {
                let path = entry?.path();
                let Some(service) = path.file_stem().and_then(|s| s.to_str()) else {
                    continue;
                };
                let ours = || {
                    std::fs::read_to_string(&path)
                        .ok()
                        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
                        .is_some_and(|d| {
                            d["uid"] == runway_render::observability::dashboard_uid(service)
                        })
                };
                let stale = !generated.dashboards.contains_key(service);
                if stale && path.extension().is_some_and(|e| e == "json") && ours() {
                    std::fs::remove_file(&path)?;
                    changed = true;
                }
            }
            Ok(changed)
        })
        .await;
        match pass {
            Ok(Ok(true)) => tracing::info!(dir = %dir.display(), "observability files written"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!(
                error = format!("{e:#}"),
                "cannot write the observability files"
            ),
            Err(e) => tracing::warn!(error = %e, "cannot write the observability files"),
        }
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => return Ok(()),
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// Replaces `path` with `text` (written beside it, then renamed) unless it holds it already.
fn replace_if_changed(path: &Path, text: &str) -> anyhow::Result<bool> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(false);
    }
    // A name of this process's own: replicas sharing the directory never rename each
    // other's half-written file into place.
    let temporary = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&temporary, text)
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::rename(&temporary, path)
        .with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::collections::{BTreeMap, BTreeSet};
    use std::time::SystemTime;

    use runway_registry::{Digest, Limits, OCI_MANIFEST, Registry};
    use runway_store::{NewRevision, NewService, PlannedRevision, RevisionRef, SqliteStore};
    use serde_json::json;

    use super::*;

    /// Puts an image (a config and one layer, `seed` making it unique) into `repository`.
    async fn image(registry: &Registry, dir: &Path, repository: &str, seed: &str) -> Digest {
        let mut descriptors = Vec::new();
        for (kind, bytes) in [
            ("config", format!("{{\"seed\":\"{seed}\"}}")),
            ("layer", seed.repeat(100)),
        ] {
            let digest = Digest::of(bytes.as_bytes());
            let path = dir.join(digest.hex());
            std::fs::write(&path, &bytes).unwrap();
            registry.put_blob(repository, &digest, &path).await.unwrap();
            descriptors.push((kind, digest, bytes.len()));
        }
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": descriptors[0].1.to_string(), "size": descriptors[0].2},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": descriptors[1].1.to_string(), "size": descriptors[1].2}],
        })
        .to_string();
        let digest = Digest::of(manifest.as_bytes());
        registry
            .put_manifest(
                repository,
                &digest.to_string(),
                OCI_MANIFEST,
                manifest.as_bytes(),
            )
            .await
            .unwrap()
    }

    /// What a revision's mirror refers to stays; an image no revision refers to goes, and so
    /// does a decommissioned service's; the image cache loses what the registry no longer
    /// holds, once it is old.
    #[tokio::test]
    async fn images_no_revision_refers_to_are_collected() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
        let registry =
            Arc::new(Registry::open(&dir.path().join("registry"), Limits::default()).unwrap());
        let blobs = dir.path().join("blobs");
        std::fs::create_dir_all(&blobs).unwrap();
        store
            .service_create(
                "admin",
                &NewService {
                    name: "hello".into(),
                    owners: vec!["team@example.com".into()],
                    environments: vec!["dev".into()],
                    team: None,
                },
            )
            .unwrap();
        let running = image(&registry, &blobs, "hello/mirror", "running").await;
        let orphan = image(&registry, &blobs, "hello/mirror", "orphan").await;
        // Another service's revision, recorded with the mirror off, runs its build from here.
        let built = image(&registry, &blobs, "other/build", "built").await;
        let deploy = |service: &str, artifact: serde_json::Value| {
            store
                .record_deploy(
                    "admin",
                    &NewRevision {
                        service: service.into(),
                        env: "dev".into(),
                        manifest: json!({}),
                        artifact,
                        env_vars: BTreeMap::new(),
                        set_vars: BTreeSet::new(),
                        secret_versions: BTreeMap::new(),
                    },
                    &[PlannedRevision {
                        revision: RevisionRef::New,
                        instances: 1,
                        weight: 100,
                    }],
                )
                .unwrap();
        };
        store
            .service_create(
                "admin",
                &NewService {
                    name: "other".into(),
                    owners: vec!["team@example.com".into()],
                    environments: vec!["dev".into()],
                    team: None,
                },
            )
            .unwrap();
        deploy(
            "hello",
            json!({
                "image": format!("upstream.example/web@{running}"),
                "mirror": format!("hello/mirror@{running}"),
            }),
        );
        deploy(
            "other",
            json!({"image": format!("runway.example:7443/other/build@{built}")}),
        );
        // The image cache: a fetched copy of a blob the registry does not hold, old, and one
        // fetched a moment ago (a mirror on its way).
        let cache = dir.path().join("images");
        std::fs::create_dir_all(cache.join("blobs/sha256")).unwrap();
        let old = Digest::of(b"old");
        let fresh = Digest::of(b"fresh");
        for digest in [&old, &fresh] {
            std::fs::write(cache.join("blobs/sha256").join(digest.hex()), "x").unwrap();
        }
        std::fs::File::options()
            .write(true)
            .open(cache.join("blobs/sha256").join(old.hex()))
            .unwrap()
            .set_modified(SystemTime::now() - 2 * CACHE_GRACE)
            .unwrap();

        // Kept a while: nothing goes before the retention.
        let none = collect_images_once(&store, &registry, Some(&cache), Duration::from_secs(3600))
            .await
            .unwrap();
        assert_eq!(none.manifests, 0);
        let collected = collect_images_once(&store, &registry, Some(&cache), Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(collected.manifests, 1, "{collected:?}");
        assert!(registry.has_manifest("hello/mirror", &running));
        assert!(registry.has_manifest("other/build", &built));
        assert!(!registry.has_manifest("hello/mirror", &orphan));
        assert!(!cache.join("blobs/sha256").join(old.hex()).exists());
        assert!(cache.join("blobs/sha256").join(fresh.hex()).exists());

        // Decommissioned: its revisions go, and its images with them.
        store.service_decommission("admin", "hello").unwrap();
        collect_images_once(&store, &registry, Some(&cache), Duration::ZERO)
            .await
            .unwrap();
        assert!(!registry.has_manifest("hello/mirror", &running));
        store.service_decommission("admin", "other").unwrap();
        collect_images_once(&store, &registry, Some(&cache), Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(registry.usage().bytes, 0, "{:?}", registry.usage());
    }
}
