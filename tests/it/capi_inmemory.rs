//! remedy with the real Cluster API core manager and a real infrastructure
//! provider (issue #24.2): CAPD v1.13.7's in-memory backend
//! (`testenv/capd.sh`), the newest CAPD the module proxy builds, with the
//! newest core manager, v1.14.2 (`testenv/capi.sh v1.14.2`). Its
//! DevCluster opens a fake workload apiserver on 127.0.0.1; its DevMachines
//! become "VMs" whose Nodes it registers there with a providerID, so the
//! real Machine controller finds them and sets the nodeRef, and the real
//! MachineHealthCheck reads their conditions through the Cluster's
//! kubeconfig Secret, as with a real provider. Nothing here writes a
//! Machine's or Node's state for the controllers; the test plays only the
//! kubelet going silent (a Node's Ready condition, written to the fake
//! workload apiserver) and the provider failure remedy holds on (a
//! Machine's v1beta1 failure fields, which the MHC does not read).
//!
//! - A Machine remedy has no reason to hold is deleted by the real MHC and
//!   MachineSet when its Node goes `Ready=Unknown`, and the real provider
//!   then deletes its DevMachine and Node.
//! - A Machine remedy holds is not deleted however long its Node stays
//!   Unknown; once released the MHC judges it as it is then.
//! - A hold stops the real Machine controller (`Paused`, and it no longer
//!   follows its Node); the release resumes it at once. CAPD's DevMachine
//!   controller is not paused by it: it looks only at the Cluster's and
//!   the DevMachine's own pause.
//!
//! CAPD listens on fixed ports (19000 for its debug server, 20000 upwards
//! for workload apiservers), so one runs at a time (a lock), each against a
//! private apiserver with the `capd` CRD set (Cluster API v1.14.2's and
//! CAPD's).

use crate::remediate::executor;
use crate::support::capi::{Capi, capi_api, start_manager};
use crate::support::mhc::{
    MhcFleet, held_machines_are_kept_then_judged_afresh, machine, worker_health_check, worker_set,
};
use crate::support::procs::{Proc, spawn_with_env};
use crate::support::{CrdSet, Remedy, TestCluster, eventually, free_port, namespace, repo};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, ResourceExt};
use remedy::metrics::Metrics;
use remedy::model::profile::{CAPI_PAUSED, HoldMark, builtin};
use remedy::model::scope::CLUSTER_NAME_LABEL;
use remedy::model::view::ResourceKey;
use remedy::remediate::step::{Goal, Step};
use serde_json::{Value, json};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

const CAPI: Capi = Capi::V1_14;
const INFRA_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// The MHC's rule: Ready=Unknown for this long.
const RULE_SECS: u64 = 5;

/// Why these tests cannot run, if they cannot.
fn missing() -> Option<String> {
    let bin = repo().join("testenv/bin");
    for (path, how) in [
        (bin.join("capd-manager"), "bash testenv/capd.sh"),
        (
            bin.join("capi-manager-v1.14.2"),
            "bash testenv/capi.sh v1.14.2",
        ),
        (bin.join("crds/capd"), "bash testenv/crds.sh"),
    ] {
        if !path.exists() {
            return Some(format!("{} missing: run `{how}`", path.display()));
        }
    }
    None
}

/// Skips (a `SKIPPED:` line) when CAPD is not built, or fails when
/// `REMEDY_REQUIRE_CAPD` is set (`scripts/test` builds it).
pub(crate) fn runnable() -> bool {
    let Some(why) = missing() else { return true };
    assert!(
        std::env::var_os("REMEDY_REQUIRE_CAPD").is_none(),
        "REMEDY_REQUIRE_CAPD is set but {why}"
    );
    eprintln!("SKIPPED: {why}");
    false
}

fn lock() -> Arc<tokio::sync::Mutex<()>> {
    static LOCK: OnceLock<Arc<tokio::sync::Mutex<()>>> = OnceLock::new();
    LOCK.get_or_init(Default::default).clone()
}

