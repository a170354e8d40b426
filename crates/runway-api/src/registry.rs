//! The platform registry's callers are the API's: a Runway token, or a CI job's identity token,
//! given as the password of Basic authentication (`docker login -u <anything> -p <token>`,
//! `skopeo --creds`, a Kubernetes pull secret) or as a bearer token.
//!
//! A repository belongs to the service its first component names (`<service>` or
//! `<service>/...`). An admin token pulls and pushes anywhere; a service's deploy token (or a
//! CI job's identity bound to the service) pulls and pushes under its service, whatever its
//! environments; another service's repositories are refused. `<service>/mirror/...` holds the images the server mirrored at
//! deploy: the service's tokens pull from it, and only the server writes there, so a tenant
//! cannot replace what its running revisions are made of.
//!
//! The server hands out pull-only credentials of its own ([`PullKey`]): the platform's, which
//! pulls every repository (the local runtime starting instances from the mirror), and each
//! service's, which pulls only under that service (a Kubernetes pull secret, the server
//! fetching an image a service names in this registry). They are HMACs of their subject (the
//! platform's user name, or a service's name and id, so a service onboarded again under an old
//! name is not pulled for by the old credential) under a key kept in the data directory, so
//! nothing is stored per credential, and a new key revokes them all.

use std::io::Write as _;
use std::path::Path;

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use base64::Engine as _;
use ring::hmac;
use runway_registry::{Access, Authorizer, Refusal};

use runway_secrets::{Env, Need, Role};

use crate::auth::Caller;
use crate::state::ApiState;

/// The path component, after the service's, of the repositories the server mirrors into.
pub const MIRROR: &str = "mirror";

/// The user name of the platform's pull credential. A service's name has no `.`, so no
/// service's credential is this one.
pub const PLATFORM_PULLER: &str = "runway.platform";

/// What begins a pull-only password [`PullKey`] made.
const PULL_PREFIX: &str = "rwpull_";

/// Who may pull what, by a pull-only credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Puller<'a> {
    /// Every repository.
    Platform,
    /// The repositories of this service.
    Service(&'a str),
}

/// The key pull-only credentials are HMACs under (see the module's documentation).
pub struct PullKey(hmac::Key);

impl std::fmt::Debug for PullKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PullKey(<redacted>)")
    }
}

