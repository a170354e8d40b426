//! The audit trail exported: `audit.export`, a list of sinks (a file, syslog, an HTTPS
//! webhook), each fed the audit log as JSON lines, at least once, by a task of its own while
//! this replica leads.
//!
//! # At least once
//!
//! The store is the queue. Each sink has a cursor in the store (`audit_export`: the last entry
//! it acknowledged); its task reads the entries after it, sends them a batch at a time, and
//! moves the cursor only once the sink acknowledged the batch (the file written and fsynced, a
//! webhook's 2xx, a syslog message written to its socket). A failure is retried with capped
//! exponential backoff, for ever; a restart, or another replica taking the lead, resends at most
//! the batch that was not acknowledged. So a receiver may see an entry twice, never miss one:
//! an entry's `id` (and its `hash`) tell repeats apart.
//!
//! # What "dropped" means here
//!
//! Runway never deletes audit entries, so nothing is lost while a sink is down. What is
//! bounded is memory: each sink holds at most `buffer` entries read ahead of its cursor. When a
//! sink falls further behind than that, the entries that do not fit are dropped from memory,
//! not from the store: they are read again once the sink catches up. Runway says so, naming the
//! sink and how far behind it is: a warning in the log, `runway_audit_export_dropped_total`
//! (entries that did not fit, each counted once) and `runway_audit_export_lag`, and `runway
//! audit export` (each sink's cursor, lag and last failure).
//!
//! Syslog over UDP cannot acknowledge: a datagram sent counts as delivered. Use TCP (or the
//! local socket) where that matters.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use runway_api::audit::AuditExport;
use runway_control::leader::Leadership;
use runway_store::{AuditEntry, Store, StoreError};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

/// `audit`: the audit trail's export.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Where the audit log goes as JSON lines, each sink at least once.
    pub export: Vec<AuditSinkConfig>,
}

/// `audit.export[]`: one sink. Exactly one of `file`, `syslog` and `webhook`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditSinkConfig {
    /// The sink's name: its cursor in the store is kept under it (renamed, a sink starts from
    /// the first entry again).
    pub name: String,
    /// Append to a file, fsynced after each batch.
    #[serde(default)]
    pub file: Option<FileSink>,
    /// RFC 5424 messages to a syslog daemon, the entry's JSON as the message.
    #[serde(default)]
    pub syslog: Option<SyslogSink>,
    /// POST batches to an HTTPS endpoint (`application/x-ndjson`); a 2xx acknowledges.
    #[serde(default)]
    pub webhook: Option<WebhookSink>,
    /// Entries per send: per POST, per fsync.
    #[serde(default = "default_batch")]
    pub batch: usize,
    /// Entries held in memory ahead of the cursor; the rest wait in the store.
    #[serde(default = "default_buffer")]
    pub buffer: usize,
    /// How often the store is read for new entries.
    #[serde(default = "default_poll_ms")]
    pub poll_ms: u64,
    /// The first wait after a failure, doubled after each one in a row...
    #[serde(default = "default_retry_min_ms")]
    pub retry_min_ms: u64,
    /// ...up to this.
    #[serde(default = "default_retry_max_ms")]
    pub retry_max_ms: u64,
    /// The bound on one send (a POST, a syslog connection and its writes).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_batch() -> usize {
    100
}
fn default_buffer() -> usize {
    10_000
}
fn default_poll_ms() -> u64 {
    1_000
}
fn default_retry_min_ms() -> u64 {
    500
}
fn default_retry_max_ms() -> u64 {
    30_000
}
fn default_timeout_ms() -> u64 {
    10_000
}

/// `audit.export[].file`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSink {
    /// An absolute path; created `0600` if missing, opened again for each batch (so a
    /// rotated file is followed).
    pub path: PathBuf,
}

/// `audit.export[].syslog`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyslogSink {
    /// `udp://host:port`, `tcp://host:port` (RFC 6587 octet counting) or `unix:///dev/log`
    /// (a datagram socket).
    pub address: String,
    /// The facility: `auth`, `authpriv` (the default), `daemon`, `user`, `local0`…`local7`.
    #[serde(default = "default_facility")]
    pub facility: String,
    /// The HOSTNAME field (default: this host's name).
    #[serde(default)]
    pub hostname: Option<String>,
    /// The APP-NAME field.
    #[serde(default = "default_app_name")]
    pub app_name: String,
}

fn default_facility() -> String {
    "authpriv".to_owned()
}
fn default_app_name() -> String {
    "runway".to_owned()
}

