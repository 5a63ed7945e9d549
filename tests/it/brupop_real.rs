//! The real brupop controller (bottlerocket-update-operator at 2fcbeb12,
//! `testenv/brupop.sh`), run with in-cluster config, upstream's ClusterRole,
//! ServiceAccount token and BottlerocketShadow CRD (`support/brupop.rs`),
//! next to `remedy serve` with the built-in bottlerocket-shadow profile.
//! The test plays brupop's agent: it writes the shadows' status.
//!
//! - remedy's `remedy_resource_backoff_delay_seconds` for a shadow is when
//!   the controller proceeds by itself: for crash_count 0..5 the controller
//!   patches the spec to StagedAndPerformedUpdate at failure time + that
//!   delay (failure times are set in the past, so each moment is 20-50 s
//!   away instead of up to 33 minutes).
//! - after a verified resolution (real Prometheus and Alertmanager) remedy
//!   resets crash_count and clears the failure timestamp, and the controller
//!   proceeds within seconds instead of 33 minutes later.
//! - a shadow in ErrorReset, whose spec the controller re-patches every ~2 s,
//!   is reset all the same: no conflict makes remedy give up.
//! - a reset the agent overwrites at once with the status it fetched before
//!   (it rebuilds the whole status every 5 s): what remedy does about it.
//!
//! Skipped unless the controller is built; `REMEDY_REQUIRE_BRUPOP=1`
//! (`scripts/test`) makes a missing controller a failure.

use crate::support::brupop::{self, Brupop, NAMESPACE, agent_writes, idle_status, shadows};
use crate::support::procs::{
    CLOUD_RULES, Proc, alerting_prometheus, cloud_exporter, remedy_webhook_route,
    start_alertmanager_at, start_prometheus_at,
};
use crate::support::{Remedy, TestCluster, eventually, free_port, sample};
use chrono::{DateTime, Utc};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const KIND: &str = "BottlerocketShadow";

/// When the controller moved the shadow's spec on from Idle: the
/// `state_transition_timestamp` it writes with the new state (its clock).
fn proceeded_at(o: &DynamicObject) -> Option<DateTime<Utc>> {
    let spec = &o.data["spec"];
    if spec["state"].as_str().unwrap_or("Idle") == "Idle" {
        return None;
    }
    spec["state_transition_timestamp"]
        .as_str()?
        .parse::<DateTime<Utc>>()
        .ok()
}

fn delay_series(name: &str) -> String {
    format!(
        r#"remedy_resource_backoff_delay_seconds{{namespace="{NAMESPACE}",kind="{KIND}",name="{name}"}}"#
    )
}

fn secs(d: chrono::TimeDelta) -> f64 {
    d.num_milliseconds() as f64 / 1000.0
}

fn base_config() -> String {
    format!(
        "namespaces: [{NAMESPACE}]\nprofiles: [bottlerocket-shadow]\ntick: 500ms\n\
         leader_election: {{enabled: false}}\n"
    )
}

