//! Who may do what: a pure function of a token's scope, the action asked for, the time and
//! whether the token was revoked.
//!
//! A scope is either a platform admin's, which may do anything until revoked, or a list of
//! [`Grant`]s: a [`Role`] on a service, on every service a team owns, or on every service,
//! in some environments or all of them. Roles are ordered, each allowing what the one before
//! it does:
//!
//! - [`Role::Viewer`] reads: status, logs, events, revisions, deployments, secret names;
//! - [`Role::Deployer`] also deploys, rolls back, promotes, pauses and resumes, and sets
//!   variables;
//! - [`Role::Maintainer`] also sets secrets, makes and revokes the service's tokens, and adds
//!   its domains.
//!
//! Platform actions (onboarding services, teams, the audit log) need an admin. A grant on a
//! service also covers its previews ([`crate::preview`]); an explicit list of environments
//! allows those only, and an empty list none. Reading a service as a whole (no environment)
//! needs a grant on it; changing it as a whole needs one in every environment, since a change
//! to the whole would reach environments outside a list.
//!
//! The checks run in a fixed order (revoked, expired, admin only, service, role,
//! environment), and a refusal never names a service other than the one asked for, so a token
//! cannot learn which services exist.

use serde::{Deserialize, Serialize};

/// What a grant allows on its services, each role everything the one before it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads: status, logs, events, revisions, deployments, secret names.
    Viewer,
    /// Deploys, rolls back, promotes, pauses, sets variables.
    Deployer,
    /// Sets secrets, makes the service's tokens, adds its domains.
    Maintainer,
}

impl Role {
    /// Every role, the weakest first.
    pub const ALL: [Self; 3] = [Self::Viewer, Self::Deployer, Self::Maintainer];

    /// The role's name, as in the API and the CLI.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Deployer => "deployer",
            Self::Maintainer => "maintainer",
        }
    }

    /// The role named `name`, if any.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == name)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The services a grant is on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Every service (a platform-wide reader, say).
    AnyService,
    /// One service, and its previews.
    Service(String),
    /// Every service a team owns, and their previews.
    Team(String),
}

/// A role on some services, in some environments.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Grant {
    /// What it allows.
    pub role: Role,
    /// On what.
    pub on: Target,
    /// Where: these environments only (empty allows none), or `None` for every one.
    #[serde(default)]
    pub environments: Option<Vec<String>>,
}

impl Grant {
    /// Whether the grant is on `service`, whose owning team is `team`.
    fn covers(&self, service: Option<&str>, team: Option<&str>) -> bool {
        match (&self.on, service) {
            (Target::AnyService, _) => true,
            (_, None) => false,
            (Target::Service(name), Some(s)) => s == name || crate::preview::owner(s) == name,
            (Target::Team(name), Some(_)) => team == Some(name.as_str()),
        }
    }

    /// Whether the grant allows some environment (an empty list allows none).
    fn somewhere(&self) -> bool {
        self.environments.as_ref().is_none_or(|e| !e.is_empty())
    }

    /// Whether the grant allows environment `env`; `None` asks for every environment.
    fn reaches(&self, env: Option<&str>) -> bool {
        match (&self.environments, env) {
            (None, _) => true,
            (Some(list), Some(env)) => list.iter().any(|e| e == env),
            (Some(_), None) => false,
        }
    }
}

/// What a token may do, as the store records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Everything: a platform admin.
    Admin,
    /// What its grants allow, until a time.
    Grants {
        /// Its roles.
        grants: Vec<Grant>,
        /// When it stops working, in Unix milliseconds; `None` never.
        expires_at: Option<i64>,
    },
}

/// What an action needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Need {
    /// A role on the service it acts on (or, acting across services, on every service).
    Role(Role),
    /// A platform admin.
    Admin,
}

/// Where in a service an action acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Env<'a> {
    /// In this environment.
    One(&'a str),
    /// On the service as a whole, which reaches every environment.
    Whole,
    /// In some environment: the role anywhere in the service will do (pushing an image that
    /// a deploy to one environment then uses).
    Any,
}

