//! `cargo bench --bench load`: the figures docs/reliability.md reports.
//!
//! 1. Webhook load: 1,000 Alertmanager notifications/s for 10 s against the
//!    real router (webhook + /metrics + probes) served by `server::serve`
//!    (remedy's listener, default limits) on 127.0.0.1:0, plain then TLS.
//! 2. Memory: 100,000 real-shaped Machines / OpenStackMachines fed through
//!    the watcher's event handling into `Store::apply`; RSS growth per object
//!    and time per apply. Each fleet runs in a child process of its own, so
//!    one measurement's freed memory cannot hide another's growth.
//! 3. /metrics: `Metrics::encode` with 100,000 per-resource series.
//! 4. Liveness under a saturated webhook: back-to-back notifications, each a
//!    new group, through the real router into the real `Engine`, while
//!    /healthz and /metrics are probed (target: p99 < 50 ms).
//!
//! Load goes to loopback only, is bounded in count and time, and stops by
//! itself. Targets: webhook p99 < 5 ms, <= 1 KiB per object, /metrics < 100 ms.

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use remedy::config::HttpConfig;
use remedy::daemon::server::{self, Http, Readiness};
use remedy::daemon::store::Store;
use remedy::metrics::Metrics;
use remedy::metrics::values::WatchEvent;
use remedy::model::backoff::BackoffPolicy;
use remedy::model::classify::{Classifier, default_rules};
use remedy::model::profile::{Profile, builtin};
use remedy::model::view::ResourceKey;
use remedy::signals::{Dedupe, WebhookState, router};
use serde_json::json;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const RATE: u64 = 1_000;
/// Alerts per notification: Alertmanager groups, two is a small group.
const ALERTS_PER_REQUEST: usize = 2;
const TOKEN: &str = "bench-token-0123456789";
/// As `app::serve` sizes it.
const DEDUPE_CAPACITY: usize = 100_000;
const CHILD: &str = "--load-child";
const SMOKE: &str = "--smoke";

/// How much to run: `cargo bench` passes `--bench`; `cargo test
/// --all-targets` runs this binary without it, and then a smoke run checks
/// that everything works in seconds (its figures mean nothing).
struct Size {
    load_secs: u64,
    objects: usize,
    encode_runs: usize,
    http_runs: usize,
}

const FULL: Size = Size {
    load_secs: 10,
    objects: 100_000,
    encode_runs: 50,
    http_runs: 10,
};

const SMOKE_SIZE: Size = Size {
    load_secs: 1,
    objects: 2_000,
    encode_runs: 3,
    http_runs: 2,
};

static SIZE: std::sync::OnceLock<&'static Size> = std::sync::OnceLock::new();

fn size() -> &'static Size {
    SIZE.get().copied().unwrap_or(&FULL)
}

type BenchResult<T> = Result<T, String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

struct AlwaysReady;

impl Readiness for AlwaysReady {
    fn check(&self) -> Result<Vec<String>, Vec<String>> {
        Ok(Vec::new())
    }
}

