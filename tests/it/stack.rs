//! The full stack, as scripts/playground runs it, for CI: a real
//! kube-apiserver (testenv), the real `remedy serve` with leader election, a
//! real Prometheus loading the real alerts/remedy.rules.yml plus the
//! playground's CloudAPIDegraded rule, and a real Alertmanager posting to
//! remedy's webhook with a bearer token. The cloud and its controllers cannot
//! exist here: the fault injector (examples/fault/injector.rs, the code the
//! playground runs) stands in for them, in-process.
//!
//! Asserted: cloud errors rise → CloudAPIDegraded fires → webhook → failing
//! resources held for the alert (and RemedyTransientErrorRatioHigh fires for
//! the failure domain; held resources leave the failing count it reads) → outage ends →
//! alert resolves → verified → cleared, reset and unpaused, spaced by the
//! budget → metrics agree → every dashboard panel returns data.

#[path = "../../examples/fault/injector.rs"]
mod injector;

use crate::support::procs::{prom_query as prom, start_alertmanager_at, start_prometheus_at};
use crate::support::{Remedy, TestCluster, eventually, free_port, namespace, repo, sample};
use injector::{FleetSpec, Injector, Kind, Target, has_failure, is_paused};
use kube::ResourceExt;
use kube::api::{DynamicObject, ListParams};
use remedy::model::profile::{
    CAPI_PAUSED, CAPI_SKIP_REMEDIATION, CRASH_ANNOTATION, HOLD_ANNOTATION, HoldMark,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MACHINES: usize = 12;
const SHADOWS: usize = 6;
/// Releases and remediations per second, burst 1: 18 of them take ≥ 8.5 s.
const REFILL: f64 = 2.0;
const ALERT: &str = "CloudAPIDegraded";

/// Shipped `for:` durations (5m to 1h) would outlast the test: every one is
/// rewritten to `d`. Expressions, labels and annotations stay as shipped.
fn with_for(rules: &str, d: &str) -> String {
    let alerts = rules.matches("- alert:").count();
    let re = regex::Regex::new(r"(?m)^(\s+)for: \S+$").expect("regex");
    assert_eq!(
        re.find_iter(rules).count(),
        alerts,
        "every alert has one `for:` line"
    );
    re.replace_all(rules, format!("${{1}}for: {d}"))
        .into_owned()
}

/// The injector's event lines, printed only if the test fails.
#[derive(Default)]
struct Lines(Arc<Mutex<Vec<String>>>);

impl Lines {
    fn sink(&self) -> injector::Sink {
        // The buffer, not a `Lines`: only the test's own copy prints on drop.
        let buf = self.0.clone();
        Arc::new(move |l: &str| {
            if let Ok(mut v) = buf.lock() {
                v.push(l.to_string());
            }
        })
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Ok(v) = self.0.lock()
        {
            eprintln!("--- fault injector ---\n{}", v.join("\n"));
        }
    }
}

/// `kind` label values of a Prometheus result.
fn kinds(result: &[Value]) -> BTreeSet<String> {
    result
        .iter()
        .filter_map(|s| s["metric"]["kind"].as_str().map(str::to_string))
        .collect()
}

fn hold_reason(o: &DynamicObject) -> Option<String> {
    o.annotations()
        .get(HOLD_ANNOTATION)
        .and_then(|r| HoldMark::parse(r))
        .map(|r| r.reason)
}

async fn list(inj: &Injector, kind: Kind) -> Vec<DynamicObject> {
    inj.api(kind)
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_alert_holds_then_budgeted_remediation_with_dashboard_data() {
    let began = Instant::now();
    let cluster = TestCluster::shared();
    let cluster_up = began.elapsed();
    let client = cluster.client().await;
    let ns = namespace(&client, "stack").await;
    let lines = Lines::default();
    let inj = Injector::new(
        client.clone(),
        &ns,
        FleetSpec {
            prefix: "stack".into(),
            machines: MACHINES,
            shadows: SHADOWS,
            broken: 1,
            share: 0.6,
            seed: 7,
            provision: Duration::from_millis(500),
        },
        lines.sink(),
    );
    inj.create_fleet().await.expect("fleet");
    let cloud = inj
        .serve_metrics("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("cloud metrics");
    let _controllers = inj.spawn_controller();

    let (prom_port, am_port) = (free_port(), free_port());
    let tmp = tempfile::tempdir().expect("tmp");
    let token = tmp.path().join("token");
    std::fs::write(&token, format!("{:032x}\n", rand::random::<u128>())).expect("token");
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "namespaces: [{ns}]\n\
             profiles: [{{builtin: capi-machine, version: v1beta2}}, openstack-machine, bottlerocket-shadow]\n\
             tick: 500ms\n\
             leader_election: {{enabled: true, lease_name: remedy-stack, namespace: {ns}, lease_duration: 4s}}\n\
             backoff: {{base: 1s, cap: 2s, jitter: 0, quiet_window: 1h}}\n\
             budget: {{refill_per_second: {REFILL}, burst: 1}}\n\
             # Every hold must come from the alert, not the local breaker. Its\n\
             # window only averages remedy_outage_breaker_failing_ratio, which\n\
             # RemedyTransientErrorRatioHigh reads: seconds here, as the outage.\n\
             breaker: {{open_ratio: 1.0, close_ratio: 1.0, min_resources: 100000, window: 3s}}\n\
             webhook: {{token_file: {}}}\n\
             signals: {{prometheus_url: 'http://127.0.0.1:{prom_port}', alertmanager_url: 'http://127.0.0.1:{am_port}', timeout: 2s, settle: 2s}}\n\
             alerts: [{{alertname: {ALERT}, select: {{kind_label: kind}}}}]\n",
            token.display()
        ),
    );
    remedy.wait_ready().await;
    eventually(Duration::from_secs(30), "remedy leads", || async {
        let (_, text) = remedy.get("/metrics").await?;
        (sample(&text, "remedy_leader") == Some(1.0)).then_some(())
    })
    .await;
    let remedy_port = remedy.url.rsplit(':').next().expect("port").to_string();
    let _am = start_alertmanager_at(
        am_port,
        &format!(
            "route:\n  receiver: default\n  routes:\n    - receiver: remedy\n      matchers: ['alertname=\"{ALERT}\"']\n\
             \x20     group_by: [alertname, kind]\n      group_wait: 1s\n      group_interval: 1s\n      repeat_interval: 1h\n\
             receivers:\n  - name: default\n  - name: remedy\n    webhook_configs:\n\
             \x20     - url: http://127.0.0.1:{remedy_port}/webhook/alertmanager\n        send_resolved: true\n        max_alerts: 0\n\
             \x20       http_config: {{authorization: {{type: Bearer, credentials_file: {}}}}}\n",
            token.display()
        ),
    )
    .await;
    // The operator alerts fire 2 s after their condition holds, the outage
    // alert 5 s after: RemedyTransientErrorRatioHigh gets to fire before the
    // holds drain remedy's ratio.
    let operator_rules = with_for(
        &std::fs::read_to_string(repo().join("alerts/remedy.rules.yml")).expect("rules"),
        "2s",
    );
    let cloud_rules = with_for(
        &std::fs::read_to_string(repo().join("examples/playground/cloud.rules.yml"))
            .expect("cloud rules"),
        "5s",
    );
    let prometheus = start_prometheus_at(
        prom_port,
        &format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: ['{{dir}}/remedy.rules.yml', '{{dir}}/cloud.rules.yml']\n\
             alerting: {{alertmanagers: [{{static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]}}]}}\n\
             scrape_configs:\n\
             \x20 - {{job_name: remedy, static_configs: [{{targets: ['127.0.0.1:{remedy_port}']}}]}}\n\
             \x20 - {{job_name: cloud, static_configs: [{{targets: ['{cloud}']}}]}}\n"
        ),
        &[
            ("remedy.rules.yml", &operator_rules),
            ("cloud.rules.yml", &cloud_rules),
        ],
    )
    .await;
    let p = prometheus.base.clone();
    eventually(
        Duration::from_secs(30),
        "Prometheus scrapes remedy and the cloud",
        || async {
            let up = prom(&p, r#"up{job=~"remedy|cloud"} == 1"#).await;
            let synced = prom(&p, "remedy_watch_synced == 1").await;
            (up.len() == 2 && synced.len() == 3).then_some(())
        },
    )
    .await;
    assert!(
        prom(
            &p,
            r#"ALERTS{alertname=~"CloudAPIDegraded|RemedyTransientErrorRatioHigh"}"#
        )
        .await
        .is_empty(),
        "nothing alerts before the outage"
    );

    // ---- the outage: 60% of each kind fails --------------------------------
    let setup = began.elapsed();
    let outage_began = Instant::now();
    let failed = inj.start_outage(1).await.expect("outage");
    let holdable: BTreeSet<Target> = failed
        .iter()
        .filter(|(k, _)| k.holdable())
        .cloned()
        .collect();
    let shadows: BTreeSet<Target> = failed
        .iter()
        .filter(|(k, _)| *k == Kind::BottlerocketShadow)
        .cloned()
        .collect();
    assert_eq!(holdable.len(), 14, "7 OpenStackMachines + their 7 Machines");
    assert_eq!(shadows.len(), 4);

    let held = eventually(
        Duration::from_secs(60),
        "the failing machines held",
        || async {
            let mut held = BTreeMap::new();
            for kind in [Kind::OpenStackMachine, Kind::Machine] {
                for o in list(&inj, kind).await {
                    if let Some(r) = hold_reason(&o) {
                        held.insert((kind, o.name_any()), r);
                    }
                }
            }
            (held.len() >= holdable.len()).then_some(held)
        },
    )
    .await;
    assert_eq!(
        held.keys().cloned().collect::<BTreeSet<_>>(),
        holdable,
        "exactly the failing ones are held\n{}",
        remedy.log_tail()
    );
    assert!(
        held.values().all(|r| r == "alert:CloudAPIDegraded"),
        "{held:?}"
    );
    for o in list(&inj, Kind::BottlerocketShadow).await {
        assert!(!is_paused(&o), "brupop has no pause: never held");
    }

    // brupop cannot be paused: it retries and fails again.
    assert_eq!(inj.crash_again().await.expect("crash"), 4);

    // Held, their status is frozen and they leave the failing count the
    // breakers judge by (remedy_outage_breaker_failing): only the shadows,
    // which cannot be held, are left in it. RemedyTransientErrorRatioHigh
    // reads those numbers per failure domain (here the one `cluster`
    // domain): it fired during the outage. Held resources leave that count,
    // so it resolves once everything holdable is held while the cloud is
    // still down (here the unholdable shadows may keep it), which is why it
    // must not drive remediation.
    eventually(
        Duration::from_secs(30),
        "the held resources out of the breaker's failing count (the shadows may stay)",
        || async {
            let v = prom(
                &p,
                r#"max(remedy_outage_breaker_failing{scope="cluster",domain="cluster"})"#,
            )
            .await;
            let n = v
                .first()
                .and_then(|s| s["value"][1].as_str()?.parse::<f64>().ok());
            n.is_some_and(|n| n <= SHADOWS as f64).then_some(())
        },
    )
    .await;
    let window = outage_began.elapsed().as_secs() + 2;
    let fired: BTreeSet<String> = prom(
        &p,
        &format!(
            r#"max_over_time(ALERTS{{alertname="RemedyTransientErrorRatioHigh",alertstate="firing"}}[{window}s])"#
        ),
    )
    .await
    .iter()
    .filter_map(|s| s["metric"]["domain"].as_str().map(str::to_string))
    .collect();
    assert_eq!(
        fired,
        BTreeSet::from(["cluster".to_string()]),
        "RemedyTransientErrorRatioHigh fired during the outage, for the failure domain"
    );
    let all_kinds: BTreeSet<String> = Kind::ALL.iter().map(|k| k.name().to_string()).collect();
    assert_eq!(
        kinds(
            &prom(
                &p,
                r#"ALERTS{alertname="CloudAPIDegraded",alertstate="firing"}"#
            )
            .await
        ),
        all_kinds,
        "the outage alert fires on for every kind"
    );
    // Nothing is remediated while the alert fires.
    for (kind, name) in &holdable {
        let o = inj.api(*kind).get(name).await.expect("get");
        assert!(
            has_failure(*kind, &o) && is_paused(&o),
            "{kind} {name}: held with its failure"
        );
    }
    let (_, text) = remedy.get("/metrics").await.expect("metrics");
    for kind in ["OpenStackMachine", "Machine"] {
        let series = format!(r#"remedy_held_resources{{kind="{kind}"}}"#);
        assert_eq!(sample(&text, &series), Some(7.0), "{series}\n{text}");
    }

    // ---- the cloud recovers ------------------------------------------------
    let held_at = outage_began.elapsed();
    let outage = inj.end_outage();
    assert_eq!(outage.holdable(), holdable);
    assert_eq!(outage.held, holdable, "the controllers saw every hold");
    let mut done: BTreeSet<Target> = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    while done.len() < failed.len() {
        assert!(
            Instant::now() < deadline,
            "not remedied in 90 s: {:?}\n{}",
            failed
                .iter()
                .filter(|t| !done.contains(*t))
                .collect::<Vec<_>>(),
            remedy.log_tail()
        );
        for kind in Kind::ALL {
            for o in list(&inj, kind).await {
                let key = (kind, o.name_any());
                if done.contains(&key) || !failed.contains(&key) {
                    continue;
                }
                let remedied = if kind.holdable() {
                    !is_paused(&o)
                } else {
                    o.data["status"]["crash_count"] == 0
                };
                if !remedied {
                    continue;
                }
                done.insert(key.clone());
                // Remediation order: the failure is cleared and the guard
                // removed before the pause goes.
                let a = o.annotations();
                let s = &o.data["status"];
                assert!(!has_failure(kind, &o), "{key:?} still failing: {s}");
                assert!(!a.contains_key(HOLD_ANNOTATION), "{key:?}: {a:?}");
                assert!(!a.contains_key(CAPI_SKIP_REMEDIATION), "{key:?}: {a:?}");
                if kind == Kind::Machine {
                    let v1beta1 = &s["deprecated"]["v1beta1"];
                    assert!(
                        v1beta1.get("failureReason").is_none()
                            && v1beta1.get("failureMessage").is_none(),
                        "{key:?}: {s}"
                    );
                }
                if kind == Kind::BottlerocketShadow {
                    assert!(
                        s.get("state_transition_failure_timestamp").is_none(),
                        "{key:?}: {s}"
                    );
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Spaced by the budget (REFILL/s, burst 1), not all at once: the span is
    // near (n-1)/REFILL and no second sees more than the rate plus one. The
    // times are remedy's own (its log's "done" line of each resource's last
    // step), not when this loop saw them: on a loaded machine one pass of
    // the loop above can outlast a second and see several at once.
    let remedied_at = outage_began.elapsed();
    let mut times = last_done_times(&remedy.log(), &done);
    times.sort();
    let span = (times[times.len() - 1] - times[0])
        .to_std()
        .expect("sorted");
    let floor = Duration::from_secs_f64((times.len() - 1) as f64 / REFILL * 0.6);
    assert!(
        span >= floor,
        "{} releases within {span:?} (want ≥ {floor:?})",
        times.len()
    );
    let busiest = times
        .iter()
        .map(|t| {
            times
                .iter()
                .filter(|u| **u >= *t && **u - *t < chrono::TimeDelta::seconds(1))
                .count()
        })
        .max()
        .unwrap_or(0);
    assert!(busiest <= 3, "{busiest} releases within one second");

    inj.wait_recovered(Duration::from_secs(60))
        .await
        .expect("the controllers bring everything back");

    // The really broken machine was never touched; the healthy ones neither.
    let broken = inj
        .api(Kind::OpenStackMachine)
        .get("stack-md-0-infra-broken-0")
        .await
        .expect("broken");
    assert!(has_failure(Kind::OpenStackMachine, &broken) && !is_paused(&broken));
    for kind in [Kind::OpenStackMachine, Kind::Machine] {
        for o in list(&inj, kind).await {
            let key = (kind, o.name_any());
            let touched = o.annotations().contains_key(CRASH_ANNOTATION);
            assert_eq!(
                touched,
                holdable.contains(&key),
                "{key:?}: {:?}",
                o.annotations()
            );
            assert!(!o.annotations().contains_key(CAPI_PAUSED), "{key:?}");
        }
    }

    // remedy's account: one action per resource and step, no errors.
    let text = eventually(
        Duration::from_secs(20),
        "remedy sees the fleet healthy",
        || async {
            let (_, text) = remedy.get("/metrics").await?;
            let healthy = |kind: &str| {
                sample(
                    &text,
                    &format!(r#"remedy_resources{{kind="{kind}",state="healthy"}}"#),
                )
            };
            (healthy("OpenStackMachine") == Some(12.0)
                && healthy("Machine") == Some(12.0)
                && healthy("BottlerocketShadow") == Some(6.0))
            .then_some(text)
        },
    )
    .await;
    let v = |s: &str| sample(&text, s).unwrap_or(0.0);
    for (action, n) in [
        ("hold", 14.0),
        ("unpause", 14.0),
        // Seven Machines: set and removed around each clear.
        ("skip_remediation", 14.0),
        // 14 machines' failure fields, 4 shadows' failure timestamps.
        ("clear_failure", 18.0),
        ("reset_counters", 4.0),
        ("release", 0.0),
    ] {
        let series = format!(r#"remedy_actions_total{{action="{action}",result="success"}}"#);
        assert_eq!(v(&series), n, "{series}\n{text}");
    }
    // Remediations, not releases: remedy_releases_total counts only the
    // breaker's releases of held resources (#21.7). Each resource was
    // remediated once: the action counts above.
    for (kind, n) in [
        ("Machine", 0.0),
        ("OpenStackMachine", 0.0),
        ("BottlerocketShadow", 0.0),
    ] {
        let series = format!(r#"remedy_releases_total{{kind="{kind}"}}"#);
        assert_eq!(v(&series), n, "{series}\n{text}");
    }
    let failed_actions: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("remedy_actions_total")
                && (l.contains(r#"result="error""#) || l.contains(r#"result="forbidden""#))
                // Counters are pre-set to 0: only a non-zero one is a failure.
                && l.rsplit(' ').next().is_some_and(|v| v != "0")
        })
        .collect();
    assert!(failed_actions.is_empty(), "{failed_actions:?}");
    for kind in Kind::ALL {
        let series = format!(r#"remedy_held_resources{{kind="{kind}"}}"#);
        assert_eq!(v(&series), 0.0, "{series}");
    }
    assert_eq!(
        v(r#"remedy_resources{kind="OpenStackMachine",state="terminal"}"#),
        1.0
    );
    for series in [
        r#"remedy_webhook_notifications_total{status="firing",result="accepted"}"#,
        r#"remedy_webhook_notifications_total{status="resolved",result="accepted"}"#,
    ] {
        assert!(v(series) >= 1.0, "{series}\n{text}");
    }

    // ---- the dashboard against these real metrics --------------------------
    eventually(
        Duration::from_secs(20),
        "Prometheus sees nothing held",
        || async {
            let held = prom(&p, "sum(remedy_held_resources)").await;
            (held.first().and_then(|s| s["value"][1].as_str()) == Some("0")).then_some(())
        },
    )
    .await;
    assert!(
        prom(&p, r#"ALERTS{alertname="CloudAPIDegraded"}"#)
            .await
            .is_empty(),
        "the outage alert resolved"
    );
    // Every panel must return data: the broken machine keeps the terminal
    // error and per-resource panels populated after the fleet recovered.
    let out = std::process::Command::new("python3")
        .arg(repo().join("scripts/check-dashboard.py"))
        .args(["--prometheus", &p, "--require-data"])
        .arg(repo().join("dashboards/remedy.json"))
        .output()
        .expect("run python3 scripts/check-dashboard.py");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "check-dashboard.py failed:\n{stderr}");
    assert!(stderr.contains(", 0 empty"), "{stderr}");
    eprintln!(
        "stack: cluster {cluster_up:.1?}, setup {setup:.1?}; outage held and checked for {held_at:.1?}; all remedied {:.1?} after the outage ended, releases over {span:.1?}; whole test {:.1?}",
        remedied_at - held_at,
        began.elapsed()
    );
    if let Ok(v) = lines.0.lock() {
        eprintln!("--- fault injector ---\n{}", v.join("\n"));
    }
}

/// When remedy finished each resource's last step: the timestamp of the last
/// `done` line its log has for `namespace/Kind/name`. One per target, or the
/// test fails saying which it could not find.
fn last_done_times(
    log: &str,
    targets: &BTreeSet<Target>,
) -> Vec<chrono::DateTime<chrono::FixedOffset>> {
    targets
        .iter()
        .map(|(kind, name)| {
            let key = format!("/{}/{name} ", kind.name());
            log.lines()
                .filter(|l| l.contains(" done ") && l.contains(&key))
                .filter_map(|l| {
                    chrono::DateTime::parse_from_rfc3339(l.split_whitespace().next()?).ok()
                })
                .next_back()
                .unwrap_or_else(|| panic!("no `done` line for {kind:?} {name} in remedy's log"))
        })
        .collect()
}
