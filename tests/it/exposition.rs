//! /metrics as scrapers see it: text 0.0.4 that `promtool check metrics`
//! accepts for anything that does not ask for OpenMetrics, OpenMetrics for
//! Prometheus, and counters with known labels present at 0 from the start.

use crate::support::objects::{create_with_status, sample};
use crate::support::procs::{
    free_port, prom_query, promtool_bin, require_binary, start_prometheus_at,
};
use crate::support::{Remedy, TestCluster, eventually, namespace};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// What Prometheus 2.42 sends.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

async fn scrape(url: &str, accept: Option<&str>) -> (String, String) {
    let mut req = reqwest::Client::new().get(format!("{url}/metrics"));
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let r = req.send().await.expect("scrape");
    assert_eq!(r.status(), 200);
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (ct, r.text().await.expect("body"))
}

fn promtool_check_metrics(text: &str) -> (bool, String) {
    let mut child = Command::new(promtool_bin())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool output");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_004_passes_promtool_and_prometheus_gets_openmetrics() {
    require_binary(&promtool_bin(), "run `bash testenv/prometheus.sh`");
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "expo").await;
    // A failing resource, so the hand-written per-resource series are there.
    create_with_status(&client, sample("capz-azuremachine-failed.yaml"), &ns).await;
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "namespaces: [{ns}]\nprofiles: [azure-machine]\ntick: 500ms\nleader_election: {{enabled: false}}\ndry_run: true\n"
        ),
    );
    remedy.wait_ready().await;
    let want = format!("remedy_resource_crashes{{namespace=\"{ns}\"");
    let text = eventually(Duration::from_secs(30), "per-resource series", || {
        let (url, want) = (remedy.url.clone(), want.clone());
        async move {
            let (_, t) = scrape(&url, None).await;
            t.contains(&want).then_some(t)
        }
    })
    .await;

    let (ct, _) = scrape(&remedy.url, None).await;
    assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8");
    let (ok, said) = promtool_check_metrics(&text);
    assert!(ok, "promtool check metrics:\n{said}\n---\n{text}");
    // The check can fail: the OpenMetrics body is not valid 0.0.4 to it.
    let (ct, om) = scrape(&remedy.url, Some(PROMETHEUS_ACCEPT)).await;
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(
        !promtool_check_metrics(&om).0,
        "promtool accepted OpenMetrics"
    );

    // Pre-set at 0 before anything happened: the first event is an increase.
    for series in [
        r#"remedy_watch_events_total{kind="AzureMachine",type="expired"} 0"#,
        r#"remedy_actions_total{action="hold",result="error"} 0"#,
        r#"remedy_releases_total{kind="AzureMachine"} 0"#,
    ] {
        assert!(text.lines().any(|l| l == series), "{series} in\n{text}");
    }
}

/// The real Prometheus (3.x; 2.42 in scripts/test's second run) scraping
/// remedy: the `Accept` header it really sends gets OpenMetrics, and it
/// stores remedy's series from that body. Prometheus 3 changed the header
/// (scrape protocol negotiation) and fails a scrape whose Content-Type it
/// cannot read, so the header is recorded from the real server, not copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_prometheus_gets_openmetrics_and_stores_remedy_series() {
    use remedy::metrics::Format;
    use std::sync::{Arc, Mutex};
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "expo-prom").await;
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "namespaces: [{ns}]\nprofiles: [azure-machine]\ntick: 500ms\nleader_election: {{enabled: false}}\ndry_run: true\n"
        ),
    );
    remedy.wait_ready().await;
    let remedy_target = remedy.url.trim_start_matches("http://").to_string();

    // A target that records what Prometheus asks for.
    let accepts: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = accepts.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let recorder = listener.local_addr().expect("addr").port();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move |headers: axum::http::HeaderMap| {
            if let Some(a) = headers.get("accept").and_then(|v| v.to_str().ok()) {
                seen.lock().expect("lock").push(a.to_string());
            }
            async { ([("content-type", "text/plain; version=0.0.4")], "probe 1\n") }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let prom = start_prometheus_at(
        free_port(),
        &format!(
            "global: {{scrape_interval: 1s}}\nscrape_configs:\n\
             \x20 - {{job_name: remedy, static_configs: [{{targets: ['{remedy_target}']}}]}}\n\
             \x20 - {{job_name: recorder, static_configs: [{{targets: ['127.0.0.1:{recorder}']}}]}}\n"
        ),
        &[],
    )
    .await;
    // Each target is scraped at its own offset in the interval: wait for
    // both, not for remedy's series alone.
    let accept = eventually(
        Duration::from_secs(30),
        "Prometheus stores remedy's series",
        || {
            let base = prom.base.clone();
            let accept = accepts.lock().expect("lock").first().cloned();
            async move {
                let up = prom_query(&base, r#"up{job="remedy"} == 1"#).await;
                let counter = prom_query(
                    &base,
                    r#"remedy_actions_total{job="remedy",action="hold",result="error"}"#,
                )
                .await;
                (!up.is_empty() && !counter.is_empty())
                    .then_some(accept)
                    .flatten()
            }
        },
    )
    .await;
    eprintln!("Prometheus sends Accept: {accept}");
    assert_eq!(
        Format::negotiate(Some(&accept)),
        Format::OpenMetrics,
        "{accept}"
    );
    let (ct, om) = scrape(&remedy.url, Some(&accept)).await;
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    let tail = &om[om.len().saturating_sub(300)..];
    assert!(
        om.ends_with("# EOF\n"),
        "{} bytes, ending:\n{tail}",
        om.len()
    );
}
