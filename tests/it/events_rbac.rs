//! `deploy/overlays/standalone-namespaced` on the real apiserver: with
//! `components/namespaced-events`, remedy's ServiceAccount writes Events in
//! the namespaces its config lists and nowhere else, and keeps every other
//! right of the base ClusterRole.

use crate::deploy::render;
use crate::support::TestCluster;
use crate::support::objects::apply_manifest;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const SA: &str = "system:serviceaccount:remedy-system:remedy";

fn event(ns: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"generateName": "remedy-", "namespace": ns},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "remedy.dev/remedy",
        "reportingInstance": "test",
        "action": "Hold",
        "reason": "Held",
        "type": "Normal",
        "regarding": {"kind": "Machine", "namespace": ns, "name": "m"}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_only_in_the_listed_namespaces() {
    // Private: the shared cluster has the base's cluster-wide ClusterRole.
    let cluster = TestCluster::start();
    let admin = cluster.client().await;
    let discovery = kube::Discovery::new(admin.clone()).run().await.unwrap();
    for ns in ["capi-prod", "capi-staging", "elsewhere"] {
        let body: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        Api::<Namespace>::all(admin.clone())
            .patch(
                ns,
                &PatchParams::apply("remedy-tests"),
                &Patch::Apply(&body),
            )
            .await
            .unwrap();
    }
    let rbac = [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ];
    for obj in render("deploy/overlays/standalone-namespaced") {
        let kind = obj
            .types
            .as_ref()
            .map(|t| t.kind.clone())
            .unwrap_or_default();
        if rbac.contains(&kind.as_str()) {
            apply_manifest(&admin, &discovery, obj, None, false)
                .await
                .unwrap();
        }
    }
    let sa = cluster.client_as(SA).await;
    let create = |ns: &'static str| {
        let sa = sa.clone();
        async move {
            match Api::<Event>::namespaced(sa, ns)
                .create(&PostParams::default(), &event(ns))
                .await
            {
                Ok(_) => 201,
                Err(kube::Error::Api(s)) => s.code,
                Err(e) => panic!("{e}"),
            }
        }
    };
    assert_eq!(create("capi-prod").await, 201);
    assert_eq!(create("capi-staging").await, 201);
    assert_eq!(
        create("elsewhere").await,
        403,
        "no Events outside `namespaces:`"
    );
    // The rest of the base ClusterRole is untouched: still watches and
    // patches Machines everywhere.
    let machines = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine"),
        "machines",
    );
    Api::<kube::api::DynamicObject>::all_with(sa.clone(), &machines)
        .list(&Default::default())
        .await
        .expect("list machines cluster-wide");
}
