//! Alert episodes cannot be turned against the fleet (#12): the real
//! `remedy serve` on the real apiserver, a real Prometheus as the source of
//! proof, and notifications posted to the webhook the way Alertmanager 0.25
//! sends them (payload v4, bearer token).
//! - a resolved notification for an alert Prometheus never saw firing
//!   clears nothing;
//! - a firing alert without a selector label holds nothing;
//! - a verified episode remediates its resources once; one that fails again
//!   later is not cleared again by it;
//! - 1,000 junk firing scopes do not push out the real firing one;
//! - a restarted remedy serves the breaker cooldown before releasing the
//!   breaker holds it finds.

use crate::support::objects::{
    api_for, count, create_with_status, failed, held, sample, set_status,
};
use crate::support::procs::{Proc, start_prometheus_at};
use crate::support::webhook::{self, alert_labels, notification};
use crate::support::{Remedy, TestCluster, free_port, namespace};
use kube::api::{Api, DynamicObject};
use remedy::model::profile::{
    CAPI_PAUSED, CRASH_ANNOTATION, FAILURE_TIME_ANNOTATION, HOLD_ANNOTATION, PAUSE_MARKER,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const TOKEN: &str = "episode-t0ken";
const ALERT: &str = "CloudAPIDegraded";

fn failing() -> Value {
    crate::support::objects::nova_503()
}

struct Setup {
    api: Api<DynamicObject>,
    remedy: Remedy,
    _prom: Proc,
    _tmp: tempfile::TempDir,
}

/// `n` failing OpenStackMachines and remedy verifying against a real
/// Prometheus that has never evaluated any alert.
async fn setup(prefix: &str, n: usize, alert_extra: &str) -> Setup {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, prefix).await;
    let mut api = None;
    for i in 0..n {
        let mut o = sample("capo-openstackmachine-error.yaml");
        o.metadata.name = Some(format!("osm-{i}"));
        o.data["status"] = failing();
        let c = create_with_status(&client, o, &ns).await;
        api.get_or_insert_with(|| api_for(&client, &c, &ns));
    }
    let prom_port = free_port();
    let prom = start_prometheus_at(
        prom_port,
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n",
        &[],
    )
    .await;
    let tmp = tempfile::tempdir().expect("tmp");
    let token = tmp.path().join("token");
    std::fs::write(&token, TOKEN).expect("token");
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 300ms\nleader_election: {{enabled: false}}\n\
             budget: {{refill_per_second: 20, burst: 20}}\nbackoff: {{base: 1s, cap: 2s}}\n\
             breaker: {{open_ratio: 1.0, close_ratio: 1.0, min_resources: 100000}}\n\
             webhook: {{token_file: {}}}\n\
             signals: {{prometheus_url: 'http://127.0.0.1:{prom_port}', timeout: 2s, settle: 1s}}\n\
             alerts: [{{alertname: {ALERT}, select: {{kind_label: kind}}{alert_extra}}}]\n",
            token.display()
        ),
    );
    remedy.wait_ready().await;
    Setup {
        api: api.expect("api"),
        remedy,
        _prom: prom,
        _tmp: tmp,
    }
}

fn labels(kind: Option<&str>) -> BTreeMap<&'static str, String> {
    match kind {
        Some(k) => alert_labels(ALERT, &[("kind", k)]),
        None => alert_labels(ALERT, &[]),
    }
}

async fn post(remedy: &Remedy, body: &Value) {
    let status = webhook::post(&remedy.url, TOKEN, body).await;
    assert!((200..300).contains(&status), "webhook answered {status}");
}

