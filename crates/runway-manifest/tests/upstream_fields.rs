//! `docs/upstream-fields.md` against the schema and the warnings: its table names every field of
//! the manifest's schema outside `spec.workload` and no other, and every field it marks
//! **warned** draws a warning at that field, with its file, line and column.

use std::collections::{BTreeMap, BTreeSet};

use runway_manifest::{Diagnostic, ServiceFiles, Severity, SourceFile, load};
use serde_json::Value;

const TABLE: &str = include_str!("../../../docs/upstream-fields.md");
/// The published schema, which `manifest.rs` holds to the types.
const SCHEMA: &str = include_str!("../../../schemas/runway-v1.json");

/// Every field of `schema` reached from `node` at `path`: through `$ref`s into `$defs`,
/// `allOf`/`anyOf`/`oneOf`, objects' `properties`, maps' `additionalProperties` (as `*`) and
/// arrays' `items` (whose fields are their array's, dotted on). Only leaves are fields: an
/// object is named by its fields. `spec.workload` and below are Runway's, left out.
fn fields(
    schema: &Value,
    node: &Value,
    path: &str,
    seen: &mut Vec<String>,
    out: &mut BTreeSet<String>,
) {
    if path == "spec.workload" {
        return;
    }
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        // A type met again on its own path is a recursive one: its fields are named already.
        if seen.iter().any(|r| r == reference) {
            return;
        }
        let target = reference
            .strip_prefix('#')
            .and_then(|pointer| schema.pointer(pointer))
            .unwrap_or_else(|| panic!("{path}: `$ref` {reference} leads nowhere"));
        seen.push(reference.to_owned());
        fields(schema, target, path, seen, out);
        seen.pop();
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        let subs = node
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        // `null` is no field of its own: an optional field's other branch names it.
        for sub in subs.filter(|sub| sub.get("type") != Some(&Value::from("null"))) {
            fields(schema, sub, path, seen, out);
        }
    }
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    let mut inner = false;
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        inner |= !properties.is_empty();
        for (key, property) in properties {
            fields(schema, property, &join(key), seen, out);
        }
    }
    if let Some(map) = node.get("additionalProperties").filter(|v| v.is_object()) {
        inner = true;
        fields(schema, map, &join("*"), seen, out);
    }
    if let Some(items) = node.get("items").filter(|v| v.is_object()) {
        let before = out.len();
        fields(schema, items, path, seen, out);
        // An array of plain values is a field itself; one of objects is named by their fields.
        inner |= out.len() > before && out.iter().any(|f| f.starts_with(&format!("{path}.")));
    }
    let reached_through = node.get("$ref").is_some()
        || ["allOf", "anyOf", "oneOf"]
            .iter()
            .any(|k| node.get(k).is_some());
    if !inner && !reached_through && !path.is_empty() {
        out.insert(path.to_owned());
    }
}

fn schema_fields() -> BTreeSet<String> {
    let schema: Value = serde_json::from_str(SCHEMA).expect("the schema is JSON");
    let mut out = BTreeSet::new();
    fields(&schema, &schema, "", &mut Vec::new(), &mut out);
    out
}

/// The table's rows: the field (the first cell, in backticks) to its local runtime's cell.
fn table_rows() -> BTreeMap<String, String> {
    let mut rows = BTreeMap::new();
    for line in TABLE.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let field = cells[0]
            .trim_start_matches("| ")
            .trim_matches('`')
            .to_owned();
        assert!(
            cells.len() >= 4,
            "docs/upstream-fields.md: the row of `{field}` has not its four cells"
        );
        let previous = rows.insert(field.clone(), cells[1].to_owned());
        assert!(
            previous.is_none(),
            "docs/upstream-fields.md names `{field}` twice"
        );
    }
    rows
}

