//! remedy's note on what it holds (#27.1, `remedy.dev/why`) on the real
//! apiserver with the real binary: four machines held by a breaker that is
//! cooling down each get a note saying so and one `Waiting` Event; the note
//! is not written again while nothing changes; when the breaker closes and
//! they wait for the budget instead, the note says that (a second Event);
//! a released machine carries no note.

use crate::support::objects::{events_by_reason, held, held_healthy_machines};
use crate::support::{Remedy, TestCluster, eventually, namespace};
use kube::api::{Api, DynamicObject};
use remedy::model::profile::WHY_ANNOTATION;
use std::time::Duration;

fn note(o: &DynamicObject) -> Option<String> {
    o.metadata
        .annotations
        .as_ref()?
        .get(WHY_ANNOTATION)
        .cloned()
}

async fn notes(api: &Api<DynamicObject>) -> Vec<(String, Option<String>, bool)> {
    api.list(&Default::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .map(|o| {
                    (
                        o.metadata.name.clone().unwrap_or_default(),
                        note(o),
                        held(o),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_resources_say_why_and_what_for_and_only_when_it_changes() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "why").await;
    let api = held_healthy_machines(&client, &ns, 4).await;
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 200ms\nleader_election: {{enabled: false}}\n\
             backoff: {{base: 1s, cap: 2s}}\n\
             budget: {{refill_per_second: 0.25, burst: 1}}\n\
             breaker: {{min_resources: 3, window: 1s, cooldown: 8s}}\n"
        ),
    );
    remedy.wait_ready().await;

    // Cooling down: every one says it waits for the breaker.
    const BREAKER: &str = "waits for the outage breaker of cluster to close";
    eventually(Duration::from_secs(6), "a note on each", || async {
        let n = notes(&api).await;
        (n.len() == 4
            && n.iter()
                .all(|(_, t, _)| t.as_deref().is_some_and(|t| t.contains(BREAKER))))
        .then_some(())
    })
    .await;
    let o = api.get("osm-03").await.expect("osm-03");
    eprintln!(
        "$ kubectl -n {ns} get openstackmachine osm-03 -o jsonpath='{{.metadata.annotations.remedy\\.dev/why}}'\n{}",
        note(&o).unwrap_or_default()
    );
    // Nothing changes for a while: no second write.
    let rv = o.metadata.resource_version.clone();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        api.get("osm-03")
            .await
            .expect("osm-03")
            .metadata
            .resource_version,
        rv,
        "the note is written once per state, not per tick"
    );

    // The breaker closes; one goes, the rest wait for the budget (one
    // every 4 s), and their notes say so.
    const BUDGET: &str = "waits for its turn in the release budget";
    eventually(
        Duration::from_secs(20),
        "the last one waits for the budget",
        || async {
            let o = api.get("osm-03").await.ok()?;
            note(&o)?.contains(BUDGET).then_some(())
        },
    )
    .await;
    let events = events_by_reason(&client, &ns, "Waiting").await;
    assert_eq!(events.get("osm-03"), Some(&2), "{events:?}");
    for (name, text, is_held) in notes(&api).await {
        assert!(
            is_held || text.is_none(),
            "{name}: released with a note {text:?}"
        );
    }
    eventually(
        Duration::from_secs(30),
        "all released, no note left",
        || async {
            let n = notes(&api).await;
            n.iter().all(|(_, t, h)| !h && t.is_none()).then_some(())
        },
    )
    .await;
    let (_, text) = remedy.get("/metrics").await.expect("metrics");
    let written = crate::support::sample(
        &text,
        r#"remedy_actions_total{action="note",result="success"}"#,
    )
    .unwrap_or(0.0);
    // Four breaker notes, then a budget note for each still held when the
    // breaker closed (three at most): never one per tick.
    assert!((5.0..=7.0).contains(&written), "{written} notes\n{text}");
}
