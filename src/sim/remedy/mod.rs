//! remedy in the simulator: the daemon's own decision core
//! ([`crate::decide`]) with the daemon's config types, driving a simulated
//! CAPI provider with CAPO's rules: a paused resource or one with a failure
//! status is skipped, an update (remedy's release) is reconciled at once,
//! and a failed reconcile is requeued by controller-runtime's default rate
//! limiter. The core sees what the daemon sees: each resource's pause,
//! failure and counters, once a second.

use super::Scenario;
use super::model::{CallKind, Ms, Outcome, Resource};
use super::policy::{ClientGoDefault, Policy};
use crate::config::{BreakerConfig, BudgetConfig, DomainBy, PaceConfig};
use crate::decide::{Action, Context, Core, CoreConfig, Decisions, Fact, Failing, Pause};
use crate::model::backoff::BackoffPolicy;
use chrono::{DateTime, Utc};
use rand::rngs::StdRng;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// The zone label a zoned fleet's domains are keyed by.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Under `budget.per`, the simulated fleet's owners are runs of this many
/// consecutive resources (a MachineDeployment's Machines).
pub const OWNER_GROUP: u32 = 20;

/// remedy's parameters in the simulator: the daemon's config sections.
#[derive(Clone, Debug, PartialEq)]
pub struct RemedyParams {
    pub core: CoreConfig,
    pub backoff: BackoffPolicy,
}

impl RemedyParams {
    /// The budget is the cloud quota minus the steady resync load, with 3%
    /// headroom: remedy's releases plus everyone's resyncs stay under the
    /// limit in every second. A zoned fleet gets a breaker per zone. The
    /// rest is explained in docs/simulation.md.
    pub fn for_scenario(s: &Scenario) -> Self {
        let resync_secs = s.resync_ms().div_ceil(1000).max(1);
        let background = u64::from(s.resources).div_ceil(resync_secs);
        let usable = (f64::from(s.api_limit) * 0.97).floor() as u64;
        let per_second = usable.saturating_sub(background).max(1);
        let domain = if s.zones > 1 {
            DomainBy::Label(ZONE_LABEL.into())
        } else {
            DomainBy::Cluster
        };
        Self {
            core: CoreConfig {
                budget: BudgetConfig {
                    refill_per_second: per_second as f64,
                    burst: per_second as u32,
                    // The Kubernetes write pace plays no part here.
                    ..BudgetConfig::default()
                },
                breaker: BreakerConfig {
                    open_ratio: 0.3,
                    close_ratio: 0.1,
                    min_resources: 5,
                    window: Duration::from_secs(10),
                    cooldown: Duration::from_secs(20),
                    query: None,
                    domain,
                    release: PaceConfig {
                        probe_every: Some(Duration::from_secs(2)),
                        window: Duration::from_secs(2),
                        step: 2.0,
                        min_success: 0.2,
                    },
                    hold: Default::default(),
                },
                retry_every: Duration::from_secs(1),
            },
            backoff: BackoffPolicy {
                base: Duration::from_secs(1),
                cap: Duration::from_secs(300),
                jitter: 0.0,
                quiet_window: Duration::from_secs(3600),
            },
        }
    }

    /// The daemon's own sections of a config file.
    pub fn from_config(c: &crate::config::Config) -> Self {
        Self {
            core: CoreConfig::from_config(c),
            backoff: c.backoff.clone(),
        }
    }

    /// One breaker for the whole fleet, as before failure domains.
    pub fn one_breaker(mut self) -> Self {
        self.core.breaker.domain = DomainBy::Cluster;
        self
    }
}

/// The wall clock the core's backoff reads: a fixed epoch plus sim time.
pub fn wall(now: Ms) -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH + chrono::Duration::milliseconds(now as i64)
}

/// What the core was given and decided in one tick (recorded for tests).
#[derive(Clone, Debug, PartialEq)]
pub struct TickRecord {
    pub now: Ms,
    /// Facts of the resources that are failing, held or awaiting their
    /// release's answer, by id; everyone else is healthy.
    pub facts: Vec<(u32, SimFact)>,
    pub decisions: Decisions<u32>,
}

/// A resource as the core sees it, without the domain handle.
#[derive(Clone, Debug, PartialEq)]
pub struct SimFact {
    pub zone: u32,
    pub paused: bool,
    pub failing: bool,
    /// Failing with a 429.
    pub throttled: bool,
    pub fresh: bool,
    pub crash_count: u32,
    /// Whole seconds, as the hold annotation records it.
    pub failure_time: Option<Ms>,
}

