//! Watch expiry (410 Gone) mid-release on the real apiserver (issue #7).
//! remedy releases held resources one per second; halfway it is frozen
//! (SIGSTOP), its watch connection is broken by an apiserver restart, the
//! world changes while it cannot see (one held object deleted, one handed
//! over to a human, the rest bumped), and etcd compacts past the
//! resourceVersion its watch would resume from. On SIGCONT the resumed watch
//! gets 410 Gone, remedy counts it as `type="expired"` and relists; every
//! resource it still held is released exactly once, none is lost, the
//! human's pause is untouched and the deleted one leaves /status and metrics.

use crate::support::objects::{api_for, create_with_status, released_events, sample};
use crate::support::{Remedy, TestCluster, eventually, namespace};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, VersionMatch,
};
use remedy::model::profile::{
    CAPI_PAUSED, CRASH_ANNOTATION, FAILURE_TIME_ANNOTATION, HOLD_ANNOTATION, PAUSE_MARKER,
};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const N: usize = 8;
const KIND: &str = "OpenStackMachine";
/// A value only a human sets: not remedy's marker, so the pause is foreign.
const HUMAN_PAUSE: &str = "true";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_expired_mid_release_relists_and_loses_or_doubles_nothing() {
    let t0 = Instant::now();
    // Why these flags: with the watch cache on, a restart alone answers an
    // old resourceVersion with 410 (the new cache starts at "now"), which
    // proves nothing about compaction. `--watch-cache=false` sends watches
    // to etcd, so the 410 is a genuine etcd-compaction expiry, the way a
    // watch down longer than the compaction window ends in production.
    // `--etcd-compaction-interval=2s` (later flags win over testenv's 30s)
    // compacts within ~2 intervals instead of ~65 s.
    let cluster =
        TestCluster::start_with(&["--watch-cache=false", "--etcd-compaction-interval=2s"]);
    let client = cluster.client().await;
    let ns = namespace(&client, "expiry").await;
    let mut first = None;
    for i in 0..N {
        let c = create_with_status(&client, held_osm(&format!("osm-{i}"), i % 3), &ns).await;
        first.get_or_insert(c);
    }
    let first = first.expect("created");
    let api = api_for(&client, &first, &ns);
    let remedy = Remedy::serve(
        &cluster,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 250ms\n\
             leader_election: {{enabled: false}}\n\
             budget: {{refill_per_second: 1, burst: 1}}\nbreaker: {{min_resources: 1000, cooldown: 1s}}\n"
        ),
    );
    remedy.wait_ready().await;
    let metrics = || async { remedy.get("/metrics").await.map(|(_, t)| t) };
    let watch = |t: &str, ty: &str| {
        crate::support::sample(
            t,
            &format!(r#"remedy_watch_events_total{{kind="{KIND}",type="{ty}"}}"#),
        )
        .unwrap_or(0.0)
    };
    let text = metrics().await.expect("metrics");
    assert_eq!(watch(&text, "init_done"), 1.0, "{text}");
    assert_eq!(watch(&text, "expired"), 0.0, "{text}");

    // Freeze remedy halfway through the release. Writes are 1 s apart and
    // the freeze comes ~0.3-0.5 s after one, so it falls between two writes
    // rather than inside one HTTP request.
    eventually(Duration::from_secs(30), "two releases", || async {
        ours(&api).await.filter(|o| o.len() <= N - 2).map(|_| ())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = metrics().await.expect("metrics");
    remedy.freeze();
    let frozen = Instant::now();
    let held = ours(&api).await.expect("list held");
    assert!(
        held.len() >= 3,
        "remedy must still hold some when frozen: {held:?}"
    );
    let mut held = held.into_iter();
    let deleted = held.next().expect("one to delete");
    let human = held.next().expect("one for the human");
    let to_release: BTreeSet<String> = held.collect();
    let released_before: BTreeSet<String> = (0..N)
        .map(|i| format!("osm-{i}"))
        .filter(|n| *n != deleted && *n != human && !to_release.contains(n))
        .collect();
    assert!(
        crate::support::sample(&before, &crash_series(&ns, &deleted)).is_some(),
        "the held resource has a series before: {before}"
    );

    // Break remedy's watch connection first, so none of the changes below
    // sits unread in its socket: it can only learn them by relisting. (A
    // frozen client does not notice compaction on an open watch: etcd keeps
    // streaming into the socket buffer.)
    cluster.restart_apiserver();
    let client = cluster.client().await;
    let api = api_for(&client, &first, &ns);
    api.delete(&deleted, &DeleteParams::default())
        .await
        .expect("delete");
    let handed = api
        .patch(
            &human,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {CAPI_PAUSED: HUMAN_PAUSE}}})),
        )
        .await
        .expect("hand over to a human");
    // New resourceVersions for everything else, released or not: nothing
    // may be released a second time because it changed.
    for n in to_release.iter().chain(&released_before) {
        api.patch(
            n,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"bumped": "1"}}})),
        )
        .await
        .expect("bump");
    }
    // An unrelated write after all of them; once etcd has compacted past it
    // (an Exact list there answers 410), every resourceVersion remedy could
    // resume from is gone too.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "probe"}})).expect("configmap");
    let probe = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect("probe")
        .metadata
        .resource_version
        .expect("probe rv");
    let exact = ListParams::default()
        .at(&probe)
        .matching(VersionMatch::Exact);
    eventually(Duration::from_secs(30), "etcd compaction", || async {
        match cms.list(&exact).await {
            Err(kube::Error::Api(s)) if s.code == 410 => Some(()),
            _ => None,
        }
    })
    .await;
    let compacted = frozen.elapsed();

    remedy.resume();
    let resumed = Instant::now();
    // The 410 ends the watch, kube-runtime relists (a second init_done).
    let text = eventually(Duration::from_secs(30), "a relist", || async {
        let t = metrics().await?;
        (watch(&t, "init_done") >= 2.0).then_some(t)
    })
    .await;
    assert!(
        watch(&text, "expired") >= 1.0,
        "the relist must come from a 410 counted as expired (expired {}, error {})",
        watch(&text, "expired"),
        watch(&text, "error")
    );
    let expired_after = resumed.elapsed();
    eventually(Duration::from_secs(30), "the rest released", || async {
        ours(&api).await.filter(|o| o.is_empty()).map(|_| ())
    })
    .await;
    // Two more budget tokens' time: a double release would show by now.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let done = resumed.elapsed();
    let after = metrics().await.expect("metrics");
    eprintln!(
        "watch_expiry: frozen after {:.1?}, compacted {compacted:.1?} after freezing, \
         410 seen {expired_after:.1?} after SIGCONT, all released {done:.1?} after SIGCONT, \
         total {:.1?}; expired={} error={} init_done={}\n{}",
        frozen - t0,
        t0.elapsed(),
        watch(&text, "expired"),
        watch(&after, "error"),
        watch(&after, "init_done"),
        after
            .lines()
            .filter(|l| l.starts_with("remedy_actions_total"))
            .chain(
                remedy
                    .log_tail()
                    .lines()
                    .filter(|l| l.contains("watch expired") || l.contains("watch error"))
            )
            .collect::<Vec<_>>()
            .join("\n"),
    );

    // Released exactly once each: one Event, one successful release action.
    let per = released_events(&client, &ns).await;
    let expected: BTreeSet<String> = released_before.union(&to_release).cloned().collect();
    assert_eq!(
        per.keys().cloned().collect::<BTreeSet<_>>(),
        expected,
        "{per:?}"
    );
    assert!(per.values().all(|&n| n == 1), "{per:?}");
    assert_eq!(
        crate::support::sample(
            &after,
            r#"remedy_actions_total{action="release",result="success"}"#
        ),
        Some(expected.len() as f64),
        "{after}"
    );
    let failed: Vec<&str> = after
        .lines()
        .filter(|l| l.starts_with("remedy_actions_total"))
        .filter(|l| {
            ["error", "forbidden", "not_leader"]
                .iter()
                .any(|r| l.contains(&format!("result=\"{r}\"")))
        })
        // Counters are pre-set to 0: only a non-zero one is a failure.
        .filter(|l| l.rsplit(' ').next().is_some_and(|v| v != "0"))
        .collect();
    assert!(
        failed.is_empty(),
        "action errors: {failed:?}\n{}",
        remedy.log_tail()
    );
    // The human's pause, and remedy's old record beside it, as they were.
    let now = api.get(&human).await.expect("human-paused");
    assert_eq!(
        now.metadata.resource_version, handed.metadata.resource_version,
        "remedy wrote to a human-paused resource"
    );
    let a = now.metadata.annotations.unwrap_or_default();
    assert_eq!(a.get(CAPI_PAUSED).map(String::as_str), Some(HUMAN_PAUSE));
    assert!(a.contains_key(HOLD_ANNOTATION));
    // The deleted one is gone from what remedy reports, and it was the
    // relist that found out: no delete event ever reached the watch.
    assert_eq!(watch(&after, "delete"), 0.0, "{after}");
    assert_eq!(
        crate::support::sample(&after, &crash_series(&ns, &deleted)),
        None,
        "{after}"
    );
    assert!(!after.contains(&format!("name=\"{deleted}\"")), "{after}");
    let (_, status) = remedy.get("/status").await.expect("status");
    let status: serde_json::Value = serde_json::from_str(&status).expect("status json");
    assert_eq!(status["held"], json!([]), "{status}");
    assert!(!status.to_string().contains(&deleted), "{status}");
    assert_eq!(
        crate::support::sample(
            &after,
            &format!(r#"remedy_held_resources{{kind="{KIND}"}}"#)
        ),
        Some(0.0)
    );
    let log = remedy.log_tail();
    assert!(log.contains("watch expired (410 Gone): relisting"), "{log}");
    let (code, _) = remedy.get("/readyz").await.expect("readyz");
    assert_eq!(code, 200);
}

