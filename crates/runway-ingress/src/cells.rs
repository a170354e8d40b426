//! A cell-routed route (`runway router`): GitLab's HTTP router rules decide which cell a
//! request belongs to, and the request is proxied to that cell as to a revision's instance,
//! with the same streaming, bounds, access log and metrics. Each cell is a revision of the
//! route named `cell-<id>`, with one instance at the cell's address.

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

/// The most answers kept; past it the cache starts afresh.
const CACHE_ENTRIES: usize = 100_000;

/// The revision standing for cell `id`.
pub(crate) fn revision_name(id: u64) -> String {
    format!("cell-{id}")
}

/// A cell-routed route's revisions: one per cell, weighing 0, its one instance the cell.
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
    cells: HashMap<u64, Arc<Revision>>,
    service: Option<TopologyService>,
    /// The route's service and env, for the revisions of cells the service names.
    labels: (String, String),
    metrics: Arc<Metrics>,
    /// Revisions of cells the topology service named, by address.
    named: Mutex<HashMap<SocketAddr, Arc<Revision>>>,
}

/// GitLab's topology service, and its answers.
#[derive(Debug)]
struct TopologyService {
    config: TopologyServiceConfig,
    answers: Mutex<HashMap<(ClassifyType, String), Answer>>,
}

/// One answer: the cell's address, or that there is no such cell.
#[derive(Debug, Clone)]
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
}

impl Chosen {
    /// The outcome for metrics: `classified` (to the cell its rule named), `fell_back` (a
    /// classification that found no cell), `proxied` (a `proxy` rule), `unmatched` (no rule).
    pub(crate) fn outcome(&self) -> &'static str {
        match (&self.decision.rule, &self.decision.action, &self.fell_back) {
            (None, _, _) => "unmatched",
            (Some(_), Action::Proxy, _) => "proxied",
            (Some(_), Action::Classify { .. }, Some(_)) => "fell_back",
            (Some(_), Action::Classify { .. }, None) => "classified",
        }
    }
}

impl CellRouting {
    /// From a validated config and the route's revisions (see [`revisions`]).
    pub(crate) fn new(
        config: &CellsConfig,
        revisions: &[(u32, Arc<Revision>)],
        (service, env): (&str, &str),
        metrics: &Arc<Metrics>,
    ) -> Option<Self> {
        let rules = config.parse_rules().ok()?;
        let cells = config
            .topology
            .cells
            .iter()
            .filter_map(|cell| {
                let name = revision_name(cell.id);
                let revision = revisions.iter().find(|(_, r)| r.name == name)?;
                Some((cell.id, Arc::clone(&revision.1)))
            })
            .collect();
        Some(Self {
            rules,
            topology: config.topology.clone(),
            cells,
            service: config
                .topology_service
                .clone()
                .map(|config| TopologyService {
                    config,
                    answers: Mutex::default(),
                }),
            labels: (service.to_owned(), env.to_owned()),
            metrics: Arc::clone(metrics),
            named: Mutex::default(),
        })
    }

    /// Whether a rule reads the body's first bytes.
    pub(crate) fn reads_body(&self) -> bool {
        self.rules.reads_body()
    }

    /// The cell for a request: the one its classification names (by the topology service
    /// when there is one, else by the topology), else the legacy cell.
    pub(crate) async fn choose(&self, request: &RequestView<'_>) -> Option<Chosen> {
        let decision = self.rules.decide(request);
        if let (Some(service), Action::Classify { kind, value }) =
            (&self.service, decision.action.clone())
        {
            match service.classify(kind, &value, &self.metrics).await {
                Ok(Some(address)) => {
                    let revision = self.at(address);
                    return Some(Chosen {
                        cell: self.cell_at(address),
                        revision,
                        fell_back: None,
                        decision,
                    });
                }
                Ok(None) => {
                    return self.legacy(
                        decision,
                        format!(
                            "the topology service knows no cell {} `{value}`",
                            kind.as_str()
                        ),
                    );
                }
                Err(error) => {
                    // The service cannot answer: the topology's own cells stand in.
                    if let Ok(cell) = self.topology.classify(kind, &value) {
                        let revision = Arc::clone(self.cells.get(&cell.id)?);
                        return Some(Chosen {
                            cell: cell.id.to_string(),
                            revision,
                            fell_back: None,
                            decision,
                        });
                    }
                    return self.legacy(decision, format!("the topology service: {error}"));
                }
            }
        }
        let routed = self.topology.route(decision)?;
        let cell = routed.cell.id;
        Some(Chosen {
            revision: Arc::clone(self.cells.get(&cell)?),
            fell_back: routed.fell_back.map(|e| e.to_string()),
            decision: routed.decision,
            cell: cell.to_string(),
        })
    }

