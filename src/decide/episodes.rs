//! Alert episodes: what remedy knows about each configured alert's scope
//! (firing, resolved, verified) and what a notification may change. Pure:
//! notifications and clocks in, decisions out; the engine does the I/O.
//!
//! The rules that keep an alert from being turned against the fleet:
//! - a resolved notification proves nothing by itself: an episode needs
//!   evidence that the alert fired (seen firing, or Prometheus' `ALERTS`
//!   history, or remedy's own holds for it) before anything is remediated;
//! - a firing alert whose scope selects nothing specific is refused unless
//!   the alert is configured `allow_cluster_wide`;
//! - a verified episode remediates the resources that were failing or held
//!   for it when it was verified, each once; a later failure is a new one;
//! - each firing needs its own proof: one taken from the episode record
//!   does not inherit the proof of an earlier firing of its scope, and one
//!   that started before the episode's last resolution (a delayed retry) is
//!   refused;
//! - a firing episode is never evicted to make room: a new one is refused.

use crate::config::AlertRule;
use crate::model::scope::Scope;
use crate::model::view::ResourceKey;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Episodes kept at most.
pub const MAX_EPISODES: usize = 1000;
/// Finished episodes are forgotten after this; it is also how far back
/// Prometheus is asked whether an alert fired.
pub const EPISODE_TTL: Duration = Duration::from_secs(3600);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    pub alertname: String,
    pub matchers: BTreeMap<String, String>,
    pub firing: bool,
    pub changed_at: DateTime<Utc>,
    /// Set once the condition was verified cleared; remediation needs it.
    pub verified_at: Option<DateTime<Utc>>,
    /// Last verification failure, for status and readiness.
    pub last_error: Option<String>,
    /// Rebuilt from Prometheus at start or on becoming leader, not from a
    /// webhook; a later recovery may update it, a webhook takes it over.
    #[serde(default)]
    pub from_prometheus: bool,
    /// Evidence that the alert fired for this scope. Without it nothing is
    /// remediated: a bare resolved notification waits for Prometheus'
    /// history to confirm it, and is dropped if it does not.
    #[serde(default)]
    pub fired: bool,
    /// The resources this episode remediates, fixed when it is first
    /// verified; each leaves the set once its remediation is done. `None`
    /// until verified.
    #[serde(skip)]
    pub targets: Option<BTreeSet<ResourceKey>>,
    /// Resources the scope selected when it went over the alert's
    /// `max_resources`: then it holds and remediates nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over_cap: Option<usize>,
    /// Made for remedy's own holds found on objects (restart, new leader):
    /// it remediates only the objects held for it, never other failing
    /// objects of the kind its scope names.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopted: bool,
    /// Targets read from the episode record, not yet re-verified: when the
    /// episode is verified again, its targets are these that are still in
    /// its scope and failing or held for it.
    #[serde(skip)]
    pub carried: Option<BTreeSet<ResourceKey>>,
    /// When the alert that last resolved this episode ended (its `endsAt`,
    /// as a notice from the episode record carries it); unknown for older
    /// records and other sources. A firing notice that started before it is
    /// about that alert, not a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<DateTime<Utc>>,
    /// Firing again, unproven, after a resolution that ended then: only
    /// `ALERTS` since that time prove it (the old firing would otherwise
    /// prove a forged or late notice, #38.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fired_after: Option<DateTime<Utc>>,
}

impl Episode {
    pub fn new(scope: &Scope, firing: bool, at: DateTime<Utc>) -> Self {
        Self {
            alertname: scope.alertname.clone(),
            matchers: scope.matchers.clone(),
            firing,
            changed_at: at,
            verified_at: None,
            last_error: None,
            from_prometheus: false,
            fired: firing,
            targets: None,
            over_cap: None,
            adopted: false,
            carried: None,
            ended_at: None,
            fired_after: None,
        }
    }

    /// Remediation may act for this episode now.
    pub fn remediates(&self) -> bool {
        !self.firing && self.fired && self.verified_at.is_some() && self.over_cap.is_none()
    }

