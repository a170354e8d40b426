//! The API's JSON types, as the contract has them. Store records are turned into these (never
//! serialized as they are), so the wire format is this module's alone and the OpenAPI
//! document is generated from it.

use std::collections::BTreeMap;
use std::fmt;

use runway_store::{
    AuditEntry, Deployment, DeploymentEvent, DesiredRevision, Revision, SecretInfo, Service,
    Timestamp, Token, TokenScope,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// A DNS label, as `routes::is_label` checks it: service and environment names, with
/// [`LABEL_MAX`] (repeated literally in the `#[schema]` attributes below: utoipa takes a
/// literal). No `---`, which parts a tag from its service in a host name.
pub(crate) const LABEL_PATTERN: &str = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$";
/// A DNS label's length at most.
pub(crate) const LABEL_MAX: usize = 63;
/// A code snapshot's digest, as `routes::check_digest` checks it (repeated literally below).
pub(crate) const DIGEST_PATTERN: &str = "^sha256:[0-9a-f]{64}$";

fn ts(t: Timestamp) -> String {
    t.to_string()
}

/// `GET /healthz`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: String,
}

/// What a token allows: `{"admin": {}}`, `{"role": {"role", "service" | "team" |
/// "every_service", "environments"}}`, or (as tokens made before roles were)
/// `{"deploy": {"service", "environments"}}`, the role `deployer` on a service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ScopeView {
    /// Everything.
    Admin(AdminScope),
    /// One service, in some of its environments.
    Deploy {
        /// The service.
        #[schema(pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$", max_length = 63)]
        service: String,
        /// The environments it may act in, each once.
        #[schema(value_type = BTreeSet<String>, min_items = 1,
            pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$", max_length = 63)]
        environments: Vec<String>,
    },
    /// A role on one service, on every service a team owns, or on every service.
    Role(GrantView),
    /// A person signed in through single sign-on: their teams' roles (by name and by the
    /// groups they were in at sign-in), or everything for an admin group's. Made by signing
    /// in, never by `POST /v1/tokens`.
    Person {
        /// Their name, as the provider gave it.
        user: String,
        /// Their groups at sign-in.
        groups: Vec<String>,
        /// A platform admin.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        admin: bool,
    },
}

/// An admin's scope: `{}`, and nothing else (not even `[]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct AdminScope {}

impl<'de> Deserialize<'de> for AdminScope {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let map = serde_json::Map::<String, serde_json::Value>::deserialize(de)?;
        match map.keys().next() {
            Some(key) => Err(serde::de::Error::unknown_field(key, &[])),
            None => Ok(Self {}),
        }
    }
}

/// A role's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RoleName {
    /// Reads: status, logs, events, revisions, deployments, secret names.
    Viewer,
    /// Also deploys, rolls back, promotes, pauses, sets variables.
    Deployer,
    /// Also sets secrets, makes the service's tokens, adds its domains.
    Maintainer,
}

impl From<runway_secrets::Role> for RoleName {
    fn from(role: runway_secrets::Role) -> Self {
        match role {
            runway_secrets::Role::Viewer => Self::Viewer,
            runway_secrets::Role::Deployer => Self::Deployer,
            runway_secrets::Role::Maintainer => Self::Maintainer,
        }
    }
}

impl From<RoleName> for runway_secrets::Role {
    fn from(role: RoleName) -> Self {
        match role {
            RoleName::Viewer => Self::Viewer,
            RoleName::Deployer => Self::Deployer,
            RoleName::Maintainer => Self::Maintainer,
        }
    }
}

/// A role on some services: exactly one of `service`, `team` and `every_service`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantView {
    /// What it allows.
    pub role: RoleName,
    /// One service (and its previews).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$", max_length = 63)]
    pub service: Option<String>,
    /// Every service this team owns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$", max_length = 63)]
    pub team: Option<String>,
    /// Every service.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub every_service: bool,
    /// These environments only, each once; every one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BTreeSet<String>>, min_items = 1,
        pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$", max_length = 63)]
    pub environments: Option<Vec<String>>,
}

impl From<&runway_secrets::Grant> for GrantView {
    fn from(grant: &runway_secrets::Grant) -> Self {
        let (service, team, every_service) = match &grant.on {
            runway_secrets::Target::AnyService => (None, None, true),
            runway_secrets::Target::Service(s) => (Some(s.clone()), None, false),
            runway_secrets::Target::Team(t) => (None, Some(t.clone()), false),
        };
        Self {
            role: grant.role.into(),
            service,
            team,
            every_service,
            environments: grant.environments.clone(),
        }
    }
}

impl GrantView {
    /// The grant, when it names exactly one of a service, a team and every service.
    pub(crate) fn grant(self) -> Option<runway_secrets::Grant> {
        let on = match (self.service, self.team, self.every_service) {
            (Some(s), None, false) => runway_secrets::Target::Service(s),
            (None, Some(t), false) => runway_secrets::Target::Team(t),
            (None, None, true) => runway_secrets::Target::AnyService,
            _ => return None,
        };
        Some(runway_secrets::Grant {
            role: self.role.into(),
            on,
            environments: self.environments,
        })
    }
}

impl From<&TokenScope> for ScopeView {
    fn from(scope: &TokenScope) -> Self {
        match scope {
            TokenScope::Admin => Self::Admin(AdminScope {}),
            TokenScope::Deploy {
                service,
                environments,
            } => Self::Deploy {
                service: service.clone(),
                environments: environments.clone(),
            },
            TokenScope::Grant { grant } => Self::Role(grant.into()),
            TokenScope::Person {
                user,
                groups,
                admin,
            } => Self::Person {
                user: user.clone(),
                groups: groups.clone(),
                admin: *admin,
            },
        }
    }
}

impl ScopeView {
    /// The scope as the store keeps it, for a token to make: a role names exactly one of a
    /// service, a team and every service; a person's is made by signing in only.
    pub(crate) fn scope(self) -> Result<TokenScope, crate::error::ApiError> {
        Ok(match self {
            Self::Admin(AdminScope {}) => TokenScope::Admin,
            Self::Deploy { environments, .. } if environments.is_empty() => {
                return Err(crate::error::ApiError::invalid(
                    "a deploy token acts in at least one environment",
                )
                .field("scope.deploy.environments"));
            }
            Self::Role(GrantView {
                environments: Some(environments),
                ..
            }) if environments.is_empty() => {
                return Err(crate::error::ApiError::invalid(
                    "a role holds in at least one environment (or, with no list, in all)",
                )
                .field("scope.role.environments"));
            }
            Self::Deploy {
                service,
                environments,
            } => TokenScope::Deploy {
                service,
                environments,
            },
            Self::Role(grant) => TokenScope::Grant {
                grant: grant.grant().ok_or_else(|| {
                    crate::error::ApiError::invalid(
                        "a role is on exactly one of `service`, `team` and `every_service`",
                    )
                    .field("scope.role")
                })?,
            },
            Self::Person { .. } => {
                return Err(crate::error::ApiError::invalid(
                    "a person's token is made by signing in (single sign-on), not here",
                )
                .field("scope.person"));
            }
        })
    }
}

