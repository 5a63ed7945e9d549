//! The operator subcommands that talk to a running remedy or to the cluster:
//! `remedy status` and `remedy clear`.

use crate::config::Validated;
use crate::daemon::engine::StatusReport;
use crate::daemon::execute::{ExecError, Executor, WriteLimiter};
use crate::daemon::leader::Leadership;
use crate::metrics::Metrics;
use crate::model::view::ResourceKey;
use crate::remediate::step::{Done, Goal};
use crate::signals::SignalError;
use crate::signals::verify::Verifier;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("cannot reach remedy at {url}: {source}")]
    Http {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("target {0:?} is not NAMESPACE/KIND/NAME")]
    Target(String),
    #[error("no configured profile watches kind {0:?}")]
    UnknownKind(String),
    #[error("cannot reach Kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Exec(#[from] ExecError),
    #[error("verification: {0}")]
    Signal(#[from] SignalError),
    #[error("alert {alert} is not cleared: {why}; nothing was changed")]
    NotCleared { alert: String, why: String },
    #[error("{0}")]
    Pause(#[from] crate::daemon::pause::PauseError),
    #[error("{0}: not watched by that remedy (kind, namespace or name)")]
    NotWatched(String),
}

impl CliError {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Http { .. } => "http",
            Self::Target(_) => "target",
            Self::UnknownKind(_) => "unknown_kind",
            Self::Kube(_) => "kube",
            Self::Exec(e) => e.label(),
            Self::Signal(e) => e.label(),
            Self::NotCleared { .. } => "not_cleared",
            Self::Pause(e) => e.label(),
            Self::NotWatched(_) => "not_watched",
        }
    }
}

/// Fetches /status from a running remedy and renders it for a terminal.
pub async fn status(url: &str) -> Result<String, CliError> {
    let endpoint = format!("{}/status", url.trim_end_matches('/'));
    let http = |source| CliError::Http {
        url: endpoint.clone(),
        source,
    };
    let report: StatusReport = reqwest::get(&endpoint)
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(http)?
        .json()
        .await
        .map_err(http)?;
    Ok(render(&report))
}

pub fn render(r: &StatusReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "leader: {}  dry_run: {}  breaker: {}  budget tokens: {:.1}",
        r.leader,
        r.dry_run,
        if r.breaker_open { "OPEN" } else { "closed" },
        r.budget_tokens
    );
    if let Some(p) = &r.paused {
        let _ = writeln!(
            out,
            "PAUSED by the pause switch (nothing is written; `remedy resume` clears it): {} (by {} at {})",
            p.reason, p.by, p.since
        );
    }
    let _ = writeln!(out, "held ({}):", r.held.len());
    for h in &r.held {
        let why = r.waiting.get(h).map(String::as_str).unwrap_or("-");
        let _ = writeln!(out, "  {h}  waiting: {why}");
    }
    let _ = writeln!(out, "pending actions ({}):", r.pending.len());
    for p in &r.pending {
        let _ = writeln!(out, "  {p}");
    }
    let _ = writeln!(out, "alert episodes ({}):", r.episodes.len());
    for e in &r.episodes {
        let state = if e.firing {
            "firing".to_string()
        } else if let Some(t) = e.verified_at {
            format!("resolved, verified cleared at {t}")
        } else {
            "resolved, not verified yet".to_string()
        };
        let _ = writeln!(out, "  {} {:?}: {state}", e.alertname, e.matchers);
        if let Some(err) = &e.last_error {
            let _ = writeln!(out, "    last verification problem: {err}");
        }
    }
    out
}

