//! Deploy and promote: the manifest validated by `runway-manifest` (never re-implemented
//! here), the image pinned once, the secrets' latest versions, and one store call that
//! records it all; then the reconciler is woken.

use std::collections::{BTreeMap, BTreeSet};

use runway_manifest::{
    Artifact, Manifest, ServiceConfig, ServiceFiles, Severity, SourceFile, load,
};
use runway_rollout::Strategy;
use runway_secrets::{Context, Sealer, SecretValue};
use runway_store::{
    Deployment, NewRevision, PlannedRevision, Revision, RevisionRef, SecretInfo, Store, StoreError,
};
use serde_json::{Value, json};

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::ApiState;
use crate::types::{DeployRequest, PromoteRequest, VariableChanges};
use crate::vault::{VaultError, VaultSecret};

/// The name the manifest has in diagnostics.
const MANIFEST_FILE: &str = "manifest";
/// The name the environment variables have in diagnostics.
const ENV_FILE: &str = "env_vars";

/// Validates `manifest` (with `env_vars`) for `service` in `env` as `runway validate` would,
/// and gives its settings. The first error is a 422 naming its field (`manifest.spec.…`,
/// `env_vars.NAME`).
fn validate(
    service: &str,
    env: &str,
    manifest: &Value,
    env_vars: &BTreeMap<String, String>,
) -> ApiResult<ServiceConfig> {
    if !manifest.is_object() {
        return Err(
            ApiError::manifest_invalid("the manifest must be a JSON object").field("manifest"),
        );
    }
    let bounded = |field: &str, text: String| {
        if text.len() > MAX_MANIFEST_BYTES {
            return Err(ApiError::too_large(format!(
                "{field} is {} bytes as JSON, over the limit of {} KiB",
                text.len(),
                MAX_MANIFEST_BYTES / 1024
            ))
            .field(field));
        }
        Ok(text)
    };
    // JSON is YAML: the manifest crate reads it as it reads a file, with the same schema and
    // rules, and the same diagnostics.
    let files = ServiceFiles {
        id: service.to_owned(),
        base: Some(SourceFile::new(
            MANIFEST_FILE,
            bounded("manifest", json_text(manifest))?,
        )),
        overrides: BTreeMap::new(),
        env_files: BTreeMap::from([(
            env.to_owned(),
            SourceFile::new(ENV_FILE, bounded("env_vars", json_text(env_vars))?),
        )]),
    };
    let loaded = load(&files);
    if let Some(error) = loaded
        .diagnostics
        .iter()
        .find(|d| d.severity == Severity::Error)
    {
        let in_env = error
            .location
            .as_ref()
            .is_some_and(|l| &*l.file == ENV_FILE);
        let root = if in_env { ENV_FILE } else { "manifest" };
        let field = if error.path.is_empty() {
            root.to_owned()
        } else {
            format!("{root}.{}", error.path)
        };
        return Err(
            ApiError::manifest_invalid(format!("{field}: {}", error.headline())).field(field),
        );
    }
    let config = loaded
        .service
        .ok_or_else(|| ApiError::manifest_invalid("the manifest is not valid").field("manifest"))?
        .config(Some(env))
        .map_err(|e| ApiError::manifest_invalid(e.to_string()).field("manifest"))?;
    if config.name != service {
        return Err(ApiError::manifest_invalid(format!(
            "metadata.name is {:?}, but this is service {service:?}",
            config.name
        ))
        .field("manifest.metadata.name"));
    }
    Ok(config)
}

/// The largest manifest (and environment file) a deploy takes, as JSON text. Real manifests
/// are a few KiB; validation's cost grows with the size, and the request body limit is larger.
pub(crate) const MAX_MANIFEST_BYTES: usize = 256 * 1024;

/// [`validate`] on the blocking pool: a large manifest takes milliseconds of CPU that must not
/// hold up the event loop's other requests (health checks, status, log streams).
pub(crate) async fn validate_off_loop(
    service: &str,
    env: &str,
    manifest: &Value,
    env_vars: &BTreeMap<String, String>,
) -> ApiResult<ServiceConfig> {
    let (service, env, manifest, env_vars) = (
        service.to_owned(),
        env.to_owned(),
        manifest.clone(),
        env_vars.clone(),
    );
    tokio::task::spawn_blocking(move || validate(&service, &env, &manifest, &env_vars)).await?
}

