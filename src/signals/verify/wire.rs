//! What Prometheus and Alertmanager answer, read strictly: an answer of
//! the wrong shape is an error, never a guess.

use super::super::{ALERTMANAGER, PROMETHEUS, SignalError};
use serde::Deserialize;
use std::collections::BTreeMap;

const MAX_REASON_CHARS: usize = 200;

pub(super) fn cap(s: impl ToString) -> String {
    let s = s.to_string();
    match s.char_indices().nth(MAX_REASON_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

#[derive(Deserialize)]
pub(super) struct PromEnvelope {
    pub(super) status: String,
    #[serde(default)]
    pub(super) data: Option<serde_json::Value>,
    #[serde(default, rename = "errorType")]
    pub(super) error_type: Option<String>,
    #[serde(default)]
    pub(super) error: Option<String>,
}

/// One instant-query sample; `value` is absent for native histograms.
#[derive(Debug, Deserialize)]
pub(super) struct Sample {
    #[serde(default)]
    pub(super) metric: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) value: Option<(f64, String)>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Series {
    #[serde(default)]
    pub(super) metric: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
pub(super) enum PromData {
    Vector(Vec<Sample>),
    Matrix(Vec<Series>),
    Scalar((f64, String)),
    String(serde::de::IgnoredAny),
}

impl PromData {
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Self::Vector(_) => "vector",
            Self::Matrix(_) => "matrix",
            Self::Scalar(_) => "scalar",
            Self::String(_) => "string",
        }
    }

    /// Labels of the first series, to say which one blocks.
    pub(super) fn first_metric(&self) -> Option<&BTreeMap<String, String>> {
        match self {
            Self::Vector(v) => v.first().map(|s| &s.metric),
            Self::Matrix(m) => m.first().map(|s| &s.metric),
            Self::Scalar(_) | Self::String(_) => None,
        }
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct AmAlert {
    #[serde(default)]
    pub(super) fingerprint: String,
    #[serde(default)]
    pub(super) status: Option<AmAlertStatus>,
}

#[derive(Debug, Deserialize)]
pub(super) struct AmAlertStatus {
    #[serde(default)]
    pub(super) state: String,
    #[serde(default, rename = "silencedBy")]
    pub(super) silenced_by: Vec<String>,
    #[serde(default, rename = "inhibitedBy")]
    pub(super) inhibited_by: Vec<String>,
}

/// Parses a Prometheus value string ("NaN", "+Inf" included).
pub(super) fn prom_float(s: &str) -> Result<f64, SignalError> {
    s.parse::<f64>().map_err(|_| SignalError::Malformed {
        target: PROMETHEUS,
        reason: cap(format!("sample value {s:?} is not a number")),
    })
}

#[derive(Deserialize)]
pub(super) struct PromConfigData {
    pub(super) yaml: String,
}

/// The only part of Prometheus' config we need; the rest is ignored.
#[derive(Default, Deserialize)]
pub(super) struct PromConfigDoc {
    #[serde(default)]
    pub(super) global: PromGlobal,
}

#[derive(Default, Deserialize)]
pub(super) struct PromGlobal {
    #[serde(default)]
    pub(super) external_labels: BTreeMap<String, String>,
}

/// The label sets of a recovery answer. Every series must be a firing alert
/// among `alertnames`: anything else means the answer is not about what was
/// asked, and the whole answer is refused rather than half used.
/// The label sets of a firing ALERTS answer as Alertmanager sees them:
/// Prometheus adds its `external` labels to an alert it sends, where the
/// alert lacks them, but the local ALERTS series never carries them. A
/// scope built from a notification (say `cluster_label: cluster`, an
/// external label) is then found in these sets as it was sent.
pub(super) fn firing_label_sets(
    data: PromData,
    alertnames: &[&str],
    external: &BTreeMap<String, String>,
) -> Result<Vec<BTreeMap<String, String>>, SignalError> {
    let PromData::Vector(samples) = data else {
        return Err(SignalError::Malformed {
            target: PROMETHEUS,
            reason: "ALERTS query did not return a vector".into(),
        });
    };
    samples
        .into_iter()
        .map(|s| {
            let mut labels = s.metric;
            labels.remove("__name__");
            let state = labels.remove("alertstate");
            let name = labels.get("alertname").map(String::as_str);
            if !name.is_some_and(|n| alertnames.contains(&n)) {
                return Err(SignalError::Malformed {
                    target: PROMETHEUS,
                    reason: cap(format!("series of an alert not asked for: {labels:?}")),
                });
            }
            if state.as_deref().is_some_and(|st| st != "firing") {
                return Err(SignalError::Malformed {
                    target: PROMETHEUS,
                    reason: cap(format!("series in state {state:?} where firing was asked")),
                });
            }
            for (k, v) in external {
                labels.entry(k.clone()).or_insert_with(|| v.clone());
            }
            Ok(labels)
        })
        .collect()
}

pub(super) fn parse_prometheus(
    status: reqwest::StatusCode,
    body: &[u8],
) -> Result<PromData, SignalError> {
    let data = parse_envelope(status, body)?;
    serde_json::from_value(data).map_err(|e| SignalError::Malformed {
        target: PROMETHEUS,
        reason: cap(format!("unexpected data: {e}")),
    })
}

/// The `data` of a successful Prometheus API answer.
pub(super) fn parse_envelope(
    status: reqwest::StatusCode,
    body: &[u8],
) -> Result<serde_json::Value, SignalError> {
    let env = serde_json::from_slice::<PromEnvelope>(body);
    // Prometheus answers 400/422/503 with a JSON error: that is the better
    // explanation than the bare status code.
    if let Ok(e) = &env
        && e.status == "error"
    {
        return Err(SignalError::QueryError {
            target: PROMETHEUS,
            error_type: cap(e.error_type.as_deref().unwrap_or("unknown")),
            message: cap(e.error.as_deref().unwrap_or("")),
        });
    }
    if !status.is_success() {
        return Err(SignalError::HttpStatus {
            target: PROMETHEUS,
            status: status.as_u16(),
        });
    }
    let env = env.map_err(|e| SignalError::Malformed {
        target: PROMETHEUS,
        reason: cap(e),
    })?;
    if env.status != "success" {
        return Err(SignalError::Malformed {
            target: PROMETHEUS,
            reason: cap(format!("status {:?}", env.status)),
        });
    }
    env.data.ok_or_else(|| SignalError::Malformed {
        target: PROMETHEUS,
        reason: "success without data".into(),
    })
}

pub(super) fn parse_alertmanager(
    status: reqwest::StatusCode,
    body: &[u8],
) -> Result<Vec<AmAlert>, SignalError> {
    if status == reqwest::StatusCode::BAD_REQUEST {
        // Alertmanager explains a rejected filter in the body.
        return Err(SignalError::QueryError {
            target: ALERTMANAGER,
            error_type: "bad_request".into(),
            message: cap(String::from_utf8_lossy(body)),
        });
    }
    if !status.is_success() {
        return Err(SignalError::HttpStatus {
            target: ALERTMANAGER,
            status: status.as_u16(),
        });
    }
    serde_json::from_slice(body).map_err(|e| SignalError::Malformed {
        target: ALERTMANAGER,
        reason: cap(e),
    })
}
