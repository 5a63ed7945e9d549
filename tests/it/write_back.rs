//! A controller (or webhook) that writes back what remedy clears must not
//! turn a goal into an endless write loop (issue #21.3): the executor gives
//! up after `MAX_STEPS` writes, counts it and says so in an Event; the
//! engine retries later with backoff (src/decide/retry.rs).

use crate::remediate::executor;
use crate::support::objects::{api_for, create_with_status, events_by_reason, profile_for, sample};
use crate::support::{TestCluster, namespace, sample as metric};
use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use remedy::daemon::execute::{ExecError, MAX_STEPS};
use remedy::metrics::{Format, Metrics};
use remedy::model::view::ResourceKey;
use remedy::remediate::step::Goal;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_written_straight_back_ends_in_a_bounded_give_up() {
    let client = TestCluster::shared().client().await;
    let ns = namespace(&client, "writeback").await;
    let mut obj = sample("capo-openstackmachine-error.yaml");
    obj.data["status"]["failureReason"] = json!("CreateError");
    obj.data["status"]["failureMessage"] = json!("got 503 from Nova");
    let created = create_with_status(&client, obj, &ns).await;
    let name = created.metadata.name.clone().expect("name");
    let profile = profile_for(&created);
    let api = api_for(&client, &created, &ns);

    // The stand-in controller: puts failureReason back as soon as it sees
    // it gone.
    let rewrites = Arc::new(AtomicU32::new(0));
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let stand_in = tokio::spawn({
        let (api, name, rewrites) = (api.clone(), name.clone(), rewrites.clone());
        async move {
            let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
            let mut objects = watcher(api.clone(), cfg).applied_objects().boxed();
            let mut ready = Some(ready_tx);
            while let Some(Ok(o)) = objects.next().await {
                if let Some(tx) = ready.take() {
                    let _ = tx.send(());
                }
                if o.data["status"]["failureReason"].is_null() {
                    let body = json!({"status": {"failureReason": "CreateError", "failureMessage": "got 503 from Nova"}});
                    if api
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
                        .await
                        .is_ok()
                    {
                        rewrites.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    });

    let metrics = Arc::new(Metrics::new(10));
    let ex = executor(client.clone(), metrics.clone(), false);
    let key = ResourceKey::new("OpenStackMachine", &ns, &name);
    ready_rx.await.expect("the stand-in watches");
    // The stand-in answers a clear within milliseconds, but the executor
    // reads straight after its write and may still see it cleared: that
    // goal ends "complete" and the next one meets the rewrite, as the
    // engine's next plan would. Each run is bounded either way.
    let mut runs = 0;
    let err = loop {
        runs += 1;
        let result = tokio::time::timeout(
            Duration::from_secs(30),
            ex.run(&profile, &key, &Goal::Remediate),
        )
        .await
        .expect("the goal ends on its own instead of writing forever");
        match result {
            Err(e) => break e,
            Ok(out) if runs < 20 => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                eprintln!("run {runs} ended before the rewrite: {out:?}");
            }
            Ok(out) => panic!("never met the rewrite in {runs} runs: {out:?}"),
        }
    };
    stand_in.abort();
    assert!(matches!(err, ExecError::Unconverged { .. }), "{err}");
    assert_eq!(err.label(), "gave_up");

    let text = metrics.encode_as(Format::OpenMetrics).expect("encode");
    let writes: f64 = [
        "clear_failure",
        "skip_remediation",
        "reset_counters",
        "unpause",
    ]
    .iter()
    .filter_map(|a| {
        metric(
            &text,
            &format!(r#"remedy_actions_total{{action="{a}",result="success"}}"#),
        )
    })
    .sum();
    assert!(
        writes <= (MAX_STEPS * runs) as f64 && writes >= 2.0,
        "at most {MAX_STEPS} writes a run ({runs} runs), got {writes}"
    );
    assert_eq!(
        metric(
            &text,
            r#"remedy_actions_total{action="remediate",result="gave_up"}"#
        ),
        Some(1.0)
    );
    assert!(
        rewrites.load(Ordering::Relaxed) >= 1,
        "the stand-in did write back"
    );
    let gave_up = events_by_reason(&client, &ns, "RemedyGaveUp").await;
    assert_eq!(gave_up.get(&name), Some(&1), "{gave_up:?}");
}
