use super::*;
use crate::config::AlertRule;
use crate::config::Selector;
use crate::daemon::execute::WriteLimiter;
use crate::decide::breaker::BreakerState;
use crate::decide::episodes::{MAX_EPISODES, Refusal};
use crate::metrics::{EpisodeLabels, ScopeLabels};
use crate::model::profile::HoldMark;
use crate::signals::AlertStatus;
use std::collections::BTreeMap;

use crate::model::profile::{CAPI_PAUSED, builtin};
use kube::api::DynamicObject;
use serde_json::json;

/// An engine whose executor is never driven (no workers run), so the
/// tests see exactly what the tick decides. The client points nowhere.
pub(super) fn engine(cfg: &Config, leader: bool) -> (Arc<Engine>, Arc<Store>) {
    let (e, store) = engine_unsynced(cfg, leader);
    for s in crate::daemon::watch::stream_ids(&e.deps.profiles, &cfg.namespaces) {
        store.mark_synced(&s);
    }
    (e, store)
}

/// Before the watches have listed: as right after a start.
fn engine_unsynced(cfg: &Config, leader: bool) -> (Arc<Engine>, Arc<Store>) {
    engine_of(cfg, leader, &["openstack-machine"])
}

/// An unsynced engine watching these built-in profiles, by index.
fn engine_of(cfg: &Config, leader: bool, builtins: &[&str]) -> (Arc<Engine>, Arc<Store>) {
    engine_with(
        cfg,
        leader,
        builtins.iter().map(|p| builtin(p).unwrap()).collect(),
    )
}

fn engine_with(cfg: &Config, leader: bool, profiles: Vec<Profile>) -> (Arc<Engine>, Arc<Store>) {
    let metrics = Arc::new(Metrics::new(100));
    let profiles: Arc<[Profile]> = profiles.into();
    let store = Arc::new(Store::new(
        profiles.clone(),
        crate::testkit::classifier(),
        cfg.backoff.clone(),
        metrics.clone(),
    ));
    let kc = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(kc).unwrap();
    let lead = Leadership::fixed(leader);
    let ex = Arc::new(Executor::new(
        client,
        metrics.clone(),
        Arc::new(WriteLimiter::new(10.0, 10)),
        lead.clone(),
        false,
    ));
    let deps = Deps {
        profiles,
        metrics: metrics.clone(),
        store: store.clone(),
        executor: ex,
        verifier: None,
        leader: lead,
        pause: None,
        record: None,
    };
    (Engine::new(cfg, deps), store)
}

fn osm(name: &str, failing: bool, annotations: serde_json::Value) -> DynamicObject {
    let status = if failing {
        json!({"instanceState": "BUILD", "failureReason": "CreateError", "failureMessage": "got 503 instead"})
    } else {
        json!({"instanceState": "ACTIVE"})
    };
    crate::testkit::openstack_machine(name, 1, annotations, status)
}

/// Every episode verified cleared now, as Prometheus would answer.
fn verify_all(e: &Engine) {
    let mut st = e.state.lock().unwrap();
    for scope in st.episodes.map().keys().cloned().collect::<Vec<_>>() {
        st.episodes.get_mut(&scope).unwrap().verified_at = Some(Utc::now());
    }
}

/// The queued holds, releases and remediations (notes aside: `notes`).
fn pending(e: &Engine) -> Vec<(String, &'static str)> {
    let g = e.pending.goals.lock().unwrap();
    g.queued
        .iter()
        .filter(|(_, goal)| !matches!(goal, Goal::Note(_)))
        .map(|(k, goal)| (k.name.to_string(), goal.label()))
        .collect()
}

/// The queued notes: (name, text).
fn notes(e: &Engine) -> Vec<(String, String)> {
    let g = e.pending.goals.lock().unwrap();
    g.queued
        .iter()
        .filter_map(|(k, goal)| match goal {
            Goal::Note(t) => Some((k.name.to_string(), t.clone())),
            _ => None,
        })
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
    let pace = |e: &Engine| {
        e.metrics
            .engine
            .release_pace
            .get_or_create(&ScopeLabels {
                scope: "cluster",
                domain: "cluster".into(),
            })
            .get()
    };
    e.tick().await; // opens the breaker
    e.tick().await; // holds with the breaker open
    assert!(e.report().breaker_open);
    // Probing is off: nothing leaves while the breaker is open.
    assert_eq!(pace(&e), 0.0);
    let mut holds = pending(&e);
    holds.sort();
    assert_eq!(holds, vec![("a".into(), "hold"), ("b".into(), "hold")]);
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
            .remember(&ResourceKey::new("OpenStackMachine", "ns", name), "10");
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
    held_osm_crashed(name, failing, reason, 1)
}

