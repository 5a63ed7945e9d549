//! remedy as a sidecar of the real Cluster API core manager on a real node
//! (issue #24, part 1): the controller container is the v1.12.5 manager
//! that `testenv/capi.sh` builds from its Go module, in the FROM scratch
//! image `testenv/capi-image.sh` saves as an OCI archive; the node's
//! containerd imports it under the name CAPI's release uses
//! (`registry.k8s.io/cluster-api/cluster-api-controller:v1.12.5`).
//!
//! Deployed as a user would, with `kubectl apply -k` on a kustomization
//! (written under `target/`, so its relative paths reach `deploy/`):
//! - `capi/`: the module's own `config/manager` and `config/rbac` laid out
//!   as clusterctl's core-components.yaml lays them out (namespace
//!   `capi-system`, prefix `capi-`, label `cluster.x-k8s.io/provider`), with
//!   upstream's webhook cert mount (`config/default/manager_webhook_patch`);
//!   its Secret issued by the test in cert-manager's place. The manager's
//!   args are upstream's with clusterctl's defaults filled in, plus
//!   `--insecure-diagnostics` (metrics over HTTP, no TokenReview for the
//!   test's curl) and the CRD migration skipped (the cluster's CRDs are the
//!   module's own, at their storage version). Webhooks and cert-manager are
//!   otherwise off: no ValidatingWebhookConfiguration, no Certificate.
//! - `remedy-sidecar/`: `deploy/components/remedy-sidecar` with what its
//!   own header says to change for another controller (capo-system,
//!   capo-controller-manager, capo-manager and the pod label → CAPI's), and
//!   its config.yaml narrowed to the test: CAPI v1.12's Machines
//!   (`version: v1beta2`, the storage version), a 1 s tick and a breaker
//!   that opens on one failing Machine and cools down in 10 s.
//!
//! Asserted: `rollout status` returns, the pod 2/2 Ready, remedy holds its
//! Lease and serves `/metrics`; the CAPI manager holds its own Lease
//! (`controller-leader-election-capi`), answers `/healthz` and serves
//! controller-runtime's metrics; a Machine that fails (its provider's
//! failure, written as CAPI v1beta2 carries it) is held by remedy in that
//! pod, the real Machine controller beside it reports `Paused=True` (so the
//! hold stops it), and once remedy releases it (breaker closed: failure
//! cleared, pause removed) reports `Paused=False` again; a healthy Machine
//! beside it is never held.

use crate::node::{Form, assert_running};
use crate::support::node::Node;
use crate::support::repo;
use std::path::Path;
use std::time::{Duration, Instant};

const CAPI_NS: &str = "capi-system";
const DEPLOYMENT: &str = "capi-controller-manager";
/// The image name in CAPI's released core-components.yaml.
const UPSTREAM_IMAGE: &str = "registry.k8s.io/cluster-api/cluster-api-controller:v1.12.5";
/// Where the test's Clusters and Machines live.
const FLEET: &str = "fleet";
const PAUSED: &str = "cluster.x-k8s.io/paused";

fn bin(f: &str) -> std::path::PathBuf {
    repo().join("testenv/bin").join(f)
}

/// The image and manifests `testenv/capi-image.sh` links, or why not.
fn capi_parts() -> Result<(), String> {
    let missing: Vec<&str> = [
        "capi-manager.oci.tar",
        "capi-manager.image",
        "capi-config/manager/manager.yaml",
        "capi-config/rbac/role.yaml",
    ]
    .into_iter()
    .filter(|f| !bin(f).exists())
    .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "missing testenv/bin/{{{}}} (run `bash testenv/capi-image.sh`)",
            missing.join(", ")
        ))
    }
}

/// `deploy/components/remedy-sidecar`, renamed for CAPI's core manager as
/// its header says, into `dir`; `config` replaces its config.yaml.
fn sidecar_component_for_capi(dir: &Path, config: &str) {
    let src = repo().join("deploy/components/remedy-sidecar");
    std::fs::create_dir_all(dir).expect("component dir");
    for e in std::fs::read_dir(&src).expect("component").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(e.path()).expect("component file");
        let text = text
            // The pod label the Service selects: CAPI's manager.yaml has
            // `control-plane: controller-manager`.
            .replace(
                "control-plane: capo-controller-manager",
                "control-plane: controller-manager",
            )
            .replace("capo-controller-manager", DEPLOYMENT)
            .replace("capo-manager", "capi-manager")
            .replace("capo-system", CAPI_NS)
            // Written two levels below the repo's target/.
            .replace("- ../../base", "- ../../../deploy/base");
        let text = if name == "config.yaml" {
            config.to_string()
        } else {
            text
        };
        std::fs::write(dir.join(&name), text).expect("write component file");
    }
    let k = std::fs::read_to_string(dir.join("kustomization.yaml")).expect("kustomization");
    assert!(
        !k.contains("capo") && k.contains("../../../deploy/base"),
        "the rename left CAPO's names or the base path:\n{k}"
    );
}