/// Nearest-rank quantile of sorted samples, in per mille (990 = p99).
fn quantile(sorted: &[Duration], per_mille: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(sorted.len() * per_mille / 1000).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

// ---------------------------------------------------------------- webhook

fn notification(i: usize) -> bytes::Bytes {
    notification_in(i, i % 100)
}

/// Notification `i` for group `group`: the namespace label and groupKey
/// carry it, so with a `namespace_label` selector each group is an episode.
fn notification_in(i: usize, group: usize) -> bytes::Bytes {
    let alerts: Vec<_> = (0..ALERTS_PER_REQUEST)
        .map(|j| {
            json!({
                "status": "firing",
                "labels": {
                    "alertname": "RemedyTransientErrorRatioHigh",
                    "namespace": format!("tenant-{group:02}"),
                    "kind": "Machine",
                    "name": format!("prod-eu1-md-0-7d9f8-{i:06}-{j}"),
                    "severity": "warning",
                    "prometheus": "monitoring/k8s"
                },
                "annotations": {"summary": "transient error ratio high", "runbook_url": "https://runbooks/remedy"},
                // A new fingerprint per alert: every alert is accepted and
                // forwarded, the most expensive path.
                "startsAt": "2026-12-02T10:15:30.123456789Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus:9090/graph?g0.expr=remedy_transient_error_ratio&g0.tab=1",
                "fingerprint": format!("{:016x}", (i * ALERTS_PER_REQUEST + j) as u64 ^ 0x9e37_79b9_7f4a_7c15)
            })
        })
        .collect();
    let body = json!({
        "receiver": "remedy",
        "status": "firing",
        "alerts": alerts,
        "groupLabels": {"alertname": "RemedyTransientErrorRatioHigh"},
        "commonLabels": {"alertname": "RemedyTransientErrorRatioHigh", "severity": "warning"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "version": "4",
        "groupKey": format!("{{}}/{{severity=\"warning\"}}:{{alertname=\"RemedyTransientErrorRatioHigh\", namespace=\"tenant-{group:02}\"}}"),
        "truncatedAlerts": 0
    });
    bytes::Bytes::from(body.to_string())
}

struct LoadFigures {
    sent: usize,
    ok: usize,
    failed: usize,
    forwarded: usize,
    body_bytes: usize,
    achieved_rate: f64,
    max_send_lag: Duration,
    latencies: Vec<Duration>,
}

struct Tls {
    cert_pem: String,
    config: Arc<rustls::ServerConfig>,
}

fn self_signed() -> BenchResult<Tls> {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).map_err(err)?;
    let dir = tempfile::tempdir().map_err(err)?;
    let cfg = remedy::config::TlsConfig {
        cert_file: dir.path().join("tls.crt"),
        key_file: dir.path().join("tls.key"),
    };
    std::fs::write(&cfg.cert_file, ck.cert.pem()).map_err(err)?;
    std::fs::write(&cfg.key_file, ck.signing_key.serialize_pem()).map_err(err)?;
    Ok(Tls {
        cert_pem: ck.cert.pem(),
        config: remedy::daemon::tls::load(&cfg).map_err(err)?.config,
    })
}

/// Serves the real router on a 2-worker runtime (the machine has 2 cores,
/// shared with the client) and drives it from a single-threaded client.
fn webhook_load(tls: Option<&Tls>) -> BenchResult<LoadFigures> {
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(err)?;
    let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
    let metrics = Arc::new(Metrics::new(10_000));
    let state = WebhookState::new(
        Arc::from(TOKEN.as_bytes()),
        1 << 20,
        ["RemedyTransientErrorRatioHigh".to_string()],
        tx,
        Arc::new(Mutex::new(Dedupe::new(DEDUPE_CAPACITY))),
        metrics.clone(),
    );
    let listener_metrics = metrics.clone();
    let app = server::router(Http {
        metrics,
        readiness: Arc::new(AlwaysReady),
    })
    .merge(router(state));
    let tls_config = tls.map(|t| t.config.clone());
    let (addr, consumer) = server_rt
        .block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            tokio::spawn(server::serve(
                listener,
                tls_config,
                app,
                HttpConfig::default(),
                listener_metrics,
                std::future::pending(),
            ));
            // The engine's side of the queue: drain it as fast as it fills.
            let consumer = Arc::new(AtomicUsize::new(0));
            let count = consumer.clone();
            tokio::spawn(async move {
                while rx.recv().await.is_some() {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            });
            Ok::<_, std::io::Error>((addr, consumer))
        })
        .map_err(err)?;

    let total = (RATE * size().load_secs) as usize;
    let bodies: Vec<bytes::Bytes> = (0..total).map(notification).collect();
    let body_bytes = bodies.first().map_or(0, bytes::Bytes::len);
    let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(5));
    let scheme = match tls {
        Some(t) => {
            builder = builder
                .tls_built_in_root_certs(false)
                .add_root_certificate(
                    reqwest::Certificate::from_pem(t.cert_pem.as_bytes()).map_err(err)?,
                )
                .resolve("localhost", addr);
            "https"
        }
        None => "http",
    };
    let client = builder.build().map_err(err)?;
    let url = format!("{scheme}://localhost:{}/webhook/alertmanager", addr.port());

    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(err)?;
    let mut figures = client_rt.block_on(async move {
        let start = tokio::time::Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        let mut max_send_lag = Duration::ZERO;
        // Open loop: each request leaves at its due time whatever the
        // others are doing, so a slow answer cannot hide by slowing the
        // offered load.
        for (i, body) in bodies.into_iter().enumerate() {
            let due = start + Duration::from_micros(i as u64 * 1_000_000 / RATE);
            tokio::time::sleep_until(due).await;
            max_send_lag = max_send_lag.max(due.elapsed());
            let req = client
                .post(&url)
                .bearer_auth(TOKEN)
                .header("content-type", "application/json")
                .body(body);
            tasks.spawn(async move {
                let t = Instant::now();
                let ok = match req.send().await {
                    Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                    Err(_) => false,
                };
                (t.elapsed(), ok, Instant::now())
            });
        }
        let mut latencies = Vec::with_capacity(total);
        let (mut ok, mut failed) = (0, 0);
        let mut last = start.into_std();
        let deadline = Duration::from_secs(size().load_secs + 30);
        while let Ok(Some(done)) = tokio::time::timeout(deadline, tasks.join_next()).await {
            match done {
                Ok((lat, true, at)) => {
                    ok += 1;
                    latencies.push(lat);
                    last = last.max(at);
                }
                _ => failed += 1,
            }
        }
        latencies.sort();
        LoadFigures {
            sent: total,
            ok,
            failed,
            forwarded: 0,
            body_bytes,
            achieved_rate: ok as f64 / last.duration_since(start.into_std()).as_secs_f64(),
            max_send_lag,
            latencies,
        }
    });
    drop(client_rt);
    // Every answered request was queued before its answer; give the consumer
    // a moment to take the last ones off the queue.
    server_rt.block_on(async { tokio::time::sleep(Duration::from_millis(200)).await });
    figures.forwarded = consumer.load(Ordering::Relaxed);
    server_rt.shutdown_timeout(Duration::from_secs(1));
    Ok(figures)
}

