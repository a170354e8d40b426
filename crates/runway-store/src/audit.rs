//! The audit log's hash chain, without SQL: how an entry's hash is made, and [`AuditChain`],
//! which checks entries one after the other (the store's [`crate::Store::audit_verify`] and
//! `runway audit verify --file` both walk it).
//!
//! # The hash
//!
//! `hash = lower-case hex of SHA-256(prev_hash ‖ canonical(entry))`, where `prev_hash` is the
//! 64 ASCII characters of the previous entry's hash ([`GENESIS`], 64 zeros, before the first
//! entry) and `canonical(entry)` is the UTF-8 JSON text of the array
//!
//! ```text
//! [id, at, actor, action, target, detail]
//! ```
//!
//! `id` and `at` (Unix milliseconds, not the RFC 3339 text the API shows) are integers; `actor`,
//! `action` and `target` strings; `detail` the entry's JSON value. The text has no whitespace
//! outside strings; every object's keys are sorted by their UTF-8 bytes, at every depth; strings
//! are escaped as serde_json writes them (`"`, `\` and U+0000 to U+001F only: `\b \f \n \r \t`,
//! the others `\u00XX` in lower-case hex; nothing else, non-ASCII as is); numbers as serde_json
//! writes them (integers in decimal). Python's `json.dumps(value, separators=(",", ":"),
//! sort_keys=True, ensure_ascii=False)` gives the same text for every detail Runway writes.
//!
//! An exported line is the entry as JSON ([`crate::AuditEntry`]): `at` in RFC 3339 with
//! milliseconds, whose milliseconds are the hash's `at`.

use sha2::{Digest, Sha256};

use crate::{AuditEntry, Timestamp};

/// The `prev_hash` of the first entry.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The canonical encoding of an entry's hashed fields (see the module's docs).
pub fn audit_canonical(
    id: i64,
    at: Timestamp,
    actor: &str,
    action: &str,
    target: &str,
    detail: &serde_json::Value,
) -> String {
    let array = serde_json::Value::Array(vec![
        id.into(),
        at.unix_millis().into(),
        actor.into(),
        action.into(),
        target.into(),
        sorted(detail),
    ]);
    // A Value always encodes.
    serde_json::to_string(&array).unwrap_or_default()
}

