//! Leader change mid-release on the real apiserver: two remedy instances
//! share a Lease while the leader releases held resources one per second.
//! The leader is either killed, or cut off from the apiserver while its
//! process lives on (a partition); the other instance takes over and
//! finishes. Every resource is released exactly once (one `Released` Event
//! each), none is lost.

use crate::support::objects::{api_for, create_with_status, released_events, sample};
use crate::support::{Remedy, TestCluster, eventually, namespace, proxy};
use kube::Client;
use kube::api::{Api, DynamicObject};
use remedy::model::profile::{
    CAPI_PAUSED, CRASH_ANNOTATION, FAILURE_TIME_ANNOTATION, HOLD_ANNOTATION, PAUSE_MARKER,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const N: usize = 8;
/// Short, so the takeover fits in a test; the same in the config below.
const LEASE: Duration = Duration::from_secs(3);

/// N resources remedy holds for a breaker (with a hold record), ready to be
/// released one per second.
async fn held_fleet(client: &Client, ns: &str) -> Api<DynamicObject> {
    let mut api = None;
    for i in 0..N {
        let mut o = sample("capo-openstackmachine-error.yaml");
        o.metadata.name = Some(format!("osm-{i}"));
        let record =
            json!({"since": "2020-01-01T00:00:00Z", "reason": "breaker", "crash_count": 1})
                .to_string();
        o.metadata.annotations = Some(BTreeMap::from([
            (CAPI_PAUSED.to_string(), PAUSE_MARKER.to_string()),
            (HOLD_ANNOTATION.to_string(), record),
            (CRASH_ANNOTATION.to_string(), (i % 3).to_string()),
            (
                FAILURE_TIME_ANNOTATION.to_string(),
                "2020-01-01T00:00:00Z".to_string(),
            ),
        ]));
        o.data["status"] = json!({"ready": true, "instanceState": "ACTIVE"});
        let c = create_with_status(client, o, ns).await;
        api.get_or_insert_with(|| api_for(client, &c, ns));
    }
    api.expect("api")
}

fn config(ns: &str) -> String {
    format!(
        "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 250ms\n\
         leader_election: {{enabled: true, lease_name: remedy-leader-test, namespace: {ns}, lease_duration: {}s}}\n\
         budget: {{refill_per_second: 1, burst: 1}}\n\
         breaker: {{min_resources: 1000, cooldown: 1s}}\n",
        // Every new leader serves the breaker's cooldown before releasing
        // its predecessor's breaker holds (#12): short here.
        LEASE.as_secs()
    )
}

/// Resources still paused (N if the list fails, so nothing looks done).
async fn paused(api: &Api<DynamicObject>) -> usize {
    api.list(&Default::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|o| {
                    o.metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(CAPI_PAUSED))
                })
                .count()
        })
        .unwrap_or(N)
}

/// Exactly one Released Event per resource: nothing doubled, nothing lost.
fn assert_released_once_each(per: &BTreeMap<String, u32>) {
    assert_eq!(per.len(), N, "{per:?}");
    assert!(per.values().all(|&n| n == 1), "{per:?}");
}

async fn metric(r: &Remedy, series: &str) -> Option<f64> {
    let (_, t) = r.get("/metrics").await?;
    crate::support::sample(&t, series)
}

const RELEASED: &str = r#"remedy_actions_total{action="release",result="success"}"#;

