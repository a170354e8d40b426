//! The audit log's chain checked (`GET /v1/audit/verify`) and its export's progress
//! (`GET /v1/audit/export`), and [`AuditExport`], the figures the server's exporter keeps for
//! them and for `/metrics`.
//!
//! The exporter itself is the server's (`runway_server`'s `audit_export.rs`): the store is its
//! queue, each sink's cursor in the store; this module only shows what it did.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::state::ApiState;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkLabels {
    sink: String,
}

/// What this process's audit exporter did, by sink: for `/metrics` (`runway_audit_export_*`)
/// and the API's view of the export. Each replica has its own; only the leader's exports.
#[derive(Debug, Default)]
pub struct AuditExport {
    sinks: Mutex<BTreeSet<String>>,
    lag: Family<SinkLabels, Gauge>,
    buffered: Family<SinkLabels, Gauge>,
    sent: Family<SinkLabels, Counter>,
    dropped: Family<SinkLabels, Counter>,
    failures: Family<SinkLabels, Counter>,
}

impl AuditExport {
    /// Registers the figures in `registry` (whose prefix is `runway_audit_export`).
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "lag",
            "Audit entries in the store that the sink has not acknowledged yet",
            self.lag.clone(),
        );
        registry.register(
            "buffered",
            "Audit entries read from the store and held in memory for the sink",
            self.buffered.clone(),
        );
        registry.register(
            "sent",
            "Audit entries the sink acknowledged (again after a restart: at least once)",
            self.sent.clone(),
        );
        registry.register(
            "dropped",
            "Audit entries that did not fit in the sink's memory buffer: left in the store \
             and read again when the sink catches up, not lost",
            self.dropped.clone(),
        );
        registry.register(
            "failures",
            "Attempts to send to the sink that failed (each retried)",
            self.failures.clone(),
        );
    }

    fn labels(&self, sink: &str) -> SinkLabels {
        self.sinks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(sink.to_owned());
        SinkLabels {
            sink: sink.to_owned(),
        }
    }

    /// The entries the sink has still to acknowledge.
    pub fn set_lag(&self, sink: &str, lag: u64) {
        self.lag
            .get_or_create(&self.labels(sink))
            .set(i64::try_from(lag).unwrap_or(i64::MAX));
    }

    /// The entries held in memory for the sink.
    pub fn set_buffered(&self, sink: &str, buffered: usize) {
        self.buffered
            .get_or_create(&self.labels(sink))
            .set(i64::try_from(buffered).unwrap_or(i64::MAX));
    }

    /// `count` more entries acknowledged.
    pub fn sent(&self, sink: &str, count: u64) {
        self.sent.get_or_create(&self.labels(sink)).inc_by(count);
    }

    /// `count` more entries left in the store because the buffer was full.
    pub fn dropped(&self, sink: &str, count: u64) {
        self.dropped.get_or_create(&self.labels(sink)).inc_by(count);
    }

    /// One more failed attempt.
    pub fn failed(&self, sink: &str) {
        self.failures.get_or_create(&self.labels(sink)).inc();
    }

    /// The sinks this process exports to, and what it did for each.
    fn figures(&self) -> Vec<(String, SinkFigures)> {
        let names = self
            .sinks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        names
            .into_iter()
            .map(|sink| {
                let labels = SinkLabels { sink: sink.clone() };
                let figures = SinkFigures {
                    buffered: u64::try_from(self.buffered.get_or_create(&labels).get())
                        .unwrap_or(0),
                    sent: self.sent.get_or_create(&labels).get(),
                    dropped: self.dropped.get_or_create(&labels).get(),
                    failures: self.failures.get_or_create(&labels).get(),
                };
                (sink, figures)
            })
            .collect()
    }
}

/// What this replica's exporter did for a sink since it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SinkFigures {
    /// Entries held in memory now.
    pub buffered: u64,
    /// Entries acknowledged.
    pub sent: u64,
    /// Entries that did not fit in memory, left in the store to be read again (not lost).
    pub dropped: u64,
    /// Failed attempts, each retried.
    pub failures: u64,
}

