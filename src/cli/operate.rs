//! The operator subcommands that talk to a running remedy or to the cluster:
//! `remedy status` and `remedy clear`.

use crate::config::Validated;
use crate::daemon::engine::StatusReport;
use crate::daemon::execute::{ExecError, Executor, WriteLimiter};
use crate::daemon::leader::Leadership;
use crate::metrics::Metrics;
use crate::model::view::ResourceKey;
use crate::remediate::plan::{Done, Goal};
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
    let client = crate::kube_client().await?;
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
