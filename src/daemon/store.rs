//! The in-memory store of compact views, one entry per watched object, and
//! the aggregate metrics derived from it (kept incrementally so a 100k-object
//! fleet costs O(1) per event).

use crate::daemon::authorship::{Author, OwnWrites};
use crate::decide::resets::{Counters, Resets, Undone};
use crate::metrics::{ErrorLabels, KindLabels, KindStateLabels, Metrics};
use crate::model::backoff::BackoffPolicy;
use crate::model::classify::{Classifier, Verdict};
use crate::model::profile::Profile;
use crate::model::view::{PauseState, ResourceKey, ResourceView};
use crate::sync::{LockExt, RwLockExt};
use kube::api::DynamicObject;
use std::collections::{HashMap, HashSet};
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// Index into the store's profiles.
    pub profile: usize,
    pub view: ResourceView,
    pub verdict: Verdict,
    /// [`FailureText::digest`]: the texts themselves are not kept.
    pub failure: Option<NonZeroU64>,
    /// Set when this state is remedy's own write (see [`crate::daemon::authorship`]):
    /// its failure signals predate that write and are stale until someone
    /// else writes the object.
    pub own_write: Option<Instant>,
    /// When this store last saw a version someone other than remedy wrote
    /// (the first sight after a start counts): how long its controller has
    /// been silent ([`crate::model::profile::RetrySpec::quiet`]).
    pub written_at: Instant,
}

impl Entry {
    /// Whether the failure signals count for decisions now: not while they
    /// predate remedy's last write, unless the controller has stayed silent
    /// for `grace` (then they are what the object says).
    pub fn signals_count(&self, grace: Duration) -> bool {
        self.own_write.is_none_or(|at| at.elapsed() >= grace)
    }

    /// The `state` label: a held resource counts as held whatever it failed with.
    pub fn state(&self) -> &'static str {
        if matches!(self.view.pause, PauseState::Ours { .. }) {
            "held"
        } else {
            self.verdict.state_label()
        }
    }
}

const STATES: [&str; 5] = ["healthy", "transient", "terminal", "held", "unclassifiable"];

