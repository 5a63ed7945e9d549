//! The initial list of a large namespace, with etcd compacted while remedy
//! is halfway through reading it (issue #12, point 10). A TCP valve between
//! remedy and the apiserver lets the first ~64 KiB of responses through
//! (part of the first 500-object page) and holds the rest until etcd has
//! compacted past the list's revision; `--watch-cache=false` sends lists to
//! etcd, so a continue token from before the compaction answers 410
//! ("continue parameter is too old").
//!
//! - WatchList served (1.36's default): remedy streams the list in one
//!   request; the compaction costs nothing, there is no 410 and no relist.
//! - WatchList off: remedy falls back to pages; the second page gets the
//!   410, counted as `type="expired"` (not `error`), and the next list is
//!   unpaginated, so it cannot expire again between pages.

use crate::support::objects::sample;
use crate::support::proxy::{Valve, kubeconfig_via, upstream_of};
use crate::support::{Remedy, TestCluster, eventually, namespace};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ListParams, PostParams, VersionMatch};
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const N: usize = 1500;
const KIND: &str = "OpenStackMachine";
/// Less than one 500-object page (about 1 KiB each): the valve closes
/// while the first page is still arriving.
const THRESHOLD: u64 = 64 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_initial_list_survives_compaction_mid_list() {
    let (metrics, log) = list_across_compaction(&[]).await;
    assert_eq!(watch(&metrics, "init_done"), 1.0, "one list: {metrics}");
    assert_eq!(watch(&metrics, "error"), 0.0, "{metrics}\n{log}");
    assert_eq!(watch(&metrics, "expired"), 0.0, "{metrics}\n{log}");
    assert!(log.contains(r#"initial_list="streaming""#), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_watchlist_an_expired_page_is_counted_and_relisted_unpaginated() {
    let (metrics, log) = list_across_compaction(&["--feature-gates=WatchList=false"]).await;
    assert_eq!(watch(&metrics, "error"), 0.0, "{metrics}\n{log}");
    // The expired page, and each watch the compaction (every 2 s) expired
    // before it started: on a loaded machine the unpaginated relist can
    // take longer than that. Each 410 counted once.
    let watch_expired = log.matches("watch expired (410 Gone)").count();
    assert_eq!(
        watch(&metrics, "expired"),
        1.0 + watch_expired as f64,
        "{metrics}\n{log}"
    );
    assert_eq!(watch(&metrics, "init_done"), 1.0, "{metrics}");
    assert!(log.contains(r#"to="paginated""#), "{log}");
    assert!(log.contains(r#"to="unpaginated""#), "{log}");
}

/// Fills a namespace, starts remedy behind a valve, compacts etcd while the
/// valve holds the list, opens it, waits for /readyz and checks that remedy
/// has every object; returns remedy's metrics and log.
async fn list_across_compaction(extra: &[&str]) -> (String, String) {
    let mut args = vec!["--watch-cache=false", "--etcd-compaction-interval=2s"];
    args.extend_from_slice(extra);
    let cluster = TestCluster::start_with(&args);
    let client = cluster.client().await;
    let ns = namespace(&client, "initlist").await;
    create_many(&client, &ns, N).await;

    let valve = Valve::start(upstream_of(&cluster.kubeconfig), THRESHOLD).await;
    let kubeconfig = kubeconfig_via(
        &cluster.kubeconfig,
        &cluster.dir,
        "kc-valve",
        valve.addr.port(),
    );
    let remedy = Remedy::serve_with_kubeconfig(
        &kubeconfig,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 250ms\n\
             leader_election: {{enabled: false}}\n"
        ),
    );
    eventually(Duration::from_secs(30), "the valve to close", || async {
        (valve.sent.load(Ordering::SeqCst) >= THRESHOLD).then_some(())
    })
    .await;
    let held = Instant::now();
    compact(&client, &ns).await;
    let compacted = held.elapsed();
    valve.open();
    let opened = Instant::now();
    remedy.wait_ready().await;
    let ready = opened.elapsed();
    let (_, metrics) = remedy.get("/metrics").await.expect("metrics");
    // The whole log: the tests count what happened in it.
    let log = remedy.log();
    eprintln!(
        "initial_list {extra:?}: compacted {compacted:.1?} after the valve closed, \
         ready {ready:.1?} after it opened"
    );
    assert!(
        log.contains(&format!("objects={N}")),
        "every object listed:\n{log}"
    );
    (metrics, log)
}

/// `n` OpenStackMachines, 32 creates in flight.
pub async fn create_many(client: &Client, ns: &str, n: usize) {
    let template = sample("capo-openstackmachine-error.yaml");
    let api = crate::support::objects::api_for(client, &template, ns);
    futures::stream::iter(0..n)
        .map(|i| {
            let (api, mut o) = (api.clone(), template.clone());
            o.metadata.name = Some(format!("osm-{i:05}"));
            o.metadata.namespace = Some(ns.to_string());
            o.data.as_object_mut().map(|d| d.remove("status"));
            async move {
                api.create(&PostParams::default(), &o)
                    .await
                    .expect("create");
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
}

/// Returns once etcd has compacted past a write made now.
async fn compact(client: &Client, ns: &str) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "compaction-probe"}})).expect("cm");
    let rv = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect("probe")
        .metadata
        .resource_version
        .expect("rv");
    let exact = ListParams::default().at(&rv).matching(VersionMatch::Exact);
    eventually(Duration::from_secs(30), "etcd compaction", || async {
        match cms.list(&exact).await {
            Err(kube::Error::Api(s)) if s.code == 410 => Some(()),
            _ => None,
        }
    })
    .await;
}

fn watch(text: &str, ty: &str) -> f64 {
    crate::support::sample(
        text,
        &format!(r#"remedy_watch_events_total{{kind="{KIND}",type="{ty}"}}"#),
    )
    .unwrap_or(0.0)
}

/// Cold start at scale, for docs/evidence/measurements.md: fills one namespace with
/// `REMEDY_COLD_START_OBJECTS` (default 20000) OpenStackMachines, then times
/// remedy from spawn to /readyz 200. Extra apiserver flags (e.g.
/// `--feature-gates=WatchList=false` for the paginated path) come from
/// `REMEDY_COLD_START_APISERVER_ARGS`, space-separated.
/// `cargo test --release --test it cold_start -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: minutes of object creation"]
async fn cold_start_at_scale() {
    let n: usize = std::env::var("REMEDY_COLD_START_OBJECTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let extra = std::env::var("REMEDY_COLD_START_APISERVER_ARGS").unwrap_or_default();
    let args: Vec<&str> = extra.split_whitespace().collect();
    let cluster = TestCluster::start_with(&args);
    let client = cluster.client().await;
    let ns = namespace(&client, "cold").await;
    let t = Instant::now();
    create_many(&client, &ns, n).await;
    let created = t.elapsed();
    let config = format!(
        "namespaces: [{ns}]\nprofiles: [openstack-machine]\nleader_election: {{enabled: false}}\n"
    );
    for run in 1..=3 {
        let t = Instant::now();
        let remedy = Remedy::serve(&cluster, &config);
        eventually(Duration::from_secs(600), "ready", || async {
            matches!(remedy.get("/readyz").await, Some((200, _))).then_some(())
        })
        .await;
        let ready = t.elapsed();
        let log = remedy.log_tail();
        assert!(log.contains(&format!("objects={n}")), "{log}");
        let (_, m) = remedy.get("/metrics").await.expect("metrics");
        eprintln!(
            "cold_start {args:?}: {n} objects (created in {created:.1?}), run {run}: \
             /readyz 200 after {ready:.2?}; error={} expired={}",
            watch(&m, "error"),
            watch(&m, "expired")
        );
    }
}