    /// Firing, or remediations still to do: never evicted or pruned, so
    /// that what waits on a backoff is not forgotten under pressure.
    pub fn busy(&self) -> bool {
        self.firing
            || self.targets.as_ref().is_some_and(|t| !t.is_empty())
            || self.carried.as_ref().is_some_and(|t| !t.is_empty())
    }
}

/// Why a notification changed nothing. Metric label values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The scope selects the whole fleet and the alert is not allowed to.
    ClusterWide,
    /// Every slot holds a firing episode, or one with remediations to do.
    Full,
    /// Resolved, and no evidence that it ever fired.
    Unproven,
    /// The scope selected more resources than `max_resources`.
    OverCap,
    /// A scope the alert's selector cannot produce (the episode record
    /// was edited by hand, or forged).
    InvalidScope,
    /// A firing notice for an alert that started before the episode's last
    /// resolution: a delayed retry of what has already resolved (or a
    /// forged entry in the episode record).
    Stale,
}

impl Refusal {
    pub fn label(&self) -> &'static str {
        match self {
            Self::ClusterWide => "cluster_wide",
            Self::Full => "full",
            Self::Unproven => "unproven",
            Self::OverCap => "over_cap",
            Self::InvalidScope => "invalid_scope",
            Self::Stale => "stale",
        }
    }

    pub const ALL: [Refusal; 6] = [
        Self::ClusterWide,
        Self::Full,
        Self::Unproven,
        Self::OverCap,
        Self::InvalidScope,
        Self::Stale,
    ];
}

/// Whether a scope selects nothing in particular: no namespace, kind,
/// name, cluster or label. Such an alert would hold every failing resource.
pub fn is_cluster_wide(scope: &Scope) -> bool {
    scope.namespace.is_none()
        && scope.kind.is_none()
        && scope.name.is_none()
        && scope.cluster.is_none()
        && scope.match_labels.is_empty()
}

/// An alert's `startsAt` and `endsAt` as Alertmanager sent them, both on
/// Prometheus' clock; `None` where unknown (unset, or a record written
/// before they were kept).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AlertTimes {
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
}

/// Whether a firing notification proves the alert fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// From the webhook, whose caller presented the token.
    Firing,
    /// From the episode record: Prometheus must confirm it. With the
    /// alert's times, which tell a delayed retry from a new firing.
    Unproven(AlertTimes),
}

impl Evidence {
    fn times(&self) -> AlertTimes {
        match self {
            Self::Firing => AlertTimes::default(),
            Self::Unproven(t) => *t,
        }
    }
}

/// The bounded set of episodes.
#[derive(Debug, Default)]
pub struct Book {
    episodes: BTreeMap<Scope, Episode>,
}

impl Book {
    pub fn map(&self) -> &BTreeMap<Scope, Episode> {
        &self.episodes
    }

    pub fn get_mut(&mut self, scope: &Scope) -> Option<&mut Episode> {
        self.episodes.get_mut(scope)
    }

    pub fn len(&self) -> usize {
        self.episodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.episodes.is_empty()
    }

    /// A notification for `scope`. Firing proves the alert fired; resolved
    /// keeps what the episode knew, and for a scope never seen starts an
    /// unproven episode that verification must confirm from Prometheus.
    pub fn notify(
        &mut self,
        rule: &AlertRule,
        scope: &Scope,
        firing: bool,
        at: DateTime<Utc>,
    ) -> Result<(), Refusal> {
        self.notify_as(rule, scope, firing, at, Evidence::Firing)
    }

