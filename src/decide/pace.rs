//! The adaptive release pace of one failure domain (AIMD, as TCP paces a
//! connection): released resources are the probes, their next state is the
//! acknowledgement. Mostly successful releases double the pace (slow start),
//! a cloud that answers at least `min_success` of them still gets an
//! additive increase once its breaker has closed, and below that the pace
//! halves down to the floor. While the breaker is open the releases are
//! probes: only a cloud answering nearly all of them doubles their pace (no
//! additive step), anything less halves it back to the probe pace, so one
//! lucky probe in a zone failing 60% does not release the zone.
//! A throttled window halves it too and caps slow start at that pace from
//! then on (TCP's ssthresh), so the pace saws below the quota it found
//! instead of doubling past it again. A closed domain answering 40% of calls
//! keeps getting budgeted retries; a dead zone gets probes ever further apart,
//! from one every `probe_every` to one every 4 × that. Pure; time is
//! passed in.

use crate::config::PaceConfig;
use std::time::Duration;

/// Success share at or above which the pace doubles instead of growing by
/// one step: the cloud answers nearly everything.
const SLOW_START: f64 = 0.9;

/// Failed probes double the interval between them, up to 2^2 = 4 times
/// `probe_every`: a dead zone costs few provider retries, and a zone that
/// is back waits at most that long for its next probe. With 8 times (2 min
/// as shipped) the capo_outage bench's full-zone return was seen by a
/// probe 0-2 min late, the 2-minute target missed or met by the probe's
/// phase; each probe costs CAPO main a few creates.
const MAX_PROBE_DOUBLINGS: u32 = 2;

