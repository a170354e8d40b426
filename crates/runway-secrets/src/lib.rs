//! Secrets at rest and API tokens for Runway's control plane: the cryptography and the
//! policy, with no database. The store keeps what this crate produces (sealed values, token
//! hashes, scopes) and asks it every question about them.
//!
//! - [`key`]: the master key file, created once, atomically, readable by its owner only.
//! - [`seal`]: secret values sealed with XChaCha20-Poly1305, bound to their row.
//! - [`name`]: what a secret's name may be, and clashes with environment variables.
//! - [`token`]: API tokens' text (prefix, checksum) and the hash the store keeps.
//! - [`policy`]: whether a token's scope allows an action; pure.
//! - [`preview`]: preview environments' names (`mr-12--app`), whose tokens and secrets they
//!   use.
//!
//! # Threat model
//!
//! Protected:
//!
//! - **Theft of the database alone** (a copied SQLite file, a backup, a replica) reveals no
//!   secret value and no usable token: values are sealed under a master key that lives in
//!   its own file, outside the database, and tokens are stored only as SHA-256 hashes.
//! - **Moving ciphertext between rows** by someone who can write the database but not read
//!   the key: each value is bound to its service, environment, name and version as associated
//!   data, so a value copied to another row (to be injected into another service, or served
//!   as another secret) fails to open instead of leaking.
//! - **Tampering** with a sealed value: Poly1305 authenticates it; a changed byte fails to
//!   open.
//! - **Accidental disclosure** in logs and errors: secret values, the key and plaintext
//!   tokens print as `<redacted>`, have no `Serialize`, and are wiped from memory when
//!   dropped; no error message holds a value, the key or a token's text.
//! - **Typos and leaked tokens**: a token's checksum rejects a mistyped token before any
//!   lookup, and its fixed `runway_admin_` / `runway_deploy_` prefix lets secret scanners find
//!   leaked ones.
//!
//! Not protected:
//!
//! - **Theft of the key file with the database**, or anyone running as the control plane's
//!   user or as root on its machine: they can read the key, open every secret and act as the
//!   server. Keep the key off the database's backups, or back it up separately.
//! - **A compromised control plane process**: it holds the key and opens secrets to inject
//!   them. Zeroizing narrows what a memory dump finds; it does not stop a live attacker, and
//!   copies made by the OS (swap, core dumps) or by callers are outside its reach.
//! - **Rolling a row back** to an older sealed value of the *same* context (the same version):
//!   versions are immutable, so there is nothing to roll back to, and the store's version
//!   counter is trusted.
//! - **Side channels** beyond constant-time comparison of token hashes.
//!
//! # Design choices
//!
//! - **XChaCha20-Poly1305** (RustCrypto): a 24-byte nonce can be random for every seal with
//!   no counter to keep across restarts or replicas; pure Rust, fast without AES hardware.
//! - **A format byte** at the start of every ciphertext ([`seal::FORMAT_V1`]) so the key or the
//!   algorithm can change later without guessing what an old row is.
//! - **A raw 32-byte key file** with mode 0600, checked on every load: simple to back up and
//!   restore, and refused when group or others can read it.
//! - **SHA-256 of the token's text**, not a slow password hash: tokens carry 256 random bits,
//!   so a fast hash is as strong, and allows an indexed lookup (see [`token`]).
//! - **Policy as a pure function** of scope, action, time and revocation, so it is
//!   table-tested; the store supplies the scope and the revocation flag.
//!
//! # Files
//!
//! - `key.rs`: the master key file (32 bytes, `0600`, created once atomically, refused when group
//!   or others can read it).
//! - `seal.rs`: XChaCha20-Poly1305 with the service, environment, name and version as associated
//!   data, behind a format byte. A secret value must fit an environment variable
//!   (`SecretValue::check`: no NUL, at most 64 KiB).
//! - `name.rs`: secret names (upstream's rules, reserved names, clashes with variables).
//! - `token.rs`: `runway_admin_…` and `runway_deploy_…` tokens with a checksum, stored as
//!   SHA-256.
//! - `policy.rs`: whether a scope allows an action (pure). `preview.rs`: previews' names.
//!   `error.rs`: the crate's errors.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

pub mod error;
pub mod key;
pub mod name;
pub mod policy;
pub mod preview;
pub mod seal;
pub mod token;

pub use error::{Error, TokenError};
pub use key::{KEY_LEN, MasterKey};
pub use name::{NameError, check_clashes, validate_name};
pub use policy::{Action, Denied, Env, Grant, Need, Role, Scope, Target, authorize};
pub use seal::{Context, MAX_VALUE_BYTES, Sealed, Sealer, SecretValue, ValueError};
pub use token::{PlaintextToken, Token, TokenHash, TokenKind};

/// `N` random bytes from the operating system.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], Error> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(Error::Random)?;
    Ok(bytes)
}
