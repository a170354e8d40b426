//! `SqliteStore`: the embedded implementation of [`Store`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::types::FromSql;
use rusqlite::{Connection, OptionalExtension, Params, Row, TransactionBehavior, params};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::error::{DbResult, Result, StoreError, not_found};
use crate::migrate;
use crate::{
    AuditEntry, DeployRecord, Deployment, DeploymentEvent, DeploymentKind, DeploymentState,
    Desired, DesiredRevision, NewRevision, NewService, NewToken, PlannedRevision, Revision,
    RevisionRef, RolloutCommand, SecretInfo, SecretVersion, Service, ServiceUpdate, Store,
    Timestamp, Token, TokenScope, revision_name,
};

/// How long a writer waits for another process's write transaction before `database is
/// locked`.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

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
        Ok(Self {
            conn: Mutex::new(conn),
            path,
        })
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
        let findings = query_all(&conn, "PRAGMA integrity_check", [], |row| {
            get::<String>(row, 0)
        })?;
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

    /// Runs `f` in an immediate (write) transaction, committed when `f` succeeds.
    fn write<T>(&self, f: impl FnOnce(&Connection, Timestamp) -> Result<T>) -> Result<T> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .db()?;
        let value = f(&tx, Timestamp::now())?;
        tx.commit().db()?;
        Ok(value)
    }

    /// Runs `f` in a read transaction, so it sees one snapshot.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .db()?;
        let value = f(&tx)?;
        tx.commit().db()?;
        Ok(value)
    }
}

// --- row helpers ---------------------------------------------------------------------------

fn query_all<T>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    f: impl Fn(&Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut stmt = conn.prepare(sql).db()?;
    let mut rows = stmt.query(params).db()?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().db()? {
        out.push(f(row)?);
    }
    Ok(out)
}

fn query_one<T>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    f: impl Fn(&Row<'_>) -> Result<T>,
) -> Result<Option<T>> {
    let mut stmt = conn.prepare(sql).db()?;
    let mut rows = stmt.query(params).db()?;
    match rows.next().db()? {
        Some(row) => f(row).map(Some),
        None => Ok(None),
    }
}

fn get<T: FromSql>(row: &Row<'_>, index: usize) -> Result<T> {
    row.get(index).db()
}

fn get_json<T: DeserializeOwned>(row: &Row<'_>, index: usize, what: &str) -> Result<T> {
    let text: String = get(row, index)?;
    serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

fn get_ts(row: &Row<'_>, index: usize) -> Result<Timestamp> {
    let millis: i64 = get(row, index)?;
    ts(millis)
}

fn get_opt_ts(row: &Row<'_>, index: usize) -> Result<Option<Timestamp>> {
    let millis: Option<i64> = get(row, index)?;
    millis.map(ts).transpose()
}

fn ts(millis: i64) -> Result<Timestamp> {
    Timestamp::from_unix_millis(millis)
        .ok_or_else(|| StoreError::Corrupt(format!("timestamp {millis} is out of range")))
}

fn get_u32(row: &Row<'_>, index: usize, what: &str) -> Result<u32> {
    let value: i64 = get(row, index)?;
    u32::try_from(value).map_err(|_| StoreError::Corrupt(format!("{what} {value} is out of range")))
}

fn to_json<T: Serialize + ?Sized>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(format!("cannot encode: {e}")))
}

fn limit_param(limit: u32) -> i64 {
    i64::from(limit)
}

// --- records -------------------------------------------------------------------------------

const SERVICE_COLUMNS: &str =
    "id, name, owners, environments, created_at, created_by, allow_processes";

fn service_from_row(row: &Row<'_>) -> Result<Service> {
    Ok(Service {
        id: get(row, 0)?,
        name: get(row, 1)?,
        owners: get_json(row, 2, "service owners")?,
        environments: get_json(row, 3, "service environments")?,
        created_at: get_ts(row, 4)?,
        created_by: get(row, 5)?,
        allow_processes: get(row, 6)?,
    })
}

const REVISION_COLUMNS: &str = "id, service, env, number, name, manifest, artifact, env_vars, \
                                secret_versions, created_by, created_at";

fn revision_from_row(row: &Row<'_>) -> Result<Revision> {
    Ok(Revision {
        id: get(row, 0)?,
        service: get(row, 1)?,
        env: get(row, 2)?,
        number: get_u32(row, 3, "revision number")?,
        name: get(row, 4)?,
        manifest: get_json(row, 5, "revision manifest")?,
        artifact: get_json(row, 6, "revision artifact")?,
        env_vars: get_json(row, 7, "revision env_vars")?,
        secret_versions: get_json(row, 8, "revision secret_versions")?,
        created_by: get(row, 9)?,
        created_at: get_ts(row, 10)?,
    })
}

const DEPLOYMENT_COLUMNS: &str = "id, service, env, kind, from_revision, to_revision, state, \
                                  reason, created_by, created_at, updated_at, rollout, command";

fn deployment_from_row(row: &Row<'_>) -> Result<Deployment> {
    let kind: String = get(row, 3)?;
    let state: String = get(row, 6)?;
    let command: Option<String> = get(row, 12)?;
    Ok(Deployment {
        id: get(row, 0)?,
        service: get(row, 1)?,
        env: get(row, 2)?,
        kind: DeploymentKind::parse(&kind)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown deployment kind {kind:?}")))?,
        from_revision: get(row, 4)?,
        to_revision: get(row, 5)?,
        state: DeploymentState::parse(&state)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown deployment state {state:?}")))?,
        reason: get(row, 7)?,
        created_by: get(row, 8)?,
        created_at: get_ts(row, 9)?,
        updated_at: get_ts(row, 10)?,
        rollout: get(row, 11)?,
        command: command
            .map(|text| {
                RolloutCommand::parse(&text)
                    .ok_or_else(|| StoreError::Corrupt(format!("unknown rollout command {text:?}")))
            })
            .transpose()?,
    })
}

fn event_from_row(row: &Row<'_>) -> Result<DeploymentEvent> {
    Ok(DeploymentEvent {
        deployment_id: get(row, 0)?,
        at: get_ts(row, 1)?,
        message: get(row, 2)?,
    })
}

