//! The fake OpenStack API (`testenv/cmd/fake-openstack`) and the real
//! Cluster API managers that call it: CAPO (`testenv/capo.sh`; v0.15.0-beta.0
//! from `testenv/capo-next.sh`) and the CAPI core manager (`testenv/capi.sh`,
//! v1.12.5 or v1.13.4), each a supervised child process.
//!
//! Supervision: a process that exits while the test still needs it fails
//! the test with its log tail ([`Supervised::check`], called by
//! [`wait_for`]), and every process is killed when dropped.

use super::procs::{free_port, require_binary};
use super::{TestCluster, repo};
use serde_json::{Value, json};
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// IDs the fake seeds (testenv/cmd/fake-openstack/main.go, `seed`).
pub const NETWORK_ID: &str = "6c90b42f-7d4c-4c5a-9a40-5b1b2a7c0001";
pub const SUBNET_ID: &str = "6c90b42f-7d4c-4c5a-9a40-5b1b2a7c0002";
pub const IMAGE_ID: &str = "6c90b42f-7d4c-4c5a-9a40-5b1b2a7c0004";
pub const FLAVOR: &str = "m1.small";

/// A child process with its log in its own temp dir.
pub struct Supervised {
    pub name: &'static str,
    child: Mutex<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Supervised {
    pub fn spawn(name: &'static str, bin: &str, args: &[String], dir: tempfile::TempDir) -> Self {
        let log = dir.path().join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        Self {
            name,
            child: Mutex::new(child),
            log,
            _dir: dir,
        }
    }

    pub fn log_tail(&self, bytes: u64) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            let _ = f.seek(SeekFrom::Start(len.saturating_sub(bytes)));
            let _ = f.read_to_string(&mut text);
        }
        text
    }

    /// The whole log (for counting what the process logged).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panics with the log tail if the process has exited.
    pub fn check(&self) {
        let status = self.child.lock().expect("lock").try_wait();
        if let Ok(Some(status)) = status {
            panic!(
                "{} exited ({status}) while the test needed it:\n{}",
                self.name,
                self.log_tail(6000)
            );
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if let Ok(mut c) = self.child.lock() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- {} log (tail) ---\n{}", self.name, self.log_tail(6000));
        }
    }
}

/// Polls `f` until Some, checking every process in `procs` is still alive;
/// panics with `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(
    procs: &[&Supervised],
    timeout: Duration,
    what: &str,
    mut f: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        for p in procs {
            p.check();
        }
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn bin(name: &str, how: &str) -> String {
    let path = repo().join("testenv/bin").join(name).display().to_string();
    require_binary(&path, how);
    path
}

/// One line of the fake's `/metrics`: its labels and value.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses Prometheus text exposition (the fake's simple subset: no
/// escapes in label values, no timestamps).
pub fn parse_metrics(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let value = value.parse().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|p| !p.is_empty())
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    Some((k.to_string(), v.trim_matches('"').to_string()))
                })
                .collect();
            Some(Sample {
                name: name.to_string(),
                labels,
                value,
            })
        })
        .collect()
}

/// The fake OpenStack API on a free loopback port.
pub struct FakeOpenstack {
    pub proc: Supervised,
    pub base: String,
    http: reqwest::Client,
}

impl FakeOpenstack {
    /// `build` is how long a new server stays in BUILD.
    pub async fn start(build: Duration) -> Self {
        Self::start_with_zones(build, &["az1", "az2"]).await
    }

    /// As [`FakeOpenstack::start`], serving these availability zones.
    pub async fn start_with_zones(build: Duration, zones: &[&str]) -> Self {
        let bin = bin("fake-openstack", "run `bash testenv/build.sh`");
        let port = free_port();
        let args = vec![
            format!("--listen=127.0.0.1:{port}"),
            format!("--build-time={}ms", build.as_millis()),
            format!("--zones={}", zones.join(",")),
        ];
        let proc = Supervised::spawn(
            "fake-openstack",
            &bin,
            &args,
            tempfile::tempdir().expect("tmp"),
        );
        let fake = Self {
            proc,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        };
        let url = format!("{}/healthz", fake.base);
        let http = fake.http.clone();
        wait_for(
            &[&fake.proc],
            Duration::from_secs(20),
            "fake-openstack /healthz",
            || async {
                let r = http.get(&url).send().await.ok()?;
                r.status().is_success().then_some(())
            },
        )
        .await;
        fake
    }

