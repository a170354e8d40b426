//! One service's files (`runway.yml`, `runway-<env>.yml`, `env-<env>.yml`) into validated
//! per-environment settings, with every finding in every file reported at once.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::config::ServiceConfig;
use crate::diagnostic::{Diagnostic, dotted_path};
use crate::schema::describe;
use crate::source::{Document, SourceFile, SpanMap, parse};
use crate::types::Manifest;
use crate::validate::EnvFile;

/// The files of one service, as found in a repository. Reading them is the caller's business:
/// this crate does no I/O.
#[derive(Debug, Clone, Default)]
pub struct ServiceFiles {
    /// The service's id: its directory under `.runway/`, or empty for `.runway/runway.yml`.
    pub id: String,
    /// `runway.yml`, if there is one.
    pub base: Option<SourceFile>,
    /// `runway-<env>.yml` by environment: deep-merged over the base (mappings merge, lists and
    /// values replace), or a whole manifest of its own where there is no base.
    pub overrides: BTreeMap<String, SourceFile>,
    /// `env-<env>.yml` by environment: a flat map of environment variables.
    pub env_files: BTreeMap<String, SourceFile>,
}

/// A service whose files all passed validation.
#[derive(Debug, Clone)]
pub struct Service {
    /// The service's id (see [`ServiceFiles::id`]).
    pub id: String,
    base: Option<Manifest>,
    environments: BTreeMap<String, (Manifest, BTreeMap<String, String>)>,
}

/// The outcome of loading a service: every finding, and the service when there was no error.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// Errors and warnings, sorted by file and position, without repeats.
    pub diagnostics: Vec<Diagnostic>,
    /// The service, when no finding is an error.
    pub service: Option<Service>,
}

/// Why settings for an environment cannot be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// There is no base manifest and no override for the environment.
    #[error(
        "service `{service}` has no runway.yml and no runway-{environment}.yml; it has files for: {known}"
    )]
    NoManifest {
        /// The service's id.
        service: String,
        /// The environment asked for.
        environment: String,
        /// The environments that have files.
        known: String,
    },
    /// There is no base manifest and no environment was chosen.
    #[error("service `{service}` has only per-environment manifests; choose one of: {known}")]
    EnvironmentRequired {
        /// The service's id.
        service: String,
        /// The environments that have files.
        known: String,
    },
}

impl Service {
    /// Environments this service has files for.
    pub fn environments(&self) -> impl Iterator<Item = &str> {
        self.environments.keys().map(String::as_str)
    }

    /// The service's name, from its base manifest or else its first environment's.
    pub fn name(&self) -> &str {
        self.base
            .as_ref()
            .or_else(|| self.environments.values().next().map(|(m, _)| m))
            .map_or(self.id.as_str(), |m| m.metadata.name.as_str())
    }

    /// The settings for `environment` (or the base manifest's, without one), defaults applied.
    pub fn config(&self, environment: Option<&str>) -> Result<ServiceConfig, ConfigError> {
        let known = || {
            self.environments
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        };
        match environment {
            Some(env) => match (self.environments.get(env), &self.base) {
                (Some((manifest, vars)), _) => {
                    Ok(ServiceConfig::from_manifest(manifest, Some(env), vars))
                }
                (None, Some(base)) => Ok(ServiceConfig::from_manifest(
                    base,
                    Some(env),
                    &BTreeMap::new(),
                )),
                (None, None) => Err(ConfigError::NoManifest {
                    service: self.id.clone(),
                    environment: env.to_owned(),
                    known: known(),
                }),
            },
            None => match &self.base {
                Some(base) => Ok(ServiceConfig::from_manifest(base, None, &BTreeMap::new())),
                None => Err(ConfigError::EnvironmentRequired {
                    service: self.id.clone(),
                    known: known(),
                }),
            },
        }
    }
}