/// `value` as JSON text; serializing a `Value` or a map of strings cannot fail.
fn json_text<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// How many instances a revision starts with: `max(min_instances, 1)`, so a deploy is
/// proven to start before any scaling to zero.
pub(crate) fn instances_for(config: &ServiceConfig) -> u32 {
    config.min_instances.max(1)
}

/// [`instances_for`] of a stored revision's manifest.
pub(crate) fn instances_of(manifest: &Value, env: &str) -> u32 {
    serde_json::from_value::<Manifest>(manifest.clone())
        .map(|m| {
            instances_for(&ServiceConfig::from_manifest(
                &m,
                Some(env),
                &BTreeMap::new(),
            ))
        })
        .unwrap_or(1)
}

/// The repository's variables (the request's) with those set by `runway env set` on the
/// revision `serving` laid over them: they stay until unset. Returns the request, the names
/// kept, and how its variables differ from `serving`'s.
pub(crate) fn keep_set_variables(
    mut body: DeployRequest,
    serving: Option<&Revision>,
) -> (DeployRequest, BTreeSet<String>, VariableChanges) {
    let Some(serving) = serving else {
        return (body, BTreeSet::new(), VariableChanges::default());
    };
    let mut kept = BTreeSet::new();
    for name in &serving.set_vars {
        if let Some(value) = serving.env_vars.get(name) {
            body.env_vars.insert(name.clone(), value.clone());
            kept.insert(name.clone());
        }
    }
    let changes = VariableChanges::between(
        &serving.env_vars,
        &body.env_vars,
        kept.iter().cloned().collect(),
    );
    (body, kept, changes)
}

/// A deploy that is a preview's: whose, with which environment's settings, and whether it
/// gets its parent's `preview` secrets (not when it comes from a fork).
#[derive(Debug, Clone)]
pub(crate) struct PreviewOf {
    pub(crate) parent: String,
    pub(crate) base_env: String,
    pub(crate) secrets: bool,
}

/// Sets `spec.scalability.min_instances` to 0: an idle preview runs no instance. The revision
/// keeps the manifest as changed, so what runs is what it says.
fn scale_to_zero(manifest: &mut Value) {
    let Some(spec) = manifest.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let scalability = spec.entry("scalability").or_insert_with(|| json!({}));
    if let Some(scalability) = scalability.as_object_mut() {
        scalability.insert("min_instances".to_owned(), json!(0));
    }
}

