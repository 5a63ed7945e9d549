//! Leader change mid-release on the real apiserver: two remedy instances
//! share a Lease; the leader is killed while releasing held resources one
//! per second; the follower takes over and finishes. Every resource is
//! released exactly once (one `Released` Event each), none is lost.

use crate::support::objects::{api_for, create_with_status, sample};
use crate::support::{Remedy, TestCluster, eventually, namespace};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use remedy::profile::{
    CAPI_PAUSED, CRASH_ANNOTATION, FAILURE_TIME_ANNOTATION, HOLD_ANNOTATION, PAUSE_MARKER,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_mid_release_loses_and_doubles_nothing() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "leader").await;
    let mut api = None;
    const N: usize = 8;
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
        let c = create_with_status(&client, o, &ns).await;
        api.get_or_insert_with(|| api_for(&client, &c, &ns));
    }
    let api = api.expect("api");
    let config = format!(
        "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 250ms\n\
         leader_election: {{enabled: true, lease_name: remedy-leader-test, namespace: {ns}, lease_duration: 3s}}\n\
         budget: {{refill_per_second: 1, burst: 1}}\nbreaker: {{min_resources: 1000}}\n"
    );
    let mut first = Remedy::serve(cluster, &config);
    first.wait_ready().await;
    eventually(Duration::from_secs(30), "first instance leads", || async {
        let (_, t) = first.get("/metrics").await?;
        (crate::support::sample(&t, "remedy_leader") == Some(1.0)).then_some(())
    })
    .await;
    let second = Remedy::serve(cluster, &config);
    second.wait_ready().await;
    let (_, t) = second.get("/metrics").await.expect("metrics");
    assert_eq!(
        crate::support::sample(&t, "remedy_leader"),
        Some(0.0),
        "the follower must not lead"
    );

    let paused = |api: Api<kube::api::DynamicObject>| async move {
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
    };
    // Kill the leader once it has released a few (hard kill: no lease release).
    eventually(
        Duration::from_secs(30),
        "some releases by the first leader",
        || async { (paused(api.clone()).await <= N - 3).then_some(()) },
    )
    .await;
    first.kill();
    let left = paused(api.clone()).await;
    assert!(left > 0, "the first leader must not have finished already");

    eventually(
        Duration::from_secs(60),
        "the new leader finishes the release",
        || async { (paused(api.clone()).await == 0).then_some(()) },
    )
    .await;
    let (_, t) = second.get("/metrics").await.expect("metrics");
    assert_eq!(crate::support::sample(&t, "remedy_leader"), Some(1.0));
    let by_second = crate::support::sample(
        &t,
        r#"remedy_actions_total{action="release",result="success"}"#,
    )
    .unwrap_or(0.0);
    assert!(
        by_second >= 1.0 && by_second <= left as f64,
        "second released {by_second}, {left} were left\n{t}"
    );

    // Exactly one Released Event per resource: nothing doubled, nothing lost.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let mut per: BTreeMap<String, u32> = BTreeMap::new();
    for e in events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
    {
        if e.reason.as_deref() == Some("Released") {
            let n = e.series.as_ref().map(|s| s.count).unwrap_or(1);
            *per.entry(e.regarding.and_then(|r| r.name).unwrap_or_default())
                .or_default() += u32::try_from(n).unwrap_or(u32::MAX);
        }
    }
    assert_eq!(per.len(), N, "{per:?}");
    assert!(per.values().all(|&n| n == 1), "{per:?}");
}