/// `GET /v1/whoami`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WhoAmI {
    /// The token's id; 0 for an identity token (OIDC), which the server does not store.
    pub token_id: i64,
    /// The token's name; for an identity token, `oidc:{issuer} {subject}` and its pipeline.
    pub name: String,
    /// What it allows.
    pub scope: ScopeView,
    /// A platform admin.
    #[serde(default)]
    pub admin: bool,
    /// Its roles, as the server reads its scope now (a signed-in person's: their teams').
    #[serde(default)]
    pub grants: Vec<GrantView>,
    /// The services a team it has a role on owns, by team: where a team's role reaches.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub team_services: BTreeMap<String, Vec<String>>,
}

/// A service onboarded onto the platform.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ServiceView {
    /// Its identity, never given to another service (not even one onboarded again under this
    /// name).
    pub id: i64,
    /// Its name, a DNS label.
    pub name: String,
    /// Who owns it.
    pub owners: Vec<String>,
    /// The environments it may be deployed to.
    pub environments: Vec<String>,
    /// When it was onboarded (RFC 3339).
    pub created_at: String,
    /// Who onboarded it.
    pub created_by: String,
    /// An admin let it deploy plain processes (see `UpdateService`).
    pub allow_processes: bool,
    /// Upstream's keys from the inventory it was onboarded through (`project_id`,
    /// `members`, `groups`, `regions`…); absent for one onboarded by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub inventory: Option<serde_json::Value>,
    /// The team that owns it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
}

impl From<Service> for ServiceView {
    fn from(s: Service) -> Self {
        Self {
            id: s.id,
            name: s.name,
            owners: s.owners,
            environments: s.environments,
            created_at: ts(s.created_at),
            created_by: s.created_by,
            allow_processes: s.allow_processes,
            inventory: s.inventory,
            team: s.team,
        }
    }
}

/// A team: people with a role on every service it owns.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TeamView {
    /// Its name.
    pub name: String,
    /// Who is in it.
    pub members: Vec<TeamMemberView>,
    /// The services it owns.
    pub services: Vec<String>,
    /// When it was made (RFC 3339), and by whom.
    pub created_at: String,
    pub created_by: String,
    /// When its members last changed (RFC 3339).
    pub updated_at: String,
}

/// Someone in a team, and their role on its services.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TeamMemberView {
    /// `user:<name>` (a person, as the sign-in provider names them) or `group:<path>` (everyone
    /// in the provider's group).
    #[schema(pattern = r"^(user|group):\S.*$", max_length = 255)]
    pub subject: String,
    /// Their role on the team's services.
    pub role: RoleName,
    /// These environments only, each once; every one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BTreeSet<String>>,
        pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$", max_length = 63)]
    pub environments: Option<Vec<String>>,
}

/// `PUT /v1/teams/{team}`: the team's members, all of them.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutTeam {
    /// Who is in it (none is a team with no one yet).
    #[serde(default)]
    pub members: Vec<TeamMemberView>,
}

impl From<&runway_store::TeamMember> for TeamMemberView {
    fn from(m: &runway_store::TeamMember) -> Self {
        Self {
            subject: m.subject.clone(),
            role: m.role.into(),
            environments: m.environments.clone(),
        }
    }
}

impl From<TeamMemberView> for runway_store::TeamMember {
    fn from(m: TeamMemberView) -> Self {
        Self {
            subject: m.subject,
            role: m.role.into(),
            environments: m.environments,
        }
    }
}

impl TeamView {
    /// The team, with the services it owns among `services`.
    pub(crate) fn new(team: runway_store::Team, services: &[Service]) -> Self {
        Self {
            members: team.members.iter().map(Into::into).collect(),
            services: services
                .iter()
                .filter(|s| s.team.as_deref() == Some(team.name.as_str()))
                .map(|s| s.name.clone())
                .collect(),
            name: team.name,
            created_at: ts(team.created_at),
            created_by: team.created_by,
            updated_at: ts(team.updated_at),
        }
    }
}

/// `POST /v1/services`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateService {
    /// The service's name, a DNS label.
    #[schema(pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$", max_length = 63)]
    pub name: String,
    /// Its owners, each once.
    #[serde(default)]
    #[schema(value_type = BTreeSet<String>, min_length = 1)]
    pub owners: Vec<String>,
    /// Its environments, each once, among the server's; all the server's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BTreeSet<String>>, min_items = 1,
        pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$", max_length = 63)]
    pub environments: Option<Vec<String>>,
    /// The team that owns it, which must exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$", max_length = 63)]
    pub team: Option<String>,
}

/// `DELETE /v1/services/{service}` query.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DecommissionQuery {
    /// Must repeat the service's name.
    #[param(
        required = true,
        pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$",
        max_length = 63
    )]
    pub confirm: Option<String>,
}

/// `PATCH /v1/services/{service}`: what to change; an absent field stays as it is.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateService {
    /// New owners, each once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BTreeSet<String>>, min_length = 1)]
    pub owners: Option<Vec<String>>,
    /// New environments, each once, among the server's; one with revisions cannot be removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BTreeSet<String>>, min_items = 1,
        pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$", max_length = 63)]
    pub environments: Option<Vec<String>>,
    /// Environments to add to those it has, among the server's (not with `environments`);
    /// its revisions and history elsewhere stay as they are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$", max_length = 63)]
    pub add_environments: Vec<String>,
    /// Let this service deploy plain processes (`spec.workload.process`) on a server that does
    /// not allow them for every service, or no longer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_processes: Option<bool>,
    /// Give it to this team (which must exist), or to none with `""`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"^([a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*)?$", max_length = 63)]
    pub team: Option<String>,
}

/// `DELETE /v1/services/{service}` answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Decommissioned {
    /// The service's name.
    pub decommissioned: String,
}

