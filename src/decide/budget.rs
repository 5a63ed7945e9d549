//! Cluster-wide throttling, the pure parts: a token bucket (the retry budget),
//! the outage breaker and the staggered release planner.
//!
//! Everything here is deterministic. Time is injected as `now: Duration`, a
//! monotonic offset from an arbitrary origin chosen by the caller (the
//! controller uses process uptime, the simulator simulated time). Time going
//! backwards is treated as no time passing, never as an error: a clock hiccup
//! must not mint tokens or close a breaker early. Metrics are the caller's job.

use crate::config::{BreakerConfig, BudgetConfig};
use std::collections::VecDeque;
use std::time::Duration;

/// Slack for float rounding: refills accumulated in many small steps can end
/// a hair below a whole token, which must still count as one.
const TOKEN_EPSILON: f64 = 1e-9;

/// A token bucket: `refill_per_second` tokens are added continuously, up to
/// `burst`. One token pays for one release.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBucket {
    refill_per_second: f64,
    burst: u32,
    tokens: f64,
    /// Latest `now` seen; `None` until the first use, so a new bucket is full
    /// whatever origin the caller's clock has.
    last: Option<Duration>,
}

impl TokenBucket {
    /// Starts full. A non-finite or negative rate is treated as zero (no
    /// refill) rather than poisoning the arithmetic with NaN.
    pub fn new(refill_per_second: f64, burst: u32) -> Self {
        let refill_per_second = if refill_per_second.is_finite() && refill_per_second > 0.0 {
            refill_per_second
        } else {
            0.0
        };
        Self {
            refill_per_second,
            burst,
            tokens: f64::from(burst),
            last: None,
        }
    }

    pub fn from_config(c: &BudgetConfig) -> Self {
        Self::new(c.refill_per_second, c.burst)
    }

    pub fn refill_per_second(&self) -> f64 {
        self.refill_per_second
    }

    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// Tokens and clock after letting time run to `now` (never backwards).
    fn advanced(&self, now: Duration) -> (f64, Duration) {
        let Some(last) = self.last else {
            return (self.tokens, now);
        };
        let elapsed = now.saturating_sub(last);
        let refill = elapsed.as_secs_f64() * self.refill_per_second;
        let tokens = (self.tokens + refill).clamp(0.0, f64::from(self.burst));
        (tokens, now.max(last))
    }

    /// Tokens available at `now`, within `0..=burst`.
    pub fn tokens(&self, now: Duration) -> f64 {
        self.advanced(now).0
    }

    /// Takes one token if there is one.
    pub fn try_take(&mut self, now: Duration) -> bool {
        let (tokens, last) = self.advanced(now);
        self.last = Some(last);
        if tokens + TOKEN_EPSILON >= 1.0 {
            // Clamp: the epsilon may take us a hair below zero.
            self.tokens = (tokens - 1.0).max(0.0);
            true
        } else {
            self.tokens = tokens;
            false
        }
    }

    /// How long until `try_take` can succeed; `Duration::MAX` if never
    /// (zero burst or zero refill with the bucket empty).
    pub fn time_until_token(&self, now: Duration) -> Duration {
        let tokens = self.tokens(now);
        if tokens + TOKEN_EPSILON >= 1.0 {
            return Duration::ZERO;
        }
        if self.burst == 0 || self.refill_per_second == 0.0 {
            return Duration::MAX;
        }
        let secs = (1.0 - tokens) / self.refill_per_second;
        // Round up to the next nanosecond so waiting exactly this long is
        // always enough.
        let nanos = (secs * 1e9).ceil();
        if nanos >= u64::MAX as f64 {
            return Duration::MAX;
        }
        Duration::from_nanos(nanos as u64)
    }
}

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

