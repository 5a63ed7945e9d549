//! `cargo bench --bench capo_outage [-- --machines 60 --outage-secs 600]`:
//! issue #25's benchmark. The real Cluster API v1.12.5 and CAPO v0.14.7
//! managers on a private apiserver against the fake OpenStack API
//! (`testenv/cmd/fake-openstack`), through a partial outage: 60% of one
//! zone's Nova server calls answer 503, then the cloud recovers. One fresh
//! stack per variant: CAPO alone, CAPO plus the seed's runbook script,
//! CAPO plus remedy with the shipped config, CAPO plus remedy tuned for
//! the scenario, and tuned to hold the whole domain (`breaker.hold:
//! domain`). It prints a table; it asserts nothing about timings.
//!
//! Needs the binaries of `bash testenv/build.sh`, `bash testenv/capi.sh`
//! and `bash testenv/capo.sh`.

// The test binary's harness, shared rather than copied. `pub`: the bench
// uses only part of it, and a binary crate does not lint pub items as dead.
#[path = "../tests/it/support/mod.rs"]
pub mod support;

use kube::api::{ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::Remedy;
use support::capo_env::{Capo, Env};
use support::openstack::{Sample, sum};

const ZONES: [&str; 3] = ["az1", "az2", "az3"];
/// The zone the outage hits.
const FAILING_ZONE: &str = "az2";
/// The targets' "within 2 minutes of the cloud's return".
const AFTER: Duration = Duration::from_secs(120);
const SERVICES: [&str; 4] = ["compute", "network", "image", "identity"];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Alone,
    Runbook,
    Shipped,
    Tuned,
    Domain,
}

impl Variant {
    fn parse(s: &str) -> Self {
        match s {
            "a" | "alone" => Self::Alone,
            "b" | "runbook" => Self::Runbook,
            "c" | "shipped" => Self::Shipped,
            "d" | "tuned" => Self::Tuned,
            "e" | "domain" => Self::Domain,
            _ => panic!("unknown variant {s:?}: a|alone, b|runbook, c|shipped, d|tuned, e|domain"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Alone => "(a) CAPO alone",
            Self::Runbook => "(b) CAPO + runbook script",
            Self::Shipped => "(c) CAPO + remedy, shipped config",
            Self::Tuned => "(d) CAPO + remedy, tuned config",
            Self::Domain => "(e) CAPO + remedy, holding the domain",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Self::Alone => "alone",
            Self::Runbook => "runbook",
            Self::Shipped => "shipped",
            Self::Tuned => "tuned",
            Self::Domain => "domain",
        }
    }
}

struct Opts {
    machines: usize,
    outage: Duration,
    /// How long to wait for every Machine after the cloud's return before
    /// calling it "never".
    settle: Duration,
    failure_rate: f64,
    variants: Vec<Variant>,
}

impl Opts {
    fn parse() -> Self {
        let mut o = Self {
            machines: 60,
            outage: Duration::from_secs(600),
            settle: Duration::from_secs(600),
            failure_rate: 0.6,
            variants: vec![
                Variant::Alone,
                Variant::Runbook,
                Variant::Shipped,
                Variant::Tuned,
                Variant::Domain,
            ],
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
            let secs = |v: String| Duration::from_secs(v.parse().expect("seconds"));
            match a.as_str() {
                "--machines" => o.machines = value().parse().expect("a count"),
                "--outage-secs" => o.outage = secs(value()),
                "--settle-secs" => o.settle = secs(value()),
                "--failure-rate" => o.failure_rate = value().parse().expect("a ratio"),
                "--variants" => o.variants = value().split(',').map(Variant::parse).collect(),
                // cargo bench passes --bench to harness = false targets.
                "--bench" => {}
                _ => panic!(
                    "unknown argument {a}; usage: [--machines N] [--outage-secs S] \
                     [--settle-secs S] [--failure-rate R] [--variants a,b,c,d,e]"
                ),
            }
        }
        assert!(o.machines >= 2, "--machines: at least 2");
        assert!(o.settle >= AFTER, "--settle-secs: at least 120");
        o
    }
}

/// One variant's figures.
struct Row {
    variant: Variant,
    /// Calls during the outage by service (SERVICES' order).
    calls: [u64; 4],
    got_503: u64,
    got_429: u64,
    /// Machines not Running, and OpenStackServers in ERROR, 2 min after
    /// the cloud's return.
    down_after: usize,
    error_after: usize,
    /// From the cloud's return until every Machine was Running.
    all_up: Option<Duration>,
    /// Machines not Running when the wait ended.
    left: usize,
    error_left: usize,
    note: String,
    /// The most frequent calls during the outage.
    top: String,
    wall: Duration,
}

impl Row {
    fn total(&self) -> u64 {
        self.calls.iter().sum()
    }
}

/// "Running" here: the Machine has its providerID (the server is ACTIVE
/// and CAPO reported it) and phase Provisioned. CAPI's own Running phase
/// needs a Node from the workload cluster, which this stack has not.
fn up(m: &Value) -> bool {
    m["spec"]["providerID"]
        .as_str()
        .is_some_and(|p| !p.is_empty())
        && matches!(
            m["status"]["phase"].as_str(),
            Some("Provisioned" | "Running")
        )
}

/// (Machines Running, OpenStackServers in ERROR).
async fn census(env: &Env) -> (usize, usize) {
    let lp = ListParams::default();
    let machines = env.machines.list(&lp).await.expect("list Machines");
    let servers = env.servers.list(&lp).await.expect("list OpenStackServers");
    (
        machines.items.iter().filter(|m| up(&m.data)).count(),
        servers
            .items
            .iter()
            .filter(|s| s.data["status"]["instanceState"] == "ERROR")
            .count(),
    )
}

fn check(s: &Capo) {
    for p in s.procs() {
        p.check();
    }
}

/// Sleeps until `until`, checking the managers and the fake are alive.
async fn sleep_until(s: &Capo, until: Instant) {
    while Instant::now() < until {
        check(s);
        tokio::time::sleep((until - Instant::now()).min(Duration::from_secs(2))).await;
    }
}

fn name(i: usize) -> String {
    format!("m{i:03}")
}

/// The seed's runbook script, once the cloud is back: clears the
/// OpenStackMachines' failure fields through the status subresource, as
/// `kubectl patch --subresource=status --type merge` does, and nothing
/// else. Returns how many it patched.
async fn runbook(env: &Env) -> usize {
    let osms = env
        .osms
        .list(&ListParams::default())
        .await
        .expect("list OpenStackMachines");
    let clear = json!({"status": {"failureReason": null, "failureMessage": null}});
    let mut patched = 0;
    for o in osms.items {
        let st = &o.data["status"];
        if st["failureReason"].is_null() && st["failureMessage"].is_null() {
            continue;
        }
        let name = o.metadata.name.unwrap_or_default();
        env.osms
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&clear))
            .await
            .expect("patch OpenStackMachine status");
        patched += 1;
    }
    patched
}

