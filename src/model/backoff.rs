//! The brupop backoff model, generalised: delay = min(base·2^n, cap) where n
//! is the crash count, with optional jitter. Pure and saturating: a huge crash
//! count or a huge base never overflows, it is simply capped.
//!
//! A profile may instead name the exact rule of the controller that owns the
//! resource ([`BackoffModel`]): what remedy exports is then when that
//! controller really retries, and remedy waits for nothing of its own.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BackoffPolicy {
    /// The delay after the first failure; doubled by each one after it.
    /// Also the pace of retries (`remediation.retry`) in a failure domain
    /// whose retries fail: one per `base` there, whatever each resource's
    /// backoff (docs/concepts/how-it-decides.md, "Retry").
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::model::DurationSchema")]
    pub base: Duration,
    /// The longest delay.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::model::DurationSchema")]
    pub cap: Duration,
    /// Fraction of the delay randomised away (0 = none, 1 = full jitter).
    pub jitter: f64,
    /// A failure older than this no longer delays anything: counters are stale.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::model::DurationSchema")]
    pub quiet_window: Duration,
}

impl Default for BackoffPolicy {
    /// brupop: 2^crash_count minutes, capped at 24h.
    fn default() -> Self {
        Self {
            base: Duration::from_secs(60),
            cap: Duration::from_secs(24 * 3600),
            jitter: 0.0,
            quiet_window: Duration::from_secs(3600),
        }
    }
}

/// The retry rule of a real controller, for profiles whose controller
/// backs off by itself (`backoff: brupop`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackoffModel {
    /// The brupop controller (bottlerocket-update-operator v1.4, checked in
    /// docs/upstream-behaviour.md): it proceeds once
    /// `floor(minutes since the failure) > 2^crash_count`, or after 1440
    /// whole minutes, so after 2^n + 1 minutes, at most 1441; and it never
    /// forgets a count (no quiet window: only the agent resets it).
    Brupop,
}

/// brupop retries after this many whole minutes at most.
const BRUPOP_CAP_MINUTES: u64 = 1441;

impl BackoffModel {
    pub fn delay(self, crash_count: u32) -> Duration {
        match self {
            Self::Brupop => {
                let minutes = 1u64
                    .checked_shl(crash_count)
                    .filter(|m| *m < BRUPOP_CAP_MINUTES)
                    .map_or(BRUPOP_CAP_MINUTES, |m| (m + 1).min(BRUPOP_CAP_MINUTES));
                Duration::from_secs(minutes * 60)
            }
        }
    }
}

/// The backoff that applies to one resource: its profile's controller model
/// if it names one, else the configured policy.
#[derive(Clone, Copy, Debug)]
pub enum Effective<'a> {
    Policy(&'a BackoffPolicy),
    Model(BackoffModel),
}

