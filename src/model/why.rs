//! The note remedy keeps on a resource it holds (`remedy.dev/why`): why it
//! is held and what it waits for, in words an operator reads with
//! `kubectl describe`. Pure. Only what changes with the state goes in (the
//! hold, its domain, the wait, a backoff deadline, the owner), never the
//! place in line or an estimate, which move every tick: the note is written
//! only when its text changes, so it costs a write per change of state, not
//! per tick. `remedy explain` has the rest.

use chrono::{DateTime, SecondsFormat, Utc};
use std::hash::{Hash, Hasher};

/// What the note says about one held resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Why<'a> {
    /// The hold mark's reason: `breaker` or `alert:NAME`.
    pub hold: &'a str,
    pub domain: &'a str,
    /// The wait reason label (`breaker`, `backoff`, `budget`, `owner`,
    /// `settle`, `retry`).
    pub waits: &'a str,
    /// While waiting on its backoff: when that ends.
    pub not_before: Option<DateTime<Utc>>,
    /// While waiting on its owner (`budget.per`): which.
    pub owner: Option<&'a str>,
}

impl Why<'_> {
    pub fn text(&self) -> String {
        let held = match self.hold.strip_prefix("alert:") {
            Some(alert) => format!("held by remedy while alert {alert} fires"),
            None => format!(
                "held by remedy: the outage breaker of failure domain {} opened",
                self.domain
            ),
        };
        let waits = match self.waits {
            "breaker" => format!("the outage breaker of {} to close", self.domain),
            "backoff" => match self.not_before {
                Some(t) => format!(
                    "its backoff, until {}",
                    t.to_rfc3339_opts(SecondsFormat::Secs, true)
                ),
                None => "its backoff".to_string(),
            },
            "budget" => "its turn in the release budget".to_string(),
            "owner" => format!(
                "its owner {}: as many of its releases unanswered as budget.per allows",
                self.owner.unwrap_or("?")
            ),
            "settle" => "the alert to resolve and be verified cleared".to_string(),
            "retry" => "a retry of its last failed write".to_string(),
            other => other.to_string(),
        };
        format!(
            "{held}; waits for {waits}. `remedy explain` gives its place in line and an estimate."
        )
    }
}

/// A digest of a note's text, never 0 (0 is "no note"), to tell a changed
/// note from the one on the object without keeping its text per object.
pub fn digest(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why<'a>(hold: &'a str, waits: &'a str) -> Why<'a> {
        Why {
            hold,
            domain: "zone-a",
            waits,
            not_before: None,
            owner: None,
        }
    }

    #[test]
    fn the_note_says_why_and_what_for_in_words() {
        assert_eq!(
            why("breaker", "breaker").text(),
            "held by remedy: the outage breaker of failure domain zone-a opened; waits for the outage breaker of zone-a to close. `remedy explain` gives its place in line and an estimate."
        );
        assert!(why("alert:CloudAPIDegraded", "settle").text().starts_with(
            "held by remedy while alert CloudAPIDegraded fires; waits for the alert to resolve"
        ));
        let t: DateTime<Utc> = "2026-12-05T16:00:00Z".parse().unwrap();
        let backoff = Why {
            not_before: Some(t),
            ..why("breaker", "backoff")
        };
        assert!(
            backoff
                .text()
                .contains("its backoff, until 2026-12-05T16:00:00Z")
        );
        let owner = Why {
            owner: Some("team-a/md-0"),
            ..why("breaker", "owner")
        };
        assert!(owner.text().contains("its owner team-a/md-0"));
    }

    #[test]
    fn a_note_changes_only_with_the_state() {
        let a = why("breaker", "breaker").text();
        assert_eq!(digest(&a), digest(&why("breaker", "breaker").text()));
        assert_ne!(digest(&a), digest(&why("breaker", "budget").text()));
        assert_ne!(digest(""), 0);
    }
}
