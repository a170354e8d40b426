//! An in-memory driver and a store, ingress and controller around it.

#![allow(clippy::unwrap_used, dead_code, unreachable_pub, reason = "tests")]

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runway_control::{Controller, ControllerConfig};
use runway_driver::{
    Driver, DriverError, ExitRecord, Kept, LogLine, LogQuery, Phase, Replica, Scale, Stream,
    Workload, new_replica_id, now_ms, revision_of,
};
use runway_ingress::{Ingress, Options};
use runway_secrets::{MasterKey, Sealer};
use runway_store::{
    Deployment, DeploymentState, NewRevision, NewService, PlannedRevision, RevisionRef,
    SqliteStore, Store,
};
use tokio::sync::{mpsc, watch};

/// How a revision's instances behave.
#[derive(Debug, Clone)]
pub enum Behavior {
    /// Starting for this many polls of `replicas()`, then ready.
    ReadyAfter(u32),
    /// Crash-looping with this exit code, having written these lines.
    Crash { code: i32, output: Vec<String> },
}

#[derive(Debug)]
struct Fake {
    behavior: Behavior,
    /// From its workload, as the local driver reports them.
    service: String,
    revision: String,
    managed: bool,
    port: u16,
    polls: u32,
}

#[derive(Debug, Default)]
struct Inner {
    instances: BTreeMap<String, Fake>,
    behaviors: HashMap<String, Behavior>,
    next_port: u16,
    workloads: Vec<Workload>,
    stopped: Vec<String>,
    watched: Option<(Ingress, String, String)>,
    violations: Vec<String>,
    /// Revisions whose `scale` takes this long.
    slow: HashMap<String, Duration>,
    /// `scale` calls not yet returned.
    under_way: usize,
    /// Revisions kept with no replica (a cluster's Deployment at zero), and those removed.
    kept: Vec<Kept>,
    removed: Vec<String>,
}

/// A driver in memory: a replica is stopped and gone as soon as it is retired. When watching
/// an ingress, it checks at every call that each weighted revision of the watched route has
/// a ready, non-draining instance.
#[derive(Debug)]
pub struct FakeDriver {
    inner: Mutex<Inner>,
    changes: watch::Sender<u64>,
}

impl Default for FakeDriver {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            changes: watch::channel(0).0,
        }
    }
}

impl FakeDriver {
    pub fn behave(&self, revision: &str, behavior: Behavior) {
        let mut inner = self.inner.lock().unwrap();
        inner.behaviors.insert(revision.to_owned(), behavior);
    }

    /// As [`FakeDriver::behave`], and its running instances too (a crash after they were
    /// ready, or a recovery).
    pub fn behave_now(&self, revision: &str, behavior: Behavior) {
        let mut inner = self.inner.lock().unwrap();
        for fake in inner.instances.values_mut() {
            if fake.revision == revision {
                fake.behavior = behavior.clone();
            }
        }
        inner.behaviors.insert(revision.to_owned(), behavior);
    }

    pub fn watch_ingress(&self, ingress: &Ingress, service: &str, env: &str) {
        self.inner.lock().unwrap().watched =
            Some((ingress.clone(), service.to_owned(), env.to_owned()));
    }

    /// The workload of every replica started, in order.
    pub fn workloads(&self) -> Vec<Workload> {
        self.inner.lock().unwrap().workloads.clone()
    }

    pub fn stopped(&self) -> Vec<String> {
        self.inner.lock().unwrap().stopped.clone()
    }

    pub fn violations(&self) -> Vec<String> {
        self.inner.lock().unwrap().violations.clone()
    }

    /// Ids of the instances that exist.
    pub fn ids(&self) -> Vec<String> {
        self.inner
            .lock()
            .unwrap()
            .instances
            .keys()
            .cloned()
            .collect()
    }

    pub fn ids_of(&self, revision: &str) -> Vec<String> {
        self.ids()
            .into_iter()
            .filter(|id| id.starts_with(&format!("{revision}-")))
            .collect()
    }

    /// Makes every `scale` of the revision take `delay` (an image pull, a cluster's API).
    pub fn slow(&self, revision: &str, delay: Duration) {
        let mut inner = self.inner.lock().unwrap();
        inner.slow.insert(revision.to_owned(), delay);
    }

    /// Keeps something of a revision with no replica, as a cluster keeps a Deployment at zero
    /// replicas (left by an earlier control plane, say), until it is removed.
    pub fn keep(&self, service: &str, env: &str, revision: &str) {
        self.inner.lock().unwrap().kept.push(Kept {
            service: service.to_owned(),
            env: env.to_owned(),
            revision: revision.to_owned(),
        });
    }

