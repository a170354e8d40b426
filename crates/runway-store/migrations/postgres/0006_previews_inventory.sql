-- Runway's store on PostgreSQL, schema version 6: preview environments, and what the
-- inventory says of a service (as the SQLite schema's version 8).

CREATE TABLE previews (
    service    TEXT   NOT NULL PRIMARY KEY REFERENCES services (name) ON DELETE CASCADE,
    parent     TEXT   NOT NULL,
    name       TEXT   NOT NULL,
    base_env   TEXT   NOT NULL,
    origin     TEXT   NOT NULL,
    expires_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    created_by TEXT   NOT NULL,
    updated_at BIGINT NOT NULL,
    UNIQUE (parent, name)
);

CREATE INDEX previews_by_expiry ON previews (expires_at);

ALTER TABLE services ADD COLUMN inventory TEXT;
