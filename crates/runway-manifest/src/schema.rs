//! The JSON Schema of the manifest, generated from the Rust types, and structural validation of a
//! parsed document against it. The schema is the one source of truth for field names, types and
//! ranges: the same document is published (`runway schema`) and enforced here.

use std::sync::OnceLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use schemars::generate::SchemaSettings;
use serde_json::Value;

use crate::diagnostic::{Diagnostic, dotted_path, pointer_segment};
use crate::source::SpanMap;
use crate::types::Manifest;

/// The manifest's JSON Schema (draft 2020-12).
pub fn manifest_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let schema = SchemaSettings::draft2020_12()
            .into_generator()
            .into_root_schema_for::<Manifest>();
        let mut value = schema.to_value();
        // Optional fields are absent, never null: upstream's schema refuses `key: null` and so
        // do we, so that an empty `scalability:` is reported rather than silently ignored.
        strip_null(&mut value);
        // Enums whose variants carry doc comments come out as `oneOf` of `const`s; an `enum`
        // says the same and gives a validation error that can list the choices.
        consts_to_enum(&mut value);
        if let Value::Object(root) = &mut value {
            root.insert(
                "description".into(),
                Value::String(
                    "A Runway service manifest, `.runway/runway.yml`. A superset of upstream's \
                     runway/v1 schema: Runway's own fields live under `spec.workload`."
                        .into(),
                ),
            );
        }
        value
    })
}

/// The schema pretty-printed as it is checked in at `schemas/runway-v1.json`.
pub fn manifest_schema_json() -> String {
    // Serialising a `Value` cannot fail.
    let mut text = serde_json::to_string_pretty(manifest_schema()).unwrap_or_default();
    text.push('\n');
    text
}

/// The manifest reference in Markdown, generated from the schema: one row per field, with its
/// type, limits and description. Checked in at `docs/manifest.md`.
pub fn manifest_reference_markdown() -> String {
    let schema = manifest_schema();
    let mut out = String::from(
        "# Manifest reference\n\n\
         Generated from the JSON Schema (`runway schema`, `schemas/runway-v1.json`); do not edit by hand.\n\
         Fields under `spec.workload` are Runway's own; every other field is upstream's `runway/v1`.\n\n\
         | field | type | description |\n| --- | --- | --- |\n",
    );
    reference_rows(schema, schema, "", &mut out);
    out
}

fn reference_rows(root: &Value, node: &Value, prefix: &str, out: &mut String) {
    let node = resolve(root, node);
    let Some(properties) = node.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = node
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, property) in properties {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        let resolved = resolve(root, property);
        let items = resolved.get("items").map(|i| resolve(root, i));
        let mut kind = type_label(resolved);
        let mut limits = Vec::new();
        if required.contains(&name.as_str()) {
            limits.push("required".to_owned());
        }
        limits.extend(bounds(resolved));
        if let Some(items) = items {
            kind = format!("list of {}", type_label(items));
            let each = bounds(items);
            if !each.is_empty() {
                limits.push(format!("each {}", each.join(", ")));
            }
        }
        if !limits.is_empty() {
            kind = format!("{kind} ({})", limits.join(", "));
        }
        let own = property.get("description").and_then(Value::as_str);
        let mut description = own
            .or_else(|| resolved.get("description").and_then(Value::as_str))
            .unwrap_or_default()
            .to_owned();
        // An enum's values are described on its definition, which the field's own description
        // hides: list them after it.
        if own.is_some()
            && resolved.get("enum").is_some()
            && let Some((_, values)) = resolved
                .get("description")
                .and_then(Value::as_str)
                .and_then(|d| d.split_once("\n\n- "))
        {
            description = format!("{description}\n\n- {values}");
        }
        let description = description
            .replace("\n\n", "<br>")
            .replace("\n- ", "<br>- ")
            .replace('\n', " ")
            .replace('|', "\\|");
        out.push_str(&format!("| `{path}` | {kind} | {description} |\n"));
        reference_rows(root, resolved, &path, out);
        if let Some(items) = items {
            reference_rows(root, items, &format!("{path}[]"), out);
        }
        if let Some(values) = resolved
            .get("additionalProperties")
            .filter(|v| v.is_object())
        {
            reference_rows(root, values, &format!("{path}.*"), out);
        }
    }
}

