//! The webhook payload (Alertmanager's version "4") and its validation:
//! every field bounded and checked before anything is remembered.

use super::{WebhookError, cap_reason};
use crate::signals::AlertStatus;
use crate::signals::valid_label_name;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;

/// Alertmanager's `max_alerts` is unbounded by default; this bounds work
/// per request.
pub const MAX_ALERTS: usize = 10_000;
pub const MAX_LABEL_BYTES: usize = 1024;
pub const MAX_LABELS: usize = 256;
/// Alertmanager fingerprints are 16 hex digits; allow some slack.
pub const MAX_FINGERPRINT_BYTES: usize = 64;
pub const MAX_GROUP_KEY_BYTES: usize = 16 * 1024;
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
