//! The fake cloud shared by `examples/fault_injector.rs` (the playground) and
//! `tests/it/stack.rs` (CI), so both exercise one implementation.
//!
//! A real cloud and real controllers (CAPO, CAPI, brupop) cannot run here, so
//! this plays their parts against a real kube-apiserver:
//! - the cloud: `cloud_api_error_ratio{kind}` on `/metrics`, the signal an
//!   outage alert is written on. It is independent of remedy: remedy's own
//!   transient ratio drops as soon as it holds resources (held status is
//!   frozen and excluded), so it cannot tell when the outage is over;
//! - the controllers: during an outage they write CAPO-style 503 failures
//!   (OpenStackMachine, copied up into its v1beta2 Machine) and brupop crash
//!   counts into status; a paused object is left alone (status frozen); an
//!   object that is not paused and whose failure was cleared is provisioned
//!   again and becomes healthy.

use anyhow::{Context, Result, bail};
use chrono::{SecondsFormat, Utc};
use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use remedy::model::profile::{CAPI_PAUSED, HOLD_ANNOTATION, HoldMark, PAUSE_MARKER};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// Name of the gauge the outage alert (`CloudAPIDegraded`) is written on.
pub const CLOUD_RATIO: &str = "cloud_api_error_ratio";
/// Conflicting writes retried before giving up (someone else keeps writing).
const MAX_CONFLICTS: u32 = 5;
/// How often the controllers relist everything: watch events do not fire
/// when only time passes (a server finishing its build).
const RESYNC: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    OpenStackMachine,
    Machine,
    BottlerocketShadow,
}

impl Kind {
    pub const ALL: [Kind; 3] = [
        Kind::OpenStackMachine,
        Kind::Machine,
        Kind::BottlerocketShadow,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::OpenStackMachine => "OpenStackMachine",
            Kind::Machine => "Machine",
            Kind::BottlerocketShadow => "BottlerocketShadow",
        }
    }

    /// Whether remedy can pause it (brupop has no pause switch).
    pub fn holdable(self) -> bool {
        !matches!(self, Kind::BottlerocketShadow)
    }

    /// The API the objects are created through: the storage versions of the
    /// testenv CRDs (Cluster API v1.12: v1beta2). Their conversion is None,
    /// so objects are read in this version too, never in another.
    fn api_resource(self) -> ApiResource {
        let (group, version, plural) = match self {
            Kind::OpenStackMachine => (
                "infrastructure.cluster.x-k8s.io",
                "v1beta1",
                "openstackmachines",
            ),
            Kind::Machine => ("cluster.x-k8s.io", "v1beta2", "machines"),
            Kind::BottlerocketShadow => ("brupop.bottlerocket.aws", "v2", "bottlerocketshadows"),
        };
        let gvk = GroupVersionKind::gvk(group, version, self.name());
        ApiResource::from_gvk_with_plural(&gvk, plural)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One managed object.
pub type Target = (Kind, String);

/// Where the event lines go: stdout for the CLI, a buffer in tests.
pub type Sink = Arc<dyn Fn(&str) + Send + Sync>;

#[derive(Clone, Debug)]
pub struct FleetSpec {
    /// Name prefix, also the `cluster.x-k8s.io/cluster-name` label.
    pub prefix: String,
    /// OpenStackMachines, each with the CAPI Machine that owns it.
    pub machines: usize,
    pub shadows: usize,
    /// OpenStackMachines that are broken for real (instance state ERROR,
    /// terminal): remedy must never touch them, outage or not.
    pub broken: usize,
    /// Share of each kind that fails during an outage.
    pub share: f64,
    /// Seeds which resources fail (plus the cycle number), so runs repeat.
    pub seed: u64,
    /// How long a server takes to build once its controller may retry.
    pub provision: Duration,
}

impl FleetSpec {
    pub fn machine_name(&self, i: usize) -> String {
        format!("{}-md-0-{i:02}", self.prefix)
    }

    pub fn osm_name(&self, i: usize) -> String {
        format!("{}-md-0-infra-{i:02}", self.prefix)
    }

    pub fn broken_name(&self, i: usize) -> String {
        format!("{}-md-0-infra-broken-{i}", self.prefix)
    }

    pub fn shadow_name(&self, i: usize) -> String {
        format!("brs-ip-10-42-0-{}.{}.internal", 10 + i, self.prefix)
    }

    /// How many of `n` fail during an outage.
    pub fn failing(&self, n: usize) -> usize {
        let share = if self.share.is_finite() {
            self.share.clamp(0.0, 1.0)
        } else {
            0.0
        };
        // Exact for the sizes used here (n ≤ thousands); rounding is the intent.
        ((n as f64 * share).round() as usize).min(n)
    }
}

/// What one outage did, as the controllers saw it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outage {
    pub cycle: u32,
    pub failed: Vec<Target>,
    /// Failed resources the controllers saw paused by remedy during the outage.
    pub held: BTreeSet<Target>,
}