/// The numeric, length and size limits of a schema node, as the reference shows them.
fn bounds(node: &Value) -> Vec<String> {
    [
        ("minimum", "≥"),
        ("exclusiveMinimum", ">"),
        ("maximum", "≤"),
        ("exclusiveMaximum", "<"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
    ]
    .into_iter()
    .filter_map(|(key, label)| Some(format!("{label} {}", node.get(key)?)))
    .collect()
}

fn type_label(node: &Value) -> String {
    if let Some(only) = node.get("const") {
        return format!("`{}`", plain(only));
    }
    if let Some(options) = node.get("enum").and_then(Value::as_array) {
        return options
            .iter()
            .map(|o| format!("`{}`", plain(o)))
            .collect::<Vec<_>>()
            .join(" \\| ");
    }
    match node.get("type") {
        Some(Value::String(t))
            if t == "object"
                && node
                    .get("additionalProperties")
                    .is_some_and(Value::is_object) =>
        {
            "map of string".to_owned()
        }
        Some(Value::String(t)) if t == "object" => "mapping".to_owned(),
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(types)) => types.iter().map(plain).collect::<Vec<_>>().join(" or "),
        _ => "any".to_owned(),
    }
}

pub(crate) fn strip_null(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Array(types)) = map.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let single = types.remove(0);
                    map.insert("type".into(), single);
                }
            }
            for key in ["anyOf", "oneOf"] {
                if let Some(Value::Array(variants)) = map.get_mut(key) {
                    variants.retain(|v| v.get("type").and_then(Value::as_str) != Some("null"));
                    if variants.len() == 1 {
                        let only = variants.remove(0);
                        map.remove(key);
                        if let Value::Object(only) = only {
                            map.extend(only);
                        }
                    }
                }
            }
            map.values_mut().for_each(strip_null);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_null),
        _ => {}
    }
}

pub(crate) fn consts_to_enum(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let variants = map
                .get("oneOf")
                .and_then(Value::as_array)
                .and_then(|variants| {
                    variants
                        .iter()
                        .map(|v| {
                            Some((
                                v.get("const")?.clone(),
                                v.get("description")
                                    .and_then(Value::as_str)
                                    .map(str::to_owned),
                            ))
                        })
                        .collect::<Option<Vec<_>>>()
                });
            if let Some(variants) = variants {
                map.remove("oneOf");
                let lines: Vec<String> = variants
                    .iter()
                    .filter_map(|(value, doc)| {
                        Some(format!("- `{}`: {}", plain(value), doc.as_ref()?))
                    })
                    .collect();
                if !lines.is_empty() {
                    let head = map
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    map.insert(
                        "description".into(),
                        Value::String(format!("{head}\n\n{}", lines.join("\n")).trim().to_owned()),
                    );
                }
                map.insert(
                    "enum".into(),
                    Value::Array(variants.into_iter().map(|(v, _)| v).collect()),
                );
            }
            map.values_mut().for_each(consts_to_enum);
        }
        Value::Array(items) => items.iter_mut().for_each(consts_to_enum),
        _ => {}
    }
}

fn validator() -> Option<&'static jsonschema::Validator> {
    static VALIDATOR: OnceLock<Option<jsonschema::Validator>> = OnceLock::new();
    VALIDATOR
        .get_or_init(|| jsonschema::validator_for(manifest_schema()).ok())
        .as_ref()
}

/// Checks `value` against the manifest's schema and returns every violation, located through
/// `spans`, and the pointers of the nodes at fault.
pub(crate) fn check(value: &Value, spans: &SpanMap) -> (Vec<Diagnostic>, Vec<String>) {
    check_against(manifest_schema(), validator(), "manifest", value, spans)
}