/// deploy/base/config.yaml as shipped, adapted only to run here: this
/// namespace, no leader election (one replica), and without what needs the
/// Prometheus/Alertmanager this stack lacks (the alert webhook and its
/// token file, signals, alerts): holds and releases come from the breaker
/// and budget alone. `listen` is set by `Remedy::serve`.
fn shipped_config(ns: &str) -> String {
    let path = support::repo().join("deploy/base/config.yaml");
    let text = std::fs::read_to_string(&path).expect("deploy/base/config.yaml");
    let mut cfg: serde_yaml_ng::Mapping = serde_yaml_ng::from_str(&text).expect("shipped YAML");
    for key in ["listen", "webhook", "signals", "alerts"] {
        cfg.remove(key);
    }
    cfg.insert(
        "namespaces".into(),
        serde_yaml_ng::to_value([ns]).expect("ns"),
    );
    cfg.insert(
        "leader_election".into(),
        serde_yaml_ng::from_str("{enabled: false}").expect("yaml"),
    );
    serde_yaml_ng::to_string(&cfg).expect("config YAML")
}

/// As `Capo::remedy` (capo_real.rs): one breaker per zone from the
/// server's /spec/availabilityZone. But its open_ratio of 0.5 never opened
/// here (a first run: 0 holds): the failing zone's fleet of healthy servers
/// keeps its failing share near 0.3, so this opens at 0.1. The cooldown and
/// backoff cap leave a held server time to come back within the 2 min
/// target; the cap spaces the probes while the outage lasts.
fn tuned_config(ns: &str) -> String {
    format!(
        "namespaces: [{ns}]\ntick: 500ms\nleader_election: {{enabled: false}}\n\
         breaker: {{open_ratio: 0.1, close_ratio: 0.05, min_resources: 1, window: 1s, \
         cooldown: 30s, domain: {{field: /spec/availabilityZone}}}}\n\
         backoff: {{base: 5s, cap: 60s}}\n\
         budget: {{refill_per_second: 5, burst: 10}}\n\
         profiles: [openstack-machine, openstack-server]\n"
    )
}