fn held_osm_crashed(name: &str, failing: bool, reason: &str, crash_count: u32) -> DynamicObject {
    let record = serde_json::to_string(&HoldMark {
        since: Utc::now(),
        reason: reason.into(),
        crash_count,
        value: None,
    })
    .unwrap();
    osm(
        name,
        failing,
        json!({CAPI_PAUSED: crate::model::profile::PAUSE_MARKER, crate::model::profile::HOLD_ANNOTATION: record,
               crate::model::profile::CRASH_ANNOTATION: crash_count.to_string()}),
    )
}

/// #27.1: a held resource gets remedy's note (`remedy.dev/why`) saying why
/// it is held and what it waits for; once the object carries that text no
/// note is queued again (a new state's note: tests/it/why_note.rs).
#[tokio::test]
async fn held_resources_get_a_note_only_when_their_state_changes() {
    let mut c = cfg();
    c.breaker.min_resources = 1000;
    c.breaker.cooldown = Duration::from_secs(3600);
    let (e, store) = engine(&c, true);
    let held = held_osm("h0", false, BREAKER_REASON);
    store.apply(0, &held);
    e.tick().await;
    e.tick().await;
    let queued = notes(&e);
    assert_eq!(queued.len(), 1, "{queued:?}");
    let (name, text) = &queued[0];
    assert_eq!(name, "h0");
    assert!(
        text.starts_with("held by remedy: the outage breaker of failure domain cluster opened; waits for the outage breaker of cluster to close"),
        "{text}"
    );
    // The note was written (as the executor would): nothing more queued.
    e.pending.cancel(|_, _| true);
    let mut noted = held.clone();
    noted
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(crate::model::profile::WHY_ANNOTATION.into(), text.clone());
    noted.metadata.resource_version = Some("2".into());
    store.apply(0, &noted);
    for _ in 0..3 {
        e.tick().await;
    }
    assert!(notes(&e).is_empty(), "{:?}", notes(&e));
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
    for s in crate::daemon::watch::stream_ids(&e.deps.profiles, &[]) {
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
    verify_all(&e);
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

/// `remedy_releases_total` is "held resources released": a remediation
/// is counted by its actions, not as a release.
#[tokio::test]
async fn remedy_releases_total_counts_releases_not_remediations() {
    let releases = |e: &Engine| {
        e.metrics
            .engine
            .releases
            .get_or_create(&crate::metrics::KindLabels {
                kind: "OpenStackMachine".into(),
            })
            .get()
    };
    let mut c = cfg();
    c.breaker.min_resources = 1000;
    let (e, store) = engine(&c, true);
    store.apply(0, &osm("a", true, json!({})));
    e.handle(&alert(AlertStatus::Firing));
    e.handle(&alert(AlertStatus::Resolved));
    verify_all(&e);
    e.tick().await;
    assert_eq!(pending(&e), vec![("a".into(), "remediate")]);
    assert_eq!(releases(&e), 0, "a remediation counted as a release");

    // A breaker hold released once the breaker has closed is one.
    let (e, store) = engine(&releasing_cfg(), true);
    store.apply(0, &held_osm("h", false, BREAKER_REASON));
    for i in 0..20 {
        store.apply(0, &osm(&format!("ok{i}"), false, json!({})));
    }
    tick_until_queued(&e, 1).await;
    assert_eq!(pending(&e), vec![("h".into(), "release")]);
    assert_eq!(releases(&e), 1);
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
            .signals
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
    let record = serde_json::to_string(&HoldMark {
        since: Utc::now(),
        reason: "alert:CloudAPIDegraded".into(),
        crash_count: 1,
        value: None,
    })
    .unwrap();
    let mut held = osm(
        "a",
        true,
        json!({CAPI_PAUSED: crate::model::profile::PAUSE_MARKER, crate::model::profile::HOLD_ANNOTATION: record}),
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
        Deps {
            profiles: plain.deps.profiles.clone(),
            metrics: metrics.clone(),
            store,
            executor: plain.deps.executor.clone(),
            verifier: Some(verifier),
            leader: Leadership::fixed(true),
            pause: None,
            record: None,
        },
    );
    let errors = || {
        metrics
            .signals
            .queries
            .get_or_create(&crate::metrics::SignalLabels {
                target: crate::metrics::values::SignalTarget::Prometheus,
                result: crate::metrics::values::SignalResult::Error,
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
        .signals
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
    assert_eq!(p.cancel(|_, g| *g == Goal::Remediate).len(), 1);
    assert_eq!(p.len(), 0);
}

/// A breaker that closes at once: held resources are released on the
/// next ticks, lowest crash count first.
fn releasing_cfg() -> Config {
    let mut c = cfg();
    c.breaker.cooldown = Duration::ZERO;
    c.backoff.base = Duration::ZERO;
    c
}

async fn tick_until_queued(e: &Engine, n: usize) {
    for _ in 0..5 {
        if pending(e).len() >= n {
            return;
        }
        e.tick().await;
    }
    panic!(
        "never queued {n}: {:?}, {:?}",
        pending(e),
        e.report().waiting
    );
}

#[tokio::test]
async fn releases_leave_the_queue_in_decides_order_not_key_order() {
    let (e, store) = engine(&releasing_cfg(), true);
    // Names in the opposite order of their crash counts.
    for (name, crashes) in [("a", 5), ("b", 3), ("c", 1)] {
        store.apply(0, &held_osm_crashed(name, false, BREAKER_REASON, crashes));
    }
    for i in 0..20 {
        store.apply(0, &osm(&format!("ok{i}"), false, json!({})));
    }
    tick_until_queued(&e, 3).await;
    // More goals than a single worker takes at once: the order survives
    // the queue.
    let taken: Vec<String> = std::iter::from_fn(|| e.pending.take())
        .map(|(k, g)| format!("{} {}", k.name, g.label()))
        .collect();
    assert_eq!(taken, ["c release", "b release", "a release"]);
}

#[tokio::test]
async fn a_goal_refused_while_another_runs_is_planned_once_that_one_finishes() {
    let (e, store) = engine(&cfg(), true);
    store.apply(0, &osm("a", true, json!({})));
    store.apply(0, &osm("b", true, json!({})));
    let a = ResourceKey::new("OpenStackMachine", "ns", "a");
    // A goal for `a` is running (e.g. still publishing its Event).
    assert!(e.pending.offer(a.clone(), Goal::Release));
    e.pending.take();
    e.tick().await; // opens the breaker
    e.tick().await; // holds b; a is busy
    assert_eq!(pending(&e), vec![("b".into(), "hold")]);
    e.pending.finish(&a);
    e.tick().await;
    assert!(
        pending(&e).contains(&("a".into(), "hold")),
        "a is planned once its running goal is done: {:?}",
        pending(&e)
    );
}

#[tokio::test]
async fn an_opening_breaker_cancels_queued_releases() {
    let (e, store) = engine(&releasing_cfg(), true);
    for i in 0..3 {
        store.apply(0, &held_osm(&format!("h{i}"), false, BREAKER_REASON));
    }
    for i in 0..7 {
        store.apply(0, &osm(&format!("ok{i}"), false, json!({})));
    }
    tick_until_queued(&e, 3).await;
    assert!(pending(&e).iter().all(|(_, g)| *g == "release"));
    // The cloud fails again before a worker took them.
    for i in 0..7 {
        let mut o = osm(&format!("ok{i}"), true, json!({}));
        o.metadata.resource_version = Some("2".into());
        store.apply(0, &o);
    }
    e.tick().await;
    assert!(e.report().breaker_open);
    let left: Vec<_> = pending(&e)
        .into_iter()
        .filter(|(_, g)| *g == "release")
        .collect();
    assert!(left.is_empty(), "queued releases cancelled: {left:?}");
}

/// Past 63 failure domains the rest share the breaker `other`: when it
/// opens, a release queued in one of those domains goes back to waiting,
/// and `explain` names that breaker, open.
#[tokio::test]
async fn an_opening_shared_breaker_cancels_the_queued_releases_of_its_domains() {
    let mut c = releasing_cfg();
    c.breaker.domain = crate::model::domains::DomainBy::Label("zone".into());
    let (e, store) = engine(&c, true);
    // 70 domains: z0..z62 have a breaker each, z63..z69 share `other`.
    {
        let mut st = e.state.lock().unwrap();
        for z in 0..63 {
            st.core.domain(&format!("z{z}"));
        }
    }
    let zoned = |mut o: DynamicObject, z: u32| {
        o.metadata.labels = Some([("zone".to_string(), format!("z{z}"))].into());
        o
    };
    store.apply(0, &zoned(held_osm("h", false, BREAKER_REASON), 69));
    for z in 0..70 {
        store.apply(0, &zoned(osm(&format!("ok{z}"), false, json!({})), z));
    }
    tick_until_queued(&e, 1).await;
    assert_eq!(pending(&e), vec![("h".into(), "release")]);
    // The cloud of z64..z68 fails before a worker took the release.
    for z in 64..69 {
        let mut o = zoned(osm(&format!("ok{z}"), true, json!({})), z);
        o.metadata.resource_version = Some("2".into());
        store.apply(0, &o);
    }
    e.tick().await;
    assert_eq!(e.report().open_domains, ["other"]);
    let left: Vec<_> = pending(&e)
        .into_iter()
        .filter(|(_, g)| *g == "release")
        .collect();
    assert!(left.is_empty(), "queued release in `other` kept: {left:?}");
    let x = e.explain("ns", "OpenStackMachine", "h").expect("h");
    assert_eq!((x.domain.as_str(), x.breaker_open), ("other", true));
}

/// `budget.per` with `max_in_flight: 1`: a release that failed in the
/// executor, or was dropped from the queue, leaves its object held and
/// frees its owner's slot at the next tick.
#[tokio::test]
async fn a_failed_or_dropped_release_frees_its_owners_slot_at_the_next_tick() {
    let mut c = releasing_cfg();
    let label = "cluster.x-k8s.io/deployment-name";
    c.budget.per = Some(crate::model::owner::PerOwner {
        label: Some(label.into()),
        field: None,
        max_in_flight: 1,
    });
    let (e, store) = engine(&c, true);
    for name in ["a", "b"] {
        let mut o = held_osm(name, false, BREAKER_REASON);
        o.metadata.labels = Some([(label.to_string(), "md-0".to_string())].into());
        store.apply(0, &o);
    }
    for i in 0..8 {
        store.apply(0, &osm(&format!("ok{i}"), false, json!({})));
    }
    tick_until_queued(&e, 1).await;
    assert_eq!(pending(&e), vec![("a".into(), "release")]);
    // The worker fails to write it (as `work` records an error).
    let (k, _) = e.pending.take().unwrap();
    {
        let mut st = e.state.lock().unwrap();
        st.planned_at_rv.remove(&k);
        st.retries.failed(&k, e.now());
    }
    e.pending.finish(&k);
    e.tick().await;
    assert_eq!(
        pending(&e),
        vec![("b".into(), "release")],
        "a waits its retry"
    );
    // b's release is dropped from the queue (as by the pause switch, an
    // opening breaker or a firing alert): b goes again at once.
    let dropped = e.pending.cancel(|_, _| true);
    e.forget_plans(&dropped);
    e.tick().await;
    assert_eq!(pending(&e), vec![("b".into(), "release")]);
}

#[tokio::test]
async fn a_failed_goal_waits_its_retry_then_is_planned_again_without_a_change() {
    let (e, store) = engine(&cfg(), true);
    store.apply(0, &osm("a", true, json!({})));
    store.apply(0, &osm("b", true, json!({})));
    e.tick().await;
    e.tick().await;
    assert_eq!(pending(&e).len(), 2);
    // Both holds fail (apiserver down): the worker records the failure.
    let now = e.now();
    for _ in 0..2 {
        let (k, _) = e.pending.take().unwrap();
        {
            let mut st = e.state.lock().unwrap();
            st.planned_at_rv.remove(&k);
            st.retries.failed(&k, now);
        }
        e.pending.finish(&k);
    }
    e.tick().await;
    assert!(pending(&e).is_empty(), "waiting its backoff");
    assert_eq!(
        e.report()
            .waiting
            .get("ns/OpenStackMachine/a")
            .map(String::as_str),
        Some("retry"),
        "{:?}",
        e.report().waiting
    );
    // Past the first delay, nothing having changed, both are planned again.
    tokio::time::sleep(crate::decide::retry::FIRST_DELAY + Duration::from_millis(100)).await;
    e.tick().await;
    assert_eq!(pending(&e).len(), 2, "{:?}", pending(&e));
}

#[tokio::test]
async fn an_adopted_hold_remediates_only_what_it_holds_never_the_rest_of_the_kind() {
    let mut c = cfg();
    c.breaker.min_resources = 1000;
    c.backoff.base = Duration::ZERO;
    let (e, store) = engine(&c, true);
    // Held for the alert by a predecessor whose episode is lost...
    store.apply(0, &held_osm("a", true, "alert:CloudAPIDegraded"));
    // ...and a machine failing elsewhere, where the alert never fired.
    let mut other = osm("b", true, json!({}));
    other.metadata.namespace = Some("other".into());
    store.apply(0, &other);
    e.tick().await;
    let adopted = e.report_episodes();
    assert_eq!(adopted.len(), 1);
    assert!(adopted[0].adopted && adopted[0].matchers.is_empty());
    // Verified cleared (as Prometheus would answer).
    verify_all(&e);
    e.tick().await;
    assert_eq!(pending(&e), vec![("a".into(), "remediate")]);
}

/// #38.9: `remedy explain` counts crashes and backoff as the engine does: a
/// count whose last failure is older than `backoff.quiet_window` is 0 and
/// waits for nothing, so explain shows no wait for a resource the engine
/// releases, and the same wait for one it keeps back.
#[tokio::test]
async fn explain_and_the_engine_agree_on_a_count_older_than_the_quiet_window() {
    let mut c = cfg();
    c.breaker.cooldown = Duration::ZERO;
    c.backoff.quiet_window = Duration::from_secs(600);
    let (e, store) = engine(&c, true);
    let held_at = |name: &str, crashes: u32, ago: i64| {
        let mut o = held_osm_crashed(name, false, BREAKER_REASON, crashes);
        let t = Utc::now() - chrono::Duration::seconds(ago);
        o.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                crate::model::profile::FAILURE_TIME_ANNOTATION.into(),
                t.to_rfc3339(),
            );
        o
    };
    // 32 min of backoff for crash 5, but its failure is 20 min old: past
    // the quiet window. 4 min for crash 2, a minute ago: 3 min to wait.
    store.apply(0, &held_at("stale", 5, 20 * 60));
    store.apply(0, &held_at("recent", 2, 60));
    for i in 0..5 {
        store.apply(0, &osm(&format!("ok{i}"), false, json!({})));
    }
    tick_until_queued(&e, 1).await;
    assert_eq!(pending(&e), vec![("stale".into(), "release")]);
    assert_eq!(
        e.report()
            .waiting
            .get("ns/OpenStackMachine/recent")
            .map(String::as_str),
        Some("backoff")
    );
    let stale = e.explain("ns", "OpenStackMachine", "stale").unwrap();
    assert_eq!(stale.crash_count, 0, "{stale:?}");
    assert_eq!(stale.backoff_remaining_seconds, 0.0, "{stale:?}");
    assert_eq!(stale.backoff_until, None);
    let recent = e.explain("ns", "OpenStackMachine", "recent").unwrap();
    assert_eq!(recent.crash_count, 2);
    assert!(
        (170.0..=180.0).contains(&recent.backoff_remaining_seconds),
        "{recent:?}"
    );
    assert_eq!(recent.waiting.as_deref(), Some("backoff"));
}

/// Notes are paced at one a second (`State::notes`); these tests look at
/// several at once.
fn unpaced_notes(e: &Engine) {
    e.state.lock().unwrap().notes = crate::decide::bucket::TokenBucket::new(1000.0, 100);
}

fn noted(mut o: DynamicObject, text: &str, rv: &str) -> DynamicObject {
    o.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(crate::model::profile::WHY_ANNOTATION.into(), text.into());
    o.metadata.resource_version = Some(rv.into());
    o
}

/// #38.8: a resource held while its scope's alert fires carries a note
/// saying so, whether the alert held it or it was held for the breaker
/// before the alert fired (its breaker note is replaced, not kept for the
/// whole alert).
#[tokio::test]
async fn a_resource_held_while_its_alert_fires_gets_the_alerts_note() {
    let mut c = cfg();
    c.breaker.min_resources = 1000; // only the alert acts
    let (e, store) = engine(&c, true);
    unpaced_notes(&e);
    let alert_note = "held by remedy while alert CloudAPIDegraded fires; waits for the alert to resolve and be verified cleared.";
    // Held by the alert.
    store.apply(0, &held_osm("a", true, "alert:CloudAPIDegraded"));
    // Held for the breaker before the alert fired, with its breaker note.
    let breaker_note = "held by remedy: the outage breaker of failure domain cluster opened; waits for the outage breaker of cluster to close. `remedy explain` gives its place in line and an estimate.";
    store.apply(
        0,
        &noted(held_osm("b", true, BREAKER_REASON), breaker_note, "2"),
    );
    e.handle(&alert(AlertStatus::Firing));
    e.tick().await;
    e.tick().await;
    assert!(pending(&e).is_empty(), "{:?}", pending(&e));
    let mut queued = notes(&e);
    queued.sort();
    assert_eq!(queued.len(), 2, "{queued:?}");
    for (name, text) in &queued {
        assert!(text.starts_with(alert_note), "{name}: {text}");
    }
    // Written: the same note is not queued again while the alert fires.
    e.pending.cancel(|_, _| true);
    store.apply(
        0,
        &noted(
            held_osm("a", true, "alert:CloudAPIDegraded"),
            &queued[0].1,
            "3",
        ),
    );
    store.apply(
        0,
        &noted(held_osm("b", true, BREAKER_REASON), &queued[1].1, "3"),
    );
    for _ in 0..3 {
        e.tick().await;
    }
    assert!(notes(&e).is_empty(), "{:?}", notes(&e));
}

/// A CAPO OpenStackServer `ns/name` owned by OpenStackMachine `owner`,
/// healthy, held by remedy for `reason`.
fn held_server(name: &str, owner: &str, reason: &str) -> DynamicObject {
    let record = serde_json::to_string(&HoldMark {
        since: Utc::now(),
        reason: reason.into(),
        crash_count: 0,
        value: None,
    })
    .unwrap();
    crate::testkit::object(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "OpenStackServer",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1",
            "ownerReferences": [{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "OpenStackMachine", "name": owner, "uid": "u1"}],
            "annotations": {CAPI_PAUSED: crate::model::profile::PAUSE_MARKER,
                crate::model::profile::HOLD_ANNOTATION: record}},
        "status": {"instanceState": "ACTIVE"}
    }))
}

/// #38.8: a resource held with its owner (`hold.with_owner`) carries a note
/// naming that owner, and the owner, which waits for it, has one too.
#[tokio::test]
async fn a_resource_held_with_its_owner_gets_a_note_naming_the_owner() {
    let mut c = cfg();
    c.breaker.min_resources = 1000;
    c.breaker.cooldown = Duration::from_secs(3600);
    let (e, store) = engine_of(&c, true, &["openstack-machine", "openstack-server"]);
    for s in crate::daemon::watch::stream_ids(&e.deps.profiles, &c.namespaces) {
        store.mark_synced(&s);
    }
    unpaced_notes(&e);
    store.apply(0, &held_osm("m0", false, BREAKER_REASON));
    store.apply(1, &held_server("s0", "m0", "with:OpenStackMachine/m0"));
    e.tick().await;
    e.tick().await;
    assert!(pending(&e).is_empty(), "{:?}", pending(&e));
    let queued: BTreeMap<String, String> = notes(&e).into_iter().collect();
    let server = queued.get("s0").expect("a note on the server");
    assert!(
        server.starts_with("held by remedy with its owner OpenStackMachine/m0; waits for its owner to be due for release"),
        "{server}"
    );
    let machine = queued.get("m0").expect("a note on its owner");
    assert!(
        machine.starts_with("held by remedy: the outage breaker of failure domain cluster opened; waits for the outage breaker of cluster to close"),
        "{machine}"
    );
}

/// #38.5: the firing notice of an alert that has resolved, taken from the
/// episode record late (an Alertmanager retry that reached another
/// replica), changes nothing: it holds nothing and cancels no remediation.
#[tokio::test]
async fn a_late_firing_notice_from_the_record_holds_nothing_and_the_remediation_goes_on() {
    use crate::decide::episodes::{AlertTimes, Evidence};
    let mut c = cfg();
    c.breaker.min_resources = 1000; // only the alert acts
    let (e, store) = engine(&c, true);
    store.apply(0, &osm("a", true, json!({})));
    let rule = c.alerts[0].clone();
    let scope = Scope::from_alert(&rule, &labels("OpenStackMachine"));
    let started = Utc::now() - chrono::Duration::minutes(30);
    let ended = started + chrono::Duration::minutes(10);
    let from_record = |ends_at| {
        Evidence::Unproven(AlertTimes {
            starts_at: Some(started),
            ends_at,
        })
    };
    e.notify(&rule, &scope, true, started, from_record(None));
    // Prometheus proves it fired; it resolves and is verified cleared.
    e.state
        .lock()
        .unwrap()
        .episodes
        .get_mut(&scope)
        .unwrap()
        .fired = true;
    e.notify(&rule, &scope, false, ended, from_record(Some(ended)));
    verify_all(&e);
    e.tick().await;
    assert_eq!(pending(&e), vec![("a".into(), "remediate")]);
    e.notify(&rule, &scope, true, Utc::now(), from_record(None));
    e.tick().await;
    assert_eq!(pending(&e), vec![("a".into(), "remediate")]);
    let eps = e.report_episodes();
    assert!(!eps[0].firing && eps[0].verified_at.is_some(), "{eps:?}");
    let stale = e
        .metrics
        .signals
        .episodes_refused
        .get_or_create(&EpisodeLabels {
            alert: "CloudAPIDegraded".into(),
            reason: "stale",
        })
        .get();
    assert_eq!(stale, 1);
}

/// #38.10: only configured alerts name a series of their own; any other
/// name (read from the episode record, which anyone allowed to write the
/// ConfigMap can fill) is counted as `other`, so a forged record adds no
/// series.
#[tokio::test]
async fn a_refusal_for_an_alert_not_configured_is_counted_as_other() {
    let (e, _) = engine(&cfg(), true);
    for i in 0..50 {
        e.refused(&format!("Forged{i}"), Refusal::InvalidScope);
    }
    e.refused("CloudAPIDegraded", Refusal::InvalidScope);
    let text = e.metrics.encode().unwrap();
    let mut series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("remedy_episodes_refused_total{"))
        .collect();
    series.sort();
    assert_eq!(
        series,
        vec![
            r#"remedy_episodes_refused_total{alert="CloudAPIDegraded",reason="invalid_scope"} 1"#,
            r#"remedy_episodes_refused_total{alert="other",reason="invalid_scope"} 50"#,
        ]
    );
}

