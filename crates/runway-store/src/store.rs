//! The `Store` trait: everything the control plane asks of its database.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{
    AuditEntry, AuditFilter, AuditSinkCursor, AuditVerification, Deployment, DeploymentEvent,
    DeploymentState, Desired, DesiredRevision, Domain, DomainCertificate, FenceCell, IdentityKey,
    InventoryChanges, IssuedCertificate, Lease, Maintenance, NewPreview, NewRevision, NewService,
    NewToken, PlannedRevision, Preview, Result, Revision, RolloutCommand, SecretInfo,
    SecretVersion, Service, ServiceUpdate, Team, TeamMember, Timestamp, Token,
};

/// What a deploy, rollback or promotion recorded, all in one transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeployRecord {
    /// The revision deployed: new for a deploy or a promotion, the earlier one for a rollback.
    pub revision: Revision,
    /// The deployment, `Pending`, with its first event written.
    pub deployment: Deployment,
    /// The new desired state, its generation bumped.
    pub desired: Desired,
}

/// The control plane's store. Only implementations of this trait touch SQL.
///
/// Methods are synchronous; async callers use `spawn_blocking`. Every method that changes
/// something takes the `actor` who asked and writes an [`AuditEntry`] in the same transaction as
/// the change. Every method is one transaction: it happens whole or not at all.
pub trait Store: Send + Sync + fmt::Debug {
    // --- services -------------------------------------------------------------------------

    /// Onboards a service. `AlreadyExists` if the name is taken; `Invalid` without
    /// environments or with a duplicate one.
    fn service_create(&self, actor: &str, service: &NewService) -> Result<Service>;

    /// One service, or `NotFound`.
    fn service_get(&self, name: &str) -> Result<Service>;

    /// Every service, by name.
    fn service_list(&self) -> Result<Vec<Service>>;

    /// Changes a service's owners, environments or leave to run processes. `Conflict` when an environment to remove
    /// still has revisions (decommission the service instead, or keep the environment).
    fn service_update(&self, actor: &str, name: &str, update: &ServiceUpdate) -> Result<Service>;

    /// Decommissions a service: removes it with its revisions, deployments and desired state
    /// (so the reconciler stops its instances), deletes its secrets and revokes its deploy
    /// tokens, all in one transaction: a service onboarded again under this name is another
    /// service, with another [`Service::id`](crate::Service::id), and gets none of them. Its
    /// previews go with it. The audit log keeps everything it recorded.
    fn service_decommission(&self, actor: &str, name: &str) -> Result<()>;

    /// Makes the services what an inventory document says, in one transaction: onboards
    /// `create`, changes `update` (owners, environments, leave to run processes, upstream's
    /// keys; an environment that has revisions cannot be removed), decommissions
    /// `decommission` as [`Store::service_decommission`] does. Each change is audited as
    /// that change, and the whole as `inventory.apply` with the document's `digest`.
    fn inventory_apply(&self, actor: &str, changes: &InventoryChanges, digest: &str) -> Result<()>;

    // --- previews -------------------------------------------------------------------------

    /// Creates preview `name` of `parent` (the service `<name>--<parent>`, with the parent's
    /// owners, in `preview` alone) or, when it exists, extends it: `expires_at` from now,
    /// `base_env` and `origin` as given. `NotFound` without the parent; `Conflict` when the
    /// parent has `max_per_parent` previews already, or the name is another service's.
    /// Returns it, and whether it was created.
    fn preview_put(&self, actor: &str, preview: &NewPreview) -> Result<(Preview, bool)>;

    /// The previews of `parent`, or of every service, by service name.
    fn preview_list(&self, parent: Option<&str>) -> Result<Vec<Preview>>;

    // --- revisions ------------------------------------------------------------------------

    /// One revision by name (`hello-production-00007`), or `NotFound`.
    fn revision_get(&self, name: &str) -> Result<Revision>;

    /// A service's revisions in an environment, oldest first.
    fn revision_list(&self, service: &str, env: &str) -> Result<Vec<Revision>>;

    // --- deployments ----------------------------------------------------------------------

    /// Records a deploy at once: allocates the next revision number, inserts the revision, a
    /// `Pending` deployment with its first event, the new desired state (in which
    /// [`RevisionRef::New`](crate::RevisionRef::New) names the new revision) and an audit entry.
    ///
    /// The deployment's `from_revision` is the revision with the most weight in the desired
    /// state it replaces. `Conflict` while another deployment of the same service and
    /// environment is `Pending` or `Progressing`.
    fn record_deploy(
        &self,
        actor: &str,
        revision: &NewRevision,
        desired: &[PlannedRevision],
    ) -> Result<DeployRecord>;

