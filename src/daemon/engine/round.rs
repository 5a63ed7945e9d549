//! One decision pass: the store and the alert episodes turned into facts
//! for the decision core (`decide`), its goals queued for the workers.

use super::{Engine, State, StatusReport};
use crate::daemon::store::Entry;
use crate::decide::episodes::Refusal;
use crate::decide::facts;
use crate::decide::release::WaitReason;
use crate::decide::resets::Undone;
use crate::decide::{ALERT_PREFIX, Action, Context, Fact, Failing};
use crate::decide::{BreakerState, Decisions, HoldOrder};
use crate::metrics::values::OverwriteResult;
use crate::metrics::{KindReasonLabels, ScopeLabels};
use crate::model::classify::Verdict;
use crate::model::profile::{HELD_WITH_LABEL, HoldMark, Profile};
use crate::model::scope::Scope;
use crate::model::view::{PauseState, ResourceKey};
use crate::remediate::step::Goal;
use crate::remediate::step::RetryMark;
use crate::sync::LockExt;
use chrono::Timelike;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// Waiting reason of a resource whose goal failed and waits its backoff.
const RETRY: &str = "retry";

/// Which pass a round is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Pass {
    /// The regular tick: its facts feed the breakers (with the fleet-wide
    /// ratio of `breaker.query`, if any).
    Tick { external: Option<f64> },
    /// Early, for a change while a breaker is open: decides, samples
    /// nothing ([`Context::sample`]).
    Early,
}

impl Engine {
    /// The synchronous part of a tick: the store and the episodes through
    /// the decision core, goals queued for the workers. Clocks are passed
    /// in so a recorded run can be replayed.
    pub(super) fn round(&self, now: Duration, wall: DateTime<Utc>, pass: Pass, leader: bool) {
        let mut st = self.state.locked();
        let st = &mut *st;
        st.episodes.prune(wall);
        self.fix_targets(st);
        let paused = self.paused();
        let seen = self.facts(st, now, wall, pass, leader, paused);
        let Decisions {
            holds,
            actions,
            waiting: lined,
            settling,
            changed,
            resumed,
            letting_go,
        } = seen.decisions;
        for key in letting_go {
            // Only an owner remedy holds is let go (the next round keeps no
            // other): logged once, not at every round.
            let held = self
                .deps
                .store
                .get(&key)
                .is_some_and(|e| matches!(e.view.pause, PauseState::Ours { .. }));
            if held && st.letting_go.insert(key.clone()) {
                tracing::info!(resource = %key, "letting go: the resources held with it are released first");
            }
        }
        self.export_breakers(st, &changed, &resumed);
        self.cancel_opened(st, &changed);
        let mut waiting = Waiting::default();
        self.settle_held(st, &settling, &seen.known, wall, &mut waiting);
        if leader && paused {
            // The pause switch: queued goals go back to waiting, and nothing
            // new is queued; what is held stays held.
            let dropped = self.pending.cancel(|_, _| true);
            forget_dropped(
                &mut st.planned_at_rv,
                &dropped,
                "pause switch set: queued goals dropped",
            );
        }
        self.reapply_undone(st, leader && !paused);
        if leader && !paused {
            self.enqueue(st, holds, actions, wall);
        }
        self.line_up(st, lined, &seen.held_now, leader, now, &mut waiting);
        self.pace_notes(st, &seen.held_now, &waiting, leader && !paused, now);
        // Drop plan markers the watch has caught up with.
        let store = &self.deps.store;
        st.planned_at_rv
            .retain(|k, rv| store.get(k).is_some_and(|e| e.view.resource_version == *rv));
        st.retries.retain(|k| store.get(k).is_some());
        self.export_waiting(&waiting);
        self.write_report(st, now, leader, seen.held_keys, waiting.by_key);
    }

