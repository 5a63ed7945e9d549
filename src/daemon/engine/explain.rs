//! Why one resource is where it is (`GET /explain`, `remedy explain`):
//! held or not and why, its failure domain and breaker, the alert that
//! blocks it, its backoff deadline, its place in the release order and an
//! estimate of when it goes, from the engine's last tick.

use super::Engine;
use crate::daemon::pause::Paused;
use crate::daemon::store::Entry;
use crate::model::classify::Verdict;
use crate::model::profile::Profile;
use crate::model::view::{PauseState, ResourceKey};
use crate::sync::LockExt;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What the engine knows of one resource.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Explanation {
    /// NAMESPACE/KIND/NAME.
    pub resource: String,
    pub profile: String,
    /// healthy, transient, terminal, held or unclassifiable.
    pub state: String,
    /// The classification rule that matched, if failing.
    pub reason: Option<String>,
    /// As the engine counts it: 0 once the last failure is older than
    /// `backoff.quiet_window`.
    pub crash_count: u32,
    pub failure_time: Option<DateTime<Utc>>,
    /// remedy's hold: why (breaker, alert:NAME) and since when.
    pub held: Option<HoldView>,
    /// Paused by someone else: remedy never touches it.
    pub foreign_pause: bool,
    /// Its failure domain's breaker: `other` for a domain past the bound.
    pub domain: String,
    pub breaker_open: bool,
    /// Alerts firing in a scope that selects it: it stays held while they fire.
    pub firing_alerts: Vec<String>,
    /// Resolved alerts that will remediate it once verified (or are).
    pub remediating_alerts: Vec<String>,
    /// What it waits for at the last tick: breaker, backoff, budget,
    /// settle or retry; none when nothing is planned for it.
    pub waiting: Option<String>,
    /// A goal for it is queued or running.
    pub pending: bool,
    /// Its owner under `budget.per` (`namespace/name`), that owner's
    /// releases unanswered and its `max_in_flight`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<OwnerView>,
    /// remedy's own wait before releasing or remediating it.
    pub backoff_remaining_seconds: f64,
    pub backoff_until: Option<DateTime<Utc>>,
    /// Under a profile naming its controller's rule (brupop): when that
    /// controller retries by itself, while that is to come; remedy adds no
    /// wait of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_retries_at: Option<DateTime<Utc>>,
    /// Who retries it, and when, while it fails and remedy does not hold
    /// it: its controller, remedy (`remediation.retry`) at a given time, or
    /// nobody, with the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_by: Option<String>,
    /// 1-based place among the resources waiting to be released in its
    /// failure domain, lowest crash count first, and how many wait there.
    pub release_place: Option<(usize, usize)>,
    /// Releases a second its domain may make now (0 while its breaker is open).
    pub release_rate_per_second: f64,
    /// Estimated seconds until released at the current pace: the later of
    /// its backoff and its place over the rate. None while its breaker is
    /// open or the pause switch is set (no pace to estimate from).
    pub eta_seconds: Option<f64>,
    pub paused: Option<Paused>,
    /// A Machine's Cluster API external remediation request: its phase and
    /// what it waits for (docs/guides/external-remediation.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_remediation: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OwnerView {
    pub name: String,
    pub in_flight: usize,
    pub max_in_flight: u32,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HoldView {
    pub reason: Option<String>,
    pub since: Option<DateTime<Utc>>,
}

/// The estimate: never before the backoff ends; at `rate` releases a
/// second, the n-th in line goes after about n / rate seconds. Pure.
pub fn eta(place: usize, rate: f64, backoff_remaining: Duration) -> Option<f64> {
    if !(rate.is_finite() && rate > 0.0) {
        return None;
    }
    Some((place as f64 / rate).max(backoff_remaining.as_secs_f64()))
}

impl Engine {
    /// `kind` is matched without case against the watched profiles.
    pub fn explain(&self, namespace: &str, kind: &str, name: &str) -> Option<Explanation> {
        let kind = self
            .deps
            .profiles
            .iter()
            .find(|p| p.kind.eq_ignore_ascii_case(kind))?
            .kind
            .clone();
        let key = ResourceKey::new(&kind, namespace, name);
        let e = self.deps.store.get(&key)?;
        let wall = Utc::now();
        let profile = &self.deps.profiles.get(e.profile)?;
        let backoff = self.settings.backoff.effective(profile.backoff);
        // As the engine counts them (`round.rs`): a count older than the
        // quiet window is 0 and waits for nothing.
        let crate::decide::facts::Retry {
            crash_count: crashes,
            remaining,
        } = crate::decide::facts::retry(backoff, e.view.crash_count, e.view.failure_time, wall);
        let controller_retries_at =
            backoff.controller_retries_at(crashes, e.view.failure_time, wall);
        let st = self.state.locked();
        let domain = st.core.breakers().slot_for(&key, &e.view).to_string();
        let breaker_open = st.core.breakers().is_open(&domain);
        let rate = st.core.release_rate(&domain);
        // Its domain's turn while retries there fail (`decide::zone_retry`),
        // on the wall clock.
        let zone_turn = st
            .core
            .zone_retry_at(&domain)
            .map(|at| wall_after(wall, at.saturating_sub(self.now())));
        let (mut firing_alerts, mut remediating_alerts) = (Vec::new(), Vec::new());
        for (scope, ep) in st.episodes.map() {
            if !scope.matches(&key, &e.view) {
                continue;
            }
            if ep.firing {
                firing_alerts.push(ep.alertname.clone());
            } else if ep.targets.as_ref().is_none_or(|t| t.contains(&key)) {
                remediating_alerts.push(ep.alertname.clone());
            }
        }
        let release_place = st.release_order.get(&key).copied();
        let external_remediation = st.external.get(&key).cloned();
        let owner = st.core.config().budget.per.as_ref().and_then(|per| {
            let name = per.of(&key, &e.view)?;
            Some(OwnerView {
                in_flight: st.core.in_flight(&name),
                max_in_flight: per.max_in_flight,
                name,
            })
        });
        let paused = self.deps.pause.as_ref().and_then(|p| p.state());
        let eta_seconds = match release_place {
            Some((place, _)) if !breaker_open && paused.is_none() => eta(place, rate, remaining),
            _ => None,
        };
        let (held, foreign_pause) = match &e.view.pause {
            PauseState::Ours { since, reason } => (
                Some(HoldView {
                    reason: reason.as_deref().map(str::to_string),
                    since: *since,
                }),
                false,
            ),
            PauseState::Foreign => (None, true),
            PauseState::NotPaused => (None, false),
        };
        // While the pause switch is set nothing is planned: a held
        // resource waits for the switch.
        let waiting = if paused.is_some() && held.is_some() {
            Some("paused".to_string())
        } else {
            st.report.waiting.get(&key.to_string()).cloned()
        };
        let reason = match &e.verdict {
            Verdict::Transient { reason } | Verdict::Terminal { reason, .. } => {
                Some(reason.clone())
            }
            Verdict::Unclassifiable { field } => Some(format!("field {field} has the wrong type")),
            Verdict::Healthy => None,
        };
        let backoff_until = (!remaining.is_zero())
            .then(|| chrono::Duration::from_std(remaining).ok())
            .flatten()
            .and_then(|d| wall.checked_add_signed(d));
        let retried_by = retried_by(&RetryFacts {
            profile,
            entry: &e,
            breaker_open,
            firing: !firing_alerts.is_empty(),
            wall,
            backoff_until,
            controller_retries_at,
            zone_turn,
        });
        Some(Explanation {
            resource: format!("{namespace}/{kind}/{name}"),
            profile: profile.name.clone(),
            state: e.state().to_string(),
            reason,
            crash_count: crashes,
            failure_time: e.view.failure_time,
            held,
            foreign_pause,
            domain,
            breaker_open,
            firing_alerts,
            remediating_alerts,
            waiting,
            pending: self.pending.contains(&key),
            owner,
            backoff_remaining_seconds: remaining.as_secs_f64(),
            backoff_until,
            retried_by,
            controller_retries_at,
            release_place,
            release_rate_per_second: rate,
            eta_seconds,
            paused,
            external_remediation,
        })
    }
}

/// What [`retried_by`] reads.
struct RetryFacts<'a> {
    profile: &'a Profile,
    entry: &'a Entry,
    breaker_open: bool,
    firing: bool,
    wall: DateTime<Utc>,
    backoff_until: Option<DateTime<Utc>>,
    controller_retries_at: Option<DateTime<Utc>>,
    /// Its domain's next retry while retries there fail.
    zone_turn: Option<DateTime<Utc>>,
}

