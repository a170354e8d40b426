//! What the store keeps: the records the control plane creates, and the inputs that create them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{StoreError, Timestamp};

/// A service onboarded onto the platform (the inventory). It exists before its first deploy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Service {
    /// The service's identity: never given to another service, even one onboarded again under
    /// this name after a decommission.
    pub id: i64,
    /// The service's name, unique on this control plane.
    pub name: String,
    /// Who owns it (e-mail handles or group names; the store does not interpret them).
    pub owners: Vec<String>,
    /// The environments it may be deployed to, e.g. `["staging", "production"]`.
    pub environments: Vec<String>,
    /// When it was onboarded.
    pub created_at: Timestamp,
    /// Who onboarded it.
    pub created_by: String,
    /// An admin let it run plain processes where the server does not allow them for all.
    pub allow_processes: bool,
    /// Upstream's keys of a service onboarded through the inventory (`project_id`, `members`,
    /// `groups`, `regions`…); `None` for one onboarded by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<serde_json::Value>,
    /// The team that owns it: its members act on it with their roles in the team.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
}

/// A key Runway signs instances' identity tokens with: the private key sealed with the master
/// key, and the public JSON Web Key the issuer publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityKey {
    /// Its key id (`kid`), as tokens and the key set name it.
    pub kid: String,
    /// The sealed private key (PKCS#8): its nonce...
    pub nonce: Vec<u8>,
    /// ...and its ciphertext, bound to `kid`.
    pub ciphertext: Vec<u8>,
    /// The public key as a JSON Web Key (JSON text).
    pub public_jwk: String,
    /// When it was made: it signs until a newer key exists.
    pub created_at: Timestamp,
    /// When it stops being published: after the last token it may have signed expired.
    pub expires_at: Timestamp,
}

/// A team: people (by name or by their sign-in provider's group) with a role on every
/// service the team owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Team {
    /// The team's name, a DNS label.
    pub name: String,
    /// Who is in it, and with which role; at most one entry per subject.
    pub members: Vec<TeamMember>,
    /// When it was made.
    pub created_at: Timestamp,
    /// Who made it.
    pub created_by: String,
    /// When its members last changed.
    pub updated_at: Timestamp,
}

/// Someone in a team: a person, or everyone in a group of the sign-in provider.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TeamMember {
    /// `user:<name>` or `group:<path>`, as the sign-in provider names them.
    pub subject: String,
    /// Their role on the team's services.
    pub role: runway_secrets::Role,
    /// The environments the role is for; `None` for every one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environments: Option<Vec<String>>,
}

/// A service as the inventory document has it ([`Store::inventory_apply`](crate::Store::inventory_apply)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryRecord {
    /// The service.
    pub name: String,
    /// Its owners.
    pub owners: Vec<String>,
    /// Its environments.
    pub environments: Vec<String>,
    /// Whether it may run plain processes.
    pub allow_processes: bool,
    /// Upstream's keys, kept with it ([`Service::inventory`]).
    pub upstream: serde_json::Value,
}

/// What applying an inventory document changes, as its caller decided against the services
/// there are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryChanges {
    /// Services to onboard.
    pub create: Vec<InventoryRecord>,
    /// Services to change to what the document says.
    pub update: Vec<InventoryRecord>,
    /// Services to decommission (the document does not list them, and pruning was asked).
    pub decommission: Vec<String>,
    /// Services the document does not list, kept (no pruning asked): for the audit log.
    pub unlisted: Vec<String>,
}

/// What onboarding a service takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewService {
    /// The service's name.
    pub name: String,
    /// Its owners.
    pub owners: Vec<String>,
    /// Its environments; at least one, no duplicates.
    pub environments: Vec<String>,
    /// The team that owns it, if any; the team must exist.
    #[serde(default)]
    pub team: Option<String>,
}

/// A change to a service's inventory record; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceUpdate {
    /// New owners.
    pub owners: Option<Vec<String>>,
    /// New environments; one that has revisions cannot be removed.
    pub environments: Option<Vec<String>>,
    /// Let it run plain processes, or no longer.
    pub allow_processes: Option<bool>,
    /// Give it to a team (`Some(Some(team))`), or to none (`Some(None)`).
    #[serde(default)]
    pub team: Option<Option<String>>,
}

