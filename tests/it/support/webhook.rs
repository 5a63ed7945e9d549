//! Alertmanager notifications as remedy's webhook receives them (payload
//! v4, bearer token), posted straight to a replica.

use serde_json::{Value, json};
use std::collections::BTreeMap;

/// A v4 notification of `alerts` (label sets, each with `alertname`), all
/// with `status`, grouped by the first alert's name.
pub fn notification(status: &str, alerts: &[BTreeMap<&str, String>]) -> Value {
    let alertname = alerts
        .first()
        .and_then(|l| l.get("alertname").cloned())
        .unwrap_or_default();
    let alerts: Vec<Value> = alerts
        .iter()
        .map(|labels| {
            // Alertmanager's fingerprint is a hash of the label set.
            let mut h = std::hash::DefaultHasher::new();
            std::hash::Hash::hash(labels, &mut h);
            let fingerprint = format!("{:016x}", std::hash::Hasher::finish(&h));
            json!({"status": status, "labels": labels, "annotations": {},
                   "startsAt": "2026-12-03T00:00:00Z",
                   "endsAt": if status == "resolved" { "2026-12-03T00:05:00Z" } else { "0001-01-01T00:00:00Z" },
                   "generatorURL": "http://prometheus/graph", "fingerprint": fingerprint})
        })
        .collect();
    json!({"receiver": "remedy", "status": status, "alerts": alerts,
           "groupLabels": {"alertname": alertname}, "commonLabels": {"alertname": alertname},
           "commonAnnotations": {}, "externalURL": "http://alertmanager:9093", "version": "4",
           "groupKey": format!("{{}}:{{alertname=\"{alertname}\"}}"), "truncatedAlerts": 0})
}

/// Label set `alertname` plus `labels`.
pub fn alert_labels(
    alertname: &str,
    labels: &[(&'static str, &str)],
) -> BTreeMap<&'static str, String> {
    let mut l = BTreeMap::from([("alertname", alertname.to_string())]);
    for (k, v) in labels {
        l.insert(*k, v.to_string());
    }
    l
}

/// Posts `body` to the replica at `url` with `token`; the status code.
pub async fn post(url: &str, token: &str, body: &Value) -> u16 {
    reqwest::Client::new()
        .post(format!("{url}/webhook/alertmanager"))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .expect("post")
        .status()
        .as_u16()
}
