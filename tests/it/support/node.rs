//! A real node for tests that need pods to run: a private [`TestCluster`]
//! whose apiserver admits ServiceAccounts, plus kube-controller-manager,
//! kube-scheduler, containerd and a kubelet, all built or installed by
//! `testenv/node.sh`. The kubelet and containerd run in a network namespace
//! of their own (the node IP may not be loopback), joined to the host by a
//! veth pair: host end 10.201.K.1, node end 10.201.K.2, pods in 10.202.K.0/24
//! on a CNI bridge. Without kube-proxy, a DNAT in the node's namespace sends
//! the `kubernetes` Service (10.0.0.1:443) to the apiserver, so in-cluster
//! config works; a host route to the pod subnet lets the test reach pod IPs.
//!
//! Everything is torn down on drop: pods' tasks, containerd and its shims,
//! the kubelet, the controllers, mounts under the node's directory, the
//! network namespace and the veth. A test binary killed before drop leaves
//! a namespace named after its pid, which the next [`Node::start`] removes.

use super::{CrdSet, TestCluster, repo, tail};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One node at a time per test binary: each is a whole cluster and the
/// machine has few cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The image `scripts/image` builds and the tag the chart and overlays use.
pub const REMEDY_IMAGE: &str = "ghcr.io/remedy-dev/remedy:0.1.0";
const LOCAL_IMAGE: &str = "localhost/remedy:0.1.0";

/// A long-lived process the node needs; its death is reported with its log.
struct Supervised {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Supervised {
    fn spawn(name: &'static str, mut cmd: Command, dir: &Path) -> Self {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        // SIGKILL when the test thread that started the node goes, even if
        // it never drops it (the node lives and dies on that thread).
        // SAFETY: prctl is async-signal-safe and touches no parent state.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Self { name, child, log }
    }

    fn assert_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited ({status}):\n{}", self.name, tail(&self.log));
        }
    }

    fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            signal(self.child.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status();
}