impl Outage {
    pub fn holdable(&self) -> BTreeSet<Target> {
        self.failed
            .iter()
            .filter(|(k, _)| k.holdable())
            .cloned()
            .collect()
    }
}

#[derive(Default)]
struct State {
    ratio: BTreeMap<Kind, f64>,
    outage: Option<(Instant, Outage)>,
    /// Last pause annotation value seen per object, to report transitions.
    paused: HashMap<Target, Option<String>>,
    /// When a server build started (controllers retry after a clear).
    building: HashMap<Target, Instant>,
}

pub struct Injector {
    client: Client,
    namespace: String,
    spec: FleetSpec,
    sink: Sink,
    started: Instant,
    state: Mutex<State>,
}

impl Injector {
    pub fn new(client: Client, namespace: &str, spec: FleetSpec, sink: Sink) -> Arc<Self> {
        let ratio = Kind::ALL.iter().map(|k| (*k, 0.0)).collect();
        Arc::new(Self {
            client,
            namespace: namespace.to_string(),
            spec,
            sink,
            started: Instant::now(),
            state: Mutex::new(State {
                ratio,
                ..State::default()
            }),
        })
    }

    pub fn api(&self, kind: Kind) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, &kind.api_resource())
    }

    /// One event line, with the time since start.
    pub fn say(&self, msg: impl fmt::Display) {
        let t = self.started.elapsed().as_secs_f64();
        (self.sink)(&format!("[{t:>7.1}s] {msg}"));
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Plain data updated in single steps: a panic elsewhere cannot leave
        // it half-written, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_broken(&self, kind: Kind, name: &str) -> bool {
        kind == Kind::OpenStackMachine
            && (0..self.spec.broken).any(|i| self.spec.broken_name(i) == name)
    }

    /// Every object the fleet should have, broken ones excluded.
    pub fn targets(&self) -> Vec<Target> {
        let s = &self.spec;
        let mut out = Vec::new();
        for i in 0..s.machines {
            out.push((Kind::OpenStackMachine, s.osm_name(i)));
            out.push((Kind::Machine, s.machine_name(i)));
        }
        for i in 0..s.shadows {
            out.push((Kind::BottlerocketShadow, s.shadow_name(i)));
        }
        out
    }

    // ---- fleet --------------------------------------------------------

    /// Creates the namespace (if needed) and the fleet, healthy, except the
    /// broken OpenStackMachines. Objects that already exist are kept as they
    /// are, so a restarted injector picks up where it left off.
    pub async fn create_fleet(&self) -> Result<()> {
        self.ensure_namespace().await?;
        let s = &self.spec;
        let mut created = BTreeMap::<Kind, usize>::new();
        for i in 0..s.machines {
            let (machine, new_m) = self
                .create(Kind::Machine, machine_object(s, i), machine_healthy(s, i))
                .await?;
            let (_, new_o) = self
                .create(
                    Kind::OpenStackMachine,
                    osm_object(s, &s.osm_name(i), Some(&machine)),
                    osm_healthy(i),
                )
                .await?;
            *created.entry(Kind::Machine).or_default() += usize::from(new_m);
            *created.entry(Kind::OpenStackMachine).or_default() += usize::from(new_o);
        }
        for i in 0..s.broken {
            let (_, new) = self
                .create(
                    Kind::OpenStackMachine,
                    osm_object(s, &s.broken_name(i), None),
                    osm_broken(),
                )
                .await?;
            if new {
                self.say(format!(
                    "created OpenStackMachine {} broken for real (instance state ERROR, terminal): remedy must leave it alone",
                    s.broken_name(i)
                ));
            }
        }
        for i in 0..s.shadows {
            let (_, new) = self
                .create(
                    Kind::BottlerocketShadow,
                    shadow_object(s, i),
                    shadow_healthy(),
                )
                .await?;
            *created.entry(Kind::BottlerocketShadow).or_default() += usize::from(new);
        }
        let summary: Vec<String> = created.iter().map(|(k, n)| format!("{n} {k}")).collect();
        self.say(format!(
            "fleet ready in namespace {}: created {} (healthy), {} broken OpenStackMachine(s)",
            self.namespace,
            summary.join(", "),
            s.broken
        ));
        Ok(())
    }

    async fn ensure_namespace(&self) -> Result<()> {
        use k8s_openapi::api::core::v1::Namespace;
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": self.namespace}}))?;
        match Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
        {
            Ok(_) => {
                self.say(format!("created namespace {}", self.namespace));
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(e).context("create namespace"),
        }
    }

    /// Creates an object, then sets its status: the status subresource makes
    /// the apiserver drop `status` on create. Returns the object and whether
    /// it was new.
    async fn create(&self, kind: Kind, obj: Value, status: Value) -> Result<(DynamicObject, bool)> {
        let api = self.api(kind);
        let mut obj: DynamicObject = serde_json::from_value(obj)?;
        obj.metadata.namespace = Some(self.namespace.clone());
        let name = obj.name_any();
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = api.get(&name).await?;
                return Ok((existing, false));
            }
            Err(e) => return Err(e).with_context(|| format!("create {kind} {name}")),
        }
        let obj = api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .with_context(|| format!("set status of {kind} {name}"))?;
        Ok((obj, true))
    }

    // ---- the cloud's API error ratio ------------------------------------

    pub fn metrics_text(&self) -> String {
        let st = self.state();
        let mut out = format!(
            "# HELP {CLOUD_RATIO} Share of cloud API calls failing, by the kind of resource making them (fault injector).\n\
             # TYPE {CLOUD_RATIO} gauge\n"
        );
        for (kind, r) in &st.ratio {
            out.push_str(&format!("{CLOUD_RATIO}{{kind=\"{kind}\"}} {r}\n"));
        }
        out.push_str(&format!(
            "# HELP fault_injector_outage_active 1 while a scripted outage runs.\n\
             # TYPE fault_injector_outage_active gauge\n\
             fault_injector_outage_active {}\n",
            u8::from(st.outage.is_some())
        ));
        out
    }

    /// Serves `/metrics` (Prometheus text 0.0.4) on `addr`; returns the
    /// bound address (port 0 picks a free one).
    pub async fn serve_metrics(self: &Arc<Self>, addr: SocketAddr) -> Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listen on {addr}"))?;
        let bound = listener.local_addr()?;
        let me = self.clone();
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let body = me.metrics_text();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        body,
                    )
                }
            }),
        );
        let me = self.clone();
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                me.say(format!("metrics server stopped: {e}"));
            }
        });
        Ok(bound)
    }

    // ---- the outage -----------------------------------------------------

    /// Starts outage `cycle`: the cloud fails `share` of its calls, and the
    /// controllers of the affected resources write the failures into status.
    /// Paused resources are skipped (their controller is not reconciling).
    pub async fn start_outage(&self, cycle: u32) -> Result<Vec<Target>> {
        let s = &self.spec;
        let mut rng = StdRng::seed_from_u64(s.seed.wrapping_add(u64::from(cycle)));
        let pick = |n: usize, rng: &mut StdRng| {
            let mut idx: Vec<usize> = (0..n).collect();
            idx.shuffle(rng);
            idx.truncate(s.failing(n));
            idx.sort_unstable();
            idx
        };
        let machines = pick(s.machines, &mut rng);
        let shadows = pick(s.shadows, &mut rng);
        {
            let mut st = self.state();
            for r in st.ratio.values_mut() {
                *r = s.share;
            }
            st.outage = Some((
                Instant::now(),
                Outage {
                    cycle,
                    ..Outage::default()
                },
            ));
        }
        self.say(format!(
            "outage {cycle} begins: the cloud API fails {:.0}% of calls ({CLOUD_RATIO}={}); {} of {} machines and {} of {} shadows are hit",
            s.share * 100.0,
            s.share,
            machines.len(),
            s.machines,
            shadows.len(),
            s.shadows
        ));
        let mut failed = Vec::new();
        let message = nova_503(&s.prefix);
        for i in machines {
            let (osm, machine) = (s.osm_name(i), s.machine_name(i));
            if self.paused(Kind::OpenStackMachine, &osm).await?
                || self.paused(Kind::Machine, &machine).await?
            {
                self.say(format!(
                    "OpenStackMachine {osm}: paused, its controller is not reconciling: not failed"
                ));
                continue;
            }
            // CAPO records the failed server create; CAPI copies the
            // infrastructure failure up into its Machine.
            let wrote = self
                .patch_status_if(
                    Kind::OpenStackMachine,
                    &osm,
                    |o| !is_paused(o),
                    |_| osm_failed(&message),
                )
                .await?;
            if wrote {
                self.say(format!(
                    "OpenStackMachine {osm}: CAPO failureReason=CreateError (nova 503)"
                ));
                failed.push((Kind::OpenStackMachine, osm.clone()));
            }
            let wrote = self
                .patch_status_if(
                    Kind::Machine,
                    &machine,
                    |o| !is_paused(o),
                    |_| machine_failed(&osm, &message),
                )
                .await?;
            if wrote {
                self.say(format!(
                    "Machine {machine}: CAPI copied the failure into status.deprecated.v1beta1"
                ));
                failed.push((Kind::Machine, machine));
            }
        }
        for i in shadows {
            let name = s.shadow_name(i);
            if let Some(n) = self.crash(&name).await? {
                self.say(format!(
                    "BottlerocketShadow {name}: update failed, crash_count={n}"
                ));
                failed.push((Kind::BottlerocketShadow, name));
            }
        }
        if let Some((_, o)) = self.state().outage.as_mut() {
            o.failed = failed.clone();
        }
        Ok(failed)
    }

    /// brupop retries a failed update (it cannot be paused) and fails again:
    /// each failing shadow's crash_count goes up by one.
    pub async fn crash_again(&self) -> Result<usize> {
        let shadows: Vec<String> = match &self.state().outage {
            Some((_, o)) => o
                .failed
                .iter()
                .filter(|(k, _)| *k == Kind::BottlerocketShadow)
                .map(|(_, n)| n.clone())
                .collect(),
            None => Vec::new(),
        };
        let mut n = 0;
        for name in shadows {
            if let Some(c) = self.crash(&name).await? {
                self.say(format!(
                    "BottlerocketShadow {name}: retried the update, failed again, crash_count={c}"
                ));
                n += 1;
            }
        }
        Ok(n)
    }

    /// One brupop update failure: ErrorReset, crash_count + 1, failure time.
    async fn crash(&self, name: &str) -> Result<Option<u64>> {
        let mut count = None;
        let wrote = self
            .patch_status_if(
                Kind::BottlerocketShadow,
                name,
                |_| true,
                |o| {
                    let c = o.data["status"]["crash_count"].as_u64().unwrap_or(0) + 1;
                    count = Some(c);
                    json!({
                        "current_state": "ErrorReset",
                        "crash_count": c,
                        "state_transition_failure_timestamp":
                            Utc::now().to_rfc3339_opts(SecondsFormat::Nanos, false),
                    })
                },
            )
            .await?;
        Ok(if wrote { count } else { None })
    }

    /// The cloud recovers (ratio 0). Failure fields stay where they are:
    /// clearing them is remedy's job; the controllers resume on their own.
    pub fn end_outage(&self) -> Outage {
        let (started, outage) = {
            let mut st = self.state();
            for r in st.ratio.values_mut() {
                *r = 0.0;
            }
            st.outage
                .take()
                .unwrap_or((Instant::now(), Outage::default()))
        };
        let holdable = outage.holdable();
        self.say(format!(
            "outage {} ends after {:.0}s: the cloud API is healthy ({CLOUD_RATIO}=0); {} resources failed, remedy held {} of the {} holdable",
            outage.cycle,
            started.elapsed().as_secs_f64(),
            outage.failed.len(),
            outage.held.intersection(&holdable).count(),
            holdable.len()
        ));
        outage
    }

    /// Waits until every resource (broken ones aside) is healthy and not
    /// paused; returns how long that took, or what is still wrong.
    pub async fn wait_recovered(&self, timeout: Duration) -> Result<Duration> {
        let t = Instant::now();
        loop {
            let pending = self.unrecovered().await?;
            if pending.is_empty() {
                self.say(format!(
                    "recovered: all {} resources healthy and unpaused ({:.1}s)",
                    self.targets().len(),
                    t.elapsed().as_secs_f64()
                ));
                return Ok(t.elapsed());
            }
            if t.elapsed() > timeout {
                bail!(
                    "not recovered after {timeout:?}: {} of {} resources: {}",
                    pending.len(),
                    self.targets().len(),
                    pending.join("; ")
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn unrecovered(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for kind in Kind::ALL {
            for o in self.api(kind).list(&ListParams::default()).await?.items {
                let name = o.name_any();
                if self.is_broken(kind, &name) {
                    continue;
                }
                let why = if is_paused(&o) {
                    "paused"
                } else if has_failure(kind, &o) {
                    "failure status set"
                } else if !is_healthy(kind, &o) {
                    "not healthy yet"
                } else {
                    continue;
                };
                out.push(format!("{kind} {name}: {why}"));
            }
        }
        Ok(out)
    }

    async fn paused(&self, kind: Kind, name: &str) -> Result<bool> {
        Ok(is_paused(&self.api(kind).get(name).await?))
    }

    /// Merge-patches status computed from a fresh read if `check` holds on
    /// it, with a resourceVersion precondition (a concurrent write, e.g.
    /// remedy's hold, makes it re-read rather than overwrite). Returns
    /// whether it wrote.
    async fn patch_status_if(
        &self,
        kind: Kind,
        name: &str,
        check: impl Fn(&DynamicObject) -> bool,
        mut status: impl FnMut(&DynamicObject) -> Value,
    ) -> Result<bool> {
        let api = self.api(kind);
        for _ in 0..MAX_CONFLICTS {
            let obj = api.get(name).await?;
            if !check(&obj) {
                return Ok(false);
            }
            let body = json!({
                "metadata": {"resourceVersion": obj.resource_version()},
                "status": status(&obj),
            });
            match api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
            {
                Ok(_) => return Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => return Err(e).with_context(|| format!("patch status of {kind} {name}")),
            }
        }
        bail!("{kind} {name}: status write still conflicting after {MAX_CONFLICTS} attempts")
    }

    // ---- the controllers ------------------------------------------------

    /// Runs the controllers: a watch per kind for quick reactions, plus a
    /// periodic relist for what only time changes (a build finishing).
    pub fn spawn_controller(self: &Arc<Self>) -> JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let streams = Kind::ALL.map(|kind| {
                watcher(me.api(kind), watcher::Config::default())
                    .default_backoff()
                    .applied_objects()
                    .map(move |r| (kind, r))
                    .boxed()
            });
            let mut events = futures::stream::select_all(streams);
            let mut resync = tokio::time::interval(RESYNC);
            loop {
                tokio::select! {
                    ev = events.next() => match ev {
                        Some((kind, Ok(obj))) => me.reconcile(kind, &obj).await,
                        Some((kind, Err(e))) => me.say(format!("watch {kind}: {e} (retrying)")),
                        None => return,
                    },
                    _ = resync.tick() => {
                        for kind in Kind::ALL {
                            match me.api(kind).list(&ListParams::default()).await {
                                Ok(list) => {
                                    for o in &list.items {
                                        me.reconcile(kind, o).await;
                                    }
                                }
                                Err(e) => me.say(format!("relist {kind}: {e}")),
                            }
                        }
                    }
                }
            }
        })
    }

    /// What the controller of `kind` does with the object as it is now.
    async fn reconcile(self: &Arc<Self>, kind: Kind, obj: &DynamicObject) {
        let name = obj.name_any();
        let key = (kind, name.clone());
        self.note_pause(&key, obj);
        if is_paused(obj) || self.is_broken(kind, &name) || has_failure(kind, obj) {
            // Paused: not reconciling. Failed: CAPO/CAPI treat failureReason
            // as terminal and brupop waits out its backoff; only clearing
            // (remedy's job) lets them retry.
            return;
        }
        if is_healthy(kind, obj) {
            self.state().building.remove(&key);
            return;
        }
        if is_building(kind, obj) {
            let started = self.state().building.get(&key).copied();
            match started {
                // The build timer finishes it.
                Some(t) if t.elapsed() < self.spec.provision => {}
                // Late, or started before this process: finish now.
                _ => self.finish_build(kind, &name).await,
            }
            return;
        }
        let (status, line) = match kind {
            Kind::BottlerocketShadow => (
                shadow_healthy(),
                "crash_count reset: the agent resumes, state Idle",
            ),
            Kind::OpenStackMachine => (
                osm_building(),
                "not paused, failure cleared: CAPO retries, server BUILD",
            ),
            Kind::Machine => (
                machine_provisioning(),
                "not paused, failure cleared: CAPI reconciles, phase Provisioning",
            ),
        };
        let body = json!({
            "metadata": {"resourceVersion": obj.resource_version()},
            "status": status,
        });
        match self
            .api(kind)
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => {
                self.say(format!("{kind} {name}: {line}"));
                if kind.holdable() {
                    self.state().building.insert(key, Instant::now());
                    let me = self.clone();
                    let wait = self.spec.provision;
                    tokio::spawn(async move {
                        tokio::time::sleep(wait).await;
                        me.finish_build(kind, &name).await;
                    });
                }
            }
            // Changed under us: the watch delivers the newer version.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => self.say(format!("{kind} {name}: status write failed: {e}")),
        }
    }

    /// The server build completes: healthy, unless the object was paused or
    /// failed again meanwhile.
    async fn finish_build(&self, kind: Kind, name: &str) {
        let done = self
            .patch_status_if(
                kind,
                name,
                |o| !is_paused(o) && !has_failure(kind, o) && is_building(kind, o),
                |o| match kind {
                    Kind::OpenStackMachine => osm_active(o),
                    Kind::Machine => machine_running(),
                    Kind::BottlerocketShadow => shadow_healthy(),
                },
            )
            .await;
        match done {
            Ok(true) => {
                self.state().building.remove(&(kind, name.to_string()));
                let state = match kind {
                    Kind::OpenStackMachine => "server ACTIVE",
                    _ => "phase Running",
                };
                self.say(format!("{kind} {name}: {state}: healthy"));
            }
            Ok(false) => {}
            Err(e) => self.say(format!("{kind} {name}: build not finished: {e}")),
        }
    }

    /// Reports pause transitions and records remedy's holds of failed ones.
    fn note_pause(&self, key: &Target, obj: &DynamicObject) {
        let now = obj.annotations().get(CAPI_PAUSED).cloned();
        let mut st = self.state();
        let before = st.paused.insert(key.clone(), now.clone()).flatten();
        if now == before {
            return;
        }
        let (kind, name) = key;
        match now.as_deref() {
            Some(PAUSE_MARKER) => {
                let reason = obj
                    .annotations()
                    .get(HOLD_ANNOTATION)
                    .and_then(|r| HoldMark::parse(r))
                    .map(|r| r.reason)
                    .unwrap_or_else(|| "no hold record".into());
                if let Some((_, o)) = st.outage.as_mut()
                    && o.failed.contains(key)
                {
                    o.held.insert(key.clone());
                }
                drop(st);
                self.say(format!(
                    "{kind} {name}: paused by remedy ({reason}): reconciliation stops, status frozen"
                ));
            }
            Some(other) => {
                drop(st);
                self.say(format!(
                    "{kind} {name}: paused by someone else ({other}): reconciliation stops"
                ));
            }
            None => {
                drop(st);
                self.say(format!("{kind} {name}: unpaused: reconciling again"));
            }
        }
    }
}