/// A preview environment: the service `<name>--<parent>` (its one environment `preview`),
/// deployed with the settings of its parent's `base_env`, until `expires_at` unless a deploy
/// extends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preview {
    /// The preview's service: `mr-12--app`.
    pub service: String,
    /// Whose preview it is: `app`.
    pub parent: String,
    /// Its name: `mr-12`.
    pub name: String,
    /// The parent's environment whose settings (overrides, variables) its deploys take.
    pub base_env: String,
    /// What made it, as the deploy said: a merge request, its ref, its pipeline, and whether
    /// it came from a fork.
    pub origin: serde_json::Value,
    /// When it is decommissioned unless a deploy extends it.
    pub expires_at: Timestamp,
    /// When it was created.
    pub created_at: Timestamp,
    /// Who created it.
    pub created_by: String,
    /// Its last deploy.
    pub updated_at: Timestamp,
}

/// A deploy of a preview: what [`Store::preview_put`](crate::Store::preview_put) creates, or
/// extends when it exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPreview {
    /// Whose preview: a service onboarded in `preview`.
    pub parent: String,
    /// Its name: a DNS label short enough that `<name>--<parent>` is one.
    pub name: String,
    /// See [`Preview::base_env`].
    pub base_env: String,
    /// See [`Preview::origin`].
    pub origin: serde_json::Value,
    /// How long from now it lives.
    pub ttl: std::time::Duration,
    /// The most previews the parent may have; a new one past it is refused.
    pub max_per_parent: u32,
}

/// An immutable revision of a service in one environment: the merged manifest, the artifact
/// pinned to a digest, the environment variables and the secret versions it runs with.
///
/// There is no update and no delete of a revision; it goes only with its service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Revision {
    /// The store's identifier.
    pub id: i64,
    /// The service.
    pub service: String,
    /// The environment.
    pub env: String,
    /// 1, 2, 3… per service and environment, allocated by the store.
    pub number: u32,
    /// `<service>-<env>-<number, 5 digits zero padded>`, e.g. `hello-production-00007`.
    pub name: String,
    /// The merged manifest, as JSON.
    pub manifest: serde_json::Value,
    /// The artifact (image reference and digest, or a command); opaque to the store, but for
    /// the two keys that make it a plain process ([`artifact_source`], [`artifact_is_process`]).
    pub artifact: serde_json::Value,
    /// Environment variables.
    pub env_vars: BTreeMap<String, String>,
    /// Those of `env_vars` set with `runway env set` rather than by the repository: a deploy
    /// from the repository keeps them until they are unset.
    #[serde(default)]
    pub set_vars: BTreeSet<String>,
    /// The version of each secret the revision runs with, by secret name.
    pub secret_versions: BTreeMap<String, u32>,
    /// Who created it.
    pub created_by: String,
    /// When it was created.
    pub created_at: Timestamp,
}

/// The code snapshot a plain-process artifact names (`source`, a digest), read by the API, the
/// controller and the snapshots' garbage collector alike.
pub fn artifact_source(artifact: &serde_json::Value) -> Option<&str> {
    artifact.get("source").and_then(serde_json::Value::as_str)
}

/// The image an image artifact runs, pinned to its digest at deploy (`image`).
pub fn artifact_image(artifact: &serde_json::Value) -> Option<&str> {
    artifact.get("image").and_then(serde_json::Value::as_str)
}

/// Where an image artifact's image is mirrored (`mirror`), recorded at deploy when images
/// are: `<service>/mirror@sha256:…` in the platform registry, without its host (which may
/// change), or an external mirror's whole reference.
pub fn artifact_mirror(artifact: &serde_json::Value) -> Option<&str> {
    artifact.get("mirror").and_then(serde_json::Value::as_str)
}

/// Whether a `mirror` is in an external registry (`registry.external`): it begins with that
/// registry's host, where the platform registry's begin with a service's name, which has no
/// `.` or `:`.
pub fn mirror_is_external(mirror: &str) -> bool {
    mirror
        .split_once('/')
        .is_some_and(|(first, _)| first.contains(['.', ':']))
}

/// Whether an artifact is a plain process: it names its code snapshot, or (recorded before
/// snapshots) the directory it ran from, `source_dir`.
pub fn artifact_is_process(artifact: &serde_json::Value) -> bool {
    artifact.get("source").is_some() || artifact.get("source_dir").is_some()
}

