//! The REST verbs on resources: get, list, create, update, patch (merge, strategic, apply),
//! delete, deletecollection, and the `scale` subresource. Watch is in `watch.rs`, pod logs in
//! `logs.rs`. Every write here is a client's: defaulted, validated, its field ownership
//! tracked, and kept for `validate_received`.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::fields::{self, Conflict};
use crate::http::{Query, Reply, status};
use crate::resources::{self, DEPLOYMENTS, NAMESPACES, PODS, ResId};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{self, Key, metadata_mut, name_of, uid_of};
use crate::{Received, Shared, World, admission, logs, util, watch};

/// One request on a resource.
#[derive(Debug)]
pub(crate) struct Call<'a> {
    pub(crate) method: &'a str,
    pub(crate) res: ResId,
    pub(crate) namespace: Option<&'a str>,
    pub(crate) name: Option<&'a str>,
    pub(crate) subresource: Option<&'a str>,
    pub(crate) query: &'a Query,
    pub(crate) body: &'a [u8],
    pub(crate) content_type: &'a str,
    pub(crate) user_agent: &'a str,
}

impl Call<'_> {
    /// The namespace part of a key ("" for cluster-scoped resources).
    pub(crate) fn ns(&self) -> &str {
        self.namespace.unwrap_or("")
    }

    fn manager(&self) -> String {
        match self.query.get("fieldManager") {
            Some(m) if !m.is_empty() => m.to_owned(),
            // As the real server: the user agent up to its first '/', "" without one.
            _ => self
                .user_agent
                .split('/')
                .next()
                .unwrap_or("")
                .chars()
                .take(128)
                .collect(),
        }
    }

    fn write_ctx(&self) -> WriteCtx {
        WriteCtx {
            res: self.res,
            namespace: self.ns().to_owned(),
            manager: self.manager(),
            dry_run: self.query.get("dryRun") == Some("All"),
        }
    }
}

/// An error answered as a `Status`.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) code: u16,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    pub(crate) details: Option<Value>,
}

fn details(res: ResId, name: &str) -> Value {
    let r = resources::get(res);
    json!({"name": name, "group": r.group, "kind": r.plural})
}

impl ApiError {
    pub(crate) fn reply(self) -> Reply {
        Reply::Json(
            self.code,
            status(self.code, self.reason, &self.message, self.details),
        )
    }

    pub(crate) fn not_found(res: ResId, name: &str) -> Self {
        Self {
            code: 404,
            reason: "NotFound",
            message: format!("{} {name:?} not found", resources::get(res).qualified()),
            details: Some(details(res, name)),
        }
    }

    fn already_exists(res: ResId, name: &str) -> Self {
        Self {
            code: 409,
            reason: "AlreadyExists",
            message: format!(
                "{} {name:?} already exists",
                resources::get(res).qualified()
            ),
            details: Some(details(res, name)),
        }
    }