/// `audit.export[].webhook`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSink {
    /// An `https://` URL.
    pub url: String,
    /// The authority (PEM) the endpoint's certificate must come from; default: the system's.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Headers sent with each POST (`Authorization: Bearer …`); shown as `***`.
    #[serde(default, serialize_with = "hidden_values")]
    pub headers: BTreeMap<String, String>,
}

fn hidden_values<S: serde::Serializer>(
    headers: &BTreeMap<String, String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(headers.keys().map(|key| (key, "***")))
}

/// The facility's number (RFC 5424, 6.2.1).
fn facility(name: &str) -> Option<u8> {
    Some(match name {
        "kern" => 0,
        "user" => 1,
        "daemon" => 3,
        "auth" => 4,
        "syslog" => 5,
        "authpriv" => 10,
        "local0" => 16,
        "local1" => 17,
        "local2" => 18,
        "local3" => 19,
        "local4" => 20,
        "local5" => 21,
        "local6" => 22,
        "local7" => 23,
        _ => return None,
    })
}

/// Where a syslog sink sends.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SyslogAddress {
    Udp(String),
    Tcp(String),
    Unix(PathBuf),
}

fn syslog_address(address: &str) -> Result<SyslogAddress, String> {
    let host_port = |rest: &str| {
        if rest.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        }) {
            Ok(rest.to_owned())
        } else {
            Err(format!("`{address}` has no `host:port` after the scheme"))
        }
    };
    match address.split_once("://") {
        Some(("udp", rest)) => host_port(rest).map(SyslogAddress::Udp),
        Some(("tcp", rest)) => host_port(rest).map(SyslogAddress::Tcp),
        Some(("unix", path)) if path.starts_with('/') => Ok(SyslogAddress::Unix(path.into())),
        _ => Err(format!(
            "`{address}` is not a syslog address: expected udp://host:port, tcp://host:port \
             or unix:///dev/log"
        )),
    }
}

impl AuditConfig {
    /// Checks every sink: `Err((key, message))`, the key under `audit`.
    pub(crate) fn check(&self) -> Result<(), (String, String)> {
        let mut names = std::collections::BTreeSet::new();
        for (index, sink) in self.export.iter().enumerate() {
            let at = |key: &str| format!("export[{index}].{key}");
            let valid_name = !sink.name.is_empty()
                && sink.name.len() <= 64
                && sink
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !valid_name {
                return Err((
                    at("name"),
                    format!(
                        "{:?}: expected 1 to 64 letters, digits, `-` or `_`",
                        sink.name
                    ),
                ));
            }
            if !names.insert(sink.name.as_str()) {
                return Err((
                    at("name"),
                    format!("{:?} names another sink too", sink.name),
                ));
            }
            let kinds = [
                sink.file.is_some(),
                sink.syslog.is_some(),
                sink.webhook.is_some(),
            ];
            if kinds.iter().filter(|k| **k).count() != 1 {
                return Err((
                    format!("export[{index}]"),
                    "give exactly one of file, syslog and webhook".to_owned(),
                ));
            }
            if sink.batch == 0 {
                return Err((at("batch"), "must be at least 1".to_owned()));
            }
            if sink.buffer < sink.batch {
                return Err((
                    at("buffer"),
                    format!("{} is below batch ({})", sink.buffer, sink.batch),
                ));
            }
            for (key, value) in [
                ("poll_ms", sink.poll_ms),
                ("retry_min_ms", sink.retry_min_ms),
                ("timeout_ms", sink.timeout_ms),
            ] {
                if value == 0 {
                    return Err((at(key), "must be above 0".to_owned()));
                }
            }
            if sink.retry_max_ms < sink.retry_min_ms {
                return Err((at("retry_max_ms"), "is below retry_min_ms".to_owned()));
            }
            if let Some(file) = &sink.file
                && !file.path.is_absolute()
            {
                return Err((
                    at("file.path"),
                    format!("{} is not an absolute path", file.path.display()),
                ));
            }
            if let Some(syslog) = &sink.syslog {
                syslog_address(&syslog.address).map_err(|m| (at("syslog.address"), m))?;
                if facility(&syslog.facility).is_none() {
                    return Err((
                        at("syslog.facility"),
                        format!(
                            "{:?}: expected auth, authpriv, daemon, user, syslog, kern or \
                             local0 to local7",
                            syslog.facility
                        ),
                    ));
                }
            }
            if let Some(webhook) = &sink.webhook {
                let url: reqwest::Url = webhook
                    .url
                    .parse()
                    .map_err(|e| (at("webhook.url"), format!("`{}`: {e}", webhook.url)))?;
                if url.scheme() != "https" {
                    return Err((
                        at("webhook.url"),
                        format!(
                            "`{}` is not https://: the audit log leaves only over TLS",
                            url
                        ),
                    ));
                }
                for name in webhook.headers.keys() {
                    if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                        return Err((
                            at("webhook.headers"),
                            format!("{name:?} is not a header name"),
                        ));
                    }
                }
                if let Some(ca) = &webhook.ca_file {
                    std::fs::metadata(ca).map_err(|e| {
                        (
                            at("webhook.ca_file"),
                            format!("cannot read {}: {e}", ca.display()),
                        )
                    })?;
                }
            }
        }
        Ok(())
    }
}