fn refused(reason: &str) -> String {
    format!(r#"remedy_episodes_refused_total{{alert="{ALERT}",reason="{reason}"}}"#)
}

#[tokio::test]
async fn a_resolved_notification_without_proof_of_firing_clears_nothing() {
    let s = setup("unproven", 10, "").await;
    post(
        &s.remedy,
        &notification("resolved", &[labels(Some("OpenStackMachine"))]),
    )
    .await;
    s.remedy
        .until(Duration::from_secs(20), "the refusal counted", || async {
            s.remedy.metric(&refused("unproven")).await == 1.0
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        count(&s.api, failed).await,
        10,
        "nothing cleared\n{}",
        s.remedy.log_tail()
    );
    let (_, status) = s.remedy.get("/status").await.expect("status");
    let v: Value = serde_json::from_str(&status).expect("json");
    assert_eq!(v["episodes"], json!([]), "{status}");
}

#[tokio::test]
async fn a_firing_alert_that_selects_everything_or_too_much_holds_nothing() {
    let s = setup("too-wide", 4, ", max_resources: 3").await;
    // No kind label: the scope would be every failing resource.
    post(&s.remedy, &notification("firing", &[labels(None)])).await;
    // In scope, but 4 failing machines over a cap of 3.
    post(
        &s.remedy,
        &notification("firing", &[labels(Some("OpenStackMachine"))]),
    )
    .await;
    s.remedy
        .until(Duration::from_secs(20), "both refusals counted", || async {
            let wide = s.remedy.metric(&refused("cluster_wide")).await;
            let cap = s.remedy.metric(&refused("over_cap")).await;
            wide == 1.0 && cap == 1.0
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(count(&s.api, held).await, 0, "{}", s.remedy.log_tail());
}

#[tokio::test]
async fn a_verified_episode_remediates_once_and_a_later_failure_takes_the_normal_path() {
    let s = setup("once", 3, "").await;
    let scope = [labels(Some("OpenStackMachine"))];
    post(&s.remedy, &notification("firing", &scope)).await;
    s.remedy
        .until(Duration::from_secs(20), "held for the alert", || async {
            count(&s.api, held).await == 3
        })
        .await;
    // Resolved; Prometheus has no ALERTS for it, so it verifies as cleared,
    // and the webhook saw it firing: proven.
    post(&s.remedy, &notification("resolved", &scope)).await;
    s.remedy
        .until(Duration::from_secs(30), "remediated", || async {
            let clean = count(&s.api, |o| !failed(o) && !held(o)).await;
            clean == 3
        })
        .await;
    let clears = r#"remedy_actions_total{action="clear_failure",result="success"}"#;
    assert_eq!(s.remedy.metric(clears).await, 3.0);
    // osm-0 fails again within the episode's hour: not the old episode's.
    set_status(&s.api, "osm-0", failing()).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let o = s.api.get("osm-0").await.expect("osm-0");
    assert!(
        failed(&o),
        "cleared again by the old episode\n{}",
        s.remedy.log_tail()
    );
    assert_eq!(s.remedy.metric(clears).await, 3.0);
}

#[tokio::test]
async fn junk_firing_scopes_do_not_evict_a_real_firing_episode() {
    let s = setup("junk", 1, "").await;
    post(
        &s.remedy,
        &notification("firing", &[labels(Some("OpenStackMachine"))]),
    )
    .await;
    s.remedy
        .until(Duration::from_secs(20), "the real scope holds", || async {
            count(&s.api, held).await == 1
        })
        .await;
    // 1,000 more firing scopes: 999 fit beside the real one, one is refused.
    let junk: Vec<_> = (0..1000)
        .map(|i| labels(Some(&format!("Junk{i}"))))
        .collect();
    post(&s.remedy, &notification("firing", &junk)).await;
    s.remedy
        .until(Duration::from_secs(20), "the overflow refused", || async {
            s.remedy.metric(&refused("full")).await == 1.0
        })
        .await;
    // A new failure in the real scope is still held.
    let client = TestCluster::shared().client().await;
    let ns = s.api.get("osm-0").await.expect("osm-0").metadata.namespace;
    let mut o = sample("capo-openstackmachine-error.yaml");
    o.metadata.name = Some("osm-new".into());
    o.data["status"] = failing();
    create_with_status(&client, o, ns.as_deref().unwrap_or_default()).await;
    s.remedy
        .until(Duration::from_secs(20), "the new failure held", || async {
            count(&s.api, held).await == 2
        })
        .await;
}

#[tokio::test]
async fn a_restarted_remedy_serves_the_breaker_cooldown_before_releasing() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "resume").await;
    // What a previous leader left: 5 breaker holds, and 30 machines of
    // which 5 still fail (17%: under open_ratio, over close_ratio).
    let record = json!({"since": "2020-01-01T00:00:00Z", "reason": "breaker", "crash_count": 1});
    let mut api = None;
    for i in 0..35 {
        let mut o = sample("capo-openstackmachine-error.yaml");
        o.metadata.name = Some(format!("osm-{i:02}"));
        if i < 5 {
            o.metadata.annotations = Some(BTreeMap::from([
                (CAPI_PAUSED.to_string(), PAUSE_MARKER.to_string()),
                (HOLD_ANNOTATION.to_string(), record.to_string()),
                (CRASH_ANNOTATION.to_string(), "1".to_string()),
                (
                    FAILURE_TIME_ANNOTATION.to_string(),
                    "2020-01-01T00:00:00Z".to_string(),
                ),
            ]));
        }
        o.data["status"] = if (5..10).contains(&i) {
            failing()
        } else {
            json!({"ready": true, "instanceState": "ACTIVE"})
        };
        let c = create_with_status(&client, o, &ns).await;
        api.get_or_insert_with(|| api_for(&client, &c, &ns));
    }
    let api = api.expect("api");
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 250ms\nleader_election: {{enabled: false}}\n\
             budget: {{refill_per_second: 20, burst: 20}}\nbackoff: {{base: 1s, cap: 2s}}\n\
             breaker: {{open_ratio: 0.3, close_ratio: 0.1, min_resources: 3, window: 1s, cooldown: 8s}}\n"
        ),
    );
    remedy.wait_ready().await;
    let ready_at = tokio::time::Instant::now();
    // The breaker resumes open: the 5 failing are held too (which takes
    // them out of the ratio, so the cooldown runs from about now), and no
    // inherited hold is released before the 8 s cooldown.
    let inherited_paused = || async {
        let items = api.list(&Default::default()).await.expect("list").items;
        items
            .iter()
            .filter(|o| o.metadata.name.as_deref() < Some("osm-05"))
            .filter(|o| {
                o.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(CAPI_PAUSED))
            })
            .count()
    };
    let deadline = ready_at + Duration::from_secs(40);
    while inherited_paused().await == 5 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never released\n{}",
            remedy.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first_release = ready_at.elapsed();
    assert!(
        first_release >= Duration::from_secs(8),
        "first inherited hold released {first_release:?} after ready: before the cooldown\n{}",
        remedy.log_tail()
    );
}
