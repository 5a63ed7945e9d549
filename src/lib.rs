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
//! Pure layers import no tokio, kube client or reqwest
//! (scripts/check-layers.sh, run by scripts/test).

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

/// The in-cluster or kubeconfig client, identified by [`USER_AGENT`],
/// whose 429s are not exported (one-shot commands).
pub async fn kube_client() -> Result<kube::Client, kube::Error> {
    kube_client_observed(daemon::slowdown::layer::Observer::default()).await
}

/// As [`kube_client`], every request through one [`daemon::slowdown`] gate: a 429
/// makes all of remedy's clients (Lease, record, writes, watches) wait
/// together; counted and timed in `observer`.
pub async fn kube_client_observed(
    observer: daemon::slowdown::layer::Observer,
) -> Result<kube::Client, kube::Error> {
    let mut cfg = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    cfg.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_static(USER_AGENT),
    ));
    // kube's retry sends each 429'd request again on its own, 15 times:
    // the slowdown layer retries instead, behind the shared gate.
    cfg.default_retry = false;
    let layer =
        daemon::slowdown::layer::SlowdownLayer::new(daemon::slowdown::Policy::default(), observer);
    Ok(kube::client::ClientBuilder::try_from(cfg)?
        .with_layer(&layer)
        .build())
}