#[test]
fn the_walk_finds_fields_through_refs_items_and_maps() {
    let schema = serde_json::json!({
        "properties": {
            "spec": {"$ref": "#/$defs/Spec"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "$defs": {
            "Spec": {"properties": {
                "ports": {"type": "array", "items": {"$ref": "#/$defs/Port"}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "next": {"anyOf": [{"$ref": "#/$defs/Spec"}, {"type": "null"}]},
                "workload": {"properties": {"mine": {"type": "string"}}},
            }},
            "Port": {"properties": {"number": {"type": "integer"}}},
        },
    });
    let mut out = BTreeSet::new();
    fields(&schema, &schema, "", &mut Vec::new(), &mut out);
    let expected = ["spec.labels.*", "spec.ports.number", "tags"];
    assert_eq!(out, expected.iter().map(|s| s.to_string()).collect());
}

#[test]
fn the_table_names_every_field_of_the_schema_and_no_other() {
    let schema = schema_fields();
    let rows = table_rows();
    assert!(schema.contains("spec.load_balancing.internal_load_balancer.enabled"));
    assert!(!schema.iter().any(|f| f.starts_with("spec.workload")));

    let missing: Vec<&String> = schema.iter().filter(|f| !rows.contains_key(*f)).collect();
    assert!(
        missing.is_empty(),
        "docs/upstream-fields.md does not name these fields of schemas/runway-v1.json (add a \
         row each: what the local runtime and Kubernetes do with it): {missing:?}"
    );
    let unknown: Vec<&String> = rows.keys().filter(|f| !schema.contains(*f)).collect();
    assert!(
        unknown.is_empty(),
        "docs/upstream-fields.md names fields schemas/runway-v1.json does not have: {unknown:?}"
    );
    for (field, local) in &rows {
        assert!(
            ["honoured", "**warned**", "refused"]
                .iter()
                .any(|word| local.contains(word)),
            "docs/upstream-fields.md: `{field}`'s local cell says neither honoured, warned nor \
             refused: {local}"
        );
    }
}

/// A manifest of `spec` lines (indented two spaces) that the field's warning is drawn by,
/// and where (line, column) it points.
struct Warned {
    field: &'static str,
    yaml: &'static str,
    at: (usize, usize),
}

/// The warnings' manifests: `metadata` and `spec` sit on lines 3 and 5, so what follows
/// starts on line 6.
const HEAD: &str = "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: svc\nspec:\n";

const WARNED: &[Warned] = &[
    Warned {
        field: "apiVersion",
        yaml: "apiVersion: runway/v1.0.0-beta\nkind: RunwayService\nmetadata:\n  name: svc\nspec: {}\n",
        at: (1, 13),
    },
    Warned {
        field: "metadata.name",
        yaml: "kind: RunwayService\nmetadata:\n  name: my_svc\nspec: {}\n",
        at: (3, 9),
    },
    Warned {
        field: "spec.image",
        yaml: "  image: registry.example.com/app:$TAG\n",
        at: (6, 10),
    },
    Warned {
        field: "spec.container_port",
        yaml: "  container_port: 8080\n  workload: {kind: worker, process: {command: [./w]}}\n",
        at: (6, 19),
    },
    Warned {
        field: "spec.regions",
        yaml: "  regions:\n  - us-east1\n  - europe-west1\n",
        at: (8, 5),
    },
    Warned {
        field: "spec.resources.startup_cpu_boost",
        yaml: "  resources:\n    startup_cpu_boost: true\n",
        at: (7, 24),
    },
    Warned {
        field: "spec.load_balancing.internal_load_balancer.backend_protocol",
        yaml: "  load_balancing:\n    external_load_balancer: {backend_protocol: rest}\n    \
               internal_load_balancer:\n      enabled: true\n      backend_protocol: grpc\n",
        at: (10, 25),
    },
    Warned {
        field: "spec.observability.scrape_targets",
        yaml: "  observability:\n    scrape_targets: [localhost:9090, exporter:9100]\n",
        at: (7, 38),
    },
    Warned {
        field: "spec.vpc_access.egress",
        yaml: "  vpc_access:\n    enabled: true\n    egress: ALL_TRAFFIC\n",
        at: (8, 13),
    },
    Warned {
        field: "spec.execution_environment",
        yaml: "  execution_environment: EXECUTION_ENVIRONMENT_GEN1\n",
        at: (6, 26),
    },
    Warned {
        field: "spec.request_based_billing",
        yaml: "  request_based_billing: true\n",
        at: (6, 26),
    },
];

fn diagnostics(yaml: &str) -> Vec<Diagnostic> {
    let text = if yaml.starts_with("  ") {
        format!("{HEAD}{yaml}")
    } else {
        yaml.to_owned()
    };
    let loaded = load(&ServiceFiles {
        base: Some(SourceFile::new(".runway/runway.yml", &text)),
        ..ServiceFiles::default()
    });
    assert!(
        loaded.service.is_some(),
        "a warning must not make the manifest invalid:\n{text}\n{:#?}",
        loaded.diagnostics
    );
    loaded.diagnostics
}

#[test]
fn every_field_marked_warned_draws_a_located_warning() {
    let rows = table_rows();
    let marked: BTreeSet<&str> = rows
        .iter()
        .filter(|(_, local)| local.contains("**warned**"))
        .map(|(field, _)| field.as_str())
        .collect();
    let tested: BTreeSet<&str> = WARNED.iter().map(|w| w.field).collect();
    assert_eq!(
        marked, tested,
        "the fields docs/upstream-fields.md marks warned, and those this test draws a warning \
         from"
    );
    for w in WARNED {
        let found = diagnostics(w.yaml);
        let warning = found
            .iter()
            .find(|d| d.severity == Severity::Warning && d.path.starts_with(w.field))
            .unwrap_or_else(|| panic!("`{}` draws no warning: {found:#?}", w.field));
        let at = warning.location.as_ref().expect("a warning has a location");
        assert_eq!(
            (&*at.file, at.line, at.column),
            (".runway/runway.yml", w.at.0, w.at.1),
            "{warning}"
        );
        assert!(
            found.iter().all(|d| !d.is_error()),
            "only warnings: {found:#?}"
        );
    }
}

#[test]
fn what_is_honoured_draws_no_warning() {
    for yaml in [
        "  regions: [europe-west1]\n",
        "  resources: {startup_cpu_boost: false}\n",
        "  request_based_billing: false\n",
        "  execution_environment: EXECUTION_ENVIRONMENT_GEN2\n",
        "  vpc_access: {enabled: true, egress: PRIVATE_RANGES_ONLY}\n",
        "  vpc_access: {enabled: true, egress: private-ranges-only}\n",
        "  vpc_access: {enabled: true}\n",
        "  load_balancing:\n    external_load_balancer: {backend_protocol: grpc}\n    \
         internal_load_balancer: {enabled: true, backend_protocol: HTTP2}\n",
        "  load_balancing:\n    internal_load_balancer: {enabled: true, backend_protocol: grpc}\n",
        // Upstream's own example: the external entry point off, the internal one's protocol.
        "  load_balancing:\n    external_load_balancer: {enabled: false, backend_protocol: rest}\n    \
         internal_load_balancer: {enabled: true, backend_protocol: grpc}\n",
        "  observability:\n    scrape_targets: [localhost:1, 127.0.0.1:2, '[::1]:3', 0.0.0.0:4]\n",
    ] {
        let found = diagnostics(yaml);
        assert!(found.is_empty(), "{yaml}: {found:#?}");
    }
}

#[test]
fn warnings_say_what_the_platform_does_instead() {
    let text =
        |yaml: &str| -> String { diagnostics(yaml).iter().map(|d| format!("{d}\n")).collect() };
    let regions = text("  regions: [us-east1, europe-west1, us-west2, asia-east1]\n");
    assert_eq!(
        regions,
        "warning: .runway/runway.yml:6:23: spec.regions[1]: the platform runs the service \
         once, not once per region: `europe-west1` (and 2 more) gets no instances of its own \
         (expected one region)\n"
    );
    let egress = text("  vpc_access:\n    egress: ALL_TRAFFIC\n");
    assert!(
        egress.contains("spec.vpc_access.egress: `vpc_access.enabled` is not true"),
        "{egress}"
    );
    let egress = text("  vpc_access: {enabled: true, egress: EVERYTHING}\n");
    assert!(
        egress.contains("`EVERYTHING` is not an egress setting; read as `PRIVATE_RANGES_ONLY`"),
        "{egress}"
    );
    let environment = text("  execution_environment: GEN3\n");
    assert!(
        environment.contains("`GEN3` is not an execution environment, and is not used"),
        "{environment}"
    );
    let protocol = text(
        "  load_balancing:\n    external_load_balancer: {backend_protocol: rest}\n    \
         internal_load_balancer: {enabled: true, backend_protocol: grpc}\n",
    );
    assert!(
        protocol.contains(
            "a service has one protocol, the external load balancer's (`rest`), so `grpc` is \
             not used"
        ),
        "{protocol}"
    );
}

#[test]
fn an_override_that_adds_a_region_is_warned_in_its_own_file() {
    let mut files = ServiceFiles {
        base: Some(SourceFile::new(
            ".runway/runway.yml",
            format!("{HEAD}  regions: [us-east1]\n"),
        )),
        ..ServiceFiles::default()
    };
    files.overrides.insert(
        "production".into(),
        SourceFile::new(
            ".runway/runway-production.yml",
            "spec:\n  regions:\n  - us-east1\n  - europe-west1\n",
        ),
    );
    let loaded = load(&files);
    let warnings: Vec<String> = loaded.diagnostics.iter().map(|d| d.to_string()).collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].starts_with("warning: .runway/runway-production.yml:4:5: spec.regions[1]:"),
        "{warnings:#?}"
    );
}