/// Runs a setup command; panics with its output unless it succeeds.
fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A teardown command: errors are expected (already gone) and ignored.
fn quiet(program: &str, args: &[&str]) {
    let _ = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn bin(name: &str) -> PathBuf {
    repo().join("testenv/bin").join(name)
}

/// Why a node cannot start here, if it cannot: missing parts are reported,
/// never silently skipped under `REMEDY_REQUIRE_NODE=1`.
fn missing() -> Option<String> {
    let mut missing = Vec::new();
    for f in [
        "kubelet",
        "kube-controller-manager",
        "kube-scheduler",
        "pause.oci.tar",
        "pause.image",
    ] {
        if !bin(f).exists() {
            missing.push(format!("testenv/bin/{f}"));
        }
    }
    for f in [
        "/usr/bin/containerd",
        "/usr/bin/ctr",
        "/usr/sbin/runc",
        "/usr/lib/cni/bridge",
        "/usr/lib/cni/host-local",
    ] {
        if !Path::new(f).exists() {
            missing.push(f.to_string());
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        missing.push("root (network namespaces, mounts)".to_string());
    }
    (!missing.is_empty()).then(|| {
        format!(
            "no node can start: missing {} (run `bash testenv/node.sh` as root)",
            missing.join(", ")
        )
    })
}

pub struct Node {
    pub name: String,
    /// `ip netns` name of the node's network namespace.
    pub netns: String,
    /// Where kubectl and clients reach the cluster.
    pub kubeconfig: PathBuf,
    k: u8,
    dir: PathBuf,
    sock: PathBuf,
    procs: Vec<Supervised>,
    /// Dropped last: the cluster outlives the node's teardown.
    pub cluster: TestCluster,
    _tmp: tempfile::TempDir,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Node {
    /// A cluster with one Ready node, or `None` (saying why on stderr) if
    /// the parts are not installed here. With `REMEDY_REQUIRE_NODE=1`
    /// (scripts/test sets it) a missing part fails the test instead.
    pub fn start() -> Option<Node> {
        Self::start_with_crds(CrdSet::Default)
    }

    /// A node whose cluster installs `crds` (e.g. a Cluster API release's
    /// own, for its real manager).
    pub fn start_with_crds(crds: CrdSet) -> Option<Node> {
        if let Some(why) = missing() {
            assert!(
                std::env::var_os("REMEDY_REQUIRE_NODE").is_none(),
                "REMEDY_REQUIRE_NODE is set but {why}"
            );
            eprintln!("SKIPPED: {why}");
            return None;
        }
        let turn = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        remove_stale();
        let started = Instant::now();
        let tmp = tempfile::Builder::new()
            .prefix("remedy-node-")
            .tempdir()
            .expect("tempdir");
        let dir = tmp.path().to_path_buf();
        // Lets a later run clean up after a test binary killed mid-test.
        std::fs::write(dir.join("owner"), std::process::id().to_string()).expect("owner file");

        // The veth pair; the first free index K also names the namespace.
        let k = (0..64u8)
            .find(|k| {
                Command::new("ip")
                    .args(["link", "add", &format!("rmd{k}h"), "type", "veth"])
                    .args(["peer", "name", &format!("rmd{k}n")])
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            })
            .expect("a free veth name rmdKh (K < 64)");
        let netns = format!("rmd-{}-{k}", std::process::id());
        let name = format!("node-{k}");
        let (host_ip, node_ip) = (format!("10.201.{k}.1"), format!("10.201.{k}.2"));
        let pod_cidr = format!("10.202.{k}.0/24");
        run("ip", &["netns", "add", &netns]);
        let ns = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &netns];
            all.extend_from_slice(args);
            run("ip", &all)
        };
        run("ip", &["link", "set", &format!("rmd{k}n"), "netns", &netns]);
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("{host_ip}/30"),
                "dev",
                &format!("rmd{k}h"),
            ],
        );
        run("ip", &["link", "set", &format!("rmd{k}h"), "up"]);
        ns(&["ip", "link", "set", "lo", "up"]);
        ns(&[
            "ip",
            "addr",
            "add",
            &format!("{node_ip}/30"),
            "dev",
            &format!("rmd{k}n"),
        ]);
        ns(&["ip", "link", "set", &format!("rmd{k}n"), "up"]);
        ns(&["ip", "route", "add", "default", "via", &host_ip]);
        ns(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        // The test reaches pods by IP through the node.
        run("ip", &["route", "add", &pod_cidr, "via", &node_ip]);

        // The apiserver must be reachable from the node's namespace (the host
        // end of the veth) and admit ServiceAccounts so pods get tokens; the
        // last occurrence of a flag wins over testenv's.
        let cluster = TestCluster::start_with_crds(
            crds,
            &[
                "--bind-address=0.0.0.0",
                "--disable-admission-plugins=DenyServiceExternalIPs",
            ],
        );
        let port = std::fs::read_to_string(&cluster.kubeconfig)
            .expect("kubeconfig")
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("server: https://127.0.0.1:")
                    .map(str::to_string)
            })
            .expect("apiserver port in the kubeconfig");
        let api = format!("{host_ip}:{port}");
        for chain in ["PREROUTING", "OUTPUT"] {
            ns(&[
                "iptables",
                "-t",
                "nat",
                "-A",
                chain,
                "-d",
                "10.0.0.1/32",
                "-p",
                "tcp",
                "--dport",
                "443",
                "-j",
                "DNAT",
                "--to-destination",
                &api,
            ]);
        }
        ns(&[
            "iptables",
            "-t",
            "nat",
            "-A",
            "POSTROUTING",
            "-o",
            &format!("rmd{k}n"),
            "-j",
            "MASQUERADE",
        ]);

        let kubeconfig = cluster.kubeconfig.clone();
        let mut node = Node {
            name: name.clone(),
            netns: netns.clone(),
            kubeconfig: kubeconfig.clone(),
            k,
            sock: dir.join("c/containerd.sock"),
            dir: dir.clone(),
            procs: Vec::new(),
            cluster,
            _tmp: tmp,
            _turn: turn,
        };
        node.credentials(&name);
        node.start_containerd(&pod_cidr);
        node.import_images();
        node.start_controllers();
        node.start_kubelet(&node_ip);
        node.wait_ready();
        eprintln!(
            "node {name} Ready {:.1}s after start (netns {netns})",
            started.elapsed().as_secs_f64()
        );
        Some(node)
    }

    fn cluster_file(&self, f: &str) -> String {
        self.cluster.dir.join(f).display().to_string()
    }

    /// The kubelet's client cert (CN system:node:NAME, O system:nodes),
    /// signed by the harness CA, bound to ClusterRole system:node.
    fn credentials(&self, name: &str) {
        let d = |f: &str| self.dir.join(f).display().to_string();
        run("openssl", &["genrsa", "-out", &d("node.key"), "2048"]);
        run(
            "openssl",
            &[
                "req",
                "-new",
                "-key",
                &d("node.key"),
                "-out",
                &d("node.csr"),
                "-subj",
                &format!("/O=system:nodes/CN=system:node:{name}"),
            ],
        );
        run(
            "openssl",
            &[
                "x509",
                "-req",
                "-in",
                &d("node.csr"),
                "-CA",
                &self.cluster_file("ca.crt"),
                "-CAkey",
                &self.cluster_file("ca.key"),
                "-CAcreateserial",
                "-out",
                &d("node.crt"),
                "-days",
                "2",
            ],
        );
        let kc = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1:443\n    certificate-authority: {ca}\n\
             users:\n- name: u\n  user:\n    client-certificate: {crt}\n    client-key: {key}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n",
            ca = self.cluster_file("ca.crt"),
            crt = d("node.crt"),
            key = d("node.key"),
        );
        std::fs::write(self.dir.join("kubelet.kubeconfig"), kc).expect("kubelet kubeconfig");
        self.kubectl(&[
            "create",
            "clusterrolebinding",
            &format!("remedy-{name}"),
            "--clusterrole=system:node",
            &format!("--user=system:node:{name}"),
        ]);
    }

    fn start_containerd(&mut self, pod_cidr: &str) {
        let c = self.dir.join("c");
        let cni = self.dir.join("cni");
        std::fs::create_dir_all(&cni).expect("cni dir");
        let pause = std::fs::read_to_string(bin("pause.image")).expect("pause.image");
        // Everything under the node's dir, so teardown finds it: state, root,
        // sockets, the pods' netns mounts and CNI's IP allocations.
        let config = format!(
            r#"version = 2
root = "{c}/root"
state = "{c}/state"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{c}/ttrpc.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "{c}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
"#,
            c = c.display(),
            sock = self.sock.display(),
            pause = pause.trim(),
            cni = cni.display(),
        );
        std::fs::create_dir_all(&c).expect("containerd dir");
        std::fs::write(self.dir.join("containerd.toml"), config).expect("containerd config");
        let conflist = serde_json::json!({
            "cniVersion": "0.4.0",
            "name": "remedy",
            "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
                 "hairpinMode": true,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr}]],
                          "routes": [{"dst": "0.0.0.0/0"}],
                          "dataDir": self.dir.join("ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": true}}
            ]
        });
        std::fs::write(cni.join("10-remedy.conflist"), conflist.to_string()).expect("cni config");
        let mut cmd = self.in_netns("containerd");
        cmd.arg("--config").arg(self.dir.join("containerd.toml"));
        self.procs
            .push(Supervised::spawn("containerd", cmd, &self.dir));
        self.wait("containerd answering", 30, |n| n.ctr(&["version"]).is_ok());
    }

    fn import_images(&mut self) {
        let remedy_archive = match std::env::var("REMEDY_IMAGE_ARCHIVE") {
            Ok(path) => PathBuf::from(path),
            Err(_) => {
                // The image scripts/image built, from podman's store.
                let exists = Command::new("podman")
                    .args(["image", "exists", LOCAL_IMAGE])
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(
                    exists,
                    "{LOCAL_IMAGE} not in podman's store: run `scripts/image` (or set REMEDY_IMAGE_ARCHIVE to `scripts/image --save FILE`'s FILE)"
                );
                let path = self.dir.join("remedy.oci.tar");
                let p = path.display().to_string();
                run(
                    "podman",
                    &["save", "--format", "oci-archive", "-o", &p, LOCAL_IMAGE],
                );
                path
            }
        };
        for archive in [bin("pause.oci.tar"), remedy_archive] {
            let a = archive.display().to_string();
            self.ctr(&["images", "import", "--all-platforms", &a])
                .unwrap_or_else(|e| panic!("ctr images import {a}: {e}"));
        }
        // The chart and the overlays name the published image.
        self.ctr(&["images", "tag", "--force", LOCAL_IMAGE, REMEDY_IMAGE])
            .unwrap_or_else(|e| panic!("ctr images tag: {e}"));
    }

    /// controller-manager (ServiceAccounts, ReplicaSets, kube-root-ca.crt,
    /// garbage collection) and scheduler: without them a Deployment never
    /// gets pods. On the host, on free loopback ports.
    fn start_controllers(&mut self) {
        let kc = self.kubeconfig.display().to_string();
        let mut kcm = Command::new(bin("kube-controller-manager"));
        kcm.args([
            format!("--kubeconfig={kc}"),
            format!("--root-ca-file={}", self.cluster_file("ca.crt")),
            format!(
                "--service-account-private-key-file={}",
                self.cluster_file("sa.key")
            ),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", super::free_port()),
            format!("--cert-dir={}", self.dir.join("kcm-certs").display()),
            "--controllers=*,-csrsigning,-nodeipam,-cloud-node-lifecycle".into(),
            "--node-monitor-grace-period=20s".into(),
        ]);
        self.procs
            .push(Supervised::spawn("kube-controller-manager", kcm, &self.dir));
        let mut sched = Command::new(bin("kube-scheduler"));
        sched.args([
            format!("--kubeconfig={kc}"),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", super::free_port()),
            format!("--cert-dir={}", self.dir.join("sched-certs").display()),
        ]);
        self.procs
            .push(Supervised::spawn("kube-scheduler", sched, &self.dir));
    }

    fn start_kubelet(&mut self, node_ip: &str) {
        let d = |f: &str| self.dir.join(f).display().to_string();
        // cgroupfs and failCgroupV1=false: this machine has hybrid cgroups
        // and no systemd; low eviction thresholds so a full shared disk does
        // not evict the test's pods.
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             cgroupDriver: cgroupfs\nfailCgroupV1: false\nfailSwapOn: false\n\
             cgroupsPerQOS: false\nenforceNodeAllocatable: []\n\
             containerRuntimeEndpoint: unix://{sock}\npodLogsDir: {logs}\n\
             authentication: {{anonymous: {{enabled: true}}, webhook: {{enabled: false}}}}\n\
             authorization: {{mode: AlwaysAllow}}\n\
             evictionHard: {{memory.available: 1Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}}\n\
             imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n\
             readOnlyPort: 0\nserializeImagePulls: false\nsyncFrequency: 10s\n\
             nodeStatusUpdateFrequency: 5s\nfileCheckFrequency: 5s\n",
            sock = self.sock.display(),
            logs = d("pod-logs"),
        );
        std::fs::write(self.dir.join("kubelet.yaml"), config).expect("kubelet config");
        let mut cmd = self.in_netns(&bin("kubelet").display().to_string());
        cmd.args([
            format!("--config={}", d("kubelet.yaml")),
            format!("--kubeconfig={}", d("kubelet.kubeconfig")),
            format!("--root-dir={}", d("kubelet")),
            format!("--cert-dir={}", d("kubelet-pki")),
            format!("--hostname-override={}", self.name),
            format!("--node-ip={node_ip}"),
            "--v=2".into(),
        ]);
        self.procs
            .push(Supervised::spawn("kubelet", cmd, &self.dir));
    }

    fn wait_ready(&mut self) {
        let name = self.name.clone();
        self.wait("the node Ready", 120, |n| {
            n.try_kubectl(&[
                "get",
                "node",
                &name,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ])
            .is_ok_and(|s| s.trim() == "True")
        });
    }

    /// `program` in the node's network namespace, in the host's mount
    /// namespace (kubelet and containerd must see each other's mounts).
    fn in_netns(&self, program: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{}", self.netns))
            .arg("--")
            .arg(program);
        cmd
    }

    pub fn ctr(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&self.sock)
            .args(["-n", "k8s.io"])
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// kubectl against this cluster; `Err` with its output on failure.
    pub fn try_kubectl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .map_err(|e| format!("kubectl: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "kubectl {}: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// kubectl against this cluster; panics with its output (and the node's
    /// state) unless it succeeds.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.try_kubectl(args)
            .unwrap_or_else(|e| panic!("{e}\n{}", self.diagnostics()))
    }

    /// kubectl with `stdin` (e.g. `apply -f -`); panics unless it succeeds.
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> String {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl");
        if let Some(mut input) = child.stdin.take() {
            input.write_all(stdin.as_bytes()).expect("write to kubectl");
        }
        let out = child.wait_with_output().expect("kubectl");
        assert!(
            out.status.success(),
            "kubectl {}: {}{}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.diagnostics()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Panics if a node process died, with its log.
    pub fn assert_alive(&mut self) {
        for p in &mut self.procs {
            p.assert_alive();
        }
    }

    /// Polls `ok` every 200 ms for `secs`, checking the node's processes.
    pub fn wait(&mut self, what: &str, secs: u64, mut ok: impl FnMut(&Node) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            self.assert_alive();
            if ok(self) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {secs}s\n{}",
                self.diagnostics()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What a failing test prints: pods, events, and the kubelet's log tail.
    pub fn diagnostics(&self) -> String {
        let mut s = String::new();
        for args in [
            &["get", "nodes,pods", "-A", "-o", "wide"][..],
            &["get", "events", "-A", "--sort-by=.lastTimestamp"][..],
        ] {
            s.push_str(&self.try_kubectl(args).unwrap_or_else(|e| e));
        }
        // Containers' own output, from the kubelet's log files.
        for log in files_under(&self.dir.join("pod-logs")) {
            s.push_str(&format!("--- {} ---\n{}", log.display(), tail(&log)));
        }
        s.push_str("--- kubelet log ---\n");
        s.push_str(&tail(&self.dir.join("kubelet.log")));
        s
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for p in &self.procs {
                eprintln!("--- {} log ---\n{}", p.name, tail(&p.log));
            }
        }
        // The kubelet first, so it restarts nothing; then every task (the
        // containers and their shims) through containerd itself.
        let kubelet = self.procs.iter_mut().find(|p| p.name == "kubelet");
        if let Some(p) = kubelet {
            p.stop();
        }
        if let Ok(ids) = self.ctr(&["tasks", "ls", "-q"]) {
            for id in ids.lines() {
                let _ = self.ctr(&["tasks", "kill", "-s", "SIGKILL", id]);
            }
            for id in ids.lines() {
                let _ = self.ctr(&["tasks", "delete", "-f", id]);
            }
        }
        for p in self.procs.iter_mut().rev() {
            p.stop();
        }
        kill_shims(&self.sock);
        unmount_under(&self.dir);
        quiet("ip", &["route", "del", &format!("10.202.{}.0/24", self.k)]);
        quiet("ip", &["netns", "del", &self.netns]);
        quiet("ip", &["link", "del", &format!("rmd{}h", self.k)]);
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// containerd's shims outlive it: SIGKILL those started for `sock`
/// (their command line names it), by pid.
fn kill_shims(sock: &Path) {
    let needle = sock.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains("containerd-shim") && cmdline.contains(&needle) {
            signal(pid, "KILL");
        }
    }
}

/// SIGKILLs every process in a pod network namespace mounted below `dir`
/// (`net:[INODE]` of /proc/PID/ns/net is the inode of the netns file).
fn kill_in_pod_netns(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    let prefix = dir.display().to_string();
    let inodes: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" nsfs "))
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with(&prefix))
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| format!("net:[{}]", m.ino()))
        .collect();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(ns) = std::fs::read_link(e.path().join("ns/net")) else {
            continue;
        };
        if inodes.iter().any(|i| Path::new(i) == ns) {
            quiet("kill", &["-KILL", &e.file_name().to_string_lossy()]);
        }
    }
}