/// Records a deploy: see the module's documentation. `set_vars` are the names among the
/// request's variables set with `runway env set`, which later deploys keep.
pub(crate) async fn deploy(
    state: &ApiState,
    caller: &Caller,
    service: &str,
    env: &str,
    mut body: DeployRequest,
    set_vars: BTreeSet<String>,
    preview: Option<&PreviewOf>,
) -> ApiResult<Deployment> {
    // A preview's manifest is its parent's, for its base environment; what it builds or pulls,
    // and the secrets it reads, are its parent's too.
    let (owner, settings_env) = match preview {
        Some(p) => {
            scale_to_zero(&mut body.manifest);
            (p.parent.as_str(), p.base_env.as_str())
        }
        None => (service, env),
    };
    let config = validate_off_loop(owner, settings_env, &body.manifest, &body.env_vars).await?;
    check_rate_ceiling(state, &config)?;
    // Refused whatever the artifact (an image's ignores it), as the document says.
    if let Some(digest) = &body.source {
        crate::routes::check_digest(digest).map_err(|e| e.field("source"))?;
    }
    let strategy = Strategy::of(&config);
    if body.pause && !strategy.in_steps() {
        return Err(ApiError::invalid(format!(
            "`pause` needs a rollout in steps (deployment.strategy {}); this manifest's \
             strategy for {env} is {}, which rolls out in one step",
            in_steps(),
            strategy.name()
        ))
        .field("pause"));
    }
    let artifact = match &config.artifact {
        Artifact::Process { .. } if body.image.is_some() => {
            return Err(ApiError::invalid(format!(
                "the manifest for {env} runs a process (spec.workload.process), so `image` \
                 would not be used; remove one of them"
            ))
            .field("image"));
        }
        Artifact::Process {
            command,
            working_dir,
        } => {
            check_unsigned_allowed(state, owner, settings_env)?;
            let (name, runs_as, allow_all) =
                (owner.to_owned(), service.to_owned(), state.allow_processes);
            let (id, runs_as) = state
                .store(move |s| {
                    check_may_run_processes(s, allow_all, &name)?;
                    Ok((s.service_get(&name)?.id, s.service_get(&runs_as)?.id))
                })
                .await?;
            let digest = body.source.as_deref().ok_or_else(|| {
                ApiError::invalid(
                    "a process artifact needs `source`, the digest of its code snapshot, \
                     uploaded first with PUT /v1/services/{service}/environments/{env}/sources/\
                     {digest} (`runway deploy` does both)",
                )
                .field("source")
            })?;
            let present = state
                .platform
                .source_claim(id, digest)
                .await
                .map_err(ApiError::internal)?;
            if !present {
                return Err(ApiError::invalid(format!(
                    "{owner} has no code snapshot {digest}: upload it first with PUT \
                     /v1/services/{owner}/environments/{settings_env}/sources/{digest}"
                ))
                .field("source"));
            }
            if runs_as != id {
                // A preview's code is a snapshot of its own (its parent's, shared), kept and
                // collected with its revisions.
                state
                    .platform
                    .source_share(id, runs_as, digest)
                    .await
                    .map_err(ApiError::internal)?;
            }
            let process = crate::platform::ProcessImage {
                command: command.clone(),
                working_dir: working_dir.clone(),
                port: (config.kind == runway_manifest::WorkloadKind::Service)
                    .then_some(config.port)
                    .flatten(),
            };
            let image = state
                .platform
                .process_image(owner, id, digest, &process)
                .await
                .map_err(|e| {
                    ApiError::invalid(format!("cannot make the image of its code: {e}"))
                        .field("source")
                })?;
            match image {
                Some(mirror) => json!({ "source": digest, "mirror": mirror }),
                None => json!({ "source": digest }),
            }
        }
        Artifact::Image { reference, .. } => {
            let (reference, field) = match (&body.image, reference) {
                (Some(image), _) => (image.as_str(), "image"),
                (None, Some(reference)) => (reference.as_str(), "manifest.spec.image"),
                (None, None) => {
                    return Err(ApiError::invalid(
                        "no image to deploy: give `image`, set spec.image in the manifest, \
                         build one from the repository's files on a base image with \
                         spec.workload.build (a Dockerfile is not built), or run the code as a \
                         plain process with spec.workload.process.command, which `runway init` \
                         writes for a Python or Node app, a Procfile or a built binary",
                    )
                    .field("image"));
                }
            };
            // Verified first, then exactly the digest verified is resolved and mirrored.
            let signature = state
                .platform
                .verify_image(owner, settings_env, reference)
                .await
                .map_err(|e| {
                    ApiError::invalid(format!("image {reference:?} may not deploy to {env}: {e}"))
                        .field(field)
                })?;
            let reference = signature.as_ref().map_or(reference, |s| s.pinned.as_str());
            let image = state
                .platform
                .resolve_image(owner, reference)
                .await
                .map_err(|e| {
                    ApiError::invalid(format!("cannot resolve image {reference:?}: {e}"))
                        .field(field)
                })?;
            let mut artifact = json!({ "image": image.pinned });
            if let Some(mirror) = image.mirror {
                artifact["mirror"] = json!(mirror);
            }
            if let Some(signature) = signature {
                artifact["signature"] = json!(signature.by);
            }
            artifact
        }
    };
    // A preview reads its parent's `preview` secrets; one from a fork reads none.
    let no_secrets = preview.is_some_and(|p| !p.secrets);
    let declared = if no_secrets {
        Vec::new()
    } else {
        config.secrets.clone()
    };
    let from_vault = read_vault(state, owner, env, &declared).await?;
    let instances = instances_for(&config);
    let max_instances = config.max_instances.max(instances);
    let dry_run = strategy.is_dry_run();
    let pause = body.pause;
    let withheld = if no_secrets {
        config.secrets.clone()
    } else {
        Vec::new()
    };
    let (service, env, actor) = (service.to_owned(), env.to_owned(), caller.name.clone());
    let owner = owner.to_owned();
    let env_names: Vec<String> = config.env.keys().cloned().collect();
    let revision = NewRevision {
        service: service.clone(),
        env: env.clone(),
        manifest: body.manifest,
        artifact,
        env_vars: body.env_vars,
        set_vars,
        secret_versions: BTreeMap::new(),
    };
    let allow_all = state.allow_processes;
    let sealer = std::sync::Arc::clone(&state.sealer);
    let deployment = state
        .store(move |s| {
            check_processes_allowed(s, allow_all, &owner, &revision.artifact)?;
            let current = s
                .desired_get(&service, &env)?
                .map(|d| d.revisions)
                .unwrap_or_default();
            // Nothing serving yet (none, or only a dry run's revision): a first deploy.
            if pause && current.iter().all(|r| r.weight == 0) {
                return Err(ApiError::invalid(format!(
                    "`pause`: this is the first deploy of {service} to {env}, which goes \
                     straight to 100 % (there is no revision to step from)"
                ))
                .field("pause"));
            }
            // Only once the request's own checks pass: what Vault holds becomes the sealed
            // store's latest version (a refusal below, a clash or a missing secret, leaves
            // that mirror, Vault's current values, in place).
            let mirrored = mirror(s, &sealer, &actor, [&owner, &env], from_vault)?;
            let secrets = s.secret_list(&owner, &env)?;
            let mut revision = revision;
            // Only what the manifest names: a secret set for the service but not used stays
            // out of the revision and of its instances' environment.
            revision.secret_versions = secrets
                .iter()
                .filter(|i| declared.contains(&i.name))
                .map(|i| (i.name.clone(), i.version))
                .collect();
            if let Err(clashes) =
                runway_secrets::check_clashes(revision.secret_versions.keys(), &env_names)
            {
                return Err(ApiError::invalid(format!(
                    "{} set both as a secret and as an environment variable; remove one",
                    clashes.join(", ")
                ))
                .field("env_vars"));
            }
            if let Some(missing) = declared
                .iter()
                .find(|n| !revision.secret_versions.contains_key(*n))
            {
                return Err(ApiError::invalid(format!(
                    "the manifest uses secret {missing} but it is not set for {owner} in {env}"
                ))
                .field("manifest.spec.workload.secrets"));
            }
            let desired = if dry_run {
                // A dry run records the revision and its plan and changes nothing: the desired
                // state stays as it is, the new revision in it with no instances or traffic.
                current
                    .into_iter()
                    .map(|r| PlannedRevision {
                        revision: RevisionRef::Named(r.revision),
                        instances: r.instances,
                        weight: r.weight,
                    })
                    .chain([PlannedRevision {
                        revision: RevisionRef::New,
                        instances: 0,
                        weight: 0,
                    }])
                    .collect()
            } else {
                // The new revision starts with the capacity serving now, so taking all the
                // traffic does not overload it while the autoscaler catches up.
                let serving_now = current.iter().map(|r| r.instances).max().unwrap_or(0);
                vec![PlannedRevision {
                    revision: RevisionRef::New,
                    instances: instances.max(serving_now.min(max_instances)),
                    weight: 100,
                }]
            };
            let record = s.record_deploy(&actor, &revision, &desired)?;
            if let Some(event) = mirrored {
                s.deployment_add_event(&actor, record.deployment.id, &event)?;
            }
            if !withheld.is_empty() {
                let event = format!(
                    "a merge request from a fork: its preview runs without the secrets its \
                     manifest uses ({})",
                    withheld.join(", ")
                );
                s.deployment_add_event(&actor, record.deployment.id, &event)?;
            }
            if pause {
                return Ok(s.deployment_command(
                    &actor,
                    &service,
                    &env,
                    runway_store::RolloutCommand::Pause,
                )?);
            }
            Ok(record.deployment)
        })
        .await?;
    log_recorded(&deployment);
    state.platform.wake();
    Ok(deployment)
}

