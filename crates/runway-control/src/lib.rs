//! Runway's control loop: the reconciler's executor and the deployment controller.
//!
//! The control plane (`runway server`) holds one [`Controller`]. It makes the desired state in
//! the store true on a [`Driver`](runway_driver::Driver) (this machine's supervisors, or a
//! cluster) and in the ingress, through the [`DataPlane`] trait (the ingress in its own
//! process, or in this one), level-triggered, and
//! moves deployments through their states with events that explain every step and every
//! failure. It is generic over the driver and does not link `runway-runtime` or `runway-kube`;
//! only its tests and benches do.
//!
//! # The loop
//!
//! [`Controller::run`] runs a round every `reconcile_interval_ms`, sooner when a service's
//! plan says a drain grace or a start timeout falls due, at once on [`Controller::wake`],
//! when the driver reports a change (a replica ready, failed or gone) and when the ingress
//! holds requests for a revision (its scale-up signal). A round reads everything once
//! (steps 1 and 2 below) and then reconciles each service in each environment on its own
//! (steps 3 and 4), up to `reconcile_concurrency` at once: one whose driver call is slow (an
//! image pull, a cluster's API, a long stop) holds up neither the others nor the next round,
//! which leaves it alone until it is done. Each keeps its own state behind its own lock, and
//! publishes its entry in the ingress's table to the propagator, which sets one table at a
//! time. [`Controller::reconcile_all`] is one round that waits for every service (the tests'
//! pass); [`Controller::reconcile`] is one service's pass over a desired state and replicas
//! the caller read.
//!
//! 1. reads every desired state from the store and every replica ("instance") from the
//!    driver;
//! 2. gives each instance to its service and environment through its revision (the id minus
//!    its last `-` segment, which must be the revision the driver reports). The instances it
//!    starts are marked as the platform's and the driver reports them
//!    `managed`, with their service and revision: one whose revision the store no longer has
//!    (its service was decommissioned, perhaps while the control plane was down) goes with that
//!    service and environment, where nothing is desired, and is drained and stopped. Other
//!    instances (a developer's `runway run`) are left alone;
//! 3. for each service/env (desired, or with instances or routes but no desired state any
//!    more: decommissioned) builds the planner's input: the desired revisions, the instances
//!    with their state (the driver's phase and readiness; failures with its reason,
//!    exit code or signal), and the routes this controller last applied (kept in memory; after
//!    a restart, the weights of the table the data plane serves, or else the desired state's);
//! 4. plans with [`runway_reconciler::plan`] and applies the actions in order, then moves the
//!    deployment in progress, if any. The planner stays pure: the same input, the same plan.
//!
//! Startup, recovery and normal work are this same round: a new controller over a driver that
//! already runs instances adopts them (the planner finds the counts met, so nothing restarts)
//! and sets the routes from the ready ones.
//!
//! # Actions
//!
//! | action | driver | ingress |
//! | --- | --- | --- |
//! | `Start` | one more replica in the revision's `scale` | — |
//! | `Replace` | the dead one in `scale`'s `retire`, and one more replica | the dead one marked draining |
//! | `SetRoutes` | — | the weights remembered, the whole table rebuilt and set |
//! | `Drain` | — | the instance stays in the table with `draining: true`; `DataPlane::drain` in the background |
//! | `Stop` | in `retire` (or `scale`'s, with a start) | marked draining until the driver lists it no more |
//!
//! The starts and stops of one revision in a pass go to the driver as one call, after the
//! routes and drains, with the revision's [`Workload`](runway_driver::Workload): its manifest's
//! settings, its pinned image or code snapshot, its variables and its opened secrets. A
//! replica the driver is stopping already is left to it (a worker's grace may last an hour),
//! and its stop is told in its deployment's events once the driver lists it no more. A
//! revision no longer desired, routed or running is `remove`d from the driver (a cluster's
//! objects for it deleted).
//!
//! The table holds every service with routes: each routed revision (and each other revision
//! with instances, at weight 0, so its `r{number}---` tag host answers) with its ready,
//! non-draining instances at the addresses the driver reports, its draining ones marked so, the manifest's
//! concurrency, request timeout and protocol (h2c for `HTTP2` and `grpc`). It is set only when
//! it changed. Every action is idempotent: planning again on the same state is harmless.
//!
//! # Deployments
//!
//! ```text
//! Pending ──▶ Progressing ──▶ Succeeded   routes = desired weights, target revision Ready
//!                  │
//!                  └────────▶ Failed      not so within deploy_timeout_ms of its creation,
//!                                         or its revision can never start (manifest, spec,
//!                                         secret); the desired state is set back to the
//!                                         previous revision at weight 100
//! ```
//!
//! While a deployment is in progress every step is an event: instances started, ready,
//! failed (with the reason), traffic changes (`traffic: hello-dev-00002 100%`), drains and
//! stops. A failure's reason says why (the probe, exit code or signal, as the supervisor
//! reported it) and carries the last lines the failing instance wrote. Rollbacks and
//! promotions are deployments like any other.
//!
//! # Progressive delivery
//!
//! When the new revision's manifest names `regional_rollout`, `runway_canary`,
//! `runway_blue_green` or `dryrun`, each pass first steps the deployment's rollout
//! (`rollout.rs`, over `runway_rollout::next`): the stable and new revisions' weights go into
//! the desired state (with the store's generation check), and the planner then moves traffic
//! as always, only to ready instances. A canary's window is analysed from the ingress's
//! counters ([`runway_ingress::Ingress::revision_stats`]) against the stable revision's; a
//! failed window, an abort, or a new revision short of ready instances for the deploy timeout
//! puts all traffic back on the stable revision and ends the deployment `RolledBack` with the
//! reason. The progress and an operator's pending command (pause, resume, abort, promote)
//! are stored on the deployment, so a restart carries on. A rollout completes with the new
//! revision alone in the desired state and succeeds once the routes are its own.
//!
//! # Autoscaling
//!
//! Every `autoscale_interval_ms`, and at once when the ingress holds a request for a revision
//! with no ready instance, `autoscale.rs` samples each routed revision's requests in flight,
//! queued and held, decides with `runway_autoscaler::decide` (Knative's rules, bounded by the
//! manifest's `min_instances` and `max_instances`) and sets its instance count in the desired
//! state. With `min_instances: 0` a quiet revision goes to zero while keeping its route, so
//! the ingress holds its next request while an instance starts. Workers are not autoscaled.
//!
//! # Secrets
//!
//! Each secret version a revision pins is read from the store and opened with the master key
//! (bound to its service, environment, name and version) just before replicas start, and
//! reaches the driver only in the workload's `secrets`. A secret that cannot be opened
//! fails the start with a reason naming the secret and its version, never a value.
//!
//! # Files
//!
//! - `controller.rs`: [`Controller`]: the loop, one service's pass and its actions on the
//!   driver and the data plane. `state.rs`: what it keeps in memory between rounds, none of it
//!   needed to recover.
//! - `deploy.rs`: moves each deployment through its states; a failed one puts the previous
//!   revision back. `events.rs`: the deployments' events, written in order by their own task,
//!   kept in memory while the store refuses them. `rollout.rs`: steps a progressive deployment before the planner
//!   runs, and what the API shows of it. `autoscale.rs`: sets each serving revision's instance
//!   count from its demand at the ingress, and what the API shows of it.
//! - `propagate.rs`: the route table's one owner, which alone sets it on the data plane.
//!   `table.rs`: one service's entry in that table. `dataplane.rs`: the [`DataPlane`] trait,
//!   all the controller asks of an ingress.
//! - `observe.rs`: the driver's replicas as the planner's instances. `revision.rs`: a revision
//!   and its manifest's settings, read once. `workload.rs`: what the driver runs a revision
//!   with, its secrets opened.
//! - `status.rs`: each service's weights and revision conditions, published on a `watch` for
//!   the API. `api.rs`: what the API reads from the controller. `traffic.rs`: each routed
//!   revision's request rate, 5xx ratio and p99 over the last minutes.
//! - `leader.rs`: the election among replicas on one store ([`leader::Election`]).
//! - `edge.rs`: the custom domains, certificates and ACME challenges every table carries.
//!   `acme.rs`: their certificates from an ACME directory ([`acme::Issuer`]).
//! - `config.rs`: [`ControllerConfig`]. `error.rs`: [`ControlError`]. `key.rs`: a service in
//!   one environment, as everything above names it.
//! - `tests/`: `controller.rs` over an in-memory driver, a real store and a real ingress
//!   (`tests/common/`); `leader.rs`, the election over a real store; `local.rs`, end to end on
//!   the real local runtime. `benches/`: `reconcile.rs`, 1,000 services over the in-memory
//!   driver; `kubernetes.rs`, 1,000 over the Kubernetes driver and a real control plane.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

/// The name the controller writes in the audit log.
pub(crate) const ACTOR: &str = "reconciler";

pub mod acme;
mod api;
mod autoscale;
mod config;
mod controller;
mod dataplane;
mod deploy;
pub mod edge;
mod error;
mod events;
pub mod identity;
mod key;
pub mod leader;
mod observe;
mod propagate;
mod revision;
mod rollout;
mod state;
mod status;
mod table;
mod traffic;
mod workload;

pub use api::InstanceSummary;
pub use autoscale::ScalingSummary;
pub use config::ControllerConfig;
pub use controller::{Controller, Reconciled};
pub use dataplane::{BoxFuture, DataPlane};
pub use error::{ControlError, Result};
pub use rollout::{AnalysisSummary, CheckSummary, RolloutSummary, WindowFigures};
pub use traffic::RevisionTraffic;
