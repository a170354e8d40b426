-- Runway's store, schema version 4: leases, so that of several control-plane replicas on one
-- store exactly one leads (runs the controller).
--
-- The token grows each time the lease changes hands; a leader's writes carry it and are
-- refused once another holds the lease (fencing). Applied inside a transaction by
-- src/migrate.rs, which then sets PRAGMA user_version = 4.

CREATE TABLE leases (
    name       TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL,
    token      INTEGER NOT NULL CHECK (token > 0),
    expires_at INTEGER NOT NULL
) STRICT;