/// Refuses what no one can sign (a process's code) where the server's signature rules cover
/// `service` in `env`.
/// A manifest's per-client rate limit may be lower than the operator's ceiling, not higher:
/// 422 naming the field and the ceiling.
fn check_rate_ceiling(state: &ApiState, config: &ServiceConfig) -> ApiResult<()> {
    let (Some(ceiling), Some(asked)) = (state.client_rate_ceiling, config.traffic.per_client)
    else {
        return Ok(());
    };
    let field = "manifest.spec.workload.rate_limit.per_client";
    let over = if asked.requests_per_second > ceiling.requests_per_second {
        Some((
            "requests_per_second",
            asked.requests_per_second.to_string(),
            ceiling.requests_per_second.to_string(),
        ))
    } else if asked.burst > ceiling.burst {
        Some(("burst", asked.burst.to_string(), ceiling.burst.to_string()))
    } else {
        None
    };
    match over {
        Some((name, asked, most)) => Err(ApiError::manifest_invalid(format!(
            "{field}.{name}: {asked} is above the platform's ceiling of {most} per client \
             (the operator's ingress.traffic.per_client)"
        ))
        .field(format!("{field}.{name}"))),
        None => Ok(()),
    }
}

fn check_unsigned_allowed(state: &ApiState, service: &str, env: &str) -> ApiResult<()> {
    let rules = state.platform.signatures_required(service, env);
    if rules.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(format!(
        "the server's {} require{} a signed image for {service} in {env}, and this revision \
         runs a process from its code, which carries no signature: deploy a signed image \
         (spec.image, or `image`)",
        rules.join(" and "),
        if rules.len() == 1 { "s" } else { "" }
    ))
    .field("manifest.spec.workload.process"))
}

