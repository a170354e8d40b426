//! Container logs, kept per container instance (its `containerID`), and the pod `log`
//! subresource, which picks the instance as the kubelet does: the running one, else the
//! last terminated; with `previous`, the last terminated.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::api::{ApiError, Call};
use crate::http::Reply;
use crate::resources::PODS;
use crate::store::Key;
use crate::{Shared, util};

#[derive(Debug, Default)]
struct Stream {
    lines: Vec<(SystemTime, String)>,
    /// The container instance has stopped: a followed log ends after its last line.
    ended: bool,
}

/// Every container instance's output.
#[derive(Debug, Default)]
pub(crate) struct Logs {
    written: u64,
    streams: HashMap<String, Stream>,
    by_pod: HashMap<String, Vec<String>>,
}

impl Logs {
    /// How many lines were ever written (a change means there is more to follow).
    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// A new container instance of the pod with this uid.
    pub(crate) fn open(&mut self, pod_uid: &str, container_id: &str) {
        self.streams
            .insert(container_id.to_owned(), Stream::default());
        self.by_pod
            .entry(pod_uid.to_owned())
            .or_default()
            .push(container_id.to_owned());
        self.written += 1;
    }

    pub(crate) fn write(&mut self, container_id: &str, line: &str) {
        if let Some(s) = self.streams.get_mut(container_id)
            && !s.ended
        {
            s.lines.push((SystemTime::now(), line.to_owned()));
            self.written += 1;
        }
    }

    /// The container instance stopped.
    pub(crate) fn end(&mut self, container_id: &str) {
        if let Some(s) = self.streams.get_mut(container_id) {
            s.ended = true;
            self.written += 1;
        }
    }

    /// The pod is gone, and its logs with it.
    pub(crate) fn remove_pod(&mut self, pod_uid: &str) {
        for id in self.by_pod.remove(pod_uid).unwrap_or_default() {
            self.streams.remove(&id);
        }
        self.written += 1;
    }

    /// Lines from `from` on, and whether the instance has stopped; None once it is gone.
    fn since(&self, container_id: &str, from: usize) -> Option<(Vec<(SystemTime, String)>, bool)> {
        let s = self.streams.get(container_id)?;
        Some((s.lines.get(from..).unwrap_or(&[]).to_vec(), s.ended))
    }
}

/// The options of a log request.
struct Options {
    follow: bool,
    timestamps: bool,
    tail: Option<usize>,
    since: Option<SystemTime>,
    limit_bytes: Option<usize>,
}

fn format_line(opts: &Options, t: SystemTime, line: &str) -> String {
    if opts.timestamps {
        format!("{} {line}\n", util::rfc3339_nanos(t))
    } else {
        format!("{line}\n")
    }
}

/// The container instance whose log a request reads, as the kubelet chooses it.
fn choose(
    pod: &Value,
    name: &str,
    container: Option<&str>,
    previous: bool,
) -> Result<String, ApiError> {
    if pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let names: Vec<&str> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .collect();
    let container = match container {
        Some(c) if !c.is_empty() => {
            if !names.contains(&c) {
                return Err(ApiError::bad_request(format!(
                    "container {c} is not valid for pod {name}"
                )));
            }
            c
        }
        _ => match names.as_slice() {
            [one] => *one,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    names.join(" ")
                )));
            }
        },
    };
    let status = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|s| s.get("name").and_then(Value::as_str) == Some(container));
    let id_at = |p: &str| {
        status
            .and_then(|s| s.pointer(p))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let last = id_at("/lastState/terminated/containerID");
    if previous {
        return last.ok_or_else(|| {
            ApiError::bad_request(format!(
                "previous terminated container {container:?} in pod {name:?} not found"
            ))
        });
    }
    let running = status.is_some_and(|s| s.pointer("/state/running").is_some());
    let current = if running {
        id_at("/containerID")
    } else {
        id_at("/state/terminated/containerID")
    };
    if let Some(id) = current.or(last) {
        return Ok(id);
    }
    let waiting = status
        .and_then(|s| s.pointer("/state/waiting/reason"))
        .and_then(Value::as_str);
    let why = match waiting {
        Some("ErrImagePull") => "image can't be pulled".to_owned(),
        Some("ImagePullBackOff") => "trying and failing to pull image".to_owned(),
        Some(reason) => reason.to_owned(),
        None => "ContainerCreating".to_owned(),
    };
    Err(ApiError::bad_request(format!(
        "container {container:?} in pod {name:?} is waiting to start: {why}"
    )))
}

