//! Deployment events, written by one small task in the order they happened. A pass adds its
//! events and goes on; the writer takes them off the queue oldest first. When the store
//! refuses one (a full disk) it and every newer one wait, in memory and bounded, and go in
//! order once the store has room, each saying when it happened. A deployment's end is written
//! only after the events before it (see [`Events::write`]), so its story keeps its order.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use runway_store::{Store, StoreError, Timestamp};
use tokio::sync::Notify;

use crate::ACTOR;
use crate::error::{ControlError, Result};

/// At most this many events wait (the oldest go first past it): a disk full for long must not
/// fill the memory too.
const MAX_WAITING: usize = 10_000;

/// How soon the writer tries again after the store refused an event.
const RETRY: Duration = Duration::from_secs(1);

/// An event not yet written, with when it happened.
#[derive(Debug, Clone)]
struct Waiting {
    deployment: i64,
    message: String,
    at_ms: i64,
}

/// The queue of deployment events and its writer.
pub(crate) struct Events {
    store: Arc<dyn Store>,
    queue: Mutex<VecDeque<Waiting>>,
    /// Wakes the writer's task when an event is added.
    added: Notify,
    /// Held while the queue's front is written: two writers of one front would write it twice.
    writing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("waiting", &self.lock().len())
            .finish_non_exhaustive()
    }
}

impl Events {
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            queue: Mutex::default(),
            added: Notify::new(),
            writing: tokio::sync::Mutex::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Waiting>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds an event of `deployment`, after those still waiting, and wakes the writer.
    pub(crate) fn add(&self, deployment: i64, message: String) {
        let mut queue = self.lock();
        if queue.len() >= MAX_WAITING {
            queue.pop_front();
        }
        queue.push_back(Waiting {
            deployment,
            message,
            at_ms: Timestamp::now().unix_millis(),
        });
        drop(queue);
        self.added.notify_one();
    }

    /// Writes the waiting events, oldest first, until the store refuses one; that one and
    /// those after it wait. One written late says when it happened.
    pub(crate) async fn write(&self) -> Result<()> {
        let _writing = self.writing.lock().await;
        loop {
            let Some(next) = self.lock().front().cloned() else {
                return Ok(());
            };
            let now = Timestamp::now().unix_millis();
            let text = if now - next.at_ms > 1_000 {
                let at = Timestamp::from_unix_millis(next.at_ms)
                    .map(|t| t.to_string())
                    .unwrap_or_default();
                format!(
                    "{} (at {at}; written late, the store could not take it then)",
                    next.message
                )
            } else {
                next.message.clone()
            };
            let id = next.deployment;
            let store = Arc::clone(&self.store);
            let added =
                tokio::task::spawn_blocking(move || store.deployment_add_event(ACTOR, id, &text))
                    .await
                    .map_err(|error| ControlError::Task(error.to_string()))?;
            match added {
                // Written, or its deployment is gone (decommissioned): either way done.
                Ok(_) | Err(StoreError::NotFound { .. }) => {
                    self.lock().pop_front();
                }
                Err(source) => {
                    // A full disk, or a store that fails: everything waits for it. Refused
                    // for good: dropped, so it holds none back.
                    let waits = matches!(
                        source,
                        StoreError::Full
                            | StoreError::Sqlite(_)
                            | StoreError::Postgres(_)
                            | StoreError::Unavailable(_)
                    );
                    if !waits {
                        self.lock().pop_front();
                    }
                    let what = format!("add an event to deployment {id}");
                    return Err(ControlError::store(what, source));
                }
            }
        }
    }

    /// The writer's task: writes as events are added, and every [`RETRY`] while the store
    /// refuses them; a lasting refusal is logged once.
    pub(crate) async fn run(&self) {
        let mut printed: Option<String> = None;
        loop {
            match self.write().await {
                Ok(()) => {
                    printed = None;
                    self.added.notified().await;
                }
                Err(error) => {
                    let text = runway_log::chain(&error);
                    if printed.as_ref() != Some(&text) {
                        tracing::error!(error = text, "deployment events");
                        printed = Some(text);
                    }
                    // Not sooner on a new event: each would be one more refused write.
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }
}
