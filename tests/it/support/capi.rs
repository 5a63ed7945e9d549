//! The real Cluster API core manager (`testenv/capi.sh`) for tests that run
//! it against the shared apiserver, and its v1beta2 APIs.

use super::procs::{Proc, require_binary, spawn};
use super::{CrdSet, TestCluster, free_port, repo};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};

/// A Cluster API release whose real core manager the tests run: the
/// newest minor the module proxy serves and the one before that users
/// still run (and CAPO v0.14 is built against).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capi {
    V1_12,
    V1_14,
}

impl Capi {
    pub fn version(self) -> &'static str {
        match self {
            Capi::V1_12 => "v1.12.5",
            Capi::V1_14 => "v1.14.2",
        }
    }

    /// The CRDs of the same release (`testenv/crds.sh`); the shared
    /// cluster's are the newest.
    pub fn crds(self) -> CrdSet {
        match self {
            Capi::V1_12 => CrdSet::CapiV1_12,
            Capi::V1_14 => CrdSet::Default,
        }
    }

    /// The cluster its tests run on: the shared one for the newest, a
    /// private one with its own CRDs for the other.
    pub fn cluster(self) -> ClusterRef {
        match self {
            Capi::V1_14 => ClusterRef::Shared(TestCluster::shared()),
            Capi::V1_12 => {
                ClusterRef::Private(Box::new(TestCluster::start_with_crds(self.crds(), &[])))
            }
        }
    }

    /// `testenv/capi.sh [VERSION]`'s link and how to make it.
    fn binary(self) -> (&'static str, &'static str) {
        match self {
            Capi::V1_12 => ("capi-manager", "run `bash testenv/capi.sh`"),
            Capi::V1_14 => ("capi-manager-v1.14.2", "run `bash testenv/capi.sh v1.14.2`"),
        }
    }
}

/// The shared test cluster, or a private one dropped with the test.
pub enum ClusterRef {
    Shared(&'static TestCluster),
    Private(Box<TestCluster>),
}

impl std::ops::Deref for ClusterRef {
    type Target = TestCluster;
    fn deref(&self) -> &TestCluster {
        match self {
            ClusterRef::Shared(c) => c,
            ClusterRef::Private(c) => c,
        }
    }
}

/// The real manager of release `capi`, watching `ns` only (the shared
/// cluster's other tests keep their objects to themselves), as the admin
/// user; `extra` flags come last (e.g. `-v=3`). Killed when dropped.
pub async fn start_manager(cluster: &TestCluster, capi: Capi, ns: &str, extra: &[&str]) -> Proc {
    let (name, how) = capi.binary();
    let bin = repo().join("testenv/bin").join(name).display().to_string();
    require_binary(&bin, how);
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
    manager.wait_readyz("the CAPI manager ready").await;
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
