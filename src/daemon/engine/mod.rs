//! The decision loop. Every tick it reads the store, feeds the outage
//! breaker, turns alert episodes into goals and spends the release budget
//! (lowest crash_count first); workers carry the goals out. Followers run
//! the same loop for metrics but never enqueue a write.

use crate::config::Config;
use crate::daemon::execute::Executor;
use crate::daemon::fault::Faults;
use crate::daemon::leader::Leadership;
use crate::daemon::pause::PauseSwitch;
use crate::daemon::store::Store;
use crate::decide::episodes::Book;
pub use crate::decide::episodes::Episode;
use crate::decide::recovery;
use crate::decide::retry::Retries;
use crate::decide::{Core, CoreConfig};
use crate::metrics::Metrics;
use crate::model::backoff::BackoffPolicy;
use crate::model::profile::Profile;
use crate::model::scope::{AlertRules, Scope};
use crate::model::view::ResourceKey;
use crate::record::sync::Tracker;
use crate::remediate::step::{Goal, Step};
use crate::signals::AlertEvent;
use crate::signals::verify::Verifier;
use crate::supervise::{Heartbeat, Supervisor};
use crate::sync::LockExt;
use chrono::Utc;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::Instrument;

pub use crate::decide::BREAKER_REASON;
const WORKERS: usize = 4;
/// Early rounds (a change while a breaker is open) are at least this far
/// apart, and at least [`EARLY_SHARE`] times the last round's own time: a
/// released probe that fails is held again within tens of milliseconds on a
/// small fleet (CAPO main retries it from 5 ms, doubling), and a fleet of
/// 10,000 changing at once spends at most a tenth of a core on them.
const EARLY_GAP: Duration = Duration::from_millis(25);
const EARLY_SHARE: u32 = 10;

mod alerts;
mod explain;
mod external;
pub mod http;
mod pending;
mod record;
mod round;
mod status;

use round::Pass;

pub use explain::{Explanation, HoldView};
pub use external::Covered;
use pending::Pending;
pub use record::RecordLink;
pub use status::{STATUS_LIMIT, STATUS_MAX_LIMIT, StatusReport};

struct State {
    /// Breakers per failure domain, the budget and the release pace.
    core: Core<ResourceKey>,
    episodes: Book,
    /// resourceVersion a goal was planned from: the key is not planned again
    /// until the watch shows a newer version (the store lags our writes).
    planned_at_rv: HashMap<ResourceKey, Box<str>>,
    report: StatusReport,
    /// Where the episode record stands (leader election on).
    record: Tracker,
    /// Goals that failed, planned again after their backoff.
    retries: Retries<ResourceKey>,
    /// Episodes whose verification or proof failed, asked again after
    /// their backoff.
    verify_retries: Retries<Scope>,
    /// When firing episodes without proof were last checked (engine clock).
    firing_proof_at: Option<Duration>,
    /// Place in its domain's release order and the length of that line,
    /// as of the last tick (`explain`).
    release_order: HashMap<ResourceKey, (usize, usize)>,
    /// Paces notes (`remedy.dev/why`): a twentieth of the write pace, so
    /// a fleet's notes never crowd the apiserver or the writes that matter.
    notes: crate::decide::bucket::TokenBucket,
    /// `remedy_apiserver_throttled_total` as last seen and when it last
    /// moved (engine clock): notes wait out [`NOTE_QUIET`] after a 429.
    throttled_seen: (u64, Option<Duration>),
    /// Resets a stale write undid, about to be applied again: the worker
    /// says so in a Warning Event on the object.
    overwritten: HashMap<ResourceKey, u32>,
    /// Owners decided released or remediated while resources were still
    /// held with them (`hold.with_owner`): those go first, the owner once
    /// none is left. CAPO v0.15 copies a server's ERROR into its
    /// OpenStackMachine whenever the machine reconciles before the server
    /// is created again, so the machine must not go first.
    letting_go: HashSet<ResourceKey>,
    /// Machines with an external remediation request: what remedy does
    /// with it, as of the last round (`daemon::remediation`, `explain`).
    external: HashMap<ResourceKey, String>,
}

