//! How the controller names a service in one environment, everywhere it keeps or publishes
//! something of one.

/// A service in an environment: its name and the environment's.
pub(crate) type Key = (String, String);

/// The service and environment a deployment is of.
pub(crate) fn key_of(deployment: &runway_store::Deployment) -> Key {
    (deployment.service.clone(), deployment.env.clone())
}
