//! The decision core, one deterministic state machine shared by the daemon
//! (`engine`) and `remedy simulate`: facts about objects and the clock in,
//! goals out. It owns the outage breakers (one per failure domain), the
//! release budget and each domain's adaptive pace; it knows nothing of
//! Kubernetes, Prometheus or alert scopes, which the caller turns into
//! [`Fact`]s. Pure: the same facts at the same times give the same goals.

pub mod breaker;
pub mod breakers;
pub mod bucket;
pub mod episodes;
pub mod external;
pub mod facts;
pub mod pace;
pub mod recovery;
pub mod release;
pub mod resets;
pub mod retry;
pub mod zone_retry;

use crate::config::{BreakerConfig, BreakerHold, BudgetConfig};
use crate::decide::breaker::Sample;
use crate::decide::bucket::TokenBucket;
use crate::decide::release::{Candidate, Owners, WaitReason, plan_owned};
use crate::model::domains::DomainBy;
use breakers::Breakers;
use pace::{Answer, Pace};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;
use zone_retry::{Gate, ZoneRetries};

pub use crate::decide::breaker::BreakerState;

/// Hold reason recorded for breaker holds; alert holds record `alert:<name>`.
pub const BREAKER_REASON: &str = "breaker";
/// Hold reason of a resource held only because its domain's breaker is
/// open (`breaker.hold: domain`), not for a failure of its own.
pub const DOMAIN_REASON: &str = "breaker-domain";
/// Hold reason of a resource held before its first create call, as its
/// domain's breaker is open (`hold.new_until`): released like a breaker
/// hold, a probe like any other.
pub const NEW_REASON: &str = "breaker-new";
pub const ALERT_PREFIX: &str = "alert:";
pub use crate::model::profile::WITH_PREFIX;

/// A release whose outcome is not seen after this long (the object went
/// away, or stays silent) is forgotten without counting. One that did not
/// go (see [`Fact::busy`]) is forgotten at once.
const FLIGHT_TIMEOUT: Duration = Duration::from_secs(600);

/// A creation time is in whole seconds and a breaker opens at a tick: an
/// object this much older than the breaker's opening still appeared while
/// it was open.
const NEW_SLACK: Duration = Duration::from_secs(1);

/// Who paused an object, as far as decisions go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pause {
    No,
    /// Someone else's pause: never touched.
    Foreign,
    /// Ours, for the outage breaker.
    Breaker,
    /// Ours, before its first create while its domain's breaker is open
    /// (`hold.new_until`): released like a breaker hold, but with nothing
    /// made in the cloud it waits on nothing else's release.
    New,
    /// Ours, because its domain's breaker is open (`breaker.hold: domain`):
    /// released once the breaker closes, never as a probe.
    Domain,
    /// Ours, for a firing alert (its name).
    Alert(Box<str>),
    /// Ours, because remedy holds its owner (`hold.with_owner`).
    With,
    /// Ours, for a reason this version does not know: released like a
    /// breaker hold.
    Other,
}

impl Pause {
    pub fn ours(&self) -> bool {
        !matches!(self, Self::No | Self::Foreign)
    }

    /// From the hold mark's reason.
    pub fn from_reason(reason: Option<&str>) -> Self {
        match reason {
            Some(BREAKER_REASON) => Self::Breaker,
            Some(NEW_REASON) => Self::New,
            Some(DOMAIN_REASON) => Self::Domain,
            Some(r) => match r.strip_prefix(ALERT_PREFIX) {
                Some(alert) => Self::Alert(alert.into()),
                None if r.starts_with(WITH_PREFIX) => Self::With,
                None => Self::Other,
            },
            None => Self::Other,
        }
    }
}

/// What the object's own signals say. Only fresh signals count: those
/// that predate remedy's last write to it are `No`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failing {
    No,
    Transient,
    /// Transient, and what it failed with is throttling (a 429, a rate
    /// limit): released into it, the pace is too fast for the cloud.
    Throttled,
    /// Terminal per object, but a burst of them is an outage.
    NotFound,
}