impl Effective<'_> {
    pub fn delay(self, crash_count: u32) -> Duration {
        match self {
            Self::Policy(p) => p.delay(crash_count),
            Self::Model(m) => m.delay(crash_count),
        }
    }

    /// When the delay ends: failure time + delay (none without a failure
    /// time).
    pub fn not_before(
        self,
        crash_count: u32,
        failure_time: Option<DateTime<Utc>>,
    ) -> Option<DateTime<Utc>> {
        let t = failure_time?;
        let d = chrono::Duration::from_std(self.delay(crash_count)).ok()?;
        t.checked_add_signed(d)
    }

    /// Still to wait at `now` (zero once passed, or without a failure time).
    pub fn remaining(
        self,
        crash_count: u32,
        failure_time: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Duration {
        self.not_before(crash_count, failure_time)
            .and_then(|at| (at - now).to_std().ok())
            .unwrap_or(Duration::ZERO)
    }

    /// What remedy itself waits at `now` before it releases or remediates.
    /// Under a controller model nothing: the model is when that controller
    /// retries by itself, and remediating a verified recovery exists to
    /// spare that wait (up to a day for brupop); the budget paces it.
    pub fn wait(
        self,
        crash_count: u32,
        failure_time: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Duration {
        match self {
            Self::Policy(_) => self.remaining(crash_count, failure_time, now),
            Self::Model(_) => Duration::ZERO,
        }
    }

    /// Whether its counters ask for a wait at all (its backoff delay is
    /// then exported): a crash count, or under a controller's rule a
    /// failure time alone, whatever the count: brupop takes only a null
    /// one for "never crashed", and waits 2 minutes at crash_count 0.
    pub fn backs_off(self, crash_count: u32, failure_time: Option<DateTime<Utc>>) -> bool {
        crash_count > 0 || (matches!(self, Self::Model(_)) && failure_time.is_some())
    }

    /// When the profile's controller retries by itself, while that is
    /// still to come: none under remedy's own policy, without a failure
    /// time, or once it has passed.
    pub fn controller_retries_at(
        self,
        crash_count: u32,
        failure_time: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        match self {
            Self::Policy(_) => None,
            Self::Model(_) => self
                .not_before(crash_count, failure_time)
                .filter(|at| *at > now),
        }
    }

    /// Whether the counters no longer count. A controller model never
    /// forgets: the controller itself does not.
    pub fn is_stale(self, failure_time: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
        match self {
            Self::Policy(p) => p.is_stale(failure_time, now),
            Self::Model(_) => false,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BackoffError {
    #[error("backoff.base must be greater than zero")]
    ZeroBase,
    #[error("backoff.cap ({cap:?}) must be at least backoff.base ({base:?})")]
    CapBelowBase { base: Duration, cap: Duration },
    #[error("backoff.jitter must be within 0..=1, got {0}")]
    Jitter(f64),
}

impl BackoffPolicy {
    pub fn validate(&self) -> Result<(), BackoffError> {
        if self.base.is_zero() {
            return Err(BackoffError::ZeroBase);
        }
        if self.cap < self.base {
            return Err(BackoffError::CapBelowBase {
                base: self.base,
                cap: self.cap,
            });
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(BackoffError::Jitter(self.jitter));
        }
        Ok(())
    }

    /// min(base·2^n, cap) without jitter.
    pub fn delay(&self, crash_count: u32) -> Duration {
        let factor = 1u32.checked_shl(crash_count).unwrap_or(0);
        if factor == 0 {
            return self.cap;
        }
        self.base
            .checked_mul(factor)
            .map_or(self.cap, |d| d.min(self.cap))
    }

    /// The delay with jitter applied; `unit` is a uniform sample in [0, 1)
    /// supplied by the caller so this stays deterministic under test.
    pub fn jittered(&self, crash_count: u32, unit: f64) -> Duration {
        let d = self.delay(crash_count);
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.0
        };
        d.mul_f64(1.0 - self.jitter * unit)
    }

    /// When the resource may be retried: failure time + delay. Without a
    /// failure time there is nothing to wait for.
    pub fn not_before(
        &self,
        crash_count: u32,
        failure_time: Option<DateTime<Utc>>,
    ) -> Option<DateTime<Utc>> {
        Effective::Policy(self).not_before(crash_count, failure_time)
    }

    /// Seconds still to wait at `now` (zero once the delay has passed).
    pub fn remaining(
        &self,
        crash_count: u32,
        failure_time: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Duration {
        self.not_before(crash_count, failure_time)
            .and_then(|t| (t - now).to_std().ok())
            .unwrap_or(Duration::ZERO)
    }

    /// This policy, or `model` when a profile names one.
    pub fn effective(&self, model: Option<BackoffModel>) -> Effective<'_> {
        model.map_or(Effective::Policy(self), Effective::Model)
    }

    /// Counters are stale when the last failure is older than the quiet window.
    pub fn is_stale(&self, failure_time: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
        match failure_time {
            None => false,
            Some(t) => (now - t).to_std().is_ok_and(|age| age >= self.quiet_window),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn brupop() -> BackoffPolicy {
        BackoffPolicy::default()
    }

    #[test]
    fn brupop_minutes_doubling_capped_at_a_day() {
        let p = brupop();
        assert_eq!(p.delay(0), Duration::from_secs(60));
        assert_eq!(p.delay(1), Duration::from_secs(120));
        assert_eq!(p.delay(5), Duration::from_secs(32 * 60));
        assert_eq!(p.delay(10), Duration::from_secs(1024 * 60));
        assert_eq!(p.delay(11), Duration::from_secs(24 * 3600));
        assert_eq!(p.delay(u32::MAX), Duration::from_secs(24 * 3600));
    }

    #[test]
    fn not_before_and_remaining() {
        let p = brupop();
        let t: DateTime<Utc> = "2026-12-02T10:00:00Z".parse().unwrap();
        assert_eq!(
            p.not_before(2, Some(t)),
            Some("2026-12-02T10:04:00Z".parse().unwrap())
        );
        let now: DateTime<Utc> = "2026-12-02T10:03:00Z".parse().unwrap();
        assert_eq!(p.remaining(2, Some(t), now), Duration::from_secs(60));
        let later: DateTime<Utc> = "2026-12-02T11:00:00Z".parse().unwrap();
        assert_eq!(p.remaining(2, Some(t), later), Duration::ZERO);
        assert_eq!(p.remaining(2, None, now), Duration::ZERO);
        assert!(p.is_stale(Some(t), later));
        assert!(!p.is_stale(Some(t), now));
        assert!(!p.is_stale(None, later));
    }

    /// The real brupop controller proceeds once floor(minutes) > 2^n, or
    /// after 1440 minutes: 2, 3, 5, 9, 17, 33 minutes for n = 0..5, then
    /// 1025 at n = 10 and 1441 from n = 11 (docs/upstream-behaviour.md).
    #[test]
    fn the_brupop_model_waits_for_what_the_controller_waits_for() {
        let m = BackoffModel::Brupop;
        for (n, minutes) in [
            (0, 2),
            (1, 3),
            (2, 5),
            (3, 9),
            (4, 17),
            (5, 33),
            (10, 1025),
            (11, 1441),
            (40, 1441),
            (u32::MAX, 1441),
        ] {
            assert_eq!(m.delay(n), Duration::from_secs(minutes * 60), "n = {n}");
        }
        // The controller's own test: floor(elapsed minutes) > 2^n.
        for n in 0..12u32 {
            let delay = m.delay(n).as_secs() / 60;
            let proceeds = |minutes: u64| minutes > (1u64 << n).min(1440);
            assert!(proceeds(delay) && !proceeds(delay - 1), "n = {n}");
        }
        let policy = BackoffPolicy::default();
        let e = policy.effective(Some(m));
        let t: DateTime<Utc> = "2026-12-02T10:00:00Z".parse().unwrap();
        let now: DateTime<Utc> = "2026-12-02T10:04:00Z".parse().unwrap();
        assert_eq!(e.remaining(2, Some(t), now), Duration::from_secs(60));
        // Never stale: a day-old count still orders brupop's retries.
        let day: DateTime<Utc> = "2026-12-03T10:00:00Z".parse().unwrap();
        assert!(!e.is_stale(Some(t), day));
        assert!(policy.effective(None).is_stale(Some(t), day));
        assert_eq!(policy.effective(None).delay(2), policy.delay(2));
    }

    /// remedy waits out its own policy, never a controller's: resetting a
    /// shadow's counters after a verified recovery is what spares brupop's
    /// wait (the stack test remediates crash_count 3 shadows within
    /// seconds, not 9 minutes).
    #[test]
    fn remedy_waits_for_its_policy_not_for_a_controllers_own_retry() {
        let policy = BackoffPolicy::default();
        let t: DateTime<Utc> = "2026-12-02T10:00:00Z".parse().unwrap();
        let now: DateTime<Utc> = "2026-12-02T10:01:00Z".parse().unwrap();
        let model = policy.effective(Some(BackoffModel::Brupop));
        assert_eq!(model.remaining(3, Some(t), now), Duration::from_secs(480));
        assert_eq!(model.wait(3, Some(t), now), Duration::ZERO);
        let own = policy.effective(None);
        assert_eq!(own.wait(3, Some(t), now), own.remaining(3, Some(t), now));
        assert_eq!(own.wait(3, Some(t), now), Duration::from_secs(420));
    }

    /// #38.14: brupop proceeds only once `floor(minutes) > 2^crash_count`
    /// after a failure time, so at crash_count 0 too: 2 minutes.
    #[test]
    fn a_failure_time_alone_is_a_wait_under_brupops_rule() {
        let policy = BackoffPolicy::default();
        let brupop = policy.effective(Some(BackoffModel::Brupop));
        let t: DateTime<Utc> = "2026-12-02T10:00:00Z".parse().unwrap();
        let now = t + chrono::Duration::seconds(30);
        assert!(brupop.backs_off(0, Some(t)));
        assert_eq!(brupop.remaining(0, Some(t), now), Duration::from_secs(90));
        assert_eq!(
            brupop.controller_retries_at(0, Some(t), now),
            Some(t + chrono::Duration::seconds(120))
        );
        let later = t + chrono::Duration::seconds(121);
        assert_eq!(brupop.remaining(0, Some(t), later), Duration::ZERO);
        assert_eq!(brupop.controller_retries_at(0, Some(t), later), None);
        // Never crashed: no failure time, no wait.
        assert!(!brupop.backs_off(0, None));
        assert_eq!(brupop.controller_retries_at(0, None, now), None);
        assert!(brupop.backs_off(1, None));
        // remedy's own policy: its counter is what counts (a breaker-domain
        // hold records a failure time with count 0), and no controller
        // retries by itself.
        let own = policy.effective(None);
        assert!(!own.backs_off(0, Some(t)));
        assert!(own.backs_off(2, Some(t)));
        assert_eq!(own.controller_retries_at(2, Some(t), now), None);
    }

    #[test]
    fn invalid_policies_are_rejected() {
        let mut p = brupop();
        p.base = Duration::ZERO;
        assert!(matches!(p.validate(), Err(BackoffError::ZeroBase)));
        p = brupop();
        p.cap = Duration::from_secs(1);
        assert!(matches!(
            p.validate(),
            Err(BackoffError::CapBelowBase { .. })
        ));
        p = brupop();
        p.jitter = 1.5;
        assert!(matches!(p.validate(), Err(BackoffError::Jitter(_))));
        assert!(brupop().validate().is_ok());
    }

    proptest! {
        #[test]
        fn delay_is_monotonic_and_bounded(base_ms in 1u64..10_000_000, cap_mul in 1u32..100_000, n in 0u32..200) {
            let base = Duration::from_millis(base_ms);
            let p = BackoffPolicy { base, cap: base * cap_mul, jitter: 0.5, quiet_window: Duration::from_secs(1) };
            let d = p.delay(n);
            prop_assert!(d >= p.base.min(p.cap));
            prop_assert!(d <= p.cap);
            prop_assert!(p.delay(n.saturating_add(1)) >= d);
        }

        #[test]
        fn jitter_stays_within_bounds(n in 0u32..64, unit in proptest::num::f64::ANY, jitter in 0.0f64..=1.0) {
            let p = BackoffPolicy { jitter, ..BackoffPolicy::default() };
            let d = p.jittered(n, unit);
            prop_assert!(d <= p.delay(n));
            prop_assert!(d >= p.delay(n).mul_f64(1.0 - jitter) - Duration::from_nanos(1));
        }

        #[test]
        fn not_before_never_panics(n in any::<u32>(), secs in -10_000_000_000i64..10_000_000_000) {
            let p = brupop();
            let t = DateTime::<Utc>::from_timestamp(secs, 0);
            let _ = p.not_before(n, t);
        }
    }
}