// ---- object state, as the controllers judge it ---------------------------

pub fn is_paused(o: &DynamicObject) -> bool {
    o.annotations().contains_key(CAPI_PAUSED)
}

fn text_at<'a>(o: &'a DynamicObject, pointer: &str) -> Option<&'a str> {
    o.data
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Failure status as the kind's controller records it (and remedy clears).
pub fn has_failure(kind: Kind, o: &DynamicObject) -> bool {
    match kind {
        Kind::OpenStackMachine => {
            text_at(o, "/status/failureReason").is_some()
                || text_at(o, "/status/failureMessage").is_some()
        }
        Kind::Machine => [
            "/status/failureReason",
            "/status/failureMessage",
            "/status/deprecated/v1beta1/failureReason",
            "/status/deprecated/v1beta1/failureMessage",
        ]
        .iter()
        .any(|p| text_at(o, p).is_some()),
        Kind::BottlerocketShadow => {
            o.data["status"]["crash_count"].as_u64().unwrap_or(0) > 0
                || text_at(o, "/status/state_transition_failure_timestamp").is_some()
        }
    }
}

pub fn is_healthy(kind: Kind, o: &DynamicObject) -> bool {
    let s = &o.data["status"];
    match kind {
        Kind::OpenStackMachine => s["ready"] == json!(true) && s["instanceState"] == "ACTIVE",
        Kind::Machine => s["phase"] == "Running",
        Kind::BottlerocketShadow => s["current_state"] == "Idle" && !has_failure(kind, o),
    }
}

