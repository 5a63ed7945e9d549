//! Failed goals, retried with backoff until done. A goal fails when the
//! apiserver refuses or drops a write (5xx, timeouts, conflicts past their
//! bound) or when the object will not converge (a controller writes back
//! what remedy clears). Without this, a failed goal would wait until someone
//! else changed the object, which after an apiserver restart may be never.
//! Pure: the caller passes the clock.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

/// First retry delay; doubled per consecutive failure up to [`MAX_DELAY`].
pub const FIRST_DELAY: Duration = Duration::from_secs(2);
pub const MAX_DELAY: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// Consecutive failures.
    pub failures: u32,
    /// Not planned again before this time.
    pub not_before: Duration,
}

#[derive(Debug)]
pub struct Retries<K> {
    failed: HashMap<K, Attempt>,
}

impl<K> Default for Retries<K> {
    fn default() -> Self {
        Self {
            failed: HashMap::new(),
        }
    }
}

/// The delay after `failures` consecutive failures (1 → FIRST_DELAY).
pub fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_DELAY.saturating_mul(1u32 << doublings).min(MAX_DELAY)
}

impl<K: Hash + Eq + Clone> Retries<K> {
    /// Records a failure at `now`; returns the attempt, with when to retry.
    pub fn failed(&mut self, key: &K, now: Duration) -> Attempt {
        let failures = self.failed.get(key).map_or(0, |a| a.failures) + 1;
        let a = Attempt {
            failures,
            not_before: now + delay(failures),
        };
        self.failed.insert(key.clone(), a);
        a
    }

    /// The goal completed: the next failure starts from the first delay.
    pub fn succeeded(&mut self, key: &K) {
        self.failed.remove(key);
    }

    /// Whether the key must still wait at `now`.
    pub fn waiting(&self, key: &K, now: Duration) -> bool {
        self.failed.get(key).is_some_and(|a| now < a.not_before)
    }

    pub fn get(&self, key: &K) -> Option<Attempt> {
        self.failed.get(key).copied()
    }

    /// Keys still waiting at `now`.
    pub fn waiting_keys(&self, now: Duration) -> impl Iterator<Item = &K> {
        self.failed
            .iter()
            .filter(move |(_, a)| now < a.not_before)
            .map(|(k, _)| k)
    }

    /// Forgets keys `keep` rejects (objects gone from the store).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.failed.retain(|k, _| keep(k));
    }

    pub fn len(&self) -> usize {
        self.failed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.failed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn the_delay_doubles_from_two_seconds_to_five_minutes() {
        let d: Vec<u64> = (1..=10).map(|n| delay(n).as_secs()).collect();
        assert_eq!(d, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(delay(u32::MAX), MAX_DELAY);
    }

    #[test]
    fn a_failed_key_waits_its_delay_then_is_free_and_success_resets_it() {
        let mut r = Retries::default();
        let a = r.failed(&"k", S(10));
        assert_eq!(
            a,
            Attempt {
                failures: 1,
                not_before: S(12)
            }
        );
        assert!(r.waiting(&"k", S(11)));
        assert!(!r.waiting(&"k", S(12)));
        assert_eq!(r.failed(&"k", S(12)).not_before, S(16));
        assert_eq!(r.waiting_keys(S(13)).count(), 1);
        r.succeeded(&"k");
        assert!(!r.waiting(&"k", S(13)));
        assert_eq!(r.failed(&"k", S(20)).failures, 1, "success starts over");
        r.retain(|_| false);
        assert!(r.is_empty());
    }
}
