//! The crate's one error type. Messages are for the people who run Runway; none holds a
//! secret's value.

use runway_driver::DriverError;
use runway_store::StoreError;

/// What can go wrong while reconciling or answering the API.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The store refused or failed: what was being done; the store's error is the source.
    #[error("store: {what}")]
    Store {
        /// What was being done.
        what: String,
        #[source]
        source: StoreError,
    },
    /// The driver refused or failed: what was being done; the driver's error is the source.
    #[error("driver: {what}")]
    Driver {
        /// What was being done.
        what: String,
        #[source]
        source: DriverError,
    },
    /// An instance could not be started; the reason names the revision and never a value.
    #[error("cannot start an instance of {revision}: {reason}")]
    Start {
        /// The revision.
        revision: String,
        /// Why.
        reason: String,
    },
    /// The ingress refused the route table the controller built.
    #[error("the ingress refused the route table: {0}")]
    Ingress(String),
    /// The instance is not one of this service's in this environment.
    #[error("no instance {instance:?} of {service} in {env}")]
    NoInstance {
        /// The service.
        service: String,
        /// The environment.
        env: String,
        /// The instance asked for.
        instance: String,
    },
    /// A blocking store call could not be run.
    #[error("a store task failed: {0}")]
    Task(String),
}

impl ControlError {
    pub(crate) fn store(what: impl Into<String>, source: StoreError) -> Self {
        Self::Store {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn driver(what: impl Into<String>, source: DriverError) -> Self {
        Self::Driver {
            what: what.into(),
            source,
        }
    }
}

/// The crate's result.
pub type Result<T, E = ControlError> = std::result::Result<T, E>;