/// A deployment recorded, in the server's own log as an event with fields.
fn log_recorded(deployment: &Deployment) {
    tracing::info!(
        service = %deployment.service,
        env = %deployment.env,
        deployment = deployment.id,
        kind = ?deployment.kind,
        revision = %deployment.to_revision,
        from = deployment.from_revision.as_deref().unwrap_or_default(),
        by = %deployment.created_by,
        "deployment recorded"
    );
}

/// The strategies that roll out in steps, as `a, b or c`.
fn in_steps() -> String {
    let names: Vec<&str> = Strategy::all()
        .iter()
        .filter(|s| s.in_steps())
        .map(|s| s.name())
        .collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => "none".to_owned(),
    }
}

/// Refuses an operator's rollout command when the deployment in progress has no steps to
/// steer: its revision rolls out with `legacy` or `expedited` (or it is a rollback).
pub(crate) fn check_steerable(s: &dyn Store, service: &str, env: &str) -> ApiResult<()> {
    let Some(active) = s
        .deployment_list(service, Some(env), 10)?
        .into_iter()
        .find(|d| !d.state.is_terminal())
    else {
        // The store says so, in its own words.
        return Ok(());
    };
    let revision = s.revision_get(&active.to_revision)?;
    // A manifest that does not read counts as the default strategy's, as in the controller.
    let strategy = serde_json::from_value::<Manifest>(revision.manifest)
        .ok()
        .map(|m| {
            Strategy::of(&ServiceConfig::from_manifest(
                &m,
                Some(env),
                &revision.env_vars,
            ))
        })
        .unwrap_or_default();
    let stepped = active.kind != runway_store::DeploymentKind::Rollback
        && active.from_revision.is_some()
        && strategy.in_steps();
    if stepped {
        return Ok(());
    }
    Err(ApiError::conflict(format!(
        "deployment {} of {service}/{env} rolls out in one step ({}): there is nothing to \
         pause, resume, abort or promote; `runway rollback` goes back",
        active.id,
        if active.kind == runway_store::DeploymentKind::Rollback {
            "a rollback".to_owned()
        } else if active.from_revision.is_none() {
            "a first deploy".to_owned()
        } else {
            format!("strategy {}", strategy.name())
        }
    ))
    .field("command"))
}

