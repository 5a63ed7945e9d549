//! "The apiserver said slow down": one state shared by every request remedy
//! sends to the apiserver (episode record, executor writes, watches; the
//! Lease has a lane of its own, [`is_lease`]).
//! A 429 closes the gate for its `Retry-After` (at least 1 s; 1 s doubling
//! while the requests sent after each wait are refused again, capped at
//! 10 s; plus jitter so replicas do not return in step), for every client at
//! once: each retrying on its own is what kept remedy at ~10 requests/s
//! through a storm (#22.8). When the gate opens, requests are spaced by a
//! rate that starts low and doubles each second, so the waiting clients do
//! not all return in the same instant.
//!
//! Pure: no I/O, the clock and the randomness are arguments. The tower
//! layer that applies it is [`layer`].

pub mod layer;

use std::time::{Duration, Instant};

#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// Shortest wait after a 429, and the first one without `Retry-After`.
    pub min_wait: Duration,
    /// Longest wait, whatever `Retry-After` says: remedy must come back
    /// while its Lease can still be renewed after an apiserver restart.
    pub max_wait: Duration,
    /// Up to this fraction of a wait is added at random.
    pub jitter: f64,
    /// Requests per second when the gate opens; doubles each second.
    pub start_rate: f64,
    /// Once the ramp reaches this rate, requests are no longer spaced.
    pub full_rate: f64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            min_wait: Duration::from_secs(1),
            // Not 30 s: holds and releases that wait at the gate must be
            // written within 20 s of a storm's end (#38.16).
            max_wait: Duration::from_secs(10),
            jitter: 0.2,
            start_rate: 2.0,
            full_rate: 32.0,
        }
    }
}

/// Whether a request may be sent now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Admit {
    Go,
    /// Ask again after this long.
    Wait(Duration),
}

#[derive(Clone, Debug)]
struct Ramp {
    /// When the gate opened: the rate doubles each second from here.
    since: Instant,
    /// No request before this: one every 1/rate.
    next: Instant,
}

#[derive(Clone, Debug)]
pub struct Slowdown {
    policy: Policy,
    /// The gate: no request starts before this.
    until: Option<Instant>,
    /// 429s to requests sent after the previous wait ended, since the last
    /// success: the apiserver is still overloaded, so the wait doubles.
    strikes: u32,
    ramp: Option<Ramp>,
}

impl Slowdown {
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            until: None,
            strikes: 0,
            ramp: None,
        }
    }

    /// Whether a request may start at `now`; a `Go` takes its slot in the ramp.
    pub fn admit(&mut self, now: Instant) -> Admit {
        if let Some(until) = self.until.filter(|u| now < *u) {
            return Admit::Wait(until - now);
        }
        let Some(ramp) = &mut self.ramp else {
            return Admit::Go;
        };
        let rate = ramp_rate(&self.policy, now.saturating_duration_since(ramp.since));
        if rate >= self.policy.full_rate {
            self.ramp = None;
            return Admit::Go;
        }
        if now < ramp.next {
            return Admit::Wait(ramp.next - now);
        }
        ramp.next = now + Duration::from_secs_f64(1.0 / rate);
        Admit::Go
    }

    /// A 429 arrived at `now`. `jitter_unit` is uniform in 0..1. Returns
    /// the wait from now.
    pub fn throttled(
        &mut self,
        now: Instant,
        retry_after: Option<Duration>,
        jitter_unit: f64,
    ) -> Duration {
        // 429s to requests that were already in flight when the gate
        // closed are the same refusal, not a new one.
        if self.until.is_none_or(|u| now >= u) {
            self.strikes = self.strikes.saturating_add(1);
        }
        let p = &self.policy;
        let doubled = 1u32
            .checked_shl(self.strikes.saturating_sub(1))
            .and_then(|f| p.min_wait.checked_mul(f))
            .unwrap_or(p.max_wait);
        let base = retry_after
            .unwrap_or_default()
            .max(doubled)
            .clamp(p.min_wait, p.max_wait);
        let wait = base
            .mul_f64(1.0 + p.jitter * jitter_unit.clamp(0.0, 1.0))
            .min(p.max_wait);
        let until = now + wait;
        let until = self.until.map_or(until, |u| u.max(until));
        self.until = Some(until);
        self.ramp = Some(Ramp {
            since: until,
            next: until,
        });
        until - now
    }

    /// A request was answered with anything but 429.
    pub fn succeeded(&mut self) {
        self.strikes = 0;
    }

    /// How long a request arriving at `now` waits for the gate.
    pub fn backoff(&self, now: Instant) -> Duration {
        self.until
            .map_or(Duration::ZERO, |u| u.saturating_duration_since(now))
    }
}

