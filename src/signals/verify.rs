//! Verifies, at action time, that an alert's condition is cleared: no firing
//! `ALERTS` series in Prometheus, no active (silenced and inhibited included)
//! alert in Alertmanager, and an empty optional verify query. Fail safe: any
//! doubt (unreachable, slow, odd answer) is an error, never "cleared".

use super::client::SourceHttp;
use super::{ALERTMANAGER, PROMETHEUS, SignalError, legacy_label_name, valid_label_name};
use crate::config::SignalsConfig;
use crate::metrics::Metrics;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

/// A verify query matching this much is not cleared anyway; the cap keeps a
/// runaway query from exhausting memory.
const MAX_RESPONSE_BYTES: usize = 16 << 20;
const MAX_REASON_CHARS: usize = 200;
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
        self.targets.lock().unwrap_or_else(PoisonError::into_inner)
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

/// Double-quoted PromQL string literal. PromQL strings follow Go's escapes;
/// a raw newline would end the string, so control characters are escaped.
pub fn promql_quote(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Double-quoted Alertmanager 0.25 matcher value. Its parser knows only
/// `\\`, `\"` and `\n` (any other escape is kept literally), so only those are
/// escaped.
pub fn am_quote(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Checks names and drops a redundant `alertname`.
/// A conflicting `alertname` or an `alertstate` would make the query match
/// nothing, which would read as "cleared": refuse instead.
fn checked_matchers<'a>(
    alertname: &str,
    matchers: &'a BTreeMap<String, String>,
) -> Result<Vec<(&'a str, &'a str)>, SignalError> {
    if alertname.is_empty() {
        return Err(SignalError::InvalidInput("empty alertname".into()));
    }
    let mut out = Vec::with_capacity(matchers.len());
    for (k, v) in matchers {
        if !valid_label_name(k) {
            return Err(SignalError::InvalidInput(cap(format!(
                "invalid label name {k:?}"
            ))));
        }
        match k.as_str() {
            "alertname" if v == alertname => {}
            "alertname" | "alertstate" => {
                return Err(SignalError::InvalidInput(format!(
                    "matcher {k} would contradict the query"
                )));
            }
            _ => out.push((k.as_str(), v.as_str())),
        }
    }
    Ok(out)
}

/// `ALERTS{alertname="X",alertstate=~"firing|pending",k="v",...}`: a
/// pending alert means the condition is true again, so it is not cleared.
pub fn alerts_query(
    alertname: &str,
    matchers: &BTreeMap<String, String>,
) -> Result<String, SignalError> {
    let mut q = format!(
        "ALERTS{{alertname={},alertstate=~\"firing|pending\"",
        promql_quote(alertname)
    );
    for (k, v) in checked_matchers(alertname, matchers)? {
        let _ = write!(q, ",{}={}", label_name(k, promql_quote), promql_quote(v));
    }
    q.push('}');
    Ok(q)
}

/// `ALERTS{alertname="A",alertstate="firing"} or ...`, each selector inside
/// `max_over_time(...[Ns])` when `within` is set. One exact selector per
/// name joined by `or` (distinct alertnames never collide) rather than a
/// regex, so configured names need no RE2 escaping.
pub fn recovery_query(
    alertnames: &[&str],
    within: Option<std::time::Duration>,
) -> Result<String, SignalError> {
    if alertnames.is_empty() || alertnames.iter().any(|a| a.is_empty()) {
        return Err(SignalError::InvalidInput(
            "recovery needs non-empty alertnames".into(),
        ));
    }
    let parts: Vec<String> = alertnames
        .iter()
        .map(|a| {
            let sel = format!(
                "ALERTS{{alertname={},alertstate=\"firing\"}}",
                promql_quote(a)
            );
            match within {
                // Whole seconds, at least one: PromQL ranges have no fractions.
                Some(d) => format!("max_over_time({sel}[{}s])", d.as_secs().max(1)),
                None => sel,
            }
        })
        .collect();
    Ok(parts.join(" or "))
}

/// The label sets of a recovery answer. Every series must be a firing alert
/// among `alertnames`: anything else means the answer is not about what was
/// asked, and the whole answer is refused rather than half used.
fn firing_label_sets(
    data: PromData,
    alertnames: &[&str],
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
            Ok(labels)
        })
        .collect()
}

