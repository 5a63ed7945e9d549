//! remedy as Cluster API's external remediator (issue #36), with the real
//! Cluster API v1.14.2 manager and CAPD's in-memory provider (the fleet of
//! `capi_inmemory`): a real MachineHealthCheck whose
//! `spec.remediation.templateRef` names a `RemedyRemediationTemplate`
//! creates a `RemedyRemediation` per unhealthy Machine, and remedy carries
//! it out (docs/guides/external-remediation.md).
//!
//! - An unhealthy Machine outside any outage: the MHC creates the request,
//!   remedy's retry step times out, remedy escalates (`OwnerRemediated=False`)
//!   and the real MachineSet deletes the Machine. The manager runs as a
//!   ServiceAccount with only Cluster API's own ClusterRole
//!   (tests/fixtures/capi-v1.14.2-manager-role.yaml) and remedy's
//!   `deploy/base/capi-remediation-rbac.yaml`, bound directly: the test
//!   apiserver runs no controller-manager, so no ClusterRole aggregation.
//! - A one-zone outage with 5 unhealthy Machines: none deleted while the
//!   zone's breaker is open (the requests the MHC created are deferred, the
//!   other Machines held); once it closes, the Machines healthy again are
//!   kept and the rest replaced at the budget's pace.
//! - The same outage under a plain MHC (no remedy): the Machines it deletes.

use crate::capi_inmemory::{Fleet, failed_status, runnable};
use crate::support::mhc::{MhcFleet, POOL_LABEL};
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
/// The zone a Machine is in (remedy's `breaker.domain`).
const ZONE_LABEL: &str = "remedy.test/zone";
/// The outage's zone and its Machines; `w-5` is in another zone.
const ZONE_A: [&str; 5] = ["w-0", "w-1", "w-2", "w-3", "w-4"];
const WORKERS: [&str; 6] = ["w-0", "w-1", "w-2", "w-3", "w-4", "w-5"];
/// Healthy again during the outage: kept after it.
const RECOVER: [&str; 2] = ["w-0", "w-1"];
/// Still unhealthy after it: replaced.
const STAY_DOWN: [&str; 3] = ["w-2", "w-3", "w-4"];

/// Who the core manager acts as in the first test.
const MANAGER_SA: &str = "system:serviceaccount:capi-system:capi-manager";

/// The manager's rights: Cluster API's ClusterRole and remedy's aggregated
/// one, as shipped, each bound to [`MANAGER_SA`].
fn manager_rbac() -> Vec<Value> {
    let mut out = Vec::new();
    for file in [
        "tests/fixtures/capi-v1.14.2-manager-role.yaml",
        "deploy/base/capi-remediation-rbac.yaml",
    ] {
        let text = std::fs::read_to_string(repo().join(file)).expect("role");
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let role: Value = serde::Deserialize::deserialize(doc).expect("yaml");
            if role.is_null() {
                continue;
            }
            let name = role["metadata"]["name"].as_str().expect("name").to_string();
            out.push(role);
            out.push(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": format!("capi-test-{name}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": "capi-manager", "namespace": "capi-system"}],
            }));
        }
    }
    out
}

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
    config_with(ns, "cooldown: 2s", "refill_per_second: 5, burst: 5")
}

