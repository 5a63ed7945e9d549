//! `deploy/` is valid for a real apiserver: every kustomize overlay is
//! rendered with kubectl and every object is sent as a server-side dry-run
//! apply, so the apiserver checks each kind, schema and field, including
//! ServiceMonitor, PrometheusRule, Certificate and Issuer against the real
//! prometheus-operator and cert-manager CRDs (testenv/crds.sh).

use crate::support::objects::apply_manifest;
use crate::support::{TestCluster, repo};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::Discovery;
use serde_json::{Value, json};
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
        if overlay == "deploy/overlays/sidecar" {
            // The controller's Deployment is not remedy's to scale or spread.
            assert!(of_kind(&objects, "PodDisruptionBudget").is_empty());
        } else {
            assert_highly_available(overlay, &objects, "remedy-episodes");
        }
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

fn of_kind<'a>(objects: &'a [DynamicObject], kind: &str) -> Vec<&'a DynamicObject> {
    objects
        .iter()
        .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == kind))
        .collect()
}

/// remedy's standalone install is highly available (deploy/README.md,
/// "Standalone mode"): two replicas, rolled without going below two ready pods,
/// spread over nodes by a preferred pod anti-affinity on their own labels,
/// a PodDisruptionBudget evicting one at a time, a Service reaching every
/// replica (any accepts webhooks), leader election on, and the leader Role
/// granting the episode record ConfigMap `record` every replica writes.
pub(crate) fn assert_highly_available(what: &str, objects: &[DynamicObject], record: &str) {
    let deploys = of_kind(objects, "Deployment");
    assert_eq!(deploys.len(), 1, "{what}: one Deployment");
    let spec = &deploys[0].data["spec"];
    assert_eq!(spec["replicas"], 2, "{what}: replicas");
    assert_eq!(
        spec["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}),
        "{what}: strategy"
    );
    let own = &spec["selector"]["matchLabels"];
    let pod_labels = &spec["template"]["metadata"]["labels"];
    let selects = |sel: &Value| {
        sel.as_object()
            .is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| pod_labels.get(k) == Some(v)))
    };
    assert!(
        selects(own),
        "{what}: selector {own} vs pod labels {pod_labels}"
    );
    assert_eq!(
        spec["template"]["spec"]["affinity"],
        json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": own}}
        }]}}),
        "{what}: pod anti-affinity"
    );

    let pdbs = of_kind(objects, "PodDisruptionBudget");
    assert_eq!(pdbs.len(), 1, "{what}: one PodDisruptionBudget");
    assert_eq!(
        pdbs[0].types.as_ref().map(|t| t.api_version.as_str()),
        Some("policy/v1")
    );
    assert_eq!(
        pdbs[0].data["spec"],
        json!({"maxUnavailable": 1, "selector": {"matchLabels": own}}),
        "{what}: PodDisruptionBudget"
    );

    // Nothing leader-specific: every ready replica gets webhook deliveries.
    let services = of_kind(objects, "Service");
    assert_eq!(services.len(), 1, "{what}: one Service");
    let sel = &services[0].data["spec"]["selector"];
    assert!(
        selects(sel)
            && sel
                .as_object()
                .is_some_and(|m| m.keys().all(|k| own.get(k).is_some())),
        "{what}: Service selector {sel}, Deployment selector {own}"
    );

    let config = of_kind(objects, "ConfigMap")
        .into_iter()
        .find_map(|c| c.data["data"]["config.yaml"].as_str())
        .expect("config.yaml");
    let config: Value = serde_yaml_ng::from_str(config).expect("config yaml");
    assert_eq!(
        config["leader_election"]["enabled"].as_bool(),
        Some(true),
        "{what}: two replicas need leader election"
    );
    assert_eq!(
        config["leader_election"]["episode_record"], record,
        "{what}: episode_record"
    );

    let roles = of_kind(objects, "Role");
    let rules = roles
        .iter()
        .find(|r| {
            r.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.ends_with("leader-election"))
        })
        .map(|r| r.data["rules"].as_array().cloned().unwrap_or_default())
        .unwrap_or_else(|| panic!("{what}: no leader-election Role"));
    for want in [
        json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}),
        json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [record], "verbs": ["get", "update", "patch"]}),
    ] {
        assert!(
            rules.contains(&want),
            "{what}: Role lacks {want}: {rules:?}"
        );
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
