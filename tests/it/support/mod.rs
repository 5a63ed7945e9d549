//! Test support: a real kube-apiserver + etcd from `testenv/` (built by
//! `testenv/build.sh`), shared by the tests of one test binary, plus helpers
//! to run the real `remedy` binary against it.

pub mod brupop;
pub mod capi;
pub mod capo;
pub mod capo_env;
pub mod mhc;
pub mod node;
pub mod objects;
pub mod openstack;
pub mod procs;
pub mod proxy;
pub mod storm;
pub mod webhook;

pub use procs::free_port;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Which CRDs a test cluster installs: `testenv/crds.sh` writes one
/// directory per set under `testenv/bin/crds/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrdSet {
    /// Cluster API v1.14, the newest served (Machine and Cluster stored as
    /// v1beta2, v1beta1 still served) and the other providers' CRDs: the
    /// shared cluster's.
    Default,
    /// The same with Cluster API v1.12, for its real manager.
    CapiV1_12,
    /// The same with Cluster API v1.10: v1beta1 is the only served and the
    /// storage version, so v1beta1 status fields such as
    /// `status.failureReason` are kept.
    CapiV1_10,
    /// CapiV1_12 plus every CRD of CAPO v0.14.7 (with its contract label)
    /// and ORC's Image: what the real CAPO manager (`testenv/capo.sh`),
    /// built against Cluster API v1.12, watches.
    Capo,
    /// Cluster API v1.13.4 with CAPO v0.15.0-beta.0's v1beta2 CRDs.
    CapoV0_15,
    /// Cluster API v1.14.2 with CAPO main's CRDs (e52de58, after PR #3300;
    /// `testenv/capo-next.sh main`).
    CapoMain,
    /// Default plus CAPD v1.13.7's CRDs (DevCluster, DevMachine: the
    /// in-memory provider, `testenv/capd.sh`).
    Capd,
}

impl CrdSet {
    fn dir(self) -> &'static str {
        match self {
            CrdSet::Default => "default",
            CrdSet::CapiV1_12 => "capi-v1.12",
            CrdSet::CapiV1_10 => "capi-v1.10",
            CrdSet::Capo => "capo",
            CrdSet::CapoV0_15 => "capo-v0.15",
            CrdSet::CapoMain => "capo-main",
            CrdSet::Capd => "capd",
        }
    }
}

pub struct TestCluster {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    child: Mutex<Option<Child>>,
    _tmp: tempfile::TempDir,
}

impl TestCluster {
    /// Starts a private cluster (for tests that restart the apiserver).
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A private cluster whose kube-apiserver gets `apiserver_args` after
    /// testenv's own flags (the last occurrence of a flag wins), e.g.
    /// `--watch-cache=false`.
    pub fn start_with(apiserver_args: &[&str]) -> Self {
        Self::start_with_crds(CrdSet::Default, apiserver_args)
    }