/// One object, as of this tick (its key is passed beside it, so objects
/// that need no decision cost no key copy).
#[derive(Clone, Debug, PartialEq)]
pub struct Fact {
    /// From [`Core::domain`] or [`Tick::domain`].
    pub domain: Arc<str>,
    pub pause: Pause,
    pub failing: Failing,
    /// Someone other than remedy has written the object since remedy last
    /// did (or it stayed silent past the grace): its state is an answer.
    pub fresh: bool,
    pub deleting: bool,
    /// A goal was already planned from this version of the object.
    pub planned: bool,
    /// A goal for it is queued or running, or was planned from this
    /// version (its write may not show yet). Held by remedy and not busy,
    /// a release of it in flight did not go: its flight ends unanswered.
    pub busy: bool,
    /// Its profile says how to hold it.
    pub holdable: bool,
    /// Its release calls no cloud API (`hold.no_probe`): never a probe
    /// while its breaker is open, and no reason to wait for probes.
    pub no_probe: bool,
    /// Its controller has not made it in the cloud yet (`hold.new_until`):
    /// its next step is a create call.
    pub uncreated: bool,
    /// How long ago it was created (`metadata.creationTimestamp`), if known.
    pub age: Option<Duration>,
    pub crash_count: u32,
    pub backoff_remaining: Duration,
    /// The first firing alert whose scope selects it (`max_resources` kept).
    pub firing: Option<Box<str>>,
    /// A verified-cleared alert episode has it among its targets.
    pub verified: bool,
    /// Remediation has something to write (failure fields, counters).
    pub has_work: bool,
    /// Its controller gave up on it (`remediation.retry`: what stops the
    /// controller is set, and nobody but remedy has written it for
    /// `quiet`): remedy retries it once its backoff has passed, outside
    /// any outage.
    pub stuck: bool,
    /// Its owner under `budget.per` (`namespace/name`), if it names one.
    pub owner: Option<Arc<str>>,
    /// The owner whose hold it follows (`hold.with_owner`), as
    /// `Kind/name`, while remedy holds that owner; `None` otherwise.
    pub owner_held: Option<Box<str>>,
    /// Remedy still holds a resource that follows it (`hold.with_owner`):
    /// it is let go instead of released, and goes once none is left.
    pub followed_held: bool,
}

/// What the caller carries out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Undo our hold (and clear failure where the profile says so).
    Release,
    /// Clear failure status, reset counters, undo our hold.
    Remediate,
    /// Its controller gave up on a transient failure: record the attempt
    /// and clear what stops it, so it tries again (never held).
    Retry,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldOrder<K> {
    pub key: K,
    /// `breaker` or `alert:<name>`.
    pub reason: String,
    /// The crash count to record: one more than now.
    pub crash_count: u32,
}

/// Everything outside the objects that a tick depends on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Context {
    /// Only the leader holds and releases; followers keep breakers for metrics.
    pub leader: bool,
    /// The pause switch is set (`pause_switch`): nothing is released or
    /// remediated. Unlike a follower, a paused leader keeps its term: its
    /// breakers go on sampling, so a resume does not restart the cooldown.
    pub paused: bool,
    /// Every watch has listed: the holds on record are all known.
    pub synced: bool,
    /// Fleet-wide failing ratio (`breaker.query`), cluster domain only.
    pub external: Option<f64>,
    /// Its facts feed the breakers: every regular tick. A tick run early
    /// for a change while a breaker is open (to hold a new resource before
    /// its first call) decides without sampling, so the breakers' windows
    /// are sampled at the tick's pace, not more often where events are.
    pub sample: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decisions<K> {
    pub holds: Vec<HoldOrder<K>>,
    /// In release order (lowest crash_count first, domains taking turns).
    pub actions: Vec<(K, Action)>,
    pub waiting: Vec<(K, WaitReason)>,
    /// Held for an alert not verified cleared yet: (object, alert).
    pub settling: Vec<(K, Box<str>)>,
    /// Breakers that opened or closed: (domain, before, after).
    pub changed: Vec<(Arc<str>, BreakerState, BreakerState)>,
    /// Domains whose breaker a new leader resumed open, with its holds.
    pub resumed: Vec<(Arc<str>, usize)>,
    /// Owners due for release or remediation while a resource that follows
    /// them is still held: the caller stops holding their followers with
    /// them, which are then released first (CAPO v0.15 copies a server's
    /// ERROR into its OpenStackMachine if the machine reconciles first).
    pub letting_go: Vec<K>,
}

