//! A stand-in for CAPO's OpenStackMachine controller. There is no OpenStack
//! here, so the cloud is a flag and the controller is this loop; what it
//! does with an object follows the real controller's rules
//! (cluster-api-provider-openstack v0.14, controllers/openstackmachine_controller.go):
//! - paused (`annotations.IsPaused`: the `cluster.x-k8s.io/paused` key is
//!   present, whatever its value) → nothing;
//! - failed (`status.failureReason` or `failureMessage` set) → "Not
//!   reconciling machine in failed state", nothing;
//! - otherwise it reconciles after every update: one cloud call to create
//!   the server; a 503 sets failureReason/failureMessage and the
//!   InstanceReady=False condition, success makes the machine ready.
//!
//! Like a controller behind a busy work queue, it reacts `delay` after it
//! first sees a new resourceVersion, so remedy sees every state in between.

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

pub const GOT_503: &str = "Expected HTTP response code [202] when accessing [POST https://nova.example:8774/v2.1/servers], but got 503 instead";

pub struct StandInCapo {
    pub cloud_up: Arc<AtomicBool>,
    /// Server create calls made (each one reaches the cloud).
    pub calls: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandInCapo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn paused(o: &DynamicObject) -> bool {
    o.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("cluster.x-k8s.io/paused"))
}

fn failed(o: &DynamicObject) -> bool {
    let s = &o.data["status"];
    !s["failureReason"].is_null() || !s["failureMessage"].is_null()
}

fn ready(o: &DynamicObject) -> bool {
    o.data["status"]["ready"] == Value::Bool(true)
}

/// Whether the cloud answers for this machine.
type Cloud = Arc<dyn Fn(&DynamicObject) -> bool + Send + Sync>;

/// The zone label a machine is in, for [`StandInCapo::start_zoned`].
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

impl StandInCapo {
    pub fn start(api: Api<DynamicObject>, delay: Duration) -> Self {
        let cloud_up = Arc::new(AtomicBool::new(false));
        let up = cloud_up.clone();
        Self::start_with(
            api,
            delay,
            cloud_up,
            Arc::new(move |_| up.load(Ordering::SeqCst)),
        )
    }

    /// A cloud per zone (the machine's `topology.kubernetes.io/zone`
    /// label); a machine in no listed zone finds the cloud down.
    pub fn start_zoned(
        api: Api<DynamicObject>,
        delay: Duration,
        zones: HashMap<String, Arc<AtomicBool>>,
    ) -> Self {
        let cloud: Cloud = Arc::new(move |o: &DynamicObject| {
            o.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(ZONE_LABEL))
                .and_then(|z| zones.get(z))
                .is_some_and(|up| up.load(Ordering::SeqCst))
        });
        Self::start_with(api, delay, Arc::new(AtomicBool::new(false)), cloud)
    }

    fn start_with(
        api: Api<DynamicObject>,
        delay: Duration,
        cloud_up: Arc<AtomicBool>,
        cloud: Cloud,
    ) -> Self {
        let calls = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(run(api, delay, cloud, calls.clone()));
        Self {
            cloud_up,
            calls,
            task,
        }
    }
}

async fn run(api: Api<DynamicObject>, delay: Duration, cloud: Cloud, calls: Arc<AtomicU64>) {
    // name → (resourceVersion, first seen); reconciled versions are skipped.
    let mut seen: HashMap<String, (String, Instant)> = HashMap::new();
    let mut done: HashMap<String, String> = HashMap::new();
    let pp = PatchParams::default();
    loop {
        let Ok(list) = api.list(&ListParams::default()).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        for o in list.items {
            let name = o.metadata.name.clone().unwrap_or_default();
            let rv = o.metadata.resource_version.clone().unwrap_or_default();
            if done.get(&name) == Some(&rv) {
                continue;
            }
            let first = match seen.get(&name) {
                Some((v, at)) if *v == rv => *at,
                _ => {
                    seen.insert(name.clone(), (rv.clone(), Instant::now()));
                    continue;
                }
            };
            if first.elapsed() < delay {
                continue;
            }
            done.insert(name.clone(), rv);
            if paused(&o) || failed(&o) || ready(&o) {
                continue;
            }
            calls.fetch_add(1, Ordering::SeqCst);
            let status = if cloud(&o) {
                json!({"ready": true, "instanceState": "ACTIVE", "instanceID": format!("id-{name}"),
                       "conditions": [{"type": "InstanceReady", "status": "True",
                                       "lastTransitionTime": "2026-12-03T00:00:00Z"}]})
            } else {
                json!({"ready": false, "failureReason": "CreateError",
                       "failureMessage": format!("create OpenStack instance: {GOT_503}"),
                       "conditions": [{"type": "InstanceReady", "status": "False", "severity": "Error",
                                       "reason": "InstanceCreateFailed", "message": GOT_503,
                                       "lastTransitionTime": "2026-12-03T00:00:00Z"}]})
            };
            // A conflict means a newer version: it is reconciled when seen.
            let _ = api
                .patch_status(&name, &pp, &Patch::Merge(json!({ "status": status })))
                .await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
