//! The queries remedy asks: PromQL and Alertmanager matchers, with every
//! value quoted and every label name checked.

use super::super::{SignalError, legacy_label_name, valid_label_name};
use super::wire::cap;
use std::collections::BTreeMap;
use std::fmt::Write as _;

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
