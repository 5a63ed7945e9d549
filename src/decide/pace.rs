//! The adaptive release pace of one failure domain (AIMD, as TCP paces a
//! connection): released resources are the probes, their next state is the
//! acknowledgement. Mostly successful releases double the pace (slow start),
//! a cloud that answers at least `min_success` of them still gets an
//! additive increase, and below that the pace halves down to the floor.
//! A cloud answering 40% of calls keeps getting budgeted retries; a dead
//! zone gets one probe every `probe_every`. Pure; time is passed in.

use crate::config::PaceConfig;
use std::time::Duration;

/// Success share at or above which the pace doubles instead of growing by
/// one step: the cloud answers nearly everything.
const SLOW_START: f64 = 0.9;

/// What a released resource's next fresh state said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Ok,
    /// Failing again.
    Failed,
    /// Failing again with throttling: the releases are over the quota.
    Throttled,
}

#[derive(Clone, Debug)]
pub struct Pace {
    cfg: PaceConfig,
    /// Releases per second; `None` while nothing says the domain is in
    /// trouble, when only the budget limits releases.
    rate: Option<f64>,
    /// Releases owed, at most one second's worth (or one release).
    credit: f64,
    last: Option<Duration>,
    window_start: Option<Duration>,
    ok: u32,
    failed: u32,
    throttled: u32,
    /// Success share of the last full window that had outcomes.
    last_share: Option<f64>,
    /// Releases that failed again in that window.
    last_failed: u32,
    /// The domain's breaker is open.
    open: bool,
}

impl Pace {
    pub fn new(cfg: &PaceConfig) -> Self {
        Self {
            cfg: cfg.clone(),
            rate: None,
            credit: 0.0,
            last: None,
            window_start: None,
            ok: 0,
            failed: 0,
            throttled: 0,
            last_share: None,
            last_failed: 0,
            open: false,
        }
    }

    /// The slowest pace: one probe every `probe_every`. Without probes,
    /// nothing while open, and one release a window while closed, so a run
    /// of failures never stalls releases for good.
    fn floor(&self) -> f64 {
        match self.probe_rate() {
            Some(r) => r,
            None if self.open => 0.0,
            None => 1.0 / self.cfg.window.as_secs_f64().max(1.0),
        }
    }

    fn probe_rate(&self) -> Option<f64> {
        match self.cfg.probe_every {
            Some(d) if !d.is_zero() => Some(1.0 / d.as_secs_f64()),
            _ => None,
        }
    }

    /// The domain's breaker opened: back to probing.
    pub fn opened(&mut self) {
        self.open = true;
        self.rate = Some(self.floor());
        self.credit = self.credit.min(1.0);
    }

    /// Probing is off: an open domain releases nothing, whatever the
    /// answers of releases made before it opened say.
    fn frozen(&self) -> bool {
        self.open && self.probe_rate().is_none()
    }

    /// The domain's breaker closed. Without probes nothing was learnt
    /// while it was open: only the budget limits releases, as before
    /// adaptive release. With probes the pace they built up goes on.
    pub fn closed(&mut self) {
        self.open = false;
        if self.probe_rate().is_none() {
            self.rate = None;
            (self.ok, self.failed, self.throttled) = (0, 0, 0);
            self.last_share = None;
        }
    }

    pub fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// The outcome of one release: the resource's next fresh state.
    pub fn outcome(&mut self, answer: Answer) {
        match answer {
            Answer::Ok => self.ok = self.ok.saturating_add(1),
            Answer::Failed => self.failed = self.failed.saturating_add(1),
            Answer::Throttled => {
                self.failed = self.failed.saturating_add(1);
                self.throttled = self.throttled.saturating_add(1);
            }
        }
    }

    /// Share of the last window's releases that failed again, and how many
    /// did; `None` when the last window had none.
    pub fn failures(&self) -> Option<(f64, u32)> {
        self.last_share.map(|s| (1.0 - s, self.last_failed))
    }

