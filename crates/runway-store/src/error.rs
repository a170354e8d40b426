//! The store's one error type.

use crate::DeploymentState;

/// What can go wrong in the store. Messages are for the people who run `runway`; none
/// carries a secret's value or a token.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The thing asked for does not exist.
    #[error("{kind} {name:?} not found")]
    NotFound {
        /// What kind of thing: `service`, `revision`, `deployment`, …
        kind: &'static str,
        /// Its name or identifier.
        name: String,
    },
    /// Something with that name exists already.
    #[error("{kind} {name:?} already exists")]
    AlreadyExists {
        /// What kind of thing.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// A deployment cannot move between these states.
    #[error("a deployment cannot go from {from} to {to}")]
    InvalidTransition {
        /// Its state.
        from: DeploymentState,
        /// The state asked for.
        to: DeploymentState,
    },
    /// The change contradicts what is stored now (a stale generation, a deployment in
    /// progress, desired state that names a revision being removed).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The request itself is malformed (an empty list, a duplicate, a revision of another
    /// service).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The disk (or the database's size bound) is full: nothing was written.
    #[error("the store's disk is full: nothing was written; free space where the database is")]
    Full,
    /// The database refused or failed.
    #[error("database error")]
    Sqlite(#[source] rusqlite::Error),
    /// A fenced handle's lease is held by another now: this replica no longer leads.
    #[error(
        "this replica no longer holds the lease {lease:?} (its token {token} is stale): \
         another leads; nothing was written"
    )]
    Fenced {
        /// The lease.
        lease: String,
        /// The token the handle carried.
        token: i64,
    },
    /// A fenced handle of a replica that does not lead: nothing is written through it.
    #[error("this replica does not lead the control plane now: nothing was written")]
    NotLeading,
    /// PostgreSQL refused or failed.
    #[error("database error")]
    Postgres(#[source] postgres::Error),
    /// The database cannot be reached now (a connection could not be made in time).
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    /// The database holds something this code cannot read.
    #[error("database is corrupt: {0}")]
    Corrupt(String),
    /// The database's file could not be created or made private.
    #[error("cannot {action} {}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The database was written by a newer Runway; it is left untouched.
    #[error(
        "database schema version {found} is newer than this runway knows ({supported}); \
         upgrade runway, the database was not changed"
    )]
    TooNew {
        /// The database's `user_version`.
        found: i64,
        /// The newest version this code knows.
        supported: i64,
    },
}

/// The store's result.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// `.db()` on a rusqlite result: the one place SQLite errors become [`StoreError::Sqlite`].
pub(crate) trait DbResult<T> {
    fn db(self) -> Result<T>;
}

impl<T> DbResult<T> for rusqlite::Result<T> {
    fn db(self) -> Result<T> {
        self.map_err(|error| match error.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => StoreError::Full,
            _ => StoreError::Sqlite(error),
        })
    }
}

pub(crate) fn not_found(kind: &'static str, name: impl Into<String>) -> StoreError {
    StoreError::NotFound {
        kind,
        name: name.into(),
    }
}
