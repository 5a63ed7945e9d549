//! The upstream CRDs the test clusters install (testenv/crds.sh) and what
//! their `None` conversion means for tests: an object keeps only the fields
//! that both the version it is written in and the storage version know, and
//! a read in another version prunes what that version does not know. So
//! every test writes an object in the version it reads it in.

use crate::remediate::executor;
use crate::support::objects::{api_for, create_with_status, sample};
use crate::support::{CrdSet, Remedy, TestCluster, eventually, namespace};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use remedy::metrics::Metrics;
use remedy::model::profile::{HoldMark, builtin};
use remedy::model::view::ResourceKey;
use remedy::remediate::step::{Goal, Step};
use std::sync::Arc;
use std::time::Duration;

fn machines(client: &kube::Client, ns: &str, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", version, "Machine");
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, "machines"),
    )
}

#[tokio::test]
async fn capi_v1_12_crds_with_none_conversion_prune_what_the_other_version_does_not_know() {
    let client = TestCluster::shared().client().await;
    let ns = namespace(&client, "conversion").await;

    // v1beta1 written, v1beta2 stored: v1beta1's failure fields are gone.
    let old = create_with_status(&client, sample("capi-machine-v1beta1-failed.yaml"), &ns).await;
    let name = old.metadata.name.clone().unwrap_or_default();
    let status = &machines(&client, &ns, "v1beta1")
        .get(&name)
        .await
        .unwrap()
        .data["status"];
    assert_eq!(status["phase"], "Failed", "{status}");
    assert!(status.get("failureReason").is_none(), "{status}");
    assert!(status.get("failureMessage").is_none(), "{status}");

    // v1beta2 written: kept in v1beta2, pruned when read as v1beta1.
    let new = create_with_status(&client, sample("capi-machine-v1beta2-failed.yaml"), &ns).await;
    let name = new.metadata.name.clone().unwrap_or_default();
    let v2 = machines(&client, &ns, "v1beta2").get(&name).await.unwrap();
    assert_eq!(
        v2.data["status"]["deprecated"]["v1beta1"]["failureReason"],
        "UpdateError"
    );
    let v1 = machines(&client, &ns, "v1beta1").get(&name).await.unwrap();
    assert_eq!(
        v1.types.map(|t| t.api_version).unwrap_or_default(),
        "cluster.x-k8s.io/v1beta1"
    );
    assert!(
        v1.data["status"].get("deprecated").is_none(),
        "{}",
        v1.data["status"]
    );
    assert!(
        v1.data["status"].get("failureReason").is_none(),
        "{}",
        v1.data["status"]
    );
    // v1beta2 references (apiGroup) are not v1beta1 fields (apiVersion).
    assert!(
        v1.data["spec"]["infrastructureRef"]
            .get("apiGroup")
            .is_none(),
        "{}",
        v1.data["spec"]
    );
}

#[tokio::test]
async fn capi_v1_10_crds_keep_the_v1beta1_failure_fields_remedy_reads_and_clears() {
    // Cluster API v1.10 stores v1beta1 and does not serve v1beta2.
    let cluster = TestCluster::start_with_crds(CrdSet::CapiV1_10, &[]);
    let client = cluster.client().await;
    let ns = namespace(&client, "capi110").await;
    let err = machines(&client, &ns, "v1beta2")
        .list(&Default::default())
        .await
        .expect_err("v1beta2 is not served by the v1.10 CRD");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err}"
    );

    let m = create_with_status(&client, sample("capi-machine-v1beta1-failed.yaml"), &ns).await;
    let name = m.metadata.name.clone().unwrap_or_default();
    let api = api_for(&client, &m, &ns);
    assert_eq!(
        api.get(&name).await.unwrap().data["status"]["failureReason"],
        "UpdateError"
    );

    // The default profile (v1beta1) sees the failure.
    let remedy = Remedy::serve(
        &cluster,
        &format!(
            "namespaces: [{ns}]\ntick: 1s\nleader_election: {{enabled: false}}\nprofiles: [capi-machine]\n"
        ),
    );
    remedy.wait_ready().await;
    eventually(
        Duration::from_secs(30),
        "the Machine counted as failing",
        || async {
            let (_, t) = remedy.get("/metrics").await?;
            let v = |s: &str| {
                crate::support::sample(
                    &t,
                    &format!(r#"remedy_resources{{kind="Machine",state="{s}"}}"#),
                )
                .unwrap_or(0.0)
            };
            (v("terminal") + v("transient") == 1.0).then_some(())
        },
    )
    .await;
    drop(remedy);

    // Hold and remediate clear the v1beta1 fields only.
    let ex = executor(client.clone(), Arc::new(Metrics::new(10)), false);
    let p = builtin("capi-machine").unwrap();
    let key = ResourceKey::new("Machine", &ns, &name);
    let record = HoldMark {
        since: chrono::Utc::now(),
        reason: "breaker".into(),
        crash_count: 1,
        value: None,
    };
    assert_eq!(
        ex.run(&p, &key, &Goal::Hold(record)).await.unwrap().steps,
        vec![Step::Hold]
    );
    let out = ex.run(&p, &key, &Goal::Remediate).await.unwrap();
    assert!(out.steps.contains(&Step::ClearFailure), "{:?}", out.steps);
    let status = &api.get(&name).await.unwrap().data["status"];
    assert!(status.get("failureReason").is_none(), "{status}");
    assert!(status.get("failureMessage").is_none(), "{status}");
    assert_eq!(status["phase"], "Failed", "fields remedy does not own stay");
}
