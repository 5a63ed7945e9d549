//! Opting out (#27.4): a profile's `label_selector` and the
//! `remedy.dev/ignore` annotation. An object either leaves out is not
//! counted, held or remediated, on the real apiserver with the real binary.
//! Eight failing OpenStackMachines during an outage: four plain, two labelled
//! out of the selector, two annotated ignore. The breaker holds the four
//! only; relabelling one brings it in, annotating a held one takes it out of
//! every count.

use crate::support::objects::{api_for, create_with_status, held, sample};
use crate::support::{Remedy, TestCluster, namespace};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use remedy::model::profile::IGNORE_ANNOTATION;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

const MANAGED: &str = "remedy.dev/managed";

async fn held_names(api: &Api<DynamicObject>) -> Vec<String> {
    let mut names: Vec<String> = api
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter(held)
        .filter_map(|o| o.metadata.name)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn objects_outside_the_selector_or_ignored_are_never_counted_or_held() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "opt-out").await;
    let mut api = None;
    for i in 0..8 {
        let mut o = sample("capo-openstackmachine-error.yaml");
        o.metadata.name = Some(format!("osm-{i}"));
        if (4..6).contains(&i) {
            o.metadata.labels = Some(BTreeMap::from([(MANAGED.into(), "false".into())]));
        }
        if i >= 6 {
            o.metadata.annotations =
                Some(BTreeMap::from([(IGNORE_ANNOTATION.into(), "true".into())]));
        }
        o.data["status"] = crate::support::objects::nova_503();
        let c = create_with_status(&client, o, &ns).await;
        api.get_or_insert_with(|| api_for(&client, &c, &ns));
    }
    let api = api.expect("api");
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "namespaces: [{ns}]\ntick: 200ms\nleader_election: {{enabled: false}}\n\
             profiles: [{{builtin: openstack-machine, label_selector: '{MANAGED}!=false'}}]\n\
             backoff: {{base: 1s, cap: 2s, quiet_window: 100000h}}\n\
             budget: {{refill_per_second: 10, burst: 10}}\n\
             breaker: {{open_ratio: 0.3, close_ratio: 0.1, min_resources: 3, window: 1s, cooldown: 60s}}\n"
        ),
    );
    remedy.wait_ready().await;
    let four: Vec<String> = (0..4).map(|i| format!("osm-{i}")).collect();
    remedy
        .until(Duration::from_secs(30), "osm-0..3 held", || async {
            held_names(&api).await == four
        })
        .await;
    let counted = r#"remedy_resources{kind="OpenStackMachine",state="held"}"#;
    remedy
        .until(Duration::from_secs(10), "4 counted held", || async {
            remedy.metric(counted).await == 4.0
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(held_names(&api).await, four, "{}", remedy.log_tail());
    let (_, metrics) = remedy.get("/metrics").await.expect("metrics");
    for i in 4..8 {
        assert!(
            !metrics.contains(&format!("name=\"osm-{i}\"")),
            "osm-{i} has series"
        );
    }

    // Into the selector: osm-4 is seen, and held like the others.
    api.patch(
        "osm-4",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {MANAGED: null}}})),
    )
    .await
    .expect("relabel");
    remedy
        .until(Duration::from_secs(20), "osm-4 held", || async {
            held_names(&api).await.contains(&"osm-4".to_string())
        })
        .await;

    // A held object annotated ignore leaves every count; its pause stays
    // (remedy writes nothing to an object it ignores).
    api.patch(
        "osm-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {IGNORE_ANNOTATION: "true"}}})),
    )
    .await
    .expect("annotate");
    // The metrics drop it at once, /status at the next tick.
    remedy
        .until(
            Duration::from_secs(10),
            "osm-0 out of the counts and /status",
            || async {
                let (_, m) = remedy.get("/metrics").await.unwrap_or_default();
                let (_, status) = remedy.get("/status").await.unwrap_or_default();
                !m.contains("name=\"osm-0\"")
                    && !status.contains("osm-0")
                    && remedy.metric(counted).await == 4.0
            },
        )
        .await;
    assert!(held(&api.get("osm-0").await.expect("osm-0")));
}
