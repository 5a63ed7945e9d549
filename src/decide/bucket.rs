//! The retry budget: a token bucket. Time is injected as `now: Duration`, a
//! monotonic offset from an arbitrary origin chosen by the caller (the
//! daemon uses process uptime, the simulator simulated time). Time going
//! backwards is treated as no time passing, never as an error: a clock
//! hiccup must not mint tokens.

use crate::config::BudgetConfig;
use std::time::Duration;

/// Slack for float rounding: refills accumulated in many small steps can end
/// a hair below a whole token, which must still count as one.
const TOKEN_EPSILON: f64 = 1e-9;

/// A token bucket: `refill_per_second` tokens are added continuously, up to
/// `burst`. One token pays for one release.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBucket {
    refill_per_second: f64,
    burst: u32,
    tokens: f64,
    /// Latest `now` seen; `None` until the first use, so a new bucket is full
    /// whatever origin the caller's clock has.
    last: Option<Duration>,
}

impl TokenBucket {
    /// Starts full. A non-finite or negative rate is treated as zero (no
    /// refill) rather than poisoning the arithmetic with NaN.
    pub fn new(refill_per_second: f64, burst: u32) -> Self {
        let refill_per_second = if refill_per_second.is_finite() && refill_per_second > 0.0 {
            refill_per_second
        } else {
            0.0
        };
        Self {
            refill_per_second,
            burst,
            tokens: f64::from(burst),
            last: None,
        }
    }

    pub fn from_config(c: &BudgetConfig) -> Self {
        Self::new(c.refill_per_second, c.burst)
    }

    pub fn refill_per_second(&self) -> f64 {
        self.refill_per_second
    }

    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// Tokens and clock after letting time run to `now` (never backwards).
    fn advanced(&self, now: Duration) -> (f64, Duration) {
        let Some(last) = self.last else {
            return (self.tokens, now);
        };
        let elapsed = now.saturating_sub(last);
        let refill = elapsed.as_secs_f64() * self.refill_per_second;
        let tokens = (self.tokens + refill).clamp(0.0, f64::from(self.burst));
        (tokens, now.max(last))
    }

    /// Tokens available at `now`, within `0..=burst`.
    pub fn tokens(&self, now: Duration) -> f64 {
        self.advanced(now).0
    }

    /// Takes one token if there is one.
    pub fn try_take(&mut self, now: Duration) -> bool {
        let (tokens, last) = self.advanced(now);
        self.last = Some(last);
        if tokens + TOKEN_EPSILON >= 1.0 {
            // Clamp: the epsilon may take us a hair below zero.
            self.tokens = (tokens - 1.0).max(0.0);
            true
        } else {
            self.tokens = tokens;
            false
        }
    }

