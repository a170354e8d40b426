//! `PostgresStore`: [`Store`](crate::Store) on PostgreSQL, for several control-plane
//! replicas sharing one store.
//!
//! The same logic as SQLite's (`logic.rs`) over a pool of connections (r2d2, each checked
//! out with a `SELECT 1` so one broken by a database restart is replaced, not used). A write
//! transaction takes one transaction-scoped advisory lock first, so writers are one at a time
//! as they are on SQLite, and runs at READ COMMITTED, so each of its statements sees every
//! write committed before it took the lock; a read runs at REPEATABLE READ, READ ONLY: one
//! snapshot. Migrations are `migrations/postgres/NNNN_*.sql`, applied in order under the same
//! lock, the version kept in `runway_schema`.

use std::cell::RefCell;
use std::time::Duration;

use bytes::BytesMut;
use postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use postgres::{IsolationLevel, Transaction};
use r2d2_postgres::PostgresConnectionManager;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::Timestamp;
use crate::error::{Result, StoreError};
use crate::logic::Backend;
use crate::sql::{Db, Dialect, Param, Row, Value};

/// Migration `i` (0-based) takes the schema from version `i` to `i + 1`. Append only.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/postgres/0001_initial.sql"),
    include_str!("../migrations/postgres/0002_leases.sql"),
    include_str!("../migrations/postgres/0003_secret_origin.sql"),
    include_str!("../migrations/postgres/0004_sessions_domains.sql"),
    include_str!("../migrations/postgres/0005_revision_set_vars.sql"),
    include_str!("../migrations/postgres/0006_previews_inventory.sql"),
    include_str!("../migrations/postgres/0007_teams.sql"),
    include_str!("../migrations/postgres/0008_audit_chain.sql"),
    include_str!("../migrations/postgres/0009_identity_keys.sql"),
    include_str!("../migrations/postgres/0010_maintenance.sql"),
];

/// The schema version this code writes on PostgreSQL.
pub const POSTGRES_SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The advisory lock every write transaction (and a migration) holds: Runway's writers are
/// one at a time, whichever replica they run in.
const WRITE_LOCK: i64 = 0x5255_4e57_4159; // "RUNWAY"

/// How long taking a connection from the pool may wait (one being made included).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The store in a PostgreSQL database.
pub struct PostgresStore {
    pool: r2d2::Pool<PostgresConnectionManager<MakeRustlsConnect>>,
    /// The URL without its password, for messages.
    shown: String,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.shown)
            .finish_non_exhaustive()
    }
}

/// Whose certificates a TLS connection to the database trusts. Whichever it is, the
/// server's certificate is checked, its chain and its name (libpq's `verify-full`): the
/// store holds sealed secrets and token hashes, and an encrypted connection to whoever
/// answers protects neither.
#[derive(Debug, Clone, Default)]
pub enum DatabaseTrust {
    /// The system's roots (a managed database's public authority).
    #[default]
    System,
    /// The authorities in this PEM text only (a private CA, a cloud's database bundle).
    Pem(Vec<u8>),
}