/// `POST /v1/services/{service}/environments/{env}/deployments`.
#[derive(Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeployRequest {
    /// The merged manifest for this environment (`runway_manifest::Manifest`, schema
    /// `schemas/runway-v1.json`).
    #[schema(value_type = Object)]
    pub manifest: serde_json::Value,
    /// Environment variables (`.runway/env-<env>.yml`).
    #[serde(default)]
    pub env_vars: BTreeMap<String, String>,
    /// An image reference; overrides `spec.image`. A tag is resolved to a digest once, here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1)]
    pub image: Option<String>,
    /// For a process artifact: the code snapshot it runs (`sha256:` and 64 lowercase hex
    /// digits), uploaded first with `PUT …/sources/{digest}`. The revision keeps it: a
    /// rollback or a promotion runs this code, whatever has changed since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^sha256:[0-9a-f]{64}$")]
    pub source: Option<String>,
    /// Start the rollout paused: the new revision starts but its strategy takes no step
    /// until `rollout` is asked to resume or promote. Only progressive strategies
    /// (`regional_rollout`, `runway_canary`, `runway_blue_green`) have steps to pause.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pause: bool,
    /// Deploy this as preview NAME of the service instead (`mr-12`, a DNS label without
    /// `--`): the service `NAME--{service}` in environment `preview`, with this
    /// environment's settings, the service's `preview` secrets (none for a merge request
    /// from a fork), scaled to zero when idle, created on its first deploy and extended by
    /// each one. Needs leave to act in `preview`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length = 61)]
    pub preview: Option<String>,
}

impl fmt::Debug for DeployRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeployRequest")
            .field("image", &self.image)
            .field("source", &self.source)
            .field("pause", &self.pause)
            .field("preview", &self.preview)
            .finish_non_exhaustive()
    }
}

/// `deploy`, `rollback` or `promote`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeploymentKindView {
    /// A new revision.
    Deploy,
    /// Back to an earlier revision.
    Rollback,
    /// A revision copied from another environment.
    Promote,
}

/// Where a deployment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeploymentStateView {
    /// Recorded, not started.
    Pending,
    /// Instances starting or traffic shifting.
    Progressing,
    /// All traffic on the new revision.
    Succeeded,
    /// Stopped short; see the reason.
    Failed,
    /// Undone.
    RolledBack,
}

// The views' names and rules are the store's: one table of each, reached by conversion.

impl From<runway_store::DeploymentKind> for DeploymentKindView {
    fn from(kind: runway_store::DeploymentKind) -> Self {
        use runway_store::DeploymentKind as K;
        match kind {
            K::Deploy => Self::Deploy,
            K::Rollback => Self::Rollback,
            K::Promote => Self::Promote,
        }
    }
}

impl From<DeploymentKindView> for runway_store::DeploymentKind {
    fn from(kind: DeploymentKindView) -> Self {
        match kind {
            DeploymentKindView::Deploy => Self::Deploy,
            DeploymentKindView::Rollback => Self::Rollback,
            DeploymentKindView::Promote => Self::Promote,
        }
    }
}

impl DeploymentKindView {
    /// `deploy`, `rollback` or `promote`.
    pub fn as_str(self) -> &'static str {
        runway_store::DeploymentKind::from(self).as_str()
    }
}

impl From<runway_store::DeploymentState> for DeploymentStateView {
    fn from(state: runway_store::DeploymentState) -> Self {
        use runway_store::DeploymentState as S;
        match state {
            S::Pending => Self::Pending,
            S::Progressing => Self::Progressing,
            S::Succeeded => Self::Succeeded,
            S::Failed => Self::Failed,
            S::RolledBack => Self::RolledBack,
        }
    }
}

impl From<DeploymentStateView> for runway_store::DeploymentState {
    fn from(state: DeploymentStateView) -> Self {
        match state {
            DeploymentStateView::Pending => Self::Pending,
            DeploymentStateView::Progressing => Self::Progressing,
            DeploymentStateView::Succeeded => Self::Succeeded,
            DeploymentStateView::Failed => Self::Failed,
            DeploymentStateView::RolledBack => Self::RolledBack,
        }
    }
}

impl DeploymentStateView {
    /// Whether the deployment has ended.
    pub fn is_final(self) -> bool {
        runway_store::DeploymentState::from(self).is_terminal()
    }

    /// `pending`, `progressing`, `succeeded`, `failed` or `rolled_back`.
    pub fn as_str(self) -> &'static str {
        runway_store::DeploymentState::from(self).as_str()
    }
}

/// One change of what runs for a service in an environment.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeploymentView {
    /// Its id.
    pub id: i64,
    /// The service.
    pub service: String,
    /// The environment.
    pub env: String,
    /// Deploy, rollback or promote.
    pub kind: DeploymentKindView,
    /// The revision that had the most traffic before.
    pub from_revision: Option<String>,
    /// The revision it moves to.
    pub to_revision: String,
    /// Where it is.
    pub state: DeploymentStateView,
    /// Why it is there.
    pub reason: Option<String>,
    /// Who started it.
    pub created_by: String,
    /// When (RFC 3339).
    pub created_at: String,
    /// When its state last changed (RFC 3339).
    pub updated_at: String,
    /// In the answer to a deploy: how its environment variables differ from the revision
    /// serving before (names only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<VariableChanges>,
    /// In the answer to a preview's deploy: the preview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<PreviewView>,
}

/// A preview environment: a service of its own, `{name}--{parent}`, in environment `preview`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PreviewView {
    /// Its name: `mr-12`.
    pub name: String,
    /// Its service: `mr-12--app`.
    pub service: String,
    /// Whose preview it is.
    pub parent: String,
    /// The parent's environment whose settings its deploys take.
    pub base_env: String,
    /// Where it is served.
    pub url: String,
    /// What made it, as its last deploy said (`merge_request`, `ref`, `pipeline`, `fork`).
    #[schema(value_type = Object)]
    pub origin: serde_json::Value,
    /// When it is decommissioned unless a deploy extends it (RFC 3339).
    pub expires_at: String,
    /// Who created it.
    pub created_by: String,
    /// When (RFC 3339).
    pub created_at: String,
    /// Its last deploy (RFC 3339).
    pub updated_at: String,
}

impl PreviewView {
    /// `preview` as served at `url`.
    pub(crate) fn new(preview: runway_store::Preview, url: String) -> Self {
        Self {
            name: preview.name,
            service: preview.service,
            parent: preview.parent,
            base_env: preview.base_env,
            url,
            origin: preview.origin,
            expires_at: ts(preview.expires_at),
            created_by: preview.created_by,
            created_at: ts(preview.created_at),
            updated_at: ts(preview.updated_at),
        }
    }
}

/// How a new revision's environment variables differ from those of the revision serving
/// before it, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct VariableChanges {
    /// Set with `runway env set` (`POST …/variables`) on the revision serving before, and
    /// kept over the repository's: they stay until unset.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<String>,
    /// New.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<String>,
    /// Another value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// Gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
}

