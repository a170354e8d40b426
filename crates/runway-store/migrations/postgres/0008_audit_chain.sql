-- Runway's store on PostgreSQL, schema version 8: the audit log as a hash chain, and how far
-- each export sink has acknowledged it (as the SQLite schema's version 10, whose file says more).
--
-- Each entry carries `prev_hash` (the hash of the entry before it; 64 zeros before the first)
-- and its own `hash`, lower-case hex SHA-256 of `prev_hash` and the entry's canonical encoding
-- (src/audit.rs). Entries written before this migration are chained, in id order, by the next
-- write transaction (opening the store makes one). `audit_head` is the last chained entry: the
-- chaining step updates its one row, a row lock held to the commit, so however many replicas
-- write, one chains at a time (every write also holds the store's advisory lock). Moving an
-- export sink's cursor is not audited: an entry for each would feed the export itself.

ALTER TABLE audit ADD COLUMN prev_hash TEXT;
ALTER TABLE audit ADD COLUMN hash TEXT;

CREATE TABLE audit_head (
    one  SMALLINT NOT NULL PRIMARY KEY CHECK (one = 1),
    id   BIGINT NOT NULL,
    hash TEXT    NOT NULL
);

INSERT INTO audit_head (one, id, hash)
VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');

-- An export sink (`audit.export[].name`): the last entry it acknowledged (0: none), when, and
-- its last failure while it is failing.
CREATE TABLE audit_export (
    sink          TEXT    NOT NULL PRIMARY KEY,
    acked_id      BIGINT  NOT NULL,
    acked_at      BIGINT,
    error         TEXT,
    failing_since BIGINT,
    updated_at    BIGINT NOT NULL
);