/// Leader election's requests (coordination.k8s.io Leases) keep a lane of
/// their own: a renewal that waits behind the shared gate (up to 10 s)
/// outlives the Lease, and then no replica leads until long after the
/// apiserver answers again (#38.16: 30 s after a 40 s storm, none did).
/// They are one request a second or less, so they skip the gate and its
/// ramp, and after a 429 wait what `Retry-After` says, within
/// [`LEASE_MIN_WAIT`]..[`LEASE_MAX_WAIT`], for at most [`LEASE_MAX_SENDS`]
/// sends: then the error goes to the election, which decides.
pub fn is_lease(path: &str) -> bool {
    path.starts_with("/apis/coordination.k8s.io/")
}

pub const LEASE_MIN_WAIT: Duration = Duration::from_millis(250);
/// Well below the shortest lease remedy accepts (2 s).
pub const LEASE_MAX_WAIT: Duration = Duration::from_secs(1);
pub const LEASE_MAX_SENDS: u32 = 3;

/// How long a Lease request waits after a 429 (`jitter_unit` in 0..1 adds
/// up to a fifth, so replicas do not return in step).
pub fn lease_wait(retry_after: Option<Duration>, jitter_unit: f64) -> Duration {
    retry_after
        .unwrap_or(LEASE_MIN_WAIT)
        .clamp(LEASE_MIN_WAIT, LEASE_MAX_WAIT)
        .mul_f64(1.0 + 0.2 * jitter_unit.clamp(0.0, 1.0))
        .min(LEASE_MAX_WAIT)
}

/// start_rate·2^seconds since the gate opened.
fn ramp_rate(p: &Policy, since_open: Duration) -> f64 {
    p.start_rate * 2f64.powf(since_open.as_secs_f64().min(64.0))
}