    /// Advances the clock: closes a window (adjusting the rate) and accrues
    /// credit. Returns how many releases the domain may make now (`usize::MAX`
    /// when unpaced), capped by `ceiling` releases per second.
    pub fn allowance(&mut self, now: Duration, ceiling: f64) -> usize {
        let start = *self.window_start.get_or_insert(now);
        if now.saturating_sub(start) >= self.cfg.window {
            self.end_window(ceiling);
            self.window_start = Some(now);
        }
        let dt = self
            .last
            .map_or(Duration::ZERO, |l| now.saturating_sub(l))
            .as_secs_f64();
        self.last = Some(now.max(self.last.unwrap_or(now)));
        let Some(rate) = self.rate else {
            return usize::MAX;
        };
        self.credit = (self.credit + rate * dt).min(rate.max(1.0));
        if self.credit.is_finite() && self.credit >= 1.0 {
            self.credit.floor() as usize
        } else {
            0
        }
    }

    /// `n` releases were made from the allowance.
    pub fn spend(&mut self, n: usize) {
        if self.rate.is_some() {
            self.credit = (self.credit - n as f64).max(0.0);
        }
    }

    fn end_window(&mut self, ceiling: f64) {
        let n = self.ok + self.failed;
        if n == 0 {
            // Nothing released: no evidence either way any more.
            self.last_share = None;
            return;
        }
        let share = f64::from(self.ok) / f64::from(n);
        let throttled = self.throttled > 0;
        self.last_share = Some(share);
        self.last_failed = self.failed;
        (self.ok, self.failed, self.throttled) = (0, 0, 0);
        if self.frozen() {
            return;
        }
        let floor = self.floor();
        let Some(rate) = self.rate else {
            // Unpaced until now: failures start pacing from the ceiling.
            if share < self.cfg.min_success || throttled {
                self.rate = Some((ceiling * 0.5).max(floor));
            }
            return;
        };
        // Throttled releases mean the pace is over the cloud's quota,
        // whatever share succeeded: back off, as TCP does on loss.
        let next = if throttled {
            rate * 0.5
        } else if share >= SLOW_START {
            (rate * 2.0).max(rate + self.cfg.step)
        } else if share >= self.cfg.min_success {
            rate + self.cfg.step
        } else {
            rate * 0.5
        };
        let next = next.clamp(floor, ceiling.max(floor));
        // Back at the ceiling with the cloud answering: the budget alone
        // paces again.
        self.rate = if next >= ceiling && share >= SLOW_START {
            None
        } else {
            Some(next)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> PaceConfig {
        PaceConfig {
            probe_every: Some(Duration::from_secs(2)),
            window: Duration::from_secs(5),
            step: 1.0,
            min_success: 0.2,
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// The last window's releases mostly failed: under `min_success`
    /// succeeded, so the pace shrinks.
    fn mostly_failing(p: &Pace) -> bool {
        p.failures()
            .is_some_and(|(failed, _)| 1.0 - failed < cfg().min_success)
    }

    /// Runs `seconds` one-second ticks releasing what is allowed, each
    /// release succeeding when `ok(i)` for the i-th release; returns the
    /// number released.
    fn drive(p: &mut Pace, from: u64, seconds: u64, ok: impl Fn(usize) -> bool) -> usize {
        let mut released = 0;
        for t in from..from + seconds {
            let n = p.allowance(secs(t), 80.0).min(1000);
            p.spend(n);
            for i in 0..n {
                p.outcome(if ok(released + i) {
                    Answer::Ok
                } else {
                    Answer::Failed
                });
            }
            released += n;
        }
        released
    }

    #[test]
    fn unpaced_until_an_outage_then_one_probe_per_interval() {
        let mut p = Pace::new(&cfg());
        assert_eq!(p.allowance(secs(0), 80.0), usize::MAX);
        p.opened();
        assert_eq!(p.rate(), Some(0.5));
        // A dead cloud: every probe fails, the pace stays at the floor.
        let n = drive(&mut p, 1, 60, |_| false);
        assert!((29..=31).contains(&n), "{n} probes in 60 s");
        assert!(mostly_failing(&p));
        assert_eq!(p.rate(), Some(0.5));
    }

    #[test]
    fn a_cloud_answering_40_percent_gets_a_growing_pace() {
        let mut p = Pace::new(&cfg());
        p.opened();
        let n = drive(&mut p, 1, 120, |i| i % 5 < 2);
        assert!(!mostly_failing(&p));
        let rate = p.rate().unwrap();
        assert!(rate > 10.0, "rate {rate}");
        assert!(n > 300, "{n} releases in 2 min");
    }

    #[test]
    fn recovery_doubles_back_to_the_budget_and_failures_halve() {
        let mut p = Pace::new(&cfg());
        p.opened();
        drive(&mut p, 1, 10, |_| false);
        // The cloud is back: slow start reaches the ceiling within a minute.
        drive(&mut p, 11, 60, |_| true);
        assert_eq!(p.rate(), None, "unpaced again");
        // Mostly failing again: from the ceiling it halves each window.
        drive(&mut p, 71, 6, |_| false);
        let r = p.rate().unwrap();
        assert!((0.5..=40.0).contains(&r), "rate {r}");
        assert!(mostly_failing(&p));
    }

    #[test]
    fn throttled_releases_halve_the_pace_however_many_succeed() {
        let mut p = Pace::new(&cfg());
        p.opened();
        drive(&mut p, 1, 60, |_| true);
        assert_eq!(p.rate(), None, "back at the budget");
        // 90% succeed, but one in ten is a 429: halve every window.
        for t in 61..=80 {
            let n = p.allowance(secs(t), 80.0).min(80);
            p.spend(n);
            for i in 0..n {
                p.outcome(if i % 10 == 0 {
                    Answer::Throttled
                } else {
                    Answer::Ok
                });
            }
        }
        let r = p.rate().unwrap();
        assert!(r <= 10.0, "rate {r}");
        // The 429s stop: the pace climbs back.
        drive(&mut p, 81, 40, |_| true);
        assert_eq!(p.rate(), None);
    }

    #[test]
    fn closing_without_probes_leaves_only_the_budget() {
        let mut p = Pace::new(&PaceConfig {
            probe_every: None,
            ..cfg()
        });
        p.opened();
        assert_eq!(
            p.allowance(secs(0), 80.0),
            0,
            "no probes: nothing while open"
        );
        assert_eq!(p.allowance(secs(30), 80.0), 0);
        p.closed();
        assert_eq!(p.allowance(secs(31), 80.0), usize::MAX);
    }

    #[test]
    fn without_probes_late_answers_neither_release_while_open_nor_stall_after() {
        let mut p = Pace::new(&PaceConfig {
            probe_every: None,
            ..cfg()
        });
        p.opened();
        // Answers of releases made before the breaker opened arrive while
        // it is open: good ones must not start releases, bad ones must not
        // leave the domain stuck at 0 once it closes.
        for t in 1..=20 {
            p.outcome(if t < 10 { Answer::Ok } else { Answer::Failed });
            assert_eq!(p.allowance(secs(t), 80.0), 0, "released while open at {t}");
        }
        p.closed();
        assert_eq!(p.allowance(secs(21), 80.0), usize::MAX);
    }

    #[test]
    fn without_probes_a_closed_domain_never_slows_below_one_release_a_window() {
        let mut p = Pace::new(&PaceConfig {
            probe_every: None,
            ..cfg()
        });
        // Closed, and every release fails again for ten minutes.
        drive(&mut p, 0, 600, |_| false);
        assert_eq!(p.rate(), Some(0.2), "one release per 5 s window");
        // The cloud is back: the pace climbs back to the budget.
        drive(&mut p, 600, 120, |_| true);
        assert_eq!(p.rate(), None);
    }

    #[test]
    fn credit_never_exceeds_a_second_and_time_going_back_adds_none() {
        let mut p = Pace::new(&cfg());
        p.opened();
        assert_eq!(p.allowance(secs(0), 80.0), 0);
        assert_eq!(p.allowance(secs(1000), 80.0), 1, "at most one owed");
        p.spend(1);
        assert_eq!(p.allowance(secs(10), 80.0), 0);
    }
}
