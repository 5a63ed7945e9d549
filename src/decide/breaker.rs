//! The outage breaker of one failure domain: opens on a failing ratio or a
//! burst of "not found", closes after a calm cooldown. Time is injected as
//! `now: Duration` (as for the bucket); time going backwards never closes a
//! breaker early. Metrics are the caller's job.

use crate::config::BreakerConfig;
use std::collections::VecDeque;
use std::time::Duration;
/// One observation of the fleet, fed to the breaker by the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Resources observed.
    pub total: u32,
    /// Of those, in a transient failure.
    pub failing: u32,
    /// Of those, failing with "not found" (terminal per resource).
    pub not_found: u32,
    /// Fleet-wide failing ratio across remedy instances (a PromQL result).
    pub external_ratio: Option<f64>,
    /// Share of the domain's last releases that failed again, and how
    /// many failed (`decide::pace`). Held resources are quiet, not healthy:
    /// at `close_ratio` or more the breaker does not close on calm, and at
    /// `open_ratio` with `min_resources` failures it opens.
    pub release_failure_share: Option<f64>,
    pub release_failures: u32,
    /// The domain is held whole (`breaker.hold: domain`) with failed
    /// resources held to probe: nothing in it calls the cloud, so its calm
    /// is silence, not evidence. Open, the breaker starts cooling only
    /// once `probed`.
    pub held_whole: bool,
    /// Probes (releases made since it opened) have answered, and their
    /// last window is in `release_failure_share`.
    pub probed: bool,
}

