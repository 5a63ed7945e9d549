//! RBAC from `deploy/base` on the real apiserver: remedy's ServiceAccount
//! can do everything remedy does, and writes it does not need are refused.

use crate::remediate::executor;
use crate::support::objects::{api_for, apply_manifest, create_with_status, sample};
use crate::support::{TestCluster, eventually, namespace, repo};
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use remedy::config::{LeaderConfig, PauseSwitchConfig};
use remedy::metrics::Metrics;
use remedy::model::profile::{HoldMark, builtin, builtins};
use remedy::model::view::ResourceKey;
use remedy::remediate::step::{Goal, Step};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;

pub(crate) const SA: &str = "system:serviceaccount:remedy-system:remedy";

/// Applies the RBAC manifests exactly as committed (server-side apply).
pub(crate) async fn apply_rbac(client: &Client) {
    static DONE: OnceCell<()> = OnceCell::const_new();
    DONE.get_or_init(|| apply_rbac_to(client)).await;
}

/// [`apply_rbac`] on any cluster (a private one), every time.
pub(crate) async fn apply_rbac_to(client: &Client) {
    {
        let discovery = kube::Discovery::new(client.clone())
            .run()
            .await
            .expect("discovery");
        for file in [
            "namespace.yaml",
            "serviceaccount.yaml",
            "clusterrole.yaml",
            "clusterrolebinding.yaml",
            "lease-rbac.yaml",
            "pause-rbac.yaml",
        ] {
            let text =
                std::fs::read_to_string(repo().join("deploy/base").join(file)).expect("manifest");
            for doc in serde_yaml_ng::Deserializer::from_str(&text) {
                let value: serde_json::Value = serde::Deserialize::deserialize(doc).expect("yaml");
                if value.is_null() {
                    continue;
                }
                let obj: DynamicObject = serde_json::from_value(value).expect("object");
                apply_manifest(client, &discovery, obj, Some("remedy-system"), false)
                    .await
                    .unwrap_or_else(|e| panic!("apply {file}: {e}"));
            }
        }
    }
}

async fn can_i(
    client: &Client,
    verb: &str,
    group: &str,
    resource: &str,
    sub: &str,
    ns: Option<&str>,
    name: Option<&str>,
) -> bool {
    let review: SelfSubjectAccessReview = serde_json::from_value(json!({
        "spec": {"resourceAttributes": {
            "verb": verb, "group": group, "resource": resource, "subresource": sub,
            "namespace": ns.unwrap_or(""), "name": name.unwrap_or("")
        }}
    }))
    .unwrap();
    let r = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("access review");
    r.status.map(|s| s.allowed).unwrap_or(false)
}

fn code(r: Result<impl Sized, kube::Error>) -> u16 {
    match r {
        Ok(_) => 200,
        Err(kube::Error::Api(s)) => s.code,
        Err(e) => panic!("unexpected error {e}"),
    }
}