pub struct Remedy {
    name: &'static str,
    p: RemedyParams,
    core: Core<u32>,
    zones: Vec<Arc<str>>,
    zone_sizes: Vec<u32>,
    /// Under `budget.per`: owner `i` has resources `i·OWNER_GROUP..`.
    owners: Vec<Arc<str>>,
    /// The provider's requeues: controller-runtime's default limiter.
    provider: ClientGoDefault,
    crash: Vec<u32>,
    failure_time: Vec<Option<Ms>>,
    /// Released, no outcome yet: its failure signals are remedy's own.
    unanswered: Vec<bool>,
    /// Resources that may need a decision: failing, held or unanswered.
    watch: BTreeSet<u32>,
    held: u32,
    was_open: bool,
    openings: u32,
    first_open: Option<Ms>,
    last_close: Option<Ms>,
    releases_while_open: u64,
    /// Per zone: when it last went from troubled (failing or held) to clear.
    clear_since: Vec<Option<Ms>>,
    trace: Option<Vec<TickRecord>>,
}

impl Remedy {
    pub fn new(p: RemedyParams, s: &Scenario) -> Self {
        let mut core = Core::new(p.core.clone());
        let cluster = p.core.breaker.domain == DomainBy::Cluster;
        let zones: Vec<Arc<str>> = (0..s.zones.max(1))
            .map(|z| match cluster {
                true => core.domain(crate::model::domains::CLUSTER),
                false => core.domain(&zone_name(z)),
            })
            .collect();
        let zone_sizes = (0..s.zones.max(1))
            .map(|z| (0..s.resources).filter(|id| s.zone_of(*id) == z).count() as u32)
            .collect();
        let n = s.resources as usize;
        let owners = match p.core.budget.per {
            Some(_) => (0..s.resources.div_ceil(OWNER_GROUP))
                .map(|g| Arc::from(format!("sim/md-{g}")))
                .collect(),
            None => Vec::new(),
        };
        Self {
            name: "remedy",
            core,
            zones,
            zone_sizes,
            owners,
            provider: ClientGoDefault::new(s.controllers),
            crash: vec![0; n],
            failure_time: vec![None; n],
            unanswered: vec![false; n],
            watch: BTreeSet::new(),
            held: 0,
            was_open: false,
            openings: 0,
            first_open: None,
            last_close: None,
            releases_while_open: 0,
            clear_since: vec![Some(0); s.zones.max(1) as usize],
            trace: None,
            p,
        }
    }

    /// The same with another name in the table.
    pub fn named(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    /// Keeps every tick's facts and decisions (see [`Self::trace`]).
    #[cfg(test)]
    pub fn recording(mut self) -> Self {
        self.trace = Some(Vec::new());
        self
    }

    #[cfg(test)]
    pub fn trace(&self) -> &[TickRecord] {
        self.trace.as_deref().unwrap_or_default()
    }

    fn sim_fact(&self, r: &Resource) -> SimFact {
        let i = r.id as usize;
        let fresh = !self.unanswered[i];
        SimFact {
            zone: r.zone,
            paused: r.paused,
            failing: fresh && r.broken,
            throttled: r.throttled,
            fresh,
            crash_count: self.crash[i],
            failure_time: self.failure_time[i],
        }
    }
}

/// The zone label value of zone `z`.
pub fn zone_name(z: u32) -> String {
    format!("zone-{z}")
}

/// The core's fact for a simulated resource at `now`, as the daemon's
/// engine derives it from an object (stale counters count as zero).
pub fn fact(backoff: &BackoffPolicy, domain: Arc<str>, f: &SimFact, now: Ms) -> Fact {
    let at = wall(now);
    let failure_time = f.failure_time.map(wall);
    let retry = crate::decide::facts::retry(
        backoff.effective(None),
        Some(f.crash_count),
        failure_time,
        at,
    );
    Fact {
        domain,
        pause: if f.paused { Pause::Breaker } else { Pause::No },
        failing: match (f.failing, f.throttled) {
            (false, _) => Failing::No,
            (true, false) => Failing::Transient,
            (true, true) => Failing::Throttled,
        },
        fresh: f.fresh,
        deleting: false,
        // The simulated controller retries by itself (a release or a
        // remediation is what makes it call again): nothing is stuck.
        stuck: false,
        planned: false,
        // Released at once: a released resource is not held at the next tick.
        busy: false,
        holdable: true,
        // Simulated resources call the cloud themselves.
        no_probe: false,
        uncreated: false,
        age: None,
        crash_count: retry.crash_count,
        backoff_remaining: retry.remaining,
        firing: None,
        verified: false,
        has_work: true,
        owner: None,
        owner_held: None,
        followed_held: false,
    }
}

impl Policy for Remedy {
    fn name(&self) -> &'static str {
        self.name
    }

    fn skips(&self, r: &Resource) -> bool {
        r.paused || r.failed_status
    }