/// A self-signed RSA CA, `(tls.crt, tls.key)` PEM: CAPD signs the fake
/// apiserver's and etcd's serving certs with the Cluster's CAs and accepts
/// only RSA keys (rcgen cannot make one with ring).
fn rsa_ca() -> (Vec<u8>, Vec<u8>) {
    let dir = tempfile::tempdir().expect("tmp");
    let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let out = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=kubernetes"])
        .args(["-addext", "basicConstraints=critical,CA:TRUE"])
        .args([
            "-addext",
            "keyUsage=critical,keyCertSign,digitalSignature,keyEncipherment",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .expect("openssl");
    assert!(out.status.success(), "openssl: {out:?}");
    (
        std::fs::read(crt).expect("crt"),
        std::fs::read(key).expect("key"),
    )
}

/// The real CAPD manager watching `ns` (it takes the core manager's
/// flags), its workload apiservers on 127.0.0.1 (`POD_IP`). Killed when
/// dropped.
async fn start_capd(cluster: &TestCluster, ns: &str) -> Proc {
    let bin = repo()
        .join("testenv/bin/capd-manager")
        .display()
        .to_string();
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
    let args = vec![
        format!("--kubeconfig={}", cluster.kubeconfig.display()),
        format!("--namespace={ns}"),
        "--leader-elect=false".into(),
        format!("--webhook-port={}", free_port()),
        format!("--webhook-cert-dir={}", dir.path().display()),
        format!("--health-addr=127.0.0.1:{health}"),
        format!("--diagnostics-address=127.0.0.1:{}", free_port()),
        "--insecure-diagnostics".into(),
        // The CRDs are the modules' own, at their storage versions.
        "--skip-crd-migration-phases=StorageVersionMigration,CleanupManagedFields".into(),
    ];
    let capd = spawn_with_env(
        "capd-manager",
        &bin,
        health,
        dir,
        &args,
        &[("POD_IP", "127.0.0.1")],
    );
    capd.wait_readyz("the CAPD manager ready").await;
    capd
}

fn infra_api(client: &Client, ns: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(INFRA_GROUP, "v1beta2", kind);
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

async fn create(api: &Api<DynamicObject>, obj: Value) -> DynamicObject {
    let obj: DynamicObject = serde_json::from_value(obj).expect("object");
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create {:?}: {e}", obj.metadata.name))
}

/// An in-memory DevMachine spec (no startup delays: the VM, Node, etcd
/// and apiserver come up at the first reconcile that may create them).
fn dev_machine_spec() -> Value {
    json!({"backend": {"inMemory": {}}})
}

/// One in-memory workload cluster of the real controllers: the Cluster
/// `c` on a DevCluster, a control-plane Machine `cp-0` (its Node makes the
/// Cluster `ControlPlaneInitialized`; its DevMachine runs the fake etcd and
/// apiserver), the worker Machines of the MachineSet `workers`, each on a
/// DevMachine of its name, and, with `mhc`, a MachineHealthCheck on the
/// workers: Ready=Unknown for [`RULE_SECS`].
pub(crate) struct Fleet {
    pub(crate) machines: Api<DynamicObject>,
    dev_machines: Api<DynamicObject>,
    /// The fake workload apiserver, through the kubeconfig Secret the real
    /// Cluster controller wrote.
    workload: Client,
    /// Creation of the objects to every Machine Running with its nodeRef.
    provisioned_in: Duration,
    // Dropped in this order: the managers before their apiserver.
    _capd: Proc,
    _capi: Proc,
    pub(crate) cluster: TestCluster,
    _lock: tokio::sync::OwnedMutexGuard<()>,
}

impl Fleet {
    pub(crate) async fn create(prefix: &str, workers: &[&str], mhc: bool) -> (Self, String) {
        Self::create_as(prefix, workers, mhc, None).await
    }

    /// As [`Fleet::create`], with the core manager acting as `user`
    /// (impersonation) with only the rights of `rbac` (ClusterRoles and
    /// their ClusterRoleBindings, created first) instead of the admin's.
    pub(crate) async fn create_as(
        prefix: &str,
        workers: &[&str],
        mhc: bool,
        manager_as: Option<(&str, Vec<Value>)>,
    ) -> (Self, String) {
        let guard = lock().lock_owned().await;
        let cluster = TestCluster::start_with_crds(CrdSet::Capd, &[]);
        let client = cluster.client().await;
        let ns = namespace(&client, prefix).await;
        let mut extra = Vec::new();
        if let Some((user, rbac)) = manager_as {
            extra.push(format!(
                "--kubeconfig={}",
                impersonating(&client, &cluster, user, rbac).await.display()
            ));
        }
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let capi = start_manager(&cluster, CAPI, &ns, &extra).await;
        let capd = start_capd(&cluster, &ns).await;
        let started = Instant::now();

        let clusters = capi_api(&client, &ns, "Cluster", "clusters");
        let machines = capi_api(&client, &ns, "Machine", "machines");
        let sets = capi_api(&client, &ns, "MachineSet", "machinesets");
        let mhcs = capi_api(&client, &ns, "MachineHealthCheck", "machinehealthchecks");
        let dev_clusters = infra_api(&client, &ns, "DevCluster", "devclusters");
        let dev_machines = infra_api(&client, &ns, "DevMachine", "devmachines");
        let templates = infra_api(&client, &ns, "DevMachineTemplate", "devmachinetemplates");

        // The Cluster's CA and etcd CA, as a control plane provider would
        // write them: CAPD serves the fake apiserver and etcd with certs
        // from them, and the real Cluster controller (there is no control
        // plane provider) writes `c-kubeconfig` from the CA. Written first:
        // it retries a missing CA only every 30 s.
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        for purpose in ["ca", "etcd"] {
            let (crt, key) = rsa_ca();
            let secret: Secret = serde_json::from_value(json!({
                "metadata": {"name": format!("c-{purpose}"), "labels": {CLUSTER_NAME_LABEL: "c"}},
                "type": "cluster.x-k8s.io/secret",
                "stringData": {
                    "tls.crt": String::from_utf8(crt).expect("pem"),
                    "tls.key": String::from_utf8(key).expect("pem"),
                },
            }))
            .expect("secret");
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .expect("CA secret");
        }

        create(
            &dev_clusters,
            json!({
                "apiVersion": format!("{INFRA_GROUP}/v1beta2"), "kind": "DevCluster",
                // CAPD v1.13.7 stores its listener's name in an annotation
                // without making the map first: a DevCluster with no
                // annotation panics its reconciler (kubectl apply's own
                // annotation hides that).
                "metadata": {"name": "c", "annotations": {"remedy.test/capd": "in-memory"}},
                "spec": {"backend": {"inMemory": {}}},
            }),
        )
        .await;
        create(&clusters, json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c"},
            "spec": {
                "clusterNetwork": {"serviceDomain": "cluster.local"},
                "infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "DevCluster", "name": "c"},
            },
        }))
        .await;
        create(
            &templates,
            json!({
                "apiVersion": format!("{INFRA_GROUP}/v1beta2"), "kind": "DevMachineTemplate",
                "metadata": {"name": "workers"},
                "spec": {"template": {"spec": dev_machine_spec()}},
            }),
        )
        .await;
        let set = create(
            &sets,
            worker_set(
                workers.len(),
                json!({"apiGroup": INFRA_GROUP, "kind": "DevMachineTemplate", "name": "workers"}),
            ),
        )
        .await;
        let set_uid = set.uid().expect("uid");

        let all: Vec<&str> = std::iter::once("cp-0")
            .chain(workers.iter().copied())
            .collect();
        for &m in &all {
            create(
                &dev_machines,
                json!({
                    "apiVersion": format!("{INFRA_GROUP}/v1beta2"), "kind": "DevMachine",
                    "metadata": {"name": m}, "spec": dev_machine_spec(),
                }),
            )
            .await;
            create(
                &machines,
                machine(
                    m,
                    &set_uid,
                    json!({"apiGroup": INFRA_GROUP, "kind": "DevMachine", "name": m}),
                ),
            )
            .await;
        }
        if mhc {
            create(&mhcs, worker_health_check(RULE_SECS)).await;
        }

        // The real providers bring every Machine to Running with the Node
        // CAPD registered for its DevMachine. If the core manager's first
        // try to reach the workload apiserver comes before CAPD starts it,
        // it tries again only 30 s later.
        for &m in &all {
            eventually(
                Duration::from_secs(120),
                "Machine Running with its nodeRef",
                || {
                    let machines = machines.clone();
                    async move {
                        let o = machines.get(m).await.ok()?;
                        let s = &o.data["status"];
                        (s["phase"] == "Running" && s["nodeRef"]["name"] == m).then_some(())
                    }
                },
            )
            .await;
        }
        let provisioned_in = started.elapsed();
        for &m in &all {
            let d = dev_machines.get(m).await.expect("DevMachine");
            assert_eq!(
                d.data["spec"]["providerID"],
                format!("in-memory://{m}"),
                "{m}: the provider's VM"
            );
        }
        // The MHC acts only on a Cluster with both (the Cluster controller
        // notices cp-0's nodeRef at its next reconcile).
        eventually(
            Duration::from_secs(30),
            "Cluster InfrastructureReady and ControlPlaneInitialized",
            || async {
                let c = clusters.get("c").await.ok()?;
                let cond = |t: &str| {
                    c.data["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter().any(|x| x["type"] == t && x["status"] == "True")
                    })
                };
                (cond("InfrastructureReady") && cond("ControlPlaneInitialized")).then_some(())
            },
        )
        .await;

        let kubeconfig = secrets.get("c-kubeconfig").await.expect("c-kubeconfig");
        let value = &kubeconfig.data.as_ref().expect("data")["value"].0;
        let kc =
            Kubeconfig::from_yaml(std::str::from_utf8(value).expect("utf-8")).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("workload config");
        let workload = Client::try_from(config).expect("workload client");
        let nodes: Api<Node> = Api::all(workload.clone());
        let mut want: Vec<String> = all.iter().map(|m| m.to_string()).collect();
        want.sort();
        let mut got = node_names(&nodes).await;
        got.sort();
        assert_eq!(got, want, "the in-memory workload cluster's Nodes");

        if mhc {
            let n = workers.len();
            eventually(
                Duration::from_secs(60),
                "the MHC counting every worker healthy",
                || async {
                    let h = mhcs.get("workers").await.ok()?;
                    let s = &h.data["status"];
                    (s["expectedMachines"] == n && s["currentHealthy"] == n).then_some(())
                },
            )
            .await;
        }
        eprintln!(
            "in-memory provider: {} Machines Running with their nodeRef {provisioned_in:?} after creation",
            all.len()
        );
        (
            Self {
                machines,
                dev_machines,
                workload,
                provisioned_in,
                _capd: capd,
                _capi: capi,
                cluster,
                _lock: guard,
            },
            ns,
        )
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.workload.clone())
    }

    /// How long until `done` holds, `None` if not within `secs`.
    pub(crate) async fn wait<F, Fut>(&self, secs: u64, mut done: F) -> Option<Duration>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(secs) {
            if done().await {
                return Some(start.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }
}

impl MhcFleet for Fleet {
    fn machines(&self) -> &Api<DynamicObject> {
        &self.machines
    }

    /// Writes the Node's Ready condition in the workload cluster as the node
    /// lifecycle controller would: `True` (kubelet posting) or `Unknown`
    /// (kubelet stopped posting), with the transition at now. The fake
    /// apiserver has no status subresource: the Node itself is patched.
    async fn set_ready(&self, machine: &str, status: &str) {
        // A transition time has whole seconds: written at the start of one,
        // it is when the test's clock starts, not up to a second before.
        let sub = chrono::Utc::now().timestamp_subsec_nanos();
        tokio::time::sleep(Duration::from_nanos(u64::from(
            1_000_000_000 - sub.min(999_999_999),
        )))
        .await;
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let (reason, message) = match status {
            "True" => ("KubeletReady", "kubelet is posting ready status"),
            _ => ("NodeStatusUnknown", "Kubelet stopped posting node status."),
        };
        let nodes = self.nodes();
        let node = nodes.get(machine).await.expect("node");
        // A merge patch replaces the list: keep the other conditions.
        let mut conditions: Vec<Value> = node
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.type_ != "Ready")
            .map(|c| serde_json::to_value(c).expect("condition"))
            .collect();
        conditions.push(json!({
            "type": "Ready", "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        }));
        nodes
            .patch(
                machine,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": conditions}})),
            )
            .await
            .unwrap_or_else(|e| panic!("node {machine} Ready={status}: {e}"));
    }
}

/// Creates `rbac` (ClusterRoles, ClusterRoleBindings) and writes a copy of
/// the cluster's kubeconfig that acts as `user`; returns its path.
async fn impersonating(
    client: &Client,
    cluster: &TestCluster,
    user: &str,
    rbac: Vec<Value>,
) -> std::path::PathBuf {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    for obj in rbac {
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let created = match kind.as_str() {
            "ClusterRole" => Api::<ClusterRole>::all(client.clone())
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(obj).expect("role"),
                )
                .await
                .map(|_| ()),
            "ClusterRoleBinding" => Api::<ClusterRoleBinding>::all(client.clone())
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(obj).expect("binding"),
                )
                .await
                .map(|_| ()),
            other => panic!("not RBAC: {other}"),
        };
        created.unwrap_or_else(|e| panic!("create {kind}: {e}"));
    }
    let mut kc: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&cluster.kubeconfig).expect("kubeconfig"))
            .expect("kubeconfig yaml");
    for u in kc["users"].as_array_mut().expect("users") {
        u["user"]["as"] = json!(user);
    }
    let path = cluster.dir.join("kubeconfig-as");
    std::fs::write(&path, serde_yaml_ng::to_string(&kc).expect("yaml")).expect("write");
    path
}

