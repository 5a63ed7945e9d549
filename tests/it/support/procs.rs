//! Shared by the signals integration tests: real Prometheus/Alertmanager
//! processes on free loopback ports, killed when the guard drops.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The Prometheus the signal tests run: 3.x built by `testenv/prometheus.sh`,
/// or what `REMEDY_PROMETHEUS` names (scripts/test sets Debian's 2.42 for
/// one more run of the signal tests).
pub fn prometheus_bin() -> String {
    stack_bin("REMEDY_PROMETHEUS", "prometheus")
}

/// As [`prometheus_bin`]: Alertmanager 0.3x, or `REMEDY_ALERTMANAGER`.
pub fn alertmanager_bin() -> String {
    stack_bin("REMEDY_ALERTMANAGER", "alertmanager")
}

/// As [`prometheus_bin`]: the promtool of the same release, or `REMEDY_PROMTOOL`.
pub fn promtool_bin() -> String {
    stack_bin("REMEDY_PROMTOOL", "promtool")
}

fn stack_bin(var: &str, name: &str) -> String {
    std::env::var(var)
        .unwrap_or_else(|_| format!("{}/testenv/bin/{name}", env!("CARGO_MANIFEST_DIR")))
}

/// Fails (never skips) when a binary is missing: a skipped test would hide
/// that nothing was verified against the real thing.
pub fn require_binary(path: &str, how: &str) {
    assert!(
        Path::new(path).is_file(),
        "{path} not found: {how}; this test needs the real binary"
    );
}

const BUILD_STACK: &str = "run `bash testenv/prometheus.sh` (Debian's: apt-get install prometheus prometheus-alertmanager)";

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free loopback port")
}

/// A child process with its own temp dir; killed and reaped on drop, its log
/// printed if the test is failing.
pub struct Proc {
    pub name: &'static str,
    pub base: String,
    child: Child,
    log: PathBuf,
    /// Kept so the data dir outlives the process.
    _dir: tempfile::TempDir,
}

impl Proc {
    fn log_tail(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            let _ = f.seek(SeekFrom::Start(len.saturating_sub(4000)));
            let _ = f.read_to_string(&mut text);
        }
        text
    }

    /// Polls `/-/ready` until 200; panics with the log if it never gets there.
    pub async fn wait_ready(&mut self) {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited early ({status}):\n{}",
                    self.name,
                    self.log_tail()
                );
            }
            let ready = client
                .get(format!("{}/-/ready", self.base))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready in 30s:\n{}",
                self.name,
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits (60 s at most) until its `/readyz` answers 2xx, as
    /// controller-runtime managers do once their caches are synced.
    pub async fn wait_readyz(&self, what: &str) {
        let http = reqwest::Client::new();
        let url = format!("{}/readyz", self.base);
        super::eventually(Duration::from_secs(60), what, || async {
            let r = http.get(&url).send().await.ok()?;
            r.status().is_success().then_some(())
        })
        .await;
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("--- {} log ---\n{}", self.name, self.log_tail());
        }
    }
}

pub fn spawn(
    name: &'static str,
    bin: &str,
    port: u16,
    dir: tempfile::TempDir,
    args: &[String],
) -> Proc {
    spawn_with_env(name, bin, port, dir, args, &[])
}

/// As [`spawn`], with `env` added to the environment.
pub fn spawn_with_env(
    name: &'static str,
    bin: &str,
    port: u16,
    dir: tempfile::TempDir,
    args: &[String],
    env: &[(&str, &str)],
) -> Proc {
    let log = dir.path().join(format!("{name}.log"));
    let out = std::fs::File::create(&log).expect("log file");
    let err = out.try_clone().expect("log file");
    let child = Command::new(bin)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    Proc {
        name,
        base: format!("http://127.0.0.1:{port}"),
        child,
        log,
        _dir: dir,
    }
}

/// Real Alertmanager ([`alertmanager_bin`]) with `config` (YAML), clustering off so parallel
/// tests do not gossip with each other.
pub async fn start_alertmanager(config: &str) -> Proc {
    start_alertmanager_at(free_port(), config).await
}

/// As [`start_alertmanager`], on a port chosen beforehand (when the port must
/// be written into another component's config first).
pub async fn start_alertmanager_at(port: u16, config: &str) -> Proc {
    let bin = alertmanager_bin();
    require_binary(&bin, BUILD_STACK);
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("alertmanager.yml");
    std::fs::write(&cfg, config).expect("write config");
    let args = vec![
        format!("--config.file={}", cfg.display()),
        format!("--storage.path={}", dir.path().join("data").display()),
        format!("--web.listen-address=127.0.0.1:{port}"),
        "--cluster.listen-address=".to_string(),
        "--log.level=debug".to_string(),
    ];
    let mut p = spawn("alertmanager", &bin, port, dir, &args);
    p.wait_ready().await;
    p
}