/// Detaches every mount below `dir` (pod volumes, rootfs overlays, pods'
/// netns files), deepest first.
fn unmount_under(dir: &Path) {
    let prefix = dir.display().to_string();
    let mut points: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|p| p.starts_with(&prefix))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    points.dedup();
    for p in points {
        quiet("umount", &["-l", &p]);
    }
}

/// Removes what a killed test binary left: namespaces `rmd-PID-K` of dead
/// pids, their veth and route (their processes died with the binary or are
/// found by pid in the namespace).
fn remove_stale() {
    // Node dirs of dead test binaries: their shims, the containers in their
    // pods' network namespaces, their mounts.
    for e in std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        let dir = e.path();
        let owner = std::fs::read_to_string(dir.join("owner")).unwrap_or_default();
        if !e.file_name().to_string_lossy().starts_with("remedy-node-")
            || owner.is_empty()
            || Path::new(&format!("/proc/{}", owner.trim())).exists()
        {
            continue;
        }
        kill_shims(&dir.join("c/containerd.sock"));
        kill_in_pod_netns(&dir);
        unmount_under(&dir);
        let _ = std::fs::remove_dir_all(&dir);
    }
    let list = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let mut parts = name.strip_prefix("rmd-").unwrap_or_default().split('-');
        let (Some(pid), Some(k)) = (parts.next(), parts.next()) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let pids = Command::new("ip")
            .args(["netns", "pids", name])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        for pid in pids.split_whitespace() {
            quiet("kill", &["-KILL", pid]);
        }
        quiet("ip", &["route", "del", &format!("10.202.{k}.0/24")]);
        quiet("ip", &["netns", "del", name]);
        quiet("ip", &["link", "del", &format!("rmd{k}h")]);
    }
}
