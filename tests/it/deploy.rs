//! `deploy/` is valid for a real apiserver: every kustomize overlay is
//! rendered with kubectl and every object is sent as a server-side dry-run
//! apply, so the apiserver checks each kind, schema and field, including
//! ServiceMonitor, PrometheusRule, Certificate and Issuer against the real
//! prometheus-operator and cert-manager CRDs (testenv/crds.sh).

use crate::support::objects::apply_manifest;
use crate::support::{TestCluster, repo};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::Discovery;
use std::process::Command;

pub fn render(overlay: &str) -> Vec<DynamicObject> {
    let out = Command::new("kubectl")
        .args(["kustomize", overlay])
        .current_dir(repo())
        .output()
        .expect("kubectl (with kustomize) is required");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc).expect("yaml");
            serde_json::from_value(v).expect("object")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_overlay_passes_a_server_side_dry_run() {
    let client = TestCluster::shared().client().await;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    for overlay in [
        "deploy/overlays/standalone",
        "deploy/overlays/standalone-tls",
        "deploy/overlays/standalone-namespaced",
        "deploy/overlays/standalone-no-operator",
        "deploy/overlays/sidecar",
    ] {
        let objects = render(overlay);
        assert!(
            objects.len() >= 8,
            "{overlay}: only {} objects",
            objects.len()
        );
        // Namespaces for real first: a dry run into a missing namespace fails.
        let (namespaces, rest): (Vec<_>, Vec<_>) = objects
            .into_iter()
            .partition(|o| o.types.as_ref().is_some_and(|t| t.kind == "Namespace"));
        let kinds = apply_all(&client, &discovery, overlay, namespaces, rest).await;
        for want in [
            "Deployment",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "ConfigMap",
        ] {
            assert!(
                kinds.iter().any(|k| k == want),
                "{overlay}: no {want} in {kinds:?}"
            );
        }
        // The operator's objects, except where the component drops them.
        let operator = !overlay.ends_with("-no-operator");
        for want in ["ServiceMonitor", "PrometheusRule"] {
            assert_eq!(
                kinds.iter().any(|k| k == want),
                operator,
                "{overlay}: {want} in {kinds:?}"
            );
        }
        // The sidecar's policy would cover the controller's own ports.
        assert_eq!(
            kinds.iter().any(|k| k == "NetworkPolicy"),
            overlay != "deploy/overlays/sidecar",
            "{overlay}: NetworkPolicy in {kinds:?}"
        );
        if overlay.ends_with("-tls") {
            for want in ["Certificate", "Issuer"] {
                assert!(kinds.iter().any(|k| k == want), "{overlay}: no {want}");
            }
        }
    }
}

/// Applies `namespaces` for real (a dry run into a missing namespace fails)
/// and `rest` as a server-side dry run; returns the kinds applied.
pub(crate) async fn apply_all(
    client: &kube::Client,
    discovery: &Discovery,
    what: &str,
    namespaces: Vec<DynamicObject>,
    rest: Vec<DynamicObject>,
) -> Vec<String> {
    ensure_namespaces(client, &rest).await;
    let mut kinds = Vec::new();
    for (dry, objs) in [(false, namespaces), (true, rest)] {
        for obj in objs {
            let kind = apply_manifest(client, discovery, obj, None, dry)
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            kinds.push(kind);
        }
    }
    kinds
}

/// Creates the namespaces `objects` live in: in a real cluster they exist
/// (a controller's, Alertmanager's) or the user creates them first.
pub(crate) async fn ensure_namespaces(client: &kube::Client, objects: &[DynamicObject]) {
    for ns in objects.iter().filter_map(|o| o.metadata.namespace.clone()) {
        let body: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))
                .expect("namespace");
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .patch(
                &ns,
                &PatchParams::apply("remedy-deploy-check"),
                &Patch::Apply(&body),
            )
            .await
            .expect("namespace");
    }
}

/// The Prometheus Operator form of the Alertmanager receiver is valid for
/// the real AlertmanagerConfig CRD (v1alpha1, from prometheus-operator).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alertmanagerconfig_passes_a_server_side_dry_run() {
    let client = TestCluster::shared().client().await;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let text = std::fs::read_to_string(repo().join("deploy/alertmanager/alertmanagerconfig.yaml"))
        .expect("alertmanagerconfig.yaml");
    let obj: DynamicObject = serde_yaml_ng::from_str(&text).expect("object");
    let kinds = apply_all(
        &client,
        &discovery,
        "alertmanagerconfig.yaml",
        vec![],
        vec![obj],
    )
    .await;
    assert_eq!(kinds, ["AlertmanagerConfig"]);
}
