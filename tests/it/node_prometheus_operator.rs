//! The real Prometheus Operator (v0.93.1, `testenv/prometheus-operator.sh`)
//! on the real node picks up `deploy/`'s ServiceMonitor and PrometheusRule:
//! the operator runs as its own example Deployment and RBAC (images built
//! FROM scratch here, as quay.io cannot be pulled), with its own CRDs;
//! `deploy/overlays/standalone`, or the Helm chart with the label a
//! kube-prometheus-stack Prometheus selects by (`release: …`), runs remedy;
//! a `Prometheus` (3.16, the version testenv/prometheus.sh builds) selects
//! the ServiceMonitor and PrometheusRule, and the operator's StatefulSet
//! must scrape both remedy replicas under `job="remedy"` (the label the
//! alerts and dashboard match) and load every rule of
//! `alerts/remedy.rules.yml`, healthy.

use crate::node::{NS, STANDALONE, assert_running, helm_install, namespaces_of, webhook_token};
use crate::node_capi::curl;
use crate::support::node::Node;
use crate::support::repo;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Instant;

/// The operator's own namespace in its example manifests.
const OPERATOR_NS: &str = "default";
/// The image names in the operator's v0.93.1 example Deployment.
const UPSTREAM_OPERATOR: &str = "quay.io/prometheus-operator/prometheus-operator:v0.93.1";
const UPSTREAM_RELOADER: &str = "quay.io/prometheus-operator/prometheus-config-reloader:v0.93.1";

