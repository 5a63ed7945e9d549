//! The note remedy keeps on a resource it holds (`remedy.dev/why`): why it
//! is held and what it waits for, in words an operator reads with
//! `kubectl describe`. Pure. Only what changes with the state goes in (the
//! hold, its domain, the wait, a backoff deadline, the owner), never the
//! place in line or an estimate, which move every tick: the note is written
//! only when its text changes, so it costs a write per change of state, not
//! per tick. `remedy explain` has the rest.

use crate::model::profile::WITH_PREFIX;
use chrono::{DateTime, SecondsFormat, Utc};
use std::hash::{Hash, Hasher};

/// What holds a resource now, which is not always what its hold mark
/// says: a breaker hold whose alert fires stays held for the alert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold<'a> {
    /// Its failure domain's outage breaker (`breaker`, `breaker-domain`,
    /// or a reason this version does not know: released like one).
    Breaker,
    /// Held before its first create call, as its domain's breaker is open
    /// (`breaker-new`, `hold.new_until`).
    New,
    /// An alert (its name), while it fires and until it is verified
    /// cleared.
    Alert(&'a str),
    /// Its owner (`Kind/name`), held by remedy (`hold.with_owner`).
    With(&'a str),
}

impl<'a> Hold<'a> {
    /// From the hold mark's reason.
    pub fn from_mark(reason: &'a str) -> Self {
        if let Some(alert) = reason.strip_prefix("alert:") {
            Self::Alert(alert)
        } else if let Some(owner) = reason.strip_prefix(WITH_PREFIX) {
            Self::With(owner)
        } else if reason == "breaker-new" {
            Self::New
        } else {
            Self::Breaker
        }
    }
}

/// What the note says about one held resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Why<'a> {
    pub hold: Hold<'a>,
    pub domain: &'a str,
    /// The wait reason label (`breaker`, `backoff`, `budget`, `owner`,
    /// `settle`, `retry`), or one only notes name: `with` (held with its
    /// owner while remedy holds that owner), `followers` (an owner whose
    /// followers go first).
    pub waits: &'a str,
    /// While waiting on its backoff: when that ends.
    pub not_before: Option<DateTime<Utc>>,
    /// While waiting on its owner (`budget.per`): which.
    pub owner: Option<&'a str>,
}

/// One held resource as a tick saw it: what the note is made from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held<'a> {
    /// The hold mark's reason.
    pub mark: &'a str,
    pub domain: &'a str,
    /// The owner (`Kind/name`) it is held with while remedy holds that
    /// owner: it stays held, whatever its mark says.
    pub with_owner: Option<&'a str>,
    /// A firing alert whose scope selects it: it stays held until the
    /// alert is verified cleared, whatever its mark says.
    pub firing: Option<&'a str>,
    /// What the tick lined it up for (a wait reason label), if anything.
    pub waits: Option<&'a str>,
    /// Resources held with it (`hold.with_owner`) are still held: they
    /// go first, and nothing lines it up meanwhile.
    pub followers_held: bool,
    pub breaker_open: bool,
    /// When its backoff ends, while there is one.
    pub not_before: Option<DateTime<Utc>>,
    /// Its owner under `budget.per`.
    pub owner: Option<&'a str>,
}

impl<'a> Held<'a> {
    /// Its note: what holds it now and what for, in the order the
    /// decision core keeps it held (its owner, then a firing alert, then
    /// its mark and what it is lined up for). None when there is nothing
    /// to say (a goal for it is queued or running).
    pub fn why(&self) -> Option<Why<'a>> {
        let (hold, waits) = if let Some(owner) = self.with_owner {
            (Hold::With(owner), "with")
        } else if let Some(alert) = self.firing {
            // The same words as once it resolved and waits to be verified:
            // one note for the whole alert.
            (Hold::Alert(alert), "settle")
        } else if let Some(waits) = self.waits {
            (Hold::from_mark(self.mark), waits)
        } else if self.followers_held {
            let waits = if self.breaker_open {
                "breaker"
            } else if self.not_before.is_some() {
                "backoff"
            } else {
                "followers"
            };
            (Hold::from_mark(self.mark), waits)
        } else {
            return None;
        };
        Some(Why {
            hold,
            domain: self.domain,
            waits,
            not_before: self.not_before.filter(|_| waits == "backoff"),
            owner: self.owner.filter(|_| waits == "owner"),
        })
    }
}

