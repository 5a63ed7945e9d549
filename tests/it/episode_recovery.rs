//! A restart between Alertmanager's resolved notification and remedy's
//! verification loses no action: the new process rebuilds its alert
//! episodes from Prometheus' ALERTS, verifies, and remediates what the old
//! one never held (a BottlerocketShadow's crash counters). An alert still
//! firing at restart is firing for the new process at once.
//!
//! Real kube-apiserver, real `remedy serve` (killed and started again), real
//! Prometheus evaluating a rule on a metric the test controls, real
//! Alertmanager, which only ever knows the first process's webhook URL: no
//! notification reaches the second one.

use crate::support::objects::{api_for, create_with_status, sample};
use crate::support::procs::{
    CLOUD_RULES, alerting_prometheus, cloud_exporter, remedy_webhook_route, start_alertmanager_at,
    start_prometheus_at,
};
use crate::support::{Remedy, TestCluster, eventually, free_port, namespace};
use kube::api::{Api, DynamicObject};
use remedy::model::profile::{HOLD_ANNOTATION, HoldMark};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const BRS: &str = "BottlerocketShadow";
const OSM: &str = "OpenStackMachine";

fn config(ns: &str, token: &str, prom: u16, am: u16, settle: &str) -> String {
    format!(
        "namespaces: [{ns}]\nprofiles: [bottlerocket-shadow, openstack-machine]\ntick: 500ms\n\
         leader_election: {{enabled: false}}\n\
         backoff: {{base: 1s, cap: 2s, jitter: 0, quiet_window: 1h}}\n\
         budget: {{refill_per_second: 2, burst: 1}}\n\
         breaker: {{open_ratio: 1.0, close_ratio: 1.0, min_resources: 100000}}\n\
         webhook: {{token_file: {token}}}\n\
         signals: {{prometheus_url: 'http://127.0.0.1:{prom}', alertmanager_url: 'http://127.0.0.1:{am}', timeout: 2s, settle: {settle}}}\n\
         alerts: [{{alertname: CloudAPIDegraded, select: {{kind_label: kind}}}}]\n"
    )
}

