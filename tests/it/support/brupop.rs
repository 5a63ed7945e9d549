//! The real brupop controller (bottlerocket-update-operator at 2fcbeb12,
//! built by `testenv/brupop.sh`), run as it runs in a cluster: in-cluster
//! config only. It reads `https://kubernetes.default.svc` (port 443) and the
//! ServiceAccount files under `/var/run/secrets/kubernetes.io/serviceaccount`
//! (`kube::Config::incluster_dns`), so it runs as a host process in a
//! private mount namespace (`unshare -m`): a tmpfs over `/run` (`/var/run`
//! is a link to it) holds the token, `ca.crt` and `namespace`, and a hosts
//! file bound over `/etc/hosts` resolves `kubernetes.default.svc` to a
//! loopback address of its own, where a forwarder in this process passes
//! port 443 to the test apiserver (whose serving cert names
//! `kubernetes.default.svc`). The token is a real ServiceAccount token
//! (TokenRequest) for upstream's controller ServiceAccount, bound to
//! upstream's controller ClusterRole; the BottlerocketShadow CRD is
//! upstream's too, replacing the test clusters' stand-in
//! (`testenv/crds/brupop.bottlerocket.aws_bottlerocketshadows.yaml`).
//!
//! The controller always listens on port 8080 of every address, so one runs
//! at a time (a lock) in a private cluster of its own: it handles one node
//! at a time cluster-wide and deletes shadows whose Node lacks its label.

use super::{TestCluster, repo, tail};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Upstream's namespace (the chart's `namespace` value).
pub const NAMESPACE: &str = "brupop-bottlerocket-aws";
/// The label the controller needs on a Node, else it deletes its shadow.
pub const INTERFACE_LABEL: &str = "bottlerocket.aws/updater-interface-version";
const SERVICE_ACCOUNT: &str = "brupop-controller-service-account";
const CRD: &str = "bottlerocketshadows.brupop.bottlerocket.aws";

fn controller_bin() -> PathBuf {
    repo().join("testenv/bin/brupop-controller")
}

fn charts() -> PathBuf {
    repo().join("testenv/bin/brupop-charts")
}

/// Whether the controller is built. Without it the test is skipped with a
/// message, or fails when `REMEDY_REQUIRE_BRUPOP=1` (`scripts/test`).
pub fn available() -> bool {
    let bin = controller_bin();
    if bin.is_file() && charts().is_dir() {
        return true;
    }
    let why = format!(
        "{} or testenv/bin/brupop-charts missing: run `bash testenv/brupop.sh`",
        bin.display()
    );
    assert!(
        std::env::var_os("REMEDY_REQUIRE_BRUPOP").is_none(),
        "REMEDY_REQUIRE_BRUPOP is set but {why}"
    );
    eprintln!("skipped: {why}");
    false
}

/// An upstream chart template with its `{{ .Values.* }}` filled in as the
/// chart's defaults do (only the ones these templates use).
fn template(path: &str) -> Value {
    let file = charts().join(path);
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .replace("{{ .Values.namespace }}", NAMESPACE)
        .replace("{{ .Values.apiserver_service_port }}", "443");
    assert!(!text.contains("{{"), "{path}: unfilled template:\n{text}");
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn cluster_scoped(mut v: Value) -> Value {
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("namespace");
    }
    v
}

/// The shadows' API (v2, what the controller and remedy use).
pub fn shadows(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("brupop.bottlerocket.aws", "v2", "BottlerocketShadow");
    Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &ApiResource::from_gvk_with_plural(&gvk, "bottlerocketshadows"),
    )
}

/// Replaces the stand-in CRD with upstream's and waits until it serves.
async fn install_upstream_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut crd: CustomResourceDefinition = serde_json::from_value(template(
        "bottlerocket-shadow/templates/custom-resource-definition.yaml",
    ))
    .expect("upstream CRD");
    let old = crds.get(CRD).await.expect("the stand-in CRD");
    crd.metadata.resource_version = old.metadata.resource_version;
    crds.replace(CRD, &PostParams::default(), &crd)
        .await
        .expect("replace the stand-in CRD with upstream's");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = crds.get(CRD).await.expect("crd");
        let established = c.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Established" && c.status == "True")
                && s.stored_versions.iter().flatten().any(|v| v == "v2")
        });
        let served = c.spec.versions.iter().filter(|v| v.served).count();
        if established && served == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "upstream CRD not established: {:?}",
            c.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A forwarder from `ip:443` to the apiserver (`127.0.0.1:port`).
