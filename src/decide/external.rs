//! The planner of Cluster API external remediation (issue #36): for each
//! `RemedyRemediation` a MachineHealthCheck created, the one thing to do now.
//!
//! Pure: the daemon hands in the requests' validated steps and status, the
//! Machines' facts, whether an outage covers each Machine (its failure
//! domain's breaker, a configured outage alert for its scope), the budget
//! left this tick, and the time. Rules, in order, for each request:
//!
//! 1. Machine gone or deleting, or healthy again: done (the MHC deletes the
//!    request of a healthy Machine; the ownerRef removes a gone one's).
//! 2. Already escalated: wait for the MachineSet to replace the Machine.
//! 3. An outage covers the Machine, or the Machine is paused (remedy's
//!    breaker holds it, or someone else): defer, with why and until when.
//!    Nothing is retried or escalated; a step under way restarts after it
//!    (a retry during the outage proved nothing either way). A paused
//!    Machine is no target of its MHC, so its `HealthCheckSucceeded` is
//!    stale: escalating it would replace a Machine that may be healthy.
//! 4. No step started, a step timed out with another after it, or a step to
//!    restart after an outage: start it, if the budget (and `budget.per`)
//!    allows, lowest crash count first; else queue.
//! 5. The current step's action not yet done: retry, or escalate
//!    (`OwnerRemediated=False`) if it is a replace step.
//! 6. Otherwise wait for the step's timeout; the last step timed out without
//!    a replace leaves the Machine to a human (exhausted).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::remediation::{Phase, Step, StepKind};

/// What remedy recorded of a request (its status), as the planner needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The step under way, if one started.
    pub current_step: Option<usize>,
    pub step_started: Option<DateTime<Utc>>,
    /// The current step's action is done.
    pub acted: bool,
    /// The last plan deferred it for an outage.
    pub deferred: bool,
}

/// The Machine the request is for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineFacts {
    pub found: bool,
    pub deleting: bool,
    /// `HealthCheckSucceeded` is not False.
    pub healthy: bool,
    /// `spec.failureDomain`.
    pub zone: Option<String>,
    /// remedy's crash count for the Machine (its infrastructure object's).
    pub crash_count: u32,
    /// `cluster.x-k8s.io/paused`: its MHC does not judge it.
    pub paused: bool,
}

/// Why a request is deferred.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outage {
    /// The failure domain's outage breaker is open.
    Breaker { domain: String },
    /// A configured outage alert fires for the Machine's scope.
    Alert { alert: String },
    /// The Machine is paused (remedy's hold during an outage, or another's).
    Paused,
}

impl Outage {
    pub fn reason(&self) -> &'static str {
        match self {
            Outage::Breaker { .. } => "BreakerOpen",
            Outage::Alert { .. } => "OutageAlert",
            Outage::Paused => "MachinePaused",
        }
    }

    pub fn message(&self) -> String {
        match self {
            Outage::Breaker { domain } => {
                format!("the outage breaker of failure domain {domain} is open")
            }
            Outage::Alert { alert } => format!("outage alert {alert} fires for this Machine"),
            Outage::Paused => "the Machine is paused: its MachineHealthCheck does not judge it until the pause goes".into(),
        }
    }
}

/// One request, as the planner reads it.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// `namespace/name`: ties are broken by it, so plans are deterministic.
    pub key: &'a str,
    pub steps: &'a [Step],
    pub progress: Progress,
    pub machine: MachineFacts,
    /// The outage that covers the Machine, if any, and when it may end.
    pub outage: Option<(Outage, Option<DateTime<Utc>>)>,
    /// The Machine's owner for `budget.per`, if it is configured.
    pub owner: Option<&'a str>,
}

/// What the budget allows this tick.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Budget {
    /// Steps that may start (retries and replacements alike: each is a
    /// write against the cloud or a create of a new Machine).
    pub starts: usize,
    /// When the next start is allowed if `starts` is 0.
    pub next_start: Option<DateTime<Utc>>,
    /// Free `budget.per` slots by owner; an owner not listed is not limited.
    pub per_owner: BTreeMap<String, usize>,
}

/// Why a request waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The budget allows no start now.
    Budget,
    /// The owner's `budget.per` slots are taken.
    BudgetPer { owner: String },
    /// A retry step is under way: the Machine may heal until the timeout.
    Healing,
    /// Escalated: the MachineSet deletes and replaces the Machine.
    Replacement,
    /// The last step timed out and none replaces the Machine.
    Exhausted,
}

