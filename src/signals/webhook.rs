//! `POST /webhook/alertmanager`: Alertmanager 0.25 webhook notifications
//! (payload version "4"). The body is untrusted: it is authenticated, size
//! bounded and fully validated before anything is remembered or forwarded.
//! The answer is fast and the work asynchronous, because Alertmanager waits
//! for us and retries 5xx (docs/upstream-behaviour.md, "Alertmanager
//! webhook retries").

use super::dedupe::{Dedupe, Delivery};
use super::{AlertEvent, AlertStatus, SignalError, valid_label_name};
use crate::config::{AlertRule, WebhookConfig};
use crate::metrics::Metrics;
use crate::signals::inbox::Inbox;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;
use tokio::sync::mpsc::{self, error::TrySendError};

pub const PATH: &str = "/webhook/alertmanager";
/// Alertmanager's `max_alerts` is unbounded by default; this bounds work
/// per request.
pub const MAX_ALERTS: usize = 10_000;
pub const MAX_LABEL_BYTES: usize = 1024;
pub const MAX_LABELS: usize = 256;
/// Alertmanager fingerprints are 16 hex digits; allow some slack.
pub const MAX_FINGERPRINT_BYTES: usize = 64;
pub const MAX_GROUP_KEY_BYTES: usize = 16 * 1024;
const MAX_TOKEN_BYTES: usize = 4096;
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
        match self {
            Self::Unauthorized => "unauthorized",
            Self::TooLarge(_) => "too_large",
            Self::UnsupportedMediaType | Self::Malformed(_) | Self::Invalid(_) => "rejected",
            Self::Overloaded(_) | Self::Closed(_) => "overloaded",
            Self::Unrecorded(..) => "unrecorded",
        }
    }

    /// `status` metric label: only a payload that passed validation has one.
    fn status_label(&self) -> &'static str {
        match self {
            Self::Overloaded(s) | Self::Closed(s) | Self::Unrecorded(s, _) => s.as_str(),
            _ => "invalid",
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

fn cap_reason(s: impl ToString) -> String {
    let s = s.to_string();
    match s.char_indices().nth(MAX_REASON_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// Go's nil maps marshal as `null`; treat that as empty for maps we only
/// carry along.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Webhook payload version "4". Unknown fields are ignored on purpose: newer
/// Alertmanagers add fields and must keep working.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    pub version: String,
    pub group_key: String,
    #[serde(default)]
    pub truncated_alerts: u64,
    pub status: AlertStatus,
    #[serde(default)]
    pub receiver: String,
    #[serde(default, deserialize_with = "nullable")]
    pub group_labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub common_labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub common_annotations: BTreeMap<String, String>,
    #[serde(default, rename = "externalURL")]
    pub external_url: String,
    pub alerts: Vec<Alert>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    pub status: AlertStatus,
    pub labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub annotations: BTreeMap<String, String>,
    /// RFC 3339; checked in `validate` so the error names the alert.
    pub starts_at: String,
    #[serde(default)]
    pub ends_at: Option<String>,
    #[serde(default, rename = "generatorURL")]
    pub generator_url: String,
    pub fingerprint: String,
}

/// An alert that passed validation.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidAlert {
    pub fingerprint: String,
    pub alertname: Option<String>,
    pub status: AlertStatus,
    pub labels: BTreeMap<String, String>,
    pub starts_at: DateTime<Utc>,
    pub ends_at: Option<DateTime<Utc>>,
}

/// Go's zero `time.Time`, which Alertmanager sends for "unset".
fn is_go_zero(t: &DateTime<Utc>) -> bool {
    *t == DateTime::<Utc>::from_naive_utc_and_offset(
        chrono::NaiveDate::from_ymd_opt(1, 1, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .unwrap_or_default(),
        Utc,
    )
}

fn parse_time(field: &str, value: &str) -> Result<DateTime<Utc>, WebhookError> {
    DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| WebhookError::Invalid(cap_reason(format!("{field}: not RFC 3339 ({e})"))))
}

fn check_labels(at: &str, labels: &BTreeMap<String, String>) -> Result<(), WebhookError> {
    if labels.len() > MAX_LABELS {
        return Err(WebhookError::Invalid(format!(
            "{at}.labels: more than {MAX_LABELS} labels"
        )));
    }
    for (k, v) in labels {
        if k.len() > MAX_LABEL_BYTES || v.len() > MAX_LABEL_BYTES {
            return Err(WebhookError::Invalid(format!(
                "{at}.labels: name or value longer than {MAX_LABEL_BYTES} bytes"
            )));
        }
        // These names end up in PromQL and Alertmanager matchers.
        if !valid_label_name(k) {
            return Err(WebhookError::Invalid(cap_reason(format!(
                "{at}.labels: invalid label name {k:?}"
            ))));
        }
    }
    Ok(())
}

/// Parses a body into validated alerts; nothing is remembered yet.
pub fn parse(body: &[u8]) -> Result<(Notification, Vec<ValidAlert>), WebhookError> {
    let n: Notification = serde_json::from_slice(body).map_err(|e| {
        if e.is_data() {
            WebhookError::Invalid(cap_reason(e))
        } else {
            WebhookError::Malformed(cap_reason(e))
        }
    })?;
    let alerts = validate(&n)?;
    Ok((n, alerts))
}

pub fn validate(n: &Notification) -> Result<Vec<ValidAlert>, WebhookError> {
    if n.version != "4" {
        return Err(WebhookError::Invalid(cap_reason(format!(
            "unsupported version {:?}, want \"4\"",
            n.version
        ))));
    }
    if n.alerts.len() > MAX_ALERTS {
        return Err(WebhookError::TooLarge(format!(
            "{} alerts, at most {MAX_ALERTS}",
            n.alerts.len()
        )));
    }
    if n.group_key.len() > MAX_GROUP_KEY_BYTES {
        return Err(WebhookError::Invalid(format!(
            "groupKey longer than {MAX_GROUP_KEY_BYTES} bytes"
        )));
    }
    n.alerts
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let at = format!("alerts[{i}]");
            if a.fingerprint.is_empty()
                || a.fingerprint.len() > MAX_FINGERPRINT_BYTES
                || !a.fingerprint.bytes().all(|b| b.is_ascii_alphanumeric())
            {
                return Err(WebhookError::Invalid(format!(
                    "{at}.fingerprint: must be 1..={MAX_FINGERPRINT_BYTES} ASCII letters or digits"
                )));
            }
            check_labels(&at, &a.labels)?;
            let starts_at = parse_time(&format!("{at}.startsAt"), &a.starts_at)?;
            if is_go_zero(&starts_at) {
                return Err(WebhookError::Invalid(format!("{at}.startsAt: unset")));
            }
            let ends_at = match &a.ends_at {
                Some(s) => Some(parse_time(&format!("{at}.endsAt"), s)?).filter(|t| !is_go_zero(t)),
                None => None,
            };
            Ok(ValidAlert {
                fingerprint: a.fingerprint.clone(),
                alertname: a.labels.get("alertname").cloned(),
                status: a.status,
                labels: a.labels.clone(),
                starts_at,
                ends_at,
            })
        })
        .collect()
}

