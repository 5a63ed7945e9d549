//! Rebuilds alert episodes from what Prometheus remembers, after a restart
//! or a leader change: episodes live only in memory, and Alertmanager never
//! resends a resolved notification it delivered once. Pure: the answer and
//! the current episodes in, the episodes to write out.
//!
//! A recovered episode is either firing (so holds resume at once) or
//! resolved and *unverified*: it proves nothing by itself, the normal
//! verification decides whether anything is remediated.

use crate::config::AlertRule;
use crate::decide::episodes::Episode;
use crate::model::scope::Scope;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A recovered firing episode is asked about again this often. Only a
/// webhook takes it over; without one (webhook not configured, or the
/// resolved notification went elsewhere) nothing else would end it, and
/// its holds would stay forever.
pub const REFRESH: Duration = Duration::from_secs(60);

/// Pause between failed attempts: an unreachable Prometheus (each query
/// waiting for `signals.timeout`) must not slow every decision pass.
pub const RETRY: Duration = Duration::from_secs(30);

/// Whether to query again: some firing episode came from Prometheus and
/// the last recovery is `REFRESH` old.
pub fn needs_refresh(existing: &BTreeMap<Scope, Episode>, since_last: Duration) -> bool {
    since_last >= REFRESH && existing.values().any(|e| e.from_prometheus && e.firing)
}

/// When to recover: at start, on becoming leader (a new leader may have
/// missed notifications the old one got) and to refresh recovered firing
/// episodes; a failed attempt waits `RETRY`. Times are on the engine's
/// monotonic clock.
#[derive(Clone, Debug)]
pub struct Schedule {
    due: bool,
    was_leader: bool,
    last_ok: Option<Duration>,
    last_failed: Option<Duration>,
}

impl Default for Schedule {
    fn default() -> Self {
        Self {
            due: true,
            was_leader: false,
            last_ok: None,
            last_failed: None,
        }
    }
}

impl Schedule {
    /// Whether to query at `now`; `refresh` tells, given the time since the
    /// last success, whether recovered episodes want asking about again.
    pub fn should_run(
        &mut self,
        now: Duration,
        leader: bool,
        refresh: impl FnOnce(Duration) -> bool,
    ) -> bool {
        if leader && !self.was_leader {
            self.due = true;
        }
        self.was_leader = leader;
        if self
            .last_ok
            .is_some_and(|at| refresh(now.saturating_sub(at)))
        {
            self.due = true;
        }
        let waiting = self
            .last_failed
            .is_some_and(|at| now.saturating_sub(at) < RETRY);
        self.due && !waiting
    }

    pub fn succeeded(&mut self, now: Duration) {
        self.due = false;
        self.last_ok = Some(now);
    }

    pub fn failed(&mut self, now: Duration) {
        self.last_failed = Some(now);
    }

    /// The episodes came from the episode record, for this leadership term
    /// (`leader`): Prometheus is the fallback, not asked.
    pub fn covered(&mut self, leader: bool) {
        self.was_leader = leader;
        self.due = false;
    }

    /// Nothing to recover from (no Prometheus, no alerts configured).
    pub fn not_needed(&mut self) {
        self.due = false;
    }
}

/// What Prometheus answered: label sets (without `__name__`/`alertstate`)
/// of the configured alerts firing now, and of those that fired at any time
/// within the episode TTL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Answer {
    pub firing_now: Vec<BTreeMap<String, String>>,
    pub fired_within: Vec<BTreeMap<String, String>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recovered {
    /// Episodes to insert or overwrite, firing ones first.
    pub write: Vec<(Scope, Episode)>,
    /// Scopes already owned by a webhook episode: left as they are.
    pub kept_webhook: usize,
    /// New scopes left out to stay within the episode bound.
    pub dropped: usize,
}

impl Recovered {
    pub fn firing(&self) -> impl Iterator<Item = &Scope> {
        self.write.iter().filter(|(_, e)| e.firing).map(|(s, _)| s)
    }
}