impl<K> Default for Decisions<K> {
    fn default() -> Self {
        Self {
            holds: Vec::new(),
            actions: Vec::new(),
            waiting: Vec::new(),
            settling: Vec::new(),
            changed: Vec::new(),
            resumed: Vec::new(),
            letting_go: Vec::new(),
        }
    }
}

/// The parameters the core runs with, straight from the daemon's config.
#[derive(Clone, Debug, PartialEq)]
pub struct CoreConfig {
    pub breaker: BreakerConfig,
    pub budget: BudgetConfig,
    /// While retries of stuck resources fail in a domain, one of them is
    /// tried per this interval (`backoff.base`; [`zone_retry`]).
    pub retry_every: Duration,
}

impl CoreConfig {
    /// The daemon config's sections the core runs with: the engine and
    /// `remedy simulate --config` both build it here.
    pub fn from_config(c: &crate::config::Config) -> Self {
        Self {
            breaker: c.breaker.clone(),
            budget: c.budget.clone(),
            retry_every: c.backoff.base,
        }
    }

    /// Releases per tick: at most the bucket's burst.
    fn max_per_tick(&self) -> usize {
        usize::try_from(self.budget.burst).unwrap_or(usize::MAX)
    }
}

#[derive(Clone, Debug)]
struct Flight {
    domain: Arc<str>,
    owner: Option<Arc<str>>,
    at: Duration,
    /// Held only with its domain (`Pause::Domain`): healthy when held, its
    /// healthy answer is none to the pace.
    with_domain: bool,
    /// A retry of a stuck resource: its answer is its domain's
    /// ([`zone_retry`]).
    retry: bool,
}

pub struct Core<K> {
    cfg: CoreConfig,
    breakers: Breakers,
    bucket: TokenBucket,
    paces: BTreeMap<Arc<str>, Pace>,
    /// Released, outcome not seen yet.
    flights: HashMap<K, Flight>,
    /// Whether this leadership term has looked at the breaker holds yet.
    resumed: bool,
    /// Outcomes seen: (ok, failed), for reports.
    outcomes: (u64, u64),
    /// Retries of stuck resources, paced per domain once one fails.
    zone_retries: ZoneRetries,
}

/// One tick being fed: [`Core::begin`], facts, then [`Tick::finish`].
pub struct Tick<'a, K> {
    core: &'a mut Core<K>,
    now: Duration,
    samples: BTreeMap<Arc<str>, Sample>,
    breaker_holds: BTreeMap<Arc<str>, usize>,
    /// Domains with resources held for a failure of their own
    /// (`Pause::Breaker`): what probes are made of.
    failed_held: BTreeSet<Arc<str>>,
    out: Decisions<K>,
    candidates: Vec<Asking<K>>,
    /// Held with their open domain (`Pause::Domain`): they wait behind
    /// every candidate, as they go only once it closes.
    domain_held: Vec<K>,
}

/// A candidate for release or remediation.
struct Asking<K> {
    candidate: Candidate<K>,
    action: Action,
    domain: Arc<str>,
    /// Its owner (`budget.per`).
    owner: Option<Arc<str>>,
    /// A resource held with it (`hold.with_owner`) is still held.
    followed_held: bool,
    /// Held only with its domain (`Pause::Domain`).
    with_domain: bool,
    /// Its release calls no cloud API (`hold.no_probe`).
    no_probe: bool,
    /// Held before its first create (`Pause::New`).
    new: bool,
}

impl<K: Clone + Ord + Hash> Core<K> {
    pub fn new(cfg: CoreConfig) -> Self {
        Self {
            breakers: Breakers::new(&cfg.breaker, cfg.breaker.domain.clone()),
            bucket: TokenBucket::from_config(&cfg.budget),
            paces: BTreeMap::new(),
            flights: HashMap::new(),
            resumed: false,
            outcomes: (0, 0),
            zone_retries: ZoneRetries::new(cfg.retry_every),
            cfg,
        }
    }