    fn conflict(res: ResId, name: &str, why: &str) -> Self {
        Self {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {} {name:?}: {why}",
                resources::get(res).qualified()
            ),
            details: Some(details(res, name)),
        }
    }

    fn stale(res: ResId, name: &str) -> Self {
        Self::conflict(
            res,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self {
            code: 400,
            reason: "BadRequest",
            message: message.into(),
            details: None,
        }
    }

    fn invalid(res: ResId, name: &str, causes: &[admission::Cause]) -> Self {
        let r = resources::get(res);
        let parts: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let joined = if parts.len() == 1 {
            parts.join("")
        } else {
            format!("[{}]", parts.join(", "))
        };
        Self {
            code: 422,
            reason: "Invalid",
            message: format!("{} {name:?} is invalid: {joined}", r.qualified_kind()),
            details: Some(json!({
                "name": name,
                "group": r.group,
                "kind": r.kind,
                "causes": causes.iter().map(|c| json!({
                    "reason": c.reason, "message": c.message, "field": c.field,
                })).collect::<Vec<_>>(),
            })),
        }
    }

    fn forbidden(res: ResId, name: &str, why: &str) -> Self {
        Self {
            code: 403,
            reason: "Forbidden",
            message: format!(
                "{} {name:?} is forbidden: {why}",
                resources::get(res).qualified()
            ),
            details: Some(details(res, name)),
        }
    }

    fn method_not_allowed() -> Self {
        Self {
            code: 405,
            reason: "MethodNotAllowed",
            message: "the server does not allow this method on the requested resource".into(),
            details: Some(json!({})),
        }
    }

    fn unsupported_media_type(content_type: &str) -> Self {
        Self {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!(
                "the body of the request was in an unknown format ({content_type:?}) - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
            ),
            details: None,
        }
    }

    fn apply_conflicts(res: ResId, name: &str, conflicts: &[Conflict]) -> Self {
        let message = if let [c] = conflicts {
            format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                c.manager, c.field
            )
        } else {
            let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
            managers.sort_unstable();
            managers.dedup();
            let mut lines = Vec::new();
            for m in managers {
                lines.push(format!("conflicts with {m}:"));
                for c in conflicts.iter().filter(|c| c.manager == m) {
                    lines.push(format!("- {}", c.field));
                }
            }
            format!(
                "Apply failed with {} conflicts: {}",
                conflicts.len(),
                lines.join("\n")
            )
        };
        let r = resources::get(res);
        Self {
            code: 409,
            reason: "Conflict",
            message,
            details: Some(json!({
                "name": name,
                "group": r.group,
                "kind": r.plural,
                "causes": conflicts.iter().map(|c| json!({
                    "reason": "FieldManagerConflict",
                    "message": format!("conflict with {}", c.manager),
                    "field": c.field,
                })).collect::<Vec<_>>(),
            })),
        }
    }
}

pub(crate) async fn handle(shared: &Arc<Shared>, call: Call<'_>) -> Reply {
    let r = resources::get(call.res);
    if r.namespaced && call.namespace.is_none() && (call.name.is_some() || call.method != "GET") {
        return ApiError::method_not_allowed().reply();
    }
    let result = match (call.method, call.name, call.subresource) {
        ("GET", None, None) if call.query.flag("watch") => return watch::start(shared, &call),
        ("GET", Some(name), Some("log")) => return logs::handle(shared, &call, name),
        ("GET", None, None) => shared.with(|w| list(w, &call)),
        ("GET", Some(name), None | Some("status")) => shared.with(|w| get(w, &call, name)),
        ("GET", Some(name), Some("scale")) => shared.with(|w| {
            let key = Key::new(call.res, call.ns(), name);
            w.store
                .get(&key)
                .map(|d| Reply::Json(200, scale_of(d)))
                .ok_or_else(|| ApiError::not_found(call.res, name))
        }),
        ("PUT" | "PATCH", Some(name), Some("scale")) => shared.with(|w| scale(w, &call, name)),
        ("POST", None, None) => shared.with(|w| create(w, &call)),
        ("PUT", Some(name), None) => shared.with(|w| update(w, &call, name)),
        ("PATCH", Some(name), None) => shared.with(|w| patch(w, &call, name)),
        ("DELETE", Some(name), None) => shared.with(|w| delete(w, &call, name)),
        ("DELETE", None, None) => shared.with(|w| delete_collection(w, &call)),
        _ => Err(ApiError::method_not_allowed()),
    };
    result.unwrap_or_else(ApiError::reply)
}

fn get(w: &World, call: &Call<'_>, name: &str) -> Result<Reply, ApiError> {
    w.store
        .get(&Key::new(call.res, call.ns(), name))
        .map(|o| Reply::Json(200, o.clone()))
        .ok_or_else(|| ApiError::not_found(call.res, name))
}

