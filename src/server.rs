//! HTTP surface: /metrics, /healthz, /readyz. The webhook route is added by
//! `signals::webhook` when configured.

use crate::metrics::{Format, Metrics};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;

/// Something that can say whether remedy is ready, and why not.
pub trait Readiness: Send + Sync + 'static {
    /// `Ok(notes)` when ready (notes name degraded parts, e.g. verification
    /// failing: remedy stays ready to keep taking webhooks, but says why it
    /// is not remediating); otherwise the reasons, one per line.
    fn check(&self) -> Result<Vec<String>, Vec<String>>;
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

async fn metrics(State(s): State<Http>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    match s.metrics.encode_as(format) {
        Ok(body) => ([(header::CONTENT_TYPE, format.content_type())], body).into_response(),
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
        Ok(notes) => {
            s.metrics.ready.set(1);
            (StatusCode::OK, listing("ready", "degraded: ", notes)).into_response()
        }
        Err(reasons) => {
            s.metrics.ready.set(0);
            (
                StatusCode::SERVICE_UNAVAILABLE,
                listing("not ready:", "", reasons),
            )
                .into_response()
        }
    }
}

fn listing(head: &str, prefix: &str, lines: Vec<String>) -> String {
    let mut body = format!("{head}\n");
    for l in lines {
        body.push_str("- ");
        body.push_str(prefix);
        body.push_str(&l);
        body.push('\n');
    }
    body
}
