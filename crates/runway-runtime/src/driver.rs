//! The local driver: a revision workload's replicas as supervised instances on this machine
//! ([`LocalRuntime`]), each a process or a container with its supervisor, outliving the
//! control plane that asked for it.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use runway_driver::{
    Driver, DriverError, Kept, LogLine, LogQuery, Replica, Scale, Stream, Workload, env_of,
    new_replica_id, revision_of,
};
use tokio::sync::{mpsc, watch};

use crate::logs::{self, Follower};
use crate::runtime::{Runtime, RuntimeError};
use crate::sandbox::SandboxPolicy;
use crate::service::{InstanceOptions, instance_spec};
use crate::spec::{Artifact, InstanceSpec};
use crate::status::{InstanceStatus, Phase};
use crate::{Digest, LocalRuntime};

/// How often a followed log is read for new lines.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// What the operator decides about plain processes on this machine.
#[derive(Debug, Clone, Default)]
pub struct LocalDriverOptions {
    /// Each plain process runs in a sandbox of its service's own ([`crate::sandbox`]); an
    /// image is isolated anyway.
    pub sandbox: Option<SandboxPolicy>,
    /// Where revisions' code snapshots are: `<dir>/<service id>/<hex>`.
    pub snapshots: Option<PathBuf>,
}

/// Runs revision workloads on this machine. Clones share their state.
#[derive(Debug, Clone)]
pub struct LocalDriver {
    runtime: Arc<LocalRuntime>,
    options: LocalDriverOptions,
    changes: watch::Sender<u64>,
    /// Replicas whose status changes are being passed on to [`Driver::changes`].
    watched: Arc<Mutex<HashSet<String>>>,
    /// Replicas being stopped and removed in the background.
    stopping: Arc<Mutex<HashSet<String>>>,
}

impl LocalDriver {
    pub fn new(runtime: Arc<LocalRuntime>, options: LocalDriverOptions) -> Self {
        Self {
            runtime,
            options,
            changes: watch::channel(0).0,
            watched: Arc::default(),
            stopping: Arc::default(),
        }
    }

    /// The runtime under this driver.
    pub fn runtime(&self) -> &Arc<LocalRuntime> {
        &self.runtime
    }

