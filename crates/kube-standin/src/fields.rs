//! Field ownership (`metadata.managedFields`), server-side apply, and the merge patches.
//!
//! A field is named as `fieldsV1` names it: a path of `f:<field>` segments, `k:<json>` for an
//! item of a list keyed by merge key (`k:{"name":"app"}`), and `.` for that item (or map)
//! itself. A manager's set holds leaf paths (scalars, atomic lists, empty objects) and the
//! `.` of every keyed item it wrote. Which lists are keyed, and by what, follows the
//! Kubernetes OpenAPI's `x-kubernetes-list-map-keys` for the fields a driver writes; every
//! other list is atomic.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::util;

/// A field's path, as its `fieldsV1` keys.
pub(crate) type Path = Vec<String>;
pub(crate) type FieldSet = BTreeSet<Path>;

/// The merge keys of the list at `path`, or None for an atomic list.
fn list_keys(path: &[String]) -> Option<&'static [&'static str]> {
    let last = path.last()?.as_str();
    let prev = path.len().checked_sub(2).map(|i| path[i].as_str());
    Some(match last {
        "f:containers"
        | "f:initContainers"
        | "f:ephemeralContainers"
        | "f:env"
        | "f:volumes"
        | "f:imagePullSecrets"
        | "f:resourceClaims" => &["name"],
        "f:volumeMounts" => &["mountPath"],
        "f:volumeDevices" => &["devicePath"],
        "f:ownerReferences" => &["uid"],
        "f:conditions" => &["type"],
        "f:hostAliases" => &["ip"],
        "f:topologySpreadConstraints" => &["topologyKey", "whenUnsatisfiable"],
        // A container's ports; a Service's `spec.ports`. An EndpointSlice's are atomic.
        "f:ports" if prev.is_some_and(|p| p.starts_with("k:")) => &["containerPort", "protocol"],
        "f:ports" if path.len() == 2 && prev == Some("f:spec") => &["port", "protocol"],
        _ => return None,
    })
}

/// The `k:` segment of a keyed list's item, or None when the item lacks a key.
/// A missing `protocol` is TCP, its default.
fn item_key(item: &Value, keys: &[&str]) -> Option<String> {
    let mut map = Map::new();
    for k in keys {
        let v = match item.get(*k) {
            Some(v) => v.clone(),
            None if *k == "protocol" => json!("TCP"),
            None => return None,
        };
        map.insert((*k).to_owned(), v);
    }
    Some(format!("k:{}", Value::Object(map)))
}

fn key_matches(item: &Value, key: &Map<String, Value>) -> bool {
    key.iter().all(|(k, v)| match item.get(k) {
        Some(actual) => actual == v,
        None => k == "protocol" && v == "TCP",
    })
}

/// The fields `obj` sets, as paths. `apiVersion`, `kind`, `status` and the metadata the
/// server writes are no one's.
pub(crate) fn field_set(obj: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    let Some(o) = obj.as_object() else {
        return out;
    };
    for (k, v) in o {
        match k.as_str() {
            "apiVersion" | "kind" | "status" => {}
            "metadata" => {
                for (mk, mv) in v.as_object().into_iter().flatten() {
                    if matches!(
                        mk.as_str(),
                        "labels" | "annotations" | "ownerReferences" | "finalizers"
                    ) {
                        walk(
                            &mut vec!["f:metadata".into(), format!("f:{mk}")],
                            mv,
                            &mut out,
                        );
                    }
                }
            }
            _ => walk(&mut vec![format!("f:{k}")], v, &mut out),
        }
    }
    out
}

fn walk(path: &mut Path, v: &Value, out: &mut FieldSet) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, c) in m {
                path.push(format!("f:{k}"));
                walk(path, c, out);
                path.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => match list_keys(path) {
            Some(keys) => {
                for item in items {
                    let (Some(key), Some(fields)) = (item_key(item, keys), item.as_object()) else {
                        continue;
                    };
                    path.push(key);
                    path.push(".".into());
                    out.insert(path.clone());
                    path.pop();
                    for (k, c) in fields {
                        path.push(format!("f:{k}"));
                        walk(path, c, out);
                        path.pop();
                    }
                    path.pop();
                }
            }
            None => {
                out.insert(path.clone());
            }
        },
        _ => {
            out.insert(path.clone());
        }
    }
}

