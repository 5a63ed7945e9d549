//! The staggered release planner: who is released this tick, lowest
//! crash_count first, within the budget, each domain's pace and breaker,
//! and each owner's `max_in_flight`. Deterministic; no clock of its own.

use crate::decide::bucket::TokenBucket;
use std::time::Duration;
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
}