/// Decides the episodes an answer recovers. A webhook episode always wins
/// (the notification is newer than any query). An episode from an earlier
/// recovery is rewritten only when its state changed, so a verification in
/// progress is not restarted; one that no longer fires becomes resolved and
/// unverified. At most `max` episodes exist afterwards; firing scopes are
/// taken first, since missing one would miss holds.
pub fn recover(
    rules: &[AlertRule],
    answer: &Answer,
    existing: &BTreeMap<Scope, Episode>,
    now: DateTime<Utc>,
    max: usize,
) -> Recovered {
    let scopes = |sets: &[BTreeMap<String, String>]| -> BTreeSet<Scope> {
        sets.iter()
            .filter_map(|labels| {
                let name = labels.get("alertname")?;
                let rule = rules.iter().find(|r| &r.alertname == name)?;
                Some(Scope::from_alert(rule, labels))
            })
            .collect()
    };
    let firing = scopes(&answer.firing_now);
    let resolved: BTreeSet<Scope> = scopes(&answer.fired_within)
        .into_iter()
        .filter(|s| !firing.contains(s))
        .collect();
    // Earlier recoveries' firing episodes Prometheus no longer reports as
    // firing: resolved now, to be verified like any other.
    let stale: Vec<Scope> = existing
        .iter()
        .filter(|(s, e)| {
            e.from_prometheus && e.firing && !firing.contains(*s) && !resolved.contains(*s)
        })
        .map(|(s, _)| s.clone())
        .collect();

    let mut out = Recovered::default();
    let mut room = max.saturating_sub(existing.len());
    let wanted = firing
        .into_iter()
        .map(|s| (s, true))
        .chain(resolved.into_iter().map(|s| (s, false)))
        .chain(stale.into_iter().map(|s| (s, false)));
    for (scope, want_firing) in wanted {
        match existing.get(&scope) {
            Some(e) if !e.from_prometheus => {
                out.kept_webhook += 1;
                continue;
            }
            Some(e) if e.firing == want_firing => continue,
            Some(_) => {}
            None if room == 0 => {
                out.dropped += 1;
                continue;
            }
            None => room -= 1,
        }
        // Resolved: the settle time runs from now, as after a webhook.
        let mut ep = Episode::new(&scope, want_firing, now);
        ep.from_prometheus = true;
        // Prometheus' ALERTS history is the evidence that it fired.
        ep.fired = true;
        out.write.push((scope, ep));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_runs_at_start_on_leadership_to_refresh_and_waits_after_a_failure() {
        let s = |secs| Duration::from_secs(secs);
        let mut sch = Schedule::default();
        assert!(sch.should_run(s(0), false, |_| false), "due at start");
        sch.failed(s(0));
        assert!(!sch.should_run(s(29), false, |_| false), "waits RETRY");
        assert!(sch.should_run(s(30), false, |_| false));
        sch.succeeded(s(30));
        assert!(
            !sch.should_run(s(31), false, |_| false),
            "done until needed"
        );
        assert!(sch.should_run(s(32), true, |_| false), "became leader");
        sch.succeeded(s(32));
        assert!(
            !sch.should_run(s(33), true, |_| false),
            "still leader: not again"
        );
        assert!(!sch.should_run(s(40), true, |since| since >= s(60)));
        assert!(
            sch.should_run(s(92), true, |since| since >= s(60)),
            "refresh"
        );
        sch.not_needed();
        assert!(!sch.should_run(s(93), true, |_| false));
    }
    use crate::config::Selector;

    fn rules() -> Vec<AlertRule> {
        ["A", "B"]
            .iter()
            .map(|n| AlertRule {
                alertname: (*n).into(),
                select: Selector {
                    kind_label: Some("kind".into()),
                    ..Selector::default()
                },
                verify_query: None,
                allow_cluster_wide: false,
                max_resources: 200,
            })
            .collect()
    }

    fn l(alert: &str, kind: &str) -> BTreeMap<String, String> {
        [
            ("alertname", alert),
            ("kind", kind),
            ("severity", "critical"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn scope(alert: &str, kind: &str) -> Scope {
        let r = rules().into_iter().find(|r| r.alertname == alert).unwrap();
        Scope::from_alert(&r, &l(alert, kind))
    }

    fn ep(alert: &str, firing: bool, from_prometheus: bool) -> Episode {
        let mut e = Episode::new(
            &Scope::recovered(alert, "K"),
            firing,
            DateTime::<Utc>::MIN_UTC,
        );
        e.matchers = BTreeMap::new();
        e.verified_at = Some(DateTime::<Utc>::MIN_UTC);
        e.from_prometheus = from_prometheus;
        e
    }

    fn states(p: &Recovered) -> Vec<(String, String, bool)> {
        p.write
            .iter()
            .map(|(s, e)| {
                (
                    s.alertname.clone(),
                    s.kind.clone().unwrap_or_default(),
                    e.firing,
                )
            })
            .collect()
    }

    #[test]
    fn firing_now_fires_and_fired_before_is_resolved_unverified() {
        let now = Utc::now();
        let answer = Answer {
            firing_now: vec![l("A", "OpenStackMachine")],
            fired_within: vec![l("A", "OpenStackMachine"), l("A", "BottlerocketShadow")],
        };
        let p = recover(&rules(), &answer, &BTreeMap::new(), now, 10);
        assert_eq!(
            states(&p),
            vec![
                ("A".into(), "OpenStackMachine".into(), true),
                ("A".into(), "BottlerocketShadow".into(), false)
            ]
        );
        for (s, e) in &p.write {
            assert_eq!(e.changed_at, now, "settle runs from now");
            assert_eq!(e.verified_at, None, "never verified by recovery");
            assert!(e.from_prometheus);
            assert_eq!(e.matchers, s.matchers);
            assert_eq!(
                s.matchers.get("kind").map(String::as_str),
                s.kind.as_deref()
            );
        }
        assert_eq!(p.firing().count(), 1);
    }

    #[test]
    fn label_sets_of_one_scope_make_one_episode_and_unknown_alerts_none() {
        let mut warning = l("A", "K");
        warning.insert("severity".into(), "warning".into());
        let mut nameless = l("A", "K");
        nameless.remove("alertname");
        let answer = Answer {
            firing_now: vec![],
            fired_within: vec![l("A", "K"), warning, l("Other", "K"), nameless],
        };
        let p = recover(&rules(), &answer, &BTreeMap::new(), Utc::now(), 10);
        assert_eq!(states(&p), vec![("A".into(), "K".into(), false)]);
    }

    #[test]
    fn webhook_episodes_win() {
        let existing: BTreeMap<Scope, Episode> = [
            (scope("A", "K"), ep("A", false, false)),
            (scope("B", "K"), ep("B", true, false)),
        ]
        .into();
        let answer = Answer {
            firing_now: vec![l("A", "K")],
            fired_within: vec![l("A", "K"), l("B", "K")],
        };
        let p = recover(&rules(), &answer, &existing, Utc::now(), 10);
        assert!(p.write.is_empty(), "{p:?}");
        assert_eq!(p.kept_webhook, 2);
    }

    #[test]
    fn a_second_recovery_keeps_progress_and_resolves_what_stopped_firing() {
        let existing: BTreeMap<Scope, Episode> = [
            // Verified already, still only in the TTL set: untouched.
            (scope("A", "K"), ep("A", false, true)),
            // Fired at the first recovery, not any more.
            (scope("A", "L"), ep("A", true, true)),
            // Resolved at the first recovery, firing again.
            (scope("B", "K"), ep("B", false, true)),
        ]
        .into();
        let answer = Answer {
            firing_now: vec![l("B", "K")],
            fired_within: vec![l("A", "K"), l("A", "L"), l("B", "K")],
        };
        let p = recover(&rules(), &answer, &existing, Utc::now(), 10);
        assert_eq!(
            states(&p),
            vec![
                ("B".into(), "K".into(), true),
                ("A".into(), "L".into(), false)
            ]
        );
        assert!(p.write.iter().all(|(_, e)| e.verified_at.is_none()));
    }

    #[test]
    fn bounded_with_firing_first() {
        let existing: BTreeMap<Scope, Episode> = [(scope("B", "X"), ep("B", false, false))].into();
        let answer = Answer {
            firing_now: vec![l("B", "F")],
            fired_within: (0..5).map(|i| l("A", &format!("K{i}"))).collect(),
        };
        let p = recover(&rules(), &answer, &existing, Utc::now(), 3);
        assert_eq!(p.write.len(), 2, "1 existing + 2 new = the bound of 3");
        assert!(p.write[0].1.firing);
        assert_eq!(p.dropped, 4);
        let none = recover(&rules(), &answer, &existing, Utc::now(), 1);
        assert!(none.write.is_empty());
        assert_eq!(none.dropped, 6);
    }

    #[test]
    fn only_recovered_firing_episodes_are_refreshed_and_not_too_often() {
        let webhook: BTreeMap<Scope, Episode> = [(scope("A", "K"), ep("A", true, false))].into();
        let resolved: BTreeMap<Scope, Episode> = [(scope("A", "K"), ep("A", false, true))].into();
        let firing: BTreeMap<Scope, Episode> = [(scope("A", "K"), ep("A", true, true))].into();
        let hour = Duration::from_secs(3600);
        assert!(!needs_refresh(&BTreeMap::new(), hour));
        assert!(!needs_refresh(&webhook, hour));
        assert!(!needs_refresh(&resolved, hour));
        assert!(needs_refresh(&firing, REFRESH));
        assert!(!needs_refresh(&firing, REFRESH - Duration::from_millis(1)));
        // The refresh that finds it gone turns it resolved, to be verified.
        let p = recover(&rules(), &Answer::default(), &firing, Utc::now(), 10);
        assert_eq!(states(&p), vec![("A".into(), "K".into(), false)]);
    }

    #[test]
    fn an_empty_answer_creates_nothing() {
        let p = recover(
            &rules(),
            &Answer::default(),
            &BTreeMap::new(),
            Utc::now(),
            10,
        );
        assert_eq!(p, Recovered::default());
    }
}