fn is_building(kind: Kind, o: &DynamicObject) -> bool {
    let s = &o.data["status"];
    match kind {
        Kind::OpenStackMachine => s["instanceState"] == "BUILD",
        Kind::Machine => s["phase"] == "Provisioning",
        Kind::BottlerocketShadow => false,
    }
}

// ---- real-shaped objects (see testenv/samples/) ---------------------------

fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn server_id(i: usize) -> String {
    format!("5d0c{i:04x}-61c9-4f43-8b7e-3b0f6a0e{i:04x}")
}

fn nova_503(prefix: &str) -> String {
    format!(
        "Failed to create server: Expected HTTP response code [202] when accessing \
         [POST https://nova.{prefix}.cloud.example:8774/v2.1/servers], but got 503 instead: \
         {{\"computeFault\": {{\"code\": 503, \"message\": \"Service Unavailable\"}}}}"
    )
}

fn cluster_labels(s: &FleetSpec) -> Value {
    json!({
        "cluster.x-k8s.io/cluster-name": s.prefix,
        "cluster.x-k8s.io/deployment-name": format!("{}-md-0", s.prefix),
    })
}

fn machine_object(s: &FleetSpec, i: usize) -> Value {
    let name = s.machine_name(i);
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": name, "labels": cluster_labels(s)},
        "spec": {
            "clusterName": s.prefix,
            "bootstrap": {
                "configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": format!("{name}-bootstrap")},
                "dataSecretName": format!("{name}-bootstrap"),
            },
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "OpenStackMachine", "name": s.osm_name(i)},
            "providerID": format!("openstack:///{}", server_id(i)),
            "failureDomain": "az-1",
            "version": "v1.33.1",
        },
    })
}