/// The revision with the most traffic of `service` in `env`, `None` before its first deploy.
pub(crate) fn serving(s: &dyn Store, service: &str, env: &str) -> ApiResult<Option<Revision>> {
    let desired = s.desired_get(service, env)?;
    let Some(top) = desired.and_then(|d| d.revisions.into_iter().max_by_key(|r| r.weight)) else {
        return Ok(None);
    };
    Ok(Some(s.revision_get(&top.revision)?))
}

/// Refuses a plain-process artifact for a service that may not run one: a process is a
/// program of the tenant's choosing on the host, so it needs the operator's leave for every
/// service (`runtime.allow_processes`) or an admin's for this one. Checked at deploy, rollback
/// and promotion, so revoking the leave stops every way back to a process.
pub(crate) fn check_processes_allowed(
    s: &dyn Store,
    allow_all: bool,
    service: &str,
    artifact: &Value,
) -> ApiResult<()> {
    if runway_store::artifact_is_process(artifact) {
        check_may_run_processes(s, allow_all, service)
    } else {
        Ok(())
    }
}

/// Refuses, as [`check_processes_allowed`] does, anything for a process of `service` (its
/// code included) when the service may not run one.
pub(crate) fn check_may_run_processes(
    s: &dyn Store,
    allow_all: bool,
    service: &str,
) -> ApiResult<()> {
    if allow_all || s.service_get(service)?.allow_processes {
        return Ok(());
    }
    Err(ApiError::forbidden(format!(
        "{service} may not run plain processes (spec.workload.process) on this server: deploy \
         an image instead (spec.image, or `image`), or have an admin allow processes for it \
         (`runway services update {service} --allow-processes true`) or the operator for every \
         service (runtime.allow_processes in the server's configuration)"
    ))
    .field("manifest.spec.workload.process"))
}

/// The revision before the serving one, for a rollback without `to`.
pub(crate) fn previous_revision(s: &dyn Store, service: &str, env: &str) -> ApiResult<Revision> {
    s.service_get(service)?;
    let current = serving(s, service, env)?
        .ok_or_else(|| ApiError::conflict(format!("nothing is deployed for {service} in {env}")))?;
    s.revision_list(service, env)?
        .into_iter()
        .filter(|r| r.number < current.number)
        .max_by_key(|r| r.number)
        .ok_or_else(|| {
            ApiError::conflict(format!(
                "{} is the first revision of {service} in {env}: there is none to roll back to",
                current.name
            ))
        })
}

/// What a promotion of `source` to `to` checks before the store records it, as a deploy
/// does: every secret the source pins (and its manifest declares) is set in `to`, whose
/// latest versions the new revision pins; none of them is also an environment variable. The
/// store checks the secrets again in its transaction.
fn check_promotion(s: &dyn Store, source: &Revision, to: &str) -> ApiResult<()> {
    let target: BTreeSet<String> = s
        .secret_list(&source.service, to)?
        .into_iter()
        .map(|i| i.name)
        .collect();
    let config = serde_json::from_value::<Manifest>(source.manifest.clone())
        .ok()
        .map(|m| ServiceConfig::from_manifest(&m, Some(to), &source.env_vars));
    let declared = config.iter().flat_map(|c| c.secrets.iter());
    let needed: BTreeSet<&String> = source.secret_versions.keys().chain(declared).collect();
    let missing: Vec<&str> = needed
        .iter()
        .filter(|n| !target.contains(n.as_str()))
        .map(|n| n.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(ApiError::invalid(format!(
            "{} uses {} {}, not set for {} in {to}; set {} there first",
            source.name,
            if missing.len() == 1 {
                "secret"
            } else {
                "secrets"
            },
            missing.join(", "),
            source.service,
            if missing.len() == 1 { "it" } else { "them" },
        ))
        .field("to"));
    }
    let env_names: Vec<&String> = match &config {
        Some(config) => config.env.keys().collect(),
        None => source.env_vars.keys().collect(),
    };
    if let Err(clashes) = runway_secrets::check_clashes(&needed, &env_names) {
        return Err(ApiError::invalid(format!(
            "{} set both as a secret and as an environment variable of {}; remove one",
            clashes.join(", "),
            source.name
        ))
        .field("from"));
    }
    Ok(())
}