impl VariableChanges {
    /// From `before` (the revision serving) to `after`; `kept` as given.
    pub fn between(
        before: &BTreeMap<String, String>,
        after: &BTreeMap<String, String>,
        kept: Vec<String>,
    ) -> Self {
        let names = |pick: &dyn Fn(&String, &String) -> bool| {
            after
                .iter()
                .filter(|(name, value)| pick(name, value))
                .map(|(name, _)| name.clone())
                .collect::<Vec<_>>()
        };
        Self {
            added: names(&|name, _| !before.contains_key(name)),
            changed: names(&|name, value| before.get(name).is_some_and(|old| old != value)),
            removed: before
                .keys()
                .filter(|name| !after.contains_key(*name))
                .cloned()
                .collect(),
            kept,
        }
    }

    /// Nothing to say.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
            && self.added.is_empty()
            && self.changed.is_empty()
            && self.removed.is_empty()
    }
}

impl From<Deployment> for DeploymentView {
    fn from(d: Deployment) -> Self {
        Self {
            id: d.id,
            service: d.service,
            env: d.env,
            kind: d.kind.into(),
            from_revision: d.from_revision,
            to_revision: d.to_revision,
            state: d.state.into(),
            reason: d.reason,
            created_by: d.created_by,
            created_at: ts(d.created_at),
            updated_at: ts(d.updated_at),
            variables: None,
            preview: None,
        }
    }
}

/// `?limit=` of a deployment listing.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LimitQuery {
    /// At most this many (default 20).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// `?after=` of a deployment's events.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AfterQuery {
    /// How many events were already seen (default 0).
    #[param(minimum = 0, maximum = 1000000)]
    pub after: Option<u32>,
}

/// A line in a deployment's story.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeploymentEventView {
    /// The deployment.
    pub deployment_id: i64,
    /// When (RFC 3339).
    pub at: String,
    /// What happened.
    pub message: String,
}

impl From<DeploymentEvent> for DeploymentEventView {
    fn from(e: DeploymentEvent) -> Self {
        Self {
            deployment_id: e.deployment_id,
            at: ts(e.at),
            message: e.message,
        }
    }
}

/// A `deployment_events` event of the watch stream: deployment `deployment`'s events after
/// the first `after` (those a client already has).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WatchEvents {
    /// The deployment.
    pub deployment: i64,
    /// How many of its events came before these.
    pub after: u32,
    /// The new events, oldest first.
    pub events: Vec<DeploymentEventView>,
}

/// One server-sent event of `GET …/watch`, as an event-stream parser reads it: its name and
/// its data, one JSON document as text (for `end`, the reason as plain text).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WatchEvent {
    /// Which event.
    pub event: WatchEventName,
    /// `status`: a StatusView; `deployments`: the 20 newest DeploymentViews;
    /// `deployment_events`: a WatchEvents; `end`: why the stream ends.
    pub data: String,
}

/// The events of `GET …/watch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WatchEventName {
    /// The status document, whole.
    Status,
    /// The newest deployments.
    Deployments,
    /// The newest deployment's events not sent yet.
    DeploymentEvents,
    /// The stream ends (the token was revoked or expired, the service or its environment
    /// went).
    End,
}

/// A service's code snapshot.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SourceView {
    /// The service.
    pub service: String,
    /// `sha256:…` of its archive.
    pub digest: String,
}

/// An immutable revision. Secret versions are shown, never values.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RevisionView {
    /// `hello-dev-00002`.
    pub name: String,
    /// 1, 2, 3… per service and environment.
    pub number: u32,
    /// The service.
    pub service: String,
    /// The environment.
    pub env: String,
    /// The image pinned to its digest, for an image artifact.
    pub image: Option<String>,
    /// Where the platform registry holds that image's copy, which its instances pull
    /// (`<service>/mirror@sha256:…`; absent when images are not mirrored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<String>,
    /// What verified its image's signature, one line per signature rule of the server's that
    /// covered it (`signatures`); absent when none did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signature: Vec<String>,
    /// The code snapshot it runs (`sha256:…`), for a process artifact.
    pub source: Option<String>,
    /// The directory it ran from, for a process revision recorded before snapshots (its
    /// code is whatever is there now).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_dir: Option<String>,
    /// Environment variables.
    pub env_vars: BTreeMap<String, String>,
    /// Those of `env_vars` set with `runway env set` (`POST …/variables`) rather than by the
    /// repository's `env-<env>.yml`: a deploy keeps them until they are unset.
    #[serde(default)]
    pub set_variables: Vec<String>,
    /// The version of each secret it runs with.
    pub secret_versions: BTreeMap<String, u32>,
    /// Who created it.
    pub created_by: String,
    /// When (RFC 3339).
    pub created_at: String,
    /// The merged manifest, as validated.
    #[schema(value_type = Object)]
    pub manifest: serde_json::Value,
}

impl From<Revision> for RevisionView {
    fn from(r: Revision) -> Self {
        let owned = |text: Option<&str>| text.map(str::to_owned);
        Self {
            image: owned(runway_store::artifact_image(&r.artifact)),
            mirror: owned(runway_store::artifact_mirror(&r.artifact)),
            source: owned(runway_store::artifact_source(&r.artifact)),
            signature: r
                .artifact
                .get("signature")
                .and_then(serde_json::Value::as_array)
                .map(|lines| {
                    lines
                        .iter()
                        .filter_map(|l| l.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            source_dir: owned(
                r.artifact
                    .get("source_dir")
                    .and_then(serde_json::Value::as_str),
            ),
            name: r.name,
            number: r.number,
            service: r.service,
            env: r.env,
            env_vars: r.env_vars,
            set_variables: r.set_vars.into_iter().collect(),
            secret_versions: r.secret_versions,
            created_by: r.created_by,
            created_at: ts(r.created_at),
            manifest: r.manifest,
        }
    }
}

/// `POST /v1/services/{service}/environments/{env}/rollback`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackRequest {
    /// The revision to go back to; the one before the serving one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

/// `POST /v1/services/{service}/environments/{env}/variables`: a new revision of the one
/// serving, with these environment variables set and unset (as `gcloud run services update
/// --set-env-vars` does).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetVariables {
    /// Variables to set, by name (added, or replacing the value they had).
    #[serde(default)]
    #[schema(schema_with = variables_schema)]
    pub set: BTreeMap<String, String>,
    /// Variables to remove. Only those set outside the manifest can be (by a previous
    /// `set`, or `.runway/env-<env>.yml`).
    #[serde(default)]
    pub unset: Vec<String>,
    /// Start a progressive rollout paused, as for a deploy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pause: bool,
}

/// `POST /v1/services/{service}/promote`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromoteRequest {
    /// The environment whose serving revision is promoted.
    #[schema(pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$", max_length = 63)]
    pub from: String,
    /// The environment it goes to; after `from` in the promotion order.
    #[schema(pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$", max_length = 63)]
    pub to: String,
}

/// One revision in the desired state.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DesiredView {
    /// The revision.
    pub revision: String,
    /// How many instances.
    pub instances: u32,
    /// Its traffic weight.
    pub weight: u32,
}

