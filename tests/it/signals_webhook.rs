//! The Alertmanager webhook over real HTTP: the router served on a loopback
//! port, driven by reqwest and by a real Alertmanager (0.3x; 0.25 in
//! scripts/test's second run).

use crate::support::procs::{push_alerts, start_alertmanager};
use remedy::metrics::Metrics;
use remedy::signals::{AlertEvent, AlertStatus, Dedupe, WebhookState, router};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

pub(crate) const TOKEN: &str = "t0ken-for-tests";
const MAX_BODY: usize = 64 * 1024;

/// remedy's webhook router on a loopback port (shared with utf8_labels.rs).
pub(crate) struct Server {
    url: String,
    pub(crate) rx: mpsc::Receiver<AlertEvent>,
    metrics: Arc<Metrics>,
}

impl Server {
    async fn start(queue: usize) -> Self {
        Self::start_on(
            tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind"),
            queue,
        )
    }

    pub(crate) fn start_on(listener: tokio::net::TcpListener, queue: usize) -> Self {
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = mpsc::channel(queue);
        let metrics = Arc::new(Metrics::new(10));
        let state = WebhookState::new(
            Arc::from(TOKEN.as_bytes()),
            MAX_BODY,
            ["MachineStuck".to_string(), "RemedyE2E".to_string()],
            tx,
            Arc::new(Mutex::new(Dedupe::new(1000))),
            metrics.clone(),
        );
        let app = router(state);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url: format!("http://{addr}/webhook/alertmanager"),
            rx,
            metrics,
        }
    }

    async fn post(&self, token: Option<&str>, body: impl Into<reqwest::Body>) -> (u16, String) {
        let mut req = reqwest::Client::new()
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.expect("request");
        let status = r.status().as_u16();
        (status, r.text().await.unwrap_or_default())
    }

    /// `remedy_webhook_notifications_total` for one label pair (0 if absent).
    pub(crate) fn count(&self, status: &str, result: &str) -> f64 {
        let text = self.metrics.encode().expect("encode");
        let series = format!(
            r#"remedy_webhook_notifications_total{{status="{status}",result="{result}"}} "#
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .map(|v| v.parse().expect("number"))
            .unwrap_or(0.0)
    }

    fn no_event(&mut self) {
        assert!(self.rx.try_recv().is_err(), "no event expected");
    }

    async fn event(&mut self) -> AlertEvent {
        tokio::time::timeout(Duration::from_secs(5), self.rx.recv())
            .await
            .expect("event in time")
            .expect("channel open")
    }
}

fn notification(fingerprint: &str, alertname: &str, status: &str, starts_at: &str) -> String {
    json!({
        "receiver": "remedy",
        "status": status,
        "alerts": [{
            "status": status,
            "labels": {"alertname": alertname, "namespace": "capi", "name": "m-1"},
            "annotations": {"summary": "stuck"},
            "startsAt": starts_at,
            "endsAt": if status == "resolved" { "2024-05-01T10:05:00Z" } else { "0001-01-01T00:00:00Z" },
            "generatorURL": "http://prometheus/graph",
            "fingerprint": fingerprint
        }],
        "groupLabels": {"alertname": alertname},
        "commonLabels": {"alertname": alertname},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "version": "4",
        "groupKey": format!("{{}}:{{alertname=\"{alertname}\"}}"),
        "truncatedAlerts": 0
    })
    .to_string()
}

const T0: &str = "2024-05-01T10:00:00Z";

#[tokio::test]
async fn refuses_missing_or_wrong_token() {
    let mut s = Server::start(8).await;
    let body = notification("aaaa", "MachineStuck", "firing", T0);
    assert_eq!(s.post(None, body.clone()).await.0, 401);
    let (code, text) = s.post(Some("wrong"), body.clone()).await;
    assert_eq!(code, 401);
    assert!(text.contains("bearer token"), "{text}");
    assert_eq!(s.post(Some(&format!("{TOKEN}x")), body).await.0, 401);
    s.no_event();
    assert_eq!(s.count("invalid", "unauthorized"), 3.0);
}