/// The content of a revision about to be recorded; the store allocates its number and name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewRevision {
    /// The service (must exist).
    pub service: String,
    /// The environment (must be one of the service's).
    pub env: String,
    /// The merged manifest.
    pub manifest: serde_json::Value,
    /// The artifact, pinned.
    pub artifact: serde_json::Value,
    /// Environment variables.
    pub env_vars: BTreeMap<String, String>,
    /// Those of `env_vars` set with `runway env set` (see [`Revision::set_vars`]).
    #[serde(default)]
    pub set_vars: BTreeSet<String>,
    /// Secret versions, by name.
    pub secret_versions: BTreeMap<String, u32>,
}

/// The name of revision `number` of `service` in `env`: `hello-production-00007`.
pub fn revision_name(service: &str, env: &str, number: u32) -> String {
    format!("{service}-{env}-{number:05}")
}

/// Why a deployment was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeploymentKind {
    /// A new revision from a manifest and an artifact.
    Deploy,
    /// Traffic moved back to an earlier revision; nothing rebuilt.
    Rollback,
    /// A revision copied from another environment.
    Promote,
}

/// Where a deployment is. `Succeeded`, `Failed` and `RolledBack` are terminal.
///
/// The allowed moves are `Pending → Progressing | Failed` and
/// `Progressing → Succeeded | Failed | RolledBack`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeploymentState {
    /// Recorded, not started.
    Pending,
    /// Instances are starting or traffic is shifting.
    Progressing,
    /// All traffic is on the new revision.
    Succeeded,
    /// It stopped short; see the reason.
    Failed,
    /// It was undone and traffic went back to the previous revision.
    RolledBack,
}

impl DeploymentState {
    /// Whether nothing can follow this state.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::RolledBack)
    }

    /// Whether a deployment in this state may move to `to`.
    pub fn can_become(self, to: Self) -> bool {
        matches!(
            (self, to),
            (Self::Pending, Self::Progressing | Self::Failed)
                | (
                    Self::Progressing,
                    Self::Succeeded | Self::Failed | Self::RolledBack
                )
        )
    }

    /// The state's name as stored and shown: `pending`, `rolled_back`, …
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Progressing => "progressing",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::RolledBack => "rolled_back",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "pending" => Self::Pending,
            "progressing" => Self::Progressing,
            "succeeded" => Self::Succeeded,
            "failed" => Self::Failed,
            "rolled_back" => Self::RolledBack,
            _ => return None,
        })
    }
}

impl fmt::Display for DeploymentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl DeploymentKind {
    /// The kind's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deploy => "deploy",
            Self::Rollback => "rollback",
            Self::Promote => "promote",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "deploy" => Self::Deploy,
            "rollback" => Self::Rollback,
            "promote" => Self::Promote,
            _ => return None,
        })
    }
}

impl fmt::Display for DeploymentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One change of what runs for a service in an environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deployment {
    /// The store's identifier.
    pub id: i64,
    /// The service.
    pub service: String,
    /// The environment.
    pub env: String,
    /// Deploy, rollback or promote.
    pub kind: DeploymentKind,
    /// The revision that had the most traffic before, if any.
    pub from_revision: Option<String>,
    /// The revision it moves to.
    pub to_revision: String,
    /// Where it is.
    pub state: DeploymentState,
    /// Why it is there (for `Failed` and `RolledBack` above all).
    pub reason: Option<String>,
    /// Who started it.
    pub created_by: String,
    /// When it started.
    pub created_at: Timestamp,
    /// When its state last changed.
    pub updated_at: Timestamp,
    /// The controller's rollout progress as JSON, opaque to the store; `None` before its first
    /// step. Written with [`Store::deployment_save_rollout`](crate::Store::deployment_save_rollout).
    pub rollout: Option<String>,
    /// An operator's command not yet carried out: set with
    /// [`Store::deployment_command`](crate::Store::deployment_command), cleared when the
    /// controller saves its rollout having consumed it, or when the deployment ends.
    pub command: Option<RolloutCommand>,
}

