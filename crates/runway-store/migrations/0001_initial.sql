-- Runway's store, schema version 1.
--
-- Timestamps are Unix milliseconds (INTEGER). JSON columns hold serde_json text. Every table is
-- STRICT, so a value of the wrong type is refused rather than stored.
-- Applied inside a transaction by src/migrate.rs, which then sets PRAGMA user_version = 1.

-- The inventory: services onboarded before their first deploy.
CREATE TABLE services (
    name         TEXT    NOT NULL PRIMARY KEY,
    owners       TEXT    NOT NULL, -- JSON array of strings
    environments TEXT    NOT NULL, -- JSON array of strings
    created_at   INTEGER NOT NULL,
    created_by   TEXT    NOT NULL
) STRICT;

-- Immutable revisions. Numbers run 1, 2, 3… per service and environment. They go only with
-- their service (decommissioning), never one by one.
CREATE TABLE revisions (
    id              INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    service         TEXT    NOT NULL REFERENCES services (name) ON DELETE CASCADE,
    env             TEXT    NOT NULL,
    number          INTEGER NOT NULL CHECK (number > 0),
    name            TEXT    NOT NULL UNIQUE,
    manifest        TEXT    NOT NULL, -- JSON
    artifact        TEXT    NOT NULL, -- JSON, opaque to the store
    env_vars        TEXT    NOT NULL, -- JSON object of strings
    secret_versions TEXT    NOT NULL, -- JSON object of integers
    created_by      TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    UNIQUE (service, env, number)
) STRICT;

CREATE TRIGGER revisions_are_immutable
BEFORE UPDATE ON revisions
BEGIN
    SELECT RAISE(ABORT, 'revisions are immutable');
END;

CREATE TABLE deployments (
    id            INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    service       TEXT    NOT NULL REFERENCES services (name) ON DELETE CASCADE,
    env           TEXT    NOT NULL,
    kind          TEXT    NOT NULL CHECK (kind IN ('deploy', 'rollback', 'promote')),
    from_revision TEXT    REFERENCES revisions (name) ON DELETE CASCADE,
    to_revision   TEXT    NOT NULL REFERENCES revisions (name) ON DELETE CASCADE,
    state         TEXT    NOT NULL
        CHECK (state IN ('pending', 'progressing', 'succeeded', 'failed', 'rolled_back')),
    reason        TEXT,
    created_by    TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) STRICT;

CREATE INDEX deployments_by_service_env ON deployments (service, env, id);
CREATE INDEX deployments_from_revision ON deployments (from_revision);
CREATE INDEX deployments_to_revision ON deployments (to_revision);

CREATE TABLE deployment_events (
    id            INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    deployment_id INTEGER NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
    at            INTEGER NOT NULL,
    message       TEXT    NOT NULL
) STRICT;

CREATE INDEX deployment_events_by_deployment ON deployment_events (deployment_id, id);

-- What the reconciler should make true, per service and environment.
CREATE TABLE desired (
    service    TEXT    NOT NULL REFERENCES services (name) ON DELETE CASCADE,
    env        TEXT    NOT NULL,
    generation INTEGER NOT NULL CHECK (generation > 0),
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (service, env)
) STRICT;

CREATE TABLE desired_revisions (
    service   TEXT    NOT NULL,
    env       TEXT    NOT NULL,
    position  INTEGER NOT NULL,
    revision  TEXT    NOT NULL REFERENCES revisions (name) ON DELETE CASCADE,
    instances INTEGER NOT NULL CHECK (instances >= 0),
    weight    INTEGER NOT NULL CHECK (weight >= 0),
    PRIMARY KEY (service, env, position),
    UNIQUE (service, env, revision),
    FOREIGN KEY (service, env) REFERENCES desired (service, env) ON DELETE CASCADE
) STRICT;

CREATE INDEX desired_revisions_by_revision ON desired_revisions (revision);

-- Secrets, sealed by the caller: the store never sees a plaintext value. Deliberately no
-- foreign key to services: decommissioning keeps them unless asked to delete them.
-- Unsetting a name sets deleted_at on all its versions; a later set adds a new version.
CREATE TABLE secrets (
    service    TEXT    NOT NULL,
    env        TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    version    INTEGER NOT NULL CHECK (version > 0),
    nonce      BLOB    NOT NULL,
    ciphertext BLOB    NOT NULL,
    created_by TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    deleted_at INTEGER,
    PRIMARY KEY (service, env, name, version)
) STRICT;

CREATE TABLE tokens (
    id         INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    name       TEXT    NOT NULL,
    hash       BLOB    NOT NULL UNIQUE,
    scope      TEXT    NOT NULL, -- JSON
    expires_at INTEGER,
    revoked_at INTEGER,
    created_at INTEGER NOT NULL,
    created_by TEXT    NOT NULL
) STRICT;

-- Written in the same transaction as every change. No foreign keys: it outlives what it names.
CREATE TABLE audit (
    id     INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    at     INTEGER NOT NULL,
    actor  TEXT    NOT NULL,
    action TEXT    NOT NULL,
    target TEXT    NOT NULL,
    detail TEXT    NOT NULL -- JSON
) STRICT;

CREATE INDEX audit_by_target ON audit (target, id);