fn parts() -> Result<PathBuf, String> {
    let dir = repo().join("testenv/bin/prometheus-operator");
    let missing: Vec<&str> = [
        "prometheus-operator.oci.tar",
        "prometheus-config-reloader.oci.tar",
        "prometheus.oci.tar",
        "config/crds/monitoring.coreos.com_prometheuses.yaml",
        "config/operator/prometheus-operator-deployment.yaml",
        "config/prometheus/prometheus-cluster-role.yaml",
    ]
    .into_iter()
    .filter(|f| !dir.join(f).exists())
    .collect();
    if missing.is_empty() {
        Ok(dir)
    } else {
        Err(format!(
            "missing testenv/bin/prometheus-operator/{{{}}} (run `bash testenv/prometheus-operator.sh`)",
            missing.join(", ")
        ))
    }
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The local name of an image `testenv/prometheus-operator.sh` saved.
fn image(dir: &std::path::Path, name: &str) -> String {
    read(dir.join(format!("{name}.image"))).trim().to_string()
}

/// The alert and recording rule names of `alerts/remedy.rules.yml`, which
/// the overlay's and the chart's PrometheusRule are generated from.
fn rule_names() -> Vec<String> {
    let rules: Value =
        serde_yaml_ng::from_str(&read(repo().join("alerts/remedy.rules.yml"))).expect("rules yaml");
    let mut names: Vec<String> = rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["alert"].as_str().or(r["record"].as_str()))
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

fn get_json(url: &str) -> Option<Value> {
    serde_json::from_str(&curl(url).ok()?).ok()
}

/// How remedy is installed, and what the Prometheus selects it by.
enum Install {
    Overlay(&'static str),
    /// The chart with `serviceMonitor.labels` and `prometheusRule.labels`
    /// set to this `release` label, as a kube-prometheus-stack user would.
    Chart {
        release: &'static str,
    },
}

#[test]
fn the_real_prometheus_operator_picks_up_the_standalone_overlay() {
    operator_scrapes_remedy_and_loads_its_rules(Install::Overlay("deploy/overlays/standalone"));
}

#[test]
fn the_real_prometheus_operator_picks_up_the_chart_by_its_release_label() {
    operator_scrapes_remedy_and_loads_its_rules(Install::Chart {
        release: "kube-prometheus-stack",
    });
}

fn operator_scrapes_remedy_and_loads_its_rules(install: Install) {
    let dir = match parts() {
        Ok(dir) => dir,
        Err(why) => {
            assert!(
                std::env::var_os("REMEDY_REQUIRE_NODE").is_none(),
                "REMEDY_REQUIRE_NODE is set but {why}"
            );
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    let Some(mut node) = Node::start() else {
        return;
    };
    for name in [
        "prometheus-operator",
        "prometheus-config-reloader",
        "prometheus",
    ] {
        let archive = dir.join(format!("{name}.oci.tar")).display().to_string();
        node.ctr(&["images", "import", "--all-platforms", &archive])
            .unwrap_or_else(|e| panic!("ctr images import {archive}: {e}"));
    }
    let (operator_image, reloader_image, prometheus_image) = (
        image(&dir, "prometheus-operator"),
        image(&dir, "prometheus-config-reloader"),
        image(&dir, "prometheus"),
    );

    // The operator's CRDs at its own version (the test cluster installs an
    // older set for the manifest tests); server-side, as they are too big
    // for the last-applied annotation.
    node.kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        &dir.join("config/crds").display().to_string(),
    ]);
    node.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/prometheuses.monitoring.coreos.com",
        "crd/servicemonitors.monitoring.coreos.com",
        "crd/prometheusrules.monitoring.coreos.com",
    ]);

    // The operator as its example installs it, with the local images.
    let started = Instant::now();
    let mut operator = String::new();
    for f in [
        "prometheus-operator-service-account.yaml",
        "prometheus-operator-cluster-role.yaml",
        "prometheus-operator-cluster-role-binding.yaml",
        "prometheus-operator-deployment.yaml",
    ] {
        let text = read(dir.join("config/operator").join(f));
        operator.push_str("---\n");
        operator.push_str(
            &text
                .replace(UPSTREAM_OPERATOR, &operator_image)
                .replace(UPSTREAM_RELOADER, &reloader_image),
        );
    }
    assert!(
        operator.contains(&format!("--prometheus-config-reloader={reloader_image}")),
        "the example Deployment no longer names {UPSTREAM_RELOADER}"
    );
    node.kubectl_stdin(&["apply", "-f", "-"], &operator);

    // remedy as deploy/ ships it, with its ServiceMonitor and PrometheusRule.
    let applied = Instant::now();
    let selector = match install {
        Install::Overlay(overlay) => {
            for ns in namespaces_of(overlay) {
                node.kubectl(&["create", "namespace", &ns]);
            }
            webhook_token(&node);
            node.kubectl(&["apply", "-k", &repo().join(overlay).display().to_string()]);
            assert_running(&mut node, overlay, applied, &STANDALONE);
            serde_json::json!({})
        }
        Install::Chart { release } => {
            let label = format!("{{release: {release}}}");
            helm_install(
                &node,
                &[
                    "--set-json",
                    &format!("serviceMonitor.labels={{\"release\":\"{release}\"}}"),
                    "--set-json",
                    &format!("prometheusRule.labels={{\"release\":\"{release}\"}}"),
                ],
            );
            assert_running(
                &mut node,
                &format!("the chart with {label}"),
                applied,
                &STANDALONE,
            );
            serde_json::json!({"matchLabels": {"release": release}})
        }
    };
    node.kubectl(&[
        "-n",
        OPERATOR_NS,
        "rollout",
        "status",
        "deployment/prometheus-operator",
        "--timeout=120s",
    ]);

    // A Prometheus that selects every ServiceMonitor and PrometheusRule,
    // with the operator's example RBAC for its ServiceAccount.
    let mut rbac = String::new();
    for f in [
        "prometheus-service-account.yaml",
        "prometheus-cluster-role.yaml",
        "prometheus-cluster-role-binding.yaml",
    ] {
        rbac.push_str("---\n");
        rbac.push_str(&read(dir.join("config/prometheus").join(f)));
    }
    node.kubectl_stdin(&["apply", "-f", "-"], &rbac);
    let version = prometheus_image
        .rsplit(':')
        .next()
        .expect("image tag")
        .to_string();
    let prometheus = serde_json::json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": "k8s", "namespace": OPERATOR_NS},
        "spec": {
            "image": prometheus_image,
            "version": version,
            "replicas": 1,
            "serviceAccountName": "prometheus",
            "serviceMonitorSelector": selector,
            "serviceMonitorNamespaceSelector": {},
            "ruleSelector": selector,
            "ruleNamespaceSelector": {},
            "evaluationInterval": "5s",
        },
    });
    node.kubectl_stdin(&["apply", "-f", "-"], &prometheus.to_string());
    node.wait("the operator's Prometheus StatefulSet", 120, |n| {
        n.try_kubectl(&["-n", OPERATOR_NS, "get", "statefulset/prometheus-k8s"])
            .is_ok()
    });
    node.kubectl(&[
        "-n",
        OPERATOR_NS,
        "rollout",
        "status",
        "statefulset/prometheus-k8s",
        "--timeout=180s",
    ]);
    let ip = node.kubectl(&[
        "-n",
        OPERATOR_NS,
        "get",
        "pod/prometheus-k8s-0",
        "-o",
        "jsonpath={.status.podIP}",
    ]);
    let api = format!("http://{}:9090/api/v1", ip.trim());
    let ready = started.elapsed();

    // Both replicas scraped, up, under job="remedy", found through the
    // ServiceMonitor (its Service's Endpoints in remedy-system).
    let mut targets = Vec::new();
    node.wait(
        "Prometheus scraping both remedy pods under job=\"remedy\"",
        180,
        |_| {
            let Some(t) = get_json(&format!("{api}/targets?state=active")) else {
                return false;
            };
            targets = t["data"]["activeTargets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|t| {
                    t["labels"]["job"] == "remedy"
                        && t["labels"]["namespace"] == NS
                        && t["health"] == "up"
                })
                .map(|t| t["scrapePool"].as_str().unwrap_or_default().to_string())
                .collect();
            targets.len() == 2
        },
    );
    assert!(
        targets
            .iter()
            .all(|p| p == &format!("serviceMonitor/{NS}/remedy/0")),
        "scraped through another pool than the ServiceMonitor's: {targets:?}"
    );
    let scraped = started.elapsed();
    // remedy's own series are in Prometheus: the scrape parsed.
    let up = get_json(&format!(
        "{api}/query?query=count(remedy_build_info%7Bjob%3D%22remedy%22%7D)"
    ))
    .expect("query");
    assert_eq!(
        up["data"]["result"][0]["value"][1], "2",
        "remedy_build_info from both replicas: {up}"
    );

    // Every rule of deploy/'s PrometheusRule loaded and evaluated cleanly.
    let want = rule_names();
    assert!(want.len() >= 5, "too few rules rendered: {want:?}");
    let mut loaded: Vec<String> = Vec::new();
    node.wait(
        "Prometheus evaluating every rule of the PrometheusRule",
        120,
        |_| {
            let Some(r) = get_json(&format!("{api}/rules")) else {
                return false;
            };
            let rules: Vec<&Value> = r["data"]["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|g| {
                    g["file"]
                        .as_str()
                        .is_some_and(|f| f.contains(&format!("{NS}-remedy-")))
                })
                .flat_map(|g| g["rules"].as_array().into_iter().flatten())
                .collect();
            loaded = rules
                .iter()
                .filter(|r| r["health"] == "ok")
                .filter_map(|r| r["name"].as_str().map(str::to_string))
                .collect();
            loaded.sort();
            loaded == want
        },
    );
    eprintln!(
        "prometheus-operator v0.93.1 on the node: operator and Prometheus {version} ready {:.1}s \
         after the operator's apply, both remedy pods up under job=\"remedy\" {:.1}s, \
         {} rules of the PrometheusRule healthy",
        ready.as_secs_f64(),
        scraped.as_secs_f64(),
        loaded.len()
    );
}
