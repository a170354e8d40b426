//! The controller's seam to the data plane: what it asks of an ingress, wherever that runs. It
//! asks for a route table put in force, an instance drained, a revision's figures, the
//! scale-up signals, and the table served when the controller starts.
//!
//! [`runway_ingress::Ingress`] is the in-process one (the controller's tests);
//! [`runway_ingress::control::RemoteIngress`] is an ingress in its own process, fed over its
//! control socket (`runway server` on one machine, the ingress it starts or adopts);
//! [`IngressFleet`] is every ingress a name resolves to, fed over mutual TLS (`runway server`
//! with `ingress.remote`: ingresses it does not run, as the Helm chart's Deployment).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use runway_ingress::control::RemoteIngress;
use runway_ingress::fleet::IngressFleet;
use runway_ingress::{Ingress, RevisionStats, RouteTableConfig, ScaleUp};
use tokio::sync::broadcast;

/// A boxed future, so the trait can be used as `dyn DataPlane`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the controller uses of the ingress.
pub trait DataPlane: Send + Sync + 'static {
    /// Validates the whole table and puts it in force; `Ok` once it is. On an error the
    /// table in force stays. It returns in bounded time, its own error past it (the remote
    /// ones bound each call by their control client's timeout): the propagator, and every
    /// pass waiting for its route to be in force, wait on it.
    fn set_routes<'a>(&'a self, table: &'a RouteTableConfig) -> BoxFuture<'a, Result<(), String>>;

    /// Drains an instance of the table in force (no new requests, idle connections closed)
    /// and waits for its requests in flight, at most `grace`; true when none was left.
    fn drain(&self, address: SocketAddr, grace: Duration) -> BoxFuture<'static, bool>;

    /// A revision's figures (see [`RevisionStats`]), without waiting: at most a few hundred
    /// milliseconds old.
    fn revision_stats(&self, service: &str, env: &str, revision: &str) -> Option<RevisionStats>;

    /// Scale-up signals: a revision with no ready instance holds a request.
    fn subscribe_scale_up(&self) -> broadcast::Receiver<ScaleUp>;

    /// The table the data plane served when this handle was made, if it was already running:
    /// a controller starting up carries on from it rather than from nothing.
    fn serving(&self) -> Option<RouteTableConfig>;
}

impl DataPlane for Ingress {
    fn set_routes<'a>(&'a self, table: &'a RouteTableConfig) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move { Ingress::set_routes(self, table).map_err(|e| runway_log::chain(&e)) })
    }

    fn drain(&self, address: SocketAddr, grace: Duration) -> BoxFuture<'static, bool> {
        let ingress = self.clone();
        Box::pin(async move { ingress.drain(address, grace).await })
    }

    fn revision_stats(&self, service: &str, env: &str, revision: &str) -> Option<RevisionStats> {
        Ingress::revision_stats(self, service, env, revision)
    }

    fn subscribe_scale_up(&self) -> broadcast::Receiver<ScaleUp> {
        Ingress::subscribe_scale_up(self)
    }

    /// A new in-process ingress serves nothing yet.
    fn serving(&self) -> Option<RouteTableConfig> {
        None
    }
}

impl DataPlane for RemoteIngress {
    fn set_routes<'a>(&'a self, table: &'a RouteTableConfig) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            RemoteIngress::set_routes(self, table)
                .await
                .map_err(|e| runway_log::chain(&e))
        })
    }

    fn drain(&self, address: SocketAddr, grace: Duration) -> BoxFuture<'static, bool> {
        let remote = self.clone();
        Box::pin(async move {
            match RemoteIngress::drain(&remote, address, grace).await {
                Ok(idle) => idle,
                Err(error) => {
                    tracing::warn!(
                        %address,
                        error = runway_log::chain(&error),
                        "drain at the ingress failed"
                    );
                    false
                }
            }
        })
    }

    fn revision_stats(&self, service: &str, env: &str, revision: &str) -> Option<RevisionStats> {
        RemoteIngress::revision_stats(self, service, env, revision)
    }

    fn subscribe_scale_up(&self) -> broadcast::Receiver<ScaleUp> {
        RemoteIngress::subscribe_scale_up(self)
    }

    fn serving(&self) -> Option<RouteTableConfig> {
        Some(self.hello().table.clone())
    }
}

impl DataPlane for IngressFleet {
    fn set_routes<'a>(&'a self, table: &'a RouteTableConfig) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(IngressFleet::set_routes(self, table))
    }

    fn drain(&self, address: SocketAddr, grace: Duration) -> BoxFuture<'static, bool> {
        let fleet = self.clone();
        Box::pin(async move { fleet.drain(address, grace).await })
    }

    fn revision_stats(&self, service: &str, env: &str, revision: &str) -> Option<RevisionStats> {
        IngressFleet::revision_stats(self, service, env, revision)
    }

    fn subscribe_scale_up(&self) -> broadcast::Receiver<ScaleUp> {
        IngressFleet::subscribe_scale_up(self)
    }

    fn serving(&self) -> Option<RouteTableConfig> {
        IngressFleet::serving(self)
    }
}
