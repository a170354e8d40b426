//! The platform's inventory: which services are onboarded, as a document kept in a repository
//! and changed through review (`runway inventory validate|diff|apply`). Upstream's per-service
//! keys (`name`, `project_id`, `members`, `groups`, `regions`, `exclude_name_suffix`,
//! `gcp_project_group`) with Runway's own (`owners`, `environments`, `allow_processes`).
//!
//! ```
//! use runway_manifest::{SourceFile, load_inventory};
//!
//! let file = SourceFile::new(
//!     "inventory.yml",
//!     "inventory:\n  - name: ai-gateway\n    project_id: 39903947\n    owners: [ai@example.com]\n",
//! );
//! let loaded = load_inventory(&file, &[]);
//! assert!(loaded.diagnostics.is_empty());
//! assert_eq!(loaded.inventory.unwrap().inventory[0].name, "ai-gateway");
//! ```

use std::collections::BTreeMap;
use std::sync::OnceLock;

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::diagnostic::Diagnostic;
use crate::source::{SourceFile, parse};

/// The inventory document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Runway inventory")]
pub struct Inventory {
    /// The schema the document follows, for editors; not read.
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// The services onboarded onto the platform, each once. One that is not listed is
    /// decommissioned by `runway inventory apply --prune`, and only then.
    pub inventory: Vec<InventoryService>,
}

/// One service of the inventory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InventoryService {
    /// The service's name: a DNS label (lower-case letters, digits and `-`, at most 63
    /// characters), without `--`, which separates a preview's name from its service's.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([a-z0-9]|-[a-z0-9])*$")
    )]
    pub name: String,
    /// The GitLab project the service is built and deployed from (upstream's).
    #[schemars(range(min = 1))]
    pub project_id: u64,
    /// People who work on the service (upstream's), as GitLab usernames.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<String>,
    /// GitLab groups whose members work on the service (upstream's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Regions to run in (upstream's). Default `[us-east1]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub regions: Option<Vec<String>>,
    /// Upstream's: whether the service's cloud resources are named without its suffix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_name_suffix: Option<bool>,
    /// Upstream's: the group of cloud projects the service belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcp_project_group: Option<String>,
    /// Who owns the service (e-mail handles or group names): Runway's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<String>,
    /// The environments it may be deployed to, each once (`preview` for previews): Runway's.
    /// Default: every environment of the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub environments: Option<Vec<String>>,
    /// It may run plain processes (`spec.workload.process`) on a server that does not allow
    /// them for every service: Runway's. Default `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_processes: bool,
}

impl InventoryService {
    /// Upstream's keys as the service keeps them (`project_id`, `members`, …): what Runway
    /// records of it beside its owners, environments and leave to run processes.
    pub fn upstream(&self) -> Value {
        let mut all = serde_json::to_value(self).unwrap_or_default();
        if let Value::Object(map) = &mut all {
            for own in ["name", "owners", "environments", "allow_processes"] {
                map.remove(own);
            }
        }
        all
    }
}

/// The inventory's JSON Schema (draft 2020-12).
pub fn inventory_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let mut value = SchemaSettings::draft2020_12()
            .into_generator()
            .into_root_schema_for::<Inventory>()
            .to_value();
        crate::schema::strip_null(&mut value);
        crate::schema::consts_to_enum(&mut value);
        if let Value::Object(root) = &mut value {
            root.insert(
                "description".into(),
                Value::String(
                    "The services onboarded onto a Runway platform: upstream's inventory keys \
                     with Runway's owners, environments and allow_processes."
                        .into(),
                ),
            );
        }
        value
    })
}

/// The schema pretty-printed as it is checked in at `schemas/inventory-v1.json`.
pub fn inventory_schema_json() -> String {
    let mut text = serde_json::to_string_pretty(inventory_schema()).unwrap_or_default();
    text.push('\n');
    text
}

fn validator() -> Option<&'static jsonschema::Validator> {
    static VALIDATOR: OnceLock<Option<jsonschema::Validator>> = OnceLock::new();
    VALIDATOR
        .get_or_init(|| jsonschema::validator_for(inventory_schema()).ok())
        .as_ref()
}

/// An inventory read: the document when it is valid, and every finding.
#[derive(Debug, Clone, Default)]
pub struct LoadedInventory {
    /// The document, when there is no error.
    pub inventory: Option<Inventory>,
    /// Every error, each with its file, line, column and path.
    pub diagnostics: Vec<Diagnostic>,
}