pub(crate) fn handle(shared: &Arc<Shared>, call: &Call<'_>, name: &str) -> Reply {
    let q = call.query;
    let opts = Options {
        follow: q.flag("follow"),
        timestamps: q.flag("timestamps"),
        tail: q.get("tailLines").and_then(|t| t.parse().ok()),
        since: q
            .get("sinceSeconds")
            .and_then(|s| s.parse::<u64>().ok())
            .map(|s| SystemTime::now() - Duration::from_secs(s))
            .or_else(|| q.get("sinceTime").and_then(util::parse_rfc3339)),
        limit_bytes: q.get("limitBytes").and_then(|b| b.parse().ok()),
    };
    let chosen = shared.with(|w| {
        let pod = w
            .store
            .get(&Key::new(PODS, call.ns(), name))
            .ok_or_else(|| ApiError::not_found(PODS, name))?;
        let id = choose(pod, name, q.get("container"), q.flag("previous"))?;
        let (lines, ended) = w.logs.since(&id, 0).unwrap_or_default();
        Ok::<_, ApiError>((id, lines, ended))
    });
    let (id, lines, ended) = match chosen {
        Ok(c) => c,
        Err(e) => return e.reply(),
    };
    let total = lines.len();
    let mut selected: Vec<&(SystemTime, String)> = lines
        .iter()
        .filter(|(t, _)| opts.since.is_none_or(|s| *t >= s))
        .collect();
    if let Some(n) = opts.tail {
        let skip = selected.len().saturating_sub(n);
        selected.drain(..skip);
    }
    let mut text: String = selected
        .iter()
        .map(|(t, l)| format_line(&opts, *t, l))
        .collect();
    if let Some(limit) = opts.limit_bytes
        && text.len() > limit
    {
        let mut cut = limit;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    if !opts.follow || q.flag("previous") {
        return Reply::Text(200, text);
    }
    let (tx, rx) = mpsc::channel(64);
    let task_shared = Arc::clone(shared);
    shared.spawn(async move {
        let mut sent = text.len();
        if !text.is_empty() && tx.send(Bytes::from(text)).await.is_err() {
            return;
        }
        if ended {
            return;
        }
        let mut logged = task_shared.logged.subscribe();
        let mut epoch = task_shared.watch_epoch.subscribe();
        let mut shutdown = task_shared.shutdown.subscribe();
        let mut from = total;
        loop {
            let next = task_shared.with(|w| w.logs.since(&id, from));
            let Some((lines, ended)) = next else {
                return;
            };
            from += lines.len();
            let mut chunk: String = lines
                .iter()
                .map(|(t, l)| format_line(&opts, *t, l))
                .collect();
            if let Some(limit) = opts.limit_bytes {
                let room = limit.saturating_sub(sent);
                if chunk.len() > room {
                    let mut cut = room;
                    while !chunk.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    chunk.truncate(cut);
                }
            }
            sent += chunk.len();
            if !chunk.is_empty() && tx.send(Bytes::from(chunk)).await.is_err() {
                return;
            }
            if ended || opts.limit_bytes.is_some_and(|l| sent >= l) {
                return;
            }
            tokio::select! {
                _ = logged.changed() => {}
                _ = tx.closed() => return,
                _ = epoch.changed() => return,
                _ = shutdown.changed() => return,
            }
        }
    });
    Reply::Stream {
        content_type: "text/plain",
        rx,
    }
}