/// Manually remediates one resource with the daemon's guards: never touches
/// a pause someone else set, writes with resourceVersion preconditions,
/// wraps the status clear in skip-remediation, honours dry-run, and with
/// `require_cleared` first verifies that alert is cleared.
pub async fn clear(
    v: &Validated,
    target: &str,
    dry_run: bool,
    require_cleared: Option<&str>,
) -> Result<String, CliError> {
    let parts: Vec<&str> = target.split('/').collect();
    let [ns, kind, name] = parts.as_slice() else {
        return Err(CliError::Target(target.to_string()));
    };
    if name.is_empty() || kind.is_empty() {
        return Err(CliError::Target(target.to_string()));
    }
    let profile = v
        .profiles
        .iter()
        .find(|p| p.kind.eq_ignore_ascii_case(kind))
        .ok_or_else(|| CliError::UnknownKind(kind.to_string()))?;
    let metrics = Arc::new(Metrics::new(16));
    if let Some(alert) = require_cleared {
        let verifier = Verifier::new(&v.config.signals, metrics.clone())?;
        let c = verifier.cleared(alert, &BTreeMap::new(), None).await?;
        if !c.cleared {
            return Err(CliError::NotCleared {
                alert: alert.to_string(),
                why: c.why,
            });
        }
    }
    let client = crate::daemon::client::kube_client().await?;
    let b = &v.config.budget;
    let executor = Executor::new(
        client,
        metrics,
        Arc::new(WriteLimiter::new(b.writes_per_second, b.write_burst)),
        // A human at the keyboard is the authority here, not the lease.
        Leadership::fixed(true),
        dry_run || v.config.dry_run,
    );
    let key = ResourceKey::new(&profile.kind, ns, name);
    let out = executor.run(profile, &key, &Goal::Remediate).await?;
    let verb = if dry_run || v.config.dry_run {
        "would do"
    } else {
        "did"
    };
    Ok(match (out.gone, out.done, out.steps.is_empty()) {
        (true, _, _) => format!("{key}: not found"),
        (_, Done::ForeignPause, _) => {
            format!("{key}: paused by someone else; remedy does not touch it")
        }
        (_, Done::Deleting, _) => format!("{key}: being deleted; left alone"),
        (_, _, true) => format!("{key}: nothing to do"),
        _ => format!("{key}: {verb} {:?}", out.steps),
    })
}

/// `remedy pause` (a reason) and `remedy resume` (none): writes the pause
/// switch ConfigMap that every replica reads at every tick.
pub async fn pause(
    namespace: &str,
    configmap: &str,
    reason: Option<&str>,
    by: &str,
) -> Result<String, CliError> {
    use crate::daemon::pause::{Paused, write};
    let client = kube::Client::try_default().await?;
    let api = kube::Api::namespaced(client, namespace);
    let since = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let paused = reason.map(|r| Paused {
        reason: r.to_string(),
        by: by.to_string(),
        since: since.clone(),
    });
    write(&api, configmap, paused.as_ref(), by, &since).await?;
    Ok(match reason {
        Some(r) => format!(
            "paused ({namespace}/{configmap}): every remedy replica stops writing at its next tick; held resources stay held\n  reason: {r}\n  by: {by} at {since}\n"
        ),
        None => format!(
            "resumed ({namespace}/{configmap}): remedy writes again from its next tick\n  by: {by} at {since}\n"
        ),
    })
}

/// `remedy explain NS/KIND/NAME`: the running remedy's view of one resource
/// (`GET /explain`), then the Events remedy wrote on it, read with
/// KUBECONFIG when the cluster is reachable (the history remedy knows).
pub async fn explain(url: &str, target: &str) -> Result<String, CliError> {
    let Some((ns, kind, name)) = crate::daemon::engine::http::split_target(target) else {
        return Err(CliError::Target(target.to_string()));
    };
    let endpoint = format!("{}/explain", url.trim_end_matches('/'));
    let http = |source| CliError::Http {
        url: endpoint.clone(),
        source,
    };
    let r = reqwest::Client::new()
        .get(&endpoint)
        .query(&[("resource", target)])
        .send()
        .await
        .map_err(http)?;
    if r.status() == reqwest::StatusCode::NOT_FOUND {
        return Err(CliError::NotWatched(target.to_string()));
    }
    let x: crate::daemon::engine::Explanation = r
        .error_for_status()
        .map_err(http)?
        .json()
        .await
        .map_err(http)?;
    let mut out = render_explanation(&x);
    let _ = writeln!(out, "history (Events remedy wrote on it):");
    match remedy_events(ns, kind, name).await {
        Ok(events) if events.is_empty() => {
            let _ = writeln!(out, "  none");
        }
        Ok(events) => {
            for line in events {
                let _ = writeln!(out, "  {line}");
            }
        }
        Err(e) => {
            let _ = writeln!(out, "  not read ({e})");
        }
    }
    Ok(out)
}

