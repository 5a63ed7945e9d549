//! The retry policies compared by the simulator. Each one only decides when
//! a failing resource calls again (and, for client-side throttles, whether a
//! call may leave at all); the engine owns the cloud and the bookkeeping.

use super::Scenario;
use super::engine::{CallKind, Ms, Outcome, Resource};
use crate::backoff::BackoffPolicy;
use crate::budget::{Candidate, OutageBreaker, Sample, TokenBucket, plan_releases};
use crate::config::{BreakerConfig, BudgetConfig};
use rand::Rng;
use rand::rngs::StdRng;
use std::collections::BTreeMap;
use std::time::Duration;

pub trait Policy {
    fn name(&self) -> &'static str;

    /// Whether the periodic resync of a failing resource reaches the cloud.
    /// True for workqueue controllers (a resync `Add` bypasses the rate
    /// limiter); false where the backoff is checked inside the reconcile
    /// (brupop) or the resource is paused (remedy).
    fn resync_when_failing(&self) -> bool {
        true
    }

    /// Called at the start of every simulated second; may release resources
    /// by pushing (resource, call time).
    fn tick(&mut self, _now: Ms, _releases: &mut Vec<(u32, Ms)>) {}

    /// Client-side admission of a call; false refuses it without a cloud call.
    fn admit(&mut self, _now: Ms, _r: &Resource, _kind: CallKind, _rng: &mut StdRng) -> bool {
        true
    }

    /// Sees every outcome (the resource already updated). For a failure,
    /// returns when the resource retries on its own; `None` means the policy
    /// releases it later from `tick` (or never).
    fn on_outcome(
        &mut self,
        now: Ms,
        r: &Resource,
        kind: CallKind,
        outcome: Outcome,
        rng: &mut StdRng,
    ) -> Option<Ms>;

    /// Facts worth printing under the table.
    fn note(&self) -> String {
        String::new()
    }
}

/// All six policies, in table order.
pub fn all(s: &Scenario) -> Vec<Box<dyn Policy>> {
    vec![
        Box::new(ClientGoDefault::new(s.controllers)),
        Box::new(FullJitter),
        Box::new(Brupop::default()),
        Box::new(AwsStandardRetry::new(s.resources, s.controllers)),
        Box::new(SreAdaptive::new(s.controllers)),
        Box::new(Remedy::new(RemedyParams::for_scenario(s), s.resources)),
    ]
}

/// min(base·2^(failures-1), cap), saturating.
fn exponential(base_ms: u64, cap_ms: u64, failures: u32) -> u64 {
    let exp = failures.saturating_sub(1).min(63);
    base_ms.saturating_mul(1u64 << exp).min(cap_ms)
}

/// "Full jitter" (AWS architecture blog): uniform in [0, exponential].
fn full_jitter(base_ms: u64, cap_ms: u64, failures: u32, rng: &mut StdRng) -> u64 {
    rng.random_range(0..=exponential(base_ms, cap_ms, failures))
}

/// golang.org/x/time/rate `Limiter.Reserve().Delay()`: tokens may go
/// negative, i.e. every caller gets a slot in the future.
#[derive(Clone, Debug)]
struct ReserveBucket {
    per_ms: f64,
    burst: f64,
    tokens: f64,
    last: Ms,
}

impl ReserveBucket {
    fn new(per_second: f64, burst: u32) -> Self {
        Self {
            per_ms: per_second / 1000.0,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: 0,
        }
    }

    fn reserve(&mut self, now: Ms) -> Ms {
        if now > self.last {
            let refill = (now - self.last) as f64 * self.per_ms;
            self.tokens = (self.tokens + refill).min(self.burst);
            self.last = now;
        }
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            0
        } else {
            (-self.tokens / self.per_ms).ceil() as Ms
        }
    }
}

/// client-go `DefaultControllerRateLimiter`: max of a per-item exponential
/// (5 ms·2^n, capped at 1000 s) and an overall 10 qps / burst 100 bucket,
/// one per controller.
pub struct ClientGoDefault {
    buckets: Vec<ReserveBucket>,
}

impl ClientGoDefault {
    pub fn new(controllers: u32) -> Self {
        Self {
            buckets: vec![ReserveBucket::new(10.0, 100); controllers as usize],
        }
    }
}