    /// A clouds.yaml whose cloud `fake` authenticates at the fake's Keystone.
    pub fn clouds_yaml(&self) -> String {
        format!(
            "clouds:\n  fake:\n    auth:\n      auth_url: {}/identity/v3\n      username: capo\n      \
             password: secret\n      project_name: capo\n      user_domain_name: Default\n      \
             project_domain_name: Default\n    region_name: RegionOne\n    interface: public\n    \
             identity_api_version: 3\n",
            self.base
        )
    }

    /// Replaces the fault configuration (the fake's `Faults` JSON).
    pub async fn set_faults(&self, faults: Value) {
        let r = self
            .http
            .put(format!("{}/admin/faults", self.base))
            .json(&faults)
            .send()
            .await
            .expect("PUT /admin/faults");
        let status = r.status();
        let body = r.text().await.unwrap_or_default();
        assert!(status.is_success(), "PUT /admin/faults: {status}: {body}");
    }

    pub async fn clear_faults(&self) {
        self.set_faults(json!({"rules": []})).await;
    }

    pub async fn metrics(&self) -> Vec<Sample> {
        self.proc.check();
        let text = self
            .http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics body");
        parse_metrics(&text)
    }

    /// Calls about one server (`/compute/v2.1/servers/{id}…`), from the
    /// fake's request log: `/metrics` counts by resource, not by server.
    pub fn server_calls(&self, id: &str) -> usize {
        let path = format!("/compute/v2.1/servers/{id}");
        self.proc
            .log()
            .lines()
            .filter(|l| l.contains(&path))
            .count()
    }

    pub async fn state(&self) -> Value {
        self.http
            .get(format!("{}/admin/state", self.base))
            .send()
            .await
            .expect("GET /admin/state")
            .json()
            .await
            .expect("state JSON")
    }
}

/// Sums `fake_openstack_resource_requests_total` over the series matching `want`.
pub fn sum(samples: &[Sample], want: &[(&str, &str)]) -> u64 {
    samples
        .iter()
        .filter(|s| s.name == "fake_openstack_resource_requests_total")
        .filter(|s| want.iter().all(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value as u64)
        .sum()
}

/// A throwaway serving cert: neither manager can turn its webhook server off.
fn cert_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    std::fs::write(dir.path().join("tls.crt"), cert.pem()).expect("cert");
    std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).expect("key");
    dir
}

async fn wait_ready(proc: &Supervised, health: u16) {
    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{health}/readyz");
    wait_for(
        &[proc],
        Duration::from_secs(90),
        &format!("{} /readyz", proc.name),
        || async {
            let r = http.get(&url).send().await.ok()?;
            r.status().is_success().then_some(())
        },
    )
    .await;
}

/// The flags both managers share: namespace-scoped, no leader election,
/// free ports, a throwaway webhook cert, no CRD migration (the test
/// cluster's CRDs are the modules' own, at their storage versions).
fn manager_args(
    cluster: &TestCluster,
    ns: &str,
    cert: &tempfile::TempDir,
    health: u16,
) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", cluster.kubeconfig.display()),
        format!("--namespace={ns}"),
        "--leader-elect=false".into(),
        format!("--webhook-port={}", free_port()),
        format!("--webhook-cert-dir={}", cert.path().display()),
        format!("--health-addr=127.0.0.1:{health}"),
        format!("--diagnostics-address=127.0.0.1:{}", free_port()),
        "--insecure-diagnostics".into(),
        // One phase per flag: CAPO's is a string array, not a list.
        "--skip-crd-migration-phases=StorageVersionMigration".into(),
        "--skip-crd-migration-phases=CleanupManagedFields".into(),
    ]
}