fn print_load(name: &str, f: &LoadFigures) {
    println!(
        "{name:<28} {:>6} {:>6} {:>4} {:>9.1} {:>10} {:>10} {:>10} {:>10}",
        f.sent,
        f.ok,
        f.failed,
        f.achieved_rate,
        ms(quantile(&f.latencies, 500)),
        ms(quantile(&f.latencies, 990)),
        ms(f.latencies.last().copied().unwrap_or_default()),
        ms(f.max_send_lag),
    );
}

// ---------------------------------------------------------------- saturation

/// Concurrent webhook senders, each sending its next notification as soon
/// as the last is answered: the webhook is kept saturated.
const SATURATING_SENDERS: usize = 16;
/// Each of /healthz, /metrics and /readyz is fetched every this long.
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// What a kubelet probe allows by default: a slower answer is a failure
/// (and is counted as this long).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

struct SaturationFigures {
    notifications: usize,
    refused: usize,
    webhook: Vec<Duration>,
    healthz: Vec<Duration>,
    metrics: Vec<Duration>,
    readyz: Vec<Duration>,
    probe_timeouts: usize,
}

/// The webhook saturated with distinct groups (every notification a new
/// episode) while /healthz and /metrics are probed: `app::serve`'s wiring
/// (listener, router, webhook, queue, the real `Engine` consuming it with
/// the default 5 s tick), on a 2-worker runtime as in a 2-core pod. The
/// engine's executor points nowhere and nothing is watched: this measures
/// what the notifications cost, not remediation. Logs are formatted at INFO
/// (into a sink), as `remedy serve` does by default.
fn webhook_saturation() -> BenchResult<SaturationFigures> {
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(err)?;
    let token = std::env::temp_dir().join(format!("remedy-bench-token-{}", std::process::id()));
    std::fs::write(&token, TOKEN).map_err(err)?;
    let config = remedy::config::Config {
        alerts: vec![remedy::config::AlertRule {
            alertname: "RemedyTransientErrorRatioHigh".into(),
            select: remedy::config::Selector {
                namespace_label: Some("namespace".into()),
                kind_label: Some("kind".into()),
                ..Default::default()
            },
            verify_query: None,
            allow_cluster_wide: false,
            max_resources: 200,
        }],
        webhook: remedy::config::WebhookConfig {
            token_file: Some(token.clone()),
            ..remedy::config::WebhookConfig::default()
        },
        leader_election: remedy::config::LeaderConfig {
            enabled: false,
            ..remedy::config::LeaderConfig::default()
        },
        dry_run: true,
        ..remedy::config::Config::default()
    };
    // `App::build` as `remedy serve` runs it, with nothing watched (the
    // validated config's profile list left empty): the client points
    // nowhere, and this measures what the notifications cost.
    let validated = remedy::config::Validated {
        config,
        profiles: Vec::new(),
        classifier: Classifier::new(&default_rules()).map_err(err)?,
    };
    let addr = server_rt.block_on(async {
        let client = kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().map_err(err)?,
        ))
        .map_err(err)?;
        let app = remedy::daemon::app::App::build(
            validated,
            None,
            client,
            Arc::new(Metrics::new(10_000)),
        )
        .await
        .map_err(err)?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(err)?;
        let addr = listener.local_addr().map_err(err)?;
        tokio::spawn(app.run_on(listener, std::future::pending()));
        Ok::<_, String>(addr)
    })?;

    let secs = size().load_secs;
    let deadline = Instant::now() + Duration::from_secs(secs);
    // Probes from a thread and runtime of their own, as the kubelet would.
    // Probes from a thread and runtime of their own, each path on its own
    // schedule, as the kubelet (liveness, readiness) and Prometheus do.
    let prober = std::thread::spawn(move || -> BenchResult<Vec<(Vec<Duration>, usize)>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(err)?;
        rt.block_on(async move {
            let client = reqwest::Client::builder()
                .timeout(PROBE_TIMEOUT)
                .build()
                .map_err(err)?;
            let probe = |path: &'static str| {
                let client = client.clone();
                async move {
                    let (mut took_all, mut failed) = (Vec::new(), 0usize);
                    while Instant::now() < deadline {
                        let t = Instant::now();
                        let ok = match client.get(format!("http://{addr}/{path}")).send().await {
                            Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                            Err(_) => false,
                        };
                        took_all.push(if ok { t.elapsed() } else { PROBE_TIMEOUT });
                        failed += usize::from(!ok);
                        tokio::time::sleep(PROBE_EVERY.saturating_sub(t.elapsed())).await;
                    }
                    (took_all, failed)
                }
            };
            let (h, m, r) = tokio::join!(probe("healthz"), probe("metrics"), probe("readyz"));
            Ok(vec![h, m, r])
        })
    });
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(err)?;
    let next = Arc::new(AtomicUsize::new(0));
    let (webhook, refused) = client_rt.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(err)?;
        let url = format!("http://{addr}/webhook/alertmanager");
        let mut senders = tokio::task::JoinSet::new();
        for _ in 0..SATURATING_SENDERS {
            let (client, url, next) = (client.clone(), url.clone(), next.clone());
            senders.spawn(async move {
                let (mut lat, mut refused) = (Vec::new(), 0usize);
                while Instant::now() < deadline {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let t = Instant::now();
                    let r = client
                        .post(&url)
                        .bearer_auth(TOKEN)
                        .header("content-type", "application/json")
                        .body(notification_in(i, i))
                        .send()
                        .await;
                    match r {
                        Ok(r) if r.status().is_success() => {
                            let _ = r.bytes().await;
                            lat.push(t.elapsed());
                        }
                        _ => refused += 1,
                    }
                }
                (lat, refused)
            });
        }
        let (mut all, mut refused) = (Vec::new(), 0);
        while let Some(done) = senders.join_next().await {
            let (lat, r) = done.map_err(err)?;
            all.extend(lat);
            refused += r;
        }
        Ok::<_, String>((all, refused))
    })?;
    let mut probes = prober
        .join()
        .map_err(|_| "prober panicked".to_string())??
        .into_iter();
    let mut next_probe = || {
        let (mut v, failed) = probes.next().unwrap_or_default();
        v.sort();
        (v, failed)
    };
    let (healthz, f1) = next_probe();
    let (metrics_lat, f2) = next_probe();
    let (readyz, f3) = next_probe();
    let mut webhook = webhook;
    webhook.sort();
    server_rt.shutdown_timeout(Duration::from_secs(1));
    let _ = std::fs::remove_file(&token);
    Ok(SaturationFigures {
        notifications: webhook.len(),
        refused,
        webhook,
        healthz,
        metrics: metrics_lat,
        readyz,
        probe_timeouts: f1 + f2 + f3,
    })
}

