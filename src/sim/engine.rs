//! The discrete-event core: resources, the cloud API (quota + outage), and
//! the bookkeeping behind the report. Time is integer milliseconds from the
//! start of the outage; events are ordered by (time, insertion sequence), so
//! a run is a pure function of the scenario, the policy and the seed.

use super::model::{CallKind, Ms, Outcome, Resource};
use super::policy::Policy;
use super::{Mode, Scenario};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum EventKind {
    Break,
    Resync,
    Retry { generation: u32 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    at: Ms,
    seq: u64,
    res: u32,
    kind: EventKind,
}

/// What one policy did in one scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyReport {
    pub policy: &'static str,
    pub calls_outage: u64,
    /// Of those, calls by resources that were failing or had a pending retry
    /// (everything but healthy resyncs).
    pub retries_outage: u64,
    pub calls_total: u64,
    pub above_limit: u64,
    pub peak_after: u32,
    /// Failing resources when the outage ended.
    pub failing_at_end: u32,
    /// Milliseconds after the outage ended until ≥ 99% / 100% of the fleet
    /// is healthy; `None` when not reached within the horizon.
    pub t99_ms: Option<Ms>,
    pub t100_ms: Option<Ms>,
    /// Jain index of recovery times of the resources failing at outage end.
    pub jain: Option<f64>,
    /// Of the resources the outage never failed ("healthy"), how many had
    /// a call refused client-side or throttled by the quota.
    pub healthy_delayed: u32,
    pub healthy: u32,
    /// Policy-specific facts worth printing (remedy: breaker timeline).
    pub note: String,
    /// Cloud calls in each second from the start of the outage.
    pub calls_per_second: Vec<u32>,
    /// Failing and held resources every [`SERIES_STEP_MS`].
    pub failing_series: Vec<u32>,
    pub held_series: Vec<u32>,
}

/// How often the failing and held counts are sampled for plots.
pub const SERIES_STEP_MS: Ms = 10_000;

/// The fleet as the outage sees it; identical for every policy of a run.
pub(crate) struct Fleet {
    /// Correlated mode: the failing zone.
    zone: Vec<bool>,
    /// When the outage breaks each affected resource.
    breaks: Vec<(u32, Ms)>,
}

/// Mixes a seed with a stream number so streams are independent (splitmix64).
pub(crate) fn stream_seed(seed: u64, stream: u64) -> u64 {
    let mut z = seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Fleet {
    pub(crate) fn new(s: &Scenario) -> Self {
        let mut rng = StdRng::seed_from_u64(stream_seed(s.seed, 1));
        let n = s.resources as usize;
        let affected: Vec<bool> = match s.mode {
            Mode::Correlated => {
                let mut ids: Vec<u32> = (0..s.resources).collect();
                ids.shuffle(&mut rng);
                let k = ((f64::from(s.resources) * s.failing).round() as usize).min(n);
                let mut zone = vec![false; n];
                for &i in &ids[..k] {
                    zone[i as usize] = true;
                }
                zone
            }
            Mode::Random | Mode::Zones | Mode::Quota => {
                (0..n).map(|_| rng.random_bool(s.failing)).collect()
            }
        };
        let spread = s.detect_spread.as_millis() as u64;
        let breaks = affected
            .iter()
            .enumerate()
            .filter(|(_, a)| **a)
            .map(|(i, _)| (i as u32, rng.random_range(0..=spread)))
            .collect();
        let zone = match s.mode {
            Mode::Correlated => affected,
            Mode::Random | Mode::Zones | Mode::Quota => vec![false; n],
        };
        Self { zone, breaks }
    }
}

struct Run<'a> {
    s: &'a Scenario,
    heap: BinaryHeap<Reverse<Event>>,
    seq: u64,
    res: Vec<Resource>,
    zone: &'a [bool],
    cloud_rng: StdRng,
    policy_rng: StdRng,
    outage_ms: Ms,
    horizon_ms: Ms,
    per_second: Vec<u32>,
    calls_total: u64,
    calls_outage: u64,
    retries_outage: u64,
    above_limit: u64,
    broken: u32,
    delayed: Vec<bool>,
    ever_broken: Vec<bool>,
    recovered_at: Vec<Option<Ms>>,
    failing_at_end: Option<Vec<bool>>,
    t99: Option<Ms>,
    t100: Option<Ms>,
    failing_series: Vec<u32>,
    held_series: Vec<u32>,
}