    /// The revisions `remove`d, in order.
    pub fn removed(&self) -> Vec<String> {
        self.inner.lock().unwrap().removed.clone()
    }

    /// `scale` calls not yet returned.
    pub fn calls_under_way(&self) -> usize {
        self.inner.lock().unwrap().under_way
    }

    /// An instance the platform did not start (a developer's `runway run`), ready.
    pub fn add_unmanaged(&self, id: &str, service: &str, revision: &str) {
        let mut inner = self.inner.lock().unwrap();
        inner.next_port += 1;
        let port = 20_000 + inner.next_port;
        let fake = Fake {
            behavior: Behavior::ReadyAfter(0),
            service: service.to_owned(),
            revision: revision.to_owned(),
            managed: false,
            port,
            polls: 0,
        };
        inner.instances.insert(id.to_owned(), fake);
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    fn start(inner: &mut Inner, workload: &Workload) -> String {
        let mut id = new_replica_id(&workload.revision);
        while inner.instances.contains_key(&id) {
            id = new_replica_id(&workload.revision);
        }
        inner.next_port += 1;
        let port = 20_000 + inner.next_port;
        let behavior = inner
            .behaviors
            .get(&workload.revision)
            .cloned()
            .unwrap_or(Behavior::ReadyAfter(2));
        let fake = Fake {
            behavior,
            service: workload.service.clone(),
            revision: workload.revision.clone(),
            managed: true,
            port,
            polls: 0,
        };
        inner.instances.insert(id.clone(), fake);
        inner.workloads.push(workload.clone());
        id
    }

    fn stop(inner: &mut Inner, id: &str) {
        Self::check(inner, &format!("before stopping {id}"));
        if inner.instances.remove(id).is_some() {
            inner.stopped.push(id.to_owned());
        }
        Self::check(inner, &format!("after stopping {id}"));
    }

    fn check(inner: &mut Inner, when: &str) {
        let Some((ingress, service, env)) = &inner.watched else {
            return;
        };
        let ready_ports: Vec<u16> = inner
            .instances
            .iter()
            .filter(|(_, fake)| replica_of("", fake).ready)
            .map(|(_, fake)| fake.port)
            .collect();
        let table = ingress.table();
        let mut found = Vec::new();
        for route in table.routes() {
            if &route.service != service || &route.env != env {
                continue;
            }
            for (weight, revision) in &route.revisions {
                let serving = revision.instances().iter().any(|instance| {
                    !instance.is_draining() && ready_ports.contains(&instance.address.port())
                });
                if *weight > 0 && !serving {
                    found.push(format!(
                        "{when}: revision {} has weight {weight} and no ready instance",
                        revision.name
                    ));
                }
            }
        }
        inner.violations.extend(found);
    }
}

fn replica_of(id: &str, fake: &Fake) -> Replica {
    let mut replica = Replica {
        id: id.to_owned(),
        service: Some(fake.service.clone()),
        revision: Some(fake.revision.clone()),
        managed: fake.managed,
        phase: Phase::Starting,
        ready: false,
        address: Some(SocketAddr::from((Ipv4Addr::LOCALHOST, fake.port))),
        restarts: 0,
        consecutive_failures: 0,
        started_at_ms: Some(now_ms()),
        next_start_at_ms: None,
        message: "starting".to_owned(),
        warning: None,
        last_exit: None,
    };
    match &fake.behavior {
        Behavior::ReadyAfter(polls) if fake.polls >= *polls => {
            replica.phase = Phase::Running;
            replica.ready = true;
            replica.message = "ready".to_owned();
        }
        Behavior::ReadyAfter(_) => {}
        Behavior::Crash { code, output } => {
            replica.phase = Phase::CrashLoop;
            replica.restarts = fake.polls;
            replica.message = "crash loop: failed 3 times in a row".to_owned();
            replica.last_exit = Some(ExitRecord {
                code: *code,
                signal: None,
                oom_killed: false,
                cause: None,
                reason: format!("exited with code {code}"),
                last_output: output.clone(),
                at_ms: now_ms(),
            });
        }
    }
    replica
}

impl Driver for FakeDriver {
    async fn scale(&self, workload: &Workload, scale: &Scale) -> Result<Vec<Replica>, DriverError> {
        let delay = {
            let mut inner = self.inner.lock().unwrap();
            inner.under_way += 1;
            inner.slow.get(&workload.revision).copied()
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        let mut inner = self.inner.lock().unwrap();
        inner.under_way -= 1;
        for id in &scale.retire {
            Self::stop(&mut inner, id);
        }
        let mine: Vec<String> = inner
            .instances
            .keys()
            .filter(|id| revision_of(id) == Some(workload.revision.as_str()))
            .cloned()
            .collect();
        let wanted = scale.replicas as usize;
        for id in mine.iter().skip(wanted) {
            Self::stop(&mut inner, id);
        }
        for _ in mine.len()..wanted {
            Self::start(&mut inner, workload);
        }
        let replicas = inner
            .instances
            .iter()
            .filter(|(id, _)| revision_of(id) == Some(workload.revision.as_str()))
            .map(|(id, fake)| replica_of(id, fake))
            .collect();
        drop(inner);
        self.changed();
        Ok(replicas)
    }

    async fn retire(
        &self,
        _service: &str,
        _env: &str,
        _revision: &str,
        replicas: &[String],
    ) -> Result<(), DriverError> {
        let mut inner = self.inner.lock().unwrap();
        for id in replicas {
            Self::stop(&mut inner, id);
        }
        drop(inner);
        self.changed();
        Ok(())
    }

    async fn remove(&self, _service: &str, _env: &str, revision: &str) -> Result<(), DriverError> {
        let mut inner = self.inner.lock().unwrap();
        inner.kept.retain(|kept| kept.revision != revision);
        inner.removed.push(revision.to_owned());
        let ids: Vec<String> = inner
            .instances
            .keys()
            .filter(|id| revision_of(id) == Some(revision))
            .cloned()
            .collect();
        for id in ids {
            Self::stop(&mut inner, &id);
        }
        Ok(())
    }

    async fn revisions(&self) -> Result<Vec<Kept>, DriverError> {
        Ok(self.inner.lock().unwrap().kept.clone())
    }

    async fn replicas(&self) -> Result<Vec<Replica>, DriverError> {
        let mut inner = self.inner.lock().unwrap();
        Self::check(&mut inner, "poll");
        for fake in inner.instances.values_mut() {
            fake.polls += 1;
        }
        Ok(inner
            .instances
            .iter()
            .map(|(id, fake)| replica_of(id, fake))
            .collect())
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    async fn logs(&self, query: &LogQuery) -> Result<Vec<LogLine>, DriverError> {
        let inner = self.inner.lock().unwrap();
        let mut lines = Vec::new();
        for (id, fake) in &inner.instances {
            if query.replica.as_ref().is_some_and(|wanted| wanted != id) {
                continue;
            }
            let output = match &fake.behavior {
                Behavior::Crash { output, .. } => output.clone(),
                Behavior::ReadyAfter(_) => vec!["listening".to_owned()],
            };
            lines.extend(output.into_iter().enumerate().map(|(n, text)| LogLine {
                replica: id.clone(),
                time: format!("2026-11-21T14:00:{n:02}.000000000Z"),
                stream: Stream::Stderr,
                text,
            }));
        }
        if let Some(id) = &query.replica
            && !inner.instances.contains_key(id)
        {
            return Err(DriverError::NotFound(id.clone()));
        }
        let skip = lines.len().saturating_sub(query.tail);
        Ok(lines.split_off(skip))
    }

    async fn follow(&self, query: &LogQuery) -> Result<mpsc::Receiver<LogLine>, DriverError> {
        let (sender, receiver) = mpsc::channel(256);
        for line in self.logs(query).await? {
            let _ = sender.try_send(line);
        }
        Ok(receiver)
    }

    async fn resolve_image(&self, reference: &str) -> Result<String, DriverError> {
        Err(DriverError::Image {
            reference: reference.to_owned(),
            message: "the fake driver pulls no image".to_owned(),
        })
    }
}

/// A manifest for a process service named `name`.
pub fn manifest(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "runway/v1",
        "kind": "RunwayService",
        "metadata": {"name": name},
        "spec": {
            "container_port": 8080,
            "request_timeout": 30,
            "scalability": {"min_instances": 1, "max_instance_request_concurrency": 50},
            "workload": {
                "process": {"command": ["python3", "app.py"]},
                "stop_grace_period_seconds": 5
            }
        }
    })
}

/// The code snapshot every test revision names.
pub const SOURCE: &str = "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";

/// A fast configuration for tests.
pub fn fast_config() -> ControllerConfig {
    ControllerConfig {
        reconcile_interval_ms: 20,
        deploy_timeout_ms: 1_500,
        drain_grace_ms: 60,
        ..ControllerConfig::default()
    }
}

/// A store, a fake driver, an ingress and a controller over them.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub store: Arc<SqliteStore>,
    pub driver: Arc<FakeDriver>,
    pub ingress: Ingress,
    pub key: MasterKey,
    pub controller: Controller<FakeDriver>,
}