impl Policy for ClientGoDefault {
    fn name(&self) -> &'static str {
        "client-go default"
    }

    fn on_outcome(
        &mut self,
        now: Ms,
        r: &Resource,
        _kind: CallKind,
        outcome: Outcome,
        _rng: &mut StdRng,
    ) -> Option<Ms> {
        if !outcome.is_failure() {
            return None;
        }
        let item = exponential(5, 1_000_000, r.failures);
        // Both limiters are consulted on every requeue (MaxOf), so the
        // bucket reservation is taken even when the item delay dominates.
        let overall = self.buckets[r.controller as usize].reserve(now);
        Some(now + item.max(overall))
    }
}

/// Capped exponential backoff with full jitter: base 1 s, cap 5 min.
#[derive(Default)]
pub struct FullJitter;

impl Policy for FullJitter {
    fn name(&self) -> &'static str {
        "full-jitter 1s..5m"
    }

    fn on_outcome(
        &mut self,
        now: Ms,
        r: &Resource,
        _kind: CallKind,
        outcome: Outcome,
        rng: &mut StdRng,
    ) -> Option<Ms> {
        outcome
            .is_failure()
            .then(|| now + full_jitter(1000, 300_000, r.failures, rng))
    }
}

/// Bottlerocket update operator: wait 2^crash_count minutes, capped at 24 h,
/// no jitter, checked inside the reconcile (resyncs do not bypass it).
#[derive(Default)]
pub struct Brupop {
    backoff: BackoffPolicy,
}

impl Policy for Brupop {
    fn name(&self) -> &'static str {
        "brupop 2^n min"
    }

    fn resync_when_failing(&self) -> bool {
        false
    }

    fn on_outcome(
        &mut self,
        now: Ms,
        r: &Resource,
        _kind: CallKind,
        outcome: Outcome,
        _rng: &mut StdRng,
    ) -> Option<Ms> {
        outcome
            .is_failure()
            .then(|| now + self.backoff.delay(r.failures).as_millis() as Ms)
    }
}

/// AWS SDK "standard" retry quota, one per controller: 500 tokens, a retry
/// costs 5 and is refused (no call) when the quota cannot pay; a successful
/// retry refunds its 5, a successful first attempt adds 1. Retries back off
/// with full jitter, base 1 s, cap 20 s (the SDK's max backoff).
pub struct AwsStandardRetry {
    quota: Vec<u32>,
    paid: Vec<bool>,
}

const AWS_QUOTA: u32 = 500;
const AWS_RETRY_COST: u32 = 5;
const AWS_NO_RETRY_INCREMENT: u32 = 1;

impl AwsStandardRetry {
    pub fn new(resources: u32, controllers: u32) -> Self {
        Self {
            quota: vec![AWS_QUOTA; controllers as usize],
            paid: vec![false; resources as usize],
        }
    }
}

impl Policy for AwsStandardRetry {
    fn name(&self) -> &'static str {
        "aws retry quota"
    }

    fn admit(&mut self, _now: Ms, r: &Resource, kind: CallKind, _rng: &mut StdRng) -> bool {
        if kind == CallKind::Resync {
            return true;
        }
        let q = &mut self.quota[r.controller as usize];
        if *q < AWS_RETRY_COST {
            return false;
        }
        *q -= AWS_RETRY_COST;
        self.paid[r.id as usize] = true;
        true
    }

    fn on_outcome(
        &mut self,
        now: Ms,
        r: &Resource,
        _kind: CallKind,
        outcome: Outcome,
        rng: &mut StdRng,
    ) -> Option<Ms> {
        let paid = std::mem::take(&mut self.paid[r.id as usize]);
        if outcome.is_failure() {
            return Some(now + full_jitter(1000, 20_000, r.failures, rng));
        }
        let q = &mut self.quota[r.controller as usize];
        let refund = if paid {
            AWS_RETRY_COST
        } else {
            AWS_NO_RETRY_INCREMENT
        };
        *q = (*q + refund).min(AWS_QUOTA);
        None
    }
}

/// Sliding 2-minute window of (requests, accepts) in one-second buckets.
#[derive(Clone, Debug)]
struct Window {
    buckets: Vec<(u64, u64)>,
    head: u64,
    requests: u64,
    accepts: u64,
}

const SRE_WINDOW_SECS: u64 = 120;