/// Lists the shadows until every one in `names` has proceeded, deleting each
/// as soon as it has (its agent is gone) so the controller, which moves one
/// node at a time, goes on with the next. Name → (when, its crash_count then).
async fn proceeds(
    api: &Api<DynamicObject>,
    ctl: &mut Brupop,
    names: &[String],
    timeout: Duration,
) -> BTreeMap<String, (DateTime<Utc>, i64)> {
    let mut seen = BTreeMap::new();
    let deadline = Instant::now() + timeout;
    while seen.len() < names.len() {
        ctl.check();
        assert!(
            Instant::now() < deadline,
            "the controller proceeded on only {seen:?}\n{}",
            ctl.log_tail()
        );
        for o in api.list(&ListParams::default()).await.expect("list").items {
            let name = o.metadata.name.clone().unwrap_or_default();
            if !names.contains(&name) {
                continue;
            }
            if let Some(at) = proceeded_at(&o) {
                let count = o.data["status"]["crash_count"].as_i64().unwrap_or(-1);
                seen.insert(name.clone(), (at, count));
                api.delete(&name, &DeleteParams::default())
                    .await
                    .expect("delete proceeded shadow");
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exported_backoff_is_when_the_real_controller_proceeds() {
    if !brupop::available() {
        return;
    }
    let cluster = TestCluster::start();
    let client = cluster.client().await;
    let mut ctl = Brupop::start(&cluster, "controller-node").await;
    let remedy = Remedy::serve(&cluster, &base_config());
    remedy.wait_ready().await;
    let api = shadows(&client);

    // The controller's own node, up to date: with no shadow at all the
    // controller sleeps 10 s between looks.
    let own = brupop::node(&client, "controller-node").await;
    let mut current = idle_status(0, None);
    current["current_version"] = json!("1.20.3");
    brupop::shadow(&client, &own, json!({"state": "Idle"}), current).await;

    // Shadow n (crash_count n, its failure time set as the agent does) failed
    // so long ago that the controller may proceed 20 + 6(n-1) s from now;
    // one at a time, as it updates them.
    let t0 = Utc::now();
    let mut failed_at = BTreeMap::new();
    for n in 1..6u32 {
        let node = brupop::node(&client, &format!("node-{n}")).await;
        let wait = chrono::TimeDelta::seconds((1i64 << n) * 60 + 60);
        let ts = t0 - wait + chrono::TimeDelta::seconds(20 + 6 * i64::from(n - 1));
        brupop::shadow(
            &client,
            &node,
            json!({"state": "Idle"}),
            idle_status(n, Some(ts)),
        )
        .await;
        failed_at.insert(format!("brs-node-{n}"), (n, ts));
    }

    // What remedy exports for each, read before any is due.
    let mut delay = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    let text = loop {
        let (_, text) = remedy.get("/metrics").await.expect("metrics");
        let all = failed_at
            .keys()
            .all(|name| sample(&text, &delay_series(name)).is_some());
        if all || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let per_shadow: Vec<&str> = text.lines().filter(|l| l.contains("brs-node-")).collect();
    for (name, (n, _)) in &failed_at {
        let d = sample(&text, &delay_series(name)).unwrap_or_else(|| {
            panic!(
                "crash_count {n}: remedy exports no backoff delay for {name}:\n{}",
                per_shadow.join("\n")
            )
        });
        delay.insert(name.clone(), d);
    }

    let names: Vec<String> = failed_at.keys().cloned().collect();
    let seen = proceeds(&api, &mut ctl, &names, Duration::from_secs(120)).await;
    let mut worst = 0.0f64;
    for (name, (n, ts)) in &failed_at {
        let d = delay[name];
        let expected = *ts + chrono::TimeDelta::milliseconds((d * 1000.0) as i64);
        let (at, count) = seen[name];
        let late = secs(at - expected);
        eprintln!(
            "brupop_real: crash_count {n}: remedy exports {d} s ({} min); the controller proceeded {late:.1} s after failure + that delay ({:.1} s after the failure)",
            d / 60.0,
            secs(at - *ts),
        );
        assert_eq!(
            count,
            i64::from(*n),
            "{name}: remedy must not touch the counter"
        );
        assert!(
            (-5.0..=5.0).contains(&late),
            "{name}: crash_count {n}, exported {d} s, the controller proceeded {late} s off"
        );
        worst = worst.max(late.abs());
    }

    // crash_count 0: never crashed, no failure time (the agent sets both
    // together and resets both together). remedy exports no delay (no
    // wait) and the controller proceeds at once.
    let node = brupop::node(&client, "node-0").await;
    let created = Utc::now();
    brupop::shadow(
        &client,
        &node,
        json!({"state": "Idle"}),
        idle_status(0, None),
    )
    .await;
    let name = "brs-node-0".to_string();
    let seen = proceeds(
        &api,
        &mut ctl,
        std::slice::from_ref(&name),
        Duration::from_secs(30),
    )
    .await;
    let (at, _) = seen[&name];
    let lag = secs(at - created);
    let (_, text) = remedy.get("/metrics").await.expect("metrics");
    let d0 = sample(&text, &delay_series(&name));
    eprintln!(
        "brupop_real: crash_count 0 (no failure time): remedy exports {d0:?}; the controller proceeded {lag:.1} s after the shadow was created"
    );
    assert_eq!(d0, None, "no failure, no backoff delay");
    assert!(lag <= 5.0, "{lag}");
    worst = worst.max(lag);
    eprintln!("brupop_real: worst offset {worst:.1} s (tolerance 5 s)");

    for action in ["reset_counters", "clear_failure"] {
        assert_eq!(
            sample(
                &text,
                &format!(r#"remedy_actions_total{{action="{action}",result="success"}}"#)
            ),
            Some(0.0),
            "no verified resolution, no write"
        );
    }
}

/// remedy with Prometheus and Alertmanager: the CloudAPIDegraded alert on
/// `cloud_api_error_ratio{kind="BottlerocketShadow"}`, which the test moves.
struct Stack {
    remedy: Remedy,
    ratio: Arc<AtomicU64>,
    _am: Proc,
    _prom: Proc,
    _tmp: tempfile::TempDir,
}

impl Stack {
    async fn start(cluster: &TestCluster) -> Self {
        let ratio = Arc::new(AtomicU64::new(0.0f64.to_bits()));
        let cloud = cloud_exporter(vec![(KIND, ratio.clone())]).await;
        let (prom_port, am_port) = (free_port(), free_port());
        let tmp = tempfile::tempdir().expect("tmp");
        let token = tmp.path().join("token");
        std::fs::write(&token, "s3cret-token\n").expect("token");
        let token = token.display().to_string();
        let config = format!(
            "{}budget: {{refill_per_second: 2, burst: 1}}\n\
             breaker: {{open_ratio: 1.0, close_ratio: 1.0, min_resources: 100000}}\n\
             webhook: {{token_file: {token}}}\n\
             signals: {{prometheus_url: 'http://127.0.0.1:{prom_port}', alertmanager_url: 'http://127.0.0.1:{am_port}', timeout: 2s, settle: 2s}}\n\
             alerts: [{{alertname: CloudAPIDegraded, select: {{kind_label: kind}}}}]\n",
            base_config()
        );
        let remedy = Remedy::serve(cluster, &config);
        remedy.wait_ready().await;
        let port = remedy.url.rsplit(':').next().expect("port").to_string();
        let am = start_alertmanager_at(am_port, &remedy_webhook_route(&port, &token)).await;
        let cloud = cloud.to_string();
        let prom = start_prometheus_at(
            prom_port,
            &alerting_prometheus(am_port, &[("cloud", &cloud)]),
            &[("rules.yml", CLOUD_RULES)],
        )
        .await;
        Self {
            remedy,
            ratio,
            _am: am,
            _prom: prom,
            _tmp: tmp,
        }
    }

    async fn firing(&self) -> Option<bool> {
        let (code, body) = self.remedy.get("/status").await?;
        if code != 200 {
            return None;
        }
        let v: Value = serde_json::from_str(&body).ok()?;
        v["episodes"]
            .as_array()?
            .iter()
            .find(|e| e["matchers"]["kind"] == KIND)
            .and_then(|e| e["firing"].as_bool())
    }

    /// The outage alert fires, then resolves: remedy verifies and remediates
    /// from then on (settle 2 s).
    async fn outage_and_recovery(&self) -> Instant {
        self.ratio.store(0.6f64.to_bits(), Ordering::SeqCst);
        eventually(
            Duration::from_secs(30),
            "alert firing in remedy",
            || async { (self.firing().await == Some(true)).then_some(()) },
        )
        .await;
        self.ratio.store(0.0f64.to_bits(), Ordering::SeqCst);
        eventually(Duration::from_secs(30), "resolved in remedy", || async {
            (self.firing().await == Some(false)).then_some(())
        })
        .await;
        Instant::now()
    }

    async fn metric(&self, series: &str) -> f64 {
        self.remedy.metric(series).await
    }

    async fn actions(&self) -> String {
        let (_, text) = self.remedy.get("/metrics").await.expect("metrics");
        text.lines()
            .filter(|l| l.starts_with("remedy_actions_total{") && !l.ends_with(" 0"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn is_reset(o: &DynamicObject) -> bool {
    o.data["status"]["crash_count"] == json!(0)
        && o.data["status"]["state_transition_failure_timestamp"].is_null()
}

/// Polls the shadow until `f` holds; returns it and when it was seen.
async fn until_shadow(
    api: &Api<DynamicObject>,
    name: &str,
    timeout: Duration,
    what: &str,
    ctl: &mut Brupop,
    f: impl Fn(&DynamicObject) -> bool,
) -> (DynamicObject, DateTime<Utc>) {
    let deadline = Instant::now() + timeout;
    loop {
        ctl.check();
        if let Ok(o) = api.get(name).await
            && f(&o)
        {
            return (o, Utc::now());
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn events(client: &Client, name: &str) -> Vec<String> {
    let ev: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), NAMESPACE);
    ev.list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| {
            format!(
                "{} x{}: {}",
                e.reason.unwrap_or_default(),
                e.count.unwrap_or(1),
                e.message.unwrap_or_default()
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_reset_makes_the_real_controller_proceed_at_once() {
    if !brupop::available() {
        return;
    }
    let cluster = TestCluster::start();
    let client = cluster.client().await;
    let mut ctl = Brupop::start(&cluster, "controller-node").await;
    let stack = Stack::start(&cluster).await;
    let api = shadows(&client);

    // Failed for the 5th time just now: the controller would wait 33 min.
    let node = brupop::node(&client, "node-a").await;
    let failed = Utc::now();
    brupop::shadow(
        &client,
        &node,
        json!({"state": "Idle"}),
        idle_status(5, Some(failed)),
    )
    .await;
    let name = "brs-node-a";
    let exported = eventually(Duration::from_secs(15), "exported delay", || async {
        let v = stack.metric(&delay_series(name)).await;
        (v > 0.0).then_some(v)
    })
    .await;
    assert_eq!(exported, 33.0 * 60.0);

    let resolved = stack.outage_and_recovery().await;
    let (_, reset_at) = until_shadow(
        &api,
        name,
        Duration::from_secs(60),
        "remedy's reset",
        &mut ctl,
        is_reset,
    )
    .await;
    let reset_after = resolved.elapsed();
    let (o, _) = until_shadow(
        &api,
        name,
        Duration::from_secs(20),
        "the controller proceeding",
        &mut ctl,
        |o| proceeded_at(o).is_some(),
    )
    .await;
    let proceeded = proceeded_at(&o).expect("proceeded");
    let lag = secs(proceeded - reset_at);
    eprintln!(
        "brupop_real: reset {reset_after:?} after remedy saw the resolution; the controller proceeded {lag:.1} s after the reset (instead of {:.0} s after the failure)",
        exported
    );
    assert!(
        lag <= 5.0,
        "the controller proceeded {lag} s after the reset"
    );
    assert_eq!(o.data["spec"]["state"], "StagedAndPerformedUpdate");
    assert_eq!(o.data["spec"]["version"], "1.20.3");
    assert_eq!(
        stack
            .metric(r#"remedy_actions_total{action="reset_counters",result="success"}"#)
            .await,
        1.0,
        "{}",
        stack.actions().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_reset_shadow_the_controller_keeps_patching_is_reset() {
    if !brupop::available() {
        return;
    }
    let cluster = TestCluster::start();
    let client = cluster.client().await;
    let mut ctl = Brupop::start(&cluster, "controller-node").await;
    let stack = Stack::start(&cluster).await;
    let api = shadows(&client);

    // The agent crashed during the update: ErrorReset, 3rd failure.
    let node = brupop::node(&client, "node-e").await;
    let name = "brs-node-e";
    let mut status = idle_status(3, Some(Utc::now()));
    status["current_state"] = json!("ErrorReset");
    brupop::shadow(
        &client,
        &node,
        json!({"state": "StagedAndPerformedUpdate", "version": "1.20.3",
               "state_transition_timestamp": Utc::now().to_rfc3339()}),
        status,
    )
    .await;
    // The controller sends it back to Idle and keeps re-patching its spec
    // (a new timestamp each time) while the status stays ErrorReset.
    let (first, _) = until_shadow(
        &api,
        name,
        Duration::from_secs(30),
        "the controller setting spec Idle",
        &mut ctl,
        |o| o.data["spec"]["state"] == "Idle",
    )
    .await;
    let first_rv = first.metadata.resource_version.clone();
    let (_, _) = until_shadow(
        &api,
        name,
        Duration::from_secs(30),
        "the controller re-patching the spec",
        &mut ctl,
        |o| o.data["spec"]["state"] == "Idle" && o.metadata.resource_version != first_rv,
    )
    .await;

    stack.outage_and_recovery().await;
    let (o, _) = until_shadow(
        &api,
        name,
        Duration::from_secs(60),
        "remedy's reset",
        &mut ctl,
        is_reset,
    )
    .await;
    assert_eq!(o.data["status"]["current_state"], "ErrorReset");
    // A few more of the controller's re-patches: nothing more to do.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let o = api.get(name).await.expect("shadow");
    assert!(is_reset(&o), "{:?}", o.data["status"]);
    let m = |a: &'static str, r: &'static str| {
        let s = &stack;
        async move {
            s.metric(&format!(
                r#"remedy_actions_total{{action="{a}",result="{r}"}}"#
            ))
            .await
        }
    };
    let (ok, conflicts, gave_up, errors) = (
        m("reset_counters", "success").await,
        m("reset_counters", "conflict").await + m("clear_failure", "conflict").await,
        m("reset_counters", "gave_up").await + m("remediate", "gave_up").await,
        m("reset_counters", "error").await,
    );
    eprintln!(
        "brupop_real: ErrorReset shadow reset while the controller re-patched it: {ok} reset(s), {conflicts} conflict(s), {gave_up} gave up\n{}",
        stack.actions().await
    );
    assert_eq!(ok, 1.0);
    assert_eq!(gave_up, 0.0, "{}", stack.actions().await);
    assert_eq!(errors, 0.0, "{}", stack.actions().await);
    assert!(ctl.log().contains("Discovered that agent had crashed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_overwritten_by_a_stale_agent_write_is_reset_again_and_reported() {
    if !brupop::available() {
        return;
    }
    let cluster = TestCluster::start();
    let client = cluster.client().await;
    let mut ctl = Brupop::start(&cluster, "controller-node").await;
    let stack = Stack::start(&cluster).await;
    let api = shadows(&client);

    let node = brupop::node(&client, "node-s").await;
    let name = "brs-node-s";
    let old = idle_status(5, Some(Utc::now()));
    brupop::shadow(&client, &node, json!({"state": "Idle"}), old.clone()).await;
    eventually(Duration::from_secs(15), "exported delay", || async {
        (stack.metric(&delay_series(name)).await > 0.0).then_some(())
    })
    .await;

    stack.outage_and_recovery().await;
    // The agent fetched its status before the reset and writes it back
    // right after (it rebuilds the whole status every 5 s).
    let (_, reset_at) = until_shadow(
        &api,
        name,
        Duration::from_secs(60),
        "remedy's reset",
        &mut ctl,
        is_reset,
    )
    .await;
    let back = agent_writes(&api, name, old.clone()).await;
    let stale_after = Utc::now() - reset_at;
    let controller_won = proceeded_at(&back).is_some();
    let before = stack.actions().await;

    // Watch for 30 s: does remedy reset it again, or say it was undone?
    let mut resets_again = None;
    let mut proceeded = proceeded_at(&back);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        ctl.check();
        let o = api.get(name).await.expect("shadow");
        if resets_again.is_none() && is_reset(&o) {
            resets_again = Some(start.elapsed());
        }
        if proceeded.is_none() {
            proceeded = proceeded_at(&o);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let o = api.get(name).await.expect("shadow");
    let after = stack.actions().await;
    let evs = events(&client, name).await;
    let (_, text) = stack.remedy.get("/metrics").await.expect("metrics");
    let suspicious: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            let l = l.to_lowercase();
            ["overwrit", "undone", "revert", "stale", "regress", "rewrit"]
                .iter()
                .any(|w| l.contains(w))
        })
        .collect();
    eprintln!(
        "brupop_real: stale agent write {:.3} s after remedy's reset (controller proceeded before it: {controller_won})\n\
         status 30 s later: {}\nreset again after: {resets_again:?}; controller proceeded: {proceeded:?}\n\
         actions right after the stale write:\n{before}\nactions 30 s later:\n{after}\n\
         events on the shadow:\n{}\nmetrics naming an overwrite: {suspicious:?}",
        secs(stale_after),
        o.data["status"],
        evs.join("\n"),
    );
    // remedy notices the stale write (the old crash count and failure time
    // back in a write not its own, after its reset was seen), resets again,
    // counts it and says so in a Warning Event. Before it did, the shadow
    // kept crash_count 5 and its failure time, and the controller waited
    // the full 33 minutes: no second reset_counters write, no Event, no
    // metric.
    if !controller_won {
        let again = resets_again.unwrap_or_else(|| {
            panic!(
                "remedy did not reset the shadow again in 30 s\n{}",
                o.data["status"]
            )
        });
        assert!(
            again < Duration::from_secs(10),
            "reset again only after {again:?}"
        );
        let reapplied = stack
            .metric(
                r#"remedy_resets_overwritten_total{kind="BottlerocketShadow",result="reapplied"}"#,
            )
            .await;
        assert_eq!(reapplied, 1.0, "{suspicious:?}");
        assert!(
            evs.iter().any(|e| e.starts_with("ResetOverwritten")),
            "no ResetOverwritten Event\n{evs:?}"
        );
        assert!(
            proceeded.is_some(),
            "the controller did not proceed after the second reset"
        );
        assert_ne!(before, after, "a second reset was written");
    }
}
