//! The ValidatingAdmissionPolicy in `deploy/components/admission-policy` on
//! the real apiserver: remedy's ServiceAccount may write only what remedy
//! owns, remedy's own executor still reaches every goal, and other users
//! are not affected.
//!
//! A private cluster: the policy applies cluster-wide to the ServiceAccount,
//! and the test first shows that RBAC alone lets the same writes through.

use crate::remediate::executor;
use crate::support::objects::{api_for, apply_manifest, create_with_status, sample, set_status};
use crate::support::{TestCluster, eventually, namespace, repo};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use remedy::metrics::Metrics;
use remedy::model::profile::{HoldMark, HoldSpec, Profile, builtin};
use remedy::model::view::ResourceKey;
use remedy::remediate::step::{Goal, Step};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const SA: &str = "system:serviceaccount:remedy-system:remedy";

/// Server-side applies every object of the committed manifest files.
async fn apply_files(client: &Client, files: &[&str]) {
    let discovery = kube::Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    for file in files {
        let text = std::fs::read_to_string(repo().join(file)).expect("manifest");
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(doc).expect("yaml");
            if value.is_null() {
                continue;
            }
            let obj: DynamicObject = serde_json::from_value(value).expect("object");
            apply_manifest(client, &discovery, obj, Some("remedy-system"), false)
                .await
                .unwrap_or_else(|e| panic!("apply {file}: {e}"));
        }
    }
}

/// HTTP status and message of a merge patch (status subresource if `status`).
async fn merge(api: &Api<DynamicObject>, name: &str, status: bool, body: Value) -> (u16, String) {
    let pp = PatchParams::default();
    let r = if status {
        api.patch_status(name, &pp, &Patch::Merge(&body)).await
    } else {
        api.patch(name, &pp, &Patch::Merge(&body)).await
    };
    match r {
        Ok(_) => (200, String::new()),
        Err(kube::Error::Api(s)) => (s.code, s.message),
        Err(e) => panic!("unexpected error {e}"),
    }
}

fn record() -> HoldMark {
    HoldMark {
        since: chrono::Utc::now(),
        reason: "breaker".into(),
        crash_count: 1,
        value: None,
    }
}

