//! Failure domains on the real apiserver: breakers keyed by the machines'
//! zone label (`breaker.domain: {label: topology.kubernetes.io/zone}`),
//! with the CAPO stand-in controller (skip paused, skip failed, heal after
//! an update) and a cloud per zone.
//!
//! Both zones go down: both breakers open and every machine is held. Zone
//! b's cloud comes back, zone a's does not. Both breakers cool and release;
//! zone a's released machines fail again and reopen zone a's breaker, which
//! holds zone a again, while zone b goes on releasing until every machine
//! there is running: one domain held, the other released.

use crate::support::capo::{StandInCapo, ZONE_LABEL};
use crate::support::objects::{api_for, create_with_status, sample};
use crate::support::{Remedy, TestCluster, eventually, namespace};
use kube::api::{Api, DynamicObject};
use remedy::model::profile::CAPI_PAUSED;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const PER_ZONE: usize = 6;

fn paused(o: &DynamicObject) -> bool {
    o.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(CAPI_PAUSED))
}

/// (held, running) per zone.
async fn zones(api: &Api<DynamicObject>) -> BTreeMap<String, (usize, usize)> {
    let mut out: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for o in api.list(&Default::default()).await.expect("list").items {
        let zone = o
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(ZONE_LABEL))
            .cloned()
            .unwrap_or_default();
        let e = out.entry(zone).or_default();
        if paused(&o) {
            e.0 += 1;
        } else if o.data["status"]["ready"] == json!(true) {
            e.1 += 1;
        }
    }
    out
}

/// PER_ZONE failed OpenStackMachines in each of zone-a and zone-b, with the
/// CAPO stand-in and a cloud per zone, both down; zone-a's stays down.
struct Zoned {
    api: Api<DynamicObject>,
    up_b: Arc<AtomicBool>,
    capo: StandInCapo,
}

async fn zoned(client: &kube::Client, ns: &str) -> Zoned {
    let mut api = None;
    for zone in ["zone-a", "zone-b"] {
        for i in 0..PER_ZONE {
            let mut o = sample("capo-openstackmachine-error.yaml");
            o.metadata.name = Some(format!("{zone}-{i}"));
            o.metadata.labels = Some(BTreeMap::from([(ZONE_LABEL.to_string(), zone.to_string())]));
            o.data["status"] = json!({"ready": false});
            let o = create_with_status(client, o, ns).await;
            api.get_or_insert_with(|| api_for(client, &o, ns));
        }
    }
    let api = api.expect("api");
    let (up_a, up_b) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let capo = StandInCapo::start_zoned(
        api.clone(),
        Duration::from_millis(300),
        HashMap::from([
            ("zone-a".to_string(), up_a.clone()),
            ("zone-b".to_string(), up_b.clone()),
        ]),
    );
    Zoned { api, up_b, capo }
}

async fn breaker(remedy: &Remedy, zone: &str) -> Option<f64> {
    let (_, text) = remedy.get("/metrics").await?;
    crate::support::sample(
        &text,
        &format!(r#"remedy_outage_breaker_open{{scope="label",domain="{zone}"}}"#),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_in_one_zone_holds_that_zone_and_the_other_is_released() {
    let began = Instant::now();
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "domains").await;
    let Zoned { api, up_b, capo } = zoned(&client, &ns).await;
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 250ms\nleader_election: {{enabled: false}}\n\
             controller_grace: 0s\n\
             backoff: {{base: 1s, cap: 2s, jitter: 0, quiet_window: 1h}}\n\
             budget: {{refill_per_second: 1, burst: 1}}\n\
             breaker: {{open_ratio: 0.4, close_ratio: 0.2, min_resources: 2, window: 1s, cooldown: 3s, domain: {{label: {ZONE_LABEL}}}}}\n"
        ),
    );
    remedy.wait_ready().await;

    // Both zones down: both breakers open, every machine held.
    eventually(Duration::from_secs(60), "both zones held", || async {
        let z = zones(&api).await;
        (z.get("zone-a")?.0 == PER_ZONE && z.get("zone-b")?.0 == PER_ZONE).then_some(())
    })
    .await;

    // Zone b's cloud is back, zone a's is not.
    up_b.store(true, Ordering::SeqCst);
    let back = Instant::now();
    // Zone a's breaker cools and closes (its machines are held, they call
    // nothing), then relapses: its released machines fail again…
    eventually(
        Duration::from_secs(30),
        "zone-a's breaker closes",
        || async { (breaker(&remedy, "zone-a").await? == 0.0).then_some(()) },
    )
    .await;
    let relapse_b_running = eventually(
        Duration::from_secs(60),
        "zone-a's breaker reopens",
        || async {
            (breaker(&remedy, "zone-a").await? == 1.0).then_some(())?;
            Some(zones(&api).await.get("zone-b")?.1)
        },
    )
    .await;
    // …while zone b goes on releasing until all of it runs. A single
    // breaker, open, would release nothing anywhere: count zone b's machines
    // that came back while zone a's breaker was open.
    let mut last_b = relapse_b_running;
    let mut while_a_open = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let a_open = breaker(&remedy, "zone-a").await == Some(1.0);
        let z = zones(&api).await;
        let b = z.get("zone-b").copied().unwrap_or_default();
        if a_open && b.1 > last_b {
            while_a_open += b.1 - last_b;
        }
        last_b = b.1;
        if b == (0, PER_ZONE) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "zone-b not released: {z:?}\n{}",
            remedy.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        while_a_open >= 1,
        "no zone-b machine came back while zone-a's breaker was open"
    );
    let b_done = back.elapsed();
    assert!(
        relapse_b_running < PER_ZONE,
        "zone b was done before zone a relapsed ({relapse_b_running}): nothing shown"
    );
    // Without probes zone a goes on relapsing (calm while held, closed,
    // its releases fail and reopen it): it is held again, its breaker open,
    // and none of it runs; zone b's breaker is closed (under load its last
    // releases' answers may still be coming in when the loop above ends:
    // failed once on CI with it still open at that instant).
    eventually(
        Duration::from_secs(15),
        "zone-b's breaker closed",
        || async { (breaker(&remedy, "zone-b").await? == 0.0).then_some(()) },
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "zone-a held again with only its breaker open",
        || async {
            let z = zones(&api).await;
            let (held, running) = z.get("zone-a").copied()?;
            let (_, status) = remedy.get("/status").await?;
            let status: serde_json::Value = serde_json::from_str(&status).ok()?;
            (held == PER_ZONE && running == 0 && status["open_domains"] == json!(["zone-a"]))
                .then_some(())
        },
    )
    .await;
    eprintln!(
        "domains: zone-b all running {b_done:?} after its cloud came back, {relapse_b_running} of \
         {PER_ZONE} when zone-a's breaker reopened, {while_a_open} came back while it was \
         open; {} cloud calls; test {:?}",
        capo.calls.load(Ordering::SeqCst),
        began.elapsed()
    );
}