    /// A notification whose source decides whether a firing one proves
    /// that the alert fired: the webhook's (token checked) does; one taken
    /// from the episode record, which anyone allowed to write that
    /// ConfigMap could have put there, does not, and Prometheus' history
    /// must confirm it before anything is remediated. A firing that follows
    /// a resolution needs its own proof, and one whose alert started before
    /// that resolution ended is refused ([`Refusal::Stale`]): it would wipe
    /// the verification and leave the episode firing for good.
    pub fn notify_as(
        &mut self,
        rule: &AlertRule,
        scope: &Scope,
        firing: bool,
        at: DateTime<Utc>,
        evidence: Evidence,
    ) -> Result<(), Refusal> {
        if *scope != Scope::from_alert(rule, &scope.matchers) || !scope.is_selectable() {
            return Err(Refusal::InvalidScope);
        }
        if firing && !rule.allow_cluster_wide && is_cluster_wide(scope) {
            return Err(Refusal::ClusterWide);
        }
        match self.episodes.get_mut(scope) {
            // The same resolved notification again (redelivered, or sent to
            // two replicas): what was verified and remediated stands, so a
            // repeat never remediates a later failure. A recovered episode
            // is taken over by the webhook.
            Some(ep) if !firing && !ep.firing => {
                ep.from_prometheus = false;
                return Ok(());
            }
            // Both times are Prometheus': no clock skew between them.
            Some(ep)
                if firing
                    && !ep.firing
                    && evidence
                        .times()
                        .starts_at
                        .zip(ep.ended_at)
                        .is_some_and(|(started, ended)| started < ended) =>
            {
                return Err(Refusal::Stale);
            }
            Some(_) => {}
            None => self.make_room()?,
        }
        let ep = self
            .episodes
            .entry(scope.clone())
            .or_insert_with(|| Episode::new(scope, false, at));
        let proof = firing && evidence == Evidence::Firing;
        // Firing again after a resolution: the proof of the last firing
        // says nothing about this one.
        ep.fired = proof || (ep.fired && (ep.firing || !firing));
        ep.fired_after = match (firing, ep.firing) {
            (true, false) if !ep.fired => ep.ended_at,
            (true, true) => ep.fired_after,
            _ => None,
        };
        ep.ended_at = if firing {
            None
        } else {
            evidence.times().ends_at
        };
        ep.firing = firing;
        ep.changed_at = at;
        ep.verified_at = None;
        ep.targets = None;
        ep.carried = None;
        ep.over_cap = None;
        ep.from_prometheus = false;
        Ok(())
    }

    /// Episodes a new leader read from the episode record. Nothing in them
    /// is taken on trust: scopes the configured selectors cannot produce
    /// are dropped (returned, to be counted), and every verification and
    /// every proof that an alert fired is made again against Prometheus
    /// before anything is remediated. Targets are kept aside and narrowed
    /// to what is still in scope when the episode is verified again.
    pub fn distrust(&mut self, rules: &[AlertRule]) -> Vec<Scope> {
        let mut dropped = Vec::new();
        self.episodes.retain(|scope, ep| {
            let ok = rules
                .iter()
                .find(|r| r.alertname == scope.alertname)
                .is_some_and(|r| {
                    if ep.adopted {
                        scope
                            .kind
                            .as_deref()
                            .is_some_and(|k| *scope == Scope::recovered(&scope.alertname, k))
                    } else {
                        *scope == Scope::from_alert(r, &scope.matchers)
                    }
                });
            if !ok {
                dropped.push(scope.clone());
            }
            ok
        });
        for ep in self.episodes.values_mut() {
            ep.verified_at = None;
            ep.fired = false;
            ep.carried = ep.targets.take().or(ep.carried.take());
        }
        dropped
    }

    /// Alerts with a firing episode that carries no proof that it fired
    /// (taken from the episode record's inbox): what to ask Prometheus.
    pub fn unproven_firing(&self) -> BTreeSet<String> {
        self.episodes
            .values()
            .filter(|e| e.firing && !e.fired && e.fired_after.is_none())
            .map(|e| e.alertname.clone())
            .collect()
    }

    /// Alerts firing again, unproven, after a resolution, with the time it
    /// ended: each is proven only by `ALERTS` since then
    /// ([`Book::prove_refiring`]).
    pub fn unproven_refiring(&self) -> BTreeSet<(String, DateTime<Utc>)> {
        self.episodes
            .values()
            .filter(|e| e.firing && !e.fired)
            .filter_map(|e| Some((e.alertname.clone(), e.fired_after?)))
            .collect()
    }