async fn forward(ip: &str, port: u16) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind((ip, 443))
        .await
        .unwrap_or_else(|e| panic!("bind {ip}:443 for kubernetes.default.svc: {e}"));
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut out) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                }
            });
        }
    })
}

fn apiserver_port(cluster: &TestCluster) -> u16 {
    std::fs::read_to_string(&cluster.kubeconfig)
        .expect("kubeconfig")
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("server: https://127.0.0.1:")?
                .parse()
                .ok()
        })
        .expect("apiserver port in the kubeconfig")
}

/// One controller at a time: it binds port 8080 on every address.
fn lock() -> Arc<tokio::sync::Mutex<()>> {
    static LOCK: OnceLock<Arc<tokio::sync::Mutex<()>>> = OnceLock::new();
    LOCK.get_or_init(Default::default).clone()
}

pub struct Brupop {
    child: Child,
    pub log: PathBuf,
    forwarder: tokio::task::JoinHandle<()>,
    _lock: tokio::sync::OwnedMutexGuard<()>,
    _tmp: tempfile::TempDir,
}

impl Brupop {
    /// Installs upstream's CRD, namespace, ServiceAccount, ClusterRole and
    /// binding in `cluster` (a private one) and starts the controller with
    /// the chart's default settings (`MAX_CONCURRENT_UPDATE=1`, the cron
    /// schedule "always"). `node_name` is the node it "runs on"
    /// (`MY_NODE_NAME`): the controller updates that node's shadow last.
    pub async fn start(cluster: &TestCluster, node_name: &str) -> Self {
        let guard = lock().lock_owned().await;
        let client = cluster.client().await;
        install_upstream_crd(&client).await;
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).expect("ns");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create brupop's namespace");
        let chart = "bottlerocket-update-operator/templates";
        let sa: ServiceAccount = serde_json::from_value(template(&format!(
            "{chart}/controller-service-account.yaml"
        )))
        .expect("service account");
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
        sas.create(&PostParams::default(), &sa)
            .await
            .expect("create SA");
        let role: ClusterRole = serde_json::from_value(cluster_scoped(template(&format!(
            "{chart}/controller-cluster-role.yaml"
        ))))
        .expect("cluster role");
        Api::<ClusterRole>::all(client.clone())
            .create(&PostParams::default(), &role)
            .await
            .expect("create the controller ClusterRole");
        let binding: ClusterRoleBinding = serde_json::from_value(cluster_scoped(template(
            &format!("{chart}/controller-cluster-role-binding.yaml"),
        )))
        .expect("binding");
        Api::<ClusterRoleBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .expect("create the controller ClusterRoleBinding");
        let tr: TokenRequest =
            serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 7200}}))
                .expect("token request");
        let token = sas
            .create_token_request(SERVICE_ACCOUNT, &PostParams::default(), &tr)
            .await
            .expect("ServiceAccount token")
            .status
            .expect("token status")
            .token
            .expect("token");

        let tmp = tempfile::Builder::new()
            .prefix("brupop-")
            .tempdir()
            .expect("tmp");
        let sa_dir = tmp.path().join("serviceaccount");
        std::fs::create_dir(&sa_dir).expect("sa dir");
        std::fs::write(sa_dir.join("token"), token).expect("token");
        std::fs::copy(cluster.dir.join("ca.crt"), sa_dir.join("ca.crt")).expect("ca.crt");
        std::fs::write(sa_dir.join("namespace"), NAMESPACE).expect("namespace");
        // A loopback address of its own for kubernetes.default.svc.
        let r = rand::random::<u16>();
        let ip = format!(
            "127.{}.{}.{}",
            100 + (r % 100),
            (r >> 8) % 250 + 1,
            10 + r % 200
        );
        let forwarder = forward(&ip, apiserver_port(cluster)).await;
        let hosts = tmp.path().join("hosts");
        std::fs::write(
            &hosts,
            format!(
                "127.0.0.1 localhost\n{ip} kubernetes.default.svc kubernetes.default kubernetes\n"
            ),
        )
        .expect("hosts");
        let log = tmp.path().join("brupop-controller.log");
        let out = std::fs::File::create(&log).expect("log");
        let err = out.try_clone().expect("log");
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "--", "sh", "-ec"])
            .arg(
                "mount -t tmpfs tmpfs /run\n\
                 mkdir -p /run/secrets/kubernetes.io/serviceaccount\n\
                 mount --bind \"$1\" /run/secrets/kubernetes.io/serviceaccount\n\
                 mount --bind \"$2\" /etc/hosts\n\
                 exec \"$3\"",
            )
            .arg("sh")
            .arg(&sa_dir)
            .arg(&hosts)
            .arg(controller_bin())
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            // What the Deployment and the kubelet give it; the service IP
            // only picks IPv4 for its metrics listener.
            .env("KUBERNETES_SERVICE_HOST", "10.0.0.1")
            .env("KUBERNETES_SERVICE_PORT", "443")
            .env("MY_NODE_NAME", node_name)
            .env("MAX_CONCURRENT_UPDATE", "1")
            .env("SCHEDULER_CRON_EXPRESSION", "* * * * * * *")
            .env("LOGGING_FORMATTER", "pretty")
            .env("LOGGING_ANSI_ENABLED", "false")
            .env("TRACING_FILTER_DIRECTIVE", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn unshare brupop-controller");
        let mut me = Self {
            child,
            log,
            forwarder,
            _lock: guard,
            _tmp: tmp,
        };
        me.wait_ready().await;
        me
    }

    /// Up once its metrics server answers (it starts after the watches)
    /// and it has read the shadows (its "Nothing to do" or a decision).
    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.check();
            let up = reqwest::get("http://127.0.0.1:8080/metrics")
                .await
                .is_ok_and(|r| r.status().is_success());
            if up {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "brupop controller not serving :8080 in 60 s:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Panics with the log if the controller exited.
    pub fn check(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("brupop controller exited ({status}):\n{}", self.log_tail());
        }
    }

    pub fn log_tail(&self) -> String {
        tail(&self.log)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Brupop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.forwarder.abort();
        if std::thread::panicking() {
            eprintln!("--- brupop controller log (tail) ---\n{}", self.log_tail());
        }
    }
}