fn parse_key(seg: &str) -> Option<Map<String, Value>> {
    let json = seg.strip_prefix("k:")?;
    serde_json::from_str::<Value>(json)
        .ok()?
        .as_object()
        .cloned()
}

/// The value at `path` in `obj` (for a `.` segment: the item or map itself).
pub(crate) fn get<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in path {
        if seg == "." {
            continue;
        } else if let Some(f) = seg.strip_prefix("f:") {
            cur = cur.get(f)?;
        } else if seg.starts_with("k:") {
            let key = parse_key(seg)?;
            cur = cur.as_array()?.iter().find(|i| key_matches(i, &key))?;
        } else if let Some(v) = seg.strip_prefix("v:") {
            let v: Value = serde_json::from_str(v).ok()?;
            cur = cur.as_array()?.iter().find(|i| **i == v)?;
        } else {
            return None;
        }
    }
    Some(cur)
}

fn get_mut<'a>(obj: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let mut cur = obj;
    for seg in path {
        if seg == "." {
            continue;
        } else if let Some(f) = seg.strip_prefix("f:") {
            cur = cur.get_mut(f)?;
        } else if seg.starts_with("k:") {
            let key = parse_key(seg)?;
            cur = cur
                .as_array_mut()?
                .iter_mut()
                .find(|i| key_matches(i, &key))?;
        } else {
            return None;
        }
    }
    Some(cur)
}

/// Removes the field (or keyed item) at `path` from `obj`.
fn remove(obj: &mut Value, path: &[String]) {
    let path = match path.split_last() {
        Some((last, rest)) if last == "." => rest,
        _ => path,
    };
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let Some(container) = get_mut(obj, parent) else {
        return;
    };
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(m) = container.as_object_mut() {
            m.remove(f);
        }
    } else if let (Some(key), Some(items)) = (parse_key(last), container.as_array_mut()) {
        items.retain(|i| !key_matches(i, &key));
    }
}

/// `fieldsV1` to a set of paths.
pub(crate) fn decode(tree: &Value) -> FieldSet {
    fn go(tree: &Value, prefix: &mut Path, out: &mut FieldSet) {
        let Some(m) = tree.as_object() else {
            return;
        };
        if m.is_empty() {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
            return;
        }
        for (k, v) in m {
            prefix.push(k.clone());
            go(v, prefix, out);
            prefix.pop();
        }
    }
    let mut out = FieldSet::new();
    go(tree, &mut Vec::new(), &mut out);
    out
}

/// A set of paths to `fieldsV1`.
pub(crate) fn encode(set: &FieldSet) -> Value {
    let mut root = json!({});
    for path in set {
        let mut cur = &mut root;
        for seg in path {
            cur = util::object_mut(cur)
                .entry(seg.clone())
                .or_insert_with(|| json!({}));
        }
    }
    root
}

/// A path as the conflict message prints it: `.spec.containers[name="app"].image`.
pub(crate) fn display(path: &[String]) -> String {
    let mut out = String::new();
    for seg in path {
        if let Some(f) = seg.strip_prefix("f:") {
            out.push('.');
            out.push_str(f);
        } else if let Some(key) = parse_key(seg) {
            let parts: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = seg.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        }
    }
    out
}

/// One entry of `metadata.managedFields`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub(crate) manager: String,
    /// "Apply" or "Update".
    pub(crate) operation: String,
    pub(crate) api_version: String,
    pub(crate) time: String,
    pub(crate) subresource: Option<String>,
    pub(crate) fields: FieldSet,
}

impl Entry {
    /// How a conflict names it (apiserver's `printManager`): `"mgr"` for an applier,
    /// `"mgr" using apps/v1` for an updater, `"mgr" with subresource "scale" using apps/v1`.
    fn who(&self) -> String {
        let mut who = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            who.push_str(&format!(" with subresource {sub:?}"));
        }
        if self.operation != "Apply" {
            who.push_str(&format!(" using {}", self.api_version));
        }
        who
    }

    fn is(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }
}

