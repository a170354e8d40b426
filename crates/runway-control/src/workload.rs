//! What the driver is given to run a revision: its workload, with its secrets opened just
//! before its replicas start. And whether they may start at all: a plain process only while
//! the operator or its service allows processes.

use std::collections::BTreeMap;

use runway_driver::Workload;
use runway_secrets::{Context, Sealed, Sealer};
use runway_store::{Revision, Service, Store};

use crate::revision::RevisionInfo;

/// The revision's workload for the driver: its settings, its pinned image (its mirror's copy in
/// the platform registry at `registry_host`, when it has one) or code snapshot, and `secrets`
/// (the values of those it pins, or none when only stopping replicas). The error says why it
/// can never run, and holds no secret value.
pub(crate) fn workload(
    info: &RevisionInfo,
    service: &Service,
    secrets: BTreeMap<String, String>,
    registry_host: Option<&str>,
) -> Result<Workload, String> {
    let config = info.config.as_ref().map_err(Clone::clone)?;
    let record = &info.record;
    let source = runway_store::artifact_source(&record.artifact).map(str::to_owned);
    if source.is_none()
        && let Some(dir) = record.artifact.get("source_dir").and_then(|d| d.as_str())
    {
        return Err(format!(
            "it was deployed before code snapshots, to run from {dir} as it is now: deploy it \
             again"
        ));
    }
    Ok(Workload {
        service: record.service.clone(),
        service_id: service.id,
        env: record.env.clone(),
        revision: record.name.clone(),
        config: config.clone(),
        image: info.image(registry_host),
        source,
        secrets,
        secret_versions: record.secret_versions.clone(),
        identity: None,
    })
}

/// Whether a revision may start replicas: a plain process only while the operator's rules or
/// its service allow it. The API refuses a new one; this refuses to start (or restart, or
/// scale up) one deployed before the leave was taken back.
pub(crate) fn may_start(
    info: &RevisionInfo,
    service: &Service,
    allow_all: bool,
) -> Result<(), String> {
    if info.is_process() && !allow_all && !service.allow_processes {
        return Err(format!(
            "{} may not run plain processes on this server (no longer allowed): deploy an \
             image, or have an admin allow processes for it",
            service.name
        ));
    }
    Ok(())
}

/// What starting replicas of the revision reads from the store: its secrets' values (see
/// [`open_secrets`]) and its service's identity.
pub(crate) fn start_inputs(
    store: &dyn Store,
    sealer: &Sealer,
    revision: &Revision,
) -> Result<(BTreeMap<String, String>, Service), String> {
    let service = store.service_get(&revision.service).map_err(|e| {
        format!(
            "service {} cannot be read: {}",
            revision.service,
            runway_log::chain(&e)
        )
    })?;
    Ok((open_secrets(store, sealer, revision)?, service))
}

/// The values of the secrets the revision pins, by name, opened with the master key. The
/// error names the secret and its version, never a value.
fn open_secrets(
    store: &dyn Store,
    sealer: &Sealer,
    revision: &Revision,
) -> Result<BTreeMap<String, String>, String> {
    let mut values = BTreeMap::new();
    // A preview's secrets are its parent's, for `preview`.
    let owner = runway_secrets::preview::owner(&revision.service);
    for (name, &version) in &revision.secret_versions {
        let what = format!("secret {name} version {version}");
        let stored = store
            .secret_read(owner, &revision.env, name, version)
            .map_err(|e| format!("{what} cannot be read: {}", runway_log::chain(&e)))?;
        let sealed = Sealed {
            nonce: stored.nonce.clone(),
            ciphertext: stored.ciphertext.clone(),
        };
        let context = Context {
            service: owner,
            env: &revision.env,
            name,
            version: u64::from(version),
        };
        let value = sealer
            .open(&sealed, &context)
            .map_err(|e| format!("{what} cannot be opened: {e}"))?;
        let text = String::from_utf8(value.expose().to_vec())
            .map_err(|_| format!("{what} is not UTF-8 text"))?;
        values.insert(name.clone(), text);
    }
    Ok(values)
}
