-- Runway's store on PostgreSQL, schema version 10: services in maintenance (as the SQLite
-- schema's version 12).

CREATE TABLE maintenance (
    service             TEXT   NOT NULL REFERENCES services (name) ON DELETE CASCADE,
    env                 TEXT   NOT NULL,
    message             TEXT   NOT NULL,
    allow               TEXT   NOT NULL,
    retry_after_seconds BIGINT NOT NULL CHECK (retry_after_seconds >= 0),
    since               BIGINT NOT NULL,
    set_by              TEXT   NOT NULL,
    PRIMARY KEY (service, env)
);
