//! The OpenAPI document: checked in, served, and complete enough for schemathesis.

use std::path::Path;

use hyper::StatusCode;
use serde_json::Value;

use crate::support::start;

/// The checked-in document equals the generated one; `UPDATE_GENERATED=1` rewrites it.
#[test]
fn the_checked_in_document_is_up_to_date() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    let generated = runway_api::openapi::openapi_json();
    if std::env::var("UPDATE_GENERATED").as_deref() == Ok("1") {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "crates/runway-api/openapi.json differs from the code: run \
         `UPDATE_GENERATED=1 cargo test -p runway-api` and commit it"
    );
}

#[test]
fn the_document_is_openapi_3_1_and_every_operation_declares_its_responses() {
    let doc = runway_api::openapi::openapi();
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["info"]["title"].is_string() && doc["info"]["version"].is_string());
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            operations += 1;
            let responses = op["responses"].as_object().unwrap();
            // A success, or for a sign-in's steps the redirect that is one.
            assert!(
                responses.keys().any(|k| k.starts_with('2'))
                    || (path.starts_with("/v1/sso/") && responses.contains_key("303")),
                "{method} {path}"
            );
            let public = runway_api::openapi::PUBLIC_PATHS.contains(&path.as_str());
            if !public {
                for status in ["400", "401", "403", "500"] {
                    assert!(
                        responses.contains_key(status),
                        "{method} {path} lacks {status}"
                    );
                }
            }
            // Every path parameter is declared.
            let declared: Vec<&str> = op["parameters"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .filter(|p| p["in"] == "path")
                        .map(|p| p["name"].as_str().unwrap())
                        .collect()
                })
                .unwrap_or_default();
            for segment in path.split('/').filter(|s| s.starts_with('{')) {
                let name = segment.trim_matches(|c| c == '{' || c == '}');
                assert!(
                    declared.contains(&name),
                    "{method} {path}: {name} undeclared"
                );
            }
        }
    }
    assert_eq!(operations, 60, "the contract has 60 routes");
    // Every $ref resolves.
    let mut refs = Vec::new();
    collect_refs(doc, &mut refs);
    for r in refs {
        let name = r.strip_prefix("#/components/schemas/").unwrap();
        assert!(schemas.contains_key(name), "dangling {r}");
    }
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "$ref" {
                    out.push(v.as_str().unwrap().to_owned());
                } else {
                    collect_refs(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

#[tokio::test]
async fn the_document_is_served() {
    let server = start().await;
    let answer = server.call("GET", "/openapi.json", None, None).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.content_type, "application/json");
    assert_eq!(&answer.body, runway_api::openapi::openapi());
}

/// A field the API may send as `null` says so: a schema-checking client (schemathesis among
/// them) must accept every answer.
#[test]
fn fields_that_may_be_null_are_nullable() {
    let doc = runway_api::openapi::openapi();
    let event = &doc["components"]["schemas"]["ScalingView"]["properties"]["last_change_event"];
    let types = event["type"].as_array().cloned().unwrap_or_default();
    assert!(
        types.iter().any(|t| t == "null") && types.iter().any(|t| t == "object"),
        "{event}"
    );
}

/// The document says what the server checks of a request (schemathesis, in
/// `crates/runway-cli/tests/server.rs`, holds the server to it): a JSON body is an object,
/// never `null`, also where it may be left out; a snapshot's digest has its pattern.
#[test]
fn request_bodies_are_objects_and_digests_have_their_pattern() {
    let doc = runway_api::openapi::openapi();
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let mut digests = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if let Some(json) = op["requestBody"]["content"].get("application/json") {
                let schema = &json["schema"];
                let resolved = match schema["$ref"].as_str() {
                    Some(r) => &schemas[r.trim_start_matches("#/components/schemas/")],
                    None => schema,
                };
                assert_eq!(resolved["type"], "object", "{method} {path}: {schema}");
            }
            for parameter in op["parameters"].as_array().into_iter().flatten() {
                if parameter["name"] == "digest" {
                    digests += 1;
                    assert_eq!(
                        parameter["schema"]["pattern"], "^sha256:[0-9a-f]{64}$",
                        "{method} {path}"
                    );
                }
            }
        }
    }
    assert_eq!(digests, 2, "GET and PUT …/sources/{{digest}}");
}