    /// As [`Book::prove_firing`], for the episodes of `alertname` firing
    /// again after a resolution that ended at `since`, from the `ALERTS`
    /// label sets Prometheus has since then.
    pub fn prove_refiring(
        &mut self,
        alertname: &str,
        since: DateTime<Utc>,
        sets: &[BTreeMap<String, String>],
    ) -> usize {
        let mut proven = 0;
        for ep in self.episodes.values_mut() {
            if !ep.firing || ep.fired || ep.alertname != alertname || ep.fired_after != Some(since)
            {
                continue;
            }
            if sets.iter().any(|l| seen_in(ep, l)) {
                ep.fired = true;
                ep.fired_after = None;
                proven += 1;
            }
        }
        proven
    }

    /// Proves firing episodes from `sets`, the `ALERTS` label sets
    /// Prometheus has for their alerts: an episode is proven when one set
    /// names its alert and carries every one of its matchers. Proven, it is
    /// kept when the record must shed (a real outage outranks junk scopes).
    /// Returns how many were proven.
    pub fn prove_firing(&mut self, sets: &[BTreeMap<String, String>]) -> usize {
        let mut proven = 0;
        for ep in self.episodes.values_mut() {
            // Firing again after a resolution: older ALERTS prove nothing.
            if !ep.firing || ep.fired || ep.fired_after.is_some() {
                continue;
            }
            if sets.iter().any(|l| seen_in(ep, l)) {
                ep.fired = true;
                proven += 1;
            }
        }
        proven
    }

    /// Inserts or overwrites an episode (recovery), if there is room.
    pub fn put(&mut self, scope: Scope, ep: Episode) -> Result<(), Refusal> {
        if !self.episodes.contains_key(&scope) {
            self.make_room()?;
        }
        self.episodes.insert(scope, ep);
        Ok(())
    }

    /// An episode for resources held for an alert this process never saw
    /// (restart, new leader): remedy's own hold proves the alert fired.
    pub fn adopt_hold(&mut self, scope: Scope, at: DateTime<Utc>) {
        if self.episodes.contains_key(&scope) || self.make_room().is_err() {
            return;
        }
        let mut ep = Episode::new(&scope, false, at);
        ep.fired = true;
        ep.adopted = true;
        self.episodes.insert(scope, ep);
    }

    pub fn remove(&mut self, scope: &Scope) -> Option<Episode> {
        self.episodes.remove(scope)
    }

    /// Frees a slot by dropping the oldest finished episode; a firing one,
    /// or one with remediations still to do, is never dropped.
    fn make_room(&mut self) -> Result<(), Refusal> {
        if self.episodes.len() < MAX_EPISODES {
            return Ok(());
        }
        let oldest = self
            .episodes
            .iter()
            .filter(|(_, e)| !e.busy())
            .min_by_key(|(_, e)| e.changed_at)
            .map(|(s, _)| s.clone());
        match oldest {
            Some(s) => {
                self.episodes.remove(&s);
                Ok(())
            }
            None => Err(Refusal::Full),
        }
    }

    /// Forgets finished episodes older than the TTL.
    pub fn prune(&mut self, now: DateTime<Utc>) {
        self.episodes.retain(|_, e| {
            let fresh = (now - e.changed_at).to_std().is_ok_and(|d| d < EPISODE_TTL);
            e.busy() || fresh
        });
    }

    /// Fixes the targets of episodes verified since the last call, from
    /// `candidates` (the resources failing or held in each scope). Above
    /// `max` the episode is marked over its cap and remediates nothing;
    /// returns the scopes newly marked so, to be counted.
    pub fn fix_targets(
        &mut self,
        max: impl Fn(&str) -> usize,
        mut candidates: impl FnMut(&Scope, &Episode) -> BTreeSet<ResourceKey>,
    ) -> Vec<Scope> {
        let mut over = Vec::new();
        for (scope, e) in &mut self.episodes {
            if e.firing || !e.fired || e.verified_at.is_none() || e.targets.is_some() {
                continue;
            }
            let mut set = candidates(scope, e);
            if let Some(carried) = e.carried.take() {
                set.retain(|k| carried.contains(k));
            }
            if set.len() > max(&e.alertname) {
                if e.over_cap.is_none() {
                    over.push(scope.clone());
                }
                e.over_cap = Some(set.len());
                e.targets = Some(BTreeSet::new());
            } else {
                e.targets = Some(set);
            }
        }
        over
    }