fn v1beta2(name: &str) -> Profile {
    let mut p = builtin(name).unwrap();
    p.version = "v1beta2".into();
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admission_policy_limits_remedy_to_what_it_owns() {
    let cluster = TestCluster::start();
    let admin = cluster.client().await;
    apply_files(
        &admin,
        &[
            "deploy/base/namespace.yaml",
            "deploy/base/serviceaccount.yaml",
            "deploy/base/clusterrole.yaml",
            "deploy/base/clusterrolebinding.yaml",
        ],
    )
    .await;
    let sa = cluster.client_as(SA).await;
    let ns = namespace(&admin, "admission").await;
    let m = create_with_status(&admin, sample("capi-machine-v1beta2-failed.yaml"), &ns).await;
    let name = m.metadata.name.clone().unwrap_or_default();
    let (sa_m, admin_m) = (api_for(&sa, &m, &ns), api_for(&admin, &m, &ns));

    // RBAC alone lets remedy's ServiceAccount change any field of a kind it
    // may patch: this is what the policy is for.
    let provider_id = |id: &str| json!({"spec": {"providerID": format!("aws:///us-east-2a/{id}")}});
    assert_eq!(
        merge(&sa_m, &name, false, provider_id("i-rbac")).await.0,
        200
    );

    apply_files(&admin, &["deploy/components/admission-policy/policy.yaml"]).await;
    // The apiserver picks a new policy up asynchronously.
    // A new value each try: a write that changes nothing is allowed.
    let tries = std::sync::atomic::AtomicU32::new(0);
    eventually(Duration::from_secs(30), "the policy in force", || async {
        let n = tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (code, _) = merge(&sa_m, &name, false, provider_id(&format!("i-wait{n}"))).await;
        (code == 403).then_some(())
    })
    .await;

    // Denied for the ServiceAccount, with the policy's message.
    let denied: Vec<(&str, bool, Value, &str)> = vec![
        (
            "spec field",
            false,
            provider_id("i-other"),
            "may not change spec.providerID",
        ),
        (
            "foreign label",
            false,
            json!({"metadata": {"labels": {"team": "x"}}}),
            "may not change metadata labels",
        ),
        (
            "foreign annotation",
            false,
            json!({"metadata": {"annotations": {"example.com/owner": "x"}}}),
            "may not change annotation example.com/owner",
        ),
        (
            "finalizer",
            false,
            json!({"metadata": {"finalizers": ["example.com/keep"]}}),
            "may not change metadata finalizers",
        ),
        (
            "pause without remedy's hold record",
            false,
            json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": "x"}}}),
            "only in the write that sets or removes its hold record",
        ),
        (
            "skip-remediation with a value not remedy's",
            false,
            json!({"metadata": {"annotations": {"cluster.x-k8s.io/skip-remediation": "x"}}}),
            "skip-remediation only to remedy.dev/clearing",
        ),
        (
            "status field remedy does not own",
            true,
            json!({"status": {"phase": "Running"}}),
            "not change status.phase",
        ),
        (
            "a nested status field not a failure field",
            true,
            json!({"status": {"deprecated": {"v1beta1": {"conditions": null}}}}),
            "not change status.deprecated.v1beta1.conditions",
        ),
        (
            "a failure field set, not cleared",
            true,
            json!({"status": {"deprecated": {"v1beta1": {"failureReason": "Other"}}}}),
            "not change status.deprecated.v1beta1.failureReason",
        ),
    ];
    // External remediation's escalation: OwnerRemediated=False, reason
    // RemedyEscalated, added to the Machine's conditions; any other
    // condition change is denied.
    let current = admin_m.get(&name).await.expect("machine");
    let kept: Vec<Value> = current.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let with = |c: Value| {
        let mut all = kept.clone();
        all.push(c);
        json!({"status": {"conditions": all}})
    };
    let owner_remediated = |reason: &str| {
        json!({"type": "OwnerRemediated", "status": "False", "reason": reason,
               "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    let (code, message) = merge(&sa_m, &name, true, with(owner_remediated("Other"))).await;
    assert_eq!(code, 403, "OwnerRemediated with another reason: {message}");
    let (code, message) = merge(
        &sa_m,
        &name,
        true,
        with(json!({"type": "Example", "status": "True", "reason": "R", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"})),
    )
    .await;
    assert_eq!(code, 403, "another condition: {message}");
    let (code, message) = merge(
        &sa_m,
        &name,
        true,
        with(owner_remediated("RemedyEscalated")),
    )
    .await;
    assert_eq!(code, 200, "escalation: {message}");

    for (what, status, body, msg) in &denied {
        let (code, message) = merge(&sa_m, &name, *status, body.clone()).await;
        assert_eq!(code, 403, "{what}: {message}");
        assert!(
            message.contains("ValidatingAdmissionPolicy 'remedy-writes'") && message.contains(msg),
            "{what}: {message}"
        );
    }
    // The same writes by another user go through.
    for (what, status, body, _) in &denied {
        assert_eq!(
            merge(&admin_m, &name, *status, body.clone()).await.0,
            200,
            "admin: {what}"
        );
    }

    // brupop: only crash_count back to 0 and the failure timestamp cleared.
    let b = create_with_status(
        &admin,
        sample("brupop-bottlerocketshadow-crashed.yaml"),
        &ns,
    )
    .await;
    let bname = b.metadata.name.clone().unwrap_or_default();
    let sa_b = api_for(&sa, &b, &ns);
    for (body, msg) in [
        (json!({"status": {"crash_count": 7}}), "status.crash_count"),
        (
            json!({"status": {"current_state": "Idle"}}),
            "status.current_state",
        ),
    ] {
        let (code, message) = merge(&sa_b, &bname, true, body).await;
        assert!(code == 403 && message.contains(msg), "{code} {message}");
    }

    // remedy's own executor, as the ServiceAccount, reaches every goal.
    let ex = executor(sa.clone(), Arc::new(Metrics::new(10)), false);
    let ns2 = namespace(&admin, "admission-exec").await;
    let fresh = create_with_status(&admin, sample("capi-machine-v1beta2-failed.yaml"), &ns2).await;
    let mname = fresh.metadata.name.clone().unwrap_or_default();
    let machine = v1beta2("capi-machine");
    let key = ResourceKey::new("Machine", &ns2, &mname);
    let hold = Goal::Hold(record());
    assert_eq!(
        ex.run(&machine, &key, &hold).await.unwrap().steps,
        vec![Step::Hold]
    );
    let all_clear = vec![
        Step::SetSkipRemediation,
        Step::ClearFailure,
        Step::RemoveSkipRemediation,
        Step::Unpause,
    ];
    assert_eq!(
        ex.run(&machine, &key, &Goal::Release).await.unwrap().steps,
        all_clear
    );
    // It fails again: held again, then remediated.
    let admin_m2 = api_for(&admin, &fresh, &ns2);
    set_status(&admin_m2, &mname, fresh.data["status"].clone()).await;
    assert_eq!(
        ex.run(&machine, &key, &hold).await.unwrap().steps,
        vec![Step::Hold]
    );
    assert_eq!(
        ex.run(&machine, &key, &Goal::Remediate)
            .await
            .unwrap()
            .steps,
        all_clear
    );
    let after = admin_m2.get(&mname).await.unwrap();
    let a = after.metadata.annotations.clone().unwrap_or_default();
    assert!(
        !a.contains_key("cluster.x-k8s.io/paused") && !a.contains_key("remedy.dev/hold"),
        "{a:?}"
    );
    assert!(
        after.data["status"]["deprecated"]["v1beta1"]
            .get("failureReason")
            .is_none()
    );

    let o = create_with_status(&admin, sample("capo-openstackmachine-error.yaml"), &ns2).await;
    let oname = o.metadata.name.clone().unwrap_or_default();
    let openstack = builtin("openstack-machine").unwrap();
    let okey = ResourceKey::new("OpenStackMachine", &ns2, &oname);
    assert_eq!(
        ex.run(&openstack, &okey, &hold).await.unwrap().steps,
        vec![Step::Hold]
    );
    // Its Ready False/InstanceStateError goes alone, by the JSON patch of
    // remediation.clear_conditions (#38.12), which the policy lets through:
    // only False conditions lost, the rest unchanged.
    let out = ex.run(&openstack, &okey, &Goal::Remediate).await.unwrap();
    assert_eq!(
        out.steps,
        vec![Step::ClearFailure, Step::ClearConditions, Step::Unpause]
    );
    // But not a True condition dropped, nor one rewritten.
    let sa_o = api_for(&sa, &o, &ns2);
    let cond = |status: &str| {
        json!([{"type": "Ready", "status": status, "reason": "x",
        "lastTransitionTime": "2026-12-07T00:00:00Z"}])
    };
    assert_eq!(
        merge(
            &api_for(&admin, &o, &ns2),
            &oname,
            true,
            json!({"status": {"conditions": cond("True")}})
        )
        .await
        .0,
        200
    );
    for body in [
        json!({"status": {"conditions": []}}),
        json!({"status": {"conditions": cond("False")}}),
    ] {
        let (code, message) = merge(&sa_o, &oname, true, body.clone()).await;
        assert_eq!(code, 403, "{body}: {message}");
        assert!(
            message.contains("not change status.conditions"),
            "{message}"
        );
    }

    let bkey = ResourceKey::new("BottlerocketShadow", &ns, &bname);
    let out = ex
        .run(
            &builtin("bottlerocket-shadow").unwrap(),
            &bkey,
            &Goal::Remediate,
        )
        .await
        .unwrap();
    assert_eq!(out.steps, vec![Step::ClearFailure, Step::ResetCounters]);

    // A Cluster held through spec.paused (a profile with hold.field).
    let c: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": ns2},
        "spec": {"controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443}}
    }))
    .unwrap();
    create_with_status(&admin, c, &ns2).await;
    let mut cp = v1beta2("capi-cluster");
    cp.hold = Some(HoldSpec::field("/spec/paused"));
    let ckey = ResourceKey::new("Cluster", &ns2, "c1");
    assert_eq!(
        ex.run(&cp, &ckey, &hold).await.unwrap().steps,
        vec![Step::Hold]
    );
    assert_eq!(
        ex.run(&cp, &ckey, &Goal::Release).await.unwrap().steps,
        vec![Step::Unpause]
    );
    // Not without remedy's hold record (a pause someone else could own).
    let sa_c = Api::<DynamicObject>::namespaced_with(
        sa.clone(),
        &ns2,
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"),
            "clusters",
        ),
    );
    let (code, message) = merge(&sa_c, "c1", false, json!({"spec": {"paused": true}})).await;
    assert!(
        code == 403 && message.contains("may not change spec.paused"),
        "{code} {message}"
    );
}