impl OpenCause {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Ratio => "ratio",
            Self::NotFound => "not_found",
            Self::Releases => "releases",
        }
    }
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

    pub fn label(&self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open { .. } => "open",
            Self::Cooling { .. } => "cooling",
        }
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
        }
    }

    pub fn state(&self) -> BreakerState {
        self.state
    }

    pub fn is_open(&self) -> bool {
        self.state.is_open()
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
                if below {
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

/// A held or failing resource asking to be released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate<K> {
    pub key: K,
    pub crash_count: u32,
    /// Backoff still to wait (zero once elapsed).
    pub backoff_remaining: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WaitReason {
    Breaker,
    Backoff,
    Budget,
    /// Its owner (`budget.per`) has `max_in_flight` releases whose answer
    /// is not in yet.
    Owner,
}

impl WaitReason {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Breaker => "breaker",
            Self::Backoff => "backoff",
            Self::Budget => "budget",
            Self::Owner => "owner",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleasePlan<K> {
    /// In release order: lowest crash_count first, then key.
    pub release: Vec<K>,
    /// Everyone else, in the same order, with what they wait for.
    pub waiting: Vec<(K, WaitReason)>,
}

/// Decides who is released this tick. Lowest crash_count first (the most
/// likely to succeed, and brupop's order), then key, so the plan is
/// deterministic. Tokens are spent only for actual releases, at most
/// `max_per_tick` of them.
pub fn plan_releases<K: Clone + Ord>(
    candidates: &[Candidate<K>],
    breaker_open: bool,
    bucket: &mut TokenBucket,
    now: Duration,
    max_per_tick: usize,
) -> ReleasePlan<K> {
    plan_shared(candidates, |_| (0, breaker_open), bucket, now, max_per_tick)
}

/// As [`plan_releases`], with failure domains: `domain(key)` gives the
/// candidate's share (its domain) and whether that domain's breaker is
/// open. Releases go round robin over the shares, each in crash-count
/// order, so a domain with a long backlog cannot take every token while
/// another waits; with one share this is exactly `plan_releases`.
pub fn plan_shared<K: Clone + Ord>(
    candidates: &[Candidate<K>],
    domain: impl Fn(&K) -> (usize, bool),
    bucket: &mut TokenBucket,
    now: Duration,
    max_per_tick: usize,
) -> ReleasePlan<K> {
    plan_paced(
        candidates,
        |k| {
            let (share, open) = domain(k);
            (share, if open { 0 } else { usize::MAX }, open)
        },
        bucket,
        now,
        max_per_tick,
    )
}

/// As [`plan_shared`], with each share also limited by its own allowance
/// this tick (its adaptive pace, `decide::pace`): `domain(key)` gives
/// (share, allowance, breaker open). A candidate whose share has no
/// allowance left waits for the breaker if it is open (only probes go
/// out then), else for the budget.
pub fn plan_paced<K: Clone + Ord>(
    candidates: &[Candidate<K>],
    domain: impl Fn(&K) -> (usize, usize, bool),
    bucket: &mut TokenBucket,
    now: Duration,
    max_per_tick: usize,
) -> ReleasePlan<K> {
    plan_owned(
        candidates,
        domain,
        &mut Owners::none(),
        bucket,
        now,
        max_per_tick,
    )
}

/// Per-owner room (`budget.per`): the owner of a candidate, as an index
/// into `room`, and how many more of each owner may go this tick (its
/// `max_in_flight` less its releases still in flight). A candidate
/// without an owner is not limited.
pub struct Owners<'a, K> {
    pub of: &'a dyn Fn(&K) -> Option<usize>,
    pub room: Vec<usize>,
}

impl<K> Owners<'_, K> {
    pub fn none() -> Self {
        Self {
            of: &|_| None,
            room: Vec::new(),
        }
    }

    fn full(&self, key: &K) -> bool {
        (self.of)(key).is_some_and(|o| self.room.get(o).copied().unwrap_or(0) == 0)
    }

    fn take(&mut self, key: &K) {
        if let Some(r) = (self.of)(key).and_then(|o| self.room.get_mut(o)) {
            *r = r.saturating_sub(1);
        }
    }
}

/// As [`plan_paced`], with each owner limited to its room in `owners`: a
/// candidate whose owner has none left waits for `owner` and takes no
/// token, so the next in line (another owner's) goes instead.
pub fn plan_owned<K: Clone + Ord>(
    candidates: &[Candidate<K>],
    domain: impl Fn(&K) -> (usize, usize, bool),
    owners: &mut Owners<'_, K>,
    bucket: &mut TokenBucket,
    now: Duration,
    max_per_tick: usize,
) -> ReleasePlan<K> {
    let mut order: Vec<(&Candidate<K>, usize, usize, bool)> = candidates
        .iter()
        .map(|c| {
            let (share, allow, open) = domain(&c.key);
            (c, share, allow, open)
        })
        .collect();
    order.sort_by(|(a, ..), (b, ..)| {
        a.crash_count
            .cmp(&b.crash_count)
            .then_with(|| a.key.cmp(&b.key))
    });
    // Round robin: the n-th candidate of every share before any (n+1)-th;
    // the sort is stable, so crash-count order holds within a round.
    let mut seen: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    let mut left: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    let mut ranked: Vec<(usize, &Candidate<K>, usize, bool)> = order
        .into_iter()
        .map(|(c, share, allow, open)| {
            let n = seen.entry(share).or_insert(0);
            *n += 1;
            left.entry(share).or_insert(allow);
            (*n, c, share, open)
        })
        .collect();
    ranked.sort_by_key(|(rank, ..)| *rank);
    let mut plan = ReleasePlan {
        release: Vec::new(),
        waiting: Vec::with_capacity(candidates.len()),
    };
    for (_, c, share, open) in ranked {
        let allowed = left.get(&share).copied().unwrap_or(0);
        let reason = if allowed == 0 {
            Some(if open {
                WaitReason::Breaker
            } else {
                WaitReason::Budget
            })
        } else if owners.full(&c.key) {
            Some(WaitReason::Owner)
        } else if !c.backoff_remaining.is_zero() {
            Some(WaitReason::Backoff)
        } else if plan.release.len() < max_per_tick && bucket.try_take(now) {
            None
        } else {
            Some(WaitReason::Budget)
        };
        match reason {
            None => {
                if let Some(l) = left.get_mut(&share) {
                    *l = l.saturating_sub(1);
                }
                owners.take(&c.key);
                plan.release.push(c.key.clone())
            }
            Some(r) => plan.waiting.push((c.key.clone(), r)),
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// A candidate past its backoff.
    fn c(key: &'static str, crash_count: u32) -> Candidate<&'static str> {
        Candidate {
            key,
            crash_count,
            backoff_remaining: Duration::ZERO,
        }
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
        }
    }

    #[test]
    fn bucket_starts_full_refills_and_caps_at_burst() {
        let mut b = TokenBucket::new(2.0, 3);
        let t0 = secs(1000);
        assert_eq!(b.tokens(t0), 3.0);
        assert!(b.try_take(t0));
        assert!(b.try_take(t0));
        assert!(b.try_take(t0));
        assert!(!b.try_take(t0));
        assert_eq!(b.tokens(t0), 0.0);
        assert_eq!(b.time_until_token(t0), Duration::from_millis(500));
        assert!(!b.try_take(t0 + Duration::from_millis(499)));
        assert!(b.try_take(t0 + Duration::from_millis(500)));
        assert_eq!(b.tokens(t0 + secs(3600)), 3.0);
    }

    #[test]
    fn bucket_ignores_time_going_backwards() {
        let mut b = TokenBucket::new(1.0, 2);
        assert!(b.try_take(secs(100)));
        assert!(b.try_take(secs(100)));
        // Going back neither refills nor moves the clock back: returning to
        // 100 s later must not count the same second twice.
        assert_eq!(b.tokens(secs(50)), 0.0);
        assert!(!b.try_take(secs(50)));
        assert!(!b.try_take(secs(100)));
        assert!(b.try_take(secs(101)));
    }

    #[test]
    fn bucket_degenerate_parameters_never_release_or_panic() {
        let mut zero_burst = TokenBucket::new(10.0, 0);
        assert!(!zero_burst.try_take(secs(1)));
        assert_eq!(zero_burst.time_until_token(secs(1)), Duration::MAX);
        let mut nan = TokenBucket::new(f64::NAN, 1);
        assert!(nan.try_take(secs(1)));
        assert!(!nan.try_take(secs(1_000_000)));
        assert_eq!(nan.time_until_token(secs(2)), Duration::MAX);
        let tiny = TokenBucket::new(1e-300, 1);
        let mut t = tiny.clone();
        assert!(t.try_take(Duration::ZERO));
        assert_eq!(t.time_until_token(Duration::ZERO), Duration::MAX);
    }

    #[test]
    fn bucket_many_small_refills_add_up_to_a_token() {
        let mut b = TokenBucket::new(0.1, 1);
        assert!(b.try_take(Duration::ZERO));
        let mut now = Duration::ZERO;
        // Failed takes still advance the bucket, so the refill is summed in
        // ten 0.1 steps, which in f64 is 0.9999999999999999.
        for _ in 0..9 {
            now += secs(1);
            assert!(!b.try_take(now), "no token before 10 s");
        }
        now += secs(1);
        assert!(b.try_take(now), "ten refills of 0.1 are one token");
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

    /// `budget.per`: an owner with no room left waits (`owner`) and takes
    /// no token; the next in line, another owner's or none's, goes.
    #[test]
    fn an_owner_at_its_max_in_flight_waits_and_others_go_in_its_place() {
        // md-a: a1..a4 (room 2); md-b: b1, b2 (room 0: two in flight);
        // n1 has no owner label.
        let cands = vec![
            c("a1", 0),
            c("a2", 0),
            c("a3", 0),
            c("a4", 0),
            c("b1", 0),
            c("b2", 1),
            c("n1", 2),
        ];
        let of = |k: &&str| match k.as_bytes()[0] {
            b'a' => Some(0),
            b'b' => Some(1),
            _ => None,
        };
        let mut owners = Owners {
            of: &of,
            room: vec![2, 0],
        };
        let mut bucket = TokenBucket::new(1.0, 10);
        let plan = plan_owned(
            &cands,
            |_| (0, usize::MAX, false),
            &mut owners,
            &mut bucket,
            secs(0),
            10,
        );
        assert_eq!(plan.release, vec!["a1", "a2", "n1"]);
        for k in ["a3", "a4", "b1", "b2"] {
            assert!(
                plan.waiting.contains(&(k, WaitReason::Owner)),
                "{k}: {plan:?}"
            );
        }
        assert_eq!(owners.room, vec![0, 0]);
        // Only the three releases took tokens.
        assert!((bucket.tokens(secs(0)) - 7.0).abs() < 1e-9);
        assert_eq!(WaitReason::Owner.label(), "owner");
    }

    #[test]
    fn domains_share_the_budget_and_an_open_domain_waits_alone() {
        // a-* in domain 0 (a long backlog, lower crash counts), b-* in 1,
        // x-* in 2 whose breaker is open.
        let cands = vec![
            c("a1", 0),
            c("a2", 0),
            c("a3", 0),
            c("a4", 1),
            c("b1", 3),
            c("b2", 4),
            c("x1", 0),
        ];
        let domain = |k: &&str| match k.as_bytes()[0] {
            b'a' => (0, false),
            b'b' => (1, false),
            _ => (2, true),
        };
        let mut bucket = TokenBucket::new(1.0, 4);
        let plan = plan_shared(&cands, domain, &mut bucket, secs(0), 10);
        assert_eq!(plan.release, vec!["a1", "b1", "a2", "b2"]);
        assert!(plan.waiting.contains(&("x1", WaitReason::Breaker)));
        assert!(plan.waiting.contains(&("a3", WaitReason::Budget)));
        // One share: the cluster-wide order, lowest crash count first.
        let mut bucket = TokenBucket::new(1.0, 4);
        let plan = plan_releases(&cands, false, &mut bucket, secs(0), 10);
        assert_eq!(plan.release, vec!["a1", "a2", "a3", "x1"]);
    }

    #[test]
    fn planner_orders_and_spends_only_on_release() {
        let cands = vec![
            Candidate {
                key: "c",
                crash_count: 2,
                backoff_remaining: Duration::ZERO,
            },
            Candidate {
                key: "a",
                crash_count: 5,
                backoff_remaining: Duration::ZERO,
            },
            Candidate {
                key: "b",
                crash_count: 2,
                backoff_remaining: Duration::ZERO,
            },
            Candidate {
                key: "d",
                crash_count: 0,
                backoff_remaining: secs(3),
            },
        ];
        let mut bucket = TokenBucket::new(1.0, 2);
        let plan = plan_releases(&cands, false, &mut bucket, secs(0), 10);
        assert_eq!(plan.release, vec!["b", "c"]);
        assert_eq!(
            plan.waiting,
            vec![("d", WaitReason::Backoff), ("a", WaitReason::Budget)]
        );
        assert_eq!(bucket.tokens(secs(0)), 0.0);

        let mut full = TokenBucket::new(1.0, 10);
        let held = plan_releases(&cands, true, &mut full, secs(0), 10);
        assert!(held.release.is_empty());
        assert!(held.waiting.iter().all(|(_, r)| *r == WaitReason::Breaker));
        assert_eq!(full.tokens(secs(0)), 10.0, "breaker open spends nothing");

        let capped = plan_releases(&cands, false, &mut full, secs(0), 1);
        assert_eq!(capped.release, vec!["b"]);
        assert_eq!(
            full.tokens(secs(0)),
            9.0,
            "max_per_tick spends nothing more"
        );
        assert_eq!(WaitReason::Budget.label(), "budget");
        assert_eq!(WaitReason::Breaker.label(), "breaker");
        assert_eq!(WaitReason::Backoff.label(), "backoff");
    }

    proptest! {
        #[test]
        fn bucket_stays_in_bounds_and_never_over_releases(
            rate in 0.0f64..50.0,
            burst in 0u32..20,
            steps in proptest::collection::vec((-5_000i64..5_000, any::<bool>()), 1..200),
        ) {
            let mut b = TokenBucket::new(rate, burst);
            let mut now = Duration::from_secs(10_000);
            // The bucket's clock starts at its first try_take (full then);
            // from there only the forward span can mint tokens.
            let mut first: Option<Duration> = None;
            let mut max_now = Duration::ZERO;
            let mut taken = 0u64;
            for (delta_ms, take) in steps {
                now = if delta_ms >= 0 {
                    now + Duration::from_millis(delta_ms as u64)
                } else {
                    now.saturating_sub(Duration::from_millis(delta_ms.unsigned_abs()))
                };
                if take {
                    let start = *first.get_or_insert(now);
                    max_now = max_now.max(now).max(start);
                    if b.try_take(now) {
                        taken += 1;
                    }
                }
                let t = b.tokens(now);
                prop_assert!((0.0..=f64::from(burst)).contains(&t), "tokens {t}");
                let wait = b.time_until_token(now);
                if wait != Duration::MAX {
                    // The bucket never moves its clock back, so wait from
                    // the latest time it has seen.
                    let mut probe = b.clone();
                    let seen = if first.is_some() { now.max(max_now) } else { now };
                    prop_assert!(probe.try_take(seen + wait), "waited {wait:?}");
                }
            }
            let span = first.map_or(0.0, |f| (max_now - f).as_secs_f64());
            prop_assert!(taken as f64 <= f64::from(burst) + rate * span + 1e-6);
        }

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

        #[test]
        fn planner_loses_and_doubles_nothing(
            raw in proptest::collection::btree_map(0u32..1000, (0u32..6, 0u64..3), 0..60),
            open in any::<bool>(),
            burst in 0u32..30,
            max_per_tick in 0usize..40,
        ) {
            let cands: Vec<Candidate<u32>> = raw
                .iter()
                .map(|(k, (crash, wait))| Candidate {
                    key: *k,
                    crash_count: *crash,
                    backoff_remaining: Duration::from_secs(*wait),
                })
                .collect();
            let mut bucket = TokenBucket::new(1.0, burst);
            let now = Duration::from_secs(5);
            let before = bucket.tokens(now);
            let plan = plan_releases(&cands, open, &mut bucket, now, max_per_tick);

            let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
            for k in plan.release.iter().chain(plan.waiting.iter().map(|(k, _)| k)) {
                *seen.entry(*k).or_default() += 1;
            }
            prop_assert_eq!(seen.len(), cands.len());
            prop_assert!(seen.values().all(|n| *n == 1));
            prop_assert!(plan.release.len() <= max_per_tick);
            let spent = before - bucket.tokens(now);
            prop_assert!((spent - plan.release.len() as f64).abs() < 1e-9);
            let crash = |k: &u32| raw[k].0;
            prop_assert!(plan.release.windows(2).all(|w| crash(&w[0]) <= crash(&w[1])));
            if open {
                prop_assert!(plan.release.is_empty());
                prop_assert!(plan.waiting.iter().all(|(_, r)| *r == WaitReason::Breaker));
            }
            for (k, r) in &plan.waiting {
                let in_backoff = raw[k].1 > 0;
                match r {
                    WaitReason::Backoff => prop_assert!(!open && in_backoff),
                    WaitReason::Budget => prop_assert!(!open && !in_backoff),
                    WaitReason::Breaker => prop_assert!(open),
                    WaitReason::Owner => prop_assert!(false, "no owners here"),
                }
            }
            // Nobody eligible waits on budget while a worse one got released.
            if let Some(worst) = plan.release.iter().map(crash).max() {
                prop_assert!(plan.waiting.iter().all(|(k, r)|
                    *r != WaitReason::Budget || crash(k) >= worst));
            }
        }
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
}