/// The Component's own config with the test's timings and CAPI v1.12's
/// Machine version.
fn test_config() -> String {
    let text = std::fs::read_to_string(repo().join("deploy/components/remedy-sidecar/config.yaml"))
        .expect("component config");
    let mut v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("config yaml");
    let patch: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        "tick: 1s\n\
         profiles: [{builtin: capi-machine, version: v1beta2}]\n\
         backoff: {base: 1s, cap: 2s, jitter: 0.1, quiet_window: 1h}\n\
         budget: {refill_per_second: 5, burst: 5}\n\
         breaker: {open_ratio: 0.3, close_ratio: 0.1, min_resources: 1, window: 1s, cooldown: 10s}\n",
    )
    .expect("patch yaml");
    let map = v.as_mapping_mut().expect("config is a map");
    for (k, val) in patch.as_mapping().expect("map") {
        map.insert(k.clone(), val.clone());
    }
    serde_yaml_ng::to_string(&v).expect("config yaml")
}

/// CAPI's core manager as core-components.yaml lays out config/manager
/// and config/rbac, with the webhook cert mount of config/default.
fn capi_kustomization(dir: &Path) {
    std::fs::create_dir_all(dir).expect("capi dir");
    for sub in ["manager", "rbac"] {
        let to = dir.join(sub);
        std::fs::create_dir_all(&to).expect("dir");
        for e in std::fs::read_dir(bin("capi-config").join(sub))
            .expect("capi-config")
            .flatten()
        {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
        }
    }
    let (name, tag) = UPSTREAM_IMAGE.rsplit_once(':').expect("tag");
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            r#"namespace: {CAPI_NS}
namePrefix: capi-
labels:
- includeSelectors: true
  pairs:
    cluster.x-k8s.io/provider: cluster-api
resources:
- manager
- rbac
images:
- name: controller
  newName: {name}
  newTag: {tag}
patches:
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: controller-manager
      namespace: system
    spec:
      template:
        spec:
          containers:
          - name: manager
            args:
            - --leader-elect
            - --diagnostics-address=:8443
            - --insecure-diagnostics=true
            - --skip-crd-migration-phases=StorageVersionMigration,CleanupManagedFields
            ports:
            - containerPort: 9443
              name: webhook-server
              protocol: TCP
            volumeMounts:
            - mountPath: /tmp/k8s-webhook-server/serving-certs
              name: cert
              readOnly: true
          volumes:
          - name: cert
            secret:
              secretName: capi-webhook-service-cert
"#
        ),
    )
    .expect("capi kustomization");
}

/// What cert-manager would write for CAPI's webhook Service.
fn webhook_cert_secret(node: &Node) {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec![
        format!("capi-webhook-service.{CAPI_NS}.svc"),
        format!("capi-webhook-service.{CAPI_NS}.svc.cluster.local"),
    ])
    .expect("params")
    .self_signed(&key)
    .expect("cert");
    let dir = tempfile::tempdir().expect("tmp");
    let crt = dir.path().join("tls.crt");
    let k = dir.path().join("tls.key");
    std::fs::write(&crt, cert.pem()).expect("crt");
    std::fs::write(&k, key.serialize_pem()).expect("key");
    node.kubectl(&[
        "-n",
        CAPI_NS,
        "create",
        "secret",
        "tls",
        "capi-webhook-service-cert",
        &format!("--cert={}", crt.display()),
        &format!("--key={}", k.display()),
    ]);
}

pub(crate) fn curl(url: &str) -> Result<String, String> {
    let out = std::process::Command::new("curl")
        .args(["-sS", "-f", "--max-time", "5", url])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn machine_json(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": FLEET,
                     "labels": {"cluster.x-k8s.io/cluster-name": "c0"}},
        "spec": {
            "clusterName": "c0",
            "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
            "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "OpenStackMachine",
                "name": name,
            },
        },
    })
}

/// A Machine's field by jsonpath (empty when absent or on error).
fn machine_field(node: &Node, name: &str, jsonpath: &str) -> String {
    node.try_kubectl(&[
        "-n",
        FLEET,
        "get",
        "machines.v1beta2.cluster.x-k8s.io",
        name,
        "-o",
        &format!("jsonpath={jsonpath}"),
    ])
    .map(|s| s.trim().to_string())
    .unwrap_or_default()
}

