//! A 429 storm from the apiserver (issue #22.8): the real `remedy serve`,
//! leader election on and releasing held machines, talks to the apiserver
//! through a proxy that answers 3 of 4 requests with 429 + `Retry-After: 1`
//! for 15 s. Every client (Lease, episode record, executor writes, watches)
//! must back off together and come back without a burst; the figures are
//! printed (docs/evidence/measurements.md).

use crate::support::objects::{count_held, held_healthy_machines};
use crate::support::storm::{Hit, StormProxy, per_second};
use crate::support::{Remedy, TestCluster, eventually, namespace};
use std::time::Duration;

const MACHINES: usize = 40;
const STORM: Duration = Duration::from_secs(15);
const AFTER: Duration = Duration::from_secs(15);

/// What the requests were for, to see which client sent them.
fn breakdown(hits: &[Hit]) -> String {
    let mut by: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    for h in hits {
        let what = if h.path.contains("/leases") {
            "lease"
        } else if h.path.contains("/configmaps") {
            "record"
        } else if h.path.contains("watch=") {
            "watch"
        } else if h.path.contains("/events") {
            "event"
        } else if h.method == "GET" {
            "read"
        } else {
            "write"
        };
        let e = by.entry(format!("{what} {}", h.method)).or_default();
        e.0 += 1;
        e.1 += usize::from(h.status == 429);
    }
    by.iter()
        .map(|(k, (n, t))| format!("{k}: {n} ({t} x 429)"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_storm_is_backed_off_and_recovery_has_no_burst() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "storm").await;
    let api = held_healthy_machines(&client, &ns, MACHINES).await;

    let dir = tempfile::tempdir().expect("tempdir");
    let proxy = StormProxy::start(&cluster.kubeconfig, dir.path()).await;
    let remedy = Remedy::serve_with_kubeconfig(
        &proxy.kubeconfig,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 250ms\n\
             leader_election: {{enabled: true, lease_name: remedy-storm, namespace: {ns}, lease_duration: 6s}}\n\
             backoff: {{base: 1s, cap: 2s}}\n\
             budget: {{refill_per_second: 1, burst: 1}}\n\
             breaker: {{min_resources: 3, window: 1s, cooldown: 1s}}\n"
        ),
    );
    remedy.wait_ready().await;
    eventually(Duration::from_secs(60), "the first releases", || async {
        count_held(&api).await.filter(|n| *n <= MACHINES - 2)
    })
    .await;

    let before = proxy.now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let storm_start = proxy.now();
    proxy.storm(true);
    tokio::time::sleep(STORM).await;
    proxy.storm(false);
    let storm_end = proxy.now();
    tokio::time::sleep(AFTER).await;
    let end = proxy.now();

    let hits = proxy.hits();
    let in_range = |from: Duration, to: Duration| -> Vec<Hit> {
        hits.iter()
            .filter(|h| h.at >= from && h.at < to)
            .cloned()
            .collect()
    };
    let quiet = per_second(&hits, before, storm_start);
    let storm = per_second(&hits, storm_start, storm_end);
    let after = per_second(&hits, storm_end, end);
    let storm_hits = in_range(storm_start, storm_end);
    let storm_secs = (storm_end - storm_start).as_secs_f64();
    let storm_rate = storm_hits.len() as f64 / storm_secs;
    let storm_429 = storm_hits.iter().filter(|h| h.status == 429).count() as f64 / storm_secs;
    let after_max = after.iter().map(|s| s.0).max().unwrap_or(0);
    eprintln!(
        "before the storm, requests per second: {:?}",
        quiet.iter().map(|s| s.0).collect::<Vec<_>>()
    );
    eprintln!("storm, (requests, 429s) per second: {storm:?}");
    eprintln!(
        "storm: {} requests, {storm_rate:.2}/s, {storm_429:.2} x 429/s; {}",
        storm_hits.len(),
        breakdown(&storm_hits)
    );
    eprintln!(
        "after, requests per second: {:?} (max {after_max}); {}",
        after.iter().map(|s| s.0).collect::<Vec<_>>(),
        breakdown(&in_range(storm_end, end))
    );
    let (_, metrics) = remedy.get("/metrics").await.expect("metrics");
    eprintln!(
        "remedy_apiserver_throttled_total {:?}",
        crate::support::sample(&metrics, "remedy_apiserver_throttled_total")
    );

    // Leader election's Lease requests have a lane of their own (#38.16):
    // bounded apart, the rest must back off together.
    let (lease, other): (Vec<&Hit>, Vec<&Hit>) =
        storm_hits.iter().partition(|h| h.path.contains("/leases"));
    let other_rate = other.len() as f64 / storm_secs;
    let other_429 = other.iter().filter(|h| h.status == 429).count() as f64 / storm_secs;
    let lease_rate = lease.len() as f64 / storm_secs;
    assert!(
        other_rate <= 2.0 && other_429 <= 1.0,
        "remedy kept {other_rate:.2} requests/s, {other_429:.2} x 429/s through the storm, the Lease aside"
    );
    // Reads every lease/10 (0.6 s) and renewals, three sends at most each.
    assert!(
        lease_rate <= 4.0,
        "{lease_rate:.2} Lease requests/s through the storm"
    );
    assert!(
        after_max <= 20,
        "a burst of {after_max} requests in one second after the storm: {after:?}"
    );
    // It still does its work: every machine is released.
    eventually(
        Duration::from_secs(120),
        "every machine released",
        || async { count_held(&api).await.filter(|n| *n == 0) },
    )
    .await;
}