/// `value` with every object's keys in sorted order (serde_json keeps insertion order here,
/// the workspace building it with `preserve_order`).
fn sorted(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|key| (key.clone(), sorted(&map[key])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// The hash of an entry whose predecessor's hash is `prev_hash`.
pub fn audit_hash(prev_hash: &str, entry: &AuditEntry) -> String {
    hash_fields(
        prev_hash,
        entry.id,
        entry.at,
        &entry.actor,
        &entry.action,
        &entry.target,
        &entry.detail,
    )
}

pub(crate) fn hash_fields(
    prev_hash: &str,
    id: i64,
    at: Timestamp,
    actor: &str,
    action: &str,
    target: &str,
    detail: &serde_json::Value,
) -> String {
    let mut hasher = Sha256::new();
    hasher.update(prev_hash.as_bytes());
    hasher.update(audit_canonical(id, at, actor, action, target, detail).as_bytes());
    hex(&hasher.finalize())
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// The first entry where a chain breaks: its id and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuditBreak {
    /// The entry (or, when entries were removed from the end, the last one left).
    pub id: i64,
    /// What differs, for people.
    pub reason: String,
}

/// Checks entries in order, one at a time.
#[derive(Debug, Clone)]
pub struct AuditChain {
    /// The last entry taken: its id and hash. `None` before the first.
    last: Option<(i64, String)>,
    /// Whether the first entry must follow [`GENESIS`] (a whole log), or may follow anything
    /// (a file whose export began later).
    from_genesis: bool,
    /// Entries seen again (an export is at least once), by id: their hashes.
    seen: Option<std::collections::HashMap<i64, String>>,
    entries: u64,
}

impl AuditChain {
    /// A whole log: its first entry follows [`GENESIS`].
    pub fn new() -> Self {
        Self {
            last: None,
            from_genesis: true,
            seen: None,
            entries: 0,
        }
    }

    /// Exported lines: the first may follow an entry not in them (its `prev_hash` is taken
    /// as it is), and an entry sent again (at least once) is skipped when it is the same as
    /// when first seen.
    pub fn exported() -> Self {
        Self {
            last: None,
            from_genesis: false,
            seen: Some(std::collections::HashMap::new()),
            entries: 0,
        }
    }

    /// How many distinct entries were checked.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// The last entry checked: its id and hash.
    pub fn last(&self) -> Option<(i64, &str)> {
        self.last.as_ref().map(|(id, hash)| (*id, hash.as_str()))
    }

    /// Checks the next entry.
    pub fn push(&mut self, entry: &AuditEntry) -> Result<(), AuditBreak> {
        let broken = |reason: String| AuditBreak {
            id: entry.id,
            reason,
        };
        let (Some(prev_hash), Some(hash)) = (&entry.prev_hash, &entry.hash) else {
            return Err(broken(
                "it has no hash: it was written without one and never chained".to_owned(),
            ));
        };
        if audit_hash(prev_hash, entry) != *hash {
            return Err(broken(
                "its content does not match its hash: it was changed after it was written"
                    .to_owned(),
            ));
        }
        if let Some((last_id, _)) = &self.last
            && entry.id <= *last_id
        {
            return match self.seen.as_ref().and_then(|seen| seen.get(&entry.id)) {
                Some(first) if first == hash => Ok(()),
                Some(_) => Err(broken(format!(
                    "it was seen before with another hash (entries up to {last_id} came first)"
                ))),
                None => Err(broken(format!(
                    "it comes after entry {last_id}, out of order"
                ))),
            };
        }
        match &self.last {
            Some((last_id, last_hash)) if prev_hash != last_hash => {
                return Err(broken(format!(
                    "its prev_hash is not the hash of entry {last_id} before it: an entry \
                     between {last_id} and {} was removed, or entry {last_id} was changed with \
                     its hash",
                    entry.id
                )));
            }
            None if self.from_genesis && prev_hash != GENESIS => {
                return Err(broken(
                    "it is the first entry but its prev_hash is not the genesis (64 zeros): \
                     entries before it were removed"
                        .to_owned(),
                ));
            }
            _ => {}
        }
        if let Some(seen) = &mut self.seen {
            seen.insert(entry.id, hash.clone());
        }
        self.last = Some((entry.id, hash.clone()));
        self.entries += 1;
        Ok(())
    }
}

impl Default for AuditChain {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::json;

    use super::*;

    fn entry(id: i64, prev: &str, detail: serde_json::Value) -> AuditEntry {
        let mut entry = AuditEntry {
            id,
            at: Timestamp::from_unix_millis(1_700_000_000_123).unwrap(),
            actor: "alice".into(),
            action: "deploy".into(),
            target: "hello/dev".into(),
            detail,
            prev_hash: Some(prev.to_owned()),
            hash: None,
        };
        entry.hash = Some(audit_hash(prev, &entry));
        entry
    }

    #[test]
    fn the_canonical_encoding_sorts_keys_and_has_no_spaces() {
        let at = Timestamp::from_unix_millis(5).unwrap();
        let detail = json!({"b": 1, "a": {"z": "é\n", "y": [true, null]}});
        assert_eq!(
            audit_canonical(7, at, "al\"ice", "deploy", "hello/dev", &detail),
            r#"[7,5,"al\"ice","deploy","hello/dev",{"a":{"y":[true,null],"z":"é\n"},"b":1}]"#
        );
    }

    /// The hash of a fixed entry, so that a change to the encoding cannot pass unnoticed:
    /// every exported copy and external verifier depends on it.
    #[test]
    fn the_hash_of_a_known_entry() {
        let first = entry(1, GENESIS, json!({"revision": "hello-dev-00001"}));
        // Python's json.dumps(..., separators=(",", ":"), sort_keys=True) and hashlib agree.
        assert_eq!(
            first.hash.as_deref(),
            Some("922f6dfd6ac6e7d6ead87e1456580ad8db8b47c3add0ba73308305bd8be552f5")
        );
    }

    #[test]
    fn a_chain_links_and_each_break_is_named() {
        let a = entry(1, GENESIS, json!({}));
        let b = entry(2, a.hash.as_deref().unwrap(), json!({"x": 1}));
        let c = entry(4, b.hash.as_deref().unwrap(), json!({"x": 2}));
        let mut chain = AuditChain::new();
        for e in [&a, &b, &c] {
            chain.push(e).unwrap();
        }
        assert_eq!(chain.entries(), 3);

        // A changed entry.
        let mut changed = b.clone();
        changed.actor = "mallory".into();
        let mut chain = AuditChain::new();
        chain.push(&a).unwrap();
        let broken = chain.push(&changed).unwrap_err();
        assert_eq!(broken.id, 2);
        assert!(broken.reason.contains("content"), "{}", broken.reason);

        // A removed entry.
        let mut chain = AuditChain::new();
        chain.push(&a).unwrap();
        let broken = chain.push(&c).unwrap_err();
        assert_eq!(broken.id, 4);
        assert!(
            broken.reason.contains("between 1 and 4"),
            "{}",
            broken.reason
        );

        // The first removed.
        let broken = AuditChain::new().push(&b).unwrap_err();
        assert!(broken.reason.contains("genesis"), "{}", broken.reason);
        // ...which an export that began later may do.
        let mut exported = AuditChain::exported();
        exported.push(&b).unwrap();
        exported.push(&c).unwrap();
        // Sent again: skipped; sent again changed: broken.
        exported.push(&b).unwrap();
        exported.push(&c).unwrap();
        assert_eq!(exported.entries(), 2);
        let mut forged = entry(2, GENESIS, json!({"x": 9}));
        forged.prev_hash = b.prev_hash.clone();
        forged.hash = Some(audit_hash(b.prev_hash.as_deref().unwrap(), &forged));
        assert!(exported.push(&forged).is_err());
    }
}
