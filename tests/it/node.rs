//! remedy's manifests on a real node (`support::node`, built by
//! `testenv/node.sh`): the Helm chart and each standalone kustomize overlay
//! are applied for real, `kubectl rollout status` returns, both replicas
//! are Ready, one holds the Lease and a pod serves `/metrics` (fetched by
//! pod IP through the node). The ServiceMonitor and PrometheusRule of the
//! chart and `standalone` apply to the Prometheus Operator CRDs the test
//! cluster installs (testenv/crds.sh); no operator runs, none is needed for
//! the pods. remedy in the pods uses in-cluster config (10.0.0.1 through the
//! node's DNAT) and its ServiceAccount token, so the Lease also proves its
//! RBAC.
//!
//! `deploy/overlays/sidecar` adds remedy to a stand-in of CAPO's controller
//! Deployment whose image (registry.k8s.io/capi-openstack/...) cannot be
//! pulled here (no registry is reachable) and whose manager would need
//! OpenStack: that one container runs the pause image instead; the rest is
//! the overlay's (remedy as a second container, 2/2 Ready, leading, with the
//! controller's ServiceAccount). The real Cluster API manager beside it, as
//! the Component is meant to run: `node_capi.rs`.
//! `standalone-tls` needs cert-manager to issue the Secret `remedy-tls`;
//! no cert-manager controller runs here, so the test issues that Secret
//! itself from the harness CA, as cert-manager would, and checks HTTPS.

use crate::support::node::Node;
use std::time::Instant;

pub(crate) const NS: &str = "remedy-system";

/// The token Secret the Deployment mounts (the overlays' README step).
pub(crate) fn webhook_token(node: &Node) {
    node.kubectl(&[
        "-n",
        NS,
        "create",
        "secret",
        "generic",
        "remedy-webhook-token",
        "--from-literal=token=node-test-token",
    ]);
}

/// Namespaces the rendered objects live in, created first (a real
/// cluster has them; `standalone-namespaced` binds Events in two).
pub(crate) fn namespaces_of(overlay: &str) -> Vec<String> {
    let mut ns: Vec<String> = crate::deploy::render(overlay)
        .into_iter()
        .filter_map(|o| o.metadata.namespace)
        .collect();
    ns.push(NS.to_string());
    ns.sort();
    ns.dedup();
    ns
}

/// Where a form runs remedy: standalone, its own 2-replica Deployment in
/// remedy-system on :8080; sidecar, a container of the controller's pod.
pub(crate) struct Form<'a> {
    pub(crate) ns: &'a str,
    pub(crate) deployment: &'a str,
    pub(crate) selector: &'a str,
    pub(crate) replicas: usize,
    pub(crate) port: u16,
    pub(crate) scheme: &'a str,
}

pub(crate) const STANDALONE: Form = Form {
    ns: NS,
    deployment: "remedy",
    selector: "app.kubernetes.io/name=remedy",
    replicas: 2,
    port: 8080,
    scheme: "http",
};

/// What every form must show once applied: `rollout status` returns, its
/// pods Ready (every container), the Lease held by one of them, `/metrics`
/// served by a pod.
pub(crate) fn assert_running(node: &mut Node, what: &str, applied: Instant, form: &Form) {
    node.kubectl(&[
        "-n",
        form.ns,
        "rollout",
        "status",
        &format!("deployment/{}", form.deployment),
        "--timeout=180s",
    ]);
    let rolled = applied.elapsed();
    let pods = node.kubectl(&[
        "-n",
        form.ns,
        "get",
        "pods",
        "-l",
        form.selector,
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}|{.status.podIP}|{.metadata.deletionTimestamp}|{.status.containerStatuses[*].ready}{\"\\n\"}{end}",
    ]);
    // Pods still terminating after a rollout are not the Deployment's.
    let pods: Vec<Vec<&str>> = pods
        .lines()
        .map(|l| l.split('|').collect::<Vec<_>>())
        .filter(|p| p.len() == 4 && p[2].is_empty())
        .collect();
    assert_eq!(
        pods.len(),
        form.replicas,
        "{what}: {} pods expected:\n{pods:?}",
        form.replicas
    );
    for p in &pods {
        assert!(
            !p[3].is_empty() && p[3].split(' ').all(|r| r == "true"),
            "{what}: pod not Ready: {p:?}"
        );
    }
    // The leader: remedy names itself by POD_NAME in the Lease.
    let names: Vec<String> = pods.iter().map(|p| p[0].to_string()).collect();
    node.wait(&format!("{what}: a replica holds the Lease"), 60, |n| {
        names.contains(&lease_holder(n))
    });
    let led = applied.elapsed();
    let (ip, port) = (pods[0][1], form.port);
    let ca = node.cluster.dir.join("ca.crt").display().to_string();
    // HTTPS: the serving cert names the Service, so connect to the pod IP
    // under that name.
    let target = format!("remedy.remedy-system.svc:{port}:{ip}:{port}");
    let url = match form.scheme {
        "https" => format!("https://remedy.remedy-system.svc:{port}/metrics"),
        _ => format!("http://{ip}:{port}/metrics"),
    };
    let mut curl = vec!["-sS", "--max-time", "5"];
    if form.scheme == "https" {
        curl.extend(["--cacert", &ca, "--connect-to", &target]);
    }
    curl.push(&url);
    let out = std::process::Command::new("curl")
        .args(&curl)
        .output()
        .expect("curl");
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && body.contains("remedy_"),
        "{what}: {url} on pod {ip}: {}{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "{what}: rollout status returned {:.1}s after apply, Lease held {:.1}s after apply, /metrics {} bytes",
        rolled.as_secs_f64(),
        led.as_secs_f64(),
        body.len()
    );
}