const TOKEN_COLUMNS: &str = "id, name, hash, scope, expires_at, revoked_at, created_at, created_by";

fn token_from_row(row: &Row<'_>) -> Result<Token> {
    Ok(Token {
        id: get(row, 0)?,
        name: get(row, 1)?,
        hash: get(row, 2)?,
        scope: get_json(row, 3, "token scope")?,
        expires_at: get_opt_ts(row, 4)?,
        revoked_at: get_opt_ts(row, 5)?,
        created_at: get_ts(row, 6)?,
        created_by: get(row, 7)?,
    })
}

fn audit_from_row(row: &Row<'_>) -> Result<AuditEntry> {
    Ok(AuditEntry {
        id: get(row, 0)?,
        at: get_ts(row, 1)?,
        actor: get(row, 2)?,
        action: get(row, 3)?,
        target: get(row, 4)?,
        detail: get_json(row, 5, "audit detail")?,
    })
}

// --- shared steps, inside a transaction ----------------------------------------------------

fn audit(
    conn: &Connection,
    now: Timestamp,
    actor: &str,
    action: &str,
    target: &str,
    detail: &serde_json::Value,
) -> Result<()> {
    conn.execute(
        "INSERT INTO audit (at, actor, action, target, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![now.unix_millis(), actor, action, target, to_json(detail)?],
    )
    .db()?;
    Ok(())
}

fn load_service(conn: &Connection, name: &str) -> Result<Service> {
    query_one(
        conn,
        &format!("SELECT {SERVICE_COLUMNS} FROM services WHERE name = ?1"),
        [name],
        service_from_row,
    )?
    .ok_or_else(|| not_found("service", name))
}

/// The service, checked to have `env`.
fn load_service_env(conn: &Connection, service: &str, env: &str) -> Result<Service> {
    let found = load_service(conn, service)?;
    if !found.environments.iter().any(|e| e == env) {
        return Err(not_found("environment", format!("{service}/{env}")));
    }
    Ok(found)
}

fn load_revision(conn: &Connection, name: &str) -> Result<Revision> {
    query_one(
        conn,
        &format!("SELECT {REVISION_COLUMNS} FROM revisions WHERE name = ?1"),
        [name],
        revision_from_row,
    )?
    .ok_or_else(|| not_found("revision", name))
}

fn load_deployment(conn: &Connection, id: i64) -> Result<Deployment> {
    query_one(
        conn,
        &format!("SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE id = ?1"),
        [id],
        deployment_from_row,
    )?
    .ok_or_else(|| not_found("deployment", id.to_string()))
}

fn load_desired(conn: &Connection, service: &str, env: &str) -> Result<Option<Desired>> {
    let Some(generation) = query_one(
        conn,
        "SELECT generation FROM desired WHERE service = ?1 AND env = ?2",
        [service, env],
        |row| get::<i64>(row, 0),
    )?
    else {
        return Ok(None);
    };
    let generation = u64::try_from(generation)
        .map_err(|_| StoreError::Corrupt(format!("generation {generation} is negative")))?;
    let revisions = query_all(
        conn,
        "SELECT revision, instances, weight FROM desired_revisions \
         WHERE service = ?1 AND env = ?2 ORDER BY position",
        [service, env],
        |row| {
            Ok(DesiredRevision {
                revision: get(row, 0)?,
                instances: get_u32(row, 1, "instances")?,
                weight: get_u32(row, 2, "weight")?,
            })
        },
    )?;
    Ok(Some(Desired {
        service: service.to_owned(),
        env: env.to_owned(),
        revisions,
        generation,
    }))
}

/// Checks that every revision is distinct and belongs to `service` in `env`.
fn validate_desired(
    conn: &Connection,
    service: &str,
    env: &str,
    revisions: &[DesiredRevision],
) -> Result<()> {
    let mut seen = BTreeSet::new();
    for entry in revisions {
        if !seen.insert(entry.revision.as_str()) {
            return Err(StoreError::Invalid(format!(
                "revision {:?} appears twice in the desired state",
                entry.revision
            )));
        }
        let revision = load_revision(conn, &entry.revision)?;
        if revision.service != service || revision.env != env {
            return Err(StoreError::Invalid(format!(
                "revision {:?} belongs to {}/{}, not {service}/{env}",
                revision.name, revision.service, revision.env
            )));
        }
    }
    Ok(())
}

/// Replaces the desired state, bumping its generation; `revisions` must be validated.
fn write_desired(
    conn: &Connection,
    now: Timestamp,
    service: &str,
    env: &str,
    revisions: &[DesiredRevision],
    expected_generation: Option<u64>,
) -> Result<Desired> {
    let current = load_desired(conn, service, env)?.map_or(0, |d| d.generation);
    if let Some(expected) = expected_generation
        && expected != current
    {
        return Err(StoreError::Conflict(format!(
            "the desired state of {service}/{env} is at generation {current}, not {expected}"
        )));
    }
    let generation = current
        .checked_add(1)
        .and_then(|g| i64::try_from(g).ok())
        .ok_or_else(|| StoreError::Corrupt(format!("generation {current} cannot grow")))?;
    conn.execute(
        "INSERT INTO desired (service, env, generation, updated_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (service, env) DO UPDATE SET generation = excluded.generation, \
         updated_at = excluded.updated_at",
        params![service, env, generation, now.unix_millis()],
    )
    .db()?;
    conn.execute(
        "DELETE FROM desired_revisions WHERE service = ?1 AND env = ?2",
        [service, env],
    )
    .db()?;
    for (position, entry) in revisions.iter().enumerate() {
        conn.execute(
            "INSERT INTO desired_revisions (service, env, position, revision, instances, weight) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                service,
                env,
                i64::try_from(position).unwrap_or(i64::MAX),
                entry.revision,
                entry.instances,
                entry.weight
            ],
        )
        .db()?;
    }
    load_desired(conn, service, env)?
        .ok_or_else(|| StoreError::Corrupt(format!("desired state of {service}/{env} vanished")))
}

