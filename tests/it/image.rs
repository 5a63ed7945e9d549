//! The container image (`scripts/image`) runs as the chart deploys it: the
//! chart is rendered for the image and applied for real, then the image runs
//! under podman with the ConfigMap, token Secret and container args read back
//! from the apiserver, as user 65532, read-only root filesystem, no
//! capabilities, authenticated as the chart's ServiceAccount (impersonated:
//! there is no kubelet to mint its token), until /readyz answers 200 and it
//! holds the leader Lease with the chart's RBAC.
//!
//! Skips, saying so, only where podman cannot run or the image is not built;
//! `scripts/test` builds the image and sets REMEDY_REQUIRE_IMAGE=1, so in CI
//! a missing image fails instead.

use crate::helm::render_chart;
use crate::support::objects::apply_manifest;
use crate::support::{TestCluster, eventually, free_port, namespace, tail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::discovery::Discovery;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const IMAGE_REPO: &str = "localhost/remedy";
const RELEASE: &str = "remedy-image";

/// podman's flags every run here needs: this sandbox's limits are below
/// podman's defaults.
const ULIMITS: [&str; 4] = [
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
];

/// The OCI runtime that can start the image here (`podman run --runtime`),
/// or why none can. Debian's crun refuses hybrid cgroup v1/v2 hosts, where
/// runc works; so the default first, then runc.
fn runtime(image: &str) -> Result<Vec<String>, String> {
    match Command::new("podman")
        .args(["image", "exists", image])
        .status()
    {
        Err(e) => return Err(format!("podman not found ({e})")),
        Ok(s) if !s.success() => {
            return Err(format!("image {image} not built (run scripts/image)"));
        }
        Ok(_) => {}
    }
    let mut errors = Vec::new();
    for rt in [vec![], vec!["--runtime".to_string(), "runc".to_string()]] {
        let out = Command::new("podman")
            .args(&rt)
            .args(["run", "--rm"])
            .args(ULIMITS)
            .args([image, "--help"])
            .output()
            .map_err(|e| format!("podman run: {e}"))?;
        if out.status.success() {
            return Ok(rt);
        }
        errors.push(format!(
            "{rt:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Err(format!(
        "podman cannot run containers here: {}",
        errors.join("; ")
    ))
}

/// The image's own settings, as `podman image inspect` reports them.
fn image_config(image: &str) -> serde_json::Value {
    let out = Command::new("podman")
        .args(["image", "inspect", image])
        .output()
        .expect("podman image inspect");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("inspect json");
    v[0].clone()
}

/// The running container; removed on drop.
struct Container {
    runtime: Vec<String>,
    name: String,
    child: Child,
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(&self.runtime)
            .args(["rm", "-f", "-t", "2", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write");
    // The container runs as 65532, not as the file's owner.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_runs_read_only_as_65532_with_the_charts_config_and_rbac() {
    let version = env!("CARGO_PKG_VERSION");
    let image = format!("{IMAGE_REPO}:{version}");
    let runtime = match runtime(&image) {
        Ok(rt) => rt,
        Err(why) => {
            assert!(
                std::env::var_os("REMEDY_REQUIRE_IMAGE").is_none(),
                "REMEDY_REQUIRE_IMAGE is set but {why}"
            );
            eprintln!("SKIPPED the_image_runs_read_only_as_65532...: {why}");
            return;
        }
    };

    // The image itself: static binary as entrypoint, numeric non-root user.
    let cfg = image_config(&image);
    assert_eq!(cfg["Config"]["User"], "65532:65532", "{cfg}");
    assert_eq!(cfg["Config"]["Entrypoint"], serde_json::json!(["/remedy"]));

    // The kubectl plugin name ships in the image, on its PATH, and the
    // binary knows it was run by that name.
    let plugin = Command::new("podman")
        .args(&runtime)
        .args(["run", "--rm"])
        .args(ULIMITS)
        .args(["--entrypoint", "kubectl-remedy", &image, "--help"])
        .output()
        .expect("podman run kubectl-remedy");
    let help = String::from_utf8_lossy(&plugin.stdout);
    assert!(
        plugin.status.success() && help.contains("Usage: kubectl remedy"),
        "kubectl-remedy in the image: {}\n{help}{}",
        plugin.status,
        String::from_utf8_lossy(&plugin.stderr)
    );

    // The chart for this image, applied for real in a fresh namespace.
    let cluster = TestCluster::shared();
    let admin = cluster.client().await;
    let ns = namespace(&admin, "image").await;
    let discovery = Discovery::new(admin.clone())
        .run()
        .await
        .expect("discovery");
    let objects = render_chart(
        RELEASE,
        &ns,
        &[
            &format!("--set=image.repository={IMAGE_REPO}"),
            &format!("--set=image.tag={version}"),
            "--set=image.pullPolicy=Never",
        ],
    );
    for obj in objects {
        apply_manifest(&admin, &discovery, obj, None, false)
            .await
            .unwrap_or_else(|e| panic!("apply: {e}"));
    }

    // What a pod would get, read back from the apiserver.
    let deploy = Api::<Deployment>::namespaced(admin.clone(), &ns)
        .get(RELEASE)
        .await
        .expect("Deployment");
    let pod = deploy.spec.and_then(|s| s.template.spec).expect("pod spec");
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some(image.as_str()));
    let args = c.args.clone().expect("args");
    let sc = c.security_context.clone().expect("securityContext");
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(
        pod.security_context.and_then(|s| s.run_as_user),
        Some(65532)
    );
    let sa = pod.service_account_name.expect("serviceAccountName");
    let config = Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .get(&format!("{RELEASE}-config"))
        .await
        .expect("ConfigMap")
        .data
        .and_then(|d| d.get("config.yaml").cloned())
        .expect("config.yaml");
    let token = Api::<Secret>::namespaced(admin.clone(), &ns)
        .get("remedy-webhook-token")
        .await
        .expect("token Secret")
        .data
        .and_then(|d| d.get("token").cloned())
        .expect("token");

    // The same config, but for `listen`: the container shares the host's
    // network (the apiserver listens on loopback), so it gets a free port.
    let mut config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&config).expect("config");
    let port = free_port();
    config["listen"] = format!("127.0.0.1:{port}").into();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for sub in ["config", "token", "kube"] {
        std::fs::create_dir(dir.path().join(sub)).expect("mkdir");
        std::fs::set_permissions(dir.path().join(sub), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    }
    write(
        &dir.path().join("config/config.yaml"),
        &serde_yaml_ng::to_string(&config).expect("yaml"),
    );
    write(
        &dir.path().join("token/token"),
        std::str::from_utf8(&token.0).expect("token utf-8"),
    );
    // Act as the chart's ServiceAccount; `localhost` rather than 127.0.0.1
    // so the static binary's name resolution is exercised too.
    let mut kc: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&cluster.kubeconfig).expect("kubeconfig"))
            .expect("kubeconfig yaml");
    let server = kc["clusters"][0]["cluster"]["server"]
        .as_str()
        .expect("server")
        .replace("127.0.0.1", "localhost");
    kc["clusters"][0]["cluster"]["server"] = server.into();
    kc["users"][0]["user"]["as"] = format!("system:serviceaccount:{ns}:{sa}").into();
    write(
        &dir.path().join("kube/config"),
        &serde_yaml_ng::to_string(&kc).expect("yaml"),
    );

    let name = format!("remedy-it-{ns}");
    let log = dir.path().join("podman.log");
    let vol = |sub: &str, at: &str| format!("{}:{at}:ro", dir.path().join(sub).display());
    let child = Command::new("podman")
        .args(&runtime)
        .args(["run", "--rm", "--name", &name])
        .args(["--read-only", "--cap-drop", "ALL", "--user", "65532:65532"])
        .args(["--security-opt", "no-new-privileges", "--network", "host"])
        .args(ULIMITS)
        .args(["-v", &vol("config", "/etc/remedy")])
        .args(["-v", &vol("token", "/var/run/secrets/remedy/webhook")])
        .args(["-v", &vol("kube", "/var/run/kube")])
        .args(["-e", "KUBECONFIG=/var/run/kube/config"])
        .args(["-e", &format!("POD_NAME={name}")])
        .arg(&image)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("podman run");
    let _container = Container {
        runtime: runtime.clone(),
        name: name.clone(),
        child,
    };

    let url = format!("http://127.0.0.1:{port}");
    let ready = tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            if let Ok(r) = reqwest::get(format!("{url}/readyz")).await
                && r.status().as_u16() == 200
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
    .await;
    assert!(ready.is_ok(), "no /readyz 200 in 90 s:\n{}", tail(&log));

    // It leads, through the chart's Role on its Lease.
    let lease_name = config["leader_election"]["lease_name"]
        .as_str()
        .expect("lease_name")
        .to_string();
    let leases = Api::<Lease>::namespaced(admin.clone(), &ns);
    eventually(
        Duration::from_secs(30),
        "the container holds the Lease",
        || async {
            let l = leases.get(&lease_name).await.ok()?;
            (l.spec?.holder_identity? == name).then_some(())
        },
    )
    .await;
    let metrics = reqwest::get(format!("{url}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics body");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("remedy_ready") && l.ends_with(" 1")),
        "remedy_ready is not 1:\n{metrics}"
    );
}
