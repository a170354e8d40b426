//! A cell-routed route (`runway router`): GitLab's HTTP router rules decide which cell a
//! request belongs to, and the request is proxied to that cell as to a revision's instance,
//! with the same streaming, bounds, access log and metrics. Each cell is a revision of the
//! route named `cell-<id>`, with one instance at the cell's address.
//!
//! With GitLab's topology service, what a client's token or cookie asks for reaches the
//! service only within bounds: a `CELL_ID` that is not a number, or a value over 64 bytes,
//! is no cell without asking; at most [`ASKS_AT_ONCE`] questions are out at once, and after a
//! failure the service is left alone for [`BACK_OFF`]; answers are kept (and kept across
//! route tables); until the service answers again, an answer up to [`STALE_FOR`] old, then
//! the route's own cells, then the legacy cell stand in, at once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use runway_cells::{Action, ClassifyType, Decision, RequestView, Rules, StaticTopology};

use crate::config::{CellsConfig, InstanceConfig, Protocol, RevisionConfig, TopologyServiceConfig};
use crate::metrics::Metrics;
use crate::table::Revision;

/// How long an answer of the topology service is still used while the service cannot be
/// reached (it is down, slow or answers garbage): a cell's address rarely changes, and
/// routing by a minutes-old answer beats sending every runner to the legacy cell.
pub(crate) const STALE_FOR: Duration = Duration::from_secs(300);

/// Questions to the topology service out at once; past it, a request does without.
pub(crate) const ASKS_AT_ONCE: usize = 32;

/// After the service fails, how long it is not asked.
pub(crate) const BACK_OFF: Duration = Duration::from_secs(1);

/// The longest classification value asked about.
const MAX_VALUE: usize = 64;

/// The most answers kept.
const CACHE_ENTRIES: usize = 100_000;

/// The revision standing for cell `id`.
pub(crate) fn revision_name(id: u64) -> String {
    format!("cell-{id}")
}

/// A cell-routed route's revisions: one per cell, weighing 0, its one instance the cell.
/// The config is validated: every cell's address is an `ip:port`.
pub(crate) fn revisions(config: &CellsConfig) -> Vec<RevisionConfig> {
    config
        .topology
        .cells
        .iter()
        .filter_map(|cell| {
            Some(RevisionConfig {
                name: revision_name(cell.id),
                weight: 0,
                tag: None,
                average_start_seconds: None,
                protocol: Protocol::Http1,
                failing: false,
                instances: vec![InstanceConfig {
                    address: CellsConfig::address(&cell.address)?,
                    ready: true,
                    draining: false,
                    max_concurrency: 0,
                }],
            })
        })
        .collect()
}

/// The rules and topology of a cell-routed route, and its cells' revisions.
#[derive(Debug)]
pub struct CellRouting {
    rules: Rules,
    topology: StaticTopology,
    /// Each cell's revision, by id, and each cell's id by address.
    cells: HashMap<u64, Arc<Revision>>,
    ids: HashMap<SocketAddr, u64>,
    /// What outlives a route table: the service's answers, the revisions of cells it named.
    kept: Arc<Kept>,
    metrics: Arc<Metrics>,
}

/// A cell-routed route's state across tables.
#[derive(Debug)]
pub(crate) struct Kept {
    labels: (String, String),
    service: Option<TopologyService>,
    /// Revisions of cells the topology service named that the route does not list.
    named: Mutex<HashMap<SocketAddr, Arc<Revision>>>,
}

impl Kept {
    /// For the route `labels` with `service`.
    pub(crate) fn new(labels: (String, String), service: Option<TopologyServiceConfig>) -> Self {
        Self {
            labels,
            service: service.map(|config| TopologyService {
                config,
                answers: Mutex::default(),
                asks: tokio::sync::Semaphore::new(ASKS_AT_ONCE),
                resting_until: Mutex::new(None),
            }),
            named: Mutex::default(),
        }
    }

    /// Whether this state serves a route with `service` (else the route starts afresh).
    pub(crate) fn serves(&self, service: Option<&TopologyServiceConfig>) -> bool {
        self.service.as_ref().map(|s| &s.config) == service
    }
}

/// GitLab's topology service, and its answers.
#[derive(Debug)]
struct TopologyService {
    config: TopologyServiceConfig,
    answers: Mutex<HashMap<(ClassifyType, String), Answer>>,
    asks: tokio::sync::Semaphore,
    /// After a failure, the service is not asked before this.
    resting_until: Mutex<Option<Instant>>,
}

/// One answer: the cell's address, or that there is no such cell.
#[derive(Debug, Clone, Copy)]
struct Answer {
    address: Option<SocketAddr>,
    at: Instant,
}

/// Where one request goes.
#[derive(Debug)]
pub(crate) struct Chosen {
    pub(crate) revision: Arc<Revision>,
    pub(crate) decision: Decision,
    /// The cell's id, or its address when the topology service named one the topology
    /// does not list.
    pub(crate) cell: String,
    /// Why a classified request went to the legacy cell.
    pub(crate) fell_back: Option<String>,
    /// The topology service could not answer and the route's own cells placed it.
    pub(crate) without_service: bool,
}

