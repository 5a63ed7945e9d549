//! `POST /webhook/alertmanager`: Alertmanager 0.25 webhook notifications
//! (payload version "4"). The body is untrusted: it is authenticated, size
//! bounded and fully validated before anything is remembered or forwarded.
//! The answer is fast and the work asynchronous, because Alertmanager waits
//! for us and retries 5xx (docs/upstream-behaviour.md, "Alertmanager
//! webhook retries").

//!
//! Split by concern: the payload and its validation ([`payload`]), the
//! bearer token and its rotation ([`auth`]), the INFO summary ([`summary`]);
//! the handler and its state here.

mod auth;
mod payload;
mod summary;
#[cfg(test)]
mod tests;

pub use auth::{
    REREAD_EVERY, Reread, TokenCheck, TokenStore, Tokens, load_token, record_reload, reread_plan,
};
pub use payload::{
    Alert, MAX_ALERTS, MAX_FINGERPRINT_BYTES, MAX_GROUP_KEY_BYTES, MAX_LABEL_BYTES, MAX_LABELS,
    Notification, ValidAlert, parse, validate,
};
pub use summary::{Summarizer, Summary, Tally};

use super::dedupe::{Dedupe, Delivery};
use super::{AlertEvent, AlertStatus, SignalError};
use crate::config::{AlertRule, WebhookConfig};
use crate::metrics::Metrics;
use crate::metrics::values::{WebhookResult, WebhookStatus};
use crate::model::scope::{AlertRules, MAX_VALUE_BYTES, Scope};
use crate::signals::inbox::Inbox;
use crate::sync::LockExt;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{self, error::TrySendError};

pub const PATH: &str = "/webhook/alertmanager";
/// Notifications are logged one by one at DEBUG only (Alertmanager can send
/// thousands a second); INFO gets a summary at most this often.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(60);
/// Rejection reasons echo input (serde quotes unknown values), so cap them.
const MAX_REASON_CHARS: usize = 200;

/// Why a notification was refused. `label` is the `result` metric label.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("missing or wrong bearer token")]
    Unauthorized,
    #[error("content type must be application/json")]
    UnsupportedMediaType,
    #[error("too large: {0}")]
    TooLarge(String),
    #[error("malformed JSON: {0}")]
    Malformed(String),
    #[error("invalid payload: {0}")]
    Invalid(String),
    #[error("queue full, retry later")]
    Overloaded(AlertStatus),
    #[error("not processing notifications, retry later")]
    Closed(AlertStatus),
    #[error("cannot record the notification for the leader ({1}), retry later")]
    Unrecorded(AlertStatus, crate::record::RecordError),
}

impl WebhookError {
    pub fn label(&self) -> &'static str {
        self.result().label()
    }

    fn result(&self) -> WebhookResult {
        match self {
            Self::Unauthorized => WebhookResult::Unauthorized,
            Self::TooLarge(_) => WebhookResult::TooLarge,
            Self::UnsupportedMediaType | Self::Malformed(_) | Self::Invalid(_) => {
                WebhookResult::Rejected
            }
            Self::Overloaded(_) | Self::Closed(_) => WebhookResult::Overloaded,
            Self::Unrecorded(..) => WebhookResult::Unrecorded,
        }
    }

    /// `status` metric label: only a payload that passed validation has one.
    fn status(&self) -> WebhookStatus {
        match self {
            Self::Overloaded(s) | Self::Closed(s) | Self::Unrecorded(s, _) => s.webhook_status(),
            _ => WebhookStatus::Invalid,
        }
    }

    fn http_status(&self) -> StatusCode {
        match self {
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Malformed(_) | Self::Invalid(_) => StatusCode::BAD_REQUEST,
            // 5xx so that Alertmanager retries (4xx is not retried).
            Self::Overloaded(_) | Self::Closed(_) | Self::Unrecorded(..) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }
}

