//! The apiserver client every part of remedy uses: in-cluster or from the
//! kubeconfig, named by [`USER_AGENT`], every request through the slowdown
//! layer.

use super::slowdown;
use crate::USER_AGENT;

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