/// Reads the bearer token the way Alertmanager's `credentials_file` does
/// (surrounding whitespace trimmed), so one Secret serves both sides.
pub fn load_token(path: &Path) -> Result<Arc<[u8]>, SignalError> {
    let err = |reason: String| SignalError::Token {
        path: path.to_path_buf(),
        reason,
    };
    let raw = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let token = raw.trim_ascii();
    if token.is_empty() {
        return Err(err("is empty".into()));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(err(format!("longer than {MAX_TOKEN_BYTES} bytes")));
    }
    // Anything else could never arrive in an Authorization header, so every
    // request would fail with 401; better to refuse at start.
    if !token.iter().all(|b| b.is_ascii_graphic()) {
        return Err(err("must be printable ASCII without spaces".into()));
    }
    Ok(Arc::from(token))
}

/// The bearer tokens accepted: the current one and, for a grace period
/// after a rotation, the one before it. Pure: the caller passes `now`.
#[derive(Debug)]
pub struct Tokens {
    current: Arc<[u8]>,
    previous: Option<(Arc<[u8]>, Instant)>,
}

impl Tokens {
    pub fn new(current: Arc<[u8]>) -> Self {
        Self {
            current,
            previous: None,
        }
    }

    /// Makes `new` the current token; the replaced one stays accepted until
    /// `now + grace`. `false` (and nothing changes) when `new` is current.
    pub fn rotate(&mut self, new: Arc<[u8]>, now: Instant, grace: Duration) -> bool {
        if new == self.current {
            return false;
        }
        let old = std::mem::replace(&mut self.current, new);
        self.previous = Some((old, now + grace));
        true
    }

    /// Constant time over the bytes of each token; only lengths can leak.
    pub fn accepts(&self, presented: &[u8], now: Instant) -> bool {
        let current = bool::from(presented.ct_eq(&self.current));
        let previous = self
            .previous
            .as_ref()
            .is_some_and(|(t, until)| bool::from(presented.ct_eq(t)) && now < *until);
        current | previous
    }
}

/// Least spacing of the token file reads that unknown tokens cause: a
/// rotated Secret is followed within a second, and a flood of bad tokens
/// reads the file at most once a second.
pub const REREAD_EVERY: Duration = Duration::from_secs(1);

/// When a request with an unknown token gets a fresh look at the file.
#[derive(Debug, PartialEq, Eq)]
pub enum Reread {
    /// A read began after the request arrived: its result is current enough.
    Shared,
    /// Read the file at this time (now, or once `REREAD_EVERY` has passed
    /// since the last read).
    At(tokio::time::Instant),
}

