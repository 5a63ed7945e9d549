//! HTTP surface: /metrics, /healthz, /readyz. The webhook route is added by
//! `signals::webhook` when configured.

use crate::metrics::{CONTENT_TYPE, Metrics};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;

/// Something that can say whether remedy is ready, and why not.
pub trait Readiness: Send + Sync + 'static {
    /// `Ok(())` when ready; otherwise the reasons, one per line.
    fn check(&self) -> Result<(), Vec<String>>;
}

#[derive(Clone)]
pub struct Http {
    pub metrics: Arc<Metrics>,
    pub readiness: Arc<dyn Readiness>,
}

pub fn router(state: Http) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn metrics(State(s): State<Http>) -> Response {
    match s.metrics.encode() {
        Ok(body) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "metrics encoding failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "metrics encoding failed\n",
            )
                .into_response()
        }
    }
}

async fn readyz(State(s): State<Http>) -> Response {
    match s.readiness.check() {
        Ok(()) => {
            s.metrics.ready.set(1);
            (StatusCode::OK, "ready\n").into_response()
        }
        Err(reasons) => {
            s.metrics.ready.set(0);
            let mut body = String::from("not ready:\n");
            for r in reasons {
                body.push_str("- ");
                body.push_str(&r);
                body.push('\n');
            }
            (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
        }
    }
}