impl DatabaseTrust {
    /// The TLS connector trusting these authorities.
    fn connector(&self) -> Result<MakeRustlsConnect> {
        let mut roots = rustls::RootCertStore::empty();
        match self {
            Self::System => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
            }
            Self::Pem(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|error| {
                        StoreError::Invalid(format!("the database's CA: not PEM ({error})"))
                    })?;
                    roots.add(cert).map_err(|error| {
                        StoreError::Invalid(format!("the database's CA: {error}"))
                    })?;
                }
                if roots.is_empty() {
                    return Err(StoreError::Invalid(
                        "the database's CA: no certificate in it".to_owned(),
                    ));
                }
            }
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| StoreError::Invalid(format!("TLS to the database: {error}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user:password@host:port/database`, or a libpq key/value
    /// string), trusting the system's roots if the connection is TLS, and brings the schema
    /// up to date. A database whose schema is newer than this code is refused with
    /// [`StoreError::TooNew`] before anything is written to it.
    pub fn open(url: &str) -> Result<Self> {
        Self::open_trusting(url, &DatabaseTrust::System)
    }

    /// [`open`](Self::open), a TLS connection trusting `trust`. The URL's `sslmode` says
    /// whether it is TLS: `require` always, `prefer` (the default) when the server offers
    /// it, `disable` never.
    pub fn open_trusting(url: &str, trust: &DatabaseTrust) -> Result<Self> {
        let mut config: postgres::Config = url.parse().map_err(|error: postgres::Error| {
            StoreError::Invalid(format!("store URL: {}", runway_log::chain(&error)))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let shown = shown(&config);
        let tls = trust.connector()?;
        // One connection first, for its error whole and at once: the pool would retry until
        // its timeout and keep only the outermost message ("error performing TLS handshake").
        // Dropped where it was made: closing it blocks on its own runtime.
        off_runtime(|| config.connect(tls.clone()).map(drop))
            .map_err(|error| unavailable(&shown, &error))?;
        let manager = PostgresConnectionManager::new(config, tls);
        let pool = r2d2::Pool::builder()
            .max_size(8)
            .min_idle(Some(1))
            .connection_timeout(CONNECT_TIMEOUT)
            .build(manager)
            .map_err(|error| unavailable(&shown, &error))?;
        let store = Self { pool, shown };
        off_runtime(|| store.migrate())?;
        // Entries written before the chain, or by an older replica, chained now.
        store.write(|db, _| crate::logic::chain_pending(db))?;
        Ok(store)
    }

    /// `url` (`postgres://…/DATABASE?options`) naming database `name` instead, its options
    /// (`sslmode`, …) kept: another database on the same server.
    pub fn url_for_database(url: &str, name: &str) -> String {
        let (base, options) = url.split_once('?').unwrap_or((url, ""));
        let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
        if options.is_empty() {
            format!("{server}/{name}")
        } else {
            format!("{server}/{name}?{options}")
        }
    }

    /// Checks that `pem` holds the certificates of authorities, reaching nothing.
    pub fn check_trust(pem: &[u8]) -> Result<()> {
        DatabaseTrust::Pem(pem.to_vec()).connector().map(drop)
    }

    /// Checks a URL's form, reaching nothing.
    pub fn check_url(url: &str) -> Result<()> {
        url.parse::<postgres::Config>().map(drop).map_err(|error| {
            StoreError::Invalid(format!("store URL: {}", runway_log::chain(&error)))
        })
    }

    /// The schema version of the database.
    pub fn schema_version(&self) -> Result<i64> {
        self.read(|db| {
            db.query("SELECT version FROM runway_schema", &[])?
                .first()
                .map_or(Ok(0), |row| row.get::<i64>(0))
        })
    }

    fn client(
        &self,
    ) -> Result<r2d2::PooledConnection<PostgresConnectionManager<MakeRustlsConnect>>> {
        self.pool
            .get()
            .map_err(|error| unavailable(&self.shown, &error))
    }

    fn migrate(&self) -> Result<()> {
        let pg = StoreError::Postgres;
        let mut client = self.client()?;
        let mut tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::ReadCommitted)
            .start()
            .map_err(pg)?;
        // Replicas starting together migrate one after the other; the second finds it done.
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK])
            .map_err(pg)?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS runway_schema (version BIGINT NOT NULL)")
            .map_err(pg)?;
        let current: i64 = match tx
            .query_opt("SELECT version FROM runway_schema", &[])
            .map_err(pg)?
        {
            Some(row) => row.try_get(0).map_err(pg)?,
            None => 0,
        };
        let latest = POSTGRES_SCHEMA_VERSION;
        if current > latest {
            return Err(StoreError::TooNew {
                found: current,
                supported: latest,
            });
        }
        for (index, sql) in MIGRATIONS.iter().enumerate() {
            let to = i64::try_from(index).map_or(i64::MAX, |i| i + 1);
            if to > current {
                tx.batch_execute(sql).map_err(pg)?;
            }
        }
        if current < latest {
            tx.execute("DELETE FROM runway_schema", &[]).map_err(pg)?;
            tx.execute(
                "INSERT INTO runway_schema (version) VALUES ($1)",
                &[&latest],
            )
            .map_err(pg)?;
        }
        tx.commit().map_err(pg)
    }
}

