//! remedy: turns Prometheus signals into safe, automatic remediation of stuck
//! cloud resources on Kubernetes.
//!
//! Pure decision logic (`classify`, `backoff`, `budget`, `remediate::plan`) has
//! no I/O; Kubernetes, HTTP and Prometheus live in the edge modules.

pub mod app;
pub mod authorship;
pub mod backoff;
pub mod budget;
pub mod classify;
pub mod cli;
pub mod config;
pub mod decide;
pub mod domains;
pub mod engine;
pub mod episodes;
pub mod fault;
pub mod fdlimit;
pub mod leader;
pub mod metrics;
pub mod preflight;
pub mod profile;
pub mod record;
pub mod recovery;
pub mod remediate;
pub mod scope;
pub mod server;
pub mod signals;
pub mod sim;
pub mod slowdown;
pub mod store;
pub mod supervise;
pub mod sync;
pub mod telemetry;
pub mod tls;
pub mod view;
pub mod watch;

/// Sent on every request to the apiserver, Prometheus and Alertmanager, so
/// their logs, audit events and `managedFields` name remedy and its version.
pub const USER_AGENT: &str = concat!("remedy/", env!("CARGO_PKG_VERSION"));

/// The in-cluster or kubeconfig client, identified by [`USER_AGENT`],
/// whose 429s are not exported (one-shot commands).
pub async fn kube_client() -> Result<kube::Client, kube::Error> {
    kube_client_observed(slowdown::layer::Observer::default()).await
}

/// As [`kube_client`], every request through one [`slowdown`] gate: a 429
/// makes all of remedy's clients (Lease, record, writes, watches) wait
/// together; counted and timed in `observer`.
pub async fn kube_client_observed(
    observer: slowdown::layer::Observer,
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
    let layer = slowdown::layer::SlowdownLayer::new(slowdown::Policy::default(), observer);
    Ok(kube::client::ClientBuilder::try_from(cfg)?
        .with_layer(&layer)
        .build())
}