/// The selectors of a list, watch or deletecollection.
pub(crate) fn selectors(call: &Call<'_>) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(call.query.get("labelSelector").unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let fields = FieldSelector::parse(
        call.query.get("fieldSelector").unwrap_or(""),
        resources::get(call.res).plural,
    )
    .map_err(ApiError::bad_request)?;
    Ok((labels, fields))
}

/// An object as a list item: the real server leaves out `kind` and `apiVersion`.
pub(crate) fn as_item(obj: &Value) -> Value {
    let mut item = obj.clone();
    if let Some(o) = item.as_object_mut() {
        o.remove("kind");
        o.remove("apiVersion");
    }
    item
}

fn list(w: &World, call: &Call<'_>) -> Result<Reply, ApiError> {
    let (labels, fields) = selectors(call)?;
    if call.query.get("continue").is_some_and(|c| !c.is_empty()) {
        return Err(ApiError::bad_request(
            "continue key is not valid: this server returns every list in one page",
        ));
    }
    let rv = call.query.get("resourceVersion").unwrap_or("");
    if !rv.is_empty() {
        let n: u64 = rv
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid resource version {rv:?}")))?;
        if call.query.get("resourceVersionMatch") == Some("Exact") && n < w.store.compacted() {
            return Err(ApiError {
                code: 410,
                reason: "Expired",
                message: format!("too old resource version: {n} ({})", w.store.compacted()),
                details: Some(json!({})),
            });
        }
    }
    let r = resources::get(call.res);
    let items: Vec<Value> = w
        .store
        .list(call.res, call.namespace)
        .filter(|o| labels.matches(o) && fields.matches(o))
        .map(as_item)
        .collect();
    Ok(Reply::Json(
        200,
        json!({
            "kind": format!("{}List", r.kind),
            "apiVersion": r.api_version(),
            "metadata": {"resourceVersion": w.store.rv().to_string()},
            "items": items,
        }),
    ))
}

/// What a client write needs to know besides the object.
#[derive(Debug)]
pub(crate) struct WriteCtx {
    pub(crate) res: ResId,
    /// "" for cluster-scoped resources.
    pub(crate) namespace: String,
    pub(crate) manager: String,
    pub(crate) dry_run: bool,
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body of the request could not be decoded as JSON: {e}"
        ))
    })?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request is not a JSON object",
        ));
    }
    Ok(v)
}

/// The body's `apiVersion` and `kind`, when given (or when `required`), must be the resource's.
fn check_type(res: ResId, obj: &Value, required: bool) -> Result<(), ApiError> {
    let r = resources::get(res);
    let api_version = obj.get("apiVersion").and_then(Value::as_str);
    let kind = obj.get("kind").and_then(Value::as_str);
    if required && (api_version.is_none() || kind.is_none()) {
        return Err(ApiError::bad_request(
            "apiVersion and kind must be set in an apply configuration",
        ));
    }
    if let Some(v) = api_version
        && v != r.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({v}) does not match the expected API version ({})",
            r.api_version()
        )));
    }
    if let Some(k) = kind
        && k != r.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            r.kind
        )));
    }
    Ok(())
}

/// The body's namespace, when given, must be the path's; sets it when missing.
fn check_namespace_field(ctx: &WriteCtx, obj: &mut Value) -> Result<(), ApiError> {
    let r = resources::get(ctx.res);
    let meta = metadata_mut(obj);
    if !r.namespaced {
        meta.remove("namespace");
        return Ok(());
    }
    match meta.get("namespace").and_then(Value::as_str) {
        Some(ns) if !ns.is_empty() && ns != ctx.namespace => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => {
            meta.insert("namespace".into(), json!(ctx.namespace));
            Ok(())
        }
    }
}

/// The body's name, when given, must be the path's; sets it when missing.
fn check_name_field(obj: &mut Value, name: &str) -> Result<(), ApiError> {
    let meta = metadata_mut(obj);
    match meta.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() && n != name => Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        ))),
        _ => {
            meta.insert("name".into(), json!(name));
            Ok(())
        }
    }
}