impl Backend for PostgresStore {
    fn write<T: Send>(&self, f: impl FnOnce(&dyn Db, Timestamp) -> Result<T> + Send) -> Result<T> {
        off_runtime(|| self.write_here(f))
    }

    fn read<T: Send>(&self, f: impl FnOnce(&dyn Db) -> Result<T> + Send) -> Result<T> {
        off_runtime(|| self.read_here(f))
    }
}

/// Runs `f` where the synchronous client may block: here, unless this thread runs a tokio
/// runtime's tasks (the client drives a runtime of its own, which cannot start inside
/// another), then on a thread of its own for the call.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|scope| match scope.spawn(f).join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

impl PostgresStore {
    fn write_here<T>(&self, f: impl FnOnce(&dyn Db, Timestamp) -> Result<T>) -> Result<T> {
        let mut client = self.client()?;
        let mut tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::ReadCommitted)
            .start()
            .map_err(StoreError::Postgres)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK])
            .map_err(StoreError::Postgres)?;
        let db = Pg(RefCell::new(tx));
        let value = f(&db, Timestamp::now())?;
        db.0.into_inner().commit().map_err(StoreError::Postgres)?;
        Ok(value)
    }

    fn read_here<T>(&self, f: impl FnOnce(&dyn Db) -> Result<T>) -> Result<T> {
        let mut client = self.client()?;
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(StoreError::Postgres)?;
        let db = Pg(RefCell::new(tx));
        let value = f(&db)?;
        db.0.into_inner().commit().map_err(StoreError::Postgres)?;
        Ok(value)
    }
}

/// A transaction as the store's logic sees it.
struct Pg<'a>(RefCell<Transaction<'a>>);

/// The store's statements number their parameters `?1`; PostgreSQL's are `$1`.
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

impl Db for Pg<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn execute(&self, sql: &str, args: &[Param<'_>]) -> Result<u64> {
        let params: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a as _).collect();
        self.0
            .borrow_mut()
            .execute(numbered(sql).as_str(), &params)
            .map_err(StoreError::Postgres)
    }

    fn query(&self, sql: &str, args: &[Param<'_>]) -> Result<Vec<Row>> {
        let params: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a as _).collect();
        let rows = self
            .0
            .borrow_mut()
            .query(numbered(sql).as_str(), &params)
            .map_err(StoreError::Postgres)?;
        rows.iter().map(row).collect()
    }
}

/// A row's values, by each column's type.
fn row(row: &postgres::Row) -> Result<Row> {
    let mut values = Vec::with_capacity(row.len());
    for (index, column) in row.columns().iter().enumerate() {
        let ty = column.type_();
        let value = if *ty == Type::INT8 {
            row.try_get::<_, Option<i64>>(index)
                .map(|v| v.map_or(Value::Null, Value::Int))
        } else if *ty == Type::INT4 {
            row.try_get::<_, Option<i32>>(index)
                .map(|v| v.map_or(Value::Null, |n| Value::Int(i64::from(n))))
        } else if *ty == Type::INT2 {
            row.try_get::<_, Option<i16>>(index)
                .map(|v| v.map_or(Value::Null, |n| Value::Int(i64::from(n))))
        } else if *ty == Type::BOOL {
            row.try_get::<_, Option<bool>>(index)
                .map(|v| v.map_or(Value::Null, |b| Value::Int(i64::from(b))))
        } else if *ty == Type::BYTEA {
            row.try_get::<_, Option<Vec<u8>>>(index)
                .map(|v| v.map_or(Value::Null, Value::Bytes))
        } else if [Type::TEXT, Type::VARCHAR, Type::NAME, Type::BPCHAR].contains(ty) {
            row.try_get::<_, Option<String>>(index)
                .map(|v| v.map_or(Value::Null, Value::Text))
        } else if *ty == Type::VOID {
            Ok(Value::Null)
        } else {
            return Err(StoreError::Corrupt(format!(
                "column {} is of type {ty}, which the store never reads",
                column.name()
            )));
        };
        values.push(value.map_err(StoreError::Postgres)?);
    }
    Ok(Row(values))
}