/// Parses, merges and validates a service's files. Every error in every file is reported; the
/// service is returned only when there is none.
pub fn load(files: &ServiceFiles) -> Loaded {
    let mut diagnostics = Vec::new();
    let base_doc = files
        .base
        .as_ref()
        .and_then(|f| collect(parse(f), &mut diagnostics));
    let base = base_doc
        .as_ref()
        .and_then(|doc| check_manifest(&doc.value, &doc.spans, None, &mut diagnostics));

    let names: BTreeSet<&String> = files
        .overrides
        .keys()
        .chain(files.env_files.keys())
        .collect();
    let mut environments = BTreeMap::new();
    let mut complete = base.is_some() || files.base.is_none();
    for env in names {
        let env_file = files
            .env_files
            .get(env)
            .and_then(|f| parse_env_file(f, &mut diagnostics));
        let merged = match (files.overrides.get(env), &base_doc) {
            (Some(file), base_doc) => {
                collect(parse(file), &mut diagnostics).map(|over| match base_doc {
                    Some(base) => {
                        let mut value = base.value.clone();
                        merge(&mut value, over.value);
                        let mut spans = base.spans.clone();
                        spans.overlay(&over.spans);
                        Document { value, spans }
                    }
                    None => over,
                })
            }
            (None, Some(base)) => Some(base.clone()),
            (None, None) => {
                let at = files
                    .env_files
                    .get(env)
                    .map(|f| crate::diagnostic::Location {
                        file: f.name.clone(),
                        line: 1,
                        column: 1,
                    });
                diagnostics.push(Diagnostic::error(at, "", format!("variables for `{env}` but no runway.yml or runway-{env}.yml to apply them to")));
                None
            }
        };
        let manifest = merged.and_then(|doc| {
            check_manifest(&doc.value, &doc.spans, env_file.as_ref(), &mut diagnostics)
        });
        match manifest {
            Some(manifest) => {
                environments.insert(
                    env.clone(),
                    (manifest, env_file.map(|f| f.vars).unwrap_or_default()),
                );
            }
            None => complete = false,
        }
    }
    if files.base.is_none() && files.overrides.is_empty() {
        diagnostics.push(Diagnostic::error(
            None,
            "",
            format!("service `{}` has no runway.yml", files.id),
        ));
        complete = false;
    }

    diagnostics.sort();
    diagnostics.dedup();
    let ok = complete && !diagnostics.iter().any(Diagnostic::is_error);
    Loaded {
        service: ok.then(|| Service {
            id: files.id.clone(),
            base,
            environments,
        }),
        diagnostics,
    }
}

fn collect(
    result: Result<Document, Vec<Diagnostic>>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Document> {
    result
        .map_err(|mut errors| diagnostics.append(&mut errors))
        .ok()
}

/// Schema, then typed deserialisation, then the semantic rules. Where the schema finds errors,
/// the semantic rules still run on what is left once the faulty nodes are taken out, so that one
/// run reports every mistake.
fn check_manifest(
    value: &Value,
    spans: &SpanMap,
    env_file: Option<&EnvFile>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Manifest> {
    let (structural, faulty) = crate::schema::check(value, spans);
    let salvaged;
    let value = if structural.is_empty() {
        value
    } else {
        let mut pruned = value.clone();
        for pointer in &faulty {
            prune(&mut pruned, pointer);
        }
        salvaged = pruned;
        &salvaged
    };
    let manifest = serde_json::from_value::<Manifest>(value.clone()).ok();
    let structurally_valid = structural.is_empty();
    diagnostics.extend(structural);
    let Some(manifest) = manifest else {
        if structurally_valid {
            // The schema is generated from these types, so this means the two disagree.
            diagnostics.push(Diagnostic::error(
                spans.value_location(""),
                "",
                "internal error: the schema accepted what the types refuse",
            ));
        }
        return None;
    };
    let semantic = crate::validate::check(&manifest, spans, env_file);
    let failed = !structurally_valid || semantic.iter().any(Diagnostic::is_error);
    diagnostics.extend(semantic);
    (!failed).then_some(manifest)
}

/// Takes the node at `pointer` out of `value`. A node inside a list takes the whole list with it,
/// so that the positions of the list's other items stay true.
fn prune(value: &mut Value, pointer: &str) {
    let mut pointer = pointer;
    loop {
        let Some((parent, key)) = pointer.rsplit_once('/') else {
            return;
        };
        match value.pointer_mut(parent) {
            Some(Value::Object(map)) => {
                map.remove(&key.replace("~1", "/").replace("~0", "~"));
                return;
            }
            Some(Value::Array(_)) => pointer = parent,
            _ => return,
        }
    }
}

/// Deep merge: mappings merge key by key, everything else is replaced by `over`.
pub fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                match base.get_mut(&key) {
                    Some(slot) => merge(slot, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (slot, over) => *slot = over,
    }
}

fn parse_env_file(file: &SourceFile, diagnostics: &mut Vec<Diagnostic>) -> Option<EnvFile> {
    let doc = collect(parse(file), diagnostics)?;
    let Value::Object(map) = doc.value else {
        diagnostics.push(
            Diagnostic::error(
                doc.spans.value_location(""),
                "",
                format!("found {}", describe(Some(&doc.value))),
            )
            .expected("a mapping of variable names to values"),
        );
        return None;
    };
    let mut vars = BTreeMap::new();
    for (name, value) in map {
        let pointer = format!("/{}", crate::diagnostic::pointer_segment(&name));
        let text = match value {
            Value::String(s) => s,
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            other => {
                diagnostics.push(
                    Diagnostic::error(
                        doc.spans.value_location(&pointer),
                        dotted_path(&pointer),
                        format!("found {}", describe(Some(&other))),
                    )
                    .expected("a string, number or boolean"),
                );
                continue;
            }
        };
        vars.insert(name, text);
    }
    // Even with errors, the variables that parsed are checked against the secrets.
    Some(EnvFile {
        vars,
        spans: doc.spans,
    })
}
