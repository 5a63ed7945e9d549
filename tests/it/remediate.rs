//! Remediation against the real apiserver: status merge patches with null on
//! the status subresource, resourceVersion preconditions (409), human pauses,
//! Events.

use crate::support::objects::{api_for, create_with_status, sample};
use crate::support::{TestCluster, namespace};
use chrono::Utc;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use remedy::daemon::execute::{Executor, WriteLimiter};
use remedy::daemon::leader::Leadership;
use remedy::metrics::Metrics;
use remedy::model::profile::{
    CAPI_PAUSED, CAPI_SKIP_REMEDIATION, HOLD_ANNOTATION, HoldMark, builtin,
};
use remedy::model::view::ResourceKey;
use remedy::remediate::step::{self, Done, Goal, Step};
use serde_json::json;
use std::sync::Arc;

pub fn executor(client: Client, metrics: Arc<Metrics>, dry_run: bool) -> Executor {
    Executor::new(
        client,
        metrics,
        Arc::new(WriteLimiter::new(200.0, 200)),
        Leadership::fixed(true),
        dry_run,
    )
}

fn record() -> HoldMark {
    HoldMark {
        since: Utc::now(),
        reason: "breaker".into(),
        crash_count: 1,
        value: None,
    }
}

fn annotations(o: &DynamicObject) -> std::collections::BTreeMap<String, String> {
    o.metadata.annotations.clone().unwrap_or_default()
}

