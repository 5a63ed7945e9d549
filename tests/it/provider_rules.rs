//! The breaker against a controller that follows CAPO's rules (skip paused,
//! skip failed, heal after an update): an outage fails 24 machines once,
//! remedy holds each once, and once the outage is over its releases really
//! make the controller retry (failure fields cleared, guarded), the stale
//! condition left until the controller reconciles is not taken for a new
//! failure, and every failure is counted once.
//!
//! Both runs use the openstack-machine built-in, which keeps the
//! conditions the stand-in writes (it removes only CAPO v0.15's Ready
//! False/InstanceStateError, see src/model/profile/builtins.rs): the
//! stale-signal guard is what is tested, as for any kind whose conditions
//! remedy may not clear, and with the conditions cleared the control would
//! have nothing stale to misread.

use crate::support::capo::StandInCapo;
use crate::support::objects::{api_for, create_with_status, sample};
use crate::support::{Remedy, TestCluster, eventually, namespace};
use kube::api::{Api, DynamicObject, ListParams};
use remedy::model::profile::HOLD_ANNOTATION;
use std::sync::atomic::Ordering;
use std::time::Duration;

const MACHINES: usize = 24;

async fn list(api: &Api<DynamicObject>) -> Vec<DynamicObject> {
    api.list(&ListParams::default()).await.expect("list").items
}

struct Run {
    holds: f64,
    releases: f64,
    transient_errors: f64,
    calls: u64,
    all_ready: bool,
    log: String,
}

