//! The driver a configuration chooses: every kind `runtime.kind` may name is registered once,
//! in [`drivers`], and built once, at start, into a [`ServerDriver`] that the controller and
//! the API use without knowing which it is. Adding a driver is a crate implementing
//! `runway_driver::Driver` and a [`DriverKind`], and one line in [`drivers`]
//! (`docs/dev/adding-a-driver.md`).

pub mod kubernetes;
pub mod local;
pub mod settings;

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::net::Ipv4Addr;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use runway_driver::{Driver, DriverError, Kept, LogLine, LogQuery, Replica, Scale, Workload};
use runway_oci::source::SourceStore;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use settings::RuntimeConfig;

/// Every driver `runway server` can run, by the name `runtime.kind` gives it. A new driver is
/// one more `.with(...)` here.
pub fn drivers() -> Drivers {
    Drivers::default()
        .with(local::Local)
        .with(kubernetes::Kubernetes)
}

/// A kind of driver: its name in `runtime.kind`, how the server builds it, and what else of
/// the server it has a say in.
pub trait DriverKind: Send + Sync + 'static {
    /// Its name in `runtime.kind`.
    fn name(&self) -> &'static str;

    /// The driver, ready: it has found what runs already (so a start adopts it) when this
    /// returns.
    fn build<'a>(&'a self, start: &'a Start<'a>) -> BoxFuture<'a, anyhow::Result<ServerDriver>>;

    /// `runway server check-config`: checks what the `runtime` section names for this driver,
    /// reaching nothing (no cluster, no registry). Default: nothing to check.
    fn check_config(&self, runtime: &RuntimeConfig) -> anyhow::Result<()> {
        let _ = runtime;
        Ok(())
    }

    /// What of an image index a deploy mirrors into the platform registry: every platform
    /// (default), so that each node picks its own, or the one this driver runs.
    fn mirrored_platforms(&self) -> runway_oci::Platforms {
        runway_oci::Platforms::All
    }

    /// The address instances reach the platform at (the ingress's private listener and its
    /// resolver), when this driver's instances run on this machine's instance network.
    /// Default: none.
    fn platform_address(&self, runtime: &RuntimeConfig) -> Option<Ipv4Addr> {
        let _ = runtime;
        None
    }
}

/// What a [`DriverKind`] is built from.
#[derive(Debug)]
pub struct Start<'a> {
    /// The `runtime` section: `kind`, and the drivers' settings.
    pub runtime: &'a RuntimeConfig,
    /// The environments services are deployed to (`api.environments`).
    pub environments: &'a [String],
    /// The data directory, made and locked.
    pub data_dir: &'a Path,
    /// The code snapshots processes run from.
    pub sources: &'a SourceStore,
    /// The platform registry instances pull from, when images are mirrored into it.
    pub registry: Option<&'a crate::registry::PlatformRegistry>,
}

/// A future the driver's methods return, boxed.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The drivers a server knows (see [`drivers`]).
#[derive(Clone, Default)]
pub struct Drivers(Vec<Arc<dyn DriverKind>>);

impl Drivers {
    /// These and `kind` (which replaces one of the same name).
    pub fn with(mut self, kind: impl DriverKind) -> Self {
        self.0.retain(|known| known.name() != kind.name());
        self.0.push(Arc::new(kind));
        self
    }

    /// The kind named so.
    pub fn find(&self, name: &str) -> Option<&dyn DriverKind> {
        self.0
            .iter()
            .find(|kind| kind.name() == name)
            .map(|kind| kind.as_ref())
    }

    /// Their names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|kind| kind.name()).collect()
    }

    /// The kind `config` names, or the error that says which are known.
    pub(crate) fn chosen(&self, kind: &RuntimeKind) -> anyhow::Result<&dyn DriverKind> {
        self.find(kind.as_str()).ok_or_else(|| {
            anyhow::anyhow!(
                "runtime.kind: no driver {:?} (known: {})",
                kind.as_str(),
                self.names().join(", ")
            )
        })
    }
}

impl fmt::Debug for Drivers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Drivers").field(&self.names()).finish()
    }
}

/// `runtime.kind`: the name of a driver of [`drivers`] (`local` by default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct RuntimeKind(String);

impl RuntimeKind {
    /// The kind named so (checked against the drivers when the server starts).
    pub fn new(name: &str) -> Self {
        Self(name.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for RuntimeKind {
    fn default() -> Self {
        Self::new(local::Local.name())
    }
}

impl PartialEq<&str> for RuntimeKind {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl<'de> Deserialize<'de> for RuntimeKind {
    /// A file names one of [`drivers`]: refused otherwise as an unknown enum variant would be.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = RuntimeKind;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("string or map")
            }
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<RuntimeKind, E> {
                static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
                let names = NAMES.get_or_init(|| drivers().names());
                if names.contains(&name) {
                    Ok(RuntimeKind::new(name))
                } else {
                    Err(E::unknown_variant(name, names))
                }
            }
        }
        deserializer.deserialize_str(Name)
    }
}

/// The driver the server runs, whichever it is: a `runway_driver::Driver` over any other.
#[derive(Clone)]
pub struct ServerDriver(Arc<dyn Dispatch>);

impl ServerDriver {
    pub fn new(driver: impl Driver) -> Self {
        Self(Arc::new(driver))
    }

