//! The engine's own HTTP answers: `/status` (what it holds, waits for and
//! plans) and `/explain` (why one resource is held or waits).

use super::{Engine, STATUS_LIMIT, STATUS_MAX_LIMIT};
use axum::Json;
use axum::Router;
use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;

/// `GET /status?limit=N`: at most N entries per list.
#[derive(serde::Deserialize)]
struct StatusQuery {
    limit: Option<usize>,
}

/// `GET /explain?resource=NAMESPACE/KIND/NAME`.
#[derive(serde::Deserialize)]
struct ExplainQuery {
    resource: String,
}

/// NAMESPACE/KIND/NAME, the namespace empty for cluster-scoped kinds.
pub fn split_target(target: &str) -> Option<(&str, &str, &str)> {
    let mut parts = target.split('/');
    let (ns, kind, name) = (parts.next()?, parts.next()?, parts.next()?);
    (parts.next().is_none() && !kind.is_empty() && !name.is_empty()).then_some((ns, kind, name))
}

pub fn routes(engine: Arc<Engine>) -> Router {
    let explaining = engine.clone();
    Router::new()
        .route(
            "/status",
            get(move |q: Query<StatusQuery>| {
                let e = engine.clone();
                async move { status(&e, q.limit) }
            }),
        )
        .route(
            "/explain",
            get(move |q: Query<ExplainQuery>| {
                let e = explaining.clone();
                async move { explain(&e, &q.resource) }
            }),
        )
}

fn status(e: &Engine, limit: Option<usize>) -> Response {
    match limit.unwrap_or(STATUS_LIMIT) {
        n if n == 0 || n > STATUS_MAX_LIMIT => (
            StatusCode::BAD_REQUEST,
            format!("limit must be 1..={STATUS_MAX_LIMIT} (default {STATUS_LIMIT})\n"),
        )
            .into_response(),
        n => Json(e.report_limited(n)).into_response(),
    }
}

fn explain(e: &Engine, resource: &str) -> Response {
    let Some((ns, kind, name)) = split_target(resource) else {
        return (
            StatusCode::BAD_REQUEST,
            "resource must be NAMESPACE/KIND/NAME (an empty namespace for cluster-scoped kinds)\n",
        )
            .into_response();
    };
    match e.explain(ns, kind, name) {
        Some(x) => Json(x).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!("{resource}: not watched by this remedy (kind, namespace or name)\n"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::split_target;

    #[test]
    fn targets_are_namespace_kind_name() {
        assert_eq!(split_target("ns/Machine/m"), Some(("ns", "Machine", "m")));
        assert_eq!(split_target("/Cluster/c"), Some(("", "Cluster", "c")));
        assert_eq!(split_target("ns/Machine"), None);
        assert_eq!(split_target("ns//m"), None);
        assert_eq!(split_target("ns/Machine/m/x"), None);
    }
}
