-- Runway's store, schema version 8: preview environments, and what the inventory says of a
-- service.
--
-- Preview environments. Preview `mr-12` of service `app` is
-- the service `mr-12--app` (a row of `services`, whose one environment is `preview`); this
-- row says whose preview it is, which environment's settings it was deployed with, what made
-- it (a merge request's pipeline: JSON) and when it goes unless a deploy extends it. It goes
-- with its service; decommissioning the parent decommissions its previews. Applied inside a
-- transaction by src/migrate.rs, which then sets PRAGMA user_version = 8.

CREATE TABLE previews (
    service    TEXT    NOT NULL PRIMARY KEY REFERENCES services (name) ON DELETE CASCADE,
    parent     TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    base_env   TEXT    NOT NULL,
    origin     TEXT    NOT NULL, -- JSON object
    expires_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    created_by TEXT    NOT NULL,
    updated_at INTEGER NOT NULL,
    UNIQUE (parent, name)
) STRICT;

CREATE INDEX previews_by_expiry ON previews (expires_at);

-- Upstream's keys of a service onboarded through the inventory (`runway inventory apply`):
-- project_id, members, groups, regions… as a JSON object; NULL for one onboarded by hand.
ALTER TABLE services ADD COLUMN inventory TEXT;