/// #39.1: a machine its controller gave up on (failureReason set, CAPO
/// v0.14 stops there) is retried by remedy outside any outage, but only
/// once nobody has written it for `remediation.retry.quiet`; a healthy one
/// never is, and `explain` says who retries it and when.
#[tokio::test]
async fn a_machine_its_controller_gave_up_on_is_retried_once_its_controller_is_quiet() {
    let mut c = cfg();
    c.breaker.min_resources = 1000; // no outage
    let mut p = builtin("openstack-machine").unwrap();
    p.remediation.retry = Some(crate::model::profile::RetrySpec {
        quiet: Duration::from_millis(300),
    });
    let (e, store) = engine_with(&c, true, vec![p]);
    for s in crate::daemon::watch::stream_ids(&e.deps.profiles, &c.namespaces) {
        store.mark_synced(&s);
    }
    store.apply(0, &osm("a", true, json!({})));
    store.apply(0, &osm("b", false, json!({})));
    e.tick().await;
    assert!(pending(&e).is_empty(), "its controller wrote it just now");
    let x = e.explain("ns", "OpenStackMachine", "a").expect("explained");
    let who = x.retried_by.expect("who retries it");
    assert!(who.starts_with("remedy, at "), "{who}");
    let healthy = e.explain("ns", "OpenStackMachine", "b").expect("explained");
    assert_eq!(healthy.retried_by, None);
    tokio::time::sleep(Duration::from_millis(400)).await;
    e.tick().await;
    assert_eq!(pending(&e), vec![("a".into(), "retry")]);
    let g = e.pending.goals.lock().unwrap();
    let Some((_, Goal::Retry(mark))) = g.queued.iter().find(|(k, _)| k.name.as_ref() == "a") else {
        panic!("no retry queued: {:?}", g.queued);
    };
    assert_eq!(mark.crash_count, 1);
    assert!(
        mark.note.starts_with("retried by remedy at "),
        "{}",
        mark.note
    );
    assert!(mark.note.contains("(attempt 1)"), "{}", mark.note);
}