pub(crate) fn entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).map(str::to_owned);
            Some(Entry {
                manager: s("manager")?,
                operation: s("operation").unwrap_or_else(|| "Update".into()),
                api_version: s("apiVersion").unwrap_or_default(),
                time: s("time").unwrap_or_default(),
                subresource: s("subresource"),
                fields: e.get("fieldsV1").map(decode).unwrap_or_default(),
            })
        })
        .collect()
}

fn set_entries(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": encode(&e.fields),
            });
            if let Some(sub) = &e.subresource {
                v["subresource"] = json!(sub);
            }
            v
        })
        .collect();
    let meta = crate::store::metadata_mut(obj);
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// Drops from every entry the fields `obj` no longer has.
fn prune_entries(entries: &mut [Entry], obj: &Value) {
    for e in entries.iter_mut() {
        e.fields.retain(|p| get(obj, p).is_some());
    }
}

/// Records an update (create, replace, patch) by `manager`: the fields it changed become
/// its own (operation Update) and no one else's.
pub(crate) fn track_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    subresource: Option<&str>,
) {
    let mut list = old.map(entries).unwrap_or_default();
    let before = old.map(field_set).unwrap_or_default();
    let changed: FieldSet = field_set(new)
        .into_iter()
        .filter(|p| !before.contains(p) || old.and_then(|o| get(o, p)) != get(new, p))
        .collect();
    prune_entries(&mut list, new);
    if !changed.is_empty() {
        for e in list.iter_mut() {
            if !e.is(manager, "Update", subresource) {
                e.fields.retain(|p| !changed.contains(p));
            }
        }
        let time = util::now();
        match list
            .iter_mut()
            .find(|e| e.is(manager, "Update", subresource))
        {
            Some(e) => {
                e.fields.extend(changed);
                e.time = time;
                e.api_version = api_version.to_owned();
            }
            None => list.push(Entry {
                manager: manager.to_owned(),
                operation: "Update".into(),
                api_version: api_version.to_owned(),
                time,
                subresource: subresource.map(str::to_owned),
                fields: changed,
            }),
        }
    }
    set_entries(new, &list);
}

/// A field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Conflict {
    /// `"mgr"` or `"mgr" using apps/v1`.
    pub(crate) manager: String,
    /// `.spec.replicas`.
    pub(crate) field: String,
}

