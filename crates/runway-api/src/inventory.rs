//! The inventory as a document: `POST /v1/inventory` reads one (`runway_manifest::
//! load_inventory`, every mistake with its line), compares it with the services there are,
//! and with `apply` makes them what it says in one store transaction, audited with the
//! document's digest. A service it does not list is decommissioned only with `prune`; previews
//! are never its business.

use std::collections::BTreeMap;

use runway_manifest::{InventoryService, SourceFile, load_inventory};
use runway_store::{InventoryChanges, InventoryRecord, Service};
use serde_json::Value;

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::Json;
use crate::state::ApiState;
use crate::types::{
    FieldChange, InventoryCreate, InventoryPlan, InventoryRequest, InventoryUpdate,
};

/// The largest inventory document taken: 1 MiB of text.
const MAX_DOCUMENT_BYTES: usize = 1 << 20;

/// Compares an inventory document with the services there are; with `apply`, makes them what
/// it says (an admin's; a viewer of every service may compare).
#[utoipa::path(post, path = "/v1/inventory", request_body = InventoryRequest,
    responses((status = 200, body = InventoryPlan),
        (status = 422, description = "The document is invalid", body = crate::error::ErrorBody)))]
pub(crate) async fn inventory(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Json(body): Json<InventoryRequest>,
) -> ApiResult<axum::Json<InventoryPlan>> {
    if body.apply {
        caller.check(
            runway_secrets::Need::Admin,
            None,
            runway_secrets::Env::Whole,
        )?;
    }
    if body.document.len() > MAX_DOCUMENT_BYTES {
        return Err(ApiError::too_large(format!(
            "the document is {} bytes, over the limit of {} KiB",
            body.document.len(),
            MAX_DOCUMENT_BYTES / 1024
        ))
        .field("document"));
    }
    let digest = runway_registry::Digest::of(body.document.as_bytes()).to_string();
    let file = body
        .file
        .clone()
        .unwrap_or_else(|| "inventory.yml".to_owned());
    let environments = state.environments.to_vec();
    let document = body.document.clone();
    let loaded = tokio::task::spawn_blocking(move || {
        load_inventory(&SourceFile::new(file, document), &environments)
    })
    .await?;
    if let Some(first) = loaded.diagnostics.first() {
        let said: Vec<String> = loaded.diagnostics.iter().map(ToString::to_string).collect();
        return Err(ApiError::manifest_invalid(format!(
            "the inventory is invalid ({} mistakes):\n{}",
            said.len(),
            said.join("\n")
        ))
        .field(format!("document.{}", first.path)));
    }
    let inventory = loaded
        .inventory
        .ok_or_else(|| ApiError::manifest_invalid("the inventory is invalid").field("document"))?;
    let environments = state.environments.to_vec();
    let (actor, apply, prune) = (caller.name.clone(), body.apply, body.prune);
    let plan = state
        .store(move |s| {
            let services: Vec<Service> = s
                .service_list()?
                .into_iter()
                .filter(|s| runway_secrets::preview::split(&s.name).is_none())
                .collect();
            let (changes, plan) = compare(&inventory.inventory, &services, &environments, prune);
            if apply {
                s.inventory_apply(&actor, &changes, &digest)?;
            }
            Ok(InventoryPlan {
                digest,
                applied: apply,
                ..plan
            })
        })
        .await?;
    if plan.applied {
        state.platform.wake();
    }
    Ok(axum::Json(plan))
}

/// What the document changes of `services` (previews left out): the store's changes, and the
/// answer that says them.
fn compare(
    listed: &[InventoryService],
    services: &[Service],
    environments: &[String],
    prune: bool,
) -> (InventoryChanges, InventoryPlan) {
    let by_name: BTreeMap<&str, &Service> = services.iter().map(|s| (s.name.as_str(), s)).collect();
    let mut changes = InventoryChanges::default();
    let mut plan = InventoryPlan::default();
    for entry in listed {
        let record = InventoryRecord {
            name: entry.name.clone(),
            owners: entry.owners.clone(),
            environments: entry
                .environments
                .clone()
                .unwrap_or_else(|| environments.to_vec()),
            allow_processes: entry.allow_processes,
            upstream: entry.upstream(),
        };
        match by_name.get(entry.name.as_str()) {
            None => {
                plan.create.push(InventoryCreate {
                    name: record.name.clone(),
                    owners: record.owners.clone(),
                    environments: record.environments.clone(),
                    // A name that replaces one of the same project's: a rename, which is a new
                    // service beside the old one.
                    replaces: services
                        .iter()
                        .find(|s| {
                            !listed.iter().any(|l| l.name == s.name)
                                && s.inventory.as_ref().and_then(|i| i.get("project_id"))
                                    == Some(&Value::from(entry.project_id))
                        })
                        .map(|s| s.name.clone()),
                });
                changes.create.push(record);
            }
            Some(service) => {
                let fields = differences(service, &record);
                if fields.is_empty() {
                    plan.unchanged.push(record.name.clone());
                } else {
                    plan.update.push(InventoryUpdate {
                        name: record.name.clone(),
                        changes: fields,
                    });
                    changes.update.push(record);
                }
            }
        }
    }
    for service in services {
        if listed.iter().any(|l| l.name == service.name) {
            continue;
        }
        if prune {
            plan.decommission.push(service.name.clone());
            changes.decommission.push(service.name.clone());
        } else {
            plan.unlisted.push(service.name.clone());
            changes.unlisted.push(service.name.clone());
        }
    }
    (changes, plan)
}

/// How `service` differs from what the document says of it, field by field.
fn differences(service: &Service, record: &InventoryRecord) -> Vec<FieldChange> {
    let mut fields = Vec::new();
    let mut differ = |field: &str, from: Value, to: Value| {
        if from != to {
            fields.push(FieldChange {
                field: field.to_owned(),
                from,
                to,
            });
        }
    };
    differ(
        "owners",
        service.owners.clone().into(),
        record.owners.clone().into(),
    );
    differ(
        "environments",
        service.environments.clone().into(),
        record.environments.clone().into(),
    );
    differ(
        "allow_processes",
        service.allow_processes.into(),
        record.allow_processes.into(),
    );
    let upstream = service.inventory.clone().unwrap_or(Value::Null);
    let keys: std::collections::BTreeSet<&String> = upstream
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .chain(
            record
                .upstream
                .as_object()
                .into_iter()
                .flat_map(|o| o.keys()),
        )
        .collect();
    for key in keys {
        differ(
            key,
            upstream.get(key).cloned().unwrap_or(Value::Null),
            record.upstream.get(key).cloned().unwrap_or(Value::Null),
        );
    }
    fields
}