impl PullKey {
    /// The key in `path` (32 bytes), made (mode `0600`) when there is none. Replicas sharing
    /// a data directory may start together: the key is written beside and linked into place,
    /// so each reads the one that won, whole.
    pub fn load_or_create(path: &Path) -> std::io::Result<PullKey> {
        loop {
            match std::fs::read(path) {
                Ok(bytes) if bytes.len() == 32 => {
                    return Ok(PullKey(hmac::Key::new(hmac::HMAC_SHA256, &bytes)));
                }
                Ok(bytes) => {
                    return Err(std::io::Error::other(format!(
                        "{} holds {} bytes; a pull key is 32 (remove it to make a new one, \
                         which revokes every pull secret handed out)",
                        path.display(),
                        bytes.len()
                    )));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            let mut bytes = [0u8; 32];
            ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
                .map_err(|_| std::io::Error::other("no random bytes for the pull key"))?;
            let dir = path.parent().unwrap_or(Path::new("."));
            let mut file = tempfile::NamedTempFile::new_in(dir)?;
            file.write_all(&bytes)?;
            file.as_file().sync_all()?;
            // `NamedTempFile` is made `0600`; linking fails when another made the key first,
            // which the next turn reads.
            match std::fs::hard_link(file.path(), path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// A key for tests, from fixed bytes.
    pub fn from_bytes(bytes: &[u8; 32]) -> PullKey {
        PullKey(hmac::Key::new(hmac::HMAC_SHA256, bytes))
    }

    fn password_of(&self, user: &str) -> String {
        let tag = hmac::sign(&self.0, user.as_bytes());
        let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        format!("{PULL_PREFIX}{hex}")
    }

    /// The platform's credential, `(user, password)`: pulls every repository.
    pub fn platform(&self) -> (String, String) {
        (
            PLATFORM_PULLER.to_owned(),
            self.password_of(PLATFORM_PULLER),
        )
    }

    /// Service `service`'s credential, `(user, password)`: pulls its repositories only. It is
    /// bound to the service's id too, so a service decommissioned and onboarded again under
    /// its name is another subject, which the old credential does not pull for.
    pub fn service(&self, service: &str, id: i64) -> (String, String) {
        (
            service.to_owned(),
            self.password_of(&service_subject(service, id)),
        )
    }

    /// Who `user` and `password` prove to be, when they are a credential of this key; `id` is
    /// the id of the service named `user` (none for the platform's user).
    fn puller<'a>(&self, user: &'a str, password: &str, id: Option<i64>) -> Option<Puller<'a>> {
        let hex = password.strip_prefix(PULL_PREFIX)?;
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return None;
        }
        let tag: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| {
                hex.get(i..i + 2)
                    .and_then(|b| u8::from_str_radix(b, 16).ok())
            })
            .collect::<Option<_>>()?;
        match id {
            None if user == PLATFORM_PULLER => {
                hmac::verify(&self.0, user.as_bytes(), &tag).ok()?;
                Some(Puller::Platform)
            }
            Some(id) if user != PLATFORM_PULLER => {
                hmac::verify(&self.0, service_subject(user, id).as_bytes(), &tag).ok()?;
                Some(Puller::Service(user))
            }
            _ => None,
        }
    }
}

/// What a service's pull credential is the HMAC of: its name and its id.
fn service_subject(service: &str, id: i64) -> String {
    format!("{service}#{id}")
}

/// The API's callers, as the registry asks about them.
#[derive(Debug, Clone)]
pub(crate) struct RegistryCallers(pub(crate) ApiState);

/// What a request's `Authorization` carries.
#[derive(Debug, PartialEq, Eq)]
enum Credential {
    /// `Basic`: a user and a password.
    Basic(String, String),
    /// `Bearer`: a token.
    Bearer(String),
}

impl Credential {
    fn of(headers: &HeaderMap) -> Option<Credential> {
        let value = headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
        let (scheme, rest) = value.split_once(' ')?;
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            return Some(Credential::Bearer(rest.to_owned()));
        }
        if !scheme.eq_ignore_ascii_case("basic") {
            return None;
        }
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (user, password) = text.split_once(':')?;
        Some(Credential::Basic(user.to_owned(), password.to_owned()))
    }

    /// The Runway token or identity token it carries: the password, or the bearer token.
    fn token(&self) -> &str {
        match self {
            Credential::Basic(_, password) => password,
            Credential::Bearer(token) => token,
        }
    }
}

/// The refusal of a pull-only credential's `puller` for `access` to `repository`.
fn pull_refusal(puller: Puller<'_>, repository: Option<&str>, access: Access) -> Option<Refusal> {
    if access != Access::Pull {
        return Some(Refusal::Denied(
            "this credential only pulls: push with a Runway token".to_owned(),
        ));
    }
    match (puller, repository) {
        (Puller::Platform, _) | (_, None) => None,
        (Puller::Service(service), Some(repository)) => {
            // A preview runs its parent's images.
            let owner = runway_secrets::preview::owner(service);
            (repository.split('/').next() != Some(owner)).then(|| {
                Refusal::Denied(format!(
                    "this credential pulls only {owner}'s repositories ({owner}/...)"
                ))
            })
        }
    }
}

/// The refusal of `caller` for `access` to `repository`; `None` when it is allowed.
fn refusal(caller: &Caller, repository: &str, access: Access) -> Option<Refusal> {
    let mut parts = repository.split('/');
    let service = parts.next().unwrap_or_default();
    // What crate::access::REGISTRY says: pulling reads the service, pushing deploys it.
    let (need, at) = match access {
        Access::Pull => (Role::Viewer, Env::Whole),
        Access::Push => (Role::Deployer, Env::Any),
    };
    if let Err(e) = caller.check(Need::Role(need), Some(service), at) {
        return Some(Refusal::Denied(e.message().to_owned()));
    }
    if access == Access::Pull {
        return None;
    }
    if parts.next() == Some(MIRROR) {
        return Some(Refusal::Denied(format!(
            "{service}/{MIRROR}/ holds the images Runway mirrored at deploy; only Runway writes there"
        )));
    }
    None
}