/// The names of the workload cluster's Nodes.
async fn node_names(nodes: &Api<Node>) -> Vec<String> {
    nodes
        .list(&Default::default())
        .await
        .expect("the workload cluster's Nodes")
        .items
        .iter()
        .map(|n| n.name_any())
        .collect()
}

fn condition(o: &DynamicObject, type_: &str) -> Option<(String, String)> {
    let c = o.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .clone();
    Some((
        c["status"].as_str()?.to_string(),
        c["reason"].as_str().unwrap_or_default().to_string(),
    ))
}

/// remedy watching Machines (v1beta2, the manager's storage version), with
/// an outage breaker that holds once three Machines fail and releases
/// `cooldown` after.
fn config(ns: &str, cooldown: &str) -> String {
    format!(
        "namespaces: [{ns}]\ntick: 500ms\nleader_election: {{enabled: false}}\n\
         breaker: {{open_ratio: 0.3, close_ratio: 0.1, min_resources: 3, window: 1s, cooldown: {cooldown}}}\n\
         backoff: {{base: 1s, cap: 2s}}\n\
         budget: {{refill_per_second: 5, burst: 5}}\n\
         profiles:\n\
         - {{builtin: capi-machine, version: v1beta2}}\n"
    )
}

/// What a CAPI v1beta2 Machine shows after its provider's create got a 503
/// (CAPD's in-memory backend has no failure to inject): transient for
/// remedy. The MHC does not read these fields.
pub(crate) fn failed_status() -> Value {
    json!({"deprecated": {"v1beta1": {
        "failureReason": "CreateError",
        "failureMessage": "Expected HTTP response code [202] when accessing [POST https://nova:8774/v2.1/servers], but got 503 instead",
    }}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_mhc_replaces_an_in_memory_machine_remedy_has_no_reason_to_hold() {
    if !runnable() {
        return;
    }
    let (fleet, ns) = Fleet::create("capd-mhc-free", &["w-0", "w-1"], true).await;
    let remedy = Remedy::serve(&fleet.cluster, &config(&ns, "2s"));
    remedy.wait_watching(&["Machine"]).await;

    fleet.set_ready("w-0", "Unknown").await;
    let took = fleet.wait_deleted("w-0", 30).await.unwrap_or_else(|| {
        panic!(
            "w-0 not deleted 30 s after its Node went Unknown (rule {RULE_SECS} s)\n{}",
            remedy.log_tail()
        )
    });
    assert!(
        took >= Duration::from_secs(RULE_SECS),
        "deleted before the rule's {RULE_SECS} s: {took:?}"
    );
    // The real provider finishes the deletion: the Machine, its DevMachine
    // and its Node in the workload cluster go.
    let nodes = fleet.nodes();
    let gone = fleet
        .wait(60, || async {
            fleet.machines.get_opt("w-0").await.expect("get").is_none()
                && fleet
                    .dev_machines
                    .get_opt("w-0")
                    .await
                    .expect("get")
                    .is_none()
                // The fake apiserver answers a missing object without a
                // Status kube can read: list instead.
                && !node_names(&nodes).await.iter().any(|n| n == "w-0")
        })
        .await
        .expect("w-0's Machine, DevMachine and Node gone within 60 s of its deletion");
    // Its healthy sibling stays, and remedy wrote nothing on either.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!fleet.deleted("w-1").await, "w-1's Node is Ready");
    assert_eq!(
        fleet.condition("w-1", "HealthCheckSucceeded").await,
        Some(("True".into(), "HealthCheckSucceeded".into()))
    );
    assert!(node_names(&nodes).await.iter().any(|n| n == "w-1"));
    let hold = remedy
        .metric(r#"remedy_actions_total{action="hold",result="success"}"#)
        .await;
    assert_eq!(hold, 0.0, "remedy held something\n{}", remedy.log_tail());
    let w1 = fleet.machines.get("w-1").await.expect("w-1");
    assert!(
        !w1.annotations().contains_key(CAPI_PAUSED),
        "{:?}",
        w1.annotations()
    );
    eprintln!(
        "real MHC {} + CAPD in-memory, remedy running: w-0 deleted {took:?} after its Node went Unknown \
         (rule {RULE_SECS} s); Machine, DevMachine and workload Node gone {gone:?} later; \
         fleet provisioned in {:?}",
        CAPI.version(),
        fleet.provisioned_in
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_mhc_leaves_in_memory_machines_remedy_holds_and_judges_them_afresh_once_released()
{
    if !runnable() {
        return;
    }
    // w-0..w-2 fail and are held; w-3 is not. Nodes: w-0 Unknown through
    // the hold and after; w-1 Unknown, then Ready again before the release;
    // w-2 Ready throughout; w-3 Unknown (the control: not held, so the MHC
    // replaces it as usual).
    let (fleet, ns) = Fleet::create("capd-mhc-held", &["w-0", "w-1", "w-2", "w-3"], true).await;
    // The cooldown outlasts the 20 s watched below.
    let remedy = Remedy::serve(&fleet.cluster, &config(&ns, "35s"));
    remedy.wait_watching(&["Machine"]).await;
    let kept = held_machines_are_kept_then_judged_afresh(&fleet, &remedy, failed_status()).await;
    eprintln!(
        "real MHC {} + CAPD in-memory and remedy's hold: not-held w-3 deleted {w3_deleted:?} after its Node went Unknown; \
         held w-0 kept {:?} while held (Node Unknown throughout), deleted {w0_after_release:?} after remedy released it; \
         w-1 (Node Ready again during the hold) and w-2 (Ready) kept 10 s after release",
        CAPI.version(),
        kept.w0_kept,
        w3_deleted = kept.w3_deleted,
        w0_after_release = kept.w0_after_release,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_stops_the_real_machine_controller_on_an_in_memory_machine_and_release_resumes_it() {
    if !runnable() {
        return;
    }
    let (fleet, ns) = Fleet::create("capd-pause", &["w-0", "w-1"], false).await;
    let client = fleet.cluster.client().await;
    let ex = executor(client.clone(), Arc::new(Metrics::new(100)), false);
    let mut profile = builtin("capi-machine").expect("profile");
    profile.version = "v1beta2".into();
    for m in ["w-0", "w-1"] {
        assert_eq!(
            fleet.condition(m, "Paused").await.map(|c| c.0).as_deref(),
            Some("False")
        );
        // Running comes before the Machine controller has read the Node; on
        // a loaded machine NodeReady is still Unknown then.
        eventually(
            Duration::from_secs(60),
            "the Machine follows its Node",
            || {
                let fleet = &fleet;
                async move {
                    let ready = fleet.condition(m, "NodeReady").await.map(|c| c.0);
                    (ready.as_deref() == Some("True")).then_some(())
                }
            },
        )
        .await;
    }

    // remedy holds w-0 (as its breaker would).
    let out = ex
        .run(
            &profile,
            &ResourceKey::new("Machine", &ns, "w-0"),
            &Goal::Hold(HoldMark {
                since: chrono::Utc::now(),
                reason: "breaker".into(),
                crash_count: 1,
                value: None,
            }),
        )
        .await
        .expect("hold w-0");
    assert_eq!(out.steps, vec![Step::Hold]);
    let paused_in = fleet
        .wait(20, || async {
            fleet
                .condition("w-0", "Paused")
                .await
                .map(|c| c.0)
                .as_deref()
                == Some("True")
        })
        .await
        .expect("held: Paused=True");
    // The provider is not paused by it: CAPD looks at the Cluster's and
    // the DevMachine's pause only.
    let dev = fleet.dev_machines.get("w-0").await.expect("DevMachine");
    assert_eq!(
        condition(&dev, "Paused").map(|c| c.0).as_deref(),
        Some("False"),
        "{}",
        dev.data["status"]
    );

    // Both Nodes go Unknown: the free Machine follows, the held one not.
    fleet.set_ready("w-0", "Unknown").await;
    fleet.set_ready("w-1", "Unknown").await;
    let followed = fleet
        .wait(20, || async {
            fleet
                .condition("w-1", "NodeReady")
                .await
                .map(|c| c.0)
                .as_deref()
                == Some("Unknown")
        })
        .await
        .expect("the free Machine follows its Node");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        fleet
            .condition("w-0", "NodeReady")
            .await
            .map(|c| c.0)
            .as_deref(),
        Some("True"),
        "the held Machine's controller did not run"
    );

    // remedy (a new leader: it serves the 2 s cooldown first) releases it.
    let remedy = Remedy::serve(&fleet.cluster, &config(&ns, "2s"));
    remedy.wait_ready().await;
    let started = Instant::now();
    remedy
        .until(Duration::from_secs(30), "w-0 released", || async {
            !fleet.held("w-0").await
        })
        .await;
    let released = started.elapsed();
    let resumed = fleet
        .wait(10, || async {
            fleet
                .condition("w-0", "Paused")
                .await
                .map(|c| c.0)
                .as_deref()
                == Some("False")
                && fleet
                    .condition("w-0", "NodeReady")
                    .await
                    .map(|c| c.0)
                    .as_deref()
                    == Some("Unknown")
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "w-0 not resumed 10 s after its release\n{}",
                remedy.log_tail()
            )
        });
    eprintln!(
        "real CAPI {} + CAPD in-memory: remedy's hold paused w-0 in {paused_in:?} (its DevMachine not paused); \
         w-1 followed its Node to Unknown in {followed:?}, held w-0 did not in 10 s; \
         released {released:?} after remedy started, resumed and followed its Node {resumed:?} later",
        CAPI.version()
    );
}