/// What the engine works with, built before it (`App::build`).
pub struct Deps {
    /// The profiles the store projects objects through, by index.
    pub profiles: Arc<[Profile]>,
    pub metrics: Arc<Metrics>,
    pub store: Arc<Store>,
    pub executor: Arc<Executor>,
    /// Verifies alert episodes (`signals.prometheus_url`).
    pub verifier: Option<Arc<Verifier>>,
    pub leader: Leadership,
    /// The pause switch, read at every tick (`daemon::pause`).
    pub pause: Option<Arc<PauseSwitch>>,
    /// With leader election: episodes live in the episode record, which
    /// this replica writes as `identity`.
    pub record: Option<RecordLink>,
}

/// What the engine reads from the config, once.
struct Settings {
    alerts: AlertRules,
    backoff: BackoffPolicy,
    breaker_query: Option<String>,
    settle: Duration,
    /// `signals.timeout`: also what one tick may spend verifying.
    signal_timeout: Duration,
    controller_grace: Duration,
    dry_run: bool,
    /// Watch streams whose initial list must be in before the holds on
    /// record are trusted to be complete.
    streams: Vec<String>,
}

pub struct Engine {
    deps: Deps,
    settings: Settings,
    metrics: Arc<Metrics>,
    origin: Instant,
    state: Mutex<State>,
    pending: Pending,
    /// When to rebuild episodes from Prometheus.
    recovery: Mutex<recovery::Schedule>,
    /// Readiness notes as of the last tick: /readyz reads these and never
    /// waits for a tick holding the engine's state.
    problems: Mutex<Vec<String>>,
    /// Beats at every tick and between its phases: /healthz fails when it
    /// stops.
    heartbeat: Arc<Heartbeat>,
    ticks: AtomicU64,
    /// Test-only faults (feature `test-faults`); nothing in the shipped build.
    fault: Faults,
}

impl Engine {
    pub fn new(cfg: &Config, deps: Deps) -> Arc<Self> {
        let metrics = deps.metrics.clone();
        let streams = crate::daemon::watch::stream_ids(&deps.profiles, &cfg.namespaces);
        Arc::new(Self {
            deps,
            settings: Settings {
                alerts: AlertRules::new(cfg.alerts.clone()),
                backoff: cfg.backoff.clone(),
                breaker_query: cfg.breaker.query.clone(),
                settle: cfg.signals.settle,
                signal_timeout: cfg.signals.timeout,
                controller_grace: cfg.controller_grace,
                dry_run: cfg.dry_run,
                streams,
            },
            metrics,
            origin: Instant::now(),
            state: Mutex::new(State {
                core: Core::new(CoreConfig::from_config(cfg)),
                episodes: Book::default(),
                planned_at_rv: HashMap::new(),
                report: StatusReport::default(),
                record: Tracker::default(),
                retries: Retries::default(),
                verify_retries: Retries::default(),
                firing_proof_at: None,
                release_order: HashMap::new(),
                letting_go: HashSet::new(),
                external: HashMap::new(),
                notes: crate::decide::bucket::TokenBucket::new(
                    (cfg.budget.writes_per_second / 20.0).max(0.2),
                    NOTE_BURST,
                ),
                throttled_seen: (0, None),
                overwritten: HashMap::new(),
            }),
            pending: Pending::default(),
            recovery: Mutex::new(recovery::Schedule::default()),
            problems: Mutex::new(Vec::new()),
            heartbeat: Arc::new(Heartbeat::new(stall_limit(cfg))),
            ticks: AtomicU64::new(0),
            fault: Faults::from_env(),
        })
    }

    fn paused(&self) -> bool {
        self.deps.pause.as_ref().is_some_and(|p| p.is_paused())
    }

    /// Why the pause switch keeps this replica unready (never read, or
    /// reading it is forbidden), for /readyz.
    pub fn pause_unready(&self) -> Option<String> {
        self.deps.pause.as_ref().and_then(|p| p.unready())
    }