impl Harness {
    pub fn new(config: ControllerConfig) -> Self {
        Self::with_store_in(config, tempfile::tempdir().unwrap())
    }

    /// With the store's database in `dir` (a small file system, say).
    pub fn with_store_in(config: ControllerConfig, dir: tempfile::TempDir) -> Self {
        let store = Arc::new(SqliteStore::open(dir.path().join("runway.db")).unwrap());
        let driver = Arc::new(FakeDriver::default());
        let key = MasterKey::generate().unwrap();
        let ingress = Ingress::new(Options::default());
        let controller = Controller::new(
            config,
            Arc::clone(&store) as Arc<dyn Store>,
            Arc::clone(&driver),
            Arc::new(ingress.clone()),
            Sealer::new(&key),
        )
        .allow_processes(true);
        Self {
            dir,
            store,
            driver,
            ingress,
            key,
            controller,
        }
    }

    /// A second controller over the same store and driver, with a fresh ingress.
    pub fn another_controller(&self) -> (Controller<FakeDriver>, Ingress) {
        self.another_controller_with(fast_config())
    }

    /// [`Harness::another_controller`] with `config`.
    pub fn another_controller_with(
        &self,
        config: ControllerConfig,
    ) -> (Controller<FakeDriver>, Ingress) {
        let ingress = Ingress::new(Options::default());
        let controller = Controller::new(
            config,
            Arc::clone(&self.store) as Arc<dyn Store>,
            Arc::clone(&self.driver),
            Arc::new(ingress.clone()),
            Sealer::new(&self.key),
        )
        .allow_processes(true);
        (controller, ingress)
    }