/// Windows without a single release after which a closed domain's pace
/// is forgotten.
const IDLE_WINDOWS: u32 = 30;

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
    /// Releases owed: at most one carried from before, plus what the
    /// time since the last call adds (at most a window's worth).
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
    /// Windows in a row, while open, whose probes all failed.
    misses: u32,
    /// Half the pace at the last throttled window: slow start stops
    /// here and the pace grows by `step` above it (TCP's ssthresh).
    threshold: Option<f64>,
    /// Windows in a row without answers.
    idle: u32,
    /// A window with answers has ended since the breaker opened: those in
    /// `last_share` are the probes', not answers to releases made before.
    answered_open: bool,
    /// The probes' answers cooled the breaker: the next window with two
    /// answers or more, nearly all good, lifts the pace to at least `step`.
    cooling: bool,
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
            misses: 0,
            threshold: None,
            idle: 0,
            answered_open: false,
            cooling: false,
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
            Some(d) if !d.is_zero() => {
                let backoff = f64::from(1u32 << self.misses.min(MAX_PROBE_DOUBLINGS));
                Some(1.0 / (d.as_secs_f64() * backoff))
            }
            _ => None,
        }
    }

    /// The domain's breaker opened: back to probing.
    pub fn opened(&mut self) {
        self.open = true;
        self.cooling = false;
        self.answered_open = false;
        self.rate = Some(self.floor());
        self.credit = self.credit.min(1.0);
    }

    /// The probes' answers cooled the breaker. From the probe pace, doubling
    /// per window, a zone's 15 held objects took two minutes after the
    /// return (capo_outage full, runs 10-11). Now it sends two a window, and
    /// once a window has two good answers or more (nearly all of them), the
    /// pace goes from at least `step` a second. Not at the cooling itself,
    /// nor on one answer: a lucky probe in a zone failing 60% is followed by
    /// two releases, not a wave (a failing window halves the pace and opens
    /// the breaker again).
    pub fn cooled(&mut self) {
        if self.open && self.probe_rate().is_some() {
            self.cooling = true;
            let two = 2.0 / self.cfg.window.as_secs_f64().max(1.0);
            self.rate = Some(self.rate.unwrap_or(0.0).max(two));
        }
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
        self.cooling = false;
        self.misses = 0;
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

    /// The cloud has answered probes since the breaker opened, and their
    /// last window is in [`Self::failures`]: evidence of how it is now.
    pub fn probed(&self) -> bool {
        self.open && self.answered_open && self.last_share.is_some()
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
        // What the time since the last round owes, whatever the rounds'
        // spacing: capped at one second's worth, a round every tick (5 s,
        // no early rounds once a breaker cools) released a fifth of the
        // pace, one at a time (capo_outage full, run 10: 15 held objects
        // went 5 s apart after the return at a pace of 0.5 a second and
        // more). At most a window's worth, and one carried: a long gap
        // between rounds sends no burst.
        let owed = rate * dt.min(self.cfg.window.as_secs_f64());
        self.credit = self.credit.min(1.0) + owed;
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
            // Nothing released: no evidence either way any more. While
            // open, the last probe's answer stands until the next probe is
            // overdue, two intervals on (there is nothing held left to
            // probe).
            let quiet = f64::from(self.idle) * self.cfg.window.as_secs_f64();
            let standing = self.open && self.probe_rate().is_some_and(|r| quiet <= 2.0 / r);
            if !standing {
                self.last_share = None;
            }
            // Closed and long idle: what the pace learnt is stale, the
            // next releases start unpaced (and are paced again if they
            // fail).
            self.idle = self.idle.saturating_add(1);
            if !self.open && self.idle >= IDLE_WINDOWS {
                self.rate = None;
                self.threshold = None;
            }
            return;
        }
        self.idle = 0;
        self.answered_open |= self.open;
        let share = f64::from(self.ok) / f64::from(n);
        let answered_ok = self.ok;
        let throttled = self.throttled > 0;
        self.last_share = Some(share);
        self.last_failed = self.failed;
        if self.open && self.ok == 0 && !throttled {
            self.misses = self.misses.saturating_add(1);
        } else if self.ok > 0 {
            self.misses = 0;
        }
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
            if throttled {
                self.threshold = self.rate;
            }
            return;
        };
        // Throttled releases mean the pace is over the cloud's quota,
        // whatever share succeeded: back off, as TCP does on loss.
        let slow_start = self.threshold.is_none_or(|t| rate < t);
        let next = if throttled {
            self.threshold = Some((rate * 0.5).max(floor));
            rate * 0.5
        } else if share >= SLOW_START && slow_start {
            // Open, from the probe pace: doubling only, so one lucky
            // window sends one more probe, not `step` more a second.
            if self.cooling && answered_ok >= 2 {
                (rate * 2.0).max(self.cfg.step)
            } else if self.open {
                rate * 2.0
            } else {
                (rate * 2.0).max(rate + self.cfg.step)
            }
        } else if share >= self.cfg.min_success && !self.open {
            rate + self.cfg.step
        } else {
            // Open, the releases are probes: only a cloud answering nearly
            // all of them speeds them up. One that answers some (a lucky
            // probe in a zone failing 60%) goes back towards the probe
            // pace instead of releasing the zone into its outage.
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
        // A dead cloud: every probe fails, and they come further apart,
        // down to one every 4 × probe_every.
        let n = drive(&mut p, 1, 60, |_| false);
        assert!((8..=10).contains(&n), "{n} probes in 60 s");
        assert!(mostly_failing(&p));
        assert_eq!(p.rate(), Some(0.5 / 4.0));
        // No more probes for a while (nothing left held, say): the last
        // answer stands for two probe intervals, then nothing is known.
        for t in 61..=70 {
            p.allowance(secs(t), 80.0);
        }
        assert!(mostly_failing(&p), "the last probe still stands");
        for t in 71..=120 {
            p.allowance(secs(t), 80.0);
        }
        assert_eq!(p.failures(), None);
        // One probe succeeds: the interval is back to probe_every.
        p.outcome(Answer::Ok);
        p.allowance(secs(125), 80.0);
        assert_eq!(p.failures(), Some((0.0, 0)));
        assert!(p.rate().unwrap() >= 0.5, "{:?}", p.rate());
    }

    #[test]
    fn a_cloud_answering_40_percent_gets_a_growing_pace_once_its_breaker_closed() {
        let mut p = Pace::new(&cfg());
        p.opened();
        drive(&mut p, 1, 10, |_| false);
        p.closed();
        let n = drive(&mut p, 11, 120, |i| i % 5 < 2);
        assert!(!mostly_failing(&p));
        let rate = p.rate().unwrap();
        assert!(rate > 10.0, "rate {rate}");
        assert!(n > 300, "{n} releases in 2 min");
    }

    /// Open, the releases are probes: a cloud answering 40% of them keeps
    /// them at the probe pace (two windows of successes in a row would be
    /// needed to double it twice), where closed it grows by `step`.
    #[test]
    fn an_open_breaker_keeps_a_40_percent_cloud_at_the_probe_pace() {
        let mut p = Pace::new(&cfg());
        p.opened();
        let n = drive(&mut p, 1, 120, |i| i % 5 < 2);
        let rate = p.rate().unwrap();
        // probe_every 2 s: 60 probes in 2 min at the probe pace.
        assert!(rate <= 1.0, "rate {rate}");
        assert!(n <= 90, "{n} releases in 2 min");
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
        // The cloud answered: the breaker closes.
        p.closed();
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
        // The 429s stop: no more slow start up to the quota just found,
        // the pace climbs back by `step` a window, to the budget.
        drive(&mut p, 81, 10, |_| true);
        let r = p.rate().unwrap();
        let n = drive(&mut p, 91, 5, |_| true);
        assert_eq!(p.rate(), Some(r + 1.0), "{n} released");
        let secs_back = (96..2000u64)
            .step_by(5)
            .find(|t| {
                drive(&mut p, *t, 5, |_| true);
                p.rate().is_none()
            })
            .unwrap();
        assert!(
            (380..=460).contains(&secs_back),
            "back at the budget at {secs_back} s"
        );
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
    fn a_closed_domain_idle_for_30_windows_forgets_its_pace() {
        let mut p = Pace::new(&cfg());
        for t in 0..20 {
            let n = p.allowance(secs(t), 80.0).min(80);
            p.spend(n);
            (0..n).for_each(|_| p.outcome(Answer::Throttled));
        }
        assert!(p.rate().is_some(), "paced by the 429s");
        // Nothing released: 29 empty windows keep the pace, the 30th
        // forgets it.
        p.allowance(secs(20), 80.0);
        for w in 1..=29 {
            p.allowance(secs(20 + 5 * w), 80.0);
        }
        assert!(p.rate().is_some());
        p.allowance(secs(20 + 5 * 30), 80.0);
        assert_eq!(p.rate(), None);
    }

    #[test]
    fn only_answers_since_the_breaker_opened_are_probes() {
        let mut p = Pace::new(&cfg());
        // Releases answered before the outage.
        p.allowance(secs(0), 80.0);
        p.outcome(Answer::Ok);
        p.allowance(secs(5), 80.0);
        assert_eq!(p.failures(), Some((0.0, 0)));
        assert!(!p.probed(), "closed: no probes");
        p.opened();
        assert!(!p.probed(), "answers from before it opened");
        p.outcome(Answer::Ok);
        p.allowance(secs(10), 80.0);
        assert!(p.probed());
        // No more answers: the last stands for two probe intervals.
        p.allowance(secs(15), 80.0);
        assert!(p.probed());
        p.allowance(secs(20), 80.0);
        assert!(!p.probed());
        p.outcome(Answer::Ok);
        p.allowance(secs(25), 80.0);
        p.closed();
        assert!(!p.probed(), "closed again");
    }

    /// Once the probes cool the breaker, the pace sends two a window and a
    /// window of two good answers or more lifts it to a step (before, only
    /// doubling it); a single good answer doubles it, a failing window
    /// halves it as before.
    #[test]
    fn two_good_answers_after_the_probes_cooled_the_breaker_lift_the_pace_to_a_step() {
        let c = PaceConfig {
            probe_every: Some(Duration::from_secs(20)),
            step: 2.0,
            ..cfg()
        };
        let window = |p: &mut Pace, t: u64, ok: u32, failed: u32| {
            (0..ok).for_each(|_| p.outcome(Answer::Ok));
            (0..failed).for_each(|_| p.outcome(Answer::Failed));
            p.allowance(secs(t), 80.0);
        };
        let mut p = Pace::new(&c);
        p.allowance(secs(0), 80.0);
        p.opened();
        assert_eq!(p.rate(), Some(0.05), "probes: one every 20 s");
        p.cooled();
        assert_eq!(p.rate(), Some(0.4), "two a 5-s window");
        window(&mut p, 5, 1, 1);
        assert_eq!(p.rate(), Some(0.2), "a failing window halves");
        window(&mut p, 10, 1, 0);
        assert_eq!(p.rate(), Some(0.4), "one good answer doubles");
        window(&mut p, 15, 2, 0);
        assert_eq!(p.rate(), Some(2.0), "two, a step");
        window(&mut p, 20, 2, 0);
        assert_eq!(p.rate(), Some(4.0), "then doubling");
        // Without probes it waits for the close.
        let mut q = Pace::new(&PaceConfig {
            probe_every: None,
            ..c
        });
        q.opened();
        q.cooled();
        window(&mut q, 5, 2, 0);
        assert_eq!(q.allowance(secs(6), 80.0), 0);
    }

    #[test]
    fn credit_never_exceeds_a_window_and_time_going_back_adds_none() {
        let mut p = Pace::new(&cfg());
        p.opened();
        assert_eq!(p.allowance(secs(0), 80.0), 0);
        // One probe every 2 s, a 5-s window: 2.5 owed, not 500.
        assert_eq!(p.allowance(secs(1000), 80.0), 2, "a window's worth");
        p.spend(2);
        assert_eq!(p.allowance(secs(10), 80.0), 0);
    }

    /// The rounds' spacing does not change the pace: rounds 5 s apart (the
    /// shipped tick, once no breaker is open proper) release at the pace,
    /// as one-second rounds do. With the credit capped at one second's
    /// worth they released one a round, a fifth of it.
    #[test]
    fn rounds_a_tick_apart_release_at_the_pace() {
        for every in [1, 5] {
            let mut p = Pace::new(&cfg());
            p.opened();
            p.closed();
            assert_eq!(p.rate(), Some(0.5), "the probe pace goes on");
            let mut released = 0;
            // No answers: the pace stays where it is.
            for t in (0..=60).step_by(every) {
                let n = p.allowance(secs(t), 80.0);
                p.spend(n);
                released += n;
            }
            assert!(
                (29..=31).contains(&released),
                "rounds every {every} s: {released} in 60 s at 0.5 a second"
            );
        }
    }
}
