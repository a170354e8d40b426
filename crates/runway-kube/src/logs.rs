//! Replicas' output from the pod log API: the last lines, and lines as they are written.

use std::collections::HashSet;

use futures_util::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::LogParams;
use runway_driver::{DriverError, LogLine, Stream};
use tokio::sync::mpsc;

/// A pod whose log is read: its replica id, the pod's name and its service's container (named,
/// so a pod with sidecars is read too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Source {
    pub(crate) id: String,
    pub(crate) pod: String,
    pub(crate) container: String,
}

/// The last `n` lines of these pods' output together, oldest first. Kubernetes keeps a
/// container's stdout and stderr as one log, so every line is reported as stdout.
pub(crate) async fn tail(
    api: &Api<Pod>,
    pods: &[Source],
    n: usize,
    previous: bool,
) -> Result<Vec<LogLine>, DriverError> {
    let mut all = Vec::new();
    for source in pods {
        let params = LogParams {
            container: Some(source.container.clone()),
            tail_lines: Some(i64::try_from(n).unwrap_or(i64::MAX)),
            timestamps: true,
            // The container's run before its last restart, as the kubelet keeps it.
            previous,
            ..LogParams::default()
        };
        match api.logs(&source.pod, &params).await {
            Ok(text) => all.extend(text.lines().filter_map(|line| parse(&source.id, line))),
            // Gone meanwhile, not started yet (a pending pod has no log), or never restarted
            // (no previous run): nothing to show.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 400 => {}
            Err(error) => {
                return Err(DriverError::Failed(format!(
                    "the output of {} (pod {}): {error}",
                    source.id, source.pod
                )));
            }
        }
    }
    all.sort_by(|a, b| a.time.cmp(&b.time));
    let skip = all.len().saturating_sub(n);
    Ok(all.split_off(skip))
}

/// One line of a log read with `timestamps=true`: `<RFC 3339 time> <text>`.
fn parse(replica: &str, line: &str) -> Option<LogLine> {
    let (time, text) = line.split_once(' ').unwrap_or((line, ""));
    Some(LogLine {
        replica: replica.to_owned(),
        time: normalize_time(time)?,
        stream: Stream::Stdout,
        text: text.to_owned(),
    })
}

/// An RFC 3339 time as the seam writes it: UTC with nine fraction digits, so times sort as
/// text (the API trims trailing zeros).
pub fn normalize_time(time: &str) -> Option<String> {
    let parsed: k8s_openapi::jiff::Timestamp = time.parse().ok()?;
    Some(format!("{parsed:.9}"))
}

/// The pods being followed, each in a task of its own, into one channel.
pub(crate) struct Followed {
    api: Api<Pod>,
    sender: mpsc::Sender<LogLine>,
    pods: HashSet<String>,
}

impl Followed {
    pub(crate) fn new(api: Api<Pod>, sender: mpsc::Sender<LogLine>) -> Self {
        Self {
            api,
            sender,
            pods: HashSet::new(),
        }
    }

    pub(crate) fn closed(&self) -> bool {
        self.sender.is_closed()
    }

    pub(crate) async fn wait_closed(&self) {
        self.sender.closed().await;
    }

    /// Follows the pod's log unless it is followed already: from its start for a pod that
    /// appeared since the first lines were read (a rollout), else from now. A followed log ends
    /// when its container does; the next run's is followed on, until the pod is gone.
    pub(crate) fn follow(&mut self, source: &Source, from_start: bool) {
        if !self.pods.insert(source.pod.clone()) {
            return;
        }
        let (api, sender, source) = (self.api.clone(), self.sender.clone(), source.clone());
        tokio::spawn(async move {
            let mut last: Option<String> = None;
            let mut failures = 0;
            loop {
                let params = LogParams {
                    container: Some(source.container.clone()),
                    follow: true,
                    timestamps: true,
                    tail_lines: (!from_start && last.is_none()).then_some(0),
                    // A run after the first: from the last line seen (the API's bound is
                    // inclusive, so that line is skipped below).
                    since_time: last
                        .as_deref()
                        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok()),
                    ..LogParams::default()
                };
                match api.log_stream(&source.pod, &params).await {
                    Ok(stream) => {
                        failures = 0;
                        let mut lines = std::pin::pin!(stream.lines());
                        while let Some(Ok(line)) = lines.next().await {
                            let Some(line) = parse(&source.id, &line) else {
                                continue;
                            };
                            if last.as_ref().is_some_and(|seen| line.time <= *seen) {
                                continue;
                            }
                            last = Some(line.time.clone());
                            if sender.send(line).await.is_err() {
                                return;
                            }
                        }
                        if last.is_none() {
                            last = Some(format!("{:.9}", k8s_openapi::jiff::Timestamp::now()));
                        }
                    }
                    Err(kube::Error::Api(status)) if status.code == 404 => return,
                    // A pod not started yet has no log: tried again while it starts.
                    Err(_) => {
                        failures += 1;
                        if failures > 60 {
                            return;
                        }
                    }
                }
                if sender.is_closed() {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_sort_as_text_whatever_their_precision() {
        assert_eq!(
            normalize_time("2026-11-24T05:00:00.12Z").as_deref(),
            Some("2026-11-24T05:00:00.120000000Z")
        );
        assert_eq!(
            normalize_time("2026-11-24T05:00:01Z").as_deref(),
            Some("2026-11-24T05:00:01.000000000Z")
        );
        assert_eq!(normalize_time("yesterday"), None);
        let line = parse(
            "hello-dev-00001-abcdef",
            "2026-11-24T05:00:00Z listening on :8080",
        );
        assert_eq!(line.map(|l| l.text).as_deref(), Some("listening on :8080"));
    }
}