impl Run<'_> {
    fn push(&mut self, at: Ms, res: u32, kind: EventKind) {
        if at >= self.horizon_ms {
            return;
        }
        self.seq += 1;
        self.heap.push(Reverse(Event {
            at,
            seq: self.seq,
            res,
            kind,
        }));
    }

    /// Schedules a retry, keeping the sooner one if one is already pending
    /// (a workqueue holds each item once, at its earliest ready time).
    fn schedule_retry(&mut self, id: u32, at: Ms) {
        let r = &mut self.res[id as usize];
        if r.retry_at.is_some_and(|old| old <= at) {
            return;
        }
        r.retry_gen = r.retry_gen.wrapping_add(1);
        r.retry_at = Some(at);
        let generation = r.retry_gen;
        self.push(at, id, EventKind::Retry { generation });
    }

    fn cancel_retry(&mut self, id: u32) {
        let r = &mut self.res[id as usize];
        r.retry_gen = r.retry_gen.wrapping_add(1);
        r.retry_at = None;
    }

    fn threshold_99(&self) -> u32 {
        self.s.resources / 100
    }

    fn note_recovery(&mut self, now: Ms) {
        if self.failing_at_end.is_none() || now < self.outage_ms {
            return;
        }
        let after = now - self.outage_ms;
        if self.t99.is_none() && self.broken <= self.threshold_99() {
            self.t99 = Some(after);
        }
        if self.t100.is_none() && self.broken == 0 {
            self.t100 = Some(after);
        }
    }

    fn cloud_fails(&mut self, id: u32, now: Ms) -> bool {
        if now >= self.outage_ms {
            return false;
        }
        match self.s.mode {
            Mode::Correlated => self.zone[id as usize],
            Mode::Random => self.cloud_rng.random_bool(self.s.failing),
            // Zone 0 is down for the whole outage, the others only at first.
            Mode::Zones => {
                let zone = self.s.zone_of(id);
                zone == 0 || now < self.s.zones_back_ms()
            }
            // Only the quota is cut.
            Mode::Quota => false,
        }
    }

    /// The cloud's quota at `now`: halved during a quota-cut outage.
    fn limit_at(&self, now: Ms) -> u32 {
        if self.s.mode == Mode::Quota && now < self.outage_ms {
            (self.s.api_limit / 2).max(1)
        } else {
            self.s.api_limit
        }
    }

    fn call(&mut self, policy: &mut dyn Policy, id: u32, kind: CallKind, now: Ms) {
        let admitted = policy.admit(now, &self.res[id as usize], kind, &mut self.policy_rng);
        let outcome = if !admitted {
            Outcome::Rejected
        } else {
            self.calls_total += 1;
            if now < self.outage_ms {
                self.calls_outage += 1;
                if self.res[id as usize].needs_call() {
                    self.retries_outage += 1;
                }
            }
            let sec = (now / 1000) as usize;
            let in_second = match self.per_second.get_mut(sec) {
                Some(c) => {
                    *c += 1;
                    *c
                }
                None => 0,
            };
            if in_second > self.limit_at(now) {
                self.above_limit += 1;
                Outcome::Throttled
            } else if self.cloud_fails(id, now) {
                Outcome::Failed
            } else {
                Outcome::Success
            }
        };
        self.apply(policy, id, kind, outcome, now);
    }

    fn apply(&mut self, policy: &mut dyn Policy, id: u32, kind: CallKind, o: Outcome, now: Ms) {
        let i = id as usize;
        match o {
            Outcome::Success => {
                let r = &mut self.res[i];
                let was_broken = r.broken;
                r.broken = false;
                r.pending = false;
                r.failures = 0;
                r.failed_status = false;
                r.throttled = false;
                self.cancel_retry(id);
                if was_broken {
                    self.broken -= 1;
                    self.recovered_at[i] = Some(now);
                    self.note_recovery(now);
                }
            }
            Outcome::Failed | Outcome::Broke => {
                let r = &mut self.res[i];
                if o == Outcome::Broke {
                    r.failed_status = true;
                }
                r.throttled = false;
                if !r.broken {
                    r.broken = true;
                    self.broken += 1;
                }
                self.ever_broken[i] = true;
                r.pending = false;
                r.failures = r.failures.saturating_add(1);
            }
            Outcome::Throttled | Outcome::Rejected => {
                let r = &mut self.res[i];
                r.failures = r.failures.saturating_add(1);
                r.throttled = o == Outcome::Throttled;
                if !r.broken {
                    r.pending = true;
                    self.delayed[i] = true;
                }
            }
        }
        let next = policy.on_outcome(now, &self.res[i], kind, o, &mut self.policy_rng);
        if o.is_failure()
            && let Some(at) = next
        {
            self.schedule_retry(id, at.max(now));
        }
    }

    fn handle(&mut self, policy: &mut dyn Policy, ev: Event) {
        let id = ev.res;
        let i = id as usize;
        match ev.kind {
            EventKind::Break => {
                if !self.res[i].broken {
                    self.apply(policy, id, CallKind::Retry, Outcome::Broke, ev.at);
                }
            }
            EventKind::Resync => {
                self.push(ev.at + self.s.resync_ms(), id, EventKind::Resync);
                let r = &self.res[i];
                if policy.skips(r) {
                    return;
                }
                if !r.needs_call() || policy.resync_when_failing() {
                    self.call(policy, id, CallKind::Resync, ev.at);
                }
            }
            EventKind::Retry { generation } => {
                let r = &mut self.res[i];
                if r.retry_gen != generation || r.retry_at != Some(ev.at) {
                    return;
                }
                r.retry_at = None;
                if r.needs_call() && !policy.skips(r) {
                    self.call(policy, id, CallKind::Retry, ev.at);
                }
            }
        }
    }

    fn snapshot_end(&mut self) {
        self.failing_at_end = Some(self.res.iter().map(|r| r.broken).collect());
        self.note_recovery(self.outage_ms);
    }

    fn report(self, policy: &dyn Policy) -> PolicyReport {
        let end = self.failing_at_end.unwrap_or_default();
        let after_secs = (self.horizon_ms - self.outage_ms) as f64 / 1000.0;
        let times: Vec<f64> = end
            .iter()
            .enumerate()
            .filter(|(_, f)| **f)
            .map(|(i, _)| match self.recovered_at[i] {
                Some(t) if t >= self.outage_ms => (t - self.outage_ms) as f64 / 1000.0,
                // Never recovered within the horizon: censored at the horizon.
                _ => after_secs,
            })
            .collect();
        let first_after = (self.outage_ms / 1000) as usize;
        PolicyReport {
            policy: policy.name(),
            calls_outage: self.calls_outage,
            retries_outage: self.retries_outage,
            calls_total: self.calls_total,
            above_limit: self.above_limit,
            peak_after: self
                .per_second
                .get(first_after..)
                .and_then(|s| s.iter().max().copied())
                .unwrap_or(0),
            failing_at_end: times.len() as u32,
            t99_ms: self.t99,
            t100_ms: self.t100,
            jain: jain(&times),
            healthy_delayed: self
                .delayed
                .iter()
                .zip(&self.ever_broken)
                .filter(|(d, b)| **d && !**b)
                .count() as u32,
            healthy: self.ever_broken.iter().filter(|b| !**b).count() as u32,
            note: policy.note(),
            calls_per_second: self.per_second,
            failing_series: self.failing_series,
            held_series: self.held_series,
        }
    }
}