/// A label name in a selector: bare when Prometheus 2.x / Alertmanager 0.25
/// can read it, else quoted as Prometheus 3 (`{"k8s.pod.name"="x"}`) and
/// Alertmanager 0.28+ matchers write UTF-8 names.
fn label_name(name: &str, quote: fn(&str) -> String) -> String {
    if legacy_label_name(name) {
        name.to_string()
    } else {
        quote(name)
    }
}

/// Alertmanager v2 `filter` parameters: `alertname="X"` then each matcher.
pub fn am_filters(
    alertname: &str,
    matchers: &BTreeMap<String, String>,
) -> Result<Vec<String>, SignalError> {
    let mut out = vec![format!("alertname={}", am_quote(alertname))];
    for (k, v) in checked_matchers(alertname, matchers)? {
        out.push(format!("{}={}", label_name(k, am_quote), am_quote(v)));
    }
    Ok(out)
}

fn cap(s: impl ToString) -> String {
    let s = s.to_string();
    match s.char_indices().nth(MAX_REASON_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

#[derive(Deserialize)]
struct PromEnvelope {
    status: String,
    #[serde(default)]
    data: Option<serde_json::Value>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// One instant-query sample; `value` is absent for native histograms.
#[derive(Debug, Deserialize)]
struct Sample {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    #[serde(default)]
    value: Option<(f64, String)>,
}

#[derive(Debug, Deserialize)]
struct Series {
    #[serde(default)]
    metric: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
enum PromData {
    Vector(Vec<Sample>),
    Matrix(Vec<Series>),
    Scalar((f64, String)),
    String(serde::de::IgnoredAny),
}

impl PromData {
    fn kind(&self) -> &'static str {
        match self {
            Self::Vector(_) => "vector",
            Self::Matrix(_) => "matrix",
            Self::Scalar(_) => "scalar",
            Self::String(_) => "string",
        }
    }

    /// Labels of the first series, to say which one blocks.
    fn first_metric(&self) -> Option<&BTreeMap<String, String>> {
        match self {
            Self::Vector(v) => v.first().map(|s| &s.metric),
            Self::Matrix(m) => m.first().map(|s| &s.metric),
            Self::Scalar(_) | Self::String(_) => None,
        }
    }
}

#[derive(Debug, Deserialize)]
struct AmAlert {
    #[serde(default)]
    fingerprint: String,
    #[serde(default)]
    status: Option<AmAlertStatus>,
}

#[derive(Debug, Deserialize)]
struct AmAlertStatus {
    #[serde(default)]
    state: String,
    #[serde(default, rename = "silencedBy")]
    silenced_by: Vec<String>,
    #[serde(default, rename = "inhibitedBy")]
    inhibited_by: Vec<String>,
}

/// Parses a Prometheus value string ("NaN", "+Inf" included).
fn prom_float(s: &str) -> Result<f64, SignalError> {
    s.parse::<f64>().map_err(|_| SignalError::Malformed {
        target: PROMETHEUS,
        reason: cap(format!("sample value {s:?} is not a number")),
    })
}

#[derive(Deserialize)]
struct PromConfigData {
    yaml: String,
}

/// The only part of Prometheus' config we need; the rest is ignored.
#[derive(Default, Deserialize)]
struct PromConfigDoc {
    #[serde(default)]
    global: PromGlobal,
}

#[derive(Default, Deserialize)]
struct PromGlobal {
    #[serde(default)]
    external_labels: BTreeMap<String, String>,
}

pub struct Verifier {
    prom_http: SourceHttp,
    am_http: SourceHttp,
    prometheus: Option<String>,
    alertmanager: Option<String>,
    /// Names of Prometheus' external labels, refreshed every
    /// `EXTERNAL_LABELS_TTL`. Alerts carry them but the local ALERTS series
    /// do not, so matching them there would find nothing and wrongly read as
    /// cleared (docs/upstream-behaviour.md, "Prometheus: is an alert cleared?").
    external_labels: Mutex<Option<(std::time::Instant, Arc<BTreeSet<String>>)>>,
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
            .filter(|(k, _)| !external.contains(k.as_str()))
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

    async fn external_labels(&self) -> Result<Arc<BTreeSet<String>>, SignalError> {
        let cached = self
            .external_labels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
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
                return Ok(BTreeSet::new());
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
            Ok(doc.global.external_labels.into_keys().collect())
        }
        .await;
        self.count_outcome(PROMETHEUS, result.as_ref().map(|_| ()));
        // A failed refresh is an error, not the old answer: fail safe.
        let names = Arc::new(result?);
        *self
            .external_labels
            .lock()
            .unwrap_or_else(PoisonError::into_inner) =
            Some((std::time::Instant::now(), names.clone()));
        Ok(names)
    }

    /// Label sets of the `ALERTS` series of `alertnames` firing now
    /// (`within: None`) or at any time in the last `within`, without
    /// `__name__` and `alertstate`. Episode recovery after a restart reads
    /// them: Prometheus remembers what fired, remedy keeps no state.
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
        let result = async {
            let data = self.run_instant(base, &promql, &["vector"]).await?;
            firing_label_sets(data, alertnames)
        }
        .await;
        // Recorded once, after validation: an answer about other alerts
        // counts as malformed, not as ok.
        self.count_outcome(PROMETHEUS, result.as_ref().map(|_| ()));
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
        self.count_outcome(PROMETHEUS, result.as_ref().map(|_| ()));
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
        self.count_outcome(ALERTMANAGER, result.as_ref().map(|_| ()));
        result
    }

    fn count_outcome(&self, target: &'static str, outcome: Result<(), &SignalError>) {
        let result = match outcome {
            Ok(()) => "ok",
            Err(SignalError::Timeout { .. }) => "timeout",
            Err(SignalError::Malformed { .. }) => "malformed",
            Err(_) => "error",
        };
        self.metrics.signal(target, result);
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

fn parse_prometheus(status: reqwest::StatusCode, body: &[u8]) -> Result<PromData, SignalError> {
    let data = parse_envelope(status, body)?;
    serde_json::from_value(data).map_err(|e| SignalError::Malformed {
        target: PROMETHEUS,
        reason: cap(format!("unexpected data: {e}")),
    })
}

/// The `data` of a successful Prometheus API answer.
fn parse_envelope(
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

fn parse_alertmanager(
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

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::StatusCode;

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn promql_escaping() {
        assert_eq!(promql_quote("plain"), r#""plain""#);
        assert_eq!(promql_quote(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(promql_quote("l1\nl2\r\t"), r#""l1\nl2\r\t""#);
        assert_eq!(promql_quote("\u{1}"), r#""\u0001""#);
        assert_eq!(promql_quote("ünï"), "\"ünï\"");
        // An attempt to close the matcher and add another stays one value.
        assert_eq!(
            promql_quote(r#"x"} or vector(1) or {a=""#),
            r#""x\"} or vector(1) or {a=\"""#
        );
    }

    #[test]
    fn am_escaping() {
        assert_eq!(am_quote(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(am_quote("l1\nl2"), r#""l1\nl2""#);
        // Alertmanager does not know \t: keep it literal.
        assert_eq!(am_quote("a\tb"), "\"a\tb\"");
    }

    #[test]
    fn builds_alerts_query_and_filters() {
        let q = alerts_query(
            "Machine\"Stuck",
            &m(&[("namespace", "ns"), ("name", "m\\1")]),
        )
        .expect("query");
        assert_eq!(
            q,
            r#"ALERTS{alertname="Machine\"Stuck",alertstate=~"firing|pending",name="m\\1",namespace="ns"}"#
        );
        let f = am_filters("X", &m(&[("alertname", "X"), ("a", "1\n")])).expect("filters");
        assert_eq!(f, vec![r#"alertname="X""#, r#"a="1\n""#]);
        let q = promql_parser::parser::parse(&q);
        assert!(q.is_ok(), "{q:?}");
    }

    #[test]
    fn utf8_label_names_are_quoted_so_they_cannot_break_out() {
        let labels = m(&[("k8s.namespace.name", "ns"), ("a}or{b", "v"), ("zone", "z")]);
        assert_eq!(
            alerts_query("X", &labels).expect("query"),
            r#"ALERTS{alertname="X",alertstate=~"firing|pending","a}or{b"="v","k8s.namespace.name"="ns",zone="z"}"#
        );
        assert_eq!(
            am_filters("X", &labels).expect("filters"),
            vec![
                r#"alertname="X""#,
                r#""a}or{b"="v""#,
                r#""k8s.namespace.name"="ns""#,
                r#"zone="z""#
            ]
        );
        let q = alerts_query("X", &m(&[("quo\"te", "v")])).expect("query");
        assert!(q.ends_with(r#","quo\"te"="v"}"#), "{q}");
    }

    #[test]
    fn refuses_matchers_that_would_fake_clearance() {
        for bad in [
            m(&[("", "v")]),
            m(&[("alertname", "Other")]),
            m(&[("alertstate", "pending")]),
        ] {
            let e = alerts_query("X", &bad).expect_err("refused");
            assert_eq!(e.label(), "invalid_input");
            assert!(am_filters("X", &bad).is_err());
        }
        assert!(alerts_query("", &m(&[])).is_err());
    }

    #[test]
    fn parses_prometheus_answers() {
        let ok = StatusCode::OK;
        let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert!(matches!(parse_prometheus(ok, empty), Ok(PromData::Vector(v)) if v.is_empty()));
        let one = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"__name__":"ALERTS","alertname":"X"},"value":[1700000000.5,"1"]}]}}"#;
        assert!(matches!(parse_prometheus(ok, one), Ok(PromData::Vector(v)) if v.len() == 1));
        let scalar = br#"{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}"#;
        assert!(matches!(
            parse_prometheus(ok, scalar),
            Ok(PromData::Scalar(_))
        ));

        let err = br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
        let e = parse_prometheus(StatusCode::BAD_REQUEST, err).expect_err("error");
        assert_eq!(e.label(), "query_error");
        assert!(e.to_string().contains("bad_data"));

        let cases: [(StatusCode, &[u8], &str); 6] = [
            (
                StatusCode::BAD_GATEWAY,
                b"<html>proxy</html>",
                "http_status",
            ),
            (ok, b"{", "malformed"),
            (ok, b"[]", "malformed"),
            (ok, br#"{"status":"weird","data":{}}"#, "malformed"),
            (ok, br#"{"status":"success"}"#, "malformed"),
            (
                ok,
                br#"{"status":"success","data":{"resultType":"exemplar","result":[]}}"#,
                "malformed",
            ),
        ];
        for (status, body, label) in cases {
            let e = parse_prometheus(status, body).expect_err("rejected");
            assert_eq!(e.label(), label, "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn parses_alertmanager_answers() {
        let ok = StatusCode::OK;
        assert!(parse_alertmanager(ok, b"[]").expect("empty").is_empty());
        let one = br#"[{"annotations":{},"endsAt":"2023-01-01T00:00:00Z","fingerprint":"abc",
            "receivers":[{"name":"r"}],"startsAt":"2023-01-01T00:00:00Z",
            "status":{"inhibitedBy":[],"silencedBy":["s1"],"state":"suppressed"},
            "updatedAt":"2023-01-01T00:00:00Z","labels":{"alertname":"X"}}]"#;
        let a = parse_alertmanager(ok, one).expect("one");
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].status.as_ref().map(|s| s.silenced_by.len()), Some(1));
        let e = parse_alertmanager(StatusCode::BAD_REQUEST, b"\"bad matcher format\"")
            .expect_err("400");
        assert_eq!(e.label(), "query_error");
        assert_eq!(
            parse_alertmanager(StatusCode::INTERNAL_SERVER_ERROR, b"")
                .expect_err("500")
                .label(),
            "http_status"
        );
        assert_eq!(
            parse_alertmanager(ok, b"{}").expect_err("object").label(),
            "malformed"
        );
    }

    #[test]
    fn builds_recovery_queries() {
        let now = recovery_query(&["A", "B\"x"], None).expect("query");
        assert_eq!(
            now,
            r#"ALERTS{alertname="A",alertstate="firing"} or ALERTS{alertname="B\"x",alertstate="firing"}"#
        );
        let within =
            recovery_query(&["A"], Some(std::time::Duration::from_secs(3600))).expect("query");
        assert_eq!(
            within,
            r#"max_over_time(ALERTS{alertname="A",alertstate="firing"}[3600s])"#
        );
        for q in [now, within] {
            let parsed = promql_parser::parser::parse(&q);
            assert!(parsed.is_ok(), "{q}: {parsed:?}");
        }
        assert_eq!(
            recovery_query(&[], None).expect_err("empty").label(),
            "invalid_input"
        );
        assert!(recovery_query(&[""], None).is_err());
    }

    #[test]
    fn recovery_answers_are_checked_and_stripped() {
        let ok = StatusCode::OK;
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"__name__":"ALERTS","alertname":"A","alertstate":"firing","kind":"K"},"value":[1,"1"]},
            {"metric":{"alertname":"A","alertstate":"firing","kind":"L"},"value":[1,"1"]}]}}"#;
        let sets = firing_label_sets(parse_prometheus(ok, body).expect("parse"), &["A"])
            .expect("label sets");
        assert_eq!(
            sets,
            vec![
                m(&[("alertname", "A"), ("kind", "K")]),
                m(&[("alertname", "A"), ("kind", "L")])
            ]
        );
        let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        let none = firing_label_sets(parse_prometheus(ok, empty).expect("parse"), &["A"]);
        assert!(none.expect("empty is an answer").is_empty());
        for bad in [
            // Not asked for, no alertname, pending, not a vector.
            &br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"alertname":"Z"},"value":[1,"1"]}]}}"#[..],
            br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"kind":"K"},"value":[1,"1"]}]}}"#,
            br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"alertname":"A","alertstate":"pending"},"value":[1,"1"]}]}}"#,
            br#"{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}"#,
        ] {
            let e = firing_label_sets(parse_prometheus(ok, bad).expect("parse"), &["A"])
                .expect_err("refused");
            assert_eq!(e.label(), "malformed", "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn prometheus_special_floats() {
        assert!(prom_float("NaN").expect("nan").is_nan());
        assert_eq!(prom_float("+Inf").expect("inf"), f64::INFINITY);
        assert_eq!(prom_float("-Inf").expect("-inf"), f64::NEG_INFINITY);
        assert_eq!(prom_float("0.25").expect("num"), 0.25);
        assert_eq!(prom_float("1e-3").expect("exp"), 0.001);
        assert_eq!(prom_float("x").expect_err("bad").label(), "malformed");
    }

    /// A loopback HTTP stub answering `body` to every request; returns its
    /// URL and the User-Agent header of each request it saw.
    async fn stub(body: &'static str) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let ua = String::from_utf8_lossy(&head)
                    .lines()
                    .find_map(|l| {
                        l.split_once(':')
                            .filter(|(k, _)| k.eq_ignore_ascii_case("user-agent"))
                            .map(|(_, v)| v.trim().to_string())
                    })
                    .unwrap_or_default();
                record.lock().expect("lock").push(ua);
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(reply.as_bytes()).await;
            }
        });
        (url, seen)
    }

    #[tokio::test]
    async fn prometheus_and_alertmanager_requests_name_remedy_and_its_version() {
        let (prom, prom_seen) =
            stub(r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#).await;
        let (am, am_seen) = stub("[]").await;
        let cfg = SignalsConfig {
            prometheus_url: Some(prom),
            alertmanager_url: Some(am),
            ..SignalsConfig::default()
        };
        let v = Verifier::new(&cfg, Arc::new(Metrics::new(1))).expect("verifier");
        assert_eq!(v.query_scalar("vector(1)").await.expect("query"), None);
        assert!(v.am_alerts(&[]).await.expect("alerts").is_empty());
        let want = format!("remedy/{}", env!("CARGO_PKG_VERSION"));
        assert_eq!(*prom_seen.lock().expect("lock"), vec![want.clone()]);
        assert_eq!(*am_seen.lock().expect("lock"), vec![want]);
    }

    #[tokio::test]
    async fn no_prometheus_means_no_proof() {
        let cfg = SignalsConfig::default();
        let v = Verifier::new(&cfg, Arc::new(Metrics::new(1))).expect("verifier");
        let e = v
            .cleared("X", &BTreeMap::new(), None)
            .await
            .expect_err("no proof");
        assert_eq!(e.label(), "not_configured");
        assert!(v.query_scalar("vector(1)").await.is_err());
        assert_eq!(
            v.alert_label_sets(&["X"], None)
                .await
                .expect_err("no Prometheus")
                .label(),
            "not_configured"
        );
        assert!(v.health().status().is_empty());
    }

    #[test]
    fn health_tracks_last_error_and_success() {
        let h = SignalHealth::with_targets(&[PROMETHEUS, ALERTMANAGER]);
        assert_eq!(h.status(), vec![(ALERTMANAGER, None), (PROMETHEUS, None)]);
        h.observe(PROMETHEUS, Err("timeout"));
        assert_eq!(h.status()[1], (PROMETHEUS, Some("timeout")));
        assert_eq!(h.last_success(PROMETHEUS), None);
        h.observe(PROMETHEUS, Ok(()));
        assert_eq!(h.status()[1], (PROMETHEUS, None));
        assert!(h.last_success(PROMETHEUS).is_some());
    }
}