    pub fn onboard(&self, service: &str) {
        self.store
            .service_create(
                "admin",
                &NewService {
                    name: service.to_owned(),
                    owners: vec!["team".to_owned()],
                    environments: vec!["dev".to_owned()],
                    team: None,
                },
            )
            .unwrap();
    }

    /// Deploys a new revision at weight 100 with one instance, as the API does.
    pub fn deploy(&self, service: &str, secret_versions: BTreeMap<String, u32>) -> Deployment {
        self.deploy_manifest(service, manifest(service), secret_versions)
    }

    /// A deploy of `manifest`, recorded as the API records one: a dry run keeps the desired
    /// state and adds the new revision with nothing; anything else gives it all.
    pub fn deploy_manifest(
        &self,
        service: &str,
        manifest: serde_json::Value,
        secret_versions: BTreeMap<String, u32>,
    ) -> Deployment {
        let dry_run = manifest["spec"]["deployment"]["strategy"] == "dryrun";
        let revision = NewRevision {
            service: service.to_owned(),
            env: "dev".to_owned(),
            manifest,
            artifact: serde_json::json!({"source": SOURCE}),
            env_vars: BTreeMap::from([("GREETING".to_owned(), "hi".to_owned())]),
            set_vars: Default::default(),
            secret_versions,
        };
        let new = |instances, weight| PlannedRevision {
            revision: RevisionRef::New,
            instances,
            weight,
        };
        let planned: Vec<PlannedRevision> = if dry_run {
            let current = self.store.desired_get(service, "dev").unwrap();
            current
                .map(|d| d.revisions)
                .unwrap_or_default()
                .into_iter()
                .map(|r| PlannedRevision {
                    revision: RevisionRef::Named(r.revision),
                    instances: r.instances,
                    weight: r.weight,
                })
                .chain([new(0, 0)])
                .collect()
        } else {
            vec![new(1, 100)]
        };
        self.store
            .record_deploy("admin", &revision, &planned)
            .unwrap()
            .deployment
    }

    pub fn state(&self, deployment: &Deployment) -> DeploymentState {
        self.store.deployment_get(deployment.id).unwrap().state
    }

    pub fn events(&self, deployment: &Deployment) -> Vec<String> {
        self.store
            .deployment_events(deployment.id)
            .unwrap()
            .into_iter()
            .map(|e| e.message)
            .collect()
    }

    /// Reconciles until `done` holds, at most `bound`; panics with the state otherwise.
    pub async fn settle(&self, bound: Duration, mut done: impl FnMut(&Self) -> bool) {
        let until = tokio::time::Instant::now() + bound;
        loop {
            let _ = self.controller.reconcile_all().await;
            if done(self) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < until,
                "not settled within {bound:?}: instances {:?} (stopped: {:?}), table {:?}",
                self.driver.ids(),
                self.driver.stopped(),
                self.controller.route_table()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
