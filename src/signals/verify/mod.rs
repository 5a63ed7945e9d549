//! Verifies, at action time, that an alert's condition is cleared: no firing
//! `ALERTS` series in Prometheus, no active (silenced and inhibited included)
//! alert in Alertmanager, and an empty optional verify query. Fail safe: any
//! doubt (unreachable, slow, odd answer) is an error, never "cleared".

//!
//! Split by concern: the queries ([`query`]), the answers ([`wire`]), and
//! the verifier that asks and judges here.

mod query;
#[cfg(test)]
mod tests;
mod wire;

pub use query::{alerts_query, am_filters, am_quote, promql_quote, recovery_query};
use wire::{
    AmAlert, PromConfigData, PromConfigDoc, PromData, Sample, cap, firing_label_sets,
    parse_alertmanager, parse_envelope, parse_prometheus, prom_float,
};

use super::client::SourceHttp;
use super::{ALERTMANAGER, PROMETHEUS, SignalError};
use crate::config::SignalsConfig;
use crate::metrics::Metrics;
use crate::metrics::values::{SignalResult, SignalTarget};
use crate::sync::LockExt;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A verify query matching this much is not cleared anyway; the cap keeps a
/// runaway query from exhausting memory.
const MAX_RESPONSE_BYTES: usize = 16 << 20;
/// External labels change only with a Prometheus config reload.
const EXTERNAL_LABELS_TTL: std::time::Duration = std::time::Duration::from_secs(300);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clearance {
    pub cleared: bool,
    pub why: String,
}

/// Per-target health for readiness: the last error label (cleared by the
/// next success) and when the target last answered well.
#[derive(Debug, Default)]
pub struct SignalHealth {
    targets: Mutex<BTreeMap<&'static str, TargetHealth>>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TargetHealth {
    last_error: Option<&'static str>,
    last_success: Option<DateTime<Utc>>,
}

