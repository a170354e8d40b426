-- Runway's store on PostgreSQL, schema version 3: where a secret version came from (as the
-- SQLite schema's version 5).

ALTER TABLE secrets ADD COLUMN origin TEXT;