/// A Node with brupop's interface label (the agent's DaemonSet selects on
/// it; the controller deletes shadows of nodes without it).
pub async fn node(client: &Client, name: &str) -> Node {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {INTERFACE_LABEL: "2.0.0"}},
    }))
    .expect("node");
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("create node")
}

/// The agent's shadow for `node` (`brs-<node>`, owned by it), with the
/// status the agent would write; the spec is what the controller last
/// wrote (Idle at first).
pub async fn shadow(client: &Client, node: &Node, spec: Value, status: Value) -> DynamicObject {
    let name = node.metadata.name.clone().expect("node name");
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "brupop.bottlerocket.aws/v2",
        "kind": "BottlerocketShadow",
        "metadata": {
            "name": format!("brs-{name}"),
            "namespace": NAMESPACE,
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "Node", "name": name,
                "uid": node.metadata.uid.clone().expect("node uid"),
            }],
        },
        "spec": spec,
    }))
    .expect("shadow");
    let api = shadows(client);
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create shadow");
    agent_writes(&api, &format!("brs-{name}"), status).await
}

/// What the agent does every 5 s: replace the whole status (a merge patch
/// of every field it owns).
pub async fn agent_writes(api: &Api<DynamicObject>, name: &str, status: Value) -> DynamicObject {
    use kube::api::{Patch, PatchParams};
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap_or_else(|e| panic!("agent status write on {name}: {e}"))
}

/// The status an agent reports for an Idle node whose update is pending
/// (1.19.5 → 1.20.3) after `crash_count` failed attempts, the last at
/// `failed_at` (null: never crashed).
pub fn idle_status(crash_count: u32, failed_at: Option<chrono::DateTime<chrono::Utc>>) -> Value {
    json!({
        "current_version": "1.19.5",
        "target_version": "1.20.3",
        "current_state": "Idle",
        "crash_count": crash_count,
        "state_transition_failure_timestamp": failed_at.map(|t| t.to_rfc3339()),
    })
}
