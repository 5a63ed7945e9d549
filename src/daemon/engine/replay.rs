//! The daemon and `remedy simulate` make the same decisions: a simulator
//! run, recorded tick by tick, is replayed as OpenStackMachine objects
//! through the daemon's engine (store, classification, profile, hold
//! records, the decision core behind it) at the recorded times, and every
//! tick's holds, releases and waits must match what the simulator decided.

use super::*;
use crate::model::profile::HoldMark;
use crate::model::profile::{
    CAPI_PAUSED, CRASH_ANNOTATION, FAILURE_TIME_ANNOTATION, HOLD_ANNOTATION, PAUSE_MARKER,
};
use crate::sim::remedy::{Remedy, RemedyParams, SimFact, ZONE_LABEL, wall, zone_name};
use crate::sim::{Mode, Scenario};
use kube::api::DynamicObject;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::collections::BTreeSet;

/// The object a daemon would watch for a simulated resource.
fn object(id: u32, f: &SimFact) -> Value {
    let mut annotations = serde_json::Map::new();
    if let Some(t) = f.failure_time {
        annotations.insert(CRASH_ANNOTATION.into(), f.crash_count.to_string().into());
        let at = wall(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        annotations.insert(FAILURE_TIME_ANNOTATION.into(), at.into());
    }
    if f.paused {
        let record = HoldMark {
            since: wall(f.failure_time.unwrap_or(0)),
            reason: BREAKER_REASON.into(),
            crash_count: f.crash_count,
            value: None,
        };
        annotations.insert(CAPI_PAUSED.into(), PAUSE_MARKER.into());
        let record = serde_json::to_string(&record).unwrap();
        annotations.insert(HOLD_ANNOTATION.into(), record.into());
    }
    let status = if f.failing {
        let message = if f.throttled {
            "429 Too Many Requests"
        } else {
            "got 503 instead"
        };
        json!({"instanceState": "BUILD", "failureReason": "CreateError", "failureMessage": message})
    } else {
        json!({"instanceState": "ACTIVE"})
    };
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
        "metadata": {
            "name": format!("m{id:03}"), "namespace": "ns",
            "labels": {ZONE_LABEL: zone_name(f.zone)},
            "annotations": annotations,
        },
        "status": status
    })
}

fn id_of(key: &ResourceKey) -> u32 {
    key.name.trim_start_matches('m').parse().unwrap()
}