/// #38.16: the real apiserver's own limit, `--max-requests-inflight=1`
/// (priority and fairness off, as the filter it replaces), saturated for
/// 40 s by a reader that is not system:masters (masters are exempt), as is
/// remedy: it runs as its shipped ServiceAccount. Twenty machines fail
/// during the storm. Once it ends, leadership must come back within the
/// lease and the holds be written within 20 s. Before, the Lease's
/// requests waited behind the shared 429 gate (up to 30 s) and the lease
/// manager's own error backoff (1 to 30 s): 30 s after a storm no replica
/// led and nothing was held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leadership_and_holds_come_back_within_20s_of_an_inflight_storm() {
    use crate::support::objects::{api_for, create_with_status, sample};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let cluster = TestCluster::start_with(&[
        "--max-requests-inflight=1",
        "--max-mutating-requests-inflight=1",
        "--enable-priority-and-fairness=false",
    ]);
    let admin = cluster.client().await;
    crate::rbac::apply_rbac_to(&admin).await;
    let ns = namespace(&admin, "inflight").await;
    let mut made = None;
    for i in 0..10 {
        let mut o = sample("capo-openstackmachine-error.yaml");
        o.metadata.name = Some(format!("ok-{i}"));
        o.data["status"] = serde_json::json!({"ready": true, "instanceState": "ACTIVE"});
        made = Some(create_with_status(&admin, o, &ns).await);
    }
    let made = made.expect("a machine");
    let api = api_for(&admin, &made, &ns);
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig =
        crate::support::impersonating(&cluster.kubeconfig, crate::rbac::SA, dir.path());
    let remedy = Remedy::serve_with_kubeconfig(
        &kubeconfig,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 250ms\n\
             leader_election: {{enabled: true, lease_name: remedy, namespace: remedy-system, lease_duration: 6s, episode_record: remedy-episodes}}\n\
             pause_switch: {{namespace: remedy-system, configmap: remedy-pause}}\n\
             backoff: {{base: 1m, cap: 2m}}\n\
             breaker: {{min_resources: 5, open_ratio: 0.3, close_ratio: 0.1, window: 1s, cooldown: 5m}}\n"
        ),
    );
    remedy.wait_ready().await;
    eventually(Duration::from_secs(30), "remedy leads", || async {
        (remedy.metric("remedy_leader").await == 1.0).then_some(())
    })
    .await;

    // The storm: eight readers, as remedy's ServiceAccount, listing in turn.
    let reader_api = api_for(&cluster.client_as(crate::rbac::SA).await, &made, &ns);
    let storming = Arc::new(AtomicBool::new(true));
    let lists = Arc::new(AtomicUsize::new(0));
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (api, on, lists) = (reader_api.clone(), storming.clone(), lists.clone());
        readers.spawn(async move {
            while on.load(Ordering::SeqCst) {
                // kube's client retries its own 429s: only successes count.
                if api.list(&Default::default()).await.is_ok() {
                    lists.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let failing: Vec<String> = (0..20).map(|i| format!("fail-{i}")).collect();
    for n in &failing {
        let mut o = sample("capo-openstackmachine-error.yaml");
        o.metadata.name = Some(n.clone());
        o.data["status"] = crate::support::objects::nova_503();
        create_with_status(&admin, o, &ns).await;
    }
    tokio::time::sleep(Duration::from_secs(35)).await;
    let leader_in_storm = remedy.metric("remedy_leader").await;
    let held_in_storm = count_held(&api).await.unwrap_or(0);
    storming.store(false, Ordering::SeqCst);
    while readers.join_next().await.is_some() {}
    let ended = std::time::Instant::now();
    eprintln!(
        "inflight storm: {} lists done; at its end remedy_leader {leader_in_storm}, {held_in_storm} held",
        lists.load(Ordering::SeqCst)
    );
    // The readers' client retries its 429s itself; remedy counts its own.
    let throttled = remedy.metric("remedy_apiserver_throttled_total").await;
    eprintln!("inflight storm: remedy_apiserver_throttled_total {throttled}");
    assert!(
        throttled >= 10.0,
        "the storm did not reach remedy: {throttled} x 429"
    );
    eventually(Duration::from_secs(20), "remedy leads again", || async {
        (remedy.metric("remedy_leader").await == 1.0).then_some(())
    })
    .await;
    let led = ended.elapsed();
    remedy
        .until(
            Duration::from_secs(20),
            "the failing machines held",
            || async { count_held(&api).await.is_some_and(|n| n >= failing.len()) },
        )
        .await;
    let held = ended.elapsed();
    eprintln!("inflight storm: leading again {led:?} and all 20 held {held:?} after it ended");
    assert!(
        held <= Duration::from_secs(20),
        "{held:?}\n{}",
        remedy.log_tail()
    );
}