/// Server-side apply of `config` by `manager` onto `live` (None: a new object). Returns the
/// merged object with its managed fields, or the conflicts when `force` is false.
pub(crate) fn apply(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    api_version: &str,
    force: bool,
) -> Result<Value, Vec<Conflict>> {
    let mut list = live.map(entries).unwrap_or_default();
    let applied = field_set(config);
    let empty = json!({});
    let base = live.unwrap_or(&empty);

    let mut conflicts = Vec::new();
    for e in list.iter_mut() {
        if e.is(manager, "Apply", None) {
            continue;
        }
        let clashing: Vec<Path> = e
            .fields
            .intersection(&applied)
            .filter(|p| p.last().is_none_or(|s| s != "."))
            .filter(|p| get(base, p) != get(config, p))
            .cloned()
            .collect();
        for p in clashing {
            conflicts.push(Conflict {
                manager: e.who(),
                field: display(&p),
            });
            if force {
                e.fields.remove(&p);
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }

    let mut result = base.clone();
    merge(&mut result, config, &mut Vec::new(), false);

    let previous = list
        .iter()
        .find(|e| e.is(manager, "Apply", None))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let others: Vec<&Entry> = list
        .iter()
        .filter(|e| !e.is(manager, "Apply", None))
        .collect();
    let owned_elsewhere = |p: &Path| {
        let target: &[String] = match p.split_last() {
            Some((last, rest)) if last == "." => rest,
            _ => p,
        };
        others
            .iter()
            .any(|e| e.fields.iter().any(|q| q.starts_with(target)))
    };
    // Whole items first (the "." paths), then fields; an item's key fields stay with it.
    let mut dropped: Vec<&Path> = previous.difference(&applied).collect();
    dropped.sort_by_key(|p| (p.last().is_none_or(|s| s != "."), p.len()));
    for p in dropped {
        if is_key_field(p) {
            continue;
        }
        if !owned_elsewhere(p) {
            remove(&mut result, p);
            prune_empty_parents(&mut result, p, &|q| owned_elsewhere(&q.to_vec()));
        }
    }

    let time = util::now();
    match list.iter_mut().find(|e| e.is(manager, "Apply", None)) {
        Some(e) => {
            if e.fields != applied {
                e.time = time;
            }
            e.fields = applied;
            e.api_version = api_version.to_owned();
        }
        None => list.push(Entry {
            manager: manager.to_owned(),
            operation: "Apply".into(),
            api_version: api_version.to_owned(),
            time,
            subresource: None,
            fields: applied,
        }),
    }
    prune_entries(&mut list, &result);
    set_entries(&mut result, &list);
    Ok(result)
}

/// Whether `path` is one of its keyed item's key fields (`name` in `k:{"name":"x"}`).
fn is_key_field(path: &[String]) -> bool {
    let [.., item, field] = path else {
        return false;
    };
    match (parse_key(item), field.strip_prefix("f:")) {
        (Some(key), Some(f)) => key.contains_key(f),
        _ => false,
    }
}

/// After removing `path`, removes the maps above it that are now empty and no one owns.
fn prune_empty_parents(obj: &mut Value, path: &[String], owned: &dyn Fn(&[String]) -> bool) {
    let path = match path.split_last() {
        Some((last, rest)) if last == "." => rest,
        _ => path,
    };
    for end in (2..path.len()).rev() {
        let parent = &path[..end];
        if !parent.last().is_some_and(|s| s.starts_with("f:")) {
            return;
        }
        let empty = match get(obj, parent) {
            Some(Value::Object(m)) => m.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            _ => false,
        };
        if !empty || owned(parent) {
            return;
        }
        remove(obj, parent);
    }
}

/// Merges `patch` into `target`: objects field by field, keyed lists item by item, anything
/// else replaced. With `nulls` (a merge patch), a null removes the field; with `$patch:
/// delete` in a keyed item (strategic merge), the item is removed.
pub(crate) fn merge(target: &mut Value, patch: &Value, path: &mut Path, nulls: bool) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if k.starts_with('$') {
                    continue;
                }
                if v.is_null() && nulls {
                    t.remove(k);
                    continue;
                }
                path.push(format!("f:{k}"));
                match t.get_mut(k) {
                    Some(tv) => merge(tv, v, path, nulls),
                    None => {
                        let mut fresh = match v {
                            Value::Object(_) => json!({}),
                            Value::Array(_) => json!([]),
                            _ => Value::Null,
                        };
                        merge(&mut fresh, v, path, nulls);
                        t.insert(k.clone(), fresh);
                    }
                }
                path.pop();
            }
        }
        (Value::Array(t), Value::Array(p)) if list_keys(path).is_some() => {
            let keys = list_keys(path).unwrap_or(&[]);
            let mut out = Vec::new();
            let mut seen = Vec::new();
            for item in p {
                let Some(key) = item_key(item, keys) else {
                    out.push(item.clone());
                    continue;
                };
                seen.push(key.clone());
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                if delete {
                    continue;
                }
                let parsed = parse_key(&key).unwrap_or_default();
                let mut merged = t
                    .iter()
                    .find(|i| key_matches(i, &parsed))
                    .cloned()
                    .unwrap_or_else(|| json!({}));
                path.push(key);
                merge(&mut merged, item, path, nulls);
                path.pop();
                out.push(merged);
            }
            for item in t.iter() {
                let kept = item_key(item, keys).is_none_or(|k| !seen.contains(&k));
                if kept {
                    out.push(item.clone());
                }
            }
            *t = out;
        }
        (t, p) => {
            let mut p = p.clone();
            if nulls {
                strip_nulls(&mut p);
            }
            *t = p;
        }
    }
}

