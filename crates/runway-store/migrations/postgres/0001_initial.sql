-- Runway's store on PostgreSQL, schema version 1: the same tables, columns and rules as the
-- SQLite schema at its version 3 (../0001 to ../0003), in PostgreSQL's types.
--
-- Integers are BIGINT (the store reads and writes 64-bit integers only), booleans are BIGINT
-- 0 or 1, timestamps Unix milliseconds, JSON columns serde_json text, byte strings BYTEA: what
-- the store's logic reads back is the same whichever database holds it. Applied inside a
-- transaction by src/postgres.rs, which records the version in runway_schema.

CREATE TABLE service_ids (
    id   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name TEXT   NOT NULL
);

CREATE TABLE services (
    name            TEXT   NOT NULL PRIMARY KEY,
    owners          TEXT   NOT NULL,
    environments    TEXT   NOT NULL,
    created_at      BIGINT NOT NULL,
    created_by      TEXT   NOT NULL,
    id              BIGINT NOT NULL UNIQUE,
    allow_processes BIGINT NOT NULL DEFAULT 0 CHECK (allow_processes IN (0, 1))
);

CREATE TABLE revisions (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    service         TEXT   NOT NULL REFERENCES services (name) ON DELETE CASCADE,
    env             TEXT   NOT NULL,
    number          BIGINT NOT NULL CHECK (number > 0),
    name            TEXT   NOT NULL UNIQUE,
    manifest        TEXT   NOT NULL,
    artifact        TEXT   NOT NULL,
    env_vars        TEXT   NOT NULL,
    secret_versions TEXT   NOT NULL,
    created_by      TEXT   NOT NULL,
    created_at      BIGINT NOT NULL,
    UNIQUE (service, env, number)
);

CREATE FUNCTION revisions_are_immutable() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'revisions are immutable';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER revisions_are_immutable BEFORE UPDATE ON revisions
    FOR EACH ROW EXECUTE FUNCTION revisions_are_immutable();

CREATE TABLE deployments (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    service       TEXT   NOT NULL REFERENCES services (name) ON DELETE CASCADE,
    env           TEXT   NOT NULL,
    kind          TEXT   NOT NULL CHECK (kind IN ('deploy', 'rollback', 'promote')),
    from_revision TEXT   REFERENCES revisions (name) ON DELETE CASCADE,
    to_revision   TEXT   NOT NULL REFERENCES revisions (name) ON DELETE CASCADE,
    state         TEXT   NOT NULL
        CHECK (state IN ('pending', 'progressing', 'succeeded', 'failed', 'rolled_back')),
    reason        TEXT,
    created_by    TEXT   NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    rollout       TEXT,
    command       TEXT   CHECK (command IN ('pause', 'resume', 'abort', 'promote'))
);

CREATE INDEX deployments_by_service_env ON deployments (service, env, id);
CREATE INDEX deployments_from_revision ON deployments (from_revision);
CREATE INDEX deployments_to_revision ON deployments (to_revision);

CREATE TABLE deployment_events (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    deployment_id BIGINT NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
    at            BIGINT NOT NULL,
    message       TEXT   NOT NULL
);

CREATE INDEX deployment_events_by_deployment ON deployment_events (deployment_id, id);

CREATE TABLE desired (
    service    TEXT   NOT NULL REFERENCES services (name) ON DELETE CASCADE,
    env        TEXT   NOT NULL,
    generation BIGINT NOT NULL CHECK (generation > 0),
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (service, env)
);

CREATE TABLE desired_revisions (
    service   TEXT   NOT NULL,
    env       TEXT   NOT NULL,
    position  BIGINT NOT NULL,
    revision  TEXT   NOT NULL REFERENCES revisions (name) ON DELETE CASCADE,
    instances BIGINT NOT NULL CHECK (instances >= 0),
    weight    BIGINT NOT NULL CHECK (weight >= 0),
    PRIMARY KEY (service, env, position),
    UNIQUE (service, env, revision),
    FOREIGN KEY (service, env) REFERENCES desired (service, env) ON DELETE CASCADE
);

CREATE INDEX desired_revisions_by_revision ON desired_revisions (revision);

CREATE TABLE secrets (
    service    TEXT   NOT NULL,
    env        TEXT   NOT NULL,
    name       TEXT   NOT NULL,
    version    BIGINT NOT NULL CHECK (version > 0),
    nonce      BYTEA  NOT NULL,
    ciphertext BYTEA  NOT NULL,
    created_by TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    deleted_at BIGINT,
    PRIMARY KEY (service, env, name, version)
);

CREATE TABLE tokens (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       TEXT   NOT NULL,
    hash       BYTEA  NOT NULL UNIQUE,
    scope      TEXT   NOT NULL,
    expires_at BIGINT,
    revoked_at BIGINT,
    created_at BIGINT NOT NULL,
    created_by TEXT   NOT NULL
);

CREATE TABLE audit (
    id     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     BIGINT NOT NULL,
    actor  TEXT   NOT NULL,
    action TEXT   NOT NULL,
    target TEXT   NOT NULL,
    detail TEXT   NOT NULL
);

CREATE INDEX audit_by_target ON audit (target, id);

CREATE TABLE revision_numbers (
    service TEXT   NOT NULL,
    env     TEXT   NOT NULL,
    last    BIGINT NOT NULL CHECK (last > 0),
    PRIMARY KEY (service, env)
);
