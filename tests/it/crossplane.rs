//! A hold must stop the controller it is meant to stop. Crossplane pauses a
//! managed resource only when `crossplane.io/paused` is exactly "true"
//! (crossplane-runtime pkg/meta `IsPaused`): a custom hold without `value`
//! writes exactly that, and remedy's marker (what the built-in CAPI profiles
//! write) would not stop it. Run on a real Crossplane
//! managed-resource CRD (provider-kubernetes `Object`), with a stand-in for
//! the provider's reconciler (there is no cloud here) that follows that rule.
//! Also: a CAPI Cluster held through `spec.paused` on the real v1beta2 CRD.

use crate::support::{Remedy, TestCluster, eventually, namespace};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use remedy::model::profile::{HOLD_ANNOTATION, HoldMark, HoldSpec, PAUSE_MARKER, builtin};
use remedy::model::view::{PauseState, ResourceKey};
use remedy::remediate::step::{Done, Goal, Step};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const PAUSED: &str = "crossplane.io/paused";

/// crossplane-runtime's rule (pkg/meta/meta.go, `IsPaused`).
fn crossplane_is_paused(a: &BTreeMap<String, String>) -> bool {
    a.get(PAUSED).map(String::as_str) == Some("true")
}

fn annotations(o: &DynamicObject) -> BTreeMap<String, String> {
    o.metadata.annotations.clone().unwrap_or_default()
}

fn objects_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("kubernetes.m.crossplane.io", "v1alpha1", "Object");
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, "objects"),
    )
}

/// The managed-resource reconciler: every poll, an object that is not
/// paused observes its external resource (one cloud call) and writes the
/// outcome to its conditions, as crossplane-runtime does.
fn reconciler(
    api: Api<DynamicObject>,
    cloud_up: Arc<AtomicBool>,
    calls: Arc<std::sync::Mutex<HashMap<String, u64>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Ok(list) = api.list(&ListParams::default()).await {
                for o in list.items {
                    if crossplane_is_paused(&annotations(&o)) {
                        continue;
                    }
                    let name = o.metadata.name.clone().unwrap_or_default();
                    if let Ok(mut c) = calls.lock() {
                        *c.entry(name.clone()).or_default() += 1;
                    }
                    let synced = if cloud_up.load(Ordering::SeqCst) {
                        json!({"type": "Synced", "status": "True", "reason": "ReconcileSuccess",
                               "lastTransitionTime": "2026-12-03T00:00:00Z"})
                    } else {
                        json!({"type": "Synced", "status": "False", "reason": "ReconcileError",
                               "message": "cannot observe external resource: 503 Service Unavailable",
                               "lastTransitionTime": "2026-12-03T00:00:00Z"})
                    };
                    let _ = api
                        .patch_status(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"status": {"conditions": [synced]}})),
                        )
                        .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

