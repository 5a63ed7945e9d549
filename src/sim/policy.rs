//! The retry policies compared by the simulator. Each one only decides when
//! a failing resource calls again (and, for client-side throttles, whether a
//! call may leave at all); the engine owns the cloud and the bookkeeping.

use super::model::{CallKind, Ms, Outcome, Resource};
use crate::model::backoff::BackoffPolicy;
use rand::Rng;
use rand::rngs::StdRng;

pub trait Policy {
    fn name(&self) -> &'static str;

    /// Whether the periodic resync of a failing resource reaches the cloud.
    /// True for workqueue controllers (a resync `Add` bypasses the rate
    /// limiter); false where the backoff is checked inside the reconcile
    /// (brupop) or the resource is paused (remedy).
    fn resync_when_failing(&self) -> bool {
        true
    }

    /// Whether the controller skips the resource's reconcile altogether
    /// (no call, no outcome): CAPI providers skip paused resources and
    /// those with a failure status.
    fn skips(&self, _r: &Resource) -> bool {
        false
    }

    /// Called at the start of every simulated second; may pause resources
    /// and release them by pushing (resource, call time).
    fn tick(&mut self, _now: Ms, _res: &mut [Resource], _releases: &mut Vec<(u32, Ms)>) {}

    /// Resources it holds now (plots).
    fn held(&self) -> u32 {
        0
    }

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
}