/// For the call target: one breaker for the whole cloud (a 503 in az2 is
/// the cloud's, and CAPO's calls come from every zone's reconciles), open
/// at the first failure, and `hold: domain`, so that every OpenStackMachine
/// and OpenStackServer stops reconciling, new ones as they appear. Probes
/// (the failed servers, one per 20 s, up to 160 s apart while they fail)
/// tell when the cloud is back; the rest goes once the breaker closes.
fn domain_config(ns: &str) -> String {
    format!(
        "namespaces: [{ns}]\ntick: 500ms\nleader_election: {{enabled: false}}\n\
         breaker: {{open_ratio: 0.01, close_ratio: 0.005, min_resources: 1, window: 1s, \
         cooldown: 20s, hold: domain, release: {{probe_every: 20s}}}}\n\
         backoff: {{base: 5s, cap: 60s}}\n\
         budget: {{refill_per_second: 5, burst: 10}}\n\
         profiles: [openstack-machine, openstack-server]\n"
    )
}

/// The calls between two scrapes by service, resource and method, most
/// first: where the calls went.
fn top_calls(m0: &[Sample], m1: &[Sample], n: usize) -> String {
    let key = |s: &Sample| {
        ["service", "resource", "method"].map(|k| s.label(k).unwrap_or("").to_string())
    };
    let mut by: std::collections::BTreeMap<[String; 3], i64> = Default::default();
    for (m, sign) in [(m1, 1), (m0, -1)] {
        for s in m
            .iter()
            .filter(|s| s.name == "fake_openstack_resource_requests_total")
        {
            *by.entry(key(s)).or_default() += sign * s.value as i64;
        }
    }
    let mut v: Vec<_> = by.into_iter().filter(|(_, c)| *c > 0).collect();
    v.sort_by_key(|(_, c)| std::cmp::Reverse(*c));
    v.iter()
        .take(n)
        .map(|(k, c)| format!("{} {} {} {c}", k[0], k[2], k[1]))
        .collect::<Vec<_>>()
        .join(", ")
}

fn counts(m: &[Sample]) -> [u64; 4] {
    SERVICES.map(|s| sum(m, &[("service", s)]))
}