impl From<DesiredRevision> for DesiredView {
    fn from(d: DesiredRevision) -> Self {
        Self {
            revision: d.revision,
            instances: d.instances,
            weight: d.weight,
        }
    }
}

/// A revision's share of traffic as the ingress routes it now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RouteView {
    /// The revision.
    pub revision: String,
    /// Its weight.
    pub weight: u32,
}

/// `progressing`, `ready`, `failing` or `timed_out`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// Instances are starting.
    Progressing,
    /// Every desired instance is ready.
    Ready,
    /// Instances fail.
    Failing,
    /// Not ready within the bound.
    TimedOut,
}

impl Condition {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Progressing => "progressing",
            Self::Ready => "ready",
            Self::Failing => "failing",
            Self::TimedOut => "timed_out",
        }
    }
}

/// How one revision's instances are doing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RevisionStatus {
    /// The revision.
    pub revision: String,
    /// Instances wanted.
    pub desired_instances: u32,
    /// Instances ready.
    pub ready: u32,
    /// Instances starting.
    pub starting: u32,
    /// Instances failed.
    pub failed: u32,
    /// Its condition.
    pub condition: Condition,
    /// Why, when it is not ready.
    pub reason: Option<String>,
    /// Its traffic over the last minutes, when it has been routed long enough to tell.
    #[serde(default)]
    pub traffic: Option<TrafficView>,
}

/// A revision's traffic over the last minutes, from the ingress's counters read every 10 s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TrafficView {
    /// The service.
    pub service: String,
    /// The environment.
    pub env: String,
    /// The revision.
    pub revision: String,
    /// The span the figures cover (up to 300 s; less for a revision routed since).
    pub window_seconds: f64,
    /// Requests answered per second.
    pub requests_per_second: f64,
    /// The share answered with a 5xx, from 0 to 1.
    pub error_ratio: f64,
    /// The 99th percentile of latency; none with no request.
    pub p99_seconds: Option<f64>,
}

/// One instance as the runtime sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InstanceView {
    /// `{revision}-{6 hex}`.
    pub id: String,
    /// Its revision.
    pub revision: String,
    /// The runtime's phase, snake_case (`starting`, `running`, …).
    pub phase: String,
    /// Whether it passes its readiness check.
    pub ready: bool,
    /// The port it listens on.
    pub port: Option<u16>,
    /// Where the ingress reaches it (`10.213.0.2:41234` on its own network, `127.0.0.1:41234`
    /// on the host's).
    pub address: Option<String>,
    /// How often it was restarted.
    pub restarts: u32,
    /// What the runtime says about it.
    pub message: String,
}

/// An operator's command to the rollout in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RolloutCommandView {
    /// Hold the weights where they are (a failed analysis still rolls back).
    Pause,
    /// Carry on; the current step's analysis window starts again.
    Resume,
    /// Move all traffic back to the stable revision now; the deployment is rolled back.
    Abort,
    /// Go to 100 % as soon as the new revision is ready (blue/green: switch now).
    Promote,
}

impl RolloutCommandView {
    /// `pause`, `resume`, `abort` or `promote`.
    pub fn as_str(self) -> &'static str {
        runway_store::RolloutCommand::from(self).as_str()
    }
}

impl From<RolloutCommandView> for runway_store::RolloutCommand {
    fn from(command: RolloutCommandView) -> Self {
        match command {
            RolloutCommandView::Pause => Self::Pause,
            RolloutCommandView::Resume => Self::Resume,
            RolloutCommandView::Abort => Self::Abort,
            RolloutCommandView::Promote => Self::Promote,
        }
    }
}

/// `POST …/rollout`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutRequest {
    pub command: RolloutCommandView,
}

/// The control plane's replicas, when several share one store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ControlPlaneView {
    /// The replica that answered.
    pub replica: String,
    /// The replica that leads (runs the controller), when one does. Through another, the
    /// instances and routes are as that replica observes them, and the revisions' progress,
    /// scaling and rollout (which the leader keeps) are not shown.
    pub leader: Option<String>,
}

/// The platform registry's disk, shown to admins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RegistryUsageView {
    /// Bytes its content takes (each blob once, uploads in progress included).
    pub bytes: u64,
    /// Blobs (layers, configs, manifests) it holds.
    pub blobs: u64,
    /// The bound on `bytes` (`registry.max_bytes`): a push or mirror past it is refused.
    pub max_bytes: Option<u64>,
}

/// The progressive rollout in progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RolloutView {
    /// The deployment it belongs to.
    pub deployment: i64,
    /// The manifest's strategy: `regional_rollout`, `runway_canary`, `runway_blue_green`.
    pub strategy: String,
    /// `waiting_ready`, `stepping`, `staged`, `switched`, `completed` or `rolled_back`.
    pub phase: String,
    /// The new revision's share of the traffic, percent.
    pub new_weight: u32,
    /// The step it is at (1-based), of how many.
    pub step: Option<u32>,
    pub steps: Option<u32>,
    /// An operator paused it.
    pub paused: bool,
    /// What it waits for, or what it did last.
    pub message: String,
    /// A step under analysis (`runway_canary`'s, before 100 %): its analysis so far. Absent
    /// for strategies without one, and while waiting for the new revision to be ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<RolloutAnalysis>,
}

/// A canary step's analysis so far: both revisions' figures over the step's window, the
/// limits in force (the manifest's `spec.workload.rollout.analysis`, its defaults applied),
/// and how each measure stands, by the rules the controller decides with: what it shows
/// is what the next pass would decide on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RolloutAnalysis {
    /// The new revision, judged.
    pub revision: String,
    /// The stable revision it is compared with.
    pub stable_revision: String,
    /// When this step's window began (RFC 3339): the figures are since then.
    pub window_started_at: Option<String>,
    /// How long a step's window lasts (the strategy's pause), seconds: the step moves on at
    /// its end, and latency is judged over a whole window only. A step held past it (too few
    /// requests, paused) is judged over all the time since it began.
    pub window_seconds: f64,
    /// The new revision's figures over the window so far.
    pub canary: AnalysisFigures,
    /// The stable revision's, over the same time.
    pub stable: AnalysisFigures,
    /// The limits the window is held to.
    pub thresholds: AnalysisThresholds,
    /// Each measure against its limit.
    pub checks: AnalysisChecks,
    /// The window's verdict now: `pass`, `inconclusive` (the step holds) or `fail` (the
    /// rollout rolls back). A latency failure is `inconclusive` until the window is whole.
    pub verdict: String,
    /// Why it fails or is inconclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One revision's figures over a step's window, from the ingress's counters and the