/// `wall` plus `d`, or `wall` where that does not fit.
fn wall_after(wall: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| wall.checked_add_signed(d))
        .unwrap_or(wall)
}

/// Who retries a failing resource that remedy does not hold, and when.
fn retried_by(f: &RetryFacts<'_>) -> Option<String> {
    let e = f.entry;
    if !matches!(e.view.pause, PauseState::NotPaused) {
        return None;
    }
    let at = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    match &e.verdict {
        Verdict::Healthy => return None,
        Verdict::Terminal { reason, .. } => {
            return Some(format!(
                "nobody: a terminal failure ({reason}) is never retried by remedy"
            ));
        }
        Verdict::Unclassifiable { .. } => {
            return Some("nobody: remedy cannot classify its failure".into());
        }
        Verdict::Transient { .. } => {}
    }
    let Some(retry) = &f.profile.remediation.retry else {
        return Some(match f.controller_retries_at {
            Some(t) => format!("its controller, at {} (its own rule)", at(t)),
            None => "its controller: the profile says it retries by itself".into(),
        });
    };
    if !e.view.clearable {
        return Some(
            "nobody: what stops its controller is not remedy's to clear (remediation.keep_if_set: the cloud's own failure)"
                .into(),
        );
    }
    if f.breaker_open {
        return Some("remedy holds it instead: its failure domain's outage breaker is open".into());
    }
    if f.firing {
        return Some("the alert firing for it: held, and remediated once it resolves".into());
    }
    let quiet_at = wall_after(f.wall, retry.quiet.saturating_sub(e.written_at.elapsed()));
    if let Some(turn) = f.zone_turn {
        return Some(format!(
            "remedy, in its failure domain's turn: retries there fail, so one of its stuck resources is tried at a time (lowest crash count first), the next at {}, whatever their backoffs; once one succeeds the rest go",
            at(turn.max(quiet_at))
        ));
    }
    let when = f.backoff_until.map_or(quiet_at, |b| b.max(quiet_at));
    Some(format!(
        "remedy, at {} at the earliest: its controller gave up on it (nothing written for {} by then), then in its turn of the budget",
        at(when),
        humantime::format_duration(retry.quiet)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_the_later_of_the_backoff_and_the_queue() {
        assert_eq!(eta(10, 2.0, Duration::ZERO), Some(5.0));
        assert_eq!(eta(1, 2.0, Duration::from_secs(60)), Some(60.0));
        assert_eq!(
            eta(3, 0.0, Duration::ZERO),
            None,
            "an open breaker has no pace"
        );
        assert_eq!(eta(3, f64::NAN, Duration::ZERO), None);
    }
}