/// What an operator asks of a progressive rollout (canary or blue-green) in progress.
///
/// The store only keeps the latest command not yet carried out, one per deployment; the
/// controller decides what each means for its rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RolloutCommand {
    /// Stop at the current step, traffic as it is.
    Pause,
    /// Go on from where a pause stopped.
    Resume,
    /// Stop and send the traffic back to the previous revision.
    Abort,
    /// Skip the remaining steps: all traffic to the new revision now.
    Promote,
}

impl RolloutCommand {
    /// Every command, in the order of the declaration.
    pub const ALL: [Self; 4] = [Self::Pause, Self::Resume, Self::Abort, Self::Promote];

    /// The command's name as stored and shown: `pause`, `resume`, `abort`, `promote`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Abort => "abort",
            Self::Promote => "promote",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == text)
    }
}

impl fmt::Display for RolloutCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RolloutCommand {
    type Err = StoreError;

    /// Parses a command's name as [`RolloutCommand::as_str`] writes it; anything else is
    /// [`StoreError::Invalid`], naming the commands there are.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text).ok_or_else(|| {
            StoreError::Invalid(format!(
                "unknown rollout command {text:?}: expected pause, resume, abort or promote"
            ))
        })
    }
}

/// A line in a deployment's story: "3 of 3 instances ready", "traffic 25% → 75%".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeploymentEvent {
    /// The deployment.
    pub deployment_id: i64,
    /// When.
    pub at: Timestamp,
    /// What happened.
    pub message: String,
}

/// What the reconciler should make true for a service in an environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Desired {
    /// The service.
    pub service: String,
    /// The environment.
    pub env: String,
    /// The revisions to run, with their instances and traffic weights.
    pub revisions: Vec<DesiredRevision>,
    /// Bumped by every change, so a reconciler can tell it has seen the latest.
    pub generation: u64,
}

/// One revision in [`Desired`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredRevision {
    /// The revision's name.
    pub revision: String,
    /// How many instances to run (the autoscaler sets this).
    pub instances: u32,
    /// Its share of traffic, relative to the other revisions' weights.
    pub weight: u32,
}

/// A revision named in a desired state written together with a new revision, whose name is
/// not known until the store allocates its number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RevisionRef {
    /// The revision the same call creates.
    New,
    /// An existing revision of the same service and environment.
    Named(String),
}

/// A [`DesiredRevision`] whose revision may be the one being created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedRevision {
    /// Which revision.
    pub revision: RevisionRef,
    /// How many instances.
    pub instances: u32,
    /// Its traffic weight.
    pub weight: u32,
}

/// One version of a secret, encrypted. The store never sees the plaintext.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretVersion {
    /// The service.
    pub service: String,
    /// The environment.
    pub env: String,
    /// The secret's name (a variable name, e.g. `DATABASE_URL`).
    pub name: String,
    /// 1, 2, 3… per service, environment and name.
    pub version: u32,
    /// The nonce the ciphertext was sealed with.
    pub nonce: Vec<u8>,
    /// The sealed value.
    pub ciphertext: Vec<u8>,
    /// Who set it.
    pub created_by: String,
    /// When.
    pub created_at: Timestamp,
}

impl fmt::Debug for SecretVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretVersion")
            .field("service", &self.service)
            .field("env", &self.env)
            .field("name", &self.name)
            .field("version", &self.version)
            .field("nonce", &format_args!("<{} bytes>", self.nonce.len()))
            .field(
                "ciphertext",
                &format_args!("<{} bytes>", self.ciphertext.len()),
            )
            .field("created_by", &self.created_by)
            .field("created_at", &self.created_at)
            .finish()
    }
}

/// A secret as listed: its name, latest version and date, never its ciphertext.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretInfo {
    /// The service.
    pub service: String,
    /// The environment.
    pub env: String,
    /// The secret's name.
    pub name: String,
    /// Its latest version.
    pub version: u32,
    /// Who set that version.
    pub created_by: String,
    /// When.
    pub created_at: Timestamp,
    /// Where that version's value came from, when not set through the API: its Vault path and
    /// KV version (`vault secret/runway/env/production/service/app/API_KEY version 3`).
    pub origin: Option<String>,
}

