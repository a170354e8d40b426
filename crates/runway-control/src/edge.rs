//! What the ingress needs of custom domains beside the services' routes: which route each
//! domain reaches, the certificates obtained for them, and the ACME challenges being answered.
//!
//! [`Edge`] is shared by the controller, which puts it in every table it builds, and by what
//! changes it: [`sync_domains`], which reads the store's domains and certificates, and the ACME
//! issuer ([`crate::acme`]), which publishes its challenges and waits until the ingress has
//! them ([`Edge::applied`]) before telling the ACME server to look. A change wakes the
//! controller, so the next table carries it at once. Why domains are data and their
//! certificates part of the table: decision 0001 (`docs/decisions/0001-custom-domains.md`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use runway_ingress::{AcmeChallenges, MaintenanceConfig, RateLimitConfig, TableCertificate};
use runway_secrets::{Context, Sealed, Sealer};
use runway_store::{Domain, Store};
use tokio::sync::{Notify, watch};

/// The context a domain's key is sealed for: no service's (a service's name is never empty),
/// the domain's name, the certificate's generation.
pub fn key_context(name: &str, generation: u32) -> Context<'_> {
    Context {
        service: "",
        env: "domain",
        name,
        version: u64::from(generation),
    }
}

/// Custom domains by the service and environment they reach.
pub type DomainsByRoute = BTreeMap<(String, String), Vec<String>>;

/// Services in maintenance, by service and environment.
pub type MaintenanceByRoute = BTreeMap<(String, String), MaintenanceConfig>;

/// The edge's part of the table.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct EdgeView {
    /// The custom domains of each service and environment, by name.
    pub domains: DomainsByRoute,
    /// The certificates to serve, one per domain that has one.
    pub certificates: Vec<TableCertificate>,
    /// The challenges being answered.
    pub acme: AcmeChallenges,
    /// The services in maintenance (the store's).
    pub maintenance: MaintenanceByRoute,
    /// The operator's ceiling on every service's per-client rate limit, and the limit of a
    /// service without one (`ingress.traffic.per_client`).
    pub client_ceiling: Option<RateLimitConfig>,
}

/// The edge view and its generations: bumped on each change, and the last one the ingress took.
#[derive(Debug)]
pub struct Edge {
    view: Mutex<(u64, EdgeView)>,
    applied: watch::Sender<u64>,
    /// The controller's wake: a change is routed at its next round, started at once.
    wake: Arc<Notify>,
}

impl Edge {
    pub(crate) fn new(wake: Arc<Notify>) -> Self {
        Self {
            view: Mutex::new((0, EdgeView::default())),
            applied: watch::Sender::new(0),
            wake,
        }
    }

    fn change(&self, f: impl FnOnce(&mut EdgeView)) -> u64 {
        let (generation, changed) = {
            let mut view = self.view.lock().unwrap_or_else(PoisonError::into_inner);
            let before = view.1.clone();
            f(&mut view.1);
            let changed = view.1 != before;
            if changed {
                view.0 += 1;
            }
            (view.0, changed)
        };
        if changed {
            self.wake.notify_one();
        }
        generation
    }

    /// Replaces the domains and certificates (the store's), keeping the challenges; the
    /// generation that holds them.
    pub fn set_domains(&self, domains: DomainsByRoute, certificates: Vec<TableCertificate>) -> u64 {
        self.change(|view| {
            view.domains = domains;
            view.certificates = certificates;
        })
    }

    /// Replaces the services in maintenance (the store's); the generation that holds them.
    pub fn set_maintenance(&self, maintenance: MaintenanceByRoute) -> u64 {
        self.change(|view| view.maintenance = maintenance)
    }

    /// Sets the operator's ceiling on per-client rate limits.
    pub fn set_client_ceiling(&self, ceiling: Option<RateLimitConfig>) -> u64 {
        self.change(|view| view.client_ceiling = ceiling)
    }

    /// Changes the challenges being answered; the generation that holds the change.
    pub fn set_challenges(&self, f: impl FnOnce(&mut AcmeChallenges)) -> u64 {
        self.change(|view| f(&mut view.acme))
    }

