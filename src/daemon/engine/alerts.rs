//! Alert episodes in the engine: notifications, recovery from Prometheus
//! after a restart, and verification before anything is remediated.

use super::Engine;
use crate::config::AlertRule;
use crate::decide::episodes::Evidence;
use crate::decide::episodes::{EPISODE_TTL, Episode, MAX_EPISODES, Refusal};
use crate::decide::recovery;
use crate::metrics::EpisodeLabels;
use crate::model::scope::Scope;
use crate::remediate::step::Goal;
use crate::signals::{AlertEvent, AlertStatus};
use crate::sync::LockExt;
use chrono::{DateTime, Utc};
use std::time::{Duration, Instant};

/// How often firing episodes without proof are checked against Prometheus.
const PROOF_EVERY: Duration = Duration::from_secs(2);

/// Alerts firing again after a resolution proven in one tick (a query each).
const REFIRING_PER_TICK: usize = 4;

impl Engine {
    /// Records an alert notification. Firing cancels queued remediation in
    /// its scope at once; resolved only starts the settle clock. A refused
    /// notification (see [`crate::decide::episodes`]) changes nothing and is
    /// counted and logged.
    pub fn handle(&self, ev: &AlertEvent) {
        let Some(rule) = self.settings.alerts.get(&ev.alertname) else {
            return;
        };
        let scope = Scope::from_alert(rule, &ev.labels);
        self.notify(
            rule,
            &scope,
            ev.status == AlertStatus::Firing,
            ev.received_at,
            Evidence::Firing,
        );
    }

    pub(super) fn notify(
        &self,
        rule: &AlertRule,
        scope: &Scope,
        firing: bool,
        at: DateTime<Utc>,
        evidence: Evidence,
    ) {
        let result = self
            .state
            .locked()
            .episodes
            .notify_as(rule, scope, firing, at, evidence);
        if let Err(why) = result {
            self.refused(&rule.alertname, why);
            tracing::warn!(alert = %rule.alertname, firing, matchers = ?scope.matchers, reason = why.label(), "alert notification refused: nothing changes");
            return;
        }
        tracing::debug!(alert = %rule.alertname, firing, matchers = ?scope.matchers, "alert episode updated");
        if firing {
            self.cancel_remediation(scope);
        }
    }

    /// Counts a refusal. The name may come from the episode record, which
    /// anyone allowed to write that ConfigMap can fill: only configured
    /// alerts name a series of their own, the rest share `other`, so a
    /// forged record cannot add series.
    pub(super) fn refused(&self, alertname: &str, why: Refusal) {
        let alert = match self.settings.alerts.get(alertname) {
            Some(_) => alertname,
            None => crate::metrics::values::OTHER_ALERT,
        };
        self.metrics
            .signals
            .episodes_refused
            .get_or_create(&EpisodeLabels {
                alert: alert.to_string(),
                reason: why.label(),
            })
            .inc();
    }

    /// Drops queued remediation in a scope that fires (again).
    pub(super) fn cancel_remediation(&self, scope: &Scope) {
        let store = &self.deps.store;
        let dropped = self.pending.cancel(|k, goal| {
            !matches!(goal, Goal::Hold(_))
                && store.get(k).is_some_and(|e| scope.matches(k, &e.view))
        });
        if !dropped.is_empty() {
            self.forget_plans(&dropped);
            tracing::info!(alert = %scope.alertname, cancelled = dropped.len(), "alert fires: queued remediation cancelled");
        }
    }

    /// Rebuilds episodes from Prometheus' ALERTS when due. A failed query
    /// changes nothing (the verifier counts and logs it) and is retried
    /// after `recovery::RETRY`.
    pub(super) async fn recover(&self, now: DateTime<Utc>) {
        let names = self.settings.alerts.names();
        let Some(v) = self.deps.verifier.as_ref().filter(|_| !names.is_empty()) else {
            self.with_schedule(recovery::Schedule::not_needed);
            return;
        };
        // Two calls of at most two requests each: one announced wait.
        let answer = self
            .signal(async {
                Ok::<_, crate::signals::SignalError>(recovery::Answer {
                    firing_now: v.alert_label_sets(&names, None).await?,
                    fired_within: v.alert_label_sets(&names, Some(EPISODE_TTL)).await?,
                })
            })
            .await;
        match answer {
            Ok(a) => self.apply_recovery(&a, now),
            Err(e) => {
                let at = self.now();
                self.with_schedule(|s| s.failed(at));
                tracing::warn!(error = %e, label = e.label(), retry_in = ?recovery::RETRY, "cannot recover alert episodes from Prometheus");
            }
        }
    }

