//! `budget.per` (#27.3) on the real apiserver with the real binary: six
//! held machines, three of MachineDeployment md-a, two of md-b, one naming
//! none, `max_in_flight: 1`. One of each owner goes, and the ownerless
//! one; the rest wait for `owner` (metric and `/explain`) however much
//! budget is left, until the controller answers a released one: then the
//! next of that owner goes, and only that one.

use crate::support::objects::{count_held, held, held_healthy_machines};
use crate::support::{Remedy, TestCluster, eventually, namespace};
use kube::api::{Patch, PatchParams};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

const OWNER_LABEL: &str = "cluster.x-k8s.io/deployment-name";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_has_at_most_max_in_flight_releases_unanswered() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "per-owner").await;
    let api = held_healthy_machines(&client, &ns, 6).await;
    for (name, owner) in [
        ("osm-00", Some("md-a")),
        ("osm-01", Some("md-a")),
        ("osm-02", Some("md-a")),
        ("osm-03", Some("md-b")),
        ("osm-04", Some("md-b")),
        ("osm-05", None),
    ] {
        if let Some(owner) = owner {
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {OWNER_LABEL: owner}}})),
            )
            .await
            .expect("label");
        }
    }
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 200ms\nleader_election: {{enabled: false}}\n\
             budget: {{refill_per_second: 10, burst: 10, per: {{label: {OWNER_LABEL}, max_in_flight: 1}}}}\n\
             breaker: {{min_resources: 3, window: 1s, cooldown: 1s}}\n"
        ),
    );
    remedy.wait_ready().await;
    let still_held = || async {
        let list = api.list(&Default::default()).await.ok()?;
        Some(
            list.items
                .iter()
                .filter(|o| held(o))
                .filter_map(|o| o.metadata.name.clone())
                .collect::<BTreeSet<String>>(),
        )
    };
    let want = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();

    // One of each owner (lowest key first) and the ownerless one.
    eventually(Duration::from_secs(30), "the first releases", || async {
        (count_held(&api).await? == 3).then_some(())
    })
    .await;
    // Budget is plenty (10/s): what stays, stays for its owner.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        still_held().await.expect("list"),
        want(&["osm-01", "osm-02", "osm-04"]),
        "{}",
        remedy.log_tail()
    );
    let waiting = remedy
        .metric(r#"remedy_waiting_resources{kind="OpenStackMachine",reason="owner"}"#)
        .await;
    assert_eq!(waiting, 3.0);
    let (code, body) = remedy
        .get(&format!("/explain?resource={ns}/OpenStackMachine/osm-01"))
        .await
        .expect("explain");
    assert_eq!(code, 200, "{body}");
    let x: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(x["waiting"], "owner", "{x}");
    assert_eq!(x["owner"]["name"], format!("{ns}/md-a"), "{x}");
    assert_eq!(x["owner"]["in_flight"], 1, "{x}");
    assert_eq!(x["owner"]["max_in_flight"], 1, "{x}");

    // md-a's released machine is answered (its controller writes it): the
    // next of md-a goes; md-b's one in flight is not answered, so its
    // second stays.
    api.patch(
        "osm-00",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"reconciled": "yes"}}})),
    )
    .await
    .expect("answer");
    eventually(Duration::from_secs(20), "md-a's next release", || async {
        (still_held().await? == want(&["osm-02", "osm-04"])).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        still_held().await.expect("list"),
        want(&["osm-02", "osm-04"])
    );
}
