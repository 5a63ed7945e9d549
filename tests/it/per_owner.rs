//! `budget.per` (#27.3) on the real apiserver with the real binary: six
//! held machines, three of MachineDeployment md-a, two of md-b, one naming
//! none, `max_in_flight: 1`. One of each owner goes, and the ownerless
//! one; the rest wait for `owner` (metric and `/explain`) however much
//! budget is left, until the controller answers a released one: then the
//! next of that owner goes, and only that one.

use crate::support::objects::{count_held, held, held_healthy_machines};
use crate::support::{Remedy, TestCluster, eventually, namespace};
use kube::api::{Patch, PatchParams};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

const OWNER_LABEL: &str = "cluster.x-k8s.io/deployment-name";

/// remedy on `ns`, releasing at most one machine per MachineDeployment
/// until its controller answers, with budget to spare.
fn config(ns: &str) -> String {
    format!(
        "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 200ms\nleader_election: {{enabled: false}}\n\
         budget: {{refill_per_second: 10, burst: 10, per: {{label: {OWNER_LABEL}, max_in_flight: 1}}}}\n\
         breaker: {{min_resources: 3, window: 1s, cooldown: 1s}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_has_at_most_max_in_flight_releases_unanswered() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "per-owner").await;
    let api = held_healthy_machines(&client, &ns, 6).await;
    for (name, owner) in [
        ("osm-00", Some("md-a")),
        ("osm-01", Some("md-a")),
        ("osm-02", Some("md-a")),
        ("osm-03", Some("md-b")),
        ("osm-04", Some("md-b")),
        ("osm-05", None),
    ] {
        if let Some(owner) = owner {
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {OWNER_LABEL: owner}}})),
            )
            .await
            .expect("label");
        }
    }
    let remedy = Remedy::serve(cluster, &config(&ns));
    remedy.wait_ready().await;
    let still_held = || async {
        let list = api.list(&Default::default()).await.ok()?;
        Some(
            list.items
                .iter()
                .filter(|o| held(o))
                .filter_map(|o| o.metadata.name.clone())
                .collect::<BTreeSet<String>>(),
        )
    };
    let want = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();

    // One of each owner (lowest key first) and the ownerless one.
    eventually(Duration::from_secs(30), "the first releases", || async {
        (count_held(&api).await? == 3).then_some(())
    })
    .await;
    // Budget is plenty (10/s): what stays, stays for its owner.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        still_held().await.expect("list"),
        want(&["osm-01", "osm-02", "osm-04"]),
        "{}",
        remedy.log_tail()
    );
    let waiting = remedy
        .metric(r#"remedy_waiting_resources{kind="OpenStackMachine",reason="owner"}"#)
        .await;
    assert_eq!(waiting, 3.0);
    let (code, body) = remedy
        .get(&format!("/explain?resource={ns}/OpenStackMachine/osm-01"))
        .await
        .expect("explain");
    assert_eq!(code, 200, "{body}");
    let x: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(x["waiting"], "owner", "{x}");
    assert_eq!(x["owner"]["name"], format!("{ns}/md-a"), "{x}");
    assert_eq!(x["owner"]["in_flight"], 1, "{x}");
    assert_eq!(x["owner"]["max_in_flight"], 1, "{x}");

    // md-a's released machine is answered (its controller writes it): the
    // next of md-a goes; md-b's one in flight is not answered, so its
    // second stays.
    api.patch(
        "osm-00",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"reconciled": "yes"}}})),
    )
    .await
    .expect("answer");
    eventually(Duration::from_secs(20), "md-a's next release", || async {
        (still_held().await? == want(&["osm-02", "osm-04"])).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        still_held().await.expect("list"),
        want(&["osm-02", "osm-04"])
    );
}

/// #38.3: a release that fails in the executor frees its owner's slot at
/// the next tick, not after the 10-minute flight timeout. Two held machines
/// of md-a, `max_in_flight: 1`; every write to osm-00 (first in line) is
/// denied by a ValidatingAdmissionPolicy on the real apiserver, so its
/// release fails again and again. osm-01 is still released within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_release_frees_its_owners_slot_at_the_next_tick() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "per-owner-fail").await;
    let api = held_healthy_machines(&client, &ns, 2).await;
    for name in ["osm-00", "osm-01"] {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {OWNER_LABEL: "md-a"}}})),
        )
        .await
        .expect("label");
    }
    // Denies every update of osm-00 in this namespace, whoever sends it.
    let policy_name = format!("deny-{ns}");
    let discovery = kube::Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    for obj in [
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy_name},
            "spec": {"failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                    "resourceRules": [{"apiGroups": ["infrastructure.cluster.x-k8s.io"], "apiVersions": ["*"],
                        "operations": ["UPDATE"], "resources": ["openstackmachines", "openstackmachines/status"]}]},
                "matchConditions": [{"name": "osm-00", "expression": "object.metadata.name == 'osm-00'"}],
                "validations": [{"expression": "false", "message": "osm-00 is frozen by the test"}]}}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy_name},
            "spec": {"policyName": policy_name, "validationActions": ["Deny"]}}),
    ] {
        let obj: kube::api::DynamicObject = serde_json::from_value(obj).expect("object");
        crate::support::objects::apply_manifest(&client, &discovery, obj, None, false)
            .await
            .expect("policy");
    }
    // The policy is in force once a write to osm-00 is refused.
    eventually(Duration::from_secs(30), "osm-00 frozen", || async {
        api.patch(
            "osm-00",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"probe": "x"}}})),
        )
        .await
        .is_err()
        .then_some(())
    })
    .await;
    let remedy = Remedy::serve(cluster, &config(&ns));
    remedy.wait_ready().await;
    let started = std::time::Instant::now();
    eventually(Duration::from_secs(30), "osm-01 released", || async {
        let o = api.get("osm-01").await.ok()?;
        (!held(&o)).then_some(())
    })
    .await;
    let took = started.elapsed();
    let o = api.get("osm-00").await.expect("osm-00");
    assert!(held(&o), "osm-00's writes are all denied");
    let failed = remedy
        .metric(r#"remedy_actions_total{action="release",result="forbidden"}"#)
        .await
        + remedy
            .metric(r#"remedy_actions_total{action="release",result="error"}"#)
            .await;
    assert!(
        failed >= 1.0,
        "osm-00's release failed first\n{}",
        remedy.log_tail()
    );
    eprintln!(
        "per_owner: osm-01 released {took:?} after remedy was ready, osm-00's release failed {failed} times"
    );
    // Scoped to this namespace either way; gone for tidiness.
    for kind in [
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
    ] {
        let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
            client.clone(),
            &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                kind,
            )),
        );
        let _ = api.delete(&policy_name, &Default::default()).await;
    }
}
