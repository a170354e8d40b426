//! `runtime.kind: kubernetes`: each revision a Deployment on a cluster (`runway_kube::KubeDriver`),
//! reached with a kubeconfig or the pod's service account; image tags pinned by `runway-oci`'s
//! `Store::resolve`, no layer fetched, when images are not mirrored; mirrored ones pulled by
//! the nodes from the platform registry with each service's pull secret.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use runway_kube::{KubeDriver, KubeOptions, Resolver};
use serde::{Deserialize, Serialize};

use super::settings::RuntimeConfig;
use super::{BoxFuture, DriverKind, ServerDriver, Start};

/// A cluster's driver.
#[derive(Debug, Clone, Copy)]
pub struct Kubernetes;

impl DriverKind for Kubernetes {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn build<'a>(&'a self, start: &'a Start<'a>) -> BoxFuture<'a, anyhow::Result<ServerDriver>> {
        Box::pin(async move {
            let runtime = start.runtime;
            // Images run on the cluster: a tag is pinned here, its layers never fetched.
            let images = Arc::new(
                runway_oci::Store::open(start.data_dir.join("images"))
                    .context("cannot prepare the image cache")?,
            );
            let pull = runway_oci::PullOptions {
                insecure_registries: runtime.insecure_registries.clone(),
                allowed_registries: Some(runtime.allowed_registries.clone()),
                ..runway_oci::PullOptions::default()
            };
            let resolver: Resolver = Arc::new(move |reference: String| {
                let (images, pull) = (Arc::clone(&images), pull.clone());
                Box::pin(async move {
                    images
                        .resolve(&reference, &pull)
                        .await
                        .map_err(|e| e.to_string())
                })
            });
            // The same operator bounds as on this machine: the private ranges `vpc_access`
            // gives, and Runway's own ingress pods admitted to every service's.
            let network = runway_kube::NetworkOptions {
                vpc_ranges: runtime
                    .egress
                    .limits()
                    .map_err(|e| anyhow::anyhow!(e))?
                    .private_ranges,
                ingress: Some(runway_kube::Peer::runway_ingress()),
            };
            let mut driver = runtime
                .kubernetes
                .driver(start.environments, resolver)
                .await?
                .with_network(network);
            // Pods pull mirrored images with their service's own pull-only login.
            if let Some(registry) = start.registry {
                let key = Arc::clone(&registry.key);
                driver = driver.with_registry(runway_kube::RegistryPull {
                    host: registry.host.clone(),
                    login: Arc::new(move |service: &str, id: i64| key.service(service, id)),
                });
            }
            Ok(ServerDriver::new(driver))
        })
    }

    /// The kubeconfig (or the pod's service account), read, the cluster not reached.
    fn check_config(&self, runtime: &RuntimeConfig) -> anyhow::Result<()> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the async runtime")?
            .block_on(runtime.kubernetes.client_config())?;
        Ok(())
    }
}

/// `runtime.kubernetes`: the cluster and where in it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesConfig {
    /// A kubeconfig file. Without it: the pod's service account inside a cluster, else
    /// `$KUBECONFIG`, else `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context to use (default: its current one).
    pub context: Option<String>,
    /// Each environment's namespace, `{env}` standing for its name. The namespaces are the
    /// installation's to create (Runway's chart does), with the driver's role in each.
    pub namespace_pattern: String,
    /// Secrets in each environment's namespace (of type `kubernetes.io/dockerconfigjson`) the
    /// kubelet pulls services' images with, from a registry that wants credentials.
    pub image_pull_secrets: Vec<String>,
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
    pub fn check(&self) -> Result<(), (&'static str, String)> {
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
    pub async fn driver(
        &self,
        environments: &[String],
        resolver: Resolver,
    ) -> anyhow::Result<KubeDriver> {
        let config = self.client_config().await?;
        // kube's TLS takes the process's default provider: ring, as every other TLS here (the
        // build also holds aws-lc-rs, for signature checks, so none is chosen by default).
        let _ = rustls::crypto::ring::default_provider().install_default();
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
    pub async fn client_config(&self) -> anyhow::Result<kube::Config> {
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
