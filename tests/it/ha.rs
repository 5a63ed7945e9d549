//! Three replicas with leader election, real Prometheus and Alertmanager,
//! on the real apiserver. Alertmanager sends to one follower only, as a
//! Service may route it; the episode record carries the notification to
//! whichever replica leads.
//!
//! 1. The leader is killed between the resolved notification (taken by the
//!    follower F) and verification, and F is frozen while the lease
//!    changes hands, so the third replica G leads: G has never received a
//!    notification, and remediates each machine exactly once from the
//!    record alone.
//! 2. A rolling restart of every replica while the alert fires: no hold is
//!    lost, the firing episode survives (a machine failing after the
//!    restarts is held for it), and each machine is remediated once after
//!    the alert resolves.

use crate::support::objects::{api_for, create_with_status, events_by_reason, sample};
use crate::support::procs::{
    CLOUD_RULES, alerting_prometheus, cloud_exporter, remedy_webhook_route, start_alertmanager_at,
    start_prometheus_at,
};
use crate::support::{Remedy, TestCluster, eventually, free_port, namespace};
use kube::Client;
use kube::api::{Api, DynamicObject};
use remedy::model::profile::{CAPI_PAUSED, HOLD_ANNOTATION, HoldMark};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const OSM: &str = "OpenStackMachine";
const ALERT_HOLD: &str = "alert:CloudAPIDegraded";

fn config(ns: &str, token: &str, prom: u16, am: u16) -> String {
    format!(
        "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 250ms\n\
         leader_election: {{enabled: true, lease_name: remedy-ha, namespace: {ns}, lease_duration: 3s, episode_record: remedy-episodes}}\n\
         backoff: {{base: 1s, cap: 2s, jitter: 0, quiet_window: 1h}}\n\
         budget: {{refill_per_second: 20, burst: 20}}\n\
         breaker: {{open_ratio: 1.0, close_ratio: 1.0, min_resources: 100000}}\n\
         webhook: {{token_file: {token}}}\n\
         signals: {{prometheus_url: 'http://127.0.0.1:{prom}', alertmanager_url: 'http://127.0.0.1:{am}', timeout: 2s, settle: 5s}}\n\
         alerts: [{{alertname: CloudAPIDegraded, select: {{kind_label: kind}}}}]\n"
    )
}

async fn failing_machine(client: &Client, ns: &str, name: &str) -> Api<DynamicObject> {
    let mut o = sample("capo-openstackmachine-error.yaml");
    o.metadata.name = Some(name.into());
    o.data["status"] = crate::support::objects::nova_503();
    let o = create_with_status(client, o, ns).await;
    api_for(client, &o, ns)
}

fn hold_reason(o: &DynamicObject) -> Option<String> {
    let a = o.metadata.annotations.as_ref()?;
    a.get(CAPI_PAUSED)?;
    a.get(HOLD_ANNOTATION)
        .and_then(|r| HoldMark::parse(r))
        .map(|h| h.reason)
}

/// Names among `names` held for the alert.
async fn held(api: &Api<DynamicObject>, names: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for n in names {
        if let Ok(o) = api.get(n).await
            && hold_reason(&o).as_deref() == Some(ALERT_HOLD)
        {
            out.push(n.clone());
        }
    }
    out
}

/// Remediated: neither paused nor failed.
async fn remediated(api: &Api<DynamicObject>, names: &[String]) -> bool {
    for n in names {
        let Ok(o) = api.get(n).await else {
            return false;
        };
        let paused = o
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(CAPI_PAUSED));
        if paused || o.data["status"].get("failureReason").is_some() {
            return false;
        }
    }
    true
}

async fn is_leader(r: &Remedy) -> bool {
    let Some((200, body)) = r.get("/status").await else {
        return false;
    };
    serde_json::from_str::<Value>(&body).is_ok_and(|v| v["leader"] == json!(true))
}

async fn metric(r: &Remedy, series: &str) -> f64 {
    let (_, text) = r.get("/metrics").await.expect("metrics");
    crate::support::sample(&text, series).unwrap_or(0.0)
}

/// Sum of every `remedy_webhook_notifications_total` series.
async fn notifications(r: &Remedy) -> f64 {
    let (_, text) = r.get("/metrics").await.expect("metrics");
    text.lines()
        .filter(|l| l.starts_with("remedy_webhook_notifications_total{"))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, n)| n.parse::<f64>().ok()))
        .sum()
}

