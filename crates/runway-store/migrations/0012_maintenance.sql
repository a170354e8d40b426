-- Runway's store, schema version 12: services in maintenance. While a row is here the ingress
-- answers the service's requests in `env` with a 503 carrying `message` and `Retry-After:
-- retry_after_seconds`, but for clients in `allow` (a JSON list of networks); its instances
-- keep running. Applied inside a transaction by src/migrate.rs, which then sets
-- PRAGMA user_version = 12.

CREATE TABLE maintenance (
    service             TEXT    NOT NULL REFERENCES services (name) ON DELETE CASCADE,
    env                 TEXT    NOT NULL,
    message             TEXT    NOT NULL,
    allow               TEXT    NOT NULL, -- JSON list of networks let through
    retry_after_seconds INTEGER NOT NULL CHECK (retry_after_seconds >= 0),
    since               INTEGER NOT NULL,
    set_by              TEXT    NOT NULL,
    PRIMARY KEY (service, env)
) STRICT;
