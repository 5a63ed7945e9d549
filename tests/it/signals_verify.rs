//! `Verifier` against a real Prometheus 2.42 and a real Alertmanager 0.25.
//! The only mock is a tiny TCP stub for the two answers the real servers
//! never give: malformed JSON and an answer slower than the timeout.

use crate::support::procs::{
    Proc, free_port, push_alerts, start_alertmanager, start_prometheus_at,
};
use remedy::config::SignalsConfig;
use remedy::metrics::Metrics;
use remedy::signals::{SignalError, Verifier};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Quote, backslash and newline: everything that needs escaping in PromQL
/// and Alertmanager matchers, as a real label value.
const TRICKY: &str = "q\"uote back\\slash\nnew line";

const RULES: &str = r#"
groups:
  - name: remedy-test
    interval: 1s
    rules:
      - alert: TestAlwaysFiring
        expr: vector(1)
        for: 0s
        labels:
          namespace: capi
          tricky: "q\"uote back\\slash\nnew line"
      - alert: TestNeverFiring
        expr: vector(1) == 0
        for: 0s
"#;

async fn start_prometheus() -> Proc {
    let config = "global:\n  evaluation_interval: 1s\n  external_labels:\n    cluster: test-cluster\n\
                  rule_files:\n  - {dir}/rules.yml\n";
    let p = start_prometheus_at(free_port(), config, &[("rules.yml", RULES)]).await;
    wait_firing(&p.base, "TestAlwaysFiring").await;
    p
}