/// runtime's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AnalysisFigures {
    /// Requests answered.
    pub requests: u64,
    /// Of them, with a 5xx status (the ingress's own 502/503/504 included).
    pub errors_5xx: u64,
    /// Their share, 0 to 1.
    pub error_ratio: f64,
    /// The 99th percentile of latency, seconds (as Prometheus's `histogram_quantile`); none
    /// without a request.
    pub p99_seconds: Option<f64>,
    /// Instance restarts.
    pub restarts: u32,
    /// Readiness probe failures.
    pub readiness_failures: u32,
}

/// The limits a canary's window is held to: the manifest's, its defaults applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AnalysisThresholds {
    /// Fewer requests to the new revision leave the window inconclusive.
    pub min_requests: u64,
    /// The highest 5xx share, 0 to 1; not applied when the stable revision is over it too.
    pub max_error_ratio: f64,
    /// How far the 5xx share may exceed the stable revision's, 0 to 1.
    pub max_error_ratio_over_stable: f64,
    /// The highest p99, seconds; not applied when the stable revision is over it too.
    pub latency_slo_seconds: f64,
    /// How many times the stable revision's p99 the new one's may be...
    pub max_p99_over_stable_ratio: f64,
    /// ... and by at least how much more it must be to fail, seconds.
    pub min_p99_increase_seconds: f64,
    /// The least requests in each window for the p99s to be compared.
    pub p99_samples: u64,
    /// Restarts allowed in the window.
    pub max_restarts: u32,
    /// Readiness failures allowed in the window.
    pub max_readiness_failures: u32,
    /// How many windows a step may stay inconclusive before the rollout is rolled back.
    pub max_inconclusive_windows: u32,
}

/// Each measure of a canary's window against its limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AnalysisChecks {
    /// The new revision's requests against `min_requests` (`within`: enough to judge).
    pub requests: AnalysisCheck,
    /// The 5xx share.
    pub error_ratio: AnalysisCheck,
    /// The p99 latency, seconds.
    pub latency_p99: AnalysisCheck,
    /// Instance restarts.
    pub restarts: AnalysisCheck,
    /// Readiness probe failures.
    pub readiness_failures: AnalysisCheck,
}

/// One measure against its limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AnalysisCheck {
    /// `within`, `over`, `too_few` (too few requests to the new revision to judge it) or
    /// `unmeasured` (no figure).
    pub standing: String,
    /// The new revision's value, in the measure's unit (a count, a ratio, seconds).
    pub value: Option<f64>,
    /// The stable revision's, when it is compared with (it served `min_requests`).
    pub stable_value: Option<f64>,
    /// The limit in force: the lowest of those that apply now (the absolute one, the one
    /// relative to the stable revision); for the requests, the least needed. None when none
    /// applies or the measure is not judged.
    pub limit: Option<f64>,
    /// Why it is over or not judged, when the verdict would say so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A revision's autoscaling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ScalingView {
    /// The revision.
    pub revision: String,
    /// Requests in flight, queued and held at the ingress now.
    pub concurrency: u64,
    /// The autoscaler's last decision, in one line.
    pub last_decision: Option<String>,
    /// When it was made (RFC 3339).
    pub last_decision_at: Option<String>,
    /// The last decision that changed the instance count.
    pub last_change: Option<String>,
    /// When it was made (RFC 3339).
    pub last_change_at: Option<String>,
    /// That decision whole (`runway_autoscaler::DecisionEvent`): its settings, ready and
    /// desired counts, state before, demand figures, intermediate figures and reasons; it
    /// replays to the same count.
    #[schema(value_type = Option<Object>)]
    pub last_change_event: Option<serde_json::Value>,
    /// A burst at least twice the ready capacity: no scale-down until it passes.
    pub panicking: bool,
}

/// A service's state in an environment.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StatusView {
    /// The service.
    pub service: String,
    /// The environment.
    pub env: String,
    /// Where it is served.
    pub url: String,
    /// What should run.
    pub desired: Vec<DesiredView>,
    /// What the ingress routes now.
    pub routes: Vec<RouteView>,
    /// How each revision is doing.
    pub revisions: Vec<RevisionStatus>,
    /// Every instance.
    pub instances: Vec<InstanceView>,
    /// Each autoscaled revision: its demand now and the autoscaler's last decisions.
    #[serde(default)]
    pub scaling: Vec<ScalingView>,
    /// The progressive rollout in progress, if any.
    #[serde(default)]
    pub rollout: Option<RolloutView>,
    /// Its maintenance, when clients get a 503 (`runway maintenance on`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceView>,
    /// Which replica answered and which leads, when the control plane has several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlaneView>,
    /// The platform registry's disk: to an admin only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<RegistryUsageView>,
    /// Parts of this status that could not be read (the runtime or the store did not answer),
    /// each saying which and why; those parts are empty rather than wrong.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `?instance=&lines=&follow=` of the logs.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogsQuery {
    /// One instance's lines only.
    pub instance: Option<String>,
    /// The last this many lines (default 100).
    #[param(minimum = 0, maximum = 10000)]
    pub lines: Option<usize>,
    /// Keep streaming new lines as NDJSON until the client goes.
    #[serde(default)]
    pub follow: bool,
    /// The output of instances that ended (stopped, crashed and replaced), kept a while
    /// (`kubectl logs --previous`): an hour and 64 instances on one machine, a container's
    /// run before its restart on Kubernetes. Not with `follow`.
    #[serde(default)]
    pub previous: bool,
    /// Only lines written since then: an RFC 3339 time in UTC (`Z` or `+00:00`, from 1970),
    /// or a duration before now (`90s`, `10m`, `2h`, `1d`). With it, `lines` defaults to
    /// 10000.
    #[param(
        pattern = r"^(\+?0*[0-9]{1,11}[smhd]|((19[7-9][0-9]|[2-9][0-9]{3})-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))|(19(7[26]|8[048]|9[26])|[2-9][0-9](0[48]|[2468][048]|[13579][26])|(2[048]|3[26]|4[048]|5[26]|6[048]|7[26]|8[048]|9[26])00)-02-29)T([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]*)?(Z|\+00:00))$"
    )]
    pub since: Option<String>,
}

/// `stdout` or `stderr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One line an instance wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LogLine {
    /// The instance.
    pub instance: String,
    /// When (RFC 3339).
    pub time: String,
    /// Which stream.
    pub stream: Stream,
    /// The line, without its newline.
    pub text: String,
}

/// `PUT …/secrets/{name}`. The value is never returned, logged or printed.
#[derive(Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetSecret {
    /// The secret's value: no NUL byte (an environment variable cannot hold one), 64 KiB as
    /// UTF-8 at most.
    #[schema(pattern = r"^[^\x00]*$")]
    pub value: String,
}

impl fmt::Debug for SetSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SetSecret(<redacted>)")
    }
}

