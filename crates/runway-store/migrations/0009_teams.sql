-- Runway's store, schema version 9: teams. A team's members (people by name, or everyone in a
-- group of the sign-in provider) have a role on every service the team owns; a service has at
-- most one team. A team that owns services is not removed. Applied inside a transaction by
-- src/migrate.rs, which then sets PRAGMA user_version = 9.

CREATE TABLE teams (
    name       TEXT    NOT NULL PRIMARY KEY,
    members    TEXT    NOT NULL, -- JSON array of {subject, role, environments}
    created_at INTEGER NOT NULL,
    created_by TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;

ALTER TABLE services ADD COLUMN team TEXT REFERENCES teams (name);
