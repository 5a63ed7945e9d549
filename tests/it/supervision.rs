//! A long-lived task that dies takes the real process down, and a stalled
//! engine loop fails /healthz (issue #21.2). Faults are injected through
//! `REMEDY_TEST_FAULT` (src/daemon/fault.rs), read only by the engine.

use crate::support::{Remedy, TestCluster, eventually, namespace};
use std::time::{Duration, Instant};

fn config(ns: &str) -> String {
    format!(
        "namespaces: [{ns}]\nprofiles: [azure-machine]\ntick: 200ms\nsignals: {{timeout: 500ms}}\nleader_election: {{enabled: false}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_engine_task_takes_the_process_down_with_the_cause() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "supervise").await;
    let mut remedy = Remedy::serve_bin(
        env!("CARGO_BIN_EXE_remedy"),
        &cluster.kubeconfig,
        &config(&ns),
        &[("REMEDY_TEST_FAULT", "engine-panic-after-ticks=5")],
    );
    remedy.wait_ready().await;
    let started = Instant::now();
    let status = eventually(Duration::from_secs(30), "remedy to exit", || {
        let s = remedy.exit_status();
        async move { s }
    })
    .await;
    assert!(
        !status.success(),
        "a dead engine must exit non-zero: {status}"
    );
    let log = remedy.log();
    assert!(
        log.contains("task engine ended (panicked: injected fault"),
        "the cause is logged:\n{log}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_engine_fails_healthz_while_the_process_lives() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "stall").await;
    let mut remedy = Remedy::serve_bin(
        env!("CARGO_BIN_EXE_remedy"),
        &cluster.kubeconfig,
        &config(&ns),
        &[("REMEDY_TEST_FAULT", "engine-stall-after-ticks=5")],
    );
    remedy.wait_ready().await;
    // Healthy while ticking (ticks 1-5 take about a second).
    assert_eq!(remedy.get("/healthz").await.map(|r| r.0), Some(200));
    // Stall limit: 3 ticks + signals.timeout = 1.1 s after the last beat.
    let body = eventually(Duration::from_secs(15), "/healthz to fail", || {
        let r = remedy.get("/healthz");
        async move {
            match r.await {
                Some((503, body)) => Some(body),
                _ => None,
            }
        }
    })
    .await;
    assert!(body.contains("engine stalled"), "{body}");
    assert!(
        !remedy.exited(),
        "a stall keeps the process: the kubelet restarts it on /healthz"
    );
}
