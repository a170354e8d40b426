-- Runway's store, schema version 7: which of a revision's environment variables were set with
-- `runway env set` (`POST …/variables`) rather than by the repository's env-<env>.yml, as a
-- JSON array of names. A deploy from the repository keeps those over the repository's values
-- until they are unset. Revisions from before have none. Applied inside a transaction by
-- src/migrate.rs, which then sets PRAGMA user_version = 7.

ALTER TABLE revisions ADD COLUMN set_vars TEXT NOT NULL DEFAULT '[]';