fn paused(node: &Node, name: &str) -> String {
    machine_field(
        node,
        name,
        "{.status.conditions[?(@.type==\"Paused\")].status}",
    )
}

fn held(node: &Node, name: &str) -> bool {
    let path = format!("{{.metadata.annotations.{}}}", PAUSED.replace('.', "\\."));
    !machine_field(node, name, &path).is_empty()
}

#[test]
fn the_sidecar_component_runs_remedy_beside_the_real_capi_manager_and_its_hold_pauses_it() {
    if let Err(why) = capi_parts() {
        assert!(
            std::env::var_os("REMEDY_REQUIRE_NODE").is_none(),
            "REMEDY_REQUIRE_NODE is set but {why}"
        );
        eprintln!("SKIPPED: {why}");
        return;
    }
    // The manager's own release's CRDs.
    let Some(mut node) = Node::start_with_crds(crate::support::CrdSet::CapiV1_12) else {
        return;
    };
    let archive = bin("capi-manager.oci.tar").display().to_string();
    let local = std::fs::read_to_string(bin("capi-manager.image")).expect("capi-manager.image");
    let imported = Instant::now();
    node.ctr(&["images", "import", "--all-platforms", &archive])
        .unwrap_or_else(|e| panic!("ctr images import {archive}: {e}"));
    node.ctr(&["images", "tag", "--force", local.trim(), UPSTREAM_IMAGE])
        .unwrap_or_else(|e| panic!("ctr images tag: {e}"));
    let imported = imported.elapsed();

    // The user's kustomization, under target/ so it reaches deploy/ by a
    // relative path (kustomize refuses absolute ones).
    let target = repo().join("target");
    std::fs::create_dir_all(&target).expect("target dir");
    let tmp = tempfile::Builder::new()
        .prefix("node-capi-")
        .tempdir_in(&target)
        .expect("tempdir");
    capi_kustomization(&tmp.path().join("capi"));
    sidecar_component_for_capi(&tmp.path().join("remedy-sidecar"), &test_config());
    std::fs::write(
        tmp.path().join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources:\n- capi\ncomponents:\n- remedy-sidecar\n",
    )
    .expect("kustomization");

    for ns in [CAPI_NS, FLEET] {
        node.kubectl(&["create", "namespace", ns]);
    }
    webhook_cert_secret(&node);
    node.kubectl(&[
        "-n",
        CAPI_NS,
        "create",
        "secret",
        "generic",
        "remedy-webhook-token",
        "--from-literal=token=node-test-token",
    ]);
    let applied = Instant::now();
    node.kubectl(&["apply", "-k", &tmp.path().display().to_string()]);

    // remedy: rollout status, 2/2 Ready, its Lease, /metrics on :8088.
    let selector = "cluster.x-k8s.io/provider=cluster-api,control-plane=controller-manager";
    let form = Form {
        ns: CAPI_NS,
        deployment: DEPLOYMENT,
        selector,
        replicas: 1,
        port: 8088,
        scheme: "http",
    };
    assert_running(
        &mut node,
        "remedy-sidecar on the CAPI manager",
        applied,
        &form,
    );
    let pod = node.kubectl(&[
        "-n",
        CAPI_NS,
        "get",
        "pods",
        "-l",
        selector,
        "--field-selector=status.phase=Running",
        "-o",
        "jsonpath={.items[0].metadata.name} {.items[0].status.podIP} {.items[0].spec.containers[*].name} {.items[0].spec.containers[*].image}",
    ]);
    let parts: Vec<&str> = pod.split_whitespace().collect();
    let (pod, ip) = (parts[0].to_string(), parts[1].to_string());
    assert!(
        pod.starts_with(DEPLOYMENT)
            && parts[2..].contains(&"manager")
            && parts[2..].contains(&"remedy")
            && parts[2..].contains(&UPSTREAM_IMAGE),
        "the pod's containers: {parts:?}"
    );

    // The CAPI manager is really running: its own Lease, /healthz, metrics.
    node.wait("the CAPI manager holds its Lease", 60, |n| {
        n.try_kubectl(&[
            "-n",
            CAPI_NS,
            "get",
            "lease",
            "controller-leader-election-capi",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
        .is_ok_and(|h| h.starts_with(&pod))
    });
    let capi_led = applied.elapsed();
    let healthz = curl(&format!("http://{ip}:9440/healthz")).expect("CAPI /healthz");
    assert_eq!(healthz.trim(), "ok", "CAPI /healthz");
    let mut metrics = String::new();
    node.wait(
        "the CAPI manager's Machine controller counts reconciles",
        60,
        |_| {
            metrics = curl(&format!("http://{ip}:8443/metrics")).unwrap_or_default();
            metrics.contains("controller_runtime_reconcile_total{controller=\"machine\"")
        },
    );

    // A Cluster and two Machines; the real Machine controller reconciles
    // them (Paused=False).
    let cluster = serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "c0", "namespace": FLEET},
        "spec": {"clusterNetwork": {"serviceDomain": "cluster.local"}},
    });
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List",
        "items": [cluster, machine_json("m-fail"), machine_json("m-ok")]});
    node.kubectl_stdin(&["apply", "-f", "-"], &list.to_string());
    let created = Instant::now();
    node.wait(
        "the real Machine controller reconciles (Paused=False)",
        60,
        |n| paused(n, "m-fail") == "False" && paused(n, "m-ok") == "False",
    );
    let reconciled = created.elapsed();
    // m-ok is a Machine made before the outage: a new Machine that appears
    // while the breaker is open would be held before its infrastructure is
    // made (`hold.new_until`), one more than a second older is not.
    std::thread::sleep(Duration::from_secs(2));

    // The provider's create failed (CAPI v1beta2 carries it under
    // deprecated.v1beta1): remedy's breaker opens and holds it.
    let failed = Instant::now();
    node.kubectl(&[
        "-n",
        FLEET,
        "patch",
        "machines.v1beta2.cluster.x-k8s.io",
        "m-fail",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"deprecated":{"v1beta1":{"failureReason":"CreateError","failureMessage":"Expected HTTP response code [202] when accessing [POST https://nova:8774/v2.1/servers], but got 503 instead"}}}}"#,
    ]);
    node.wait("remedy holds the failing Machine", 60, |n| {
        held(n, "m-fail")
    });
    let held_after = failed.elapsed();
    node.wait(
        "the real Machine controller reports the held Machine Paused",
        60,
        |n| paused(n, "m-fail") == "True",
    );
    let paused_after = failed.elapsed();
    let message = machine_field(
        &node,
        "m-fail",
        "{.status.conditions[?(@.type==\"Paused\")].message}",
    );
    assert!(
        message.contains("cluster.x-k8s.io/paused annotation"),
        "Paused condition's message: {message}"
    );
    if held(&node, "m-ok") {
        let log = node
            .try_kubectl(&["-n", CAPI_NS, "logs", &pod, "-c", "remedy"])
            .unwrap_or_else(|e| e);
        let ok = node
            .try_kubectl(&[
                "-n",
                FLEET,
                "get",
                "machines.v1beta2.cluster.x-k8s.io",
                "-o",
                "yaml",
            ])
            .unwrap_or_else(|e| e);
        panic!(
            "m-ok does not fail and is not held\n--- remedy log ---\n{log}\n--- Machines ---\n{ok}"
        );
    }

    // The breaker cools down (10 s): remedy clears the failure and removes
    // its pause; the real controller resumes.
    node.wait("remedy releases the Machine", 90, |n| !held(n, "m-fail"));
    let released_after = failed.elapsed();
    node.wait(
        "the real Machine controller resumes (Paused=False)",
        60,
        |n| paused(n, "m-fail") == "False",
    );
    let resumed_after = failed.elapsed();
    assert_eq!(
        machine_field(
            &node,
            "m-fail",
            "{.status.deprecated.v1beta1.failureReason}"
        ),
        "",
        "the release clears the failure"
    );
    assert!(!held(&node, "m-ok"), "m-ok never held");
    let text = curl(&format!("http://{ip}:8088/metrics")).expect("remedy /metrics");
    for action in ["hold", "release"] {
        let series = format!(r#"remedy_actions_total{{action="{action}",result="success"}}"#);
        assert_eq!(
            crate::support::sample(&text, &series),
            Some(1.0),
            "{series}\n{text}"
        );
    }
    eprintln!(
        "remedy-sidecar on the real CAPI v1.12.5 manager: image imported in {:.1}s; \
         rollout status and remedy's Lease as above; the CAPI manager's Lease {:.1}s after apply; \
         Machines reconciled {:.1}s after create; after the failure: held {:.1}s, Paused=True {:.1}s, \
         released {:.1}s (cooldown 10 s), Paused=False {:.1}s",
        imported.as_secs_f64(),
        capi_led.as_secs_f64(),
        reconciled.as_secs_f64(),
        held_after.as_secs_f64(),
        paused_after.as_secs_f64(),
        released_after.as_secs_f64(),
        resumed_after.as_secs_f64(),
    );
}
