//! The server's chores beside the controller: code snapshots no revision names collected, and
//! the generated observability files written.

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

/// Removes, every ten minutes, the code snapshots no revision names (see
/// [`SourceStore::collect`]); the first pass a minute after the start.
pub(crate) async fn collect_sources(
    store: Arc<dyn Store>,
    sources: SourceStore,
    mut stopped: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut wait = Duration::from_secs(60);
    loop {
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => return Ok(()),
            () = tokio::time::sleep(wait) => {}
        }
        wait = Duration::from_secs(600);
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