    /// Records a rollback to an earlier revision of the same service and environment: no new
    /// revision, a `Rollback` deployment, and `desired` (which must include `to_revision`).
    /// Deployments still `Pending` or `Progressing` there are marked `Failed`, superseded.
    fn record_rollback(
        &self,
        actor: &str,
        service: &str,
        env: &str,
        to_revision: &str,
        desired: &[DesiredRevision],
    ) -> Result<DeployRecord>;

    /// Records a promotion: copies `from_revision`'s manifest, artifact (same digest) and
    /// environment variables into a new revision of the same service in `to_env`, with a
    /// `Promote` deployment and `desired` there. The new revision pins `to_env`'s latest
    /// version of each secret `from_revision` pins (a secret's versions belong to one
    /// environment); `Invalid`, naming the secrets and `to_env`, when one is not set there.
    /// `Conflict` as for a deploy. `signature` is what verified the image's signature for
    /// `to_env` (`artifact.signature`), in place of the source's.
    fn record_promote(
        &self,
        actor: &str,
        from_revision: &str,
        to_env: &str,
        desired: &[PlannedRevision],
        signature: Option<&serde_json::Value>,
    ) -> Result<DeployRecord>;

    /// One deployment, or `NotFound`.
    fn deployment_get(&self, id: i64) -> Result<Deployment>;