/// What a token allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum TokenScope {
    /// Everything.
    Admin,
    /// Deploying one service, to some of its environments: the role `deployer` on it (every
    /// deploy token made before roles were).
    Deploy {
        /// The service.
        service: String,
        /// The environments it may deploy to.
        environments: Vec<String>,
    },
    /// A role on a service, on a team's services, or on every service.
    Grant {
        /// What it allows.
        grant: runway_secrets::Grant,
    },
    /// A person signed in through single sign-on: what the teams they are in (by name or by
    /// a group the provider said they were in at sign-in) allow, looked up at each request;
    /// everything when one of their groups made them a platform admin.
    Person {
        /// Their name, as the provider gave it (`user:<name>` in a team).
        user: String,
        /// Their groups at sign-in (`group:<path>` in a team).
        groups: Vec<String>,
        /// A platform admin at sign-in (one of the server's admin groups): what the audit log
        /// and `whoami` show; each request asks the server's admin groups again.
        admin: bool,
    },
}

impl TokenScope {
    /// The scope as the policy reads it, with the token's expiry (Unix milliseconds); a
    /// person's grants are those `teams` give them, or everything when one of their groups is
    /// among `admin_groups` (the server's now, not at their sign-in).
    #[must_use]
    pub fn policy(
        &self,
        expires_at: Option<i64>,
        teams: &[Team],
        admin_groups: &[String],
    ) -> runway_secrets::Scope {
        let grant = match self {
            Self::Admin => return runway_secrets::Scope::Admin,
            Self::Person { groups, .. } if groups.iter().any(|g| admin_groups.contains(g)) => {
                return runway_secrets::Scope::Admin;
            }
            Self::Person { user, groups, .. } => {
                return runway_secrets::Scope::Grants {
                    grants: person_grants(teams, user, groups),
                    expires_at,
                };
            }
            Self::Deploy {
                service,
                environments,
            } => runway_secrets::Grant {
                role: runway_secrets::Role::Deployer,
                on: runway_secrets::Target::Service(service.clone()),
                environments: Some(environments.clone()),
            },
            Self::Grant { grant } => grant.clone(),
        };
        runway_secrets::Scope::Grants {
            grants: vec![grant],
            expires_at,
        }
    }

    /// Whether the scope is a person's, signed in through single sign-on.
    #[must_use]
    pub fn is_person(&self) -> bool {
        matches!(self, Self::Person { .. })
    }

    /// The one service the scope is on, if it is on exactly one.
    #[must_use]
    pub fn service(&self) -> Option<&str> {
        match self {
            Self::Deploy { service, .. } => Some(service),
            Self::Grant {
                grant:
                    runway_secrets::Grant {
                        on: runway_secrets::Target::Service(service),
                        ..
                    },
            } => Some(service),
            _ => None,
        }
    }

    /// The team the scope is on, if it is on one.
    #[must_use]
    pub fn team(&self) -> Option<&str> {
        match self {
            Self::Grant {
                grant:
                    runway_secrets::Grant {
                        on: runway_secrets::Target::Team(team),
                        ..
                    },
            } => Some(team),
            _ => None,
        }
    }
}

/// Whether any of `teams` has the person `user` in `groups` in it, by name or by a group.
#[must_use]
pub fn person_in_a_team(teams: &[Team], user: &str, groups: &[String]) -> bool {
    !person_grants(teams, user, groups).is_empty()
}

/// What `teams` give the person `user` in `groups`: each membership by name or group a role
/// on the team's services.
fn person_grants(teams: &[Team], user: &str, groups: &[String]) -> Vec<runway_secrets::Grant> {
    let subjects: Vec<String> = std::iter::once(format!("user:{user}"))
        .chain(groups.iter().map(|g| format!("group:{g}")))
        .collect();
    teams
        .iter()
        .flat_map(|team| {
            team.members
                .iter()
                .filter(|m| subjects.contains(&m.subject))
                .map(|m| runway_secrets::Grant {
                    role: m.role,
                    on: runway_secrets::Target::Team(team.name.clone()),
                    environments: m.environments.clone(),
                })
        })
        .collect()
}