/// Jain's fairness index (Σx)² / (n·Σx²): 1 when all equal, 1/n when one
/// resource takes it all. `None` without data; 1 when all are zero.
pub fn jain(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let sum: f64 = xs.iter().sum();
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    if sq == 0.0 {
        return Some(1.0);
    }
    Some(sum * sum / (xs.len() as f64 * sq))
}

/// Runs one policy through the scenario.
pub(crate) fn run_policy(
    s: &Scenario,
    fleet: &Fleet,
    policy: &mut dyn Policy,
    stream: u64,
) -> PolicyReport {
    let n = s.resources as usize;
    let outage_ms = s.outage.as_secs() * 1000;
    let horizon_ms = outage_ms + s.after.as_secs() * 1000;
    let mut run = Run {
        s,
        heap: BinaryHeap::new(),
        seq: 0,
        res: (0..s.resources)
            .map(|id| Resource::new(id, id % s.controllers, s.zone_of(id)))
            .collect(),
        zone: &fleet.zone,
        cloud_rng: StdRng::seed_from_u64(stream_seed(s.seed, 100 + stream)),
        policy_rng: StdRng::seed_from_u64(stream_seed(s.seed, 200 + stream)),
        outage_ms,
        horizon_ms,
        per_second: vec![0; (horizon_ms / 1000) as usize + 1],
        calls_total: 0,
        calls_outage: 0,
        retries_outage: 0,
        above_limit: 0,
        broken: 0,
        delayed: vec![false; n],
        ever_broken: vec![false; n],
        recovered_at: vec![None; n],
        failing_at_end: None,
        t99: None,
        t100: None,
        failing_series: Vec::new(),
        held_series: Vec::new(),
    };
    // Resyncs are phase-locked and evenly spread, so the background load is
    // a flat resources/resync per second for every policy.
    let resync = s.resync_ms();
    for id in 0..s.resources {
        let phase = u64::from(id) * resync / u64::from(s.resources);
        run.push(phase, id, EventKind::Resync);
    }
    for &(id, at) in &fleet.breaks {
        run.push(at.min(outage_ms.saturating_sub(1)), id, EventKind::Break);
    }
    let mut releases: Vec<(u32, Ms)> = Vec::new();
    let mut now: Ms = 0;
    while now < horizon_ms {
        if now >= outage_ms && run.failing_at_end.is_none() {
            run.snapshot_end();
        }
        if now.is_multiple_of(SERIES_STEP_MS) {
            run.failing_series.push(run.broken);
            run.held_series.push(policy.held());
        }
        policy.tick(now, &mut run.res, &mut releases);
        for (id, at) in releases.drain(..) {
            if (id as usize) < n {
                run.schedule_retry(id, at.max(now));
            }
        }
        let next = now + 1000;
        while let Some(Reverse(ev)) = run.heap.peek().copied() {
            if ev.at >= next {
                break;
            }
            run.heap.pop();
            run.handle(policy, ev);
        }
        now = next;
    }
    if run.failing_at_end.is_none() {
        run.snapshot_end();
    }
    run.report(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index_bounds() {
        assert_eq!(jain(&[]), None);
        assert_eq!(jain(&[0.0, 0.0]), Some(1.0));
        assert_eq!(jain(&[5.0, 5.0, 5.0]), Some(1.0));
        let one_hog = jain(&[10.0, 0.0, 0.0, 0.0]).unwrap();
        assert!((one_hog - 0.25).abs() < 1e-12);
    }

    #[test]
    fn stream_seeds_differ() {
        assert_ne!(stream_seed(1, 1), stream_seed(1, 2));
        assert_ne!(stream_seed(1, 1), stream_seed(2, 1));
        assert_eq!(stream_seed(7, 3), stream_seed(7, 3));
    }
}