/// An OpenStackServer in ERROR after a failed create, owned by its
/// OpenStackMachine.
fn server_in_error(name: &str, owner: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "OpenStackServer",
        "metadata": {
            "name": name, "namespace": "ns", "resourceVersion": "1",
            "ownerReferences": [{
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "OpenStackMachine", "name": owner, "uid": "u-1",
            }],
        },
        "spec": {"availabilityZone": "az1"},
        "status": {
            "instanceState": "ERROR",
            "conditions": [{"type": "InstanceReady", "status": "False", "reason": "InstanceCreateFailed",
                "message": "error creating Openstack instance: 503", "lastTransitionTime": "2026-12-07T00:00:00Z"}],
        },
    }))
    .unwrap()
}

/// #39 (the v0.15 edge): a machine whose server still fails is not retried
/// before its server is (CAPO v0.15 copies the server's ERROR back into the
/// machine, and each early retry only doubles the machine's backoff): the
/// server goes first, the machine once its server no longer fails.
#[tokio::test]
async fn a_machine_is_retried_only_after_its_failing_server() {
    let mut c = cfg();
    c.breaker.min_resources = 1000; // no outage
    let quiet = crate::model::profile::RetrySpec {
        quiet: Duration::from_millis(300),
    };
    let mut m = builtin("openstack-machine").unwrap();
    m.remediation.retry = Some(quiet.clone());
    let mut s = builtin("openstack-server").unwrap();
    s.remediation.retry = Some(quiet);
    let (e, store) = engine_with(&c, true, vec![m, s]);
    for s in crate::daemon::watch::stream_ids(&e.deps.profiles, &c.namespaces) {
        store.mark_synced(&s);
    }
    store.apply(0, &osm("a", true, json!({})));
    store.apply(1, &server_in_error("a", "a"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    e.tick().await;
    let retried: Vec<_> = e
        .pending
        .goals
        .lock()
        .unwrap()
        .queued
        .iter()
        .filter(|(_, g)| matches!(g, Goal::Retry(_)))
        .map(|(k, _)| k.kind.to_string())
        .collect();
    assert_eq!(retried, ["OpenStackServer"], "the server first");
    // The server builds again (its failure gone): the machine's turn.
    e.pending.goals.lock().unwrap().queued.clear();
    let mut healthy = server_in_error("a", "a");
    healthy.data["status"] = json!({"instanceState": "BUILD"});
    healthy.metadata.resource_version = Some("2".into());
    store.apply(1, &healthy);
    e.tick().await;
    assert_eq!(pending(&e), vec![("a".into(), "retry")]);
    let g = e.pending.goals.lock().unwrap();
    assert!(
        g.queued
            .iter()
            .any(|(k, g)| k.kind.as_ref() == "OpenStackMachine" && matches!(g, Goal::Retry(_))),
        "{:?}",
        g.queued
    );
}

/// A CAPO OpenStackServer `ns/name`, unpaused: `None` new (no status
/// yet), `Some(true)` in ERROR from a 503 on create, `Some(false)` ACTIVE.
fn server(name: &str, failed: Option<bool>) -> DynamicObject {
    let status = match failed {
        None => json!({}),
        Some(true) => json!({"instanceState": "ERROR", "conditions": [{"type": "InstanceReady",
            "status": "False", "reason": "InstanceCreateFailed",
            "message": "Expected HTTP response code [202] when accessing [POST http://nova/servers], but got 503 instead"}]}),
        Some(false) => json!({"instanceID": format!("id-{name}"), "instanceState": "ACTIVE"}),
    };
    crate::testkit::object(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "OpenStackServer",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1",
            "creationTimestamp": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)},
        "spec": {"availabilityZone": "az2"},
        "status": status
    }))
}