impl Wait {
    pub fn reason(&self) -> &'static str {
        match self {
            Wait::Budget => "Budget",
            Wait::BudgetPer { .. } => "BudgetPerOwner",
            Wait::Healing => "StepTimeout",
            Wait::Replacement => "Replacement",
            Wait::Exhausted => "Exhausted",
        }
    }
}

/// Why a request is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    Healthy,
    Gone,
}

/// The one thing to do for a request now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Done(Done),
    Defer {
        outage: Outage,
        until: Option<DateTime<Utc>>,
    },
    /// Record that step `i` starts now (status first, then act next tick).
    StartStep(usize),
    /// Clear what stops the provider, then wait for health.
    Retry,
    /// Set `OwnerRemediated=False` on the Machine.
    Escalate,
    Wait {
        why: Wait,
        until: Option<DateTime<Utc>>,
    },
}

impl Action {
    /// The phase the request is in after this action; `None`: leave the
    /// status as it is (the Machine is gone, the request goes with it).
    pub fn phase(&self, steps: &[Step]) -> Option<Phase> {
        let kind = |i: usize| steps.get(i).map(|s| s.kind);
        Some(match self {
            Action::Done(Done::Healthy) => Phase::Succeeded,
            Action::Done(Done::Gone) => return None,
            Action::Defer { .. } => Phase::Deferred,
            Action::StartStep(i) if kind(*i) == Some(StepKind::Replace) => Phase::Escalated,
            Action::StartStep(_) | Action::Retry => Phase::Retrying,
            Action::Escalate => Phase::Escalated,
            Action::Wait { why, .. } => match why {
                Wait::Budget | Wait::BudgetPer { .. } => Phase::Queued,
                Wait::Healing => Phase::Retrying,
                Wait::Replacement => Phase::Escalated,
                Wait::Exhausted => Phase::Exhausted,
            },
        })
    }
}

/// The deadline of the current step, if one is under way.
fn deadline(steps: &[Step], p: &Progress) -> Option<(usize, DateTime<Utc>)> {
    let i = p.current_step?;
    let started = p.step_started?;
    let step = steps.get(i)?;
    let timeout = chrono::Duration::from_std(step.timeout).ok()?;
    Some((i, started + timeout))
}

/// What one request needs before the budget is shared out.
enum Need {
    Act(Action),
    Start(usize),
}

fn need(r: &Request, now: DateTime<Utc>) -> Need {
    let m = &r.machine;
    if !m.found || m.deleting {
        return Need::Act(Action::Done(Done::Gone));
    }
    if m.healthy {
        return Need::Act(Action::Done(Done::Healthy));
    }
    let p = &r.progress;
    let current = p.current_step.and_then(|i| r.steps.get(i).map(|s| (i, s)));
    // Escalated: the Machine is the MachineSet's now; an outage changes
    // nothing (the MachineSet's deletion cannot be taken back).
    if let Some((_, s)) = current
        && s.kind == StepKind::Replace
        && p.acted
    {
        let due = deadline(r.steps, p).map(|(_, d)| d);
        return Need::Act(match due {
            Some(d) if now >= d => Action::Wait {
                why: Wait::Exhausted,
                until: None,
            },
            _ => Action::Wait {
                why: Wait::Replacement,
                until: due,
            },
        });
    }
    if let Some((outage, until)) = &r.outage {
        return Need::Act(Action::Defer {
            outage: outage.clone(),
            until: *until,
        });
    }
    if m.paused {
        return Need::Act(Action::Defer {
            outage: Outage::Paused,
            until: None,
        });
    }
    let Some((i, step)) = current else {
        return Need::Start(0);
    };
    // Back from an outage: the step starts again, through the budget. A
    // deferral clears the step's start (the daemon writes that), so the
    // restart outlives a round queued for the budget.
    if p.deferred || p.step_started.is_none() {
        return Need::Start(i);
    }
    if !p.acted {
        return Need::Act(match step.kind {
            StepKind::Retry => Action::Retry,
            StepKind::Replace => Action::Escalate,
        });
    }
    match deadline(r.steps, p) {
        Some((_, due)) if now < due => Need::Act(Action::Wait {
            why: Wait::Healing,
            until: Some(due),
        }),
        _ if i + 1 < r.steps.len() => Need::Start(i + 1),
        _ => Need::Act(Action::Wait {
            why: Wait::Exhausted,
            until: None,
        }),
    }
}