/// `kind` → firing of the episodes a process reports.
async fn episodes(remedy: &Remedy) -> Option<Vec<(String, bool)>> {
    let (code, body) = remedy.get("/status").await?;
    if code != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    let mut out: Vec<(String, bool)> = v["episodes"]
        .as_array()?
        .iter()
        .map(|e| {
            (
                e["matchers"]["kind"].as_str().unwrap_or("").to_string(),
                e["firing"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    out.sort();
    Some(out)
}

fn crash_count(o: &DynamicObject) -> Option<i64> {
    o.data["status"]["crash_count"].as_i64()
}

fn hold_reason(o: &DynamicObject) -> Option<String> {
    let a = o.metadata.annotations.as_ref()?;
    a.get(HOLD_ANNOTATION)
        .and_then(|r| HoldMark::parse(r))
        .map(|h| h.reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_resolved_recovers_the_episode_from_prometheus() {
    let began = Instant::now();
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "recover").await;

    // Crashed shadow: no hold for its kind, it only needs its counters reset
    // once the outage is over.
    let mut brs = sample("brupop-bottlerocketshadow-crashed.yaml");
    brs.data["status"]["state_transition_failure_timestamp"] = json!(chrono::Utc::now());
    let brs = create_with_status(&client, brs, &ns).await;
    let brs_name = brs.metadata.name.clone().expect("name");
    let brs_api: Api<DynamicObject> = api_for(&client, &brs, &ns);
    assert_eq!(crash_count(&brs), Some(3));

    let (brs_ratio, osm_ratio) = (
        Arc::new(AtomicU64::new(0.6f64.to_bits())),
        Arc::new(AtomicU64::new(0.6f64.to_bits())),
    );
    let cloud = cloud_exporter(vec![(BRS, brs_ratio.clone()), (OSM, osm_ratio.clone())]).await;
    let (prom_port, am_port) = (free_port(), free_port());
    let tmp = tempfile::tempdir().expect("tmp");
    let token = tmp.path().join("token");
    std::fs::write(&token, "s3cret-token\n").expect("token");
    let token = token.display().to_string();

    // The first process would verify only after an hour: whatever is
    // remediated, the second process did it.
    let mut first = Remedy::serve(cluster, &config(&ns, &token, prom_port, am_port, "1h"));
    first.wait_ready().await;
    let first_port = first.url.rsplit(':').next().expect("port").to_string();
    let _am = start_alertmanager_at(am_port, &remedy_webhook_route(&first_port, &token)).await;
    let cloud = cloud.to_string();
    let _prom = start_prometheus_at(
        prom_port,
        &alerting_prometheus(am_port, &[("cloud", &cloud)]),
        &[("rules.yml", CLOUD_RULES)],
    )
    .await;

    // Both kinds fire, the webhook tells the first process.
    eventually(
        Duration::from_secs(30),
        "both alerts firing in the first process",
        || async {
            (episodes(&first).await? == vec![(BRS.into(), true), (OSM.into(), true)]).then_some(())
        },
    )
    .await;
    // The shadows' outage ends; Alertmanager delivers resolved (2xx: it
    // never sends it again).
    brs_ratio.store(0.0f64.to_bits(), Ordering::SeqCst);
    eventually(
        Duration::from_secs(30),
        "resolved delivered to the first process",
        || async {
            (episodes(&first).await? == vec![(BRS.into(), false), (OSM.into(), true)]).then_some(())
        },
    )
    .await;
    let (_, text) = first.get("/metrics").await.expect("metrics");
    assert!(
        crate::support::sample(
            &text,
            r#"remedy_webhook_notifications_total{status="resolved",result="accepted"}"#
        )
        .is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert_eq!(
        crash_count(&brs_api.get(&brs_name).await.expect("brs")),
        Some(3),
        "not verified yet: untouched"
    );

    // Restart before verification. While no remedy runs, a machine of the
    // still-failing kind breaks.
    first.kill();
    let mut osm = sample("capo-openstackmachine-error.yaml");
    osm.metadata.name = Some("osm-broke-during-restart".into());
    osm.data["status"] = crate::support::objects::nova_503();
    let osm = create_with_status(&client, osm, &ns).await;
    let osm_api: Api<DynamicObject> = api_for(&client, &osm, &ns);
    let second = Remedy::serve(cluster, &config(&ns, &token, prom_port, am_port, "2s"));
    second.wait_ready().await;
    let restarted = Instant::now();

    // Recovered: the shadow's episode is verified and its counters reset;
    // the machine is held for the alert that still fires.
    eventually(
        Duration::from_secs(45),
        "counters reset after recovery",
        || async {
            let o = brs_api.get(&brs_name).await.ok()?;
            (crash_count(&o) == Some(0)).then_some(())
        },
    )
    .await;
    let reset_after = restarted.elapsed();
    eventually(
        Duration::from_secs(20),
        "machine held for the firing alert",
        || async {
            let o = osm_api.get("osm-broke-during-restart").await.ok()?;
            (hold_reason(&o).as_deref() == Some("alert:CloudAPIDegraded")).then_some(())
        },
    )
    .await;
    // Ticks go on: nothing is done twice, the held machine is not remediated.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let o = osm_api.get("osm-broke-during-restart").await.expect("osm");
    assert!(
        o.data["status"].get("failureReason").is_some(),
        "{}",
        second.log_tail()
    );
    assert_eq!(
        episodes(&second).await.expect("status"),
        vec![(BRS.into(), false), (OSM.into(), true)]
    );

    let (_, text) = second.get("/metrics").await.expect("metrics");
    let v = |s: &str| crate::support::sample(&text, s).unwrap_or(0.0);
    assert_eq!(
        v(r#"remedy_actions_total{action="reset_counters",result="success"}"#),
        1.0,
        "exactly one reset\n{text}"
    );
    assert_eq!(
        v(r#"remedy_actions_total{action="hold",result="success"}"#),
        1.0,
        "{text}"
    );
    assert_eq!(
        v(r#"remedy_actions_total{action="unpause",result="success"}"#),
        0.0,
        "{text}"
    );
    let notified: f64 = text
        .lines()
        .filter(|l| l.starts_with("remedy_webhook_notifications_total{"))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, n)| n.parse::<f64>().ok()))
        .sum();
    assert_eq!(
        notified, 0.0,
        "no notification reached the second process\n{text}"
    );
    assert!(v(r#"remedy_signal_queries_total{target="prometheus",result="ok"}"#) >= 3.0);
    assert!(v(r#"remedy_signal_queries_total{target="alertmanager",result="ok"}"#) >= 1.0);
    assert!(
        second
            .log_tail()
            .contains("alert episodes recovered from Prometheus"),
        "{}",
        second.log_tail()
    );
    eprintln!(
        "episode recovery: reset {reset_after:?} after the restart, test {:?}",
        began.elapsed()
    );
}