/// #39: while a breaker is open, a new server (no `/status/instanceID`,
/// `hold.new_until`) is held as soon as it is seen, not at the next tick:
/// CAPO main makes its create within about 100 ms and retries a failed one
/// from 5 ms, doubling. The store wakes the engine; the early round holds it
/// with reason `breaker-new`. A healthy server is not held, and nothing
/// wakes the engine early while the breakers are closed.
#[tokio::test]
async fn a_new_server_is_held_by_an_early_round_while_its_breaker_is_open() {
    let (e, store) = engine_of(&cfg(), true, &["openstack-server"]);
    for s in crate::daemon::watch::stream_ids(&e.deps.profiles, &cfg().namespaces) {
        store.mark_synced(&s);
    }
    store.apply(0, &server("ok", Some(false)));
    store.apply(0, &server("new0", None));
    e.tick().await;
    assert!(!e.wants_early(), "closed: ticks only");
    assert!(pending(&e).is_empty(), "{:?}", pending(&e));
    for i in 0..3 {
        store.apply(0, &server(&format!("bad{i}"), Some(true)));
    }
    e.tick().await; // opens the breaker
    e.tick().await; // holds the failed ones
    assert!(e.report().breaker_open);
    assert!(e.wants_early());
    let queued = |e: &Engine| {
        let mut q = pending(e);
        q.sort();
        q
    };
    // The new server already there is held by the tick, as the failed.
    let before = queued(&e);
    assert_eq!(before.len(), 4, "{before:?}");
    assert!(before.contains(&("new0".into(), "hold")), "{before:?}");
    // The store wakes the engine for a version remedy did not write.
    let _ = tokio::time::timeout(Duration::from_millis(10), store.changed()).await;
    store.apply(0, &server("new1", None));
    tokio::time::timeout(Duration::from_secs(1), store.changed())
        .await
        .expect("a new object wakes the engine");
    e.early_round();
    let after = queued(&e);
    assert!(after.contains(&("new1".into(), "hold")), "{after:?}");
    assert!(!after.iter().any(|(n, _)| n == "ok"), "{after:?}");
    let goals = e.pending.goals.lock().unwrap();
    let reason = goals.queued.iter().find_map(|(k, g)| match g {
        Goal::Hold(h) if &*k.name == "new1" => Some(h.reason.clone()),
        _ => None,
    });
    assert_eq!(reason.as_deref(), Some(crate::decide::NEW_REASON));
}

