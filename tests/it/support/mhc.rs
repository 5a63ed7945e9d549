//! remedy beside the real MachineHealthCheck, the same scenario on two
//! kinds of fleet: `capi_mhc.rs` (a stand-in infrastructure provider, Nodes
//! on the management cluster) and `capi_inmemory.rs` (CAPD's in-memory
//! provider, Nodes in its workload cluster). A fleet says how its Machines
//! are read and how a Node's Ready condition is written; the rest is here.

use super::Remedy;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use remedy::model::profile::{CAPI_PAUSED, HOLD_ANNOTATION, PAUSE_MARKER};
use remedy::model::scope::CLUSTER_NAME_LABEL;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Machines `w-0`..`w-3` under a MachineHealthCheck whose Node rule is a
/// few seconds, each with its Node.
pub trait MhcFleet {
    fn machines(&self) -> &Api<DynamicObject>;

    /// Writes the Ready condition of `machine`'s Node (`True` or `Unknown`).
    fn set_ready(&self, machine: &str, status: &str) -> impl Future<Output = ()>;

    /// Gone, or being deleted.
    fn deleted(&self, machine: &str) -> impl Future<Output = bool> {
        async move {
            match self.machines().get_opt(machine).await.expect("get machine") {
                None => true,
                Some(o) => o.metadata.deletion_timestamp.is_some(),
            }
        }
    }

    fn held(&self, machine: &str) -> impl Future<Output = bool> {
        async move {
            self.machines()
                .get_opt(machine)
                .await
                .expect("get machine")
                .is_some_and(|o| {
                    o.annotations().get(CAPI_PAUSED).map(String::as_str) == Some(PAUSE_MARKER)
                })
        }
    }