    /// The spec of replica `id` of the workload: its settings, its pinned image or the code
    /// snapshot it runs from (in its service's sandbox when the operator asks for one), its
    /// secrets as environment variables; marked as the platform's.
    pub fn spec(&self, workload: &Workload, id: &str) -> Result<InstanceSpec, DriverError> {
        let refused = DriverError::Refused;
        let code_dir = match &workload.source {
            Some(digest) => {
                let digest = Digest::parse(digest).map_err(|_| {
                    refused(format!("its code snapshot {digest:?} is not a digest"))
                })?;
                let snapshots = self.options.snapshots.as_ref().ok_or_else(|| {
                    refused("this control plane keeps no code snapshots".to_owned())
                })?;
                snapshots
                    .join(workload.service_id.to_string())
                    .join(digest.hex())
            }
            None => PathBuf::new(),
        };
        let options = InstanceOptions {
            id: id.to_owned(),
            revision: workload.revision.clone(),
            image: workload.image.clone(),
            base_dir: code_dir.clone(),
            secret_env: workload.secrets.clone(),
        };
        let mut spec =
            instance_spec(&workload.config, &options).map_err(|e| refused(e.to_string()))?;
        // Marks it the platform's, so a later control plane knows it even once its revision
        // is gone.
        spec.managed = true;
        spec.identity_token = workload.identity.clone();
        if let (Artifact::Command { .. }, Some(policy)) = (&spec.artifact, &self.options.sandbox) {
            spec.sandbox = Some(
                policy
                    .sandbox(workload.service_id, &code_dir)
                    .map_err(refused)?,
            );
        }
        Ok(spec)
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Passes the replica's status changes on to [`Driver::changes`] until it ends.
    fn watch_replica(&self, id: &str) {
        if !lock(&self.watched).insert(id.to_owned()) {
            return;
        }
        let (runtime, changes, watched, id) = (
            Arc::clone(&self.runtime),
            self.changes.clone(),
            Arc::clone(&self.watched),
            id.to_owned(),
        );
        tokio::spawn(async move {
            if let Ok(mut status) = runtime.watch(&id).await {
                while status.changed().await.is_ok() {
                    changes.send_modify(|n| *n = n.wrapping_add(1));
                    if status.borrow().phase.is_final() {
                        break;
                    }
                }
            }
            lock(&watched).remove(&id);
            changes.send_modify(|n| *n = n.wrapping_add(1));
        });
    }

    /// Stops the replica with its stop signal and grace period, then forgets it, in the
    /// background.
    fn stop_in_background(&self, id: &str) {
        if !lock(&self.stopping).insert(id.to_owned()) {
            return;
        }
        let (runtime, changes, stopping, id) = (
            Arc::clone(&self.runtime),
            self.changes.clone(),
            Arc::clone(&self.stopping),
            id.to_owned(),
        );
        tokio::spawn(async move {
            let stopped = match runtime.instance_stop(&id).await {
                Ok(_) | Err(RuntimeError::NotFound(_)) => true,
                Err(_) => false,
            };
            if stopped {
                let _ = runtime.instance_remove(&id).await;
            }
            lock(&stopping).remove(&id);
            changes.send_modify(|n| *n = n.wrapping_add(1));
        });
    }

    async fn statuses(&self) -> Result<Vec<InstanceStatus>, DriverError> {
        let statuses = self.runtime.instances().await.map_err(failed)?;
        for status in &statuses {
            if !status.phase.is_final() {
                self.watch_replica(&status.id);
            }
        }
        Ok(statuses)
    }

    /// The last `n` lines of these replicas' output together, oldest first.
    fn tail(&self, ids: &[String], n: usize) -> Result<Vec<LogLine>, DriverError> {
        self.tail_in(ids, n, |id| self.runtime.instance_dir(id))
    }

    /// The last lines of the query's replicas that were removed, whose output the runtime
    /// keeps for a while ([`LocalRuntime::previous`]).
    fn previous_tail(&self, query: &LogQuery) -> Result<Vec<LogLine>, DriverError> {
        let ids: Vec<String> = self
            .runtime
            .previous()
            .into_iter()
            .filter(|previous| {
                previous.service == query.service
                    && revision_of(&previous.id)
                        .and_then(|revision| env_of(&query.service, revision))
                        == Some(query.env.as_str())
                    && query.replica.as_ref().is_none_or(|id| *id == previous.id)
            })
            .map(|previous| previous.id)
            .collect();
        if let Some(id) = &query.replica
            && ids.is_empty()
        {
            return Err(DriverError::NotFound(id.clone()));
        }
        self.tail_in(&ids, query.tail, |id| self.runtime.previous_dir(id))
    }

    fn tail_in(
        &self,
        ids: &[String],
        n: usize,
        dir: impl Fn(&str) -> std::path::PathBuf,
    ) -> Result<Vec<LogLine>, DriverError> {
        let mut all = Vec::new();
        for id in ids {
            match logs::tail(&dir(id), n) {
                Ok(lines) => all.extend(lines.into_iter().map(|line| log_line(id, line))),
                // Gone meanwhile (a retired replica): nothing to show.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(DriverError::Failed(format!("{id}'s output: {error}"))),
            }
        }
        // Oldest first across replicas; RFC 3339 in UTC sorts as text.
        all.sort_by(|a, b| a.time.cmp(&b.time));
        let skip = all.len().saturating_sub(n);
        Ok(all.split_off(skip))
    }

    /// The ids of the replicas a query names: one, or every one of its service and
    /// environment.
    async fn queried(&self, query: &LogQuery) -> Result<Vec<String>, DriverError> {
        let statuses = self.statuses().await?;
        let of_query = |status: &InstanceStatus| {
            status.service.as_deref() == Some(query.service.as_str())
                && revision_of(&status.id).and_then(|revision| env_of(&query.service, revision))
                    == Some(query.env.as_str())
        };
        match &query.replica {
            Some(id) => statuses
                .iter()
                .find(|status| &status.id == id && of_query(status))
                .map(|status| vec![status.id.clone()])
                .ok_or_else(|| DriverError::NotFound(id.clone())),
            None => Ok(statuses
                .iter()
                .filter(|status| of_query(status))
                .map(|status| status.id.clone())
                .collect()),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn failed(error: RuntimeError) -> DriverError {
    match error {
        RuntimeError::NotFound(id) => DriverError::NotFound(id),
        RuntimeError::Artifact { message, .. } => DriverError::Refused(message),
        RuntimeError::Image { reference, message } => DriverError::Image { reference, message },
        other => DriverError::Failed(runway_log::chain(&other)),
    }
}

/// A replica as the driver seam reports it.
pub fn replica(status: InstanceStatus) -> Replica {
    let address = status.reached_at();
    Replica {
        id: status.id,
        service: status.service,
        revision: status.revision,
        managed: status.managed,
        phase: status.phase,
        ready: status.ready,
        address,
        restarts: status.restarts,
        consecutive_failures: status.consecutive_failures,
        started_at_ms: status.started_at_ms,
        next_start_at_ms: status.next_start_at_ms,
        message: match &status.dropped_output {
            Some(dropped) => format!("{}; {}", status.message, dropped.describe()),
            None => status.message,
        },
        warning: status.warning,
        last_exit: status.last_exit,
    }
}

fn log_line(replica: &str, line: logs::LogLine) -> LogLine {
    LogLine {
        replica: replica.to_owned(),
        time: line.time,
        stream: match line.stream {
            logs::Stream::Stdout => Stream::Stdout,
            logs::Stream::Stderr => Stream::Stderr,
        },
        text: line.text,
    }
}

impl Driver for LocalDriver {
    async fn scale(&self, workload: &Workload, scale: &Scale) -> Result<Vec<Replica>, DriverError> {
        let statuses = self.statuses().await?;
        let mine: Vec<&InstanceStatus> = statuses
            .iter()
            .filter(|status| revision_of(&status.id) == Some(workload.revision.as_str()))
            .collect();
        for status in &mine {
            if scale.retire.contains(&status.id) {
                self.stop_in_background(&status.id);
            }
        }
        let mut live: Vec<&InstanceStatus> = {
            let stopping = lock(&self.stopping);
            mine.iter()
                .copied()
                .filter(|status| !status.phase.is_final() && status.phase != Phase::Stopping)
                .filter(|status| !stopping.contains(&status.id))
                .collect()
        };
        let wanted = scale.replicas as usize;
        if live.len() > wanted {
            // The surplus: those not ready first, then the newest.
            live.sort_by_key(|status| (status.ready, std::cmp::Reverse(status.started_at_ms)));
            for status in &live[..live.len() - wanted] {
                self.stop_in_background(&status.id);
            }
        }
        let taken: HashSet<&str> = statuses.iter().map(|status| status.id.as_str()).collect();
        for _ in live.len()..wanted {
            let mut id = new_replica_id(&workload.revision);
            while taken.contains(id.as_str()) {
                id = new_replica_id(&workload.revision);
            }
            let spec = self.spec(workload, &id)?;
            self.runtime.instance_ensure(spec).await.map_err(failed)?;
            self.watch_replica(&id);
        }
        self.changed();
        Ok(self
            .replicas()
            .await?
            .into_iter()
            .filter(|replica| revision_of(&replica.id) == Some(workload.revision.as_str()))
            .collect())
    }

    async fn retire(
        &self,
        _service: &str,
        _env: &str,
        revision: &str,
        replicas: &[String],
    ) -> Result<(), DriverError> {
        for id in replicas {
            if revision_of(id) == Some(revision) {
                self.stop_in_background(id);
            }
        }
        self.changed();
        Ok(())
    }

    async fn remove(&self, _service: &str, _env: &str, revision: &str) -> Result<(), DriverError> {
        for status in self.statuses().await? {
            if revision_of(&status.id) == Some(revision) {
                self.stop_in_background(&status.id);
            }
        }
        Ok(())
    }

    async fn identity(
        &self,
        _service: &str,
        _env: &str,
        revision: &str,
        token: &str,
    ) -> Result<(), DriverError> {
        for status in self.statuses().await? {
            if revision_of(&status.id) == Some(revision) && !status.phase.is_final() {
                self.runtime
                    .renew_identity(&status.id, token)
                    .map_err(|e| DriverError::Failed(runway_log::chain(&e)))?;
            }
        }
        Ok(())
    }

    async fn revisions(&self) -> Result<Vec<Kept>, DriverError> {
        // This machine keeps nothing of a revision but its replicas.
        Ok(Vec::new())
    }

    async fn replicas(&self) -> Result<Vec<Replica>, DriverError> {
        Ok(self.statuses().await?.into_iter().map(replica).collect())
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    async fn logs(&self, query: &LogQuery) -> Result<Vec<LogLine>, DriverError> {
        if query.previous {
            return self.previous_tail(query);
        }
        let ids = self.queried(query).await?;
        self.tail(&ids, query.tail)
    }

    async fn follow(&self, query: &LogQuery) -> Result<mpsc::Receiver<LogLine>, DriverError> {
        let ids = self.queried(query).await?;
        let first = self.tail(&ids, query.tail)?;
        // The replicas there now are followed from the end of their output; one that appears
        // later (a rollout) from its start.
        let mut followers: Vec<(String, Follower)> = ids
            .into_iter()
            .map(|id| {
                let follower = Follower::from_end(&self.runtime.instance_dir(&id));
                (id, follower)
            })
            .collect();
        let (sender, receiver) = mpsc::channel(256);
        let (driver, query) = (self.clone(), query.clone());
        tokio::spawn(async move {
            for line in first {
                if sender.send(line).await.is_err() {
                    return;
                }
            }
            let mut tick = tokio::time::interval(FOLLOW_EVERY);
            while !sender.is_closed() {
                tick.tick().await;
                if query.replica.is_none()
                    && let Ok(now) = driver.queried(&query).await
                {
                    followers.retain(|(id, _)| now.contains(id));
                    for id in now {
                        if !followers.iter().any(|(known, _)| *known == id) {
                            let dir = driver.runtime.instance_dir(&id);
                            let follower = Follower::from_start(&dir);
                            followers.push((id, follower));
                        }
                    }
                }
                for (id, follower) in &mut followers {
                    for line in follower.poll().unwrap_or_default() {
                        if sender.send(log_line(id, line)).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Ok(receiver)
    }

    async fn resolve_image(&self, reference: &str) -> Result<String, DriverError> {
        self.runtime
            .pull_image(reference)
            .await
            .map(|image| image.pinned)
            .map_err(failed)
    }
}