/// Pure: `last` is when the last reread began, `arrived` when the request did.
pub fn reread_plan(
    last: Option<tokio::time::Instant>,
    arrived: tokio::time::Instant,
    every: Duration,
) -> Reread {
    match last {
        Some(last) if last >= arrived => Reread::Shared,
        Some(last) => Reread::At((last + every).max(arrived)),
        None => Reread::At(arrived),
    }
}

/// The outcome of checking a presented token.
#[derive(Debug)]
pub struct TokenCheck {
    pub accepted: bool,
    /// The file was re-read for this request: `Ok(true)` if that rotated
    /// the token.
    pub reread: Option<Result<bool, SignalError>>,
}

/// The token file and the tokens read from it. Alertmanager's side reads
/// the same Secret, so when the Secret rotates, remedy must follow without a
/// restart: a 401 is not retried before the next group_interval, and a
/// resolved notification may never come again (docs/upstream-behaviour.md,
/// "Alertmanager webhook retries"). Hence an unknown token re-reads the file
/// at once (rate-limited), besides the periodic reload.
#[derive(Debug)]
pub struct TokenStore {
    path: Option<PathBuf>,
    /// How long a replaced token is still accepted: one reload period, so
    /// an Alertmanager whose copy of the Secret lags behind keeps working.
    grace: Duration,
    tokens: RwLock<Tokens>,
    /// When the last reread for an unknown token began. The async lock also
    /// serialises those rereads, so requests waiting together share one.
    last_reread: tokio::sync::Mutex<Option<tokio::time::Instant>>,
}

impl TokenStore {
    pub fn fixed(token: Arc<[u8]>) -> Self {
        Self {
            path: None,
            grace: Duration::ZERO,
            tokens: RwLock::new(Tokens::new(token)),
            last_reread: tokio::sync::Mutex::new(None),
        }
    }

    pub fn from_file(path: &Path, grace: Duration) -> Result<Self, SignalError> {
        Ok(Self {
            path: Some(path.to_path_buf()),
            grace,
            tokens: RwLock::new(Tokens::new(load_token(path)?)),
            last_reread: tokio::sync::Mutex::new(None),
        })
    }

    /// Re-reads the file: `Ok(true)` when the token changed. A file that
    /// cannot be read or is invalid changes nothing (it may be mid-update).
    pub fn reload(&self) -> Result<bool, SignalError> {
        let Some(path) = &self.path else {
            return Ok(false);
        };
        let token = load_token(path)?;
        self.rotate(token)
    }

    fn rotate(&self, token: Arc<[u8]>) -> Result<bool, SignalError> {
        // Tokens has no panicking paths: a poisoned lock is consistent.
        let mut t = self.tokens.write().unwrap_or_else(PoisonError::into_inner);
        Ok(t.rotate(token, Instant::now(), self.grace))
    }

    fn accepts(&self, presented: &[u8]) -> bool {
        self.tokens
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .accepts(presented, Instant::now())
    }

    /// Accepts a known token at once. An unknown one may be the rotated
    /// Secret that this side has not read yet: re-read the file, at most
    /// once per `REREAD_EVERY` (the request waits for the next read, at
    /// most that long), and check again.
    pub async fn check(&self, presented: &[u8]) -> TokenCheck {
        if self.accepts(presented) {
            return TokenCheck {
                accepted: true,
                reread: None,
            };
        }
        let Some(path) = self.path.clone() else {
            return TokenCheck {
                accepted: false,
                reread: None,
            };
        };
        let arrived = tokio::time::Instant::now();
        let mut last = self.last_reread.lock().await;
        match reread_plan(*last, arrived, REREAD_EVERY) {
            Reread::Shared => {
                return TokenCheck {
                    accepted: self.accepts(presented),
                    reread: None,
                };
            }
            Reread::At(at) => tokio::time::sleep_until(at).await,
        }
        // Marked before reading: a request arriving during the read may
        // have missed a change the read did not see, so it reads again.
        *last = Some(tokio::time::Instant::now());
        let file = path.clone();
        let read = tokio::task::spawn_blocking(move || load_token(&file))
            .await
            .unwrap_or_else(|e| {
                Err(SignalError::Token {
                    path,
                    reason: format!("reading task failed: {e}"),
                })
            });
        let reread = read.and_then(|token| self.rotate(token));
        drop(last);
        TokenCheck {
            accepted: self.accepts(presented),
            reread: Some(reread),
        }
    }
}

/// Logs and counts a token file read that changed the token or failed
/// (`remedy_webhook_token_reloads_total`); `why` says what caused it.
pub fn record_reload(metrics: &Metrics, result: &Result<bool, SignalError>, why: &'static str) {
    let result = match result {
        Ok(false) => return,
        Ok(true) => {
            tracing::info!(
                trigger = why,
                "webhook token reloaded; the previous one is accepted for one more period"
            );
            "reloaded"
        }
        Err(e) => {
            // Never the token itself: the error names the file only.
            tracing::warn!(error = %e, label = e.label(), trigger = why, "cannot reload the webhook token; keeping the current one");
            "error"
        }
    };
    metrics
        .token_reloads
        .get_or_create(&crate::metrics::ResultLabels { result })
        .inc();
}