#[tokio::test]
async fn refuses_oversized_bodies_declared_or_streamed() {
    let mut s = Server::start(8).await;
    let big = format!(r#"{{"version":"4","pad":"{}"}}"#, "x".repeat(MAX_BODY));
    let (code, text) = s.post(Some(TOKEN), big.clone()).await;
    assert_eq!(code, 413, "{text}");
    // Chunked, without Content-Length: the limit applies while reading. Raw
    // TCP because reqwest is built without its streaming-body feature.
    let addr = s
        .url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let mut conn = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let head = format!(
        "POST /webhook/alertmanager HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).await.expect("head");
    for chunk in big.as_bytes().chunks(4096) {
        let frame = [format!("{:x}\r\n", chunk.len()).as_bytes(), chunk, b"\r\n"].concat();
        // The server may answer and close before all is sent.
        if conn.write_all(&frame).await.is_err() {
            break;
        }
    }
    let _ = conn.write_all(b"0\r\n\r\n").await;
    let mut answer = vec![0u8; 1024];
    let n = conn.read(&mut answer).await.expect("answer");
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    s.no_event();
    assert_eq!(s.count("invalid", "too_large"), 2.0);
}

#[tokio::test]
async fn refuses_wrong_content_type() {
    let mut s = Server::start(8).await;
    let r = reqwest::Client::new()
        .post(&s.url)
        .bearer_auth(TOKEN)
        .header("content-type", "text/plain")
        .body(notification("aaaa", "MachineStuck", "firing", T0))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 415);
    s.no_event();
    assert_eq!(s.count("invalid", "rejected"), 1.0);
}

#[tokio::test]
async fn refuses_malformed_deep_and_invalid_payloads() {
    let mut s = Server::start(8).await;
    let deep = format!("{}{}", "[".repeat(30_000), "]".repeat(30_000));
    let cases = [
        ("{\"version\":", "malformed JSON"),
        (deep.as_str(), "invalid payload"),
        (
            r#"{"version":"4","alerts":[{"labels":{"a":[[[[[[[[]]]]]]]]}}]}"#,
            "invalid payload",
        ),
        (
            &notification("aaaa", "MachineStuck", "firing", T0).replace(r#""4""#, r#""3""#),
            "unsupported version",
        ),
        (
            &notification("", "MachineStuck", "firing", T0),
            "fingerprint",
        ),
        (
            &notification("aaaa", "MachineStuck", "pending", T0),
            "unknown variant `pending`",
        ),
        (
            &notification("aaaa", "MachineStuck", "firing", "yesterday"),
            "startsAt: not RFC 3339",
        ),
    ];
    for (body, reason) in cases {
        let (code, text) = s.post(Some(TOKEN), body.to_string()).await;
        assert_eq!(code, 400, "{text}");
        assert!(text.contains(reason), "{reason:?} not in {text:?}");
        assert!(text.len() < 400, "reason is short: {text}");
    }
    s.no_event();
    assert_eq!(s.count("invalid", "rejected"), 7.0);
}

#[tokio::test]
async fn accepts_once_and_dedupes_repeats_and_late_arrivals() {
    let mut s = Server::start(8).await;
    let firing = notification("c4f7d1a3b2e6f890", "MachineStuck", "firing", T0);
    let (code, text) = s.post(Some(TOKEN), firing.clone()).await;
    assert_eq!(code, 200, "{text}");
    let ev = s.event().await;
    assert_eq!(ev.fingerprint, "c4f7d1a3b2e6f890");
    assert_eq!(ev.alertname, "MachineStuck");
    assert_eq!(ev.status, AlertStatus::Firing);
    assert_eq!(ev.labels.get("name").map(String::as_str), Some("m-1"));
    assert_eq!(ev.starts_at.to_rfc3339(), "2024-05-01T10:00:00+00:00");
    assert_eq!(ev.ends_at, None);
    assert_eq!(ev.group_key, r#"{}:{alertname="MachineStuck"}"#);

    // Alertmanager's re-send every group_interval: acknowledged, not re-emitted.
    assert_eq!(s.post(Some(TOKEN), firing.clone()).await.0, 200);
    s.no_event();

    let resolved = notification("c4f7d1a3b2e6f890", "MachineStuck", "resolved", T0);
    assert_eq!(s.post(Some(TOKEN), resolved).await.0, 200);
    let ev = s.event().await;
    assert_eq!(ev.status, AlertStatus::Resolved);
    assert!(ev.ends_at.is_some());

    // A retried firing overtaken by its resolved: stale, dropped.
    assert_eq!(s.post(Some(TOKEN), firing).await.0, 200);
    s.no_event();

    // A new episode of the same alert is forwarded.
    let again = notification(
        "c4f7d1a3b2e6f890",
        "MachineStuck",
        "firing",
        "2024-05-01T11:00:00Z",
    );
    assert_eq!(s.post(Some(TOKEN), again).await.0, 200);
    assert_eq!(s.event().await.status, AlertStatus::Firing);

    assert_eq!(s.count("firing", "accepted"), 2.0);
    assert_eq!(s.count("resolved", "accepted"), 1.0);
    assert_eq!(s.count("firing", "duplicate"), 2.0);
}

#[tokio::test]
async fn acknowledges_unconfigured_alerts_without_forwarding() {
    let mut s = Server::start(8).await;
    let body = notification("bbbb", "SomethingElse", "firing", T0);
    let (code, text) = s.post(Some(TOKEN), body).await;
    assert_eq!(code, 200);
    assert!(text.contains("ignored 1"), "{text}");
    s.no_event();
    assert_eq!(s.count("firing", "ignored"), 1.0);
}

#[tokio::test]
async fn full_queue_answers_503_and_the_retry_is_accepted() {
    let mut s = Server::start(1).await;
    let first = notification("aaaa", "MachineStuck", "firing", T0);
    let second = notification("bbbb", "MachineStuck", "firing", T0);
    assert_eq!(s.post(Some(TOKEN), first).await.0, 200);
    // Queue (capacity 1) still holds the first event.
    let (code, text) = s.post(Some(TOKEN), second.clone()).await;
    assert_eq!(code, 503, "{text}");
    assert_eq!(s.count("firing", "overloaded"), 1.0);
    assert_eq!(s.event().await.fingerprint, "aaaa");
    s.no_event();
    // Alertmanager retries the 5xx: not lost, and emitted exactly once.
    assert_eq!(s.post(Some(TOKEN), second.clone()).await.0, 200);
    assert_eq!(s.event().await.fingerprint, "bbbb");
    assert_eq!(s.post(Some(TOKEN), second).await.0, 200);
    s.no_event();
}

/// Real Alertmanager 0.25 delivering to the webhook with a bearer token from
/// `credentials_file`. A short repeat_interval makes it re-send the unchanged
/// group, which must be acknowledged but emitted once.
#[tokio::test]
async fn real_alertmanager_delivers_once_per_state() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let mut s = Server::start_on(listener, 8);
    let token_dir = tempfile::tempdir().expect("tempdir");
    let token_file = token_dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token");
    let config = format!(
        r#"
route:
  receiver: remedy
  group_by: ['alertname']
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 2s
receivers:
  - name: remedy
    webhook_configs:
      - url: http://127.0.0.1:{port}/webhook/alertmanager
        send_resolved: true
        http_config:
          authorization:
            type: Bearer
            credentials_file: {}
"#,
        token_file.display()
    );
    let am = start_alertmanager(&config).await;
    let labels = json!({"alertname": "RemedyE2E", "namespace": "capi", "name": "m-9"});
    let starts = chrono::Utc::now() - chrono::Duration::seconds(30);
    push_alerts(
        &am.base,
        json!([{"labels": labels, "startsAt": starts.to_rfc3339(), "generatorURL": "http://x/"}]),
    )
    .await;

    let ev = tokio::time::timeout(Duration::from_secs(30), s.rx.recv())
        .await
        .expect("Alertmanager delivered in time")
        .expect("channel open");
    assert_eq!(ev.alertname, "RemedyE2E");
    assert_eq!(ev.status, AlertStatus::Firing);
    assert_eq!(ev.fingerprint.len(), 16, "Alertmanager fingerprint");
    assert_eq!(ev.labels.get("name").map(String::as_str), Some("m-9"));
    assert!(ev.group_key.contains("RemedyE2E"), "{}", ev.group_key);

    // Wait for at least one repeat, which must not be emitted again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while s.count("firing", "duplicate") < 1.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no repeat from Alertmanager"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s.no_event();

    // Resolve it: exactly one resolved event for the same fingerprint.
    push_alerts(
        &am.base,
        json!([{"labels": labels, "startsAt": starts.to_rfc3339(),
                "endsAt": (chrono::Utc::now() - chrono::Duration::seconds(1)).to_rfc3339()}]),
    )
    .await;
    let resolved = tokio::time::timeout(Duration::from_secs(30), s.rx.recv())
        .await
        .expect("resolved delivered in time")
        .expect("channel open");
    assert_eq!(resolved.status, AlertStatus::Resolved);
    assert_eq!(resolved.fingerprint, ev.fingerprint);
    assert_eq!(resolved.starts_at, ev.starts_at);
    assert!(resolved.ends_at.is_some());
    s.no_event();
    assert_eq!(s.count("invalid", "unauthorized"), 0.0);
    assert_eq!(s.count("invalid", "rejected"), 0.0);
}
