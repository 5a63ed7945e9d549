//! remedy as Cluster API's external remediator (issue #36), with the real
//! Cluster API v1.14.2 manager and CAPD's in-memory provider (the fleet of
//! `capi_inmemory`): a real MachineHealthCheck whose
//! `spec.remediation.templateRef` names a `RemedyRemediationTemplate`
//! creates a `RemedyRemediation` per unhealthy Machine, and remedy carries
//! it out (docs/external-remediation.md).
//!
//! - An unhealthy Machine outside any outage: the MHC creates the request,
//!   remedy's retry step times out, remedy escalates (`OwnerRemediated=False`)
//!   and the real MachineSet deletes the Machine.

use crate::capi_inmemory::{Fleet, runnable};
use crate::support::mhc::MhcFleet;
use crate::support::{Remedy, eventually, repo};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use remedy::model::remediation::{
    ESCALATED_REASON, GROUP, KIND, OWNER_REMEDIATED, PLURAL, TEMPLATE_KIND, VERSION,
};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The MHC's rule (`capi_inmemory`'s): Ready=Unknown for this long.
const RULE_SECS: u64 = 5;
/// The retry step's timeout: short, the test waits it out.
const RETRY_SECS: u64 = 8;

/// Installs the CRDs as deploy/ ships them and waits until they are served.
async fn install_crds(client: &Client) {
    let text = std::fs::read_to_string(repo().join("deploy/base/crds/remedy.dev.yaml"))
        .expect("deploy/base/crds/remedy.dev.yaml");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc).expect("yaml");
        if v.is_null() {
            continue;
        }
        let crd: CustomResourceDefinition = serde_json::from_value(v).expect("crd");
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("create CRD {}: {e}", crd.name_any()),
        }
    }
    let gv = format!("{GROUP}/{VERSION}");
    eventually(Duration::from_secs(30), "remedy.dev served", || async {
        let list = client.list_api_group_resources(&gv).await.ok()?;
        (list
            .resources
            .iter()
            .filter(|r| !r.name.contains('/'))
            .count()
            == 2)
            .then_some(())
    })
    .await;
}

fn api(client: &Client, ns: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural),
    )
}

/// The template `remedy` (retry for `retry_secs`, then replace) and the
/// fleet's MHC pointed at it.
async fn use_remedy(client: &Client, ns: &str, retry_secs: u64) {
    let templates = api(client, ns, TEMPLATE_KIND, "remedyremediationtemplates");
    let template: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/{VERSION}"), "kind": TEMPLATE_KIND,
        "metadata": {"name": "remedy"},
        "spec": {"template": {"spec": {"steps": [
            {"kind": "retry", "timeout": format!("{retry_secs}s")},
            {"kind": "replace", "timeout": "2m"},
        ]}}},
    }))
    .expect("template");
    templates
        .create(&PostParams::default(), &template)
        .await
        .expect("create the template");
    let mhcs =
        crate::support::capi::capi_api(client, ns, "MachineHealthCheck", "machinehealthchecks");
    mhcs.patch(
        "workers",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"remediation": {"templateRef": {
            "apiVersion": format!("{GROUP}/{VERSION}"), "kind": TEMPLATE_KIND, "name": "remedy",
        }}}})),
    )
    .await
    .expect("MHC templateRef");
}

fn config(ns: &str) -> String {
    format!(
        "namespaces: [{ns}]\ntick: 500ms\nleader_election: {{enabled: false}}\n\
         breaker: {{open_ratio: 0.3, close_ratio: 0.1, min_resources: 3, window: 1s, cooldown: 2s}}\n\
         backoff: {{base: 1s, cap: 2s}}\n\
         budget: {{refill_per_second: 5, burst: 5}}\n\
         profiles:\n\
         - {{builtin: capi-machine, version: v1beta2}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_mhc_hands_an_unhealthy_machine_to_remedy_which_retries_then_escalates() {
    if !runnable() {
        return;
    }
    let (fleet, ns) = Fleet::create("capd-ext", &["w-0", "w-1"], true).await;
    let client = fleet.cluster.client().await;
    install_crds(&client).await;
    use_remedy(&client, &ns, RETRY_SECS).await;
    let remedy = Remedy::serve(&fleet.cluster, &config(&ns));
    remedy.wait_watching(&["Machine"]).await;
    remedy
        .until(
            Duration::from_secs(10),
            "external remediation on",
            || async { remedy.log_tail().contains("external remediation on") },
        )
        .await;

    let requests = api(&client, &ns, KIND, PLURAL);
    let start = Instant::now();
    fleet.set_ready("w-0", "Unknown").await;

    // The MHC creates the request, named like the Machine and owned by it.
    let request = eventually(Duration::from_secs(30), "the MHC's request for w-0", || {
        let requests = requests.clone();
        async move { requests.get_opt("w-0").await.ok().flatten() }
    })
    .await;
    let created = start.elapsed();
    let owner = &request.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Machine", "w-0")
    );
    assert_eq!(
        request
            .labels()
            .get("cluster.x-k8s.io/cluster-name")
            .map(String::as_str),
        Some("c")
    );
    assert_eq!(
        request.data["spec"]["steps"][0]["kind"], "retry",
        "the template's spec.template.spec cloned"
    );
    assert_eq!(
        fleet.condition("w-0", "ExternallyRemediated").await,
        Some(("False".into(), "WaitingForRemediation".into()))
    );

    // remedy starts the retry step; the Machine is kept for its timeout.
    remedy
        .until(
            Duration::from_secs(15),
            "w-0's request Retrying",
            || async {
                requests
                    .get("w-0")
                    .await
                    .is_ok_and(|r| r.data["status"]["phase"] == "Retrying")
            },
        )
        .await;
    let retrying = start.elapsed();
    assert!(
        !fleet.deleted("w-0").await,
        "w-0 deleted during its retry step"
    );

    let Some(deleted) = fleet.wait_deleted("w-0", 60).await else {
        let status = requests
            .get_opt("w-0")
            .await
            .ok()
            .flatten()
            .map(|r| r.data["status"].clone());
        panic!(
            "w-0 not deleted within 60 s\n{status:?}\n{}",
            remedy.log_tail()
        );
    };
    let took = retrying + deleted;
    assert!(
        took >= Duration::from_secs(RULE_SECS + RETRY_SECS),
        "deleted before the rule and the retry step timed out: {took:?}"
    );
    // It was remedy's escalation that the MachineSet acted on.
    let replaced = remedy
        .metric(r#"remedy_actions_total{action="replace",result="success"}"#)
        .await;
    assert_eq!(replaced, 1.0, "{}", remedy.log_tail());
    if let Some(m) = fleet.machines.get_opt("w-0").await.expect("get") {
        let c = crate::support::mhc::condition(&m, OWNER_REMEDIATED);
        assert!(
            c.as_ref().is_some_and(|(s, _)| s == "False"),
            "{OWNER_REMEDIATED} {c:?} (remedy wrote {ESCALATED_REASON}, the MachineSet its own reason)"
        );
    }
    // Its healthy sibling is untouched, with no request.
    assert!(!fleet.deleted("w-1").await);
    assert!(requests.get_opt("w-1").await.expect("get").is_none());
    eprintln!(
        "external remediation, real MHC + CAPD in-memory: request created {created:?} after w-0's Node went Unknown \
         (rule {RULE_SECS} s), retry step from {retrying:?}, w-0 deleted by its MachineSet {took:?} after (retry timeout {RETRY_SECS} s)"
    );
}