    /// The store's objects as facts for the decision core, and what the
    /// core decided from them.
    fn facts(
        &self,
        st: &mut State,
        now: Duration,
        wall: DateTime<Utc>,
        pass: Pass,
        leader: bool,
        paused: bool,
    ) -> Seen {
        let profiles = &self.deps.profiles;
        let backoff = &self.settings.backoff;
        // Firing scopes that select more than their alert's cap hold
        // nothing (counted once, when the episode first goes over). Nor do
        // firing episodes not proven to have fired (taken from the episode
        // record, which anyone allowed to write the ConfigMap could have
        // filled): a hold they made would itself pass for proof later.
        let over = self.firing_over_cap(st);
        let firing: Vec<&Scope> = st
            .episodes
            .map()
            .iter()
            .filter(|(s, e)| e.firing && e.fired && !over.contains(*s))
            .map(|(s, _)| s)
            .collect();
        let verified: Vec<&Scope> = st
            .episodes
            .map()
            .iter()
            .filter(|(_, e)| e.remediates())
            .map(|(s, _)| s)
            .collect();
        let known: HashSet<String> = st
            .episodes
            .map()
            .keys()
            .map(|s| s.alertname.clone())
            .collect();
        let episodes = &st.episodes;
        let planned = &st.planned_at_rv;
        let retries = &st.retries;
        let pending = &self.pending;
        let mut held_keys = Vec::new();
        // Held resources, as this tick saw them: their place in line and
        // release estimate, and their note.
        let mut held_now: HashMap<ResourceKey, Held> = HashMap::new();

        // Owners others follow (`hold.with_owner`) that remedy holds now,
        // except those it is letting go; and the owners that still have a
        // follower remedy holds, which go only after it.
        let follows: HashMap<&str, &str> = profiles
            .iter()
            .filter_map(|p| Some((p.kind.as_str(), p.hold.as_ref()?.with_owner.as_deref()?)))
            .collect();
        let followed: HashSet<&str> = follows.values().copied().collect();
        let mut held_owners: HashSet<ResourceKey> = HashSet::new();
        let mut followed_held: HashSet<ResourceKey> = HashSet::new();
        // Owners with a follower failing and not held: an owner is retried
        // only after it (CAPO v0.15 copies its server's ERROR back into the
        // OpenStackMachine, so retrying the machine first only grows its
        // crash count and backoff).
        let mut followers_failing: HashSet<ResourceKey> = HashSet::new();
        if !followed.is_empty() {
            let grace = self.settings.controller_grace;
            self.deps.store.for_each(|key, e| {
                if let Some(owner) = follows.get(key.kind.as_ref())
                    && matches!(e.view.pause, PauseState::NotPaused)
                    && facts::failing(&e.verdict, e.signals_count(grace)) != Failing::No
                    && let Some(name) = e.view.label(HELD_WITH_LABEL)
                {
                    followers_failing.insert(ResourceKey::new(owner, &key.namespace, name));
                }
                let ours = matches!(e.view.pause, PauseState::Ours { .. });
                if followed.contains(key.kind.as_ref()) && !e.view.deleting && ours {
                    held_owners.insert(key.clone());
                }
                if ours
                    && let Some(owner) = follows.get(key.kind.as_ref())
                    && let Some(name) = e.view.label(HELD_WITH_LABEL)
                {
                    followed_held.insert(ResourceKey::new(owner, &key.namespace, name));
                }
            });
        }
        // An owner no longer held is let go; one still held stops being
        // followed.
        st.letting_go.retain(|k| held_owners.contains(k));
        held_owners.retain(|k| !st.letting_go.contains(k));

        // The store's objects as facts for the decision core.
        let per_owner = st.core.config().budget.per.clone();
        let mut t = st.core.begin(now);
        self.deps.store.for_each(|key, e| {
            let name = t.domain_by().of(key, &e.view);
            let domain = t.domain(name);
            let held = matches!(e.view.pause, PauseState::Ours { .. });
            if held {
                held_keys.push(key.to_string());
            }
            // Signals that predate remedy's own last write (a released or
            // remediated object whose controller has not reconciled yet)
            // are not a new failure: they neither feed the breaker nor hold.
            let fresh = e.signals_count(self.settings.controller_grace);
            let failing = facts::failing(&e.verdict, fresh);
            let pause = facts::pause(&e.view.pause);
            let profile: Option<&Profile> = profiles.get(e.profile);
            // The profile's controller rule if it names one (brupop).
            let backoff = backoff.effective(profile.and_then(|p| p.backoff));
            let facts::Retry {
                crash_count: crashes,
                remaining: backoff_remaining,
            } = facts::retry(backoff, e.view.crash_count, e.view.failure_time, wall);
            // A goal for it queued or running, or planned from this version.
            let busy = planned
                .get(key)
                .is_some_and(|rv| *rv == e.view.resource_version)
                || pending.contains(key);
            let owner: Option<Arc<str>> = per_owner
                .as_ref()
                .and_then(|p| p.of(key, &e.view))
                .map(Arc::from);
            // Without its profile nothing is decided for it; nor while a
            // goal for it is queued or running, was planned from this
            // version, or failed and waits its backoff.
            let is_planned = profile.is_none() || busy || retries.waiting(key, now);
            let alert: Option<Box<str>> = firing
                .iter()
                .find(|s| s.matches(key, &e.view))
                .map(|s| s.alertname.as_str().into());
            let owner_held: Option<Box<str>> = profile
                .and_then(|p| p.hold.as_ref()?.with_owner.as_deref())
                .and_then(|kind| {
                    let name = e.view.label(HELD_WITH_LABEL)?;
                    held_owners
                        .contains(&ResourceKey::new(kind, &key.namespace, name))
                        .then(|| format!("{kind}/{name}").into())
                });
            let decided = !is_planned && !e.view.deleting;
            if let PauseState::Ours { reason, .. } = &e.view.pause {
                held_now.insert(
                    key.clone(),
                    Held {
                        domain: domain.clone(),
                        backoff: backoff_remaining,
                        // A fixed deadline for the note, not one that moves
                        // with this tick's clock.
                        not_before: (!backoff_remaining.is_zero())
                            .then(|| backoff.not_before(crashes, e.view.failure_time))
                            .flatten(),
                        reason: reason.clone(),
                        why: e.view.why,
                        owner: owner.clone(),
                        // What keeps it held whatever its mark says, as
                        // decide sees it (nothing while it is planned or
                        // going away: decide looks no further).
                        firing: alert.clone().filter(|_| decided),
                        with_owner: owner_held.clone().filter(|_| decided),
                        followers_held: decided && followed_held.contains(key),
                    },
                );
            }
            t.fact(
                key,
                Fact {
                    domain,
                    pause,
                    failing,
                    fresh,
                    deleting: e.view.deleting,
                    planned: is_planned,
                    // Not while it only waits its retry: its goal failed,
                    // and a goal's unpause is its last step.
                    busy,
                    // Not one its owner is replacing: a pause would not stop that.
                    holdable: profile.is_some_and(|p| p.hold.is_some()) && !e.view.replaced,
                    no_probe: profile
                        .and_then(|p| p.hold.as_ref())
                        .is_some_and(|h| h.no_probe),
                    uncreated: e.view.uncreated,
                    // Created "after" this clock (skew): just now.
                    age: e
                        .view
                        .created
                        .map(|c| (wall - c).to_std().unwrap_or(Duration::ZERO)),
                    crash_count: crashes,
                    backoff_remaining,
                    firing: alert,
                    // Only what a verified episode fixed as its targets: a
                    // failure after the verification is a new one.
                    verified: episodes.targets(key)
                        && verified.iter().any(|s| s.matches(key, &e.view)),
                    has_work: profile.is_some_and(|p| has_work(p, e)),
                    stuck: profile.is_some_and(|p| stuck(p, e, fresh))
                        && !followers_failing.contains(key),
                    owner,
                    owner_held,
                    followed_held: followed_held.contains(key),
                },
            );
        });
        let synced = self
            .settings
            .streams
            .iter()
            .all(|s| self.deps.store.is_synced(s));
        let (external, sample) = match pass {
            Pass::Tick { external } => (external, true),
            Pass::Early => (None, false),
        };
        let decisions = t.finish(Context {
            leader,
            paused,
            synced,
            external,
            sample,
        });
        held_keys.sort();
        Seen {
            decisions,
            held_now,
            held_keys,
            known,
        }
    }