/// New content may go in the namespace: it exists and is not being deleted.
fn check_namespace_open(w: &World, ctx: &WriteCtx, name: &str) -> Result<(), ApiError> {
    if !resources::get(ctx.res).namespaced {
        return Ok(());
    }
    match w.store.get(&Key::new(NAMESPACES, "", &ctx.namespace)) {
        None => Err(ApiError::not_found(NAMESPACES, &ctx.namespace)),
        Some(ns) if ns.pointer("/metadata/deletionTimestamp").is_some() => {
            Err(ApiError::forbidden(
                ctx.res,
                name,
                &format!(
                    "unable to create new content in namespace {} because it is being terminated",
                    ctx.namespace
                ),
            ))
        }
        Some(_) => Ok(()),
    }
}

/// Drops what only the server writes from an object a client sent.
fn strip_server_fields(res: ResId, obj: &mut Value) {
    let meta = metadata_mut(obj);
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "managedFields",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        meta.remove(k);
    }
    if resources::get(res).status
        && let Some(o) = obj.as_object_mut()
    {
        o.remove("status");
    }
}

/// The object without `status`, as kept for validation.
fn without_status(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    v
}

/// Defaults, validates and stores a new object.
fn admit_new(
    w: &mut World,
    ctx: &WriteCtx,
    mut obj: Value,
    track: bool,
) -> Result<Value, ApiError> {
    let name = name_of(&obj).to_owned();
    admission::default(ctx.res, &mut obj);
    admission::prepare_create(ctx.res, &mut obj);
    admission::validate(ctx.res, None, &obj).map_err(|c| ApiError::invalid(ctx.res, &name, &c))?;
    if track {
        fields::track_update(
            None,
            &mut obj,
            &ctx.manager,
            &resources::get(ctx.res).api_version(),
            None,
        );
    }
    if ctx.dry_run {
        let meta = metadata_mut(&mut obj);
        meta.insert("uid".into(), json!(util::uuid()));
        meta.insert("creationTimestamp".into(), json!(util::now()));
        return Ok(obj);
    }
    Ok(w.store.create(ctx.res, obj))
}

/// Defaults, validates and stores a changed object; removes it when it was being deleted
/// and its last finalizer went.
fn admit_update(
    w: &mut World,
    ctx: &WriteCtx,
    old: &Value,
    mut new: Value,
    track: Option<Option<&str>>,
) -> Result<Value, ApiError> {
    let name = name_of(old).to_owned();
    {
        let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
        let meta = metadata_mut(&mut new);
        for k in [
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "namespace",
            "name",
        ] {
            match old_meta.get(k) {
                Some(v) => meta.insert(k.into(), v.clone()),
                None => meta.remove(k),
            };
        }
        if track.is_some() {
            match old_meta.get("managedFields") {
                Some(v) => meta.insert("managedFields".into(), v.clone()),
                None => meta.remove("managedFields"),
            };
        }
    }
    if resources::get(ctx.res).status
        && let Some(o) = new.as_object_mut()
    {
        match old.get("status") {
            Some(s) => o.insert("status".into(), s.clone()),
            None => o.remove("status"),
        };
    }
    admission::default(ctx.res, &mut new);
    admission::prepare_update(ctx.res, old, &mut new);
    admission::validate(ctx.res, Some(old), &new)
        .map_err(|c| ApiError::invalid(ctx.res, &name, &c))?;
    if let Some(subresource) = track {
        fields::track_update(
            Some(old),
            &mut new,
            &ctx.manager,
            &resources::get(ctx.res).api_version(),
            subresource,
        );
    }
    if ctx.dry_run {
        return Ok(new);
    }
    let stored = w.store.update(ctx.res, new);
    if finished_deleting(ctx.res, &stored) {
        w.store.remove(&Key::of(ctx.res, &stored));
    }
    Ok(stored)
}

