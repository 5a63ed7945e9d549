//! The real Cluster API core manager (`testenv/capi.sh`) for tests that run
//! it against the shared apiserver, and its v1beta2 APIs.

use super::procs::{Proc, require_binary, spawn};
use super::{TestCluster, eventually, free_port, repo};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use std::time::Duration;

/// The real manager, watching `ns` only (the shared cluster's other tests
/// keep their objects to themselves), as the admin user; `extra` flags
/// come last (e.g. `-v=3`). Killed when dropped.
pub async fn start_manager(cluster: &TestCluster, ns: &str, extra: &[&str]) -> Proc {
    let bin = repo()
        .join("testenv/bin/capi-manager")
        .display()
        .to_string();
    require_binary(&bin, "run `bash testenv/capi.sh`");
    let dir = tempfile::tempdir().expect("tmp");
    // No flag turns its webhook server off: give it a throwaway cert.
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    std::fs::write(dir.path().join("tls.crt"), cert.pem()).expect("cert");
    std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).expect("key");
    let health = free_port();
    let mut args = vec![
        format!("--kubeconfig={}", cluster.kubeconfig.display()),
        format!("--namespace={ns}"),
        "--leader-elect=false".into(),
        format!("--webhook-port={}", free_port()),
        format!("--webhook-cert-dir={}", dir.path().display()),
        format!("--health-addr=127.0.0.1:{health}"),
        format!("--diagnostics-address=127.0.0.1:{}", free_port()),
        "--insecure-diagnostics".into(),
        // The shared cluster's CRDs are the module's own, already at their
        // storage versions: nothing to migrate.
        "--skip-crd-migration-phases=StorageVersionMigration,CleanupManagedFields".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let manager = spawn("capi-manager", &bin, health, dir, &args);
    let http = reqwest::Client::new();
    let url = format!("{}/readyz", manager.base);
    eventually(
        Duration::from_secs(60),
        "the CAPI manager ready",
        || async {
            let r = http.get(&url).send().await.ok()?;
            r.status().is_success().then_some(())
        },
    )
    .await;
    manager
}

/// A namespaced `cluster.x-k8s.io/v1beta2` API.
pub fn capi_api(client: &Client, ns: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind);
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}