/// The revision with the most weight (the first of equals), if any.
fn heaviest(desired: Option<&Desired>) -> Option<String> {
    let revisions = &desired?.revisions;
    let mut best: Option<&DesiredRevision> = None;
    for entry in revisions {
        if best.is_none_or(|b| entry.weight > b.weight) {
            best = Some(entry);
        }
    }
    best.map(|b| b.revision.clone())
}

fn in_flight(conn: &Connection, service: &str, env: &str) -> Result<Vec<Deployment>> {
    query_all(
        conn,
        &format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE service = ?1 AND env = ?2 \
             AND state IN ('pending', 'progressing') ORDER BY id"
        ),
        [service, env],
        deployment_from_row,
    )
}

fn refuse_in_flight(conn: &Connection, service: &str, env: &str) -> Result<()> {
    if let Some(busy) = in_flight(conn, service, env)?.first() {
        return Err(StoreError::Conflict(format!(
            "deployment {} of {service}/{env} is still {}; wait for it to end, or end its \
             rollout with an abort or a promote",
            busy.id, busy.state
        )));
    }
    Ok(())
}

fn insert_revision(
    conn: &Connection,
    now: Timestamp,
    actor: &str,
    new: &NewRevision,
) -> Result<Revision> {
    // Numbers go on past a decommission: a service onboarded again under the name never gets
    // a revision name (nor instance ids) its predecessor had, whose instances may still drain.
    let last: i64 = conn
        .query_row(
            "SELECT MAX(COALESCE((SELECT MAX(number) FROM revisions \
                                  WHERE service = ?1 AND env = ?2), 0), \
                        COALESCE((SELECT last FROM revision_numbers \
                                  WHERE service = ?1 AND env = ?2), 0))",
            [&new.service, &new.env],
            |row| row.get(0),
        )
        .db()?;
    let number = u32::try_from(last)
        .ok()
        .and_then(|n| n.checked_add(1))
        .ok_or_else(|| {
            StoreError::Conflict(format!(
                "{}/{} has run out of revision numbers",
                new.service, new.env
            ))
        })?;
    let name = revision_name(&new.service, &new.env, number);
    let taken: Option<i64> = conn
        .query_row("SELECT id FROM revisions WHERE name = ?1", [&name], |row| {
            row.get(0)
        })
        .optional()
        .db()?;
    if taken.is_some() {
        // `a-b` in `c` and `a` in `b-c` would both name `a-b-c-00001`.
        return Err(StoreError::AlreadyExists {
            kind: "revision",
            name,
        });
    }
    conn.execute(
        "INSERT INTO revision_numbers (service, env, last) VALUES (?1, ?2, ?3) \
         ON CONFLICT (service, env) DO UPDATE SET last = excluded.last",
        params![new.service, new.env, number],
    )
    .db()?;
    conn.execute(
        "INSERT INTO revisions (service, env, number, name, manifest, artifact, env_vars, \
         secret_versions, created_by, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
            new.service,
            new.env,
            number,
            name,
            to_json(&new.manifest)?,
            to_json(&new.artifact)?,
            to_json(&new.env_vars)?,
            to_json(&new.secret_versions)?,
            actor,
            now.unix_millis()
        ],
    )
    .db()?;
    load_revision(conn, &name)
}

fn insert_event(
    conn: &Connection,
    now: Timestamp,
    deployment_id: i64,
    message: &str,
) -> Result<DeploymentEvent> {
    conn.execute(
        "INSERT INTO deployment_events (deployment_id, at, message) VALUES (?1, ?2, ?3)",
        params![deployment_id, now.unix_millis(), message],
    )
    .db()?;
    Ok(DeploymentEvent {
        deployment_id,
        at: now,
        message: message.to_owned(),
    })
}

struct NewDeployment<'a> {
    service: &'a str,
    env: &'a str,
    kind: DeploymentKind,
    from_revision: Option<String>,
    to_revision: &'a str,
}

fn insert_deployment(
    conn: &Connection,
    now: Timestamp,
    actor: &str,
    new: NewDeployment<'_>,
) -> Result<Deployment> {
    conn.execute(
        "INSERT INTO deployments (service, env, kind, from_revision, to_revision, state, \
         reason, created_by, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, 'pending', NULL, ?6, ?7, ?7)",
        params![
            new.service,
            new.env,
            new.kind.as_str(),
            new.from_revision,
            new.to_revision,
            actor,
            now.unix_millis()
        ],
    )
    .db()?;
    let id = conn.last_insert_rowid();
    let message = match &new.from_revision {
        Some(from) => format!("{} from {from} to {} by {actor}", new.kind, new.to_revision),
        None => format!("{} of {} by {actor}", new.kind, new.to_revision),
    };
    insert_event(conn, now, id, &message)?;
    load_deployment(conn, id)
}

/// Resolves planned revisions against the revision being created; `New` must appear once.
fn resolve_planned(planned: &[PlannedRevision], new_name: &str) -> Result<Vec<DesiredRevision>> {
    let news = planned
        .iter()
        .filter(|p| p.revision == RevisionRef::New)
        .count();
    if news != 1 {
        return Err(StoreError::Invalid(format!(
            "the desired state must name the new revision exactly once, not {news} times"
        )));
    }
    Ok(planned
        .iter()
        .map(|p| DesiredRevision {
            revision: match &p.revision {
                RevisionRef::New => new_name.to_owned(),
                RevisionRef::Named(name) => name.clone(),
            },
            instances: p.instances,
            weight: p.weight,
        })
        .collect())
}

/// Moves `deployment` (as loaded in this transaction) to `to`, with its event. A terminal
/// state drops a pending command, nothing being left to carry it out; the dropped command is
/// returned.
fn transition(
    conn: &Connection,
    now: Timestamp,
    deployment: &Deployment,
    to: DeploymentState,
    reason: Option<&str>,
) -> Result<Option<RolloutCommand>> {
    let from = deployment.state;
    if !from.can_become(to) {
        return Err(StoreError::InvalidTransition { from, to });
    }
    let dropped = deployment.command.filter(|_| to.is_terminal());
    conn.execute(
        "UPDATE deployments SET state = ?2, reason = COALESCE(?3, reason), updated_at = ?4, \
         command = CASE WHEN ?5 THEN NULL ELSE command END WHERE id = ?1",
        params![
            deployment.id,
            to.as_str(),
            reason,
            now.unix_millis(),
            to.is_terminal()
        ],
    )
    .db()?;
    let message = match reason {
        Some(reason) => format!("{from} → {to}: {reason}"),
        None => format!("{from} → {to}"),
    };
    insert_event(conn, now, deployment.id, &message)?;
    if let Some(command) = dropped {
        insert_event(
            conn,
            now,
            deployment.id,
            &format!("{command} not carried out: the deployment is {to}"),
        )?;
    }
    Ok(dropped)
}