/// [`check`] against `schema` (the `what` schema), whose compiled `validator` it is.
pub(crate) fn check_against(
    schema: &Value,
    validator: Option<&jsonschema::Validator>,
    what: &str,
    value: &Value,
    spans: &SpanMap,
) -> (Vec<Diagnostic>, Vec<String>) {
    let Some(validator) = validator else {
        // The schema is generated from our own types; a test proves it compiles.
        return (
            vec![Diagnostic::error(
                None,
                "",
                format!("internal error: the {what} schema does not compile"),
            )],
            Vec::new(),
        );
    };
    let mut out = Vec::new();
    let mut faulty = Vec::new();
    for error in validator.iter_errors(value) {
        let pointer = error.instance_path().as_str().to_owned();
        let path = dotted_path(&pointer);
        let instance = value.pointer(&pointer);
        let diagnostic = match error.kind() {
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                let allowed = property_names(schema, &pointer);
                for key in unexpected {
                    let child = format!("{pointer}/{}", pointer_segment(key));
                    faulty.push(child.clone());
                    out.push(
                        Diagnostic::error(
                            spans.key_location(&child),
                            dotted_path(&child),
                            format!("unknown field `{key}`"),
                        )
                        .expected(one_of(&allowed))
                        .suggest(nearest(key, &allowed)),
                    );
                }
                continue;
            }
            ValidationErrorKind::Required { property } => {
                let name = property.as_str().unwrap_or_default();
                Diagnostic::error(
                    spans.key_location(&pointer),
                    path,
                    format!("missing required field `{name}`"),
                )
            }
            ValidationErrorKind::Type { kind } => {
                let expected = match kind {
                    TypeKind::Single(t) => article(&t.to_string()),
                    TypeKind::Multiple(set) => set
                        .iter()
                        .map(|t| article(&t.to_string()))
                        .collect::<Vec<_>>()
                        .join(" or "),
                };
                let found = match instance {
                    Some(Value::String(text)) if spans.is_non_finite(&pointer) => {
                        format!("found `{text}`, which is not a finite number")
                    }
                    _ => format!("found {}", describe(instance)),
                };
                Diagnostic::error(spans.value_location(&pointer), path, found).expected(expected)
            }
            ValidationErrorKind::Enum { options }
            | ValidationErrorKind::Constant {
                expected_value: options,
            } => {
                let options: Vec<String> = match options.as_ref() {
                    Value::Array(items) => items.iter().map(plain).collect(),
                    other => vec![plain(other)],
                };
                // Runway's own values carry a `runway_` prefix that users may leave out.
                let suggestion = instance.and_then(Value::as_str).and_then(|s| {
                    nearest(s, &options).or_else(|| {
                        options
                            .iter()
                            .any(|o| o.starts_with("runway_"))
                            .then(|| nearest(&format!("runway_{s}"), &options))
                            .flatten()
                    })
                });
                Diagnostic::error(
                    spans.value_location(&pointer),
                    path,
                    format!("{} is not allowed here", describe(instance)),
                )
                .expected(one_of(&options))
                .suggest(suggestion)
            }
            ValidationErrorKind::Minimum { limit } => {
                bound(spans, &pointer, instance, format!("at least {limit}"))
            }
            ValidationErrorKind::Maximum { limit } => {
                bound(spans, &pointer, instance, format!("at most {limit}"))
            }
            ValidationErrorKind::ExclusiveMinimum { limit } => {
                bound(spans, &pointer, instance, format!("more than {limit}"))
            }
            ValidationErrorKind::ExclusiveMaximum { limit } => {
                bound(spans, &pointer, instance, format!("less than {limit}"))
            }
            ValidationErrorKind::MinLength { limit } => bound(
                spans,
                &pointer,
                instance,
                format!("at least {limit} characters"),
            ),
            ValidationErrorKind::MaxLength { limit } => bound(
                spans,
                &pointer,
                instance,
                format!("at most {limit} characters"),
            ),
            ValidationErrorKind::MinItems { limit } => bound(
                spans,
                &pointer,
                instance,
                format!(
                    "at least {limit} item{}",
                    if *limit == 1 { "" } else { "s" }
                ),
            ),
            ValidationErrorKind::MaxItems { limit } => bound(
                spans,
                &pointer,
                instance,
                format!("at most {limit} item{}", if *limit == 1 { "" } else { "s" }),
            ),
            ValidationErrorKind::UniqueItems => Diagnostic::error(
                spans.value_location(&pointer),
                path,
                "the list repeats an item",
            )
            .expected("each item once"),
            ValidationErrorKind::Pattern { pattern } => bound(
                spans,
                &pointer,
                instance,
                format!("text matching `{pattern}`"),
            ),
            _ => Diagnostic::error(spans.value_location(&pointer), path, error.to_string()),
        };
        if !matches!(error.kind(), ValidationErrorKind::Required { .. }) {
            faulty.push(pointer);
        }
        out.push(diagnostic);
    }
    (out, faulty)
}

