//! Idempotency for Alertmanager notifications. Alertmanager re-sends a group
//! every group_interval and retries failures, and retries can overtake later
//! notifications, so the same alert arrives repeatedly and out of order.
//!
//! Per fingerprint we remember the furthest point seen in the order
//! `(starts_at, Firing < Resolved)`. An event is new only if it is strictly
//! beyond that point: a newer `starts_at` is a new episode, `Resolved` follows
//! `Firing` of the same episode, everything else is a duplicate (equal) or
//! stale (behind). Because the recorded point only ever moves forward, the same
//! `(fingerprint, status, starts_at)` can never be forwarded twice while its
//! record is retained.

use super::AlertStatus;
use chrono::{DateTime, Utc};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

/// Enough for a large fleet; one record is ~100 bytes.
pub const DEFAULT_CAPACITY: usize = 50_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Not seen before: forward it, then `remember` it once forwarded.
    New,
    /// Exactly what was already forwarded.
    Duplicate,
    /// Older than what was already forwarded (a late retry).
    Stale,
}

/// Recency stamp: the injected clock, with a sequence number so equal times
/// (or a clock stepping back) still give a total order.
type Stamp = (DateTime<Utc>, u64);

#[derive(Clone, Debug)]
struct Entry {
    starts_at: DateTime<Utc>,
    status: AlertStatus,
    stamp: Stamp,
}

/// Bounded memory of forwarded events; evicts the least recently seen
/// fingerprint when full. Pure: the caller passes `now`.
#[derive(Debug)]
pub struct Dedupe {
    capacity: usize,
    entries: HashMap<String, Entry>,
    by_recency: BTreeMap<Stamp, String>,
    seq: u64,
}

impl Default for Dedupe {
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY)
    }
}

fn position(starts_at: DateTime<Utc>, status: AlertStatus) -> (DateTime<Utc>, AlertStatus) {
    // AlertStatus orders Firing < Resolved, which is the episode's order.
    (starts_at, status)
}

