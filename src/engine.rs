//! The decision loop. Every tick it reads the store, feeds the outage
//! breaker, turns alert episodes into goals and spends the release budget
//! (lowest crash_count first); workers carry the goals out. Followers run
//! the same loop for metrics but never enqueue a write.

use crate::budget::{Candidate, Sample, TokenBucket, plan_shared};
use crate::classify::Verdict;
use crate::config::{AlertRule, Config};
use crate::domains::Breakers;
pub use crate::episodes::Episode;
use crate::episodes::{Book, EPISODE_TTL, MAX_EPISODES, Refusal};
use crate::leader::Leadership;
use crate::metrics::{EpisodeLabels, KindReasonLabels, Metrics, ScopeLabels};
use crate::profile::{HoldRecord, Profile};
use crate::record::kube::RecordApi;
use crate::record::sync::Tracker;
use crate::recovery;
use crate::remediate::execute::Executor;
use crate::remediate::plan::Goal;
use crate::scope::Scope;
use crate::signals::verify::Verifier;
use crate::signals::{AlertEvent, AlertStatus};
use crate::store::{Entry, Store};
use crate::view::{PauseState, ResourceKey};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tracing::Instrument;

/// Hold reason recorded for breaker holds; alert holds record `alert:<name>`.
pub const BREAKER_REASON: &str = "breaker";
const ALERT_PREFIX: &str = "alert:";
const WORKERS: usize = 4;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StatusReport {
    pub leader: bool,
    pub dry_run: bool,
    pub breaker_open: bool,
    /// Failure domains whose breaker is open (`breaker.domain`).
    #[serde(default)]
    pub open_domains: Vec<String>,
    pub budget_tokens: f64,
    pub held: Vec<String>,
    pub pending: Vec<String>,
    pub waiting: BTreeMap<String, String>,
    pub episodes: Vec<Episode>,
    /// Full sizes of the lists above, which hold at most `limit` entries
    /// each (GET /status?limit=N); metrics have the complete counts.
    #[serde(default)]
    pub totals: BTreeMap<String, usize>,
    #[serde(default)]
    pub truncated: bool,
}

/// Entries per list in /status unless `?limit=` says otherwise, and the
/// most it may say: a 100k-resource fleet must not make a 10 MB answer.
pub const STATUS_LIMIT: usize = 500;
pub const STATUS_MAX_LIMIT: usize = 10_000;

impl StatusReport {
    /// A copy with every list cut to `limit` entries (in their sorted order)
    /// and the full sizes in `totals`.
    pub fn limited(&self, limit: usize) -> Self {
        let totals: BTreeMap<String, usize> = [
            ("held", self.held.len()),
            ("pending", self.pending.len()),
            ("waiting", self.waiting.len()),
            ("episodes", self.episodes.len()),
        ]
        .into_iter()
        .map(|(k, n)| (k.to_string(), n))
        .collect();
        Self {
            leader: self.leader,
            dry_run: self.dry_run,
            breaker_open: self.breaker_open,
            // At most MAX_DOMAINS: no need to cut.
            open_domains: self.open_domains.clone(),
            budget_tokens: self.budget_tokens,
            held: self.held.iter().take(limit).cloned().collect(),
            pending: self.pending.iter().take(limit).cloned().collect(),
            waiting: self
                .waiting
                .iter()
                .take(limit)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            episodes: self.episodes.iter().take(limit).cloned().collect(),
            truncated: totals.values().any(|&n| n > limit),
            totals,
        }
    }
}

struct State {
    /// One outage breaker per failure domain (`breaker.domain`).
    breakers: Breakers,
    bucket: TokenBucket,
    episodes: Book,
    /// resourceVersion a goal was planned from: the key is not planned again
    /// until the watch shows a newer version (the store lags our writes).
    planned_at_rv: HashMap<ResourceKey, Box<str>>,
    report: StatusReport,
    /// Whether this leadership term has looked at remedy's breaker holds
    /// yet (on the first tick that leads with every watch synced).
    resumed: bool,
    /// Where the episode record stands (leader election on).
    record: Tracker,
}

/// The episode record and the name this replica writes it under.
struct RecordLink {
    api: Arc<RecordApi>,
    identity: String,
}

/// Goals waiting for a worker, at most one per resource.
#[derive(Default)]
struct Pending {
    goals: Mutex<(BTreeMap<ResourceKey, Goal>, HashSet<ResourceKey>)>,
    notify: Notify,
}

impl Pending {
    /// Adds unless the resource already has a goal queued or running.
    fn offer(&self, key: ResourceKey, goal: Goal) -> bool {
        let Ok(mut g) = self.goals.lock() else {
            return false;
        };
        if g.0.contains_key(&key) || g.1.contains(&key) {
            return false;
        }
        g.0.insert(key, goal);
        drop(g);
        self.notify.notify_one();
        true
    }

    fn take(&self) -> Option<(ResourceKey, Goal)> {
        let mut g = self.goals.lock().ok()?;
        let key = g.0.keys().next()?.clone();
        let goal = g.0.remove(&key)?;
        g.1.insert(key.clone());
        Some((key, goal))
    }

    fn finish(&self, key: &ResourceKey) {
        if let Ok(mut g) = self.goals.lock() {
            g.1.remove(key);
        }
    }

    /// Drops queued (not running) goals a new firing alert makes unsafe.
    fn cancel(&self, mut pred: impl FnMut(&ResourceKey, &Goal) -> bool) -> usize {
        let Ok(mut g) = self.goals.lock() else {
            return 0;
        };
        let before = g.0.len();
        g.0.retain(|k, goal| !pred(k, goal));
        before - g.0.len()
    }

    fn len(&self) -> usize {
        self.goals
            .lock()
            .map(|g| g.0.len() + g.1.len())
            .unwrap_or(0)
    }

    fn keys(&self) -> Vec<String> {
        self.goals
            .lock()
            .map(|g| {
                g.0.iter()
                    .map(|(k, goal)| format!("{k} {}", goal.label()))
                    .chain(g.1.iter().map(|k| format!("{k} running")))
                    .collect()
            })
            .unwrap_or_default()
    }
}

