//! UTF-8 label names, which Prometheus 3 and Alertmanager 0.28+ accept and
//! OpenTelemetry data brings (`k8s.namespace.name`). remedy used to refuse
//! any such name, so an alert carrying one could never be verified, and a
//! notification carrying one was refused whole. Against the real
//! Prometheus 3.x and Alertmanager 0.3x only: 2.42 and 0.25 reject these
//! names themselves, so scripts/test's second run on them leaves this out.

use crate::support::procs::{free_port, push_alerts, start_alertmanager, start_prometheus_at};
use remedy::config::SignalsConfig;
use remedy::metrics::Metrics;
use remedy::signals::Verifier;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const RULES: &str = r#"
groups:
  - name: utf8
    interval: 1s
    rules:
      - alert: RegionDegraded
        expr: vector(1)
        for: 0s
        labels:
          "cloud.region": eu-1
          "k8s.namespace.name": 'capi"system'
"#;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn utf8_label_names_are_verified_against_prometheus_3_and_alertmanager() {
    let prom = start_prometheus_at(
        free_port(),
        "global:\n  evaluation_interval: 1s\nrule_files:\n  - {dir}/rules.yml\n",
        &[("rules.yml", RULES)],
    )
    .await;
    let am = start_alertmanager("route:\n  receiver: none\nreceivers:\n  - name: none\n").await;
    let verifier = |am: Option<&str>| {
        let cfg = SignalsConfig {
            prometheus_url: Some(prom.base.clone()),
            alertmanager_url: am.map(str::to_string),
            timeout: Duration::from_secs(5),
            ..SignalsConfig::default()
        };
        Verifier::new(&cfg, Arc::new(Metrics::new(10))).expect("verifier")
    };
    let v = verifier(None);
    let eu = labels(&[
        ("cloud.region", "eu-1"),
        ("k8s.namespace.name", "capi\"system"),
    ]);
    let us = labels(&[("cloud.region", "us-1")]);

    // Prometheus: the scope with UTF-8 names is firing, another value is not.
    let mut firing = false;
    for _ in 0..100 {
        let c = v.cleared("RegionDegraded", &eu, None).await.expect("query");
        if !c.cleared {
            firing = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        firing,
        "RegionDegraded{{cloud.region=eu-1}} never seen firing"
    );
    let c = v.cleared("RegionDegraded", &us, None).await.expect("query");
    assert!(c.cleared, "{}", c.why);

    // Alertmanager: an alert with UTF-8 names, active there only.
    let v = verifier(Some(&am.base));
    push_alerts(
        &am.base,
        json!([{"labels": {"alertname": "ZoneDown", "cloud.region": "eu-1", "k8s.namespace.name": "capi\"system"}}]),
    )
    .await;
    let c = v.cleared("ZoneDown", &eu, None).await.expect("query");
    assert!(
        !c.cleared,
        "the Alertmanager filter with quoted names must match: {}",
        c.why
    );
    assert!(c.why.contains("alertmanager: 1 alert(s)"), "{}", c.why);
    let c = v.cleared("ZoneDown", &us, None).await.expect("query");
    assert!(c.cleared, "{}", c.why);
}

/// The real Alertmanager 0.3x delivering an alert with UTF-8 label names,
/// grouped by one of them, to remedy's webhook: accepted and emitted with
/// its labels (it was refused whole, 400 "invalid label name").
#[tokio::test]
async fn alertmanager_delivers_utf8_label_names_to_the_webhook() {
    use crate::signals_webhook::{Server, TOKEN};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let mut server = Server::start_on(listener, 8);
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("token");
    let am = start_alertmanager(&format!(
        "route:\n  receiver: remedy\n  group_by: [alertname, 'cloud.region']\n  group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 1h\n\
         receivers:\n  - name: remedy\n    webhook_configs:\n      - url: http://127.0.0.1:{port}/webhook/alertmanager\n\
         \x20       send_resolved: true\n        http_config:\n          authorization:\n            type: Bearer\n            credentials_file: {}\n",
        token.display()
    ))
    .await;
    push_alerts(
        &am.base,
        json!([{"labels": {"alertname": "RemedyE2E", "cloud.region": "eu-1", "k8s.namespace.name": "capi"}}]),
    )
    .await;
    let ev = tokio::time::timeout(Duration::from_secs(30), server.rx.recv())
        .await
        .expect("Alertmanager delivered in time")
        .expect("channel open");
    assert_eq!(ev.alertname, "RemedyE2E");
    assert_eq!(
        ev.labels.get("cloud.region").map(String::as_str),
        Some("eu-1")
    );
    assert_eq!(
        ev.labels.get("k8s.namespace.name").map(String::as_str),
        Some("capi")
    );
    assert_eq!(server.count("invalid", "rejected"), 0.0);
}