    /// The driver inside, when it is a `D` (`runway quickstart` reaches the local runtime so).
    pub fn get<D: Driver>(&self) -> Option<&D> {
        self.0.as_any().downcast_ref()
    }
}

impl fmt::Debug for ServerDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServerDriver")
    }
}

/// `Driver` as a trait object: the same methods, their futures boxed.
trait Dispatch: Send + Sync + 'static {
    fn scale<'a>(
        &'a self,
        workload: &'a Workload,
        scale: &'a Scale,
    ) -> BoxFuture<'a, Result<Vec<Replica>, DriverError>>;
    fn retire<'a>(
        &'a self,
        service: &'a str,
        env: &'a str,
        revision: &'a str,
        replicas: &'a [String],
    ) -> BoxFuture<'a, Result<(), DriverError>>;
    fn remove<'a>(
        &'a self,
        service: &'a str,
        env: &'a str,
        revision: &'a str,
    ) -> BoxFuture<'a, Result<(), DriverError>>;
    fn revisions(&self) -> BoxFuture<'_, Result<Vec<Kept>, DriverError>>;
    fn replicas(&self) -> BoxFuture<'_, Result<Vec<Replica>, DriverError>>;
    fn changes(&self) -> watch::Receiver<u64>;
    fn logs<'a>(&'a self, query: &'a LogQuery) -> BoxFuture<'a, Result<Vec<LogLine>, DriverError>>;
    fn follow<'a>(
        &'a self,
        query: &'a LogQuery,
    ) -> BoxFuture<'a, Result<mpsc::Receiver<LogLine>, DriverError>>;
    fn resolve_image<'a>(
        &'a self,
        reference: &'a str,
    ) -> BoxFuture<'a, Result<String, DriverError>>;
    fn identity<'a>(
        &'a self,
        service: &'a str,
        env: &'a str,
        revision: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<(), DriverError>>;
    fn own_identity(&self) -> bool;
    fn as_any(&self) -> &dyn Any;
}

impl<D: Driver> Dispatch for D {
    fn scale<'a>(
        &'a self,
        workload: &'a Workload,
        scale: &'a Scale,
    ) -> BoxFuture<'a, Result<Vec<Replica>, DriverError>> {
        Box::pin(Driver::scale(self, workload, scale))
    }
    fn retire<'a>(
        &'a self,
        service: &'a str,
        env: &'a str,
        revision: &'a str,
        replicas: &'a [String],
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(Driver::retire(self, service, env, revision, replicas))
    }
    fn remove<'a>(
        &'a self,
        service: &'a str,
        env: &'a str,
        revision: &'a str,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(Driver::remove(self, service, env, revision))
    }
    fn revisions(&self) -> BoxFuture<'_, Result<Vec<Kept>, DriverError>> {
        Box::pin(Driver::revisions(self))
    }
    fn replicas(&self) -> BoxFuture<'_, Result<Vec<Replica>, DriverError>> {
        Box::pin(Driver::replicas(self))
    }
    fn changes(&self) -> watch::Receiver<u64> {
        Driver::changes(self)
    }
    fn logs<'a>(&'a self, query: &'a LogQuery) -> BoxFuture<'a, Result<Vec<LogLine>, DriverError>> {
        Box::pin(Driver::logs(self, query))
    }
    fn follow<'a>(
        &'a self,
        query: &'a LogQuery,
    ) -> BoxFuture<'a, Result<mpsc::Receiver<LogLine>, DriverError>> {
        Box::pin(Driver::follow(self, query))
    }
    fn resolve_image<'a>(
        &'a self,
        reference: &'a str,
    ) -> BoxFuture<'a, Result<String, DriverError>> {
        Box::pin(Driver::resolve_image(self, reference))
    }
    fn identity<'a>(
        &'a self,
        service: &'a str,
        env: &'a str,
        revision: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(Driver::identity(self, service, env, revision, token))
    }
    fn own_identity(&self) -> bool {
        Driver::own_identity(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Driver for ServerDriver {
    async fn scale(&self, workload: &Workload, scale: &Scale) -> Result<Vec<Replica>, DriverError> {
        self.0.scale(workload, scale).await
    }

    async fn retire(
        &self,
        service: &str,
        env: &str,
        revision: &str,
        replicas: &[String],
    ) -> Result<(), DriverError> {
        self.0.retire(service, env, revision, replicas).await
    }

    async fn remove(&self, service: &str, env: &str, revision: &str) -> Result<(), DriverError> {
        self.0.remove(service, env, revision).await
    }

    async fn revisions(&self) -> Result<Vec<Kept>, DriverError> {
        self.0.revisions().await
    }

    async fn replicas(&self) -> Result<Vec<Replica>, DriverError> {
        self.0.replicas().await
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.0.changes()
    }

    async fn logs(&self, query: &LogQuery) -> Result<Vec<LogLine>, DriverError> {
        self.0.logs(query).await
    }

    async fn follow(&self, query: &LogQuery) -> Result<mpsc::Receiver<LogLine>, DriverError> {
        self.0.follow(query).await
    }

    async fn resolve_image(&self, reference: &str) -> Result<String, DriverError> {
        self.0.resolve_image(reference).await
    }

    async fn identity(
        &self,
        service: &str,
        env: &str,
        revision: &str,
        token: &str,
    ) -> Result<(), DriverError> {
        self.0.identity(service, env, revision, token).await
    }

    fn own_identity(&self) -> bool {
        self.0.own_identity()
    }
}