/// Runs the outage with `controller_grace` (0s turns the stale-signal guard
/// off, to show the run can fail).
async fn outage(prefix: &str, grace: &str) -> Run {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, prefix).await;
    let mut base = sample("capo-openstackmachine-error.yaml");
    base.data.as_object_mut().map(|d| d.remove("status"));
    let mut api = None;
    for i in 0..MACHINES {
        let mut o = base.clone();
        o.metadata.name = Some(format!("osm-{i:02}"));
        let created = create_with_status(&client, o, &ns).await;
        api.get_or_insert_with(|| api_for(&client, &created, &ns));
    }
    let api = api.expect("api");
    // The controller works 1.5 s behind: remedy sees each state it leaves.
    let capo = StandInCapo::start(api.clone(), Duration::from_millis(1500));

    let mut profile = remedy::model::profile::builtin("openstack-machine").expect("built-in");
    profile.name = "openstack-machine-conditions-kept".into();
    // The stand-in never writes the one condition the built-in removes.
    profile.remediation.clear_conditions.clear();
    let profile = serde_json::to_string(&profile).expect("profile");
    let config = format!(
        "namespaces: [{ns}]\nprofiles: [{profile}]\ntick: 200ms\nleader_election: {{enabled: false}}\n\
         controller_grace: {grace}\n\
         backoff: {{base: 1s, cap: 4s, quiet_window: 100000h}}\n\
         budget: {{refill_per_second: 8, burst: 8}}\n\
         breaker: {{open_ratio: 0.3, close_ratio: 0.1, min_resources: 5, window: 1s, cooldown: 3s}}\n"
    );
    let remedy = Remedy::serve(cluster, &config);
    remedy.wait_ready().await;

    // The cloud is down: every create fails once, remedy holds them all.
    eventually(Duration::from_secs(60), "every machine held", || async {
        let n = list(&api)
            .await
            .iter()
            .filter(|o| {
                o.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(HOLD_ANNOTATION))
            })
            .count();
        (n == MACHINES).then_some(())
    })
    .await;
    assert_eq!(
        capo.calls.load(Ordering::SeqCst),
        MACHINES as u64,
        "one failed create each"
    );
    capo.cloud_up.store(true, Ordering::SeqCst);

    // Ready machines, or 60 s (the control run may never get there).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut all_ready = false;
    let hold_series = r#"remedy_actions_total{action="hold",result="success"}"#;
    while tokio::time::Instant::now() < deadline {
        let items = list(&api).await;
        if items.iter().all(|o| o.data["status"]["ready"] == true) {
            all_ready = true;
            break;
        }
        let (_, text) = remedy.get("/metrics").await.expect("metrics");
        if crate::support::sample(&text, hold_series).unwrap_or(0.0) > MACHINES as f64 {
            break; // held again: the run has failed already
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Settle: nothing may be held again after the machines are ready.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, text) = remedy.get("/metrics").await.expect("metrics");
    let v = |s: &str| crate::support::sample(&text, s).unwrap_or(0.0);
    Run {
        holds: v(hold_series),
        releases: v(r#"remedy_actions_total{action="release",result="success"}"#),
        transient_errors: v(&format!(
            r#"remedy_transient_errors_total{{namespace="{ns}",kind="OpenStackMachine",reason="server_error"}}"#
        )),
        calls: capo.calls.load(Ordering::SeqCst),
        all_ready,
        log: format!("{text}\n{}", remedy.log_tail()),
    }
}

#[tokio::test]
async fn releases_make_a_capo_like_controller_retry_and_nothing_is_held_or_counted_twice() {
    let r = outage("capo-rules", "5m").await;
    assert!(
        r.all_ready,
        "every machine healed after its release\n{}",
        r.log
    );
    assert_eq!(
        r.holds, MACHINES as f64,
        "each machine held once\n{}",
        r.log
    );
    assert_eq!(r.releases, MACHINES as f64, "{}", r.log);
    assert_eq!(
        r.transient_errors, MACHINES as f64,
        "one failure each, counted once\n{}",
        r.log
    );
    assert_eq!(
        r.calls,
        2 * MACHINES as u64,
        "one failed create and one retry each"
    );
}

#[tokio::test]
async fn without_the_stale_signal_guard_remediated_machines_are_held_again() {
    // Control: the same outage with the guard off. The condition CAPO left
    // (InstanceReady=False, 503) is read as a new failure of every released
    // machine before the controller reconciles, and the breaker holds again.
    let r = outage("capo-nograce", "0s").await;
    assert!(
        r.holds > MACHINES as f64,
        "the guard is what prevents re-holds: {} holds\n{}",
        r.holds,
        r.log
    );
}

#[tokio::test]
async fn capo_v0_14_unexpectedly_deleted_servers_are_a_not_found_burst() {
    // CAPO v0.13+ (controllers/openstackmachine_controller.go) writes this
    // when servers vanish, e.g. after a credentials change points the
    // provider at another project: a burst trips the breaker as not_found.
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "capo-deleted").await;
    let mut api = None;
    for i in 0..6 {
        let mut o = sample("capo-openstackmachine-error.yaml");
        o.metadata.name = Some(format!("osm-{i}"));
        o.data["status"] = serde_json::json!({"ready": false, "instanceState": "DELETED",
            "failureReason": "UpdateError", "failureMessage": "The server was unexpectedly deleted",
            "conditions": [{"type": "InstanceReady", "status": "False", "severity": "Error",
                            "reason": "InstanceDeleted", "message": "The server was unexpectedly deleted",
                            "lastTransitionTime": "2026-12-03T00:00:00Z"}]});
        let c = create_with_status(&client, o, &ns).await;
        api.get_or_insert_with(|| api_for(&client, &c, &ns));
    }
    let config = format!(
        "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 200ms\nleader_election: {{enabled: false}}\n\
         breaker: {{open_ratio: 0.5, close_ratio: 0.1, min_resources: 5, window: 1s, cooldown: 3s}}\n"
    );
    let remedy = Remedy::serve(cluster, &config);
    remedy.wait_ready().await;
    let not_found = format!(
        r#"remedy_terminal_errors_total{{namespace="{ns}",kind="OpenStackMachine",reason="not_found"}}"#
    );
    eventually(Duration::from_secs(20), "a not-found burst", || async {
        let (_, text) = remedy.get("/metrics").await?;
        let v = |s: &str| crate::support::sample(&text, s).unwrap_or(0.0);
        (v(&not_found) == 6.0
            && v(r#"remedy_outage_breaker_open{scope="cluster",domain="cluster"}"#) == 1.0)
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn capa_describe_errors_in_an_unknown_instance_ready_condition_open_the_breaker() {
    // CAPA v2.13 (controllers/awsmachine_controller.go findInstance) reports
    // a failed DescribeInstances only as InstanceReady=Unknown, reason
    // InstanceNotFound, and requeues: no failure fields. An EC2 API outage
    // must still be seen, counted once per machine, and held.
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "capa-describe").await;
    let condition = |message: &str| {
        serde_json::json!({"ready": false, "instanceState": "running",
            "conditions": [{"type": "InstanceReady", "status": "Unknown",
                            "reason": "InstanceNotFound", "message": message,
                            "lastTransitionTime": "2026-12-03T00:00:00Z"}]})
    };
    let throttled = "failed to query AWSMachine instance by tags: failed to describe instances by tags: \
        operation error EC2: DescribeInstances, exceeded maximum number of attempts, 3, https response \
        error StatusCode: 503, RequestID: 0c1d, api error RequestLimitExceeded: Request limit exceeded.";
    let mut api = None;
    for i in 0..6 {
        let mut o = sample("capa-awsmachine-terminated.yaml");
        o.metadata.name = Some(format!("awsm-{i}"));
        o.data["status"] = condition(match i {
            0 => throttled,
            _ => "failed to describe instance by id",
        });
        let c = create_with_status(&client, o, &ns).await;
        api.get_or_insert_with(|| api_for(&client, &c, &ns));
    }
    let api = api.expect("api");
    let config = format!(
        "namespaces: [{ns}]\nprofiles: [aws-machine]\ntick: 200ms\nleader_election: {{enabled: false}}\n\
         breaker: {{open_ratio: 0.5, close_ratio: 0.1, min_resources: 5, window: 1s, cooldown: 1h}}\n"
    );
    let remedy = Remedy::serve(cluster, &config);
    remedy.wait_ready().await;
    let errors = |reason: &str| {
        format!(
            r#"remedy_transient_errors_total{{namespace="{ns}",kind="AWSMachine",reason="{reason}"}}"#
        )
    };
    eventually(Duration::from_secs(20), "every machine held", || async {
        let held = list(&api)
            .await
            .iter()
            .filter(|o| {
                o.metadata.annotations.as_ref().is_some_and(|a| {
                    a.contains_key(HOLD_ANNOTATION) && a.contains_key("cluster.x-k8s.io/paused")
                })
            })
            .count();
        (held == 6).then_some(())
    })
    .await;
    let (_, text) = remedy.get("/metrics").await.expect("metrics");
    let v = |s: &str| crate::support::sample(&text, s).unwrap_or(0.0);
    assert_eq!(v(&errors("describe_failed")), 5.0, "{text}");
    assert_eq!(v(&errors("throttled")), 1.0, "{text}");
    assert_eq!(
        v(r#"remedy_outage_breaker_open{scope="cluster",domain="cluster"}"#),
        1.0
    );
}
