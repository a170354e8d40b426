//! What the API reads from the controller: the URL, instances, routes, revision status and
//! logs of a service in an environment.

use runway_reconciler::{RevisionStatus, RouteWeight};
use runway_runtime::logs::LogLine;
use runway_runtime::{Phase, Runtime};
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
    /// The runtime's phase.
    pub phase: Phase,
    /// Passing its readiness probe.
    pub ready: bool,
    /// The port it listens on.
    pub port: Option<u16>,
    /// Where it takes traffic: its own network's address and its port.
    pub address: Option<std::net::SocketAddr>,
    /// Times it was started again.
    pub restarts: u32,
    /// Its supervisor's last word.
    pub message: String,
}

impl<R: Runtime + Send + Sync + 'static> Controller<R> {
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
        self.lock()
            .services
            .get(&(service.to_owned(), env.to_owned()))
            .map(|s| s.routes.clone())
            .unwrap_or_default()
    }

    /// How each revision is doing, as last planned; one that cannot start for good (a
    /// process no longer allowed, a secret that cannot be opened) is failing, with that
    /// reason, rather than forever progressing.
    pub fn revision_status(&self, service: &str, env: &str) -> Vec<RevisionStatus> {
        let state = self.lock();
        let Some(service) = state.services.get(&(service.to_owned(), env.to_owned())) else {
            return Vec::new();
        };
        let mut statuses = service.status.clone();
        for status in &mut statuses {
            if let Some(failure) = service.start_errors.get(&status.revision)
                && failure.permanent
                && status.ready == 0
            {
                status.condition = runway_reconciler::Condition::Failing {
                    reason: failure.reason.clone(),
                };
            }
        }
        statuses
    }

    /// The service's instances in the environment, as the runtime reports them now.
    pub async fn instances(&self, service: &str, env: &str) -> Result<Vec<InstanceSummary>> {
        let statuses = self
            .runtime
            .instances()
            .await
            .map_err(|e| ControlError::runtime("list instances", e))?;
        let mut summaries = Vec::new();
        for status in statuses {
            let Some(revision) = self.revision_in(&status.id, service, env).await? else {
                continue;
            };
            summaries.push(InstanceSummary {
                address: status.reached_at(),
                id: status.id,
                revision,
                phase: status.phase,
                ready: status.ready,
                port: status.port,
                restarts: status.restarts,
                message: status.message,
            });
        }
        Ok(summaries)
    }

    /// The last `lines` lines of output of one instance of the service, or of all of them
    /// merged by time, each with its instance's id.
    pub async fn logs(
        &self,
        service: &str,
        env: &str,
        instance: Option<&str>,
        lines: usize,
    ) -> Result<Vec<(String, LogLine)>> {
        let ids: Vec<String> = match instance {
            Some(id) => {
                if self.revision_in(id, service, env).await?.is_none() {
                    return Err(ControlError::NoInstance {
                        service: service.to_owned(),
                        env: env.to_owned(),
                        instance: id.to_owned(),
                    });
                }
                vec![id.to_owned()]
            }
            None => self
                .instances(service, env)
                .await?
                .into_iter()
                .map(|i| i.id)
                .collect(),
        };
        let mut all = Vec::new();
        for id in ids {
            let read = self
                .runtime
                .logs(&id, lines)
                .await
                .map_err(|e| ControlError::runtime(format!("read the logs of {id}"), e))?;
            all.extend(read.into_iter().map(|line| (id.clone(), line)));
        }
        all.sort_by(|a, b| a.1.time.cmp(&b.1.time));
        let skip = all.len().saturating_sub(lines);
        Ok(all.split_off(skip))
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