    /// The engine loop's pulse, for /healthz.
    pub fn heartbeat(&self) -> Arc<Heartbeat> {
        self.heartbeat.clone()
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// One call to Prometheus or Alertmanager, announced to the heartbeat
    /// with its bound: [`SIGNAL_REQUESTS`] requests of `signals.timeout`.
    async fn signal<T>(&self, call: impl std::future::Future<Output = T>) -> T {
        self.heartbeat
            .waiting(self.settings.signal_timeout.saturating_mul(SIGNAL_REQUESTS));
        let out = call.await;
        self.heartbeat.beat();
        out
    }

    /// One apiserver call of the tick (pause switch, episode record), cut
    /// after [`APISERVER_WAIT`] and announced to the heartbeat: a 429 storm
    /// or a hung connection delays the tick, never fails /healthz. Cut, it
    /// changed nothing this replica knows of: the next tick reads again.
    async fn apiserver<T>(
        &self,
        what: &'static str,
        call: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        self.heartbeat.waiting(APISERVER_WAIT);
        let out = tokio::time::timeout(APISERVER_WAIT, call).await;
        self.heartbeat.beat();
        if out.is_err() {
            tracing::warn!(call = what, after = ?APISERVER_WAIT, "apiserver call cut; tried again next tick");
        }
        out.ok()
    }

    fn with_schedule<T>(&self, f: impl FnOnce(&mut recovery::Schedule) -> T) -> Option<T> {
        Some(f(&mut self.recovery.locked()))
    }

    /// One decision pass, between reading and writing the episode record.
    pub async fn tick(&self) {
        let n = self.ticks.fetch_add(1, Ordering::Relaxed) + 1;
        self.fault.at_tick(n).await;
        self.heartbeat.beat();
        // One answer for the whole tick: a follower's episodes are the
        // record's, untrusted, and must not be planned from as a leader's if
        // the Lease is won between reading the record and planning (the next
        // tick loads and re-verifies them).
        let leader = self.deps.leader.is_leader();
        if let Some(switch) = self.deps.pause.as_ref() {
            self.apiserver("read the pause switch", switch.refresh())
                .await;
        }
        self.record_in(leader).await;
        self.heartbeat.beat();
        self.decide(leader).await;
        self.heartbeat.beat();
        self.record_out(leader).await;
        self.heartbeat.beat();
        let notes = self.collect_problems();
        *self.problems.locked() = notes;
    }

    async fn decide(&self, leader: bool) {
        let wall = Utc::now();
        let now = self.now();
        let run = self
            .with_schedule(|s| {
                s.should_run(now, leader, |since| {
                    recovery::needs_refresh(self.state.locked().episodes.map(), since)
                })
            })
            .unwrap_or(false);
        // With the episode record, a follower shows the leader's episodes
        // (replaced every tick): its own recovery and verification would be
        // queries thrown away.
        let decides = leader || self.deps.record.as_ref().is_none();
        if run && decides {
            self.recover(wall).await;
        }
        if decides {
            self.prove_firing(now).await;
            self.verify(wall).await;
        }
        let external = match (&self.deps.verifier, &self.settings.breaker_query) {
            (Some(v), Some(q)) => self.signal(v.query_scalar(q)).await.ok().flatten(),
            _ => None,
        };
        // The round reads the store as it is now: on the clocks of now, not
        // of before the signal calls above (up to `signals.timeout` each),
        // or a breaker opened by a failure seen now dates from before it,
        // and what was made before the failure reads as appeared while
        // open (tests/it/node_capi.rs, Prometheus unreachable: a Machine
        // made before the failure held as `breaker-new`).
        self.round(self.now(), Utc::now(), Pass::Tick { external }, leader);
    }

    #[cfg(test)]
    fn report_episodes(&self) -> Vec<Episode> {
        self.state
            .locked()
            .episodes
            .map()
            .values()
            .cloned()
            .collect()
    }

    pub fn report(&self) -> StatusReport {
        self.state.locked().report.clone()
    }

    /// The report as /status serves it: at most `limit` entries a list.
    pub fn report_limited(&self, limit: usize) -> StatusReport {
        self.state.locked().report.limited(limit)
    }

    /// Readiness detail as of the last tick: verification problems are
    /// reported, not hidden.
    pub fn problems(&self) -> Vec<String> {
        self.problems.locked().clone()
    }

    fn collect_problems(&self) -> Vec<String> {
        let name = self.deps.record.as_ref().map(|l| l.api.name().to_string());
        let s = self.state.locked();
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
            .chain(self.deps.pause.as_ref().and_then(|p| p.problem()))
            .collect()
    }

    /// Runs the tick loop and the workers. Never ends unless a worker
    /// does: then it returns why, for the supervisor.
    pub async fn run(
        self: Arc<Self>,
        tick: Duration,
        mut events: tokio::sync::mpsc::Receiver<AlertEvent>,
    ) -> String {
        let mut workers = Supervisor::default();
        for i in 0..WORKERS {
            let me = self.clone();
            workers.spawn(format!("worker {i}"), async move { me.work().await });
        }
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut open = true;
        let mut last = Instant::now();
        let mut gap = EARLY_GAP;
        loop {
            // While a breaker is open, a change is decided on at once: CAPO
            // main makes a new server's create within about 100 ms of the
            // object and retries a failed one from 5 ms, doubling.
            let early = self.wants_early();
            tokio::select! {
                _ = interval.tick() => {
                    self.tick().await;
                    last = Instant::now();
                }
                () = self.deps.store.changed(), if early => {
                    tokio::time::sleep_until((last + gap).into()).await;
                    let started = Instant::now();
                    self.early_round();
                    last = Instant::now();
                    gap = EARLY_GAP.max(last.duration_since(started) * EARLY_SHARE);
                }
                ev = events.recv(), if open => match ev {
                    Some(ev) => self.handle(&ev),
                    // Webhook gone (not configured): keep deciding on ticks.
                    None => open = false,
                },
                end = workers.next_end() => {
                    return format!("{} ended: {}", end.task, end.cause);
                }
            }
        }
    }

    /// Whether a change is worth a round before the next tick: leading,
    /// not paused, with a breaker open proper (once it cools, nothing new
    /// is held).
    fn wants_early(&self) -> bool {
        self.deps.leader.is_leader()
            && !self.paused()
            && self.state.locked().core.breakers().any_open_proper()
    }

    /// A round between ticks: decides on the store as it is now (holds,
    /// and releases the pace allows) without sampling the breakers.
    fn early_round(&self) {
        let leader = self.deps.leader.is_leader();
        self.round(self.now(), Utc::now(), Pass::Early, leader);
    }

    async fn work(&self) {
        loop {
            let Some((key, goal)) = self.pending.take() else {
                self.pending.notify.notified().await;
                continue;
            };
            let profile = self
                .deps
                .store
                .get(&key)
                .and_then(|e| self.deps.profiles.get(e.profile).cloned());
            if let Some(profile) = profile {
                // A reset is watched for a stale write that undoes it
                // (brupop's agent): from before it is written.
                let resets = goal == Goal::Remediate && profile.has_native_counter();
                if resets {
                    self.deps.store.expect_reset(&key);
                }
                let again = self.state.locked().overwritten.remove(&key);
                if let Some(n) = again.filter(|_| goal == Goal::Remediate) {
                    self.deps.executor
                        .warn_on(
                            &profile,
                            &key,
                            "ResetOverwritten",
                            &format!(
                                "a stale status write undid remedy's reset (the old crash count and failure time came back): reset again ({n} of {})",
                                crate::decide::resets::MAX_REAPPLY
                            ),
                            "reset_counters",
                        )
                        .await;
                }
                let span = tracing::info_span!("goal", resource = %key, goal = goal.label(), trace_id = tracing::field::Empty);
                crate::daemon::telemetry::record_trace_id(&span);
                let result = self
                    .deps
                    .executor
                    .run(&profile, &key, &goal)
                    .instrument(span)
                    .await;
                // Watched only if it really wrote the reset.
                let wrote_reset = !self.settings.dry_run
                    && result.as_ref().is_ok_and(|out| {
                        out.steps
                            .iter()
                            .any(|s| matches!(s, Step::ResetCounters | Step::ClearFailure))
                    });
                if resets && !wrote_reset {
                    self.deps.store.forget_reset(&key);
                }
                match result {
                    Ok(out) => {
                        tracing::debug!(steps = ?out.steps, done = out.done.label(), gone = out.gone, "goal finished");

                        {
                            let mut st = self.state.locked();
                            st.retries.succeeded(&key);
                            if goal == Goal::Remediate {
                                st.episodes.done(&key);
                            }
                        }
                        if out.steps.contains(&Step::Unpause) {
                            self.resume_after(&profile, &key).await;
                        }
                    }
                    Err(e) if matches!(goal, Goal::Note(_)) => {
                        // A note is a courtesy: a failed one is not retried
                        // with backoff (that would change the resource's
                        // wait, and so its note); the next tick offers it
                        // again within the note pace.
                        tracing::debug!(resource = %key, error = %e, "note not written");
                    }
                    Err(e) if e.throttled() => {
                        // The apiserver's 429, past the gate's sends: no
                        // backoff of its own (it would outlast the storm
                        // by minutes, #38.16); the gate paces the next try.
                        self.state.locked().planned_at_rv.remove(&key);
                        tracing::info!(resource = %key, goal = goal.label(), "goal throttled by the apiserver; planned again behind the 429 gate");
                    }
                    Err(crate::daemon::execute::ExecError::Paused { .. }) => {
                        // Not a failure: planned again once the switch is
                        // cleared, with no backoff to serve.
                        self.state.locked().planned_at_rv.remove(&key);
                        tracing::info!(resource = %key, goal = goal.label(), "goal stopped by the pause switch");
                    }
                    Err(e) => {
                        // Planned again once its backoff has passed, from
                        // whatever the object then is: never left waiting
                        // for someone else to change it.
                        let now = self.now();
                        let attempt = {
                            let mut st = self.state.locked();
                            st.planned_at_rv.remove(&key);
                            st.retries.failed(&key, now)
                        };
                        let retry_in = attempt.not_before.saturating_sub(now);
                        tracing::warn!(error = %e, label = e.label(), failures = attempt.failures, ?retry_in, "goal failed; planned again after its backoff");
                    }
                }
            }
            self.pending.finish(&key);
        }
    }

    /// After the hold on `key` went: touch the objects its profile's
    /// `hold.resume` names, found in the store (`remediate::resume`).
    async fn resume_after(&self, profile: &Profile, key: &ResourceKey) {
        let Some(spec) = profile.hold.as_ref().and_then(|h| h.resume.as_ref()) else {
            return;
        };
        let Some(target) = self.deps.profiles.iter().find(|p| p.kind == spec.kind) else {
            return;
        };
        let mut keys = Vec::new();
        self.deps.store.for_each(|k, e| {
            if crate::remediate::resume::selects(spec, key, k, &e.view) {
                keys.push(k.clone());
            }
        });
        // A stable order for the writes.
        keys.sort();
        if !keys.is_empty() {
            tracing::info!(resource = %key, objects = keys.len(), kind = %spec.kind, "hold removed: touching what its controller would not requeue");
            self.deps.executor.resume(target, key, &keys).await;
        }
    }

    /// Forgets the plan markers of goals that were dropped before they ran,
    /// so the next tick plans them again.
    pub(super) fn forget_plans(&self, keys: &[ResourceKey]) {
        let mut st = self.state.locked();
        for k in keys {
            st.planned_at_rv.remove(k);
        }
    }
}

/// Notes that may go at once (`State::notes`): one, so notes queued while
/// the apiserver was throttling come back at their pace, not as a burst.
const NOTE_BURST: u32 = 1;

/// No notes for this long after the apiserver last answered 429: while it
/// pushes back, the writes that matter get what it allows.
const NOTE_QUIET: Duration = Duration::from_secs(30);

/// How long the engine loop may go without a beat before /healthz fails:
/// three missed ticks, beyond the longest single request inside a tick (a
/// Prometheus or Alertmanager query, bounded by `signals.timeout`). Waits
/// announced to the heartbeat add their own bound ([`Engine::signal`],
/// [`Engine::apiserver`]).
pub fn stall_limit(cfg: &Config) -> Duration {
    cfg.tick.saturating_mul(3) + cfg.signals.timeout
}

/// Requests one verifier call may send in turn: `cleared` reads the
/// external labels, ALERTS, Alertmanager and the `verify_query`.
const SIGNAL_REQUESTS: u32 = 4;

/// Longest an apiserver call of the tick may take: beyond the 429 gate's
/// longest wait (30 s, `daemon::slowdown`) and one more send.
const APISERVER_WAIT: Duration = Duration::from_secs(45);

#[cfg(test)]
mod replay;

#[cfg(test)]
mod tests;
