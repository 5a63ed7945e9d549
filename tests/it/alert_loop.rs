//! The whole signal loop with real parts: a real kube-apiserver, the real
//! `remedy serve`, a real Prometheus evaluating an outage rule and a real
//! Alertmanager posting webhooks. The cloud is the one thing that cannot
//! exist here: a tiny exporter stands in for the provider's API error ratio
//! (what a real outage alert is written on: a signal independent of
//! remedy's own holds).

use crate::support::objects::{api_for, create_with_status, sample};
use crate::support::procs::{
    CLOUD_RULES, alerting_prometheus, cloud_exporter, remedy_webhook_route, start_alertmanager_at,
    start_prometheus_at,
};
use crate::support::{Remedy, TestCluster, eventually, free_port, namespace};
use kube::api::{Api, DynamicObject};
use remedy::model::profile::{CAPI_PAUSED, HOLD_ANNOTATION, HoldMark, PAUSE_MARKER};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

fn hold_of(o: &DynamicObject) -> Option<HoldMark> {
    let a = o.metadata.annotations.as_ref()?;
    (a.get(CAPI_PAUSED).map(String::as_str) == Some(PAUSE_MARKER))
        .then(|| a.get(HOLD_ANNOTATION).and_then(|r| HoldMark::parse(r)))
        .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firing_holds_resolved_is_verified_then_remediated() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "loop").await;
    let base = sample("capo-openstackmachine-error.yaml");
    let failing = crate::support::objects::nova_503();
    let mut api: Option<Api<DynamicObject>> = None;
    for i in 0..7 {
        let mut o = base.clone();
        o.metadata.name = Some(format!("osm-{i}"));
        o.data["status"] = if i < 2 {
            json!({"ready": true, "instanceState": "ACTIVE"})
        } else {
            failing.clone()
        };
        if i == 6 {
            o.metadata.annotations =
                Some([(CAPI_PAUSED.to_string(), "maintenance".to_string())].into());
        }
        let c = create_with_status(&client, o, &ns).await;
        api.get_or_insert_with(|| api_for(&client, &c, &ns));
    }
    let api = api.expect("api");

    let ratio = Arc::new(AtomicU64::new(0.6f64.to_bits()));
    let cloud = cloud_exporter(vec![("OpenStackMachine", ratio.clone())]).await;
    let (prom_port, am_port) = (free_port(), free_port());
    let tmp = tempfile::tempdir().expect("tmp");
    let token = tmp.path().join("token");
    std::fs::write(&token, "s3cret-token\n").expect("token");
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 500ms\nleader_election: {{enabled: false}}\n\
             backoff: {{base: 1s, cap: 2s}}\nbudget: {{refill_per_second: 2, burst: 1}}\n\
             breaker: {{open_ratio: 1.0, close_ratio: 1.0, min_resources: 100000}}\n\
             webhook: {{token_file: {}}}\n\
             signals: {{prometheus_url: 'http://127.0.0.1:{prom_port}', alertmanager_url: 'http://127.0.0.1:{am_port}', timeout: 2s, settle: 2s}}\n\
             alerts: [{{alertname: CloudAPIDegraded, select: {{kind_label: kind}}}}]\n",
            token.display()
        ),
    );
    remedy.wait_ready().await;
    let remedy_port = remedy.url.rsplit(':').next().expect("port").to_string();
    let _am = start_alertmanager_at(
        am_port,
        &remedy_webhook_route(&remedy_port, &token.display().to_string()),
    )
    .await;
    let cloud = cloud.to_string();
    let _prom = start_prometheus_at(
        prom_port,
        &alerting_prometheus(am_port, &[("cloud", &cloud), ("remedy", &remedy_port)]),
        &[("rules.yml", CLOUD_RULES)],
    )
    .await;

    // Firing → webhook → the four failing machines are held for the alert;
    // healthy ones and the human-paused one are not.
    let held = eventually(Duration::from_secs(60), "alert holds", || async {
        let items = api.list(&Default::default()).await.ok()?.items;
        let held: Vec<String> = items
            .iter()
            .filter(|o| hold_of(o).is_some_and(|h| h.reason == "alert:CloudAPIDegraded"))
            .filter_map(|o| o.metadata.name.clone())
            .collect();
        (held.len() == 4).then_some(held)
    })
    .await;
    assert_eq!(
        held,
        vec!["osm-2", "osm-3", "osm-4", "osm-5"],
        "{}",
        remedy.log_tail()
    );

    // While the outage lasts nothing is remediated.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = api.get("osm-2").await.expect("osm-2");
    assert!(still.data["status"].get("failureReason").is_some());
    assert!(hold_of(&still).is_some());

    // The cloud recovers: Prometheus resolves, Alertmanager posts resolved,
    // remedy waits the settle time, verifies against both APIs, then
    // clears failure status and removes its pauses.
    ratio.store(0.0f64.to_bits(), Ordering::SeqCst);
    eventually(
        Duration::from_secs(90),
        "remediation after verified resolve",
        || async {
            let items = api.list(&Default::default()).await.ok()?.items;
            let done = items
                .iter()
                .filter(|o| {
                    ["osm-2", "osm-3", "osm-4", "osm-5"]
                        .contains(&o.metadata.name.as_deref().unwrap_or(""))
                })
                .all(|o| {
                    hold_of(o).is_none()
                        && o.data["status"].get("failureReason").is_none()
                        && !o
                            .metadata
                            .annotations
                            .clone()
                            .unwrap_or_default()
                            .contains_key(CAPI_PAUSED)
                });
            done.then_some(())
        },
    )
    .await;
    let human = api.get("osm-6").await.expect("osm-6");
    assert_eq!(
        human
            .metadata
            .annotations
            .unwrap_or_default()
            .get(CAPI_PAUSED)
            .map(String::as_str),
        Some("maintenance"),
        "a human pause is never removed"
    );
    assert!(
        human.data["status"].get("failureReason").is_some(),
        "a human-paused resource is not touched"
    );

    let (_, text) = remedy.get("/metrics").await.expect("metrics");
    let v = |s: &str| crate::support::sample(&text, s).unwrap_or(0.0);
    for action in ["hold", "clear_failure", "unpause"] {
        let series = format!(r#"remedy_actions_total{{action="{action}",result="success"}}"#);
        assert_eq!(v(&series), 4.0, "{series}\n{text}");
    }
    for series in [
        r#"remedy_webhook_notifications_total{status="firing",result="accepted"}"#,
        r#"remedy_webhook_notifications_total{status="resolved",result="accepted"}"#,
        r#"remedy_signal_queries_total{target="prometheus",result="ok"}"#,
        r#"remedy_signal_queries_total{target="alertmanager",result="ok"}"#,
    ] {
        assert!(v(series) >= 1.0, "{series}\n{text}");
    }
}
