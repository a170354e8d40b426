//! The objects, their resource versions and the history watches replay.
//!
//! One global counter, as etcd's revision: every write takes the next value, written into
//! the object's `metadata.resourceVersion` as a decimal string. A write that changes nothing
//! takes none (as the real server skips a no-op update). Every write is kept in the history
//! (for watches already open), and a new watch from any resource version after the
//! compaction point ([`Store::compact`]) replays what happened since.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use crate::resources::{self, ResId};
use crate::util;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    pub(crate) res: ResId,
    /// "" for cluster-scoped resources.
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl Key {
    pub(crate) fn new(res: ResId, namespace: &str, name: &str) -> Self {
        Self {
            res,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// The key of a stored object of `res`.
    pub(crate) fn of(res: ResId, obj: &Value) -> Self {
        Self::new(res, namespace_of(obj), name_of(obj))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One write, as a watch sees it.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub(crate) rv: u64,
    pub(crate) res: ResId,
    pub(crate) kind: EventType,
    /// The object before (for a watch with a selector: a modified object that stops matching
    /// is DELETED to it, one that starts matching ADDED).
    pub(crate) old: Option<Value>,
    /// The object after (for a deletion: the last state, with the deletion's version).
    pub(crate) new: Value,
}

#[derive(Debug, Default)]
pub(crate) struct Store {
    rv: u64,
    /// Resource versions below this are forgotten: a watch from one gets 410 Expired.
    compacted: u64,
    objects: BTreeMap<Key, Value>,
    history: Vec<Change>,
    /// The version each live object was created at, by uid: "newer" when creation time
    /// stamps (seconds) are equal.
    created: HashMap<String, u64>,
}

pub(crate) fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub(crate) fn namespace_of(obj: &Value) -> &str {
    obj.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub(crate) fn uid_of(obj: &Value) -> &str {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub(crate) fn rv_of(obj: &Value) -> u64 {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// `obj.metadata`, made an object when missing.
pub(crate) fn metadata_mut(obj: &mut Value) -> &mut serde_json::Map<String, Value> {
    let o = util::object_mut(obj);
    util::object_mut(o.entry("metadata").or_insert_with(|| json!({})))
}

/// Whether this resource's objects carry `metadata.generation` (those with a spec).
fn has_generation(obj: &Value) -> bool {
    obj.get("spec").is_some()
}

impl Store {
    pub(crate) fn new() -> Self {
        Self {
            rv: 1,
            ..Self::default()
        }
    }

    /// The current (latest) resource version.
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    pub(crate) fn compacted(&self) -> u64 {
        self.compacted
    }

    pub(crate) fn get(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key)
    }

    /// The objects of `res`, in `namespace` when given, in key order (namespace, then name).
    pub(crate) fn list<'a>(
        &'a self,
        res: ResId,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        let start = Key::new(res, namespace.unwrap_or(""), "");
        self.objects
            .range(start..)
            .take_while(move |(k, _)| k.res == res && namespace.is_none_or(|ns| k.namespace == ns))
            .map(|(_, v)| v)
    }

    /// Every object whose `metadata.ownerReferences` names `uid`.
    pub(crate) fn dependents(&self, uid: &str) -> Vec<(ResId, Value)> {
        self.objects
            .iter()
            .filter(|(_, v)| owner_uids(v).any(|u| u == uid))
            .map(|(k, v)| (k.res, v.clone()))
            .collect()
    }

    pub(crate) fn all(&self) -> impl Iterator<Item = (&Key, &Value)> {
        self.objects.iter()
    }

    pub(crate) fn created_seq(&self, uid: &str) -> u64 {
        self.created.get(uid).copied().unwrap_or(0)
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// Stores a new object: uid (unless given), creation time stamp, generation 1, the next
    /// resource version. The caller has checked that the key is free.
    pub(crate) fn create(&mut self, res: ResId, mut obj: Value) -> Value {
        let rv = self.next_rv();
        let with_generation = has_generation(&obj);
        let api_version = resources::get(res).api_version();
        let kind = resources::get(res).kind;
        if let Some(o) = obj.as_object_mut() {
            o.insert("apiVersion".into(), json!(api_version));
            o.insert("kind".into(), json!(kind));
        }
        let meta = metadata_mut(&mut obj);
        if meta
            .get("uid")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            meta.insert("uid".into(), json!(util::uuid()));
        }
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
        if with_generation {
            meta.insert("generation".into(), json!(1));
        }
        meta.insert("creationTimestamp".into(), json!(util::now()));
        self.created.insert(uid_of(&obj).to_owned(), rv);
        self.objects.insert(Key::of(res, &obj), obj.clone());
        self.history.push(Change {
            rv,
            res,
            kind: EventType::Added,
            old: None,
            new: obj.clone(),
        });
        obj
    }

    /// Replaces a stored object with `obj` (same key). A change of `spec` bumps
    /// `metadata.generation`. When nothing changed, nothing is written and the stored
    /// object is returned as it was.
    pub(crate) fn update(&mut self, res: ResId, mut obj: Value) -> Value {
        let key = Key::of(res, &obj);
        let Some(old) = self.objects.get(&key).cloned() else {
            return self.create(res, obj);
        };
        // Carry what only the store writes.
        let keep = ["uid", "creationTimestamp", "generation"];
        let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
        {
            let meta = metadata_mut(&mut obj);
            for k in keep {
                match old_meta.get(k) {
                    Some(v) => meta.insert(k.into(), v.clone()),
                    None => meta.remove(k),
                };
            }
            meta.insert(
                "resourceVersion".into(),
                old_meta
                    .get("resourceVersion")
                    .cloned()
                    .unwrap_or(json!("")),
            );
        }
        if let Some(o) = obj.as_object_mut() {
            o.insert(
                "apiVersion".into(),
                json!(resources::get(res).api_version()),
            );
            o.insert("kind".into(), json!(resources::get(res).kind));
        }
        if obj == old {
            return old;
        }
        if has_generation(&obj) && obj.get("spec") != old.get("spec") {
            let generation = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            metadata_mut(&mut obj).insert("generation".into(), json!(generation + 1));
        }
        let rv = self.next_rv();
        metadata_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        self.objects.insert(key, obj.clone());
        self.history.push(Change {
            rv,
            res,
            kind: EventType::Modified,
            old: Some(old),
            new: obj.clone(),
        });
        obj
    }

    /// Removes an object for good (a DELETED event with the next resource version).
    pub(crate) fn remove(&mut self, key: &Key) -> Option<Value> {
        let mut obj = self.objects.remove(key)?;
        let rv = self.next_rv();
        metadata_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        self.created.remove(uid_of(&obj));
        self.history.push(Change {
            rv,
            res: key.res,
            kind: EventType::Deleted,
            old: None,
            new: obj.clone(),
        });
        Some(obj)
    }

    /// Whether a watch from `rv` is too old to be served (410 Expired).
    pub(crate) fn expired(&self, rv: u64) -> bool {
        rv < self.compacted
    }

    /// The changes after `rv`, oldest first. Open watches read on through a compaction (as
    /// a real server's watch cache feeds them), so the history itself is kept.
    pub(crate) fn changes_after(&self, rv: u64) -> &[Change] {
        let start = self.history.partition_point(|c| c.rv <= rv);
        &self.history[start..]
    }

    /// Forgets the history as far as new watches go: every resource version handed out so
    /// far is now too old to watch from. Takes one version itself (as the real server's
    /// versions move on with writes elsewhere), so the next list returns a version that can
    /// be watched from.
    pub(crate) fn compact(&mut self) {
        self.compacted = self.next_rv();
    }
}

/// The uids in `metadata.ownerReferences`.
pub(crate) fn owner_uids(obj: &Value) -> impl Iterator<Item = &str> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid").and_then(Value::as_str))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::resources::{CONFIGMAPS, PODS};

    #[test]
    fn versions_and_history() {
        let mut s = Store::new();
        let a = s.create(
            CONFIGMAPS,
            json!({"metadata": {"name": "a", "namespace": "n"}, "data": {"k": "v"}}),
        );
        assert_eq!(rv_of(&a), 2);
        assert!(a.pointer("/metadata/generation").is_none());
        let same = s.update(CONFIGMAPS, a.clone());
        assert_eq!(rv_of(&same), 2, "a no-op update takes no version");
        let mut b = a.clone();
        b["data"]["k"] = json!("w");
        let b = s.update(CONFIGMAPS, b);
        assert_eq!(rv_of(&b), 3);
        assert_eq!(s.changes_after(2).len(), 1);
        assert_eq!(s.list(CONFIGMAPS, Some("n")).count(), 1);
        assert_eq!(s.list(CONFIGMAPS, Some("m")).count(), 0);
        assert_eq!(s.list(PODS, None).count(), 0);
        s.compact();
        assert!(s.expired(3));
        assert!(!s.expired(4));
        s.remove(&Key::new(CONFIGMAPS, "n", "a")).unwrap();
        assert_eq!(s.changes_after(4)[0].kind, EventType::Deleted);
    }
}