    pub fn config(&self) -> &CoreConfig {
        &self.cfg
    }

    /// The breaker (and pace) an object of domain `name` answers to: at most
    /// `domains::MAX_DOMAINS`, the rest share `other`.
    pub fn domain(&mut self, name: &str) -> Arc<str> {
        self.breakers.slot_named(name)
    }

    pub fn domain_by(&self) -> &DomainBy {
        self.breakers.by()
    }

    pub fn breakers(&self) -> &Breakers {
        &self.breakers
    }

    pub fn tokens(&self, now: Duration) -> f64 {
        self.bucket.tokens(now)
    }

    /// Takes up to `want` tokens from the budget for steps decided outside
    /// the tick (external remediation, `decide::external`): one budget for
    /// releases, retries and replacements. Returns how many it took.
    pub fn take_tokens(&mut self, now: Duration, want: usize) -> usize {
        (0..want).take_while(|_| self.bucket.try_take(now)).count()
    }

    /// How long until the budget has a token again.
    pub fn time_until_token(&self, now: Duration) -> Duration {
        self.bucket.time_until_token(now)
    }

    /// Releases per second a domain is paced at; `None` when only the
    /// budget limits it.
    pub fn pace(&self, domain: &str) -> Option<f64> {
        self.paces.get(domain).and_then(Pace::rate)
    }

    /// Releases per second `domain` may make now: the budget's refill,
    /// unless its pace is lower (probes, or nothing, while its breaker is
    /// open; a shrunk pace after failed or throttled releases).
    pub fn release_rate(&self, domain: &str) -> f64 {
        let budget = self.cfg.budget.refill_per_second;
        match self.paces.get(domain).and_then(Pace::rate) {
            Some(r) => r.min(budget),
            None => budget,
        }
    }

    /// When `domain` tries its next stuck resource while its retries fail
    /// ([`zone_retry`]); `None` when each goes by its own backoff.
    pub fn zone_retry_at(&self, domain: &str) -> Option<Duration> {
        self.zone_retries.next_try(domain)
    }

    /// Releases of `owner` (`budget.per`) whose answer is not in yet.
    pub fn in_flight(&self, owner: &str) -> usize {
        self.flights
            .values()
            .filter(|f| f.owner.as_deref() == Some(owner))
            .count()
    }

    /// Outcomes of releases seen so far: (succeeded, failed again).
    pub fn outcomes(&self) -> (u64, u64) {
        self.outcomes
    }

    pub fn begin(&mut self, now: Duration) -> Tick<'_, K> {
        Tick {
            core: self,
            now,
            samples: BTreeMap::new(),
            breaker_holds: BTreeMap::new(),
            failed_held: BTreeSet::new(),
            out: Decisions::default(),
            candidates: Vec::new(),
            domain_held: Vec::new(),
        }
    }

    /// One whole tick from a list of facts.
    pub fn tick(
        &mut self,
        now: Duration,
        ctx: Context,
        facts: impl IntoIterator<Item = (K, Fact)>,
    ) -> Decisions<K> {
        let mut t = self.begin(now);
        for (k, f) in facts {
            t.fact(&k, f);
        }
        t.finish(ctx)
    }

    fn pace_mut(&mut self, domain: &Arc<str>) -> &mut Pace {
        let cfg = &self.cfg.breaker.release;
        self.paces
            .entry(domain.clone())
            .or_insert_with(|| Pace::new(cfg))
    }
}

