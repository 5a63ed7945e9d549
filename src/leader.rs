//! Leader election on a coordination.k8s.io Lease. Only the leader writes;
//! followers watch and export metrics. The flag is checked before every
//! write, so a leader that loses its lease stops mid-release and the new
//! leader carries on from what the objects themselves record.

use crate::config::LeaderConfig;
use crate::metrics::Metrics;
use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("cannot set up the leader lease: {0}")]
    Lease(#[from] kube_lease_manager::LeaseManagerError),
}

impl LeaderError {
    pub fn label(&self) -> &'static str {
        "lease"
    }
}

/// Shared "am I the leader" flag.
#[derive(Clone, Debug)]
pub struct Leadership(Arc<AtomicBool>);

impl Leadership {
    pub fn fixed(leader: bool) -> Self {
        Self(Arc::new(AtomicBool::new(leader)))
    }

    pub fn is_leader(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    pub fn set(&self, leader: bool) {
        self.0.store(leader, Ordering::SeqCst);
    }
}

/// This instance's identity: the pod name when deployed, else host + pid.
pub fn identity() -> String {
    std::env::var("POD_NAME").unwrap_or_else(|_| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "remedy".into());
        format!("{host}-{}", std::process::id())
    })
}

/// Starts the election; the returned flag follows the lease.
pub async fn start(
    client: Client,
    cfg: &LeaderConfig,
    identity: String,
    metrics: Arc<Metrics>,
) -> Result<Leadership, LeaderError> {
    let flag = Leadership::fixed(!cfg.enabled);
    metrics.leader.set(i64::from(flag.is_leader()));
    if !cfg.enabled {
        return Ok(flag);
    }
    let duration = cfg.lease_duration.as_secs().max(2);
    // Renew well before expiry: a third of the lease, at least one second.
    let grace = (duration / 3).max(1);
    let manager = LeaseManagerBuilder::new(client, &cfg.lease_name)
        .with_namespace(&cfg.namespace)
        .with_identity(&identity)
        .with_duration(duration)
        .with_grace(grace)
        .build()
        .await?;
    let (mut rx, _task) = manager.watch().await;
    let f = flag.clone();
    tokio::spawn(async move {
        loop {
            let leader = *rx.borrow_and_update();
            if leader != f.is_leader() {
                tracing::info!(identity = %identity, leader, "leadership changed");
            }
            f.set(leader);
            metrics.leader.set(i64::from(leader));
            if rx.changed().await.is_err() {
                // The lease task ended: stop acting rather than guess.
                f.set(false);
                metrics.leader.set(0);
                tracing::error!("lease manager stopped; acting as follower");
                return;
            }
        }
    });
    Ok(flag)
}
