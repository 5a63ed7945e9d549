//! Rotating the webhook token Secret under a running `remedy serve`: the new
//! token is accepted within one reload period, the old one for one more
//! period (an Alertmanager whose Secret copy lags is not cut off, since a 401
//! is not retried), then refused.

use crate::support::{Remedy, TestCluster, eventually, sample};
use std::path::Path;
use std::time::{Duration, Instant};

const RELOAD: Duration = Duration::from_secs(2);

/// As kubelet updates a projected Secret: a new file renamed into place.
fn write_token(path: &Path, token: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{token}\n")).expect("write token");
    std::fs::rename(&tmp, path).expect("rename token");
}

async fn post(url: &str, token: &str) -> u16 {
    let body = serde_json::json!({
        "version": "4", "status": "firing", "groupKey": "{}:{alertname=\"Other\"}",
        "receiver": "remedy", "truncatedAlerts": 0,
        "alerts": [{"status": "firing", "labels": {"alertname": "Other"},
                    "startsAt": "2026-12-02T10:00:00Z", "fingerprint": "c4f7d1a3b2e6f890"}]
    });
    reqwest::Client::new()
        .post(format!("{url}/webhook/alertmanager"))
        .bearer_auth(token)
        .json(&body)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("webhook answers")
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_rotated_token_is_followed_and_the_old_one_expires_after_one_period() {
    let cluster = TestCluster::shared();
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    write_token(&token_file, "old-t0ken");
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "profiles: [bottlerocket-shadow]\nleader_election: {{enabled: false}}\nreload_interval: {}s\nwebhook: {{token_file: {}}}\n",
            RELOAD.as_secs(),
            token_file.display()
        ),
    );
    remedy.wait_ready().await;
    let url = remedy.url.clone();
    assert_eq!(post(&url, "old-t0ken").await, 200);
    assert_eq!(post(&url, "new-t0ken").await, 401);

    write_token(&token_file, "new-t0ken");
    let written = Instant::now();
    eventually(RELOAD * 2, "the new token is accepted", || async {
        (post(&url, "new-t0ken").await == 200).then_some(())
    })
    .await;
    let accepted = Instant::now();
    println!(
        "new token accepted {:?} after the write",
        accepted - written
    );
    assert_eq!(
        post(&url, "old-t0ken").await,
        200,
        "old one within the period"
    );
    eventually(
        RELOAD + Duration::from_secs(1),
        "the old token expires",
        || async { (post(&url, "old-t0ken").await == 401).then_some(()) },
    )
    .await;
    println!(
        "old token refused {:?} after the new one was accepted",
        accepted.elapsed()
    );
    assert_eq!(post(&url, "new-t0ken").await, 200);

    let (_, text) = remedy.get("/metrics").await.expect("metrics");
    assert_eq!(
        sample(
            &text,
            r#"remedy_webhook_token_reloads_total{result="reloaded"}"#
        ),
        Some(1.0),
        "{}",
        remedy.log_tail()
    );
    assert!(
        !std::fs::read_to_string(&remedy.log)
            .expect("log")
            .contains("t0ken"),
        "tokens never reach the log"
    );
}
