//! Cell routing's routes: the hosts `ingress.cells` routes to cells rather than to services
//! (and `runway router`'s one route), each a `RouteConfig` made from GitLab's HTTP router
//! rules and a topology.

use std::time::Duration;

use anyhow::{Context, bail};
use runway_cells::{Rules, StaticTopology};
use runway_ingress::CellsConfig;
use runway_ingress::RouteConfig;
use runway_ingress::config::TopologyServiceConfig;

/// The env of cell-routed routes: `{service}.cells` in tables, metrics and the access log.
pub const CELLS_ENV: &str = "cells";

/// Where a cell-routed route's cells come from.
#[derive(Debug)]
pub enum Topology<'a> {
    /// A topology file.
    File(&'a std::path::Path),
    /// The legacy cell's address alone (the topology service names the others).
    Legacy(&'a str),
}

/// A cell-routed route for `domains`: the rule file checked, the topology's names resolved.
pub async fn cell_route(
    service: &str,
    domains: Vec<String>,
    rules_path: &std::path::Path,
    topology_source: &Topology<'_>,
    topology_service: Option<TopologyServiceConfig>,
    request_timeout: Duration,
) -> anyhow::Result<RouteConfig> {
    let text = std::fs::read_to_string(rules_path)
        .with_context(|| format!("cannot read {}", rules_path.display()))?;
    Rules::parse(rules_path, &text)?;
    let rules = Rules::to_json(rules_path, &text)?;
    let (mut topology, topology_path) = match topology_source {
        Topology::File(path) => (StaticTopology::load(path)?, path.display().to_string()),
        Topology::Legacy(address) => (
            StaticTopology {
                cells: vec![runway_cells::Cell {
                    id: 0,
                    address: (*address).to_owned(),
                    session_prefix: None,
                }],
                legacy_cell: 0,
            },
            "--legacy-cell".to_owned(),
        ),
    };
    for cell in &mut topology.cells {
        if CellsConfig::address(&cell.address).is_some() {
            continue;
        }
        let name = CellsConfig::host_port(&cell.address).to_owned();
        if cell.address.starts_with("https://") {
            bail!(
                "{}: cell {}: {} is HTTPS; the router reaches cells over plain HTTP (on a \
                 private network), e.g. http://cell-{}.internal:8080",
                topology_path,
                cell.id,
                cell.address,
                cell.id
            );
        }
        let resolved = tokio::net::lookup_host(name.as_str())
            .await
            .ok()
            .and_then(|mut found| found.next())
            .with_context(|| {
                format!(
                    "{}: cell {}: cannot resolve {:?} (expected host:port)",
                    topology_path, cell.id, cell.address
                )
            })?;
        cell.address = resolved.to_string();
    }
    Ok(RouteConfig {
        service: service.to_owned(),
        env: CELLS_ENV.to_owned(),
        domains,
        request_timeout_seconds: request_timeout.as_secs_f64(),
        sticky: false,
        revisions: Vec::new(),
        cells: Some(CellsConfig {
            rules,
            topology,
            topology_service,
        }),
        ..RouteConfig::new(service, CELLS_ENV)
    })
}
