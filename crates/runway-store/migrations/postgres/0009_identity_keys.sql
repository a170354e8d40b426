-- Runway's store on PostgreSQL, schema version 9: identity token signing keys (as the SQLite
-- schema's version 11).

CREATE TABLE identity_keys (
    kid        TEXT   NOT NULL PRIMARY KEY,
    nonce      BYTEA  NOT NULL,
    ciphertext BYTEA  NOT NULL,
    public_jwk TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