fn machine_healthy(s: &FleetSpec, i: usize) -> Value {
    let mut st = machine_running();
    st["nodeRef"] = json!({"name": s.machine_name(i)});
    st["addresses"] = json!([{"type": "InternalIP", "address": format!("10.6.0.{}", 10 + i)}]);
    st
}

fn machine_running() -> Value {
    let t = now();
    // metav1.Condition: the real CRD requires message, empty is allowed.
    let ok = |ty: &str| json!({"type": ty, "status": "True", "reason": ty, "message": "", "observedGeneration": 1, "lastTransitionTime": t});
    json!({
        "phase": "Running",
        "observedGeneration": 1,
        "initialization": {"bootstrapDataSecretCreated": true, "infrastructureProvisioned": true},
        "conditions": [ok("Available"), ok("Ready"), ok("InfrastructureReady"), ok("NodeHealthy")],
        "deprecated": {"v1beta1": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": t}]}},
    })
}

fn machine_provisioning() -> Value {
    let t = now();
    let waiting = |ty: &str| json!({"type": ty, "status": "False", "reason": "NotReady", "message": "* InfrastructureReady: server is being built", "observedGeneration": 1, "lastTransitionTime": t});
    json!({
        "phase": "Provisioning",
        "conditions": [waiting("Available"), waiting("Ready"),
            {"type": "InfrastructureReady", "status": "False", "reason": "NotProvisioned", "message": "server is being built", "observedGeneration": 1, "lastTransitionTime": t}],
        "deprecated": {"v1beta1": {"conditions": [{"type": "Ready", "status": "False", "severity": "Info", "reason": "WaitingForInfrastructure", "lastTransitionTime": t}]}},
    })
}

fn machine_failed(osm: &str, message: &str) -> Value {
    let t = now();
    let bad = |ty: &str| json!({"type": ty, "status": "False", "reason": "NotReady", "message": format!("* InfrastructureReady: {message}"), "observedGeneration": 1, "lastTransitionTime": t});
    json!({
        "phase": "Failed",
        "conditions": [bad("Available"), bad("Ready"),
            {"type": "InfrastructureReady", "status": "False", "reason": "InstanceCreateFailed", "message": message, "observedGeneration": 1, "lastTransitionTime": t}],
        "deprecated": {"v1beta1": {
            "failureReason": "CreateError",
            "failureMessage": format!("Failure detected from referenced resource infrastructure.cluster.x-k8s.io/v1beta1, Kind=OpenStackMachine with name \"{osm}\": {message}"),
            "conditions": [{"type": "Ready", "status": "False", "severity": "Error", "reason": "InstanceCreateFailed", "message": message, "lastTransitionTime": t}],
        }},
    })
}

fn osm_object(s: &FleetSpec, name: &str, owner: Option<&DynamicObject>) -> Value {
    let mut o = json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "OpenStackMachine",
        "metadata": {"name": name, "labels": cluster_labels(s)},
        "spec": {
            "flavor": "m1.large",
            "image": {"filter": {"name": "ubuntu-2204-kube-v1.33.1"}},
            "sshKeyName": format!("capo-{}", s.prefix),
            "ports": [{"network": {"filter": {"name": format!("k8s-clusterapi-cluster-default-{}", s.prefix)}}}],
        },
    });
    // CAPI owns the infrastructure machine through its Machine.
    if let Some(m) = owner {
        o["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "name": m.name_any(), "uid": m.uid().unwrap_or_default(),
            "controller": true, "blockOwnerDeletion": true,
        }]);
        o["spec"]["providerID"] = m.data["spec"]["providerID"].clone();
    }
    o
}