impl Window {
    fn new() -> Self {
        Self {
            buckets: vec![(0, 0); SRE_WINDOW_SECS as usize],
            head: 0,
            requests: 0,
            accepts: 0,
        }
    }

    fn advance(&mut self, sec: u64) {
        if sec <= self.head {
            return;
        }
        let steps = (sec - self.head).min(SRE_WINDOW_SECS);
        for s in 1..=steps {
            let b = &mut self.buckets[((self.head + s) % SRE_WINDOW_SECS) as usize];
            self.requests -= b.0;
            self.accepts -= b.1;
            *b = (0, 0);
        }
        self.head = sec;
    }

    fn current(&mut self) -> &mut (u64, u64) {
        &mut self.buckets[(self.head % SRE_WINDOW_SECS) as usize]
    }
}

/// Google SRE book client-side adaptive throttling, one per controller:
/// refuse locally with probability max(0, (requests − K·accepts)/(requests+1))
/// over the last 2 minutes, K = 2. It gates every call of the controller,
/// resyncs included. Retries use full jitter 1 s..5 min underneath.
pub struct SreAdaptive {
    k: f64,
    windows: Vec<Window>,
}

impl SreAdaptive {
    pub fn new(controllers: u32) -> Self {
        Self {
            k: 2.0,
            windows: vec![Window::new(); controllers as usize],
        }
    }
}

impl Policy for SreAdaptive {
    fn name(&self) -> &'static str {
        "sre adaptive K=2"
    }

    fn admit(&mut self, now: Ms, r: &Resource, _kind: CallKind, rng: &mut StdRng) -> bool {
        let w = &mut self.windows[r.controller as usize];
        w.advance(now / 1000);
        let (req, acc) = (w.requests as f64, w.accepts as f64);
        let p_reject = ((req - self.k * acc) / (req + 1.0)).max(0.0);
        w.requests += 1;
        w.current().0 += 1;
        rng.random::<f64>() >= p_reject
    }

    fn on_outcome(
        &mut self,
        now: Ms,
        r: &Resource,
        _kind: CallKind,
        outcome: Outcome,
        rng: &mut StdRng,
    ) -> Option<Ms> {
        if outcome == Outcome::Success {
            let w = &mut self.windows[r.controller as usize];
            w.advance(now / 1000);
            w.accepts += 1;
            w.current().1 += 1;
            return None;
        }
        Some(now + full_jitter(1000, 300_000, r.failures, rng))
    }
}

/// remedy's parameters in the simulator.
#[derive(Clone, Debug, PartialEq)]
pub struct RemedyParams {
    pub budget: BudgetConfig,
    pub max_per_tick: usize,
    pub breaker: BreakerConfig,
    pub backoff: BackoffPolicy,
    /// While the breaker is open, one canary batch this often…
    pub probe_every: Duration,
    /// …of this many held resources (budgeted, lowest crash_count first).
    pub probe_batch: usize,
}