    /// Logs the breakers that changed or resumed, and exports each
    /// domain's breaker and release pace.
    fn export_breakers(
        &self,
        st: &State,
        changed: &[(Arc<str>, BreakerState, BreakerState)],
        resumed: &[(Arc<str>, usize)],
    ) {
        for (domain, held) in resumed {
            tracing::info!(
                held,
                %domain,
                "leading with breaker holds: breaker resumed open, cooldown runs from now"
            );
        }
        for (domain, before, after) in changed {
            tracing::warn!(%domain, open = after.is_open(), ?before, state = ?after, "outage breaker changed");
        }
        let scope = st.core.domain_by().label();
        for (domain, state, ratio, failing) in st.core.breakers().judged() {
            let labels = ScopeLabels {
                scope,
                domain: domain.to_string(),
            };
            self.metrics
                .engine
                .breaker_open
                .get_or_create(&labels)
                .set(i64::from(state.is_open()));
            self.metrics
                .engine
                .breaker_ratio
                .get_or_create(&labels)
                .set(ratio);
            self.metrics
                .engine
                .breaker_failing
                .get_or_create(&labels)
                .set(i64::from(failing));
            self.metrics
                .engine
                .release_pace
                .get_or_create(&labels)
                .set(st.core.release_rate(domain));
        }
    }

