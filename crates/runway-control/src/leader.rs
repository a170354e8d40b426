//! Which of several control-plane replicas on one store leads: the holder of a lease in the
//! store ([`runway_store::Store::lease_acquire`]), taken and renewed by an [`Election`] every
//! third of the lease's length, and given up at shutdown so that another takes over at once.
//!
//! The leader alone acts. Its controller's store handle is fenced by the lease's token
//! ([`runway_store::Store::fenced`], with [`Election::fence_cell`]): once another replica
//! holds the lease, none of its writes lands. What it does outside the store (a driver's
//! starts and stops, the ingress's tables and drains) cannot be fenced by the store, so it
//! acts only while [`Leadership::may_act`]: before its own deadline, the time it asked for the
//! lease plus the lease's length, less a fifth, read on this machine's monotonic clock. A
//! leader paused (a GC, SIGSTOP, a lost network) past its lease finds that deadline gone the
//! moment it runs again, before its next renewal says so, and does nothing more.
//!
//! The election publishes [`Leadership`] on a `watch`. A controller given it
//! ([`Controller::leadership`](crate::Controller::leadership)) only observes while it does not
//! lead: each service's instances from the driver and the weights the data plane serves, for
//! the API, with nothing written or sent. When it comes to lead, it starts as a new controller
//! would, from the table the data plane serves. The ACME issuer
//! ([`Issuer::leadership`](crate::acme::Issuer::leadership)) orders only while it leads.

use std::sync::Arc;
use std::time::Duration;

use runway_store::{Fence, FenceCell, Store, StoreError};
use tokio::sync::watch;
use tokio::time::Instant;

/// The control plane's lease.
pub const LEASE: &str = "control-plane";

/// Where a replica stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leadership {
    /// Another leads (`leader`, when known), or nobody yet.
    Following { leader: Option<String> },
    /// This replica leads, with `fence` for its writes, until `deadline` unless renewed.
    Leading { fence: Fence, deadline: Instant },
}

impl Leadership {
    /// Whether this replica may act now: it leads, and its deadline has not passed.
    pub fn may_act(&self) -> bool {
        matches!(self, Self::Leading { deadline, .. } if Instant::now() < *deadline)
    }

    /// The fence of a leader's writes.
    pub fn fence(&self) -> Option<&Fence> {
        match self {
            Self::Leading { fence, .. } => Some(fence),
            Self::Following { .. } => None,
        }
    }
}

/// Takes and keeps the control plane's lease for one replica.
#[derive(Debug, Clone)]
pub struct Election {
    store: Arc<dyn Store>,
    replica: String,
    ttl: Duration,
    cell: FenceCell,
}

impl Election {
    /// `replica` names this replica (unique among them); `ttl` is the lease's length: how
    /// long the others wait for a leader that stopped renewing.
    pub fn new(store: Arc<dyn Store>, replica: impl Into<String>, ttl: Duration) -> Self {
        Self {
            store,
            replica: replica.into(),
            ttl,
            cell: FenceCell::default(),
        }
    }

    /// The fence [`Election::run`] keeps current: this replica's while it leads, none
    /// otherwise. A store handle fenced with it ([`Store::fenced`]) writes only while this
    /// replica leads.
    pub fn fence_cell(&self) -> FenceCell {
        self.cell.clone()
    }

    /// The margin kept before the lease's end: a leader stops acting this long before the
    /// others may take over.
    fn margin(&self) -> Duration {
        self.ttl / 5
    }

    /// One attempt: takes or renews the lease, or learns who holds it. A store that cannot
    /// be reached leaves a leader leading until its deadline, no further.
    pub async fn attempt(&self, now: &Leadership) -> Leadership {
        let asked = Instant::now();
        let (store, replica, ttl) = (Arc::clone(&self.store), self.replica.clone(), self.ttl);
        let taken = tokio::task::spawn_blocking(move || {
            let taken = store.lease_acquire(LEASE, &replica, ttl)?;
            match taken {
                Some(lease) => Ok(Ok(lease)),
                None => Ok(Err(store.lease_get(LEASE)?.map(|lease| lease.holder))),
            }
        })
        .await;
        match taken {
            Ok(Ok(Ok(lease))) => Leadership::Leading {
                fence: Fence {
                    lease: LEASE.to_owned(),
                    holder: lease.holder,
                    token: lease.token,
                },
                deadline: asked + self.ttl.saturating_sub(self.margin()),
            },
            Ok(Ok(Err(leader))) => Leadership::Following { leader },
            Ok(Err(error)) => {
                let error: StoreError = error;
                tracing::warn!(
                    error = runway_log::chain(&error),
                    "cannot reach the store for the lease"
                );
                now.clone()
            }
            Err(error) => {
                tracing::warn!(%error, "the lease's attempt failed");
                now.clone()
            }
        }
    }

    /// Takes and renews the lease every third of its length until `shutdown`, publishing each
    /// change on `sender`; at shutdown a leader gives the lease up, so another takes over at
    /// once rather than after the lease runs out.
    pub async fn run(
        self,
        sender: watch::Sender<Leadership>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let every = (self.ttl / 3).max(Duration::from_millis(10));
        loop {
            let now = sender.borrow().clone();
            let next = self.attempt(&now).await;
            let changed = match (&now, &next) {
                (Leadership::Following { leader: a }, Leadership::Following { leader: b }) => {
                    a != b
                }
                _ => now.fence() != next.fence(),
            };
            if changed {
                match &next {
                    Leadership::Leading { fence, .. } => {
                        tracing::info!(token = fence.token, "this replica leads");
                    }
                    Leadership::Following {
                        leader: Some(leader),
                    } => {
                        tracing::info!(%leader, "another replica leads; this replica follows");
                    }
                    Leadership::Following { leader: None } => {}
                }
            }
            self.cell.set(next.fence().cloned());
            sender.send_replace(next);
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(every) => {}
            }
        }
        self.cell.set(None);
        let last = sender.send_replace(Leadership::Following { leader: None });
        if let Some(fence) = last.fence().cloned() {
            let store = Arc::clone(&self.store);
            let released = tokio::task::spawn_blocking(move || {
                store.lease_release(&fence.lease, &fence.holder, fence.token)
            })
            .await;
            if !matches!(released, Ok(Ok(()))) {
                tracing::warn!("could not give up the lease; it runs out by itself");
            }
        }
    }
}
