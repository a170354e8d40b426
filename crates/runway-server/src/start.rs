//! `start`: the control plane in this process (the store, the driver, the controller, the
//! API, the ingress started or adopted, the chores), and `Running`, what it hands back.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use runway_api::ApiState;
use runway_control::leader::{Election, Leadership};
use runway_control::{Controller, DataPlane};
use runway_oci::source::SourceStore;
use runway_runtime::{LocalDriver, LocalRuntime};
use runway_secrets::Sealer;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

use crate::config::ServerConfig;
use crate::data_dir::{create_data_dir, lock_data_dir, open_data_dir};
use crate::driver::{Drivers, ServerDriver, Start, drivers};
use crate::ingress::{IngressProcess, ingress_ensure, keep_ingress};
use crate::platform::ServerPlatform;
use crate::registry::{Mirror, PlatformRegistry};
use crate::tasks::{
    collect_images, collect_sources, expire_previews, renew_identities, write_observability,
};

/// What a running control plane shows its caller (`runway quickstart` uses it in-process).
#[derive(Debug)]
pub struct Running {
    pub api: SocketAddr,
    /// The port in the services' URLs.
    pub https_port: u16,
    pub ca_pem: String,
    pub ca_path: PathBuf,
    /// The admin token, when this start created it (the first start).
    pub admin_token: Option<String>,
    /// The ingress process, and whether this start started, adopted or replaced it; none when
    /// the ingresses are remote.
    pub ingress: Option<IngressProcess>,
    /// Stops the task that starts the ingress again when it stops answering.
    keeper: watch::Sender<bool>,
    pub controller: Arc<Controller<ServerDriver>>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
    /// `server.lock` in the data directory, locked for as long as this server runs.
    _lock: Option<std::fs::File>,
}

impl Running {
    /// The runtime the control plane runs instances on, when it is this machine's.
    pub fn runtime(&self) -> Option<&Arc<LocalRuntime>> {
        self.controller
            .driver()
            .get::<LocalDriver>()
            .map(LocalDriver::runtime)
    }

    /// Stops the API and the controller; lets the API's in-flight requests finish (its
    /// grace), and returns. The ingress and the instances keep running.
    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.keeper.send(true);
        let _ = self.stop.send(true);
        for task in self.tasks {
            task.await.context("a server task panicked")??;
        }
        Ok(())
    }
}

/// Ends the process when this replica, having led, leads no more: a fresh start (by its
/// supervisor) follows with nothing of its term in memory, rather than a controller that
/// carries on from state another leader has since changed.
async fn exit_when_no_longer_leading(mut leadership: watch::Receiver<Leadership>) {
    let mut led = false;
    while leadership.changed().await.is_ok() {
        let now = leadership.borrow_and_update().clone();
        match now {
            Leadership::Leading { .. } => led = true,
            Leadership::Following { leader } if led => {
                // A shutdown gives the lease up on purpose: that is not a loss.
                if leader.is_none() {
                    return;
                }
                tracing::error!(
                    leader = leader.unwrap_or_default(),
                    "another replica leads now; this replica lost the lease and exits, to start \
                     again as a follower"
                );
                std::process::exit(EXIT_LOST_LEASE);
            }
            Leadership::Following { .. } => {}
        }
    }
}

/// `runway server`'s exit when it lost the lease (see [`crate::config::LeaderConfig`]).
const EXIT_LOST_LEASE: i32 = 75;

/// Starts everything; returns once every listener is bound.
pub async fn start(config: ServerConfig) -> anyhow::Result<Running> {
    start_with(config, &drivers()).await
}