impl<K: Clone + Ord + Hash> Tick<'_, K> {
    /// `n` objects of `domain` that are healthy, not paused and have no
    /// release in flight: they only count towards the domain's total. (A
    /// caller may pass them as facts instead; the result is the same.)
    pub fn quiet(&mut self, domain: &Arc<str>, n: u32) {
        let s = self.samples.entry(domain.clone()).or_default();
        s.total = s.total.saturating_add(n);
    }

    /// The domain an object named `name` by `breaker.domain` answers to.
    pub fn domain(&mut self, name: &str) -> Arc<str> {
        self.core.domain(name)
    }

    pub fn domain_by(&self) -> &DomainBy {
        self.core.domain_by()
    }

    pub fn fact(&mut self, key: &K, f: Fact) {
        let core = &mut *self.core;
        let sample = self.samples.entry(f.domain.clone()).or_default();
        sample.total = sample.total.saturating_add(1);
        let transient = matches!(f.failing, Failing::Transient | Failing::Throttled);
        let not_found = f.failing == Failing::NotFound;
        // Only failures that still reconcile (and so still call the cloud)
        // feed the breaker: a paused resource makes no calls, and counting
        // it would keep the breaker open.
        if f.pause == Pause::No {
            if transient {
                sample.failing += 1;
            }
            if not_found {
                sample.not_found += 1;
            }
        }
        if matches!(f.pause, Pause::Breaker | Pause::New | Pause::Domain) {
            *self.breaker_holds.entry(f.domain.clone()).or_insert(0) += 1;
        }
        if matches!(f.pause, Pause::Breaker | Pause::New)
            && !f.no_probe
            && !self.failed_held.contains(&f.domain)
        {
            self.failed_held.insert(f.domain.clone());
        }
        // A release's answer: the object's first fresh state after it that
        // says something. Not failing while still not made in the cloud
        // (`hold.new_until`) is no answer yet: CAPO writes a condition of
        // its own before its create fails, and early rounds see it (full-
        // zone run 8: that write read as a healthy probe cooled the breaker
        // in the outage, and a new Machine went out into it).
        let unanswered = f.failing == Failing::No && f.uncreated;
        if f.fresh
            && f.pause == Pause::No
            && !unanswered
            && let Some(flight) = core.flights.remove(key)
        {
            let answer = match f.failing {
                Failing::No => Answer::Ok,
                Failing::Throttled => Answer::Throttled,
                Failing::Transient | Failing::NotFound => Answer::Failed,
            };
            // Held only with its domain, it was healthy: a healthy answer
            // says nothing of the cloud (it may make no call) and would
            // speed the failed ones behind it into an outage. A failure
            // does say something.
            if !(flight.with_domain && answer == Answer::Ok) {
                core.pace_mut(&flight.domain).outcome(answer);
            }
            if flight.retry {
                core.zone_retries
                    .answered(&flight.domain, answer == Answer::Ok, self.now);
            }
            if answer == Answer::Ok {
                core.outcomes.0 += 1;
            } else {
                core.outcomes.1 += 1;
            }
        }
        // Still held with nothing queued or running for it: its release
        // never went (dropped by the pause switch, an opening breaker or a
        // firing alert, or its write failed), so no answer will come. Its
        // owner's slot (`budget.per`) is free now, not after FLIGHT_TIMEOUT.
        if f.pause.ours() && !f.busy {
            core.flights.remove(key);
        }
        if f.deleting || f.pause == Pause::Foreign || f.planned {
            return;
        }
        let open_before = core.breakers.is_open(&f.domain);
        let in_firing = f.firing.is_some();
        let failing = transient || not_found;
        // Held with its owner: whatever else holds or would release it.
        if let Some(owner) = &f.owner_held {
            if f.holdable && !f.pause.ours() {
                self.out.holds.push(HoldOrder {
                    key: key.clone(),
                    reason: format!("{WITH_PREFIX}{owner}"),
                    // Not a failure of its own: its count stays.
                    crash_count: f.crash_count,
                });
            }
            return;
        }
        // Held with an owner no longer held: released like a breaker hold,
        // paced and budgeted, since its release is what calls the cloud.
        let action = if !f.pause.ours() {
            if failing && f.holdable && (open_before || in_firing) {
                let reason = match &f.firing {
                    Some(alert) => format!("{ALERT_PREFIX}{alert}"),
                    None => BREAKER_REASON.to_string(),
                };
                self.out.holds.push(HoldOrder {
                    key: key.clone(),
                    reason,
                    crash_count: f.crash_count.saturating_add(1),
                });
                return;
            }
            // New in a domain whose breaker is open: held before its first
            // create, which would fail like the rest. Only what appeared
            // while it is open (a scale-up, a replacement): one that was
            // being made before is its controller's call already. Only on
            // a fresh state: one just released (a probe) makes its call.
            let appeared = core.breakers.open_since(&f.domain).is_some_and(|since| {
                f.age
                    .is_some_and(|age| age <= self.now.saturating_sub(since) + NEW_SLACK)
            });
            if !failing && f.holdable && f.uncreated && f.fresh && appeared {
                self.out.holds.push(HoldOrder {
                    key: key.clone(),
                    reason: NEW_REASON.to_string(),
                    // Not a failure of its own: its count stays.
                    crash_count: f.crash_count,
                });
                return;
            }
            if !failing && f.holdable && open_before && core.cfg.breaker.hold == BreakerHold::Domain
            {
                self.out.holds.push(HoldOrder {
                    key: key.clone(),
                    reason: DOMAIN_REASON.to_string(),
                    // Not a failure of its own: its count stays.
                    crash_count: f.crash_count,
                });
                return;
            }
            if f.verified && transient && !in_firing && f.has_work {
                Some(Action::Remediate)
            } else if f.stuck && transient && !in_firing && !open_before {
                // Outside any outage: an open breaker or a firing alert
                // holds instead (above), or, where it cannot hold, waits.
                Some(Action::Retry)
            } else {
                None
            }
        } else if in_firing {
            None
        } else if f.pause == Pause::Domain && open_before {
            // Not a probe: a resource that did not fail says nothing about
            // the cloud, and the lowest crash count would pick it first.
            self.domain_held.push(key.clone());
            return;
        } else if f.verified {
            Some(Action::Remediate)
        } else if let Pause::Alert(alert) = &f.pause {
            // Held for an alert not verified cleared yet.
            self.out.settling.push((key.clone(), alert.clone()));
            return;
        } else {
            Some(Action::Release)
        };
        if let Some(action) = action {
            self.candidates.push(Asking {
                candidate: Candidate {
                    key: key.clone(),
                    crash_count: f.crash_count,
                    backoff_remaining: f.backoff_remaining,
                },
                action,
                domain: f.domain,
                owner: f.owner,
                followed_held: f.followed_held,
                with_domain: f.pause == Pause::Domain,
                no_probe: f.no_probe,
                new: f.pause == Pause::New,
            });
        }
    }

    pub fn finish(self, ctx: Context) -> Decisions<K> {
        let Tick {
            core,
            now,
            samples,
            breaker_holds,
            failed_held,
            mut out,
            candidates,
            domain_held,
        } = self;
        // A new leader (restart, takeover) has no samples of the outage its
        // predecessor held resources for: those holds say the breaker was
        // open, so it serves the full cooldown before releasing any.
        if !ctx.leader {
            core.resumed = false;
        } else if ctx.synced && !core.resumed {
            core.resumed = true;
            for (domain, held) in &breaker_holds {
                if !core.breakers.is_open(domain) {
                    core.breakers.resume(now, domain);
                    core.pace_mut(domain).opened();
                    out.resumed.push((domain.clone(), *held));
                }
            }
        }
        // What the domain's releases did: held resources are quiet, not
        // healthy, so their answers keep a breaker open or reopen it.
        let mut samples = samples;
        for (d, pace) in &core.paces {
            if let Some((share, failed)) = pace.failures() {
                let s = samples.entry(d.clone()).or_default();
                s.release_failure_share = Some(share);
                s.release_failures = failed;
            }
        }
        // A domain whose failed resources are held makes no calls for them:
        // its calm says nothing (held whole, `breaker.hold: domain`, it makes
        // none at all), only its probes' answers say the cloud is back.
        // Without probing, or with nothing failed left to probe, calm is all
        // there is to go by.
        // `failed_held` stays for the releases below: resources that call no
        // cloud (`hold.no_probe`) go after those in it.
        let breaker = &core.cfg.breaker;
        if breaker.release.probe_every.is_some() {
            for d in &failed_held {
                let probed = core.paces.get(d).is_some_and(Pace::probed);
                let s = samples.entry(d.clone()).or_default();
                s.held_whole = true;
                s.probed = probed;
            }
        }
        if ctx.sample {
            let before = core.breakers.cooling();
            out.changed = core.breakers.observe(now, samples, ctx.external);
            // Open to cooling (the probes' answers) is no is_open change.
            for d in core.breakers.cooling().difference(&before) {
                core.pace_mut(d).cooled();
            }
        }
        for (domain, _, after) in &out.changed {
            let pace = core.pace_mut(domain);
            if after.is_open() {
                pace.opened();
            } else {
                pace.closed();
            }
        }
        core.flights
            .retain(|_, f| now.saturating_sub(f.at) < FLIGHT_TIMEOUT);
        if !ctx.leader || ctx.paused {
            return out;
        }
        // Each domain releases what its pace allows (probes while its
        // breaker is open); domains take turns at the shared budget. Until
        // every watch has listed, the holds on record are not all known:
        // nothing is released.
        let ceiling = core.cfg.budget.refill_per_second;
        let domains: Vec<Arc<str>> = core.breakers.states().map(|(d, _)| d.clone()).collect();
        let mut allow: HashMap<Arc<str>, (usize, usize, bool)> = HashMap::new();
        for (i, d) in domains.iter().enumerate() {
            let open = core.breakers.is_open(d);
            let n = if core.resumed {
                core.pace_mut(d).allowance(now, ceiling)
            } else {
                0
            };
            allow.insert(d.clone(), (i, n, open || !core.resumed));
        }
        let mut actions: HashMap<K, (Action, Arc<str>, Option<usize>, bool)> = HashMap::new();
        let mut cands = Vec::with_capacity(candidates.len());
        // budget.per: each owner's room is its max_in_flight less its
        // releases whose answer is not in (flights).
        let max_in_flight = core.cfg.budget.per.as_ref().map(|p| p.max_in_flight);
        let mut owner_ids: HashMap<Arc<str>, usize> = HashMap::new();
        let mut owner_names: Vec<Arc<str>> = Vec::new();
        // Domains whose probes said the cloud is back (with probes, a
        // breaker cools only on their answers): what their held resources
        // failed with was the domain's outage, so they go at the pace
        // without waiting out the backoff their holds built up.
        let back: BTreeSet<Arc<str>> = if core.cfg.breaker.release.probe_every.is_some() {
            core.breakers.cooling()
        } else {
            BTreeSet::new()
        };
        let (candidates, mut zone_waiting) = zone_gate(core, now, candidates);
        for Asking {
            candidate: mut c,
            action,
            domain,
            owner,
            followed_held,
            with_domain,
            no_probe,
            new,
        } in candidates
        {
            // Its answer says nothing of the cloud: not a probe while the
            // breaker is open, and released after the resources it waits
            // on (a Machine's server), or it fails again on their status.
            // Held before its first create, it has none to wait on.
            if action == Action::Release
                && no_probe
                && (core.breakers.is_open_proper(&domain)
                    || (failed_held.contains(&domain) && !new))
            {
                zone_waiting.push((c.key, WaitReason::Breaker));
                continue;
            }
            // Due now but for what follows it: let go, without spending
            // the budget its followers' releases need.
            if followed_held {
                let blocked = allow.get(&domain).is_none_or(|(_, _, blocked)| *blocked);
                if !blocked && c.backoff_remaining.is_zero() {
                    out.letting_go.push(c.key);
                }
                continue;
            }
            if action == Action::Release && back.contains(&domain) {
                c.backoff_remaining = Duration::ZERO;
            }
            let id = owner.filter(|_| max_in_flight.is_some()).map(|o| {
                *owner_ids.entry(o.clone()).or_insert_with(|| {
                    owner_names.push(o);
                    owner_names.len() - 1
                })
            });
            actions.insert(c.key.clone(), (action, domain, id, with_domain));
            cands.push(c);
        }
        let mut room: Vec<usize> = match max_in_flight {
            Some(max) => vec![usize::try_from(max).unwrap_or(usize::MAX); owner_names.len()],
            None => Vec::new(),
        };
        for f in core.flights.values() {
            if let Some(r) = f
                .owner
                .as_ref()
                .and_then(|o| owner_ids.get(o))
                .and_then(|i| room.get_mut(*i))
            {
                *r = r.saturating_sub(1);
            }
        }
        let of = |k: &K| actions.get(k).and_then(|(_, _, o, _)| *o);
        let mut owners = Owners { of: &of, room };
        let plan = plan_owned(
            &cands,
            |k| {
                let d = actions.get(k).map(|(_, d, _, _)| d.as_ref()).unwrap_or("");
                allow.get(d).copied().unwrap_or((0, 0, true))
            },
            &mut owners,
            &mut core.bucket,
            now,
            core.cfg.max_per_tick(),
        );
        let mut spent: HashMap<Arc<str>, usize> = HashMap::new();
        for key in plan.release {
            if let Some((action, domain, owner, with_domain)) = actions.remove(&key) {
                *spent.entry(domain.clone()).or_insert(0) += 1;
                let owner = owner.and_then(|i| owner_names.get(i).cloned());
                let retry = action == Action::Retry;
                if retry {
                    core.zone_retries.tried(&domain, now);
                }
                core.flights.insert(
                    key.clone(),
                    Flight {
                        domain,
                        owner,
                        at: now,
                        with_domain,
                        retry,
                    },
                );
                out.actions.push((key, action));
            }
        }
        for (d, n) in spent {
            core.pace_mut(&d).spend(n);
        }
        out.waiting = plan.waiting;
        out.waiting.extend(zone_waiting);
        out.waiting
            .extend(domain_held.into_iter().map(|k| (k, WaitReason::Breaker)));
        out
    }
}

