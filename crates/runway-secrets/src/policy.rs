//! Who may do what: a pure function of a token's scope, the action asked for, the time and
//! whether the token was revoked.
//!
//! - An admin token may do anything until it is revoked.
//! - A deploy token may read and write its own service only (and its previews, see
//!   [`crate::preview`]), in its listed environments only, until it expires or is revoked; it never performs admin actions (creating services or
//!   tokens). An empty list of environments allows no environment. Reading the service as a
//!   whole (no environment) is allowed; writing to it as a whole is not, since that would
//!   reach environments outside the list.
//!
//! The checks run in a fixed order (revoked, expired, admin only, service, environment), and
//! a refusal never names a service other than the one asked for, so a token cannot learn
//! which services exist.

/// What a token may do, as the store records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Everything.
    Admin,
    /// Read and write one service, in some environments, until a time.
    Deploy {
        /// The service's name.
        service: String,
        /// The environments it may act in; empty allows none.
        environments: Vec<String>,
        /// When it stops working, in Unix milliseconds; `None` never.
        expires_at: Option<i64>,
    },
}

/// What kind of thing an action does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionKind {
    /// Looks without changing anything (status, revisions, secret names).
    Read,
    /// Changes a service's state (deploy, roll back, set a secret).
    Write,
    /// Changes the platform (create or delete services, create or revoke tokens).
    Admin,
}

/// An action asked for through the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action<'a> {
    /// The service it acts on; `None` for one that spans services (listing every service).
    pub service: Option<&'a str>,
    /// The environment it acts in; `None` for the service as a whole.
    pub env: Option<&'a str>,
    /// What it does.
    pub kind: ActionKind,
}

/// Why an action is refused. Messages never name a service other than the one asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Denied {
    /// The token was revoked.
    #[error("the token was revoked")]
    Revoked,
    /// The token's expiry time has passed.
    #[error("the token has expired")]
    Expired,
    /// The action needs an admin token.
    #[error("this action needs an admin token")]
    AdminOnly,
    /// The action spans services; a deploy token acts on its own service only.
    #[error(
        "a deploy token acts on its own service only, and this action is not limited to one service"
    )]
    ServiceRequired,
    /// The action is on a service the token is not for.
    #[error("this token may not act on that service")]
    OtherService,
    /// The action writes to the service as a whole, beyond the token's environments.
    #[error(
        "a deploy token acts only in its own environments, and this action changes the whole service"
    )]
    EnvironmentRequired,
    /// The action is in an environment the token is not for.
    #[error("this token may not act in environment `{env}`")]
    EnvironmentNotAllowed {
        /// The environment asked for.
        env: String,
    },
}