fn assert_once(what: &str, per: &BTreeMap<String, u32>, names: &[String]) {
    for n in names {
        assert_eq!(per.get(n).copied(), Some(1), "{what} for {n}: {per:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_replica_takes_the_webhook_and_the_leader_acts_once() {
    let began = Instant::now();
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "ha").await;
    let ratio = Arc::new(AtomicU64::new(0.0f64.to_bits()));
    let cloud = cloud_exporter(vec![(OSM, ratio.clone())]).await.to_string();
    let (prom_port, am_port) = (free_port(), free_port());
    let tmp = tempfile::tempdir().expect("tmp");
    let token = tmp.path().join("token");
    std::fs::write(&token, "s3cret-token\n").expect("token");
    let token = token.display().to_string();
    let cfg = config(&ns, &token, prom_port, am_port);

    let ports = [free_port(), free_port(), free_port()];
    let mut replicas: Vec<Remedy> = ports
        .iter()
        .map(|&p| Remedy::serve_at(cluster, p, &cfg))
        .collect();
    for r in &replicas {
        r.wait_ready().await;
    }
    let leader = eventually(Duration::from_secs(20), "one leader", || async {
        let mut leading = Vec::new();
        for (i, r) in replicas.iter().enumerate() {
            if is_leader(r).await {
                leading.push(i);
            }
        }
        (leading.len() == 1).then(|| leading[0])
    })
    .await;
    let (f, g) = match leader {
        0 => (1, 2),
        1 => (0, 2),
        _ => (0, 1),
    };
    // Alertmanager knows the follower F only.
    let _am = start_alertmanager_at(
        am_port,
        &remedy_webhook_route(&ports[f].to_string(), &token),
    )
    .await;
    let _prom = start_prometheus_at(
        prom_port,
        &alerting_prometheus(am_port, &[("cloud", &cloud)]),
        &[("rules.yml", CLOUD_RULES)],
    )
    .await;

    // 1. Four machines fail while the alert fires: the leader holds them.
    let names: Vec<String> = (0..4).map(|i| format!("a-{i}")).collect();
    let mut api = None;
    for n in &names {
        api = Some(failing_machine(&client, &ns, n).await);
    }
    let api = api.expect("api");
    ratio.store(0.6f64.to_bits(), Ordering::SeqCst);
    eventually(
        Duration::from_secs(40),
        "a-* held for the alert",
        || async { (held(&api, &names).await.len() == names.len()).then_some(()) },
    )
    .await;

    // The alert resolves; F takes the notification. The leader is killed
    // before it can verify (settle 5s), and F is frozen until G leads.
    let accepted = r#"remedy_webhook_notifications_total{status="resolved",result="accepted"}"#;
    ratio.store(0.0f64.to_bits(), Ordering::SeqCst);
    eventually(Duration::from_secs(30), "F accepts resolved", || async {
        (metric(&replicas[f], accepted).await >= 1.0).then_some(())
    })
    .await;
    let resolved_at = Instant::now();
    replicas[leader].kill();
    replicas[f].freeze();
    eventually(Duration::from_secs(20), "G leads", || async {
        is_leader(&replicas[g]).await.then_some(())
    })
    .await;
    let took_over = resolved_at.elapsed();
    replicas[f].resume();
    eventually(Duration::from_secs(40), "a-* remediated", || async {
        remediated(&api, &names).await.then_some(())
    })
    .await;
    let remediated_after = resolved_at.elapsed();
    // Ticks go on; nothing is done again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_once(
        "Unpaused",
        &events_by_reason(&client, &ns, "Unpaused").await,
        &names,
    );
    assert_once(
        "FailureCleared",
        &events_by_reason(&client, &ns, "FailureCleared").await,
        &names,
    );
    assert_eq!(
        notifications(&replicas[g]).await,
        0.0,
        "G never received a notification"
    );
    let unpaused = r#"remedy_actions_total{action="unpause",result="success"}"#;
    assert_eq!(metric(&replicas[g], unpaused).await, 4.0, "G remediated");
    assert_eq!(metric(&replicas[f], unpaused).await, 0.0, "F followed");
    assert!(
        replicas[g]
            .log()
            .contains("alert episodes taken from the episode record"),
        "{}",
        replicas[g].log_tail()
    );
    // Not rebuilt from Prometheus: the fallback was not needed.
    assert!(
        !replicas[g]
            .log()
            .contains("alert episodes recovered from Prometheus"),
        "{}",
        replicas[g].log_tail()
    );

    // 2. The alert fires again; three more machines fail and are held.
    let more: Vec<String> = (0..3).map(|i| format!("b-{i}")).collect();
    for n in &more {
        failing_machine(&client, &ns, n).await;
    }
    ratio.store(0.6f64.to_bits(), Ordering::SeqCst);
    eventually(Duration::from_secs(40), "b-* held", || async {
        (held(&api, &more).await.len() == more.len()).then_some(())
    })
    .await;
    // Rolling restart: each replica stopped (SIGTERM) and started again on
    // its port, waiting for readiness between, as a Deployment rolls.
    replicas[leader] = Remedy::serve_at(cluster, ports[leader], &cfg);
    replicas[leader].wait_ready().await;
    for i in [f, g, leader] {
        replicas[i].terminate();
        eventually(Duration::from_secs(20), "replica stopped", || {
            let exited = replicas[i].exited();
            async move { exited.then_some(()) }
        })
        .await;
        assert_eq!(
            held(&api, &more).await,
            more,
            "no hold lost while a replica restarts"
        );
        replicas[i] = Remedy::serve_at(cluster, ports[i], &cfg);
        replicas[i].wait_ready().await;
    }
    // The firing episode survived: a machine failing now is held for it.
    let late = vec!["b-late".to_string()];
    failing_machine(&client, &ns, "b-late").await;
    eventually(
        Duration::from_secs(30),
        "b-late held after the restarts",
        || async { (held(&api, &late).await == late).then_some(()) },
    )
    .await;
    assert_eq!(held(&api, &more).await, more, "no hold lost");
    ratio.store(0.0f64.to_bits(), Ordering::SeqCst);
    let all: Vec<String> = more.iter().chain(&late).cloned().collect();
    eventually(
        Duration::from_secs(60),
        "b-* remediated after the restarts",
        || async { remediated(&api, &all).await.then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let unpaused_events = events_by_reason(&client, &ns, "Unpaused").await;
    assert_once("Unpaused", &unpaused_events, &all);
    assert_once("Unpaused", &unpaused_events, &names);

    // 3. A burst at one replica: 16 senders, 200 notifications for distinct
    // scopes, each answered only once recorded. Writes are batched.
    let webhook_writes = r#"remedy_episode_record_writes_total{writer="webhook",result="ok"}"#;
    let before = metric(&replicas[g], webhook_writes).await;
    let burst = Instant::now();
    let mut senders = tokio::task::JoinSet::new();
    for s in 0..16 {
        let (url, token) = (replicas[g].url.clone(), "s3cret-token");
        senders.spawn(async move {
            let http = reqwest::Client::new();
            for i in (s..200).step_by(16) {
                let body = json!({"receiver": "remedy", "status": "firing", "version": "4",
                    "groupKey": format!("{{}}:{{kind=\"burst-{i}\"}}"), "truncatedAlerts": 0,
                    "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
                    "externalURL": "http://alertmanager:9093",
                    "alerts": [{"status": "firing",
                        "labels": {"alertname": "CloudAPIDegraded", "kind": format!("burst-{i}")},
                        "annotations": {}, "startsAt": "2026-12-03T00:00:00Z",
                        "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "",
                        "fingerprint": format!("{i:016x}")}]});
                let r = http
                    .post(format!("{url}/webhook/alertmanager"))
                    .bearer_auth(token)
                    .json(&body)
                    .send()
                    .await
                    .expect("post");
                assert_eq!(
                    r.status().as_u16(),
                    200,
                    "{}",
                    r.text().await.unwrap_or_default()
                );
            }
        });
    }
    while let Some(r) = senders.join_next().await {
        r.expect("sender");
    }
    let burst_took = burst.elapsed();
    let burst_writes = metric(&replicas[g], webhook_writes).await - before;
    // The leader has every one of them.
    let leading = eventually(Duration::from_secs(10), "a leader", || async {
        for (i, r) in replicas.iter().enumerate() {
            if is_leader(r).await {
                return Some(i);
            }
        }
        None
    })
    .await;
    eventually(
        Duration::from_secs(20),
        "200 burst episodes at the leader",
        || async {
            let (_, body) = replicas[leading].get("/status?limit=10000").await?;
            let v: Value = serde_json::from_str(&body).ok()?;
            let n = v["episodes"]
                .as_array()?
                .iter()
                .filter(|e| {
                    e["matchers"]["kind"]
                        .as_str()
                        .is_some_and(|k| k.starts_with("burst-"))
                })
                .count();
            (n == 200).then_some(())
        },
    )
    .await;
    assert!(
        burst_writes <= 2.0 + 5.0 * burst_took.as_secs_f64(),
        "{burst_writes} writes in {burst_took:?}: more than one per 200 ms"
    );
    eprintln!(
        "ha: 200 notifications from 16 senders recorded in {burst_took:?} with {burst_writes} writes"
    );

    // The record's size and the writes it took, for docs/evidence/measurements.md.
    let mut writes = 0.0;
    let mut bytes = 0.0;
    for r in &replicas {
        let (_, text) = r.get("/metrics").await.expect("metrics");
        writes += text
            .lines()
            .filter(|l| l.starts_with("remedy_episode_record_writes_total{"))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, n)| n.parse::<f64>().ok()))
            .sum::<f64>();
        bytes = f64::max(
            bytes,
            crate::support::sample(&text, "remedy_episode_record_bytes").unwrap_or(0.0),
        );
    }
    eprintln!(
        "ha: G led {took_over:?} and remediated {remediated_after:?} after F took resolved; \
         record {bytes} bytes, {writes} writes by the last three processes; test {:?}",
        began.elapsed()
    );
}