/// Waits until the rule results are stored (the ALERTS series is queryable,
/// which lags /api/v1/alerts slightly), so "not firing" means something.
async fn wait_firing(prom: &str, alertname: &str) {
    let client = reqwest::Client::new();
    let query = format!(r#"ALERTS{{alertname="{alertname}",alertstate="firing"}}"#);
    for _ in 0..300 {
        let answer: serde_json::Value = client
            .post(format!("{prom}/api/v1/query"))
            .form(&[("query", query.as_str())])
            .send()
            .await
            .expect("query")
            .json()
            .await
            .expect("json");
        if answer["data"]["result"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{alertname} never fired in Prometheus");
}

fn verifier(prom: Option<&str>, am: Option<&str>, timeout: Duration) -> (Verifier, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new(10));
    let cfg = SignalsConfig {
        prometheus_url: prom.map(str::to_string),
        alertmanager_url: am.map(str::to_string),
        timeout,
        ..SignalsConfig::default()
    };
    (
        Verifier::new(&cfg, metrics.clone()).expect("verifier"),
        metrics,
    )
}

fn queries(m: &Metrics, target: &str, result: &str) -> f64 {
    let series = format!(r#"remedy_signal_queries_total{{target="{target}",result="{result}"}} "#);
    m.encode()
        .expect("encode")
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .map(|v| v.parse().expect("number"))
        .unwrap_or(0.0)
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const SECS: Duration = Duration::from_secs(5);

#[tokio::test]
async fn prometheus_alerts_decide_clearance() {
    let prom = start_prometheus().await;
    let (v, metrics) = verifier(Some(&prom.base), None, SECS);
    let none = BTreeMap::new();

    let c = v
        .cleared("TestNeverFiring", &none, None)
        .await
        .expect("query");
    assert!(c.cleared, "{}", c.why);

    let c = v
        .cleared("TestAlwaysFiring", &none, None)
        .await
        .expect("query");
    assert!(!c.cleared);
    assert!(
        c.why.contains("prometheus: 1 firing ALERTS series"),
        "{}",
        c.why
    );

    // Escaping is exact: the tricky value matches itself and nothing else.
    let c = v
        .cleared("TestAlwaysFiring", &labels(&[("tricky", TRICKY)]), None)
        .await
        .expect("query");
    assert!(!c.cleared, "{}", c.why);
    let c = v
        .cleared("TestAlwaysFiring", &labels(&[("tricky", "q\"uote")]), None)
        .await
        .expect("query");
    assert!(c.cleared, "{}", c.why);

    // An external label (as alerts from Alertmanager carry) must not make
    // the ALERTS query match nothing.
    let c = v
        .cleared(
            "TestAlwaysFiring",
            &labels(&[("cluster", "test-cluster"), ("namespace", "capi")]),
            None,
        )
        .await
        .expect("query");
    assert!(!c.cleared, "external label matched locally: {}", c.why);

    let c = v
        .cleared("TestNeverFiring", &none, Some("vector(1)"))
        .await
        .expect("query");
    assert!(!c.cleared);
    assert!(
        c.why.contains("verify_query returned 1 series"),
        "{}",
        c.why
    );
    let c = v
        .cleared("TestNeverFiring", &none, Some("vector(1) == 0"))
        .await
        .expect("query");
    assert!(c.cleared, "{}", c.why);

    let e = v
        .cleared("TestNeverFiring", &none, Some("vector("))
        .await
        .expect_err("bad PromQL");
    assert_eq!(e.label(), "query_error");
    assert!(matches!(&e, SignalError::QueryError { error_type, .. } if error_type == "bad_data"));
    let e = v
        .cleared("TestNeverFiring", &none, Some("scalar(vector(1))"))
        .await
        .expect_err("a scalar proves nothing");
    assert_eq!(e.label(), "malformed");
    let e = v
        .cleared("TestNeverFiring", &labels(&[("", "x")]), None)
        .await
        .expect_err("an empty name is no label name");
    assert_eq!(e.label(), "invalid_input");

    assert_eq!(v.query_scalar("vector(0.25)").await.expect("q"), Some(0.25));
    assert_eq!(
        v.query_scalar("scalar(vector(0.5))").await.expect("q"),
        Some(0.5)
    );
    assert_eq!(v.query_scalar("vector(1) == 0").await.expect("q"), None);
    assert_eq!(
        v.query_scalar("vector(0) / 0").await.expect("q"),
        None,
        "NaN"
    );
    assert_eq!(
        v.query_scalar("vector(1) / 0").await.expect("q"),
        None,
        "+Inf"
    );
    let e = v
        .query_scalar("vector(1)[1m:1s]")
        .await
        .expect_err("matrix");
    assert_eq!(e.label(), "malformed");
    assert_eq!(v.health().status(), vec![("prometheus", Some("malformed"))]);
    assert_eq!(v.query_scalar("vector(1)").await.expect("q"), Some(1.0));
    assert_eq!(v.health().status(), vec![("prometheus", None)]);
    assert!(v.health().last_success("prometheus").is_some());

    // Wrong base path: Prometheus answers 404 text, never "cleared".
    let (v404, _) = verifier(Some(&format!("{}/nope", prom.base)), None, SECS);
    let e = v404
        .cleared("TestNeverFiring", &none, None)
        .await
        .expect_err("404");
    assert_eq!(e.label(), "http_status");

    assert!(queries(&metrics, "prometheus", "ok") >= 10.0);
    assert_eq!(queries(&metrics, "prometheus", "error"), 1.0);
    assert_eq!(queries(&metrics, "prometheus", "malformed"), 2.0);
}

#[tokio::test]
async fn alertmanager_active_or_silenced_alert_is_not_cleared() {
    let prom = start_prometheus().await;
    let mut am = start_alertmanager("route:\n  receiver: none\nreceivers:\n  - name: none\n").await;
    let (v, metrics) = verifier(Some(&prom.base), Some(&am.base), SECS);
    let m1 = labels(&[("name", "m-1")]);

    let c = v
        .cleared("TestNeverFiring", &m1, None)
        .await
        .expect("query");
    assert!(c.cleared, "{}", c.why);
    assert!(c.why.contains("no active Alertmanager alert"), "{}", c.why);

    // Active in Alertmanager (e.g. from another Prometheus) though not here.
    let alert = json!({"alertname": "TestNeverFiring", "name": "m-1", "tricky": TRICKY,
                       "cluster": "test-cluster"});
    push_alerts(&am.base, json!([{"labels": alert}])).await;
    let c = v
        .cleared("TestNeverFiring", &m1, None)
        .await
        .expect("query");
    assert!(!c.cleared);
    assert!(c.why.contains("alertmanager: 1 alert(s)"), "{}", c.why);
    assert!(c.why.contains("state active"), "{}", c.why);
    let exact = labels(&[("tricky", TRICKY), ("cluster", "test-cluster")]);
    let c = v
        .cleared("TestNeverFiring", &exact, None)
        .await
        .expect("query");
    assert!(!c.cleared, "escaped AM matcher must match: {}", c.why);
    let c = v
        .cleared("TestNeverFiring", &labels(&[("name", "m-2")]), None)
        .await
        .expect("query");
    assert!(c.cleared, "{}", c.why);

    // Silenced is still active: not cleared.
    let now = chrono::Utc::now();
    let silence = json!({
        "matchers": [{"name": "name", "value": "m-1", "isRegex": false, "isEqual": true}],
        "startsAt": now.to_rfc3339(),
        "endsAt": (now + chrono::Duration::hours(1)).to_rfc3339(),
        "createdBy": "remedy-test",
        "comment": "silenced but not cleared"
    });
    let r = reqwest::Client::new()
        .post(format!("{}/api/v2/silences", am.base))
        .json(&silence)
        .send()
        .await
        .expect("silence");
    assert!(r.status().is_success(), "silence: {}", r.status());
    let c = v
        .cleared("TestNeverFiring", &m1, None)
        .await
        .expect("query");
    assert!(!c.cleared, "{}", c.why);
    assert!(
        c.why.contains("state suppressed, silenced true"),
        "{}",
        c.why
    );

    // Resolved (endsAt in the past): cleared.
    let past = (chrono::Utc::now() - chrono::Duration::seconds(1)).to_rfc3339();
    push_alerts(&am.base, json!([{"labels": alert, "endsAt": past}])).await;
    let c = v
        .cleared("TestNeverFiring", &m1, None)
        .await
        .expect("query");
    assert!(c.cleared, "{}", c.why);

    // Alertmanager malformed (stub: real Alertmanager never sends that).
    let stub = stub(Stub::Malformed).await;
    let (vs, _) = verifier(Some(&prom.base), Some(&stub), SECS);
    let e = vs
        .cleared("TestNeverFiring", &m1, None)
        .await
        .expect_err("malformed");
    assert!(
        matches!(
            e,
            SignalError::Malformed {
                target: "alertmanager",
                ..
            }
        ),
        "{e}"
    );

    // Alertmanager gone: an error, not "cleared".
    am.kill();
    let e = v
        .cleared("TestNeverFiring", &m1, None)
        .await
        .expect_err("down");
    assert!(
        matches!(
            e,
            SignalError::Unreachable {
                target: "alertmanager",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        v.health().status(),
        vec![("alertmanager", Some("unreachable")), ("prometheus", None)]
    );
    assert_eq!(queries(&metrics, "alertmanager", "error"), 1.0);
    assert!(queries(&metrics, "alertmanager", "ok") >= 6.0);
}

#[tokio::test]
async fn prometheus_down_is_unreachable() {
    // Bound and released: nothing listens there.
    let port = free_port();
    let (v, metrics) = verifier(Some(&format!("http://127.0.0.1:{port}")), None, SECS);
    let e = v
        .cleared("TestNeverFiring", &BTreeMap::new(), None)
        .await
        .expect_err("down");
    assert_eq!(e.label(), "unreachable");
    assert!(v.query_scalar("vector(1)").await.is_err());
    assert_eq!(queries(&metrics, "prometheus", "error"), 2.0);
    assert_eq!(
        v.health().status(),
        vec![("prometheus", Some("unreachable"))]
    );
}

#[tokio::test]
async fn malformed_and_slow_answers_fail_safe() {
    let none = BTreeMap::new();
    let malformed = stub(Stub::Malformed).await;
    let (v, metrics) = verifier(Some(&malformed), None, SECS);
    let e = v.cleared("X", &none, None).await.expect_err("malformed");
    assert_eq!(e.label(), "malformed");
    assert_eq!(queries(&metrics, "prometheus", "malformed"), 1.0);

    let slow = stub(Stub::Slow).await;
    let (v, metrics) = verifier(Some(&slow), None, Duration::from_millis(300));
    let started = std::time::Instant::now();
    let e = v.cleared("X", &none, None).await.expect_err("timeout");
    assert_eq!(e.label(), "timeout");
    assert!(started.elapsed() < Duration::from_secs(3));
    let e = v.query_scalar("vector(1)").await.expect_err("timeout");
    assert_eq!(e.label(), "timeout");
    assert_eq!(queries(&metrics, "prometheus", "timeout"), 2.0);
    assert_eq!(v.health().status(), vec![("prometheus", Some("timeout"))]);
}

#[derive(Clone, Copy)]
enum Stub {
    /// 200 with JSON cut off mid-way.
    Malformed,
    /// Answers only after 10 s.
    Slow,
}

/// The only mock in these tests: real Prometheus and Alertmanager never
/// send truncated JSON or stall, but a proxy or overloaded server can, and
/// remedy must then refuse to call anything cleared.
async fn stub(kind: Stub) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                // Read the request head; the body (if any) is irrelevant.
                let mut buf = vec![0u8; 8192];
                let mut seen = 0;
                while !buf[..seen].windows(4).any(|w| w == b"\r\n\r\n") && seen < buf.len() {
                    match conn.read(&mut buf[seen..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen += n,
                    }
                }
                if let Stub::Slow = kind {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                }
                let body = r#"{"status":"success","data":{"resultType":"vector","result":[{"#;
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(resp.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}")
}