fn lease_holder(node: &Node) -> String {
    node.try_kubectl(&[
        "-n",
        NS,
        "get",
        "lease",
        "remedy",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])
    .map(|h| h.trim().to_string())
    .unwrap_or_default()
}

/// Names of the remedy pods not being deleted.
fn live_pods(node: &Node) -> Vec<String> {
    node.kubectl(&[
        "-n",
        NS,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=remedy",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}|{.metadata.deletionTimestamp}{\"\\n\"}{end}",
    ])
    .lines()
    .filter_map(|l| l.strip_suffix('|').map(str::to_string))
    .collect()
}

/// `rollout restart` replaces both pods; leadership must follow to a new
/// pod (the old leader hands the Lease over when it stops).
fn assert_lease_moves_on_restart(node: &mut Node) {
    let old = live_pods(node);
    let holder = lease_holder(node);
    assert!(old.contains(&holder), "leader {holder} not among {old:?}");
    let restarted = Instant::now();
    node.kubectl(&["-n", NS, "rollout", "restart", "deployment/remedy"]);
    node.kubectl(&[
        "-n",
        NS,
        "rollout",
        "status",
        "deployment/remedy",
        "--timeout=180s",
    ]);
    let rolled = restarted.elapsed();
    node.wait("the Lease held by a new pod", 60, |n| {
        let h = lease_holder(n);
        !old.contains(&h) && live_pods(n).contains(&h)
    });
    eprintln!(
        "rollout restart: rollout status returned {:.1}s after it, the Lease held by a new pod {:.1}s after it",
        rolled.as_secs_f64(),
        restarted.elapsed().as_secs_f64()
    );
}

fn overlay(name: &str) {
    let Some(mut node) = Node::start() else {
        return;
    };
    let path = format!("deploy/overlays/{name}");
    for ns in namespaces_of(&path) {
        node.kubectl(&["create", "namespace", &ns]);
    }
    webhook_token(&node);
    if name == "standalone-tls" {
        issue_tls_secret(&node);
    }
    let applied = Instant::now();
    node.kubectl(&[
        "apply",
        "-k",
        &crate::support::repo().join(&path).display().to_string(),
    ]);
    let form = Form {
        scheme: if name == "standalone-tls" {
            "https"
        } else {
            "http"
        },
        ..STANDALONE
    };
    assert_running(&mut node, &path, applied, &form);
    if name == "standalone" {
        assert_lease_moves_on_restart(&mut node);
    }
}

/// What cert-manager would write for components/tls: a serving cert for
/// the Service, signed by the harness CA, in Secret remedy-tls.
fn issue_tls_secret(node: &Node) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = |f: &str| dir.path().join(f).display().to_string();
    let ca = node.cluster.dir.join("ca.crt").display().to_string();
    let ca_key = node.cluster.dir.join("ca.key").display().to_string();
    std::fs::write(
        d("ext"),
        "subjectAltName=DNS:remedy.remedy-system.svc,DNS:remedy.remedy-system.svc.cluster.local\n",
    )
    .expect("ext file");
    for args in [
        vec!["genrsa", "-out", &d("tls.key"), "2048"],
        vec![
            "req",
            "-new",
            "-key",
            &d("tls.key"),
            "-out",
            &d("tls.csr"),
            "-subj",
            "/CN=remedy.remedy-system.svc",
        ],
        vec![
            "x509",
            "-req",
            "-in",
            &d("tls.csr"),
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &d("tls.crt"),
            "-days",
            "2",
            "-extfile",
            &d("ext"),
        ],
    ] {
        let st = std::process::Command::new("openssl")
            .args(&args)
            .output()
            .expect("openssl");
        assert!(st.status.success(), "openssl {args:?}: {st:?}");
    }
    node.kubectl(&[
        "-n",
        NS,
        "create",
        "secret",
        "generic",
        "remedy-tls",
        &format!("--from-file=tls.crt={}", d("tls.crt")),
        &format!("--from-file=tls.key={}", d("tls.key")),
        &format!("--from-file=ca.crt={ca}"),
    ]);
}