    /// How long until `try_take` can succeed; `Duration::MAX` if never
    /// (zero burst or zero refill with the bucket empty).
    pub fn time_until_token(&self, now: Duration) -> Duration {
        let tokens = self.tokens(now);
        if tokens + TOKEN_EPSILON >= 1.0 {
            return Duration::ZERO;
        }
        if self.burst == 0 || self.refill_per_second == 0.0 {
            return Duration::MAX;
        }
        let secs = (1.0 - tokens) / self.refill_per_second;
        // Round up to the next nanosecond so waiting exactly this long is
        // always enough.
        let nanos = (secs * 1e9).ceil();
        if nanos >= u64::MAX as f64 {
            return Duration::MAX;
        }
        Duration::from_nanos(nanos as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn bucket_starts_full_refills_and_caps_at_burst() {
        let mut b = TokenBucket::new(2.0, 3);
        let t0 = secs(1000);
        assert_eq!(b.tokens(t0), 3.0);
        assert!(b.try_take(t0));
        assert!(b.try_take(t0));
        assert!(b.try_take(t0));
        assert!(!b.try_take(t0));
        assert_eq!(b.tokens(t0), 0.0);
        assert_eq!(b.time_until_token(t0), Duration::from_millis(500));
        assert!(!b.try_take(t0 + Duration::from_millis(499)));
        assert!(b.try_take(t0 + Duration::from_millis(500)));
        assert_eq!(b.tokens(t0 + secs(3600)), 3.0);
    }

    #[test]
    fn bucket_ignores_time_going_backwards() {
        let mut b = TokenBucket::new(1.0, 2);
        assert!(b.try_take(secs(100)));
        assert!(b.try_take(secs(100)));
        // Going back neither refills nor moves the clock back: returning to
        // 100 s later must not count the same second twice.
        assert_eq!(b.tokens(secs(50)), 0.0);
        assert!(!b.try_take(secs(50)));
        assert!(!b.try_take(secs(100)));
        assert!(b.try_take(secs(101)));
    }

    #[test]
    fn bucket_degenerate_parameters_never_release_or_panic() {
        let mut zero_burst = TokenBucket::new(10.0, 0);
        assert!(!zero_burst.try_take(secs(1)));
        assert_eq!(zero_burst.time_until_token(secs(1)), Duration::MAX);
        let mut nan = TokenBucket::new(f64::NAN, 1);
        assert!(nan.try_take(secs(1)));
        assert!(!nan.try_take(secs(1_000_000)));
        assert_eq!(nan.time_until_token(secs(2)), Duration::MAX);
        let tiny = TokenBucket::new(1e-300, 1);
        let mut t = tiny.clone();
        assert!(t.try_take(Duration::ZERO));
        assert_eq!(t.time_until_token(Duration::ZERO), Duration::MAX);
    }

    #[test]
    fn bucket_many_small_refills_add_up_to_a_token() {
        let mut b = TokenBucket::new(0.1, 1);
        assert!(b.try_take(Duration::ZERO));
        let mut now = Duration::ZERO;
        // Failed takes still advance the bucket, so the refill is summed in
        // ten 0.1 steps, which in f64 is 0.9999999999999999.
        for _ in 0..9 {
            now += secs(1);
            assert!(!b.try_take(now), "no token before 10 s");
        }
        now += secs(1);
        assert!(b.try_take(now), "ten refills of 0.1 are one token");
    }

    proptest! {
        #[test]
        fn bucket_stays_in_bounds_and_never_over_releases(
            rate in 0.0f64..50.0,
            burst in 0u32..20,
            steps in proptest::collection::vec((-5_000i64..5_000, any::<bool>()), 1..200),
        ) {
            let mut b = TokenBucket::new(rate, burst);
            let mut now = Duration::from_secs(10_000);
            // The bucket's clock starts at its first try_take (full then);
            // from there only the forward span can mint tokens.
            let mut first: Option<Duration> = None;
            let mut max_now = Duration::ZERO;
            let mut taken = 0u64;
            for (delta_ms, take) in steps {
                now = if delta_ms >= 0 {
                    now + Duration::from_millis(delta_ms as u64)
                } else {
                    now.saturating_sub(Duration::from_millis(delta_ms.unsigned_abs()))
                };
                if take {
                    let start = *first.get_or_insert(now);
                    max_now = max_now.max(now).max(start);
                    if b.try_take(now) {
                        taken += 1;
                    }
                }
                let t = b.tokens(now);
                prop_assert!((0.0..=f64::from(burst)).contains(&t), "tokens {t}");
                let wait = b.time_until_token(now);
                if wait != Duration::MAX {
                    // The bucket never moves its clock back, so wait from
                    // the latest time it has seen.
                    let mut probe = b.clone();
                    let seen = if first.is_some() { now.max(max_now) } else { now };
                    prop_assert!(probe.try_take(seen + wait), "waited {wait:?}");
                }
            }
            let span = first.map_or(0.0, |f| (max_now - f).as_secs_f64());
            prop_assert!(taken as f64 <= f64::from(burst) + rate * span + 1e-6);
        }
    }
}
