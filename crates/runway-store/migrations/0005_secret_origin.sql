-- Runway's store, schema version 5: where a secret version came from. NULL for a value set
-- through the API; for one mirrored from OpenBao or Vault, its place and KV version
-- (`vault secret/runway/env/production/service/app/API_KEY version 3`), so a deploy mirrors a
-- value again only when Vault's version changed, and a revision pinning a sealed version
-- pins the KV version it was read at. Applied inside a transaction by src/migrate.rs, which
-- then sets PRAGMA user_version = 5.

ALTER TABLE secrets ADD COLUMN origin TEXT;