/// Being deleted with no finalizer left (a pod also once its containers stopped).
pub(crate) fn finished_deleting(res: ResId, obj: &Value) -> bool {
    let deleting = obj.pointer("/metadata/deletionTimestamp").is_some();
    let finalizers = obj
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty());
    let stopped = match res {
        // Its containers have stopped, or it never ran (not bound to the node).
        PODS => {
            matches!(
                obj.pointer("/status/phase").and_then(Value::as_str),
                Some("Succeeded" | "Failed")
            ) || obj
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        }
        NAMESPACES => false,
        _ => true,
    };
    deleting && !finalizers && stopped
}

fn check_rv(res: ResId, name: &str, old: &Value, sent: Option<&str>) -> Result<(), ApiError> {
    match sent {
        Some(rv) if !rv.is_empty() && rv != store::rv_of(old).to_string() => {
            Err(ApiError::stale(res, name))
        }
        _ => Ok(()),
    }
}

fn sent_rv(obj: &Value) -> Option<String> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn create(w: &mut World, call: &Call<'_>) -> Result<Reply, ApiError> {
    let ctx = call.write_ctx();
    let mut obj = parse_body(call.body)?;
    w.received.push(Received {
        object: obj.clone(),
        result: None,
    });
    check_type(ctx.res, &obj, false)?;
    check_namespace_field(&ctx, &mut obj)?;
    if sent_rv(&obj).is_some_and(|rv| !rv.is_empty()) {
        return Err(ApiError::bad_request(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    let meta = metadata_mut(&mut obj);
    let name = match meta.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => n.to_owned(),
        _ => match meta.get("generateName").and_then(Value::as_str) {
            Some(prefix) if !prefix.is_empty() => {
                let n = format!("{prefix}{}", util::random_suffix(5));
                meta.insert("name".into(), json!(n));
                n
            }
            _ => {
                return Err(ApiError::invalid(
                    ctx.res,
                    "",
                    &[admission::Cause::required(
                        "metadata.name",
                        "name or generateName is required",
                    )],
                ));
            }
        },
    };
    check_namespace_open(w, &ctx, &name)?;
    if w.store
        .get(&Key::new(ctx.res, &ctx.namespace, &name))
        .is_some()
    {
        return Err(ApiError::already_exists(ctx.res, &name));
    }
    strip_server_fields(ctx.res, &mut obj);
    let stored = admit_new(w, &ctx, obj, true)?;
    Ok(Reply::Json(201, stored))
}

fn update(w: &mut World, call: &Call<'_>, name: &str) -> Result<Reply, ApiError> {
    let ctx = call.write_ctx();
    let mut obj = parse_body(call.body)?;
    w.received.push(Received {
        object: obj.clone(),
        result: None,
    });
    check_type(ctx.res, &obj, false)?;
    check_namespace_field(&ctx, &mut obj)?;
    check_name_field(&mut obj, name)?;
    let old = w
        .store
        .get(&Key::new(ctx.res, &ctx.namespace, name))
        .cloned()
        .ok_or_else(|| ApiError::not_found(ctx.res, name))?;
    check_rv(ctx.res, name, &old, sent_rv(&obj).as_deref())?;
    let stored = admit_update(w, &ctx, &old, obj, Some(None))?;
    Ok(Reply::Json(200, stored))
}

fn patch(w: &mut World, call: &Call<'_>, name: &str) -> Result<Reply, ApiError> {
    let ctx = call.write_ctx();
    let media = call.content_type.split(';').next().unwrap_or("").trim();
    match media {
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
            apply(w, call, &ctx, name)
        }
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            let patch = parse_body(call.body)?;
            let old = w
                .store
                .get(&Key::new(ctx.res, &ctx.namespace, name))
                .cloned()
                .ok_or_else(|| ApiError::not_found(ctx.res, name))?;
            check_rv(ctx.res, name, &old, sent_rv(&patch).as_deref())?;
            let mut new = old.clone();
            if media == "application/merge-patch+json" {
                fields::merge_patch(&mut new, &patch);
            } else {
                fields::merge(&mut new, &patch, &mut Vec::new(), true);
            }
            if name_of(&new) != name {
                return Err(ApiError::bad_request(
                    "metadata.name cannot be changed by a patch",
                ));
            }
            let stored = admit_update(w, &ctx, &old, new, Some(None))?;
            w.received.push(Received {
                object: without_status(&stored),
                result: None,
            });
            Ok(Reply::Json(200, stored))
        }
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

fn apply(w: &mut World, call: &Call<'_>, ctx: &WriteCtx, name: &str) -> Result<Reply, ApiError> {
    if call.query.get("fieldManager").is_none_or(str::is_empty) {
        return Err(ApiError {
            code: 422,
            reason: "Invalid",
            message: "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch".into(),
            details: Some(json!({"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [
                {"reason": "FieldValueRequired", "message": "Required value: is required for apply patch", "field": "fieldManager"}
            ]})),
        });
    }
    let body = parse_body(call.body).map_err(|_| {
        ApiError::bad_request(
            "this server reads apply configurations as JSON only (as kube-rs sends them)",
        )
    })?;
    check_type(ctx.res, &body, true)?;
    let mut config = body.clone();
    check_namespace_field(ctx, &mut config)?;
    check_name_field(&mut config, name)?;
    let precondition = sent_rv(&config);
    strip_server_fields(ctx.res, &mut config);
    fields::strip_nulls(&mut config);
    let force = call.query.flag("force");
    let api_version = resources::get(ctx.res).api_version();
    let key = Key::new(ctx.res, &ctx.namespace, name);
    match w.store.get(&key).cloned() {
        None => {
            check_namespace_open(w, ctx, name)?;
            if precondition.is_some_and(|rv| !rv.is_empty()) {
                return Err(ApiError::not_found(ctx.res, name));
            }
            let obj = fields::apply(None, &config, &ctx.manager, &api_version, force)
                .map_err(|c| ApiError::apply_conflicts(ctx.res, name, &c))?;
            w.received.push(Received {
                object: body,
                result: Some(obj.clone()),
            });
            let stored = admit_new(w, ctx, obj, false)?;
            Ok(Reply::Json(201, stored))
        }
        Some(old) => {
            check_rv(ctx.res, name, &old, precondition.as_deref())?;
            let merged = fields::apply(Some(&old), &config, &ctx.manager, &api_version, force)
                .map_err(|c| ApiError::apply_conflicts(ctx.res, name, &c))?;
            w.received.push(Received {
                object: body,
                result: Some(without_status(&merged)),
            });
            let stored = admit_update(w, ctx, &old, merged, None)?;
            Ok(Reply::Json(200, stored))
        }
    }
}

/// `autoscaling/v1` Scale of a Deployment.
fn scale_of(d: &Value) -> Value {
    let selector = d
        .pointer("/spec/selector")
        .map(LabelSelector::from_object)
        .unwrap_or_default();
    let meta = d.get("metadata").cloned().unwrap_or_else(|| json!({}));
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "creationTimestamp": meta.get("creationTimestamp"),
        },
        "spec": {"replicas": d.pointer("/spec/replicas").cloned().unwrap_or(json!(1))},
        "status": {
            "replicas": d.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
            "selector": selector.to_query(),
        },
    })
}