/// An OpenStackMachine held by remedy (breaker hold), healthy again, so
/// remedy releases it as the budget allows.
pub fn held_osm(name: &str, crashes: usize) -> DynamicObject {
    let mut o = sample("capo-openstackmachine-error.yaml");
    o.metadata.name = Some(name.to_string());
    let record = json!({"since": "2020-01-01T00:00:00Z", "reason": "breaker", "crash_count": 1});
    o.metadata.annotations = Some(BTreeMap::from([
        (CAPI_PAUSED.to_string(), PAUSE_MARKER.to_string()),
        (HOLD_ANNOTATION.to_string(), record.to_string()),
        (CRASH_ANNOTATION.to_string(), crashes.to_string()),
        (
            FAILURE_TIME_ANNOTATION.to_string(),
            "2020-01-01T00:00:00Z".to_string(),
        ),
    ]));
    o.data["status"] = json!({"ready": true, "instanceState": "ACTIVE"});
    o
}

/// Names still paused by remedy, sorted (read from the apiserver).
async fn ours(api: &Api<DynamicObject>) -> Option<Vec<String>> {
    let list = api.list(&ListParams::default()).await.ok()?;
    let mut names: Vec<String> = list
        .items
        .into_iter()
        .filter(|o| {
            o.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(CAPI_PAUSED))
                .is_some_and(|v| v == PAUSE_MARKER)
        })
        .filter_map(|o| o.metadata.name)
        .collect();
    names.sort();
    Some(names)
}

fn crash_series(ns: &str, name: &str) -> String {
    format!(r#"remedy_resource_crashes{{namespace="{ns}",kind="{KIND}",name="{name}"}}"#)
}