#[derive(Default)]
struct Inner {
    entries: HashMap<ResourceKey, Entry>,
    /// (kind, state) → count.
    counts: HashMap<(Arc<str>, &'static str), i64>,
    /// Streams (kind/namespace) whose initial list completed.
    synced: HashSet<String>,
}

pub struct Store {
    profiles: Arc<[Profile]>,
    classifier: Classifier,
    backoff: BackoffPolicy,
    metrics: Arc<Metrics>,
    inner: RwLock<Inner>,
    /// Kind (per profile) and namespace strings shared by every key, instead
    /// of two allocations per object. Namespaces are few; the set is not
    /// pruned.
    kinds: Vec<Arc<str>>,
    namespaces: Mutex<HashSet<Arc<str>>>,
    own: Arc<OwnWrites>,
    /// Resets remedy wrote, watched for a stale write that undoes them
    /// (`decide::resets`); every applied version goes past them.
    resets: Mutex<Resets<ResourceKey>>,
    /// Whether `resets` watches anything: the lock is skipped when not.
    watching: AtomicBool,
    /// Undoings seen since the engine last took them.
    undone: Mutex<Vec<(ResourceKey, Undone)>>,
    /// The clock of `resets`.
    origin: Instant,
    /// Poked when a version not written by remedy is stored: while a
    /// breaker is open the engine decides on it at once (a new server is
    /// held before its first create), not at the next tick.
    changed: tokio::sync::Notify,
}

impl Store {
    pub fn new(
        profiles: Arc<[Profile]>,
        classifier: Classifier,
        backoff: BackoffPolicy,
        metrics: Arc<Metrics>,
    ) -> Self {
        for p in profiles.iter() {
            for state in STATES {
                metrics
                    .engine
                    .resources
                    .get_or_create(&KindStateLabels {
                        kind: p.kind.clone(),
                        state,
                    })
                    .set(0);
            }
            metrics
                .engine
                .transient_ratio
                .get_or_create(&KindLabels {
                    kind: p.kind.clone(),
                })
                .set(0.0);
            metrics
                .engine
                .held
                .get_or_create(&KindLabels {
                    kind: p.kind.clone(),
                })
                .set(0);
        }
        Self {
            kinds: profiles
                .iter()
                .map(|p| Arc::from(p.kind.as_str()))
                .collect(),
            namespaces: Mutex::default(),
            own: Arc::default(),
            profiles,
            classifier,
            backoff,
            metrics,
            inner: RwLock::new(Inner::default()),
            resets: Mutex::default(),
            watching: AtomicBool::new(false),
            undone: Mutex::default(),
            origin: Instant::now(),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// Resolves once a version not written by remedy has been stored since
    /// the last call resolved (one wake for any number of them).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// A reset of `key` is about to be written: watch for a stale write
    /// undoing it, from the counters the store shows now.
    pub fn expect_reset(&self, key: &ResourceKey) {
        let Some(before) = self.get(key).map(|e| counters(&e.view)) else {
            return;
        };
        let now = self.origin.elapsed();
        self.with_resets(|r| r.expect(key.clone(), before, now));
    }

    /// The reset of `key` was not written after all.
    pub fn forget_reset(&self, key: &ResourceKey) {
        self.with_resets(|r| r.forget(key));
    }

    /// Resets undone by a stale write since the last call.
    pub fn take_undone(&self) -> Vec<(ResourceKey, Undone)> {
        let now = self.origin.elapsed();
        self.with_resets(|r| r.expire(now));
        std::mem::take(&mut *self.undone.locked())
    }

    /// Changes the watched resets and keeps `watching` in step with them.
    fn with_resets(&self, f: impl FnOnce(&mut Resets<ResourceKey>)) {
        let mut r = self.resets.locked();
        f(&mut r);
        self.watching.store(!r.is_empty(), Ordering::Relaxed);
    }

    /// One version of `key` past the watched resets (`own`: remedy wrote
    /// it); an undoing is kept for the engine.
    fn watch_reset(&self, key: &ResourceKey, now_counters: Counters, own: bool) {
        if !self.watching.load(Ordering::Relaxed) {
            return;
        }
        let undone = self
            .resets
            .locked()
            .observe(key, now_counters, own, self.origin.elapsed());
        if let Some(u) = undone {
            self.undone.locked().push((key.clone(), u));
        }
    }

    /// The record of remedy's writes.
    #[cfg(test)]
    pub fn own_writes(&self) -> &Arc<OwnWrites> {
        &self.own
    }

    /// remedy is about to write `key`.
    pub fn begin_write(&self, key: &ResourceKey) {
        self.own.begin(key);
    }

    /// remedy's write to `key` ended, producing `resource_version` (`None`:
    /// it failed). If the watch delivered that version first, the entry is
    /// marked now; it was already not counted (the write was in flight).
    /// Either way the stored version is judged again: whatever arrived
    /// while the write was in flight passed for remedy's.
    pub fn end_write(&self, key: &ResourceKey, resource_version: Option<&str>) {
        self.own.end(key, resource_version);
        let mut inner = self.inner.write_locked();
        let Some(e) = inner.entries.get_mut(key) else {
            return;
        };
        match self.own.author(key, &e.view.resource_version) {
            Author::Remedy { at } => e.own_write = Some(at),
            // Someone else wrote right after remedy's write committed, and
            // that version arrived before the write's answer, so it passed
            // for remedy's own: judged again now that the write's version
            // is known (brupop's agent writing back a stale status 6 ms
            // after a reset went unnoticed, tests/it/brupop_real.rs). Or
            // remedy's write failed (409: that version came first), and
            // it would have passed for remedy's for `controller_grace`.
            Author::Other if e.own_write.is_some() => {
                e.own_write = None;
                let now_counters = counters(&e.view);
                drop(inner);
                self.watch_reset(key, now_counters, false);
            }
            Author::Other => {}
        }
    }

    pub fn key(&self, profile: usize, obj: &DynamicObject) -> Option<ResourceKey> {
        let kind = self.kinds.get(profile)?.clone();
        let name = obj.metadata.name.as_deref()?;
        let namespace = self.namespace(obj.metadata.namespace.as_deref().unwrap_or_default());
        Some(ResourceKey {
            kind,
            namespace,
            name: name.into(),
        })
    }

    fn namespace(&self, ns: &str) -> Arc<str> {
        let mut set = self.namespaces.locked();
        if let Some(a) = set.get(ns) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(ns);
        set.insert(a.clone());
        a
    }

    /// Projects, classifies and stores an object; returns its key. An
    /// object opted out (`remedy.dev/ignore`) is dropped as if deleted, and
    /// `None` is returned: a relist then forgets it too.
    pub fn apply(&self, profile: usize, obj: &DynamicObject) -> Option<ResourceKey> {
        let key = self.key(profile, obj)?;
        let p = &self.profiles[profile];
        let projection = p.project(obj);
        if projection.view.ignored {
            self.remove(&key);
            return None;
        }
        let verdict = self.classifier.classify(p, &projection);
        let now_counters = counters(&projection.view);
        let mut entry = Entry {
            profile,
            failure: projection.failure.digest(),
            view: projection.view,
            verdict,
            own_write: None,
            written_at: Instant::now(),
        };
        // Judged under the lock the entry is stored with: `end_write` judges
        // the stored entry again under it, so a version judged while a
        // write was in flight is either stored before the write's end looks
        // or judged after the write ended, never stored past it.
        let own = {
            let mut inner = self.inner.write_locked();
            entry.own_write = match self.own.author(&key, &entry.view.resource_version) {
                Author::Remedy { at } => Some(at),
                Author::Other => None,
            };
            let own = entry.own_write.is_some();
            // remedy's own write, or the same version again (a relist), is
            // no sign of its controller.
            if let Some(old) = inner.entries.get(&key)
                && (own || old.view.resource_version == entry.view.resource_version)
            {
                entry.written_at = old.written_at;
            }
            self.store_locked(&mut inner, key.clone(), entry);
            own
        };
        self.watch_reset(&key, now_counters, own);
        if !own {
            self.changed.notify_one();
        }
        Some(key)
    }

    fn store_locked(&self, inner: &mut Inner, key: ResourceKey, entry: Entry) {
        let old = inner.entries.get(&key).cloned();
        if let Some(o) = &old {
            Self::count(inner, &key.kind, o.state(), -1);
        }
        Self::count(inner, &key.kind, entry.state(), 1);
        self.count_new_failure(&key, old.as_ref(), &entry);
        self.resource_series(&key, &entry);
        inner.entries.insert(key.clone(), entry);
        self.kind_gauges(inner, &key.kind);
    }

    pub fn remove(&self, key: &ResourceKey) -> Option<Entry> {
        let mut inner = self.inner.write_locked();
        let old = inner.entries.remove(key)?;
        self.own.forget(key);
        Self::count(&mut inner, &key.kind, old.state(), -1);
        self.metrics.series.remove(key);
        self.kind_gauges(&inner, &key.kind);
        Some(old)
    }

    /// After a relist: drop entries of `kind` (in `namespace`, if given) not
    /// seen in the new list — deletes missed while the watch was down.
    pub fn retain_seen(&self, kind: &str, namespace: Option<&str>, seen: &HashSet<ResourceKey>) {
        let stale: Vec<ResourceKey> = self
            .inner
            .read_locked()
            .entries
            .keys()
            .filter(|k| k.kind.as_ref() == kind)
            .filter(|k| namespace.is_none_or(|ns| k.namespace.as_ref() == ns))
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        for k in stale {
            self.remove(&k);
        }
    }

    pub fn mark_synced(&self, stream: &str) {
        self.inner.write_locked().synced.insert(stream.to_string());
    }

    pub fn is_synced(&self, stream: &str) -> bool {
        self.inner.read_locked().synced.contains(stream)
    }

    pub fn get(&self, key: &ResourceKey) -> Option<Entry> {
        self.inner.read_locked().entries.get(key).cloned()
    }

    pub fn len(&self) -> usize {
        self.inner.read_locked().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Visits every entry under one read lock (no cloning of the fleet).
    pub fn for_each(&self, mut f: impl FnMut(&ResourceKey, &Entry)) {
        for (k, e) in &self.inner.read_locked().entries {
            f(k, e);
        }
    }

    #[cfg(test)]
    pub fn count_state(&self, kind: &str, state: &'static str) -> i64 {
        self.inner
            .read()
            .ok()
            .and_then(|i| i.counts.get(&(Arc::from(kind), state)).copied())
            .unwrap_or(0)
    }

    fn count(inner: &mut Inner, kind: &Arc<str>, state: &'static str, delta: i64) {
        *inner.counts.entry((kind.clone(), state)).or_insert(0) += delta;
    }

    fn kind_gauges(&self, inner: &Inner, kind: &Arc<str>) {
        let get = |s| inner.counts.get(&(kind.clone(), s)).copied().unwrap_or(0);
        let mut total = 0;
        for state in STATES {
            let n = get(state);
            total += n;
            self.metrics
                .engine
                .resources
                .get_or_create(&KindStateLabels {
                    kind: kind.to_string(),
                    state,
                })
                .set(n);
        }
        let kl = KindLabels {
            kind: kind.to_string(),
        };
        let ratio = if total > 0 {
            get("transient") as f64 / total as f64
        } else {
            0.0
        };
        self.metrics
            .engine
            .transient_ratio
            .get_or_create(&kl)
            .set(ratio);
        self.metrics.engine.held.get_or_create(&kl).set(get("held"));
    }

    fn resource_series(&self, key: &ResourceKey, e: &Entry) {
        let crashes = e.view.crash_count.unwrap_or(0);
        // The profile's controller rule if it names one: brupop's shadows
        // are retried after 2^n + 1 whole minutes, not 60 s·2^n, and a
        // failure time makes it wait even at crash_count 0.
        let model = self.profiles.get(e.profile).and_then(|p| p.backoff);
        let backoff = self.backoff.effective(model);
        if e.verdict.is_failing()
            || backoff.backs_off(crashes, e.view.failure_time)
            || e.state() == "held"
        {
            let delay = backoff.delay(crashes).as_secs_f64();
            self.metrics.series.set(key, i64::from(crashes), delay);
        } else {
            self.metrics.series.remove(key);
        }
    }

    /// Counts a failure once when it first appears or changes (a relist or a
    /// status update that repeats the same failure is not a new error).
    /// Nothing remedy writes counts: its own writes are skipped, and the
    /// counter and failure time it keeps in annotations (kinds without a
    /// native counter) are not part of a failure's identity. A native
    /// counter that moves (brupop's crash_count) is a new failure.
    fn count_new_failure(&self, key: &ResourceKey, old: Option<&Entry>, new: &Entry) {
        if new.own_write.is_some() {
            return;
        }
        let native = self
            .profiles
            .get(new.profile)
            .is_some_and(Profile::has_native_counter);
        let same = old.is_some_and(|o| {
            o.verdict == new.verdict
                && o.failure == new.failure
                && (!native
                    || (o.view.crash_count == new.view.crash_count
                        && o.view.failure_time == new.view.failure_time))
        });
        if same {
            return;
        }
        let (family, reason) = match &new.verdict {
            Verdict::Transient { reason } => (&self.metrics.engine.transient_errors, reason),
            Verdict::Terminal { reason, .. } => (&self.metrics.engine.terminal_errors, reason),
            _ => return,
        };
        family
            .get_or_create(&ErrorLabels {
                namespace: key.namespace.to_string(),
                kind: key.kind.to_string(),
                reason: reason.clone(),
            })
            .inc();
    }
}

/// A view's failure counters, as `decide::resets` compares them.
fn counters(view: &ResourceView) -> Counters {
    Counters {
        crash_count: view.crash_count,
        failure_time: view.failure_time,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use serde_json::json;

    fn store() -> Store {
        crate::testkit::store(&["openstack-machine"], Arc::new(Metrics::new(100)))
    }

    fn osm(rv: u64, status: serde_json::Value) -> DynamicObject {
        crate::testkit::openstack_machine("m", rv, json!({}), status)
    }

    fn errors(s: &Store, reason: &str) -> u64 {
        s.metrics
            .engine
            .transient_errors
            .get_or_create(&ErrorLabels {
                namespace: "ns".into(),
                kind: "OpenStackMachine".into(),
                reason: reason.into(),
            })
            .get()
    }

    #[test]
    fn a_repeated_failure_counts_once_and_a_changed_one_again() {
        let s = store();
        let failing = |rv, msg: &str| {
            osm(
                rv,
                json!({"failureReason": "CreateError", "failureMessage": msg, "instanceState": "BUILD",
                       "conditions": [{"type": "Ready", "status": "False", "message": format!("rv {rv}")}]}),
            )
        };
        s.apply(0, &failing(1, "got 503 instead"));
        // A relist or an unrelated status change (a condition's text) repeats it.
        s.apply(0, &failing(2, "got 503 instead"));
        s.apply(0, &failing(3, "got 503 instead"));
        assert_eq!(errors(&s, "server_error"), 1);
        s.apply(0, &failing(4, "got 502 instead"));
        assert_eq!(errors(&s, "server_error"), 2);
        assert_eq!(s.count_state("OpenStackMachine", "transient"), 1);

        let key = s.key(0, &failing(4, "")).unwrap();
        let e = s.get(&key).unwrap();
        assert!(e.failure.is_some());
        assert_eq!(&*e.view.resource_version, "4");

        s.apply(
            0,
            &osm(5, json!({"instanceState": "ACTIVE", "ready": true})),
        );
        let e = s.get(&key).unwrap();
        assert_eq!(e.failure, None);
        assert_eq!(s.count_state("OpenStackMachine", "transient"), 0);
        assert_eq!(s.count_state("OpenStackMachine", "healthy"), 1);
        // The same failure coming back after recovery is a new error.
        s.apply(0, &failing(6, "got 502 instead"));
        assert_eq!(errors(&s, "server_error"), 3);
    }

    fn with_annotations(mut o: DynamicObject, a: serde_json::Value) -> DynamicObject {
        o.metadata.annotations = serde_json::from_value(a).ok();
        o
    }

    /// A counted object (version 1) whose reset remedy is writing, and
    /// remedy's reset (version 2) seen while the write is in flight; the
    /// counters, to write back.
    fn reset_in_flight(s: &Store) -> (ResourceKey, serde_json::Value) {
        let counted = json!({"remedy.dev/crash-count": "3", "remedy.dev/failure-time": "2026-12-03T01:00:00Z"});
        let key = s
            .apply(0, &with_annotations(osm(1, json!({})), counted.clone()))
            .unwrap();
        s.expect_reset(&key);
        s.begin_write(&key);
        s.apply(0, &osm(2, json!({})));
        (key, counted)
    }

    #[test]
    fn a_stale_write_arriving_while_the_reset_is_in_flight_is_judged_when_it_ends() {
        let s = store();
        // remedy's reset commits (version 2), and someone writes the old
        // counters back (version 3); both arrive before the reset's answer.
        let (key, counted) = reset_in_flight(&s);
        s.apply(0, &with_annotations(osm(3, json!({})), counted));
        assert!(s.take_undone().is_empty(), "in flight: taken for remedy's");
        s.end_write(&key, Some("2"));
        assert_eq!(s.take_undone(), [(key.clone(), Undone::Reapply(1))]);
        assert!(s.get(&key).unwrap().own_write.is_none());
    }

    /// remedy's write fails (409: someone else wrote first), and the
    /// other writer's version arrived while it was in flight, so it passed
    /// for remedy's own: judged again when the failure is known.
    #[test]
    fn a_version_written_by_someone_else_during_a_failed_write_is_not_remedys() {
        let s = store();
        let status = json!({"failureReason": "CreateError", "failureMessage": "got 503 instead"});
        let key = s.apply(0, &osm(1, status.clone())).unwrap();
        s.begin_write(&key);
        s.apply(0, &osm(2, status));
        assert!(s.get(&key).unwrap().own_write.is_some(), "in flight");
        s.end_write(&key, None);
        let e = s.get(&key).unwrap();
        assert!(e.own_write.is_none(), "version 2 is not remedy's");
        assert!(e.signals_count(Duration::from_secs(300)));
        assert!(s.own_writes().is_empty());
    }

    /// A stale write judged while remedy's write was in flight, and stored
    /// only after the write ended (and judged its entry again): the store
    /// decides who wrote a version under the lock it stores it with, so the
    /// end of the write sees it. The test holds the watched resets' lock,
    /// which `apply` takes after judging a version (before #38.11 also
    /// before storing it), to stall it there as a preempted watch task
    /// would be.
    #[test]
    fn a_stale_write_judged_before_the_write_ends_and_stored_after_is_not_remedys() {
        let s = store();
        // remedy's reset (version 2) arrives while its write is in flight.
        let (key, counted) = reset_in_flight(&s);
        let stale = with_annotations(osm(3, json!({})), counted);
        let pause = Duration::from_millis(100);
        std::thread::scope(|scope| {
            let held = s.resets.locked();
            // The stale write (version 3) is judged while the reset is
            // in flight...
            let watch = scope.spawn(|| s.apply(0, &stale));
            std::thread::sleep(pause);
            // ...and the reset's answer (version 2) comes before it is stored.
            let answer = scope.spawn(|| s.end_write(&key, Some("2")));
            std::thread::sleep(pause);
            drop(held);
            watch.join().unwrap();
            answer.join().unwrap();
        });
        let e = s.get(&key).unwrap();
        assert_eq!(&*e.view.resource_version, "3");
        assert!(e.own_write.is_none(), "version 3 is someone else's");
        assert_eq!(s.take_undone(), [(key, Undone::Reapply(1))]);
    }

    #[test]
    fn nothing_remedy_writes_counts_as_a_failure() {
        let s = store();
        let status = json!({"failureReason": "CreateError", "failureMessage": "got 503 instead", "instanceState": "BUILD"});
        let key = s.apply(0, &osm(1, status.clone())).unwrap();
        assert_eq!(errors(&s, "server_error"), 1);
        // remedy's hold: pause, record, its own crash count and failure time.
        let hold = json!({"cluster.x-k8s.io/paused": "remedy.dev/hold", "remedy.dev/crash-count": "1",
                          "remedy.dev/failure-time": "2026-12-03T01:00:00Z"});
        s.own_writes().remember(&key, "2");
        s.apply(0, &with_annotations(osm(2, status.clone()), hold.clone()));
        assert_eq!(errors(&s, "server_error"), 1, "remedy's hold write");
        assert!(s.get(&key).unwrap().own_write.is_some());
        // Even unrecorded (a restart forgot the write), remedy's counter
        // annotations are not part of the failure.
        let again = json!({"cluster.x-k8s.io/paused": "remedy.dev/hold", "remedy.dev/crash-count": "2",
                           "remedy.dev/failure-time": "2026-12-03T01:05:00Z"});
        s.apply(0, &with_annotations(osm(3, status.clone()), again));
        assert_eq!(errors(&s, "server_error"), 1, "an unrecorded hold update");
        // remedy clears the failure on release; the provider's stale
        // condition stays, and that state is remedy's write.
        s.own_writes().remember(&key, "4");
        let stale = json!({"instanceState": "BUILD",
            "conditions": [{"type": "InstanceReady", "status": "False", "reason": "InstanceNotFound"}]});
        s.apply(0, &osm(4, stale));
        let e = s.get(&key).unwrap();
        assert!(e.own_write.is_some() && !e.signals_count(Duration::from_secs(60)));
        assert!(
            e.signals_count(Duration::ZERO),
            "after the grace they count"
        );
        let not_found = |s: &Store| {
            s.metrics
                .engine
                .terminal_errors
                .get_or_create(&ErrorLabels {
                    namespace: "ns".into(),
                    kind: "OpenStackMachine".into(),
                    reason: "not_found".into(),
                })
                .get()
        };
        assert_eq!(not_found(&s), 0, "stale signals left by remedy's write");
        // The controller retries after the release and fails again: once.
        s.apply(0, &osm(5, status.clone()));
        assert!(s.get(&key).unwrap().own_write.is_none());
        assert_eq!(errors(&s, "server_error"), 2);
        s.apply(0, &osm(6, status));
        assert_eq!(errors(&s, "server_error"), 2);
    }

    #[test]
    fn a_native_counter_that_moves_is_a_new_failure() {
        let s = crate::testkit::store(&["bottlerocket-shadow"], Arc::new(Metrics::new(100)));
        let shadow = |rv: u64, n: u32| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "brupop.bottlerocket.aws/v2", "kind": "BottlerocketShadow",
                "metadata": {"name": "b", "namespace": "ns", "resourceVersion": rv.to_string()},
                "status": {"current_state": "ErrorReset", "crash_count": n,
                           "state_transition_failure_timestamp": format!("2026-12-03T01:0{n}:00Z")},
            }))
            .unwrap()
        };
        let crash_loops = |s: &Store| {
            s.metrics
                .engine
                .transient_errors
                .get_or_create(&ErrorLabels {
                    namespace: "ns".into(),
                    kind: "BottlerocketShadow".into(),
                    reason: "crash_loop".into(),
                })
                .get()
        };
        s.apply(0, &shadow(1, 1));
        s.apply(0, &shadow(2, 1));
        assert_eq!(crash_loops(&s), 1);
        s.apply(0, &shadow(3, 2));
        assert_eq!(crash_loops(&s), 2, "brupop counted another failure");
    }

