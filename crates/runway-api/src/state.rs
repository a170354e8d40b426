//! What every handler shares.

use std::fmt;
use std::sync::Arc;

use runway_secrets::Sealer;
use runway_store::Store;

use crate::error::ApiError;
use crate::platform::Platform;

/// The router's state: the store, the platform, the sealer and the environments.
#[derive(Clone)]
pub struct ApiState {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) platform: Arc<dyn Platform>,
    pub(crate) sealer: Arc<Sealer>,
    /// The environments in promotion order.
    pub(crate) environments: Arc<[String]>,
    /// Every service may deploy plain processes (the operator's `runtime.allow_processes`);
    /// otherwise only those an admin allowed.
    pub(crate) allow_processes: bool,
    /// The largest code snapshot taken, uncompressed (`api.limits.source_bytes`).
    pub(crate) max_source_bytes: u64,
    /// The OIDC issuers whose identity tokens are accepted (`api.oidc`).
    pub(crate) oidc: Option<Arc<crate::oidc::Verifier>>,
    /// The provider people sign in through (`api.sso`).
    pub(crate) sso: Option<Arc<crate::sso::Sso>>,
    /// Where deploys read secrets (`secrets.vault`); the sealed store alone without it.
    pub(crate) vault: Option<Arc<crate::vault::Vault>>,
    /// The API's own request figures (`GET /metrics`).
    pub(crate) metrics: Arc<crate::metrics::ApiMetrics>,
    /// Where the generated alerts' runbooks are (`observability.runbook_base`).
    pub(crate) runbook_base: Option<Arc<str>>,
    /// The platform registry served at `/v2/` (`crate::registry`).
    pub(crate) registry: Option<Arc<runway_registry::Registry>>,
    /// The key of the registry's pull-only credentials (`crate::registry::PullKey`).
    pub(crate) pull_key: Option<Arc<crate::registry::PullKey>>,
    /// How long previews live and how many a service may have (`api.previews`).
    pub(crate) previews: crate::config::PreviewsConfig,
    /// The URL of the issuer of instances' identity tokens, whose discovery document and keys
    /// the API serves (`identity`); `None` when none are issued.
    pub(crate) identity_issuer: Option<Arc<str>>,
    /// The operator's ceiling on services' per-client rate limits (`ingress.traffic.per_client`):
    /// requests per second and burst.
    pub(crate) client_rate_ceiling: Option<runway_manifest::TokenBucket>,
}

impl fmt::Debug for ApiState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiState")
            .field("store", &self.store)
            .field("environments", &self.environments)
            .field("allow_processes", &self.allow_processes)
            .finish_non_exhaustive()
    }
}

impl ApiState {
    /// The state for a router: `environments` in promotion order (`dev`, `staging`,
    /// `production`).
    pub fn new(
        store: Arc<dyn Store>,
        platform: Arc<dyn Platform>,
        sealer: Sealer,
        environments: Vec<String>,
    ) -> Self {
        Self {
            store,
            platform,
            sealer: Arc::new(sealer),
            environments: environments.into(),
            allow_processes: false,
            max_source_bytes: crate::config::DEFAULT_SOURCE_BYTES,
            oidc: None,
            sso: None,
            vault: None,
            metrics: Arc::default(),
            runbook_base: None,
            registry: None,
            pull_key: None,
            previews: crate::config::PreviewsConfig::default(),
            identity_issuer: None,
            client_rate_ceiling: None,
        }
    }

    /// Refuses deploys whose per-client rate limit is above `ceiling`.
    #[must_use]
    pub fn client_rate_ceiling(mut self, ceiling: Option<runway_manifest::TokenBucket>) -> Self {
        self.client_rate_ceiling = ceiling;
        self
    }

    /// Serves the discovery document and key set of the instances' identity tokens issued
    /// as `issuer` (its URL).
    #[must_use]
    pub fn identity_issuer(mut self, issuer: Option<String>) -> Self {
        self.identity_issuer = issuer.map(Into::into);
        self
    }

    /// The audit export's figures, for the server's exporter to keep: `/metrics` and
    /// `GET /v1/audit/export` show them.
    pub fn audit_export(&self) -> Arc<crate::audit::AuditExport> {
        Arc::clone(&self.metrics.audit_export)
    }

    /// Previews live and are capped as `previews` says.
    #[must_use]
    pub fn previews(mut self, previews: crate::config::PreviewsConfig) -> Self {
        self.previews = previews;
        self
    }

    /// Whether this platform has previews: its environments list `preview`.
    pub(crate) fn has_previews(&self) -> bool {
        self.environments
            .iter()
            .any(|e| e == runway_secrets::preview::ENVIRONMENT)
    }

    /// Lets every service deploy plain processes, not only those an admin allowed (off by
    /// default: a process is a program of the tenant's choosing on the host).
    #[must_use]
    pub fn allow_processes(mut self, allow: bool) -> Self {
        self.allow_processes = allow;
        self
    }

    /// The largest code snapshot taken, uncompressed.
    #[must_use]
    pub fn max_source_bytes(mut self, bytes: u64) -> Self {
        self.max_source_bytes = bytes;
        self
    }

    /// People sign in through `sso`'s provider (`api.sso`).
    #[must_use]
    pub fn sso(mut self, sso: crate::sso::Sso) -> Self {
        self.sso = Some(Arc::new(sso));
        self
    }

    /// Accepts the identity tokens `verifier`'s issuers sign (`api.oidc`).
    #[must_use]
    pub fn oidc(mut self, verifier: crate::oidc::Verifier) -> Self {
        self.oidc = Some(Arc::new(verifier));
        self
    }

    /// Reads the secrets deploys name from `vault` (`secrets.vault`), mirroring them into
    /// the sealed store; setting one through the API is refused.
    #[must_use]
    pub fn vault(mut self, vault: crate::vault::Vault) -> Self {
        self.vault = Some(Arc::new(vault));
        self
    }

    /// The generated alerts' runbooks are at `{base}/{service}` unless a manifest names one.
    #[must_use]
    pub fn runbook_base(mut self, base: Option<String>) -> Self {
        self.runbook_base = base.map(Into::into);
        self
    }

    /// Serves `registry` at `/v2/`, to the API's callers and to the pull-only credentials of
    /// `pull_key` (`crate::registry`).
    #[must_use]
    pub fn registry(
        mut self,
        registry: Arc<runway_registry::Registry>,
        pull_key: Arc<crate::registry::PullKey>,
    ) -> Self {
        self.registry = Some(registry);
        self.pull_key = Some(pull_key);
        self
    }

    /// Runs `f` on the store off the async threads.
    pub(crate) async fn store<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store) -> Result<T, ApiError> + Send + 'static,
    {
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || f(store.as_ref())).await?
    }
}
