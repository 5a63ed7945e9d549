//! remedy: turns Prometheus signals into safe, automatic remediation of stuck
//! cloud resources on Kubernetes.
//!
//! Layers, each a folder (docs/architecture.md has the picture):
//! - `model`: resources, profiles, classification, backoff, scopes. Pure.
//! - `decide`: breakers, budget, pace, episodes, recovery, retries: what to
//!   do, given facts and a clock. Pure; the daemon and `sim` share it.
//! - `remediate`: goals and the steps that reach them. Pure.
//! - `record`: the episode record document (pure) and its ConfigMap I/O.
//! - `metrics`, `supervise`, `sync`: shared by every I/O edge: the metric
//!   registry, task supervision and poison-is-fatal locks.
//! - `signals`: Alertmanager's webhook (and its inbox in the record),
//!   Prometheus and Alertmanager clients.
//! - `sim`: the simulator of fleets, outages and retry policies. Pure.
//! - `daemon`: the process: app wiring, engine loop, the executor of goals,
//!   watches, store, leader election, HTTP server, TLS, telemetry.
//! - `cli`: the subcommands.
//!
//! Pure layers import no tokio, kube client or reqwest, and the crate root
//! imports no layer (scripts/check-layers.py, run by scripts/test).

pub mod cli;
pub mod config;
pub mod daemon;
pub mod decide;
pub mod metrics;
pub mod model;
pub mod record;
pub mod remediate;
pub mod signals;
pub mod sim;
pub mod supervise;
pub mod sync;
#[cfg(test)]
pub(crate) mod testkit;

/// Sent on every request to the apiserver, Prometheus and Alertmanager, so
/// their logs, audit events and `managedFields` name remedy and its version.
pub const USER_AGENT: &str = concat!("remedy/", env!("CARGO_PKG_VERSION"));