pub struct Engine {
    store: Arc<Store>,
    executor: Arc<Executor>,
    verifier: Option<Arc<Verifier>>,
    leader: Leadership,
    metrics: Arc<Metrics>,
    alerts: Vec<AlertRule>,
    breaker_query: Option<String>,
    settle: Duration,
    controller_grace: Duration,
    max_per_tick: usize,
    dry_run: bool,
    origin: Instant,
    state: Mutex<State>,
    pending: Pending,
    /// When to rebuild episodes from Prometheus.
    recovery: Mutex<recovery::Schedule>,
    /// Watch streams whose initial list must be in before the holds on
    /// record are trusted to be complete.
    streams: Vec<String>,
    /// Set with leader election: episodes live in the episode record.
    record: OnceLock<RecordLink>,
    /// Readiness notes as of the last tick: /readyz reads these and never
    /// waits for a tick holding the engine's state.
    problems: Mutex<Vec<String>>,
}

impl Engine {
    pub fn new(
        cfg: &Config,
        store: Arc<Store>,
        executor: Arc<Executor>,
        verifier: Option<Arc<Verifier>>,
        leader: Leadership,
    ) -> Arc<Self> {
        let metrics = store.metrics().clone();
        let streams = crate::watch::stream_ids(store.profiles(), &cfg.namespaces);
        Arc::new(Self {
            store,
            executor,
            verifier,
            leader,
            metrics,
            alerts: cfg.alerts.clone(),
            breaker_query: cfg.breaker.query.clone(),
            settle: cfg.signals.settle,
            controller_grace: cfg.controller_grace,
            max_per_tick: usize::try_from(cfg.budget.burst).unwrap_or(usize::MAX),
            dry_run: cfg.dry_run,
            origin: Instant::now(),
            state: Mutex::new(State {
                breakers: Breakers::new(&cfg.breaker, cfg.breaker.domain.clone()),
                bucket: TokenBucket::new(cfg.budget.refill_per_second, cfg.budget.burst),
                episodes: Book::default(),
                planned_at_rv: HashMap::new(),
                report: StatusReport::default(),
                resumed: false,
                record: Tracker::default(),
            }),
            pending: Pending::default(),
            recovery: Mutex::new(recovery::Schedule::default()),
            streams,
            record: OnceLock::new(),
            problems: Mutex::new(Vec::new()),
        })
    }