    /// Releases and remediations queued before a breaker opened would
    /// unpause into the outage: they go back to waiting.
    fn cancel_opened(&self, st: &mut State, changed: &[(Arc<str>, BreakerState, BreakerState)]) {
        let opened: HashSet<&str> = changed
            .iter()
            .filter(|(_, _, after)| after.is_open())
            .map(|(domain, _, _)| domain.as_ref())
            .collect();
        if !opened.is_empty() {
            let breakers = st.core.breakers();
            let store = &self.deps.store;
            let dropped = self.pending.cancel(|k, goal| {
                !matches!(goal, Goal::Hold(_))
                    && store
                        .get(k)
                        .is_some_and(|e| opened.contains(breakers.slot_for(k, &e.view)))
            });
            forget_dropped(
                &mut st.planned_at_rv,
                &dropped,
                "outage breaker opened: queued releases cancelled",
            );
        }
    }

    /// Held for an alert that is not verified cleared yet. If this process
    /// never saw its episode (restart, leader change), verify it before
    /// releasing.
    fn settle_held(
        &self,
        st: &mut State,
        settling: &[(ResourceKey, Box<str>)],
        known: &HashSet<String>,
        wall: DateTime<Utc>,
        waiting: &mut Waiting,
    ) {
        let mut recovered = Vec::new();
        for (key, alert) in settling {
            if !known.contains(alert.as_ref()) {
                recovered.push(Scope::recovered(alert, &key.kind));
            }
            waiting.add(key, "settle");
        }
        for s in recovered {
            st.episodes.adopt_hold(s, wall);
        }
    }

    /// Resets a stale write undid (brupop's agent): reset again, at most
    /// `MAX_REAPPLY` times, each counted and said in an Event.
    fn reapply_undone(&self, st: &mut State, writing: bool) {
        for (key, undone) in self.deps.store.take_undone() {
            let result = match undone {
                Undone::Reapply(_) if !writing => {
                    tracing::warn!(resource = %key, "a stale write undid remedy's reset; not reset again: remedy is paused or no longer leads");
                    OverwriteResult::NotReapplied
                }
                Undone::Reapply(n) => {
                    // Refused only while a goal for it is queued or running:
                    // that one reads the object afresh.
                    if self.pending.offer(key.clone(), Goal::Remediate) {
                        st.overwritten.insert(key.clone(), n);
                    }
                    tracing::warn!(resource = %key, time = n, "a stale write undid remedy's reset: resetting again");
                    OverwriteResult::Reapplied
                }
                Undone::GaveUp => {
                    tracing::warn!(resource = %key, times = crate::decide::resets::MAX_REAPPLY, "a stale write undid remedy's reset again: left to the controller's own backoff");
                    OverwriteResult::GaveUp
                }
            };
            self.metrics
                .engine
                .resets_overwritten
                .get_or_create(&crate::metrics::KindResultLabels {
                    kind: key.kind.to_string(),
                    result,
                })
                .inc();
        }
    }

