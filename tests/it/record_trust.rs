//! The episode record under attack and on a bad day (#22, points 1 to 5):
//! the real `remedy serve` with leader election and the episode record, on
//! the real apiserver, with a real Prometheus (its rule on a gauge the test
//! moves) as the only source of proof. Notifications are posted to the
//! webhook as Alertmanager sends them; forged ones are written into the
//! record's ConfigMap by a client that has no webhook token.
//! 1. Holds found after the record was deleted remediate only what they
//!    hold, never the other failing objects of their kind.
//! 2. Forged inbox notices clear nothing; a forged verified episode is
//!    verified again, and nothing is done while Prometheus says firing.
//! 3. A corrupt record, or one filled with oversized scopes, stays
//!    writable: the real notifications still get through and are acted on.
//! 4. A 200 means the leader will see the notification: a follower answers
//!    503 where the leader would refuse, and a record deleted under a
//!    running leader loses nothing.
//! 5. A verified episode whose remediations wait on the backoff is not
//!    pushed out by a thousand junk scopes.

use crate::support::objects::{
    api_for, count, create_with_status, events_by_reason, failed, held, paused, sample,
};
use crate::support::procs::{CLOUD_RULES, Proc, cloud_exporter, start_prometheus_at};
use crate::support::webhook::{alert_labels, notification, post};
use crate::support::{Remedy, TestCluster, free_port, namespace};
use chrono::Utc;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use remedy::decide::episodes::Episode;
use remedy::model::profile::{
    CAPI_PAUSED, CRASH_ANNOTATION, FAILURE_TIME_ANNOTATION, HOLD_ANNOTATION, HoldMark, PAUSE_MARKER,
};
use remedy::model::scope::Scope;
use remedy::record::{DATA_KEY, MAX_BYTES, Notice, Record, Stored, VERSION};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const TOKEN: &str = "record-trust-t0ken";
const ALERT: &str = "CloudAPIDegraded";
const OSM: &str = "OpenStackMachine";
const RECORD: &str = "remedy-episodes";
const KIND_ONLY: &str = "{kind_label: kind}";
const FAST: &str = "{base: 1s, cap: 2s, jitter: 0}";
const CLEARS: &str = r#"remedy_actions_total{action="clear_failure",result="success"}"#;

/// A namespace, Prometheus evaluating `CloudAPIDegraded` (fires per kind
/// while the test's ratio is above 0.3) and the webhook's token file.
struct Rig {
    cluster: &'static TestCluster,
    client: Client,
    ns: String,
    prom_port: u16,
    ratio: Arc<AtomicU64>,
    token: std::path::PathBuf,
    _prom: Proc,
    _tmp: tempfile::TempDir,
}