/// An API token. The store keeps only its hash; the plaintext is shown once, by the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    /// The store's identifier.
    pub id: i64,
    /// A name for people ("ci for hello").
    pub name: String,
    /// The token's hash, by which it is looked up.
    pub hash: Vec<u8>,
    /// What it allows.
    pub scope: TokenScope,
    /// When it stops working, if ever.
    pub expires_at: Option<Timestamp>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<Timestamp>,
    /// When it was created.
    pub created_at: Timestamp,
    /// Who created it.
    pub created_by: String,
    /// The token this one was made from (a console session's, or the maintainer's that made
    /// it): revoking that one revokes this.
    pub parent: Option<i64>,
}

impl Token {
    /// Whether the token works at `now`: not revoked, not expired.
    pub fn is_active_at(&self, now: Timestamp) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|expiry| now < expiry)
    }
}

/// What creating a token takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewToken {
    /// A name for people.
    pub name: String,
    /// The hash of the token (unique).
    pub hash: Vec<u8>,
    /// What it allows.
    pub scope: TokenScope,
    /// When it stops working, if ever.
    pub expires_at: Option<Timestamp>,
    /// The token it is made from (a console session's, or a non-admin's that makes it;
    /// `None` for one an admin makes): revoking the parent revokes it too.
    pub parent: Option<i64>,
}

/// Where a custom domain's certificate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DomainState {
    /// No certificate yet: one is being obtained.
    Pending,
    /// A certificate is stored and served.
    Issued,
    /// The last attempt failed ([`Domain::detail`] says why); a certificate issued before, if
    /// any, is still served until it expires.
    Failed,
}

impl DomainState {
    /// The name the store keeps.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Issued => "issued",
            Self::Failed => "failed",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text {
            "pending" => Some(Self::Pending),
            "issued" => Some(Self::Issued),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// A custom domain routed to a service's environment, with its certificate's public part.
/// A service in maintenance in one environment: the ingress answers its requests with a 503
/// carrying `message` and `Retry-After`, but for clients in `allow`; its instances keep
/// running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Maintenance {
    pub service: String,
    pub env: String,
    /// What clients are told; empty, a generic sentence.
    pub message: String,
    /// Networks (`203.0.113.0/24`, `2001:db8::1`) whose clients are let through.
    pub allow: Vec<String>,
    /// The `Retry-After` clients are given, in seconds.
    pub retry_after_seconds: u32,
    /// Since when.
    pub since: Timestamp,
    /// Who turned it on.
    pub set_by: String,
}

/// Never the key: [`Store::domain_certificates`](crate::Store::domain_certificates) alone
/// returns it, sealed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Domain {
    /// The name, lower-case (`www.example.com`).
    pub name: String,
    /// The service it reaches.
    pub service: String,
    /// In this environment.
    pub env: String,
    /// Where its certificate stands.
    pub state: DomainState,
    /// Why the last attempt failed, in the ACME server's words.
    pub detail: Option<String>,
    /// Failed attempts in a row (0 after a success), for the retry's back-off.
    pub attempts: u32,
    /// When the issuer next orders a certificate: a retry, or the renewal.
    pub next_attempt_at: Option<Timestamp>,
    /// The certificate chain served (leaf first), PEM.
    pub cert_pem: Option<String>,
    /// When that certificate expires.
    pub not_after: Option<Timestamp>,
    /// How many certificates were stored for it; the sealed key's version.
    pub generation: u32,
    /// When it was added.
    pub created_at: Timestamp,
    /// Who added it.
    pub created_by: String,
    /// When its state last changed.
    pub updated_at: Timestamp,
}

/// A stored certificate with its sealed key, for the data plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainCertificate {
    /// The domain.
    pub name: String,
    /// The chain, leaf first, PEM.
    pub cert_pem: String,
    /// The key's version: sealed for `('', 'domain', name, generation)`.
    pub generation: u32,
    /// The sealed key's nonce.
    pub nonce: Vec<u8>,
    /// The sealed key.
    pub ciphertext: Vec<u8>,
}

/// A certificate just obtained, as [`Store::domain_issued`](crate::Store::domain_issued)
/// stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCertificate {
    /// The chain, leaf first, PEM.
    pub cert_pem: String,
    /// When it expires.
    pub not_after: Timestamp,
    /// The generation its key was sealed for: exactly one above the stored one.
    pub generation: u32,
    /// The sealed key's nonce.
    pub nonce: Vec<u8>,
    /// The sealed key.
    pub ciphertext: Vec<u8>,
    /// When to renew it.
    pub renew_at: Timestamp,
}

