-- Runway's store on PostgreSQL, schema version 5: which of a revision's environment variables
-- were set with `runway env set` (as the SQLite schema's version 7).

ALTER TABLE revisions ADD COLUMN set_vars TEXT NOT NULL DEFAULT '[]';