impl ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match *self {
            Param::Null => Ok(IsNull::Yes),
            // The server decides a parameter's type from where it stands: `= 1` makes it an
            // int4, a BIGINT column an int8.
            Param::Int(n) if *ty == Type::INT4 => i32::try_from(n)?.to_sql(ty, out),
            Param::Int(n) if *ty == Type::INT2 => i16::try_from(n)?.to_sql(ty, out),
            Param::Int(n) if *ty == Type::BOOL => (n != 0).to_sql(ty, out),
            Param::Int(n) => n.to_sql(ty, out),
            Param::Text(text) => text.to_sql(ty, out),
            Param::Bytes(bytes) => bytes.to_sql(ty, out),
        }
    }

    fn accepts(ty: &Type) -> bool {
        <i64 as ToSql>::accepts(ty)
            || <i32 as ToSql>::accepts(ty)
            || <i16 as ToSql>::accepts(ty)
            || <bool as ToSql>::accepts(ty)
            || <&str as ToSql>::accepts(ty)
            || <&[u8] as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

/// `host:port/database` as the configuration names it, with no password.
fn shown(config: &postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|host| match host {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_default();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let database = config.get_dbname().unwrap_or_default();
    format!("postgres://{host}:{port}/{database}")
}

fn unavailable(shown: &str, error: &(dyn std::error::Error + 'static)) -> StoreError {
    let text = runway_log::chain(error);
    let hint = if text.contains("certificate") {
        " (over TLS the database's certificate must name the host and come from an authority \
         Runway trusts: the system's, or the one `store.ca_file` names; `sslmode=disable` in \
         the URL turns TLS off)"
    } else {
        ""
    };
    StoreError::Unavailable(format!("cannot reach {shown}: {text}{hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_database_on_the_same_server_keeps_the_options() {
        assert_eq!(
            PostgresStore::url_for_database("postgres://u@h:5/postgres?sslmode=disable", "x"),
            "postgres://u@h:5/x?sslmode=disable"
        );
        assert_eq!(
            PostgresStore::url_for_database("postgres://u@h:5/postgres", "x"),
            "postgres://u@h:5/x"
        );
    }

    #[test]
    fn the_embedded_migrations_are_numbered_files() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("migrations/postgres/")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        assert_eq!(files.len(), MIGRATIONS.len());
        for (i, file) in files.iter().enumerate() {
            assert!(file.starts_with(&format!("{:04}_", i + 1)), "{file}");
            assert!(file.ends_with(".sql"), "{file}");
        }
    }

    #[test]
    fn parameters_are_numbered_the_postgres_way() {
        assert_eq!(
            numbered("SELECT a FROM t WHERE b = ?1 AND (?2 IS NULL OR c = ?2) AND d = '?'"),
            "SELECT a FROM t WHERE b = $1 AND ($2 IS NULL OR c = $2) AND d = '?'"
        );
    }

    #[test]
    fn the_url_is_shown_without_its_password() {
        let config: postgres::Config = "postgres://runway:s3cret@db.example:6543/runway"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let text = shown(&config);
        assert_eq!(text, "postgres://db.example:6543/runway");
        assert!(!text.contains("s3cret"));
    }
}