#[tokio::test]
async fn hold_then_remediate_a_v1beta2_machine_end_to_end() {
    let client = TestCluster::shared().client().await;
    let ns = namespace(&client, "remediate").await;
    let m = create_with_status(&client, sample("capi-machine-v1beta2-failed.yaml"), &ns).await;
    let api = api_for(&client, &m, &ns);
    let name = m.metadata.name.clone().unwrap_or_default();
    let key = ResourceKey::new("Machine", &ns, &name);
    // Read in the version it was written in: with the CRDs' None conversion
    // a v1beta1 read prunes status.deprecated (see testenv/README.md).
    let mut p = builtin("capi-machine").unwrap();
    p.version = "v1beta2".into();
    let metrics = Arc::new(Metrics::new(100));
    let ex = executor(client.clone(), metrics.clone(), false);

    let out = ex.run(&p, &key, &Goal::Hold(record())).await.unwrap();
    assert_eq!(out.steps, vec![Step::Hold]);
    let held = api.get(&name).await.unwrap();
    assert_eq!(
        annotations(&held).get(CAPI_PAUSED).map(String::as_str),
        Some(remedy::model::profile::PAUSE_MARKER)
    );
    assert!(annotations(&held).contains_key(HOLD_ANNOTATION));

    let out = ex.run(&p, &key, &Goal::Remediate).await.unwrap();
    assert_eq!(
        out.steps,
        vec![
            Step::SetSkipRemediation,
            Step::ClearFailure,
            Step::RemoveSkipRemediation,
            Step::Unpause
        ]
    );
    let after = api.get(&name).await.unwrap();
    let a = annotations(&after);
    assert!(
        !a.contains_key(CAPI_PAUSED)
            && !a.contains_key(HOLD_ANNOTATION)
            && !a.contains_key(CAPI_SKIP_REMEDIATION),
        "{a:?}"
    );
    let status = &after.data["status"];
    assert!(
        status["deprecated"]["v1beta1"]
            .get("failureReason")
            .is_none(),
        "{status}"
    );
    assert!(
        status["deprecated"]["v1beta1"]
            .get("failureMessage")
            .is_none(),
        "{status}"
    );
    assert_eq!(
        status["phase"], "Failed",
        "fields remedy does not own are untouched"
    );
    assert!(
        status.get("failureReason").is_none(),
        "no empty parents or new fields created"
    );

    // Idempotent: the same goal again writes nothing.
    let rv = after.metadata.resource_version.clone();
    let again = ex.run(&p, &key, &Goal::Remediate).await.unwrap();
    assert!(again.steps.is_empty());
    assert_eq!(api.get(&name).await.unwrap().metadata.resource_version, rv);

    // Every write left an Event on the object.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str()))
        .filter_map(|e| e.reason)
        .collect();
    for want in [
        "Held",
        "SkipRemediationSet",
        "FailureCleared",
        "SkipRemediationRemoved",
        "Unpaused",
    ] {
        assert!(
            reasons.iter().any(|r| r == want),
            "missing Event {want}: {reasons:?}"
        );
    }
    let text = metrics.encode().unwrap();
    assert!(
        text.contains(r#"remedy_actions_total{action="clear_failure",result="success"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn a_human_pause_is_never_removed_and_nothing_is_written() {
    let client = TestCluster::shared().client().await;
    let ns = namespace(&client, "human").await;
    let mut obj = sample("capo-openstackmachine-error.yaml");
    obj.metadata.annotations = Some([(CAPI_PAUSED.to_string(), "".to_string())].into());
    let m = create_with_status(&client, obj, &ns).await;
    let api = api_for(&client, &m, &ns);
    let name = m.metadata.name.clone().unwrap_or_default();
    let key = ResourceKey::new("OpenStackMachine", &ns, &name);
    let p = builtin("openstack-machine").unwrap();
    let ex = executor(client.clone(), Arc::new(Metrics::new(10)), false);
    for goal in [Goal::Remediate, Goal::Release, Goal::Hold(record())] {
        let out = ex.run(&p, &key, &goal).await.unwrap();
        assert_eq!((out.steps.len(), out.done), (0, Done::ForeignPause));
    }
    let after = api.get(&name).await.unwrap();
    assert_eq!(after.metadata.resource_version, m.metadata.resource_version);
    assert_eq!(
        annotations(&after).get(CAPI_PAUSED).map(String::as_str),
        Some("")
    );
}

#[tokio::test]
async fn stale_resource_version_gets_409_and_the_executor_replans_under_churn() {
    let client = TestCluster::shared().client().await;
    let ns = namespace(&client, "conflict").await;
    let m = create_with_status(&client, sample("capz-azuremachine-failed.yaml"), &ns).await;
    let api = api_for(&client, &m, &ns);
    let name = m.metadata.name.clone().unwrap_or_default();
    let p = builtin("azure-machine").unwrap();

    // The precondition is real: a patch planned from an old object fails.
    let stale = api.get(&name).await.unwrap();
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"bump": "1"}}})),
    )
    .await
    .unwrap();
    let body = step::patch(&p, &stale, &Goal::Hold(record()), Step::Hold);
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 409),
        other => panic!("expected 409, got {other:?}"),
    }
    let status_body = step::patch(&p, &stale, &Goal::Remediate, Step::ClearFailure);
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status_body))
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 409),
        other => panic!("expected 409 on the status subresource, got {other:?}"),
    }

    // Someone else keeps writing labels while remedy holds and remediates:
    // remedy's writes land and never overwrite theirs.
    let churn_api = api.clone();
    let churn_name = name.clone();
    let churn = tokio::spawn(async move {
        for i in 0..60 {
            let _ = churn_api
                .patch(
                    &churn_name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {"churn": i.to_string()}}})),
                )
                .await;
            tokio::time::sleep(std::time::Duration::from_millis(15)).await;
        }
    });
    let metrics = Arc::new(Metrics::new(10));
    let ex = executor(client.clone(), metrics.clone(), false);
    let key = ResourceKey::new("AzureMachine", &ns, &name);
    ex.run(&p, &key, &Goal::Hold(record())).await.unwrap();
    let out = ex.run(&p, &key, &Goal::Remediate).await.unwrap();
    churn.await.unwrap();
    assert_eq!(out.done, Done::Complete);
    let after = api.get(&name).await.unwrap();
    assert!(after.data["status"].get("failureReason").is_none());
    assert!(!annotations(&after).contains_key(CAPI_PAUSED));
    assert_eq!(
        after
            .metadata
            .labels
            .unwrap_or_default()
            .get("churn")
            .map(String::as_str),
        Some("59")
    );
}