    /// The decided holds, releases and remediations, queued for the
    /// workers.
    fn enqueue(
        &self,
        st: &mut State,
        holds: Vec<HoldOrder<ResourceKey>>,
        actions: Vec<(ResourceKey, Action)>,
        wall: DateTime<Utc>,
    ) {
        for hold in holds {
            let record = HoldMark {
                since: wall,
                reason: hold.reason,
                crash_count: hold.crash_count,
                value: None,
            };
            // Marked planned only once queued: a refused goal is planned
            // again next tick, not forgotten.
            let rv = self
                .deps
                .store
                .get(&hold.key)
                .map(|e| e.view.resource_version.clone());
            if self.pending.offer(hold.key.clone(), Goal::Hold(record))
                && let Some(rv) = rv
            {
                st.planned_at_rv.insert(hold.key, rv);
            }
        }
        for (key, action) in actions {
            let goal = match action {
                Action::Release => Goal::Release,
                Action::Remediate => Goal::Remediate,
                Action::Retry => match self.retry_mark(&key, wall) {
                    Some(mark) => Goal::Retry(mark),
                    None => continue,
                },
            };
            let rv = self
                .deps
                .store
                .get(&key)
                .map(|e| e.view.resource_version.clone());
            if !self.pending.offer(key.clone(), goal) {
                continue;
            }
            if let Some(rv) = rv {
                st.planned_at_rv.insert(key.clone(), rv);
            }
            // Releases of held resources only; remediations are
            // counted by their actions.
            if action == Action::Release {
                self.metrics
                    .engine
                    .releases
                    .get_or_create(&crate::metrics::KindLabels {
                        kind: key.kind.to_string(),
                    })
                    .inc();
            }
        }
    }

    /// The attempt a retry records: one more than its crash count (as the
    /// engine counts it, `backoff.quiet_window` applied), now, and a note
    /// that says when remedy retries next if this one fails too.
    fn retry_mark(&self, key: &ResourceKey, wall: DateTime<Utc>) -> Option<RetryMark> {
        let e = self.deps.store.get(key)?;
        let profile = self.deps.profiles.get(e.profile)?;
        let quiet = profile.remediation.retry.as_ref()?.quiet;
        let backoff = self.settings.backoff.effective(profile.backoff);
        let crashes =
            facts::retry(backoff, e.view.crash_count, e.view.failure_time, wall).crash_count;
        let attempt = crashes.saturating_add(1);
        // Whole seconds, as the failure-time annotation keeps it.
        let at = wall.with_nanosecond(0).unwrap_or(wall);
        let next = backoff.not_before(attempt, Some(at));
        Some(RetryMark {
            crash_count: attempt,
            at,
            note: crate::model::why::retried(at, attempt, quiet, next),
        })
    }

    /// Each waiting resource's place in its domain's line, in decide's
    /// release order (lowest crash count first), for `explain`; its release
    /// estimate; and why it waits.
    fn line_up(
        &self,
        st: &mut State,
        lined: Vec<(ResourceKey, WaitReason)>,
        held_now: &HashMap<ResourceKey, Held>,
        leader: bool,
        now: Duration,
        waiting: &mut Waiting,
    ) {
        st.release_order.clear();
        let mut etas: HashMap<ResourceKey, f64> = HashMap::new();
        if leader {
            let breakers = st.core.breakers();
            let mut lines: HashMap<Arc<str>, Vec<ResourceKey>> = HashMap::new();
            for (key, _) in &lined {
                // Held ones (most of the line) from this tick's facts; a
                // remediation of an unheld object from the store.
                let domain = match held_now.get(key) {
                    Some(h) => Some(h.domain.clone()),
                    None => self
                        .deps
                        .store
                        .get(key)
                        .map(|e| Arc::from(breakers.slot_for(key, &e.view))),
                };
                if let Some(domain) = domain {
                    lines.entry(domain).or_default().push(key.clone());
                }
            }
            for (domain, line) in lines {
                let n = line.len();
                let open = st.core.breakers().is_open(&domain);
                let rate = st.core.release_rate(&domain);
                for (i, key) in line.into_iter().enumerate() {
                    // Held ones only: a release estimate; none in an open
                    // domain (no pace to go by).
                    if let Some(h) = held_now.get(&key)
                        && !open
                        && let Some(s) = super::explain::eta(i + 1, rate, h.backoff)
                    {
                        etas.insert(key.clone(), s);
                    }
                    st.release_order.insert(key, (i + 1, n));
                }
            }
        }
        self.metrics
            .series
            .set_release_etas(|k| etas.get(k).copied());
        if leader {
            for (key, why) in lined {
                waiting.add(&key, why.label());
            }
            for key in st.retries.waiting_keys(now) {
                waiting.add(key, RETRY);
            }
        }
    }