/// What sends a batch to one sink.
enum Transport {
    File(PathBuf),
    Syslog {
        address: SyslogAddress,
        priority: u8,
        hostname: String,
        app_name: String,
        tcp: Option<tokio::net::TcpStream>,
    },
    Webhook {
        client: reqwest::Client,
        url: reqwest::Url,
        headers: reqwest::header::HeaderMap,
    },
}

impl Transport {
    fn new(sink: &AuditSinkConfig) -> anyhow::Result<Self> {
        let at = |key: &str| format!("audit.export[{}].{key}", sink.name);
        if let Some(file) = &sink.file {
            return Ok(Self::File(file.path.clone()));
        }
        if let Some(syslog) = &sink.syslog {
            let address = syslog_address(&syslog.address).map_err(anyhow::Error::msg)?;
            // Notice (5): something an auditor reads.
            let priority = facility(&syslog.facility).unwrap_or(10) * 8 + 5;
            let hostname = syslog.hostname.clone().unwrap_or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|name| name.trim().to_owned())
                    .ok()
                    .filter(|name| !name.is_empty())
                    .unwrap_or_else(|| "-".to_owned())
            });
            return Ok(Self::Syslog {
                address,
                priority,
                hostname,
                app_name: syslog.app_name.clone(),
                tcp: None,
            });
        }
        let Some(webhook) = &sink.webhook else {
            bail!("{}: no file, syslog or webhook", at("name"));
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .timeout(Duration::from_millis(sink.timeout_ms))
            .user_agent(concat!("runway/", env!("CARGO_PKG_VERSION")))
            // A redirect would carry the audit log (and the headers) elsewhere.
            .redirect(reqwest::redirect::Policy::none());
        if let Some(ca) = &webhook.ca_file {
            let pem = std::fs::read(ca).with_context(|| {
                format!("{}: cannot read {}", at("webhook.ca_file"), ca.display())
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("{}: {}", at("webhook.ca_file"), ca.display()))?;
            if certs.is_empty() {
                bail!(
                    "{}: {} holds no PEM certificate",
                    at("webhook.ca_file"),
                    ca.display()
                );
            }
            builder = builder.tls_certs_only(certs);
        }
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &webhook.headers {
            headers.insert(
                reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .with_context(|| format!("{}: {name:?}", at("webhook.headers")))?,
                reqwest::header::HeaderValue::from_str(value).with_context(|| {
                    format!(
                        "{}: the value of {name} is not a header's",
                        at("webhook.headers")
                    )
                })?,
            );
        }
        Ok(Self::Webhook {
            client: builder
                .build()
                .with_context(|| format!("{}: cannot set up HTTPS", at("webhook")))?,
            url: webhook
                .url
                .parse()
                .with_context(|| format!("{}: `{}`", at("webhook.url"), webhook.url))?,
            headers,
        })
    }

    /// Sends `batch`; `Ok` once the sink has it (see the module's docs for syslog over UDP).
    async fn send(&mut self, batch: &[AuditEntry], timeout: Duration) -> anyhow::Result<()> {
        let lines = batch
            .iter()
            .map(|entry| serde_json::to_string(entry).context("cannot encode an audit entry"))
            .collect::<anyhow::Result<Vec<String>>>()?;
        match self {
            Self::File(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || append(&path, &lines))
                    .await
                    .context("the file writer panicked")?
            }
            Self::Syslog {
                address,
                priority,
                hostname,
                app_name,
                tcp,
            } => {
                let messages: Vec<String> = batch
                    .iter()
                    .zip(&lines)
                    .map(|(entry, line)| {
                        // RFC 5424: <PRI>VERSION TIMESTAMP HOSTNAME APP-NAME PROCID MSGID SD MSG
                        format!(
                            "<{priority}>1 {} {hostname} {app_name} {} audit - {line}",
                            entry.at,
                            std::process::id()
                        )
                    })
                    .collect();
                let sent = tokio::time::timeout(timeout, async {
                    send_syslog(address, tcp, &messages).await
                })
                .await;
                match sent {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(error)) => {
                        *tcp = None;
                        Err(error)
                    }
                    Err(_) => {
                        *tcp = None;
                        bail!("no answer within {} ms", timeout.as_millis())
                    }
                }
            }
            Self::Webhook {
                client,
                url,
                headers,
            } => {
                let mut body = lines.join("\n");
                body.push('\n');
                let (first, last) = (
                    batch.first().map_or(0, |e| e.id),
                    batch.last().map_or(0, |e| e.id),
                );
                let response = client
                    .post(url.clone())
                    .headers(headers.clone())
                    .header(reqwest::header::CONTENT_TYPE, "application/x-ndjson")
                    // What a receiver may dedupe by: a batch sent again has the same ids.
                    .header("Runway-Audit-Entries", format!("{first}-{last}"))
                    .body(body)
                    .send()
                    .await
                    .map_err(|error| anyhow::anyhow!("{}", runway_log::chain(&error)))?;
                let status = response.status();
                if status.is_success() {
                    return Ok(());
                }
                let text = response.text().await.unwrap_or_default();
                let text: String = text.chars().take(200).collect();
                bail!("{url} answered {status}: {}", text.trim())
            }
        }
    }
}