    /// A service's deployments, in one environment or all, newest first, at most `limit`.
    fn deployment_list(
        &self,
        service: &str,
        env: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Deployment>>;

    /// Moves a deployment to `to`, recording an event; `reason` replaces the stored one when
    /// given. `InvalidTransition` unless [`DeploymentState::can_become`] allows it, so a
    /// terminal state never changes. A terminal `to` drops the deployment's pending
    /// [`command`](Deployment::command), with an event saying so, since nothing will carry it
    /// out; its rollout progress stays.
    fn deployment_transition(
        &self,
        actor: &str,
        id: i64,
        to: DeploymentState,
        reason: Option<&str>,
    ) -> Result<Deployment>;

    /// Appends an event to a deployment's story.
    fn deployment_add_event(&self, actor: &str, id: i64, message: &str) -> Result<DeploymentEvent>;

    /// A deployment's events, oldest first.
    fn deployment_events(&self, id: i64) -> Result<Vec<DeploymentEvent>>;

    /// Asks the rollout of `service` in `env` to pause, resume, abort or promote: sets the
    /// [`command`](Deployment::command) of its deployment that is `Pending` or `Progressing`,
    /// replacing a command not yet carried out, with an event (`pause asked by alice`); a
    /// pending abort is replaced by nothing but an abort. `NotFound` for an unknown service or
    /// environment; `Conflict` when no deployment there is in progress, or an abort is pending.
    fn deployment_command(
        &self,
        actor: &str,
        service: &str,
        env: &str,
        command: RolloutCommand,
    ) -> Result<Deployment>;

    /// Saves the rollout controller's progress, JSON the store keeps as it is, in place of
    /// the last. With `consumed`, the command the controller carried out in this step, the
    /// stored [`command`](Deployment::command) is cleared if it is still that one
    /// (compare-and-clear: a different command that arrived meanwhile stays, for the next
    /// step). `NotFound` for an unknown deployment; `Conflict` when it is in a terminal state.
    fn deployment_save_rollout(
        &self,
        actor: &str,
        id: i64,
        rollout: &str,
        consumed: Option<RolloutCommand>,
    ) -> Result<Deployment>;

    // --- desired state --------------------------------------------------------------------

    /// The desired state of a service in an environment, `None` before its first deploy.
    fn desired_get(&self, service: &str, env: &str) -> Result<Option<Desired>>;

    /// Every desired state, by service and environment: the reconciler's input.
    fn desired_list(&self) -> Result<Vec<Desired>>;

    /// Replaces a desired state and bumps its generation. With `expected_generation`, a
    /// `Conflict` unless the stored generation (0 when there is none) is that one. Every
    /// revision must belong to the service and environment, once.
    fn desired_set(
        &self,
        actor: &str,
        service: &str,
        env: &str,
        revisions: &[DesiredRevision],
        expected_generation: Option<u64>,
    ) -> Result<Desired>;

    /// Sets only one revision's instances (the autoscaler), bumping the generation;
    /// `expected_generation` as for [`Store::desired_set`].
    fn desired_set_instances(
        &self,
        actor: &str,
        service: &str,
        env: &str,
        revision: &str,
        instances: u32,
        expected_generation: Option<u64>,
    ) -> Result<Desired>;

    // --- secrets --------------------------------------------------------------------------

    /// Stores a new version of a secret, sealed by the caller for `expected_version`; returns
    /// it without ciphertext. `Conflict` unless `expected_version` is exactly the next version
    /// of that service, environment and name ([`Store::secret_next_version`] at the moment of
    /// the write): the value is sealed with its version in its associated data, so the caller
    /// seals again for the new next version and retries. Names are upper-case letters, digits
    /// and `_`, not starting with a digit. `origin` says where the value came from when it was
    /// not set through the API (a Vault path and its KV version), kept with the version.
    #[allow(
        clippy::too_many_arguments,
        reason = "a secret's place, the version it was sealed for, and the sealed value"
    )]
    fn secret_set(
        &self,
        actor: &str,
        service: &str,
        env: &str,
        name: &str,
        expected_version: u32,
        nonce: &[u8],
        ciphertext: &[u8],
        origin: Option<&str>,
    ) -> Result<SecretInfo>;

    /// The version the next [`Store::secret_set`] of this secret must name: one above the
    /// highest ever stored, unset ones included (1 for a new name). `NotFound` for an unknown
    /// service or environment.
    fn secret_next_version(&self, service: &str, env: &str, name: &str) -> Result<u32>;

    /// Marks a secret deleted: it leaves the listing; a later set makes a new version.
    /// `NotFound` when it is not set.
    fn secret_unset(&self, actor: &str, service: &str, env: &str, name: &str) -> Result<()>;

    /// The secrets set for a service in an environment, by name, with their latest version.
    /// Never a ciphertext.
    fn secret_list(&self, service: &str, env: &str) -> Result<Vec<SecretInfo>>;

    /// One version of a secret with its ciphertext, for injection into an instance. The only
    /// method that returns ciphertext. A version stays readable after an unset, because
    /// revisions pinning it are immutable and may be rolled back to.
    fn secret_read(
        &self,
        service: &str,
        env: &str,
        name: &str,
        version: u32,
    ) -> Result<SecretVersion>;

    // --- tokens ---------------------------------------------------------------------------

    /// Stores a token by its hash. `Conflict` if another token has the same hash.
    fn token_create(&self, actor: &str, token: &NewToken) -> Result<Token>;

    /// The token with this hash, revoked or expired ones included (see
    /// [`Token::is_active_at`]).
    fn token_by_hash(&self, hash: &[u8]) -> Result<Option<Token>>;

    /// Every token, oldest first.
    fn token_list(&self) -> Result<Vec<Token>>;

    /// Revokes a token, and the console sessions made from it; revoking it again keeps the
    /// first date.
    fn token_revoke(&self, actor: &str, id: i64) -> Result<Token>;

    // --- teams ----------------------------------------------------------------------------

    /// Makes team `name` with these members, or replaces the members it has. `Invalid` for a
    /// subject that is not `user:<name>` or `group:<path>`, or that is listed twice.
    fn team_put(&self, actor: &str, name: &str, members: &[TeamMember]) -> Result<Team>;

    /// One team, or `NotFound`.
    fn team_get(&self, name: &str) -> Result<Team>;

    /// Every team, by name.
    fn team_list(&self) -> Result<Vec<Team>>;

    /// Removes a team. `Conflict` while it owns services (give them to another team first).
    fn team_delete(&self, actor: &str, name: &str) -> Result<()>;

    // --- custom domains -------------------------------------------------------------------

    /// Routes `name` (lower-case) to `service` in `env`, with no certificate yet
    /// ([`DomainState::Pending`](crate::DomainState::Pending), due now). `AlreadyExists` when
    /// the name is taken (by any service); `NotFound` for an unknown service or environment.
    fn domain_add(&self, actor: &str, name: &str, service: &str, env: &str) -> Result<Domain>;

    /// Removes a domain and its certificate. `NotFound` when there is none.
    fn domain_remove(&self, actor: &str, name: &str) -> Result<()>;

    /// Puts `service` in maintenance in `env` (its `since` and `set_by` are set here), or
    /// changes what it says; `None` takes it out, and is a no-op when it is not in
    /// maintenance. Audited as `maintenance.on` or `maintenance.off`. `NotFound` for an unknown
    /// service or environment.
    fn maintenance_set(
        &self,
        actor: &str,
        service: &str,
        env: &str,
        maintenance: Option<&Maintenance>,
    ) -> Result<Option<Maintenance>>;

    /// Every service and environment in maintenance, by service and environment.
    fn maintenance_list(&self) -> Result<Vec<Maintenance>>;

    /// `service` in maintenance in `env`, if it is. `NotFound` for an unknown service or
    /// environment.
    fn maintenance_get(&self, service: &str, env: &str) -> Result<Option<Maintenance>>;

    /// Every domain, by name. Never a key.
    fn domain_list(&self) -> Result<Vec<Domain>>;

    /// Every stored certificate with its sealed key, by name: what the data plane serves.
    fn domain_certificates(&self) -> Result<Vec<DomainCertificate>>;

    /// Stores the certificate just obtained for `name`: issued, no failures. `Conflict` unless
    /// `certificate.generation` is exactly one above the stored one (the key is sealed for its
    /// generation, as a secret for its version); `NotFound` when the domain was removed
    /// meanwhile.
    fn domain_issued(
        &self,
        actor: &str,
        name: &str,
        certificate: &IssuedCertificate,
    ) -> Result<Domain>;

    /// Records a failed attempt for `name`: failed with `detail`, one more failure in a row,
    /// tried again at `retry_at`. A certificate it had stays. `NotFound` when it was removed.
    fn domain_failed(
        &self,
        actor: &str,
        name: &str,
        detail: &str,
        retry_at: Timestamp,
    ) -> Result<Domain>;

    /// The sealed credentials of the ACME account at `directory`, if one was made.
    fn acme_account_get(&self, directory: &str) -> Result<Option<(Vec<u8>, Vec<u8>)>>;

    /// Keeps an ACME account's sealed credentials (`nonce`, `ciphertext`) for `directory`,
    /// unless one is kept already: returns whichever is kept, so two writers racing end up
    /// using the same account.
    fn acme_account_put(
        &self,
        actor: &str,
        directory: &str,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<(Vec<u8>, Vec<u8>)>;

    // --- identity keys --------------------------------------------------------------------

    /// The identity token signing keys not yet expired at `now`, newest first.
    fn identity_keys(&self, now: Timestamp) -> Result<Vec<IdentityKey>>;

    /// Keeps a new signing key, unless another was made after `newer_than` (a replica racing
    /// this one): returns the newest key, this one or that. Keys expired before `now` are
    /// removed in the same transaction.
    fn identity_key_add(
        &self,
        actor: &str,
        key: &IdentityKey,
        newer_than: Timestamp,
        now: Timestamp,
    ) -> Result<IdentityKey>;

    // --- audit ----------------------------------------------------------------------------

    /// Audit entries with an id above `after_id`, oldest first, at most `limit`.
    fn audit_list(&self, after_id: i64, limit: u32) -> Result<Vec<AuditEntry>>;

    /// The last `limit` entries of the audit log, oldest first.
    fn audit_tail(&self, limit: u32) -> Result<Vec<AuditEntry>>;

    /// The entries `filter` keeps, oldest first: at most `limit` with an id above `after_id`
    /// when given, else the last `limit`.
    fn audit_find(
        &self,
        filter: &AuditFilter,
        after_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>>;

    /// Walks the audit log's hash chain (see `audit.rs`) from its first entry to the head the
    /// store records, and reports the first entry where it breaks: one changed (its content no
    /// longer matches its hash), one removed (the next one's `prev_hash` does not match), one
    /// never chained, or entries removed from the end (the head names a later one).
    fn audit_verify(&self) -> Result<AuditVerification>;

    /// Every export sink that acknowledged or failed something, by name, with its lag.
    fn audit_export_list(&self) -> Result<Vec<AuditSinkCursor>>;

    /// Where export sink `sink` stands: cursor 0 and the whole log to send when it never
    /// acknowledged anything.
    fn audit_export_get(&self, sink: &str) -> Result<AuditSinkCursor>;

    /// Records that `sink` acknowledged every entry up to `cursor` (a cursor only moves
    /// forward) and clears its failure. Not audited: an entry for each would feed the export.
    fn audit_export_ack(&self, sink: &str, cursor: i64) -> Result<()>;

    /// Records that sending to `sink` failed with `error` (since the first such failure in a
    /// row). Not audited.
    fn audit_export_failed(&self, sink: &str, error: &str) -> Result<()>;

    // --- leases ---------------------------------------------------------------------------

    /// Takes the lease `name` for `holder` until `ttl` from now, or renews it when `holder`
    /// holds it: `Some` with the lease when `holder` holds it now (its token raised when it
    /// changed hands), `None` when another holds it unexpired. A change of hands is audited; a
    /// renewal is not.
    fn lease_acquire(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<Lease>>;

    /// Gives the lease up, when `holder` holds it with `token`, so another takes it at once.
    fn lease_release(&self, name: &str, holder: &str, token: i64) -> Result<()>;

    /// The lease as it stands, expired or not; `None` when never taken.
    fn lease_get(&self, name: &str) -> Result<Option<Lease>>;

    /// A handle on this store whose every write first checks, in its own transaction, that
    /// the fence in `fence` still holds (its holder holds its lease with its token), and is
    /// refused with [`crate::StoreError::Fenced`], writing nothing, once another has taken
    /// the lease, or while the cell is empty. Reads are this store's.
    fn fenced(self: Arc<Self>, fence: FenceCell) -> Arc<dyn Store>;
}
