//! Watches: newline-delimited JSON events on a chunked response, from the given resource
//! version on (history replayed), filtered by namespace and selectors as the real server does
//! (an object that stops matching is DELETED to the watcher, one that starts matching ADDED).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::api::{ApiError, Call, selectors};
use crate::http::{Reply, status};
use crate::resources::{self, ResId};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Change, EventType, namespace_of};
use crate::{Shared, World};

/// How often an idle watch that allows bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(5);

/// The real server's default when a client gives no `timeoutSeconds` (it picks 30–60 min).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

struct Filter {
    res: ResId,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| namespace_of(obj) == ns)
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }

    /// The event a change is to this watch, if any.
    fn event(&self, c: &Change) -> Option<(EventType, Value)> {
        if c.res != self.res {
            return None;
        }
        let now = self.matches(&c.new);
        match c.kind {
            EventType::Added => now.then(|| (EventType::Added, c.new.clone())),
            EventType::Deleted => now.then(|| (EventType::Deleted, c.new.clone())),
            EventType::Modified => {
                let before = c.old.as_ref().is_some_and(|o| self.matches(o));
                match (before, now) {
                    (true, true) => Some((EventType::Modified, c.new.clone())),
                    (false, true) => Some((EventType::Added, c.new.clone())),
                    (true, false) => Some((EventType::Deleted, c.new.clone())),
                    (false, false) => None,
                }
            }
        }
    }
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": kind, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

fn bookmark(res: ResId, rv: u64, initial_end: bool) -> Bytes {
    let r = resources::get(res);
    let mut meta = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": r.kind, "apiVersion": r.api_version(), "metadata": meta}),
    )
}

/// Where a watch starts.
enum Start {
    /// Replay the changes after this version.
    After(u64),
    /// Too old: one ERROR event with 410 Expired.
    Expired(u64, u64),
    /// ADDED events for the current state, then the changes after this version.
    State(Vec<Value>, u64),
}

pub(crate) fn start(shared: &Arc<Shared>, call: &Call<'_>) -> Reply {
    let (labels, fields) = match selectors(call) {
        Ok(s) => s,
        Err(e) => return e.reply(),
    };
    let rv = call.query.get("resourceVersion").unwrap_or("");
    let from: Option<u64> = match rv {
        "" | "0" => None,
        other => match other.parse() {
            Ok(n) => Some(n),
            Err(_) => {
                return ApiError::bad_request(format!("invalid resource version {other:?}"))
                    .reply();
            }
        },
    };
    let filter = Filter {
        res: call.res,
        namespace: call.namespace.map(str::to_owned),
        labels,
        fields,
    };
    let send_initial = call.query.flag("sendInitialEvents");
    let bookmarks = call.query.flag("allowWatchBookmarks");
    let timeout = call
        .query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
    let begin = shared.with(|w: &mut World| match from {
        Some(n) if !send_initial => {
            if w.store.expired(n) {
                Start::Expired(n, w.store.compacted())
            } else {
                Start::After(n)
            }
        }
        _ => Start::State(
            w.store
                .list(filter.res, filter.namespace.as_deref())
                .filter(|o| filter.matches(o))
                .cloned()
                .collect(),
            w.store.rv(),
        ),
    });
    let (tx, rx) = mpsc::channel(256);
    let task_shared = Arc::clone(shared);
    shared.spawn(async move {
        let _ = stream(
            task_shared,
            filter,
            begin,
            send_initial,
            bookmarks,
            timeout,
            tx,
        )
        .await;
    });
    Reply::Stream {
        content_type: "application/json",
        rx,
    }
}

/// Feeds one watch until it times out, the client goes, or the server ends watches.
async fn stream(
    shared: Arc<Shared>,
    filter: Filter,
    begin: Start,
    send_initial: bool,
    bookmarks: bool,
    timeout: Duration,
    tx: mpsc::Sender<Bytes>,
) -> Result<(), mpsc::error::SendError<Bytes>> {
    let mut changed = shared.changed.subscribe();
    let mut epoch = shared.watch_epoch.subscribe();
    let mut shutdown = shared.shutdown.subscribe();
    let deadline = Instant::now() + timeout;
    let mut last = match begin {
        Start::Expired(n, compacted) => {
            let message = format!("too old resource version: {n} ({compacted})");
            tx.send(line("ERROR", &status(410, "Expired", &message, None)))
                .await?;
            return Ok(());
        }
        Start::After(n) => n,
        Start::State(objects, rv) => {
            for o in &objects {
                tx.send(line("ADDED", o)).await?;
            }
            if send_initial {
                tx.send(bookmark(filter.res, rv, true)).await?;
            }
            rv
        }
    };
    let mut next_bookmark = Instant::now() + BOOKMARK_EVERY;
    loop {
        let (events, rv) = shared.with(|w| {
            let events: Vec<(EventType, Value)> = w
                .store
                .changes_after(last)
                .iter()
                .filter_map(|c| filter.event(c))
                .collect();
            (events, w.store.rv())
        });
        for (kind, obj) in &events {
            tx.send(line(kind.as_str(), obj)).await?;
        }
        last = rv;
        tokio::select! {
            _ = changed.changed() => {}
            _ = tokio::time::sleep_until(next_bookmark) => {
                if bookmarks {
                    tx.send(bookmark(filter.res, last, false)).await?;
                }
                next_bookmark = Instant::now() + BOOKMARK_EVERY;
            }
            _ = tokio::time::sleep_until(deadline) => {
                if bookmarks {
                    tx.send(bookmark(filter.res, last, false)).await?;
                }
                return Ok(());
            }
            _ = epoch.changed() => return Ok(()),
            _ = shutdown.changed() => return Ok(()),
            _ = tx.closed() => return Ok(()),
        }
    }
}