impl Chosen {
    /// The outcome for metrics: `classified` (to the cell its rule named), `static` (so, by
    /// the route's own cells, the topology service not answering), `fell_back` (a
    /// classification that found no cell: the legacy cell), `proxied` (a `proxy` rule),
    /// `unmatched` (no rule).
    pub(crate) fn outcome(&self) -> &'static str {
        match (&self.decision.rule, &self.decision.action, &self.fell_back) {
            (None, _, _) => "unmatched",
            (Some(_), Action::Proxy, _) => "proxied",
            (Some(_), Action::Classify { .. }, Some(_)) => "fell_back",
            (Some(_), Action::Classify { .. }, None) if self.without_service => "static",
            (Some(_), Action::Classify { .. }, None) => "classified",
        }
    }
}

impl CellRouting {
    /// From a validated config, the route's revisions (see [`revisions`]) and the state kept
    /// from the route's previous table.
    pub(crate) fn new(
        config: &CellsConfig,
        revisions: &[(u32, Arc<Revision>)],
        kept: Arc<Kept>,
        metrics: &Arc<Metrics>,
    ) -> Option<Self> {
        let rules = config.parse_rules().ok()?;
        let mut cells = HashMap::new();
        let mut ids = HashMap::new();
        for cell in &config.topology.cells {
            let name = revision_name(cell.id);
            let (_, revision) = revisions.iter().find(|(_, r)| r.name == name)?;
            cells.insert(cell.id, Arc::clone(revision));
            ids.insert(CellsConfig::address(&cell.address)?, cell.id);
        }
        Some(Self {
            rules,
            topology: config.topology.clone(),
            cells,
            ids,
            kept,
            metrics: Arc::clone(metrics),
        })
    }

    /// The state to keep for the route's next table.
    pub(crate) fn kept(&self) -> &Arc<Kept> {
        &self.kept
    }

    /// Whether a rule reads the body's first bytes.
    pub(crate) fn reads_body(&self) -> bool {
        self.rules.reads_body()
    }

    /// The rules' decision.
    pub(crate) fn decide(&self, request: &RequestView<'_>) -> Decision {
        self.rules.decide(request)
    }

    /// Whether reading the body could change `decision`.
    pub(crate) fn needs_body(&self, decision: &Decision) -> bool {
        self.rules.needs_body(decision)
    }

    /// The cell for a decision: the one its classification names (by the topology service
    /// when there is one, else by the topology), else the legacy cell.
    pub(crate) async fn place(&self, decision: Decision) -> Option<Chosen> {
        if let (Some(service), Action::Classify { kind, value }) =
            (&self.kept.service, decision.action.clone())
        {
            return match service.classify(kind, &value, &self.metrics).await {
                Ok(Some(address)) => Some(Chosen {
                    cell: self
                        .ids
                        .get(&address)
                        .map_or_else(|| address.to_string(), u64::to_string),
                    revision: self.at(address),
                    fell_back: None,
                    without_service: false,
                    decision,
                }),
                Ok(None) => self.legacy(
                    decision,
                    format!(
                        "the topology service knows no cell {} `{value}`",
                        kind.as_str()
                    ),
                ),
                // The service cannot answer: the route's own cells stand in.
                Err(error) => match self.topology.classify(kind, &value) {
                    Ok(cell) => Some(Chosen {
                        revision: Arc::clone(self.cells.get(&cell.id)?),
                        cell: cell.id.to_string(),
                        fell_back: None,
                        without_service: true,
                        decision,
                    }),
                    Err(_) => self.legacy(decision, format!("the topology service: {error}")),
                },
            };
        }
        let routed = self.topology.route(decision)?;
        let cell = routed.cell.id;
        Some(Chosen {
            revision: Arc::clone(self.cells.get(&cell)?),
            fell_back: routed.fell_back.map(|e| e.to_string()),
            without_service: false,
            decision: routed.decision,
            cell: cell.to_string(),
        })
    }

    fn legacy(&self, decision: Decision, why: String) -> Option<Chosen> {
        let legacy = self.topology.legacy_cell;
        Some(Chosen {
            revision: Arc::clone(self.cells.get(&legacy)?),
            fell_back: Some(why),
            without_service: false,
            decision,
            cell: legacy.to_string(),
        })
    }

    /// The revision for a cell at `address`: the topology's, or one made for it (kept).
    fn at(&self, address: SocketAddr) -> Arc<Revision> {
        if let Some(revision) = self.ids.get(&address).and_then(|id| self.cells.get(id)) {
            return Arc::clone(revision);
        }
        let kept = &self.kept;
        let mut named = kept.named.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(named.entry(address).or_insert_with(|| {
            Arc::new(Revision::single(
                &kept.labels.0,
                &kept.labels.1,
                format!("cell@{address}"),
                address,
                &self.metrics,
            ))
        }))
    }
}