#[tokio::test]
async fn the_service_account_can_do_what_remedy_does_and_nothing_more() {
    let cluster = TestCluster::shared();
    let admin = cluster.client().await;
    apply_rbac(&admin).await;
    let sa = cluster.client_as(SA).await;
    let ns = namespace(&admin, "rbac").await;

    // What remedy needs, per built-in profile.
    for p in builtins() {
        let res = p.plural();
        for verb in ["get", "list", "watch"] {
            assert!(
                can_i(&sa, verb, &p.group, &res, "", Some(&ns), None).await,
                "{verb} {res}"
            );
        }
        // Patch on the main resource only where remedy writes metadata
        // there: a pause (hold) or a skip-remediation annotation.
        let writes_meta = p.hold.is_some() || p.remediation.skip_remediation_annotation.is_some();
        assert_eq!(
            can_i(&sa, "patch", &p.group, &res, "", Some(&ns), None).await,
            writes_meta,
            "patch {res} (remedy writes its metadata: {writes_meta})"
        );
        assert!(
            can_i(&sa, "patch", &p.group, &res, "status", Some(&ns), None).await,
            "patch {res}/status"
        );
        for verb in ["delete", "update", "create"] {
            assert!(
                !can_i(&sa, verb, &p.group, &res, "", Some(&ns), None).await,
                "{verb} {res} must be denied"
            );
        }
        assert!(!can_i(&sa, "update", &p.group, &res, "status", Some(&ns), None).await);
    }

    // External remediation (docs/guides/external-remediation.md): read the
    // requests and templates, write the requests' status; the MHC creates
    // and deletes them, never remedy.
    for res in ["remedyremediations", "remedyremediationtemplates"] {
        for verb in ["get", "list", "watch"] {
            assert!(
                can_i(&sa, verb, "remedy.dev", res, "", Some(&ns), None).await,
                "{verb} {res}"
            );
        }
        for verb in ["create", "delete", "update", "patch"] {
            assert!(
                !can_i(&sa, verb, "remedy.dev", res, "", Some(&ns), None).await,
                "{verb} {res} must be denied"
            );
        }
    }
    assert!(
        can_i(
            &sa,
            "patch",
            "remedy.dev",
            "remedyremediations",
            "status",
            Some(&ns),
            None
        )
        .await
    );
    assert!(
        !can_i(
            &sa,
            "update",
            "remedy.dev",
            "remedyremediations",
            "status",
            Some(&ns),
            None
        )
        .await
    );

    // Real writes as the ServiceAccount: hold and remediate a Machine, reset
    // a BottlerocketShadow (status subresource), Events included.
    // The shared cluster stores Machines as v1beta2: written and read in v1beta2.
    let m = create_with_status(&admin, sample("capi-machine-v1beta2-failed.yaml"), &ns).await;
    let name = m.metadata.name.clone().unwrap_or_default();
    let ex = executor(sa.clone(), Arc::new(Metrics::new(10)), false);
    let mut p = builtin("capi-machine").unwrap();
    p.version = "v1beta2".into();
    let key = ResourceKey::new("Machine", &ns, &name);
    let record = HoldMark {
        since: chrono::Utc::now(),
        reason: "breaker".into(),
        crash_count: 1,
        value: None,
    };
    assert_eq!(
        ex.run(&p, &key, &Goal::Hold(record)).await.unwrap().steps,
        vec![Step::Hold]
    );
    let out = ex.run(&p, &key, &Goal::Remediate).await.unwrap();
    assert!(out.steps.contains(&Step::ClearFailure), "{:?}", out.steps);
    assert_eq!(out.steps.last(), Some(&Step::Unpause));
    let b = create_with_status(
        &admin,
        sample("brupop-bottlerocketshadow-crashed.yaml"),
        &ns,
    )
    .await;
    let bname = b.metadata.name.clone().unwrap_or_default();
    let bp = builtin("bottlerocket-shadow").unwrap();
    let out = ex
        .run(
            &bp,
            &ResourceKey::new("BottlerocketShadow", &ns, &bname),
            &Goal::Remediate,
        )
        .await
        .unwrap();
    assert_eq!(out.steps, vec![Step::ClearFailure, Step::ResetCounters]);

    // Forbidden writes really fail.
    let api = api_for(&sa, &m, &ns);
    assert_eq!(code(api.delete(&name, &DeleteParams::default()).await), 403);
    let fresh = api.get(&name).await.unwrap();
    assert_eq!(
        code(api.replace(&name, &PostParams::default(), &fresh).await),
        403
    );
    assert_eq!(
        code(
            Api::<Secret>::namespaced(sa.clone(), &ns)
                .list(&Default::default())
                .await
        ),
        403
    );
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "remedy"}})).unwrap();
    assert_eq!(
        code(
            Api::<Lease>::namespaced(sa.clone(), "default")
                .create(&PostParams::default(), &lease)
                .await
        ),
        403
    );
    let other: Lease =
        serde_json::from_value(json!({"metadata": {"name": "someone-else"}})).unwrap();
    let _ = Api::<Lease>::namespaced(admin.clone(), "remedy-system")
        .create(&PostParams::default(), &other)
        .await;
    assert_eq!(
        code(
            Api::<Lease>::namespaced(sa.clone(), "remedy-system")
                .patch(
                    "someone-else",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"holderIdentity": "x"}}))
                )
                .await
        ),
        403
    );
    assert_eq!(
        code(
            Api::<Lease>::namespaced(sa.clone(), "remedy-system")
                .delete("remedy", &DeleteParams::default())
                .await
        ),
        403
    );

    // The episode record (leader_election.episode_record, in the Lease's
    // namespace): every replica writes the webhook notifications it accepts
    // there, the leader consumes them. get, update and patch on that one
    // ConfigMap, create on configmaps in remedy-system (create cannot be
    // limited by name), nothing else.
    let defaults = LeaderConfig::default();
    let system = Some(defaults.namespace.as_str());
    let record = Some(defaults.episode_record.as_str());
    let other = Some("someone-else");
    assert_eq!(
        record,
        Some("remedy-episodes"),
        "deploy/base/lease-rbac.yaml names it"
    );
    for verb in ["get", "update", "patch"] {
        assert!(
            can_i(&sa, verb, "", "configmaps", "", system, record).await,
            "{verb} configmaps/remedy-episodes"
        );
        assert!(
            !can_i(&sa, verb, "", "configmaps", "", system, other).await,
            "{verb} another ConfigMap must be denied"
        );
    }
    assert!(can_i(&sa, "create", "", "configmaps", "", system, None).await);
    assert!(!can_i(&sa, "delete", "", "configmaps", "", system, record).await);
    for verb in ["list", "watch"] {
        assert!(
            !can_i(&sa, verb, "", "configmaps", "", system, None).await,
            "{verb} configmaps must be denied"
        );
    }
    for verb in ["create", "get", "update", "patch"] {
        assert!(
            !can_i(&sa, verb, "", "configmaps", "", Some(&ns), record).await,
            "{verb} configmaps outside remedy-system must be denied"
        );
    }

    // The pause switch (pause_switch, deploy/base/pause-rbac.yaml): get on
    // that one ConfigMap, never a write: operators set it, remedy reads it.
    let switch = PauseSwitchConfig::default();
    assert_eq!(switch.namespace, "remedy-system");
    let pause = Some(switch.configmap.as_str());
    assert!(can_i(&sa, "get", "", "configmaps", "", system, pause).await);
    for verb in ["update", "patch", "delete"] {
        assert!(
            !can_i(&sa, verb, "", "configmaps", "", system, pause).await,
            "{verb} configmaps/remedy-pause must be denied"
        );
    }
    // Reading it as the ServiceAccount works, absent or set.
    let reads = Arc::new(Metrics::new(10));
    let read_as_sa = remedy::daemon::pause::PauseSwitch::new(
        sa.clone(),
        "remedy-system",
        "remedy-pause",
        reads.clone(),
    );
    read_as_sa.refresh().await;
    assert_eq!(
        read_as_sa.problem(),
        None,
        "the ServiceAccount cannot read the switch"
    );

    // Leader election works with exactly these rights.
    let metrics = Arc::new(Metrics::new(10));
    let cfg = LeaderConfig {
        enabled: true,
        lease_name: "remedy".into(),
        namespace: "remedy-system".into(),
        lease_duration: Duration::from_secs(3),
        ..LeaderConfig::default()
    };
    let mut tasks = remedy::supervise::Tasks::default();
    let leadership = remedy::daemon::leader::start(
        sa.clone(),
        &cfg,
        "rbac-test".into(),
        metrics.clone(),
        &mut tasks,
    )
    .await
    .expect("lease manager as the ServiceAccount");
    let mut running = remedy::supervise::Supervisor::default();
    running.start(tasks);
    eventually(
        Duration::from_secs(30),
        "leadership as the ServiceAccount",
        || async { leadership.is_leader().then_some(()) },
    )
    .await;
}
