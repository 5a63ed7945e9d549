//! A long-lived task that dies takes the real process down, and a stalled
//! engine loop fails /healthz (issue #21.2). Faults are injected through
//! `REMEDY_TEST_FAULT` (src/daemon/fault.rs), read only by the engine and
//! only in a build with the feature `test-faults`, which `cargo test` turns
//! on for the binary (Cargo.toml, the dev-dependency on remedy itself).

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

/// #38.2: a Prometheus that answers only after `signals.timeout` (as one
/// overloaded in an incident does) with ten resolved episodes to prove and
/// verify. Each tick used to ask for every episode in turn, 10 x 1 s, past
/// the 4 s stall limit, so /healthz failed and the kubelet would restart
/// remedy in a loop. Now a tick stops at the first timeout, each episode
/// backs off, and the heartbeat knows a bounded wait from a stall: /healthz
/// stays 200 for two minutes and the process runs on.
///
/// The slow Prometheus is a stub (a real one cannot be made to answer late
/// on demand): it accepts, waits 3 s, then answers an empty vector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_prometheus_never_fails_healthz() {
    use crate::support::webhook::{alert_labels, notification, post};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "slow-prom").await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let prom = format!("http://{}", listener.local_addr().expect("addr"));
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                tokio::time::sleep(Duration::from_secs(3)).await;
                let body = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            });
        }
    });
    let tmp = tempfile::tempdir().expect("tmp");
    let token = tmp.path().join("token");
    std::fs::write(&token, "s3cret-token\n").expect("token");
    let mut remedy = Remedy::serve(
        cluster,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 1s\nleader_election: {{enabled: false}}\n\
             webhook: {{token_file: {}}}\n\
             signals: {{prometheus_url: '{prom}', timeout: 1s, settle: 0s}}\n\
             alerts: [{{alertname: CloudAPIDegraded, select: {{kind_label: kind}}}}]\n",
            token.display()
        ),
    );
    remedy.wait_ready().await;
    for i in 0..10 {
        let labels = alert_labels("CloudAPIDegraded", &[("kind", &format!("Kind{i}"))]);
        let code = post(
            &remedy.url,
            "s3cret-token",
            &notification("resolved", &[labels]),
        )
        .await;
        assert_eq!(code, 200);
    }
    let start = std::time::Instant::now();
    let mut polls = 0;
    while start.elapsed() < Duration::from_secs(120) {
        let r = remedy.get("/healthz").await;
        assert_eq!(
            r.as_ref().map(|r| r.0),
            Some(200),
            "/healthz at {:?}: {r:?}\n{}",
            start.elapsed(),
            remedy.log_tail()
        );
        assert!(!remedy.exited(), "remedy exited:\n{}", remedy.log_tail());
        polls += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let asked = asked.load(Ordering::SeqCst);
    eprintln!(
        "slow Prometheus: /healthz 200 at {polls} polls over 120 s; {asked} requests to Prometheus"
    );
    // Backed off: far fewer than one request per episode per tick (1,200).
    assert!(asked <= 150, "{asked} requests in 120 s");
    assert!(
        remedy.log().contains("retrying after its backoff"),
        "{}",
        remedy.log_tail()
    );
}