/// remedy watching Machines, its breakers by the zone label.
fn config_with(ns: &str, breaker: &str, budget: &str) -> String {
    format!(
        "namespaces: [{ns}]\ntick: 500ms\nleader_election: {{enabled: false}}\n\
         breaker: {{domain: {{label: {ZONE_LABEL}}}, open_ratio: 0.5, close_ratio: 0.1, min_resources: 3, window: 1s, {breaker}}}\n\
         backoff: {{base: 1s, cap: 2s}}\n\
         budget: {{{budget}}}\n\
         profiles:\n\
         - {{builtin: capi-machine, version: v1beta2}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_mhc_hands_an_unhealthy_machine_to_remedy_which_retries_then_escalates() {
    if !runnable() {
        return;
    }
    let (fleet, ns) = Fleet::create_as(
        "capd-ext",
        &["w-0", "w-1"],
        true,
        Some((MANAGER_SA, manager_rbac())),
    )
    .await;
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
    // `explain` shows the request on its Machine.
    remedy
        .until(
            Duration::from_secs(5),
            "explain showing w-0's request",
            || async {
                let Some((200, body)) = remedy
                    .get(&format!("/explain?resource={ns}/Machine/w-0"))
                    .await
                else {
                    return false;
                };
                let x: Value = serde_json::from_str(&body).expect("json");
                x["external_remediation"]
                    .as_str()
                    .is_some_and(|s| s.contains("RemedyRemediation/w-0 Retrying, step 0 (retry)"))
            },
        )
        .await;

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

async fn label_zones(fleet: &Fleet) {
    for m in WORKERS {
        let zone = if ZONE_A.contains(&m) { "a" } else { "b" };
        fleet
            .machines
            .patch(
                m,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {ZONE_LABEL: zone}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("label {m}: {e}"));
    }
}

/// Zone a's Nodes go Unknown at once.
async fn zone_down(fleet: &Fleet) -> Instant {
    for m in ZONE_A {
        fleet.set_ready(m, "Unknown").await;
    }
    Instant::now()
}

/// Adds the Machines of `of` newly deleted to `deleted`, with the time
/// since `start`.
async fn note_deleted(
    fleet: &Fleet,
    of: &[&'static str],
    start: Instant,
    deleted: &mut Vec<(&'static str, Duration)>,
) {
    for &m in of {
        if !deleted.iter().any(|(d, _)| *d == m) && fleet.deleted(m).await {
            deleted.push((m, start.elapsed()));
        }
    }
}

/// `RECOVER`'s Nodes Ready again.
async fn recover(fleet: &Fleet) {
    for m in RECOVER {
        fleet.set_ready(m, "True").await;
    }
}

/// When `RECOVER` come back, after zone a went down.
const RECOVER_AFTER: Duration = Duration::from_secs(25);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_one_zone_outage_remedy_defers_the_mhc_then_replaces_only_the_still_unhealthy_at_the_budgets_pace()
 {
    if !runnable() {
        return;
    }
    let (fleet, ns) = Fleet::create("capd-ext-outage", &WORKERS, true).await;
    let client = fleet.cluster.client().await;
    install_crds(&client).await;
    use_remedy(&client, &ns, 10).await;
    label_zones(&fleet).await;
    // One start every 2 s (retries and replacements alike); the breaker
    // stays open 30 s after the zone calms.
    let remedy = Remedy::serve(
        &fleet.cluster,
        &config_with(&ns, "cooldown: 30s", "refill_per_second: 0.5, burst: 1"),
    );
    remedy.wait_watching(&["Machine"]).await;
    let requests = api(&client, &ns, KIND, PLURAL);
    let breaker = r#"remedy_outage_breaker_open{scope="label",domain="a"}"#;

    // The Nodes go first; the cloud's failures are seen once the MHC has
    // made its first request: the requests are deferred, the rest held.
    let start = zone_down(&fleet).await;
    let mut deleted_during = Vec::new();
    let mut injected = None;
    let mut opened = None;
    let mut closed = None;
    let mut recovered = false;
    let mut phases = std::collections::BTreeSet::new();
    while closed.is_none() && start.elapsed() < Duration::from_secs(150) {
        note_deleted(&fleet, &ZONE_A, start, &mut deleted_during).await;
        let list = requests.list(&Default::default()).await.expect("requests");
        for r in &list.items {
            if let Some(p) = r.data["status"]["phase"].as_str() {
                phases.insert(p.to_string());
            }
        }
        if injected.is_none()
            && (!list.items.is_empty() || start.elapsed() > Duration::from_secs(20))
        {
            for m in ZONE_A {
                fleet
                    .machines
                    .patch_status(
                        m,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": failed_status()})),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("status of {m}: {e}"));
            }
            injected = Some((start.elapsed(), list.items.len()));
        }
        if !recovered && start.elapsed() >= RECOVER_AFTER {
            recover(&fleet).await;
            recovered = true;
        }
        let open = remedy.metric(breaker).await == 1.0;
        if opened.is_none() && open {
            opened = Some(start.elapsed());
        }
        if opened.is_some() && !open {
            closed = Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (injected, early) = injected.expect("failures injected");
    let opened =
        opened.unwrap_or_else(|| panic!("zone a's breaker never opened\n{}", remedy.log_tail()));
    let closed =
        closed.unwrap_or_else(|| panic!("zone a's breaker never closed\n{}", remedy.log_tail()));
    assert!(
        deleted_during.is_empty(),
        "deleted while zone a's breaker was open: {deleted_during:?}\n{}",
        remedy.log_tail()
    );
    assert!(
        phases.contains("Deferred"),
        "no request deferred during the outage (phases {phases:?})\n{}",
        remedy.log_tail()
    );

    // After it: the still-unhealthy are replaced, one budget token apart.
    let after = Instant::now();
    let mut gone = Vec::new();
    while after.elapsed() < Duration::from_secs(120) && gone.len() < STAY_DOWN.len() {
        note_deleted(&fleet, &STAY_DOWN, after, &mut gone).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        gone.len(),
        STAY_DOWN.len(),
        "still-unhealthy Machines replaced within 120 s of the breaker closing: {gone:?}\n{}",
        remedy.log_tail()
    );
    let spread = gone.last().expect("one").1 - gone[0].1;
    // Three escalations need three starts from a bucket of 1 refilled at
    // 0.5/s: 4 s from the first to the last, less the MachineSet's and the
    // polling's jitter (3.98 s, 6.9 s and 7.1 s seen); unpaced, the three
    // go within a second.
    assert!(
        spread >= Duration::from_millis(2500),
        "replacements not paced by the budget: {gone:?}"
    );
    // The ones healthy again are kept, and their requests are gone.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for m in RECOVER {
        assert!(
            !fleet.deleted(m).await,
            "{m}: healthy again, replaced\n{}",
            remedy.log_tail()
        );
        assert!(
            requests.get_opt(m).await.expect("get").is_none(),
            "{m}: its request is still there"
        );
    }
    assert!(!fleet.deleted("w-5").await, "w-5 (zone b) deleted");
    let replaced = remedy
        .metric(r#"remedy_actions_total{action="replace",result="success"}"#)
        .await;
    assert_eq!(replaced, STAY_DOWN.len() as f64, "{}", remedy.log_tail());
    eprintln!(
        "external remediation in a one-zone outage (5 of 6 workers, real MHC + CAPD in-memory): failures injected {injected:?} \
         after the Nodes went Unknown ({early} requests then), zone a's breaker open {opened:?} to {closed:?}: 0 deleted meanwhile, \
         request phases seen {phases:?}; after it {gone:?} replaced (first to last {spread:?}, budget 0.5/s burst 1), \
         {RECOVER:?} (Ready again at {RECOVER_AFTER:?}) kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_same_outage_a_plain_mhc_deletes_the_zones_machines() {
    if !runnable() {
        return;
    }
    let (fleet, _ns) = Fleet::create("capd-plain-outage", &WORKERS, true).await;
    label_zones(&fleet).await;
    let start = zone_down(&fleet).await;
    let mut deleted = Vec::new();
    let mut recovered = false;
    while start.elapsed() < Duration::from_secs(30) {
        note_deleted(&fleet, &ZONE_A, start, &mut deleted).await;
        // Those the MHC left (their Nodes go with their Machines).
        if !recovered && start.elapsed() >= RECOVER_AFTER {
            for m in RECOVER {
                if !fleet.deleted(m).await {
                    fleet.set_ready(m, "True").await;
                }
            }
            recovered = true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!fleet.deleted("w-5").await, "w-5 (zone b) deleted");
    // Every Machine of the zone: the MHC cannot tell an outage from five
    // broken Machines (maxUnhealthy is 100% by default).
    assert_eq!(
        deleted.len(),
        ZONE_A.len(),
        "plain MHC deleted {deleted:?} of zone a within 30 s"
    );
    eprintln!(
        "plain MHC (no remedy) in the same one-zone outage: {} of {} deleted within 30 s: {deleted:?}",
        deleted.len(),
        ZONE_A.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_per_owner_lets_one_replacement_of_the_pool_go_at_a_time() {
    if !runnable() {
        return;
    }
    let down = ["w-0", "w-1", "w-2"];
    let (fleet, ns) = Fleet::create("capd-ext-per", &["w-0", "w-1", "w-2", "w-3"], true).await;
    let client = fleet.cluster.client().await;
    install_crds(&client).await;
    use_remedy(&client, &ns, 3).await;
    // The budget allows all three at once; budget.per allows one
    // replacement of the pool under way (escalated, its Machine not gone).
    // Without budget.per the three escalate within a second of each other
    // when their retry steps time out together.
    let remedy = Remedy::serve(
        &fleet.cluster,
        &config_with(
            &ns,
            "cooldown: 2s",
            &format!(
                "refill_per_second: 5, burst: 5, per: {{label: {POOL_LABEL}, max_in_flight: 1}}"
            ),
        ),
    );
    remedy.wait_watching(&["Machine"]).await;
    let requests = api(&client, &ns, KIND, PLURAL);
    for m in down {
        fleet.set_ready(m, "Unknown").await;
    }
    let start = Instant::now();
    let mut deleted = Vec::new();
    let mut most_escalated = 0;
    while start.elapsed() < Duration::from_secs(90) && deleted.len() < down.len() {
        let list = requests.list(&Default::default()).await.expect("requests");
        // Escalated and its Machine not gone yet: a replacement under way
        // (the request itself goes with the Machine, by garbage collection,
        // a little later).
        let mut escalated = Vec::new();
        for r in &list.items {
            if r.data["status"]["phase"] == "Escalated"
                && fleet
                    .machines
                    .get_opt(&r.name_any())
                    .await
                    .expect("get")
                    .is_some()
            {
                escalated.push(r.name_any());
            }
        }
        if escalated.len() > 1 {
            eprintln!("{:?}: escalated at once {escalated:?}", start.elapsed());
        }
        most_escalated = most_escalated.max(escalated.len());
        for m in down {
            if !deleted.iter().any(|(d, _)| *d == m) && fleet.deleted(m).await {
                deleted.push((m, start.elapsed()));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        deleted.len(),
        down.len(),
        "replaced within 90 s: {deleted:?}\n{}",
        remedy.log_tail()
    );
    assert_eq!(
        most_escalated,
        1,
        "requests escalated at once: {most_escalated}\n{}",
        remedy.log_tail()
    );
    assert!(!fleet.deleted("w-3").await, "w-3 (healthy) deleted");
    eprintln!(
        "budget.per max_in_flight 1 (pool label), 3 unhealthy Machines, retry 3 s: replaced one at a time {deleted:?}"
    );
}
