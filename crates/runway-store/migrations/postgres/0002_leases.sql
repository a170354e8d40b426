-- Runway's store on PostgreSQL, schema version 2: leases (as the SQLite schema's version 4).

CREATE TABLE leases (
    name       TEXT   NOT NULL PRIMARY KEY,
    holder     TEXT   NOT NULL,
    token      BIGINT NOT NULL CHECK (token > 0),
    expires_at BIGINT NOT NULL
);