/// Real Prometheus ([`prometheus_bin`]) with `config` (YAML); `files` are written beside it
/// first and `{dir}` in the config is replaced by their folder.
pub async fn start_prometheus_at(port: u16, config: &str, files: &[(&str, &str)]) -> Proc {
    let bin = prometheus_bin();
    require_binary(&bin, BUILD_STACK);
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write file");
    }
    let cfg = dir.path().join("prometheus.yml");
    let config = config.replace("{dir}", &dir.path().display().to_string());
    std::fs::write(&cfg, config).expect("write config");
    let args = vec![
        format!("--config.file={}", cfg.display()),
        format!("--storage.tsdb.path={}", dir.path().join("data").display()),
        format!("--web.listen-address=127.0.0.1:{port}"),
    ];
    let mut p = spawn("prometheus", &bin, port, dir, &args);
    p.wait_ready().await;
    p
}

/// Pushes alerts the way Prometheus does (API v2).
pub async fn push_alerts(am: &str, alerts: serde_json::Value) {
    let r = reqwest::Client::new()
        .post(format!("{am}/api/v2/alerts"))
        .json(&alerts)
        .send()
        .await
        .expect("push alerts");
    assert!(r.status().is_success(), "push alerts: {}", r.status());
}

/// The cloud-side outage alert the signal tests drive (as in
/// examples/playground/cloud.rules.yml), on `cloud_api_error_ratio{kind}`.
pub const CLOUD_RULES: &str = r#"
groups:
  - name: cloud
    rules:
      - alert: CloudAPIDegraded
        expr: max by (kind) (cloud_api_error_ratio) > 0.3
        for: 0s
        labels: {severity: critical}
"#;

/// Serves `cloud_api_error_ratio{kind}` for Prometheus to scrape, one series
/// per kind; the tests move a ratio (f64 bits) to fire or resolve the alert.
pub async fn cloud_exporter(kinds: Vec<(&'static str, Arc<AtomicU64>)>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let mut text = String::from("# TYPE cloud_api_error_ratio gauge\n");
            for (kind, ratio) in &kinds {
                let r = f64::from_bits(ratio.load(Ordering::SeqCst));
                text.push_str(&format!("cloud_api_error_ratio{{kind=\"{kind}\"}} {r}\n"));
            }
            async move { text }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    port
}

/// Alertmanager routing every alert, grouped by alertname and kind, to
/// remedy's webhook on `remedy_port`, with the Bearer token from a file;
/// short group timings so tests see holds and resolutions within seconds.
pub fn remedy_webhook_route(remedy_port: &str, token_file: &str) -> String {
    format!(
        "route:\n  receiver: remedy\n  group_by: [alertname, kind]\n  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n\
         receivers:\n  - name: remedy\n    webhook_configs:\n      - url: http://127.0.0.1:{remedy_port}/webhook/alertmanager\n        send_resolved: true\n        http_config:\n          authorization:\n            type: Bearer\n            credentials_file: {token_file}\n"
    )
}

/// Prometheus evaluating `rules.yml` every second, alerting to the
/// Alertmanager on `am_port`, scraping each (job, 127.0.0.1 port) target.
pub fn alerting_prometheus(am_port: u16, jobs: &[(&str, &str)]) -> String {
    let mut cfg = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: ['{{dir}}/rules.yml']\n\
         alerting:\n  alertmanagers: [{{static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]}}]\n\
         scrape_configs:\n"
    );
    for (job, port) in jobs {
        cfg.push_str(&format!(
            "  - {{job_name: {job}, static_configs: [{{targets: ['127.0.0.1:{port}']}}]}}\n"
        ));
    }
    cfg
}

/// An instant query; the result vector (panics unless Prometheus says success).
pub async fn prom_query(base: &str, query: &str) -> Vec<serde_json::Value> {
    let answer: serde_json::Value = reqwest::Client::new()
        .post(format!("{base}/api/v1/query"))
        .form(&[("query", query)])
        .send()
        .await
        .expect("query Prometheus")
        .json()
        .await
        .expect("Prometheus JSON");
    assert_eq!(answer["status"], "success", "{query}: {answer}");
    answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}
