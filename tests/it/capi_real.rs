//! remedy's holds against the real Cluster API core manager, v1.14.2 (the
//! newest minor the module proxy serves) and v1.12.5, each built from its
//! Go module by `testenv/capi.sh` and run on its own release's CRDs, not a
//! stand-in: its Machine
//! controller reports what it obeys in the `Paused` condition
//! (`util/paused.EnsurePausedCondition`).
//!
//! - A Machine hold (`cluster.x-k8s.io/paused`) stops the real Machine
//!   controller, and remedy's release resumes it at once (the annotation's
//!   removal is an update of the Machine, which it watches).
//! - A Cluster hold by `/spec/paused` pauses every Machine of the Cluster,
//!   but the real Machine controller watches Clusters only for
//!   ControlPlaneInitialized: when remedy releases the Cluster, its Machines
//!   stay `Paused` until their next event or the 10-minute resync (shown
//!   here with a hold without `resume`). With `hold.resume` remedy touches
//!   them (`remedy.dev/resumed`) and they reconcile within seconds.

use crate::remediate::executor;
use crate::support::capi::{Capi, start_manager};
use crate::support::{Remedy, eventually, namespace};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use remedy::metrics::Metrics;
use remedy::model::profile::{HoldMark, HoldSpec, RESUMED_ANNOTATION, builtin};
use remedy::model::scope::CLUSTER_NAME_LABEL;
use remedy::model::view::ResourceKey;
use remedy::remediate::step::{Goal, Step};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn capi_api(client: &Client, ns: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind);
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

async fn create_cluster(api: &Api<DynamicObject>, name: &str) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {"clusterNetwork": {"serviceDomain": "cluster.local"}},
    }))
    .expect("cluster");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create cluster");
}

async fn create_machine(api: &Api<DynamicObject>, cluster: &str, name: &str) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": name, "labels": {CLUSTER_NAME_LABEL: cluster}},
        "spec": {
            "clusterName": cluster,
            "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
            "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "OpenStackMachine",
                "name": name,
            },
        },
    }))
    .expect("machine");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create machine");
}

/// The real controller's `Paused` condition: (status, message).
fn paused_condition(o: &DynamicObject) -> Option<(String, String)> {
    o.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Paused")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["message"].as_str().unwrap_or_default().to_string(),
            )
        })
}