impl IntoResponse for WebhookError {
    fn into_response(self) -> Response {
        let status = self.http_status();
        let body = format!("{self}\n");
        if matches!(self, Self::Unauthorized) {
            (status, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response()
        } else {
            (status, body).into_response()
        }
    }
}

pub(super) fn cap_reason(s: impl ToString) -> String {
    let s = s.to_string();
    match s.char_indices().nth(MAX_REASON_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

pub struct WebhookState {
    summary: Mutex<Summarizer>,
    tokens: Arc<TokenStore>,
    max_body_bytes: usize,
    alertnames: HashSet<String>,
    /// The configured alerts' selectors, to refuse alerts whose labels can
    /// match no object; empty when built from names only (`new`).
    rules: AlertRules,
    tx: mpsc::Sender<AlertEvent>,
    dedupe: Arc<Mutex<Dedupe>>,
    metrics: Arc<Metrics>,
    /// With several replicas: notifications go to the episode record, and
    /// are answered once they are in it.
    inbox: Option<Inbox>,
}

impl WebhookState {
    pub fn new(
        token: Arc<[u8]>,
        max_body_bytes: usize,
        alertnames: impl IntoIterator<Item = String>,
        tx: mpsc::Sender<AlertEvent>,
        dedupe: Arc<Mutex<Dedupe>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self::with_tokens(
            Arc::new(TokenStore::fixed(token)),
            max_body_bytes,
            alertnames,
            tx,
            dedupe,
            metrics,
        )
    }

    pub fn with_tokens(
        tokens: Arc<TokenStore>,
        max_body_bytes: usize,
        alertnames: impl IntoIterator<Item = String>,
        tx: mpsc::Sender<AlertEvent>,
        dedupe: Arc<Mutex<Dedupe>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            summary: Mutex::new(Summarizer::new(SUMMARY_EVERY, Instant::now())),
            tokens,
            max_body_bytes,
            alertnames: alertnames.into_iter().collect(),
            rules: AlertRules::default(),
            tx,
            dedupe,
            metrics,
            inbox: None,
        }
    }

    /// Records notifications in the episode record instead of the local
    /// queue (leader election on: the leader may be another replica).
    pub fn with_inbox(mut self, inbox: Inbox) -> Self {
        self.inbox = Some(inbox);
        self
    }

    /// From config; fails when `webhook.token_file` is unset, since remedy
    /// refuses unauthenticated writes. A replaced token stays accepted for
    /// `reload_interval`.
    pub fn from_config(
        cfg: &WebhookConfig,
        reload_interval: Duration,
        alerts: &[AlertRule],
        tx: mpsc::Sender<AlertEvent>,
        dedupe: Arc<Mutex<Dedupe>>,
        metrics: Arc<Metrics>,
    ) -> Result<Self, SignalError> {
        let path = cfg
            .token_file
            .as_deref()
            .ok_or(SignalError::NotConfigured("webhook.token_file"))?;
        let mut s = Self::with_tokens(
            Arc::new(TokenStore::from_file(path, reload_interval)?),
            cfg.max_body_bytes,
            alerts.iter().map(|a| a.alertname.clone()),
            tx,
            dedupe,
            metrics,
        );
        s.rules = AlertRules::new(alerts.to_vec());
        Ok(s)
    }

    async fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        let Some((scheme, token)) = value.split_once(' ') else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case("bearer") {
            return false;
        }
        let check = self.tokens.check(token.trim_start().as_bytes()).await;
        if let Some(result) = &check.reread {
            self.metrics.signals.token_rereads.inc();
            record_reload(&self.metrics, result, "unknown_token");
        }
        check.accepted
    }

    /// The token store, for the reload loop.
    pub fn tokens(&self) -> Arc<TokenStore> {
        self.tokens.clone()
    }

    /// Forwards new events one by one. The dedupe lock is held throughout so
    /// concurrent deliveries of one group cannot both forward an event, and
    /// an event is recorded only once it is queued, so a 503 loses nothing:
    /// Alertmanager's retry brings it again and it is accepted then.
    fn forward(
        &self,
        group_key: &str,
        alerts: Vec<ValidAlert>,
        now: DateTime<Utc>,
    ) -> Result<Summary, WebhookError> {
        let mut summary = Summary::default();
        let mut dedupe = self.dedupe.locked();
        for a in alerts {
            let Some(event) = self.sift(&mut dedupe, &mut summary, a, group_key, now) else {
                continue;
            };
            let (fingerprint, status, starts_at) =
                (event.fingerprint.clone(), event.status, event.starts_at);
            match self.tx.try_send(event) {
                Ok(()) => {
                    dedupe.remember(&fingerprint, status, starts_at, now);
                    summary.accepted += 1;
                    self.metrics
                        .signals
                        .notification(status.webhook_status(), WebhookResult::Accepted);
                }
                Err(TrySendError::Full(_)) => return Err(WebhookError::Overloaded(status)),
                Err(TrySendError::Closed(_)) => return Err(WebhookError::Closed(status)),
            }
        }
        Ok(summary)
    }

    /// The event for a new alert of a configured name whose labels can
    /// name an object; an ignored, unselectable or duplicate one is counted
    /// and gives none.
    fn sift(
        &self,
        dedupe: &mut Dedupe,
        summary: &mut Summary,
        a: ValidAlert,
        group_key: &str,
        now: DateTime<Utc>,
    ) -> Option<AlertEvent> {
        let status = a.status;
        let Some(alertname) = a.alertname.filter(|n| self.alertnames.contains(n)) else {
            summary.ignored += 1;
            self.metrics
                .signals
                .notification(status.webhook_status(), WebhookResult::Ignored);
            return None;
        };
        if let Some(why) = self.unselectable(&alertname, &a.labels) {
            // Nothing reaches the engine or the episode record: the leader
            // would refuse it, and a misrouted Alertmanager must not look
            // like a working one. Not remembered: a repeat is refused again.
            summary.unselectable += 1;
            summary.unselectable_why.get_or_insert(why);
            self.metrics
                .signals
                .notification(status.webhook_status(), WebhookResult::Unselectable);
            return None;
        }
        if dedupe.check(&a.fingerprint, status, a.starts_at, now) != Delivery::New {
            summary.duplicate += 1;
            self.metrics
                .signals
                .notification(status.webhook_status(), WebhookResult::Duplicate);
            return None;
        }
        Some(AlertEvent {
            fingerprint: a.fingerprint,
            alertname,
            status,
            labels: a.labels,
            starts_at: a.starts_at,
            ends_at: a.ends_at,
            group_key: group_key.to_string(),
            received_at: now,
        })
    }
}

impl WebhookState {
    /// Why an alert's scope can match no object (a value it selects on is
    /// longer than any object name, see [`Scope::is_selectable`]), or
    /// `None` when it can. Names only the label, which is from the config.
    fn unselectable(
        &self,
        alertname: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> Option<String> {
        let scope = Scope::from_alert(self.rules.get(alertname)?, labels);
        if scope.is_selectable() {
            return None;
        }
        let long = scope
            .matchers
            .iter()
            .find(|(_, v)| v.len() > MAX_VALUE_BYTES);
        Some(match long {
            Some((label, v)) => format!(
                "alert {alertname}: label {label} is {} bytes, longer than any object name ({MAX_VALUE_BYTES})",
                v.len()
            ),
            None => format!("alert {alertname}: its labels can match no object"),
        })
    }

    /// The episode-record path: new events are written to the record, and
    /// only once the write is in are they remembered as seen, so a failed
    /// write loses nothing (503: Alertmanager sends them again). Two
    /// replicas given the same notification both write it; the record
    /// keeps one.
    async fn forward_durable(
        &self,
        inbox: &Inbox,
        group_key: &str,
        alerts: Vec<ValidAlert>,
        now: DateTime<Utc>,
    ) -> Result<Summary, WebhookError> {
        let mut summary = Summary::default();
        let mut fresh = Vec::new();
        {
            let mut dedupe = self.dedupe.locked();
            for a in alerts {
                if let Some(event) = self.sift(&mut dedupe, &mut summary, a, group_key, now) {
                    fresh.push(event);
                }
            }
        }
        let Some(first) = fresh.first() else {
            return Ok(summary);
        };
        if let Err(e) = inbox.submit(&fresh).await {
            return Err(WebhookError::Unrecorded(first.status, e));
        }
        let mut dedupe = self.dedupe.locked();
        for ev in &fresh {
            dedupe.remember(&ev.fingerprint, ev.status, ev.starts_at, now);
            summary.accepted += 1;
            self.metrics
                .signals
                .notification(ev.status.webhook_status(), WebhookResult::Accepted);
        }
        Ok(summary)
    }
}

/// The webhook route, to be merged with `server::router`.
pub fn router(state: WebhookState) -> Router {
    let limit = state.max_body_bytes;
    Router::new()
        .route(PATH, post(notify))
        // The body is streamed through this limit, never buffered beyond it.
        .layer(DefaultBodyLimit::max(limit))
        .with_state(Arc::new(state))
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

impl WebhookState {
    fn summarize(&self, outcome: Result<&Summary, &'static str>) {
        let due = self.summary.locked().add(outcome, Instant::now());
        let Some((t, covered)) = due else {
            return;
        };
        let refused: u64 = t.refused.values().sum();
        let refused_by = format!("{:?}", t.refused);
        if refused > 0 || t.unselectable > 0 {
            tracing::warn!(
                notifications = t.notifications,
                alerts_accepted = t.accepted,
                duplicate = t.duplicate,
                ignored = t.ignored,
                unselectable = t.unselectable,
                refused,
                refused_by,
                seconds = covered.as_secs(),
                "alertmanager notifications, some refused"
            );
        } else {
            tracing::info!(
                notifications = t.notifications,
                alerts_accepted = t.accepted,
                duplicate = t.duplicate,
                ignored = t.ignored,
                seconds = covered.as_secs(),
                "alertmanager notifications"
            );
        }
    }
}

async fn notify(State(s): State<Arc<WebhookState>>, req: Request) -> Response {
    let result = handle(&s, req).await;
    s.summarize(result.as_ref().map_err(WebhookError::label));
    match result {
        Ok(sum) => {
            tracing::debug!(
                accepted = sum.accepted,
                duplicate = sum.duplicate,
                ignored = sum.ignored,
                unselectable = sum.unselectable,
                "alertmanager notification"
            );
            answer(&sum).into_response()
        }
        Err(e) => {
            s.metrics.signals.notification(e.status(), e.result());
            // DEBUG: a sender can repeat this thousands of times a second;
            // the summary reports refusals at WARN.
            tracing::debug!(result = e.label(), error = %e, "alertmanager notification refused");
            e.into_response()
        }
    }
}

/// The body of a 200: what became of the alerts, and why some were
/// refused, so that whoever reads it can tell a misrouted Alertmanager (or
/// a rule whose labels carry something else than object names) from one
/// that works.
fn answer(sum: &Summary) -> String {
    let mut body = format!(
        "accepted {}, duplicate {}, ignored {}, unselectable {}\n",
        sum.accepted, sum.duplicate, sum.ignored, sum.unselectable
    );
    if let Some(why) = &sum.unselectable_why {
        body.push_str(&format!(
            "refused {} alert(s) whose labels can match no object, nothing recorded; the first: {why}\n",
            sum.unselectable
        ));
    }
    body
}

async fn handle(s: &WebhookState, req: Request) -> Result<Summary, WebhookError> {
    // Authenticate before reading any of the body.
    if !s.authorized(req.headers()).await {
        return Err(WebhookError::Unauthorized);
    }
    if !is_json(req.headers()) {
        return Err(WebhookError::UnsupportedMediaType);
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > s.max_body_bytes as u64) {
        return Err(WebhookError::TooLarge(format!(
            "body over {} bytes",
            s.max_body_bytes
        )));
    }
    let body = Bytes::from_request(req, &()).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            WebhookError::TooLarge(format!("body over {} bytes", s.max_body_bytes))
        } else {
            WebhookError::Malformed(cap_reason(e.body_text()))
        }
    })?;
    let (n, alerts) = parse(&body)?;
    if n.truncated_alerts > 0 {
        // Those alerts never reach us; max_alerts on the receiver is too low.
        tracing::warn!(
            truncated = n.truncated_alerts,
            receiver = %n.receiver,
            "Alertmanager truncated the notification"
        );
    }
    match &s.inbox {
        Some(inbox) => {
            s.forward_durable(inbox, &n.group_key, alerts, Utc::now())
                .await
        }
        None => s.forward(&n.group_key, alerts, Utc::now()),
    }
}
