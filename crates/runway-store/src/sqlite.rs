//! `SqliteStore`: the embedded implementation of [`Store`].

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, ToSql, TransactionBehavior};

use crate::Timestamp;
use crate::error::{DbResult, Result, StoreError};
use crate::logic::Backend;
use crate::migrate;
use crate::sql::{Db, Dialect, Param, Row, Value};

/// How long a writer waits for another process's write transaction before `database is
/// locked`.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Prepared statements kept per connection: more than the store's distinct statements (about
/// seventy), so none is prepared twice.
const STATEMENT_CACHE: usize = 128;

/// The store in one SQLite file (WAL mode, `synchronous=FULL`, foreign keys on).
///
/// One connection behind a mutex: SQLite has one writer at a time anyway, and the control
/// plane's load is a few writes a second.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Mutex<Connection>,
    path: PathBuf,
}

/// Creates the database file readable and writable by its owner only (`0600`), or makes an
/// existing one and its `-wal` and `-shm` files so: they hold token hashes, sealed secrets and
/// the audit log. SQLite gives the files it creates later the database file's mode.
fn make_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let io = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| StoreError::Io {
            action,
            path,
            source,
        }
    };
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io("create", path)(e)),
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let file = PathBuf::from(name);
        match std::fs::metadata(&file) {
            Ok(meta) if meta.permissions().mode() & 0o077 != 0 => {
                match std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)) {
                    // Another user's file, shared on purpose: theirs to change.
                    Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
                    other => other.map_err(io("make private", &file))?,
                }
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("inspect", &file)(e)),
        }
    }
    Ok(())
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    ///
    /// A database whose schema is newer than this code is refused with
    /// [`StoreError::TooNew`] before anything is written to it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        make_private(&path)?;
        let mut conn = Connection::open(&path).db()?;
        conn.busy_timeout(BUSY_TIMEOUT).db()?;
        // Every statement the store runs stays prepared: a few dozen texts, each run often
        // (a pass over 1,000 services spent about an eighth of its store time preparing them).
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        // Before any pragma that writes: a database from a newer Runway stays as it was.
        migrate::check_version(migrate::version(&conn)?)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .db()?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Corrupt(format!(
                "could not switch {} to WAL mode (it stays in {mode:?} mode)",
                path.display()
            )));
        }
        conn.pragma_update(None, "synchronous", "FULL").db()?;
        conn.pragma_update(None, "foreign_keys", true).db()?;
        migrate::migrate(&mut conn)?;
        let store = Self {
            conn: Mutex::new(conn),
            path,
        };
        // Entries written before the chain, or by an older Runway, chained now.
        store.write(|db, _| crate::logic::chain_pending(db))?;
        Ok(store)
    }

    /// Bounds the database's size to about `max_bytes` (SQLite's `max_page_count`, for this
    /// process), or lifts the bound with `None`: a write past it fails with
    /// [`StoreError::Full`] and changes nothing, as on a full disk.
    pub fn limit_size(&self, max_bytes: Option<u64>) -> Result<()> {
        let conn = self.lock();
        let page_size: i64 = conn
            .query_row("PRAGMA page_size", [], |row| row.get(0))
            .db()?;
        let page_size = u64::try_from(page_size).unwrap_or(4096).max(1);
        // SQLite's own ceiling when lifted.
        let pages = max_bytes.map_or(0xFFFF_FFFE, |bytes| (bytes / page_size).max(1));
        // The answer is the bound in force: never below the pages in use.
        let _: i64 = conn
            .query_row(&format!("PRAGMA max_page_count = {pages}"), [], |row| {
                row.get(0)
            })
            .db()?;
        Ok(())
    }

    /// The database file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open database.
    pub fn schema_version(&self) -> Result<i64> {
        migrate::version(&self.lock())
    }

    /// Runs `PRAGMA integrity_check`: `Ok` when SQLite finds nothing wrong, `Corrupt` with
    /// its findings otherwise.
    pub fn integrity_check(&self) -> Result<()> {
        let conn = self.lock();
        let findings = Sqlite(&conn).query("PRAGMA integrity_check", &[])?;
        let findings = findings
            .iter()
            .map(|row| row.get::<String>(0))
            .collect::<Result<Vec<_>>>()?;
        if findings == ["ok"] {
            Ok(())
        } else {
            Err(StoreError::Corrupt(findings.join("; ")))
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock rolled its transaction back when the transaction was
        // dropped, so the connection is still sound.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Backend for SqliteStore {
    /// An immediate transaction: SQLite's one writer, taken at `BEGIN`.
    fn write<T: Send>(&self, f: impl FnOnce(&dyn Db, Timestamp) -> Result<T> + Send) -> Result<T> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .db()?;
        let value = f(&Sqlite(&tx), Timestamp::now())?;
        tx.commit().db()?;
        Ok(value)
    }

    fn read<T: Send>(&self, f: impl FnOnce(&dyn Db) -> Result<T> + Send) -> Result<T> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .db()?;
        let value = f(&Sqlite(&tx))?;
        tx.commit().db()?;
        Ok(value)
    }
}