/// Appends `lines` to `path` (created `0600`) and fsyncs it.
fn append(path: &std::path::Path, lines: &[String]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut text = lines.join("\n");
    text.push('\n');
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.sync_data()
        .with_context(|| format!("cannot fsync {}", path.display()))
}

async fn send_syslog(
    address: &SyslogAddress,
    tcp: &mut Option<tokio::net::TcpStream>,
    messages: &[String],
) -> anyhow::Result<()> {
    match address {
        SyslogAddress::Udp(target) => {
            let to = tokio::net::lookup_host(target.as_str())
                .await
                .with_context(|| format!("cannot resolve {target}"))?
                .next()
                .with_context(|| format!("{target} resolves to no address"))?;
            let local: std::net::SocketAddr = if to.is_ipv4() {
                ([0, 0, 0, 0], 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            let socket = tokio::net::UdpSocket::bind(local).await?;
            for message in messages {
                socket
                    .send_to(message.as_bytes(), to)
                    .await
                    .with_context(|| format!("cannot send to udp://{target}"))?;
            }
        }
        SyslogAddress::Unix(path) => {
            let socket = tokio::net::UnixDatagram::unbound()?;
            for message in messages {
                socket
                    .send_to(message.as_bytes(), path)
                    .await
                    .with_context(|| format!("cannot send to unix://{}", path.display()))?;
            }
        }
        SyslogAddress::Tcp(target) => {
            if tcp.is_none() {
                *tcp = Some(
                    tokio::net::TcpStream::connect(target.as_str())
                        .await
                        .with_context(|| format!("cannot connect to tcp://{target}"))?,
                );
            }
            let Some(stream) = tcp.as_mut() else {
                bail!("no connection to tcp://{target}");
            };
            // RFC 6587's octet counting: the length, a space, the message.
            let mut framed = Vec::new();
            for message in messages {
                framed.extend_from_slice(format!("{} {message}", message.len()).as_bytes());
            }
            stream
                .write_all(&framed)
                .await
                .with_context(|| format!("cannot write to tcp://{target}"))?;
            stream.flush().await?;
        }
    }
    Ok(())
}

/// Every sink of `config`, each exported by a task of its own until `stopped`; only while
/// `leadership` says this replica leads, when there is an election. `store` is the fenced
/// handle: a replica that lost the lease moves no cursor.
pub fn start_exports(
    config: &AuditConfig,
    store: &Arc<dyn Store>,
    figures: &Arc<AuditExport>,
    leadership: Option<watch::Receiver<Leadership>>,
    stopped: &watch::Receiver<bool>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<anyhow::Result<()>>>> {
    let mut tasks = Vec::new();
    for sink in &config.export {
        let exporter = Exporter {
            transport: Transport::new(sink)?,
            sink: sink.clone(),
            store: Arc::clone(store),
            figures: Arc::clone(figures),
            leadership: leadership.clone(),
        };
        figures.set_buffered(&sink.name, 0);
        tasks.push(tokio::spawn(exporter.run(stopped.clone())));
    }
    Ok(tasks)
}

struct Exporter {
    sink: AuditSinkConfig,
    transport: Transport,
    store: Arc<dyn Store>,
    figures: Arc<AuditExport>,
    leadership: Option<watch::Receiver<Leadership>>,
}

/// What a pass of the loop found to do.
enum Next {
    /// Sleep this long (or until stopped), then look again.
    Wait(Duration),
    /// Go on at once.
    Continue,
}

impl Exporter {
    fn leading(&self) -> bool {
        self.leadership
            .as_ref()
            .is_none_or(|leadership| leadership.borrow().may_act())
    }

    async fn store<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn Store) -> runway_store::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let store = Arc::clone(&self.store);
        Ok(tokio::task::spawn_blocking(move || f(store.as_ref())).await??)
    }

    async fn run(mut self, mut stopped: watch::Receiver<bool>) -> anyhow::Result<()> {
        let name = self.sink.name.clone();
        let mut state = State::default();
        loop {
            let next = match self.pass(&mut state).await {
                Ok(next) => next,
                Err(error) => {
                    tracing::warn!(
                        sink = %name,
                        error = format!("{error:#}"),
                        "audit export: cannot read the store"
                    );
                    Next::Wait(Duration::from_millis(self.sink.retry_max_ms))
                }
            };
            if let Next::Wait(wait) = next {
                tokio::select! {
                    _ = stopped.wait_for(|s| *s) => return Ok(()),
                    () = tokio::time::sleep(wait) => {}
                }
            } else if *stopped.borrow() {
                return Ok(());
            }
        }
    }

    /// One step: fill the buffer from the store, send a batch, move the cursor.
    async fn pass(&mut self, state: &mut State) -> anyhow::Result<Next> {
        let name = self.sink.name.clone();
        let poll = Duration::from_millis(self.sink.poll_ms);
        if !self.leading() {
            // Another replica exports; this one starts again from the stored cursor when it
            // leads.
            *state = State::default();
            self.figures.set_buffered(&name, 0);
            return Ok(Next::Wait(poll));
        }
        if state.read_to.is_none() {
            let stored = {
                let name = name.clone();
                self.store(move |s| s.audit_export_get(&name)).await?
            };
            state.read_to = Some(stored.cursor);
            state.left_to = stored.cursor;
            self.figures.set_lag(&name, stored.lag);
            tracing::info!(
                sink = %name,
                cursor = stored.cursor,
                lag = stored.lag,
                "audit export starts after entry {}",
                stored.cursor
            );
        }
        let read_to = state.read_to.unwrap_or(0);
        // Fill the buffer up to its bound.
        let room = self.sink.buffer.saturating_sub(state.buffer.len());
        if room > 0 {
            let limit = u32::try_from(room.min(1_000)).unwrap_or(1_000);
            let read = self.store(move |s| s.audit_list(read_to, limit)).await?;
            let caught_up = read.len() < limit as usize;
            for entry in read.into_iter().take_while(|e| e.hash.is_some()) {
                state.read_to = Some(entry.id);
                state.buffer.push_back(entry);
            }
            // Said once, when the store holds nothing more than the buffer took (not at each
            // batch of the catching up).
            if state.full && caught_up && state.read_to >= Some(state.left_to) {
                tracing::info!(
                    sink = %name,
                    "audit export to sink {name} caught up with the store: every entry left \
                     there is in its buffer again"
                );
                state.full = false;
            }
        } else {
            // Full: what came since is left in the store, counted once.
            let after = state.left_to.max(read_to);
            let left = self.store(move |s| s.audit_list(after, 1_000)).await?;
            let left: Vec<&AuditEntry> = left.iter().take_while(|e| e.hash.is_some()).collect();
            if let Some(last) = left.last() {
                state.left_to = last.id;
                let count = left.len() as u64;
                self.figures.dropped(&name, count);
                if !state.full {
                    let lag = {
                        let name = name.clone();
                        self.store(move |s| s.audit_export_get(&name)).await?.lag
                    };
                    tracing::warn!(
                        sink = %name,
                        buffer = self.sink.buffer,
                        lag,
                        "audit export to sink {name} is {lag} entries behind: its buffer of {} \
                         is full, so newer entries are dropped from memory and left in the \
                         store, to be read again once it catches up (none is lost)",
                        self.sink.buffer
                    );
                }
                state.full = true;
            }
        }
        self.figures.set_buffered(&name, state.buffer.len());
        if state.buffer.is_empty() {
            self.figures.set_lag(&name, 0);
            return Ok(Next::Wait(poll));
        }
        let count = state.buffer.len().min(self.sink.batch);
        let batch: Vec<AuditEntry> = state.buffer.iter().take(count).cloned().collect();
        let last = batch.last().map_or(0, |e| e.id);
        let timeout = Duration::from_millis(self.sink.timeout_ms);
        match self.transport.send(&batch, timeout).await {
            Ok(()) => {
                let acked = {
                    let name = name.clone();
                    self.store(move |s| s.audit_export_ack(&name, last)).await
                };
                if let Err(error) = acked {
                    if is_fenced(&error) {
                        // Lost the lead between sending and recording: the next leader sends
                        // this batch again (at least once).
                        *state = State::default();
                        return Ok(Next::Wait(poll));
                    }
                    return Err(error.context("cannot record the sink's acknowledgement"));
                }
                state.buffer.drain(..count);
                self.figures.sent(&name, count as u64);
                self.figures.set_buffered(&name, state.buffer.len());
                if state.failures > 0 {
                    tracing::info!(
                        sink = %name,
                        failures = state.failures,
                        "audit export to sink {name} resumed after {} failed attempts",
                        state.failures
                    );
                }
                state.failures = 0;
                state.backoff = Duration::ZERO;
                // The lag is a count over the entries left: once a second at most, not at
                // every batch of a backlog.
                if state
                    .lag_counted
                    .is_none_or(|at| at.elapsed() >= Duration::from_secs(1))
                {
                    let lag = {
                        let name = name.clone();
                        self.store(move |s| s.audit_export_get(&name)).await?.lag
                    };
                    self.figures.set_lag(&name, lag);
                    state.lag_counted = Some(std::time::Instant::now());
                }
                Ok(Next::Continue)
            }
            Err(error) => {
                let text = format!("{error:#}");
                state.failures += 1;
                self.figures.failed(&name);
                state.backoff = if state.backoff.is_zero() {
                    Duration::from_millis(self.sink.retry_min_ms)
                } else {
                    (state.backoff * 2).min(Duration::from_millis(self.sink.retry_max_ms))
                };
                // The first failure in a row, then every tenth: a sink down for a day does
                // not fill the log.
                if state.failures == 1 || state.failures.is_multiple_of(10) {
                    tracing::warn!(
                        sink = %name,
                        error = %text,
                        failures = state.failures,
                        retry_in_ms = state.backoff.as_millis() as u64,
                        "audit export to sink {name} failed; retrying (nothing is lost: the \
                         entries wait in the store)"
                    );
                }
                let recorded = {
                    let name = name.clone();
                    self.store(move |s| s.audit_export_failed(&name, &text))
                        .await
                };
                if let Err(error) = recorded
                    && !is_fenced(&error)
                {
                    tracing::debug!(error = format!("{error:#}"), "cannot record the failure");
                }
                Ok(Next::Wait(state.backoff))
            }
        }
    }
}

fn is_fenced(error: &anyhow::Error) -> bool {
    matches!(
        error.downcast_ref::<StoreError>(),
        Some(StoreError::Fenced { .. } | StoreError::NotLeading)
    )
}

/// A sink's progress in memory.
#[derive(Default)]
struct State {
    /// The last entry read into the buffer (`None`: the cursor is to be read from the store).
    read_to: Option<i64>,
    /// The last entry counted as left in the store while the buffer was full.
    left_to: i64,
    buffer: VecDeque<AuditEntry>,
    full: bool,
    failures: u64,
    backoff: Duration,
    /// When the lag was last counted.
    lag_counted: Option<std::time::Instant>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syslog_addresses() {
        assert_eq!(
            syslog_address("udp://127.0.0.1:514"),
            Ok(SyslogAddress::Udp("127.0.0.1:514".into()))
        );
        assert_eq!(
            syslog_address("tcp://[::1]:601"),
            Ok(SyslogAddress::Tcp("[::1]:601".into()))
        );
        assert_eq!(
            syslog_address("unix:///dev/log"),
            Ok(SyslogAddress::Unix("/dev/log".into()))
        );
        for bad in [
            "127.0.0.1:514",
            "udp://host",
            "udp://:5",
            "unix://dev/log",
            "http://x:1",
        ] {
            assert!(syslog_address(bad).is_err(), "{bad}");
        }
    }
}
