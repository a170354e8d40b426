-- Runway's store on PostgreSQL, schema version 7: teams (as the SQLite schema's version 9).

CREATE TABLE teams (
    name       TEXT   NOT NULL PRIMARY KEY,
    members    TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    created_by TEXT   NOT NULL,
    updated_at BIGINT NOT NULL
);

ALTER TABLE services ADD COLUMN team TEXT REFERENCES teams (name);