    fn legacy(&self, decision: Decision, why: String) -> Option<Chosen> {
        let legacy = self.topology.legacy_cell;
        Some(Chosen {
            revision: Arc::clone(self.cells.get(&legacy)?),
            fell_back: Some(why),
            decision,
            cell: legacy.to_string(),
        })
    }

    /// The cell's id when the topology lists its address, else the address.
    fn cell_at(&self, address: SocketAddr) -> String {
        self.topology
            .cells
            .iter()
            .find(|cell| CellsConfig::address(&cell.address) == Some(address))
            .map_or_else(|| address.to_string(), |cell| cell.id.to_string())
    }

    /// The revision for a cell at `address`: the topology's, or one made for it.
    fn at(&self, address: SocketAddr) -> Arc<Revision> {
        if let Some(cell) = self
            .topology
            .cells
            .iter()
            .find(|cell| CellsConfig::address(&cell.address) == Some(address))
            && let Some(revision) = self.cells.get(&cell.id)
        {
            return Arc::clone(revision);
        }
        let mut named = self.named.lock().unwrap_or_else(PoisonError::into_inner);
        if named.len() >= CACHE_ENTRIES {
            named.clear();
        }
        Arc::clone(named.entry(address).or_insert_with(|| {
            Arc::new(Revision::single(
                &self.labels.0,
                &self.labels.1,
                format!("cell@{address}"),
                address,
                &self.metrics,
            ))
        }))
    }
}

impl TopologyService {
    /// Where the cell of this classification is: `Some(address)`, `None` when the service
    /// says there is no such cell; an error when it cannot say (no answer within the
    /// timeout, an error status, a body that is not its answer) and no answer younger than
    /// [`STALE_FOR`] is at hand. Answers are kept `cache_ms`. Every failure is counted, a
    /// stale answer used or not.
    async fn classify(
        &self,
        kind: ClassifyType,
        value: &str,
        metrics: &Metrics,
    ) -> Result<Option<SocketAddr>, String> {
        let key = (kind, value.to_owned());
        let cached = self
            .answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        let fresh = Duration::from_millis(self.config.cache_ms);
        if let Some(answer) = &cached
            && answer.at.elapsed() < fresh
        {
            return Ok(answer.address);
        }
        let timeout = Duration::from_millis(self.config.timeout_ms.max(1));
        match tokio::time::timeout(timeout, self.ask(kind, value)).await {
            Ok(Ok(address)) => {
                let mut answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
                if answers.len() >= CACHE_ENTRIES {
                    answers.clear();
                }
                answers.insert(
                    key,
                    Answer {
                        address,
                        at: Instant::now(),
                    },
                );
                Ok(address)
            }
            failed => {
                metrics.topology_error();
                let error = match failed {
                    Ok(Err(error)) => error,
                    _ => format!("no answer within {} ms", timeout.as_millis()),
                };
                match cached {
                    Some(answer) if answer.at.elapsed() < STALE_FOR => Ok(answer.address),
                    _ => Err(error),
                }
            }
        }
    }

    /// One `POST /v1/classify`.
    async fn ask(&self, kind: ClassifyType, value: &str) -> Result<Option<SocketAddr>, String> {
        let url: http::Uri = format!("{}/v1/classify", self.config.url.trim_end_matches('/'))
            .parse()
            .map_err(|e| format!("{e}"))?;
        let authority = url.authority().ok_or("no host in the URL")?.clone();
        let port = authority.port_u16().unwrap_or(80);
        let stream = tokio::net::TcpStream::connect((authority.host(), port))
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
        let address = address.strip_prefix("http://").unwrap_or(address);
        let resolved = tokio::net::lookup_host(address)
            .await
            .map_err(|e| format!("cannot resolve {address}: {e}"))?
            .next()
            .ok_or_else(|| format!("{address} resolves to nothing"))?;
        Ok(Some(resolved))
    }
}
