//! The OpenAPI 3.1 document, generated from the handlers' `#[utoipa::path]` attributes and
//! the types' `ToSchema` derives (the router and the document are built together by
//! `utoipa-axum`, so a route cannot be served without being described), then completed here
//! with what every route shares: bearer authentication and the error responses.

use std::sync::OnceLock;

use serde_json::{Map, Value, json};
use utoipa::OpenApi;

use crate::error::{ErrorBody, ErrorDetail};
use crate::types::{DIGEST_PATTERN, LABEL_MAX, LABEL_PATTERN};

/// The routes that need no credential at all ([`crate::access::Needs::Public`]; signing in
/// with a token takes one in its body); single sign-on's, where the provider says who it is.
pub const PUBLIC_PATHS: [&str; 11] = [
    "/healthz",
    "/.well-known/openid-configuration",
    "/.well-known/jwks.json",
    "/openapi.json",
    "/metrics",
    "/v1/access",
    "/v1/sso",
    "/v1/sso/login",
    "/v1/sso/callback",
    "/v1/sso/cli",
    "/v1/sso/token",
];

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Runway control-plane API",
        description = "Services, deployments, revisions, secrets, tokens and the audit log. \
            Every route but /healthz, /metrics, /openapi.json, /v1/access, the identity \
            tokens' issuer's (/.well-known/…) and single sign-on's (/v1/sso…) needs \
            `Authorization: Bearer <token>` (or the web console's session cookie, `POST \
            /v1/session`); what each needs (a role on the service, or an admin) is its \
            `x-runway-access`, the table `GET /v1/access` serves. Errors are \
            `{\"error\": {\"code\", \"message\", \"field\"}}`."
    ),
    // The watch stream's events (a text/event-stream body the handler cannot type).
    components(schemas(ErrorBody, ErrorDetail, crate::types::WatchEvents))
)]
struct ApiDoc;

/// The document's parts that no handler describes (info, shared schemas).
pub(crate) fn base() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The document as a JSON value.
pub fn openapi() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let (_, api) = crate::routes::api_router_with(base()).split_for_parts();
        let mut doc = serde_json::to_value(&api).unwrap_or(Value::Null);
        complete(&mut doc);
        doc
    })
}

/// The document as it is served and checked in: pretty-printed, with a final newline.
pub fn openapi_json() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut text = serde_json::to_string_pretty(openapi()).unwrap_or_default();
        text.push('\n');
        text
    })
}

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    })
}

/// Adds the bearer scheme, the security requirement and the shared error responses.
fn complete(doc: &mut Value) {
    let Some(root) = doc.as_object_mut() else {
        return;
    };
    root.insert("security".into(), json!([{"bearer": []}, {"console": []}]));
    let components = root
        .entry("components")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(components) = components.as_object_mut() {
        components.insert(
            "securitySchemes".into(),
            json!({"bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "A Runway token: `runway_admin_…` or `runway_deploy_…`."
            }, "console": {
                "type": "apiKey",
                "in": "cookie",
                "name": "runway_session",
                "description": "The web console's session (`POST /v1/session`), used when \
                    there is no `Authorization` header. A request that changes something \
                    with it also needs `X-Runway-Console: 1` and, when `Origin` is sent, the \
                    API's own origin: 403 otherwise."
            }}),
        );
    }
    if let Some(schemas) = root
        .get_mut("components")
        .and_then(|c| c.get_mut("schemas"))
        .and_then(Value::as_object_mut)
    {
        schemas.values_mut().for_each(close_tagged_enum);
    }
    let Some(paths) = root.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let public = PUBLIC_PATHS.contains(&path.as_str());
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, operation) in item.iter_mut() {
            let Some(operation) = operation.as_object_mut() else {
                continue;
            };
            if let Some(entry) = crate::access::find(method, path) {
                operation.insert(
                    "x-runway-access".into(),
                    json!({ "needs": entry.needs, "on": entry.on }),
                );
            }
            let has_body = operation.contains_key("requestBody");
            constrain_path_parameters(operation);
            if let Some(body) = operation.get_mut("requestBody") {
                optional_body_not_null(body);
            }
            let mut errors: Vec<(&str, &str)> = Vec::new();
            if public {
                operation.insert("security".into(), json!([]));
            } else {
                operation.remove("security");
                errors.extend([
                    (
                        "400",
                        "Invalid input; `field` names the request field at fault",
                    ),
                    (
                        "401",
                        "Missing, malformed, unknown, expired or revoked token",
                    ),
                    ("403", "The token may not do this"),
                    (
                        "500",
                        "Internal error (the cause is logged with the request id)",
                    ),
                    ("503", "The request took longer than the server's bound"),
                ]);
                errors.push((
                    "404",
                    "Not found: a route, or a thing the path or body names",
                ));
                if method != "get" {
                    errors.push(("409", "Conflicts with what is stored now"));
                }
                if has_body {
                    errors.push(("413", "The request body is too large"));
                }
            }
            let responses = operation
                .entry("responses")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(responses) = responses.as_object_mut() {
                // OpenAPI requires a description on every response.
                for (status, response) in responses.iter_mut() {
                    if let Some(response) = response.as_object_mut() {
                        response
                            .entry("description")
                            .or_insert_with(|| Value::String(reason(status).to_owned()));
                    }
                }
                for (status, description) in errors {
                    responses
                        .entry(status)
                        .or_insert_with(|| error_response(description));
                }
                sort_keys(responses);
            }
        }
    }
}