/// Where an export sink stands.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditSinkView {
    /// Its name (`audit.export[].name` in the server's configuration).
    pub name: String,
    /// The last entry it acknowledged (0: none yet).
    pub cursor: i64,
    /// The entries after the cursor: what it has still to get.
    pub lag: u64,
    /// When it last acknowledged some (RFC 3339).
    pub acked_at: Option<String>,
    /// Its last failure, while it is failing.
    pub error: Option<String>,
    /// Since when it has been failing (RFC 3339).
    pub failing_since: Option<String>,
    /// What the replica that answers exported since it started, when it exports (the leader).
    pub this_replica: Option<SinkFigures>,
}

/// The first entry where the chain breaks.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditBreakView {
    /// The entry.
    pub id: i64,
    /// What differs.
    pub reason: String,
}

/// The last chained entry.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditHeadView {
    /// Its id (0: the log is empty).
    pub id: i64,
    /// Its hash (64 zeros when the log is empty).
    pub hash: String,
}

/// What walking the audit log's hash chain found.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditVerifyView {
    /// Every entry links to the one before it and matches its hash, up to the recorded head.
    pub ok: bool,
    /// The entries checked before the first break (all of them when `ok`).
    pub entries: u64,
    /// The last chained entry, as the store records it.
    pub head: AuditHeadView,
    /// The first entry where the chain breaks, when it does.
    pub first_broken: Option<AuditBreakView>,
    /// Every export sink's cursor and lag.
    pub sinks: Vec<AuditSinkView>,
}

/// The export sinks: those the store has cursors for, and those this replica exports to.
async fn sinks(state: &ApiState) -> ApiResult<Vec<AuditSinkView>> {
    let mut figures: std::collections::BTreeMap<String, SinkFigures> =
        state.metrics.audit_export.figures().into_iter().collect();
    let names: Vec<String> = figures.keys().cloned().collect();
    let stored = state
        .store(move |s| {
            let mut stored = s.audit_export_list()?;
            // A sink this replica exports to that has neither acknowledged nor failed yet.
            for name in names {
                if !stored.iter().any(|cursor| cursor.sink == name) {
                    stored.push(s.audit_export_get(&name)?);
                }
            }
            Ok(stored)
        })
        .await?;
    let mut views: Vec<AuditSinkView> = stored
        .into_iter()
        .map(|cursor| AuditSinkView {
            this_replica: figures.remove(&cursor.sink),
            name: cursor.sink,
            cursor: cursor.cursor,
            lag: cursor.lag,
            acked_at: cursor.acked_at.map(|at| at.to_string()),
            error: cursor.error,
            failing_since: cursor.failing_since.map(|at| at.to_string()),
        })
        .collect();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(views)
}

/// Walks the audit log's hash chain (admin): every entry's hash recomputed from its content
/// and the hash before it, up to the head the store records. 200 whether or not it holds:
/// `ok` says, and `first_broken` names the first entry changed or removed. With the export
/// sinks' cursors and lag.
#[utoipa::path(get, path = "/v1/audit/verify",
    responses((status = 200, body = AuditVerifyView)))]
pub(crate) async fn verify_audit(
    state: axum::extract::State<ApiState>,
) -> ApiResult<axum::Json<AuditVerifyView>> {
    let verified = state.store(|s| Ok(s.audit_verify()?)).await?;
    Ok(axum::Json(AuditVerifyView {
        ok: verified.ok,
        entries: verified.entries,
        head: AuditHeadView {
            id: verified.head.id,
            hash: verified.head.hash,
        },
        first_broken: verified.first_broken.map(|broken| AuditBreakView {
            id: broken.id,
            reason: broken.reason,
        }),
        sinks: sinks(&state).await?,
    }))
}

/// The audit export's sinks (admin): each one's cursor (the last entry it acknowledged), its
/// lag, its failure while failing, and what the answering replica sent, held and left in the
/// store.
#[utoipa::path(get, path = "/v1/audit/export",
    responses((status = 200, body = Vec<AuditSinkView>)))]
pub(crate) async fn audit_export(
    state: axum::extract::State<ApiState>,
) -> ApiResult<axum::Json<Vec<AuditSinkView>>> {
    Ok(axum::Json(sinks(&state).await?))
}