    /// Writes what an answer recovers; the decision is `recovery::recover`.
    pub(super) fn apply_recovery(&self, answer: &recovery::Answer, now: DateTime<Utc>) {
        let plan = {
            let mut st = self.state.locked();
            let plan = recovery::recover(
                &self.settings.alerts,
                answer,
                st.episodes.map(),
                now,
                MAX_EPISODES,
            );
            for (scope, ep) in &plan.write {
                // recovery::recover leaves room for what it writes.
                let _ = st.episodes.put(scope.clone(), ep.clone());
            }
            plan
        };
        let at = self.now();
        self.with_schedule(|s| s.succeeded(at));
        let firing: Vec<&Scope> = plan.firing().collect();
        tracing::info!(
            firing = firing.len(),
            resolved = plan.write.len() - firing.len(),
            kept_webhook = plan.kept_webhook,
            dropped = plan.dropped,
            "alert episodes recovered from Prometheus"
        );
        if plan.dropped > 0 {
            tracing::warn!(
                dropped = plan.dropped,
                max = MAX_EPISODES,
                "episode bound reached: some recovered episodes left out"
            );
        }
        for scope in firing {
            self.cancel_remediation(scope);
        }
    }

    /// Asks Prometheus, at most every [`PROOF_EVERY`], whether the alerts
    /// of firing episodes taken from the episode record (no proof that they
    /// fired) have `ALERTS` series for their scopes. Proven ones outrank
    /// junk when the record must shed; the rest wait, holding what they
    /// hold, and are the first to go. An error changes nothing.
    pub(super) async fn prove_firing(&self, now: Duration) {
        let (names, refiring): (Vec<String>, _) = {
            let mut st = self.state.locked();
            let recent = st
                .firing_proof_at
                .is_some_and(|at| now.saturating_sub(at) < PROOF_EVERY);
            if recent {
                return;
            }
            let names = st.episodes.unproven_firing();
            let refiring = st.episodes.unproven_refiring();
            if names.is_empty() && refiring.is_empty() {
                return;
            }
            st.firing_proof_at = Some(now);
            (names.into_iter().collect(), refiring)
        };
        let Some(v) = &self.deps.verifier else {
            return;
        };
        // Firing again after a resolution: proven only by ALERTS since it
        // ended, one query each (a few a tick: the rest wait their turn).
        for (alertname, since) in refiring.into_iter().take(REFIRING_PER_TICK) {
            let window = (Utc::now() - since)
                .to_std()
                .unwrap_or_default()
                .max(Duration::from_secs(1));
            let answer = self
                .signal(v.alert_label_sets(&[alertname.as_str()], Some(window)))
                .await;
            match answer {
                Ok(sets) => {
                    let proven = self
                        .state
                        .locked()
                        .episodes
                        .prove_refiring(&alertname, since, &sets);
                    if proven > 0 {
                        tracing::info!(alert = %alertname, proven, %since, "firing again after its resolution: confirmed by Prometheus");
                    }
                }
                Err(e) => {
                    tracing::warn!(alert = %alertname, error = %e, label = e.label(), "cannot check whether the alert fired again; retrying later");
                    break;
                }
            }
        }
        if names.is_empty() {
            return;
        }
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        match self
            .signal(v.alert_label_sets(&names, Some(EPISODE_TTL)))
            .await
        {
            Ok(sets) => {
                let proven = self.state.locked().episodes.prove_firing(&sets);
                if proven > 0 {
                    tracing::info!(
                        proven,
                        "firing episodes from the episode record confirmed by Prometheus"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, label = e.label(), "cannot check whether recorded firing alerts fired; retrying later")
            }
        }
    }

    /// Verifies resolved episodes whose settle time has passed, the longest
    /// waiting first. Errors keep the episode unverified (no remediation
    /// without proof) and back it off (`decide::retry`), so a Prometheus
    /// that times out is not asked again for every episode at every tick.
    /// One tick asks for at most `signals.timeout` worth of answers and
    /// stops at the first timeout or unreachable source: the rest wait for
    /// a later tick, and the loop goes on (#38.2).
    pub(super) async fn verify(&self, now: DateTime<Utc>) {
        let clock = self.now();
        let mut due: Vec<(Scope, Episode)> = {
            let mut st = self.state.locked();
            let st = &mut *st;
            let episodes = st.episodes.map();
            st.verify_retries.retain(|s| episodes.contains_key(s));
            let retries = &st.verify_retries;
            episodes
                .iter()
                .filter(|(_, e)| !e.firing)
                .filter(|(s, _)| !retries.waiting(s, clock))
                .filter(|(_, e)| {
                    let since = e.verified_at.unwrap_or(e.changed_at);
                    (now - since)
                        .to_std()
                        .is_ok_and(|d| d >= self.settings.settle)
                })
                .map(|(s, e)| (s.clone(), e.clone()))
                .collect()
        };
        due.sort_by_key(|(_, e)| e.verified_at.unwrap_or(e.changed_at));
        let started = Instant::now();
        for (scope, ep) in due {
            if started.elapsed() >= self.settings.signal_timeout {
                tracing::debug!("verification budget of this tick spent; the rest next tick");
                break;
            }
            if !ep.fired {
                match self.proven(&scope, &ep).await {
                    Proof::Fired => {}
                    Proof::Not => continue,
                    Proof::Unknown { source_down } => {
                        if source_down {
                            break;
                        }
                        continue;
                    }
                }
            }
            let verify_query = self
                .settings
                .alerts
                .get(&ep.alertname)
                .and_then(|a| a.verify_query.clone());
            // An error carries whether its source is down (see below).
            let result = match &self.deps.verifier {
                Some(v) => self
                    .signal(v.cleared(&ep.alertname, &ep.matchers, verify_query.as_deref()))
                    .await
                    .map_err(|e| (source_is_down(&e), e.to_string())),
                None => Err((false, "no Prometheus configured: cannot verify".to_string())),
            };
            let source_down = matches!(result, Err((true, _)));
            let mut st = self.state.locked();
            let st = &mut *st;
            let Some(e) = st.episodes.get_mut(&scope) else {
                continue;
            };
            if e.firing || !e.fired {
                // Fired again while we were asking, or taken over by a new
                // unproven resolved notification.
                continue;
            }
            match result {
                Ok(c) if c.cleared => {
                    if e.verified_at.is_none() {
                        tracing::info!(alert = %ep.alertname, matchers = ?ep.matchers, "verified cleared");
                    }
                    e.verified_at = Some(now);
                    e.last_error = None;
                    st.verify_retries.succeeded(&scope);
                }
                Ok(c) => {
                    tracing::info!(alert = %ep.alertname, why = %c.why, "resolved but not cleared yet");
                    e.verified_at = None;
                    e.changed_at = now;
                    e.last_error = Some(c.why);
                    st.verify_retries.succeeded(&scope);
                }
                Err((_, why)) => {
                    let attempt = st.verify_retries.failed(&scope, clock);
                    let retry_in = attempt.not_before.saturating_sub(clock);
                    tracing::warn!(alert = %ep.alertname, error = %why, failures = attempt.failures, ?retry_in, "verification failed; retrying after its backoff");
                    e.verified_at = None;
                    e.last_error = Some(why);
                }
            }
            if source_down {
                break;
            }
        }
    }

    /// Whether Prometheus remembers `ep`'s alert firing for its scope within
    /// the episode TTL: the evidence a resolved notification for a scope
    /// remedy never saw firing needs. No: the episode is dropped, counted
    /// and logged. An error keeps it for a later try, after its backoff.
    pub(super) async fn proven(&self, scope: &Scope, ep: &Episode) -> Proof {
        let Some(v) = &self.deps.verifier else {
            return Proof::Unknown { source_down: false };
        };
        let answer = self
            .signal(v.alert_label_sets(&[ep.alertname.as_str()], Some(EPISODE_TTL)))
            .await;
        let mut st = self.state.locked();
        match answer {
            Ok(sets) => {
                let fired = sets
                    .iter()
                    .any(|l| scope.matchers.iter().all(|(k, v)| l.get(k) == Some(v)));
                let unchanged = st
                    .episodes
                    .map()
                    .get(scope)
                    .is_some_and(|e| !e.fired && !e.firing);
                if fired {
                    if let Some(e) = st.episodes.get_mut(scope) {
                        e.fired = true;
                    }
                    return Proof::Fired;
                }
                if unchanged {
                    st.episodes.remove(scope);
                    drop(st);
                    self.refused(&ep.alertname, Refusal::Unproven);
                    tracing::warn!(alert = %ep.alertname, matchers = ?ep.matchers, "resolved notification for an alert Prometheus never saw firing in this scope: ignored");
                }
                Proof::Not
            }
            Err(e) => {
                let clock = self.now();
                let attempt = st.verify_retries.failed(scope, clock);
                let retry_in = attempt.not_before.saturating_sub(clock);
                tracing::warn!(alert = %ep.alertname, error = %e, failures = attempt.failures, ?retry_in, "cannot check whether the alert fired; retrying after its backoff");
                if let Some(ep) = st.episodes.get_mut(scope) {
                    ep.last_error = Some(format!("cannot check that it fired: {e}"));
                }
                Proof::Unknown {
                    source_down: source_is_down(&e),
                }
            }
        }
    }
}

/// What Prometheus says of a resolved episode never seen firing.
pub(super) enum Proof {
    Fired,
    Not,
    /// No answer; `source_down`: a timeout or no connection, so the other
    /// episodes of this tick would wait for the same.
    Unknown {
        source_down: bool,
    },
}

/// A source that timed out or cannot be reached: asking it again in the
/// same tick only makes the tick longer.
fn source_is_down(e: &crate::signals::SignalError) -> bool {
    matches!(
        e,
        crate::signals::SignalError::Timeout { .. }
            | crate::signals::SignalError::Unreachable { .. }
    )
}