    /// #38.14: brupop waits 2 minutes after a failure time at crash_count 0
    /// too (only a null one means "never crashed"): that wait is exported.
    #[test]
    fn a_shadow_with_a_failure_time_and_crash_count_0_exports_its_wait() {
        let s = crate::testkit::store(&["bottlerocket-shadow"], Arc::new(Metrics::new(100)));
        let shadow = |name: &str, failed: Option<DateTime<Utc>>| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "brupop.bottlerocket.aws/v2", "kind": "BottlerocketShadow",
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
                "status": {"current_state": "Idle", "crash_count": 0,
                           "state_transition_failure_timestamp": failed.map(|t| t.to_rfc3339())},
            }))
            .unwrap()
        };
        let failed = Utc::now() - chrono::Duration::seconds(30);
        s.apply(0, &shadow("failed", Some(failed)));
        s.apply(0, &shadow("never", None));
        let text = s.metrics.encode().unwrap();
        let sample = |name: &str| {
            let series = format!(
                r#"remedy_resource_backoff_delay_seconds{{namespace="ns",kind="BottlerocketShadow",name="{name}"}} "#
            );
            text.lines()
                .find_map(|l| l.strip_prefix(series.as_str()))
                .map(|v| v.parse::<f64>().unwrap())
        };
        // Failure time + 120 s is when the controller proceeds: 90 s from now.
        assert_eq!(sample("failed"), Some(120.0), "{text}");
        assert_eq!(sample("never"), None, "{text}");
    }
}
