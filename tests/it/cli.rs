//! `remedy status` and `remedy clear` as an operator runs them: the real
//! binary against a running remedy and the real apiserver.

use crate::support::objects::{api_for, create_with_status, sample};
use crate::support::{Remedy, TestCluster, namespace};
use remedy::model::profile::CAPI_PAUSED;
use std::process::Command;

fn remedy_cli(cluster: &TestCluster, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_remedy"))
        .args(args)
        .env("KUBECONFIG", &cluster.kubeconfig)
        .output()
        .expect("run remedy");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_manual_clear_with_the_daemons_guards() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "cli").await;
    let failed = create_with_status(&client, sample("capz-azuremachine-failed.yaml"), &ns).await;
    let name = failed.metadata.name.clone().unwrap_or_default();
    let api = api_for(&client, &failed, &ns);
    let mut paused = sample("capz-azuremachine-failed.yaml");
    paused.metadata.name = Some("human-paused".into());
    paused.metadata.annotations = Some([(CAPI_PAUSED.to_string(), "".to_string())].into());
    create_with_status(&client, paused, &ns).await;

    let cfg_yaml = format!(
        "namespaces: [{ns}]\nprofiles: [azure-machine]\ntick: 500ms\nleader_election: {{enabled: false}}\n"
    );
    let remedy = Remedy::serve(cluster, &cfg_yaml);
    remedy.wait_ready().await;
    let (ok, out) = remedy_cli(cluster, &["status", "--url", &remedy.url]);
    assert!(ok, "{out}");
    assert!(
        out.contains("leader: true") && out.contains("breaker: closed") && out.contains("held (0)"),
        "{out}"
    );

    let dir = tempfile::tempdir().expect("tmp");
    let cfg = dir.path().join("config.yaml");
    std::fs::write(&cfg, &cfg_yaml).expect("config");
    let cfg = cfg.to_str().expect("utf-8 path");
    let target = format!("{ns}/AzureMachine/{name}");

    let (ok, out) = remedy_cli(cluster, &["clear", &target, "--config", cfg, "--dry-run"]);
    assert!(ok && out.contains("would do [ClearFailure]"), "{out}");
    assert!(
        api.get(&name).await.unwrap().data["status"]
            .get("failureReason")
            .is_some()
    );

    let (ok, out) = remedy_cli(cluster, &["clear", &target, "--config", cfg]);
    assert!(ok && out.contains("did [ClearFailure]"), "{out}");
    assert!(
        api.get(&name).await.unwrap().data["status"]
            .get("failureReason")
            .is_none()
    );

    let (ok, out) = remedy_cli(
        cluster,
        &[
            "clear",
            &format!("{ns}/AzureMachine/human-paused"),
            "--config",
            cfg,
        ],
    );
    assert!(ok && out.contains("paused by someone else"), "{out}");
    assert!(
        api.get("human-paused").await.unwrap().data["status"]
            .get("failureReason")
            .is_some()
    );

    let (ok, out) = remedy_cli(cluster, &["clear", "not-a-target", "--config", cfg]);
    assert!(!ok && out.contains("NAMESPACE/KIND/NAME"), "{out}");
    // Without Prometheus configured, --require-cleared refuses: no proof, no action.
    let (ok, out) = remedy_cli(
        cluster,
        &[
            "clear",
            &target,
            "--config",
            cfg,
            "--require-cleared",
            "CloudAPIDegraded",
        ],
    );
    assert!(!ok, "{out}");
}

/// `remedy profiles | head -1`: the reader closes the pipe before remedy
/// writes. That is the reader's choice: exit 0, no panic (println! panicked
/// with "failed printing to stdout: Broken pipe").
#[test]
fn a_reader_that_closes_the_pipe_is_not_a_failure() {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_remedy"))
        .arg("profiles")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run remedy");
    // Close the read end before remedy gets to write.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// As a kubectl plugin: a link named `kubectl-remedy` on PATH makes
/// `kubectl remedy …` run remedy, and its help says so. kubectl (with
/// kustomize) is what scripts/check-ops.sh uses already.
#[test]
fn kubectl_runs_it_as_the_remedy_plugin() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_remedy"),
        dir.path().join("kubectl-remedy"),
    )
    .expect("link");
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("kubectl")
        .args(["remedy", "--help"])
        .env("PATH", &path)
        .output()
        .expect("kubectl is required (scripts/check-ops.sh uses it too)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Usage: kubectl remedy"), "{text}");
    for sub in ["explain", "status", "clear", "pause", "resume"] {
        assert!(text.contains(&format!("  {sub} ")), "{sub} in {text}");
    }
    let out = Command::new("kubectl")
        .args(["plugin", "list"])
        .env("PATH", &path)
        .output()
        .expect("kubectl plugin list");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("kubectl-remedy"), "{listed}");
}
