//! Signals from Prometheus and Alertmanager: the Alertmanager webhook
//! (inbound, untrusted) and the query client that verifies an alert is
//! cleared before remedy acts (outbound, fail safe).

pub mod client;
pub mod dedupe;
pub mod inbox;
pub mod verify;
pub mod webhook;

pub use dedupe::{Dedupe, Delivery};
pub use verify::{Clearance, SignalHealth, Verifier};
pub use webhook::{WebhookError, WebhookState, load_token, router};

use crate::metrics::values::WebhookStatus;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Status of one alert as Alertmanager reports it. The order (Firing before
/// Resolved) is the order within one episode; `dedupe` relies on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertStatus {
    Firing,
    Resolved,
}

impl AlertStatus {
    /// Metric label value.
    #[cfg(test)]
    pub fn as_str(self) -> &'static str {
        self.webhook_status().label()
    }

    /// The `status` of `remedy_webhook_notifications_total`.
    pub fn webhook_status(self) -> WebhookStatus {
        match self {
            Self::Firing => WebhookStatus::Firing,
            Self::Resolved => WebhookStatus::Resolved,
        }
    }
}

/// One alert from one notification, already validated and deduplicated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertEvent {
    pub fingerprint: String,
    pub alertname: String,
    pub status: AlertStatus,
    pub labels: BTreeMap<String, String>,
    pub starts_at: DateTime<Utc>,
    /// `None` when Alertmanager sent Go's zero time (unset).
    pub ends_at: Option<DateTime<Utc>>,
    pub group_key: String,
    pub received_at: DateTime<Utc>,
}

/// Query targets; also the `target` metric label, which is where they are
/// defined.
pub use crate::metrics::values::{ALERTMANAGER, PROMETHEUS};

/// Errors at the signals boundary: the token file and the outbound queries.
/// Every variant makes `cleared` fail, never succeed.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    #[error("webhook token {path}: {reason}")]
    Token { path: PathBuf, reason: String },
    #[error("{0} is not configured: remedy never remediates without proof")]
    NotConfigured(&'static str),
    #[error("cannot build HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    #[error("invalid query input: {0}")]
    InvalidInput(String),
    #[error("{target} unreachable: {source}")]
    Unreachable {
        target: &'static str,
        #[source]
        source: reqwest::Error,
    },
    #[error("{target} did not answer in time")]
    Timeout { target: &'static str },
    #[error("{target} answered HTTP {status}")]
    HttpStatus { target: &'static str, status: u16 },
    #[error("{target} answered something unexpected: {reason}")]
    Malformed {
        target: &'static str,
        reason: String,
    },
    #[error("{target} credentials or CA {path}: {reason}")]
    Credentials {
        target: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("{target} rejected the query ({error_type}): {message}")]
    QueryError {
        target: &'static str,
        error_type: String,
        message: String,
    },
}

impl SignalError {
    /// Stable label for metrics and readiness.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Token { .. } => "token",
            Self::Credentials { .. } => "credentials",
            Self::NotConfigured(_) => "not_configured",
            Self::Client(_) => "client",
            Self::InvalidInput(_) => "invalid_input",
            Self::Unreachable { .. } => "unreachable",
            Self::Timeout { .. } => "timeout",
            Self::HttpStatus { .. } => "http_status",
            Self::Malformed { .. } => "malformed",
            Self::QueryError { .. } => "query_error",
        }
    }
}

/// A label name as Prometheus 3 and Alertmanager 0.28+ accept it: any
/// non-empty UTF-8 string (`k8s.namespace.name` from OpenTelemetry, for
/// one). Refusing the others would refuse a whole notification for one
/// label. Names outside [`legacy_label_name`] are quoted in PromQL and in
/// Alertmanager matchers, which 2.x and 0.25 cannot parse; they never send
/// such names either.
pub fn valid_label_name(name: &str) -> bool {
    !name.is_empty()
}

/// Prometheus 2.x / Alertmanager 0.25 label names, `[a-zA-Z_][a-zA-Z0-9_]*`:
/// written bare in PromQL and matchers, so older servers read them too.
pub fn legacy_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_names_are_utf8_and_the_legacy_ones_are_told_apart() {
        for ok in ["a", "_", "alertname", "A_1", "_x9"] {
            assert!(valid_label_name(ok), "{ok}");
            assert!(legacy_label_name(ok), "{ok}");
        }
        for utf8 in [
            "1a",
            "a-b",
            "k8s.namespace.name",
            "a b",
            "é",
            "a\"",
            "a}",
            "a=b",
        ] {
            assert!(valid_label_name(utf8), "{utf8:?}");
            assert!(!legacy_label_name(utf8), "{utf8:?}");
        }
        assert!(!valid_label_name(""));
        assert!(!legacy_label_name(""));
    }
}
