//! Resets remedy wrote, watched for a stale write that undoes them. brupop's
//! agent rebuilds a shadow's whole status from what it last fetched (every
//! 5 s), so a reset written in between comes back with the old crash count
//! and failure time, and the controller waits its full backoff again. The
//! exact old pair coming back in someone else's write, after remedy's reset
//! was seen, is that stale write: a new failure starts from a count of 1
//! with a new failure time. Pure: the store feeds every version it applies.

use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

/// Re-applications of one reset before remedy leaves the object to its
/// controller's own backoff (and says so).
pub const MAX_REAPPLY: u32 = 3;
/// How long after a reset a stale write is looked for; the agent's period
/// is 5 s.
pub const WATCH_FOR: Duration = Duration::from_secs(600);

/// A resource's failure counters as one version of it shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counters {
    pub crash_count: Option<u32>,
    pub failure_time: Option<DateTime<Utc>>,
}

impl Counters {
    /// What a reset leaves: no count, no failure time.
    pub fn is_reset(&self) -> bool {
        self.crash_count.unwrap_or(0) == 0 && self.failure_time.is_none()
    }
}

/// A reset undone by a stale write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Undone {
    /// Reset it again: the `n`th time.
    Reapply(u32),
    /// Undone [`MAX_REAPPLY`] times already: left alone.
    GaveUp,
}

#[derive(Clone, Debug)]
struct Watched {
    before: Counters,
    since: Duration,
    /// The reset was seen in a version of the object.
    seen: bool,
    reapplied: u32,
}

#[derive(Debug)]
pub struct Resets<K> {
    watched: HashMap<K, Watched>,
}

impl<K> Default for Resets<K> {
    fn default() -> Self {
        Self {
            watched: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> Resets<K> {
    /// A reset of `key` from `before` is about to be written. Registered
    /// before the write so that its version, however fast it comes back, is
    /// seen; a re-application keeps its count.
    pub fn expect(&mut self, key: K, before: Counters, now: Duration) {
        if before.is_reset() {
            return;
        }
        let reapplied = self
            .watched
            .get(&key)
            .filter(|w| w.before == before)
            .map_or(0, |w| w.reapplied);
        self.watched.insert(
            key,
            Watched {
                before,
                since: now,
                seen: false,
                reapplied,
            },
        );
    }

    /// The reset did not happen (the goal failed or wrote nothing).
    pub fn forget(&mut self, key: &K) {
        self.watched.remove(key);
    }

    /// One version of `key` as the store applies it; `own` when remedy
    /// wrote it. `Some` when it undoes the reset.
    pub fn observe(
        &mut self,
        key: &K,
        now_counters: Counters,
        own: bool,
        now: Duration,
    ) -> Option<Undone> {
        let w = self.watched.get_mut(key)?;
        if now.saturating_sub(w.since) > WATCH_FOR {
            self.watched.remove(key);
            return None;
        }
        if now_counters.is_reset() {
            w.seen = true;
            return None;
        }
        // remedy's own steps on the way (failure time cleared, count not
        // yet), or a version from before the reset arriving late.
        if own || !w.seen {
            return None;
        }
        if now_counters != w.before {
            // A new failure: not remedy's to judge here.
            self.watched.remove(key);
            return None;
        }
        if w.reapplied >= MAX_REAPPLY {
            self.watched.remove(key);
            return Some(Undone::GaveUp);
        }
        w.reapplied += 1;
        // Until the next reset of it is seen, further versions are the
        // same undone state, not new undoings.
        w.seen = false;
        Some(Undone::Reapply(w.reapplied))
    }

    /// Drops what is no longer watched for.
    pub fn expire(&mut self, now: Duration) {
        self.watched
            .retain(|_, w| now.saturating_sub(w.since) <= WATCH_FOR);
    }

    pub fn len(&self) -> usize {
        self.watched.len()
    }

    pub fn is_empty(&self) -> bool {
        self.watched.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(n: u32, t: Option<i64>) -> Counters {
        Counters {
            crash_count: Some(n),
            failure_time: t.and_then(|s| DateTime::from_timestamp(s, 0)),
        }
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_stale_write_after_the_reset_is_undone_and_reapplied_at_most_three_times() {
        let mut r = Resets::default();
        let old = c(5, Some(1000));
        r.expect("k", old, S);
        // Late versions from before the reset, and remedy's own steps.
        assert_eq!(r.observe(&"k", old, false, S), None);
        assert_eq!(r.observe(&"k", c(5, None), true, S), None);
        assert_eq!(r.observe(&"k", c(0, None), true, S), None);
        // The agent writes back what it fetched before.
        assert_eq!(r.observe(&"k", old, false, S), Some(Undone::Reapply(1)));
        // The same undone state again is not a second undoing.
        assert_eq!(r.observe(&"k", old, false, S), None);
        for n in 2..=MAX_REAPPLY {
            r.expect("k", old, S);
            assert_eq!(r.observe(&"k", c(0, None), true, S), None);
            assert_eq!(r.observe(&"k", old, false, S), Some(Undone::Reapply(n)));
        }
        r.expect("k", old, S);
        assert_eq!(r.observe(&"k", c(0, None), true, S), None);
        assert_eq!(r.observe(&"k", old, false, S), Some(Undone::GaveUp));
        assert!(r.is_empty());
    }

    #[test]
    fn a_new_failure_a_kept_reset_or_a_late_one_is_not_an_undoing() {
        let mut r = Resets::default();
        let old = c(5, Some(1000));
        r.expect("k", old, S);
        assert_eq!(r.observe(&"k", c(0, None), true, S), None);
        // The agent's own next status keeps the reset.
        assert_eq!(r.observe(&"k", c(0, None), false, S), None);
        // A new failure: count 1, a new time. No longer watched.
        assert_eq!(r.observe(&"k", c(1, Some(2000)), false, S), None);
        assert!(r.is_empty());
        // Past the watch, nothing is judged.
        r.expect("k", old, S);
        assert_eq!(r.observe(&"k", c(0, None), true, S), None);
        let late = S + WATCH_FOR + S;
        assert_eq!(r.observe(&"k", old, false, late), None);
        assert!(r.is_empty());
        // A reset of a reset object is not watched; expire drops old ones.
        r.expect("k", c(0, None), S);
        assert!(r.is_empty());
        r.expect("k", old, S);
        r.expire(late);
        assert!(r.is_empty());
        // An object never watched.
        assert_eq!(r.observe(&"other", old, false, S), None);
    }
}