fn check_secret_name(name: &str) -> Result<()> {
    if is_secret_name(name) {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "secret name {name:?}: use upper-case letters, digits and `_`, not starting with a \
             digit"
        )))
    }
}

/// One above the highest version of the secret ever stored, unset ones included.
fn next_secret_version(conn: &Connection, service: &str, env: &str, name: &str) -> Result<u32> {
    let last: i64 = conn
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM secrets \
             WHERE service = ?1 AND env = ?2 AND name = ?3",
            [service, env, name],
            |row| row.get(0),
        )
        .db()?;
    u32::try_from(last)
        .ok()
        .and_then(|v| v.checked_add(1))
        .ok_or_else(|| StoreError::Conflict(format!("secret {name:?} has run out of versions")))
}

/// The latest version of a secret that is set (not unset), if any.
fn current_secret_version(
    conn: &Connection,
    service: &str,
    env: &str,
    name: &str,
) -> Result<Option<u32>> {
    query_one(
        conn,
        "SELECT s.version FROM secrets s \
         WHERE s.service = ?1 AND s.env = ?2 AND s.name = ?3 AND s.deleted_at IS NULL \
         AND s.version = (SELECT MAX(t.version) FROM secrets t \
             WHERE t.service = s.service AND t.env = s.env AND t.name = s.name)",
        [service, env, name],
        |row| get_u32(row, 0, "secret version"),
    )
}

/// The latest version in `env` of each secret `source` pins. `Invalid`, naming them, when
/// some are not set there.
fn pin_secrets_in(
    conn: &Connection,
    source: &Revision,
    env: &str,
) -> Result<BTreeMap<String, u32>> {
    let mut pinned = BTreeMap::new();
    let mut missing = Vec::new();
    for name in source.secret_versions.keys() {
        match current_secret_version(conn, &source.service, env, name)? {
            Some(version) => {
                pinned.insert(name.clone(), version);
            }
            None => missing.push(name.as_str()),
        }
    }
    if !missing.is_empty() {
        return Err(StoreError::Invalid(format!(
            "revision {} uses {} {}, not set for {} in {env}; set {} there first",
            source.name,
            if missing.len() == 1 {
                "secret"
            } else {
                "secrets"
            },
            missing.join(", "),
            source.service,
            if missing.len() == 1 { "it" } else { "them" },
        )));
    }
    Ok(pinned)
}

fn is_secret_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn check_list(what: &str, items: &[String], allow_empty: bool) -> Result<()> {
    if !allow_empty && items.is_empty() {
        return Err(StoreError::Invalid(format!(
            "{what}: at least one is needed"
        )));
    }
    let mut seen = BTreeSet::new();
    for item in items {
        if item.is_empty() {
            return Err(StoreError::Invalid(format!("{what}: an empty name")));
        }
        if !seen.insert(item) {
            return Err(StoreError::Invalid(format!(
                "{what}: {item:?} appears twice"
            )));
        }
    }
    Ok(())
}

fn env_target(service: &str, env: &str) -> String {
    format!("service/{service}/{env}")
}

// --- the trait -----------------------------------------------------------------------------