/// Records a promotion of the revision serving in `from` to `to`.
pub(crate) async fn promote(
    state: &ApiState,
    caller: &Caller,
    service: &str,
    body: PromoteRequest,
) -> ApiResult<Deployment> {
    for (env, field) in [(&body.from, "from"), (&body.to, "to")] {
        if env == runway_secrets::preview::ENVIRONMENT {
            return Err(ApiError::invalid(format!(
                "`{env}` holds previews, which are not promoted: deploy the change to the \
                 environment the preview was made from"
            ))
            .field(field));
        }
    }
    let order = &state.environments;
    let position = |env: &str, field: &str| {
        order.iter().position(|e| e == env).ok_or_else(|| {
            ApiError::not_found(format!("environment {env:?} not found")).field(field)
        })
    };
    if position(&body.to, "to")? <= position(&body.from, "from")? {
        return Err(ApiError::invalid(format!(
            "{} does not come after {} in the promotion order ({})",
            body.to,
            body.from,
            order.join(" → ")
        ))
        .field("to"));
    }
    let (service, actor) = (service.to_owned(), caller.name.clone());
    let allow_all = state.allow_processes;
    let source_of = move |s: &dyn Store, service: &str, from: &str| {
        s.service_get(service)?;
        serving(s, service, from)?.ok_or_else(|| {
            ApiError::conflict(format!("nothing is deployed for {service} in {from}"))
        })
    };
    // What the target environment needs of the source is read outside the store's
    // transaction: with Vault, its secrets there (the names the source pins); its signature
    // rules, held for the image promoted as for a deploy.
    let source = {
        let (name, from) = (service.clone(), body.from.clone());
        state.store(move |s| source_of(s, &name, &from)).await?
    };
    let from_vault = match &state.vault {
        Some(_) => {
            let names: Vec<String> = source.secret_versions.keys().cloned().collect();
            read_vault(state, &service, &body.to, &names).await?
        }
        None => Vec::new(),
    };
    let signature = match runway_store::artifact_image(&source.artifact) {
        Some(image) => state
            .platform
            .verify_image(&service, &body.to, image)
            .await
            .map_err(|e| {
                ApiError::invalid(format!(
                    "{} may not be promoted to {}: {e}",
                    source.name, body.to
                ))
                .field("to")
            })?
            .map(|s| (source.name.clone(), s.by)),
        None => {
            check_unsigned_allowed(state, &service, &body.to).map_err(|e| e.field("to"))?;
            None
        }
    };
    let sealer = std::sync::Arc::clone(&state.sealer);
    let record = state
        .store(move |s| {
            let source = source_of(s, &service, &body.from)?;
            if let Some((verified, _)) = &signature
                && *verified != source.name
            {
                return Err(ApiError::conflict(format!(
                    "{service} in {} changed while its image's signature was checked: promote \
                     again",
                    body.from
                )));
            }
            check_processes_allowed(s, allow_all, &service, &source.artifact)?;
            let mirrored = mirror(s, &sealer, &actor, [&service, &body.to], from_vault)?;
            check_promotion(s, &source, &body.to)?;
            let desired = [PlannedRevision {
                revision: RevisionRef::New,
                instances: instances_of(&source.manifest, &body.to),
                weight: 100,
            }];
            let verified = signature.map(|(_, by)| json!(by));
            let record =
                s.record_promote(&actor, &source.name, &body.to, &desired, verified.as_ref())?;
            if let Some(event) = mirrored {
                s.deployment_add_event(&actor, record.deployment.id, &event)?;
            }
            Ok(record)
        })
        .await?;
    log_recorded(&record.deployment);
    state.platform.wake();
    Ok(record.deployment)
}

/// How many times a secret is sealed and stored before a run of conflicts (other writers of
/// the same secret taking each next version first) is reported.
const SECRET_SET_ATTEMPTS: u32 = 5;