    /// The view as it stands, with its generation.
    pub(crate) fn snapshot(&self) -> (u64, EdgeView) {
        self.view
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The ingress took a table built from `generation`.
    pub(crate) fn mark_applied(&self, generation: u64) {
        self.applied.send_if_modified(|applied| {
            let newer = generation > *applied;
            if newer {
                *applied = generation;
            }
            newer
        });
    }

    /// Waits until the ingress has taken a table built from `generation` or a later one; false
    /// when `within` passes first.
    pub async fn applied(&self, generation: u64, within: Duration) -> bool {
        let mut applied = self.applied.subscribe();
        tokio::time::timeout(within, applied.wait_for(|a| *a >= generation))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// The edge view's domains and certificates from the store's: each domain under its service
/// and environment, each stored certificate with its key opened. A key that does not open
/// (another master key) is left out and logged, and its domain served as if it had none.
pub fn read_domains(
    store: &dyn Store,
    sealer: &Sealer,
) -> runway_store::Result<(DomainsByRoute, Vec<TableCertificate>)> {
    let listed: Vec<Domain> = store.domain_list()?;
    let mut domains = DomainsByRoute::new();
    for domain in listed {
        domains
            .entry((domain.service, domain.env))
            .or_default()
            .push(domain.name);
    }
    let mut certificates = Vec::new();
    for stored in store.domain_certificates()? {
        let sealed = Sealed {
            nonce: stored.nonce,
            ciphertext: stored.ciphertext,
        };
        match sealer.open(&sealed, &key_context(&stored.name, stored.generation)) {
            Ok(key) => match String::from_utf8(key.expose().to_vec()) {
                Ok(key_pem) => {
                    let certificate = TableCertificate {
                        domains: vec![stored.name],
                        cert_pem: stored.cert_pem,
                        key_pem,
                    };
                    // The ingress refuses a whole table with a bad certificate in it: one is
                    // left out here rather than stop every route's changes.
                    match certificate.check() {
                        Ok(()) => certificates.push(certificate),
                        Err(error) => tracing::error!(%error, "a stored certificate is unusable"),
                    }
                }
                Err(_) => tracing::error!(domain = %stored.name, "its stored key is not PEM"),
            },
            Err(error) => {
                tracing::error!(domain = %stored.name, %error, "its stored key does not open");
            }
        }
    }
    Ok((domains, certificates))
}

/// The services in maintenance, as the store has them.
pub fn read_maintenance(store: &dyn Store) -> runway_store::Result<MaintenanceByRoute> {
    Ok(store
        .maintenance_list()?
        .into_iter()
        .map(|m| {
            let config = MaintenanceConfig {
                message: m.message,
                allow: m.allow,
                retry_after_seconds: m.retry_after_seconds,
            };
            ((m.service, m.env), config)
        })
        .collect())
}

/// Keeps `edge`'s domains, certificates and maintenance the store's: read every `interval` and
/// at once when `changed` is notified (a domain added or removed through the API, a
/// certificate stored, a service's maintenance changed), until `shutdown`.
pub async fn sync_domains(
    store: Arc<dyn Store>,
    sealer: Arc<Sealer>,
    edge: Arc<Edge>,
    changed: Arc<Notify>,
    interval: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut failing = false;
    loop {
        let (store, sealer) = (Arc::clone(&store), Arc::clone(&sealer));
        let read = move || {
            let (domains, certificates) = read_domains(store.as_ref(), &sealer)?;
            Ok::<_, runway_store::StoreError>((domains, certificates, read_maintenance(&*store)?))
        };
        match tokio::task::spawn_blocking(read).await {
            Ok(Ok((domains, certificates, maintenance))) => {
                failing = false;
                edge.set_domains(domains, certificates);
                edge.set_maintenance(maintenance);
            }
            Ok(Err(error)) if !failing => {
                failing = true;
                tracing::warn!(error = %runway_log::chain(&error), "cannot read the domains");
            }
            _ => {}
        }
        tokio::select! {
            () = &mut shutdown => return,
            () = changed.notified() => {}
            () = tokio::time::sleep(interval) => {}
        }
    }
}