impl Store for SqliteStore {
    fn service_create(&self, actor: &str, service: &NewService) -> Result<Service> {
        if service.name.is_empty() {
            return Err(StoreError::Invalid("a service needs a name".to_owned()));
        }
        check_list("environments", &service.environments, false)?;
        check_list("owners", &service.owners, true)?;
        self.write(|conn, now| {
            if load_service(conn, &service.name).is_ok() {
                return Err(StoreError::AlreadyExists {
                    kind: "service",
                    name: service.name.clone(),
                });
            }
            conn.execute(
                "INSERT INTO service_ids (name) VALUES (?1)",
                [&service.name],
            )
            .db()?;
            let id = conn.last_insert_rowid();
            conn.execute(
                "INSERT INTO services (id, name, owners, environments, created_at, created_by) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    id,
                    service.name,
                    to_json(&service.owners)?,
                    to_json(&service.environments)?,
                    now.unix_millis(),
                    actor
                ],
            )
            .db()?;
            audit(
                conn,
                now,
                actor,
                "service.create",
                &format!("service/{}", service.name),
                &json!({ "owners": service.owners, "environments": service.environments }),
            )?;
            load_service(conn, &service.name)
        })
    }

    fn service_get(&self, name: &str) -> Result<Service> {
        self.read(|conn| load_service(conn, name))
    }

    fn service_list(&self) -> Result<Vec<Service>> {
        self.read(|conn| {
            query_all(
                conn,
                &format!("SELECT {SERVICE_COLUMNS} FROM services ORDER BY name"),
                [],
                service_from_row,
            )
        })
    }

    fn service_update(&self, actor: &str, name: &str, update: &ServiceUpdate) -> Result<Service> {
        if let Some(environments) = &update.environments {
            check_list("environments", environments, false)?;
        }
        if let Some(owners) = &update.owners {
            check_list("owners", owners, true)?;
        }
        self.write(|conn, now| {
            let current = load_service(conn, name)?;
            if let Some(environments) = &update.environments {
                for removed in current
                    .environments
                    .iter()
                    .filter(|e| !environments.contains(e))
                {
                    let revisions: i64 = conn
                        .query_row(
                            "SELECT COUNT(*) FROM revisions WHERE service = ?1 AND env = ?2",
                            [name, removed],
                            |row| row.get(0),
                        )
                        .db()?;
                    if revisions > 0 {
                        return Err(StoreError::Conflict(format!(
                            "environment {removed:?} of {name} has {revisions} revisions and \
                             cannot be removed"
                        )));
                    }
                }
            }
            let owners = update.owners.as_ref().unwrap_or(&current.owners);
            let environments = update
                .environments
                .as_ref()
                .unwrap_or(&current.environments);
            let allow_processes = update.allow_processes.unwrap_or(current.allow_processes);
            conn.execute(
                "UPDATE services SET owners = ?2, environments = ?3, allow_processes = ?4 \
                 WHERE name = ?1",
                params![
                    name,
                    to_json(owners)?,
                    to_json(environments)?,
                    allow_processes
                ],
            )
            .db()?;
            audit(
                conn,
                now,
                actor,
                "service.update",
                &format!("service/{name}"),
                &json!({
                    "owners": { "from": current.owners, "to": owners },
                    "environments": { "from": current.environments, "to": environments },
                    "allow_processes": { "from": current.allow_processes, "to": allow_processes },
                }),
            )?;
            load_service(conn, name)
        })
    }

    fn service_decommission(&self, actor: &str, name: &str) -> Result<()> {
        self.write(|conn, now| {
            let service = load_service(conn, name)?;
            let revisions: i64 = conn
                .query_row(
                    "SELECT COUNT(*) FROM revisions WHERE service = ?1",
                    [name],
                    |row| row.get(0),
                )
                .db()?;
            conn.execute("DELETE FROM services WHERE name = ?1", [name])
                .db()?;
            // What the service had dies with it: a service onboarded again under this name is
            // another service, for another team, that must not get these.
            let secrets = conn
                .execute("DELETE FROM secrets WHERE service = ?1", [name])
                .db()?;
            let tokens = conn
                .execute(
                    "UPDATE tokens SET revoked_at = ?2 WHERE revoked_at IS NULL \
                     AND json_extract(scope, '$.type') = 'deploy' \
                     AND json_extract(scope, '$.service') = ?1",
                    params![name, now.unix_millis()],
                )
                .db()?;
            audit(
                conn,
                now,
                actor,
                "service.decommission",
                &format!("service/{name}"),
                &json!({
                    "id": service.id,
                    "revisions_removed": revisions,
                    "secret_versions_removed": secrets,
                    "deploy_tokens_revoked": tokens,
                }),
            )
        })
    }

    fn revision_get(&self, name: &str) -> Result<Revision> {
        self.read(|conn| load_revision(conn, name))
    }

    fn revision_list(&self, service: &str, env: &str) -> Result<Vec<Revision>> {
        self.read(|conn| {
            query_all(
                conn,
                &format!(
                    "SELECT {REVISION_COLUMNS} FROM revisions WHERE service = ?1 AND env = ?2 \
                     ORDER BY number"
                ),
                [service, env],
                revision_from_row,
            )
        })
    }

    fn record_deploy(
        &self,
        actor: &str,
        revision: &NewRevision,
        desired: &[PlannedRevision],
    ) -> Result<DeployRecord> {
        self.write(|conn, now| {
            let (service, env) = (revision.service.as_str(), revision.env.as_str());
            load_service_env(conn, service, env)?;
            refuse_in_flight(conn, service, env)?;
            let previous = load_desired(conn, service, env)?;
            let created = insert_revision(conn, now, actor, revision)?;
            let resolved = resolve_planned(desired, &created.name)?;
            validate_desired(conn, service, env, &resolved)?;
            let from_revision = heaviest(previous.as_ref());
            let deployment = insert_deployment(
                conn,
                now,
                actor,
                NewDeployment {
                    service,
                    env,
                    kind: DeploymentKind::Deploy,
                    from_revision: from_revision.clone(),
                    to_revision: &created.name,
                },
            )?;
            let desired = write_desired(conn, now, service, env, &resolved, None)?;
            audit(
                conn,
                now,
                actor,
                "deploy",
                &env_target(service, env),
                &json!({
                    "deployment": deployment.id,
                    "revision": created.name,
                    "from_revision": from_revision,
                    "artifact": created.artifact,
                    "generation": desired.generation,
                }),
            )?;
            Ok(DeployRecord {
                revision: created,
                deployment,
                desired,
            })
        })
    }

    fn record_rollback(
        &self,
        actor: &str,
        service: &str,
        env: &str,
        to_revision: &str,
        desired: &[DesiredRevision],
    ) -> Result<DeployRecord> {
        self.write(|conn, now| {
            load_service_env(conn, service, env)?;
            let target = load_revision(conn, to_revision)?;
            if target.service != service || target.env != env {
                return Err(StoreError::Invalid(format!(
                    "revision {to_revision:?} belongs to {}/{}, not {service}/{env}",
                    target.service, target.env
                )));
            }
            if !desired.iter().any(|d| d.revision == to_revision) {
                return Err(StoreError::Invalid(format!(
                    "the desired state of a rollback must include {to_revision:?}"
                )));
            }
            validate_desired(conn, service, env, desired)?;
            let previous = load_desired(conn, service, env)?;
            let from_revision = heaviest(previous.as_ref());
            let deployment = insert_deployment(
                conn,
                now,
                actor,
                NewDeployment {
                    service,
                    env,
                    kind: DeploymentKind::Rollback,
                    from_revision: from_revision.clone(),
                    to_revision,
                },
            )?;
            let mut superseded = Vec::new();
            for busy in in_flight(conn, service, env)? {
                if busy.id == deployment.id {
                    continue;
                }
                let reason = format!("superseded by rollback {}", deployment.id);
                transition(conn, now, &busy, DeploymentState::Failed, Some(&reason))?;
                superseded.push(busy.id);
            }
            let desired = write_desired(conn, now, service, env, desired, None)?;
            audit(
                conn,
                now,
                actor,
                "rollback",
                &env_target(service, env),
                &json!({
                    "deployment": deployment.id,
                    "revision": to_revision,
                    "from_revision": from_revision,
                    "superseded": superseded,
                    "generation": desired.generation,
                }),
            )?;
            Ok(DeployRecord {
                revision: target,
                deployment,
                desired,
            })
        })
    }

    fn record_promote(
        &self,
        actor: &str,
        from_revision: &str,
        to_env: &str,
        desired: &[PlannedRevision],
    ) -> Result<DeployRecord> {
        self.write(|conn, now| {
            let source = load_revision(conn, from_revision)?;
            if source.env == to_env {
                return Err(StoreError::Invalid(format!(
                    "revision {from_revision:?} is already in {to_env}"
                )));
            }
            let service = source.service.as_str();
            load_service_env(conn, service, to_env)?;
            refuse_in_flight(conn, service, to_env)?;
            let secret_versions = pin_secrets_in(conn, &source, to_env)?;
            let previous = load_desired(conn, service, to_env)?;
            let created = insert_revision(
                conn,
                now,
                actor,
                &NewRevision {
                    service: source.service.clone(),
                    env: to_env.to_owned(),
                    manifest: source.manifest.clone(),
                    artifact: source.artifact.clone(),
                    env_vars: source.env_vars.clone(),
                    secret_versions,
                },
            )?;
            let resolved = resolve_planned(desired, &created.name)?;
            validate_desired(conn, service, to_env, &resolved)?;
            let replaced = heaviest(previous.as_ref());
            let deployment = insert_deployment(
                conn,
                now,
                actor,
                NewDeployment {
                    service,
                    env: to_env,
                    kind: DeploymentKind::Promote,
                    from_revision: replaced.clone(),
                    to_revision: &created.name,
                },
            )?;
            insert_event(
                conn,
                now,
                deployment.id,
                &format!("promoted from {from_revision}"),
            )?;
            let desired = write_desired(conn, now, service, to_env, &resolved, None)?;
            audit(
                conn,
                now,
                actor,
                "promote",
                &env_target(service, to_env),
                &json!({
                    "deployment": deployment.id,
                    "revision": created.name,
                    "source_revision": from_revision,
                    "from_revision": replaced,
                    "secret_versions": created.secret_versions,
                    "generation": desired.generation,
                }),
            )?;
            Ok(DeployRecord {
                revision: created,
                deployment,
                desired,
            })
        })
    }

    fn deployment_get(&self, id: i64) -> Result<Deployment> {
        self.read(|conn| load_deployment(conn, id))
    }

    fn deployment_list(
        &self,
        service: &str,
        env: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Deployment>> {
        self.read(|conn| {
            query_all(
                conn,
                &format!(
                    "SELECT {DEPLOYMENT_COLUMNS} FROM deployments \
                     WHERE service = ?1 AND (?2 IS NULL OR env = ?2) ORDER BY id DESC LIMIT ?3"
                ),
                params![service, env, limit_param(limit)],
                deployment_from_row,
            )
        })
    }

    fn deployment_transition(
        &self,
        actor: &str,
        id: i64,
        to: DeploymentState,
        reason: Option<&str>,
    ) -> Result<Deployment> {
        self.write(|conn, now| {
            let deployment = load_deployment(conn, id)?;
            let dropped = transition(conn, now, &deployment, to, reason)?;
            audit(
                conn,
                now,
                actor,
                "deployment.transition",
                &env_target(&deployment.service, &deployment.env),
                &json!({
                    "deployment": id,
                    "from": deployment.state,
                    "to": to,
                    "reason": reason,
                    "dropped_command": dropped,
                }),
            )?;
            load_deployment(conn, id)
        })
    }

    fn deployment_add_event(&self, actor: &str, id: i64, message: &str) -> Result<DeploymentEvent> {
        self.write(|conn, now| {
            let deployment = load_deployment(conn, id)?;
            let event = insert_event(conn, now, id, message)?;
            audit(
                conn,
                now,
                actor,
                "deployment.event",
                &env_target(&deployment.service, &deployment.env),
                &json!({ "deployment": id, "message": message }),
            )?;
            Ok(event)
        })
    }

    fn deployment_events(&self, id: i64) -> Result<Vec<DeploymentEvent>> {
        self.read(|conn| {
            load_deployment(conn, id)?;
            query_all(
                conn,
                "SELECT deployment_id, at, message FROM deployment_events \
                 WHERE deployment_id = ?1 ORDER BY id",
                [id],
                event_from_row,
            )
        })
    }

    fn deployment_command(
        &self,
        actor: &str,
        service: &str,
        env: &str,
        command: RolloutCommand,
    ) -> Result<Deployment> {
        self.write(|conn, now| {
            load_service_env(conn, service, env)?;
            // At most one is in flight (deploys and promotions refuse a second, a rollback
            // supersedes the others); the newest is the one a command is for.
            let Some(deployment) = in_flight(conn, service, env)?.pop() else {
                return Err(StoreError::Conflict(format!(
                    "no deployment of {service}/{env} is pending or progressing; there is \
                     nothing to {command}"
                )));
            };
            let id = deployment.id;
            // An abort not yet carried out stands: nothing but another abort replaces it.
            if deployment.command == Some(RolloutCommand::Abort) && command != RolloutCommand::Abort
            {
                return Err(StoreError::Conflict(format!(
                    "deployment {id} of {service}/{env} has an abort pending; it cannot be \
                     replaced by {command}"
                )));
            }
            conn.execute(
                "UPDATE deployments SET command = ?2 WHERE id = ?1",
                params![id, command.as_str()],
            )
            .db()?;
            let message = match deployment.command {
                Some(replaced) if replaced != command => {
                    format!("{command} asked by {actor}, in place of {replaced}")
                }
                _ => format!("{command} asked by {actor}"),
            };
            insert_event(conn, now, id, &message)?;
            audit(
                conn,
                now,
                actor,
                "deployment.command",
                &env_target(service, env),
                &json!({
                    "deployment": id,
                    "command": command,
                    "replaced": deployment.command,
                }),
            )?;
            load_deployment(conn, id)
        })
    }

    fn deployment_save_rollout(
        &self,
        actor: &str,
        id: i64,
        rollout: &str,
        consumed: Option<RolloutCommand>,
    ) -> Result<Deployment> {
        self.write(|conn, now| {
            let deployment = load_deployment(conn, id)?;
            if deployment.state.is_terminal() {
                return Err(StoreError::Conflict(format!(
                    "deployment {id} of {}/{} is {}; its rollout cannot change any more",
                    deployment.service, deployment.env, deployment.state
                )));
            }
            // Compare and clear: a command that replaced the consumed one stays.
            let cleared = consumed.filter(|c| deployment.command == Some(*c));
            conn.execute(
                "UPDATE deployments SET rollout = ?2, \
                 command = CASE WHEN ?3 THEN NULL ELSE command END WHERE id = ?1",
                params![id, rollout, cleared.is_some()],
            )
            .db()?;
            audit(
                conn,
                now,
                actor,
                "deployment.rollout",
                &env_target(&deployment.service, &deployment.env),
                &json!({ "deployment": id, "consumed": cleared }),
            )?;
            load_deployment(conn, id)
        })
    }

    fn desired_get(&self, service: &str, env: &str) -> Result<Option<Desired>> {
        self.read(|conn| load_desired(conn, service, env))
    }

    fn desired_list(&self) -> Result<Vec<Desired>> {
        self.read(|conn| {
            let keys = query_all(
                conn,
                "SELECT service, env FROM desired ORDER BY service, env",
                [],
                |row| Ok((get::<String>(row, 0)?, get::<String>(row, 1)?)),
            )?;
            let mut out = Vec::with_capacity(keys.len());
            for (service, env) in keys {
                if let Some(desired) = load_desired(conn, &service, &env)? {
                    out.push(desired);
                }
            }
            Ok(out)
        })
    }

    fn desired_set(
        &self,
        actor: &str,
        service: &str,
        env: &str,
        revisions: &[DesiredRevision],
        expected_generation: Option<u64>,
    ) -> Result<Desired> {
        self.write(|conn, now| {
            load_service_env(conn, service, env)?;
            validate_desired(conn, service, env, revisions)?;
            let desired = write_desired(conn, now, service, env, revisions, expected_generation)?;
            audit(
                conn,
                now,
                actor,
                "desired.set",
                &env_target(service, env),
                &json!({ "revisions": desired.revisions, "generation": desired.generation }),
            )?;
            Ok(desired)
        })
    }

    fn desired_set_instances(
        &self,
        actor: &str,
        service: &str,
        env: &str,
        revision: &str,
        instances: u32,
        expected_generation: Option<u64>,
    ) -> Result<Desired> {
        self.write(|conn, now| {
            let mut current = load_desired(conn, service, env)?
                .ok_or_else(|| not_found("desired state", format!("{service}/{env}")))?;
            let entry = current
                .revisions
                .iter_mut()
                .find(|d| d.revision == revision)
                .ok_or_else(|| not_found("revision in the desired state", revision))?;
            let before = entry.instances;
            entry.instances = instances;
            let desired = write_desired(
                conn,
                now,
                service,
                env,
                &current.revisions,
                expected_generation,
            )?;
            audit(
                conn,
                now,
                actor,
                "desired.instances",
                &env_target(service, env),
                &json!({
                    "revision": revision,
                    "from": before,
                    "to": instances,
                    "generation": desired.generation,
                }),
            )?;
            Ok(desired)
        })
    }

    fn secret_set(
        &self,
        actor: &str,
        service: &str,
        env: &str,
        name: &str,
        expected_version: u32,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<SecretInfo> {
        check_secret_name(name)?;
        self.write(|conn, now| {
            load_service_env(conn, service, env)?;
            let version = next_secret_version(conn, service, env, name)?;
            if version != expected_version {
                return Err(StoreError::Conflict(format!(
                    "secret {service}/{env}/{name}: the next version is {version}, not \
                     {expected_version}"
                )));
            }
            conn.execute(
                "INSERT INTO secrets (service, env, name, version, nonce, ciphertext, \
                 created_by, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    service,
                    env,
                    name,
                    version,
                    nonce,
                    ciphertext,
                    actor,
                    now.unix_millis()
                ],
            )
            .db()?;
            audit(
                conn,
                now,
                actor,
                "secret.set",
                &format!("secret/{service}/{env}/{name}"),
                &json!({ "version": version }),
            )?;
            Ok(SecretInfo {
                service: service.to_owned(),
                env: env.to_owned(),
                name: name.to_owned(),
                version,
                created_by: actor.to_owned(),
                created_at: now,
            })
        })
    }

    fn secret_next_version(&self, service: &str, env: &str, name: &str) -> Result<u32> {
        check_secret_name(name)?;
        self.read(|conn| {
            load_service_env(conn, service, env)?;
            next_secret_version(conn, service, env, name)
        })
    }

    fn secret_unset(&self, actor: &str, service: &str, env: &str, name: &str) -> Result<()> {
        self.write(|conn, now| {
            load_service_env(conn, service, env)?;
            let changed = conn
                .execute(
                    "UPDATE secrets SET deleted_at = ?4 \
                     WHERE service = ?1 AND env = ?2 AND name = ?3 AND deleted_at IS NULL",
                    params![service, env, name, now.unix_millis()],
                )
                .db()?;
            if changed == 0 {
                return Err(not_found("secret", format!("{service}/{env}/{name}")));
            }
            audit(
                conn,
                now,
                actor,
                "secret.unset",
                &format!("secret/{service}/{env}/{name}"),
                &json!({}),
            )
        })
    }

    fn secret_list(&self, service: &str, env: &str) -> Result<Vec<SecretInfo>> {
        self.read(|conn| {
            load_service_env(conn, service, env)?;
            // Deliberately no nonce or ciphertext column here.
            query_all(
                conn,
                "SELECT s.name, s.version, s.created_by, s.created_at FROM secrets s \
                 WHERE s.service = ?1 AND s.env = ?2 AND s.deleted_at IS NULL \
                 AND s.version = (SELECT MAX(t.version) FROM secrets t \
                     WHERE t.service = s.service AND t.env = s.env AND t.name = s.name) \
                 ORDER BY s.name",
                [service, env],
                |row| {
                    Ok(SecretInfo {
                        service: service.to_owned(),
                        env: env.to_owned(),
                        name: get(row, 0)?,
                        version: get_u32(row, 1, "secret version")?,
                        created_by: get(row, 2)?,
                        created_at: get_ts(row, 3)?,
                    })
                },
            )
        })
    }

    fn secret_read(
        &self,
        service: &str,
        env: &str,
        name: &str,
        version: u32,
    ) -> Result<SecretVersion> {
        self.read(|conn| {
            query_one(
                conn,
                "SELECT nonce, ciphertext, created_by, created_at FROM secrets \
                 WHERE service = ?1 AND env = ?2 AND name = ?3 AND version = ?4",
                params![service, env, name, version],
                |row| {
                    Ok(SecretVersion {
                        service: service.to_owned(),
                        env: env.to_owned(),
                        name: name.to_owned(),
                        version,
                        nonce: get(row, 0)?,
                        ciphertext: get(row, 1)?,
                        created_by: get(row, 2)?,
                        created_at: get_ts(row, 3)?,
                    })
                },
            )?
            .ok_or_else(|| {
                not_found(
                    "secret version",
                    format!("{service}/{env}/{name}@{version}"),
                )
            })
        })
    }

    fn token_create(&self, actor: &str, token: &NewToken) -> Result<Token> {
        if token.name.is_empty() {
            return Err(StoreError::Invalid("a token needs a name".to_owned()));
        }
        if token.hash.is_empty() {
            return Err(StoreError::Invalid("a token needs a hash".to_owned()));
        }
        if let TokenScope::Deploy {
            service,
            environments,
        } = &token.scope
        {
            check_list("token environments", environments, false)?;
            if service.is_empty() {
                return Err(StoreError::Invalid(
                    "a deploy token needs a service".to_owned(),
                ));
            }
        }
        self.write(|conn, now| {
            let taken: Option<i64> = conn
                .query_row("SELECT id FROM tokens WHERE hash = ?1", [&token.hash], |row| {
                    row.get(0)
                })
                .optional()
                .db()?;
            if taken.is_some() {
                return Err(StoreError::Conflict(
                    "another token has the same hash".to_owned(),
                ));
            }
            conn.execute(
                "INSERT INTO tokens (name, hash, scope, expires_at, revoked_at, created_at, \
                 created_by) VALUES (?1, ?2, ?3, ?4, NULL, ?5, ?6)",
                params![
                    token.name,
                    token.hash,
                    to_json(&token.scope)?,
                    token.expires_at.map(Timestamp::unix_millis),
                    now.unix_millis(),
                    actor
                ],
            )
            .db()?;
            let id = conn.last_insert_rowid();
            audit(
                conn,
                now,
                actor,
                "token.create",
                &format!("token/{id}"),
                &json!({ "name": token.name, "scope": token.scope, "expires_at": token.expires_at }),
            )?;
            load_token(conn, id)
        })
    }

    fn token_by_hash(&self, hash: &[u8]) -> Result<Option<Token>> {
        self.read(|conn| {
            query_one(
                conn,
                &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE hash = ?1"),
                [hash],
                token_from_row,
            )
        })
    }

    fn token_list(&self) -> Result<Vec<Token>> {
        self.read(|conn| {
            query_all(
                conn,
                &format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY id"),
                [],
                token_from_row,
            )
        })
    }

    fn token_revoke(&self, actor: &str, id: i64) -> Result<Token> {
        self.write(|conn, now| {
            load_token(conn, id)?;
            conn.execute(
                "UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?2) WHERE id = ?1",
                params![id, now.unix_millis()],
            )
            .db()?;
            audit(
                conn,
                now,
                actor,
                "token.revoke",
                &format!("token/{id}"),
                &json!({}),
            )?;
            load_token(conn, id)
        })
    }

    fn audit_list(&self, after_id: i64, limit: u32) -> Result<Vec<AuditEntry>> {
        self.read(|conn| {
            query_all(
                conn,
                "SELECT id, at, actor, action, target, detail FROM audit WHERE id > ?1 \
                 ORDER BY id LIMIT ?2",
                params![after_id, limit_param(limit)],
                audit_from_row,
            )
        })
    }

    fn audit_tail(&self, limit: u32) -> Result<Vec<AuditEntry>> {
        self.read(|conn| {
            query_all(
                conn,
                "SELECT id, at, actor, action, target, detail FROM (SELECT * FROM audit \
                 ORDER BY id DESC LIMIT ?1) ORDER BY id",
                params![limit_param(limit)],
                audit_from_row,
            )
        })
    }
}