/// #38.1: with leader election (the shipped default) a notification comes
/// through the episode record and must be proven from Prometheus' ALERTS.
/// Alertmanager's alert carries Prometheus' external label `cluster`, the
/// local ALERTS series does not: a selector on it (`cluster_label:
/// cluster`) must still be proven, hold the cluster's machines and, once
/// resolved and verified, remediate them. A machine of another cluster is
/// never touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_selected_by_an_external_label_is_proven_held_and_remediated() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "ha-ext").await;
    let ratio = Arc::new(AtomicU64::new(0.0f64.to_bits()));
    let cloud = cloud_exporter(vec![(OSM, ratio.clone())]).await.to_string();
    let (prom_port, am_port, port) = (free_port(), free_port(), free_port());
    let tmp = tempfile::tempdir().expect("tmp");
    let token = tmp.path().join("token");
    std::fs::write(&token, "s3cret-token\n").expect("token");
    let token = token.display().to_string();
    let cfg = config(&ns, &token, prom_port, am_port).replace(
        "select: {kind_label: kind}",
        "select: {cluster_label: cluster}",
    );
    assert!(cfg.contains("cluster_label: cluster"), "{cfg}");
    let remedy = Remedy::serve_at(cluster, port, &cfg);
    remedy.wait_ready().await;
    eventually(Duration::from_secs(20), "leading", || async {
        is_leader(&remedy).await.then_some(())
    })
    .await;
    let _am =
        start_alertmanager_at(am_port, &remedy_webhook_route(&port.to_string(), &token)).await;
    let prom_cfg = alerting_prometheus(am_port, &[("cloud", &cloud)]).replace(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}",
        "global: {scrape_interval: 1s, evaluation_interval: 1s, external_labels: {cluster: prod}}",
    );
    assert!(prom_cfg.contains("external_labels"), "{prom_cfg}");
    let _prom = start_prometheus_at(prom_port, &prom_cfg, &[("rules.yml", CLOUD_RULES)]).await;

    let names: Vec<String> = (0..3).map(|i| format!("prod-{i}")).collect();
    let mut api = None;
    for (n, c) in names
        .iter()
        .map(|n| (n.as_str(), "prod"))
        .chain([("other-0", "other")])
    {
        let mut o = sample("capo-openstackmachine-error.yaml");
        o.metadata.name = Some(n.into());
        o.metadata
            .labels
            .get_or_insert_default()
            .insert("cluster.x-k8s.io/cluster-name".into(), c.into());
        o.data["status"] = crate::support::objects::nova_503();
        let o = create_with_status(&client, o, &ns).await;
        api = Some(api_for(&client, &o, &ns));
    }
    let api = api.expect("api");
    ratio.store(0.6f64.to_bits(), Ordering::SeqCst);
    eventually(
        Duration::from_secs(40),
        "prod-* held for the alert",
        || async { (held(&api, &names).await.len() == names.len()).then_some(()) },
    )
    .await;
    let other = vec!["other-0".to_string()];
    assert!(
        held(&api, &other).await.is_empty(),
        "another cluster's machine is not in the scope"
    );
    assert!(
        remedy
            .log()
            .contains("firing episodes from the episode record confirmed by Prometheus"),
        "{}",
        remedy.log_tail()
    );

    ratio.store(0.0f64.to_bits(), Ordering::SeqCst);
    eventually(Duration::from_secs(60), "prod-* remediated", || async {
        remediated(&api, &names).await.then_some(())
    })
    .await;
    let unproven = r#"remedy_episodes_refused_total{alert="CloudAPIDegraded",reason="unproven"}"#;
    assert_eq!(
        metric(&remedy, unproven).await,
        0.0,
        "{}",
        remedy.log_tail()
    );
    let o = api.get("other-0").await.expect("other-0");
    assert!(
        o.data["status"].get("failureReason").is_some(),
        "another cluster's machine is not remediated"
    );
    assert_once(
        "Unpaused",
        &events_by_reason(&client, &ns, "Unpaused").await,
        &names,
    );
}