fn bound(spans: &SpanMap, pointer: &str, instance: Option<&Value>, expected: String) -> Diagnostic {
    Diagnostic::error(
        spans.value_location(pointer),
        dotted_path(pointer),
        format!("found {}", describe(instance)),
    )
    .expected(expected)
}

fn article(kind: &str) -> String {
    match kind {
        "object" => "a mapping".to_owned(),
        "array" => "a list".to_owned(),
        "integer" => "an integer".to_owned(),
        other => format!("a {other}"),
    }
}

/// A value as shown in a message: its text where short, else its kind.
pub(crate) fn describe(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "nothing (null)".to_owned(),
        Some(Value::Bool(b)) => format!("`{b}`"),
        Some(Value::Number(n)) => format!("`{n}`"),
        Some(Value::String(s)) if s.chars().count() <= 40 => format!("the string \"{s}\""),
        Some(Value::String(s)) => format!("a string of {} characters", s.chars().count()),
        Some(Value::Array(items)) => format!("a list of {} items", items.len()),
        Some(Value::Object(_)) => "a mapping".to_owned(),
    }
}

fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn one_of(options: &[String]) -> String {
    match options {
        [] => "no fields here".to_owned(),
        [only] => format!("`{only}`"),
        _ => format!(
            "one of {}",
            options
                .iter()
                .map(|o| format!("`{o}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The closest of `candidates` to `word`, when close enough to be a likely typo.
pub(crate) fn nearest(word: &str, candidates: &[String]) -> Option<String> {
    let word_lower = word.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| {
            (
                strsim::jaro_winkler(&word_lower, &c.to_ascii_lowercase()),
                c,
            )
        })
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c.clone())
}

/// Names of the properties the schema allows for the object at `pointer`.
fn property_names(schema: &Value, pointer: &str) -> Vec<String> {
    let mut node = resolve(schema, schema);
    for segment in pointer.split('/').skip(1) {
        let next = node
            .get("properties")
            .and_then(|p| p.get(segment.replace("~1", "/").replace("~0", "~")))
            .or_else(|| node.get("items"))
            .or_else(|| node.get("additionalProperties").filter(|v| v.is_object()));
        match next {
            Some(next) => node = resolve(schema, next),
            None => return Vec::new(),
        }
    }
    node.get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

fn resolve<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    match node
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix('#'))
    {
        Some(pointer) => root.pointer(pointer).unwrap_or(node),
        None => node,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_compiles_and_has_no_null_types() {
        assert!(validator().is_some());
        assert!(!manifest_schema_json().contains("\"null\""));
    }

    #[test]
    fn suggestions() {
        let keys: Vec<String> = ["request_timeout", "regions", "resources"]
            .map(String::from)
            .into();
        assert_eq!(
            nearest("request_timout", &keys).as_deref(),
            Some("request_timeout")
        );
        assert_eq!(nearest("zzz", &keys), None);
    }

    #[test]
    fn strategies_are_suggested_without_their_prefix() {
        let value = serde_json::json!({
            "apiVersion": "runway/v1", "kind": "RunwayService", "metadata": {"name": "a"},
            "spec": {"deployment": {"strategy": "blue_green"}}
        });
        let (errors, _) = check(&value, &SpanMap::default());
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].suggestion.as_deref(), Some("runway_blue_green"));
    }

    #[test]
    fn property_names_follow_refs() {
        let names = property_names(manifest_schema(), "/spec/scalability");
        assert!(names.contains(&"min_instances".to_owned()), "{names:?}");
    }
}