fn print_saturation(f: &SaturationFigures) {
    println!(
        "{:<28} {:>8} {:>10} {:>10} {:>10}",
        "", "count", "p50", "p99", "max"
    );
    for (name, v) in [
        ("POST webhook (answered 2xx)", &f.webhook),
        ("GET /healthz", &f.healthz),
        ("GET /metrics", &f.metrics),
        ("GET /readyz", &f.readyz),
    ] {
        println!(
            "{name:<28} {:>8} {:>10} {:>10} {:>10}",
            v.len(),
            ms(quantile(v, 500)),
            ms(quantile(v, 990)),
            ms(v.last().copied().unwrap_or_default()),
        );
    }
    println!(
        "  {} notifications accepted ({:.0}/s), {} refused (503: queue full); {} probes failed or over {:?}",
        f.notifications,
        f.notifications as f64 / size().load_secs as f64,
        f.refused,
        f.probe_timeouts,
        PROBE_TIMEOUT,
    );
}

// ---------------------------------------------------------------- fleet

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

struct Templates {
    machine: DynamicObject,
    openstack: DynamicObject,
}

impl Templates {
    fn load() -> BenchResult<Self> {
        let read = |name: &str| -> BenchResult<DynamicObject> {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testenv/samples")
                .join(name);
            let text = std::fs::read_to_string(&path).map_err(err)?;
            serde_yaml_ng::from_str(&text).map_err(err)
        };
        Ok(Self {
            machine: read("capi-machine-v1beta1-failed.yaml")?,
            openstack: read("capo-openstackmachine-error.yaml")?,
        })
    }