    /// Notes on held resources, at their pace and not while the apiserver
    /// pushes back.
    fn pace_notes(
        &self,
        st: &mut State,
        held_now: &HashMap<ResourceKey, Held>,
        waiting: &Waiting,
        writing: bool,
        now: Duration,
    ) {
        let throttled = self.metrics.apiserver.throttled.get();
        if throttled != st.throttled_seen.0 {
            st.throttled_seen = (throttled, Some(now));
        }
        let quiet = st
            .throttled_seen
            .1
            .is_none_or(|at| now.saturating_sub(at) >= super::NOTE_QUIET);
        if writing && quiet {
            let breakers = st.core.breakers();
            self.offer_notes(held_now, &waiting.by_key, breakers, &mut st.notes, now);
        }
    }

    /// The waiting gauges: every watched kind, every reason, zeros
    /// included.
    fn export_waiting(&self, waiting: &Waiting) {
        for p in self.deps.profiles.iter() {
            use crate::decide::release::WaitReason as W;
            let decided = [W::Breaker, W::Backoff, W::Budget, W::Owner].map(|w| w.label());
            for reason in decided.into_iter().chain(["settle", RETRY]) {
                let n = waiting
                    .counts
                    .get(&(p.kind.clone(), reason))
                    .copied()
                    .unwrap_or(0);
                self.metrics
                    .engine
                    .waiting
                    .get_or_create(&KindReasonLabels {
                        kind: p.kind.clone(),
                        reason,
                    })
                    .set(n);
            }
        }
    }