/// A secret as listed: name and latest version, never the value.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SecretInfoView {
    /// Its name.
    pub name: String,
    /// Its latest version.
    pub version: u32,
    /// Who set it.
    pub created_by: String,
    /// When (RFC 3339).
    pub created_at: String,
    /// Where that version's value came from when not set through the API: its place in Vault
    /// and Vault's version (`vault secret/runway/env/production/service/app/API_KEY version
    /// 3`).
    pub origin: Option<String>,
}

impl From<SecretInfo> for SecretInfoView {
    fn from(s: SecretInfo) -> Self {
        Self {
            name: s.name,
            version: s.version,
            created_by: s.created_by,
            created_at: ts(s.created_at),
            origin: s.origin,
        }
    }
}

/// `POST /v1/tokens`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// A name for people; the audit log's actor.
    #[schema(min_length = 1, pattern = r"\S")]
    pub name: String,
    /// What it allows.
    pub scope: ScopeView,
    /// Seconds until it expires (at most ten years); never when absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole_number"
    )]
    #[schema(minimum = 1, maximum = 315_360_000)]
    pub expires_in_seconds: Option<u64>,
}

/// A whole number, also when written with a zero fraction (`918.0`): JSON Schema counts that
/// an integer, so clients generated from the document may send it so.
fn whole_number<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<u64>, D::Error> {
    let Some(number) = Option::<serde_json::Number>::deserialize(de)? else {
        return Ok(None);
    };
    if let Some(whole) = number.as_u64() {
        return Ok(Some(whole));
    }
    match number.as_f64() {
        // Whole and within u64, so the conversion is exact.
        Some(float)
            if float.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&float) =>
        {
            Ok(Some(float as u64))
        }
        _ => Err(serde::de::Error::custom(format!(
            "{number} is not a whole number from 0 up"
        ))),
    }
}

/// A token as listed; never its text or hash.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenInfo {
    /// Its id.
    pub id: i64,
    /// Its name.
    pub name: String,
    /// What it allows.
    pub scope: ScopeView,
    /// When it stops working (RFC 3339).
    pub expires_at: Option<String>,
    /// When it was revoked (RFC 3339).
    pub revoked_at: Option<String>,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// Who created it.
    pub created_by: String,
}

impl From<Token> for TokenInfo {
    fn from(t: Token) -> Self {
        Self {
            id: t.id,
            name: t.name,
            scope: ScopeView::from(&t.scope),
            expires_at: t.expires_at.map(ts),
            revoked_at: t.revoked_at.map(ts),
            created_at: ts(t.created_at),
            created_by: t.created_by,
        }
    }
}

/// `POST /v1/tokens` answer: the token's text, shown this once.
#[derive(Clone, Serialize, Deserialize, ToSchema)]
pub struct CreatedToken {
    /// `runway_admin_…` or `runway_deploy_…`; not shown again.
    pub token: String,
    /// The token's record.
    pub info: TokenInfo,
}

impl fmt::Debug for CreatedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreatedToken")
            .field("token", &"<redacted>")
            .field("info", &self.info)
            .finish()
    }
}

/// `POST /v1/session`: the token a console session is made from.
#[derive(Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// `runway_admin_…` or `runway_deploy_…` (not an identity token); without it, the
    /// request's bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl fmt::Debug for CreateSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CreateSession(<redacted>)")
    }
}

/// A console session: a token of its own, made from the one signed in with, whose text is
/// only in the `runway_session` cookie.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionView {
    /// The session's token id.
    pub token_id: i64,
    /// `console: <the token's name>`: the audit log's actor for what the console does.
    pub name: String,
    /// What it allows: the same as the token it was made from.
    pub scope: ScopeView,
    /// The token it was made from; revoking that one ends the session.
    pub parent: i64,
    /// When it ends (RFC 3339): 12 hours after sign-in at most, never after its parent.
    pub expires_at: String,
}

/// `?after=&limit=` of the audit log.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Entries with an id above this (default 0).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// At most this many (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// The last this many entries instead (still oldest first); not with `after` or `limit`
    /// (400).
    #[param(minimum = 1, maximum = 1000)]
    pub last: Option<u32>,
    /// Only what concerns this service: it, its environments and its secrets.
    pub service: Option<String>,
    /// Only this actor's (a token's name, an identity, `reconciler`, `acme`).
    pub actor: Option<String>,
    /// Only this action, or its family (`secret` for `secret.set` and `secret.unset`).
    pub action: Option<String>,
    /// Only entries since then: an RFC 3339 time in UTC, or a duration before now (`90s`,
    /// `10m`, `2h`, `1d`), as the logs' `since`.
    pub since: Option<String>,
    /// Only people's actions (tokens, identities), or only the platform's own (the
    /// reconciler's rollout events, ACME).
    #[param(inline)]
    pub by: Option<AuditBy>,
}

/// Who an audit entry is by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuditBy {
    /// People and CI jobs: a token or an identity.
    People,
    /// The platform itself.
    Platform,
}

/// One line of the audit log.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditEntryView {
    /// Increasing with time.
    pub id: i64,
    /// When (RFC 3339).
    pub at: String,
    /// The token's name.
    pub actor: String,
    /// What, e.g. `deploy`, `secret.set`.
    pub action: String,
    /// On what, e.g. `hello/dev`.
    pub target: String,
    /// Details; never a secret's value.
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
    /// The hash of the entry before it (64 zeros before the first); absent only for an entry
    /// an older Runway wrote and no write has chained yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_hash: Option<String>,
    /// SHA-256 of `prev_hash` and this entry's canonical encoding (lower-case hex): what
    /// `GET /v1/audit/verify` checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
}

impl From<AuditEntry> for AuditEntryView {
    fn from(a: AuditEntry) -> Self {
        Self {
            id: a.id,
            at: ts(a.at),
            actor: a.actor,
            action: a.action,
            target: a.target,
            detail: a.detail,
            prev_hash: a.prev_hash,
            hash: a.hash,
        }
    }
}

/// What adding a custom domain takes.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddDomain {
    /// The name (`www.example.com`): a DNS name of at least two labels, no wildcard, not one
    /// of the platform's own.
    #[schema(schema_with = domain_schema)]
    pub domain: String,
    /// The service it reaches.
    #[schema(pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$", max_length = 63)]
    pub service: String,
    /// In this environment.
    #[schema(pattern = r"^[a-z0-9]([a-z0-9]|-{1,2}[a-z0-9])*$", max_length = 63)]
    pub env: String,
}