/// The action for each request, in the order given. Requests that need a
/// step started share `budget`, lowest crash count first.
pub fn plan(requests: &[Request], budget: &Budget, now: DateTime<Utc>) -> Vec<Action> {
    let mut out: Vec<Option<Action>> = Vec::with_capacity(requests.len());
    let mut starts: Vec<(usize, usize)> = Vec::new();
    for (n, r) in requests.iter().enumerate() {
        match need(r, now) {
            Need::Act(a) => out.push(Some(a)),
            Need::Start(step) => {
                out.push(None);
                starts.push((n, step));
            }
        }
    }
    starts.sort_by(|a, b| {
        let (ra, rb) = (&requests[a.0], &requests[b.0]);
        (ra.machine.crash_count, ra.key).cmp(&(rb.machine.crash_count, rb.key))
    });
    let mut left = budget.starts;
    let mut per = budget.per_owner.clone();
    for (n, step) in starts {
        let owner = requests[n].owner;
        let slot = owner.and_then(|o| per.get_mut(o));
        out[n] = Some(match slot {
            Some(0) => Action::Wait {
                why: Wait::BudgetPer {
                    owner: owner.unwrap_or_default().to_string(),
                },
                until: None,
            },
            _ if left == 0 => Action::Wait {
                why: Wait::Budget,
                until: budget.next_start,
            },
            slot => {
                left -= 1;
                if let Some(free) = slot {
                    *free -= 1;
                }
                Action::StartStep(step)
            }
        });
    }
    out.into_iter()
        .map(|a| {
            a.unwrap_or(Action::Wait {
                why: Wait::Budget,
                until: None,
            })
        })
        .collect()
}

