-- Runway's store, schema version 10: the audit log as a hash chain, and how far each export
-- sink has acknowledged it.
--
-- Each entry carries `prev_hash`, the `hash` of the entry before it (64 zeros before the first
-- entry), and its own `hash`: lower-case hex SHA-256 of `prev_hash` (its 64 ASCII characters)
-- followed by the entry's canonical encoding (src/audit.rs says it exactly). SQL cannot compute
-- it, so entries written before this migration, which it leaves with NULL hashes, are chained
-- in id order by the next write transaction (opening the store makes one): the same step that
-- chains each new entry in the transaction that writes it.
--
-- `audit_head` is one row: the last chained entry and its hash (id 0 and 64 zeros before any).
-- Every chaining updates it in the writing transaction, so an entry removed from the end of the
-- log is noticed too. Applied inside a transaction by src/migrate.rs, which then sets
-- PRAGMA user_version = 10.

ALTER TABLE audit ADD COLUMN prev_hash TEXT;
ALTER TABLE audit ADD COLUMN hash TEXT;

CREATE TABLE audit_head (
    one  INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
    id   INTEGER NOT NULL,
    hash TEXT    NOT NULL
) STRICT;

INSERT INTO audit_head (one, id, hash)
VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');

-- An export sink (`audit.export[].name` in the server's configuration): the last entry it
-- acknowledged (0: none), when, and its last failure while it is failing. Moving it is not
-- audited: an entry for each would feed the export itself.
CREATE TABLE audit_export (
    sink          TEXT    NOT NULL PRIMARY KEY,
    acked_id      INTEGER NOT NULL,
    acked_at      INTEGER,
    error         TEXT,
    failing_since INTEGER,
    updated_at    INTEGER NOT NULL
) STRICT;
