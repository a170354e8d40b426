-- Runway's store, schema version 11: the keys Runway signs instances' identity tokens with, as
-- an OpenID Connect issuer. Each private key is sealed with the master key (`nonce`,
-- `ciphertext`, bound to its `kid`); `public_jwk` is the JSON Web Key the issuer publishes. A key
-- signs from `created_at` until a newer one exists, and is published until `expires_at`, past the
-- last token it signed. Applied inside a transaction by src/migrate.rs, which then sets
-- PRAGMA user_version = 11.

CREATE TABLE identity_keys (
    kid        TEXT    NOT NULL PRIMARY KEY,
    nonce      BLOB    NOT NULL,
    ciphertext BLOB    NOT NULL,
    public_jwk TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