    /// Keeps alert episodes in the episode record (several replicas): the
    /// leader takes notifications from it and writes its episodes there.
    /// Set before `run`.
    pub fn use_record(&self, api: Arc<RecordApi>, identity: String) {
        let _ = self.record.set(RecordLink { api, identity });
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn with_schedule<T>(&self, f: impl FnOnce(&mut recovery::Schedule) -> T) -> Option<T> {
        self.recovery.lock().ok().map(|mut s| f(&mut s))
    }

    /// Records an alert notification. Firing cancels queued remediation in
    /// its scope at once; resolved only starts the settle clock. A refused
    /// notification (see [`crate::episodes`]) changes nothing and is
    /// counted and logged.
    pub fn handle(&self, ev: &AlertEvent) {
        let Some(rule) = self.alerts.iter().find(|a| a.alertname == ev.alertname) else {
            return;
        };
        let scope = Scope::from_alert(rule, &ev.labels);
        self.notify(
            rule,
            &scope,
            ev.status == AlertStatus::Firing,
            ev.received_at,
        );
    }

    fn notify(&self, rule: &AlertRule, scope: &Scope, firing: bool, at: DateTime<Utc>) {
        let result = match self.state.lock() {
            Ok(mut st) => st.episodes.notify(rule, scope, firing, at),
            Err(_) => return,
        };
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

    /// Reads the episode record: a follower shows its episodes, a leader
    /// loads them once per term and takes the notifications any replica
    /// appended since.
    async fn record_in(&self, leader: bool) {
        let Some(link) = self.record.get() else {
            return;
        };
        let read = link.api.read().await;
        if let Err(e) = &read {
            tracing::warn!(error = %e, label = e.label(), record = link.api.name(), "cannot read the episode record");
        }
        let up = {
            let Ok(mut st) = self.state.lock() else {
                return;
            };
            let up = st.record.read(leader, read);
            if let Some(book) = up.replace {
                st.episodes = book;
            }
            if up.covered {
                tracing::info!(
                    episodes = st.episodes.len(),
                    "leading: alert episodes taken from the episode record"
                );
            }
            (up.covered, up.fold)
        };
        let (covered, fold) = up;
        if covered {
            self.with_schedule(|s| s.covered(leader));
        }
        for n in fold {
            // An alert no longer configured: its notification is dropped.
            if let Some(rule) = self
                .alerts
                .iter()
                .find(|a| a.alertname == n.scope.alertname)
            {
                self.notify(rule, &n.scope, n.firing, n.at);
            }
            if let Ok(mut st) = self.state.lock() {
                st.record.folded(n.seq);
            }
        }
    }

    /// The leader writes its episodes back when they or the inbox changed.
    async fn record_out(&self) {
        let Some(link) = self.record.get() else {
            return;
        };
        if !self.leader.is_leader() {
            return;
        }
        let next = match self.state.lock() {
            Ok(mut st) => {
                let st = &mut *st;
                st.record.to_write(&st.episodes, &link.identity)
            }
            Err(_) => return,
        };
        let (record, rv) = match next {
            None => return,
            Some(Ok(w)) => w,
            Some(Err(e)) => {
                tracing::error!(error = %e, label = e.label(), "episode record not written");
                return;
            }
        };
        let result = link.api.write("leader", &record, rv.as_deref()).await;
        match &result {
            Ok(Some(_)) => tracing::debug!(
                episodes = record.episodes.len(),
                consumed = record.consumed,
                "episode record written"
            ),
            Ok(None) => {
                tracing::debug!("episode record changed since it was read; written next tick")
            }
            Err(e) => {
                tracing::warn!(error = %e, label = e.label(), "cannot write the episode record")
            }
        }
        if let Ok(mut st) = self.state.lock() {
            st.record.written(&result);
        }
    }

    fn refused(&self, alertname: &str, why: Refusal) {
        self.metrics
            .episodes_refused
            .get_or_create(&EpisodeLabels {
                alert: alertname.to_string(),
                reason: why.label(),
            })
            .inc();
    }

    /// Drops queued remediation in a scope that fires (again).
    fn cancel_remediation(&self, scope: &Scope) {
        let store = &self.store;
        let n = self.pending.cancel(|k, goal| {
            !matches!(goal, Goal::Hold(_))
                && store.get(k).is_some_and(|e| scope.matches(k, &e.view))
        });
        if n > 0 {
            tracing::info!(alert = %scope.alertname, cancelled = n, "alert fires: queued remediation cancelled");
        }
    }

    /// Rebuilds episodes from Prometheus' ALERTS when due. A failed query
    /// changes nothing (the verifier counts and logs it) and is retried
    /// after `recovery::RETRY`.
    async fn recover(&self, now: DateTime<Utc>) {
        let names: Vec<&str> = self.alerts.iter().map(|a| a.alertname.as_str()).collect();
        let Some(v) = self.verifier.as_ref().filter(|_| !names.is_empty()) else {
            self.with_schedule(recovery::Schedule::not_needed);
            return;
        };
        let answer = async {
            Ok::<_, crate::signals::SignalError>(recovery::Answer {
                firing_now: v.alert_label_sets(&names, None).await?,
                fired_within: v.alert_label_sets(&names, Some(EPISODE_TTL)).await?,
            })
        }
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

    /// Writes what an answer recovers; the decision is `recovery::plan`.
    fn apply_recovery(&self, answer: &recovery::Answer, now: DateTime<Utc>) {
        let plan = {
            let Ok(mut st) = self.state.lock() else {
                return;
            };
            let plan = recovery::plan(&self.alerts, answer, st.episodes.map(), now, MAX_EPISODES);
            for (scope, ep) in &plan.write {
                // recovery::plan leaves room for what it writes.
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

    /// Verifies resolved episodes whose settle time has passed. Errors keep
    /// the episode unverified: no remediation without proof.
    async fn verify(&self, now: DateTime<Utc>) {
        let due: Vec<(Scope, Episode)> = match self.state.lock() {
            Ok(st) => st
                .episodes
                .map()
                .iter()
                .filter(|(_, e)| !e.firing)
                .filter(|(_, e)| {
                    let since = e.verified_at.unwrap_or(e.changed_at);
                    (now - since).to_std().is_ok_and(|d| d >= self.settle)
                })
                .map(|(s, e)| (s.clone(), e.clone()))
                .collect(),
            Err(_) => return,
        };
        for (scope, ep) in due {
            if !ep.fired && !self.proven(&scope, &ep).await {
                continue;
            }
            let verify_query = self
                .alerts
                .iter()
                .find(|a| a.alertname == ep.alertname)
                .and_then(|a| a.verify_query.clone());
            let result = match &self.verifier {
                Some(v) => v
                    .cleared(&ep.alertname, &ep.matchers, verify_query.as_deref())
                    .await
                    .map_err(|e| e.to_string()),
                None => Err("no Prometheus configured: cannot verify".to_string()),
            };
            let Ok(mut st) = self.state.lock() else {
                return;
            };
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
                }
                Ok(c) => {
                    tracing::info!(alert = %ep.alertname, why = %c.why, "resolved but not cleared yet");
                    e.verified_at = None;
                    e.changed_at = now;
                    e.last_error = Some(c.why);
                }
                Err(why) => {
                    tracing::warn!(alert = %ep.alertname, error = %why, "verification failed; retrying later");
                    e.verified_at = None;
                    e.last_error = Some(why);
                }
            }
        }
    }

    /// Whether Prometheus remembers `ep`'s alert firing for its scope within
    /// the episode TTL: the evidence a resolved notification for a scope
    /// remedy never saw firing needs. No: the episode is dropped, counted
    /// and logged. An error keeps it for the next try.
    async fn proven(&self, scope: &Scope, ep: &Episode) -> bool {
        let Some(v) = &self.verifier else {
            return false;
        };
        let answer = v
            .alert_label_sets(&[ep.alertname.as_str()], Some(EPISODE_TTL))
            .await;
        let Ok(mut st) = self.state.lock() else {
            return false;
        };
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
                } else if unchanged {
                    st.episodes.remove(scope);
                    drop(st);
                    self.refused(&ep.alertname, Refusal::Unproven);
                    tracing::warn!(alert = %ep.alertname, matchers = ?ep.matchers, "resolved notification for an alert Prometheus never saw firing in this scope: ignored");
                }
                fired
            }
            Err(e) => {
                tracing::warn!(alert = %ep.alertname, error = %e, "cannot check whether the alert fired; retrying later");
                if let Some(ep) = st.episodes.get_mut(scope) {
                    ep.last_error = Some(format!("cannot check that it fired: {e}"));
                }
                false
            }
        }
    }

    /// One decision pass, between reading and writing the episode record.
    pub async fn tick(&self) {
        self.record_in(self.leader.is_leader()).await;
        self.decide().await;
        self.record_out().await;
        let notes = self.collect_problems();
        if let Ok(mut p) = self.problems.lock() {
            *p = notes;
        }
    }

    async fn decide(&self) {
        let wall = Utc::now();
        let now = self.now();
        let leader = self.leader.is_leader();
        let run = self
            .with_schedule(|s| {
                s.should_run(now, leader, |since| {
                    self.state
                        .lock()
                        .is_ok_and(|st| recovery::needs_refresh(st.episodes.map(), since))
                })
            })
            .unwrap_or(false);
        // With the episode record, a follower shows the leader's episodes
        // (replaced every tick): its own recovery and verification would be
        // queries thrown away.
        let decides = leader || self.record.get().is_none();
        if run && decides {
            self.recover(wall).await;
        }
        if decides {
            self.verify(wall).await;
        }
        let external = match (&self.verifier, &self.breaker_query) {
            (Some(v), Some(q)) => v.query_scalar(q).await.ok().flatten(),
            _ => None,
        };

        let Ok(mut st) = self.state.lock() else {
            return;
        };
        let st = &mut *st;
        st.episodes.prune(wall);
        self.fix_targets(st);

        let profiles = self.store.profiles();
        let backoff = self.store.backoff();
        // Firing scopes that select more than their alert's cap hold
        // nothing (counted once, when the episode first goes over).
        let over = self.firing_over_cap(st);
        let firing: Vec<&Scope> = st
            .episodes
            .map()
            .iter()
            .filter(|(s, e)| e.firing && !over.contains(*s))
            .map(|(s, _)| s)
            .collect();
        let verified: Vec<&Scope> = st
            .episodes
            .map()
            .iter()
            .filter(|(_, e)| e.remediates())
            .map(|(s, _)| s)
            .collect();
        let known: HashSet<&str> = st
            .episodes
            .map()
            .keys()
            .map(|s| s.alertname.as_str())
            .collect();
        let episodes = &st.episodes;

        let mut samples: BTreeMap<Arc<str>, Sample> = BTreeMap::new();
        let mut domain_of: HashMap<ResourceKey, Arc<str>> = HashMap::new();
        let mut holds: Vec<(ResourceKey, String, u32)> = Vec::new();
        let mut candidates: Vec<Candidate<ResourceKey>> = Vec::new();
        let mut goals: HashMap<ResourceKey, Goal> = HashMap::new();
        let mut recovered: Vec<Scope> = Vec::new();
        let mut held_keys = Vec::new();
        let mut breaker_holds: BTreeMap<Arc<str>, usize> = BTreeMap::new();
        let mut settling: HashMap<String, i64> = HashMap::new();
        let mut settling_keys: Vec<String> = Vec::new();
        let planned = &st.planned_at_rv;
        let breakers = &mut st.breakers;
        self.store.for_each(|key, e| {
            let domain = breakers.slot(key, &e.view);
            // As of the last tick: this tick's samples are not in yet.
            let open_before = breakers.is_open(&domain);
            let sample = samples.entry(domain.clone()).or_default();
            sample.total += 1;
            let held = matches!(e.view.pause, PauseState::Ours { .. });
            // Signals that predate remedy's own last write (a released or
            // remediated object whose controller has not reconciled yet)
            // are not a new failure: they neither feed the breaker nor hold.
            let fresh = e.signals_count(self.controller_grace);
            let not_found = fresh
                && matches!(
                    e.verdict,
                    Verdict::Terminal {
                        not_found: true,
                        ..
                    }
                );
            let transient = fresh && matches!(e.verdict, Verdict::Transient { .. });
            // Only failures that still reconcile (and so still call the
            // cloud) feed the breaker: a paused resource, ours or a human's,
            // makes no calls, and counting it would keep the breaker open.
            if e.view.pause == PauseState::NotPaused {
                if transient {
                    sample.failing += 1;
                }
                if not_found {
                    sample.not_found += 1;
                }
            }
            if held {
                held_keys.push(key.to_string());
                if matches!(&e.view.pause, PauseState::Ours { reason: Some(r), .. } if r.as_ref() == BREAKER_REASON)
                {
                    *breaker_holds.entry(domain.clone()).or_insert(0) += 1;
                }
            }
            if e.view.deleting || e.view.pause == PauseState::Foreign {
                return;
            }
            if planned
                .get(key)
                .is_some_and(|rv| *rv == e.view.resource_version)
            {
                return;
            }
            let Some(profile): Option<&Profile> = profiles.get(e.profile) else {
                return;
            };
            // Counters older than the quiet window no longer count.
            let crashes = if backoff.is_stale(e.view.failure_time, wall) {
                0
            } else {
                e.view.crash_count.unwrap_or(0)
            };
            let in_firing = firing.iter().any(|s| s.matches(key, &e.view));
            // Only what a verified episode fixed as its targets: a failure
            // after the verification is a new one (normal path).
            let in_verified =
                episodes.targets(key) && verified.iter().any(|s| s.matches(key, &e.view));
            let failing = transient || not_found;
            if !held {
                if failing && profile.hold.is_some() && (open_before || in_firing) {
                    let reason = firing
                        .iter()
                        .find(|s| s.matches(key, &e.view))
                        .map(|s| format!("{ALERT_PREFIX}{}", s.alertname))
                        .unwrap_or_else(|| BREAKER_REASON.to_string());
                    holds.push((key.clone(), reason, crashes.saturating_add(1)));
                } else if in_verified && transient && !in_firing && has_work(profile, e) {
                    goals.insert(key.clone(), Goal::Remediate);
                }
            } else if !in_firing {
                let reason = match &e.view.pause {
                    PauseState::Ours { reason, .. } => reason.as_deref(),
                    _ => None,
                };
                if in_verified {
                    goals.insert(key.clone(), Goal::Remediate);
                } else if let Some(alert) = reason.and_then(|r| r.strip_prefix(ALERT_PREFIX)) {
                    // Held for an alert that is not verified cleared yet. If
                    // this process never saw its episode (restart, leader
                    // change), verify it before releasing.
                    if !known.contains(alert) {
                        recovered.push(Scope::recovered(alert, &key.kind));
                    }
                    *settling.entry(key.kind.to_string()).or_insert(0) += 1;
                    settling_keys.push(key.to_string());
                } else {
                    goals.insert(key.clone(), Goal::Release);
                }
            }
            if goals.contains_key(key) {
                domain_of.insert(key.clone(), domain);
                candidates.push(Candidate {
                    key: key.clone(),
                    crash_count: crashes,
                    backoff_remaining: backoff.remaining(crashes, e.view.failure_time, wall),
                });
            }
        });

        // A new leader (restart, takeover) has no samples of the outage its
        // predecessor held resources for: those holds say the breaker was
        // open, so it serves the full cooldown before releasing any.
        let leader_now = self.leader.is_leader();
        let synced = self.streams.iter().all(|s| self.store.is_synced(s));
        if !leader_now {
            st.resumed = false;
        } else if synced && !st.resumed {
            st.resumed = true;
            for (domain, held) in &breaker_holds {
                if !st.breakers.is_open(domain) {
                    st.breakers.resume(now, domain);
                    tracing::info!(
                        held,
                        %domain,
                        "leading with breaker holds: breaker resumed open, cooldown runs from now"
                    );
                }
            }
        }
        for (domain, before, after) in st.breakers.observe(now, samples, external) {
            tracing::warn!(%domain, open = after.is_open(), ?before, state = ?after, "outage breaker changed");
        }
        let scope = st.breakers.by().label();
        for (domain, state) in st.breakers.states() {
            self.metrics
                .breaker_open
                .get_or_create(&ScopeLabels {
                    scope,
                    domain: domain.to_string(),
                })
                .set(i64::from(state.is_open()));
        }
        let breaker_open = st.breakers.any_open();
        for s in recovered {
            st.episodes.adopt_hold(s, wall);
        }

        let leader = self.leader.is_leader();
        let mut waiting_counts: HashMap<(String, &'static str), i64> = HashMap::new();
        let mut waiting = BTreeMap::new();
        if leader {
            for (key, reason, crash_count) in holds {
                let record = HoldRecord {
                    since: wall,
                    reason,
                    crash_count,
                    value: None,
                };
                if let Some(e) = self.store.get(&key) {
                    st.planned_at_rv
                        .insert(key.clone(), e.view.resource_version.clone());
                }
                self.pending.offer(key, Goal::Hold(record));
            }
            // Until every watch has listed, the holds on record are not all
            // known: release nothing yet.
            // Each candidate waits on its own domain's breaker; domains take
            // turns at the budget.
            let resumed = st.resumed;
            let breakers = &st.breakers;
            let shares: HashMap<&str, usize> = breakers
                .states()
                .enumerate()
                .map(|(i, (d, _))| (d.as_ref(), i))
                .collect();
            let plan = plan_shared(
                &candidates,
                |k| {
                    let d = domain_of.get(k).map_or("", |d| d.as_ref());
                    (
                        shares.get(d).copied().unwrap_or(0),
                        !resumed || breakers.is_open(d),
                    )
                },
                &mut st.bucket,
                now,
                self.max_per_tick,
            );
            for key in plan.release {
                if let Some(goal) = goals.remove(&key) {
                    if let Some(e) = self.store.get(&key) {
                        st.planned_at_rv
                            .insert(key.clone(), e.view.resource_version.clone());
                    }
                    if self.pending.offer(key.clone(), goal) {
                        self.metrics
                            .releases
                            .get_or_create(&crate::metrics::KindLabels {
                                kind: key.kind.to_string(),
                            })
                            .inc();
                    }
                }
            }
            for (key, why) in plan.waiting {
                *waiting_counts
                    .entry((key.kind.to_string(), why.label()))
                    .or_insert(0) += 1;
                waiting.insert(key.to_string(), why.label().to_string());
            }
        }
        for k in settling_keys {
            waiting.insert(k, "settle".to_string());
        }
        for (kind, n) in settling {
            *waiting_counts.entry((kind, "settle")).or_insert(0) += n;
        }
        // Drop plan markers the watch has caught up with.
        let store = &self.store;
        st.planned_at_rv
            .retain(|k, rv| store.get(k).is_some_and(|e| e.view.resource_version == *rv));

        for p in profiles {
            for reason in ["breaker", "backoff", "budget", "settle"] {
                let n = waiting_counts
                    .get(&(p.kind.clone(), reason))
                    .copied()
                    .unwrap_or(0);
                self.metrics
                    .waiting
                    .get_or_create(&KindReasonLabels {
                        kind: p.kind.clone(),
                        reason,
                    })
                    .set(n);
            }
        }
        let tokens = st.bucket.tokens(now);
        self.metrics.budget_tokens.set(tokens);
        self.metrics
            .pending_actions
            .set(i64::try_from(self.pending.len()).unwrap_or(i64::MAX));
        held_keys.sort();
        st.report = StatusReport {
            leader,
            dry_run: self.dry_run,
            breaker_open,
            open_domains: st.breakers.open(),
            budget_tokens: tokens,
            held: held_keys,
            pending: self.pending.keys(),
            waiting,
            episodes: st.episodes.map().values().cloned().collect(),
            totals: BTreeMap::new(),
            truncated: false,
        };
    }

    /// Fixes the remediation targets of newly verified episodes: the
    /// resources in scope held for the alert or failing with something to
    /// clear. Over the alert's `max_resources`: nothing, counted.
    fn fix_targets(&self, st: &mut State) {
        let profiles = self.store.profiles();
        let store = &self.store;
        // The episode record keeps targets; their total is bounded too.
        let room =
            crate::record::MAX_TARGETS.saturating_sub(crate::record::targets_held(&st.episodes));
        let max = |alert: &str| {
            self.alerts
                .iter()
                .find(|a| a.alertname == alert)
                .map_or(0, |a| a.max_resources.min(room))
        };
        let over = st.episodes.fix_targets(max, |scope| {
            let mut set = std::collections::BTreeSet::new();
            store.for_each(|key, e| {
                if !scope.matches(key, &e.view) || e.view.deleting {
                    return;
                }
                let held_for_it = matches!(&e.view.pause, PauseState::Ours { reason: Some(r), .. }
                    if r.strip_prefix(ALERT_PREFIX) == Some(scope.alertname.as_str()));
                let failing = matches!(e.verdict, Verdict::Transient { .. })
                    && profiles.get(e.profile).is_some_and(|p| has_work(p, e));
                if held_for_it || (failing && e.view.pause == PauseState::NotPaused) {
                    set.insert(key.clone());
                }
            });
            set
        });
        for scope in over {
            self.refused(&scope.alertname, Refusal::OverCap);
            tracing::warn!(alert = %scope.alertname, matchers = ?scope.matchers, "verified episode selects more resources than max_resources: remediating nothing");
        }
    }

    /// Firing scopes whose failing resources exceed the alert's cap; each
    /// is marked (and counted) once.
    fn firing_over_cap(&self, st: &mut State) -> HashSet<Scope> {
        let mut counts: HashMap<Scope, usize> = HashMap::new();
        let firing: Vec<Scope> = st
            .episodes
            .map()
            .iter()
            .filter(|(_, e)| e.firing)
            .map(|(s, _)| s.clone())
            .collect();
        if firing.is_empty() {
            return HashSet::new();
        }
        self.store.for_each(|key, e| {
            let candidate =
                e.verdict.is_failing() || matches!(e.view.pause, PauseState::Ours { .. });
            if !candidate {
                return;
            }
            for s in firing.iter().filter(|s| s.matches(key, &e.view)) {
                *counts.entry(s.clone()).or_insert(0) += 1;
            }
        });
        let mut over = HashSet::new();
        for s in firing {
            let cap = self
                .alerts
                .iter()
                .find(|a| a.alertname == s.alertname)
                .map_or(0, |a| a.max_resources);
            let n = counts.get(&s).copied().unwrap_or(0);
            if n <= cap {
                continue;
            }
            let newly = st
                .episodes
                .get_mut(&s)
                .is_some_and(|e| e.over_cap.replace(n).is_none());
            if newly {
                self.refused(&s.alertname, Refusal::OverCap);
                tracing::warn!(alert = %s.alertname, matchers = ?s.matchers, selected = n, cap, "firing alert selects more resources than max_resources: holding nothing");
            }
            over.insert(s);
        }
        over
    }

    #[cfg(test)]
    fn report_episodes(&self) -> Vec<Episode> {
        self.state
            .lock()
            .map(|s| s.episodes.map().values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn report(&self) -> StatusReport {
        self.state
            .lock()
            .map(|s| s.report.clone())
            .unwrap_or_default()
    }

    /// The report as /status serves it: at most `limit` entries a list.
    pub fn report_limited(&self, limit: usize) -> StatusReport {
        self.state
            .lock()
            .map(|s| s.report.limited(limit))
            .unwrap_or_default()
    }

    /// Readiness detail as of the last tick: verification problems are
    /// reported, not hidden.
    pub fn problems(&self) -> Vec<String> {
        self.problems.lock().map(|p| p.clone()).unwrap_or_default()
    }

    fn collect_problems(&self) -> Vec<String> {
        let name = self.record.get().map(|l| l.api.name().to_string());
        self.state
            .lock()
            .map(|s| {
                let record = s
                    .record
                    .error()
                    .map(|e| format!("episode record {}: {e}", name.as_deref().unwrap_or("")));
                s.episodes
                    .map()
                    .values()
                    .filter_map(|e| {
                        e.last_error
                            .as_ref()
                            .map(|err| format!("alert {} not verified: {err}", e.alertname))
                    })
                    .chain(record)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Runs the tick loop and the workers until the process ends.
    pub async fn run(
        self: Arc<Self>,
        tick: Duration,
        mut events: tokio::sync::mpsc::Receiver<AlertEvent>,
    ) {
        for _ in 0..WORKERS {
            let me = self.clone();
            tokio::spawn(async move { me.work().await });
        }
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut open = true;
        loop {
            tokio::select! {
                _ = interval.tick() => self.tick().await,
                ev = events.recv(), if open => match ev {
                    Some(ev) => self.handle(&ev),
                    // Webhook gone (not configured): keep deciding on ticks.
                    None => open = false,
                },
            }
        }
    }

    async fn work(&self) {
        loop {
            let Some((key, goal)) = self.pending.take() else {
                self.pending.notify.notified().await;
                continue;
            };
            let profile = self
                .store
                .get(&key)
                .and_then(|e| self.store.profiles().get(e.profile).cloned());
            if let Some(profile) = profile {
                let span = tracing::info_span!("goal", resource = %key, goal = goal.label(), trace_id = tracing::field::Empty);
                crate::telemetry::record_trace_id(&span);
                match self
                    .executor
                    .run(&profile, &key, &goal)
                    .instrument(span)
                    .await
                {
                    Ok(out) => {
                        tracing::debug!(steps = ?out.steps, done = out.done.label(), gone = out.gone, "goal finished");
                        if goal == Goal::Remediate
                            && let Ok(mut st) = self.state.lock()
                        {
                            st.episodes.done(&key);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, label = e.label(), "goal failed; planned again next tick")
                    }
                }
            }
            self.pending.finish(&key);
        }
    }
}

/// Whether remediation has anything to write for a resource that is not
/// held: failure fields to clear or a native counter to reset. A failing
/// condition alone (a controller still quoting the old error) is not worth a
/// budget token.
fn has_work(profile: &Profile, e: &Entry) -> bool {
    let view = &e.view;
    e.failure.is_some()
        || (profile.has_native_counter()
            && (view.crash_count.is_some_and(|n| n > 0) || view.failure_time.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{Classifier, default_rules};
    use crate::config::Selector;
    use crate::profile::{CAPI_PAUSED, builtin};
    use crate::remediate::execute::WriteLimiter;
    use kube::api::DynamicObject;
    use serde_json::json;

    /// An engine whose executor is never driven (no workers run), so the
    /// tests see exactly what the tick decides. The client points nowhere.
    fn engine(cfg: &Config, leader: bool) -> (Arc<Engine>, Arc<Store>) {
        let (e, store) = engine_unsynced(cfg, leader);
        for s in crate::watch::stream_ids(store.profiles(), &cfg.namespaces) {
            store.mark_synced(&s);
        }
        (e, store)
    }

    /// Before the watches have listed: as right after a start.
    fn engine_unsynced(cfg: &Config, leader: bool) -> (Arc<Engine>, Arc<Store>) {
        let metrics = Arc::new(Metrics::new(100));
        let store = Arc::new(Store::new(
            vec![builtin("openstack-machine").unwrap()],
            Classifier::new(&default_rules()).unwrap(),
            cfg.backoff.clone(),
            metrics.clone(),
        ));
        let kc = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(kc).unwrap();
        let lead = Leadership::fixed(leader);
        let ex = Arc::new(Executor::new(
            client,
            metrics,
            Arc::new(WriteLimiter::new(10.0, 10)),
            lead.clone(),
            false,
        ));
        (Engine::new(cfg, store.clone(), ex, None, lead), store)
    }

    fn osm(name: &str, failing: bool, annotations: serde_json::Value) -> DynamicObject {
        let status = if failing {
            json!({"instanceState": "BUILD", "failureReason": "CreateError", "failureMessage": "got 503 instead"})
        } else {
            json!({"instanceState": "ACTIVE"})
        };
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1", "annotations": annotations},
            "status": status
        }))
        .unwrap()
    }

    fn pending(e: &Engine) -> Vec<(String, &'static str)> {
        let g = e.pending.goals.lock().unwrap();
        g.0.iter()
            .map(|(k, goal)| (k.name.to_string(), goal.label()))
            .collect()
    }

    fn alert(status: AlertStatus) -> AlertEvent {
        AlertEvent {
            fingerprint: "f1".into(),
            alertname: "CloudAPIDegraded".into(),
            status,
            labels: [("kind".to_string(), "OpenStackMachine".to_string())].into(),
            starts_at: Utc::now(),
            ends_at: None,
            group_key: "g".into(),
            received_at: Utc::now(),
        }
    }

    fn cfg() -> Config {
        let mut c = Config::default();
        c.breaker.min_resources = 2;
        c.alerts = vec![AlertRule {
            alertname: "CloudAPIDegraded".into(),
            select: Selector {
                kind_label: Some("kind".into()),
                ..Selector::default()
            },
            verify_query: None,
            allow_cluster_wide: false,
            max_resources: 200,
        }];
        c
    }

    #[tokio::test]
    async fn breaker_holds_failing_but_never_foreign_paused_or_healthy() {
        let (e, store) = engine(&cfg(), true);
        store.apply(0, &osm("a", true, json!({})));
        store.apply(0, &osm("b", true, json!({})));
        store.apply(0, &osm("c", false, json!({})));
        store.apply(0, &osm("d", true, json!({CAPI_PAUSED: ""})));
        e.tick().await; // opens the breaker
        e.tick().await; // holds with the breaker open
        assert!(e.report().breaker_open);
        assert_eq!(
            pending(&e),
            vec![("a".into(), "hold"), ("b".into(), "hold")]
        );
        // Planned once: the next tick does not queue the same goal again.
        e.tick().await;
        assert_eq!(pending(&e).len(), 2);
    }

    #[tokio::test]
    async fn stale_signals_after_remedys_write_neither_open_the_breaker_nor_hold() {
        let (e, store) = engine(&cfg(), true);
        // Just released by remedy: failure cleared, the provider's old
        // condition still there until it reconciles.
        let released = |name: &str, rv: &str| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
                "status": {"instanceState": "BUILD", "conditions": [
                    {"type": "InstanceReady", "status": "False", "reason": "InstanceNotFound"}]}
            }))
            .unwrap()
        };
        for name in ["a", "b", "c"] {
            store
                .own_writes()
                .record(&ResourceKey::new("OpenStackMachine", "ns", name), "10");
            store.apply(0, &released(name, "10"));
        }
        for _ in 0..3 {
            e.tick().await;
        }
        assert!(
            !e.report().breaker_open,
            "a not-found burst of our own making"
        );
        assert!(pending(&e).is_empty());
        // The controller reconciles and still cannot find them: now it counts.
        for name in ["a", "b", "c"] {
            store.apply(0, &released(name, "11"));
        }
        e.tick().await;
        e.tick().await;
        assert!(e.report().breaker_open);
        assert_eq!(pending(&e).len(), 3);
    }

    fn held_osm(name: &str, failing: bool, reason: &str) -> DynamicObject {
        let record = serde_json::to_string(&HoldRecord {
            since: Utc::now(),
            reason: reason.into(),
            crash_count: 1,
            value: None,
        })
        .unwrap();
        osm(
            name,
            failing,
            json!({CAPI_PAUSED: crate::profile::PAUSE_MARKER, crate::profile::HOLD_ANNOTATION: record}),
        )
    }

    #[tokio::test]
    async fn a_new_leader_serves_the_full_cooldown_before_releasing_breaker_holds() {
        let mut c = cfg();
        c.breaker.min_resources = 1000;
        c.breaker.cooldown = Duration::from_secs(3600);
        let (e, store) = engine_unsynced(&c, true);
        // What the last leader left: 5 breaker holds; 17% still failing,
        // between close_ratio (0.1) and open_ratio (0.3).
        e.tick().await;
        assert!(!e.report().breaker_open, "nothing listed yet");
        for i in 0..5 {
            store.apply(0, &held_osm(&format!("h{i}"), true, BREAKER_REASON));
        }
        for i in 0..25 {
            store.apply(0, &osm(&format!("f{i}"), i < 5, json!({})));
        }
        e.tick().await;
        assert!(
            pending(&e).is_empty(),
            "no release before the watches have listed: {:?}",
            pending(&e)
        );
        for s in crate::watch::stream_ids(store.profiles(), &[]) {
            store.mark_synced(&s);
        }
        for _ in 0..3 {
            e.tick().await;
        }
        assert!(e.report().breaker_open, "resumed from the holds");
        // Open means what it means for any breaker: failing resources are
        // held too; but no held one is released before the cooldown.
        assert!(
            pending(&e).iter().all(|(_, g)| *g == "hold"),
            "nothing released before the cooldown: {:?}",
            pending(&e)
        );
        assert!(pending(&e).iter().all(|(n, _)| n.starts_with('f')));
    }

    #[tokio::test]
    async fn a_verified_episode_remediates_its_targets_once_and_not_later_failures() {
        let mut c = cfg();
        c.breaker.min_resources = 1000;
        let (e, store) = engine(&c, true);
        store.apply(0, &osm("a", true, json!({})));
        e.handle(&alert(AlertStatus::Firing));
        e.handle(&alert(AlertStatus::Resolved));
        {
            let mut st = e.state.lock().unwrap();
            let scope = st.episodes.map().keys().next().unwrap().clone();
            st.episodes.get_mut(&scope).unwrap().verified_at = Some(Utc::now());
        }
        e.tick().await;
        assert_eq!(pending(&e), vec![("a".into(), "remediate")]);
        // The remediation is done (the worker reports it), then "a" fails
        // again and "b" fails for the first time, within the episode TTL.
        let (key, _) = e.pending.take().unwrap();
        e.pending.finish(&key);
        e.state.lock().unwrap().episodes.done(&key);
        let mut again = osm("a", true, json!({}));
        again.metadata.resource_version = Some("7".into());
        store.apply(0, &again);
        store.apply(0, &osm("b", true, json!({})));
        for _ in 0..3 {
            e.tick().await;
        }
        assert!(
            pending(&e).is_empty(),
            "new failures take the normal path: {:?}",
            pending(&e)
        );
    }

    #[tokio::test]
    async fn refused_notifications_change_nothing_and_are_counted() {
        let mut c = cfg();
        c.breaker.min_resources = 1000;
        c.alerts[0].max_resources = 2;
        let (e, store) = engine(&c, true);
        for n in ["a", "b", "c"] {
            store.apply(0, &osm(n, true, json!({})));
        }
        let refused = |reason| {
            e.metrics
                .episodes_refused
                .get_or_create(&EpisodeLabels {
                    alert: "CloudAPIDegraded".into(),
                    reason,
                })
                .get()
        };
        // No selector label: it would select the whole fleet.
        let mut wide = alert(AlertStatus::Firing);
        wide.labels.clear();
        e.handle(&wide);
        e.tick().await;
        assert!(pending(&e).is_empty());
        assert_eq!(refused("cluster_wide"), 1);
        assert!(e.report().episodes.is_empty());
        // In scope, but 3 failing resources over a cap of 2: nothing held.
        e.handle(&alert(AlertStatus::Firing));
        e.tick().await;
        e.tick().await;
        assert!(pending(&e).is_empty(), "{:?}", pending(&e));
        assert_eq!(refused("over_cap"), 1, "counted once");
    }

    #[tokio::test]
    async fn a_follower_decides_nothing() {
        let (e, store) = engine(&cfg(), false);
        store.apply(0, &osm("a", true, json!({})));
        store.apply(0, &osm("b", true, json!({})));
        e.tick().await;
        e.tick().await;
        assert!(e.report().breaker_open, "followers still track the breaker");
        assert!(pending(&e).is_empty());
        assert!(!e.report().leader);
    }

    #[tokio::test]
    async fn firing_alert_holds_its_scope_and_resolved_without_proof_does_nothing() {
        let mut c = cfg();
        c.breaker.min_resources = 1000; // only the alert acts
        c.signals.settle = Duration::ZERO;
        let (e, store) = engine(&c, true);
        store.apply(0, &osm("a", true, json!({})));
        e.handle(&alert(AlertStatus::Firing));
        e.tick().await;
        assert_eq!(pending(&e), vec![("a".into(), "hold")]);
        // Simulate the hold landing.
        e.pending.take();
        e.pending
            .finish(&ResourceKey::new("OpenStackMachine", "ns", "a"));
        let record = serde_json::to_string(&HoldRecord {
            since: Utc::now(),
            reason: "alert:CloudAPIDegraded".into(),
            crash_count: 1,
            value: None,
        })
        .unwrap();
        let mut held = osm(
            "a",
            true,
            json!({CAPI_PAUSED: crate::profile::PAUSE_MARKER, crate::profile::HOLD_ANNOTATION: record}),
        );
        held.metadata.resource_version = Some("2".into());
        store.apply(0, &held);
        e.handle(&alert(AlertStatus::Resolved));
        for _ in 0..3 {
            e.tick().await;
        }
        // No verifier configured: no proof, so no remediation, and it says why.
        assert!(pending(&e).is_empty());
        let report = e.report();
        assert_eq!(report.held, vec!["ns/OpenStackMachine/a"]);
        assert!(
            e.problems().iter().any(|p| p.contains("cannot verify")),
            "{:?}",
            e.problems()
        );
        assert_eq!(
            report
                .waiting
                .get("ns/OpenStackMachine/a")
                .map(String::as_str),
            Some("settle")
        );
    }

    fn labels(kind: &str) -> BTreeMap<String, String> {
        [("alertname", "CloudAPIDegraded"), ("kind", kind)]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[tokio::test]
    async fn recovered_firing_holds_and_recovered_resolved_needs_proof() {
        let mut c = cfg();
        c.breaker.min_resources = 1000; // only the alert acts
        c.signals.settle = Duration::ZERO;
        let (e, store) = engine(&c, true);
        store.apply(0, &osm("a", true, json!({})));
        // Fired within the TTL, not now: resolved, never verified by this.
        e.apply_recovery(
            &recovery::Answer {
                firing_now: vec![],
                fired_within: vec![labels("OpenStackMachine")],
            },
            Utc::now(),
        );
        for _ in 0..3 {
            e.tick().await;
        }
        assert!(pending(&e).is_empty(), "no remediation without proof");
        let eps = e.report().episodes;
        assert_eq!(eps.len(), 1);
        assert!(!eps[0].firing && eps[0].verified_at.is_none() && eps[0].from_prometheus);

        // Firing now: the failing machine in scope is held at once.
        let (e, store) = engine(&c, true);
        store.apply(0, &osm("a", true, json!({})));
        let answer = recovery::Answer {
            firing_now: vec![labels("OpenStackMachine")],
            fired_within: vec![labels("OpenStackMachine")],
        };
        e.apply_recovery(&answer, Utc::now());
        e.tick().await;
        assert_eq!(pending(&e), vec![("a".into(), "hold")]);
        // A webhook takes the episode over; recovering again leaves it.
        e.handle(&alert(AlertStatus::Resolved));
        e.apply_recovery(&answer, Utc::now());
        let eps = e.report_episodes();
        assert_eq!(eps.len(), 1);
        assert!(!eps[0].firing && !eps[0].from_prometheus, "{eps:?}");
    }

    #[tokio::test]
    async fn a_failed_recovery_is_retried_after_a_pause_not_every_tick() {
        let mut c = cfg();
        // Nothing listens on port 9: every query fails at once.
        c.signals.prometheus_url = Some("http://127.0.0.1:9".into());
        c.signals.timeout = Duration::from_millis(500);
        let metrics = Arc::new(Metrics::new(10));
        let verifier = Arc::new(Verifier::new(&c.signals, metrics.clone()).unwrap());
        let (plain, store) = engine(&c, true);
        let e = Engine::new(
            &c,
            store,
            plain.executor.clone(),
            Some(verifier),
            Leadership::fixed(true),
        );
        let errors = || {
            metrics
                .signal_queries
                .get_or_create(&crate::metrics::SignalLabels {
                    target: "prometheus",
                    result: "error",
                })
                .get()
        };
        e.tick().await;
        assert_eq!(errors(), 1, "the first tick tries to recover");
        for _ in 0..5 {
            e.tick().await;
        }
        assert_eq!(errors(), 1, "no retry within recovery::RETRY");
        assert!(
            e.report().episodes.is_empty(),
            "a failed query creates nothing"
        );
    }

    #[tokio::test]
    async fn over_the_episode_bound_new_firing_episodes_are_refused_not_old_ones_evicted() {
        let (e, _) = engine(&cfg(), true);
        let base = Utc::now();
        // Map order (by kind label) is the reverse of age order.
        for i in 0..MAX_EPISODES + 3 {
            let mut ev = alert(AlertStatus::Firing);
            ev.labels = [("kind".to_string(), format!("K{:05}", MAX_EPISODES + 3 - i))].into();
            ev.received_at = base + chrono::Duration::seconds(i as i64);
            e.handle(&ev);
        }
        e.tick().await;
        let eps = e.report_episodes();
        assert_eq!(eps.len(), MAX_EPISODES);
        let oldest = eps.iter().map(|ep| ep.changed_at).min();
        assert_eq!(oldest, Some(base), "firing episodes are kept");
        let full = e
            .metrics
            .episodes_refused
            .get_or_create(&EpisodeLabels {
                alert: "CloudAPIDegraded".into(),
                reason: "full",
            })
            .get();
        assert_eq!(full, 3);
    }

    #[test]
    fn status_lists_are_cut_to_the_limit_with_their_totals() {
        let r = StatusReport {
            held: (0..5).map(|i| format!("h{i}")).collect(),
            waiting: (0..3)
                .map(|i| (format!("w{i}"), "budget".to_string()))
                .collect(),
            ..StatusReport::default()
        };
        let l = r.limited(2);
        assert_eq!(l.held, vec!["h0", "h1"]);
        assert_eq!(l.waiting.len(), 2);
        assert_eq!(l.totals["held"], 5);
        assert_eq!(l.totals["waiting"], 3);
        assert!(l.truncated);
        assert!(!r.limited(5).truncated);
    }

    #[test]
    fn pending_never_holds_two_goals_for_one_resource() {
        let p = Pending::default();
        let k = ResourceKey::new("K", "ns", "a");
        assert!(p.offer(k.clone(), Goal::Release));
        assert!(!p.offer(k.clone(), Goal::Remediate), "queued");
        let (taken, _) = p.take().unwrap();
        assert!(!p.offer(k.clone(), Goal::Remediate), "running");
        p.finish(&taken);
        assert!(p.offer(k.clone(), Goal::Remediate));
        assert_eq!(p.cancel(|_, g| *g == Goal::Remediate), 1);
        assert_eq!(p.len(), 0);
    }
}