impl RemedyParams {
    /// The budget is the cloud quota minus the steady resync load, with 3%
    /// headroom: remedy's releases plus everyone's resyncs stay under the
    /// limit in every second. The rest is explained in docs/simulation.md.
    pub fn for_scenario(s: &Scenario) -> Self {
        let resync_secs = s.resync_ms().div_ceil(1000).max(1);
        let background = u64::from(s.resources).div_ceil(resync_secs);
        let usable = (f64::from(s.api_limit) * 0.97).floor() as u64;
        let per_second = usable.saturating_sub(background).max(1);
        Self {
            budget: BudgetConfig {
                refill_per_second: per_second as f64,
                burst: per_second as u32,
                // The Kubernetes write pace plays no part in the simulation.
                ..BudgetConfig::default()
            },
            max_per_tick: per_second as usize,
            breaker: BreakerConfig {
                open_ratio: 0.3,
                close_ratio: 0.1,
                min_resources: 5,
                window: Duration::from_secs(10),
                cooldown: Duration::from_secs(20),
                query: None,
                domain: crate::config::DomainBy::Cluster,
            },
            backoff: BackoffPolicy {
                base: Duration::from_secs(1),
                cap: Duration::from_secs(300),
                jitter: 1.0,
                quiet_window: Duration::from_secs(3600),
            },
            probe_every: Duration::from_secs(2),
            probe_batch: 1,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Held {
    crash_count: u32,
    not_before: Ms,
}

/// remedy: failing resources are held (paused, no calls) and released by
/// the planner through one cluster-wide token bucket, lowest crash_count
/// first, each after its own backoff. The breaker's sample is what remedy
/// observes each second: outcomes of the calls it released plus resources
/// newly reported failing. While open, only canaries go out; they are how
/// the breaker learns the outage is over (held resources are frozen).
pub struct Remedy {
    p: RemedyParams,
    bucket: TokenBucket,
    breaker: OutageBreaker,
    held: BTreeMap<u32, Held>,
    in_flight: Vec<bool>,
    obs_total: u32,
    obs_failing: u32,
    next_probe: Ms,
    was_open: bool,
    first_open: Option<Ms>,
    last_close: Option<Ms>,
    openings: u32,
    canaries: u64,
}

impl Remedy {
    pub fn new(p: RemedyParams, resources: u32) -> Self {
        Self {
            bucket: TokenBucket::from_config(&p.budget),
            breaker: OutageBreaker::new(&p.breaker),
            held: BTreeMap::new(),
            in_flight: vec![false; resources as usize],
            obs_total: 0,
            obs_failing: 0,
            next_probe: 0,
            was_open: false,
            first_open: None,
            last_close: None,
            openings: 0,
            canaries: 0,
            p,
        }
    }

    pub fn params(&self) -> &RemedyParams {
        &self.p
    }
}

fn ms(d: Duration) -> Ms {
    d.as_millis() as Ms
}

impl Policy for Remedy {
    fn name(&self) -> &'static str {
        "remedy"
    }

    fn resync_when_failing(&self) -> bool {
        false
    }

    fn tick(&mut self, now: Ms, releases: &mut Vec<(u32, Ms)>) {
        let at = Duration::from_millis(now);
        let sample = Sample {
            total: std::mem::take(&mut self.obs_total),
            failing: std::mem::take(&mut self.obs_failing),
            not_found: 0,
            external_ratio: None,
        };
        let open = self.breaker.observe(at, sample).is_open();
        if open && !self.was_open {
            self.openings += 1;
            self.first_open.get_or_insert(now);
        }
        if !open && self.was_open {
            self.last_close = Some(now);
        }
        self.was_open = open;
        if self.held.is_empty() {
            return;
        }
        let max = if open {
            if now < self.next_probe {
                return;
            }
            self.next_probe = now + ms(self.p.probe_every);
            self.p.probe_batch
        } else {
            self.p.max_per_tick
        };
        let candidates: Vec<Candidate<u32>> = self
            .held
            .iter()
            .map(|(id, h)| Candidate {
                key: *id,
                crash_count: h.crash_count,
                backoff_remaining: Duration::from_millis(h.not_before.saturating_sub(now)),
            })
            .collect();
        // Canaries deliberately go through the planner as if closed: same
        // order, same backoff, same budget, just a batch of `probe_batch`.
        let plan = plan_releases(&candidates, false, &mut self.bucket, at, max);
        if open {
            self.canaries += plan.release.len() as u64;
        }
        let n = plan.release.len() as u64;
        for (k, id) in plan.release.into_iter().enumerate() {
            self.held.remove(&id);
            if let Some(f) = self.in_flight.get_mut(id as usize) {
                *f = true;
            }
            // Spread the tick's releases over its second.
            releases.push((id, now + k as u64 * 1000 / n));
        }
    }

    fn on_outcome(
        &mut self,
        now: Ms,
        r: &Resource,
        _kind: CallKind,
        outcome: Outcome,
        rng: &mut StdRng,
    ) -> Option<Ms> {
        let released = self
            .in_flight
            .get_mut(r.id as usize)
            .is_some_and(std::mem::take);
        if outcome == Outcome::Success {
            if released {
                self.obs_total += 1;
            }
            self.held.remove(&r.id);
            return None;
        }
        // Held resources only call when released, so any other failure is
        // a resource newly reported failing.
        self.obs_total += 1;
        self.obs_failing += 1;
        if !r.broken {
            // Healthy but throttled: the controller's own requeue; remedy
            // never gates healthy resources.
            return Some(now + 1000);
        }
        let delay = self.p.backoff.jittered(r.failures, rng.random::<f64>());
        self.held.insert(
            r.id,
            Held {
                crash_count: r.failures,
                not_before: now + ms(delay),
            },
        );
        None
    }

    fn note(&self) -> String {
        let fmt = |t: Option<Ms>| t.map_or("-".to_string(), |t| format!("{} s", t / 1000));
        format!(
            "breaker opened {} time(s), first at {}, last closed at {}; {} canary calls; \
             budget {}/s burst {}",
            self.openings,
            fmt(self.first_open),
            fmt(self.last_close),
            self.canaries,
            self.p.budget.refill_per_second,
            self.p.budget.burst,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn resource(id: u32, failures: u32) -> Resource {
        Resource::test_new(id, failures)
    }

    fn rng() -> StdRng {
        StdRng::seed_from_u64(7)
    }

    #[test]
    fn exponential_saturates_at_the_cap() {
        assert_eq!(exponential(5, 1_000_000, 1), 5);
        assert_eq!(exponential(5, 1_000_000, 2), 10);
        assert_eq!(exponential(5, 1_000_000, 18), 655_360);
        assert_eq!(exponential(5, 1_000_000, 19), 1_000_000);
        assert_eq!(exponential(5, 1_000_000, u32::MAX), 1_000_000);
        assert_eq!(exponential(1000, 300_000, 0), 1000);
    }

    #[test]
    fn reserve_bucket_hands_out_future_slots() {
        let mut b = ReserveBucket::new(10.0, 2);
        assert_eq!(b.reserve(0), 0);
        assert_eq!(b.reserve(0), 0);
        assert_eq!(b.reserve(0), 100);
        assert_eq!(b.reserve(0), 200);
        // 1 s later: +10 tokens against a debt of 2, capped at burst.
        assert_eq!(b.reserve(1000), 0);
    }

    #[test]
    fn client_go_is_the_max_of_item_and_bucket_delays() {
        let mut p = ClientGoDefault::new(1);
        let mut r = rng();
        let first = resource(1, 1);
        // Burst of 100 is free: the 5 ms item delay dominates.
        assert_eq!(
            p.on_outcome(0, &first, CallKind::Retry, Outcome::Failed, &mut r),
            Some(5)
        );
        for _ in 0..99 {
            p.on_outcome(0, &first, CallKind::Retry, Outcome::Failed, &mut r);
        }
        // The 101st requeue in the same instant waits for the bucket.
        assert_eq!(
            p.on_outcome(0, &first, CallKind::Retry, Outcome::Failed, &mut r),
            Some(100)
        );
        assert_eq!(
            p.on_outcome(0, &first, CallKind::Resync, Outcome::Success, &mut r),
            None
        );
    }

    #[test]
    fn brupop_waits_two_to_the_crash_count_minutes_without_resync_bypass() {
        let mut p = Brupop::default();
        let mut r = rng();
        assert!(!p.resync_when_failing());
        assert_eq!(
            p.on_outcome(0, &resource(1, 1), CallKind::Retry, Outcome::Broke, &mut r),
            Some(120_000)
        );
        assert_eq!(
            p.on_outcome(
                0,
                &resource(1, 20),
                CallKind::Retry,
                Outcome::Failed,
                &mut r
            ),
            Some(86_400_000)
        );
    }

    #[test]
    fn full_jitter_stays_within_the_exponential() {
        let mut p = FullJitter;
        let mut r = rng();
        for failures in 1..30 {
            let at = p
                .on_outcome(
                    10,
                    &resource(1, failures),
                    CallKind::Retry,
                    Outcome::Failed,
                    &mut r,
                )
                .expect("retries");
            assert!((10..=10 + exponential(1000, 300_000, failures)).contains(&at));
        }
    }

    #[test]
    fn aws_quota_refuses_retries_when_empty_and_refunds_on_success() {
        let mut p = AwsStandardRetry::new(2, 1);
        let mut r = rng();
        let res = resource(0, 1);
        for _ in 0..100 {
            assert!(p.admit(0, &res, CallKind::Retry, &mut r));
            p.on_outcome(0, &res, CallKind::Retry, Outcome::Failed, &mut r);
        }
        assert_eq!(p.quota[0], 0);
        assert!(!p.admit(0, &res, CallKind::Retry, &mut r), "quota empty");
        assert!(
            p.admit(0, &res, CallKind::Resync, &mut r),
            "first attempts are free"
        );
        p.on_outcome(0, &res, CallKind::Resync, Outcome::Success, &mut r);
        assert_eq!(p.quota[0], 1);
        for _ in 0..4 {
            p.on_outcome(0, &res, CallKind::Resync, Outcome::Success, &mut r);
        }
        assert!(p.admit(0, &res, CallKind::Retry, &mut r));
        assert_eq!(p.quota[0], 0);
        p.on_outcome(0, &res, CallKind::Retry, Outcome::Success, &mut r);
        assert_eq!(p.quota[0], 5, "a successful retry refunds its cost");
    }

    #[test]
    fn sre_throttle_rejects_once_accepts_fall_behind_and_forgets_after_the_window() {
        let mut p = SreAdaptive::new(1);
        let mut r = rng();
        let res = resource(0, 1);
        // 200 failing requests, no accepts: rejection probability → ~1.
        for _ in 0..200 {
            if p.admit(0, &res, CallKind::Retry, &mut r) {
                p.on_outcome(0, &res, CallKind::Retry, Outcome::Failed, &mut r);
            }
        }
        let admitted = (0..100)
            .filter(|_| p.admit(1000, &res, CallKind::Resync, &mut r))
            .count();
        assert!(admitted < 5, "{admitted} admitted");
        // Two minutes later the window is empty again.
        assert!(p.admit(122_000, &res, CallKind::Resync, &mut r));
        assert_eq!(p.windows[0].requests, 1);
        assert_eq!(p.windows[0].accepts, 0);
    }

    #[test]
    fn remedy_params_fit_the_quota() {
        let s = Scenario::default_for(super::super::Mode::Correlated);
        let p = RemedyParams::for_scenario(&s);
        // 97 usable − ceil(10000/600) = 17 resyncs per second.
        assert_eq!(p.budget.refill_per_second, 80.0);
        assert_eq!(p.budget.burst, 80);
        assert_eq!(p.max_per_tick, 80);
        assert!(p.backoff.validate().is_ok());
        let tiny = Scenario { api_limit: 1, ..s };
        assert_eq!(RemedyParams::for_scenario(&tiny).max_per_tick, 1);
    }

    #[test]
    fn remedy_holds_while_open_and_releases_lowest_crash_first() {
        let s = Scenario {
            resources: 20,
            controllers: 1,
            ..Scenario::default_for(super::super::Mode::Correlated)
        };
        let mut p = Remedy::new(RemedyParams::for_scenario(&s), 20);
        let mut r = rng();
        let mut out = Vec::new();
        for id in 0..10 {
            let res = resource(id, 1 + id % 3);
            assert_eq!(
                p.on_outcome(0, &res, CallKind::Retry, Outcome::Broke, &mut r),
                None
            );
        }
        // Ten resources newly failing: the breaker opens, nothing leaves
        // except the first canary.
        p.tick(1000, &mut out);
        assert!(p.breaker.is_open());
        assert_eq!(out.len(), 1);
        let canary = out[0].0;
        assert_eq!(canary % 3, 0, "the canary has the lowest crash count");
        out.clear();
        p.tick(2000, &mut out);
        assert!(out.is_empty(), "canaries only every probe_every");
        // The canary succeeds; canaries keep succeeding until the breaker
        // has been calm for window + cooldown, then everyone is released.
        let mut now = 2000;
        let mut left = vec![canary];
        let mut in_flight = vec![canary];
        while p.breaker.is_open() {
            for id in in_flight.drain(..) {
                let healthy = resource(id, 0);
                p.on_outcome(now, &healthy, CallKind::Retry, Outcome::Success, &mut r);
            }
            now += 1000;
            p.tick(now, &mut out);
            in_flight.extend(out.iter().map(|(id, _)| *id));
            left.extend(out.drain(..).map(|(id, _)| id));
            assert!(now < 60_000, "breaker never closed");
        }
        let closed_at = now;
        for _ in 0..5 {
            now += 1000;
            p.tick(now, &mut out);
            left.extend(out.drain(..).map(|(id, _)| id));
        }
        assert!(closed_at >= 1000 + 10_000 + 20_000, "window + cooldown");
        left.sort_unstable();
        assert_eq!(left, (0..10).collect::<Vec<_>>(), "each released once");
        assert!(p.held.is_empty());
    }
}