impl Dedupe {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            entries: HashMap::new(),
            by_recency: BTreeMap::new(),
            seq: 0,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Classifies an event without recording it, so a caller that then fails
    /// to forward it will accept it again on retry. Duplicates and stale
    /// events refresh the record's recency: an alert Alertmanager keeps
    /// re-sending must not be evicted and then forwarded again.
    pub fn check(
        &mut self,
        fingerprint: &str,
        status: AlertStatus,
        starts_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Delivery {
        let Some(e) = self.entries.get(fingerprint) else {
            return Delivery::New;
        };
        let verdict = match position(starts_at, status).cmp(&position(e.starts_at, e.status)) {
            Ordering::Greater => return Delivery::New,
            Ordering::Equal => Delivery::Duplicate,
            Ordering::Less => Delivery::Stale,
        };
        self.touch(fingerprint, now);
        verdict
    }

    /// Records a forwarded event. Never moves a record backwards, so a
    /// `record` without a preceding `New` cannot undo newer knowledge.
    pub fn remember(
        &mut self,
        fingerprint: &str,
        status: AlertStatus,
        starts_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) {
        let stamp = self.next_stamp(now);
        if let Some(e) = self.entries.get_mut(fingerprint) {
            self.by_recency.remove(&e.stamp);
            if position(starts_at, status) > position(e.starts_at, e.status) {
                e.starts_at = starts_at;
                e.status = status;
            }
            e.stamp = stamp;
            self.by_recency.insert(stamp, fingerprint.to_string());
            return;
        }
        while self.entries.len() >= self.capacity {
            let Some((_, oldest)) = self.by_recency.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
        self.entries.insert(
            fingerprint.to_string(),
            Entry {
                starts_at,
                status,
                stamp,
            },
        );
        self.by_recency.insert(stamp, fingerprint.to_string());
    }

    fn touch(&mut self, fingerprint: &str, now: DateTime<Utc>) {
        let stamp = self.next_stamp(now);
        if let Some(e) = self.entries.get_mut(fingerprint) {
            self.by_recency.remove(&e.stamp);
            e.stamp = stamp;
            self.by_recency.insert(stamp, fingerprint.to_string());
        }
    }

    fn next_stamp(&mut self, now: DateTime<Utc>) -> Stamp {
        self.seq = self.seq.wrapping_add(1);
        (now, self.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AlertStatus::{Firing, Resolved};
    use chrono::TimeZone;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0)
            .single()
            .expect("valid timestamp")
    }

    /// Check, and record when new (as the webhook does after a send).
    fn offer(d: &mut Dedupe, fp: &str, st: AlertStatus, s: i64, now: i64) -> Delivery {
        let v = d.check(fp, st, t(s), t(now));
        if v == Delivery::New {
            d.remember(fp, st, t(s), t(now));
        }
        v
    }

    #[test]
    fn repeats_are_duplicates() {
        let mut d = Dedupe::new(10);
        assert_eq!(offer(&mut d, "a", Firing, 0, 0), Delivery::New);
        assert_eq!(offer(&mut d, "a", Firing, 0, 300), Delivery::Duplicate);
        assert_eq!(offer(&mut d, "a", Resolved, 0, 600), Delivery::New);
        assert_eq!(offer(&mut d, "a", Resolved, 0, 900), Delivery::Duplicate);
        // Another fingerprint is independent.
        assert_eq!(offer(&mut d, "b", Firing, 0, 900), Delivery::New);
    }

    #[test]
    fn resolved_before_firing_drops_the_late_firing() {
        let mut d = Dedupe::new(10);
        assert_eq!(offer(&mut d, "a", Resolved, 0, 0), Delivery::New);
        assert_eq!(offer(&mut d, "a", Firing, 0, 1), Delivery::Stale);
    }

    #[test]
    fn newer_starts_at_is_a_new_episode_and_older_is_stale() {
        let mut d = Dedupe::new(10);
        assert_eq!(offer(&mut d, "a", Firing, 0, 0), Delivery::New);
        assert_eq!(offer(&mut d, "a", Resolved, 0, 1), Delivery::New);
        assert_eq!(offer(&mut d, "a", Firing, 100, 2), Delivery::New);
        // A late resolved of the first episode must not resolve the second.
        assert_eq!(offer(&mut d, "a", Resolved, 0, 3), Delivery::Stale);
        assert_eq!(offer(&mut d, "a", Firing, 0, 4), Delivery::Stale);
        // A resolved of the new episode may even skip its firing.
        assert_eq!(offer(&mut d, "a", Resolved, 200, 5), Delivery::New);
        assert_eq!(offer(&mut d, "a", Resolved, 100, 6), Delivery::Stale);
    }

    #[test]
    fn unrecorded_event_is_accepted_again() {
        // A failed forward must not be remembered, or the retry would be lost.
        let mut d = Dedupe::new(10);
        assert_eq!(d.check("a", Firing, t(0), t(0)), Delivery::New);
        assert_eq!(d.check("a", Firing, t(0), t(1)), Delivery::New);
        assert!(d.is_empty());
    }

    #[test]
    fn record_never_moves_backwards() {
        let mut d = Dedupe::new(10);
        d.remember("a", Resolved, t(10), t(0));
        d.remember("a", Firing, t(0), t(1));
        assert_eq!(d.check("a", Resolved, t(10), t(2)), Delivery::Duplicate);
    }

    #[test]
    fn evicts_least_recently_seen() {
        let mut d = Dedupe::new(2);
        offer(&mut d, "a", Firing, 0, 0);
        offer(&mut d, "b", Firing, 0, 1);
        // Alertmanager re-sends "a": it becomes the most recent.
        assert_eq!(offer(&mut d, "a", Firing, 0, 2), Delivery::Duplicate);
        offer(&mut d, "c", Firing, 0, 3);
        assert_eq!(d.len(), 2);
        assert_eq!(offer(&mut d, "a", Firing, 0, 4), Delivery::Duplicate);
        assert_eq!(offer(&mut d, "c", Firing, 0, 5), Delivery::Duplicate);
        // "b" was evicted, so it is forgotten.
        assert_eq!(offer(&mut d, "b", Firing, 0, 6), Delivery::New);
        assert_eq!(d.len(), 2);
    }

    #[test]
    fn clock_stepping_back_keeps_bounds() {
        let mut d = Dedupe::new(2);
        offer(&mut d, "a", Firing, 0, 100);
        offer(&mut d, "b", Firing, 0, 50);
        offer(&mut d, "c", Firing, 0, 50);
        assert_eq!(d.len(), 2);
        assert_eq!(d.by_recency.len(), 2);
    }

    fn status() -> impl Strategy<Value = AlertStatus> {
        prop_oneof![Just(Firing), Just(Resolved)]
    }

    proptest! {
        #[test]
        fn never_forwards_the_same_event_twice(
            events in proptest::collection::vec(
                (0u8..4, status(), 0i64..4, any::<bool>()), 0..200),
        ) {
            let mut d = Dedupe::new(16);
            let mut forwarded = HashSet::new();
            for (i, (fp, st, s, send_ok)) in events.into_iter().enumerate() {
                let fp = format!("fp{fp}");
                let now = i64::try_from(i).unwrap_or(i64::MAX);
                if d.check(&fp, st, t(s), t(now)) == Delivery::New && send_ok {
                    d.remember(&fp, st, t(s), t(now));
                    prop_assert!(forwarded.insert((fp, st, s)), "forwarded twice");
                }
            }
            prop_assert!(d.len() <= 4);
        }

        #[test]
        fn bounded_under_many_fingerprints(n in 0usize..300, cap in 1usize..50) {
            let mut d = Dedupe::new(cap);
            for i in 0..n {
                let now = i64::try_from(i).unwrap_or(i64::MAX);
                offer(&mut d, &format!("fp{i}"), Firing, 0, now);
                prop_assert!(d.len() <= cap);
                prop_assert_eq!(d.len(), d.by_recency.len());
            }
        }
    }
}