/// Retries of stuck resources, paced per domain once one fails there
/// ([`zone_retry`]): a failing domain tries its lowest crash count once per
/// `retry_every` whatever their backoffs, an answering one lets a doubling
/// number go without their backoff; the rest wait (`backoff`: the
/// domain's). Other candidates pass unchanged.
fn zone_gate<K: Clone + Ord + Hash>(
    core: &mut Core<K>,
    now: Duration,
    candidates: Vec<Asking<K>>,
) -> (Vec<Asking<K>>, Vec<(K, WaitReason)>) {
    let mut by_domain: BTreeMap<Arc<str>, Vec<usize>> = BTreeMap::new();
    for (i, a) in candidates.iter().enumerate() {
        if a.action == Action::Retry {
            by_domain.entry(a.domain.clone()).or_default().push(i);
        }
    }
    if by_domain.is_empty() {
        return (candidates, Vec::new());
    }
    let mut in_flight: HashMap<&str, usize> = HashMap::new();
    for f in core.flights.values().filter(|f| f.retry) {
        *in_flight.entry(f.domain.as_ref()).or_insert(0) += 1;
    }
    let mut go: HashMap<usize, bool> = HashMap::new();
    for (domain, mut idx) in by_domain {
        let flying = in_flight.get(domain.as_ref()).copied().unwrap_or(0);
        let room = match core.zone_retries.gate(&domain, now, flying) {
            Gate::Own => continue,
            Gate::One => 1,
            Gate::Wait(_) => 0,
            Gate::Answering(room) => room,
        };
        idx.sort_by(|&a, &b| {
            let (a, b) = (&candidates[a].candidate, &candidates[b].candidate);
            (a.crash_count, &a.key).cmp(&(b.crash_count, &b.key))
        });
        for (n, i) in idx.into_iter().enumerate() {
            go.insert(i, n < room);
        }
    }
    let mut kept = Vec::with_capacity(candidates.len());
    let mut waiting = Vec::new();
    for (i, mut a) in candidates.into_iter().enumerate() {
        match go.get(&i) {
            None => kept.push(a),
            Some(true) => {
                a.candidate.backoff_remaining = Duration::ZERO;
                kept.push(a);
            }
            Some(false) => waiting.push((a.candidate.key, WaitReason::Backoff)),
        }
    }
    (kept, waiting)
}

#[cfg(test)]
mod tests;