impl Sample {
    /// `failing` of `total` resources in a transient failure, nothing else.
    pub fn failing(total: u32, failing: u32) -> Self {
        Self {
            total,
            failing,
            ..Self::default()
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenCause {
    /// The transient-failure ratio crossed `open_ratio`.
    Ratio,
    /// Many resources turned "not found" at once: credentials or a regional
    /// outage, not N broken machines.
    NotFound,
    /// Released resources failed again: the outage is not over.
    Releases,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open {
        since: Duration,
        cause: OpenCause,
    },
    /// Below `close_ratio` since `since`, waiting out the cooldown. Still
    /// counts as open: nothing is released yet.
    Cooling {
        since: Duration,
    },
}

impl BreakerState {
    pub fn is_open(&self) -> bool {
        !matches!(self, Self::Closed)
    }
}

/// Bound on remembered samples, so a caller observing far more often than
/// `window` expects cannot grow memory without limit.
const MAX_SAMPLES: usize = 4096;

#[derive(Clone, Copy, Debug)]
struct Observed {
    at: Duration,
    failing_ratio: f64,
    not_found_ratio: f64,
}

/// Opens on a high failing ratio (or a burst of not-found), closes with
/// hysteresis: only after the ratio stayed below `close_ratio` for `cooldown`.
#[derive(Clone, Debug)]
pub struct OutageBreaker {
    open_ratio: f64,
    close_ratio: f64,
    min_resources: u32,
    window: Duration,
    cooldown: Duration,
    samples: VecDeque<Observed>,
    state: BreakerState,
    /// When and why the breaker last opened; kept through Cooling so a relapse
    /// reports the original outage.
    opened: Option<(Duration, OpenCause)>,
    last_now: Option<Duration>,
    /// Resources failing (and still reconciling) in the last sample.
    last_failing: u32,
}

impl OutageBreaker {
    pub fn new(c: &BreakerConfig) -> Self {
        Self {
            open_ratio: c.open_ratio,
            close_ratio: c.close_ratio,
            min_resources: c.min_resources,
            window: c.window,
            cooldown: c.cooldown,
            samples: VecDeque::new(),
            state: BreakerState::Closed,
            opened: None,
            last_now: None,
            last_failing: 0,
        }
    }

    pub fn state(&self) -> BreakerState {
        self.state
    }

    pub fn is_open(&self) -> bool {
        self.state.is_open()
    }

    /// The windowed failing ratio it judges by (without an external
    /// ratio), and the resources failing in its last sample: what the
    /// shipped outage alert reads, so it fires on the breaker's own numbers.
    pub fn judged(&self) -> (f64, u32) {
        (self.ratios(None).0, self.last_failing)
    }

    /// Windowed failing ratio (max'ed with a valid external ratio) and
    /// windowed not-found ratio, as of the samples currently held.
    fn ratios(&self, external: Option<f64>) -> (f64, f64) {
        let n = self.samples.len();
        let (mut failing, mut not_found) = (0.0, 0.0);
        for s in &self.samples {
            failing += s.failing_ratio;
            not_found += s.not_found_ratio;
        }
        let (failing, not_found) = if n == 0 {
            // Nothing observed in the window: no evidence of failure.
            (0.0, 0.0)
        } else {
            (failing / n as f64, not_found / n as f64)
        };
        let external = external
            .filter(|r| r.is_finite() && (0.0..=1.0).contains(r))
            .unwrap_or(0.0);
        (failing.max(external), not_found)
    }

    /// Feeds one sample and returns the resulting state.
    pub fn observe(&mut self, now: Duration, sample: Sample) -> BreakerState {
        let now = self.last_now.map_or(now, |l| now.max(l));
        self.last_now = Some(now);

        let failing = sample.failing.min(sample.total);
        self.last_failing = failing;
        let not_found = sample.not_found.min(sample.total);
        // Ratios of this sample alone; an empty sample has none and is not
        // averaged in (it would dilute the window with fake zeros).
        let (now_failing, now_not_found) = if sample.total == 0 {
            (0.0, 0.0)
        } else {
            let t = f64::from(sample.total);
            (f64::from(failing) / t, f64::from(not_found) / t)
        };
        if sample.total > 0 {
            if self.samples.len() >= MAX_SAMPLES {
                self.samples.pop_front();
            }
            self.samples.push_back(Observed {
                at: now,
                failing_ratio: now_failing,
                not_found_ratio: now_not_found,
            });
        }
        while self
            .samples
            .front()
            .is_some_and(|s| now.saturating_sub(s.at) >= self.window && s.at != now)
        {
            self.samples.pop_front();
        }

        let (ratio, nf_ratio) = self.ratios(sample.external_ratio);
        let open_by_not_found = not_found >= self.min_resources && now_not_found >= self.open_ratio;
        let open_by_ratio = ratio >= self.open_ratio && failing >= self.min_resources;
        let released = sample.release_failure_share.unwrap_or(0.0);
        let open_by_releases =
            released >= self.open_ratio && sample.release_failures >= self.min_resources;
        let below =
            ratio < self.close_ratio && nf_ratio < self.close_ratio && released < self.close_ratio;

        self.state = match self.state {
            BreakerState::Closed => {
                let cause = if open_by_not_found {
                    Some(OpenCause::NotFound)
                } else if open_by_ratio {
                    Some(OpenCause::Ratio)
                } else if open_by_releases {
                    Some(OpenCause::Releases)
                } else {
                    None
                };
                match cause {
                    Some(cause) => {
                        self.opened = Some((now, cause));
                        BreakerState::Open { since: now, cause }
                    }
                    None => BreakerState::Closed,
                }
            }
            BreakerState::Open { since, cause } => {
                // Once cooling, no answer is needed any more: the failed
                // resources go while it cools, and then none is left to probe.
                if below && (!sample.held_whole || sample.probed) {
                    self.cool_or_close(now, now)
                } else {
                    BreakerState::Open { since, cause }
                }
            }
            BreakerState::Cooling { since } => {
                if below {
                    self.cool_or_close(since, now)
                } else {
                    // Relapse: the cooldown restarts from scratch next time.
                    let (since, cause) = self.opened.unwrap_or((now, OpenCause::Ratio));
                    BreakerState::Open { since, cause }
                }
            }
        };
        self.state
    }

    /// Opens a closed breaker because remedy's own holds say it was open
    /// (a restart or a new leader has no samples of the outage): the full
    /// cooldown must then pass below `close_ratio` before anything is
    /// released, whatever the ratio is now.
    pub fn resume(&mut self, now: Duration) {
        if self.state == BreakerState::Closed {
            let now = self.last_now.map_or(now, |l| now.max(l));
            self.opened = Some((now, OpenCause::Ratio));
            self.state = BreakerState::Open {
                since: now,
                cause: OpenCause::Ratio,
            };
        }
    }

    fn cool_or_close(&mut self, cooling_since: Duration, now: Duration) -> BreakerState {
        if now.saturating_sub(cooling_since) >= self.cooldown {
            self.opened = None;
            BreakerState::Closed
        } else {
            BreakerState::Cooling {
                since: cooling_since,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn cfg() -> BreakerConfig {
        BreakerConfig {
            open_ratio: 0.3,
            close_ratio: 0.1,
            min_resources: 5,
            window: secs(10),
            cooldown: secs(30),
            query: None,
            domain: crate::config::DomainBy::Cluster,
            release: Default::default(),
            hold: Default::default(),
        }
    }

    /// What the shipped outage alert reads is what the breaker decides on:
    /// the windowed ratio (not the last sample's) and the last count.
    #[test]
    fn judged_is_the_windowed_ratio_and_the_last_failing_count() {
        let mut b = OutageBreaker::new(&cfg());
        assert_eq!(b.judged(), (0.0, 0));
        b.observe(secs(1), Sample::failing(10, 6));
        b.observe(secs(2), Sample::failing(10, 2));
        let (ratio, failing) = b.judged();
        assert!((ratio - 0.4).abs() < 1e-9, "{ratio}");
        assert_eq!(failing, 2);
        // Past the window only the last sample is left.
        b.observe(secs(20), Sample::failing(10, 1));
        let (ratio, failing) = b.judged();
        assert!((ratio - 0.1).abs() < 1e-9, "{ratio}");
        assert_eq!(failing, 1);
    }

    #[test]
    fn breaker_opens_on_ratio_and_needs_min_resources() {
        let mut small = OutageBreaker::new(&cfg());
        // 4 of 4 failing: ratio 1 but fewer than min_resources.
        assert_eq!(
            small.observe(secs(1), Sample::failing(4, 4)),
            BreakerState::Closed
        );
        let mut b = OutageBreaker::new(&cfg());
        assert_eq!(
            b.observe(secs(1), Sample::failing(100, 20)),
            BreakerState::Closed
        );
        assert_eq!(
            b.observe(secs(2), Sample::failing(100, 50)),
            BreakerState::Open {
                since: secs(2),
                cause: OpenCause::Ratio
            }
        );
        assert!(b.is_open());
    }

    #[test]
    fn breaker_averages_over_the_window() {
        let mut b = OutageBreaker::new(&cfg());
        // 0.0 and 0.5 average to 0.25 < 0.3: still closed.
        b.observe(secs(1), Sample::failing(100, 0));
        assert_eq!(
            b.observe(secs(2), Sample::failing(100, 50)),
            BreakerState::Closed
        );
        // Once the 0.0 sample leaves the 10 s window, 0.5 alone opens it.
        assert!(b.observe(secs(11), Sample::failing(100, 50)).is_open());
    }

    #[test]
    fn breaker_uses_valid_external_ratio_and_ignores_garbage() {
        let mut b = OutageBreaker::new(&cfg());
        let mut s = Sample::failing(100, 10);
        for bad in [f64::NAN, f64::INFINITY, -0.5, 1.5] {
            s.external_ratio = Some(bad);
            assert_eq!(b.observe(secs(1), s), BreakerState::Closed, "{bad}");
        }
        s.external_ratio = Some(0.8);
        assert!(b.observe(secs(2), s).is_open());
    }

    #[test]
    fn breaker_hysteresis_and_cooldown() {
        let mut b = OutageBreaker::new(&cfg());
        assert!(b.observe(secs(0), Sample::failing(100, 60)).is_open());
        // Between close and open ratio: stays open (hysteresis).
        assert!(matches!(
            b.observe(secs(20), Sample::failing(100, 20)),
            BreakerState::Open { .. }
        ));
        // Below close: cooling, still open for holding purposes.
        let s = b.observe(secs(40), Sample::failing(100, 0));
        assert_eq!(s, BreakerState::Cooling { since: secs(40) });
        assert!(s.is_open());
        assert!(b.observe(secs(69), Sample::failing(100, 0)).is_open());
        // A relapse during cooling reopens with the original since/cause…
        assert_eq!(
            b.observe(secs(70), Sample::failing(100, 50)),
            BreakerState::Open {
                since: secs(0),
                cause: OpenCause::Ratio
            }
        );
        // …and the cooldown restarts once below again (window must clear).
        assert!(matches!(
            b.observe(secs(85), Sample::failing(100, 0)),
            BreakerState::Cooling { since } if since == secs(85)
        ));
        assert!(b.observe(secs(114), Sample::failing(100, 0)).is_open());
        assert_eq!(
            b.observe(secs(115), Sample::failing(100, 0)),
            BreakerState::Closed
        );
    }

    #[test]
    fn breaker_not_found_burst_opens_and_must_clear_to_close() {
        let mut b = OutageBreaker::new(&cfg());
        let nf = Sample {
            total: 100,
            failing: 0,
            not_found: 40,
            external_ratio: None,
            ..Sample::default()
        };
        assert_eq!(
            b.observe(secs(1), nf),
            BreakerState::Open {
                since: secs(1),
                cause: OpenCause::NotFound
            }
        );
        // The failing ratio is zero, but not-found persists: stays open.
        assert!(matches!(b.observe(secs(30), nf), BreakerState::Open { .. }));
        assert!(matches!(
            b.observe(secs(50), Sample::failing(100, 0)),
            BreakerState::Cooling { .. }
        ));
        assert_eq!(
            b.observe(secs(80), Sample::failing(100, 0)),
            BreakerState::Closed
        );
    }

    #[test]
    fn a_few_not_found_do_not_open() {
        let mut b = OutageBreaker::new(&cfg());
        let few = Sample {
            total: 10,
            failing: 0,
            not_found: 4,
            external_ratio: None,
            ..Sample::default()
        };
        assert_eq!(b.observe(secs(1), few), BreakerState::Closed);
        let spread = Sample {
            total: 1000,
            failing: 0,
            not_found: 50,
            external_ratio: None,
            ..Sample::default()
        };
        assert_eq!(b.observe(secs(2), spread), BreakerState::Closed);
    }

    #[test]
    fn failed_releases_keep_it_open_and_reopen_it() {
        let mut b = OutageBreaker::new(&cfg());
        b.observe(secs(0), Sample::failing(100, 50));
        assert!(b.is_open());
        // Calm (everything failing is held), but the releases fail again:
        // no cooling, however long.
        let releases = |share, n| Sample {
            release_failure_share: Some(share),
            release_failures: n,
            ..Sample::failing(100, 0)
        };
        for t in 1..100 {
            b.observe(secs(t), releases(0.5, 2));
        }
        assert!(matches!(b.state(), BreakerState::Open { .. }));
        // They succeed: it cools and closes.
        for t in 100..200 {
            b.observe(secs(t), releases(0.0, 0));
        }
        assert_eq!(b.state(), BreakerState::Closed);
        // Closed, releases fail again: a few do not reopen it, enough do.
        b.observe(secs(200), releases(1.0, 2));
        assert_eq!(b.state(), BreakerState::Closed);
        b.observe(secs(201), releases(1.0, 5));
        assert_eq!(
            b.state(),
            BreakerState::Open {
                since: secs(201),
                cause: OpenCause::Releases
            }
        );
    }

    #[test]
    fn held_whole_it_cools_only_on_the_probes_answer() {
        let mut b = OutageBreaker::new(&cfg());
        b.observe(secs(0), Sample::failing(100, 50));
        // Everything held: calm, but no probe has answered.
        let held = |probed, share| Sample {
            held_whole: true,
            probed,
            release_failure_share: share,
            ..Sample::failing(100, 0)
        };
        for t in 1..200 {
            b.observe(secs(t), held(false, None));
        }
        assert!(matches!(b.state(), BreakerState::Open { .. }));
        // Probes fail: still open.
        b.observe(secs(200), held(true, Some(1.0)));
        assert!(matches!(b.state(), BreakerState::Open { .. }));
        // They succeed: it cools, and closes on calm without more answers.
        assert_eq!(
            b.observe(secs(201), held(true, Some(0.0))),
            BreakerState::Cooling { since: secs(201) }
        );
        b.observe(secs(220), held(false, None));
        assert_eq!(
            b.observe(secs(231), held(false, None)),
            BreakerState::Closed
        );
    }

    #[test]
    fn breaker_time_going_backwards_does_not_shorten_cooldown() {
        let mut b = OutageBreaker::new(&cfg());
        b.observe(secs(100), Sample::failing(100, 60));
        b.observe(secs(120), Sample::failing(100, 0));
        // The clock jumps back: counted as "still 120 s", so not yet closed.
        assert!(b.observe(secs(10), Sample::failing(100, 0)).is_open());
        assert!(b.observe(secs(149), Sample::failing(100, 0)).is_open());
        assert_eq!(
            b.observe(secs(150), Sample::failing(100, 0)),
            BreakerState::Closed
        );
    }

    #[test]
    fn a_resumed_breaker_serves_the_full_cooldown() {
        let cfg = BreakerConfig {
            open_ratio: 0.3,
            close_ratio: 0.1,
            min_resources: 5,
            window: Duration::from_secs(10),
            cooldown: Duration::from_secs(60),
            query: None,
            domain: crate::config::DomainBy::Cluster,
            release: Default::default(),
            hold: Default::default(),
        };
        let mut b = OutageBreaker::new(&cfg);
        let at = |s| Duration::from_secs(s);
        let mid = Sample {
            total: 100,
            failing: 17,
            not_found: 0,
            external_ratio: None,
            ..Sample::default()
        };
        // Between close and open: a fresh breaker stays closed.
        assert_eq!(b.observe(at(1), mid), BreakerState::Closed);
        b.resume(at(2));
        assert!(
            b.observe(at(3), mid).is_open(),
            "0.17 is not below close_ratio"
        );
        let calm = Sample { failing: 0, ..mid };
        assert_eq!(
            b.observe(at(20), calm),
            BreakerState::Cooling { since: at(20) }
        );
        assert!(b.observe(at(79), calm).is_open());
        assert_eq!(b.observe(at(80), calm), BreakerState::Closed);
        // Resuming an open breaker changes nothing.
        let mut open = OutageBreaker::new(&cfg);
        open.resume(at(0));
        let before = open.state();
        open.resume(at(5));
        assert_eq!(open.state(), before);
    }

    proptest! {
        #[test]
        fn breaker_closes_only_after_a_continuous_calm_cooldown(
            obs in proptest::collection::vec((0u64..4_000, 0u32..100), 1..150),
        ) {
            let c = cfg();
            let mut b = OutageBreaker::new(&c);
            let mut now = Duration::ZERO;
            let mut was_open = false;
            // Oracle: the windowed ratio, recomputed independently, and the
            // time of the last observation where it was at/above close_ratio.
            let mut window: Vec<(Duration, f64)> = Vec::new();
            let mut last_hot: Option<Duration> = None;
            for (dt_ms, failing) in obs {
                now += Duration::from_millis(dt_ms);
                window.push((now, f64::from(failing) / 100.0));
                window.retain(|(at, _)| *at == now || now - *at < c.window);
                let avg = window.iter().map(|(_, r)| r).sum::<f64>() / window.len() as f64;
                if avg >= c.close_ratio {
                    last_hot = Some(now);
                }
                let s = b.observe(now, Sample::failing(100, failing));
                if was_open && s == BreakerState::Closed {
                    let hot = last_hot.unwrap_or(Duration::ZERO);
                    prop_assert!(now.saturating_sub(hot) >= c.cooldown,
                        "closed at {now:?}, last hot sample at {hot:?}");
                }
                if let BreakerState::Cooling { since } = s {
                    prop_assert!(now.saturating_sub(since) < c.cooldown);
                }
                was_open = s.is_open();
            }
        }
    }
}