/// Counts since the last INFO summary. Pure: the caller passes `now`.
#[derive(Debug, Default, PartialEq)]
pub struct Tally {
    pub notifications: u64,
    pub accepted: u64,
    pub duplicate: u64,
    pub ignored: u64,
    /// Refused notifications by `WebhookError::label`.
    pub refused: BTreeMap<&'static str, u64>,
}

/// A [`Tally`] and when it was last reported.
#[derive(Debug)]
pub struct Summarizer {
    every: Duration,
    since: Instant,
    tally: Tally,
}

impl Summarizer {
    pub fn new(every: Duration, now: Instant) -> Self {
        Self {
            every,
            since: now,
            tally: Tally::default(),
        }
    }

    /// Counts one notification; returns the tally and the time it covers
    /// once `every` has passed since the last one, and starts over.
    pub fn add(
        &mut self,
        outcome: Result<(usize, usize, usize), &'static str>,
        now: Instant,
    ) -> Option<(Tally, Duration)> {
        let t = &mut self.tally;
        t.notifications += 1;
        match outcome {
            Ok((accepted, duplicate, ignored)) => {
                t.accepted += accepted as u64;
                t.duplicate += duplicate as u64;
                t.ignored += ignored as u64;
            }
            Err(label) => *t.refused.entry(label).or_insert(0) += 1,
        }
        let covered = now.saturating_duration_since(self.since);
        if covered < self.every {
            return None;
        }
        self.since = now;
        Some((std::mem::take(&mut self.tally), covered))
    }
}

pub struct WebhookState {
    summary: Mutex<Summarizer>,
    tokens: Arc<TokenStore>,
    max_body_bytes: usize,
    alertnames: HashSet<String>,
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
        Ok(Self::with_tokens(
            Arc::new(TokenStore::from_file(path, reload_interval)?),
            cfg.max_body_bytes,
            alerts.iter().map(|a| a.alertname.clone()),
            tx,
            dedupe,
            metrics,
        ))
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
            self.metrics.token_rereads.inc();
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
        // Dedupe has no panicking paths, so a poisoned lock still holds a
        // consistent record.
        let mut dedupe = self.dedupe.lock().unwrap_or_else(PoisonError::into_inner);
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
                    self.metrics.webhook(status.as_str(), "accepted");
                }
                Err(TrySendError::Full(_)) => return Err(WebhookError::Overloaded(status)),
                Err(TrySendError::Closed(_)) => return Err(WebhookError::Closed(status)),
            }
        }
        Ok(summary)
    }

    /// The event for a new alert of a configured name; an ignored or
    /// duplicate one is counted and gives none.
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
            self.metrics.webhook(status.as_str(), "ignored");
            return None;
        };
        if dedupe.check(&a.fingerprint, status, a.starts_at, now) != Delivery::New {
            summary.duplicate += 1;
            self.metrics.webhook(status.as_str(), "duplicate");
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
            let mut dedupe = self.dedupe.lock().unwrap_or_else(PoisonError::into_inner);
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
        let mut dedupe = self.dedupe.lock().unwrap_or_else(PoisonError::into_inner);
        for ev in &fresh {
            dedupe.remember(&ev.fingerprint, ev.status, ev.starts_at, now);
            summary.accepted += 1;
            self.metrics.webhook(ev.status.as_str(), "accepted");
        }
        Ok(summary)
    }
}