/// Every successful write the instance counted, whatever the action.
async fn successes(r: &Remedy) -> Option<f64> {
    let (_, t) = r.get("/metrics").await?;
    Some(
        t.lines()
            .filter(|l| l.starts_with("remedy_actions_total{") && l.contains(r#"result="success""#))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum(),
    )
}

async fn leads(r: &Remedy) -> Option<bool> {
    metric(r, "remedy_leader").await.map(|v| v == 1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_mid_release_loses_and_doubles_nothing() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "leader").await;
    let api = held_fleet(&client, &ns).await;
    let config = config(&ns);
    let mut first = Remedy::serve(cluster, &config);
    first.wait_ready().await;
    eventually(Duration::from_secs(30), "first instance leads", || async {
        leads(&first).await.filter(|l| *l)
    })
    .await;
    let second = Remedy::serve(cluster, &config);
    second.wait_ready().await;
    assert_eq!(
        leads(&second).await,
        Some(false),
        "the follower must not lead"
    );

    // Kill the leader once it has released a few (hard kill: no lease release).
    eventually(
        Duration::from_secs(30),
        "some releases by the first leader",
        || async { (paused(&api).await <= N - 3).then_some(()) },
    )
    .await;
    first.kill();
    let left = paused(&api).await;
    assert!(left > 0, "the first leader must not have finished already");

    eventually(
        Duration::from_secs(60),
        "the new leader finishes the release",
        || async { (paused(&api).await == 0).then_some(()) },
    )
    .await;
    let (_, t) = second.get("/metrics").await.expect("metrics");
    assert_eq!(crate::support::sample(&t, "remedy_leader"), Some(1.0));
    let by_second = crate::support::sample(&t, RELEASED).unwrap_or(0.0);
    assert!(
        by_second >= 1.0 && by_second <= left as f64,
        "second released {by_second}, {left} were left\n{t}"
    );
    assert_released_once_each(&released_events(&client, &ns).await);
}

/// The leader's process stays alive but loses the apiserver (a partition:
/// its connections drop, new ones hang). kube-lease-manager keeps saying
/// "leader" then; remedy's own deadline must make it a follower within the
/// lease duration, before the other instance may take the Lease, and keep it
/// one after the partition heals. Nothing is released twice or lost, and the
/// cut-off leader counts no write after the cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_apiserver_steps_down_in_time_and_writes_nothing_after() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "lease-loss").await;
    let api = held_fleet(&client, &ns).await;
    let config = config(&ns);
    let dir = tempfile::tempdir().expect("tempdir");
    let (proxy, kubeconfig) = proxy::in_front_of(&cluster.kubeconfig, dir.path()).await;
    let a = Remedy::serve_with_kubeconfig(&kubeconfig, &config);
    a.wait_ready().await;
    eventually(Duration::from_secs(30), "A (proxied) leads", || async {
        leads(&a).await.filter(|l| *l)
    })
    .await;
    let b = Remedy::serve(cluster, &config);
    b.wait_ready().await;
    assert_eq!(leads(&b).await, Some(false), "B must not lead yet");

    // Cut between two releases (one a second): once A has released three
    // and each has its Event, so no report of A's is lost in the cut.
    eventually(
        Duration::from_secs(30),
        "three releases by A, reported",
        || async {
            let left = paused(&api).await;
            let reported: u32 = released_events(&client, &ns).await.values().sum();
            (left <= N - 3 && reported as usize == N - left).then_some(())
        },
    )
    .await;
    proxy.cut();
    let cut_at = Instant::now();
    // A's /metrics is served locally, not through the proxy.
    eventually(
        LEASE + Duration::from_secs(5),
        "A stops leading",
        || async { leads(&a).await.filter(|l| !*l) },
    )
    .await;
    let stepped_down = cut_at.elapsed();
    eprintln!("A stepped down {stepped_down:?} after the cut (lease {LEASE:?})");
    assert!(
        stepped_down <= LEASE + Duration::from_secs(1),
        "A led for {stepped_down:?} after the cut; B may take the Lease after {LEASE:?}"
    );
    assert!(
        a.log_tail().contains("lease not confirmed for"),
        "A says why it follows:\n{}",
        a.log_tail()
    );
    // Whatever A counted up to now was written before the cut (nothing A
    // sends after it reaches the apiserver): this is the mark not to pass.
    let a_writes = successes(&a).await.expect("A metrics");
    let a_released = metric(&a, RELEASED).await.unwrap_or(0.0);
    let left = paused(&api).await;
    assert!(left > 0, "A must not have finished before the cut");

    eventually(
        Duration::from_secs(60),
        "B finishes the release",
        || async { (paused(&api).await == 0).then_some(()) },
    )
    .await;
    assert_eq!(leads(&b).await, Some(true));
    let b_released = metric(&b, RELEASED).await.unwrap_or(0.0);
    assert_eq!(
        a_released + b_released,
        N as f64,
        "A released {a_released}, B {b_released}, of {N}"
    );

    // Heal: A reaches the apiserver again, sees B hold the Lease, and stays a
    // follower that writes nothing.
    proxy.heal();
    let until = Instant::now() + 3 * LEASE;
    while Instant::now() < until {
        assert_eq!(leads(&a).await, Some(false), "A leads again after the heal");
        assert_eq!(successes(&a).await, Some(a_writes), "A wrote after the cut");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(leads(&b).await, Some(true), "B still leads");
    // The heal was real: A's lease manager heard from the apiserver again
    // (its first "not the lease holder" line is from before it led).
    let log = a.log_tail();
    assert!(
        log.matches("not the lease holder; acting as follower")
            .count()
            >= 2,
        "A never learnt that B holds the Lease:\n{log}"
    );
    assert_released_once_each(&released_events(&client, &ns).await);
}

/// SIGTERM to the leader hands the Lease over (issue #12, point 9): with a
/// 15 s lease the other instance leads within a few seconds (it reads the
/// Lease every 1.5 s and competes as soon as it is vacant), not after the
/// lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_leader_releases_the_lease_and_the_other_leads_at_once() {
    const LONG: u64 = 15;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "release").await;
    let config = format!(
        "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 250ms\n\
         leader_election: {{enabled: true, lease_name: remedy-release-test, namespace: {ns}, lease_duration: {LONG}s}}\n"
    );
    let mut a = Remedy::serve(cluster, &config);
    eventually(Duration::from_secs(30), "a leads", || async {
        leads(&a).await.filter(|l| *l)
    })
    .await;
    let b = Remedy::serve(cluster, &config);
    b.wait_ready().await;
    // b has settled as a follower (its lease manager sleeps until a's expiry).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(leads(&b).await, Some(false));

    let t = Instant::now();
    a.terminate();
    eventually(Duration::from_secs(LONG + 10), "b leads", || async {
        leads(&b).await.filter(|l| *l)
    })
    .await;
    let took = t.elapsed();
    eventually(Duration::from_secs(10), "a exits", || {
        let done = a.exited();
        async move { done.then_some(()) }
    })
    .await;
    let log = a.log_tail();
    eprintln!("lease handover after SIGTERM: b leads {took:.2?} after the signal");
    assert!(
        took < Duration::from_secs(5),
        "b took {took:.1?} (lease {LONG}s): the lease was not released\n{log}\n{}",
        b.log_tail()
    );
    assert!(log.contains("lease released"), "{log}");
}