impl SignalHealth {
    fn with_targets(targets: &[&'static str]) -> Self {
        Self {
            targets: Mutex::new(
                targets
                    .iter()
                    .map(|t| (*t, TargetHealth::default()))
                    .collect(),
            ),
        }
    }

    /// Configured targets with their last error, `None` when the last query
    /// succeeded (or none was made yet).
    pub fn status(&self) -> Vec<(&'static str, Option<&'static str>)> {
        self.lock()
            .iter()
            .map(|(t, h)| (*t, h.last_error))
            .collect()
    }

    pub fn last_success(&self, target: &str) -> Option<DateTime<Utc>> {
        self.lock().get(target).and_then(|h| h.last_success)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, TargetHealth>> {
        // Plain data, updated in single assignments: never inconsistent.
        self.targets.locked()
    }

    fn observe(&self, target: &'static str, outcome: Result<(), &'static str>) {
        let mut t = self.lock();
        let h = t.entry(target).or_default();
        match outcome {
            Ok(()) => {
                h.last_error = None;
                h.last_success = Some(Utc::now());
            }
            Err(label) => h.last_error = Some(label),
        }
    }
}

/// Prometheus' `global.external_labels`: name to value.
type ExternalLabels = Arc<BTreeMap<String, String>>;

pub struct Verifier {
    prom_http: SourceHttp,
    am_http: SourceHttp,
    prometheus: Option<String>,
    alertmanager: Option<String>,
    /// Prometheus' external labels, refreshed every `EXTERNAL_LABELS_TTL`.
    /// Alerts carry them but the local ALERTS series do not, so matching
    /// them there would find nothing and wrongly read as cleared, or as
    /// never fired (docs/upstream-behaviour.md, "Prometheus: is an alert
    /// cleared?").
    external_labels: Mutex<Option<(std::time::Instant, ExternalLabels)>>,
    metrics: Arc<Metrics>,
    health: Arc<SignalHealth>,
}

impl Verifier {
    pub fn new(cfg: &SignalsConfig, metrics: Arc<Metrics>) -> Result<Self, SignalError> {
        let prom_http = SourceHttp::new(PROMETHEUS, &cfg.prometheus, cfg.timeout)?;
        let am_http = SourceHttp::new(ALERTMANAGER, &cfg.alertmanager, cfg.timeout)?;
        let base = |u: &Option<String>| u.as_ref().map(|u| u.trim_end_matches('/').to_string());
        let prometheus = base(&cfg.prometheus_url);
        let alertmanager = base(&cfg.alertmanager_url);
        let mut targets = Vec::new();
        if prometheus.is_some() {
            targets.push(PROMETHEUS);
        }
        if alertmanager.is_some() {
            targets.push(ALERTMANAGER);
        }
        Ok(Self {
            prom_http,
            am_http,
            prometheus,
            alertmanager,
            external_labels: Mutex::new(None),
            metrics,
            health: Arc::new(SignalHealth::with_targets(&targets)),
        })
    }

    pub fn health(&self) -> Arc<SignalHealth> {
        self.health.clone()
    }

    /// Cleared only if every configured source says so now. `matchers` are
    /// the labels that identify the resource. Prometheus external labels
    /// among them are matched in Alertmanager only, never in the local
    /// ALERTS series, where they do not exist.
    pub async fn cleared(
        &self,
        alertname: &str,
        matchers: &BTreeMap<String, String>,
        verify_query: Option<&str>,
    ) -> Result<Clearance, SignalError> {
        if self.prometheus.is_none() {
            return Err(SignalError::NotConfigured("signals.prometheus_url"));
        }
        // Validates every matcher before anything is sent.
        let filters = am_filters(alertname, matchers)?;
        let external = self.external_labels().await?;
        let local: BTreeMap<String, String> = matchers
            .iter()
            .filter(|(k, _)| !external.contains_key(k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let alerts_q = alerts_query(alertname, &local)?;

        let firing = self.instant(&alerts_q, &["vector"]).await?;
        let PromData::Vector(series) = &firing else {
            return Err(SignalError::Malformed {
                target: PROMETHEUS,
                reason: "ALERTS query did not return a vector".into(),
            });
        };
        if !series.is_empty() {
            return Ok(Clearance {
                cleared: false,
                why: format!(
                    "prometheus: {} firing ALERTS series for {alertname} (first: {:?})",
                    series.len(),
                    firing.first_metric().cloned().unwrap_or_default()
                ),
            });
        }

        if self.alertmanager.is_some() {
            let active = self.am_alerts(&filters).await?;
            if let Some(first) = active.first() {
                let (state, silenced, inhibited) = first
                    .status
                    .as_ref()
                    .map(|s| {
                        (
                            s.state.as_str(),
                            !s.silenced_by.is_empty(),
                            !s.inhibited_by.is_empty(),
                        )
                    })
                    .unwrap_or(("unknown", false, false));
                return Ok(Clearance {
                    cleared: false,
                    why: format!(
                        "alertmanager: {} alert(s) for {alertname} still active \
                         (first {}: state {state}, silenced {silenced}, inhibited {inhibited})",
                        active.len(),
                        first.fingerprint
                    ),
                });
            }
        }

        if let Some(q) = verify_query {
            // A scalar is never "empty": such a verify_query cannot prove
            // anything, so it is an error rather than a silent pass or block.
            let data = self.instant(q, &["vector", "matrix"]).await?;
            let n = match &data {
                PromData::Vector(v) => v.len(),
                PromData::Matrix(m) => m.len(),
                // Excluded by `accept`; never let it read as empty.
                PromData::Scalar(_) | PromData::String(_) => {
                    return Err(SignalError::Malformed {
                        target: PROMETHEUS,
                        reason: "verify_query did not return series".into(),
                    });
                }
            };
            if n > 0 {
                return Ok(Clearance {
                    cleared: false,
                    why: format!(
                        "verify_query returned {n} series (first: {:?})",
                        data.first_metric().cloned().unwrap_or_default()
                    ),
                });
            }
        }

        let mut why = format!("no firing ALERTS for {alertname}");
        if self.alertmanager.is_some() {
            why.push_str(", no active Alertmanager alert");
        }
        if verify_query.is_some() {
            why.push_str(", verify_query empty");
        }
        Ok(Clearance { cleared: true, why })
    }

    /// The first sample of an instant query (vector or scalar); `None` for an
    /// empty vector or a NaN/Inf value, which carry no usable ratio.
    pub async fn query_scalar(&self, promql: &str) -> Result<Option<f64>, SignalError> {
        if self.prometheus.is_none() {
            return Err(SignalError::NotConfigured("signals.prometheus_url"));
        }
        let data = self.instant(promql, &["vector", "scalar"]).await?;
        let raw = match &data {
            PromData::Vector(v) => match v.first() {
                None => return Ok(None),
                Some(Sample { value: Some(v), .. }) => &v.1,
                Some(Sample { value: None, .. }) => {
                    return Err(SignalError::Malformed {
                        target: PROMETHEUS,
                        reason: "sample without a float value (histogram?)".into(),
                    });
                }
            },
            PromData::Scalar(v) => &v.1,
            PromData::Matrix(_) | PromData::String(_) => {
                return Err(SignalError::Malformed {
                    target: PROMETHEUS,
                    reason: "scalar query returned series over time".into(),
                });
            }
        };
        let v = prom_float(raw)?;
        Ok(v.is_finite().then_some(v))
    }

    async fn external_labels(&self) -> Result<ExternalLabels, SignalError> {
        let cached = self.external_labels.locked().clone();
        if let Some((at, names)) = cached
            && at.elapsed() < EXTERNAL_LABELS_TTL
        {
            return Ok(names);
        }
        let base = self
            .prometheus
            .as_deref()
            .ok_or(SignalError::NotConfigured("signals.prometheus_url"))?;
        let req = self
            .prom_http
            .client
            .get(format!("{base}/api/v1/status/config"));
        let result = async {
            let req = self.prom_http.authorize(req).await?;
            let (status, body) = fetch(PROMETHEUS, req).await?;
            // Query frontends (Thanos, Mimir) have no such endpoint, and
            // their ALERTS series do carry the external labels.
            if status == reqwest::StatusCode::NOT_FOUND {
                return Ok(BTreeMap::new());
            }
            let data = parse_envelope(status, &body)?;
            let cfg: PromConfigData =
                serde_json::from_value(data).map_err(|e| SignalError::Malformed {
                    target: PROMETHEUS,
                    reason: cap(format!("status/config: {e}")),
                })?;
            let doc: PromConfigDoc =
                serde_yaml_ng::from_str(&cfg.yaml).map_err(|e| SignalError::Malformed {
                    target: PROMETHEUS,
                    reason: cap(format!("status/config YAML: {e}")),
                })?;
            Ok(doc.global.external_labels)
        }
        .await;
        self.count_outcome(SignalTarget::Prometheus, result.as_ref().map(|_| ()));
        // A failed refresh is an error, not the old answer: fail safe.
        let names = Arc::new(result?);
        *self.external_labels.locked() = Some((std::time::Instant::now(), names.clone()));
        Ok(names)
    }

    /// Label sets of the `ALERTS` series of `alertnames` firing now
    /// (`within: None`) or at any time in the last `within`, without
    /// `__name__` and `alertstate`, with Prometheus' external labels added
    /// as its notifications carry them. Episode recovery after a restart
    /// and the proof that a recorded alert fired read them: Prometheus
    /// remembers what fired, remedy keeps no state.
    pub async fn alert_label_sets(
        &self,
        alertnames: &[&str],
        within: Option<std::time::Duration>,
    ) -> Result<Vec<BTreeMap<String, String>>, SignalError> {
        let base = self
            .prometheus
            .as_deref()
            .ok_or(SignalError::NotConfigured("signals.prometheus_url"))?;
        let promql = recovery_query(alertnames, within)?;
        let external = self.external_labels().await?;
        let result = async {
            let data = self.run_instant(base, &promql, &["vector"]).await?;
            firing_label_sets(data, alertnames, &external)
        }
        .await;
        // Recorded once, after validation: an answer about other alerts
        // counts as malformed, not as ok.
        self.count_outcome(SignalTarget::Prometheus, result.as_ref().map(|_| ()));
        result
    }

    /// Instant query whose result must be one of `accept` (resultType), so
    /// a wrong shape is counted as malformed like any other odd answer.
    async fn instant(&self, promql: &str, accept: &[&str]) -> Result<PromData, SignalError> {
        let base = self
            .prometheus
            .as_deref()
            .ok_or(SignalError::NotConfigured("signals.prometheus_url"))?;
        let result = self.run_instant(base, promql, accept).await;
        self.count_outcome(SignalTarget::Prometheus, result.as_ref().map(|_| ()));
        result
    }

    /// [`Verifier::instant`] without recording the outcome.
    async fn run_instant(
        &self,
        base: &str,
        promql: &str,
        accept: &[&str],
    ) -> Result<PromData, SignalError> {
        // POST form: verify queries can be longer than a URL should be.
        let req = self
            .prom_http
            .client
            .post(format!("{base}/api/v1/query"))
            .form(&[("query", promql)]);
        let req = self.prom_http.authorize(req).await?;
        let (status, body) = fetch(PROMETHEUS, req).await?;
        let data = parse_prometheus(status, &body)?;
        if accept.contains(&data.kind()) {
            Ok(data)
        } else {
            Err(SignalError::Malformed {
                target: PROMETHEUS,
                reason: format!(
                    "resultType {} where {} was expected",
                    data.kind(),
                    accept.join(" or ")
                ),
            })
        }
    }

    async fn am_alerts(&self, filters: &[String]) -> Result<Vec<AmAlert>, SignalError> {
        let base = self
            .alertmanager
            .as_deref()
            .ok_or(SignalError::NotConfigured("signals.alertmanager_url"))?;
        let mut params: Vec<(&str, &str)> = vec![
            ("active", "true"),
            ("silenced", "true"),
            ("inhibited", "true"),
            ("unprocessed", "true"),
        ];
        params.extend(filters.iter().map(|f| ("filter", f.as_str())));
        let req = self
            .am_http
            .client
            .get(format!("{base}/api/v2/alerts"))
            .query(&params);
        let result = async {
            let req = self.am_http.authorize(req).await?;
            let (status, body) = fetch(ALERTMANAGER, req).await?;
            parse_alertmanager(status, &body)
        }
        .await;
        self.count_outcome(SignalTarget::Alertmanager, result.as_ref().map(|_| ()));
        result
    }

    fn count_outcome(&self, source: SignalTarget, outcome: Result<(), &SignalError>) {
        let result = match outcome {
            Ok(()) => SignalResult::Ok,
            Err(SignalError::Timeout { .. }) => SignalResult::Timeout,
            Err(SignalError::Malformed { .. }) => SignalResult::Malformed,
            Err(_) => SignalResult::Error,
        };
        self.metrics.signals.query(source, result);
        let target = source.label();
        self.health
            .observe(target, outcome.map_err(SignalError::label));
        if let Err(e) = outcome {
            tracing::warn!(target_name = target, error = %e, "signal query failed");
        }
    }
}

fn transport(target: &'static str, e: reqwest::Error) -> SignalError {
    if e.is_timeout() {
        SignalError::Timeout { target }
    } else {
        SignalError::Unreachable { target, source: e }
    }
}

/// Sends and reads at most `MAX_RESPONSE_BYTES`.
async fn fetch(
    target: &'static str,
    req: reqwest::RequestBuilder,
) -> Result<(reqwest::StatusCode, Vec<u8>), SignalError> {
    let mut resp = req.send().await.map_err(|e| transport(target, e))?;
    let status = resp.status();
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| transport(target, e))? {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(SignalError::Malformed {
                target,
                reason: format!("response over {MAX_RESPONSE_BYTES} bytes"),
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok((status, body))
}