/// Reads an inventory: YAML (or JSON), checked against the schema, then each service listed
/// once and each of its environments once, and one of `environments` (the server's; not
/// checked when empty). Every mistake is reported, located; no input panics.
pub fn load_inventory(file: &SourceFile, environments: &[String]) -> LoadedInventory {
    let document = match parse(file) {
        Ok(document) => document,
        Err(diagnostics) => {
            return LoadedInventory {
                inventory: None,
                diagnostics,
            };
        }
    };
    let (mut diagnostics, _) = crate::schema::check_against(
        inventory_schema(),
        validator(),
        "inventory",
        &document.value,
        &document.spans,
    );
    if !diagnostics.is_empty() {
        return LoadedInventory {
            inventory: None,
            diagnostics,
        };
    }
    let inventory: Inventory = match serde_json::from_value(document.value) {
        Ok(inventory) => inventory,
        Err(e) => {
            return LoadedInventory {
                inventory: None,
                diagnostics: vec![Diagnostic::error(
                    document.spans.value_location(""),
                    "",
                    format!("not an inventory: {e}"),
                )],
            };
        }
    };
    let mut first: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, service) in inventory.inventory.iter().enumerate() {
        let at = |pointer: &str| {
            document
                .spans
                .value_location(&format!("/inventory/{i}{pointer}"))
        };
        if let Some(earlier) = first.insert(&service.name, i) {
            let line = document
                .spans
                .value_location(&format!("/inventory/{earlier}/name"))
                .map_or_else(String::new, |l| format!(" (line {})", l.line));
            diagnostics.push(Diagnostic::error(
                at("/name"),
                format!("inventory[{i}].name"),
                format!(
                    "service `{}` is listed twice: first as inventory[{earlier}]{line}",
                    service.name
                ),
            ));
        }
        let listed = service.environments.iter().flatten();
        for (j, env) in listed.clone().enumerate() {
            if !environments.is_empty() && !environments.contains(env) {
                diagnostics.push(
                    Diagnostic::error(
                        at(&format!("/environments/{j}")),
                        format!("inventory[{i}].environments[{j}]"),
                        format!("environment `{env}` is not one of the server's"),
                    )
                    .expected(environments.join(", ")),
                );
            }
            if listed.clone().take(j).any(|e| e == env) {
                diagnostics.push(
                    Diagnostic::error(
                        at(&format!("/environments/{j}")),
                        format!("inventory[{i}].environments[{j}]"),
                        format!("environment `{env}` is listed twice"),
                    )
                    .expected("each environment once"),
                );
            }
        }
    }
    LoadedInventory {
        inventory: diagnostics.is_empty().then_some(inventory),
        diagnostics,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> LoadedInventory {
        load_inventory(&SourceFile::new("inventory.yml", text), &[])
    }

    fn said(loaded: &LoadedInventory) -> Vec<String> {
        loaded.diagnostics.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_valid_inventory_reads_with_upstreams_keys_kept() {
        let loaded = load(
            "$schema: ./schemas/inventory-v1.json\ninventory:\n  - name: ai-gateway\n    \
             project_id: 39903947\n    members: [alice]\n    groups: [gitlab-org/ai]\n    \
             regions: [us-east1, europe-west4]\n    owners: [ai@example.com]\n    \
             environments: [staging, production, preview]\n  - name: docs\n    project_id: 7\n",
        );
        assert!(loaded.diagnostics.is_empty(), "{:?}", said(&loaded));
        let inventory = loaded.inventory.unwrap();
        assert_eq!(inventory.inventory.len(), 2);
        assert_eq!(
            inventory.inventory[0].upstream(),
            serde_json::json!({"project_id": 39903947, "members": ["alice"],
                "groups": ["gitlab-org/ai"], "regions": ["us-east1", "europe-west4"]})
        );
        assert_eq!(inventory.inventory[1].environments, None);
    }

    #[test]
    fn every_mistake_is_named_with_its_line() {
        let loaded = load(
            "inventory:\n  - name: app\n    project_id: 1\n    owner: [a]\n  - name: Bad_Name\n    \
             project_id: one\n  - name: a--b\n    project_id: 3\n",
        );
        let first = said(&loaded);
        assert!(loaded.inventory.is_none());
        for wanted in [
            "inventory.yml:4:5: inventory[0].owner: unknown field `owner`; did you mean `owners`?",
            "inventory.yml:5:11: inventory[1].name:",
            "inventory.yml:6:17: inventory[1].project_id: found the string \"one\" (expected an integer)",
            "inventory.yml:7:11: inventory[2].name:",
        ] {
            assert!(
                first.iter().any(|s| s.contains(wanted)),
                "{wanted}\n{first:#?}"
            );
        }
        let twice = load(
            "inventory:\n  - name: app\n    project_id: 1\n  - name: app\n    project_id: 2\n    \
             environments: [dev, dev]\n",
        );
        let told = said(&twice);
        assert!(
            told.iter().any(|s| s.contains(
                "inventory.yml:4:11: inventory[1].name: service `app` is listed twice: first as \
                 inventory[0] (line 2)"
            )),
            "{told:#?}"
        );
        assert!(
            told.iter()
                .any(|s| s
                    .contains("inventory[1].environments[1]: environment `dev` is listed twice")),
            "{told:#?}"
        );
        let known = ["dev".to_owned(), "staging".to_owned()];
        let unknown = load_inventory(
            &SourceFile::new(
                "inventory.yml",
                "inventory:\n  - name: app\n    project_id: 1\n    environments: [dev, prod]\n",
            ),
            &known,
        );
        assert_eq!(
            said(&unknown),
            [
                "error: inventory.yml:4:25: inventory[0].environments[1]: environment `prod` is not \
              one of the server's (expected dev, staging)"
            ]
        );
        for bad in [
            "",
            "inventory: 3\n",
            "[1, 2]\n",
            "inventory:\n  - {}\n",
            ": : :\n",
        ] {
            assert!(load(bad).inventory.is_none(), "{bad:?}");
        }
    }

    #[test]
    fn the_checked_in_schema_is_the_generated_one() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../schemas/inventory-v1.json"
        );
        if std::env::var_os("UPDATE_GENERATED").is_some() {
            std::fs::write(path, inventory_schema_json()).unwrap_or_else(|e| panic!("{path}: {e}"));
        }
        let checked_in = std::fs::read_to_string(path).unwrap_or_default();
        assert_eq!(
            checked_in,
            inventory_schema_json(),
            "schemas/inventory-v1.json is stale: run UPDATE_GENERATED=1 cargo test -p runway-manifest"
        );
    }
}