    /// Object `i` of a fleet where every `failing_every`-th object fails
    /// (alternately with a terminal and a transient failure).
    fn object(&self, machine: bool, i: usize, failing_every: usize, rv: u64) -> DynamicObject {
        let mut o = if machine {
            self.machine.clone()
        } else {
            self.openstack.clone()
        };
        let cluster = format!("prod-{:04}", i / 50);
        let md = format!("{cluster}-md-0");
        let name = format!("{md}-7d9f8-{i:06}");
        let m = &mut o.metadata;
        m.name = Some(if machine {
            name.clone()
        } else {
            format!("{name}-infra")
        });
        m.namespace = Some(format!("tenant-{:02}", i % 100));
        m.uid = Some(format!(
            "{:08x}-3b1a-4d5e-9a49-{:012x}",
            i,
            i as u64 * 7919 + machine as u64
        ));
        m.resource_version = Some(rv.to_string());
        m.creation_timestamp = None;
        m.generation = Some(2);
        if let Some(labels) = m.labels.as_mut() {
            labels.insert("cluster.x-k8s.io/cluster-name".into(), cluster.clone());
            labels.insert("cluster.x-k8s.io/deployment-name".into(), md.clone());
            if machine {
                labels.insert("cluster.x-k8s.io/set-name".into(), format!("{md}-7d9f8"));
            }
        }
        let failing = i.is_multiple_of(failing_every);
        let status = &mut o.data["status"];
        if !failing {
            if let Some(s) = status.as_object_mut() {
                s.remove("failureReason");
                s.remove("failureMessage");
            }
            status[if machine { "phase" } else { "instanceState" }] =
                json!(if machine { "Running" } else { "ACTIVE" });
            if let Some(conds) = status["conditions"].as_array_mut() {
                for c in conds {
                    c["status"] = json!("True");
                    if let Some(c) = c.as_object_mut() {
                        c.remove("reason");
                        c.remove("message");
                        c.remove("severity");
                    }
                }
            }
        } else if (i / failing_every) % 2 == 1 {
            // Transient: the cloud API failed, the instance is not in ERROR.
            status["failureMessage"] = json!(format!(
                "failed to create server for {name}: Expected HTTP response code [202] when accessing [POST https://compute.example:8774/v2.1/servers], but got 503 instead"
            ));
            if !machine {
                status["instanceState"] = json!("BUILD");
            }
        }
        o
    }
}