#[tokio::test]
async fn dry_run_reports_the_plan_and_writes_nothing() {
    let client = TestCluster::shared().client().await;
    let ns = namespace(&client, "dryrun").await;
    let b = create_with_status(
        &client,
        sample("brupop-bottlerocketshadow-crashed.yaml"),
        &ns,
    )
    .await;
    let api = api_for(&client, &b, &ns);
    let name = b.metadata.name.clone().unwrap_or_default();
    let metrics = Arc::new(Metrics::new(10));
    let ex = executor(client.clone(), metrics.clone(), true);
    let p = builtin("bottlerocket-shadow").unwrap();
    let out = ex
        .run(
            &p,
            &ResourceKey::new("BottlerocketShadow", &ns, &name),
            &Goal::Remediate,
        )
        .await
        .unwrap();
    assert_eq!(out.steps, vec![Step::ClearFailure, Step::ResetCounters]);
    let after = api.get(&name).await.unwrap();
    assert_eq!(after.metadata.resource_version, b.metadata.resource_version);
    assert_eq!(after.data["status"]["crash_count"], 3);
    let text = metrics.encode().unwrap();
    assert!(
        text.contains(r#"remedy_actions_total{action="reset_counters",result="dry_run"} 1"#),
        "{text}"
    );
}

/// Types of an object's `status.conditions`, in order.
fn condition_types(o: &DynamicObject) -> Vec<String> {
    o.data["status"]["conditions"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| c["type"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// A JSON patch planned from `stale` (a read that no longer matches what
/// is stored) is refused with 422 and writes nothing.
async fn stale_conditions_patch_is_refused(
    api: &Api<DynamicObject>,
    p: &remedy::model::profile::Profile,
    stale: &DynamicObject,
) {
    let name = stale.metadata.name.clone().unwrap_or_default();
    let before = api.get(&name).await.unwrap();
    let err = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::<()>::Json(step::conditions_patch(p, stale)),
        )
        .await
        .expect_err("a failed test");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err}"
    );
    let after = api.get(&name).await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
}

/// #38.12 on CAPO v0.14.7's CRD (v1beta1): remediation clears the failure
/// fields CAPO stops on and keeps its conditions; only the Ready summary
/// (False/InstanceStateError) goes, by a JSON patch the apiserver checks.
#[tokio::test]
async fn a_v1beta1_openstack_machine_keeps_its_conditions_through_remediation() {
    let client = TestCluster::shared().client().await;
    let ns = namespace(&client, "osm-conditions").await;
    let mut o = sample("capo-openstackmachine-error.yaml");
    o.data["status"]["conditions"]
        .as_array_mut()
        .expect("conditions")
        .push(json!({"type": "NetworkReady", "status": "True",
                     "lastTransitionTime": "2025-03-14T09:10:00Z"}));
    let m = create_with_status(&client, o, &ns).await;
    let api = api_for(&client, &m, &ns);
    let name = m.metadata.name.clone().unwrap_or_default();
    assert_eq!(
        condition_types(&m),
        ["Ready", "InstanceReady", "NetworkReady"]
    );
    let p = builtin("openstack-machine").unwrap();

    // The guard: a read whose Ready is not where the apiserver has it.
    let mut swapped = m.clone();
    swapped.data["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .swap(0, 1);
    stale_conditions_patch_is_refused(&api, &p, &swapped).await;

    let key = ResourceKey::new("OpenStackMachine", &ns, &name);
    let ex = executor(client.clone(), Arc::new(Metrics::new(10)), false);
    assert_eq!(
        ex.run(&p, &key, &Goal::Hold(record())).await.unwrap().steps,
        vec![Step::Hold]
    );
    let out = ex.run(&p, &key, &Goal::Remediate).await.unwrap();
    assert_eq!(
        out.steps,
        vec![Step::ClearFailure, Step::ClearConditions, Step::Unpause]
    );
    let after = api.get(&name).await.unwrap();
    let s = &after.data["status"];
    assert!(s.get("failureReason").is_none(), "{s}");
    assert!(s.get("failureMessage").is_none(), "{s}");
    // Ready and InstanceReady, both False/InstanceStateError, go (CAPO
    // v0.15 derives Ready from InstanceReady); the rest stays as written.
    assert_eq!(condition_types(&after), ["NetworkReady"]);
    assert_eq!(
        s["conditions"][0], m.data["status"]["conditions"][2],
        "kept as CAPO wrote it"
    );
    assert_eq!(s["instanceState"], "ERROR");
    assert!(!annotations(&after).contains_key(CAPI_PAUSED));
}

/// #38.12 on CAPO v0.15.0-beta.0's CRDs (v1beta2 stored): the release
/// removes Ready False/InstanceStateError, the condition v0.15 stops on,
/// and InstanceReady False/InstanceStateError, from which it derives Ready
/// again, and keeps every other; a plan from a stale read is refused (422).
#[tokio::test]
async fn a_v1beta2_openstack_machine_loses_only_the_condition_capo_stops_on() {
    let cluster = TestCluster::start_with_crds(crate::support::CrdSet::CapoV0_15, &[]);
    let client = cluster.client().await;
    let ns = namespace(&client, "osm-v1beta2").await;
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": "2026-12-03T01:00:00Z", "observedGeneration": 1})
    };
    let o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "OpenStackMachine",
        "metadata": {"name": "m1", "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {"flavor": {"filter": {"name": "m1.small"}},
                 "image": {"id": "5d5e1b2c-2b76-4a4f-8d0f-2c1b9c4e7a11"}},
        "status": {"instanceState": "ERROR", "conditions": [
            condition("InstanceReady", "False", "InstanceStateError", "got 503 instead"),
            condition("Ready", "False", "InstanceStateError", "got 503 instead"),
            condition("Paused", "False", "NotPaused", ""),
        ]},
    }))
    .unwrap();
    let m = create_with_status(&client, o, &ns).await;
    let api = api_for(&client, &m, &ns);
    assert_eq!(condition_types(&m), ["InstanceReady", "Ready", "Paused"]);
    let mut p = builtin("openstack-machine").unwrap();
    p.version = "v1beta2".into();

    // The guard: the condition changed since the read (same version).
    let mut changed = m.clone();
    changed.data["status"]["conditions"][1]["message"] = json!("got 502 instead");
    stale_conditions_patch_is_refused(&api, &p, &changed).await;

    let key = ResourceKey::new("OpenStackMachine", &ns, "m1");
    let ex = executor(client.clone(), Arc::new(Metrics::new(10)), false);
    assert_eq!(
        ex.run(&p, &key, &Goal::Hold(record())).await.unwrap().steps,
        vec![Step::Hold]
    );
    let held = api.get("m1").await.unwrap();
    assert_eq!(condition_types(&held), ["InstanceReady", "Ready", "Paused"]);
    let out = ex.run(&p, &key, &Goal::Release).await.unwrap();
    assert_eq!(out.steps, vec![Step::ClearConditions, Step::Unpause]);
    let after = api.get("m1").await.unwrap();
    assert_eq!(condition_types(&after), ["Paused"]);
    let cs = &after.data["status"]["conditions"];
    assert_eq!(cs[0], m.data["status"]["conditions"][2]);
    assert_eq!(after.data["status"]["instanceState"], "ERROR");
    assert!(!annotations(&after).contains_key(CAPI_PAUSED));
}
