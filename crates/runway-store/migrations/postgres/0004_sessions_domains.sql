-- Runway's store on PostgreSQL, schema version 4: console sessions and custom domains (as the
-- SQLite schema's version 6, which says what each column holds).

ALTER TABLE tokens ADD COLUMN parent_id BIGINT REFERENCES tokens (id);

CREATE TABLE domains (
    name            TEXT   NOT NULL PRIMARY KEY,
    service         TEXT   NOT NULL REFERENCES services (name) ON DELETE CASCADE,
    env             TEXT   NOT NULL,
    state           TEXT   NOT NULL CHECK (state IN ('pending', 'issued', 'failed')),
    detail          TEXT,
    attempts        BIGINT NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at BIGINT,
    cert_pem        TEXT,
    not_after       BIGINT,
    key_nonce       BYTEA,
    key_ciphertext  BYTEA,
    generation      BIGINT NOT NULL DEFAULT 0 CHECK (generation >= 0),
    created_at      BIGINT NOT NULL,
    created_by      TEXT   NOT NULL,
    updated_at      BIGINT NOT NULL
);

CREATE TABLE acme_accounts (
    directory  TEXT   NOT NULL PRIMARY KEY,
    nonce      BYTEA  NOT NULL,
    ciphertext BYTEA  NOT NULL,
    created_at BIGINT NOT NULL
);
