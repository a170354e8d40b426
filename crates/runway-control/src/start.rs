//! What starting an instance of a revision takes: its secrets opened and its spec built.

use std::collections::BTreeMap;
use std::path::PathBuf;

use runway_runtime::InstanceSpec;
use runway_runtime::sandbox::SandboxPolicy;
use runway_runtime::service::{InstanceOptions, instance_spec};
use runway_runtime::spec::Artifact;
use runway_secrets::{Context, Sealed, Sealer};
use runway_store::{Revision, Service, Store};

use crate::revision::RevisionInfo;

/// Who may run plain processes, how isolated, from which code: the operator's settings.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProcessRules {
    /// Every service may (`runtime.allow_processes`); otherwise those an admin allowed.
    pub(crate) allow_all: bool,
    /// Each runs in a sandbox of its service's own ([`runway_runtime::sandbox`]); an image is
    /// isolated anyway.
    pub(crate) sandbox: Option<SandboxPolicy>,
    /// Where revisions' code snapshots are: `<dir>/<service id>/<hex>`.
    pub(crate) snapshots: Option<PathBuf>,
}

/// The spec of instance `id` of the revision, with its secrets' values, marked as the
/// platform's ([`InstanceSpec::managed`]). The error says why it can never start, and holds no
/// secret value.
///
/// A plain process starts only while the rules or its service allow it: the API refuses a new
/// one, this refuses to start (or restart, or scale up) one deployed before the leave was
/// taken back. It runs from its revision's code snapshot, in its service's sandbox when the
/// rules have one.
pub(crate) fn build_spec(
    info: &RevisionInfo,
    id: &str,
    secret_env: BTreeMap<String, String>,
    service: &Service,
    rules: &ProcessRules,
) -> Result<InstanceSpec, String> {
    let config = info.config.as_ref().map_err(Clone::clone)?;
    let code_dir = info.code_dir(service.id, rules.snapshots.as_deref())?;
    let options = InstanceOptions {
        id: id.to_owned(),
        revision: info.record.name.clone(),
        image: info.image(),
        base_dir: code_dir.clone(),
        secret_env,
    };
    let mut spec = instance_spec(config, &options).map_err(|e| e.to_string())?;
    // Marks it the platform's, so a later controller knows it even once its revision is gone.
    spec.managed = true;
    if let Artifact::Command { .. } = &spec.artifact {
        if !rules.allow_all && !service.allow_processes {
            return Err(format!(
                "{} may not run plain processes on this server (no longer allowed): deploy an \
                 image, or have an admin allow processes for it",
                service.name
            ));
        }
        if let Some(policy) = &rules.sandbox {
            spec.sandbox = Some(policy.sandbox(service.id, &code_dir)?);
        }
    }
    Ok(spec)
}

/// What starting an instance of the revision reads from the store: its secrets' values (see
/// [`open_secrets`]) and its service's identity.
pub(crate) fn start_inputs(
    store: &dyn Store,
    sealer: &Sealer,
    revision: &Revision,
) -> Result<(BTreeMap<String, String>, Service), String> {
    let service = store
        .service_get(&revision.service)
        .map_err(|e| format!("service {} cannot be read: {e}", revision.service))?;
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
    for (name, &version) in &revision.secret_versions {
        let what = format!("secret {name} version {version}");
        let stored = store
            .secret_read(&revision.service, &revision.env, name, version)
            .map_err(|e| format!("{what} cannot be read: {e}"))?;
        let sealed = Sealed {
            nonce: stored.nonce.clone(),
            ciphertext: stored.ciphertext.clone(),
        };
        let context = Context {
            service: &revision.service,
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
