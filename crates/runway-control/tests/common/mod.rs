//! An in-memory runtime and a store, ingress and controller around it.

#![allow(clippy::unwrap_used, dead_code, unreachable_pub, reason = "tests")]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runway_control::{Controller, ControllerConfig};
use runway_ingress::{Ingress, Options};
use runway_runtime::logs::{LogLine, Stream};
use runway_runtime::status::{ExitRecord, now_ms};
use runway_runtime::{InstanceSpec, InstanceStatus, Phase, Runtime, RuntimeError};
use runway_secrets::{MasterKey, Sealer};
use runway_store::{
    Deployment, DeploymentState, NewRevision, NewService, PlannedRevision, RevisionRef,
    SqliteStore, Store,
};
use tokio::sync::watch;

/// How a revision's instances behave.
#[derive(Debug, Clone)]
pub enum Behavior {
    /// Starting for this many polls of `instances()`, then ready.
    ReadyAfter(u32),
    /// Crash-looping with this exit code, having written these lines.
    Crash { code: i32, output: Vec<String> },
}

#[derive(Debug)]
struct Fake {
    behavior: Behavior,
    /// From its spec, as the local runtime reports them.
    service: String,
    revision: String,
    managed: bool,
    port: u16,
    polls: u32,
    stopped: bool,
}

#[derive(Debug, Default)]
struct Inner {
    instances: BTreeMap<String, Fake>,
    behaviors: HashMap<String, Behavior>,
    next_port: u16,
    specs: Vec<InstanceSpec>,
    stopped: Vec<String>,
    watched: Option<(Ingress, String, String)>,
    violations: Vec<String>,
}

/// A runtime in memory. When watching an ingress, it checks at every call that each weighted
/// revision of the watched route has a ready, non-draining instance.
#[derive(Debug, Default)]
pub struct FakeRuntime {
    inner: Mutex<Inner>,
}

impl FakeRuntime {
    pub fn behave(&self, revision: &str, behavior: Behavior) {
        let mut inner = self.inner.lock().unwrap();
        inner.behaviors.insert(revision.to_owned(), behavior);
    }

    /// As [`FakeRuntime::behave`], and its running instances too (a crash after they were
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

    pub fn specs(&self) -> Vec<InstanceSpec> {
        self.inner.lock().unwrap().specs.clone()
    }

    pub fn stopped(&self) -> Vec<String> {
        self.inner.lock().unwrap().stopped.clone()
    }

    pub fn violations(&self) -> Vec<String> {
        self.inner.lock().unwrap().violations.clone()
    }

    /// Ids of the instances that exist, running or not.
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