impl Why<'_> {
    pub fn text(&self) -> String {
        let held = match self.hold {
            Hold::Alert(alert) => format!("held by remedy while alert {alert} fires"),
            Hold::With(owner) => format!("held by remedy with its owner {owner}"),
            Hold::Breaker => format!(
                "held by remedy: the outage breaker of failure domain {} opened",
                self.domain
            ),
            Hold::New => format!(
                "held by remedy before its first create call: the outage breaker of failure domain {} is open",
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
            "with" => "its owner to be due for release; it goes before its owner".to_string(),
            "followers" => "the resources held with it to be released first".to_string(),
            other => other.to_string(),
        };
        format!(
            "{held}; waits for {waits}. `remedy explain` gives its place in line and an estimate."
        )
    }
}

/// The note of a resource remedy retried because its controller gave up
/// (`remediation.retry`): when, which attempt, and who retries next.
pub fn retried(
    at: DateTime<Utc>,
    attempt: u32,
    quiet: std::time::Duration,
    next: Option<DateTime<Utc>>,
) -> String {
    let next = match next {
        Some(t) => format!(
            "if it fails again, remedy retries it at {} at the earliest",
            t.to_rfc3339_opts(SecondsFormat::Secs, true)
        ),
        None => "if it fails again, remedy retries it after its backoff".to_string(),
    };
    format!(
        "retried by remedy at {} (attempt {attempt}): its controller gave up on a transient failure and wrote nothing for {}; {next}, or in its failure domain's turn while retries there fail, unless an outage holds it. `remedy explain` says more.",
        at.to_rfc3339_opts(SecondsFormat::Secs, true),
        humantime::format_duration(quiet)
    )
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
            hold: Hold::from_mark(hold),
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
        assert_eq!(
            why("breaker-new", "breaker").text(),
            "held by remedy before its first create call: the outage breaker of failure domain zone-a is open; waits for the outage breaker of zone-a to close. `remedy explain` gives its place in line and an estimate."
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

    /// #38.8: every held resource has a note, saying what holds it now:
    /// a firing alert or its owner keeps it held whatever its mark says.
    #[test]
    fn the_note_names_what_holds_it_now_not_only_its_mark() {
        let breaker = Held {
            mark: "breaker",
            domain: "zone-a",
            ..Held::default()
        };
        assert_eq!(breaker.why(), None, "nothing lined up: a goal is queued");
        let lined = Held {
            waits: Some("breaker"),
            ..breaker
        };
        assert_eq!(lined.why(), Some(why("breaker", "breaker")));
        // Its alert fires: held for the alert now, the breaker note goes.
        let firing = Held {
            firing: Some("CloudAPIDegraded"),
            ..lined
        };
        let text = firing.why().unwrap().text();
        assert!(
            text.starts_with("held by remedy while alert CloudAPIDegraded fires; waits for the alert to resolve and be verified cleared"),
            "{text}"
        );
        // The same note once it resolved and waits to be verified.
        let settling = Held {
            mark: "alert:CloudAPIDegraded",
            waits: Some("settle"),
            ..breaker
        };
        assert_eq!(settling.why().map(|w| w.text()), Some(text));
        // Held with its owner, which remedy holds.
        let with = Held {
            mark: "with:OpenStackMachine/m0",
            with_owner: Some("OpenStackMachine/m0"),
            firing: Some("CloudAPIDegraded"),
            ..breaker
        };
        let text = with.why().unwrap().text();
        assert!(
            text.starts_with("held by remedy with its owner OpenStackMachine/m0; waits for its owner to be due for release"),
            "{text}"
        );
        // Its owner no longer held: released like a breaker hold, its
        // owner still named.
        let released = Held {
            mark: "with:OpenStackMachine/m0",
            waits: Some("budget"),
            ..breaker
        };
        assert!(
            released
                .why()
                .unwrap()
                .text()
                .starts_with("held by remedy with its owner OpenStackMachine/m0; waits for its turn in the release budget")
        );
        // An owner whose followers are still held: nothing lines it up.
        let owner = Held {
            followers_held: true,
            ..breaker
        };
        assert!(
            owner
                .why()
                .unwrap()
                .text()
                .contains("waits for the resources held with it to be released first")
        );
        let open = Held {
            breaker_open: true,
            ..owner
        };
        assert_eq!(open.why(), Some(why("breaker", "breaker")));
    }

    #[test]
    fn a_note_changes_only_with_the_state() {
        let a = why("breaker", "breaker").text();
        assert_eq!(digest(&a), digest(&why("breaker", "breaker").text()));
        assert_ne!(digest(&a), digest(&why("breaker", "budget").text()));
        assert_ne!(digest(""), 0);
    }
}
