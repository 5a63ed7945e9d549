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
use std::path::{Path, PathBuf};
use std::process::Command;

/// `HELM` (Helm 3), else `testenv/bin/helm` (scripts/lib/install.sh links it
/// there), else PATH.
pub fn helm() -> PathBuf {
    helm_binary("HELM", "helm")
}

/// `HELM4`, else `testenv/bin/helm4`.
pub fn helm4() -> PathBuf {
    helm_binary("HELM4", "helm4")
}

fn helm_binary(var: &str, name: &str) -> PathBuf {
    if let Some(h) = std::env::var_os(var) {
        return h.into();
    }
    let local = repo().join("testenv/bin").join(name);
    if local.is_file() {
        return local;
    }
    name.into()
}

/// Runs helm; panics with its output unless it succeeds.
fn run_helm(bin: &Path, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{} ({e}): run `source scripts/lib/install.sh` or set HELM/HELM4",
                bin.display()
            )
        });
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{} {args:?}:\n{said}", bin.display());
    said
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
                "helm not found ({e}): run `source scripts/lib/install.sh` (links testenv/bin/helm) or set HELM"
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

/// `helm install` and `helm uninstall` for real, with Helm 3 and with Helm 4
/// (which applies server-side by default), into the real apiserver: every
/// object of the chart is created as that Helm version sends it, and all of
/// them are gone after the uninstall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_installs_and_uninstalls_with_helm_3_and_helm_4() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use kube::Api;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let kubeconfig = cluster.kubeconfig.display().to_string();
    // One after the other: the admission policy is cluster-wide, one name.
    for (major, bin) in [("3", helm()), ("4", helm4())] {
        let version = run_helm(&bin, &["version", "--short"]);
        assert!(
            version.trim_start().starts_with(&format!("v{major}.")),
            "{} is {version}, not Helm {major}",
            bin.display()
        );
        let ns = crate::support::namespace(&client, &format!("helm{major}")).await;
        let release = format!("remedy-h{major}");
        let said = run_helm(
            &bin,
            &[
                "install",
                &release,
                "deploy/helm/remedy",
                "-n",
                &ns,
                "--kubeconfig",
                &kubeconfig,
            ],
        );
        assert!(
            said.contains("STATUS: deployed"),
            "helm {major} install:\n{said}"
        );
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let d = deployments
            .get(&release)
            .await
            .unwrap_or_else(|e| panic!("helm {major}: no Deployment {release} in {ns}: {e}"));
        assert_eq!(d.spec.and_then(|s| s.replicas), Some(2), "helm {major}");
        let roles: Api<ClusterRole> = Api::all(client.clone());
        assert!(
            roles.get_opt(&release).await.expect("get").is_some(),
            "helm {major}: ClusterRole"
        );
        // Helm 4 applies server-side: the fields are owned through an Apply
        // entry; Helm 3 creates (Update).
        let managers: Vec<String> = d
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .map(|m| {
                format!(
                    "{}/{}",
                    m.manager.unwrap_or_default(),
                    m.operation.unwrap_or_default()
                )
            })
            .collect();
        eprintln!("helm {major}: {} managed by {managers:?}", version.trim());
        let want = if major == "4" {
            "helm/Apply"
        } else {
            "helm/Update"
        };
        assert!(
            managers.iter().any(|m| m == want),
            "helm {major}: {managers:?}, not {want}"
        );
        let listed = run_helm(&bin, &["list", "-n", &ns, "--kubeconfig", &kubeconfig]);
        assert!(listed.contains(&release), "helm {major} list:\n{listed}");

        run_helm(
            &bin,
            &[
                "uninstall",
                &release,
                "-n",
                &ns,
                "--kubeconfig",
                &kubeconfig,
                "--wait",
            ],
        );
        assert!(
            deployments.get_opt(&release).await.expect("get").is_none(),
            "helm {major}: Deployment left"
        );
        assert!(
            roles.get_opt(&release).await.expect("get").is_none(),
            "helm {major}: ClusterRole left"
        );
    }
}