/// Whether a token with `scope` may perform `action` at `now_ms` (Unix milliseconds).
///
/// A token expires at its `expires_at` instant: it works strictly before it.
///
/// # Errors
/// Why not: see [`Denied`].
pub fn authorize(
    scope: &Scope,
    action: &Action<'_>,
    now_ms: i64,
    revoked: bool,
) -> Result<(), Denied> {
    if revoked {
        return Err(Denied::Revoked);
    }
    let (service, environments, expires_at) = match scope {
        Scope::Admin => return Ok(()),
        Scope::Deploy {
            service,
            environments,
            expires_at,
        } => (service, environments, *expires_at),
    };
    if expires_at.is_some_and(|at| now_ms >= at) {
        return Err(Denied::Expired);
    }
    if action.kind == ActionKind::Admin {
        return Err(Denied::AdminOnly);
    }
    match action.service {
        None => return Err(Denied::ServiceRequired),
        // A preview (`mr-12--app`) is its parent's: app's tokens act on it.
        Some(s) if s != service && crate::preview::owner(s) != service => {
            return Err(Denied::OtherService);
        }
        Some(_) => {}
    }
    match (action.env, action.kind) {
        (Some(env), _) if environments.iter().any(|e| e == env) => Ok(()),
        (Some(env), _) => Err(Denied::EnvironmentNotAllowed {
            env: env.to_owned(),
        }),
        (None, ActionKind::Read) => Ok(()),
        (None, _) => Err(Denied::EnvironmentRequired),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const NOW: i64 = 1_700_000_000_000;

    /// What is checked, scope, action, now, revoked, expected.
    type Row<'a> = (
        &'a str,
        &'a Scope,
        Action<'a>,
        i64,
        bool,
        Result<(), Denied>,
    );

    fn deploy(service: &str, envs: &[&str], expires_at: Option<i64>) -> Scope {
        Scope::Deploy {
            service: service.to_owned(),
            environments: envs.iter().map(|e| (*e).to_owned()).collect(),
            expires_at,
        }
    }

    fn action<'a>(service: Option<&'a str>, env: Option<&'a str>, kind: ActionKind) -> Action<'a> {
        Action { service, env, kind }
    }

    #[test]
    fn table() {
        use ActionKind::{Admin, Read, Write};
        let billing = deploy("billing", &["staging", "production"], Some(NOW + 1));
        let staging_only = deploy("billing", &["staging"], None);
        let nowhere = deploy("billing", &[], None);
        let not_env = |env: &str| {
            Err(Denied::EnvironmentNotAllowed {
                env: env.to_owned(),
            })
        };

        #[rustfmt::skip]
        let rows: Vec<Row<'_>> = vec![
            ("admin reads anything", &Scope::Admin, action(Some("billing"), Some("production"), Read), NOW, false, Ok(())),
            ("admin writes anything", &Scope::Admin, action(Some("other"), None, Write), NOW, false, Ok(())),
            ("admin creates services", &Scope::Admin, action(None, None, Admin), NOW, false, Ok(())),
            ("admin is never expired", &Scope::Admin, action(None, None, Admin), i64::MAX, false, Ok(())),
            ("revoked admin", &Scope::Admin, action(None, None, Read), NOW, true, Err(Denied::Revoked)),
            ("deploy reads its env", &billing, action(Some("billing"), Some("staging"), Read), NOW, false, Ok(())),
            ("deploy writes its env", &billing, action(Some("billing"), Some("production"), Write), NOW, false, Ok(())),
            ("deploy reads its whole service", &billing, action(Some("billing"), None, Read), NOW, false, Ok(())),
            ("deploy writes its whole service", &billing, action(Some("billing"), None, Write), NOW, false, Err(Denied::EnvironmentRequired)),
            ("deploy in another env", &staging_only, action(Some("billing"), Some("production"), Write), NOW, false, not_env("production")),
            ("deploy reads another env", &staging_only, action(Some("billing"), Some("production"), Read), NOW, false, not_env("production")),
            ("env names are exact", &staging_only, action(Some("billing"), Some("Staging"), Read), NOW, false, not_env("Staging")),
            ("no environments allows none", &nowhere, action(Some("billing"), Some("staging"), Read), NOW, false, not_env("staging")),
            ("deploy on another service", &billing, action(Some("search"), Some("staging"), Read), NOW, false, Err(Denied::OtherService)),
            ("service names are exact", &billing, action(Some("billing2"), Some("staging"), Write), NOW, false, Err(Denied::OtherService)),
            ("deploy on its preview", &billing, action(Some("mr-1--billing"), Some("staging"), Write), NOW, false, Ok(())),
            ("deploy on its preview, not its env", &billing, action(Some("mr-1--billing"), Some("preview"), Write), NOW, false, not_env("preview")),
            ("deploy on another's preview", &billing, action(Some("billing--search"), Some("staging"), Read), NOW, false, Err(Denied::OtherService)),
            ("deploy across services", &billing, action(None, None, Read), NOW, false, Err(Denied::ServiceRequired)),
            ("deploy admin action on its service", &billing, action(Some("billing"), Some("staging"), Admin), NOW, false, Err(Denied::AdminOnly)),
            ("deploy creates a service", &billing, action(None, None, Admin), NOW, false, Err(Denied::AdminOnly)),
            ("deploy admin on another service", &billing, action(Some("search"), None, Admin), NOW, false, Err(Denied::AdminOnly)),
            ("just before expiry", &billing, action(Some("billing"), Some("staging"), Read), NOW, false, Ok(())),
            ("at expiry", &billing, action(Some("billing"), Some("staging"), Read), NOW + 1, false, Err(Denied::Expired)),
            ("after expiry", &billing, action(Some("billing"), Some("staging"), Read), NOW + 1000, false, Err(Denied::Expired)),
            ("expired before other checks", &billing, action(Some("search"), None, Admin), NOW + 1, false, Err(Denied::Expired)),
            ("revoked before expired", &billing, action(Some("billing"), Some("staging"), Read), NOW + 1, true, Err(Denied::Revoked)),
            ("revoked deploy", &staging_only, action(Some("billing"), Some("staging"), Read), NOW, true, Err(Denied::Revoked)),
            ("never expires", &staging_only, action(Some("billing"), Some("staging"), Write), i64::MAX, false, Ok(())),
        ];
        for (what, scope, action, now, revoked, expected) in rows {
            assert_eq!(authorize(scope, &action, now, revoked), expected, "{what}");
        }
    }

    #[test]
    fn refusals_do_not_name_other_services() {
        let scope = deploy("billing", &["staging"], None);
        let messages: Vec<String> = [
            action(Some("secret-project"), Some("staging"), ActionKind::Read),
            action(Some("secret-project"), None, ActionKind::Write),
            action(
                Some("secret-project"),
                Some("production"),
                ActionKind::Admin,
            ),
        ]
        .iter()
        .map(|a| authorize(&scope, a, NOW, false).unwrap_err().to_string())
        .collect();
        for m in &messages {
            assert!(
                !m.contains("secret-project") && !m.contains("billing"),
                "{m}"
            );
        }
    }

    fn name() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9-]{0,10}"
    }

    fn kind() -> impl Strategy<Value = ActionKind> {
        prop_oneof![
            Just(ActionKind::Read),
            Just(ActionKind::Write),
            Just(ActionKind::Admin)
        ]
    }

    proptest! {
        #[test]
        fn deploy_never_acts_on_another_service(
            service in name(),
            other in name(),
            environments in proptest::collection::vec(name(), 0..4),
            expires_at in proptest::option::of(any::<i64>()),
            env in proptest::option::of(name()),
            kind in kind(),
            now in any::<i64>(),
            revoked in any::<bool>(),
            spanning in any::<bool>(),
        ) {
            prop_assume!(service != other);
            // Half the time, ask for an environment the token does have.
            let env = env.or_else(|| environments.first().cloned());
            let scope = Scope::Deploy { service, environments, expires_at };
            let target = if spanning { None } else { Some(other.as_str()) };
            let action = Action { service: target, env: env.as_deref(), kind };
            prop_assert!(authorize(&scope, &action, now, revoked).is_err());
        }

        #[test]
        fn deploy_never_performs_admin_actions(
            service in name(),
            environments in proptest::collection::vec(name(), 0..4),
            env in proptest::option::of(name()),
            now in any::<i64>(),
        ) {
            let env = env.or_else(|| environments.first().cloned());
            let scope = Scope::Deploy { service: service.clone(), environments, expires_at: None };
            let action = Action { service: Some(&service), env: env.as_deref(), kind: ActionKind::Admin };
            prop_assert_eq!(authorize(&scope, &action, now, false), Err(Denied::AdminOnly));
        }

        #[test]
        fn revoked_is_always_denied(
            admin in any::<bool>(),
            service in proptest::option::of(name()),
            env in proptest::option::of(name()),
            kind in kind(),
            now in any::<i64>(),
        ) {
            let scope = if admin { Scope::Admin } else { Scope::Deploy { service: "s".into(), environments: vec!["e".into()], expires_at: None } };
            let action = Action { service: service.as_deref(), env: env.as_deref(), kind };
            prop_assert_eq!(authorize(&scope, &action, now, true), Err(Denied::Revoked));
        }

        #[test]
        fn deploy_works_in_its_own_environments_until_expiry(
            service in name(),
            environments in proptest::collection::vec(name(), 1..4),
            pick in any::<proptest::sample::Index>(),
            write in any::<bool>(),
            expires_at in proptest::option::of(any::<i64>()),
            now in any::<i64>(),
        ) {
            let env = pick.get(&environments).clone();
            let scope = Scope::Deploy { service: service.clone(), environments, expires_at };
            let kind = if write { ActionKind::Write } else { ActionKind::Read };
            let action = Action { service: Some(&service), env: Some(&env), kind };
            let live = expires_at.is_none_or(|at| now < at);
            prop_assert_eq!(authorize(&scope, &action, now, false).is_ok(), live);
        }
    }
}
