//! What runs `runway server`'s services: this machine (`runtime.kind: local`, the default) or
//! a Kubernetes cluster (`runtime.kind: kubernetes`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use runway_driver::{Driver, DriverError, Kept, LogLine, LogQuery, Replica, Scale, Workload};
use runway_kube::{KubeDriver, KubeOptions, Resolver};
use runway_runtime::LocalDriver;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

/// Where services run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RuntimeKind {
    /// On this machine: processes and containers, each with its supervisor.
    #[default]
    Local,
    /// On a Kubernetes cluster: a Deployment and a Service per revision.
    Kubernetes,
}

/// `runtime.kubernetes`: the cluster and where in it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct KubernetesConfig {
    /// A kubeconfig file. Without it: the pod's service account inside a cluster, else
    /// `$KUBECONFIG`, else `~/.kube/config`.
    pub(crate) kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context to use (default: its current one).
    pub(crate) context: Option<String>,
    /// Each environment's namespace, `{env}` standing for its name. The namespaces are the
    /// installation's to create (Runway's chart does), with the driver's role in each.
    pub(crate) namespace_pattern: String,
    /// Secrets in each environment's namespace (of type `kubernetes.io/dockerconfigjson`) the
    /// kubelet pulls services' images with, from a registry that wants credentials.
    pub(crate) image_pull_secrets: Vec<String>,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            context: None,
            namespace_pattern: KubeOptions::default().namespace_pattern,
            image_pull_secrets: Vec::new(),
        }
    }
}

impl KubernetesConfig {
    /// The key at fault and what was expected.
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        if !self.namespace_pattern.contains("{env}") {
            return Err((
                "runtime.kubernetes.namespace_pattern",
                format!(
                    "{:?} does not contain {{env}}: each environment needs a namespace of its own",
                    self.namespace_pattern
                ),
            ));
        }
        Ok(())
    }

    /// A driver for the cluster, watching each environment's namespace; it has listed what
    /// runs there (so a restart adopts it) when this returns.
    /// `resolver` pins image tags to digests (the server's registry client).
    pub(crate) async fn driver(
        &self,
        environments: &[String],
        resolver: Resolver,
    ) -> anyhow::Result<KubeDriver> {
        let config = self.client_config().await?;
        let client = kube::Client::try_from(config).context("cannot make a Kubernetes client")?;
        let options = KubeOptions {
            namespace_pattern: self.namespace_pattern.clone(),
            environments: environments.to_vec(),
            image_pull_secrets: self.image_pull_secrets.clone(),
        };
        let driver = KubeDriver::new(client, options, Some(resolver));
        driver
            .ready(std::time::Duration::from_secs(30))
            .await
            .context("cannot watch the cluster")?;
        Ok(driver)
    }

    /// How to reach the cluster: the kubeconfig and its context, or the pod's service
    /// account; read, not tried.
    pub(crate) async fn client_config(&self) -> anyhow::Result<kube::Config> {
        Ok(match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = kube::config::Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
                let options = kube::config::KubeConfigOptions {
                    context: self.context.clone(),
                    ..Default::default()
                };
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .with_context(|| format!("cannot use the kubeconfig {}", path.display()))?
            }
            None => kube::Config::infer()
                .await
                .context("cannot find a cluster: no service account, $KUBECONFIG or ~/.kube/config (set runtime.kubernetes.kubeconfig)")?,
        })
    }
}

/// The driver `runway server` runs: one of the two, chosen by its configuration.
#[derive(Debug, Clone)]
pub(crate) enum ServerDriver {
    Local(LocalDriver),
    Kubernetes(KubeDriver),
}

impl ServerDriver {
    /// The local driver's runtime, when services run on this machine.
    pub(crate) fn local(&self) -> Option<&Arc<runway_runtime::LocalRuntime>> {
        match self {
            ServerDriver::Local(driver) => Some(driver.runtime()),
            ServerDriver::Kubernetes(_) => None,
        }
    }
}

impl Driver for ServerDriver {
    async fn scale(&self, workload: &Workload, scale: &Scale) -> Result<Vec<Replica>, DriverError> {
        match self {
            ServerDriver::Local(d) => d.scale(workload, scale).await,
            ServerDriver::Kubernetes(d) => d.scale(workload, scale).await,
        }
    }

    async fn retire(
        &self,
        service: &str,
        env: &str,
        revision: &str,
        replicas: &[String],
    ) -> Result<(), DriverError> {
        match self {
            ServerDriver::Local(d) => d.retire(service, env, revision, replicas).await,
            ServerDriver::Kubernetes(d) => d.retire(service, env, revision, replicas).await,
        }
    }

    async fn remove(&self, service: &str, env: &str, revision: &str) -> Result<(), DriverError> {
        match self {
            ServerDriver::Local(d) => d.remove(service, env, revision).await,
            ServerDriver::Kubernetes(d) => d.remove(service, env, revision).await,
        }
    }

    async fn revisions(&self) -> Result<Vec<Kept>, DriverError> {
        match self {
            ServerDriver::Local(d) => d.revisions().await,
            ServerDriver::Kubernetes(d) => d.revisions().await,
        }
    }

    async fn replicas(&self) -> Result<Vec<Replica>, DriverError> {
        match self {
            ServerDriver::Local(d) => d.replicas().await,
            ServerDriver::Kubernetes(d) => d.replicas().await,
        }
    }

    fn changes(&self) -> watch::Receiver<u64> {
        match self {
            ServerDriver::Local(d) => d.changes(),
            ServerDriver::Kubernetes(d) => d.changes(),
        }
    }

    async fn logs(&self, query: &LogQuery) -> Result<Vec<LogLine>, DriverError> {
        match self {
            ServerDriver::Local(d) => d.logs(query).await,
            ServerDriver::Kubernetes(d) => d.logs(query).await,
        }
    }

    async fn follow(&self, query: &LogQuery) -> Result<mpsc::Receiver<LogLine>, DriverError> {
        match self {
            ServerDriver::Local(d) => d.follow(query).await,
            ServerDriver::Kubernetes(d) => d.follow(query).await,
        }
    }

    async fn resolve_image(&self, reference: &str) -> Result<String, DriverError> {
        match self {
            ServerDriver::Local(d) => d.resolve_image(reference).await,
            ServerDriver::Kubernetes(d) => d.resolve_image(reference).await,
        }
    }
}