/// Sets a secret: seals `value` for the next version, stores it naming that version, and on
/// `Conflict` (another writer took it) seals again for the new next version. The version is
/// chosen in the store's transaction, so any number of API processes can share a store.
pub(crate) fn set_secret(
    s: &dyn Store,
    sealer: &Sealer,
    actor: &str,
    [service, env, name]: [&str; 3],
    value: &SecretValue,
    origin: Option<&str>,
) -> ApiResult<SecretInfo> {
    let mut attempt = 1;
    loop {
        let version = s.secret_next_version(service, env, name)?;
        let context = Context {
            service,
            env,
            name,
            version: u64::from(version),
        };
        let sealed = sealer
            .seal(value, &context)
            .map_err(|e| ApiError::internal(format!("sealing a secret: {e}")))?;
        match s.secret_set(
            actor,
            service,
            env,
            name,
            version,
            &sealed.nonce,
            &sealed.ciphertext,
            origin,
        ) {
            Err(StoreError::Conflict(_)) if attempt < SECRET_SET_ATTEMPTS => attempt += 1,
            Err(StoreError::Conflict(reason)) => {
                return Err(ApiError::conflict(format!(
                    "secret {name} changed under {SECRET_SET_ATTEMPTS} attempts to set it; \
                     try again ({reason})"
                )));
            }
            other => return Ok(other?),
        }
    }
}

/// Reads `names` of `service` in `env` from Vault when the server has one (`secrets.vault`);
/// nothing otherwise, the sealed store then being the only source.
async fn read_vault(
    state: &ApiState,
    service: &str,
    env: &str,
    names: &[String],
) -> ApiResult<Vec<VaultSecret>> {
    let Some(vault) = &state.vault else {
        return Ok(Vec::new());
    };
    if names.is_empty() {
        return Ok(Vec::new());
    }
    vault
        .read_all(service, env, names)
        .await
        .map_err(|e| match e {
            VaultError::Missing { .. } | VaultError::Invalid { .. } => ApiError::invalid(format!(
                "{e}; set it there (`bao kv put -mount={mount} <path> value=...`) and deploy \
                 again",
                mount = vault.config().mount
            ))
            .field("manifest.spec.workload.secrets"),
            _ => {
                // The operator's to fix (a token, a policy, Vault itself): in the log too.
                tracing::warn!(%service, %env, error = %e, "cannot read secrets from Vault");
                ApiError::unavailable(format!("{e}; nothing was deployed"))
            }
        })
}

/// Mirrors each secret read from Vault into the sealed store: a new sealed version, unless
/// the latest already came from the same place and Vault version. Gives the line the
/// deployment's events tell it with (places and versions, never a value).
fn mirror(
    s: &dyn Store,
    sealer: &Sealer,
    actor: &str,
    [service, env]: [&str; 2],
    secrets: Vec<VaultSecret>,
) -> ApiResult<Option<String>> {
    if secrets.is_empty() {
        return Ok(None);
    }
    let current = s.secret_list(service, env)?;
    let mut told = Vec::with_capacity(secrets.len());
    for secret in &secrets {
        let origin = secret.origin();
        let version = match current.iter().find(|i| i.name == secret.name) {
            Some(latest) if latest.origin.as_deref() == Some(origin.as_str()) => latest.version,
            _ => {
                set_secret(
                    s,
                    sealer,
                    actor,
                    [service, env, &secret.name],
                    &secret.value,
                    Some(&origin),
                )?
                .version
            }
        };
        told.push(format!(
            "{} at Vault version {} (sealed version {version})",
            secret.name, secret.version
        ));
    }
    Ok(Some(format!("secrets from Vault: {}", told.join(", "))))
}

#[cfg(test)]
mod tests {
    /// The strategies in steps, as the `pause` refusal names them (a strategy added in steps
    /// joins them without a line here).
    #[test]
    fn strategies_in_steps_come_from_the_strategies() {
        let text = super::in_steps();
        assert!(
            text.starts_with("regional_rollout, runway_canary")
                && text.contains("runway_blue_green")
                && text.contains(" or "),
            "{text}"
        );
        for one_step in ["legacy", "expedited", "dryrun"] {
            assert!(!text.contains(one_step), "{text}");
        }
    }
}