    /// A resource's remediation finished: no episode acts on it again.
    pub fn done(&mut self, key: &ResourceKey) {
        for e in self.episodes.values_mut() {
            if let Some(t) = e.targets.as_mut() {
                t.remove(key);
            }
        }
    }

    /// Whether some verified episode still has `key` to remediate.
    pub fn targets(&self, key: &ResourceKey) -> bool {
        self.episodes
            .values()
            .any(|e| e.remediates() && e.targets.as_ref().is_some_and(|t| t.contains(key)))
    }
}

/// Whether an `ALERTS` label set names `ep`'s alert with every one of its
/// matchers.
fn seen_in(ep: &Episode, labels: &BTreeMap<String, String>) -> bool {
    labels.get("alertname") == Some(&ep.alertname)
        && ep.matchers.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Selector;

    fn rule(allow: bool) -> AlertRule {
        AlertRule {
            alertname: "A".into(),
            select: Selector {
                kind_label: Some("kind".into()),
                ..Selector::default()
            },
            verify_query: None,
            allow_cluster_wide: allow,
            max_resources: 3,
        }
    }

    fn scope(kind: Option<&str>) -> Scope {
        let labels: BTreeMap<String, String> = kind
            .map(|k| [("kind".to_string(), k.to_string())].into())
            .unwrap_or_default();
        Scope::from_alert(&rule(false), &labels)
    }

    fn key(n: &str) -> ResourceKey {
        ResourceKey::new("K", "ns", n)
    }

    #[test]
    fn a_resolved_notification_alone_proves_nothing() {
        let mut b = Book::default();
        let s = scope(Some("K"));
        b.notify(&rule(false), &s, false, Utc::now()).unwrap();
        let e = &b.map()[&s];
        assert!(!e.fired, "never seen firing");
        let mut e = e.clone();
        e.verified_at = Some(Utc::now());
        assert!(
            !e.remediates(),
            "verified cleared, but never proven to have fired"
        );
        // Seen firing first: the resolved one is proven.
        let mut b = Book::default();
        b.notify(&rule(false), &s, true, Utc::now()).unwrap();
        b.notify(&rule(false), &s, false, Utc::now()).unwrap();
        assert!(b.map()[&s].fired);
        // remedy's own hold is evidence too.
        let mut b = Book::default();
        b.adopt_hold(s.clone(), Utc::now());
        assert!(b.map()[&s].fired && !b.map()[&s].firing);
    }

    #[test]
    fn a_scope_that_selects_everything_needs_allow_cluster_wide() {
        let mut b = Book::default();
        let all = scope(None);
        assert!(is_cluster_wide(&all));
        assert_eq!(
            b.notify(&rule(false), &all, true, Utc::now()),
            Err(Refusal::ClusterWide)
        );
        assert!(b.is_empty());
        b.notify(&rule(true), &all, true, Utc::now()).unwrap();
        assert_eq!(b.len(), 1);
        assert!(!is_cluster_wide(&scope(Some("K"))));
    }

    #[test]
    fn firing_episodes_are_never_evicted_for_new_ones() {
        let mut b = Book::default();
        let r = rule(false);
        let t0 = Utc::now();
        for i in 0..MAX_EPISODES {
            let s = scope(Some(&format!("K{i}")));
            b.notify(&r, &s, true, t0).unwrap();
        }
        let junk = scope(Some("junk"));
        assert_eq!(b.notify(&r, &junk, true, t0), Err(Refusal::Full));
        assert_eq!(b.len(), MAX_EPISODES);
        assert!(b.map().values().all(|e| e.firing));
        // A finished one makes room (the oldest finished goes).
        b.notify(&r, &scope(Some("K0")), false, t0).unwrap();
        b.notify(&r, &junk, true, t0).unwrap();
        assert!(!b.map().contains_key(&scope(Some("K0"))));
        assert!(b.map().contains_key(&junk));
    }

    #[test]
    fn targets_are_fixed_once_and_each_is_remediated_once() {
        let mut b = Book::default();
        let s = scope(Some("K"));
        b.notify(&rule(false), &s, true, Utc::now()).unwrap();
        b.notify(&rule(false), &s, false, Utc::now()).unwrap();
        b.get_mut(&s).unwrap().verified_at = Some(Utc::now());
        let over = b.fix_targets(|_| 3, |_, _| [key("a"), key("b")].into());
        assert!(over.is_empty());
        assert!(b.targets(&key("a")) && b.targets(&key("b")));
        // Later candidates (a new failure) do not join a fixed set.
        b.fix_targets(|_| 3, |_, _| [key("c")].into());
        assert!(!b.targets(&key("c")));
        b.done(&key("a"));
        assert!(!b.targets(&key("a")), "remediated once");
        assert!(b.targets(&key("b")));
        // The resolved notification again (another replica, a redelivery)
        // changes nothing: the fixed targets stand, done ones stay done.
        b.notify(&rule(false), &s, false, Utc::now()).unwrap();
        assert!(b.targets(&key("b")) && !b.targets(&key("a")));
        assert!(b.map()[&s].verified_at.is_some());
        // Fires again: the episode starts over and targets nothing.
        b.notify(&rule(false), &s, true, Utc::now()).unwrap();
        assert!(!b.targets(&key("b")));
    }

    #[test]
    fn an_episode_over_its_cap_remediates_nothing_and_is_reported_once() {
        let mut b = Book::default();
        let s = scope(Some("K"));
        b.notify(&rule(false), &s, true, Utc::now()).unwrap();
        b.notify(&rule(false), &s, false, Utc::now()).unwrap();
        b.get_mut(&s).unwrap().verified_at = Some(Utc::now());
        let four: BTreeSet<_> = ["a", "b", "c", "d"].map(key).into();
        assert_eq!(b.fix_targets(|_| 3, |_, _| four.clone()), vec![s.clone()]);
        assert_eq!(b.map()[&s].over_cap, Some(4));
        assert!(!b.targets(&key("a")));
        assert!(b.fix_targets(|_| 3, |_, _| four.clone()).is_empty());
    }

    #[test]
    fn prune_forgets_old_finished_episodes_only() {
        let mut b = Book::default();
        let old = Utc::now() - chrono::Duration::hours(2);
        b.notify(&rule(false), &scope(Some("F")), true, old)
            .unwrap();
        b.notify(&rule(false), &scope(Some("R")), false, old)
            .unwrap();
        b.prune(Utc::now());
        assert_eq!(b.len(), 1);
        assert!(b.map().values().all(|e| e.firing));
    }

    #[test]
    fn refusal_labels_are_the_metric_values() {
        let labels: Vec<&str> = Refusal::ALL.iter().map(Refusal::label).collect();
        assert_eq!(labels, crate::metrics::values::REFUSALS);
    }

    #[test]
    fn an_episode_with_remediations_to_do_is_never_evicted_or_pruned() {
        let mut b = Book::default();
        let r = rule(false);
        let old = Utc::now() - chrono::Duration::hours(2);
        let waiting = scope(Some("W"));
        b.notify(&r, &waiting, true, old).unwrap();
        b.notify(&r, &waiting, false, old).unwrap();
        b.get_mut(&waiting).unwrap().verified_at = Some(old);
        b.fix_targets(
            |_| 3,
            |s, _| {
                if *s == waiting {
                    [key("a")].into()
                } else {
                    BTreeSet::new()
                }
            },
        );
        // Every other slot firing: the new firing one finds no room, and
        // the verified episode whose remediation waits is not the victim.
        for i in 1..MAX_EPISODES {
            b.notify(&r, &scope(Some(&format!("K{i}"))), true, old)
                .unwrap();
        }
        assert_eq!(
            b.notify(&r, &scope(Some("junk")), true, old),
            Err(Refusal::Full)
        );
        assert!(b.targets(&key("a")));
        b.prune(Utc::now());
        assert!(b.targets(&key("a")), "not pruned while it has work");
        // Done: now it may go.
        b.done(&key("a"));
        b.notify(&r, &scope(Some("junk")), true, old).unwrap();
        assert!(!b.map().contains_key(&waiting));
    }

    #[test]
    fn episodes_read_from_the_record_are_proven_and_verified_again_and_forged_scopes_dropped() {
        let r = rule(false);
        let t = Utc::now();
        let mut b = Book::default();
        let real = scope(Some("K"));
        b.notify(&r, &real, true, t).unwrap();
        b.notify(&r, &real, false, t).unwrap();
        b.get_mut(&real).unwrap().verified_at = Some(t);
        b.fix_targets(|_| 3, |_, _| [key("a"), key("b")].into());
        // A forged scope: the alert's matchers, but no kind filter.
        let mut forged = real.clone();
        forged.kind = None;
        forged.matchers.insert("namespace".into(), "prod".into());
        let mut ep = b.map()[&real].clone();
        ep.matchers = forged.matchers.clone();
        b.put(forged.clone(), ep).unwrap();
        let adopted = Scope::recovered("A", "K");
        b.adopt_hold(adopted.clone(), t);
        let dropped = b.distrust(std::slice::from_ref(&r));
        assert_eq!(dropped, vec![forged]);
        let e = &b.map()[&real];
        assert!(
            e.verified_at.is_none() && !e.fired,
            "proof and verification again"
        );
        assert!(!b.targets(&key("a")), "nothing to remediate until then");
        assert!(
            b.map().contains_key(&adopted),
            "an adopted scope has its own form"
        );
        // Verified again later: the carried targets, narrowed to what is
        // still in scope now.
        let e = b.get_mut(&real).unwrap();
        e.fired = true;
        e.verified_at = Some(t);
        b.fix_targets(
            |_| 3,
            |s, _| {
                if *s == real {
                    [key("b"), key("c")].into()
                } else {
                    BTreeSet::new()
                }
            },
        );
        assert!(b.targets(&key("b")));
        assert!(!b.targets(&key("a")) && !b.targets(&key("c")));
        // A notification taken from the record is no proof that it fired.
        let mut b = Book::default();
        b.notify_as(
            &r,
            &scope(Some("J")),
            true,
            t,
            Evidence::Unproven(AlertTimes::default()),
        )
        .unwrap();
        assert!(b.map()[&scope(Some("J"))].firing && !b.map()[&scope(Some("J"))].fired);
        let mut bad = scope(Some("J"));
        bad.kind = None;
        assert_eq!(
            b.notify_as(&r, &bad, true, t, Evidence::Unproven(AlertTimes::default())),
            Err(Refusal::InvalidScope)
        );
    }

    #[test]
    fn a_firing_episode_from_the_record_is_proven_only_by_its_own_alert_series() {
        let r = rule(false);
        let t = Utc::now();
        let mut b = Book::default();
        for k in ["K", "J"] {
            b.notify_as(
                &r,
                &scope(Some(k)),
                true,
                t,
                Evidence::Unproven(AlertTimes::default()),
            )
            .unwrap();
        }
        assert_eq!(b.unproven_firing(), BTreeSet::from(["A".to_string()]));
        let set = |alert: &str, kind: &str| -> BTreeMap<String, String> {
            [("alertname", alert), ("kind", kind), ("severity", "page")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        // Another alert's series, or another kind's, proves nothing.
        assert_eq!(b.prove_firing(&[set("B", "K"), set("A", "X")]), 0);
        assert!(!b.map()[&scope(Some("K"))].fired);
        // Its own series (extra labels allowed) proves K, not J.
        assert_eq!(b.prove_firing(&[set("A", "K")]), 1);
        assert!(b.map()[&scope(Some("K"))].fired);
        assert!(!b.map()[&scope(Some("J"))].fired);
        // A proven one is not counted again; a resolved one is not touched.
        b.notify_as(
            &r,
            &scope(Some("J")),
            false,
            t,
            Evidence::Unproven(AlertTimes::default()),
        )
        .unwrap();
        assert_eq!(b.prove_firing(&[set("A", "K"), set("A", "J")]), 0);
        assert!(b.unproven_firing().is_empty());
    }

    fn from_record(starts_at: DateTime<Utc>, ends_at: Option<DateTime<Utc>>) -> Evidence {
        Evidence::Unproven(AlertTimes {
            starts_at: Some(starts_at),
            ends_at,
        })
    }

    #[test]
    fn a_stale_firing_notice_from_the_record_leaves_a_verified_episode_alone() {
        let r = rule(false);
        let s = scope(Some("K"));
        let started = Utc::now() - chrono::Duration::minutes(30);
        let ended = started + chrono::Duration::minutes(10);
        let mut b = Book::default();
        // Fired (proven by Prometheus), resolved, verified, targets fixed.
        b.notify_as(&r, &s, true, started, from_record(started, None))
            .unwrap();
        b.get_mut(&s).unwrap().fired = true;
        b.notify_as(&r, &s, false, ended, from_record(started, Some(ended)))
            .unwrap();
        b.get_mut(&s).unwrap().verified_at = Some(ended);
        b.fix_targets(|_| 3, |_, _| [key("a")].into());
        assert!(b.targets(&key("a")));
        // The firing notice again, delivered late to another replica: its
        // alert started before the resolution.
        let late = ended + chrono::Duration::minutes(1);
        assert_eq!(
            b.notify_as(&r, &s, true, late, from_record(started, None)),
            Err(Refusal::Stale)
        );
        let e = &b.map()[&s];
        assert!(!e.firing, "nothing is held for it");
        assert!(e.verified_at.is_some() && e.remediates());
        assert!(b.targets(&key("a")), "the remediation goes on");
        assert!(b.unproven_firing().is_empty());
        // An alert that started after the resolution is a new firing: it
        // stops the remediation, and holds nothing until it is proven.
        let again = ended + chrono::Duration::seconds(30);
        b.notify_as(&r, &s, true, late, from_record(again, None))
            .unwrap();
        let e = &b.map()[&s];
        assert!(e.firing && !e.fired, "the old firing's proof is not reused");
        assert!(!b.targets(&key("a")));
        // Proven only by ALERTS since the resolution ended: the old
        // firing's series, still within the episode TTL, prove nothing.
        assert!(b.unproven_firing().is_empty());
        assert_eq!(
            b.unproven_refiring(),
            BTreeSet::from([("A".to_string(), ended)])
        );
        let old_series = [BTreeMap::from([
            ("alertname".to_string(), "A".to_string()),
            ("kind".to_string(), "K".to_string()),
        ])];
        assert_eq!(
            b.prove_firing(&old_series),
            0,
            "#38.5: not by the old firing"
        );
        assert!(!b.map()[&s].fired);
        assert_eq!(b.prove_refiring("A", ended, &[]), 0, "nothing since");
        assert_eq!(b.prove_refiring("A", ended, &old_series), 1);
        assert!(b.map()[&s].fired && b.unproven_refiring().is_empty());
    }

    #[test]
    fn each_firing_from_the_record_needs_its_own_proof() {
        let r = rule(false);
        let s = scope(Some("K"));
        let t = Utc::now();
        let unknown = Evidence::Unproven(AlertTimes::default());
        // Seen firing by the webhook, resolved, verified.
        let mut b = Book::default();
        b.notify(&r, &s, true, t).unwrap();
        b.notify(&r, &s, false, t).unwrap();
        b.get_mut(&s).unwrap().verified_at = Some(t);
        // A firing notice from the record, without times (an older record,
        // or forged): taken, but unproven, so it holds nothing.
        b.notify_as(&r, &s, true, t, unknown).unwrap();
        let e = &b.map()[&s];
        assert!(e.firing && !e.fired && e.verified_at.is_none());
        // Proven while firing, it stays proven through a repeat and the
        // resolution that follows.
        b.get_mut(&s).unwrap().fired = true;
        b.notify_as(&r, &s, true, t, unknown).unwrap();
        assert!(b.map()[&s].fired);
        b.notify_as(&r, &s, false, t, unknown).unwrap();
        assert!(b.map()[&s].fired && !b.map()[&s].firing);
        // The webhook's own firing notice is its proof.
        b.notify(&r, &s, true, t).unwrap();
        assert!(b.map()[&s].fired);
    }
}