    /// How long until `machine` is deleted, `None` if not within `secs`.
    fn wait_deleted(&self, machine: &str, secs: u64) -> impl Future<Output = Option<Duration>> {
        async move {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(secs) {
                if self.deleted(machine).await {
                    return Some(start.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            None
        }
    }

    /// The Machine's condition `type_`, `(status, reason)`.
    fn condition(
        &self,
        machine: &str,
        type_: &str,
    ) -> impl Future<Output = Option<(String, String)>> {
        async move {
            let o = self.machines().get_opt(machine).await.ok()??;
            condition(&o, type_)
        }
    }
}

/// The condition `type_` of `o`, `(status, reason)`.
pub fn condition(o: &DynamicObject, type_: &str) -> Option<(String, String)> {
    let c = o.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    Some((
        c["status"].as_str()?.to_string(),
        c["reason"].as_str().unwrap_or_default().to_string(),
    ))
}

/// What [`held_machines_are_kept_then_judged_afresh`] measured.
pub struct Kept {
    /// The unheld control `w-3`: deleted this long after its Node went Unknown.
    pub w3_deleted: Duration,
    /// How long `w-0` was kept, held, with its Node Unknown.
    pub w0_kept: Duration,
    /// `w-0` deleted this long after remedy released it.
    pub w0_after_release: Duration,
}

/// `w-0`..`w-2` fail (`failed_status`) and remedy's breaker holds them;
/// `w-3` does not fail. Nodes: `w-0` Unknown through the hold and after,
/// `w-1` Unknown then Ready again before the release, `w-2` Ready
/// throughout, `w-3` Unknown (the control: not held, so the MHC replaces
/// it as usual). remedy's cooldown must outlast the 20 s watched here.
/// The held ones stay however long their Node is Unknown; once released
/// the MHC judges them as they are then: `w-0` deleted, `w-1` and `w-2`
/// kept, their failure cleared and their pause gone.
pub async fn held_machines_are_kept_then_judged_afresh(
    fleet: &impl MhcFleet,
    remedy: &Remedy,
    failed_status: Value,
) -> Kept {
    for m in ["w-0", "w-1", "w-2"] {
        fleet
            .machines()
            .patch_status(
                m,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": failed_status})),
            )
            .await
            .unwrap_or_else(|e| panic!("status of {m}: {e}"));
    }
    remedy
        .until(
            Duration::from_secs(30),
            "w-0, w-1, w-2 held by the breaker",
            || async {
                fleet.held("w-0").await && fleet.held("w-1").await && fleet.held("w-2").await
            },
        )
        .await;
    let held_at = Instant::now();
    assert!(!fleet.held("w-3").await, "w-3 does not fail");

    for m in ["w-0", "w-1", "w-3"] {
        fleet.set_ready(m, "Unknown").await;
    }
    let unknown_at = Instant::now();
    // Well past the rule: the held ones stay, the free one goes.
    let mut w3_deleted = None;
    let mut w1_recovered = false;
    while unknown_at.elapsed() < Duration::from_secs(20) {
        for m in ["w-0", "w-1", "w-2"] {
            assert!(
                !fleet.deleted(m).await,
                "{m} deleted {:?} after its Node went Unknown, while remedy held it",
                unknown_at.elapsed()
            );
        }
        if w3_deleted.is_none() && fleet.deleted("w-3").await {
            w3_deleted = Some(unknown_at.elapsed());
        }
        if !w1_recovered && unknown_at.elapsed() > Duration::from_secs(12) {
            fleet.set_ready("w-1", "True").await;
            w1_recovered = true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for m in ["w-0", "w-1", "w-2"] {
        assert!(
            fleet.held(m).await,
            "{m} released {:?} after the hold: the cooldown is too short for this test",
            held_at.elapsed()
        );
    }
    let w3_deleted = w3_deleted.unwrap_or_else(|| panic!("w-3 (not held) was not deleted in 20 s"));

    // The breaker closes: remedy clears each failure and unpauses.
    remedy
        .until(Duration::from_secs(40), "w-0 released", || async {
            !fleet.held("w-0").await
        })
        .await;
    let released_at = Instant::now();
    let w0_after_release = fleet.wait_deleted("w-0", 20).await.unwrap_or_else(|| {
        panic!(
            "w-0 (Node Unknown for {:?}) not deleted 20 s after its release\n{}",
            unknown_at.elapsed(),
            remedy.log_tail()
        )
    });
    remedy
        .until(Duration::from_secs(20), "w-1 and w-2 released", || async {
            !fleet.held("w-1").await && !fleet.held("w-2").await
        })
        .await;
    // Healthy Nodes: the MHC finds nothing to do after the release.
    tokio::time::sleep(Duration::from_secs(10)).await;
    for m in ["w-1", "w-2"] {
        assert!(
            !fleet.deleted(m).await,
            "{m} deleted after its release, its Node Ready"
        );
        let o = fleet.machines().get(m).await.expect("machine");
        assert!(
            o.data["status"]["deprecated"]["v1beta1"]
                .get("failureReason")
                .is_none(),
            "{m}: remedy's release clears the failure: {}",
            o.data["status"]
        );
        assert!(!o.annotations().contains_key(CAPI_PAUSED), "{m} unpaused");
        assert!(
            !o.annotations().contains_key(HOLD_ANNOTATION),
            "{m} record gone"
        );
        assert_eq!(
            fleet.condition(m, "HealthCheckSucceeded").await,
            Some(("True".into(), "HealthCheckSucceeded".into())),
            "{m}"
        );
    }
    Kept {
        w3_deleted,
        w0_kept: released_at.duration_since(unknown_at),
        w0_after_release,
    }
}

/// The label the MachineSet and the MachineHealthCheck select workers by.
pub const POOL_LABEL: &str = "remedy.test/pool";

/// The MachineSet `workers` of Cluster `c`. Its Machines are the test's
/// (named, so each plays a part): a deleted one is not replaced.
/// `infrastructure_ref` is its template's.
pub fn worker_set(replicas: usize, infrastructure_ref: Value) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
        "metadata": {
            "name": "workers",
            "annotations": {"cluster.x-k8s.io/disable-machine-create": "true"},
        },
        "spec": {
            "clusterName": "c",
            "replicas": replicas,
            "selector": {"matchLabels": {POOL_LABEL: "workers"}},
            "template": {
                "metadata": {"labels": {POOL_LABEL: "workers"}},
                "spec": {
                    "clusterName": "c",
                    "bootstrap": {"dataSecretName": "bootstrap"},
                    "infrastructureRef": infrastructure_ref,
                },
            },
        },
    })
}

/// Machine `name` of Cluster `c`: `cp-0` is the control plane, the others
/// are workers of the MachineSet with `set_uid`. No bootstrap provider: the
/// data Secret's name is what the controllers wait for; nothing boots.
pub fn machine(name: &str, set_uid: &str, infrastructure_ref: Value) -> Value {
    let mut labels = json!({CLUSTER_NAME_LABEL: "c"});
    let mut owners = json!([]);
    if name == "cp-0" {
        labels["cluster.x-k8s.io/control-plane"] = json!("");
    } else {
        labels[POOL_LABEL] = json!("workers");
        owners = json!([{
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "name": "workers", "uid": set_uid, "controller": true, "blockOwnerDeletion": true,
        }]);
    }
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": name, "labels": labels, "ownerReferences": owners},
        "spec": {
            "clusterName": "c",
            "bootstrap": {"dataSecretName": "bootstrap"},
            "infrastructureRef": infrastructure_ref,
        },
    })
}

/// The MachineHealthCheck `workers`: a worker whose Node has been Ready
/// Unknown for `rule_secs` is unhealthy.
pub fn worker_health_check(rule_secs: u64) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
        "metadata": {"name": "workers"},
        "spec": {
            "clusterName": "c",
            "selector": {"matchLabels": {POOL_LABEL: "workers"}},
            "checks": {
                "unhealthyNodeConditions": [
                    {"type": "Ready", "status": "Unknown", "timeoutSeconds": rule_secs},
                ],
            },
        },
    })
}
