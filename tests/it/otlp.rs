//! OTLP traces reach a real OpenTelemetry Collector (built from Go modules
//! by `testenv/otelcol/build.sh`: OTLP receiver, file exporter), and the
//! trace id remedy logs for a goal is the one the exported span carries.
//! Needs remedy built with `--features otlp` (`REMEDY_OTLP_BIN`, set by
//! `scripts/test`); skipped with a message otherwise, unless
//! `REMEDY_REQUIRE_OTLP=1` makes that a failure.

use crate::support::objects::{create_with_status, sample};
use crate::support::procs::{free_port, spawn};
use crate::support::{Remedy, TestCluster, eventually, namespace};
use std::time::Duration;

#[tokio::test]
async fn a_goal_span_arrives_with_the_trace_id_remedy_logged() {
    let bin = std::env::var("REMEDY_OTLP_BIN").ok();
    let otelcol = crate::support::repo().join("testenv/bin/otelcol");
    let (Some(bin), true) = (bin, otelcol.exists()) else {
        let why = "needs REMEDY_OTLP_BIN (remedy built with --features otlp) and testenv/bin/otelcol (testenv/otelcol/build.sh)";
        assert!(std::env::var_os("REMEDY_REQUIRE_OTLP").is_none(), "{why}");
        eprintln!("skipped: {why}");
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let spans = dir.path().join("spans.json");
    let port = free_port();
    let cfg = dir.path().join("otelcol.yaml");
    std::fs::write(
        &cfg,
        format!(
            "receivers: {{otlp: {{protocols: {{grpc: {{endpoint: '127.0.0.1:{port}'}}}}}}}}\n\
             exporters: {{file: {{path: '{}'}}}}\n\
             service:\n  telemetry: {{metrics: {{level: none}}}}\n  pipelines: {{traces: {{receivers: [otlp], exporters: [file]}}}}\n",
            spans.display()
        ),
    )
    .expect("collector config");
    let data = tempfile::tempdir().expect("data");
    let _collector = spawn(
        "otelcol",
        &otelcol.display().to_string(),
        port,
        data,
        &[format!("--config={}", cfg.display())],
    );
    // The collector has no /-/ready: wait until its port accepts.
    eventually(
        Duration::from_secs(30),
        "the collector listening",
        || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;

    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "otlp").await;
    let mut o = sample("capo-openstackmachine-error.yaml");
    o.metadata.name = Some("osm-traced".into());
    o.data["status"] = serde_json::json!({"ready": false, "instanceState": "BUILD",
        "failureReason": "CreateError", "failureMessage": "got 503 instead"});
    create_with_status(&client, o, &ns).await;
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut remedy = Remedy::serve_bin(
        &bin,
        &cluster.kubeconfig,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 200ms\nleader_election: {{enabled: false}}\n\
             breaker: {{open_ratio: 0.5, close_ratio: 0.1, min_resources: 1, window: 1s, cooldown: 1h}}\n"
        ),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
    );
    remedy.wait_ready().await;
    // The hold goal's log line carries the trace id of its span.
    let trace_id = eventually(Duration::from_secs(30), "a logged goal", || async {
        let log = std::fs::read_to_string(&remedy.log).ok()?;
        let line = log
            .lines()
            .find(|l| l.contains("goal=\"hold\"") && l.contains("trace_id="))?;
        let id = line.split("trace_id=").nth(1)?;
        Some(
            id.chars()
                .take_while(char::is_ascii_hexdigit)
                .collect::<String>(),
        )
    })
    .await;
    assert_eq!(trace_id.len(), 32, "an OpenTelemetry trace id: {trace_id}");
    // SIGTERM: the exporter is flushed before the process exits.
    remedy.terminate();
    eventually(Duration::from_secs(45), "remedy exited", || {
        let done = remedy.exited();
        async move { done.then_some(()) }
    })
    .await;
    // Generous: remedy has exited, so whatever arrives now was flushed at
    // exit; a loaded machine only delays the collector's write.
    eventually(
        Duration::from_secs(60),
        "the span in the collector's file",
        || async {
            let text = std::fs::read_to_string(&spans).ok()?;
            text.contains(&format!("\"traceId\":\"{trace_id}\""))
                .then_some(())
        },
    )
    .await;
}