#[derive(Debug, Default)]
struct Summary {
    accepted: usize,
    duplicate: usize,
    ignored: usize,
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
    fn summarize(&self, outcome: Result<(usize, usize, usize), &'static str>) {
        // Counting cannot panic: a poisoned lock holds a consistent tally.
        let due = self
            .summary
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(outcome, Instant::now());
        let Some((t, covered)) = due else {
            return;
        };
        let refused: u64 = t.refused.values().sum();
        let refused_by = format!("{:?}", t.refused);
        if refused > 0 {
            tracing::warn!(
                notifications = t.notifications,
                alerts_accepted = t.accepted,
                duplicate = t.duplicate,
                ignored = t.ignored,
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
    s.summarize(
        result
            .as_ref()
            .map(|sum| (sum.accepted, sum.duplicate, sum.ignored))
            .map_err(WebhookError::label),
    );
    match result {
        Ok(sum) => {
            tracing::debug!(
                accepted = sum.accepted,
                duplicate = sum.duplicate,
                ignored = sum.ignored,
                "alertmanager notification"
            );
            format!(
                "accepted {}, duplicate {}, ignored {}\n",
                sum.accepted, sum.duplicate, sum.ignored
            )
            .into_response()
        }
        Err(e) => {
            s.metrics.webhook(e.status_label(), e.label());
            // DEBUG: a sender can repeat this thousands of times a second;
            // the summary reports refusals at WARN.
            tracing::debug!(result = e.label(), error = %e, "alertmanager notification refused");
            e.into_response()
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// As Alertmanager 0.25 sends it (notify/webhook + template.Data).
    const AM_025: &str = r#"{
      "receiver": "remedy",
      "status": "firing",
      "alerts": [
        {
          "status": "firing",
          "labels": {"alertname": "MachineStuck", "namespace": "capi", "name": "m-1",
                     "severity": "warning", "prometheus": "monitoring/k8s"},
          "annotations": {"summary": "Machine m-1 is stuck"},
          "startsAt": "2023-03-14T10:15:30.123456789Z",
          "endsAt": "0001-01-01T00:00:00Z",
          "generatorURL": "http://prometheus:9090/graph?g0.expr=remedy_resources&g0.tab=1",
          "fingerprint": "c4f7d1a3b2e6f890"
        },
        {
          "status": "resolved",
          "labels": {"alertname": "MachineStuck", "namespace": "capi", "name": "m-2"},
          "annotations": {},
          "startsAt": "2023-03-14T09:00:00+01:00",
          "endsAt": "2023-03-14T10:10:00Z",
          "generatorURL": "",
          "fingerprint": "0a1b2c3d4e5f6789"
        }
      ],
      "groupLabels": {"alertname": "MachineStuck"},
      "commonLabels": {"alertname": "MachineStuck", "namespace": "capi"},
      "commonAnnotations": {},
      "externalURL": "http://alertmanager:9093",
      "version": "4",
      "groupKey": "{}/{severity=\"warning\"}:{alertname=\"MachineStuck\"}",
      "truncatedAlerts": 0,
      "someFutureField": {"nested": [1, 2, 3]}
    }"#;

    fn with(f: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
        let mut v: serde_json::Value = serde_json::from_str(AM_025).expect("fixture");
        f(&mut v);
        serde_json::to_vec(&v).expect("serialize")
    }

    fn invalid(body: &[u8]) -> String {
        match parse(body) {
            Err(e @ (WebhookError::Invalid(_) | WebhookError::TooLarge(_))) => e.to_string(),
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    #[test]
    fn parses_alertmanager_025_payload() {
        let (n, alerts) = parse(AM_025.as_bytes()).expect("valid");
        assert_eq!(n.receiver, "remedy");
        assert_eq!(n.status, AlertStatus::Firing);
        assert_eq!(n.external_url, "http://alertmanager:9093");
        assert_eq!(
            n.group_labels.get("alertname").map(String::as_str),
            Some("MachineStuck")
        );
        assert_eq!(alerts.len(), 2);
        let a = &alerts[0];
        assert_eq!(a.fingerprint, "c4f7d1a3b2e6f890");
        assert_eq!(a.alertname.as_deref(), Some("MachineStuck"));
        assert_eq!(a.status, AlertStatus::Firing);
        assert_eq!(
            a.starts_at.to_rfc3339(),
            "2023-03-14T10:15:30.123456789+00:00"
        );
        assert_eq!(a.ends_at, None, "Go zero time means unset");
        let b = &alerts[1];
        assert_eq!(b.status, AlertStatus::Resolved);
        assert_eq!(b.starts_at.to_rfc3339(), "2023-03-14T08:00:00+00:00");
        assert_eq!(
            b.ends_at.map(|t| t.to_rfc3339()).as_deref(),
            Some("2023-03-14T10:10:00+00:00")
        );
    }

    #[test]
    fn tolerates_go_nil_maps() {
        let body = with(|v| {
            v["commonAnnotations"] = serde_json::Value::Null;
            v["alerts"][0]["annotations"] = serde_json::Value::Null;
        });
        assert!(parse(&body).is_ok());
    }

    #[test]
    fn rejects_wrong_version() {
        let body = with(|v| v["version"] = "3".into());
        assert!(invalid(&body).contains("unsupported version"));
    }

    #[test]
    fn rejects_unknown_status() {
        let body = with(|v| v["alerts"][1]["status"] = "pending".into());
        assert!(invalid(&body).contains("unknown variant"));
        let body = with(|v| v["status"] = "".into());
        assert!(invalid(&body).contains("unknown variant"));
    }

    #[test]
    fn rejects_missing_or_bad_fingerprint() {
        let body = with(|v| v["alerts"][0]["fingerprint"] = "".into());
        assert!(invalid(&body).contains("alerts[0].fingerprint"));
        let body = with(|v| v["alerts"][1]["fingerprint"] = "a\"b".into());
        assert!(invalid(&body).contains("alerts[1].fingerprint"));
        let body = with(|v| {
            if let Some(a) = v["alerts"][0].as_object_mut() {
                a.remove("fingerprint");
            }
        });
        assert!(invalid(&body).contains("missing field `fingerprint`"));
    }

    #[test]
    fn rejects_bad_times() {
        let body = with(|v| v["alerts"][0]["startsAt"] = "yesterday".into());
        assert!(invalid(&body).contains("alerts[0].startsAt: not RFC 3339"));
        let body = with(|v| v["alerts"][0]["startsAt"] = "0001-01-01T00:00:00Z".into());
        assert!(invalid(&body).contains("alerts[0].startsAt: unset"));
        let body = with(|v| v["alerts"][1]["endsAt"] = "2023-13-01T00:00:00Z".into());
        assert!(invalid(&body).contains("alerts[1].endsAt"));
    }

    #[test]
    fn rejects_oversized_and_invalid_labels() {
        let long = "x".repeat(MAX_LABEL_BYTES + 1);
        let body = with(|v| v["alerts"][0]["labels"]["name"] = long.clone().into());
        assert!(invalid(&body).contains("longer than 1024 bytes"));
        let body = with(|v| v["alerts"][0]["labels"][long.as_str()] = "v".into());
        assert!(invalid(&body).contains("longer than 1024 bytes"));
        let body = with(|v| v["alerts"][0]["labels"][""] = "v".into());
        assert!(invalid(&body).contains("invalid label name \"\""));
        // Prometheus 3 sends UTF-8 names (OpenTelemetry attributes); one
        // such label must not refuse the whole notification.
        let body = with(|v| v["alerts"][0]["labels"]["k8s.namespace.name"] = "ns".into());
        assert!(parse(&body).is_ok());
        let body = with(|v| {
            for i in 0..=MAX_LABELS {
                v["alerts"][0]["labels"][format!("l{i}")] = "v".into();
            }
        });
        assert!(invalid(&body).contains("more than 256 labels"));
    }

    #[test]
    fn rejects_too_many_alerts() {
        let body = with(|v| {
            let one = v["alerts"][0].clone();
            v["alerts"] = serde_json::Value::Array(vec![one; MAX_ALERTS + 1]);
        });
        assert!(matches!(parse(&body), Err(WebhookError::TooLarge(_))));
    }

    #[test]
    fn malformed_json_is_malformed_not_invalid() {
        assert!(matches!(
            parse(b"{\"version\":"),
            Err(WebhookError::Malformed(_))
        ));
        assert!(matches!(
            parse(b"not json"),
            Err(WebhookError::Malformed(_))
        ));
        // Nesting never reaches a recursive parse: every position is typed,
        // so the first wrong type rejects it, and unknown fields are skipped
        // iteratively. Either way no stack overflow and no large allocation.
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        for body in [
            deep(100_000),
            format!(r#"{{"version":{}}}"#, deep(100_000)),
            format!(
                r#"{{"version":"4","alerts":[{{"labels":{}}}]}}"#,
                deep(100_000)
            ),
        ] {
            let e = parse(body.as_bytes()).expect_err("deep nesting");
            assert_eq!(e.label(), "rejected");
        }
        let body = with(|v| v["x"] = serde_json::Value::Null);
        let body = String::from_utf8(body)
            .expect("utf8")
            .replacen("null", &deep(100_000), 1);
        assert!(
            parse(body.as_bytes()).is_ok(),
            "deep unknown field is skipped"
        );
    }

    #[test]
    fn reasons_are_capped() {
        let body = with(|v| v["alerts"][0]["status"] = "y".repeat(10_000).into());
        assert!(invalid(&body).chars().count() < MAX_REASON_CHARS + 50);
    }

    #[test]
    fn error_labels_and_statuses() {
        let cases = [
            (WebhookError::Unauthorized, "unauthorized", 401, "invalid"),
            (
                WebhookError::UnsupportedMediaType,
                "rejected",
                415,
                "invalid",
            ),
            (
                WebhookError::TooLarge(String::new()),
                "too_large",
                413,
                "invalid",
            ),
            (
                WebhookError::Malformed(String::new()),
                "rejected",
                400,
                "invalid",
            ),
            (
                WebhookError::Invalid(String::new()),
                "rejected",
                400,
                "invalid",
            ),
            (
                WebhookError::Overloaded(AlertStatus::Firing),
                "overloaded",
                503,
                "firing",
            ),
            (
                WebhookError::Closed(AlertStatus::Resolved),
                "overloaded",
                503,
                "resolved",
            ),
        ];
        for (e, label, code, status) in cases {
            assert_eq!(e.label(), label);
            assert_eq!(e.http_status().as_u16(), code);
            assert_eq!(e.status_label(), status);
        }
    }

    #[test]
    fn token_file_is_trimmed_and_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("token");
        std::fs::write(&p, "s3cret\n").expect("write");
        assert_eq!(&*load_token(&p).expect("token"), b"s3cret");
        std::fs::write(&p, "\n").expect("write");
        assert_eq!(load_token(&p).expect_err("empty").label(), "token");
        std::fs::write(&p, "a b").expect("write");
        assert!(load_token(&p).is_err());
        assert!(load_token(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn notifications_are_summarised_once_per_period() {
        let t0 = Instant::now();
        let every = Duration::from_secs(60);
        let mut s = Summarizer::new(every, t0);
        for i in 0..1000 {
            let at = t0 + Duration::from_millis(i * 50);
            assert_eq!(s.add(Ok((2, 0, 0)), at), None, "no line before the period");
        }
        assert_eq!(s.add(Err("overloaded"), t0 + Duration::from_secs(59)), None);
        let (t, covered) = s
            .add(Ok((0, 1, 1)), t0 + every)
            .expect("a summary after the period");
        assert_eq!(covered, every);
        assert_eq!(
            t,
            Tally {
                notifications: 1002,
                accepted: 2000,
                duplicate: 1,
                ignored: 1,
                refused: [("overloaded", 1)].into(),
            }
        );
        // Counting starts over.
        assert_eq!(
            s.add(Ok((1, 0, 0)), t0 + every + Duration::from_secs(1)),
            None
        );
        let (t, _) = s
            .add(Ok((1, 0, 0)), t0 + every * 2)
            .expect("second summary");
        assert_eq!((t.notifications, t.accepted), (2, 2));
    }

    #[test]
    fn a_rotated_token_is_accepted_with_the_old_one_for_the_grace_period() {
        let t0 = Instant::now();
        let grace = Duration::from_secs(30);
        let mut t = Tokens::new(Arc::from(&b"old"[..]));
        assert!(t.accepts(b"old", t0));
        assert!(!t.accepts(b"new", t0));
        assert!(!t.rotate(Arc::from(&b"old"[..]), t0, grace), "unchanged");
        assert!(t.rotate(Arc::from(&b"new"[..]), t0, grace));
        assert!(t.accepts(b"new", t0));
        assert!(t.accepts(b"old", t0 + grace - Duration::from_millis(1)));
        assert!(!t.accepts(b"old", t0 + grace), "grace over");
        assert!(t.accepts(b"new", t0 + grace * 100));
        assert!(!t.accepts(b"ol", t0) && !t.accepts(b"", t0));
        // Rotating again drops the first token at once.
        let t1 = t0 + Duration::from_secs(1);
        assert!(t.rotate(Arc::from(&b"newer"[..]), t1, grace));
        assert!(!t.accepts(b"old", t1));
        assert!(t.accepts(b"new", t1) && t.accepts(b"newer", t1));
    }

    #[test]
    fn token_store_reload_follows_the_file_and_keeps_the_token_on_a_bad_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("token");
        std::fs::write(&p, "first\n").expect("write");
        let store = TokenStore::from_file(&p, Duration::from_secs(60)).expect("store");
        assert!(!store.reload().expect("unchanged"));
        std::fs::write(&p, "second\n").expect("write");
        assert!(store.reload().expect("rotated"));
        assert!(store.accepts(b"second") && store.accepts(b"first"));
        std::fs::write(&p, "\n").expect("write");
        assert_eq!(store.reload().expect_err("empty").label(), "token");
        assert!(store.accepts(b"second"), "a bad file changes nothing");
    }

    fn state(
        token: &str,
        names: &[&str],
        queue: usize,
    ) -> (WebhookState, mpsc::Receiver<AlertEvent>) {
        let (tx, rx) = mpsc::channel(queue);
        let s = WebhookState::new(
            Arc::from(token.as_bytes()),
            1 << 20,
            names.iter().map(|s| s.to_string()),
            tx,
            Arc::new(Mutex::new(Dedupe::new(100))),
            Arc::new(Metrics::new(10)),
        );
        (s, rx)
    }

    #[tokio::test]
    async fn bearer_token_check() {
        let (s, _rx) = state("s3cret", &[], 1);
        let mut h = HeaderMap::new();
        assert!(!s.authorized(&h).await);
        for (value, ok) in [
            ("Bearer s3cret", true),
            ("bearer s3cret", true),
            ("Bearer s3cre", false),
            ("Bearer s3cret2", false),
            ("Basic s3cret", false),
            ("s3cret", false),
            ("Bearer ", false),
        ] {
            h.insert(header::AUTHORIZATION, value.parse().expect("header"));
            assert_eq!(s.authorized(&h).await, ok, "{value}");
        }
    }

    #[test]
    fn an_unknown_token_rereads_at_most_once_per_period_and_waits_share_one_read() {
        let t0 = tokio::time::Instant::now();
        let every = REREAD_EVERY;
        let ms = Duration::from_millis;
        assert_eq!(
            reread_plan(None, t0, every),
            Reread::At(t0),
            "first: at once"
        );
        // Arrived before a read began: that read covers it.
        assert_eq!(reread_plan(Some(t0), t0 - ms(1), every), Reread::Shared);
        assert_eq!(reread_plan(Some(t0), t0, every), Reread::Shared);
        // Arrived after: the next read, not before `every` has passed.
        assert_eq!(
            reread_plan(Some(t0), t0 + ms(10), every),
            Reread::At(t0 + every)
        );
        assert_eq!(
            reread_plan(Some(t0), t0 + ms(1500), every),
            Reread::At(t0 + ms(1500)),
            "long after: at once"
        );
    }

    #[tokio::test]
    async fn an_unknown_token_rereads_the_file_and_is_accepted_if_rotated() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("token");
        std::fs::write(&p, "first\n").expect("write");
        let store = Arc::new(TokenStore::from_file(&p, Duration::from_secs(60)).expect("store"));
        let known = store.check(b"first").await;
        assert!(
            known.accepted && known.reread.is_none(),
            "no read for a known token"
        );

        std::fs::write(&p, "second\n").expect("write");
        let start = tokio::time::Instant::now();
        let c = store.check(b"second").await;
        assert!(c.accepted, "rotated token accepted by the first request");
        assert!(matches!(c.reread, Some(Ok(true))), "{c:?}");
        assert!(
            start.elapsed() < REREAD_EVERY / 2,
            "no wait for the first read"
        );
        assert!(
            store.check(b"first").await.accepted,
            "previous one in grace"
        );

        // 50 concurrent wrong tokens right after: one read, a second later.
        let checks: Vec<_> = (0..50)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { store.check(format!("bad{i}").as_bytes()).await })
            })
            .collect();
        let mut reads = 0;
        for c in checks {
            let c = c.await.expect("check");
            assert!(!c.accepted);
            reads += usize::from(c.reread.is_some());
        }
        assert_eq!(reads, 1, "a flood shares one read");
        let took = start.elapsed();
        assert!(
            took >= REREAD_EVERY && took < REREAD_EVERY * 2,
            "the read waited for its turn: {took:?}"
        );

        // A file that does not read keeps the tokens; the error is reported.
        std::fs::write(&p, "\n").expect("write");
        tokio::time::sleep(REREAD_EVERY).await;
        let c = store.check(b"bad").await;
        assert!(!c.accepted);
        assert!(matches!(c.reread, Some(Err(_))), "{c:?}");
        assert!(store.check(b"second").await.accepted);

        let fixed = TokenStore::fixed(Arc::from(&b"t"[..]));
        let c = fixed.check(b"u").await;
        assert!(!c.accepted && c.reread.is_none(), "no file, no read");
    }

    #[test]
    fn forwards_configured_new_alerts_only() {
        let (s, mut rx) = state("t", &["MachineStuck"], 10);
        let (n, alerts) = parse(AM_025.as_bytes()).expect("valid");
        let now = Utc::now();
        let sum = s
            .forward(&n.group_key, alerts.clone(), now)
            .expect("forward");
        assert_eq!((sum.accepted, sum.duplicate, sum.ignored), (2, 0, 0));
        let ev = rx.try_recv().expect("event");
        assert_eq!(ev.fingerprint, "c4f7d1a3b2e6f890");
        assert_eq!(ev.group_key, n.group_key);
        assert_eq!(ev.received_at, now);
        assert_eq!(ev.labels.get("name").map(String::as_str), Some("m-1"));
        assert!(rx.try_recv().is_ok());
        // The group interval re-send: nothing new.
        let sum = s.forward(&n.group_key, alerts, now).expect("forward");
        assert_eq!((sum.accepted, sum.duplicate), (0, 2));
        assert!(rx.try_recv().is_err());

        let (s, mut rx) = state("t", &["Other"], 10);
        let (_, alerts) = parse(AM_025.as_bytes()).expect("valid");
        let sum = s.forward("g", alerts, now).expect("forward");
        assert_eq!((sum.accepted, sum.ignored), (0, 2));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn full_queue_records_nothing_for_the_refused_alert() {
        let (s, mut rx) = state("t", &["MachineStuck"], 1);
        let (_, alerts) = parse(AM_025.as_bytes()).expect("valid");
        let now = Utc::now();
        let e = s.forward("g", alerts.clone(), now).expect_err("full");
        assert!(matches!(e, WebhookError::Overloaded(AlertStatus::Resolved)));
        assert_eq!(
            rx.try_recv().map(|e| e.fingerprint).as_deref(),
            Ok("c4f7d1a3b2e6f890")
        );
        // Retry: the first is a duplicate, the second is accepted now.
        let sum = s.forward("g", alerts, now).expect("retry");
        assert_eq!((sum.accepted, sum.duplicate), (1, 1));
        assert_eq!(
            rx.try_recv().map(|e| e.fingerprint).as_deref(),
            Ok("0a1b2c3d4e5f6789")
        );
    }

    #[test]
    fn closed_queue_is_503() {
        let (s, rx) = state("t", &["MachineStuck"], 1);
        drop(rx);
        let (_, alerts) = parse(AM_025.as_bytes()).expect("valid");
        let e = s.forward("g", alerts, Utc::now()).expect_err("closed");
        assert_eq!(e.http_status(), StatusCode::SERVICE_UNAVAILABLE);
        // Nothing was recorded: it is new once the processor is back.
        let dedupe = s.dedupe.lock().expect("lock");
        assert!(dedupe.is_empty());
    }
}
