//! `remedy serve`: wires config, watchers, store, metrics and HTTP together.

use crate::config::Validated;
use crate::metrics::Metrics;
use crate::server::{self, Http, Readiness};
use crate::store::Store;
use crate::watch;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot reach Kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP server failed: {0}")]
    Http(#[source] std::io::Error),
}

impl ServeError {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Kube(_) => "kube",
            Self::Listen { .. } => "listen",
            Self::Http(_) => "http",
        }
    }
}

/// Ready once every watch stream has completed its initial list.
struct WatchReadiness {
    store: Arc<Store>,
    streams: Vec<String>,
}

impl Readiness for WatchReadiness {
    fn check(&self) -> Result<(), Vec<String>> {
        let missing: Vec<String> = self
            .streams
            .iter()
            .filter(|s| !self.store.is_synced(s))
            .map(|s| format!("watch {s}: initial list not synced yet"))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing)
        }
    }
}

pub async fn serve(v: Validated) -> Result<(), ServeError> {
    let cfg = v.config;
    let metrics = Arc::new(Metrics::new(cfg.max_resource_series));
    let store = Arc::new(Store::new(
        v.profiles.clone(),
        v.classifier,
        cfg.backoff.clone(),
        metrics.clone(),
    ));
    let client = kube::Client::try_default().await?;

    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|source| ServeError::Listen {
            addr: cfg.listen,
            source,
        })?;
    tracing::info!(addr = %cfg.listen, dry_run = cfg.dry_run, "listening");

    for (i, _) in v.profiles.iter().enumerate() {
        if cfg.namespaces.is_empty() {
            tokio::spawn(watch::run(client.clone(), store.clone(), i, None));
        } else {
            for ns in &cfg.namespaces {
                tokio::spawn(watch::run(
                    client.clone(),
                    store.clone(),
                    i,
                    Some(ns.clone()),
                ));
            }
        }
    }

    let readiness = Arc::new(WatchReadiness {
        store: store.clone(),
        streams: watch::stream_ids(&v.profiles, &cfg.namespaces),
    });
    let app = server::router(Http { metrics, readiness });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown())
        .await
        .map_err(ServeError::Http)
}

async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}