    fn check(inner: &mut Inner, when: &str) {
        let Some((ingress, service, env)) = &inner.watched else {
            return;
        };
        let ready_ports: Vec<u16> = inner
            .instances
            .iter()
            .filter(|(_, fake)| !fake.stopped && status_of("", fake).ready)
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

fn status_of(id: &str, fake: &Fake) -> InstanceStatus {
    let mut status = InstanceStatus {
        id: id.to_owned(),
        service: Some(fake.service.clone()),
        revision: Some(fake.revision.clone()),
        managed: fake.managed,
        phase: Phase::Starting,
        ready: false,
        pid: Some(4242),
        port: Some(fake.port),
        address: None,
        restarts: 0,
        consecutive_failures: 0,
        started_at_ms: Some(now_ms()),
        next_start_at_ms: None,
        message: "starting".to_owned(),
        warning: None,
        last_exit: None,
        supervisor_pid: 4241,
    };
    if fake.stopped {
        status.phase = Phase::Stopped;
        status.message = "stopped".to_owned();
        return status;
    }
    match &fake.behavior {
        Behavior::ReadyAfter(polls) if fake.polls >= *polls => {
            status.phase = Phase::Running;
            status.ready = true;
            status.message = "ready".to_owned();
        }
        Behavior::ReadyAfter(_) => {}
        Behavior::Crash { code, output } => {
            status.phase = Phase::CrashLoop;
            status.restarts = fake.polls;
            status.message = "crash loop: failed 3 times in a row".to_owned();
            status.last_exit = Some(ExitRecord {
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
    status
}

impl Runtime for FakeRuntime {
    async fn instance_ensure(&self, spec: InstanceSpec) -> Result<InstanceStatus, RuntimeError> {
        let mut inner = self.inner.lock().unwrap();
        if let Some(fake) = inner.instances.get(&spec.id) {
            return Ok(status_of(&spec.id, fake));
        }
        inner.next_port += 1;
        let port = 20_000 + inner.next_port;
        let behavior = inner
            .behaviors
            .get(&spec.revision)
            .cloned()
            .unwrap_or(Behavior::ReadyAfter(2));
        let fake = Fake {
            behavior,
            service: spec.service.clone(),
            revision: spec.revision.clone(),
            managed: spec.is_managed(),
            port,
            polls: 0,
            stopped: false,
        };
        let status = status_of(&spec.id, &fake);
        inner.instances.insert(spec.id.clone(), fake);
        inner.specs.push(spec);
        Ok(status)
    }

    async fn instance_stop(&self, id: &str) -> Result<InstanceStatus, RuntimeError> {
        let mut inner = self.inner.lock().unwrap();
        Self::check(&mut inner, &format!("before stopping {id}"));
        let fake = inner
            .instances
            .get_mut(id)
            .ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
        fake.stopped = true;
        let status = status_of(id, fake);
        inner.stopped.push(id.to_owned());
        Self::check(&mut inner, &format!("after stopping {id}"));
        Ok(status)
    }

    async fn instance_remove(&self, id: &str) -> Result<(), RuntimeError> {
        let mut inner = self.inner.lock().unwrap();
        inner.instances.remove(id);
        Ok(())
    }

    async fn instances(&self) -> Result<Vec<InstanceStatus>, RuntimeError> {
        let mut inner = self.inner.lock().unwrap();
        Self::check(&mut inner, "poll");
        for fake in inner.instances.values_mut() {
            fake.polls += 1;
        }
        Ok(inner
            .instances
            .iter()
            .map(|(id, fake)| status_of(id, fake))
            .collect())
    }

    async fn watch(&self, id: &str) -> Result<watch::Receiver<InstanceStatus>, RuntimeError> {
        let inner = self.inner.lock().unwrap();
        let fake = inner
            .instances
            .get(id)
            .ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
        Ok(watch::channel(status_of(id, fake)).1)
    }

    async fn logs(&self, id: &str, lines: usize) -> Result<Vec<LogLine>, RuntimeError> {
        let inner = self.inner.lock().unwrap();
        let fake = inner
            .instances
            .get(id)
            .ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
        let output = match &fake.behavior {
            Behavior::Crash { output, .. } => output.clone(),
            Behavior::ReadyAfter(_) => vec!["listening".to_owned()],
        };
        let skip = output.len().saturating_sub(lines);
        Ok(output
            .into_iter()
            .skip(skip)
            .enumerate()
            .map(|(n, text)| LogLine {
                time: format!("2026-11-21T14:00:{n:02}.000000000Z"),
                stream: Stream::Stderr,
                partial: false,
                text,
            })
            .collect())
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

/// A fast configuration for tests.
pub fn fast_config() -> ControllerConfig {
    ControllerConfig {
        reconcile_interval_ms: 20,
        deploy_timeout_ms: 1_500,
        drain_grace_ms: 60,
        ..ControllerConfig::default()
    }
}

/// A store, a fake runtime, an ingress and a controller over them.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub store: Arc<SqliteStore>,
    pub runtime: Arc<FakeRuntime>,
    pub ingress: Ingress,
    pub key: MasterKey,
    pub controller: Controller<FakeRuntime>,
}

impl Harness {
    pub fn new(config: ControllerConfig) -> Self {
        Self::with_store_in(config, tempfile::tempdir().unwrap())
    }

    /// With the store's database in `dir` (a small file system, say).
    pub fn with_store_in(config: ControllerConfig, dir: tempfile::TempDir) -> Self {
        let store = Arc::new(SqliteStore::open(dir.path().join("runway.db")).unwrap());
        let runtime = Arc::new(FakeRuntime::default());
        let key = MasterKey::generate().unwrap();
        let ingress = Ingress::new(Options::default());
        let controller = Controller::new(
            config,
            Arc::clone(&store) as Arc<dyn Store>,
            Arc::clone(&runtime),
            Arc::new(ingress.clone()),
            Sealer::new(&key),
        )
        .allow_processes(true);
        Self {
            dir,
            store,
            runtime,
            ingress,
            key,
            controller,
        }
    }

    /// A second controller over the same store and runtime, with a fresh ingress.
    pub fn another_controller(&self) -> (Controller<FakeRuntime>, Ingress) {
        let ingress = Ingress::new(Options::default());
        let controller = Controller::new(
            fast_config(),
            Arc::clone(&self.store) as Arc<dyn Store>,
            Arc::clone(&self.runtime),
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
            artifact: serde_json::json!({"source_dir": "/srv/app"}),
            env_vars: BTreeMap::from([("GREETING".to_owned(), "hi".to_owned())]),
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
                self.runtime.ids(),
                self.runtime.stopped(),
                self.controller.route_table()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