/// How long until every one of `names` has `Paused=want`; `None` when not
/// within `secs` (the caller says why, with remedy's log).
async fn wait_paused(
    api: &Api<DynamicObject>,
    names: &[&str],
    want: &str,
    secs: u64,
) -> Option<Duration> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    loop {
        let mut all = true;
        for n in names {
            let o = api.get(n).await.ok();
            if o.as_ref()
                .and_then(paused_condition)
                .map(|c| c.0)
                .as_deref()
                != Some(want)
            {
                all = false;
            }
        }
        if all {
            return Some(start.elapsed());
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Until remedy has removed the Cluster's `spec.paused`.
async fn wait_released(clusters: &Api<DynamicObject>, name: &str, what: &str) {
    eventually(Duration::from_secs(30), what, || async {
        let c = clusters.get(name).await.ok()?;
        c.data["spec"].get("paused").is_none().then_some(())
    })
    .await;
}

fn hold_record() -> HoldMark {
    HoldMark {
        since: chrono::Utc::now(),
        reason: "breaker".into(),
        crash_count: 1,
        value: None,
    }
}

/// capi-cluster held by `/spec/paused`, as the test writes the hold itself
/// (`resume` plays no part in writing one: remedy's config below has it).
fn cluster_hold() -> HoldSpec {
    HoldSpec::field("/spec/paused")
}

fn config(ns: &str, resume: bool) -> String {
    let resume = if resume {
        format!(", resume: {{kind: Machine, label: {CLUSTER_NAME_LABEL}}}")
    } else {
        String::new()
    };
    format!(
        "namespaces: [{ns}]\ntick: 1s\nleader_election: {{enabled: false}}\n\
         breaker: {{window: 1s, cooldown: 2s}}\n\
         backoff: {{base: 1s, cap: 2s}}\n\
         budget: {{refill_per_second: 5, burst: 5}}\n\
         profiles:\n\
         - {{builtin: capi-machine, version: v1beta2}}\n\
         - {{builtin: capi-cluster, version: v1beta2, hold: {{field: /spec/paused{resume}}}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_stop_the_real_v1_14_machine_controller_and_a_cluster_release_resumes_its_machines() {
    holds_stop_the_machine_controller_and_a_cluster_release_resumes_its_machines(Capi::V1_14).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_stop_the_real_v1_12_machine_controller_and_a_cluster_release_resumes_its_machines() {
    holds_stop_the_machine_controller_and_a_cluster_release_resumes_its_machines(Capi::V1_12).await;
}

async fn holds_stop_the_machine_controller_and_a_cluster_release_resumes_its_machines(capi: Capi) {
    let cluster = capi.cluster();
    let cluster = &*cluster;
    let client = cluster.client().await;
    let ns = namespace(&client, "capi-real").await;
    let _manager = start_manager(cluster, capi, &ns, &[]).await;
    let clusters = capi_api(&client, &ns, "Cluster", "clusters");
    let machines = capi_api(&client, &ns, "Machine", "machines");
    let ex = executor(client.clone(), Arc::new(Metrics::new(100)), false);
    let mut machine_profile = builtin("capi-machine").expect("profile");
    machine_profile.version = "v1beta2".into();
    let mut cluster_profile = builtin("capi-cluster").expect("profile");
    cluster_profile.version = "v1beta2".into();
    cluster_profile.hold = Some(cluster_hold());

    // `solo`: one Machine, held by itself. `fleet`: two Machines, held by
    // their Cluster. `other`: a Cluster remedy never holds.
    for c in ["solo", "fleet", "other"] {
        create_cluster(&clusters, c).await;
    }
    create_machine(&machines, "solo", "solo-0").await;
    create_machine(&machines, "other", "other-0").await;
    wait_paused(&machines, &["solo-0", "other-0"], "False", 60)
        .await
        .expect("the real Machine controller reconciles");

    // A Machine hold stops the real controller.
    let key = |kind: &str, name: &str| ResourceKey::new(kind, &ns, name);
    let out = ex
        .run(
            &machine_profile,
            &key("Machine", "solo-0"),
            &Goal::Hold(hold_record()),
        )
        .await
        .expect("hold machine");
    assert_eq!(out.steps, vec![Step::Hold]);
    wait_paused(&machines, &["solo-0"], "True", 20)
        .await
        .expect("held: Paused");
    let solo = machines.get("solo-0").await.expect("solo-0");
    let (_, message) = paused_condition(&solo).expect("condition");
    assert!(
        message.contains("cluster.x-k8s.io/paused annotation"),
        "{message}"
    );

    // A Cluster hold by spec.paused pauses the Machines created under it.
    let out = ex
        .run(
            &cluster_profile,
            &key("Cluster", "fleet"),
            &Goal::Hold(hold_record()),
        )
        .await
        .expect("hold cluster");
    assert_eq!(out.steps, vec![Step::Hold]);
    create_machine(&machines, "fleet", "fleet-0").await;
    create_machine(&machines, "fleet", "fleet-1").await;
    wait_paused(&machines, &["fleet-0", "fleet-1"], "True", 30)
        .await
        .expect("their Cluster held: Paused");
    let fleet0 = machines.get("fleet-0").await.expect("fleet-0");
    assert!(
        paused_condition(&fleet0)
            .expect("condition")
            .1
            .contains("Cluster spec.paused is set to true"),
        "{:?}",
        paused_condition(&fleet0)
    );

    // remedy without `resume` releases both holds (a new leader serves the
    // breaker's cooldown first). The solo Machine resumes at once; the
    // fleet's stay Paused though their Cluster is not: the real Machine
    // controller is not told.
    let first = Remedy::serve(cluster, &config(&ns, false));
    first.wait_ready().await;
    let resumed_solo = wait_paused(&machines, &["solo-0"], "False", 30)
        .await
        .unwrap_or_else(|| panic!("solo-0 not resumed\n{}", first.log_tail()));
    wait_released(&clusters, "fleet", "the fleet Cluster released").await;
    let released_at = Instant::now();
    tokio::time::sleep(Duration::from_secs(15)).await;
    for n in ["fleet-0", "fleet-1"] {
        let o = machines.get(n).await.expect("machine");
        assert_eq!(
            paused_condition(&o).map(|c| c.0).as_deref(),
            Some("True"),
            "{n} still Paused {:?} after its Cluster's release without resume",
            released_at.elapsed()
        );
    }
    drop(first);

    // Held again; now remedy knows to touch the Cluster's Machines.
    ex.run(
        &cluster_profile,
        &key("Cluster", "fleet"),
        &Goal::Hold(hold_record()),
    )
    .await
    .expect("hold cluster again");
    let second = Remedy::serve(cluster, &config(&ns, true));
    second.wait_ready().await;
    wait_released(&clusters, "fleet", "the fleet Cluster released again").await;
    let resumed_fleet = wait_paused(&machines, &["fleet-0", "fleet-1"], "False", 10)
        .await
        .unwrap_or_else(|| panic!("fleet not resumed\n{}", second.log_tail()));
    eprintln!(
        "real CAPI {}: a Machine resumed {resumed_solo:?} after remedy started (cooldown 2 s); \
         a Cluster's Machines {resumed_fleet:?} after its release with resume, still paused 15 s after without",
        capi.version()
    );

    // Only the released Cluster's Machines were touched, once each.
    let annotated = |o: &DynamicObject| {
        o.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(RESUMED_ANNOTATION))
    };
    for (n, want) in [
        ("fleet-0", true),
        ("fleet-1", true),
        ("other-0", false),
        ("solo-0", false),
    ] {
        let o = machines.get(n).await.expect("machine");
        assert_eq!(annotated(&o), want, "{n}: {:?}", o.metadata.annotations);
    }
    let (_, text) = second.get("/metrics").await.expect("metrics");
    assert_eq!(
        crate::support::sample(
            &text,
            r#"remedy_actions_total{action="resume",result="success"}"#
        ),
        Some(2.0),
        "{text}"
    );
    let events = crate::support::objects::events_by_reason(&client, &ns, "Resumed").await;
    assert_eq!(
        events.keys().map(String::as_str).collect::<Vec<_>>(),
        vec!["fleet-0", "fleet-1"],
        "{events:?}"
    );
}
