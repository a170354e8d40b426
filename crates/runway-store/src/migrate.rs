//! Schema migrations: SQL files in `migrations/`, embedded, applied in order, tracked with
//! `PRAGMA user_version`.

use rusqlite::{Connection, TransactionBehavior};

use crate::error::{DbResult, Result, StoreError};

/// Migration `i` (0-based) takes the schema from version `i` to `i + 1`. Append only: a
/// released migration is never edited.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_initial.sql"),
    include_str!("../migrations/0002_rollout.sql"),
    include_str!("../migrations/0003_service_identity.sql"),
    include_str!("../migrations/0004_leases.sql"),
    include_str!("../migrations/0005_secret_origin.sql"),
    include_str!("../migrations/0006_sessions_domains.sql"),
    include_str!("../migrations/0007_revision_set_vars.sql"),
    include_str!("../migrations/0008_previews_inventory.sql"),
    include_str!("../migrations/0009_teams.sql"),
    include_str!("../migrations/0010_audit_chain.sql"),
    include_str!("../migrations/0011_identity_keys.sql"),
    include_str!("../migrations/0012_maintenance.sql"),
];

/// The schema version this code writes.
pub(crate) const LATEST_VERSION: i64 = MIGRATIONS.len() as i64;

/// The database's schema version.
pub(crate) fn version(conn: &Connection) -> Result<i64> {
    conn.query_row("PRAGMA user_version", [], |row| row.get(0))
        .db()
}

/// Refuses a database newer than this code, or with a nonsensical version, touching nothing.
pub(crate) fn check_version(found: i64) -> Result<()> {
    check_against(found, LATEST_VERSION)
}

fn check_against(found: i64, supported: i64) -> Result<()> {
    if found > supported {
        return Err(StoreError::TooNew { found, supported });
    }
    if found < 0 {
        return Err(StoreError::Corrupt(format!(
            "schema version {found} is negative"
        )));
    }
    Ok(())
}

/// Brings the schema to [`LATEST_VERSION`] in one immediate transaction: either every pending
/// migration applies, or none does. The version is read again inside the transaction, so two
/// processes opening the same new database do not both migrate it.
pub(crate) fn migrate(conn: &mut Connection) -> Result<()> {
    apply(conn, MIGRATIONS)
}

fn apply(conn: &mut Connection, migrations: &[&str]) -> Result<()> {
    let latest = i64::try_from(migrations.len()).unwrap_or(i64::MAX);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .db()?;
    let current = version(&tx)?;
    check_against(current, latest)?;
    for (index, sql) in migrations.iter().enumerate() {
        let to = i64::try_from(index).map_or(i64::MAX, |i| i + 1);
        if to <= current {
            continue;
        }
        tx.execute_batch(sql).db()?;
        tx.pragma_update(None, "user_version", to).db()?;
    }
    tx.commit().db()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables(conn: &Connection) -> Vec<String> {
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
            .expect("prepare");
        stmt.query_map([], |row| row.get(0))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows")
    }

    #[test]
    fn migrations_apply_in_order_once() {
        let mut conn = Connection::open_in_memory().expect("open");
        let steps = [
            "CREATE TABLE a (x INTEGER);",
            "ALTER TABLE a ADD COLUMN y INTEGER;",
        ];
        apply(&mut conn, &steps[..1]).expect("first");
        assert_eq!(version(&conn).expect("version"), 1);
        apply(&mut conn, &steps).expect("second");
        assert_eq!(version(&conn).expect("version"), 2);
        // Nothing applies twice: re-running the ALTER would fail.
        apply(&mut conn, &steps).expect("again");
        assert_eq!(tables(&conn), ["a"]);
    }

    #[test]
    fn a_failing_migration_applies_nothing() {
        let mut conn = Connection::open_in_memory().expect("open");
        let steps = ["CREATE TABLE a (x INTEGER);", "THIS IS NOT SQL;"];
        let err = apply(&mut conn, &steps).expect_err("fails");
        assert!(matches!(err, StoreError::Sqlite(_)), "{err}");
        assert_eq!(version(&conn).expect("version"), 0);
        assert!(tables(&conn).is_empty());
    }

    #[test]
    fn versions_are_checked() {
        assert!(check_version(0).is_ok());
        assert!(check_version(LATEST_VERSION).is_ok());
        assert!(matches!(
            check_version(LATEST_VERSION + 1),
            Err(StoreError::TooNew { .. })
        ));
        assert!(matches!(check_version(-1), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn the_embedded_migrations_are_numbered_files() {
        // One file per migration, and the list above names them all.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        // `postgres/` holds PostgreSQL's own (src/postgres.rs checks them).
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("migrations/")
            .map(|e| e.expect("entry"))
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        assert_eq!(files.len(), MIGRATIONS.len());
        for (i, file) in files.iter().enumerate() {
            assert!(file.starts_with(&format!("{:04}_", i + 1)), "{file}");
            assert!(file.ends_with(".sql"), "{file}");
        }
    }
}