/// What `watch::run` does with each event (that loop is private to it).
fn handle(
    store: &Store,
    metrics: &Metrics,
    (profile, kind): (usize, &str),
    stream: &str,
    seen: &mut HashSet<ResourceKey>,
    ev: Event<DynamicObject>,
    apply_times: &mut Vec<Duration>,
) {
    match ev {
        Event::Init => {
            metrics.watch.event(kind, WatchEvent::Init);
            seen.clear();
        }
        Event::InitApply(obj) => {
            metrics.watch.event(kind, WatchEvent::InitApply);
            let t = Instant::now();
            let k = store.apply(profile, &obj);
            apply_times.push(t.elapsed());
            if let Some(k) = k {
                seen.insert(k);
            }
        }
        Event::InitDone => {
            metrics.watch.event(kind, WatchEvent::InitDone);
            store.retain_seen(kind, None, seen);
            *seen = HashSet::new();
            store.mark_synced(stream);
        }
        Event::Apply(obj) => {
            metrics.watch.event(kind, WatchEvent::Apply);
            let t = Instant::now();
            store.apply(profile, &obj);
            apply_times.push(t.elapsed());
        }
        Event::Delete(obj) => {
            metrics.watch.event(kind, WatchEvent::Delete);
            if let Some(k) = store.key(profile, &obj) {
                store.remove(&k);
            }
        }
    }
}