#[tokio::test]
async fn a_crossplane_managed_resource_is_held_with_the_value_crossplane_reads() {
    // remedy's marker, which the built-in CAPI profiles write, would not
    // stop Crossplane; a custom hold without `value` writes "true" (#27).
    let marker = [(PAUSED.to_string(), PAUSE_MARKER.to_string())].into();
    assert!(!crossplane_is_paused(&marker));

    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "crossplane").await;
    let api = objects_api(&client, &ns);
    for i in 0..6 {
        let mut meta = json!({"name": format!("obj-{i}")});
        if i == 5 {
            // Paused by a human before remedy: never remedy's to release.
            meta["annotations"] = json!({PAUSED: "true"});
        }
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "Object",
            "metadata": meta,
            "spec": {"forProvider": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": format!("cm-{i}")}, "data": {"a": "b"}}}}
        }))
        .expect("object");
        api.create(&PostParams::default(), &o)
            .await
            .expect("create");
    }
    let cloud_up = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(std::sync::Mutex::new(HashMap::new()));
    let task = reconciler(api.clone(), cloud_up.clone(), calls.clone());

    let config = format!(
        "namespaces: [{ns}]\ntick: 200ms\nleader_election: {{enabled: false}}\n\
         profiles:\n\
         - name: crossplane-object\n  group: kubernetes.m.crossplane.io\n  version: v1alpha1\n  kind: Object\n  plural: objects\n\
         \x20 fields: {{conditions: [/status/conditions]}}\n\
         \x20 hold: {{annotation: {PAUSED}}}\n\
         backoff: {{base: 1s, cap: 2s, quiet_window: 100000h}}\n\
         budget: {{refill_per_second: 10, burst: 10}}\n\
         breaker: {{open_ratio: 0.3, close_ratio: 0.1, min_resources: 3, window: 1s, cooldown: 2s}}\n"
    );
    let remedy = Remedy::serve(cluster, &config);
    remedy.wait_ready().await;

    // The cloud is down: the breaker holds the 5 failing objects with "true".
    eventually(Duration::from_secs(30), "5 objects held", || async {
        let held = api
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .iter()
            .filter(|o| annotations(o).contains_key(HOLD_ANNOTATION))
            .count();
        (held == 5).then_some(())
    })
    .await;
    for o in api.list(&ListParams::default()).await.expect("list").items {
        let a = annotations(&o);
        assert_eq!(a.get(PAUSED).map(String::as_str), Some("true"), "{a:?}");
        if o.metadata.name.as_deref() == Some("obj-5") {
            assert!(
                !a.contains_key(HOLD_ANNOTATION),
                "a human's pause is not taken over"
            );
            continue;
        }
        let rec = HoldMark::parse(&a[HOLD_ANNOTATION]).expect("hold record");
        assert_eq!(
            rec.value,
            Some(Value::from("true")),
            "the record says what remedy wrote"
        );
    }
    // Held means stopped: the reconciler makes no more cloud calls.
    let snapshot = calls.lock().expect("calls").clone();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        *calls.lock().expect("calls"),
        snapshot,
        "held objects still reconcile"
    );

    // A human takes obj-0 over by removing remedy's record: it stays paused.
    api.patch(
        "obj-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {HOLD_ANNOTATION: null}}})),
    )
    .await
    .expect("take over");

    // The cloud recovers: once the breaker closes remedy releases its own
    // holds, and the reconciler syncs them.
    cloud_up.store(true, Ordering::SeqCst);
    eventually(
        Duration::from_secs(30),
        "released objects synced",
        || async {
            let items = api.list(&ListParams::default()).await.expect("list").items;
            let released: Vec<&DynamicObject> = items
                .iter()
                .filter(|o| !matches!(o.metadata.name.as_deref(), Some("obj-0" | "obj-5")))
                .collect();
            let synced = released.iter().all(|o| {
                !annotations(o).contains_key(PAUSED)
                    && o.data["status"]["conditions"][0]["status"] == "True"
            });
            (synced && released.len() == 4).then_some(())
        },
    )
    .await;
    for name in ["obj-0", "obj-5"] {
        let o = api.get(name).await.expect("get");
        assert_eq!(
            annotations(&o).get(PAUSED).map(String::as_str),
            Some("true"),
            "{name}: a pause remedy does not own is never removed\n{}",
            remedy.log_tail()
        );
    }
    task.abort();
}

#[tokio::test]
async fn a_capi_cluster_is_held_through_spec_paused_on_the_real_crd() {
    let client = TestCluster::shared().client().await;
    let ns = namespace(&client, "cluster-paused").await;
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster");
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(&gvk, "clusters"),
    );
    for (name, paused) in [("c-remedy", false), ("c-human", true)] {
        let mut spec = json!({"controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443}});
        if paused {
            spec["paused"] = json!(true);
        }
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": name}, "spec": spec}))
        .expect("cluster");
        api.create(&PostParams::default(), &o)
            .await
            .expect("create");
    }
    let mut p = builtin("capi-cluster").expect("profile");
    p.version = "v1beta2".into();
    p.hold = Some(HoldSpec::field("/spec/paused"));
    p.validate().expect("valid");
    let ex = crate::remediate::executor(
        client.clone(),
        Arc::new(remedy::metrics::Metrics::new(10)),
        false,
    );
    let record = HoldMark {
        since: chrono::Utc::now(),
        reason: "breaker".into(),
        crash_count: 1,
        value: None,
    };
    let key = ResourceKey::new("Cluster", &ns, "c-remedy");
    let out = ex
        .run(&p, &key, &Goal::Hold(record.clone()))
        .await
        .expect("hold");
    assert_eq!(out.steps, vec![Step::Hold]);
    let held = api.get("c-remedy").await.expect("get");
    assert_eq!(held.data["spec"]["paused"], json!(true));
    assert!(matches!(
        p.project(&held).view.pause,
        PauseState::Ours { .. }
    ));
    let out = ex.run(&p, &key, &Goal::Release).await.expect("release");
    assert_eq!(out.steps, vec![Step::Unpause]);
    let released = api.get("c-remedy").await.expect("get");
    assert!(
        released.data["spec"]
            .get("paused")
            .is_none_or(|v| *v == json!(false)),
        "{:?}",
        released.data["spec"]
    );
    assert!(!annotations(&released).contains_key(HOLD_ANNOTATION));

    // Paused by someone else (clusterctl move does this): untouched.
    let other = ResourceKey::new("Cluster", &ns, "c-human");
    for goal in [Goal::Hold(record.clone()), Goal::Release, Goal::Remediate] {
        let out = ex.run(&p, &other, &goal).await.expect("run");
        assert_eq!(out.done, Done::ForeignPause, "{goal:?}");
        assert!(out.steps.is_empty());
    }
    assert_eq!(
        api.get("c-human").await.expect("get").data["spec"]["paused"],
        json!(true)
    );
}
