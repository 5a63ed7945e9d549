//! Retries of stuck resources (`remediation.retry`), paced per failure
//! domain once a retry there has failed.
//!
//! Each stuck resource has its own backoff (failure time + base·2^n). In a
//! zone that fails for minutes (60% of its calls), those backoffs grow past
//! the cloud's return: the bench's partial outage left 3 servers waiting
//! 8-16 min after it. And every retry costs the controller a reconcile's
//! worth of calls (CAPO v0.14.7: about 60), whichever server it is. So once
//! a retry in a domain fails, the domain's failure is what the retries
//! wait on, not each resource's: the domain tries one of them (lowest
//! crash count first) every `every`, ignoring their own backoffs, until one
//! succeeds. A success says the domain answers: the others go without
//! their backoff, 2 in flight after one success, 4 after two, so one lucky
//! retry in a zone failing 60% lets two more go, not the zone. A domain
//! with no failed retry, or none for `STALE_TRIES` intervals, goes by each
//! resource's own backoff. Pure; the caller passes the clock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Intervals without a retry or an answer after which a domain's record
/// is forgotten: a lone failure days later goes by its own backoff.
const STALE_TRIES: u32 = 10;

/// Most retries in flight in an answering domain (2^6): the budget paces
/// beyond that.
const MAX_DOUBLINGS: u32 = 6;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Zone {
    last_try: Option<Duration>,
    last_seen: Duration,
    /// The last answer to a retry here was a failure.
    failing: bool,
    /// Successful answers in a row.
    ok_streak: u32,
}

/// How a domain's stuck resources go this tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Each by its own backoff: no retry here has failed lately.
    Own,
    /// Its retries fail: the lowest crash count goes now, backoff ignored;
    /// the others wait.
    One,
    /// Its retries fail and its turn is this far off: all wait.
    Wait(Duration),
    /// A retry here succeeded: up to this many more go now, backoff
    /// ignored.
    Answering(usize),
}

#[derive(Clone, Debug)]
pub struct ZoneRetries {
    every: Duration,
    zones: BTreeMap<Arc<str>, Zone>,
}

impl ZoneRetries {
    pub fn new(every: Duration) -> Self {
        Self {
            every: every.max(Duration::from_secs(1)),
            zones: BTreeMap::new(),
        }
    }

    pub fn every(&self) -> Duration {
        self.every
    }

    /// A retry in `domain` was made at `now`.
    pub fn tried(&mut self, domain: &Arc<str>, now: Duration) {
        let z = self.zones.entry(domain.clone()).or_insert(Zone {
            last_try: None,
            last_seen: now,
            failing: false,
            ok_streak: 0,
        });
        z.last_try = Some(now);
        z.last_seen = now;
    }

    /// A retry's answer: the resource's first fresh state after it.
    pub fn answered(&mut self, domain: &Arc<str>, ok: bool, now: Duration) {
        let z = self.zones.entry(domain.clone()).or_insert(Zone {
            last_try: None,
            last_seen: now,
            failing: false,
            ok_streak: 0,
        });
        z.last_seen = now;
        if ok {
            z.failing = false;
            z.ok_streak = z.ok_streak.saturating_add(1);
        } else {
            z.failing = true;
            z.ok_streak = 0;
        }
    }

    /// How `domain`'s stuck resources go at `now`, with `in_flight` of its
    /// retries not answered yet.
    pub fn gate(&mut self, domain: &str, now: Duration, in_flight: usize) -> Gate {
        let stale = self.every.saturating_mul(STALE_TRIES);
        let Some(z) = self.zones.get(domain).copied() else {
            return Gate::Own;
        };
        if now.saturating_sub(z.last_seen) >= stale {
            self.zones.remove(domain);
            return Gate::Own;
        }
        if z.failing {
            let next = z.last_try.map_or(now, |t| t + self.every);
            return if now >= next {
                Gate::One
            } else {
                Gate::Wait(next - now)
            };
        }
        if z.ok_streak > 0 {
            let room = 1usize << z.ok_streak.min(MAX_DOUBLINGS);
            return Gate::Answering(room.saturating_sub(in_flight));
        }
        Gate::Own
    }

    /// When `domain` tries its next stuck resource, while its retries fail.
    pub fn next_try(&self, domain: &str) -> Option<Duration> {
        let z = self.zones.get(domain)?;
        if !z.failing {
            return None;
        }
        z.last_try.map(|t| t + self.every)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn az() -> Arc<str> {
        Arc::from("az2")
    }

    #[test]
    fn without_a_failed_retry_each_resource_goes_by_its_own_backoff() {
        let mut z = ZoneRetries::new(S(60));
        assert_eq!(z.gate("az2", S(0), 0), Gate::Own);
        z.tried(&az(), S(0));
        assert_eq!(z.gate("az2", S(1), 1), Gate::Own, "no answer yet");
        assert_eq!(z.next_try("az2"), None);
    }

    #[test]
    fn a_failing_domain_tries_one_per_interval_whatever_the_backoffs() {
        let mut z = ZoneRetries::new(S(60));
        z.tried(&az(), S(100));
        z.answered(&az(), false, S(105));
        assert_eq!(z.gate("az2", S(120), 0), Gate::Wait(S(40)));
        assert_eq!(z.next_try("az2"), Some(S(160)));
        assert_eq!(z.gate("az2", S(160), 0), Gate::One);
        z.tried(&az(), S(160));
        assert_eq!(z.gate("az2", S(161), 1), Gate::Wait(S(59)));
        assert_eq!(z.gate("az1", S(161), 0), Gate::Own, "per domain");
    }

    #[test]
    fn successes_double_how_many_go_and_a_failure_goes_back_to_one() {
        let mut z = ZoneRetries::new(S(60));
        z.tried(&az(), S(0));
        z.answered(&az(), false, S(5));
        z.tried(&az(), S(60));
        z.answered(&az(), true, S(65));
        assert_eq!(z.gate("az2", S(65), 0), Gate::Answering(2));
        assert_eq!(z.gate("az2", S(65), 2), Gate::Answering(0));
        z.answered(&az(), true, S(70));
        assert_eq!(z.gate("az2", S(70), 1), Gate::Answering(3));
        z.answered(&az(), false, S(75));
        assert_eq!(z.gate("az2", S(75), 0), Gate::Wait(S(45)));
        for i in 0..20 {
            z.answered(&az(), true, S(80 + i));
        }
        assert_eq!(z.gate("az2", S(100), 0), Gate::Answering(64));
    }

    #[test]
    fn a_record_untouched_for_ten_intervals_is_forgotten() {
        let mut z = ZoneRetries::new(S(60));
        z.tried(&az(), S(0));
        z.answered(&az(), false, S(5));
        assert_eq!(z.gate("az2", S(604), 0), Gate::One);
        assert_eq!(z.gate("az2", S(605), 0), Gate::Own);
        assert_eq!(z.next_try("az2"), None);
    }
}