/// A connection (inside a transaction) as the store's logic sees it.
struct Sqlite<'a>(&'a Connection);

impl ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            Param::Null => ValueRef::Null,
            Param::Int(n) => ValueRef::Integer(n),
            Param::Text(text) => ValueRef::Text(text.as_bytes()),
            Param::Bytes(bytes) => ValueRef::Blob(bytes),
        }))
    }
}

impl Db for Sqlite<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn execute(&self, sql: &str, args: &[Param<'_>]) -> Result<u64> {
        let mut statement = self.0.prepare_cached(sql).db()?;
        let changed = statement
            .execute(rusqlite::params_from_iter(args.iter()))
            .db()?;
        Ok(u64::try_from(changed).unwrap_or(u64::MAX))
    }

    fn query(&self, sql: &str, args: &[Param<'_>]) -> Result<Vec<Row>> {
        let mut statement = self.0.prepare_cached(sql).db()?;
        let columns = statement.column_count();
        let mut rows = statement
            .query(rusqlite::params_from_iter(args.iter()))
            .db()?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().db()? {
            let mut values = Vec::with_capacity(columns);
            for index in 0..columns {
                values.push(match row.get_ref(index).db()? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(n) => Value::Int(n),
                    ValueRef::Text(text) => Value::Text(
                        String::from_utf8(text.to_vec())
                            .map_err(|e| StoreError::Corrupt(format!("text column: {e}")))?,
                    ),
                    ValueRef::Blob(bytes) => Value::Bytes(bytes.to_vec()),
                    ValueRef::Real(real) => {
                        return Err(StoreError::Corrupt(format!(
                            "column {index} holds a real number ({real}), which the store never \
                             writes"
                        )));
                    }
                });
            }
            out.push(Row(values));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_has_its_pragmas() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(dir.path().join("db")).expect("open");
        let conn = store.lock();
        let pragma = |name: &str| -> String {
            conn.query_row(&format!("PRAGMA {name}"), [], |row| {
                row.get::<_, rusqlite::types::Value>(0)
            })
            .map(|v| format!("{v:?}"))
            .expect("pragma")
        };
        assert_eq!(pragma("journal_mode"), "Text(\"wal\")");
        // 2 is FULL.
        assert_eq!(pragma("synchronous"), "Integer(2)");
        assert_eq!(pragma("foreign_keys"), "Integer(1)");
        assert_eq!(pragma("busy_timeout"), "Integer(5000)");
    }

    #[test]
    fn the_database_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        let mode = |suffix: &str| {
            let file = dir.path().join(format!("db{suffix}"));
            std::fs::metadata(&file).expect("stat").permissions().mode() & 0o777
        };
        let store = SqliteStore::open(&path).expect("open");
        store
            .lock()
            .execute_batch("CREATE TABLE t (x)")
            .expect("write");
        assert_eq!(
            (mode(""), mode("-wal"), mode("-shm")),
            (0o600, 0o600, 0o600)
        );
        drop(store);
        // A database an earlier version left readable by all is made private.
        for suffix in ["", "-wal", "-shm"] {
            let file = dir.path().join(format!("db{suffix}"));
            if file.exists() {
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
                    .expect("chmod");
            }
        }
        let _store = SqliteStore::open(&path).expect("reopen");
        assert_eq!(mode(""), 0o600);
    }
}