pub fn render_explanation(x: &crate::daemon::engine::Explanation) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} (profile {}): {}", x.resource, x.profile, x.state);
    if let Some(p) = &x.paused {
        let _ = writeln!(
            out,
            "  PAUSED: the pause switch is set ({}, by {} at {}): nothing is written",
            p.reason, p.by, p.since
        );
    }
    if let Some(h) = &x.held {
        let since = h
            .since
            .map(|t| t.to_rfc3339())
            .unwrap_or_else(|| "?".into());
        let _ = writeln!(
            out,
            "  held by remedy: {} since {since}",
            h.reason.as_deref().unwrap_or("?")
        );
    }
    if x.foreign_pause {
        let _ = writeln!(out, "  paused by someone else: remedy never touches it");
    }
    if let Some(reason) = &x.reason {
        let at = x
            .failure_time
            .map(|t| format!(", failed at {}", t.to_rfc3339()))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  failure: {reason}, crash count {}{at}",
            x.crash_count
        );
    }
    let _ = writeln!(
        out,
        "  failure domain: {} (outage breaker {})",
        x.domain,
        if x.breaker_open { "OPEN" } else { "closed" }
    );
    if !x.firing_alerts.is_empty() {
        let _ = writeln!(out, "  held while firing: {}", x.firing_alerts.join(", "));
    }
    if !x.remediating_alerts.is_empty() {
        let _ = writeln!(
            out,
            "  to remediate for resolved: {}",
            x.remediating_alerts.join(", ")
        );
    }
    if let Some(until) = x.backoff_until {
        let _ = writeln!(
            out,
            "  backoff: until {} ({:.0} s)",
            until.to_rfc3339(),
            x.backoff_remaining_seconds
        );
    }
    if let Some(o) = &x.owner {
        let _ = writeln!(
            out,
            "  owner {}: {} of at most {} releases unanswered (budget.per)",
            o.name, o.in_flight, o.max_in_flight
        );
    }
    if let Some(who) = &x.retried_by {
        let _ = writeln!(out, "  retried by: {who}");
    }
    if let Some(r) = &x.external_remediation {
        let _ = writeln!(out, "  external remediation: {r}");
    }
    if let Some(at) = x.controller_retries_at {
        let _ = writeln!(
            out,
            "  its controller retries by itself at {} (remedy adds no wait)",
            at.to_rfc3339()
        );
    }
    match (&x.waiting, x.pending) {
        (_, true) => {
            let _ = writeln!(out, "  a goal for it is queued or running");
        }
        (Some(w), false) => {
            let _ = writeln!(out, "  waits for: {w}");
        }
        (None, false) => {}
    }
    if let Some((place, of)) = x.release_place {
        let _ = writeln!(
            out,
            "  release line: {place} of {of} in its domain, at {:.2}/s",
            x.release_rate_per_second
        );
        match x.eta_seconds {
            Some(s) => {
                let _ = writeln!(
                    out,
                    "  estimated release: in about {s:.0} s (at the current pace)"
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "  estimated release: none while the breaker is open or remedy is paused"
                );
            }
        }
    }
    out
}

/// Events on the object reported by remedy, oldest first.
async fn remedy_events(ns: &str, kind: &str, name: &str) -> Result<Vec<String>, kube::Error> {
    use k8s_openapi::api::core::v1::Event;
    let client = kube::Client::try_default().await?;
    let api: kube::Api<Event> = if ns.is_empty() {
        kube::Api::all(client)
    } else {
        kube::Api::namespaced(client, ns)
    };
    let lp = kube::api::ListParams::default().fields(&format!("involvedObject.name={name}"));
    let mut events: Vec<(String, String)> = api
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object
                .kind
                .as_deref()
                .is_some_and(|k| k.eq_ignore_ascii_case(kind))
                && e.reporting_component.as_deref() == Some("remedy")
        })
        .map(|e| {
            let at = e
                .event_time
                .map(|t| t.0.to_string())
                .or_else(|| e.last_timestamp.map(|t| t.0.to_string()))
                .unwrap_or_default();
            let line = format!(
                "{at} {} {}: {}",
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            );
            (at, line)
        })
        .collect();
    events.sort();
    Ok(events.into_iter().map(|(_, l)| l).collect())
}