/// Child process: one fleet, printed as table rows.
fn fleet(scenario: &str) -> BenchResult<()> {
    let failing_every = match scenario {
        "mixed" => 10,
        "failing" => 1,
        other => return Err(format!("unknown scenario {other}")),
    };
    let profiles: Arc<[Profile]> = Arc::from(vec![
        builtin("capi-machine").map_err(err)?,
        builtin("openstack-machine").map_err(err)?,
    ]);
    let classifier = Classifier::new(&default_rules()).map_err(err)?;
    let metrics = Arc::new(Metrics::new(size().objects));
    let store = Store::new(
        profiles.clone(),
        classifier,
        BackoffPolicy::default(),
        metrics.clone(),
    );
    let templates = Templates::load()?;
    let mut apply_times: Vec<Duration> = Vec::with_capacity(size().objects);
    let mut update_times: Vec<Duration> = Vec::with_capacity(size().objects);
    // Warm up allocator and lazy statics on objects that are then deleted.
    for machine in [true, false] {
        let o = templates.object(machine, size().objects + 1, 1, 1);
        let p = usize::from(!machine);
        if let Some(k) = store.apply(p, &o) {
            store.remove(&k);
        }
    }
    let rss_before = rss_kib();
    let t0 = Instant::now();
    let half = size().objects / 2;
    for (profile, machine) in [(0usize, true), (1usize, false)] {
        let stream = if machine {
            "Machine"
        } else {
            "OpenStackMachine"
        };
        // The initial list, as kube-runtime delivers it; objects are made
        // one at a time and dropped after the event, as on the wire.
        let events = futures::stream::iter(
            std::iter::once(Event::Init)
                .chain((0..half).map(|i| {
                    Event::InitApply(templates.object(machine, i, failing_every, 1000 + i as u64))
                }))
                .chain(std::iter::once(Event::InitDone)),
        );
        let mut seen = HashSet::new();
        futures::executor::block_on(events.for_each(|ev| {
            handle(
                &store,
                &metrics,
                (profile, &profiles[profile].kind),
                stream,
                &mut seen,
                ev,
                &mut apply_times,
            );
            futures::future::ready(())
        }));
    }
    let list_wall = t0.elapsed();
    let rss_after = rss_kib();
    // Then one status update per object (resourceVersion bump, same failure).
    for (profile, machine) in [(0usize, true), (1usize, false)] {
        let mut seen = HashSet::new();
        for i in 0..half {
            let o = templates.object(machine, i, failing_every, 500_000 + i as u64);
            handle(
                &store,
                &metrics,
                (profile, &profiles[profile].kind),
                "",
                &mut seen,
                Event::Apply(o),
                &mut update_times,
            );
        }
    }
    apply_times.sort();
    update_times.sort();
    let growth = rss_after.saturating_sub(rss_before) as f64 * 1024.0 / store.len() as f64;
    println!(
        "{:<28} {:>8} {:>8} {:>10} {:>10} {:>12.0} {:>10} {:>10} {:>10}",
        format!("{scenario} (1 in {failing_every} failing)"),
        store.len(),
        metrics.series.count(),
        rss_before,
        rss_after,
        growth,
        ms(quantile(&apply_times, 500)),
        ms(quantile(&apply_times, 990)),
        ms(quantile(&update_times, 500)),
    );
    println!(
        "{:<28} initial list of {} objects: {:.2} s wall (object construction included), apply p99.9 {}, update p99 {}",
        "",
        store.len(),
        list_wall.as_secs_f64(),
        ms(quantile(&apply_times, 999)),
        ms(quantile(&update_times, 990)),
    );
    if scenario == "failing" {
        println!(
            "{:<28} inline sizes: ResourceKey {} B, store Entry {} B (ResourceView {} B)",
            "",
            std::mem::size_of::<ResourceKey>(),
            std::mem::size_of::<remedy::daemon::store::Entry>(),
            std::mem::size_of::<remedy::model::view::ResourceView>(),
        );
        metrics_encode(&metrics)?;
    }
    Ok(())
}

fn metrics_encode(metrics: &Arc<Metrics>) -> BenchResult<()> {
    let mut times = Vec::with_capacity(size().encode_runs);
    let mut body_len = 0;
    for _ in 0..size().encode_runs {
        let t = Instant::now();
        let body = metrics.encode().map_err(err)?;
        times.push(t.elapsed());
        body_len = body.len();
    }
    times.sort();
    // The same through the real route and loopback, as Prometheus scrapes.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(err)?;
    let app = server::router(Http {
        metrics: metrics.clone(),
        readiness: Arc::new(AlwaysReady),
    });
    let mut http = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(err)?;
        let addr: SocketAddr = listener.local_addr().map_err(err)?;
        tokio::spawn(server::serve(
            listener,
            None,
            app,
            HttpConfig::default(),
            Arc::new(Metrics::new(10)),
            std::future::pending(),
        ));
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(err)?;
        let mut times = Vec::with_capacity(size().http_runs);
        for _ in 0..size().http_runs {
            let t = Instant::now();
            let r = client
                .get(format!("http://{addr}/metrics"))
                .send()
                .await
                .map_err(err)?;
            let n = r.bytes().await.map_err(err)?.len();
            times.push(t.elapsed());
            if n == 0 {
                return Err("empty /metrics".to_string());
            }
        }
        Ok::<_, String>(times)
    })?;
    http.sort();
    println!();
    println!(
        "{:<28} {:>8} {:>10} {:>10} {:>10} {:>12} {:>12}",
        "/metrics", "series", "runs", "p50", "p99", "max", "body"
    );
    println!(
        "{:<28} {:>8} {:>10} {:>10} {:>10} {:>12} {:>9.1} MiB",
        "Metrics::encode",
        metrics.series.count() * 2,
        size().encode_runs,
        ms(quantile(&times, 500)),
        ms(quantile(&times, 990)),
        ms(times.last().copied().unwrap_or_default()),
        body_len as f64 / (1024.0 * 1024.0),
    );
    println!(
        "{:<28} {:>8} {:>10} {:>10} {:>10} {:>12}",
        "GET /metrics over loopback",
        metrics.series.count() * 2,
        size().http_runs,
        ms(quantile(&http, 500)),
        ms(quantile(&http, 990)),
        ms(http.last().copied().unwrap_or_default()),
    );
    Ok(())
}

