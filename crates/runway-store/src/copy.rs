//! Copying a SQLite store into PostgreSQL (`runway server migrate-store`): every row of every
//! table as it is (ids, times, sealed secrets, token hashes, the audit log), into an empty
//! database, in one transaction on each side.

use crate::error::{Result, StoreError};
use crate::logic::Backend;
use crate::sql::{Db, DbExt, Param, Value};
use crate::{PostgresStore, SqliteStore};

/// The tables in the order their rows can be inserted (what a row refers to comes first), each
/// with its columns and whether its `id` is an identity PostgreSQL hands out.
const TABLES: &[(&str, &[&str], bool)] = &[
    ("service_ids", &["id", "name"], true),
    (
        "teams",
        &["name", "members", "created_at", "created_by", "updated_at"],
        false,
    ),
    (
        "services",
        &[
            "name",
            "owners",
            "environments",
            "created_at",
            "created_by",
            "id",
            "allow_processes",
            "inventory",
            "team",
        ],
        false,
    ),
    (
        "revisions",
        &[
            "id",
            "service",
            "env",
            "number",
            "name",
            "manifest",
            "artifact",
            "env_vars",
            "secret_versions",
            "created_by",
            "created_at",
            "set_vars",
        ],
        true,
    ),
    ("revision_numbers", &["service", "env", "last"], false),
    (
        "previews",
        &[
            "service",
            "parent",
            "name",
            "base_env",
            "origin",
            "expires_at",
            "created_at",
            "created_by",
            "updated_at",
        ],
        false,
    ),
    (
        "deployments",
        &[
            "id",
            "service",
            "env",
            "kind",
            "from_revision",
            "to_revision",
            "state",
            "reason",
            "created_by",
            "created_at",
            "updated_at",
            "rollout",
            "command",
        ],
        true,
    ),
    (
        "deployment_events",
        &["id", "deployment_id", "at", "message"],
        true,
    ),
    (
        "desired",
        &["service", "env", "generation", "updated_at"],
        false,
    ),
    (
        "desired_revisions",
        &[
            "service",
            "env",
            "position",
            "revision",
            "instances",
            "weight",
        ],
        false,
    ),
    (
        "secrets",
        &[
            "service",
            "env",
            "name",
            "version",
            "nonce",
            "ciphertext",
            "created_by",
            "created_at",
            "deleted_at",
            "origin",
        ],
        false,
    ),
    (
        "tokens",
        &[
            "id",
            "name",
            "hash",
            "scope",
            "expires_at",
            "revoked_at",
            "created_at",
            "created_by",
            "parent_id",
        ],
        true,
    ),
    (
        "domains",
        &[
            "name",
            "service",
            "env",
            "state",
            "detail",
            "attempts",
            "next_attempt_at",
            "cert_pem",
            "not_after",
            "key_nonce",
            "key_ciphertext",
            "generation",
            "created_at",
            "created_by",
            "updated_at",
        ],
        false,
    ),
    (
        "acme_accounts",
        &["directory", "nonce", "ciphertext", "created_at"],
        false,
    ),
    (
        "maintenance",
        &[
            "service",
            "env",
            "message",
            "allow",
            "retry_after_seconds",
            "since",
            "set_by",
        ],
        false,
    ),
    (
        "identity_keys",
        &[
            "kid",
            "nonce",
            "ciphertext",
            "public_jwk",
            "created_at",
            "expires_at",
        ],
        false,
    ),
    (
        "audit",
        &[
            "id",
            "at",
            "actor",
            "action",
            "target",
            "detail",
            "prev_hash",
            "hash",
        ],
        true,
    ),
    (
        "audit_export",
        &[
            "sink",
            "acked_id",
            "acked_at",
            "error",
            "failing_since",
            "updated_at",
        ],
        false,
    ),
];

/// What was copied: each table and its rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    pub tables: Vec<(&'static str, u64)>,
}

/// Copies everything in `from` into `to`, which must hold nothing yet; refused with
/// [`StoreError::Conflict`], naming what it holds, otherwise. `from` is read in one snapshot
/// and `to` written in one transaction: a failure leaves `to` as empty as it was.
pub fn copy_sqlite_to_postgres(from: &SqliteStore, to: &PostgresStore) -> Result<Copied> {
    let (rows, head) = from.read(|db| {
        let head = db
            .query("SELECT id, hash FROM audit_head WHERE one = 1", &[])?
            .into_iter()
            .next()
            .and_then(|row| {
                let mut values = row.0.into_iter();
                Some((values.next()?, values.next()?))
            })
            .ok_or_else(|| StoreError::Corrupt("the audit log has no head row".to_owned()))?;
        let rows = TABLES
            .iter()
            .map(|(table, columns, _)| {
                db.query(
                    &format!("SELECT {} FROM {table} ORDER BY 1", columns.join(", ")),
                    &[],
                )
                .map(|rows| (*table, rows))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((rows, head))
    })?;
    to.write(|db, _| {
        refuse_unless_empty(db)?;
        let mut tables = Vec::new();
        for ((table, columns, identity), (_, table_rows)) in TABLES.iter().zip(&rows) {
            let placeholders: Vec<String> = (1..=columns.len()).map(|i| format!("?{i}")).collect();
            let insert = format!(
                "INSERT INTO {table} ({}) {}VALUES ({})",
                columns.join(", "),
                if *identity {
                    "OVERRIDING SYSTEM VALUE "
                } else {
                    ""
                },
                placeholders.join(", ")
            );
            for row in table_rows {
                let args: Vec<Param<'_>> = row.0.iter().map(Value::as_param).collect();
                db.execute(&insert, &args)?;
            }
            if *identity {
                // The next id handed out follows the last one copied.
                db.query(
                    &format!(
                        "SELECT setval(pg_get_serial_sequence('{table}', 'id'), \
                         COALESCE(MAX(id), 1), MAX(id) IS NOT NULL) FROM {table}"
                    ),
                    &[],
                )?;
            }
            tables.push((*table, u64::try_from(table_rows.len()).unwrap_or(u64::MAX)));
        }
        // The audit log's head, whose one row every store has: the copy's is the original's,
        // so the chain and its end carry over as they are.
        db.execute(
            "UPDATE audit_head SET id = ?1, hash = ?2 WHERE one = 1",
            &[head.0.as_param(), head.1.as_param()],
        )?;
        Ok(Copied { tables })
    })
}

fn refuse_unless_empty(db: &dyn Db) -> Result<()> {
    let mut held = Vec::new();
    for (table, _, _) in TABLES {
        let count: i64 = db.query_value(&format!("SELECT COUNT(*) FROM {table}"), &[])?;
        if count > 0 {
            held.push(format!("{count} in {table}"));
        }
    }
    if held.is_empty() {
        Ok(())
    } else {
        Err(StoreError::Conflict(format!(
            "the target store is not empty ({}): copy into a new, empty database",
            held.join(", ")
        )))
    }
}

impl Value {
    fn as_param(&self) -> Param<'_> {
        match self {
            Value::Null => Param::Null,
            Value::Int(n) => Param::Int(*n),
            Value::Text(text) => Param::Text(text),
            Value::Bytes(bytes) => Param::Bytes(bytes),
        }
    }
}