#[tokio::test]
async fn the_engine_replays_a_simulator_run_with_the_same_decisions() {
    let s = Scenario {
        resources: 60,
        controllers: 2,
        api_limit: 10,
        outage: Duration::from_secs(240),
        after: Duration::from_secs(240),
        resync: Duration::from_secs(60),
        ..Scenario::default_for(Mode::Zones)
    };
    let params = RemedyParams::for_scenario(&s);
    let mut sim = Remedy::new(params.clone(), &s).recording();
    let fleet = crate::sim::engine::Fleet::new(&s);
    crate::sim::engine::run_policy(&s, &fleet, &mut sim, 5);

    // The simulator's parameters are the daemon's config sections.
    let cfg = Config {
        breaker: params.core.breaker.clone(),
        budget: params.core.budget.clone(),
        backoff: params.backoff.clone(),
        ..Config::default()
    };
    let (engine, store) = super::tests::engine(&cfg, true);

    let mut last: Vec<Option<Value>> = vec![None; s.resources as usize];
    let mut rv = 0u64;
    let (mut holds, mut releases, mut probes, mut closes) = (0, 0, 0, 0);
    for rec in sim.trace() {
        let watched: BTreeMap<u32, &SimFact> = rec.facts.iter().map(|(id, f)| (*id, f)).collect();
        for id in 0..s.resources {
            let healthy = SimFact {
                zone: s.zone_of(id),
                paused: false,
                failing: false,
                throttled: false,
                fresh: true,
                crash_count: 0,
                failure_time: None,
            };
            let f = watched.get(&id).copied().unwrap_or(&healthy);
            assert!(f.fresh, "every release is answered within its second");
            let obj = object(id, f);
            // A new resourceVersion only when the object changed, as the
            // apiserver does: plan markers rely on it.
            if last[id as usize].as_ref() != Some(&obj) {
                rv += 1;
                let mut o = obj.clone();
                o["metadata"]["resourceVersion"] = rv.to_string().into();
                let o: DynamicObject = serde_json::from_value(o).unwrap();
                store.apply(0, &o);
                last[id as usize] = Some(obj);
            }
        }
        engine.round(
            Duration::from_millis(rec.now),
            wall(rec.now),
            Pass::Tick { external: None },
            engine.deps.leader.is_leader(),
        );
        let goals = std::mem::take(&mut *engine.pending.goals.lock().unwrap()).queued;
        let got_holds: BTreeSet<(u32, String, u32)> = goals
            .iter()
            .filter_map(|(k, g)| match g {
                Goal::Hold(r) => Some((id_of(k), r.reason.clone(), r.crash_count)),
                _ => None,
            })
            .collect();
        let want_holds: BTreeSet<(u32, String, u32)> = rec
            .decisions
            .holds
            .iter()
            .map(|h| (h.key, h.reason.clone(), h.crash_count))
            .collect();
        assert_eq!(got_holds, want_holds, "holds at {} ms", rec.now);
        let got_releases: BTreeSet<u32> = goals
            .iter()
            .filter(|(_, g)| *g == Goal::Release)
            .map(|(k, _)| id_of(k))
            .collect();
        let want_releases: BTreeSet<u32> = rec.decisions.actions.iter().map(|(k, _)| *k).collect();
        assert_eq!(got_releases, want_releases, "releases at {} ms", rec.now);
        let report = engine.report();
        let got_waiting: BTreeMap<u32, String> = report
            .waiting
            .iter()
            .map(|(k, why)| {
                (
                    k.rsplit('/')
                        .next()
                        .map_or(0, |n| n.trim_start_matches('m').parse().unwrap()),
                    why.clone(),
                )
            })
            .collect();
        let want_waiting: BTreeMap<u32, String> = rec
            .decisions
            .waiting
            .iter()
            .map(|(k, why)| (*k, why.label().to_string()))
            .collect();
        assert_eq!(got_waiting, want_waiting, "waiting at {} ms", rec.now);
        holds += want_holds.len();
        // A release from a domain whose breaker is open is a probe (or
        // paced by what the probes found).
        probes += want_releases
            .iter()
            .filter(|id| engine_state_open(&engine, &zone_name(s.zone_of(**id))))
            .count();
        releases += want_releases.len();
        closes += rec
            .decisions
            .changed
            .iter()
            .filter(|(_, _, after)| !after.is_open())
            .count();
        let sim_open: Vec<String> = rec
            .decisions
            .changed
            .iter()
            .map(|(d, _, _)| d.to_string())
            .collect();
        for d in sim_open {
            assert!(
                report.open_domains.contains(&d) == engine_state_open(&engine, &d),
                "breaker {d} at {} ms",
                rec.now
            );
        }
    }
    // The run exercised what matters: holds in both zones, releases while
    // a domain's breaker was open, and both breakers closing again.
    assert!(holds >= 20, "{holds} holds");
    assert!(
        probes > 0 && releases >= 20,
        "{probes} of {releases} releases while open"
    );
    assert!(closes >= 2, "{closes} breakers closed");
    for z in 0..2 {
        assert!(
            !engine_state_open(&engine, &zone_name(z)),
            "zone {z} open at the end"
        );
    }
}

fn engine_state_open(e: &Engine, domain: &str) -> bool {
    e.state
        .lock()
        .map(|st| st.core.breakers().is_open(domain))
        .unwrap_or(false)
}