    fn held(&self) -> u32 {
        self.held
    }

    fn tick(&mut self, now: Ms, res: &mut [Resource], releases: &mut Vec<(u32, Ms)>) {
        let facts: Vec<(u32, SimFact)> = self
            .watch
            .iter()
            .filter_map(|&id| res.get(id as usize))
            .map(|r| (r.id, self.sim_fact(r)))
            .collect();
        let mut quiet = self.zone_sizes.clone();
        let mut troubled = vec![false; quiet.len()];
        let mut t = self.core.begin(Duration::from_millis(now));
        for (id, f) in &facts {
            let z = f.zone as usize;
            if let Some(q) = quiet.get_mut(z) {
                *q -= 1;
            }
            if f.failing || f.paused {
                troubled[z] = true;
            }
            let domain = self.zones[z].clone();
            let owner = self.owners.get((id / OWNER_GROUP) as usize).cloned();
            t.fact(
                id,
                Fact {
                    owner,
                    ..fact(&self.p.backoff, domain, f, now)
                },
            );
        }
        for (z, n) in quiet.iter().enumerate() {
            t.quiet(&self.zones[z], *n);
        }
        for (since, troubled) in self.clear_since.iter_mut().zip(&troubled) {
            match (*troubled, *since) {
                (true, _) => *since = None,
                (false, None) => *since = Some(now),
                (false, Some(_)) => {}
            }
        }
        let d = t.finish(Context {
            leader: true,
            paused: false,
            synced: true,
            external: None,
            sample: true,
        });
        let open = self.core.breakers().any_open();
        if open && !self.was_open {
            self.openings += 1;
            self.first_open.get_or_insert(now);
        }
        if !open && self.was_open {
            self.last_close = Some(now);
        }
        self.was_open = open;
        for h in &d.holds {
            let i = h.key as usize;
            if let Some(r) = res.get_mut(i) {
                r.paused = true;
                self.crash[i] = h.crash_count;
                self.failure_time[i] = Some(now / 1000 * 1000);
                self.held += 1;
            }
        }
        let n = d.actions.len() as u64;
        for (k, (id, action)) in d.actions.iter().enumerate() {
            let i = *id as usize;
            let Some(r) = res.get_mut(i) else { continue };
            if r.paused {
                self.held -= 1;
            }
            r.paused = false;
            // release_clears_failure: the provider reconciles it again.
            r.failed_status = false;
            if *action == Action::Remediate {
                self.crash[i] = 0;
            }
            self.unanswered[i] = true;
            if open {
                self.releases_while_open += 1;
            }
            // Spread the tick's releases over its second.
            releases.push((*id, now + k as u64 * 1000 / n));
        }
        // Keep watching only what may still need a decision.
        let unanswered = &self.unanswered;
        self.watch.retain(|&id| {
            res.get(id as usize).is_some_and(|r| r.broken || r.paused) || unanswered[id as usize]
        });
        if let Some(trace) = &mut self.trace {
            trace.push(TickRecord {
                now,
                facts,
                decisions: d,
            });
        }
    }

    fn on_outcome(
        &mut self,
        now: Ms,
        r: &Resource,
        kind: CallKind,
        outcome: Outcome,
        rng: &mut StdRng,
    ) -> Option<Ms> {
        let i = r.id as usize;
        if let Some(u) = self.unanswered.get_mut(i) {
            *u = false;
        }
        if !outcome.is_failure() {
            return None;
        }
        self.watch.insert(r.id);
        if outcome == Outcome::Broke {
            // Failure status set: the provider stops reconciling it.
            return None;
        }
        // controller-runtime requeues a failed reconcile.
        self.provider.on_outcome(now, r, kind, outcome, rng)
    }

    fn note(&self) -> String {
        let fmt = |t: Option<Ms>| t.map_or("-".to_string(), |t| format!("{} s", t / 1000));
        let (ok, failed) = self.core.outcomes();
        // A zoned fleet: when each zone was last clear of failing and
        // held resources for good.
        let zones: String = match self.clear_since.len() {
            1 => String::new(),
            _ => self
                .clear_since
                .iter()
                .enumerate()
                .map(|(z, t)| format!("; {} clear from {}", zone_name(z as u32), fmt(*t)))
                .collect(),
        };
        format!(
            "breaker opened {} time(s), first at {}, last closed at {}; {} releases while open; \
             release outcomes {ok} ok, {failed} failed again; budget {}/s burst {}{zones}",
            self.openings,
            fmt(self.first_open),
            fmt(self.last_close),
            self.releases_while_open,
            self.p.core.budget.refill_per_second,
            self.p.core.budget.burst,
        )
    }
}

#[cfg(test)]
mod tests;