/// `deploy/overlays/sidecar` as rendered, except the stand-in controller
/// container: its image (CAPO's) cannot be pulled here, so it runs the
/// pause image without the controller's args and probes. remedy's own
/// container, its config, the RBAC bound to the controller's
/// ServiceAccount and the Lease in remedy-system are the overlay's.
#[test]
fn the_sidecar_overlay_runs_ready_and_leading_in_the_controller_pod() {
    let Some(mut node) = Node::start() else {
        return;
    };
    let path = "deploy/overlays/sidecar";
    let mut objects = crate::deploy::render(path);
    let pause = std::fs::read_to_string(crate::support::repo().join("testenv/bin/pause.image"))
        .expect("testenv/bin/pause.image");
    let mut swapped = false;
    for o in &mut objects {
        // pointer_mut: indexing would insert the path into every object.
        let Some(containers) = o
            .data
            .pointer_mut("/spec/template/spec/containers")
            .and_then(|c| c.as_array_mut())
        else {
            continue;
        };
        for c in containers.iter_mut().filter(|c| c["name"] == "manager") {
            c["image"] = pause.trim().into();
            for field in ["args", "readinessProbe", "livenessProbe"] {
                c.as_object_mut().map(|m| m.remove(field));
            }
            swapped = true;
        }
    }
    assert!(swapped, "{path}: no `manager` container to stand in for");
    for ns in namespaces_of(path) {
        node.kubectl(&["create", "namespace", &ns]);
    }
    // The controller's ServiceAccount comes with the controller's release.
    node.kubectl(&[
        "-n",
        "capo-system",
        "create",
        "serviceaccount",
        "capo-manager",
    ]);
    node.kubectl(&[
        "-n",
        "capo-system",
        "create",
        "secret",
        "generic",
        "remedy-webhook-token",
        "--from-literal=token=node-test-token",
    ]);
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let applied = Instant::now();
    node.kubectl_stdin(&["apply", "-f", "-"], &list.to_string());
    let form = Form {
        ns: "capo-system",
        deployment: "capo-controller-manager",
        selector: "control-plane=capo-controller-manager",
        replicas: 1,
        port: 8088,
        scheme: "http",
    };
    assert_running(&mut node, path, applied, &form);
}

/// `helm install remedy deploy/helm/remedy -n remedy-system` with `extra`
/// arguments, on the node's cluster.
pub(crate) fn helm_install(node: &Node, extra: &[&str]) {
    let helm = crate::helm::helm();
    let out = std::process::Command::new(&helm)
        .args([
            "install",
            "remedy",
            "deploy/helm/remedy",
            "-n",
            NS,
            "--create-namespace",
        ])
        .args(extra)
        .arg("--kubeconfig")
        .arg(&node.kubeconfig)
        .current_dir(crate::support::repo())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", helm.display()));
    assert!(
        out.status.success(),
        "helm install: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_helm_chart_runs_ready_and_leading_on_a_real_node() {
    let Some(mut node) = Node::start() else {
        return;
    };
    let applied = Instant::now();
    helm_install(&node, &[]);
    assert_running(&mut node, "the Helm chart", applied, &STANDALONE);
}

#[test]
fn the_standalone_overlay_runs_ready_and_leading_on_a_real_node() {
    overlay("standalone");
}

#[test]
fn the_standalone_no_operator_overlay_runs_ready_and_leading_on_a_real_node() {
    overlay("standalone-no-operator");
}

#[test]
fn the_standalone_namespaced_overlay_runs_ready_and_leading_on_a_real_node() {
    overlay("standalone-namespaced");
}

#[test]
fn the_standalone_tls_overlay_runs_ready_and_leading_on_a_real_node() {
    overlay("standalone-tls");
}