async fn run(opts: &Opts, variant: Variant) -> Row {
    let wall = Instant::now();
    let n = opts.machines;
    let s = Capo::start_in_zones(&format!("bench-{}", variant.key()), &ZONES).await;
    // remedy runs from the start, as a sidecar would; dropped before `s`.
    let remedy: Option<Remedy> = match variant {
        Variant::Shipped => Some(s.remedy_with(&shipped_config(&s.env.ns)).await),
        Variant::Tuned => Some(s.remedy_with(&tuned_config(&s.env.ns)).await),
        Variant::Domain => Some(s.remedy_with(&domain_config(&s.env.ns)).await),
        Variant::Alone | Variant::Runbook => None,
    };

    // The fleet before the outage: half the Machines, Running.
    let before = n - n / 2;
    for i in 0..before {
        s.env.machine(&name(i), ZONES[i % ZONES.len()]).await;
    }
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        check(&s);
        let (running, _) = census(&s.env).await;
        if running == before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}: only {running} of {before} Machines Running before the outage",
            variant.name()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eprintln!(
        "{}: {before} Machines Running after {:?}; outage starts",
        variant.name(),
        wall.elapsed()
    );

    // The outage. The fake can tie to a zone only the Nova calls about a
    // server (its create and /servers/{id}): those fail at the rate;
    // Neutron, Glance and Keystone calls carry no zone.
    s.fake
        .set_faults(json!({"rules": [{
            "service": "compute", "resource": "servers", "zone": FAILING_ZONE,
            "status": 503, "probability": opts.failure_rate,
        }]}))
        .await;
    let m0 = s.fake.metrics().await;
    let t0 = Instant::now();
    // The other half is created during the first half of the outage (a
    // scale-up or a rollout replacing machines): this is what makes CAPO
    // v0.14.7 call the cloud then. A fleet that only sits there makes
    // almost no calls, as an ACTIVE server is not polled, and a server
    // gone to ERROR is never reconciled again; a new one gets its ports,
    // its create and, while BUILD, a poll every 10 s, each 503 retried
    // with controller-runtime's backoff.
    let pace = opts.outage / 2 / (n - before) as u32;
    for i in before..n {
        s.env.machine(&name(i), ZONES[i % ZONES.len()]).await;
        sleep_until(&s, Instant::now() + pace).await;
    }
    sleep_until(&s, t0 + opts.outage).await;
    let m1 = s.fake.metrics().await;
    s.fake.clear_faults().await;
    let back = Instant::now();
    let mut note = String::new();
    if variant == Variant::Runbook {
        let patched = runbook(&s.env).await;
        note = format!("runbook patched {patched} OpenStackMachines");
    }
    eprintln!("{}: cloud back; waiting for the Machines", variant.name());

    let mut all_up = None;
    let mut after = None;
    let (left, error_left) = loop {
        check(&s);
        let (running, errors) = census(&s.env).await;
        let since = back.elapsed();
        if running == n && all_up.is_none() {
            all_up = Some(since);
        }
        if since >= AFTER && after.is_none() {
            after = Some((n - running, errors));
        }
        if (all_up.is_some() && after.is_some()) || since >= opts.settle {
            break (n - running, errors);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let (down_after, error_after) = after.expect("the 2 min census");
    if let Some(r) = &remedy {
        let mut acts = Vec::new();
        for a in ["hold", "release", "clear_failure"] {
            let v = r
                .metric(&format!(
                    r#"remedy_actions_total{{action="{a}",result="success"}}"#
                ))
                .await;
            acts.push(format!("{a} {v}"));
        }
        note = format!("remedy: {}", acts.join(", "));
    }
    let c0 = counts(&m0);
    let c1 = counts(&m1);
    let status = |m: &[Sample], code: &str| sum(m, &[("status", code)]);
    Row {
        variant,
        calls: std::array::from_fn(|i| c1[i] - c0[i]),
        got_503: status(&m1, "503") - status(&m0, "503"),
        got_429: status(&m1, "429") - status(&m0, "429"),
        down_after,
        error_after,
        all_up,
        left,
        error_left,
        note,
        top: top_calls(&m0, &m1, 4),
        wall: wall.elapsed(),
    }
}

fn print(opts: &Opts, rows: &[Row], wall: Duration) {
    let alone = rows
        .iter()
        .find(|r| r.variant == Variant::Alone)
        .map(Row::total);
    println!(
        "capo_outage: {} Machines in {} ({} before the outage, {} created during its first half); \
         {}% of {FAILING_ZONE}'s Nova server calls answer 503 for {} s, then the cloud recovers; \
         settle limit {} s; CAPI v1.12.5, CAPO v0.14.7, fake build time 2 s",
        opts.machines,
        ZONES.join("/"),
        opts.machines - opts.machines / 2,
        opts.machines / 2,
        opts.failure_rate * 100.0,
        opts.outage.as_secs(),
        opts.settle.as_secs(),
    );
    println!(
        "calls = cloud calls during the outage (fake's /metrics); Running = providerID set, phase Provisioned (no workload cluster, no Node)"
    );
    println!();
    println!(
        "| variant | compute | network | image | identity | total | 503 | 429 | not Running @+2m (ERROR) | all Running after | calls <= 1/10 of (a) | 100% Running <= 2m |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|");
    for r in rows {
        let ratio = match (r.variant, alone) {
            (Variant::Shipped | Variant::Tuned | Variant::Domain, Some(a)) => {
                let pass = r.total() * 10 <= a;
                format!(
                    "{} ({:.2}x)",
                    if pass { "pass" } else { "miss" },
                    r.total() as f64 / a.max(1) as f64
                )
            }
            (Variant::Shipped | Variant::Tuned | Variant::Domain, None) => {
                "n/a (no (a) run)".into()
            }
            _ => "-".into(),
        };
        let up = match r.all_up {
            Some(d) => format!("{} s", d.as_secs()),
            None => format!(
                "never ({} left after {} s, {} ERROR)",
                r.left,
                opts.settle.as_secs(),
                r.error_left
            ),
        };
        let running = if r.all_up.is_some_and(|d| d <= AFTER) {
            "pass"
        } else {
            "miss"
        };
        let c = &r.calls;
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} ({}) | {up} | {ratio} | {running} |",
            r.variant.name(),
            c[0],
            c[1],
            c[2],
            c[3],
            r.total(),
            r.got_503,
            r.got_429,
            r.down_after,
            r.error_after,
        );
    }
    println!();
    for r in rows {
        let leaves = if r.all_up.is_none() {
            format!(", leaves {} Machines failed for good", r.left)
        } else {
            String::new()
        };
        let note = if r.note.is_empty() {
            String::new()
        } else {
            format!("; {}", r.note)
        };
        println!(
            "{}: {} calls in the outage (most: {}){leaves}{note}; wall {} s",
            r.variant.name(),
            r.total(),
            r.top,
            r.wall.as_secs()
        );
    }
    println!(
        "wall time {} s on {} cores",
        wall.as_secs(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
}

fn main() {
    let opts = Opts::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let wall = Instant::now();
    let rows: Vec<Row> = rt.block_on(async {
        let mut rows = Vec::new();
        for v in &opts.variants {
            rows.push(run(&opts, *v).await);
        }
        rows
    });
    print(&opts, &rows, wall.elapsed());
}