impl TopologyService {
    /// Where the cell of this classification is: `Some(address)`, `None` when there is no
    /// such cell (the service says so, or the value could name none); an error when the
    /// service cannot say (no answer within the timeout, an error status, a body that is not
    /// its answer, resting after a failure, too many questions out) and no answer younger
    /// than [`STALE_FOR`] is at hand. Answers are kept `cache_ms`. Every failure is counted.
    async fn classify(
        &self,
        kind: ClassifyType,
        value: &str,
        metrics: &Metrics,
    ) -> Result<Option<SocketAddr>, String> {
        // What no cell could be is not asked about: a client chose it.
        let plausible = match kind {
            ClassifyType::CellId => value.parse::<u64>().is_ok(),
            _ => value.len() <= MAX_VALUE,
        };
        if !plausible {
            return Ok(None);
        }
        let key = (kind, value.to_owned());
        let cached = self.answers().get(&key).copied();
        if let Some(answer) = cached
            && answer.at.elapsed() < Duration::from_millis(self.config.cache_ms)
        {
            return Ok(answer.address);
        }
        let asked = self.ask_within_bounds(kind, value).await;
        match asked {
            Ok(address) => {
                let mut answers = self.answers();
                if answers.len() >= CACHE_ENTRIES {
                    answers.retain(|_, answer| answer.at.elapsed() < STALE_FOR);
                }
                if answers.len() < CACHE_ENTRIES {
                    answers.insert(
                        key,
                        Answer {
                            address,
                            at: Instant::now(),
                        },
                    );
                }
                Ok(address)
            }
            Err(error) => {
                metrics.topology_error();
                match cached {
                    Some(answer) if answer.at.elapsed() < STALE_FOR => Ok(answer.address),
                    _ => Err(error),
                }
            }
        }
    }

    fn answers(&self) -> std::sync::MutexGuard<'_, HashMap<(ClassifyType, String), Answer>> {
        self.answers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One question, unless the service rests after a failure or too many are out; the
    /// answer within the timeout. A failure rests the service for [`BACK_OFF`].
    async fn ask_within_bounds(
        &self,
        kind: ClassifyType,
        value: &str,
    ) -> Result<Option<SocketAddr>, String> {
        let resting = |until: &mut Option<Instant>| until.is_some_and(|t| Instant::now() < t);
        if resting(
            &mut self
                .resting_until
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        ) {
            return Err("resting after a failure".to_owned());
        }
        let Ok(_permit) = self.asks.try_acquire() else {
            return Err(format!("{ASKS_AT_ONCE} questions out already"));
        };
        let timeout = Duration::from_millis(self.config.timeout_ms.max(1));
        let answer = match crate::timer::timeout(timeout, self.ask(kind, value)).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
        };
        if answer.is_err() {
            *self
                .resting_until
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now() + BACK_OFF);
        }
        answer
    }

    /// One `POST /v1/classify`.
    async fn ask(&self, kind: ClassifyType, value: &str) -> Result<Option<SocketAddr>, String> {
        let url: http::Uri = format!("{}/v1/classify", self.config.url.trim_end_matches('/'))
            .parse()
            .map_err(|e| format!("{e}"))?;
        let authority = url.authority().ok_or("no host in the URL")?.clone();
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let stream = tokio::net::TcpStream::connect((host, authority.port_u16().unwrap_or(80)))
            .await
            .map_err(|e| format!("cannot connect to {authority}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| format!("{e}"))?;
        tokio::spawn(connection);
        let body = serde_json::json!({"type": kind.as_str(), "value": value}).to_string();
        let request = http::Request::post(url.path())
            .header(http::header::HOST, authority.as_str())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("{e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("{e}"))?;
        let status = response.status();
        let bytes = http_body_util::Limited::new(response.into_body(), 64 << 10)
            .collect()
            .await
            .map_err(|e| format!("{e}"))?
            .to_bytes();
        let answer: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|_| format!("{status}, not JSON"))?;
        if !status.is_success() {
            // `{"code": 5, "message": "cell not found: ..."}`: gRPC's NOT_FOUND.
            if answer.get("code").and_then(serde_json::Value::as_u64) == Some(5) {
                return Ok(None);
            }
            return Err(format!(
                "{status}: {}",
                answer.get("message").and_then(|m| m.as_str()).unwrap_or("")
            ));
        }
        if answer.get("action").and_then(|a| a.as_str()) != Some("PROXY") {
            return Err("an answer whose action is not PROXY".to_owned());
        }
        let address = answer
            .pointer("/proxy/address")
            .and_then(|a| a.as_str())
            .ok_or("an answer without proxy.address")?;
        // Cells are reached over plain HTTP: one the service places behind TLS cannot be.
        if address.starts_with("https://") || address.ends_with(":443") {
            return Err(format!(
                "it places the cell at {address}, over HTTPS, which this router does not speak \
                 to cells"
            ));
        }
        let address = address.strip_prefix("http://").unwrap_or(address);
        tokio::net::lookup_host(address)
            .await
            .map_err(|e| format!("cannot resolve {address}: {e}"))?
            .next()
            .map(Some)
            .ok_or_else(|| format!("{address} resolves to nothing"))
    }
}