fn osm_healthy(i: usize) -> Value {
    let mut st = osm_active_status();
    st["instanceID"] = json!(server_id(i));
    st["addresses"] = json!([{"type": "InternalIP", "address": format!("10.6.0.{}", 10 + i)}]);
    st
}

fn osm_active_status() -> Value {
    let t = now();
    json!({
        "ready": true,
        "instanceState": "ACTIVE",
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": t},
            {"type": "InstanceReady", "status": "True", "lastTransitionTime": t},
        ],
    })
}

/// ACTIVE again, keeping the server id the object already records.
fn osm_active(obj: &DynamicObject) -> Value {
    let mut st = osm_active_status();
    if let Some(id) = obj.data["status"].get("instanceID") {
        st["instanceID"] = id.clone();
    }
    st
}

fn osm_building() -> Value {
    let t = now();
    let c = |ty: &str| json!({"type": ty, "status": "False", "severity": "Info", "reason": "InstanceNotReady", "message": "Instance state is BUILD", "lastTransitionTime": t});
    json!({"ready": false, "instanceState": "BUILD", "conditions": [c("Ready"), c("InstanceReady")]})
}

fn osm_failed(message: &str) -> Value {
    let t = now();
    let c = |ty: &str| json!({"type": ty, "status": "False", "severity": "Error", "reason": "InstanceCreateFailed", "message": message, "lastTransitionTime": t});
    json!({
        "ready": false,
        "instanceState": null,
        "failureReason": "CreateError",
        "failureMessage": message,
        "conditions": [c("Ready"), c("InstanceReady")],
    })
}

fn osm_broken() -> Value {
    let t = now();
    let c = |ty: &str| json!({"type": ty, "status": "False", "severity": "Error", "reason": "InstanceStateError", "message": "Instance state is ERROR", "lastTransitionTime": t});
    json!({
        "ready": false,
        "instanceState": "ERROR",
        "instanceID": "b4c1f0a2-61c9-4f43-8b7e-3b0f6a0e5d21",
        "failureReason": "UpdateError",
        "failureMessage": "OpenStack instance state \"ERROR\" is unexpected",
        "conditions": [c("Ready"), c("InstanceReady")],
    })
}

fn shadow_object(s: &FleetSpec, i: usize) -> Value {
    json!({
        "apiVersion": "brupop.bottlerocket.aws/v2",
        "kind": "BottlerocketShadow",
        "metadata": {"name": s.shadow_name(i)},
        "spec": {"state": "Idle", "version": "1.20.3"},
    })
}

fn shadow_healthy() -> Value {
    json!({
        "current_version": "1.20.3",
        "target_version": "1.20.3",
        "current_state": "Idle",
        "crash_count": 0,
        "state_transition_failure_timestamp": null,
    })
}
