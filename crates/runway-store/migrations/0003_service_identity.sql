-- Runway's store, schema version 3: a service's identity, and whether it may run plain
-- processes.
--
-- A service's name can be used again after it is decommissioned; its identity cannot. Ids come
-- from service_ids, whose AUTOINCREMENT never hands out a number twice, even after the row that
-- had it is gone. The runtime derives each service's own unprivileged user from it, so a service
-- onboarded again under an old name never gets the old one's files or processes. Applied inside
-- a transaction by src/migrate.rs, which then sets PRAGMA user_version = 3.

CREATE TABLE service_ids (
    id   INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    name TEXT    NOT NULL -- the name it was given first, for the record
) STRICT;

INSERT INTO service_ids (name) SELECT name FROM services ORDER BY created_at, name;

-- NULL only between these statements: every service has an id from here on.
ALTER TABLE services ADD COLUMN id INTEGER;
UPDATE services SET id = (SELECT max(i.id) FROM service_ids AS i WHERE i.name = services.name);
CREATE UNIQUE INDEX services_by_id ON services (id);

-- An admin's leave for this service to run plain processes (`spec.workload.process`) on a
-- server whose operator has not allowed them for every service (`runtime.allow_processes`).
ALTER TABLE services ADD COLUMN allow_processes INTEGER NOT NULL DEFAULT 0
    CHECK (allow_processes IN (0, 1));

-- The last revision number given per service name and environment. No foreign key: it
-- outlives a decommission, so a service onboarded again under the name goes on from there and
-- never reuses a revision name (nor instance ids) its predecessor had, whose instances may
-- still be draining.
CREATE TABLE revision_numbers (
    service TEXT    NOT NULL,
    env     TEXT    NOT NULL,
    last    INTEGER NOT NULL CHECK (last > 0),
    PRIMARY KEY (service, env)
) STRICT;

INSERT INTO revision_numbers (service, env, last)
    SELECT service, env, MAX(number) FROM revisions GROUP BY service, env;
