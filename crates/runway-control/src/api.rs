//! What the API reads from the controller of a service in an environment: its URL (and a
//! revision's, by its tag), its instances as the driver lists them now, its routes and each
//! revision's status from `status.rs`'s board, and its logs, read or followed through the
//! driver. Its scaling and its rollout are read in `autoscale.rs` and `rollout.rs`.

use runway_driver::{Driver, LogLine, LogQuery, Phase};
use runway_reconciler::{RevisionStatus, RouteWeight};
use serde::Serialize;

use crate::controller::Controller;
use crate::error::{ControlError, Result};
use crate::observe::revision_of;

/// One instance as the API shows it (`InstanceView`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceSummary {
    /// `{revision}-{6 hex}`.
    pub id: String,
    /// The revision it runs.
    pub revision: String,
    /// The driver's phase.
    pub phase: Phase,
    /// Passing its readiness probe.
    pub ready: bool,
    /// The port it listens on.
    pub port: Option<u16>,
    /// Where it takes traffic: its own network's address and its port.
    pub address: Option<std::net::SocketAddr>,
    /// Times it was started again.
    pub restarts: u32,
    /// Its driver's last word.
    pub message: String,
}

impl<D: Driver> Controller<D> {
    /// Where users reach the service: `https://{service}.{env}.{domain}:{https_port}/`.
    pub fn url(&self, service: &str, env: &str) -> String {
        let domain = &self.config.domain;
        match self.config.https_port {
            443 => format!("https://{service}.{env}.{domain}/"),
            port => format!("https://{service}.{env}.{domain}:{port}/"),
        }
    }

    /// Where one revision alone is reached, by its tag: `https://r3---{service}.{env}…/`.
    pub fn tag_url(&self, service: &str, env: &str, tag: &str) -> String {
        let url = self.url(service, env);
        format!("https://{tag}---{}", url.trim_start_matches("https://"))
    }

    /// The weights the ingress has for the service, as this controller last set them.
    pub fn routes(&self, service: &str, env: &str) -> Vec<RouteWeight> {
        self.status
            .get(&(service.to_owned(), env.to_owned()))
            .map(|status| status.routes)
            .unwrap_or_default()
    }

    /// How each revision is doing, as last planned; one that cannot start for good (a
    /// process no longer allowed, a secret that cannot be opened) is failing, with that
    /// reason, rather than forever progressing.
    pub fn revision_status(&self, service: &str, env: &str) -> Vec<RevisionStatus> {
        self.status
            .get(&(service.to_owned(), env.to_owned()))
            .map(|status| status.revisions)
            .unwrap_or_default()
    }

    /// The service's instances in the environment, as the driver reports them now.
    pub async fn instances(&self, service: &str, env: &str) -> Result<Vec<InstanceSummary>> {
        let replicas = self
            .driver
            .replicas()
            .await
            .map_err(|e| ControlError::driver("list replicas", e))?;
        let mut summaries = Vec::new();
        for replica in replicas {
            let Some(revision) = self.revision_in(&replica.id, service, env).await? else {
                continue;
            };
            summaries.push(InstanceSummary {
                port: replica.address.map(|a| a.port()),
                address: replica.address,
                id: replica.id,
                revision,
                phase: replica.phase,
                ready: replica.ready,
                restarts: replica.restarts,
                message: replica.message,
            });
        }
        Ok(summaries)
    }

    /// The last `lines` lines of output of one instance of the service, or of all of them
    /// merged by time, each with its instance's id; with `previous`, of those that ended
    /// (see [`LogQuery::previous`]).
    pub async fn logs(
        &self,
        service: &str,
        env: &str,
        instance: Option<&str>,
        lines: usize,
        previous: bool,
    ) -> Result<Vec<LogLine>> {
        let query = LogQuery {
            previous,
            ..self.log_query(service, env, instance, lines).await?
        };
        self.driver
            .logs(&query)
            .await
            .map_err(|e| ControlError::driver(format!("read the logs of {service} in {env}"), e))
    }

    /// As [`Controller::logs`], then each new line as it is written, of every instance of the
    /// service including those that start later (a rollout), until the receiver is dropped.
    pub async fn follow_logs(
        &self,
        service: &str,
        env: &str,
        instance: Option<&str>,
        lines: usize,
    ) -> Result<tokio::sync::mpsc::Receiver<LogLine>> {
        self.driver
            .follow(&self.log_query(service, env, instance, lines).await?)
            .await
            .map_err(|e| ControlError::driver(format!("follow the logs of {service} in {env}"), e))
    }

    /// The query for the logs of the service's instances, or of one of them when it is the
    /// service's.
    async fn log_query(
        &self,
        service: &str,
        env: &str,
        instance: Option<&str>,
        lines: usize,
    ) -> Result<LogQuery> {
        if let Some(id) = instance
            && self.revision_in(id, service, env).await?.is_none()
        {
            return Err(ControlError::NoInstance {
                service: service.to_owned(),
                env: env.to_owned(),
                instance: id.to_owned(),
            });
        }
        Ok(LogQuery {
            service: service.to_owned(),
            env: env.to_owned(),
            replica: instance.map(str::to_owned),
            tail: lines,
            previous: false,
        })
    }

    /// The instance's revision when it belongs to the service in the environment.
    async fn revision_in(&self, id: &str, service: &str, env: &str) -> Result<Option<String>> {
        let Some(name) = revision_of(id) else {
            return Ok(None);
        };
        let info = self.revision(name).await?;
        Ok(info
            .filter(|info| info.record.service == service && info.record.env == env)
            .map(|info| info.record.name.clone()))
    }
}
