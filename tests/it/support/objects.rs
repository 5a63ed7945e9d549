//! Loading the real-shaped samples in `testenv/samples` into a namespace.
//! Status is dropped on create (status subresource), so it is patched after.

use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use remedy::model::profile::{Profile, builtins};
use serde_json::Value;
use std::collections::BTreeMap;

pub fn sample(name: &str) -> DynamicObject {
    let path = super::repo().join("testenv/samples").join(name);
    let text = std::fs::read_to_string(&path).expect("sample");
    serde_yaml_ng::from_str(&text).expect("sample yaml")
}

pub fn profile_for(obj: &DynamicObject) -> Profile {
    let kind = obj
        .types
        .as_ref()
        .map(|t| t.kind.clone())
        .unwrap_or_default();
    builtins()
        .into_iter()
        .find(|p| p.kind == kind)
        .expect("a built-in profile for the sample kind")
}

/// The API of the object's own apiVersion (which may differ from the
/// version remedy watches, e.g. a v1beta2 Machine).
pub fn api_for(client: &Client, obj: &DynamicObject, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::try_from(obj.types.as_ref().expect("types")).expect("gvk");
    let ar = ApiResource::from_gvk_with_plural(&gvk, &profile_for(obj).plural());
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Creates the object in `ns` (name kept) with its status; returns it.
pub async fn create_with_status(
    client: &Client,
    mut obj: DynamicObject,
    ns: &str,
) -> DynamicObject {
    obj.metadata.namespace = Some(ns.to_string());
    obj.metadata.owner_references = None;
    obj.metadata.resource_version = None;
    obj.metadata.uid = None;
    let status = obj.data.get("status").cloned();
    let api = api_for(client, &obj, ns);
    let created = api
        .create(&PostParams::default(), &obj)
        .await
        .expect("create sample");
    match status {
        Some(s) => {
            set_status(
                &api,
                created.metadata.name.as_deref().unwrap_or_default(),
                s,
            )
            .await
        }
        None => created,
    }
}

pub async fn set_status(api: &Api<DynamicObject>, name: &str, status: Value) -> DynamicObject {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await
    .expect("patch status")
}

/// Server-side applies a manifest object (a dry run when `dry_run`),
/// resolving its kind by discovery. A namespaced object without a namespace
/// goes to `default_ns`; with none given that is an error of the manifest.
/// Returns the object's kind.
pub async fn apply_manifest(
    client: &Client,
    discovery: &kube::Discovery,
    mut obj: DynamicObject,
    default_ns: Option<&str>,
    dry_run: bool,
) -> Result<String, String> {
    let t = obj.types.clone().ok_or("object without apiVersion/kind")?;
    let gvk = GroupVersionKind::try_from(&t).map_err(|e| e.to_string())?;
    let (ar, caps) = discovery
        .resolve_gvk(&gvk)
        .ok_or_else(|| format!("{gvk:?} is not served"))?;
    let name = obj.metadata.name.clone().ok_or("object without a name")?;
    let api: Api<DynamicObject> = match caps.scope {
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &ar),
        kube::discovery::Scope::Namespaced => {
            let ns = match (obj.metadata.namespace.clone(), default_ns) {
                (Some(ns), _) => ns,
                (None, Some(d)) => d.to_string(),
                (None, None) => return Err(format!("{} {name} has no namespace", t.kind)),
            };
            obj.metadata.namespace = Some(ns.clone());
            Api::namespaced_with(client.clone(), &ns, &ar)
        }
    };
    let mut pp = PatchParams::apply("remedy-tests").force();
    pp.dry_run = dry_run;
    api.patch(&name, &pp, &Patch::Apply(&obj))
        .await
        .map_err(|e| format!("{} {name} rejected: {e}", t.kind))?;
    Ok(t.kind)
}

/// `Released` Events per resource name, counting an Event series as its
/// count: a release written twice shows as 2.
pub async fn released_events(client: &Client, ns: &str) -> BTreeMap<String, u32> {
    events_by_reason(client, ns, "Released").await
}

/// Events with `reason` per object name, counting aggregated series.
pub async fn events_by_reason(client: &Client, ns: &str, reason: &str) -> BTreeMap<String, u32> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    let mut per: BTreeMap<String, u32> = BTreeMap::new();
    for e in events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
    {
        if e.reason.as_deref() == Some(reason) {
            let n = e.series.as_ref().map(|s| s.count).unwrap_or(1);
            *per.entry(e.regarding.and_then(|r| r.name).unwrap_or_default())
                .or_default() += u32::try_from(n).unwrap_or(u32::MAX);
        }
    }
    per
}

/// `n` OpenStackMachines (`osm-00`…) held by remedy's breaker, the cloud
/// back (healthy status): what a release has to work through.
pub async fn held_healthy_machines(client: &Client, ns: &str, n: usize) -> Api<DynamicObject> {
    use remedy::model::profile::{CAPI_PAUSED, HOLD_ANNOTATION, HoldMark, PAUSE_MARKER};
    let record = serde_json::to_string(&HoldMark {
        since: chrono::Utc::now(),
        reason: "breaker".into(),
        crash_count: 1,
        value: None,
    })
    .expect("record");
    let mut api = None;
    for i in 0..n {
        let mut o = sample("capo-openstackmachine-error.yaml");
        o.metadata.name = Some(format!("osm-{i:02}"));
        o.metadata.annotations = Some(
            [
                (CAPI_PAUSED.to_string(), PAUSE_MARKER.to_string()),
                (HOLD_ANNOTATION.to_string(), record.clone()),
            ]
            .into(),
        );
        o.data["status"] = serde_json::json!({"ready": true, "instanceState": "ACTIVE"});
        let created = create_with_status(client, o, ns).await;
        api.get_or_insert_with(|| api_for(client, &created, ns));
    }
    api.expect("at least one machine")
}

/// How many objects carry remedy's pause; `None` if the list failed.
pub async fn count_held(api: &Api<DynamicObject>) -> Option<usize> {
    use remedy::model::profile::{CAPI_PAUSED, PAUSE_MARKER};
    let list = api.list(&Default::default()).await.ok()?;
    Some(
        list.items
            .iter()
            .filter(|o| {
                o.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.get(CAPI_PAUSED).map(String::as_str) == Some(PAUSE_MARKER))
            })
            .count(),
    )
}

/// How many objects `api` lists that satisfy `pred`.
pub async fn count(api: &Api<DynamicObject>, pred: impl Fn(&DynamicObject) -> bool) -> usize {
    api.list(&Default::default())
        .await
        .expect("list")
        .items
        .iter()
        .filter(|o| pred(o))
        .count()
}

/// The object's status carries a failure.
pub fn failed(o: &DynamicObject) -> bool {
    !o.data["status"]["failureReason"].is_null()
}

/// remedy's hold record is on the object.
pub fn held(o: &DynamicObject) -> bool {
    o.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(remedy::model::profile::HOLD_ANNOTATION))
}

/// The object is paused (by anyone).
pub fn paused(o: &DynamicObject) -> bool {
    o.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(remedy::model::profile::CAPI_PAUSED))
}

/// The status CAPO v0.14 leaves on an OpenStackMachine whose server create
/// got a 503 from Nova: failed, transient by remedy's rules.
pub fn nova_503() -> serde_json::Value {
    serde_json::json!({"ready": false, "instanceState": "BUILD", "failureReason": "CreateError",
        "failureMessage": "Expected HTTP response code [202] when accessing [POST https://nova:8774/v2.1/servers], but got 503 instead"})
}