/// An externally tagged enum (`{"admin": {}}`, `{"deploy": {…}}`) refuses other keys, as
/// serde does: every `oneOf` branch with one required key, and its value when it is an
/// object of named fields, get `additionalProperties: false`.
fn close_tagged_enum(schema: &mut Value) {
    let Some(branches) = schema.get_mut("oneOf").and_then(Value::as_array_mut) else {
        return;
    };
    for branch in branches {
        let Some(branch) = branch.as_object_mut() else {
            continue;
        };
        let tag = match branch.get("required").and_then(Value::as_array) {
            Some(required) if required.len() == 1 => required[0].as_str().map(str::to_owned),
            _ => None,
        };
        let Some(tag) = tag else {
            continue;
        };
        branch.insert("additionalProperties".into(), Value::Bool(false));
        if let Some(inner) = branch
            .get_mut("properties")
            .and_then(|p| p.get_mut(&tag))
            .and_then(Value::as_object_mut)
            && inner.get("type") == Some(&json!("object"))
        {
            inner.insert("additionalProperties".into(), Value::Bool(false));
        }
    }
}

/// A body that may be left out (`request_body = Option<T>`, read as `{}`) is still T when
/// sent: utoipa says `T or null`, and the server refuses a `null`.
fn optional_body_not_null(body: &mut Value) {
    if body.get("required") == Some(&Value::Bool(true)) {
        return;
    }
    let Some(content) = body.get_mut("content").and_then(Value::as_object_mut) else {
        return;
    };
    for media in content.values_mut() {
        let Some(schema) = media.get_mut("schema") else {
            continue;
        };
        let not_null = match schema
            .get("oneOf")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
        {
            Some([only, null]) if null == &json!({"type": "null"}) => only.clone(),
            _ => continue,
        };
        *schema = not_null;
    }
}

/// Path parameters' patterns, the same for every route: service and environment names are
/// DNS labels, secret names environment variable names, a code snapshot's digest `sha256:`
/// and 64 lowercase hex digits.
fn constrain_path_parameters(operation: &mut Map<String, Value>) {
    let Some(parameters) = operation
        .get_mut("parameters")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for parameter in parameters {
        if parameter["in"] != "path" {
            continue;
        }
        let constraint = match parameter["name"].as_str() {
            Some("service" | "env" | "team") => json!({
                "type": "string",
                "pattern": LABEL_PATTERN,
                "maxLength": LABEL_MAX
            }),
            Some("digest") => json!({"type": "string", "pattern": DIGEST_PATTERN}),
            Some("name") => json!({
                "type": "string",
                "pattern": "^[A-Z_][A-Z0-9_]*$",
                "maxLength": runway_secrets::name::MAX_NAME_LEN
            }),
            _ => continue,
        };
        parameter["schema"] = constraint;
    }
}

/// The reason phrase of a success status, as a response's default description.
fn reason(status: &str) -> &'static str {
    match status {
        "200" => "OK",
        "201" => "Created",
        "202" => "Accepted: the reconciler carries it out",
        "204" => "No content",
        _ => "Response",
    }
}

fn sort_keys(map: &mut Map<String, Value>) {
    let mut entries: Vec<(String, Value)> = std::mem::take(map).into_iter().collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    map.extend(entries);
}