/// [`AddDomain::domain`] as `domains::check_domain` takes it: labels of letters, digits and
/// inner `-` (1 to 63 each, any case, lower-cased by the server), at least two, 253 characters
/// at most, final dots dropped; not all digits (an address). Two patterns, as one regular
/// expression without look-ahead cannot say both.
/// `set`'s schema: values by a variable's name, which is letters, digits and `_`, not starting
/// with a digit (a name the platform sets itself is refused all the same, with 422).
fn variables_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
    Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(
                "Variables to set, by name (added, or replacing the value they had).",
            ))
            .additional_properties(Some(ObjectBuilder::new().schema_type(Type::String)))
            .property_names(Some(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some("^[A-Za-z_][A-Za-z0-9_]*$")),
            ))
            .build(),
    )
}

fn domain_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, Schema, Type};
    let label = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    let all_of = AllOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(format!(r"^({label}\.)+{label}\.*$")))
                .max_length(Some(253)),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("[A-Za-z-]")),
        )
        .description(Some(
            "The name (`www.example.com`): a DNS name of at least two labels, no wildcard, not \
             an address, not one of the platform's own.",
        ))
        .build();
    Schema::AllOf(all_of)
}

/// A custom domain and where its certificate stands.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DomainView {
    /// The name.
    pub domain: String,
    /// The service it reaches.
    pub service: String,
    /// In this environment.
    pub env: String,
    /// `pending` (no certificate yet), `issued`, or `failed` (see `detail`; a certificate
    /// issued before, if any, is still served).
    pub state: String,
    /// Why the last attempt failed, in the ACME server's words; or why none is made.
    pub detail: Option<String>,
    /// When the served certificate expires (RFC 3339).
    pub not_after: Option<String>,
    /// When the next attempt is due: a retry, or the renewal (RFC 3339).
    pub next_attempt_at: Option<String>,
    /// Failed attempts in a row.
    pub attempts: u32,
    /// Where it is served: `https://{domain}/` (with the ingress's port when not 443).
    pub url: String,
    /// When it was added (RFC 3339).
    pub created_at: String,
    /// Who added it.
    pub created_by: String,
}

impl DomainView {
    /// The view of `domain`, served at `url`.
    pub fn new(domain: runway_store::Domain, url: String) -> Self {
        Self {
            state: domain.state.as_str().to_owned(),
            detail: domain.detail,
            not_after: domain.not_after.map(ts),
            next_attempt_at: domain.next_attempt_at.map(ts),
            attempts: domain.attempts,
            url,
            created_at: ts(domain.created_at),
            created_by: domain.created_by,
            domain: domain.name,
            service: domain.service,
            env: domain.env,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// JSON Schema's integer 918.0 is 918: what the document allows, the server takes.
    #[test]
    fn a_whole_number_may_have_a_zero_fraction() {
        let expiry = |json: &str| {
            serde_json::from_str::<CreateToken>(&format!(
                r#"{{"name": "ci", "scope": {{"admin": {{}}}}, "expires_in_seconds": {json}}}"#
            ))
            .map(|t| t.expires_in_seconds)
        };
        assert_eq!(expiry("918").unwrap(), Some(918));
        assert_eq!(expiry("918.0").unwrap(), Some(918));
        assert_eq!(expiry("9.18e2").unwrap(), Some(918));
        assert_eq!(expiry("null").unwrap(), None);
        for refused in ["918.5", "-1", "-1.0", "1e20", "\"918\""] {
            assert!(expiry(refused).is_err(), "{refused}");
        }
    }
}

/// `POST /v1/inventory`: an inventory document (`runway inventory diff|apply`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InventoryRequest {
    /// The document as its file holds it (YAML or JSON, `schemas/inventory-v1.json`); its
    /// SHA-256 is what the audit log records.
    pub document: String,
    /// The file's name, in the located errors (`inventory.yml:12:5: …`). Default
    /// `inventory.yml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Make the services what the document says (admin); otherwise only say what would change.
    #[serde(default)]
    pub apply: bool,
    /// Decommission the services the document does not list (with their previews); otherwise
    /// they are kept, and said to be unlisted.
    #[serde(default)]
    pub prune: bool,
}

/// What an inventory document changes, or changed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct InventoryPlan {
    /// The document's SHA-256 (`sha256:…`), as the audit log records it.
    pub digest: String,
    /// Whether the changes were made (`apply`), or only said.
    pub applied: bool,
    /// Services to onboard.
    pub create: Vec<InventoryCreate>,
    /// Services whose record changes.
    pub update: Vec<InventoryUpdate>,
    /// Services the document does not list, decommissioned (`prune`).
    pub decommission: Vec<String>,
    /// Services the document does not list, kept (no `prune`).
    pub unlisted: Vec<String>,
    /// Services as the document says already.
    pub unchanged: Vec<String>,
}

/// A service an inventory onboards.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InventoryCreate {
    /// Its name.
    pub name: String,
    /// Its owners.
    pub owners: Vec<String>,
    /// Its environments.
    pub environments: Vec<String>,
    /// The unlisted service of the same GitLab project it seems to replace (a rename): a
    /// service is not renamed; the old one goes only with `prune`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

/// A service an inventory changes.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InventoryUpdate {
    /// Its name.
    pub name: String,
    /// What changes.
    pub changes: Vec<FieldChange>,
}

/// One field's change.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FieldChange {
    /// The field (`owners`, `environments`, `allow_processes`, or an upstream key such as
    /// `project_id`).
    pub field: String,
    /// Its value now (`null`: none).
    pub from: serde_json::Value,
    /// Its value after.
    pub to: serde_json::Value,
}

/// What putting a service in maintenance takes (`PUT …/maintenance`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetMaintenance {
    /// What clients are told, as the 503's body (at most 1024 bytes); empty, a sentence
    /// saying that the service is under maintenance.
    #[schema(max_length = 1024)]
    pub message: String,
    /// Networks (`203.0.113.0/24`, `2001:db8::1`) whose clients still reach the service: the
    /// team's own, to check it before it is opened again. At most 256.
    #[serde(default)]
    pub allow: Vec<String>,
    /// The `Retry-After` clients are given, in seconds (at most a day). Default 300.
    #[serde(default)]
    #[schema(maximum = 86400)]
    pub retry_after_seconds: Option<u32>,
}

/// A service in maintenance in one environment: its requests are answered with a 503 but for
/// the clients in `allow`; its instances keep running.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MaintenanceView {
    pub service: String,
    pub env: String,
    pub message: String,
    pub allow: Vec<String>,
    pub retry_after_seconds: u32,
    /// Since when (RFC 3339).
    pub since: String,
    /// Who turned it on.
    pub set_by: String,
}

impl From<runway_store::Maintenance> for MaintenanceView {
    fn from(m: runway_store::Maintenance) -> Self {
        Self {
            service: m.service,
            env: m.env,
            message: m.message,
            allow: m.allow,
            retry_after_seconds: m.retry_after_seconds,
            since: ts(m.since),
            set_by: m.set_by,
        }
    }
}