/// An action asked for through the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action<'a> {
    /// The service it acts on; `None` for one that spans services (listing every service).
    pub service: Option<&'a str>,
    /// The team that owns that service (for a preview, its parent's team), if any.
    pub team: Option<&'a str>,
    /// Where in the service.
    pub env: Env<'a>,
    /// What it needs.
    pub need: Need,
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
    /// The action needs a platform admin.
    #[error("this action needs a platform admin")]
    AdminOnly,
    /// The action spans services; the token's grants are on some services only.
    #[error(
        "this token acts on its own services only, and this action is not limited to one service"
    )]
    ServiceRequired,
    /// The action is on a service no grant of the token is on.
    #[error("this token may not act on that service")]
    OtherService,
    /// The token's role on the service is not enough.
    #[error("this action needs the `{need}` role on this service, and the token has `{has}`")]
    RoleTooLow {
        /// The role the action needs.
        need: Role,
        /// The strongest role the token has on the service.
        has: Role,
    },
    /// The action changes the service as a whole, beyond the token's environments.
    #[error("this token acts only in some environments, and this action changes the whole service")]
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
    let (grants, expires_at) = match scope {
        Scope::Admin => return Ok(()),
        Scope::Grants { grants, expires_at } => (grants, *expires_at),
    };
    if expires_at.is_some_and(|at| now_ms >= at) {
        return Err(Denied::Expired);
    }
    let Need::Role(need) = action.need else {
        return Err(Denied::AdminOnly);
    };
    let on: Vec<&Grant> = grants
        .iter()
        .filter(|g| g.covers(action.service, action.team))
        .collect();
    let Some(has) = on.iter().map(|g| g.role).max() else {
        return Err(if action.service.is_none() {
            Denied::ServiceRequired
        } else {
            Denied::OtherService
        });
    };
    if has < need {
        return Err(Denied::RoleTooLow { need, has });
    }
    let strong = || on.iter().filter(|g| g.role >= need);
    match action.env {
        Env::One(env) if strong().any(|g| g.reaches(Some(env))) => Ok(()),
        Env::One(env) => Err(Denied::EnvironmentNotAllowed {
            env: env.to_owned(),
        }),
        // Reading the whole service shows every environment's name, no more: a grant in some
        // environment will do, one in none will not.
        Env::Whole if need == Role::Viewer && strong().any(|g| g.somewhere()) => Ok(()),
        Env::Whole if strong().any(|g| g.reaches(None)) => Ok(()),
        Env::Whole => Err(Denied::EnvironmentRequired),
        Env::Any if strong().any(|g| g.somewhere()) => Ok(()),
        Env::Any => Err(Denied::EnvironmentRequired),
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

    fn grant(role: Role, on: Target, envs: Option<&[&str]>) -> Grant {
        Grant {
            role,
            on,
            environments: envs.map(|e| e.iter().map(|e| (*e).to_owned()).collect()),
        }
    }

    /// A deploy token as the store has always made them: deployer on a service, in a list.
    fn deploy(service: &str, envs: &[&str], expires_at: Option<i64>) -> Scope {
        Scope::Grants {
            grants: vec![grant(
                Role::Deployer,
                Target::Service(service.to_owned()),
                Some(envs),
            )],
            expires_at,
        }
    }

    fn scope(grants: Vec<Grant>) -> Scope {
        Scope::Grants {
            grants,
            expires_at: None,
        }
    }

    /// An action on a service no team owns.
    fn action<'a>(service: Option<&'a str>, env: Option<&'a str>, need: Need) -> Action<'a> {
        Action {
            service,
            team: None,
            env: env.map_or(Env::Whole, Env::One),
            need,
        }
    }

    fn on_team<'a>(
        service: &'a str,
        team: &'a str,
        env: Option<&'a str>,
        need: Need,
    ) -> Action<'a> {
        Action {
            service: Some(service),
            team: Some(team),
            env: env.map_or(Env::Whole, Env::One),
            need,
        }
    }

    const READ: Need = Need::Role(Role::Viewer);
    const WRITE: Need = Need::Role(Role::Deployer);
    const MAINTAIN: Need = Need::Role(Role::Maintainer);
    const ADMIN: Need = Need::Admin;

    #[test]
    fn table() {
        use Role::{Deployer, Maintainer, Viewer};
        let none = scope(vec![]);
        let viewer = scope(vec![grant(Viewer, Target::Service("billing".into()), None)]);
        let maintainer_staging = scope(vec![grant(
            Maintainer,
            Target::Service("billing".into()),
            Some(&["staging"]),
        )]);
        let team = scope(vec![
            grant(
                Deployer,
                Target::Team("payments".into()),
                Some(&["staging"]),
            ),
            grant(Viewer, Target::Team("payments".into()), None),
        ]);
        let everywhere = scope(vec![grant(Viewer, Target::AnyService, None)]);
        let too_low = |need, has| Err(Denied::RoleTooLow { need, has });
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
            ("admin reads anything", &Scope::Admin, action(Some("billing"), Some("production"), READ), NOW, false, Ok(())),
            ("admin writes anything", &Scope::Admin, action(Some("other"), None, WRITE), NOW, false, Ok(())),
            ("admin creates services", &Scope::Admin, action(None, None, ADMIN), NOW, false, Ok(())),
            ("admin is never expired", &Scope::Admin, action(None, None, ADMIN), i64::MAX, false, Ok(())),
            ("revoked admin", &Scope::Admin, action(None, None, READ), NOW, true, Err(Denied::Revoked)),
            ("deploy reads its env", &billing, action(Some("billing"), Some("staging"), READ), NOW, false, Ok(())),
            ("deploy writes its env", &billing, action(Some("billing"), Some("production"), WRITE), NOW, false, Ok(())),
            ("deploy reads its whole service", &billing, action(Some("billing"), None, READ), NOW, false, Ok(())),
            ("deploy writes its whole service", &billing, action(Some("billing"), None, WRITE), NOW, false, Err(Denied::EnvironmentRequired)),
            ("deploy in another env", &staging_only, action(Some("billing"), Some("production"), WRITE), NOW, false, not_env("production")),
            ("deploy reads another env", &staging_only, action(Some("billing"), Some("production"), READ), NOW, false, not_env("production")),
            ("env names are exact", &staging_only, action(Some("billing"), Some("Staging"), READ), NOW, false, not_env("Staging")),
            ("no environments allows none", &nowhere, action(Some("billing"), Some("staging"), READ), NOW, false, not_env("staging")),
            ("deploy on another service", &billing, action(Some("search"), Some("staging"), READ), NOW, false, Err(Denied::OtherService)),
            ("service names are exact", &billing, action(Some("billing2"), Some("staging"), WRITE), NOW, false, Err(Denied::OtherService)),
            ("deploy on its preview", &billing, action(Some("mr-1--billing"), Some("staging"), WRITE), NOW, false, Ok(())),
            ("deploy on its preview, not its env", &billing, action(Some("mr-1--billing"), Some("preview"), WRITE), NOW, false, not_env("preview")),
            ("deploy on another's preview", &billing, action(Some("billing--search"), Some("staging"), READ), NOW, false, Err(Denied::OtherService)),
            ("deploy across services", &billing, action(None, None, READ), NOW, false, Err(Denied::ServiceRequired)),
            ("deploy admin action on its service", &billing, action(Some("billing"), Some("staging"), ADMIN), NOW, false, Err(Denied::AdminOnly)),
            ("deploy creates a service", &billing, action(None, None, ADMIN), NOW, false, Err(Denied::AdminOnly)),
            ("deploy admin on another service", &billing, action(Some("search"), None, ADMIN), NOW, false, Err(Denied::AdminOnly)),
            ("just before expiry", &billing, action(Some("billing"), Some("staging"), READ), NOW, false, Ok(())),
            ("at expiry", &billing, action(Some("billing"), Some("staging"), READ), NOW + 1, false, Err(Denied::Expired)),
            ("after expiry", &billing, action(Some("billing"), Some("staging"), READ), NOW + 1000, false, Err(Denied::Expired)),
            ("expired before other checks", &billing, action(Some("search"), None, ADMIN), NOW + 1, false, Err(Denied::Expired)),
            ("revoked before expired", &billing, action(Some("billing"), Some("staging"), READ), NOW + 1, true, Err(Denied::Revoked)),
            ("revoked deploy", &staging_only, action(Some("billing"), Some("staging"), READ), NOW, true, Err(Denied::Revoked)),
            ("never expires", &staging_only, action(Some("billing"), Some("staging"), WRITE), i64::MAX, false, Ok(())),
            ("deploy cannot maintain", &billing, action(Some("billing"), Some("staging"), MAINTAIN), NOW, false, too_low(Maintainer, Deployer)),
            ("viewer reads", &viewer, action(Some("billing"), Some("production"), READ), NOW, false, Ok(())),
            ("viewer reads the whole service", &viewer, action(Some("billing"), None, READ), NOW, false, Ok(())),
            ("viewer cannot deploy", &viewer, action(Some("billing"), Some("production"), WRITE), NOW, false, too_low(Deployer, Viewer)),
            ("viewer on its preview", &viewer, action(Some("mr-1--billing"), Some("preview"), READ), NOW, false, Ok(())),
            ("viewer on another service", &viewer, action(Some("search"), None, READ), NOW, false, Err(Denied::OtherService)),
            ("maintainer maintains its env", &maintainer_staging, action(Some("billing"), Some("staging"), MAINTAIN), NOW, false, Ok(())),
            ("maintainer deploys its env", &maintainer_staging, action(Some("billing"), Some("staging"), WRITE), NOW, false, Ok(())),
            ("maintainer in another env", &maintainer_staging, action(Some("billing"), Some("production"), MAINTAIN), NOW, false, not_env("production")),
            ("maintainer of some envs, whole service", &maintainer_staging, action(Some("billing"), None, MAINTAIN), NOW, false, Err(Denied::EnvironmentRequired)),
            ("maintainer is no admin", &maintainer_staging, action(None, None, ADMIN), NOW, false, Err(Denied::AdminOnly)),
            ("team deploys its service", &team, on_team("billing", "payments", Some("staging"), WRITE), NOW, false, Ok(())),
            ("team reads production", &team, on_team("billing", "payments", Some("production"), READ), NOW, false, Ok(())),
            ("team deploys only staging", &team, on_team("billing", "payments", Some("production"), WRITE), NOW, false, not_env("production")),
            ("team's preview", &team, on_team("mr-2--billing", "payments", Some("staging"), WRITE), NOW, false, Ok(())),
            ("another team's service", &team, on_team("search", "discovery", Some("staging"), READ), NOW, false, Err(Denied::OtherService)),
            ("a service no team owns", &team, action(Some("billing"), Some("staging"), READ), NOW, false, Err(Denied::OtherService)),
            ("team across services", &team, action(None, None, READ), NOW, false, Err(Denied::ServiceRequired)),
            ("any service reads across", &everywhere, action(None, None, READ), NOW, false, Ok(())),
            ("any service reads one", &everywhere, on_team("search", "discovery", Some("production"), READ), NOW, false, Ok(())),
            ("any service viewer cannot deploy", &everywhere, action(Some("search"), Some("production"), WRITE), NOW, false, too_low(Deployer, Viewer)),
            ("deploy somewhere", &billing, Action { env: Env::Any, ..action(Some("billing"), None, WRITE) }, NOW, false, Ok(())),
            ("maintain somewhere", &billing, Action { env: Env::Any, ..action(Some("billing"), None, MAINTAIN) }, NOW, false, too_low(Maintainer, Deployer)),
            ("no environment is nowhere", &nowhere, Action { env: Env::Any, ..action(Some("billing"), None, WRITE) }, NOW, false, Err(Denied::EnvironmentRequired)),
            ("no environment reads nothing", &nowhere, action(Some("billing"), None, READ), NOW, false, Err(Denied::EnvironmentRequired)),
            ("no grants", &none, action(Some("billing"), None, READ), NOW, false, Err(Denied::OtherService)),
        ];
        for (what, scope, action, now, revoked, expected) in rows {
            assert_eq!(authorize(scope, &action, now, revoked), expected, "{what}");
        }
    }

    #[test]
    fn refusals_do_not_name_other_services() {
        let scope = deploy("billing", &["staging"], None);
        let messages: Vec<String> = [
            action(Some("secret-project"), Some("staging"), READ),
            action(Some("secret-project"), None, WRITE),
            action(Some("secret-project"), Some("production"), ADMIN),
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

    fn kind() -> impl Strategy<Value = Need> {
        prop_oneof![Just(READ), Just(WRITE), Just(MAINTAIN), Just(ADMIN)]
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
            prop_assume!(service != other && crate::preview::owner(&other) != service);
            // Half the time, ask for an environment the token does have.
            let env = env.or_else(|| environments.first().cloned());
            let scope = Scope::Grants {
                grants: vec![grant(Role::Maintainer, Target::Service(service), None), Grant { role: Role::Deployer, on: Target::Team(other.clone()), environments: Some(environments) }],
                expires_at,
            };
            let target = if spanning { None } else { Some(other.as_str()) };
            // The team grant is on `other`, the team: never on a service of that name.
            let action = Action { service: target, team: None, env: env.as_deref().map_or(Env::Any, Env::One), need: kind };
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
            let scope = Scope::Grants { grants: vec![grant(Role::Maintainer, Target::AnyService, None), Grant { role: Role::Maintainer, on: Target::Service(service.clone()), environments: Some(environments) }], expires_at: None };
            let action = Action { service: Some(&service), team: None, env: env.as_deref().map_or(Env::Whole, Env::One), need: ADMIN };
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
            let scope = if admin { Scope::Admin } else { deploy("s", &["e"], None) };
            let action = Action { service: service.as_deref(), team: None, env: env.as_deref().map_or(Env::Whole, Env::One), need: kind };
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
            let scope = Scope::Grants {
                grants: vec![Grant { role: Role::Deployer, on: Target::Service(service.clone()), environments: Some(environments) }],
                expires_at,
            };
            let kind = if write { WRITE } else { READ };
            let action = Action { service: Some(&service), team: None, env: Env::One(&env), need: kind };
            let live = expires_at.is_none_or(|at| now < at);
            prop_assert_eq!(authorize(&scope, &action, now, false).is_ok(), live);
        }
    }
}