fn scale(w: &mut World, call: &Call<'_>, name: &str) -> Result<Reply, ApiError> {
    if call.res != DEPLOYMENTS {
        return Err(ApiError::method_not_allowed());
    }
    let ctx = call.write_ctx();
    let old = w
        .store
        .get(&Key::new(ctx.res, &ctx.namespace, name))
        .cloned()
        .ok_or_else(|| ApiError::not_found(ctx.res, name))?;
    let body = parse_body(call.body)?;
    // A Scale's resource version is its Deployment's: a precondition for any write.
    check_rv(ctx.res, name, &old, sent_rv(&body).as_deref())?;
    let mut scale = scale_of(&old);
    let media = call.content_type.split(';').next().unwrap_or("").trim();
    match (call.method, media) {
        ("PUT", _) => scale = body,
        (_, "application/merge-patch+json" | "application/strategic-merge-patch+json") => {
            fields::merge_patch(&mut scale, &body);
        }
        (_, "application/apply-patch+yaml") => {
            if let Some(r) = body.pointer("/spec/replicas") {
                scale["spec"]["replicas"] = r.clone();
            }
        }
        (_, other) => return Err(ApiError::unsupported_media_type(other)),
    }
    // The Scale as written: the body of a replace, what a patch made of the current one.
    w.received.push(Received {
        object: scale.clone(),
        result: None,
    });
    let replicas = scale
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .ok_or_else(|| {
            ApiError::invalid(
                ctx.res,
                name,
                &[admission::Cause::required("spec.replicas", "")],
            )
        })?;
    let mut new = old.clone();
    new["spec"]["replicas"] = json!(replicas);
    let stored = admit_update(w, &ctx, &old, new, Some(Some("scale")))?;
    Ok(Reply::Json(200, scale_of(&stored)))
}