impl Rig {
    async fn new(prefix: &str, ratio: f64) -> Self {
        let cluster = TestCluster::shared();
        let client = cluster.client().await;
        let ns = namespace(&client, prefix).await;
        let ratio = Arc::new(AtomicU64::new(ratio.to_bits()));
        let cloud = cloud_exporter(vec![(OSM, ratio.clone())]).await;
        let prom_port = free_port();
        let prom = start_prometheus_at(
            prom_port,
            &format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 rule_files: ['{{dir}}/rules.yml']\n\
                 scrape_configs:\n  - {{job_name: cloud, static_configs: [{{targets: ['127.0.0.1:{cloud}']}}]}}\n"
            ),
            &[("rules.yml", CLOUD_RULES)],
        )
        .await;
        let tmp = tempfile::tempdir().expect("tmp");
        let token = tmp.path().join("token");
        std::fs::write(&token, TOKEN).expect("token");
        Self {
            cluster,
            client,
            ns,
            prom_port,
            ratio,
            token,
            _prom: prom,
            _tmp: tmp,
        }
    }

    fn config(&self, namespaces: &[&str], select: &str, backoff: &str) -> String {
        format!(
            "namespaces: [{}]\nprofiles: [openstack-machine]\ntick: 250ms\n\
             leader_election: {{enabled: true, lease_name: remedy-trust, namespace: {}, lease_duration: 3s, episode_record: {RECORD}}}\n\
             backoff: {backoff}\nbudget: {{refill_per_second: 20, burst: 20}}\n\
             breaker: {{open_ratio: 1.0, close_ratio: 1.0, min_resources: 100000}}\n\
             webhook: {{token_file: {}}}\n\
             signals: {{prometheus_url: 'http://127.0.0.1:{}', timeout: 2s, settle: 1s}}\n\
             alerts: [{{alertname: {ALERT}, select: {select}}}]\n",
            namespaces.join(", "),
            self.ns,
            self.token.display(),
            self.prom_port
        )
    }

    async fn serve(&self, namespaces: &[&str], select: &str, backoff: &str) -> Remedy {
        let r = Remedy::serve(self.cluster, &self.config(namespaces, select, backoff));
        r.wait_ready().await;
        r
    }

    /// `n` failing OpenStackMachines `prefix-i` in `ns`, with `annotations`.
    async fn machines(
        &self,
        ns: &str,
        prefix: &str,
        n: usize,
        annotations: BTreeMap<String, String>,
    ) -> (Api<DynamicObject>, Vec<String>) {
        let mut api = None;
        let mut names = Vec::new();
        for i in 0..n {
            let mut o = sample("capo-openstackmachine-error.yaml");
            let name = format!("{prefix}-{i}");
            o.metadata.name = Some(name.clone());
            o.metadata.annotations = Some(annotations.clone());
            o.data["status"] = failing();
            let c = create_with_status(&self.client, o, ns).await;
            api.get_or_insert_with(|| api_for(&self.client, &c, ns));
            names.push(name);
        }
        (api.expect("at least one machine"), names)
    }

    fn set_ratio(&self, r: f64) {
        self.ratio.store(r.to_bits(), Ordering::SeqCst);
    }

    /// Waits until Prometheus has `n` firing `ALERTS` series of the alert.
    async fn until_alerts(&self, n: usize) {
        let url = format!(
            "http://127.0.0.1:{}/api/v1/query?query=ALERTS%7Balertname%3D%22{ALERT}%22%2Calertstate%3D%22firing%22%7D",
            self.prom_port
        );
        crate::support::eventually(Duration::from_secs(30), "Prometheus' ALERTS", || async {
            let v: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
            (v["data"]["result"].as_array()?.len() == n).then_some(())
        })
        .await;
    }

    fn records(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Creates the record's ConfigMap holding `text`, as anyone allowed to
    /// write it could.
    async fn write_record(&self, text: String) {
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(RECORD.into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(DATA_KEY.to_string(), text)])),
            ..Default::default()
        };
        self.records()
            .create(&PostParams::default(), &cm)
            .await
            .expect("record written");
    }

    /// The record's text as it is now.
    async fn record_text(&self) -> Option<String> {
        let cm = self.records().get_opt(RECORD).await.ok()??;
        cm.data?.get(DATA_KEY).cloned()
    }
}

/// What remedy (a previous process) wrote on a machine it held for the
/// alert.
fn held_for_alert() -> BTreeMap<String, String> {
    let hold = serde_json::to_string(&HoldMark {
        since: Utc::now(),
        reason: format!("alert:{ALERT}"),
        crash_count: 0,
        value: None,
    })
    .expect("hold record");
    BTreeMap::from([
        (CAPI_PAUSED.to_string(), PAUSE_MARKER.to_string()),
        (HOLD_ANNOTATION.to_string(), hold),
    ])
}

fn failing() -> Value {
    crate::support::objects::nova_503()
}

/// Neither failed nor paused.
fn remediated(o: &DynamicObject) -> bool {
    !failed(o) && !paused(o)
}

/// The scope the alert's `{kind_label: kind}` selector makes of `kind`.
fn kind_scope(kind: &str) -> Scope {
    Scope {
        alertname: ALERT.into(),
        namespace: None,
        kind: Some(kind.into()),
        name: None,
        cluster: None,
        match_labels: BTreeMap::new(),
        matchers: BTreeMap::from([("kind".to_string(), kind.to_string())]),
    }
}

/// A notice written into the inbox by hand, without the alert's times.
fn notice(scope: Scope, firing: bool, at: chrono::DateTime<Utc>) -> Notice {
    Notice::new(scope, firing, at, None, None)
}

