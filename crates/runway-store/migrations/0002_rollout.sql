-- Runway's store, schema version 2: progressive-delivery state on deployments.
--
-- Both columns are nullable, so existing deployments get NULL: no rollout progress saved yet,
-- no command waiting. Applied inside a transaction by src/migrate.rs, which then sets
-- PRAGMA user_version = 2.

-- The rollout controller's progress (canary or blue-green step, weights, analysis), JSON
-- opaque to the store, written by the controller and read back after a restart. NULL before
-- its first step.
ALTER TABLE deployments ADD COLUMN rollout TEXT;

-- An operator's command the controller has not carried out yet. A newer command replaces an
-- unconsumed one; the controller clears it when it saves the rollout that carried it out, and
-- a terminal state clears it because nothing will.
ALTER TABLE deployments ADD COLUMN command TEXT
    CHECK (command IN ('pause', 'resume', 'abort', 'promote'));
