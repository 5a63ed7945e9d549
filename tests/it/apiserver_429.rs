//! A 429 storm from the apiserver (issue #22.8): the real `remedy serve`,
//! leader election on and releasing held machines, talks to the apiserver
//! through a proxy that answers 3 of 4 requests with 429 + `Retry-After: 1`
//! for 15 s. Every client (Lease, episode record, executor writes, watches)
//! must back off together and come back without a burst; the figures are
//! printed (README, "Reliability").

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

    assert!(
        storm_rate <= 2.0 && storm_429 <= 1.0,
        "remedy kept {storm_rate:.2} requests/s, {storm_429:.2} x 429/s through the storm"
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