/// A real manager from `testenv/bin/{file}` (built by `how`) with the
/// shared flags and `extra`, supervised as `name`, once it is ready.
async fn start_manager(
    name: &'static str,
    file: &str,
    how: &str,
    cluster: &TestCluster,
    ns: &str,
    extra: &[&str],
) -> Supervised {
    let bin = bin(file, how);
    let cert = cert_dir();
    let health = free_port();
    let mut args = manager_args(cluster, ns, &cert, health);
    args.extend(extra.iter().map(|s| s.to_string()));
    let p = Supervised::spawn(name, &bin, &args, cert);
    wait_ready(&p, health).await;
    p
}

/// The real Cluster API core manager (v1.12.5, `testenv/capi.sh`).
pub async fn start_capi_manager(cluster: &TestCluster, ns: &str) -> Supervised {
    start_manager(
        "capi-manager",
        "capi-manager",
        "run `bash testenv/capi.sh`",
        cluster,
        ns,
        &[],
    )
    .await
}

/// The real CAPO manager (v0.14.7, `testenv/capo.sh`); `-v=4` so its log
/// shows each reconcile's decision.
pub async fn start_capo_manager(cluster: &TestCluster, ns: &str) -> Supervised {
    start_capo_manager_with(cluster, ns, &[]).await
}

/// [`start_capo_manager`] with `extra` flags (`--sync-period=15s`: every
/// object reconciled again that often, as every 10 min in a cluster).
pub async fn start_capo_manager_with(
    cluster: &TestCluster,
    ns: &str,
    extra: &[&str],
) -> Supervised {
    let mut args = vec!["--v=4"];
    args.extend_from_slice(extra);
    start_manager(
        "capo-manager",
        "capo-manager",
        "run `bash testenv/capo.sh`",
        cluster,
        ns,
        &args,
    )
    .await
}

/// The real Cluster API core manager v1.13.4 (`testenv/capi.sh v1.13.4`),
/// the version CAPO v0.15.0-beta.0's go.mod requires.
pub async fn start_capi_manager_v1_13(cluster: &TestCluster, ns: &str) -> Supervised {
    start_manager(
        "capi-manager-v1.13.4",
        "capi-manager-v1.13.4",
        "run `bash testenv/capi.sh v1.13.4`",
        cluster,
        ns,
        &[],
    )
    .await
}

/// The real CAPO v0.15.0-beta.0 manager (`testenv/capo-next.sh`, from the
/// source tarball); `-v=4` as for v0.14.7.
pub async fn start_capo_manager_v0_15(cluster: &TestCluster, ns: &str) -> Supervised {
    start_manager(
        "capo-manager-v0.15",
        "capo-manager-v0.15",
        "run `bash testenv/capo-next.sh`",
        cluster,
        ns,
        &["--v=4"],
    )
    .await
}

/// The real Cluster API core manager v1.14.2 (`testenv/capi.sh v1.14.2`):
/// CAPO main's go.mod requires v1.14.
pub async fn start_capi_manager_v1_14(cluster: &TestCluster, ns: &str) -> Supervised {
    start_manager(
        "capi-manager-v1.14.2",
        "capi-manager-v1.14.2",
        "run `bash testenv/capi.sh v1.14.2`",
        cluster,
        ns,
        &[],
    )
    .await
}

/// The real CAPO main manager (e52de58, after PR #3300:
/// `testenv/capo-next.sh main`, from the source tarball); `-v=4` as for
/// v0.14.7.
pub async fn start_capo_manager_main(cluster: &TestCluster, ns: &str) -> Supervised {
    start_manager(
        "capo-manager-main",
        "capo-manager-main",
        "run `bash testenv/capo-next.sh main`",
        cluster,
        ns,
        &["--v=4"],
    )
    .await
}
