//! What the webhook logs at INFO: a summary of its notifications at most
//! once a period, not one line each.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What became of one notification's alerts.
#[derive(Debug, Default, PartialEq)]
pub struct Summary {
    pub accepted: usize,
    pub duplicate: usize,
    pub ignored: usize,
    /// Refused: their labels can match no object.
    pub unselectable: usize,
    /// Why the first of those matches nothing, for the answer.
    pub unselectable_why: Option<String>,
}

/// Counts since the last INFO summary. Pure: the caller passes `now`.
#[derive(Debug, Default, PartialEq)]
pub struct Tally {
    pub notifications: u64,
    pub accepted: u64,
    pub duplicate: u64,
    pub ignored: u64,
    pub unselectable: u64,
    /// Refused notifications by `WebhookError::label`.
    pub refused: BTreeMap<&'static str, u64>,
}

/// A [`Tally`] and when it was last reported.
#[derive(Debug)]
pub struct Summarizer {
    every: Duration,
    since: Instant,
    tally: Tally,
}

impl Summarizer {
    pub fn new(every: Duration, now: Instant) -> Self {
        Self {
            every,
            since: now,
            tally: Tally::default(),
        }
    }

    /// Counts one notification; returns the tally and the time it covers
    /// once `every` has passed since the last one, and starts over.
    pub fn add(
        &mut self,
        outcome: Result<&Summary, &'static str>,
        now: Instant,
    ) -> Option<(Tally, Duration)> {
        let t = &mut self.tally;
        t.notifications += 1;
        match outcome {
            Ok(s) => {
                t.accepted += s.accepted as u64;
                t.duplicate += s.duplicate as u64;
                t.ignored += s.ignored as u64;
                t.unselectable += s.unselectable as u64;
            }
            Err(label) => *t.refused.entry(label).or_insert(0) += 1,
        }
        let covered = now.saturating_duration_since(self.since);
        if covered < self.every {
            return None;
        }
        self.since = now;
        Some((std::mem::take(&mut self.tally), covered))
    }
}