/// A tick's round reads the store after its signal calls, which may each
/// wait up to `signals.timeout` (an unreachable Prometheus): its clocks are
/// those of the round, so a breaker opened by a failure that came during
/// the calls dates from after it. With the clocks of the tick's start, a
/// resource made before the failure read as one that appeared while the
/// breaker was open and was held as new (tests/it/node_capi.rs, CI).
#[tokio::test]
async fn a_breaker_opened_after_slow_signal_calls_dates_from_the_round() {
    let mut c = cfg();
    // Accepts connections and never answers: each query waits its timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    c.signals.prometheus_url = Some(format!("http://{}", silent.local_addr().unwrap()));
    c.signals.timeout = Duration::from_millis(600);
    let metrics = Arc::new(Metrics::new(10));
    let verifier = Arc::new(Verifier::new(&c.signals, metrics.clone()).unwrap());
    let (plain, store) = engine(&c, true);
    let e = Arc::new(Engine::new(
        &c,
        Deps {
            profiles: plain.deps.profiles.clone(),
            metrics,
            store: store.clone(),
            executor: plain.deps.executor.clone(),
            verifier: Some(verifier),
            leader: Leadership::fixed(true),
            pause: None,
            record: None,
        },
    ));
    let ticking = tokio::spawn({
        let e = e.clone();
        async move { e.tick().await }
    });
    // The tick is in its recovery query now.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!ticking.is_finished(), "the query waits its timeout");
    for n in ["a", "b", "c"] {
        store.apply(0, &osm(n, true, json!({})));
    }
    let failed_at = e.now();
    ticking.await.unwrap();
    let st = e.state.locked();
    let since: Vec<Duration> = st
        .core
        .breakers()
        .states()
        .filter_map(|(_, s)| match s {
            BreakerState::Open { since, .. } => Some(since),
            _ => None,
        })
        .collect();
    assert_eq!(since.len(), 1, "the failures open the breaker");
    assert!(
        since[0] >= failed_at,
        "opened at {:?}, the failures came at {failed_at:?}",
        since[0]
    );
}
