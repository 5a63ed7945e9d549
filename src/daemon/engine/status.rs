//! What /status shows: the last tick's report, cut to a limit.

use super::Episode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StatusReport {
    pub leader: bool,
    pub dry_run: bool,
    /// Set while the pause switch is: who paused remedy, when and why.
    #[serde(default)]
    pub paused: Option<crate::daemon::pause::Paused>,
    pub breaker_open: bool,
    /// Failure domains whose breaker is open (`breaker.domain`).
    #[serde(default)]
    pub open_domains: Vec<String>,
    pub budget_tokens: f64,
    pub held: Vec<String>,
    pub pending: Vec<String>,
    pub waiting: BTreeMap<String, String>,
    pub episodes: Vec<Episode>,
    /// Full sizes of the lists above, which hold at most `limit` entries
    /// each (GET /status?limit=N); metrics have the complete counts.
    #[serde(default)]
    pub totals: BTreeMap<String, usize>,
    #[serde(default)]
    pub truncated: bool,
}

/// Entries per list in /status unless `?limit=` says otherwise, and the
/// most it may say: a 100k-resource fleet must not make a 10 MB answer.
pub const STATUS_LIMIT: usize = 500;
pub const STATUS_MAX_LIMIT: usize = 10_000;

impl StatusReport {
    /// A copy with every list cut to `limit` entries (in their sorted order)
    /// and the full sizes in `totals`.
    pub fn limited(&self, limit: usize) -> Self {
        let totals: BTreeMap<String, usize> = [
            ("held", self.held.len()),
            ("pending", self.pending.len()),
            ("waiting", self.waiting.len()),
            ("episodes", self.episodes.len()),
        ]
        .into_iter()
        .map(|(k, n)| (k.to_string(), n))
        .collect();
        Self {
            leader: self.leader,
            dry_run: self.dry_run,
            paused: self.paused.clone(),
            breaker_open: self.breaker_open,
            // At most MAX_DOMAINS: no need to cut.
            open_domains: self.open_domains.clone(),
            budget_tokens: self.budget_tokens,
            held: self.held.iter().take(limit).cloned().collect(),
            pending: self.pending.iter().take(limit).cloned().collect(),
            waiting: self
                .waiting
                .iter()
                .take(limit)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            episodes: self.episodes.iter().take(limit).cloned().collect(),
            truncated: totals.values().any(|&n| n > limit),
            totals,
        }
    }
}