impl Authorizer for RegistryCallers {
    async fn authorize(
        &self,
        headers: &HeaderMap,
        repository: Option<&str>,
        access: Access,
    ) -> Result<(), Refusal> {
        let credential = Credential::of(headers).ok_or(Refusal::Unauthenticated)?;
        if let (Credential::Basic(user, password), Some(key)) = (&credential, &self.0.pull_key)
            && password.starts_with(PULL_PREFIX)
        {
            let id = if user == PLATFORM_PULLER {
                None
            } else {
                let name = user.clone();
                let service = self
                    .0
                    .store(move |s| Ok(s.service_get(&name)?))
                    .await
                    .map_err(|_| Refusal::Unauthenticated)?;
                Some(service.id)
            };
            let puller = key
                .puller(user, password, id)
                .ok_or(Refusal::Unauthenticated)?;
            return pull_refusal(puller, repository, access).map_or(Ok(()), Err);
        }
        let caller = crate::auth::caller_for(&self.0, credential.token())
            .await
            .map_err(|_| Refusal::Unauthenticated)?;
        match repository {
            None => Ok(()),
            Some(repository) => refusal(&caller, repository, access).map_or(Ok(()), Err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> PullKey {
        PullKey::from_bytes(&[7; 32])
    }

    #[test]
    fn a_service_pull_credential_pulls_its_own_repositories_only() {
        let key = key();
        let (user, password) = key.service("hello", 7);
        let puller = key.puller(&user, &password, Some(7)).unwrap();
        assert_eq!(puller, Puller::Service("hello"));
        assert_eq!(
            pull_refusal(puller, Some("hello/mirror"), Access::Pull),
            None
        );
        assert_eq!(pull_refusal(puller, Some("hello"), Access::Pull), None);
        for other in ["other/mirror", "hello2/mirror", "hellox"] {
            assert!(
                matches!(
                    pull_refusal(puller, Some(other), Access::Pull),
                    Some(Refusal::Denied(_))
                ),
                "{other}"
            );
        }
        assert!(matches!(
            pull_refusal(puller, Some("hello/app"), Access::Push),
            Some(Refusal::Denied(_))
        ));
        // A preview's pulls its parent's images, and only those.
        let (user, password) = key.service("mr-1--hello", 8);
        let preview = key.puller(&user, &password, Some(8)).unwrap();
        assert_eq!(
            pull_refusal(preview, Some("hello/mirror"), Access::Pull),
            None
        );
        assert!(pull_refusal(preview, Some("mr-1--hello/mirror"), Access::Pull).is_some());
        assert!(pull_refusal(preview, Some("other/mirror"), Access::Pull).is_some());
    }

    #[test]
    fn the_platform_credential_pulls_everything_and_pushes_nothing() {
        let key = key();
        let (user, password) = key.platform();
        let puller = key.puller(&user, &password, None).unwrap();
        assert_eq!(puller, Puller::Platform);
        assert_eq!(pull_refusal(puller, Some("any/mirror"), Access::Pull), None);
        assert!(pull_refusal(puller, Some("any/mirror"), Access::Push).is_some());
    }

    #[test]
    fn a_credential_is_its_subject_s_alone_and_its_key_s() {
        let key = key();
        let (_, hello) = key.service("hello", 7);
        // Another user with hello's password, a changed password, another key's, another
        // service of the same name (onboarded again: another id).
        assert_eq!(key.puller("other", &hello, Some(7)), None);
        assert_eq!(key.puller(PLATFORM_PULLER, &hello, None), None);
        assert_eq!(key.puller("hello", &hello, Some(8)), None);
        assert_eq!(key.puller("hello", &hello, None), None);
        let mut changed = hello.clone();
        let last = changed.pop();
        changed.push(if last == Some('0') { '1' } else { '0' });
        assert_eq!(key.puller("hello", &changed, Some(7)), None);
        assert_eq!(key.puller("hello", &hello.to_uppercase(), Some(7)), None);
        assert_eq!(key.puller("hello", "rwpull_zz", Some(7)), None);
        assert_eq!(key.puller("hello", "rwpull_", Some(7)), None);
        let (_, foreign) = PullKey::from_bytes(&[8; 32]).service("hello", 7);
        assert_eq!(key.puller("hello", &foreign, Some(7)), None);
    }

    #[test]
    fn the_key_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("registry.key");
        let first = PullKey::load_or_create(&path).unwrap().service("hello", 1);
        let again = PullKey::load_or_create(&path).unwrap().service("hello", 1);
        assert_eq!(first, again);
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&path, b"short").unwrap();
        let error = PullKey::load_or_create(&path).unwrap_err().to_string();
        assert!(error.contains("holds 5 bytes"), "{error}");
    }
}
