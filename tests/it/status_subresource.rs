//! A profile that clears status fields of a kind without a status
//! subresource (issue #21.4): remedy refuses it at start, naming both, and
//! the executor never takes the apiserver's 404 for "object gone".

use crate::remediate::executor;
use crate::support::{Remedy, TestCluster, eventually, namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use remedy::daemon::execute::ExecError;
use remedy::metrics::Metrics;
use remedy::model::profile::Profile;
use remedy::model::view::ResourceKey;
use remedy::remediate::step::Goal;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const PROFILE: &str = "name: no-status
group: test.remedy.dev
version: v1
kind: NoStatusObject
fields: {failure_reason: [/status/failureReason], failure_message: [/status/failureMessage]}
remediation: {clear_status: [/status/failureReason, /status/failureMessage]}";

/// A CRD like the test kinds but without `subresources: {status: {}}`.
async fn crd_without_status(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "nostatusobjects.test.remedy.dev"},
        "spec": {"group": "test.remedy.dev", "scope": "Namespaced",
            "names": {"kind": "NoStatusObject", "listKind": "NoStatusObjectList",
                      "plural": "nostatusobjects", "singular": "nostatusobject"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .expect("crd");
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create CRD: {e}"),
    }
    eventually(Duration::from_secs(30), "CRD served", || {
        let c = client.clone();
        async move {
            c.list_api_group_resources("test.remedy.dev/v1")
                .await
                .ok()
                .filter(|l| l.resources.iter().any(|r| r.name == "nostatusobjects"))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remedy_refuses_a_profile_that_clears_status_without_a_status_subresource() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    crd_without_status(&client).await;
    let ns = namespace(&client, "nostatus").await;
    let indented = PROFILE.replace('\n', "\n    ");
    let mut remedy = Remedy::serve(
        cluster,
        &format!(
            "namespaces: [{ns}]\nprofiles:\n  - {indented}\nleader_election: {{enabled: false}}\n"
        ),
    );
    let status = eventually(Duration::from_secs(30), "remedy to refuse", || {
        let s = remedy.exit_status();
        async move { s }
    })
    .await;
    assert!(!status.success());
    let log = remedy.log();
    assert!(
        log.contains("profile no-status")
            && log.contains("nostatusobjects.test.remedy.dev")
            && log.contains("no status subresource"),
        "names the profile and the CRD:\n{log}"
    );
}

#[tokio::test]
async fn a_404_on_the_status_of_an_object_that_exists_is_an_error_not_gone() {
    let client = TestCluster::shared().client().await;
    crd_without_status(&client).await;
    let ns = namespace(&client, "nostatus-exec").await;
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &kube::discovery::ApiResource {
            group: "test.remedy.dev".into(),
            version: "v1".into(),
            api_version: "test.remedy.dev/v1".into(),
            kind: "NoStatusObject".into(),
            plural: "nostatusobjects".into(),
        },
    );
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.remedy.dev/v1", "kind": "NoStatusObject",
        "metadata": {"name": "vm-1"},
        "status": {"failureReason": "CreateError", "failureMessage": "503 from the cloud"}
    }))
    .expect("object");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create");
    let profile: Profile = serde_yaml_ng::from_str(PROFILE).expect("profile");
    let metrics = Arc::new(Metrics::new(10));
    let ex = executor(client.clone(), metrics.clone(), false);
    let key = ResourceKey::new("NoStatusObject", &ns, "vm-1");
    let err = ex
        .run(&profile, &key, &Goal::Remediate)
        .await
        .expect_err("no status subresource is an error");
    assert!(
        matches!(err, ExecError::NoStatusSubresource { .. }),
        "{err}"
    );
    assert_eq!(err.label(), "no_status_subresource");
    let still = api.get("vm-1").await.expect("still there");
    assert_eq!(still.data["status"]["failureReason"], "CreateError");
    let text = metrics
        .encode_as(remedy::metrics::Format::OpenMetrics)
        .expect("encode");
    assert!(
        text.contains(
            r#"remedy_actions_total{action="clear_failure",result="no_status_subresource"} 1"#
        ),
        "{text}"
    );
}