fn run_child(scenario: &str) -> BenchResult<()> {
    let exe = std::env::current_exe().map_err(err)?;
    let mut cmd = Command::new(exe);
    cmd.args([CHILD, scenario]);
    if std::ptr::eq(size(), &SMOKE_SIZE) {
        cmd.arg(SMOKE);
    }
    let status = cmd.status().map_err(err)?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("fleet {scenario}: child exited with {status}"))
    }
}

fn run() -> BenchResult<()> {
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    // A child is told by its parent; the parent by cargo's `--bench`.
    let smoke = has(SMOKE) || (!has(CHILD) && !has("--bench"));
    let _ = SIZE.set(if smoke { &SMOKE_SIZE } else { &FULL });
    if let Some(i) = args.iter().position(|a| a == CHILD) {
        return fleet(args.get(i + 1).map_or("", String::as_str));
    }
    println!(
        "remedy load bench ({} cores){}",
        std::thread::available_parallelism().map_or(0, usize::from),
        if smoke {
            ": SMOKE RUN (no --bench: cargo test), figures are not measurements"
        } else {
            ""
        }
    );
    println!();
    println!(
        "webhook: {RATE} req/s for {} s, {ALERTS_PER_REQUEST} new alerts per notification, open loop, client and server on one machine",
        size().load_secs
    );
    println!(
        "{:<28} {:>6} {:>6} {:>4} {:>9} {:>10} {:>10} {:>10} {:>10}",
        "listener", "sent", "ok", "err", "rate/s", "p50", "p99", "max", "send lag"
    );
    let plain = webhook_load(None)?;
    print_load("http (server::serve)", &plain);
    let tls = self_signed()?;
    let over_tls = webhook_load(Some(&tls))?;
    print_load("https (server::serve, TLS)", &over_tls);
    for (name, f) in [("http", &plain), ("https", &over_tls)] {
        let want = f.ok * ALERTS_PER_REQUEST;
        println!(
            "  {name}: body {} bytes; {} alerts reached the queue consumer (want {want})",
            f.body_bytes, f.forwarded
        );
        // Figures of a run that lost requests or alerts would mean nothing.
        if f.failed > 0 || f.ok != f.sent || f.forwarded != want {
            return Err(format!(
                "{name}: {} of {} requests failed, {} of {want} alerts forwarded",
                f.failed, f.sent, f.forwarded
            ));
        }
    }
    println!();
    println!(
        "webhook saturated: {SATURATING_SENDERS} senders back to back for {} s, every notification a new group (episode), engine consuming; probes every {} ms",
        size().load_secs,
        PROBE_EVERY.as_millis()
    );
    // remedy serve logs at INFO by default; format those lines (into a sink).
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::sink)
        .with_env_filter("info")
        .try_init();
    let sat = webhook_saturation()?;
    print_saturation(&sat);
    println!();
    println!(
        "fleet: {} objects (half Machines, half OpenStackMachines), initial list then one update each",
        size().objects
    );
    println!(
        "{:<28} {:>8} {:>8} {:>10} {:>10} {:>12} {:>10} {:>10} {:>10}",
        "scenario",
        "objects",
        "series",
        "RSS0 KiB",
        "RSS1 KiB",
        "B/object",
        "apply p50",
        "apply p99",
        "update p50"
    );
    run_child("mixed")?;
    run_child("failing")?;
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