/// The actors that are the platform itself, not a person or a CI job: the reconciler (a
/// rollout's events) and ACME (certificates). A token may not take one of these names.
pub const PLATFORM_ACTORS: &[&str] = &["reconciler", "acme"];

/// Which audit entries [`crate::Store::audit_find`] keeps: all of them by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// Only those about this service: it, its environments (deployments, rollouts, variables)
    /// and its secrets.
    pub service: Option<String>,
    /// Only this actor's.
    pub actor: Option<String>,
    /// Only this action, or those of its family (`secret` for `secret.set`).
    pub action: Option<String>,
    /// Only those written at or after this.
    pub since: Option<Timestamp>,
    /// Only people's (and CI jobs'), or only the platform's ([`PLATFORM_ACTORS`]).
    pub by: Option<AuditBy>,
}

/// Who an audit entry is by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditBy {
    /// A token or an identity: people and CI jobs.
    People,
    /// The platform itself.
    Platform,
}

/// One line of the audit log, written in the same transaction as the change it records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Increasing with time.
    pub id: i64,
    /// When.
    pub at: Timestamp,
    /// Who (a user, a token's name, `reconciler`, `autoscaler`).
    pub actor: String,
    /// What, e.g. `service.create`, `deploy`, `secret.set`.
    pub action: String,
    /// On what, e.g. `hello/production`, `token/3`.
    pub target: String,
    /// Details; never a secret's value.
    pub detail: serde_json::Value,
    /// The hash of the entry before it (64 zeros before the first): see `audit.rs`. `None`
    /// only for an entry not chained yet (one an older Runway wrote, until the next write).
    #[serde(default)]
    pub prev_hash: Option<String>,
    /// SHA-256 of `prev_hash` and this entry's canonical encoding, lower-case hex.
    #[serde(default)]
    pub hash: Option<String>,
}

/// What [`crate::Store::audit_verify`] found walking the audit log's chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditVerification {
    /// Every entry up to the head links to the one before and matches its hash, and the
    /// head is the last entry.
    pub ok: bool,
    /// The entries checked before the first break (all of them when `ok`).
    pub entries: u64,
    /// The head the store records: the last chained entry.
    pub head: AuditHead,
    /// The first entry where the chain breaks.
    pub first_broken: Option<crate::AuditBreak>,
}

/// The last chained entry of the audit log: its id and hash (0 and 64 zeros before any).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditHead {
    pub id: i64,
    pub hash: String,
}

/// Where an export sink stands: the last entry it acknowledged, and its last failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditSinkCursor {
    /// The sink's name (`audit.export[].name`).
    pub sink: String,
    /// The last entry it acknowledged (0: none yet).
    pub cursor: i64,
    /// The entries after the cursor: what it has still to get.
    pub lag: u64,
    /// When it last acknowledged some.
    pub acked_at: Option<Timestamp>,
    /// Its last failure, while it is failing.
    pub error: Option<String>,
    /// Since when it has been failing.
    pub failing_since: Option<Timestamp>,
}

/// A lease: the one holder of a role (the control plane's leader) until it expires, and the
/// fencing token that grows each time the lease changes hands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub name: String,
    /// Who holds it (a replica's identity).
    pub holder: String,
    /// Raised each time another holder takes it; a renewal keeps it.
    pub token: i64,
    /// Until when, unless renewed.
    pub expires_at: Timestamp,
}

/// What a fenced store handle checks before each write: that `holder` still holds `lease`
/// with `token` (see [`crate::Store::fenced`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub lease: String,
    pub holder: String,
    pub token: i64,
}

/// The fence a fenced handle's writes carry now, shared with whoever keeps the lease (an
/// election): set while it leads, cleared when it does not, when every write is refused.
#[derive(Debug, Clone, Default)]
pub struct FenceCell(std::sync::Arc<std::sync::RwLock<Option<Fence>>>);

impl FenceCell {
    /// A cell holding `fence` from the start.
    pub fn new(fence: Option<Fence>) -> Self {
        Self(std::sync::Arc::new(std::sync::RwLock::new(fence)))
    }

    pub fn set(&self, fence: Option<Fence>) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fence;
    }

    pub fn get(&self) -> Option<Fence> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}