fn refused(reason: &str) -> String {
    format!(r#"remedy_episodes_refused_total{{alert="{ALERT}",reason="{reason}"}}"#)
}

/// Posts until answered 200, as Alertmanager retries a 5xx; panics if it
/// takes longer than `within`. Returns how many 503s came first.
async fn deliver(remedy: &Remedy, body: &Value, within: Duration) -> u32 {
    let deadline = tokio::time::Instant::now() + within;
    let mut refused = 0;
    loop {
        match post(&remedy.url, TOKEN, body).await {
            200 => return refused,
            503 if tokio::time::Instant::now() < deadline => {
                refused += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            code => panic!(
                "webhook answered {code} after {refused} 503s\n{}",
                remedy.log_tail()
            ),
        }
    }
}

/// The real alert (kind OpenStackMachine) fires, as Alertmanager sends it;
/// waits until `n` machines of `api` are held for it.
async fn fire(remedy: &Remedy, api: &Api<DynamicObject>, n: usize) {
    let real = [alert_labels(ALERT, &[("kind", OSM)])];
    deliver(
        remedy,
        &notification("firing", &real),
        Duration::from_secs(10),
    )
    .await;
    remedy
        .until(
            Duration::from_secs(20),
            "held for the real alert",
            || async { count(api, held).await == n },
        )
        .await;
}

/// The alert stops in Prometheus and Alertmanager sends resolved; returns
/// how many 503s came before it was taken.
async fn resolve(rig: &Rig, remedy: &Remedy) -> u32 {
    rig.set_ratio(0.0);
    rig.until_alerts(0).await;
    let real = [alert_labels(ALERT, &[("kind", OSM)])];
    deliver(
        remedy,
        &notification("resolved", &real),
        Duration::from_secs(10),
    )
    .await
}

/// The episodes the replica's /status shows, as (kind matcher, episode).
async fn episodes(remedy: &Remedy) -> Vec<(String, Value)> {
    let Some((200, body)) = remedy.get("/status?limit=10000").await else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    v["episodes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    let k = e["matchers"]["kind"].as_str().unwrap_or_default();
                    (k.to_string(), e.clone())
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn is_leader(r: &Remedy) -> bool {
    let Some((200, body)) = r.get("/status").await else {
        return false;
    };
    serde_json::from_str::<Value>(&body).is_ok_and(|v| v["leader"] == json!(true))
}

/// `n` firing alerts of junk kinds `{prefix}-{i}`, from `from`.
fn junk(prefix: &str, from: usize, n: usize) -> Value {
    let kinds: Vec<String> = (from..from + n).map(|i| format!("{prefix}-{i}")).collect();
    let alerts: Vec<_> = kinds
        .iter()
        .map(|k| alert_labels(ALERT, &[("kind", k)]))
        .collect();
    notification("firing", &alerts)
}

/// 1. An alert for namespace A held A's machines; remedy was stopped and
///    its record deleted. Machines fail in B, where no alert fired. The
///    restarted remedy finds A's holds and adopts them: it remediates A's
///    (Prometheus shows the alert not firing) and never touches B's.
#[tokio::test]
async fn an_adopted_hold_remediates_what_it_holds_and_not_the_rest_of_its_kind() {
    let rig = Rig::new("adopt-a", 0.0).await;
    let other = namespace(&rig.client, "adopt-b").await;
    let (a, _) = rig.machines(&rig.ns, "held", 4, held_for_alert()).await;
    let (b, _) = rig.machines(&other, "b", 4, BTreeMap::new()).await;
    let remedy = rig.serve(&[&rig.ns, &other], KIND_ONLY, FAST).await;
    remedy
        .until(Duration::from_secs(40), "A's holds remediated", || async {
            count(&a, remediated).await == 4
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        count(&b, failed).await,
        4,
        "B's machines were cleared by A's adopted hold\n{}",
        remedy.log_tail()
    );
    assert_eq!(count(&b, held).await, 0, "B was never in an alert's scope");
    assert!(
        events_by_reason(&rig.client, &other, "FailureCleared")
            .await
            .is_empty()
    );
    assert_eq!(remedy.metric(CLEARS).await, 4.0);
}

/// 2a. Notices written into the record's inbox without the token: a firing
///     and resolved pair with a label the selector does not name, and a
///     firing one for a real scope Prometheus never saw firing, resolved
///     later. Nothing is held or cleared at any time.
#[tokio::test]
async fn forged_inbox_notices_hold_and_clear_nothing() {
    let rig = Rig::new("forged-inbox", 0.0).await;
    let (api, _) = rig.machines(&rig.ns, "osm", 6, BTreeMap::new()).await;
    let valid = kind_scope(OSM);
    let mut forged = valid.clone();
    forged.matchers.insert("zone".into(), "forged".into());
    let at = Utc::now();
    let mut record = Record::empty();
    record
        .append(&[
            notice(forged.clone(), true, at),
            notice(valid.clone(), true, at),
        ])
        .expect("append");
    record.append(&[notice(forged, false, at)]).expect("append");
    rig.write_record(record.encode().expect("encode")).await;
    let remedy = rig.serve(&[&rig.ns], KIND_ONLY, FAST).await;
    remedy
        .until(
            Duration::from_secs(20),
            "the forged scope refused",
            || async { remedy.metric(&refused("invalid_scope")).await == 2.0 },
        )
        .await;
    let untouched = || async {
        for _ in 0..20 {
            assert_eq!(count(&api, failed).await, 6, "{}", remedy.log_tail());
            assert_eq!(count(&api, paused).await, 0, "{}", remedy.log_tail());
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    // The real scope's notice waits for proof, holding nothing.
    untouched().await;
    assert!(
        episodes(&remedy)
            .await
            .iter()
            .any(|(k, e)| k == OSM && e["firing"] == json!(true) && e["fired"] == json!(false)),
        "the valid notice waits unproven"
    );
    // The forger resolves it: Prometheus never saw it fire, so it is
    // dropped, and nothing is cleared.
    crate::support::eventually(
        Duration::from_secs(10),
        "the forged resolved notice written",
        || async {
            // Read, append, write against what was read (409: again).
            let mut cm = rig.records().get(RECORD).await.ok()?;
            let text = cm.data.as_ref()?.get(DATA_KEY)?;
            let mut record = Record::decode(text).ok()?;
            record
                .append(&[notice(valid.clone(), false, Utc::now())])
                .ok()?;
            cm.data = Some(BTreeMap::from([(
                DATA_KEY.to_string(),
                record.encode().ok()?,
            )]));
            rig.records()
                .replace(RECORD, &PostParams::default(), &cm)
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    remedy
        .until(
            Duration::from_secs(20),
            "the unproven one dropped",
            || async { remedy.metric(&refused("unproven")).await == 1.0 },
        )
        .await;
    untouched().await;
    assert_eq!(remedy.metric(CLEARS).await, 0.0);
}

/// 2b. A verified episode with targets written into the record while the
///     alert fires: the leader that loads it verifies it again, does
///     nothing while Prometheus says firing, and remediates once it clears.
#[tokio::test]
async fn a_forged_verified_episode_is_verified_again_before_anything_is_done() {
    let rig = Rig::new("forged-verified", 0.6).await;
    rig.until_alerts(1).await;
    let (api, names) = rig.machines(&rig.ns, "osm", 6, BTreeMap::new()).await;
    let now = Utc::now();
    let scope = kind_scope(OSM);
    let mut episode = Episode::new(&scope, false, now - chrono::Duration::seconds(60));
    episode.fired = true;
    episode.verified_at = Some(now);
    let record = Record {
        version: VERSION,
        consumed: 0,
        last_seq: 0,
        leader: "forger".into(),
        episodes: vec![Stored {
            scope,
            episode,
            targets: Some(
                names
                    .iter()
                    .map(|n| [OSM.to_string(), rig.ns.clone(), n.clone()])
                    .collect(),
            ),
        }],
        inbox: Vec::new(),
    };
    rig.write_record(record.encode().expect("encode")).await;
    let remedy = rig.serve(&[&rig.ns], KIND_ONLY, FAST).await;
    for _ in 0..40 {
        assert_eq!(
            count(&api, failed).await,
            6,
            "cleared while the alert fires\n{}",
            remedy.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(remedy.metric(CLEARS).await, 0.0);
    // It clears in Prometheus: now it is proven, verified and acted on.
    rig.set_ratio(0.0);
    rig.until_alerts(0).await;
    remedy
        .until(
            Duration::from_secs(40),
            "remediated once cleared",
            || async { count(&api, |o| !failed(o)).await == 6 },
        )
        .await;
}

/// 3a. The record holds text that is not a record: it is replaced at once
///     (its text logged), and the webhook records deliveries again.
#[tokio::test]
async fn a_corrupt_record_is_replaced_and_deliveries_are_taken() {
    let rig = Rig::new("corrupt", 0.6).await;
    rig.until_alerts(1).await;
    let (api, _) = rig.machines(&rig.ns, "osm", 3, BTreeMap::new()).await;
    rig.write_record(r#"{"version": 1, "episodes": [oops"#.into())
        .await;
    let remedy = rig.serve(&[&rig.ns], KIND_ONLY, FAST).await;
    let corrupt = r#"remedy_episode_record_shed_total{reason="corrupt"}"#;
    remedy
        .until(Duration::from_secs(20), "the record replaced", || async {
            let valid = rig
                .record_text()
                .await
                .is_some_and(|t| Record::decode(&t).is_ok());
            valid && remedy.metric(corrupt).await >= 1.0
        })
        .await;
    let firing = notification("firing", &[alert_labels(ALERT, &[("kind", OSM)])]);
    assert_eq!(post(&remedy.url, TOKEN, &firing).await, 200);
    remedy
        .until(Duration::from_secs(20), "held for the alert", || async {
            count(&api, held).await == 3
        })
        .await;
    let log = remedy.log();
    assert!(
        log.contains("episode record is corrupt") && log.contains("oops"),
        "the old text is kept in the log\n{}",
        remedy.log_tail()
    );
    assert_eq!(remedy.get("/readyz").await.map(|r| r.0), Some(200));
}

/// 3b. Six hundred junk scopes with four 250-byte values each (about 3 KB
///     an episode, past the record's bound) arrive beside a real firing
///     alert. The leader sheds junk, the record stays under its bound, the
///     real episode stays, and its resolved notification is taken and acted
///     on.
#[tokio::test]
async fn oversized_junk_is_shed_and_the_real_alert_still_gets_through() {
    let rig = Rig::new("overgrown", 0.6).await;
    rig.until_alerts(1).await;
    let (api, _) = rig.machines(&rig.ns, "osm", 3, BTreeMap::new()).await;
    let select =
        "{kind_label: kind, namespace_label: namespace, name_label: name, cluster_label: cluster}";
    let remedy = rig.serve(&[&rig.ns], select, FAST).await;
    fire(&remedy, &api, 3).await;
    let long = |tag: &str, i: usize| format!("{tag}{i:04}{}", "x".repeat(245));
    let mut refused_503 = 0;
    for batch in 0..6 {
        let alerts: Vec<_> = (batch * 100..batch * 100 + 100)
            .map(|i| {
                let (k, n, c, s) = (long("k", i), long("n", i), long("c", i), long("s", i));
                alert_labels(
                    ALERT,
                    &[
                        ("kind", &k),
                        ("namespace", &n),
                        ("name", &c),
                        ("cluster", &s),
                    ],
                )
            })
            .collect();
        refused_503 += deliver(
            &remedy,
            &notification("firing", &alerts),
            Duration::from_secs(30),
        )
        .await;
    }
    let shed = r#"remedy_episode_record_shed_total{reason="unproven"}"#;
    remedy
        .until(Duration::from_secs(20), "junk shed", || async {
            remedy.metric(shed).await > 0.0
        })
        .await;
    let text = rig.record_text().await.expect("record");
    assert!(text.len() <= MAX_BYTES, "{} bytes", text.len());
    Record::decode(&text).expect("a valid record");
    assert!(
        episodes(&remedy)
            .await
            .iter()
            .any(|(k, e)| k == OSM && e["firing"] == json!(true)),
        "the real firing episode was kept"
    );
    assert_eq!(count(&api, held).await, 3, "no hold lost");
    // It resolves: the notification is taken within seconds and acted on.
    let waited = resolve(&rig, &remedy).await;
    remedy
        .until(Duration::from_secs(40), "remediated", || async {
            count(&api, remediated).await == 3
        })
        .await;
    eprintln!(
        "record_trust: junk answered 503 {refused_503} times before taken; resolved after {waited} 503s; shed {}",
        remedy.metric(shed).await
    );
}

/// 4a. Two replicas; Alertmanager reaches the follower. It takes a thousand
///     distinct firing scopes (every slot the leader has), then answers 503
///     for one more: every 200 reached the leader, which refused nothing.
#[tokio::test]
async fn a_follower_refuses_what_the_leader_could_not_take_and_every_200_reaches_it() {
    let rig = Rig::new("follower-full", 0.0).await;
    let cfg = rig.config(&[&rig.ns], KIND_ONLY, FAST);
    let replicas = [
        Remedy::serve(rig.cluster, &cfg),
        Remedy::serve(rig.cluster, &cfg),
    ];
    for r in &replicas {
        r.wait_ready().await;
    }
    let leader = crate::support::eventually(Duration::from_secs(20), "a leader", || async {
        for (i, r) in replicas.iter().enumerate() {
            if is_leader(r).await {
                return Some(i);
            }
        }
        None
    })
    .await;
    let (leader, follower) = (&replicas[leader], &replicas[1 - leader]);
    for batch in 0..10 {
        deliver(
            follower,
            &junk("junk", batch * 100, 100),
            Duration::from_secs(30),
        )
        .await;
    }
    leader
        .until(
            Duration::from_secs(30),
            "1000 episodes at the leader",
            || async { episodes(leader).await.len() == 1000 },
        )
        .await;
    assert_eq!(
        post(&follower.url, TOKEN, &junk("more", 0, 1)).await,
        503,
        "no slot left: refused so that Alertmanager retries"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(leader.metric(&refused("full")).await, 0.0);
    assert_eq!(episodes(leader).await.len(), 1000);
}

/// 4b. The record is deleted under a running leader that had taken three
///     notifications: the next three, numbered from 1 again, reach it.
#[tokio::test]
async fn a_record_deleted_under_a_running_leader_loses_no_notification() {
    let rig = Rig::new("deleted", 0.0).await;
    let remedy = rig.serve(&[&rig.ns], KIND_ONLY, FAST).await;
    remedy
        .until(Duration::from_secs(20), "leading", || is_leader(&remedy))
        .await;
    let kinds = |es: Vec<(String, Value)>| -> Vec<String> {
        let mut k: Vec<String> = es.into_iter().map(|(k, _)| k).collect();
        k.sort();
        k
    };
    for i in 0..3 {
        deliver(&remedy, &junk("before", i, 1), Duration::from_secs(10)).await;
    }
    remedy
        .until(Duration::from_secs(20), "three episodes", || async {
            episodes(&remedy).await.len() == 3
        })
        .await;
    rig.records()
        .delete(RECORD, &DeleteParams::default())
        .await
        .expect("delete the record");
    for i in 0..3 {
        deliver(&remedy, &junk("after", i, 1), Duration::from_secs(10)).await;
    }
    remedy
        .until(
            Duration::from_secs(20),
            "the notifications after the delete",
            || async {
                kinds(episodes(&remedy).await)
                    .iter()
                    .filter(|k| k.starts_with("after-"))
                    .count()
                    == 3
            },
        )
        .await;
    assert_eq!(
        kinds(episodes(&remedy).await),
        [
            "after-0", "after-1", "after-2", "before-0", "before-1", "before-2"
        ]
    );
}

/// 5. A verified episode whose five remediations wait on a 45 s backoff;
///    a thousand junk firing scopes then fill every other slot. The episode
///    stays, the next scope is refused with a 503, and the five machines
///    are remediated when their backoff ends.
#[tokio::test]
async fn a_verified_episode_waiting_on_the_backoff_is_not_pushed_out() {
    let rig = Rig::new("waiting", 0.6).await;
    rig.until_alerts(1).await;
    // Failed just now, once before: each waits 45 s from now.
    let failed_now = BTreeMap::from([
        (CRASH_ANNOTATION.to_string(), "1".to_string()),
        (FAILURE_TIME_ANNOTATION.to_string(), Utc::now().to_rfc3339()),
    ]);
    let (api, _) = rig.machines(&rig.ns, "osm", 5, failed_now).await;
    let remedy = rig
        .serve(&[&rig.ns], KIND_ONLY, "{base: 45s, cap: 45s, jitter: 0}")
        .await;
    fire(&remedy, &api, 5).await;
    resolve(&rig, &remedy).await;
    remedy
        .until(Duration::from_secs(20), "verified", || async {
            episodes(&remedy)
                .await
                .iter()
                .any(|(k, e)| k == OSM && !e["verified_at"].is_null())
        })
        .await;
    // 999 junk scopes fill the other slots; the thousandth finds none.
    for batch in 0..10 {
        let n = if batch == 9 { 99 } else { 100 };
        deliver(
            &remedy,
            &junk("junk", batch * 100, n),
            Duration::from_secs(30),
        )
        .await;
    }
    remedy
        .until(Duration::from_secs(30), "1000 episodes", || async {
            episodes(&remedy).await.len() == 1000
        })
        .await;
    assert_eq!(
        post(&remedy.url, TOKEN, &junk("late", 0, 1)).await,
        503,
        "every slot is firing or has remediations to do"
    );
    // Still waiting on the backoff: otherwise this proved nothing.
    assert_eq!(
        count(&api, held).await,
        5,
        "remediated before the junk arrived: the backoff is too short for this test"
    );
    assert!(
        episodes(&remedy)
            .await
            .iter()
            .any(|(k, e)| k == OSM && !e["verified_at"].is_null()),
        "the verified episode was pushed out"
    );
    remedy
        .until(
            Duration::from_secs(60),
            "remediated after the backoff",
            || async { count(&api, remediated).await == 5 },
        )
        .await;
    assert_eq!(remedy.metric(CLEARS).await, 5.0);
}