/// Sum of remedy's crash counts on a zone's machines: one per hold.
async fn holds_in(api: &Api<DynamicObject>, zone: &str) -> u64 {
    api.list(&Default::default())
        .await
        .expect("list")
        .items
        .iter()
        .filter(|o| {
            o.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(ZONE_LABEL))
                .map(String::as_str)
                == Some(zone)
        })
        .filter_map(|o| {
            o.metadata
                .annotations
                .as_ref()?
                .get(remedy::model::profile::CRASH_ANNOTATION)?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// With probing on (`breaker.release.probe_every`), an open domain sends
/// one held machine back to its controller every second: zone b's probes
/// succeed and zone b is released at a growing pace while its breaker is
/// still open; zone a's probes fail again, are held again, and keep zone
/// a's breaker open the whole time instead of closing and releasing a wave
/// into a dead cloud (what the test above shows without probes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_release_a_zone_that_is_back_and_keep_a_dead_zone_open() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "probes").await;
    let Zoned { api, up_b, capo } = zoned(&client, &ns).await;
    // controller_grace: a release's answer is the controller's next write,
    // not remedy's own.
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 250ms\nleader_election: {{enabled: false}}\n\
             controller_grace: 10s\n\
             backoff: {{base: 1s, cap: 2s, jitter: 0, quiet_window: 1h}}\n\
             budget: {{refill_per_second: 5, burst: 5}}\n\
             breaker: {{open_ratio: 0.4, close_ratio: 0.2, min_resources: 2, window: 1s, cooldown: 3s, \
             domain: {{label: {ZONE_LABEL}}}, release: {{probe_every: 1s, window: 1s, step: 1, min_success: 0.2}}}}\n"
        ),
    );
    remedy.wait_ready().await;
    eventually(Duration::from_secs(60), "both zones held", || async {
        let z = zones(&api).await;
        (z.get("zone-a")?.0 == PER_ZONE && z.get("zone-b")?.0 == PER_ZONE).then_some(())
    })
    .await;
    let holds_a_before = holds_in(&api, "zone-a").await;

    up_b.store(true, Ordering::SeqCst);
    let back = Instant::now();
    let deadline = back + Duration::from_secs(60);
    let mut b_open_while_released = 0;
    let mut last_b = 0;
    loop {
        let a = breaker(&remedy, "zone-a").await;
        assert_eq!(
            a,
            Some(1.0),
            "zone-a's breaker closed\n{}",
            remedy.log_tail()
        );
        let b_open = breaker(&remedy, "zone-b").await == Some(1.0);
        let b = zones(&api).await.get("zone-b").copied().unwrap_or_default();
        if b_open && b.1 > last_b {
            b_open_while_released += b.1 - last_b;
        }
        last_b = b.1;
        if b == (0, PER_ZONE) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "zone-b not released: {b:?}\n{}",
            remedy.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let b_done = back.elapsed();
    // Zone a: probed and held again, never released as a wave.
    eventually(
        Duration::from_secs(30),
        "zone-a probed and held again",
        || async {
            let probes = holds_in(&api, "zone-a")
                .await
                .saturating_sub(holds_a_before);
            let held = zones(&api).await.get("zone-a")?.0;
            (probes >= 2 && held == PER_ZONE).then_some(())
        },
    )
    .await;
    let probes_a = holds_in(&api, "zone-a").await - holds_a_before;
    assert_eq!(breaker(&remedy, "zone-a").await, Some(1.0));
    assert!(
        b_open_while_released >= 1,
        "zone b's first releases were probes while it was open"
    );
    let running_a = zones(&api).await.get("zone-a").map_or(0, |z| z.1);
    assert_eq!(running_a, 0, "zone a's cloud is down");
    eprintln!(
        "probes: zone-b all running {b_done:?} after its cloud came back ({b_open_while_released} \
         while its breaker was still open); zone-a probed {probes_a} time(s), breaker open \
         throughout; {} cloud calls",
        capo.calls.load(Ordering::SeqCst)
    );
}