/// Removes null fields (and `$` directives) from objects, recursively.
pub(crate) fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, v| !v.is_null() && !k.starts_with('$'));
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// RFC 7386 JSON merge patch.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => {
            let mut p = p.clone();
            strip_nulls(&mut p);
            *t = p;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"app": "d"}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "d"}},
                "template": {
                    "metadata": {"labels": {"app": "d"}},
                    "spec": {"containers": [{"name": "app", "image": image, "ports": [{"containerPort": 8080}]}]}
                }
            }
        })
    }

    #[test]
    fn field_sets_use_merge_keys() {
        let set = field_set(&deployment(1, "a"));
        let paths: Vec<String> = set.iter().map(|p| display(p)).collect();
        assert!(paths.contains(&".spec.replicas".to_owned()));
        assert!(paths.contains(&".spec.template.spec.containers[name=\"app\"].image".to_owned()));
        assert!(paths.contains(
            &".spec.template.spec.containers[name=\"app\"].ports[containerPort=8080,protocol=\"TCP\"].containerPort"
                .to_owned()
        ));
        let tree = encode(&set);
        assert_eq!(decode(&tree), set);
        assert!(
            tree["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"]["."]
                .is_object()
        );
    }

    #[test]
    fn apply_conflicts_force_and_removal() {
        let first = apply(None, &deployment(2, "a"), "one", "apps/v1", false).unwrap();
        assert_eq!(entries(&first).len(), 1);
        // Same values: shared, no conflict.
        let shared = apply(Some(&first), &deployment(2, "a"), "two", "apps/v1", false).unwrap();
        assert_eq!(entries(&shared).len(), 2);
        // A different value of a field another owns.
        let err = apply(Some(&shared), &deployment(3, "a"), "two", "apps/v1", false).unwrap_err();
        assert_eq!(
            err,
            vec![Conflict {
                manager: "\"one\"".into(),
                field: ".spec.replicas".into()
            }]
        );
        let forced = apply(Some(&shared), &deployment(3, "a"), "two", "apps/v1", true).unwrap();
        assert_eq!(forced["spec"]["replicas"], 3);
        let one = entries(&forced)
            .into_iter()
            .find(|e| e.manager == "one")
            .unwrap();
        assert!(
            !one.fields
                .contains(&vec!["f:spec".to_owned(), "f:replicas".to_owned()])
        );
        // A field left out by its only owner goes; one still owned by another stays.
        let mut less = deployment(3, "a");
        less["metadata"]["labels"] = json!({});
        less["spec"].as_object_mut().unwrap().remove("replicas");
        let after = apply(Some(&forced), &less, "two", "apps/v1", false).unwrap();
        assert!(after["spec"].get("replicas").is_none(), "{after:#}");
        assert_eq!(
            after["metadata"]["labels"]["app"], "d",
            "still owned by one"
        );
    }

    #[test]
    fn keyed_items_removed_when_left_out() {
        let mut two = deployment(1, "a");
        two["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "side", "image": "s"}));
        let first = apply(None, &two, "m", "apps/v1", false).unwrap();
        let after = apply(Some(&first), &deployment(1, "b"), "m", "apps/v1", false).unwrap();
        let containers = after["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        assert_eq!(containers.len(), 1);
        assert_eq!(containers[0]["image"], "b");
    }

    #[test]
    fn updates_take_ownership() {
        let first = apply(None, &deployment(2, "a"), "applier", "apps/v1", false).unwrap();
        let mut updated = first.clone();
        updated["spec"]["replicas"] = json!(5);
        track_update(Some(&first), &mut updated, "scaler", "apps/v1", None);
        let err = apply(
            Some(&updated),
            &deployment(2, "a"),
            "applier",
            "apps/v1",
            false,
        )
        .unwrap_err();
        assert_eq!(err[0].manager, "\"scaler\" using apps/v1");
    }

    #[test]
    fn patches() {
        let mut t = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        merge_patch(&mut t, &json!({"a": {"b": null, "d": 3}, "l": [3]}));
        assert_eq!(t, json!({"a": {"c": 2, "d": 3}, "l": [3]}));
        let mut d = deployment(1, "a");
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "s"}]}}}});
        merge(&mut d, &patch, &mut Vec::new(), true);
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }
}
