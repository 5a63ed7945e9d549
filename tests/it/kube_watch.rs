//! Watch → metrics against a real kube-apiserver: the real `remedy` binary
//! watches real objects and exports what docs/reference/metrics.md names.

use crate::support::objects::{api_for, create_with_status, sample};
use crate::support::{Remedy, TestCluster, eventually, namespace};
use std::time::Duration;

const SAMPLES: [&str; 6] = [
    "capi-machine-v1beta1-failed.yaml",
    "capi-machine-v1beta2-failed.yaml",
    "capo-openstackmachine-error.yaml",
    "capa-awsmachine-terminated.yaml",
    "capz-azuremachine-failed.yaml",
    "brupop-bottlerocketshadow-crashed.yaml",
];

fn config(ns: &str) -> String {
    format!("namespaces: [{ns}]\ntick: 1s\nleader_election: {{enabled: false}}\n")
}

#[tokio::test]
async fn real_objects_become_metrics_and_deletes_remove_series() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "watch").await;
    for s in SAMPLES {
        create_with_status(&client, sample(s), &ns).await;
    }
    let remedy = Remedy::serve(cluster, &config(&ns));
    remedy.wait_ready().await;

    let brs = "brs-ip-192-168-22-145.us-west-2.compute.internal";
    let crash = format!(
        r#"remedy_resource_crashes{{namespace="{ns}",kind="BottlerocketShadow",name="{brs}"}}"#
    );
    let delay = format!(
        r#"remedy_resource_backoff_delay_seconds{{namespace="{ns}",kind="BottlerocketShadow",name="{brs}"}}"#
    );
    let text = eventually(
        Duration::from_secs(30),
        "metrics for all samples",
        || async {
            let (code, text) = remedy.get("/metrics").await?;
            (code == 200 && crate::support::sample(&text, &crash).is_some()).then_some(text)
        },
    )
    .await;
    let v = |s: &str| crate::support::sample(&text, s);
    assert_eq!(v(&crash), Some(3.0));
    // The real brupop controller's rule: floor(minutes) > 2^3, so 9 whole
    // minutes (it was exported as 8 before: 60 s·2^n).
    assert_eq!(v(&delay), Some(540.0));
    for (kind, state) in [
        ("OpenStackMachine", "terminal"),
        ("AWSMachine", "terminal"),
        ("AzureMachine", "transient"),
        ("BottlerocketShadow", "transient"),
    ] {
        let series = format!(r#"remedy_resources{{kind="{kind}",state="{state}"}}"#);
        assert_eq!(v(&series), Some(1.0), "{series}");
    }
    let machines: f64 = ["healthy", "transient", "terminal", "held", "unclassifiable"]
        .iter()
        .filter_map(|s| {
            v(&format!(
                r#"remedy_resources{{kind="Machine",state="{s}"}}"#
            ))
        })
        .sum();
    assert_eq!(
        machines, 2.0,
        // Listed through the default v1beta1 watch; their failure fields
        // are not (None conversion, see crds.rs), so no state is asserted.
        "both v1beta1 and v1beta2 Machines are seen once"
    );
    assert_eq!(v(r#"remedy_watch_synced{kind="Machine"}"#), Some(1.0));
    assert_eq!(
        v(r#"remedy_transient_error_ratio{kind="BottlerocketShadow"}"#),
        Some(1.0)
    );
    assert!(
        v(&format!(
            r#"remedy_transient_errors_total{{namespace="{ns}",kind="BottlerocketShadow",reason="crash_loop"}}"#
        )) == Some(1.0),
        "{text}"
    );

    // An update is seen: crash_count 3 → 5, 2^5 + 1 = 33 minutes.
    let brs_obj = sample("brupop-bottlerocketshadow-crashed.yaml");
    let api = api_for(&client, &brs_obj, &ns);
    crate::support::objects::set_status(&api, brs, serde_json::json!({"crash_count": 5})).await;
    eventually(Duration::from_secs(20), "crash_count update", || async {
        let (_, text) = remedy.get("/metrics").await?;
        (crate::support::sample(&text, &delay) == Some(1980.0)).then_some(())
    })
    .await;

    // Delete: per-resource series go away.
    api.delete(brs, &Default::default()).await.expect("delete");
    eventually(
        Duration::from_secs(20),
        "series removed after delete",
        || async {
            let (_, text) = remedy.get("/metrics").await?;
            (crate::support::sample(&text, &crash).is_none()
                && crate::support::sample(
                    &text,
                    r#"remedy_resources{kind="BottlerocketShadow",state="transient"}"#,
                ) == Some(0.0))
            .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn readyz_waits_for_initial_lists() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "ready").await;
    // A profile for a CRD that is not installed never syncs: not ready, and
    // the reason names the stream.
    let cfg = format!(
        "{}profiles:\n  - capi-machine\n  - {{name: missing, group: example.com, version: v1, kind: Missing}}\n",
        config(&ns)
    );
    let remedy = Remedy::serve(cluster, &cfg);
    let machine = format!("Machine/{ns}:");
    let body = eventually(
        Duration::from_secs(30),
        "readyz naming only the missing stream",
        || async {
            let (code, body) = remedy.get("/readyz").await?;
            (code == 503 && body.contains("Missing") && !body.contains(&machine)).then_some(body)
        },
    )
    .await;
    assert!(body.contains("initial list not synced"), "{body}");
    let (code, _) = remedy.get("/healthz").await.expect("healthz");
    assert_eq!(code, 200);
}

/// A custom profile on `LooseObject`, a schema-less test kind (testenv/crds):
/// the real CRDs reject mistyped fields, an open status lets them through.
/// It reads brupop's crash_count and CAPI's failure fields.
const LOOSE_PROFILE: &str = "{name: loose, group: test.remedy.dev, version: v1, kind: LooseObject, \
     fields: {crash_count: [/status/crash_count], failure_reason: [/status/failureReason], \
     failure_message: [/status/failureMessage], state: [/status/current_state]}, \
     hold: {annotation: cluster.x-k8s.io/paused}}";

#[tokio::test]
async fn mistyped_fields_are_unclassifiable_and_never_touched() {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "mistyped").await;
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "test.remedy.dev",
        "v1",
        "LooseObject",
    ));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
    let mut created = Vec::new();
    for (name, status) in [
        (
            "crash-count-text",
            serde_json::json!({"crash_count": "three", "current_state": "ErrorReset"}),
        ),
        (
            "message-object",
            serde_json::json!({"failureReason": "UpdateError",
                "failureMessage": {"nested": "503 Service Unavailable"}}),
        ),
    ] {
        let o = DynamicObject::new(name, &ar);
        api.create(&PostParams::default(), &o)
            .await
            .expect("create");
        created.push(crate::support::objects::set_status(&api, name, status).await);
    }
    // The breaker would hold everything failing here: it must not see these.
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "{}profiles: [{LOOSE_PROFILE}]\nbreaker: {{open_ratio: 0.1, close_ratio: 0.05, min_resources: 1}}\n",
            config(&ns)
        ),
    );
    remedy.wait_ready().await;
    eventually(
        Duration::from_secs(20),
        "unclassifiable counted",
        || async {
            let (_, t) = remedy.get("/metrics").await?;
            (crate::support::sample(
                &t,
                r#"remedy_resources{kind="LooseObject",state="unclassifiable"}"#,
            ) == Some(2.0))
            .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for c in &created {
        let after = api
            .get(c.metadata.name.as_deref().unwrap_or_default())
            .await
            .unwrap();
        assert_eq!(
            after.metadata.resource_version, c.metadata.resource_version,
            "never written"
        );
    }
    let (_, t) = remedy.get("/metrics").await.expect("metrics");
    assert_eq!(
        crate::support::sample(
            &t,
            r#"remedy_outage_breaker_open{scope="cluster",domain="cluster"}"#
        ),
        Some(0.0),
        "{t}"
    );
    // Counters are pre-set to 0; no action may have counted anything.
    let acted: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with("remedy_actions_total{"))
        .filter(|l| l.rsplit(' ').next().is_some_and(|v| v != "0"))
        .collect();
    assert!(acted.is_empty(), "{acted:?}");
    assert!(
        t.contains("remedy_actions_total{"),
        "the pre-set zeros are there"
    );
}

#[tokio::test]
async fn prometheus_down_is_visible_in_readiness_and_metrics() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "promdown").await;
    // Nothing listens on this port: every query fails, fail-safe.
    let dead = crate::support::free_port();
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "{}profiles: [capi-machine]\nsignals: {{prometheus_url: 'http://127.0.0.1:{dead}', timeout: 1s}}\n\
             breaker: {{query: 'max(remedy_transient_error_ratio)'}}\n",
            config(&ns)
        ),
    );
    remedy.wait_ready().await;
    let body = eventually(Duration::from_secs(20), "degraded readiness", || async {
        let (code, body) = remedy.get("/readyz").await?;
        (code == 200 && body.contains("degraded: prometheus")).then_some(body)
    })
    .await;
    assert!(body.contains("unreachable"), "{body}");
    let (_, t) = remedy.get("/metrics").await.expect("metrics");
    let errors = crate::support::sample(
        &t,
        r#"remedy_signal_queries_total{target="prometheus",result="error"}"#,
    );
    assert!(errors.is_some_and(|n| n >= 1.0), "{t}");
}