    /// A private cluster with the CRD set `crds` installed (see
    /// `testenv/crds.sh`), e.g. [`CrdSet::CapiV1_10`] for the v1beta1 layout.
    pub fn start_with_crds(crds: CrdSet, apiserver_args: &[&str]) -> Self {
        let bin = repo().join("testenv/bin/remedy-testenv");
        let crd_dir = repo().join("testenv/bin/crds").join(crds.dir());
        for path in [&bin, &crd_dir] {
            assert!(
                path.exists(),
                "{} missing: run `bash testenv/build.sh` (the README test command does)",
                path.display()
            );
        }
        let tmp = tempfile::Builder::new()
            .prefix("remedy-testenv-")
            .tempdir()
            .expect("tempdir");
        let dir = tmp.path().to_path_buf();
        // stdin is a lifeline: the harness exits when this process does,
        // even if Drop never runs (statics are not dropped).
        let child = Command::new(&bin)
            .args(["up", "--lifeline-stdin", "--dir"])
            .arg(&dir)
            .arg("--crds")
            .arg(&crd_dir)
            .args(
                (!apiserver_args.is_empty())
                    .then_some("--")
                    .into_iter()
                    .chain(apiserver_args.iter().copied()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("harness.log")).expect("log file"))
            .spawn()
            .expect("spawn remedy-testenv");
        let ready = dir.join("ready");
        let deadline = Instant::now() + Duration::from_secs(180);
        while !ready.exists() {
            if Instant::now() > deadline {
                panic!(
                    "test cluster not ready in 180s:\n{}",
                    tail(&dir.join("harness.log"))
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Self {
            kubeconfig: dir.join("kubeconfig"),
            dir,
            child: Mutex::new(Some(child)),
            _tmp: tmp,
        }
    }

    /// One cluster per test binary; tests isolate themselves by namespace.
    pub fn shared() -> &'static TestCluster {
        static SHARED: OnceLock<TestCluster> = OnceLock::new();
        SHARED.get_or_init(TestCluster::start)
    }

    pub async fn client(&self) -> Client {
        client_for(&self.kubeconfig, None).await
    }

    /// A client that acts as `user` (impersonation), e.g. remedy's
    /// ServiceAccount, to test RBAC.
    pub async fn client_as(&self, user: &str) -> Client {
        client_for(&self.kubeconfig, Some(user)).await
    }

    /// Restarts kube-apiserver on the same port and waits until it serves.
    pub fn restart_apiserver(&self) {
        let counter = self.dir.join("restarted");
        let before = std::fs::read_to_string(&counter).unwrap_or_default();
        let pid = self
            .child
            .lock()
            .expect("lock")
            .as_ref()
            .map(|c| c.id())
            .expect("harness running");
        let status = Command::new("kill")
            .args(["-USR1", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(120);
        while std::fs::read_to_string(&counter).unwrap_or_default() == before {
            assert!(
                Instant::now() < deadline,
                "apiserver restart timed out:\n{}",
                tail(&self.dir.join("harness.log"))
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if let Ok(mut c) = self.child.lock()
            && let Some(mut child) = c.take()
        {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let _ = child.wait();
        }
    }
}

pub async fn client_for(kubeconfig: &Path, impersonate: Option<&str>) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let mut cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    if let Some(user) = impersonate {
        cfg.auth_info.impersonate = Some(user.to_string());
    }
    Client::try_from(cfg).expect("client")
}

pub fn tail(path: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(400)..].join("\n")
}

/// A fresh namespace for one test.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, PostParams};
    let name = format!("{prefix}-{:08x}", rand::random::<u32>());
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

/// Polls `f` until it returns Some, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The real `remedy` binary, running `serve` with a config written to a
/// temp file; killed on drop.
pub struct Remedy {
    child: Child,
    pub url: String,
    pub log: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Remedy {
    pub fn serve(cluster: &TestCluster, config_yaml: &str) -> Self {
        Self::serve_with_kubeconfig(&cluster.kubeconfig, config_yaml)
    }

    /// As [`Remedy::serve`], talking to the apiserver through `kubeconfig`
    /// (e.g. one that goes through a [`proxy::Proxy`]).
    pub fn serve_with_kubeconfig(kubeconfig: &Path, config_yaml: &str) -> Self {
        Self::serve_bin(env!("CARGO_BIN_EXE_remedy"), kubeconfig, config_yaml, &[])
    }

    /// `remedy serve` from another build of the binary (e.g. with the
    /// `otlp` feature), with extra environment variables.
    pub fn serve_bin(
        bin: &str,
        kubeconfig: &Path,
        config_yaml: &str,
        envs: &[(&str, &str)],
    ) -> Self {
        Self::spawn(bin, kubeconfig, free_port(), config_yaml, envs)
    }

    /// As [`Remedy::serve`] on a given port: a replica restarted where
    /// Alertmanager already sends (a Service in front of the pods).
    pub fn serve_at(cluster: &TestCluster, port: u16, config_yaml: &str) -> Self {
        Self::spawn(
            env!("CARGO_BIN_EXE_remedy"),
            &cluster.kubeconfig,
            port,
            config_yaml,
            &[],
        )
    }

    fn spawn(
        bin: &str,
        kubeconfig: &Path,
        port: u16,
        config_yaml: &str,
        envs: &[(&str, &str)],
    ) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let config = tmp.path().join("config.yaml");
        let yaml = format!("listen: 127.0.0.1:{port}\n{config_yaml}");
        std::fs::write(&config, yaml).expect("write config");
        let log = tmp.path().join("remedy.log");
        let child = Command::new(bin)
            .args(["serve", "--config"])
            .arg(&config)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,remedy=debug")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("spawn remedy");
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
            _tmp: tmp,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A `/proc/PID/status` field in KiB, e.g. `VmRSS` or `VmHWM` (peak).
    pub fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("remedy's /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc status"))
    }

    pub fn log_tail(&self) -> String {
        tail(&self.log)
    }

    /// The whole log, for what must (not) have happened at any time.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        let r = reqwest::get(format!("{}{path}", self.url)).await.ok()?;
        let code = r.status().as_u16();
        Some((code, r.text().await.ok()?))
    }

    /// One series of /metrics (0 when absent).
    pub async fn metric(&self, series: &str) -> f64 {
        let (_, text) = self.get("/metrics").await.expect("metrics");
        sample(&text, series).unwrap_or(0.0)
    }

    /// As [`eventually`], but a timeout shows this replica's /status and
    /// log.
    pub async fn until<F, Fut>(&self, timeout: Duration, what: &str, mut f: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + timeout;
        while !f().await {
            if Instant::now() > deadline {
                let (_, status) = self.get("/status").await.unwrap_or_default();
                panic!(
                    "timed out waiting for {what}\n{status}\n{}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Ready, and watching every one of `kinds` (its initial list done).
    pub async fn wait_watching(&self, kinds: &[&str]) {
        self.wait_ready().await;
        self.until(
            Duration::from_secs(30),
            &format!("remedy watching {kinds:?}"),
            || async {
                for kind in kinds {
                    let series = format!(r#"remedy_watch_synced{{kind="{kind}"}}"#);
                    if self.metric(&series).await != 1.0 {
                        return false;
                    }
                }
                true
            },
        )
        .await;
    }

    pub async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some((200, _)) = self.get("/readyz").await {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "remedy not ready:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGSTOP: the process keeps its sockets but reads and writes nothing
    /// until [`Remedy::resume`], like a long GC pause or a frozen node.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`Remedy::freeze`].
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// SIGTERM, what Kubernetes sends on pod stop; returns at once.
    pub fn terminate(&self) {
        self.signal("-TERM");
    }

    /// Whether the process has exited (after [`Remedy::terminate`]).
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// The exit status once the process has exited.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {sig} remedy");
    }

    pub fn kill(&mut self) {
        // SIGKILL also ends a frozen (SIGSTOPped) process.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Remedy {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Value of one sample in an OpenMetrics/Prometheus text exposition.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.rsplit_once(' ').filter(|(n, _)| *n == series))
        .and_then(|(_, v)| v.parse().ok())
}

/// A copy of `kubeconfig` whose user acts as `user` (impersonation).
pub fn impersonating(kubeconfig: &Path, user: &str, dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
    let mut kc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("yaml");
    let users = kc["users"].as_sequence_mut().expect("users");
    for u in users {
        u["user"]["as"] = serde_yaml_ng::Value::String(user.to_string());
    }
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serde_yaml_ng::to_string(&kc).expect("yaml")).expect("write");
    path
}
