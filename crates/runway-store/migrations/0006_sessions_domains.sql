-- Runway's store, schema version 6: console sessions and custom domains. Applied inside a
-- transaction by src/migrate.rs, which then sets PRAGMA user_version = 6.

-- A console session is a token made from the one its user signed in with (its parent), with
-- the parent's scope and a shorter life. Revoking a token revokes the sessions made from it.
ALTER TABLE tokens ADD COLUMN parent_id INTEGER REFERENCES tokens (id);

-- A custom domain routed to a service's environment, with the certificate obtained for it
-- from an ACME directory: its chain (public) and its key, sealed with the master key for
-- ('', 'domain', name, generation). A failed renewal keeps the certificate it had.
CREATE TABLE domains (
    name            TEXT    NOT NULL PRIMARY KEY, -- lower-case, as DNS compares
    service         TEXT    NOT NULL REFERENCES services (name) ON DELETE CASCADE,
    env             TEXT    NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('pending', 'issued', 'failed')),
    detail          TEXT,    -- why the last attempt failed: the ACME server's own words
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0), -- failures in a row
    next_attempt_at INTEGER, -- when the issuer next orders (a retry or a renewal)
    cert_pem        TEXT,
    not_after       INTEGER,
    key_nonce       BLOB,
    key_ciphertext  BLOB,
    generation      INTEGER NOT NULL DEFAULT 0 CHECK (generation >= 0), -- certificates stored
    created_at      INTEGER NOT NULL,
    created_by      TEXT    NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;

-- An ACME account per directory: its credentials (key and URL) sealed for
-- ('', 'acme-account', directory, 1).
CREATE TABLE acme_accounts (
    directory  TEXT    NOT NULL PRIMARY KEY,
    nonce      BLOB    NOT NULL,
    ciphertext BLOB    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;
