//! The store's logic, written once over [`Db`]: every query, rule and audit entry of
//! [`Store`], whichever database runs them. A backend gives it transactions ([`Backend`]);
//! [`crate::SqliteStore`] is one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::error::{Result, StoreError, not_found};
use crate::sql::{Db, DbExt, Dialect, Param, Row, args};
use crate::{
    AuditBy, AuditEntry, AuditFilter, AuditHead, AuditSinkCursor, AuditVerification, DeployRecord,
    Deployment, DeploymentEvent, DeploymentKind, DeploymentState, Desired, DesiredRevision, Domain,
    DomainCertificate, DomainState, FenceCell, IdentityKey, InventoryChanges, InventoryRecord,
    IssuedCertificate, Lease, Maintenance, NewPreview, NewRevision, NewService, NewToken,
    PlannedRevision, Preview, Revision, RevisionRef, RolloutCommand, SecretInfo, SecretVersion,
    Service, ServiceUpdate, Store, Team, TeamMember, Timestamp, Token, TokenScope, revision_name,
};

/// What a database gives the store's logic: transactions. A write transaction excludes every
/// other writer for its length (SQLite's `BEGIN IMMEDIATE`), so a number read with
/// `MAX(number) + 1` cannot be taken by another writer before the insert; a read sees one
/// snapshot.
pub(crate) trait Backend: Send + Sync + std::fmt::Debug + 'static {
    /// Runs `f` in a write transaction, committed when `f` succeeds, rolled back otherwise.
    /// (`Send`: a backend may run it on a thread of its own.)
    fn write<T: Send>(&self, f: impl FnOnce(&dyn Db, Timestamp) -> Result<T> + Send) -> Result<T>;

    /// Runs `f` in a read transaction, so it sees one snapshot.
    fn read<T: Send>(&self, f: impl FnOnce(&dyn Db) -> Result<T> + Send) -> Result<T>;

    /// This store behind `fence` (see [`Store::fenced`]).
    fn into_fenced(self: Arc<Self>, fence: FenceCell) -> Arc<dyn Store>
    where
        Self: Sized,
    {
        Arc::new(Fenced { inner: self, fence })
    }
}

// --- row helpers ---------------------------------------------------------------------------

