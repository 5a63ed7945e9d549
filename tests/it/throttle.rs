//! The outage breaker end to end on the real apiserver, through the real
//! `remedy serve`: a burst of transient failures holds the failing resources
//! (pause + remedy's owner annotation), healthy and human-paused ones are
//! untouched, and once the breaker closes they are released one by one,
//! lowest crash_count first.

use crate::support::objects::{api_for, create_with_status, sample, set_status};
use crate::support::{Remedy, TestCluster, eventually, namespace};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use remedy::model::profile::{CAPI_PAUSED, CRASH_ANNOTATION, HOLD_ANNOTATION, PAUSE_MARKER};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

fn annotations(o: &DynamicObject) -> BTreeMap<String, String> {
    o.metadata.annotations.clone().unwrap_or_default()
}

async fn machines(api: &Api<DynamicObject>) -> Vec<DynamicObject> {
    api.list(&Default::default()).await.expect("list").items
}

#[tokio::test]
async fn breaker_holds_failing_resources_then_releases_them_gradually() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "breaker").await;
    let base = sample("capo-openstackmachine-error.yaml");
    let healthy = json!({"ready": true, "instanceState": "ACTIVE"});
    let failing = crate::support::objects::nova_503();
    let mut api = None;
    for i in 0..10 {
        let mut o = base.clone();
        o.metadata.name = Some(format!("osm-{i}"));
        if i == 9 {
            // Paused by a human: never held, never released by remedy.
            o.metadata.annotations = Some([(CAPI_PAUSED.to_string(), "".to_string())].into());
        }
        o.data["status"] = if i < 4 {
            healthy.clone()
        } else {
            failing.clone()
        };
        let created = create_with_status(&client, o, &ns).await;
        api.get_or_insert_with(|| api_for(&client, &created, &ns));
    }
    let api = api.expect("api");
    // osm-4 has failed before (remedy's own counter): it must be released last.
    api.patch(
        "osm-4",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {CRASH_ANNOTATION: "3", "remedy.dev/failure-time": "2020-01-01T00:00:00Z"}}})),
    )
    .await
    .expect("annotate");

    let config = format!(
        "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 500ms\nleader_election: {{enabled: false}}\n\
         backoff: {{base: 1s, cap: 4s, quiet_window: 100000h}}\n\
         budget: {{refill_per_second: 1, burst: 1}}\n\
         breaker: {{open_ratio: 0.3, close_ratio: 0.1, min_resources: 3, window: 1s, cooldown: 3s}}\n"
    );
    let remedy = Remedy::serve(cluster, &config);
    remedy.wait_ready().await;

    // 5 failing of 10 (ratio 0.5 ≥ 0.3) → open → all 5 held; osm-9 (human
    // pause, also failing) and the healthy ones are not touched.
    let held = eventually(Duration::from_secs(30), "failing machines held", || async {
        let all = machines(&api).await;
        let held: Vec<String> = all
            .iter()
            .filter(|o| annotations(o).get(CAPI_PAUSED).map(String::as_str) == Some(PAUSE_MARKER))
            .filter_map(|o| o.metadata.name.clone())
            .collect();
        (held.len() == 5).then_some(held)
    })
    .await;
    assert_eq!(
        held,
        vec!["osm-4", "osm-5", "osm-6", "osm-7", "osm-8"],
        "{}",
        remedy.log_tail()
    );
    // /status is bounded: at most `limit` entries a list, with the totals.
    // (The report is rebuilt each tick: wait for it to show the holds.)
    let status = eventually(Duration::from_secs(10), "held in /status", || async {
        let (code, body) = remedy.get("/status?limit=2").await?;
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        (v["totals"]["held"] == 5).then_some(v)
    })
    .await;
    assert_eq!(status["held"].as_array().map(Vec::len), Some(2), "{status}");
    assert_eq!(status["truncated"], true);
    let (code, _) = remedy.get("/status?limit=0").await.expect("status");
    assert_eq!(code, 400);
    let all = machines(&api).await;
    let osm9 = all
        .iter()
        .find(|o| o.metadata.name.as_deref() == Some("osm-9"))
        .expect("osm-9");
    assert_eq!(
        annotations(osm9).get(CAPI_PAUSED).map(String::as_str),
        Some("")
    );
    assert!(!annotations(osm9).contains_key(HOLD_ANNOTATION));
    let osm4 = all
        .iter()
        .find(|o| o.metadata.name.as_deref() == Some("osm-4"))
        .expect("osm-4");
    assert_eq!(
        annotations(osm4).get(CRASH_ANNOTATION).map(String::as_str),
        Some("4"),
        "hold counts a crash"
    );
    let (_, text) = remedy.get("/metrics").await.expect("metrics");
    assert_eq!(
        crate::support::sample(
            &text,
            r#"remedy_outage_breaker_open{scope="cluster",domain="cluster"}"#
        ),
        Some(1.0),
        "{text}"
    );

    // The cloud recovers. The "controller" follows CAPO's rules: it skips
    // paused and failed machines, so it retries a machine only once remedy's
    // release has cleared its failure and unpaused it; the retry succeeds.
    let releases = tokio::spawn({
        let api = api.clone();
        async move {
            let mut order = Vec::new();

            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while order.len() < 5 && tokio::time::Instant::now() < deadline {
                for o in machines(&api).await {
                    let name = o.metadata.name.clone().unwrap_or_default();
                    let failed = o.data["status"].get("failureReason").is_some();
                    let paused = annotations(&o).contains_key(CAPI_PAUSED);
                    let ready = o.data["status"]["ready"] == true;
                    if !failed && !paused && !ready && !order.contains(&name) {
                        order.push(name.clone());
                        set_status(
                            &api,
                            &name,
                            json!({"ready": true, "instanceState": "ACTIVE"}),
                        )
                        .await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            order
        }
    });
    let order = releases.await.expect("release watcher");
    assert_eq!(
        order.len(),
        5,
        "all held machines released: {order:?}\n{}",
        remedy.log_tail()
    );
    assert_eq!(
        order.last().map(String::as_str),
        Some("osm-4"),
        "highest crash_count last: {order:?}"
    );
    let (_, text) = remedy.get("/metrics").await.expect("metrics");
    let v = |s: &str| crate::support::sample(&text, s).unwrap_or(-1.0);
    assert_eq!(
        v(r#"remedy_actions_total{action="hold",result="success"}"#),
        5.0,
        "{}",
        remedy.log_tail()
    );
    assert_eq!(
        v(r#"remedy_actions_total{action="release",result="success"}"#),
        5.0,
        "{text}"
    );
    assert_eq!(
        v(r#"remedy_held_resources{kind="OpenStackMachine"}"#),
        0.0,
        "{text}"
    );
    let osm9 = api.get("osm-9").await.expect("osm-9");
    assert_eq!(
        annotations(&osm9).get(CAPI_PAUSED).map(String::as_str),
        Some(""),
        "human pause kept"
    );
}
