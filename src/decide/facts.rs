//! One derivation of the decision core's facts, for the daemon's engine and
//! the simulator alike (`daemon/engine/replay.rs` checks that they decide
//! alike): which signals count as a failure, whose pause it is, which
//! counters still count and how long remedy's own backoff still runs.

use crate::decide::{Failing, Pause};
use crate::model::backoff::Effective;
use crate::model::classify::Verdict;
use crate::model::view::PauseState;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// The classification rule for throttling (429s, rate limits): a release
/// answered with it slows the release pace down.
pub const THROTTLED: &str = "throttled";

/// What a verdict says, counted only when `fresh`: signals that predate
/// remedy's own last write (a released object whose controller has not
/// reconciled yet) are no new failure.
pub fn failing(verdict: &Verdict, fresh: bool) -> Failing {
    match verdict {
        _ if !fresh => Failing::No,
        Verdict::Transient { reason } if reason == THROTTLED => Failing::Throttled,
        Verdict::Transient { .. } => Failing::Transient,
        Verdict::Terminal {
            not_found: true, ..
        } => Failing::NotFound,
        _ => Failing::No,
    }
}

/// Whose pause it is, from the object's pause and remedy's record.
pub fn pause(state: &PauseState) -> Pause {
    match state {
        PauseState::NotPaused => Pause::No,
        PauseState::Foreign => Pause::Foreign,
        PauseState::Ours { reason, .. } => Pause::from_reason(reason.as_deref()),
    }
}

/// A resource's counters as they count at `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    /// Its crash count, 0 once older than the quiet window.
    pub crash_count: u32,
    /// remedy's own wait before it may go: none under a controller's rule
    /// (brupop), whose wait a verified remediation exists to spare.
    pub remaining: Duration,
}

pub fn retry(
    backoff: Effective<'_>,
    crash_count: Option<u32>,
    failure_time: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Retry {
    let crash_count = if backoff.is_stale(failure_time, now) {
        0
    } else {
        crash_count.unwrap_or(0)
    };
    Retry {
        crash_count,
        remaining: backoff.wait(crash_count, failure_time, now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::backoff::{BackoffModel, BackoffPolicy};

    #[test]
    fn only_fresh_failures_count_and_throttling_is_told_apart() {
        let t = |r: &str| Verdict::Transient { reason: r.into() };
        assert_eq!(failing(&t("server_error"), true), Failing::Transient);
        assert_eq!(failing(&t(THROTTLED), true), Failing::Throttled);
        assert_eq!(failing(&t("server_error"), false), Failing::No);
        let gone = Verdict::Terminal {
            reason: "not_found".into(),
            not_found: true,
        };
        assert_eq!(failing(&gone, true), Failing::NotFound);
        let broken = Verdict::Terminal {
            reason: "instance_error".into(),
            not_found: false,
        };
        assert_eq!(failing(&broken, true), Failing::No);
        assert_eq!(failing(&Verdict::Healthy, true), Failing::No);
    }

    #[test]
    fn stale_counters_count_as_zero_and_a_controllers_rule_adds_no_wait() {
        let policy = BackoffPolicy::default();
        let now = Utc::now();
        let recent = now - chrono::Duration::seconds(30);
        let r = retry(policy.effective(None), Some(2), Some(recent), now);
        assert_eq!(r.crash_count, 2);
        assert_eq!(r.remaining, policy.delay(2) - Duration::from_secs(30));
        let old = now - chrono::Duration::days(2);
        assert_eq!(
            retry(policy.effective(None), Some(2), Some(old), now),
            Retry {
                crash_count: 0,
                remaining: Duration::ZERO
            }
        );
        let brupop = retry(
            policy.effective(Some(BackoffModel::Brupop)),
            Some(3),
            Some(recent),
            now,
        );
        assert_eq!(brupop.crash_count, 3, "the controller never forgets");
        assert_eq!(brupop.remaining, Duration::ZERO);
        assert_eq!(pause(&PauseState::Foreign), Pause::Foreign);
        assert_eq!(
            pause(&PauseState::Ours {
                since: None,
                reason: Some("with:OpenStackMachine/m".into())
            }),
            Pause::With
        );
    }
}