fn get_json<T: DeserializeOwned>(row: &Row, index: usize, what: &str) -> Result<T> {
    let text: String = row.get(index)?;
    serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

fn get_ts(row: &Row, index: usize) -> Result<Timestamp> {
    let millis: i64 = row.get(index)?;
    ts(millis)
}

fn get_opt_ts(row: &Row, index: usize) -> Result<Option<Timestamp>> {
    let millis: Option<i64> = row.get(index)?;
    millis.map(ts).transpose()
}

fn ts(millis: i64) -> Result<Timestamp> {
    Timestamp::from_unix_millis(millis)
        .ok_or_else(|| StoreError::Corrupt(format!("timestamp {millis} is out of range")))
}

fn get_u32(row: &Row, index: usize, what: &str) -> Result<u32> {
    let value: i64 = row.get(index)?;
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
    "id, name, owners, environments, created_at, created_by, allow_processes, inventory, team";

fn service_from_row(row: &Row) -> Result<Service> {
    Ok(Service {
        id: row.get(0)?,
        name: row.get(1)?,
        owners: get_json(row, 2, "service owners")?,
        environments: get_json(row, 3, "service environments")?,
        created_at: get_ts(row, 4)?,
        created_by: row.get(5)?,
        allow_processes: row.get(6)?,
        inventory: row
            .get::<Option<String>>(7)?
            .map(|text| {
                serde_json::from_str(&text)
                    .map_err(|e| StoreError::Corrupt(format!("service inventory: {e}")))
            })
            .transpose()?,
        team: row.get(8)?,
    })
}

const TEAM_COLUMNS: &str = "name, members, created_at, created_by, updated_at";

fn team_from_row(row: &Row) -> Result<Team> {
    Ok(Team {
        name: row.get(0)?,
        members: get_json(row, 1, "team members")?,
        created_at: get_ts(row, 2)?,
        created_by: row.get(3)?,
        updated_at: get_ts(row, 4)?,
    })
}

fn load_team(db: &dyn Db, name: &str) -> Result<Team> {
    db.query_one(
        &format!("SELECT {TEAM_COLUMNS} FROM teams WHERE name = ?1"),
        args![name],
        team_from_row,
    )?
    .ok_or_else(|| not_found("team", name))
}

/// A team's members: each subject `user:<name>` or `group:<path>`, once.
fn check_members(members: &[TeamMember]) -> Result<()> {
    let mut seen = BTreeSet::new();
    for member in members {
        let valid = ["user:", "group:"].iter().any(|kind| {
            member
                .subject
                .strip_prefix(kind)
                .is_some_and(|rest| !rest.is_empty() && !rest.chars().any(char::is_control))
        });
        if !valid {
            return Err(StoreError::Invalid(format!(
                "team member {:?}: a member is `user:<name>` or `group:<path>`",
                member.subject
            )));
        }
        if !seen.insert(member.subject.as_str()) {
            return Err(StoreError::Invalid(format!(
                "team member {:?} appears twice",
                member.subject
            )));
        }
        if let Some(environments) = &member.environments {
            check_list(
                &format!("environments of team member {:?}", member.subject),
                environments,
                true,
            )?;
        }
    }
    Ok(())
}

const PREVIEW_COLUMNS: &str = "service, parent, name, base_env, origin, expires_at, created_at, \
                               created_by, updated_at";

fn preview_from_row(row: &Row) -> Result<Preview> {
    Ok(Preview {
        service: row.get(0)?,
        parent: row.get(1)?,
        name: row.get(2)?,
        base_env: row.get(3)?,
        origin: get_json(row, 4, "preview origin")?,
        expires_at: get_ts(row, 5)?,
        created_at: get_ts(row, 6)?,
        created_by: row.get(7)?,
        updated_at: get_ts(row, 8)?,
    })
}

fn load_preview(db: &dyn Db, service: &str) -> Result<Option<Preview>> {
    db.query_one(
        &format!("SELECT {PREVIEW_COLUMNS} FROM previews WHERE service = ?1"),
        args![service],
        preview_from_row,
    )
}

const REVISION_COLUMNS: &str = "id, service, env, number, name, manifest, artifact, env_vars, \
                                secret_versions, created_by, created_at, set_vars";

fn revision_from_row(row: &Row) -> Result<Revision> {
    Ok(Revision {
        id: row.get(0)?,
        service: row.get(1)?,
        env: row.get(2)?,
        number: get_u32(row, 3, "revision number")?,
        name: row.get(4)?,
        manifest: get_json(row, 5, "revision manifest")?,
        artifact: get_json(row, 6, "revision artifact")?,
        env_vars: get_json(row, 7, "revision env_vars")?,
        secret_versions: get_json(row, 8, "revision secret_versions")?,
        created_by: row.get(9)?,
        created_at: get_ts(row, 10)?,
        set_vars: get_json(row, 11, "revision set_vars")?,
    })
}

const DEPLOYMENT_COLUMNS: &str = "id, service, env, kind, from_revision, to_revision, state, \
                                  reason, created_by, created_at, updated_at, rollout, command";

fn deployment_from_row(row: &Row) -> Result<Deployment> {
    let kind: String = row.get(3)?;
    let state: String = row.get(6)?;
    let command: Option<String> = row.get(12)?;
    Ok(Deployment {
        id: row.get(0)?,
        service: row.get(1)?,
        env: row.get(2)?,
        kind: DeploymentKind::parse(&kind)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown deployment kind {kind:?}")))?,
        from_revision: row.get(4)?,
        to_revision: row.get(5)?,
        state: DeploymentState::parse(&state)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown deployment state {state:?}")))?,
        reason: row.get(7)?,
        created_by: row.get(8)?,
        created_at: get_ts(row, 9)?,
        updated_at: get_ts(row, 10)?,
        rollout: row.get(11)?,
        command: command
            .map(|text| {
                RolloutCommand::parse(&text)
                    .ok_or_else(|| StoreError::Corrupt(format!("unknown rollout command {text:?}")))
            })
            .transpose()?,
    })
}

fn event_from_row(row: &Row) -> Result<DeploymentEvent> {
    Ok(DeploymentEvent {
        deployment_id: row.get(0)?,
        at: get_ts(row, 1)?,
        message: row.get(2)?,
    })
}

const TOKEN_COLUMNS: &str =
    "id, name, hash, scope, expires_at, revoked_at, created_at, created_by, parent_id";

fn token_from_row(row: &Row) -> Result<Token> {
    Ok(Token {
        id: row.get(0)?,
        name: row.get(1)?,
        hash: row.get(2)?,
        scope: get_json(row, 3, "token scope")?,
        expires_at: get_opt_ts(row, 4)?,
        revoked_at: get_opt_ts(row, 5)?,
        created_at: get_ts(row, 6)?,
        created_by: row.get(7)?,
        parent: row.get(8)?,
    })
}

const DOMAIN_COLUMNS: &str = "name, service, env, state, detail, attempts, next_attempt_at, \
     cert_pem, not_after, generation, created_at, created_by, updated_at";

fn domain_from_row(row: &Row) -> Result<Domain> {
    let state: String = row.get(3)?;
    Ok(Domain {
        name: row.get(0)?,
        service: row.get(1)?,
        env: row.get(2)?,
        state: DomainState::parse(&state)
            .ok_or_else(|| StoreError::Corrupt(format!("domain state {state:?}")))?,
        detail: row.get(4)?,
        attempts: get_u32(row, 5, "domain attempts")?,
        next_attempt_at: get_opt_ts(row, 6)?,
        cert_pem: row.get(7)?,
        not_after: get_opt_ts(row, 8)?,
        generation: get_u32(row, 9, "domain generation")?,
        created_at: get_ts(row, 10)?,
        created_by: row.get(11)?,
        updated_at: get_ts(row, 12)?,
    })
}

fn load_domain(db: &dyn Db, name: &str) -> Result<Domain> {
    db.query_one(
        &format!("SELECT {DOMAIN_COLUMNS} FROM domains WHERE name = ?1"),
        args![name],
        domain_from_row,
    )?
    .ok_or_else(|| not_found("domain", name))
}

const MAINTENANCE_COLUMNS: &str =
    "service, env, message, allow, retry_after_seconds, since, set_by";

fn maintenance_from_row(row: &Row) -> Result<Maintenance> {
    Ok(Maintenance {
        service: row.get(0)?,
        env: row.get(1)?,
        message: row.get(2)?,
        allow: get_json(row, 3, "maintenance allow")?,
        retry_after_seconds: get_u32(row, 4, "maintenance retry_after_seconds")?,
        since: get_ts(row, 5)?,
        set_by: row.get(6)?,
    })
}

const AUDIT_COLUMNS: &str = "id, at, actor, action, target, detail, prev_hash, hash";

fn audit_from_row(row: &Row) -> Result<AuditEntry> {
    Ok(AuditEntry {
        id: row.get(0)?,
        at: get_ts(row, 1)?,
        actor: row.get(2)?,
        action: row.get(3)?,
        target: row.get(4)?,
        detail: get_json(row, 5, "audit detail")?,
        prev_hash: row.get(6)?,
        hash: row.get(7)?,
    })
}

// --- shared steps, inside a transaction ----------------------------------------------------

fn audit(
    db: &dyn Db,
    now: Timestamp,
    actor: &str,
    action: &str,
    target: &str,
    detail: &serde_json::Value,
) -> Result<()> {
    db.execute(
        "INSERT INTO audit (at, actor, action, target, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        args![now.unix_millis(), actor, action, target, &to_json(detail)?],
    )?;
    chain_pending(db)
}

/// The audit log's head: its last chained entry.
fn load_head(db: &dyn Db, for_update: bool) -> Result<AuditHead> {
    // On PostgreSQL the head's row stays locked to the commit: one transaction chains at a
    // time, whichever replica it runs in (every write holds the advisory lock as well).
    // SQLite's writer is alone already.
    let lock = if for_update && db.dialect() == Dialect::Postgres {
        " FOR UPDATE"
    } else {
        ""
    };
    db.query_one(
        &format!("SELECT id, hash FROM audit_head WHERE one = 1{lock}"),
        args![],
        |row| {
            Ok(AuditHead {
                id: row.get(0)?,
                hash: row.get(1)?,
            })
        },
    )?
    .ok_or_else(|| StoreError::Corrupt("the audit log has no head row".to_owned()))
}

/// Chains, in id order, every audit entry after the head that has no hash yet: the one this
/// transaction just wrote, and any an older Runway wrote (or that were there before the
/// chain). Opening a store runs it too: startup and every write take the same path.
pub(crate) fn chain_pending(db: &dyn Db) -> Result<()> {
    let mut head = load_head(db, true)?;
    let pending = db.query_all(
        &format!("SELECT {AUDIT_COLUMNS} FROM audit WHERE id > ?1 AND hash IS NULL ORDER BY id"),
        args![head.id],
        audit_from_row,
    )?;
    if pending.is_empty() {
        return Ok(());
    }
    for entry in &pending {
        let hash = crate::audit::audit_hash(&head.hash, entry);
        db.execute(
            "UPDATE audit SET prev_hash = ?2, hash = ?3 WHERE id = ?1",
            args![entry.id, &head.hash, &hash],
        )?;
        head = AuditHead { id: entry.id, hash };
    }
    db.execute(
        "UPDATE audit_head SET id = ?1, hash = ?2 WHERE one = 1",
        args![head.id, &head.hash],
    )?;
    Ok(())
}

/// How many audit entries a page of [`Store::audit_verify`] reads.
const VERIFY_PAGE: i64 = 1_000;

const SINK_COLUMNS: &str = "sink, acked_id, acked_at, error, failing_since, \
     (SELECT COUNT(*) FROM audit WHERE audit.id > audit_export.acked_id AND audit.hash IS NOT NULL)";

fn sink_from_row(row: &Row) -> Result<AuditSinkCursor> {
    let lag: i64 = row.get(5)?;
    Ok(AuditSinkCursor {
        sink: row.get(0)?,
        cursor: row.get(1)?,
        acked_at: get_opt_ts(row, 2)?,
        error: row.get(3)?,
        failing_since: get_opt_ts(row, 4)?,
        lag: u64::try_from(lag).unwrap_or(0),
    })
}

fn load_service(db: &dyn Db, name: &str) -> Result<Service> {
    db.query_one(
        &format!("SELECT {SERVICE_COLUMNS} FROM services WHERE name = ?1"),
        args![name],
        service_from_row,
    )?
    .ok_or_else(|| not_found("service", name))
}

/// `service`'s maintenance in `env`, if it is in maintenance there.
fn load_maintenance(db: &dyn Db, service: &str, env: &str) -> Result<Option<Maintenance>> {
    db.query_one(
        &format!("SELECT {MAINTENANCE_COLUMNS} FROM maintenance WHERE service = ?1 AND env = ?2"),
        args![service, env],
        maintenance_from_row,
    )
}

/// The service, checked to have `env`.
fn load_service_env(db: &dyn Db, service: &str, env: &str) -> Result<Service> {
    let found = load_service(db, service)?;
    if !found.environments.iter().any(|e| e == env) {
        return Err(not_found("environment", format!("{service}/{env}")));
    }
    Ok(found)
}

/// What a new service must be, whatever creates it.
fn check_new_service(service: &NewService) -> Result<()> {
    if service.name.is_empty() {
        return Err(StoreError::Invalid("a service needs a name".to_owned()));
    }
    check_list("environments", &service.environments, false)?;
    check_list("owners", &service.owners, true)
}

/// What a change of a service must be, whatever makes it.
fn check_update(update: &ServiceUpdate) -> Result<()> {
    if let Some(environments) = &update.environments {
        check_list("environments", environments, false)?;
    }
    if let Some(owners) = &update.owners {
        check_list("owners", owners, true)?;
    }
    Ok(())
}

/// Onboards `service` (checked by [`check_new_service`]), audited: its new identity.
fn create_service(db: &dyn Db, now: Timestamp, actor: &str, service: &NewService) -> Result<i64> {
    if load_service(db, &service.name).is_ok() {
        return Err(StoreError::AlreadyExists {
            kind: "service",
            name: service.name.clone(),
        });
    }
    if let Some(team) = &service.team {
        load_team(db, team)?;
    }
    let id = db.insert_returning_id(
        "INSERT INTO service_ids (name) VALUES (?1) RETURNING id",
        args![&service.name],
    )?;
    db.execute(
        "INSERT INTO services (id, name, owners, environments, created_at, created_by, team) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        args![
            id,
            &service.name,
            &to_json(&service.owners)?,
            &to_json(&service.environments)?,
            now.unix_millis(),
            actor,
            &service.team
        ],
    )?;
    audit(
        db,
        now,
        actor,
        "service.create",
        &format!("service/{}", service.name),
        &json!({ "owners": service.owners, "environments": service.environments, "team": service.team }),
    )?;
    Ok(id)
}

/// Changes service `name` as `update` says (checked by [`check_update`]), audited; an
/// environment with revisions or domains is not removed.
fn update_service(
    db: &dyn Db,
    now: Timestamp,
    actor: &str,
    name: &str,
    update: &ServiceUpdate,
) -> Result<()> {
    let current = load_service(db, name)?;
    if let Some(environments) = &update.environments {
        for removed in current
            .environments
            .iter()
            .filter(|e| !environments.contains(e))
        {
            let revisions: i64 = db.query_value(
                "SELECT COUNT(*) FROM revisions WHERE service = ?1 AND env = ?2",
                args![name, removed],
            )?;
            if revisions > 0 {
                return Err(StoreError::Conflict(format!(
                    "environment {removed:?} of {name} has {revisions} revisions and cannot be \
                     removed"
                )));
            }
            let domains: Vec<String> = db.query_all(
                "SELECT name FROM domains WHERE service = ?1 AND env = ?2 ORDER BY name",
                args![name, removed],
                |row| row.get(0),
            )?;
            if !domains.is_empty() {
                return Err(StoreError::Conflict(format!(
                    "environment {removed:?} of {name} has domains ({}): remove them first",
                    domains.join(", ")
                )));
            }
            // Nothing is served there to be in maintenance.
            db.execute(
                "DELETE FROM maintenance WHERE service = ?1 AND env = ?2",
                args![name, removed],
            )?;
        }
    }
    let owners = update.owners.as_ref().unwrap_or(&current.owners);
    let environments = update
        .environments
        .as_ref()
        .unwrap_or(&current.environments);
    let allow_processes = update.allow_processes.unwrap_or(current.allow_processes);
    let team = update.team.as_ref().unwrap_or(&current.team);
    if let Some(team) = team {
        load_team(db, team)?;
    }
    db.execute(
        "UPDATE services SET owners = ?2, environments = ?3, allow_processes = ?4, team = ?5 \
         WHERE name = ?1",
        args![
            name,
            &to_json(owners)?,
            &to_json(environments)?,
            allow_processes,
            team
        ],
    )?;
    audit(
        db,
        now,
        actor,
        "service.update",
        &format!("service/{name}"),
        &json!({
            "owners": { "from": current.owners, "to": owners },
            "environments": { "from": current.environments, "to": environments },
            "allow_processes": { "from": current.allow_processes, "to": allow_processes },
            "team": { "from": current.team, "to": team },
        }),
    )
}

/// Revokes every active token whose scope `which` picks; how many.
fn revoke_tokens(db: &dyn Db, now: Timestamp, which: impl Fn(&TokenScope) -> bool) -> Result<u64> {
    let active = db.query_all(
        &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE revoked_at IS NULL"),
        args![],
        token_from_row,
    )?;
    let mut revoked = 0;
    for token in active.iter().filter(|t| which(&t.scope)) {
        revoked += db.execute(
            "UPDATE tokens SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
            args![token.id, now.unix_millis()],
        )?;
        revoked += revoke_made_from(db, now, token.id)?;
    }
    Ok(revoked)
}

/// Revokes what was made from token `id` (its console sessions, the tokens a maintainer made
/// with it), and what was made from those, down the line; how many.
fn revoke_made_from(db: &dyn Db, now: Timestamp, id: i64) -> Result<u64> {
    let mut revoked = 0;
    let mut makers = vec![id];
    while let Some(maker) = makers.pop() {
        let made: Vec<i64> = db.query_all(
            "SELECT id FROM tokens WHERE parent_id = ?1 AND revoked_at IS NULL",
            args![maker],
            |row| row.get(0),
        )?;
        for child in made {
            revoked += db.execute(
                "UPDATE tokens SET revoked_at = ?2 WHERE id = ?1",
                args![child, now.unix_millis()],
            )?;
            makers.push(child);
        }
    }
    Ok(revoked)
}

/// [`decommission`]s `name` and its previews.
fn decommission_with_previews(db: &dyn Db, now: Timestamp, actor: &str, name: &str) -> Result<()> {
    let previews: Vec<String> = db.query_all(
        "SELECT service FROM previews WHERE parent = ?1 ORDER BY service",
        args![name],
        |row| row.get(0),
    )?;
    for preview in &previews {
        decommission(db, now, actor, preview)?;
    }
    decommission(db, now, actor, name)
}

/// Removes `name` with everything it had (see [`Store::service_decommission`]), audited.
fn decommission(db: &dyn Db, now: Timestamp, actor: &str, name: &str) -> Result<()> {
    let service = load_service(db, name)?;
    let revisions: i64 = db.query_value(
        "SELECT COUNT(*) FROM revisions WHERE service = ?1",
        args![name],
    )?;
    let domains: i64 = db.query_value(
        "SELECT COUNT(*) FROM domains WHERE service = ?1",
        args![name],
    )?;
    db.execute("DELETE FROM services WHERE name = ?1", args![name])?;
    // What the service had dies with it: a service onboarded again under this name is
    // another service, for another team, that must not get these.
    let secrets = db.execute("DELETE FROM secrets WHERE service = ?1", args![name])?;

    let tokens = revoke_tokens(db, now, |scope| scope.service() == Some(name))?;
    audit(
        db,
        now,
        actor,
        "service.decommission",
        &format!("service/{name}"),
        &json!({
            "id": service.id,
            "revisions_removed": revisions,
            "secret_versions_removed": secrets,
            "deploy_tokens_revoked": tokens,
            "domains_removed": domains,
        }),
    )
}

fn load_revision(db: &dyn Db, name: &str) -> Result<Revision> {
    db.query_one(
        &format!("SELECT {REVISION_COLUMNS} FROM revisions WHERE name = ?1"),
        args![name],
        revision_from_row,
    )?
    .ok_or_else(|| not_found("revision", name))
}

fn load_deployment(db: &dyn Db, id: i64) -> Result<Deployment> {
    db.query_one(
        &format!("SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE id = ?1"),
        args![id],
        deployment_from_row,
    )?
    .ok_or_else(|| not_found("deployment", id.to_string()))
}

fn load_desired(db: &dyn Db, service: &str, env: &str) -> Result<Option<Desired>> {
    let Some(generation) = db.query_one(
        "SELECT generation FROM desired WHERE service = ?1 AND env = ?2",
        args![service, env],
        |row| row.get::<i64>(0),
    )?
    else {
        return Ok(None);
    };
    let generation = u64::try_from(generation)
        .map_err(|_| StoreError::Corrupt(format!("generation {generation} is negative")))?;
    let revisions = db.query_all(
        "SELECT revision, instances, weight FROM desired_revisions \
         WHERE service = ?1 AND env = ?2 ORDER BY position",
        args![service, env],
        |row| {
            Ok(DesiredRevision {
                revision: row.get(0)?,
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
    db: &dyn Db,
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
        let revision = load_revision(db, &entry.revision)?;
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
    db: &dyn Db,
    now: Timestamp,
    service: &str,
    env: &str,
    revisions: &[DesiredRevision],
    expected_generation: Option<u64>,
) -> Result<Desired> {
    let current = load_desired(db, service, env)?.map_or(0, |d| d.generation);
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
    db.execute(
        "INSERT INTO desired (service, env, generation, updated_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (service, env) DO UPDATE SET generation = excluded.generation, \
         updated_at = excluded.updated_at",
        args![service, env, generation, now.unix_millis()],
    )?;
    db.execute(
        "DELETE FROM desired_revisions WHERE service = ?1 AND env = ?2",
        args![service, env],
    )?;
    for (position, entry) in revisions.iter().enumerate() {
        db.execute(
            "INSERT INTO desired_revisions (service, env, position, revision, instances, weight) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            args![
                service,
                env,
                i64::try_from(position).unwrap_or(i64::MAX),
                &entry.revision,
                entry.instances,
                entry.weight
            ],
        )?;
    }
    load_desired(db, service, env)?
        .ok_or_else(|| StoreError::Corrupt(format!("desired state of {service}/{env} vanished")))
}

/// The revision with the most weight (the first of equals), if any.
/// The revision with the most traffic, the first of equals; none when none has any (a first
/// deploy that failed leaves its revision at weight 0: it never served, so nothing is
/// deployed "from" it, and nothing goes back to it).
fn heaviest(desired: Option<&Desired>) -> Option<String> {
    let revisions = &desired?.revisions;
    let mut best: Option<&DesiredRevision> = None;
    for entry in revisions.iter().filter(|entry| entry.weight > 0) {
        if best.is_none_or(|b| entry.weight > b.weight) {
            best = Some(entry);
        }
    }
    best.map(|b| b.revision.clone())
}

fn in_flight(db: &dyn Db, service: &str, env: &str) -> Result<Vec<Deployment>> {
    db.query_all(
        &format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE service = ?1 AND env = ?2 \
             AND state IN ('pending', 'progressing') ORDER BY id"
        ),
        args![service, env],
        deployment_from_row,
    )
}

fn refuse_in_flight(db: &dyn Db, service: &str, env: &str) -> Result<()> {
    if let Some(busy) = in_flight(db, service, env)?.first() {
        return Err(StoreError::Conflict(format!(
            "deployment {} of {service}/{env} is still {}; wait for it to end, or end its \
             rollout with an abort or a promote",
            busy.id, busy.state
        )));
    }
    Ok(())
}

fn insert_revision(
    db: &dyn Db,
    now: Timestamp,
    actor: &str,
    new: &NewRevision,
) -> Result<Revision> {
    // Numbers go on past a decommission: a service onboarded again under the name never gets
    // a revision name (nor instance ids) its predecessor had, whose instances may still drain.
    let last: i64 = db
        .query_one(
            "SELECT COALESCE((SELECT MAX(number) FROM revisions \
                              WHERE service = ?1 AND env = ?2), 0), \
                    COALESCE((SELECT last FROM revision_numbers \
                              WHERE service = ?1 AND env = ?2), 0)",
            args![&new.service, &new.env],
            |row| Ok(row.get::<i64>(0)?.max(row.get::<i64>(1)?)),
        )?
        .unwrap_or(0);
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
    let taken: Option<i64> = db.query_one(
        "SELECT id FROM revisions WHERE name = ?1",
        args![&name],
        |row| row.get(0),
    )?;
    if taken.is_some() {
        // `a-b` in `c` and `a` in `b-c` would both name `a-b-c-00001`.
        return Err(StoreError::AlreadyExists {
            kind: "revision",
            name,
        });
    }
    db.execute(
        "INSERT INTO revision_numbers (service, env, last) VALUES (?1, ?2, ?3) \
         ON CONFLICT (service, env) DO UPDATE SET last = excluded.last",
        args![&new.service, &new.env, number],
    )?;
    db.execute(
        "INSERT INTO revisions (service, env, number, name, manifest, artifact, env_vars, \
         secret_versions, created_by, created_at, set_vars) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        args![
            &new.service,
            &new.env,
            number,
            &name,
            &to_json(&new.manifest)?,
            &to_json(&new.artifact)?,
            &to_json(&new.env_vars)?,
            &to_json(&new.secret_versions)?,
            actor,
            now.unix_millis(),
            &to_json(&new.set_vars)?
        ],
    )?;
    load_revision(db, &name)
}

/// `text` matched literally by `LIKE … ESCAPE '\'`.
fn like_escaped(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// How many times `message` was said already when the last event reads `last`: it, or it
/// with its count (`message (×N)`).
fn repeated(last: &str, message: &str) -> Option<u64> {
    let rest = last.strip_prefix(message)?;
    if rest.is_empty() {
        return Some(1);
    }
    rest.strip_prefix(" (×")?.strip_suffix(')')?.parse().ok()
}

fn insert_event(
    db: &dyn Db,
    now: Timestamp,
    deployment_id: i64,
    message: &str,
) -> Result<DeploymentEvent> {
    db.execute(
        "INSERT INTO deployment_events (deployment_id, at, message) VALUES (?1, ?2, ?3)",
        args![deployment_id, now.unix_millis(), message],
    )?;
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
    db: &dyn Db,
    now: Timestamp,
    actor: &str,
    new: NewDeployment<'_>,
) -> Result<Deployment> {
    let id = db.insert_returning_id(
        "INSERT INTO deployments (service, env, kind, from_revision, to_revision, state, \
         reason, created_by, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, 'pending', NULL, ?6, ?7, ?7) RETURNING id",
        args![
            new.service,
            new.env,
            new.kind.as_str(),
            &new.from_revision,
            new.to_revision,
            actor,
            now.unix_millis()
        ],
    )?;
    let message = match &new.from_revision {
        Some(from) => format!("{} from {from} to {} by {actor}", new.kind, new.to_revision),
        None => format!("{} of {} by {actor}", new.kind, new.to_revision),
    };
    insert_event(db, now, id, &message)?;
    load_deployment(db, id)
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
    db: &dyn Db,
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
    db.execute(
        "UPDATE deployments SET state = ?2, reason = COALESCE(?3, reason), updated_at = ?4, \
         command = CASE WHEN ?5 = 1 THEN NULL ELSE command END WHERE id = ?1",
        args![
            deployment.id,
            to.as_str(),
            reason,
            now.unix_millis(),
            to.is_terminal()
        ],
    )?;
    let message = match reason {
        Some(reason) => format!("{from} → {to}: {reason}"),
        None => format!("{from} → {to}"),
    };
    insert_event(db, now, deployment.id, &message)?;
    if let Some(command) = dropped {
        insert_event(
            db,
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
fn next_secret_version(db: &dyn Db, service: &str, env: &str, name: &str) -> Result<u32> {
    let last: i64 = db.query_value(
        "SELECT COALESCE(MAX(version), 0) FROM secrets \
             WHERE service = ?1 AND env = ?2 AND name = ?3",
        args![service, env, name],
    )?;
    u32::try_from(last)
        .ok()
        .and_then(|v| v.checked_add(1))
        .ok_or_else(|| StoreError::Conflict(format!("secret {name:?} has run out of versions")))
}

/// The latest version of a secret that is set (not unset), if any.
fn current_secret_version(
    db: &dyn Db,
    service: &str,
    env: &str,
    name: &str,
) -> Result<Option<u32>> {
    db.query_one(
        "SELECT s.version FROM secrets s \
         WHERE s.service = ?1 AND s.env = ?2 AND s.name = ?3 AND s.deleted_at IS NULL \
         AND s.version = (SELECT MAX(t.version) FROM secrets t \
             WHERE t.service = s.service AND t.env = s.env AND t.name = s.name)",
        args![service, env, name],
        |row| get_u32(row, 0, "secret version"),
    )
}

/// The latest version in `env` of each secret `source` pins. `Invalid`, naming them, when
/// some are not set there.
fn pin_secrets_in(db: &dyn Db, source: &Revision, env: &str) -> Result<BTreeMap<String, u32>> {
    let mut pinned = BTreeMap::new();
    let mut missing = Vec::new();
    for name in source.secret_versions.keys() {
        match current_secret_version(db, &source.service, env, name)? {
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

impl<B: Backend> Store for B {
    fn service_create(&self, actor: &str, service: &NewService) -> Result<Service> {
        check_new_service(service)?;
        self.write(|db, now| {
            create_service(db, now, actor, service)?;
            load_service(db, &service.name)
        })
    }

    fn service_get(&self, name: &str) -> Result<Service> {
        self.read(|db| load_service(db, name))
    }

    fn service_list(&self) -> Result<Vec<Service>> {
        self.read(|db| {
            db.query_all(
                &format!("SELECT {SERVICE_COLUMNS} FROM services ORDER BY name"),
                args![],
                service_from_row,
            )
        })
    }

    fn service_update(&self, actor: &str, name: &str, update: &ServiceUpdate) -> Result<Service> {
        check_update(update)?;
        self.write(|db, now| {
            update_service(db, now, actor, name, update)?;
            load_service(db, name)
        })
    }

    fn inventory_apply(&self, actor: &str, changes: &InventoryChanges, digest: &str) -> Result<()> {
        let new = |record: &InventoryRecord| NewService {
            name: record.name.clone(),
            owners: record.owners.clone(),
            environments: record.environments.clone(),
            team: None,
        };
        let update = |record: &InventoryRecord| ServiceUpdate {
            owners: Some(record.owners.clone()),
            environments: Some(record.environments.clone()),
            allow_processes: Some(record.allow_processes),
            team: None,
        };
        for record in &changes.create {
            check_new_service(&new(record))?;
        }
        for record in &changes.update {
            check_update(&update(record))?;
        }
        self.write(|db, now| {
            for record in &changes.create {
                create_service(db, now, actor, &new(record))?;
                db.execute(
                    "UPDATE services SET allow_processes = ?2, inventory = ?3 WHERE name = ?1",
                    args![
                        &record.name,
                        record.allow_processes,
                        &to_json(&record.upstream)?
                    ],
                )?;
            }
            for record in &changes.update {
                // Its leave to run processes is the update's; upstream's keys are the column's.
                update_service(db, now, actor, &record.name, &update(record))?;
                db.execute(
                    "UPDATE services SET inventory = ?2 WHERE name = ?1",
                    args![&record.name, &to_json(&record.upstream)?],
                )?;
            }
            for name in &changes.decommission {
                decommission_with_previews(db, now, actor, name)?;
            }
            let names = |records: &[InventoryRecord]| -> Vec<String> {
                records.iter().map(|r| r.name.clone()).collect()
            };
            audit(
                db,
                now,
                actor,
                "inventory.apply",
                "inventory",
                &json!({
                    "digest": digest,
                    "created": names(&changes.create),
                    "updated": names(&changes.update),
                    "decommissioned": changes.decommission,
                    "unlisted_kept": changes.unlisted,
                }),
            )
        })
    }

    fn service_decommission(&self, actor: &str, name: &str) -> Result<()> {
        self.write(|db, now| decommission_with_previews(db, now, actor, name))
    }

    fn preview_put(&self, actor: &str, new: &NewPreview) -> Result<(Preview, bool)> {
        let service = runway_secrets::preview::service_name(&new.name, &new.parent);
        let ttl = i64::try_from(new.ttl.as_millis()).unwrap_or(i64::MAX);
        self.write(|db, now| {
            let parent = load_service(db, &new.parent)?;
            let expires_at = now.add_millis(ttl).unix_millis();
            let origin = to_json(&new.origin)?;
            if load_preview(db, &service)?.is_some() {
                db.execute(
                    "UPDATE previews SET base_env = ?2, origin = ?3, expires_at = ?4, \
                     updated_at = ?5 WHERE service = ?1",
                    args![
                        &service,
                        &new.base_env,
                        &origin,
                        expires_at,
                        now.unix_millis()
                    ],
                )?;
                // It acts as its parent does now: the same owners, the same leave.
                db.execute(
                    "UPDATE services SET owners = ?2, allow_processes = ?3 WHERE name = ?1",
                    args![&service, &to_json(&parent.owners)?, parent.allow_processes],
                )?;
                let preview =
                    load_preview(db, &service)?.ok_or_else(|| not_found("preview", &service))?;
                return Ok((preview, false));
            }
            if load_service(db, &service).is_ok() {
                return Err(StoreError::Conflict(format!(
                    "{service} is a service of its own, not a preview of {}",
                    new.parent
                )));
            }
            let count: i64 = db.query_value(
                "SELECT COUNT(*) FROM previews WHERE parent = ?1",
                args![&new.parent],
            )?;
            if count >= i64::from(new.max_per_parent) {
                return Err(StoreError::Conflict(format!(
                    "{} has {count} previews, the most a service may have ({}): stop one \
                     (`runway preview stop NAME`) or let one expire",
                    new.parent, new.max_per_parent
                )));
            }
            let id = create_service(
                db,
                now,
                actor,
                &NewService {
                    name: service.clone(),
                    owners: parent.owners.clone(),
                    environments: vec![runway_secrets::preview::ENVIRONMENT.to_owned()],
                    team: parent.team.clone(),
                },
            )?;
            db.execute(
                "UPDATE services SET allow_processes = ?2 WHERE name = ?1",
                args![&service, parent.allow_processes],
            )?;
            db.execute(
                "INSERT INTO previews (service, parent, name, base_env, origin, expires_at, \
                 created_at, created_by, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?7)",
                args![
                    &service,
                    &new.parent,
                    &new.name,
                    &new.base_env,
                    &origin,
                    expires_at,
                    now.unix_millis(),
                    actor
                ],
            )?;
            audit(
                db,
                now,
                actor,
                "preview.create",
                &format!("service/{service}"),
                &json!({
                    "id": id,
                    "parent": new.parent,
                    "base_env": new.base_env,
                    "origin": new.origin,
                    "expires_at": expires_at,
                }),
            )?;
            let preview =
                load_preview(db, &service)?.ok_or_else(|| not_found("preview", &service))?;
            Ok((preview, true))
        })
    }

    fn preview_list(&self, parent: Option<&str>) -> Result<Vec<Preview>> {
        self.read(|db| match parent {
            Some(parent) => db.query_all(
                &format!(
                    "SELECT {PREVIEW_COLUMNS} FROM previews WHERE parent = ?1 ORDER BY service"
                ),
                args![parent],
                preview_from_row,
            ),
            None => db.query_all(
                &format!("SELECT {PREVIEW_COLUMNS} FROM previews ORDER BY service"),
                args![],
                preview_from_row,
            ),
        })
    }

    fn revision_get(&self, name: &str) -> Result<Revision> {
        self.read(|db| load_revision(db, name))
    }

    fn revision_list(&self, service: &str, env: &str) -> Result<Vec<Revision>> {
        self.read(|db| {
            db.query_all(
                &format!(
                    "SELECT {REVISION_COLUMNS} FROM revisions WHERE service = ?1 AND env = ?2 \
                     ORDER BY number"
                ),
                args![service, env],
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
        self.write(|db, now| {
            let (service, env) = (revision.service.as_str(), revision.env.as_str());
            load_service_env(db, service, env)?;
            refuse_in_flight(db, service, env)?;
            let previous = load_desired(db, service, env)?;
            let created = insert_revision(db, now, actor, revision)?;
            let resolved = resolve_planned(desired, &created.name)?;
            validate_desired(db, service, env, &resolved)?;
            let from_revision = heaviest(previous.as_ref());
            let deployment = insert_deployment(
                db,
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
            let desired = write_desired(db, now, service, env, &resolved, None)?;
            audit(
                db,
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
        self.write(|db, now| {
            load_service_env(db, service, env)?;
            let target = load_revision(db, to_revision)?;
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
            validate_desired(db, service, env, desired)?;
            let previous = load_desired(db, service, env)?;
            let from_revision = heaviest(previous.as_ref());
            let deployment = insert_deployment(
                db,
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
            for busy in in_flight(db, service, env)? {
                if busy.id == deployment.id {
                    continue;
                }
                let reason = format!("superseded by rollback {}", deployment.id);
                transition(db, now, &busy, DeploymentState::Failed, Some(&reason))?;
                superseded.push(busy.id);
            }
            let desired = write_desired(db, now, service, env, desired, None)?;
            audit(
                db,
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
        signature: Option<&serde_json::Value>,
    ) -> Result<DeployRecord> {
        self.write(|db, now| {
            let source = load_revision(db, from_revision)?;
            // What verified the source's signature held for its environment, not this one.
            let mut artifact = source.artifact.clone();
            if let Some(object) = artifact.as_object_mut() {
                match signature {
                    Some(signature) => object.insert("signature".to_owned(), signature.clone()),
                    None => object.remove("signature"),
                };
            }
            if source.env == to_env {
                return Err(StoreError::Invalid(format!(
                    "revision {from_revision:?} is already in {to_env}"
                )));
            }
            let service = source.service.as_str();
            load_service_env(db, service, to_env)?;
            refuse_in_flight(db, service, to_env)?;
            let secret_versions = pin_secrets_in(db, &source, to_env)?;
            let previous = load_desired(db, service, to_env)?;
            let created = insert_revision(
                db,
                now,
                actor,
                &NewRevision {
                    service: source.service.clone(),
                    env: to_env.to_owned(),
                    manifest: source.manifest.clone(),
                    artifact,
                    env_vars: source.env_vars.clone(),
                    set_vars: source.set_vars.clone(),
                    secret_versions,
                },
            )?;
            let resolved = resolve_planned(desired, &created.name)?;
            validate_desired(db, service, to_env, &resolved)?;
            let replaced = heaviest(previous.as_ref());
            let deployment = insert_deployment(
                db,
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
                db,
                now,
                deployment.id,
                &format!("promoted from {from_revision}"),
            )?;
            let desired = write_desired(db, now, service, to_env, &resolved, None)?;
            audit(
                db,
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
        self.read(|db| load_deployment(db, id))
    }

    fn deployment_list(
        &self,
        service: &str,
        env: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Deployment>> {
        self.read(|db| {
            db.query_all(
                &format!(
                    "SELECT {DEPLOYMENT_COLUMNS} FROM deployments \
                     WHERE service = ?1 AND (CAST(?2 AS TEXT) IS NULL OR env = ?2) ORDER BY id DESC LIMIT ?3"
                ),
                args![service, env, limit_param(limit)],
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
        self.write(|db, now| {
            let deployment = load_deployment(db, id)?;
            let dropped = transition(db, now, &deployment, to, reason)?;
            audit(
                db,
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
            load_deployment(db, id)
        })
    }

    fn deployment_add_event(&self, actor: &str, id: i64, message: &str) -> Result<DeploymentEvent> {
        self.write(|db, now| {
            let deployment = load_deployment(db, id)?;
            // The same as the last one (a start failing again, each round): counted on it, not
            // written again, and no second audit row.
            let last = db.query_one(
                "SELECT deployment_id, at, message, id FROM deployment_events \
                 WHERE deployment_id = ?1 ORDER BY id DESC LIMIT 1",
                args![id],
                |row| Ok((row.get::<i64>(3)?, event_from_row(row)?)),
            )?;
            if let Some((row, mut last)) = last
                && let Some(times) = repeated(&last.message, message)
            {
                last.message = format!("{message} (×{})", times + 1);
                db.execute(
                    "UPDATE deployment_events SET message = ?1 WHERE id = ?2",
                    args![last.message.as_str(), row],
                )?;
                return Ok(last);
            }
            let event = insert_event(db, now, id, message)?;
            audit(
                db,
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
        self.read(|db| {
            load_deployment(db, id)?;
            db.query_all(
                "SELECT deployment_id, at, message FROM deployment_events \
                 WHERE deployment_id = ?1 ORDER BY id",
                args![id],
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
        self.write(|db, now| {
            load_service_env(db, service, env)?;
            // At most one is in flight (deploys and promotions refuse a second, a rollback
            // supersedes the others); the newest is the one a command is for.
            let Some(deployment) = in_flight(db, service, env)?.pop() else {
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
            db.execute(
                "UPDATE deployments SET command = ?2 WHERE id = ?1",
                args![id, command.as_str()],
            )?;
            let message = match deployment.command {
                Some(replaced) if replaced != command => {
                    format!("{command} asked by {actor}, in place of {replaced}")
                }
                _ => format!("{command} asked by {actor}"),
            };
            insert_event(db, now, id, &message)?;
            audit(
                db,
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
            load_deployment(db, id)
        })
    }

    fn deployment_save_rollout(
        &self,
        actor: &str,
        id: i64,
        rollout: &str,
        consumed: Option<RolloutCommand>,
    ) -> Result<Deployment> {
        self.write(|db, now| {
            let deployment = load_deployment(db, id)?;
            if deployment.state.is_terminal() {
                return Err(StoreError::Conflict(format!(
                    "deployment {id} of {}/{} is {}; its rollout cannot change any more",
                    deployment.service, deployment.env, deployment.state
                )));
            }
            // Compare and clear: a command that replaced the consumed one stays.
            let cleared = consumed.filter(|c| deployment.command == Some(*c));
            db.execute(
                "UPDATE deployments SET rollout = ?2, \
                 command = CASE WHEN ?3 = 1 THEN NULL ELSE command END WHERE id = ?1",
                args![id, rollout, cleared.is_some()],
            )?;
            audit(
                db,
                now,
                actor,
                "deployment.rollout",
                &env_target(&deployment.service, &deployment.env),
                &json!({ "deployment": id, "consumed": cleared }),
            )?;
            load_deployment(db, id)
        })
    }

    fn desired_get(&self, service: &str, env: &str) -> Result<Option<Desired>> {
        self.read(|db| load_desired(db, service, env))
    }

    fn desired_list(&self) -> Result<Vec<Desired>> {
        // Two queries, whatever the number of services: each a round trip on PostgreSQL.
        self.read(|db| {
            let mut out = db.query_all(
                "SELECT service, env, generation FROM desired ORDER BY service, env",
                args![],
                |row| {
                    let generation: i64 = row.get(2)?;
                    Ok(Desired {
                        service: row.get(0)?,
                        env: row.get(1)?,
                        revisions: Vec::new(),
                        generation: u64::try_from(generation).map_err(|_| {
                            StoreError::Corrupt(format!("generation {generation} is negative"))
                        })?,
                    })
                },
            )?;
            let revisions = db.query_all(
                "SELECT service, env, revision, instances, weight FROM desired_revisions \
                 ORDER BY service, env, position",
                args![],
                |row| {
                    Ok((
                        (row.get::<String>(0)?, row.get::<String>(1)?),
                        DesiredRevision {
                            revision: row.get(2)?,
                            instances: get_u32(row, 3, "instances")?,
                            weight: get_u32(row, 4, "weight")?,
                        },
                    ))
                },
            )?;
            let at: BTreeMap<(String, String), usize> = out
                .iter()
                .enumerate()
                .map(|(i, d)| ((d.service.clone(), d.env.clone()), i))
                .collect();
            for (key, revision) in revisions {
                if let Some(&i) = at.get(&key) {
                    out[i].revisions.push(revision);
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
        self.write(|db, now| {
            load_service_env(db, service, env)?;
            validate_desired(db, service, env, revisions)?;
            let desired = write_desired(db, now, service, env, revisions, expected_generation)?;
            audit(
                db,
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
        self.write(|db, now| {
            let mut current = load_desired(db, service, env)?
                .ok_or_else(|| not_found("desired state", format!("{service}/{env}")))?;
            let entry = current
                .revisions
                .iter_mut()
                .find(|d| d.revision == revision)
                .ok_or_else(|| not_found("revision in the desired state", revision))?;
            let before = entry.instances;
            entry.instances = instances;
            let desired = write_desired(
                db,
                now,
                service,
                env,
                &current.revisions,
                expected_generation,
            )?;
            audit(
                db,
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
        origin: Option<&str>,
    ) -> Result<SecretInfo> {
        check_secret_name(name)?;
        self.write(|db, now| {
            load_service_env(db, service, env)?;
            let version = next_secret_version(db, service, env, name)?;
            if version != expected_version {
                return Err(StoreError::Conflict(format!(
                    "secret {service}/{env}/{name}: the next version is {version}, not \
                     {expected_version}"
                )));
            }
            db.execute(
                "INSERT INTO secrets (service, env, name, version, nonce, ciphertext, \
                 created_by, created_at, origin) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                args![
                    service,
                    env,
                    name,
                    version,
                    nonce,
                    ciphertext,
                    actor,
                    now.unix_millis(),
                    origin
                ],
            )?;
            let mut details = json!({ "version": version });
            if let Some(origin) = origin {
                details["origin"] = json!(origin);
            }
            audit(
                db,
                now,
                actor,
                "secret.set",
                &format!("secret/{service}/{env}/{name}"),
                &details,
            )?;
            Ok(SecretInfo {
                service: service.to_owned(),
                env: env.to_owned(),
                name: name.to_owned(),
                version,
                created_by: actor.to_owned(),
                created_at: now,
                origin: origin.map(str::to_owned),
            })
        })
    }

    fn secret_next_version(&self, service: &str, env: &str, name: &str) -> Result<u32> {
        check_secret_name(name)?;
        self.read(|db| {
            load_service_env(db, service, env)?;
            next_secret_version(db, service, env, name)
        })
    }

    fn secret_unset(&self, actor: &str, service: &str, env: &str, name: &str) -> Result<()> {
        self.write(|db, now| {
            load_service_env(db, service, env)?;
            let changed = db.execute(
                "UPDATE secrets SET deleted_at = ?4 \
                     WHERE service = ?1 AND env = ?2 AND name = ?3 AND deleted_at IS NULL",
                args![service, env, name, now.unix_millis()],
            )?;
            if changed == 0 {
                return Err(not_found("secret", format!("{service}/{env}/{name}")));
            }
            audit(
                db,
                now,
                actor,
                "secret.unset",
                &format!("secret/{service}/{env}/{name}"),
                &json!({}),
            )
        })
    }

    fn secret_list(&self, service: &str, env: &str) -> Result<Vec<SecretInfo>> {
        self.read(|db| {
            load_service_env(db, service, env)?;
            // Deliberately no nonce or ciphertext column here.
            db.query_all(
                "SELECT s.name, s.version, s.created_by, s.created_at, s.origin FROM secrets s \
                 WHERE s.service = ?1 AND s.env = ?2 AND s.deleted_at IS NULL \
                 AND s.version = (SELECT MAX(t.version) FROM secrets t \
                     WHERE t.service = s.service AND t.env = s.env AND t.name = s.name) \
                 ORDER BY s.name",
                args![service, env],
                |row| {
                    Ok(SecretInfo {
                        service: service.to_owned(),
                        env: env.to_owned(),
                        name: row.get(0)?,
                        version: get_u32(row, 1, "secret version")?,
                        created_by: row.get(2)?,
                        created_at: get_ts(row, 3)?,
                        origin: row.get(4)?,
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
        self.read(|db| {
            db.query_one(
                "SELECT nonce, ciphertext, created_by, created_at FROM secrets \
                 WHERE service = ?1 AND env = ?2 AND name = ?3 AND version = ?4",
                args![service, env, name, version],
                |row| {
                    Ok(SecretVersion {
                        service: service.to_owned(),
                        env: env.to_owned(),
                        name: name.to_owned(),
                        version,
                        nonce: row.get(0)?,
                        ciphertext: row.get(1)?,
                        created_by: row.get(2)?,
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

    fn team_put(&self, actor: &str, name: &str, members: &[TeamMember]) -> Result<Team> {
        if name.is_empty() {
            return Err(StoreError::Invalid("a team needs a name".to_owned()));
        }
        check_members(members)?;
        self.write(|db, now| {
            let before = load_team(db, name).ok();
            let text = to_json(&members)?;
            if before.is_some() {
                db.execute(
                    "UPDATE teams SET members = ?2, updated_at = ?3 WHERE name = ?1",
                    args![name, &text, now.unix_millis()],
                )?;
            } else {
                db.execute(
                    "INSERT INTO teams (name, members, created_at, created_by, updated_at) \
                     VALUES (?1, ?2, ?3, ?4, ?3)",
                    args![name, &text, now.unix_millis(), actor],
                )?;
            }
            audit(
                db,
                now,
                actor,
                if before.is_some() {
                    "team.update"
                } else {
                    "team.create"
                },
                &format!("team/{name}"),
                &json!({ "members": { "from": before.map(|t| t.members), "to": members } }),
            )?;
            load_team(db, name)
        })
    }

    fn team_get(&self, name: &str) -> Result<Team> {
        self.read(|db| load_team(db, name))
    }

    fn team_list(&self) -> Result<Vec<Team>> {
        self.read(|db| {
            db.query_all(
                &format!("SELECT {TEAM_COLUMNS} FROM teams ORDER BY name"),
                args![],
                team_from_row,
            )
        })
    }

    fn team_delete(&self, actor: &str, name: &str) -> Result<()> {
        self.write(|db, now| {
            let team = load_team(db, name)?;
            let owned: Vec<String> = db.query_all(
                "SELECT name FROM services WHERE team = ?1 ORDER BY name",
                args![name],
                |row| row.get(0),
            )?;
            if !owned.is_empty() {
                return Err(StoreError::Conflict(format!(
                    "team {name} owns services ({}): give them to another team first",
                    owned.join(", ")
                )));
            }
            db.execute("DELETE FROM teams WHERE name = ?1", args![name])?;
            // Its tokens stop with it: a team made again under this name is another team.
            let revoked = revoke_tokens(db, now, |scope| scope.team() == Some(name))?;
            audit(
                db,
                now,
                actor,
                "team.delete",
                &format!("team/{name}"),
                &json!({ "members": team.members, "tokens_revoked": revoked }),
            )
        })
    }

    fn token_create(&self, actor: &str, token: &NewToken) -> Result<Token> {
        if token.name.is_empty() {
            return Err(StoreError::Invalid("a token needs a name".to_owned()));
        }
        if token.hash.is_empty() {
            return Err(StoreError::Invalid("a token needs a hash".to_owned()));
        }
        match &token.scope {
            TokenScope::Admin => {}
            TokenScope::Person { user, .. } => {
                if user.is_empty() {
                    return Err(StoreError::Invalid(
                        "a person's session names them".to_owned(),
                    ));
                }
            }
            TokenScope::Deploy {
                service,
                environments,
            } => {
                check_list("token environments", environments, false)?;
                if service.is_empty() {
                    return Err(StoreError::Invalid(
                        "a deploy token needs a service".to_owned(),
                    ));
                }
            }
            TokenScope::Grant { grant } => {
                if let Some(environments) = &grant.environments {
                    check_list("token environments", environments, false)?;
                }
                if matches!(&grant.on, runway_secrets::Target::Service(n) | runway_secrets::Target::Team(n) if n.is_empty())
                {
                    return Err(StoreError::Invalid(
                        "a token's grant names its service or team".to_owned(),
                    ));
                }
            }
        }
        self.write(|db, now| {
            let taken: Option<i64> = db.query_one(
                "SELECT id FROM tokens WHERE hash = ?1",
                args![&token.hash],
                |row| row.get(0),
            )?;
            if taken.is_some() {
                return Err(StoreError::Conflict(
                    "another token has the same hash".to_owned(),
                ));
            }
            if let Some(parent) = token.parent {
                let parent = load_token(db, parent)?;
                if !parent.is_active_at(now) {
                    return Err(StoreError::Invalid(format!(
                        "token {} is revoked or expired: no session can be made from it",
                        parent.id
                    )));
                }
            }
            let id = db.insert_returning_id(
                "INSERT INTO tokens (name, hash, scope, expires_at, revoked_at, created_at, \
                 created_by, parent_id) VALUES (?1, ?2, ?3, ?4, NULL, ?5, ?6, ?7) RETURNING id",
                args![&token.name, &token.hash, &to_json(&token.scope)?, token.expires_at.map(Timestamp::unix_millis), now.unix_millis(), actor, token.parent],
            )?;
            audit(
                db,
                now,
                actor,
                "token.create",
                &format!("token/{id}"),
                &json!({ "name": token.name, "scope": token.scope, "expires_at": token.expires_at, "parent": token.parent }),
            )?;
            load_token(db, id)
        })
    }

    fn token_by_hash(&self, hash: &[u8]) -> Result<Option<Token>> {
        self.read(|db| {
            db.query_one(
                &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE hash = ?1"),
                args![hash],
                token_from_row,
            )
        })
    }

    fn token_list(&self) -> Result<Vec<Token>> {
        self.read(|db| {
            db.query_all(
                &format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY id"),
                args![],
                token_from_row,
            )
        })
    }

    fn token_revoke(&self, actor: &str, id: i64) -> Result<Token> {
        self.write(|db, now| {
            load_token(db, id)?;
            db.execute(
                "UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?2) WHERE id = ?1",
                args![id, now.unix_millis()],
            )?;
            // What was made from it ends with it: its console sessions, the tokens a
            // maintainer made with it, and theirs.
            let sessions = revoke_made_from(db, now, id)?;
            audit(
                db,
                now,
                actor,
                "token.revoke",
                &format!("token/{id}"),
                &json!({ "sessions_revoked": sessions }),
            )?;
            load_token(db, id)
        })
    }

    fn audit_list(&self, after_id: i64, limit: u32) -> Result<Vec<AuditEntry>> {
        self.read(|db| {
            db.query_all(
                &format!("SELECT {AUDIT_COLUMNS} FROM audit WHERE id > ?1 ORDER BY id LIMIT ?2"),
                args![after_id, limit_param(limit)],
                audit_from_row,
            )
        })
    }

    fn audit_find(
        &self,
        filter: &AuditFilter,
        after_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>> {
        let service = filter.service.as_deref();
        let exact = service.map(|name| format!("service/{name}"));
        let under = service.map(|name| format!("service/{}/%", like_escaped(name)));
        let secrets = service.map(|name| format!("secret/{}/%", like_escaped(name)));
        let family = filter
            .action
            .as_deref()
            .map(|action| format!("{}.%", like_escaped(action)));
        let by = filter.by.map(|by| match by {
            AuditBy::People => "people",
            AuditBy::Platform => "platform",
        });
        let platform = crate::model::PLATFORM_ACTORS
            .iter()
            .map(|actor| format!("'{actor}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let kept = format!(
            // A parameter only tested for NULL has no type PostgreSQL can tell: cast.
            "(CAST(?1 AS TEXT) IS NULL OR target = ?1 OR target LIKE ?2 ESCAPE '\\' \
             OR target LIKE ?3 ESCAPE '\\') \
             AND (CAST(?4 AS TEXT) IS NULL OR actor = ?4) \
             AND (CAST(?5 AS TEXT) IS NULL OR action = ?5 OR action LIKE ?6 ESCAPE '\\') \
             AND at >= ?7 \
             AND (CAST(?8 AS TEXT) IS NULL \
                  OR (?8 = 'people' AND actor NOT IN ({platform})) \
                  OR (?8 = 'platform' AND actor IN ({platform})))"
        );
        let since = filter.since.map_or(0, Timestamp::unix_millis);
        let kept_args = [
            Param::from(exact.as_deref()),
            Param::from(under.as_deref()),
            Param::from(secrets.as_deref()),
            Param::from(filter.actor.as_deref()),
            Param::from(filter.action.as_deref()),
            Param::from(family.as_deref()),
            Param::from(since),
            Param::from(by),
        ];
        self.read(|db| match after_id {
            Some(after) => db.query_all(
                &format!(
                    "SELECT {AUDIT_COLUMNS} FROM audit \
                     WHERE {kept} AND id > ?9 ORDER BY id LIMIT ?10"
                ),
                &[&kept_args[..], args![after, limit_param(limit)]].concat(),
                audit_from_row,
            ),
            None => db.query_all(
                &format!(
                    "SELECT {AUDIT_COLUMNS} FROM (SELECT * FROM audit \
                     WHERE {kept} ORDER BY id DESC LIMIT ?9) AS recent ORDER BY id"
                ),
                &[&kept_args[..], args![limit_param(limit)]].concat(),
                audit_from_row,
            ),
        })
    }

    fn audit_tail(&self, limit: u32) -> Result<Vec<AuditEntry>> {
        self.read(|db| {
            db.query_all(
                &format!(
                    "SELECT {AUDIT_COLUMNS} FROM (SELECT * FROM audit \
                     ORDER BY id DESC LIMIT ?1) AS recent ORDER BY id"
                ),
                args![limit_param(limit)],
                audit_from_row,
            )
        })
    }

    fn audit_verify(&self) -> Result<AuditVerification> {
        let head = self.read(|db| load_head(db, false))?;
        let mut chain = crate::AuditChain::new();
        let broken = |chain: &crate::AuditChain, head: AuditHead, id: i64, reason: String| {
            AuditVerification {
                ok: false,
                entries: chain.entries(),
                head,
                first_broken: Some(crate::AuditBreak { id, reason }),
            }
        };
        let mut after = 0;
        loop {
            // A page at a time, each in a read of its own, so a long log does not keep the
            // store from writers; entries are only appended, and those after the head read
            // first are left for the next verification.
            let rows = self.read(|db| {
                db.query(
                    &format!(
                        "SELECT {AUDIT_COLUMNS} FROM audit WHERE id > ?1 AND id <= ?2 \
                         ORDER BY id LIMIT ?3"
                    ),
                    args![after, head.id, VERIFY_PAGE],
                )
            })?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                let id: i64 = row.get(0)?;
                let entry = match audit_from_row(row) {
                    Ok(entry) => entry,
                    Err(error) => {
                        return Ok(broken(
                            &chain,
                            head,
                            id,
                            format!("it cannot be read: {error}"),
                        ));
                    }
                };
                if let Err(found) = chain.push(&entry) {
                    return Ok(broken(&chain, head, found.id, found.reason));
                }
                after = id;
            }
        }
        let last = chain.last().map(|(id, hash)| (id, hash.to_owned()));
        Ok(match last {
            Some((id, hash)) if id == head.id && hash == head.hash => AuditVerification {
                ok: true,
                entries: chain.entries(),
                head,
                first_broken: None,
            },
            None if head.id == 0 => AuditVerification {
                ok: true,
                entries: 0,
                head,
                first_broken: None,
            },
            Some((id, _)) if id == head.id => {
                let reason = "its hash is not the one the head records".to_owned();
                broken(&chain, head, id, reason)
            }
            last => {
                let id = last.map_or(0, |(id, _)| id);
                let reason = format!(
                    "the head records entry {} but the log ends at entry {id}: entries after \
                     it were removed",
                    head.id
                );
                broken(&chain, head, id, reason)
            }
        })
    }

    fn audit_export_list(&self) -> Result<Vec<AuditSinkCursor>> {
        self.read(|db| {
            db.query_all(
                &format!("SELECT {SINK_COLUMNS} FROM audit_export ORDER BY sink"),
                args![],
                sink_from_row,
            )
        })
    }

    fn audit_export_get(&self, sink: &str) -> Result<AuditSinkCursor> {
        self.read(|db| {
            let found = db.query_one(
                &format!("SELECT {SINK_COLUMNS} FROM audit_export WHERE sink = ?1"),
                args![sink],
                sink_from_row,
            )?;
            match found {
                Some(found) => Ok(found),
                None => {
                    let lag: i64 = db.query_value(
                        "SELECT COUNT(*) FROM audit WHERE hash IS NOT NULL",
                        args![],
                    )?;
                    Ok(AuditSinkCursor {
                        sink: sink.to_owned(),
                        cursor: 0,
                        lag: u64::try_from(lag).unwrap_or(0),
                        acked_at: None,
                        error: None,
                        failing_since: None,
                    })
                }
            }
        })
    }

    fn audit_export_ack(&self, sink: &str, cursor: i64) -> Result<()> {
        self.write(|db, now| {
            db.execute(
                "INSERT INTO audit_export (sink, acked_id, acked_at, error, failing_since, \
                 updated_at) VALUES (?1, ?2, ?3, NULL, NULL, ?3) \
                 ON CONFLICT (sink) DO UPDATE SET acked_id = CASE \
                 WHEN excluded.acked_id > audit_export.acked_id THEN excluded.acked_id \
                 ELSE audit_export.acked_id END, acked_at = excluded.acked_at, error = NULL, \
                 failing_since = NULL, updated_at = excluded.updated_at",
                args![sink, cursor, now.unix_millis()],
            )?;
            Ok(())
        })
    }

    fn audit_export_failed(&self, sink: &str, error: &str) -> Result<()> {
        self.write(|db, now| {
            db.execute(
                "INSERT INTO audit_export (sink, acked_id, error, failing_since, updated_at) \
                 VALUES (?1, 0, ?2, ?3, ?3) \
                 ON CONFLICT (sink) DO UPDATE SET error = excluded.error, \
                 failing_since = COALESCE(audit_export.failing_since, excluded.failing_since), \
                 updated_at = excluded.updated_at",
                args![sink, error, now.unix_millis()],
            )?;
            Ok(())
        })
    }

    fn lease_acquire(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<Lease>> {
        if name.is_empty() || holder.is_empty() {
            return Err(StoreError::Invalid(
                "a lease needs a name and a holder".to_owned(),
            ));
        }
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        self.write(|db, now| {
            let expires_at = now.unix_millis().saturating_add(ttl_ms);
            let current = load_lease(db, name)?;
            let token = match &current {
                // Renewed: the same token.
                Some(lease) if lease.holder == holder => lease.token,
                // Another's, not expired: not taken.
                Some(lease) if lease.expires_at.unix_millis() > now.unix_millis() => {
                    return Ok(None);
                }
                Some(lease) => lease.token.saturating_add(1),
                None => 1,
            };
            db.execute(
                "INSERT INTO leases (name, holder, token, expires_at) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                 token = excluded.token, expires_at = excluded.expires_at",
                args![name, holder, token, expires_at],
            )?;
            if current.as_ref().is_none_or(|lease| lease.holder != holder) {
                audit(
                    db,
                    now,
                    holder,
                    "lease.acquire",
                    &format!("lease/{name}"),
                    &json!({
                        "token": token,
                        "from": current.as_ref().map(|lease| &lease.holder),
                    }),
                )?;
            }
            load_lease(db, name)
        })
    }

    fn lease_release(&self, name: &str, holder: &str, token: i64) -> Result<()> {
        self.write(|db, now| {
            let released = db.execute(
                "UPDATE leases SET expires_at = ?4 \
                 WHERE name = ?1 AND holder = ?2 AND token = ?3",
                args![name, holder, token, now.unix_millis()],
            )?;
            if released > 0 {
                audit(
                    db,
                    now,
                    holder,
                    "lease.release",
                    &format!("lease/{name}"),
                    &json!({ "token": token }),
                )?;
            }
            Ok(())
        })
    }

    fn lease_get(&self, name: &str) -> Result<Option<Lease>> {
        self.read(|db| load_lease(db, name))
    }

    fn domain_add(&self, actor: &str, name: &str, service: &str, env: &str) -> Result<Domain> {
        if name.is_empty() || name != name.to_ascii_lowercase() {
            return Err(StoreError::Invalid(format!(
                "domain {name:?} must be a lower-case name"
            )));
        }
        self.write(|db, now| {
            load_service_env(db, service, env)?;
            if let Some(taken) = db.query_one(
                &format!("SELECT {DOMAIN_COLUMNS} FROM domains WHERE name = ?1"),
                args![name],
                domain_from_row,
            )? {
                return Err(StoreError::AlreadyExists {
                    kind: "domain",
                    name: format!("{name} (routed to {} in {})", taken.service, taken.env),
                });
            }
            db.execute(
                "INSERT INTO domains (name, service, env, state, attempts, next_attempt_at, \
                 generation, created_at, created_by, updated_at) \
                 VALUES (?1, ?2, ?3, 'pending', 0, ?4, 0, ?4, ?5, ?4)",
                args![name, service, env, now.unix_millis(), actor],
            )?;
            audit(
                db,
                now,
                actor,
                "domain.add",
                &format!("domain/{name}"),
                &json!({ "service": service, "env": env }),
            )?;
            load_domain(db, name)
        })
    }

    fn domain_remove(&self, actor: &str, name: &str) -> Result<()> {
        self.write(|db, now| {
            let domain = load_domain(db, name)?;
            db.execute("DELETE FROM domains WHERE name = ?1", args![name])?;
            audit(
                db,
                now,
                actor,
                "domain.remove",
                &format!("domain/{name}"),
                &json!({ "service": domain.service, "env": domain.env }),
            )
        })
    }

    fn maintenance_set(
        &self,
        actor: &str,
        service: &str,
        env: &str,
        maintenance: Option<&Maintenance>,
    ) -> Result<Option<Maintenance>> {
        self.write(|db, now| {
            load_service_env(db, service, env)?;
            let target = format!("service/{service}/env/{env}");
            let Some(maintenance) = maintenance else {
                let removed = db.execute(
                    "DELETE FROM maintenance WHERE service = ?1 AND env = ?2",
                    args![service, env],
                )?;
                if removed > 0 {
                    audit(db, now, actor, "maintenance.off", &target, &json!({}))?;
                }
                return Ok(None);
            };
            let allow = to_json(&maintenance.allow)?;
            db.execute(
                "INSERT INTO maintenance (service, env, message, allow, retry_after_seconds, \
                 since, set_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                 ON CONFLICT (service, env) DO UPDATE SET message = excluded.message, \
                 allow = excluded.allow, retry_after_seconds = excluded.retry_after_seconds",
                args![
                    service,
                    env,
                    maintenance.message.as_str(),
                    allow.as_str(),
                    i64::from(maintenance.retry_after_seconds),
                    now.unix_millis(),
                    actor
                ],
            )?;
            audit(
                db,
                now,
                actor,
                "maintenance.on",
                &target,
                &json!({
                    "message": maintenance.message,
                    "allow": maintenance.allow,
                    "retry_after_seconds": maintenance.retry_after_seconds,
                }),
            )?;
            load_maintenance(db, service, env)
        })
    }

    fn maintenance_list(&self) -> Result<Vec<Maintenance>> {
        self.read(|db| {
            db.query_all(
                &format!("SELECT {MAINTENANCE_COLUMNS} FROM maintenance ORDER BY service, env"),
                args![],
                maintenance_from_row,
            )
        })
    }

    fn maintenance_get(&self, service: &str, env: &str) -> Result<Option<Maintenance>> {
        self.read(|db| {
            load_service_env(db, service, env)?;
            load_maintenance(db, service, env)
        })
    }

    fn domain_list(&self) -> Result<Vec<Domain>> {
        self.read(|db| {
            db.query_all(
                &format!("SELECT {DOMAIN_COLUMNS} FROM domains ORDER BY name"),
                args![],
                domain_from_row,
            )
        })
    }

    fn domain_certificates(&self) -> Result<Vec<DomainCertificate>> {
        self.read(|db| {
            db.query_all(
                "SELECT name, cert_pem, generation, key_nonce, key_ciphertext FROM domains \
                 WHERE cert_pem IS NOT NULL AND key_ciphertext IS NOT NULL ORDER BY name",
                args![],
                |row| {
                    Ok(DomainCertificate {
                        name: row.get(0)?,
                        cert_pem: row.get(1)?,
                        generation: get_u32(row, 2, "domain generation")?,
                        nonce: row.get(3)?,
                        ciphertext: row.get(4)?,
                    })
                },
            )
        })
    }

    fn domain_issued(
        &self,
        actor: &str,
        name: &str,
        certificate: &IssuedCertificate,
    ) -> Result<Domain> {
        self.write(|db, now| {
            let domain = load_domain(db, name)?;
            if certificate.generation != domain.generation.saturating_add(1) {
                return Err(StoreError::Conflict(format!(
                    "domain {name} is at certificate {}, not {}",
                    domain.generation,
                    certificate.generation.saturating_sub(1)
                )));
            }
            db.execute(
                "UPDATE domains SET state = 'issued', detail = NULL, attempts = 0, \
                 next_attempt_at = ?2, cert_pem = ?3, not_after = ?4, key_nonce = ?5, \
                 key_ciphertext = ?6, generation = ?7, updated_at = ?8 WHERE name = ?1",
                args![
                    name,
                    certificate.renew_at.unix_millis(),
                    &certificate.cert_pem,
                    certificate.not_after.unix_millis(),
                    &certificate.nonce,
                    &certificate.ciphertext,
                    i64::from(certificate.generation),
                    now.unix_millis()
                ],
            )?;
            audit(
                db,
                now,
                actor,
                "domain.issued",
                &format!("domain/{name}"),
                &json!({ "not_after": certificate.not_after, "generation": certificate.generation }),
            )?;
            load_domain(db, name)
        })
    }

    fn domain_failed(
        &self,
        actor: &str,
        name: &str,
        detail: &str,
        retry_at: Timestamp,
    ) -> Result<Domain> {
        self.write(|db, now| {
            load_domain(db, name)?;
            db.execute(
                "UPDATE domains SET state = 'failed', detail = ?2, attempts = attempts + 1, \
                 next_attempt_at = ?3, updated_at = ?4 WHERE name = ?1",
                args![name, detail, retry_at.unix_millis(), now.unix_millis()],
            )?;
            audit(
                db,
                now,
                actor,
                "domain.failed",
                &format!("domain/{name}"),
                &json!({ "detail": detail, "retry_at": retry_at }),
            )?;
            load_domain(db, name)
        })
    }

    fn acme_account_get(&self, directory: &str) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.read(|db| {
            db.query_one(
                "SELECT nonce, ciphertext FROM acme_accounts WHERE directory = ?1",
                args![directory],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
        })
    }

    fn acme_account_put(
        &self,
        actor: &str,
        directory: &str,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        self.write(|db, now| {
            let kept: Option<(Vec<u8>, Vec<u8>)> = db.query_one(
                "SELECT nonce, ciphertext FROM acme_accounts WHERE directory = ?1",
                args![directory],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?;
            if let Some(kept) = kept {
                return Ok(kept);
            }
            db.execute(
                "INSERT INTO acme_accounts (directory, nonce, ciphertext, created_at) \
                 VALUES (?1, ?2, ?3, ?4)",
                args![directory, nonce, ciphertext, now.unix_millis()],
            )?;
            audit(
                db,
                now,
                actor,
                "acme.account",
                &format!("acme/{directory}"),
                &json!({}),
            )?;
            Ok((nonce.to_vec(), ciphertext.to_vec()))
        })
    }

    fn identity_keys(&self, now: Timestamp) -> Result<Vec<IdentityKey>> {
        self.read(|db| {
            db.query_all(
                &format!(
                    "SELECT {IDENTITY_KEY_COLUMNS} FROM identity_keys WHERE expires_at > ?1 \
                     ORDER BY created_at DESC, kid"
                ),
                args![now.unix_millis()],
                identity_key_from_row,
            )
        })
    }

    fn identity_key_add(
        &self,
        actor: &str,
        key: &IdentityKey,
        newer_than: Timestamp,
        now: Timestamp,
    ) -> Result<IdentityKey> {
        self.write(|db, at| {
            db.execute(
                "DELETE FROM identity_keys WHERE expires_at <= ?1",
                args![now.unix_millis()],
            )?;
            let newest: Option<IdentityKey> = db.query_one(
                &format!(
                    "SELECT {IDENTITY_KEY_COLUMNS} FROM identity_keys WHERE created_at > ?1 \
                     ORDER BY created_at DESC, kid LIMIT 1"
                ),
                args![newer_than.unix_millis()],
                identity_key_from_row,
            )?;
            if let Some(newest) = newest {
                return Ok(newest);
            }
            db.execute(
                "INSERT INTO identity_keys (kid, nonce, ciphertext, public_jwk, created_at, \
                 expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                args![
                    key.kid.as_str(),
                    key.nonce.as_slice(),
                    key.ciphertext.as_slice(),
                    key.public_jwk.as_str(),
                    key.created_at.unix_millis(),
                    key.expires_at.unix_millis()
                ],
            )?;
            audit(
                db,
                at,
                actor,
                "identity.key",
                &format!("identity-key/{}", key.kid),
                &json!({ "expires_at": key.expires_at.unix_millis() }),
            )?;
            Ok(key.clone())
        })
    }

    fn fenced(self: Arc<Self>, fence: FenceCell) -> Arc<dyn Store> {
        self.into_fenced(fence)
    }
}

const IDENTITY_KEY_COLUMNS: &str = "kid, nonce, ciphertext, public_jwk, created_at, expires_at";

fn identity_key_from_row(row: &Row) -> Result<IdentityKey> {
    Ok(IdentityKey {
        kid: row.get(0)?,
        nonce: row.get(1)?,
        ciphertext: row.get(2)?,
        public_jwk: row.get(3)?,
        created_at: get_ts(row, 4)?,
        expires_at: get_ts(row, 5)?,
    })
}

fn load_token(db: &dyn Db, id: i64) -> Result<Token> {
    db.query_one(
        &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = ?1"),
        args![id],
        token_from_row,
    )?
    .ok_or_else(|| not_found("token", id.to_string()))
}

// --- leases ----------------------------------------------------------------------------

fn load_lease(db: &dyn Db, name: &str) -> Result<Option<Lease>> {
    db.query_one(
        "SELECT name, holder, token, expires_at FROM leases WHERE name = ?1",
        args![name],
        |row| {
            Ok(Lease {
                name: row.get(0)?,
                holder: row.get(1)?,
                token: row.get(2)?,
                expires_at: get_ts(row, 3)?,
            })
        },
    )
}

/// A handle whose writes are fenced (see [`Store::fenced`]).
#[derive(Debug)]
pub(crate) struct Fenced<B> {
    inner: Arc<B>,
    fence: FenceCell,
}

impl<B: Backend> Backend for Fenced<B> {
    fn write<T: Send>(&self, f: impl FnOnce(&dyn Db, Timestamp) -> Result<T> + Send) -> Result<T> {
        let Some(fence) = self.fence.get() else {
            return Err(StoreError::NotLeading);
        };
        self.inner.write(|db, now| {
            // In the write's own transaction, which excludes every other writer: once another
            // holder took the lease (a newer token), nothing of this one's is written.
            let held = load_lease(db, &fence.lease)?
                .is_some_and(|lease| lease.holder == fence.holder && lease.token == fence.token);
            if !held {
                return Err(StoreError::Fenced {
                    lease: fence.lease.clone(),
                    token: fence.token,
                });
            }
            f(db, now)
        })
    }

    fn read<T: Send>(&self, f: impl FnOnce(&dyn Db) -> Result<T> + Send) -> Result<T> {
        self.inner.read(f)
    }

    /// Behind another fence instead, not behind both.
    fn into_fenced(self: Arc<Self>, fence: FenceCell) -> Arc<dyn Store> {
        Arc::new(Fenced {
            inner: Arc::clone(&self.inner),
            fence,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(heaviest(Some(&desired(&[("failed", 0)]))), None);
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