/// `Retry-After` in seconds, as the apiserver sends it (the HTTP-date form
/// is not used by Kubernetes; it falls back to remedy's own backoff).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn no_jitter() -> Slowdown {
        Slowdown::new(Policy {
            jitter: 0.0,
            ..Policy::default()
        })
    }

    /// Requests admitted in [from, from+len), asking every `step` as a
    /// crowd of waiting clients would.
    fn admitted(s: &mut Slowdown, from: Instant, len: Duration, step: Duration) -> usize {
        let mut n = 0;
        let mut t = from;
        while t < from + len {
            if s.admit(t) == Admit::Go {
                n += 1;
            }
            t += step;
        }
        n
    }

    #[test]
    fn lease_requests_wait_what_retry_after_says_within_their_short_bounds() {
        assert!(is_lease(
            "/apis/coordination.k8s.io/v1/namespaces/remedy-system/leases/remedy"
        ));
        assert!(!is_lease("/api/v1/namespaces/remedy-system/configmaps/x"));
        assert_eq!(lease_wait(Some(S), 0.0), S);
        assert_eq!(lease_wait(Some(30 * S), 0.0), LEASE_MAX_WAIT, "capped");
        assert_eq!(lease_wait(None, 0.0), LEASE_MIN_WAIT);
        assert_eq!(lease_wait(Some(Duration::ZERO), 0.0), LEASE_MIN_WAIT);
        let jittered = lease_wait(None, 1.0);
        assert!(jittered > LEASE_MIN_WAIT && jittered <= LEASE_MAX_WAIT);
        // A whole retry sequence stays far inside the shortest lease.
        assert!(LEASE_MAX_WAIT * LEASE_MAX_SENDS < Duration::from_secs(4));
    }

    #[test]
    fn without_429s_everything_goes() {
        let t0 = Instant::now();
        let mut s = no_jitter();
        let ms = Duration::from_millis(1);
        assert_eq!(admitted(&mut s, t0, S, ms), 1000);
        assert_eq!(s.backoff(t0), Duration::ZERO);
    }

    #[test]
    fn a_429_closes_the_gate_for_retry_after_for_every_request() {
        let t0 = Instant::now();
        let mut s = no_jitter();
        assert_eq!(s.throttled(t0, Some(3 * S), 0.0), 3 * S);
        assert_eq!(s.admit(t0 + S), Admit::Wait(2 * S));
        assert_eq!(s.admit(t0 + 2 * S), Admit::Wait(S));
        assert_eq!(s.backoff(t0 + 2 * S), S);
        assert_eq!(s.admit(t0 + 3 * S), Admit::Go);
    }

    #[test]
    fn waits_are_capped_and_never_shorter_than_the_minimum() {
        let t0 = Instant::now();
        let mut s = no_jitter();
        assert_eq!(
            s.throttled(t0, Some(Duration::from_secs(3600)), 0.0),
            10 * S
        );
        let mut s = no_jitter();
        assert_eq!(s.throttled(t0, Some(Duration::ZERO), 0.0), S);
        let mut s = no_jitter();
        assert_eq!(s.throttled(t0, None, 0.0), S);
    }

    #[test]
    fn repeated_refusals_double_the_wait_until_a_success() {
        let t0 = Instant::now();
        let mut s = no_jitter();
        let mut t = t0;
        let mut waits = Vec::new();
        for _ in 0..7 {
            let w = s.throttled(t, Some(S), 0.0);
            waits.push(w.as_secs());
            t += w;
        }
        // Retry-After 1 s is honoured as a floor; the apiserver refusing
        // the request sent after each wait doubles it.
        assert_eq!(waits, vec![1, 2, 4, 8, 10, 10, 10]);
        s.succeeded();
        assert_eq!(s.throttled(t, Some(S), 0.0), S);
    }

    #[test]
    fn refusals_of_requests_already_in_flight_do_not_double_the_wait() {
        let t0 = Instant::now();
        let mut s = no_jitter();
        s.throttled(t0, Some(S), 0.0);
        // Ten requests sent before the gate closed come back 429 too.
        for i in 1..=10 {
            s.throttled(t0 + Duration::from_millis(i * 10), Some(S), 0.0);
        }
        // The gate moved with the last of them, by 1 s, not 2^10 s.
        assert_eq!(s.backoff(t0), Duration::from_millis(1100));
    }

    #[test]
    fn jitter_only_lengthens_the_wait_within_its_fraction() {
        let t0 = Instant::now();
        for (unit, want_ms) in [(0.0, 1000), (0.5, 1100), (1.0, 1200), (7.0, 1200)] {
            let mut s = Slowdown::new(Policy::default());
            let got = s.throttled(t0, Some(S), unit).as_secs_f64() * 1000.0;
            assert!((got - want_ms as f64).abs() < 0.01, "{unit}: {got} ms");
        }
    }

    #[test]
    fn after_the_gate_opens_the_rate_ramps_up_then_is_free() {
        let t0 = Instant::now();
        let mut s = no_jitter();
        s.throttled(t0, Some(S), 0.0);
        let open = t0 + S;
        let step = Duration::from_millis(1);
        // A crowd asking every millisecond gets 2·2^t per second, about
        // 3, 6, 12, 23 in the first four seconds: no burst when the gate opens.
        let per_second: Vec<usize> = (0..4)
            .map(|i| admitted(&mut s, open + i * S, S, step))
            .collect();
        for (i, &got) in per_second.iter().enumerate() {
            let want = 2.0 * 2f64.powi(i as i32) / std::f64::consts::LN_2;
            assert!(
                (got as f64 - want).abs() <= want * 0.25 + 1.0,
                "second {i}: {got} admitted, about {want:.1} expected ({per_second:?})"
            );
        }
        // The ramp reached full_rate: no spacing any more.
        assert_eq!(admitted(&mut s, open + 5 * S, S, step), 1000);
    }

    #[test]
    fn a_429_during_the_ramp_starts_it_again() {
        let t0 = Instant::now();
        let mut s = no_jitter();
        s.throttled(t0, Some(S), 0.0);
        let step = Duration::from_millis(1);
        admitted(&mut s, t0 + S, 3 * S, step);
        s.throttled(t0 + 4 * S, Some(S), 0.0);
        assert!(admitted(&mut s, t0 + 5 * S, S, step) <= 3);
    }

    #[test]
    fn the_gate_holds_a_crowd_to_one_request_per_opening_while_refused() {
        // A storm that refuses everything: each opening lets one request
        // through, which is refused and closes the gate for longer.
        let t0 = Instant::now();
        let mut s = no_jitter();
        let mut sent = 0;
        let mut t = t0;
        let end = t0 + Duration::from_secs(60);
        while t < end {
            if s.admit(t) == Admit::Go {
                sent += 1;
                s.throttled(t, Some(S), 0.0);
            }
            t += Duration::from_millis(10);
        }
        // At 0, 1, 3, 7, 15, 25, 35, 45 and 55 s: 9 requests in a minute,
        // not one per client per second.
        assert_eq!(sent, 9);
    }

    #[test]
    fn retry_after_is_whole_seconds() {
        assert_eq!(parse_retry_after("1"), Some(S));
        assert_eq!(parse_retry_after(" 30 "), Some(30 * S));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after(""), None);
    }
}