    /// The budget and queue gauges and the status report.
    fn write_report(
        &self,
        st: &mut State,
        now: Duration,
        leader: bool,
        held: Vec<String>,
        waiting: BTreeMap<String, String>,
    ) {
        let tokens = st.core.tokens(now);
        self.metrics.engine.budget_tokens.set(tokens);
        self.metrics
            .engine
            .pending_actions
            .set(i64::try_from(self.pending.len()).unwrap_or(i64::MAX));
        st.report = StatusReport {
            leader,
            dry_run: self.settings.dry_run,
            paused: self.deps.pause.as_ref().and_then(|p| p.state()),
            breaker_open: st.core.breakers().any_open(),
            open_domains: st.core.breakers().open(),
            budget_tokens: tokens,
            held,
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
    pub(super) fn fix_targets(&self, st: &mut State) {
        let profiles = &self.deps.profiles;
        let store = &self.deps.store;
        // The episode record keeps targets; their total is bounded too.
        let room =
            crate::record::MAX_TARGETS.saturating_sub(crate::record::targets_held(&st.episodes));
        let max = |alert: &str| {
            self.settings
                .alerts
                .get(alert)
                .map_or(0, |a| a.max_resources.min(room))
        };
        let over = st.episodes.fix_targets(max, |scope, episode| {
            let mut set = std::collections::BTreeSet::new();
            store.for_each(|key, e| {
                if !scope.matches(key, &e.view) || e.view.deleting {
                    return;
                }
                let held_for_it = matches!(&e.view.pause, PauseState::Ours { reason: Some(r), .. }
                    if r.strip_prefix(ALERT_PREFIX) == Some(scope.alertname.as_str()));
                let failing = matches!(e.verdict, Verdict::Transient { .. })
                    && profiles.get(e.profile).is_some_and(|p| has_work(p, e));
                // An episode adopted from remedy's own holds knows nothing
                // of the alert's real scope: only what it holds is its own.
                let unheld = !episode.adopted && failing && e.view.pause == PauseState::NotPaused;
                if held_for_it || unheld {
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
    pub(super) fn firing_over_cap(&self, st: &mut State) -> HashSet<Scope> {
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
        self.deps.store.for_each(|key, e| {
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
                .settings
                .alerts
                .get(&s.alertname)
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

    /// Queues remedy's note (`remedy.dev/why`) on held resources whose note
    /// would change, after this tick's holds and releases and at the notes'
    /// own pace (`State::notes`), so notes never crowd out the writes that
    /// matter.
    fn offer_notes(
        &self,
        held: &HashMap<ResourceKey, Held>,
        waiting: &BTreeMap<String, String>,
        breakers: &crate::decide::breakers::Breakers,
        pace: &mut crate::decide::bucket::TokenBucket,
        now: Duration,
    ) {
        for (key, h) in held {
            if pace.tokens(now) < 1.0 {
                break;
            }
            let Some(mark) = h.reason.as_deref() else {
                continue;
            };
            // Nothing to say (a goal queued or running): no note.
            let Some(why) = (crate::model::why::Held {
                mark,
                domain: &h.domain,
                with_owner: h.with_owner.as_deref(),
                firing: h.firing.as_deref(),
                waits: waiting.get(&key.to_string()).map(String::as_str),
                followers_held: h.followers_held,
                breaker_open: breakers.is_open(&h.domain),
                not_before: h.not_before,
                owner: h.owner.as_deref(),
            })
            .why() else {
                continue;
            };
            let text = why.text();
            if crate::model::why::digest(&text) != h.why
                && self.pending.offer(key.clone(), Goal::Note(text))
            {
                pace.try_take(now);
            }
        }
    }
}

/// What one tick saw of the store, and what the core decided.
struct Seen {
    decisions: Decisions<ResourceKey>,
    /// Held resources: their place in line and release estimate, and
    /// their note.
    held_now: HashMap<ResourceKey, Held>,
    /// Held resources, sorted, for the report.
    held_keys: Vec<String>,
    /// Alerts this process has episodes of.
    known: HashSet<String>,
}

/// Why resources wait, per resource and counted per kind and reason.
#[derive(Default)]
struct Waiting {
    by_key: BTreeMap<String, String>,
    counts: HashMap<(String, &'static str), i64>,
}

impl Waiting {
    fn add(&mut self, key: &ResourceKey, why: &'static str) {
        *self.counts.entry((key.kind.to_string(), why)).or_insert(0) += 1;
        self.by_key.insert(key.to_string(), why.to_string());
    }
}

/// A resource remedy holds, as one tick saw it.
struct Held {
    domain: Arc<str>,
    /// remedy's own wait before it may go.
    backoff: Duration,
    /// When that wait ends, while there is one.
    not_before: Option<DateTime<Utc>>,
    /// The hold mark's reason (`breaker`, `alert:NAME`).
    reason: Option<Box<str>>,
    /// Digest of the note on the object (`ResourceView::why`).
    why: u64,
    owner: Option<Arc<str>>,
    /// The firing alert whose scope selects it: held for it, whatever
    /// its mark says.
    firing: Option<Box<str>>,
    /// The owner (`Kind/name`) it is held with while remedy holds that
    /// owner.
    with_owner: Option<Box<str>>,
    /// Resources held with it are still held: they go first.
    followers_held: bool,
}

/// Its controller gave up on it (`remediation.retry`): its failure
/// signals count (`fresh`), what stops the controller is there to clear,
/// and nobody but remedy has written it for `quiet`.
fn stuck(profile: &Profile, e: &Entry, fresh: bool) -> bool {
    profile
        .remediation
        .retry
        .as_ref()
        .is_some_and(|r| fresh && e.view.clearable && e.written_at.elapsed() >= r.quiet)
}

/// Whether remediation has anything to write for a resource that is not
/// held: failure fields to clear or a native counter to reset. A failing
/// condition alone (a controller still quoting the old error) is not worth a
/// budget token.
fn has_work(profile: &Profile, e: &Entry) -> bool {
    let view = &e.view;
    e.failure.is_some()
        || view.clearable
        || (profile.has_native_counter()
            && (view.crash_count.is_some_and(|n| n > 0) || view.failure_time.is_some()))
}

/// Goals dropped from the queue before they ran are planned again at the
/// next tick that allows them: their plan markers go.
fn forget_dropped(
    planned_at_rv: &mut HashMap<ResourceKey, Box<str>>,
    dropped: &[ResourceKey],
    why: &str,
) {
    if dropped.is_empty() {
        return;
    }
    tracing::info!(cancelled = dropped.len(), "{why}");
    for k in dropped {
        planned_at_rv.remove(k);
    }
}