/// How deletion reaches an object's dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// What a deletion did.
#[derive(Debug)]
pub(crate) enum Deletion {
    /// The object is gone (its last state).
    Gone(Value),
    /// The object is being deleted (finalizers, a pod's grace period, a namespace's content).
    Pending(Value),
}

/// Deletes an object as the real server does: at once, or by marking it with
/// `deletionTimestamp` when something must happen first.
pub(crate) fn delete_object(
    w: &mut World,
    key: &Key,
    policy: Propagation,
    grace: Option<i64>,
) -> Option<Deletion> {
    let obj = w.store.get(key)?.clone();
    let uid = uid_of(&obj).to_owned();
    let dependents = w.store.dependents(&uid);
    if policy == Propagation::Orphan {
        for (res, mut dep) in dependents.clone() {
            if let Some(refs) = metadata_mut(&mut dep)
                .get_mut("ownerReferences")
                .and_then(Value::as_array_mut)
            {
                refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(&uid));
            }
            w.store.update(res, dep);
        }
    }
    let mut new = obj.clone();
    let already = obj.pointer("/metadata/deletionTimestamp").is_some();
    let now = util::now();
    let meta = metadata_mut(&mut new);
    let mut finalizers: Vec<Value> = meta
        .get("finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if policy == Propagation::Foreground
        && !dependents.is_empty()
        && !finalizers.contains(&json!("foregroundDeletion"))
    {
        finalizers.push(json!("foregroundDeletion"));
        meta.insert("finalizers".into(), Value::Array(finalizers.clone()));
    }
    if key.res == PODS {
        let scheduled = obj
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let grace = grace
            .or_else(|| {
                obj.pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(30)
            .max(0);
        if (!scheduled || grace == 0) && finalizers.is_empty() {
            return w.store.remove(key).map(Deletion::Gone);
        }
        let current = obj
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64);
        if !already || current.is_some_and(|c| grace < c) {
            let when = std::time::SystemTime::now()
                + std::time::Duration::from_secs(u64::try_from(grace).unwrap_or(0));
            meta.insert("deletionTimestamp".into(), json!(util::rfc3339(when)));
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
        }
        return Some(Deletion::Pending(w.store.update(key.res, new)));
    }
    if key.res == NAMESPACES {
        if !already {
            meta.insert("deletionTimestamp".into(), json!(now));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            new["status"]["phase"] = json!("Terminating");
        }
        return Some(Deletion::Pending(w.store.update(key.res, new)));
    }
    if finalizers.is_empty() {
        return w.store.remove(key).map(Deletion::Gone);
    }
    if !already {
        meta.insert("deletionTimestamp".into(), json!(now));
        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
    }
    Some(Deletion::Pending(w.store.update(key.res, new)))
}

/// DeleteOptions from the body (kube-rs sends them there) and the query.
fn delete_options(call: &Call<'_>) -> Result<(Propagation, Option<i64>, Value), ApiError> {
    let body: Value = if call.body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(call.body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let policy = call
        .query
        .get("propagationPolicy")
        .map(str::to_owned)
        .or_else(|| {
            body.get("propagationPolicy")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
    let orphan = body.get("orphanDependents").and_then(Value::as_bool);
    let policy = match (policy.as_deref(), orphan) {
        (Some("Foreground"), _) => Propagation::Foreground,
        (Some("Orphan"), _) | (None, Some(true)) => Propagation::Orphan,
        (Some("Background") | None, _) => Propagation::Background,
        (Some(other), _) => {
            return Err(ApiError::bad_request(format!(
                "propagationPolicy: Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
            )));
        }
    };
    let grace = call
        .query
        .get("gracePeriodSeconds")
        .and_then(|g| g.parse().ok())
        .or_else(|| body.get("gracePeriodSeconds").and_then(Value::as_i64));
    let preconditions = body
        .get("preconditions")
        .cloned()
        .unwrap_or_else(|| json!({}));
    Ok((policy, grace, preconditions))
}

fn delete(w: &mut World, call: &Call<'_>, name: &str) -> Result<Reply, ApiError> {
    let (policy, grace, preconditions) = delete_options(call)?;
    let key = Key::new(call.res, call.ns(), name);
    let obj = w
        .store
        .get(&key)
        .cloned()
        .ok_or_else(|| ApiError::not_found(call.res, name))?;
    if let Some(uid) = preconditions.get("uid").and_then(Value::as_str)
        && uid != uid_of(&obj)
    {
        return Err(ApiError::conflict(
            call.res,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                uid_of(&obj)
            ),
        ));
    }
    if let Some(rv) = preconditions.get("resourceVersion").and_then(Value::as_str)
        && rv != store::rv_of(&obj).to_string()
    {
        return Err(ApiError::conflict(
            call.res,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                store::rv_of(&obj)
            ),
        ));
    }
    if call.query.get("dryRun") == Some("All") {
        return Ok(Reply::Json(200, obj));
    }
    match delete_object(w, &key, policy, grace) {
        Some(Deletion::Pending(o)) => Ok(Reply::Json(200, o)),
        Some(Deletion::Gone(o)) => Ok(Reply::Json(200, deleted_reply(call.res, &o))),
        None => Err(ApiError::not_found(call.res, name)),
    }
}

/// What the real server answers for an object deleted at once: the object for pods,
/// services and namespaces, a success Status otherwise.
fn deleted_reply(res: ResId, obj: &Value) -> Value {
    if matches!(res, PODS | NAMESPACES | resources::SERVICES) {
        return obj.clone();
    }
    let r = resources::get(res);
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name_of(obj), "group": r.group, "kind": r.plural, "uid": uid_of(obj)},
    })
}

fn delete_collection(w: &mut World, call: &Call<'_>) -> Result<Reply, ApiError> {
    let (policy, grace, _) = delete_options(call)?;
    let (labels, fields) = selectors(call)?;
    let r = resources::get(call.res);
    let chosen: Vec<Value> = w
        .store
        .list(call.res, call.namespace)
        .filter(|o| labels.matches(o) && fields.matches(o))
        .cloned()
        .collect();
    let mut items = Vec::new();
    for obj in chosen {
        if call.query.get("dryRun") == Some("All") {
            items.push(as_item(&obj));
            continue;
        }
        match delete_object(w, &Key::of(call.res, &obj), policy, grace) {
            Some(Deletion::Pending(o) | Deletion::Gone(o)) => items.push(as_item(&o)),
            None => {}
        }
    }
    Ok(Reply::Json(
        200,
        json!({
            "kind": format!("{}List", r.kind),
            "apiVersion": r.api_version(),
            "metadata": {"resourceVersion": w.store.rv().to_string()},
            "items": items,
        }),
    ))
}