/// [`start`], `runtime.kind` naming one of `drivers`.
pub async fn start_with(mut config: ServerConfig, drivers: &Drivers) -> anyhow::Result<Running> {
    let data_dir = config.api.data_dir.clone();
    create_data_dir(&data_dir)?;
    // One server per data directory, unless they share a PostgreSQL store: then replicas on
    // one machine share it (its runtime, master key and CA), and the store's lease decides
    // which one acts.
    let lock = match config.store.url {
        None => Some(lock_data_dir(&data_dir)?),
        Some(_) => None,
    };
    let store = config.store.open(&data_dir)?;
    let key = config.store.master_key(&data_dir)?;

    let ca_dir = config.api.ca_dir();
    // The API's connections, instances' pipes and the store share this process's limit.
    runway_ingress::raise_fd_limit().context("cannot raise the open-file limit")?;
    // Made here, before the ingress process reads it, so two never race to make it.
    let ca = runway_ingress::LocalCa::load_or_create(&ca_dir).with_context(|| {
        format!(
            "cannot set up the certificate authority in {}",
            ca_dir.display()
        )
    })?;
    let ca_pem = ca.cert_pem().to_owned();
    let sources = SourceStore::open(data_dir.join(crate::driver::local::SOURCES_DIR))
        .context("cannot prepare the code snapshots' directory")?;
    let bind = |address: SocketAddr, what: &'static str| async move {
        TcpListener::bind(address)
            .await
            .with_context(|| format!("cannot listen on {address} ({what})"))
    };
    // Bound first: the platform registry is reached at the API's address.
    let api_listener = bind(config.api.listen, "API").await?;
    let api_address = api_listener.local_addr()?;
    let registry = Arc::new(
        runway_registry::Registry::open(&data_dir.join("registry"), config.registry.limits())
            .context("cannot open the platform registry")?,
    );
    let pull_key = Arc::new(
        runway_api::registry::PullKey::load_or_create(&data_dir.join("registry.key"))
            .context("cannot set up the platform registry's pull key")?,
    );
    let platform_registry = config.registry.mirror.then(|| PlatformRegistry {
        host: crate::registry::registry_host(&config.registry, api_address),
        plain_http: !config.api.tls.enabled,
        ca_pem: ca_pem.as_bytes().to_vec(),
        key: Arc::clone(&pull_key),
        aliases: crate::registry::aliases(&config.api.tls.hostnames, api_address.port()),
        external_host: config
            .registry
            .external
            .as_ref()
            .and_then(|external| external.repository.split_once('/'))
            .map(|(host, _)| host.to_owned()),
    });
    let kind = drivers.chosen(&config.runtime.kind)?;
    let driver = kind
        .build(&Start {
            runtime: &config.runtime,
            environments: &config.api.environments,
            data_dir: &data_dir,
            sources: &sources,
            registry: platform_registry.as_ref(),
        })
        .await?;
    // Where deployed images and their signatures are fetched to: one cache, both readers.
    let images = data_dir.join("images");
    let images = Arc::new(
        runway_oci::Store::open(&images)
            .with_context(|| format!("cannot prepare the image cache in {}", images.display()))?,
    );
    let signatures = Arc::new(crate::signatures::ImageSignatures::new(
        crate::signatures::SignaturePolicy::load(&config.signatures)?,
        Arc::clone(&images),
        crate::registry::upstream_options(&config.runtime),
        platform_registry.clone(),
    ));
    let mirror_host = platform_registry.as_ref().map(|r| r.host.clone());
    let mirror = match platform_registry {
        Some(access) => Some(Arc::new(Mirror::new(
            Arc::clone(&registry),
            access,
            images,
            &config.runtime,
            kind.mirrored_platforms(),
            &config.registry,
        ))),
        None => None,
    };
    open_data_dir(&data_dir);

    let (stop, stopped) = watch::channel(false);
    let until = |mut stopped: watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let (dataplane, ingress, launch): (Arc<dyn DataPlane>, _, _) = match &config.ingress.remote {
        Some(remote) => {
            config.control.https_port = remote.https_port;
            let fleet = config.ingress.fleet(remote).await?;
            (Arc::new(fleet), None, None)
        }
        None => {
            let (dataplane, ingress, launch) =
                ingress_ensure(&config, drivers, &data_dir, &ca_dir).await?;
            config.control.https_port = ingress.bound.https.unwrap_or(config.ingress.https).port();
            (Arc::new(dataplane), Some(ingress), Some(launch))
        }
    };
    // Several replicas share a PostgreSQL store: the controller acts only while this one leads,
    // its writes fenced by the lease.
    let replica = config.leader.replica();
    let election = config.store.url.is_some().then(|| {
        Election::new(
            Arc::clone(&store),
            replica.clone(),
            Duration::from_millis(config.leader.lease_ms.max(300)),
        )
    });
    let (leading, following) = watch::channel(Leadership::Following { leader: None });
    let controller_store = match &election {
        Some(election) => Arc::clone(&store).fenced(election.fence_cell()),
        None => Arc::clone(&store),
    };
    let mut controller = Controller::new(
        config.control.clone(),
        Arc::clone(&controller_store),
        Arc::new(driver),
        dataplane,
        Sealer::new(&key),
    )
    .environments(config.api.environments.clone())
    .fixed_routes(config.ingress.cell_routes().await?)
    .allow_processes(config.runtime.allow_processes)
    .pull_mirrors_from(mirror_host);
    // A platform that gives its replicas an identity of its own (a cluster) needs no issuer.
    let issuer = (config.identity.enabled
        && !runway_driver::Driver::own_identity(controller.driver().as_ref()))
    .then(|| {
        let url = config
            .identity
            .issuer
            .clone()
            .unwrap_or_else(|| issuer_url(&config, api_address));
        Arc::new(runway_control::identity::Issuer::new(
            url,
            &config.identity,
            Arc::clone(&controller_store),
            Arc::new(Sealer::new(&key)),
        ))
    });
    controller = controller.issue_identities(issuer.clone());
    let replicated = election.is_some();
    if replicated {
        controller = controller.leadership(following.clone());
    }
    let controller = Arc::new(controller);
    // The domains and their certificates before the first table: one sent without them would
    // take the certificates from the ingress until the next read.
    let (domains, certificates) =
        runway_control::edge::read_domains(store.as_ref(), &Sealer::new(&key))
            .context("cannot read the custom domains")?;
    controller.edge().set_domains(domains, certificates);
    controller.edge().set_maintenance(
        runway_control::edge::read_maintenance(store.as_ref())
            .context("cannot read the services in maintenance")?,
    );
    controller
        .edge()
        .set_client_ceiling(config.ingress.traffic.per_client);

    let mut tasks = Vec::new();
    if let Some(election) = election {
        tasks.push(tokio::spawn({
            let stopped = stopped.clone();
            async move {
                election.run(leading, until(stopped)).await;
                Ok(())
            }
        }));
        tokio::spawn(exit_when_no_longer_leading(following.clone()));
    }
    let (keeper, keeper_stopped) = watch::channel(false);
    if let Some(launch) = launch {
        tasks.push(tokio::spawn(keep_ingress(
            launch,
            config.ingress.remote_options(),
            keeper_stopped,
        )));
    }
    tasks.push(tokio::spawn({
        let controller = Arc::clone(&controller);
        let stopped = stopped.clone();
        async move {
            controller.run(until(stopped)).await;
            Ok(())
        }
    }));
    if let Some(issuer) = &issuer {
        tasks.push(tokio::spawn(renew_identities(
            Arc::clone(&controller),
            issuer.lifetime(),
            stopped.clone(),
        )));
    }
    tasks.push(tokio::spawn(collect_images(
        Arc::clone(&store),
        Arc::clone(&registry),
        config.registry.mirror.then(|| data_dir.join("images")),
        config.registry.retention(),
        stopped.clone(),
    )));
    tasks.push(tokio::spawn(collect_sources(
        Arc::clone(&store),
        sources.clone(),
        stopped.clone(),
    )));
    tasks.push(tokio::spawn(expire_previews(
        Arc::clone(&controller_store),
        config.api.previews.ttl(),
        {
            let controller = Arc::clone(&controller);
            move || controller.wake()
        },
        stopped.clone(),
    )));
    // Custom domains: the store's domains and certificates kept in every table, and (with
    // `domains.acme`) certificates ordered and renewed while this replica leads.
    let domains_read = Arc::new(Notify::new());
    let domains_added = Arc::new(Notify::new());
    tasks.push(tokio::spawn({
        let sync = runway_control::edge::sync_domains(
            Arc::clone(&store),
            Arc::new(Sealer::new(&key)),
            controller.edge(),
            Arc::clone(&domains_read),
            Duration::from_millis(config.domains.interval_ms.max(1)),
            until(stopped.clone()),
        );
        async move {
            sync.await;
            Ok(())
        }
    }));
    if let Some(acme) = &config.domains.acme {
        let mut issuer = runway_control::acme::Issuer::new(
            acme.clone(),
            Arc::clone(&controller_store),
            Arc::new(Sealer::new(&key)),
            controller.edge(),
            Arc::clone(&domains_read),
        )
        .map_err(anyhow::Error::msg)?;
        if replicated {
            issuer = issuer.leadership(following.clone());
        }
        let (issuer, wake, stopped) = (
            Arc::new(issuer),
            Arc::clone(&domains_added),
            stopped.clone(),
        );
        tasks.push(tokio::spawn(async move {
            issuer.run(wake, until(stopped)).await;
            Ok(())
        }));
    }
    if let Some(dir) = &config.observability.dir {
        tasks.push(tokio::spawn(write_observability(
            Arc::clone(&store),
            dir.clone(),
            config.observability.clone(),
            stopped.clone(),
        )));
    }
    // What Prometheus scrapes of the platform itself: this API's `/metrics` and the ingress
    // this server runs (remote ingresses are their operator's to scrape).
    let mut metrics = vec![runway_api::metrics::TargetGroup {
        targets: vec![api_address.to_string()],
        labels: [
            ("job", "runway-api"),
            (
                "__scheme__",
                if config.api.tls.enabled {
                    "https"
                } else {
                    "http"
                },
            ),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into(),
    }];
    if let Some(ingress) = &ingress {
        metrics.push(runway_api::metrics::TargetGroup {
            targets: vec![ingress.bound.admin.to_string()],
            labels: [("job".to_owned(), "runway-ingress".to_owned())].into(),
        });
    }
    let audit_leadership = replicated.then(|| following.clone());
    let platform = Arc::new(ServerPlatform {
        controller: Arc::clone(&controller),
        mirror,
        signatures,
        sources,
        leadership: replicated.then_some((replica, following)),
        metrics,
        domains: runway_api::domains::DomainSettings {
            acme_directory: config.domains.acme.as_ref().map(|a| a.directory.clone()),
            reserved: std::iter::once(config.control.domain.clone())
                .chain(config.api.tls.hostnames.iter().cloned())
                .collect(),
            https_port: config.control.https_port,
        },
        edge_changed: [domains_read, domains_added],
    });
    let state =
        ApiState::new(
            Arc::clone(&store),
            platform,
            Sealer::new(&key),
            config.api.environments.clone(),
        )
        .allow_processes(config.runtime.allow_processes)
        .max_source_bytes(config.api.limits.source_bytes)
        .runbook_base(config.observability.runbook_base.clone())
        .previews(config.api.previews)
        .identity_issuer(issuer.as_ref().map(|i| i.url().to_owned()))
        .client_rate_ceiling(config.ingress.traffic.per_client.map(|c| {
            runway_manifest::TokenBucket {
                requests_per_second: c.requests_per_second,
                burst: c.burst,
            }
        }))
        .registry(registry, pull_key);
    let state = if config.api.oidc.issuers.is_empty() {
        state
    } else {
        state.oidc(runway_api::oidc::Verifier::new(&config.api.oidc).map_err(anyhow::Error::msg)?)
    };
    let state = match &config.api.sso {
        Some(sso) => state.sso(runway_api::sso::Sso::new(sso).map_err(anyhow::Error::msg)?),
        None => state,
    };
    let state = match &config.secrets.vault {
        Some(vault) => {
            state.vault(runway_api::vault::Vault::new(vault).map_err(anyhow::Error::msg)?)
        }
        None => state,
    };
    // The audit trail's export, a task per sink, sending while this replica leads; its
    // cursors moved through the fenced store.
    tasks.extend(crate::audit_export::start_exports(
        &config.audit,
        &controller_store,
        &state.audit_export(),
        audit_leadership,
        &stopped,
    )?);
    let router = runway_api::router(state, config.api.request_limits());
    let api_tls = if config.api.tls.enabled {
        Some(
            runway_api::tls_config(&ca_dir, &config.api.tls.hostnames)
                .context("cannot set up the API's TLS")?,
        )
    } else {
        None
    };
    let options = config.api.serve_options();
    tasks.push(tokio::spawn({
        let stopped = stopped.clone();
        async move {
            runway_api::serve(api_listener, router, api_tls, options, until(stopped))
                .await
                .context("the API server stopped")
        }
    }));
    // Only now that it serves: a start that failed above (a port in use) made no token its
    // operator never saw, and the next start makes the first one.
    let admin_token = runway_api::bootstrap_admin(store.as_ref())
        .context("cannot create the admin token")?
        .map(|token| token.expose().to_owned());
    Ok(Running {
        api: api_address,
        https_port: config.control.https_port,
        ca_pem,
        ca_path: ca_dir.join("ca.pem"),
        admin_token,
        ingress,
        keeper,
        controller,
        stop,
        tasks,
        _lock: lock,
    })
}

/// SIGTERM or SIGINT: a process's one shutdown path.
pub async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    Ok(())
}

/// The identity tokens' issuer by default: the API as clients reach it, its first
/// `api.tls.hostnames` name (else its listen address, a wildcard as loopback) and port.
fn issuer_url(config: &ServerConfig, api: SocketAddr) -> String {
    let scheme = if config.api.tls.enabled {
        "https"
    } else {
        "http"
    };
    match config.api.tls.hostnames.first() {
        Some(name) => format!("{scheme}://{name}:{}", api.port()),
        None => format!("{scheme}://{}", crate::registry::reachable(api)),
    }
}