/// How long a step has been under way, for logs and `explain`.
pub fn step_age(p: &Progress, now: DateTime<Utc>) -> Option<Duration> {
    p.step_started.and_then(|s| (now - s).to_std().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).expect("time")
    }

    const RETRY_THEN_REPLACE: [Step; 2] = [
        Step {
            kind: StepKind::Retry,
            timeout: Duration::from_secs(60),
        },
        Step {
            kind: StepKind::Replace,
            timeout: Duration::from_secs(300),
        },
    ];

    fn unhealthy() -> MachineFacts {
        MachineFacts {
            found: true,
            deleting: false,
            healthy: false,
            zone: Some("az1".into()),
            crash_count: 0,
            paused: false,
        }
    }

    fn request(key: &str) -> Request<'_> {
        Request {
            key,
            steps: &RETRY_THEN_REPLACE,
            progress: Progress::default(),
            machine: unhealthy(),
            outage: None,
            owner: None,
        }
    }

    fn at_step(key: &str, i: usize, started: i64, acted: bool) -> Request<'_> {
        Request {
            progress: Progress {
                current_step: Some(i),
                step_started: Some(t(started)),
                acted,
                deferred: false,
            },
            ..request(key)
        }
    }

    fn budget(starts: usize) -> Budget {
        Budget {
            starts,
            ..Budget::default()
        }
    }

    fn one(r: Request, b: &Budget, now: i64) -> Action {
        plan(&[r], b, t(now)).remove(0)
    }

    fn breaker() -> Option<(Outage, Option<DateTime<Utc>>)> {
        Some((
            Outage::Breaker {
                domain: "az1".into(),
            },
            None,
        ))
    }

    #[test]
    fn a_new_request_starts_its_first_step_then_retries() {
        assert_eq!(one(request("ns/m"), &budget(1), 0), Action::StartStep(0));
        assert_eq!(
            one(at_step("ns/m", 0, 0, false), &budget(0), 1),
            Action::Retry
        );
    }

    #[test]
    fn a_retried_machine_gets_its_timeout_to_heal() {
        let a = one(at_step("ns/m", 0, 0, true), &budget(5), 59);
        assert_eq!(
            a,
            Action::Wait {
                why: Wait::Healing,
                until: Some(t(60))
            }
        );
        assert_eq!(a.phase(&RETRY_THEN_REPLACE), Some(Phase::Retrying));
    }

    #[test]
    fn escalates_only_after_the_retry_timed_out() {
        // At the timeout the replace step starts (through the budget), and
        // the next tick escalates.
        assert_eq!(
            one(at_step("ns/m", 0, 0, true), &budget(1), 60),
            Action::StartStep(1)
        );
        assert_eq!(
            one(at_step("ns/m", 1, 60, false), &budget(0), 61),
            Action::Escalate
        );
        let waiting = one(at_step("ns/m", 1, 60, true), &budget(5), 62);
        assert_eq!(
            waiting,
            Action::Wait {
                why: Wait::Replacement,
                until: Some(t(360))
            }
        );
        assert_eq!(waiting.phase(&RETRY_THEN_REPLACE), Some(Phase::Escalated));
    }

    #[test]
    fn never_escalates_while_deferred() {
        for (i, acted) in [(0, true), (1, false)] {
            let r = Request {
                outage: breaker(),
                ..at_step("ns/m", i, 0, acted)
            };
            let a = one(r, &budget(5), 1000);
            assert!(
                matches!(a, Action::Defer { .. }),
                "step {i} acted {acted}: {a:?}"
            );
            assert_eq!(a.phase(&RETRY_THEN_REPLACE), Some(Phase::Deferred));
        }
    }

    #[test]
    fn an_outage_defers_with_reason_and_until() {
        let until = t(900);
        let r = Request {
            outage: Some((
                Outage::Alert {
                    alert: "CloudAPIDegraded".into(),
                },
                Some(until),
            )),
            ..request("ns/m")
        };
        match one(r, &budget(5), 0) {
            Action::Defer { outage, until: u } => {
                assert_eq!(outage.reason(), "OutageAlert");
                assert!(outage.message().contains("CloudAPIDegraded"));
                assert_eq!(u, Some(until));
            }
            a => panic!("{a:?}"),
        }
        let b = Outage::Breaker {
            domain: "az1".into(),
        };
        assert_eq!(b.reason(), "BreakerOpen");
        assert!(b.message().contains("az1"));
    }

    #[test]
    fn after_an_outage_the_step_starts_again_through_the_budget() {
        let mut r = at_step("ns/m", 0, 0, true);
        r.progress.deferred = true;
        // Long past the retry's timeout: it restarts, it does not escalate.
        assert_eq!(one(r.clone(), &budget(1), 5000), Action::StartStep(0));
        assert_eq!(
            one(r, &budget(0), 5000),
            Action::Wait {
                why: Wait::Budget,
                until: None
            }
        );
    }

    #[test]
    fn a_paused_machine_is_deferred_and_its_step_restarts_after() {
        // Held by remedy's breaker while its retry step timed out: its
        // HealthCheckSucceeded is stale, it must not be escalated.
        let mut r = at_step("ns/m", 0, 0, true);
        r.machine.paused = true;
        let a = one(r.clone(), &budget(5), 1000);
        assert_eq!(
            a,
            Action::Defer {
                outage: Outage::Paused,
                until: None
            }
        );
        assert_eq!(Outage::Paused.reason(), "MachinePaused");
        r.machine.paused = false;
        r.progress.deferred = true;
        assert_eq!(one(r, &budget(5), 1001), Action::StartStep(0));
    }

    #[test]
    fn a_step_cleared_by_a_deferral_restarts_even_after_a_queued_round() {
        // The daemon clears the start when it defers; one round later the
        // request was queued for the budget (phase Queued, not Deferred).
        let r = Request {
            progress: Progress {
                current_step: Some(0),
                step_started: None,
                acted: false,
                deferred: false,
            },
            ..request("ns/m")
        };
        assert_eq!(
            one(r.clone(), &budget(0), 5000),
            Action::Wait {
                why: Wait::Budget,
                until: None
            }
        );
        assert_eq!(one(r, &budget(1), 5001), Action::StartStep(0));
    }

    #[test]
    fn an_escalated_machine_is_not_taken_back_by_an_outage() {
        let r = Request {
            outage: breaker(),
            ..at_step("ns/m", 1, 0, true)
        };
        assert!(matches!(
            one(r, &budget(5), 10),
            Action::Wait {
                why: Wait::Replacement,
                ..
            }
        ));
    }

    #[test]
    fn healthy_or_gone_machines_are_done() {
        let mut r = at_step("ns/m", 0, 0, true);
        r.machine.healthy = true;
        r.outage = breaker();
        let a = one(r.clone(), &budget(0), 10);
        assert_eq!(a, Action::Done(Done::Healthy));
        assert_eq!(a.phase(&RETRY_THEN_REPLACE), Some(Phase::Succeeded));
        r.machine.healthy = false;
        r.machine.deleting = true;
        assert_eq!(one(r.clone(), &budget(0), 10), Action::Done(Done::Gone));
        r.machine.deleting = false;
        r.machine.found = false;
        let gone = one(r, &budget(0), 10);
        assert_eq!(gone, Action::Done(Done::Gone));
        assert_eq!(gone.phase(&RETRY_THEN_REPLACE), None);
    }

    #[test]
    fn the_last_step_timed_out_is_exhausted() {
        let retry_only = [Step {
            kind: StepKind::Retry,
            timeout: Duration::from_secs(60),
        }];
        let r = Request {
            steps: &retry_only,
            ..at_step("ns/m", 0, 0, true)
        };
        let a = one(r, &budget(5), 60);
        assert_eq!(
            a,
            Action::Wait {
                why: Wait::Exhausted,
                until: None
            }
        );
        assert_eq!(a.phase(&retry_only), Some(Phase::Exhausted));
        // A replace the MachineSet never carried out, too.
        let a = one(at_step("ns/m", 1, 0, true), &budget(5), 300);
        assert_eq!(a.phase(&RETRY_THEN_REPLACE), Some(Phase::Exhausted));
    }

    #[test]
    fn a_short_budget_goes_to_the_lowest_crash_counts_first() {
        let keys = ["ns/a", "ns/b", "ns/c", "ns/d"];
        let crashes = [5, 0, 3, 0];
        let rs: Vec<_> = keys
            .iter()
            .zip(crashes)
            .map(|(k, c)| {
                let mut r = request(k);
                r.machine.crash_count = c;
                r
            })
            .collect();
        let b = Budget {
            starts: 2,
            next_start: Some(t(2)),
            per_owner: BTreeMap::new(),
        };
        let got = plan(&rs, &b, t(0));
        let queued = Action::Wait {
            why: Wait::Budget,
            until: Some(t(2)),
        };
        assert_eq!(
            got,
            [
                queued.clone(),
                Action::StartStep(0),
                queued,
                Action::StartStep(0)
            ]
        );
        assert_eq!(got[0].phase(&RETRY_THEN_REPLACE), Some(Phase::Queued));
    }

    #[test]
    fn budget_per_owner_limits_one_owner_only() {
        let mut a = request("ns/a");
        a.owner = Some("md-1");
        let mut b = request("ns/b");
        b.owner = Some("md-1");
        let mut c = request("ns/c");
        c.owner = Some("md-2");
        let budget = Budget {
            starts: 10,
            next_start: None,
            per_owner: BTreeMap::from([("md-1".to_string(), 1)]),
        };
        let got = plan(&[a, b, c], &budget, t(0));
        assert_eq!(
            got,
            [
                Action::StartStep(0),
                Action::Wait {
                    why: Wait::BudgetPer {
                        owner: "md-1".into()
                    },
                    until: None
                },
                Action::StartStep(0)
            ]
        );
    }

    #[test]
    fn deferred_requests_take_no_budget() {
        let mut deferred = request("ns/a");
        deferred.outage = breaker();
        let other = request("ns/b");
        let got = plan(&[deferred, other], &budget(1), t(0));
        assert!(matches!(got[0], Action::Defer { .. }));
        assert_eq!(got[1], Action::StartStep(0));
    }

    #[test]
    fn a_replace_only_strategy_escalates_at_once_outside_an_outage() {
        let replace = [Step {
            kind: StepKind::Replace,
            timeout: Duration::from_secs(60),
        }];
        let r = Request {
            steps: &replace,
            ..request("ns/m")
        };
        let a = one(r, &budget(1), 0);
        assert_eq!(a, Action::StartStep(0));
        assert_eq!(a.phase(&replace), Some(Phase::Escalated));
    }

    #[test]
    fn step_age_counts_from_the_recorded_start() {
        let p = Progress {
            current_step: Some(0),
            step_started: Some(t(10)),
            ..Progress::default()
        };
        assert_eq!(step_age(&p, t(70)), Some(Duration::from_secs(60)));
        assert_eq!(step_age(&Progress::default(), t(70)), None);
    }
}
