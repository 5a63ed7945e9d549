//! The watch survives a kube-apiserver restart (same port, etcd kept): the
//! watch breaks, kube-runtime re-establishes it, and changes made after the
//! restart — including one made while remedy was disconnected — reach the
//! metrics.

use crate::support::objects::{api_for, create_with_status, sample, set_status};
use crate::support::{Remedy, TestCluster, eventually, namespace};
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_changes_across_an_apiserver_restart() {
    // A private cluster: restarting the shared one would disturb other tests.
    let cluster = TestCluster::start();
    let client = cluster.client().await;
    let ns = namespace(&client, "restart").await;
    let brs = sample("brupop-bottlerocketshadow-crashed.yaml");
    let name = brs.metadata.name.clone().unwrap_or_default();
    let created = create_with_status(&client, brs.clone(), &ns).await;
    let api = api_for(&client, &created, &ns);

    let remedy = Remedy::serve(
        &cluster,
        &format!(
            "namespaces: [{ns}]\nprofiles: [bottlerocket-shadow]\ntick: 1s\nleader_election: {{enabled: false}}\n"
        ),
    );
    remedy.wait_ready().await;
    let series = |n: &str| {
        format!(
            r#"remedy_resource_crashes{{namespace="{ns}",kind="BottlerocketShadow",name="{n}"}}"#
        )
    };
    let value = |n: String| {
        let remedy = &remedy;
        async move {
            let (_, text) = remedy.get("/metrics").await?;
            crate::support::sample(&text, &n)
        }
    };
    eventually(Duration::from_secs(20), "initial crash_count", || async {
        (value(series(&name)).await == Some(3.0)).then_some(())
    })
    .await;

    cluster.restart_apiserver();
    // A fresh client: the old connection pool points at the dead process.
    let client = cluster.client().await;
    let api2 = api_for(&client, &created, &ns);
    set_status(&api2, &name, json!({"crash_count": 6})).await;
    let mut second = brs.clone();
    second.metadata.name = Some("brs-after-restart".into());
    second.data["status"]["crash_count"] = json!(1);
    create_with_status(&client, second, &ns).await;
    drop(api);

    eventually(
        Duration::from_secs(60),
        "changes after restart reach metrics",
        || async {
            let a = value(series(&name)).await;
            let b = value(series("brs-after-restart")).await;
            (a == Some(6.0) && b == Some(1.0)).then_some(())
        },
    )
    .await;
    let (code, _) = remedy.get("/readyz").await.expect("readyz");
    assert_eq!(code, 200, "{}", remedy.log_tail());
    let (_, text) = remedy.get("/metrics").await.expect("metrics");
    let inits = crate::support::sample(
        &text,
        r#"remedy_watch_events_total{kind="BottlerocketShadow",type="init_done"}"#,
    );
    assert!(inits.is_some_and(|n| n >= 1.0), "{text}");
    assert!(cluster.dir.join("restarted").exists());
}