fn load_token(conn: &Connection, id: i64) -> Result<Token> {
    query_one(
        conn,
        &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = ?1"),
        [id],
        token_from_row,
    )?
    .ok_or_else(|| not_found("token", id.to_string()))
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

    #[test]
    fn secret_names() {
        for good in ["A", "DATABASE_URL", "_X", "K8S_TOKEN2"] {
            assert!(is_secret_name(good), "{good}");
        }
        for bad in ["", "a", "2FA", "DB-URL", "DB URL", "É"] {
            assert!(!is_secret_name(bad), "{bad}");
        }
    }

    #[test]
    fn heaviest_takes_the_first_of_equals() {
        let desired = |weights: &[(&str, u32)]| Desired {
            service: "s".into(),
            env: "e".into(),
            revisions: weights
                .iter()
                .map(|(r, w)| DesiredRevision {
                    revision: (*r).into(),
                    instances: 1,
                    weight: *w,
                })
                .collect(),
            generation: 1,
        };
        assert_eq!(heaviest(None), None);
        assert_eq!(heaviest(Some(&desired(&[]))), None);
        assert_eq!(
            heaviest(Some(&desired(&[("a", 10), ("b", 90)]))).as_deref(),
            Some("b")
        );
        assert_eq!(
            heaviest(Some(&desired(&[("a", 50), ("b", 50)]))).as_deref(),
            Some("a")
        );
    }

    #[test]
    fn resolve_planned_needs_the_new_revision_once() {
        let plan = |refs: Vec<RevisionRef>| -> Vec<PlannedRevision> {
            refs.into_iter()
                .map(|revision| PlannedRevision {
                    revision,
                    instances: 1,
                    weight: 1,
                })
                .collect()
        };
        assert!(matches!(
            resolve_planned(&plan(vec![]), "n"),
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            resolve_planned(&plan(vec![RevisionRef::New, RevisionRef::New]), "n"),
            Err(StoreError::Invalid(_))
        ));
        let resolved = resolve_planned(
            &plan(vec![RevisionRef::Named("old".into()), RevisionRef::New]),
            "n",
        )
        .expect("valid");
        assert_eq!(resolved[0].revision, "old");
        assert_eq!(resolved[1].revision, "n");
    }
}
