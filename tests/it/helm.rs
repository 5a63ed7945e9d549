//! The Helm chart (`deploy/helm/remedy`) on the real apiserver: rendered
//! with `helm template`, with its defaults and with every switch on, and sent
//! as a server-side dry run, so each kind and field is checked against the
//! built-in schemas and the real prometheus-operator and cert-manager CRDs.
//! `scripts/check-ops.sh` compares the rendered chart with kustomize's.

use crate::deploy::{apply_all, assert_highly_available};
use crate::support::TestCluster;
use crate::support::repo;
use kube::api::DynamicObject;
use kube::discovery::Discovery;
use std::path::PathBuf;
use std::process::Command;

/// `HELM`, else `.tools/helm` (scripts/lib/install.sh builds it there), else PATH.
pub fn helm() -> PathBuf {
    if let Some(h) = std::env::var_os("HELM") {
        return h.into();
    }
    let local = repo().join(".tools/helm");
    if local.is_file() {
        return local;
    }
    "helm".into()
}

/// `helm template RELEASE deploy/helm/remedy -n NAMESPACE ARGS...`, parsed.
pub fn render_chart(release: &str, namespace: &str, args: &[&str]) -> Vec<DynamicObject> {
    let out = Command::new(helm())
        .args(["template", release, "deploy/helm/remedy", "-n", namespace])
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "helm not found ({e}): run `source scripts/lib/install.sh` (builds .tools/helm) or set HELM"
            )
        });
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    serde_yaml_ng::Deserializer::from_str(&text)
        .filter_map(|doc| {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc).expect("yaml");
            (!v.is_null()).then(|| serde_json::from_value(v).expect("object"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_passes_a_server_side_dry_run() {
    let client = TestCluster::shared().client().await;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let all_on = [
        "--set=tls.enabled=true",
        "--set=tls.certManager.enabled=true",
        "--set=serviceMonitor.labels.release=kube-prometheus-stack",
        "--set=prometheusRule.labels.release=kube-prometheus-stack",
    ];
    let all_off = [
        "--set=serviceMonitor.enabled=false",
        "--set=prometheusRule.enabled=false",
        "--set=networkPolicy.enabled=false",
    ];
    for (what, args) in [
        ("defaults", &[][..]),
        ("TLS and labels", &all_on[..]),
        ("operator objects off", &all_off[..]),
    ] {
        let objects = render_chart("remedy", "remedy-system", args);
        // As the kustomize base: two replicas, rolled, spread, a PDB, and
        // the episode record ConfigMap in the leader Role.
        assert_highly_available(what, &objects, "remedy-episodes");
        let kinds = apply_all(&client, &discovery, what, vec![], objects).await;
        for want in [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "ConfigMap",
            "Secret",
            "Deployment",
            "Service",
            "PodDisruptionBudget",
        ] {
            assert!(
                kinds.iter().any(|k| k == want),
                "{what}: no {want} in {kinds:?}"
            );
        }
        let has = |k: &str| kinds.iter().any(|x| x == k);
        let operator = what != "operator objects off";
        assert_eq!(has("ServiceMonitor"), operator, "{what}: {kinds:?}");
        assert_eq!(has("PrometheusRule"), operator, "{what}: {kinds:?}");
        assert_eq!(has("NetworkPolicy"), operator, "{what}: {kinds:?}");
        assert_eq!(
            has("Certificate"),
            what == "TLS and labels",
            "{what}: {kinds:?}"
        );
    }
}
