//! The pause switch (#27.2) on the real apiserver, with the real binary and
//! its CLI: 20 held machines are being released, one a second, when
//! `remedy pause` runs. From the next tick nothing more is released (what is
//! held stays held), `remedy_paused` is 1 and /status says who and why;
//! `remedy resume` lets the rest go, without a new cooldown. `remedy explain`
//! (#27.1) says why one waits, its place in line and an estimate.

use crate::support::objects::{count_held, held_healthy_machines};
use crate::support::{Remedy, TestCluster, eventually, namespace};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const MACHINES: usize = 20;

fn cli(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_remedy"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run remedy");
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "remedy {args:?}: {said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    said
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_stops_releases_in_flight_within_a_tick_and_a_resume_lets_them_go() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "pause").await;
    let api = held_healthy_machines(&client, &ns, MACHINES).await;
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 200ms\nleader_election: {{enabled: false}}\n\
             pause_switch: {{namespace: {ns}, configmap: remedy-pause}}\n\
             backoff: {{base: 1s, cap: 2s}}\n\
             budget: {{refill_per_second: 1, burst: 1}}\n\
             breaker: {{min_resources: 3, window: 1s, cooldown: 1s}}\n"
        ),
    );
    remedy.wait_ready().await;
    assert_eq!(remedy.metric("remedy_paused").await, 0.0);
    eventually(Duration::from_secs(30), "the first releases", || async {
        count_held(&api).await.filter(|n| *n <= MACHINES - 3)
    })
    .await;

    // `remedy explain`: the last in line (all have crash count 1, so key
    // order) is held by the breaker hold, waits its turn, with an estimate;
    // the first one released has remedy's Events as its history.
    let url = remedy.url.clone();
    let last = format!("{ns}/OpenStackMachine/osm-{:02}", MACHINES - 1);
    let explained = cli(&cluster.kubeconfig, &["explain", &last, "--url", &url]);
    eprintln!("{explained}");
    for want in [
        "held by remedy: breaker",
        "release line: ",
        "estimated release: in about",
    ] {
        assert!(explained.contains(want), "{want:?} in\n{explained}");
    }
    let eta = format!(
        r#"remedy_resource_release_eta_seconds{{namespace="{ns}",kind="OpenStackMachine",name="osm-{:02}"}}"#,
        MACHINES - 1
    );
    let (_, metrics) = remedy.get("/metrics").await.expect("metrics");
    let before = crate::support::sample(&metrics, &eta);
    assert!(before.is_some_and(|s| s > 1.0), "{eta}: {before:?}");
    let first = cli(
        &cluster.kubeconfig,
        &[
            "explain",
            &format!("{ns}/openstackmachine/osm-00"),
            "--url",
            &url,
        ],
    );
    eprintln!("{first}");
    // Not held now (its history keeps the note it had while held).
    let (now, _history) = first.split_once("history").expect("history");
    assert!(!now.contains("held by remedy"), "{first}");
    assert!(
        first.contains("Normal "),
        "remedy's Events in the history:\n{first}"
    );

    let said = cli(
        &cluster.kubeconfig,
        &[
            "pause",
            "--reason",
            "INC-1: hands off",
            "--namespace",
            &ns,
            "--by",
            "tester",
        ],
    );
    eprintln!("{said}");
    // One tick (200 ms) to read the switch, and a write already past its
    // check may still land: from then on, nothing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held_at_pause = count_held(&api).await.expect("list");
    tokio::time::sleep(Duration::from_secs(6)).await;
    let held_later = count_held(&api).await.expect("list");
    assert_eq!(
        held_later,
        held_at_pause,
        "released while paused\n{}",
        remedy.log_tail()
    );
    assert!(held_at_pause > 0, "all released before the pause took");
    assert_eq!(remedy.metric("remedy_paused").await, 1.0);
    assert!(
        remedy
            .metric(r#"remedy_pause_switch_reads_total{result="set"}"#)
            .await
            >= 5.0
    );
    let (_, status) = remedy.get("/status").await.expect("status");
    let status: serde_json::Value = serde_json::from_str(&status).expect("json");
    assert_eq!(status["paused"]["reason"], "INC-1: hands off", "{status}");
    assert_eq!(status["paused"]["by"], "tester");
    assert_eq!(status["totals"]["pending"], 0, "{status}");
    let explained = cli(&cluster.kubeconfig, &["explain", &last, "--url", &url]);
    assert!(
        explained.contains("PAUSED: the pause switch is set (INC-1: hands off, by tester"),
        "{explained}"
    );
    assert!(explained.contains("waits for: paused"), "{explained}");
    let (_, metrics) = remedy.get("/metrics").await.expect("metrics");
    assert_eq!(
        crate::support::sample(&metrics, &eta),
        None,
        "no estimate while paused"
    );
    assert!(!explained.contains("estimated release: in"), "{explained}");

    cli(
        &cluster.kubeconfig,
        &["resume", "--namespace", &ns, "--by", "tester"],
    );
    eventually(
        Duration::from_secs(MACHINES as u64 * 3),
        "every machine released after the resume",
        || async { count_held(&api).await.filter(|n| *n == 0) },
    )
    .await;
    assert_eq!(remedy.metric("remedy_paused").await, 0.0);
    eprintln!("{held_at_pause} of {MACHINES} held when paused; none released while paused");
}

/// #38.4: a replica that cannot read the switch writes nothing. remedy runs
/// as its shipped ServiceAccount (deploy/base RBAC, impersonated), which may
/// `get` the switch only in remedy-system; here the switch lives in the test
/// namespace, is set, and every read of it is refused with 403. Five held
/// machines are healthy and would be released at once: none is, /readyz
/// says why, and the refusal is logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_that_cannot_be_read_stops_every_write_and_readyz_says_why() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    crate::rbac::apply_rbac(&client).await;
    let ns = namespace(&client, "pause-403").await;
    let api = held_healthy_machines(&client, &ns, 5).await;
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "remedy-pause"},
        "data": {"paused": "true", "reason": "INC-38", "by": "oncall"}
    }))
    .expect("configmap");
    kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &cm)
        .await
        .expect("create the switch");
    let dir = tempfile::tempdir().expect("tmp");
    let kubeconfig =
        crate::support::impersonating(&cluster.kubeconfig, crate::rbac::SA, dir.path());
    let remedy = Remedy::serve_with_kubeconfig(
        &kubeconfig,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 200ms\nleader_election: {{enabled: false}}\n\
             pause_switch: {{namespace: {ns}, configmap: remedy-pause}}\n\
             backoff: {{base: 1s, cap: 2s}}\n\
             budget: {{refill_per_second: 20, burst: 20}}\n\
             breaker: {{min_resources: 3, window: 1s, cooldown: 1s}}\n"
        ),
    );
    let body = eventually(
        Duration::from_secs(60),
        "/readyz to name the switch",
        || {
            let r = remedy.get("/readyz");
            async move {
                match r.await {
                    Some((503, body)) if body.contains("pause switch") => Some(body),
                    _ => None,
                }
            }
        },
    )
    .await;
    assert!(body.contains("not read yet"), "{body}");
    assert!(body.contains("forbidden") || body.contains("403"), "{body}");
    assert_eq!(remedy.get("/healthz").await.map(|r| r.0), Some(200));
    // Long enough for the breaker's cooldown and every release (20/s).
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(count_held(&api).await, Some(5), "{}", remedy.log_tail());
    assert!(
        remedy
            .log()
            .contains("pause switch never read: remedy writes nothing until one read succeeds"),
        "{}",
        remedy.log_tail()
    );
}
